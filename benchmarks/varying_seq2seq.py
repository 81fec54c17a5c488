"""Sequences of varying length: an ``nn.Transformer`` seq2seq model trained on batches
whose source and target lengths change every step, eager torch against torch.compile and
lazy_runtime, the training code unmodified (no marks: automatic dynamic).

    python benchmarks/varying_seq2seq.py [--steps 40] [--cap-per-shape 10]
        [--cap-compile 0] [--write]

The model: token embeddings (padding id 0), ``nn.Transformer`` (d_model 64, 4 heads, two
encoder and two decoder layers, feed-forward 128, no dropout, batch first), a vocabulary
head; the causal target mask from ``generate_square_subsequent_mask`` and key padding
masks from the padding ids, as the PyTorch seq2seq tutorials write it. Batches of 16:
source lengths uniform in [8, 48], target lengths in [4, 40] (seed 0), the last tokens
of some rows padding. Cross entropy ignoring padding, SGD with momentum (Adam would turn
the key projection bias's gradient, zero but for rounding, into steps of the learning
rate in either direction, and losses would part whatever computes them); each step ends
with the loss read. torch uses one intra-op thread.

Contenders: eager torch; torch.compile with ``dynamic=True``; lazy_runtime with one
executable per shape (buckets off, as torch_xla compiles; capped); lazy_runtime as it
is (automatic dynamic learns the lengths from the second step on, power-of-two buckets);
the same under ``lr.compile_step`` (the step replayed whole once traces agree, at
lengths never traced too).
Reported: compiles (XLA's for the runtime, graphs for torch.compile), the exact-shape
compiles among them, graphs run per step, total and median step time, the largest
relative difference of a loss from eager torch's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lazy_runtime as lr  # noqa: E402

HEADING = "## Sequences of varying length: an nn.Transformer seq2seq trained unmodified"
DATE = datetime.date.today().isoformat()
VOCAB, BATCH = 100, 16


class Seq2Seq(nn.Module):
    """Token embeddings (padding id 0), ``nn.Transformer`` with ``layers`` encoder and
    decoder layers, a vocabulary head; the masks as the tutorials make them (also the
    model of ``tests/runtime/test_split_steps.py``, smaller)."""

    def __init__(self, vocab=VOCAB, d=64, heads=4, layers=2, ff=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.t = nn.Transformer(d, heads, layers, layers, ff, dropout=0.0, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        h = self.t(self.emb(src), self.emb(tgt), tgt_mask=mask, src_key_padding_mask=src == 0,
                   tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0)
        return self.out(h)


def lengths(steps: int) -> list:
    rng = random.Random(0)
    return [(rng.randint(8, 48), rng.randint(4, 40)) for _ in range(steps)]


def batch(step: int, S: int, T: int):
    """Source (16, S) and target (16, T + 1) ids; a quarter of the rows end in padding."""
    g = torch.Generator().manual_seed(step)
    src = torch.randint(1, VOCAB, (BATCH, S), generator=g)
    tgt = torch.randint(1, VOCAB, (BATCH, T + 1), generator=g)
    for rows, n in ((src[::4], S), (tgt[::4], T + 1)):
        rows[:, max(1, n * 3 // 4):] = 0
    return src, tgt


def run(name, steps, device=None, prepare=None, counter=None, whole=False):
    """``steps`` training steps; ``whole``: under ``lr.compile_step``."""
    torch.manual_seed(0)
    model = Seq2Seq()
    if device is not None:
        model = model.to(device)
    fwd = prepare(model) if prepare else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train_step(src, tgt):
        logits = fwd(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1),
                               ignore_index=0)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step_fn = lr.compile_step(train_step, model, opt) if whole else train_step
    times, losses = [], []
    for step, (S, T) in enumerate(lengths(steps)):
        src, tgt = batch(step, S, T)
        t0 = time.perf_counter()
        if device is not None and not whole:
            src, tgt = src.to(device), tgt.to(device)
        loss = step_fn(src, tgt)
        if device is not None and not whole:
            lr.mark_step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        print(f"  {name:>14s} step {step:3d} S={S} T={T} {times[-1] * 1e3:8.1f} ms",
              file=sys.stderr)
    out = {"times": times, "losses": losses, "compiles": counter() if counter else 0,
           "exact": 0, "graphs": None}
    if device is not None:
        m = lr.metrics()
        out["exact"] = sum(m["exact_compiles"].values())
        out["graphs"] = m["graphs_executed"] / len(times)
        out["buckets"] = m["buckets"]
    return out


def dynamo_graphs():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def table(rows: dict, steps: int, cap: int, cap_compile: int) -> str:
    eager = rows["eager torch"]
    flags = f"--steps {steps} --cap-per-shape {cap}" + (
        f" --cap-compile {cap_compile}" if cap_compile else "")
    lines = [f"{HEADING} ({DATE})", "",
             f"`python benchmarks/varying_seq2seq.py {flags} --write`: an `nn.Transformer` "
             "seq2seq model (d_model 64, 4 heads, 2 + 2 layers; causal and key padding "
             "masks as the tutorials write them), batches of 16, source lengths uniform in "
             "[8, 48] and target lengths in [4, 40] (a new pair almost every step), SGD "
             "with momentum, each step ending with the loss read; one intra-op thread for "
             "torch. The training code is the same for every contender: no marks. "
             "torch.compile with `dynamic=True` (Inductor's caches disabled); the per-shape "
             f"runtime (buckets off, as torch_xla) capped at {cap} steps.", "",
             "| contender | steps | compiles (exact) | graphs per step | total (s) "
             "| median step (ms) | median, last half (ms) | vs eager (same steps) "
             "| largest loss difference |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        n = len(r["times"])
        ratio = sum(r["times"]) / sum(eager["times"][:n])
        diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(r["losses"], eager["losses"]))
        graphs = "-" if r["graphs"] is None else f"{r['graphs']:.1f}"
        lines.append(f"| {name} | {n} | {r['compiles']} ({r['exact']}) | {graphs} "
                     f"| {sum(r['times']):.1f} | {statistics.median(r['times']) * 1e3:.1f} "
                     f"| {statistics.median(r['times'][n // 2:]) * 1e3:.1f} "
                     f"| {ratio:.2f}x | {diff:.1e} |")
    dyn = rows.get("lazy_runtime, automatic dynamic", {})
    if "buckets" in dyn:
        lines += ["", f"Buckets: {dyn['buckets']}."]
    for name, r in rows.items():
        if "replays" in r:
            lines += ["", f"{name}: {r['replays'][0]} of {len(r['times'])} steps replayed "
                      f"whole, {r['replays'][1]} of them at sizes never traced."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--cap-per-shape", type=int, default=10)
    p.add_argument("--cap-compile", type=int, default=0,
                   help="steps of torch.compile (0: all)")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    # torch.compile must compile for real: no FX-graph/Inductor caches from earlier runs
    # (set here, not at import: the tests import the model; Inductor reads it when loaded)
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    warnings.simplefilter("ignore")   # (torch's note on mixed mask types, every step)
    torch.set_num_threads(1)
    lr.config.compile_cache = None   # cold compiles: their count and time are the point
    dev = lr.device()
    rows = {"eager torch": run("eager", a.steps)}
    torch._dynamo.reset()
    rows["torch.compile (dynamic=True)"] = run(
        "torch.compile", a.cap_compile or a.steps,
        prepare=lambda m: torch.compile(m, dynamic=True), counter=dynamo_graphs)
    for name, policy, steps, whole in (
            ("lazy_runtime, one executable per shape", "off", a.cap_per_shape, False),
            ("lazy_runtime, automatic dynamic", "pow2", a.steps, False),
            ("lazy_runtime, automatic dynamic, compile_step", "pow2", a.steps, True)):
        lr.config.buckets = policy
        lr.clear_cache()
        lr.reset_metrics()
        rows[name] = run(name.split(", ")[-1][:14], steps, dev,
                         counter=lambda: lr.metrics()["compiles"], whole=whole)
        if whole:
            m = lr.metrics()
            rows[name]["replays"] = (m["step_replays"], m["step_replays_across_sizes"])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    emit(HEADING, table(rows, a.steps, a.cap_per_shape, a.cap_compile), a.write)


if __name__ == "__main__":
    main()
