"""The host cost of a traced step's barrier, per example: ``mark_step`` as a whole and its
graph walk (``ir.linearize``: topological order, structural key, inputs), medians over
``--steps`` traced training steps after warm-up. The executable's run is inside
``mark_step`` too (asynchronous on a GPU, mostly synchronous on the CPU), so the walk's
share is the part a faster barrier can remove.

    python benchmarks/barrier_cost.py [--steps 60] [--models mlp,cnn,lstm,gpt]
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
from lazy_runtime import executor, ir  # noqa: E402
from step_configs import config_named, training_step  # noqa: E402

WARMUP = 5


def measure(name: str, steps: int) -> dict:
    cfg = config_named(name, steps)
    dev = lr.device()
    model = cfg.make_model().to(dev)
    step = training_step(cfg, model, cfg.ex.make_optimizer(model), dev)
    walks: list = []
    walk = ir.linearize

    def timed_walk(outputs):
        t0 = time.perf_counter()
        g = walk(outputs)
        walks.append(time.perf_counter() - t0)
        return g

    barriers = []
    executor.ir.linearize = timed_walk
    try:
        for i in range(WARMUP + steps):
            x, y = cfg.batches[i % len(cfg.batches)]
            loss = step(x, y)
            t0 = time.perf_counter()
            lr.mark_step()
            barriers.append(time.perf_counter() - t0)
            loss.item()
    finally:
        executor.ir.linearize = walk
    return {"mark_step_ms": statistics.median(barriers[WARMUP:]) * 1e3,
            "walk_us": statistics.median(walks[WARMUP:]) * 1e6,
            "ops": lr.metrics()["last_graph_ops"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--models", default="mlp,cnn,lstm,gpt")
    a = p.parse_args()
    print(f"{'model':8} {'ops in graph':>12} {'mark_step (ms)':>15} {'graph walk (µs)':>16}")
    for name in a.models.split(","):
        r = measure(name, a.steps)
        print(f"{name:8} {r['ops']:>12} {r['mark_step_ms']:>15.3f} {r['walk_us']:>16.0f}")


if __name__ == "__main__":
    main()
