"""The runtime's exceptions.

``NoLowering`` is internal: a rule or the handler lookup raises it when an op (or one
variant of its arguments) has no JAX lowering. It is caught in exactly one place, the
dispatch boundary in ``dispatch.py``, which runs the op eagerly in torch instead.
``LazyRuntimeError`` and its subclasses reach the user: situations the runtime refuses
to guess about (resizing a lazy tensor, writing through an expanded view, ...).
"""


class NoLowering(Exception):
    """This op, with these arguments, has no lowering: fall back to eager torch."""

    def __init__(self, op, reason: str = "no lowering"):
        super().__init__(f"{op}: {reason}")
        self.op = op
        self.reason = reason


class LazyRuntimeError(RuntimeError):
    """An error raised by the lazy runtime itself (not by a torch op it emulates)."""


class UnsupportedOperation(LazyRuntimeError):
    """Something the lazy device cannot do and will not approximate."""


class PaddedLoweringError(LazyRuntimeError):
    """An op's padding rule let through a program its lowering cannot build (a bug in the
    rule, not in user code): the barrier compiles the graph at its exact shapes instead."""

    def __init__(self, op, message: str):
        super().__init__(f"padded lowering of {op} failed: {message}")
        self.op = op


class IndexCheckError(LazyRuntimeError, IndexError):
    """An index out of bounds, found on the device after its graph ran (XLA would clamp it
    and give a wrong value; torch raises at once on the CPU, at the next sync on CUDA)."""
