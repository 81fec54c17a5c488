"""Robustness sweep: the analyzer over every modeling file of the installed transformers.

For each ``transformers/models/<name>/modeling_*.py`` the sweep picks a model class the
file exports (the bare ``*Model`` first), builds its config with defaults and shrinks it
(hidden sizes, layers, heads, experts), instantiates it with random weights, makes a
sample input from the model's ``main_input_name`` with symbolic dims (both towers' inputs
for a dual encoder such as CLIP), runs it once for real (to know whether the sample itself
is valid; where the model refuses it, inputs whose layout varies between models, such as
raw audio with or without a channel axis, are tried in their other layouts, and then, up
to ``FALLBACK_MAX_PARAMS`` parameters, the first three model classes with their default
sizes but two layers per stack, then with their defaults: ``config`` in the record) and
analyzes it. Each file ends as:

- ``analyzed``: ``analyze`` returned; counts of known/unknown tensor variables in the
  modeling file, diagnostics by code, internal failures (SI005) among them;
- ``skipped``: the sweep could not build the model or a sample input (the reason says
  why), which the robustness bar allows;
- ``exception``: an exception escaped ``analyze`` (an analyzer bug);
- ``timeout`` / ``crashed``: the per-model limit was reached / the worker died.

Each model runs in a worker process the parent kills when it overruns the limit.

Usage: python benchmarks/transformers_sweep.py [--limit 60] [--jobs 1] [--only a,b]
                                               [--json benchmarks/transformers_sweep.json]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import shapeinfer  # noqa: E402

# config fields shrunk to at most these values (never raised)
HIDDEN_FIELDS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "d_embed", "emb_dim")
HEAD_FIELDS = ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "num_heads",
               "attention_heads")
KV_HEAD_FIELDS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num")
EXPERT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
SMALL_HEADS = 2
LAYER_FIELDS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
                "num_encoder_layers", "num_decoder_layers", "depth", "text_layers", "vision_layers")
SMALL_SIZES = {
    **dict.fromkeys(("word_embed_proj_dim", "projection_dim", "text_embed_dim", "vision_embed_dim"), 64),
    **dict.fromkeys(LAYER_FIELDS, 2),
    "decoder_attention_heads": SMALL_HEADS,
    **dict.fromkeys(KV_HEAD_FIELDS, 1),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
                     "hidden_dim", "mlp_dim"), 128),
    **dict.fromkeys(EXPERT_FIELDS, 4),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"), 64),
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "moe_topk": 2,
}
SAMPLE_SIZES = {"B": 2, "T": 7, "S": 5, "L": 3200, "F": 56}
# a model whose shrunk sizes do not fit together is built with fewer layers only, or as its
# config's defaults, when that has at most this many parameters
FALLBACK_MAX_PARAMS = 60_000_000
TOKEN_RANGE = 100  # sample token ids lie below this (and below the vocabulary size)


# ---- building one model ------------------------------------------------------------------


class Skip(Exception):
    """The sweep cannot build this model or its input; the message is the reason."""


def modeling_modules() -> list[str]:
    """Module names of every ``transformers/models/<name>/modeling_*.py``, sorted."""
    import transformers

    models = Path(transformers.__file__).parent / "models"
    return sorted(f"transformers.models.{p.parent.name}.{p.stem}" for p in models.glob("*/modeling_*.py"))


def candidate_classes(module) -> list[type]:
    """The model classes a modeling module exports, the bare ``*Model`` first."""
    from transformers import PreTrainedModel

    found = []
    for name in getattr(module, "__all__", []):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, PreTrainedModel) and cls.__module__ == module.__name__ \
                and not name.endswith("PreTrainedModel"):
            found.append(cls)
    bare = [c for c in found if c.__name__.endswith("Model") and "For" not in c.__name__]
    rest = [c for c in found if c not in bare]
    return sorted(bare, key=lambda c: len(c.__name__)) + rest


def _config_fields(config_cls) -> set:
    import inspect

    try:
        return set(inspect.signature(config_cls).parameters)
    except (TypeError, ValueError):
        return set()


def small_config(config_cls, depth: int = 0):
    """``config_cls`` with its defaults, sizes shrunk to SMALL_SIZES; sub-configs too."""
    return _shrunk(config_cls, _small_sizes, small_config, depth)


def fewer_layers_config(config_cls, depth: int = 0):
    """``config_cls`` with its defaults but at most two layers per stack; sub-configs too
    (for models whose widths, shrunk, no longer fit together: SAM's, SigLIP 2's)."""
    return _shrunk(config_cls, lambda default, fields: {
        f: 2 for f in LAYER_FIELDS if f in fields and type(getattr(default, f, None)) is int
        and getattr(default, f) > 2}, fewer_layers_config, depth)


def _shrunk(config_cls, overrides_of, shrink_sub, depth: int):
    """``config_cls`` with its defaults and ``overrides_of(default, fields)``, its
    sub-configs made by ``shrink_sub`` (three levels deep)."""
    from transformers import PreTrainedConfig

    default = config_cls()
    fields = _config_fields(config_cls)
    overrides = overrides_of(default, fields)
    if depth < 3:
        for name in list(getattr(config_cls, "sub_configs", {}) or {}):
            sub = getattr(default, name, None)
            if isinstance(sub, PreTrainedConfig) and name in fields:
                overrides[name] = shrink_sub(type(sub), depth + 1)
    try:
        return config_cls(**overrides)
    except Exception:  # validation rejects the combination: shrink attribute by attribute
        for name, value in overrides.items():
            setattr(default, name, value)
        return default


def _small_sizes(default, fields: set) -> dict:
    """The overrides of ``small_config``: fewer heads, SMALL_SIZES, kv heads and top-k
    that follow them."""
    overrides = _fewer_heads(default, fields)
    for name, target in SMALL_SIZES.items():
        value = getattr(default, name, None)
        if name in fields and type(value) is int and value > target:
            overrides[name] = target
    overrides.update(_latent_kv_heads(default, fields, overrides))
    overrides.update(_experts_top_k(default, fields))
    if _two_towers(default):  # a dual encoder's joint embedding must match what its towers emit, which some
        overrides.pop("projection_dim", None)  # size by their own fields (ALIGN's EfficientNet, X-CLIP's MIT)
    return overrides


def _fewer_heads(config, fields: set) -> dict:
    """Fewer attention heads of the same size: per-head sizes (rotary sections, head_dim)
    stay valid. Configs whose heads are per-stage lists (Swin) keep their sizes."""
    hidden = next((f for f in HIDDEN_FIELDS if f in fields and type(getattr(config, f, None)) is int), None)
    heads = next((f for f in HEAD_FIELDS if f in fields and getattr(config, f, None) is not None), None)
    if hidden is None or heads is None or type(getattr(config, heads)) is not int:
        return {}
    n_hidden, n_heads = getattr(config, hidden), getattr(config, heads)
    if n_heads <= SMALL_HEADS or n_hidden % n_heads:
        return {}
    return {hidden: SMALL_HEADS * (n_hidden // n_heads), **{f: SMALL_HEADS for f in HEAD_FIELDS if f in fields
                                                            and type(getattr(config, f, None)) is int}}


def _latent_kv_heads(config, fields: set, overrides: dict) -> dict:
    """Multi-head latent attention (DeepSeek's MLA, a config with ``kv_lora_rank``) expands
    its latent into keys and values for every query head itself, yet still repeats them by
    heads // kv heads (``num_key_value_groups``) where the key and value head sizes differ:
    its kv heads must follow the shrunk heads rather than shrink to one."""
    if "kv_lora_rank" not in fields:
        return {}
    heads = next((f for f in HEAD_FIELDS if f in fields and type(getattr(config, f, None)) is int), None)
    if heads is None:
        return {}
    return {f: overrides.get(heads, getattr(config, heads)) for f in KV_HEAD_FIELDS
            if f in fields and getattr(config, f, None) == getattr(config, heads)}


def _experts_top_k(config, fields: set) -> dict:
    """A config with routed experts routes each token to SMALL_SIZES' top-k of them: under
    the config's own name for it too (Ernie 4.5's ``moe_k``, ``num_experts_per_tok`` through
    its ``attribute_map``), which would otherwise exceed the shrunk experts, and where it
    defaults to None (DeepSeek-V2's: the real value comes with a checkpoint)."""
    if not any(type(getattr(config, f, None)) is int for f in EXPERT_FIELDS if f in fields):
        return {}
    target = SMALL_SIZES["num_experts_per_tok"]
    alias = (getattr(config, "attribute_map", None) or {}).get("num_experts_per_tok")
    values = {f: getattr(config, f, 0) for f in ("num_experts_per_tok", "moe_topk", alias) if f in fields}
    return {f: target for f, value in values.items() if value is None or type(value) is int and value > target}


def build_model(cls, max_params: int = 150_000_000):
    """``cls`` with random weights from the shrunk config, or from the default one when
    the shrunk sizes do not fit together and the default is small enough."""
    try:
        return _built(cls, small_config(cls.config_class), max_params, "after shrinking")
    except Skip:
        raise
    except Exception as shrunk_failed:
        try:
            return _built(cls, cls.config_class(), max_params, "after shrinking")
        except Skip:
            raise
        except Exception:
            raise shrunk_failed from None


def _built(cls, config, max_params: int, how: str):
    """``cls(config)`` with random weights in eval mode, its size counted first."""
    import torch

    with torch.device("meta"):
        n_params = sum(p.numel() for p in cls(config).parameters())
    if n_params > max_params:
        raise Skip(f"{n_params / 1e6:.0f}M parameters {how}")
    torch.manual_seed(0)
    return cls(config).eval()


def runnable_sample(model):
    """(kwargs, dims, error): the sample input, in another layout where the model refuses
    the first (error None where one runs)."""
    kwargs, dims = sample_input(model)
    error = sample_error(model, kwargs)
    for other in alternative_samples(model.config, kwargs, dims) if error else ():
        if sample_error(model, other[0]) is None:
            return other[0], other[1], None
    return kwargs, dims, error


def fallback_models(classes):
    """(model, kwargs, dims, how) of the first of ``classes`` that runs on its sample when
    built with fewer layers only, or with its config's defaults, within
    ``FALLBACK_MAX_PARAMS``; for models whose shrunk ones refuse their samples."""
    for cls in classes:
        for how, make in (("fewer layers", fewer_layers_config), ("default", lambda c: c())):
            try:
                model = _built(cls, make(cls.config_class), FALLBACK_MAX_PARAMS, how)
                kwargs, dims, error = runnable_sample(model)
            except Exception:
                continue
            if error is None:
                return model, kwargs, dims, how
    return None


def sample_input(model) -> tuple[dict, dict]:
    """(kwargs, dims) with symbolic batch and lengths: the model's main input, every other
    forward argument without a default, and decoder tokens (another length) when forward
    takes them."""
    import inspect

    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    if main not in params:  # a stale main_input_name: the first argument the sweep can make
        main = next((p for p in params if p in SAMPLE_MAKERS), main)
    required = [p for p, v in params.items() if v.default is v.empty and v.kind in (v.POSITIONAL_OR_KEYWORD,
                                                                                       v.KEYWORD_ONLY)]
    wanted = dict.fromkeys([main] + required + _paired_inputs(model.config, params)
                           + (["decoder_input_ids"] if "decoder_input_ids" in params else []))
    kwargs, dims = {}, {}
    for name in wanted:
        made = SAMPLE_MAKERS[name](model.config) if name in SAMPLE_MAKERS else None
        if made is None:
            raise Skip(f"no sample input for {'main_input_name' if name == main else 'argument'} {name!r}")
        kwargs[name], dims[name] = made
    return kwargs, dims


# a two-tower model's towers: the config fields describing one (a sub-config, or a size of a config holding
# both) and the forward arguments feeding it, the first one forward takes
TEXT_TOWER = ("text_config", "vocab_size")
OTHER_TOWERS = ((("vision_config", "image_config", "image_size"), ("pixel_values",)),
                (("audio_config",), ("input_features", "input_values")))


def _paired_inputs(config, params) -> list[str]:
    """Both towers' inputs of a dual encoder (CLIP, CLAP: a text sub-config and a vision or
    audio one; ViLT: one config with a vocabulary and an image size) whose forward takes
    ``input_ids`` and the pixels or audio: it needs both although each has a default.
    Models that splice image or audio features into the text at placeholder tokens (VLMs:
    an ``image_token_id``) keep their text alone, as random tokens hold no placeholders."""
    if "input_ids" not in params or not _two_towers(config):
        return []
    towers = [next(n for n in names if n in params) for fields, names in OTHER_TOWERS
              if _describes(config, fields) and any(n in params for n in names)]
    return ["input_ids"] + towers if towers else []


def _two_towers(config) -> bool:
    """Whether the config describes a text tower and an image or audio one, side by side
    rather than spliced together at placeholder tokens."""
    return _describes(config, TEXT_TOWER) and any(_describes(config, fields) for fields, _ in OTHER_TOWERS) \
        and not _placeholder_tokens(config)


def _describes(config, fields) -> bool:
    """Whether the config sets any of ``fields`` (a sub-config or a size)."""
    return any(getattr(config, f, None) is not None for f in fields)


def _placeholder_tokens(config) -> bool:
    """Whether the config has a token id for image, video or audio features in the text
    (set or not: Voxtral's ``audio_token_id`` defaults to None)."""
    return any("token" in key and any(kind in key for kind in ("image", "video", "audio")) for key in config.to_dict())


def _tokens(length: str):
    def make(config):
        import torch

        text = getattr(config, "get_text_config", lambda: config)()
        vocab = min(getattr(text, "vocab_size", None) or TOKEN_RANGE, TOKEN_RANGE)
        return torch.randint(0, vocab, (SAMPLE_SIZES["B"], SAMPLE_SIZES[length])), ("B", length)

    return make


def _pixels(config):
    """(B, C, H, W) images of the (vision) config's size; (B, frames, C, H, W) clips for a
    video model, whose config sets its ``num_frames``."""
    import torch

    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", 224)
    h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = getattr(vision, "num_channels", 3)
    frames = getattr(vision, "num_frames", None) or getattr(config, "num_frames", None)
    shape = (channels, h, w) if frames is None else (frames, channels, h, w)
    return torch.randn(SAMPLE_SIZES["B"], *shape), ("B", *shape)


def _audio(config):
    import torch

    return torch.randn(SAMPLE_SIZES["B"], SAMPLE_SIZES["L"]), ("B", "L")


def _features(config):
    spectrogram = _spectrogram_image(config)
    if spectrogram is not None:
        return spectrogram
    mels = getattr(config, "num_mel_bins", None)
    if mels is not None:  # Whisper-like: a fixed number of frames
        return _mel_frames(mels, 2 * getattr(config, "max_source_positions", 1500))
    features = getattr(config, "input_feat_per_channel", None) or getattr(config, "feature_size", None)
    if features is None:
        return _nested_features(config)
    return _frames(features * getattr(config, "input_channels", 1))


def _spectrogram_image(config):
    """(B, 1, F, mels) for an audio tower that reads its mel spectrogram as a one-channel
    image (CLAP's HTS-AT, whose config sets the image's ``spec_size``): the config's own or
    its ``audio_config``'s; None for other models."""
    import torch

    for audio in (config, getattr(config, "audio_config", None)):
        mels = getattr(audio, "num_mel_bins", None)
        if mels is not None and getattr(audio, "spec_size", None) is not None:
            return torch.randn(SAMPLE_SIZES["B"], 1, SAMPLE_SIZES["F"], mels), ("B", 1, "F", mels)
    return None


def _mel_frames(mels: int, frames: int):
    """(B, mels, frames): Whisper's fixed number of frames."""
    import torch

    return torch.randn(SAMPLE_SIZES["B"], mels, frames), ("B", mels, frames)


def _frames(features: int):
    """(B, F, features) frames of features."""
    import torch

    return torch.randn(SAMPLE_SIZES["B"], SAMPLE_SIZES["F"], features), ("B", "F", features)


def _nested_features(config):
    """Features for a model whose audio front end's sizes sit in a sub-config (Parakeet's
    ``encoder_config``, Voxtral's ``audio_config``, a codec's ``semantic_model_config``):
    mel frames as Whisper's where it has a fixed number of positions, else frames by
    mels (or by the projection's input)."""
    for name in ("encoder_config", "audio_config", "semantic_model_config"):
        sub = getattr(config, name, None)
        mels = getattr(sub, "num_mel_bins", None)
        positions = getattr(sub, "max_source_positions", None)
        if mels is not None and positions is not None:
            return _mel_frames(mels, 2 * positions)
        features = mels or getattr(sub, "feature_projection_input_dim", None)
        if features is not None:
            return _frames(features)
    features = getattr(config, "feature_projection_input_dim", None)
    return None if features is None else _frames(features)


def _series(config):
    """(B, context, channels): a time series of the config's fixed context length, with as
    many channels as the config sets (PatchTST); (B, context) where it sets none (TimesFM)."""
    import torch

    context = getattr(config, "context_length", None)
    if type(context) is not int:
        return None
    channels = getattr(config, "num_input_channels", None)
    shape = (context,) if channels is None else (context, channels)
    return torch.randn(SAMPLE_SIZES["B"], *shape), ("B", *shape)


SAMPLE_MAKERS = {"input_ids": _tokens("T"), "decoder_input_ids": _tokens("S"), "pixel_values": _pixels,
                 "input_values": _audio, "input_features": _features, "past_values": _series}


def _audio_channel(config):
    """(B, 1, L): raw audio with a channel axis (codecs: DAC, EnCodec, Mimi)."""
    import torch

    return torch.randn(SAMPLE_SIZES["B"], 1, SAMPLE_SIZES["L"]), ("B", 1, "L")


def _fixed_mel_frames(config):
    """(B, frames, mels): a spectrogram of the config's fixed ``max_length`` frames, passed
    as ``input_values`` (the Audio Spectrogram Transformer)."""
    import torch

    mels, frames = getattr(config, "num_mel_bins", None), getattr(config, "max_length", None)
    if type(mels) is not int or type(frames) is not int:
        return None
    return torch.randn(SAMPLE_SIZES["B"], frames, mels), ("B", frames, mels)


def _codebook_tokens(config):
    """(B, T, codebooks): a token per audio codebook and step (CSM, Kyutai), where the
    config sets ``num_codebooks``."""
    import torch

    codebooks = getattr(config, "num_codebooks", None)
    if type(codebooks) is not int:
        return None
    vocab = min(getattr(config, "codebook_vocab_size", None) or TOKEN_RANGE, TOKEN_RANGE)
    shape = (SAMPLE_SIZES["B"], SAMPLE_SIZES["T"], codebooks)
    return torch.randint(0, vocab, shape), ("B", "T", codebooks)


def _codebook_rows(config):
    """(B * codebooks, T): each codebook's tokens a row of their own (MusicGen), where the
    config sets ``num_codebooks``."""
    import torch

    codebooks = getattr(config, "num_codebooks", None)
    if type(codebooks) is not int:
        return None
    rows = SAMPLE_SIZES["B"] * codebooks
    vocab = min(getattr(config, "vocab_size", None) or TOKEN_RANGE, TOKEN_RANGE)
    return torch.randint(0, vocab, (rows, SAMPLE_SIZES["T"])), (rows, "T")


def _features_by_frame(config):
    """(B, F, mels): frames of mel features where the fixed-frames layout (B, mels, frames)
    is refused (UnivNet)."""
    mels = getattr(config, "num_mel_bins", None)
    return None if mels is None else _frames(mels)


# other layouts of an input, which the config does not tell apart from the first one's, tried in order where
# the model refuses its sample
SAMPLE_ALTERNATIVES = {"input_values": (_audio_channel, _fixed_mel_frames),
                       "input_ids": (_codebook_tokens, _codebook_rows), "input_features": (_features_by_frame,)}


def alternative_samples(config, kwargs: dict, dims: dict):
    """(kwargs, dims) with one input in another layout, for each SAMPLE_ALTERNATIVES has."""
    for name in kwargs:
        for make in SAMPLE_ALTERNATIVES.get(name, ()):
            made = make(config)
            if made is not None:
                yield {**kwargs, name: made[0]}, {**dims, name: made[1]}


# ---- analyzing one file ------------------------------------------------------------------


def count_variables(result, filename: str) -> dict:
    """Tensor variables of ``filename`` whose every shape is known, and the others."""
    from shapeinfer.values import TensorType, Unknown

    known = unknown = 0
    for entry in result.entries_in(filename):
        values = [v for _, v in entry.values]
        if not any(isinstance(v, (TensorType, Unknown)) for v in values):
            continue
        if all(isinstance(v, TensorType) and v.shape is not None for v in values):
            known += 1
        else:
            unknown += 1
    return {"known": known, "unknown": unknown}


def sweep_one(module_name: str) -> dict:
    """Build, run and analyze one modeling file's model; a record of what happened."""
    return analyze_file(module_name)[0]


def analyze_file(module_name: str) -> tuple[dict, object]:
    """(record, AnalysisResult or None) for one modeling file."""
    record, model, kwargs, dims = prepare(module_name)
    if record.get("status") == "skipped":
        return record, None
    start = time.perf_counter()
    result = None
    try:
        result = shapeinfer.analyze(model, kwargs=kwargs, dims=dims)
        result.to_json()  # rendering is part of the contract too
    except shapeinfer.AnalysisError as e:  # the sweep's own sample does not fit forward
        record.update(status="skipped", reason=f"sample rejected: {e}")
    except Exception as e:
        record.update(status="exception", reason=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc()[-2000:])
    else:
        codes = Counter(d.code for d in result.diagnostics)
        internal = [f"{Path(d.file).name}:{d.line} {d.message[:300]}" for d in result.diagnostics
                    if d.code == "SI005"]
        record.update(status="analyzed", **count_variables(result, record["file"]),
                      diagnostics=dict(sorted(codes.items())), errors=len(result.errors), internal=internal[:10],
                      internal_count=len(internal),
                      error_messages=[f"{Path(d.file).name}:{d.line} {d.code} {d.message[:200]}"
                                      for d in result.errors][:5],
                      analysis_seconds=round(result.seconds, 2))
    record["seconds"] = round(record["seconds"] + time.perf_counter() - start, 2)
    return record, result


def prepare(module_name: str) -> tuple[dict, object, dict, dict]:
    """(record, model, kwargs, dims); the record says "skipped" with a reason when the
    model or its sample input cannot be built."""
    import importlib
    import warnings

    record = {"module": module_name}
    start = time.perf_counter()
    model = kwargs = dims = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(module_name)
            classes = candidate_classes(module)
            if not classes:
                raise Skip("exports no model class")
            model, reasons = None, []
            for cls in classes[:3]:
                try:
                    model = build_model(cls)
                    break
                except Skip as e:
                    reasons.append(f"{cls.__name__}: {e}")
                except Exception as e:
                    reasons.append(f"{cls.__name__}: {type(e).__name__}: {str(e)[:200]}")
            if model is None:
                raise Skip("cannot instantiate: " + " | ".join(reasons))
            record["model"] = type(model).__name__
            record["file"] = module.__file__
            try:
                kwargs, dims, error = runnable_sample(model)
            except Skip as e:
                kwargs, dims, error = None, None, e
            if error is not None:
                found = fallback_models(classes[:3])
                if found is not None:   # (the shrunk model's failure kept in the record)
                    record["shrunk_sample_error"] = str(error)
                    model, kwargs, dims, record["config"] = found
                    record["model"], error = type(model).__name__, None
                elif isinstance(error, Skip):
                    raise error
            record["dims"] = {k: list(v) for k, v in dims.items()}
            record["sample_runs"] = error is None
            if error is not None:  # the model rejects the sample: analyzed all the same
                record["sample_error"] = error
    except Skip as e:
        record.update(status="skipped", reason=str(e))
    except Exception as e:
        record.update(status="skipped", reason=f"{type(e).__name__}: {str(e)[:300]}")
    record["seconds"] = time.perf_counter() - start
    return record, model, kwargs, dims


def sample_error(model, kwargs: dict):
    """None where the model runs on the sample for real, else the error, shortened. It runs
    a copy: the model handed on has never run (Mimi's codebook caches a tensor computed from
    its buffers at its first call, which would stay on the CPU when the model is moved)."""
    import copy

    import torch

    try:
        with torch.no_grad():
            copy.deepcopy(model)(**kwargs)
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


# ---- the sweep: workers with a per-model limit ----------------------------------------------


class _Worker:
    """A child process answering one JSON line per module name it is sent."""

    def __init__(self, script: str):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, script, "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.module = None
        self.started = 0.0

    def send(self, module: str) -> None:
        self.module, self.started = module, time.monotonic()
        self.proc.stdin.write(module + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_sweep(modules: list[str], limit: float = 60.0, jobs: int = 1, progress=print, script: str = __file__,
              describe=None) -> list[dict]:
    """Records for ``modules`` in order; a model over ``limit`` seconds is a timeout. Each worker runs
    ``script --worker`` (``worker_main``'s loop over its own check); ``describe`` makes a record's
    progress line (``summary_line``)."""
    describe = describe or summary_line
    pending = list(reversed(modules))
    records: dict[str, dict] = {}
    selector = selectors.DefaultSelector()
    workers: list[_Worker] = []

    def start(worker=None):
        if worker is None:
            worker = _Worker(script)
            workers.append(worker)
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        if pending:
            worker.send(pending.pop())
        else:
            worker.module = None
        return worker

    def replace(worker):
        selector.unregister(worker.proc.stdout)
        worker.stop()
        workers.remove(worker)
        if pending:
            start()

    def done(record):
        records[record["module"]] = record
        progress(f"[{len(records)}/{len(modules)}] {describe(record)}")

    for _ in range(min(jobs, len(modules))):
        start()
    while any(w.module for w in workers):
        for key, _ in selector.select(timeout=1.0):
            worker = key.data
            line = worker.proc.stdout.readline()
            if not line:  # the worker died (memory, a segfault in a model's extension)
                done({"module": worker.module, "status": "crashed", "reason": f"worker exit {worker.proc.poll()}",
                      "seconds": time.monotonic() - worker.started})
                replace(worker)
                continue
            done(json.loads(line))
            start(worker)
        now = time.monotonic()
        for worker in list(workers):
            if worker.module and now - worker.started > limit:
                done({"module": worker.module, "status": "timeout", "reason": f"over {limit:.0f} s",
                      "seconds": now - worker.started})
                replace(worker)
    for worker in workers:
        worker.stop()
    return [records[m] for m in modules]


def worker_main(check=None) -> None:
    """Answer module names from stdin with ``check``'s record (``sweep_one``); the real
    stdout is kept for the answers only."""
    check = check or sweep_one
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # models that print go to stderr
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        record = check(line.strip())
        out.write(json.dumps(record) + "\n")
        out.flush()


# ---- reporting ---------------------------------------------------------------------------------


def summary_line(r: dict) -> str:
    name = r["module"].rsplit(".", 1)[-1]
    if r["status"] == "analyzed":
        extra = f"{r['known']} known, {r['unknown']} unknown, {r['errors']} errors, SI005 x{len(r['internal'])}"
        if not r.get("sample_runs", True):
            extra += " (sample fails for real)"
    else:
        extra = r.get("reason", "")[:160]
    return f"{name:<40} {r['status']:<9} {r['seconds']:6.1f}s  {extra}"


def summarize(records: list[dict]) -> dict:
    by_status = Counter(r["status"] for r in records)
    analyzed = [r for r in records if r["status"] == "analyzed"]
    valid = [r for r in analyzed if r.get("sample_runs")]
    known, unknown = sum(r["known"] for r in analyzed), sum(r["unknown"] for r in analyzed)
    valid_known, valid_unknown = sum(r["known"] for r in valid), sum(r["unknown"] for r in valid)
    sites = Counter(m[m.index("(at "):] for r in analyzed for m in r["internal"] if "(at " in m)
    return {"files": len(records), **{s: by_status.get(s, 0) for s in
                                      ("analyzed", "skipped", "exception", "timeout", "crashed")},
            "sample_runs": len(valid),
            "with_internal_failures": sum(1 for r in analyzed if r["internal"]),
            "with_errors": sum(1 for r in analyzed if r["errors"]),
            "with_errors_sample_runs": sum(1 for r in valid if r["errors"]),
            "known_variables": known, "unknown_variables": unknown,
            "known_fraction": round(known / max(1, known + unknown), 3),
            "known_fraction_sample_runs": round(valid_known / max(1, valid_known + valid_unknown), 3),
            "internal_failure_sites": dict(sites.most_common(20)),
            "skip_reasons": dict(Counter(_reason_kind(r["reason"]) for r in records
                                         if r["status"] == "skipped").most_common(12))}


def _reason_kind(reason: str) -> str:
    if reason.startswith("cannot instantiate"):
        return "cannot instantiate"
    return reason.split(":")[0][:60]


def format_summary(s: dict) -> str:
    rows = [("modeling files", s["files"]), ("analyzed", s["analyzed"]),
            ("  sample input runs for real", s["sample_runs"]),
            ("  with an internal failure (SI005)", s["with_internal_failures"]),
            ("  with an error diagnostic", s["with_errors"]),
            ("    of which the sample runs for real", s["with_errors_sample_runs"]),
            ("skipped (cannot build model or input)", s["skipped"]),
            ("EXCEPTION ESCAPED analyze", s["exception"]), ("timeout", s["timeout"]), ("crashed", s["crashed"]),
            ("tensor variables known / unknown",
             f"{s['known_variables']} / {s['unknown_variables']} ({100 * s['known_fraction']:.1f}% known)"),
            ("  % known where the sample runs for real", f"{100 * s['known_fraction_sample_runs']:.1f}%")]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", "skip reasons:"] + [f"  {n:4d}  {k}" for k, n in s["skip_reasons"].items()]
    lines += ["", "internal failures (SI005) by analyzer site:"]
    lines += [f"  {n:4d}  {k}" for k, n in s["internal_failure_sites"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds per model")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated model directory names")
    parser.add_argument("--json", default=None,
                        help="where to write the records (default: "
                             "benchmarks/transformers_sweep.json for a full sweep; a partial "
                             "one (--only) writes nothing unless given)")
    args = parser.parse_args()
    if args.worker:
        worker_main()
        return
    modules = modeling_modules()
    if args.only:
        wanted = set(args.only.split(","))
        modules = [m for m in modules if m.split(".")[2] in wanted]
    start = time.time()
    records = run_sweep(modules, args.limit, args.jobs, progress=lambda s: print(s, flush=True))
    summary = summarize(records)
    summary["wall_seconds"] = round(time.time() - start)
    print()
    print(format_summary(summary))
    out = args.json or (None if args.only else ROOT / "benchmarks" / "transformers_sweep.json")
    if out is not None:   # a partial sweep must not replace the full sweep's records
        Path(out).write_text(json.dumps({"summary": summary, "records": records}, indent=1))


if __name__ == "__main__":
    main()
