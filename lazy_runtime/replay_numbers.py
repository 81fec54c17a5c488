"""Replay at numbers never traced: ``compile_optimizer`` under a schedule, and a replayed
forward given a number that changes (``lr.compile(model, replay=True)``).

Under a learning-rate schedule ``opt.step()`` sees a new ``lr`` every step; a sampler
calls ``model(x, sigma)`` with a new ``sigma`` every step. Keyed by value, every call
would be a signature of its own, and traced. As ``compile_step`` does for a whole step
(``step_numbers``), once two calls differ only in the values of some numbers (an
optimizer's number hyper-parameters: ``lr``, Adam's ``betas`` under ``OneCycleLR``; a
forward's int and float arguments), those are *followed*: keyed by type, and traced as
``traced_numbers.TracedFloat``/``TracedInt``, so the Python's arithmetic on them (``-lr``,
``1 - lr * weight_decay``, ``t * freqs``) and its branches (``if weight_decay != 0``) are
written down. Each trace's template joins a ``step_numbers.Family`` of traces with the
same template (the same ops, inputs, writes, random draws and constants); once a family
is traced at three values, a call at a new value replays its template with the
template's Python scalars computed from the recorded arithmetic, every recorded branch
checked first. A call at values traced before replays that trace by value, on the
template of the first trace of its structure (one executable for all).

Refused, and keyed by value again: a trace whose Python uses a followed number in a way
the record cannot follow (``int(lr)``, a hash, ``range(t)``), traces that never form a
family, and an optimizer step that sets a hyper-parameter itself. A constant made from a
followed number on the host (``torch.tensor(lr)``) differs between traces, and a number
that sets a shape or a cut changes the template's ops, so those never form a family. A
forward's numbers are followed only where it is replayed without autograd (inference):
the backward's numbers come from torch's C++ formulas, which the record does not see.
"""

from __future__ import annotations

import collections
import contextlib
import copy

import numpy as np
import torch
import torch.utils._pytree as pytree

from . import ir, log, step_numbers, traced_numbers
from .metrics import METRICS
from .replay import (NumberEntry, Replayer, _aliases_hold, _Entry, foreign_hold,
                     note_replay)
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


class NumberFollowingReplayer(Replayer):
    """A ``Replayer`` whose numbers that change are followed. Subclasses say where a
    call's numbers are in its signature and how a trace takes traced ones:
    ``_numbers``, ``_masked``, ``_traced_numbers``, ``_may_follow``, ``_names``."""

    SETS_ITSELF = "the call sets a number it was given"   # (why, where it does)

    def __init__(self, forward, state, differentiable: bool = True, **kw):
        super().__init__(forward, state, differentiable, **kw)
        self.followed: frozenset = frozenset()   # positions in the list of numbers
        self.unfollowed: set = set()
        self.signatures: collections.OrderedDict = collections.OrderedDict()
        # template structure -> its first trace (whose ``exe`` is the structure: one
        # object for all traces of it)
        self.structures: dict = {}

    # -- what subclasses say

    def _numbers(self, key) -> tuple:
        """(type, value) of each number of the call of signature ``key``, in order."""
        raise NotImplementedError

    def _masked(self, key, positions) -> tuple:
        """``key`` with the numbers at ``positions`` keyed by type only."""
        raise NotImplementedError

    def _traced_numbers(self, follow, traced: dict, args, kwargs):
        """A context manager: within, the numbers at ``follow`` are ``traced`` (k -> the
        k-th followed number, traced); it yields (args, kwargs, a list that after names
        what the call set itself)."""
        raise NotImplementedError

    def _may_follow(self, key, tensors) -> bool:
        return True

    def _names(self, positions) -> list:
        return [str(i) for i in positions]

    def _call(self, key, tensors, family, objects, args, kwargs):
        new = key not in self.entries
        if (self.followed or new) and self._may_follow(key, tensors):
            values = self._numbers(key)
            follow = self._follow(values)
            if follow:
                out = self._replay_followed(key, follow, values, tensors, objects)
                if out is not _MISS:
                    return out
            if new and self._learn(key, values):
                follow = self._follow(values)
            if follow:
                return self._trace_followed(key, follow, values, tensors, objects, args,
                                            kwargs)
        return super()._call(key, tensors, family, objects, args, kwargs)

    # -- which numbers are followed

    def _follow(self, values) -> tuple:
        """The positions among the call's numbers ``values`` that are followed."""
        return tuple(i for i in sorted(self.followed)
                     if i < len(values) and values[i][0] in NUMBER)

    def _learn(self, key, values) -> bool:
        """Whether new signature ``key`` (its numbers: ``values``) differs from one seen
        before only in the values of some numbers, each of one type in both: from now on
        those are followed."""
        every = range(len(values))
        masked = self._masked(key, every)
        found = set()
        for other in self.entries:
            theirs = self._numbers(other)
            if len(theirs) == len(values) and self._masked(other, every) == masked:
                found.update(step_numbers.changed_numbers(theirs, values))
        found -= self.unfollowed
        found -= self.followed
        if not found:
            return False
        self.followed |= found
        log.followed_numbers(type(self).__name__, self._names(sorted(found)))
        return True

    def _unfollow(self, follow) -> None:
        self.unfollowed.update(follow)
        self.followed -= set(follow)

    def _followed_signature(self, key, follow):
        """The followed signature of ``key``: the followed numbers keyed by type."""
        masked = self._masked(key, follow)
        sig = self.signatures.pop(masked, None) or _Signature()
        self.signatures[masked] = sig   # most recently used last
        while len(self.signatures) > MAX_FOLLOWED_KEYS:
            self.signatures.popitem(last=False)
        return sig

    # -- replaying and tracing at followed numbers

    def _replay_followed(self, key, follow, values, tensors, objects):
        """A replay at the call's values: the trace at these values (by value), else a
        family's template at scalars it predicts; ``_MISS`` where neither can serve."""
        e = self.entries.get(key)
        if e is not None and e.state == "ready" and foreign_hold(e.foreign) and \
                _aliases_hold(e, tensors):
            self.entries.move_to_end(key)
            return self._run(e, tensors, objects)
        env = tuple(values[i][1] for i in follow)
        for fam in self._followed_signature(key, follow).families:
            numbers = fam.predict(env)
            e = fam.trace.entry
            if numbers is not None and _aliases_hold(e, tensors):
                return self._run(e, tensors, objects, numbers.scalars)
        return _MISS

    @staticmethod
    def _run(e, tensors, objects, scalars=None):
        note_replay(tensors)
        METRICS.replays += 1
        _, _, outs = e.run_forward(tensors, scalars)
        return e.results(outs, objects)

    def _trace_followed(self, key, follow, values, tensors, objects, args, kwargs):
        """Capture the call with its followed numbers traced; its template, ready by
        value, joins a family of its signature."""
        sig = self._followed_signature(key, follow)
        if sig.failed is not None:
            return super()._call(key, tensors, None, objects, args, kwargs)
        env = tuple(values[i][1] for i in follow)
        e = _Entry()
        self.entries[key] = e
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)
        outer = traced_numbers.recording_tape()
        if outer is not None and outer.sized is not None:
            # (a whole step traced at followed sizes: the sizes this call's Python reads go
            # on this call's tape, not the step's, which cannot vouch for other sizes)
            outer.pinned = outer.pinned or "a replayed call that follows numbers"
        tape = traced_numbers.Tape(env)
        traced = {k: traced_numbers.follow(v, k) for k, v in enumerate(env)}
        with traced_numbers.recording(tape), \
                self._traced_numbers(follow, traced, args, kwargs) as (args, kwargs, set_inside):
            out = self._capture(e, args, kwargs, tensors, objects)
        if any(isinstance(v, Followed) for v in pytree.tree_leaves(out)):
            # a number computed from followed ones, returned: the caller gets it plain,
            # and the numbers are keyed by value again (a replay would not compute it)
            tape.pinned = tape.pinned or "returns a number computed from them"
            out = pytree.tree_map_only(Followed, plain, out)
        if set_inside:
            e.fail(self.SETS_ITSELF)
        sig.traces += 1
        why = None
        if tape.pinned is not None:
            why = f"a number is used in a way a replay cannot follow ({tape.pinned})"
        elif e.foreign:   # (``tables[k]``: other values may pick another tensor)
            why = "it reads a tensor from before the call"
        elif e.state != "ready":   # (Adam's first step makes its state)
            if sig.traces >= step_numbers.MAX_TRACES and not sig.families:
                why = "its captures at other values of its numbers failed"
        elif sig.traces >= step_numbers.MAX_TRACES and not sig.families:
            why = "traces at other values of its numbers never agreed"
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


class ForwardReplayer(NumberFollowingReplayer):
    """``lr.compile``'s replayer of a module's forward: its int and float arguments that
    change are followed where it replays without autograd."""

    def _numbers(self, key) -> tuple:
        return tuple(k for k in key if type(k) is NumberEntry)

    def _masked(self, key, positions) -> tuple:
        out = []
        j = 0
        for k in key:
            if type(k) is NumberEntry:
                k = NumberEntry((k[0], None)) if j in positions else k
                j += 1
            out.append(k)
        return tuple(out)

    @contextlib.contextmanager
    def _traced_numbers(self, follow, traced, args, kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        at = [i for i, v in enumerate(flat) if type(v) in NUMBER]
        for k, i in enumerate(follow):
            flat[at[i]] = traced[k]
        args, kwargs = pytree.tree_unflatten(flat, spec)
        yield args, kwargs, []

    def _may_follow(self, key, tensors) -> bool:
        # (a capture with autograd cuts a backward too, whose numbers torch's C++ makes)
        return not (self.differentiable and torch.is_grad_enabled()
                    and any(t.requires_grad for t in tensors))

    def _names(self, positions) -> list:
        return [f"number argument {i}" for i in positions]
