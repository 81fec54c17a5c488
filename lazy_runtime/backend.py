"""The torch side of the device: PrivateUse1 renamed to ``lazy_jax``.

torch's Python backend hooks (``_setup_privateuseone_for_python_backend``) give the
device a guard and hooks, so autograd, ``Module.to`` and ``torch.device("lazy_jax")``
work. Lazy tensors themselves are wrapper subclasses (see ``tensor``); the kernels
registered here (in ``device``) only cover ops that reach the PrivateUse1 key with no
lazy tensor argument: copies onto the device and allocations.
"""

from __future__ import annotations

import contextlib

import torch

NAME = "lazy_jax"


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


def ensure_backend() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current == NAME:
        return
    if current != "privateuseone":
        raise RuntimeError(f"the PrivateUse1 backend is already named {current!r}; lazy_runtime "
                           f"needs it as {NAME!r}")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    _setup_privateuseone_for_python_backend(rename=NAME, backend_module=_BackendModule())


ensure_backend()
