"""Reading a small integer value computed only from data: on the host, without a barrier.

A read of a pending value cuts the step's graph: everything recorded so far is compiled
and run, and the step goes on in a second graph. Some reads need none of that: the value
depends only on tensors already on the device, through a few integer or boolean ops
(``lengths.max().item()`` on lengths moved to the device, ``(labels != -100).sum()``,
the inverse permutation torch's ``pad_packed_sequence`` reads with ``.cpu()``). Such a
value is computed here by torch's own CPU kernels from the data (ints and bools: exactly
what the graph would compute), and the recorded graph goes on uncut.

Floating-point results are left to the graph (XLA's and torch's kernels may round
differently, and a value read must be the value the graph goes on with), except those of
ops that never round (``_EXACT_ON_FLOATS``: triangles, views, negation, padding, max
pooling) and of arithmetic that did not round on the values at hand
(``_EXACT_WHERE_CHECKED``, ``_exact``: the result equals float64's) inside the cone of an
integer or boolean read. Random ops, large values and long chains are left too. Each
fold is counted (``host_folds``): a forward replay refuses a call that folds, as it
refuses one that reads (the value could steer Python control flow that a replay would
not run again); a whole-step replay keeps a fold of host-made constants (its
``program`` and leaves' ``recipes``) and runs it again where sizes change.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from . import dtypes, ir
from .metrics import METRICS

MAX_NODES = 64           # ops in the folded cone
MAX_ELEMENTS = 1 << 20   # elements of each value in it
_CPU = torch.device("cpu")


def _foldable_type(dtype) -> bool:
    return isinstance(dtype, torch.dtype) and not (dtype.is_floating_point or
                                                   dtype.is_complex)


_a = torch.ops.aten
# Ops whose floating-point results are exact (they move, pick or negate values and never
# round): folded as integers are, where a read's cone passes through them (the triangle
# ``nn.Transformer``'s decoder compares with one of its own every call, ``(mask ==
# causal).all()``: a read that cut every seq2seq step in two)
_EXACT_ON_FLOATS = frozenset((
    _a.triu.default, _a.tril.default, _a.clone.default, _a.alias.default,
    _a.view.default, _a._unsafe_view.default, _a.expand.default, _a.permute.default,
    _a.t.default, _a.transpose.int, _a.unsqueeze.default, _a.squeeze.dim,
    _a.squeeze.dims, _a.select.int, _a.slice.Tensor, _a.flip.default, _a.cat.default,
    _a.neg.default, _a.abs.default, _a.where.self, _a.masked_fill.Scalar,
    _a.maximum.default, _a.minimum.default,
    # (and these: they pick, pad with or put values, the constant rounded to the type
    # by both as a conversion: CANINE's mask max-pooled to its molecules, Longformer's
    # padded to its window and given its global tokens)
    _a.max_pool2d_with_indices.default, _a.max_pool3d_with_indices.default,
    _a.amax.default, _a.amin.default, _a.max.dim, _a.min.dim, _a.max.default,
    _a.min.default, _a.constant_pad_nd.default, _a.clamp.default, _a.index.Tensor,
    _a.index_put.default, _a.masked_fill.Tensor, _a.gather.default))
# Ops that round in general, folded where they did not (``_exact``): each result must
# equal the same op's in float64 (a conversion: its value converted back). An exact
# result is every correctly rounded kernel's, a fused multiply-add's too once the product
# is exact: LED's extended mask ``(1.0 - mask) * finfo.min``, its 0/1 mask converted.
_EXACT_WHERE_CHECKED = frozenset((
    _a.add.Tensor, _a.add.Scalar, _a.sub.Tensor, _a.sub.Scalar, _a.rsub.Scalar,
    _a.rsub.Tensor, _a.mul.Tensor, _a.mul.Scalar, _a._to_copy.default))
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _folds_as(op, dtype) -> bool:
    return _foldable_type(dtype) or dtype in _FLOATS and (
        op in _EXACT_ON_FLOATS or op in _EXACT_WHERE_CHECKED or op is ir.GETITEM)


def _widened(v):
    """A tensor argument in float64 (an integer one too: times a Python float its product
    would be float32, the default type, again)."""
    return v.double() if isinstance(v, torch.Tensor) and not v.is_complex() else v


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _exact(op, args, kwargs, out) -> bool:
    """Whether ``out`` (op's floating-point result on the CPU) is exact: the same op in
    float64, or the conversion's value converted back, gives it; and no result is
    subnormal (XLA:CPU may flush those to zero). An ``alpha`` other than 1 (torch's CPU
    add fuses it into a multiply-add) is not checked: refused."""
    if op is _a._to_copy.default:
        return _exact_conversion(args[0], out)
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return True
    if _subnormal(out) or kwargs.get("alpha", 1) != 1:
        return False
    wide = op(*[_widened(a) for a in args], **kwargs)
    return _same_values(out.double(), wide.double())


def _subnormal(out: torch.Tensor) -> bool:
    return bool(((out != 0) & (out.abs() < torch.finfo(out.dtype).tiny)).any())


def _exact_conversion(source, out) -> bool:
    """Whether a conversion gave the same on any kernel: to a float type, the value
    itself (finite, not subnormal, converted back unchanged); from a float type to an
    integer one, finite values inside the type's range (C leaves the others undefined:
    torch's CPU kernel gives the type's minimum for NaN where XLA saturates, NaN to 0)."""
    if not isinstance(source, torch.Tensor) or not isinstance(out, torch.Tensor):
        return False
    if out.is_floating_point():
        return bool(out.isfinite().all()) and not _subnormal(out) and \
            _same_values(out.to(source.dtype), source)
    if source.is_floating_point() and out.dtype != torch.bool:
        info, wide = torch.iinfo(out.dtype), source.double()
        return bool(((wide > float(info.min) - 1.0) & (wide < float(info.max) + 1.0)).all())
    return True


def _cone(node: ir.Node):
    """The op nodes ``node`` depends on, inputs first, and the leaves they read; None if
    the cone is not small, settled and integral."""
    order, leaves, seen = [], [], set()
    stack = [(node, False)]
    while stack:
        n, expanded = stack.pop()
        if id(n) in seen:
            continue
        if n.op is ir.DATA or n.op is ir.SCALAR:
            seen.add(id(n))
            leaves.append(n)
            continue
        if n.op in ir.LEAVES:   # a random stream position, or an error
            return None
        if expanded:
            seen.add(id(n))
            order.append(n)
            continue
        types = n.dtype if isinstance(n.dtype, tuple) else (n.dtype,)
        shapes = n.shape if isinstance(n.dtype, tuple) else (n.shape,)
        if len(order) >= MAX_NODES or not all(
                t is None or (_folds_as(n.op, t) if n is not node else _foldable_type(t))
                and int(np.prod(s)) <= MAX_ELEMENTS for t, s in zip(types, shapes)):
            return None
        if n.op is not ir.GETITEM and not isinstance(n.op, torch._ops.OpOverload):
            return None
        stack.append((n, True))
        stack.extend((i, False) for i in n.inputs if id(i) not in seen)
    return order, leaves


_aten = torch.ops.aten
# Integer divisions whose CPU kernels divide in C: the type's minimum by -1 traps (SIGFPE,
# the process dies: torch.div(INT_MIN, -1, rounding_mode="trunc") eagerly), so a divisor
# holding -1 is left to the graph (XLA gives the wrapped value).
_DIVISIONS = (_aten.div.Tensor_mode, _aten.div.Scalar_mode, _aten.floor_divide.default,
              _aten.floor_divide.Scalar, _aten.remainder.Tensor, _aten.remainder.Scalar,
              _aten.fmod.Tensor, _aten.fmod.Scalar)


# gcd and lcm divide by values they compute (lcm's INT_MIN / gcd of -1 traps too)
_DIVIDE_INSIDE = (_aten.gcd.default, _aten.lcm.default)


def _may_trap(op, args) -> bool:
    if op in _DIVIDE_INSIDE:
        return True
    if op not in _DIVISIONS or len(args) < 2:
        return False
    divisor = args[1]
    if isinstance(divisor, torch.Tensor):
        return bool((divisor == -1).any())
    return divisor == -1


def _fits(out, shape, dtype) -> bool:
    return isinstance(out, torch.Tensor) and out.device.type == "cpu" and \
        tuple(out.shape) == tuple(shape) and out.dtype == dtype


def program(order, leaves) -> tuple:
    """Cone ``order`` (over ``leaves``) as data: ((op, args, kwargs, inputs), ...), each
    input a position among the leaves' values and then the ops' (what ``run`` takes, and
    what a whole-step replay keeps to compute the value again for other sizes)."""
    pos = {id(n): i for i, n in enumerate(leaves)}
    for k, n in enumerate(order):
        pos[id(n)] = len(leaves) + k
    return tuple((n.op, n.args, n.kwargs, tuple(pos[id(i)] for i in n.inputs))
                 for n in order)


def run(prog, values, types=None):
    """The last value of program ``prog`` (``program``) on the leaves' ``values`` (CPU
    tensors, or numbers for scalars), by torch's CPU kernels; None where one of its ops
    cannot run there. ``types``: each op's (shape, dtype) as recorded, checked."""
    vals = list(values)
    for k, (op, args, kwargs, inputs) in enumerate(prog):
        ins = [vals[i] for i in inputs]
        if op is ir.GETITEM:
            vals.append(ins[0][args[0]])
            continue
        filled = ir.fill(args, ins)
        if _may_trap(op, filled):
            return None
        kw = {key: _CPU if key == "device" else ir.fill(v, ins) for key, v in kwargs}
        try:
            out = op(*filled, **kw)
        except Exception:   # not what torch's CPU kernel takes: the graph computes it
            return None
        if op in _EXACT_WHERE_CHECKED and not _exact(op, filled, kw, out):
            return None
        shape, dtype = types[k] if types is not None else (None, None)
        if isinstance(out, (tuple, list)):
            if dtype is not None and (not isinstance(dtype, tuple) or len(out) != len(dtype)
                                      or not all(d is None or _fits(o, s, d) for o, s, d in
                                                 zip(out, shape, dtype))):
                return None
        elif not (_fits(out, shape, dtype) if dtype is not None else
                  isinstance(out, torch.Tensor) and out.device.type == "cpu"):
            return None
        vals.append(out)
    return vals[-1] if prog else None


def value_key(a: np.ndarray) -> tuple:
    """A folded value as compared across traces and replays (``-0.0`` is not ``0.0``)."""
    return a.shape, str(a.dtype), a.tobytes()


def recipes(leaves):
    """How each of a fold's leaves is made again: a host factory's recipe (maker, args,
    kwargs), or (None, value, ()) for a scalar; None where one was not made on the host
    (an argument, the model's state, a value computed on the device)."""
    out = []
    for n in leaves:
        r = (None, n.value, ()) if n.op is ir.SCALAR else ir.HOST_RECIPES.get(n)
        if r is None:
            return None
        out.append(r)
    return tuple(out)


class CopiedValue:
    """A CPU tensor's value copied inside a step (``copied_value``), compared by its value."""

    __slots__ = ("key", "array")

    def __init__(self, array: np.ndarray):
        self.array = np.array(array, copy=True)
        self.key = value_key(self.array)

    def __eq__(self, other):
        return isinstance(other, CopiedValue) and other.key == self.key

    def __hash__(self):
        return hash(self.key)

    def tensor(self) -> torch.Tensor:
        return dtypes.numpy_to_tensor(self.array)


def copied_value(n):
    """The value (a ``CopiedValue``) of DATA leaf ``n`` where it copies a small CPU tensor
    that is gone (made from Python values inside a step, and dropped: a constant as Python
    numbers are); None for any other leaf (a CPU tensor still held elsewhere may change)."""
    source = ir.COPIED.get(n)
    if source is None or source() is not None:
        return None
    return CopiedValue(np.asarray(n.value))


def remade(recipes) -> list:
    """The leaves' values made again from their ``recipes`` (what ``run`` takes)."""
    return [value if maker is None else
            dtypes.numpy_to_tensor(np.asarray(maker(*value, **dict(kwargs)).value))
            for maker, value, kwargs in recipes]


def holds(recipes, prog, value) -> bool:
    """Whether a fold (its leaves' ``recipes`` and its ``program``) computes ``value``
    (``value_key``) with its constants made again (a replay at other sizes)."""
    out = run(prog, remade(recipes))
    return out is not None and value_key(dtypes.tensor_to_numpy(out)) == value


# Called with each fold: (its ``program``, its leaves, its value): the replays keep the
# folds of a call whose leaves are host-made constants (``observed``).
OBSERVERS: list = []


@contextlib.contextmanager
def observed():
    """Within: the list of the folds made, as ``OBSERVERS`` are told of them."""
    folds: list = []
    OBSERVERS.append(lambda *record: folds.append(record))
    try:
        yield folds
    finally:
        OBSERVERS.pop()


def leaf_reads(folds) -> int:
    """The host reads (``transfers_to_host``) ``folds`` made: one per data leaf."""
    return sum(n.op is ir.DATA for _, leaves, _ in folds for n in leaves)


def fold(node: ir.Node, read_leaf):
    """Pending ``node``'s value as a numpy array computed on the host (``read_leaf``
    gives a DATA leaf's), or None where it cannot be (see the module's docstring)."""
    cone = _cone(node)
    if cone is None:
        return None
    order, leaves = cone
    vals = []
    for n in leaves:
        if n.op is ir.SCALAR:
            vals.append(n.value)
        elif n.value is None or n.shape is None:
            return None
        else:
            vals.append(dtypes.numpy_to_tensor(read_leaf(n)))
    prog = program(order, leaves)
    out = run(prog, vals, [(n.shape, n.dtype) for n in order])
    if not isinstance(out, torch.Tensor):
        return None
    METRICS.host_folds += 1
    value = dtypes.tensor_to_numpy(out)
    for observe in OBSERVERS:
        observe(prog, leaves, value)
    return value
