"""Python builtins and container methods over abstract values.

Each handler is ``handler(caller, args, kwargs, frame) -> Value``; container methods get
the container as well. With all-concrete arguments most builtins are simply called.
"""

from __future__ import annotations

import math

import sympy
import torch

from .. import symbolic as sym
from ..values import (NONE, BoundMethod, Closure, Const, DictV, ListV, ObjV, SuperV, SymScalar, TensorType,
                      TupleV, UnionV, Unknown, Value, as_dim, int_value)
from .state import widen_values

HANDLERS: dict = {}
CONTAINER_METHODS: dict = {}


def builtin(*objs):
    def deco(fn):
        for o in objs:
            HANDLERS[o] = fn
        return fn

    return deco


def method(types_, *names):
    def deco(fn):
        for t in types_:
            for n in names:
                CONTAINER_METHODS[(t, n)] = fn
        return fn

    return deco


def _all_const(args, kwargs=None):
    return all(isinstance(a, Const) for a in args) and all(isinstance(v, Const) for v in (kwargs or {}).values())


def _real(fn, args, kwargs=None):
    try:
        return Const(fn(*[a.obj for a in args], **{k: v.obj for k, v in (kwargs or {}).items()}))
    except Exception as e:
        return Unknown(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}")


# ---- sizes and numbers --------------------------------------------------------------


@builtin(len)
def _len(c, args, kwargs, frame):
    (v,) = args
    if isinstance(v, (TupleV,)):
        return Const(len(v.items))
    if isinstance(v, ListV):
        return int_value(v.length, "length of a list of unknown length")
    if isinstance(v, DictV):
        return Const(len(v.items))
    if isinstance(v, TensorType):
        if v.shape is None or len(v.shape) == 0:
            return SymScalar(int, None, "len() of a tensor of unknown rank") if v.shape is None else \
                Unknown("len() of a 0-d tensor")
        return int_value(v.shape[0], "unknown leading dim")
    if isinstance(v, Const):
        return _real(len, args)
    if isinstance(v, ObjV) and hasattr(v.cls, "_fields"):
        return Const(len(v.cls._fields))
    if isinstance(v, UnionV):
        return c.interp.lift(lambda x: _len(c, [x], {}, frame), v)
    return SymScalar(int, None, f"len() of {type(v).__name__}")


@builtin(range)
def _range(c, args, kwargs, frame):
    if _all_const(args):
        return _real(range, args)
    dims = [as_dim(a) for a in args]
    start, stop, step = (0, dims[0], 1) if len(dims) == 1 else (dims + [1])[:3]
    if step != 1 or start is None or stop is None:
        return ListV(tail=SymScalar(int, None, "loop index"), tail_count=None)
    count = sym.sub(stop, start)
    return ListV(tail=SymScalar(int, None, "loop index"), tail_count=count)


@builtin(zip)
def _zip(c, args, kwargs, frame):
    seqs = [c.iterate(a, frame) for a in args]
    if all(isinstance(s, list) for s in seqs):
        n = min((len(s) for s in seqs), default=0)
        return ListV([TupleV(tuple(s[i] for s in seqs)) for i in range(n)])
    elems, counts = [], []
    for s in seqs:
        if isinstance(s, list):
            elems.append(widen_values(s) if s else Unknown("empty"))
            counts.append(len(s))
        else:
            elems.append(s[0])
            counts.append(s[1])
    known = [x for x in counts if x is not None]
    count = known[0] if len(set(map(str, known))) == 1 and len(known) == len(counts) else None
    return ListV(tail=TupleV(tuple(elems)), tail_count=count)


@builtin(enumerate)
def _enumerate(c, args, kwargs, frame):
    seq = c.iterate(args[0], frame)
    start = args[1].obj if len(args) > 1 and isinstance(args[1], Const) else 0
    if isinstance(seq, list):
        return ListV([TupleV((Const(i + start), v)) for i, v in enumerate(seq)])
    return ListV(tail=TupleV((SymScalar(int, None, "loop index"), seq[0])), tail_count=seq[1])


@builtin(reversed)
def _reversed(c, args, kwargs, frame):
    seq = c.iterate(args[0], frame)
    return ListV(list(reversed(seq))) if isinstance(seq, list) else ListV(tail=seq[0], tail_count=seq[1])


def _make_seq(kind):
    def handler(c, args, kwargs, frame):
        if not args:
            return ListV() if kind is not tuple else TupleV(())
        seq = c.iterate(args[0], frame)
        if isinstance(seq, list):
            return TupleV(tuple(seq)) if kind is tuple else ListV(seq)
        return ListV(tail=seq[0], tail_count=seq[1])  # symbolic length, even for a tuple

    return handler


for _k in (list, tuple, set, frozenset):
    HANDLERS[_k] = _make_seq(_k)
HANDLERS[torch.Size] = _make_seq(tuple)


@builtin(dict)
def _dict(c, args, kwargs, frame):
    d = DictV()
    if args:
        src = args[0]
        if isinstance(src, DictV):
            d.items.update(src.items)
        elif isinstance(src, Const) and isinstance(src.obj, dict):
            d.items.update({k: c.wrap(v) for k, v in src.obj.items()})
        else:
            seq = c.iterate(src, frame)
            if not isinstance(seq, list):
                return Unknown("dict() of a symbolic-length sequence")
            for pair in seq:
                if isinstance(pair, TupleV) and len(pair.items) == 2 and isinstance(pair.items[0], Const):
                    d.items[pair.items[0].obj] = pair.items[1]
    d.items.update(kwargs)
    return d


def _numeric_cast(kind):
    def handler(c, args, kwargs, frame):
        if not args:
            return Const(kind())
        v = args[0]
        if isinstance(v, Const):
            return _real(kind, args)
        if isinstance(v, SymScalar):
            if v.expr is None:
                return SymScalar(kind, None, v.reason)
            if kind is int:
                e = v.expr if v.kind is int else sympy.floor(v.expr)  # int() truncates; sizes are >= 0
                return int_value(sym.normalize(e))
            if kind is float:
                return SymScalar(float, v.expr)
            if kind is bool:
                return SymScalar(bool, sympy.Ne(v.expr, 0) if v.kind is not bool else v.expr)
        if isinstance(v, TensorType):
            return SymScalar(kind, None, "value of a tensor (data-dependent)")
        return SymScalar(kind, None, f"{kind.__name__}() of {type(v).__name__}")

    return handler


for _k in (int, float, bool):
    HANDLERS[_k] = _numeric_cast(_k)


@builtin(str)
def _str(c, args, kwargs, frame):
    if _all_const(args, kwargs):
        return _real(str, args, kwargs)
    return Unknown("str() of an abstract value")


def _minmax(fn, sym_fn):
    def handler(c, args, kwargs, frame):
        items = args
        if len(args) == 1:
            seq = c.iterate(args[0], frame)
            if not isinstance(seq, list):
                return Unknown(f"{fn.__name__}() over a symbolic-length sequence")
            items = seq
        if _all_const(items) and not kwargs:
            return _real(fn, items)
        if kwargs:
            return Unknown(f"{fn.__name__}() with key")
        dims = [as_dim(v) for v in items]
        if any(d is None for d in dims):
            if any(isinstance(v, TensorType) for v in items):
                return Unknown(f"{fn.__name__}() of tensors")
            return SymScalar(int, None, f"{fn.__name__}() of unknown values")
        return int_value(sym.normalize(sym_fn(*[sympy.sympify(d) for d in dims])))

    return handler


HANDLERS[min] = _minmax(min, sympy.Min)
HANDLERS[max] = _minmax(max, sympy.Max)


@builtin(sum)
def _sum(c, args, kwargs, frame):
    seq = c.iterate(args[0], frame)
    start = args[1] if len(args) > 1 else Const(0)
    from . import operators

    if not isinstance(seq, list):
        elem, count = seq
        d = as_dim(elem)
        if d is not None and count is not None:
            return int_value(sym.mul(d, count))
        return Unknown("sum() over a symbolic-length sequence")
    total = start
    for v in seq:
        total = operators.binop(c.interp, "Add", total, v, frame)
    return total


@builtin(abs)
def _abs(c, args, kwargs, frame):
    v = args[0]
    if isinstance(v, Const):
        return _real(abs, args)
    if isinstance(v, TensorType):
        return c.call_object(torch.abs, args, kwargs, frame)
    if isinstance(v, SymScalar) and v.expr is not None:
        return int_value(sym.normalize(sympy.Abs(v.expr))) if v.kind is int else SymScalar(v.kind, sympy.Abs(v.expr))
    return SymScalar(float, None)


@builtin(round)
def _round(c, args, kwargs, frame):
    if _all_const(args, kwargs):
        return _real(round, args, kwargs)
    return SymScalar(int if len(args) == 1 else float, None, "round() of a symbolic value")


def _is_instance_of(v: Value, cls) -> object:
    """True/False, or None when it cannot be told."""
    if isinstance(cls, tuple):
        verdicts = [_is_instance_of(v, k) for k in cls]
        if any(x is True for x in verdicts):
            return True
        return False if all(x is False for x in verdicts) else None
    if not isinstance(cls, type):
        return None
    if isinstance(v, Const):
        return isinstance(v.obj, cls)
    if isinstance(v, TensorType):
        return issubclass(torch.Tensor, cls) or (cls is torch.nn.Parameter and None)
    if isinstance(v, TupleV):
        return issubclass(tuple, cls)
    if isinstance(v, ListV):
        return issubclass(list, cls)
    if isinstance(v, DictV):
        return issubclass(dict, cls)
    if isinstance(v, SymScalar):
        return issubclass(v.kind, cls) or (v.kind is bool and cls is int)
    if isinstance(v, ObjV):
        return issubclass(v.cls, cls)
    return None


@builtin(isinstance)
def _isinstance(c, args, kwargs, frame):
    v, cls = args
    if not isinstance(cls, Const):
        if isinstance(cls, TupleV) and all(isinstance(x, Const) for x in cls.items):
            cls = Const(tuple(x.obj for x in cls.items))
        else:
            return SymScalar(bool, None, "isinstance with an abstract class")
    return c.interp.lift(lambda x: _const_or_unknown(_is_instance_of(x, cls.obj)), v)


def _const_or_unknown(verdict):
    return Const(verdict) if verdict is not None else SymScalar(bool, None, "isinstance undecided")


try:  # torch.jit.isinstance(x, T) behaves like isinstance for plain classes
    HANDLERS[torch.jit.isinstance] = _isinstance
except AttributeError:
    pass


def _reg(obj):
    def deco(fn):
        HANDLERS[obj] = fn
        return fn

    return deco


@_reg(issubclass)
def _issubclass(c, args, kwargs, frame):
    return _real(issubclass, args) if _all_const(args) else SymScalar(bool, None)


@_reg(callable)
def _callable(c, args, kwargs, frame):
    v = args[0]
    if isinstance(v, Const):
        return Const(callable(v.obj))
    return Const(isinstance(v, (Closure, BoundMethod)))


@_reg(type)
def _type(c, args, kwargs, frame):
    v = args[0]
    if isinstance(v, Const):
        return Const(type(v.obj))
    if isinstance(v, TensorType):
        return Const(torch.Tensor)
    if isinstance(v, ObjV):
        return Const(v.cls)
    if isinstance(v, TupleV):
        return Const(tuple)
    if isinstance(v, ListV):
        return Const(list)
    if isinstance(v, DictV):
        return Const(dict)
    if isinstance(v, SymScalar):
        return Const(v.kind)
    return Unknown("type() of an unknown value")


@_reg(id)
def _id(c, args, kwargs, frame):
    return Const(id(args[0].obj)) if isinstance(args[0], Const) else SymScalar(int, None, "id()")


HANDLERS[hash] = lambda c, args, kwargs, frame: _real(hash, args) if _all_const(args) else SymScalar(int, None)
HANDLERS[repr] = lambda c, args, kwargs, frame: _real(repr, args) if _all_const(args) else Unknown("repr")


@_reg(iter)
def _iter(c, args, kwargs, frame):
    seq = c.iterate(args[0], frame)
    return ListV(seq) if isinstance(seq, list) else ListV(tail=seq[0], tail_count=seq[1])


@_reg(next)
def _next(c, args, kwargs, frame):
    seq = c.iterate(args[0], frame)
    if isinstance(seq, list):
        if seq:
            if isinstance(args[0], ListV) and args[0].is_concrete:
                return args[0].items.pop(0)
            return seq[0]
        return args[1] if len(args) > 1 else Unknown("next() of an empty iterator")
    return seq[0]


def _any_all(fn):
    def handler(c, args, kwargs, frame):
        seq = c.iterate(args[0], frame)
        if isinstance(seq, list) and _all_const(seq):
            return Const(fn(x.obj for x in seq))
        if isinstance(seq, list):
            verdicts = [c.interp.truth(v, frame)[0] for v in seq]
            if fn is any and any(v is True for v in verdicts):
                return Const(True)
            if fn is all and any(v is False for v in verdicts):
                return Const(False)
            if all(v is not None for v in verdicts):
                return Const(fn(verdicts))
        return SymScalar(bool, None, f"{fn.__name__}() of abstract values")

    return handler


HANDLERS[any] = _any_all(any)
HANDLERS[all] = _any_all(all)


@_reg(sorted)
def _sorted(c, args, kwargs, frame):
    if _all_const(args, kwargs):
        return c.wrap(sorted(args[0].obj, **{k: v.obj for k, v in kwargs.items()}))
    seq = c.iterate(args[0], frame)
    if isinstance(seq, list) and _all_const(seq) and not kwargs:
        return ListV([Const(x) for x in sorted(v.obj for v in seq)])
    return Unknown("sorted() of abstract values")


@_reg(map)
def _map(c, args, kwargs, frame):
    fn, seqs = args[0], [c.iterate(a, frame) for a in args[1:]]
    if all(isinstance(s, list) for s in seqs):
        n = min(len(s) for s in seqs)
        return ListV([c.call(fn, [s[i] for s in seqs], {}, frame) for i in range(n)])
    if len(seqs) == 1:
        elem, count = seqs[0]
        return ListV(tail=c.call(fn, [elem], {}, frame), tail_count=count)
    return Unknown("map() over symbolic-length sequences")


@_reg(filter)
def _filter(c, args, kwargs, frame):
    fn, seq = args[0], c.iterate(args[1], frame)
    if not isinstance(seq, list):
        return ListV(tail=seq[0], tail_count=None)
    out = []
    for v in seq:
        keep = c.call(fn, [v], {}, frame) if fn != NONE else v
        verdict, _ = c.interp.truth(keep, frame)
        if verdict is None:
            return Unknown("filter() with an undecidable predicate")
        if verdict:
            out.append(v)
    return ListV(out)


@_reg(getattr)
def _getattr(c, args, kwargs, frame):
    obj, name = args[0], args[1]
    if not isinstance(name, Const):
        return Unknown("getattr with an abstract name")
    if len(args) > 2:
        has = _hasattr(c, args[:2], {}, frame)
        if has == Const(False):
            return args[2]
    return c.get_attr(obj, name.obj)


@_reg(hasattr)
def _hasattr(c, args, kwargs, frame):
    obj, name = args
    if not isinstance(name, Const):
        return SymScalar(bool, None)
    if isinstance(obj, Const):
        if (id(obj.obj), name.obj) in c.ctx.attr_overlay:
            return Const(True)
        try:
            return Const(hasattr(obj.obj, name.obj))
        except Exception:
            return Const(False)
    if isinstance(obj, ObjV):
        return Const(name.obj in obj.attrs or hasattr(obj.cls, name.obj))
    if isinstance(obj, TensorType):
        return Const(hasattr(torch.Tensor, name.obj))
    return SymScalar(bool, None, "hasattr of an abstract value")


@_reg(setattr)
def _setattr(c, args, kwargs, frame):
    c.set_attr(args[0], args[1].obj if isinstance(args[1], Const) else "?", args[2])
    return NONE


@_reg(super)
def _super(c, args, kwargs, frame):
    if len(args) == 2:
        return SuperV(args[0].obj, args[1])
    # zero-argument super(): the class comes from the __class__ cell, self from the
    # first parameter of the running method
    cls = frame.cells.get("__class__") if frame is not None else None
    func = frame.func if frame is not None else None
    if not isinstance(cls, Const) or func is None:
        return Unknown("super() outside a method")
    first = next(iter(_param_names(func)), None)
    self_value = frame.env.get(first) if first else None
    if self_value is None:
        return Unknown("super() without self")
    return SuperV(cls.obj, self_value)


def _param_names(func):
    code = func.__code__
    return code.co_varnames[:code.co_argcount]


def _math(fn, sym_fn, kind):
    def handler(c, args, kwargs, frame):
        if _all_const(args):
            return _real(fn, args)
        e = args[0].expr if isinstance(args[0], SymScalar) else None
        if e is None:
            return SymScalar(kind, None, f"{fn.__name__} of an unknown value")
        r = sym_fn(e)
        return int_value(sym.normalize(r)) if kind is int else SymScalar(float, r)

    return handler


HANDLERS[math.sqrt] = _math(math.sqrt, sympy.sqrt, float)
HANDLERS[math.ceil] = _math(math.ceil, sympy.ceiling, int)
HANDLERS[math.floor] = _math(math.floor, sympy.floor, int)
HANDLERS[math.log] = _math(math.log, sympy.log, float)
HANDLERS[math.log2] = _math(math.log2, lambda e: sympy.log(e, 2), float)


@_reg(math.prod)
def _prod(c, args, kwargs, frame):
    seq = c.iterate(args[0], frame)
    if not isinstance(seq, list):
        return SymScalar(int, None, "product of a symbolic-length sequence")
    return int_value(sym.product(as_dim(v) for v in seq))


@_reg(torch.is_tensor)
def _is_tensor(c, args, kwargs, frame):
    return _const_or_unknown(_is_instance_of(args[0], torch.Tensor))


HANDLERS[torch.is_floating_point] = lambda c, args, kwargs, frame: (
    Const(args[0].dtype.is_floating_point) if isinstance(args[0], TensorType) and args[0].dtype is not None
    else SymScalar(bool, None))


@_reg(torch.numel)
def _numel(c, args, kwargs, frame):
    t = args[0]
    if isinstance(t, TensorType) and t.shape is not None:
        return int_value(sym.product(t.shape))
    return SymScalar(int, None, "numel of unknown shape")


if hasattr(torch, "_assert"):
    HANDLERS[torch._assert] = lambda c, args, kwargs, frame: NONE
HANDLERS[torch._C._get_tracing_state] = lambda c, args, kwargs, frame: NONE


# ---- container methods ----------------------------------------------------------------


@method((ListV,), "append")
def _append(c, lst, args, kwargs, frame):
    if lst.tail is None:
        lst.items.append(args[0])
    elif args[0] == lst.tail:
        lst.tail_count = sym.add(lst.tail_count, 1)
    else:
        lst.tail = widen_values([lst.tail, args[0]])
        lst.tail_count = sym.add(lst.tail_count, 1)
    return NONE


@method((ListV,), "extend")
def _extend(c, lst, args, kwargs, frame):
    from . import operators

    operators.binop(c.interp, "Add", lst, args[0], frame, inplace=True)
    return NONE


@method((ListV,), "insert")
def _insert(c, lst, args, kwargs, frame):
    if lst.tail is None and isinstance(args[0], Const):
        lst.items.insert(args[0].obj, args[1])
    else:
        lst.items.insert(0, args[1]) if args[0] == Const(0) else None
    return NONE


@method((ListV,), "pop")
def _pop(c, lst, args, kwargs, frame):
    if lst.tail is None and lst.items:
        idx = args[0].obj if args and isinstance(args[0], Const) else -1
        return lst.items.pop(idx)
    return lst.tail if lst.tail is not None else Unknown("pop from an empty list")


@method((ListV, TupleV), "index", "count")
def _index(c, seq, args, kwargs, frame, name="index"):
    items = seq.items if isinstance(seq, TupleV) or seq.is_concrete else None
    if items is not None and _all_const(list(items) + list(args), kwargs):
        # concrete items (a list of flags): Python's own answer
        return _real(getattr(tuple(x.obj for x in items), name), args, kwargs)
    return SymScalar(int, None, "index/count of abstract values")


CONTAINER_METHODS.update({(t, "count"): lambda c, seq, args, kwargs, frame: _index(c, seq, args, kwargs, frame,
                                                                                   "count")
                          for t in (ListV, TupleV)})


@method((ListV,), "copy")
def _copy(c, lst, args, kwargs, frame):
    return ListV(lst.items, lst.tail, lst.tail_count)


@method((ListV,), "reverse")
def _reverse(c, lst, args, kwargs, frame):
    lst.items.reverse()
    return NONE


@method((DictV,), "items")
def _items(c, d, args, kwargs, frame):
    return ListV([TupleV((Const(k) if not isinstance(k, Value) else k, v)) for k, v in d.items.items()])


@method((DictV,), "keys")
def _keys(c, d, args, kwargs, frame):
    return ListV([Const(k) if not isinstance(k, Value) else k for k in d.items])


@method((DictV,), "values")
def _values(c, d, args, kwargs, frame):
    return ListV(list(d.items.values()))


@method((DictV,), "get")
def _get(c, d, args, kwargs, frame):
    key = args[0].obj if isinstance(args[0], Const) else args[0]
    default = args[1] if len(args) > 1 else NONE
    return d.items.get(key, default)


@method((DictV,), "pop")
def _dict_pop(c, d, args, kwargs, frame):
    key = args[0].obj if isinstance(args[0], Const) else args[0]
    default = args[1] if len(args) > 1 else Unknown(f"key {key!r} missing")
    return d.items.pop(key, default)


@method((DictV,), "setdefault")
def _setdefault(c, d, args, kwargs, frame):
    key = args[0].obj if isinstance(args[0], Const) else args[0]
    return d.items.setdefault(key, args[1] if len(args) > 1 else NONE)


@method((DictV,), "update")
def _update(c, d, args, kwargs, frame):
    if args and isinstance(args[0], DictV):
        d.items.update(args[0].items)
    d.items.update(kwargs)
    return NONE


@method((DictV,), "__setitem__")
def _dict_setitem(c, d, args, kwargs, frame):
    c.set_item(d, args[0], args[1], frame)
    return NONE


@method((DictV,), "__getitem__")
def _dict_getitem(c, d, args, kwargs, frame):
    return c.get_item(d, args[0], frame)


@method((DictV,), "__contains__")
def _dict_contains(c, d, args, kwargs, frame):
    key = args[0].obj if isinstance(args[0], Const) else args[0]
    return Const(key in d.items)


@method((DictV,), "__delitem__")
def _dict_delitem(c, d, args, kwargs, frame):
    key = args[0].obj if isinstance(args[0], Const) else args[0]
    d.items.pop(key, None)
    return NONE


@method((DictV,), "copy")
def _dict_copy(c, d, args, kwargs, frame):
    return DictV(d.items)


@method((ObjV,), "__setattr__")
def _object_setattr(c, obj, args, kwargs, frame):
    name, value = args
    if not isinstance(name, Const):
        return Unknown("setattr with an abstract name")
    obj.attrs[name.obj] = value
    return NONE


@method((ObjV,), "__delattr__")
def _object_delattr(c, obj, args, kwargs, frame):
    if isinstance(args[0], Const):
        obj.attrs.pop(args[0].obj, None)
    return NONE


@_reg(object.__setattr__)
def _object_setattr_called(c, args, kwargs, frame):
    """``object.__setattr__(obj, name, value)`` called on the class: the instance's own
    attribute, past any ``__setattr__`` of its class (a frozen dataclass's
    ``__post_init__``, torch's pytree ``TreeSpec``)."""
    if len(args) == 3 and isinstance(args[0], ObjV):
        return _object_setattr(c, args[0], args[1:], kwargs, frame)
    return _setattr(c, args, kwargs, frame)


@_reg(object.__delattr__)
def _object_delattr_called(c, args, kwargs, frame):
    if len(args) == 2 and isinstance(args[0], ObjV):
        return _object_delattr(c, args[0], args[1:], kwargs, frame)
    return Unknown("object.__delattr__ of a value not built in the analysis")


@method((SymScalar,), "item", "__index__")
def _scalar_item(c, v, args, kwargs, frame):
    return v


# ---- dataclasses on objects built during the analysis --------------------------------

import dataclasses as _dc  # noqa: E402


@_reg(_dc.fields)
def _fields(c, args, kwargs, frame):
    v = args[0]
    cls = v.cls if isinstance(v, ObjV) else (v.obj if isinstance(v, Const) else None)
    try:
        return Const(_dc.fields(cls))
    except TypeError as e:
        return Unknown(f"dataclasses.fields: {e}")


@_reg(_dc.is_dataclass)
def _is_dataclass(c, args, kwargs, frame):
    v = args[0]
    if isinstance(v, ObjV):
        return Const(_dc.is_dataclass(v.cls))
    if isinstance(v, Const):
        return Const(_dc.is_dataclass(v.obj))
    return Const(False)


# ---- functools decorators on functions defined during the analysis ------------------

import functools as _ft  # noqa: E402


def _keep_wrapper(c, args, kwargs, frame):
    """functools.update_wrapper(wrapper, wrapped): only metadata is copied."""
    return args[0] if args else kwargs.get("wrapper", Unknown("update_wrapper without a wrapper"))


def _identity_decorator(function):  # what functools.wraps(f) returns, for the analysis
    return function


HANDLERS[_ft.update_wrapper] = _keep_wrapper
HANDLERS[_ft.wraps] = lambda c, args, kwargs, frame: Const(_identity_decorator)
HANDLERS[_identity_decorator] = lambda c, args, kwargs, frame: args[0]


# ---- tensors wrapped as module state ----------------------------------------------------


@builtin(torch.nn.Parameter, *([torch.nn.Buffer] if hasattr(torch.nn, "Buffer") else []))
def _module_state(c, args, kwargs, frame):
    """nn.Parameter(t) / nn.Buffer(t): the same tensor, registered as module state."""
    data = args[0] if args else kwargs.get("data")
    if isinstance(data, Const) and isinstance(data.obj, torch.Tensor):
        data = c.wrap(data.obj)
    return data if isinstance(data, TensorType) else Unknown("module state built from a non-tensor")


# ---- C methods of concrete objects, by (type, name) ----------------------------------------

import contextvars as _cv  # noqa: E402

BOUND_METHODS: dict = {}  # (type, method name) -> handler(caller, self_obj, args, kwargs, frame)


class _ContextToken:
    """What ContextVar.set returns during the analysis: the variable and what it held."""


def _context_var_set(c, var, args, kwargs, frame):
    # The value lives in the analysis' overlay, never in the real variable (it may be abstract).
    key = (id(var), "<context value>")
    token = ObjV(_ContextToken, {"previous": c.ctx.attr_overlay.get(key)})
    c.ctx.attr_overlay[key] = args[0] if args else kwargs.get("value", NONE)
    return token


def _context_var_get(c, var, args, kwargs, frame):
    value = c.ctx.attr_overlay.get((id(var), "<context value>"))
    if value is not None:
        return value
    return _real(var.get, args, kwargs) if _all_const(args, kwargs) else Unknown("ContextVar.get")


def _context_var_reset(c, var, args, kwargs, frame):
    token = args[0] if args else kwargs.get("token")
    if isinstance(token, ObjV) and token.cls is _ContextToken:
        key = (id(var), "<context value>")
        previous = token.attrs["previous"]
        if previous is None:
            c.ctx.attr_overlay.pop(key, None)
        else:
            c.ctx.attr_overlay[key] = previous
    return NONE


BOUND_METHODS.update({(_cv.ContextVar, "set"): _context_var_set, (_cv.ContextVar, "get"): _context_var_get,
                      (_cv.ContextVar, "reset"): _context_var_reset})
