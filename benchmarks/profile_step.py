"""Where a replayed whole training step (``lr.compile_step``) spends its host time: the
step's median time, then a cProfile of ``--steps`` replayed steps by own time. The step is
``step_configs``' (its batch copied to the device in the step, the loss read back).

    python benchmarks/profile_step.py [mlp|cnn|lstm|gpt|mlp-wide] [--steps 400] [--top 30]

On a GPU the executable's call returns before the GPU is done, so the wait shows in the
loss read (``_read_direct``), not in the call.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from step_configs import config_named, training_step  # noqa: E402


def replayed_step(name: str, steps: int):
    """(``step(x, y) -> loss`` replayed whole, the batches) after warm-up."""
    cfg = config_named(name, steps)
    dev = lr.device()
    model = cfg.make_model().to(dev)
    opt = lr.compile_optimizer(cfg.ex.make_optimizer(model))
    step = lr.compile_step(training_step(cfg, model, opt, dev), model, opt)
    for i in range(10):
        x, y = cfg.batches[i % len(cfg.batches)]
        step(x, y).item()
    if not lr.metrics()["step_replays"]:
        raise SystemExit(f"{name}: the step was not replayed whole after 10 steps")
    return step, cfg.batches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="mlp")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    step, batches = replayed_step(a.model, a.steps)

    def run(n):
        for i in range(n):
            x, y = batches[i % len(batches)]
            step(x, y).item()

    times = []
    for i in range(a.steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        step(x, y).item()
        times.append(time.perf_counter() - t0)
    print(f"{a.model}: median step {statistics.median(times) * 1e3:.3f} ms over {a.steps} "
          f"replayed steps ({lr.config.jax_device()})")
    prof = cProfile.Profile()
    prof.enable()
    run(a.steps)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
