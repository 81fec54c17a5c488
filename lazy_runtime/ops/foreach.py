"""``_foreach_*`` ops (multi-tensor optimizers): one call, applied per element through
the ordinary single-tensor ops, so they need no rules or lowerings of their own."""

from __future__ import annotations

import functools
import math

import torch

from .. import ir

aten = torch.ops.aten

# Binary ops whose single-tensor form takes no number: the clamp that does the same.
_SCALAR_BOUND = {"maximum": "clamp_min", "minimum": "clamp_max"}

# Ternary ops whose per-element scalar is keyword-only in the single-tensor op.
_VALUE_KW = {"addcdiv", "addcmul"}


def is_foreach(func) -> bool:
    return func._schema.name.startswith("aten::_foreach_")


@functools.lru_cache(maxsize=None)
def _plan(func):
    name = func._schema.name.split("::")[-1][len("_foreach_"):]
    inplace = name.endswith("_")
    base = name[:-1] if inplace else name
    listy = tuple(isinstance(a.type, torch.ListType) for a in func._schema.arguments)
    return base, inplace, listy


def foreach_handler(func, args, kwargs):
    floats = [a for a in (*args, *kwargs.values()) if type(a) is float]
    if not floats or ir.SHARED_SCALARS:
        return _apply(func, args, kwargs)
    for v in floats:
        ir.SHARED_SCALARS.setdefault((v, math.copysign(1.0, v)),
                                     ir.leaf(ir.SCALAR, v, (), torch.float64))
    try:
        return _apply(func, args, kwargs)
    finally:
        ir.SHARED_SCALARS.clear()


def _apply(func, args, kwargs):
    base, inplace, listy = _plan(func)
    n = next(len(a) for a, is_list in zip(args, listy) if is_list)
    kw = dict(kwargs)
    results = []
    for i in range(n):
        a_i = [a[i] if (k < len(listy) and listy[k]) else a for k, a in enumerate(args)]
        if base == "norm":
            ord_ = a_i[1] if len(a_i) > 1 else kw.get("ord", 2)
            results.append(aten.linalg_vector_norm(a_i[0], ord_, dtype=kw.get("dtype")))
            continue
        if base in _VALUE_KW and len(a_i) > 3:
            value = a_i.pop(3)
            if isinstance(value, torch.Tensor):
                value = value.item()
            results.append(_op(base, inplace)(*a_i, value=value, **kw))
            continue
        if base == "copy":
            results.append(aten.copy_(*a_i, **kw) if inplace else aten.clone(a_i[1]))
            continue
        if base in _SCALAR_BOUND and not isinstance(a_i[1], torch.Tensor):
            # maximum/minimum with a number (ASGD's _foreach_maximum_(mus, 1.0)): a clamp
            results.append(_op(_SCALAR_BOUND[base], inplace)(a_i[0], a_i[1]))
            continue
        op = _op(base, inplace)
        if op is None:  # no in-place spelling (maximum_): compute, then copy into place
            aten.copy_(a_i[0], _op(base, False)(*a_i, **kw))
            continue
        results.append(op(*a_i, **kw))
    return None if inplace else results


@functools.lru_cache(maxsize=None)
def _op(base, inplace):
    return getattr(aten, base + ("_" if inplace else ""), None)
