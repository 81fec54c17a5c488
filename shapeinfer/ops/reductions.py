"""Reductions, contractions (matmul family, einsum) and sorting/selection."""

from __future__ import annotations

import collections

import torch

from .. import shape_fns
from .. import symbolic as sym
from ..values import Const, ObjV, TensorType, TupleV
from .common import (T, RuleUnknown, bool_arg, default_float, dim_arg, int_dtype, is_none, like, py, result_dtype,
                     same_dtype, shape_of, to_dtype)
from .registry import op


def _dims(dim):
    if is_none(dim):
        return None
    d = py(dim, "dim")
    return d if isinstance(d, tuple) else (d,)


def _reduce(dtype_rule):
    def rule(ctx, input, dim=None, keepdim=False, *, dtype=None, out=None, **kwargs):
        t = T(input)
        if isinstance(dim, Const) and isinstance(dim.obj, bool):  # all(x, True)? keep torch's order
            dim, keepdim = None, dim
        shape = None if t.shape is None else shape_fns.reduce_shape(t.shape, _dims(dim), bool_arg(keepdim))
        return like(t, shape, to_dtype(dtype, None) or dtype_rule(t.dtype))

    return rule


def _sum_dtype(d):
    return torch.int64 if d is not None and (int_dtype(d) or d == torch.bool) else d


def _float_dtype(d):
    return d if d is None or d.is_floating_point or d.is_complex else default_float()


op("sum", torch.sum, torch.nansum, torch.prod, methods=("sum", "nansum", "prod"))(_reduce(_sum_dtype))
op("mean", torch.mean, torch.nanmean, torch.logsumexp, methods=("mean", "nanmean", "logsumexp"))(
    _reduce(_float_dtype))
op("amax", torch.amax, torch.amin, methods=("amax", "amin"))(_reduce(lambda d: d))
op("all", torch.all, torch.any, methods=("all", "any"))(_reduce(lambda d: torch.bool))
op("count_nonzero", torch.count_nonzero, methods=("count_nonzero",))(_reduce(lambda d: torch.int64))
op("argmax", torch.argmax, torch.argmin, methods=("argmax", "argmin"))(_reduce(lambda d: torch.int64))


@op("var", torch.var, torch.std, methods=("var", "std"))
def var(ctx, input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    if isinstance(dim, Const) and isinstance(dim.obj, bool):
        dim = None  # var(x, True): the flag is `unbiased`, which does not change the shape
    return _reduce(_float_dtype)(ctx, input, dim, keepdim)


@op("var_mean", torch.var_mean, torch.std_mean)
def var_mean(ctx, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    out = var(ctx, input, dim, unbiased, keepdim)
    return TupleV((out, out))


@op("norm", torch.norm, torch.linalg.vector_norm, methods=("norm",))
def norm(ctx, input, p="fro", dim=None, keepdim=False, out=None, dtype=None, ord=None):
    return _reduce(_float_dtype)(ctx, input, dim, keepdim)


# torch.return_types.max and friends: tuples whose items are also .values and .indices
_RETURN_TYPES = {name: collections.namedtuple(name, ("values", "indices"))
                 for name in ("max", "min", "median", "mode", "kthvalue", "topk", "sort", "cummax", "cummin")}


def values_indices(name: str, values, indices):
    return ObjV(_RETURN_TYPES[name], {"values": values, "indices": indices})


def _values_indices_rule(name):
    def rule(ctx, input, dim=None, keepdim=False, *, out=None):
        t = T(input)
        if is_none(dim):
            return like(t, ())  # max(x) without dim: a single value
        shape = shape_fns.reduce_shape(shape_of(input), _dims(dim), bool_arg(keepdim))
        return values_indices(name, like(t, shape), like(t, shape, torch.int64))

    return rule


def _max_rule(name):
    values_rule = _values_indices_rule(name)

    def rule(ctx, input, dim=None, keepdim=False, *, other=None, out=None):
        if not is_none(other) and is_none(dim):
            dim = other
        if isinstance(dim, type(input)) or (not is_none(dim) and hasattr(dim, "shape")):
            # max(a, b): elementwise
            a, b = T(input), T(dim)
            return like(a, shape_fns.broadcast_shapes(a.shape, b.shape), result_dtype(a, b))
        return values_rule(ctx, input, dim, keepdim)

    return rule


op("max", torch.max, methods=("max",))(_max_rule("max"))
op("min", torch.min, methods=("min",))(_max_rule("min"))
op("median", torch.median, torch.nanmedian, methods=("median", "nanmedian"))(_values_indices_rule("median"))


@op("mode", torch.mode, methods=("mode",))
def mode(ctx, input, dim=-1, keepdim=False, *, out=None):
    return _values_indices_rule("mode")(ctx, input, dim, keepdim)


@op("kthvalue", torch.kthvalue, methods=("kthvalue",))
def kthvalue(ctx, input, k, dim=-1, keepdim=False, *, out=None):
    return _values_indices_rule("kthvalue")(ctx, input, dim, keepdim)


@op("cummax", torch.cummax, torch.cummin, methods=("cummax", "cummin"))
def cummax(ctx, input, dim, *, out=None):
    t = T(input)
    if t.shape is not None:
        shape_fns.normalize_dim(py(dim), max(len(t.shape), 1))
    return values_indices("cummax", t, like(t, t.shape, torch.int64))


@op("topk", torch.topk, methods=("topk",))
def topk(ctx, input, k, dim=-1, largest=True, sorted=True, *, out=None):
    t = T(input)
    s = list(shape_of(input))
    d = shape_fns.normalize_dim(py(dim), len(s))
    kk = k.expr if hasattr(k, "expr") else py(k, "k")
    s[d] = kk
    return values_indices("topk", like(t, s), like(t, s, torch.int64))


@op("sort", torch.sort, methods=("sort",))
def sort(ctx, input, dim=-1, descending=False, stable=False, *, out=None):
    t = T(input)
    return values_indices("sort", t, like(t, t.shape, torch.int64))


@op("argsort", torch.argsort, methods=("argsort",))
def argsort(ctx, input, dim=-1, descending=False, stable=False, *, out=None):
    t = T(input)
    return like(t, t.shape, torch.int64)


@op("matmul", torch.matmul, methods=("matmul", "__matmul__"))
def matmul(ctx, input, other, *, out=None):
    a, b = T(input), T(other, "other")
    shape = shape_fns.matmul_shape(shape_of(a), shape_of(b))
    return like(a, shape, same_dtype("matmul", a, b))


def _with_out_dtype(t, out_dtype):
    # out_dtype (mm/bmm/addmm/baddbmm) has no CPU kernel in torch 2.13, so its dtype rule
    # cannot be checked against torch here: the dtype is left unknown rather than guessed
    if is_none(out_dtype):
        return t
    return TensorType(None, t.shape, t.device, "out_dtype is not modelled")


def _require_rank(name: str, rank: int, *shapes) -> None:
    if any(len(s) != rank for s in shapes):
        raise shape_fns.ShapeError("SI161", f"{name} expects {rank}-d tensors, got "
                                   + " and ".join(sym.shape_str(s) for s in shapes),
                                   tuple(d for s in shapes for d in s))


@op("mm", torch.mm, methods=("mm",))
def mm(ctx, input, mat2, out_dtype=None, *, out=None):
    _require_rank("mm", 2, shape_of(input), shape_of(mat2))
    return _with_out_dtype(matmul(ctx, input, mat2), out_dtype)


@op("bmm", torch.bmm, methods=("bmm",))
def bmm(ctx, input, mat2, out_dtype=None, *, out=None):
    a, b = shape_of(input), shape_of(mat2)
    _require_rank("bmm", 3, a, b)
    shape_fns.require_equal(a[0], b[0], "SI130", "bmm batch sizes")
    return _with_out_dtype(matmul(ctx, input, mat2), out_dtype)


@op("mv", torch.mv, methods=("mv",))
def mv(ctx, input, vec, *, out=None):
    _require_rank("mv", 2, shape_of(input))
    _require_rank("mv", 1, shape_of(vec))
    return matmul(ctx, input, vec)


@op("dot", torch.dot, methods=("dot",))
def dot(ctx, input, tensor, *, out=None):
    _require_rank("dot", 1, shape_of(input), shape_of(tensor))
    return matmul(ctx, input, tensor)


@op("inner", torch.inner, methods=("inner",))
def inner(ctx, input, other, *, out=None):
    a, b = T(input), T(other, "other")
    sa, sb = shape_of(a), shape_of(b)
    if sa == () or sb == ():  # a scalar operand: an elementwise product
        return like(a, shape_fns.broadcast_shapes(sa, sb), result_dtype(a, b))
    shape_fns.require_equal(sa[-1], sb[-1], "SI130", "inner: last dims")
    return like(a, tuple(sa[:-1]) + tuple(sb[:-1]), same_dtype("inner", a, b))


@op("outer", torch.outer, torch.ger, methods=("outer", "ger"))
def outer(ctx, input, vec2, *, out=None):
    a, b = shape_of(input), shape_of(vec2)
    _require_rank("outer", 1, a, b)
    return like(T(input), (a[0], b[0]), result_dtype(T(input), T(vec2)))


def _plus_input(name: str, input, prod, out_dtype=None):
    """input + product, where input expands to the product's shape (it cannot grow it)."""
    same_dtype(name, T(input), prod)
    out = like(prod, shape_fns.expand_shape(shape_of(input), prod.shape))
    return _with_out_dtype(out, out_dtype)


@op("addmm", torch.addmm, methods=("addmm",))
def addmm(ctx, input, mat1, mat2, out_dtype=None, *, beta=1, alpha=1, out=None):
    return _plus_input("addmm", input, mm(ctx, mat1, mat2), out_dtype)


@op("baddbmm", torch.baddbmm, methods=("baddbmm",))
def baddbmm(ctx, input, batch1, batch2, out_dtype=None, *, beta=1, alpha=1, out=None):
    return _plus_input("baddbmm", input, bmm(ctx, batch1, batch2), out_dtype)


@op("addbmm", torch.addbmm, methods=("addbmm",))
def addbmm(ctx, input, batch1, batch2, *, beta=1, alpha=1, out=None):
    prod = bmm(ctx, batch1, batch2)  # summed over the batch
    return _plus_input("addbmm", input, like(prod, prod.shape[1:]))


@op("addmv", torch.addmv, methods=("addmv",))
def addmv(ctx, input, mat, vec, *, beta=1, alpha=1, out=None):
    return _plus_input("addmv", input, mv(ctx, mat, vec))


@op("addr", torch.addr, methods=("addr",))
def addr(ctx, input, vec1, vec2, *, beta=1, alpha=1, out=None):
    _require_rank("addr", 1, shape_of(vec1), shape_of(vec2))
    prod = outer(ctx, vec1, vec2)
    shape = shape_fns.expand_shape(shape_of(input), prod.shape)
    return like(prod, shape, result_dtype(T(input), prod))


@op("einsum", torch.einsum)
def einsum(ctx, equation, *operands):
    eq = py(equation, "equation")
    if len(operands) == 1 and isinstance(operands[0], TupleV.__mro__[0]) and not hasattr(operands[0], "shape"):
        items = getattr(operands[0], "items", None)
        if items is not None:
            operands = tuple(items)
    ts = [T(o) for o in operands]
    shape = shape_fns.einsum_shape(eq, [shape_of(t) for t in ts])
    return like(ts[0], shape, same_dtype("einsum", *ts) if len(ts) > 1 else ts[0].dtype)


@op("cdist", torch.cdist)
def cdist(ctx, x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    a, b = shape_of(x1), shape_of(x2)
    batch = shape_fns.broadcast_shapes(a[:-2], b[:-2])
    shape_fns.require_equal(a[-1], b[-1], "SI130", "cdist feature sizes")
    same_dtype("cdist", T(x1), T(x2))
    return like(T(x1), tuple(batch) + (a[-2], b[-2]))


# ---- mixture-of-experts kernels ------------------------------------------------------------

_GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _grouped_mm(ctx, a, b, offs, bias, out_dtype):
    """torch._grouped_mm: per-group matmuls, groups cut along a 2-d operand's jagged dim by
    ``offs`` (int32 group ends). [M,K]x[G,K,N] -> [M,N]; [G,M,K]x[K,N] -> [M,N];
    [G,M,K]x[G,K,N] -> [G,M,N]; [M,K]x[K,N] -> [G,M,N] with K cut into len(offs) groups.
    Strides are not modelled (the CPU kernel also wants 16-byte aligned strides)."""
    ta, tb = T(a, "mat_a"), T(b, "mat_b")
    sa, sb = shape_of(ta, "mat_a"), shape_of(tb, "mat_b")
    for name, s in (("mat_a", sa), ("mat_b", sb)):
        if len(s) not in (2, 3):
            raise shape_fns.ShapeError("SI161", f"grouped_mm: {name} has to be 2-d or 3-d, got "
                                       f"{sym.shape_str(s)}", s)
    for name, t in (("mat_a", ta), ("mat_b", tb)):
        if t.dtype is not None and t.dtype not in _GROUPED_MM_DTYPES:
            raise shape_fns.ShapeError("SI160", f"grouped_mm: {name} has to be float32, bfloat16 or float16, "
                                       f"got {str(t.dtype).replace('torch.', '')}")
    dtype = same_dtype("grouped_mm", ta, tb)
    jagged = len(sa) == 2 or len(sb) == 2
    if jagged == is_none(offs):
        raise shape_fns.ShapeError("SI007", "grouped_mm: offs is needed exactly when an operand is 2-d")
    if not is_none(bias):
        raise RuleUnknown("grouped_mm with a bias is not modelled")
    shape_fns.require_equal(sa[-1], sb[-2], "SI130", "grouped_mm: contraction sizes of mat_a and mat_b")
    groups = None
    if jagged:
        to = T(offs, "offs")
        so = shape_of(to, "offs")
        if to.dtype is not None and to.dtype != torch.int32:
            raise shape_fns.ShapeError("SI160", f"grouped_mm: offs has to be int32, got "
                                       f"{str(to.dtype).replace('torch.', '')}")
        if len(so) != 1:
            raise shape_fns.ShapeError("SI161", f"grouped_mm: offs has to be 1-d, got {sym.shape_str(so)}", so)
        groups = so[0]
    if len(sa) == 3 and len(sb) == 3:
        shape_fns.require_equal(sa[0], sb[0], "SI130", "grouped_mm: group counts")
        shape = (sa[0], sa[1], sb[2])
    elif len(sa) == 2 and len(sb) == 2:
        shape = (groups, sa[0], sb[1])
    else:
        shape_fns.require_equal(groups, (sb if len(sb) == 3 else sa)[0], "SI130", "grouped_mm: len(offs) vs groups")
        shape = (sa[-2], sb[-1])
    out = like(ta, shape, dtype)
    if is_none(out_dtype) or to_dtype(out_dtype) == dtype:
        return out
    return _with_out_dtype(out, out_dtype)  # CUDA accumulates bf16 in float32; CPU refuses


@op("_grouped_mm", torch._grouped_mm)
def grouped_mm(ctx, input, mat2, offs=None, bias=None, out_dtype=None):
    return _grouped_mm(ctx, input, mat2, offs, bias, out_dtype)


@op("grouped_mm", getattr(torch.nn.functional, "grouped_mm", None))
def grouped_mm_functional(ctx, mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    return _grouped_mm(ctx, mat_a, mat_b, offs, bias, out_dtype)


@op("histc", torch.histc, methods=("histc",))
def histc(ctx, input, bins=100, min=0, max=0, *, out=None):
    t = T(input)
    n = dim_arg(bins)
    if sym.compare(">", n, 0) is False:
        raise shape_fns.ShapeError("SI143", f"histc: bins must be > 0, got {sym.dim_pretty(n)}", (n,))
    if t.dtype is not None and not t.dtype.is_floating_point:
        # torch's CPU kernel takes floats only; integer histograms (CUDA) are not checked here
        return TensorType(None, (n,), t.device, "histc of a non-float tensor is not modelled")
    return like(t, (n,))
