"""Whole-step replay: ``lr.compile_step(fn, model, optimizer)``.

A training step on the lazy device runs the same Python every time: forward, loss,
``backward()``, ``opt.step()``, ``opt.zero_grad()``. Each call records a few hundred ops
(20-30 µs each) only to rebuild a graph that is already compiled. ``compile_step``
replays the whole step instead, as a CUDA graph does: the executable of the step's one
barrier runs on the current values of the arguments, the parameters, buffers and
optimizer state, and the results are written back. No Python of the step runs.

What makes that sound is checked, not assumed:

* **Two traces first.** A signature (argument shapes and dtypes, grad mode, the model's
  and optimizer's state snapshot from ``replay.module_state``/``optimizer_state``) is
  traced twice; both must give the same graph, the same Python numbers, the same random
  draws relative to the stream, and leave the model and optimizer as they found them
  (Adam's first step creates its state: traced again).
* **One barrier.** The step must not read a value or fall back to eager torch in the
  middle (either would be a second barrier); its only barrier is at its end (``fn`` may
  call ``mark_step`` last, or ``compile_step`` does). No value may be read at all, even
  one whose read is the step's only barrier (a read at the end, or one that leaves
  nothing pending after it): Python may use it. A value computed on the host (``fold``)
  from constants made on the host and Python numbers alone (``nn.Transformer``'s
  causal-mask check) is kept with the trace (``_folds``): the same for a signature, and
  computed again by a replay at sizes never traced (``step_numbers._refolds``). One that
  also reads the step's CPU arguments (a padding mask's ``mask.all()``) is computed again
  from each call's, and its value extends the signature (``_with_arg_folds``). Nor
  may it draw from a generator on the host (Python's ``random``, numpy's, torch's CPU
  one: an augmentation's coin).
* **Every input accounted for.** Each tensor the graph reads is an argument, a tensor
  the model or optimizer owns, or a constant: one made by a device factory with the same
  arguments in both traces (``arange(T)``, ``zeros``), or a constant of a replayed
  forward, or a small CPU tensor the step made itself from Python values and dropped by
  its end (``torch.tensor(finfo.min, device=dev)``, the index tensor torch makes of
  ``ids[:, [-1, 0]]``): a constant by its value, as Python numbers are, the traces
  agreeing on it (``fold.copied_value``); or a lazy tensor from before the step (an
  lru-cached table, made by a device factory or computed by an earlier call), read as
  traced while the one storage that held its value holds it still (``_Trace.foreign``:
  a weak reference to the storage ``tensor.own`` noted, and the leaf; an in-place write
  or the storage's end ends it), and refused where the step runs padded or follows an
  int argument, whose other values may pick another tensor.
  Copying a CPU tensor held elsewhere (still alive when the step ends) inside the step
  refuses (its value could change behind the replay's back).
* **Every result accounted for.** Each value the barrier stores goes back into a tensor
  the model or optimizer owns (a parameter, buffer, grad or state tensor), into a lazy
  argument the step wrote in place (a replay writes the argument it is given, and
  returns it where the step returned it), or is returned, or is a parameter's new grad
  (``zero_grad()`` before ``backward()``: a replay sets ``p.grad`` again); a value the
  step keeps anywhere else (a module attribute, a global list) refuses. A grad kept
  from an earlier call, a view of autograd's result, is made a base where nothing can
  tell (``tensor.rebase_whole_view``).
* **Dynamic dims.** A step whose graph runs padded (``mark_dynamic``, an analyzer plan) is
  replayed with its arguments padded on the host and its true sizes passed as the
  executable takes them. A signature's first trace is confirmed without a second one
  when it does what a trace of another size does on the same padded executable (the same
  numbers, inputs, writes and random draws; its constants made for its own size by a host
  factory or a replayed forward): a length seen once is replayed from its second call.
  Once two signatures differ only in the sizes of dims that ran padded, those sizes are
  *followed* as numbers are (below, and ``step_numbers``): the signature keys them by
  None, every size the step's Python reads of a lazy tensor (``x.shape``, ``x.size(1)``,
  ``numel()``) is a followed number whose arithmetic and branches are recorded, and a
  family traced at three sizes of a bucket replays the others never traced: the
  executable's sizes computed from the call's (a derived symbol by the rule that made
  it), each size read and each number the executable takes linked to the sizes (a
  product of them times an int that it equalled in every trace; all candidates must
  agree), host constants (``arange(T)``) made again for the call, each branch checked,
  and a symbol whose size never changed in the traces kept at it. A replayed forward
  inside the step runs no Python: it puts its plan's conditions on the step's record, or,
  replayed by exact signature, ties the trace to its sizes. Values the step keeps must
  not have a dynamic dim; one it returns comes back padded at the call's true sizes.
* **Argument objects** (a key-value cache: transformers' ``StaticCache``, passed as
  ``step(tok, cache)``): looked into as a replayed forward does (``replay.object_state``):
  their structure is one entry of the signature, their tensors are state of the call,
  read and written back in place as buffers are. A step that gives one of their
  attributes another tensor or changes a plain one is refused, and so is an object
  holding a tensor the model or optimizer holds, or one tensor in two places.
* **Numbers that change** (a decoding position, ``step(tok, pos)``; a learning rate a
  scheduler sets, or Adam's ``betas`` under ``OneCycleLR``): the optimizer's number
  hyper-parameters are part of the signature as arguments are (read each call, not
  snapshotted); once two signatures differ only in such numbers' values, those are
  *followed* (``step_numbers``): keyed by type, traced as a ``TracedInt``/``TracedFloat`` that
  records the Python's arithmetic and branches on them, and replayed at values never
  traced once three traced values agree, each number the executable takes computed from
  the recorded arithmetic and every recorded branch checked. A signature confirmed by
  value before its numbers were followed still replays at that value. A step that sets a
  hyper-parameter itself (a scheduler stepped inside it) is refused.

The state guard (``StateStamp``: one version tag per dict the snapshot reads, but the
optimizer's groups, whose entries other than numbers are compared; the modules' tensors'
buffers and ``requires_grad``, the parameters' grads) costs a few µs, and a call
with the previous replay's signature launches the executable first and checks the guard
while it runs; a guard that fails drops the results (nothing is written, no random
number drawn). A state leaf nothing else holds takes its new value in place, and CPU
arguments are copied into host buffers reused once JAX lets go of them.

CPU tensor arguments are copied to the lazy device before every call, so ``fn`` sees
lazy tensors whether it is traced, replayed or refused. A refused step runs as ordinary
traced code, and why is counted in
``metrics()["replay_misses"]``. Replayed steps count in ``step_replays``. A returned
tensor is a plain result (no ``grad_fn``): the step must do its own ``backward``. So is a
traced call's where its autograd graph would keep a value the step computed (an input it
made require grad, for a gradient penalty), which would refuse the replay.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import operator
import sys
import time
import weakref

import jax
import numpy as np
import torch
import torch.utils._pytree as pytree

from . import (dtypes, dynamic, executor, fold, heap, ir, log, random, replay_sizes,
               step_numbers, tensor, traced_numbers)
from .config import config
from .metrics import METRICS
from .replay import (AttributeReads, NotReplayable, call_mode, check_host_rngs, foreign_hold,
                     host_rng_states, module_state, objects_now, optimizer_state,
                     outside_ref)
from .state_stamp import StateStamp
from .tensor import LazyTensor
from .traced_numbers import NUMBER

getrefcount = sys.getrefcount
getweakrefcount = weakref.getweakrefcount


class NotWholeStep(Exception):
    """Why a step cannot be replayed whole (counted; the step is traced). ``permanent``:
    no later call of the signature can do better (a second barrier, a foreign tensor)."""

    def __init__(self, reason: str, permanent: bool = True):
        super().__init__(reason)
        self.permanent = permanent


class _Trace:
    """What one traced call did, in the terms a replay needs."""

    __slots__ = ("exe", "slots", "scalars", "rng_offsets", "rng_count", "writes",
                 "out_spec", "out_leaves", "consts", "state_pos", "state_sigs", "arg_pos",
                 "perm", "aliases", "scalars_on_device", "no_rngs", "layouts", "sizes",
                 "sizes_on_device", "state_writes", "shared_writes", "host_buffers",
                 "state_aliases", "other_aliases", "state_refs", "tape", "cuts", "syms",
                 "size_list", "bucket_list", "out_same", "arg_writes", "arg_bases",
                 "grad_sets", "rules", "followed", "shape_key", "folds", "arg_folds",
                 "foreign")


class _Entry:
    __slots__ = ("last", "ready", "failed", "traces", "followed", "families", "pending")

    def __init__(self, followed=()):
        self.last = None      # the previous trace, to be confirmed by the next
        self.ready = None     # a confirmed trace
        self.failed = None    # why this signature is never replayed
        self.traces = 0
        # the flat positions of the numbers it follows (``step_numbers``), its
        # families and the traces that wait for a partner
        self.followed = followed
        self.families: list = []
        self.pending: list = []


_TENSORS_SPEC: dict = {}
# a signature's entries before the arguments': the spec and ``replay.call_mode()``'s three
_HEAD = 4


def _cpu_arg(t):
    """A CPU tensor argument's part of the signature (as the general path spells it)."""
    return tuple(t.shape), t.dtype, t.requires_grad, False


_NODE = operator.attrgetter("_st.node")
_VIEW = operator.attrgetter("_vw")
_SIG = operator.attrgetter("sig")
_VALUE = operator.attrgetter("value")


class StepReplayer:
    """The callable ``compile_step`` returns."""

    MAX_TRACES = 4   # traces of one signature that never agree: stop trying
    MAX_ENTRIES = 256   # signatures kept (least recently used dropped): one per length

    def __init__(self, fn, model=None, optimizers=()):
        self.fn = fn
        self.model = model
        self.optimizers = tuple(optimizers)
        self.entries: dict = {}
        self._stamp = None
        self._last = None     # (signature, stamp, entry) of the last replay
        # flat positions of the numbers followed, and (position, dim) of the sizes
        self.followed = frozenset()
        self.unfollowed: set = set()  # ... and of those that could not be
        # a signature's values computed on the host from its CPU arguments (the last
        # trace's ``arg_folds``, values aside): their values on a call extend its signature
        self.arg_folds: dict = {}

    def _state(self):
        """(the snapshot, the owned tensors), recomputed only when something it reads is
        no longer the same object (``StateStamp``). A grad kept from an earlier call as a
        view of its whole storage is made a base tensor first."""
        stamp = self._stamp
        if stamp is not None and stamp.holds():
            return stamp.snap, stamp.owned
        reads = AttributeReads()
        snap, owned, places = self._full_state(reads)
        self._stamp = StateStamp(snap, owned, self.model, self.optimizers, places,
                                 reads=reads)
        return snap, owned

    def _full_state(self, reads, after_trace: bool = False):
        """(a snapshot of the model's and optimizer's Python state, the tensors they own,
        the places of the optimizer's number hyper-parameters: read each call). ``reads``
        gets what of the modules' attributes can change in place. A view among the owned
        tensors is made a base where nothing can tell (``tensor.rebase_whole_view``), else
        refused; ``after_trace``: the snapshot only, views left as the step made them (a
        grad it made is accounted for as such)."""
        snap, owned, places = [], [], []
        seen = set()
        parts = []
        if self.model is not None:
            parts.append(module_state(self.model, reads))
        for oi, opt in enumerate(self.optimizers):
            numbers = []
            parts.append(optimizer_state(opt, numbers))
            places.extend((oi, *p) for p in numbers)
        for part_snap, part_owned in parts:
            snap.append(part_snap)
            for t in part_owned:
                if id(t) not in seen:
                    seen.add(id(t))
                    owned.append(t)
        for t in owned:
            if not isinstance(t, LazyTensor) or t._vw and not (
                    after_trace or tensor.rebase_whole_view(t)):
                raise NotWholeStep("a parameter or state tensor is not a lazy base tensor")
        return tuple(snap), owned, tuple(places)

    def _signature(self, args, kwargs, followed=None):
        """(the call's signature, its flat arguments, their spec): ``followed`` numbers
        (flat positions; the replayer's by default) keyed by type, other numbers by value,
        followed sizes ((position, dim)) by None."""
        followed = self.followed if followed is None else followed
        sized = any(type(p) is tuple for p in followed) if followed else False
        if not kwargs and not sized and all(type(a) is torch.Tensor for a in args):
            # the common call, CPU tensors only: its structure is known by their number
            spec = _TENSORS_SPEC.get(len(args))
            if spec is None:
                spec = _TENSORS_SPEC[len(args)] = pytree.tree_flatten((args, {}))[1]
            return (spec, *call_mode(), *map(_cpu_arg, args)), \
                list(args), spec, _NO_OBJECTS
        flat, spec = pytree.tree_flatten((args, kwargs))
        key = [spec, *call_mode()]
        objects = _NO_OBJECTS
        for i, v in enumerate(flat):
            if isinstance(v, torch.Tensor):
                shape = tuple(v.shape)
                if sized:
                    shape = tuple(None if (i, d) in followed else n
                                  for d, n in enumerate(shape))
                key.append((shape, v.dtype, v.requires_grad, isinstance(v, LazyTensor)))
            elif i in followed and type(v) in NUMBER:
                key.append(_FOLLOWED[type(v)])
            elif type(v) in (int, float, bool, str, type(None)):
                key.append((type(v), v))
            else:
                # a key-value cache: its structure one entry of the key (entries stand
                # for flat positions), its tensors state of this call
                if objects is _NO_OBJECTS:
                    objects = ([], [])
                try:
                    structure, tensors = objects_now([v], keep=True)
                except NotReplayable as err:
                    raise NotWholeStep(str(err)) from None
                key.append(("object", structure))
                objects[0].append(v)
                objects[1].extend(tensors)
        return tuple(key), flat, spec, objects

    def _with_numbers(self, key, flat, numbers, followed=None):
        """The signature and flat arguments extended by the optimizer's number
        hyper-parameters (``StateStamp.numbers``): keyed by value, or by type where
        followed, as an argument is."""
        if not numbers:
            return key, flat
        n = len(flat)
        followed = self.followed if followed is None else followed
        return key + tuple(_FOLLOWED[type(v)] if n + j in followed else (type(v), v)
                           for j, v in enumerate(numbers)), flat + list(numbers)

    def _with_arg_folds(self, base, flat, key):
        """Signature ``key`` extended at its end by the values the traces of signature
        ``base`` computed on the host from the CPU arguments (a padding mask's
        ``mask.all()``), computed from this call's: each combination its own entry,
        confirmed and replayed apart."""
        folds = self.arg_folds.get(base)
        if not folds:
            return key
        return key + (("host values", tuple(_arg_fold_value(prog, sources, flat)
                                            for prog, sources in folds)),)

    def __call__(self, *args, **kwargs):
        try:
            key, flat, spec, objects = self._signature(args, kwargs)
        except NotWholeStep as e:   # foreign arguments
            METRICS.replay_miss(f"whole step: {e}")
            return self._plain(args, kwargs)
        base = key
        n_args = len(flat)
        last = self._last
        if last is not None and last[1] is self._stamp:
            numbers = last[1].numbers()
            if numbers is not None:
                k, f = self._with_numbers(key, flat, numbers)
                if self.arg_folds:
                    k = self._with_arg_folds(base, f, k)
                if last[0] == k:
                    # The signature and state of the previous replay: launch the
                    # executable first, and check the state guard while it runs (the
                    # guard then costs no time on the step's critical path); a failed
                    # guard discards the results.
                    owned = last[1].owned
                    try:
                        if objects[1]:
                            owned = _with_object_tensors(last[1], objects[1])
                        out = self._replay_entry(last[2], f, owned, last[1])
                    except NotWholeStep:
                        out = None   # (said by the full path below)
                    if out is not None:
                        return out
        try:
            snap, owned = self._state()
            if objects[1]:   # (an argument object's tensors: state of this call)
                owned = _with_object_tensors(self._stamp, objects[1])
        except (NotReplayable, NotWholeStep) as e:   # hooks, non-lazy state
            METRICS.replay_miss(f"whole step: {e}")
            return self._plain(args, kwargs)
        stamp = self._stamp
        key, flat = self._with_numbers(key, flat, stamp.numbers())
        if self.arg_folds:
            key = self._with_arg_folds(base, flat, key)
        full = key + (snap,)
        e = self.entries.pop(full, None)
        if e is None and self._learn_followed(full):
            base = self._signature(args, kwargs)[0]
            key = self._with_arg_folds(base, flat, self._with_numbers(
                base, flat[:n_args], flat[n_args:])[0])
            full = key + (snap,)
            e = self.entries.pop(full, None)
        if e is None:
            e = _Entry(_followed_of(key[_HEAD:]))
            while len(self.entries) >= self.MAX_ENTRIES:
                self.entries.pop(next(iter(self.entries)))
        self.entries[full] = e   # most recently used last
        if e.failed is not None:
            return self._plain(args, kwargs)
        if e.ready is not None or e.families:
            out = self._replay_entry(e, flat, owned)
            if out is not None:
                self._last = (key, stamp, e)
                return out
            if e.ready is not None:
                # the values no longer fit the confirmed trace (shared values written
                # apart): the signature starts over, with a fresh budget of traces
                e.ready, e.last, e.traces = None, None, 0
        if e.followed:   # values no family vouches for: replayed where confirmed by value
            out = self._replay_by_value(args, kwargs, flat, n_args, snap, owned)
            if out is not None:
                return out
        self._last = None
        out = self._trace(e, flat, n_args, spec, snap, owned, stamp, objects[0], base)
        if e.followed:   # numbers it returns, computed from followed ones: plain ones
            out = pytree.tree_map_only(traced_numbers.Followed, traced_numbers.plain, out)
        return out

    def _replay_by_value(self, args, kwargs, flat, n_args, snap, owned):
        """A replay of the call's signature keyed by value (confirmed before its numbers
        were followed), or None."""
        key = self._with_numbers(self._signature(args, kwargs, frozenset())[0],
                                 flat[:n_args], flat[n_args:], frozenset())[0]
        e = self.entries.get(key + (snap,))
        if e is None or e.ready is None or e.followed:
            return None
        return self._replay(e.ready, flat, owned)

    def _learn_followed(self, full) -> bool:
        """Whether new signature ``full`` differs from one seen before in the values of
        some numbers only (int or float arguments, the optimizer's number
        hyper-parameters), each of one type in both, or in the sizes of tensor arguments
        along dims that ran padded in a trace of the other: from now on those are
        followed (``step_numbers``)."""
        found = set()
        for other, o in self.entries.items():
            if len(other) == len(full) and other[:_HEAD] == full[:_HEAD] and \
                    other[-1] == full[-1]:
                found.update(step_numbers.changed_numbers(other[_HEAD:-1], full[_HEAD:-1],
                                                          _may_follow(o)))
        found -= self.unfollowed
        found -= self.followed
        if not found:
            return False
        self.followed |= found
        log.followed(found)
        return True

    def _unfollow(self, e) -> None:
        """``e``'s ints are keyed by value again (signatures by value replay as before)."""
        self.unfollowed.update(e.followed)
        self.followed -= set(e.followed)

    def _replay_entry(self, e, flat, owned, stamp=None):
        """``_replay`` of entry ``e``'s confirmed trace, or of the first of its families
        that vouches for the followed ints' values."""
        if not e.followed:
            return self._replay(e.ready, flat, owned, stamp)
        env = _env(flat, e.followed)
        for fam in e.families:
            numbers = fam.predict(env)
            if numbers is not None:
                out = self._replay(fam.trace, flat, owned, stamp, numbers)
                if out is not None and numbers.sizes is not None and env not in fam.envs:
                    METRICS.step_replays_across_sizes += 1
                return out
        return None

    def _plain(self, args, kwargs):
        """The step traced as usual (its CPU tensor arguments copied to the device, as a
        traced or replayed call has them)."""
        args, kwargs = pytree.tree_map_only(torch.Tensor, _on_device, (args, kwargs))
        with heap.paused():
            out = self.fn(*args, **kwargs)
            if tensor.pending_count():
                executor.sync("step")
        return out

    # -- tracing (and checking) a step

    def _trace(self, e, flat, n_args, spec, snap, owned, stamp, objects=(), base=None):
        """Trace the step once (``flat``: its ``n_args`` flat arguments, then the
        optimizer's number hyper-parameters; ``objects``: argument objects, whose tensors
        end ``owned``; ``base``: the call's signature before ``_with_arg_folds``)."""
        before = objects_now(objects) if objects else None
        if tensor.pending_count():
            executor.sync("step")   # work recorded before the step is not part of it
        serial0 = ir.LEAVES_MADE[0]
        lazy = [_on_device(v) if isinstance(v, torch.Tensor) else v for v in flat[:n_args]]
        tape = None
        hyper = {}   # followed hyper-parameters: number index -> its traced value
        if e.followed:   # (each traced as a ``TracedInt``/``TracedFloat``: uses on ``tape``)
            sized = any(type(i) is tuple for i in e.followed)
            tape = traced_numbers.Tape(_env(flat, e.followed), LazyTensor if sized else None)
            for k, i in enumerate(e.followed):
                if type(i) is tuple:   # (a size: its reads are followed as made)
                    continue
                if i < n_args:
                    lazy[i] = traced_numbers.follow(flat[i], k)
                else:
                    hyper[i - n_args] = traced_numbers.follow(flat[i], k)
        # the first place each data value is read from, and the other places holding it
        slot_of, also = {}, collections.defaultdict(list)
        places = [(("state", j), t) for j, t in enumerate(owned)]
        places += [(("arg", i), v) for i, v in enumerate(lazy)
                   if isinstance(v, LazyTensor) and not v._vw]
        # an argument marked dynamic inside the step is a new leaf over the same array
        arg_values = {}
        # (the nodes held till the step is recorded: marking an argument leaves its old
        # leaf to be freed, and a leaf made after it may take its id, another's place)
        held = [t._st.node for _, t in places]
        for place, t in places:
            n = t._st.node
            if n.op is ir.DATA:
                if id(n) in slot_of:
                    also[id(n)].append(place)
                else:
                    slot_of[id(n)] = place
                if place[0] == "arg":   # (settled now: a barrier would change its value)
                    arg_values.setdefault(id(dynamic.settle(n)), place)
        # each parameter's grad before the step: one it gives a new grad (``zero_grad()``
        # before ``backward()``) has it set again by a replay
        params = [(i, t) for i, t in enumerate(owned) if isinstance(t, torch.nn.Parameter)]
        grads0 = [p.grad for _, p in params]
        rng0 = random.position()
        host_rngs = host_rng_states()
        syncs0, folds0, reads0 = METRICS.syncs, METRICS.host_folds, METRICS.transfers_to_host
        seen = []
        executor.BARRIER_OBSERVERS.append(lambda *a: seen.append(a))
        try:
            args, kwargs = pytree.tree_unflatten(lazy, spec)
            with heap.paused(), fold.observed() as folds:   # (its objects: kept young)
                with traced_numbers.recording(tape), \
                        step_numbers.hyper_parameters(stamp.reads, hyper) as set_inside:
                    out = self.fn(*args, **kwargs)
                if tensor.pending_count():
                    executor.sync("step")
        finally:
            executor.BARRIER_OBSERVERS.pop()
        e.traces += 1
        try:
            if set_inside or stamp.places and not _same_numbers(stamp.numbers() or (),
                                                                flat[n_args:]):
                raise NotWholeStep("the step sets an optimizer hyper-parameter (a "
                                   "scheduler stepped inside it)")
            if METRICS.syncs - syncs0 != 1 or len(seen) != 1:
                raise NotWholeStep("the step has more than one barrier (a value read, an "
                                   "eager fallback, or mark_step before its end)")
            folded, arg_folded = _folds(folds, arg_values, flat)
            if METRICS.host_folds - folds0 != len(folds):
                raise NotWholeStep("the step reads a value (computed on the host: a replay "
                                   "would not read it again)")
            if METRICS.transfers_to_host - reads0 != fold.leaf_reads(folds):
                # (one computed before the read needs no barrier of its own, and one read
                # at the step's end leaves nothing for a second: Python may use either)
                raise NotWholeStep("the step reads a value (.item(), .cpu(), printing: a "
                                   "replay would not read it again)")
            check_host_rngs(host_rngs, "the step")
            if self._full_state(AttributeReads(), after_trace=True)[0] != snap:
                raise NotWholeStep("the step changes the layout of the model's or "
                                   "optimizer's state (e.g. the optimizer's first step)",
                                   permanent=False)
            if objects and objects_now(objects) != before:
                raise NotWholeStep("the step changes an attribute of an argument object")
            args_in = [v if isinstance(flat[i], LazyTensor) and not v._vw else None
                       for i, v in enumerate(lazy)]
            new_grads = _new_grads(params, grads0)
            tr, temps = _record(seen.pop(), slot_of, also, owned, out, rng0, arg_values,
                                args_in, tape, new_grads, serial0)
            del held
            tr.folds, tr.arg_folds = folded, arg_folded
            if tr.foreign and (tr.sizes is not None or any(
                    type(i) is tuple or i < n_args for i in e.followed)):
                # which such tensor the Python reads may follow the sizes or the numbers a
                # replay would run at (``tables[k]``, ``cache[T]``; indexing by a followed
                # int records nothing)
                raise NotWholeStep(_FOREIGN + ", at sizes or argument numbers it follows")
            if arg_folded and (tr.sizes is not None or e.followed):
                raise NotWholeStep("the step reads a value computed on the host from its "
                                   "arguments at sizes or numbers it follows (a replay "
                                   "could not compute it again)")
            self._learn_arg_folds(base, arg_folded)
            if _kept(temps):
                # The autograd graph of a result may hold them (an input the step made
                # require grad, for a gradient penalty): the result then comes back as a
                # replay returns it, without its graph.
                out = pytree.tree_map_only(LazyTensor, _without_graph, out)
            if _kept(temps):
                # transient: a replayed forward keeps its outputs while it captures
                raise NotWholeStep("the step keeps a value it computed somewhere other than "
                                   "its result, the model and the optimizer", permanent=False)
        except (NotWholeStep, NotReplayable) as err:
            e.last = None
            if getattr(err, "permanent", True) or (e.traces >= self.MAX_TRACES
                                                   and not e.families):
                e.failed = str(err)
                if e.followed:   # keyed by value again: a value that repeats may replay
                    self._unfollow(e)
            METRICS.replay_miss(f"whole step: {err}")
            return out
        if e.followed:
            return self._add_followed(e, tr, out)
        if e.last is not None and _agree(e.last, tr):
            e.ready = tr
        elif tr.sizes is not None and self._confirm_across_sizes(e, tr):
            # a new size of a padded step: its trace does what a trace of another size
            # does (one executable, the same numbers, inputs and writes)
            e.ready = tr
        elif e.traces >= self.MAX_TRACES:
            e.failed = "traces of the step never agreed"
            METRICS.replay_miss(f"whole step: {e.failed}")
        else:
            e.last = tr
        return out

    def _learn_arg_folds(self, base, arg_folded) -> None:
        """Keep the programs of a trace's values computed from its CPU arguments for its
        signature ``base`` (the next call's signature then holds their values)."""
        folds = tuple((prog, sources) for prog, sources, _ in arg_folded)
        if base is None or self.arg_folds.get(base, ()) == folds:
            return
        self.arg_folds.pop(base, None)
        while len(self.arg_folds) >= self.MAX_ENTRIES:
            self.arg_folds.pop(next(iter(self.arg_folds)))
        if folds:
            self.arg_folds[base] = folds

    def _add_followed(self, e, tr, out):
        """Trace ``tr`` of followed signature ``e`` joins a family or waits for a partner;
        ints whose uses escape the record, or that never form a family, are unfollowed."""
        why = None
        if tr.tape.pinned is not None:
            why = f"an int argument is used in a way a replay cannot follow " \
                  f"({tr.tape.pinned})"
        elif e.traces >= step_numbers.MAX_TRACES and not e.families:
            why = "traces at other int arguments never agreed"
        if why is not None:
            e.failed = why
            self._unfollow(e)
            METRICS.replay_miss(f"whole step: {why}")
            return out
        tr.followed = e.followed
        step_numbers.add_trace(e, tr, _agree_numbers_aside)
        if tr.tape.sized is not None and any(p is tr for p in e.pending) and \
                self._confirm_across_sizes(e, tr):
            # a size's first trace, doing what a confirmed trace of another size does:
            # replayed at its own sizes from its next call (a family of one vouches for
            # nothing else)
            fam = step_numbers.Family([tr])
            if fam.relink():
                e.pending = [p for p in e.pending if p is not tr]
                e.families.insert(0, fam)
                del e.families[step_numbers.MAX_FAMILIES:]
        return out

    def _confirm_across_sizes(self, e, tr) -> bool:
        """Whether padded trace ``tr`` agrees with a trace of another signature: a
        confirmed one, or one traced once (then both are confirmed)."""
        for o in self.entries.values():
            if o is e:
                continue
            if o.ready is not None:
                if o.ready.sizes is not None and _agree(o.ready, tr, across_sizes=True):
                    return True
            elif o.last is not None and o.last.sizes is not None and \
                    _agree(o.last, tr, across_sizes=True) and \
                    _agree(tr, o.last, across_sizes=True):
                o.ready = o.last
                return True
        return False

    # -- replaying it

    def _replay(self, tr, flat, owned, stamp=None, numbers=None):
        """Run the confirmed trace ``tr`` on the current values and write its results
        back; None where it cannot (a pending or padded value, or ``stamp`` given and no
        longer holding: then nothing was written and no random number drawn).
        ``numbers``: a followed signature's call's ``step_numbers.Prediction``, in place of
        the trace's numbers, sizes and the constants made for them."""
        if tensor.pending_count():
            executor.sync("step")
        if tr.arg_folds and not _arg_folds_hold(tr.arg_folds, flat):
            return None   # a value Python branched on comes out otherwise: trace instead
        if tr.foreign and not foreign_hold(tr.foreign):
            return None   # a tensor read from outside was written in place or freed
        # The state slots in bulk (C-level maps: a step reads a hundred of them): each
        # must still be a base tensor holding computed, unpadded data of the traced type
        # (a DATA leaf's signature says all three).
        ts = list(map(owned.__getitem__, tr.state_pos))
        nodes = list(map(_NODE, ts))
        if any(map(_VIEW, ts)) or list(map(_SIG, nodes)) != tr.state_sigs:
            return None   # a view, a pending or padded value: trace instead
        pool = list(tr.consts)
        sizes = tr.sizes
        if numbers is not None and numbers.sizes is not None:
            if sizes is not None:
                sizes = (numbers.sizes, sizes[1])
            for q, v in numbers.consts:
                pool[q] = v
        pool += map(_VALUE, nodes)
        host = 0
        for i, lay in tr.arg_pos:
            v = flat[i]
            if not isinstance(v, LazyTensor):
                # a host array: the executable's call takes it (a separate device_put
                # costs about 60 µs more per input)
                host += 1
                a = _host_copy(tr.host_buffers[i], v)
            else:
                n = v._st.node
                if v._vw or n.op is not ir.DATA or dynamic.leaf_pad(n) is not None:
                    return None
                a = n.value if lay is None else dynamic.true_value(n)
            pool.append(a if lay is None else dynamic.pad_host(a, lay, *sizes))
        if tr.aliases:
            # values shared when traced must still be (state places compared in bulk)
            a, b = tr.state_aliases
            if not all(map(operator.is_, map(_NODE, map(owned.__getitem__, a)),
                           map(_NODE, map(owned.__getitem__, b)))) or not all(
                    _place_node(p, flat, owned) is _place_node(q, flat, owned)
                    for p, q in tr.other_aliases):
                return None
        if tr.arg_bases and not _writable_args(tr, flat, owned):
            return None
        datas = list(map(pool.__getitem__, tr.perm))
        if tr.rng_offsets:
            seed, base = random.position()
            rngs = np.array([(seed, base + o) for o in tr.rng_offsets], dtype=np.int64)
        else:
            rngs = tr.no_rngs
        scalars, sizes = tr.scalars_on_device, tr.sizes_on_device
        if numbers is not None:
            scalars, sizes = numbers.scalars, None if sizes is None else numbers.size_list
        t0 = time.perf_counter()
        with executor._x64(True):
            if sizes is None:
                results = tr.exe.run(datas, scalars, rngs)
            else:
                results = tr.exe.run(datas, scalars, rngs, sizes)
        if stamp is not None and not stamp.holds():
            self._stamp = None   # recomputed by the caller's full path
            return None
        if tr.rng_count:
            random.skip(tr.rng_count)
        METRICS.execute_seconds += time.perf_counter() - t0
        METRICS.graphs_executed += 1
        METRICS.cache_hits += 1
        METRICS.step_replays += 1
        METRICS.transfers_to_device += host
        del nodes   # (a state node's references are counted in ``_write_state``)
        _write_state(tr.state_writes, owned, results)
        for i, j, shape, dtype in tr.grad_sets:   # (as the step's backward made them)
            owned[i].grad = tensor.new_base(ir.computed_leaf(results[j].reshape(shape),
                                                             shape, dtype))
        leaves = list(tr.out_leaves)
        if numbers is not None:   # ints it returns computed from the followed ones
            leaves = [traced_numbers.evaluate(v.expr, numbers.env)
                      if type(v) is step_numbers.Returned else v for v in leaves]
        for j, xs, outs, args in tr.shared_writes:
            # places given one value keep sharing one leaf
            value = results[j]
            n = base = None
            if xs or args:
                sts = [owned[x]._st for x in xs] + [flat[i]._st for i in args]
                n = ir.computed_leaf(value, sts[0].node.shape, sts[0].node.dtype)
                for st in sts:
                    st.node = n
                    st.version += 1
                    tensor.own(st, n)
            for x in outs:   # (returned: one tensor, or views of it, as when traced)
                out = tr.out_leaves[x]
                view = type(out) is _ViewOut
                if n is None:
                    n = _padded_leaf(value, out, tr, numbers) if type(out) is _PaddedOut \
                        else ir.computed_leaf(value, *(out.base if view else out))
                if base is None:
                    base = tensor.new_base(n)
                leaves[x] = tensor.new_view(base, out.chain, out.shape, out.strides,
                                            out.offset, out.dtype) if view else base
        for x, out in enumerate(tr.out_leaves):
            if type(out) is _ArgOut:   # the argument itself, or a view of it, as traced
                arg, view = flat[out.arg], out.view
                leaves[x] = arg if view is None else tensor.new_view(
                    arg, view.chain, view.shape, view.strides, view.offset, view.dtype)
        for x, y in tr.out_same:
            leaves[x] = leaves[y]
        if tr.exe.checked:   # what the step wrote, made unusable if an index check fails
            refs = getattr(tr, "state_refs", None)
            if refs is None:   # (the model's and optimizer's storages: the same every call)
                refs = tr.state_refs = executor.refs_of(
                    [owned[x]._st for x, _ in tr.state_writes]
                    + [owned[x]._st for _, xs, _, _ in tr.shared_writes for x in xs])
            executor.written(refs, [t._st for t in leaves if isinstance(t, LazyTensor)]
                             + [flat[i]._st for i in tr.arg_writes]
                             + [owned[i].grad._st for i, *_ in tr.grad_sets])
        return pytree.tree_unflatten(leaves, tr.out_spec)


def _without_graph(t):
    return t.detach() if t.grad_fn is not None else t


def _kept(refs) -> bool:
    """Whether a value weakly referenced by ``refs`` is still alive, once the young
    garbage reference cycles hold is freed (a double backward's graph,
    ``create_graph=True``; ~1 ms, on a trace only)."""
    if not any(r() is not None for r in refs):
        return False
    gc.collect(1)
    return any(r() is not None for r in refs)


def _writable_args(tr, flat, owned) -> bool:
    """Whether the arguments a replay writes back to, or returns views of, are base lazy
    tensors, and those it writes share no storage with one another or with the model's
    or optimizer's state (the executable computed them apart)."""
    if any(type(flat[i]) is not LazyTensor or flat[i]._vw for i in tr.arg_bases):
        return False
    sts = [id(flat[i]._st) for i in tr.arg_writes]
    return len(set(sts)) == len(sts) and not set(sts) & {id(t._st) for t in owned}


_NO_OBJECTS = ((), ())


def _with_object_tensors(stamp: StateStamp, tensors: list) -> list:
    """The state of a call whose arguments hold objects: the model's and optimizer's
    tensors (``stamp.owned``), then the objects' (each a lazy base tensor held in no other
    place)."""
    ids = stamp.owned_ids
    for t in tensors:
        if not isinstance(t, LazyTensor) or t._vw:
            raise NotWholeStep("an argument object holds a tensor that is not a lazy base "
                               "tensor")
        if id(t) in ids:
            raise NotWholeStep("an argument object holds a tensor the model or the "
                               "optimizer holds")
    if len(set(map(id, tensors))) != len(tensors):
        raise NotWholeStep("an argument object holds one tensor in two places")
    return stamp.owned + tensors


def _write_state(writes, owned, results) -> None:
    """Each result that goes to one state place written there (a replay's write-back; the
    old values it drops are freed here)."""
    for x, j in writes:
        st = owned[x]._st
        n = st.node
        # Nothing but the storage sees the node (references: ``st.node``, ``n`` and
        # getrefcount's argument; no weak ones from a view's cache, a capture or a
        # host recipe): a new value in it is a new leaf, at a fraction of the cost.
        if getrefcount(n) == 3 and not getweakrefcount(n) and n.op is ir.DATA \
                and n.aux is None:
            n.value, n.born = results[j], -1
        else:
            st.node = ir.computed_leaf(results[j], n.shape, n.dtype)
            tensor.own(st, st.node)
        st.version += 1


_HOST_BUFFERS = 4   # host copies kept per argument (steps in flight at once)


def _host_copy(buffers: list, t: torch.Tensor) -> np.ndarray:
    """A copy of CPU tensor ``t`` for the executable's call. JAX on the CPU may read a host
    array in place while the executable runs, so the caller must not be able to change
    it; a buffer of ``buffers`` is reused once JAX has let go of it (a fresh array costs
    several µs more, most of it the allocation)."""
    try:
        src = t.numpy() if not t.requires_grad else t.detach().numpy()
    except (TypeError, RuntimeError):   # bfloat16, a conjugate or negative view
        return dtypes.tensor_to_numpy(t)
    idle = None
    for j in range(len(buffers)):
        b = buffers[j]
        if getrefcount(b) == 3:   # the list, ``b`` and the argument: unused
            if b.shape == src.shape and b.dtype == src.dtype:
                np.copyto(b, src)
                return b
            idle = j
    b = np.array(src, order="C", copy=True)
    if len(buffers) < _HOST_BUFFERS:
        buffers.append(b)
    elif idle is not None:   # (a followed size: the call's shape in place of another)
        buffers[idle] = b
    return b


def _place_node(place, flat, owned):
    kind, x = place
    t = owned[x] if kind == "state" else flat[x]
    return t._st.node if isinstance(t, LazyTensor) else None


def _on_device(t):
    return t if isinstance(t, LazyTensor) else executor.data_tensor(t)


# a followed number's part of a signature (its type: a trace follows an int and a float
# alike but computes otherwise with each)
_FOLLOWED = {int: (int, "followed"), float: (float, "followed")}
_FOLLOWED_KEYS = tuple(_FOLLOWED.values())


def _followed_of(entries) -> tuple:
    """The followed places of a signature's argument entries, in order: a number's flat
    position, or (position, dim) of a size keyed None."""
    out = []
    for j, k in enumerate(entries):
        if k in _FOLLOWED_KEYS:
            out.append(j)
        elif step_numbers.is_tensor_key(k) and None in k[0]:
            out.extend((j, d) for d, n in enumerate(k[0]) if n is None)
    return tuple(out)


def _env(flat, followed) -> tuple:
    """The values of the ``followed`` places (``_followed_of``) in a call's ``flat``
    arguments."""
    return tuple(flat[i] if type(i) is int else flat[i[0]].shape[i[1]] for i in followed)


def _may_follow(e):
    """Whether sizes ``dims`` of tensor argument ``i`` may be followed, as a trace of entry
    ``e`` ran them: padded (a dim of one symbol), or not read by its executable at all
    (the step's Python reading one is linked or refused as any read)."""
    tr = e.ready or e.last or (e.families[0].trace if e.families else None) or \
        (e.pending[0] if e.pending else None)
    lays = {} if tr is None else dict(tr.arg_pos)

    def may(i, dims) -> bool:
        if tr is None:
            return False
        if i not in lays:
            return True
        lay = lays[i] or ()
        return all(d < len(lay) and dynamic.sym_of(lay[d]) is not None for d in dims)
    return may


# What a trace returned, by place, as a replay makes it again (compared between traces)
@dataclasses.dataclass(frozen=True, slots=True)
class _ViewOut:
    """A returned view of a value the step computed: its storage's (shape, dtype) and
    the view's chain, shape, strides, offset and dtype, to make it again."""
    base: tuple
    chain: tuple
    shape: tuple
    strides: tuple
    offset: int
    dtype: torch.dtype


@dataclasses.dataclass(frozen=True, slots=True)
class _PaddedOut:
    """A returned value with a dynamic dim: its layout and dtype (its true shape is the
    call's: ``_padded_leaf``)."""
    layout: tuple
    dtype: torch.dtype


@dataclasses.dataclass(frozen=True, slots=True)
class _ArgOut:
    """A returned argument (``arg``: its place among the arguments), or a view of one
    (``view``: a ``_ViewOut``)."""
    arg: int
    view: _ViewOut | None


def _padded_leaf(value, out: _PaddedOut, tr, numbers):
    """A replay's padded result at the call's true sizes (the trace's, or a followed
    call's predicted ones), as a traced barrier leaves it (``dynamic.result_leaf``)."""
    sizes, buckets = tr.sizes
    if numbers is not None:
        sizes = dict(zip(tr.syms, numbers.size_list.tolist()))
    return ir.computed_leaf(value, dynamic.lsize(out.layout, sizes), out.dtype,
                            aux=dynamic.pad_aux(out.layout, sizes, buckets))


def _new_grads(params, grads0) -> dict:
    """{id of its storage: (the parameter's owned place, the grad)} for each parameter the
    step gave a new grad; NotWholeStep where a replay could not give it that grad (one
    that is not a view reading the whole of one storage, or two sharing a storage), or
    where Python holds it other than through its parameter (a list it was appended to: a
    replay's grad would not be there)."""
    out = {}
    for (i, p), g0 in zip(params, grads0):
        g = p.grad
        if g is None or g is g0:
            continue
        if not (isinstance(g, LazyTensor) and tensor.reads_whole_storage(g)) or \
                id(g._st) in out:
            raise NotWholeStep("the step gives a parameter a grad a replay could not "
                               "give it (not the whole of a value it computed)")
        # (held by its parameter, one reference from C++, by ``g`` and by getrefcount's
        # argument: any more is another holder)
        if sys.getrefcount(g) > 3:
            raise NotWholeStep("the step keeps a grad it made somewhere other than its "
                               "parameter (a replay gives the parameter a new one)")
        out[id(g._st)] = (i, g)
    return out


def _folds(folds, arg_values, flat) -> tuple:
    """The values the step computed on the host (``fold``: the causal-mask test of
    ``nn.Transformer``'s decoder, ``(mask == causal).all()``) as a replay checks them:
    (those computed from constants made on the host and Python numbers alone, each (the
    makers of its constants and its program with every int taken out, those ints, its
    value): the same for a signature, made again for other sizes; those that also read the
    step's CPU arguments, each (its program, its leaves' sources, its value), computed
    again from the arguments before each replay (``_arg_folds_hold``): a padding mask's
    ``mask.all()``). One that reads the model's state or an argument already on the device
    refuses the step (Python may branch on it, and a replay would not read it again)."""
    out, from_args = [], []
    for prog, leaves, value in folds:
        recipes = fold.recipes(leaves)
        if recipes is not None:
            ints: list = []
            skeleton = replay_sizes.split((recipes, prog), ints)
            out.append((skeleton, tuple(ints), fold.value_key(value)))
            continue
        sources = []
        for n in leaves:
            # (``arg_values``: keyed by the arguments' device arrays)
            place = arg_values.get(id(n.value)) if n.op is ir.DATA else None
            if place is not None and not isinstance(flat[place[1]], LazyTensor):
                sources.append(("arg", place[1]))
            elif (copied := fold.copied_value(n)) is not None:   # (made inside the step)
                sources.append(("value", copied))
            else:
                made = fold.recipes((n,))
                if made is None:
                    raise NotWholeStep("the step reads a value computed on the host from "
                                       "its state or a tensor already on the device (a "
                                       "replay would not read it again)")
                sources.append(("made", made[0]))
        from_args.append((prog, tuple(sources), fold.value_key(value)))
    return tuple(out), tuple(from_args)


def _arg_fold_value(prog, sources, flat):
    """A value computed on the host from CPU arguments (``_folds``), from this call's
    ``flat`` arguments (``value_key``; None where it cannot be computed)."""
    values = [flat[x] if kind == "arg" else x.tensor() if kind == "value" else
              fold.remade((x,))[0] for kind, x in sources]
    out = fold.run(prog, values)
    return None if out is None else fold.value_key(dtypes.tensor_to_numpy(out))


def _arg_folds_hold(arg_folds, flat) -> bool:
    """Whether each value a trace computed on the host from its CPU arguments comes out
    the same from this call's (the Python that branched on it would branch alike)."""
    return all(_arg_fold_value(prog, sources, flat) == value
               for prog, sources, value in arg_folds)


_FOREIGN = ("the step reads a lazy tensor that is not an argument, a parameter, a buffer or "
            "optimizer state")


def _record(seen, slot_of, also, owned, out, rng0, arg_values, args_in, tape=None,
            new_grads=None, serial0=0):
    """The trace of one barrier, and weak references to the values it stored that are
    neither returned nor owned (they must be gone once the step is over). ``args_in``:
    each argument that is the caller's own lazy base tensor (else None): what the step
    writes to one in place is written back to the argument a replay is given, and one
    returned is that argument. ``tape``: what the Python did with followed ints
    (``step_numbers``). ``new_grads``: the grads the step made (``_new_grads``), each
    set again by a replay to the value it holds. ``serial0``: the first leaf serial made
    inside the step (older leaves it reads are tensors from outside)."""
    g, exe, plan, stored = seen
    template_consts = {id(n.op.scalar_array) for n in g.nodes
                       if getattr(n.op, "scalar_array", None) is not None}
    leaves = [n for n in g.nodes if n.op is ir.DATA]
    layouts = plan.data_layouts if plan is not None else (None,) * len(leaves)
    slots = []
    used = set()
    foreign = []
    for k, (n, lay) in enumerate(zip(leaves, layouts)):
        used.add(id(n))
        s = slot_of.get(id(n)) or arg_values.get(id(n.value))
        if s is None:
            recipe = ir.HOST_RECIPES.get(n)
            replayed = id(n) in template_consts or n in ir.REPLAYED_CONSTS
            made = recipe is not None or replayed
            if n.serial < serial0 and not replayed:
                # a tensor from before the step that nothing hands it (a table cached by
                # transformers' lru caches, keyed by sizes the signature pins; made by a
                # host factory or computed): read as it is while its storage, the one that
                # holds the leaf, holds it still (not written in place, not freed)
                held = outside_ref(n)
                if held is None:
                    raise NotWholeStep(_FOREIGN + (", padded" if n.aux is not None else
                                                   ", held by no storage or by several"))
                foreign.append(held)
                made = False
            elif not made and k not in g.fresh:
                raise NotWholeStep(_FOREIGN)
            copied = None if made else fold.copied_value(n)
            # (made: by a host factory or a replayed forward, so the same for these sizes;
            # copied from a CPU tensor made inside the step: traces agree by its value)
            s = ("const", n.value, ("copied", copied) if copied is not None else recipe, made)
        elif s[0] == "state" and lay is not None and dynamic.has_sym(lay):
            raise NotWholeStep("a parameter or state tensor has a dynamic dim")
        slots.append(s)
    tr = _Trace()
    tr.exe = exe
    tr.slots = tuple(slots)
    tr.foreign = tuple(foreign)
    # padded (dynamic dims): each slot's layout, the sizes of this trace, and the constants
    # at their padded shapes (made once: a signature has one set of sizes)
    tr.layouts = tuple(lay if lay is not None and dynamic.has_sym(lay) else None
                       for lay in layouts)
    tr.sizes = None if plan is None else (dict(zip(plan.syms, plan.sizes)),
                                          dict(zip(plan.syms, plan.buckets)))
    # places that held one value when traced (an optimizer's step counters) must hold
    # one again: the executable reads it once
    tr.aliases = tuple((slot_of[k], other) for k in sorted(also, key=lambda k: slot_of[k])
                       for other in also[k] if k in used)
    both_state = [(p[1], q[1]) for p, q in tr.aliases if p[0] == q[0] == "state"]
    tr.state_aliases = (tuple(p for p, _ in both_state), tuple(q for _, q in both_state))
    tr.other_aliases = tuple((p, q) for p, q in tr.aliases if not p[0] == q[0] == "state")
    _group_slots(tr, leaves)
    tr.scalars = tuple(g.scalars)
    with executor._x64(True):   # the same numbers every replay: on the device once
        dev = config.jax_device()
        tr.scalars_on_device = jax.device_put(np.asarray(tr.scalars, np.float64), dev)
        tr.no_rngs = jax.device_put(np.zeros((0, 2), np.int64), dev)
        tr.sizes_on_device = None if plan is None else jax.device_put(
            np.asarray(plan.sizes, np.int64), dev)
    seed0, counter0 = rng0
    seed, counter = random.position()
    if seed != seed0 or any(r[0] != seed0 for r in g.rngs):
        raise NotWholeStep("the random seed is set inside the step")
    tr.rng_offsets = tuple(r[1] - counter0 for r in g.rngs)
    tr.rng_count = counter - counter0
    flat, tr.out_spec = pytree.tree_flatten(out)
    arg_store = {}  # an argument's storage -> its place among the arguments
    for i, v in enumerate(args_in):
        if v is not None:
            arg_store.setdefault(id(v._st), i)
    returned = {}   # a returned tensor's storage -> the places of the result it is at
    leaves = []
    first = {}      # a tensor returned at several places: the first
    tr.out_same = []
    for i, v in enumerate(flat):
        if isinstance(v, LazyTensor):
            if first.setdefault(id(v), i) != i:
                tr.out_same.append((i, first[id(v)]))
            view = _ViewOut((v._st.node.shape, v._st.node.dtype), v._vw, tuple(v.shape),
                            v.stride(), v.storage_offset(), v.dtype) if v._vw else None
            arg = arg_store.get(id(v._st))
            if arg is not None:   # an argument (or a view of one): itself, as traced
                if view is None and v is not args_in[arg]:
                    raise NotWholeStep("the step returns an alias of an argument")
                leaves.append(_ArgOut(arg, view))
                continue
            returned.setdefault(id(v._st), []).append(i)
            # (a view, ``logits[:, -1]``: made again over the replay's result)
            leaves.append(view if view is not None else (tuple(v.shape), v.dtype))
        elif isinstance(v, torch.Tensor):
            raise NotWholeStep("the step returns a tensor that is not on the lazy device")
        elif isinstance(v, traced_numbers.Followed):
            leaves.append(step_numbers.Returned(v._e))
        else:
            leaves.append(v)
    owner = {id(t._st): j for j, t in enumerate(owned)}
    new_grads = new_grads or {}
    writes, temps, grad_sets = [], [], []
    filled = set()
    out_layouts = None if plan is None else [plan.layouts[o] for o in g.outputs]
    for st, j in stored:
        dyn = out_layouts is not None and out_layouts[j] is not None and \
            dynamic.has_sym(out_layouts[j])
        if dyn and (id(st) in owner or id(st) in arg_store or id(st) in new_grads):
            raise NotWholeStep("the step keeps a value with a dynamic dim in the model, the "
                               "optimizer or an argument")
        if dyn and id(st) in returned:   # returned padded, with the call's true sizes
            for x in returned[id(st)]:
                if type(leaves[x]) is not tuple:
                    raise NotWholeStep("the step returns a view of a value with a dynamic "
                                       "dim")
                leaves[x] = _PaddedOut(out_layouts[j], leaves[x][1])
        if id(st) in owner:
            writes.append(("state", owner[id(st)], j))
        elif id(st) in arg_store:   # written in place: back to the argument
            writes.append(("arg", arg_store[id(st)], j))
        elif id(st) in returned:
            writes.extend(("out", x, j) for x in returned[id(st)])
            filled.add(id(st))
        elif id(st) in new_grads:
            # (held by the grad, ``stored``'s pair, this loop and getrefcount's argument:
            # more is a view of the grad kept elsewhere, which a replay would not update)
            if sys.getrefcount(st) > 4:
                raise NotWholeStep("the step keeps a view of a grad it made")
            i, grad = new_grads[id(st)]
            grad_sets.append((i, j, tuple(grad.shape), grad.dtype))
        else:
            temps.append(weakref.ref(st))
    if len(grad_sets) != len(new_grads):
        raise NotWholeStep("the step gives a parameter a grad it did not compute, or one "
                           "it also keeps or returns")
    tr.grad_sets = tuple(sorted(grad_sets))
    if len(filled) != len(returned):
        raise NotWholeStep("the step returns a tensor it did not compute (a parameter, "
                           "the device copy of a CPU argument, or a view of one)")
    tr.writes = tuple(writes)
    groups = {}   # result -> (the state, returned and argument places) it goes to
    kinds = {"state": 0, "out": 1, "arg": 2}
    for kind, x, j in writes:
        groups.setdefault(j, ([], [], []))[kinds[kind]].append(x)
    # a result written to one state place (most): replayed in a fast loop
    tr.state_writes = tuple((xs[0], j) for j, (xs, outs, args) in groups.items()
                            if len(xs) == 1 and not outs and not args)
    tr.shared_writes = tuple((j, tuple(xs), tuple(outs), tuple(args))
                             for j, (xs, outs, args) in groups.items()
                             if len(xs) != 1 or outs or args)
    tr.arg_writes = tuple(sorted({x for kind, x, _ in writes if kind == "arg"}))
    tr.arg_bases = tuple(sorted(set(tr.arg_writes) | {
        v.arg for v in leaves if type(v) is _ArgOut and v.view is not None}))
    tr.out_leaves = tuple(leaves)
    tr.tape = tape
    if tape is not None:   # what a followed signature's families compare and link
        tr.cuts = tuple((i, *dynamic.cut_raw(n)) for i, n in enumerate(g.nodes)
                        if n.op in dynamic.CUTS)
        tr.syms = () if plan is None else plan.syms
        tr.size_list = () if plan is None else plan.sizes
        tr.bucket_list = () if plan is None else plan.buckets
        tr.rules = () if plan is None else plan.rules
        tr.shape_key = None if plan is None else plan.key[1:3]   # (its graph, buckets aside)
    return tr, temps


def _group_slots(tr: _Trace, leaves) -> None:
    """The slots by kind, as a replay gathers them: constants (padded where the graph
    runs padded), state (with the signature its leaf must have), arguments (with their
    layout), and where each goes among the executable's inputs."""
    groups = {"const": [], "state": [], "arg": []}
    where = []
    for k, (slot, leaf) in enumerate(zip(tr.slots, leaves)):
        kind = slot[0]
        where.append((kind, len(groups[kind])))
        if kind == "const":
            lay = tr.layouts[k]
            groups[kind].append(slot[1] if lay is None else
                                dynamic.padded_value(leaf, lay, *tr.sizes))
        elif kind == "state":
            groups[kind].append((slot[1], leaf.sig))
        else:
            groups[kind].append((slot[1], tr.layouts[k]))
    tr.consts = tuple(groups["const"])
    tr.state_pos = tuple(j for j, _ in groups["state"])
    tr.state_sigs = [sig for _, sig in groups["state"]]
    tr.arg_pos = tuple(groups["arg"])
    tr.host_buffers = {i: [] for i, _ in tr.arg_pos}   # (``_host_copy``)
    base = {"const": 0, "state": len(tr.consts), "arg": len(tr.consts) + len(tr.state_pos)}
    tr.perm = tuple(base[kind] + i for kind, i in where)


def _agree(a: _Trace, b: _Trace, across_sizes: bool = False, numbers: bool = True) -> bool:
    """Whether two traces did the same thing: two of one signature (then the next call is
    replayed), or (``across_sizes``) a padded trace and a confirmed one of another size
    that run one executable (then the new size is replayed from its next call)."""
    if not (a.exe is b.exe and a.writes == b.writes and a.aliases == b.aliases
            and [n for _, n in a.foreign] == [n for _, n in b.foreign]
            and a.grad_sets == b.grad_sets
            and a.out_spec == b.out_spec and a.out_leaves == b.out_leaves
            and a.out_same == b.out_same
            and a.rng_offsets == b.rng_offsets and a.rng_count == b.rng_count
            and a.layouts == b.layouts and len(a.slots) == len(b.slots)
            and (not numbers or _same_numbers(a.scalars, b.scalars))):
        return False
    # values computed on the host: the same, and at other sizes the same program and value
    # (its ints linked to the sizes by a family, ``step_numbers._refolds``)
    if [f if not across_sizes else (f[0], f[2]) for f in a.folds] != \
            [f if not across_sizes else (f[0], f[2]) for f in b.folds] or \
            a.arg_folds != b.arg_folds:
        return False
    for x, y in zip(a.slots, b.slots):
        if x[0] != "const":
            if x != y:
                return False
        elif y[0] != "const" or not (x[1] is y[1] or (x[2] is not None and x[2] == y[2])
                                     or (across_sizes and y[3])):
            # across sizes, the new trace's constant need only be made for its size
            # (``arange(T)`` by its factory): each trace replays with its own
            return False
    return True


def _agree_numbers_aside(a: _Trace, b: _Trace) -> bool:
    """``_agree`` but for the Python numbers (a followed signature's links judge them),
    and where sizes are followed, but for the constants made for them (linked too)."""
    return len(a.scalars) == len(b.scalars) and _agree(
        a, b, across_sizes=a.tape.sized is not None, numbers=False)


def _same_numbers(a, b) -> bool:
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


def compile_step(fn, model=None, optimizer=None):
    """Replay ``fn`` (one whole training step on the lazy device) without running its
    Python, once two traced calls with the same signature agree (see the module doc).
    ``model`` and ``optimizer`` name the state the step reads and writes: ``optimizer``
    one optimizer or a list of them (a GAN's generator and discriminator steps; a module
    list or dict holds their models)."""
    from .compile import _check_optimizer
    if not callable(fn):
        raise TypeError(f"lazy_runtime.compile_step takes the step function first, not "
                        f"{type(fn).__name__}")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"lazy_runtime.compile_step: model= takes a torch.nn.Module, not "
                        f"{type(model).__name__}")
    optimizers = () if optimizer is None else tuple(optimizer) \
        if isinstance(optimizer, (list, tuple)) else (optimizer,)
    for opt in optimizers:
        _check_optimizer(opt, "compile_step (optimizer=)")
    return StepReplayer(fn, model, optimizers)
