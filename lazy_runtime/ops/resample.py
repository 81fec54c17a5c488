"""Resampling as per-axis linear maps: adaptive average pooling and the backward of
upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic); and grid
sampling (``grid_sample``, 2-D and 3-D, forward and backward; see its section).

Each is separable: along every spatial axis, output = M @ input for a small (out, in)
matrix built on the host from the static sizes, with torch's index and weight formulas
(``UpSample.h``: the scale, the source index, clamping at the borders). The backward of an
upsampling is then the same matrices transposed, applied to the gradient. Torch's
forward upsampling reaches us decomposed into index ops (``torch._decomp``), but for
bicubic's and bilinear's, lowered with the same host-side taps, and nearest's, a gather of
host-made indices (see their sections: one op each, so padding rules see them); the
backward ops arrive whole.

Indices and weights are computed in the dtype torch computes them in (float32 for float,
half and bfloat16 inputs; float64 for double), so a source index that lands on an integer
floors the same way.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import torch

from ..errors import NoLowering
from .common import HIGHEST, is_array, sf, vjp
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
def linear_taps(n_in, n_out, align_corners, scale, dt):
    """(first tap, second tap, the second's weight) of each output of linear interpolation
    along one axis, as torch computes them (``area_pixel_compute_source_index``)."""
    s = _scale(n_in, n_out, align_corners, scale, dt)
    dst = np.arange(n_out, dtype=dt)
    src = s * dst if align_corners else np.maximum(s * (dst + dt(0.5)) - dt(0.5), dt(0))
    x0 = np.minimum(src.astype(np.int64), n_in - 1)
    x1 = np.minimum(x0 + 1, n_in - 1)
    return x0, x1, np.clip(src - x0.astype(dt), dt(0), dt(1))


@functools.lru_cache(maxsize=256)
def _linear(n_in, n_out, align_corners, scale, dt):
    x0, x1, w1 = linear_taps(n_in, n_out, align_corners, scale, dt)
    rows = np.arange(n_out)
    return _matrix(n_out, n_in, np.concatenate([rows, rows]), np.concatenate([x0, x1]),
                   np.concatenate([dt(1) - w1, w1]), dt)


def _cubic_weights(t, dt, fused=False):
    """Keys' cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2. ``fused``:
    each ``p * x + c`` a float32 fused multiply-add, as compiled into torch's CPU forward
    kernel (its AVX2 build); its backward kernel has none."""
    a = dt(-0.75)
    mad = _fma32 if fused else (lambda p, x, c: p * x + c)

    def near(x):   # |x| <= 1
        return mad(mad(a + 2, x, -(a + 3)) * x, x, dt(1))

    def far(x):    # 1 < |x| < 2
        return mad(mad(mad(a, x, -5 * a), x, 8 * a), x, -4 * a)
    one, two = dt(1), dt(2)
    return [far(t + one), near(t), near(one - t), far(two - t)]


def _fma32(a, b, c):
    """float32 ``a * b + c`` rounded once (the product is exact in float64)."""
    wide = np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
    return wide.astype(np.float32)


@functools.lru_cache(maxsize=256)
def _cubic_taps(n_in, n_out, align_corners, scale, dt, fused=False):
    """The four input indices each output reads along one axis, clamped to the borders
    ([n_out, 4]), and their weights ([n_out, 4], in ``dt``): torch's ``HelperInterpCubic``
    (the floor taken in float32, ``floorf``, even of a double; the fraction clamped to
    [0, 1]). ``fused``: float32 arithmetic as torch's forward kernel has it (above)."""
    s = _scale(n_in, n_out, align_corners, scale, dt)
    dst = np.arange(n_out, dtype=dt)
    if align_corners:
        src = s * dst
    elif fused and dt == np.float32:
        src = _fma32(s, dst + dt(0.5), dt(-0.5))
    else:
        src = s * (dst + dt(0.5)) - dt(0.5)            # not clamped
    x0 = np.minimum(np.floor(src.astype(np.float32)), n_in - 1)
    t = np.clip(src - x0.astype(dt), dt(0), dt(1))
    cols = np.clip(x0.astype(np.int64)[:, None] + np.arange(-1, 3), 0, n_in - 1)
    weights = _cubic_weights(t, dt, fused and dt == np.float32)
    return cols, np.stack(weights, -1).astype(dt)


@functools.lru_cache(maxsize=256)
def _cubic(n_in, n_out, align_corners, scale, dt):
    cols, weights = _cubic_taps(n_in, n_out, align_corners, scale, dt)
    return _matrix(n_out, n_in, np.repeat(np.arange(n_out), 4), cols.reshape(-1),
                   weights.reshape(-1), dt)


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


# ---- nearest upsampling forward -----------------------------------------------------------
#
# Lowered, not decomposed (one op, so a padding rule can see it: images of varying size
# upsampled by an integer factor, ``ops/padding.py``): a gather of host-made source
# indices, as torch's CPU kernel picks them (``nearest_idx``: the same size, or twice it,
# read directly; else floor(i * scale) in float32, clamped).

NEAREST = {aten.upsample_nearest1d.default: (1, False),
           aten.upsample_nearest2d.default: (2, False),
           aten.upsample_nearest3d.default: (3, False),
           aten._upsample_nearest_exact1d.default: (1, True),
           aten._upsample_nearest_exact2d.default: (2, True),
           aten._upsample_nearest_exact3d.default: (3, True)}


@functools.lru_cache(maxsize=256)
def nearest_source(n_in: int, n_out: int, scale, exact: bool) -> np.ndarray:
    """The input position each of ``n_out`` outputs reads (torch's float32 arithmetic)."""
    if not exact and n_out == n_in:
        return np.arange(n_out)
    if not exact and n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    s = np.float32(1.0 / scale) if scale is not None and scale > 0 else \
        np.float32(n_in) / np.float32(n_out)
    dst = np.arange(n_out, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * s if exact else dst * s)
    return np.minimum(src.astype(np.int64), n_in - 1)


def _nearest_rule(op):
    n = NEAREST[op][0]

    def nearest_rule(x, output_size, *scales):
        if (x.ndim != n + 2 or len(output_size) != n or 0 in tuple(x.shape[1:])
                or min(output_size) <= 0):
            raise NoLowering(op, "not (n+2)-D or empty (torch decides)")
        return tuple(x.shape[:2]) + tuple(output_size), x.dtype
    return nearest_rule


def _nearest_lowering(op):
    n, exact = NEAREST[op]

    def lower_nearest(x, output_size, *scales):
        scales = tuple(scales) + (None,) * (n - len(scales))
        for k in range(n):
            axis = x.ndim - n + k
            x = jnp.take(x, nearest_source(x.shape[axis], output_size[k], scales[k], exact),
                         axis=axis)
        return x
    return lower_nearest


for _op in NEAREST:
    rule(_op)(_nearest_rule(_op))
    lowering(_op)(_nearest_lowering(_op))
del _op


# ---- bilinear upsampling forward ---------------------------------------------------------
#
# Lowered, not decomposed (one op, so a padding rule can see it), with host-made taps as
# bicubic's: each output the two taps along the width, then the two along the height
# (torch's separable sum), weighted as torch's ``compute_source_index_and_lambda``.


@rule(aten.upsample_bilinear2d.default)
def upsample_bilinear_rule(x, output_size, align_corners, scales_h=None, scales_w=None):
    if (x.ndim != 4 or len(output_size) != 2 or not x.dtype.is_floating_point
            or 0 in tuple(x.shape[1:]) or min(output_size) <= 0):
        raise NoLowering(aten.upsample_bilinear2d.default,
                         "not 4-D, not floating point or empty (torch decides)")
    return tuple(x.shape[:2]) + tuple(output_size), x.dtype


@lowering(aten.upsample_bilinear2d.default)
def lower_upsample_bilinear(x, output_size, align_corners, scales_h=None, scales_w=None):
    xf = _f32(x)
    dt = _index_dtype(xf.dtype)
    for axis, scale in ((-1, scales_w), (-2, scales_h)):
        x0, x1, w1 = linear_taps(xf.shape[axis], output_size[axis], align_corners, scale, dt)
        shape = (-1,) + (1,) * (-axis - 1)
        w1 = jnp.asarray(w1, xf.dtype).reshape(shape)
        xf = jnp.take(xf, x0, axis=axis) * (1 - w1) + jnp.take(xf, x1, axis=axis) * w1
    return xf.astype(x.dtype)


# ---- bicubic upsampling forward ----------------------------------------------------------
#
# Lowered, not decomposed: torch's decomposition computes each source coordinate on the
# device and floors it, and XLA:CPU's FMA contraction can put a coordinate that should be
# whole a last bit below it, which then floors a whole step away (rows off by whole pixels
# in float64). Here the coordinates are host constants, as in torch's kernel: four taps per
# output along each axis, the width first (torch's inner sum), then the height.


@rule(aten.upsample_bicubic2d.default)
def upsample_bicubic_rule(x, output_size, align_corners, scales_h=None, scales_w=None):
    out = tuple(x.shape[:2]) + tuple(output_size)
    if (x.ndim != 4 or len(output_size) != 2 or not x.dtype.is_floating_point
            or 0 in tuple(x.shape[1:]) or min(output_size) <= 0):
        raise NoLowering(aten.upsample_bicubic2d.default,
                         "not 4-D, not floating point or empty (torch decides)")
    return out, x.dtype


@lowering(aten.upsample_bicubic2d.default)
def lower_upsample_bicubic(x, output_size, align_corners, scales_h=None, scales_w=None):
    xf = _f32(x)
    dt = _index_dtype(xf.dtype)
    for axis, scale in ((-1, scales_w), (-2, scales_h)):
        cols, weights = _cubic_taps(xf.shape[axis], output_size[axis], align_corners, scale, dt,
                                    fused=True)
        t = jnp.moveaxis(xf, axis, -1)[..., cols]            # [..., out, 4]
        w = jnp.asarray(weights, xf.dtype)
        y = t[..., 0] * w[:, 0]
        for k in range(1, 4):                                   # torch's sum, in order
            y = y + t[..., k] * w[:, k]
        xf = jnp.moveaxis(y, -1, axis)
    return xf.astype(x.dtype)


# ---- grid sampling ------------------------------------------------------------------------
#
# ``grid_sampler_{2,3}d``: each output point reads the input where the grid puts it (x, y[, z]
# in [-1, 1]), with torch's formulas (GridSampler.h): unnormalize, then the padding mode's
# transform of the position (bilinear, nearest) or of each tap (bicubic). The backward is the
# JAX vjp, and its grid gradient is torch's: zero through rounding (nearest) and where a
# position is clipped, borders included (torch's ``clip_coordinates_set_grad``).

_NEAREST, _BICUBIC = 1, 2          # (0: bilinear)
_BORDER, _REFLECTION = 1, 2


def _unnormalize(c, size, align_corners):
    """[-1, 1] to [0, size - 1] (align_corners) or [-0.5, size - 0.5]."""
    if align_corners:
        return (c + 1) * ((size - 1) / 2)
    return (c + 1) * (size / 2) - 0.5


def _clip(c, size):
    """``c`` clipped to [0, size - 1], with derivative 1 strictly inside only."""
    return jnp.where(c <= 0, 0, jnp.where(c >= size - 1, size - 1, c)).astype(c.dtype)


def _reflect(c, twice_low, twice_high):
    """``c`` reflected at the bounds until it lies in [low, high] (derivative +-1); the
    bounds may be traced (a padded input's true size)."""
    traced = is_array(twice_high)
    if not traced and twice_low == twice_high:
        return jnp.zeros_like(c)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    # (traced: a span of 0, a true size of 1 with align_corners, gives 0 as above)
    safe = jnp.where(span == 0, 1, span) if traced else span
    d = c - low
    d = jnp.where(d < 0, -d, d)     # not abs: its derivative at 0 is 0, torch's 1
    extra = jnp.fmod(d, safe)
    even = jnp.fmod(jnp.floor(d / safe), 2) == 0
    r = jnp.where(even, extra + low, safe - extra + low)
    return jnp.where(span == 0, 0, r).astype(c.dtype) if traced else r


def _pad_coord(c, size, padding, align_corners):
    if padding == _BORDER:
        return _clip(c, size)
    if padding == _REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(c, *twice), size)
    return c


def _axis_taps(c, size, mode, padding, align_corners):
    """The positions ([..., taps]) an output point reads along one axis, and their weights
    (None: nearest's single tap)."""
    u = _unnormalize(c, size, align_corners)
    if mode == _BICUBIC:
        x0 = jnp.floor(u)
        w = jnp.stack(_cubic_weights(u - x0, _index_dtype(u.dtype)), -1)
        taps = x0[..., None] + jnp.arange(-1, 3, dtype=u.dtype)
        return _pad_coord(taps, size, padding, align_corners), w
    s = _pad_coord(u, size, padding, align_corners)
    if mode == _NEAREST:
        return jnp.round(s)[..., None], None      # half to even, as torch's nearbyint
    x0 = jnp.floor(s)
    return jnp.stack([x0, x0 + 1], -1), jnp.stack([(x0 + 1) - s, s - x0], -1)


def grid_sample(x, grid, mode, padding, align_corners, true_sizes=None):
    """``x`` [N, C, *S] read at ``grid`` [N, *O, n]: [N, C, *O]. Taps outside the input
    (zeros padding) read zero. The taps of all axes are combined by broadcasting and read
    by one gather (its vjp: one scatter-add). ``true_sizes``: the spatial sizes the grid
    spans (traced: an input padded past them, its true elements first along each)."""
    n = grid.shape[-1]
    N, C, sizes = x.shape[0], x.shape[1], x.shape[2:]
    flat_x = jnp.moveaxis(_f32(x), 1, -1).reshape(N, -1, C)
    g = _f32(grid).reshape(N, -1, n)
    spans = sizes if true_sizes is None else [
        t if type(t) is int else jnp.asarray(t, g.dtype) for t in true_sizes]
    flat, valid, w = 0, True, None
    for j in range(n):   # x, y, z: the spatial axes from the last (weights in torch's order)
        k = n - 1 - j
        pos, wj = _axis_taps(g[..., j], spans[k], mode, padding, align_corners)

        def spread(a, j=j):   # [N, M, taps] onto its own axis of [N, M, taps_x, taps_y, ...]
            return a.reshape(a.shape[:2] + (1,) * j + a.shape[2:] + (1,) * (n - 1 - j))
        inside = (pos >= 0) & (pos <= spans[k] - 1)     # False for NaN too
        valid = valid & spread(inside)
        stride = int(np.prod(sizes[k + 1:]))
        flat = flat + spread(jnp.where(inside, pos, 0).astype(jnp.int64) * stride)
        w = w if wj is None else (spread(wj) if w is None else w * spread(wj))
    taps = int(np.prod(flat.shape[2:]))
    rows = jnp.arange(N, dtype=jnp.int64)[:, None] * flat_x.shape[1]
    vals = flat_x.reshape(-1, C).at[(rows + flat.reshape(N, -1)).reshape(-1)].get(
        mode="promise_in_bounds").reshape(N, -1, taps, C)
    vals = jnp.where(valid.reshape(N, -1, taps, 1), vals, 0)
    out = vals[:, :, 0] if w is None else (vals * w.reshape(N, -1, taps, 1)).sum(2)
    out = jnp.moveaxis(out.reshape((N,) + grid.shape[1:-1] + (C,)), -1, 1)
    return out.astype(x.dtype)


def _grid_rules(forward, backward, n):
    def grid_sampler_rule(x, grid, mode, padding, align_corners):
        ok = (x.ndim == grid.ndim == n + 2 and grid.shape[-1] == n and x.dtype == grid.dtype
              and x.dtype.is_floating_point and x.shape[0] == grid.shape[0]
              and 0 not in tuple(x.shape[2:]) and mode in (0, 1, 2) and padding in (0, 1, 2)
              and not (n == 3 and mode == _BICUBIC))
        if not ok:   # torch's errors
            raise NoLowering(forward, "arguments torch refuses")
        return tuple(x.shape[:2]) + tuple(grid.shape[1:-1]), x.dtype

    def grid_sampler_backward_rule(g, x, grid, mode, padding, align_corners, output_mask):
        grid_sampler_rule(x, grid, mode, padding, align_corners)
        return [(tuple(x.shape), x.dtype) if output_mask[0] else None,
                (tuple(grid.shape), grid.dtype)]
    rule(forward)(grid_sampler_rule)
    rule(backward, multi=True)(grid_sampler_backward_rule)


_grid_rules(aten.grid_sampler_2d.default, aten.grid_sampler_2d_backward.default, 2)
_grid_rules(aten.grid_sampler_3d.default, aten.grid_sampler_3d_backward.default, 3)


@lowering(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def lower_grid_sampler(x, grid, mode, padding, align_corners, true_sizes=None):
    """``true_sizes``: ``grid_sample``'s (the padding rule's, of a padded input)."""
    return grid_sample(x, grid, mode, padding, align_corners, true_sizes)


@lowering(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def lower_grid_sampler_backward(g, x, grid, mode, padding, align_corners, output_mask,
                                true_sizes=None):
    gx, gg = vjp(lambda a, b: grid_sample(a, b, mode, padding, align_corners, true_sizes),
                 (x, grid), g)
    return (gx if output_mask[0] else None), gg


# ---- antialiased resampling (``F.interpolate(..., antialias=True)``) ---------------------
#
# torch's CPU kernel (UpSampleKernel.cpp, after Pillow): along each axis, output i reads the
# inputs within ``support`` of its centre ``scale * (i + 0.5)`` (align_corners changes only
# the scale), weighted by the filter (triangle, or Keys' cubic with A = -0.5) stretched by
# the scale when downsampling, and normalized. The weights are computed on the host with
# its formulas and types (float32 or float64, C++'s double intermediates included); each
# output sums only its own window, so inf/NaN elsewhere do not reach it. The forward
# resamples the last axis, then the one before, and skips an axis whose size is unchanged;
# the backward kernel applies every axis's weights (even a given scale on an unchanged
# size), so its lowering is the pullback of that unskipped map.

def _aa_filter(x, cubic, dt):
    x = np.abs(x)
    if not cubic:
        return np.where(x < 1, dt(1) - x, dt(0)).astype(dt)
    a = dt(-0.5)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, dt(0))).astype(dt)


@functools.lru_cache(maxsize=256)
def _aa_taps(n_in, n_out, align_corners, scale, cubic, dt):
    """(indices, weights, in-window mask), each (n_out, taps): torch's
    ``_compute_indices_min_size_weights_aa``."""
    s = _scale(n_in, n_out, align_corners, scale, dt)
    half = 2.0 if cubic else 1.0                       # interp_size * 0.5
    support = dt(half * float(s)) if s >= 1 else dt(half)
    taps = int(np.ceil(support)) * 2 + 1
    invscale = dt(1.0 / float(s)) if s >= 1 else dt(1)
    i = np.arange(n_out)
    center = (float(s) * (i + 0.5)).astype(dt)
    lo = np.maximum(np.trunc((center - support).astype(np.float64) + 0.5), 0).astype(np.int64)
    hi = np.trunc((center + support).astype(np.float64) + 0.5).astype(np.int64)
    size = np.clip(np.minimum(hi, n_in) - lo, 0, taps)
    j = np.arange(taps)
    pos = (lo[:, None] + j).astype(dt) - center[:, None]
    w = _aa_filter(((pos.astype(np.float64) + 0.5) * float(invscale)).astype(dt), cubic, dt)
    mask = j < size[:, None]
    w = np.where(mask, w, dt(0))
    total = np.zeros(n_out, dt)
    for k in range(taps):                              # torch's sum, in order
        total = (total + w[:, k]).astype(dt)
    w = np.where(total[:, None] != 0, w / np.where(total == 0, dt(1), total)[:, None], w)
    return np.minimum(lo[:, None] + j, n_in - 1), w.astype(dt), mask


def _aa_axis(x, axis, taps):
    idx, w, mask = taps
    t = jnp.moveaxis(x, axis, -1)[..., idx]            # [..., out, taps]
    y = jnp.sum(jnp.where(mask, t * jnp.asarray(w, x.dtype), 0), axis=-1)
    return jnp.moveaxis(y, -1, axis)


def _aa_resample(x, out_size, align_corners, scales, cubic, skip_same):
    dt = _index_dtype(x.dtype)
    for axis in (-1, -2):
        n_in, n_out = x.shape[axis], out_size[axis]
        if skip_same and n_in == n_out:
            continue
        taps = _aa_taps(n_in, n_out, align_corners, scales[axis], cubic, dt)
        if skip_same and axis == -2 and x.shape[-1] == 1:
            taps = tuple(np.broadcast_to(t[:1], t.shape) for t in taps)   # see _aa_row_zero
        x = _aa_axis(x, axis, taps)
    return x


def _aa_row_zero(x, out) -> bool:
    """Whether torch's forward gives every output row the window of row 0: its vertical pass
    reads each row's weights at the start of the innermost loop, which is the rows
    themselves when the width is 1 (in the contiguous layout; channels-last is right)."""
    return out[-1] == 1 and out[-2] != x.shape[-2]


_AA = {aten._upsample_bilinear2d_aa.default: False, aten._upsample_bicubic2d_aa.default: True}
_AA_BACKWARD = {aten._upsample_bilinear2d_aa_backward.default: False,
                aten._upsample_bicubic2d_aa_backward.default: True}


def _aa_lowered(op, dtype, sizes) -> None:
    # uint8 takes torch's fixed-point path (int16 weights), other dtypes torch refuses
    if dtype not in (torch.float32, torch.float64) or len(sizes) != 4 or 0 in sizes:
        raise NoLowering(op, "uint8, refused dtypes or empty tensors (torch decides)")


@rule(*_AA)
def upsample_aa_rule(x, output_size, align_corners, scales_h=None, scales_w=None):
    out = tuple(x.shape[:2]) + tuple(output_size)
    _aa_lowered(aten._upsample_bilinear2d_aa.default, x.dtype, tuple(x.shape))
    _aa_lowered(aten._upsample_bilinear2d_aa.default, x.dtype, out)
    if _aa_row_zero(x, out) and not x.is_contiguous():
        raise NoLowering(aten._upsample_bilinear2d_aa.default, "a width of 1 in channels-last")
    return out, x.dtype


@rule(*_AA_BACKWARD)
def upsample_aa_backward_rule(g, output_size, input_size, align_corners, scales_h=None,
                              scales_w=None):
    _aa_lowered(aten._upsample_bilinear2d_aa_backward.default, g.dtype, tuple(input_size))
    return _upsample_backward_rule(g, output_size, input_size)


def _lower_aa(cubic):
    def lower(x, output_size, align_corners, scales_h=None, scales_w=None):
        return _aa_resample(x, tuple(output_size), align_corners, (scales_h, scales_w), cubic,
                            skip_same=True)
    return lower


def _lower_aa_backward(cubic):
    def lower(g, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        def f(x):
            return _aa_resample(x, tuple(output_size), align_corners, (scales_h, scales_w),
                                cubic, skip_same=False)
        return vjp(f, (jnp.zeros(tuple(input_size), g.dtype),), g)[0]
    return lower


for _op, _cubic_mode in _AA.items():
    lowering(_op)(_lower_aa(_cubic_mode))
for _op, _cubic_mode in _AA_BACKWARD.items():
    lowering(_op)(_lower_aa_backward(_cubic_mode))


# ---- resampling a fixed size to a length known at run time -------------------------------
#
# A ViT's position embeddings (a fixed grid) interpolated to the patch grid of an image whose
# size varies (``interpolate_pos_encoding``): the output's length is a padded dim's, known
# only at run time. Its taps are made on the host, as torch's kernels compute them, for
# every length the bucket can hold, and the executable picks the row of the run-time length
# (no coordinate is computed on the device: see bicubic above).

TAPS_TABLE_MAX = 256   # the longest padded length tabulated (else: an exact compile)


def _one_length_taps(kind, n_in, m, align_corners, dt, fused):
    """(cols [m, k], weights [m, k]) of resampling ``n_in`` to ``m`` along one axis."""
    if kind in ("nearest", "nearest_exact"):
        src = nearest_source(n_in, m, None, kind == "nearest_exact")
        return src[:, None], np.ones((m, 1), dt)
    if kind == "linear":
        x0, x1, w1 = linear_taps(n_in, m, align_corners, None, dt)
        return np.stack([x0, x1], -1), np.stack([dt(1) - w1, w1], -1)
    return _cubic_taps(n_in, m, align_corners, None, dt, fused)


def taps_table(kind, n_in, padded, align_corners, dt, fused=False):
    """For each length m in 1..``padded``: the taps of resampling ``n_in`` to m, padded to
    ``padded`` outputs (those past m read input 0 with weight 0): (cols [padded, padded,
    k] int32, weights [padded, padded, k])."""
    return pairs_table(kind, tuple((n_in, m) for m in range(1, padded + 1)), padded,
                       align_corners, dt, fused)


@functools.lru_cache(maxsize=64)
def pairs_table(kind, pairs, padded, align_corners, dt, fused=False):
    """For each (n_in, m) of ``pairs`` (None: a row never read): the taps of resampling
    n_in to m, padded to ``padded`` outputs as ``taps_table``'s rows are."""
    k = {"nearest": 1, "nearest_exact": 1, "linear": 2}.get(kind, 4)
    cols = np.zeros((len(pairs), padded, k), np.int32)
    weights = np.zeros((len(pairs), padded, k), dt)
    for r, pair in enumerate(pairs):
        if pair is not None:
            n_in, m = pair
            c, w = _one_length_taps(kind, n_in, m, align_corners, dt, fused)
            cols[r, :m] = c
            weights[r, :m] = w
    return cols, weights


def resample_axis(x, axis, cols, weights):
    """``x`` resampled along ``axis`` by taps (cols [out, k], weights [out, k]), summed in
    tap order (torch's)."""
    w = weights.astype(x.dtype)
    shape = (-1,) + (1,) * (x.ndim - 1 - axis % x.ndim)
    y = jnp.take(x, cols[:, 0], axis=axis) * w[:, 0].reshape(shape)
    for j in range(1, cols.shape[1]):
        y = y + jnp.take(x, cols[:, j], axis=axis) * w[:, j].reshape(shape)
    return y
