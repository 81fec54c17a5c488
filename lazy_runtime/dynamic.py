"""Shape-polymorphic graphs: dynamic dims, buckets, padding, and the symbolic key.

A graph recorded with true sizes (the user's Python sees them) is translated, at the
barrier, into a *padded* graph: every dynamic dim is padded up to its bucket and the true
sizes enter the executable as runtime scalars. Two traces that differ only in the sizes of
dynamic dims (inside the same buckets) translate to the same symbolic key and share one
XLA executable.

Layouts. The padded form of a value is described by its *layout*: one entry per dim, each
a tuple of factors (major first); a factor is an int (a concrete size) or a symbol name (a
dynamic size, padded at the end up to its bucket). ``(8, "T")`` is a dim of 8*T elements
(a view merged a batch of 8 with a padded T): element ``b*Tpad + t`` is padding iff
``t >= T``. A concrete dim is ``(n,)``.

Where symbols come from: ``mark_dynamic`` (or ``compile(model, shapes=plan)``), automatic
dynamic (a graph family seen again with some input sizes, or slice lengths, changed:
``x[:, :int(lengths.max())]``), padded results of
earlier graphs, and -- for data copied to the device in this step (inputs, host
constants such as ``arange(T)``) -- any dim whose size equals exactly one symbol's size.
That last step is a guess; a guess never makes a result wrong, because the padded program
is checked to describe every value of *this* trace (layout sizes equal true sizes) and the
key holds every layout, so a key is only shared by traces whose values co-vary the same
way. A guess that leads to a contradiction is withdrawn and the pass retried (taken back
for an earlier one where that leads to a contradiction no guess explains).

Offsets: a slice, select or scatter of them whose start moves while nothing else changes
(``cache[:, pos] = k``) is marked too (automatic dynamic, ``("offset", node index)``);
its padding rule reads the start at run time (``Cx.offset``: a name beside the symbols in
the executable's sizes, with no bucket), and graphs that differ only in such starts share
one plan (``_OFFSET_PLANS``).

Rules may also *derive* symbols (``Cx.derive``/``Cx.shrink``): ``T-1`` for ``x[:, 1:]``,
``(T+1)//2`` for a strided conv. A derived symbol is a plain symbol of the plan (its true
size enters at run time) whose name spells how it follows from its base, so the key still
tells apart traces that derive it differently.

Each op's padding rule (``ops/padding.py``, ``PAD_RULES``) gives its output layout, its
arguments with symbolic sizes, which inputs to sanitize along which padded axes (with the
identity of the reduction: 0 for sums, -inf for max/softmax, ignore_index for nll), and
optionally a custom lowering (true-size divisors for mean/var). An op that touches a
padded dim and has no rule makes the whole graph compile at its exact shape.
"""

from __future__ import annotations

import collections
import re
import time
import weakref

import jax.numpy as jnp
import numpy as np
import torch

from . import ir, log, transfer
from .config import config
from .errors import LazyRuntimeError
from .metrics import METRICS


class NoPadRule(Exception):
    """This op cannot run padded (the graph compiles at its exact shape)."""

    def __init__(self, op, reason: str, syms=(), retry: bool = True):
        super().__init__(f"{op}: {reason}")
        self.op = op
        self.reason = reason
        self.syms = frozenset(syms)
        self.retry = retry  # a contradiction a wrong guess may have caused


# ---- dims and layouts ---------------------------------------------------------------


def dnorm(factors) -> tuple:
    """Canonical dim: adjacent ints multiplied, ones dropped, ``(1,)`` if nothing is left."""
    out = []
    for f in factors:
        if type(f) is int:
            if f == 1:
                continue
            if out and type(out[-1]) is int:
                out[-1] *= f
                continue
        out.append(f)
    if any(f == 0 for f in out if type(f) is int):
        return (0,)
    return tuple(out) if out else (1,)


def is_sym(dim) -> bool:
    for f in dim:
        if type(f) is str:
            return True
    return False


def sym_of(dim):
    """The symbol dim ``dim`` is (one factor, a symbol), else None."""
    return dim[0] if len(dim) == 1 and type(dim[0]) is str else None


def layout_syms(layout) -> set:
    return {f for d in layout for f in d if type(f) is str}


def has_sym(layout) -> bool:
    for d in layout:
        for f in d:
            if type(f) is str:
                return True
    return False


def concrete(shape) -> tuple:
    return tuple((s,) if s != 1 else (1,) for s in shape)


def dsize(dim, sizes) -> int:
    n = 1
    for f in dim:
        n *= sizes[f] if type(f) is str else f
    return n


def lsize(layout, sizes) -> tuple:
    return tuple(dsize(d, sizes) for d in layout)


class SymSize:
    """A size argument of an op in the padded graph: evaluated to the padded size."""

    __slots__ = ("dim",)

    def __init__(self, dim):
        self.dim = dim

    def __eq__(self, other):
        return type(other) is SymSize and other.dim == self.dim

    def __hash__(self):
        return hash(("SymSize", self.dim))

    def __repr__(self):
        return "*".join(str(f) for f in self.dim)


class RtInt:
    """An int argument that equals ``c`` times the true sizes of ``syms`` (a divisor such
    as mean's element count): it enters the executable at run time, from true sizes."""

    __slots__ = ("c", "syms")

    def __init__(self, c, syms):
        self.c = c
        self.syms = syms

    def __eq__(self, other):
        return type(other) is RtInt and other.c == self.c and other.syms == self.syms

    def __hash__(self):
        return hash(("RtInt", self.c, self.syms))

    def __repr__(self):
        return "*".join([str(self.c)] + list(self.syms))


def sym_or_int(dim):
    return SymSize(dim) if is_sym(dim) else dsize(dim, {})


# ---- bucket policy ------------------------------------------------------------------


def enabled() -> bool:
    return config.buckets not in (None, "off", False)


def policy_of(sym: str | None):
    """The bucket policy of symbol ``sym``: ``config.buckets`` itself, or its entry when
    it is a dict by symbol (primes, which tell apart symbols of one name with different
    sizes, are ignored; ``"*"`` is the fallback, "pow2" without one)."""
    policy = config.buckets
    if isinstance(policy, dict):
        name = (sym or "").rstrip("'")
        policy = policy.get(name, policy.get("*", "pow2"))
    return policy


def bucket(n: int, sym: str | None = None) -> int:
    """The padded size of a dynamic dim of true size ``n`` (of symbol ``sym``) under
    ``config.buckets``."""
    policy = policy_of(sym)
    if n > config.max_bucket or n <= 0 or policy in (None, "off", False):
        return n
    if policy == "pow2":
        p = 1
        while p < n:
            p *= 2
        return min(p, config.max_bucket) if p > config.max_bucket else p
    try:
        for b in sorted(policy):
            if b >= n:
                return b
    except TypeError:   # (not a list of sizes: say which setting, not where it broke)
        raise LazyRuntimeError(
            f"lazy_runtime.config.buckets: {config.buckets!r} is not a bucket policy "
            f"(\"pow2\", \"off\", a list of sizes, or a dict of them by symbol)") from None
    return n


# ---- data leaves: marks and padding -------------------------------------------------

# A DATA leaf's ``aux`` is None, ("mark", ((dim, name), ...)) for an input marked dynamic,
# or ("pad", layout, sizes, buckets) for a padded result (its value has the padded shape;
# ``sizes``/``buckets`` are sorted (symbol, n) tuples).


def leaf_pad(node):
    a = node.aux
    return a if a is not None and a[0] == "pad" else None


def leaf_marks(node):
    a = node.aux
    return a[1] if a is not None and a[0] == "mark" else ()


# Data leaves a graph laid out by automatic marks -> those marks, for the graphs after it.
# A step cut by a read in its middle (``nn.Transformer``'s decoder compares its causal
# mask) leaves the ids it embedded to a later graph, beside activations the earlier one
# left padded: without their marks the ids were exact there, and the embedding's gradient
# met padded rows with exact ids (every such graph compiled exactly).
_LAID: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def laid_marks(node) -> tuple:
    """The automatic marks an earlier graph gave DATA leaf ``node``, or ()."""
    return _LAID.get(node, ()) if _LAID else ()


def _remember_laid(g: ir.Graph, plan) -> None:
    for k in plan.laid_by_marks:
        _LAID[g.data_nodes[k]] = tuple((d, dim[0]) for d, dim in
                                       enumerate(plan.data_layouts[k]) if type(dim[0]) is str)


# Constants made in a tensor's likeness (``ones_like(x)``, ``zeros_like(h)``) -> a weak
# reference to x's node: laid out as x where x's layout is known when the constant is
# reached, not guessed dim by dim (a square output's 5 x 5 ones read as (T, T) where only
# one 5 was T; the graph compiled exactly once the guesses ran out).
_LIKE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def note_like(const: ir.Node, source: ir.Node) -> None:
    """``const`` (a fresh DATA leaf) was made in the likeness of ``source``."""
    if const.shape and tuple(const.shape) == tuple(source.shape):
        _LIKE[const] = weakref.ref(source)


def _like_layout(n: ir.Node, index: dict, layouts: list):
    """The layout of the value constant ``n`` was made like, where it is known here."""
    ref = _LIKE.get(n) if _LIKE else None
    src = ref() if ref is not None else None
    j = index.get(id(src)) if src is not None else None
    if j is None or isinstance(src.dtype, tuple):
        return None
    return layouts[j]


def _factor_shape(layout, env):
    return [env[f] if type(f) is str else f for d in layout for f in d]


def pad_host(a: np.ndarray, layout, sizes: dict, buckets: dict) -> np.ndarray:
    """Pad a true-shaped host array to ``layout``'s padded shape (zeros at the end, or
    ``poison`` where ``config.poison_padding`` asks)."""
    a = a.reshape(_factor_shape(layout, sizes))
    shape = _factor_shape(layout, buckets)
    out = np.full(shape, poison(a.dtype), a.dtype) if config.poison_padding else \
        np.zeros(shape, a.dtype)   # (np.pad: 20x slower)
    out[tuple(map(slice, a.shape))] = a
    return out.reshape(lsize(layout, buckets))


def poison(dtype: np.dtype):
    """What ``config.poison_padding`` fills padding with: NaN, True, or an int a quarter
    of its type's range (an index out of bounds, a sum far off, without overflowing)."""
    if dtype == np.bool_:
        return True
    if np.issubdtype(dtype, np.integer):
        return 1 << (8 * dtype.itemsize - 2 - (1 if np.issubdtype(dtype, np.signedinteger)
                                                else 0))
    return np.nan


def unpad_host(a: np.ndarray, layout, sizes: dict, buckets: dict) -> np.ndarray:
    a = a.reshape(_factor_shape(layout, buckets))
    idx = tuple(slice(0, sizes[f]) if type(f) is str else slice(None)
                for d in layout for f in d)
    return np.ascontiguousarray(a[idx]).reshape(lsize(layout, sizes))


def true_value(node) -> np.ndarray:
    """A DATA leaf's value as a true-shaped host array."""
    a = np.asarray(node.value)   # (a 64-bit array stays 64-bit: no x64 context needed)
    p = leaf_pad(node)
    if p is None:
        return a
    _, layout, sizes, buckets = p
    return unpad_host(a, layout, dict(sizes), dict(buckets))


def mark_dynamic(t, dim: int, name: str | None = None):
    """Mark dim ``dim`` of ``t`` dynamic under the symbol ``name`` (default: ``"d<dim>"``).

    ``t`` is a CPU tensor about to be moved to the lazy device, or a lazy tensor holding
    device data (an input). Graphs using it compile once per bucket of that dim's size.
    Returns ``t``.
    """
    from .tensor import LazyTensor, set_node
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_dynamic: marks a tensor, not {type(t).__name__}")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"mark_dynamic: dim must be an int, not {type(dim).__name__}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"mark_dynamic: name must be a str, not {type(name).__name__}")
    if name is not None and not name.isidentifier():
        raise ValueError(f"mark_dynamic: name must be a symbol such as 'B' or 'T', not "
                         f"{name!r}")
    dim = dim + t.ndim if dim < 0 else dim
    if not 0 <= dim < t.ndim:
        raise IndexError(f"mark_dynamic: dim {dim} out of range for a {t.ndim}-d tensor")
    name = name or f"d{dim}"
    if not isinstance(t, LazyTensor):
        marks = dict(getattr(t, "_lr_dynamic", {}))
        marks[dim] = name
        t._lr_dynamic = marks
        return t
    st = t._st
    n = st.node
    if t._vw:
        raise ValueError("mark_dynamic: mark the input tensor itself, not a view of it")
    if n.op is not ir.DATA:
        raise ValueError("mark_dynamic: the tensor must be an input (device data), not the "
                         "pending result of recorded ops; mark it before using it")
    if leaf_pad(n) is not None:
        return t  # already padded: its dims are dynamic
    marks = dict(leaf_marks(n))
    marks[dim] = name
    new = ir.leaf(ir.DATA, n.value, n.shape, n.dtype, aux=("mark", tuple(sorted(marks.items()))))
    new.born = n.born
    set_node(st, new)
    return t


def marks_of_cpu(t) -> tuple:
    m = getattr(t, "_lr_dynamic", None)
    return tuple(sorted(m.items())) if m else ()


# ---- the symbolic pass --------------------------------------------------------------


class Pad:
    """A padding rule's answer for one node."""

    __slots__ = ("layout", "args", "kwargs", "pre", "fn", "tag")

    def __init__(self, layout, args=None, kwargs=None, pre=(), fn=None, tag=None):
        self.layout = layout
        self.args = args
        self.kwargs = kwargs
        self.pre = pre      # ((input index, axes, fill), ...): sanitize padding first
        self.fn = fn        # custom lowering fn(ctx, env, node, *args, **kwargs)
        self.tag = tag      # what ``fn`` is, for the key


class Cx:
    """What a padding rule may consult: symbol sizes and buckets, and guessing ints."""

    def __init__(self, sizes, buckets, disabled):
        self.sizes = sizes
        self.buckets = buckets
        self.disabled = disabled
        self.bump: dict = {}      # symbol -> the padded size a rule asked for (``Rebucket``)
        self.elastic: set = set()   # derived symbols whose op pads them to any size asked
        self.guesses: list = []   # (site, symbol) in order
        self.firm: set = set()    # sites whose guess is withdrawn last (``adopt``)
        self.kept: dict = {}      # site -> the size kept concrete there (symbol None)
        self.site = None
        self.derived: set = set()  # symbols made by ``derive`` in this pass
        self.shrunk: dict = {}    # derived symbol -> (its base symbol, k): size n(base) - k
        # derived symbol -> its pieces in order (symbols and ints): a cat of dynamic pieces
        self.sums: dict = {}
        # derived symbol -> the merged dim it flattens (a cat piece: ``padding._flat``)
        self.flats: dict = {}
        # derived symbol -> (symbol, k): the outer part of a split (``padding.regroup``)
        self.splits: dict = {}
        self.bases: dict = {}     # derived symbol -> the symbol it follows from
        # derived symbol -> (symbol, g): that symbol grown by a constant g (``T+2``)
        self.grown_from: dict = {}
        # derived symbol -> its true size as a function of the sizes of those before it
        # (a replay at sizes never traced computes them: ``sizes_at``); none for a length
        # read from a value
        self.rules: dict = {}
        self.slice_marks: dict = {}  # node index -> symbol: a slice whose length varies
        self.offset_marks: dict = {}  # node index -> name: a cut whose start varies
        self.offsets: dict = {}   # name -> this trace's start (``offset``)
        self.fixed_pads: frozenset = frozenset()   # node indices: pads to a fixed length
        # node index -> 1 (-1 where it crops: a pad's gradient): pads by varying amounts
        self.grown_pads: dict = {}
        # node index -> the most it grows a dim (0 where it crops): pads whose low amount
        # varies too (TensorFlow's "same" padding before a strided convolution)
        self.shifted_pads: dict = {}
        self.grown: set = set()   # the symbols those pads made (``padding._grown_dim``)
        self.inputs = frozenset(sizes)   # the input symbols (their buckets chosen)
        # true size -> the merged dims of that size in layouts so far (the (2, T) of
        # ``x.reshape(-1, C)``): candidates where an expand's size has no symbol's size
        self.merged: dict = {}
        # (site, size) where ``symbolize`` kept a size concrete, no symbol having it; the
        # symbols derived later with such a size by an op made before that site's
        # constant (``build_plan`` knows them from the start in a try again)
        self.unmatched: list = []
        self.late: set = set()
        self.nodes: list = []   # the graph's nodes (their ``serial``: the order made)
        # ("leaf", constant, dim), ("length", node index) or ("resize", node index,
        # dim) -> (size, size, the two graphs' leaf shapes): sizes automatic dynamic saw
        # change (``fit_symbol``)
        self.follows: dict = {}
        # the data leaves' layouts (None: not laid yet; ``marks``: an input marked dynamic
        # that is not laid yet, its marked layout)
        self.input_layouts = lambda marks=False: ()
        # the graph's family's (misses, second hints) for ``follows`` (``_refit``), and
        # its leaf shapes
        self.refits = None
        self.shapes: tuple = ()
        # (constant, dim) -> its own symbol, where its length followed none when learnt
        self.soft: dict = {}

    def note_merged(self, layout) -> None:
        """Remember the merged dynamic dims (several factors, a symbol among them) of a
        layout just made."""
        for d in layout:
            if type(d) is tuple and len(d) > 1 and any(type(f) is str for f in d):
                seen = self.merged.setdefault(dsize(d, self.sizes), [])
                if d not in seen:
                    seen.append(d)

    def offset(self, node):
        """The start of cut ``node`` (slice, select or their scatter, of a concrete dim)
        as a position spec (``padding._at``) read at run time, where its start varies
        (``offset_marks``); else None."""
        name = self.offset_marks.get(self.site)
        return None if name is None else self._run_time(name, cut_at(node)[1])

    def shift(self, d: int, amount: int):
        """The low amount ``amount`` of the pad at ``site`` along dim ``d`` as a position
        spec (``padding._at``) read at run time: a pad whose low amount varies."""
        return self._run_time(f"@{self.site}:{d}", amount)

    def _run_time(self, name: str, value: int):
        """``value`` as the position spec of an int the executable takes at run time
        (``name``, among ``offsets``: beside the sizes, with no bucket)."""
        self.offsets[name] = value
        return (name, 0)

    def derive(self, name: str, size: int, padded: int, base: str | None = None,
               rule=None) -> str:
        """A new symbol for a size that is a function of other symbols' sizes (``name``
        spells that function, so the key tells traces apart by it): its true size here is
        ``size``, its padded size ``padded``. A name taken with other sizes gets primes.
        ``base``: the symbol it follows from, blamed for a contradiction it meets.
        ``rule``: that function, of a dict of the sizes (``rule(self.sizes) == size``)."""
        if size < 1 or padded < size:
            raise NoPadRule("derive", f"{name} of size {size} (padded {padded})", retry=False)
        padded = max(padded, self.bump.get(name, 0))
        while name in self.sizes and (self.sizes[name], self.buckets[name]) != (size, padded):
            name += "'"
        self.sizes[name] = size
        self.buckets[name] = padded
        self.derived.add(name)
        if self._made_before(size):
            self.late.add(name)
        if base is not None:
            self.bases[name] = base
        if rule is not None and name not in self.rules:
            self.rules[name] = rule
        return name

    def _made_before(self, size: int) -> bool:
        """Was the op at ``site`` made before a constant or an op that kept ``size``
        concrete (in the user's program, its size was known when that one was made: a
        constant laid out at its first use, an expand of a sum's gradient, which the
        graph's order may place before the forward's cat that derives its size)?"""
        if not self.unmatched or type(self.site) is not int or not self.nodes:
            return False
        made = getattr(self.nodes[self.site], "serial", None)
        # (an op's serial counts the leaves made before it: one made after the site's
        # op in the program has a greater one where a leaf was made in between)
        return made is not None and any(
            v == size and (made <= n.serial if n.op is ir.DATA else made < n.serial)
            for j, v in self.unmatched if type(j) is int
            for n in [self.nodes[j]] if getattr(n, "serial", None) is not None)

    def derived_info(self, name: str) -> tuple:
        """What ``derive`` made ``name`` of: (size, padded size, base, rule)."""
        return self.sizes[name], self.buckets[name], self.bases.get(name), \
            self.rules.get(name)

    def origins(self, syms) -> frozenset:
        """``syms`` and the symbols they were derived from (``derive``'s ``base``)."""
        out = set(syms)
        todo = list(syms)
        while todo:
            b = self.bases.get(todo.pop())
            if b is not None and b not in out:
                out.add(b)
                todo.append(b)
        return frozenset(out)

    def follow(self, root: str, v: int) -> dict:
        """The sizes of ``root`` and of the symbols derived from it alone (by their
        rules) where ``root`` has size ``v``."""
        n = {root: v}
        for name, rule in self.rules.items():
            try:
                n[name] = rule(n)
            except (KeyError, ArithmeticError):   # (another symbol's, or none at v)
                pass
        return n

    def shrink(self, sym: str, k: int) -> str:
        """The symbol of size ``n(sym) - k`` (``x[:, 1:]``, ``x[:, :-1]``, a valid conv),
        padded like ``sym``: its elements keep their positions, so it costs no copy."""
        if k == 0:
            return sym
        base, k0 = self.shrunk.get(sym, (sym, 0))
        name = self.derive(f"{base}-{k0 + k}", self.sizes[base] - k0 - k, self.buckets[base],
                           base, rule=lambda n, b=base, k=k0 + k: n[b] - k)
        self.shrunk[name] = (base, k0 + k)
        return name

    def scaled(self, sym: str, a: int, b: int) -> str:
        """The symbol of size ``a * n(sym) + b`` (a at least 1), padded ``a * bucket + b``
        (a transposed convolution's output, ``2*H``; XLNet's 2T relative positions): its
        true elements first, as ``sym``'s. Of ``a`` 1 and ``b`` at most 0, ``shrink``; of
        ``a`` 1, ``grow``."""
        if a == 1:
            return self.shrink(sym, -b) if b <= 0 else self.grow(sym, b, self.buckets[sym] + b)
        name = f"{a}*{sym}" + (f"{b:+d}" if b else "")
        return self.derive(name, a * self.sizes[sym] + b, a * self.buckets[sym] + b, sym,
                           rule=lambda n: a * n[sym] + b)

    def grow(self, sym: str, g: int, padded: int) -> str:
        """The symbol ``sym+g`` (g over 0), padded to ``padded``: grown from ``sym``, so a
        cut of g from it is ``sym`` again (``padding._ungrown``)."""
        name = self.derive(f"{sym}+{g}", self.sizes[sym] + g, padded, sym,
                           rule=lambda n: n[sym] + g)
        self.grown_from[name] = (sym, g)
        return name

    def stepped(self, sym: str, c: int, k: int) -> str:
        """The symbol ``(sym + c) // k`` (k at least 2): a slice of step k's length, a
        resampling to half a size; padded to ``ceil(bucket / k)`` whatever ``c``, so that
        slices from different starts cat (YOLO's space-to-depth, ``x[..., ::2]`` beside
        ``x[..., 1::2]``)."""
        name = self.derive(floor_name(sym, c, k), (self.sizes[sym] + c) // k,
                           -(-self.buckets[sym] // k), sym, rule=lambda n: (n[sym] + c) // k)
        if c == 0 and self.buckets[sym] % k == 0:
            # (``sym // k`` merges back into ``sym`` with k, as a view's split does: a
            # constant of ``T // w`` chunks of w, viewed as T, Longformer's scores)
            self.splits.setdefault(name, (sym, k))
        return name

    def fit_symbol(self, key, v: int, site, multiples=True, prefer=None):
        """Where ``key`` (``("leaf", constant, dim)``; ``("length", node index)``, a moving
        window's; ``("resize", node index, dim)``, a resampling's size) went from u to v
        in the two graphs automatic dynamic compared (``_follow_hints``), the dim of a
        symbol known here that did so as ``a * n + b`` (a a whole number, at least 1) and
        is of size ``v`` here (``a * n`` cut by ``-b`` where b is negative, as a slice of
        it is: XLNet's ``2T - 1`` positions; the Conformer's ``2T' - 1`` of a T' its
        convolutions derived), the fit of the smallest ``|b|`` first (a guess, withdrawn
        at ``site``); else None. Unless ``multiples``, None where that fit is a multiple
        (b 0, a over 1), as a merged dim of the graph's may be (``B*T`` rows, laid out as
        (B, T) where a view made that dim). ``prefer``: a symbol whose fits, and those of
        the symbols of the input symbols it was derived from, come first where all of them
        are floors (a resampling's size follows the dim it resamples: ``(W + 1) // 2``,
        not ``H//2 + 1``, which fitted two sizes as well); among ``a * n + b`` fits the
        smallest ``|b|`` still (MobileViT's map, whose size changes with a parity, fits
        none of them for good)."""
        hint = self.follows.get(key)
        if hint is None:
            return None
        # (where the symbols laid out so far explain none, those of the inputs marked
        # dynamic too: a constant the graph reaches before them, Longformer's zeros of
        # T // w chunks)
        fits = self._fits(hint, v) or self._fits(hint, v, marks=True)
        if not fits and self.refits is not None and key[1:] not in self.soft:
            fits = self._refit(key, v)
        if not fits:
            return None
        # (the others are that fit again, worse: 4*(T+1)-4)
        kin = self.origins((prefer,)) - self.derived if prefer in self.sizes else set()
        ours = [f for f in fits if self.origins((f[4],)) & kin]
        if ours and all(f[0] > 1 for f in ours):   # (only floors of its own: those first)
            fits = ours
        k, _, a, _, sym, b = min(fits)
        if b == 0 and a > 1 and not multiples:
            return None   # (a multiple: ``symbolize``'s merged dims first)
        if ((self.site, site), sym) in self.disabled:
            return None
        self.guesses.append(((self.site, site), sym))
        # (withdrawn after the guesses of sizes kept concrete: learnt from two graphs and
        # met again here, a fit is the likelier of two contradicting guesses)
        self.firm.add((self.site, site))
        if k > 1:
            return (self.stepped(sym, b, k),)
        base = self.scaled(sym, a, max(b, 0))
        return (self.shrink(base, -b) if b < 0 else base,)

    def _fits(self, hint, v: int, marks: bool = False) -> list:
        """``(1, |b|, a, order, symbol, b)`` for each symbol that went as ``a * n + b``
        where hint ``(u, w, traces)``'s size went from u to w, and gives ``v`` here;
        ``(k, |c|, 1, order, symbol, c)`` for each that went as ``(n + c) // k`` (k from 2
        to ``FLOOR_FITS``, |c| under k: a resampling to ``H // 2``). ``marks``: the
        symbols of inputs marked dynamic and not laid out yet are candidates too."""
        u, w, traces = hint
        then = [self._sizes_in(t, marks) for t in traces]
        moved = [(order, sym, then[0][sym], then[1][sym])
                 for order, sym in enumerate(self.sizes)
                 if then[0].get(sym) not in (None, then[1].get(sym)) and sym in then[1]]
        fits = []
        for order, sym, n1, n2 in moved:
            a, r = divmod(w - u, n2 - n1)
            b = u - a * n1
            if r == 0 and a >= 1 and a * self.sizes[sym] + b == v:
                fits.append((1, abs(b), a, order, sym, b))
        # (c from the first size: (n1 + c) // k == u holds for k values of c only)
        return fits + [(k, abs(c), 1, order, sym, c) for order, sym, n1, n2 in moved
                       for k in range(2, FLOOR_FITS + 1)
                       for c in range(max(1 - k, u * k - n1), min(k, u * k - n1 + k))
                       if (n2 + c) // k == w and (self.sizes[sym] + c) // k == v]

    def _refit(self, key, v: int) -> list:
        """``_fits`` of size ``v`` of ``key`` from its family's second hint, where its
        first explains none: the sizes it had in the last graph the first did not explain
        and here (a length whose formula changes with a size's parity: Funnel's relative
        positions, ``2T`` at an even T, ``2T+1`` at an odd one). Where none fits, this
        graph is that last one."""
        misses, refits = self.refits
        fits = self._fits(refits[key], v) if key in refits else []
        last = misses.get(key)
        if not fits and last is not None and last[0] != v:
            hint = (last[0], v, (last[1], self.shapes))
            fits = self._fits(hint, v)
            if fits:
                refits[key] = hint
        if not fits:
            misses[key] = (v, self.shapes)
        return fits

    def _sizes_in(self, shapes, marks: bool = False) -> dict:
        """The sizes the symbols known here had in a graph of leaf shapes ``shapes``:
        the inputs' read off their dims (``marks``: those not laid out yet off their
        marked layouts), the derived by their rules (where they have one)."""
        out = {}
        for k, lay in enumerate(self.input_layouts(marks)):
            for d, dim in enumerate(lay or ()):
                if len(dim) == 1 and type(dim[0]) is str and dim[0] not in self.rules \
                        and k < len(shapes) and d < len(shapes[k]):
                    out.setdefault(dim[0], shapes[k][d])
        for name, rule in self.rules.items():
            try:
                out[name] = rule(out)
            except (KeyError, ArithmeticError):
                pass
        return out

    def symbolize(self, v: int, site, merged=False, fallback=None):
        """The dim for size ``v`` of an op argument: a symbol of size v, or v itself.
        Symbols derived in this graph (the T-1 of ``x[:, 1:]``) are candidates only when
        no other is; a candidate withdrawn at this site lets the next one be tried. Where
        two symbols have size v (a batch of 8 beside a prompt of 8, a square image's H
        and W), v itself is tried first (16 labels beside a 16 x 16 image), then each
        symbol in turn where a contradicting symbol has size v. Last, where ``merged``
        (an expand's size), a merged dim of size v (the (2, T) of
        ``x.reshape(-1, C)``: its sum's gradient expanded to 2T rows); where ``merged``
        is "after", v itself first and the merged dim once that is withdrawn (a
        constant's dim: the (H, W) pixels of attention over an image, the gradient's
        zeros of a packed projection; but 16 embedding rows beside 2 x 8 tokens). Any
        guess is right for this trace, whose sizes the padded graph is checked against; a
        wrong one meets a contradiction, or keys an executable that only traces guessing
        alike share (a coincidence can cost an executable of its own, never a wrong
        value). ``fallback``: where no symbol or merged dim has size v, a function of no
        arguments giving a dim to try first, or None."""
        if v <= 1:
            return (v,)
        at = (self.site, site)
        after = merged == "after"
        merged = self.merged.get(v, ()) if merged else ()
        for tier in (sorted(set(self.sizes) - self.derived), sorted(self.derived), merged):
            # (a merged dim from an earlier try may hold a symbol not derived yet here)
            cands = [s for s in tier if self.sizes[s] == v] if tier is not merged else \
                [d for d in tier if all(type(f) is not str or f in self.sizes for f in d)]
            if len(cands) > 1 and (at, None) not in self.disabled \
                    and not (tier is not merged and self._one_length(cands)):
                self.guesses.append((at, None))
                self.kept[at] = v
                return (v,)
            if cands and tier is merged and after and (at, None) not in self.disabled:
                self.guesses.append((at, None))
                self.kept[at] = v
                return (v,)
            cands = [s for s in cands if (at, s) not in self.disabled]
            if cands:
                self.guesses.append((at, cands[0]))
                return cands[0] if type(cands[0]) is tuple else (cands[0],)
        dim = fallback() if fallback is not None else None
        if dim is not None:
            return dim
        self.unmatched.append((self.site, v))
        return (v,)

    def _one_length(self, syms) -> bool:
        """Are derived symbols ``syms`` one length under names of their own, all functions
        of one symbol (their rules) and padded alike (``(T+1)//2`` and ``(T+2)//2`` at
        an odd T: a size of theirs is either, never a constant)?"""
        if not all(s in self.derived and s in self.rules for s in syms):
            return False   # (a pad's own symbol, ``W+pad1``, follows no rule)
        roots = {frozenset(self.origins((s,))) - self.derived for s in syms}
        return len(roots) == 1 and len({self.buckets[s] for s in syms}) == 1

    def adopt(self, v: int, site, dim, firm=False):
        """``dim`` for size ``v`` at ``site`` where it is a dim of that size (a dynamic
        one is a guess, withdrawn like ``symbolize``'s; a ``firm`` one after every other
        suspect); else None."""
        if dim is None or dsize(dim, self.sizes) != v:
            return None
        if not is_sym(dim):
            return dim
        at = (self.site, site)
        if (at, dim) in self.disabled:
            return None
        self.guesses.append((at, dim))
        if firm:
            self.firm.add(at)
        return dim

    def runtime_int(self, v: int, layouts):
        """``v`` as c * (product of some symbols' true sizes) when it is the element count
        of some of ``layouts``' factors (a mean's divisor): the subset with the most
        symbols wins, c being the product of its concrete factors; ``v`` itself when no
        subset counts ``v`` elements."""
        import itertools
        factors = [f for lay in dict.fromkeys(layouts) for d in lay for f in d if f != 1][:12]
        best = None
        for r in range(1, len(factors) + 1):
            for sub in itertools.combinations(factors, r):
                syms = tuple(f for f in sub if type(f) is str)
                c = 1
                for f in sub:
                    c *= f if type(f) is int else 1
                if syms and c * dsize(syms, self.sizes) == v and (
                        best is None or len(syms) > len(best.syms)):
                    best = RtInt(c, syms)
        return v if best is None else best


class Refusal(str):
    """A plan's answer where the graph compiles exactly: the op's name (``exact_compiles``
    counts by it) and why its rule refused (``reason``, for the recompile reason)."""

    def __new__(cls, op: str, reason: str):
        self = super().__new__(cls, op)
        self.reason = reason
        return self


class Rebucket(Exception):
    """A padding rule's request: input symbol ``sym`` padded to at least ``size`` (a value
    grown from it, ``cat([ids, new])``, entered a bucket it had not: padding the base
    there too keeps one executable for both sizes of the boundary)."""

    def __init__(self, sym: str, size: int):
        super().__init__(sym, size)
        self.sym, self.size = sym, size


class SymPlan:
    # laid_by_marks: the data leaves laid out by automatic marks (``laid_marks``)
    __slots__ = ("key", "layouts", "syms", "sizes", "buckets", "pads", "data_layouts",
                 "laid_by_marks", "exe", "n_ops", "rules", "late")


MAX_RETRIES = 48


def build_plan(g: ir.Graph, fresh: frozenset, auto: dict):
    """The padded translation of ``g`` (a SymPlan), or the op forcing an exact compile
    (a string), or None when ``g`` has no dynamic dim at all."""
    disabled: frozenset = frozenset()
    # (the guesses withdrawn before a contradiction, its other suspects): a withdrawal
    # that leads to a contradiction no guess explains is taken back for the next suspect
    # (the latest guess is not always the wrong one: ``zeros(24, 5)`` read as (24, n)
    # when n = 5, where the expand's n after it was right)
    choices: list = []
    last = None
    bump: dict = {}   # input symbol -> the bucket a value grown from it asked for
    # merged dims an earlier try made: candidates from the start (an expand placed before
    # the view that merges B and T: a sum's gradient, ``x.reshape(-1, C).sum()``)
    merged: dict = {}
    # symbols derived in an earlier try after a size of theirs was kept concrete for want
    # of one: known from the start (a constant laid out before the op that derives its
    # size: ``zeros(B, C, H, W//2+1)`` written before the ``rfft2`` it receives, first
    # in the graph's order). A plan that derived such a symbol is built again with it
    # known; the first plan stands where that try finds none.
    early: dict = {}
    found = None
    for _ in range(MAX_RETRIES):
        try:
            plan = _build(g, fresh, auto, disabled, bump, merged, early)
            late = _unknown(plan.late, early) if plan else {}
            if not late:
                return plan
            found = found or plan
            early = {**early, **late}
            continue
        except (Rebucket, NoPadRule) as e:
            if type(e) is Rebucket:
                if e.sym not in bump:
                    bump[e.sym] = e.size
                    continue
                # (padded further once already: a size that grows with its own padding
                # would double at every try, the padded graph with it)
                e = _refusal_at(e, f"{e.sym} padded past its bucket again (to {e.size})",
                                {e.sym})
            last = e
            if not e.retry:
                break
            if any(d not in merged.get(v, ()) for v, ds in e.cx.merged.items() for d in ds):
                merged = {v: list(ds) for v, ds in e.cx.merged.items()}
                continue
            late = _unknown(_late_info(e.cx), early)
            if late:
                early = {**early, **late}
                continue
            syms = e.cx.origins(e.syms)
            # (a size kept concrete is a suspect where a contradicting symbol has it)
            seen = {e.cx.sizes[s] for s in syms if s in e.cx.sizes}
            # (or a merged dim of them has: a constant's (H, W) pixels kept at H * W)
            seen |= {v for v, ds in e.cx.merged.items()
                     if any(f in syms for d in ds for f in d)}
            # (in the order guessed: constants are laid out at their first use, so a
            # later node's may be guessed first; firm guesses are withdrawn last)
            firm = e.cx.firm
            blame = sorted(((site, s) for site, s in e.cx.guesses
                            if site in e.prov and (site, s) not in disabled
                            and (not syms or s in syms or type(s) is tuple
                                 and any(f in syms for f in s)
                                 or s is None and e.cx.kept[site] in seen)),
                           key=lambda t: t[0] not in firm)
            if blame:   # withdraw the latest guess the contradicting values came from
                choices.append((disabled, blame[:-1]))
                disabled = disabled | {blame[-1]}
                continue
            while choices and not choices[-1][1]:
                choices.pop()
            if not choices:
                break
            before, suspects = choices.pop()
            choices.append((before, suspects[:-1]))
            disabled = before | {suspects[-1]}
    if found is not None:
        return found
    return Refusal(str(last.op), last.reason) if last is not None else "?"


def _late_info(cx) -> dict:
    """``{symbol: Cx.derived_info}`` of the symbols ``cx`` derived after a size of
    theirs was kept concrete for want of one (``Cx.late``)."""
    return {s: cx.derived_info(s) for s in cx.late}


def floor_name(sym: str, c: int, k: int) -> str:
    """The name of the symbol ``(sym + c) // k``: one spelling for one function, so that a
    slice's, a resampling's and a window op's counts of the same size meet as one."""
    return f"({sym}{c:+d})//{k}" if c else \
        f"{sym}//{k}" if sym.isidentifier() else f"({sym})//{k}"


def _unknown(late: dict, early: dict) -> dict:
    """Those of ``late`` a try did not know from the start (``early``)."""
    return {s: i for s, i in late.items() if s not in early}


def _refusal_at(failed, reason: str, syms) -> NoPadRule:
    """A refusal (its ``reason``, blaming ``syms``) of the op where try ``failed``."""
    cx = failed.cx
    e = NoPadRule(cx.nodes[cx.site].op if type(cx.site) is int else "?", reason, syms)
    e.cx, e.prov = cx, failed.prov
    return e


_DERIVED = re.compile(r"[-+*/()'~]")   # in a derived symbol's name (``Cx.derive``)


def _own_name(sym: str, v: int, sizes: dict) -> str:
    """``sym``, primed until no other size holds the name (one symbol of two sizes in a
    graph: two leaves marked alike with different lengths)."""
    while sym in sizes and sizes[sym] != v:
        sym = sym + "'"
    return sym


def _leaf_layouts(g, fresh, auto):
    """(sizes, layouts of the DATA leaves from marks, padding and automatic dynamic,
    partial layouts of the constants laid out at their use: their marked dims, None at
    the others)."""
    sizes: dict = {}
    layouts: dict = {}
    partial: dict = {}   # leaf index -> its marked dims, None where laid out at its use
    derived: dict = {}
    k = 0
    for i, n in enumerate(g.nodes):
        if n.op is not ir.DATA:
            continue
        p = leaf_pad(n)
        if p is not None:
            _, lay, sz, _b = p
            sz = dict(sz)
            rename = {}
            for s, v in sz.items():
                # a symbol derived by an earlier graph gets a name of this graph's own: a
                # loop that grows a value by one each step (``cat([ids, new])``) would
                # otherwise derive ``T+1``, then ``T+1+1``, a new key every step
                t = _own_name(derived.setdefault(s, f"~{len(derived)}")
                              if _DERIVED.search(s) else s, v, sizes)
                rename[s] = t
                sizes[t] = v
            if any(a != b for a, b in rename.items()):
                lay = tuple(tuple(rename.get(f, f) if type(f) is str else f for f in d)
                            for d in lay)
            layouts[i] = lay
        else:
            marks = dict(leaf_marks(n) or laid_marks(n))
            later = False   # (a constant of a dim laid out at its use: ``_follow_hints``)
            for key, s in auto.items():
                if key[0] == k:
                    marks.setdefault(key[1], s)
                later = later or key[:2] == ("leaf", k)
            if marks:
                lay = []
                for d, v in enumerate(n.shape):
                    s = marks.get(d)
                    # a dynamic dim of size 1 stays concrete (one compile of its own per
                    # bucket of the others): a view cannot tell whether a factor of 1
                    # merges with its neighbour or goes away, and broadcasting treats
                    # it apart from every other size (torch.compile specializes 0 and 1
                    # for the same reasons)
                    if s is None or v <= 1:
                        lay.append(None if later else (v,))
                        continue
                    t = _own_name(s, v, sizes)
                    sizes[t] = v
                    lay.append((t,))
                (partial if later else layouts)[i] = tuple(lay)
        k += 1
    return sizes, layouts, partial


def _lockstep(sizes: dict, buckets: dict) -> None:
    """Values grown by earlier graphs (``~`` symbols) one apart in length, a decoding
    loop's ids and its cache: the shorter is padded to the bucket the longer is in (as
    its size, or as a value grown from it, asked). The shorter has that size on the next
    step, so both steps run one executable: one compile per bucket, not two (``generate``
    with a dynamic cache)."""
    for s, v in sizes.items():
        if s[0] == "~":
            for t, w in sizes.items():
                if w == v + 1 and t[0] == "~" and buckets[t] > buckets[s]:
                    buckets[s] = buckets[t]


def _build(g, fresh, auto, disabled, bump, merged, early):
    from .ops.registry import PAD_RULES
    sizes, marked, partial = _leaf_layouts(g, fresh, auto)
    slice_marks = {k[1]: s for k, s in auto.items() if k[0] == "slice"}
    offset_marks = {k[1]: s for k, s in auto.items() if k[0] == "offset"}
    if not sizes and not slice_marks and not offset_marks:
        return None
    buckets = {s: max(bucket(v, s), bump.get(s, 0)) for s, v in sizes.items()}
    _lockstep(sizes, buckets)
    cx = Cx(sizes, buckets, disabled)
    cx.bump = bump
    soft = cx.soft = {k[1:]: s for k, s in auto.items() if k[0] == "soft"}
    cx.merged = {v: list(ds) for v, ds in merged.items()}
    cx.nodes = g.nodes
    cx.follows = {k: h for k, h in auto.items() if k[0] in ("leaf", "length", "resize")}
    steady = {k[1:]: v for k, v in auto.items() if k[0] == "steady"}
    cx.input_layouts = lambda marks=False: [layouts[i] or (marked.get(i) if marks else None)
                                            for i in data_at]
    if cx.follows:
        fam = _family(g)
        cx.refits = _REFITS.get(fam) or _bounded_put(_REFITS, fam, ({}, {}))
        cx.shapes = tuple(n.shape for n in g.data_nodes)
    for name, (size, padded, base, rule) in early.items():
        cx.derive(name, size, padded, base, rule)
    cx.slice_marks = slice_marks
    cx.offset_marks = offset_marks
    cx.fixed_pads = frozenset(k[1] for k in auto if k[0] == "fixed")
    cx.grown_pads = {k[1]: v for k, v in auto.items() if k[0] == "grow"}
    cx.shifted_pads = {k[1]: v for k, v in auto.items() if k[0] == "shift"}
    index = {id(n): i for i, n in enumerate(g.nodes)}
    count = len(g.nodes)
    layouts: list = [None] * count
    pads: list = [None] * count
    entries: list = [None] * count
    empty = frozenset()
    prov: list = [empty] * count   # guess sites each value's layout depends on
    data_at = [i for i, n in enumerate(g.nodes) if n.op is ir.DATA]
    ordinal = {i: k for k, i in enumerate(data_at)}
    # constants made in this graph are laid out at their first use, when the symbols
    # derived before it are known (a gradient's zeros of a cat's length: the sum symbol)
    waiting = {i for i, k in ordinal.items() if k in fresh and i not in marked}
    cut_inputs: dict = {}   # (op, where it cuts, the input's shape) -> the input's index

    def soft_dims(lay, k, shape):
        """``lay`` with each concrete dim that automatic dynamic learnt of plain input
        ``k`` (``soft``) made that symbol: the labels' own length beside a marked signal,
        where no symbol of the graph has its size. A guess, withdrawn where it meets a
        contradiction (labels of a batch that a marked image keeps concrete)."""
        out = list(lay)
        for d, v in enumerate(shape):
            s = soft.get((k, d))
            if s is None or v <= 1 or is_sym(lay[d]):
                continue
            s = _own_name(s, v, sizes)
            at = (cx.site, ("soft", d))
            if (at, s) in cx.disabled:
                continue
            cx.guesses.append((at, s))
            if s not in sizes:
                sizes[s] = v
                buckets[s] = max(bucket(v, s), bump.get(s, 0))
                cx.inputs = cx.inputs | {s}
            out[d] = (s,)
        return tuple(out)

    def leaf_dim(k, d, v, ndim):
        """Dim ``d`` (of size ``v``) of constant ``k`` (of ``ndim`` dims): the symbol
        its size followed (``Cx.fit_symbol``; before a symbol that merely has size v, a
        coincidence more often: a source as long as the target), else as
        ``Cx.symbolize`` finds it, else, for a vector, a multiple of a symbol it followed
        (XLNet's 2T positions; not the rows of a matrix, ``B*T`` rows of zeros, which a
        view of the graph's lays out as (B, T) on a try after). A matrix's dim that
        followed a symbol and is as long as a merged dim of the graph is that dim before
        any fit or a size of its own (a gradient's zeros of flattened (H, W) pixels: two
        sizes fit some ``a * n + b`` by chance; not 16 embedding rows beside 2 x 8
        tokens, which stay 16). A dim that stayed while the sizes changed
        (``_steady_leaves``) stays concrete first."""
        if v <= 1:
            return (v,)
        site = (cx.site, ("steady", d))
        if steady.get((k, d)) == v and (site, None) not in cx.disabled:
            cx.guesses.append((site, None))
            cx.kept[site] = v
            return (v,)
        at, key = ("follows", d), ("leaf", k, d)
        if ndim > 1 and key in cx.follows and cx.merged.get(v):
            return cx.symbolize(v, ("leaf", d), merged=True)
        return cx.fit_symbol(key, v, at, multiples=ndim == 1) or cx.symbolize(
            v, ("leaf", d), merged="after",
            fallback=(lambda: cx.fit_symbol(key, v, at)) if ndim == 1 else None)

    def lay_leaf(i, n, hint=None, firm=False):
        cx.site = i
        ng = len(cx.guesses)
        lay = marked.get(i)
        if lay is None:
            if hint is None and i in partial:
                hint, firm = partial[i], True
            if ordinal[i] in fresh:
                lay = _like_layout(n, index, layouts) or tuple(
                    (hint and cx.adopt(v, ("like", d), hint[d], firm))
                    or leaf_dim(ordinal[i], d, v, len(n.shape))
                    for d, v in enumerate(n.shape))
            else:
                lay = tuple(m or (v,) for m, v in zip(partial.get(i, ()), n.shape)) \
                    or concrete(n.shape)
            if soft:
                lay = soft_dims(lay, ordinal[i], n.shape)
        layouts[i] = lay
        entries[i] = (ir.DATA, lay, n.dtype)
        if len(cx.guesses) > ng:
            prov[i] = frozenset(site for site, _ in cx.guesses[ng:])

    ng = 0
    try:
        for i, n in enumerate(g.nodes):
            op = n.op
            if op is ir.DATA:
                if i not in waiting:
                    lay_leaf(i, n)
                continue
            in_idx = tuple(index[id(x)] for x in n.inputs)
            for j, x in zip(in_idx, n.inputs):
                if j in waiting:
                    waiting.discard(j)
                    hint, firm = _scatter_hint(n, j, in_idx, layouts, cut_inputs)
                    lay_leaf(j, x, hint, firm)
                    if hint:
                        prov[j] = prov[j] | prov[in_idx[1]]
            cx.site = i
            ng = len(cx.guesses)
            p_in = empty
            for j in in_idx:
                if prov[j]:
                    p_in = p_in | prov[j]
            prov[i] = p_in
            if op is ir.SCALAR or op is ir.RNG:
                layouts[i] = concrete(n.shape)
                entries[i] = (op,)
                continue
            ins = tuple(layouts[j] for j in in_idx)
            if op is ir.GETITEM:
                layouts[i] = ins[0][n.args[0]]
                entries[i] = (ir.GETITEM, n.args[0], in_idx)
                continue
            rule = PAD_RULES.get(op)
            if rule is None:
                if any(has_sym(l) for l in ins if l is not None):
                    # (retried where a guessed symbol reached it: a parameter's gradient
                    # whose 16 channels were read as a 16-pixel H)
                    raise NoPadRule(op, "no padding rule",
                                    {f for l in ins if l is not None for d in l for f in d
                                     if type(f) is str})
                # nothing padded flows in: runs as it is (one layout per output if several)
                p = Pad(tuple(None if s is None else concrete(s) for s in n.shape)
                        if isinstance(n.dtype, tuple) else concrete(n.shape))
            else:
                p = _apply_rule(rule, n, ins, cx)
            if p.args is None:
                p.args = n.args
            if p.kwargs is None:
                p.kwargs = n.kwargs
            _check_sizes(n, p.layout, sizes)
            if op in _FORWARD_CUTS:
                cut_inputs.setdefault((op, cut_at(n), n.inputs[0].shape), in_idx[0])
            layouts[i] = p.layout
            if not isinstance(n.dtype, tuple):
                cx.note_merged(p.layout)
            pads[i] = p
            entries[i] = (n.sig[0], p.args, p.kwargs, p.layout, n.sig[4], n.sig[5], p.pre,
                          p.tag, in_idx)
            if len(cx.guesses) > ng:
                prov[i] = prov[i] | frozenset(site for site, _ in cx.guesses[ng:])
        for j in sorted(waiting):   # (constants no op reads: outputs)
            lay_leaf(j, g.nodes[j])
    except (NoPadRule, Rebucket) as e:
        e.cx = cx
        e.prov = prov[cx.site] | frozenset(site for site, _ in cx.guesses[ng:])
        raise
    # offsets enter the executable beside the sizes (``Env.n``), with no bucket
    syms = tuple(sorted(sizes)) + tuple(cx.offsets)
    plan = SymPlan()
    plan.syms = syms
    plan.sizes = tuple(sizes[s] for s in syms[:len(sizes)]) + tuple(cx.offsets.values())
    plan.buckets = tuple(buckets[s] for s in syms[:len(sizes)]) + (0,) * len(cx.offsets)
    plan.layouts = layouts
    plan.pads = pads
    plan.data_layouts = data_layouts = [layouts[i] for i in data_at]
    plan.laid_by_marks = tuple(k for k, i in enumerate(data_at) if i in marked and
                               g.nodes[i].aux is None and has_sym(data_layouts[k]))
    plan.key = ir.intern_key(("padded", tuple(entries), g.outputs,
                              tuple(zip(syms, plan.buckets))))
    plan.exe = None
    plan.n_ops = 0
    plan.rules = tuple(cx.rules.items())   # (in the order derived)
    plan.late = _late_info(cx)
    return plan


def _scatter_hint(n: ir.Node, j: int, in_idx: tuple, layouts: list, cut_inputs: dict):
    """Where constant ``j`` is the base a slice or select of ``n`` scatters into (a cut's
    gradient: zeros of the uncut size), the likeliest reading of its dims and whether it
    is firm: the layout of what a cut alike of that size cut (the forward's: firm), else
    the dims its source has beside the cut one (None there). Else (None, False)."""
    if n.op not in _SCATTERS or in_idx[0] != j or layouts[in_idx[1]] is None:
        return None, False
    where = cut_at(n)
    cut = cut_inputs.get((_SCATTERS[n.op], where, n.shape))
    if cut is not None and layouts[cut] is not None:
        return layouts[cut], True
    d = where[0]
    src = list(layouts[in_idx[1]])
    if n.op is _aten.select_scatter.default:
        src.insert(d, None)
    else:
        src[d] = None
    return (tuple(src) if len(src) == len(n.shape) else None), False


def _apply_rule(rule, n, ins, cx) -> Pad:
    """``rule``'s answer for node ``n``; a rule that fails otherwise than by refusing (its
    own bug, never the user's: argmax's along dim 0 of a 0-d tensor read a dim it lacks)
    refuses, so the graph compiles at its exact shape (counted in ``exact_compiles``)."""
    try:
        return rule(n, ins, cx)
    except (NoPadRule, Rebucket):
        raise
    except Exception as e:
        raise NoPadRule(n.op, f"its padding rule failed ({type(e).__name__}: {e})",
                        retry=False) from e


def _check_sizes(n, layout, sizes):
    """Every layout must describe its node's true shape (a rule bug fails here, safely)."""
    if isinstance(n.dtype, tuple):
        for lay, shp in zip(layout, n.shape):
            if lay is not None and shp is not None and lsize(lay, sizes) != tuple(shp):
                raise NoPadRule(n.op, f"layout {lay} does not describe shape {shp}")
    elif lsize(layout, sizes) != tuple(n.shape):
        raise NoPadRule(n.op, f"layout {layout} does not describe shape {n.shape}",
                        layout_syms(layout))


# ---- masks at lowering time ---------------------------------------------------------


class Env:
    """Inside the traced function: true sizes (traced scalars) and padded sizes."""

    def __init__(self, syms, buckets, sizes_arr):
        self.buckets = dict(zip(syms, buckets))
        self.n = {s: sizes_arr[i] for i, s in enumerate(syms)}
        self._masks: dict = {}

    def dim_mask(self, dim):
        m = self._masks.get(dim)
        if m is None:
            m = self._masks[dim] = self._dim_mask(dim)
        return m

    def _dim_mask(self, dim):
        m = None
        for f in dim:
            if type(f) is str:
                v = jnp.arange(self.buckets[f]) < self.n[f]
            else:
                v = jnp.ones((f,), bool)
            m = v if m is None else (m[:, None] & v[None, :]).reshape(-1)
        return m

    def mask(self, layout, axes):
        """A boolean array broadcastable to the padded layout, True on valid elements
        along ``axes`` (None when none of them is padded)."""
        out = None
        nd = len(layout)
        for a in axes:
            d = layout[a]
            if not is_sym(d):
                continue
            m = self.dim_mask(d)
            shape = [1] * nd
            shape[a] = m.shape[0]
            m = m.reshape(shape)
            out = m if out is None else out & m
        return out

    def count(self, layout, axes):
        """The true number of elements along ``axes`` (traced)."""
        c = 1
        for a in axes:
            for f in layout[a]:
                c = c * (self.n[f] if type(f) is str else f)
        return c

    def dsize(self, dim):
        return dsize(dim, self.buckets)


def fill_value(fill, dtype):
    if fill == "min":
        return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else (
            False if dtype == jnp.bool_ else jnp.iinfo(dtype).min)
    if fill == "max":
        return jnp.inf if jnp.issubdtype(dtype, jnp.floating) else (
            True if dtype == jnp.bool_ else jnp.iinfo(dtype).max)
    return fill


def sanitize(env, x, layout, axes, fill):
    m = env.mask(layout, axes)
    if m is None:
        return x
    return jnp.where(m, x, jnp.asarray(fill_value(fill, x.dtype), x.dtype))


# ---- automatic dynamic --------------------------------------------------------------

# family (the graph's structure without sizes) -> first data shapes seen, or the auto marks
_FAMILIES: "collections.OrderedDict" = collections.OrderedDict()
_AUTO: dict = {}
# family -> ({key: (size, leaf shapes)}, {key: hint}): ``Cx._refit``'s misses and hints
_REFITS: "collections.OrderedDict" = collections.OrderedDict()
_PLANS: "collections.OrderedDict" = collections.OrderedDict()
# The structure up to a pad seen padding by varying amounts: the graphs of other families
# with that pad grow there too (a crop back, ``y[..., :H, :W]``, is no op where the pad
# added nothing to a dim, so the amounts make families of their own)
_GROWN: "collections.OrderedDict" = collections.OrderedDict()


def _bounded_put(store, key, value, most=256):
    """``store[key] = value``, the oldest entries dropped past ``most``; ``value``."""
    store[key] = value
    while len(store) > most:
        store.popitem(last=False)
    return value


def _family(g: ir.Graph):
    out = []
    for e in g.key[0]:
        if type(e) is tuple and e and type(e[0]) is tuple:
            out.append((e[0][0], e[1]))
        elif type(e) is tuple and e and e[0] is ir.DATA:
            out.append((ir.DATA, len(e[1]), e[2]))
        else:
            out.append(e if type(e) is not tuple else e[0])
    return (tuple(out), g.outputs)


_aten = torch.ops.aten
_SLICE = _aten.slice.Tensor
CUTS = frozenset((_SLICE, _aten.select.int, _aten.slice_scatter.default,
                  _aten.select_scatter.default))
_PAD = _aten.constant_pad_nd.default
# The largest divisor k of a size ``(n + c) // k`` that ``Cx.fit_symbol`` tries (a
# resampling to a fraction of a size computed in Python: ``H // 2``, ``W // 32``)
FLOOR_FITS = 32
# resamplings to a size given (``F.interpolate(x, size=...)``): ``_resized``
RESAMPLES = frozenset((_aten.upsample_nearest1d.default, _aten.upsample_nearest2d.default,
                       _aten.upsample_nearest3d.default, _aten._upsample_nearest_exact1d.default,
                       _aten._upsample_nearest_exact2d.default,
                       _aten._upsample_nearest_exact3d.default, _aten.upsample_linear1d.default,
                       _aten.upsample_bilinear2d.default, _aten.upsample_bicubic2d.default,
                       _aten.upsample_trilinear3d.default))
# Resamplings to a size given (an adaptive pool's: ``interpolate(mode="area")``), whose
# sizes automatic dynamic compares between graphs (``_resized``)
SIZED = RESAMPLES | frozenset((_aten._adaptive_avg_pool2d.default,
                               _aten._adaptive_avg_pool3d.default,
                               _aten.adaptive_max_pool2d.default,
                               _aten.adaptive_max_pool3d.default))
# a scatter -> the cut whose gradient it is
_SCATTERS = {_aten.slice_scatter.default: _SLICE,
             _aten.select_scatter.default: _aten.select.int}
_FORWARD_CUTS = frozenset(_SCATTERS.values())
_WINDOWS = (_SLICE, _aten.slice_scatter.default)


def slice_bounds(args, n: int) -> tuple:
    """Normalized (start, end, step) of a slice (``args``: start, end, step, each may be
    missing or None) of a dim of size ``n``, as torch normalizes them."""
    start, end, step = (tuple(args) + (None,) * 3)[:3]
    lo, hi, _ = slice(start, end).indices(n)
    return lo, max(hi, lo), step or 1


def cut_raw(n: ir.Node) -> tuple:
    """Slice, select or their scatter ``n`` as recorded: (dim, the dim's size, its bounds
    as given: (start, end, step) of a slice, each may be missing or None; (index,) of a
    select)."""
    scatter = n.op is _aten.slice_scatter.default or n.op is _aten.select_scatter.default
    args = n.args[2:] if scatter else n.args[1:]
    size_of = n.inputs[0].shape
    if n.op is _SLICE or n.op is _aten.slice_scatter.default:
        d = (args[0] if args else 0) % len(size_of) if size_of else 0
        return d, size_of[d] if size_of else 1, tuple(args[1:4])
    d = args[0] % len(size_of)
    return d, size_of[d], (args[1],)


def cut_at(n: ir.Node) -> tuple:
    """Where slice, select or their scatter ``n`` cuts its dim: (dim, start, length,
    step), normalized as torch does (a negative start counts from the end, a slice's
    bounds are clipped to the dim); length None for a select."""
    d, size, raw = cut_raw(n)
    if len(raw) == 1:
        return d, raw[0] % size, None, 1
    lo, hi, step = slice_bounds(raw, size)
    return d, lo, len(range(lo, hi, step)), step


def _cuts(g: ir.Graph) -> tuple:
    """(the slices, the cuts) of ``g``. Slices: (node index, (dim, start, step), length)
    of each slice: a length read from a value (``x[:, :n]``, ``n = int(lengths.max())``)
    is a size of the graph that no input shows. Cuts: (node index, (op, dim, length,
    step), start) of each slice, select and scatter of them: a start read from a value
    (``cache[:, pos] = k``, ``x[:, s:s + 8]``) is an offset no input shows; and each
    ``constant_pad_nd``, (node index, (op, result shape), input shape)."""
    slices, cuts = [], []
    for i, n in enumerate(g.nodes):
        if n.op in CUTS:
            d, lo, length, step = cut_at(n)
            cuts.append((i, (n.op, d, length, step), lo))
            if n.op is _SLICE:
                slices.append((i, (d, lo, step), length))
        elif n.op is _PAD:   # (its sizes and amounts: ``_offset_marks``)
            cuts.append((i, (_PAD,), (n.inputs[0].shape, n.shape, tuple(n.args[1]))))
        elif n.op in SIZED and n.args[1] is not None:   # (``_resized``)
            cuts.append((i, (n.op,), tuple(n.args[1])))
    return tuple(slices), tuple(cuts)


def _offset_marks(seen_cuts, cuts, known) -> dict:
    """``{("offset", node index): name}`` for each cut that starts elsewhere than when
    first seen, with the same dim, length and step (a length that changes too is the
    slices' business), and is not in ``known``; ``{("fixed", node index): True}`` for
    each ``constant_pad_nd`` whose input changed size while its result did not (padding
    back to a fixed length: ``F.pad(mask, (0, L - T))``), ``{("grow", node index):
    1}`` for each whose result changed size too, by other amounts (padding up to a
    multiple: ``F.pad(x, (0, (8 - W % 8) % 8))``; -1 where an amount was negative: that
    pad's gradient crops), and ``{("shift", node index): the most it grew a dim}`` for
    each whose low amounts changed too (TensorFlow's "same" padding: ``(0, 1)`` at an
    even size, ``(1, 1)`` at an odd one, before a stride-2 convolution)."""
    out = {}
    for (i, how, a), (_, how2, b) in zip(seen_cuts, cuts):
        if a == b or how != how2:
            continue
        if how[0] is _PAD:
            (in_a, res_a, pad_a), (in_b, res_b, pad_b) = a, b
            if in_a == in_b or len(in_a) != len(in_b):
                continue
            shifts = pad_a[0::2] != pad_b[0::2]
            kind = "grow" if shifts or res_a != res_b and pad_a != pad_b else \
                "fixed" if res_a == res_b else None
            if kind is not None and (kind, i) not in known:
                out[(kind, i)] = -1 if kind == "grow" and min(pad_a + pad_b) < 0 else True
            if shifts and ("shift", i) not in known:
                out[("shift", i)] = max(0, max(p[k] + p[k + 1] for p in (pad_a, pad_b)
                                               for k in range(0, len(p), 2)))
        elif how[0] in CUTS and how[2] != 0 and ("offset", i) not in known:
            out[("offset", i)] = f"@{i}"
    return out


def _auto_marks(g: ir.Graph, inputs: frozenset | None = None) -> dict:
    """Automatic dynamic: the marks of ``g``'s family, learnt when a graph of the same
    structure comes back with only some input sizes, slices' lengths or cuts' starts
    changed: ``{(input, dim): symbol}``, ``{("slice", node index): symbol}``,
    ``{("offset", node index): name}``, ``{("fixed", node index): True}`` (a pad back
    to a fixed length) and ``{("grow", node index): 1 or -1}`` (a pad or crop by an
    amount that varies). Input dims are learnt from the first change;
    slices and offsets also later (a cache read ``k[:, :pos + 1]`` is first seen with
    length 1, which says nothing, and the write at ``pos`` moves from the start).
    ``inputs``: the data leaves (ordinals) whose dims may be learnt, and no slice's
    length (``g`` has marked or padded inputs, whose symbols explain the sizes that
    follow from them: only the plain inputs' own, the labels of a batch whose signal is
    marked, are learnt beside them, ``_dynamic_inputs``); None: every leaf and slice."""
    fam = _family(g)
    shapes = [n.shape for n in g.data_nodes]
    slices, cuts = _cuts(g)
    auto = _grown_before(fam, cuts, _AUTO.get(fam))
    seen = _FAMILIES.get(fam)
    if seen is None or len(seen[0]) != len(shapes):
        _bounded_put(_FAMILIES, fam, (shapes, slices, cuts))
        return auto or {}
    seen, seen_slices, seen_cuts = seen
    known = auto or {}
    new = _offset_marks(seen_cuts, cuts, known)
    groups: dict = {}

    def name(x, y):
        return groups.setdefault((x, y), f"s{len(_AUTO)}_{len(known) + len(groups)}")
    if seen != shapes and not any(type(k[0]) is int for k in known):
        if any(len(a) != len(b) for a, b in zip(seen, shapes)):
            return {}
        host = [n in ir.HOST_RECIPES for n in g.data_nodes]
        traces = (tuple(seen), tuple(shapes))
        follows = _follow_hints(traces, host, known)
        new.update(follows)
        new.update(_steady_leaves(traces, host, known))
        new.update(_moving_windows(traces, seen_cuts, cuts, known))
        new.update(_resized(traces, seen_cuts, cuts, known))
        changed = [(k, d, x, y) for k, (a, b) in enumerate(zip(seen, shapes))
                   if inputs is None or k in inputs
                   for d, (x, y) in enumerate(zip(a, b)) if x != y]
        for k, d, x, y in changed:
            if not host[k]:
                new[(k, d)] = name(x, y)
        inputs_seen = set(groups)
        for k, d, x, y in changed:
            if not host[k]:
                continue
            if ("leaf", k, d) not in follows:
                new[(k, d)] = name(x, y)
            elif (x, y) in inputs_seen:   # (an input's size: ``arange(T)``)
                del new[("leaf", k, d)]
                new[(k, d)] = name(x, y)
            elif not any(a > 0 and (x, y) == (x // a * a, x // a * b) and x // a > 1
                         for a, b in inputs_seen):
                # (its own size where it follows no symbol: a length read from a value;
                # not a multiple of an input's, a merged size: B*T rows of zeros)
                new[("soft", k, d)] = name(x, y)
    short = False
    for (i, how, x), (_, how2, y) in zip(() if inputs is not None else seen_slices, slices):
        if x != y and how == how2 and ("slice", i) not in known:   # the same cut, resized
            if min(x, y) > 1:
                new[("slice", i)] = name(x, y)
            else:
                short = True
    if short:   # a length of 0 or 1 tells nothing: compare the next graph with this one
        _FAMILIES[fam] = (shapes, slices, cuts)
    if not new:
        return known
    return _learnt(fam, {**known, **new}, new)


def _follow_hints(traces, host, known) -> dict:
    """``{("leaf", k, d): (u, v, traces)}`` for each dim d of a constant the step made
    (``host``) whose size changed from u to v in the two graphs' leaf shapes ``traces``:
    such a dim is laid out at its use, where the symbol it follows as ``a * n + b`` in
    both graphs, an input's or one derived from them, is known (``Cx.fit_symbol``: XLNet's
    ``arange(T, -T, -1)`` of 2T positions, its gradient's zeros of ``2T - 1``, a class
    token's ``arange(T + 1)``, the ``B*T*k`` picks of a mixture of experts)."""
    return {("leaf", k, d): (u, v, traces)
            for k, (p, q) in enumerate(zip(*traces)) if host[k]
            for d, (u, v) in enumerate(zip(p, q))
            if u != v and ("leaf", k, d) not in known}


def _steady_leaves(traces, host, known) -> dict:
    """``{("steady", k, d): size}`` for each dim of a constant the step made (``host``)
    whose size stayed in the two graphs' leaf shapes ``traces`` while inputs' sizes
    changed: laid out concrete at that size before any symbol of it (DETR's ``arange(8)``
    sine features beside a map 8 high, whose step-2 slices would derive symbols of it; a
    guess, withdrawn on a contradiction: a batch that stayed while the length changed)."""
    return {("steady", k, d): u
            for k, (p, q) in enumerate(zip(*traces)) if host[k] and len(p) == len(q)
            for d, (u, v) in enumerate(zip(p, q))
            if u == v and u > 1 and ("steady", k, d) not in known}


def _moving_windows(traces, seen_cuts, cuts, known) -> dict:
    """``{("offset", i): name, ("length", i): (u, v, traces)}`` for each slice whose start
    and length (u, then v) both changed, ``traces`` the two graphs' leaf shapes: a window
    centred in a table, the relative positions of the Conformer (ESPnet, transformers'
    Wav2Vec2-Conformer: ``pe[:, c - T + 1:c + T]``), cut at a start read at run time, its
    length the symbol it follows (``Cx.fit_symbol``); and ``("offset", i)`` for each
    slice_scatter alike (such a window's gradient)."""
    out = {}
    for (i, how, lo), (_, how2, lo2) in zip(seen_cuts, cuts):
        if how[0] not in _WINDOWS or how2[0] is not how[0] or lo == lo2 \
                or how[1] != how2[1] or how[2] == how2[2] or how[3] != 1 or how2[3] != 1 \
                or ("offset", i) in known:
            continue
        if how[0] is _SLICE:
            out[("length", i)] = (how[2], how2[2], traces)
        out[("offset", i)] = f"@{i}"
    return out


def _resized(traces, seen_cuts, cuts, known) -> dict:
    """``{("resize", i, k): (u, v, traces)}`` for each resampling to a size given whose
    k-th output length went from u to v (``traces`` the two graphs' leaf shapes): a size
    computed in Python, MobileViT's map resampled to the next multiple of its patch
    (``ceil(h / 2) * 2``), laid out as the symbol it follows (``Cx.fit_symbol``)."""
    return {("resize", i, k): (u, v, traces)
            for (i, how, a), (_, how2, b) in zip(seen_cuts, cuts)
            if how[0] in SIZED and how == how2 and len(a) == len(b)
            for k, (u, v) in enumerate(zip(a, b))
            if u != v and ("resize", i, k) not in known}


def _grown_before(fam, cuts, auto):
    """``auto`` with ``("grow", i)`` (and ``("shift", i)``) for each pad whose structure
    up to it (``fam``'s first i + 1 entries) was seen growing by varying amounts (its low
    amount too) in another family."""
    if not _GROWN:
        return auto
    extra = {(kind, i): _GROWN[(kind, fam[0][:i + 1])] for i, how, _ in cuts
             if how[0] is _PAD for kind in ("grow", "shift")
             if (kind, fam[0][:i + 1]) in _GROWN and (kind, i) not in (auto or ())}
    return {**auto, **extra} if auto and extra else extra or auto


def _learnt(fam, auto: dict, new: dict) -> dict:
    """``auto`` becomes the marks of family ``fam``; ``new`` of them are reported."""
    for k in new:
        if k[0] == "grow" or k[0] == "shift":
            _GROWN[(k[0], fam[0][:k[1] + 1])] = new[k]
            while len(_GROWN) > 256:
                _GROWN.popitem(last=False)
    _AUTO[fam] = auto
    _PLANS.clear()  # graphs of this family planned as static are dynamic from now on
    _OFFSET_PLANS.clear()
    METRICS.automatic_dynamic.append(", ".join(
        f"slice at node {k[1]} -> {s}" if k[0] == "slice" else
        f"offset at node {k[1]}" if k[0] == "offset" else
        f"pad to a fixed size at node {k[1]}" if k[0] == "fixed" else
        f"pad by a varying amount at node {k[1]}" if k[0] == "grow" else
        f"pad shifted by a varying amount at node {k[1]}" if k[0] == "shift" else
        f"constant {k[1]} dim {k[2]} -> the symbol it follows" if k[0] == "leaf" else
        f"constant {k[1]} dim {k[2]} -> {s} where it follows none" if k[0] == "soft" else
        f"window at node {k[1]} -> the symbol its length follows" if k[0] == "length" else
        f"resampling at node {k[1]} dim {k[2]} -> the symbol its size follows"
        if k[0] == "resize" else
        f"input {k[0]} dim {k[1]} -> {s}"
        for k, s in new.items() if k[0] != "steady"))   # (what stays is not reported)
    if not METRICS.automatic_dynamic[-1]:
        METRICS.automatic_dynamic.pop()
    else:
        log.made_dynamic(METRICS.automatic_dynamic[-1])
    return auto


def _dynamic_inputs(g: ir.Graph) -> tuple:
    """(whether a data leaf is marked, padded or laid out by an earlier graph's automatic
    marks, the automatic marks of ``g``'s family)."""
    has_dyn = any(n.aux is not None for n in g.data_nodes)
    laid = not has_dyn and bool(_LAID) and any(n in _LAID for n in g.data_nodes)
    if not config.automatic_dynamic:
        return has_dyn or laid, {}
    plain = None
    if has_dyn:   # (marks and padding give the sizes; offsets, pads and the own sizes
        # of integer or boolean inputs copied in for this graph are learnt: labels of a
        # length of their own beside a marked signal; not a parameter's, which a model of
        # another width in a graph of this structure would change, nor a host-made
        # constant's)
        plain = frozenset(k for k, n in enumerate(g.data_nodes)
                          if n.aux is None and k in g.fresh and n not in ir.HOST_RECIPES
                          and not (n.dtype.is_floating_point or n.dtype.is_complex))
    auto = _auto_marks(g, plain)
    if has_dyn:   # (a plain input's dims are soft: used where its layout finds no symbol)
        auto = {(("soft",) + k if type(k[0]) is int else k): s for k, s in auto.items()
                if k[0] in ("offset", "fixed", "grow", "shift", "leaf", "length", "resize",
                            "steady")
                or type(k[0]) is int}
    # (laid leaves are marked as an earlier graph marked them; the others learnt as ever)
    return has_dyn or laid, auto


def may_run_padded(g: ir.Graph) -> bool:
    """Whether ``plan_for(g)`` would be more than None (nothing dynamic), without
    building the plan. Learns automatic marks as ``plan_for`` does."""
    if not enabled():
        return False
    if g.key in _PLANS:
        return _PLANS[g.key] is not None
    has_dyn, auto = _dynamic_inputs(g)
    return bool(has_dyn or auto)


def plan_for(g: ir.Graph):
    """The SymPlan for ``g``, a string naming the op that forces an exact compile, or None
    (nothing dynamic). Cached by the concrete key."""
    if not enabled():
        return None
    # Keyed without ``g.fresh``: freshness only decides which guesses are tried, and any
    # plan built for these exact shapes is valid for them.
    fresh = g.fresh
    key = g.key
    hit = _PLANS.get(key)
    if hit is not None or key in _PLANS:
        _PLANS.move_to_end(key)
        return hit
    has_dyn, auto = _dynamic_inputs(g)
    moved = _without_starts(g, auto)
    res = _OFFSET_PLANS.get(moved) if moved is not None else None
    if res is not None:   # another start of a planned graph: its plan, this graph's starts
        _OFFSET_PLANS.move_to_end(moved)
        res = _at_starts(res, g)
    else:
        res = build_plan(g, fresh, auto) if (has_dyn or auto) else None
        if moved is not None and isinstance(res, SymPlan) and \
                {s for s in res.syms if s[0] == "@"} == \
                {f"@{k[1]}" for k in auto if k[0] == "offset"}:   # (every moving start
            # an input; no pad's amount, which ``_at_starts`` would not read)
            _OFFSET_PLANS[moved] = res
            while len(_OFFSET_PLANS) > 128:
                _OFFSET_PLANS.popitem(last=False)
    _PLANS[key] = res
    while len(_PLANS) > 512:
        _PLANS.popitem(last=False)
    return res


# A graph's key without the starts of its moving cuts -> its plan: a decoding loop writes
# a new position every step, and planning each (a walk over every node) would cost more
# than its executable's run.
_OFFSET_PLANS: "collections.OrderedDict" = collections.OrderedDict()


def _without_starts(g: ir.Graph, auto: dict):
    """``g``'s key with each cut whose start moves (``auto``'s offsets) keyed by its op,
    type, inputs, dim, length and step only; None where none moves."""
    moving = [k[1] for k in auto if k[0] == "offset"] if auto else ()
    if not moving:
        return None
    entries = list(g.key[0])
    for i in moving:
        sig, ins = entries[i]
        d, _, length, step = cut_at(g.nodes[i])
        entries[i] = ("cut", sig[0], sig[2:], ins, d, length, step)
    return (tuple(entries), g.key[1])


def _at_starts(plan: SymPlan, g: ir.Graph) -> SymPlan:
    """``plan`` (of a graph that differs from ``g`` in its moving starts only) with
    ``g``'s starts."""
    out = SymPlan()
    for f in SymPlan.__slots__:
        setattr(out, f, getattr(plan, f))
    k = sum(1 for s in plan.syms if s[0] != "@")   # (the offsets come last)
    out.sizes = plan.sizes[:k] + tuple(cut_at(g.nodes[int(s[1:])])[1] for s in plan.syms[k:])
    return out


def refuse_plan(g: ir.Graph, why: str) -> str:
    """From now on ``g``'s shapes compile exactly, for the reason ``why``."""
    for moved, plan in list(_OFFSET_PLANS.items()):
        if plan.key == getattr(_PLANS.get(g.key), "key", None):
            del _OFFSET_PLANS[moved]
    _PLANS[g.key] = why
    return why


def reset() -> None:
    _FAMILIES.clear()
    _REFITS.clear()
    _AUTO.clear()
    _GROWN.clear()
    _PLANS.clear()
    _OFFSET_PLANS.clear()


# ---- running a padded plan ----------------------------------------------------------


def padded_inputs(g: ir.Graph, plan: SymPlan):
    """The data arrays at their padded shapes (host-padded where needed)."""
    sizes = dict(zip(plan.syms, plan.sizes))
    buckets = dict(zip(plan.syms, plan.buckets))
    leaves = g.data_nodes
    _remember_laid(g, plan)
    return [padded_value(n, lay, sizes, buckets) for n, lay in zip(leaves, plan.data_layouts)]


def padded_value(n: ir.Node, lay, sizes: dict, buckets: dict):
    """DATA leaf ``n``'s value on the device at layout ``lay``'s padded shape."""
    p = leaf_pad(n)
    if p is not None and p[1] == lay and all(buckets.get(s) == b for s, b in p[3]):
        return n.value
    if not has_sym(lay):
        return settle(n) if p is None else put_host(true_value(n))
    return put_host(pad_host(true_value(n), lay, sizes, buckets))


def put_host(a: np.ndarray):
    """A host array (the caller's own: it may be aliased) on the device, counted as a
    transfer."""
    METRICS.transfers_to_device += 1
    return transfer.put(a)


def settle(n: ir.Node):
    """DATA leaf ``n``'s value on the device: put there now (once: the leaf keeps the
    device array) if it was a host copy staged by ``executor.staged``."""
    if type(n.value) is np.ndarray:
        n.value = put_host(n.value)
    return n.value


def exact_inputs(g: ir.Graph):
    """The data arrays at their true shapes (padded results are unpadded)."""
    return [settle(n) if leaf_pad(n) is None else put_host(true_value(n))
            for n in g.data_nodes]


def result_leaf(n: ir.Node, value, layout, plan: SymPlan) -> ir.Node:
    if layout is None or not has_sym(layout):
        return ir.computed_leaf(value, n.shape, n.dtype)
    aux = pad_aux(layout, dict(zip(plan.syms, plan.sizes)), dict(zip(plan.syms, plan.buckets)))
    return ir.computed_leaf(value, n.shape, n.dtype, aux=aux)


def pad_aux(layout, sizes: dict, buckets: dict) -> tuple:
    """A padded DATA leaf's ``aux`` (see ``leaf_pad``): its layout and its symbols' true
    sizes and buckets."""
    syms = sorted(layout_syms(layout))
    return ("pad", layout, tuple((s, sizes[s]) for s in syms),
            tuple((s, buckets[s]) for s in syms))


def note_compile(plan: SymPlan) -> None:
    for s, b in zip(plan.syms, plan.buckets):
        if s[0] != "@":   # (an offset)
            METRICS.buckets.setdefault(s, set()).add(b)


__all__ = ["mark_dynamic", "bucket", "plan_for", "NoPadRule", "Pad", "SymSize", "time"]
