"""A prompt and an answer of lengths of their own, concatenated along time: eager torch
against lazy_runtime with both lengths marked dynamic (``lr.mark_dynamic``).

    python benchmarks/prompt_answer.py [--steps 40]

A small causal-attention model (embedding, one attention layer, a head; the loss on the
answer only) trained with AdamW; each step's prompt length and answer length are drawn
uniform in [8, 64] (seed 0). The cat of the two along time is what used to compile
exactly (once per pair of lengths); each piece now keeps its symbol and the cat is padded
to the sum of their buckets (``ops/padding.py``). Reported: XLA compiles, the total time
of the run and the median step of its second half (each step ends with the loss read),
and the largest relative difference of a loss from eager torch's. A third contender runs
the forward under ``lr.compile(model, shapes=plan)`` (the analyzer's plan: replayed, and
replayed across sizes once enough lengths are traced) and the optimizer's step under
``lr.compile_optimizer``; a fourth the whole step under ``lr.compile_step`` (replayed
whole, and at length pairs never traced once its bucket's executable was traced at
three). Replayed calls across sizes: the forward's for the third, whole steps for the
fourth.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lazy_runtime as lr  # noqa: E402

lr.config.compile_cache = None   # cold compiles: their count and time are the point

VOCAB, WIDTH, BATCH = 500, 64, 8


class PromptAnswer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 4, batch_first=True)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, prompt, answer):
        x = torch.cat([self.embed(prompt), self.embed(answer)], 1)   # (B, P+A, C)
        h, _ = self.attn(x, x, x, need_weights=False, is_causal=False)
        logits = self.head(h + x)[:, prompt.shape[1] - 1:-1]         # predicts the answer
        return F.cross_entropy(logits.reshape(-1, VOCAB), answer.reshape(-1))


def batches(steps: int):
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, VOCAB, (BATCH, rng.randint(8, 64)), generator=g),
             torch.randint(0, VOCAB, (BATCH, rng.randint(8, 64)), generator=g))
            for _ in range(steps)]


def run(data, device, replayed: bool = False, whole: bool = False) -> dict:
    """``replayed``: the forward under ``lr.compile`` with the analyzer's plan (replayed
    across sizes once enough lengths are traced) and the optimizer's step replayed.
    ``whole``: the step (input copies, forward, backward, optimizer) under
    ``lr.compile_step``, its pieces marked dynamic inside it."""
    torch.manual_seed(0)
    model = PromptAnswer()
    plan = None
    if replayed:
        import shapeinfer
        plan = shapeinfer.analyze(model, args=data[0],
                                  dims={"prompt": ("B", "P"), "answer": ("B", "A")})
    if device is not None:
        model = model.to(device)
    # (a whole step keeps the step count on the device: capturable)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=whole)
    if replayed:
        model = lr.compile(model, shapes=plan)
        opt = lr.compile_optimizer(opt)

    def step(prompt, answer):
        if device is not None:
            prompt = lr.mark_dynamic(prompt.to(device), 1, "P")
            answer = lr.mark_dynamic(answer.to(device), 1, "A")
        loss = model(prompt, answer)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    if whole:
        step = lr.compile_step(step, model, opt)
    lr.clear_cache()
    lr.reset_metrics()
    losses, times = [], []
    start = time.perf_counter()
    for prompt, answer in data:
        t = time.perf_counter()
        loss = step(prompt, answer)
        if device is not None and not whole:
            lr.mark_step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
    m = lr.metrics()
    return {"losses": losses, "total_s": time.perf_counter() - start,
            "median_ms": statistics.median(times[len(times) // 2:]) * 1e3,
            "compiles": m["compiles"] if device is not None else 0,
            "exact": sum(m["exact_compiles"].values()) if device is not None else 0,
            "across_sizes": (m["step_replays_across_sizes"] if whole else
                             m["replays_across_sizes"]) if device is not None else 0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args(argv)
    data = batches(args.steps)
    eager = run(data, None)
    lazy = run(data, lr.device())
    replayed = run(data, lr.device(), replayed=True)
    whole = run(data, lr.device(), whole=True)
    print("| contender | compiles (exact) | calls replayed across sizes | total (s) "
          "| median step, 2nd half (ms) | largest loss difference from eager |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in (("eager torch", eager), ("lazy_runtime, P and A dynamic", lazy),
                     ("lazy_runtime, `lr.compile(model, shapes=plan)` and "
                      "`compile_optimizer`", replayed),
                     ("lazy_runtime, the whole step under `lr.compile_step`", whole)):
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], eager["losses"]))
        print(f"| {label} | {r['compiles']} ({r['exact']}) | {r['across_sizes']} "
              f"| {r['total_s']:.2f} | {r['median_ms']:.2f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
