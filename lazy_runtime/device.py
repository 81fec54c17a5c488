"""``lazy_runtime.device()`` and the PrivateUse1 kernels that create lazy tensors.

A CPU tensor moved with ``.to(dev)`` never passes through ``__torch_dispatch__`` (it is
not a lazy tensor yet): torch sends ``_to_copy`` to the PrivateUse1 key, registered here,
which copies the data to the JAX device. Allocations on the device (``torch.empty(...,
device=dev)``, the first half of ``zeros``/``randn``/``full``...) land here too.
"""

from __future__ import annotations

import sys

import torch

from . import dtypes
from .backend import NAME
from . import ir
from .executor import data_node_from_cpu, data_tensor, filled_node, host_constant
from .metrics import METRICS
from .tensor import DEVICE, LazyTensor, Storage, _mws, new_base
from torch.nn.parameter import (UninitializedBuffer, UninitializedParameter,
                                UninitializedTensorMixin)

_lib = torch.library.Library("aten", "IMPL")


def device(index: int = 0) -> torch.device:
    """The lazy device: pass it to ``Module.to``, ``Tensor.to`` and factory functions."""
    if index != 0:
        raise ValueError("the lazy device has a single index, 0")
    return DEVICE


def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if x.device.type != "cpu":
        raise RuntimeError(f"cannot copy a {x.device} tensor to the lazy device directly")
    if isinstance(x, UninitializedTensorMixin):
        return _uninitialized(x, dtype)
    if dtype is not None and dtype != x.dtype:
        marks = getattr(x, "_lr_dynamic", None)
        x = x.to(dtype)
        if marks:
            x._lr_dynamic = marks
    t = data_tensor(x)
    if _moving_module():
        # a parameter or buffer (module state, never a dynamic dim): its sizes are not
        # guessed as symbols in the first step's graph (a U-Net's 16 and 32 channels
        # beside an image whose W // 4 and W // 2 are 16 and 32)
        t._st.node.born = -1
    return t


_APPLY = torch.nn.Module._apply.__code__


def _moving_module() -> bool:
    """Whether the copy being made is ``Module.to``/``_apply`` moving module state."""
    f = sys._getframe(1)   # (``_to_copy``; ``Module._apply`` calls ``convert`` that calls .to)
    for _ in range(5):
        if f is None:
            return False
        if f.f_code is _APPLY:
            return True
        f = f.f_back
    return False


class _Uninitialized:
    """A lazy module's parameter or buffer (``nn.LazyLinear``'s weight) moved to the device
    before its first call: still uninitialized (of torch's ``UninitializedParameter`` or
    ``UninitializedBuffer`` type), so the module infers its shape at that call as on the
    CPU or CUDA; ``materialize`` makes it a lazy tensor of that shape in place."""

    # (``Module.to`` wraps it in a Parameter: a detached copy, of this type)
    _allowed_methods = UninitializedTensorMixin._allowed_methods + [
        torch.Tensor.requires_grad_]

    def detach(self):
        return _uninitialized(self, None)

    def materialize(self, shape, device=None, dtype=None) -> None:
        made = _empty(tuple(shape), dtype or self.dtype)
        made.requires_grad_(self.requires_grad)
        if isinstance(self, torch.nn.Parameter):
            made._is_param = True
        torch.utils.swap_tensors(self, made)


class _UninitializedParameter(_Uninitialized, UninitializedParameter, LazyTensor):
    pass


class _UninitializedBuffer(_Uninitialized, UninitializedBuffer, LazyTensor):
    pass


def _uninitialized(x, dtype):
    cls = _UninitializedParameter if isinstance(x, torch.nn.Parameter) else \
        _UninitializedBuffer
    t = _mws(cls, (0,), dtype=dtype or x.dtype, device=DEVICE, requires_grad=x.requires_grad)
    t._st = Storage(filled_node((0,), t.dtype, 0))
    t._vw = ()
    t._vc = None
    return t


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return host_constant(tuple(size), dtype or torch.get_default_dtype(), 0)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return host_constant(tuple(size), dtype or torch.get_default_dtype(), 0)


_CONSTANT_OF = {torch.ops.aten.zeros.default: 0, torch.ops.aten.ones.default: 1}
_FULL = torch.ops.aten.full.default
_PLAIN_KWARGS = {"dtype", "layout", "device", "pin_memory"}
_EXACT_FLOATS = (torch.float32, torch.float64)


def _plain_fill(op, args, kwargs):
    """(shape, dtype, fill) of ``zeros``/``ones`` of a dtype, or ``full`` of a float in
    float32 or float64, where torch makes it without a question (sizes of non-negative
    ints, a strided layout, a value in the type's range); None otherwise, and the factory
    then runs in torch (its dtype inference, conversions and errors)."""
    n_args = 2 if op is _FULL else 1
    if len(args) != n_args or not _PLAIN_KWARGS.issuperset(kwargs) \
            or kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        return None
    size = args[0]
    if not isinstance(size, (list, tuple)) or not all(type(d) is int and d >= 0 for d in size):
        return None
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    if op is not _FULL:
        return tuple(size), dtype, _CONSTANT_OF[op]
    from .ops.elementwise import number_fits
    value = args[1]
    if type(value) is not float or dtype not in _EXACT_FLOATS or not number_fits(value, dtype):
        return None
    return tuple(size), dtype, value


def _host_factory(op, uniform=False):
    """A factory with deterministic values: made on the host by torch, copied as data
    (with its recipe: a replay at other sizes makes it again). A ``uniform`` one (every
    element the same: ``zeros``, ``ones``, ``full``) is a filled leaf instead, whose device
    array is shared by every call of that shape, dtype and value (no copy each step: an
    LSTM's zero initial states are made every call)."""
    plain = uniform and op in (_FULL, *_CONSTANT_OF)

    def make(*args, **kwargs):
        if plain:
            known = _plain_fill(op, args, kwargs)
            if known is not None:   # (no host tensor to make and read: ~7 µs a call)
                METRICS.host_ops += 1
                return filled_node(*known)
        items = tuple(sorted(kwargs.items()))
        t = op(*args, **kwargs)
        if uniform:
            METRICS.host_ops += 1
            fill = t.reshape(-1)[0].item() if t.numel() else 0
            return filled_node(tuple(t.shape), t.dtype, fill)

        def fresh():
            METRICS.host_ops += 1
            n = data_node_from_cpu(t)
            ir.HOST_RECIPES[n] = (make, args, items)
            return n
        return ir.host_leaf((make, args, items), tuple(t.shape), fresh)

    def impl(*args, **kwargs):
        kwargs["device"] = torch.device("cpu")
        return new_base(make(*args, **kwargs))
    return impl


_HOST_FACTORIES = ["arange", "arange.start", "arange.start_step", "full", "zeros", "ones",
                   "eye", "eye.m", "linspace", "logspace", "scalar_tensor", "tril_indices",
                   "triu_indices"]
_UNIFORM = ("full", "zeros", "ones")

_lib.impl("_to_copy", _to_copy, "PrivateUse1")
for _name in _HOST_FACTORIES:
    _packet, _, _ov = _name.partition(".")
    _lib.impl(_name, _host_factory(getattr(getattr(torch.ops.aten, _packet), _ov or "default"),
                                   uniform=_name in _UNIFORM), "PrivateUse1")
# autograd's zero gradients (sgn's of a real input, ...): plain zeros on this device
_lib.impl("_efficientzerotensor", _host_factory(torch.ops.aten.zeros.default, uniform=True),
          "PrivateUse1")
_lib.impl("empty.memory_format", _empty, "PrivateUse1")
_lib.impl("empty_strided", _empty_strided, "PrivateUse1")

__all__ = ["device", "NAME", "dtypes"]
