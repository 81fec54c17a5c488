"""Attributes of abstract tensors (``x.shape``, ``x.dtype``, ``x.T``) and iteration."""

from __future__ import annotations

import torch

from .. import symbolic as sym
from ..values import BoundMethod, Const, SymScalar, TensorType, TupleV, Unknown, Value, int_value
from .fft import real_of


def shape_value(t: TensorType) -> Value:
    """``x.shape`` / ``x.size()``: a tuple of (possibly symbolic) ints."""
    if t.shape is None:
        return Unknown(t.reason or "rank of the tensor is unknown")
    return TupleV(tuple(int_value(d, t.reason or "unknown dim") for d in t.shape))


def tensor_attribute(t: TensorType, name: str) -> Value:
    if name == "shape":
        return shape_value(t)
    if name == "dtype":
        return Const(t.dtype) if t.dtype is not None else Unknown("dtype is unknown")
    if name == "device":
        return Const(torch.device(t.device))
    if name == "ndim":
        return Const(len(t.shape)) if t.shape is not None else SymScalar(int, None, "rank unknown")
    if name in ("is_cuda", "is_sparse", "is_quantized", "is_meta", "is_nested"):
        return Const(t.device == "cuda" if name == "is_cuda" else False)
    if name == "requires_grad":
        return SymScalar(bool, None, "requires_grad is a runtime property")
    if name == "data":
        return t
    if name == "real":  # a complex tensor's real part; a real tensor itself
        return TensorType(real_of(t.dtype), t.shape, t.device, t.reason)
    if name == "imag":
        if t.dtype is not None and not t.dtype.is_complex:
            return Unknown("imag of a real tensor: torch raises")
        return TensorType(real_of(t.dtype), t.shape, t.device, t.reason)
    if name == "is_leaf":
        return SymScalar(bool, None)
    if name in ("T", "mT", "H", "mH"):
        if t.shape is None:
            return Unknown("transpose of a tensor of unknown rank")
        if name in ("T", "H"):
            return TensorType(t.dtype, tuple(reversed(t.shape)), t.device)
        if len(t.shape) < 2:
            return Unknown("mT of a tensor of rank < 2")
        return TensorType(t.dtype, t.shape[:-2] + (t.shape[-1], t.shape[-2]), t.device)
    if name == "grad":
        return Unknown("gradients are not modelled")
    if name == "layout":
        return Const(torch.strided)
    if hasattr(torch.Tensor, name):
        return BoundMethod(t, name)
    return Unknown(f"tensor has no attribute {name}")


def iterate_tensor(t: TensorType):
    """``for row in x``: rows along dim 0."""
    if t.shape is None or len(t.shape) == 0:
        return Unknown("iteration over a tensor of unknown or zero rank"), None
    row = TensorType(t.dtype, t.shape[1:], t.device)
    n = t.shape[0]
    if sym.is_concrete(n):
        return [row] * n
    return row, n
