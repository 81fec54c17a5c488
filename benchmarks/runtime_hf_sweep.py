"""Transformers model families on the lazy device, against eager torch: one forward, loss
and backward each, unmodified.

    python benchmarks/runtime_hf_sweep.py [gpt2,mixtral ...] [--write]

Tiny configs with random weights (nothing downloaded), two sequences of 10 tokens (or
two small images, or two short waveforms). Per model: the lazy loss against eager's, the
largest gradient difference over all parameters (relative to the largest eager gradient
of the model: a parameter's own scale would turn the rounding noise of gradients that are
mathematically zero, a key projection's bias under softmax, into large ratios), the ops
that ran eagerly (fallbacks), and the graphs run and compiled for forward plus backward
(one graph when nothing falls back; no compile where an earlier row compiled the same
graph: Mistral's is Llama's). ``--write`` puts the
table into benchmarks/RESULTS.md under "## lazy_runtime on transformers models".

What a row can show: a wrong lowering (the loss or a gradient off), an op without one (a
fallback: a graph cut, extra compiles), or a crash (the error, in the table).
"""

from __future__ import annotations

import argparse
import copy
import datetime
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

DATE = datetime.date.today().isoformat()   # (of the run)
TITLE = "## lazy_runtime on transformers models"


def _ids(g, n=10):
    return torch.randint(0, 99, (2, n), generator=g)


def _lm(g):
    ids = _ids(g)
    return dict(input_ids=ids, labels=ids)


def _classify(g):
    return dict(input_ids=_ids(g), labels=torch.tensor([0, 2]))


def _seq2seq(g):
    return dict(input_ids=_ids(g), labels=_ids(g, 6))


def _image(size):
    return lambda g: dict(pixel_values=torch.randn(2, 3, size, size, generator=g),
                          labels=torch.tensor([0, 2]))


def _tiny_vit(model, config, **extra):
    """A ViT-like classifier of 2 layers of width 32 over patches of 4 of a 16 x 16
    image (``model`` and ``config`` transformers' classes)."""
    return lambda: model(config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=37, image_size=16, patch_size=4,
                                num_labels=3, **extra))


def _decoder(T, name, **extra):
    extra.setdefault("intermediate_size", 37)
    cls, config = getattr(T, f"{name}ForCausalLM"), getattr(T, f"{name}Config")
    return cls(config(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=64, **extra))


def _encoder(T, name, **extra):
    cls = getattr(T, f"{name}ForSequenceClassification")
    config = getattr(T, f"{name}Config")
    return cls(config(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=37, max_position_embeddings=64, num_labels=3, **extra))


def models(T) -> dict:
    """name -> (make the model, make a batch from a generator, train mode?)."""
    gqa = dict(num_key_value_heads=2)
    return {
        "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(
            vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64)), _lm),
        "llama": (lambda: _decoder(T, "Llama", **gqa), _lm),
        "mistral": (lambda: _decoder(T, "Mistral", **gqa), _lm),
        "qwen2": (lambda: _decoder(T, "Qwen2", **gqa), _lm),
        "gemma": (lambda: _decoder(T, "Gemma", head_dim=8, **gqa), _lm),
        "phi": (lambda: _decoder(T, "Phi"), _lm),
        "gpt_neox": (lambda: _decoder(T, "GPTNeoX"), _lm),
        "olmo": (lambda: _decoder(T, "Olmo"), _lm),
        "stablelm": (lambda: _decoder(T, "StableLm", **gqa), _lm),
        "falcon": (lambda: T.FalconForCausalLM(T.FalconConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)), _lm),
        "bloom": (lambda: T.BloomForCausalLM(T.BloomConfig(
            vocab_size=99, hidden_size=32, n_layer=2, n_head=4)), _lm),
        "gptj": (lambda: T.GPTJForCausalLM(T.GPTJConfig(
            vocab_size=99, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64)), _lm),
        "opt": (lambda: T.OPTForCausalLM(T.OPTConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            ffn_dim=37, max_position_embeddings=64, word_embed_proj_dim=32)), _lm),
        # mixture of experts (widths of 4s: torch's CPU grouped product wants 16-byte strides)
        "mixtral": (lambda: _decoder(T, "Mixtral", intermediate_size=40, num_local_experts=4,
                                     num_experts_per_tok=2, **gqa), _lm),
        "qwen2_moe": (lambda: _decoder(T, "Qwen2Moe", intermediate_size=40,
                                       moe_intermediate_size=40,
                                       shared_expert_intermediate_size=40, num_experts=4,
                                       num_experts_per_tok=2, **gqa), _lm),
        "mamba": (lambda: T.MambaForCausalLM(T.MambaConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2,
            conv_kernel=4)), _lm),
        # (train mode: RWKV's eval path writes its state in place, and eager torch's
        # backward refuses it)
        "rwkv": (lambda: T.RwkvForCausalLM(T.RwkvConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
            intermediate_size=37, context_length=64)), _lm, True),
        "bert": (lambda: _encoder(T, "Bert"), _classify),
        "roberta": (lambda: _encoder(T, "Roberta"), _classify),
        "electra": (lambda: _encoder(T, "Electra", embedding_size=16), _classify),
        "albert": (lambda: _encoder(T, "Albert", embedding_size=16), _classify),
        "convbert": (lambda: _encoder(T, "ConvBert", embedding_size=32), _classify),
        "deberta_v2": (lambda: _encoder(T, "DebertaV2", relative_attention=True,
                                        pos_att_type=["p2c", "c2p"],
                                        max_relative_positions=16), _classify),
        "distilbert": (lambda: T.DistilBertForSequenceClassification(T.DistilBertConfig(
            vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
            max_position_embeddings=64, num_labels=3)), _classify),
        "xlnet": (lambda: T.XLNetForSequenceClassification(T.XLNetConfig(
            vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=37, num_labels=3)),
            _classify),
        # (added 2026-11-30, forty-eighth session: rotary positions, relative position
        # buckets, a funnel's pooled lengths, a bottlenecked BERT, a sliding window padded
        # to its multiple, block-sparse BigBird (full attention at these lengths), a
        # protein LM, a character model downsampled 4x)
        "roformer": (lambda: _encoder(T, "RoFormer", embedding_size=32), _classify),
        "mpnet": (lambda: _encoder(T, "MPNet"), _classify),
        "funnel": (lambda: T.FunnelForSequenceClassification(T.FunnelConfig(
            vocab_size=99, d_model=32, n_head=4, d_head=8, d_inner=37, block_sizes=[1, 1],
            num_decoder_layers=1, num_labels=3)), _classify),
        "megatron_bert": (lambda: _encoder(T, "MegatronBert"), _classify),
        "mobilebert": (lambda: _encoder(T, "MobileBert", embedding_size=16,
                                        intra_bottleneck_size=16, true_hidden_size=16,
                                        num_feedforward_networks=1), _classify),
        "longformer": (lambda: _encoder(T, "Longformer", attention_window=8), _classify),
        "big_bird": (lambda: _encoder(T, "BigBird", attention_type="original_full"),
                     _classify),
        "esm": (lambda: _encoder(T, "Esm", pad_token_id=1), _classify),
        "canine": (lambda: T.CanineForSequenceClassification(T.CanineConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            num_labels=3, downsampling_rate=4)), _classify),
        "fnet": (lambda: T.FNetForSequenceClassification(T.FNetConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, intermediate_size=37,
            max_position_embeddings=64, num_labels=3)), _classify),
        "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(
            vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
            dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)), _seq2seq),
        "bart": (lambda: T.BartForConditionalGeneration(T.BartConfig(
            vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
            decoder_ffn_dim=37, max_position_embeddings=64)), _seq2seq),
        "pegasus": (lambda: T.PegasusForConditionalGeneration(T.PegasusConfig(
            vocab_size=99, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
            decoder_ffn_dim=37, max_position_embeddings=64)), _seq2seq),
        "whisper": (lambda: T.WhisperForConditionalGeneration(T.WhisperConfig(
            vocab_size=99, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
            decoder_ffn_dim=37, num_mel_bins=8, max_source_positions=16,
            max_target_positions=32, decoder_start_token_id=1, pad_token_id=0)),
            lambda g: dict(input_features=torch.randn(2, 8, 32, generator=g),
                           labels=_ids(g, 6))),
        "wav2vec2": (lambda: T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=3,
            mask_time_prob=0.0)),
            lambda g: dict(input_values=torch.randn(2, 400, generator=g),
                           labels=torch.tensor([0, 2]))),
        # (relative positions: the Conformer's window centred in a table of 2 * 128 - 1)
        "wav2vec2_conformer": (lambda: T.Wav2Vec2ConformerForSequenceClassification(
            T.Wav2Vec2ConformerConfig(
                hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                intermediate_size=37, conv_dim=(16, 16), conv_stride=(5, 2),
                conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4, position_embeddings_type="relative",
                conv_depthwise_kernel_size=3, max_source_positions=128, num_labels=3,
                mask_time_prob=0.0, hidden_dropout=0.0, attention_dropout=0.0,
                activation_dropout=0.0, feat_proj_dropout=0.0)),
            lambda g: dict(input_values=torch.randn(2, 400, generator=g),
                           labels=torch.tensor([0, 2]))),
        "vit": (_tiny_vit(T.ViTForImageClassification, T.ViTConfig), _image(16)),
        "dinov2": (_tiny_vit(T.Dinov2ForImageClassification, T.Dinov2Config), _image(20)),
        "swin": (lambda: T.SwinForImageClassification(T.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
            window_size=4, num_labels=3)), _image(32)),
        "convnext": (lambda: T.ConvNextForImageClassification(T.ConvNextConfig(
            num_channels=3, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=3,
            image_size=32)), _image(32)),
        "resnet": (lambda: T.ResNetForImageClassification(T.ResNetConfig(
            num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
            num_labels=3)), _image(32)),
        "mobilenet_v2": (lambda: T.MobileNetV2ForImageClassification(T.MobileNetV2Config(
            image_size=32, depth_multiplier=0.25, num_labels=3)), _image(32)),
        # (added 2026-11-30 for ``varying_hf.py``'s image sizes: TensorFlow's same
        # padding, pads and interpolations only where a size needs them, a relative
        # position bias resampled to the image; this script's own table predates them)
        "mobilenet_v1": (lambda: T.MobileNetV1ForImageClassification(T.MobileNetV1Config(
            image_size=32, depth_multiplier=0.25, num_labels=3)), _image(32)),
        "regnet": (lambda: T.RegNetForImageClassification(T.RegNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8,
            num_labels=3)), _image(32)),
        "poolformer": (lambda: T.PoolFormerForImageClassification(T.PoolFormerConfig(
            hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3],
            strides=[4, 2], padding=[2, 1], num_labels=3)), _image(32)),
        "convnextv2": (lambda: T.ConvNextV2ForImageClassification(T.ConvNextV2Config(
            hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=3)), _image(32)),
        "focalnet": (lambda: T.FocalNetForImageClassification(T.FocalNetConfig(
            embed_dim=16, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3],
            image_size=32, patch_size=4, num_labels=3)), _image(32)),
        "mobilevit": (lambda: T.MobileViTForImageClassification(T.MobileViTConfig(
            image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2, num_labels=3)), _image(32)),
        "beit": (_tiny_vit(T.BeitForImageClassification, T.BeitConfig,
                           use_relative_position_bias=True), _image(16)),
        # (added 2026-11-30, forty-eighth session, as those above: BEiT's relative
        # position bias in Data2Vec-Vision, DeiT's and ViT-MSN's resampled positions, a
        # pyramid ViT with spatial reduction, BiT's weight-standardized convolutions and
        # "same" pooling, SwiftFormer's convolutional attention)
        "data2vec_vision": (_tiny_vit(T.Data2VecVisionForImageClassification,
                                      T.Data2VecVisionConfig,
                                      use_relative_position_bias=True), _image(16)),
        "deit": (_tiny_vit(T.DeiTForImageClassification, T.DeiTConfig), _image(16)),
        "vit_msn": (_tiny_vit(T.ViTMSNForImageClassification, T.ViTMSNConfig), _image(16)),
        "pvt_v2": (lambda: T.PvtV2ForImageClassification(T.PvtV2Config(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
            num_labels=3)), _image(32)),
        "bit": (lambda: T.BitForImageClassification(T.BitConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_groups=4,
            num_labels=3)), _image(32)),
        "swiftformer": (lambda: T.SwiftFormerForImageClassification(T.SwiftFormerConfig(
            depths=[1, 1, 1, 1], embed_dims=[8, 16, 16, 16], num_labels=3)), _image(32)),
        "segformer": (lambda: T.SegformerForImageClassification(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
            num_labels=3)), _image(32)),
    }


def check(make, batch_of, train=False) -> dict:
    """One forward, loss and backward eagerly and lazily, compared."""
    torch.manual_seed(0)
    model = make().train(train)
    lazy = copy.deepcopy(model).to(lr.device())
    batch = batch_of(torch.Generator().manual_seed(1))
    lr.mark_step()
    lr.reset_metrics()
    t0 = time.perf_counter()
    want = model(**batch).loss
    want.backward()
    got = lazy(**{k: v.to(lr.device()) for k, v in batch.items()}).loss
    got.backward()
    lr.mark_step()
    pairs = [(p.grad, q.grad.cpu()) for p, q in zip(model.parameters(), lazy.parameters())
             if p.grad is not None]
    scale = max(want_g.abs().max().item() for want_g, _ in pairs)
    grad = max((got_g - want_g).abs().max().item() for want_g, got_g in pairs) / scale
    m = lr.metrics()
    return dict(loss=abs(got.item() - want.item()), grad=grad,
                fallbacks=dict(m["fallback_ops"]), graphs=m["graphs_executed"],
                compiles=m["compiles"], seconds=time.perf_counter() - t0)


def run(names) -> list:
    import transformers as T
    table = models(T)
    rows = []
    for name in names or table:
        make, batch_of, *train = table[name]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row = check(make, batch_of, bool(train and train[0]))
        except Exception as e:   # a crash is a result: reported, the sweep goes on
            row = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
        rows.append((name, row))
        print(name, row, flush=True)
    return rows


def markdown(rows) -> str:
    import transformers
    lines = [f"{TITLE} ({DATE})", "",
             f"`python benchmarks/runtime_hf_sweep.py --write`: transformers "
             f"{transformers.__version__}, torch {torch.__version__}. One forward, loss and "
             "backward per model, unmodified, tiny configs with random weights, eagerly and "
             "on the lazy device (see the script's docstring). Gradient difference: the "
             "largest over all parameters, relative to the model's largest eager gradient. "
             "Compiles: new ones (0 where an earlier row compiled the same graph).", "",
             "| model | loss difference | gradient difference | fallbacks | graphs run "
             "| compiles | seconds |", "|---|---:|---:|---|---:|---:|---:|"]
    for name, r in rows:
        if "error" in r:
            lines.append(f"| {name} | error: {r['error']} | | | | | |")
            continue
        falls = ", ".join(f"{k} x{v}" for k, v in r["fallbacks"].items()) or "none"
        lines.append(f"| {name} | {r['loss']:.1e} | {r['grad']:.1e} | {falls} | "
                     f"{r['graphs']} | {r['compiles']} | {r['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="?", default="", help="comma-separated (default: all)")
    p.add_argument("--write", action="store_true")
    a = p.parse_args(argv)
    rows = run([m for m in a.models.split(",") if m])
    text = markdown(rows)
    print(text)
    if a.write:
        replace_section(TITLE, text)
    return 1 if any("error" in r for _, r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
