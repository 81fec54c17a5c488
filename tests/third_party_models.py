"""Third-party models built from small configs with random weights, with the inputs and
sizes the shape oracle runs them at. Shared by tests/test_third_party.py and
benchmarks/third_party.py."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch

TOKEN_SIZES = [{"B": 2, "T": 7}, {"B": 3, "T": 12}, {"B": 1, "T": 5}, {"B": 4, "T": 16}]
BATCH_SIZES = [{"B": 2}, {"B": 3}, {"B": 1}, {"B": 5}]


@dataclass
class ThirdPartyTarget:
    name: str
    build: Callable[[], torch.nn.Module]
    make_inputs: Callable[[dict], dict]
    dims: dict
    sizes: list  # the first is the sample the analysis sees

    def source_files(self, model) -> list[str]:
        """The model's own source files (torch's excluded), where the oracle records."""
        files = {inspect.getsourcefile(type(m)) for m in model.modules()} - {None}
        return sorted(f for f in files if "/torch/" not in f)


def _tokens(s):
    return {"input_ids": torch.randint(0, 100, (s["B"], s["T"]))}


def _hf(cls_name, config_name, **config):
    def build():
        import transformers

        model = getattr(transformers, cls_name)(getattr(transformers, config_name)(**config))
        return model.eval()

    return build


def _whisper_encoder():
    import transformers

    config = transformers.WhisperConfig(
        vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
        max_source_positions=64, pad_token_id=1, bos_token_id=2, eos_token_id=3, decoder_start_token_id=2)
    return transformers.WhisperModel(config).encoder.eval()


def _x_transformers_decoder():
    from x_transformers import Decoder, TransformerWrapper

    return TransformerWrapper(num_tokens=100, max_seq_len=64, attn_layers=Decoder(dim=32, depth=2, heads=2)).eval()


HF_TARGETS = [
    ThirdPartyTarget("DistilBERT", _hf("DistilBertModel", "DistilBertConfig", vocab_size=100, dim=32,
                                       n_layers=2, n_heads=2, hidden_dim=64),
                     _tokens, {"input_ids": ("B", "T")}, TOKEN_SIZES),
    ThirdPartyTarget("OPT", _hf("OPTModel", "OPTConfig", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                ffn_dim=64, num_attention_heads=2, max_position_embeddings=128,
                                word_embed_proj_dim=32),
                     _tokens, {"input_ids": ("B", "T")}, TOKEN_SIZES),
    ThirdPartyTarget("GPT-NeoX", _hf("GPTNeoXModel", "GPTNeoXConfig", vocab_size=100, hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=128),
                     _tokens, {"input_ids": ("B", "T")}, TOKEN_SIZES),
    ThirdPartyTarget("Mistral", _hf("MistralModel", "MistralConfig", vocab_size=100, hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=64, max_position_embeddings=128),
                     _tokens, {"input_ids": ("B", "T")}, TOKEN_SIZES),
    ThirdPartyTarget("ViT", _hf("ViTModel", "ViTConfig", hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8),
                     lambda s: {"pixel_values": torch.randn(s["B"], 3, 32, 32)},
                     {"pixel_values": ("B", 3, 32, 32)}, BATCH_SIZES),
    ThirdPartyTarget("Whisper encoder", _whisper_encoder,
                     lambda s: {"input_features": torch.randn(s["B"], 16, 128)},
                     {"input_features": ("B", 16, 128)}, BATCH_SIZES),
]

OTHER_TARGETS = [
    ThirdPartyTarget("x-transformers Decoder", _x_transformers_decoder,
                     lambda s: {"x": torch.randint(0, 100, (s["B"], s["T"]))}, {"x": ("B", "T")}, TOKEN_SIZES),
]


def run_oracle(target: ThirdPartyTarget):
    """Analyze once at the sample, run for real at every size; returns (result, report)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import shapeinfer
    from oracle import Report, compare, record_shapes

    torch.manual_seed(0)
    model = target.build()
    files = target.source_files(model)
    result = shapeinfer.analyze(model, kwargs=target.make_inputs(target.sizes[0]), dims=target.dims)
    analysis = result.to_json()
    report = Report(title=target.name)
    for sizes in target.sizes:
        with torch.no_grad():
            recorded = record_shapes(model, files, **target.make_inputs(sizes))
        report = report + compare(analysis, recorded, sizes, files)
    return result, report
