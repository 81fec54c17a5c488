"""Numbers a whole-step replay follows (``compile_step``'s decoding position, a learning
rate a scheduler sets).

A step called with a new int every time (``step(tok, pos)``), or whose optimizer's
learning rate changes every step, would be a new signature every call. Instead, while
such a step is traced, each number the replayer has seen change is passed as a
``TracedInt`` or ``TracedFloat``: an ``int`` or ``float`` (torch and every C function read
its value as usual) whose Python arithmetic is written down as an expression over the
followed numbers, and whose comparisons and truth tests are written down with their
outcome (the *guards*: the branches the traced Python took). A replay evaluates the
guards at its own values first; any that comes out otherwise is traced instead. Uses
that escape the record (a hash, an explicit ``int()`` or ``float()``, ``round``) *pin*
the trace: no other value is replayed from it.

Expressions are nested tuples: ``("arg", k)`` for the k-th followed number, or ``(op
name, a, b)`` / ``(op name, a)`` whose operands are expressions or plain ints and floats;
``evaluate`` computes them with Python's own operators on the same types, so ``pos // 4``
or ``1 - lr * weight_decay`` come out bit for bit as the Python would compute them, not
by a fit. Not seen: a float's value read by C code outside torch (``math.log(lr)``): the
result is a plain float, so a graph number made of it is linked to nothing (the family
fails, safely), but a branch on it is not a guard; steps are assumed not to branch so.
"""

from __future__ import annotations

import operator
import sys

import torch
from torch.overrides import TorchFunctionMode

_TAPE = [None]   # the tape being recorded (one trace at a time), or None
NUMBER = (int, float)   # the types followed (not bool: a flag, not a value)


class Tape:
    """What the traced Python did with the followed numbers: every number it computed
    from them (``exprs`` with their ``values``, in order), every branch (``guards``: (expr,
    outcome)), and why the trace is pinned to its values (None if it is not).

    ``sized``: a tensor type whose sizes are followed too (None: not). Each size the
    Python reads of such a tensor (``x.shape``, ``x.size(1)``, ``x.numel()``) is a new
    followed number: appended to ``env`` (after the ``n_args`` given) as it is read, so
    traces that read alike have alike tapes. How a read follows from the call's sizes is
    for the replayer to link (``step_numbers``); its uses are recorded as an argument's."""

    __slots__ = ("env", "exprs", "values", "guards", "pinned", "handed", "n_args", "sized")

    def __init__(self, env: tuple, sized: type | None = None):
        self.env = list(env)
        self.n_args = len(env)
        self.sized = sized
        self.exprs: list = [("arg", k) for k in range(len(env))]
        self.values: list = list(env)
        self.guards: list = []
        self.pinned = None
        # the expressions whose ints were handed to torch (a function's arguments, as
        # ``_Handed`` sees them): only those can be where a number of the graph came from
        self.handed: set = set()

    def args(self) -> tuple:
        """The followed numbers the trace was called with (its reads aside)."""
        return tuple(self.env[:self.n_args])

    def read(self, value: int) -> "TracedInt":
        """Size ``value`` read by the Python: a new followed number."""
        e = ("arg", len(self.env))
        self.env.append(value)
        self.exprs.append(e)
        self.values.append(value)
        t = TracedInt(value)
        t._e = e
        return t

    def keep(self, value: int) -> None:
        """A size read where the Python is not run (a replay): it must keep ``value``."""
        t = self.read(value)
        self.guards.append((("eq", t._e, value), True))

    def structure(self) -> tuple:
        """What two traces must share to be one family: the same computations and the
        same branches taken."""
        # (the values' types too: ``1`` and ``1.0`` are equal constants of an expression)
        return tuple(self.exprs), tuple(map(type, self.values)), tuple(self.guards), \
            self.pinned


class _Handed(TorchFunctionMode):
    """Notes each followed int a torch function is called with (``Tape.handed``). An int
    C code picked by a followed one (``table[pos]``) reaches torch as a plain int: the
    graph's number it became then matches no handed expression, and is not followed.
    Where the tape follows sizes (``Tape.sized``), a size the step's Python reads is
    returned followed (``_SIZE_READS``); the runtime's own reads (a replayed forward's
    signature) are left plain."""

    def __init__(self, tape: Tape):
        super().__init__()
        self.tape = tape

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tape = self.tape
        _note(args, tape.handed)
        if kwargs:
            _note(tuple(kwargs.values()), tape.handed)
        out = func(*args, **kwargs)
        if tape.sized is not None and args and isinstance(args[0], tape.sized):
            how = _SIZE_READS.get(func)
            if how is not None and not _runtime_caller(how[1]):
                return how[0](tape, out)
        return out


def _runtime_caller(depth: int) -> bool:
    """Whether the code that read a size (``depth`` frames above the mode's handler: a
    getter or method is called from C, ``Tensor.__len__`` through its Python wrapper and
    ``handle_torch_function``) is the runtime's own."""
    name = sys._getframe(depth + 2).f_globals.get("__name__", "")
    return name.startswith("lazy_runtime")


def _read_sizes(tape: Tape, out):
    if type(out) is int:
        return tape.read(out)
    return type(out)([tape.read(v) for v in out]) if type(out) is torch.Size else \
        tuple(tape.read(v) for v in out)


def _read_len(tape: Tape, out):
    """``len(x)``: Python makes the result a plain int, so the read is a guard that its
    size stays what it was."""
    tape.keep(out)
    return out


_TB = torch._C.TensorBase
# a size-reading function -> (how its result is followed, frames from the reader)
_SIZE_READS = {_TB.size: (_read_sizes, 0), _TB.shape.__get__: (_read_sizes, 0),
               _TB.numel: (_read_sizes, 0), _TB.nelement: (_read_sizes, 0),
               _TB.stride: (_read_sizes, 0), _TB.storage_offset: (_read_sizes, 0),
               torch.Tensor.__len__: (_read_len, 2)}


def _note(xs, handed: set) -> None:
    for x in xs:
        if isinstance(x, Followed):
            handed.add(x._e)
        elif type(x) in (tuple, list, torch.Size):
            _note(x, handed)
        elif type(x) is slice:
            _note((x.start, x.stop, x.step), handed)
        elif type(x) is dict:
            _note(tuple(x.values()), handed)


class recording:
    """``with recording(tape):`` follows ``TracedInt`` arithmetic onto ``tape``, and what
    torch is handed (``_Handed``). ``recording(None)`` does nothing."""

    def __init__(self, tape: Tape | None):
        self.tape = tape
        self.mode = None if tape is None else _Handed(tape)

    def __enter__(self):
        self.prev = _TAPE[0]
        _TAPE[0] = self.tape
        if self.mode is not None:
            self.mode.__enter__()
        return self.tape

    def __exit__(self, *exc):
        _TAPE[0] = self.prev
        if self.mode is not None:
            self.mode.__exit__(*exc)
        return False


def recording_tape() -> Tape | None:
    """The tape being recorded, or None."""
    return _TAPE[0]


def follow(value, k: int):
    """Followed number ``k``'s ``value`` (an int or a float), followed."""
    t = (TracedFloat if type(value) is float else TracedInt)(value)
    t._e = ("arg", k)
    return t


def plain(value):
    """A followed number as the plain int or float of its value (anything else as it is)."""
    if isinstance(value, TracedInt):
        return int.__int__(value)
    if isinstance(value, TracedFloat):
        return float.__float__(value)
    return value


_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
        "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
        "pow": operator.pow,
        "lshift": operator.lshift, "rshift": operator.rshift, "and": operator.and_,
        "or": operator.or_, "xor": operator.xor, "neg": operator.neg, "abs": abs,
        "invert": operator.invert,
        "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
        "gt": operator.gt, "ge": operator.ge}


def evaluate(expr, env: tuple):
    """``expr``'s value with the followed numbers at ``env`` (as Python computes it; an
    arithmetic error such as a division by zero propagates)."""
    if type(expr) is not tuple:   # (a constant: an int or a float)
        return expr
    op = expr[0]
    if op == "arg":
        return env[expr[1]]
    return _OPS[op](*[evaluate(a, env) for a in expr[1:]])


def guards_hold(guards, env: tuple, equal: bool = False) -> bool:
    """Whether every (expression, outcome) of ``guards`` comes out so at ``env``: its truth
    value, or (``equal``) its value."""
    try:
        if equal:
            return all(evaluate(e, env) == want for e, want in guards)
        return all(bool(evaluate(e, env)) is want for e, want in guards)
    except (ArithmeticError, ValueError, RecursionError):
        return False


def _operand(x):
    """(its expression, its value) for an int or float operand; None for anything else."""
    if isinstance(x, TracedInt):
        return x._e, int.__int__(x)
    if isinstance(x, TracedFloat):
        return x._e, float.__float__(x)
    if type(x) is int or type(x) is bool:
        return int(x), int(x)
    if type(x) is float:
        return x, x
    return None


def _pin(why: str) -> None:
    tape = _TAPE[0]
    if tape is not None and tape.pinned is None:
        tape.pinned = why


def _escape(x, why: str) -> None:
    """Followed number ``x`` used where the record cannot follow it: the trace is pinned,
    or where it follows sizes, guarded on ``x`` keeping its value (``math.sqrt`` of a
    head's size, constant at every length, need not stop a replay at other lengths)."""
    tape = _TAPE[0]
    if tape is not None and tape.sized is not None:
        tape.guards.append((("eq", x._e, plain(x)), True))
    else:
        _pin(why)


def _result(expr, value):
    """The number ``value`` computed as ``expr``: followed while a tape records."""
    tape = _TAPE[0]
    if tape is None:
        return value
    kind = type(value)
    if kind is not int and kind is not float:   # (a complex power of a negative float)
        _pin(f"{expr[0]} made a {kind.__name__}")
        return value
    t = (TracedInt if kind is int else TracedFloat)(value)
    t._e = expr
    tape.exprs.append(expr)
    tape.values.append(value)
    return t


def _binary(kind: type, name: str, reflected: bool = False):
    fn = _OPS[name]
    base = getattr(kind, f"__{'r' if reflected else ''}{name}__")

    def method(self, other):
        o = _operand(other)
        if o is None:   # (a tensor: its own method sees the number; a complex: pinned)
            if isinstance(other, complex):
                _pin(f"{name} with a complex")
            return base(plain(self), other)
        a, b = (self._e, plain(self)), o
        if reflected:
            a, b = b, a
        return _result((name, a[0], b[0]), fn(a[1], b[1]))
    method.__name__ = base.__name__
    return method


def _compare(name: str):
    fn = _OPS[name]

    def method(self, other):
        o = _operand(other)
        if o is None:
            if isinstance(other, complex):
                _pin("compared with a complex")
            return NotImplemented
        out = fn(plain(self), o[1])
        tape = _TAPE[0]
        if tape is not None:
            tape.guards.append(((name, self._e, o[0]), out))
        return out
    method.__name__ = f"__{name}__"
    return method


def _unary(name: str):
    fn = _OPS[name]

    def method(self):
        return _result((name, self._e), fn(plain(self)))
    method.__name__ = f"__{name}__"
    return method


def _pinning(kind: type, name: str):
    base = getattr(kind, name)

    def method(self, *args):
        _escape(self, f"{name.strip('_')}()")
        return base(plain(self), *args)
    method.__name__ = name
    return method


class Followed:
    """What ``TracedInt`` and ``TracedFloat`` share: truth tests are guards, a hash pins,
    a copy is plain. Outside a recording they behave as plain numbers."""

    def __bool__(self):
        v = plain(self)
        out = v != 0
        tape = _TAPE[0]
        if tape is not None:
            tape.guards.append((("ne", self._e, 0), out))
        return out

    def __hash__(self):   # a dict or set lookup: which entry it finds is not recorded
        _escape(self, "hash()")
        return hash(plain(self))

    def __pos__(self):
        return self

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __reduce__(self):   # a copy is a plain number
        v = plain(self)
        return type(v), (v,)

    def __repr__(self):
        return repr(plain(self))

    __str__ = __repr__


class TracedInt(Followed, int):
    """An int argument (or an int computed from one) whose uses are recorded on the
    current ``Tape``."""

    def __round__(self, ndigits=None):
        if ndigits is None or ndigits >= 0:
            return self
        _escape(self, "round()")
        return round(int.__int__(self), ndigits)

    __floor__ = __ceil__ = __trunc__ = Followed.__pos__


class TracedFloat(Followed, float):
    """A float (a learning rate) or a float computed from a followed number, whose uses
    are recorded on the current ``Tape``."""


for _kind, _cls in ((int, TracedInt), (float, TracedFloat)):
    for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow") + (
            ("lshift", "rshift", "and", "or", "xor") if _kind is int else ()):
        setattr(_cls, f"__{_name}__", _binary(_kind, _name))
        setattr(_cls, f"__r{_name}__", _binary(_kind, _name, reflected=True))
    for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(_cls, f"__{_name}__", _compare(_name))
    for _name in ("neg", "abs") + (("invert",) if _kind is int else ()):
        setattr(_cls, f"__{_name}__", _unary(_name))
    # uses whose result the record cannot follow (``int(lr)``, ``round(lr, 3)``, ``range``)
    for _name in ("__int__", "__index__", "__float__", "bit_length", "bit_count", "to_bytes",
                  "as_integer_ratio", "conjugate", "__trunc__", "__floor__", "__ceil__",
                  "__round__", "is_integer", "hex"):
        if hasattr(_kind, _name) and (_kind is float or _name not in (
                "__trunc__", "__floor__", "__ceil__", "__round__")):
            setattr(_cls, _name, _pinning(_kind, _name))
del _kind, _cls, _name
