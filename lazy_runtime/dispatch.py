"""``__torch_dispatch__`` for LazyTensor: every ATen op on a lazy tensor arrives here.

Each op is resolved once to a handler:

* a **functional** op with a rule and a lowering is recorded as an IR node;
* a **view** op makes a tensor sharing the storage, one view step further;
* a **mutating** op (``add_``, ``out=``, ``_foreach_mul_``, ``native_batch_norm``'s running
  stats) records its functional counterpart and writes the result into the mutated args;
* an op with a **decomposition** in ``torch._decomp`` is decomposed (its pieces arrive here);
* anything else raises ``NoLowering``.

``NoLowering`` is caught in one place, ``torch_dispatch`` below: the op runs eagerly in
torch on materialized inputs and its results re-enter the lazy world (``fallback``).

Float scalars in Scalar/Tensor positions of ops registered with ``dynamic_scalars`` become
runtime inputs (``ir.SCALAR`` leaves), so a learning-rate schedule or Adam's bias
corrections do not recompile; so do ints of arithmetic on floating or int64 tensors
(``_INT_INPUT_OPS``). Other ints, and bools, stay compile-time constants.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import warnings

import numpy as np
import torch
import torch._decomp
from shapeinfer.shape_fns import ShapeError

from . import dtypes as D, dynamic, executor, ir, random
from .dynamic import slice_bounds
from .backend import errors_cross_backward
from .config import config
from .errors import NoLowering, UnsupportedOperation, as_torch_error
from .metrics import METRICS
from .ops import foreach, linalg, recurrent
from .ops.common import broadcast_sizes
from .ops.elementwise import number_fits
from .ops.registry import (COMPLEX_OK, DECOMPOSITIONS, DYNAMIC_SCALARS, ELEMENTWISE, LOWERINGS,
                           PURE_RULES, RULES, SAME_LAYOUT)
from .tensor import (DEVICE, LazyTensor, hold, new_base, new_view, node_of, resize_base,
                     write, contiguous_strides, view_strides)

aten = torch.ops.aten
_marker = ir.input_marker
_DECOMP = collections.ChainMap(DECOMPOSITIONS, torch._decomp.decomposition_table)


# ---- recording ----------------------------------------------------------------------


def _scalar_leaf(v) -> ir.Node:
    """A dynamic number's input: the ``_foreach_*`` op's shared leaf for it, or a new one."""
    shared = ir.SHARED_SCALARS.get((v, math.copysign(1.0, v))) if ir.SHARED_SCALARS else None
    return shared or ir.leaf(ir.SCALAR, v, (), torch.float64)


def _template(a, inputs: list, dyn):
    """``a`` with lazy tensors (and dynamic scalars) replaced by input markers. ``dyn``:
    False, True (floats are inputs) or ``_INTS_TOO`` (ints as well)."""
    if isinstance(a, LazyTensor):
        inputs.append(node_of(a))
        return _marker(len(inputs) - 1)
    t = type(a)
    if t is float and dyn or t is int and dyn is _INTS_TOO and _int_input(a):
        inputs.append(_scalar_leaf(a))   # (an int stays one: ``fold`` computes with it)
        return _marker(len(inputs) - 1)
    if t is list or t is tuple:   # sizes (ints) stay as they are without a call each
        return tuple([x if type(x) is int else _template(x, inputs, dyn) for x in a])
    if isinstance(a, torch.Tensor):
        inputs.append(host_data_node(a))
        return _marker(len(inputs) - 1)
    return a


_RULE_CACHE: dict = {}


def _rule_of(func):
    r = _RULE_CACHE.get(id(func))
    if r is None:
        rule_fn, multi = RULES[func]
        r = _RULE_CACHE[id(func)] = (rule_fn, multi, DYNAMIC_SCALARS.get(func),
                                     func in PURE_RULES)
    return r


# A pure rule's answers (``registry.PURE_RULES``) by everything they may depend on: a
# traced step asks the same questions every step, and a rule costs 2-30 µs (a conv's
# goes through shapeinfer's symbolic shape functions) where the key costs about one.
_RULE_MEMO: dict = {}
_RULE_MEMO_MAX = 8192
_SCALAR = ir.SCALAR


# Ints of these arithmetic ops become runtime inputs too where their tensors are all
# floating or int64 (``loss / n_tokens``, ``x * step``, ``x.clamp(max=n)``, a decoding
# step's ``cache_position + past`` or ``arange(L) <= pos``): there an int and the float of
# its value compute alike (the lowering casts every operand to the compute dtype the rule
# chose from the int; an int64 one holds any int up to 2**53 exactly). Other integer and
# bool tensors keep them constant (in int32 or uint8 the int's own value would wrap, not
# its float's), as do ops whose int is a count or an exponent (``polygamma``'s n,
# ``round``'s decimals, ``pow``).
_INT_INPUT_OPS = frozenset(getattr(getattr(aten, name), overload) for name, overloads in (
    ("add", "Tensor Scalar"), ("sub", "Tensor Scalar"), ("rsub", "Tensor Scalar"),
    ("mul", "Tensor Scalar"), ("div", "Tensor Scalar"), ("clamp", "default"),
    ("clamp_min", "default"), ("clamp_max", "default"), ("eq", "Scalar"), ("ne", "Scalar"),
    ("lt", "Scalar"), ("le", "Scalar"), ("gt", "Scalar"), ("ge", "Scalar"),
    ("fmod", "Scalar"), ("remainder", "Scalar"), ("lerp", "Scalar"), ("addcmul", "default"),
    ("addcdiv", "default")) for overload in overloads.split())
_INTS_TOO = "ints too"


def _int_input(v: int) -> bool:
    """Ints a float64 input holds exactly, but 0 and 1: as torch.compile specializes them,
    they stay constants (``step += 1``, ``1 - x``: structure, not a per-step value; an
    input each would cost every such op an input of the graph)."""
    return 1 < v <= 2 ** 53 or -2 ** 53 <= v < 0


def _dynamic_kind(func, args, kwargs):
    """``_INTS_TOO`` for an op of ``_INT_INPUT_OPS`` with an int and floating or int64
    tensors."""
    if func not in _INT_INPUT_OPS or not (any(type(a) is int for a in args) or kwargs and any(
            type(v) is int for v in kwargs.values())):
        return True
    for a in args:
        if type(a) is LazyTensor and not a.dtype.is_floating_point and a.dtype is not torch.int64:
            return True
    return _INTS_TOO


def _templates(args, kwargs, static, inputs: list, func=None):
    if static is None:
        targs = tuple([_template(a, inputs, False) for a in args])
        tkw = tuple([(k, _template(v, inputs, False)) for k, v in kwargs.items()]) \
            if kwargs else ()
    else:
        dyn = _dynamic_kind(func, args, kwargs)
        targs = tuple([_template(a, inputs, i not in static and dyn)
                       for i, a in enumerate(args)])
        tkw = tuple([(k, _template(v, inputs, k not in static and dyn))
                     for k, v in kwargs.items()]) if kwargs else ()
    return targs, tkw


def _memo_key(func, args, kwargs, targs, tkw, inputs) -> tuple:
    """What a pure rule's answer depends on: the op; each argument's type (``1``, ``1.0``
    and ``True`` are equal as template constants) and value (the templates); each input's
    shape and dtype, and a dynamic scalar's ``_scalar_class``; torch's default dtype (a
    float number's, an int op's to float)."""
    return (id(func), torch.get_default_dtype(), targs, tkw, *map(type, args),
            *[type(v) for v in kwargs.values()],
            *[(n.shape, n.dtype) if n.op is not _SCALAR else _scalar_class(n.value)
              for n in inputs])


def _scalar_class(v: float):
    """A dynamic float as a pure rule may see it. Rules read such a value only through
    ``number_fits`` (a ``value=`` that float16 or an integer dtype cannot hold), which
    answers alike for every value in [0, 127] and for every value in [-128, 0), whatever
    the dtype (``test_rule_memo``): an optimizer's per-step scalars share one entry."""
    if -128.0 <= v <= 127.0:
        return v >= 0
    return (v,)


def record(func, args, kwargs, extra_inputs=()) -> ir.Node:
    """Record ``func(*args, **kwargs)`` as a node (a multi-output node for multi ops)."""
    rule_fn, multi, static, pure = _rule_of(func)
    inputs: list = []
    if pure:
        targs, tkw = _templates(args, kwargs, static, inputs, func)
        key = _memo_key(func, args, kwargs, targs, tkw, inputs)
        meta = _RULE_MEMO.get(key)
        if meta is None:
            meta = rule_fn(*args, **kwargs)
            if len(_RULE_MEMO) >= _RULE_MEMO_MAX:
                _RULE_MEMO.clear()
            _RULE_MEMO[key] = meta
    else:
        meta = rule_fn(*args, **kwargs)
        targs, tkw = _templates(args, kwargs, static, inputs, func)
    for name, leaf in extra_inputs:
        inputs.append(leaf)
        tkw += ((name, _marker(len(inputs) - 1)),)
    if D.COMPLEX_IN_USE[0] or multi or meta[1] in D.REAL_OF:
        _check_complex(func, inputs, meta, multi)
    if multi:
        return ir.make_node(func, targs, tkw, tuple(inputs),
                            tuple(None if m is None else tuple(m[0]) for m in meta),
                            tuple(None if m is None else m[1] for m in meta),
                            getattr(meta, "aux", None))
    shape, dtype = meta[0], meta[1]
    aux = meta[2] if len(meta) > 2 else None
    return ir.make_node(func, targs, tkw, tuple(inputs), tuple(shape), dtype, aux)


_LAYOUT_DTYPES = (torch.float32, torch.float64)
_NUMBERS = (float, int)   # (not bools: torch refuses a bool alpha for a float result)
_TENSOR, _SCALAR_INPUT, _CONSTANT = "tensor", "scalar input", "constant"


def same_layout_ok(func) -> bool:
    """Whether ``same_layout_recorder`` may record ``func`` (its rule is the trusted one)."""
    return func in RULES and SAME_LAYOUT.get(func) is RULES[func][0] and func in LOWERINGS \
        and func not in config.force_fallback


def _argument_kind(a, dyn: bool, ints: bool):
    """A position's kind. Its numbers become inputs as ``_template`` makes them: floats
    where ``dyn``, ints of ``_INT_INPUT_OPS`` too (the recorder's tensors are floating),
    each value by ``_int_input``."""
    t = type(a)
    if t is LazyTensor:
        return _TENSOR
    if t not in _NUMBERS:
        return None
    return _SCALAR_INPUT if dyn and (t is float or ints) else _CONSTANT


def _same_layout_record(functional, inplace: bool, arg_kinds: tuple, kw_kinds: tuple):
    """The recorder ``same_layout_recorder`` makes: ``record``'s node for ``functional``
    without its rule, or None for arguments that are not of the recorded kinds (each
    position's type as in the first call; every lazy tensor of one shape and one
    float32/float64 dtype; every number fitting it)."""
    n_args, n_kw = len(arg_kinds), len(kw_kinds)
    markers = ir._MARKERS   # (a per-tensor op has a few inputs: within the table)

    def scalar_input(v, inputs):
        inputs.append(_scalar_leaf(float(v)))
        return markers[len(inputs) - 1]

    def rec(args: tuple, kwargs: dict):
        if len(args) != n_args or len(kwargs) != n_kw:
            return None
        inputs: list = []
        numbers = []
        shape = dtype = None
        targs = []
        for a, (t0, kind) in zip(args, arg_kinds):
            if type(a) is not t0:
                return None
            if kind is _TENSOR:
                n = node_of(a) if a._vw else a._st.node
                if dtype is None:
                    shape, dtype = n.shape, n.dtype
                elif n.shape != shape or n.dtype is not dtype:
                    return None
                inputs.append(n)
                targs.append(markers[len(inputs) - 1])
            else:
                numbers.append(a)
                targs.append(scalar_input(a, inputs) if kind is _SCALAR_INPUT and (
                    t0 is float or _int_input(a)) else a)
        tkw = []
        for (k, v), (k0, t0, kind) in zip(kwargs.items(), kw_kinds):
            if k != k0 or type(v) is not t0:
                return None
            numbers.append(v)
            tkw.append((k, scalar_input(v, inputs) if kind is _SCALAR_INPUT and (
                t0 is float or _int_input(v)) else v))
        if dtype not in _LAYOUT_DTYPES:
            return None
        for v in numbers:
            if not number_fits(v, dtype):
                return None
        node = ir.make_node(functional, tuple(targs), tuple(tkw), tuple(inputs), shape, dtype,
                            dtype)
        METRICS.traced_ops += 1
        if inplace:
            write(args[0], node)
            return args[0]
        return new_base(node)
    return rec


def _check_complex(func, inputs, meta, multi) -> None:
    """Complex operands reach only the lowerings checked for them (``COMPLEX_OK``)."""
    outs = [m[1] for m in meta if m is not None] if multi else [meta[1]]
    if any(d in D.REAL_OF for d in outs) or any(n.dtype in D.REAL_OF for n in inputs):
        D.COMPLEX_IN_USE[0] = True
        if func not in COMPLEX_OK:
            raise NoLowering(func, "complex operands")


def host_data_node(t: torch.Tensor) -> ir.Node:
    """A CPU tensor entering the lazy world: copied as graph data (``executor.staged``)."""
    if t.device.type != "cpu":
        raise UnsupportedOperation(f"cannot mix a lazy tensor with a tensor on {t.device}")
    from .executor import noted_copy, staged
    return noted_copy(ir.leaf(ir.DATA, staged(t), tuple(t.shape), t.dtype), t)


def _returns_list(func) -> bool:
    known = _RETURNS_LIST.get(id(func))   # (a schema's attributes cost a call into C++ each)
    if known is None:
        r = func._schema.returns
        known = _RETURNS_LIST[id(func)] = len(r) == 1 and isinstance(r[0].type, torch.ListType)
    return known


_RETURNS_LIST: dict = {}


def _wrap(func, node: ir.Node):
    if isinstance(node.dtype, tuple):
        outs = [None if d is None else new_base(ir.getitem(node, i))
                for i, d in enumerate(node.dtype)]
        return outs if _returns_list(func) else tuple(outs)
    return new_base(node)


def _functional(func, args, kwargs):
    node = record(func, args, kwargs)
    if id(func) in _KEEPS_LAYOUT:
        out = _in_torch_layout(func, args, kwargs, node)
        if out is not None:
            return out
    return _wrap(func, node)


# ---- output layouts -------------------------------------------------------------------
# torch's elementwise ops (TensorIterator), ``clone``, ``flip``, dtype copies and
# ``*_like`` factories give a permuted input's output the input's layout (``x.t() * 2``
# has strides (1, n)). What is a view or a copy later depends on it: ``reshape`` of such
# an output copies in torch, so a write to one leaves the other alone, and ``view`` of it
# is refused. Such an output here is a permute view of a base holding the value in
# torch's storage order, with torch's strides.

_KEEPS_LAYOUT: set = set()   # ids of the ops (filled below, once the tables are complete)
_LAYOUTS: dict = {}          # (op, input layouts, other arguments) -> torch's output strides
_LAYOUTS_MAX = 4096


def _permuted_input(args) -> bool:
    """Whether a lazy tensor among ``args`` has strides out of order (a slice's, in order
    with gaps, gives torch's kernels a contiguous output: no need to ask them)."""
    for a in args:
        # (only views can have non-contiguous strides: bases are contiguous)
        if type(a) is LazyTensor and a._vw and not a.is_contiguous() and _out_of_order(a):
            return True
    return False


def _out_of_order(t) -> bool:
    last = None
    for size, stride in zip(t.shape, t.stride()):
        if size > 1:
            if last is not None and stride > last:
                return True
            last = stride
    return False


def _in_torch_layout(func, args, kwargs, node: ir.Node):
    """The op's output with the strides torch gives it (``_with_strides``), where a
    permuted input may give it others than contiguous ones; else None."""
    if isinstance(node.dtype, tuple) or not _permuted_input(args):
        return None
    return _with_strides(node, _torch_strides(func, args, kwargs))


def _with_strides(node: ir.Node, strides):
    """A new tensor of value ``node`` with these strides (made dense in their order): a
    permute view of a base in that storage order; None where they are contiguous or
    unknown."""
    shape = tuple(node.shape)
    if strides is None or len(strides) != len(shape) or strides == contiguous_strides(shape):
        return None
    order = tuple(sorted(range(len(shape)), key=lambda d: (-strides[d], d)))
    stored = tuple(shape[d] for d in order)
    dense = contiguous_strides(stored)
    if any(shape[d] > 1 and strides[d] != dense[i] for i, d in enumerate(order)):
        # with gaps (prims.copy_strided of a strided view's strides): the dense strides of
        # that order, as torch's kernels keep a layout (``preserve_format``)
        strides = tuple(dense[order.index(d)] for d in range(len(shape)))
        if strides == contiguous_strides(shape):
            return None
    base = new_base(ir.make_node(aten.permute.default, (_marker(0), order), (), (node,),
                                 stored, node.dtype))
    back = tuple(order.index(d) for d in range(len(shape)))
    return new_view(base, (("permute", shape, back),), shape, strides, 0)


def _copy_strided(func, args, kwargs):
    """``prims.copy_strided`` (torch's decompositions keep their input's layout with it): a
    copy of the value with those strides."""
    x, strides = args[0], tuple(args[1])
    node = node_of(x)
    out = _with_strides(node, strides)
    return new_base(node) if out is None else out


def _torch_strides(func, args, kwargs):
    """torch's output strides for these inputs' layouts: its meta kernel's answer (slow,
    Python), remembered by the op, each tensor's size, strides and dtype, and the rest."""
    def layout(a):
        if isinstance(a, torch.Tensor):
            return (torch.Tensor, tuple(a.shape), a.stride(), a.dtype)
        return _hashable(a)
    try:
        key = (id(func), *map(layout, args), *[(k, layout(v)) for k, v in kwargs.items()])
        hash(key)
    except TypeError:   # an unhashable argument
        key = None
    if key is not None and key in _LAYOUTS:
        return _LAYOUTS[key]

    def meta(a):
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(tuple(a.shape), a.stride(), dtype=a.dtype,
                                       device="meta")
        return a
    try:
        # (a copy to this device, ``x.to(dev, dtype)``: asked on the meta device too)
        kw = {k: "meta" if k == "device" and v is not None else meta(v)
              for k, v in kwargs.items()}
        strides = tuple(func(*map(meta, args), **kw).stride())
    except Exception:   # (no meta kernel, or one that refuses these: keep contiguous)
        strides = None
    if key is not None:
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = strides
    return strides


# ---- mutation -----------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _mutated_args(func) -> tuple:
    """(positions, kwarg names) of arguments the op writes to."""
    if func in UNMARKED_WRITES:
        return UNMARKED_WRITES[func]
    pos, names = [], []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            (names if a.kwarg_only else pos).append(i if not a.kwarg_only else a.name)
    return tuple(pos), tuple(names)


# Mutating ops whose functional form is not found by name.
FUNCTIONAL_OF = {
    aten.native_batch_norm.default: aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit.default: aten._native_batch_norm_legit_functional.default,
    aten._batch_norm_with_update.default: aten._batch_norm_with_update_functional.default,
    aten.rrelu_with_noise.default: aten.rrelu_with_noise_functional.default,
    aten.rrelu_with_noise_.default: aten.rrelu_with_noise_functional.default,
}
# ``x &= y`` & co. (``__iand__``): their functional forms are the ``bitwise_*`` ops.
for _inplace, _functional_name in (("__iand__", "bitwise_and"), ("__ior__", "bitwise_or"),
                                   ("__ixor__", "bitwise_xor"), ("__ilshift__", "__lshift__"),
                                   ("__irshift__", "__rshift__")):
    for _overload in ("Tensor", "Scalar"):
        FUNCTIONAL_OF[getattr(getattr(aten, _inplace), _overload)] = getattr(
            getattr(aten, _functional_name), _overload)
# Ops that write to arguments their schema does not mark as written (a legacy quirk).
UNMARKED_WRITES = {
    aten.native_batch_norm.default: ((3, 4), ()),
}


@functools.lru_cache(maxsize=None)
def functional_of(func):
    if func in FUNCTIONAL_OF:
        return FUNCTIONAL_OF[func]
    schema = func._schema
    name = schema.name.split("::")[-1]
    pos, names = _mutated_args(func)
    if names:  # out= variant: the overload of the same op with the same non-out arguments
        want = [(a.name, str(a.type)) for a in schema.arguments if a.name not in names]
        packet = getattr(aten, name)
        for ov in packet.overloads():
            cand = getattr(packet, ov)
            if _mutated_args(cand) == ((), ()) and _signature(cand) == want:
                return cand
        return None
    if name.endswith("_"):
        # the overload taking the same arguments (``pow_.Scalar`` is ``pow.Tensor_Scalar``:
        # ``pow.Scalar`` raises a number to tensor powers)
        packet = getattr(aten, name[:-1], None)
        if packet is None:
            return None
        want = _signature(func)
        overloads = sorted(packet.overloads(), key=lambda ov: ov != func._overloadname)
        return next((getattr(packet, ov) for ov in overloads
                     if _signature(getattr(packet, ov)) == want), None)
    return None


def _signature(func) -> list:
    return [(a.name, str(a.type)) for a in func._schema.arguments]


_MUTATION_PLANS: dict = {}


def _mutation_plan(func, functional):
    plan = _MUTATION_PLANS.get(id(func))
    if plan is None:
        pos, names = _mutated_args(func)
        rets = func._schema.returns
        returns_targets = len(rets) == 0 or all(r.alias_info is not None for r in rets)
        lowered = functional in RULES and functional in LOWERINGS
        plan = _MUTATION_PLANS[id(func)] = (pos, names, len(rets), returns_targets,
                                            _returns_list(func), lowered)
    return plan


def _mutating(func, functional, args, kwargs):
    pos, names, n_returns, returns_targets, returns_list, lowered = \
        _mutation_plan(func, functional)
    if not names and len(pos) == 1 and pos[0] == 0 and lowered and n_returns == 1:
        # the common case: add_, mul_, copy-like ops on their first argument
        self = args[0]
        _write_checked(func, self, record(functional, args, kwargs))
        return self
    targets = [args[i] if i < len(args) else None for i in pos] + [kwargs.get(n) for n in names]
    fargs, fkw = args, kwargs
    if names:
        fkw = {k: v for k, v in kwargs.items() if k not in names}
    if lowered:
        result = record(functional, fargs, fkw)
        outs = [None if d is None else ir.getitem(result, i) for i, d in enumerate(result.dtype)] \
            if isinstance(result.dtype, tuple) else [result]
    else:  # decomposable functional form
        METRICS.decomposed_ops[str(functional)] += 1
        res = _DECOMP[functional](*_lift(fargs), **_lift(fkw))
        if res is NotImplemented:
            raise NoLowering(func, "its decomposition does not cover these arguments")
        res = res if isinstance(res, (list, tuple)) else [res]
        # (a list among the results, GradScaler's unscaled gradients, pairs with a list
        # among the targets, flattened below)
        res = [x for r in res for x in (r if isinstance(r, (list, tuple)) else (r,))]
        outs = [node_of(r) if isinstance(r, LazyTensor) else r for r in res]
    # Flatten list targets (_foreach_*_) and pair them with the functional outputs.
    flat, is_out = [], []
    for j, t in enumerate(targets):
        t = t if isinstance(t, (list, tuple)) else (t,)
        flat.extend(t)
        is_out.extend([j >= len(pos)] * len(t))   # (an out= tensor: resized as torch does)
    if returns_targets:
        new_vals, rest = outs[:len(flat)], []
    else:  # e.g. native_batch_norm: (out, save_mean, save_invstd) + new running stats
        new_vals, rest = outs[len(outs) - len(flat):], outs[:len(outs) - len(flat)]
    for t, v, out in zip(flat, new_vals, is_out):
        if t is not None:
            _write_checked(func, t, v, out)
    if returns_targets:
        if n_returns == 0:
            return None
        if n_returns == 1 and not returns_list:
            return flat[0]
        return flat if returns_list else tuple(flat)
    rest = [None if n is None else new_base(n) for n in rest]
    return tuple(rest) if len(rest) > 1 else rest[0]


def _write_checked(func, t, v: ir.Node, out: bool = False) -> None:
    """Write ``v`` into lazy tensor ``t``: an in-place op's target, or (``out``) an out=
    tensor, which torch resizes to the result's shape."""
    if not isinstance(t, LazyTensor):
        raise UnsupportedOperation(f"{func}: cannot write a lazy result into a {t.device} "
                                   "tensor")
    if v.shape != tuple(t.shape) and not out:
        raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the "
                           f"broadcast shape {list(v.shape)}")
    if v.dtype != t.dtype:
        if not _can_cast(v.dtype, t.dtype):
            raise RuntimeError(f"result type {_dtype_name(v.dtype)} can't be cast to the desired "
                               f"output type {_dtype_name(t.dtype)}")
        v = convert(v, t.dtype)
    if v.shape != tuple(t.shape):
        _resize_out(func, t, v)
    else:
        write(t, v)


# c10's ScalarType names, which torch's messages use
_SCALAR_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
    torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble"}


def _dtype_name(d):
    return _SCALAR_TYPE_NAMES.get(d) or str(d).replace("torch.", "").capitalize()


def _can_cast(src, dst) -> bool:
    return torch.can_cast(src, dst)


def convert(n: ir.Node, dtype) -> ir.Node:
    D.to_numpy_dtype(dtype)   # refused at once if the device cannot hold it (complex32)
    return ir.make_node(aten._to_copy.default, (_marker(0),), (("dtype", dtype),), (n,), n.shape,
                        dtype)


# ---- views --------------------------------------------------------------------------


def _norm_dim(d, n):
    return d + n if d < 0 else d


def _check_in_storage(x, size, stride, offset):
    """torch's bounds check of ``as_strided`` (its error): the lazy storage is the base's
    elements (in ``x``'s dtype); a ``.to(dev)`` copy of a view holds only the view's, as on
    CUDA."""
    if any(s < 0 for s in stride):
        raise RuntimeError("as_strided: Negative strides are not supported at the moment, "
                           f"got strides: {list(stride)}")
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    base = x._st.node
    have = math.prod(base.shape) * base.dtype.itemsize // x.dtype.itemsize
    if all(n > 0 for n in size):
        need = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
        if need > have:
            item = x.element_size()
            raise RuntimeError(
                f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
                f"{offset}, and itemsize {item} requiring a storage size of {need * item} are "
                f"out of bounds for storage of size {have * item}")


def _view_steps(func, args, kwargs, out_shape, dtype):
    """The view step for a view op, or a list of steps for multi-output views."""
    x = args[0]
    shape = tuple(x.shape)
    if func in (aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default,
                aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim,
                aten.squeeze.dims):
        return ("reshape", out_shape)
    if func in (aten.t.default, aten.transpose.int, aten.permute.default):
        n = len(shape)
        if func is aten.permute.default:
            dims = tuple(_norm_dim(d, n) for d in args[1])
        else:
            d0, d1 = (0, 1) if func is aten.t.default else (_norm_dim(args[1], n),
                                                            _norm_dim(args[2], n))
            dims = list(range(n))
            if n >= 2 or func is not aten.t.default:
                dims[d0], dims[d1] = dims[d1], dims[d0]
            dims = tuple(dims)
        return ("permute", out_shape, dims)
    if func is aten.expand.default:
        return ("expand", out_shape)
    if func is aten.select.int:
        dim = _norm_dim(args[1], len(shape))
        idx = args[2] + shape[dim] if args[2] < 0 else args[2]
        return ("select", out_shape, dim, idx)
    if func is aten.slice.Tensor:
        dim, start, end, step = _slice_args(shape, *args[1:])
        return ("slice", out_shape, dim, start, end, step)
    if func is aten.diagonal.default:
        off = args[1] if len(args) > 1 else 0
        d1 = _norm_dim(args[2] if len(args) > 2 else 0, len(shape))
        d2 = _norm_dim(args[3] if len(args) > 3 else 1, len(shape))
        return ("diagonal", out_shape, off, d1, d2)
    if func is aten.as_strided.default:
        stride = tuple(args[2])
        off = args[3] if len(args) > 3 and args[3] is not None else x.storage_offset()
        _check_in_storage(x, out_shape, stride, off)
        return ("as_strided", out_shape, stride, off)
    if func is aten.unfold.default:
        if not shape:   # a 0-d tensor: one window of its one element, i.e. a reshape
            if args[1] not in (-1, 0):
                raise IndexError("Dimension out of range (expected to be in range of [-1, 0], "
                                 f"but got {args[1]})")
            if args[2] > 1:
                raise RuntimeError(f"maximum size for tensor at dimension 0 is 1 but size is "
                                   f"{args[2]}")
            return ("reshape", out_shape)
        return ("unfold", out_shape, _norm_dim(args[1], len(shape)), args[2], args[3])
    if func in _RETYPE_VIEWS:
        return (_RETYPE_VIEWS[func], out_shape, dtype)
    if func in (aten.split.Tensor, aten.split_with_sizes.default):
        dim = _norm_dim(args[2] if len(args) > 2 else kwargs.get("dim", 0), len(shape))
        steps, start = [], 0
        for s in out_shape:
            n = s[dim]
            steps.append(("slice", tuple(s), dim, start, start + n, 1))
            start += n
        return steps
    if func is aten.unbind.int:
        dim = _norm_dim(args[1] if len(args) > 1 else kwargs.get("dim", 0), len(shape))
        return [("select", tuple(s), dim, i) for i, s in enumerate(out_shape)]
    raise AssertionError(func)


def _slice_args(shape, dim=0, start=None, end=None, step=1):
    dim = _norm_dim(dim, len(shape))
    return (dim, *slice_bounds((start, end, step), shape[dim]))


def _step_strides(step, size, stride, offset):
    kind = step[0]
    out_shape = step[1]
    if kind == "reshape":
        st = view_strides(tuple(size), tuple(stride), out_shape)
        return (st if st is not None else contiguous_strides(out_shape)), offset
    if kind == "permute":
        return tuple(stride[d] for d in step[2]), offset
    if kind == "slice":
        dim, start, _, stp = step[2:]
        st = list(stride)
        st[dim] = stride[dim] * stp
        return tuple(st), offset + start * stride[dim]
    if kind == "select":
        dim, idx = step[2:]
        return tuple(s for i, s in enumerate(stride) if i != dim), offset + idx * stride[dim]
    if kind == "expand":
        lead = len(out_shape) - len(size)
        st = [0] * lead + [0 if (s == 1 and o != 1) else t
                           for s, t, o in zip(size, stride, out_shape[lead:])]
        return tuple(st), offset
    if kind == "diagonal":
        off, d1, d2 = step[2:]
        rest = tuple(s for i, s in enumerate(stride) if i not in (d1, d2))
        extra = off * stride[d2] if off >= 0 else -off * stride[d1]
        return rest + (stride[d1] + stride[d2],), offset + extra
    if kind == "as_strided":
        return tuple(step[2]), step[3]
    if kind == "unfold":
        dim, _, stp = step[2:]
        st = list(stride)
        st[dim] = stride[dim] * stp
        return tuple(st) + (stride[dim],), offset
    if kind == "as_real":   # in units of the parts: twice as many, the two parts adjacent
        return tuple(2 * s for s in stride) + (1,), 2 * offset
    if kind == "as_complex":
        return tuple(s // 2 for s in stride[:-1]), offset // 2
    if kind in ("conj", "bitcast"):
        return tuple(stride), offset
    raise AssertionError(kind)


def _view_plan(func, args, kwargs):
    """What a view op makes of its input: a ``(step, strides, offset)`` per output (a
    list for multi-output views), from the op's rule and the input's sizes, strides and
    offset alone."""
    x = args[0]
    rule_fn, multi = RULES[func]
    meta = rule_fn(*args, **kwargs)
    out_shape = [tuple(m[0]) for m in meta] if multi else tuple(meta[0])
    steps = _view_steps(func, args, kwargs, out_shape, None if multi else meta[1])
    size, stride, offset = tuple(x.shape), x.stride(), x.storage_offset()
    if func in _STRIDED_VIEWS and view_strides(size, tuple(stride), out_shape) is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride "
                           "(at least one dimension spans across two contiguous subspaces). "
                           "Use .reshape(...) instead.")
    if multi:
        return [(s, *_step_strides(s, size, stride, offset)) for s in steps]
    return (steps, *_step_strides(steps, size, stride, offset))


# view plans by (op, input sizes, strides, offset, arguments): a step's views repeat every
# step, and the plan is a pure function of these (about 5 us of rule and stride work)
_VIEW_PLANS: dict = {}
_VIEW_PLANS_MAX = 4096


def _hashable(a):
    return tuple(a) if type(a) is list else a


def _view(func, args, kwargs):
    x = args[0]
    key = (id(func), x.dtype, x.shape, x.stride(), x.storage_offset(),
           *map(_hashable, args[1:]), *kwargs.items())   # id: OpOverload.__hash__ is Python
    try:
        plan = _VIEW_PLANS.get(key)
    except TypeError:   # an unhashable argument
        plan, key = None, None
    if plan is None:
        plan = _view_plan(func, args, kwargs)
        if key is not None:
            if len(_VIEW_PLANS) >= _VIEW_PLANS_MAX:
                _VIEW_PLANS.clear()
            _VIEW_PLANS[key] = plan
    if type(plan) is list:
        return [_make_view(x, *p) for p in plan]
    return _make_view(x, *plan)


def _make_view(x, step, strides, offset):
    kind = step[0]
    if kind == "as_strided":   # counted from the storage's start, in its own elements
        chain = (step,)
        base = x._st.node
        if base.dtype is not x.dtype:
            if D.REAL_OF.get(base.dtype) is not x.dtype:
                raise UnsupportedOperation(f"as_strided on a {x.dtype} view of a {base.dtype} "
                                           "tensor is not supported on lazy tensors")
            real = base.shape + (2,)   # the storage read as (real, imag) pairs
            chain = (("as_real", real, x.dtype), step)
    elif kind in _RETYPE_KINDS:
        return new_view(x, x._vw + (step,), step[1], strides, offset, step[2])
    else:
        chain = x._vw + (step,)
    return new_view(x, chain, step[1], strides, offset)


# (``_unsafe_view`` aliases its input as ``view`` does, unseen by autograd: torch's
# ``kron(out=)`` writes its result through one)
_STRIDED_VIEWS = (aten.view.default, aten._unsafe_view.default)
VIEW_OPS = frozenset([
    aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default,
    aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.t.default, aten.transpose.int, aten.permute.default,
    aten.expand.default, aten.select.int, aten.slice.Tensor, aten.diagonal.default,
    aten.as_strided.default, aten.unfold.default, aten.split.Tensor,
    aten.split_with_sizes.default, aten.unbind.int, aten.view_as_real.default,
    aten.view_as_complex.default, aten._conj.default, aten.view.dtype,
])
# views that reinterpret each element: the step kinds ``tensor.apply_step`` knows
_RETYPE_VIEWS = {aten.view_as_real.default: "as_real", aten.view_as_complex.default: "as_complex",
                 aten._conj.default: "conj", aten.view.dtype: "bitcast"}
_RETYPE_KINDS = frozenset(_RETYPE_VIEWS.values())


# in-place view ops: the tensor itself becomes the view
_INPLACE_VIEWS = {
    aten.t_.default: aten.t.default, aten.transpose_.default: aten.transpose.int,
    aten.unsqueeze_.default: aten.unsqueeze.default, aten.squeeze_.default: aten.squeeze.default,
    aten.squeeze_.dim: aten.squeeze.dim, aten.squeeze_.dims: aten.squeeze.dims,
    aten.as_strided_.default: aten.as_strided.default,
}


def _inplace_view(func, args, kwargs):
    """``transpose_``, ``unsqueeze_`` & co.: ``args[0]`` takes the view's chain over the
    same storage, and its wrapper's sizes and strides are changed in place by torch's
    meta kernel (run with dispatch off, as ``return_and_correct_aliasing`` does), so
    autograd and later views see the new ones."""
    x = args[0]
    view = _view(_INPLACE_VIEWS[func], args, kwargs)
    with torch.utils._mode_utils.no_dispatch():
        meta = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            func(*args, **kwargs)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(meta)
    x._vw, x._vc = view._vw, None
    return x


def _alias(func, args, kwargs):
    x = args[0]
    return new_view(x, x._vw, tuple(x.shape), x.stride(), x.storage_offset())


# ---- special ops --------------------------------------------------------------------


def _to_copy(func, args, kwargs):
    """A copy on this device (one to another device: ``_to_the_named_device``)."""
    x = args[0]
    dtype = kwargs.get("dtype")
    node = convert(node_of(x), dtype if dtype is not None else x.dtype)
    out = _in_torch_layout(func, args, kwargs, node)   # (a copy keeps a permuted layout)
    return new_base(node) if out is None else out


def _copy_(func, args, kwargs):
    from .executor import to_cpu
    dst, src = args[0], args[1]
    if not isinstance(dst, LazyTensor):  # lazy -> host
        dst.copy_(to_cpu(src))
        return dst
    n = node_of(src) if isinstance(src, LazyTensor) else host_data_node(src)
    if tuple(n.shape) != tuple(dst.shape):
        # torch's check: the source broadcasts to the destination's shape (a source of
        # more dims fails the lowering's expand otherwise)
        both = broadcast_sizes(tuple(dst.shape), tuple(n.shape))
        if tuple(both) != tuple(dst.shape):
            raise RuntimeError(f"output with shape {list(dst.shape)} doesn't match the "
                               f"broadcast shape {list(both)}")
        n = ir.make_node(aten.expand.default, (_marker(0), tuple(dst.shape)), (), (n,),
                         tuple(dst.shape), n.dtype)
    if n.dtype != dst.dtype:
        n = convert(n, dst.dtype)
    write(dst, n)
    return dst


# dtypes whose numpy scalar converts to the Python number torch's ``item()`` gives
_ITEM_DIRECT = frozenset(np.dtype(d) for d in (
    "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"))


def _read_direct(x):
    """The number in lazy tensor ``x`` read straight from its computed data (a training
    loop reads its loss every step), or None where the general path is needed (a view,
    a pending or padded value, half and bfloat16, more than one element)."""
    n = x._st.node
    if not x._vw and n.op is ir.DATA and n.aux is None and n.value.size == 1 and \
            n.value.dtype in _ITEM_DIRECT:
        if executor.PENDING_CHECKS:
            executor.verify_checks()
            return _read_direct(x)   # (its value may have become the check's error)
        return executor.host_value(n).item()
    return None


def _local_scalar_dense(func, args, kwargs):
    from .executor import to_cpu
    v = _read_direct(args[0])
    return v if v is not None else to_cpu(args[0]).item()


def _read_bool(t) -> bool:
    return bool(_local_scalar_dense(None, (t,), {}))


def _item(self):
    """``LazyTensor.item``: torch's dispatch skipped where the number is read straight."""
    v = _read_direct(self)
    return v if v is not None else torch.Tensor.item(self)


def _both_lazy(func, args) -> tuple:
    """The two tensors compared; one of another device runs eagerly (torch decides)."""
    a, b = args[0], args[1]
    if not (isinstance(a, LazyTensor) and isinstance(b, LazyTensor)):
        raise NoLowering(func, "an operand on another device")
    return a, b


def _has_same_storage_numel(func, args, kwargs):
    """Forward-mode AD asks it of a primal and its tangent (``make_dual``): a lazy
    tensor's storage is its base's buffer, counted in the tensor's own element size."""
    def numel(t):
        if isinstance(t, LazyTensor):
            base = t._st.node
            return math.prod(base.shape) * base.dtype.itemsize // t.dtype.itemsize
        return t.untyped_storage().nbytes() // t.element_size()
    return numel(args[0]) == numel(args[1])


def _equal(func, args, kwargs):
    """``torch.equal``: the elements compared on the device and one bool read (a barrier),
    where the eager fallback copied both tensors to the host. Sizes that differ are
    unequal with no read; dtypes are promoted, as torch's ``equal`` does."""
    a, b = _both_lazy(func, args)
    if a.shape != b.shape:
        return False
    return _read_bool(aten.all.default(aten.eq.Tensor(a, b)))


def _allclose(func, args, kwargs):
    """``torch.allclose``: torch's own definition (``isclose(...).all()``), on the device."""
    a, b = _both_lazy(func, args)
    return _read_bool(aten.all.default(aten.isclose.default(a, b, *args[2:], **kwargs)))


def _polygamma_(func, args, kwargs):
    """``x.polygamma_(n)``: ``polygamma(n, x)`` written into ``x`` (the functional form
    takes its arguments the other way round, so it is not found by name)."""
    x, n = args
    _write_checked(func, x, record(aten.polygamma.default, (n, x), {}))
    return x


def _factory_like(func, args, kwargs):
    """zeros_like & co.: device data made on the host (no compile, stable graph keys)."""
    from .executor import host_constant
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    name = func._schema.name.split("::")[-1]
    if name in ("new_zeros", "new_ones", "new_empty", "new_full", "new_empty_strided"):
        shape = tuple(args[1])
    else:
        shape = tuple(x.shape)
    if name in ("zeros_like", "new_zeros", "empty_like", "new_empty", "new_empty_strided"):
        fill = 0
    elif name in ("ones_like", "new_ones"):
        fill = 1
    else:  # full_like(self, fill_value), new_full(self, size, fill_value)
        fill = args[2] if name == "new_full" else args[1]
        if not number_fits(fill, dtype):   # torch's checked conversion: its error or value
            fill = torch.full((), fill, dtype=dtype).item()
    out = host_constant(shape, dtype, fill)
    if not name.endswith("_like"):
        return out
    dynamic.note_like(node_of(out), node_of(x))   # (padded as x is, where x is)
    laid = _in_torch_layout(func, args, kwargs, node_of(out))  # (a permuted input's kept)
    return out if laid is None else laid


def _unsupported(func, args, kwargs):
    raise UnsupportedOperation(f"{func} is not supported on lazy tensors (their storage cannot "
                               "be resized or swapped); clone() into a new tensor instead")


def _resize(func, args, kwargs):
    """``resize_``/``resize_as_`` of a base tensor no view shares: its elements in order,
    as many as fit, then zeros (where torch leaves memory uninitialized)."""
    x = args[0]
    size = tuple(args[1].shape if func is aten.resize_as_.default else args[1])
    if kwargs.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
        raise UnsupportedOperation(f"{func} with memory_format={kwargs['memory_format']}: lazy "
                                   "tensors are resized to contiguous ones only")
    if size == tuple(x.shape):
        return x
    if any(d < 0 for d in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    refused = UnsupportedOperation(
        f"{func}: a lazy tensor with views (or a view) cannot be resized from "
        f"{list(x.shape)} to {list(size)}: the views would keep the old buffer; resize a "
        "tensor no view shares, or clone() into a new one")
    if x._vw:
        raise refused
    n, old = math.prod(size), x.numel()
    flat = aten.view.default(x, [-1])
    if n <= old:
        flat = aten.slice.Tensor(flat, 0, 0, n)
    else:
        from .executor import host_constant
        flat = aten.cat.default([flat, host_constant((n - old,), x.dtype, 0)])
    new = aten.clone.default(aten.view.default(flat, list(size)))
    del flat   # (a view of ``x``: it would hold its storage)
    if not resize_base(x, new):
        raise refused
    return x


def _set(func, args, kwargs):
    """``x.set_(y)``: ``x`` reads ``y``'s buffer with ``y``'s sizes (as ``x.data = y``);
    ``x.set_()``: a new empty buffer. Views of ``x`` made before keep its old buffer, as
    torch's do."""
    x = args[0]
    if func is aten.set_.default:
        from .executor import host_constant
        src = host_constant((0,), x.dtype, 0)
    else:
        src = args[1]
        if not isinstance(src, LazyTensor):
            raise UnsupportedOperation(f"{func}: the source is on {src.device}, not the lazy "
                                       "device")
        if src.dtype != x.dtype:
            raise RuntimeError(f"Could not set tensor of type {_dtype_name(src.dtype).lower()} "
                               f"to a tensor of type {_dtype_name(x.dtype).lower()}")
    hold(x, src)
    return x


def _resize_out(func, t: LazyTensor, v: ir.Node) -> None:
    """Give out= tensor ``t`` value ``v`` of another shape, as torch resizes out= tensors
    (with its warning where ``t`` had elements)."""
    old = list(t.shape)
    if not resize_base(t, new_base(v)):
        raise UnsupportedOperation(
            f"{func}: the out= tensor would be resized from {old} to {list(v.shape)}, but "
            "a view of it (or it, a view) is alive and would keep the old buffer; pass an "
            "out= tensor of the result's shape")
    if math.prod(old):
        warnings.warn(f"An output with one or more elements was resized since it had shape "
                      f"{old}, which does not match the required output shape "
                      f"{list(v.shape)}. This behavior is deprecated, and in a future PyTorch "
                      "release outputs will not be resized unless they have zero elements. "
                      "You can explicitly reuse an out tensor t by resizing it, inplace, to "
                      "zero elements with t.resize_(0).", UserWarning, stacklevel=3)


def _check_bernoulli_p(func, args, kwargs) -> None:
    """torch's check of a number probability (``bernoulli_(1.5)`` raises, NaN too)."""
    if func is aten.bernoulli_.float or func is aten.bernoulli.p:
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        if isinstance(p, (int, float)) and not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")


def _random_(func, args, kwargs):
    """In-place random fills (normal_, uniform_, bernoulli_, random_, exponential_)."""
    _check_bernoulli_p(func, args, kwargs)
    x = args[0]
    n = record(func, args, kwargs, extra_inputs=(("_rng", random.next_leaf()),))
    write(x, n)
    return x


def _random_functional(func, args, kwargs):
    _check_bernoulli_p(func, args, kwargs)
    return _wrap(func, record(func, args, kwargs, extra_inputs=(("_rng", random.next_leaf()),)))


def _random_like(func, args, kwargs):
    """randn_like, rand_like, randint_like: an empty tensor like ``args[0]`` filled in
    place by normal_, uniform_ or random_ (the runtime's seeded stream)."""
    x = args[0]
    out = aten.empty_like.default(x, dtype=kwargs.get("dtype") or x.dtype)
    name = func._schema.name
    if name == "aten::randn_like":
        return aten.normal_.default(out)
    if name == "aten::rand_like":
        return aten.uniform_.default(out)
    low, high = (0, args[1]) if len(args) == 2 else args[1:3]
    return getattr(aten.random_, "from")(out, low, high)


def _repeat_interleave(func, args, kwargs):
    """``repeat_interleave`` of tensor repeats (the indices; ``x.repeat_interleave(r)``
    selects with them). Without ``output_size`` its length is the repeats' sum: the repeats
    are read on the host (data already on the device: a transfer; pending: folded from
    data where ``fold`` can, else a barrier, as torch's CUDA kernel synchronizes) and the
    form given ``output_size`` is recorded. Negative repeats run eagerly: torch's error."""
    repeats = args[0] if args else kwargs.get("repeats")
    if kwargs.get("output_size") is None and isinstance(repeats, LazyTensor) and \
            repeats.ndim == 1 and repeats.dtype in (torch.int32, torch.int64) and \
            repeats.numel() > 0:
        from .executor import read_for_shape
        host = read_for_shape(repeats)
        if bool((host < 0).any()):
            raise NoLowering(func, "negative repeats (torch raises its error)")
        kwargs = {**kwargs, "output_size": int(host.sum())}
    return _functional(func, args, kwargs)


def _host_nonzero(t) -> torch.Tensor:
    """``torch.nonzero`` of ``t`` on the host: a lazy tensor read as ``_repeat_interleave``
    reads its repeats (torch's kernels read a mask there too), a CPU one counted as a read
    as well (a replay must not reuse these positions)."""
    from .executor import read_for_shape
    if type(t) is LazyTensor:
        return torch.nonzero(read_for_shape(t))
    METRICS.host_folds += 1
    return torch.nonzero(t)


def _true_positions(mask) -> list:
    """A bool mask's true positions, one long lazy tensor per dim (this step's data)."""
    from .executor import data_tensor
    return [data_tensor(p) for p in _host_nonzero(mask).unbind(1)]


def _is_mask(i) -> bool:
    return isinstance(i, torch.Tensor) and i.dtype == torch.bool


def _index_with_masks(func, args, kwargs):
    """``x[mask]`` (boolean masks among the indices): its size is the mask's count. The
    mask's true positions index x instead (torch's own rewrite of a mask), so x stays
    lazy and the step's graph goes on, where an eager ``x[mask]`` cut it and copied x to
    the host and back. The count is a new size most steps: automatic dynamic pads it. A
    CPU mask needs no read. A 0-d, uint8, or misshapen mask runs eagerly (torch's
    semantics and errors)."""
    x, indices = args
    if not any(map(_is_mask, indices)):
        return _functional(func, args, kwargs)
    out, d = [], 0
    for i in indices:
        if _is_mask(i):
            if i.ndim == 0 or tuple(i.shape) != tuple(x.shape[d:d + i.ndim]):
                raise NoLowering(func, "a 0-d mask, or one not of the indexed dims' shape")
            out.extend(_true_positions(i))
            d += i.ndim
        else:
            out.append(i)
            d += 1
    return _functional(func, (x, out), kwargs)


def _masked_select(func, args, kwargs):
    """``masked_select(x, mask)``: ``x[mask]`` of the two broadcast (``_index_with_masks``);
    its gradient is torch's (a ``masked_scatter``)."""
    x, mask = args
    if type(x) is not LazyTensor or not _is_mask(mask):
        raise NoLowering(func, "a CPU tensor selected from, or a mask that is not bool")
    try:
        shape = torch.broadcast_shapes(x.shape, mask.shape)
    except RuntimeError:
        raise NoLowering(func, "shapes that do not broadcast (torch's error)") from None
    shape = shape or (1,)   # (0-d operands: a 1-d result all the same)
    return aten.index.Tensor(x.expand(shape), [mask.expand(shape)])


def _nonzero(func, args, kwargs):
    """``nonzero`` (``argwhere``, ``torch.where(cond)``): its input read on the host
    (``_host_nonzero``), the positions copied back as data."""
    x = args[0]
    if not isinstance(x, LazyTensor) or x.is_complex():
        raise NoLowering(func, "a complex or non-lazy input")
    from .executor import data_tensor
    return data_tensor(_host_nonzero(x))


_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _bincount(func, args, kwargs):
    """``bincount``: its length (the input's largest value + 1, at least ``minlength``) read
    on the host as ``_repeat_interleave`` reads its repeats; the counts a scatter-add of
    ones (or of the weights) on the device, so the step's graph goes on. The result's
    dtype is torch's: int64, or the weights' float32/float64 (float64 for any other)."""
    x = args[0]
    weights = args[1] if len(args) > 1 else kwargs.get("weights")
    minlength = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
    if type(x) is not LazyTensor or x.ndim != 1 or x.dtype not in _INTEGRAL or \
            minlength < 0 or weights is not None and (
                type(weights) is not LazyTensor or tuple(weights.shape) != tuple(x.shape)):
        raise NoLowering(func, "not a 1-d integral input with lazy weights of its shape "
                               "(torch's errors)")
    from .executor import read_for_shape
    length = minlength
    if x.numel():
        host = read_for_shape(x)
        if bool((host < 0).any()):
            raise NoLowering(func, "negative values (torch raises its error)")
        length = max(length, int(host.max()) + 1)
    dtype = torch.int64 if weights is None else weights.dtype \
        if weights.dtype in (torch.float32, torch.float64) else torch.float64
    counts = x.new_zeros((length,), dtype=dtype)
    if not x.numel():
        return counts
    src = x.new_ones(tuple(x.shape), dtype=dtype) if weights is None else \
        weights.to(dtype)
    return aten.index_add.default(counts, 0, x.to(torch.int64), src)


def _on_the_host(func, args, kwargs):
    """``unique`` and its kin: every result's shape depends on the values, which are read
    on the host (``read_for_shape``: no barrier where they are this step's data or folded
    from it) and the op run there by torch; the results are copied back as data."""
    x = args[0]
    if type(x) is not LazyTensor:
        raise NoLowering(func, "a CPU input")
    from .executor import data_tensor, read_for_shape
    out = func(read_for_shape(x), *args[1:], **kwargs)
    if isinstance(out, torch.Tensor):
        return data_tensor(out)
    return type(out)(data_tensor(t) for t in out)


SPECIAL = {
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.lift_fresh.default: _alias,
    aten.set_.source_Tensor: _set,
    aten.set_.default: _set,
    aten.set_.source_Storage: _unsupported,
    aten.set_.source_Storage_storage_offset: _unsupported,
    aten.resize_.default: _resize,
    aten.resize_as_.default: _resize,
    aten._linalg_check_errors.default: linalg.check_errors,
    aten.equal.default: _equal,
    aten._has_same_storage_numel.default: _has_same_storage_numel,
    torch.ops.prims.copy_strided.default: _copy_strided,
    aten.allclose.default: _allclose,
    aten.polygamma_.default: _polygamma_,
    aten.repeat_interleave.Tensor: _repeat_interleave,
    aten.index.Tensor: _index_with_masks,
    aten.nonzero.default: _nonzero,
    aten.masked_select.default: _masked_select,
    aten.bincount.default: _bincount,
    aten._unique2.default: _on_the_host,
    aten._unique.default: _on_the_host,
    aten.unique_dim.default: _on_the_host,
    aten.unique_consecutive.default: _on_the_host,
}
for _op in _INPLACE_VIEWS:
    SPECIAL[_op] = _inplace_view
for _name in ("zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones",
              "new_empty", "new_full", "new_empty_strided"):
    SPECIAL[getattr(aten, _name).default] = _factory_like
for _op in (aten.normal_.default, aten.uniform_.default, aten.bernoulli_.float,
            aten.bernoulli_.Tensor, aten.random_.default, getattr(aten.random_, "from"),
            aten.random_.to,
            aten.exponential_.default):
    SPECIAL[_op] = _random_
for _op in (aten.native_dropout.default, aten.bernoulli.default, aten.bernoulli.p,
            aten._standard_gamma.default, aten._sample_dirichlet.default,
            aten.poisson.default, aten.binomial.default):
    SPECIAL[_op] = _random_functional
for _op in (aten.randn_like.default, aten.rand_like.default, aten.randint_like.default,
            aten.randint_like.low_dtype):
    SPECIAL[_op] = _random_like
# Recurrent layers and packing (``ops.recurrent``): reached here with autograd's keys off
# (inference_mode); with them on, at AutogradPrivateUse1.
for _op, _fn in recurrent.LAYER_OPS.items():
    SPECIAL[_op] = lambda func, args, kwargs, _fn=_fn: _fn(*args, **kwargs)
_KEEPS_LAYOUT.update(id(op) for op in (*ELEMENTWISE, aten.clone.default, aten.flip.default))


# ---- fallback -----------------------------------------------------------------------


def _no_lowering(func, args, kwargs):
    raise NoLowering(func, "no lowering and no decomposition")


def _decompose(func, args, kwargs):
    out = _DECOMP[func](*_lift(args), **_lift(kwargs))
    if out is NotImplemented:   # some decompositions cover only some arguments
        raise NoLowering(func, "its decomposition does not cover these arguments")
    METRICS.decomposed_ops[str(func)] += 1
    return out


def _lift(a):
    """CPU tensors among a decomposition's arguments become lazy (its device checks pass)."""
    if isinstance(a, LazyTensor):
        return a
    if isinstance(a, torch.Tensor):
        from .executor import data_tensor
        return data_tensor(a)
    if isinstance(a, (list, tuple)):
        return type(a)(_lift(x) for x in a)
    if isinstance(a, dict):
        return {k: _lift(v) for k, v in a.items()}
    return a


def _lazy_leaves(obj, out):
    if isinstance(obj, LazyTensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _lazy_leaves(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _lazy_leaves(o, out)
    return out


def fallback(func, args, kwargs, reason: str = ""):
    """Run ``func`` eagerly in torch on materialized inputs; results re-enter as data."""
    from .executor import sync, to_cpu, data_tensor, data_node_from_cpu
    lazies = _lazy_leaves((args, kwargs), [])
    METRICS.fallback(str(func), reason)
    if any(t._st.node.op not in ir.SETTLED for t in lazies):
        sync("fallback")
    cpu_of: dict[int, torch.Tensor] = {}

    def to_host(a):
        if isinstance(a, LazyTensor):
            if id(a) not in cpu_of:
                cpu_of[id(a)] = to_cpu(a)
            return cpu_of[id(a)]
        if isinstance(a, (list, tuple)):
            return type(a)(to_host(x) for x in a)
        if isinstance(a, torch.device) and a.type == "lazy_jax":
            return torch.device("cpu")
        return a

    pos, names = _mutated_args(func)
    outs = _lazy_leaves([kwargs[n] for n in names if n in kwargs], [])
    for t in outs:   # (torch resizes an out= tensor: a host copy it owns, not a borrowed one)
        cpu_of.setdefault(id(t), to_cpu(t).clone())
    hargs = to_host(args)
    hkw = {k: to_host(v) for k, v in kwargs.items()}
    with _cpu_view_keys():
        out = func(*hargs, **hkw)
    # Write back what the op mutated.
    back = {}
    targets = [args[i] for i in pos if i < len(args)] + outs
    for t in _lazy_leaves(targets, []):
        h = cpu_of[id(t)]
        _write_checked(func, t, data_node_from_cpu(h), out=True)   # (as torch resized it)
        back[id(h)] = t

    alias = _returns_alias(func)

    def to_lazy(o):
        if isinstance(o, torch.Tensor):
            if id(o) in back:
                return back[id(o)]
            t = data_tensor(o)
            if alias:   # a copy where torch gives a view: a write would not reach the base
                t._st.frozen = (f"in-place write into the result of {func}, which ran "
                                "eagerly: it is a copy on the lazy device, not a view of its "
                                "input (write into a clone() instead)")
            return t
        if isinstance(o, (list, tuple)):
            return type(o)(to_lazy(x) for x in o)
        return o

    return to_lazy(out)


_VIEW_KEYS = tuple(getattr(torch._C.DispatchKey, k) for k in ("Conjugate", "Negative",
                                                              "ZeroTensor"))


@contextlib.contextmanager
def _cpu_view_keys():
    """Inside ``__torch_dispatch__`` torch excludes the keys above Python, the conjugate and
    negative bits' among them: a CPU kernel run there that conjugates through a view
    (``x * x.conj()``) silently would not (complex lstsq's residuals came out negative).
    They are on again while a fallback runs torch's kernel."""
    excluded = [torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in _VIEW_KEYS]
    for k in _VIEW_KEYS:
        torch._C._dispatch_tls_set_dispatch_key_excluded(k, False)
    try:
        yield
    finally:
        for k, was in zip(_VIEW_KEYS, excluded):
            torch._C._dispatch_tls_set_dispatch_key_excluded(k, was)


@functools.lru_cache(maxsize=None)
def _returns_alias(func) -> bool:
    """Whether torch's result of ``func`` is a view of an argument (``Tensor(a)``)."""
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in func._schema.returns)


# ---- the boundary -------------------------------------------------------------------

_HANDLERS: dict = {}


def _resolve(func):
    handler = _resolve_lazy(func)
    if any(a.name == "device" and a.kwarg_only for a in func._schema.arguments):
        return functools.partial(_to_the_named_device, handler)
    return handler


def _to_the_named_device(handler, func, args, kwargs):
    """An op taking ``device=`` (``x.to("cpu")``, ``zeros_like(x, device="cpu")``,
    ``x.new_zeros(..., device="cpu")``, ``linspace`` of tensor ends) that names the CPU (or
    meta): made there by torch, as eager does. Lazy arguments enter as their values (a
    read, as torch's ``item()`` of a CUDA end), or as meta tensors where only their shape
    and dtype count (``*_like``, ``new_*``: no barrier). Another accelerator is refused."""
    device = kwargs.get("device")
    if device is None:
        return handler(func, args, kwargs)
    kind = torch.device(device).type
    if kind == DEVICE.type:
        return handler(func, args, kwargs)
    if kind not in ("cpu", "meta"):
        raise UnsupportedOperation(f"{func}: cannot copy a lazy tensor to {device}, nor make "
                                   "a tensor there from one; go through .cpu()")
    name = func._schema.name.split("::")[-1]
    meta = name.endswith("_like") or name.startswith("new_")

    def away(a):
        if not isinstance(a, LazyTensor):
            return a
        if meta:
            return torch.empty_strided(tuple(a.shape), a.stride(), dtype=a.dtype,
                                       device="meta")
        from .executor import to_cpu
        return to_cpu(a)
    return func(*[away(a) for a in args], **{k: away(v) for k, v in kwargs.items()})


def _resolve_lazy(func):
    if func in config.force_fallback:
        return _no_lowering
    if func in SPECIAL:
        return SPECIAL[func]
    if foreach.is_foreach(func):
        return functools.partial(foreach.foreach_handler, call=call_op)
    if func in VIEW_OPS:
        return _view
    pos, names = _mutated_args(func)
    if pos or names:
        functional = functional_of(func)
        if names and not pos and functional in SPECIAL:   # (a random op: its draw, and so on)
            return functools.partial(_out_through, functional=functional,
                                     handler=SPECIAL[functional])
        if functional is not None and functional not in config.force_fallback and (
                (functional in RULES and functional in LOWERINGS) or functional in _DECOMP):
            return lambda f, a, k, functional=functional: _mutating(f, functional, a, k)
        if names and not pos:
            handler = _no_lowering if functional is None else _resolve_lazy(functional)
            if handler is _no_lowering:
                return _out_only
            return functools.partial(_out_through, functional=functional, handler=handler)
        return _no_lowering
    if func in RULES and func in LOWERINGS:
        return _functional
    if func in _DECOMP:
        return _decompose
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return _composite
    return _no_lowering


def _composite(func, args, kwargs):
    """An op torch defines in terms of others (reached when a decomposition calls it)."""
    METRICS.decomposed_ops[str(func)] += 1
    return func.decompose(*args, **kwargs)


def _out_through(func, args, kwargs, functional, handler):
    """An out= op whose functional form the device runs some other way than a recorded
    lowering (torch's composite, a data-dependent op's own handler): that form, its
    results written into the out= tensors (resized as torch does)."""
    _, names = _mutated_args(func)
    res = handler(functional, args, {k: v for k, v in kwargs.items() if k not in names})
    outs = [kwargs.get(n) for n in names]
    for t, r in zip(outs, res if isinstance(res, (list, tuple)) else (res,)):
        _write_checked(func, t, node_of(r), out=True)
    return tuple(outs) if isinstance(res, (list, tuple)) else outs[0]


def _out_only(func, args, kwargs):
    """An out= op with no functional form (arange.start_out & co.): when its only lazy
    arguments are outputs, compute it on the host; it is a constant of the graph."""
    from .executor import data_node_from_cpu
    _, names = _mutated_args(func)
    ins = _lazy_leaves(([a for a in args], {k: v for k, v in kwargs.items() if k not in names}),
                       [])
    if ins:
        raise NoLowering(func, "out= variant with lazy inputs")
    outs = [kwargs[n] for n in names]
    hkw = dict(kwargs)
    for n in names:
        o = kwargs[n]
        hkw[n] = torch.empty(tuple(o.shape), dtype=o.dtype)
    res = func(*args, **hkw)
    METRICS.host_ops += 1
    for n, o in zip(names, outs):
        _write_checked(func, o, data_node_from_cpu(hkw[n]), out=True)
    if isinstance(res, torch.Tensor):
        return outs[0]
    return tuple(outs)


def torch_dispatch(cls, func, types, args=(), kwargs=None):
    if _PROBE:
        _probed(func)
    return _run(func, args, kwargs if kwargs is not None else {})


def _run(func, args, kwargs):
    METRICS.traced_ops += 1
    handler = _HANDLERS.get(id(func))  # id: OpOverload.__hash__ is a Python function
    if handler is None:
        handler = _HANDLERS[id(func)] = _resolve(func)
    try:
        try:
            return handler(func, args, kwargs)
        except NoLowering as e:
            return fallback(func, args, kwargs, e.reason)
    except Exception as e:
        err = as_torch_error(e) if type(e) is ShapeError else e   # (a rule's: torch's type)
        if torch._C._current_autograd_node() is None or errors_cross_backward():
            if err is e:
                raise
            raise err.with_traceback(e.__traceback__) from None
        return _defer_error(func, args, kwargs, err)


# ---- ops called from inside a handler -----------------------------------------------

# The overload torch picks for an op packet and its arguments' types (see ``call_op``).
_OVERLOADS: dict = {}
_PROBE: list = []   # while an overload is learned: [packet] then [packet, overload]


def _overload_key(packet, args: tuple, kwargs: dict) -> tuple:
    return (id(packet), *map(type, args), *[(k, type(v)) for k, v in kwargs.items()])


def call_op(packet, args: tuple, kwargs: dict):
    """``packet(*args, **kwargs)`` from inside a handler (a ``_foreach_*`` op's per-tensor
    ops), without a round trip through torch's dispatcher (about 5 µs an op). Which
    overload torch resolves the call to is learned from its first call with these
    argument types, made through torch."""
    key = _overload_key(packet, args, kwargs)
    func = _OVERLOADS.get(key)
    if func is not None:
        return _run(func, args, kwargs)
    _PROBE.append(packet)
    try:
        out = packet(*args, **kwargs)
    finally:
        seen = _PROBE[1] if len(_PROBE) > 1 else None
        _PROBE.clear()
    if seen is not None:
        _OVERLOADS[key] = seen
    return out


def same_layout_recorder(packet, args: tuple, kwargs: dict, inplace: bool):
    """After ``call_op(packet, args, kwargs)`` (the first per-tensor op of a ``_foreach_*``
    op): ``rec(args_i, kwargs_i)``, what ``call_op`` gives for a later call of ``packet``
    with arguments of these types, recorded without the op's rule where every lazy tensor
    among them has one shape and one float32/float64 dtype and every other argument is a
    Python float or int that fits it (the rule's answer is then known, ``SAME_LAYOUT``; it
    reads each tensor's shape and dtype, slow on a subclass, where the nodes have them).
    The same node as ``record``'s; ``rec`` gives None where the case does not hold (then
    ``call_op`` decides). None where no call may be: the op's rule is not trusted, or it
    is an in-place op writing more than its first argument."""
    key = (_overload_key(packet, args, kwargs), inplace)
    rec = _RECORDERS.get(key, False)
    if rec is False:
        func = _OVERLOADS.get(key[0])
        if func is None:   # (not learned: nothing to remember)
            return None
        rec = _RECORDERS[key] = _same_layout_recorder(func, args, kwargs, inplace)
    return rec


# same_layout_recorder's answers by the call's overload key (the argument types) and
# whether it writes in place: all its answer depends on, besides the tables and
# ``config.force_fallback`` (whose changes ``clear_handler_cache`` follows).
_RECORDERS: dict = {}


def _same_layout_recorder(func, args: tuple, kwargs: dict, inplace: bool):
    if func in config.force_fallback:
        return None
    mutated = _mutated_args(func)
    if mutated == ((), ()):
        functional = func
    elif mutated == ((0,), ()) and len(func._schema.returns) == 1:
        functional = functional_of(func)
    else:
        return None
    if functional is None or not same_layout_ok(functional):
        return None
    static = _rule_of(functional)[2]
    ints = functional in _INT_INPUT_OPS
    arg_kinds = tuple((type(a), _argument_kind(a, static is not None and i not in static, ints))
                      for i, a in enumerate(args))
    kw_kinds = tuple((k, type(v), _argument_kind(v, static is not None and k not in static,
                                                 ints)) for k, v in kwargs.items())
    if any(kind is None for _, kind in arg_kinds) \
            or any(k[2] is None or k[2] is _TENSOR for k in kw_kinds):
        return None
    return _same_layout_record(functional, inplace, arg_kinds, kw_kinds)


def _probed(func) -> None:
    """Note the first op of the probed packet that reaches the dispatcher (an op that
    torch decomposes above it reaches it as other ops: never learned, always called
    through torch)."""
    if len(_PROBE) == 1:
        _PROBE.append(func if func.overloadpacket is _PROBE[0] else None)


# With torch's Python device guard an exception must not cross torch's autograd engine
# on this device: the guard aborts the process while unwinding. Inside backward, errors
# then become poisoned results (shaped by torch's meta kernels, on this error path only)
# and are raised at the next barrier. (With the C++ guard they raise as on the CPU.)
DEFERRED_ERRORS: list = []


def _defer_error(func, args, kwargs, err):
    from .errors import LazyRuntimeError
    wrapped = LazyRuntimeError(f"{func} failed during backward: {type(err).__name__}: {err}")
    wrapped.__cause__ = err
    DEFERRED_ERRORS.append(wrapped)

    def to_meta(a):
        if isinstance(a, torch.Tensor):
            return torch.empty(tuple(a.shape), dtype=a.dtype, device="meta")
        if isinstance(a, (list, tuple)):
            return type(a)(to_meta(x) for x in a)
        if isinstance(a, torch.device) and a.type == "lazy_jax":
            return torch.device("meta")
        return a

    try:
        out = func(*to_meta(args), **{k: to_meta(v) for k, v in kwargs.items()})
    except Exception:
        out = to_meta(args[0]) if args and isinstance(args[0], torch.Tensor) else None
    for t in _lazy_leaves(args, []):
        pos, names = _mutated_args(func)
        if any(args[i] is t for i in pos if i < len(args)):
            write(t, ir.leaf(ir.ERROR, wrapped, tuple(t.shape), t.dtype))

    def poison(o):
        if isinstance(o, torch.Tensor):
            return new_base(ir.leaf(ir.ERROR, wrapped, tuple(o.shape), o.dtype))
        if isinstance(o, (list, tuple)):
            return type(o)(poison(x) for x in o)
        return o

    pos, _ = _mutated_args(func)
    if pos and len(func._schema.returns) == 1 and func._schema.returns[0].alias_info is not None:
        return args[pos[0]]
    return poison(out)


def clear_handler_cache() -> None:
    """Forget resolved handlers (after changing ``config.force_fallback`` or a table)."""
    _HANDLERS.clear()
    _RULE_CACHE.clear()
    _MUTATION_PLANS.clear()
    _VIEW_PLANS.clear()
    _OVERLOADS.clear()
    _RECORDERS.clear()
    _RULE_MEMO.clear()


LazyTensor.__torch_dispatch__ = classmethod(torch_dispatch)
LazyTensor.item = _item
foreach.make_default_for(LazyTensor)
