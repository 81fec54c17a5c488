"""Padding rules: how each op runs on inputs padded along dynamic dims (see ``dynamic``).

A rule receives the node, the layouts of its inputs (``node.inputs`` order) and the pass
context, and returns a ``Pad``: the output layout, the arguments with symbolic sizes,
which inputs to sanitize (padding replaced by the identity of what the op does across
that dim) and, rarely, a custom lowering. Padding values are garbage (possibly inf or
NaN); every op that reads *across* a padded dim sanitizes with ``where`` (never by
multiplying by a mask, which would keep NaN). An op whose inputs carry no dynamic dim
needs no rule; an op with no rule that sees one makes the graph compile exactly.

Rules by family:
* elementwise (and dropout, masked_fill, copies, cumsum/cumprod: end padding is safe):
  padding passes through; broadcasting a dynamic dim against another size is refused.
* views: view/reshape regroup the factors of the input dims in order (a dynamic factor is
  never split); permute permutes; expand/slice read sizes through ``Cx.symbolize``.
* contractions (mm, bmm, addmm, baddbmm) over a padded dim: both operands zeroed there.
* reductions: sum 0, prod 1, amax/max -inf, amin/min +inf, any False, all True,
  logsumexp -inf; mean, var and std divide by the true count.
* softmax/log_softmax along a padded dim: -inf; their backward: 0.
* layer norm: the normalized dims must be concrete; its backward zeroes the padded rows
  (so weight/bias gradients are exact).
* nll_loss: padded targets become ``ignore_index`` (mean divides by the true count).
* embedding: padded ids gather garbage rows; its backward zeroes their gradients.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ..dynamic import NoPadRule, Pad, SymSize, dnorm, dsize, has_sym, is_sym, sym_or_int
from .common import jdt, norm_dim, norm_dims, opmath
from .registry import ELEMENTWISE, pad_rule

aten = torch.ops.aten


def _i(a):
    """Input index of a template argument (an ``Input`` marker)."""
    return a.i


def _syms(*layouts):
    return {f for lay in layouts if lay is not None for d in lay for f in d if type(f) is str}


def broadcast_layouts(op, layouts, out_ndim):
    out = []
    for k in range(out_ndim):
        dim = (1,)
        for lay in layouts:
            j = k - (out_ndim - len(lay))
            if j < 0:
                continue
            d = lay[j]
            if d == (1,):
                continue
            if dim == (1,):
                dim = d
            elif d != dim:
                raise NoPadRule(op, f"broadcast of {d} against {dim}", _syms((d,), (dim,)))
        out.append(dim)
    return tuple(out)


# ---- elementwise --------------------------------------------------------------------


# Elementwise ops whose int arguments may be sizes (mean's backward divides by numel):
# those equal to a product of the inputs' symbols become run-time values.
# (Only divisors: an int multiplier is more often a true constant that T happens to divide.)
_SIZE_ARGS = {aten.div.Scalar, aten.div.Tensor}


def pad_elementwise(node, ins, cx):
    lays = [l for l in ins if l is not None]
    if node.op in _SIZE_ARGS and any(type(a) is int and a > 1 for a in node.args):
        syms = _syms(*lays)
        if syms:
            args = tuple(cx.runtime_int(a, syms) if type(a) is int and a > 1 else a
                         for a in node.args)
            p = pad_elementwise_layout(node, lays)
            p.args = args
            return p
    return pad_elementwise_layout(node, lays)


def pad_elementwise_layout(node, lays):
    if isinstance(node.dtype, tuple):
        lay = broadcast_layouts(node.op, lays, len(node.shape[0]))
        return Pad(tuple(lay if s is not None else None for s in node.shape))
    return Pad(broadcast_layouts(node.op, lays, len(node.shape)))


for _op in ELEMENTWISE:
    pad_rule(_op)(pad_elementwise)
pad_rule(aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten._to_copy.default,
         aten.fill.Scalar, aten.fill.Tensor, aten.zero.default, aten.native_dropout.default,
         aten.native_dropout_backward.default, aten.bernoulli.p, aten.bernoulli.default,
         aten.cumsum.default, aten.cumprod.default,
         # position-based masks: padded positions keep their indices (end padding)
         aten.tril.default, aten.triu.default)(pad_elementwise)


# ---- views --------------------------------------------------------------------------


def regroup(op, layout, shape, sizes):
    """Output dims for viewing ``layout`` as ``shape``: input factors, in order, grouped
    into the output dims. Concrete factors may be split; dynamic ones never."""
    items = [f for d in layout for f in d if not (type(f) is int and f == 1)]
    q = list(reversed(items))
    out = []
    for o in shape:
        acc, fac = 1, []
        if o == 0:
            raise NoPadRule(op, "empty view")
        while acc != o:
            if not q:
                raise NoPadRule(op, f"view {layout} as {shape}", _syms(layout))
            f = q[-1]
            if type(f) is str:
                v = sizes[f]
                if o % (acc * v):
                    raise NoPadRule(op, f"view splits dynamic dim {f}", {f})
                acc *= v
                fac.append(q.pop())
            else:
                if o % acc:
                    raise NoPadRule(op, f"view {layout} as {shape}", _syms(layout))
                need = o // acc
                if need % f == 0:
                    acc *= f
                    fac.append(q.pop())
                elif f % need == 0:
                    q[-1] = f // need
                    acc *= need
                    fac.append(need)
                else:
                    raise NoPadRule(op, f"view {layout} as {shape}", _syms(layout))
        out.append(dnorm(fac))
    if q:
        raise NoPadRule(op, f"view {layout} as {shape}: factors left", _syms(layout))
    return tuple(out)


@pad_rule(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default)
def pad_view(node, ins, cx):
    (lay,) = ins
    if not has_sym(lay):
        return Pad(tuple((s,) for s in node.shape))
    out = regroup(node.op, lay, node.shape, cx.sizes)
    args = (node.args[0], tuple(sym_or_int(d) for d in out))
    if len(node.args) > 2:
        args += (None,)
    return Pad(out, args=args)


@pad_rule(aten.permute.default)
def pad_permute(node, ins, cx):
    (lay,) = ins
    n = len(lay)
    return Pad(tuple(lay[d % n] for d in node.args[1]) if n else ())


@pad_rule(aten.expand.default)
def pad_expand(node, ins, cx):
    (lay,) = ins
    shape = node.shape
    lead = len(shape) - len(lay)
    out = []
    for k, s in enumerate(shape):
        j = k - lead
        if j < 0 or (lay[j] == (1,) and s != 1):
            out.append(cx.symbolize(s, k))
        else:
            out.append(lay[j])
    out = tuple(out)
    return Pad(out, args=(node.args[0], tuple(sym_or_int(d) for d in out)) + node.args[2:])


@pad_rule(aten.slice.Tensor)
def pad_slice(node, ins, cx):
    (lay,) = ins
    args = node.args + (None,) * (5 - len(node.args))
    x, dim, start, end, step = args
    d = norm_dim(dim if dim is not None else 0, len(lay))
    src = lay[d]
    m = node.shape[d]
    start = start or 0
    step = step or 1
    if is_sym(src):
        if start != 0 or step != 1 or m != dsize(src, cx.sizes):
            raise NoPadRule(node.op, "slice inside a dynamic dim", _syms((src,)))
        return Pad(lay, args=(x, d, 0, SymSize(src), 1))
    out = list(lay)
    if start == 0 and step == 1:
        nd = cx.symbolize(m, "end")
        if is_sym(nd):
            if dsize(nd, cx.buckets) > dsize(src, {}):
                raise NoPadRule(node.op, "bucket larger than the sliced dim", _syms((nd,)))
            out[d] = nd
            return Pad(tuple(out), args=(x, d, 0, SymSize(nd), 1))
    out[d] = (m,)
    return Pad(tuple(out))


@pad_rule(aten.select.int)
def pad_select(node, ins, cx):
    (lay,) = ins
    d = norm_dim(node.args[1], len(lay))
    if is_sym(lay[d]) and node.args[2] < 0:
        raise NoPadRule(node.op, "select from the end of a dynamic dim", _syms((lay[d],)))
    return Pad(lay[:d] + lay[d + 1:])


@pad_rule(aten.slice_scatter.default)
def pad_slice_scatter(node, ins, cx):
    base, src = ins
    args = node.args + (None,) * (6 - len(node.args))
    dim, start, end, step = args[2:6]
    d = norm_dim(dim or 0, len(base))
    if is_sym(base[d]):
        if (start or 0) != 0 or (step or 1) != 1 or src[d] != base[d]:
            raise NoPadRule(node.op, "slice_scatter inside a dynamic dim", _syms((base[d],)))
        return Pad(base, args=args[:2] + (d, 0, SymSize(base[d]), 1))
    if any(a != b for k, (a, b) in enumerate(zip(base, src)) if k != d):
        raise NoPadRule(node.op, "slice_scatter layouts differ", _syms(base, src))
    return Pad(base)


@pad_rule(aten.select_scatter.default)
def pad_select_scatter(node, ins, cx):
    base, src = ins
    d = norm_dim(node.args[2], len(base))
    if is_sym(base[d]) and node.args[3] < 0:
        raise NoPadRule(node.op, "select_scatter from the end of a dynamic dim",
                        _syms((base[d],)))
    if base[:d] + base[d + 1:] != src:
        raise NoPadRule(node.op, "select_scatter layouts differ", _syms(base, src))
    return Pad(base)


@pad_rule(aten.cat.default)
def pad_cat(node, ins, cx):
    lays = [l for l in ins if len(l) == len(node.shape)]
    dim = node.args[1] if len(node.args) > 1 else dict(node.kwargs).get("dim", 0)
    d = norm_dim(dim, len(node.shape))
    for lay in lays:
        if is_sym(lay[d]):
            raise NoPadRule(node.op, "cat along a dynamic dim", _syms(lay))
        if lay[:d] + lay[d + 1:] != lays[0][:d] + lays[0][d + 1:]:
            raise NoPadRule(node.op, "cat of different layouts", _syms(lay, lays[0]))
    out = list(lays[0])
    out[d] = (node.shape[d],)
    return Pad(tuple(out))


@pad_rule(aten.stack.default)
def pad_stack(node, ins, cx):
    if any(l != ins[0] for l in ins):
        raise NoPadRule(node.op, "stack of different layouts", _syms(*ins))
    dim = node.args[1] if len(node.args) > 1 else dict(node.kwargs).get("dim", 0)
    d = norm_dim(dim, len(node.shape))
    return Pad(ins[0][:d] + ((node.shape[d],),) + ins[0][d:])


def _flip_fn(ctx, env, in_lays, x, dims):
    lay = in_lays[0]
    for d in dims:
        d = norm_dim(d, x.ndim)
        x = jnp.flip(x, d)
        if is_sym(lay[d]):  # valid data now ends the dim: move it back to the front
            x = jnp.roll(x, env.count(lay, (d,)) - env.dsize(lay[d]), axis=d)
    return x


@pad_rule(aten.flip.default)
def pad_flip(node, ins, cx):
    (lay,) = ins
    dims = [norm_dim(d, len(lay)) for d in node.args[1]]
    if not any(is_sym(lay[d]) for d in dims):
        return Pad(lay)
    if any(len(lay[d]) != 1 for d in dims if is_sym(lay[d])):
        raise NoPadRule(node.op, "flip of a merged dynamic dim", retry=False)
    return Pad(lay, fn=_flip_fn, tag="flip")


# ---- contractions -------------------------------------------------------------------


def _contract(op, a, b, ka, kb, pos_a, pos_b):
    if a[ka] != b[kb]:
        raise NoPadRule(op, f"contraction of {a[ka]} with {b[kb]}", _syms((a[ka], b[kb])))
    if is_sym(a[ka]):
        return ((pos_a, (ka,), 0), (pos_b, (kb,), 0))
    return ()


@pad_rule(aten.mm.default)
def pad_mm(node, ins, cx):
    a, b = ins
    pre = _contract(node.op, a, b, 1, 0, _i(node.args[0]), _i(node.args[1]))
    return Pad((a[0], b[1]), pre=pre)


@pad_rule(aten.bmm.default)
def pad_bmm(node, ins, cx):
    a, b = ins
    if a[0] != b[0]:
        raise NoPadRule(node.op, "bmm batch layouts differ", _syms(a, b))
    pre = _contract(node.op, a, b, 2, 1, _i(node.args[0]), _i(node.args[1]))
    return Pad((a[0], a[1], b[2]), pre=pre)


@pad_rule(aten.addmm.default, aten.baddbmm.default)
def pad_addmm(node, ins, cx):
    x, a, b = (ins[_i(node.args[k])] for k in range(3))
    nd = len(a)
    if nd == 3 and a[0] != b[0]:
        raise NoPadRule(node.op, "baddbmm batch layouts differ", _syms(a, b))
    pre = _contract(node.op, a, b, nd - 1, nd - 2, _i(node.args[1]), _i(node.args[2]))
    out = a[:-1] + (b[-1],)
    broadcast_layouts(node.op, [out, x], nd)
    return Pad(out, pre=pre)


# ---- reductions ---------------------------------------------------------------------


def _reduce_layout(lay, axes, keepdim):
    if keepdim:
        return tuple((1,) if k in axes else d for k, d in enumerate(lay))
    return tuple(d for k, d in enumerate(lay) if k not in axes)


def _dims_of(node, pos=1):
    a = node.args[pos] if len(node.args) > pos else dict(node.kwargs).get("dim")
    return a


def _keep(node, pos=2):
    return bool(node.args[pos]) if len(node.args) > pos else bool(dict(node.kwargs).get(
        "keepdim", False))


def _sym_axes(lay, axes):
    return tuple(a for a in axes if is_sym(lay[a]))


def _reduction(fill, dim_pos=1):
    def rule(node, ins, cx):
        lay = ins[0]
        dims = _dims_of(node, dim_pos)
        if isinstance(dims, int):
            dims = (dims,)
        axes = norm_dims(dims, len(lay))
        sa = _sym_axes(lay, axes)
        return Pad(_reduce_layout(lay, axes, _keep(node, dim_pos + 1)),
                   pre=((0, sa, fill),) if sa else ())
    return rule


pad_rule(aten.sum.default, aten.sum.dim_IntList)(_reduction(0))
pad_rule(aten.prod.default, aten.prod.dim_int)(_reduction(1))
pad_rule(aten.amax.default)(_reduction("min"))
pad_rule(aten.amin.default)(_reduction("max"))
pad_rule(aten.any.default, aten.any.dim, aten.any.dims)(_reduction(False))
pad_rule(aten.all.default, aten.all.dim, aten.all.dims)(_reduction(True))
pad_rule(aten.logsumexp.default)(_reduction("min"))


@pad_rule(aten.max.default, aten.min.default)
def pad_max_all(node, ins, cx):
    lay = ins[0]
    sa = _sym_axes(lay, range(len(lay)))
    return Pad((), pre=((0, sa, "min" if node.op is aten.max.default else "max"),) if sa else ())


@pad_rule(aten.max.dim, aten.min.dim, aten.argmax.default, aten.argmin.default)
def pad_arg_reduce(node, ins, cx):
    lay = ins[0]
    dim = _dims_of(node)
    if dim is None:
        if has_sym(lay):
            raise NoPadRule(node.op, "flat index over a padded tensor", _syms(lay))
        return Pad(())
    d = norm_dim(dim, len(lay))
    fill = "min" if node.op in (aten.max.dim, aten.argmax.default) else "max"
    out = _reduce_layout(lay, (d,), _keep(node))
    pre = ((0, (d,), fill),) if is_sym(lay[d]) else ()
    if isinstance(node.dtype, tuple):
        return Pad((out, out), pre=pre)
    return Pad(out, pre=pre)


def _mean_fn(ctx, env, in_lays, x, dim=None, keepdim=False, *, dtype=None):
    axes = norm_dims(dim, x.ndim) if dim is not None else tuple(range(x.ndim))
    acc = jdt(opmath(ctx.dtype))
    s = jnp.sum(x.astype(acc), axis=axes, keepdims=keepdim)
    return (s / env.count(in_lays[0], axes)).astype(jdt(ctx.dtype))


@pad_rule(aten.mean.default, aten.mean.dim)
def pad_mean(node, ins, cx):
    p = _reduction(0)(node, ins, cx)
    if p.pre:
        p.fn, p.tag = _mean_fn, "mean"
    return p


def _var_fn(std):
    def fn(ctx, env, in_lays, x, dim=None, *, correction=None, keepdim=False):
        axes = norm_dims(dim, x.ndim) if dim is not None else tuple(range(x.ndim))
        lay = in_lays[0]
        acc = jdt(opmath(ctx.dtype))
        xf = x.astype(acc)
        n = env.count(lay, axes)
        mean = jnp.sum(xf, axis=axes, keepdims=True) / n
        dev = xf - mean
        m = env.mask(lay, axes)
        dev = jnp.where(m, dev, 0) if m is not None else dev
        c = 1 if correction is None else correction
        v = jnp.sum(dev * dev, axis=axes, keepdims=keepdim) / jnp.maximum(n - c, 0)
        return (jnp.sqrt(v) if std else v).astype(jdt(ctx.dtype))
    return fn


@pad_rule(aten.var.correction, aten.std.correction)
def pad_var(node, ins, cx):
    lay = ins[0]
    dims = _dims_of(node)
    if isinstance(dims, int):
        dims = (dims,)
    axes = norm_dims(dims, len(lay))
    kw = dict(node.kwargs)
    out = _reduce_layout(lay, axes, bool(kw.get("keepdim", False)))
    sa = _sym_axes(lay, axes)
    if not sa:
        return Pad(out)
    std = node.op is aten.std.correction
    return Pad(out, pre=((0, sa, 0),), fn=_var_fn(std), tag="std" if std else "var")


@pad_rule(aten.linalg_vector_norm.default)
def pad_vector_norm(node, ins, cx):
    ord_ = node.args[1] if len(node.args) > 1 else dict(node.kwargs).get("ord", 2)
    if has_sym(ins[0]) and not (isinstance(ord_, (int, float)) and ord_ > 0):
        raise NoPadRule(node.op, f"norm of order {ord_}", _syms(ins[0]))
    return _reduction(0, dim_pos=2)(node, ins, cx)


# ---- softmax ------------------------------------------------------------------------


@pad_rule(aten._softmax.default, aten._log_softmax.default, aten._safe_softmax.default)
def pad_softmax(node, ins, cx):
    lay = ins[0]
    if not lay:
        return Pad(lay)
    d = norm_dim(node.args[1], len(lay))
    return Pad(lay, pre=((0, (d,), "min"),) if is_sym(lay[d]) else ())


@pad_rule(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)
def pad_softmax_backward(node, ins, cx):
    g, y = ins[_i(node.args[0])], ins[_i(node.args[1])]
    if g != y:
        raise NoPadRule(node.op, "layouts differ", _syms(g, y))
    if not g:
        return Pad(g)
    d = norm_dim(node.args[2], len(g))
    if not is_sym(g[d]):
        return Pad(g)
    pre = ((_i(node.args[0]), (d,), 0),)
    if node.op is aten._softmax_backward_data.default:
        pre += ((_i(node.args[1]), (d,), 0),)
    return Pad(g, pre=pre)


# ---- normalization ------------------------------------------------------------------


@pad_rule(aten.native_layer_norm.default)
def pad_layer_norm(node, ins, cx):
    lay = ins[_i(node.args[0])]
    k = len(node.args[1])
    if has_sym(lay[len(lay) - k:]):
        raise NoPadRule(node.op, "layer norm over a dynamic dim", _syms(lay))
    stat = lay[:len(lay) - k] + ((1,),) * k
    return Pad((lay, stat, stat))


@pad_rule(aten.native_layer_norm_backward.default)
def pad_layer_norm_backward(node, ins, cx):
    g, x, shape, mean, rstd, w, b, mask = node.args
    lay = ins[_i(x)]
    k = len(shape)
    nb = len(lay) - k
    if has_sym(lay[nb:]):
        raise NoPadRule(node.op, "layer norm over a dynamic dim", _syms(lay))
    batch = tuple(a for a in range(nb) if is_sym(lay[a]))
    pre = ()
    if batch:
        pre = tuple((_i(t), batch, 0) for t in (g, x, mean, rstd))
    wl = ins[_i(w)] if w is not None else ((s,) for s in shape)
    bl = ins[_i(b)] if b is not None else wl
    outs = (lay if node.dtype[0] is not None else None,
            tuple(wl) if node.dtype[1] is not None else None,
            tuple(bl) if node.dtype[2] is not None else None)
    return Pad(outs, pre=pre)


# ---- losses -------------------------------------------------------------------------


@pad_rule(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def pad_nll_loss(node, ins, cx):
    x, target, weight, reduction, ignore = node.args
    xl, tl = ins[_i(x)], ins[_i(target)]
    if len(xl) >= 2 and is_sym(xl[1]) or len(xl) == 1 and is_sym(xl[0]):
        raise NoPadRule(node.op, "nll_loss over a dynamic class dim", _syms(xl))
    pre = ()
    ta = tuple(a for a in range(len(tl)) if is_sym(tl[a]))
    if ta:
        xa = tuple(a for a in range(len(xl)) if a != 1 and is_sym(xl[a]))
        pre = ((_i(target), ta, ignore), (_i(x), xa, 0))
    out = tl if reduction == 0 else ()
    return Pad((out, ()), pre=pre)


@pad_rule(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def pad_nll_loss_backward(node, ins, cx):
    g, x, target, weight, reduction, ignore, total = node.args
    xl, tl = ins[_i(x)], ins[_i(target)]
    if len(xl) >= 2 and is_sym(xl[1]) or len(xl) == 1 and is_sym(xl[0]):
        raise NoPadRule(node.op, "nll_loss over a dynamic class dim", _syms(xl))
    ta = tuple(a for a in range(len(tl)) if is_sym(tl[a]))
    pre = ()
    if ta:
        pre = ((_i(target), ta, ignore),)
        if reduction == 0:
            pre += ((_i(g), ta, 0),)
    return Pad(xl, pre=pre)


def _mse_fn(ctx, env, in_lays, x, t, reduction=1):
    lay = env_broadcast(in_lays[0], in_lays[1])
    d = jnp.square(x.astype(jnp.float32) - t.astype(jnp.float32))
    axes = tuple(range(len(lay)))
    m = env.mask(lay, axes)
    d = jnp.where(m, d, 0) if m is not None else d
    s = jnp.sum(d)
    return (s / env.count(lay, axes) if reduction == 1 else s).astype(jdt(ctx.dtype))


def env_broadcast(a, b):
    n = max(len(a), len(b))
    a = ((1,),) * (n - len(a)) + tuple(a)
    b = ((1,),) * (n - len(b)) + tuple(b)
    return tuple(x if x != (1,) else y for x, y in zip(a, b))


@pad_rule(aten.mse_loss.default)
def pad_mse_loss(node, ins, cx):
    reduction = node.args[2] if len(node.args) > 2 else dict(node.kwargs).get("reduction", 1)
    lay = broadcast_layouts(node.op, list(ins), max(len(l) for l in ins))
    if reduction == 0:
        return Pad(lay)
    if not has_sym(lay):
        return Pad(())
    return Pad((), fn=_mse_fn, tag="mse")


def _mse_backward_fn(ctx, env, in_lays, g, x, t, reduction):
    lay = in_lays[1]
    d = 2 * (x.astype(jnp.float32) - t.astype(jnp.float32)) * g.astype(jnp.float32)
    if reduction == 1:
        d = d / env.count(lay, tuple(range(len(lay))))
    return jnp.broadcast_to(d, ctx.shape).astype(jdt(ctx.dtype))


@pad_rule(aten.mse_loss_backward.default)
def pad_mse_loss_backward(node, ins, cx):
    g, x, t, reduction = node.args
    xl = ins[_i(x)]
    if ins[_i(t)] != xl:
        raise NoPadRule(node.op, "layouts differ", _syms(xl, ins[_i(t)]))
    if not has_sym(xl):
        return Pad(xl)
    return Pad(xl, fn=_mse_backward_fn, tag="mse_backward")


# ---- embedding ----------------------------------------------------------------------


@pad_rule(aten.embedding.default)
def pad_embedding(node, ins, cx):
    wl, il = ins[_i(node.args[0])], ins[_i(node.args[1])]
    if has_sym(wl):
        raise NoPadRule(node.op, "embedding table with a dynamic dim", _syms(wl))
    return Pad(il + wl[1:])


@pad_rule(aten.embedding_dense_backward.default)
def pad_embedding_backward(node, ins, cx):
    g, idx = node.args[0], node.args[1]
    gl, il = ins[_i(g)], ins[_i(idx)]
    axes = tuple(a for a in range(len(il)) if is_sym(il[a]))
    pre = ((_i(g), axes, 0), (_i(idx), axes, 0)) if axes else ()
    return Pad(((node.shape[0],),) + gl[len(il):], pre=pre)


# ---- indexing -----------------------------------------------------------------------


def _leading_index(node, ins, xl, indices):
    """Layout of x[idx0, idx1, ...] when the index tensors index x's leading, concrete dims
    (the common gather of rows); None when that is not the case."""
    if any(i is None for i in indices):
        return None
    k = len(indices)
    if has_sym(xl[:k]):
        raise NoPadRule(node.op, "indexing into a dynamic dim", _syms(xl))
    ils = [ins[_i(i)] for i in indices]
    nd = max(len(l) for l in ils)
    return broadcast_layouts(node.op, ils, nd), k


@pad_rule(aten.index.Tensor)
def pad_index(node, ins, cx):
    x, indices = node.args
    xl = ins[_i(x)]
    r = _leading_index(node, ins, xl, indices)
    if r is None:
        raise NoPadRule(node.op, "index pattern", _syms(*ins))
    il, k = r
    return Pad(il + xl[k:])


@pad_rule(aten.index_put.default)
def pad_index_put(node, ins, cx):
    x, indices, values = node.args[:3]
    xl = ins[_i(x)]
    r = _leading_index(node, ins, xl, indices)
    if r is None:
        raise NoPadRule(node.op, "index pattern", _syms(*ins))
    il, k = r
    vl = ins[_i(values)]
    axes = tuple(a for a in range(len(il)) if is_sym(il[a]))
    if axes and len(vl) != len(il) + len(xl) - k:
        raise NoPadRule(node.op, "broadcast values", _syms(vl, il))
    accumulate = node.args[3] if len(node.args) > 3 else dict(node.kwargs).get("accumulate")
    if axes and not accumulate:
        raise NoPadRule(node.op, "index_put without accumulate from padded rows", _syms(il))
    return Pad(xl, pre=((_i(values), axes, 0),) if axes else ())


def _same_but(op, a, b, d):
    if len(a) != len(b) or any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != d):
        raise NoPadRule(op, f"layouts {a} and {b} differ", _syms(a, b))


@pad_rule(aten.scatter.src, aten.scatter.value, aten.scatter_add.default)
def pad_scatter(node, ins, cx):
    """Writes stay in their row: padded rows of the index write into padded rows of the
    result. The index's own scatter dim must be concrete (its values point anywhere)."""
    x, dim, index = node.args[:3]
    xl, il = ins[_i(x)], ins[_i(index)]
    d = norm_dim(dim, len(xl))
    if is_sym(il[d]):
        raise NoPadRule(node.op, "scatter from a padded index dim", retry=False)
    _same_but(node.op, xl, il, d)
    src = node.args[3] if len(node.args) > 3 else None
    if type(src).__name__ == "Input" and ins[_i(src)] != il and len(ins[_i(src)]):
        _same_but(node.op, ins[_i(src)], il, -1)
    return Pad(xl)


@pad_rule(aten.gather.default)
def pad_gather(node, ins, cx):
    """Index values point at valid positions; padded index rows gather garbage rows."""
    x, dim, index = node.args[:3]
    xl, il = ins[_i(x)], ins[_i(index)]
    d = norm_dim(dim, len(xl))
    _same_but(node.op, xl, il, d)
    return Pad(il)
