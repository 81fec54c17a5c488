"""Replay across sizes: a recorded call reused for sizes it was never traced at.

A replay (``replay.py``) reuses the templates of one exact signature. Calls whose only
difference is the size of dynamic dims (``T`` = 37, 50, 61, ...) each have a signature
of their own, so a workload whose lengths rarely repeat would trace almost every call.

The analyzer can vouch for more (``control_flow.size_arithmetic`` in the plan, see
``shapeinfer/size_audit.py``): the forward's control flow depends on shapes only, every
relation between sizes it evaluates is listed (``conditions``), and with those decided
every size it computes is a polynomial in the symbols of known degree per symbol. The
templates of one *family* (the same signature but for the dynamic sizes, and the same
truth value of every condition) then differ only in their int attributes, and each int
is such a polynomial of the call's sizes. Given traces at sizes x_1..x_n, a new size x
is *determined* when the monomial vector phi(x) is a combination sum(l_i phi(x_i)) of the
traced ones: every polynomial of those degrees then has p(x) = sum(l_i p(x_i)), so each
int of the new templates is the same combination of the traced ints (exact rational
arithmetic; a non-integer result or traces no polynomial of those degrees fits refuse).

The analyzer's degrees cover every value it sees, not the inside of one op (a fused
attention's T x T scores, flattened by its backward): the fit allows one degree more per
symbol than the plan says, and needs one trace more than the fit needs, whose agreement
verifies it. An int of the allowed degree is then recovered exactly, and one of a degree
up to the number of traces minus one that no allowed polynomial fits is caught. With T of
degree 2 (attention scores are T x T), five traced lengths determine any other length.

Host constants made inside the call (``arange(T)``) carry their recipe and are made
again at the new size; any other constant must be equal in every trace.
"""

from __future__ import annotations

import hashlib
import itertools
from fractions import Fraction

import numpy as np
import sympy
import torch

from . import ir

_HOLE = object()   # where an int was taken out of a skeleton
_LIST = "__list__"
MAX_OBSERVATIONS = 8


class SizePolicy:
    """The plan's guarantees about forward's size arithmetic: its conditions (compiled
    to Python) and each symbol's degree."""

    def __init__(self, conditions, degree: dict):
        self.degree = dict(degree)
        self._conds = []
        for text in conditions:
            e = sympy.sympify(text, locals=_symbols_in(text))
            if isinstance(e, sympy.Basic) and e.free_symbols:
                names = sorted(str(s) for s in e.free_symbols)
                self._conds.append((names, sympy.lambdify(names, e, "math")))
        self._memo: dict = {}

    @classmethod
    def from_plan(cls, control: dict):
        """The policy of a plan's ``control_flow``, or None when it vouches for nothing."""
        sa = control.get("size_arithmetic") or {}
        if not control.get("shape_only") or not sa.get("polynomial"):
            return None
        try:
            return cls(sa.get("conditions") or (), sa.get("degree") or {})
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
        """Exponent tuples of every monomial of the allowed degrees over ``names``: one
        more than the analyzer saw (an op's internals may flatten a T x T it never
        shows; the verifying trace in ``predict`` catches more than that)."""
        return list(itertools.product(*[range(self.degree.get(n, 1) + 2) for n in names]))


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
               "bwd_rng", "grad_of")


def parts(entry):
    """(skeleton, ints) of a ready entry, cached on it."""
    p = entry.size_parts
    if p is None:
        ints: list = []
        skel = (_template_key(entry.fwd, ints), _template_key(entry.bwd, ints),
                _slots_key(entry.fwd_slots, ints), _slots_key(entry.bwd_slots, ints),
                tuple(getattr(entry, f) for f in _STRUCTURAL))
        p = entry.size_parts = (skel, tuple(ints))
    return p


# ---- the fit --------------------------------------------------------------------------


def _phi(sizes: dict, names, monos) -> list:
    v = [sizes[n] for n in names]
    out = []
    for e in monos:
        m = 1
        for x, k in zip(v, e):
            m *= x ** k
        out.append(Fraction(m))
    return out


def _solve(columns: list, target: list):
    """A vector l with sum_i l_i * columns[i] == target (exact), or None; and a basis of
    {mu : sum_i mu_i * columns[i] == 0} (the relations the traced values must obey)."""
    n = len(columns)
    m = len(target)
    rows = [[columns[i][r] for i in range(n)] + [target[r]] for r in range(m)]
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
    if any(rows[i][n] != 0 for i in range(r, m)):
        return None, ()
    sol = [Fraction(0)] * n
    for i, c in enumerate(pivots):
        sol[c] = rows[i][n]
    free = [c for c in range(n) if c not in pivots]
    null = []
    for f in free:
        mu = [Fraction(0)] * n
        mu[f] = Fraction(1)
        for i, c in enumerate(pivots):
            mu[c] = -rows[i][f]
        null.append(mu)
    return sol, null


def predict(observed: list, sizes: dict, policy: SizePolicy):
    """The ints at ``sizes`` from ``observed`` [(sizes_i, ints_i)], or None when the
    traces do not determine them, or leave no trace over to verify the fit with, or no
    polynomial of the allowed degrees fits them."""
    names = sorted(sizes)
    monos = policy.monomials(names)
    latest = {tuple(s[n] for n in names): (s, v) for s, v in observed}  # one per size
    observed = list(latest.values())
    cols = [_phi(s, names, monos) for s, _ in observed]
    lam, null = _solve(cols, _phi(sizes, names, monos))
    if lam is None or not null:
        return None
    values = [v for _, v in observed]
    out = list(values[-1])
    done: dict = {}   # the same column (T, T-1, B*T ... recur hundreds of times) once
    for k, column in enumerate(zip(*values)):
        first = column[0]
        if all(v == first for v in column):
            continue   # the weights sum to 1 (the constant monomial): the same value
        p = done.get(column)
        if p is None:
            if any(sum(mu_i * v for mu_i, v in zip(mu, column)) != 0 for mu in null):
                return None
            p = done[column] = sum(l_i * v for l_i, v in zip(lam, column))
            if p.denominator != 1:
                return None
        out[k] = int(p)
    return out


# ---- rebuilding an entry at new sizes -------------------------------------------------


def _rebuild_template(old, key, it, template_cls):
    if old is None:
        return None
    nodes = []
    for (op, fields, dtype), n, wires in zip(key[0], old.nodes, old.wiring):
        if op is ir.SCALAR:
            c = ir.leaf(ir.SCALAR, fill(fields, it), n.shape, dtype)
        elif op in ir.LEAVES:
            c = ir.leaf(op, None, fill(fields, it), dtype)
        else:
            args, kwargs, shape, aux = fill(fields, it)
            c = ir.loose_node(op, args, kwargs, tuple(nodes[i] for i in wires), shape, dtype, aux)
        nodes.append(c)
    return template_cls(old.kind, nodes, list(old.outputs))


def _rebuild_slots(slots, key, it):
    out = []
    for s, k in zip(slots, key):
        if s[0] != "const":
            out.append(s)
            continue
        kind = k[1][0]
        if kind == "recipe":
            _, maker, args_skel, kwargs_skel = k[1]
            out.append(("const", maker(*fill(args_skel, it), **dict(fill(kwargs_skel, it)))))
        else:
            out.append(s)
    return tuple(out)


def rebuild(like, skel, ints, entry_cls, template_cls):
    """A ready entry like ``like`` (a traced one of the family) with ``ints`` put back."""
    it = iter(ints)
    e = entry_cls()
    e.fwd = _rebuild_template(like.fwd, skel[0], it, template_cls)
    e.bwd = _rebuild_template(like.bwd, skel[1], it, template_cls)
    e.fwd_slots = _rebuild_slots(like.fwd_slots, skel[2], it)
    e.bwd_slots = _rebuild_slots(like.bwd_slots, skel[3], it)
    for f in _STRUCTURAL:
        setattr(e, f, getattr(like, f))
    e.state = "ready"
    e.synthesized = True
    return e
