"""``torch.autocast(device_type="lazy_jax")``: mixed precision on the lazy device.

torch runs the autocast kernel of an op's ``AutocastPrivateUse1`` key (inside an enabled
region) before autograd, so the casts it makes are recorded, differentiated and compiled
like any other op. torch registers none for a renamed PrivateUse1 backend; they are
registered here, from Python:

* every op falls through the key (casts nothing), except
* the ops torch's **CPU** autocast casts (``AutocastCPU``'s registrations, read from the
  dispatcher, so the lists follow the installed torch), with the CPU policy: matmuls,
  convolutions, ``linear``, ``prelu`` and attention run in the autocast dtype; ``cat``,
  ``stack`` and ``index_copy`` in float32 if an input is float32, else the autocast dtype;
  the rest (losses, ``prod``, pooling in 3-d, linalg, fft, ...) in float32.

So a model under ``torch.autocast("lazy_jax", dtype)`` computes in the same dtypes as
under ``torch.autocast("cpu", dtype)`` (tested op by op against it). As in torch, only
floating-point tensors of the device other than float64 are cast; the default dtype is
torch's for a PrivateUse1 backend (float16); bfloat16 and float16 are supported.
"""

from __future__ import annotations

import functools

import torch

from .backend import NAME

# CPU autocast's ops that run in the lower-precision dtype, and those that promote.
LOWER_PRECISION = frozenset({
    "_addmm_activation", "_convolution", "_native_multi_head_attention", "addbmm", "addmm",
    "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "linalg_vecdot", "linear", "matmul",
    "mkldnn_rnn_layer", "mm", "prelu", "scaled_dot_product_attention",
})
PROMOTE = frozenset({"cat", "stack", "index_copy"})

_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def policy(op_name: str) -> str:
    """``lower``, ``promote`` or ``fp32`` for an op (its name without ``aten::``/overload)."""
    if op_name in LOWER_PRECISION:
        return "lower"
    return "promote" if op_name in PROMOTE else "fp32"


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and \
        t.dtype is not torch.float64 and t.device.type == NAME


def _cast(a, dtype):
    if _eligible(a):
        return a if a.dtype is dtype else a.to(dtype)
    if isinstance(a, (list, tuple)) and any(map(_eligible, a)):
        return type(a)(_cast(x, dtype) for x in a)
    return a


def _flat_eligible(a, out: list) -> list:
    if _eligible(a):
        out.append(a.dtype)
    elif isinstance(a, (list, tuple)):
        for x in a:
            _flat_eligible(x, out)
    return out


def _promoted(dtypes: list) -> torch.dtype:
    """The type a promoting op runs in, as torch's autocast picks it: float32 if any input
    is float32, else the autocast dtype, which all of them must then be."""
    low = torch.get_autocast_dtype(NAME)
    if torch.float32 in dtypes:
        return torch.float32
    if any(d is not low for d in dtypes):
        raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return low


def _kernel(op, kind: str):
    """The autocast kernel of ``op``: cast, then call ``op`` below the autocast key."""
    @functools.wraps(op)
    def run(*args, **kwargs):
        if kind == "lower":
            dtype = torch.get_autocast_dtype(NAME)
        elif kind == "fp32":
            dtype = torch.float32
        else:
            dtype = _promoted(_flat_eligible((args, tuple(kwargs.values())), []))
        args = tuple(_cast(a, dtype) for a in args)
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            return op(*args, **kwargs)
    return run


def _cpu_autocast_ops() -> list:
    """The overloads torch's CPU autocast registers a kernel for."""
    out = []
    for name in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"):
        ns, _, rest = name.partition("::")
        if ns != "aten":   # (the kernels are registered in aten's library)
            continue
        base, _, overload = rest.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is not None:
            out.append((op, base, overload))
    return out


def state():
    """What a replay's signature holds of autocast: None when it is off on the device,
    else its dtype (the casts are part of what was traced)."""
    return torch.get_autocast_dtype(NAME) if torch.is_autocast_enabled(NAME) else None


_LIBS: list = []


def register() -> None:
    """Register the fallthrough and the cast kernels (once)."""
    if _LIBS:
        return
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    for op, base, overload in _cpu_autocast_ops():
        kernels.impl(f"{base}.{overload}" if overload else base, _kernel(op, policy(base)),
                     "AutocastPrivateUse1")
    _LIBS.extend([fallback, kernels])


register()
