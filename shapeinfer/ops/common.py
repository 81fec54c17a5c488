"""Helpers for writing shape rules: argument conversion and dtype rules."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from .. import symbolic as sym
from ..interp.calls import RuleUnknown
from ..shape_fns import ShapeError
from ..values import (NONE, Const, ListV, SymScalar, TensorType, TupleV, Unknown, Value, as_dim,
                      int_value, tensor)

__all__ = ["ShapeError", "RuleUnknown", "NONE", "Const", "ListV", "SymScalar", "TensorType", "TupleV",
           "Unknown", "Value", "as_dim", "int_value", "tensor", "sym", "T", "shape_of", "dims_arg",
           "dim_arg", "py", "result_dtype", "like", "is_none", "default_float", "int_dtype",
           "sizes_arg", "sizes_or_keyword", "size_sequence", "to_dtype", "bool_arg", "union", "same_dtype"]


def T(v: Value, what: str = "input") -> TensorType:
    """The argument as a tensor type, or a rule-level error."""
    if isinstance(v, TensorType):
        return v
    if isinstance(v, Const) and isinstance(v.obj, (int, float, bool)):
        return tensor(_scalar_dtype(v.obj), ())
    if isinstance(v, SymScalar):
        return tensor(_kind_dtype(v.kind), ())
    raise RuleUnknown(f"{what} is not a tensor ({type(v).__name__})")


def shape_of(v: Value, what: str = "input") -> tuple:
    t = T(v, what)
    if t.shape is None:
        raise RuleUnknown(f"rank of {what} is unknown")
    return t.shape


def is_none(v) -> bool:
    return v is None or v == NONE


def py(v, what: str = "argument"):
    """A concrete Python value (ints, floats, strings, tuples of them)."""
    if isinstance(v, Const):
        return v.obj
    if isinstance(v, TupleV) or (isinstance(v, ListV) and v.is_concrete):
        return tuple(py(x, what) for x in v.items)
    if isinstance(v, Value):
        raise RuleUnknown(f"{what} is not a concrete value")
    return v


def dim_arg(v, what: str = "dim") -> object:
    """A single size: int, sympy expression, or None when unknown."""
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return v
    if isinstance(v, TensorType):  # a 0-d tensor used as a size
        return None
    return as_dim(v) if isinstance(v, Value) else v


def dims_arg(v, what: str = "dims") -> tuple:
    """A sequence of sizes (tuple, list, torch.Size, or varargs already packed)."""
    if isinstance(v, Const) and isinstance(v.obj, (tuple, list, torch.Size)):
        return tuple(v.obj)
    if isinstance(v, Const) and isinstance(v.obj, int):
        return (v.obj,)
    if isinstance(v, (TupleV, ListV)):
        if isinstance(v, ListV) and not v.is_concrete:
            raise RuleUnknown(f"{what} has a symbolic number of entries")
        return tuple(dim_arg(x, what) for x in v.items)
    if isinstance(v, SymScalar):
        return (v.expr,)
    if isinstance(v, (tuple, list)):
        return tuple(dim_arg(x, what) for x in v)
    raise RuleUnknown(f"{what} is not a sequence of sizes")


def sizes_arg(args: tuple, what: str = "size") -> tuple:
    """``f(2, 3)`` or ``f((2, 3))`` or ``f(torch.Size)``: the sizes as a tuple of dims."""
    if len(args) == 1 and not (isinstance(args[0], Const) and isinstance(args[0].obj, int)) \
            and not isinstance(args[0], SymScalar):
        return dims_arg(args[0], what)
    return tuple(dim_arg(a, what) for a in args)


def sizes_or_keyword(args: tuple, keyword, name: str, opname: str) -> tuple:
    """Sizes torch takes either as varargs (``zeros(2, 3)``, ``zeros((2, 3))``) or by the
    keyword ``name`` (``zeros(size=(2, 3))``), as ``sizes_arg`` reads them. torch refuses
    both at once, and an int by keyword (``zeros(size=2)``)."""
    if is_none(keyword):
        return sizes_arg(args, name)
    if args:
        raise ShapeError("SI007", f"{opname}() got multiple values for argument '{name}'")
    return size_sequence(keyword, name, opname)


def size_sequence(v, name: str, opname: str) -> tuple:
    """A size argument that torch takes as a sequence only (``full((2,), 1)``, not ``full(2, 1)``)."""
    if isinstance(v, SymScalar) or isinstance(v, Const) and isinstance(v.obj, int):
        raise ShapeError("SI007", f"{opname}(): argument '{name}' must be tuple of ints, not int")
    return dims_arg(v, name)


def bool_arg(v, default=False) -> bool:
    if is_none(v):
        return default
    if isinstance(v, Const):
        return bool(v.obj)
    if isinstance(v, bool):
        return v
    raise RuleUnknown("a flag depends on an abstract value")


def like(t: TensorType, shape, dtype=None) -> TensorType:
    return TensorType(t.dtype if dtype is None else dtype,
                      None if shape is None else tuple(sym.normalize(d) for d in shape), t.device)


def to_dtype(v, default=None):
    if is_none(v):
        return default
    if isinstance(v, Const) and isinstance(v.obj, torch.dtype):
        return v.obj
    if isinstance(v, torch.dtype):
        return v
    if isinstance(v, Const) and v.obj in (float, int, bool):
        return {float: torch.get_default_dtype(), int: torch.int64, bool: torch.bool}[v.obj]
    raise RuleUnknown("dtype is not a concrete torch.dtype")


def default_float() -> torch.dtype:
    return torch.get_default_dtype()


def int_dtype(dtype) -> bool:
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _scalar_dtype(x) -> torch.dtype:
    if isinstance(x, bool):
        return torch.bool
    if isinstance(x, int):
        return torch.int64
    return torch.get_default_dtype()


def _kind_dtype(kind) -> torch.dtype:
    return {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype()}.get(kind, torch.float32)


def result_dtype(*values) -> Optional[torch.dtype]:
    """torch's type promotion over tensors and Python scalars (``torch.result_type``
    generalised to n operands): computed with tiny real tensors, cached per signature."""
    sig = []
    for v in values:
        if isinstance(v, TensorType):
            if v.dtype is None:
                return None
            sig.append(("t", v.dtype, v.shape is None or len(v.shape) > 0))
        elif isinstance(v, Const) and isinstance(v.obj, (bool, int, float)):
            sig.append(("s", type(v.obj)))
        elif isinstance(v, SymScalar):
            sig.append(("s", v.kind))
        elif is_none(v):
            continue
        else:
            return None
    return _promote(tuple(sig))


@functools.lru_cache(maxsize=None)
def _promote(sig: tuple) -> torch.dtype:
    operands = []
    for s in sig:
        if s[0] == "t":
            operands.append(torch.zeros((1,) if s[2] else (), dtype=s[1]))
        else:
            operands.append({bool: True, int: 1, float: 1.0}[s[1]])
    if not operands:
        return torch.get_default_dtype()
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    if not tensors:
        kinds = {type(o) for o in operands}
        return torch.get_default_dtype() if float in kinds else torch.int64 if int in kinds else torch.bool
    dtype = tensors[0].dtype
    acc = operands[0]
    for o in operands[1:]:
        dtype = torch.result_type(acc, o)
        acc = torch.zeros((1,) if (isinstance(acc, torch.Tensor) and acc.dim() or
                                   isinstance(o, torch.Tensor) and o.dim()) else (), dtype=dtype)
    return dtype if len(operands) > 1 else tensors[0].dtype


def union(options) -> Value:
    """A value that depends on a condition over the symbols: (condition, value) pairs,
    conditions sympy booleans that together cover every case."""
    from ..interp.state import make_union

    return make_union(list(options))


def same_dtype(what: str, *tensors) -> Optional[torch.dtype]:
    """Contractions (matmul, linear, conv, einsum) do not promote: torch raises when the
    operands' dtypes differ. The common dtype, or None when one is unknown."""
    dtypes = [t.dtype for t in tensors if isinstance(t, TensorType)]
    if not dtypes or None in dtypes:
        return None
    if len(set(dtypes)) > 1:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ShapeError("SI160", f"{what}: operands must have the same dtype, got {names}")
    return dtypes[0]
