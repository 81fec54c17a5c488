"""A transformers encoder trained with a padding mask made from its token ids: the step
traced every call against the same step under ``lr.compile_step`` (which computes the
encoder's host test of the mask, ``mask.all()``, again from each call's ids and replays
the step whole for each of its values), alternated in blocks; medians.

    python benchmarks/masked_encoder_step.py [--rounds 4]

BERT of 2 layers (hidden 64, 4 heads), batches of 8 x 32 tokens, every other batch with
three sequences padded by 5; AdamW through ``lr.compile_optimizer``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import lazy_runtime as lr  # noqa: E402


def make_step(base, whole: bool):
    dev = lr.device()
    model = copy.deepcopy(base).to(dev)
    opt = lr.compile_optimizer(torch.optim.AdamW(model.parameters(), 1e-3))

    def step(ids):
        ids = ids.to(dev)
        out = model(input_ids=ids, attention_mask=ids != 0).last_hidden_state
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if not whole:
            lr.mark_step()
        return loss
    return lr.compile_step(step, model, opt) if whole else step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    a = p.parse_args()
    import transformers as T
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = T.BertModel(T.BertConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=128)).eval()
    gen = torch.Generator().manual_seed(1)
    batches = []
    for i in range(40):
        ids = torch.randint(1, 99, (8, 32), generator=gen)
        if i % 2:
            ids[:3, -5:] = 0
        batches.append(ids)
    steps = {"traced": make_step(base, False), "whole": make_step(base, True)}
    for s in steps.values():   # warm-up: compiles, and the whole step's confirmations
        for b in batches[:8]:
            s(b).item()
    lr.reset_metrics()
    times = {k: [] for k in steps}
    for _ in range(a.rounds):
        for k, s in steps.items():
            for b in batches:
                t0 = time.perf_counter()
                s(b).item()
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"traced every step {med['traced']:.2f} ms, whole step replayed {med['whole']:.2f} ms"
          f" ({med['traced'] / med['whole']:.2f}x); replays {lr.metrics()['step_replays']} of "
          f"{len(times['whole'])} steps, compiles after warm-up {lr.metrics()['compiles']}")


if __name__ == "__main__":
    main()
