"""The two op tables, keyed by the same ATen overloads.

``RULES[op]`` gives an op's output type from its arguments (tensors are read only for
``.shape``/``.dtype``/``.ndim``; shapes come from ``shapeinfer.shape_fns``, never from
meta kernels). It returns ``(shape, dtype)`` or ``(shape, dtype, aux)``; an op registered
``multi=True`` returns a list of ``(shape, dtype)`` (an ``Outputs`` to give it an ``aux``).
``aux`` is extra static information for the lowering (the compute dtype of an elementwise
op) and is part of the graph key.

``LOWERINGS[op]`` turns the op into JAX: it receives the arguments with inputs replaced by
JAX values (tensors and dynamic scalars alike) and returns a JAX array (or a tuple).
With ``ctx=True`` it also receives a ``LowerCtx`` first (output shape/dtype/aux).

Both decorators accept several spellings of one op and refuse a second registration.
A rule may raise ``NoLowering`` for argument variants it does not support.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..dtypes import HALF_TYPES

RULES: dict = {}
LOWERINGS: dict = {}
# Padding rules (``ops/padding.py``): how an op runs on inputs padded along dynamic dims.
PAD_RULES: dict = {}
# Ops registered through ``elementwise`` (their padding rule passes padding through).
ELEMENTWISE: set = set()
# Elementwise ops whose rule, where every tensor operand has one shape and one float32 or
# float64 dtype and every other operand is a Python real number that fits that dtype, is
# ``(shape, dtype, dtype)`` and refuses nothing: op -> that rule. An op whose rule is
# wrapped later is trusted only if the wrapper says so (``refuse(..., same_layout=True)``),
# so ``SAME_LAYOUT.get(op) is RULES[op][0]`` is the test (``dispatch.same_layout_ok``).
SAME_LAYOUT: dict = {}
# Ops whose float Scalar arguments become runtime inputs (see ``dispatch``); the value is
# the set of argument positions/names that stay compile-time constants.
DYNAMIC_SCALARS: dict = {}
# Ops whose rule is a function of what ``dispatch._memo_key`` holds: the arguments' types
# and values, each tensor's shape, dtype and ndim (never its strides, values or
# requires_grad), and torch's default dtype; no other global state (grad mode, config).
# Their answers are memoized; a wrong entry here is a wrong shape, so each is audited.
PURE_RULES: set = set()
# The runtime's own decompositions, preferred to torch's (``torch._decomp``): an op whose
# torch decomposition reaches prims without lowerings is expressed in lowered aten ops.
DECOMPOSITIONS: dict = {}
# Ops whose rule and lowering are right for complex operands (``ops/complex_ops.py``);
# any other op meeting a complex value runs eagerly.
COMPLEX_OK: set = set()
# Values a lowering hands to a later lowering of the same trace (a forward's JAX pullback to
# its backward op); the executor clears it when each trace ends.
TRACE_SCRATCH: dict = {}
# Index checks of the trace being lowered: (bool scalar, message) pairs that ``check``
# adds; the executable returns the flags beside its results (see ``executor``).
TRACE_CHECKS: list = []
CHECKING = [True]   # off while a padded executable is traced (its padding is not checked)
# The trace's inputs, and values holding exactly an input's elements (a view, a reshape),
# by id: id -> (input position, value). An index check on one of them (``check_index``)
# needs no flag from the device: it becomes an ``InputCheck`` of the executable.
TRACE_INPUTS: dict = {}
TRACE_INPUT_CHECKS: list = []


class Outputs(list):
    """A multi rule's ``(shape, dtype)`` list with an ``aux`` for its node."""
    __slots__ = ("aux",)

    def __init__(self, outs, aux=None):
        super().__init__(outs)
        self.aux = aux


@dataclass(frozen=True)
class InputCheck:
    """Every element of input ``position`` lies in [low, high) or equals ``ignore``;
    otherwise ``message``. Judged on the host where the input arrives as a host array
    (a whole step's CPU arguments: no flag to return and read back)."""
    position: int
    low: int
    high: int
    ignore: int | None
    message: str


# torch's message for an integer division by zero (``check``'s error is then a RuntimeError)
ZERO_DIVISION = "ZeroDivisionError"


def check(bad, message: str) -> None:
    """Make the graph raise ``message`` after it runs if ``bad`` (a JAX bool array) has a
    true element: what torch checks on the host, or as a device-side assert on CUDA (an
    index out of bounds), where XLA would clamp and give a wrong value."""
    from ..config import config
    if CHECKING[0] and config.check_indices:
        import jax.numpy as jnp
        TRACE_CHECKS.append((jnp.any(bad), message))


def check_input(value, low: int, high: int, ignore, message: str) -> bool:
    """Whether ``value`` holds exactly the elements of one of the trace's inputs (then
    the check is recorded as an ``InputCheck``)."""
    from ..config import config
    hit = TRACE_INPUTS.get(id(value))
    if hit is None or hit[1] is not value:
        return False
    if CHECKING[0] and config.check_indices:
        TRACE_INPUT_CHECKS.append(InputCheck(hit[0], low, high, ignore, message))
    return True


@dataclass(frozen=True)
class Lowering:
    fn: Callable
    ctx: bool


class LowerCtx:
    """What a lowering may know about its node besides the argument values."""

    __slots__ = ("shape", "dtype", "aux", "in_dtypes")

    def __init__(self, shape, dtype, aux, in_dtypes):
        self.shape = shape
        self.dtype = dtype
        self.aux = aux
        self.in_dtypes = in_dtypes


def _check_new(table: dict, op, kind: str):
    if not isinstance(op, torch._ops.OpOverload):
        raise TypeError(f"{kind} must be registered for an OpOverload, got {op!r}")
    if op in table:
        raise ValueError(f"duplicate {kind} for {op}")


def rule(*ops, multi: bool = False, dynamic_scalars: bool = False, static=(),
         pure: bool = False):
    """Register ``fn`` as the rule of ``ops``; ``pure``: see ``PURE_RULES``."""
    def deco(fn):
        for op in ops:
            _check_new(RULES, op, "rule")
            RULES[op] = (fn, multi)
            if pure:
                PURE_RULES.add(op)
            if dynamic_scalars:
                DYNAMIC_SCALARS[op] = frozenset(static)
        return fn
    return deco


def lowering(*ops, ctx: bool = False):
    def deco(fn):
        for op in ops:
            _check_new(LOWERINGS, op, "lowering")
            LOWERINGS[op] = Lowering(fn, ctx)
        return fn
    return deco


def _function_table(table: dict, kind: str):
    """A decorator registering a function per op in ``table``."""
    def register(*ops):
        def deco(fn):
            for op in ops:
                _check_new(table, op, kind)
                table[op] = fn
            return fn
        return deco
    return register


pad_rule = _function_table(PAD_RULES, "padding rule")
decomposition = _function_table(DECOMPOSITIONS, "decomposition")


def decomposed_in_own_type(*ops) -> None:
    """Decompose ``ops`` with torch's decompositions, but where every tensor argument has one
    16-bit type, without their float32 upcast: torch's CPU kernels of these ops compute
    16-bit tensors in their own type, each operation rounded (``linalg.cross``,
    ``special.entr``), where the decompositions compute in float32 and round once."""
    import inspect

    import torch._decomp
    for op in ops:
        upcast = torch._decomp.decomposition_table[op]
        bare = inspect.unwrap(upcast)

        def decompose(*args, _upcast=upcast, _bare=bare, **kwargs):
            types = {a.dtype for a in args if isinstance(a, torch.Tensor)}
            own = types.pop() if len(types) == 1 else None
            if own not in HALF_TYPES:
                return _upcast(*args, **kwargs)
            out = _bare(*args, **kwargs)   # (a number among its steps may promote: cast back)
            return out if out.dtype == own else out.to(own)
        decomposition(op)(decompose)


def decomposed_where(op, ok, reason: str) -> None:
    """``op``'s decomposition (the runtime's own if registered before, else torch's, else
    its composite form) where ``ok(*args, **kwargs)``; elsewhere the op runs eagerly
    (torch's kernel refuses what its decomposition would compute, or decides otherwise)."""
    import torch._decomp

    from ..errors import NoLowering
    inner = DECOMPOSITIONS.get(op) or torch._decomp.decomposition_table.get(op) or \
        op.decompose

    def decompose(*args, **kwargs):
        if not ok(*args, **kwargs):
            raise NoLowering(op, reason)
        return inner(*args, **kwargs)
    DECOMPOSITIONS[op] = decompose


def refuse(ops, bad, reason: str, *, with_kwargs: bool = False,
           same_layout: bool = False) -> None:
    """Wrap the rules of ``ops``: where ``bad(args, result dtype)`` (``bad(args, kwargs,
    result dtype)`` ``with_kwargs``), the op runs eagerly and torch raises its own error (a
    kernel torch does not build for that dtype, an argument it refuses). ``same_layout``:
    ``bad`` is never true in the case ``SAME_LAYOUT`` describes. A pure rule stays pure:
    ``bad`` must read only what ``PURE_RULES`` allows."""
    from ..errors import NoLowering
    for op in ops:
        fn, multi = RULES[op]

        def checked(*args, _fn=fn, _op=op, **kwargs):
            out = _fn(*args, **kwargs)
            if bad(args, kwargs, out[1]) if with_kwargs else bad(args, out[1]):
                raise NoLowering(_op, reason)
            return out
        if same_layout and SAME_LAYOUT.get(op) is fn:
            SAME_LAYOUT[op] = checked
        RULES[op] = (checked, multi)


def has_lowering(op) -> bool:
    return op in RULES and op in LOWERINGS
