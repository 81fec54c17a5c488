"""Eager torch's training step of each benchmarked example on one torch device, alone in
its process: medians in ms as JSON, for ``runtime_step --eager-device cuda``.

Why a process of its own: lazy_runtime names torch's PrivateUse1 backend, and torch (2.8
and later) then takes it for the process's accelerator, after which a CUDA backward fails
torch's own stream assert (pytorch/pytorch#161129). So the eager CUDA step cannot run in a
process that has imported lazy_runtime.

    python benchmarks/eager_step.py --device cuda [--steps 20] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from step_configs import WARMUP, configs, training_step


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_steps(cfg, device, rounds):
    """(median ms of the timed steps, seconds of the first step); every step copies its
    batch to ``device`` and reads the loss back, as the lazy and jax steps do."""
    model = cfg.make_model().to(device)
    opt = cfg.ex.make_optimizer(model)

    train = training_step(cfg, model, opt, device)

    def step(x, y):
        train(x, y).item()

    first = None
    for x, y in cfg.batches[:WARMUP]:
        t0 = time.perf_counter()
        step(x, y)
        first = first if first is not None else time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        for x, y in cfg.batches[WARMUP:]:
            t0 = time.perf_counter()
            step(x, y)
            times.append(time.perf_counter() - t0)
    _sync(device)
    return statistics.median(times) * 1e3, first


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    assert "lazy_runtime" not in sys.modules
    out = {}
    for cfg in configs(args.steps):
        ms, first = time_steps(cfg, args.device, args.rounds)
        out[cfg.name] = {"eager": ms, "eager_first_s": first}
        print(f"# {cfg.name}: {ms:.3f} ms", file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
