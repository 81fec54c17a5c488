"""The runtime's exceptions.

``NoLowering`` is internal: a rule or the handler lookup raises it when an op (or one
variant of its arguments) has no JAX lowering. It is caught in exactly one place, the
dispatch boundary in ``dispatch.py``, which runs the op eagerly in torch instead.
``LazyRuntimeError`` and its subclasses reach the user: situations the runtime refuses
to guess about (resizing a lazy tensor, writing through an expanded view, ...). A shape
error an op's rule finds (the analyzer's ``ShapeError``, with its stable code) reaches the
user as the type torch raises for it: ``ShapeMismatchError`` (a ``RuntimeError``) or, for
a dim out of range, ``DimOutOfRangeError`` (an ``IndexError``).
"""

from shapeinfer.shape_fns import ShapeError


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


class DeviceMemoryError(LazyRuntimeError):
    """A compiled graph needs more memory than its device has free (XLA's own count of
    its scratch and results): refused before it runs, where running it would have the
    process killed or the device fail mid-step."""


class PaddedLoweringError(LazyRuntimeError):
    """An op's padding rule let through a program its lowering cannot build (a bug in the
    rule, not in user code): the barrier compiles the graph at its exact shapes instead."""

    def __init__(self, op, message: str):
        super().__init__(f"padded lowering of {op} failed: {message}")
        self.op = op


class IndexCheckError(LazyRuntimeError, IndexError):
    """An index out of bounds, found on the device after its graph ran (XLA would clamp it
    and give a wrong value; torch raises at once on the CPU, at the next sync on CUDA)."""


class ZeroDivisionCheckError(LazyRuntimeError, RuntimeError):
    """An integer division by zero (``//``, ``%``, ``fmod``, ``div`` with a rounding mode),
    found on the device after its graph ran: XLA gives a value where torch raises
    ``RuntimeError('ZeroDivisionError')`` on the CPU."""


class ShapeMismatchError(ShapeError, RuntimeError):
    """Shapes an op refuses (torch raises ``RuntimeError``); ``code`` is the analyzer's."""


class DimOutOfRangeError(ShapeError, IndexError):
    """A dim out of range (torch raises ``IndexError``)."""


def as_torch_error(e: ShapeError) -> ShapeError:
    """``e`` as the exception type torch raises for it (same code and message)."""
    cls = DimOutOfRangeError if e.code == "SI201" else ShapeMismatchError
    return cls(e.code, e.message, e.dims, e.unless)
