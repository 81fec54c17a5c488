"""``_foreach_*`` ops (multi-tensor optimizers): one call, applied per element through
the ordinary single-tensor ops, so they need no rules or lowerings of their own.

The per-element ops are made with ``call`` (``dispatch.call_op``): recorded directly,
without going back through torch's dispatcher."""

from __future__ import annotations

import functools
import importlib
import math

import torch

from .. import ir

aten = torch.ops.aten

# Binary ops whose single-tensor form takes no number: the clamp that does the same.
_SCALAR_BOUND = {"maximum": "clamp_min", "minimum": "clamp_max"}

# Ternary ops whose per-element scalar is keyword-only in the single-tensor op.
_VALUE_KW = {"addcdiv", "addcmul"}


def make_default_for(cls) -> None:
    """Let tensors of ``cls`` take the ``_foreach_*`` path by default, as on CUDA.

    torch's optimizers and ``clip_grad_norm_`` pick it on devices with foreach kernels
    (torch lists the renamed PrivateUse1 backend among them) but only for tensors of the
    types in ``_foreach_supported_types``; torch's DTensor joins those lists the same way.
    One ``_foreach_*`` op for all parameters records the same nodes as the per-tensor loop
    with much less of the optimizer's Python. ``foreach=False`` still picks the loop."""
    for name in ("torch.optim.optimizer", "torch.utils._foreach_utils"):
        types = getattr(importlib.import_module(name), "_foreach_supported_types", None)
        if isinstance(types, list) and cls not in types:
            types.append(cls)


def is_foreach(func) -> bool:
    return func._schema.name.startswith("aten::_foreach_")


@functools.lru_cache(maxsize=None)
def _plan(func):
    name = func._schema.name.split("::")[-1][len("_foreach_"):]
    inplace = name.endswith("_")
    base = name[:-1] if inplace else name
    listy = tuple(isinstance(a.type, torch.ListType) for a in func._schema.arguments)
    return base, inplace, listy


def foreach_handler(func, args, kwargs, call):
    floats = [a for a in (*args, *kwargs.values()) if type(a) is float]
    if not floats or ir.SHARED_SCALARS:
        return _apply(func, args, kwargs, call)
    for v in floats:
        ir.SHARED_SCALARS.setdefault((v, math.copysign(1.0, v)),
                                     ir.leaf(ir.SCALAR, v, (), torch.float64))
    try:
        return _apply(func, args, kwargs, call)
    finally:
        ir.SHARED_SCALARS.clear()


def _apply(func, args, kwargs, call):
    from ..dispatch import same_layout_recorder
    base, inplace, listy = _plan(func)
    n = next(len(a) for a, is_list in zip(args, listy) if is_list)
    kw = dict(kwargs)
    results = []
    # The per-tensor ops after the first: recorded without their rule where their operands
    # share one float layout (``dispatch.same_layout_recorder``), an optimizer's usual case.
    fast = None
    op = _op(base, inplace)
    for i in range(n):
        a_i = [a[i] if is_list else a for a, is_list in zip(args, listy)]
        if base == "norm":
            ord_ = a_i[1] if len(a_i) > 1 else kw.get("ord", 2)
            results.append(call(aten.linalg_vector_norm, (a_i[0], ord_),
                                {"dtype": kw.get("dtype")}))
            continue
        if base == "copy":
            results.append(call(aten.copy_, tuple(a_i), kw) if inplace
                           else call(aten.clone, (a_i[1],), {}))
            continue
        if base in _SCALAR_BOUND and not isinstance(a_i[1], torch.Tensor):
            # maximum/minimum with a number (ASGD's _foreach_maximum_(mus, 1.0)): a clamp
            results.append(call(_op(_SCALAR_BOUND[base], inplace), (a_i[0], a_i[1]), {}))
            continue
        if op is None:  # no in-place spelling (maximum_): compute, then copy into place
            call(aten.copy_, (a_i[0], call(_op(base, False), tuple(a_i), kw)), {})
            continue
        kw_i = kw
        if base in _VALUE_KW and len(a_i) > 3:
            value = a_i.pop(3)
            if isinstance(value, torch.Tensor):
                value = value.item()
            kw_i = {"value": value, **kw}
        a_i = tuple(a_i)
        out = None if fast is None else fast(a_i, kw_i)
        if out is None:
            out = call(op, a_i, kw_i)
            if i == 0:
                fast = same_layout_recorder(op, a_i, kw_i, inplace)
        results.append(out)
    return None if inplace else results


@functools.lru_cache(maxsize=None)
def _op(base, inplace):
    return getattr(aten, base + ("_" if inplace else ""), None)
