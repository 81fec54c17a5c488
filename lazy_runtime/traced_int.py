"""Int arguments a whole-step replay follows (``compile_step``'s decoding position).

A step called with a new int every time (``step(tok, pos)``) would be a new signature
every call. Instead, while such a step is traced, each int argument the replayer has
seen change is passed as a ``TracedInt``: an ``int`` (torch and every C function read
its value as usual) whose Python arithmetic is written down as an expression over the
arguments, and whose comparisons and truth tests are written down with their outcome
(the *guards*: the branches the traced Python took). A replay evaluates the guards at
its own values first; any that comes out otherwise is traced instead. Uses that escape
the record (a float made of it, a hash, an explicit ``int()``) *pin* the trace: no other
value is replayed from it.

Expressions are nested tuples: ``("arg", k)`` for the k-th followed argument, or
``(op name, a, b)`` / ``(op name, a)`` whose operands are expressions or plain ints;
``evaluate`` computes them exactly (Python ints), so ``pos // 4`` or ``pos % 8`` predict
exactly, not by a fit.
"""

from __future__ import annotations

import operator

from torch.overrides import TorchFunctionMode

_TAPE = [None]   # the tape being recorded (one trace at a time), or None


class Tape:
    """What the traced Python did with the followed ints: every int it computed from
    them (``exprs`` with their ``values``, in order), every branch (``guards``: (expr,
    outcome)), and why the trace is pinned to its values (None if it is not)."""

    __slots__ = ("env", "exprs", "values", "guards", "pinned", "handed")

    def __init__(self, env: tuple):
        self.env = env
        self.exprs: list = [("arg", k) for k in range(len(env))]
        self.values: list = list(env)
        self.guards: list = []
        self.pinned = None
        # the expressions whose ints were handed to torch (a function's arguments, as
        # ``_Handed`` sees them): only those can be where a number of the graph came from
        self.handed: set = set()

    def structure(self) -> tuple:
        """What two traces must share to be one family: the same computations and the
        same branches taken."""
        return tuple(self.exprs), tuple(self.guards), self.pinned


class _Handed(TorchFunctionMode):
    """Notes each followed int a torch function is called with (``Tape.handed``). An int
    C code picked by a followed one (``table[pos]``) reaches torch as a plain int: the
    graph's number it became then matches no handed expression, and is not followed."""

    def __init__(self, tape: Tape):
        super().__init__()
        self.tape = tape

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        _note(args, self.tape.handed)
        if kwargs:
            _note(tuple(kwargs.values()), self.tape.handed)
        return func(*args, **kwargs)


def _note(xs, handed: set) -> None:
    for x in xs:
        if isinstance(x, TracedInt):
            handed.add(x._e)
        elif type(x) in (tuple, list):
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


def follow(value: int, k: int) -> "TracedInt":
    """Argument ``k``'s int ``value``, followed."""
    t = TracedInt(value)
    t._e = ("arg", k)
    return t


_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
        "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
        "lshift": operator.lshift, "rshift": operator.rshift, "and": operator.and_,
        "or": operator.or_, "xor": operator.xor, "neg": operator.neg, "abs": abs,
        "invert": operator.invert,
        "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
        "gt": operator.gt, "ge": operator.ge}


def evaluate(expr, env: tuple) -> int:
    """``expr``'s value with the followed arguments at ``env`` (exact; an arithmetic
    error such as a division by zero propagates)."""
    if type(expr) is int:
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
    """(its expression, its value) for an int operand; None for anything else."""
    if isinstance(x, TracedInt):
        return x._e, int.__int__(x)
    if type(x) is int or type(x) is bool:
        return int(x), int(x)
    return None


def _pin(why: str) -> None:
    tape = _TAPE[0]
    if tape is not None and tape.pinned is None:
        tape.pinned = why


def _result(expr, value):
    """The int ``value`` computed as ``expr``: followed while a tape records."""
    tape = _TAPE[0]
    if tape is None:
        return value
    t = TracedInt(value)
    t._e = expr
    tape.exprs.append(expr)
    tape.values.append(value)
    return t


def _binary(name: str, reflected: bool = False):
    fn = _OPS[name]
    base = getattr(int, f"__{'r' if reflected else ''}{name}__")

    def method(self, other):
        o = _operand(other)
        if o is None or (name == "pow" and not reflected and o[1] < 0):
            if o is not None or isinstance(other, (float, complex)):   # (a float result)
                _pin(f"{name} with {other!r}")
            return base(int.__int__(self), other)
        a, b = (self._e, int.__int__(self)), o
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
            if isinstance(other, (float, complex)):
                _pin(f"compared with a {type(other).__name__}")
            return NotImplemented
        out = fn(int.__int__(self), o[1])
        tape = _TAPE[0]
        if tape is not None:
            tape.guards.append(((name, self._e, o[0]), out))
        return out
    method.__name__ = f"__{name}__"
    return method


def _unary(name: str):
    fn = _OPS[name]

    def method(self):
        return _result((name, self._e), fn(int.__int__(self)))
    method.__name__ = f"__{name}__"
    return method


def _pinning(name: str):
    base = getattr(int, name)

    def method(self, *args):
        _pin(f"{name.strip('_')}()")
        return base(int.__int__(self), *args)
    method.__name__ = name
    return method


class TracedInt(int):
    """An int argument (or an int computed from one) whose uses are recorded on the
    current ``Tape``. Outside a recording it behaves as a plain int."""

    def __bool__(self):
        out = int.__int__(self) != 0
        tape = _TAPE[0]
        if tape is not None:
            tape.guards.append((("ne", self._e, 0), out))
        return out

    def __hash__(self):   # a dict or set lookup: which entry it finds is not recorded
        _pin("hash()")
        return int.__hash__(int.__int__(self))

    def __pos__(self):
        return self

    def __round__(self, ndigits=None):
        if ndigits is None or ndigits >= 0:
            return self
        _pin("round()")
        return round(int.__int__(self), ndigits)

    __floor__ = __ceil__ = __trunc__ = __pos__

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __reduce__(self):   # a copy is a plain int
        return int, (int.__int__(self),)

    def __repr__(self):
        return repr(int.__int__(self))

    __str__ = __repr__


for _name in ("add", "sub", "mul", "floordiv", "mod", "pow", "lshift", "rshift", "and",
              "or", "xor"):
    setattr(TracedInt, f"__{_name}__", _binary(_name))
    setattr(TracedInt, f"__r{_name}__", _binary(_name, reflected=True))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(TracedInt, f"__{_name}__", _compare(_name))
for _name in ("neg", "abs", "invert"):
    setattr(TracedInt, f"__{_name}__", _unary(_name))
for _name in ("__int__", "__index__", "__float__", "__truediv__",
              "__rtruediv__", "bit_length", "bit_count", "to_bytes", "as_integer_ratio",
              "conjugate"):
    setattr(TracedInt, _name, _pinning(_name))
del _name
