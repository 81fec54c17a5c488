"""The torch side of the device: PrivateUse1 renamed to ``lazy_jax``.

torch's Python backend hooks (``_setup_privateuseone_for_python_backend``) give the
device hooks, so autograd, ``Module.to`` and ``torch.device("lazy_jax")`` work; its
guard is C++ (``native_guard``) where that can be built, torch's Python one otherwise.
Lazy tensors themselves are wrapper subclasses (see ``tensor``); the kernels registered
here (in ``device``) only cover ops that reach the PrivateUse1 key with no lazy tensor
argument: copies onto the device and allocations.
"""

from __future__ import annotations

import contextlib

import torch

from . import native_guard

NAME = "lazy_jax"
# What guards the device: "native" (``native_guard``: C++) or "python (why)" (torch's
# Python guard). Set by ``ensure_backend``; shown by ``metrics_report``.
DEVICE_GUARD = ["python (not registered yet)"]


class _BackendModule:
    """What ``torch.lazy_jax`` answers (torch queries a few of these)."""

    _initialized = True   # ``torch.utils.checkpoint`` saves RNG states only when set

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        from . import random
        random.manual_seed(seed)

    def manual_seed(self, seed: int) -> None:
        self.manual_seed_all(seed)

    def get_rng_state(self, device=None) -> torch.Tensor:
        from . import random
        return random.get_state()

    def set_rng_state(self, state, device=None) -> None:
        from . import random
        random.set_state(state)

    def device(self, index):
        """``with torch.lazy_jax.device(i):`` (one device: nothing to switch)."""
        return contextlib.nullcontext()

    def get_amp_supported_dtype(self) -> list:
        """What ``torch.autocast(device_type="lazy_jax")`` may cast to (its kernels: see
        ``autocast``); torch warns and disables autocast for any other dtype."""
        return [torch.bfloat16, torch.float16]


def errors_cross_backward() -> bool:
    """Whether an exception may cross autograd's engine on this device: with the C++
    guard it reaches ``backward()``'s caller as on the CPU; torch's Python guard aborts
    the process while it unwinds, so errors inside backward are then kept for the next
    barrier instead (``dispatch._defer_error``, ``tensor._deferring``)."""
    return DEVICE_GUARD[0] == native_guard.NATIVE


def ensure_backend() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current == NAME:
        return
    if current != "privateuseone":
        raise RuntimeError(f"the PrivateUse1 backend is already named {current!r}; lazy_runtime "
                           f"needs it as {NAME!r}")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    # first: torch then keeps its Python guard out (it registers one only where none is)
    DEVICE_GUARD[0] = native_guard.install()
    _setup_privateuseone_for_python_backend(rename=NAME, backend_module=_BackendModule())
    warn_if_cuda()


CUDA_WARNING = (
    "lazy_runtime named torch's PrivateUse1 backend 'lazy_jax', and torch now takes it for "
    "this process's accelerator (its rule for a named PrivateUse1 backend, "
    "pytorch/pytorch#161129): a backward over CUDA tensors in this process fails torch's "
    "internal assert 'opt_ready_stream && opt_parent_stream' (seen with torch 2.11 on an "
    "H100). Run eager CUDA training in a process that does not import lazy_runtime; "
    "lazy_runtime itself runs on the GPU through XLA (lr.config.platform = 'gpu').")


def warn_if_cuda() -> bool:
    """Warn where CUDA is usable: eager CUDA autograd breaks once the device is named.
    Asked only of a CUDA build (``is_available`` on a CPU build costs nothing anyway)."""
    if torch.backends.cuda.is_built() and torch.cuda.is_available():
        import warnings
        warnings.warn(CUDA_WARNING, RuntimeWarning, stacklevel=3)
        return True
    return False


ensure_backend()
