"""A sampling loop whose model takes Python numbers that change every call: eager torch,
lazy_runtime traced, and ``lr.compile(model, replay=True)`` (its number arguments followed,
``lazy_runtime/replay_numbers.py``).

    python benchmarks/sampler.py [--steps 50]

A small denoiser (a sinusoidal embedding of the step ``t``, an int; four residual MLP
blocks; the noise level ``sigma``, a float, scales the input and the update) called once
per step of a 50-step schedule, as diffusion samplers call theirs, under ``no_grad``.
Reported: XLA compiles, calls replayed, the median call of the second half (each ends with
``mark_step``; the result is read once at the end) and the largest difference from eager
torch's result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lazy_runtime as lr  # noqa: E402

lr.config.compile_cache = None

WIDTH, BATCH = 256, 16


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.freqs = nn.Parameter(torch.exp(-torch.arange(WIDTH // 2) / (WIDTH // 2) * 9.2),
                                  requires_grad=False)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(WIDTH), nn.Linear(WIDTH, WIDTH),
                                                  nn.GELU(), nn.Linear(WIDTH, WIDTH))
                                    for _ in range(4))

    def forward(self, x, t, sigma):
        emb = torch.cat([torch.sin(self.freqs * t), torch.cos(self.freqs * t)])
        h = x / (sigma ** 2 + 1) ** 0.5 + emb
        for block in self.blocks:
            h = h + block(h)
        return x - sigma * h * 0.01


def run(model, steps: int, dev) -> dict:
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(0))
    if dev is not None:
        x = x.to(dev)
    lr.clear_cache()
    lr.reset_metrics()
    times = []
    with torch.no_grad():
        for i in range(steps):
            t0 = time.perf_counter()
            x = model(x, steps - i, 10.0 * 0.9 ** i)
            if dev is not None:
                lr.mark_step()
            times.append(time.perf_counter() - t0)
    out = x.cpu()
    m = lr.metrics()
    return {"out": out, "median_ms": statistics.median(times[steps // 2:]) * 1e3,
            "compiles": m["compiles"] if dev is not None else 0,
            "replays": m["replays"] if dev is not None else 0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args(argv)
    dev = lr.device()
    torch.manual_seed(0)
    eager = Denoiser().eval()
    state = eager.state_dict()

    def lazy(replay: bool):
        model = Denoiser().eval()
        model.load_state_dict(state)
        model = model.to(dev)
        return lr.compile(model, replay=True) if replay else model

    rows = [("eager torch", run(eager, args.steps, None)),
            ("lazy_runtime, traced", run(lazy(False), args.steps, dev)),
            ("lazy_runtime, lr.compile(replay=True)", run(lazy(True), args.steps, dev))]
    want = rows[0][1]["out"]
    print("| contender | compiles | calls replayed | median call, 2nd half (ms) "
          "| largest difference from eager |")
    print("|---|---:|---:|---:|---:|")
    for label, r in rows:
        diff = (r["out"] - want).abs().max().item()
        print(f"| {label} | {r['compiles']} | {r['replays']} / {args.steps} "
              f"| {r['median_ms']:.3f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
