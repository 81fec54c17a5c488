"""Replay: a module call with a known signature reuses its recorded graph, without
running the Python forward again (nor autograd's backward over it).

The first call with a signature is traced as usual, and its graph is *cut* out of the
trace: the ops between the call's tensors (arguments, parameters, buffers) and its
results become a ``Template``, a copied subgraph whose leaves are the call's inputs.
When grads are needed the call goes through an autograd ``Function`` whose backward runs
``torch.autograd.grad`` over the traced forward and cuts the backward graph the same way
(its inputs: the grad outputs, the call's tensors, and the forward values it saved).
From then on, a call with the same signature records one ``CALL`` node per direction
(``ir.make_node(template, ...)``), so a training step's graph holds a handful of nodes
where tracing recorded hundreds. The executor lowers a CALL by running the template's
body; a graph that runs padded inlines its CALLs only when padded values flow into them.
``compile_optimizer`` replays ``opt.step()`` the same way (no autograd: only writes), and
follows the hyper-parameters a schedule changes (``replay_numbers.py``, which also follows
a forward's number arguments that change, where it runs without autograd).

A signature never traced whose only difference from traced ones is the size of dynamic
dims can be *predicted* from them when the plan vouches for forward's size arithmetic
(``replay_sizes.py``: replay across sizes).

The signature (the guard) is exact: argument structure, constants, tensor shapes, dtypes
and ``requires_grad``; the module tree's parameters and buffers (identity,
``requires_grad``), its plain attributes (ints, floats, bools, strings, None: a flag
flipped between calls changes the signature) and its other attributes by value (tuples,
lists, dicts, numpy numbers, plain objects such as a ``config``: ``attribute_value``),
``training`` and grad mode. An argument
that is a plain Python object (a key-value cache: transformers' ``StaticCache``) is
looked into (``object_state``): its types, attribute names, plain values and tensors'
layouts join the signature, its tensors are read and written in place as parameters
are, and a call may hand it back. A capture is dropped, and the signature traced from
then on, when the forward is not a function of those: it synchronizes (``.item()``, an
eager fallback; a value folded on the host from constants the call made is allowed, the
same at every call of the signature, and computed again by a replay across sizes),
draws from a generator on the host (``host_rng_states``), reads a device tensor that is
neither an argument, a parameter nor a buffer and that no one storage holds (one that a
storage holds, made before the call, is read as traced while the storage holds it:
``_Entry.foreign``; not in replays across sizes or numbers), changes a module's attributes or an
argument object's (an attribute given another tensor: a cache grown by ``cat``),
returns an argument or a non-contiguous view, writes into a view argument in part or
into one whose storage another of its tensors shares, or runs a module hook not
declared replayable (``replayable_hook``). A view argument
written whole is written back through the view at a replay; which arguments share a
storage (and their view chains) is part of the signature. Random ops draw from the lazy
stream exactly as tracing would, so a replayed run equals a traced one bit for bit.

Replay is for forwards whose control flow depends only on shapes and constant attributes
(``shapeinfer`` says so in ``control_flow.shape_only``); ``lr.compile`` turns it on from
the plan, or when asked (``replay=True``). What it cannot see, and assumes: that the
forward mutates no tensor besides its arguments, parameters and buffers, and that CPU
tensors it reads other than its modules' attributes are not changed in place between
calls.
"""

from __future__ import annotations

import collections
import itertools
import operator
import random as _random
import weakref

import numpy as np
import torch
import torch.nn.modules.module as _nn_module
import torch.utils._pytree as pytree

from . import autocast, fold, ir, random, replay_sizes, traced_numbers
from .dynamic import leaf_marks, put_host
from .metrics import METRICS
from .ops.registry import Lowering
from .tensor import LazyTensor, new_base, node_of, owner_of, pending_order, write
from .traced_numbers import NUMBER, Followed

_CONSTS = (int, float, bool, str, type(None), torch.dtype, torch.device)
_SIMPLE_ATTRS = (int, float, bool, str, type(None))
_names = itertools.count(1)
TEMPLATE_PREFIX = "replay."   # a template's name (``str(op)``: what an exact plan names)
# CALL nodes were recorded since the last barrier (the executor inlines them in graphs
# that run padded).
CALLS_MADE = [False]


# The host values of the scalar inputs of CALLs at other scalars than their templates'.
_OTHER_SCALARS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# A leaf kept in a template's body: a Python scalar of the call (a hyper-parameter, a
# scale) is a constant of its template, which is keyed by name.
_BAKE = ("bake",)


class NumberEntry(tuple):
    """A number argument's entry of a signature, (type, value): told apart from the
    others by its type (``replay_numbers`` follows numbers that change)."""

    __slots__ = ()


class NotReplayable(Exception):
    """Why a call's graph cannot be reused (a short reason, counted in ``replay_misses``)."""


# ---- templates ----------------------------------------------------------------------


class Template:
    """The op of a CALL node: a copied subgraph whose DATA placeholders are the call's
    inputs, in order (its SCALAR leaves are its own constants); its outputs are the
    CALL's results (a multi-output node)."""

    def __init__(self, kind: str, nodes: list, outputs: list):
        self.kind = kind
        self.name = f"{TEMPLATE_PREFIX}{kind}#{next(_names)}"
        self.nodes = nodes
        self.outputs = tuple(outputs)
        pos = {id(n): i for i, n in enumerate(nodes)}
        self.wiring = tuple(tuple(pos[id(x)] for x in n.inputs) for n in nodes)
        self.n_inputs = sum(1 for n in nodes if n.op is ir.DATA)
        # its Python scalars enter as one float64 array (a run-time input, as the traced
        # call's scalars are: constants would be folded by XLA and round differently)
        values = [n.value for n in nodes if n.op is ir.SCALAR]
        self.scalar_array = ir.leaf(ir.DATA, put_host(np.asarray(values, np.float64)),
                                    (len(values),), torch.float64) if values else None
        if values:
            self.n_inputs += 1
        self.shapes = tuple(nodes[o].shape for o in outputs)
        self.dtypes = tuple(nodes[o].dtype for o in outputs)
        self.args = tuple(ir.input_marker(i) for i in range(self.n_inputs))
        self.lowering = Lowering(self._lower, False)
        self._fn = None
        # keys name ops by id: a dead template's id must not name a later op
        ir._op_keys[id(self)] = self.name
        weakref.finalize(self, ir._op_keys.pop, id(self), None)

    def __str__(self):
        return self.name

    __repr__ = __str__

    def call(self, inputs: list, scalars=None) -> ir.Node:
        """A CALL node over ``inputs``; ``scalars``: its Python scalars at other values
        (a float64 array in the order of ``scalar_array``: a followed learning rate)."""
        CALLS_MADE[0] = True
        if scalars is not None:
            # (born -1: no length to guess; a whole step's trace that keys the numbers by
            # value may take it for the replay's constant, as it does ``scalar_array``)
            leaf = ir.computed_leaf(put_host(scalars), (len(scalars),), torch.float64)
            ir.REPLAYED_CONSTS.add(leaf)
            _OTHER_SCALARS[leaf] = scalars   # (what ``instantiate`` bakes)
            inputs = list(inputs) + [leaf]
        elif self.scalar_array is not None:
            inputs = list(inputs) + [self.scalar_array]
        return ir.make_node(self, self.args, (), tuple(inputs), self.shapes, self.dtypes)

    def _lower(self, *values):
        if self._fn is None:
            from .executor import _make_fn, _plan
            self._fn = _make_fn(_plan(self.nodes), self.outputs)
        if self.scalar_array is None:
            return self._fn(list(values), (), ())
        return self._fn(list(values[:-1]), values[-1], ())

    def instantiate(self, inputs) -> list:
        """The body as ordinary nodes over ``inputs`` (for graphs that run padded)."""
        vals = []
        k = 0
        # a call at other scalars (``call(inputs, scalars)``) has them in its last input
        other = _OTHER_SCALARS.get(inputs[-1]) if self.scalar_array is not None else None
        j = 0
        for n, wires in zip(self.nodes, self.wiring):
            if n.op is ir.SCALAR:
                vals.append(n if other is None else
                            ir.leaf(ir.SCALAR, float(other[j]), (), torch.float64))
                j += 1
            elif n.op in ir.LEAVES:
                vals.append(inputs[k])
                k += 1
            else:
                vals.append(ir.make_node(n.op, n.args, n.kwargs,
                                         tuple(vals[i] for i in wires), n.shape, n.dtype, n.aux))
        return [vals[o] for o in self.outputs]


def inline(outputs: list) -> list:
    """``outputs`` with every CALL node replaced by its template's body."""
    memo: dict = {}
    calls: dict = {}
    stack = [(o, False) for o in outputs]
    while stack:
        n, expanded = stack.pop()
        if id(n) in memo:
            continue
        if not n.inputs:
            memo[id(n)] = n
            continue
        if not expanded:
            stack.append((n, True))
            stack.extend((x, False) for x in n.inputs if id(x) not in memo)
            continue
        ins = tuple(memo[id(x)] for x in n.inputs)
        if type(n.op) is Template:
            calls[id(n)] = n.op.instantiate(ins)
            memo[id(n)] = n
        elif n.op is ir.GETITEM and id(n.inputs[0]) in calls:
            memo[id(n)] = calls[id(n.inputs[0])][n.args[0]]
        elif all(a is b for a, b in zip(ins, n.inputs)):
            memo[id(n)] = n
        else:
            memo[id(n)] = ir.make_node(n.op, n.args, n.kwargs, ins, n.shape, n.dtype, n.aux)
    return [memo[id(o)] for o in outputs]


def _cut(outputs: list, slot_of) -> tuple:
    """Copy the subgraph above ``outputs`` down to the nodes ``slot_of`` names (a slot:
    where a replay finds that input); every leaf must be named. Returns (inner nodes in
    topological order, output positions, slots in placeholder order, original nodes)."""
    index: dict = {}
    nodes: list = []
    orig: list = []
    slots: list = []
    stack = [(o, False) for o in reversed(outputs)]
    while stack:
        n, expanded = stack.pop()
        if id(n) in index:
            continue
        if not expanded:
            s = slot_of(n)
            if s is _BAKE:
                index[id(n)] = len(nodes)
                nodes.append(n)
                orig.append(n)
                continue
            if s is not None:
                index[id(n)] = len(nodes)
                nodes.append(ir.leaf(ir.DATA, None, n.shape, n.dtype))
                orig.append(n)
                slots.append(s)
                continue
            if n.op in ir.LEAVES:
                raise NotReplayable(f"unexpected {n.op} leaf")
            if type(n.op) is Template:
                raise NotReplayable("a replayed call inside a captured one")
            stack.append((n, True))
            stack.extend((x, False) for x in reversed(n.inputs) if id(x) not in index)
            continue
        index[id(n)] = len(nodes)
        nodes.append(ir.copy_node(n, tuple(nodes[index[id(x)]] for x in n.inputs)))
        orig.append(n)
    return nodes, [index[id(o)] for o in outputs], slots, orig


def call_mode() -> tuple:
    """What a call's recorded graph depends on besides its arguments and state, for its
    signature (a replay's and a whole step's): grad mode, autocast, and the default dtype
    (what a factory without one makes)."""
    return torch.is_grad_enabled(), autocast.state(), torch.get_default_dtype()


def host_rng_states() -> tuple:
    """The states of the random generators a traced call could draw from on the host:
    Python's ``random``, numpy's global one and torch's CPU generator (the lazy device's
    own stream is replayed)."""
    return _random.getstate(), np.random.get_state(), torch.random.get_rng_state()


def _same_numpy_state(a, b) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


# (the name and how to compare two states of each generator of ``host_rng_states``)
_HOST_RNGS = (("Python's random module", operator.eq),
              ("numpy's random generator", _same_numpy_state),
              ("torch's CPU generator", torch.equal))


def check_host_rngs(before: tuple, what: str) -> None:
    """NotReplayable where a generator of ``host_rng_states`` moved since ``before``: the
    call's Python drew a number a replay would not draw (``random.random() < p``)."""
    for (name, same), a, b in zip(_HOST_RNGS, before, host_rng_states()):
        if not same(a, b):
            raise NotReplayable(f"{what} draws from {name} (a replay would not)")


class _Mark:
    """Where the trace stood when a capture began."""

    def __init__(self):
        ir.forget_host_leaves()
        self.serial = ir.LEAVES_MADE[0]
        self.syncs = METRICS.syncs
        self.folds = METRICS.host_folds
        self.reads = METRICS.transfers_to_host
        self.rng = random.position()

    def leaf_slot(self, n):
        """The slot of a leaf met in a cut: a constant made during the capture, a
        random-stream position relative to the capture's start; else not replayable."""
        op = n.op
        if op is ir.SCALAR:
            return _BAKE
        if op is ir.RNG:
            if not _drawn_after(n, self.rng):
                raise NotReplayable("a random stream position from before the call")
            return ("rng", n.value[1] - self.rng[1])
        if op is ir.DATA and n.serial >= self.serial:
            return ("const", n)
        held = outside_ref(n) if op is ir.DATA else None
        if held is not None:
            # a tensor from before the call that nothing hands it (a table an lru cache
            # keeps, a tensor attribute): read as traced while its storage holds it still
            return ("foreign", held)
        if op is ir.DATA:
            raise NotReplayable("reads a device tensor that is not an argument, parameter "
                                "or buffer, and is padded or held by no storage or several")
        raise NotReplayable(f"a {op} value")

    def check_no_sync(self, folds=()):
        """Refuse a call that synchronized or read a value (Python may branch on it), but
        for ``folds`` (``fold.OBSERVERS``' records) computed on the host from constants
        the call made on the host and Python numbers alone (nn.Transformer's causal-mask
        check): the same at every call of the signature, whose template holds those
        constants as traced."""
        made = all(fold.recipes(leaves) is not None and all(
            n.op is not ir.DATA or n.serial >= self.serial for n in leaves)
            for _, leaves, _ in folds)
        if METRICS.syncs != self.syncs or not made or \
                METRICS.host_folds - self.folds != len(folds) or \
                METRICS.transfers_to_host - self.reads != fold.leaf_reads(folds):
            raise NotReplayable("synchronizes or reads a value inside the call (.item(), "
                                "printing, or an eager fallback)")


# ---- one signature's recording --------------------------------------------------------


class _Entry:
    """What a signature replays: templates, slots, and how results map back."""

    def __init__(self):
        self.state = "capture"     # "capture" | "ready" | "never"
        self.captures = 0
        self.fwd = self.bwd = None
        self.fwd_slots = self.bwd_slots = ()
        self.out_spec = None
        self.out_consts = ()        # per flat output: None (a tensor) or ("const", value)
        self.n_out = 0
        self.out_diff = ()          # per tensor output: differentiable
        self.mutations = ()         # (tensor position, fwd output position)
        self.fwd_rng = ((), 0)      # (offsets in slot order, positions drawn)
        self.bwd_rng = ((), 0)
        self.grad_of = ()           # per bwd output: the tensor position it is the grad of
        self.aliases = ()           # (position, earlier position) holding the same value
        self.size_parts = None      # (skeleton, ints), for replay across sizes
        self.synthesized = False    # made by replay_sizes, not traced
        self.scalars = None         # the template's Python scalars at other values
        self.view_writes = ()       # positions of views written (their storage their own)
        # the values its forward computed on the host (``_Mark.check_no_sync``)
        self.folds = ()
        # (a weak reference to its storage, the leaf) of each tensor from before the call
        # it reads: once the storage is freed or holds another value, captured again
        self.foreign = ()

    def fail(self, reason: str) -> None:
        self.state = "never"
        METRICS.replay_miss(reason)

    # -- replaying

    def _inputs(self, slots, rng, lookup):
        leaves = random.leaves_at(rng[0], rng[1])
        out = []
        r = 0
        for s in slots:
            kind = s[0]
            if kind == "const":
                c = s[1]
                if c.op is ir.DATA:
                    # a host constant, as if copied in this step: padding may guess its
                    # dims (``arange(T)``), as it would for the traced call; it keeps its
                    # recipe, or is known as a replay's constant (whole-step replay asks)
                    recipe = ir.HOST_RECIPES.get(c)
                    c = ir.leaf(ir.DATA, c.value, c.shape, c.dtype)
                    if recipe is not None:
                        ir.HOST_RECIPES[c] = recipe
                    else:
                        ir.REPLAYED_CONSTS.add(c)
                out.append(c)
            elif kind == "rng":
                out.append(leaves[r])
                r += 1
            elif kind == "foreign":
                out.append(s[1][1])   # (still its storage's: ``foreign_hold`` was asked)
            else:
                out.append(lookup(s))
        return out

    def run_forward(self, tensors, scalars=None):
        nodes = [node_of(t) for t in tensors]
        call = self.fwd.call(self._inputs(self.fwd_slots, self.fwd_rng, lambda s: nodes[s[1]]),
                             self.scalars if scalars is None else scalars)
        for j, k in self.mutations:   # in-place writes happen before a call returns
            write(tensors[j], ir.getitem(call, k))   # (through a view: into its base)
        outs = [new_base(ir.getitem(call, i)) for i in range(self.n_out)]
        return call, nodes, outs

    def run_backward(self, call, nodes, gouts):
        def lookup(s):
            if s[0] == "arg":
                return nodes[s[1]]
            if s[0] == "saved":
                return ir.getitem(call, s[1])
            return node_of(gouts[s[1]])
        bcall = self.bwd.call(self._inputs(self.bwd_slots, self.bwd_rng, lookup))
        grads = [None] * len(nodes)
        for m, j in enumerate(self.grad_of):
            grads[j] = new_base(ir.getitem(bcall, m))
        return grads

    def results(self, outs, objects=()):
        it = iter(outs)
        flat = [next(it) if c is None else objects[c[1]] if c[0] == "object" else c[1]
                for c in self.out_consts]
        return pytree.tree_unflatten(flat, self.out_spec)


class _ReplayFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, entry, *tensors):
        call, nodes, outs = entry.run_forward(tensors)
        ctx.entry, ctx.call, ctx.nodes = entry, call, nodes
        nondiff = [o for o, d in zip(outs, entry.out_diff) if not d]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return tuple(outs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *gouts):
        return (None, *ctx.entry.run_backward(ctx.call, ctx.nodes, gouts))


# ---- capturing ----------------------------------------------------------------------


class _Capture:
    """One traced call being cut into templates (forward now, backward when it runs)."""

    def __init__(self, entry, forward, args, kwargs, tensors, snapshot_of, objects=()):
        self.entry = entry
        self.object_index = {id(o): i for i, o in enumerate(objects)}
        self.forward = forward
        self.args, self.kwargs = args, kwargs
        self.tensors = tensors
        self.snapshot_of = snapshot_of
        self.keep = [node_of(t) for t in tensors]   # ids in ``boundary`` stay valid
        # a value that enters twice (the equal grads of an LSTM's two biases) is read
        # from its first place; a replay requires the same places to alias again
        self.boundary = {}
        aliases = []
        for j, n in enumerate(self.keep):
            first = self.boundary.setdefault(id(n), j)
            if first != j:
                aliases.append((j, first))
        entry.aliases = tuple(aliases)
        self.before = [t._st.node for t in tensors]
        # the storage values of view arguments: a template reads a view's value only
        # through its own place (one written in place is written back through the view)
        self.view_bases = {id(t._st.node) for t in tensors if t._vw} - set(self.boundary)

    def run(self):
        """Trace the forward; cut its template. Returns the flat outputs (tensors are the
        traced ones) and sets what a forward-only replay needs."""
        mark = self.mark = _Mark()
        snap0 = self.snapshot_of()
        rngs = host_rng_states()
        with fold.observed() as folds:
            out = self.forward(*self.args, **self.kwargs)
        flat, spec = pytree.tree_flatten(out)
        try:
            mark.check_no_sync(folds)
            # (each: its leaves' recipes and its program, its value; a replay across sizes
            # runs it again, ``replay_sizes.rebuild``)
            self.entry.folds = tuple(((fold.recipes(leaves), prog), fold.value_key(value))
                                     for prog, leaves, value in folds)
            check_host_rngs(rngs, "the call")
            snap1 = self.snapshot_of()
            if snap1[0] != snap0[0]:
                raise NotReplayable("changes a module attribute or optimizer state")
            if snap1[1] != snap0[1]:
                raise NotReplayable("changes an attribute of an argument object")
            self._cut_forward(flat, spec)
        except NotReplayable as e:
            self.entry.fail(str(e))
        return out, flat

    def _cut_forward(self, flat, spec):
        e = self.entry
        storages = {id(t._st) for t in self.tensors}
        outs, consts = [], []
        for v in flat:
            if isinstance(v, LazyTensor):
                if id(v._st) in storages:
                    raise NotReplayable("returns (a view of) an argument or parameter")
                if not v.is_contiguous() or v.storage_offset() != 0:
                    raise NotReplayable("returns a non-contiguous view")
                storages.add(id(v._st))
                outs.append(v)
                consts.append(None)
            elif isinstance(v, torch.Tensor):
                raise NotReplayable("returns a tensor that is not on the lazy device")
            elif type(v) in _CONSTS:
                consts.append(("const", v))
            elif id(v) in self.object_index:   # (a cache handed back, as HF's is)
                consts.append(("object", self.object_index[id(v)]))
            else:
                raise NotReplayable(f"returns a {type(v).__name__}")
        mutations = []
        for j, (t, n0) in enumerate(zip(self.tensors, self.before)):
            if t._st.node is not n0:   # (a view's: the value written through it)
                mutations.append((j, node_of(t)))
        e.view_writes = tuple(j for j, _ in mutations if self.tensors[j]._vw)
        if not _own_storages(self.tensors, e.view_writes):
            raise NotReplayable("writes into a view whose storage another of its tensors "
                                "shares")
        # replayed writes keep the traced order of the pending registry (graph outputs,
        # hence keys, follow it)
        order = pending_order([self.tensors[j]._st for j, _ in mutations])
        mutations.sort(key=lambda m: order.get(id(self.tensors[m[0]]._st), -1))
        if not outs and not mutations:
            raise NotReplayable("neither returns nor writes a tensor")
        e.out_spec, e.out_consts, e.n_out = spec, tuple(consts), len(outs)
        e.out_diff = tuple(o.requires_grad for o in outs)
        # tensors written with one value (an optimizer's step counters) share one output:
        # a replay leaves them sharing it, as the traced call did
        first: dict = {}
        for _, n in mutations:
            first.setdefault(id(n), (len(outs) + len(first), n))
        e.mutations = tuple((j, first[id(n)][0]) for j, n in mutations)
        self.fwd_outputs = [node_of(o) for o in outs] + [n for _, n in first.values()]
        self.fwd_rng_count = random.position()[1] - self.mark.rng[1]
        self.out_tensors = outs
        self._cut_fwd(self.fwd_outputs)  # fail now rather than at the backward

    def _cut_fwd(self, outputs):
        boundary = self.boundary
        mark = self.mark

        view_bases = self.view_bases

        def slot_of(n):
            j = boundary.get(id(n))
            if j is not None:
                return ("arg", j)
            if id(n) in view_bases:
                raise NotReplayable("reads the storage of a view argument beyond the view "
                                    "(writes part of it)")
            return mark.leaf_slot(n) if n.op in ir.LEAVES else None

        return _cut(outputs, slot_of)

    def _set_forward(self, outputs):
        nodes, positions, slots, _ = self._cut_fwd(outputs)
        if any(s[0] == "rng" and s[1] > self.fwd_rng_count for s in slots):
            raise NotReplayable("the backward draws random numbers the forward reads")
        e = self.entry
        e.fwd = Template("fwd", nodes, positions)
        e.fwd_slots, offsets = _split_rng(slots)
        e.fwd_rng = (offsets, self.fwd_rng_count)
        e.foreign = tuple(s[1] for s in e.fwd_slots if s[0] == "foreign")

    def finish_forward_only(self):
        self._set_forward(self.fwd_outputs)
        self.entry.state = "ready"

    def finish_backward(self, gouts, grads, wrt):
        """Cut the backward just traced by ``autograd.grad``; the entry becomes ready.
        Values the backward reads that do not depend on a grad output (what autograd
        saved, and anything computed from it alone) become extra forward outputs."""
        mark = self.mark
        mark.check_no_sync()
        gout_pos = {id(node_of(g)): i for i, g in enumerate(gouts) if g is not None}
        boundary = self.boundary
        if len(gout_pos) != sum(g is not None for g in gouts) or any(
                k in boundary for k in gout_pos):
            raise NotReplayable("a grad output is not a value of its own")
        have = [(j, g) for (j, _), g in zip(wrt, grads) if g is not None]
        outs = [node_of(g) for _, g in have]
        from_gout = _depends(outs, gout_pos, boundary)
        rng0 = self.bwd_rng0
        serial0 = self.bwd_serial0
        saved: dict = {}

        def slot_of(n):
            k = id(n)
            j = boundary.get(k)
            if j is not None:
                return ("arg", j)
            i = gout_pos.get(k)
            if i is not None:
                return ("gout", i)
            if n.op is ir.RNG and _drawn_after(n, rng0):
                return ("rng", n.value[1] - rng0[1])
            if n.op is ir.RNG or (n.op not in ir.LEAVES and not from_gout[k]) or (
                    n.op is ir.DATA and (mark.serial <= n.serial < serial0 or (
                        n.serial < mark.serial and n.aux is None))):
                # computed or made by the forward (a random draw, a host constant such as
                # arange(T) included), or a tensor from before the call: read it from
                # there, as the traced backward does
                if k not in saved:
                    saved[k] = n
                return ("saved", k)
            return mark.leaf_slot(n) if n.op in ir.LEAVES else None

        bnodes, bpos, bslots, _ = _cut(outs, slot_of)
        n_fwd = len(self.fwd_outputs)
        where = {k: n_fwd + i for i, k in enumerate(saved)}
        self._set_forward(self.fwd_outputs + list(saved.values()))
        e = self.entry
        e.bwd = Template("bwd", bnodes, bpos)
        e.bwd_slots, offsets = _split_rng([("saved", where[s[1]]) if s[0] == "saved" else s
                                           for s in bslots])
        e.bwd_rng = (offsets, random.position()[1] - rng0[1])
        e.grad_of = tuple(j for j, _ in have)
        e.state = "ready"


def _drawn_after(rng_leaf, position) -> bool:
    """Whether an RNG leaf was drawn after stream ``position`` (seed, counter)."""
    seed, counter = rng_leaf.value
    return seed == position[0] and counter > position[1]


def _split_rng(slots) -> tuple:
    """(slots with the random ones made bare, their stream offsets in order)."""
    return (tuple(("rng",) if s[0] == "rng" else s for s in slots),
            tuple(s[1] for s in slots if s[0] == "rng"))


def _depends(outputs, sources, stop) -> dict:
    """id(node) -> whether it depends on one of ``sources`` (not looking past ``stop``)."""
    memo: dict = {}
    stack = [(o, False) for o in outputs]
    while stack:
        n, expanded = stack.pop()
        k = id(n)
        if k in memo:
            continue
        if k in sources:
            memo[k] = True
        elif k in stop or not n.inputs:
            memo[k] = False
        elif not expanded:
            stack.append((n, True))
            stack.extend((x, False) for x in n.inputs if id(x) not in memo)
        else:
            memo[k] = any(memo[id(x)] for x in n.inputs)
    return memo


class _CaptureFn(torch.autograd.Function):
    """The traced first call: the forward runs with grad on inside, so that the backward
    can be traced (and cut) by ``autograd.grad`` when autograd reaches this node."""

    @staticmethod
    def forward(ctx, cap, *tensors):
        with torch.enable_grad():
            out, flat = cap.run()
        ctx.cap = cap
        cap.result = out
        inner = [v for v in flat if isinstance(v, torch.Tensor)]
        cap.inner = inner
        outs = [new_base(node_of(v)) if isinstance(v, LazyTensor) else v.detach() for v in inner]
        nondiff = [o for o, v in zip(outs, inner) if not v.requires_grad]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        cap.flat = flat
        return tuple(outs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *gouts):
        cap = ctx.cap
        pairs = [(o, g) for o, g in zip(cap.inner, gouts) if o.requires_grad]
        wrt = [(j, t) for j, t in enumerate(cap.tensors) if t.requires_grad]
        cap.bwd_rng0 = random.position()
        ir.forget_host_leaves()
        cap.bwd_serial0 = ir.LEAVES_MADE[0]
        grads = torch.autograd.grad([o for o, _ in pairs], [t for _, t in wrt],
                                    [g for _, g in pairs], allow_unused=True)
        if cap.entry.state == "capture":
            try:
                cap.finish_backward([g if o.requires_grad else None
                                     for o, g in zip(cap.inner, gouts)], grads, wrt)
            except NotReplayable as e:
                cap.entry.fail(str(e))
        ctx.cap = None
        out = [None] * len(cap.tensors)
        for (j, _), g in zip(wrt, grads):
            out[j] = g
        return (None, *out)


# ---- replayers: a module's forward, an optimizer's step ------------------------------


class Replayer:
    """Wraps a call (a module's forward, an optimizer's step): replays known signatures,
    captures new ones. ``state()`` gives (a hashable snapshot of what the call reads
    besides its arguments, the tensors it owns: parameters, buffers, optimizer state)."""

    MAX_CAPTURES = 3  # captures of one signature whose backward never came: give up
    # Signatures kept (least recently used dropped): 64, since each size a replay across
    # sizes predicted is one, and a workload's sizes recur (16 rebuilt a prompt-and-answer
    # step's templates at every step of 20 recurring length pairs: 1 ms of a 6 ms step).

    def __init__(self, forward, state, differentiable: bool = True, max_entries: int = 64,
                 sizes: "replay_sizes.SizePolicy | None" = None):
        self.forward = forward
        self.state = state
        self.differentiable = differentiable
        self.entries: collections.OrderedDict = collections.OrderedDict()
        self.max_entries = max_entries
        self.sizes = sizes
        # family key -> traced entries of it [(sizes, entry)] (replay across sizes)
        self.families: collections.OrderedDict = collections.OrderedDict()

    def __call__(self, *args, **kwargs):
        try:
            key, tensors, family, objects = self._signature(args, kwargs)
        except NotReplayable as e:
            METRICS.replay_miss(str(e))
            return self.forward(*args, **kwargs)
        return self._call(key, tensors, family, objects, args, kwargs)

    def _call(self, key, tensors, family, objects, args, kwargs):
        """Replay the entry of signature ``key``, or capture it."""
        e = self.entries.get(key)
        if e is None:
            e = self._from_family(family, tensors) if family is not None else None
            if e is None:
                e = _Entry()
                if family is not None:
                    self._observe(family, e)
            self.entries[key] = e
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)
        else:
            self.entries.move_to_end(key)
        if e.state == "ready" and e.foreign and not foreign_hold(e.foreign):
            METRICS.replay_miss("a tensor from before the call it reads was written in place "
                                "or freed (captured again)")
            e = self.entries[key] = _Entry()
        if e.state == "ready" and not _aliases_hold(e, tensors):
            METRICS.replay_miss("arguments no longer share values as when captured")
            return self.forward(*args, **kwargs)
        if e.state == "ready":
            note_replay(tensors, family, self.sizes)
            METRICS.replays += 1
            if e.synthesized:
                METRICS.replays_across_sizes += 1
            if e.bwd is None:
                _, _, outs = e.run_forward(tensors)
            else:
                outs = _ReplayFn.apply(e, *tensors)
            return e.results(outs, objects)
        if e.state == "never":
            return self.forward(*args, **kwargs)
        return self._capture(e, args, kwargs, tensors, objects)

    def _capture(self, e, args, kwargs, tensors, objects):
        e.captures += 1
        if e.captures > self.MAX_CAPTURES:
            e.fail("its backward was never traced")
            return self.forward(*args, **kwargs)
        try:
            # an argument object's attributes and tensors (by identity) must be left as
            # they were: a replay writes only into the tensors it held
            cap = _Capture(e, self.forward, args, kwargs, tensors,
                           lambda: (self.state()[0], objects_now(objects)), objects)
        except NotReplayable as err:
            e.fail(str(err))
            return self.forward(*args, **kwargs)
        if not (self.differentiable and torch.is_grad_enabled()
                and any(t.requires_grad for t in tensors)):
            out, _ = cap.run()
            if e.state == "capture":
                cap.finish_forward_only()
            return out
        outs = _CaptureFn.apply(cap, *tensors)
        if e.state == "never":   # the forward could not be cut: hand back its own results
            return cap.result
        it = iter(outs)
        flat = [next(it) if isinstance(v, torch.Tensor) else v for v in cap.flat]
        return pytree.tree_unflatten(flat, e.out_spec)

    # -- replay across sizes (``replay_sizes``)

    def _observe(self, family, entry):
        fkey, sizes = family
        seen = self.families.get(fkey)
        if seen is None:
            seen = self.families[fkey] = []
            while len(self.families) > self.max_entries:
                self.families.popitem(last=False)
        seen.append((sizes, entry))
        # keep the newest traces that can still serve
        seen[:] = [o for o in seen if o[1].state != "never"][-replay_sizes.MAX_OBSERVATIONS:]

    def _from_family(self, family, tensors):
        """A ready entry for a new size of a family traced at other sizes, or None."""
        fkey, sizes = family
        # (not over a tensor from outside the call: which one the Python reads may
        # follow the sizes, ``cache[T]``)
        seen = [(s, e) for s, e in self.families.get(fkey, ())
                if e.state == "ready" and not e.foreign]
        if len(seen) < 2:
            return None
        groups: dict = {}
        for s, e in seen:
            skel, ints = replay_sizes.parts(e)
            groups.setdefault(skel, []).append((s, ints, e))
        for skel, obs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            ints = replay_sizes.predict([(s, i) for s, i, _ in obs], sizes, self.sizes)
            if ints is None:
                continue
            e = replay_sizes.rebuild(obs[-1][2], skel, ints, _Entry, Template)
            if e is None:   # (a value computed on the host would come out otherwise)
                continue
            if _fits(e, tensors):
                return e
            METRICS.replay_miss("a replay across sizes predicted shapes the call does "
                                "not have")
        return None

    # -- the guard

    def _signature(self, args, kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        key = [spec, *call_mode()]
        tensors = []
        where = []   # the position of each tensor's entry in the key
        objects = []
        for v in flat:
            if isinstance(v, LazyTensor):
                tensors.append(v)
                where.append(len(key))
                key.append((tuple(v.shape), v.dtype, v.requires_grad))
            elif isinstance(v, torch.Tensor):
                raise NotReplayable("an argument is not on the lazy device")
            elif type(v) in NUMBER:   # (followed once it changes: ``replay_numbers``)
                key.append(NumberEntry((type(v), v)))
            elif type(v) in _CONSTS:
                key.append((type(v), v))
            else:
                objects.append(v)
                _look_into(v, key, tensors, where)
        # which places hold one tensor (a replay writes each of its outputs once)
        key.append(_alias_pattern(tensors))
        snap, owned = self.state()
        for t in owned:
            if not isinstance(t, LazyTensor):
                raise NotReplayable("a parameter or buffer is not on the lazy device")
        key.append(snap)
        family = self._family(key, tensors, where) if self.sizes is not None else None
        return tuple(key), tensors + owned, family, objects

    def _family(self, key, tensors, where):
        """(the key with dynamic sizes replaced by their symbols and the truth value of
        each of the plan's conditions, the sizes), or None when no dim is dynamic."""
        sizes: dict = {}
        fkey = list(key)
        for i, t in enumerate(tensors):
            n = t._st.node
            marks = dict(leaf_marks(n)) if n.op is ir.DATA and not t._vw else None
            if not marks:
                continue
            shape = list(t.shape)
            for d, name in marks.items():
                if sizes.setdefault(name, shape[d]) != shape[d]:
                    return None
                shape[d] = name
            fkey[where[i]] = (tuple(shape), t.dtype, t.requires_grad)
        if not sizes:
            return None
        truths = self.sizes.truths(sizes)
        if truths is None:
            return None
        fkey.append(truths)
        return tuple(fkey), sizes


def note_replay(tensors, family=None, policy=None) -> None:
    """A replay inside a whole step traced with its sizes followed
    (``traced_numbers.Tape.sized``): its Python does not run, so what it would have
    decided by the sizes goes on the step's tape here. Where the analyzer vouches for it
    (``family``: the sizes of its dynamic dims; ``policy``: their ``SizePolicy``), each
    of the plan's conditions at those sizes is a guard; every other dim of a tensor it
    takes that was computed in this step or runs padded must keep its size (a replay
    by its exact signature vouches for no other)."""
    tape = traced_numbers.recording_tape()
    if tape is None or tape.sized is None:
        return
    marked: dict = {}
    if family is not None and policy is not None:
        reads = {name: tape.read(n) for name, n in sorted(family[1].items())}
        try:
            for names, fn in policy._conds:
                bool(fn(*[reads[n] for n in names]))   # (its comparisons: guards)
        except Exception as err:   # (a condition Python cannot follow: not replayed)
            tape.pinned = tape.pinned or f"a condition of the plan ({err})"
        marked = {id(t): dict(leaf_marks(t._st.node)) for t in tensors
                  if t._st.node.op is ir.DATA and not t._vw}
    for t in tensors:
        n = t._st.node
        if n.op is ir.DATA and n.aux is None and not t._vw:
            continue   # (device data made before the step: its shape is the step's key)
        dims = marked.get(id(t), {})
        for d, v in enumerate(t.shape):
            if d not in dims:
                tape.keep(v)


_OBJECT_DEPTH = 4   # how deep an argument object is looked into
_CONTAINERS = (list, tuple, dict, torch.Size)


def object_state(v, path: str, depth: int, key: list, tensors: list, where: list) -> None:
    """Look into an argument that is neither a tensor nor a constant: a key-value cache
    (Hugging Face's ``StaticCache``: a list of layers, each with its key and value tensors
    written in place and a position tensor). Its structure (types, attribute names,
    lengths, plain values) joins the signature ``key``; its lazy tensors join the call's
    inputs, read and written in place as parameters are. NotReplayable, naming the
    attribute, for what it cannot see through (a module, a function, a CPU tensor)."""
    t = type(v)
    if t in _CONSTS:
        key.append((t, v))
    elif isinstance(v, LazyTensor):
        tensors.append(v)
        where.append(len(key))
        key.append((tuple(v.shape), v.dtype, v.requires_grad))
    elif isinstance(v, torch.Tensor):
        raise NotReplayable(f"the argument's {path} is a tensor not on the lazy device")
    elif isinstance(v, Followed):   # (its value is not in its ``__dict__``)
        raise NotReplayable("an argument is a number a whole step's trace follows" if
                            depth == 0 else f"the argument's {path} is a number a whole "
                            "step's trace follows")
    elif depth >= _OBJECT_DEPTH:
        raise NotReplayable(f"the argument's {path} nests deeper than {_OBJECT_DEPTH}")
    elif t in _CONTAINERS:
        items = v.items() if t is dict else enumerate(v)
        key.append((t, tuple(v) if t is dict else len(v)))
        for k, x in items:
            object_state(x, f"{path}[{k!r}]", depth + 1, key, tensors, where)
    elif callable(v) or not hasattr(v, "__dict__") or isinstance(v, type):
        # (a module, a function, a class, a C object: what it holds cannot be seen)
        raise NotReplayable(f"an argument of type {t.__name__}" if depth == 0 else
                            f"the argument's {path} is a {t.__name__}")
    else:
        d = vars(v)
        key.append((t, tuple(d)))
        for k, x in d.items():
            object_state(x, f"{path}.{k}", depth + 1, key, tensors, where)


def _alias_pattern(tensors: list) -> tuple:
    """(position, earlier position, how) of each tensor whose storage is one met before:
    how is True for one tensor in two places, else the two tensors' view chains (a write
    through one changes the other: the template holds for that overlap only)."""
    first: dict = {}
    out = []
    for j, t in enumerate(tensors):
        k = first.setdefault(id(t._st), j)
        if k != j:
            o = tensors[k]
            out.append((j, k, True if o is t else (o._vw, t._vw)))
    return tuple(out)


def objects_now(objects: list, keep: bool = False) -> tuple:
    """What a call must leave unchanged in its argument objects: their structure and
    plain values, and which tensor each attribute holds (``keep``: the tensors
    themselves, not their ids; the structure then includes which places hold one)."""
    key: list = []
    tensors: list = []
    for v in objects:
        _look_into(v, key, tensors, [])
    if keep:
        key.append(_alias_pattern(tensors))
        return tuple(key), tensors
    return tuple(key), tuple(map(id, tensors))


def _look_into(v, key: list, tensors: list, where: list) -> None:
    """``object_state`` of an argument object; whatever its attributes raise is a reason
    not to replay, never an error of the call."""
    n = len(key)
    try:
        object_state(v, type(v).__name__, 0, key, tensors, where)
        hash(tuple(key[n:]))
    except NotReplayable:
        raise
    except Exception as e:
        raise NotReplayable(f"an argument of type {type(v).__name__} could not be looked "
                            f"into ({type(e).__name__})") from None


def outside_ref(n):
    """(a weak reference to the one storage holding DATA leaf ``n``, ``n``): how a replay
    reads a tensor from before its call (``foreign_hold`` checks it); None where ``n`` is
    padded or held by no storage or by several."""
    st = owner_of(n) if n.aux is None else None
    return None if st is None else (weakref.ref(st), n)


def foreign_hold(foreign) -> bool:
    """Whether each storage of ``foreign`` ((a weak reference to it, a leaf)) is alive
    and holds its leaf still: the value a trace read from a tensor from before it."""
    for ref, n in foreign:
        st = ref()
        if st is None or st.node is not n:
            return False
    return True


def _aliases_hold(entry, tensors) -> bool:
    """Whether the tensors that held one value when ``entry`` was captured still do, and
    the views it writes have storages of their own."""
    return all(node_of(tensors[j]) is node_of(tensors[k]) for j, k in entry.aliases) and \
        (not entry.view_writes or _own_storages(tensors, entry.view_writes))


def _own_storages(tensors, positions) -> bool:
    """Whether no other of ``tensors`` shares the storage of those at ``positions`` (a
    write through one would change the other behind a template's back)."""
    if not positions:
        return True
    counts = collections.Counter(id(t._st) for t in tensors)
    return all(counts[id(tensors[j]._st)] == 1 for j in positions)


def _fits(entry, tensors) -> bool:
    """Whether a predicted entry's placeholders (forward and backward) have the shapes of
    the call's arguments and of the constants made again for it."""
    for tmpl, slots in ((entry.fwd, entry.fwd_slots), (entry.bwd, entry.bwd_slots)):
        if tmpl is None:
            continue
        holders = [n for n in tmpl.nodes if n.op is ir.DATA]
        for s, n in zip(slots, holders):
            if s[0] == "arg" and tuple(tensors[s[1]].shape) != tuple(n.shape):
                return False
            if s[0] == "const" and tuple(s[1].shape) != tuple(n.shape):
                return False
    return True


def module_state(module, reads: "AttributeReads | None" = None):
    """(a hashable snapshot of the module tree, its parameters and buffers). ``reads``
    gets what of its attributes can change in place (``StateStamp`` watches it)."""
    snap = [("global hooks", _hooks(vars(_nn_module), "_global", "global"))]
    owned = []
    seen = set()
    reads = AttributeReads() if reads is None else reads
    for m in module.modules():
        d = m.__dict__
        hooks = _hooks(d, "", type(m).__name__)
        if hooks:
            snap.append(("hooks", hooks))
        for k, v in d.items():
            if k not in _MODULE_TABLES and not isinstance(v, _nn_module.Module):
                snap.append((k, attribute_value(v, f"{type(m).__name__}.{k}", reads)))
        for table in (d["_parameters"], d["_buffers"]):
            for k, t in table.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                owned.append(t)
                snap.append((k, id(t), t.requires_grad, tuple(t.shape), t.dtype))
    return tuple(snap), owned


_HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                "_backward_pre_hooks")
# What ``replayable_hook`` sets on a hook (on a bound method's function).
_REPLAYABLE = "__lazy_runtime_replayable__"


def replayable_hook(hook):
    """Declare a module hook replayable (``lr.replayable_hook``; usable as a decorator,
    returns ``hook``): its only effects are on the tensors of the call it sees (a forward
    hook scaling or returning a new output, a backward hook clipping a gradient), so a
    replay, which runs none of the forward's Python, may leave it out as it leaves out
    the forward's own. A call whose modules run any other hook is traced every time
    (its Python side effects, a counter or a log, would be lost). A bound method is
    declared through its function (for every instance)."""
    setattr(getattr(hook, "__func__", hook), _REPLAYABLE, True)
    return hook


def _is_replayable_hook(hook) -> bool:
    """Declared (``replayable_hook``), or transformers' output-capturing hook
    (``output_hidden_states=True``): it appends to the collector its model's forward made
    for the call, which becomes part of that forward's output."""
    if getattr(hook, _REPLAYABLE, False):
        return True
    return (getattr(hook, "__module__", None) == "transformers.utils.output_capturing"
            and getattr(hook, "__name__", None) == "output_capturing_hook")


def _hooks(d: dict, prefix: str, owner: str) -> tuple:
    """The hooks of a module's ``__dict__`` (or, with ``prefix="_global"``, torch's
    global ones), by table, handle and identity, for a signature; NotReplayable names
    the first one not declared replayable."""
    found = []
    for table in _HOOK_TABLES:
        for handle, hook in (d.get(prefix + table) or {}).items():
            if not _is_replayable_hook(hook):
                name = getattr(hook, "__qualname__", type(hook).__name__)
                raise NotReplayable(f"a {owner} {table[1:-1].replace('_', ' ')} "
                                    f"({name}) is registered; lr.replayable_hook declares "
                                    "one that only changes the tensors it is given")
            found.append((table, handle, id(hook)))
    return tuple(found)


_MAX_ITEMS = 256   # items of a container attribute kept by value
_ATTR_DEPTH = 4    # how deep a module attribute is looked into
# a module's own tables (``module_state`` reads them apart)
_MODULE_TABLES = frozenset(("_parameters", "_buffers", "_modules"))


class AttributeReads:
    """What ``attribute_value`` read by value that can change in place, the module's dict
    staying as it was: lists (``StateStamp`` compares their items), dicts and plain
    objects' ``__dict__`` (their versions), CPU tensors (their version counters); and the
    ids of the objects it read (each read once)."""

    __slots__ = ("objects", "lists", "tables", "host")

    def __init__(self):
        self.objects: set = set()
        self.lists: list = []
        self.tables: list = []
        self.host: list = []


def attribute_value(v, where: str, reads: AttributeReads, depth: int = 0):
    """A module attribute by value, for a replay's signature, with its type (``x * 2``
    and ``x * 2.0`` differ): a plain value; a tuple or list (``kernel_size``, weights a
    forward reads), a dict or a plain object (the model's ``config``) item by item; a
    numpy number. Inside it: a tensor, a function or a class by identity (``self.act =
    torch.tanh`` swapped for another), a CPU tensor with its version counter (read into
    the graph, it is a constant of the template); what nests deeper, a C object, by type:
    assumed unchanged. ``reads`` gets what can change in place. A number a whole step's
    trace follows is refused: its value is ``compile_step``'s to link."""
    t = type(v)
    if t in _CONSTS:
        return t, v
    if isinstance(v, Followed):
        raise NotReplayable(f"the module attribute {where} is a number a whole step's "
                            "trace follows")
    if isinstance(v, np.generic):
        return t, v.item()
    if isinstance(v, torch.Tensor):
        if isinstance(v, LazyTensor):
            return "tensor", id(v)
        reads.host.append(v)
        return "tensor", id(v), v._version
    if callable(v) or isinstance(v, type):   # (a function it calls: ``self.act = tanh``)
        return t, id(v)
    if depth >= _ATTR_DEPTH:
        return t, None
    if (t is tuple or t is list or t is torch.Size) and len(v) <= _MAX_ITEMS:
        if t is list:
            reads.lists.append(v)
        return t, tuple(attribute_value(x, where, reads, depth + 1) for x in v)
    if t is dict and len(v) <= _MAX_ITEMS:
        reads.tables.append(v)
        return t, tuple((k, attribute_value(x, where, reads, depth + 1))
                        for k, x in v.items())
    if hasattr(v, "__dict__") and not isinstance(v, (_nn_module.Module, dict)):
        if id(v) in reads.objects:
            return t, id(v)
        reads.objects.add(id(v))
        d = vars(v)
        reads.tables.append(d)
        return t, id(v), tuple((k, attribute_value(x, where, reads, depth + 1))
                               for k, x in d.items())
    return t, None


def _numbers(v) -> int | None:
    """For a hyper-parameter that is a number (an int or a float: not a bool), 0; for a
    non-empty tuple of numbers (Adam's ``betas``), its length; else None."""
    t = type(v)
    if t in NUMBER or isinstance(v, Followed):
        return 0
    if t is tuple and v and all(type(x) in NUMBER or isinstance(x, Followed) for x in v):
        return len(v)
    return None


def _followed(v) -> bool:
    return isinstance(v, Followed) or type(v) is tuple and any(isinstance(x, Followed)
                                                                for x in v)


def _cpu_state_advice(opt, key: str) -> str:
    """Why a CPU state tensor refuses a replay, and what keeps it on the device: the
    ``capturable`` option where the optimizer has one, else ``fused=True`` where it has
    that (Adagrad: its step count is then a device tensor the fused kernel reads)."""
    defaults = getattr(opt, "defaults", {})
    if "capturable" in defaults:
        fix = "capturable=True keeps it on the device"
    elif "fused" in defaults:
        fix = "fused=True keeps it on the device"
    else:
        fix = f"{type(opt).__name__} reads it on the host each step"
    return f"optimizer state '{key}' is on the CPU (a step count: {fix})"


def optimizer_state(opt, numbers: list | None = None):
    """(a hashable snapshot of an optimizer's hyper-parameters and state layout, the
    tensors its step reads and writes: parameters, their grads, the state tensors).

    ``numbers``: where given, a list that gets the place of each hyper-parameter that is
    a number, (group index, key, None), or a tuple of numbers, (group index, key, index)
    for each item; the snapshot then holds their kind, not their values (the caller
    reads those each call: ``compile_step`` and ``compile_optimizer`` follow a learning rate
    a scheduler sets; one followed by a trace, a ``traced_numbers.Followed``, is a number
    too). Without it, a followed one is refused (a whole step's trace follows it)."""
    if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks:
        raise NotReplayable("optimizer step hooks are registered")
    snap = []
    owned = []
    for gi, g in enumerate(opt.param_groups):
        for k, v in g.items():
            if k == "params":
                continue
            n = _numbers(v) if numbers is not None else None
            if n is not None:
                numbers.extend([(gi, k, None)] if n == 0 else [(gi, k, j) for j in range(n)])
                snap.append((k, "number", n))
                continue
            if isinstance(v, torch.Tensor):
                # a learning rate held in a tensor (torch's advice for a schedule under
                # torch.compile: the scheduler fills it in place): read like state
                if not isinstance(v, LazyTensor) or v._vw:
                    raise NotReplayable(f"the hyper-parameter {k} is a tensor that is not "
                                        "a lazy base tensor (compile_optimizer moves one "
                                        "there)")
                owned.append(v)
                snap.append((k, "tensor", id(v)))
                continue
            if _followed(v):   # (a whole step's trace follows it: ``compile_step``)
                raise NotReplayable(f"the hyper-parameter {k} is followed by a whole step's "
                                    "trace")
            if not (type(v) in _SIMPLE_ATTRS or (type(v) is tuple and all(
                    type(x) in _SIMPLE_ATTRS for x in v))):
                raise NotReplayable(f"the hyper-parameter {k} is a {type(v).__name__}")
            snap.append((k, v))
        for p in g["params"]:
            owned.append(p)
            snap.append((id(p), p.requires_grad))
            if p.grad is not None:
                owned.append(p.grad)
                snap.append(("grad", tuple(p.grad.shape), p.grad.dtype))
            state = opt.state.get(p)
            for k, v in sorted(state.items()) if state else ():
                if isinstance(v, torch.Tensor):
                    if not isinstance(v, LazyTensor):
                        raise NotReplayable(_cpu_state_advice(opt, k))
                    owned.append(v)
                    snap.append((k, id(v)))
                else:
                    snap.append((k, v))
    return tuple(snap), owned
