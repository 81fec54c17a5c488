"""The public entry point: ``analyze(model, args, kwargs, dims)``."""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from . import ops  # noqa: F401  (fills the rule tables)
from . import symbolic as sym
from .diagnostics import Diagnostic
from .interp.interpreter import Interpreter
from .interp.state import AnalysisContext, Entry, Frame
from .render import const_tuple_as_values, value_json
from .size_audit import SizeAudit
from .values import TensorType, Value, from_python, tensor

JSON_VERSION = 1


class AnalysisError(ValueError):
    """The request itself is wrong (a bad ``dims`` spec); never raised for user code."""


@dataclass
class AnalysisResult:
    symbols: dict  # name -> sample size
    entries: dict  # (file, line, name) -> Entry
    diagnostics: list
    output: Optional[Value] = None
    seconds: float = 0.0
    files: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)  # forward parameter -> abstract input type
    size_audit: Optional[SizeAudit] = None  # forward's size arithmetic, for replay across sizes

    @property
    def errors(self) -> list:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def shape_only_reasons(self) -> list:
        """Why forward's behaviour might depend on more than input shapes and concrete
        attributes: data-dependent branches or sizes (SI003), calls with no rule (SI001),
        unread sources (SI006) or analyzer failures (SI005). Empty means a recorded graph
        can be replayed for any input with the same symbolic signature."""
        return [d for d in self.diagnostics if d.code in ("SI001", "SI003", "SI005", "SI006")]

    @property
    def shape_only(self) -> bool:
        return not self.shape_only_reasons

    def entries_in(self, filename: str) -> list:
        real = os.path.realpath(filename)
        # by line; names on one line keep the order they were bound in
        return sorted((e for e in self.entries.values() if os.path.realpath(e.file) == real),
                      key=lambda e: e.line)

    def to_json(self) -> dict:
        entries = []
        for e in sorted(self.entries.values(), key=lambda e: (e.file, e.line, e.name)):
            item = {"file": display_path(e.file), "line": e.line, "name": e.name}
            item.update(value_json([(c, const_tuple_as_values(v)) for c, v in e.values]))
            entries.append(item)
        diags = []
        for d in self.diagnostics:
            diags.append(d.to_json(display_path))
        inputs = {name: [sym.dim_str(d) for d in t.shape] for name, t in self.inputs.items()
                  if isinstance(t, TensorType) and t.shape is not None}
        control = {"shape_only": self.shape_only,
                   "reasons": [f"{display_path(d.file)}:{d.line}: {d.code} {d.message}"
                               for d in self.shape_only_reasons]}
        if self.size_audit is not None:
            control["size_arithmetic"] = self.size_audit.to_json(self.diagnostics)
        return {"version": JSON_VERSION, "symbols": dict(self.symbols), "inputs": inputs,
                "control_flow": control, "entries": entries, "diagnostics": diags}


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _symbols_from_dims(bound: dict, dims: dict) -> tuple[dict, dict]:
    """Sample sizes of the declared symbols, and abstract types of the declared inputs."""
    symbols: dict[str, int] = {}
    abstract: dict[str, Value] = {}
    if not isinstance(dims or {}, dict):
        raise AnalysisError(f"dims must map forward's parameter names to shapes, not {type(dims).__name__}")
    for name, spec in (dims or {}).items():
        if name not in bound:
            raise AnalysisError(f"dims names {name!r}, which is not a parameter of forward "
                                f"(parameters: {', '.join(bound) or 'none'})")
        value = bound[name]
        if not isinstance(value, torch.Tensor):
            raise AnalysisError(f"dims names {name!r}, but its sample value is a {type(value).__name__}, "
                                f"not a tensor")
        if not isinstance(spec, (tuple, list)):
            raise AnalysisError(f"dims for {name!r} must be a tuple or list with one entry per dim, "
                                f"not {type(spec).__name__}")
        spec = tuple(spec)
        if len(spec) != value.dim():
            raise AnalysisError(f"dims for {name!r} has {len(spec)} entries but the sample tensor has "
                                f"{value.dim()} dims {tuple(value.shape)}")
        shape = []
        for i, (d, real) in enumerate(zip(spec, value.shape)):
            if isinstance(d, str):
                if not d.isidentifier():
                    raise AnalysisError(f"dims for {name!r}: symbol {d!r} is not an identifier")
                if d in symbols and symbols[d] != real:
                    raise AnalysisError(f"symbol {d} is {symbols[d]} in one input and {real} in {name!r} "
                                        f"dim {i}: the sample sizes must agree")
                symbols[d] = int(real)
                shape.append(sym.symbol(d))
            elif d is None or isinstance(d, int):
                if isinstance(d, int) and d != real:
                    raise AnalysisError(f"dims for {name!r} says dim {i} is {d}, but the sample has {real}")
                shape.append(int(real))
            else:
                raise AnalysisError(f"dims for {name!r}: entry {d!r} must be a symbol name, an int or None")
        abstract[name] = tensor(value.dtype, tuple(shape), value.device.type)
    return symbols, abstract


def _definition_site(fn) -> tuple:
    """(file, line, col) where ``fn`` is defined, for a diagnostic about all of it."""
    try:
        fn = inspect.unwrap(getattr(fn, "__func__", fn))
        return inspect.getsourcefile(fn) or "<unknown>", fn.__code__.co_firstlineno, 1
    except Exception:
        return "<unknown>", 0, 0


def analyze(model, args=(), kwargs=None, dims=None) -> AnalysisResult:
    """Analyze ``model.forward`` for the sample input ``args``/``kwargs``.

    ``dims`` maps a forward parameter name to one entry per dimension: a symbol name
    for a symbolic dim, an int or None for a concrete one. The model is never run:
    shapes come from the source of forward and everything it calls, with layer
    hyper-parameters read from the live model.
    """
    start = time.perf_counter()
    kwargs = dict(kwargs or {})
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError) as e:  # a C function or a callable without one
        raise AnalysisError(f"cannot read the signature of {forward!r}: {e}") from e
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise AnalysisError(f"the sample input does not match forward's signature: {e}") from e
    symbols, abstract = _symbols_from_dims(bound.arguments, dims or {})
    ctx = AnalysisContext(symbols)
    ctx.size_audit = SizeAudit(symbols)
    interp = Interpreter(ctx)

    def abstract_of(name, value):
        return abstract[name] if name in abstract else from_python(value)

    a_args = []
    a_kwargs = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            a_args.extend(from_python(v) for v in value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            a_kwargs.update({k: from_python(v) for k, v in value.items()})
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            a_args.append(abstract_of(name, value))
        else:
            a_kwargs[name] = abstract_of(name, value)
    root = Frame("<analyze>", {})
    try:
        if isinstance(model, torch.nn.Module):
            output = interp.caller.call_module(model, a_args, a_kwargs, root)
        else:
            output = interp.caller.call_callable(model, a_args, a_kwargs, root)
    except Exception as e:  # an analyzer bug outside any statement: keep what was found
        ctx.loc = _definition_site(forward)
        output = ctx.internal_failure("analysis of forward", e)
    ctx.size_audit.note(output, ctx.loc)  # a module called directly evaluates nothing
    files = sorted({e.file for e in ctx.entries.values()})
    return AnalysisResult(symbols, ctx.entries, ctx.diagnostics, output, time.perf_counter() - start, files,
                          dict(abstract), ctx.size_audit)


__all__ = ["analyze", "AnalysisResult", "AnalysisError", "Diagnostic", "Entry", "TensorType", "Any"]
