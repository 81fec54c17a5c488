"""Conformance sweep: torch's own optimizer database (OptimizerInfo) on the lazy device.

For every optimizer of ``torch.testing._internal.common_optimizers.optim_db`` and each of
its configurations there (``maximize``, ``amsgrad``, ``centered``, a tensor learning
rate, ...), in each implementation it supports (the per-tensor loop, ``foreach``,
``fused``), a small model (two linear layers, float64) trains for ``--steps`` steps from
the same weights on the same data, eagerly on the CPU and on the lazy device three ways:

- ``traced``: every step recorded op by op (``mark_step`` at its end);
- ``compile_optimizer``: ``lr.compile_optimizer(opt)``, the optimizer's step replayed;
- ``compile_step``: ``lr.compile_step(step, model, opt)`` over ``compile_optimizer(opt)``
  (as the runtime's README advises), the whole step replayed.

Each ends as ``match`` (every step's loss and the final parameters within 1e-9 of
torch's), ``differs``, ``lazy_error`` (the lazy device raised where torch did not) or
``skipped`` (torch itself refused the configuration); replays and ops run eagerly are
counted. ``LBFGS`` steps with a closure; ``SparseAdam`` needs sparse gradients, which have
no lazy form (its clear error is what is checked).

Usage: python benchmarks/optimizer_sweep.py [--steps 6] [--only Adam,SGD] [--json F]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from opinfo_sweep import guarded  # noqa: E402

MODES = ("traced", "compile_optimizer", "compile_step")
TOLERANCE = 1e-9   # float64 throughout


# Where the lazy device cannot give torch's result, and why.
KNOWN = {
    "SparseAdam": "refused: its sparse gradients (nn.Embedding(sparse=True)) have no lazy "
                  "form (lr.UnsupportedOperation, naming the dense alternative)",
}
# Optimizers whose trajectories amplify rounding: the steps compared, and why.
SHORT = {
    "LBFGS": (2, "chaotic on this problem: eager torch itself, with one weight moved by "
                 "1e-13, differs by 5e-12 at step 3, 5e-7 at step 4 and 0.2 at step 6"),
}


class _Lookup(nn.Module):
    """An embedding with sparse gradients, all SparseAdam takes."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 3, sparse=True)

    def forward(self, x):
        return self.embed((x.abs() * 3).long().clamp(max=9)).mean(1)


def make_model(cls=None):
    """Two linear layers (without biases for Muon, which takes matrices only); an
    embedding with sparse gradients for SparseAdam."""
    torch.manual_seed(0)
    if cls is torch.optim.SparseAdam:
        return _Lookup().double()
    bias = cls is not getattr(torch.optim, "Muon", None)
    return nn.Sequential(nn.Linear(6, 8, bias=bias), nn.Tanh(),
                         nn.Linear(8, 3, bias=bias)).double()


def make_data(steps: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 6, generator=g, dtype=torch.float64),
             torch.randn(5, 3, generator=g, dtype=torch.float64)) for _ in range(steps)]


def _on(value, device):
    """A configuration's value for ``device``: tensors (a tensor lr) moved there."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_on(v, device) for v in value)
    return value


def train(cls, kwargs: dict, data, device, mode: str) -> list:
    """The losses of each step, then the final parameters (on the CPU). Under float64 as
    the default dtype: a ``capturable`` optimizer (``compile_optimizer`` makes them so)
    keeps its step count in a tensor of the default dtype and computes its bias
    corrections in it, which in float32 moves float64 results by ~1e-9 (torch's own
    arithmetic on CUDA, which its CPU kernels refuse to run)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _train(cls, kwargs, data, device, mode)
    finally:
        torch.set_default_dtype(before)


def _train(cls, kwargs: dict, data, device, mode: str) -> list:
    model = make_model(cls).to(device)
    kwargs = {k: _on(v, device) for k, v in kwargs.items()}
    opt = cls(model.parameters(), **kwargs)
    closure_step = cls is torch.optim.LBFGS

    def step(x, y):
        if closure_step:
            def closure():
                opt.zero_grad()
                loss = (model(x) - y).square().mean()
                loss.backward()
                return loss
            loss = opt.step(closure)
        else:
            loss = (model(x) - y).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        if device != "cpu" and mode != "compile_step":
            lr.mark_step()
        return loss

    if mode in ("compile_optimizer", "compile_step"):
        lr.compile_optimizer(opt)
    if mode == "compile_step":
        step = lr.compile_step(step, model, opt)
    losses = []
    for x, y in data:
        if device != "cpu" and mode != "compile_step":
            x, y = x.to(device), y.to(device)
        losses.append(float(step(x, y).detach()))
    return losses + [p.detach().cpu() for p in model.parameters()]


def _differs(want: list, got: list) -> str | None:
    for i, (a, b) in enumerate(zip(want, got)):
        if isinstance(a, float):
            if abs(a - b) > TOLERANCE * max(1.0, abs(a)):
                return f"step {i + 1}'s loss {b!r} where torch gives {a!r}"
        elif not torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE):
            return f"parameter {i - len(want) + len(got)} differs by " \
                   f"{(a - b).abs().max().item():.2e}"
    return None


def variants(info):
    """(label, the optimizer's keyword arguments) for each configuration and
    implementation."""
    out = []
    for inp in info.optim_inputs_func(device="cpu"):
        if inp.params is not None:   # (per-group settings: the sweep's model has one group)
            continue
        impls = [("per-tensor", {"foreach": False})] if "foreach" in info.supported_impls \
            else [("default", {})]
        if "foreach" in info.supported_impls:
            impls.append(("foreach", {"foreach": True}))
        if "fused" in info.supported_impls and "cpu" in info.supports_fused_on:
            impls.append(("fused", {"fused": True}))
        for impl, extra in impls:
            kw = dict(inp.kwargs)
            if "fused" in extra:
                kw.pop("foreach", None)
            kw.update(extra)
            out.append((f"{inp.desc} [{impl}]", kw))
    return out


def sweep_one(info, steps: int) -> list[dict]:
    data = make_data(min(steps, SHORT.get(info.optim_cls.__name__, (steps,))[0]))
    records = []
    for label, kwargs in variants(info):
        name = f"{info.optim_cls.__name__}: {label}"
        try:
            want = train(info.optim_cls, kwargs, data, "cpu", "eager")
        except Exception as e:
            records.append({"optimizer": name, "mode": "-", "status": "skipped",
                            "detail": f"{type(e).__name__}: {str(e)[:150]}"})
            continue
        for mode in MODES:
            lr.reset_metrics()

            def compare(mode=mode):
                why = _differs(want, train(info.optim_cls, kwargs, data, lr.device(), mode))
                return {"status": "differs", "detail": why} if why else {"status": "match"}
            rec = {"optimizer": name, "mode": mode, **guarded(compare, failed="lazy_error")}
            if rec["status"] == "lazy_error" and info.optim_cls.__name__ in KNOWN:
                rec["known"] = KNOWN[info.optim_cls.__name__]
            m = lr.metrics()
            rec.update(replays=m["replays"], step_replays=m["step_replays"],
                       replay_misses=dict(m["replay_misses"]),
                       fallback_ops=dict(m["fallback_ops"]))
            records.append(rec)
    return records


def summary(records: list[dict]) -> str:
    lines = []
    counts = Counter((r["mode"], r["status"]) for r in records)
    for mode in MODES:
        rs = {s: n for (m, s), n in counts.items() if m == mode}
        lines.append(f"{mode}: " + ", ".join(f"{k} {v}" for k, v in sorted(rs.items())))
    for mode, key in (("compile_optimizer", "replays"), ("compile_step", "step_replays")):
        ran = [r for r in records if r["mode"] == mode and r["status"] == "match"]
        lines.append(f"{mode}: steps replayed in {sum(1 for r in ran if r[key])} of "
                     f"{len(ran)} matching configurations")
        why = Counter(k for r in ran if not r[key] for k in r["replay_misses"])
        lines.extend(f"    not replayed ({n}): {k[:110]}" for k, n in why.most_common())
    skipped = counts[("-", "skipped")]
    if skipped:
        lines.append(f"configurations torch itself refuses: {skipped}")
    for r in records:
        if r["status"] in ("differs", "lazy_error") and not r.get("known"):
            lines.append(f"    {r['status']:10s} {r['optimizer']} ({r['mode']}): "
                         f"{r.get('known') or 'UNEXPLAINED'} ({r.get('detail', '')[:90]})")
    known = Counter(f"{r['optimizer'].split(':')[0]}: {r['known']}" for r in records
                    if r.get("known"))
    lines.extend(f"    {n} runs, known: {k}" for k, n in known.items())
    for name, (steps, why) in SHORT.items():
        if any(r["optimizer"].startswith(name + ":") for r in records):
            lines.append(f"{name} compared over {steps} steps: {why}")
    falls = Counter(k for r in records for k in r.get("fallback_ops", {}))
    if falls:
        lines.append("ops that ran eagerly (runs reaching each): " + ", ".join(
            f"{k} {n}" for k, n in falls.most_common()))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--only", default="", help="comma-separated optimizer names (Adam)")
    p.add_argument("--json", default="", help="write every record here")
    a = p.parse_args(argv)
    from torch.testing._internal.common_optimizers import optim_db
    only = [s for s in a.only.split(",") if s]
    records = []
    for info in optim_db:
        if only and info.optim_cls.__name__ not in only:
            continue
        for rec in sweep_one(info, a.steps):
            records.append(rec)
            detail = rec.get("detail", "")[:80]
            print(f"{rec['optimizer']:60s} {rec['mode']:18s} {rec['status']}  {detail}",
                  flush=True)
    print(summary(records))
    if a.json:
        Path(a.json).write_text(json.dumps(copy.deepcopy(records), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
