"""Symbolic dimensions: the one module that knows about sympy.

A dim is a plain ``int`` (concrete), a sympy expression over integer symbols (symbolic),
or ``None`` (unknown). Every function here accepts all three, so shape functions are
written once and serve both the analyzer (symbolic dims) and the runtime (ints).

Comparisons have three outcomes: True, False, or ``None`` for "cannot be decided from
the symbols alone". Callers must treat ``None`` as undecided, never as False.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import random
from typing import Iterable, Optional, Union

import sympy

Dim = Union[int, sympy.Expr, None]
Shape = tuple  # tuple[Dim, ...]


@functools.lru_cache(maxsize=None)
def symbol(name: str) -> sympy.Symbol:
    """The symbol for a user-declared dimension; all are positive integers."""
    return sympy.Symbol(name, integer=True, positive=True)


def is_concrete(d: Dim) -> bool:
    return isinstance(d, int) and not isinstance(d, bool)


def is_known(d: Dim) -> bool:
    return d is not None


def normalize(d) -> Dim:
    """Turn sympy integers into ints; leave other expressions; keep None."""
    if d is None or isinstance(d, bool):
        return d if d is None else int(d)
    if isinstance(d, int):
        return d
    if isinstance(d, sympy.Basic):
        if d.is_Integer:
            return int(d)
        if d.is_Number:  # a rational from a division: not a valid dim, keep exact value
            return d
        return d
    if hasattr(d, "__index__"):
        return int(d)
    return d


def _binop(f):
    @functools.wraps(f)
    def wrapper(a: Dim, b: Dim) -> Dim:
        if a is None or b is None:
            return None
        return normalize(f(a, b))

    return wrapper


@_binop
def add(a, b):
    return a + b


@_binop
def sub(a, b):
    return a - b


@_binop
def mul(a, b):
    return a * b


def _floor_parts(e) -> tuple[sympy.Expr, int] | None:
    """Write ``e`` as floor(P/m) with P an integer-valued polynomial, if it has that form.

    Handles ``P`` itself (m = 1) and ``floor(P/m) + c`` for an integer c, which equals
    ``floor((P + c*m)/m)``.
    """
    e = sympy.sympify(e)
    const = 0
    core = e
    if e.is_Add:
        const_terms = [t for t in e.args if t.is_Integer]
        rest = [t for t in e.args if not t.is_Integer]
        if len(rest) == 1:
            const = int(sum(const_terms))
            core = rest[0]
    if isinstance(core, sympy.floor):
        num, den = sympy.fraction(sympy.together(core.args[0]))
        if den.is_Integer and den > 0 and _is_int_poly(num):
            m = int(den)
            return sympy.expand(num + const * m), m
        return None
    if _is_int_poly(e):
        return e, 1
    return None


def _is_int_poly(e) -> bool:
    if e.is_Integer:
        return True
    if not e.is_polynomial():
        return False
    if not all(s.is_integer for s in e.free_symbols):
        return False
    return all(c.is_Integer for c in sympy.Poly(e, *e.free_symbols).coeffs()) if e.free_symbols else e.is_Integer


def floordiv(a: Dim, b: Dim) -> Dim:
    """a // b with Python semantics, kept in the canonical form floor(P/m)."""
    if a is None or b is None:
        return None
    if is_concrete(a) and is_concrete(b):
        return a // b
    if is_concrete(b) and b > 0:
        parts = _floor_parts(a)
        if parts is not None:
            num, m = parts
            return normalize(sympy.floor(num / (m * b)))
    return normalize(sympy.floor(sympy.sympify(a) / sympy.sympify(b)))


def ceildiv(a: Dim, b: Dim) -> Dim:
    """ceil(a / b) for positive b, as floor((a + b - 1) / b)."""
    if a is None or b is None:
        return None
    return floordiv(add(a, sub(b, 1)), b)


def mod(a: Dim, b: Dim) -> Dim:
    if a is None or b is None:
        return None
    if is_concrete(a) and is_concrete(b):
        return a % b
    return normalize(sympy.Mod(sympy.sympify(a), sympy.sympify(b)))


def product(dims: Iterable[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def free_symbols(d: Dim) -> set:
    if isinstance(d, sympy.Basic):
        return set(d.free_symbols)
    return set()


def evaluate(d: Dim, sizes: dict) -> Optional[int]:
    """The concrete value of a dim at the given symbol sizes (symbol name or Symbol keys)."""
    if d is None:
        return None
    if is_concrete(d):
        return d
    subs = {(symbol(k) if isinstance(k, str) else k): v for k, v in sizes.items()}
    v = sympy.sympify(d).subs(subs)
    if v.free_symbols:
        return None
    if v.is_Integer:
        return int(v)
    if v.is_Rational or v.is_Float:
        return v  # not an integer: the caller decides what that means
    return None


# ---- deciding comparisons ---------------------------------------------------------

_PROBES = 12


def _probe_points(syms: list, seed: int, thresholds: tuple = ()) -> list[dict]:
    """Random points, with sizes reaching past the largest constant of the expressions
    and points at each constant itself: ``Max(0, Min(49152, T) - Min(32768, T))`` is 0
    for every T up to 32768, so probes below 1000 alone would call it 0."""
    rng = random.Random(seed)
    reach = max(thresholds, default=0)
    ranges = [7, 64, 1000] + ([4 * reach] if reach > 250 else [])
    points = [{s: rng.randint(1, ranges[i % len(ranges)]) for s in syms} for i in range(_PROBES)]
    points += [{s: c + k for s in syms} for c in thresholds[-4:] if c > 0 for k in (0, 1)]
    return points


def _thresholds(*exprs) -> tuple:
    """The integer constants inside Min/Max/floor/Mod terms, where an expression may change form."""
    found = set()
    for e in exprs:
        for term in e.atoms(sympy.Min, sympy.Max, sympy.floor, sympy.Mod):
            found.update(abs(int(n)) for n in term.atoms(sympy.Integer))
    return tuple(sorted(found))


def equal(a: Dim, b: Dim) -> Optional[bool]:
    """Whether two dims are equal: True (for all symbol values), False (for none), or
    None (for some values only, or undecidable).

    Structural equality or an expanded difference of zero proves True; a difference
    whose sign sympy can prove proves False. Otherwise both sides are evaluated at a
    dozen probe points: agreement everywhere is taken as equal (for polynomials of
    small degree that is proof in all but a vanishing fraction of cases, and floors of
    them differ on whole residue classes, which the probes hit); anything else is None.
    """
    if a is None or b is None:
        return None
    if is_concrete(a) and is_concrete(b):
        return a == b
    a, b = sympy.sympify(a), sympy.sympify(b)
    verdict = _equal_sym(a, b)
    if verdict is None and _facts.get():
        # the path condition may decide it: after `if T > 16: ... if n > 1: ... else:`,
        # Min(32, T) - 16 is 1 on that path though not for all sizes
        pinned = _pinned_symbols(_facts.get())
        if pinned:
            verdict = _equal_sym(a.xreplace(pinned), b.xreplace(pinned))
    if verdict is None and (_facts.get() or a.has(*_PIECEWISE) or b.has(*_PIECEWISE)):
        verdict = _equal_by_ordering(a, b)  # Min(4, T) < 256: never equal
    return verdict


_PIECEWISE = (sympy.Min, sympy.Max, sympy.floor)


@functools.lru_cache(maxsize=4096)
def _equal_sym(a: sympy.Expr, b: sympy.Expr) -> Optional[bool]:
    if a == b:
        return True
    diff = sympy.expand(a - b)
    if diff == 0:
        return True
    if diff.is_Number or diff.is_positive or diff.is_negative:
        return False
    syms = sorted(diff.free_symbols, key=str)
    defined = 0
    for p in _probe_points(syms, 0, _thresholds(a, b)):
        try:
            va, vb = a.subs(p), b.subs(p)
        except ZeroDivisionError:  # Mod(x, 0): no dim exists at this point
            continue
        if any(v.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo) for v in (va, vb)):
            continue
        if va != vb:
            return None
        defined += 1
    # equal wherever both sides are defined, at enough points to be a proof as above
    return True if defined >= _PROBES // 2 else None


# ---- facts: what the current path condition says about the symbols -------------------

_facts: contextvars.ContextVar[tuple] = contextvars.ContextVar("shape_facts", default=())


def facts_from(cond) -> tuple:
    """Normalize the relational conjuncts of a path condition into integer facts
    ``f >= 0`` (a strict ``f > 0`` becomes ``f - 1 >= 0``: the symbols are integers)."""
    out = []
    for c in sympy.And.make_args(cond) if isinstance(cond, sympy.Basic) else ():
        if not isinstance(c, sympy.Rel) or isinstance(c, sympy.Ne):
            continue
        d = sympy.expand(c.lhs - c.rhs)
        if isinstance(c, (sympy.Gt, sympy.StrictGreaterThan)):
            out.append(d - 1)
        elif isinstance(c, sympy.Ge):
            out.append(d)
        elif isinstance(c, sympy.Lt):
            out.append(-d - 1)
        elif isinstance(c, sympy.Le):
            out.append(-d)
        elif isinstance(c, sympy.Eq):
            out.extend([d, -d])
    return tuple(out)


@contextlib.contextmanager
def assuming(cond):
    """Decide comparisons knowing that ``cond`` (a path condition) holds."""
    token = _facts.set(facts_from(cond))
    try:
        yield
    finally:
        _facts.reset(token)


@functools.lru_cache(maxsize=256)
def _pinned_symbols(facts: tuple) -> dict:
    """Symbols the facts fix to one value: ``T <= 1`` pins a positive T to 1, and then
    ``1024/T`` is 1024."""
    lower: dict = {}
    upper: dict = {}
    for f in facts:
        syms = f.free_symbols
        if len(syms) != 1:
            continue
        (s,) = syms
        poly = sympy.Poly(f, s) if f.is_polynomial(s) else None
        if poly is None or poly.degree() != 1:
            continue
        c, k = poly.all_coeffs()  # c*s + k >= 0
        if c > 0:
            lower[s] = max(lower.get(s, 1 if s.is_positive else -sympy.oo), sympy.ceiling(-k / c))
        else:
            upper[s] = min(upper.get(s, sympy.oo), sympy.floor(k / -c))
    for s, hi in upper.items():
        lower.setdefault(s, 1 if s.is_positive else -sympy.oo)
    return {s: sympy.Integer(lo) for s, lo in lower.items() if s in upper and lo == upper[s]}


def _implied_nonneg(d) -> bool:
    """Whether the facts imply ``d >= 0`` (d differs from a fact by a constant >= 0)."""
    for f in _facts.get():
        c = sympy.expand(d - f)
        if c.is_Number and c >= 0:
            return True
    return False


def _decide_by_facts(op: str, d) -> Optional[bool]:
    if not _facts.get():
        return None
    tests = {">": (d - 1, -d), ">=": (d, -d - 1), "<": (-d - 1, d), "<=": (-d, d - 1)}[op]
    if _implied_nonneg(tests[0]):
        return True
    if _implied_nonneg(tests[1]):
        return False
    return None


def _equal_by_ordering(a: Dim, b: Dim) -> Optional[bool]:
    """``a == b`` decided by ordering (under the facts in force): both ``>=`` and ``<=``
    hold, or one fails."""
    ge, le = compare(">=", a, b), compare("<=", a, b)
    return True if ge and le else (False if ge is False or le is False else None)


def compare(op: str, a: Dim, b: Dim) -> Optional[bool]:
    """Decide ``a <op> b`` (op in == != < <= > >=) for all symbol values allowed by the
    facts in force (see ``assuming``), or None."""
    if a is None or b is None:
        return None
    if is_concrete(a) and is_concrete(b):
        return _PY_OPS[op](a, b)
    if op in ("==", "!="):
        e = equal(a, b)
        return e if op == "==" or e is None else not e
    diff = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    if diff.is_Number:
        return bool(_PY_OPS[op](diff, 0))
    if diff.has(sympy.Min, sympy.Max):
        verdict = _compare_minmax(op, diff)
        if verdict is not None:
            return verdict
    rel = {"<": diff.is_negative, "<=": diff.is_nonpositive,
           ">": diff.is_positive, ">=": diff.is_nonnegative}[op]
    if rel is True:
        return True
    neg = {"<": diff.is_nonnegative, "<=": diff.is_positive,
           ">": diff.is_nonpositive, ">=": diff.is_negative}[op]
    if neg is True:
        return False
    if diff.has(sympy.floor):
        verdict = _compare_floor_bounds(op, diff)
        if verdict is None:
            verdict = _compare_one_floor(op, diff)
        if verdict is not None:
            return verdict
    return _decide_by_facts(op, diff)


def _compare_one_floor(op: str, diff) -> Optional[bool]:
    """Decide ``k*floor(y) + c <op> 0`` through y, as integers allow: floor(y) >= m
    exactly when y >= m, so ``floor(Min(16, T)/64) > 0`` fails since Min(16, T) < 64."""
    floors = [t for t in sympy.Add.make_args(diff) if t.has(sympy.floor)]
    if len(floors) != 1:
        return None
    k, f = floors[0].as_coeff_Mul()
    c = diff - floors[0]
    if not (isinstance(f, sympy.floor) and c.is_Rational and k.is_Rational and k != 0):
        return None
    if op in ("<", "<="):  # a < 0 is not (a >= 0)
        verdict = _compare_one_floor({"<": ">=", "<=": ">"}[op], diff)
        return None if verdict is None else not verdict
    bound = -c / k
    if k > 0:  # floor(y) >= m
        m = sympy.ceiling(bound) if op == ">=" else sympy.floor(bound) + 1
        return compare(">=", f.args[0], m)
    m = sympy.floor(bound) if op == ">=" else sympy.ceiling(bound) - 1  # floor(y) <= m
    return compare("<", f.args[0], m + 1)


def _floor_bounds(diff):
    """(lower, upper) bounds of ``diff`` with each floor term replaced by what brackets
    it, y - 1 <= floor(y) <= y (by the sign of its coefficient); None when a floor sits
    inside something else (a product, a Min)."""
    lower, upper = sympy.S(0), sympy.S(0)
    for term in sympy.Add.make_args(diff):
        coeff, rest = term.as_coeff_Mul()
        if isinstance(rest, sympy.floor):
            y = rest.args[0]
            below = _floor_gap(y)
            lo, hi = (coeff * (y - below), coeff * y) if coeff > 0 else (coeff * y, coeff * (y - below))
        elif rest.has(sympy.floor):
            return None
        else:
            lo = hi = term
        lower, upper = lower + lo, upper + hi
    return sympy.expand(lower), sympy.expand(upper)


def _floor_gap(y):
    """How far floor(y) may fall below y: (m - 1)/m for y = P/m with P an integer
    polynomial (floor(T/4) >= (T - 3)/4), else 1."""
    num, den = sympy.fraction(sympy.together(y))
    if den.is_Integer and den > 0 and _is_int_poly(num):
        return sympy.Rational(int(den) - 1, int(den))
    return sympy.S(1)


def _compare_floor_bounds(op: str, diff) -> Optional[bool]:
    """Decide ``diff <op> 0`` from bounds without floors: ``4*floor(T/4) - T <= 0``
    because its upper bound ``4*(T/4) - T`` is 0."""
    bounds = _floor_bounds(diff)
    if bounds is None:
        return None
    lower, upper = bounds  # lower <= diff <= upper
    verdicts = {">": (lower.is_positive, upper.is_nonpositive), ">=": (lower.is_nonnegative, upper.is_negative),
                "<": (upper.is_negative, lower.is_nonnegative), "<=": (upper.is_nonpositive, lower.is_positive)}
    holds, fails = verdicts[op]
    if holds:
        return True
    if fails:
        return False
    return None


def _compare_minmax(op: str, diff) -> Optional[bool]:
    """Decide ``diff <op> 0`` where one additive term is a Min or Max: e.g.
    ``Min(2, T) - 6 < 0`` holds because every argument of the Min makes it hold."""
    terms = sympy.Add.make_args(diff)
    mm = [t for t in terms if isinstance(t.as_coeff_Mul()[1], (sympy.Min, sympy.Max))]
    if len(mm) != 1:
        return None
    rest = diff - mm[0]
    coeff, minmax = mm[0].as_coeff_Mul()
    verdicts = [compare(op, sympy.expand(coeff * arg + rest), 0) for arg in minmax.args]
    # op is monotone in diff: for ">"/">=" Min needs all arguments, Max needs one (the
    # other way round under a negative coefficient)
    needs_all = (isinstance(minmax, sympy.Min) == (op in (">", ">="))) == (coeff > 0)
    if needs_all:
        if all(v is True for v in verdicts):
            return True
        if any(v is False for v in verdicts):
            return False
    else:
        if any(v is True for v in verdicts):
            return True
        if all(v is False for v in verdicts):
            return False
    return None


_PY_OPS = {
    "==": lambda x, y: x == y, "!=": lambda x, y: x != y,
    "<": lambda x, y: x < y, "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y, ">=": lambda x, y: x >= y,
}


def relation(op: str, a: Dim, b: Dim) -> sympy.Basic:
    """The sympy condition ``a <op> b`` (for path conditions and ``when``)."""
    sa, sb = sympy.sympify(a), sympy.sympify(b)
    return {"==": sympy.Eq, "!=": sympy.Ne, "<": sympy.Lt, "<=": sympy.Le,
            ">": sympy.Gt, ">=": sympy.Ge}[op](sa, sb)


def holds_at(cond, sizes: dict) -> Optional[bool]:
    """Evaluate a condition at concrete sizes."""
    if cond is True or cond is False:
        return cond
    subs = {(symbol(k) if isinstance(k, str) else k): v for k, v in sizes.items()}
    v = sympy.sympify(cond).subs(subs)
    if v in (sympy.true, True):
        return True
    if v in (sympy.false, False):
        return False
    return None


# ---- printing -----------------------------------------------------------------------


def dim_str(d: Dim) -> str:
    """Machine form: a string sympy parses with the declared symbol names, or '?'."""
    if d is None:
        return "?"
    return str(d)


def dim_pretty(d: Dim) -> str:
    """Human form for comments and reports: ``(H + 3)//4`` rather than floor((H + 3)/4)."""
    if d is None:
        return "?"
    if is_concrete(d):
        return str(d)
    return _pretty(sympy.sympify(d))


def _pretty(e) -> str:
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den != 1:
            return f"{_atom(num)}//{_atom(den)}"
        return f"floor({_pretty(e.args[0])})"
    if isinstance(e, sympy.Mod):
        return f"{_atom(e.args[0])} % {_atom(e.args[1])}"
    if e.is_Add:
        terms = sympy.Add.make_args(e)
        # symbols first, constants last, as people write them
        terms = sorted(terms, key=lambda t: (t.is_Number, str(t)))
        out = _pretty(terms[0])
        for t in terms[1:]:
            if t.could_extract_minus_sign():
                out += f" - {_atom(-t)}"
            else:
                out += f" + {_atom(t)}"
        return out
    if e.is_Mul:
        num, den = sympy.fraction(e)
        if den != 1:
            return f"{_atom(num)}/{_atom(den)}"
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            return f"-{_atom(rest)}"
        factors = sympy.Mul.make_args(e)
        factors = sorted(factors, key=lambda t: (not t.is_Number, str(t)))
        return "*".join(_atom(f) for f in factors)
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        return f"{_atom(e.base)}**{e.exp}"
    return str(e)


def _atom(e) -> str:
    """``_pretty(e)``, parenthesized when it is not a single term."""
    s = _pretty(e)
    if e.is_Symbol or e.is_Number and not s.startswith("-"):
        return s
    if " " in s or "/" in s or s.startswith("-") or "%" in s:
        return f"({s})"
    return s


def shape_str(shape: Optional[Shape], pretty: bool = True) -> str:
    if shape is None:
        return "[...]"
    f = dim_pretty if pretty else dim_str
    return "[" + ", ".join(f(d) for d in shape) + "]"
