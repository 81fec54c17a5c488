"""The FFT: torch.fft's functions reach ATen as three ops, ``_fft_r2c`` (real to
complex, optionally one-sided along the last transformed dim), ``_fft_c2r`` (its inverse,
given the last dim's real length) and ``_fft_c2c``. Each takes a normalization mode that
is a scale, independent of the direction: 0 none, 1 ``1/sqrt(n)``, 2 ``1/n``, with ``n``
the number of points of the (real-side) signal over the transformed dims. The lowerings
compute the unnormalized transform with ``jnp.fft`` and apply that scale.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from .. import dtypes as D
from ..errors import NoLowering
from .common import norm_dim, sf
from .registry import COMPLEX_OK, lowering, rule

aten = torch.ops.aten

_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2


def _dims(op, x, dim) -> tuple:
    dims = tuple(norm_dim(d, x.ndim) for d in dim)
    if any(x.shape[d] == 0 for d in dims):
        raise NoLowering(op, "an empty signal (torch's error)")
    return dims


def _scaled(y, normalization: int, points):
    """``y`` normalized over ``points`` elements (an int, or traced: a padded length's true
    size, ``padding._padded_c2c_fn``)."""
    if normalization == _BY_ROOT_N:
        if type(points) is not int:
            return y / jnp.sqrt(jnp.asarray(points, y.real.dtype))
        return y / jnp.asarray(math.sqrt(points), y.real.dtype)
    if normalization == _BY_N:
        return y / jnp.asarray(points, y.real.dtype)
    return y


def _points(shape, dims) -> int:
    return math.prod(shape[d] for d in dims)


@rule(aten._fft_r2c.default)
def fft_r2c_rule(x, dim, normalization, onesided):
    if x.dtype not in D.COMPLEX_OF:   # half types: torch's own support and errors decide
        raise NoLowering(aten._fft_r2c.default, f"{x.dtype} input")
    dims = _dims(aten._fft_r2c.default, x, dim)
    return sf.fft_shape(tuple(x.shape), None, dims, "r2c" if onesided else "c2c"), \
        D.COMPLEX_OF[x.dtype]


@lowering(aten._fft_r2c.default)
def lower_fft_r2c(x, dim, normalization, onesided):
    dims = tuple(norm_dim(d, x.ndim) for d in dim)
    y = jnp.fft.rfftn(x, axes=dims) if onesided else jnp.fft.fftn(x, axes=dims)
    return _scaled(y, normalization, _points(x.shape, dims))


@rule(aten._fft_c2r.default)
def fft_c2r_rule(x, dim, normalization, last_dim_size):
    if x.dtype not in D.REAL_OF:
        raise NoLowering(aten._fft_c2r.default, f"{x.dtype} input")
    dims = _dims(aten._fft_c2r.default, x, dim)
    if last_dim_size <= 0:
        raise NoLowering(aten._fft_c2r.default, "an empty signal (torch's error)")
    sizes = (-1,) * (len(dims) - 1) + (last_dim_size,)
    return sf.fft_shape(tuple(x.shape), sizes, dims, "c2r"), D.REAL_OF[x.dtype]


@lowering(aten._fft_c2r.default)
def lower_fft_c2r(x, dim, normalization, last_dim_size):
    dims = tuple(norm_dim(d, x.ndim) for d in dim)
    sizes = [x.shape[d] for d in dims[:-1]] + [last_dim_size]
    # torch reads only the first last_dim_size // 2 + 1 entries of the last dim
    x = jnp.take(x, jnp.arange(min(x.shape[dims[-1]], last_dim_size // 2 + 1)), axis=dims[-1])
    y = jnp.fft.irfftn(x, s=sizes, axes=dims, norm="forward")   # "forward": unscaled inverse
    return _scaled(y, normalization, math.prod(sizes))


@rule(aten._fft_c2c.default)
def fft_c2c_rule(x, dim, normalization, forward):
    if x.dtype not in D.REAL_OF:
        raise NoLowering(aten._fft_c2c.default, f"{x.dtype} input")
    dims = _dims(aten._fft_c2c.default, x, dim)
    return sf.fft_shape(tuple(x.shape), None, dims, "c2c"), x.dtype


@lowering(aten._fft_c2c.default)
def lower_fft_c2c(x, dim, normalization, forward):
    dims = tuple(norm_dim(d, x.ndim) for d in dim)
    if not dims:
        return x
    y = jnp.fft.fftn(x, axes=dims) if forward else jnp.fft.ifftn(x, axes=dims, norm="forward")
    return _scaled(y, normalization, _points(x.shape, dims))


COMPLEX_OK.update([aten._fft_r2c.default, aten._fft_c2r.default, aten._fft_c2c.default])
