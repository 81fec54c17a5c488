"""Rendering: types as text (comments, reports), entries as JSON, diagnostics as text."""

from __future__ import annotations

import sympy
import torch

from . import symbolic as sym
from .values import (BoundMethod, Closure, Const, DictV, ListV, ObjV, SymScalar, TensorType, TupleV, UnionV,
                     Unknown, Value)


def dtype_str(dtype) -> str:
    if dtype is None:
        return "?"
    return str(dtype).replace("torch.", "")


def cond_str(cond) -> str:
    """A condition as text sympy parses back (the ``when`` field)."""
    return str(cond)


def cond_pretty(cond) -> str:
    s = str(cond)
    return s.replace("&", "and").replace("|", "or").replace("~", "not ")


def type_str(v: Value, pretty: bool = True) -> str:
    if isinstance(v, TensorType):
        shape = "[...]" if v.shape is None else sym.shape_str(v.shape, pretty)
        return f"{dtype_str(v.dtype)}{shape}"
    if isinstance(v, Const):
        o = v.obj
        if o is None:
            return "None"
        if isinstance(o, bool):
            return f"bool = {o}"
        if isinstance(o, (int, float)):
            return f"{type(o).__name__} = {o}"
        if isinstance(o, str):
            return f"str = {o!r}" if len(o) < 30 else "str"
        if isinstance(o, torch.dtype):
            return dtype_str(o)
        if isinstance(o, torch.nn.Module):
            return type(o).__name__
        if isinstance(o, (tuple, list)) and len(o) < 8:
            inner = ", ".join(type_str(Const(x), pretty) for x in o)
            return f"({inner})" if isinstance(o, tuple) else f"[{inner}]"
        return type(o).__name__
    if isinstance(v, SymScalar):
        if v.expr is None:
            return v.kind.__name__
        text = sym.dim_pretty(v.expr) if (pretty and v.kind is int) else str(v.expr)
        return f"{v.kind.__name__} = {text}"
    if isinstance(v, TupleV):
        inner = ", ".join(type_str(x, pretty) for x in v.items)
        return f"({inner},)" if len(v.items) == 1 else f"({inner})"
    if isinstance(v, ListV):
        if v.is_concrete:
            if v.items and all(x == v.items[0] for x in v.items):
                return f"list[{type_str(v.items[0], pretty)}] * {len(v.items)}"
            return "[" + ", ".join(type_str(x, pretty) for x in v.items) + "]"
        n = "?" if v.length is None else sym.dim_pretty(v.length)
        return f"list[{type_str(v.tail, pretty)}] * {n}"
    if isinstance(v, DictV):
        return "dict"
    if isinstance(v, ObjV):
        if issubclass(v.cls, tuple) and hasattr(v.cls, "_fields"):
            return type_str(const_tuple_as_values(v), pretty)
        return v.cls.__name__
    if isinstance(v, UnionV):
        return " | ".join(f"{type_str(x, pretty)} if {cond_pretty(c)}" for c, x in v.options)
    if isinstance(v, Unknown):
        return "?"
    if isinstance(v, (Closure, BoundMethod)):
        return "function"
    return type(v).__name__


def variants_str(values: list, pretty: bool = True) -> str:
    """Several (condition, value) pairs, as one comment-friendly string."""
    parts = []
    for cond, v in values:
        text = type_str(v, pretty)
        if cond is not sympy.true and cond is not True:
            text += f" when {cond_pretty(cond)}"
        if text not in parts:
            parts.append(text)
    return " | ".join(parts)


# ---- JSON -------------------------------------------------------------------------------


def _shape_json(shape) -> list:
    return [sym.dim_str(d) for d in shape]


def value_json(values: list) -> dict:
    """The JSON description of what a variable held: (condition, value) pairs."""
    values = [(c, const_tuple_as_values(v)) for c, v in values]
    vs = [v for _, v in values]
    kinds = {_kind(v) for v in vs}
    if kinds == {"Tensor"}:
        dtypes = {v.dtype for v in vs}
        out = {"type": "Tensor", "dtype": dtype_str(vs[0].dtype) if len(dtypes) == 1 else "?", "shapes": []}
        for cond, v in values:
            shape = ["?"] if v.shape is None else _shape_json(v.shape)
            item = shape if cond is sympy.true or cond is True else {"shape": shape, "when": cond_str(cond)}
            if v.shape is None:
                item = {"shape": None, "when": cond_str(cond)} if isinstance(item, dict) else None
            if item not in out["shapes"]:
                out["shapes"].append(item)
        reasons = sorted({v.reason for v in vs if v.reason})
        if reasons:
            out["reason"] = "; ".join(reasons)
        return out
    if len(kinds) == 1 and kinds <= {"int", "float", "bool"}:
        rendered = []
        for cond, v in values:
            val = _scalar_json(v)
            item = val if cond is sympy.true or cond is True else {"value": val, "when": cond_str(cond)}
            if item not in rendered:
                rendered.append(item)
        out = {"type": kinds.pop(), "value": rendered[0] if len(rendered) == 1 else "?"}
        if len(rendered) > 1:
            out["values"] = rendered
        return out
    if len(kinds) == 1 and kinds <= {"tuple", "list"}:
        lengths = {len(v.items) if not isinstance(v, ListV) or v.is_concrete else None for v in vs}
        kind = kinds.pop()
        if len(lengths) == 1 and None not in lengths:
            n = lengths.pop()
            return {"type": kind, "elements": [value_json([(c, v.items[i]) for c, v in values])
                                               for i in range(n)]}
        if all(isinstance(v, ListV) and not v.is_concrete for v in vs) and len(vs) == 1:
            v = vs[0]
            return {"type": kind, "length": sym.dim_str(v.length),
                    "prefix": [value_json([(True, x)]) for x in v.items],
                    "element": value_json([(True, v.tail)])}
        return {"type": kind, "elements": None, "reason": "length differs across paths"}
    if len(kinds) == 1:
        kind = kinds.pop()
        out = {"type": kind}
        if kind == "unknown":
            out["reason"] = "; ".join(sorted({v.reason for v in vs}))
        return out
    return {"type": "union", "options": [dict(value_json([(c, v)]), when=cond_str(c)) for c, v in values]}


_CONST_KINDS = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (type(None), "None"),
                (tuple, "tuple"), (list, "list"))
_VALUE_KINDS = {TensorType: "Tensor", TupleV: "tuple", ListV: "list", DictV: "dict", Unknown: "unknown"}


def _kind(v) -> str:
    """The JSON ``type`` of a value."""
    if isinstance(v, Const):
        return next((name for t, name in _CONST_KINDS if isinstance(v.obj, t)), "object")
    if isinstance(v, SymScalar):
        return v.kind.__name__
    return _VALUE_KINDS.get(type(v), "object")


def _scalar_json(v):
    if isinstance(v, Const):
        return v.obj
    if v.expr is None:
        return "?"
    return sym.dim_str(v.expr) if v.kind is int else str(v.expr)


def const_tuple_as_values(v: Value) -> Value:
    """Concrete tuples/lists of ints, and named tuples, are shown like abstract tuples."""
    if isinstance(v, ObjV) and issubclass(v.cls, tuple) and hasattr(v.cls, "_fields"):
        return TupleV(tuple(v.attrs[f] for f in v.cls._fields))
    if isinstance(v, Const) and isinstance(v.obj, (tuple, list)) and not isinstance(v.obj, torch.Size):
        items = tuple(Const(x) for x in v.obj)
        return TupleV(items) if isinstance(v.obj, tuple) else ListV(list(items))
    return v
