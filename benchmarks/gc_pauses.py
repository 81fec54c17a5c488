"""Python's garbage collector during traced training steps, with the runtime's heap freeze
(``lazy_runtime.heap``, ``config.freeze_heap``) on and off.

    python benchmarks/gc_pauses.py [--steps 250] [--pairs 3] [--write]

The freeze happens once a process, so each (mode, example) runs in a process of its own,
the modes alternated pair by pair. Each process traces ``--steps`` steps of the example
(trace, ``mark_step``, loss read), timed after 5 warm-up steps, and counts Python's
collections of each generation through ``gc.callbacks`` with their time. Full
collections are rare (tens to hundreds of steps apart), so a step time's median never
shows them; the mean does. Then a long trace (``long_trace``: thousands of ops between
barriers), where they are frequent. ``--write`` puts the table into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Python's garbage collector in traced steps"
DATE = datetime.date.today().isoformat()   # (of the run)
NAMES = ("mlp", "cnn", "lstm", "gpt")


class Collections:
    """A ``gc.callbacks`` entry: Python's collections of each generation and their time."""

    def __init__(self):
        self.counts, self.spent, self.started = [0, 0, 0], [0.0, 0.0, 0.0], 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self.started = time.perf_counter()
        else:
            g = info["generation"]
            self.counts[g] += 1
            self.spent[g] += time.perf_counter() - self.started


def child(script, *args) -> dict:
    """The JSON a benchmark ``script`` run in a process of its own prints last."""
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child(*args) -> dict:
    return child(__file__, *args)


def one_process(name: str, freeze: bool, steps: int) -> dict:
    """Runs inside the child process: ``steps`` traced steps of example ``name``."""
    import gc
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lazy_runtime as lr
    from lazy_runtime import heap
    from runtime_step import lazy_step
    from step_configs import WARMUP, config_named

    lr.config.freeze_heap = freeze
    cfg = config_named(name, 20)
    step, _, _ = lazy_step(cfg, "plain")
    seen = Collections()
    times = []
    for i in range(steps + WARMUP):
        if i == WARMUP:
            gc.callbacks.append(seen)
        x, y = cfg.batches[i % len(cfg.batches)]
        t0 = time.perf_counter()
        loss = step(x, y)
        lr.mark_step()
        loss.item()
        if i >= WARMUP:
            times.append(time.perf_counter() - t0)
    gc.callbacks.remove(seen)
    return dict(mean_ms=statistics.mean(times) * 1e3, median_ms=statistics.median(times) * 1e3,
                counts=seen.counts, spent_ms=[s * 1e3 for s in seen.spent],
                frozen=heap.frozen_objects())


def long_trace(freeze: bool, reps: int = 30) -> dict:
    """Runs inside the child process: an Adam-like sequence of 7 ``_foreach_*`` ops over 60
    tensors, ``reps`` times between barriers (12,600 recorded ops a trace), 7 traces:
    µs per recorded op of trace + ``mark_step`` (compile after the first trace, Python's
    collections wherever they fall), median over the traces after one warm-up trace."""
    import torch
    sys.path.insert(0, str(ROOT))
    import lazy_runtime as lr

    lr.config.freeze_heap = freeze
    dev = lr.device()
    gen = torch.Generator().manual_seed(0)
    shapes = [(64, 64), (64,), (128, 64), (128,), (10, 128), (10,)] * 10
    ps, gs, ms, vs = ([torch.randn(s, generator=gen).to(dev) for s in shapes] for _ in range(4))

    def adam_like():
        torch._foreach_lerp_(ms, gs, 0.1)
        torch._foreach_mul_(vs, 0.999)
        torch._foreach_addcmul_(vs, gs, gs, 0.001)
        d = torch._foreach_sqrt(vs)
        torch._foreach_div_(d, 0.9)
        torch._foreach_add_(d, 1e-8)
        torch._foreach_addcdiv_(ps, ms, d, -0.001)
    per_op = []
    for k in range(8):
        t0 = time.perf_counter()
        for _ in range(reps):
            adam_like()
        lr.mark_step()
        lr.sync()
        if k:
            per_op.append((time.perf_counter() - t0) / (reps * 7 * len(ps)) * 1e6)
    return dict(us_per_op=statistics.median(per_op))


def run_long(pairs: int) -> dict:
    rows = {False: [], True: []}
    for p in range(pairs):
        for freeze in ((False, True) if p % 2 == 0 else (True, False)):
            r = _child("--child-long", str(int(freeze)))
            rows[freeze].append(r["us_per_op"])
            print(f"long trace freeze={'on ' if freeze else 'off'} {r['us_per_op']:.2f} us/op",
                  flush=True)
    return rows


def run(steps: int, pairs: int) -> dict:
    rows = {(n, m): [] for n in NAMES for m in (False, True)}
    for p in range(pairs):
        for name in NAMES:
            for freeze in ((False, True) if p % 2 == 0 else (True, False)):
                r = _child("--child", name, str(int(freeze)), str(steps))
                rows[name, freeze].append(r)
                print(f"{name:5s} freeze={'on ' if freeze else 'off'} mean {r['mean_ms']:6.2f} ms"
                      f" median {r['median_ms']:6.2f} ms | collections {r['counts']} "
                      f"({', '.join(f'{s:.1f}' for s in r['spent_ms'])} ms)", flush=True)
    return rows


def _med(rs, f):
    return statistics.median(f(r) for r in rs)


def table(rows, long_rows, steps, pairs) -> str:
    lines = [f"{HEADING} ({DATE})", "",
             f"`python benchmarks/gc_pauses.py --steps {steps} --pairs {pairs} --write`: each "
             f"example's traced training step (trace, `mark_step`, loss read) {steps} times "
             "after 5 warm-up steps, in a process of its own per run, with the runtime's heap "
             "freeze (`config.freeze_heap`, see lazy_runtime/README, Policies) off and on, "
             f"alternated; {pairs} processes per cell, medians over them. Full: Python's "
             "generation-2 collections in those steps and the time they took; young: the "
             "generation 0 and 1 collections' time per step.", "",
             "| example | freeze | full collections | their time (ms) | young (ms/step) "
             "| step mean (ms) | step median (ms) |",
             "|---|---|---|---|---|---|---|"]
    for name in NAMES:
        for freeze in (False, True):
            rs = rows[name, freeze]
            lines.append(
                f"| {name} | {'on' if freeze else 'off'} | {_med(rs, lambda r: r['counts'][2]):g}"
                f" | {_med(rs, lambda r: r['spent_ms'][2]):.1f}"
                f" | {_med(rs, lambda r: (r['spent_ms'][0] + r['spent_ms'][1]) / steps):.3f}"
                f" | {_med(rs, lambda r: r['mean_ms']):.2f}"
                f" | {_med(rs, lambda r: r['median_ms']):.2f} |")
    off, on = (statistics.median(long_rows[f]) for f in (False, True))
    lines += ["", "A long trace: an Adam-like sequence of 7 `_foreach_*` ops over 60 tensors, 30 "
              "times between barriers (12,600 recorded ops a trace, `long_trace`), µs per "
              f"recorded op of the trace and its `mark_step` (median of 7 traces per process, median of {pairs} processes): "
              f"freeze off {off:.2f}, on {on:.2f} ({on / off:.2f}x)."]
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, freeze, steps = sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
        print(json.dumps(one_process(name, freeze, steps)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child-long":
        print(json.dumps(long_trace(sys.argv[2] == "1")))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    text = table(run(a.steps, a.pairs), run_long(a.pairs), a.steps, a.pairs)
    emit(HEADING, text, a.write)


if __name__ == "__main__":
    main()
