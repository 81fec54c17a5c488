"""Hugging Face models, unmodified, on the lazy device: tiny configs with random weights
(nothing downloaded), the loss and every parameter's gradient against eager torch, with no
op falling back and one graph (forward, loss and backward) per model."""

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, assert_same

T = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from runtime_hf_sweep import models  # noqa: E402

SWEEP = models(T)


def _decoder(cls, config_cls):
    config = config_cls(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=37, max_position_embeddings=64)
    return cls(config)


def _ids(g, n=10):
    return torch.randint(0, 99, (2, n), generator=g)


def _generate_both(model, lazy_model, ids, kw):
    """(``lazy_model.generate``'s ids on the CPU, eager ``model.generate``'s), the
    metrics counting the lazy call only."""
    with torch.no_grad():
        want = model.generate(ids, **kw)
        lr.reset_metrics()
        return lazy_model.generate(ids.to(DEV), **kw).cpu(), want


MODELS = {
    # encoder with a padding mask, sequence classification
    "bert": (lambda: T.BertForSequenceClassification(T.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64, num_labels=3, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)),
        lambda g: dict(input_ids=_ids(g), labels=torch.tensor([0, 2]),
                       attention_mask=torch.tensor([[1] * 10, [1] * 7 + [0] * 3]))),
    # decoder with rotary embeddings, RMSNorm and grouped-query attention
    "llama": (lambda: _decoder(T.LlamaForCausalLM, T.LlamaConfig),
              lambda g: (lambda ids: dict(input_ids=ids, labels=ids))(_ids(g))),
    # from the sweep's table (``benchmarks/runtime_hf_sweep.py``): mixture of experts
    # (top-2 routing, tokens counted per expert by an integer histc as off the CPU, grouped
    # products), a state-space model (a selective scan, a depthwise causal convolution),
    # shifted-window attention (rolls, window partitions), Fourier token mixing (complex
    # values inside the graph)
    **{name: SWEEP[name][:2] for name in ("mixtral", "mamba", "swin", "fnet")},
    # encoder-decoder with relative position buckets
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, dropout_rate=0.0,
        decoder_start_token_id=0, pad_token_id=0)),
        lambda g: dict(input_ids=_ids(g), labels=_ids(g, 6))),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_loss_and_gradients_match_eager(name):
    make, inputs = MODELS[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().eval()
    lazy_model = copy.deepcopy(model).to(DEV)
    batch = inputs(torch.Generator().manual_seed(1))
    lr.mark_step()
    lr.reset_metrics()
    want = model(**batch).loss
    want.backward()
    got = lazy_model(**{k: v.to(DEV) for k, v in batch.items()}).loss
    got.backward()
    lr.mark_step()
    m = lr.metrics()
    assert m["fallback_ops"] == {} and m["graphs_executed"] == 1, m
    assert_same(got, want.detach(), 1e-5, 1e-5, "loss")
    for (pname, p), q in zip(model.named_parameters(), lazy_model.parameters()):
        if p.grad is not None:
            assert_same(q.grad, p.grad, 1e-4, 1e-5, pname)


def test_llama_training_step_is_replayed_whole_and_matches_eager():
    """``lr.compile_step`` on an unmodified transformers training step (AdamW): replayed
    without its Python from the third call of a signature on, losses equal to eager."""
    make, inputs = MODELS["llama"]
    torch.manual_seed(0)
    model = make()
    lazy_model = copy.deepcopy(model).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lazy_opt = lr.compile_optimizer(torch.optim.AdamW(lazy_model.parameters(), lr=1e-3))

    def step(model, opt, batch):
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    whole = lr.compile_step(lambda batch: step(lazy_model, lazy_opt, batch), lazy_model, lazy_opt)
    g = torch.Generator().manual_seed(1)
    lr.reset_metrics()
    for _ in range(6):
        batch = inputs(g)
        want = step(model, opt, batch).item()
        got = whole({k: v.to(DEV) for k, v in batch.items()}).item()
        assert got == pytest.approx(want, rel=1e-5)
    assert lr.metrics()["step_replays"] >= 2, lr.metrics()["replay_misses"]


@pytest.mark.parametrize("cache", [None, "static"], ids=["dynamic cache", "static cache"])
def test_llama_generate_matches_eager_with_a_few_compiles_not_one_per_token(cache):
    """``model.generate`` unmodified: the ids (and a dynamic cache) grow by one token a
    step, a static cache is written at a moving position. Padded to buckets, those steps
    share executables: a few per bucket of the length, not one per token."""
    make, _ = MODELS["llama"]
    torch.manual_seed(0)
    model = make().eval()
    lazy_model = copy.deepcopy(model).to(DEV)
    ids = _ids(torch.Generator().manual_seed(2), 5)
    # (an end token makes generate read whether every sequence has ended: one graph a
    # step, as a server's loop has; 98 never comes in these 40 steps)
    kw = dict(max_new_tokens=40, do_sample=False, pad_token_id=0, eos_token_id=98)
    if cache:
        kw["cache_implementation"] = cache
    got, want = _generate_both(model, lazy_model, ids, kw)
    assert torch.equal(got, want) and got.shape[1] == 45
    m = lr.metrics()
    assert m["graphs_executed"] >= 40, m["sync_reasons"]
    # lengths 6 to 45: the first graphs at their own shapes, then up to three per bucket
    # (8, 16, 32, 64: one within it, one where the ids cross into the next and one where
    # the cache, a token shorter, does): 12 with the dynamic cache, 9 with the static one
    assert m["compiles"] <= 14 and m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["fallback_ops"] == {}, m["fallback_ops"]


def test_llama_generate_with_a_static_cache_replays_its_forward(monkeypatch):
    """``lr.compile(model, replay=True)`` and ``generate`` with the static cache: the cache
    object is an argument whose tensors the forward writes in place (``index_copy_`` at
    its position tensor), so from the second decoding call on the forward is replayed, a
    second ``generate`` (a new cache) from its first; tokens as eager torch's. The ids
    growing beside it run padded, and the replayed forward, which only exact values reach,
    stays one op of that graph: inlined only where a padded value flows into it (once, a
    graph whose new inputs' sizes are guessed dynamic)."""
    import lazy_runtime.replay as lr_replay
    make, _ = MODELS["llama"]
    torch.manual_seed(0)
    model = make().eval()
    lazy_model = lr.compile(copy.deepcopy(model).to(DEV), replay=True)
    kw = dict(max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=98,
              cache_implementation="static")
    inlined = []
    real_inline = lr_replay.inline
    monkeypatch.setattr(lr_replay, "inline", lambda outs: inlined.append(1) or real_inline(outs))
    for seed in (2, 3):
        inlined.clear()
        ids = _ids(torch.Generator().manual_seed(seed), 5)
        got, want = _generate_both(model, lazy_model, ids, kw)
        assert torch.equal(got, want)
        m = lr.metrics()
        # the prefill is traced (its cache is not yet on the device: the reason counted)
        # and gives the first token; each later one is a decoding call (an end token may
        # come first), the first generate's first of them traced
        decoding = got.shape[1] - ids.shape[1] - 1
        assert decoding >= 15
        assert m["replays"] == decoding - (seed == 2), m["replay_misses"]
        assert m["padded_executions"] >= decoding - 4 and len(inlined) <= 1
        assert m["fallback_ops"] == {}, m["fallback_ops"]


def test_a_sliding_window_static_cache_is_traced_with_the_reason():
    """Mistral's sliding-window layers count positions in a Python int they branch on
    (``cumulative_length_int``): a call changes that attribute, so the forward is traced
    every step (never replayed with a stale count), and the tokens are eager torch's."""
    config = T.MistralConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=37, max_position_embeddings=64,
                             sliding_window=8)
    torch.manual_seed(0)
    model = T.MistralForCausalLM(config).eval()
    lazy_model = lr.compile(copy.deepcopy(model).to(DEV), replay=True)
    ids = _ids(torch.Generator().manual_seed(2), 5)
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=98,
              cache_implementation="static")   # (past the window of 8 from token 4 on)
    got, want = _generate_both(model, lazy_model, ids, kw)
    assert torch.equal(got, want)
    m = lr.metrics()
    assert m["replays"] == 0
    assert m["replay_misses"].get("changes an attribute of an argument object", 0) >= 10, \
        m["replay_misses"]


def test_a_decoding_loop_over_a_static_cache_is_replayed_whole():
    """A decoding loop of one's own over transformers' ``StaticCache`` (its tensors
    written in place by the forward), the step ``lr.compile_step(fn, model)`` with the
    cache an argument: every step from the third is replayed without its Python, the
    tokens as eager torch's."""
    make, _ = MODELS["llama"]
    torch.manual_seed(0)
    model = make().eval()
    lazy_model = copy.deepcopy(model).to(DEV)
    ids = _ids(torch.Generator().manual_seed(2), 5)
    runs = []
    for m, dev in ((model, None), (lazy_model, DEV)):
        cache = T.StaticCache(config=m.config, max_cache_len=32)

        def next_token(tok, cache, m=m):
            out = m(input_ids=tok, past_key_values=cache, use_cache=True)
            return out.logits[:, -1].argmax(-1, keepdim=True)
        step = lr.compile_step(next_token, m) if dev else next_token
        with torch.no_grad():
            tok = next_token(ids.to(dev) if dev else ids, cache)   # the prompt: traced
            lr.reset_metrics()
            toks = []
            for _ in range(20):
                tok = step(tok, cache)
                toks.append(tok.cpu())
        runs.append(torch.cat(toks, 1))
    assert torch.equal(runs[1], runs[0])
    m = lr.metrics()
    assert m["step_replays"] == 18 and m["fallback_ops"] == {}, m["replay_misses"]


def test_the_decoding_example_gives_eager_tokens(capsys):
    """``examples/inference/decode_llama.py``: both ways of decoding on the lazy device
    print that their tokens are eager torch's, and that they replayed."""
    import importlib.util
    path = Path(__file__).resolve().parents[2] / "examples" / "inference" / "decode_llama.py"
    spec = importlib.util.spec_from_file_location("decode_llama", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(["--tokens", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    generate_line = next(l for l in lines if l.startswith("generate"))
    loop_line = next(l for l in lines if l.startswith("own loop"))
    assert "tokens as eager torch's: True" in generate_line, generate_line
    assert "replayed: 5 forwards" in generate_line, generate_line
    assert "tokens as eager torch's: True" in loop_line, loop_line
    assert "3 whole steps" in loop_line, loop_line


def test_save_pretrained_from_the_device_round_trips(tmp_path):
    """``save_pretrained`` of a model on the lazy device: transformers and safetensors tell
    tensors that share memory apart by their storage's data pointer, which raised for a
    lazy tensor (save_pretrained failed). It now names the lazy buffer: tied weights are
    found tied, every other tensor saved, all as eager's."""
    torch.manual_seed(0)
    model = _decoder(T.LlamaForCausalLM, T.LlamaConfig)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    want = {k: v.clone() for k, v in model.state_dict().items()}
    model.to(DEV).save_pretrained(tmp_path)
    back = T.LlamaForCausalLM.from_pretrained(tmp_path)
    assert back.lm_head.weight is back.model.embed_tokens.weight
    got = back.state_dict()
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    x = torch.randn(3, 4).to(DEV)
    pointer = x.untyped_storage().data_ptr
    assert pointer() == x[1:].untyped_storage().data_ptr() != \
        torch.randn(3, 4).to(DEV).untyped_storage().data_ptr()
