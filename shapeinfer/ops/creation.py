"""Creation ops with (possibly symbolic) sizes: zeros, ones, full, empty, rand*, arange,
the *_like family and Tensor.new_*."""

from __future__ import annotations

import sympy
import torch

from ..values import Const, SymScalar, TensorType
from .common import (T, RuleUnknown, default_float, dim_arg, is_none, py, size_sequence, sizes_or_keyword, sym,
                     tensor, to_dtype)
from .registry import op


def _device(device, default="cpu"):
    if is_none(device):
        return default
    d = py(device)
    return torch.device(d).type if not isinstance(d, torch.device) else d.type


def _factory(default_dtype):
    def rule(ctx, *sizes, size=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False, memory_format=None, generator=None, names=None):
        shape = sizes_or_keyword(sizes, size, "size", "zeros")
        return tensor(to_dtype(dtype, default_dtype()), shape, _device(device))

    return rule


op("zeros", torch.zeros, torch.ones, torch.empty, torch.rand, torch.randn)(_factory(default_float))


@op("full", torch.full)
def full(ctx, size, fill_value, *, out=None, dtype=None, layout=None, device=None, requires_grad=False,
         pin_memory=False, names=None):
    fv = py(fill_value) if isinstance(fill_value, Const) else None
    if isinstance(fill_value, SymScalar):
        fv = {int: 1, float: 1.0, bool: True}[fill_value.kind]
    default = torch.bool if isinstance(fv, bool) else torch.int64 if isinstance(fv, int) else default_float()
    return tensor(to_dtype(dtype, default), size_sequence(size, "size", "full"), _device(device))


@op("randint", torch.randint)
def randint(ctx, *args, low=None, high=None, size=None, generator=None, out=None, dtype=None, layout=None,
            device=None, requires_grad=False, pin_memory=False):
    # randint([low,] high, size): the size is the last positional unless given by keyword
    size = args[-1] if is_none(size) and args else size
    if is_none(size):
        raise RuleUnknown("randint without a size")
    return tensor(to_dtype(dtype, torch.int64), size_sequence(size, "size", "randint"), _device(device))


@op("randperm", torch.randperm)
def randperm(ctx, n, *, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False):
    return tensor(to_dtype(dtype, torch.int64), (dim_arg(n),), _device(device))


@op("arange", torch.arange)
def arange(ctx, start, end=None, step=None, *, out=None, dtype=None, layout=None, device=None,
           requires_grad=False, pin_memory=False):
    if is_none(end):
        start, end = Const(0), start
    step = Const(1) if is_none(step) else step
    vals = [start, end, step]
    is_float = any(isinstance(v, Const) and isinstance(v.obj, float) or isinstance(v, SymScalar) and
                   v.kind is float for v in vals)
    a, b, s = (dim_arg(v) if not (isinstance(v, Const) and isinstance(v.obj, float)) else v.obj for v in vals)
    if a is None or b is None or s is None:
        n = None
    elif is_float:
        n = None
        if all(isinstance(x, (int, float)) for x in (a, b, s)) and s != 0:
            import math

            n = max(0, math.ceil((b - a) / s))
    elif isinstance(s, int) and s != 0:
        # ceil((end - start) / step) elements, none when that is negative
        n = sym.ceildiv(sym.sub(b, a), s) if s > 0 else sym.ceildiv(sym.sub(a, b), -s)
        nonneg = sym.compare(">=", n, 0)
        if nonneg is False:
            n = 0
        elif nonneg is None:
            n = sym.normalize(sympy.Max(n, 0))
    else:
        n = None
    return tensor(to_dtype(dtype, default_float() if is_float else torch.int64), (n,), _device(device))


@op("linspace", torch.linspace, torch.logspace)
def linspace(ctx, start, end, steps, *args, dtype=None, device=None, **kwargs):
    return tensor(to_dtype(dtype, default_float()), (dim_arg(steps),), _device(device))


@op("eye", torch.eye)
def eye(ctx, n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False,
        pin_memory=False):
    return tensor(to_dtype(dtype, default_float()), (dim_arg(n), dim_arg(m if not is_none(m) else n)),
                  _device(device))


def like_rule(ctx, input, *args, fill_value=None, low=None, high=None, dtype=None, layout=None, device=None,
              requires_grad=False, memory_format=None, pin_memory=False, generator=None):
    # full_like's fill value and randint_like's bounds do not change the dtype: it is the input's
    t = T(input)
    return TensorType(to_dtype(dtype, t.dtype), t.shape, _device(device, t.device))


op("zeros_like", torch.zeros_like, torch.ones_like, torch.empty_like, torch.rand_like, torch.randn_like,
   torch.full_like, torch.randint_like, methods=())(like_rule)


def _new(ctx, input, *sizes, size=None, dtype=None, device=None, requires_grad=False, layout=None,
         pin_memory=False):
    t = T(input)
    shape = sizes_or_keyword(sizes, size, "size", "new_zeros")
    return tensor(to_dtype(dtype, t.dtype), shape, _device(device, t.device))


op("new_zeros", methods=("new_zeros", "new_ones", "new_empty"))(_new)


@op("new_full", methods=("new_full",))
def new_full(ctx, input, size, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None,
             pin_memory=False):
    t = T(input)
    return tensor(to_dtype(dtype, t.dtype), size_sequence(size, "size", "new_full"), _device(device, t.device))


@op("new_tensor", methods=("new_tensor",))
def new_tensor(ctx, input, data, *, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
    t = T(input)
    return _from_data(data, to_dtype(dtype, t.dtype), _device(device, t.device))


def _from_data(data, dtype, device):
    if isinstance(data, Const):
        try:
            real = torch.as_tensor(data.obj)
        except Exception as e:
            raise RuleUnknown(f"tensor data: {e}")
        return tensor(dtype or real.dtype, tuple(real.shape), device)
    if isinstance(data, TensorType):
        return TensorType(dtype or data.dtype, data.shape, device)
    from ..values import ListV, TupleV

    if isinstance(data, (ListV, TupleV)) and (not isinstance(data, ListV) or data.is_concrete):
        items = data.items
        if all(isinstance(x, (Const, SymScalar)) for x in items):
            kinds = {type(x.obj) if isinstance(x, Const) else x.kind for x in items}
            d = default_float() if float in kinds else torch.bool if kinds == {bool} else torch.int64
            return tensor(dtype or d, (len(items),), device)
        if all(isinstance(x, TensorType) for x in items):
            return tensor(dtype or items[0].dtype, (len(items),) + (items[0].shape or ()), device)
        nested = [_from_data(x, dtype, device) for x in items]  # [[1.0, 2.0], [3.0, 4.0]]
        if nested and all(n.shape == nested[0].shape for n in nested):
            kinds = {n.dtype for n in nested}
            inner = nested[0].dtype if len(kinds) == 1 else torch.promote_types(*list(kinds)[:2]) \
                if len(kinds) == 2 else None
            if inner is not None:
                return tensor(dtype or inner, (len(items),) + tuple(nested[0].shape), device)
    raise RuleUnknown("tensor() of abstract data")


@op("tensor", torch.tensor, torch.as_tensor)
def tensor_(ctx, data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    return _from_data(data, to_dtype(dtype, None), _device(device))


@op("scalar_tensor", torch.scalar_tensor)
def scalar_tensor(ctx, s, *, dtype=None, device=None, **kwargs):
    return tensor(to_dtype(dtype, default_float()), (), _device(device))


@op("multinomial", torch.multinomial, methods=("multinomial",))
def multinomial(ctx, input, num_samples, replacement=False, *, generator=None, out=None):
    s = T(input).shape
    return tensor(torch.int64, tuple(s[:-1]) + (dim_arg(num_samples),), T(input).device)


@op("bernoulli", torch.bernoulli, methods=("bernoulli",))
def bernoulli(ctx, input, *args, **kwargs):
    return T(input)
