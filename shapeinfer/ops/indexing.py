"""Indexing: ``x[...]`` with ints, slices (symbolic bounds), None, Ellipsis, index
tensors and boolean masks (data-dependent); gather, index_select and friends."""

from __future__ import annotations

import torch

from .. import shape_fns
from ..values import Const, ListV, SymScalar, TensorType, TupleV, Value, as_dim
from .common import T, RuleUnknown, like, py, shape_of, sym
from .registry import op


def _index_items(index: Value) -> list:
    if isinstance(index, TupleV):
        return list(index.items)
    if isinstance(index, Const) and isinstance(index.obj, tuple):
        return [Const(x) for x in index.obj]
    return [index]


def _slice_bound(b):
    if b is None:
        return None
    if isinstance(b, Value):
        d = as_dim(b)
        if d is None:
            raise _UnknownBound()
        return d
    return b


class _UnknownBound(Exception):
    pass


@op("getitem", methods=("__getitem__",))
def getitem(ctx, input, index):
    t = T(input)
    if t.shape is None:
        raise RuleUnknown("indexing a tensor of unknown rank")
    items = _index_items(index)
    n_consumed = sum(1 for i in items if not (isinstance(i, Const) and (i.obj is None or i.obj is Ellipsis))
                     and not (isinstance(i, TensorType) and i.dtype == torch.bool and False))
    # boolean masks consume as many dims as they have
    n_consumed = 0
    for i in items:
        if isinstance(i, Const) and (i.obj is None or i.obj is Ellipsis):
            continue
        if isinstance(i, TensorType) and i.dtype in (torch.bool, torch.uint8) and i.shape is not None:
            n_consumed += max(len(i.shape), 1)
        else:
            n_consumed += 1
    if n_consumed > len(t.shape):
        raise shape_fns.ShapeError("SI120", f"too many indices for a tensor of rank {len(t.shape)} "
                                   f"{sym.shape_str(t.shape)}", t.shape)
    out: list = []
    advanced: list = []  # shapes of index tensors, broadcast together
    adv_pos = None
    dim = 0
    for i in items:
        if isinstance(i, Const) and i.obj is Ellipsis:
            skip = len(t.shape) - n_consumed
            out.extend(t.shape[dim:dim + skip])
            dim += skip
            continue
        if isinstance(i, Const) and i.obj is None:
            out.append(1)
            continue
        if isinstance(i, Const) and isinstance(i.obj, slice):
            sl = i.obj
            step = sl.step if sl.step is not None else 1
            if isinstance(step, Value):
                step = as_dim(step)
            try:
                n = shape_fns.narrow_dim(t.shape[dim], _slice_bound(sl.start), _slice_bound(sl.stop),
                                         step if isinstance(step, int) else 1)
            except _UnknownBound:
                n = None
            if not isinstance(step, int):
                n = None
            out.append(n)
            dim += 1
            continue
        if isinstance(i, Const) and isinstance(i.obj, bool):
            out.append(1 if i.obj else 0)
            continue
        if isinstance(i, Const) and isinstance(i.obj, int) or isinstance(i, SymScalar):
            if isinstance(i, Const) and sym.is_concrete(t.shape[dim]):
                if not -t.shape[dim] <= i.obj < t.shape[dim]:
                    raise shape_fns.ShapeError("SI120", f"index {i.obj} is out of bounds for size {t.shape[dim]}",
                                               (i.obj, t.shape[dim]))
            dim += 1
            continue
        if isinstance(i, TensorType) and i.dtype in (torch.bool, torch.uint8):
            k = max(len(i.shape), 1) if i.shape is not None else 1
            for j in range(k):
                if i.shape is not None and j < len(i.shape):
                    shape_fns.require_equal(i.shape[j], t.shape[dim + j], "SI120", "boolean mask size")
            ctx.report("SI003", "boolean-mask indexing: the number of selected elements depends on data")
            advanced.append((None,))
            adv_pos = len(out) if adv_pos is None else adv_pos
            dim += k
            continue
        if isinstance(i, (TensorType, ListV, TupleV)) or isinstance(i, Const) and isinstance(i.obj, list):
            ishape = i.shape if isinstance(i, TensorType) else _list_index_shape(i)
            if ishape is None:
                raise RuleUnknown("index tensor of unknown shape")
            advanced.append(ishape)
            adv_pos = len(out) if adv_pos is None else adv_pos
            dim += 1
            continue
        raise RuleUnknown(f"index of type {type(i).__name__}")
    out.extend(t.shape[dim:])
    if advanced:
        adv_shape = shape_fns.broadcast_shapes(*advanced)
        # torch puts the broadcast index dims first when advanced indices are not adjacent
        positions = [k for k, i in enumerate(items) if isinstance(i, (TensorType, ListV, TupleV))]
        adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
        if adjacent:
            out = out[:adv_pos] + list(adv_shape) + out[adv_pos:]
        else:
            out = list(adv_shape) + out
    return like(t, out)


def _list_index_shape(i):
    if isinstance(i, Const):
        import numpy as np

        return tuple(np.asarray(i.obj).shape)
    if isinstance(i, (ListV, TupleV)):
        if isinstance(i, ListV) and not i.is_concrete:
            return None
        return (len(i.items),)
    return None


@op("index_select", torch.index_select, methods=("index_select",))
def index_select(ctx, input, dim, index, *, out=None):
    s = list(shape_of(input))
    d = shape_fns.normalize_dim(py(dim), len(s))
    idx = shape_of(index, "index")
    if len(idx) > 1:
        raise shape_fns.ShapeError("SI161", "index_select: index must be 1-d")
    s[d] = idx[0] if idx else 1
    return like(T(input), s)


@op("gather", torch.gather, methods=("gather",))
def gather(ctx, input, dim, index, *, sparse_grad=False, out=None):
    s, idx = shape_of(input), shape_of(index, "index")
    if len(s) != len(idx):
        raise shape_fns.ShapeError("SI161", f"gather: index rank {len(idx)} != input rank {len(s)}")
    return like(T(input), idx)


@op("scatter", torch.scatter, torch.scatter_add, methods=("scatter", "scatter_add", "index_add",
                                                           "index_copy", "index_fill", "masked_scatter"))
def scatter(ctx, input, *args, **kwargs):
    return T(input)


@op("take_along_dim", torch.take_along_dim, methods=("take_along_dim",))
def take_along_dim(ctx, input, indices, dim=None, *, out=None):
    if dim is None or py(dim) is None:
        return like(T(input), (shape_fns.numel(shape_of(indices)),))
    s, idx = shape_of(input), shape_of(indices, "indices")
    if len(s) != len(idx):
        raise shape_fns.ShapeError("SI161", f"take_along_dim: indices of rank {len(idx)} for an input of "
                                   f"rank {len(s)}")
    d = shape_fns.normalize_dim(py(dim), len(s))
    # broadcast everywhere but along dim, which has the indices' size
    rest = shape_fns.broadcast_shapes(s[:d] + s[d + 1:], idx[:d] + idx[d + 1:])
    return like(T(input), tuple(rest[:d]) + (idx[d],) + tuple(rest[d:]))


@op("nonzero", torch.nonzero, torch.argwhere, methods=("nonzero", "argwhere"))
def nonzero(ctx, input, *, as_tuple=False, out=None):
    s = shape_of(input)
    ctx.report("SI003", "nonzero: the number of results depends on tensor data")
    if py(as_tuple):
        return TupleV(tuple(like(T(input), (None,), torch.int64) for _ in s))
    return like(T(input), (None, len(s)), torch.int64)


@op("masked_select", torch.masked_select, methods=("masked_select",))
def masked_select(ctx, input, mask, *, out=None):
    ctx.report("SI003", "masked_select: the number of results depends on tensor data")
    return like(T(input), (None,))


@op("unique", torch.unique, methods=("unique",))
def unique(ctx, input, *args, **kwargs):
    ctx.report("SI003", "unique: the number of results depends on tensor data")
    return like(T(input), (None,))
