"""``_foreach_*`` ops (multi-tensor optimizers): one call, applied per element through
the ordinary single-tensor ops, so they need no rules or lowerings of their own.

The per-element ops are made with ``call`` (``dispatch.call_op``): recorded directly,
without going back through torch's dispatcher."""

from __future__ import annotations

import functools
import importlib
import itertools
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
    if not floats:
        return _apply(func, args, kwargs, call)
    return with_shared_scalars(floats, lambda: _apply(func, args, kwargs, call))


def with_shared_scalars(values, fn):
    """``fn()`` recording one SCALAR leaf per distinct float of ``values`` (an op applied to
    many tensors uses each of its numbers once per tensor: one graph input each, not one
    per use). Inside another such call, that call's leaves serve."""
    if ir.SHARED_SCALARS:
        return fn()
    for v in values:
        ir.SHARED_SCALARS.setdefault((v, math.copysign(1.0, v)),
                                     ir.leaf(ir.SCALAR, v, (), torch.float64))
    try:
        return fn()
    finally:
        ir.SHARED_SCALARS.clear()


def _apply(func, args, kwargs, call):
    base, inplace, listy = _plan(func)
    n = next(len(a) for a, is_list in zip(args, listy) if is_list)
    op = _op(base, inplace)
    if op is None or base in _SPECIAL:
        return _apply_each(base, inplace, listy, op, n, args, dict(kwargs), call)
    kws = itertools.repeat(dict(kwargs), n)
    if base in _VALUE_KW and len(args) > 3:
        # addcdiv/addcmul's value (one number, one per tensor, or a tensor of them, which
        # torch's kernel reads on the host too): keyword-only in the single-tensor op
        values = args[3].tolist() if isinstance(args[3], torch.Tensor) else args[3]
        if not listy[3] and not isinstance(values, list):
            values = itertools.repeat(values, n)
        kws = [{"value": v, **kwargs} for v in values]
        args, listy = args[:3], listy[:3]
    if n == 0:
        return None if inplace else []
    # Each element's arguments: the lists' items and the shared ones.
    rows = zip(zip(*[a if is_list else itertools.repeat(a, n) for a, is_list in zip(args, listy)]),
               kws)
    first, kw = next(rows)
    results = [call(op, first, kw)]
    # The per-tensor ops after the first: recorded without their rule where their operands
    # share one float layout (``dispatch.same_layout_recorder``), an optimizer's usual case.
    from ..dispatch import same_layout_recorder
    fast = same_layout_recorder(op, first, kw, inplace)
    if fast is None:
        results += [call(op, a_i, kw_i) for a_i, kw_i in rows]
    else:
        for a_i, kw_i in rows:
            out = fast(a_i, kw_i)
            results.append(call(op, a_i, kw_i) if out is None else out)
    return None if inplace else results


_SPECIAL = frozenset(("norm", "copy", *_SCALAR_BOUND))


def _apply_each(base, inplace, listy, op, n, args, kw, call):
    """The per-tensor ops of the ``_foreach_*`` ops that are not one op over the lists'
    items: norm, copy, maximum/minimum with a number, ops with no in-place spelling."""
    results = []
    for i in range(n):
        a_i = [a[i] if is_list else a for a, is_list in zip(args, listy)]
        if base == "norm":
            # (``_foreach_norm(self, ord=2, dtype=None)``: both may come positionally)
            ord_ = a_i[1] if len(a_i) > 1 else kw.get("ord", 2)
            dtype = a_i[2] if len(a_i) > 2 else kw.get("dtype")
            results.append(call(aten.linalg_vector_norm, (a_i[0], ord_), {"dtype": dtype}))
        elif base == "copy":
            results.append(call(aten.copy_, tuple(a_i), kw) if inplace
                           else call(aten.clone, (a_i[1],), {}))
        elif base in _SCALAR_BOUND and not isinstance(a_i[1], torch.Tensor):
            # maximum/minimum with a number (ASGD's _foreach_maximum_(mus, 1.0)): a clamp
            results.append(call(_op(_SCALAR_BOUND[base], inplace), (a_i[0], a_i[1]), {}))
        elif op is None:  # no in-place spelling (maximum_): compute, then copy into place
            call(aten.copy_, (a_i[0], call(_op(base, False), tuple(a_i), kw)), {})
        else:
            results.append(call(op, tuple(a_i), kw))
    return None if inplace else results


@functools.lru_cache(maxsize=None)
def _op(base, inplace):
    return getattr(aten, base + ("_" if inplace else ""), None)
