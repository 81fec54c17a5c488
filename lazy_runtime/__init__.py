"""lazy_runtime: a LazyTensor runtime for PyTorch over JAX/XLA.

    import lazy_runtime as lr
    dev = lr.device()
    model = model.to(dev); x = x.to(dev)
    loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
    lr.mark_step()            # cut the graph, compile or reuse, execute
    loss.item()               # reading a value is also a barrier
    print(lr.metrics_report())

See lazy_runtime/README.md for the dtype and RNG policies, fallback and metrics.
"""

from __future__ import annotations

import contextlib

from . import ops  # noqa: F401  (registers every rule and lowering)
from . import autocast, dispatch  # noqa: F401  (autocast registers its kernels)
from .config import config
from .device import device
from .dynamic import mark_dynamic
from .compile import compile, compile_optimizer  # noqa: A004
from .errors import (DeviceMemoryError, DimOutOfRangeError, IndexCheckError,
                     LazyRuntimeError, ShapeError, ShapeMismatchError, UnsupportedOperation,
                     ZeroDivisionCheckError)
from .step import compile_step
from .executor import cache_info, clear_cache, mark_step, sync
from .log import configure_from_env as _logs_from_env, set_logs
from .metrics import metrics, metrics_report, reset_metrics
from .random import manual_seed
from .replay import replayable_hook
from .tensor import LazyTensor

__all__ = ["device", "mark_step", "sync", "metrics", "metrics_report", "reset_metrics",
           "manual_seed", "config", "cache_info", "clear_cache", "force_fallback",
           "LazyTensor", "LazyRuntimeError", "UnsupportedOperation", "IndexCheckError",
           "ZeroDivisionCheckError", "DeviceMemoryError",
           "ShapeError", "ShapeMismatchError", "DimOutOfRangeError", "is_lazy",
           "mark_dynamic", "compile", "compile_optimizer", "compile_step", "set_logs",
           "replayable_hook"]


def is_lazy(t) -> bool:
    return isinstance(t, LazyTensor)


@contextlib.contextmanager
def force_fallback(*ops):
    """Run ``ops`` eagerly in torch (as if they had no lowering) inside the block."""
    added = [op for op in ops if op not in config.force_fallback]
    config.force_fallback.update(added)
    dispatch.clear_handler_cache()
    try:
        yield
    finally:
        config.force_fallback.difference_update(added)
        dispatch.clear_handler_cache()


_logs_from_env()
