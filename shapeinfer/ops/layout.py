"""Layout ops: view/reshape, permute/transpose, squeeze, expand, cat/stack/split, size."""

from __future__ import annotations

import sympy
import torch

from .. import shape_fns
from ..values import Const, ListV, SymScalar, TupleV, Unknown, int_value
from .common import (T, RuleUnknown, TensorType, dim_arg, dims_arg, is_none, like, py, result_dtype, shape_of,
                     sizes_arg, sizes_or_keyword, sym, to_dtype, union)
from .registry import op
from .tensor_attrs import shape_value


def _int(v, what="dim"):
    x = py(v, what)
    if not isinstance(x, int):
        raise RuleUnknown(f"{what} is not a concrete int")
    return x


@op("size", methods=("size",))
def size(ctx, input, dim=None):
    t = T(input)
    if is_none(dim):
        return shape_value(t)
    if t.shape is None:
        return SymScalar(int, None, "rank unknown")
    d = shape_fns.normalize_dim(_int(dim), len(t.shape))
    return int_value(t.shape[d], t.reason or "unknown dim")


@op("numel", methods=("numel", "nelement"))
def numel(ctx, input):
    return int_value(shape_fns.numel(shape_of(input)), "numel of an unknown shape")


def _reshaped(t, target):
    if t.shape is None:
        return like(t, target if -1 not in target else None)
    return like(t, shape_fns.reshape_shape(t.shape, target))


@op("view", methods=("view",))
def view(ctx, input, *sizes, size=None, dtype=None):
    t = T(input)
    if len(sizes) == 1 and isinstance(sizes[0], Const) and isinstance(sizes[0].obj, torch.dtype):
        sizes, dtype = (), sizes[0]
    if not is_none(dtype):
        if sizes or not is_none(size):
            raise shape_fns.ShapeError("SI007", "view() takes either a dtype or sizes")
        return _view_dtype(t, to_dtype(dtype))
    return _reshaped(t, sizes_or_keyword(sizes, size, "size", "view"))


def _view_dtype(t, dtype):
    """view(dtype): same bytes, so the last dim scales by the ratio of element sizes."""
    if t.dtype is None or t.shape is None:
        same_size = t.dtype is not None and t.dtype.itemsize == dtype.itemsize
        return TensorType(dtype, t.shape if same_size else None, t.device,
                          t.reason or "view(dtype) of a tensor whose dtype is unknown")
    return like(t, shape_fns.view_dtype_shape(t.shape, t.dtype.itemsize, dtype.itemsize), dtype)


@op("reshape", torch.reshape, methods=("reshape",))
def reshape(ctx, input, *shapes, shape=None):
    return _reshaped(T(input), sizes_or_keyword(shapes, shape, "shape", "reshape"))


@op("view_as", methods=("view_as", "reshape_as"))
def view_as(ctx, input, other):
    return like(T(input), shape_fns.reshape_shape(shape_of(input), shape_of(other)))


@op("expand_as", methods=("expand_as",))
def expand_as(ctx, input, other):
    return like(T(input), shape_fns.expand_shape(shape_of(input), shape_of(other)))


@op("broadcast_to", torch.broadcast_to, methods=("broadcast_to",))
def broadcast_to(ctx, input, size):
    return like(T(input), shape_fns.expand_shape(shape_of(input), dims_arg(size)))


@op("expand", methods=("expand",))
def expand(ctx, input, *sizes, size=None, implicit=False):
    target = sizes_or_keyword(sizes, size, "size", "expand")
    return like(T(input), shape_fns.expand_shape(shape_of(input), target))


@op("repeat", methods=("repeat",))
def repeat(ctx, input, *sizes, repeats=None):
    target = sizes_or_keyword(sizes, repeats, "repeats", "repeat")
    return like(T(input), shape_fns.repeat_shape(shape_of(input), target))


@op("tile", torch.tile, methods=("tile",))
def tile(ctx, input, *sizes, dims=None):
    s = shape_of(input)
    reps = sizes_or_keyword(sizes, dims, "dims", "tile")
    reps = (1,) * (len(s) - len(reps)) + tuple(reps)
    return like(T(input), shape_fns.repeat_shape(s, reps))


@op("repeat_interleave", torch.repeat_interleave, methods=("repeat_interleave",))
def repeat_interleave(ctx, input, repeats=None, dim=None, *, output_size=None):
    s = shape_of(input)
    r = dim_arg(repeats) if not hasattr(repeats, "shape") else None
    if r is None:
        raise RuleUnknown("repeat_interleave with tensor repeats is data-dependent")
    if is_none(dim):
        return like(T(input), (sym.mul(shape_fns.numel(s), r),))
    d = shape_fns.normalize_dim(_int(dim), len(s))
    out = list(s)
    out[d] = sym.mul(out[d], r)
    return like(T(input), out)


@op("permute", torch.permute, methods=("permute",))
def permute(ctx, input, *sizes, dims=None):
    order = sizes_or_keyword(sizes, dims, "dims", "permute")
    return like(T(input), shape_fns.permute_shape(shape_of(input), [int(d) for d in order]))


@op("transpose", torch.transpose, torch.swapdims, methods=("transpose", "swapdims"))
def transpose(ctx, input, dim0, dim1):
    return like(T(input), shape_fns.transpose_shape(shape_of(input), _int(dim0), _int(dim1)))


@op("swapaxes", torch.swapaxes, methods=("swapaxes",))
def swapaxes(ctx, input, axis0, axis1):
    return transpose(ctx, input, axis0, axis1)


@op("t", torch.t, methods=("t",))
def t_(ctx, input):
    s = shape_of(input)
    if len(s) > 2:
        raise shape_fns.ShapeError("SI161", f"t() expects a tensor with <= 2 dims, got {len(s)}")
    return like(T(input), tuple(reversed(s)))


@op("movedim", torch.movedim, torch.moveaxis, methods=("movedim", "moveaxis"))
def movedim(ctx, input, source, destination):
    s = shape_of(input)
    src = [shape_fns.normalize_dim(d, len(s)) for d in (py(source) if isinstance(py(source), tuple)
                                                       else (py(source),))]
    dst = [shape_fns.normalize_dim(d, len(s)) for d in (py(destination) if isinstance(py(destination), tuple)
                                                       else (py(destination),))]
    order = [i for i in range(len(s)) if i not in src]
    perm = [None] * len(s)
    for a, b in zip(src, dst):
        perm[b] = a
    it = iter(order)
    perm = [p if p is not None else next(it) for p in perm]
    return like(T(input), tuple(s[p] for p in perm))


@op("squeeze", torch.squeeze, methods=("squeeze",))
def squeeze(ctx, input, dim=None):
    s = shape_of(input)
    if is_none(dim):
        dims = tuple(range(len(s)))
    else:
        d = py(dim)
        dims = shape_fns.normalize_dims(d if isinstance(d, tuple) else (d,), len(s)) if s else ()
    out = shape_fns.squeeze_shape(s, dims)
    if out is not None:
        return like(T(input), out)
    # a symbolic dim that may be 1: one shape when it is, another when it is not
    undecided = [i for i in dims if sym.equal(s[i], 1) is None]
    if len(undecided) > 3 or any(s[i] is None for i in undecided):
        return like(T(input), None)
    options = []
    for mask in range(2 ** len(undecided)):
        cond = sympy.true
        drop = {i for i in dims if sym.equal(s[i], 1) is True}
        for bit, i in enumerate(undecided):
            is_one = bool(mask >> bit & 1)
            cond = sympy.And(cond, sympy.Eq(s[i], 1) if is_one else sympy.Ne(s[i], 1))
            if is_one:
                drop.add(i)
        options.append((cond, like(T(input), tuple(d for i, d in enumerate(s) if i not in drop))))
    return union(options)


@op("unsqueeze", torch.unsqueeze, methods=("unsqueeze",))
def unsqueeze(ctx, input, dim):
    return like(T(input), shape_fns.unsqueeze_shape(shape_of(input), _int(dim)))


@op("flatten", torch.flatten, methods=("flatten",))
def flatten(ctx, input, start_dim=0, end_dim=-1):
    return like(T(input), shape_fns.flatten_shape(shape_of(input), _int(start_dim), _int(end_dim)))


@op("ravel", torch.ravel, methods=("ravel",))
def ravel(ctx, input):
    return like(T(input), (shape_fns.numel(shape_of(input)),))


@op("unflatten", torch.unflatten, methods=("unflatten",))
def unflatten(ctx, input, dim, sizes):
    return like(T(input), shape_fns.unflatten_shape(shape_of(input), _int(dim), dims_arg(sizes)))


@op("narrow", torch.narrow, methods=("narrow",))
def narrow(ctx, input, dim, start, length):
    s = list(shape_of(input))
    d = shape_fns.normalize_dim(_int(dim), len(s))
    s[d] = dim_arg(length)
    return like(T(input), s)


@op("select", torch.select, methods=("select",))
def select(ctx, input, dim, index):
    s = shape_of(input)
    d = shape_fns.normalize_dim(_int(dim), len(s))
    return like(T(input), s[:d] + s[d + 1:])


def _same_shape(ctx, input, *args, **kwargs):
    return like(T(input), T(input).shape)


op("same_shape", torch.roll, torch.flip, torch.fliplr, torch.flipud, torch.tril, torch.triu, torch.rot90,
   methods=("roll", "flip", "fliplr", "flipud", "tril", "triu"))(_same_shape)


def _tensors(v, what="tensors"):
    if isinstance(v, ListV) and not v.is_concrete:
        return None
    if isinstance(v, (TupleV, ListV)):
        return [T(x, what) for x in v.items]
    raise RuleUnknown(f"{what} is not a sequence of tensors")


@op("cat", torch.cat, torch.concat, torch.concatenate)
def cat(ctx, tensors, dim=0, *, axis=None, out=None):
    d = _int(axis if not is_none(axis) else dim)
    ts = _tensors(tensors)
    if ts is None:  # a list with a symbolic number of equal items
        elem = T(tensors.tail)
        s = list(elem.shape)
        prefix = [T(x) for x in tensors.items]
        k = shape_fns.normalize_dim(d, len(s))
        total = sym.mul(s[k], tensors.tail_count) if tensors.tail_count is not None else None
        for p in prefix:
            total = sym.add(total, p.shape[k])
        s[k] = total
        return like(elem, s)
    if not ts:
        raise RuleUnknown(_EMPTY_LIST.format("cat"))
    known = [t for t in ts if t.shape is not None]
    if len(known) != len(ts):
        raise RuleUnknown("cat of tensors of unknown rank")
    return like(ts[0], shape_fns.cat_shape([t.shape for t in ts], d), result_dtype(*ts))


# torch raises for it, but an empty list here is more often one whose items the analysis
# lost (appended on a path it could not follow) than the model's bug: unknown, not an error
_EMPTY_LIST = "{} of an empty list (torch raises; the analysis may have lost its items)"


@op("stack", torch.stack)
def stack(ctx, tensors, dim=0, *, out=None):
    d = _int(dim)
    ts = _tensors(tensors)
    if ts is None:
        elem = T(tensors.tail)
        if tensors.items:
            for x in tensors.items:
                shape_fns.stack_shape([T(x).shape, elem.shape])
        s = elem.shape
        k = shape_fns.normalize_dim(d, len(s) + 1)
        return like(elem, s[:k] + (tensors.length,) + s[k:])
    if not ts:
        raise RuleUnknown(_EMPTY_LIST.format("stack"))
    return like(ts[0], shape_fns.stack_shape([t.shape for t in ts], d), result_dtype(*ts))


def _stack_like(dim_of):
    def rule(ctx, tensors, *, out=None):
        ts = _tensors(tensors)
        if ts is None:
            raise RuleUnknown("stack of a symbolic number of tensors")
        shapes = [t.shape if len(t.shape) >= 2 else (1,) + t.shape for t in ts]
        return like(ts[0], shape_fns.cat_shape(shapes, dim_of(shapes)), result_dtype(*ts))

    return rule


op("hstack", torch.hstack)(lambda ctx, tensors, *, out=None: cat(ctx, tensors, 0 if len(
    T(tensors.items[0]).shape) == 1 else 1))
op("vstack", torch.vstack, torch.row_stack)(_stack_like(lambda shapes: 0))


def _pieces(t, shapes):
    return TupleV(tuple(like(t, s) for s in shapes))


@op("Tensor.split", methods=("split",))
def split_method(ctx, input, split_size, dim=0):
    return split(ctx, input, split_size, dim)


@op("split", torch.split)
def split(ctx, tensor, split_size_or_sections, dim=0):
    t = T(tensor)
    s = shape_of(tensor)
    d = shape_fns.normalize_dim(_int(dim), len(s))
    sections = split_size_or_sections
    if isinstance(sections, (TupleV, ListV)) or isinstance(sections, Const) and isinstance(sections.obj, (list, tuple)):
        return _pieces(t, shape_fns.split_shapes(s, list(dims_arg(sections)), d))
    size = dim_arg(sections)
    if size is None:
        raise RuleUnknown("split size is unknown")
    if sym.is_concrete(s[d]) and sym.is_concrete(size):
        return _pieces(t, shape_fns.split_shapes(s, size, d))
    # a symbolic number of pieces, all of size `size` when it divides evenly; otherwise
    # the last one is shorter, which a list of equal items cannot say: unknown then
    piece = list(s)
    piece[d] = size
    even = ListV(tail=like(t, piece), tail_count=sym.floordiv(s[d], size))
    divides = _divides(size, s[d])
    if divides is True:
        return even
    uneven = Unknown(f"split of {sym.dim_pretty(s[d])} into pieces of {sym.dim_pretty(size)}: the last "
                     f"piece is shorter when it does not divide evenly")
    if divides is False:
        return uneven
    cond = sympy.Eq(sympy.Mod(s[d], size), 0)
    return union([(cond, even), (sympy.Not(cond), uneven)])


def _divides(k, n):
    """Whether ``k`` divides ``n`` for every value of the symbols (True/False/None)."""
    if sym.is_concrete(k) and k == 1:
        return True
    if n is None or k is None:
        return None
    if sym.is_concrete(n) and sym.is_concrete(k):
        return n % k == 0
    q = sympy.cancel(sympy.sympify(n) / sympy.sympify(k))
    if sympy.fraction(q)[1] == 1 and _int_valued(q):
        return True
    return sym.equal(sym.mod(n, k), 0)


def _int_valued(e) -> bool:
    try:
        return bool(e.is_integer)
    except AttributeError:
        return False


@op("split_with_sizes", methods=("split_with_sizes",))
def split_with_sizes(ctx, input, split_sizes, dim=0):
    return split(ctx, input, split_sizes, dim)


@op("tensor_split", torch.tensor_split, methods=("tensor_split",))
def tensor_split(ctx, input, sections=None, dim=0, *, indices=None, tensor_indices_or_sections=None):
    # torch's three overloads name the second argument sections, indices or a tensor
    given = [v for v in (sections, indices, tensor_indices_or_sections) if not is_none(v)]
    if len(given) != 1:
        raise shape_fns.ShapeError("SI007", "tensor_split() takes one of sections, indices, "
                                   "tensor_indices_or_sections")
    s = shape_of(input)
    d = shape_fns.normalize_dim(_int(dim), len(s))
    if hasattr(given[0], "shape"):
        raise RuleUnknown("tensor_split at points held in a tensor depends on its data")
    n = py(given[0])
    if not isinstance(n, int) and not (isinstance(n, tuple) and all(isinstance(i, int) for i in n)):
        raise RuleUnknown("tensor_split sections are not concrete ints")
    sizes = shape_fns.tensor_split_sizes(s[d], n)
    return _pieces(T(input), [tuple(s[:d]) + (k,) + tuple(s[d + 1:]) for k in sizes])


@op("chunk", torch.chunk, methods=("chunk",))
def chunk(ctx, input, chunks, dim=0):
    t = T(input)
    s = shape_of(input)
    d = shape_fns.normalize_dim(_int(dim), len(s))
    n = _int(chunks, "chunks")
    if sym.is_concrete(s[d]):
        sizes = shape_fns.chunk_sizes(s[d], n)
        return _pieces(t, shape_fns.split_shapes(s, sizes, d))
    # symbolic size: n equal chunks when n divides it (the common case: 2*C -> C, C);
    # otherwise torch makes chunks of ceil(size/n), the last one shorter
    size = s[d]

    def pieces(sizes):
        return _pieces(t, [tuple(s[:d]) + (k,) + tuple(s[d + 1:]) for k in sizes])

    even = pieces([sym.floordiv(size, n)] * n)
    divides = _divides(n, size)
    if divides is True or n == 1:
        return even
    c = sym.ceildiv(size, n)
    uneven = pieces([c] * (n - 1) + [sym.sub(size, sym.mul(n - 1, c))])
    # with a remainder there are n chunks only when the first n - 1 leave some behind
    # (chunk(4, 3) gives 2 chunks of 2): fewer chunks is left unknown
    fewer = Unknown(f"chunk of {sym.dim_pretty(size)} into {n} gives fewer than {n} chunks when "
                    f"{sym.dim_pretty(size)} <= {sym.dim_pretty(sym.mul(n - 1, c))}")
    full = sym.compare("<", sym.mul(n - 1, c), size)
    if full is True:
        options = [(sympy.true, uneven)]
    elif full is False:
        options = [(sympy.true, fewer)]
    else:
        lt = sympy.Lt(sympy.sympify(sym.mul(n - 1, c)), sympy.sympify(size))
        options = [(lt, uneven), (sympy.Not(lt), fewer)]
    cond = sympy.Eq(sympy.Mod(size, n), 0)
    if divides is False:
        return union(options)
    return union([(cond, even)] + [(sympy.And(sympy.Not(cond), c2), v) for c2, v in options])


@op("unbind", torch.unbind, methods=("unbind",))
def unbind(ctx, input, dim=0):
    t = T(input)
    s = shape_of(input)
    d = shape_fns.normalize_dim(_int(dim), len(s))
    rest = s[:d] + s[d + 1:]
    if sym.is_concrete(s[d]):
        return _pieces(t, [rest] * s[d])
    return ListV(tail=like(t, rest), tail_count=s[d])


@op("atleast_2d", torch.atleast_2d)
def atleast_2d(ctx, input):
    s = shape_of(input)
    return like(T(input), ((1,) * (2 - len(s)) + s) if len(s) < 2 else s)


@op("pixel_shuffle", torch.pixel_shuffle, torch.nn.functional.pixel_shuffle)
def pixel_shuffle(ctx, input, upscale_factor):
    return like(T(input), shape_fns.pixel_shuffle_shape(shape_of(input), _int(upscale_factor)))


@op("pixel_unshuffle", torch.pixel_unshuffle, torch.nn.functional.pixel_unshuffle)
def pixel_unshuffle(ctx, input, downscale_factor):
    return like(T(input), shape_fns.pixel_unshuffle_shape(shape_of(input), _int(downscale_factor)))


_ = Unknown


@op("Tensor.unfold", methods=("unfold",))
def tensor_unfold(ctx, input, dimension, size, step):
    """Sliding windows: dim becomes the number of windows, a last dim of ``size``."""
    s = list(shape_of(input))
    k, st = _int(size, "size"), _int(step, "step")
    if not s:
        return like(T(input), (k,))
    d = shape_fns.normalize_dim(_int(dimension), len(s))
    windows = sym.add(sym.floordiv(sym.sub(s[d], k), st), 1)
    if sym.compare(">=", s[d], k) is False:
        raise shape_fns.ShapeError("SI143", f"unfold: size {k} is larger than the dimension "
                                   f"{sym.dim_pretty(s[d])}", (s[d], k))
    if sym.compare(">=", s[d], k) is None:
        shape_fns.require_equal(sym.normalize(sympy.Max(s[d], k)), s[d], "SI143",
                                f"unfold: windows of {k} fit in {sym.dim_pretty(s[d])}")
    s[d] = windows
    return like(T(input), tuple(s) + (k,))


@op("diff", torch.diff, methods=("diff",))
def diff(ctx, input, n=1, dim=-1, prepend=None, append=None, *, out=None):
    s = list(shape_of(input))
    d = shape_fns.normalize_dim(_int(dim), len(s))
    size = s[d]
    for extra in (prepend, append):
        if not is_none(extra):
            size = sym.add(size, shape_of(extra)[d] if T(extra).shape else 1)
    s[d] = sym.sub(size, _int(n))
    return like(T(input), s)
