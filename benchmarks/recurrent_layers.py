"""Recurrent layers on the lazy device: one scan op per layer against the time loop
unrolled (what torch's composite records), and eager torch, for nn.LSTM, nn.GRU, nn.RNN.

    python benchmarks/recurrent_layers.py [--steps 64] [--reps 8] [--write]

One training step (forward, MSE-style loss, backward, Adam, ``mark_step`` and the loss
read back) of a one-layer model (batch 8, 32 -> 128) over ``--steps`` time steps. "first
result": trace, compile and run of step 1 from an empty cache; "step": the median of the
next ``--reps`` steps (each traced; the graph is cached). The unrolled rows force torch's
composite (the layer op declined), as the runtime ran GRU and RNN before 2026-11-22.
``--write`` puts the table into benchmarks/RESULTS.md under "## Recurrent layers".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from lazy_runtime.ops import recurrent  # noqa: E402
from results_file import replace_section  # noqa: E402

lr.config.compile_cache = None   # first results are timed with cold compiles

DATE = datetime.date.today().isoformat()   # (of the run)
KINDS = ("LSTM", "GRU", "RNN")


def _model(kind):
    torch.manual_seed(0)
    return getattr(torch.nn, kind)(32, 128, batch_first=True)


def _batches(steps, n):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(8, steps, 32, generator=gen) for _ in range(n)]


def _step(model, opt, x, dev=None):
    out, _ = model(x if dev is None else x.to(dev))
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if dev is not None:
        lr.mark_step()
    return loss.item()


def run_lazy(kind, batches, unrolled: bool):
    """(first result s, median step ms, compile s, ops recorded per step)."""
    dev = lr.device()
    model = _model(kind).to(dev)
    opt = torch.optim.Adam(model.parameters())
    lr.clear_cache()
    lr.reset_metrics()
    patch = mock.patch.object(recurrent, "_fits_layer_op", lambda *a, **k: False) \
        if unrolled else contextlib.nullcontext()
    times = []
    with patch:
        for x in batches:
            t0 = time.perf_counter()
            _step(model, opt, x, dev)
            times.append(time.perf_counter() - t0)
    m = lr.metrics()
    return (times[0], statistics.median(times[1:]) * 1e3, m["compile_seconds"],
            m["traced_ops"] // len(batches))


def run_eager(kind, batches):
    model = _model(kind)
    opt = torch.optim.Adam(model.parameters())
    times = []
    for x in batches:
        t0 = time.perf_counter()
        _step(model, opt, x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) * 1e3


def table(steps, reps) -> str:
    batches = _batches(steps, reps + 1)
    rows = ["| layer | eager step (ms) | scan: first result (s) | scan: step (ms) | scan: "
            "ops/step | unrolled: first result (s) | unrolled: step (ms) | unrolled: "
            "ops/step |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        eager = run_eager(kind, batches)
        scan = run_lazy(kind, batches, unrolled=False)
        unrolled = run_lazy(kind, batches, unrolled=True)
        rows.append(f"| {kind} | {eager:.1f} | {scan[0]:.2f} | {scan[1]:.1f} | {scan[3]} | "
                    f"{unrolled[0]:.2f} | {unrolled[1]:.1f} | {unrolled[3]} |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


def write_results(text: str, steps: int, reps: int) -> None:
    replace_section("## Recurrent layers", (
        f"## Recurrent layers ({DATE})\n\n`python benchmarks/recurrent_layers.py --steps "
        f"{steps} --reps {reps} --write`: one training step (Adam) of a one-layer model, "
        f"batch 8, 32 -> 128, {steps} time steps; traced every step. scan: each layer one "
        f"`lstm_layer`/`rnn_layer` op (a `lax.scan`); unrolled: torch's composite, one cell "
        f"per step (GRU and RNN ran so before this date). First result: trace + compile + "
        f"run from an empty cache.\n\n{text}\n"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    text = table(a.steps, a.reps)
    if a.write:
        write_results(text, a.steps, a.reps)


if __name__ == "__main__":
    main()
