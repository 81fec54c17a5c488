"""Reductions: shape from ``shape_fns.reduce_shape``, integer sums widen to int64."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
import torch._decomp

from .. import dtypes as D
from ..errors import NoLowering
from .common import (HALF_BITS, amax, amin, c_abs, c_exp, c_log, jdt, norm_dim, norm_dims,
                     opmath, rounded_apart, sf, type_name)
from .layout import _check_dim_index, _full_index
from .registry import Outputs, check, decomposition, lowering, refuse, rule

aten = torch.ops.aten


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype
    return torch.int64 if D.is_integral(x.dtype, include_bool=True) else x.dtype


def _dims_arg(dim):
    return None if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim


# ---- sum / mean / prod ----------------------------------------------------------------


@rule(aten.sum.default, aten.sum.dim_IntList, pure=True)
def sum_rule(x, dim=None, keepdim=False, *, dtype=None):
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), _sum_dtype(x, dtype)


@lowering(aten.sum.default, aten.sum.dim_IntList, ctx=True)
def lower_sum(ctx, x, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    acc = jdt(opmath(ctx.dtype))
    return jnp.sum(x.astype(acc), axis=axes, keepdims=keepdim)


@rule(aten.mean.default, aten.mean.dim, pure=True)
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


@rule(aten.prod.default, aten.prod.dim_int, pure=True)
def prod_rule(x, dim=None, keepdim=False, *, dtype=None):
    return sf.reduce_shape(tuple(x.shape), dim, keepdim), _sum_dtype(x, dtype)


@lowering(aten.prod.default, aten.prod.dim_int, ctx=True)
def lower_prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(dim, x.ndim)
    return jnp.prod(x.astype(jdt(opmath(ctx.dtype))), axis=axes, keepdims=keepdim)


# ---- max / min / arg ------------------------------------------------------------------


@rule(aten.amax.default, aten.amin.default, pure=True)
def amax_rule(x, dim=(), keepdim=False):
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), x.dtype


@lowering(aten.amax.default)
def lower_amax(x, dim=(), keepdim=False):
    return amax(x, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)


@lowering(aten.amin.default)
def lower_amin(x, dim=(), keepdim=False):
    return amin(x, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)


@rule(aten.max.default, aten.min.default, pure=True)
def max_all_rule(x):
    return (), x.dtype


@lowering(aten.max.default)
def lower_max_all(x):
    return amax(x)


@lowering(aten.min.default)
def lower_min_all(x):
    return amin(x)


@rule(aten.max.dim, aten.min.dim, multi=True, pure=True)
def max_dim_rule(x, dim, keepdim=False):
    s = sf.reduce_shape(tuple(x.shape), dim, keepdim)
    return [(s, x.dtype), (s, torch.int64)]


def _arg_reduce(x, dim, keepdim, extreme):
    """The first index of the extreme value along ``dim`` (all of ``x`` for None), NaN
    counting as the extreme, as torch returns. The index is a min over the positions that
    hold it, which no reduction order changes: ``jnp.argmax`` keeps whichever NaN its
    reduction tree meets last, so on XLA:GPU rows with several NaN gave a later one's."""
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    if dim is None:
        r = _arg_reduce(x.reshape(-1), 0, False, extreme)
        return r.reshape((1,) * x.ndim) if keepdim else r
    d = norm_dim(dim, x.ndim)
    m = extreme(x, axis=d, keepdims=True)
    hit = (x == m) | jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.inexact) else x == m
    idx = jax.lax.broadcasted_iota(jnp.int64, x.shape, d)
    return jnp.min(jnp.where(hit, idx, x.shape[d]), axis=d, keepdims=keepdim)


@lowering(aten.max.dim)
def lower_max_dim(x, dim, keepdim=False):
    return amax(x, axis=norm_dim(dim, x.ndim) if x.ndim else None, keepdims=keepdim), \
        _arg_reduce(x, dim, keepdim, amax)


@lowering(aten.min.dim)
def lower_min_dim(x, dim, keepdim=False):
    return amin(x, axis=norm_dim(dim, x.ndim) if x.ndim else None, keepdims=keepdim), \
        _arg_reduce(x, dim, keepdim, amin)


@rule(aten.argmax.default, aten.argmin.default, pure=True)
def argmax_rule(x, dim=None, keepdim=False):
    return sf.reduce_shape(tuple(x.shape), dim, keepdim), torch.int64


# (torch: "argmax(): does not support bool input")
refuse((aten.argmax.default, aten.argmin.default), lambda args, dt: args[0].dtype is torch.bool,
       "a bool input (torch's error)")


@lowering(aten.argmax.default)
def lower_argmax(x, dim=None, keepdim=False):
    return _arg_reduce(x, dim, keepdim, amax)


@lowering(aten.argmin.default)
def lower_argmin(x, dim=None, keepdim=False):
    return _arg_reduce(x, dim, keepdim, amin)


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


def _bool_only(op, x):
    if x.dtype != torch.bool:
        raise NoLowering(op, f"{x.dtype} input (torch's error)")


# What ``torch.distributions`` validates its arguments with: a 0-d bool.
@decomposition(aten._is_all_true.default)
def is_all_true(x):
    _bool_only(aten._is_all_true.default, x)
    return torch.all(x)


@decomposition(aten._is_any_true.default)
def is_any_true(x):
    _bool_only(aten._is_any_true.default, x)
    return torch.any(x)


# ---- variance, norms, logsumexp, cumulative ----------------------------------------


@rule(aten.var.correction, aten.std.correction)
def var_rule(x, dim=None, *, correction=None, keepdim=False):
    d = x.dtype
    out = D.REAL_OF.get(d) or (d if d.is_floating_point else torch.get_default_dtype())
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), out


def _in_opmath(x, real_dtype):
    """``x`` in the compute dtype of a reduction with a real result: complex values stay
    as they are (their magnitudes are taken inside)."""
    return x if jnp.iscomplexobj(x) else x.astype(jdt(opmath(real_dtype)))


# torch's CPU accumulation type (``acc_type<T, false>``), in which its scans and var/std
# accumulate: double for float, float for the 16-bit types (a float32 running product that
# overflows there, 1e30 * -1e30 then * 0, is finite in torch's)
_CPU_ACCUMULATOR = {jnp.dtype(jnp.float32): jnp.float64, jnp.dtype(jnp.float16): jnp.float32,
                    jnp.dtype(jnp.bfloat16): jnp.float32, jnp.dtype(jnp.complex64): jnp.complex128}


def _var(x, dim, correction, keepdim):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    c = 1 if correction is None else correction
    dev = x - jnp.mean(x, axis=axes, keepdims=True)
    return jnp.sum(squared_magnitude(dev), axis=axes, keepdims=keepdim) / max(n - c, 0)


def squared_magnitude(dev):
    """|dev|**2: a variance's terms, real for complex deviations too."""
    return jnp.real(dev * jnp.conj(dev)) if jnp.iscomplexobj(dev) else jnp.square(dev)


def _in_cpu_accumulator(x):
    """``x`` (floating or complex: ``var``/``std`` refuse the rest) in torch's CPU
    accumulation type (a float32 mean of values near 1e4 is off by up to half an ulp, 5e-4,
    which a variance of 1e-4 feels: 6e-4 relative error against torch's 3e-8)."""
    return x.astype(_CPU_ACCUMULATOR.get(x.dtype, x.dtype))


@lowering(aten.var.correction)
def lower_var(x, dim=None, *, correction=None, keepdim=False):
    return _var(_in_cpu_accumulator(x), dim, correction, keepdim)


@lowering(aten.std.correction)
def lower_std(x, dim=None, *, correction=None, keepdim=False):
    return jnp.sqrt(_var(_in_cpu_accumulator(x), dim, correction, keepdim))


# Set while group norm's decomposition runs: its var_mean is torch's group norm kernel's
# moments, which accumulate in the opmath type (float for float32: RowwiseMoments), where a
# user's var_mean accumulates in double as torch's var_mean kernel. The node's aux says which.
_OPMATH_MOMENTS = [False]
OPMATH = "opmath"


@rule(aten.var_mean.correction, multi=True)
def var_mean_rule(x, dim=None, *, correction=None, keepdim=False):
    shape, real = var_rule(x, dim, correction=correction, keepdim=keepdim)
    return Outputs([(shape, real), (shape, x.dtype if x.dtype in D.REAL_OF else real)],
                   OPMATH if _OPMATH_MOMENTS[0] else None)


def var_input(x, real_dtype, aux):
    """``x`` in the type var_mean accumulates in: torch's CPU accumulation type, or the
    opmath type for group norm's moments (``aux``: ``OPMATH``)."""
    return _in_opmath(x, real_dtype) if aux == OPMATH else _in_cpu_accumulator(x)


@lowering(aten.var_mean.correction, ctx=True)
def lower_var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    """In torch's CPU accumulation type (double for float32: its var_mean kernel's Welford
    sums; a float32 var_mean of values near 1e4 with spread 0.01 was 1.1e-3 off), or in
    the opmath type inside group norm (``ctx.aux``)."""
    xf = var_input(x, ctx.dtype[0], ctx.aux)
    mean = jnp.mean(xf, axis=norm_dims(_dims_arg(dim), x.ndim), keepdims=keepdim)
    return (_var(xf, dim, correction, keepdim).astype(jdt(ctx.dtype[0])),
            mean.astype(jdt(ctx.dtype[1])))


# torch's var, std and var_mean refuse integers and bools (its error)
refuse((aten.var.correction, aten.std.correction, aten.var_mean.correction),
       lambda args, dt: not (args[0].dtype.is_floating_point or args[0].dtype.is_complex),
       "var or std of integers or bools")


@decomposition(aten.var_mean.dim)
def var_mean_dim(x, dim, unbiased=True, keepdim=False):
    """torch's decomposition reaches prims (var, broadcast_in_dim, div): group norm's."""
    return aten.var_mean.correction(x, dim, correction=1 if unbiased else 0, keepdim=keepdim)


@decomposition(aten.native_group_norm.default)
def native_group_norm(*args, **kwargs):
    """torch's decomposition, its moments (a var_mean) in the opmath type as torch's group
    norm kernel computes them (see ``_OPMATH_MOMENTS``)."""
    was = _OPMATH_MOMENTS[0]
    _OPMATH_MOMENTS[0] = True
    try:
        return torch._decomp.decomposition_table[aten.native_group_norm.default](*args, **kwargs)
    finally:
        _OPMATH_MOMENTS[0] = was


@rule(aten.linalg_vector_norm.default, pure=True)
def vector_norm_rule(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:   # (torch's checks)
        if (x.dtype in D.REAL_OF) != (dtype in D.REAL_OF):
            kind = "complex" if x.dtype in D.REAL_OF else "real"
            raise RuntimeError(f"linalg.vector_norm: dtype should be {kind} for {kind} "
                               f"inputs, but got {type_name(dtype)}")
        if torch.promote_types(x.dtype, dtype) != dtype:
            raise RuntimeError(f"linalg.vector_norm: the dtype of the input "
                               f"({type_name(x.dtype)}) should be convertible without "
                               f"narrowing to the specified dtype ({type_name(dtype)})")
    if x.dtype in D.REAL_OF:   # the norm of complex values is real
        dtype = D.REAL_OF[dtype or x.dtype]   # (x cast to a complex dtype first)
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), dtype or x.dtype


@lowering(aten.linalg_vector_norm.default, ctx=True)
def lower_vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    if dtype is not None and jnp.iscomplexobj(x):
        x = x.astype(jdt(dtype))
    a = c_abs(_in_opmath(x, ctx.dtype))
    if ord == float("inf"):
        return amax(a, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return amin(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, axis=axes, keepdims=keepdim).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    return jnp.sum(a ** ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)


@rule(aten.logsumexp.default, pure=True)
def logsumexp_rule(x, dim, keepdim=False):
    out = x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else \
        torch.get_default_dtype()
    return sf.reduce_shape(tuple(x.shape), _dims_arg(dim), keepdim), out


@lowering(aten.logsumexp.default, ctx=True)
def lower_logsumexp(ctx, x, dim, keepdim=False):
    axes = norm_dims(_dims_arg(dim), x.ndim)
    if jnp.iscomplexobj(x):
        return _complex_logsumexp(x, axes, keepdim)
    return jax.scipy.special.logsumexp(x.astype(jdt(opmath(ctx.dtype))), axis=axes,
                                       keepdims=keepdim)


def _complex_logsumexp(x, axes, keepdim):
    """torch's algorithm: the largest real part (NaN if any is NaN; 0 if infinite) taken
    out before the exps and added back; the imaginary part is not wrapped. Empty: the log
    of an empty sum (-inf). exp and log with C's values at infinities (``c_exp``)."""
    if x.size == 0:
        return jnp.log(jnp.sum(jnp.exp(x), axis=axes, keepdims=keepdim))
    re = jnp.real(x)
    m = amax(re, axis=axes, keepdims=True)
    m = jnp.where(jnp.isinf(m), 0, m)
    s = c_log(jnp.sum(c_exp(x - m), axis=axes, keepdims=keepdim))
    return s + (m if keepdim else jnp.squeeze(m, axes)).astype(s.dtype)


@rule(aten.cumsum.default, aten.cumprod.default, pure=True)
def cumsum_rule(x, dim, *, dtype=None):
    norm_dim(dim, x.ndim)
    return tuple(x.shape), _sum_dtype(x, dtype)


def _scan(scan, ctx, x, dim):
    out = jdt(ctx.dtype)
    x = x.astype(out)
    if not x.ndim:
        return x
    acc = _CPU_ACCUMULATOR.get(jnp.dtype(out), out)
    return scan(x.astype(acc), axis=norm_dim(dim, x.ndim)).astype(out)


@lowering(aten.cumsum.default, ctx=True)
def lower_cumsum(ctx, x, dim, *, dtype=None):
    return _scan(jnp.cumsum, ctx, x, dim)


@lowering(aten.cumprod.default, ctx=True)
def lower_cumprod(ctx, x, dim, *, dtype=None):
    return _scan(jnp.cumprod, ctx, x, dim)


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


def sorted_along(x, dim, descending, n=None):
    """(values, int64 indices) of ``x`` sorted along ``dim``, stably (ties keep their
    order, as torch's stable sort does). With ``n`` (a true length, traced, of a dim padded
    at its end) the positions from ``n`` on sort after all others, whatever they hold."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    xm = jnp.moveaxis(x, d, -1)
    idx = jax.lax.broadcasted_iota(jnp.int64, xm.shape, xm.ndim - 1)
    keys = _sort_keys(xm, descending)
    if n is not None:
        keys = ((idx >= n).astype(jnp.int8),) + keys
    order = jax.lax.sort(keys + (idx,), dimension=xm.ndim - 1, is_stable=True,
                         num_keys=len(keys))[-1]
    values = jnp.take_along_axis(xm, order, axis=-1)
    return jnp.moveaxis(values, -1, d), jnp.moveaxis(order, -1, d)


@lowering(aten.sort.default)
def lower_sort(x, dim=-1, descending=False):
    return sorted_along(x, dim, descending)


@lowering(aten.sort.stable)
def lower_sort_stable(x, *, stable=None, dim=-1, descending=False):
    return sorted_along(x, dim, descending)


def top_k(x, k, dim, largest, n=None):
    """topk's (values, indices): the first ``k`` of the sort (``n``: ``sorted_along``'s)."""
    values, order = sorted_along(x, dim, largest, n)
    if x.ndim == 0:
        return values, order
    d = norm_dim(dim, x.ndim)
    return (jax.lax.slice_in_dim(values, 0, k, axis=d),
            jax.lax.slice_in_dim(order, 0, k, axis=d))


@lowering(aten.topk.default)
def lower_topk(x, k, dim=-1, largest=True, sorted=True):
    return top_k(x, k, dim, largest)


# ---- order statistics: kthvalue, median, nanmedian, mode -------------------------------


def _not_for_bool(x, kernel):
    if x.dtype == torch.bool:
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


def _selection_types(name, x, dim, keepdim):
    """(values, int64 indices) types of a reduction that picks one element along ``dim``."""
    d = norm_dim(dim, max(x.ndim, 1))
    if x.ndim and x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    s = sf.reduce_shape(tuple(x.shape), d, keepdim) if x.ndim else ()
    return [(s, x.dtype), (s, torch.int64)]


@rule(aten.kthvalue.default, multi=True)
def kthvalue_rule(x, k, dim=-1, keepdim=False):
    _not_for_bool(x, "kthvalue_cpu")
    types = _selection_types("kthvalue", x, dim, keepdim)
    d = norm_dim(dim, max(x.ndim, 1))
    if not 1 <= k <= (x.shape[d] if x.ndim else 1):
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return types


@rule(aten.median.dim, aten.nanmedian.dim, multi=True)
def median_dim_rule(x, dim, keepdim=False):
    _not_for_bool(x, "median_out")
    return _selection_types("median", x, dim, keepdim)


@rule(aten.median.default, aten.nanmedian.default)
def median_all_rule(x):
    _not_for_bool(x, "median_cpu")
    if x.numel() == 0 and not x.dtype.is_floating_point:
        raise NoLowering(aten.median.default, "empty integer input (torch returns garbage)")
    return (), x.dtype


@rule(aten.mode.default, multi=True)
def mode_rule(x, dim=-1, keepdim=False):
    return _selection_types("mode", x, dim, keepdim)


def pick_sorted(x, dim, keepdim, position, n=None):
    """Values and indices of ``x`` at a position of its ascending sort along ``dim``:
    ``position(sorted, axis, length)`` gives it per row (keepdims shape), ``length`` the
    dim's true one (``n``, of a dim padded at its end, else its size). The sort is stable
    and puts NaN last: equal values keep their original order."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    values, order = sorted_along(x, d, False, n)
    pos = position(values, d, x.shape[d] if n is None else n)
    v = jnp.take_along_axis(values, pos, axis=d)
    i = jnp.take_along_axis(order, pos, axis=d)
    return (v, i) if keepdim else (jnp.squeeze(v, d), jnp.squeeze(i, d))


def kth_position(k):
    def position(s, d, n):
        return jnp.full(s.shape[:d] + (1,) + s.shape[d + 1:], k - 1, jnp.int64)
    return position


def median_position(ignore_nan):
    """The lower middle of the row; with NaN present, median takes the first NaN (sorted
    after the ``c`` numbers) and nanmedian the lower middle of the numbers (0 if none)."""
    def position(s, d, n):
        true = jax.lax.broadcasted_iota(jnp.int64, s.shape, d) < n
        c = jnp.sum(~jnp.isnan(s) & true, axis=d, keepdims=True, dtype=jnp.int64)
        if ignore_nan:
            return jnp.maximum((c - 1) // 2, 0)
        return jnp.where(c < n, c, (n - 1) // 2)
    return position


def mode_position(s, d, n):
    """The last element of the first longest run of equal values: the smallest of the most
    frequent values, at its last index (stable sort). A run counts the elements before
    it, so the true positions' runs never reach into padding sorted after them."""
    iota = jax.lax.broadcasted_iota(jnp.int64, s.shape, d)
    prev = jnp.roll(s, 1, axis=d)
    starts = jnp.where((s != prev) | (iota == 0), iota, 0)
    run = jnp.where(iota < n, iota - jax.lax.cummax(starts, axis=d) + 1, 0)
    return jnp.argmax(run, axis=d, keepdims=True)


@lowering(aten.kthvalue.default)
def lower_kthvalue(x, k, dim=-1, keepdim=False):
    # torch's quickselect returns an unspecified index among equal values; ours is the first
    return pick_sorted(x, dim, keepdim, kth_position(k))


@lowering(aten.median.dim)
def lower_median_dim(x, dim, keepdim=False):
    return pick_sorted(x, dim, keepdim, median_position(False))


@lowering(aten.nanmedian.dim)
def lower_nanmedian_dim(x, dim, keepdim=False):
    return pick_sorted(x, dim, keepdim, median_position(True))


def _median_all(x, ignore_nan):
    if x.size == 0:
        return jnp.full((), jnp.nan, x.dtype)
    return pick_sorted(x.reshape(-1), 0, False, median_position(ignore_nan))[0]


@lowering(aten.median.default)
def lower_median(x):
    return _median_all(x, False)


@lowering(aten.nanmedian.default)
def lower_nanmedian(x):
    return _median_all(x, True)


@lowering(aten.mode.default)
def lower_mode(x, dim=-1, keepdim=False):
    # torch CPU sorts rows longer than 16 unstably: its index among equal values (and, with
    # NaN, which value wins) is then unspecified; ours is the last index
    return pick_sorted(x, dim, keepdim, mode_position)


# ---- searchsorted ---------------------------------------------------------------------


# a float value is a runtime input: thresholds that change do not recompile
@rule(aten.searchsorted.Tensor, aten.searchsorted.Scalar, dynamic_scalars=True)
def searchsorted_rule(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    name = "torch.searchsorted():"
    if side == "left" and right:
        raise RuntimeError(f"{name} side and right can't be set to opposites, got side of left "
                           "while right was True")
    if side not in (None, "left", "right"):
        raise RuntimeError(f"{name} side can only be 'left' or 'right' but got {side}")
    if sorter is not None:
        if sorter.dtype != torch.int64:
            raise RuntimeError(f"{name} sorter must be a tensor of long dtype but got dtype "
                               f"{type_name(sorter.dtype)}")
        if sorter.shape != seq.shape:
            raise RuntimeError(f"{name} boundary and sorter must have the same size, but got "
                               f"boundary tensor {list(seq.shape)}and got sorter tensor "
                               f"{list(sorter.shape)}")
    vshape = tuple(values.shape) if isinstance(values, torch.Tensor) else ()
    if seq.ndim != 1 and not vshape:
        raise RuntimeError(f"{name} input value can be a scalar only when boundaries tensor "
                           f"dimension is 1, but we got boundaries tensor dim({seq.ndim}) and "
                           "input value's dim(0) numel(1)")
    if seq.ndim == 0:
        raise RuntimeError(f"{name} boundaries tensor should have positive dimension, but got "
                           "0 dimension")
    if seq.ndim != 1 and (seq.ndim != len(vshape) or tuple(seq.shape[:-1]) != vshape[:-1]):
        raise RuntimeError(f"{name} boundaries tensor should be 1 dimension or the first N-1 "
                           "dimensions of boundaries tensor and input value tensor must match, "
                           f"but we got boundaries tensor {list(seq.shape)} and input value "
                           f"tensor {list(vshape)}")
    common = D.result_type(seq, values)
    if common == torch.bool:
        raise NotImplementedError("\"searchsorted_out_cpu\" not implemented for 'Bool'")
    return vshape, torch.int32 if out_int32 else torch.int64, common


def _binary_search(seq, values, right):
    """torch's binary search, step for step (so NaN lands where torch puts it): the first
    position whose boundary is >= (``right``: >) the value."""
    n = seq.shape[-1]
    start = jnp.zeros(values.shape, jnp.int64)
    end = jnp.full(values.shape, n, jnp.int64)
    for _ in range(n.bit_length()):
        mid = (start + end) // 2
        at = jnp.minimum(mid, n - 1)
        b = jnp.take_along_axis(seq, at, axis=-1) if seq.ndim > 1 else seq[at]
        go_right = ~(b > values) if right else ~(b >= values)
        active = start < end
        start = jnp.where(active & go_right, mid + 1, start)
        end = jnp.where(active & ~go_right, mid, end)
    return start


@lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar, ctx=True)
def lower_searchsorted(ctx, seq, values, *, out_int32=False, right=False, side=None,
                       sorter=None):
    common = jdt(ctx.aux)
    seq = seq.astype(common)
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    found = _binary_search(seq, jnp.asarray(values).astype(common), right or side == "right")
    return found.astype(jdt(ctx.dtype))


@rule(aten.bucketize.Tensor, aten.bucketize.Scalar, dynamic_scalars=True)
def bucketize_rule(x, boundaries, *, out_int32=False, right=False):
    """``searchsorted`` with the arguments swapped and 1-d boundaries (torch's decomposition
    reads an index on the host for a 0-d input or a number)."""
    if boundaries.ndim != 1:
        raise NoLowering(aten.bucketize.Tensor, "boundaries of other than 1 dim (torch's error)")
    return searchsorted_rule(boundaries, x, out_int32=out_int32, right=right)


@lowering(aten.bucketize.Tensor, aten.bucketize.Scalar, ctx=True)
def lower_bucketize(ctx, x, boundaries, *, out_int32=False, right=False):
    return lower_searchsorted(ctx, boundaries, x, out_int32=out_int32, right=right)


# ---- cummax / cummin / logcumsumexp ----------------------------------------------------


@rule(aten.cummax.default, aten.cummin.default, multi=True)
def cummax_rule(x, dim):
    norm_dim(dim, max(x.ndim, 1))
    return _sort_types(x)


def _cum_extreme(x, dim, better):
    """Running extreme and its index. ``better(new, old)``: whether a later element takes
    over; torch lets NaN and equal values take over, so ties keep the last index."""
    if x.ndim == 0 or x.size == 0:
        return x, jnp.zeros(x.shape, jnp.int64)
    d = norm_dim(dim, x.ndim)

    def combine(a, b):
        take = jnp.isnan(b[0]) | (~jnp.isnan(a[0]) & better(b[0], a[0]))
        return jnp.where(take, b[0], a[0]), jnp.where(take, b[1], a[1])

    idx = jax.lax.broadcasted_iota(jnp.int64, x.shape, d)
    return jax.lax.associative_scan(combine, (x, idx), axis=d)


@lowering(aten.cummax.default)
def lower_cummax(x, dim):
    return _cum_extreme(x, dim, jnp.greater_equal)


@lowering(aten.cummin.default)
def lower_cummin(x, dim):
    return _cum_extreme(x, dim, jnp.less_equal)


@rule(aten.logcumsumexp.default)
def logcumsumexp_rule(x, dim):
    if x.dtype.is_complex:   # torch computes it (its complex form is not lowered)
        raise NoLowering(aten.logcumsumexp.default, "complex input")
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f'"logcumsumexp_out_cpu" not implemented for '
                                  f"'{type_name(x.dtype)}'")
    norm_dim(dim, max(x.ndim, 1))
    return tuple(x.shape), x.dtype


@lowering(aten.logcumsumexp.default, ctx=True)
def lower_logcumsumexp(ctx, x, dim):
    if x.ndim == 0 or x.size == 0:
        return x
    xf = x.astype(jdt(opmath(ctx.dtype)))
    return jax.lax.cumlogsumexp(xf, axis=norm_dim(dim, x.ndim)).astype(x.dtype)


# ---- scatter_reduce -------------------------------------------------------------------

# torch also takes the legacy names ``max`` and ``min`` for amax and amin
_SCATTER_REDUCE = {"sum": "sum", "prod": "prod", "mean": "mean", "amax": "amax",
                   "amin": "amin", "max": "amax", "min": "amin"}


@rule(aten.scatter_reduce.two)
def scatter_reduce_rule(x, dim, index, src, reduce, *, include_self=True):
    if reduce not in _SCATTER_REDUCE:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if x.dtype != src.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if x.dtype == torch.bool:
        raise NoLowering(aten.scatter_reduce.two, "bool tensors")
    d = norm_dim(dim, max(x.ndim, 1))
    xs, ixs, ss = (tuple(t.shape) or (1,) for t in (x, index, src))
    for other, what in ((xs, "self"), (ss, "src")):
        if len(ixs) != len(other):
            raise RuntimeError(f"Index tensor must have the same number of dimensions as {what} "
                               "tensor")
    if index.numel() and any(i > s or (k != d and i > t)
                             for k, (i, s, t) in enumerate(zip(ixs, ss, xs))):
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                           f"{list(x.shape)} apart from dimension {d} and to be no larger size "
                           f"than src {list(src.shape)}")
    return tuple(x.shape), x.dtype


def _reduce_identity(reduce, dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf if reduce == "amax" else jnp.inf
    return jnp.iinfo(dtype).min if reduce == "amax" else jnp.iinfo(dtype).max


@lowering(aten.scatter_reduce.two)
def lower_scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    shape = x.shape
    x, index, src = (t.reshape(t.shape or (1,)) for t in (x, index, src))
    d = norm_dim(dim, x.ndim)
    _check_dim_index("scatter_reduce", x, d, index)
    reduce = _SCATTER_REDUCE[reduce]
    idx = _full_index(index, d)
    src = src[tuple(slice(0, n) for n in index.shape)]
    # include_self=False: the targets start from the reduction's identity instead of self
    base = x if include_self else x.at[idx].set(_reduce_identity(reduce, x.dtype))
    at = base.at[idx]
    if reduce == "mean":
        total = at.add(src)
        count = jnp.zeros(x.shape, x.dtype).at[idx].add(1) + (1 if include_self else 0)
        count = jnp.where(count == 0, 1, count)
        out = total / count if jnp.issubdtype(x.dtype, jnp.floating) else total // count
    else:
        out = {"sum": at.add, "prod": at.multiply, "amax": at.max, "amin": at.min}[reduce](src)
    return out.astype(x.dtype).reshape(shape)


def _index_reduce_ok(x, dim, index, source, reduce) -> bool:
    """The arguments torch's ``index_reduce`` accepts (others: its error, eagerly)."""
    if reduce not in ("prod", "mean", "amax", "amin") or source.ndim != x.ndim:
        return False
    if index.dtype not in (torch.int32, torch.int64) or index.ndim > 1 or x.dtype == torch.bool:
        return False
    if x.dtype != source.dtype or not -x.ndim <= dim < max(x.ndim, 1):
        return False
    if x.ndim == 0:   # one element, as if of shape [1]
        return index.numel() == 1
    d = norm_dim(dim, x.ndim)
    return all(s == (index.numel() if k == d else n)
               for k, (s, n) in enumerate(zip(source.shape, x.shape)))


@decomposition(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    """``scatter_reduce`` with the index repeated along every other dim: the same
    reductions, the same ``include_self`` start and mean count, untouched rows kept."""
    if not _index_reduce_ok(x, dim, index, source, reduce):
        raise NoLowering(aten.index_reduce.default, "arguments torch refuses (its error)")
    if x.ndim == 0:
        return index_reduce(x.reshape(1), 0, index.reshape(1), source.reshape(1), reduce,
                            include_self=include_self).reshape(())
    d = norm_dim(dim, x.ndim)
    shape = [1] * x.ndim
    shape[d] = index.numel()
    idx = index.reshape(shape).expand(tuple(source.shape))
    return aten.scatter_reduce.two(x, d, idx, source, reduce, include_self=include_self)


# ---- cdist ----------------------------------------------------------------------------


def _cdist_batch(x1, x2):
    return sf.broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))


@rule(aten._cdist_forward.default)
def cdist_rule(x1, x2, p, compute_mode=None):
    for name, t in (("X1", x1), ("X2", x2)):
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{type_name(t.dtype)}")
    for name, t in (("X1", x1), ("X2", x2)):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if compute_mode not in (None, 0, 1, 2):
        raise RuntimeError(f"possible modes: 0, 1, 2, but was: {compute_mode}")
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"expected scalar type {type_name(x1.dtype)} but found "
                           f"{type_name(x2.dtype)}")
    if x1.dtype in D.HALF_TYPES:
        raise NotImplementedError(f"\"cdist\" not implemented for '{type_name(x1.dtype)}'")
    return _cdist_batch(x1, x2) + (x1.shape[-2], x2.shape[-2]), x1.dtype


def _pairwise_diff(x1, x2):
    """``x1[..., i, :] - x2[..., j, :]`` for every pair: [..., r1, r2, m]."""
    return x1[..., :, None, :] - x2[..., None, :, :]


@lowering(aten._cdist_forward.default)
def lower_cdist(x1, x2, p, compute_mode=None):
    # always the exact difference form: torch's mm form for p=2 differs only by rounding
    a = jnp.abs(_pairwise_diff(x1, x2))
    if p == 0:
        return jnp.sum(a != 0, axis=-1).astype(x1.dtype)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    if p == float("inf"):
        # torch's std::max(agg, d) from 0 skips a NaN difference
        return jnp.max(jnp.where(jnp.isnan(a), 0, a), axis=-1, initial=0)
    return jnp.sum(a ** p, axis=-1) ** (1 / p)


@rule(aten._cdist_backward.default)
def cdist_backward_rule(grad, x1, x2, p, cdist):
    return _cdist_batch(x1, x2) + tuple(x1.shape[-2:]), x1.dtype


@lowering(aten._cdist_backward.default)
def lower_cdist_backward(grad, x1, x2, p, cdist):
    """torch's subgradients: 0 where the distance is 0 (and, for p < 1, where a coordinate
    difference is 0); for p = inf, every coordinate attaining the maximum."""
    diff = _pairwise_diff(x1, x2)
    g, dist = grad[..., None], cdist[..., None]
    a, sign = jnp.abs(diff), jnp.sign(diff)
    zero = dist == 0
    if p == 0:
        terms = jnp.zeros_like(diff)
    elif p == 1:
        terms = g * sign
    elif p == 2:
        terms = g * diff / dist
    elif p == float("inf"):
        terms = g * sign * (a == dist)
    elif p < 2:
        terms = sign * a ** (p - 1) * g / dist ** (p - 1)
        zero = zero | ((diff == 0) & (p < 1))
    else:
        terms = diff * a ** (p - 2) * g / dist ** (p - 1)
    if p not in (0, 1, float("inf")):
        terms = jnp.where(zero, 0, terms)
    return jnp.sum(terms, axis=-2).astype(x1.dtype)


# ---- histc / histogram ----------------------------------------------------------------
#
# torch's CPU kernel (HistogramKernel.cpp): an element outside [edges[0], edges[-1]] or NaN
# is skipped; otherwise its bin is ``trunc((x - left) * bins / (right - left))``, in the
# input's type (each step rounded to it for the 16-bit types), the last bin keeping its
# right edge. ``histogram`` then corrects that bin against its linspace edges (a binary
# search over the neighbouring three, ``std::upper_bound``); with a tensor of edges it
# searches them all. The edges are torch's linspace: ``start + step * i`` below halfway,
# ``end - step * (steps - 1 - i)`` from there, each one fused multiply-add (one rounding),
# as torch's compiled kernel computes them. Without a range, the range is the data's min
# and max: torch raises if either is not finite, so that case reads one boolean (a barrier
# if the data is pending, as torch's own ``.item()`` synchronizes a GPU). Counts sum in
# float32 for the 16-bit types (torch's per-thread 16-bit sums agree while exact: up to
# 2048 per bin for float16, 256 for bfloat16); weighted 16-bit histograms run eagerly.

_HIST_LIB = torch.library.Library("lazy_runtime", "FRAGMENT")
_HIST_LIB.define("histogram_linear(Tensor x, int bins, float[] range, bool data_range, "
                 "Tensor? weight, bool density, bool histc) -> (Tensor hist, Tensor edges)")
histogram_linear = torch.ops.lazy_runtime.histogram_linear.default
_HALF = HALF_BITS   # (the 16-bit numpy types)


def _histogram_linear_cpu(x, bins, range, data_range, weight, density, histc):
    """The op on the CPU (where it falls back, under ``force_fallback``)."""
    rng = None if data_range else tuple(range)
    if histc:
        lo, hi = rng or (0.0, 0.0)
        # (integers: CUDA's integer histc, the same bins as on exact doubles; see ``histc``)
        counts = torch.histc(x if x.is_floating_point() else x.double(), bins, lo, hi)
        return counts.to(x.dtype), torch.empty(bins + 1, dtype=x.dtype)
    return torch.histogram(x, bins, range=rng, weight=weight, density=density)


_HIST_LIB.impl("histogram_linear", _histogram_linear_cpu, "CPU")


def _all_finite(x) -> bool:
    """One read of a boolean (``item`` would decompose)."""
    return bool(aten._local_scalar_dense.default(torch.isfinite(x).all()))


def _hist_checks(op, x, bins_ok, weight):
    ok = x.dtype in (torch.float32, torch.float64) or (
        x.dtype in D.HALF_TYPES and weight is None)
    if not ok or not bins_ok or (weight is not None and (
            weight.dtype != x.dtype or weight.numel() != x.numel())):
        raise NoLowering(op, "arguments torch refuses (its error), or a weighted 16-bit one")


_HISTC_INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


@decomposition(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    op = aten.histc.default
    if x.dtype in _HISTC_INTS:
        return _histc_int(x, bins, min, max)
    _hist_checks(op, x, bins > 0, None)
    lo, hi = float(min), float(max)
    data = lo == hi and x.numel() > 0
    if not data and lo == hi:
        lo, hi = lo - 1, hi + 1
    if (data and not _all_finite(x)) or not (data or -math.inf < lo < hi < math.inf):
        raise NoLowering(op, "a range torch refuses (its error)")
    return histogram_linear(x, bins, [lo, hi], data, None, False, True)[0]


def _histc_int(x, bins, min, max):
    """``histc`` of integers, as torch's CUDA kernel counts them (its CPU kernel refuses
    them; transformers' MoE layers count tokens per expert this way off the CPU): the
    bounds converted to the type (truncated), the data's own where they are equal, widened
    by one where still equal; element ``v`` in [lo, hi] goes to bin
    ``(v - lo) * bins // (hi - lo)`` in int64 (the last bin keeps ``hi``); counts in the
    input's type."""
    op = aten.histc.default
    lo, hi = (int(float(b)) for b in (min, max))   # (torch compares them in int64)
    if bins <= 0 or not all(-2 ** 63 <= b < 2 ** 63 for b in (lo, hi)):
        raise NoLowering(op, "arguments torch refuses (its error)")
    data = lo == hi and x.numel() > 0
    if not data and lo == hi:
        lo, hi = lo - 1, hi + 1
    if not data and lo > hi:
        raise NoLowering(op, "max below min (torch's error)")
    return histogram_linear(x, bins, [float(lo), float(hi)], data, None, False, True)[0]


@decomposition(aten.histogram.bin_ct)
def histogram(x, bins=100, *, range=None, weight=None, density=False):
    op = aten.histogram.bin_ct
    _hist_checks(op, x, bins > 0 and (range is None or len(range) == 2), weight)
    data = range is None and x.numel() > 0
    lo, hi = (0.0, 1.0) if range is None else map(float, range)
    if x.dtype in D.HALF_TYPES and range is None:
        raise NoLowering(op, "16-bit input without a range (torch's error)")
    if (data and not _all_finite(x)) or not (data or -math.inf < lo <= hi < math.inf):
        raise NoLowering(op, "a range torch refuses (its error)")
    if not data and lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return histogram_linear(x, bins, [lo, hi], data, weight, density, False)


@rule(histogram_linear, multi=True)
def histogram_linear_rule(x, bins, range, data_range, weight, density, histc):
    return [((bins,), x.dtype), ((bins + 1,), x.dtype)]


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _round_odd(h, err):
    """Round to odd of ``h + err`` (``h`` its nearest double): the odd neighbour when inexact."""
    even = (jax.lax.bitcast_convert_type(h, jnp.int64) & 1) == 0
    step = jnp.nextafter(h, jnp.where(err > 0, jnp.inf, -jnp.inf))
    return jnp.where((err != 0) & even, step, h)


def _fma(a, i, c, dt):
    """``c + a * i`` rounded once to ``dt`` (float32 or float64; ``i`` integers below 2**26):
    the product is split exactly (``a`` in halves of 27 and 26 bits), the sum done without
    error and rounded to odd before the last rounding (Boldo and Melquiond's emulated FMA),
    whether or not XLA fuses the arithmetic itself."""
    a, c, i = a.astype(jnp.float64), c.astype(jnp.float64), i.astype(jnp.float64)
    bits = jax.lax.bitcast_convert_type(a, jnp.int64)
    a_hi = jax.lax.bitcast_convert_type(bits & ~((1 << 26) - 1), jnp.float64)
    s, t = _two_sum(c, a_hi * i)
    u, e = _two_sum(t, (a - a_hi) * i)
    v = _round_odd(u, e)
    if dt == jnp.float64:
        return s + v
    w, e2 = _two_sum(s, v)
    return _round_odd(w, e2).astype(dt)


def _linspace(start, end, steps, dt):
    """torch's CPU linspace of ``steps`` values between the ``dt`` scalars (see above)."""
    i = jnp.arange(steps)
    if dt in _HALF:   # c10::Half/BFloat16 arithmetic: each operation rounded (no fusing)
        start, end = start.astype(jnp.float32), end.astype(jnp.float32)
        step = _rounded(_rounded(end - start, dt) / _rounded(jnp.float32(steps - 1), dt), dt)

        def part(base, k, sign):
            return _rounded(base + sign * _rounded(step * _rounded(k.astype(jnp.float32), dt),
                                                   dt), dt)
        return jnp.where(i < steps // 2, part(start, i, 1), part(end, steps - 1 - i, -1)
                         ).astype(dt)
    step = _exact_div(end - start, jnp.asarray(steps - 1, dt))
    return jnp.where(i < steps // 2, _fma(step, i, start, dt),
                     _fma(-step, steps - 1 - i, end, dt))


def _exact_div(a, b):
    """``a / b`` correctly rounded: XLA divides by a broadcast scalar (or a constant) as a
    product with its reciprocal, unless the divisor is opaque to it."""
    return a / jax.lax.optimization_barrier(jnp.broadcast_to(b, jnp.shape(a)))


def _upper_bound(edges, v, lo, hi):
    """libstdc++'s ``std::upper_bound`` over ``edges[lo:hi]`` for each ``v``, step by step
    (so also for unsorted edges)."""
    first, n = lo, hi - lo
    for _ in range(edges.shape[0].bit_length()):
        half = n // 2
        mid = first + half
        right = (n > 0) & ~(v < edges[jnp.clip(mid, 0, edges.shape[0] - 1)])
        first = jnp.where(right, mid + 1, first)
        n = jnp.where(n > 0, jnp.where(right, n - half - 1, half), n)
    return first


def _rounded(v, dt):
    """``v`` (computed in float32) rounded to the 16-bit ``dt``, as each of torch's steps is."""
    return rounded_apart(v, dt)


def _linear_bin(v, left, right, bins, dt):
    """torch's ``(x - left) * bins / (right - left)``, truncated (in ``dt``'s arithmetic)."""
    ct = jnp.float32 if dt in _HALF else dt
    v, left, right = v.astype(ct), left.astype(ct), right.astype(ct)
    nb = _rounded(jnp.asarray(bins, ct), dt)
    q = _rounded(_exact_div(_rounded(_rounded(v - left, dt) * nb, dt),
                            _rounded(right - left, dt)), dt)
    return jnp.clip(jnp.trunc(jnp.where(jnp.isfinite(q), q, 0)), 0, bins).astype(jnp.int64)


def _histogram_sum(v, pos, edges, weight, density, dt):
    """Sum each in-range element's weight into its bin (the last keeps its right edge)."""
    nbins = edges.shape[0] - 1
    valid = (v >= edges[0]) & (v <= edges[-1])
    pos = jnp.clip(jnp.where(pos == nbins, nbins - 1, pos), 0, max(nbins - 1, 0))
    acc = jnp.float32 if dt in _HALF else dt
    w = jnp.ones(v.shape, acc) if weight is None else weight.reshape(-1).astype(acc)
    hist = jnp.zeros((nbins,), acc).at[pos].add(jnp.where(valid, w, 0)).astype(dt)
    if density:
        hist = _exact_div(_exact_div(hist, jnp.sum(hist)), jnp.diff(edges))
    return hist


def _histc_int_counts(v, bins, range, data_range, dt):
    """``_histc_int``'s counts (``v`` flat integers)."""
    v = v.astype(jnp.int64)
    if data_range:
        lo, hi = jnp.min(v), jnp.max(v)
        lo, hi = jnp.where(lo == hi, lo - 1, lo), jnp.where(lo == hi, hi + 1, hi)
    else:
        lo, hi = (jnp.asarray(int(r), jnp.int64) for r in range)
    valid = (v >= lo) & (v <= hi)
    pos = jnp.clip((v - lo) * bins // (hi - lo), 0, bins - 1)
    return jnp.zeros((bins,), jnp.int64).at[pos].add(valid.astype(jnp.int64)).astype(dt)


@lowering(histogram_linear)
def lower_histogram_linear(x, bins, range, data_range, weight, density, histc):
    dt, v = x.dtype, x.reshape(-1)
    if jnp.issubdtype(dt, jnp.integer):   # (``_histc_int``; its edges output is unused)
        return _histc_int_counts(v, bins, range, data_range, dt), jnp.zeros((bins + 1,), dt)
    if data_range:   # the range of the data (in float64, widened when empty), then in dt
        lo, hi = jnp.min(v).astype(jnp.float64), jnp.max(v).astype(jnp.float64)
        pad = jnp.where(lo == hi, 1.0 if histc else 0.5, 0.0)
        start, end = (lo - pad).astype(dt), (hi + pad).astype(dt)
    else:
        start, end = (jnp.asarray(r, jnp.float64).astype(dt) for r in range)
    edges = _linspace(start, end, bins + 1, dt)
    pos = _linear_bin(v, edges[0], edges[-1], bins, dt)
    if not histc:   # histogram: the neighbouring edges decide
        pos = _upper_bound(edges, v, jnp.maximum(pos - 1, 0), jnp.minimum(pos + 2, bins + 1)) - 1
    return _histogram_sum(v, pos, edges, weight, density, dt), edges


@rule(aten.histogram.bins_tensor, multi=True)
def histogram_bins_rule(x, bins, *, weight=None, density=False):
    _hist_checks(aten.histogram.bins_tensor, x,
                 bins.dtype == x.dtype and bins.ndim == 1 and bins.numel() > 1, weight)
    return [((bins.numel() - 1,), x.dtype), (tuple(bins.shape), x.dtype)]


@lowering(aten.histogram.bins_tensor)
def lower_histogram_bins(x, bins, *, weight=None, density=False):
    v = x.reshape(-1)
    pos = _upper_bound(bins, v, jnp.zeros(v.shape, jnp.int64), bins.shape[0]) - 1
    return _histogram_sum(v, pos, bins, weight, density, x.dtype), bins


# ---- segment_reduce -------------------------------------------------------------------
#
# torch's CPU kernel (SegmentReduce.cpp): along ``axis``, consecutive segments of the given
# lengths (or from each offset to the next) reduce from ``initial`` (else 0 for sum and
# mean, 1 for prod, -inf/inf for max/min), NaN sticking for max/min; a mean divides by the
# length, and an empty segment's mean is NaN without ``initial``. The number of segments is
# static (the last dim of lengths, offsets' less one); which segment an element joins is
# data: the number of segment starts at or before its position (a cumsum), on the device.
# torch checks the lengths on the host (here: at the next read, as an index check).

_SEGMENT_REDUCTIONS = ("sum", "mean", "max", "min", "prod")
_SEGMENT_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SEGMENT_SUMS = ("segment_reduce(): Expected all rows of lengths along axis to sum to "
                 "data.size(lengths.dim()-1) when !unsafe.")
_SEGMENT_NEGATIVE = "Expected segment_length >= 0 to be true, but got false."


def _segment_axis(op, data, reduce, lengths, offsets, indices=None) -> int:
    """The number of segments; what torch refuses (its errors) runs eagerly, as does giving
    both lengths and offsets (torch then silently takes the offsets)."""
    given = offsets if offsets is not None else lengths
    if reduce not in _SEGMENT_REDUCTIONS or indices is not None or \
            (lengths is None) == (offsets is None) or data.dtype not in _SEGMENT_FLOATS or \
            given.dtype not in (torch.int32, torch.int64) or not 1 <= given.ndim <= data.ndim:
        raise NoLowering(op, "arguments torch refuses (its error), or both lengths and offsets")
    if offsets is not None and offsets.shape[-1] == 0:
        raise NoLowering(op, "no offsets (torch's error)")
    return given.shape[-1] - (offsets is not None)


def _segment_dim(op, data, given, axis) -> int:
    d = norm_dim(axis, data.ndim)
    if d != given.ndim - 1 or tuple(given.shape[:-1]) != tuple(data.shape[:d]):
        raise NoLowering(op, "axis not the last dim of lengths/offsets, or other batch dims "
                             "(torch's errors)")
    return d


@rule(aten.segment_reduce.default)
def segment_reduce_rule(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                        unsafe=False, initial=None):
    op = aten.segment_reduce.default
    n = _segment_axis(op, data, reduce, lengths, offsets, indices)
    given = offsets if offsets is not None else lengths
    d = _segment_dim(op, data, given, axis)
    if lengths is not None and not unsafe and lengths.numel() == 0:
        raise NoLowering(op, "no lengths to check (torch's error)")
    return tuple(data.shape[:d]) + (n,) + tuple(data.shape[d + 1:]), data.dtype


@rule(aten._segment_reduce_backward.default)
def segment_reduce_backward_rule(grad, output, data, reduce, *, lengths=None, offsets=None,
                                 axis=0, initial=None):
    op = aten._segment_reduce_backward.default
    _segment_axis(op, data, reduce, lengths, offsets)
    _segment_dim(op, data, offsets if offsets is not None else lengths, axis)
    return tuple(data.shape), grad.dtype


def _segments(shape, d, lengths, offsets):
    """For data of ``shape`` reduced along ``d``, seen as [B, N, I]: each position's segment
    id (``-1`` before the first, ``S`` after the last), [B, N]; the segment lengths [B, S]."""
    b, n = math.prod(shape[:d]), shape[d]
    if offsets is None:
        lens = lengths.reshape(b, lengths.shape[-1]).astype(jnp.int64)
        offs = jnp.concatenate([jnp.zeros((b, 1), jnp.int64), jnp.cumsum(lens, axis=1)], axis=1)
    else:
        offs = offsets.reshape(b, offsets.shape[-1]).astype(jnp.int64)
        lens = jnp.diff(offs, axis=1)
    rows = jnp.arange(b)[:, None]
    starts = jnp.zeros((b, n + 1), jnp.int64).at[rows, jnp.clip(offs, 0, n)].add(1)
    return jnp.cumsum(starts[:, :n], axis=1) - 1, lens


def _flat_segments(ids, s):
    """Ids over all batch rows (row-major [B, S]); elements of no segment get ``B * S``,
    which ``jax.ops.segment_*`` drop."""
    b = ids.shape[0]
    inside = (ids >= 0) & (ids < s)
    return jnp.where(inside, ids + s * jnp.arange(b)[:, None], b * s).reshape(-1)


def _segment_initial(initial, reduce, dt, ct):
    """``initial`` as torch converts it (``Scalar::to<scalar_t>``; for the 16-bit types
    through float), else the reduction's identity; in the compute type ``ct``."""
    if initial is None:
        return jnp.asarray({"max": -math.inf, "min": math.inf, "prod": 1.0}.get(reduce, 0.0), ct)
    via = jnp.float32 if dt in _HALF else dt
    return jnp.asarray(float(initial), jnp.float64).astype(via).astype(dt).astype(ct)


def _segment_values(v, seg, num, lens, reduce, initial, dt):
    """The reduction of rows ``v`` [B*N, I] (compute type) into ``num`` segments."""
    init = _segment_initial(initial, reduce, dt, v.dtype)
    if reduce in ("max", "min"):
        ext = jax.ops.segment_max if reduce == "max" else jax.ops.segment_min
        pick = jnp.maximum if reduce == "max" else jnp.minimum
        nan = jax.ops.segment_sum(jnp.isnan(v).astype(jnp.int32), seg, num_segments=num) > 0
        return jnp.where(nan, jnp.nan, pick(init, ext(v, seg, num_segments=num)))
    if reduce == "prod":
        return init * jax.ops.segment_prod(v, seg, num_segments=num)
    total = init + jax.ops.segment_sum(v, seg, num_segments=num)
    if reduce == "sum":
        return total
    lens = lens.reshape(-1, 1)
    empty = init if initial is not None else jnp.nan
    return jnp.where(lens == 0, empty, total / jnp.maximum(lens, 1).astype(v.dtype))


def _segment_rows(x, d):
    """``x`` as [B, N, I] around dim ``d``."""
    s = x.shape
    return x.reshape(math.prod(s[:d]), s[d], math.prod(s[d + 1:]))


@lowering(aten.segment_reduce.default)
def lower_segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                         unsafe=False, initial=None):
    d = norm_dim(axis, data.ndim)
    ids, lens = _segments(data.shape, d, lengths, offsets)
    if offsets is None and not unsafe:
        check(jnp.any(lens < 0), "lengths contains negative value!")
        check(jnp.any(jnp.sum(lens, axis=1) != data.shape[d]), _SEGMENT_SUMS)
    else:   # (the kernel itself refuses a negative length)
        check(jnp.any(lens < 0), _SEGMENT_NEGATIVE)
    x = _segment_rows(data, d)
    b, n, inner = x.shape
    s = lens.shape[1]
    ct = jnp.float32 if data.dtype in _HALF else data.dtype
    out = _segment_values(x.reshape(b * n, inner).astype(ct), _flat_segments(ids, s), b * s,
                          lens, reduce, initial, data.dtype)
    return out.astype(data.dtype).reshape(data.shape[:d] + (s,) + data.shape[d + 1:])


def _segmented_cumprod(v, first):
    """Inclusive running product along axis 1, restarting where ``first``."""
    def combine(a, b):
        return jnp.where(b[1], b[0], a[0] * b[0]), a[1] | b[1]
    return jax.lax.associative_scan(combine, (v, jnp.broadcast_to(first, v.shape)), axis=1)[0]


def _exclusive_segment_prod(x, ids):
    """For each element [B, N, I], the product of the others of its segment (in two
    running products: the elements before it and those after it)."""
    def before(v, ids):
        first = jnp.concatenate([jnp.ones_like(ids[:, :1], bool), ids[:, 1:] != ids[:, :-1]],
                                axis=1)[:, :, None]
        shifted = jnp.concatenate([jnp.ones_like(v[:, :1]), v[:, :-1]], axis=1)
        return _segmented_cumprod(jnp.where(first, 1, shifted), first)
    after = jnp.flip(before(jnp.flip(x, 1), jnp.flip(ids, 1)), 1)
    return before(x, ids) * after


@lowering(aten._segment_reduce_backward.default)
def lower_segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None,
                                  axis=0, initial=None):
    """torch's CPU backward: sum passes the gradient, mean divides it by the length; max and
    min give it to every element equal to the result (or NaN), divided among them only
    where it is positive (as torch's kernel does); prod gives ``grad * out / x``, or for a
    zero or NaN element ``grad`` times the product of the others and ``initial``."""
    d = norm_dim(axis, data.ndim)
    ids, lens = _segments(data.shape, d, lengths, offsets)
    ct = jnp.float32 if data.dtype in _HALF else data.dtype
    x = _segment_rows(data, d).astype(ct)
    b, n, inner = x.shape
    s = lens.shape[1]
    if b * n * inner == 0 or s == 0:
        return jnp.zeros(data.shape, grad.dtype)
    rows, at = jnp.arange(b)[:, None], jnp.clip(ids, 0, s - 1)

    def spread(t):   # [B, S, I] -> each element's segment's value [B, N, I]
        return t.reshape(b, s, inner)[rows, at]

    g = spread(grad.astype(ct))
    if reduce == "sum":
        r = g
    elif reduce == "mean":
        r = g / jnp.maximum(lens, 1).astype(ct)[rows, at][:, :, None]
    elif reduce in ("max", "min"):
        hit = jnp.isnan(x) | (x == spread(output.astype(ct)))
        r = jnp.where(hit, g, 0)
        count = jax.ops.segment_sum(hit.reshape(b * n, inner).astype(ct),
                                    _flat_segments(ids, s), num_segments=b * s)
        count = spread(count)
        r = jnp.where((count >= 2) & (r > 0), r / count, r)
    else:
        init = _segment_initial(initial, "prod", data.dtype, ct)
        others = init * _exclusive_segment_prod(x, ids)
        r = jnp.where(jnp.isnan(x) | (x == 0), g * others, g * spread(output.astype(ct)) / x)
    inside = ((ids >= 0) & (ids < s))[:, :, None]
    return jnp.where(inside, r, 0).astype(grad.dtype).reshape(data.shape)


# ---- linspace / logspace with tensor ends -----------------------------------------------
#
# torch reads 0-d tensor ends on the host (``item()``) and runs its Scalar kernel. Here they
# stay on the device, and the values are that kernel's: linspace's are ``_linspace``'s (in
# two halves, each value one fused multiply-add), integers computed in float64 the same way
# and truncated. logspace computes ``pow(base, start + step * i)`` in float64 (two
# roundings: that file is built without FMA) and stores it in the type (integers
# truncated). XLA's float64 pow of a base that is a runtime value agreed with libm's bit
# for bit (5 * 10^4 exponents, twelve bases, integers and their neighbours among them); a
# constant power-of-two base it rewrites (one unit in the last place off for 0.1% of the
# exponents), so the base is a runtime input (a float argument: ``dynamic_scalars``; the
# default 10 stays a constant, bit for bit too). An end that does not fit the type raises
# torch's error at the next read.

_SPACE_INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_SCALAR_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
                 torch.bfloat16: "c10::BFloat16", torch.uint8: "uint8_t", torch.int8: "int8_t",
                 torch.int16: "int16_t", torch.int32: "int", torch.int64: "int64_t"}


def _space_rule(op, start, end, steps, dtype):
    for v in (start, end):
        if isinstance(v, torch.Tensor) and (v.ndim != 0 or v.dtype.is_complex) or \
                isinstance(v, complex):
            raise NoLowering(op, "an end of more dims (torch's error), or complex")
    out = dtype if dtype is not None else torch.get_default_dtype()
    if steps < 0 or out not in _SEGMENT_FLOATS + _SPACE_INTS:
        raise NoLowering(op, f"{out} values or negative steps (torch's error), or complex")
    return (steps,), out


@rule(aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar, aten.linspace.Scalar_Tensor)
def linspace_rule(start, end, steps, *, dtype=None, layout=None, device=None,
                  pin_memory=None):
    return _space_rule(aten.linspace.Tensor_Tensor, start, end, steps, dtype)


@rule(aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar, aten.logspace.Scalar_Tensor,
      dynamic_scalars=True)
def logspace_rule(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
                  pin_memory=None):
    return _space_rule(aten.logspace.Tensor_Tensor, start, end, steps, dtype)


def _scalar_to(v, dt, torch_dt):
    """``Scalar::to<scalar_t>`` of a 0-d value: 16-bit types through float, integers
    truncated; a value out of the type's range raises torch's error at the next read."""
    v = jnp.asarray(v)
    wide = v.astype(jnp.float64)
    if jnp.issubdtype(dt, jnp.integer):
        info = jnp.iinfo(dt)
        bad = jnp.isnan(wide) | (wide < info.min) | (wide > info.max)
    else:
        bad = jnp.isfinite(wide) & (jnp.abs(wide) > float(jnp.finfo(dt).max))
    check(bad, f"value cannot be converted to type {_SCALAR_NAMES[torch_dt]} without overflow")
    return (v.astype(jnp.float32) if dt in _HALF else v).astype(dt)


def _int_linspace(start, end, steps, dt):
    """torch's integer linspace: a float64 step, each value one fused multiply-add from
    its half's end, truncated."""
    s, e = start.astype(jnp.float64), end.astype(jnp.float64)
    step = _exact_div(e - s, jnp.asarray(steps - 1, jnp.float64))
    i = jnp.arange(steps)
    v = jnp.where(i < steps // 2, _fma(step, i, s, jnp.float64),
                  _fma(-step, steps - 1 - i, e, jnp.float64))
    return v.astype(dt)


@lowering(aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar,
          aten.linspace.Scalar_Tensor, ctx=True)
def lower_linspace(ctx, start, end, steps, *, dtype=None, layout=None, device=None,
                   pin_memory=None):
    dt = jnp.dtype(jdt(ctx.dtype))
    if steps == 0:
        return jnp.zeros((0,), dt)
    s = _scalar_to(start, dt, ctx.dtype)
    if steps == 1:   # torch fills with start
        return s.reshape(1)
    e = _scalar_to(end, dt, ctx.dtype)
    if jnp.issubdtype(dt, jnp.integer):
        return _int_linspace(s, e, steps, dt)
    if dt in _HALF:
        return _linspace(s, e, steps, dt)
    # (``_fma`` splits finite values; with an infinite end, plain arithmetic gives torch's
    # infinities and NaNs)
    i = jnp.arange(steps)
    step = (e - s) / jnp.asarray(steps - 1, dt)
    plain = jnp.where(i < steps // 2, s + step * i, e - step * (steps - 1 - i))
    return jnp.where(jnp.isfinite(step), _linspace(s, e, steps, dt), plain)


def _rounded_to(v, dt):
    """A float64 value stored into ``dt`` (the 16-bit types through float, as C++ does;
    integers truncated)."""
    return (v.astype(jnp.float32) if dt in _HALF else v).astype(dt)


@lowering(aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar,
          aten.logspace.Scalar_Tensor, ctx=True)
def lower_logspace(ctx, start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
                   pin_memory=None):
    dt = jnp.dtype(jdt(ctx.dtype))
    base = jnp.asarray(base, jnp.float64)
    if steps == 0:
        return jnp.zeros((0,), dt)
    if steps == 1:   # torch fills with pow(base, start), start taken as a double
        v = jnp.power(base, jnp.asarray(start).astype(jnp.float64))
        return _scalar_to(v, dt, ctx.dtype).reshape(1)
    s, e = _scalar_to(start, dt, ctx.dtype), _scalar_to(end, dt, ctx.dtype)
    if jnp.issubdtype(dt, jnp.integer):   # (C++ subtracts small integers as int)
        diff = e.astype(jnp.int64) - s.astype(jnp.int64)
    elif dt in _HALF:
        diff = _rounded(e.astype(jnp.float32) - s.astype(jnp.float32), dt)
    else:
        diff = e - s
    step = _exact_div(diff.astype(jnp.float64), jnp.asarray(steps - 1, jnp.float64))
    i = jnp.arange(steps)
    low = s.astype(jnp.float64) + _rounded_product(step, i)
    high = e.astype(jnp.float64) - _rounded_product(step, steps - 1 - i)
    return _rounded_to(jnp.power(base, jnp.where(i < steps // 2, low, high)), dt)


def _rounded_product(a, i):
    """``a * i`` rounded to float64 (``i`` integers below 2**26), as a value XLA cannot fuse
    into a following addition (it contracts ``s + a * i`` into one fused multiply-add,
    which torch's logspace does not): the sum of two exact products (``a`` in halves of 27
    and 26 bits, as in ``_fma``), rounded once however it is evaluated."""
    a, i = a.astype(jnp.float64), i.astype(jnp.float64)
    bits = jax.lax.bitcast_convert_type(a, jnp.int64)
    a_hi = jax.lax.bitcast_convert_type(bits & ~((1 << 26) - 1), jnp.float64)
    exact = a_hi * i + (a - a_hi) * i
    return jnp.where(jnp.isfinite(a), exact, a * i)
