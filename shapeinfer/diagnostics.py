"""Diagnostics are data: a stable code, a severity, a message, a source span, and the
dims the message names (``dims``: sizes or symbolic expressions, rendered as strings).

All codes live in ``CODES`` below with a one-line description; rendering (text with a
caret, JSON, SARIF) lives in ``report``.

Where the dims come from: shape functions know them, the interpreter reports. A
``ShapeError``'s dims are passed on explicitly where the interpreter reports it; a
requirement (SI300) is sent while ``reporting_dims`` holds its two sides. A
``Diagnostic`` given no dims takes those in flight: the requirement's, or those of the
``ShapeError`` being handled when it has this code and message.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

from . import symbolic as sym

ERROR, WARNING, NOTE = "error", "warning", "note"

# code -> (short name, default severity, what it means)
CODES: dict[str, tuple[str, str, str]] = {
    # analysis could not decide something: never an error, always a reason
    "SI001": ("no-rule", NOTE, "a call has no shape rule; its result is unknown"),
    "SI002": ("unsupported-syntax", NOTE, "a construct the analyzer does not model"),
    "SI003": ("data-dependent", NOTE, "a value depends on tensor data, not shapes"),
    "SI004": ("analysis-limit", NOTE, "a path, loop or recursion limit was reached"),
    "SI005": ("internal", WARNING, "the analyzer failed on this line; the result is unknown"),
    "SI006": ("source-unavailable", NOTE, "the source of a called function could not be read"),
    "SI007": ("bad-call", ERROR, "a call's arguments do not match the callee's signature"),
    "SI008": ("name-error", ERROR, "a name is not defined"),
    "SI009": ("attribute-error", ERROR, "an object has no such attribute"),
    "SI010": ("raises", WARNING, "a path raises an exception under a symbolic condition"),
    # shape errors (from shape_fns)
    "SI101": ("broadcast", ERROR, "elementwise operands cannot be broadcast together"),
    "SI110": ("reshape", ERROR, "view/reshape with more than one -1"),
    "SI111": ("reshape", ERROR, "view/reshape does not preserve the element count"),
    "SI112": ("permute", ERROR, "permute dims do not match the tensor's rank"),
    "SI113": ("flatten", ERROR, "bad flatten range"),
    "SI114": ("expand", ERROR, "expand/repeat sizes do not fit"),
    "SI115": ("cat", ERROR, "cat/stack operands have mismatched shapes"),
    "SI116": ("split", ERROR, "split sections do not add up"),
    "SI117": ("split", NOTE, "split/chunk of a symbolic size"),
    "SI120": ("index", ERROR, "bad index or slice"),
    "SI130": ("matmul", ERROR, "matmul inner dimensions differ"),
    "SI131": ("linear", ERROR, "linear layer in_features differ from the input's last dim"),
    "SI132": ("einsum", ERROR, "einsum operands do not fit the equation"),
    "SI140": ("conv", ERROR, "convolution input has the wrong rank"),
    "SI141": ("conv", ERROR, "convolution input channels differ from in_channels"),
    "SI142": ("conv", ERROR, "bad convolution padding"),
    "SI143": ("size", ERROR, "an output size is not positive: the input is too small"),
    "SI144": ("pool", ERROR, "pooling input has the wrong rank"),
    "SI145": ("interpolate", ERROR, "interpolate needs size or scale_factor"),
    "SI146": ("pad", ERROR, "bad pad argument"),
    "SI147": ("pixel-shuffle", ERROR, "pixel_shuffle channels not divisible"),
    "SI150": ("norm", ERROR, "normalization shape or channels do not match"),
    "SI151": ("embedding", ERROR, "embedding indices must be an integer tensor"),
    "SI152": ("rnn", ERROR, "recurrent layer input size or hidden state shape mismatch"),
    "SI153": ("attention", ERROR, "attention operands have mismatched shapes"),
    "SI160": ("dtype", ERROR, "an operand has the wrong dtype"),
    "SI161": ("rank", ERROR, "an operand has the wrong rank"),
    "SI200": ("dim", ERROR, "a dim argument is not a concrete int"),
    "SI201": ("dim", ERROR, "a dim argument is out of range"),
    "SI202": ("dim", ERROR, "a dim repeats"),
    # requirements that hold only for some sizes
    "SI300": ("constraint", WARNING, "shapes agree only when a condition on the symbols holds"),
}


_dims_in_flight: contextvars.ContextVar[tuple] = contextvars.ContextVar("dims_in_flight", default=())


@contextlib.contextmanager
def reporting_dims(dims: Sequence):
    """The dims of a requirement while it is being reported."""
    token = _dims_in_flight.set(render_dims(dims))
    try:
        yield
    finally:
        _dims_in_flight.reset(token)


def render_dims(dims: Sequence) -> tuple[str, ...]:
    """Dims as strings, as messages write them ('?' for an unknown one)."""
    return tuple(sym.dim_pretty(sym.normalize(d)) for d in dims)


def dims_in_flight(code: str, message: str) -> tuple[str, ...]:
    """The dims of the shape error being handled when it is this diagnostic's (same code,
    message ending with its message), else those of the requirement being reported."""
    err = sys.exc_info()[1]
    err_dims = getattr(err, "dims", None)
    if err_dims and getattr(err, "code", None) == code and message.endswith(getattr(err, "message", "\0")):
        return render_dims(err_dims)
    return _dims_in_flight.get()


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    file: str
    line: int
    col: int = 0
    severity: str = ""
    notes: tuple = field(default=())
    when: str | None = None  # the condition on the symbols under which it happens
    dims: Optional[tuple] = None  # the dims the message names, as strings; None: those in flight
    # the calls the analysis was inside, outermost first: (file, line, col) of each call
    # site (an error in a library's attention function says which model line called it)
    stack: tuple = field(default=())

    def __post_init__(self):
        if not self.severity:
            object.__setattr__(self, "severity", CODES.get(self.code, ("", ERROR, ""))[1])
        object.__setattr__(self, "dims", dims_in_flight(self.code, self.message) if self.dims is None
                           else tuple(str(d) for d in self.dims))

    def to_json(self, path=str) -> dict:
        """The JSON object (``path`` maps file names, e.g. to display paths)."""
        out = {"file": path(self.file), "line": self.line, "col": self.col,
               "severity": self.severity, "code": self.code, "message": self.message}
        if self.notes:
            out["notes"] = list(self.notes)
        if self.when:
            out["when"] = self.when
        if self.dims:
            out["dims"] = list(self.dims)
        if self.stack:
            out["stack"] = [{"file": path(f), "line": ln, "col": c} for f, ln, c in self.stack]
        return out
