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


def train(cls, kwargs: dict, data, device, mode: str, schedule=None) -> list:
    """The losses of each step, then the final parameters (on the CPU). Under float64 as
    the default dtype: a ``capturable`` optimizer (``compile_optimizer`` makes them so)
    keeps its step count in a tensor of the default dtype and computes its bias
    corrections in it, which in float32 moves float64 results by ~1e-9 (torch's own
    arithmetic on CUDA, which its CPU kernels refuse to run)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _train(cls, kwargs, data, device, mode, schedule)
    finally:
        torch.set_default_dtype(before)


def _train(cls, kwargs: dict, data, device, mode: str, schedule=None) -> list:
    model = make_model(cls).to(device)
    kwargs = {k: _on(v, device) for k, v in kwargs.items()}
    opt = cls(model.parameters(), **kwargs)
    sched = schedule(opt) if schedule is not None else None
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
        if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
            sched.step(losses[-1])
        elif sched is not None:
            sched.step()
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


def _lazy_runs(name: str, want: list, run, known=None) -> list[dict]:
    """A record per mode of ``run(mode)``'s results against ``want`` (torch's), with the
    replays and eager ops it counted; ``known``: why a raise is intended."""
    records = []
    for mode in MODES:
        lr.reset_metrics()

        def compare(mode=mode):
            why = _differs(want, run(mode))
            return {"status": "differs", "detail": why} if why else {"status": "match"}
        rec = {"optimizer": name, "mode": mode, **guarded(compare, failed="lazy_error")}
        if rec["status"] == "lazy_error" and known:
            rec["known"] = known
        m = lr.metrics()
        rec.update(replays=m["replays"], step_replays=m["step_replays"],
                   replay_misses=dict(m["replay_misses"]),
                   fallback_ops=dict(m["fallback_ops"]))
        records.append(rec)
    return records


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
        records += _lazy_runs(name, want, lambda mode: train(info.optim_cls, kwargs, data,
                                                            lr.device(), mode),
                              KNOWN.get(info.optim_cls.__name__))
    return records


def _schedulers() -> dict:
    """Each of torch's learning-rate schedulers, as set up in a training script."""
    S = torch.optim.lr_scheduler
    return {
        "StepLR": lambda o: S.StepLR(o, step_size=3, gamma=0.5),
        "MultiStepLR": lambda o: S.MultiStepLR(o, milestones=[2, 5, 9], gamma=0.3),
        "ConstantLR": lambda o: S.ConstantLR(o, factor=0.5, total_iters=4),
        "LinearLR": lambda o: S.LinearLR(o, start_factor=0.2, total_iters=8),
        "ExponentialLR": lambda o: S.ExponentialLR(o, gamma=0.9),
        "PolynomialLR": lambda o: S.PolynomialLR(o, total_iters=10, power=2.0),
        "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, T_max=10),
        "CosineAnnealingWarmRestarts": lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4),
        "LambdaLR": lambda o: S.LambdaLR(o, lambda k: 1 / (1 + k)),
        "MultiplicativeLR": lambda o: S.MultiplicativeLR(o, lambda k: 0.95),
        "CyclicLR": lambda o: S.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=3),
        "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=0.05, total_steps=40),
        "ReduceLROnPlateau": lambda o: S.ReduceLROnPlateau(o, patience=1, factor=0.5),
        "SequentialLR": lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.3, total_iters=3),
                                                     S.ExponentialLR(o, 0.9)],
                                                 milestones=[3]),
        "ChainedScheduler": lambda o: S.ChainedScheduler([S.ExponentialLR(o, 0.95),
                                                          S.StepLR(o, 4, 0.5)]),
    }


# The optimizers a schedule is swept with (CyclicLR and OneCycleLR cycle SGD's momentum
# and Adam's beta1 too).
SCHEDULED = {"SGD": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
             "Adam": (torch.optim.Adam, {"lr": 0.01}),
             "AdamW fused": (torch.optim.AdamW, {"lr": 0.01, "fused": True})}


def sweep_schedules(steps: int) -> list[dict]:
    """Each scheduler with each of ``SCHEDULED``'s optimizers, as ``sweep_one`` does."""
    data = make_data(steps)
    records = []
    for sname, schedule in _schedulers().items():
        for oname, (cls, kwargs) in SCHEDULED.items():
            name = f"{sname}: {oname}"
            want = train(cls, kwargs, data, "cpu", "eager", schedule)
            records += _lazy_runs(name, want, lambda mode: train(
                cls, kwargs, data, lr.device(), mode, schedule))
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
    p.add_argument("--schedulers", action="store_true",
                   help="sweep torch's learning-rate schedulers instead (SGD, Adam, fused "
                        "AdamW; --steps 12 by default)")
    a = p.parse_args(argv)
    from torch.testing._internal.common_optimizers import optim_db
    only = [s for s in a.only.split(",") if s]
    records = []
    if a.schedulers:
        runs = [sweep_schedules(a.steps if a.steps != 6 else 12)]
    else:
        runs = (sweep_one(info, a.steps) for info in optim_db
                if not only or info.optim_cls.__name__ in only)
    for run in runs:
        for rec in run:
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
