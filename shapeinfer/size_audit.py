"""What a replay across sizes needs to know about forward's size arithmetic.

The runtime can reuse a graph recorded at one size for another size of the same symbols
(``lazy_runtime.replay``) only if every size the forward computes is a function it can
recover from a few recorded traces. The analysis sees every value forward computes, so
it can vouch for that: while it interprets, each value passes through ``SizeAudit.note``,
which records

- **conditions**: every relation between the symbols the forward evaluates (``T > 100``,
  an ``assert``), and the choice a ``min``/``max``/slice bound makes (``Min(256, T)``
  is ``T`` exactly when ``T <= 256``). A replay is valid only where each condition has
  the truth value it had when the graph was recorded;
- **non-polynomial arithmetic**: floors, ceilings and remainders of symbols (``T // 2``,
  a strided conv's output size), which no finite set of traces pins down: their
  presence turns replay across sizes off (``polynomial`` is False, with the reasons);
- **degree**: per symbol, the highest power it reaches in any int or tensor element
  count (``[B, H, T, T]`` has T squared). With the conditions fixed, every size is a
  polynomial of at most these degrees, so that many traces plus one determine it;
- **total_degree**: the highest total degree of any monomial of any such int or element
  count (``[B, H, T, T]``: B*T**2, 3). It bounds the monomials jointly: [B, T]
  activations with a [T, T] mask give B degree 1 and T degree 2 but total degree 2 (no
  B*T**2), so sizes varying together need fewer traces than the box of per-symbol
  degrees suggests.

A ``min``/``max`` counts as the product of its arguments (with the choice fixed it is one
of them): that bounds both degrees from above.
"""

from __future__ import annotations

import itertools

import sympy

from . import symbolic as sym
from .values import SymScalar, TensorType, TupleV, UnionV

_NON_POLY = (sympy.floor, sympy.ceiling, sympy.Mod)
_CHOICES = (sympy.Min, sympy.Max)
_MAX_REASONS = 8


class SizeAudit:
    def __init__(self, symbols):
        self.symbols = {sym.symbol(s) for s in symbols}
        self.conditions: dict = {}    # str -> sympy relation
        self.reasons: list = []       # why the arithmetic is not polynomial
        self.degree: dict = {}        # symbol name -> highest degree seen
        self.total_degree = 0         # highest total degree of a monomial seen
        self._seen: set = set()

    @property
    def polynomial(self) -> bool:
        return not self.reasons

    def note(self, v, loc) -> None:
        try:
            self._note(v, loc)
        except Exception as e:  # never fail the analysis; vouch for nothing instead
            self.reasons.append(f"{loc[0]}:{loc[1]}: the audit failed ({type(e).__name__}: {e})")

    def _note(self, v, loc) -> None:
        if isinstance(v, SymScalar):
            e = v.expr
            if isinstance(e, sympy.Basic) and e.free_symbols:
                if v.kind is bool:
                    self._relation(e, loc)
                else:
                    self._size(e, loc)
        elif isinstance(v, TensorType):
            shape = v.shape
            if shape and not all(type(d) is int for d in shape):
                self._size(sympy.Mul(*[d for d in shape if isinstance(d, sympy.Basic)]), loc)
        elif isinstance(v, UnionV):
            for cond, option in v.options:
                if isinstance(cond, sympy.Basic):
                    self._relation(cond, loc)
                self._note(option, loc)
        elif isinstance(v, TupleV) and len(v.items) <= 8:
            for item in v.items:
                self._note(item, loc)

    # ---- one expression

    def _relation(self, cond, loc) -> None:
        if cond in self._seen:
            return
        self._seen.add(cond)
        if not cond.free_symbols <= self.symbols:
            return  # a test on tensor data: shape_only already says so
        for atom in cond.atoms(sympy.Rel):
            self._size(atom.lhs - atom.rhs, loc)
            self.conditions.setdefault(str(atom), atom)

    def _size(self, e, loc) -> None:
        if e in self._seen:
            return
        self._seen.add(e)
        if not e.free_symbols or not e.free_symbols <= self.symbols:
            return
        if e.has(*_NON_POLY):
            if len(self.reasons) < _MAX_REASONS:
                file, line, _ = loc
                self.reasons.append(f"{file}:{line}: {sym.dim_pretty(e)}")
            elif not self.reasons[-1].startswith("..."):
                self.reasons.append("... (more)")
            return
        for m in e.atoms(*_CHOICES):
            for a, b in itertools.combinations(m.args, 2):
                self._relation(sympy.Le(a, b, evaluate=False), loc)
        # with the choices fixed a Min is one of its arguments: bound the degree by all
        e = e.replace(lambda x: isinstance(x, _CHOICES), lambda x: sympy.Mul(*x.args))
        if not e.free_symbols:
            return
        try:
            poly = sympy.Poly(sympy.expand(e), *sorted(e.free_symbols, key=str))
        except sympy.PolynomialError:
            if len(self.reasons) < _MAX_REASONS:
                self.reasons.append(f"{loc[0]}:{loc[1]}: {sym.dim_pretty(e)} is not a polynomial")
            return
        for s, d in zip(poly.gens, poly.degree_list()):
            name = str(s)
            if d > self.degree.get(name, 0):
                self.degree[name] = d
        self.total_degree = max(self.total_degree, poly.total_degree())

    def to_json(self, diagnostics=()) -> dict:
        """The plan's ``control_flow.size_arithmetic``. A diagnostic's ``when`` (where
        torch would fail) is a condition too: a replay must not cross it."""
        conditions = set(self.conditions)
        for d in diagnostics:
            when = getattr(d, "when", None)
            if when and _only_symbols(when, self.symbols):
                conditions.add(when)
        return {"polynomial": self.polynomial, "reasons": list(self.reasons),
                "conditions": sorted(conditions), "degree": dict(sorted(self.degree.items())),
                "total_degree": self.total_degree}


def _only_symbols(text: str, symbols) -> bool:
    names = {str(s) for s in symbols}
    try:
        e = sympy.sympify(text, locals={n: sym.symbol(n) for n in names})
    except (sympy.SympifyError, TypeError, SyntaxError):
        return False
    return isinstance(e, sympy.Basic) and {str(s) for s in e.free_symbols} <= names
