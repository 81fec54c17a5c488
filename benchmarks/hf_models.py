"""Unmodified Hugging Face models training on the lazy device: eager torch, every step
traced, and the whole step replayed (``lr.compile_step``), side by side.

    python benchmarks/hf_models.py [--steps 10] [--rounds 5] [--write]

Tiny configs with random weights (nothing downloaded): a 2-layer Llama (hidden 64, GQA,
rotary) and a 2-layer BERT classifier, batch 4 x 32 tokens, AdamW. One step = forward,
loss, backward, optimizer step, zero_grad, loss read back. The three modes run in
alternating blocks of ``--steps`` steps (``--rounds`` each) after a warm-up of 6 steps
(the whole step is replayed from its third call); medians of all timed steps. "first
result": trace, compile and run of step 1 from an empty cache. ``--write`` puts the table
into benchmarks/RESULTS.md under "## Hugging Face models".
"""

from __future__ import annotations

import argparse
import copy
import datetime
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from results_file import replace_section  # noqa: E402

lr.config.compile_cache = None   # first results are timed with cold compiles

DATE = datetime.date.today().isoformat()   # (of the run)
WARMUP = 6


def _models():
    import transformers as T
    llama = T.LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                          max_position_embeddings=128)
    bert = T.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=128, num_labels=4, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return {"llama (causal LM)": (lambda: T.LlamaForCausalLM(llama), "lm"),
            "bert (classifier)": (lambda: T.BertForSequenceClassification(bert), "cls")}


def _batches(kind, n):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 512, (4, 32), generator=g)
        labels = ids if kind == "lm" else torch.randint(0, 4, (4,), generator=g)
        out.append({"input_ids": ids, "labels": labels})
    return out


def _step(model, opt, batch):
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _setups(make):
    """(name, step(batch) -> float) for eager, traced and whole-step modes."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = make()
    dev = lr.device()
    eager = copy.deepcopy(base)
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    traced = copy.deepcopy(base).to(dev)
    traced_opt = torch.optim.AdamW(traced.parameters(), lr=1e-3)
    whole = copy.deepcopy(base).to(dev)
    whole_opt = lr.compile_optimizer(torch.optim.AdamW(whole.parameters(), lr=1e-3))
    replayed = lr.compile_step(lambda b: _step(whole, whole_opt, b), whole, whole_opt)

    def on_device(b):
        return {k: v.to(dev) for k, v in b.items()}

    def traced_step(b):
        loss = _step(traced, traced_opt, on_device(b))
        lr.mark_step()
        return loss.item()

    return [("eager", lambda b: _step(eager, eager_opt, b).item()),
            ("traced", traced_step),
            ("whole step", lambda b: replayed(on_device(b)).item())]


def bench(make, kind, steps, rounds):
    batches = _batches(kind, WARMUP + steps)
    lr.clear_cache()
    setups = _setups(make)
    first = {}
    for name, fn in setups:
        t0 = time.perf_counter()
        fn(batches[0])
        first[name] = time.perf_counter() - t0
        for b in batches[1:WARMUP]:
            fn(b)
    times = {name: [] for name, _ in setups}
    for _ in range(rounds):
        for name, fn in setups:
            for b in batches[WARMUP:]:
                t0 = time.perf_counter()
                fn(b)
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return med, first, lr.metrics()["step_replays"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    rows = []
    for name, (make, kind) in _models().items():
        lr.reset_metrics()
        med, first, replays = bench(make, kind, a.steps, a.rounds)
        rows.append(f"| {name} | {med['eager']:.2f} | {med['traced']:.2f} | "
                    f"{med['whole step']:.2f} | {med['whole step'] / med['eager']:.2f}x | "
                    f"{first['traced']:.2f} | {first['whole step']:.2f} | {replays} |")
        print(rows[-1], flush=True)
    text = (f"## Hugging Face models ({DATE})\n\n"
            f"`python benchmarks/hf_models.py --steps {a.steps} --rounds {a.rounds} --write`. "
            "Unmodified transformers models (tiny configs, random weights), batch 4 x 32 "
            "tokens, AdamW; one training step per row, each ending with the loss read back. "
            "Eager, traced (every op recorded, `mark_step`) and whole step "
            "(`lr.compile_step`, `compile_optimizer`) run in alternating blocks; medians (ms). "
            "First result: step 1 (trace, compile, run; the cache emptied before the "
            "model's three modes). Replays: whole steps run without their Python.\n\n"
            "| model | eager (ms) | traced (ms) | whole step (ms) | whole step / eager "
            "| first result traced (s) | first result whole step (s) | replays |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")
    if a.write:
        replace_section("## Hugging Face models", text)


if __name__ == "__main__":
    main()
