"""``compile_optimizer``'s replay at hyper-parameter values never traced.

Under a learning-rate schedule ``opt.step()`` sees a new ``lr`` every step. Keyed by
value (``replay.optimizer_state``), every step would be a signature of its own, and
traced. As ``compile_step`` does for a whole step (``step_numbers``), once two calls
differ only in the values of some number hyper-parameters (``lr``; Adam's ``betas``
under ``OneCycleLR``), those are *followed*: keyed by type, and traced with
``traced_numbers.TracedFloat``/``TracedInt`` in the groups, so the optimizer's arithmetic
on them (``-lr``, ``1 - lr * weight_decay``) and its branches (``if weight_decay != 0``)
are written down. Each trace's template joins a ``step_numbers.Family`` of traces with
the same template (the same ops, inputs, writes, random draws and constants); once a
family is traced at three values, a call at a new value replays its template with the
template's Python scalars computed from the recorded arithmetic, every recorded branch
checked first. A call at values traced before replays that trace by value.

Refused, and traced by value as before: a trace whose Python uses a followed number in a
way the record cannot follow (``int(lr)``, a hash), traces that never form a family, and
a step that sets a hyper-parameter itself. A constant the step makes from a followed
number on the host (``torch.tensor(lr)``) differs between traces, so they never form a
family.
"""

from __future__ import annotations

import collections
import copy

import numpy as np

from . import ir, log, step_numbers, traced_numbers
from .metrics import METRICS
from .replay import NotReplayable, Replayer, _aliases_hold, _Entry, optimizer_state
from .traced_numbers import NUMBER, Followed, plain

MAX_FOLLOWED_KEYS = 16   # followed signatures kept (least recently used dropped)


class _Signature:
    """A followed signature's families and the traces waiting for a partner
    (``step_numbers.add_trace`` keeps them), and why it stopped following."""

    __slots__ = ("families", "pending", "traces", "failed")

    def __init__(self):
        self.families: list = []
        self.pending: list = []
        self.traces = 0
        self.failed = None


class _Trace:
    """One followed trace in the terms ``step_numbers.Family`` reads: its numbers
    (``tape``), the template's structure (``exe``: one object per structure) and Python
    scalars, and the entry that replays it. No dynamic dims, cuts or returned ints."""

    __slots__ = ("tape", "exe", "scalars", "slots", "entry")
    syms = size_list = bucket_list = cuts = out_leaves = ()

    def __init__(self, tape, exe, entry):
        self.tape, self.exe, self.entry = tape, exe, entry
        self.scalars = tuple(float(n.value) for n in entry.fwd.nodes if n.op is ir.SCALAR)
        self.slots = entry.fwd_slots


class OptimizerReplayer(Replayer):
    """``compile_optimizer``'s replayer: a ``Replayer`` of ``opt.step`` keyed by the
    optimizer's state, whose number hyper-parameters that change are followed."""

    def __init__(self, opt, step):
        super().__init__(step, self._state, differentiable=False)
        self.opt = opt
        self.followed: frozenset = frozenset()   # positions in the list of numbers
        self.unfollowed: set = set()
        self.signatures: collections.OrderedDict = collections.OrderedDict()
        # template structure -> its first trace (whose ``exe`` is the structure: one
        # object for all traces of it)
        self.structures: dict = {}
        self._places: list = []      # (group index, key, index in a tuple or None)
        self._tracing = False

    def _state(self):
        """(a snapshot whose last part is the number hyper-parameters' (type, value), the
        tensors the step reads and writes)."""
        places = []
        snap, owned = optimizer_state(self.opt, places)
        groups = self.opt.param_groups
        values = []
        for gi, k, j in places:
            v = groups[gi][k] if j is None else groups[gi][k][j]
            if isinstance(v, Followed):
                if not self._tracing:   # (inside a whole step's trace: it follows them)
                    raise NotReplayable(f"the hyper-parameter {k} is followed by a whole "
                                        "step's trace")
                v = plain(v)
            values.append((type(v), v))
        self._places = places
        return (snap, tuple(values)), owned

    def _call(self, key, tensors, family, objects, args, kwargs):
        follow = self._follow(key)
        if follow:
            out = self._replay_followed(key, follow, tensors, objects)
            if out is not _MISS:
                return out
        if key not in self.entries and self._learn(key):
            follow = self._follow(key)
        if follow:
            return self._trace_followed(key, follow, tensors, objects, args, kwargs)
        return super()._call(key, tensors, family, objects, args, kwargs)

    # -- which numbers are followed

    def _follow(self, key) -> tuple:
        values = key[-1][1]
        return tuple(i for i in sorted(self.followed)
                     if i < len(values) and values[i][0] in NUMBER)

    def _learn(self, key) -> bool:
        """Whether new signature ``key`` differs from one seen before only in the values
        of some number hyper-parameters, each of one type in both: from now on those are
        followed."""
        values = key[-1][1]
        found = set()
        for other in self.entries:
            if other[-1][0] != key[-1][0] or other[:-1] != key[:-1]:
                continue
            diff = [i for i, (a, b) in enumerate(zip(other[-1][1], values)) if a != b]
            if diff and all(values[i][0] in NUMBER and values[i][0] is other[-1][1][i][0]
                            for i in diff):
                found.update(diff)
        found -= self.unfollowed
        found -= self.followed
        if not found:
            return False
        self.followed |= found
        log.followed_hyper_parameters([self._places[i][1] for i in sorted(found)])
        return True

    def _unfollow(self, follow) -> None:
        self.unfollowed.update(follow)
        self.followed -= set(follow)

    def _followed_signature(self, key, follow):
        """The followed signature of ``key``: the followed numbers keyed by type."""
        snap, values = key[-1]
        masked = key[:-1] + ((snap, tuple((t, None) if i in follow else (t, v)
                                          for i, (t, v) in enumerate(values))),)
        sig = self.signatures.pop(masked, None) or _Signature()
        self.signatures[masked] = sig   # most recently used last
        while len(self.signatures) > MAX_FOLLOWED_KEYS:
            self.signatures.popitem(last=False)
        return sig

    # -- replaying and tracing at followed numbers

    def _replay_followed(self, key, follow, tensors, objects):
        """A replay at the call's values: the trace at these values (by value), else a
        family's template at scalars it predicts; ``_MISS`` where neither can serve."""
        e = self.entries.get(key)
        if e is not None and e.state == "ready" and _aliases_hold(e, tensors):
            self.entries.move_to_end(key)
            return self._run(e, tensors, objects)
        values = key[-1][1]
        env = tuple(values[i][1] for i in follow)
        for fam in self._followed_signature(key, follow).families:
            numbers = fam.predict(env)
            e = fam.trace.entry
            if numbers is not None and _aliases_hold(e, tensors):
                return self._run(e, tensors, objects, numbers[0])
        return _MISS

    @staticmethod
    def _run(e, tensors, objects, scalars=None):
        METRICS.replays += 1
        _, _, outs = e.run_forward(tensors, scalars)
        return e.results(outs, objects)

    def _trace_followed(self, key, follow, tensors, objects, args, kwargs):
        """Capture the call with its followed numbers traced (``TracedFloat`` in the
        groups); its template, ready by value, joins a family of its signature."""
        sig = self._followed_signature(key, follow)
        if sig.failed is not None:
            return super()._call(key, tensors, None, objects, args, kwargs)
        values = key[-1][1]
        env = tuple(values[i][1] for i in follow)
        e = _Entry()
        self.entries[key] = e
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)
        tape = traced_numbers.Tape(env)
        groups = self.opt.param_groups
        reads = [(groups[gi], k, j, None if j is None else len(groups[gi][k]))
                 for gi, k, j in (self._places[i] for i in follow)]
        traced = {k: traced_numbers.follow(v, k) for k, v in enumerate(env)}
        self._tracing = True
        try:
            with traced_numbers.recording(tape), \
                    step_numbers.hyper_parameters(reads, traced) as set_inside:
                out = self._capture(e, args, kwargs, tensors, objects)
        finally:
            self._tracing = False
        if set_inside:
            e.fail("the optimizer's step sets a hyper-parameter")
        sig.traces += 1
        why = None
        if e.state != "ready":   # (Adam's first step makes its state)
            if sig.traces >= step_numbers.MAX_TRACES and not sig.families:
                why = "its captures at other hyper-parameter values failed"
        elif tape.pinned is not None:
            why = f"a hyper-parameter is used in a way a replay cannot follow ({tape.pinned})"
        elif sig.traces >= step_numbers.MAX_TRACES and not sig.families:
            why = "traces at other hyper-parameter values never agreed"
        if why is not None:
            sig.failed = why
            self._unfollow(follow)
            METRICS.replay_miss(why)
            return out
        if e.state != "ready":
            return out
        skey = _structure(e)
        known = self.structures.pop(skey, None)
        tr = _Trace(tape, skey if known is None else known.exe, e)
        if known is not None and _same_constants(known, tr):
            # one template serves both: a replay of these values (by value or by a
            # family) runs the first one's at their scalars, on its executable
            tr.entry = copy.copy(known.entry)
            tr.entry.scalars = np.asarray(tr.scalars, np.float64)
            self.entries[key] = tr.entry
        self.structures[skey] = known or tr   # most recently used last
        while len(self.structures) > MAX_FOLLOWED_KEYS:
            self.structures.pop(next(iter(self.structures)))
        step_numbers.add_trace(sig, tr, _same_constants)
        return out


_MISS = object()


def _structure(e) -> tuple:
    """What two captures must share to be one template but for their Python scalars: the
    body's ops, wiring and leaves, the slots (constants by layout: ``_same_constants``
    compares their values), random draws, writes and results."""
    t = e.fwd
    slots = tuple((s[0], s[1].sig) if s[0] == "const" else s for s in e.fwd_slots)
    return (tuple(n.sig for n in t.nodes), t.wiring, t.outputs, slots, e.fwd_rng,
            e.mutations, e.out_consts, e.n_out, e.aliases)


def _same_constants(a: _Trace, b: _Trace) -> bool:
    """Whether two traces of one structure read equal constants (a constant made from a
    followed number differs: then no family)."""
    if a.exe is not b.exe:
        return False
    for s, o in zip(a.slots, b.slots):
        if s[0] == "const" and s[1] is not o[1]:
            try:
                if not np.array_equal(np.asarray(s[1].value), np.asarray(o[1].value),
                                      equal_nan=True):
                    return False
            except (TypeError, ValueError):
                return False
    return True
