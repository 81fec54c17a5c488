"""Tracing cost per recorded op against the time the host spent elsewhere between steps.

    python benchmarks/trace_gap.py [mlp|cnn|lstm|gpt|mlp-wide] [--steps 40] [--gaps 0,2,10,50]

Each traced training step (``step_configs``' step: batch copy, forward, loss, backward,
optimizer; then ``mark_step`` and the loss read) is followed by a busy wait of ``gap`` ms
(Python spinning on the clock: no sleep, nothing else run), in blocks per gap, the gaps
alternated over ``--rounds``; printed: the median µs per recorded op of the step's Python
before ``mark_step``, per gap, and a pure-Python loop's time after the same gap (a
control: the interpreter's own speed). ``runtime_step.py``'s "µs per recorded op" waits on
the executable between steps, a gap as long as the step's compute.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from runtime_step import lazy_step, timed_step  # noqa: E402
from step_configs import config_named  # noqa: E402


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def python_loop() -> float:
    """µs of a fixed dict-and-int loop (the control)."""
    t0 = time.perf_counter()
    d = {}
    for i in range(3000):
        d[i % 97] = d.get(i % 97, 0) + i
    return (time.perf_counter() - t0) * 1e6


def measure(name: str, steps: int, gaps: list, rounds: int) -> dict:
    cfg = config_named(name, steps)
    step, _, _ = lazy_step(cfg, "plain")
    for x, y in cfg.batches[:5]:   # warm-up: compiles
        step(x, y)
        lr.mark_step()
    per_op = {g: [] for g in gaps}
    control = {g: [] for g in gaps}
    for _ in range(rounds):
        for gap in gaps:
            for i in range(steps):
                x, y = cfg.batches[i % len(cfg.batches)]
                spin(gap / 1e3)
                control[gap].append(python_loop())
                trace_s, _, ops = timed_step(step, x, y)
                per_op[gap].append(trace_s * 1e6 / ops)
    return {g: (statistics.median(per_op[g]), statistics.median(control[g])) for g in gaps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="mlp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gaps", default="0,2,10,50", help="ms between steps, comma-separated")
    a = p.parse_args()
    gaps = [float(g) for g in a.gaps.split(",")]
    for gap, (us, ctl) in measure(a.model, a.steps, gaps, a.rounds).items():
        print(f"{a.model} gap {gap:5.1f} ms: {us:5.1f} µs per recorded op; "
              f"control loop {ctl:6.1f} µs")


if __name__ == "__main__":
    main()
