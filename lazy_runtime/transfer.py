"""Host arrays onto the JAX device.

``jax.device_put`` spends about 40 µs a call here on argument checks before the copy (a
lazy step copies its inputs, and host-made constants, every step); jax's own lower-level
transfer, which it ends in, does the same copy for one array on one device in about 10.
That one is private to jax: where it is missing or refuses, the public call is used from
then on.
"""

from __future__ import annotations

import jax
import numpy as np

from .config import config

_fast = [True]
_shardings: dict = {}


def put(a: np.ndarray):
    """``a`` (a host array the caller owns: the transfer may alias it) on the device, as
    ``jax.device_put(a, device)`` with 64-bit types kept."""
    device = config.jax_device()
    with jax.enable_x64(True):
        if _fast[0]:
            try:
                return _lower_level_put(a, device)
            except Exception:   # a jax without it, or one whose signature moved
                _fast[0] = False
        return jax.device_put(a, device)


def _lower_level_put(a: np.ndarray, device):
    from jax._src import core
    from jax._src.interpreters import pxla
    sharding = _shardings.get(device)
    if sharding is None:
        sharding = _shardings[device] = jax.sharding.SingleDeviceSharding(device)
    return pxla.batched_device_put(core.ShapedArray(a.shape, a.dtype), sharding, [a], [device])
