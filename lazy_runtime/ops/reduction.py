"""Reductions: shape from ``shape_fns.reduce_shape``, integer sums widen to int64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from .. import dtypes as D
from .common import jdt, norm_dim, norm_dims, opmath, sf
from .registry import decomposition, lowering, rule

aten = torch.ops.aten


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype
    return torch.int64 if D.is_integral(x.dtype, include_bool=True) else x.dtype


def _dims_arg(dim):
    return None if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim


# ---- sum / mean / prod ----------------------------------------------------------------


@rule(aten.sum.default, aten.sum.dim_IntList)
def sum_rule(x, dim=None, keepdim=False, *, dtype=None):
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), _sum_dtype(x, dtype)


@lowering(aten.sum.default, aten.sum.dim_IntList, ctx=True)
def lower_sum(ctx, x, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    acc = jdt(opmath(ctx.dtype))
    return jnp.sum(x.astype(acc), axis=axes, keepdims=keepdim)


@rule(aten.mean.default, aten.mean.dim)
def mean_rule(x, dim=None, keepdim=False, *, dtype=None):
    out = dtype if dtype is not None else x.dtype
    if not (out.is_floating_point or out.is_complex):
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {str(out)[6:].capitalize()}")
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), out


@lowering(aten.mean.default, aten.mean.dim, ctx=True)
def lower_mean(ctx, x, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    return jnp.mean(x.astype(jdt(opmath(ctx.dtype))), axis=axes, keepdims=keepdim)


@rule(aten.prod.default, aten.prod.dim_int)
def prod_rule(x, dim=None, keepdim=False, *, dtype=None):
    return sf.reduce_shape(tuple(x.shape), dim, keepdim), _sum_dtype(x, dtype)


@lowering(aten.prod.default, aten.prod.dim_int, ctx=True)
def lower_prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(dim, x.ndim)
    return jnp.prod(x.astype(jdt(opmath(ctx.dtype))), axis=axes, keepdims=keepdim)


# ---- max / min / arg ------------------------------------------------------------------


@rule(aten.amax.default, aten.amin.default)
def amax_rule(x, dim=(), keepdim=False):
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), x.dtype


@lowering(aten.amax.default)
def lower_amax(x, dim=(), keepdim=False):
    return jnp.max(x, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)


@lowering(aten.amin.default)
def lower_amin(x, dim=(), keepdim=False):
    return jnp.min(x, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)


@rule(aten.max.default, aten.min.default)
def max_all_rule(x):
    return (), x.dtype


@lowering(aten.max.default)
def lower_max_all(x):
    return jnp.max(x)


@lowering(aten.min.default)
def lower_min_all(x):
    return jnp.min(x)


@rule(aten.max.dim, aten.min.dim, multi=True)
def max_dim_rule(x, dim, keepdim=False):
    s = sf.reduce_shape(tuple(x.shape), dim, keepdim)
    return [(s, x.dtype), (s, torch.int64)]


def _arg_reduce(x, dim, keepdim, fn):
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    # torch returns the first index of the extreme value, NaN counting as the extreme.
    r = fn(x, axis=d, keepdims=keepdim)
    return r.astype(jnp.int64)


@lowering(aten.max.dim)
def lower_max_dim(x, dim, keepdim=False):
    return jnp.max(x, axis=norm_dim(dim, x.ndim) if x.ndim else None, keepdims=keepdim), \
        _arg_reduce(x, dim, keepdim, jnp.argmax)


@lowering(aten.min.dim)
def lower_min_dim(x, dim, keepdim=False):
    return jnp.min(x, axis=norm_dim(dim, x.ndim) if x.ndim else None, keepdims=keepdim), \
        _arg_reduce(x, dim, keepdim, jnp.argmin)


@rule(aten.argmax.default, aten.argmin.default)
def argmax_rule(x, dim=None, keepdim=False):
    return sf.reduce_shape(tuple(x.shape), dim, keepdim), torch.int64


@lowering(aten.argmax.default)
def lower_argmax(x, dim=None, keepdim=False):
    if dim is None:
        r = jnp.argmax(x.reshape(-1))
        return r.reshape((1,) * x.ndim) if keepdim else r
    return _arg_reduce(x, dim, keepdim, jnp.argmax)


@lowering(aten.argmin.default)
def lower_argmin(x, dim=None, keepdim=False):
    if dim is None:
        r = jnp.argmin(x.reshape(-1))
        return r.reshape((1,) * x.ndim) if keepdim else r
    return _arg_reduce(x, dim, keepdim, jnp.argmin)


# ---- any / all ----------------------------------------------------------------------


@rule(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim,
      aten.all.dims)
def any_rule(x, dim=None, keepdim=False):
    out = torch.uint8 if x.dtype == torch.uint8 else torch.bool
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), out


@lowering(aten.any.default, aten.any.dim, aten.any.dims)
def lower_any(x, dim=None, keepdim=False):
    return jnp.any(x != 0, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)


@lowering(aten.all.default, aten.all.dim, aten.all.dims)
def lower_all(x, dim=None, keepdim=False):
    return jnp.all(x != 0, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)


# ---- variance, norms, logsumexp, cumulative ----------------------------------------


@rule(aten.var.correction, aten.std.correction)
def var_rule(x, dim=None, *, correction=None, keepdim=False):
    out = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), out


def _var(x, dim, correction, keepdim):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    c = 1 if correction is None else correction
    mean = jnp.mean(x, axis=axes, keepdims=True)
    ss = jnp.sum(jnp.square(x - mean), axis=axes, keepdims=keepdim)
    return ss / max(n - c, 0)


@lowering(aten.var.correction, ctx=True)
def lower_var(ctx, x, dim=None, *, correction=None, keepdim=False):
    return _var(x.astype(jdt(opmath(ctx.dtype))), dim, correction, keepdim)


@lowering(aten.std.correction, ctx=True)
def lower_std(ctx, x, dim=None, *, correction=None, keepdim=False):
    return jnp.sqrt(_var(x.astype(jdt(opmath(ctx.dtype))), dim, correction, keepdim))


@rule(aten.var_mean.correction, multi=True)
def var_mean_rule(x, dim=None, *, correction=None, keepdim=False):
    t = var_rule(x, dim, correction=correction, keepdim=keepdim)
    return [t, t]


@lowering(aten.var_mean.correction, ctx=True)
def lower_var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    out = jdt(ctx.dtype[0])
    xf = x.astype(jdt(opmath(ctx.dtype[0])))
    mean = jnp.mean(xf, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)
    return _var(xf, dim, correction, keepdim).astype(out), mean.astype(out)


@decomposition(aten.var_mean.dim)
def var_mean_dim(x, dim, unbiased=True, keepdim=False):
    """torch's decomposition reaches prims (var, broadcast_in_dim, div): group norm's."""
    return aten.var_mean.correction(x, dim, correction=1 if unbiased else 0, keepdim=keepdim)


@rule(aten.linalg_vector_norm.default)
def vector_norm_rule(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), dtype or x.dtype


@lowering(aten.linalg_vector_norm.default, ctx=True)
def lower_vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    a = jnp.abs(x.astype(jdt(opmath(ctx.dtype))))
    if ord == float("inf"):
        return jnp.max(a, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, axis=axes, keepdims=keepdim).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    return jnp.sum(a ** ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)


@rule(aten.logsumexp.default)
def logsumexp_rule(x, dim, keepdim=False):
    out = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), out


@lowering(aten.logsumexp.default, ctx=True)
def lower_logsumexp(ctx, x, dim, keepdim=False):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    return jax.scipy.special.logsumexp(x.astype(jdt(opmath(ctx.dtype))), axis=axes,
                                       keepdims=keepdim)


@rule(aten.cumsum.default, aten.cumprod.default)
def cumsum_rule(x, dim, *, dtype=None):
    norm_dim(dim, x.ndim)
    return tuple(x.shape), _sum_dtype(x, dtype)


@lowering(aten.cumsum.default, ctx=True)
def lower_cumsum(ctx, x, dim, *, dtype=None):
    x = x.astype(jdt(ctx.dtype))
    return jnp.cumsum(x, axis=norm_dim(dim, x.ndim)) if x.ndim else x


@lowering(aten.cumprod.default, ctx=True)
def lower_cumprod(ctx, x, dim, *, dtype=None):
    x = x.astype(jdt(ctx.dtype))
    return jnp.cumprod(x, axis=norm_dim(dim, x.ndim)) if x.ndim else x


# ---- sort / topk ------------------------------------------------------------------------


def _sort_types(x):
    return [(tuple(x.shape), x.dtype), (tuple(x.shape), torch.int64)]


@rule(aten.sort.default, multi=True)
def sort_rule(x, dim=-1, descending=False):
    norm_dim(dim, max(x.ndim, 1))
    return _sort_types(x)


@rule(aten.sort.stable, multi=True)
def sort_stable_rule(x, *, stable=None, dim=-1, descending=False):
    return sort_rule(x, dim, descending)


@rule(aten.topk.default, multi=True)
def topk_rule(x, k, dim=-1, largest=True, sorted=True):
    d = norm_dim(dim, max(x.ndim, 1))
    shape = list(x.shape)
    if not 0 <= k <= (shape[d] if shape else 1):
        raise RuntimeError("selected index k out of range")
    if shape:
        shape[d] = k
    return [(tuple(shape), x.dtype), (tuple(shape), torch.int64)]


def _sort_keys(x, descending):
    """Keys whose ascending lexicographic order is torch's order of ``x``: NaN the
    largest, -0.0 equal to 0.0, ints reversed without overflow (``~x``)."""
    if jnp.issubdtype(x.dtype, jnp.floating):
        nan = jnp.isnan(x)
        v = jnp.where(nan | (x == 0), jnp.zeros((), x.dtype), x)
        if descending:
            return (jnp.where(nan, 0, 1).astype(jnp.int8), -v)
        return (nan.astype(jnp.int8), v)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int8)
    return ((~x if descending else x),)


def _sorted_along(x, dim, descending):
    """(values, int64 indices) of ``x`` sorted along ``dim``, stably (ties keep their
    order, as torch's stable sort does)."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    xm = jnp.moveaxis(x, d, -1)
    idx = jax.lax.broadcasted_iota(jnp.int64, xm.shape, xm.ndim - 1)
    keys = _sort_keys(xm, descending)
    order = jax.lax.sort(keys + (idx,), dimension=xm.ndim - 1, is_stable=True,
                         num_keys=len(keys))[-1]
    values = jnp.take_along_axis(xm, order, axis=-1)
    return jnp.moveaxis(values, -1, d), jnp.moveaxis(order, -1, d)


@lowering(aten.sort.default)
def lower_sort(x, dim=-1, descending=False):
    return _sorted_along(x, dim, descending)


@lowering(aten.sort.stable)
def lower_sort_stable(x, *, stable=None, dim=-1, descending=False):
    return _sorted_along(x, dim, descending)


@lowering(aten.topk.default)
def lower_topk(x, k, dim=-1, largest=True, sorted=True):
    values, order = _sorted_along(x, dim, largest)
    if x.ndim == 0:
        return values, order
    d = norm_dim(dim, x.ndim)
    return (jax.lax.slice_in_dim(values, 0, k, axis=d),
            jax.lax.slice_in_dim(order, 0, k, axis=d))
