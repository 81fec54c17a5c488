"""A ResNeXt-style network's training step on the CPU: eager torch against the lazy device
with its convolutions lowered as XLA's own (the lowering before 2026-12-01), with its
grouped 3x3 ones as dense convolutions over block-diagonal weights, and with its 1x1 ones
as matrix products too (now); each mode in a process of its own, the modes alternated over
rounds; medians.

    python benchmarks/grouped_conv_step.py [--rounds 3] [--steps 10] [--batch 8]

The network: a 3x3 stem to 64 channels, then four bottleneck blocks (1x1, grouped 3x3 of
32 groups, 1x1, batch norm, a residual), widths 128 and 256 (4 and 8 channels a group),
the third block strided; average pooling and a linear head of 10 classes over 3 x 56 x 56
images; SGD with momentum, the whole step under ``lr.compile_step``. Reported per mode:
the first step (trace and compile, no compile cache on disk) and the median step after
two of warm-up, every step ending with the loss read back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

MODES = ("eager", "lazy, XLA's convolutions", "lazy, grouped ones block-diagonal",
         "lazy, and 1x1 ones matrix products")


class Bottleneck(nn.Module):
    def __init__(self, channels, width, stride=1, groups=32):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False),
            nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels))
        self.pool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.pool(x))


def network():
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        Bottleneck(64, 128), Bottleneck(64, 128), Bottleneck(64, 256, stride=2),
        Bottleneck(64, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def run_mode(mode: str, steps: int, batch: int) -> dict:
    torch.manual_seed(0)
    model = network()
    images = torch.randn(batch, 3, 56, 56)
    labels = torch.randint(0, 10, (batch,))
    if mode == "eager":
        device = "cpu"
    else:
        import lazy_runtime as lr
        from lazy_runtime.ops import nn as nn_lowerings
        # (a misspelt name would change nothing)
        assert hasattr(nn_lowerings, "MAX_BLOCKS") and hasattr(nn_lowerings, "_pointwise_on_cpu")
        if mode == MODES[1]:
            nn_lowerings.MAX_BLOCKS = 0
        if mode in MODES[1:3]:
            nn_lowerings._pointwise_on_cpu = lambda w: False
        device = lr.device()
        model = model.to(device)
        images, labels = images.to(device), labels.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    if mode != "eager":
        step = lr.compile_step(step, model, opt)
    times, losses = [], []
    for _ in range(steps + 3):
        start = time.perf_counter()
        losses.append(step(images, labels).item())
        times.append(time.perf_counter() - start)
    return {"first_s": times[0], "step_ms": 1e3 * statistics.median(times[3:]),
            "losses": losses}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.mode:
        print(json.dumps(run_mode(a.mode, a.steps, a.batch)))
        return
    results = {mode: [] for mode in MODES}
    for _ in range(a.rounds):
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, __file__, "--mode", mode, "--steps", str(a.steps),
                 "--batch", str(a.batch)], capture_output=True, text=True, check=True,
                env=dict(os.environ, LAZY_RUNTIME_COMPILE_CACHE="off"))
            results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    eager_ms = statistics.median(r["step_ms"] for r in results["eager"])
    print("| mode | first step (s) | step (ms) | / eager | last loss |")
    print("|---|---:|---:|---:|---:|")
    for mode, runs in results.items():
        ms = statistics.median(r["step_ms"] for r in runs)
        first = statistics.median(r["first_s"] for r in runs)
        print(f"| {mode} | {first:.2f} | {ms:.1f} | {ms / eager_ms:.2f}x | "
              f"{runs[0]['losses'][-1]:.5f} |")


if __name__ == "__main__":
    main()
