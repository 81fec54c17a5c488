"""The cost of the device-side index checks on a whole-step replay.

For each example, ``lr.compile_step`` of its training step is compiled twice, once with
``lr.config.check_indices`` on and once off (a fresh cache each time), and the two replay
in alternating blocks of the example's timed batches in one process (this machine is
shared and noisy: alternation spreads a noisy moment over both). Medians of the step
time (the call and reading the loss), in ms.

Usage: python benchmarks/index_checks.py [mlp,gpt] [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lazy_runtime as lr  # noqa: E402
import runtime_step as R  # noqa: E402


def replayed_steps(cfg) -> dict:
    """{"checks": step, "no checks": step}, each past its warm-up (traced, compiled)."""
    steps = {}
    for name, on in (("checks", True), ("no checks", False)):
        lr.clear_cache()
        lr.config.check_indices = on
        step = lr.compile_step(*R.lazy_step(cfg, "whole"))
        for x, y in cfg.batches[:R.WARMUP]:
            step(x, y).item()
        steps[name] = step
    lr.config.check_indices = True
    return steps


def bench(cfg, rounds: int) -> dict:
    steps = replayed_steps(cfg)
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            for x, y in cfg.batches[R.WARMUP:]:
                t0 = time.perf_counter()
                step(x, y).item()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="?", default="mlp,gpt")
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args(argv)
    for cfg in R.configs(20):
        if cfg.name in a.models.split(","):
            ms = bench(cfg, a.rounds)
            print(f"{cfg.name:8s} checks {ms['checks']:.3f} ms  no checks "
                  f"{ms['no checks']:.3f} ms  ratio {ms['checks'] / ms['no checks']:.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
