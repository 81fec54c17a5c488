"""Layout ops: views (as IR ops: view, permute, slice, select, expand, diagonal,
as_strided, unfold), their scatters (how a write through a view reaches its base), and
copying shape ops (cat, stack, repeat, pad, flip, indexing, gather/scatter, tril)."""

from __future__ import annotations

import math

import numpy as np
import jax.numpy as jnp
import torch
import torch._decomp
from jax import lax

from .. import dtypes as D
from ..errors import NoLowering
from .common import cast, check_index, is_array, jdt, norm_dim, sf
from .elementwise import number_fits
from .registry import check, decomposition, lowering, rule

aten = torch.ops.aten


def _shape(x):
    return tuple(x.shape)


# ---- views ----------------------------------------------------------------------------


@rule(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default, pure=True)
def view_rule(x, size, stride=None):
    return sf.reshape_shape(_shape(x), tuple(size)), x.dtype


@lowering(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default, ctx=True)
def lower_view(ctx, x, size, stride=None):
    return jnp.reshape(x, ctx.shape)


@rule(aten.unsqueeze.default)
def unsqueeze_rule(x, dim):
    return sf.unsqueeze_shape(_shape(x), dim), x.dtype


@rule(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def squeeze_rule(x, dim=None):
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and x.ndim == 0:
        return (), x.dtype
    return sf.squeeze_shape(_shape(x), dim), x.dtype


@rule(aten.t.default)
def t_rule(x):
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return _shape(x)[::-1], x.dtype


@rule(aten.transpose.int)
def transpose_rule(x, d0, d1):
    if x.ndim == 0:
        return (), x.dtype
    return sf.transpose_shape(_shape(x), d0, d1), x.dtype


@rule(aten.permute.default)
def permute_rule(x, dims):
    return sf.permute_shape(_shape(x), tuple(dims)), x.dtype


@lowering(aten.permute.default)
def lower_permute(x, dims):
    return jnp.transpose(x, tuple(d % max(x.ndim, 1) for d in dims))


@rule(aten.expand.default)
def expand_rule(x, size, *, implicit=False):
    return sf.expand_shape(_shape(x), tuple(size)), x.dtype


@lowering(aten.expand.default, ctx=True)
def lower_expand(ctx, x, size, *, implicit=False):
    return jnp.broadcast_to(x, ctx.shape)


@rule(aten.select.int)
def select_rule(x, dim, index):
    s = _shape(x)
    d = norm_dim(dim, len(s))
    if not -s[d] <= index < s[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(s)} at "
                         f"dimension {dim}")
    return s[:d] + s[d + 1:], x.dtype


@lowering(aten.select.int)
def lower_select(x, dim, index):
    d = norm_dim(dim, x.ndim)
    return lax.index_in_dim(x, index % x.shape[d], d, keepdims=False)


@rule(aten.slice.Tensor)
def slice_rule(x, dim=0, start=None, end=None, step=1):
    s = _shape(x)
    d = norm_dim(dim, len(s))
    out = list(s)
    out[d] = sf.narrow_dim(s[d], start, end, step)
    return tuple(out), x.dtype


def _slice_bounds(size, start, end):
    start, end, _ = slice(start, end, 1).indices(size)
    return start, max(start, end)


@lowering(aten.slice.Tensor)
def lower_slice(x, dim=0, start=None, end=None, step=1):
    d = norm_dim(dim, x.ndim)
    lo, hi = _slice_bounds(x.shape[d], start, end)
    return lax.slice_in_dim(x, lo, hi, step, axis=d)


@rule(aten.diagonal.default)
def diagonal_rule(x, offset=0, dim1=0, dim2=1):
    s = _shape(x)
    d1, d2 = norm_dim(dim1, len(s)), norm_dim(dim2, len(s))
    n = max(0, min(s[d1] + min(offset, 0), s[d2] - max(offset, 0)))
    return tuple(v for i, v in enumerate(s) if i not in (d1, d2)) + (n,), x.dtype


@lowering(aten.diagonal.default)
def lower_diagonal(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, norm_dim(dim1, x.ndim), norm_dim(dim2, x.ndim))


@rule(aten.as_strided.default)
def as_strided_rule(x, size, stride, storage_offset=None):
    return tuple(size), x.dtype


def _strided_index(size, stride, offset):
    idx = np.full(tuple(size), offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return idx


@lowering(aten.as_strided.default)
def lower_as_strided(x, size, stride, storage_offset=None):
    idx = _strided_index(size, stride, storage_offset or 0)
    return jnp.take(x.reshape(-1), jnp.asarray(idx), mode="clip")


def chunking(shape, p, size, stride, offset):
    """(frames axis, window, step, labels) where ``as_strided(size, stride, offset)`` of
    a row-major tensor of ``shape`` cuts its dim ``p`` into windows of ``window`` every
    ``step`` and reads every other dim whole, regrouped as some of the output's dims
    (Longformer's overlapping chunks of 2w every w tokens): the tensor viewed as (A, T,
    R) (the dims before p, p's, those after), its unfold along T is (A, frames, R,
    window), and ``labels`` name, in that order, the output axis each of its dims, A and
    R split, becomes; else None."""
    A, L, R = math.prod(shape[:p]), shape[p], math.prod(shape[p + 1:])
    dims = [(s, j) for j, (n, s) in enumerate(zip(size, stride)) if n != 1]
    outer = sorted((s, j) for s, j in dims if s >= L * R and s % (L * R) == 0)
    inner = sorted((s, j) for s, j in dims if s < R)
    along = [(s, j) for s, j in dims if (s, j) not in outer + inner]
    windows = [j for s, j in along if s == R]
    frames = [(s // R, j) for s, j in along if s != R and s % R == 0]
    if offset or L < 2 or len(windows) != 1 or len(frames) != 1 or len(along) != 2:
        return None
    (step, f), w = frames[0], windows[0]
    if size[w] > L or size[f] != (L - size[w]) // step + 1:
        return None
    for group, first, total in ((outer, L * R, A * L * R), (inner, 1, R)):
        expect = first
        for s, j in group:   # (each a whole block: strides of a row-major split)
            if s != expect:
                return None
            expect *= size[j]
        if expect != total:
            return None
    labels = [j for _, j in reversed(outer)] + [f] + [j for _, j in reversed(inner)] + [w]
    return f, size[w], step, tuple(labels)


def as_chunks(base, size, stride, offset):
    """``base.as_strided(size, stride, offset)`` (base contiguous, at offset 0 of its
    storage) as a view made by reshape, unfold and permute, where it is a ``chunking``
    of one of base's dims; else None. Its gradient is then unfold's, not as_strided's
    (a scatter into the flattened storage, which no padded layout holds)."""
    for p in range(base.dim()):
        how = chunking(tuple(base.shape), p, tuple(size), tuple(stride), offset)
        if how is not None:
            break
    else:
        return None
    _, window, step, labels = how
    shape = tuple(base.shape)
    rows = base.reshape(math.prod(shape[:p]), shape[p], math.prod(shape[p + 1:]))
    u = rows.unfold(1, window, step).reshape([size[j] for j in labels])
    return u.permute(sorted(range(len(labels)), key=lambda k: labels[k])).reshape(size)


@rule(aten.unfold.default)
def unfold_rule(x, dim, size, step):
    s = _shape(x)
    if not s:
        return (size,), x.dtype
    d = norm_dim(dim, len(s))
    out = list(s)
    out[d] = (s[d] - size) // step + 1
    return tuple(out) + (size,), x.dtype


@lowering(aten.unfold.default)
def lower_unfold(x, dim, size, step):
    if x.ndim == 0:
        return x.reshape(1)
    d = norm_dim(dim, x.ndim)
    n = (x.shape[d] - size) // step + 1
    idx = np.arange(n)[:, None] * step + np.arange(size)[None, :]
    g = jnp.take(x, jnp.asarray(idx), axis=d)  # [..., n, size, ...]
    return jnp.moveaxis(g, d + 1, -1)


@rule(aten.unfold_backward.default)
def unfold_backward_rule(grad, input_sizes, dim, size, step):
    return tuple(input_sizes), grad.dtype


@lowering(aten.unfold_backward.default)
def lower_unfold_backward(grad, input_sizes, dim, size, step):
    """Each window's gradient added back at the positions it was cut from (windows
    overlap where ``step < size``)."""
    sizes = tuple(input_sizes)
    if not sizes:
        return grad.reshape(())
    d = norm_dim(dim, len(sizes))
    n = grad.shape[d]
    idx = (np.arange(n)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    g = jnp.moveaxis(grad, -1, d + 1)   # [..., n, size, ...]
    g = g.reshape(g.shape[:d] + (n * size,) + g.shape[d + 2:])
    out = jnp.zeros(sizes, grad.dtype)
    return out.at[(slice(None),) * d + (jnp.asarray(idx),)].add(g, mode="drop")


@rule(aten.view.dtype)
def view_dtype_rule(x, dtype):
    """``x.view(dtype)``: the same bits read as another dtype of the same size (a
    different size changes the shape; bool and complex values are not reinterpreted)."""
    if dtype == x.dtype:
        return _shape(x), dtype
    odd = (torch.bool, torch.complex64, torch.complex128)
    if dtype.itemsize != x.dtype.itemsize or x.dtype in odd or dtype in odd:
        raise NoLowering(aten.view.dtype, f"{x.dtype} viewed as {dtype}")
    return _shape(x), dtype


@lowering(aten.view.dtype)
def lower_view_dtype(x, dtype):
    want = jdt(dtype)
    return x if x.dtype == want else lax.bitcast_convert_type(x, want)


@rule(aten.split.Tensor, multi=True)
def split_rule(x, split_size, dim=0):
    return [(s, x.dtype) for s in sf.split_shapes(_shape(x), split_size, dim)]


@rule(aten.split_with_sizes.default, multi=True)
def split_with_sizes_rule(x, split_sizes, dim=0):
    return [(s, x.dtype) for s in sf.split_shapes(_shape(x), list(split_sizes), dim)]


@rule(aten.unbind.int, multi=True)
def unbind_rule(x, dim=0):
    s = _shape(x)
    d = norm_dim(dim, len(s))
    return [(s[:d] + s[d + 1:], x.dtype) for _ in range(s[d])]


# ---- scatters (writes through views) ----------------------------------------------------


@rule(aten.slice_scatter.default, aten.select_scatter.default, aten.diagonal_scatter.default,
      aten.as_strided_scatter.default)
def scatter_view_rule(x, src, *args, **kwargs):
    return _shape(x), x.dtype


@lowering(aten.slice_scatter.default)
def lower_slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    d = norm_dim(dim, x.ndim)
    lo, hi = _slice_bounds(x.shape[d], start, end)
    idx = [slice(None)] * x.ndim
    idx[d] = slice(lo, hi, step)
    return x.at[tuple(idx)].set(src.astype(x.dtype))


@lowering(aten.select_scatter.default)
def lower_select_scatter(x, src, dim, index):
    d = norm_dim(dim, x.ndim)
    idx = [slice(None)] * x.ndim
    idx[d] = index % x.shape[d]
    return x.at[tuple(idx)].set(src.astype(x.dtype))


@lowering(aten.diagonal_scatter.default)
def lower_diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    d1, d2 = norm_dim(dim1, x.ndim), norm_dim(dim2, x.ndim)
    n = src.shape[-1]
    i = np.arange(n) + max(-offset, 0)
    j = np.arange(n) + max(offset, 0)
    moved = jnp.moveaxis(x, (d1, d2), (-2, -1))
    moved = moved.at[..., i, j].set(src.astype(x.dtype))
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))


@lowering(aten.as_strided_scatter.default)
def lower_as_strided_scatter(x, src, size, stride, storage_offset=None):
    idx = _strided_index(size, stride, storage_offset or 0)
    flat = x.reshape(-1).at[jnp.asarray(idx.reshape(-1))].set(src.reshape(-1).astype(x.dtype))
    return flat.reshape(x.shape)


# ---- copying shape ops ------------------------------------------------------------------


@rule(aten.cat.default, pure=True)
def cat_rule(tensors, dim=0):
    shapes = [_shape(t) for t in tensors]
    return sf.cat_shape(shapes, dim), D.result_type(*tensors)


@lowering(aten.cat.default, ctx=True)
def lower_cat(ctx, tensors, dim=0):
    ts = [t.astype(jdt(ctx.dtype)) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    return jnp.concatenate(ts, axis=norm_dim(dim, ts[0].ndim))


@rule(aten.stack.default, pure=True)
def stack_rule(tensors, dim=0):
    return sf.stack_shape([_shape(t) for t in tensors], dim), D.result_type(*tensors)


@lowering(aten.stack.default, ctx=True)
def lower_stack(ctx, tensors, dim=0):
    ts = [t.astype(jdt(ctx.dtype)) for t in tensors]
    return jnp.stack(ts, axis=norm_dim(dim, ts[0].ndim + 1))


@rule(aten.repeat.default, pure=True)
def repeat_rule(x, repeats):
    return sf.repeat_shape(_shape(x), tuple(repeats)), x.dtype


@lowering(aten.repeat.default)
def lower_repeat(x, repeats):
    repeats = tuple(repeats)
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, repeats)


@rule(aten.repeat_interleave.Tensor)
def repeat_interleave_rule(repeats, *, output_size=None):
    """The indices ``repeat_interleave`` repeats (``x.repeat_interleave(r, dim)`` selects with
    them): a static shape only where ``output_size`` is given; without it the length is
    the repeats' sum, which ``dispatch._repeat_interleave`` reads and passes as
    ``output_size``."""
    op = aten.repeat_interleave.Tensor
    if repeats.ndim != 1 or repeats.dtype not in (torch.int32, torch.int64):
        raise NoLowering(op, "repeats not a 1-d int32/int64 tensor (torch's error)")
    if repeats.numel() == 0:   # (torch ignores output_size then)
        return (0,), repeats.dtype
    if output_size is None or output_size < 0:
        raise NoLowering(op, "no output_size: the length is the repeats' sum (data)")
    return (output_size,), repeats.dtype


@lowering(aten.repeat_interleave.Tensor, ctx=True)
def lower_repeat_interleave(ctx, repeats, *, output_size=None):
    """Position j takes the index of the first repeat whose running sum exceeds j; torch's
    checks on the sum and the signs raise at the next read."""
    n = ctx.shape[0]
    if repeats.size == 0:
        return jnp.zeros((0,), repeats.dtype)
    ends = jnp.cumsum(repeats.astype(jnp.int64))
    check(ends[-1] != n, "allocated size does not match required size")
    check(jnp.any(repeats < 0), "repeats can not be negative")
    return jnp.searchsorted(ends, jnp.arange(n, dtype=jnp.int64), side="right"
                            ).astype(repeats.dtype)


@rule(aten.flip.default, pure=True)
def flip_rule(x, dims):
    return _shape(x), x.dtype


@lowering(aten.flip.default)
def lower_flip(x, dims):
    return jnp.flip(x, tuple(norm_dim(d, x.ndim) for d in dims))


@rule(aten.roll.default, pure=True)
def roll_rule(x, shifts, dims=()):
    return _shape(x), x.dtype


@lowering(aten.roll.default)
def lower_roll(x, shifts, dims=()):
    if not dims:
        return jnp.roll(x.reshape(-1), tuple(shifts)).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), tuple(norm_dim(d, x.ndim) for d in dims))


@rule(aten.constant_pad_nd.default, pure=True)
def pad_rule(x, pad, value=0):
    return sf.pad_shape(_shape(x), tuple(pad)), x.dtype


@lowering(aten.constant_pad_nd.default)
def lower_pad(x, pad, value=0):
    cfg = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        cfg[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), cfg)


@rule(aten.tril.default, aten.triu.default, pure=True)
def tril_rule(x, diagonal=0):
    return _shape(x), x.dtype


@lowering(aten.tril.default)
def lower_tril(x, diagonal=0):
    return jnp.tril(x, diagonal)


@lowering(aten.triu.default)
def lower_triu(x, diagonal=0):
    return jnp.triu(x, diagonal)


# ---- indexing ---------------------------------------------------------------------------


def _index_shape(shape, indices):
    idx = list(indices) + [None] * (len(shape) - len(indices))
    for i in idx:
        if i is not None and i.dtype in (torch.bool, torch.uint8):
            raise NoLowering(aten.index.Tensor, "boolean mask index (data-dependent shape)")
    pos = [k for k, i in enumerate(idx) if i is not None]
    bshape = sf.broadcast_shapes(*[_shape(idx[k]) for k in pos])
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    rest_before = [shape[k] for k in range(len(shape)) if idx[k] is None and k < pos[0]]
    rest_after = [shape[k] for k in range(len(shape)) if idx[k] is None and k > pos[0]]
    if adjacent:
        return tuple(rest_before) + tuple(bshape) + tuple(rest_after)
    rest = [shape[k] for k in range(len(shape)) if idx[k] is None]
    return tuple(bshape) + tuple(rest)


@rule(aten.index.Tensor, pure=True)
def index_rule(x, indices):
    _index_dtypes(aten.index.Tensor, indices)
    return _index_shape(_shape(x), indices), x.dtype


# torch's "tensors used as indices must be long, int, byte or bool tensors"
_TENSOR_INDEX_DTYPES = (torch.int64, torch.int32, torch.uint8, torch.bool)
# the dtypes torch takes for the index of gather, scatter, index_select, index_add
_INDEX_DTYPES = (torch.int32, torch.int64)


def _index_dtypes(op, indices) -> None:
    for i in indices:
        if i is not None and i.dtype not in _TENSOR_INDEX_DTYPES:
            raise NoLowering(op, "an index tensor of another dtype (torch's error)")


def _jnp_index(indices, ndim):
    return tuple(slice(None) if i is None else i for i in indices) + \
        (slice(None),) * (ndim - len(indices))


def _check_indices(op: str, x, indices) -> None:
    """Integer index tensors (one per leading dim, None for a full one): in bounds,
    negative ones counting from the end."""
    for d, i in enumerate(indices):
        if i is not None:
            check_index(i, x.shape[d], _out_of_bounds(op, d, x.shape[d]), wraps=True)


def _out_of_bounds(op: str, dim: int, size: int) -> str:
    return f"{op}: index out of bounds for dimension {dim} with size {size}"


@lowering(aten.index.Tensor)
def lower_index(x, indices):
    _check_indices("index", x, indices)
    return x[_jnp_index(indices, x.ndim)]


@rule(aten.index_put.default, pure=True)
def index_put_rule(x, indices, values, accumulate=False):
    _index_dtypes(aten.index_put.default, indices)
    if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
        mask_position(x, indices, values, accumulate, per_element=True)
    elif values.dtype != x.dtype:
        raise NoLowering(aten.index_put.default, "source and destination dtypes differ "
                                                 "(torch's error)")
    return _shape(x), x.dtype


def mask_position(x, indices, values, accumulate, per_element: bool = False) -> int:
    """Where index_put's one boolean mask starts, when the write needs no count of the
    elements it selects (then it is a ``where``): one value (torch's ``masked_fill``, any
    dtype), or values of x's dtype broadcasting over the selected elements. With
    ``per_element`` also values one per selected element of a leading mask
    (``per_element_count``: a scatter, its count checked on the device). Other values
    per element, and what torch refuses (its errors; its deprecated uint8 masks), run
    eagerly."""
    op = aten.index_put.default
    given = [k for k, i in enumerate(indices) if i is not None]
    if len(given) != 1 or indices[given[0]].dtype != torch.bool:
        raise NoLowering(op, "a boolean mask beside other indices, or a uint8 mask")
    shape, p = _shape(x), given[0]
    mask = _shape(indices[p])
    if not mask or tuple(shape[p:p + len(mask)]) != tuple(mask):
        raise NoLowering(op, "a 0-d mask, or a mask shape other than the indexed dims' "
                             "(torch's errors)")
    if len(indices) == 1 and values.numel() == 1 and not accumulate:
        return p
    if values.dtype != x.dtype:
        raise NoLowering(op, "source and destination dtypes differ (torch's error)")
    selected = tuple(shape[:p]) + (None,) + tuple(shape[p + len(mask):])  # None: the count
    v = _shape(values)
    if len(v) > len(selected):
        raise NoLowering(op, "values of more dims than the indexing result (torch's error)")
    if per_element and per_element_count(shape, p, mask, v) is not None:
        return p
    for want, got in zip(selected[len(selected) - len(v):], v):
        if got != 1 and (want is None or got != want):
            raise NoLowering(op, "values per selected element beside other indexed dims, or "
                                 "not broadcastable (torch's error)")
    return p


def per_element_count(x_shape, p, mask_shape, v_shape):
    """The number of values of a boolean-mask write over x's leading dims that gives one
    value per selected element (``x[mask] = v``, and ``x[mask]``'s gradient): v's first
    dim, its others x's dims after the mask (or 1). None for any other write. The count
    the mask selects is data: the lowering checks it against this one."""
    trailing = tuple(x_shape[len(mask_shape):])
    if p != 0 or len(v_shape) != 1 + len(trailing) or v_shape[0] == 1:
        return None
    if any(g != 1 and g != w for g, w in zip(v_shape[1:], trailing)):
        return None
    return v_shape[0]


@lowering(aten.index_put.default)
def lower_index_put(x, indices, values, accumulate=False):
    given = [k for k, i in enumerate(indices) if i is not None]
    if len(given) == 1 and indices[given[0]].dtype == jnp.bool_:
        return _mask_put(x, given[0], indices[given[0]], values, accumulate)
    _check_indices("index_put", x, indices)
    return put_at(x, indices, values, accumulate)


def put_at(x, indices, values, accumulate):
    """``x[indices] = values`` (``+=`` with ``accumulate``) for checked integer index
    tensors, one per leading dim (None for a full one)."""
    idx = _jnp_index(indices, x.ndim)
    values = values.astype(x.dtype)
    return _add_at(x.at[idx], values) if accumulate else x.at[idx].set(values)


def mask_write_shapes(x_shape, p, mask_shape, v_shape) -> tuple:
    """(mask shape, values shape) that broadcast against x for a boolean-mask write over
    dims p.. (see ``mask_position``): the mask gains x's trailing dims, the values one
    axis per mask dim in place of the selection's count axis."""
    trailing = len(x_shape) - p - len(mask_shape)
    mask = tuple(mask_shape) + (1,) * trailing
    if math.prod(v_shape) == 1:
        return mask, ()
    full = (1,) * (p + 1 + trailing - len(v_shape)) + tuple(v_shape)
    return mask, full[:p] + (1,) * len(mask_shape) + full[p + 1:]


def _mask_put(x, p, mask, values, accumulate):
    """index_put with a boolean mask over dims p.. : a ``where``; with one value per
    selected element, ``mask_rows_put``."""
    k = per_element_count(x.shape, p, mask.shape, values.shape)
    if k is not None:
        return mask_rows_put(x, mask, values, accumulate, k)
    m, v = mask_write_shapes(x.shape, p, mask.shape, values.shape)
    v = values.astype(x.dtype).reshape(v)
    if accumulate:
        v = jnp.logical_or(x, v) if x.dtype == jnp.bool_ else x + v
    return jnp.where(mask.reshape(m), v, x)


def mask_rows_put(x, mask, values, accumulate, count):
    """``x[mask] = values`` (or ``+=``), one row of values per selected element of a mask
    over x's leading dims: a scatter to the mask's true positions in row-major order
    (torch's order), checked to be ``count`` (traced where values' rows are padded: rows
    past it are padding, and land nowhere)."""
    rows_in = values.shape[0]
    flat = mask.reshape(-1)
    check(jnp.sum(flat, dtype=jnp.int64) != count,
          "index_put: shape mismatch: value tensor cannot be broadcast to the indexing "
          "result (the mask selects another number of elements than the values' rows)")
    rows = jnp.nonzero(flat, size=rows_in, fill_value=flat.shape[0])[0]
    trailing = x.shape[mask.ndim:]
    xf = x.reshape((flat.shape[0],) + trailing)
    v = jnp.broadcast_to(values.astype(x.dtype), (rows_in,) + trailing)
    at = xf.at[rows]
    out = _add_at(at, v, "drop") if accumulate else at.set(v, mode="drop")
    return out.reshape(x.shape)


@rule(aten.nonzero_static.default)
def nonzero_static_rule(x, *, size, fill_value=-1):
    if size < 0:
        raise NoLowering(aten.nonzero_static.default, "a negative size (torch's error)")
    return (size, len(_shape(x))), torch.int64


@lowering(aten.nonzero_static.default)
def lower_nonzero_static(x, *, size, fill_value=-1):
    """The first ``size`` true positions of ``x`` in row-major order, one row each, rows
    past its count ``fill_value``: a static shape, unlike ``nonzero``'s."""
    if x.ndim == 0:   # (torch: no columns)
        return jnp.zeros((size, 0), jnp.int64)
    found = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(found, axis=1).astype(jnp.int64)


@rule(aten.masked_scatter.default)
def masked_scatter_rule(x, mask, source):
    if mask.dtype != torch.bool or source.dtype != x.dtype:
        raise NoLowering(aten.masked_scatter.default, "a non-bool mask or another source "
                                                      "dtype (torch's errors)")
    return sf.broadcast_shapes(_shape(x), _shape(mask)), x.dtype


def _scatter_positions(mask, shape):
    """The flattened mask broadcast to ``shape``, and for each position the element of the
    source it takes: masked positions number the source's elements in row-major order."""
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    return m, jnp.cumsum(m, dtype=jnp.int64) - 1


@lowering(aten.masked_scatter.default)
def lower_masked_scatter(x, mask, source):
    """x with the masked positions taking source's elements in order (a static shape: a
    running count of the mask picks each one, as multimodal models merge image features
    into token embeddings)."""
    return masked_scatter_from(x, mask, source, source.size)


def masked_scatter_from(x, mask, source, available):
    """``lower_masked_scatter`` from the first ``available`` elements of source (traced
    where source's leading dim is padded: the padding is its tail)."""
    shape = jnp.broadcast_shapes(x.shape, mask.shape)
    m, pos = _scatter_positions(mask, shape)
    flat = source.reshape(-1)
    check(pos[-1:] >= available, "Number of elements of source < number of ones in mask")
    if flat.size == 0:
        return jnp.broadcast_to(x, shape)
    taken = flat[jnp.clip(pos, 0, flat.size - 1)]
    return jnp.where(m, taken, jnp.broadcast_to(x, shape).reshape(-1)).reshape(shape)


@rule(aten.masked_scatter_backward.default)
def masked_scatter_backward_rule(grad, mask, sizes):
    return tuple(sizes), grad.dtype


@lowering(aten.masked_scatter_backward.default)
def lower_masked_scatter_backward(grad, mask, sizes):
    """The source's gradient: each masked position's gradient to the source element it
    took, zeros for the elements it did not take."""
    n = math.prod(sizes)
    m, pos = _scatter_positions(mask, grad.shape)
    out = jnp.zeros((n,), grad.dtype).at[jnp.where(m, pos, n)].add(grad.reshape(-1),
                                                                     mode="drop")
    return out.reshape(tuple(sizes))


def _add_at(at, v, mode=None):
    """``x.at[i].add(v)``; for bools a logical or (XLA has no bool add; torch's sum of
    bools is their or)."""
    return at.max(v, mode=mode) if v.dtype == jnp.bool_ else at.add(v, mode=mode)


def _multiply_at(at, v):
    """``x.at[i].multiply(v)``; for bools a logical and (torch's product of bools)."""
    return at.min(v) if v.dtype == jnp.bool_ else at.multiply(v)


# torch's CPU put_ writes serially below its parallel grain (``at::internal::GRAIN_SIZE``):
# the last write to an element wins. Above it the threads race (with accumulate=False the
# result depends on the thread count): that case runs eagerly.
_PUT_SERIAL = 32768


@rule(aten.put.default)
def put_rule(x, index, source, accumulate=False):
    op = aten.put.default
    if index.dtype != torch.int64 or source.dtype != x.dtype or \
            index.numel() != source.numel() or (x.numel() == 0 and index.numel()):
        raise NoLowering(op, "arguments torch refuses (its error)")
    if accumulate and x.dtype == torch.bool:
        raise NoLowering(op, "accumulating booleans")
    if not accumulate and (index.numel() >= _PUT_SERIAL or not index.is_contiguous()
                           or not source.is_contiguous()):
        # (torch's order of writes follows the operands' memory layout)
        raise NoLowering(op, "which of several writes wins depends on torch's threads/strides")
    return _shape(x), x.dtype


@lowering(aten.put.default)
def lower_put(x, index, source, accumulate=False):
    """Flat (row-major) indices, negative ones from the end. Without ``accumulate`` each
    element takes its last write: the largest position writing it (a max, order-free)."""
    flat, idx, vals = x.reshape(-1), index.reshape(-1), source.reshape(-1)
    if idx.size == 0:
        return x
    idx = jnp.where(idx < 0, idx + flat.size, idx)
    if accumulate:
        return flat.at[idx].add(vals).reshape(x.shape)
    last = jnp.full(flat.shape, -1, idx.dtype).at[idx].max(jnp.arange(idx.size, dtype=idx.dtype))
    return jnp.where(last >= 0, vals[jnp.maximum(last, 0)], flat).reshape(x.shape)


@rule(aten.index_select.default, pure=True)
def index_select_rule(x, dim, index):
    if index.dtype not in _INDEX_DTYPES or index.ndim > 1 or (x.ndim == 0 and
                                                              index.numel() != 1):
        raise NoLowering(aten.index_select.default, "an index of another dtype or of dims, "
                                                    "or many for a 0-d tensor (torch's errors)")
    s = list(_shape(x))
    if s:
        s[norm_dim(dim, len(s))] = index.numel()
    return tuple(s), x.dtype


@lowering(aten.index_select.default)
def lower_index_select(x, dim, index):
    _check_dim_index("index_select", x, dim, index)
    if x.ndim == 0:
        return x
    return jnp.take(x, index.reshape(-1), axis=norm_dim(dim, x.ndim))


def _check_dim_index(op: str, x, dim, index) -> None:
    """Indices along ``dim`` in [0, size) (a 0-d tensor counts as one element)."""
    d = norm_dim(dim, x.ndim) if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    check_index(index, n, _out_of_bounds(op, d, n))


@rule(aten.take.default, pure=True)
def take_rule(x, index):
    """Flat (row-major) indices, lowered directly: torch's decomposition (``x.flatten()[i]``)
    reads a 0-d index on the host."""
    if index.dtype != torch.int64 or (x.numel() == 0 and index.numel() > 0):
        raise NoLowering(aten.take.default, "a non-int64 index, or taking from an empty tensor "
                                            "(torch's errors)")
    return _shape(index), x.dtype


@lowering(aten.take.default)
def lower_take(x, index):
    flat = x.reshape(-1)
    n = flat.shape[0]
    check_index(index, n, f"out of range: tried to access an index outside [-{n}, {n}) on a "
                          f"tensor of {n} elements.", wraps=True)
    if n == 0:   # (then no index either)
        return jnp.zeros(index.shape, x.dtype)
    return flat[jnp.where(index < 0, index + n, index)]


@rule(aten.gather.default, pure=True)
def gather_rule(x, dim, index, *, sparse_grad=False):
    if not _index_fits(x, dim, index):
        raise NoLowering(aten.gather.default, "an index torch refuses (its errors), or of "
                                              "other dims than x's")
    return _shape(index), x.dtype


def _index_fits(x, dim, index) -> bool:
    """An index of gather/scatter as torch takes it: int32/int64, x's number of dims (a
    0-d x: at most 1), no larger than x apart from ``dim``. Others run eagerly: torch's
    errors, and a 0-d index into a 1-d x (which torch takes)."""
    if index.dtype not in _INDEX_DTYPES:
        return False
    if x.ndim == 0:
        return index.ndim <= 1 and dim in (0, -1)
    if index.ndim != x.ndim:
        return False
    if not -x.ndim <= dim < x.ndim:
        return False
    d = dim % x.ndim
    return all(i <= n for k, (i, n) in enumerate(zip(index.shape, x.shape)) if k != d)


def _full_index(index, dim):
    grids = list(jnp.indices(index.shape, sparse=True))
    grids[dim] = index
    return tuple(grids)


@lowering(aten.gather.default)
def lower_gather(x, dim, index, *, sparse_grad=False):
    _check_dim_index("gather", x, dim, index)
    if x.ndim == 0:   # (every index is 0)
        return jnp.broadcast_to(x, index.shape)
    return x[_full_index(index, norm_dim(dim, x.ndim))]


@rule(aten.scatter.src, aten.scatter.value, aten.scatter_add.default, dynamic_scalars=True)
def scatter_rule(x, dim, index, src):
    _check_scatter(aten.scatter.src, x, dim, index, src)
    return _shape(x), x.dtype


def _check_scatter(op, x, dim, index, src) -> None:
    """torch refuses a source tensor of another dtype (its error, where a cast would
    silently give a value), an index it refuses (``_index_fits``) or larger than the
    source, and a number its checked conversion to x's dtype refuses."""
    if not _index_fits(x, dim, index):
        raise NoLowering(op, "an index torch refuses (its errors), or of other dims than x's")
    if isinstance(src, torch.Tensor):
        if src.dtype != x.dtype:
            raise NoLowering(op, "source and destination dtypes differ (torch's error)")
        ixs, ss = tuple(index.shape) or (1,), tuple(src.shape) or (1,)   # 0-d: one element
        if len(ss) != len(ixs) or any(i > n for i, n in zip(ixs, ss)):
            raise NoLowering(op, "an index larger than the source (torch's error)")
    elif not number_fits(src, x.dtype):
        raise NoLowering(op, "a value out of the dtype's range (torch's error)")


def scatter_along(op, x, dim, index, src, how="set"):
    """``x`` with ``src`` (a tensor or a number) written at ``index`` along ``dim``: set,
    or combined with what is there (``how``: "add", "multiply")."""
    _check_dim_index(op, x, dim, index)
    if x.ndim == 0:   # every index is 0: the values land in order on the one element
        n = index.size
        if n == 0:
            return x
        vals = jnp.ravel(src)[:n] if hasattr(src, "shape") and src.ndim else \
            jnp.full((n,), src)
        vals = cast(vals, x.dtype)
        if how == "set":
            return vals[-1]
        if x.dtype == jnp.bool_:   # torch's bool add is an or, its product an and
            return x | jnp.any(vals) if how == "add" else x & jnp.all(vals)
        return (x + jnp.sum(vals) if how == "add" else x * jnp.prod(vals)).astype(x.dtype)
    d = norm_dim(dim, x.ndim)
    idx = _full_index(index, d)
    if hasattr(src, "shape") and src.ndim:
        src = src[tuple(slice(0, n) for n in index.shape)]
    src = cast(src, x.dtype) if is_array(src) else jnp.asarray(src, x.dtype)   # a number
    if how == "add":
        return _add_at(x.at[idx], src)
    return _multiply_at(x.at[idx], src) if how == "multiply" else x.at[idx].set(src)


@lowering(aten.scatter.src, aten.scatter.value)
def lower_scatter(x, dim, index, src):
    return scatter_along("scatter", x, dim, index, src)


@lowering(aten.scatter_add.default)
def lower_scatter_add(x, dim, index, src):
    return scatter_along("scatter_add", x, dim, index, src, "add")


@rule(aten.scatter.reduce, aten.scatter.value_reduce, dynamic_scalars=True)
def scatter_reduce_arg_rule(x, dim, index, src, *, reduce):
    if reduce not in ("add", "multiply"):
        raise NoLowering(aten.scatter.reduce, f"reduce={reduce!r} (torch's error)")
    _check_scatter(aten.scatter.reduce, x, dim, index, src)
    return _shape(x), x.dtype


@lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def lower_scatter_reduce_arg(x, dim, index, src, *, reduce):
    """``scatter(..., reduce="add"|"multiply")``: each written element combined with what
    is there (the older form of ``scatter_reduce``)."""
    return scatter_along("scatter", x, dim, index, src, reduce)


@rule(aten.index_add.default, dynamic_scalars=True)
def index_add_rule(x, dim, index, source, *, alpha=1):
    if not _index_source_ok(x, dim, index, source, _INDEX_DTYPES) or \
            not number_fits(alpha, x.dtype):
        raise NoLowering(aten.index_add.default, "arguments torch refuses (its errors), or "
                                                 "shapes it reads unusually")
    return _shape(x), x.dtype


def _index_source_ok(x, dim, index, source, index_dtypes) -> bool:
    """index_add/index_copy: an index of ``index_dtypes`` and at most 1 dim, a source of
    x's dtype and shape but for ``index.numel()`` along ``dim`` (0-d: one element). torch
    refuses most others (its errors: they run eagerly, as the few it reads unusually)."""
    if index.dtype not in index_dtypes or index.ndim > 1 or source.dtype != x.dtype:
        return False
    if x.ndim == 0:
        return source.ndim == 0 and index.numel() == 1 and dim in (0, -1)
    if source.ndim != x.ndim or not -x.ndim <= dim < x.ndim:
        return False
    d = dim % x.ndim
    return all(s == (index.numel() if k == d else n)
               for k, (s, n) in enumerate(zip(source.shape, x.shape)))


_TORCH_DECOMP = torch._decomp.decomposition_table


@decomposition(aten.view_copy.default)
def view_copy(x, size):
    """A copy of ``x`` in shape ``size``: torch's kernel takes any strides (torch's
    decomposition views first, which refuses a strided input's)."""
    return aten.clone.default(aten.reshape.default(x, size),
                              memory_format=torch.contiguous_format)


@decomposition(aten.index_copy.default)
def index_copy(x, dim, index, source):
    """torch's decomposition (an ``index_put``), for the arguments torch's kernel takes:
    the decomposition's checks let through an index of another dtype than int64 and a
    source of another dtype, and word their errors differently."""
    if not _index_source_ok(x, dim, index, source, (torch.int64,)):
        raise NoLowering(aten.index_copy.default, "arguments torch refuses (its errors)")
    return _TORCH_DECOMP[aten.index_copy.default](x, dim, index, source)


@decomposition(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(x, dim, index, value):
    """torch's decomposition, for the arguments torch's kernel takes (as ``index_copy``);
    a value tensor of another dtype (which torch reads with a checked ``.item()``) runs
    eagerly."""
    tensor = isinstance(value, torch.Tensor)
    op = aten.index_fill.int_Tensor if tensor else aten.index_fill.int_Scalar
    ok = index.dtype == torch.int64 and index.ndim <= 1 and \
        -max(x.ndim, 1) <= dim < max(x.ndim, 1) and \
        (value.ndim == 0 and value.dtype == x.dtype if tensor else number_fits(value, x.dtype))
    if not ok:
        raise NoLowering(op, "arguments torch refuses (its errors), or a value tensor of "
                             "another dtype")
    return _TORCH_DECOMP[op](x, dim, index, value)


@lowering(aten.index_add.default)
def lower_index_add(x, dim, index, source, *, alpha=1):
    _check_dim_index("index_add", x, dim, index)
    if x.ndim == 0:
        return x + source.reshape(()).astype(x.dtype) * alpha
    d = norm_dim(dim, x.ndim)
    idx = [slice(None)] * x.ndim
    idx[d] = index.reshape(-1)
    src = source.astype(x.dtype)
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        src = src * cast(alpha, x.dtype)
    return _add_at(x.at[tuple(idx)], src)


# ---- reflection and replication padding ---------------------------------------------
# Written as slices, flips (or an edge expanded) and a cat (torch's decompositions gather
# with indices made on the host at the input's size): a padded dim is then cut and joined
# by their padding rules (``torch.stft``'s centring, ``nn.ReflectionPad2d``,
# ``padding_mode="reflect"`` or ``"replicate"`` at sizes that vary), and the backward
# adds the edges' gradients back in place.

_EDGE_PADS = {}   # op -> (dims padded, reflect: else replicate), forward and backward
for _k in (1, 2, 3):
    for _name, _reflect_mode in (("reflection", True), ("replication", False)):
        _EDGE_PADS[getattr(aten, f"{_name}_pad{_k}d").default] = (_k, _reflect_mode)
        _EDGE_PADS[getattr(aten, f"{_name}_pad{_k}d_backward").default] = (_k, _reflect_mode)


def _edge_pads_ok(x, padding, k: int, reflect: bool) -> bool:
    """Whether the runtime's decomposition takes the pads: over a non-empty input of k + 1
    or k + 2 dims, reflecting by 0 to size - 1 of each dim, replicating by any amount (a
    negative one crops) that leaves the result something of each dim. Elsewhere the op
    runs eagerly: torch's kernel raises its errors or decides the odd case (torch's
    decomposition of a reflection by negative pads gave other values than its kernel)."""
    if x.ndim not in (k + 1, k + 2) or x.numel() == 0 or len(padding) != 2 * k:
        return False
    sizes = [x.shape[-1 - j] for j in range(k)]
    if reflect:
        return all(0 <= padding[2 * j + e] < n for j, n in enumerate(sizes) for e in (0, 1))
    return all(n + padding[2 * j] + padding[2 * j + 1] > 0 for j, n in enumerate(sizes))


def _one_edge(n: int, lo: int, hi: int):
    """Where a replication crops a whole side of a dim of size ``n`` (every output then
    reads one element, torch's positions being clamped to the dim): that element's
    position; else None."""
    if n + min(lo, 0) <= 0:
        return n - 1
    if n + min(hi, 0) <= 0:
        return 0
    return None


def _extend(x, d: int, lo: int, hi: int, reflect: bool):
    """``x`` with ``lo`` elements before and ``hi`` after along dim ``d``: its edge
    reflected (the edge itself not repeated), or repeated."""
    n = x.shape[d]

    def edge(start, width):
        if reflect:
            return aten.flip.default(aten.slice.Tensor(x, d, start, start + width), [d])
        sizes = [-1] * x.ndim
        sizes[d] = width
        return aten.expand.default(aten.slice.Tensor(x, d, start, start + 1), sizes)
    parts = [edge(1 if reflect else 0, lo)] if lo else []
    parts.append(x)
    if hi:
        parts.append(edge(n - hi - 1 if reflect else n - 1, hi))
    return aten.cat.default(parts, d) if len(parts) > 1 else x


def _fold_back(g, d: int, lo: int, hi: int, n: int, reflect: bool):
    """The gradient of ``_extend`` along dim ``d`` (true size ``n``): the middle, with the
    edges' gradients added where they were read (flipped, or summed into the edge)."""
    out = aten.slice.Tensor(g, d, lo, lo + n)
    edges = []   # (an edge's gradient, where it was read from)
    if lo:
        edges.append((aten.slice.Tensor(g, d, 0, lo), 1 if reflect else 0))
    if hi:
        edges.append((aten.slice.Tensor(g, d, lo + n, lo + n + hi),
                      n - hi - 1 if reflect else n - 1))
    for edge, start in edges:
        add = aten.flip.default(edge, [d]) if reflect else aten.sum.dim_IntList(edge, [d], True)
        width = add.shape[d]
        at = aten.slice.Tensor(out, d, start, start + width)
        out = aten.slice_scatter.default(out, at + add, d, start, start + width)
    return out


def _edge_pad(op):
    k, reflect = _EDGE_PADS[op]

    def decompose(x, padding):
        if not _edge_pads_ok(x, padding, k, reflect):
            raise NoLowering(op, "pads torch refuses or an odd case (its kernel decides)")
        out = x
        for j in range(k):
            d, lo, hi = x.ndim - 1 - j, padding[2 * j], padding[2 * j + 1]
            n = out.shape[d]
            edge = None if reflect else _one_edge(n, lo, hi)
            if edge is not None:
                sizes = [-1] * out.ndim
                sizes[d] = n + lo + hi
                out = aten.expand.default(aten.slice.Tensor(out, d, edge, edge + 1), sizes)
                continue
            if lo < 0 or hi < 0:   # (replication: a negative pad crops)
                out = aten.slice.Tensor(out, d, max(-lo, 0), n - max(-hi, 0))
            out = _extend(out, d, max(lo, 0), max(hi, 0), reflect)
        return aten.clone.default(out) if out is x else out   # (never the input itself)
    return decompose


def _edge_pad_backward(op):
    k, reflect = _EDGE_PADS[op]

    def decompose(grad, x, padding):
        if not _edge_pads_ok(x, padding, k, reflect):
            raise NoLowering(op, "pads torch refuses or an odd case (its kernel decides)")
        out = grad
        for j in reversed(range(k)):
            d, lo, hi = x.ndim - 1 - j, padding[2 * j], padding[2 * j + 1]
            edge = None if reflect else _one_edge(x.shape[d], lo, hi)
            if edge is not None:   # (every output read that element)
                cut = (edge, x.shape[d] - 1 - edge)
                out = aten.sum.dim_IntList(out, [d], True)
            else:
                cut = (max(-lo, 0), max(-hi, 0))
                out = _fold_back(out, d, max(lo, 0), max(hi, 0), x.shape[d] - sum(cut),
                                 reflect)
            if any(cut):   # (the cropped elements: no gradient)
                widths = [0, 0] * (x.ndim - 1 - d) + list(cut)
                out = aten.constant_pad_nd.default(out, widths)
        # (no pad at all: a view of the gradient, which a kernel's result never is)
        return aten.clone.default(out) if not any(padding) else out
    return decompose


for _op in _EDGE_PADS:
    decomposition(_op)(_edge_pad_backward(_op) if "backward" in _op._schema.name
                       else _edge_pad(_op))
