"""Greedy decoding with a transformers Llama on the lazy device (lazy_runtime over JAX/XLA).

A tiny Llama built from its config with random weights (nothing downloaded) continues a
prompt over transformers' static KV cache, two ways:

* ``model.generate(..., cache_implementation="static")`` with the model under
  ``lr.compile(model, replay=True)``: the forward is replayed from the second token on
  (the cache object's tensors are written in place); ``generate``'s own loop is traced;
* a loop of one's own whose step, the cache an argument, ``lr.compile_step`` replays
  whole from the third token on, without its Python.

Both give eager torch's tokens. Printed: whether they do, the milliseconds a token of a
warm run of each (eager torch's beside them) and the metrics report.

    python examples/inference/decode_llama.py [--tokens N] [--device cuda]
"""

import argparse
import copy
import time

import torch

BATCH, PROMPT = 4, 5


def make_model(seed=0):
    import transformers as T
    torch.manual_seed(seed)
    config = T.LlamaConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4,
                           intermediate_size=512, max_position_embeddings=512)
    return T.LlamaForCausalLM(config).eval()


def prompt():
    return torch.arange(BATCH * PROMPT).reshape(BATCH, PROMPT) % 1000


def generate(model, tokens, device=None):
    """``model.generate``, greedy, over the static cache: the new tokens."""
    ids = prompt() if device is None else prompt().to(device)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, pad_token_id=0,
                             cache_implementation="static")
    return out[:, PROMPT:].cpu()


def own_loop(model, tokens, device=None, whole_step=False):
    """A greedy loop of one's own over ``StaticCache``; with ``whole_step`` (on the lazy
    device) its step is ``lr.compile_step``'s. The new tokens."""
    import transformers as T
    import lazy_runtime as lr
    cache = T.StaticCache(config=model.config, max_cache_len=PROMPT + tokens)

    def next_token(tok, cache):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    step = lr.compile_step(next_token, model) if whole_step else next_token
    with torch.no_grad():
        tok = next_token(prompt() if device is None else prompt().to(device), cache)
        out = [tok.cpu()]
        for _ in range(tokens - 1):
            tok = step(tok, cache)
            out.append(tok.cpu())
    return torch.cat(out, 1)


def _ms_per_token(fn, tokens) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / tokens * 1e3


def main(argv=None):
    import lazy_runtime as lr
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--device", default=None,
                        help="eager torch's device for the comparison (default: the CPU)")
    args = parser.parse_args(argv)
    tokens, eager_dev = args.tokens, args.device
    dev = lr.device()
    model = make_model()
    lazy = lr.compile(copy.deepcopy(model).to(dev), replay=True)
    model = model.to(eager_dev) if eager_dev else model
    for name, run, kw in (("generate", generate, {}),
                          ("own loop", own_loop, {"whole_step": True})):
        want = run(model, tokens, eager_dev)
        for _ in range(2):   # (the first run compiles; the second may still, once)
            got = run(lazy, tokens, dev, **kw)
        lr.reset_metrics()
        lazy_ms = _ms_per_token(lambda: run(lazy, tokens, dev, **kw), tokens)
        eager_ms = _ms_per_token(lambda: run(model, tokens, eager_dev), tokens)
        m = lr.metrics()
        print(f"{name:9s}: tokens as eager torch's: {torch.equal(got, want)}; "
              f"{lazy_ms:.2f} ms a token (eager torch {eager_ms:.2f}); replayed: "
              f"{m['replays']} forwards, {m['step_replays']} whole steps")
    print(lr.metrics_report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
