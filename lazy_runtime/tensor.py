"""LazyTensor: a torch.Tensor subclass whose value is an IR node, and its storage model.

Every lazy tensor reads its value from a ``Storage`` (the mutable cell shared by a base
tensor and all its views) through a chain of view steps. In-place ops write a new node
into the storage (scattering back through the chain for views), so aliasing behaves as
in eager torch while every node stays immutable.

View steps are tuples ``(kind, out_shape, *params)``; ``kind`` is one of ``reshape``,
``permute``, ``slice``, ``select``, ``expand``, ``diagonal``, ``as_strided`` (relative to
the storage, so it replaces the chain) and ``unfold``.
"""

from __future__ import annotations

import functools
import itertools
import sys
import traceback
import weakref

import numpy as np
import torch

from . import backend, dtypes, ir  # noqa: F401  (backend first: it names the device)
from .errors import UnsupportedOperation

aten = torch.ops.aten
DEVICE_NAME = "lazy_jax"
DEVICE = torch.device(DEVICE_NAME, 0)  # parsed before the backend exists: plain type + index
_mws = torch.Tensor._make_wrapper_subclass


class Storage:
    """The current value (an IR node with the base tensor's shape) of one lazy buffer."""

    __slots__ = ("node", "version", "frozen", "__weakref__")

    def __init__(self, node: ir.Node):
        self.node = node
        self.version = 0
        self.frozen = None   # why it must not be written (a fallback's copy of a view), or None
        if node.op not in ir.SETTLED:
            _register(self)
        elif node.op is ir.DATA:
            own(self, node)


def own(st: "Storage", node: ir.Node) -> None:
    """Note that storage ``st`` holds DATA leaf ``node``: its one owner, or one of several
    (``owner`` False). A replay reading a tensor from before its call checks that the
    owner still holds the leaf (``owner_of``): other references to the leaf (an autograd
    context's, a view's cache) outlive an in-place write."""
    prev = getattr(node, "owner", None)
    if prev is None or prev is not False and prev() in (None, st):
        node.owner = weakref.ref(st)
    else:
        node.owner = False


def owner_of(node: ir.Node) -> "Storage | None":
    """The one storage holding DATA leaf ``node`` now, or None (none known, or several)."""
    ref = getattr(node, "owner", None)
    st = ref() if ref else None
    return st if st is not None and st.node is node else None


# Storages whose value is pending (not yet computed), in the order they became pending.
# The order is deterministic for a deterministic program, which keeps graph keys stable.
_live: dict[int, weakref.ref] = {}
_next_id = itertools.count()


def _register(st: Storage) -> None:
    _live[next(_next_id)] = weakref.ref(st)
    if len(_live) >= _prune_at[0]:
        _prune()


_prune_at = [4096]


def _prune() -> None:
    """Drop dead entries (a long trace without a barrier would otherwise grow the registry)."""
    dead = [k for k, r in _live.items() if r() is None]
    for k in dead:
        del _live[k]
    _prune_at[0] = max(4096, 2 * len(_live))


def set_node(st: Storage, node: ir.Node) -> None:
    was_pending = st.node.op not in ir.SETTLED
    st.node = node
    st.version += 1
    if node.op is ir.DATA:
        own(st, node)
    if not was_pending and node.op not in ir.SETTLED:
        _register(st)


def pending_order(storages) -> dict:
    """id(storage) -> its place in the pending registry, for those of ``storages`` there
    (the order that decides a graph's outputs, hence its key)."""
    want = {id(st) for st in storages}
    out = {}
    for k, r in _live.items():
        st = r()
        if st is not None and id(st) in want and id(st) not in out:
            out[id(st)] = k
    return out


def take_pending() -> list[Storage]:
    """The live storages with a pending value, in registration order; clears the registry."""
    out = []
    seen = set()
    for r in _live.values():
        st = r()
        if st is not None and st.node.op not in ir.SETTLED and id(st) not in seen:
            seen.add(id(st))
            out.append(st)
    _live.clear()
    _prune_at[0] = 4096
    return out


def pending_count() -> int:
    return sum(1 for r in _live.values() if (s := r()) is not None and s.node.op not in ir.SETTLED)


NOT_TRACED = (
    "torch.compile and torch.export do not trace lazy tensors: the lazy device records "
    "and compiles the code itself, so torch.compile runs it as written (a graph break; "
    "with fullgraph=True, and in torch.export, this is the error)")


_SKIPPED_BY_DYNAMO: list = []


def _refuse_tracing():
    """What a tracer asking for a fake copy of a lazy tensor gets. Only tracers rebuild a
    subclass from its flattened form: dynamo (torch.compile), torch.export, AOTAutograd.
    Dynamo's own ``Unsupported`` makes torch.compile fall back to running the frame as
    written, which on the lazy device is already compiled by XLA; fullgraph and export
    raise it. The runtime's package and JAX join dynamo's skip list first, so dynamo does not
    try to trace the dispatch code those frames run into."""
    try:
        from torch._dynamo import exc, trace_rules
        if not _SKIPPED_BY_DYNAMO:
            for package in (__name__.partition(".")[0], "jax", "jaxlib"):
                trace_rules.add(package)
            _SKIPPED_BY_DYNAMO.append(True)
    except Exception:   # (no dynamo in this build of torch)
        raise UnsupportedOperation(NOT_TRACED) from None
    raise exc.Unsupported(NOT_TRACED, gb_type="lazy_runtime tensor")


class LazyTensor(torch.Tensor):
    """A tensor on the lazy device. Ops on it are recorded, not run (see ``dispatch``)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    # __torch_dispatch__ is attached by ``dispatch`` (it needs the op tables).

    def __repr__(self, *, tensor_contents=None):
        from .executor import to_cpu
        s = repr(to_cpu(self))
        extra = f", device='{DEVICE}'"
        if self.requires_grad:
            extra += ", requires_grad=True" if self.grad_fn is None else \
                f", grad_fn=<{type(self.grad_fn).__name__}>"
        return s[:-1] + extra + ")" if s.endswith(")") else s + extra

    def untyped_storage(self):
        """torch's storage object (no data: its data pointer raises), whose ``data_ptr()``
        names the lazy buffer instead (``_BufferStorage``)."""
        s = torch._C.TensorBase.untyped_storage(self)
        if type(s) is not _BufferStorage:
            s.__class__ = _BufferStorage
        _BUFFER_OF[s._cdata] = self._st
        return s

    def __setitem__(self, key, value):
        if isinstance(value, LazyTensor) and value.requires_grad and torch.is_grad_enabled():
            if _mask_write(self, key, value):
                return
        torch.Tensor.__setitem__(self, key, value)

    def as_strided(self, size, stride, storage_offset=None):
        """As torch's; where the view cuts one dim of the tensor's storage into windows
        and reads the others whole (Longformer's overlapping chunks), recorded as the
        same view made by unfold (``layout.as_chunks``): its padded form and gradient are
        unfold's."""
        base = self if self._base is None else self._base
        # (its storage as a contiguous tensor: a base whose dims are permuted, the result
        # of an op that kept its input's strides, read in the order of its strides)
        base = base.permute(sorted(range(base.dim()), key=lambda d: -base.stride(d)))
        if base.is_contiguous() and base.storage_offset() == 0 and \
                base.numel() == base.untyped_storage().nbytes() // base.element_size():
            from .ops.layout import as_chunks
            at = self.storage_offset() if storage_offset is None else storage_offset
            out = as_chunks(base, size, stride, at)
            if out is not None:
                return out
        return torch.Tensor.as_strided(self, size, stride, storage_offset)

    def tolist(self):
        from .executor import to_cpu
        return to_cpu(self).tolist()

    def numpy(self, *, force: bool = False):
        """As for a CUDA tensor: refused (values live on the device) unless ``force``,
        which copies to the CPU first (a barrier); ``np.asarray(t)`` answers the same."""
        if not force:
            raise TypeError(f"can't convert {DEVICE} device type tensor to numpy. Use "
                            "Tensor.cpu() to copy the tensor to host memory first.")
        from .executor import to_cpu
        return to_cpu(self.detach()).resolve_conj().resolve_neg().numpy()

    def __format__(self, spec):
        if self.dim() == 0:
            return format(self.item(), spec)
        return repr(self)

    # Declaring the (empty) flatten protocol makes Module.to(dev) swap parameters in place
    # (torch.utils.swap_tensors): tied weights stay tied and optimizers built before .to()
    # keep working, as with CUDA.
    def __tensor_flatten__(self):
        return [], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        _refuse_tracing()

    # ``t.data = new`` makes ``t`` hold ``new``'s contents (``hold``).
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new):
        if not isinstance(new, LazyTensor):
            raise UnsupportedOperation(
                f"`t.data = x` with x on {new.device}: move x to the lazy device first "
                "(x.to(lazy_runtime.device()))")
        hold(self, new)

    # With torch's Python device guard, user code that autograd's engine calls must not
    # raise through it (the process aborts: ``backend.errors_cross_backward``): a hook's
    # error is then kept and raised at the next barrier, like an op's error in backward.
    def register_hook(self, hook):
        return super().register_hook(_deferring(hook, "a backward hook"))

    def register_post_accumulate_grad_hook(self, hook):
        return super().register_post_accumulate_grad_hook(
            _deferring(hook, "a post-accumulate-grad hook"))

    # autograd's engine runs a device's backward on a worker thread of that device; for
    # this device every op is Python, so the thread only adds handoffs (about 2 us per
    # backward op). Its single-threaded mode (thread-local) runs it on the caller's.
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        with torch.autograd.set_multithreading_enabled(False):
            return super().backward(gradient, retain_graph, create_graph, inputs)

    def __reduce_ex__(self, proto):
        """Pickled (``torch.save``) as torch pickles tensors of storage-less devices: its
        values on the CPU (a barrier), rebuilt on this device, or on ``map_location``."""
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (self.detach().cpu(), self.dtype, str(self.device), self.requires_grad))


class _BufferStorage(torch.UntypedStorage):
    """A lazy tensor's storage object, whose ``data_ptr()`` is a number unique to its lazy
    buffer while the buffer lives, the same for every view of it, as a pointer is:
    libraries tell tensors that share memory apart by it (transformers' ``save_pretrained``
    and safetensors, which failed on the storage's data pointer)."""

    __slots__ = ()

    def data_ptr(self):
        st = _BUFFER_OF.get(self._cdata)
        if st is None:
            return super().data_ptr()
        return id(st)


# the C storage behind a lazy tensor's storage object -> its buffer (weakly held)
_BUFFER_OF: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _has_lazy(args) -> bool:
    return any(isinstance(a, LazyTensor) or (isinstance(a, (tuple, list)) and _has_lazy(a))
               for a in args)


def _deferring(hook, what: str):
    """``hook``, with any exception it raises on lazy tensors kept for the next barrier
    instead (on other tensors it raises as usual). ``hook`` itself where errors may cross
    autograd's engine (the C++ device guard): they then raise from ``backward()``."""
    if backend.errors_cross_backward():
        return hook

    @functools.wraps(hook)
    def run(*args):
        try:
            return hook(*args)
        except Exception as e:
            if not _has_lazy(args):
                raise
            from .dispatch import DEFERRED_ERRORS
            from .errors import LazyRuntimeError
            err = LazyRuntimeError(f"{what} ({getattr(hook, '__qualname__', hook)}) failed "
                                   f"during backward: {type(e).__name__}: {e}")
            # the frames' locals hold tensors of the engine's thread: freed only at exit
            # (after torch's own teardown, which then aborts) if the error is never caught
            traceback.clear_frames(e.__traceback__)
            err.__cause__ = e
            DEFERRED_ERRORS.append(err)
            return None
    return run


def _defer_module_hook_errors() -> None:
    """Module backward hooks (``register_full_backward_hook`` and its pre-hook) run from
    torch's ``BackwardHook``: wrap the user's hooks it is given like a tensor's."""
    cls = torch.utils.hooks.BackwardHook
    init = cls.__init__
    if getattr(init, "_lazy_deferring", False):
        return

    @functools.wraps(init)
    def __init__(self, module, user_hooks, user_pre_hooks):
        init(self, module, [_deferring(h, "a module backward hook") for h in user_hooks],
             [_deferring(h, "a module backward pre-hook") for h in user_pre_hooks])
    __init__._lazy_deferring = True
    cls.__init__ = __init__


if not backend.errors_cross_backward():
    _defer_module_hook_errors()


def new_base(node: ir.Node) -> LazyTensor:
    t = _mws(LazyTensor, node.shape, dtype=node.dtype, device=DEVICE)
    t._st = Storage(node)
    t._vw = ()
    t._vc = None
    return t


def new_view(src: LazyTensor, chain: tuple, shape, strides, offset, dtype=None) -> LazyTensor:
    t = _mws(LazyTensor, shape, dtype=dtype or src.dtype, device=DEVICE, strides=strides,
             storage_offset=offset)
    t._st = src._st
    t._vw = chain
    t._vc = None
    return t


def reads_whole_storage(t: LazyTensor) -> bool:
    """Whether ``t`` reads the whole of a storage element for element in row-major order
    (a base; or a view with contiguous strides from offset 0, of its storage's size and
    dtype): its value is the storage's, reshaped."""
    if not t._vw:
        return True
    n = t._st.node
    if n.dtype != t.dtype or t.storage_offset() != 0 or int(np.prod(n.shape)) != t.numel():
        return False
    return t.numel() <= 1 or tuple(t.stride()) == contiguous_strides(t.shape)


def rebase_whole_view(t: LazyTensor) -> bool:
    """Make view ``t`` a base tensor in place, where nothing can tell the difference:
    it reads the whole of a computed storage that no other tensor holds, element for
    element in row-major order (contiguous strides from offset 0, its dtype). Autograd's
    gradients are such views (a transpose of a transpose, a reshape of a [1, n] sum), and
    a grad kept across steps (``zero_grad(set_to_none=False)``) is then state a
    whole-step replay can hold. True where ``t`` is a base now."""
    if not t._vw:
        return True
    st = t._st
    n = st.node
    if n.op is not ir.DATA or n.aux is not None or not reads_whole_storage(t):
        return False
    # Another tensor on the storage would no longer alias it: held by ``t``, this frame
    # and getrefcount's argument only. (Held more, by anything, it stays a view: refused.)
    if sys.getrefcount(st) > 3:
        return False
    t._st = Storage(ir.computed_leaf(n.value.reshape(tuple(t.shape)), tuple(t.shape),
                                     n.dtype))
    t._vw = ()
    return True


def resize_base(t: LazyTensor, new: LazyTensor) -> bool:
    """Make base tensor ``t`` hold base tensor ``new`` (another shape: torch's resize of an
    out= tensor, ``resize_``), as ``t.data = new`` does, where no other tensor holds its
    storage: a view of it would keep reading the old buffer (torch's views follow a
    reallocated storage). True where done."""
    st = t._st
    # held by ``t``, this frame and getrefcount's argument only (``rebase_whole_view``)
    if t._vw or new._vw or sys.getrefcount(st) > 3:
        return False
    hold(t, new)
    return True


def hold(t: LazyTensor, new: LazyTensor) -> None:
    """``t`` reads ``new``'s buffer with ``new``'s sizes, strides and offset (``t.data =
    new``, ``t.set_(new)``): torch sets them in C++, the lazy buffer and view chain
    follow."""
    torch._C.TensorBase.data.__set__(t, new)
    t._st, t._vw, t._vc = new._st, new._vw, new._vc


def node_of(t: LazyTensor) -> ir.Node:
    vw = t._vw
    st = t._st
    if not vw:
        return st.node
    c = t._vc
    if c is not None and c[0] == st.version:
        return c[1]
    n = st.node
    for step in vw:
        n = apply_step(step, n)
    t._vc = (st.version, n)
    return n


def write(t: LazyTensor, new: ir.Node) -> None:
    """Store ``new`` (t's shape and dtype) as t's value, updating its base if t is a view."""
    st = t._st
    if st.frozen is not None:
        raise UnsupportedOperation(st.frozen)
    vw = t._vw
    if not vw:
        set_node(st, new)
        return
    vals = [st.node]
    for step in vw[:-1]:
        vals.append(apply_step(step, vals[-1]))
    value = new
    try:
        for step, base in zip(reversed(vw), reversed(vals)):
            value = scatter_step(step, base, value)
    except UnsupportedOperation:
        value = _write_strided(t, st.node, new) if any(
            step[0] == "expand" for step in vw) else None
        if value is None:
            raise
    set_node(st, value)
    t._vc = (st.version, new)


_FILLS = (aten.fill.Scalar, aten.fill.Tensor, aten.zero.default)


def _write_strided(t: LazyTensor, base: ir.Node, new: ir.Node):
    """A write through a chain with an ``expand`` the steps cannot undo one by one (a later
    step picked one of its copies): an ``as_strided`` write at ``t``'s own sizes, strides
    and offset in its storage (the base, row-major), as torch writes memory, where no
    element of ``t`` shares memory with another, or a fill writes one value to all. None
    otherwise (a stride 0 over more than one element: the step's refusal stands, as
    torch's in-place ops refuse it, ``masked_fill_`` and ``index_fill_`` aside: torch lets
    them, deprecated)."""
    shape, strides = tuple(t.shape), t.stride()
    shared = any(n > 1 and st == 0 for n, st in zip(shape, strides))
    if (shared and new.op not in _FILLS) or base.dtype != t.dtype:
        return None
    return scatter_step(("as_strided", shape, tuple(strides), t.storage_offset()), base, new)


# ---- view steps ---------------------------------------------------------------------

_IN0 = ir.input_marker(0)
_IN1 = ir.input_marker(1)


def apply_step(step: tuple, n: ir.Node) -> ir.Node:
    kind, shape = step[0], step[1]
    if kind == "reshape":
        return ir.make_node(aten.view.default, (_IN0, shape), (), (n,), shape, n.dtype)
    if kind == "permute":
        return ir.make_node(aten.permute.default, (_IN0, step[2]), (), (n,), shape, n.dtype)
    if kind == "slice":
        return ir.make_node(aten.slice.Tensor, (_IN0,) + step[2:], (), (n,), shape, n.dtype)
    if kind == "select":
        return ir.make_node(aten.select.int, (_IN0,) + step[2:], (), (n,), shape, n.dtype)
    if kind == "expand":
        return ir.make_node(aten.expand.default, (_IN0, shape), (), (n,), shape, n.dtype)
    if kind == "diagonal":
        return ir.make_node(aten.diagonal.default, (_IN0,) + step[2:], (), (n,), shape, n.dtype)
    if kind == "as_strided":
        return ir.make_node(aten.as_strided.default, (_IN0, shape) + step[2:], (), (n,), shape,
                            n.dtype)
    if kind == "unfold":
        return ir.make_node(aten.unfold.default, (_IN0,) + step[2:], (), (n,), shape, n.dtype)
    if kind in _RETYPE:   # (kind, shape, dtype)
        return _retyped(_RETYPE[kind][0], n, shape, step[2])
    raise AssertionError(kind)


# views that reinterpret every element (a bijection of the whole value): the step's op,
# and the op taking a value of the view back to the base
_RETYPE = {"as_real": (aten.view_as_real.default, aten.view_as_complex.default),
           "as_complex": (aten.view_as_complex.default, aten.view_as_real.default),
           "conj": (aten._conj.default, aten._conj.default),
           "bitcast": (aten.view.dtype, aten.view.dtype)}


def _retyped(op, n: ir.Node, shape, dtype) -> ir.Node:
    dtypes.note_dtype(dtype)   # (a complex view of a real tensor)
    args = (_IN0, dtype) if op is aten.view.dtype else (_IN0,)
    return ir.make_node(op, args, (), (n,), shape, dtype)


def scatter_step(step: tuple, base: ir.Node, new: ir.Node) -> ir.Node:
    """The value of ``base`` after writing ``new`` into its view ``step``."""
    kind = step[0]
    ins = (base, new)
    if kind == "reshape":
        return ir.make_node(aten.view.default, (_IN0, base.shape), (), (new,), base.shape,
                            base.dtype)
    if kind == "permute":
        inv = tuple(np.argsort(step[2]).tolist())
        return ir.make_node(aten.permute.default, (_IN0, inv), (), (new,), base.shape, base.dtype)
    if kind == "slice":
        return ir.make_node(aten.slice_scatter.default, (_IN0, _IN1) + step[2:], (), ins,
                            base.shape, base.dtype)
    if kind == "select":
        return ir.make_node(aten.select_scatter.default, (_IN0, _IN1) + step[2:], (), ins,
                            base.shape, base.dtype)
    if kind == "diagonal":
        return ir.make_node(aten.diagonal_scatter.default, (_IN0, _IN1) + step[2:], (), ins,
                            base.shape, base.dtype)
    if kind == "as_strided":
        return ir.make_node(aten.as_strided_scatter.default, (_IN0, _IN1, step[1]) + step[2:], (),
                            ins, base.shape, base.dtype)
    if kind in _RETYPE:
        return _retyped(_RETYPE[kind][1], new, base.shape, base.dtype)
    if kind == "expand":
        shape = step[1]
        lead = len(shape) - len(base.shape)
        if all(s == 1 for s in shape[:lead]) and all(
                a == b for a, b in zip(base.shape, shape[lead:])):
            return ir.make_node(aten.view.default, (_IN0, base.shape), (), (new,), base.shape,
                                base.dtype)
    raise UnsupportedOperation(
        f"in-place write through a '{kind}' view is not supported: more than one element of "
        "the written-to tensor may refer to a single memory location (clone() it first)")


def apply_step_numpy(step: tuple, a: np.ndarray) -> np.ndarray:
    """The same view on the host, for reading a view's value without a compile."""
    kind, shape = step[0], step[1]
    if kind == "reshape":
        return a.reshape(shape)
    if kind == "permute":
        return a.transpose(step[2])
    if kind == "slice":
        dim, start, end, stp = step[2:]
        idx = [slice(None)] * a.ndim
        idx[dim] = slice(start, end, stp)
        return a[tuple(idx)]
    if kind == "select":
        dim, index = step[2:]
        return np.take(a, index, axis=dim)
    if kind == "expand":
        return np.broadcast_to(a, shape)
    if kind == "diagonal":
        off, d1, d2 = step[2:]
        return np.moveaxis(np.diagonal(a, off, d1, d2), -1, -1)
    if kind == "as_strided":
        stride, offset = step[2:]
        flat = np.ascontiguousarray(a).reshape(-1)
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(flat[offset:], shape, [s * item for s in stride])
    if kind == "unfold":
        dim, size, stp = step[2:]
        w = np.lib.stride_tricks.sliding_window_view(a, size, axis=dim)
        idx = [slice(None)] * w.ndim
        idx[dim] = slice(None, None, stp)
        return w[tuple(idx)]
    if kind == "as_real":
        return np.stack([a.real, a.imag], axis=-1)
    if kind == "as_complex":
        return a[..., 0] + 1j * a[..., 1]
    if kind == "conj":
        return np.conj(a)
    if kind == "bitcast":
        return np.ascontiguousarray(a).view(dtypes.to_numpy_dtype(step[2]))
    raise AssertionError(kind)


def contiguous_strides(shape) -> tuple:
    out = []
    acc = 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


def view_strides(oldshape, oldstride, newshape):
    """ATen's computeStride: strides for viewing (oldshape, oldstride) as newshape, or None."""
    if not oldshape:
        return contiguous_strides(newshape)
    numel = 1
    for s in oldshape:
        numel *= s
    if numel == 0:
        return contiguous_strides(newshape)
    newstride = [0] * len(newshape)
    view_d = len(newshape) - 1
    chunk = oldstride[-1]
    tensor_numel = 1
    view_numel = 1
    for td in range(len(oldshape) - 1, -1, -1):
        tensor_numel *= oldshape[td]
        if td == 0 or (oldshape[td - 1] != 1 and oldstride[td - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or newshape[view_d] == 1):
                newstride[view_d] = view_numel * chunk
                view_numel *= newshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if td > 0:
                chunk = oldstride[td - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(newstride)


def _mask_write(x, key, value) -> bool:
    """``x[mask] = value`` (or ``x[:, mask]``, ...) with ``value`` requiring grad, written
    as ``x.copy_(where(mask, value, x))`` where the value broadcasts over the selected
    elements (a mask token: wav2vec2's ``h[mask] = self.masked_spec_embed``). Its backward
    is then a ``where`` and a sum; torch's own for the mask write indexes the gradient by
    the mask, a data-dependent shape that runs eagerly every step. False: not such a
    write (torch's ``__setitem__`` does it)."""
    from .errors import NoLowering
    from .ops.layout import mask_position, mask_write_shapes
    lead = key[:-1] if type(key) is tuple else ()
    mask = key[-1] if type(key) is tuple and key else key
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or \
            any(type(k) is not slice or k != slice(None) for k in lead):
        return False
    value = value.to(x.dtype)
    p = len(lead)
    try:
        mask_position(x, [None] * p + [mask], value, False)
    except NoLowering:
        return False
    m, v = mask_write_shapes(x.shape, p, mask.shape, value.shape)
    x.copy_(torch.where(mask.reshape(m), value.reshape(v), x))
    return True
