"""Training steps whose sizes come from values: eager torch against lazy_runtime compiling
once per shape (``config.automatic_dynamic`` off: classic LazyTensor, as torch_xla) and
lazy_runtime as it is (the data-dependent sizes become dynamic dims: one compile per
bucket).

    python benchmarks/data_dependent.py [--steps 60]

Two workloads on a 2-layer transformer encoder (d_model 128, 4 heads, feed-forward 256,
vocabulary 1000, batch 16 of 64 tokens, Adam):

* ``masked-lm``: the loss over the ~15% masked tokens only, ``logits[mask]`` (the count
  is data: ``x[mask]`` runs eagerly, the graph after it sees a new count almost every
  step);
* ``trimmed``: sequence classification of a batch padded to 64 and trimmed to its
  longest sequence, ``ids[:, :int(lengths.max())]`` (lengths uniform in [8, 64]).

Each contender runs the same ``--steps`` batches (seed 0), each step ending with
``loss.item()``; torch uses the machine's threads. Reported: XLA compiles, total seconds,
the median step of the second half (steady state), and the largest loss difference
from eager.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lazy_runtime as lr  # noqa: E402

lr.config.compile_cache = None   # cold compiles: their count and cost are the point

VOCAB, D, B, T = 1000, 128, 16, 64


class Encoder(nn.Module):
    def __init__(self, out: int):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(D, 4, 256, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, out)

    def forward(self, ids, pad=None):
        return self.head(self.body(self.emb(ids), src_key_padding_mask=pad))


def masked_lm(model, ids, mask):
    logits = model(ids)
    return F.cross_entropy(logits[mask], ids[mask])


def trimmed(model, ids, lengths):
    n = int(lengths.max())
    ids = ids[:, :n]
    valid = torch.arange(n, device=ids.device)[None, :] < lengths[:, None]
    h = model(ids, pad=~valid)
    pooled = (h * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)
    return F.cross_entropy(pooled, lengths % 2)


def batches(kind: str, steps: int):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (B, T), generator=g)
        if kind == "masked-lm":
            out.append((ids, torch.rand(B, T, generator=g) < 0.15))
        else:
            out.append((ids, torch.randint(8, T + 1, (B,), generator=g)))
    return out


def run(kind: str, base: nn.Module, data, device) -> dict:
    model = copy.deepcopy(base).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = masked_lm if kind == "masked-lm" else trimmed
    lr.clear_cache()
    lr.reset_metrics()
    times, losses = [], []
    start = time.perf_counter()
    for a, b in data:
        t = time.perf_counter()
        loss = loss_fn(model, a.to(device), b.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device != "cpu":
            lr.mark_step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    m = lr.metrics()
    return {"compiles": m["compiles"] if device != "cpu" else 0, "total": total,
            "median_ms": statistics.median(times[len(times) // 2:]) * 1e3, "losses": losses}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args(argv)
    dev = lr.device()
    print(f"| workload | contender | compiles | total (s) | median step, 2nd half (ms) "
          f"| max loss diff |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in ("masked-lm", "trimmed"):
        torch.manual_seed(0)
        base = Encoder(VOCAB if kind == "masked-lm" else 2)
        data = batches(kind, args.steps)
        eager = run(kind, base, data, "cpu")
        rows = [("eager torch", eager)]
        for name, auto in (("lazy, once per shape", False), ("lazy (dynamic)", True)):
            lr.config.automatic_dynamic = auto
            rows.append((name, run(kind, base, data, dev)))
        lr.config.automatic_dynamic = True
        for name, r in rows:
            diff = max(abs(x - y) for x, y in zip(r["losses"], eager["losses"]))
            print(f"| {kind} | {name} | {r['compiles']} | {r['total']:.1f} | "
                  f"{r['median_ms']:.1f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
