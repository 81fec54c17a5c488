"""Python operators on abstract values: arithmetic, comparisons, identity."""

from __future__ import annotations

import operator

import sympy
import torch

from .. import symbolic as sym
from ..values import (NONE, Const, DictV, ListV, SymScalar, TensorType, TupleV, Unknown, Value, int_value)

_PY_BINOPS = {
    "Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv,
    "FloorDiv": operator.floordiv, "Mod": operator.mod, "Pow": operator.pow,
    "MatMult": operator.matmul, "BitAnd": operator.and_, "BitOr": operator.or_,
    "BitXor": operator.xor, "LShift": operator.lshift, "RShift": operator.rshift,
}

# Python operator -> the torch function whose shape rule handles it for tensors
_TENSOR_BINOPS = {
    "Add": torch.add, "Sub": torch.sub, "Mult": torch.mul, "Div": torch.div,
    "FloorDiv": torch.floor_divide, "Mod": torch.remainder, "Pow": torch.pow,
    "MatMult": torch.matmul, "BitAnd": torch.bitwise_and, "BitOr": torch.bitwise_or,
    "BitXor": torch.bitwise_xor,
}

_TENSOR_COMPARE = {"Eq": torch.eq, "NotEq": torch.ne, "Lt": torch.lt, "LtE": torch.le,
                   "Gt": torch.gt, "GtE": torch.ge}
_SYM_COMPARE = {"Eq": "==", "NotEq": "!=", "Lt": "<", "LtE": "<=", "Gt": ">", "GtE": ">="}


def _num_kind(v: Value):
    """int, float, bool or None: the Python number kind of a scalar value."""
    if isinstance(v, Const) and isinstance(v.obj, (bool, int, float)):
        return type(v.obj)
    if isinstance(v, SymScalar):
        return v.kind
    return None


def _expr(v: Value):
    if isinstance(v, Const):
        return sympy.sympify(v.obj) if not isinstance(v.obj, bool) else sympy.Integer(int(v.obj))
    return v.expr


def binop(interp, op: str, left: Value, right: Value, frame, inplace: bool = False) -> Value:
    return interp.lift(lambda a, b: _binop(interp, op, a, b, frame, inplace), left, right)


def _binop(interp, op, a, b, frame, inplace):
    if isinstance(a, TensorType) or isinstance(b, TensorType):
        fn = _TENSOR_BINOPS.get(op)
        if fn is None:
            return Unknown(f"operator {op} on tensors")
        if op == "MatMult" or not isinstance(a, TensorType):
            # scalar OP tensor: same shape rule, operands in order
            return interp.caller.call(Const(fn), [a, b], {}, frame)
        result = interp.caller.call(Const(fn), [a, b], {}, frame)
        if inplace and isinstance(result, TensorType) and a.shape is not None and result.shape is not None \
                and len(result.shape) != len(a.shape):
            interp.ctx.report("SI101", "in-place operation would change the tensor's shape", severity="error")
        return result
    if isinstance(a, Unknown):
        return a
    if isinstance(b, Unknown):
        return b
    if isinstance(a, Const) and isinstance(b, Const):
        try:
            return Const(_PY_BINOPS[op](a.obj, b.obj))
        except Exception as e:
            return Unknown(f"{type(e).__name__}: {e}")
    ka, kb = _num_kind(a), _num_kind(b)
    if ka is not None and kb is not None:
        return _scalar_binop(op, a, b, ka, kb)
    if isinstance(a, TupleV) and isinstance(b, TupleV) and op == "Add":
        return TupleV(a.items + b.items)
    if isinstance(a, TupleV) and isinstance(b, Const) and isinstance(b.obj, tuple) and op == "Add":
        return TupleV(a.items + tuple(interp.caller.wrap(x) for x in b.obj))
    if isinstance(a, Const) and isinstance(a.obj, tuple) and isinstance(b, TupleV) and op == "Add":
        return TupleV(tuple(interp.caller.wrap(x) for x in a.obj) + b.items)
    if isinstance(a, (TupleV, ListV)) and op == "Mult" and isinstance(b, Const) and isinstance(b.obj, int):
        items = list(a.items) * b.obj
        return TupleV(tuple(items)) if isinstance(a, TupleV) else ListV(items)
    if isinstance(a, ListV) and op == "Add":
        other = interp.caller.iterate(b, frame)
        if not isinstance(other, list):
            elem, count = other
            if a.tail is None:
                out = a if inplace else ListV(a.items)
                out.tail, out.tail_count = elem, count
                return out
            return Unknown("concatenation of two symbolic-length lists")
        if a.tail is not None:
            if all(x == a.tail for x in other):
                out = a if inplace else ListV(a.items, a.tail, a.tail_count)
                out.tail_count = sym.add(out.tail_count, len(other))
                return out
            return Unknown("list of symbolic length extended with different items")
        if inplace:
            a.items.extend(other)
            return a
        return ListV(a.items + other)
    if isinstance(a, DictV) and isinstance(b, DictV) and op == "BitOr":
        return DictV({**a.items, **b.items})
    return Unknown(f"operator {op} on {type(a).__name__} and {type(b).__name__}")


def _scalar_binop(op, a, b, ka, kb) -> Value:
    ea, eb = _expr(a), _expr(b)
    if ea is None or eb is None:
        kind = float if float in (ka, kb) or op == "Div" else int
        return SymScalar(kind, None, "depends on an unknown value")
    kind = float if float in (ka, kb) else int
    if op == "Add":
        r = ea + eb
    elif op == "Sub":
        r = ea - eb
    elif op == "Mult":
        r = ea * eb
    elif op == "Div":
        return SymScalar(float, ea / eb)
    elif op == "FloorDiv":
        if kind is int:
            return int_value(sym.floordiv(sym.normalize(ea), sym.normalize(eb)))
        r = sympy.floor(ea / eb)
    elif op == "Mod":
        r = sympy.Mod(ea, eb)
    elif op == "Pow":
        r = ea ** eb
        if kind is int and not (eb.is_Integer and eb >= 0):
            kind = float
    else:
        return SymScalar(kind, None, f"operator {op} on symbolic values")
    if kind is int:
        return int_value(sym.normalize(r))
    return SymScalar(float, r)


def unaryop(interp, op: str, v: Value, frame) -> Value:
    def one(x):
        if isinstance(x, TensorType):
            fn = {"USub": torch.neg, "Invert": torch.bitwise_not, "UAdd": torch.positive}[op]
            return interp.caller.call(Const(fn), [x], {}, frame)
        if isinstance(x, Const):
            try:
                return Const({"USub": operator.neg, "UAdd": operator.pos, "Invert": operator.invert}[op](x.obj))
            except Exception as e:
                return Unknown(f"{type(e).__name__}: {e}")
        if isinstance(x, SymScalar) and x.expr is not None and op in ("USub", "UAdd"):
            r = -x.expr if op == "USub" else x.expr
            return int_value(sym.normalize(r)) if x.kind is int else SymScalar(x.kind, r)
        return Unknown(f"unary {op} on {type(x).__name__}")

    return interp.lift(one, v)


def compare(interp, op: str, left: Value, right: Value, frame) -> Value:
    return interp.lift(lambda a, b: _compare(interp, op, a, b, frame), left, right)


def _compare(interp, op, a, b, frame) -> Value:
    if op in ("Is", "IsNot"):
        r = _identity(a, b)
        if r is None:
            return SymScalar(bool, None, "identity of abstract values")
        return Const(r if op == "Is" else not r)
    if op in ("In", "NotIn"):
        r = _contains(interp, b, a, frame)
        if isinstance(r, Const):
            return Const(r.obj if op == "In" else not r.obj)
        return r
    if isinstance(a, TensorType) or isinstance(b, TensorType):
        return interp.caller.call(Const(_TENSOR_COMPARE[op]), [a, b], {}, frame)
    if isinstance(a, Const) and isinstance(b, Const):
        try:
            return Const(_PY_COMPARE[op](a.obj, b.obj))
        except Exception as e:
            return Unknown(f"{type(e).__name__}: {e}")
    if _num_kind(a) is not None and _num_kind(b) is not None:
        ea, eb = _expr(a), _expr(b)
        if ea is None or eb is None:
            return SymScalar(bool, None, "compares an unknown value")
        verdict = sym.compare(_SYM_COMPARE[op], sym.normalize(ea), sym.normalize(eb))
        if verdict is not None:
            return Const(verdict)
        return SymScalar(bool, sym.relation(_SYM_COMPARE[op], ea, eb))
    seq_a, seq_b = _as_seq(a), _as_seq(b)
    if seq_a is not None and seq_b is not None and op in ("Eq", "NotEq"):
        if len(seq_a) != len(seq_b):
            return Const(op == "NotEq")
        result: Value = Const(True)
        for x, y in zip(seq_a, seq_b):
            result = logical_and(result, _compare(interp, "Eq", x, y, frame))
        if op == "NotEq":
            verdict, cond = interp.truth(result, frame)
            if verdict is not None:
                return Const(not verdict)
            return SymScalar(bool, sympy.Not(cond) if cond is not None else None)
        return result
    return SymScalar(bool, None, f"comparison of {type(a).__name__} and {type(b).__name__}")


_PY_COMPARE = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le,
               "Gt": operator.gt, "GtE": operator.ge}


def _as_seq(v):
    if isinstance(v, TupleV):
        return list(v.items)
    if isinstance(v, ListV) and v.is_concrete:
        return list(v.items)
    if isinstance(v, Const) and isinstance(v.obj, (tuple, list, torch.Size)):
        return [Const(x) for x in v.obj]
    return None


def _identity(a, b):
    if isinstance(a, Const) and isinstance(b, Const):
        return a.obj is b.obj
    for x, y in ((a, b), (b, a)):
        if y == NONE:
            if isinstance(x, (TensorType, TupleV, ListV, DictV)) or (
                    isinstance(x, SymScalar)):
                return False
            if isinstance(x, Const):
                return x.obj is None
            if type(x).__name__ in ("ObjV", "Closure", "BoundMethod"):
                return False
    if a is b:
        return True
    return None


def _contains(interp, container, item, frame) -> Value:
    if isinstance(container, Const) and isinstance(item, Const):
        try:
            return Const(item.obj in container.obj)
        except Exception:
            return SymScalar(bool, None)
    if isinstance(container, DictV) and isinstance(item, Const):
        return Const(item.obj in container.items)
    seq = _as_seq(container)
    if seq is not None and isinstance(item, Const):
        if all(isinstance(x, Const) for x in seq):
            return Const(any(x.obj == item.obj for x in seq))
    return SymScalar(bool, None, "membership in an abstract container")


def logical_and(a: Value, b: Value) -> Value:
    if isinstance(a, Const) and not a.obj:
        return a
    if isinstance(b, Const) and not b.obj:
        return b
    if isinstance(a, Const):
        return b
    if isinstance(b, Const):
        return a
    if isinstance(a, SymScalar) and isinstance(b, SymScalar) and a.expr is not None and b.expr is not None:
        return SymScalar(bool, sympy.And(a.expr, b.expr))
    return SymScalar(bool, None, "conjunction of unknown conditions")
