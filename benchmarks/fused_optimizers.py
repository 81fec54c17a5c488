"""AdamW with ``fused=True`` on the lazy device: its kernel recorded (``ops/optim.py``)
against the same kernel run eagerly (the fallback it took before), and against the
default ``_foreach_*`` path, in whole training steps of MLPs.

    python benchmarks/fused_optimizers.py [--rounds 5] [--steps 30] [--write]

One process; the three modes alternate, round after round, each round a fresh model and
optimizer, ``--steps`` steps (forward, backward, ``step``, ``zero_grad``, ``mark_step``,
loss read) of which the first 5 are warm-up. Reported: the median step over the rounds'
medians, and ratios. ``--write`` puts the table into benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Fused optimizers recorded"
MODES = ("foreach", "fused, recorded", "fused, run eagerly")
SHAPES = {"mlp-64x8": (64, 8), "mlp-1024x4": (1024, 4)}
WARMUP = 5


def step_ms(mode: str, width: int, depth: int, steps: int) -> float:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import lazy_runtime as lr
    from lazy_runtime.dispatch import clear_handler_cache

    fused_op = torch.ops.aten._fused_adamw_.default
    lr.config.force_fallback.discard(fused_op)
    if mode == "fused, run eagerly":
        lr.config.force_fallback.add(fused_op)
    clear_handler_cache()
    dev = lr.device()
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)]
    model = nn.Sequential(*layers, nn.Linear(width, 4)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=mode != "foreach")
    x, y = torch.randn(32, width).to(dev), torch.randn(32, 4).to(dev)
    times = []
    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            lr.mark_step()
            loss.item()
            times.append(time.perf_counter() - t0)
    finally:
        lr.config.force_fallback.discard(fused_op)
        clear_handler_cache()
    return statistics.median(times[WARMUP:]) * 1e3


def bench(rounds: int, steps: int) -> dict:
    out = {}
    for name, (width, depth) in SHAPES.items():
        per_mode = {m: [] for m in MODES}
        for r in range(rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                per_mode[mode].append(step_ms(mode, width, depth, steps))
        out[name] = {m: statistics.median(v) for m, v in per_mode.items()}
        print(name, out[name], flush=True)
    return out


def table(rows: dict, rounds: int, steps: int) -> str:
    import jax
    import torch
    lines = [f"{HEADING} ({datetime.date.today().isoformat()})", "",
             f"`python benchmarks/fused_optimizers.py --rounds {rounds} --steps {steps} "
             f"--write`: jax {jax.__version__} on {jax.devices()[0].platform}, torch "
             f"{torch.__version__}. Whole training steps (forward, backward, AdamW, "
             "`mark_step`, loss read) of MLPs of width x depth Linear+GELU layers, batch 32; "
             "medians of steps, then of rounds, the modes alternated in one process. "
             "`fused, run eagerly` is `fused=True` before its kernel was recorded (forced "
             "with `config.force_fallback`): the step's graph is cut there and torch's CPU "
             "kernel runs on the host copies.",
             "",
             "| model | foreach (ms) | fused, recorded (ms) | fused, run eagerly (ms) "
             "| recorded / foreach | eagerly / recorded |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        rec, fe, eager = r["fused, recorded"], r["foreach"], r["fused, run eagerly"]
        lines.append(f"| {name} | {fe:.2f} | {rec:.2f} | {eager:.2f} | {rec / fe:.2f}x "
                     f"| {eager / rec:.2f}x |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    emit(HEADING, table(bench(a.rounds, a.steps), a.rounds, a.steps), a.write)


if __name__ == "__main__":
    main()
