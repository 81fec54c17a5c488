"""Abstract values: the type lattice the interpreter computes with.

Immutable values (``TensorType``, ``Const``, ``SymScalar``, ``TupleV``, ``Unknown``,
``UnionV``) are frozen dataclasses. Python's mutable containers and objects
(``ListV``, ``DictV``, ``ObjV``) are mutable on purpose: model code appends to lists and
sets attributes, and aliasing must behave as in Python. They are copied, with their
aliasing preserved, whenever the interpreter forks a path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from . import symbolic as sym
from .symbolic import Dim, Shape


class Value:
    """Base of every abstract value."""

    __slots__ = ()


@dataclass(frozen=True)
class TensorType(Value):
    dtype: Optional[torch.dtype]  # None: unknown dtype
    shape: Optional[Shape]  # None: unknown rank
    device: str = "cpu"
    reason: Optional[str] = None  # why some part is unknown

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    def with_shape(self, shape: Optional[Shape], dtype: Optional[torch.dtype] = None) -> "TensorType":
        return TensorType(self.dtype if dtype is None else dtype, _norm_shape(shape), self.device,
                          self.reason)


def _norm_shape(shape) -> Optional[Shape]:
    return None if shape is None else tuple(sym.normalize(d) for d in shape)


def tensor(dtype, shape, device: str = "cpu", reason: Optional[str] = None) -> TensorType:
    return TensorType(dtype, _norm_shape(shape), device, reason)


class Const(Value):
    """A concrete Python object known exactly: ints, strings, modules, functions, configs."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other):
        if not isinstance(other, Const):
            return False
        if self.obj is other.obj:
            return True
        if type(self.obj) is type(other.obj) and isinstance(self.obj, (int, float, str, bool, bytes, tuple,
                                                                         frozenset, type(None))):
            try:
                return bool(self.obj == other.obj)
            except Exception:
                return False
        return False

    def __hash__(self):
        try:
            return hash((type(self.obj), self.obj))
        except TypeError:
            return id(self.obj)

    def __repr__(self):
        return f"Const({self.obj!r})" if not isinstance(self.obj, torch.nn.Module) else \
            f"Const(<{type(self.obj).__name__}>)"


NONE = Const(None)


@dataclass(frozen=True)
class SymScalar(Value):
    """An int, float or bool whose value is a symbolic expression, or unknown (expr None).

    For bools, ``expr`` is a sympy condition over the symbols.
    """

    kind: type  # int, float or bool
    expr: Any = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class TupleV(Value):
    items: tuple


@dataclass(frozen=True)
class Unknown(Value):
    reason: str


@dataclass(frozen=True)
class UnionV(Value):
    """Different values on different paths: ``options`` are (condition, value) pairs.

    A condition is a sympy boolean over the user's symbols.
    """

    options: tuple


class ListV(Value):
    """A Python list: ``items`` then ``tail_count`` copies of ``tail`` (a symbolic length)."""

    def __init__(self, items=None, tail: Optional[Value] = None, tail_count: Dim = 0):
        self.items: list = list(items or [])
        self.tail = tail
        self.tail_count = tail_count

    @property
    def length(self) -> Dim:
        return sym.add(len(self.items), self.tail_count if self.tail is not None else 0)

    @property
    def is_concrete(self) -> bool:
        return self.tail is None

    def __eq__(self, other):
        return isinstance(other, ListV) and self.items == other.items and self.tail == other.tail \
            and self.tail_count == other.tail_count

    __hash__ = object.__hash__

    def __repr__(self):
        tail = f" + [{self.tail!r}] * {self.tail_count}" if self.tail is not None else ""
        return f"ListV({self.items!r}{tail})"


class DictV(Value):
    def __init__(self, items=None):
        self.items: dict = dict(items or {})

    def __eq__(self, other):
        return isinstance(other, DictV) and self.items == other.items

    __hash__ = object.__hash__

    def __repr__(self):
        return f"DictV({self.items!r})"


class ObjV(Value):
    """An instance of a user class created during the analysis (e.g. inside forward)."""

    def __init__(self, cls: type, attrs=None):
        self.cls = cls
        self.attrs: dict = dict(attrs or {})
        # the items of an instance of a dict subclass (e.g. transformers' ModelOutput)
        self.mapping: Optional[dict] = {} if issubclass(cls, dict) else None

    def mapping_view(self) -> "DictV":
        """A DictV sharing this object's items, for dict methods."""
        view = DictV()
        view.items = self.mapping
        return view

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__

    def __repr__(self):
        return f"ObjV({self.cls.__name__})"


@dataclass(frozen=True)
class Closure(Value):
    """A lambda or nested def created during the analysis."""

    node: Any  # ast.Lambda or ast.FunctionDef
    scope: Any  # the defining frame's environment (a dict) for free variables
    globals: dict = field(hash=False, compare=False)
    defaults: tuple = ()
    kw_defaults: tuple = ()
    filename: str = ""
    owner: Any = None  # frame info for super() inside nested defs

    def __hash__(self):
        return id(self)


@dataclass(frozen=True)
class BoundMethod(Value):
    """``obj.method`` where ``method`` is a function to be interpreted or a rule."""

    self_value: Value
    func: Any  # a Python function, a Closure, or a str naming a tensor method

    def __hash__(self):
        return hash((id(self.self_value), id(self.func)))


@dataclass(frozen=True)
class SuperV(Value):
    """``super()`` inside a method of ``cls`` on instance ``self_value``."""

    cls: type
    self_value: Value


# ---- helpers --------------------------------------------------------------------------


def as_dim(v) -> Dim:
    """An int-like value as a dim: int, sympy expression, or None (unknown)."""
    if isinstance(v, Const):
        o = v.obj
        if isinstance(o, bool):
            return int(o)
        if isinstance(o, int):
            return o
        if isinstance(o, torch.SymInt):
            return None
        return None
    if isinstance(v, SymScalar) and v.kind is int:
        return v.expr
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return v
    if isinstance(v, sympy.Basic):
        return sym.normalize(v)
    return None


def int_value(d: Dim, reason: Optional[str] = None) -> Value:
    """Wrap a dim as an abstract int."""
    d = sym.normalize(d)
    if sym.is_concrete(d):
        return Const(d)
    return SymScalar(int, d, reason if d is None else None)


def from_python(obj: Any) -> Value:
    """Abstract a concrete Python object: real tensors become TensorTypes with their shape."""
    if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Module):
        return tensor(obj.dtype, tuple(obj.shape), obj.device.type)
    return Const(obj)


def fork_copy(value_env: dict, memo: Optional[dict] = None) -> dict:
    """Copy an environment for a forked path: mutable containers are copied, with
    aliasing between them preserved; immutable values and Consts are shared."""
    memo = {} if memo is None else memo
    return {k: _fork_value(v, memo) for k, v in value_env.items()}


def _fork_value(v, memo):
    if isinstance(v, (ListV, DictV, ObjV)):
        key = id(v)
        if key in memo:
            return memo[key]
        if isinstance(v, ListV):
            new = ListV(tail=v.tail, tail_count=v.tail_count)
            memo[key] = new
            new.items = [_fork_value(x, memo) for x in v.items]
        elif isinstance(v, DictV):
            new = DictV()
            memo[key] = new
            new.items = {k: _fork_value(x, memo) for k, x in v.items.items()}
        else:
            new = ObjV(v.cls)
            memo[key] = new
            new.attrs = {k: _fork_value(x, memo) for k, x in v.attrs.items()}
            if v.mapping is not None:
                new.mapping = {k: _fork_value(x, memo) for k, x in v.mapping.items()}
        return new
    if isinstance(v, TupleV):
        return TupleV(tuple(_fork_value(x, memo) for x in v.items))
    if isinstance(v, UnionV):
        return UnionV(tuple((c, _fork_value(x, memo)) for c, x in v.options))
    return v
