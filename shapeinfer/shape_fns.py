"""Pure shape functions, shared by the analyzer and the lazy runtime.

Every function takes shapes as tuples of dims (``int``, sympy expression, or ``None``
for unknown; see ``symbolic``) and plain Python hyper-parameters, and returns the
output shape. With int dims they are exact and fast (the runtime's path); with symbolic
dims they give expressions (the analyzer's path).

A definite error raises ``ShapeError`` with a stable code. A requirement that holds for
some symbol values only (``T == 16``) is reported through ``require`` and the result is
computed as if it held: the analyzer turns it into a constraint diagnostic.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Callable, Optional, Sequence

import sympy

from . import symbolic as sym
from .diagnostics import reporting_dims
from .symbolic import Dim, Shape


class ShapeError(Exception):
    """A shape that is wrong for every value of the symbols, or for every value but those
    where ``unless`` (a sympy condition) holds. ``code`` is stable."""

    def __init__(self, code: str, message: str, dims: Sequence = (), unless=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.dims = tuple(dims)
        self.unless = unless


# Requirements that hold only for some symbol values are sent to the active sink.
_requirement_sink: contextvars.ContextVar[Optional[Callable]] = contextvars.ContextVar(
    "shape_requirement_sink", default=None)


@contextlib.contextmanager
def collect_requirements(sink: Callable[[str, Dim, Dim, str], None]):
    token = _requirement_sink.set(sink)
    try:
        yield
    finally:
        _requirement_sink.reset(token)


def _send_requirement(op: str, a: Dim, b: Dim, what: str) -> None:
    sink = _requirement_sink.get()
    if sink is not None:
        with reporting_dims((a, b)):
            sink(op, a, b, what)


def require_equal(a: Dim, b: Dim, code: str, what: str) -> None:
    """Check ``a == b``: raise if never equal, report a requirement if only sometimes."""
    verdict = sym.equal(a, b)
    if verdict is False:
        raise ShapeError(code, f"{what}: {sym.dim_pretty(a)} != {sym.dim_pretty(b)}", (a, b))
    if verdict is None and a is not None and b is not None:
        limit = _size_limit(a, b)
        if limit is not None:
            _send_requirement("<=", *limit, what)
        else:
            _send_requirement("==", a, b, what)


def _size_limit(a: Dim, b: Dim) -> Optional[tuple]:
    """(x, c) when ``a == b`` reads ``x == Min(x, c)``, which holds exactly when x <= c:
    a table of c rows sliced to x (positional encodings) fits x up to c."""
    for x, y in ((a, b), (b, a)):
        if isinstance(y, sympy.Min) and len(y.args) == 2 and x in y.args:
            return x, y.args[1] if y.args[0] == x else y.args[0]
    return None


def normalize_dim(dim: int, ndim: int, what: str = "dim") -> int:
    if not isinstance(dim, int):
        raise ShapeError("SI200", f"{what} must be a concrete int, got {dim!r}")
    lo, hi = (-ndim, ndim - 1) if ndim > 0 else (-1, 0)
    if not lo <= dim <= hi:
        raise ShapeError("SI201", f"{what} {dim} out of range for a tensor of rank {ndim}")
    return dim + ndim if dim < 0 and ndim > 0 else (0 if dim < 0 else dim)


def normalize_dims(dims, ndim: int) -> tuple[int, ...]:
    out = tuple(normalize_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise ShapeError("SI202", f"dims {tuple(dims)} repeat a dimension")
    return out


# ---- elementwise ------------------------------------------------------------------


def broadcast_dims(a: Dim, b: Dim) -> Dim:
    a_one, b_one = sym.equal(a, 1), sym.equal(b, 1)  # the path condition may pin a symbol to 1
    if a == 1 or a_one is True:
        return b
    if b == 1 or b_one is True:
        return a
    if a is None or b is None:
        return None  # one of them could be 1: the result is not known
    verdict = sym.equal(a, b)
    if verdict is True:
        return a
    if verdict is False:
        return _broadcast_unequal(a, b, a_one, b_one)
    require_equal(a, b, "SI101", "broadcast")
    return a if not sym.is_concrete(a) or sym.is_concrete(b) else b


def _broadcast_unequal(a: Dim, b: Dim, a_one, b_one) -> Dim:
    """Broadcast two sizes that are never equal: an error, except where one that may be 1
    is 1 (``B`` with ``2*B`` broadcasts at B = 1 only)."""
    may_be_one = [d for d, one in ((a, a_one), (b, b_one)) if one is not False]
    unless = sympy.Or(*[sympy.Eq(sympy.sympify(d), 1) for d in may_be_one]) if may_be_one else None
    text = " or ".join(f"{sym.dim_pretty(d)} == 1" for d in may_be_one)
    raise ShapeError("SI101", f"cannot broadcast {sym.dim_pretty(a)} with {sym.dim_pretty(b)}"
                     + (f" (only where {text})" if text else ""), (a, b), unless)


def broadcast_shapes(*shapes: Shape) -> Shape:
    fast = _broadcast_concrete(shapes)
    if fast is not None:
        return fast
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * ndim
    for s in shapes:
        padded = (1,) * (ndim - len(s)) + tuple(s)
        out = [broadcast_dims(x, y) for x, y in zip(out, padded)]
    return tuple(out)


def _broadcast_concrete(shapes) -> Optional[Shape]:
    """``broadcast_shapes`` of plain integer sizes that broadcast (the lazy runtime's case,
    every recorded op), without the symbolic path's calls per dim; None for anything else
    (symbols, unknowns, a mismatch: the general path decides and explains)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        off = ndim - len(s)
        for i, d in enumerate(s):
            if type(d) is not int:
                return None
            o = out[off + i]
            if o == 1:
                out[off + i] = d
            elif d != 1 and d != o:
                return None
    return tuple(out)


# ---- layout -----------------------------------------------------------------------


def numel(shape: Shape) -> Dim:
    return sym.product(shape)


def reshape_shape(shape: Shape, target: Sequence[Dim]) -> Shape:
    """view/reshape: solve a single -1 so that the element count is preserved."""
    target = tuple(target)
    fast = _reshape_concrete(shape, target)
    if fast is not None:
        return fast
    bad = [d for d in target if sym.is_concrete(d) and d < -1]
    if bad:
        raise ShapeError("SI111", f"invalid shape dimension {bad[0]} in {sym.shape_str(target)}")
    holes = [i for i, d in enumerate(target) if sym.is_concrete(d) and d == -1]
    if len(holes) > 1:
        raise ShapeError("SI110", "only one dimension can be inferred (-1)")
    total = numel(shape)
    if holes:
        known = sym.product(d for i, d in enumerate(target) if i != holes[0])
        # torch infers -1 only when the other sizes multiply to a nonzero number: with
        # zero elements any value would do, and otherwise none does
        if sym.equal(known, 0) is True:
            raise ShapeError("SI110", f"cannot infer -1 in {sym.shape_str(target)}: the other sizes multiply "
                             f"to 0 ({'any size fits 0 elements' if sym.equal(total, 0) is True else 'none fits'})")
        if sym.compare(">", known, 0) is None and known is not None:
            require_greater(known, 0, "SI110", f"view/reshape into {sym.shape_str(target)} infers -1 only "
                            f"when the other sizes are nonzero")
        if total is None or known is None:
            solved = None
        else:
            solved = _exact_div(total, known)
        return target[: holes[0]] + (solved,) + target[holes[0] + 1:]
    if total is not None and None not in target:
        require_equal(total, numel(target), "SI111", f"view/reshape of {sym.shape_str(shape)} "
                      f"into {sym.shape_str(target)}: element counts differ")
    return target


def _reshape_concrete(shape, target):
    """The result of a valid reshape between all-int shapes (the runtime's hot path, one
    per recorded view), or None: symbolic sizes and every error take the general path."""
    if not all(type(d) is int for d in shape) or not all(type(d) is int for d in target):
        return None
    total = math.prod(shape)
    holes = target.count(-1)
    if min(target, default=0) < -1 or holes > 1:
        return None
    if holes == 0:
        return target if math.prod(target) == total else None
    known = -math.prod(target)
    if known <= 0 or total % known:
        return None
    i = target.index(-1)
    return target[:i] + (total // known,) + target[i + 1:]


def view_dtype_shape(shape: Shape, old_itemsize: int, new_itemsize: int) -> Shape:
    """Tensor.view(dtype): the same bytes, so the last dim scales by the ratio of element
    sizes (a larger element needs the last dim divisible by the ratio). Strides are not
    modelled: torch also needs the last dim contiguous."""
    if old_itemsize == new_itemsize:
        return tuple(shape)
    if len(shape) == 0:
        raise ShapeError("SI111", "view(dtype) of a 0-d tensor to a dtype of another element size")
    last = shape[-1]
    if new_itemsize < old_itemsize:
        return tuple(shape[:-1]) + (sym.mul(last, old_itemsize // new_itemsize),)
    ratio = new_itemsize // old_itemsize
    require_equal(sym.mod(last, ratio), 0, "SI111", f"view(dtype): last dim {sym.dim_pretty(last)} "
                  f"divisible by {ratio}")
    return tuple(shape[:-1]) + (sym.floordiv(last, ratio),)


def _exact_div(total: Dim, known: Dim) -> Dim:
    """total / known where the quotient must be a whole number."""
    if sym.is_concrete(total) and sym.is_concrete(known):
        if total % known:
            raise ShapeError("SI111", f"shape is invalid for input of size {total}", (total, known))
        return total // known
    q = sympy.cancel(sympy.sympify(total) / sympy.sympify(known))
    if q.is_Rational and not q.is_Integer:
        raise ShapeError("SI111", f"shape is invalid: {sym.dim_pretty(total)} elements not divisible "
                         f"by {sym.dim_pretty(known)}", (total, known))
    # together: a sum such as B*floor(H/16)/2 - 3*B/2 has its denominator inside the terms
    num, den = sympy.fraction(sympy.together(q))
    if den != 1:
        require_equal(sym.mod(num, den), 0, "SI111",
                      f"{sym.dim_pretty(total)} elements divisible by {sym.dim_pretty(known)}")
    return sym.normalize(q)


def permute_shape(shape: Shape, dims: Sequence[int]) -> Shape:
    if len(dims) != len(shape):
        raise ShapeError("SI112", f"permute of a rank-{len(shape)} tensor {sym.shape_str(shape)} needs "
                         f"{len(shape)} dims, got {len(dims)}", shape)
    dims = normalize_dims(dims, len(shape))
    return tuple(shape[d] for d in dims)


def transpose_shape(shape: Shape, d0: int, d1: int) -> Shape:
    d0, d1 = normalize_dim(d0, len(shape)), normalize_dim(d1, len(shape))
    out = list(shape)
    out[d0], out[d1] = out[d1], out[d0]
    return tuple(out)


def squeeze_shape(shape: Shape, dims: Optional[Sequence[int]] = None) -> Shape:
    """Drop the size-1 dims (all, or those in ``dims``). A dim that may or may not be 1
    (unknown, or a symbol such as B) makes the rank unknown: None."""
    nd = range(len(shape)) if dims is None else (normalize_dims(dims, len(shape)) if shape else ())
    out = []
    for i, d in enumerate(shape):
        if i not in nd:
            out.append(d)
            continue
        one = sym.equal(d, 1)
        if one is None:
            return None
        if not one:
            out.append(d)
    return tuple(out)


def unsqueeze_shape(shape: Shape, dim: int) -> Shape:
    dim = normalize_dim(dim, len(shape) + 1)
    return tuple(shape[:dim]) + (1,) + tuple(shape[dim:])


def flatten_shape(shape: Shape, start: int = 0, end: int = -1) -> Shape:
    if len(shape) == 0:
        return (1,)
    start, end = normalize_dim(start, len(shape)), normalize_dim(end, len(shape))
    if start > end:
        raise ShapeError("SI113", "flatten: start_dim cannot come after end_dim")
    return tuple(shape[:start]) + (numel(shape[start:end + 1]),) + tuple(shape[end + 1:])


def unflatten_shape(shape: Shape, dim: int, sizes: Sequence[Dim]) -> Shape:
    dim = normalize_dim(dim, len(shape))
    inner = reshape_shape((shape[dim],), sizes)
    return tuple(shape[:dim]) + tuple(inner) + tuple(shape[dim + 1:])


def expand_shape(shape: Shape, sizes: Sequence[Dim]) -> Shape:
    sizes = tuple(sizes)
    if len(sizes) < len(shape):
        raise ShapeError("SI114", f"expand: {len(sizes)} sizes for a rank-{len(shape)} tensor "
                         f"{sym.shape_str(shape)}", shape)
    lead = len(sizes) - len(shape)
    out = list(sizes[:lead])
    for have, want in zip(shape, sizes[lead:]):
        if sym.is_concrete(want) and want == -1:
            out.append(have)
        elif have == 1:
            out.append(want)
        else:
            require_equal(have, want, "SI114", "expand of a non-singleton dimension")
            out.append(have if want is None else want)
    return tuple(out)


def repeat_shape(shape: Shape, repeats: Sequence[Dim]) -> Shape:
    repeats = tuple(repeats)
    if len(repeats) < len(shape):
        raise ShapeError("SI114", "repeat: fewer repeat counts than dimensions")
    padded = (1,) * (len(repeats) - len(shape)) + tuple(shape)
    return tuple(sym.mul(d, r) for d, r in zip(padded, repeats))


def cat_shape(shapes: Sequence[Shape], dim: int = 0) -> Shape:
    shapes = [s for s in shapes if not (len(s) == 1 and s[0] == 0)]  # legacy empty tensors
    if not shapes:
        raise ShapeError("SI115", "cat of an empty sequence")
    rank = len(shapes[0])
    d = normalize_dim(dim, rank)
    out = list(shapes[0])
    for s in shapes[1:]:
        if len(s) != rank:
            raise ShapeError("SI115", f"cat: tensors of rank {rank} and {len(s)}: {sym.shape_str(shapes[0])} "
                             f"and {sym.shape_str(s)}", tuple(shapes[0]) + tuple(s))
        for i in range(rank):
            if i == d:
                out[i] = sym.add(out[i], s[i])
            else:
                require_equal(out[i], s[i], "SI115", f"cat along dim {dim}: sizes of dim {i} differ")
                out[i] = out[i] if out[i] is not None else s[i]
    return tuple(out)


def stack_shape(shapes: Sequence[Shape], dim: int = 0) -> Shape:
    if not shapes:
        raise ShapeError("SI115", "stack of an empty sequence")
    first = tuple(shapes[0])
    for s in shapes[1:]:
        if len(s) != len(first):
            raise ShapeError("SI115", f"stack: tensors of rank {len(first)} and {len(s)}: {sym.shape_str(first)} "
                             f"and {sym.shape_str(s)}", first + tuple(s))
        for i, (x, y) in enumerate(zip(first, s)):
            require_equal(x, y, "SI115", f"stack: sizes of dim {i} differ")
    d = normalize_dim(dim, len(first) + 1)
    return first[:d] + (len(shapes),) + first[d:]


def split_shapes(shape: Shape, split, dim: int = 0) -> list[Shape]:
    """torch.split: ``split`` is a chunk size or a list of section sizes."""
    d = normalize_dim(dim, len(shape))
    size = shape[d]
    if isinstance(split, (list, tuple)):
        if size is not None and None not in split:
            require_equal(sum_dims(split), size, "SI116",
                          f"split sections {list(split)} must add up to {sym.dim_pretty(size)}")
        return [tuple(shape[:d]) + (s,) + tuple(shape[d + 1:]) for s in split]
    if not sym.is_concrete(size):
        raise ShapeError("SI117", "split of a symbolic dimension gives a symbolic number of pieces")
    pieces = []
    start = 0
    while start < size or (size == 0 and not pieces):
        n = min(split, size - start)
        pieces.append(tuple(shape[:d]) + (n,) + tuple(shape[d + 1:]))
        start += split
        if size == 0:
            break
    return pieces


def sum_dims(dims: Sequence[Dim]) -> Dim:
    out: Dim = 0
    for d in dims:
        out = sym.add(out, d)
    return out


def chunk_sizes(size: Dim, chunks: int) -> list[Dim]:
    """torch.chunk along a concrete size: chunks of ceil(size/chunks)."""
    if not sym.is_concrete(size):
        raise ShapeError("SI117", "chunk of a symbolic dimension")
    if size == 0:
        return [0] * chunks  # torch gives `chunks` empty pieces
    step = -(-size // chunks)
    out = []
    start = 0
    while start < size:
        out.append(min(step, size - start))
        start += step
    return out or [0]


def narrow_dim(size: Dim, start: Dim, stop: Dim, step: int = 1) -> Dim:
    """Length of ``range(size)[start:stop:step]`` with Python clamping; None bounds
    mean the default. Symbolic bounds are resolved when their sign is decidable."""
    if step == 0:
        raise ShapeError("SI120", "slice step cannot be zero")
    if step < 0:
        raise ShapeError("SI120", "negative slice steps are not supported by torch tensors")
    lo = _clamp_index(start, size, default=0)
    hi = _clamp_index(stop, size, default=size)
    if lo is None or hi is None:
        return None
    if isinstance(lo, sympy.Max) and len(lo.args) == 2 and 0 in lo.args:
        # hi - max(a, 0) == min(hi - a, hi): x[-2:] has min(T, 2) rows
        a = lo.args[0] if lo.args[1] == 0 else lo.args[1]
        length = sym.normalize(sympy.Min(sympy.sympify(hi) - a, sympy.sympify(hi)))
    else:
        length = sym.sub(hi, lo)
    nonneg = sym.compare(">=", length, 0)
    if nonneg is False:
        return 0
    if nonneg is None:
        length = sym.normalize(sympy.Max(length, 0))
    return sym.ceildiv(length, step) if step != 1 else length


def tensor_split_sizes(size: Dim, sections_or_indices) -> list[Dim]:
    """tensor_split: n sections (the first ``size % n`` one longer, piece i has
    ceil((size - i) / n)), or pieces between split points sliced as ``x[a:b]``."""
    if isinstance(sections_or_indices, int):
        n = sections_or_indices
        if n <= 0:
            raise ShapeError("SI116", f"tensor_split: number of sections must be at least one, got {n}")
        return [sym.floordiv(sym.add(size, n - 1 - i), n) for i in range(n)]
    bounds = [0] + list(sections_or_indices) + [None]
    return [narrow_dim(size, a, b) for a, b in zip(bounds, bounds[1:])]


def _clamp_index(i: Dim, size: Dim, default: Dim) -> Dim:
    if i is None:
        return default
    if size is None:
        return None if not (sym.is_concrete(i) and i == 0) else 0
    neg = sym.compare("<", i, 0)
    if neg is None:
        return None
    if neg:
        i = sym.add(size, i)
        below = sym.compare("<", i, 0)
        if below is None:  # x[-2:] of a size that may be smaller than 2
            return sym.normalize(sympy.Max(i, 0))
        return 0 if below else i
    above = sym.compare(">", i, size)
    if above is None:
        return sym.normalize(sympy.Min(i, size))
    return size if above else i


# ---- reductions and contractions ----------------------------------------------------


def reduce_shape(shape: Shape, dims=None, keepdim: bool = False) -> Shape:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(1 for _ in shape) if keepdim else ()
    if isinstance(dims, int):
        dims = (dims,)
    nd = normalize_dims(dims, len(shape))
    if keepdim:
        return tuple(1 if i in nd else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in nd)


def matmul_shape(a: Shape, b: Shape) -> Shape:
    if len(a) == 0 or len(b) == 0:
        raise ShapeError("SI130", f"matmul needs tensors of rank >= 1, got {sym.shape_str(a)} @ "
                         f"{sym.shape_str(b)}", tuple(a) + tuple(b))
    if len(a) == 1 and len(b) == 1:
        require_equal(a[0], b[0], "SI130", "dot product: sizes differ")
        return ()
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    k_a, k_b = a2[-1], b2[-2]
    if not (type(k_a) is int and type(k_b) is int and k_a == k_b):   # (else nothing to prove)
        if sym.equal(k_a, k_b) is False:
            raise ShapeError("SI130", f"matmul: {sym.shape_str(a)} @ {sym.shape_str(b)}: inner "
                             f"sizes {sym.dim_pretty(k_a)} and {sym.dim_pretty(k_b)} differ",
                             (k_a, k_b))
        require_equal(k_a, k_b, "SI130", "matmul inner sizes")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def linear_shape(x: Shape, weight: Shape) -> Shape:
    """F.linear: x[..., in] with weight[out, in] (or [in] for a vector weight)."""
    if len(x) == 0:
        raise ShapeError("SI131", "linear of a 0-d tensor")
    if len(weight) == 1:
        require_equal(x[-1], weight[0], "SI131", "linear: in_features")
        return tuple(x[:-1])
    if sym.equal(x[-1], weight[1]) is False:
        raise ShapeError("SI131", f"linear: input has {sym.dim_pretty(x[-1])} features but the layer "
                         f"expects {sym.dim_pretty(weight[1])} (in_features)", (x[-1], weight[1]))
    require_equal(x[-1], weight[1], "SI131", "linear: in_features")
    return tuple(x[:-1]) + (weight[0],)


def einsum_shape(equation: str, shapes: Sequence[Shape]) -> Shape:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError("SI132", f"einsum: {len(terms)} operands in the equation, {len(shapes)} given")
    sizes: dict[str, Dim] = {}
    ell: Shape = ()
    for term, shape in zip(terms, shapes):
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            if n_ell < 0:
                raise ShapeError("SI132", f"einsum: operand '{term}' has rank {len(shape)}: "
                                 f"{sym.shape_str(shape)}", shape)
            ell = broadcast_shapes(ell, shape[len(head):len(head) + n_ell])
            letters = list(head) + list(tail)
            dims = list(shape[:len(head)]) + list(shape[len(shape) - len(tail):])
        else:
            if len(term) != len(shape):
                raise ShapeError("SI132", f"einsum: operand '{term}' has rank {len(shape)} "
                                 f"({sym.shape_str(shape)}), expected {len(term)}", shape)
            letters, dims = list(term), list(shape)
        for c, d in zip(letters, dims):
            if c in sizes and sizes[c] != 1 and d != 1:
                require_equal(sizes[c], d, "SI132", f"einsum: sizes of '{c}' differ")
            elif c in sizes and sizes[c] == 1:
                sizes[c] = d
            else:
                sizes.setdefault(c, d)
    if not arrow:
        counts = {c: lhs.count(c) for c in sizes}
        rhs = ("..." if ell else "") + "".join(sorted(c for c, n in counts.items() if n == 1))
    out: list[Dim] = []
    i = 0
    while i < len(rhs):
        if rhs.startswith("...", i):
            out.extend(ell)
            i += 3
            continue
        if rhs[i] not in sizes:
            raise ShapeError("SI132", f"einsum: output letter '{rhs[i]}' not in any operand")
        out.append(sizes[rhs[i]])
        i += 1
    return tuple(out)


# ---- convolution, pooling, resampling ----------------------------------------------


def _tuple(v, n: int) -> tuple:
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return tuple(v) * n
        return tuple(v)
    return (v,) * n


def conv_out_dim(size: Dim, kernel: int, stride: int, padding: Dim, dilation: int) -> Dim:
    """floor((size + 2p - d(k-1) - 1)/s) + 1"""
    span = sym.add(sym.sub(sym.add(size, sym.mul(2, padding)), dilation * (kernel - 1)), -1)
    return sym.add(sym.floordiv(span, stride), 1)


def conv_shape(x: Shape, weight: Shape, stride=1, padding=0, dilation=1, groups: int = 1,
               transposed: bool = False, output_padding=0) -> Shape:
    n_spatial = len(weight) - 2
    if len(x) not in (n_spatial + 1, n_spatial + 2):
        raise ShapeError("SI140", f"conv{n_spatial}d expects a {n_spatial + 2}-d input "
                         f"(or {n_spatial + 1}-d unbatched), got {len(x)}-d {sym.shape_str(x)}", x)
    batched = len(x) == n_spatial + 2
    xb = tuple(x) if batched else (1,) + tuple(x)
    in_ch = xb[1]
    if transposed:
        expect_in, out_ch = weight[0], sym.mul(weight[1], groups)
    else:
        expect_in, out_ch = sym.mul(weight[1], groups), weight[0]
    if sym.equal(in_ch, expect_in) is False:
        raise ShapeError("SI141", f"conv: input has {sym.dim_pretty(in_ch)} channels but the layer "
                         f"expects {sym.dim_pretty(expect_in)} (in_channels)", (in_ch, expect_in))
    require_equal(in_ch, expect_in, "SI141", "conv in_channels")
    stride, dilation = _tuple(stride, n_spatial), _tuple(dilation, n_spatial)
    kernel = tuple(weight[2:])
    spatial = []
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * n_spatial
        elif padding == "same":
            return (xb[0], out_ch) + tuple(xb[2:]) if batched else (out_ch,) + tuple(xb[2:])
        else:
            raise ShapeError("SI142", f"unknown padding mode {padding!r}")
    padding = _tuple(padding, n_spatial)
    output_padding = _tuple(output_padding, n_spatial)
    for i in range(n_spatial):
        size = xb[2 + i]
        if transposed:
            # (size - 1) * s - 2p + d(k-1) + output_padding + 1
            out = sym.add(sym.sub(sym.mul(sym.sub(size, 1), stride[i]), 2 * padding[i]),
                          dilation[i] * (kernel[i] - 1) + output_padding[i] + 1)
        else:
            out = conv_out_dim(size, kernel[i], stride[i], padding[i], dilation[i])
        _require_positive(out, "conv output size")
        spatial.append(out)
    result = (xb[0], out_ch) + tuple(spatial)
    return result if batched else result[1:]


def require_greater(a: Dim, b: Dim, code: str, what: str) -> None:
    """Check ``a > b``: raise if never, report a requirement if only for some sizes."""
    verdict = sym.compare(">", a, b)
    if verdict is False:
        raise ShapeError(code, f"{what}: {sym.dim_pretty(a)} <= {sym.dim_pretty(b)}", (a, b))
    if verdict is None and a is not None and b is not None:
        _send_requirement(">", a, b, what)


def _require_positive(d: Dim, what: str) -> None:
    verdict = sym.compare(">", d, 0)
    if verdict is False:
        raise ShapeError("SI143", f"{what} {sym.dim_pretty(d)} is not positive: input too small", (d,))
    if verdict is None and d is not None:
        _send_requirement(">", d, 0, f"{what} (input too small otherwise)")


def pool_shape(x: Shape, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               n_spatial: int = 2) -> Shape:
    if len(x) not in (n_spatial + 1, n_spatial + 2):
        raise ShapeError("SI144", f"pool{n_spatial}d expects a {n_spatial + 1}-d or {n_spatial + 2}-d "
                         f"input, got {sym.shape_str(x)}", x)
    k = _tuple(kernel_size, n_spatial)
    s = _tuple(stride if stride not in (None, [], ()) else kernel_size, n_spatial)
    p, d = _tuple(padding, n_spatial), _tuple(dilation, n_spatial)
    lead = tuple(x[: len(x) - n_spatial])
    out = []
    for i in range(n_spatial):
        if p[i] > (d[i] * (k[i] - 1) + 1) // 2:
            raise ShapeError("SI144", f"pool padding {p[i]} is more than half the kernel "
                             f"{d[i] * (k[i] - 1) + 1}", (p[i], d[i] * (k[i] - 1) + 1))
        size = x[len(x) - n_spatial + i]
        span = sym.add(sym.sub(sym.add(size, 2 * p[i]), d[i] * (k[i] - 1)), -1)
        if ceil_mode:
            o = sym.add(sym.ceildiv(span, s[i]), 1)
            # the last window must start inside the input or left padding; it always does
            # when p + s - 2 < d(k - 1), since ceil(span/s)*s <= span + s - 1
            last_start = sym.mul(sym.sub(o, 1), s[i])
            inside = False if p[i] + s[i] - 2 < d[i] * (k[i] - 1) else \
                sym.compare(">=", last_start, sym.add(size, p[i]))
            if inside is True:
                o = sym.sub(o, 1)
            elif inside is None:
                o = None if not sym.is_concrete(size) else o
        else:
            o = sym.add(sym.floordiv(span, s[i]), 1)
        _require_positive(o, "pool output size")
        out.append(o)
    return lead + tuple(out)


def adaptive_pool_shape(x: Shape, output_size, n_spatial: int = 2) -> Shape:
    out = _tuple(output_size, n_spatial)
    lead = tuple(x[: len(x) - n_spatial])
    spatial = tuple(x[len(x) - n_spatial:])
    return lead + tuple(s if o is None else o for o, s in zip(out, spatial))


def interpolate_shape(x: Shape, size=None, scale_factor=None) -> Shape:
    n_spatial = len(x) - 2
    if size is not None:
        return tuple(x[:2]) + _tuple(size, n_spatial)
    if scale_factor is None:
        raise ShapeError("SI145", "interpolate needs size or scale_factor")
    scales = _tuple(scale_factor, n_spatial)
    out = []
    for dim, sc in zip(x[2:], scales):
        if float(sc).is_integer():
            out.append(sym.mul(dim, int(sc)))
        else:
            out.append(sym.normalize(sympy.floor(sympy.sympify(dim) * sympy.nsimplify(sc)))
                       if dim is not None else None)
    return tuple(x[:2]) + tuple(out)


def pad_shape(x: Shape, pad: Sequence[Dim], mode: str = "constant") -> Shape:
    """F.pad. The other modes than 'constant' pad only the last 1-3 dims of a batched or
    unbatched input; 'reflect' needs each pad below the size it pads, 'circular' at most
    the size (it wraps around once)."""
    if len(pad) % 2:
        raise ShapeError("SI146", "pad needs an even number of values")
    n = len(pad) // 2
    if n > len(x):
        raise ShapeError("SI146", f"pad of {n} dims on a rank-{len(x)} tensor {sym.shape_str(x)}", x)
    if mode != "constant" and len(x) not in (n + 1, n + 2):
        raise ShapeError("SI146", f"{mode} padding of the last {n} dims needs a {n + 1}-d or {n + 2}-d "
                         f"input, got {sym.shape_str(x)}", x)
    out = list(x)
    for i in range(n):
        d = len(x) - 1 - i
        for p in pad[2 * i:2 * i + 2]:
            if mode == "reflect":
                require_greater(x[d], p, "SI146", f"reflect padding {sym.dim_pretty(p)} must be less than "
                                f"the size {sym.dim_pretty(x[d])} it pads")
            elif mode == "circular":
                require_greater(sym.add(x[d], 1), p, "SI146", f"circular padding {sym.dim_pretty(p)} must be "
                                f"at most the size {sym.dim_pretty(x[d])} it pads")
        out[d] = sym.add(sym.add(out[d], pad[2 * i]), pad[2 * i + 1])
    return tuple(out)


def instance_norm_spatial(x: Shape) -> None:
    """Instance norm over batch statistics needs more than one value per channel: torch
    raises when the spatial dims (after batch and channel) multiply to exactly 1."""
    spatial = sym.product(x[2:])
    if sym.is_concrete(spatial):
        if spatial == 1:
            raise ShapeError("SI143", f"instance norm of {sym.shape_str(x)}: one spatial element per "
                             f"channel", x)
        return
    # symbolic dims are positive: the product is 1 exactly when it is not greater
    require_greater(spatial, 1, "SI143", f"instance norm of {sym.shape_str(x)}: more than one spatial element")


def pixel_shuffle_shape(x: Shape, r: int) -> Shape:
    if len(x) < 3:
        raise ShapeError("SI147", f"pixel_shuffle needs a tensor of rank >= 3, got {sym.shape_str(x)}", x)
    c = x[-3]
    cr = sym.floordiv(c, r * r)
    require_equal(sym.mod(c, r * r), 0, "SI147", f"pixel_shuffle: channels divisible by {r * r}")
    return tuple(x[:-3]) + (cr, sym.mul(x[-2], r), sym.mul(x[-1], r))


def pixel_unshuffle_shape(x: Shape, r: int) -> Shape:
    return tuple(x[:-3]) + (sym.mul(x[-3], r * r), sym.floordiv(x[-2], r), sym.floordiv(x[-1], r))


# ---- fft --------------------------------------------------------------------------


def fft_shape(shape: Shape, s, dim, kind: str, default_dims=None) -> Shape:
    """torch.fft: ``kind`` "c2c" (fft, ifft, fftn), "r2c" (rfft, ihfft: the last
    transformed dim becomes n//2 + 1) or "c2r" (irfft, hfft: the last transformed dim
    becomes n, by default 2*(m - 1)). ``s`` are the signal sizes (None for the input's;
    -1 in an entry means that dim's default), ``dim`` the transformed dims; with neither
    ``dim`` nor ``default_dims`` given, the last len(s) dims, or all of them."""
    ndim = len(shape)
    if dim is None:
        dim = default_dims if default_dims is not None else \
            tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
    if s is not None and len(s) != len(dim):
        raise ShapeError("SI132", f"fft: {len(s)} signal sizes for {len(dim)} dims")
    if s is not None and len(s) > ndim:
        raise ShapeError("SI161", f"fft: {len(s)} signal sizes for a rank-{ndim} tensor", shape)
    if ndim == 0 and dim:
        raise ShapeError("SI201", "fft of a 0-d tensor")
    dims = normalize_dims(dim, ndim)
    out = list(shape)
    for i, d in enumerate(dims):
        n = s[i] if s is not None else -1
        last = i == len(dims) - 1
        if sym.is_concrete(n) and n == -1:
            n = sym.mul(2, sym.sub(shape[d], 1)) if kind == "c2r" and last else shape[d]
        if sym.compare(">", n, 0) is False:
            raise ShapeError("SI143", f"fft: invalid number of data points ({sym.dim_pretty(n)})", (n,))
        _require_positive(n, "fft: number of data points")
        out[d] = sym.add(sym.floordiv(n, 2), 1) if kind == "r2c" and last else n
    return tuple(out)
