"""Greedy decoding over a static KV cache: eager torch against lazy_runtime compiling once
per shape (``config.automatic_dynamic`` off: classic LazyTensor, as torch_xla) and
lazy_runtime as it is (the position a step writes and reads becomes a run-time offset
once it has moved: one graph for every position).

    python benchmarks/decode.py [--tokens 96]

A GPT-style decoder (2 layers, d_model 128, 4 heads, vocabulary 1000, cache of 128
positions, batch 4), one token per step after a one-token prompt, each step ending with
the new tokens read on the host (``tok.cpu()``). Three ways to write the cache step, as
user code does:

* ``int position``: ``k_cache[:, :, pos] = k`` and a mask ``arange(L) <= pos`` over the
  whole cache;
* ``growing slice``: the same write, attention over ``k_cache[:, :, :pos + 1]``;
* ``tensor position``: ``k_cache.index_copy_(2, pos, k)`` with ``pos`` a tensor (the
  way torch_xla users are told to write it; Hugging Face's static cache does).

Each of the three also under ``lr.compile_step`` (the caches the model's buffers, the
position an argument): the whole step replayed without its Python, at positions never
traced once three agree (the int position followed, ``lazy_runtime/step_numbers.py``).

And ``model.generate`` of transformers, unmodified (a Llama of the same size, greedy,
``eos_token_id`` set so that each step reads whether the sequences ended), with its
dynamic cache (grown by ``cat`` every step) and its static one (``index_copy_``).

And a greedy loop of one's own over transformers' ``StaticCache`` (the same Llama), the
cache an argument of the step: eager, traced, and under ``lr.compile_step`` (the
cache's tensors state of the step, written back in place).

And ``generate`` with the static cache under ``lr.compile(model, replay=True)``: the
cache object's tensors are written in place, so its forward is replayed from the
second decoding step (``replay.object_state``).

Reported: XLA compiles, total seconds, the median step of the second half (for
``generate``: compiles and total of a first call, ms a token of a third, warm one),
and whether every generated token equals eager torch's.
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

VOCAB, D, HEADS, LAYERS, L, B = 1000, 128, 4, 2, 128, 4
STYLES = ("int position", "growing slice", "tensor position")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, cache, pos, style):
        kc, vc = cache
        q, k, v = self.qkv(self.ln1(x)).view(B, 1, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        if style == "tensor position":
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
        else:
            kc[:, :, pos] = k[:, :, 0]
            vc[:, :, pos] = v[:, :, 0]
        if style == "growing slice":
            kc, vc = kc[:, :, :pos + 1], vc[:, :, :pos + 1]
        att = q @ kc.transpose(-1, -2) / (D // HEADS) ** 0.5
        if style != "growing slice":
            att = att.masked_fill(torch.arange(L, device=x.device) > pos, float("-inf"))
        y = (F.softmax(att, -1) @ vc).transpose(1, 2).reshape(B, 1, D)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(L, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, tok, caches, pos, style):
        x = self.wte(tok) + (self.wpe(pos) if style == "tensor position" else self.wpe.weight[pos])
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache, pos, style)
        return self.head(x)


def run(style: str, base: nn.Module, tokens: int, device, whole_step: bool = False) -> dict:
    """``whole_step``: the step under ``lr.compile_step`` (the caches the model's buffers,
    the position an argument)."""
    model = copy.deepcopy(base).to(device)
    lr.clear_cache()
    lr.reset_metrics()
    caches = [(torch.zeros(B, HEADS, L, D // HEADS, device=device),
               torch.zeros(B, HEADS, L, D // HEADS, device=device)) for _ in range(LAYERS)]

    def step(tok, at):
        return model(tok, caches, at, style)[:, -1].argmax(-1, keepdim=True)
    if whole_step:   # (what a replayed step writes, the model it names must own)
        model.caches = nn.Module()
        for i, kv in enumerate(caches):
            model.caches.register_buffer(f"k{i}", kv[0])
            model.caches.register_buffer(f"v{i}", kv[1])
        step = lr.compile_step(step, model)
    tok = torch.arange(B, device=device)[:, None]
    out, times = [], []
    start = time.perf_counter()
    with torch.no_grad():
        for pos in range(tokens):
            t = time.perf_counter()
            at = pos
            if style == "tensor position":   # (compile_step copies a CPU argument itself)
                at = torch.tensor([pos]) if whole_step else torch.tensor([pos]).to(device)
            tok = step(tok, at)
            out.append(tok.cpu())
            times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    m = lr.metrics()
    return {"compiles": m["compiles"] if device != "cpu" else 0, "total": total,
            "median_ms": statistics.median(times[len(times) // 2:]) * 1e3,
            "tokens": torch.cat(out, 1), "replays": m["step_replays"]}


def run_generate(cache: str, base: nn.Module, tokens: int, device, replay=False) -> dict:
    """Three ``generate`` calls: compiles and total of the first (from an empty cache), ms
    a token of the third (warm: the second may still compile one graph, a bucket first
    met under another symbol). ``replay``: under ``lr.compile(model, replay=True)``."""
    model = copy.deepcopy(base).to(device)
    if replay:
        model = lr.compile(model, replay=True)
    lr.clear_cache()
    lr.reset_metrics()
    prompt = torch.arange(B * 5).reshape(B, 5) % VOCAB
    kw = dict(max_new_tokens=tokens, do_sample=False, pad_token_id=0, eos_token_id=VOCAB - 1,
              cache_implementation=cache)
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt.to(device), **kw).cpu()
        runs.append(time.perf_counter() - start)
        if len(runs) == 1:   # (the first call's metrics)
            m = lr.metrics()
            lr.reset_metrics()
    return {"compiles": m["compiles"] if device != "cpu" else 0, "total": runs[0],
            "median_ms": runs[2] / tokens * 1e3, "tokens": out,
            "replays": m["replays"] if device != "cpu" else 0}


def run_own_loop(cache: str, base: nn.Module, tokens: int, device, whole_step=False) -> dict:
    """One's own greedy loop over transformers' ``StaticCache``: a token a step, the
    cache an argument of the step (``whole_step``: under ``lr.compile_step``)."""
    import transformers as T
    model = copy.deepcopy(base).to(device)
    lr.clear_cache()
    kv = T.StaticCache(config=model.config, max_cache_len=tokens + 8)

    def next_token(tok, kv):
        out = model(input_ids=tok, past_key_values=kv, use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)
    step = lr.compile_step(next_token, model) if whole_step else next_token
    prompt = (torch.arange(B * 5).reshape(B, 5) % VOCAB).to(device)
    out, times = [], []
    start = time.perf_counter()
    with torch.no_grad():
        tok = next_token(prompt, kv)
        lr.reset_metrics()
        for _ in range(tokens):
            t = time.perf_counter()
            tok = step(tok, kv)
            out.append(tok.cpu())
            times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    m = lr.metrics()
    return {"compiles": m["compiles"] if device != "cpu" else 0, "total": total,
            "median_ms": statistics.median(times[len(times) // 2:]) * 1e3,
            "tokens": torch.cat(out, 1), "replays": m["step_replays"]}


def llama():
    import transformers as T
    config = T.LlamaConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS,
                           num_attention_heads=HEADS, num_key_value_heads=HEADS,
                           intermediate_size=4 * D, max_position_embeddings=2 * L)
    return T.LlamaForCausalLM(config).eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args(argv)
    dev = lr.device()
    print("| cache written by | contender | compiles | total (s) | median step, 2nd half (ms) "
          "| tokens as eager |")
    print("|---|---|---:|---:|---:|---|")
    torch.manual_seed(0)
    base = Decoder()
    cases = [(style, run, base) for style in STYLES]
    try:
        cases += [(f"generate, {c} cache", run_generate, llama()) for c in ("dynamic", "static")]
        cases.append(("own loop, static cache", run_own_loop, llama()))
    except ImportError:
        print("(transformers is not installed: no generate rows)")
    for style, runner, model in cases:
        key = style.split(", ")[1].split()[0] if runner is not run else style
        eager = runner(key, model, args.tokens, "cpu")
        rows = [("eager torch", eager)]
        for name, auto in (("lazy, once per shape", False), ("lazy (dynamic)", True)):
            lr.config.automatic_dynamic = auto
            rows.append((name, runner(key, model, args.tokens, dev)))
        lr.config.automatic_dynamic = True
        if runner is not run_generate:
            r = runner(key, model, args.tokens, dev, whole_step=True)
            rows.append((f"lazy, compile_step ({r['replays']} replayed)", r))
        elif key == "static":   # (the dynamic cache grows by ``cat``: its forward is traced)
            r = run_generate(key, model, args.tokens, dev, replay=True)
            rows.append((f"lazy, compile(replay=True) ({r['replays']} replayed)", r))
        for name, r in rows:
            same = "yes" if torch.equal(r["tokens"], eager["tokens"]) else "no"
            print(f"| {style} | {name} | {r['compiles']} | {r['total']:.1f} | "
                  f"{r['median_ms']:.1f} | {same} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
