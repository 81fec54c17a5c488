"""nn.Module rules: hyper-parameters come from the live module (the concrete half)."""

from __future__ import annotations

import torch
import torch.nn as nn

from .. import shape_fns
from ..values import Const, TupleV, from_python
from . import elementwise, layout, nn_functional as NF
from .common import NONE, T, RuleUnknown, is_none, like, py, same_dtype, shape_of, sym, tensor
from .registry import module_rule


def _param(t):
    return NONE if t is None else from_python(t)


@module_rule(nn.Linear)
def linear_module(ctx, module, input):
    return NF.linear(ctx, input, _param(module.weight), _param(module.bias))


@module_rule(nn.Bilinear)
def bilinear_module(ctx, module, input1, input2):
    return NF.bilinear(ctx, input1, input2, _param(module.weight))


@module_rule(nn.Identity)
def identity_module(ctx, module, input, *args, **kwargs):
    return input


@module_rule(nn.Flatten)
def flatten_module(ctx, module, input):
    return layout.flatten(ctx, input, Const(module.start_dim), Const(module.end_dim))


@module_rule(nn.Unflatten)
def unflatten_module(ctx, module, input):
    return layout.unflatten(ctx, input, Const(module.dim), Const(tuple(module.unflattened_size)))


@module_rule(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def conv_module(ctx, module, input):
    x, w = T(input), from_python(module.weight)
    if module.padding_mode != "zeros":
        pad = list(module._reversed_padding_repeated_twice)
        x = like(x, shape_fns.pad_shape(shape_of(x), pad, module.padding_mode))
        padding = 0
    else:
        padding = module.padding
    out = shape_fns.conv_shape(shape_of(x), w.shape, module.stride, padding, module.dilation, module.groups)
    same_dtype(type(module).__name__, x, w)
    return like(x, out)


@module_rule(nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
def conv_transpose_module(ctx, module, input, output_size=None):
    x, w = T(input), from_python(module.weight)
    if not is_none(output_size):
        sizes = py(output_size)
        n = len(w.shape) - 2
        return like(x, tuple(shape_of(x)[:-n]) + tuple(sizes[-n:]))
    out = shape_fns.conv_shape(shape_of(x), w.shape, module.stride, module.padding, module.dilation,
                               module.groups, True, module.output_padding)
    same_dtype(type(module).__name__, x, w)
    return like(x, out)


def _n_spatial(module) -> int:
    name = type(module).__name__
    return int(name[-2]) if name[-2].isdigit() else 2


@module_rule(nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
def max_pool_module(ctx, module, input):
    x = T(input)
    out = like(x, shape_fns.pool_shape(shape_of(x), module.kernel_size, module.stride, module.padding,
                                       module.dilation, module.ceil_mode, _n_spatial(module)))
    if module.return_indices:
        return TupleV((out, like(out, out.shape, torch.int64)))
    return out


@module_rule(nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
def avg_pool_module(ctx, module, input):
    x = T(input)
    return like(x, shape_fns.pool_shape(shape_of(x), module.kernel_size, module.stride, module.padding, 1,
                                        module.ceil_mode, _n_spatial(module)))


@module_rule(nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
             nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
def adaptive_pool_module(ctx, module, input):
    x = T(input)
    out = like(x, shape_fns.adaptive_pool_shape(shape_of(x), module.output_size, _n_spatial(module)))
    if getattr(module, "return_indices", False):
        return TupleV((out, like(out, out.shape, torch.int64)))
    return out


@module_rule(nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
def batch_norm_module(ctx, module, input):
    x = T(input)
    s = shape_of(x)
    expected_rank = {nn.BatchNorm1d: (2, 3), nn.BatchNorm2d: (4,), nn.BatchNorm3d: (5,)}.get(type(module))
    if expected_rank and len(s) not in expected_rank:
        raise shape_fns.ShapeError("SI150", f"{type(module).__name__} expects a "
                                   f"{' or '.join(str(r) + '-d' for r in expected_rank)} input, got "
                                   f"{len(s)}-d {sym.shape_str(s)}", s)
    shape_fns.require_equal(s[1], module.num_features, "SI150",
                            f"{type(module).__name__}({module.num_features}): input channels")
    if sym.equal(s[1], module.num_features) is False:
        raise shape_fns.ShapeError("SI150", f"{type(module).__name__}: input has {sym.dim_pretty(s[1])} "
                                   f"channels, expected {module.num_features}", (s[1], module.num_features))
    return x


@module_rule(nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)
def instance_norm_module(ctx, module, input):
    x = T(input)
    s = shape_of(x)
    n = _n_spatial(module)
    if len(s) not in (n + 1, n + 2):
        raise shape_fns.ShapeError("SI150", f"{type(module).__name__} expects a {n + 1}-d or {n + 2}-d input, "
                                   f"got {sym.shape_str(s)}", s)
    batched = len(s) == n + 2
    if module.affine:
        shape_fns.require_equal(s[1] if batched else s[0], module.num_features, "SI150", "InstanceNorm channels")
    if module.training or not module.track_running_stats:  # statistics of the input itself
        shape_fns.instance_norm_spatial(s if batched else (1,) + tuple(s))
    return x


@module_rule(nn.LayerNorm)
def layer_norm_module(ctx, module, input):
    return NF.layer_norm(ctx, input, Const(tuple(module.normalized_shape)))


if hasattr(nn, "RMSNorm"):
    @module_rule(nn.RMSNorm)
    def rms_norm_module(ctx, module, input):
        return NF.layer_norm(ctx, input, Const(tuple(module.normalized_shape)))


@module_rule(nn.GroupNorm)
def group_norm_module(ctx, module, input):
    x = T(input)
    shape_fns.require_equal(shape_of(x)[1], module.num_channels, "SI150", "GroupNorm channels")
    return x


@module_rule(nn.LocalResponseNorm)
def lrn_module(ctx, module, input):
    return T(input)


@module_rule(nn.Embedding)
def embedding_module(ctx, module, input):
    return NF.embedding(ctx, input, from_python(module.weight))


@module_rule(nn.EmbeddingBag)
def embedding_bag_module(ctx, module, input, offsets=None, per_sample_weights=None):
    s = shape_of(input)
    if len(s) == 2:
        return tensor(module.weight.dtype, (s[0], module.embedding_dim))
    if is_none(offsets):
        raise RuleUnknown("EmbeddingBag with 1-d input needs offsets")
    bags = shape_of(offsets)[0]
    if module.include_last_offset:   # the last offset ends the last bag: one bag fewer
        bags = bags - 1
    return tensor(module.weight.dtype, (bags, module.embedding_dim))


_SAME_SHAPE = [nn.ReLU, nn.ReLU6, nn.ELU, nn.SELU, nn.CELU, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.GELU,
               nn.SiLU, nn.Mish, nn.Hardswish, nn.Hardsigmoid, nn.Hardtanh, nn.Softplus, nn.Softsign,
               nn.Tanhshrink, nn.Softshrink, nn.Hardshrink, nn.LogSigmoid, nn.Threshold, nn.Dropout,
               nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout]


@module_rule(*_SAME_SHAPE)
def same_shape_module(ctx, module, input):
    return T(input)


@module_rule(nn.Sigmoid, nn.Tanh)
def float_activation_module(ctx, module, input):
    t = T(input)
    return like(t, t.shape, elementwise._float(t.dtype))


@module_rule(nn.Softmax, nn.LogSoftmax, nn.Softmin, nn.Softmax2d)
def softmax_module(ctx, module, input):
    t = T(input)
    dim = getattr(module, "dim", -3)
    if dim is not None and t.shape is not None:
        shape_fns.normalize_dim(dim, len(t.shape))
    return like(t, t.shape, elementwise._float(t.dtype))


@module_rule(nn.GLU)
def glu_module(ctx, module, input):
    return elementwise.glu(ctx, input, Const(module.dim))


@module_rule(nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)
def upsample_module(ctx, module, input):
    x = T(input)
    return like(x, shape_fns.interpolate_shape(shape_of(x), module.size, module.scale_factor))


@module_rule(nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d, nn.ReplicationPad1d,
             nn.ReplicationPad2d, nn.ReplicationPad3d, nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d,
             nn.ConstantPad1d, nn.ConstantPad2d, nn.ConstantPad3d, nn.CircularPad1d, nn.CircularPad2d,
             nn.CircularPad3d)
def pad_module(ctx, module, input):
    x = T(input)
    return like(x, shape_fns.pad_shape(shape_of(x), module.padding, _PAD_MODES.get(type(module).__name__[:-2],
                                                                                  "constant")))


_PAD_MODES = {"ReflectionPad": "reflect", "ReplicationPad": "replicate", "CircularPad": "circular"}


@module_rule(nn.PixelShuffle)
def pixel_shuffle_module(ctx, module, input):
    return layout.pixel_shuffle(ctx, input, Const(module.upscale_factor))


@module_rule(nn.PixelUnshuffle)
def pixel_unshuffle_module(ctx, module, input):
    return layout.pixel_unshuffle(ctx, input, Const(module.downscale_factor))


@module_rule(nn.CosineSimilarity)
def cosine_module(ctx, module, x1, x2):
    return NF.cosine_similarity(ctx, x1, x2, Const(module.dim))


@module_rule(nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCELoss, nn.BCEWithLogitsLoss,
             nn.KLDivLoss, nn.SoftMarginLoss, nn.PoissonNLLLoss)
def loss_module(ctx, module, input, target):
    return NF._loss(ctx, input, target, reduction=Const(module.reduction))


@module_rule(nn.CrossEntropyLoss, nn.NLLLoss)
def cross_entropy_module(ctx, module, input, target):
    return NF.cross_entropy(ctx, input, target, reduction=Const(module.reduction))
