"""Replay across sizes: a recorded call reused for sizes it was never traced at.

A replay (``replay.py``) reuses the templates of one exact signature. Calls whose only
difference is the size of dynamic dims (``T`` = 37, 50, 61, ...) each have a signature
of their own, so a workload whose lengths rarely repeat would trace almost every call.

The analyzer can vouch for more (``control_flow.size_arithmetic`` in the plan, see
``shapeinfer/size_audit.py``): the forward's control flow depends on shapes only, every
relation between sizes it evaluates is listed (``conditions``), and with those decided
every size it computes is a polynomial in the symbols of known degree per symbol
(``degree``) and known highest total degree of a monomial (``total_degree``). The
templates of one *family* (the same signature but for the dynamic sizes, and the same
truth value of every condition) then differ only in their int attributes, and each int
is such a polynomial of the call's sizes. Given traces at sizes x_1..x_n, a new size x
is *determined* when the monomial vector phi(x) is a combination sum(l_i phi(x_i)) of the
traced ones: every polynomial of those monomials then has p(x) = sum(l_i p(x_i)), so each
int of the new templates is the same combination of the traced ints (exact rational
arithmetic; a non-integer result or traces no polynomial of those monomials fits refuse).

The analyzer's degrees cover every value it sees, not the inside of one op (a fused
attention's T x T scores, flattened by its backward): the allowed monomials are those
with each symbol's exponent at most its degree plus one *and* (when the plan gives
``total_degree``; older plans do not) the sum of exponents at most the total degree plus
one. The fit needs one trace more than the monomials do, whose agreement checks it.

What is proved and what is assumed: *if* every int of the family is a polynomial in the
allowed monomials, a prediction is exact (the combination is unique on them whatever l
is chosen). That premise is the analyzer's certificate plus the one-degree margin for
ops' internals; it is not proved by the traces. The spare trace checks it: an int whose
traced values no allowed polynomial fits refuses the prediction. In one symbol that
catches every int of degree up to the number of traces minus one; in several symbols an
int outside the allowed monomials is caught unless its traced values happen to fit one.
A prediction is also refused when placeholders' predicted shapes differ from the call's
(``replay._fits``).

How many traces: with T of degree 2 (attention scores are T x T), monomials 1..T**3:
five traced lengths determine any other length. GPT with B and T varying together (B
degree 1, T degree 2, total degree 3: B**a * T**b with a <= 2, b <= 3, a + b <= 4) has
eleven monomials: twelve (B, T) pairs in general position (the box of per-symbol degrees
alone: twelve monomials, thirteen pairs). ``MAX_OBSERVATIONS`` traces are kept per family.

Cost: a set of traces is reduced once (``_Fit``, kept on the policy): its relations, the
check of every distinct traced column, and each column's coefficients; a new size then
costs a few integer dot products. Rebuilding keeps the traced entry's nodes whose ints and
inputs did not change and fills the others with builders compiled once per structure.

Host constants made inside the call (``arange(T)``) carry their recipe and are made
again at the new size; any other constant must be equal in every trace.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import weakref
from fractions import Fraction
from math import gcd

import numpy as np
import sympy
import torch

from . import fold, ir

_HOLE = object()   # where an int was taken out of a skeleton
_LIST = "__list__"
MAX_OBSERVATIONS = 16   # traces kept per family: B x T of GPT needs 12


class SizePolicy:
    """The plan's guarantees about forward's size arithmetic: its conditions (compiled
    to Python), each symbol's degree and the highest total degree of a monomial (None
    for plans made before ``total_degree``: the box of per-symbol degrees alone)."""

    MAX_FITS = 16

    def __init__(self, conditions, degree: dict, total_degree=None):
        self.degree = dict(degree)
        self.total_degree = total_degree if type(total_degree) is int else None
        self._conds = []
        for text in conditions:
            e = sympy.sympify(text, locals=_symbols_in(text))
            if isinstance(e, sympy.Basic) and e.free_symbols:
                names = sorted(str(s) for s in e.free_symbols)
                self._conds.append((names, sympy.lambdify(names, e, "math")))
        self._memo: dict = {}
        self._monos: dict = {}
        self._fits: collections.OrderedDict = collections.OrderedDict()

    @classmethod
    def from_plan(cls, control: dict):
        """The policy of a plan's ``control_flow``, or None when it vouches for nothing."""
        sa = control.get("size_arithmetic") or {}
        if not control.get("shape_only") or not sa.get("polynomial"):
            return None
        try:
            return cls(sa.get("conditions") or (), sa.get("degree") or {},
                       sa.get("total_degree"))
        except (sympy.SympifyError, TypeError, SyntaxError, ValueError):
            return None

    def truths(self, sizes: dict):
        """Each condition's truth value at ``sizes`` (a family tells them apart), or None
        when one names a symbol the call does not size."""
        k = tuple(sorted(sizes.items()))
        hit = self._memo.get(k)
        if hit is None and k not in self._memo:
            try:
                hit = tuple(bool(f(*[sizes[n] for n in names])) for names, f in self._conds)
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                hit = None
            if len(self._memo) > 4096:
                self._memo.clear()
            self._memo[k] = hit
        return hit

    def monomials(self, names) -> list:
        """Exponent tuples of every allowed monomial over ``names``: each symbol's degree
        one more than the analyzer saw, and (when the plan gives it) the total degree one
        more than the analyzer saw (an op's internals may flatten a T x T it never shows;
        the verifying trace in ``predict`` catches more than that). A symbol the analyzer
        gave no degree is bounded by the box alone (its total degree is not vouched for)."""
        names = tuple(names)
        hit = self._monos.get(names)
        if hit is None:
            box = itertools.product(*[range(self.degree.get(n, 1) + 2) for n in names])
            if self.total_degree is None or any(n not in self.degree for n in names):
                hit = list(box)
            else:
                hit = [e for e in box if sum(e) <= self.total_degree + 1]
            self._monos[names] = hit
        return hit

    def fit(self, names: tuple, observed: list) -> "_Fit":
        """The fit of ``observed`` [(sizes, ints tuple)] (one per size), made once."""
        key = (names, tuple((tuple(s[n] for n in names), id(v)) for s, v in observed))
        hit = self._fits.get(key)
        if hit is not None and all(a is v for a, (_, v) in zip(hit[0], observed)):
            self._fits.move_to_end(key)
            return hit[1]
        f = _Fit(observed, names, self.monomials(names))
        # the ints are kept with the fit, so their ids cannot be reused while it lives
        self._fits[key] = ([v for _, v in observed], f)
        while len(self._fits) > self.MAX_FITS:
            self._fits.popitem(last=False)
        return f


def _symbols_in(text: str) -> dict:
    names = set(sympy.sympify(text).free_symbols)
    return {str(s): sympy.Symbol(str(s), integer=True, positive=True) for s in names}


# ---- skeletons: an entry with its ints taken out -------------------------------------


def split(obj, out: list):
    """``obj`` with every int replaced by a hole (the ints go to ``out``, in order)."""
    t = type(obj)
    if t is int:
        out.append(obj)
        return _HOLE
    if t is tuple or t is torch.Size:
        return tuple(split(x, out) for x in obj)
    if t is list:
        return (_LIST, tuple(split(x, out) for x in obj))
    return obj


def fill(skel, it):
    if skel is _HOLE:
        return next(it)
    if type(skel) is tuple:
        if len(skel) == 2 and skel[0] is _LIST:
            return [fill(x, it) for x in skel[1]]
        return tuple(fill(x, it) for x in skel)
    return skel


def _const_key(node, out):
    recipe = ir.HOST_RECIPES.get(node)
    if recipe is not None:
        maker, args, kwargs = recipe
        return ("recipe", maker, split(args, out), split(kwargs, out))
    a = np.asarray(node.value)
    return ("const", tuple(node.shape), node.dtype, hashlib.sha1(a.tobytes()).hexdigest())


def _template_key(t, out):
    if t is None:
        return None
    nodes = []
    for n in t.nodes:
        if n.op is ir.SCALAR:
            nodes.append((ir.SCALAR, split(n.value, out), n.dtype))
        elif n.op in ir.LEAVES:
            nodes.append((n.op, split(n.shape, out), n.dtype))
        else:
            nodes.append((n.op, split((n.args, n.kwargs, n.shape, n.aux), out), n.dtype))
    return (tuple(nodes), t.wiring, t.outputs)


def _slots_key(slots, out):
    return tuple(("const", _const_key(s[1], out)) if s[0] == "const" else s for s in slots)


_STRUCTURAL = ("out_spec", "out_consts", "n_out", "out_diff", "mutations", "fwd_rng",
               "bwd_rng", "grad_of", "aliases")


class Skeleton:
    """An entry's skeleton (``key``), interned: entries with equal skeletons share one
    object, so comparing and hashing them (a family's traces are grouped by skeleton at
    every prediction) costs nothing instead of a walk of the whole nested key."""

    __slots__ = ("key", "__weakref__")

    def __init__(self, key):
        self.key = key


_SKELETONS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def parts(entry):
    """(skeleton, ints) of a ready entry, cached on it."""
    p = entry.size_parts
    if p is None:
        ints: list = []
        key = (_template_key(entry.fwd, ints), _template_key(entry.bwd, ints),
               _slots_key(entry.fwd_slots, ints), _slots_key(entry.bwd_slots, ints),
               tuple(getattr(entry, f) for f in _STRUCTURAL),
               tuple((split(program, ints), value) for program, value in entry.folds))
        skel = _SKELETONS.get(key)
        if skel is None:
            skel = _SKELETONS[key] = Skeleton(key)
        p = entry.size_parts = (skel, tuple(ints))
    return p


# ---- the fit --------------------------------------------------------------------------


def _phi(sizes: dict, names, monos) -> list:
    v = [sizes[n] for n in names]
    out = []
    for e in monos:
        m = 1
        for x, k in zip(v, e):
            if k:
                m *= x ** k
        out.append(m)
    return out


def _dot(row, t) -> int:
    return sum(a * b for a, b in zip(row, t) if a)


def _integers(vec):
    """(integer numerators, common denominator) of a vector of Fractions."""
    den = 1
    for x in vec:
        den = den * x.denominator // gcd(den, x.denominator)
    return [int(x * den) for x in vec], den


class _Fit:
    """What one set of traces determines, computed once for every size asked about.

    With A the matrix whose columns are phi(x_i), row-reducing [A | I] gives E with E A
    in reduced echelon form (rank r, pivots p_1..p_r). A size x is determined exactly when
    phi(x) is in the column space of A, i.e. rows r.. of E vanish on phi(x); then
    l[p_k] = (E phi(x))_k (other l_i zero) solves A l = phi(x). The relations mu of the
    traces (A mu = 0) do not depend on x: a traced column c of ints that obeys every one
    lies in the row space of A (some polynomial of the allowed monomials fits it), and then
    sum(l_i c_i) = w . phi(x) with w = sum_k c[p_k] E_k, the same for every solution l. So
    each distinct column is checked against the relations and turned into w once, and a
    size costs a few dot products (integers over a common denominator)."""

    def __init__(self, observed: list, names, monos):
        self.names, self.monos = names, monos
        cols = [_phi(s, names, monos) for s, _ in observed]
        n, m = len(cols), len(monos)
        rows = [[Fraction(cols[i][r]) for i in range(n)] + [Fraction(int(r == j)) for j in range(m)]
                for r in range(m)]
        pivots = []
        r = 0
        for c in range(n):
            p = next((i for i in range(r, m) if rows[i][c] != 0), None)
            if p is None:
                continue
            rows[r], rows[p] = rows[p], rows[r]
            inv = 1 / rows[r][c]
            rows[r] = [x * inv for x in rows[r]]
            for i in range(m):
                if i != r and rows[i][c] != 0:
                    f = rows[i][c]
                    rows[i] = [a - f * b for a, b in zip(rows[i], rows[r])]
            pivots.append(c)
            r += 1
        # phi(x) must satisfy these to be a combination of the traced ones
        self.consistency = [_integers(row[n:])[0] for row in rows[r:]]
        self.consistency = [c for c in self.consistency if any(c)]
        free = [c for c in range(n) if c not in pivots]
        null = []
        for f in free:
            mu = [Fraction(0)] * n
            mu[f] = Fraction(1)
            for i, c in enumerate(pivots):
                mu[c] = -rows[i][f]
            null.append(_integers(mu)[0])
        values = [v for _, v in observed]
        self.base = list(values[-1])
        self.usable = bool(null)   # a spare trace verifies the fit
        # each distinct varying column (T, T-1, B*T recur hundreds of times) once
        where: dict = {}
        for k, column in enumerate(zip(*values)):
            first = column[0]
            if any(v != first for v in column):
                where.setdefault(column, []).append(k)
        self.columns = []   # (numerators of w, denominator, positions)
        for column, positions in where.items():
            if any(_dot(mu, column) != 0 for mu in null):
                self.usable = False   # no polynomial of the allowed monomials fits it
                break
            w = [Fraction(0)] * m
            for k, c in enumerate(pivots):
                if column[c]:
                    w = [a + column[c] * e for a, e in zip(w, rows[k][n:])]
            num, den = _integers(w)
            self.columns.append((num, den, positions))

    def at(self, sizes: dict):
        """The ints at ``sizes``, or None (not determined, or not an integer)."""
        if not self.usable:
            return None
        t = _phi(sizes, self.names, self.monos)
        if any(_dot(row, t) != 0 for row in self.consistency):
            return None
        out = list(self.base)
        for num, den, positions in self.columns:
            q, rem = divmod(_dot(num, t), den)
            if rem:
                return None
            for k in positions:
                out[k] = q
        return out


def predict(observed: list, sizes: dict, policy: SizePolicy):
    """The ints at ``sizes`` from ``observed`` [(sizes_i, ints_i)], or None when the
    traces do not determine them, or leave no trace over to verify the fit with, or no
    polynomial of the allowed monomials fits them. The fit of one set of traces is kept
    on ``policy`` (keyed by the identity of the ints tuples, which never change)."""
    names = tuple(sorted(sizes))
    latest = {tuple(s[n] for n in names): (s, v if type(v) is tuple else tuple(v))
              for s, v in observed}   # one per size
    observed = list(latest.values())
    return policy.fit(names, observed).at(sizes)


# ---- rebuilding an entry at new sizes -------------------------------------------------


def _count(skel) -> int:
    if skel is _HOLE:
        return 1
    if type(skel) is tuple:
        if len(skel) == 2 and skel[0] is _LIST:
            return _count(skel[1])
        return sum(_count(x) for x in skel)
    return 0


def _source(skel, consts: list, holes: list) -> str:
    """Python source that builds ``skel`` from ``v`` (its ints) and ``c`` (constants)."""
    if skel is _HOLE:
        holes.append(None)
        return f"v[{len(holes) - 1}]"
    if type(skel) is tuple:
        if len(skel) == 2 and skel[0] is _LIST:
            return "[" + ", ".join(_source(x, consts, holes) for x in skel[1]) + "]"
        items = [_source(x, consts, holes) for x in skel]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    consts.append(skel)
    return f"c[{len(consts) - 1}]"


_BUILDERS: dict = {}   # source -> function(v, c): one per structure


def _filler(skel):
    """A function from the ints of ``skel`` (a list) to the value with them put back
    (what ``fill`` gives, compiled once per structure)."""
    consts: list = []
    src = _source(skel, consts, [])
    fn = _BUILDERS.get(src)
    if fn is None:
        if len(_BUILDERS) > 4096:
            _BUILDERS.clear()
        fn = _BUILDERS[src] = eval(f"lambda v, c: {src}")  # noqa: S307 (our own source)
    consts = tuple(consts)
    return lambda vals: fn(vals, consts)


class _Plan:
    """Where each node's and each made-again constant's ints lie in an entry's ints,
    with a filler per part that has any: rebuilding then touches only the parts whose
    ints changed, and keeps a node whose ints and inputs are all unchanged."""

    def __init__(self, entry):
        skel, ints = parts(entry)
        skel = skel.key
        self.ints = list(ints)
        self.programs: dict = {}   # changed positions -> what to do per node
        pos = 0
        self.templates = []
        for key in skel[:2]:
            nodes = []
            for op, fields, dtype in (key[0] if key is not None else ()):
                if op in ir.LEAVES:
                    k = _count(fields)
                    nodes.append((pos, k, ((pos, k, _filler(fields)),) if k else ()))
                    pos += k
                    continue
                start = pos
                fillers = []
                for f in fields:   # args, kwargs, shape, aux
                    k = _count(f)
                    fillers.append((pos, k, _filler(f) if k else None))
                    pos += k
                nodes.append((start, pos - start, tuple(fillers)))
            self.templates.append(nodes)
        self.slots = []
        for key in skel[2:4]:
            out = []
            for k in key:
                if k[0] == "const" and k[1][0] == "recipe":
                    _, maker, args_skel, kwargs_skel = k[1]
                    n = _count((args_skel, kwargs_skel))
                    out.append((pos, n, maker, _filler((args_skel, kwargs_skel))))
                    pos += n
                else:
                    out.append(None)
            self.slots.append(out)
        # values the forward computed on the host (``fold``): each run again at the new
        # ints and required to come out as traced
        self.folds = []
        for program, value in skel[5]:
            n = _count(program)
            self.folds.append((pos, n, _filler(program), value))
            pos += n
        assert pos == len(self.ints)


_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _program(old, plan, changed: frozenset) -> list:
    """Per node of template ``old``, what rebuilding it takes when the ints at positions
    ``changed`` differ from the traced entry's: None (keep the node itself: its ints and
    inputs are unchanged), () (its own fields, new inputs), or the parts to fill
    [(field index, start, count, filler)] (index -1: a leaf's shape or value)."""
    if old is None:
        return None
    acts = []
    kept = []
    for n, wires, (start, k, fillers) in zip(old.nodes, old.wiring, plan):
        parts_ = tuple((j, p, kk, f) for j, (p, kk, f) in enumerate(fillers)
                       if kk and not changed.isdisjoint(range(p, p + kk)))
        if n.op in ir.LEAVES:
            parts_ = tuple((-1, p, kk, f) for _, p, kk, f in parts_)
            acts.append(parts_ or None)
        else:
            acts.append(parts_ if parts_ or not all(kept[i] for i in wires) else None)
        kept.append(acts[-1] is None)
    return acts


def _rebuild_template(old, acts, ints, template_cls):
    if old is None:
        return None
    nodes = []
    for n, wires, act in zip(old.nodes, old.wiring, acts):
        if act is None:
            nodes.append(n)
        elif act and act[0][0] == -1:
            _, p, k, f = act[0]
            if n.op is ir.SCALAR:
                nodes.append(ir.leaf(ir.SCALAR, f(ints[p:p + k]), n.shape, n.dtype))
            else:
                nodes.append(ir.leaf(n.op, None, f(ints[p:p + k]), n.dtype))
        elif not act:
            nodes.append(ir.loose_node(n.op, n.args, n.kwargs, tuple([nodes[i] for i in wires]),
                                       n.shape, n.dtype, n.aux, n.sig))
        else:
            fields = [n.args, n.kwargs, n.shape, n.aux]
            for j, p, k, f in act:
                fields[j] = f(ints[p:p + k])
            args, kwargs, shape, aux = fields
            nodes.append(ir.loose_node(n.op, args, kwargs, tuple([nodes[i] for i in wires]),
                                       shape, n.dtype, aux))
    return template_cls(old.kind, nodes, list(old.outputs))


def _rebuild_slots(slots, plan, ints, base):
    out = []
    for s, p in zip(slots, plan):
        if p is None:
            out.append(s)
            continue
        start, k, maker, filler = p
        if ints[start:start + k] == base[start:start + k]:
            out.append(s)     # the same recipe: the same (read-only) constant
            continue
        args, kwargs = filler(ints[start:start + k])
        out.append(("const", maker(*args, **dict(kwargs))))
    return tuple(out)


def rebuild(like, skel, ints, entry_cls, template_cls):
    """A ready entry like ``like`` (a traced one of the family, whose skeleton is
    ``skel``) with ``ints`` put back: parts whose ints did not change are ``like``'s own;
    None where a value the forward computed on the host would come out otherwise."""
    plan = _PLANS.get(like)
    if plan is None:
        plan = _PLANS[like] = _Plan(like)
    ints = list(ints)
    base = plan.ints
    changed = frozenset(i for i, (a, b) in enumerate(zip(ints, base)) if a != b)
    acts = plan.programs.get(changed)
    if acts is None:
        if len(plan.programs) > 8:
            plan.programs.clear()
        acts = plan.programs[changed] = (_program(like.fwd, plan.templates[0], changed),
                                         _program(like.bwd, plan.templates[1], changed))
    for start, k, filler, value in plan.folds:
        if not fold.holds(*filler(ints[start:start + k]), value):
            return None
    e = entry_cls()
    e.folds = like.folds
    e.fwd = _rebuild_template(like.fwd, acts[0], ints, template_cls)
    e.bwd = _rebuild_template(like.bwd, acts[1], ints, template_cls)
    e.fwd_slots = _rebuild_slots(like.fwd_slots, plan.slots[0], ints, base)
    e.bwd_slots = _rebuild_slots(like.bwd_slots, plan.slots[1], ints, base)
    for f in _STRUCTURAL:
        setattr(e, f, getattr(like, f))
    e.state = "ready"
    e.synthesized = True
    return e
