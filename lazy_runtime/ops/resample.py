"""Resampling as per-axis linear maps: adaptive average pooling and the backward of
upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic).

Each is separable: along every spatial axis, output = M @ input for a small (out, in)
matrix built on the host from the static sizes, with torch's index and weight formulas
(``UpSample.h``: the scale, the source index, clamping at the borders). The backward of an
upsampling is then the same matrices transposed, applied to the gradient. Torch's
forward upsampling already reaches us decomposed into index ops (``torch._decomp``); only
its backward op arrives whole.

Indices and weights are computed in the dtype torch computes them in (float32 for float,
half and bfloat16 inputs; float64 for double), so a source index that lands on an integer
floors the same way.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import torch

from .common import HIGHEST, sf
from .nn import _f32
from .registry import lowering, rule

aten = torch.ops.aten


def _index_dtype(dtype) -> type:
    return np.float64 if dtype == jnp.float64 else np.float32


def _scale(n_in, n_out, align_corners, scale, dt):
    """torch's ``area_pixel_compute_scale``: input step per output step."""
    if align_corners:
        return dt((n_in - 1) / (n_out - 1)) if n_out > 1 else dt(0)
    return dt(1.0 / scale) if scale is not None and scale > 0 else dt(n_in / n_out)


def _matrix(n_out, n_in, rows, cols, weights, dt):
    m = np.zeros((n_out, n_in), dt)
    np.add.at(m, (rows, cols), weights.astype(dt))
    return m


@functools.lru_cache(maxsize=256)
def _nearest(n_in, n_out, scale, exact, dt):
    s = _scale(n_in, n_out, False, scale, dt)
    dst = np.arange(n_out, dtype=dt)
    src = np.floor((dst + dt(0.5)) * s) if exact else np.floor(dst * s)
    src = np.minimum(src.astype(np.int64), n_in - 1)
    return _matrix(n_out, n_in, np.arange(n_out), src, np.ones(n_out), dt)


@functools.lru_cache(maxsize=256)
def _linear(n_in, n_out, align_corners, scale, dt):
    s = _scale(n_in, n_out, align_corners, scale, dt)
    dst = np.arange(n_out, dtype=dt)
    src = s * dst if align_corners else np.maximum(s * (dst + dt(0.5)) - dt(0.5), dt(0))
    x0 = np.minimum(src.astype(np.int64), n_in - 1)
    x1 = np.minimum(x0 + 1, n_in - 1)
    w1 = np.clip(src - x0.astype(dt), dt(0), dt(1))
    rows = np.arange(n_out)
    return _matrix(n_out, n_in, np.concatenate([rows, rows]), np.concatenate([x0, x1]),
                   np.concatenate([dt(1) - w1, w1]), dt)


def _cubic_weights(t, dt):
    """Keys' cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2."""
    a = dt(-0.75)

    def near(x):   # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    one, two = dt(1), dt(2)
    return [far(t + one), near(t), near(one - t), far(two - t)]


@functools.lru_cache(maxsize=256)
def _cubic(n_in, n_out, align_corners, scale, dt):
    s = _scale(n_in, n_out, align_corners, scale, dt)
    dst = np.arange(n_out, dtype=dt)
    src = s * dst if align_corners else s * (dst + dt(0.5)) - dt(0.5)   # not clamped
    x0 = np.floor(src)
    t = src - x0
    rows = np.arange(n_out)
    cols = [np.clip(x0.astype(np.int64) + k, 0, n_in - 1) for k in (-1, 0, 1, 2)]
    return _matrix(n_out, n_in, np.tile(rows, 4), np.concatenate(cols),
                   np.concatenate(_cubic_weights(t, dt)), dt)


@functools.lru_cache(maxsize=256)
def _adaptive(n_in, n_out, dt):
    """Adaptive average pooling: output i averages input [floor(i*n/o), ceil((i+1)*n/o))."""
    m = np.zeros((n_out, n_in), dt)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        m[i, lo:hi] = dt(1) / dt(hi - lo)
    return m


def _apply(x, mats, transpose=False):
    """``x`` with its last ``len(mats)`` axes mapped by ``mats`` (each (out, in)), or by
    their transposes."""
    n = len(mats)
    for k, m in enumerate(mats):
        axis = x.ndim - n + k
        m = jnp.asarray(m.T if transpose else m, x.dtype)
        x = jnp.moveaxis(jnp.tensordot(x, m, axes=([axis], [1]), precision=HIGHEST), -1, axis)
    return x


# ---- adaptive average pooling ---------------------------------------------------------


def adaptive_avg(x, out_size):
    """Divisible sizes: a reshape and a mean (cheap and exact); otherwise per-axis
    averaging matrices."""
    n = len(out_size)
    spatial = x.shape[x.ndim - n:]
    xf = _f32(x)
    if all(i % o == 0 for i, o in zip(spatial, out_size)):
        split = sum(((o, i // o) for i, o in zip(spatial, out_size)), ())
        r = xf.reshape(x.shape[:x.ndim - n] + split)
        return r.mean(axis=tuple(range(x.ndim - n + 1, x.ndim + n, 2)))
    dt = _index_dtype(xf.dtype)
    return _apply(xf, [_adaptive(i, o, dt) for i, o in zip(spatial, out_size)])


def _adaptive_backward(g, x, n):
    gf = _f32(g)
    dt = _index_dtype(gf.dtype)
    mats = [_adaptive(i, o, dt) for i, o in zip(x.shape[x.ndim - n:], g.shape[g.ndim - n:])]
    return _apply(gf, mats, transpose=True)


def _adaptive_rule(n):
    def shape_rule(x, output_size):
        return sf.adaptive_pool_shape(tuple(x.shape), tuple(output_size), n), x.dtype
    return shape_rule


rule(aten._adaptive_avg_pool2d.default)(_adaptive_rule(2))
rule(aten._adaptive_avg_pool3d.default)(_adaptive_rule(3))


@lowering(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def lower_adaptive_avg_pool(x, output_size):
    return adaptive_avg(x, tuple(output_size))


@rule(aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool_backward_rule(g, x):
    return tuple(x.shape), x.dtype


@lowering(aten._adaptive_avg_pool2d_backward.default)
def lower_adaptive_avg_pool2d_backward(g, x):
    return _adaptive_backward(g, x, 2)


@lowering(aten._adaptive_avg_pool3d_backward.default)
def lower_adaptive_avg_pool3d_backward(g, x):
    return _adaptive_backward(g, x, 3)


# ---- upsampling backward ----------------------------------------------------------------


def _upsample_mats(kind, out_size, in_size, align_corners, scales, dt):
    n = len(out_size)
    scales = list(scales) + [None] * (n - len(scales))
    spatial = in_size[len(in_size) - n:]
    if kind in ("nearest", "nearest_exact"):
        return [_nearest(i, o, s, kind == "nearest_exact", dt)
                for i, o, s in zip(spatial, out_size, scales)]
    make = _cubic if kind == "cubic" else _linear
    return [make(i, o, align_corners, s, dt) for i, o, s in zip(spatial, out_size, scales)]


def _upsample_backward(kind, g, output_size, input_size, align_corners, scales):
    gf = _f32(g)
    mats = _upsample_mats(kind, tuple(output_size), tuple(input_size), align_corners,
                          tuple(scales), _index_dtype(gf.dtype))
    return _apply(gf, mats, transpose=True)


def _upsample_backward_rule(g, output_size, input_size, *rest):
    n = len(output_size)
    if tuple(g.shape[g.ndim - n:]) != tuple(output_size) or len(input_size) != n + 2:
        raise RuntimeError(f"upsample backward: grad_output of shape {list(g.shape)} does not "
                           f"match output_size {list(output_size)}")
    return tuple(input_size), g.dtype


_NEAREST_BACKWARD = [aten.upsample_nearest1d_backward.default,
                     aten.upsample_nearest2d_backward.default,
                     aten.upsample_nearest3d_backward.default]
_EXACT_BACKWARD = [aten._upsample_nearest_exact1d_backward.default,
                   aten._upsample_nearest_exact2d_backward.default,
                   aten._upsample_nearest_exact3d_backward.default]
_LINEAR_BACKWARD = [aten.upsample_linear1d_backward.default,
                    aten.upsample_bilinear2d_backward.default,
                    aten.upsample_trilinear3d_backward.default]
rule(*_NEAREST_BACKWARD, *_EXACT_BACKWARD, *_LINEAR_BACKWARD,
     aten.upsample_bicubic2d_backward.default)(_upsample_backward_rule)


@lowering(*_NEAREST_BACKWARD)
def lower_upsample_nearest_backward(g, output_size, input_size, *scales):
    return _upsample_backward("nearest", g, output_size, input_size, False, scales)


@lowering(*_EXACT_BACKWARD)
def lower_upsample_nearest_exact_backward(g, output_size, input_size, *scales):
    return _upsample_backward("nearest_exact", g, output_size, input_size, False, scales)


@lowering(*_LINEAR_BACKWARD)
def lower_upsample_linear_backward(g, output_size, input_size, align_corners, *scales):
    return _upsample_backward("linear", g, output_size, input_size, align_corners, scales)


@lowering(aten.upsample_bicubic2d_backward.default)
def lower_upsample_bicubic_backward(g, output_size, input_size, align_corners, *scales):
    return _upsample_backward("cubic", g, output_size, input_size, align_corners, scales)
