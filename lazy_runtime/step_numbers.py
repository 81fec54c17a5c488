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
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from . import dynamic
from .traced_numbers import NUMBER, evaluate, guards_hold, plain

MIN_ENVS = 3        # values a family is traced at before it vouches for others
MAX_FAMILIES = 8    # confirmed families kept per signature (a branch or a bucket each)
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
    start's ``where``, the traced length)."""

    __slots__ = ("where", "exprs", "const", "rel")

    def __init__(self, where, exprs, const, rel=None):
        self.where, self.exprs, self.const, self.rel = where, exprs, const, rel

    def value(self, env, known):
        """Its value at ``env`` (``known``: the numbers linked before it), or None where
        its candidates disagree."""
        if self.rel is not None:
            return known[self.rel[0]] + self.rel[1]
        v = self.const
        for e in self.exprs:
            x = evaluate(e, env)
            if v is _VARIES:
                v = x
            elif x != v:
                return None
        return v


class Family:
    """Traces of one followed signature that agree but for the followed ints, and what
    a replay at other values needs (``predict``). ``borrowed``: a sibling family's traces
    (the same Python, another executable: the bucket before a growing read's) whose
    numbers the links must explain too; they count toward ``MIN_ENVS``, so a new bucket
    needs one trace of its own, not three."""

    __slots__ = ("traces", "trace", "guards", "links", "cuts", "buckets", "envs", "fixed",
                 "returned", "borrowed", "n_envs")

    def __init__(self, traces, borrowed=()):
        self.traces = list(traces)
        self.trace = self.traces[0]
        self.borrowed = list(borrowed)

    def relink(self) -> bool:
        """Link every number over the family's traces; False where one cannot be."""
        own = self.traces
        traces = own + self.borrowed
        self.envs = frozenset(t.tape.env for t in own)   # (traced with this executable)
        self.n_envs = len(self.envs | {t.tape.env for t in self.borrowed})
        t0 = traces[0]
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

        def link(where, seen, rel=None) -> bool:
            exprs = tuple(e for j, e in enumerate(t0.tape.exprs)
                          if e in handed and all(type(v) in NUMBER and vals[j] == v
                                                 for vals, v in zip(values, seen)))
            const = seen[0] if all(v == seen[0] for v in seen) else _VARIES
            if exprs:
                links.append(_Link(where, exprs, const))
            elif const is _VARIES:
                if rel is None:
                    return False
                links.append(_Link(where, (), const, rel))
            return True

        for k in range(len(t0.scalars)):
            seen = [t.scalars[k] for t in traces]
            if not link(("scalar", k), seen):
                return False
        for k in range(len(t0.syms)):
            if not link(("size", k), [t.size_list[k] for t in traces]):
                return False
        cuts = []
        for c, (i, d, size, raw) in enumerate(t0.cuts):
            raws = [t.cuts[c][3] for t in traces]
            if all(r == raw for r in raws):
                continue
            if any(not _plain(r, size) for r in raws):
                return False   # clipped or wrapped when traced: not followed
            lengths = [_length(r) for r in raws]
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
            cuts.append((c, size, len(raw), of, offset))
        self.links = links
        self.cuts = cuts
        self.returned = tuple(v.expr for v in t0.out_leaves if type(v) is Returned)
        self.buckets = [(k, t0.bucket_list[k], _derived(s)) for k, s in enumerate(t0.syms)
                        if s[0] != "@"]
        return True

    def predict(self, env):
        """(scalars, sizes) for the executable at followed values ``env``, or None where
        the family cannot vouch for them."""
        if env not in self.envs and (self.n_envs < MIN_ENVS
                                     or not guards_hold(self.guards, env)
                                     or not guards_hold(self.fixed, env, equal=True)):
            return None
        t0 = self.trace
        scalars = list(t0.scalars)
        sizes = list(t0.size_list)
        known = {}
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
        for c, size, n_fields, of, offset in self.cuts:
            raw = tuple(known.get(("cut", c, f), t0.cuts[c][3][f]) for f in range(n_fields))
            if not _plain(raw, size):
                return None
            n = _length(raw)
            if any(sizes[k] != n for k in of) if type(of) is tuple else n != of:
                return None
            if offset is not None and sizes[offset] != raw[0]:
                return None
        for k, b, derived in self.buckets:
            n = sizes[k]
            if n < 1 or (n > b if derived else dynamic.bucket(n, t0.syms[k]) != b):
                return None
        return np.asarray(scalars, np.float64), np.asarray(sizes, np.int64)


def _plain(raw: tuple, size: int) -> bool:
    """Whether cut bounds ``raw`` are taken as given (torch neither wraps nor clips
    them): ints with ``0 <= start <= end <= size``, or a select's ``0 <= index <
    size``."""
    if len(raw) == 1:
        return type(raw[0]) is int and 0 <= raw[0] < size
    start, end = raw[0], raw[1] if len(raw) > 1 else None
    return type(start) is int and type(end) is int and 0 <= start <= end <= size


def _length(raw: tuple):
    if len(raw) == 1:
        return None
    step = raw[2] if len(raw) > 2 and raw[2] is not None else 1
    return len(range(raw[0], raw[1], step))


def _derived(sym: str) -> bool:
    return dynamic._DERIVED.search(sym) is not None


def changed_numbers(old, new) -> list:
    """The positions where signature entries ``old`` and ``new`` differ, where at each
    both are (type, value) of a number of one type (the numbers to follow); else []."""
    diff = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    if diff and all(new[i][0] in NUMBER and new[i][0] is old[i][0] for i in diff):
        return diff
    return []


def agree(a, b, agree_traces) -> bool:
    """Whether traces ``a`` and ``b`` of a followed signature are one family's:
    ``agree_traces`` (the step's own test, numbers aside) and the same recorded Python,
    cuts, dynamic dims and buckets."""
    return (a.tape.structure() == b.tape.structure() and a.tape.pinned is None
            and a.syms == b.syms and a.bucket_list == b.bucket_list
            and [c[:3] for c in a.cuts] == [c[:3] for c in b.cuts]
            and agree_traces(a, b))


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
