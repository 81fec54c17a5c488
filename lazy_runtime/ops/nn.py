"""Neural-network ops: convolution, pooling, normalization (weight norm too), softmax,
losses (ctc_loss among them), replication padding, bilinear (``_trilinear``), embedding
and embedding_bag, dropout and rrelu, and the fused LSTM and GRU cells (resampling:
``resample.py``). Backward ops are lowered as the JAX vjp of the forward lowering where
torch's formula is not simpler; shapes come from ``shape_fns`` or the arguments' sizes.
One rule reads values: ``_ctc_loss.Tensor``'s (its log_alpha's width is the longest
target length, which torch's kernels also read on the host)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import jax
import jax.numpy as jnp
import torch
from jax import lax

from .. import random as lrandom
from ..errors import NoLowering, UnsupportedOperation
from .common import HIGHEST, amax, check_index, norm_dim, on_xla_cpu, opmath, sf, vjp
from .registry import decomposition, lowering, refuse, rule

aten = torch.ops.aten


def _shape(x):
    return tuple(x.shape)


def _f32(x):
    """Compute half types in float32 (torch's opmath)."""
    return x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.dtype("bfloat16")) else x


# ---- convolution ------------------------------------------------------------------------

_DN = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}


def _tup(v, n):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    return v * n if len(v) == 1 else v


def pool_strides(stride, kernel, n):
    """A pool's strides per spatial dim: the kernel's where none are given (torch's
    default: ``None`` or empty)."""
    return _tup(stride if stride not in (None, [], ()) else kernel, n)


@rule(aten.convolution.default, pure=True)
def convolution_rule(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed and not (x.dtype.is_floating_point or x.dtype.is_complex):
        # lowered as a JAX vjp, which has no integer form: torch's integer kernel runs
        raise NoLowering(aten.convolution.default, f"transposed {x.dtype} convolution")
    return sf.conv_shape(_shape(x), _shape(w), tuple(stride), tuple(padding), tuple(dilation),
                         groups, transposed, tuple(output_padding)), x.dtype


def _conv(x, w, stride, padding, dilation, groups):
    n = w.ndim - 2
    unbatched = x.ndim == n + 1
    if unbatched:
        x = x[None]
    geometry = _tup(stride, n), _tup(padding, n), _tup(dilation, n)
    if jnp.issubdtype(x.dtype, jnp.integer):
        out = _shifted_sum_conv(x, w, *geometry, groups)
        return out[0] if unbatched else out
    pref = jnp.float32 if x.dtype in (jnp.float16, jnp.dtype("bfloat16")) else None
    if _by_shifted_sums(w, groups):
        out = _shifted_sum_conv(_f32(x), _f32(w), *geometry, groups)
        return out[0] if unbatched else out

    def dense(x_, w_, groups_):
        if groups_ == 1 and _pointwise_on_cpu(w_):
            return _pointwise_conv(x_, w_, geometry[0], geometry[1], pref)
        return lax.conv_general_dilated(
            x_, w_, window_strides=geometry[0], padding=[(p, p) for p in geometry[1]],
            rhs_dilation=geometry[2], dimension_numbers=_DN[n], feature_group_count=groups_,
            precision=HIGHEST, preferred_element_type=pref)

    if _by_block_diagonal(w, groups):
        blocks = _block_diagonal(w, groups)
        ins = blocks.shape[2]
        out = jnp.concatenate([dense(x[:, i * ins:(i + 1) * ins], block, 1)
                               for i, block in enumerate(blocks)], axis=1)
    else:
        out = dense(x, w, groups)
    return out[0] if unbatched else out


def _pointwise_on_cpu(w) -> bool:
    """Whether an ungrouped float convolution with a 1 x ... x 1 kernel is lowered as a
    matrix product over its channels: XLA:CPU's convolution took about twice as long
    (a 1x1 conv, batch norm, ReLU, 1x1 conv, forward and gradients: 13.4 ms against 7.0
    at 8 x 64 x 28 x 28 -> 128 channels, torch 6.4; 1.21 s against 0.59 at 32 x 64 x 56 x 56
    -> 256, torch 0.62). XLA:GPU's convolutions are kept."""
    return all(k == 1 for k in w.shape[2:]) and on_xla_cpu()


def _pointwise_conv(x, w, stride, padding, pref):
    """A batched convolution with a 1 x ... x 1 kernel: the input padded and strided, then
    every position's channels times the weight's (dilation meets one tap only)."""
    if any(padding):
        x = jnp.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in padding])
    if any(si != 1 for si in stride):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, si) for si in stride)]
    out = lax.dot_general(x, w.reshape(w.shape[:2]), (((1,), (1,)), ((), ())),
                          precision=HIGHEST, preferred_element_type=pref)
    return jnp.moveaxis(out, -1, 1)


# Kernel positions up to which a depthwise convolution is summed shift by shift on the CPU
# (ConvNeXt's 7x7 is 49; each is one more term of a single fused loop)
MAX_SHIFTED_TAPS = 64


def _by_shifted_sums(w, groups) -> bool:
    """Whether a float convolution is lowered as a sum of shifted products: a depthwise one
    (one input channel per group) on the CPU, whose XLA convolution (and its gradients)
    ran 5 to 60 times slower than the sum, which XLA fuses into one loop
    (``benchmarks/grouped_conv_grad.py``)."""
    return (groups > 1 and w.shape[1] == 1 and math.prod(w.shape[2:]) <= MAX_SHIFTED_TAPS
            and on_xla_cpu())


# A grouped 2-d convolution on the CPU is dense convolutions over block-diagonal weights:
# neighbouring groups joined up to this many input channels (XLA:CPU's dense convolutions
# of 4 or 8 channels ran slower than ones of 16 doing 4 or 2 times the work), and at most
# this many convolutions (each one more to compile: about 0.6 s for a 32-group layer's
# forward and gradients at 16 channels each)
BLOCK_CHANNELS = 16
MAX_BLOCKS = 64


def _groups_per_block(per_group: int, groups: int) -> int:
    """Neighbouring groups one dense convolution of ``_block_diagonal`` holds: the most,
    a power of two dividing ``groups``, within ``BLOCK_CHANNELS`` input channels."""
    joined = 1
    while groups % (joined * 2) == 0 and joined * 2 * per_group <= BLOCK_CHANNELS:
        joined *= 2
    return joined


def _by_block_diagonal(w, groups) -> bool:
    """Whether a float 2-d convolution grouped but not depthwise is lowered as dense
    convolutions (``_block_diagonal``'s), concatenated, on the CPU. XLA:CPU's own grouped
    one and its gradients (JAX's of it, or one convolution grouped over features) ran 3-10
    times slower (a ResNeXt 32 x 8 3x3 layer: forward 53 -> 8 ms, input gradient 53 -> 14,
    weight gradient 48 -> 7; ``benchmarks/grouped_conv_grad.py``). 1-d and 3-d ones keep
    XLA's: there the dense ones' weight gradients were slower (a wav2vec2 positional
    conv's 10 times)."""
    per_group = w.shape[1]
    return (groups > 1 and w.ndim == 4 and per_group > 1
            and groups // _groups_per_block(per_group, groups) <= MAX_BLOCKS
            and on_xla_cpu())


def _block_diagonal(w, groups):
    """A grouped convolution's weight as dense ones, ``(blocks, out channels, in channels,
    *kernel)``: each block ``_groups_per_block`` neighbouring groups, their weights on its
    diagonal, zeros elsewhere (chosen, not multiplied: an infinite weight stays in its own
    group, as in torch)."""
    outs, per_group, kernel = w.shape[0] // groups, w.shape[1], w.shape[2:]
    joined = _groups_per_block(per_group, groups)
    blocks = w.reshape((groups // joined, joined, outs, 1, per_group) + kernel)
    if joined > 1:
        diagonal = jnp.eye(joined, dtype=bool).reshape((1, joined, 1, joined, 1)
                                                       + (1,) * len(kernel))
        blocks = jnp.where(diagonal, blocks, jnp.zeros((), w.dtype))
    return blocks.reshape((groups // joined, joined * outs, joined * per_group) + kernel)


def _shifted_sum_conv(x, w, stride, padding, dilation, groups):
    """A batched convolution as a sum of shifted products, one per kernel offset, in the
    input's dtype. Integer convolutions take it everywhere: XLA:GPU hands convolutions to
    cuDNN, whose only integer convolutions are int8 ones (int32 and int64 were refused as
    UNIMPLEMENTED on an H200, 2026-11-30); the products and sums wrap as torch's integer
    kernel does. Depthwise float ones take it on the CPU (``_by_shifted_sums``)."""
    n = w.ndim - 2
    x = jnp.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in padding])
    batch, out_channels, per_group = x.shape[0], w.shape[0], w.shape[1]
    kernel = w.shape[2:]
    out = _window_count(x.shape[2:], kernel, stride, dilation)
    xg = x.reshape((batch, groups, 1, per_group) + x.shape[2:])
    wg = w.reshape((groups, out_channels // groups, per_group) + kernel)
    total = jnp.zeros((batch, groups, out_channels // groups) + out, x.dtype)
    for offset, window in _windows(kernel, stride, dilation, out):
        taps = wg[(Ellipsis,) + offset].reshape(wg.shape[:3] + (1,) * n)
        total = total + jnp.sum(xg[(Ellipsis,) + window] * taps, axis=3, dtype=x.dtype)
    return total.reshape((batch, out_channels) + out)


def _window_count(padded, kernel, stride, dilation) -> tuple:
    """Positions per spatial dim of a convolution over an input already padded."""
    return tuple((size - di * (k - 1) - 1) // si + 1
                 for size, k, si, di in zip(padded, kernel, stride, dilation))


def _windows(kernel, stride, dilation, out):
    """(kernel offset, the input's slices it meets at every output position) per offset."""
    for offset in itertools.product(*map(range, kernel)):
        yield offset, tuple(slice(o * di, o * di + (m - 1) * si + 1, si)
                            for o, di, m, si in zip(offset, dilation, out, stride))


def _depthwise_input_grad(g, w, x_spatial, stride, padding, dilation, groups):
    """The input gradient of a depthwise ``_shifted_sum_conv`` given its output's gradient
    ``g`` (batched): itself a shifted sum, over ``g`` spread by the stride and padded so
    that every input position meets the kernel, flipped. (A transposed depthwise conv is
    this too.)"""
    n = w.ndim - 2
    kernel = w.shape[2:]
    low = [(k - 1) * di - p for k, di, p in zip(kernel, dilation, padding)]
    high = [size + p - (t - 1) * si - 1
            for size, p, t, si in zip(x_spatial, padding, g.shape[2:], stride)]
    spread = lax.pad(g, jnp.zeros((), g.dtype), [(0, 0, 0)] * 2 + [
        (lo, hi, si - 1) for lo, hi, si in zip(low, high, stride)])
    flipped = jnp.flip(w.reshape((groups, w.shape[0] // groups) + kernel),
                       axis=tuple(range(2, 2 + n)))
    return _shifted_sum_conv(spread, flipped, (1,) * n, (0,) * n, dilation, groups)


def _depthwise_weight_grad(g, x, w, stride, padding, dilation, groups):
    """The weight gradient of a depthwise ``_shifted_sum_conv(x, w)`` given its output's
    gradient ``g`` (both batched): per kernel offset, the sum of ``g`` times the input's
    slices that offset meets, offset by offset in a loop (unrolled, XLA:CPU kept every
    offset's slices alive: 461 MiB for ConvNeXt's 7x7 at batch 8, against 32, and 2.6
    times the time)."""
    n = w.ndim - 2
    x = jnp.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in padding])
    xg = x.reshape((x.shape[0], groups, 1) + x.shape[2:])
    gg = g.reshape((g.shape[0], groups, w.shape[0] // groups) + g.shape[2:])
    offsets = jnp.asarray(list(itertools.product(*map(range, w.shape[2:]))), jnp.int32)
    extent = tuple((m - 1) * si + 1 for m, si in zip(g.shape[2:], stride))
    every = tuple(slice(None, None, si) for si in stride)
    axes = (0,) + tuple(range(3, 3 + n))

    def tap(offset):
        start = jnp.concatenate([jnp.zeros(3, offset.dtype),
                                 offset * jnp.asarray(dilation, offset.dtype)])
        window = lax.dynamic_slice(xg, start, xg.shape[:3] + extent)[(Ellipsis,) + every]
        return jnp.sum(gg * window, axis=axes)

    return jnp.moveaxis(lax.map(tap, offsets), 0, -1).reshape(w.shape)


def _depthwise_backward(g, x, w, stride, padding, dilation, transposed, groups):
    """(input gradient, weight gradient) of a depthwise convolution lowered as shifted sums
    (``_by_shifted_sums``): the first one fused sum, the second a loop over kernel offsets,
    rather than JAX's gradients of the sum (a pad per kernel offset: ConvNeXt's 7x7 kept
    39 of them alive). XLA drops the one ``output_mask`` leaves out."""
    n = w.ndim - 2
    unbatched = x.ndim == n + 1
    if unbatched:
        x, g = x[None], g[None]
    geometry = _tup(stride, n), _tup(padding, n), _tup(dilation, n)
    gc, xc, wc = _f32(g), _f32(x), _f32(w)
    if transposed:   # (its input is the underlying conv's output gradient: they swap)
        gx = _shifted_sum_conv(gc, wc, *geometry, groups)
        gx = gx[(Ellipsis,) + tuple(slice(0, k) for k in x.shape[2:])]
        gw = _depthwise_weight_grad(xc, gc, wc, *geometry, groups)
    else:
        gx = _depthwise_input_grad(gc, wc, x.shape[2:], *geometry, groups)
        gw = _depthwise_weight_grad(gc, xc, wc, *geometry, groups)
    gx = gx.astype(x.dtype)
    return (gx[0] if unbatched else gx), gw.astype(w.dtype)


def _conv_any(x, w, stride, padding, dilation, transposed, output_padding, groups, out_shape):
    if not transposed:
        return _conv(x, w, stride, padding, dilation, groups)
    # A transposed conv is the input-gradient of the conv that maps its output to its input.
    # That conv gives floor(output_padding / stride) more positions per dim than the input
    # has (output_padding may reach the dilation): they meet no input, so they are cut.
    n = w.ndim - 2
    if _by_shifted_sums(w, groups):
        unbatched = x.ndim == n + 1
        xb = x[None] if unbatched else x
        out = _depthwise_input_grad(_f32(xb), _f32(w), out_shape[-n:], _tup(stride, n),
                                    _tup(padding, n), _tup(dilation, n), groups)
        return out[0] if unbatched else out
    z = jnp.zeros(out_shape, x.dtype)
    keep = (Ellipsis,) + tuple(slice(0, k) for k in x.shape[-n:])
    return vjp(lambda z_: _conv(z_, w, stride, padding, dilation, groups)[keep], (z,), x)[0]


@lowering(aten.convolution.default, ctx=True)
def lower_convolution(ctx, x, w, b, stride, padding, dilation, transposed, output_padding,
                      groups):
    out = _conv_any(x, w, stride, padding, dilation, transposed, output_padding, groups,
                    ctx.shape)
    if b is not None:
        out = out + b.reshape((-1,) + (1,) * (w.ndim - 2)).astype(out.dtype)
    return out


@rule(aten.convolution_backward.default, multi=True, pure=True)
def convolution_backward_rule(g, x, w, bias_sizes, stride, padding, dilation, transposed,
                              output_padding, groups, output_mask):
    outs = [(_shape(x), x.dtype), (_shape(w), w.dtype),
            (tuple(bias_sizes), g.dtype) if bias_sizes is not None else None]
    return [o if m else None for o, m in zip(outs, output_mask)]


def _grouped_weight_grad(g, x, w, stride, padding, dilation, groups):
    """The weight gradient of ``conv(x, w)`` given its output's gradient ``g``, as one
    convolution grouped over its features. JAX's own (a convolution grouped over its batch)
    is expanded by XLA:CPU into a dense one over every pair of channels, masked to the
    groups': groups times the work and a (channels, channels, kernel) temporary (a
    depthwise conv1d of 24576 channels, GLM-5-Next's, asked for 18 GiB).

    gw[o, i, k] = sum over n, t of g[n, o, t] * x_padded[n, group(o) * per_group + i,
    t * stride + k * dilation]: a conv over k whose batch is i, whose features are (group,
    n) and whose kernel is g (dilated by the stride), grouped by the groups. (For a
    transposed conv, x and g swap places.)"""
    n = w.ndim - 2
    if x.ndim == n + 1:
        x, g = x[None], g[None]
    batch, per_group, out_per_group = x.shape[0], w.shape[1], w.shape[0] // groups
    sx, sg = x.shape[2:], g.shape[2:]
    spatial = tuple(range(3, 3 + n))
    lhs = x.reshape((batch, groups, per_group) + sx).transpose((2, 1, 0) + spatial)
    rhs = g.reshape((batch, groups, out_per_group) + sg).transpose((1, 2, 0) + spatial)
    pref = jnp.float32 if x.dtype in (jnp.float16, jnp.dtype("bfloat16")) else None
    out = lax.conv_general_dilated(
        lhs.reshape((per_group, groups * batch) + sx),
        rhs.reshape((groups * out_per_group, batch) + sg),
        window_strides=_tup(dilation, n), padding=[(p, p) for p in _tup(padding, n)],
        rhs_dilation=_tup(stride, n), dimension_numbers=_DN[n], feature_group_count=groups,
        precision=HIGHEST, preferred_element_type=pref)
    # (the conv may give more positions than the kernel has: the forward's last window
    # need not reach the input's end)
    out = out[(slice(None), slice(None)) + tuple(slice(0, k) for k in w.shape[2:])]
    return jnp.swapaxes(out, 0, 1).astype(w.dtype)


@lowering(aten.convolution_backward.default)
def lower_convolution_backward(g, x, w, bias_sizes, stride, padding, dilation, transposed,
                               output_padding, groups, output_mask):
    def f(x_, w_):
        return _conv_any(x_, w_, stride, padding, dilation, transposed, output_padding, groups,
                         g.shape)
    gy = g.astype(x.dtype)
    if _by_shifted_sums(w, groups):
        gx, gw = _depthwise_backward(gy, x, w, stride, padding, dilation, transposed, groups)
    elif (groups > 1 and output_mask[1] and on_xla_cpu()
          and not _by_block_diagonal(w, groups)):
        gx = vjp(lambda x_: f(x_, w), (x,), gy)[0] if output_mask[0] else None
        gw = (_grouped_weight_grad(x, gy, w, stride, padding, dilation, groups) if transposed
              else _grouped_weight_grad(gy, x, w, stride, padding, dilation, groups))
    else:
        gx, gw = vjp(f, (x, w), gy)
    gb = None
    if output_mask[2] and bias_sizes is not None:
        axes = tuple(i for i in range(g.ndim) if i != (1 if g.ndim == w.ndim else 0))
        gb = jnp.sum(_f32(g), axis=axes)
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb)


# ---- pooling ------------------------------------------------------------------------------


def _pool_geometry(x_shape, kernel, stride, padding, dilation, ceil_mode, n=2):
    k = _tup(kernel, n)
    s = pool_strides(stride, kernel, n)
    p, d = _tup(padding, n), _tup(dilation, n)
    out = sf.pool_shape(tuple(x_shape), k, s, p, d, ceil_mode, n)[-n:]
    spatial = x_shape[-n:]
    # high padding so that exactly ``out`` windows fit (ceil_mode may need extra)
    high = [max((o - 1) * si + di * (ki - 1) + 1 - sz - pi, 0)
            for o, si, di, ki, sz, pi in zip(out, s, d, k, spatial, p)]
    return k, s, p, d, out, high


def _max_pool_rule(n):
    def max_pool_rule(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        s = sf.pool_shape(_shape(x), kernel_size, stride or None, padding, dilation, ceil_mode,
                          n)
        return [(s, x.dtype), (s, torch.int64)]
    return max_pool_rule


rule(aten.max_pool2d_with_indices.default, multi=True, pure=True)(_max_pool_rule(2))
rule(aten.max_pool3d_with_indices.default, multi=True, pure=True)(_max_pool_rule(3))


def _lowest(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min


def _max_pool(x, n, kernel_size, stride, padding, dilation, ceil_mode):
    """(values, flat indices into the ``n`` spatial dims) of each window's maximum: the
    last NaN wins, then the first of equal values in row-major order (torch's CPU kernel
    scans, taking a greater value or any NaN). A total order, so the result does not
    depend on the order XLA combines the window in."""
    k, s, p, d, out, high = _pool_geometry(x.shape, kernel_size, stride, padding, dilation,
                                           ceil_mode, n)
    lead = x.ndim - n
    spatial = x.shape[lead:]
    size = int(np.prod(spatial))
    idx = jnp.broadcast_to(jnp.arange(size, dtype=jnp.int64).reshape(spatial), x.shape)

    def pick(a, b):
        av, ai = a
        bv, bi = b
        b_nan, a_nan = jnp.isnan(bv), jnp.isnan(av)
        take_b = (bv > av) | (b_nan & (~a_nan | (bi > ai))) | ((bv == av) & (bi < ai))
        return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)

    vals, inds = lax.reduce_window(
        (x, idx), (jnp.asarray(_lowest(x.dtype), x.dtype), jnp.asarray(size, jnp.int64)), pick,
        window_dimensions=(1,) * lead + k, window_strides=(1,) * lead + s,
        padding=((0, 0),) * lead + tuple((pi, hi) for pi, hi in zip(p, high)),
        window_dilation=(1,) * lead + d)
    return vals, inds


@lowering(aten.max_pool2d_with_indices.default)
def lower_max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode)


@lowering(aten.max_pool3d_with_indices.default)
def lower_max_pool3d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode)


@rule(aten.max_pool2d_with_indices_backward.default,
      aten.max_pool3d_with_indices_backward.default, pure=True)
def max_pool_backward_rule(g, x, *args):
    return _shape(x), x.dtype


def _add_at_argmax(g, x, indices, n):
    """Each window's gradient added at its maximum's flat index into the ``n`` spatial
    dims of ``x``."""
    lead = x.shape[:x.ndim - n]
    m = int(np.prod(lead)) if lead else 1
    rows = jnp.arange(m)[:, None]
    out = jnp.zeros((m, int(np.prod(x.shape[x.ndim - n:]))), _f32(g).dtype)
    return out.at[rows, indices.reshape(m, -1)].add(_f32(g.reshape(m, -1))).reshape(x.shape)


def _max_pool_backward(n):
    def lower(g, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
        return _add_at_argmax(g, x, indices, n)
    return lower


lowering(aten.max_pool2d_with_indices_backward.default)(_max_pool_backward(2))
lowering(aten.max_pool3d_with_indices_backward.default)(_max_pool_backward(3))


def _window_pick(v, member):
    """Per window (``member``: [n_out, n_in]) of ``v`` ([..., 1, n_in]): the position of
    torch's CPU pick, which scans in order, takes a value only if strictly greater (the
    first maximum; an all -inf window its first position) and takes every NaN (the last)."""
    nan = member & jnp.isnan(v)
    last_nan = v.shape[-1] - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
    top = jnp.max(jnp.where(member & ~jnp.isnan(v), v, -jnp.inf), axis=-1, keepdims=True)
    first_max = jnp.argmax(member & (v == top), axis=-1)
    return jnp.where(nan.any(-1), last_nan, first_max)


def _adaptive_max_axis(vals, idx, axis, n_out, member=None):
    """Along ``axis``: each adaptive window's pick (``_window_pick``) and the flat index
    it came from. ``member``: the windows ([n_out, n_in] booleans), if not the whole
    axis's (a padded one's come from its true size)."""
    n_in = vals.shape[axis]
    if member is None:
        lo = np.array([(i * n_in) // n_out for i in range(n_out)])
        hi = np.array([-((-(i + 1) * n_in) // n_out) for i in range(n_out)])
        member = (np.arange(n_in)[None, :] >= lo[:, None]) & \
            (np.arange(n_in)[None, :] < hi[:, None])
    v = jnp.expand_dims(jnp.moveaxis(vals, axis, -1), -2)          # [..., 1, n_in]
    i = jnp.expand_dims(jnp.moveaxis(idx, axis, -1), -2)
    at = _window_pick(v, member)[..., None]                         # [..., n_out, 1]
    pick = jnp.take_along_axis(jnp.broadcast_to(v, at.shape[:-1] + (n_in,)), at, -1)[..., 0]
    src = jnp.take_along_axis(jnp.broadcast_to(i, at.shape[:-1] + (n_in,)), at, -1)[..., 0]
    return jnp.moveaxis(pick, -1, axis), jnp.moveaxis(src, -1, axis)


def _adaptive_max_rule(n):
    op = (aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)[n - 2]

    def adaptive_max_pool_rule(x, output_size):
        if not x.dtype.is_floating_point:   # torch refuses them: let it say so
            raise NoLowering(op, f"{x.dtype} input")
        s = sf.adaptive_pool_shape(_shape(x), tuple(output_size), n)
        return [(s, x.dtype), (s, torch.int64)]
    return adaptive_max_pool_rule


rule(aten.adaptive_max_pool2d.default, multi=True)(_adaptive_max_rule(2))
rule(aten.adaptive_max_pool3d.default, multi=True)(_adaptive_max_rule(3))


@lowering(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def lower_adaptive_max_pool(x, output_size):
    """Separable: the pick over a window is the pick over its rows' picks, taken along the
    last spatial axis first (the first maximum, or the last NaN, in row-major order: torch's
    CPU scan)."""
    return adaptive_max(x, output_size)


def adaptive_max(x, output_size, members=None):
    """``lower_adaptive_max_pool``'s (values, flat indices); ``members``: each spatial
    axis's windows, where not the whole axis's (``_adaptive_max_axis``)."""
    n = len(output_size)
    members = members or (None,) * n
    spatial = x.shape[x.ndim - n:]
    idx = jnp.broadcast_to(jnp.arange(int(np.prod(spatial)), dtype=jnp.int64).reshape(spatial),
                           x.shape)
    vals = x
    for k in reversed(range(n)):
        vals, idx = _adaptive_max_axis(vals, idx, x.ndim - n + k, output_size[k], members[k])
    return vals, idx


@rule(aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool_backward_rule(g, x, indices):
    return _shape(x), x.dtype


@lowering(aten.adaptive_max_pool2d_backward.default)
def lower_adaptive_max_pool2d_backward(g, x, indices):
    return _add_at_argmax(g, x, indices, 2)


@lowering(aten.adaptive_max_pool3d_backward.default)
def lower_adaptive_max_pool3d_backward(g, x, indices):
    return _add_at_argmax(g, x, indices, 3)


# ---- fractional max pooling ----------------------------------------------------------------
# Deterministic given ``random_samples`` (N, C, n) in the input's dtype, one sample per
# plane and spatial dim: torch's CPU kernel starts window i of a dim at
# int((i + u) * alpha) - int(u * alpha), alpha = (in - k) / (out - 1), computed in the
# input's dtype, and the last window at in - k. The sample for dim d is column d in 3-D
# (T, H, W) but reversed in 2-D (column 0 for W, 1 for H).

_FRACTIONAL = {aten.fractional_max_pool2d.default: 2, aten.fractional_max_pool3d.default: 3}


def _fractional_rule(x, kernel_size, output_size, random_samples, op):
    """Shapes of (values, indices); arguments torch rejects (or its kernel reads past) run
    eagerly, so that torch raises its own error."""
    n = _FRACTIONAL[op]
    k, out = tuple(kernel_size), tuple(output_size)
    spatial = tuple(x.shape[x.ndim - n:])
    planes = (x.shape[0] if x.ndim == n + 2 else 1, x.shape[x.ndim - n - 1])
    ok = (x.ndim in (n + 1, n + 2) and len(k) == len(out) == n and x.dtype.is_floating_point
          and all(d > 0 for d in x.shape[1:]) and random_samples.dtype == x.dtype
          # (torch reads one row of samples per batch entry and ignores the rest)
          and random_samples.ndim == 3 and random_samples.shape[0] >= planes[0]
          and tuple(random_samples.shape[1:]) == planes[1:] + (n,)
          and all(o > 0 and 0 < kk and o + kk - 1 <= i - (n == 3)   # strict in 3-D
                  for o, kk, i in zip(out, k, spatial)))
    if not ok:
        raise NoLowering(op, "arguments torch's kernel rejects")
    s = tuple(x.shape[:x.ndim - n]) + out
    return [(s, x.dtype), (s, torch.int64)]


@rule(aten.fractional_max_pool2d.default, multi=True)
def fractional_max_pool2d_rule(x, kernel_size, output_size, random_samples):
    return _fractional_rule(x, kernel_size, output_size, random_samples,
                            aten.fractional_max_pool2d.default)


@rule(aten.fractional_max_pool3d.default, multi=True)
def fractional_max_pool3d_rule(x, kernel_size, output_size, random_samples):
    return _fractional_rule(x, kernel_size, output_size, random_samples,
                            aten.fractional_max_pool3d.default)


def _fractional_starts(u, size, out, k):
    """The window starts (int32, [..., out]) along one dim from samples ``u`` ([...])."""
    last = jnp.full(u.shape + (1,), size - k, jnp.int32)
    if out == 1:
        return last
    alpha = jnp.asarray(size - k, u.dtype) / jnp.asarray(out - 1, u.dtype)
    i = jnp.arange(out - 1).astype(u.dtype)
    u = u[..., None]
    starts = ((i + u) * alpha).astype(jnp.int32) - (u * alpha).astype(jnp.int32)
    return jnp.concatenate([starts, last], -1)


def _fractional_max_pool(x, kernel_size, output_size, samples):
    """Each window gathered (its positions in row-major order), then torch's CPU pick
    (``_window_pick``): the first maximum, or the last NaN; flat indices per plane."""
    n = len(kernel_size)
    batched = x.ndim == n + 2
    x = x if batched else x[None]
    samples = samples[:x.shape[0]]
    spatial = x.shape[2:]
    cols = (1, 0) if n == 2 else (0, 1, 2)
    flat = jnp.zeros(samples.shape[:2] + (1,) * (2 * n), jnp.int64)
    for d, (size, out, k) in enumerate(zip(spatial, output_size, kernel_size)):
        pos = _fractional_starts(samples[..., cols[d]], size, out, k)[..., None] + jnp.arange(k)
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = out, k
        stride = int(np.prod(spatial[d + 1:]))
        flat = flat + pos.reshape(samples.shape[:2] + tuple(shape)).astype(jnp.int64) * stride
    window = int(np.prod(kernel_size))
    flat = flat.reshape(flat.shape[:2 + n] + (window,))
    planes = x.reshape(x.shape[:2] + (-1,))
    vals = jnp.take_along_axis(planes, flat.reshape(flat.shape[:2] + (-1,)), -1)
    vals = vals.reshape(flat.shape)
    at = _window_pick(vals[..., None, :], np.ones((1, window), bool))[..., 0, None]
    out = jnp.take_along_axis(vals, at, -1)[..., 0], jnp.take_along_axis(flat, at, -1)[..., 0]
    return out if batched else (out[0][0], out[1][0])


@lowering(aten.fractional_max_pool2d.default, aten.fractional_max_pool3d.default)
def lower_fractional_max_pool(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, tuple(kernel_size), tuple(output_size), random_samples)


@rule(aten.fractional_max_pool2d_backward.default,
      aten.fractional_max_pool3d_backward.default)
def fractional_max_pool_backward_rule(g, x, kernel_size, output_size, indices):
    return _shape(x), x.dtype


@lowering(aten.fractional_max_pool2d_backward.default)
def lower_fractional_max_pool2d_backward(g, x, kernel_size, output_size, indices):
    return _add_at_argmax(g, x, indices, 2)


@lowering(aten.fractional_max_pool3d_backward.default)
def lower_fractional_max_pool3d_backward(g, x, kernel_size, output_size, indices):
    return _add_at_argmax(g, x, indices, 3)


def _avg_pool(x, n, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    k, s, p, d, out, high = _pool_geometry(x.shape, kernel_size, stride, padding, 1, ceil_mode,
                                           n)
    lead = x.ndim - n
    pads = ((0, 0),) * lead + tuple((pi, hi) for pi, hi in zip(p, high))
    win = dict(window_dimensions=(1,) * lead + k, window_strides=(1,) * lead + s, padding=pads)
    xf = _f32(x)
    total = lax.reduce_window(xf, 0.0, lax.add, **win)
    if divisor_override:
        return total / divisor_override
    spatial = x.shape[lead:]
    if count_include_pad:
        # windows count the explicit padding but not the extra ceil_mode overhang
        ones = jnp.ones(tuple(sz + 2 * pi for sz, pi in zip(spatial, p)), xf.dtype)
        extra = tuple((0, max(hi - pi, 0)) for pi, hi in zip(p, high))
        cnt = lax.reduce_window(ones, 0.0, lax.add, window_dimensions=k,
                                window_strides=s, padding=extra)
    else:
        ones = jnp.ones(spatial, xf.dtype)
        cnt = lax.reduce_window(ones, 0.0, lax.add, window_dimensions=k,
                                window_strides=s, padding=tuple(pads[lead:]))
    return total / cnt


def _avg_pool_rule(n):
    def avg_pool_rule(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                      count_include_pad=True, divisor_override=None):
        return sf.pool_shape(_shape(x), kernel_size, stride or None, padding, 1, ceil_mode,
                             n), x.dtype
    return avg_pool_rule


rule(aten.avg_pool2d.default)(_avg_pool_rule(2))
rule(aten.avg_pool3d.default)(_avg_pool_rule(3))


@lowering(aten.avg_pool2d.default)
def lower_avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                     count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@lowering(aten.avg_pool3d.default)
def lower_avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                     count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@rule(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def avg_pool_backward_rule(g, x, *args):
    return _shape(x), x.dtype


def _avg_pool_backward(n):
    def lower(g, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
        return vjp(lambda x_: _avg_pool(x_, n, kernel_size, stride, padding, ceil_mode,
                                        count_include_pad, divisor_override),
                   (_f32(x),), _f32(g))[0]
    return lower


lowering(aten.avg_pool2d_backward.default)(_avg_pool_backward(2))
lowering(aten.avg_pool3d_backward.default)(_avg_pool_backward(3))


# ---- normalization --------------------------------------------------------------------------


def _layer_norm(x, normalized_shape, w, b, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = _f32(x)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = (xf - mean) * rstd
    if w is not None:
        out = out * _f32(w)
    if b is not None:
        out = out + _f32(b)
    return out, mean, rstd


@rule(aten.native_layer_norm.default, multi=True, pure=True)
def native_layer_norm_rule(x, normalized_shape, w, b, eps):
    s = _shape(x)
    k = len(normalized_shape)
    if tuple(s[len(s) - k:]) != tuple(normalized_shape):
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with "
                           f"shape [*, {', '.join(map(str, normalized_shape))}], but got input of "
                           f"size{list(s)}")
    stat = s[:len(s) - k] + (1,) * k
    return [(s, x.dtype), (stat, x.dtype), (stat, x.dtype)]


@lowering(aten.native_layer_norm.default)
def lower_native_layer_norm(x, normalized_shape, w, b, eps):
    return _layer_norm(x, normalized_shape, w, b, eps)


@rule(aten.native_layer_norm_backward.default, multi=True, pure=True)
def native_layer_norm_backward_rule(g, x, normalized_shape, mean, rstd, w, b, output_mask):
    outs = [(_shape(x), x.dtype), (_shape(w), w.dtype) if w is not None else None,
            (_shape(b), b.dtype) if b is not None else None]
    return [o if m else None for o, m in zip(outs, output_mask)]


@lowering(aten.native_layer_norm_backward.default)
def lower_native_layer_norm_backward(g, x, normalized_shape, mean, rstd, w, b, output_mask):
    k = len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    batch_axes = tuple(range(x.ndim - k))
    n = 1
    for s in normalized_shape:
        n *= s
    gf, mean, rstd = _f32(g), _f32(mean), _f32(rstd)
    xhat = (_f32(x) - mean) * rstd
    gxhat = gf * _f32(w) if w is not None else gf
    gx = rstd / n * (n * gxhat - jnp.sum(gxhat, axis=axes, keepdims=True)
                     - xhat * jnp.sum(gxhat * xhat, axis=axes, keepdims=True))
    gw = jnp.sum(gf * xhat, axis=batch_axes) if w is not None else None
    gb = jnp.sum(gf, axis=batch_axes) if b is not None else None
    return tuple(v if m else None for v, m in zip((gx, gw, gb), output_mask))


def _batch_norm(x, w, b, rm, rv, training, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    xf = _f32(x)
    if training:
        mean = jnp.mean(xf, axis=axes)
        var = jnp.mean(jnp.square(xf - mean.reshape(shape)), axis=axes)
    else:
        mean, var = _f32(rm), _f32(rv)
    invstd = lax.rsqrt(var + eps)
    out = (xf - mean.reshape(shape)) * invstd.reshape(shape)
    if w is not None:
        out = out * _f32(w).reshape(shape)
    if b is not None:
        out = out + _f32(b).reshape(shape)
    return out, mean, invstd, var


@rule(aten._native_batch_norm_legit_functional.default, multi=True, pure=True)
def batch_norm_rule(x, w, b, rm, rv, training, momentum, eps):
    c = _shape(x)[1]
    stat = (c,) if training else (0,)
    outs = [(_shape(x), x.dtype), (stat, x.dtype), (stat, x.dtype)]
    outs.append((_shape(rm), rm.dtype) if rm is not None else None)
    outs.append((_shape(rv), rv.dtype) if rv is not None else None)
    return outs


@lowering(aten._native_batch_norm_legit_functional.default)
def lower_batch_norm(x, w, b, rm, rv, training, momentum, eps):
    out, mean, invstd, var = _batch_norm(x, w, b, rm, rv, training, eps)
    new_rm, new_rv = rm, rv
    if training and rm is not None:
        n = x.size // x.shape[1]
        unbiased = var * (n / max(n - 1, 1))
        new_rm = (1 - momentum) * rm + momentum * mean.astype(rm.dtype)
        new_rv = (1 - momentum) * rv + momentum * unbiased.astype(rv.dtype)
    if not training:
        mean = jnp.zeros((0,), x.dtype)
        invstd = jnp.zeros((0,), x.dtype)
    return out, mean, invstd, new_rm, new_rv


@decomposition(aten._native_batch_norm_legit.no_stats)
def batch_norm_no_stats(x, w, b, training, momentum, eps):
    """Batch statistics without running ones: the functional op with none (torch's own
    decomposition returns float32 statistics for 16-bit inputs, its kernel their dtype)."""
    if not training:
        raise NoLowering(aten._native_batch_norm_legit.no_stats, "evaluation without running "
                         "statistics (torch's error)")
    return aten._native_batch_norm_legit_functional.default(x, w, b, None, None, True,
                                                             momentum, eps)[:3]


@decomposition(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update(x, w, b, rm, rv, momentum, eps):
    """Training batch norm returning the new running statistics (and torch's empty
    ``reserve``), statistics in the input's dtype as torch's kernel gives them."""
    out, mean, invstd, new_rm, new_rv = aten._native_batch_norm_legit_functional.default(
        x, w, b, rm, rv, True, momentum, eps)
    return out, mean, invstd, torch.empty(0, dtype=torch.uint8, device=x.device), new_rm, new_rv


@rule(aten.native_batch_norm_backward.default, multi=True, pure=True)
def batch_norm_backward_rule(g, x, w, rm, rv, save_mean, save_invstd, train, eps, output_mask):
    c = _shape(x)[1]
    wdt = w.dtype if w is not None else x.dtype
    outs = [(_shape(x), x.dtype), ((c,), wdt), ((c,), wdt)]
    return [o if m else None for o, m in zip(outs, output_mask)]


@lowering(aten.native_batch_norm_backward.default)
def lower_batch_norm_backward(g, x, w, rm, rv, save_mean, save_invstd, train, eps, output_mask):
    c = x.shape[1]
    w_ = w if w is not None else jnp.ones((c,), x.dtype)

    def f(x_, w__, b__):
        return _batch_norm(x_, w__, b__, rm, rv, train, eps)[0]

    # (the bias seed in the compute dtype: a float32 one rounded float64 bias gradients)
    gx, gw, gb = vjp(f, (_f32(x), _f32(w_), jnp.zeros((c,), _f32(x).dtype)), _f32(g))
    return tuple(v if m else None for v, m in zip((gx, gw, gb), output_mask))


def _weight_norm(v, g, dim):
    """w = g * v / ||v||, the norm over every dim but ``dim`` (over all for -1)."""
    axes = tuple(a for a in range(v.ndim) if a != dim) if dim != -1 else tuple(range(v.ndim))
    return v * (g / jnp.sqrt(jnp.sum(v * v, axis=axes, keepdims=True)))


@rule(aten._weight_norm_interface_backward.default, multi=True)
def weight_norm_backward_rule(grad_w, v, g, norms, dim):
    return [(_shape(v), v.dtype), (_shape(g), g.dtype)]


@lowering(aten._weight_norm_interface_backward.default)
def lower_weight_norm_backward(grad_w, v, g, norms, dim):
    return vjp(lambda v_, g_: _weight_norm(v_, g_, dim), (_f32(v), _f32(g)), _f32(grad_w))


# ---- softmax ----------------------------------------------------------------------------------


@rule(aten._softmax.default, aten._log_softmax.default, pure=True)
def softmax_rule(x, dim, half_to_float):
    norm_dim(dim, x.ndim)
    return _shape(x), torch.float32 if half_to_float else x.dtype


# (torch: "softmax_kernel_impl" not implemented for integers; softmax(x, dtype=) casts first)
refuse((aten._softmax.default, aten._log_softmax.default),
       lambda args, dt: not args[0].is_floating_point(), "an integer input (torch's error)")


@lowering(aten._softmax.default)
def lower_softmax(x, dim, half_to_float):
    return jax.nn.softmax(_f32(x), axis=norm_dim(dim, x.ndim) if x.ndim else None)


@lowering(aten._log_softmax.default)
def lower_log_softmax(x, dim, half_to_float):
    return jax.nn.log_softmax(_f32(x), axis=norm_dim(dim, x.ndim) if x.ndim else None)


@rule(aten._safe_softmax.default)
def safe_softmax_rule(x, dim, dtype=None):
    return _shape(x), dtype or x.dtype


@lowering(aten._safe_softmax.default)
def lower_safe_softmax(x, dim, dtype=None):
    d = norm_dim(dim, x.ndim)
    xf = _f32(x)
    s = jax.nn.softmax(xf, axis=d)
    dead = jnp.all(xf == -jnp.inf, axis=d, keepdims=True)
    return jnp.where(dead, 0, s)


@rule(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
      pure=True)
def softmax_backward_rule(g, y, dim, input_dtype):
    return _shape(g), input_dtype


@lowering(aten._softmax_backward_data.default)
def lower_softmax_backward(g, y, dim, input_dtype):
    d = norm_dim(dim, g.ndim) if g.ndim else None
    g, y = _f32(g), _f32(y)
    return y * (g - jnp.sum(g * y, axis=d, keepdims=True))


@lowering(aten._log_softmax_backward_data.default)
def lower_log_softmax_backward(g, y, dim, input_dtype):
    d = norm_dim(dim, g.ndim) if g.ndim else None
    g, y = _f32(g), _f32(y)
    return g - jnp.exp(y) * jnp.sum(g, axis=d, keepdims=True)


# ---- losses -------------------------------------------------------------------------------------


@rule(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default, multi=True, pure=True)
def nll_loss_rule(x, target, weight, reduction, ignore_index):
    if not _nll_dtypes_ok(x, target, weight):
        raise NoLowering(aten.nll_loss_forward.default, "dtypes torch refuses (its errors)")
    out = _shape(target) if reduction == 0 else ()
    return [(out, x.dtype), ((), x.dtype)]


def _nll_dtypes_ok(x, target, weight) -> bool:
    """torch's: a floating input, a weight of its dtype, an int64 target (or uint8 for
    nll_loss_forward, the op of 1-d and 2-d inputs; nll_loss2d_forward takes int64 only)."""
    targets = (torch.int64, torch.uint8) if x.ndim <= 2 else (torch.int64,)
    return x.dtype.is_floating_point and target.dtype in targets and (
        weight is None or weight.dtype == x.dtype)


def _nll_parts(x, target, weight, ignore_index):
    cdim = 1 if x.ndim >= 2 else 0
    valid = target != ignore_index
    tc = jnp.where(valid, target, 0)
    lp = jnp.squeeze(jnp.take_along_axis(x, jnp.expand_dims(tc, cdim), axis=cdim), cdim)
    w = weight[tc].astype(x.dtype) if weight is not None else jnp.ones(tc.shape, x.dtype)
    w = jnp.where(valid, w, 0)
    return cdim, tc, lp, w


@lowering(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def lower_nll_loss(x, target, weight, reduction, ignore_index):
    n_classes = x.shape[1 if x.ndim >= 2 else 0]
    check_index(target, n_classes,
                f"nll_loss: a target is out of bounds (not in [0, {n_classes}))",
                ignore=ignore_index)
    return nll_loss_values(x, target, weight, reduction, ignore_index)


def nll_loss_values(x, target, weight, reduction, ignore_index):
    """``nll_loss``'s (loss, total weight), its targets taken as checked."""
    _, _, lp, w = _nll_parts(x, target, weight, ignore_index)
    loss = -lp * w
    if reduction == 0:
        return loss, jnp.zeros((), x.dtype)
    total = jnp.sum(w)
    if reduction == 1:
        return jnp.sum(loss) / total, total
    return jnp.sum(loss), total


@rule(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default, pure=True)
def nll_loss_backward_rule(g, x, target, weight, reduction, ignore_index, total_weight):
    return _shape(x), x.dtype


@lowering(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def lower_nll_loss_backward(g, x, target, weight, reduction, ignore_index, total_weight):
    cdim, tc, _, w = _nll_parts(x, target, weight, ignore_index)
    if reduction == 1:
        g = g / total_weight
    scale = -w * g
    onehot = jax.nn.one_hot(tc, x.shape[cdim], axis=cdim, dtype=x.dtype)
    return onehot * jnp.expand_dims(scale, cdim)


@rule(aten.multilabel_margin_loss_forward.default, multi=True)
def multilabel_margin_loss_rule(x, target, reduction):
    if x.dim() > 2:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch "
                           f"size, but got: {list(x.shape)}")
    if tuple(target.shape) != tuple(x.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(x.shape)}")
    out = _shape(x)[:1] if reduction == 0 and x.dim() == 2 else ()
    return [(out, x.dtype), (_shape(target), x.dtype)]


def _multilabel_margin(x, target, reduction):
    """(the reduced loss, is_target [B, C]). A row's targets are its labels before the
    first -1; each pairs with every non-target class. (torch's decomposition of this op
    also counts the positions after the first -1: its values differ from torch's own
    kernels, so the op has a lowering here.)"""
    x2, t2 = jnp.atleast_2d(x), jnp.atleast_2d(target)
    C = x2.shape[1]
    classes = jnp.arange(C)
    end = jnp.min(jnp.where(t2 == -1, classes, C), axis=-1, keepdims=True)
    counted = classes < end                                    # [B, K] the target positions
    labels = jnp.where(counted, t2, 0)
    is_target = jnp.any((labels[:, :, None] == classes) & counted[:, :, None], axis=1)
    u = jnp.take_along_axis(x2, labels, axis=1)                # [B, K]
    z = _positive_part(1 - u[:, :, None] + x2[:, None, :])     # [B, K, C]
    z = jnp.where(counted[:, :, None] & ~is_target[:, None, :], z, 0)
    per_row = jnp.sum(z, axis=(1, 2)) / C
    if reduction == 1:
        loss = jnp.mean(per_row)
    elif reduction == 2:
        loss = jnp.sum(per_row)
    else:
        loss = per_row if x.ndim == 2 else per_row[0]
    return loss.astype(x.dtype), is_target


@lowering(aten.multilabel_margin_loss_forward.default)
def lower_multilabel_margin_loss(x, target, reduction):
    loss, is_target = _multilabel_margin(x, target, reduction)
    return loss, is_target.astype(x.dtype).reshape(target.shape)


@rule(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward_rule(g, x, target, reduction, is_target):
    return _shape(x), x.dtype


@lowering(aten.multilabel_margin_loss_backward.default)
def lower_multilabel_margin_loss_backward(g, x, target, reduction, is_target):
    return vjp(lambda x_: _multilabel_margin(x_, target, reduction)[0], (x,), g)[0]


@rule(aten.multi_margin_loss.default)
def multi_margin_loss_rule(x, target, p=1, margin=1, weight=None, reduction=1):
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    if x.dim() > 2 or target.dim() > 1 or (x.dim() == 2 and target.shape[0] != x.shape[0]):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(x.shape)}")
    # (unreduced: a row's loss each; one input row's loss has the target's shape, () or (1,))
    out = () if reduction != 0 else _shape(x)[:1] if x.dim() == 2 else _shape(target)
    return out, x.dtype


def _positive_part(z):
    """``z`` where ``z > 0``, else 0: torch's margin-loss kernels add a term only ``if (z >
    0)``, so a NaN term is skipped (``max(0, z)`` would keep it)."""
    return jnp.where(z > 0, z, jnp.zeros((), z.dtype))


def _multi_margin(x, target, p, margin, weight, reduction):
    """sum over classes j != y of w[y] * max(0, margin - x[y] + x[j])**p, over C."""
    x2 = jnp.atleast_2d(_f32(x))
    t = jnp.atleast_1d(target)[:, None]
    z = _positive_part(margin - jnp.take_along_axis(x2, t, axis=1) + x2)
    z = z * z if p == 2 else z
    if weight is not None:
        z = z * _f32(weight)[t]
    z = jnp.where(jnp.arange(x2.shape[1]) == t, 0, z)
    per_row = jnp.sum(z, axis=1) / x2.shape[1]
    return _reduce(per_row if x.ndim == 2 else per_row[0].reshape(target.shape), reduction)


@lowering(aten.multi_margin_loss.default)
def lower_multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=1):
    return _multi_margin(x, target, p, margin, weight, reduction)


@rule(aten.multi_margin_loss_backward.default)
def multi_margin_loss_backward_rule(g, x, *args, **kwargs):
    return _shape(x), x.dtype


@lowering(aten.multi_margin_loss_backward.default)
def lower_multi_margin_loss_backward(g, x, target, p, margin, weight=None, reduction=1):
    return vjp(lambda x_: _multi_margin(x_, target, p, margin, weight, reduction),
               (_f32(x),), _f32(g))[0]


@rule(aten.mse_loss.default)
def mse_loss_rule(x, t, reduction=1):
    s = sf.broadcast_shapes(_shape(x), _shape(t))
    return (s if reduction == 0 else ()), x.dtype


def _reduce(v, reduction):
    return v if reduction == 0 else (jnp.mean(v) if reduction == 1 else jnp.sum(v))


@lowering(aten.mse_loss.default)
def lower_mse_loss(x, t, reduction=1):
    return _reduce(jnp.square(_f32(x) - _f32(t)), reduction)


@rule(aten.mse_loss_backward.default)
def mse_loss_backward_rule(g, x, t, reduction):
    return _shape(x), x.dtype


@lowering(aten.mse_loss_backward.default)
def lower_mse_loss_backward(g, x, t, reduction):
    # torch's kernel: ``norm * (x - t) * g``, norm = 2 / numel first (2 * (x - t) overflows
    # near the largest floats)
    norm = 2.0 / max(x.size, 1) if reduction == 1 else 2.0
    return norm * (_f32(x) - _f32(t)) * _f32(g)


@rule(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward_rule(g, x, t, reduction, beta):
    return sf.broadcast_shapes(_shape(g), _shape(x), _shape(t)), x.dtype


@lowering(aten.smooth_l1_loss_backward.default)
def lower_smooth_l1_loss_backward(g, x, t, reduction, beta):
    """torch's vectorized kernel: ``deriv * norm * g``, deriv = sign(x - t) where |x - t| >=
    beta, else (x - t) / beta, so a NaN difference gives NaN (torch's decomposition of this
    op gives 0: ``sign(nan)``)."""
    d = _f32(x) - _f32(t)
    unit = jnp.where(d > 0, jnp.ones((), d.dtype), -jnp.ones((), d.dtype))
    deriv = jnp.where(jnp.abs(d) >= beta, unit, d / beta)
    norm = 1.0 / max(d.size, 1) if reduction == 1 else 1.0
    return deriv * norm * _f32(g)


@rule(aten.binary_cross_entropy_with_logits.default)
def bce_logits_rule(x, t, weight=None, pos_weight=None, reduction=1):
    return (_shape(x) if reduction == 0 else ()), x.dtype


@lowering(aten.binary_cross_entropy_with_logits.default)
def lower_bce_logits(x, t, weight=None, pos_weight=None, reduction=1):
    """torch's composite: ``(1 - t) * x - log_sigmoid(x)`` (times ``(pos_weight - 1) * t + 1``
    for pos_weight), each op rounded to the input's dtype as torch's ops round it (a 16-bit
    loss computed in float32 throughout differs by far more than rounding)."""
    dt = x.dtype

    def op(v):
        return _f32(v.astype(dt))
    x, t = _f32(x), _f32(t)
    log_sigmoid = op(jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x))))
    if pos_weight is not None:
        log_weight = op(op(op(_f32(pos_weight) - 1) * t) + 1)
        log_sigmoid = op(log_sigmoid * log_weight)
    loss = op(op(op(1 - t) * x) - log_sigmoid)
    if weight is not None:
        loss = op(loss * _f32(weight))
    return _reduce(loss, reduction)


# ---- padding modes, bilinear ------------------------------------------------------------------


def _trilinear_operands(shapes, expands):
    """Each operand's dims in the common rank: its own dims where not expanded."""
    rank = len(shapes[0]) + len(expands[0])
    return rank, [[d for d in range(rank) if d not in set(e)] for e in expands]


@rule(aten._trilinear.default)
def trilinear_rule(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    shapes = [_shape(t) for t in (i1, i2, i3)]
    rank, dims = _trilinear_operands(shapes, (expand1, expand2, expand3))
    full = []
    for s, ds in zip(shapes, dims):
        if len(ds) != len(s):
            raise RuntimeError("_trilinear: expand dims do not match the operand's rank")
        padded = [1] * rank
        for d, n in zip(ds, s):
            padded[d] = n
        full.append(tuple(padded))
    out = sf.broadcast_shapes(*full)
    return tuple(n for d, n in enumerate(out) if d not in set(sumdim)), i1.dtype


@lowering(aten._trilinear.default)
def lower_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """One einsum: every dim of the common rank is a letter, summed ones left out of the
    output; size-1 dims of an operand are squeezed (they broadcast)."""
    ops = [i1, i2, i3]
    rank, dims = _trilinear_operands([o.shape for o in ops], (expand1, expand2, expand3))
    letters = "abcdefghijklmnopqrstuvwxyz"[:rank]
    subs, args = [], []
    for o, ds in zip(ops, dims):
        keep = [k for k, n in enumerate(o.shape) if n != 1]
        args.append(o.reshape(tuple(o.shape[k] for k in keep)))
        subs.append("".join(letters[ds[k]] for k in keep))
    present = set("".join(subs))
    out = [d for d in range(rank) if d not in set(sumdim)]
    spec = ",".join(subs) + "->" + "".join(letters[d] for d in out if letters[d] in present)
    r = jnp.einsum(spec, *args, precision=HIGHEST)
    for k, d in enumerate(out):   # dims of size 1 in every operand
        if letters[d] not in present:
            r = jnp.expand_dims(r, k)
    return r


# ---- embedding ----------------------------------------------------------------------------------


@rule(aten.embedding.default, pure=True)
def embedding_rule(w, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if indices.dtype not in (torch.int32, torch.int64):
        raise NoLowering(aten.embedding.default, "indices neither int32 nor int64 "
                                                 "(torch's error)")
    return _shape(indices) + _shape(w)[1:], w.dtype


@lowering(aten.embedding.default)
def lower_embedding(w, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    check_index(indices, w.shape[0], f"embedding: index out of range in self (not in "
                                     f"[0, {w.shape[0]}))")
    return jnp.take(w, indices, axis=0)


@rule(aten.embedding_dense_backward.default, pure=True)
def embedding_backward_rule(g, indices, num_weights, padding_idx, scale_grad_by_freq):
    return (num_weights,) + _shape(g)[indices.ndim:], g.dtype


@lowering(aten.embedding_dense_backward.default)
def lower_embedding_backward(g, indices, num_weights, padding_idx, scale_grad_by_freq):
    """Each gradient row added to its index's row; with ``scale_grad_by_freq`` first divided
    by how often that index occurs (torch's CPU kernel scales each row before adding)."""
    d = g.shape[indices.ndim:]
    flat_i = indices.reshape(-1)
    flat_g = _f32(g).reshape((-1,) + d)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), flat_g.dtype).at[flat_i].add(1)
        flat_g = flat_g * (1 / counts[flat_i]).reshape((-1,) + (1,) * len(d))
    out = jnp.zeros((num_weights,) + d, flat_g.dtype).at[flat_i].add(flat_g)
    if padding_idx is not None and padding_idx >= 0:
        out = out.at[padding_idx].set(0)
    return out


@rule(aten.embedding_renorm.default)
def embedding_renorm_rule(w, indices, max_norm, norm_type):
    if w.ndim != 2 or indices.dtype not in (torch.int32, torch.int64):
        raise NoLowering(aten.embedding_renorm.default, "torch refuses these arguments")
    return _shape(w), w.dtype


@lowering(aten.embedding_renorm.default)
def lower_embedding_renorm(w, indices, max_norm, norm_type):
    """``embedding_renorm_``'s functional form: each row that ``indices`` name and whose
    ``norm_type``-norm exceeds ``max_norm`` is scaled by ``max_norm / (norm + 1e-7)``."""
    named = jnp.zeros((w.shape[0],), jnp.bool_).at[indices.reshape(-1)].set(True)
    a = jnp.abs(_f32(w))
    if norm_type == float("inf"):
        norm = amax(a, axis=1)
    elif norm_type == 0:
        norm = (a != 0).sum(axis=1).astype(a.dtype)
    else:
        norm = (a ** norm_type).sum(axis=1) ** (1 / norm_type)
    scale = jnp.where(named & (norm > max_norm), max_norm / (norm + 1e-7), 1)
    return (_f32(w) * scale[:, None].astype(a.dtype)).astype(w.dtype)


# ---- embedding_bag ------------------------------------------------------------------------
#
# Mirrors torch's CPU kernels (EmbeddingBag.cpp). Bag boundaries are data (``offsets``), so
# each index's bag is computed in the graph: ``offset2bag[i] = #{j: offsets[j] <= i} - 1``
# (torch's own scatter of ones and cumsum); shapes depend only on sizes.

_EB_SUM, _EB_MEAN, _EB_MAX = 0, 1, 2
_EB_INDEX = (torch.int32, torch.int64)
_EB_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_EB_FAST = (torch.float32, torch.float16, torch.bfloat16)


def _embedding_bag_rule(op, forward_only):
    def embedding_bag_rule(w, indices, offsets, scale_grad_by_freq=False, mode=0,
                           sparse=False, per_sample_weights=None, include_last_offset=False,
                           padding_idx=-1):
        psw = per_sample_weights
        # what torch rejects (or leaves undefined) is left to it: it raises its own error
        if (indices.dtype not in _EB_INDEX or offsets.dtype not in _EB_INDEX
                or w.dtype not in _EB_FLOAT or w.ndim != 2 or indices.ndim != 1
                or offsets.ndim != 1 or mode not in (_EB_SUM, _EB_MEAN, _EB_MAX)):
            raise NoLowering(op, "arguments torch's kernel rejects")
        if psw is not None and (mode != _EB_SUM or psw.dtype != w.dtype or psw.ndim != 1
                                or psw.numel() != indices.numel()):
            raise NoLowering(op, "per_sample_weights torch's kernel rejects")
        nb = offsets.shape[0] - (1 if include_last_offset else 0)
        if nb < 1:
            raise NoLowering(op, "no bags")
        # torch's "fast path" (index_select_add) skips offset2bag in sum mode, and with
        # include_last_offset ends the last bag at the last offset, not at the end
        fast_kind = w.dtype in _EB_FAST and padding_idx < 0
        fast = fast_kind and w.stride(1) == 1 and (psw is None or psw.stride(0) == 1)
        if include_last_offset and mode != _EB_MAX and fast_kind and not fast:
            # the lowering tells the two paths apart by dtype and padding_idx alone
            raise NoLowering(op, "include_last_offset with a strided weight")
        it = torch.promote_types(indices.dtype, offsets.dtype)
        o2b = (0,) if mode == _EB_SUM and fast else (indices.shape[0],)
        if mode == _EB_MAX:
            size, maxi = (nb,), (nb, w.shape[1])
        else:   # forward_only's sum mode sizes bag_size like offsets (zeros)
            size = maxi = (offsets.shape[0],) if forward_only and mode == _EB_SUM else (nb,)
        return [((nb, w.shape[1]), w.dtype), (o2b, it), (size, it), (maxi, it)]
    return embedding_bag_rule


rule(aten._embedding_bag.default, multi=True)(
    _embedding_bag_rule(aten._embedding_bag.default, False))
rule(aten._embedding_bag_forward_only.default, multi=True)(
    _embedding_bag_rule(aten._embedding_bag_forward_only.default, True))


def _offset2bag(offsets, n):
    """Each of ``n`` indices' bag: ones scattered at the offsets, cumulated, minus one."""
    marks = jnp.zeros((n + 1,), jnp.int64).at[offsets.astype(jnp.int64)].add(1, mode="drop")
    return (jnp.cumsum(marks) - 1)[:n]


@lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default, ctx=True)
def lower_embedding_bag(ctx, w, indices, offsets, scale_grad_by_freq=False, mode=0,
                        sparse=False, per_sample_weights=None, include_last_offset=False,
                        padding_idx=-1):
    n = indices.shape[0]
    nb = offsets.shape[0] - (1 if include_last_offset else 0)
    offsets = offsets.astype(jnp.int64)
    seg = _offset2bag(offsets[:nb], n)          # the last offset is ignored here (torch's)
    valid = indices != padding_idx
    pads = jnp.zeros((nb,), jnp.int64).at[seg].add((~valid).astype(jnp.int64), mode="drop")
    # torch: the offsets' differences, the last bag up to the end of indices, less padding
    bag_size = jnp.concatenate([offsets[1:nb] - offsets[:nb - 1],
                                jnp.asarray([n], jnp.int64) - offsets[nb - 1:nb]]) - pads
    rows = jnp.take(w, indices, axis=0, mode="clip")          # [n, d]
    if mode == _EB_MAX:
        out, max_idx = _eb_max(rows, indices, seg, valid, nb)
        return out, seg, bag_size, max_idx
    add_seg = seg
    fast_kind = jnp.dtype(w.dtype) in (jnp.float32, jnp.float16, jnp.bfloat16)
    if include_last_offset and fast_kind and padding_idx < 0:
        add_seg = jnp.where(jnp.arange(n) < offsets[nb], seg, nb)   # dropped below
    vals = _f32(rows)
    if per_sample_weights is not None:
        vals = vals * _f32(per_sample_weights)[:, None]
    vals = jnp.where(valid[:, None], vals, 0)
    out = jax.ops.segment_sum(vals, add_seg, num_segments=nb).astype(w.dtype)
    if mode == _EB_MEAN:
        out = out / jnp.maximum(bag_size, 1).astype(w.dtype)[:, None]
        return out, seg, bag_size, bag_size
    zeros = jnp.zeros(ctx.shape[2], jnp.int64)   # sum mode: bag_size, max_indices zeroed
    return out, seg[:ctx.shape[1][0]], zeros, zeros


def _eb_max(rows, indices, seg, valid, nb):
    """Each bag's maximum per feature and the embedding index it came from. torch's loop:
    the first row of a bag, then any strictly greater one (a later NaN never wins, a
    leading NaN stays); padding skipped; an empty bag gives 0 and index 0."""
    n, d = rows.shape
    pos = jnp.arange(n)
    first = jax.ops.segment_min(jnp.where(valid, pos, n), seg, num_segments=nb)  # [nb]
    firstc = jnp.clip(first, 0, max(n - 1, 0))
    keyed = jnp.where(valid[:, None] & ~jnp.isnan(rows), rows, -jnp.inf)
    top = jax.ops.segment_max(keyed, seg, num_segments=nb)                       # [nb, d]
    hit = valid[:, None] & (keyed == top[jnp.clip(seg, 0, nb - 1)])
    at = jax.ops.segment_min(jnp.where(hit, pos[:, None], n), seg, num_segments=nb)
    lead_nan = jnp.isnan(rows[firstc]) if n else jnp.zeros((nb, d), bool)
    at = jnp.where(lead_nan, firstc[:, None], at)
    empty = (first >= n)[:, None]
    atc = jnp.clip(at, 0, max(n - 1, 0))
    if n:
        out, idx = rows[atc, jnp.arange(d)], indices[atc]
    else:
        out = jnp.zeros((nb, d), rows.dtype)
        idx = jnp.zeros((nb, d), indices.dtype)
    return jnp.where(empty, 0, out), jnp.where(empty, 0, idx)


def _eb_seg(indices, offsets, offset2bag):
    """offset2bag, recomputed from all the offsets where the forward skipped it (torch's
    backward does the same)."""
    n = indices.shape[0]
    if offset2bag.shape[0] == 0 and n:
        return _offset2bag(offsets.astype(jnp.int64), n)
    return offset2bag.astype(jnp.int64)


def _eb_dense_backward(g, indices, seg, bag_size, max_idx, num_weights, mode, psw,
                       padding_idx):
    d = g.shape[1]
    gf = _f32(g)
    if mode == _EB_MAX:   # each nonempty bag's gradient goes to its maxima's rows
        keep = jnp.where((bag_size != 0)[:, None], gf, 0)
        cols = jnp.broadcast_to(jnp.arange(d), max_idx.shape)
        return jnp.zeros((num_weights, d), gf.dtype).at[max_idx, cols].add(keep)
    scale = jnp.ones(indices.shape, gf.dtype)
    if psw is not None:
        scale = scale * _f32(psw)
    if mode == _EB_MEAN:
        bs = bag_size[seg].astype(gf.dtype)
        scale = jnp.where(bs != 0, scale / jnp.where(bs != 0, bs, 1), scale)
    contrib = gf[seg] * scale[:, None]
    contrib = jnp.where((indices != padding_idx)[:, None], contrib, 0)
    return jnp.zeros((num_weights, d), gf.dtype).at[indices].add(contrib)


def _eb_backward_check(op, g, scale_grad_by_freq, mode, sparse=False):
    if sparse:   # its eager fallback would make a sparse tensor, which the device lacks
        raise UnsupportedOperation(f"{op}: sparse=True (a sparse gradient) is not supported "
                                   "on lazy tensors; use sparse=False")
    if scale_grad_by_freq:   # torch's CPU kernel scales by an oddly indexed count
        raise NoLowering(op, "scale_grad_by_freq")
    if g.dtype not in _EB_FLOAT or g.ndim != 2 or mode not in (_EB_SUM, _EB_MEAN, _EB_MAX):
        raise NoLowering(op, "arguments torch's kernel rejects")


@rule(aten._embedding_bag_backward.default)
def embedding_bag_backward_rule(g, indices, offsets, offset2bag, bag_size, max_indices,
                                num_weights, scale_grad_by_freq, mode, sparse,
                                per_sample_weights, padding_idx=-1):
    _eb_backward_check(aten._embedding_bag_backward.default, g, scale_grad_by_freq, mode,
                       sparse)
    return (num_weights, g.shape[1]), g.dtype


@lowering(aten._embedding_bag_backward.default)
def lower_embedding_bag_backward(g, indices, offsets, offset2bag, bag_size, max_indices,
                                 num_weights, scale_grad_by_freq, mode, sparse,
                                 per_sample_weights, padding_idx=-1):
    seg = _eb_seg(indices, offsets, offset2bag)
    return _eb_dense_backward(g, indices, seg, bag_size, max_indices, num_weights, mode,
                              per_sample_weights, padding_idx)


@rule(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward_rule(g, indices, offset2bag, bag_size, max_indices,
                                      num_weights, scale_grad_by_freq, mode,
                                      per_sample_weights, padding_idx=-1):
    op = aten._embedding_bag_dense_backward.default
    _eb_backward_check(op, g, scale_grad_by_freq, mode)
    if offset2bag.shape[0] != indices.shape[0]:
        raise NoLowering(op, "offset2bag of another size than indices")
    return (num_weights, g.shape[1]), g.dtype


@lowering(aten._embedding_bag_dense_backward.default)
def lower_embedding_bag_dense_backward(g, indices, offset2bag, bag_size, max_indices,
                                       num_weights, scale_grad_by_freq, mode,
                                       per_sample_weights, padding_idx=-1):
    return _eb_dense_backward(g, indices, offset2bag.astype(jnp.int64), bag_size,
                              max_indices, num_weights, mode, per_sample_weights, padding_idx)


@rule(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_psw_backward_rule(g, w, indices, offsets, offset2bag, mode, padding_idx=-1):
    if mode != _EB_SUM or g.ndim != 2 or g.dtype not in _EB_FLOAT or indices.ndim != 1:
        raise NoLowering(aten._embedding_bag_per_sample_weights_backward.default,
                         "arguments torch's kernel rejects")
    return (indices.shape[0],), g.dtype


@lowering(aten._embedding_bag_per_sample_weights_backward.default)
def lower_embedding_bag_psw_backward(g, w, indices, offsets, offset2bag, mode, padding_idx=-1):
    """Each sample's gradient: its bag's output gradient dotted with its embedding row."""
    seg = _eb_seg(indices, offsets, offset2bag)
    rows = jnp.take(_f32(w), indices, axis=0, mode="clip")
    dots = jnp.sum(_f32(g)[seg] * rows, axis=1)
    return jnp.where(indices != padding_idx, dots, 0)


# ---- ctc_loss ---------------------------------------------------------------------------
#
# torch's CPU kernels (LossCTC.cpp) in log space: alpha is a ``lax.scan`` over time of all
# batch rows at once, each row masked by its own lengths. ``log_alpha`` is [B, T, 2L + 1]
# with L the longest target: its width depends on ``target_lengths``' values. Those are
# ints in ``_ctc_loss.default``; ``_ctc_loss.Tensor``'s rule reads them on the host, as
# torch's kernels do (copied to the CPU).

_NEG_INF = -jnp.inf


def _ctc_lengths(op, x):
    """The values of a lengths argument (a list, or a tensor read on the host)."""
    if not isinstance(x, torch.Tensor):
        return [int(v) for v in x]
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise NoLowering(op, "non-integral lengths")
    if x.device.type == "cpu":
        return [int(v) for v in x.reshape(-1).tolist()]
    from ..executor import read_for_shape
    return [int(v) for v in read_for_shape(x).reshape(-1).tolist()]


def _ctc_check(op, lp, targets, il, tl, blank):
    """Decline what torch rejects (it raises its own error); returns the longest target."""
    if (lp.ndim != 3 or lp.dtype not in (torch.float32, torch.float64) or lp.numel() == 0
            or targets.dtype not in (torch.int32, torch.int64) or targets.ndim not in (1, 2)):
        raise NoLowering(op, "arguments torch's kernel rejects")
    T, B, C = lp.shape
    if not 0 <= blank < C or len(il) != B or len(tl) != B:
        raise NoLowering(op, "arguments torch's kernel rejects")
    if any(v < 0 or v > T for v in il) or any(v < 0 for v in tl):
        raise NoLowering(op, "lengths torch's kernel rejects")
    if targets.ndim == 2 and (targets.shape[0] != B or targets.shape[1] < max(tl)):
        raise NoLowering(op, "targets torch's kernel rejects")
    if targets.ndim == 1 and targets.shape[0] != sum(tl):
        raise NoLowering(op, "targets torch's kernel rejects")
    return max(tl)


def _ctc_rule(op):
    def ctc_loss_rule(lp, targets, input_lengths, target_lengths, blank=0,
                      zero_infinity=False):
        il, tl = _ctc_lengths(op, input_lengths), _ctc_lengths(op, target_lengths)
        L = _ctc_check(op, lp, targets, il, tl, blank)
        T, B, _ = lp.shape
        return [((B,), lp.dtype), ((B, T, 2 * L + 1), lp.dtype)]
    return ctc_loss_rule


rule(aten._ctc_loss.default, multi=True)(_ctc_rule(aten._ctc_loss.default))
rule(aten._ctc_loss.Tensor, multi=True)(_ctc_rule(aten._ctc_loss.Tensor))


def _ctc_prep(lp, targets, il, tl, blank, width):
    """(lengths as arrays, the extended labels [B, S] (blanks between and around each
    target), the log-probabilities of those labels [T, B, S], whether s may come from
    s - 2 [B, S], the valid label positions s <= 2 * tl [B, S])."""
    B = lp.shape[1]
    L = (width - 1) // 2
    il = jnp.asarray(il).astype(jnp.int64).reshape(B)
    tl = jnp.asarray(tl).astype(jnp.int64).reshape(B)
    if targets.ndim == 2:
        tg = targets[:, :L]
    else:   # concatenated: each row's slice, padded (the padding is never a valid label)
        start = jnp.cumsum(tl) - tl
        pos = jnp.clip(start[:, None] + jnp.arange(L), 0, max(targets.shape[0] - 1, 0))
        tg = targets[pos] if targets.shape[0] else jnp.zeros((B, L), targets.dtype)
    tg = tg.astype(jnp.int64)
    valid = jnp.arange(width)[None, :] <= 2 * tl[:, None]
    ext = jnp.full((B, width), blank, jnp.int64)
    if L:   # (labels past a row's own length may be anything: blanks there)
        ext = jnp.where(valid, ext.at[:, 1::2].set(tg), blank)
    lp_ext = jnp.take_along_axis(lp, jnp.broadcast_to(ext[None], (lp.shape[0],) + ext.shape),
                                 axis=2)
    prev2 = jnp.pad(ext, ((0, 0), (2, 0)), constant_values=-1)[:, :width]
    skip = (jnp.arange(width) > 1) & (ext != prev2)
    return il, tl, ext, lp_ext, skip, valid


def _log_add3(a, b, c):
    """log(e^a + e^b + e^c) as torch computes it (shifted by the max; 0 if all -inf)."""
    m = jnp.maximum(jnp.maximum(a, b), c)
    m = jnp.where(m == _NEG_INF, 0, m)
    return jnp.log(jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)) + m


def _shift(x, k, fill=_NEG_INF):
    """x[..., s - k] along the last axis (k < 0: x[..., s + |k|]), ``fill`` outside."""
    w = x.shape[-1]
    pad = ((0, 0),) * (x.ndim - 1) + ((k, 0) if k > 0 else (0, -k),)
    p = jnp.pad(x, pad, constant_values=fill)
    return p[..., :w] if k > 0 else p[..., -k:]


def _ctc_alpha(lp_ext, skip, tl):
    """alpha [T, B, S]: alpha[0] is torch's first row; later rows are correct at every
    valid position (garbage beyond 2 * tl never flows back down)."""
    width = lp_ext.shape[2]
    a0 = jnp.full(lp_ext.shape[1:], _NEG_INF, lp_ext.dtype).at[:, 0].set(lp_ext[0, :, 0])
    if width > 1:
        a0 = a0.at[:, 1].set(jnp.where(tl > 0, lp_ext[0, :, 1], _NEG_INF))

    def step(a, lpt):
        a = _log_add3(a, _shift(a, 1), jnp.where(skip, _shift(a, 2), _NEG_INF)) + lpt
        return a, a

    _, rest = lax.scan(step, a0, lp_ext[1:])
    return jnp.concatenate([a0[None], rest], axis=0)


def _ctc_nll(alpha, il, tl):
    B = alpha.shape[1]
    last = alpha[jnp.clip(il - 1, 0), jnp.arange(B)]                 # [B, S]
    l1 = jnp.take_along_axis(last, (2 * tl)[:, None], axis=1)[:, 0]
    l2 = jnp.take_along_axis(last, jnp.maximum(2 * tl - 1, 0)[:, None], axis=1)[:, 0]
    l2 = jnp.where(tl > 0, l2, _NEG_INF)
    nll = -_log_add3(l1, l2, jnp.full_like(l1, _NEG_INF))   # (a third term of 0)
    # no input: the empty target has likelihood 1, any other 0 (torch's values)
    return jnp.where(il == 0, jnp.where(tl == 0, -0.0, jnp.inf), nll).astype(alpha.dtype)


@lowering(aten._ctc_loss.default, aten._ctc_loss.Tensor, ctx=True)
def lower_ctc_loss(ctx, lp, targets, input_lengths, target_lengths, blank=0,
                   zero_infinity=False):
    """(neg_log_likelihood, log_alpha); log_alpha is -inf where torch leaves it unset
    (t >= input length, s > 2 * target length). zero_infinity is applied by ctc_loss."""
    width = ctx.shape[1][2]
    il, tl, _, lp_ext, skip, valid = _ctc_prep(lp, targets, input_lengths, target_lengths,
                                                blank, width)
    alpha = _ctc_alpha(lp_ext, skip, tl)
    t_ok = jnp.arange(lp.shape[0])[:, None] < il[None, :]                # [T, B]
    log_alpha = jnp.where(t_ok[:, :, None] & valid[None], alpha, _NEG_INF)
    return _ctc_nll(alpha, il, tl), jnp.transpose(log_alpha, (1, 0, 2))


def _ctc_backward_rule(op):
    def ctc_loss_backward_rule(g, lp, targets, input_lengths, target_lengths, nll,
                               log_alpha, blank, zero_infinity=False):
        if (lp.ndim != 3 or lp.dtype not in (torch.float32, torch.float64)
                or log_alpha.ndim != 3 or targets.ndim not in (1, 2)
                or not 0 <= blank < lp.shape[2]):
            raise NoLowering(op, "arguments torch's kernel rejects")
        return _shape(lp), lp.dtype
    return ctc_loss_backward_rule


rule(aten._ctc_loss_backward.default)(_ctc_backward_rule(aten._ctc_loss_backward.default))
rule(aten._ctc_loss_backward.Tensor)(_ctc_backward_rule(aten._ctc_loss_backward.Tensor))


@lowering(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def lower_ctc_loss_backward(g, lp, targets, input_lengths, target_lengths, nll, log_alpha,
                            blank, zero_infinity=False):
    """torch's formula, not the vjp of the forward: for t < input length,
    (exp(lp) - exp(log sum over s with label c of alpha * beta + nll - lp)) * grad,
    0 after; the exp(lp) term is torch's (it cancels through log_softmax). log_alpha is
    read only where torch defines it; beta is a reverse scan."""
    T, B, _ = lp.shape
    width = log_alpha.shape[2]
    il, tl, ext, lp_ext, skip, valid = _ctc_prep(lp, targets, input_lengths, target_lengths,
                                                  blank, width)
    ts = jnp.arange(T)
    t_ok = ts[:, None] < il[None, :]                                     # [T, B]
    alpha = jnp.where(t_ok[:, :, None] & valid[None],
                      jnp.transpose(log_alpha, (1, 0, 2)).astype(lp.dtype), _NEG_INF)
    s = jnp.arange(width)[None, :]
    ends = valid & ((s == 2 * tl[:, None]) | ((s == 2 * tl[:, None] - 1) & (tl[:, None] > 0)))
    # s may come from s + 2 where s + 2 may come from s (the same test, shifted)
    skip_up = _shift(skip, -2, False)

    def step(b, xs):
        lpt, t = xs
        rec = _log_add3(b, _shift(b, -1), jnp.where(skip_up, _shift(b, -2), _NEG_INF)) + lpt
        first = jnp.where(ends, lpt, _NEG_INF)
        b = jnp.where((t == il - 1)[:, None], first,
                      jnp.where((t < il - 1)[:, None], rec, _NEG_INF))
        b = jnp.where(valid, b, _NEG_INF)
        return b, b

    b_last = jnp.full((B, width), _NEG_INF, lp.dtype)
    _, beta = lax.scan(step, b_last, (lp_ext, ts), reverse=True)
    ab = alpha + beta                                                    # [T, B, S]
    # per class: the log of the sum of exp(ab) over the positions carrying that label
    tb = (ts[:, None, None], jnp.arange(B)[None, :, None], ext[None])
    peak = jnp.full(lp.shape, _NEG_INF, lp.dtype).at[tb].max(ab)
    peak = jnp.where(peak == _NEG_INF, 0, peak)
    total = jnp.zeros(lp.shape, lp.dtype).at[tb].add(jnp.exp(ab - peak[tb]))
    lcab = jnp.log(total) + peak
    nll = nll.astype(lp.dtype)
    gr = g.astype(lp.dtype)[None, :, None]
    grad = (jnp.exp(lp) - jnp.exp(lcab + nll[None, :, None] - lp)) * gr
    keep = t_ok
    if zero_infinity:
        keep = keep & (nll != jnp.inf)[None, :]
    return jnp.where(keep[:, :, None], grad, 0)


# ---- dropout and random --------------------------------------------------------------------------


@rule(aten.native_dropout.default, multi=True)
def native_dropout_rule(x, p, train):
    return [(_shape(x), x.dtype), (_shape(x), torch.bool)]


@lowering(aten.native_dropout.default)
def lower_native_dropout(x, p, train, _rng):
    if train is False:
        return x, jnp.ones(x.shape, jnp.bool_)
    if p >= 1:
        return jnp.zeros_like(x), jnp.zeros(x.shape, jnp.bool_)
    keep = jax.random.bernoulli(lrandom.key_from(_rng), 1 - p, x.shape)
    return jnp.where(keep, x / (1 - p), 0).astype(x.dtype), keep


@rule(aten.native_dropout_backward.default)
def native_dropout_backward_rule(g, mask, scale):
    # (integers times the float scale: torch's default float type)
    float_g = g.dtype.is_floating_point or g.dtype.is_complex
    return _shape(g), g.dtype if float_g else torch.get_default_dtype()


@lowering(aten.native_dropout_backward.default)
def lower_native_dropout_backward(g, mask, scale):
    return g * mask.astype(g.dtype) * scale


@decomposition(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise(x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    """(out, noise). Training: a slope drawn uniformly from [lower, upper] (in the compute
    type, from the lazy stream) for each input <= 0, 1 elsewhere (torch's CPU kernel; its
    values differ). Evaluation: a leaky relu with the mean slope, the noise untouched. A
    decomposition, not a lowering, so that the draw is an ordinary ``uniform_`` node."""
    op = aten.rrelu_with_noise_functional.default
    if generator is not None:
        raise NoLowering(op, "explicit torch.Generator")
    if not x.dtype.is_floating_point or (training and x.dtype == torch.float16):
        raise NoLowering(op, f"{x.dtype} input (torch's CPU kernel refuses it: its error)")
    if not training:
        return aten.leaky_relu.default(x, (lower + upper) / 2), aten.clone.default(noise)
    slopes = aten.empty.memory_format(tuple(x.shape), dtype=opmath(x.dtype), device=x.device)
    slopes = aten.uniform_.default(slopes, lower, upper)
    neg = x <= 0
    out = torch.where(neg, x * slopes, x).to(x.dtype)
    return out, torch.where(neg, slopes, 1).to(noise.dtype)


# ---- fused LSTM cell (what nn.LSTMCell calls on a non-CPU device; nn.LSTM: ops/recurrent.py) --


@rule(aten._thnn_fused_lstm_cell.default, multi=True)
def lstm_cell_rule(ig, hg, cx, ib=None, hb=None):
    return [(_shape(cx), cx.dtype), (_shape(cx), cx.dtype), (_shape(ig), ig.dtype)]


def lstm_step(gates, cx):
    """One LSTM step from its summed gate pre-activations (torch's order i, f, g, o):
    (hy, cy, the gates after their activations). The fused cell's and the layer's."""
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * cx + i * g
    return o * jnp.tanh(cy), cy, (i, f, g, o)


@lowering(aten._thnn_fused_lstm_cell.default)
def lower_lstm_cell(ig, hg, cx, ib=None, hb=None):
    gates = ig + hg
    if ib is not None:
        gates = gates + ib
    if hb is not None:
        gates = gates + hb
    hy, cy, activated = lstm_step(gates, cx)
    return hy, cy, jnp.concatenate(activated, axis=-1)


@rule(aten._thnn_fused_lstm_cell_backward_impl.default, multi=True)
def lstm_cell_backward_rule(ghy, gcy, cx, cy, workspace, has_bias):
    outs = [(_shape(workspace), workspace.dtype), (_shape(cx), cx.dtype)]
    outs.append(((_shape(workspace)[-1],), workspace.dtype) if has_bias else None)
    return outs


@lowering(aten._thnn_fused_lstm_cell_backward_impl.default)
def lower_lstm_cell_backward(ghy, gcy, cx, cy, workspace, has_bias):
    i, f, g, o = jnp.split(workspace, 4, axis=-1)
    tcy = jnp.tanh(cy)
    ghy = jnp.zeros_like(cy) if ghy is None else ghy
    gcx = ghy * o * (1 - tcy * tcy)
    if gcy is not None:
        gcx = gcx + gcy
    go = ghy * tcy * o * (1 - o)
    gi = gcx * g * i * (1 - i)
    gf = gcx * cx * f * (1 - f)
    gg = gcx * i * (1 - g * g)
    gates = jnp.concatenate([gi, gf, gg, go], axis=-1)
    gb = jnp.sum(gates, axis=0) if has_bias else None
    return gates, gcx * f, gb


# ---- fused GRU cell (what nn.GRU and nn.GRUCell call on a non-CPU device) ----------------
#
# The workspace is torch's CUDA kernel's: [r, z, n, hx, hn] (the gates after their
# activations, the previous state, and the hidden gates' candidate part, bias included).


@rule(aten._thnn_fused_gru_cell.default, multi=True)
def gru_cell_rule(ig, hg, hx, ib=None, hb=None):
    rows = _shape(hx)[:-1]
    return [(_shape(hx), hx.dtype), (rows + (5 * _shape(hx)[-1],), hx.dtype)]


def gru_step(ig, hg, hx):
    """One GRU step from its input and hidden projections (biases included; torch's
    order r, z, n): (hy, (r, z, n, the hidden projection's n part)). torch's arithmetic:
    ``n + z * (hx - n)``. The fused cell's and the layer's."""
    i_r, i_z, i_n = jnp.split(ig, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(hg, 3, axis=-1)
    r = jax.nn.sigmoid(i_r + h_r)
    z = jax.nn.sigmoid(i_z + h_z)
    n = jnp.tanh(i_n + r * h_n)
    return n + z * (hx - n), (r, z, n, h_n)


@lowering(aten._thnn_fused_gru_cell.default)
def lower_gru_cell(ig, hg, hx, ib=None, hb=None):
    if ib is not None:
        ig = ig + ib
    if hb is not None:
        hg = hg + hb
    hy, (r, z, n, h_n) = gru_step(ig, hg, hx)
    return hy, jnp.concatenate([r, z, n, hx, h_n], axis=-1)


@rule(aten._thnn_fused_gru_cell_backward.default, multi=True)
def gru_cell_backward_rule(ghy, workspace, has_bias):
    rows, h = _shape(ghy)[:-1], _shape(ghy)[-1]
    gates = (rows + (3 * h,), ghy.dtype)
    bias = ((3 * h,), ghy.dtype) if has_bias else None
    return [gates, gates, (_shape(ghy), ghy.dtype), bias, bias]


@lowering(aten._thnn_fused_gru_cell_backward.default)
def lower_gru_cell_backward(ghy, workspace, has_bias):
    r, z, n, hx, h_n = jnp.split(workspace, 5, axis=-1)
    g_z = ghy * (hx - n) * (1 - z) * z
    g_n = ghy * (1 - z) * (1 - n * n)
    g_r = g_n * h_n * (1 - r) * r
    g_in = jnp.concatenate([g_r, g_z, g_n], axis=-1)
    g_hid = jnp.concatenate([g_r, g_z, g_n * r], axis=-1)
    if not has_bias:
        return g_in, g_hid, ghy * z, None, None
    return g_in, g_hid, ghy * z, jnp.sum(g_in, axis=0), jnp.sum(g_hid, axis=0)
