"""Dtypes: torch <-> numpy/JAX, and torch's type promotion (computed here, not by torch).

Policy: dtypes are exact. int64 stays int64 and float64 stays float64 (the runtime runs
JAX with ``jax_enable_x64`` scoped to its own calls); nothing is silently narrowed.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import torch

from .errors import UnsupportedOperation

TORCH_TO_NUMPY = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}
NUMPY_TO_TORCH = {v: k for k, v in TORCH_TO_NUMPY.items()}


def to_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype of ``dtype`` (of every value entering the device)."""
    note_dtype(dtype)
    try:
        return TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise UnsupportedOperation(f"dtype {dtype} is not supported on the lazy device") from None


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy copy of a CPU tensor (bfloat16 through ml_dtypes; a negative or conjugate
    view resolved)."""
    t = t.detach().resolve_neg().resolve_conj()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    to_numpy_dtype(t.dtype)
    return t.contiguous().numpy().copy()


def numpy_to_tensor(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        bits = np.array(a, copy=True).view(np.int16).reshape(a.shape)
        return torch.from_numpy(bits).view(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))


# ---- promotion --------------------------------------------------------------------

def is_float(d: torch.dtype) -> bool:
    return d.is_floating_point


def is_complex(d: torch.dtype) -> bool:
    return d.is_complex


def is_integral(d: torch.dtype, include_bool: bool = False) -> bool:
    if d is torch.bool:
        return include_bool
    return not (d.is_floating_point or d.is_complex)


def _promote(a, b):
    if a is None:
        return b
    if b is None or a is b:
        return a
    return torch.promote_types(a, b)


def _combine(higher, lower):
    """c10's combine_categories: the higher-priority group wins within its category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return _to_complex(higher) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is torch.bool or lower.is_floating_point:
        return _promote(higher, lower)
    return higher


def _to_complex(d):
    return torch.complex128 if d is torch.float64 else torch.complex64


# the dtype of a complex tensor's real and imaginary parts, and back (``view_as_real``)
REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}
COMPLEX_OF = {v: k for k, v in REAL_OF.items()}
# whether any complex value has reached the lazy device (until then ops skip the check
# that keeps complex operands away from lowerings written for real ones)
COMPLEX_IN_USE = [False]


def note_dtype(dtype: torch.dtype) -> None:
    """Record that a value of ``dtype`` now exists on the device (every place that makes
    one without ``dispatch.record``'s check calls this)."""
    if dtype in REAL_OF:
        COMPLEX_IN_USE[0] = True


def result_type(*operands) -> torch.dtype:
    """torch.result_type over tensors (any device) and Python scalars, without dispatch."""
    dim = zero = wrapped = None
    for x in operands:
        if isinstance(x, torch.Tensor):
            if x.ndim:
                dim = _promote(dim, x.dtype)
            else:
                zero = _promote(zero, x.dtype)
        elif isinstance(x, bool):
            wrapped = _promote(wrapped, torch.bool)
        elif isinstance(x, int):
            wrapped = _promote(wrapped, torch.int64)
        elif isinstance(x, float):
            wrapped = _promote(wrapped, torch.get_default_dtype())
        elif isinstance(x, complex):
            wrapped = _promote(wrapped, _to_complex(torch.get_default_dtype()))
        elif x is None:
            continue
        else:
            raise TypeError(f"cannot promote {type(x).__name__}")
    return _combine(dim, _combine(zero, wrapped))


# Elementwise promotion kinds (as in torch._prims_common.ELEMENTWISE_TYPE_PROMOTION_KIND).
DEFAULT = "default"
INT_TO_FLOAT = "int_to_float"
ALWAYS_BOOL = "always_bool"
COMPLEX_TO_FLOAT = "complex_to_float"
NO_OPMATH = "no_opmath"
BOOL_TO_LONG = "bool_to_long"

HALF_TYPES = (torch.float16, torch.bfloat16)   # the 16-bit floating types


def elementwise_dtypes(kind: str, *operands) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, result dtype) of an elementwise op over ``operands``."""
    r = result_type(*operands)
    if kind == INT_TO_FLOAT and not (r.is_floating_point or r.is_complex):
        r = torch.get_default_dtype()
    if kind == BOOL_TO_LONG and r is torch.bool:
        r = torch.int64
    compute = torch.float32 if r in HALF_TYPES and kind != NO_OPMATH else r
    if kind == ALWAYS_BOOL:
        return compute, torch.bool
    if kind == COMPLEX_TO_FLOAT and r.is_complex:
        return compute, (torch.float64 if r is torch.complex128 else torch.float32)
    return compute, r


@functools.lru_cache(maxsize=None)
def can_cast(src: torch.dtype, dst: torch.dtype) -> bool:
    return torch.can_cast(src, dst)
