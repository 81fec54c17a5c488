"""The IR: immutable, hash-consed nodes.

A ``Node`` is (op, args, kwargs, inputs) plus its output type (shape, dtype, aux).
``args``/``kwargs`` are the op's arguments with every input replaced by an ``Input(i)``
marker, so they are hashable constants. Nodes are interned: building the same node twice
returns the same object, so identity is structural equality and a graph is a DAG.

Leaves are never interned: ``DATA`` holds a device array (or a host copy staged for the
next barrier that reads it: ``executor.staged``), ``SCALAR`` a Python number that
enters the graph as a runtime input (so changing it does not recompile), ``RNG`` a random
stream position. The structural key of a graph (``linearize``) is the compile-cache key.
"""

from __future__ import annotations

import weakref

DATA = "data"
SCALAR = "scalar"
RNG = "rng"
ERROR = "error"    # the value of a graph that failed: reading it raises the failure
GETITEM = "getitem"
LEAVES = (DATA, SCALAR, RNG, ERROR)
SETTLED = (DATA, ERROR)  # not pending: nothing left to compute


class Input:
    """Marker for the i-th input of a node inside its args template."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i

    def __repr__(self):
        return f"%{self.i}"

    def __reduce__(self):
        return (input_marker, (self.i,))


_MARKERS = [Input(i) for i in range(256)]


def input_marker(i: int) -> Input:
    """The one ``Input(i)``: markers compare by identity (graph keys hash and compare
    many), so each position has one; the table grows for an op of more inputs (a stack of
    512 tensors: before, each call's markers past 255 were new objects, so its graph never
    met its cached key and compiled again at every barrier)."""
    if i >= len(_MARKERS):
        _MARKERS.extend(Input(j) for j in range(len(_MARKERS), i + 1))
    return _MARKERS[i]


def fill(template, values):
    """An args template with each ``Input(i)`` marker replaced by ``values[i]``."""
    t = type(template)
    if t is Input:
        return values[template.i]
    if t is tuple:
        return tuple(fill(x, values) for x in template)
    return template


class Node:
    """One value of the graph. ``shape``/``dtype`` are tuples of them for multi-output ops."""

    # ``owner``, set on DATA leaves only (``tensor.own``): a weak reference to the one
    # storage holding it, False where several have
    __slots__ = ("op", "args", "kwargs", "inputs", "shape", "dtype", "aux", "value", "sig",
                 "born", "serial", "owner", "__weakref__")

    def __repr__(self):
        if self.op in LEAVES:
            return f"<{self.op} {tuple(self.shape) if self.shape is not None else ''} {self.dtype}>"
        return f"<{self.op} {self.args} {self.kwargs} -> {self.shape} {self.dtype}>"

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAVES

    @property
    def pending(self) -> bool:
        return self.op not in SETTLED


# The intern table holds nodes until the next barrier (``clear_interned``): within a step
# equal nodes are one object; after a barrier every live value is device data anyway.
_interned: dict = {}
_op_keys: dict = {}
# Barriers passed so far: a DATA leaf born in the current epoch was copied to the device
# in this step (an input or a host constant), which matters for dynamic dims.
EPOCH = [0]
# Leaves made so far: a leaf's ``serial`` tells whether it was made after some point
# (``replay`` uses it to tell constants made inside a forward from tensors read from outside);
# an op node's is the count when it was made (``dynamic``: was an op made before a constant).
LEAVES_MADE = [0]
# DATA leaf -> (maker, args, kwargs) for constants made on the host by a factory
# (``arange(T)``): a replay at other sizes makes them again (``replay_sizes``).
HOST_RECIPES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# Other constants a replayed call reads (equal in every call of its entry).
REPLAYED_CONSTS: "weakref.WeakSet" = weakref.WeakSet()
# DATA leaf -> a weak reference to the small CPU tensor it copies (``torch.tensor(-inf,
# device=dev)``, an index list torch made a tensor of): one that is gone by the end of a
# whole step was made inside it from Python values, and is a constant by its value.
COPIED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# (LongT5's locality mask, 128 x 384 booleans made on the CPU each call, and VideoMAE's
# sinusoid position table, 1568 x 128 floats from numpy, are such copies)
COPIED_MAX_ELEMENTS = 1 << 20


# Host-made scalars of this trace by recipe: two ``zeros(())`` (an optimizer's step
# counters, batch norms' batch counts) are one value, so what is computed from them is
# one node too. Only 0-d ones: sharing equal arrays (Adam's zero moments) would make a
# first step's graph differ from the next ones', whose moments differ (one compile more).
# Cleared at each barrier and when a replay capture begins (a constant made before it
# must not be taken for one made inside it).
_host_made: dict = {}


def host_leaf(key, shape, make) -> Node:
    """The leaf ``make()`` gives; for a 0-d one, shared by every call with the same
    hashable ``key`` (compared by ``value_key``) since the last barrier or capture start."""
    if len(shape) != 0:
        return make()
    key = value_key(key)
    try:
        n = _host_made.get(key)
    except TypeError:   # an unhashable argument
        return make()
    if n is None:
        n = _host_made[key] = make()
    return n


def value_key(a):
    """``a`` as a key that tells apart what ``==`` does not: ``True``, ``1`` and ``1.0``
    (a factory infers its dtype from them), ``0.0`` and ``-0.0``."""
    t = type(a)
    if t is list or t is tuple:
        return (t, tuple(value_key(x) for x in a))
    return (t, repr(a)) if t is float else (t, a)


# The float arguments a ``_foreach_*`` op applies to every tensor of its list (Adam's
# ``beta1``, ``lr``), by (value, sign): one SCALAR leaf each while the op runs, so its
# per-tensor ops on a shared value (the step counters) are one node. A per-tensor
# constant that happens to equal one shares its leaf, harmlessly (same value, this trace).
SHARED_SCALARS: dict = {}


def forget_host_leaves() -> None:
    _host_made.clear()


def clear_interned() -> None:
    _interned.clear()
    _host_made.clear()


def next_epoch() -> None:
    EPOCH[0] += 1


def op_key(op) -> str:
    """A cheap hashable stand-in for an op in keys (OpOverload hashes in Python)."""
    k = _op_keys.get(id(op))
    if k is None:
        k = _op_keys[id(op)] = str(op)
    return k


def make_node(op, args: tuple, kwargs: tuple, inputs: tuple, shape, dtype, aux=None) -> Node:
    k = _op_keys.get(id(op))
    sig = (k if k is not None else op_key(op), args, kwargs, shape, dtype, aux)
    key = (sig, inputs)
    n = _interned.get(key)
    if n is not None:
        return n
    n = Node()
    n.op = op
    n.args = args
    n.kwargs = kwargs
    n.inputs = inputs
    n.shape = shape
    n.dtype = dtype
    n.aux = aux
    n.value = None
    n.sig = sig
    n.serial = LEAVES_MADE[0]   # (leaves made before it: a leaf of this serial or later is newer)
    if len(_interned) > 1_000_000:  # a very long trace without a barrier
        _interned.clear()
    _interned[key] = n
    return n


def copy_node(n: Node, inputs: tuple) -> Node:
    """A node like op node ``n`` over other ``inputs``, outside the intern table (a
    replay template's body: it must not be merged into the live trace)."""
    return loose_node(n.op, n.args, n.kwargs, inputs, n.shape, n.dtype, n.aux, n.sig)


def loose_node(op, args, kwargs, inputs, shape, dtype, aux=None, sig=None) -> Node:
    """An op node outside the intern table (see ``copy_node``)."""
    c = Node()
    c.op, c.args, c.kwargs, c.inputs = op, args, kwargs, inputs
    c.shape, c.dtype, c.aux, c.value = shape, dtype, aux, None
    c.sig = sig if sig is not None else (op_key(op), args, kwargs, shape, dtype, aux)
    return c


def getitem(node: Node, i: int) -> Node:
    return make_node(GETITEM, (i,), (), (node,), node.shape[i], node.dtype[i])


def leaf(kind: str, value, shape, dtype, aux=None) -> Node:
    """A leaf. A DATA leaf's ``aux`` describes its dynamic dims (see ``dynamic``)."""
    n = Node()
    n.op = kind
    n.args = ()
    n.kwargs = ()
    n.inputs = ()
    n.shape = shape
    n.dtype = dtype
    n.aux = aux
    n.value = value
    n.born = EPOCH[0]
    n.serial = LEAVES_MADE[0]
    LEAVES_MADE[0] += 1
    if kind is DATA:
        n.sig = (kind, shape, dtype) if aux is None else (kind, shape, dtype, aux)
    else:
        n.sig = (kind,)
    return n


def computed_leaf(value, shape, dtype, aux=None) -> Node:
    """A graph's result stored as data: never "copied in this step" (``born`` -1), so
    the padding planner does not guess its dims (a parameter's) to be a length."""
    n = leaf(DATA, value, shape, dtype, aux)
    n.born = -1
    return n


class GraphKey(tuple):
    """A graph's structural key: a tuple that hashes once. A barrier looks its graph's key
    up several times (plans, the executable cache, their LRU moves), and hashing or
    comparing a whole key walks every node's entry: ~45 µs each for the GPT example's
    training step. ``intern_key`` makes equal keys one object, so those lookups compare
    by identity."""

    def __new__(cls, items):
        k = super().__new__(cls, items)
        k._hash = tuple.__hash__(k)
        return k

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if self is other:
            return True
        if type(other) is GraphKey and self._hash != other._hash:
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)


_KEYS: dict = {}
_MAX_KEYS = 512   # (dynamic._PLANS keeps as many)


def forget_keys() -> None:
    _KEYS.clear()


def intern_key(items) -> GraphKey:
    """The one ``GraphKey`` object for ``items`` (one hash and, for a key seen before, one
    full comparison)."""
    key = GraphKey(items)
    k = _KEYS.get(key)
    if k is None:
        if len(_KEYS) >= _MAX_KEYS:   # (only a cost: an equal key made later compares once)
            _KEYS.clear()
        k = _KEYS[key] = key
    return k


class Graph:
    """A linearized graph: ``nodes`` in topological order, ``key`` structural.

    ``key`` is a tuple with one entry per node: its signature and the positions of its
    inputs. Leaves contribute only their kind (and shape/dtype for data), never values.
    """

    __slots__ = ("nodes", "key", "outputs", "data", "data_nodes", "scalars", "rngs", "fresh")


def linearize(outputs: list[Node]) -> Graph:
    # Nodes hash by identity, so they index the dict themselves; the loop's lookups are
    # bound to locals (a transformer step's graph has ~1700 nodes, walked every barrier).
    index: dict = {}
    nodes: list[Node] = []
    entries: list = []
    data, data_nodes, scalars, rngs = [], [], [], []
    fresh = []
    epoch = EPOCH[0]
    stack = [(o, False) for o in reversed(outputs)]
    pop, push = stack.pop, stack.append
    position = index.__getitem__
    while stack:
        n, expanded = pop()
        if n in index:
            continue
        inputs = n.inputs
        if expanded or not inputs:
            index[n] = len(nodes)
            nodes.append(n)
            if inputs:
                entries.append((n.sig, tuple(map(position, inputs))))
            else:
                entries.append(n.sig)
                op = n.op
                if op is DATA:
                    if n.born == epoch:
                        fresh.append(len(data))
                    data.append(n.value)
                    data_nodes.append(n)
                elif op is SCALAR:
                    scalars.append(n.value)
                elif op is RNG:
                    rngs.append(n.value)
                elif op is ERROR:
                    raise n.value
            continue
        push((n, True))
        for i in reversed(inputs):
            if i not in index:
                push((i, False))
    g = Graph()
    g.nodes = nodes
    g.outputs = tuple(map(position, outputs))
    g.key = intern_key((tuple(entries), g.outputs))
    g.data = data
    g.data_nodes = data_nodes
    g.scalars = scalars
    g.rngs = rngs
    g.fresh = frozenset(fresh)
    return g
