"""Whole-step replay at numbers never traced (``compile_step``'s followed ints and floats).

A decoding step ``step(tok, pos)`` gets a new ``pos`` every call; a training step under
a learning-rate schedule a new ``lr`` in its optimizer's groups. Once the replayer has
seen such a number (an int or float argument, or a number hyper-parameter of the
optimizer) change between two calls of otherwise one signature, it *follows* it: the
signature keys it by type only, and traces pass it as a ``traced_numbers.TracedInt`` or
``TracedFloat`` (set in the optimizer's group for the trace) that records the Python's
arithmetic on it and the branches it took. (Below, "int" reads "number": a float's
expressions are linked to the graph's scalar inputs as an int's are.) Traces whose
executables, writes, random draws and recorded Python agree form a ``Family``. A family
replays the values it was traced at, and, once traced at three (``MIN_ENVS``: each value
traced narrows the links below), a call at a new value when

* every guard (a comparison or truth test the traced Python made) comes out as traced;
* every number the executable takes that differed between the traces, or that some
  recorded expression matches, is *linked*: an int scalar input (``arange(L) <= pos``),
  a cut's run-time start (``cache[:, :, pos] = k``), a dynamic dim's true size
  (``k[:, :, :pos + 1]``), and the raw bounds of each slice or select whose bounds moved.
  Its value equals, in every trace of the family, that of each candidate expression
  (and of a constant, where it never changed); a replay computes every candidate at its
  own values and needs them all to agree. A slice end torch computes itself
  (``narrow``'s ``start + length``) is linked as its start plus the traced length;
* every moving cut stays where torch would not clip or wrap it (``0 <= start <= end <=
  size``; a select's index within the dim), with the traced length or the predicted
  size of a dynamic dim of that length;
* every dynamic dim's predicted size falls in the bucket it was traced in.

Otherwise the call is traced, and joins a family (narrowing its candidates) or starts
one. A candidate must be an int the Python handed to torch (``traced_numbers._Handed``, a
function mode during followed traces, sees every call's arguments): what C code picks by
a followed int (a Python list indexed by it, ``table[pos]``) reaches torch as a plain int
and is linked to nothing, so that signature replays only values it was traced at. An
int the Python computed that kept one value in every trace (``pos % 3`` at 1, 4, 7) must
keep it: it may have reached the graph as a constant (0 and 1 are not inputs). Assumed:
a size torch computes in C from a handed int (``arange(pos + 1)``'s length) keeps
equalling the expression it equalled at the family's three or more values (the cuts'
clipping, the one such computation that bends, is checked, above).

**Sizes.** A training step whose batches vary in length (``T`` marked dynamic) follows
the sizes of its arguments' padded dims the same way (``step.StepReplayer``): the
followed values are those sizes, and each size the traced Python reads of a lazy tensor
is a followed number of its own, appended as read (``Tape.sized``). A family of one
executable then says how everything follows the call's sizes:

* each symbol of the executable (``_sizer``): an argument's dim, a constant, or a
  derived symbol computed by the rule its padding rule gave (``Cx.derive``: ``(H+1)//2``
  of a strided convolution, ``2*H`` of upsampling); every trace's sizes must come out. A
  derived symbol with no rule (a pad's own, by an amount the Python computed) is linked
  as a number is, even where it never changed;
* each size read, number, cut bound and constant recipe's int (``_fit``): its traced
  value where it never changed, and every form of a product of sizes M (one or two
  symbols, or several arguments' dims: a dim of a padded value is c M) it took in every
  trace: c M, a M + b, 1 or 2 / (a M + b) (a variance's backward takes 2 / (T - 1)); a
  replay needs all of them to agree (a read of ``H // 8`` constant at 4 where H ran 34 to
  36 is not vouched for at H = 40); one that changed and fits none fails the family;
* each cut of a dim whose size moved starts and runs where the executable takes it:
  at a fixed position or a fixed distance from the end (``_cut_forms``);
* each host constant whose value moved is made again by its recipe (``_remade``);
* each value the step computed on the host from such constants (``step._folds``: the
  causal-mask check) is computed again from them, its ints linked as a recipe's are,
  and must come out as traced (``_refolds``, ``Family._folds_hold``);
* each symbol whose size never changed in the traces of this executable keeps it
  (``steady``): a literal int the planner took for that symbol would not follow it.

What stays assumed: the Python reads sizes through the tensor (``shape``, ``size``,
``numel``, ``stride``, ``len``; a use that escapes the record, ``float(T)``, a hash,
``range(T)``, guards the read's value); ``x.shape.numel()`` or numpy computing on a
shape is not seen. torch's C++ is assumed not to record other ops at sizes never traced
(within one bucket, where the padded executable already runs every traced size alike).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math

import numpy as np
import torch

from . import dynamic, fold, replay_sizes
from .traced_numbers import NUMBER, evaluate, guards_hold, plain

MIN_ENVS = 3        # values a family is traced at before it vouches for others
MAX_FAMILIES = 16   # confirmed families kept per signature (a branch or a bucket each)
MAX_PENDING = 4     # traces kept waiting for a partner
MAX_TRACES = 24     # traces of one signature without any family: stop following


_VARIES = object()   # a number that differed between traces


@dataclasses.dataclass(frozen=True, slots=True)
class Returned:
    """A returned int computed from followed ints: its expression (``traced_numbers``)."""
    expr: object


class _Link:
    """How one number is predicted: ``where`` (("scalar", k), ("size", k) or ("cut", c,
    field)), the expressions whose values matched it in every trace, and its value where
    it never changed (else ``_VARIES``); or, for a slice end torch computed, ``rel``: (the
    start's ``where``, the traced length). Where sizes are followed, ``cands`` too: each
    form of the sizes it took in every trace (``_fit``: a mean's divisor, computed by
    torch's C++)."""

    __slots__ = ("where", "exprs", "const", "rel", "cands")

    def __init__(self, where, exprs, const, rel=None, cands=()):
        self.where, self.exprs, self.const, self.rel = where, exprs, const, rel
        self.cands = cands

    def value(self, env, known):
        """Its value at ``env`` (``known``: the numbers linked before it, and the sizes by
        symbol at ``_SIZES``), or None where its candidates disagree."""
        if self.rel is not None:
            return known[self.rel[0]] + self.rel[1]
        v = self.const
        for e in self.exprs:
            x = evaluate(e, env)
            if v is _VARIES:
                v = x
            elif x != v:
                return None
        if self.cands:
            return _fit_value((v, self.cands), known[_SIZES])
        return v


_SIZES = "sizes"   # (``_Link.value``'s key of the sizes by symbol)


class Family:
    """Traces of one followed signature that agree but for the followed ints, and what
    a replay at other values needs (``predict``). ``borrowed``: a sibling family's traces
    (the same Python, another executable: the bucket before a growing read's) whose
    numbers the links must explain too; they count toward ``MIN_ENVS``, so a new bucket
    needs one trace of its own, not three."""

    __slots__ = ("traces", "trace", "guards", "links", "cuts", "buckets", "envs", "fixed",
                 "returned", "borrowed", "n_envs", "sizer", "reads", "remade", "made",
                 "steady", "cut_forms", "arg_dims", "refolds", "folded")

    def __init__(self, traces, borrowed=()):
        self.traces = list(traces)
        self.trace = self.traces[0]
        self.borrowed = list(borrowed)
        self.made: dict = {}   # (constant, its recipe's ints) -> its padded value
        self.folded: dict = {}   # (host-computed value, its ints) -> whether it is as traced

    def relink(self) -> bool:
        """Link every number over the family's traces; False where one cannot be."""
        own = self.traces
        traces = own + self.borrowed
        self.envs = frozenset(t.tape.args() for t in own)   # (traced with this executable)
        self.n_envs = len(self.envs | {t.tape.args() for t in self.borrowed})
        t0 = traces[0]
        self.sizer, self.reads, self.remade, self.steady, self.cut_forms = None, (), (), (), ()
        self.arg_dims, self.refolds = (), ()
        monos = None
        if t0.tape.sized is not None:
            monos = self._link_sizes(own, traces)
            if monos is None:
                return False
        self.guards = t0.tape.guards
        values = [t.tape.values for t in traces]
        # An int the Python computed that kept one value in every trace of an executable
        # (``pos % 3`` at 1, 4 and 7) may have reached it as a constant (0 and 1 are not
        # inputs; a factory's fill, ``full(n, pos // 8)``): a replay keeps it at this
        # family's value. One that changed between traces of one executable was not
        # baked into it, nor (the same Python, the same number of inputs: ``siblings``)
        # into this one.
        groups: dict = {}
        for t in traces:
            groups.setdefault(id(t.exe), []).append(t.tape.values)
        self.fixed = tuple((e, values[0][j]) for j, e in enumerate(t0.tape.exprs)
                           if all(vals[j] == group[0][j] for group in groups.values()
                                  for vals in group))
        links = []

        handed = set.intersection(*[t.tape.handed for t in traces])

        def link(where, seen, rel=None, strict=False) -> bool:
            exprs = tuple(e for j, e in enumerate(t0.tape.exprs)
                          if e in handed and all(type(v) in NUMBER and vals[j] == v
                                                 for vals, v in zip(values, seen)))
            const = seen[0] if all(v == seen[0] for v in seen) else _VARIES
            cands = ()
            if monos is not None and all(type(v) in NUMBER for v in seen):
                fit = _fit(seen, monos)
                cands = () if fit is None else fit[1]
            if exprs or cands:
                links.append(_Link(where, exprs, const, cands=cands))
            elif const is _VARIES or strict:
                if rel is None:
                    return False
                links.append(_Link(where, (), const, rel))
            return True

        for k in range(len(t0.scalars)):
            seen = [t.scalars[k] for t in traces]
            if not link(("scalar", k), seen):
                return False
        computed = {s for s, _, _ in self.sizer or ()}
        for k in range(len(t0.syms)):
            if t0.syms[k] not in computed and not link(
                    ("size", k), [t.size_list[k] for t in traces], strict=_derived(t0.syms[k])):
                return False
        cuts = []
        for c, (i, d, size, raw) in enumerate(t0.cuts):
            raws = [t.cuts[c][3] for t in traces]
            if all(r == raw for r in raws):
                continue
            moving = tuple(f for f in range(len(raw)) if any(r[f] != raw[f] for r in raws))
            taken = [_taken(r, t.cuts[c][2], moving) for r, t in zip(raws, traces)]
            if None in taken:
                return False   # clipped, or wrapped where it moved, when traced
            lengths = [x[1] for x in taken]
            for f in range(len(raw)):
                seen = [r[f] for r in raws]
                rel = None
                if f == 1 and all(s[1] - s[0] == seen[0] - raws[0][0] for s in raws):
                    rel = (("cut", c, 0), seen[0] - raw[0])   # an end torch computed
                if not link(("cut", c, f), seen, rel):
                    return False
            # the length: the traced one, or a dynamic dim's size it always equalled
            if all(n == lengths[0] for n in lengths):
                of = lengths[0]
            else:
                of = tuple(k for k in range(len(t0.syms))
                           if all(t.size_list[k] == n for t, n in zip(traces, lengths)))
                if not of:
                    return False
            offset = t0.syms.index(f"@{i}") if f"@{i}" in t0.syms else None
            cuts.append((c, size, len(raw), of, offset, moving))
        self.links = links
        self.cuts = cuts
        self.returned = tuple(v.expr for v in t0.out_leaves if type(v) is Returned)
        self.buckets = [(k, t0.bucket_list[k], _derived(s)) for k, s in enumerate(t0.syms)
                        if s[0] != "@"]
        return True

    def _link_sizes(self, own, traces):
        """Where sizes are followed: how each symbol's size follows from the call's
        (``sizer``), each size the Python read (``reads``) and each constant made for the
        sizes (``remade``); the products of sizes numbers may be (``_monomials``), or
        None where one cannot be linked."""
        self.sizer = _sizer(traces)
        if self.sizer is None:
            return None
        t0 = traces[0]
        # each followed size of an argument the executable reads, and its dim there: the
        # call's size must be the dim's (another argument's T, or a size kept concrete)
        lays = dict(t0.arg_pos)
        self.arg_dims = tuple(
            (j, (t0.tape.env[j],) if lays[p[0]] is None else lays[p[0]][p[1]])
            for j, p in enumerate(t0.followed) if type(p) is tuple and p[0] in lays)
        by_trace = [_sizes_at(self.sizer, t.tape.args()) for t in traces]
        monos = _monomials(self.sizer, by_trace)
        reads = []
        for r in range(t0.tape.n_args, len(t0.tape.env)):
            fit = _fit([t.tape.env[r] for t in traces], monos)
            if fit is None:
                return None
            reads.append(fit)
        self.reads = tuple(reads)
        self.remade = _remade(own, traces, monos)
        self.cut_forms = _cut_forms(traces, monos)
        self.refolds = _refolds(traces, monos)
        if self.remade is None or self.cut_forms is None or self.refolds is None:
            return None
        # A symbol whose size never changed in the traces of this executable (or of a
        # sibling's with this graph but for its buckets) keeps it: a literal int the
        # planner took for it (``view(B, 4, -1)`` beside ``H // 8`` of 4) would not
        # follow it.
        at = [sz for k, (t, sz) in enumerate(zip(traces, by_trace))
              if k < len(own) or t.shape_key == t0.shape_key]   # (own traces come first)
        self.steady = tuple((sym, at[0][sym]) for sym, how, _ in self.sizer
                            if how != "const" and all(a[sym] == at[0][sym] for a in at))
        return monos

    def predict(self, env):
        """A ``Prediction`` for the executable at followed values ``env``, or None where
        the family cannot vouch for them."""
        traced = env in self.envs
        if not traced and self.n_envs < MIN_ENVS:
            return None
        t0 = self.trace
        by_sym = None
        try:
            if self.sizer is not None:
                by_sym = _sizes_at(self.sizer, env)
                if any(env[j] != dynamic.dsize(dim, by_sym) for j, dim in self.arg_dims) or \
                        not _in_buckets(self.buckets, t0.syms, by_sym):
                    return None   # (another bucket's call: told before any other work)
                reads = []
                for fit in self.reads:
                    v = _fit_value(fit, by_sym)
                    if v is None:
                        return None
                    reads.append(v)
                env = env + tuple(reads)
        except (ArithmeticError, ValueError, KeyError, RecursionError):
            return None
        if not traced and (not guards_hold(self.guards, env)
                           or not guards_hold(self.fixed, env, equal=True)
                           or any(by_sym[sym] != n for sym, n in self.steady)):
            return None
        scalars = list(t0.scalars)
        sizes = list(t0.size_list)
        if by_sym is not None:
            for k, sym in enumerate(t0.syms):
                if sym in by_sym:
                    sizes[k] = by_sym[sym]
        known = {_SIZES: by_sym}
        try:
            for ln in self.links:
                v = ln.value(env, known)
                if v is None:
                    return None
                known[ln.where] = v
                kind, k = ln.where[0], ln.where[1]
                if kind == "scalar":
                    scalars[k] = v
                elif kind == "size":
                    sizes[k] = v
            for e in self.returned:   # (one the Python could not compute is traced)
                evaluate(e, env)
        except (ArithmeticError, ValueError, RecursionError):
            return None
        cut_sizes = {}
        for c, fit, forms in self.cut_forms:   # (cuts of a dim whose size moves)
            n = cut_sizes[c] = _fit_value(fit, by_sym)
            raw = tuple(known.get(("cut", c, f), x) for f, x in enumerate(t0.cuts[c][3]))
            if n is None or not _as_traced(raw, n, forms, by_sym):
                return None
        for c, size, n_fields, of, offset, moving in self.cuts:
            raw = tuple(known.get(("cut", c, f), t0.cuts[c][3][f]) for f in range(n_fields))
            taken = _taken(raw, cut_sizes.get(c, size), moving)
            if taken is None:
                return None
            n = taken[1]
            if any(sizes[k] != n for k in of) if type(of) is tuple else n != of:
                return None
            if offset is not None and sizes[offset] != taken[0]:
                return None
        at = dict(zip(t0.syms, sizes))
        if not _in_buckets(self.buckets, t0.syms, at):
            return None
        consts = ()
        if self.sizer is not None:
            by_sym = at
            consts = self._consts(by_sym) if self.remade else ()
            if consts is None or not traced and not self._folds_hold(by_sym):
                return None
        return Prediction(np.asarray(scalars, np.float64), np.asarray(sizes, np.int64), env,
                          by_sym, consts)

    def _consts(self, by_sym: dict):
        """((position among the trace's constants, its value at sizes ``by_sym``), ...)
        for the constants made for the sizes, or None where a recipe's ints disagree."""
        out = []
        buckets = self.trace.sizes[1] if self.trace.sizes is not None else {}
        for q, maker, skeleton, fits, lay in self.remade:
            ints = tuple(_fit_value(f, by_sym) for f in fits)
            if None in ints:
                return None
            key = (q, ints)
            v = self.made.get(key)
            if v is None:
                if len(self.made) >= 64:
                    self.made.clear()
                args, kwargs = replay_sizes.fill(skeleton, iter(ints))
                node = maker(*args, **dict(kwargs))
                v = self.made[key] = dynamic.settle(node) if lay is None else \
                    dynamic.padded_value(node, lay, by_sym, buckets)
            out.append((q, v))
        return tuple(out)


    def _folds_hold(self, by_sym: dict) -> bool:
        """Whether each value the step computed on the host (``_refolds``) comes out as
        traced at sizes ``by_sym``: its constants made again and its program run."""
        for k, (skeleton, fits, value) in enumerate(self.refolds):
            ints = tuple(_fit_value(f, by_sym) for f in fits)
            if None in ints:
                return False
            ok = self.folded.get((k, ints))
            if ok is None:
                if len(self.folded) >= 256:
                    self.folded.clear()
                ok = self.folded[(k, ints)] = fold.holds(
                    *replay_sizes.fill(skeleton, iter(ints)), value)
            if not ok:
                return False
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class Prediction:
    """What a replay at followed values needs: the executable's Python scalars and
    sizes, the followed numbers and then the sizes the Python read (``env``, what its
    expressions are evaluated at); where sizes are followed, the sizes by symbol and
    the constants made for them ((position among the trace's constants, value), ...)."""
    scalars: np.ndarray
    size_list: np.ndarray
    env: tuple
    sizes: dict | None = None
    consts: tuple = ()


# -- followed sizes: symbols, reads and constants (``compile_step`` at sizes never traced)


def _sizer(traces):
    """How each symbol of the traces' executable gets its size from the call's followed
    values: [(symbol, "env", index) for an argument's dynamic dim, (symbol, "const", n)
    for one that never changed, (symbol, "rule", fn) for a derived one, in the order
    derived]; the others (offsets, a length read from a value, a derived symbol with no
    rule) are left to the links.
    None where it does not give every trace's sizes."""
    t0 = traces[0]
    where = {}   # input symbol -> the argument dim it is
    for i, lay in t0.arg_pos:
        for d, dim in enumerate(lay or ()):
            sym = dynamic.sym_of(dim)
            if sym is not None:
                where.setdefault(sym, (i, d))
    followed = {p: j for j, p in enumerate(t0.followed)}
    rules = dict(t0.rules)
    steps = []
    for k, sym in enumerate(t0.syms):
        if sym in rules or sym[0] == "@":
            continue
        j = followed.get(where.get(sym))
        if j is not None:
            steps.append((sym, "env", j))
        elif not _derived(sym) and all(t.size_list[k] == t0.size_list[k] for t in traces):
            # (not a derived symbol with no rule, a pad's own: ``F.pad(x, (0, (8 - T %
            # 8) % 8))`` at T = 58 and 60 is 64 both times, 40 at T = 39; the links must
            # vouch for it)
            steps.append((sym, "const", t0.size_list[k]))
    steps.extend((sym, "rule", fn) for sym, fn in t0.rules)
    for t in traces:
        try:
            got = _sizes_at(steps, t.tape.args())
        except (ArithmeticError, ValueError, KeyError, RecursionError):
            return None
        if any(got[s] != n for s, n in zip(t.syms, t.size_list) if s in got):
            return None
    return tuple(steps)


def _sizes_at(steps, env) -> dict:
    """{symbol: its size} at followed values ``env`` (``_sizer``'s steps)."""
    out = {}
    for sym, how, x in steps:
        out[sym] = env[x] if how == "env" else x if how == "const" else x(out)
    return out


def _monomials(steps, by_trace) -> tuple:
    """The products of symbols' sizes a size read may be (a dim of one padded value is
    an int times some symbols' sizes): each symbol that is not constant, each product of
    two, and the product of several arguments' dims (a batch's numel); as ((symbols),
    (its value in each trace: ``by_trace``, each trace's sizes by symbol))."""
    moving = [sym for sym, how, _ in steps if how != "const"]
    inputs = [sym for sym, how, _ in steps if how == "env"]
    combos = {(s,) for s in moving}
    combos |= set(itertools.combinations_with_replacement(moving, 2))
    for r in range(3, len(inputs) + 1):
        combos |= set(itertools.combinations(inputs, r))
    out = []
    for syms in sorted(combos):
        vals = tuple(math.prod(sz[s] for s in syms) for sz in by_trace)
        if all(v > 0 for v in vals):
            out.append((syms, vals))
    return tuple(out)


def _fit(vals, monos):
    """How a number with values ``vals`` (one per trace) follows the sizes: (its value
    where it never changed, else ``_VARIES``; each form (a, symbols, b, num) it took in
    every trace, M being the product of those symbols' sizes: a * M + b, or num / (a * M +
    b) (``_affine``)); None where it changed and fits none."""
    const = vals[0] if all(v == vals[0] for v in vals) else _VARIES
    cands = []
    v0 = vals[0]
    for syms, mv in monos:
        if v0 and v0 % mv[0] == 0:
            c = v0 // mv[0]
            if all(c * m == v for m, v in zip(mv, vals)):
                cands.append((c, syms, 0, None))
                continue
        if const is _VARIES:
            cands.extend((a, syms, b, num) for a, b, num in _affine(vals, mv))
    if const is _VARIES and not cands:
        return None
    return const, tuple(cands)


def _affine(vals, mv):
    """Forms of numbers that moved with a product of sizes M (its values ``mv``) other
    than a multiple of it: a * M + b with ints a and b (``T - 1``: an unbiased
    variance's count), and 1 / (a * M + b) or 2 / (a * M + b) (the factor torch's C++
    takes for a mean's or a variance's backward, as it computes it); each as (a, b, num),
    num None for the first."""
    out = []
    for num in (None, 1.0, 2.0):
        if num is None:
            ds = vals if all(type(v) is int or float(v).is_integer() for v in vals) else None
        else:
            ds = [round(num / v) if v else 0 for v in vals]
            if not all(d and num / d == v for d, v in zip(ds, vals)):
                ds = None
        if ds is None:
            continue
        i = next((k for k in range(1, len(mv)) if mv[k] != mv[0]), None)
        if i is None or (ds[i] - ds[0]) % (mv[i] - mv[0]):
            continue
        a = int(ds[i] - ds[0]) // (mv[i] - mv[0])
        b = int(ds[0]) - a * mv[0]
        if a and all(a * m + b == d for m, d in zip(mv, ds)):
            out.append((a, b, num))
    return out


def _fit_value(fit, by_sym):
    """``_fit``'s number at sizes ``by_sym``, or None where its candidates disagree (a
    size constant in every trace that a product of sizes also gave, ``H // 32`` at 33 to
    63, may not stay so)."""
    v, cands = fit
    for a, syms, b, num in cands:
        x = a * math.prod(by_sym[s] for s in syms) + b
        if num is not None:
            if not x:
                return None
            x = num / x
        if v is _VARIES:
            v = x
        elif x != v:
            return None
    return v


def _remade(own, traces, monos):
    """The constants a replay at other sizes makes again: each whose value changed
    between the traces or that runs padded, by its recipe (maker, args and kwargs with
    each int linked as a size read is); None where one has no recipe or its ints fit no
    sizes."""
    t0 = traces[0]
    out = []
    q = -1
    for k, slot in enumerate(t0.slots):
        if slot[0] != "const":
            continue
        q += 1
        lay = t0.layouts[k]
        if lay is None and all(t.slots[k][1] is slot[1] or (
                slot[2] is not None and t.slots[k][2] == slot[2]) for t in own):
            continue   # one value for every size
        recipes = [t.slots[k][2] if t.slots[k][0] == "const" else None for t in traces]
        # (a CPU tensor the step copied, ``("copied", value)``, has no maker: its value
        # cannot be made again for other sizes)
        if recipes[0] is None or not callable(recipes[0][0]) or \
                any(r is None or r[0] is not recipes[0][0] for r in recipes):
            return None
        split = []   # (a recipe's args and kwargs with their ints taken out, those ints)
        for r in recipes:
            ints: list = []
            split.append((replay_sizes.split(r[1:], ints), ints))
        if any(sk != split[0][0] for sk, _ in split):
            return None
        fits = []
        for j in range(len(split[0][1])):
            fit = _fit([ints[j] for _, ints in split], monos)
            if fit is None:
                return None
            fits.append(fit)
        out.append((q, recipes[0][0], split[0][0], tuple(fits), lay))
    return tuple(out)


def _refolds(traces, monos):
    """Each value the step computed on the host (``step._folds``) as a replay at other
    sizes computes it again: (its skeleton, how each of its ints follows the sizes
    (``_fit``), its value); None where one's ints fit no sizes or its value changed
    between the traces (a replay could not tell which it takes)."""
    t0 = traces[0]
    out = []
    for k, (skeleton, ints, value) in enumerate(t0.folds):
        rows = [t.folds[k] for t in traces]
        if any(r[0] != skeleton or r[2] != value for r in rows):
            return None
        fits = []
        for j in range(len(ints)):
            fit = _fit([r[1][j] for r in rows], monos)
            if fit is None:
                return None
            fits.append(fit)
        out.append((skeleton, tuple(fits), value))
    return tuple(out)


def _cut_forms(traces, monos):
    """For each cut of a dim whose size moved between the traces: (its index, how its
    dim's size follows the sizes (``_fit``), how its start and its length did: ("abs", v)
    where they kept value v, ("end", k) where they were the size less k, ("size", fit)
    where they followed the sizes otherwise (a piece of a cat cut back out: ``h[:,
    P:]``, its start P, its length A; the executable reads such a start as the piece's
    true size); a slice's length, None for a select's); None where one followed none of
    these. The executable reads a position one of these ways (``padding._pos_spec``)."""
    out = []
    for c, cut in enumerate(traces[0].cuts):
        sizes = [t.cuts[c][2] for t in traces]
        if all(n == sizes[0] for n in sizes):
            continue   # (its symbols keep their sizes: ``Family.steady``)
        fit = _fit(sizes, monos)
        norm = [_normalized(t.cuts[c][3], t.cuts[c][2]) for t in traces]
        if fit is None or None in norm:
            return None
        forms = []
        for f in range(2):
            vals = [x[f] for x in norm]
            if vals[0] is None:
                forms.append(None)
            elif all(v == vals[0] for v in vals):
                forms.append(("abs", vals[0]))
            elif all(n - v == sizes[0] - vals[0] for n, v in zip(sizes, vals)):
                forms.append(("end", sizes[0] - vals[0]))
            else:   # (a size: a cat's piece cut back out, ``h[:, P:]``, at P, for A)
                at = _fit(vals, monos)
                if at is None:
                    return None
                forms.append(("size", at))
        out.append((c, fit, tuple(forms)))
    return tuple(out)


def _normalized(raw: tuple, size: int):
    """(start, length) of cut bounds ``raw`` in a dim of ``size`` as torch takes them
    (length None for a select), or None for a select out of range."""
    if len(raw) == 1:
        i = raw[0]
        return (i % size, None) if type(i) is int and -size <= i < size else None
    lo, hi, step = dynamic.slice_bounds(raw, size)
    return lo, len(range(lo, hi, step))


def _as_traced(raw: tuple, size: int, forms, by_sym: dict) -> bool:
    """Whether cut bounds ``raw`` in a dim of ``size`` start and run where the traced
    executable takes them (``_cut_forms``) at sizes ``by_sym``."""
    norm = _normalized(raw, size)
    if norm is None:
        return False
    for v, form in zip(norm, forms):
        if form is not None and v != (form[1] if form[0] == "abs" else size - form[1]
                                      if form[0] == "end" else _fit_value(form[1], by_sym)):
            return False
    return True


def _in_buckets(buckets, syms, sizes: dict) -> bool:
    """Whether each symbol of ``sizes`` falls in its traced bucket (``Family.buckets``:
    an input's by the bucket policy, a derived one at most its padded size)."""
    for k, b, derived in buckets:
        n = sizes.get(syms[k])
        if n is not None and (n < 1 or (n > b if derived else dynamic.bucket(n, syms[k]) != b)):
            return False
    return True


def _taken(raw: tuple, size: int, moving=(0, 1)):
    """(start, length) that torch takes for cut bounds ``raw`` in a dim of ``size``
    (length None for a select), where it clips none and wraps none of the fields that
    ``moving`` names (those that moved between the traces: a replay follows them as
    given); a fixed one may count from the end or run past it (``h[:, P - 1:-1]``,
    ``h[:, P:]``'s end of 2**63 - 1); else None. The bounds are ints with ``0 <= start
    <= end <= size`` once so taken, or a select's ``0 <= index < size``."""
    bounds = raw[:1] if len(raw) == 1 else raw[:2]
    if len(bounds) < 2 and len(raw) != 1 or any(type(v) is not int for v in bounds):
        return None
    at = []
    for f, v in enumerate(bounds):
        if f not in moving:
            v = v + size if v < 0 else min(v, size)
        at.append(v)
    if len(raw) == 1:
        return (at[0], None) if 0 <= at[0] < size else None
    start, end = at
    if not 0 <= start <= end <= size:
        return None
    step = raw[2] if len(raw) > 2 and raw[2] is not None else 1
    return start, len(range(start, end, step))


def _derived(sym: str) -> bool:
    return dynamic._DERIVED.search(sym) is not None


def changed_numbers(old, new, may_follow=None) -> list:
    """The places where signature entries ``old`` and ``new`` differ, where at each both
    are (type, value) of a number of one type (the numbers to follow: its position), or
    both a tensor's entry differing only in sizes, along dims ``may_follow(position,
    dims)`` allows (the sizes to follow: (position, dim)); else []."""
    out = []
    for i, (a, b) in enumerate(zip(old, new)):
        if a == b:
            continue
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2 and \
                b[0] in NUMBER and b[0] is a[0]:
            out.append(i)
            continue
        if not (is_tensor_key(a) and is_tensor_key(b) and a[1:] == b[1:]
                and len(a[0]) == len(b[0])):
            return []
        dims = [d for d, (m, n) in enumerate(zip(a[0], b[0]))
                if m != n and m is not None and n is not None]
        if not dims:
            continue   # (only sizes followed already differ: keyed None in one)
        if may_follow is None or not may_follow(i, dims):
            return []
        out.extend((i, d) for d in dims)
    return out


def is_tensor_key(k) -> bool:
    """Whether a signature entry is a tensor's: (shape, dtype, requires_grad, lazy)."""
    return type(k) is tuple and len(k) == 4 and type(k[0]) is tuple and \
        isinstance(k[1], torch.dtype)


def agree(a, b, agree_traces) -> bool:
    """Whether traces ``a`` and ``b`` of a followed signature are one family's:
    ``agree_traces`` (the step's own test, numbers aside) and the same recorded Python,
    cuts, dynamic dims and buckets."""
    return (a.tape.structure() == b.tape.structure() and a.tape.pinned is None
            and a.syms == b.syms and a.bucket_list == b.bucket_list
            and [c[:_cut_key(a)] for c in a.cuts] == [c[:_cut_key(a)] for c in b.cuts]
            and agree_traces(a, b))


def _cut_key(tr) -> int:
    """How much of a cut (index, dim, the dim's size, bounds) two traces of one family
    share: the dim's size too, unless sizes are followed (``_cut_forms`` links it)."""
    return 3 if tr.tape.sized is None else 2


def siblings(a, b) -> bool:
    """Whether traces ``a`` and ``b`` ran the same Python and took the same numbers at the
    same places of their graphs, on executables that may differ (another bucket)."""
    return (a.tape.structure() == b.tape.structure() and a.tape.pinned is None
            and a.syms == b.syms and len(a.scalars) == len(b.scalars)
            and len(a.slots) == len(b.slots) and [c[:2] for c in a.cuts] == [
                c[:2] for c in b.cuts])


def add_trace(entry, tr, agree_traces) -> None:
    """Trace ``tr`` of followed signature ``entry`` joins a family it agrees with (its
    links narrowed), or forms one with a pending trace or with a sibling family's traces
    (``Family.borrowed``), or waits."""
    for fam in entry.families:
        if agree(fam.trace, tr, agree_traces):
            fam.traces.append(tr)
            if len(fam.traces) > 16:
                del fam.traces[1]
            if fam.relink():
                return
            # a number no expression explains in every trace: the family is dropped, the
            # new trace may start another
            entry.families.remove(fam)
            break
    for fam in entry.families:
        if fam.n_envs >= MIN_ENVS and siblings(fam.trace, tr):
            new = Family([tr], borrowed=(fam.traces + fam.borrowed)[:16])
            if new.relink():
                entry.families.insert(0, new)
                del entry.families[MAX_FAMILIES:]
                return
    for p in entry.pending:
        if agree(p, tr, agree_traces):
            fam = Family([p, tr])
            if fam.relink():
                entry.pending.remove(p)
                entry.families.insert(0, fam)
                del entry.families[MAX_FAMILIES:]
                return
    entry.pending.append(tr)
    del entry.pending[:-MAX_PENDING]


@contextlib.contextmanager
def hyper_parameters(reads, traced: dict):
    """Within: an optimizer's followed hyper-parameters (``traced``: number index ->
    ``TracedFloat``/``TracedInt``; ``reads``: per number index, (its group, key, index in
    a tuple or None, the tuple's length), as ``StateStamp.reads``) hold their traced
    values. Yields a list that, after, names each the step set itself (then left as it
    set it, made plain)."""
    set_inside = []
    if not traced:
        yield set_inside
        return
    put = {}   # (group, key) -> (the group, the value put there, the original)
    for j, t in traced.items():
        g, k, i, _ = reads[j]
        _, new, old = put.get((id(g), k), (g, None, g[k]))
        if i is not None:
            new = list(new if new is not None else old)
            new[i] = t
            new = tuple(new)
        else:
            new = t
        put[(id(g), k)] = (g, new, old)
        g[k] = new
    try:
        yield set_inside
    finally:
        for (_, k), (g, new, old) in put.items():
            now = g.get(k)
            if now is new:
                g[k] = old
            else:
                set_inside.append(k)
                if type(now) is tuple:
                    g[k] = tuple(map(plain, now))
                elif now is not None:
                    g[k] = plain(now)
