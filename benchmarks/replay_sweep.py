"""Whole-step replay sweep: the padding rule tests' models trained under ``compile_step``.

Each test of ``tests/runtime/test_padding_rules.py`` that checks a model through its
``_check_padded`` helper (a function of inputs with dims marked dynamic and parameters,
run at several sizes) is run here instead as a training step: the function, the gradient
of its outputs' weighted sum (``_weighted_sum``), SGD (lr 1e-4) on its parameters. The
step runs at the test's sizes and nine more drawn inside their range (seeded), three
ways from the same inputs: eagerly, traced op by op on the lazy device, and whole under
``lr.compile_step`` (replayed, and replayed at sizes never traced once its bucket's
executable was traced at three). Every output and the final parameters are compared
with eager torch's (relative 1e-3 of the largest magnitude: float32 over ten steps).
``--unmarked`` passes the inputs unmarked (automatic dynamic learns the sizes).

Per model: ``match`` (both lazy ways agree with eager torch), ``differs`` (the way that
does not, and the first outputs), ``lazy_error`` (the lazy device raised) or
``eager_error`` (torch raised at one of the drawn sizes: the test's model needs sizes of
its own kind, not a finding); and the steps replayed at sizes never traced.

    python benchmarks/replay_sweep.py [--only cat_of_two,slices] [--unmarked] [--write]
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
sys.path.insert(0, str(ROOT / "tests"))

import lazy_runtime as lr  # noqa: E402

HEADING = "## Whole-step replay sweep: the padding rule tests' models under compile_step, inputs"


class _Params(torch.nn.Module):
    def __init__(self, params, device):
        super().__init__()
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(p.detach().clone().to(device)) for p in params])


def _more_sizes(sizes: list) -> list:
    """Nine sizes drawn (seeded) inside the range of ``sizes`` (ints or (H, W) pairs)."""
    rng = random.Random(1)

    def draw(vals):
        return rng.randint(max(2, min(vals) - 3), max(vals))
    if isinstance(sizes[0], tuple):
        return [(draw([h for h, _ in sizes]), draw([w for _, w in sizes])) for _ in range(9)]
    return [draw(sizes) for _ in range(9)] if isinstance(sizes[0], int) else []


def _train(fn, inputs, dims, params, mode, marked):
    """(outputs at each size, final parameters, steps replayed across sizes)."""
    import test_padding_rules as T
    dev = None if mode == "eager" else lr.device()
    holder = _Params(params, dev or "cpu")
    ps = list(holder.ps) or [torch.nn.Parameter(torch.zeros(1, device=dev))]
    opt = torch.optim.SGD(ps, lr=1e-4)

    def step(*xs):
        if dev is not None:
            xs = [(T._marked(x, m) if marked else x).to(dev) for x, m in zip(xs, dims)]
        out = fn(*xs, *holder.ps)
        T._backward(T._weighted_sum(out))
        opt.step()
        opt.zero_grad()
        return {k: v.detach() * 1 if v.is_floating_point() else v.detach()
                for k, v in out.items()}
    if mode == "whole":
        step = lr.compile_step(step, holder, opt)
    lr.clear_cache()
    lr.reset_metrics()
    outs = [{k: v.cpu() for k, v in step(*xs).items()} for xs in inputs]
    replays = lr.metrics()["step_replays_across_sizes"] if dev is not None else 0
    return outs, [p.detach().cpu() for p in holder.ps], replays


def _close(a, b) -> bool:
    a, b = a.double(), b.double()
    scale = max(1.0, a.abs().max().item()) if a.numel() else 1.0
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-3, atol=1e-3 * scale,
                                                 equal_nan=True)


def sweep_one(fn, make_inputs, dims, sizes, params, marked) -> dict:
    sizes = list(sizes) + _more_sizes(list(sizes))
    inputs = []
    for n in sizes:
        torch.manual_seed(hash(n) % 1000)   # (some tests' inputs draw unseeded)
        inputs.append([x.detach() for x in make_inputs(n)])
    try:
        want, p_want, _ = _train(fn, inputs, dims, params, "eager", marked)
    except Exception as e:   # noqa: BLE001 (a drawn size the model does not take)
        return {"status": "eager_error", "why": f"{type(e).__name__}: {e}"[:120]}
    out = {"status": "match", "replays": 0}
    for mode in ("traced", "whole"):
        try:
            got, p_got, replays = _train(fn, inputs, dims, params, mode, marked)
        except Exception as e:   # noqa: BLE001
            return {"status": "lazy_error", "why": f"{mode}: {type(e).__name__}: {e}"[:160]}
        bad = [f"{k} at {n}" for n, a, b in zip(sizes, want, got) for k in a
               if not _close(a[k], b[k])]
        bad += [f"parameter {i}" for i, (a, b) in enumerate(zip(p_want, p_got))
                if not _close(a, b)]
        if bad:
            return {"status": "differs", "why": f"{mode}: {', '.join(bad[:3])}"}
        if mode == "whole":
            out["replays"] = replays
    return out


def _calls(f):
    """The keyword arguments to call test ``f`` with (one set per parametrized case), or
    None where it takes fixtures."""
    params = inspect.signature(f).parameters
    if not params:
        return [{}]
    marks = [m for m in getattr(f, "pytestmark", []) if m.name == "parametrize"]
    if len(marks) != 1:
        return None
    names = [a.strip() for a in (marks[0].args[0].split(",")
                                 if isinstance(marks[0].args[0], str) else marks[0].args[0])]
    if set(names) != set(params):
        return None
    calls = []
    for v in marks[0].args[1]:
        v = getattr(v, "values", v)
        calls.append(dict(zip(names, v if len(names) > 1 else (v,))))
    return calls


def sweep(only=None, marked=True) -> list:
    """[(test name and case, result)] for each test that checks through ``_check_padded``."""
    import test_padding_rules as T
    rows = []
    current = [None]
    original = T._check_padded

    def check(fn, make_inputs, dims, sizes, params=(), **_):
        rows.append((current[0], sweep_one(fn, make_inputs, dims, sizes, params, marked)))
        return {"exact_compiles": {}, "compiles": 0, "recompile_reasons": [],
                "automatic_dynamic": [], "buckets": {}, "padded_executions": 0}
    T._check_padded = check
    try:
        for name in sorted(n for n in dir(T) if n.startswith("test_")):
            if only and not any(s in name for s in only):
                continue
            calls = _calls(getattr(T, name))
            for kw in calls or ():
                current[0] = name[5:] + (f"[{','.join(map(str, kw.values()))}]" if kw else "")
                n = len(rows)
                try:
                    getattr(T, name)(**kw)
                except Exception:   # noqa: BLE001 (the test's own asserts on counts)
                    pass
                print(f"  {current[0]}: {[r['status'] for _, r in rows[n:]]}",
                      file=sys.stderr, flush=True)
    finally:
        T._check_padded = original
    return rows


def report(rows, marked) -> str:
    counts = {}
    for _, r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    replayed = sum(1 for _, r in rows if r.get("replays"))
    lines = [f"`python benchmarks/replay_sweep.py{'' if marked else ' --unmarked'}`: "
             f"{len(rows)} checks of the padding rule tests' models, inputs "
             f"{'marked dynamic' if marked else 'unmarked (automatic dynamic)'}; "
             + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
             + f"; {replayed} of them replayed some step at sizes never traced "
             f"({sum(r.get('replays', 0) for _, r in rows)} steps in all).", ""]
    odd = [(n, r) for n, r in rows if r["status"] not in ("match",)]
    if odd:
        lines += ["| check | status | why |", "|---|---|---|"]
        lines += [f"| {n} | {r['status']} | {r.get('why', '')} |" for n, r in odd]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated parts of test names")
    ap.add_argument("--unmarked", action="store_true")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    from results_file import emit
    rows = sweep([s for s in args.only.split(",") if s] or None, not args.unmarked)
    heading = HEADING + (" unmarked" if args.unmarked else " marked")
    emit(heading, f"{heading} ({datetime.date.today()})\n\n{report(rows, not args.unmarked)}",
         args.write)
    return 1 if any(r["status"] in ("differs", "lazy_error") for _, r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
