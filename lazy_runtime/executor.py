"""Barriers: cut the recorded graph, compile it (or reuse a cached executable), run it.

``sync`` gathers every live storage whose value is pending, linearizes their nodes into
one graph, looks its structural key up in a bounded LRU cache of XLA executables
(``jax.jit(...).lower(...).compile()``), runs it and stores the results back as device
data. When the key is new, the reason is found by comparing it with the closest cached
key (first difference: an input shape, a dtype, an op, an argument) and recorded.
"""

from __future__ import annotations

import atexit
import collections
import functools
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import disk_cache, dtypes, dynamic, fold, heap, ir, log, replay
from .config import config
from .errors import (DeviceMemoryError, IndexCheckError, LazyRuntimeError,
                     PaddedLoweringError, UnsupportedOperation, ZeroDivisionCheckError)
from .metrics import METRICS
from .ops.common import check_index, is_array, out_of_range
from .ops.padding import index_check_pre
from .ops.registry import (CHECKING, LOWERINGS, TRACE_CHECKS, TRACE_INPUT_CHECKS, TRACE_INPUTS,
                           TRACE_SCRATCH, ZERO_DIVISION, LowerCtx)
from .tensor import apply_step_numpy, new_base, own, take_pending

_x64 = jax.enable_x64


# ---- host <-> device ----------------------------------------------------------------


def staged(t: torch.Tensor) -> np.ndarray:
    """A DATA leaf's value for CPU tensor ``t``: a host copy, put on the device by the
    first barrier whose graph reads it (``dynamic.settle``), with the step's other copies.
    A transfer at the copy made each of a traced step's ``.to(dev)`` 50-150 µs slower
    (jax's Python per transfer, and a wait for the first after the device was idle)."""
    return dtypes.tensor_to_numpy(t)


def data_node_from_cpu(t: torch.Tensor) -> ir.Node:
    if t.layout != torch.strided or t.is_nested:
        kind = "nested" if t.is_nested else str(t.layout).replace("torch.", "")
        hint = (" (a sparse gradient comes from nn.Embedding or nn.EmbeddingBag with "
                "sparse=True: pass sparse=False, whose dense gradient any optimizer but "
                "SparseAdam takes)") if t.layout == torch.sparse_coo else ""
        raise UnsupportedOperation(
            f"a {kind} tensor cannot live on the lazy device (its tensors are dense and "
            f"strided): keep it on the CPU, or convert it with .to_dense() first{hint}")
    marks = dynamic.marks_of_cpu(t)
    if t.numel() == 0 and not marks:
        # no values: one made with its recipe, so traces of a whole step that copy an
        # empty tensor (transformers' caches start as ``torch.tensor([])``) agree
        # (``size()``, not ``shape``: a lazy module's uninitialized parameter, moved to
        # the device before its first call, refuses ``shape``)
        return filled_node(tuple(t.size()), t.dtype, 0)
    n = ir.leaf(ir.DATA, staged(t), tuple(t.size()), t.dtype,
                aux=("mark", marks) if marks else None)
    return n if marks else noted_copy(n, t)


def noted_copy(n: ir.Node, t: torch.Tensor) -> ir.Node:
    """DATA leaf ``n``, a copy of CPU tensor ``t``, with ``t`` noted (``ir.COPIED``) where
    it is small and a whole step is being traced (only then: a weak reference would stop
    ``Module.to`` from swapping the tensor)."""
    if fold.OBSERVERS and t.numel() <= ir.COPIED_MAX_ELEMENTS:
        ir.COPIED[n] = weakref.ref(t)
    return n


def data_tensor(t: torch.Tensor):
    """A new lazy tensor holding a copy of CPU tensor ``t``."""
    return new_base(data_node_from_cpu(t))


def host_constant(shape, dtype, fill):
    """A lazy tensor filled with ``fill``, made on the host and copied (no compile)."""
    return new_base(filled_node(tuple(shape), dtype, fill))


# Filled device arrays by shape, dtype and fill (``ir.value_key``: -0.0 is not 0.0):
# immutable, so a new leaf each step can hold the same one (autograd seeds every backward
# with ``ones_like(loss)``, batch norm makes an empty reserve each call, a model its
# ``zeros_like`` buffers; making one costs a host fill and a transfer). Bounded in count
# and bytes; arrays over ``_FILLED_MAX_BYTES`` are made each time.
_FILLED: dict = {}
_FILLED_MAX_BYTES = 16 << 20


def filled_node(shape, dtype, fill) -> ir.Node:
    def make():
        key = (shape, dtype, ir.value_key(fill))
        arr = _FILLED.get(key)
        if arr is None:
            arr = dynamic.put_host(np.full(shape, fill, dtype=dtypes.to_numpy_dtype(dtype)))
            if arr.nbytes <= _FILLED_MAX_BYTES:
                held = sum(a.nbytes for a in _FILLED.values())
                if len(_FILLED) >= 256 or held + arr.nbytes > 4 * _FILLED_MAX_BYTES:
                    _FILLED.clear()
                _FILLED[key] = arr
        n = ir.leaf(ir.DATA, arr, shape, dtype)
        ir.HOST_RECIPES[n] = (filled_node, (shape, dtype, fill), ())
        return n
    return ir.host_leaf(("filled", shape, dtype, fill), shape, make)


def host_value(n: ir.Node) -> np.ndarray:
    """Computed DATA leaf ``n``'s true-shaped value on the host (counted; the time spent
    waiting for its graph to finish counts as execution)."""
    METRICS.transfers_to_host += 1
    t0 = time.perf_counter()
    a = dynamic.true_value(n)
    METRICS.execute_seconds += time.perf_counter() - t0
    return a


def to_cpu(t) -> torch.Tensor:
    """The value of lazy tensor ``t`` as a new CPU tensor (a barrier if it is pending,
    unless ``fold`` computes it on the host)."""
    st = t._st
    a = None
    if st.node.op not in ir.SETTLED:
        a = fold.fold(st.node, host_value)   # a small integer value computed from data
        if a is None:
            sync("read")
    verify_checks()   # (of the graph that just ran too: a value leaves the device here)
    if st.node.op is ir.ERROR:
        raise LazyRuntimeError(f"this tensor has no value: the graph computing it failed "
                               f"({st.node.value})") from st.node.value
    if a is None:
        a = host_value(st.node)
    for step in t._vw:
        a = apply_step_numpy(step, a)
    out = dtypes.numpy_to_tensor(a)
    if tuple(out.shape) != tuple(t.shape) or out.dtype != t.dtype:
        raise LazyRuntimeError(f"internal: read {tuple(out.shape)} {out.dtype}, expected "
                               f"{tuple(t.shape)} {t.dtype}")
    return out


def read_for_shape(t) -> torch.Tensor:
    """Lazy tensor ``t``'s value as a CPU tensor, read because a result's shape depends on
    it (``ctc_loss``'s lengths, ``repeat_interleave``'s repeats; torch's kernels read them
    on the host too): ``to_cpu``, a barrier only where the value is pending and ``fold``
    cannot compute it. A read of data already computed is counted as a fold, so that a
    replay (which would not read it again, yet the graph's shapes depend on it) refuses."""
    syncs, folds = METRICS.syncs, METRICS.host_folds
    out = to_cpu(t)
    if METRICS.syncs == syncs and METRICS.host_folds == folds:
        METRICS.host_folds += 1
    return out


# ---- compile cache ------------------------------------------------------------------


class Executable:
    """A compiled graph. ``compiled`` returns (results, flags): ``flags`` are its index
    checks' outcomes (None without any), ``checks`` their messages (see
    ``registry.check``); ``input_checks`` are the checks on its inputs' own values
    (``registry.InputCheck``), judged when it runs."""

    __slots__ = ("compiled", "n_ops", "checks", "input_checks", "copy_flags", "_on_device",
                 "_smallest", "context", "seconds")

    def __init__(self, compiled, n_ops, checks=(), input_checks=(), context=None,
                 seconds=0.0):
        self.compiled = compiled
        self.n_ops = n_ops
        self.seconds = seconds   # how long its compile took
        self.checks = checks
        self.input_checks = input_checks
        # Off the CPU the flags' copy to the host starts at launch, so a read that verifies
        # them finds it done: one round trip less per read (on an H100, the checks' cost on
        # the MLP step went from 1.31x to 1.14x). On the CPU it would only add ~17 µs.
        self.copy_flags = config.jax_device().platform != "cpu"
        # per input check, the last device array checked (a weak reference) and its
        # outcome: a device array is immutable, so a constant input (a model's positions)
        # is checked once
        self._on_device = [(_DEAD, None)] * len(input_checks)
        self._smallest = None   # the position of its smallest result (its shapes are fixed)
        self.context = context  # the settings it was compiled under (``_compile_context``)

    @property
    def checked(self) -> bool:
        return bool(self.checks or self.input_checks)

    def run(self, *args):
        """The results; the checks' outcomes wait in ``PENDING_CHECKS`` until ``written``."""
        results, flags = self.compiled(*args)
        if results:
            if self._smallest is None:
                self._smallest = min(range(len(results)), key=lambda i: _size(results[i]))
            _LAUNCHED.append(results[self._smallest])
        if self.checks or self.input_checks:
            parts = []
            if self.checks:
                if self.copy_flags:
                    flags.copy_to_host_async()
                parts.append((flags, self.checks))
            for i, c in enumerate(self.input_checks):
                parts.append((self._input_outside(i, c, args[0][c.position]), (c.message,)))
            if len(PENDING_CHECKS) >= _MAX_PENDING_CHECKS:   # (steps that never read)
                verify_checks()
            PENDING_CHECKS.append((parts, []))
        return results

    def _input_outside(self, i: int, c, value):
        """Whether an element of ``value`` breaks check ``c``: judged on the host for a host
        array (a whole step's CPU argument) and for a device array that is host memory
        (XLA:CPU) and ready, as a flag computed on the device otherwise."""
        if isinstance(value, np.ndarray):
            return _outside_on_host(value, c)
        seen, flag = self._on_device[i]
        if seen() is not value:
            if not self.copy_flags and value.is_ready():   # (np.asarray: no copy there)
                flag = _outside_on_host(np.asarray(value), c)
            else:
                flag = _outside_on_device(value, c.low, c.high, c.ignore)
                if self.copy_flags:
                    flag.copy_to_host_async()
            self._on_device[i] = (weakref.ref(value), flag)
        return flag


def _outside_on_host(value: np.ndarray, c) -> bool:
    if value.size <= _FEW and value.dtype.kind in "iu":
        # (a batch's targets: Python's min and max of a list cost a third of numpy's)
        xs = value.ravel().tolist()
        if not xs or (c.low <= min(xs) and max(xs) < c.high):
            return False
    elif value.size == 0 or (c.low <= value.min() and value.max() < c.high):
        return False
    return bool(out_of_range(value, c.low, c.high, c.ignore).any())


_FEW = 64


def _DEAD():
    return None


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _outside_on_device(value, low, high, ignore):
    return jnp.any(out_of_range(value, low, high, ignore))


# Index checks of graphs that ran, not yet read: ([(flags, their messages)], [weak
# references to the storages the graph wrote]). Verified before any value reaches the host
# and at the next barrier, as a CUDA device-side assert surfaces at the next
# synchronization.
PENDING_CHECKS: list = []
_MAX_PENDING_CHECKS = 8


def refs_of(storages) -> list:
    """Weak references (a value nobody holds any more need not be poisoned, and a whole-step
    capture sees no extra holder)."""
    return [weakref.ref(st) for st in storages]


def written(refs: list, storages=()) -> None:
    """Record what the last executable run wrote (``refs``, and ``storages``), poisoned if
    one of its checks fails. A value computed later from a poisoned one is as wrong: no
    version is compared."""
    if PENDING_CHECKS and not PENDING_CHECKS[-1][1]:
        PENDING_CHECKS[-1][1].extend(refs)
        PENDING_CHECKS[-1][1].extend(refs_of(storages))


def verify_checks() -> None:
    """Raise the first failed index check of the graphs that ran; the values those graphs
    wrote (unless overwritten since) become that error."""
    if not PENDING_CHECKS:
        return
    pending = PENDING_CHECKS[:]
    PENDING_CHECKS.clear()
    for parts, wrote in pending:
        for flags, messages in parts:
            if flags is False:   # judged on the host
                continue
            bad = np.asarray(flags)
            if bad.any():
                message = messages[int(np.argmax(bad))]
                cls = ZeroDivisionCheckError if message == ZERO_DIVISION else IndexCheckError
                err = cls(message + " (checked when its graph ran: the values that graph "
                          "computed are unusable)")
                _poison([st for st in (ref() for ref in wrote) if st is not None], err)
                raise err


def _poison(storages, err) -> None:
    """Every one of ``storages`` now holds ``err``: reading it raises it."""
    for st in storages:
        st.node = ir.leaf(ir.ERROR, err, st.node.shape, st.node.dtype)
        st.version += 1


_cache: "collections.OrderedDict[tuple, Executable]" = collections.OrderedDict()


def cache_info() -> dict:
    return {"size": len(_cache), "capacity": config.cache_size}


def clear_cache() -> None:
    _cache.clear()
    dynamic.reset()
    ir.forget_keys()


def _plan(nodes: list[ir.Node]) -> list:
    index = {id(n): i for i, n in enumerate(nodes)}
    plan = []
    counts = {ir.DATA: 0, ir.SCALAR: 0, ir.RNG: 0}
    for n in nodes:
        if n.op in ir.LEAVES:
            plan.append((n.op, counts[n.op], None, None, None, None))
            counts[n.op] += 1
            continue
        ins = tuple(index[id(i)] for i in n.inputs)
        if n.op is ir.GETITEM:
            plan.append((ir.GETITEM, n.args[0], None, None, ins, None))
            continue
        ctx = LowerCtx(n.shape, n.dtype, n.aux, tuple(i.dtype for i in n.inputs))
        plan.append((_lowering(n.op), n.args, dict(n.kwargs), ctx, ins, n))
    return plan


def _lowering(op):
    low = LOWERINGS.get(op)
    return low if low is not None else op.lowering  # a replay template (``replay.Template``)


# Reductions that pick an element: their result is compared with their input for
# equality (amax's gradient, ``x == x.max(1, keepdim=True).values``; an infinity norm's
# gradient compares it with ``x.abs()``).
_CHOOSERS = frozenset((torch.ops.aten.amax.default, torch.ops.aten.amin.default,
                       torch.ops.aten.max.default, torch.ops.aten.min.default,
                       torch.ops.aten.max.dim, torch.ops.aten.min.dim))


def _chooses(node) -> bool:
    if node.op in _CHOOSERS:
        return True
    if node.op is torch.ops.aten.linalg_vector_norm.default:
        order = node.args[1] if len(node.args) > 1 else dict(node.kwargs).get("ord", 2)
        return order in (float("inf"), float("-inf"))
    return False


def _chosen_from(entries, outputs) -> frozenset:
    """The entries a choosing reduction reads that something else reads too (leaves
    aside: already one value). XLA may compute such a value again inside each consumer's
    fusion, each time rounded its own way (on the CPU a column reduction's fusion
    contracts ``h - mean`` into an FMA where a loop fusion does not): amax's gradient then
    compares the amax with a copy differing in the last bit, and rows lose their gradient
    (a layer norm's output, 8 of 44 rows; ``jax.jit`` of ``jax.grad`` of a max does the
    same). ``_run_plan`` makes each one value (``_computed_once``)."""
    chosen = {entry[4][0] for entry in entries
              if entry[4] and entry[5] is not None and _chooses(entry[5])}
    chosen = {i for i in chosen if entries[i][0] not in ir.LEAVES}
    if not chosen:
        return frozenset()
    uses = collections.Counter(i for entry in entries if entry[4] for i in entry[4])
    uses.update(outputs)
    return frozenset(i for i in chosen if uses[i] > 1)


def _computed_once(v):
    """``v`` as one buffer every consumer reads: XLA duplicates a cheap producer into
    each consumer's fusion (``optimization_barrier`` is expanded before fusion and does
    not stop it), but not out of a conditional's branch. The branches are equal (a
    negation is exact) and differ only for the simplifier, which would drop the
    conditional. Float values only: integer arithmetic rounds nowhere."""
    if not jnp.issubdtype(v.dtype, jnp.floating) or v.size == 0:
        return v
    return jax.lax.cond(jnp.isnan(v.ravel()[0]), lambda: v, lambda: -(-v))


def _run_plan(entries, outputs, datas, scalars, rngs, apply_op):
    """Evaluate a plan: leaves come from the executable's inputs, every other entry from
    ``apply_op(entry, vals)``. Shared by the exact and the padded executables."""
    vals = []
    shared = _chosen_from(entries, outputs)
    for k, entry in enumerate(entries):
        kind = entry[0]
        if kind is ir.DATA:
            v = datas[entry[1]]
        elif kind is ir.SCALAR:
            v = scalars[entry[1]]
        elif kind is ir.RNG:
            v = rngs[entry[1]]
        elif kind is ir.GETITEM:
            v = vals[entry[4][0]][entry[1]]
        else:
            v = apply_op(entry, vals)
        vals.append(_computed_once(v) if k in shared else v)
    return tuple(vals[o] for o in outputs)


def _make_fn(plan, outputs):
    def apply_op(entry, vals):
        low, targs, tkw, ctx, ins, node = entry
        ivals = [vals[i] for i in ins]
        args = ir.fill(targs, ivals)
        kw = {k: ir.fill(v, ivals) for k, v in tkw.items()}
        try:
            r = low.fn(ctx, *args, **kw) if low.ctx else low.fn(*args, **kw)
        except Exception as e:
            raise LazyRuntimeError(f"lowering of {node.op} failed: {e}") from e
        r = _check(node, r)
        if node.op in _SAME_ELEMENTS and ivals:
            _same_elements(ivals[0], r)
        return r

    def fn(datas, scalars, rngs):
        for k, d in enumerate(datas):
            TRACE_INPUTS[id(d)] = (k, d)
        return _run_plan(plan, outputs, datas, scalars, rngs, apply_op)
    return fn


# Ops whose result holds exactly its first input's elements, rearranged or repeated (an
# index check on the result is one on that input: ``registry.check_input``).
_SAME_ELEMENTS = frozenset((torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
                            torch.ops.aten._reshape_alias.default,
                            torch.ops.aten.permute.default, torch.ops.aten.expand.default,
                            torch.ops.aten.clone.default, torch.ops.aten._to_copy.default))


def _same_elements(x, r) -> None:
    """Note ``r`` as the input ``x`` is (if it is one) where it has every element of ``x``
    at an unchanged value: as many elements or more (an expand of a non-empty tensor), and
    the same dtype or a widening to int64."""
    hit = TRACE_INPUTS.get(id(x))
    if hit is None or hit[1] is not x or not is_array(r) or r.size < x.size:
        return
    if r.dtype == x.dtype or (r.dtype == np.int64 and x.dtype.kind in "biu"
                              and x.dtype != np.uint64):
        TRACE_INPUTS[id(r)] = (hit[0], r)


def _check(node: ir.Node, r, shape=None):
    """Enforce the node's type on a lowering's result (a lowering bug fails here, loudly).
    ``shape`` overrides the node's own shape (a padded executable's bucket shape)."""
    shape = node.shape if shape is None else shape
    if isinstance(node.dtype, tuple):
        return tuple(None if d is None else _check1(node.op, x, s, d)
                     for x, s, d in zip(r, shape, node.dtype))
    return _check1(node.op, r, shape, node.dtype)


def _check1(op, x, shape, dtype):
    want = dtypes.to_numpy_dtype(dtype)
    if x.dtype != want:
        x = x.astype(want)
    if tuple(x.shape) != tuple(shape):
        raise LazyRuntimeError(f"lowering of {op} gave shape {tuple(x.shape)}, rule says "
                               f"{tuple(shape)}")
    return x


def _with_checks(fn, messages: list, input_checks: list):
    """``fn`` returning (results, flags of the index checks its lowerings made, or None);
    their messages land in ``messages`` when it is traced, the checks on its inputs' own
    values in ``input_checks``."""
    def checked(*args):
        TRACE_CHECKS.clear()
        TRACE_INPUT_CHECKS.clear()
        try:
            results = fn(*args)
            flags = [f for f, _ in TRACE_CHECKS]
            messages[:] = [m for _, m in TRACE_CHECKS]
            input_checks[:] = dict.fromkeys(TRACE_INPUT_CHECKS)   # (each once)
        finally:
            TRACE_CHECKS.clear()
            TRACE_INPUT_CHECKS.clear()
            TRACE_INPUTS.clear()
        return results, (jnp.stack(flags) if flags else None)
    return checked


def _compile(g: ir.Graph) -> Executable:
    plan = _plan(g.nodes)
    fn = _make_fn(plan, g.outputs)
    # Traced at the leaves' true shapes: a leaf may hold an earlier padded graph's result,
    # which ``dynamic.exact_inputs`` unpads before each run.
    return _jit_compile(g, fn, [jax.ShapeDtypeStruct(n.shape, d.dtype)
                                for n, d in zip(g.data_nodes, g.data)])


def _compile_context() -> tuple:
    """What an executable is compiled for besides its graph: the device, the excess
    precision setting and the user's XLA options. A cached one compiled under others is
    compiled again."""
    return config.jax_device(), bool(config.excess_precision), _options_key()


def _options_key() -> tuple:
    options = config.compiler_options
    if not options:
        return ()
    if not isinstance(options, dict):
        raise LazyRuntimeError(f"lazy_runtime.config.compiler_options must be a dict of XLA "
                               f"option names to values, not {type(options).__name__}")
    return tuple(sorted(options.items()))


def _current(exe):
    """``exe`` if it was compiled under the current settings, else None."""
    return exe if exe is None or exe.context == _compile_context() else None


def _settings_changed(exe) -> str:
    (dev, excess, opts), (now, excess_now, opts_now) = exe.context, _compile_context()
    what = [f"device {dev} -> {now}"] if dev != now else []
    what += [f"excess precision {excess} -> {excess_now}"] if excess != excess_now else []
    what += [f"compiler options {dict(opts)} -> {dict(opts_now)}"] if opts != opts_now else []
    return "compile settings changed: " + ", ".join(what)


def _compiler_options(excess_precision: bool, options: tuple, unfused: bool = False) -> dict:
    """XLA options of the runtime's compiles only (the user's own JAX code keeps its own):
    excess precision as set, then ``config.compiler_options`` (which win). Without excess
    precision every 16-bit op's result is rounded as torch rounds it: XLA:GPU otherwise
    keeps fused intermediates in float32 (a trunc division of 4094 by 3 in float16 gave
    1364, torch 1365). ``unfused``: no YNNPACK fusions (see ``_ynn_drops_rounding``)."""
    own = {"xla_allow_excess_precision": excess_precision}
    if unfused:
        own[_YNN_FUSIONS] = ""   # none
    return {**own, **dict(options)}


_YNN_FUSIONS = "xla_cpu_experimental_ynn_fusion_type"
_ynn_option_known = [True]   # False once XLA refuses the option (a jaxlib without it)


def _ynn_drops_rounding(g: ir.Graph, device, excess_precision: bool) -> bool:
    """Whether ``g`` compiles without XLA:CPU's YNNPACK fusions: they read a 16-bit value
    feeding a reduction from its float32 source, unrounded, whatever the excess precision
    setting (jax 0.10.2: a bfloat16 sum of three lgamma values gave 145, torch 146).
    Only graphs holding 16-bit values, on the CPU, without excess precision, lose them."""
    if excess_precision or device.platform != "cpu" or not _ynn_option_known[0]:
        return False
    return any(d in dtypes.HALF_TYPES for n in g.nodes
               for d in (n.dtype if isinstance(n.dtype, tuple) else (n.dtype,)))


def _jit_compile(g: ir.Graph, fn, datas, *more_avals) -> Executable:
    """``fn`` of graph ``g`` traced (lowerings run here) for inputs like ``datas``, its
    scalars, random positions and ``more_avals``, compiled and counted."""
    avals = ([jax.ShapeDtypeStruct(d.shape, d.dtype) for d in datas],
             jax.ShapeDtypeStruct((len(g.scalars),), np.float64),
             jax.ShapeDtypeStruct((len(g.rngs), 2), np.int64)) + more_avals
    t0 = time.perf_counter()
    messages: list = []
    input_checks: list = []
    context = device, excess_precision, options = _compile_context()
    try:
        # compiled for the runtime's device, which need not be jax's default one
        with _x64(True), jax.default_device(device):
            lowered = jax.jit(_with_checks(fn, messages, input_checks)).lower(*avals)
            unfused = _ynn_drops_rounding(g, device, excess_precision)
            try:
                compiled, from_disk = disk_cache.compile_cached(lambda: lowered.compile(
                    compiler_options=_compiler_options(excess_precision, options, unfused)))
            except Exception as e:
                if unfused and _YNN_FUSIONS in str(e):   # a jaxlib without the option
                    _ynn_option_known[0] = False
                    compiled, from_disk = disk_cache.compile_cached(lambda: lowered.compile(
                        compiler_options=_compiler_options(excess_precision, options)))
                elif options and "option" in str(e):   # (jax: "No such compile option")
                    raise LazyRuntimeError(
                        f"lazy_runtime.config.compiler_options (or LAZY_RUNTIME_XLA_OPTIONS) "
                        f"{dict(options)}: XLA refused them: {e}") from None
                else:
                    raise
    finally:
        TRACE_SCRATCH.clear()   # what lowerings handed each other in this trace
        TRACE_INPUTS.clear()
    seconds = time.perf_counter() - t0
    METRICS.compile_seconds += seconds
    METRICS.compiles += 1
    METRICS.disk_cache_hits += from_disk
    n_ops = sum(1 for n in g.nodes if n.op not in ir.LEAVES)
    if config.check_memory:
        check_memory(compiled, n_ops, device)
    return Executable(compiled, n_ops, tuple(messages), tuple(input_checks), context, seconds)


def memory_needed(compiled):
    """(scratch, results) bytes a compiled executable allocates when it runs, as XLA
    counts them (its inputs are in memory already); None where XLA does not say."""
    try:
        m = compiled.memory_analysis()
        return m.temp_size_in_bytes, m.output_size_in_bytes - m.alias_size_in_bytes
    except Exception:   # (a backend without the analysis)
        return None


def device_free_bytes(device):
    """Bytes free on ``device``: the allocator's limit less what it holds (a GPU), the
    system's available memory (the CPU, Linux's ``MemAvailable``); None where unknown."""
    try:
        stats = device.memory_stats()
    except Exception:
        stats = None
    if stats and "bytes_limit" in stats:
        return stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(compiled, n_ops: int, device) -> None:
    """Raise ``DeviceMemoryError`` where the executable needs more than ``device`` has
    free."""
    need = memory_needed(compiled)
    free = device_free_bytes(device)
    if need is None or free is None or sum(need) <= free:
        return
    gb = 1 << 30
    raise DeviceMemoryError(
        f"a graph of {n_ops} ops needs {need[0] / gb:.1f} GiB of scratch and "
        f"{need[1] / gb:.1f} GiB for its results on {device}, more than the "
        f"{free / gb:.1f} GiB free: it was not run. Call lr.mark_step() more often (after "
        f"the forward, inside a loop of layers) to cut the step into smaller graphs, or set "
        f"lazy_runtime.config.check_memory = False (env LAZY_RUNTIME_CHECK_MEMORY=0) to run "
        f"it anyway")


def _padded_plan(g: ir.Graph, plan) -> list:
    index = {id(n): i for i, n in enumerate(g.nodes)}
    buckets = dict(zip(plan.syms, plan.buckets))
    out = []
    counts = {ir.DATA: 0, ir.SCALAR: 0, ir.RNG: 0}
    for i, n in enumerate(g.nodes):
        if n.op in ir.LEAVES:
            out.append((n.op, counts[n.op], None, None, None, None, None, None))
            counts[n.op] += 1
            continue
        ins = tuple(index[id(x)] for x in n.inputs)
        if n.op is ir.GETITEM:
            out.append((ir.GETITEM, n.args[0], None, None, ins, None, None, None))
            continue
        p = plan.pads[i]
        lay = p.layout
        if isinstance(n.dtype, tuple):
            shape = tuple(None if l is None else dynamic.lsize(l, buckets) for l in lay)
        else:
            shape = dynamic.lsize(lay, buckets)
        ctx = LowerCtx(shape, n.dtype, n.aux, tuple(x.dtype for x in n.inputs))
        in_lays = tuple(plan.layouts[j] for j in ins)
        out.append((_lowering(n.op), p.args, dict(p.kwargs), ctx, ins, n, p, in_lays,
                    index_check_pre(n, in_lays)))
    return out


def _fill_sym(t, ins, env):
    tt = type(t)
    if tt is ir.Input:
        return ins[t.i]
    if tt is dynamic.SymSize:
        return env.dsize(t.dim)
    if tt is dynamic.RtInt:
        v = t.c
        for s in t.syms:
            v = v * env.n[s]
        return v
    if tt is tuple:
        return tuple(_fill_sym(x, ins, env) for x in t)
    return t


def _make_padded_fn(plan_entries, outputs, plan):
    syms, bks = plan.syms, plan.buckets

    def fn(datas, scalars, rngs, sizes):
        env = dynamic.Env(syms, bks, sizes)

        def apply_op(entry, vals):
            low, targs, tkw, ctx, ins, node, p, in_lays, checked = entry
            # index checks only where they hold here (``padding.index_check_pre``)
            pre, bounds = checked if checked is not None else ((), ())
            ivals = [vals[i] for i in ins]
            for j, axes, fill in p.pre + pre:
                ivals[j] = dynamic.sanitize(env, ivals[j], in_lays[j], axes, fill)
            args = _fill_sym(targs, ivals, env)
            kw = {k: _fill_sym(v, ivals, env) for k, v in tkw.items()}
            CHECKING[0] = checked is not None
            try:
                for j, dim, message in bounds:
                    check_index(ivals[j], env.count((dim,), (0,)), message)
                if p.fn is not None:
                    r = p.fn(ctx, env, in_lays, *args, **kw)
                else:
                    r = low.fn(ctx, *args, **kw) if low.ctx else low.fn(*args, **kw)
            except Exception as e:
                raise PaddedLoweringError(node.op, str(e)) from e
            finally:
                CHECKING[0] = False
            return _check(node, r, ctx.shape)

        return _run_plan(plan_entries, outputs, datas, scalars, rngs, apply_op)
    return fn


def _compile_padded(g: ir.Graph, plan) -> tuple:
    entries = _padded_plan(g, plan)
    fn = _make_padded_fn(entries, g.outputs, plan)
    datas = dynamic.padded_inputs(g, plan)
    CHECKING[0] = False   # (padded positions hold anything: per op, see ``apply_op``)
    try:
        exe = _jit_compile(g, fn, datas, jax.ShapeDtypeStruct((len(plan.syms),), np.int64))
    finally:
        CHECKING[0] = True
    dynamic.note_compile(plan)
    return exe, datas


def _remember(key, exe, reason):
    """A new executable cached (the least recently used evicted from a full cache), and
    why the cache missed: kept in the metrics, logged (``log``)."""
    if len(METRICS.recompile_reasons) >= config.max_reasons:
        del METRICS.recompile_reasons[0]
    METRICS.recompile_reasons.append(reason)
    log.compiled(exe.n_ops, exe.seconds, reason)
    _cache[key] = exe
    while len(_cache) > max(config.cache_size, 1):
        _cache.popitem(last=False)
        METRICS.cache_evictions += 1
        log.evicted(config.cache_size)


def _run_padded(g: ir.Graph, plan):
    cached = _cache.get(plan.key)
    exe = _current(cached)
    datas = None
    if exe is not None:
        _cache.move_to_end(plan.key)
        METRICS.cache_hits += 1
    else:
        reason = "padded: " + (_settings_changed(cached) if cached is not None
                               else _explain_padded(plan.key))
        exact = [k for k in _cache.keys() if k[0] != "padded"]
        if reason.endswith("(cache empty)") and exact:  # e.g. automatic dynamic's first
            reason += "; " + explain_miss(g.key, exact)
        exe, datas = _compile_padded(g, plan)
        _remember(plan.key, exe, reason)
    if datas is None:
        datas = dynamic.padded_inputs(g, plan)
    t0 = time.perf_counter()
    with _x64(True):
        results = exe.run(datas, np.asarray(g.scalars, dtype=np.float64),
                          np.asarray(g.rngs, dtype=np.int64).reshape(-1, 2),
                          np.asarray(plan.sizes, dtype=np.int64))
    METRICS.padded_executions += 1
    return exe, results, t0


def _explain_padded(key) -> str:
    same = [k for k in _cache.keys() if k and k[0] == "padded" and k[1:3] == key[1:3]]
    if same:
        old = dict(same[-1][3])
        return "new bucket " + ", ".join(f"{s}={b} (was {old.get(s)})" for s, b in key[3]
                                         if old.get(s) != b)
    cached = [(k[1], k[2]) for k in _cache.keys() if k and k[0] == "padded"]
    return explain_miss((key[1], key[2]), cached)


def _lookup(g: ir.Graph, exact_op=None, why=None) -> Executable:
    cached = _cache.get(g.key)
    exe = _current(cached)
    if exe is not None:
        _cache.move_to_end(g.key)
        METRICS.cache_hits += 1
        return exe
    reason = _settings_changed(cached) if cached is not None else \
        explain_miss(g.key, [k for k in _cache.keys() if k[0] != "padded"])
    if exact_op is not None:
        METRICS.exact_compiles[exact_op] += 1
        reason = f"exact shape ({why or 'no padding rule'}: {exact_op}); " + reason
    exe = _compile(g)
    _remember(g.key, exe, reason)
    return exe


# ---- barriers -----------------------------------------------------------------------


# Called after each barrier's graph ran, before its results are stored: (graph,
# executable, padded plan or None, [(storage, output index)]).
BARRIER_OBSERVERS: list = []


def sync(reason: str = "mark_step") -> None:
    """Compute every pending live tensor (one graph), store the results as device data."""
    with heap.paused():
        _sync(reason)


def _sync(reason: str) -> None:
    from .dispatch import DEFERRED_ERRORS
    if DEFERRED_ERRORS:
        err = DEFERRED_ERRORS[0]
        DEFERRED_ERRORS.clear()
        raise err
    verify_checks()
    storages = take_pending()
    ir.clear_interned()
    METRICS.syncs += 1
    METRICS.sync_reasons[reason] += 1
    if not storages:
        ir.next_epoch()
        heap.at_step_barrier()
        return
    outs: list[ir.Node] = []
    where: dict[int, int] = {}
    for st in storages:
        n = st.node
        if id(n) not in where:
            where[id(n)] = len(outs)
            outs.append(n)
    plan = exact_why = None
    try:
        try:
            g = ir.linearize(outs)
            calls = replay.CALLS_MADE[0]
            replay.CALLS_MADE[0] = False
            if calls and BARRIER_OBSERVERS and dynamic.may_run_padded(g):
                # a whole step's trace: keyed as the same step traced op by op, so that
                # its sizes confirm each other on one executable (``step``)
                g = ir.linearize(replay.inline(outs))
            plan = dynamic.plan_for(g)
            if calls and isinstance(plan, str) and plan.startswith(replay.TEMPLATE_PREFIX):
                # a padded value flows into a replayed call: inlined, so padding rules
                # see its ops (a call only exact values reach runs as one op: decoding's
                # forward, beside the ids growing in the graph)
                g = ir.linearize(replay.inline(outs))
                plan = dynamic.plan_for(g)
        finally:
            ir.next_epoch()
        if isinstance(plan, dynamic.SymPlan):
            try:
                exe, results, t0 = _run_padded(g, plan)
            except PaddedLoweringError as e:   # exact shapes are always right
                plan = dynamic.refuse_plan(g, str(e.op))
                exact_why = f"its padded lowering failed: {e}"
        if not isinstance(plan, dynamic.SymPlan):
            exe = _lookup(g, plan, exact_why or getattr(plan, "reason", None))
            plan = None
            t0 = time.perf_counter()
            with _x64(True):
                results = exe.run(dynamic.exact_inputs(g),
                                  np.asarray(g.scalars, dtype=np.float64),
                                  np.asarray(g.rngs, dtype=np.int64).reshape(-1, 2))
    except Exception as e:
        # Nothing is left half-done: every tensor of this graph now holds the error, and
        # reading one raises it; later graphs do not include them.
        err = e if isinstance(e, LazyRuntimeError) else LazyRuntimeError(
            f"the graph failed to compile or run: {type(e).__name__}: {e}")
        _poison(storages, err)
        if err is e:
            raise
        raise err from e
    METRICS.execute_seconds += time.perf_counter() - t0
    METRICS.graphs_executed += 1
    METRICS.graph_sizes.append(exe.n_ops)
    del METRICS.graph_sizes[:-100]
    for observe in BARRIER_OBSERVERS:   # a whole-step capture (``step``) watching
        observe(g, exe, plan, [(st, where[id(st.node)]) for st in storages])
    # One leaf per result: buffers that held one pending value keep sharing it (an
    # optimizer's step counters), so the next trace reads it once and computes on it once.
    made: dict = {}
    outs_lay = None if plan is None else [plan.layouts[o] for o in g.outputs]
    for st in storages:
        n = st.node
        j = where[id(n)]
        leaf = made.get(j)
        if leaf is None:
            leaf = made[j] = (ir.computed_leaf(results[j], n.shape, n.dtype) if plan is None
                              else dynamic.result_leaf(n, results[j], outs_lay[j], plan))
        st.node = leaf
        st.version += 1
        own(st, leaf)
    if exe.checked:
        written((), storages)
    # (any barrier freezes the heap, once: decoding loops and ``generate`` read values
    # and never call mark_step, and a whole step's barrier is a sync too)
    heap.at_step_barrier()


def mark_step() -> None:
    """The step barrier: compile (or reuse) and run everything recorded so far."""
    sync("mark_step")


# One result of each recent run (its smallest): ready once the run is done, so the exit
# handler can wait for a run whose results were all dropped (runs start in order).
_LAUNCHED: collections.deque = collections.deque(maxlen=16)


def _size(a) -> int:
    return getattr(a, "size", 0)


@atexit.register
def wait_for_running_graphs() -> None:
    """Wait for the graphs still running. XLA runs a graph asynchronously, and a process
    that exits during one (a script ending in ``mark_step()`` with no read) crashed now
    and then: the library's static destructors free kernels the graph's threads still
    execute. (Registered after JAX's own exit handler, so run before it.)"""
    arrays = list(_LAUNCHED)
    _LAUNCHED.clear()
    try:
        from jax._src import xla_bridge
        if xla_bridge.backends_are_initialized():  # (else nothing ran: start no backend)
            arrays += jax.live_arrays()
    except Exception:   # (a private JAX name moved: wait for the recent runs only)
        pass
    for a in arrays:
        try:
            a.block_until_ready()
        except Exception:   # (deleted or donated meanwhile)
            pass


# ---- why a graph was new ------------------------------------------------------------


def _describe(entry) -> str:
    sig = entry[0] if isinstance(entry, tuple) and entry and isinstance(entry[0], tuple) else entry
    if not isinstance(sig, tuple) or not sig:
        return repr(sig)
    if sig[0] is ir.DATA:
        return f"input {_shape(sig[1])} {_dt(sig[2])}"
    if sig[0] in (ir.SCALAR, ir.RNG):
        return f"{sig[0]} input"
    op = sig[0]
    return f"{op}"


def _shape(s):
    return "(" + ", ".join(str(d) for d in s) + ")" if isinstance(s, tuple) else str(s)


def _dt(d):
    return str(d).replace("torch.", "")


def _sig(entry):
    return entry[0] if isinstance(entry, tuple) and entry and isinstance(entry[0], tuple) else entry


def explain_miss(key, cached_keys) -> str:
    """A short sentence: what differs between ``key`` and the closest cached key."""
    if not cached_keys:
        return "first graph (cache empty)"
    entries, outs = key
    best, best_score = None, -1
    for ck in reversed(cached_keys[-32:]):  # newest first: ties go to the most recent
        score = _similarity(entries, ck[0])
        if score > best_score:
            best, best_score = ck, score
    ce, couts = best
    i = next((j for j, (a, b) in enumerate(zip(entries, ce)) if a != b), min(len(entries), len(ce)))
    if i == len(entries) and i == len(ce):
        return f"same ops, different outputs ({len(outs)} live results vs {len(couts)})"
    if i >= len(ce):
        return f"graph grew: new {_describe(entries[i])} after {i} matching nodes"
    if i >= len(entries):
        return f"graph shrank: {len(entries)} nodes vs {len(ce)} cached"
    a, b = _sig(entries[i]), _sig(ce[i])
    if isinstance(a, tuple) and isinstance(b, tuple) and a and b:
        if a[0] is ir.DATA and b[0] is ir.DATA:
            if a[1] != b[1]:
                return f"input shape {_shape(b[1])} -> {_shape(a[1])} ({_dt(a[2])})"
            return f"input dtype {_dt(b[2])} -> {_dt(a[2])} (shape {_shape(a[1])})"
        if a[0] != b[0]:
            return f"op {_describe(b)} -> {_describe(a)} at node {i}"
        # same op: args, kwargs, shape, dtype, aux
        names = ("op", "arguments", "keyword arguments", "output shape", "output dtype", "aux")
        for j, (x, y) in enumerate(zip(a, b)):
            if x != y:
                what = names[j] if j < len(names) else "signature"
                if j == 3:
                    return f"{a[0]}: output shape {_shape(y)} -> {_shape(x)}"
                if j == 4:
                    return f"{a[0]}: dtype {_dt(y)} -> {_dt(x)}"
                return f"{a[0]}: {what} {_short(y)} -> {_short(x)}{_where_apart(y, x)}"
    return f"node {i}: inputs wired differently ({_describe(entries[i])})"


def _where_apart(old, new) -> str:
    """Where two long argument tuples first differ (their short forms may read alike:
    a list of 512 tensors), as `` (at [0][256]: %256 -> %257)``; empty for short ones."""
    if len(repr(old)) <= 60 and len(repr(new)) <= 60:
        return ""
    path = ""
    while isinstance(old, (tuple, list)) and isinstance(new, (tuple, list)) \
            and len(old) == len(new):
        k = next((j for j, (p, q) in enumerate(zip(old, new)) if p != q), None)
        if k is None:
            break
        path, old, new = f"{path}[{k}]", old[k], new[k]
    return f" (at {path}: {_short(old)} -> {_short(new)})" if path else ""


def _similarity(a, b) -> int:
    """Entries equal at the same position count 2; data inputs sharing a shape or a dtype 1."""
    score = 0
    for x, y in zip(a, b):
        if x == y:
            score += 2
        elif isinstance(x, tuple) and isinstance(y, tuple) and x and y and \
                x[0] is ir.DATA and y[0] is ir.DATA and (x[1] == y[1] or x[2] == y[2]):
            score += 1
    return score


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."
