"""torch.nn.functional: linear, convolution, pooling, normalization, embedding,
resampling, padding, losses and attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import shape_fns
from ..values import TupleV
from .common import (T, RuleUnknown, bool_arg, dim_arg, dims_arg, int_dtype, is_none, like, py, same_dtype,
                     shape_of, sym)
from .registry import op


@op("linear", F.linear, torch.nn.functional.linear)
def linear(ctx, input, weight, bias=None):
    x, w = T(input), T(weight, "weight")
    out = shape_fns.linear_shape(shape_of(x), shape_of(w))
    if not is_none(bias):
        shape_fns.broadcast_shapes(out, shape_of(bias, "bias"))
    return like(x, out, same_dtype("linear", x, w))


@op("bilinear", F.bilinear, torch.bilinear)
def bilinear(ctx, input1, input2, weight, bias=None):
    a, b, w = shape_of(input1), shape_of(input2), shape_of(weight, "weight")
    shape_fns.require_equal(a[-1], w[1], "SI131", "bilinear: in1_features")
    shape_fns.require_equal(b[-1], w[2], "SI131", "bilinear: in2_features")
    return like(T(input1), tuple(a[:-1]) + (w[0],))


def _conv(n, transposed):
    def rule(ctx, input, weight, bias=None, stride=1, padding=0, *rest, **kwargs):
        if transposed:  # conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)
            names = ["output_padding", "groups", "dilation"]
            defaults = {"output_padding": 0, "groups": 1, "dilation": 1}
        else:  # conv(input, weight, bias, stride, padding, dilation, groups)
            names = ["dilation", "groups"]
            defaults = {"dilation": 1, "groups": 1}
        params = dict(defaults)
        params.update({k: py(v) for k, v in zip(names, rest)})
        params.update({k: py(v) for k, v in kwargs.items()})
        x, w = T(input), T(weight, "weight")
        out = shape_fns.conv_shape(shape_of(x), shape_of(w), py(stride), py(padding), params["dilation"],
                                   params["groups"], transposed, params.get("output_padding", 0))
        return like(x, out, same_dtype("conv", x, w))

    return rule


for _n in (1, 2, 3):
    op(f"conv{_n}d", getattr(F, f"conv{_n}d"), getattr(torch, f"conv{_n}d"))(_conv(_n, False))
    op(f"conv_transpose{_n}d", getattr(F, f"conv_transpose{_n}d"), getattr(torch, f"conv_transpose{_n}d"))(
        _conv(_n, True))


def _pool(n, with_indices_arg=True):
    def rule(ctx, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False, *args, **kwargs):
        x = T(input)
        out = like(x, shape_fns.pool_shape(shape_of(x), py(kernel_size), py(stride) if not is_none(stride)
                                            else None, py(padding), py(dilation), bool_arg(ceil_mode), n))
        if bool_arg(return_indices):
            return TupleV((out, like(out, out.shape, torch.int64)))
        return out

    return rule


def _avg_pool(n):
    def rule(ctx, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
        x = T(input)
        return like(x, shape_fns.pool_shape(shape_of(x), py(kernel_size), py(stride) if not is_none(stride)
                                            else None, py(padding), 1, bool_arg(ceil_mode), n))

    return rule


for _n in (1, 2, 3):
    op(f"max_pool{_n}d", getattr(F, f"max_pool{_n}d"), getattr(torch, f"max_pool{_n}d"),
       getattr(F, f"max_pool{_n}d_with_indices"))(_pool(_n))
    op(f"avg_pool{_n}d", getattr(F, f"avg_pool{_n}d"),
       getattr(torch, f"avg_pool{_n}d", None) if _n == 1 else None)(_avg_pool(_n))
op("lp_pool2d", F.lp_pool2d)(lambda ctx, input, norm_type, kernel_size, stride=None, ceil_mode=False:
                              like(T(input), shape_fns.pool_shape(shape_of(input), py(kernel_size),
                                                                  py(stride) if not is_none(stride) else None,
                                                                  0, 1, bool_arg(ceil_mode), 2)))


def _adaptive(n, max_pool):
    def rule(ctx, input, output_size, return_indices=False, *args):
        x = T(input)
        out = like(x, shape_fns.adaptive_pool_shape(shape_of(x), py(output_size), n))
        if max_pool and bool_arg(return_indices):
            return TupleV((out, like(out, out.shape, torch.int64)))
        return out

    return rule


for _n in (1, 2, 3):
    op(f"adaptive_avg_pool{_n}d", getattr(F, f"adaptive_avg_pool{_n}d"),
       getattr(torch, f"adaptive_avg_pool{_n}d", None))(_adaptive(_n, False))
    op(f"adaptive_max_pool{_n}d", getattr(F, f"adaptive_max_pool{_n}d"),
       getattr(F, f"adaptive_max_pool{_n}d_with_indices"),
       getattr(torch, f"adaptive_max_pool{_n}d", None))(_adaptive(_n, True))


@op("batch_norm", F.batch_norm, torch.batch_norm)
def batch_norm(ctx, input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, *args, cudnn_enabled=None):
    x = T(input)
    s = shape_of(x)
    if len(s) < 2:
        raise shape_fns.ShapeError("SI150", f"batch_norm expects at least 2-d input, got {len(s)}-d")
    for name, v in (("running_mean", running_mean), ("weight", weight)):
        if not is_none(v):
            shape_fns.require_equal(s[1], shape_of(v)[0], "SI150", f"batch_norm: channels vs {name}")
    return x


@op("instance_norm", F.instance_norm, torch.instance_norm)
def instance_norm(ctx, input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5, *args, cudnn_enabled=None):
    x = T(input)
    s = shape_of(x)
    if not is_none(weight):
        shape_fns.require_equal(s[1], shape_of(weight)[0], "SI150", "instance_norm: channels")
    if bool_arg(use_input_stats, True):
        shape_fns.instance_norm_spatial(s)
    return x


@op("layer_norm", F.layer_norm, torch.layer_norm)
def layer_norm(ctx, input, normalized_shape, weight=None, bias=None, eps=1e-5, *args, cudnn_enable=None):
    x = T(input)
    s = shape_of(x)
    ns = dims_arg(normalized_shape)
    if len(ns) > len(s):
        raise shape_fns.ShapeError("SI150", f"layer_norm over {len(ns)} dims of a {len(s)}-d input "
                                   f"{sym.shape_str(s)}", s)
    for a, b in zip(s[len(s) - len(ns):], ns):
        if sym.equal(a, b) is False:
            raise shape_fns.ShapeError("SI150", f"layer_norm: input ends with {sym.shape_str(s[len(s) - len(ns):])}"
                                       f" but normalized_shape is {sym.shape_str(ns)}", (a, b))
        shape_fns.require_equal(a, b, "SI150", "layer_norm normalized_shape")
    return x


@op("rms_norm", getattr(F, "rms_norm", None), getattr(torch, "rms_norm", None))
def rms_norm(ctx, input, normalized_shape, weight=None, eps=None):
    return layer_norm(ctx, input, normalized_shape, weight)


@op("group_norm", F.group_norm, torch.group_norm)
def group_norm(ctx, input, num_groups, weight=None, bias=None, eps=1e-5, *args, cudnn_enabled=None):
    x = T(input)
    s = shape_of(x)
    g = py(num_groups)
    shape_fns.require_equal(sym.mod(s[1], g), 0, "SI150", f"group_norm: channels divisible by {g} groups")
    return x


@op("local_response_norm", F.local_response_norm)
def local_response_norm(ctx, input, size, alpha=1e-4, beta=0.75, k=1.0):
    return T(input)


@op("embedding", F.embedding)
def embedding(ctx, input, weight, padding_idx=None, max_norm=None, *args, **kwargs):
    idx, w = T(input, "indices"), T(weight, "weight")
    if idx.dtype is not None and not int_dtype(idx.dtype):
        raise shape_fns.ShapeError("SI151", f"embedding indices must be integers, got {idx.dtype}")
    return like(w, shape_of(idx) + (shape_of(w)[-1],), w.dtype)


@op("torch.embedding", torch.embedding)
def torch_embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return embedding(ctx, indices, weight)


@op("one_hot", F.one_hot)
def one_hot(ctx, input, num_classes=-1):
    n = dim_arg(num_classes)
    if n is None:
        raise RuleUnknown("one_hot: num_classes is unknown")
    if sym.is_concrete(n) and n == -1:
        ctx.report("SI003", "one_hot without num_classes: the number of classes depends on the data")
        raise RuleUnknown("one_hot without num_classes depends on the data")
    return like(T(input), shape_of(input) + (n,), torch.int64)


@op("interpolate", F.interpolate, F.upsample, F.upsample_nearest, F.upsample_bilinear)
def interpolate(ctx, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    x = T(input)
    sz = None if is_none(size) else dims_arg(size)
    if sz is not None and len(sz) == 1:
        sz = sz[0]  # one size for every spatial dim
    sf = None if is_none(scale_factor) else py(scale_factor)
    return like(x, shape_fns.interpolate_shape(shape_of(x), sz, sf))


@op("pad", F.pad, torch.constant_pad_nd)
def pad(ctx, input, pad, mode="constant", value=None):
    x = T(input)
    return like(x, shape_fns.pad_shape(shape_of(x), dims_arg(pad), py(mode, "mode")))


@op("unfold", F.unfold)
def unfold(ctx, input, kernel_size, dilation=1, padding=0, stride=1):
    s = shape_of(input)
    k = shape_fns._tuple(py(kernel_size), 2)
    d, p, st = (shape_fns._tuple(py(v), 2) for v in (dilation, padding, stride))
    blocks = sym.product(shape_fns.conv_out_dim(s[-2 + i], k[i], st[i], p[i], d[i]) for i in range(2))
    return like(T(input), tuple(s[:-3]) + (sym.mul(s[-3], k[0] * k[1]), blocks))


@op("cosine_similarity", F.cosine_similarity, torch.cosine_similarity)
def cosine_similarity(ctx, x1, x2, dim=1, eps=1e-8):
    a, b = T(x1), T(x2)
    s = shape_fns.broadcast_shapes(shape_of(a), shape_of(b))
    return like(a, shape_fns.reduce_shape(s, (py(dim),)))


@op("pairwise_distance", F.pairwise_distance, torch.pairwise_distance)
def pairwise_distance(ctx, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    s = shape_fns.broadcast_shapes(shape_of(x1), shape_of(x2))
    return like(T(x1), shape_fns.reduce_shape(s, (-1,), bool_arg(keepdim)))


def _loss(ctx, input, target, *args, reduction="mean", **kwargs):
    x, y = T(input), T(target, "target")
    red = py(reduction) if not is_none(reduction) else "mean"
    for a in args:  # legacy size_average/reduce positional flags: ignore
        pass
    if red == "none":
        if y.dtype is not None and int_dtype(y.dtype) and x.shape is not None and len(x.shape) >= 2:
            return like(x, (x.shape[0],) + tuple(x.shape[2:]))  # class-index targets drop the class dim
        return like(x, shape_fns.broadcast_shapes(shape_of(x), shape_of(y)) if y.shape is not None else x.shape)
    if x.shape is not None and y.shape is not None and not (y.dtype is not None and int_dtype(y.dtype)):
        shape_fns.broadcast_shapes(x.shape, y.shape)
    return like(x, ())


op("loss", F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy,
   F.binary_cross_entropy_with_logits, F.kl_div, F.soft_margin_loss, F.poisson_nll_loss)(_loss)


@op("cross_entropy", F.cross_entropy, F.nll_loss)
def cross_entropy(ctx, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    x, y = T(input), T(target, "target")
    s, ts = shape_of(x), shape_of(y)
    red = py(reduction)
    if y.dtype is not None and int_dtype(y.dtype):
        if len(s) >= 2:
            expect = (s[0],) + tuple(s[2:])
        else:
            expect = ()
        if len(ts) != len(expect):
            raise shape_fns.ShapeError("SI161", f"cross_entropy: target of rank {len(ts)} for input "
                                       f"{sym.shape_str(s)}; expected {sym.shape_str(expect)}")
        for a, b in zip(ts, expect):
            shape_fns.require_equal(a, b, "SI101", "cross_entropy: target size")
        return like(x, expect if red == "none" else ())
    return like(x, (s[0],) + tuple(s[2:]) if red == "none" else ())


@op("scaled_dot_product_attention", F.scaled_dot_product_attention)
def scaled_dot_product_attention(ctx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False):
    q, k, v = shape_of(query, "query"), shape_of(key, "key"), shape_of(value, "value")
    if len(q) < 2 or len(k) < 2 or len(v) < 2:
        raise shape_fns.ShapeError("SI153", "attention operands need rank >= 2")
    shape_fns.require_equal(q[-1], k[-1], "SI153", "attention: query and key head dims")
    shape_fns.require_equal(k[-2], v[-2], "SI153", "attention: key and value lengths")
    batch = shape_fns.broadcast_shapes(q[:-2], k[:-2]) if not bool_arg(enable_gqa) else q[:-2]
    if not is_none(attn_mask):
        shape_fns.broadcast_shapes(shape_of(attn_mask, "attn_mask"), tuple(batch) + (q[-2], k[-2]))
    return like(T(query), tuple(batch) + (q[-2], v[-1]))
