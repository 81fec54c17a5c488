"""Padding rules: how each op runs on inputs padded along dynamic dims (see ``dynamic``).

A rule receives the node, the layouts of its inputs (``node.inputs`` order) and the pass
context, and returns a ``Pad``: the output layout, the arguments with symbolic sizes,
which inputs to sanitize (padding replaced by the identity of what the op does across
that dim) and, rarely, a custom lowering. Padding values are garbage (possibly inf or
NaN); every op that reads *across* a padded dim sanitizes with ``where`` (never by
multiplying by a mask, which would keep NaN). An op whose inputs carry no dynamic dim
needs no rule; an op with no rule that sees one makes the graph compile exactly.

Rules by family:
* elementwise (and dropout, masked_fill, copies; the prefix scans and tril/triu, which
  along a merged dim padded inside read the true order):
  padding passes through; broadcasting a dynamic dim against another size is refused.
* views: view/reshape regroup the factors of the input dims in order (a dynamic factor T
  splits only into (T//k, k), its bucket a multiple of k); permute permutes;
  expand/slice read sizes through ``Cx.symbolize``; repeat makes r copies of a padded dim
  the merged dim (r, T).
* slice/select/narrow/split/cat *inside* a padded dim: positions are read from the front
  or from the end (the true size at run time); ``x[:, 1:]``/``x[:, :-1]`` get the derived
  symbol ``T-1`` (``Cx.shrink``: padded like T, no copy); their backward (slice/select
  scatter) writes at the same positions; a strided slice compiles exactly. roll rotates
  the true positions; flip flips and rolls back.
* cat of two or more dynamic pieces: the sum symbol ``(P+A)`` (``Cx.sums``), padded to the
  sum of the pieces' padded sizes; a slice (or its scatter) that is one piece has that
  piece's symbol, at the true size before it (``_piece``). A merged piece (a ViT's patch
  grid flattened, its class token put before it) is a symbol of its own (``_flat``), its
  true elements gathered to its front; cut out again, it has the merged layout back.
* constant_pad_nd at a padded dim's end: by constants ``T+k``; back to a fixed length;
  by an amount that varies (up to a multiple, learnt) a symbol of the pad's own
  (``_grown_dim``), a crop back to a symbol's size taking that symbol.
* unfold and its backward, as_strided cutting windows along a padded last dim
  (``torch.stft``): the window count is a strided convolution's output dim.
* slice/select and their scatter of a *concrete* dim at a moving start (``Cx.offset``):
  ``lax.dynamic_slice``/``dynamic_update_slice`` at a start read at run time.
* convolution (and its backward): batch dims pass through; a padded spatial dim is zeroed
  at its tail and maps to T, T-k (valid conv) or a derived ``(T+c)//s`` (strided); a conv
  that grows the dim, or a transposed one, compiles exactly. max pool: batch dims only.
* batch norm in training: statistics (and the running ones) from true counts; backward as
  the vjp of that. LSTM cell: rows pass through; its backward zeroes padded rows.
  LSTM, GRU and RNN layers: rows pass through, padded steps keep the carry; padding
  zeroed first.
* contractions (mm, bmm, addmm, baddbmm, dot, vdot, mv, addmv) over a padded dim: both
  operands zeroed there.
* sort, topk, kthvalue, median, nanmedian and mode: along a concrete dim the other dims
  pass through; along a dim padded at its end the padding sorts last (k checked against
  the true size in the graph). A sort along a merged dim padded inside compacts it first
  (``_flat``: a mixture of experts' (B, T, k) picks); indices into such a dim are mapped
  to their padded places (``_spread``), and a view splitting a compacted dim spreads it
  back (``_spread_dims``). histc/histogram over a given range, and ``_grouped_mm`` over
  rows sorted by expert (the padding past the last offset). scatter along a padded dim
  from an index padded there as well (a sort's gradient): padded positions write to
  themselves; scatter_add from one into a concrete dim (a gather's gradient): adds 0.
* reductions: sum 0, prod 1, amax/max -inf, amin/min +inf, any False, all True,
  logsumexp -inf; mean, var and std divide by the true count.
* softmax/log_softmax along a padded dim: -inf; their backward: 0.
* layer norm: the normalized dims must be concrete; its backward zeroes the padded rows
  (so weight/bias gradients are exact).
* nll_loss: padded targets become ``ignore_index`` (mean divides by the true count).
* embedding: padded ids gather garbage rows; its backward zeroes their gradients.
* index_put with a boolean mask, one row of values per selected element, only the rows
  padded (``x[mask] = y[mask]``): the count checked is the true one; padding rows write
  nowhere. masked_scatter from a source padded along its leading dim
  (``masked_select``'s gradient) likewise.
* index_select, index_add, ``x[:, cols]`` and ``x[:, cols] = v``: a padded index gives
  padded rows; the indexed dim padded at its end (indices point at true rows, a negative
  one counts from the true size).
* resampling a concrete size to a padded length (a ViT's position grid to the patch
  grid): taps tabulated on the host for every length of the bucket, picked at run time;
  a padded length to another that follows the same input symbol (a feature pyramid's
  levels): tabulated for every size of that symbol up to its bucket.
* complex values: conj, polar, complex, angle and bitcasts are elementwise;
  view_as_real/view_as_complex add or drop the pair dim; the FFT along concrete dims
  passes the others' padding through (along a padded dim it compiles exactly).
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .. import ir
from ..dynamic import (NoPadRule, Pad, Rebucket, RtInt, SymSize, bucket, concrete, cut_at,
                       dnorm, dsize, fill_value, floor_name, has_sym, is_sym, sanitize,
                       slice_bounds, sym_or_int)
from .common import check_index, divide, jdt, norm_dim, norm_dims, opmath, out_of_range, vjp
from .layout import (_full_index, _jnp_index, _out_of_bounds, lower_pad, lower_unfold,
                     lower_unfold_backward, mask_rows_put, masked_scatter_from,
                     per_element_count, put_at, scatter_along)
from .nn import (_add_at_argmax, _avg_pool, _batch_norm, _f32, _lowest, _max_pool,
                 _multi_margin, _multilabel_margin, _trilinear_operands, _tup, adaptive_max,
                 lower_bce_logits, lower_convolution, lower_convolution_backward,
                 lower_smooth_l1_loss_backward, nll_loss_values, pool_strides)
from . import recurrent
from .fft import _scaled, lower_fft_c2c, lower_fft_c2r
from .recurrent import layer_backward, layer_forward
from .resample import (NEAREST, TAPS_TABLE_MAX, _apply, _index_dtype, _nearest,
                       _one_length_taps, linear_taps, lower_grid_sampler,
                       lower_grid_sampler_backward, lower_upsample_bilinear, nearest_source,
                       pairs_table, resample_axis, taps_table)
from .reduction import (histogram_linear, kth_position, lower_logsumexp, median_position,
                        mode_position, pick_sorted, sorted_along, squared_magnitude, top_k,
                        var_input)
from .registry import ELEMENTWISE, check, pad_rule

aten = torch.ops.aten


def _i(a):
    """Input index of a template argument (an ``Input`` marker)."""
    return a.i


def _syms(*layouts):
    return {f for lay in layouts if lay is not None for d in lay for f in d if type(f) is str}


def broadcast_layouts(op, layouts, out_ndim, cx=None):
    """The layout of the broadcast of ``layouts``. Two symbols meet where ``cx`` finds
    them alike (``_alike``); other dims that differ refuse."""
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
            elif d != dim and not _alike(cx, d, dim):
                raise NoPadRule(op, f"broadcast of {d} against {dim}", _syms((d,), (dim,)))
        out.append(dim)
    return tuple(out)


def same_layout(cx, a, b) -> bool:
    """Whether layouts ``a`` and ``b`` are one padded shape in this trace: equal, or apart
    only in dims ``_alike`` finds alike (a pool's gradient expanded to ``(W+1)//2`` where
    the pool's output is ``H-2``, both 11 of 16)."""
    if a == b:
        return True
    return a is not None and b is not None and len(a) == len(b) and all(
        x == y or _alike(cx, x, y) for x, y in zip(a, b))


def unlike(a, b) -> set:
    """The symbols of the dims where layouts ``a`` and ``b`` differ (all of both where
    their ranks do): what a contradiction between them blames."""
    if a is None or b is None or len(a) != len(b):
        return _syms(a, b)
    return _syms(*[(x, y) for x, y in zip(a, b) if x != y])


def _alike(cx, a, b) -> bool:
    """Whether dims ``a`` and ``b`` are factor by factor equal or symbols of one true and
    one padded size in this trace: two names for one length (the ids' T, and the T-1 + 1
    of a KV cache grown by a token; a batch of 2 flattened with each, ``(2, T)`` and ``(2,
    T+1-1)``). Treated as one there, which holds for this trace; the key holds every
    layout, and a trace where they differ refuses here, so it never shares the
    executable."""
    if cx is None or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if type(x) is not str or type(y) is not str or cx.sizes[x] != cx.sizes[y]:
            return False
        if cx.buckets[x] != cx.buckets[y]:
            # one length padded two ways (a mask of T made at T's bucket, the ids'
            # T+1-1 at T+1's): the input symbol padded less is padded as the other
            low, high = (x, y) if cx.buckets[x] < cx.buckets[y] else (y, x)
            if low in cx.inputs or low in cx.elastic:
                raise Rebucket(low, cx.buckets[high])
            return False
    return True


# ---- elementwise --------------------------------------------------------------------


# Elementwise ops whose int arguments may be sizes (mean's backward divides by numel):
# those that count elements of the inputs (a product of their dims with a symbol among
# them) become run-time values.
# (Only divisors: an int multiplier is more often a true constant that T happens to divide.)
_SIZE_ARGS = {aten.div.Scalar, aten.div.Tensor}
# Integer divisions that unravel a flat index into a padded map's rows and columns (``idx
# // W``, ``idx % W`` of an argmax over flattened pixels): an int argument of one symbol's
# true size is that size at run time (a guess, as ``Cx.symbolize``'s: a constant that
# happens to equal a symbol's size keys its trace apart, never wrongly).
_POSITION_ARGS = {aten.floor_divide.default, aten.floor_divide.Scalar, aten.remainder.Scalar,
                  aten.div.Tensor_mode, aten.div.Scalar_mode}


def _end_padded(op, dim) -> None:
    """Ops that read positions along ``dim`` (index values, cumulative sums, triangles,
    argmax's answer) see a padded dim as the true one only when its padding is at its end:
    its padded factor is its most major one. In a flattened (3, T) the padding sits
    between the rows (a gather there read the wrong elements, a cumprod ran through it,
    argmax answered a padded position): those compile exactly."""
    if is_sym(dim) and any(type(f) is not int for f in dim[1:]):
        raise NoPadRule(op, f"positions along a dim padded inside ({dim})", retry=False)


# Elementwise ops whose lowering loops until a value says stop: the operand that says it
# (by argument position) and what its padding holds instead, so that padding never drives
# a loop (a polynomial's degree of 2**61 ran for ever; zeta's shift of a q of -1e18 too).
_LOOP_OPERANDS = {
    **{getattr(aten, f"special_{name}").default: (1, 0) for name in (
        "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
        "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
        "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
        "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
        "laguerre_polynomial_l", "legendre_polynomial_p")},
    aten.special_zeta.default: (1, 1), torch.ops.prims.zeta.default: (1, 1),
    aten.polygamma.default: (1, 1),
}


def _loop_operand(node, ins) -> tuple:
    """The sanitizing ``_LOOP_OPERANDS`` asks of ``node``'s padded operand, if any."""
    at = _LOOP_OPERANDS.get(node.op)
    if at is None or len(node.args) <= at[0] or type(node.args[at[0]]).__name__ != "Input":
        return ()
    j = _i(node.args[at[0]])
    axes = _sym_axes(ins[j], range(len(ins[j]))) if ins[j] is not None else ()
    return ((j, axes, at[1]),) if axes else ()


def pad_elementwise(node, ins, cx):
    # (a random op's key, an input of its own, is not broadcast with its values)
    lays = [l for l, x in zip(ins, node.inputs) if l is not None and x.op is not ir.RNG]
    if node.op in _LOOP_OPERANDS:
        p = pad_elementwise_layout(node, lays, cx)
        p.pre = _loop_operand(node, ins)
        return p
    if node.op in _POSITION_ARGS and any(type(a) is int and a > 1 for a in node.args):
        p = pad_elementwise_layout(node, lays, cx)
        p.args = tuple(_size_int(cx, a, k) if type(a) is int and a > 1 else a
                       for k, a in enumerate(node.args))
        return p
    if node.op in _SIZE_ARGS and any(type(a) is int and a > 1 for a in node.args):
        if _syms(*lays):
            args = tuple(cx.runtime_int(a, lays) if type(a) is int and a > 1 else a
                         for a in node.args)
            p = pad_elementwise_layout(node, lays, cx)
            p.args = args
            return p
    return pad_elementwise_layout(node, lays, cx)


def _size_int(cx, v: int, k: int):
    """Int argument ``k`` of value ``v``: the true size of the symbol of that size
    (``Cx.symbolize``'s guess), else ``v``."""
    if v not in cx.sizes.values():   # (no symbol of its size: a constant, as always)
        return v
    dim = cx.symbolize(v, ("int", k))
    return RtInt(1, dim) if is_sym(dim) and len(dim) == 1 else v


def pad_elementwise_layout(node, lays, cx=None):
    if isinstance(node.dtype, tuple):
        lay = broadcast_layouts(node.op, lays, len(node.shape[0]), cx)
        return Pad(tuple(lay if s is not None else None for s in node.shape))
    return Pad(broadcast_layouts(node.op, lays, len(node.shape), cx))


for _op in ELEMENTWISE:
    pad_rule(_op)(pad_elementwise)
pad_rule(aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten._to_copy.default,
         aten.fill.Scalar, aten.fill.Tensor, aten.zero.default, aten.native_dropout.default,
         aten.native_dropout_backward.default, aten.bernoulli.p,
         # random fills (``randn_like``: ``normal_`` of an empty tensor), drawn for every
         # element of the padded value (the samplers that check a tensor of parameters,
         # poisson's rate, bernoulli's probabilities, would check the padding too: exact)
         aten.normal_.default, aten.uniform_.default, aten.exponential_.default,
         aten.random_.default, getattr(aten.random_, "from"), aten.random_.to,
         aten.bernoulli_.float,
         # complex values: built, conjugated or reinterpreted element by element
         aten._conj.default, aten._conj_physical.default, aten.view.dtype,
         aten.complex.default, aten.polar.default, aten.angle.default)(pad_elementwise)


@pad_rule(aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default,
          aten.cummax.default, aten.cummin.default)
def pad_cumulative(node, ins, cx):
    """Along a dim padded at its end the true positions come first: padding passes (a
    running max's indices point at true positions). Along a merged dim padded inside
    (flattened pixels) the true elements are put first in torch's order, the op runs, and
    its results go back to their places (a running max's indices are torch's)."""
    lay = ins[0]
    d = norm_dim(node.args[1], len(lay)) if lay else 0
    if lay and is_sym(lay[d]) and _inside_padded(lay[d]):
        p = pad_elementwise(node, ins, cx)
        p.fn = functools.partial(_cumulative_inside_fn, node.op, d, lay[d])
        p.tag = "cumulative along a merged dim"
        return p
    return pad_elementwise(node, ins, cx)


def _lowered(op, ctx, *args, **kwargs):
    """``op``'s own lowering of ``args`` (padded values a rule's ``fn`` prepared)."""
    from .registry import LOWERINGS
    low = LOWERINGS[op]
    return low.fn(ctx, *args, **kwargs) if low.ctx else low.fn(*args, **kwargs)


def _cumulative_inside_fn(op, d, merged, ctx, env, in_lays, x, *args, **kwargs):
    r = _lowered(op, ctx, _compact(env, x, d, merged), *args, **kwargs)
    if isinstance(r, tuple):
        return tuple(_compact(env, t, d, merged, back=True) for t in r)
    return _compact(env, r, d, merged, back=True)


@pad_rule(aten.tril.default, aten.triu.default)
def pad_triangle(node, ins, cx):
    """Position-based masks. Along a dim padded at its end the true positions keep their
    indices. Along a merged dim padded inside (a causal mask over flattened pixels) each
    position's index in the true flattened order is computed, and the mask compares
    those (what the padding holds after is no matter)."""
    p = pad_elementwise(node, ins, cx)
    if any(is_sym(dim) and _inside_padded(dim) for dim in ins[0][-2:]):
        p.fn = functools.partial(_triangle_inside_fn, node.op is aten.tril.default)
        p.tag = "triangle along a merged dim"
    return p


def _triangle_inside_fn(lower, ctx, env, in_lays, x, diagonal=0):
    rows, cols = (_true_positions(env, x.shape[d], dim)
                  for d, dim in ((-2, in_lays[0][-2]), (-1, in_lays[0][-1])))
    offset = cols[None, :] - rows[:, None]
    keep = offset <= diagonal if lower else offset >= diagonal
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


def _true_positions(env, n, dim):
    """For each of the ``n`` positions of a dim laid out ``dim``, its index in the true
    order (a merged dim padded inside: its padded positions' indices are any)."""
    if not is_sym(dim) or not _inside_padded(dim):
        return jnp.arange(n)
    true, padded = _factor_sizes(env, dim)
    return _flat_index(n, true, padded)


@pad_rule(aten.view_as_real.default, aten.view_as_complex.default)
def pad_complex_view(node, ins, cx):
    """A trailing dim of the (real, imaginary) pair added or removed."""
    lay = ins[0]
    if node.op is aten.view_as_real.default:
        return Pad(lay + ((2,),))
    if is_sym(lay[-1]):
        raise NoPadRule(node.op, "a padded dim of pairs", _syms(lay))
    return Pad(lay[:-1])


# The longest padded length a complex FFT runs padded along (a DFT: a matrix of its
# length squared, 8 MiB of complex64 at 1024, and as many products per element)
DFT_MAX = 1024


@pad_rule(aten._fft_r2c.default, aten._fft_c2r.default, aten._fft_c2c.default)
def pad_fft(node, ins, cx):
    """Along concrete dims the other dims' padding passes through. Along a dim padded at
    its end (FNet's mixing over the tokens, a Fourier neural operator's layers over a
    grid) a transform is a DFT of the true length: a product with a matrix made on the
    device from the run-time size (the padding zeroed first; outputs past the true length
    are padding). A one-sided real transform along a padded T gives the derived symbol
    ``T//2+1``; its inverse, given a length that is a symbol's size (``irfft(X,
    n=T)``), gives that symbol, the spectrum past ``n//2`` unread as torch leaves it."""
    lay = ins[0]
    dims = tuple(norm_dim(d, len(lay)) for d in node.args[1])   # (in order: the last
    # is the one-sided one)
    padded = tuple(d for d in dims if is_sym(lay[d]))
    out = [(node.shape[d],) if d in dims and d not in padded else lay[d]
           for d in range(len(lay))]
    last = dims[-1]
    real = node.op is aten._fft_c2r.default
    if real:
        out[last] = _real_length(node.op, cx, lay[last], node.args[3])
    elif node.op is aten._fft_r2c.default and node.args[3] and is_sym(lay[last]):
        out[last] = _half_spectrum(node.op, cx, lay[last])
    if not padded and not is_sym(out[last]):
        return Pad(tuple(out))
    for d in padded + ((last,) if real else ()):
        dim = lay[d] if d in padded else out[d]
        _end_padded(node.op, dim)
        if dsize(dim, cx.buckets) > DFT_MAX:
            raise NoPadRule(node.op, f"an FFT along a padded dim longer than {DFT_MAX} "
                            "(a DFT's matrix)", _syms(lay), retry=False)
    args = node.args[:3] + ((sym_or_int(out[last]),) if real else node.args[3:])
    return Pad(tuple(out), args=args, pre=((0, padded, 0),) if padded else (),
               fn=functools.partial(_padded_fft_fn, node.op, tuple(dims), padded,
                                    out[last] if real else None),
               tag="fft along a padded dim")


def _real_length(op, cx, dim, n):
    """The output dim of an inverse real FFT to ``n`` points from a spectrum along
    ``dim``: a symbol of size n (``irfft(X, n=T)``), else, from a padded spectrum of M
    entries, the derived ``2*(M-1)`` (torch's length where none is given)."""
    if not is_sym(dim):
        return (n,)
    nd = cx.symbolize(n, "length")
    if is_sym(nd):
        return nd
    m = _lone_sym(op, dim)
    if n != 2 * (cx.sizes[m] - 1):
        raise NoPadRule(op, f"an inverse real FFT along a padded dim to {n} points, no "
                        "symbol's size", _syms((dim,)))
    return (cx.derive(f"2*({m}-1)", n, 2 * (cx.buckets[m] - 1), m,
                      rule=lambda s: 2 * (s[m] - 1)),)


def _half_spectrum(op, cx, dim):
    """The output dim of a one-sided FFT along padded ``dim`` of n points: the derived
    ``n//2+1``, padded as that of its padded length; M itself where n is ``2*(M-1)``
    (``_real_length``: the gradient of an inverse without a length)."""
    sym = _lone_sym(op, dim)
    base = cx.bases.get(sym)
    if base is not None and sym.rstrip("'") == f"2*({base}-1)" and all(
            n[sym] == 2 * (n[base] - 1) for n in (cx.sizes, cx.buckets)):
        return (base,)
    return (cx.derive(f"{sym}//2+1", cx.sizes[sym] // 2 + 1, cx.buckets[sym] // 2 + 1, sym,
                      rule=lambda n: n[sym] // 2 + 1),)


def _padded_fft_fn(op, dims, padded, out_dim, ctx, env, in_lays, x, dim, normalization,
                   last):
    """An FFT (``op``) along ``dims`` with the ``padded`` ones transformed at their true
    lengths (``_dft``): ``last`` is ``_fft_c2c``'s ``forward``, ``_fft_r2c``'s
    ``onesided``, or ``_fft_c2r``'s output length (padded; ``out_dim`` its dim)."""
    lay = in_lays[0]
    true = {d: env.count(lay, (d,)) if d in padded else x.shape[d] for d in dims}
    if op is aten._fft_c2r.default:
        # the inverse complex transforms along all but the last dim, then the real one
        y = _inverse_ffts(x, dims[:-1], padded, true)
        true[dims[-1]] = env.count((out_dim,), (0,)) if is_sym(out_dim) else last
        if is_sym(out_dim):
            y = _inverse_real_dft(y, dims[-1], true[dims[-1]], last)
        else:
            y = lower_fft_c2r(y, (dims[-1],), 0, last)
        return _scaled(y, normalization, math.prod(true.values()))
    forward = op is aten._fft_r2c.default or last
    half = op is aten._fft_r2c.default and last   # (one-sided along the last dim)
    if half and dims[-1] not in padded:
        x = jnp.fft.rfft(x, axis=dims[-1])
    x = x.astype(jdt(ctx.dtype))
    concrete = tuple(d for d in dims if d not in padded and not (half and d == dims[-1]))
    y = lower_fft_c2c(x, concrete, 0, forward)   # (not normalized yet)
    for d in padded:
        y = _dft(y, d, true[d], forward, ctx.shape[d])
    return _scaled(y, normalization, math.prod(true.values()))


def _inverse_ffts(x, dims, padded, true):
    """The unnormalized inverse complex transforms of ``x`` along ``dims``."""
    y = lower_fft_c2c(x, tuple(d for d in dims if d not in padded), 0, False)
    for d in dims:
        if d in padded:
            y = _dft(y, d, true[d], False, y.shape[d])
    return y


def _twiddles(k, t, n, sign):
    """The angles ``sign * 2 pi k t / n`` (``k``, ``t`` integer vectors, ``n`` traced),
    ``k t`` reduced mod n in integers first (exact, as the FFT's twiddles are)."""
    turns = (k[:, None] * t[None, :]) % n
    return (sign * 2 * math.pi / n) * turns.astype(jnp.float64)


def _dft(x, d, n, forward, length):
    """The DFT of length ``n`` (traced) along ``d`` of ``x`` (zero past ``n``): the sum of
    ``x[t] * exp(-+2 pi i k t / n)`` over t < n, for ``length`` frequencies k."""
    k = jnp.arange(length, dtype=jnp.int64)
    t = jnp.arange(x.shape[d], dtype=jnp.int64)
    angle = _twiddles(k, t, n, -1 if forward else 1)
    w = jnp.where(t[None, :] < n, jnp.exp(1j * angle), 0).astype(x.dtype)   # (k, t)
    y = jnp.tensordot(x, w, axes=([d], [1]), precision=lax.Precision.HIGHEST)
    return jnp.moveaxis(y, -1, d)


def _inverse_real_dft(x, d, n, length):
    """The unnormalized inverse of a one-sided spectrum ``x`` along ``d``, ``n`` (traced)
    real points at ``length`` places: ``X[0] + 2 sum Re(X[k] e^(2 pi i k t / n))`` over
    0 < k < n/2, plus ``X[n/2] (-1)^t`` where n is even: the imaginary parts of ``X[0]`` and
    ``X[n/2]`` unread, as entries past n/2, as torch's ``_fft_c2r`` does."""
    k = jnp.arange(x.shape[d], dtype=jnp.int64)
    t = jnp.arange(length, dtype=jnp.int64)
    weight = jnp.where(2 * k < n, 2, jnp.where(2 * k == n, 1, 0)).at[0].set(1)
    angle = _twiddles(k, t, n, 1)
    real = jnp.real(x).dtype
    cos = (weight[:, None] * jnp.cos(angle)).astype(real)   # (k, t)
    sin = (weight[:, None] * jnp.sin(angle)).astype(real)
    hi = lax.Precision.HIGHEST
    y = jnp.tensordot(jnp.real(x), cos, axes=([d], [0]), precision=hi) - \
        jnp.tensordot(jnp.imag(x), sin, axes=([d], [0]), precision=hi)
    return jnp.moveaxis(y, -1, d)


# ---- views --------------------------------------------------------------------------


def regroup(op, layout, shape, cx):
    """Output dims for viewing ``layout`` as ``shape``: input factors, in order, grouped
    into the output dims. Concrete factors may be split; a dynamic one only into (T//k,
    k) (a patch grid's rows and each patch's, ``view(B, C, H // p, p, W // p, p)``; T//k
    may end a dim after concrete factors, MobileViT's ``(B * C * H // p, p, ...)``), its
    bucket a multiple of k (a resampling's learnt size padded on to one: ``Rebucket``):
    the padding is then T//k's trailing rows. The two merge back into T."""
    sizes = cx.sizes
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
                    # the split's outer part ends this dim after the concrete ``acc``
                    # where more factors follow (MobileViT's rows of patches: H, then
                    # W); a head's split of the last dim, (T, B, 16) as (T, 4, 8),
                    # refuses: 16 taken for a symbol of its size is withdrawn
                    outer = o // acc if o % acc == 0 and (acc == 1 or len(q) > 1) else 0
                    k = v // outer if outer > 1 and v % outer == 0 else 0
                    if k >= 2 and cx.buckets[f] % k and f in cx.elastic:
                        # (a resampling's output padded on to a multiple of k: MobileViT's
                        # map at a multiple of 2)
                        raise Rebucket(f, -(-cx.buckets[f] // k) * k)
                    if k < 2 or cx.buckets[f] % k:
                        raise NoPadRule(op, f"view splits dynamic dim {f}", {f})
                    q[-1] = k
                    fac.append(_split(cx, f, k))
                    acc = o
                    continue
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
                elif len(q) > 1 and type(q[-2]) is int:
                    # (concrete factors regrouped across their bounds, (9, 8) as (8, 9):
                    # Longformer's padded scores viewed with their last two dims swapped)
                    q.append(q.pop() * q.pop())
                else:
                    raise NoPadRule(op, f"view {layout} as {shape}", _syms(layout))
        out.append(dnorm(_unsplit(cx, fac)))
    if q:
        raise NoPadRule(op, f"view {layout} as {shape}: factors left", _syms(layout))
    return tuple(out)


def _split(cx, sym, k) -> str:
    """The symbol ``sym//k`` of the outer part of ``sym`` split into (sym//k, k) (its bucket
    a multiple of k): ``Cx.stepped``'s, which merges back into sym (``_unsplit``)."""
    return cx.stepped(sym, 0, k)


def _spread_dims(cx, lay):
    """``lay`` with each compacted merged dim (``_flat``) spread back to its factors'
    padded layout, or None where it has none. A lone symbol of a compacted dim's true and
    padded sizes is laid out alike, true elements first (the ``arange(n)`` written at a
    mixture of experts' sorted positions, whose length automatic dynamic learnt), so it
    spreads as that dim where one compacted dim has them."""
    out = tuple(_compacted(cx, d) or d for d in lay)
    return None if out == lay else out


def _is_lone_sym(dim) -> bool:
    return len(dim) == 1 and type(dim[0]) is str


def _compacted(cx, dim):
    """The merged dim that ``dim`` holds compacted (``_spread_dims``), or None."""
    if not _is_lone_sym(dim):
        return None
    if dim[0] in cx.flats:
        return cx.flats[dim[0]]
    alike = [m for f, m in cx.flats.items()
             if (cx.sizes[f], cx.buckets[f]) == (cx.sizes[dim[0]], cx.buckets[dim[0]])]
    return alike[0] if len(alike) == 1 else None


def _equal_ends(xs, ys) -> tuple:
    """(a, t): how long the leading and the trailing runs of equal entries of sequences
    ``xs`` and ``ys`` are (the trailing one within what the leading one leaves)."""
    n = min(len(xs), len(ys))
    a = 0
    while a < n and xs[a] == ys[a]:
        a += 1
    t = 0
    while t < n - a and xs[-1 - t] == ys[-1 - t]:
        t += 1
    return a, t


def _kept_dims(cx, node, lay) -> list:
    """The dims of ``lay`` that a view to ``node.shape`` keeps whole (an unsqueeze's):
    those of the leading and trailing runs of dims of equal sizes, 1s left out."""
    dims = [d for d in lay if d != (1,)]
    a, t = _equal_ends([dsize(d, cx.sizes) for d in dims], [v for v in node.shape if v != 1])
    return dims[:a] + dims[len(dims) - t:]


def _spread_view_fn(lay, spread, out, ctx, env, in_lays, x, *args):
    """A view of compacted dims (``lay``) that splits them: their true elements put back
    at their places in the merged layout (``spread``), then viewed as ``out``."""
    for d, (a, b) in enumerate(zip(lay, spread)):
        if a != b:
            x = _compact(env, x, d, b, back=True)
    return x.reshape(tuple(env.dsize(d) for d in out))


def _unsplit(cx, fac) -> list:
    """Factors with each (sym//k, k) of a split merged back into sym."""
    out = []
    for f in fac:
        split = cx.splits.get(out[-1]) if out and type(out[-1]) is str else None
        if split is not None and split[1] == f:
            out[-1] = split[0]
        else:
            out.append(f)
    return out


@pad_rule(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default)
def pad_view(node, ins, cx):
    (lay,) = ins
    if not has_sym(lay):
        return Pad(tuple((s,) for s in node.shape))
    spread = _spread_dims(cx, lay)
    kept = _kept_dims(cx, node, lay) if spread is not None else ()
    if spread is not None and not all(d in kept for d, e in zip(lay, spread) if d != e):
        # a compacted dim split or merged (a mixture of experts' outputs in the tokens'
        # order, viewed as (B*T, k, C), then (B, T, C)): its factors' layout again
        out = regroup(node.op, spread, node.shape, cx)
        return Pad(out, args=_view_args(node, out),
                   fn=functools.partial(_spread_view_fn, lay, spread, out),
                   tag="view of a compacted dim")
    reordered = _refactored_view(node, lay, cx, reordered=True)
    if reordered is not None:
        return reordered
    square = _square_of_a_symbol(cx, node, lay)
    if square is not None:
        refactored = _refactored_view(node, lay, cx)
        if refactored is not None:
            _bucket_as_its_square(cx, *square, refactored.layout)
            return refactored
    try:
        out = regroup(node.op, lay, node.shape, cx)
    except NoPadRule:
        refactored = _refactored_view(node, lay, cx)
        if refactored is None:
            raise
        return refactored
    return Pad(out, args=_view_args(node, out))


def _square_of_a_symbol(cx, node, lay):
    """(the symbol, the count of dims kept whole at the front and at the end) where the
    view splits one lone input symbol, all of that dim, into dims of one size that another
    symbol has (BEiT's relative position bias, gathered by a host index of (N+1)^2
    positions and viewed as (N+1, N+1), added to scores of (N+1, N+1)): read as that
    symbol, twice (``_refactored_view``'s guesses), before a split by a concrete factor
    of that size, (T//k, k), which the scores' dims would contradict. Else None."""
    a, t = _equal_ends([dsize(d, cx.sizes) for d in lay], node.shape)
    old = lay[a:len(lay) - t]
    new = {v for v in node.shape[a:len(node.shape) - t] if v > 1}
    if len(old) != 1 or not _is_lone_sym(old[0]) or old[0][0] not in cx.inputs or \
            len(new) != 1:
        return None
    (v,) = new
    sym = old[0][0]
    return (sym, a, t) if any(w == v for s, w in cx.sizes.items() if s != sym) else None


def _bucket_as_its_square(cx, sym, a, t, out) -> None:
    """Input symbol ``sym`` read as the square of another (``_square_of_a_symbol``: the
    new dims of ``out`` after its ``a`` first dims, before its ``t`` last) padded to at
    least that one's padded square (``Rebucket``): so it has one bucket per bucket of the
    other, not one per size past ``config.max_bucket``."""
    need = dsize(tuple(f for d in out[a:len(out) - t] for f in d), cx.buckets)
    if cx.buckets[sym] < need:
        raise Rebucket(sym, need)


def _refactored_view(node, lay, cx, reordered=False):
    """A view that splits a padded dim at no factor of its own (the relative shift of
    Transformer-XL, XLNet and the Conformer: scores ``(T, P+1)`` viewed as ``(P+1, T)``,
    their first row dropped, viewed back): the dims it keeps whole at either end stay;
    the others' true elements are gathered, in torch's order, into the new dims, each a
    symbol of its size where one has it (a guess) and padded as it is. None where no
    new dim is dynamic. ``reordered``: only where each new dim of a size over 1 is one of
    the old dims' symbols, the only one of its size, and they come in another order (no
    regrouping makes that view, though one splitting ``P+1`` as ``((P+1)//2, 2)`` may
    fit the sizes of one trace: ``P+1`` is ``2T`` there)."""
    shape = node.shape
    a, t = _equal_ends([dsize(d, cx.sizes) for d in lay], shape)
    sizes = shape[a:len(shape) - t]
    old = lay[a:len(lay) - t]
    if reordered:
        syms = [f for d in old for f in d if type(f) is str]
        by_size = {cx.sizes[f]: f for f in syms}
        if len(by_size) < len(syms) or any(v > 1 and v not in by_size for v in sizes):
            return None
        mid = tuple((by_size[v],) if v > 1 else (v,) for v in sizes)
        picked = [d[0] for d in mid if d != (1,)]
        # (in order: no reordering; a symbol twice: a concrete dim of its size read as
        # it, GroupNorm's channels (8) viewed back beside a W of 8)
        if picked == syms or len(set(picked)) < len(picked):
            return None
    else:
        mid = tuple(cx.symbolize(v, ("refactor", k), merged=True) if v > 1 else (v,)
                    for k, v in enumerate(sizes))
    if not has_sym(mid):
        return None
    out = tuple(lay[:a]) + mid + tuple(lay[len(lay) - t:])
    return Pad(out, args=_view_args(node, out),
               fn=functools.partial(_refactor_fn, a, old, mid, out),
               tag="refactoring view")


def _refactor_fn(a, in_mid, out_mid, out, ctx, env, in_lays, x, *args):
    """``_refactored_view``: each padded position of the new dims ``out_mid`` takes the
    element of ``in_mid`` (from dim ``a`` on) at the same place in torch's order."""
    in_true, in_pad = _factor_sizes(env, tuple(f for d in in_mid for f in d))
    out_true, out_pad = _factor_sizes(env, tuple(f for d in out_mid for f in d))
    n_in = math.prod(in_pad)
    flat = x.reshape(x.shape[:a] + (n_in,) + x.shape[a + len(in_mid):])
    at = _remap(_remap(jnp.arange(math.prod(out_pad)), out_pad, out_true), in_true, in_pad)
    y = jnp.take(flat, jnp.clip(at, 0, n_in - 1), axis=a)
    return y.reshape(tuple(env.dsize(d) for d in out))


def _view_args(node, out) -> tuple:
    """A view's arguments with its sizes symbolic (``out``: its layout)."""
    args = (node.args[0], tuple(sym_or_int(d) for d in out))
    return args + (None,) if len(node.args) > 2 else args


def _unfold_fn(ctx, env, in_lays, x, d, size, step, extra):
    widths = [(0, 0)] * x.ndim
    widths[d] = (0, extra)
    return lower_unfold(jnp.pad(x, widths) if extra else x, d, size, step)


def _unfold_padded_fn(ctx, env, in_lays, x, d, size, step, extra):
    """``_unfold_fn`` to the window count's padded length (padded on: ``Rebucket``)."""
    return _to_length(_unfold_fn(ctx, env, in_lays, x, d, size, step, extra), d, ctx.shape[d])


@pad_rule(aten.unfold.default)
def pad_unfold(node, ins, cx):
    """Windows of ``size`` every ``step`` along a padded dim (framing a signal): their
    count is a convolution's output dim (``(T-size)//step+1``, ``T-size+1``); windows past
    it read padding, and are padding."""
    (lay,) = ins
    x, dim, size, step = node.args
    d = norm_dim(dim, len(lay)) if lay else 0
    if not lay or not is_sym(lay[d]):
        return Pad(tuple(lay[:d]) + ((node.shape[d],),) + tuple(lay[d + 1:]) + ((size,),)
                   if lay else concrete(node.shape))
    known = set(cx.sizes)
    out, extra = _spatial_dim(node.op, cx, lay[d], size, step, 0, 1)
    if out[0] not in known:
        # (padded on where its count meets itself padded further, ``Rebucket``:
        # Longformer's chunks written into zeros of ``T // w`` chunks cut by one)
        cx.elastic.add(out[0])
    return Pad(tuple(lay[:d]) + (out,) + tuple(lay[d + 1:]) + ((size,),),
               args=(x, d, size, step, extra), fn=_unfold_padded_fn, tag="unfold")


def _unfold_backward_fn(ctx, env, in_lays, g, d, size, step):
    return lower_unfold_backward(g, ctx.shape, d, size, step)


@pad_rule(aten.unfold_backward.default)
def pad_unfold_backward(node, ins, cx):
    """The windows' gradient added back along the padded dim they were cut from (the base
    of the window count's symbol), windows past the count zeroed first."""
    g, sizes, dim, size, step = node.args
    (lay,) = ins
    d = norm_dim(dim, len(sizes)) if sizes else 0
    if not sizes or not is_sym(lay[d]):   # (other dims padded: the output at their sizes)
        return Pad(tuple(lay[:d]) + ((sizes[d],),) + tuple(lay[d + 1:-1]),
                   args=(g, d, size, step), fn=_unfold_backward_fn, tag="unfold backward") \
            if has_sym(lay) else Pad(concrete(node.shape))
    if lay[-1] != (size,):   # (a guess: an expand's size read as a symbol of that size)
        raise NoPadRule(node.op, f"windows of {lay[-1]}, not {size}", _syms(lay[-1:]))
    frames = _lone_sym(node.op, lay[d])
    base = cx.shrunk.get(frames, (cx.bases.get(frames),))[0]
    if base is not None and cx.sizes.get(base) != sizes[d]:
        # (windows counted from the dim before a pad that grew the windowed one:
        # ``_spatial_dim``)
        grown = [s for s in cx.grown_from
                 if _grown_alike(cx, s)[0] == base and cx.sizes[s] == sizes[d]]
        base = grown[0] if len(grown) == 1 else None
    if base is None or cx.sizes.get(base) != sizes[d]:
        raise NoPadRule(node.op, f"windows {frames} of no padded dim of size {sizes[d]}",
                        {frames})
    return Pad(tuple(lay[:d]) + ((base,),) + tuple(lay[d + 1:-1]), args=(g, d, size, step),
               pre=((_i(g), (d,), 0),), fn=_unfold_backward_fn, tag="unfold backward")


def _framing(shape, size, stride, offset):
    """(window, step) where ``as_strided(size, stride, offset)`` of a row-major tensor of
    ``shape`` cuts its last dim into windows (``torch.stft``'s frames: the leading dims
    merged and laid out again as ``size[:-2]``); else None."""
    if len(size) < 2 or offset or not shape or stride[-1] != 1 or stride[-2] < 1:
        return None
    n, (frames, window), lead = shape[-1], size[-2:], size[:-2]
    if math.prod(lead) != math.prod(shape[:-1]) or window > n or \
            frames != (n - window) // stride[-2] + 1:
        return None
    row = n
    for k in reversed(range(len(lead))):
        if lead[k] != 1 and stride[k] != row:
            return None
        row *= lead[k]
    return window, stride[-2]


def _frames_fn(ctx, env, in_lays, x, lead, window, step, extra):
    rows = x.reshape(-1, x.shape[-1])
    out = _unfold_fn(ctx, env, in_lays, rows, 1, window, step, extra)
    return out.reshape(tuple(lead) + out.shape[1:])


@pad_rule(aten.as_strided.default)
def pad_as_strided(node, ins, cx):
    """Only framing: windows along a padded last dim (``torch.stft``), as ``unfold``."""
    (lay,) = ins
    x, size, stride = node.args[:3]
    offset = node.args[3] if len(node.args) > 3 else None
    if not has_sym(lay):
        return Pad(concrete(node.shape))
    how = _framing(node.inputs[0].shape, tuple(size), tuple(stride), offset or 0)
    if how is None or has_sym(lay[:-1]) or len(lay[-1]) != 1:
        # (windows along another dim, the others read whole, are recorded as unfold:
        # ``LazyTensor.as_strided``)
        raise NoPadRule(node.op, "as_strided of a padded dim (other than windows along "
                        "the last)", _syms(lay))
    window, step = how
    out, extra = _spatial_dim(node.op, cx, lay[-1], window, step, 0, 1)
    lead = tuple(size[:-2])
    return Pad(tuple((n,) for n in lead) + (out, (window,)),
               args=(x, lead, window, step, extra), fn=_frames_fn, tag="frames")


@pad_rule(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def pad_grid_sampler(node, ins, cx):
    """An input padded along its spatial dims is read at the grid's points unnormalized
    by its true sizes (a spatial transformer's ``affine_grid`` of the padded image, the
    sampling offsets of deformable attention), its padding never read; the grid's padded
    points are padding of the output."""
    x, grid = ins
    _grid_batch(node.op, x, grid, cx)
    return Pad(x[:2] + grid[1:-1], fn=_grid_sample_fn, tag="grid sample")


def _grid_batch(op, x, grid, cx):
    if has_sym(x[1:2]) or has_sym(grid[-1:]) or \
            any(is_sym(d) and len(d) != 1 for d in x[2:]) or \
            not same_layout(cx, x[:1], grid[:1]):
        raise NoPadRule(op, "grid sampling of padded channels, coordinates, merged "
                        "dims or batches padded apart", _syms(x, grid))


def _true_sizes(env, lay):
    return [env.count(lay, (d,)) if is_sym(lay[d]) else lay[d][0]
            for d in range(2, len(lay))]


def _grid_sample_fn(ctx, env, in_lays, x, grid, *args):
    return lower_grid_sampler(x, grid, *args, true_sizes=_true_sizes(env, in_lays[0]))


@pad_rule(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def pad_grid_sampler_backward(node, ins, cx):
    """The pullback of ``pad_grid_sampler``'s sampling, the output gradient zeroed at the
    grid's padded points first (they read true elements too)."""
    g, x, grid = ins[:3]
    _grid_batch(node.op, x, grid, cx)
    axes = _sym_axes(g, range(len(g)))
    return Pad((x if node.shape[0] is not None else None, grid),
               pre=((_i(node.args[0]), axes, 0),) if axes else (),
               fn=_grid_sample_backward_fn, tag="grid sample backward")


def _grid_sample_backward_fn(ctx, env, in_lays, g, x, grid, *args):
    return lower_grid_sampler_backward(g, x, grid, *args,
                                       true_sizes=_true_sizes(env, in_lays[1]))


@pad_rule(aten.permute.default)
def pad_permute(node, ins, cx):
    (lay,) = ins
    n = len(lay)
    return Pad(tuple(lay[d % n] for d in node.args[1]) if n else ())


@pad_rule(aten.repeat.default)
def pad_repeat(node, ins, cx):
    """A padded dim repeated r times is r copies of its padded length, one after another:
    the flattened dim (r, T), padded inside as a merge of a batch of r with T is (its
    gradient views it as (r, T) again and sums the copies)."""
    (lay,) = ins
    reps = list(node.args[1])
    lead = len(reps) - len(lay)
    out = [(r,) for r in reps[:lead]]
    for k, (d, r) in enumerate(zip(lay, reps[lead:])):
        if r == 1 or is_sym(d):
            out.append(d if r == 1 else (r,) + d)
            continue
        # (a concrete dim repeated once per sample of a padded batch: instance norm's
        # weight and running statistics, repeated per sample for its batch norm over the
        # (sample, channel) pairs; the padded graph repeats it the bucket's count. A dim of
        # one repeated is an expand, to a merged dim too: SwiftFormer's global query
        # repeated once per pixel of an (H, W) map, ``q.repeat(1, H * W, 1)``)
        n = cx.symbolize(r, ("repeat", k), merged=d == (1,))
        if is_sym(n):
            out.append(n + tuple(f for f in d if f != 1))
            reps[lead + k] = SymSize(n)
        else:
            out.append((r * dsize(d, cx.sizes),))
    return Pad(tuple(out), args=(node.args[0], tuple(reps)))


@pad_rule(aten.expand.default)
def pad_expand(node, ins, cx):
    (lay,) = ins
    shape = node.shape
    lead = len(shape) - len(lay)
    out = []
    for k, s in enumerate(shape):
        j = k - lead
        if j < 0 or (lay[j] == (1,) and s != 1):
            out.append(cx.symbolize(s, k, merged=True))
        else:
            out.append(lay[j])
    out = tuple(out)
    return Pad(out, args=(node.args[0], tuple(sym_or_int(d) for d in out)) + node.args[2:])


# Positions inside a padded dim (single-factor dims only: in a merged dim ``(8, T)`` a true
# position does not map to one padded position). A position is a *spec*: an int (from the
# front) or ``(sym, k)``, the true size of ``sym`` minus ``k`` (from the end, read at run
# time). A position seen in one trace could be either; both are right for that trace, and
# the key holds the spec, so the guess only decides which traces share an executable:
# positions nearer the end are read from the end (``x[:, :-1]``, ``x[:, 1:]``, ``x[:, -1]``,
# ``x[:, :T-1]``: the usual shifted-target and last-element code then shares one). A
# slice's is a guess, withdrawn where its length meets a concrete one (the lowest 3 modes
# of 5, beside their weights).


def _lone_sym(op, dim):
    """The symbol of a single-factor dynamic dim, None for a concrete dim."""
    if not is_sym(dim):
        return None
    if len(dim) != 1:
        raise NoPadRule(op, f"position inside the merged dynamic dim {dim}", _syms((dim,)))
    return dim[0]


def _pos_spec(v: int, n: int, sym, cx=None, site=None):
    """``v``'s spec; read from the end a guess at ``site`` where ``cx`` is given:
    withdrawn, from the front (``h[:, :3]`` of 5 modes, beside a concrete 3 that meets
    it: the weights of those modes)."""
    if sym is None or n - v > v:
        return v
    if cx is not None:
        at = (cx.site, site)
        if (at, sym) in cx.disabled:
            return v
        cx.guesses.append((at, sym))
    return (sym, n - v)


def _at(env, spec):
    """A spec's value in the executable (a traced int for a spec from the end)."""
    return spec if type(spec) is int else env.n[spec[0]] - spec[1]


def _axis_iota(n, axis, ndim):
    shape = [1] * ndim
    shape[axis] = n
    return jnp.arange(n).reshape(shape)


def _window(x, axis, start, length):
    """``x[start:start+length]`` along ``axis``; positions outside ``x`` read its edge
    (they land in padding). ``start`` may be traced."""
    idx = jnp.clip(start + jnp.arange(length), 0, x.shape[axis] - 1)
    return jnp.take(x, idx, axis=axis)


def _slice_fn(ctx, env, in_lays, x, d, start, merged=None):
    return _compact(env, _window(x, d, _at(env, start), ctx.shape[d]), d, merged, True)


def _select_fn(ctx, env, in_lays, x, d, index):
    return jnp.take(x, jnp.clip(_at(env, index), 0, x.shape[d] - 1), axis=d)


def _place(base, src, d, st, n):
    """``base`` with ``src[:n]`` written at ``[st, st + n)`` along ``d`` (``st``, ``n`` may
    be traced)."""
    placed = _window(src, d, -st, base.shape[d])
    pos = _axis_iota(base.shape[d], d, base.ndim)
    return jnp.where((pos >= st) & (pos < st + n), placed.astype(base.dtype), base)


def _place_fn(ctx, env, in_lays, base, src, d, start, size, merged=None):
    """The backward of slicing (or, ``size`` None, selecting from) a padded dim; ``src``
    laid out as merged dim ``merged`` (a piece of a cat) is compacted first."""
    src = _compact(env, src, d, merged)
    if size is None:
        src, size = jnp.expand_dims(src, d), 1
    return _place(base, src, d, _at(env, start), _at(env, size))


def _strided_place_fn(ctx, env, in_lays, base, src, d, start, size, step):
    """``base`` with ``src[:size]`` written at ``start``, ``start + step``, ... along ``d``
    (``size`` may be a spec read at run time: the true length of a strided slice)."""
    pos = jnp.arange(base.shape[d]) - start
    at = jnp.clip(pos // step, 0, src.shape[d] - 1)
    hit = (pos >= 0) & (pos % step == 0) & (pos // step < _at(env, size))
    shape = [1] * base.ndim
    shape[d] = base.shape[d]
    placed = jnp.take(src, at, axis=d).astype(base.dtype)
    return jnp.where(hit.reshape(shape), placed, base)


def _offset_slice_fn(ctx, env, in_lays, x, d, start, length, step):
    """``x[start:start + length * step:step]`` along ``d`` with a run-time start (the
    host normalized it as torch does, so the window lies inside the dim)."""
    w = lax.dynamic_slice_in_dim(x, _at(env, start), (length - 1) * step + 1, d)
    return w if step == 1 else lax.slice_in_dim(w, 0, None, step, d)


def _offset_select_fn(ctx, env, in_lays, x, d, index):
    return lax.dynamic_index_in_dim(x, _at(env, index), d, keepdims=False)


def _offset_place_fn(ctx, env, in_lays, base, src, d, start, step):
    """The scatter of ``_offset_slice_fn`` (``_offset_select_fn`` where ``step`` is None):
    only the written window is touched (a KV cache's one new position)."""
    at, src = _at(env, start), src.astype(base.dtype)
    if step is None:
        return lax.dynamic_update_index_in_dim(base, src, at, d)
    if step == 1:
        return lax.dynamic_update_slice_in_dim(base, src, at, d)
    return base.at[(slice(None),) * d + (at + step * jnp.arange(src.shape[d]),)].set(src)


def _piece(cx, sym, lo, hi):
    """(the dim of the piece of sum symbol ``sym`` (``Cx.sums``) that ``[lo, hi)`` cuts
    out, maybe shifted (``logits[:, P - 1:-1]``, the answer's predictions), its start as
    a position spec), or None. A dynamic piece is known by its length and start in this
    trace, as ``Cx.symbolize`` knows a size (a trace where they coincide otherwise keys
    apart); the nearest one of that length is taken, and its start must be a constant or
    one symbol's true size plus a constant. (A cut of a constant length is read from the
    front or the end as elsewhere.)"""
    pieces = cx.sums.get(sym)
    if pieces is None:
        return None
    found = None
    at, start = 0, 0   # a piece's true start here, and as a spec (None: two symbols)
    for p in pieces:
        n = cx.sizes[p] if type(p) is str else p
        shift = lo - at
        if type(p) is str and hi - lo == n and start is not None \
                and (found is None or abs(shift) < abs(found[2])):
            spec = start + shift if type(start) is int else (start[0], start[1] - shift)
            found = ((p,), spec, shift)
        if type(p) is str:
            start = (p, -start) if type(start) is int else None
        elif start is not None:
            start = start + p if type(start) is int else (start[0], start[1] - p)
        at += n
    if found is None:
        return None
    return cx.flats.get(found[0][0], found[0]), found[1]


def _flat(cx, dim):
    """The symbol of dynamic dim ``dim`` as a cat's piece (None for a concrete dim): its
    own for one factor; for a merged dim (a ViT's patch grid flattened to tokens, the
    class token put before it) a derived symbol of the product's size, padded to the
    product of the buckets, its true elements first (``_compact``). ``Cx.flats`` keeps
    the merged dim, so a slice that cuts that piece out again has its layout."""
    if not is_sym(dim):
        return None
    if len(dim) == 1:
        return dim[0]
    syms = [f for f in dim if type(f) is str]
    name = cx.derive(f"({'*'.join(map(str, dim))})", dsize(dim, cx.sizes),
                     dsize(dim, cx.buckets), syms[0],
                     rule=lambda n, dim=dim: dsize(dim, n))
    cx.flats[name] = dim
    return name


def _inside_padded(dim) -> bool:
    """Whether merged dim ``dim`` has padding between true elements (a symbol after its
    first factor), so that its true elements are not its first ones."""
    return any(type(f) is str for f in dim[1:])


def _flat_index(n, src_sizes, dst_sizes):
    """For positions 0..n-1 of a merged dim in the layout of factor sizes ``dst_sizes``,
    the positions in the layout of ``src_sizes`` that hold the same element (sizes may be
    traced; positions past the true elements land anywhere inside)."""
    return _remap(jnp.arange(n), dst_sizes, src_sizes)


def _remap(at, from_sizes, to_sizes):
    """Positions ``at`` of a merged dim laid out by factor sizes ``from_sizes``, as
    positions of the same elements laid out by ``to_sizes`` (mixed-radix digits)."""
    rem, coords = at, []
    for f in reversed(from_sizes):
        coords.append(rem % f)
        rem = rem // f
    out = 0
    for f, c in zip(to_sizes, reversed(coords)):
        out = out * f + c
    return out


def _spread(env, dim, at):
    """Positions ``at`` of the true elements of merged dim ``dim`` (torch's: the dim
    without padding) as positions in its padded layout (a dim padded inside: an index
    into a flattened ``(B, T)``)."""
    if not _inside_padded(dim):
        return at
    return _remap(at, *_factor_sizes(env, dim))


def _factor_sizes(env, dim) -> tuple:
    """(the true sizes, the padded sizes) of merged dim ``dim``'s factors."""
    return ([env.n[f] if type(f) is str else f for f in dim],
            [env.buckets[f] if type(f) is str else f for f in dim])


def _compact(env, x, d, dim, back=False):
    """``x`` with the true elements of merged dim ``d`` (layout ``dim``) first, in order
    (a piece of a cat along it); the rest is padding. ``back``: the inverse, true
    elements at the front laid out as ``dim`` again (that piece cut out)."""
    if dim is None or not _inside_padded(dim):
        return x
    true, padded = _factor_sizes(env, dim)
    at = _flat_index(x.shape[d], true, padded) if back else \
        _flat_index(x.shape[d], padded, true)
    return jnp.take(x, jnp.clip(at, 0, x.shape[d] - 1), axis=d)


@pad_rule(aten.slice.Tensor)
def pad_slice(node, ins, cx):
    (lay,) = ins
    x, dim = (node.args + (0,))[:2]
    d = norm_dim(dim if dim is not None else 0, len(lay))
    src = lay[d]
    if is_sym(src) and len(src) > 1 and not _inside_padded(src):
        # a merged dim padded at its end only (XLNet's 2T positions, as (T, 2)): a dim
        # of one symbol, its elements where they are (``_flat``)
        src = (_flat(cx, src),)
    sym = _lone_sym(node.op, src)
    lo, hi, step = slice_bounds(node.args[2:], dsize(src, cx.sizes))
    m = hi - lo
    out = list(lay)
    if sym is None:
        start = cx.offset(node)
        length = cx.fit_symbol(("length", cx.site), m, "length") if start else None
        if length is not None:   # a window whose start and length vary (``pe[:, c - T +
            # 1:c + T]``): from a start read at run time, padded as the input its length
            # follows (past the dim, it reads the last element: padding)
            out[d] = length
            return Pad(tuple(out), args=(x, d, start), fn=_slice_fn, tag="moving window")
        if start is not None:   # a start that varies: read at run time
            m = node.shape[d]
            out[d] = (m,)
            return Pad(tuple(out), args=(x, d, start, m, step), fn=_offset_slice_fn,
                       tag="offset slice")
        name = cx.slice_marks.get(cx.site)
        if name is not None and step == 1 and m > 1:
            # a length that varies (read from a value): a symbol padded up to its bucket,
            # at most the rest of the dim (the padding reads x's own elements past it);
            # where an input of that length was padded further (T to T + 8's bucket:
            # ConvBERT's span convolution), as that input (the padding past the dim
            # repeats its last element)
            padded = min(bucket(m, name), dsize(src, {}) - lo)
            if cx.sizes.get(name) == m:
                padded = max(padded, cx.buckets[name])
            same = (cx.sizes.get(name), cx.buckets.get(name)) == (m, padded)
            nd = (name if same else cx.derive(name, m, padded),)
            out[d] = nd
            if lo == 0 and padded <= dsize(src, {}):
                return Pad(tuple(out), args=(x, d, 0, SymSize(nd), 1))
            return Pad(tuple(out), args=(x, d, lo), fn=_slice_fn, tag="slice")
        if lo == 0 and step == 1:
            nd = cx.symbolize(m, "end")
            if is_sym(nd):
                if dsize(nd, cx.buckets) > dsize(src, {}):
                    raise NoPadRule(node.op, "bucket larger than the sliced dim", _syms((nd,)))
                out[d] = nd
                return Pad(tuple(out), args=(x, d, 0, SymSize(nd), 1))
        out[d] = (node.shape[d],)   # (of any step)
        return Pad(tuple(out))
    if m <= 0 or (step != 1 and 2 * lo > cx.sizes[sym]):
        # (retried: the dim may be a guess, ``arange(8)`` read as an 8-pixel H)
        raise NoPadRule(node.op, f"slice of step {step} or empty inside a dynamic dim",
                        {sym})
    if step != 1:
        return _strided_slice(node, lay, d, sym, lo, hi, step, cx)
    piece = _piece(cx, sym, lo, hi)
    if piece is not None:   # one piece of a cat of dynamic pieces (that cat's backward)
        out[d], start = piece
        if len(out[d]) > 1 and _inside_padded(out[d]):
            return Pad(tuple(out), args=(x, d, start, out[d]), fn=_slice_fn, tag="slice")
        if start == 0:
            return Pad(tuple(out), args=(x, d, 0, SymSize(out[d]), 1))
        return Pad(tuple(out), args=(x, d, start), fn=_slice_fn, tag="slice")
    if lo == 0 and cx.grown and cx.grown & cx.origins((sym,)):
        # a crop of what a varying pad grew (or of what was computed from it) back to a
        # symbol's size (``y[..., :H, :W]``), not by the amount it grew this time
        nd = cx.symbolize(m, "end")
        if is_sym(nd) and nd != src and dsize(nd, cx.buckets) <= dsize(src, cx.buckets):
            out[d] = nd
            return Pad(tuple(out), args=(x, d, 0, SymSize(nd), 1))
    n = cx.sizes[sym]
    if lo == 0 and 1 < m and 3 * m < 2 * n <= 4 * m:
        # between half and two thirds of the dim kept: a prefix of another symbol's
        # length (the Conformer's relative scores of 2T-1 positions cut to T, ``[...,
        # :P // 2 + 1]``; a guess) rather than a fixed distance from the end, which would
        # make it a dim of 2 to 3 times that distance
        nd = cx.symbolize(m, "prefix")
        if is_sym(nd) and not _shrunk_alike(cx, nd[0], sym) and \
                dsize(nd, cx.buckets) <= dsize(src, cx.buckets):
            out[d] = nd
            return Pad(tuple(out), args=(x, d, 0, SymSize(nd), 1))
    start = _pos_spec(lo, n, sym, cx, "start")
    if type(start) is int and _pos_spec(hi, n, sym, cx, "end") != hi:
        # from a fixed start to the end - k; of a symbol grown by k, its base again,
        # padded as it is (a reflection pad's gradient, the middle taken back)
        out[d] = (_ungrown(cx, sym, lo + n - hi) or cx.shrink(sym, lo + n - hi),)
    else:
        out[d] = (m,)
    if out[d] == src:
        return Pad(lay, args=(x, d, 0, SymSize(src), 1))
    return Pad(tuple(out), args=(x, d, start), fn=_slice_fn, tag="slice")


def _strided_slice(node, lay, d, sym, lo, hi, step, cx):
    """``x[lo:hi:step]`` along padded dim ``sym``, ``lo`` from the front (Funnel's pooling
    of tokens, ``x[:, ::2]``; YOLO's space-to-depth, ``x[..., 1::2, ::2]``): its true
    elements are the first ones of the padded input's slice, so it is that slice, a dim of
    the symbol ``ceil((sym - lo - e) / step)`` where ``hi`` is e from the end (a guess, as
    a step-1 slice's end), of ``hi``'s length where ``hi`` is read from the front."""
    out = list(lay)
    end = _pos_spec(hi, cx.sizes[sym], sym, cx, "end")
    if type(end) is int and hi == cx.sizes[sym]:
        # (a slice to the end read from the front: its guess withdrawn, the dim's is
        # next, ``arange(8)`` read as an 8-pixel H)
        raise NoPadRule(node.op, f"slice of step {step} to the end of a dynamic dim "
                        "read from the front", {sym})
    if type(end) is int:   # (the input's true elements up to hi are where they are)
        out[d] = (len(range(lo, hi, step)),)
        return Pad(tuple(out))
    out[d] = (_stepped(cx, sym, lo + end[1], step),)
    return Pad(tuple(out), args=(node.args[0], d, lo, step), fn=_strided_slice_fn,
               tag="strided slice")


def _stepped(cx, sym: str, cut: int, step: int) -> str:
    """The symbol ``ceil((sym - cut) / step)``: how many of ``sym``'s elements from the
    ``cut``-th on a slice of ``step`` takes (``Cx.stepped``)."""
    return cx.stepped(sym, step - 1 - cut, step)


def _strided_slice_fn(ctx, env, in_lays, x, d, start, step):
    """``x[start::step]`` along ``d`` to the output's padded length (past ``x``, its last
    element: padding)."""
    at = jnp.minimum(start + step * jnp.arange(ctx.shape[d]), x.shape[d] - 1)
    return jnp.take(x, at, axis=d)


def _shrunk_alike(cx, a: str, b: str) -> bool:
    """Are symbols ``a`` and ``b`` one symbol shrunk by constants (``T-1`` and ``T``)?"""
    return cx.shrunk.get(a, (a, 0))[0] == cx.shrunk.get(b, (b, 0))[0]


@pad_rule(aten.select.int)
def pad_select(node, ins, cx):
    (lay,) = ins
    x, dim, index = node.args
    d = norm_dim(dim, len(lay))
    sym = _lone_sym(node.op, lay[d])
    out = lay[:d] + lay[d + 1:]
    if sym is None:
        start = cx.offset(node)
        return Pad(out) if start is None else Pad(
            out, args=(x, d, start), fn=_offset_select_fn, tag="offset select")
    n = cx.sizes[sym]
    spec = _pos_spec(index % n, n, sym)
    return Pad(out, args=(x, d, spec), fn=_select_fn, tag="select")


def _scatter_dims(op, base, src, d, cx):
    if not same_layout(cx, base[:d] + base[d + 1:], src[:d] + src[d + 1:]):
        raise NoPadRule(op, "scatter of different layouts",
                        unlike(base[:d] + base[d + 1:], src[:d] + src[d + 1:]))


@pad_rule(aten.slice_scatter.default)
def pad_slice_scatter(node, ins, cx):
    x, y = node.args[:2]
    base, src = ins[_i(x)], ins[_i(y)]
    d = norm_dim((node.args + (0,))[2] or 0, len(base))
    _scatter_dims(node.op, base, src, d, cx)
    sym = _lone_sym(node.op, base[d])
    if sym is None and not is_sym(src[d]):
        start = cx.offset(node)
        return Pad(base) if start is None else Pad(
            base, args=(x, y, d, start, cut_at(node)[3]), fn=_offset_place_fn,
            tag="offset place")
    lo, hi, step = slice_bounds(node.args[3:], dsize(base[d], cx.sizes))
    if step != 1:
        if sym is None or 2 * lo > cx.sizes[sym]:
            raise NoPadRule(node.op, "slice_scatter of step > 1 into a dynamic dim",
                            retry=False)
        src_sym = _lone_sym(node.op, src[d])   # (the gradient of ``_strided_slice``)
        size = (src_sym, 0) if src_sym is not None else dsize(src[d], cx.sizes)
        return Pad(base, args=(x, y, d, lo, size, step), fn=_strided_place_fn,
                   tag="strided place")
    piece = _piece(cx, sym, lo, hi) if sym is not None else None
    if piece is not None and piece[0] == src[d]:   # a piece of a cat of dynamic pieces
        merged = src[d] if len(src[d]) > 1 else None
        size = (_flat(cx, src[d]), 0) if is_sym(src[d]) else hi - lo
        return Pad(base, args=(x, y, d, piece[1], size, merged), fn=_place_fn, tag="place")
    src_sym = _lone_sym(node.op, src[d])
    if src_sym is not None:   # a dynamic slice starts where the forward slice started
        start, size = cx.offset(node) or lo, (src_sym, 0)
    else:
        start, size = _pos_spec(lo, cx.sizes[sym], sym), hi - lo
    return Pad(base, args=(x, y, d, start, size), fn=_place_fn, tag="place")


@pad_rule(aten.select_scatter.default)
def pad_select_scatter(node, ins, cx):
    x, y, dim, index = node.args
    base, src = ins[_i(x)], ins[_i(y)]
    d = norm_dim(dim, len(base))
    if not same_layout(cx, base[:d] + base[d + 1:], src):
        raise NoPadRule(node.op, "select_scatter layouts differ",
                        unlike(base[:d] + base[d + 1:], src))
    sym = _lone_sym(node.op, base[d])
    if sym is None:
        start = cx.offset(node)
        return Pad(base) if start is None else Pad(
            base, args=(x, y, d, start, None), fn=_offset_place_fn, tag="offset place")
    n = cx.sizes[sym]
    spec = _pos_spec(index % n, n, sym)
    return Pad(base, args=(x, y, d, spec, None), fn=_place_fn, tag="place")


def _cat_fn(ctx, env, in_lays, parts, d, sizes, merged=None):
    out = jnp.zeros(ctx.shape, jdt(ctx.dtype))
    st = 0
    for k, (part, size) in enumerate(zip(parts, sizes)):
        n = _at(env, size)
        out = _place(out, _compact(env, part, d, merged and merged[k]), d, st, n)
        st = st + n
    return out


@pad_rule(aten.constant_pad_nd.default)
def pad_constant_pad(node, ins, cx):
    """Padding of concrete dims as it is, a crop of one to T (that pad's gradient) as
    the bucket's prefix; a padded dim only at its end, back to a fixed length
    (``F.pad(mask, (0, L - T))``: automatic dynamic saw the result's size stay while the
    input's changed), its true elements first and ``value`` after them. Otherwise a
    padded dim grows (``F.pad(labels, (0, 1), value=-100)`` of a causal LM's loss: the
    symbol ``T+1``, padded as a cat that grows it) or shrinks (that pad's gradient: a
    crop) by constants, its true elements shifted by the left pad; one grown at its end
    by an amount that varies (automatic dynamic saw it change: ``F.pad(x, (0, (8 - W %
    8) % 8))`` before windows or strided convolutions) has a symbol of its own, whatever
    the amount, and its crop back (that pad's gradient) is the prefix of a symbol's
    size."""
    (lay,) = ins
    x, pad = node.args[:2]
    value = node.args[2] if len(node.args) > 2 else dict(node.kwargs).get("value", 0)
    out, static, fixed, crops, moves = list(lay), list(pad), [], [], []
    for j in range(len(pad) // 2):
        d = len(lay) - 1 - j
        if not is_sym(lay[d]):
            out[d] = (node.shape[d],)
            if pad[2 * j] == 0 and pad[2 * j + 1] < 0:   # a crop to T (that pad's gradient)
                nd = cx.symbolize(node.shape[d], ("crop", d))
                if is_sym(nd):
                    out[d] = nd
                    static[2 * j + 1] = 0
                    crops.append((d, nd, 0))
            continue
        lo, hi = pad[2 * j], pad[2 * j + 1]
        static[2 * j] = static[2 * j + 1] = 0
        if cx.site in cx.shifted_pads and len(lay[d]) == 1 and lo * hi >= 0:
            shifted = _shifted_dim(cx, lay[d][0], lo, hi, node.shape[d], d)
            if shifted is not None:
                out[d], move = shifted
                (crops if lo + hi < 0 else moves).append(move)
                continue
        # (grown first: a pad up to a multiple may also have looked like a fixed one)
        if lo == 0 and cx.site in cx.grown_pads and len(lay[d]) == 1:
            sym = lay[d][0]
            # (no amount this time: a crop where the site crops, else a pad by nothing)
            crop = hi < 0 or hi == 0 and cx.grown_pads[cx.site] < 0
            grown = _grown_dim(cx, sym, crop, node.shape[d], d)
            if grown is not None:
                out[d] = grown
                (crops.append((d, grown, 0)) if crop else moves.append((d, sym, 0)))
                continue
        if lo == 0 and cx.site in cx.fixed_pads:
            _end_padded(node.op, lay[d])
            out[d] = (node.shape[d],)
            fixed.append((d, lay[d], node.shape[d]))
            continue
        sym = _lone_sym(node.op, lay[d])
        if (lo < 0 < hi) or (hi < 0 < lo) or (lo == hi == 0):
            if lo == hi == 0:
                continue
            raise NoPadRule(node.op, "padding a dynamic dim at one end and cropping it at "
                            "the other", _syms(lay), retry=False)
        # (a crop back where the pad's site learnt its varying amounts and this one not
        # yet, a graph of another family: the symbol that pad grew)
        base = _pad_base(cx, sym, node.shape[d]) if lo + hi < 0 else None
        out[d] = (base or _moved_sym(node.op, cx, sym, lo + hi, lo > 0 and hi > 0),)
        moves.append((d, sym, lo))
    if not fixed and not crops and not moves:
        return Pad(tuple(out))
    return Pad(tuple(out), args=(x, tuple(static), value, tuple(fixed), tuple(crops),
                                 tuple(moves)),
               fn=_fixed_pad_fn, tag="pad to a fixed length")


def _grown_dim(cx, sym, crop, size, d):
    """The dim of a dynamic dim ``sym`` padded at its end (or cropped) to ``size`` at a
    pad whose amount varies: a symbol named for the pad's site, not for the amount (every
    amount keys one executable; the symbol's size enters it at run time, and no rule gives
    it: a replay at sizes never traced does not follow it), padded like ``sym``; a crop's
    is the symbol of ``size`` it keeps. None where a crop's size has no symbol."""
    if crop:
        dim = cx.symbolize(size, ("crop", d))
        return dim if is_sym(dim) else None
    need = bucket(size, sym)
    if need > cx.buckets[sym] and sym in cx.inputs:
        raise Rebucket(sym, need)
    grown = cx.derive(f"{sym}+pad{cx.site}", size, max(need, cx.buckets[sym]), sym)
    cx.grown.add(grown)
    return (grown,)


def _shifted_dim(cx, sym, lo, hi, size, d):
    """(The dim, its move or crop) of a dynamic dim ``sym`` padded at both ends (or
    cropped) to ``size`` at a pad whose low amount varies (TensorFlow's "same" padding
    before a stride-2 convolution: ``(0, 1)`` at an even size, ``(1, 1)`` at an odd one),
    the amount read at run time: a symbol of the pad's own (as ``_grown_dim``'s), padded
    by the most automatic dynamic saw it grow, or this trace's amount if more, so every
    parity keys alike; a crop's is the symbol of ``size`` it keeps: the one such a pad
    grew (the pad's gradient), else one ``symbolize`` finds; None where none has it."""
    if lo + hi < 0:
        base = _pad_base(cx, sym, size)
        dim = (base,) if base is not None else cx.symbolize(size, ("crop", d))
        return ((dim, (d, dim, cx.shift(d, -lo))) if is_sym(dim) else None)
    reach = max(cx.shifted_pads[cx.site], lo + hi)
    grown = cx.derive(f"{sym}+pad{cx.site}", size, cx.buckets[sym] + reach, sym)
    cx.grown.add(grown)
    return (grown,), (d, sym, cx.shift(d, lo))


def _pad_base(cx, sym, size):
    """The symbol that a pad by varying amounts grew into ``sym`` (``_grown_dim``,
    ``_shifted_dim``) where its size is ``size``: what a crop back to that size is (the
    pad's gradient); else None."""
    base = cx.bases.get(sym) if sym in cx.grown else None
    return base if base is not None and cx.sizes[base] == size else None


def _moved_sym(op, cx, sym, g, around=False):
    """The symbol of ``sym`` grown by ``g`` (cropped where negative), named and padded as
    a cat of one dynamic piece names and pads it (``around``: grown at both ends). A
    symbol grown by -g cropped by g is its base again, padded as it is (a pad's gradient:
    ``F.pad(h, 1)`` of a strided conv's h, whose padded size is no bucket, meets h's other
    gradients)."""
    was = _ungrown(cx, sym, -g)
    if was is not None:
        return was
    base, k = cx.shrunk.get(sym, (sym, 0))
    if g <= k:
        return cx.shrink(base, k - g) if k > g else base
    return cx.grow(base, g - k, _grown_padding(cx, base, g - k, around))


def _grown_padding(cx, base, g, around):
    """The padded size of ``base`` grown by ``g``: by exactly g where it grows at both
    ends (a reflection pad before a convolution: what the convolution's strides make of
    it then follows the base's padded size, so an image network's output is padded as its
    input is); else its size's bucket (a token appended to ids, fed back next step as an
    input of that length), the base padded to that bucket too where it is past its own
    (``Rebucket``: T = 16, T + 1 = 17, so the next step, T = 17, runs the same
    executable)."""
    if around:
        return cx.buckets[base] + g
    need = bucket(cx.sizes[base] + g, base)
    if need > cx.buckets[base] and base in cx.inputs:
        raise Rebucket(base, need)
    return max(need, cx.buckets[base])


def _grown_alike(cx, sym) -> tuple:
    """(base, g) where ``sym`` is ``base`` grown by g and padded by exactly g more (a
    constant pad of a padded dim: ``cx.grow``), else (sym, 0)."""
    base, g = cx.grown_from.get(sym, (sym, 0))
    return (base, g) if g and cx.buckets[sym] == cx.buckets[base] + g else (sym, 0)


def _ungrown(cx, sym, k):
    """The symbol ``sym`` was grown from by exactly ``k`` (``T`` for ``T+2`` and 2, for
    ``T+4-2`` and 2 too), or None: what a cut of k from it is, padded as that symbol is."""
    grown, k0 = cx.shrunk.get(sym, (sym, 0))
    base, g = cx.grown_from.get(grown, (None, 0))
    return base if base is not None and g == k0 + k else None


def _fixed_pad_fn(ctx, env, in_lays, x, static, value, fixed, crops, moves=()):
    x = lower_pad(x, static, value)
    for d, dim, length in fixed:
        n = env.count((dim,), (0,))
        x = jnp.where(_axis_iota(length, d, x.ndim) < n, _window(x, d, 0, length),
                      jnp.asarray(value, x.dtype))
    for d, dim, start in crops:   # from ``start`` (past the true size: padding)
        x = _window(x, d, _at(env, start), env.dsize(dim))
    for d, sym, lo in moves:   # true elements shifted by ``lo``, ``value`` around them
        lo = _at(env, lo)
        src = _axis_iota(ctx.shape[d], d, x.ndim) - lo
        x = jnp.where((src >= 0) & (src < env.n[sym]), _window(x, d, -lo, ctx.shape[d]),
                      jnp.asarray(value, x.dtype))
    return x


@pad_rule(aten.cat.default)
def pad_cat(node, ins, cx):
    parts = [(t, l) for t, l in zip(node.args[0], (ins[_i(t)] for t in node.args[0]))
             if len(l) == len(node.shape)]   # 1-d empty tensors are skipped by cat
    dim = node.args[1] if len(node.args) > 1 else dict(node.kwargs).get("dim", 0)
    d = norm_dim(dim, len(node.shape))
    first = parts[0][1]
    for _, lay in parts:
        if not same_layout(cx, lay[:d] + lay[d + 1:], first[:d] + first[d + 1:]):
            raise NoPadRule(node.op, "cat of different layouts",
                            unlike(lay[:d] + lay[d + 1:], first[:d] + first[d + 1:]))
    out = list(first)
    syms = [_flat(cx, lay[d]) for _, lay in parts]
    if not any(syms):
        out[d] = (node.shape[d],)
        return Pad(tuple(out))
    dyn = [s for s in syms if s is not None]
    # each piece's symbol, or its concrete size
    pieces = tuple(s if s is not None else lay[d][0] for s, (_, lay) in zip(syms, parts))
    sizes = tuple((p, 0) if type(p) is str else p for p in pieces)
    merged = tuple(lay[d] if len(lay[d]) > 1 else None for _, lay in parts)
    if len(dyn) > 1 or any(merged):
        # (prompt and answer): a symbol of its own, the sum of the pieces' true sizes,
        # padded to the sum of their padded sizes (one executable per bucket of each)
        padded = sum(cx.buckets[p] if type(p) is str else p for p in pieces)
        name = cx.derive(f"({'+'.join(map(str, pieces))})", node.shape[d], padded, dyn[0],
                         rule=lambda n, ps=pieces: sum(n[p] if type(p) is str else p
                                                       for p in ps))
        cx.sums[name] = pieces
        out[d] = (name,)
        return Pad(tuple(out), args=(tuple(t for t, _ in parts), d, sizes,
                                     merged if any(merged) else None), fn=_cat_fn, tag="cat")
    # (a merged piece, the flattened patch grid, takes the sum's way too: its padding
    # comes from the buckets of its factors, not the bucket of its size)
    # one dynamic piece of a symbol shrunk by k, k or fewer concrete elements around it
    rest = node.shape[d] - cx.sizes[dyn[0]]
    base, k = cx.shrunk.get(dyn[0], (dyn[0], 0))
    if rest > k:   # it grows: T + g (``_grown_padding``)
        at = pieces.index(dyn[0])
        out[d] = (cx.grow(base, rest - k,
                          _grown_padding(cx, base, rest - k, 0 < at < len(pieces) - 1)),)
    else:
        out[d] = (cx.shrink(base, k - rest) if k > rest else base,)
    return Pad(tuple(out), args=(tuple(t for t, _ in parts), d, sizes), fn=_cat_fn, tag="cat")


@pad_rule(aten.stack.default)
def pad_stack(node, ins, cx):
    if not all(same_layout(cx, l, ins[0]) for l in ins):
        raise NoPadRule(node.op, "stack of different layouts", _syms(*ins))
    dim = node.args[1] if len(node.args) > 1 else dict(node.kwargs).get("dim", 0)
    d = norm_dim(dim, len(node.shape))
    new = cx.symbolize(node.shape[d], "stack")   # T pieces (unbind's backward): padded
    out = ins[0][:d] + (new,) + ins[0][d:]
    if not is_sym(new):
        return Pad(out)
    return Pad(out, args=(node.args[0], d), fn=_stack_fn, tag="stack")


def _stack_fn(ctx, env, in_lays, parts, d):
    x = jnp.stack([p.astype(jdt(ctx.dtype)) for p in parts], axis=d)
    return _to_length(x, d, ctx.shape[d])


def _flip_fn(ctx, env, in_lays, x, dims):
    """A merged dim padded inside (flattened pixels) is flipped with its true elements put
    first, in torch's order, and put back at their places after."""
    lay = in_lays[0]
    for d in dims:
        d = norm_dim(d, x.ndim)
        merged = lay[d] if is_sym(lay[d]) else None
        x = jnp.flip(_compact(env, x, d, merged), d)
        if is_sym(lay[d]):  # valid data now ends the dim: move it back to the front
            x = jnp.roll(x, env.count(lay, (d,)) - env.dsize(lay[d]), axis=d)
        x = _compact(env, x, d, merged, back=True)
    return x


@pad_rule(aten.flip.default)
def pad_flip(node, ins, cx):
    (lay,) = ins
    dims = [norm_dim(d, len(lay)) for d in node.args[1]]
    if not any(is_sym(lay[d]) for d in dims):
        return Pad(lay)
    return Pad(lay, fn=_flip_fn, tag="flip")


# ---- contractions -------------------------------------------------------------------


def _contract(op, a, b, ka, kb, pos_a, pos_b, cx):
    """Both operands zeroed along a padded contracted dim, which must be one padded length
    in both (two symbols alike: a slice's learnt length and the T-1 derived beside it)."""
    if a[ka] != b[kb] and not _alike(cx, a[ka], b[kb]):
        raise NoPadRule(op, f"contraction of {a[ka]} with {b[kb]}", _syms((a[ka], b[kb])))
    if is_sym(a[ka]):
        return ((pos_a, (ka,), 0), (pos_b, (kb,), 0))
    return ()


@pad_rule(aten.mm.default)
def pad_mm(node, ins, cx):
    a, b = ins
    pre = _contract(node.op, a, b, 1, 0, _i(node.args[0]), _i(node.args[1]), cx)
    return Pad((a[0], b[1]), pre=pre)


@pad_rule(aten._grouped_mm.default)
def pad_grouped_mm(node, ins, cx):
    """A mixture of experts' product per expert, its rows sorted by expert with the
    padding after them (``pad_sort``): the ragged dim padded at its end lies past the last
    offset, in no group (the offsets count true rows); its rows come out zero, and where
    it is contracted (the weight's gradient) it is zeroed in both operands first."""
    a, b = _operands(node, ins, 2)
    if len(a) == 2 and len(b) == 3 and not has_sym(a[1:] + b):   # rows of a among groups
        _end_padded(node.op, a[0])
        return Pad((a[0], b[2]))
    if len(a) == 3 and len(b) == 2 and not has_sym(a + b[:1]):   # columns of b
        _end_padded(node.op, b[1])
        return Pad((a[1], b[1]))
    if len(a) == 2 and len(b) == 2 and not has_sym(a[:1] + b[1:]):   # the contracted dim
        _end_padded(node.op, a[1])
        pre = _contract(node.op, a, b, 1, 0, _i(node.args[0]), _i(node.args[1]), cx)
        return Pad(((node.shape[0],), a[0], b[1]), pre=pre)
    raise NoPadRule(node.op, f"a grouped product of {a} and {b}", _syms(a, b))


def _operands(node, ins, k: int) -> tuple:
    """The layouts of ``node``'s first ``k`` arguments (one input may be two of them)."""
    return tuple(ins[_i(node.args[j])] for j in range(k))


@pad_rule(aten.dot.default, aten.vdot.default)
def pad_dot(node, ins, cx):
    a, b = _operands(node, ins, 2)
    return Pad((), pre=_contract(node.op, a, b, 0, 0, _i(node.args[0]), _i(node.args[1]), cx))


@pad_rule(aten.mv.default)
def pad_mv(node, ins, cx):
    a, v = _operands(node, ins, 2)
    return Pad((a[0],), pre=_contract(node.op, a, v, 1, 0, _i(node.args[0]),
                                      _i(node.args[1]), cx))


@pad_rule(aten.addmv.default)
def pad_addmv(node, ins, cx):
    x, a, v = _operands(node, ins, 3)
    pre = _contract(node.op, a, v, 1, 0, _i(node.args[1]), _i(node.args[2]), cx)
    broadcast_layouts(node.op, [(a[0],), x], 1, cx)
    return Pad((a[0],), pre=pre)


@pad_rule(aten.bmm.default)
def pad_bmm(node, ins, cx):
    a, b = ins
    if not same_layout(cx, a[:1], b[:1]):
        raise NoPadRule(node.op, "bmm batch layouts differ", _syms(a, b))
    pre = _contract(node.op, a, b, 2, 1, _i(node.args[0]), _i(node.args[1]), cx)
    return Pad((a[0], a[1], b[2]), pre=pre)


@pad_rule(aten.addmm.default, aten.baddbmm.default)
def pad_addmm(node, ins, cx):
    x, a, b = _operands(node, ins, 3)
    nd = len(a)
    if nd == 3 and not same_layout(cx, a[:1], b[:1]):
        raise NoPadRule(node.op, "baddbmm batch layouts differ", _syms(a, b))
    pre = _contract(node.op, a, b, nd - 1, nd - 2, _i(node.args[1]), _i(node.args[2]), cx)
    out = a[:-1] + (b[-1],)
    broadcast_layouts(node.op, [out, x], nd, cx)
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


@pad_rule(histogram_linear)
def pad_histogram(node, ins, cx):
    """``histc`` and ``histogram`` over a given range (a mixture of experts' tokens per
    expert): the padding holds a value past the range (counted nowhere), a weight's 0."""
    x, bins, (lo, hi), data_range, weight = node.args[:5]
    if data_range:
        raise NoPadRule(node.op, "a histogram over the data's own range", _syms(*ins))
    dt = node.inputs[0].dtype
    top = torch.finfo(dt).max if dt.is_floating_point else torch.iinfo(dt).max
    low = -top if dt.is_floating_point else torch.iinfo(dt).min
    fill = "max" if hi < top else "min" if lo > low else None
    if fill is None:
        raise NoPadRule(node.op, "a range as wide as the type's", _syms(*ins))
    pre = ((0, _sym_axes(ins[0], range(len(ins[0]))), fill),)
    if weight is not None:
        pre += ((1, _sym_axes(ins[1], range(len(ins[1]))), 0),)
    return Pad((((bins,),), ((bins + 1,),)), pre=pre)


@pad_rule(aten.logsumexp.default)
def pad_logsumexp(node, ins, cx):
    """Padding holds -inf (for complex values -inf + 0j: ``fill_value`` knows no complex
    "min"), whose exp adds nothing."""
    fill = complex(-jnp.inf, 0) if node.dtype.is_complex else "min"
    p = _reduction(fill)(node, ins, cx)
    if p.pre and node.inputs[0].dtype == torch.bool:   # (False, bool's "min", adds e^0)
        p.fn = functools.partial(_logsumexp_of_bools_fn, p.pre[0][1])
        p.tag, p.pre = "logsumexp of bools", ()
    return p


def _logsumexp_of_bools_fn(axes, ctx, env, in_lays, x, dim, keepdim=False):
    """Bools as the result's floats first, the padding -inf among them."""
    x = sanitize(env, x.astype(jdt(opmath(ctx.dtype))), in_lays[0], axes, "min")
    return lower_logsumexp(ctx, x, dim, keepdim)


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
    if not lay:   # (a 0-d input: dim 0 or -1 names the one element)
        return Pad(((), ())) if isinstance(node.dtype, tuple) else Pad(())
    d = norm_dim(dim, len(lay))
    fill = "min" if node.op in (aten.max.dim, aten.argmax.default) else "max"
    out = _reduce_layout(lay, (d,), _keep(node))
    pre = ((0, (d,), fill),) if is_sym(lay[d]) else ()
    outs = (out, out) if isinstance(node.dtype, tuple) else out
    if is_sym(lay[d]) and _inside_padded(lay[d]):
        # (a heatmap's peak over its flattened pixels, ``h.flatten(2).argmax(-1)``: the
        # index found in the true flattened order, torch's)
        return Pad(outs, fn=functools.partial(_arg_reduce_inside_fn, node.op, d, lay[d],
                                              fill), tag="arg reduce along a merged dim")
    return Pad(outs, pre=pre)


def _true_first(env, x, d, merged, n, fill):
    """``x`` with merged dim ``d``'s ``n`` true elements first, in torch's order, and
    ``fill`` (``fill_value``'s) after them."""
    x = _compact(env, x, d, merged)
    keep = _axis_iota(x.shape[d], d, x.ndim) < n
    return jnp.where(keep, x, fill_value(fill, x.dtype))


def _arg_reduce_inside_fn(op, d, merged, fill, ctx, env, in_lays, x, *args, **kwargs):
    x = _true_first(env, x, d, merged, env.count(in_lays[0], (d,)), fill)
    return _lowered(op, ctx, x, *args, **kwargs)


def _sort_dim(node):
    """The dim a sort or topk runs along (-1 by default)."""
    kw = dict(node.kwargs)
    pos = 2 if node.op is aten.topk.default else 1
    if node.op is not aten.sort.stable and len(node.args) > pos:
        return node.args[pos]
    return kw.get("dim", -1)


@pad_rule(aten.sort.default, aten.sort.stable, aten.topk.default)
def pad_sort(node, ins, cx):
    """Along a concrete dim the other dims' padding passes through. Along a dim padded at
    its end the padding sorts after every true element (NaN too), so the true positions
    hold torch's answer and its indices point at true positions; topk's k is checked
    against the true size in the graph (a replay at a size never traced)."""
    lay = ins[0]
    if not lay:
        return Pad(((), ()))
    d = norm_dim(_sort_dim(node), len(lay))
    out = lay[:d] + ((node.shape[0][d],),) + lay[d + 1:] if not is_sym(lay[d]) or \
        node.op is aten.topk.default else lay
    if not is_sym(lay[d]):
        return Pad((out, out))
    if node.op is not aten.topk.default and _inside_padded(lay[d]):
        # a merged dim padded inside (a mixture of experts' (B, T, k) expert ids sorted
        # by expert): its true elements first, a symbol of their own (``_flat``), so the
        # indices are torch's, positions in the true flattened order
        flat = lay[:d] + ((_flat(cx, lay[d]),),) + lay[d + 1:]
        return Pad((flat, flat), fn=functools.partial(_sort_padded_fn, d, lay[d]),
                   tag="sort along a merged padded dim")
    inside = lay[d] if _inside_padded(lay[d]) else None   # (topk's: true elements first)
    fn = functools.partial(_topk_padded_fn, d, inside) if node.op is aten.topk.default else \
        functools.partial(_sort_padded_fn, d, None)
    return Pad((out, out), fn=fn, tag="sort along a padded dim")


def _sort_padded_fn(d, merged, ctx, env, in_lays, x, *args, stable=None, dim=-1,
                    descending=False):
    descending = args[1] if len(args) > 1 else descending
    return sorted_along(_compact(env, x, d, merged), d, descending,
                        env.count(in_lays[0], (d,)))


def _topk_padded_fn(d, merged, ctx, env, in_lays, x, k, dim=-1, largest=True, sorted=True):
    n = env.count(in_lays[0], (d,))
    check(k > n, "selected index k out of range (a dynamic dim: checked against its true "
                 "size)")
    return top_k(_compact(env, x, d, merged), k, d, largest, n)


# op -> (the position of its dim argument, the dim's default)
_PICKS = {aten.kthvalue.default: (2, -1), aten.median.dim: (1, None),
          aten.nanmedian.dim: (1, None), aten.mode.default: (1, -1)}


@pad_rule(*_PICKS)
def pad_pick(node, ins, cx):
    """kthvalue, median, nanmedian and mode along a dim: the others' padding passes
    through; along a dim padded at its end the sort puts the padding after the true
    elements and the answer's position counts only those (kthvalue's k checked against the
    true size in the graph)."""
    lay = ins[0]
    if not lay:
        return Pad(((), ()))
    pos, default = _PICKS[node.op]
    dim = _dims_of(node, pos)
    d = norm_dim(default if dim is None else dim, len(lay))
    out = _reduce_layout(lay, (d,), _keep(node, pos + 1))
    if not is_sym(lay[d]):
        return Pad((out, out))
    inside = lay[d] if _inside_padded(lay[d]) else None   # (true elements first)
    return Pad((out, out), fn=functools.partial(_pick_padded_fn, node.op, d, inside),
               tag="pick along a padded dim")


def _pick_padded_fn(op, d, merged, ctx, env, in_lays, x, *args, **kwargs):
    n = env.count(in_lays[0], (d,))
    x = _compact(env, x, d, merged)
    if op is aten.kthvalue.default:
        k = args[0]
        check(k > n, f"kthvalue(): selected number k out of range for dimension {d} (a "
                     "dynamic dim: checked against its true size)")
        position, rest = kth_position(k), args[2:]
    elif op is aten.mode.default:
        position, rest = mode_position, args[1:]
    else:
        position, rest = median_position(op is aten.nanmedian.dim), args[1:]
    keepdim = rest[0] if rest else kwargs.get("keepdim", False)
    return pick_sorted(x, d, keepdim, position, n)


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


def _var_fn(kind):
    """var, std or var_mean ("var", "std", "var_mean") over padded dims: the mean and
    the sum of squares from the true elements and counts."""
    def fn(ctx, env, in_lays, x, dim=None, *, correction=None, keepdim=False):
        axes = norm_dims(dim, x.ndim) if dim is not None else tuple(range(x.ndim))
        lay = in_lays[0]
        dtype = ctx.dtype[0] if kind == "var_mean" else ctx.dtype
        xf = var_input(x, dtype, ctx.aux)   # (as the lowerings: reduction.py)
        n = env.count(lay, axes)
        mean = jnp.sum(xf, axis=axes, keepdims=True) / n
        dev = xf - mean
        m = env.mask(lay, axes)
        dev = jnp.where(m, dev, 0) if m is not None else dev
        c = 1 if correction is None else correction
        v = jnp.sum(squared_magnitude(dev), axis=axes, keepdims=keepdim) / jnp.maximum(n - c, 0)
        if kind == "var_mean":
            mean = mean if keepdim else jnp.squeeze(mean, axes)
            return v.astype(jdt(dtype)), mean.astype(jdt(ctx.dtype[1]))
        return (jnp.sqrt(v) if kind == "std" else v).astype(jdt(dtype))
    return fn


@pad_rule(aten.var.correction, aten.std.correction, aten.var_mean.correction)
def pad_var(node, ins, cx):
    lay = ins[0]
    dims = _dims_of(node)
    if isinstance(dims, int):
        dims = (dims,)
    axes = norm_dims(dims, len(lay))
    kw = dict(node.kwargs)
    out = _reduce_layout(lay, axes, bool(kw.get("keepdim", False)))
    sa = _sym_axes(lay, axes)
    kind = {aten.std.correction: "std", aten.var_mean.correction: "var_mean"}.get(node.op, "var")
    outs = (out, out) if kind == "var_mean" else out
    if not sa:
        return Pad(outs)
    return Pad(outs, pre=((0, sa, 0),), fn=_var_fn(kind), tag=kind)


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
    for t, want in ((g, lay), (mean, lay[:nb]), (rstd, lay[:nb])):
        got = ins[_i(t)][:len(want)]
        if not same_layout(cx, got, want):   # (a guess: the gradient's zeros laid out
            # as another dim of that size, a class token's select scattered back)
            raise NoPadRule(node.op, f"layouts {got} and {want} differ", _syms(got, want))
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


def _batch_axes(lay):
    """Axes a per-channel statistic reduces over: the batch and the spatial dims."""
    return (0,) + tuple(range(2, len(lay)))


def _masked_batch_norm(x, w, b, m, n, eps):
    """Training batch norm whose statistics count only the ``m`` elements (``n`` of them
    per channel): out, mean, biased variance, invstd."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    xf = jnp.where(m, _f32(x), 0)
    mean = jnp.sum(xf, axis=axes) / n
    dev = jnp.where(m, xf - mean.reshape(shape), 0)
    var = jnp.sum(dev * dev, axis=axes) / n
    out, _, invstd, _ = _batch_norm(xf, w, b, mean, var, False, eps)  # normalize by them
    return out, mean, var, invstd


def _batch_norm_fn(ctx, env, in_lays, x, w, b, rm, rv, training, momentum, eps):
    lay = in_lays[0]
    axes = _batch_axes(lay)
    n = env.count(lay, axes)
    out, mean, var, invstd = _masked_batch_norm(x, w, b, env.mask(lay, axes), n, eps)
    new_rm, new_rv = rm, rv
    if rm is not None:   # running statistics move by the true ones (unbiased variance)
        new_rm = (1 - momentum) * rm + momentum * mean.astype(rm.dtype)
        new_rv = (1 - momentum) * rv + momentum * (var * n / jnp.maximum(n - 1, 1)).astype(
            rv.dtype)
    return out, mean, invstd, new_rm, new_rv


def _batch_norm_backward_fn(ctx, env, in_lays, g, x, w, rm, rv, save_mean, save_invstd,
                            train, eps, output_mask):
    lay = in_lays[1]
    axes = _batch_axes(lay)
    m, n = env.mask(lay, axes), env.count(lay, axes)
    c = x.shape[1]
    w_ = _f32(w) if w is not None else jnp.ones((c,), jnp.float32)
    grads = vjp(lambda x_, w__, b__: _masked_batch_norm(x_, w__, b__, m, n, eps)[0],
                (_f32(x), w_, jnp.zeros((c,), jnp.float32)), _f32(g))
    return tuple(v if k else None for v, k in zip(grads, output_mask))


def _channel_layout(op, lay, ins, cx, per_channel, shape):
    """The layout of a per-channel value of shape ``shape``: concrete, or where the
    channel dim is padded (instance norm's batch norm over the (batch, channel) pairs of
    a padded batch: channels never mix), that dim's, which the ``per_channel`` arguments
    (weight, bias, running statistics: repeated per sample) must have too."""
    if len(lay) < 2 or not is_sym(lay[1]):
        return concrete(shape)
    for t in per_channel:
        if t is not None and not same_layout(cx, ins[_i(t)], (lay[1],)):
            raise NoPadRule(op, "a dynamic channel dim", _syms((lay[1],), ins[_i(t)]))
    return (lay[1],)


@pad_rule(aten._native_batch_norm_legit_functional.default)
def pad_batch_norm(node, ins, cx):
    x, w, b, rm, rv, training = node.args[:6]
    lay = ins[_i(x)]
    stat = _channel_layout(node.op, lay, ins, cx, (w, b, rm, rv), node.shape[1])
    outs = (lay, stat, stat) + tuple(ins[_i(t)] if t is not None else None for t in (rm, rv))
    if not training or not _sym_axes(lay, _batch_axes(lay)):
        return Pad(outs)   # evaluation normalizes each element by the running statistics
    if _i(x) != 0:
        raise NoPadRule(node.op, "batch norm input order", retry=False)
    return Pad(outs, fn=_batch_norm_fn, tag="batch_norm")


@pad_rule(aten.native_batch_norm_backward.default)
def pad_batch_norm_backward(node, ins, cx):
    g, x, w, rm, rv, save_mean, save_invstd, train = node.args[:8]
    lay = ins[_i(x)]
    stat = _channel_layout(node.op, lay, ins, cx, (w, rm, rv, save_mean, save_invstd),
                           node.inputs[_i(x)].shape[1:2])
    if not same_layout(cx, ins[_i(g)], lay):
        raise NoPadRule(node.op, "layouts differ", _syms(lay, ins[_i(g)]))
    outs = tuple(o if d is not None else None for o, d in zip((lay, stat, stat), node.dtype))
    sa = _sym_axes(lay, _batch_axes(lay))
    if not sa:
        return Pad(outs)
    pre = ((_i(g), sa, 0), (_i(x), sa, 0))   # weight/bias gradients sum over them
    if not train:
        return Pad(outs, pre=pre)
    if (_i(g), _i(x)) != (0, 1):
        raise NoPadRule(node.op, "batch norm backward input order", retry=False)
    return Pad(outs, pre=pre, fn=_batch_norm_backward_fn, tag="batch_norm_backward")


# ---- convolution and pooling --------------------------------------------------------

# Batch dims pass through (samples do not mix). A padded spatial dim (single factor) is
# zeroed at its tail first -- those zeros are exactly the conv's own zero padding -- and
# the output dim is: the same symbol for a "same" conv, the symbol shrunk by k for a valid
# stride-1 conv (the input then gets k more zeros at the end, so the output keeps the
# symbol's padded size), a derived symbol (n + c) // s for a strided conv, n + c padded
# by exactly c for one that grows the dim (a pool that grows it compiles exactly). A
# transposed conv gives s * n + c (``_transposed_dim``).


_CONVOLUTIONS = (aten.convolution.default, aten.convolution_backward.default)


def _spatial_dim(op, cx, dim, k, s, p, dl):
    """(output dim, extra zeros at the input's end) for a window op over ``dim``."""
    sym = _lone_sym(op, dim)
    if sym is None:
        return None, 0
    c = 2 * p - dl * (k - 1)
    if s == 1:
        if c > 0 and op in _CONVOLUTIONS:
            # grows by c (a "same" convolution of an even kernel, T + 1: wav2vec2's
            # positional one, cut back by ``[..., :-1]``): its input's padding is zeroed
            # (``pre``), as torch's padding reads, so its true outputs are torch's; padded
            # by exactly c, as the convolution of the padded input is long
            return (cx.scaled(sym, 1, c),), 0
        if c > 0:
            raise NoPadRule(op, "a window op that grows a dynamic dim", retry=False)
        base = _ungrown(cx, sym, -c)
        if base is not None:
            # a dim grown by the window's reach (TF's "same" padding, F.pad then a valid
            # conv): the result is the dim before the pad again, padded as it was (the
            # input's tail cut or zero-extended to that length), so a residual meets it
            return (base,), cx.buckets[base] - cx.buckets[sym] - c
        return (cx.shrink(sym, -c),), -c
    c += s - 1
    # (windows over a dim a pad grew, padded as much: counted from the dim before the pad,
    # as the same count made otherwise is, Longformer's chunks of its values padded by w
    # on both sides beside those of its probabilities)
    sym, g = _grown_alike(cx, sym)
    c += g
    return (cx.derive(floor_name(sym, c, s), (cx.sizes[sym] + c) // s,
                      (cx.buckets[sym] + c) // s, sym, rule=lambda n: (n[sym] + c) // s),), 0


def _transposed_dim(cx, dim, k, s, p, dl, op):
    """The output dim of a transposed convolution along padded ``dim``: s * n + c (n its
    true size), padded s * N + c, as the same convolution of the padded input gives. Its
    input's padding is zeroed, so the true outputs receive what torch's do."""
    sym = _lone_sym(aten.convolution.default, dim)
    if sym is None:
        return None
    c = -s - 2 * p + dl * (k - 1) + op + 1
    if s == 1 and c <= 0:
        return (cx.shrink(sym, -c),)
    return (cx.scaled(sym, s, c),)


def _conv_layout(node, cx, xl, w, stride, padding, dilation, transposed, out_shape,
                 output_padding=0):
    """The output layout of a convolution and the extra input zeros per spatial axis."""
    if has_sym(w):
        raise NoPadRule(node.op, "a dynamic weight", _syms(w))
    nsp = len(w) - 2
    lead = len(xl) - nsp - 1
    if is_sym(xl[lead]):
        raise NoPadRule(node.op, "a dynamic channel dim", _syms((xl[lead],)))
    dims, extra = list(xl[:lead]) + [(out_shape[lead],)], []
    st, pd, dl = (_tup(v, nsp) for v in (stride, padding, dilation))
    op_pad = _tup(output_padding, nsp)
    for a in range(nsp):
        x_dim = xl[lead + 1 + a]
        if transposed:
            out, more = _transposed_dim(cx, x_dim, w[2 + a][0], st[a], pd[a], dl[a],
                                        op_pad[a]), 0
        else:
            out, more = _spatial_dim(node.op, cx, x_dim, w[2 + a][0], st[a], pd[a], dl[a])
        dims.append(out or (out_shape[lead + 1 + a],))
        extra.append(more)
    return tuple(dims), tuple(extra)


def _zero_tail(x, extra):
    """``x`` with ``extra`` zeros at the end of each spatial axis (cut where negative)."""
    nsp = len(extra)
    widths = [(0, 0, 0)] * (x.ndim - nsp) + [(0, e, 0) for e in extra]
    return lax.pad(x, jnp.zeros((), x.dtype), widths) if any(extra) else x


def _conv_fn(ctx, env, in_lays, x, w, b, stride, padding, dilation, transposed, output_padding,
             groups, extra):
    return lower_convolution(ctx, _zero_tail(x, extra), w, b, stride, padding, dilation,
                             transposed, output_padding, groups)


def _conv_backward_fn(ctx, env, in_lays, g, x, w, bias_sizes, stride, padding, dilation,
                      transposed, output_padding, groups, output_mask, extra):
    gx, gw, gb = lower_convolution_backward(g, _zero_tail(x, extra), w, bias_sizes, stride,
                                            padding, dilation, transposed, output_padding,
                                            groups, output_mask)
    if gx is not None:   # (back to x's length: an input tail cut has no gradient)
        gx = _zero_tail(gx, tuple(-e for e in extra))
    return gx, gw, gb


def _conv_pre(ins, pairs):
    """Zero the padded elements (batch and spatial) of each (input, layout) pair."""
    pre = []
    for t, lay in pairs:
        axes = _sym_axes(lay, range(len(lay)))
        if axes:
            pre.append((_i(t), axes, 0))
    return tuple(pre)


@pad_rule(aten.convolution.default)
def pad_convolution(node, ins, cx):
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = node.args
    xl = ins[_i(x)]
    if b is not None and has_sym(ins[_i(b)]):
        raise NoPadRule(node.op, "a dynamic bias", _syms(ins[_i(b)]))
    out, extra = _conv_layout(node, cx, xl, ins[_i(w)], stride, padding, dilation, transposed,
                              node.shape, output_padding)
    sp = tuple(range(len(xl) - len(extra), len(xl)))
    pre = ((_i(x), _sym_axes(xl, sp), 0),) if _sym_axes(xl, sp) else ()
    if not any(extra):
        return Pad(out, pre=pre)
    return Pad(out, args=node.args + (extra,), pre=pre, fn=_conv_fn, tag="conv")


@pad_rule(aten.convolution_backward.default)
def pad_convolution_backward(node, ins, cx):
    g, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding = \
        node.args[:9]
    xl, gl, wl = ins[_i(x)], ins[_i(g)], ins[_i(w)]
    out, extra = _conv_layout(node, cx, xl, wl, stride, padding, dilation, transposed,
                              node.inputs[_i(g)].shape, output_padding)
    if not same_layout(cx, out, gl):
        raise NoPadRule(node.op, f"gradient layout {gl}, not {out}", _syms(out, gl))
    outs = (xl if node.dtype[0] else None, wl if node.dtype[1] else None,
            concrete(node.shape[2]) if node.dtype[2] else None)
    pre = _conv_pre(ins, ((g, gl), (x, xl)))
    if not any(extra):
        return Pad(outs, pre=pre)
    return Pad(outs, args=node.args + (extra,), pre=pre, fn=_conv_backward_fn,
               tag="conv_backward")


# Max pooling along padded spatial dims: the tail is -inf first (the pool's own padding),
# so a true window, which ends before the true size plus the padding, picks what torch's
# picks; the output dim follows as a convolution's does (in ceil_mode, a symbol sized by
# torch's rule: ``_ceil_pool_dim``). Indices are flat positions in the plane of the
# true sizes, as torch's (they may be returned or read); the backward maps them back to
# the padded plane, and zeroes the gradient at padded windows, whose picks are anywhere.

_POOL_DIMS = {aten.max_pool2d_with_indices.default: 2, aten.max_pool3d_with_indices.default: 3,
              aten.max_pool2d_with_indices_backward.default: 2,
              aten.max_pool3d_with_indices_backward.default: 3}


def _pool_layout(node, cx, xl, n, kernel, stride, padding, dilation, ceil_mode, shape):
    """(the pooled layout, extra -inf at the input's end per spatial axis). A ceil_mode
    pool's strided dims are derived symbols sized by torch's rule at the true and padded
    sizes: a max pool's last window may run past the true size into the -inf padding, as
    torch's runs past the input; an average pool's into zeros, divided as torch divides
    (``_ceil_divisor``)."""
    lead = len(xl) - n
    if not has_sym(xl[lead:]):
        return xl[:lead] + concrete(shape[lead:]), (0,) * n
    k, pd, dl = (_tup(v, n) for v in (kernel, padding, dilation))
    st = pool_strides(stride, kernel, n)
    dims, extra = list(xl[:lead]), []
    for a in range(n):
        if ceil_mode and st[a] > 1 and is_sym(xl[lead + a]):
            out, more = (_ceil_pool_dim(node.op, cx, xl[lead + a], k[a], st[a], pd[a],
                                        dl[a]),), 0
        else:   # (stride 1: ceil_mode changes nothing)
            out, more = _spatial_dim(node.op, cx, xl[lead + a], k[a], st[a], pd[a], dl[a])
        dims.append(out or (shape[lead + a],))
        extra.append(more)
    return tuple(dims), tuple(extra)


def _ceil_pool_dim(op, cx, dim, k, s, p, dl) -> str:
    """The symbol of a ceil_mode pool's output along padded ``dim``."""
    sym = _lone_sym(op, dim)

    def size(m):
        span = m + 2 * p - dl * (k - 1) - 1
        o = -(-span // s) + 1
        return o - 1 if (o - 1) * s >= m + p else o
    return cx.derive(f"ceilpool({sym},{k},{s},{p},{dl})", size(cx.sizes[sym]),
                     size(cx.buckets[sym]), sym, rule=lambda n: size(n[sym]))


def _plane_index(idx, src, dst):
    """Flat positions in a plane of sizes ``src`` as positions in one of sizes ``dst``
    (each coordinate clipped into ``dst``: a padded window's pick may lie outside)."""
    out = 0
    for j in range(len(src)):
        inner = 1
        for v in src[j + 1:]:
            inner = inner * v
        c = idx // inner
        if j:
            c = c % src[j]
        out = out * dst[j] + jnp.clip(c, 0, dst[j] - 1)
    return out


def _true_plane(env, lay, n):
    return [dsize(d, env.n) if is_sym(d) else d[0] for d in lay[len(lay) - n:]]


def _max_pool_fn(ctx, env, in_lays, x, kernel, stride, padding, dilation, ceil_mode, n,
                 extra):
    if any(extra):
        widths = [(0, 0)] * (x.ndim - n) + [(0, e) for e in extra]
        x = jnp.pad(x, widths, constant_values=jnp.asarray(_lowest(x.dtype), x.dtype))
    vals, idx = _max_pool(x, n, kernel, stride, padding, dilation, ceil_mode)
    return vals, _plane_index(idx, x.shape[x.ndim - n:], _true_plane(env, in_lays[0], n))


def _argmax_backward(env, x_lay, g, x, indices, n):
    """Each window's gradient added at its pick, given in the true plane (a max pool's
    indices), in the padded one."""
    idx = _plane_index(indices, _true_plane(env, x_lay, n), x.shape[x.ndim - n:])
    return _add_at_argmax(g, x, idx, n)


def _max_pool_backward_fn(ctx, env, in_lays, g, x, kernel, stride, padding, dilation,
                          ceil_mode, indices, n):
    return _argmax_backward(env, in_lays[1], g, x, indices, n)


@pad_rule(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def pad_max_pool(node, ins, cx):
    (lay,) = ins
    n = _POOL_DIMS[node.op]
    args = (node.args + ((), 0, 1, False)[len(node.args) - 2:])[:6]
    out, extra = _pool_layout(node, cx, lay, n, *args[1:], node.shape[0])
    axes = _sym_axes(lay, range(len(lay) - n, len(lay)))
    if not axes:
        return Pad((out, out))
    return Pad((out, out), args=args + (n, extra), pre=((0, axes, "min"),), fn=_max_pool_fn,
               tag="max_pool")


@pad_rule(aten.max_pool2d_with_indices_backward.default,
          aten.max_pool3d_with_indices_backward.default)
def pad_max_pool_backward(node, ins, cx):
    """The gradient and indices must be padded as the forward's outputs; along padded
    spatial dims the gradient of padded windows is zeroed first."""
    g, x, indices = node.args[0], node.args[1], node.args[7]
    n = _POOL_DIMS[node.op]
    xl = ins[_i(x)]
    want, _ = _pool_layout(node, cx, xl, n, *node.args[2:7], node.inputs[_i(g)].shape)
    if not (same_layout(cx, ins[_i(g)], want) and same_layout(cx, ins[_i(indices)], want)):
        raise NoPadRule(node.op, "gradient or indices padded unlike the pooled output",
                        _syms(ins[_i(g)], ins[_i(indices)], xl))
    axes = _sym_axes(want, range(len(want) - n, len(want)))
    if not axes:
        return Pad(xl)
    return Pad(xl, args=node.args + (n,), pre=((_i(g), axes, 0),), fn=_max_pool_backward_fn,
               tag="max_pool_backward")


# Average pooling along padded spatial dims: the tail is zero first (the pool's own zero
# padding), and a true window counts what torch's counts: the whole window where padding
# counts (its floor-mode windows end before the true size plus the padding), else the true
# positions it covers, counted from the dims' masks. Padded windows' gradients are zeroed
# before the backward spreads them.

_AVG_POOL_DIMS = {aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3,
                  aten.avg_pool2d_backward.default: 2, aten.avg_pool3d_backward.default: 3}


def _avg_pool_padded(env, lay, x, kernel, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, n, extra):
    lead = x.ndim - n
    widths = [(0, 0)] * lead + [(0, e) for e in extra]
    if count_include_pad and ceil_mode and not divisor_override:
        total = _avg_pool(jnp.pad(x, widths) if any(extra) else x, n, kernel, stride,
                          padding, ceil_mode, True, 1)
        return total / _ceil_divisor(env, lay, total.shape[lead:], kernel, stride, padding)
    if divisor_override or count_include_pad:
        return _avg_pool(jnp.pad(x, widths) if any(extra) else x, n, kernel, stride, padding,
                         ceil_mode, count_include_pad, divisor_override)
    # the true positions each window covers: the sum of a mask pooled alike
    m = jnp.broadcast_to(env.mask(lay, range(lead, x.ndim)), (1,) * lead + x.shape[lead:])
    if any(extra):
        x, m = jnp.pad(x, widths), jnp.pad(m, widths)
    total = _avg_pool(x, n, kernel, stride, padding, ceil_mode, True, 1)
    cnt = _avg_pool(m.astype(total.dtype), n, kernel, stride, padding, ceil_mode, True, 1)
    return total / jnp.maximum(cnt, 1)


def _ceil_divisor(env, lay, out_shape, kernel, stride, padding):
    """A ceil_mode average pool's divisors where padding counts, as torch's: each window
    from its start to the true size plus the padding at most (its overhang past that is
    not counted), from the run-time true sizes. (At least 1: padded windows' divisors
    would be 0 or less, and their zeroed gradients 0 / 0.)"""
    n = len(out_shape)
    k, p = _tup(kernel, n), _tup(padding, n)
    s = pool_strides(stride, kernel, n)
    div = 1
    for a, size in enumerate(_true_plane(env, lay, n)):
        start = jnp.arange(out_shape[a]) * s[a] - p[a]
        d = jnp.maximum(jnp.minimum(start + k[a], size + p[a]) - start, 1)
        div = div * d.reshape((-1,) + (1,) * (n - 1 - a))
    return div


def _avg_pool_fn(ctx, env, in_lays, x, kernel, stride, padding, ceil_mode, count_include_pad,
                 divisor_override, n, extra):
    return _avg_pool_padded(env, in_lays[0], x, kernel, stride, padding, ceil_mode,
                            count_include_pad, divisor_override, n, extra)


def _avg_pool_backward_fn(ctx, env, in_lays, g, x, kernel, stride, padding, ceil_mode,
                          count_include_pad, divisor_override, n, extra):
    def fwd(x_):
        return _avg_pool_padded(env, in_lays[1], x_, kernel, stride, padding, ceil_mode,
                                count_include_pad, divisor_override, n, extra)
    return vjp(fwd, (_f32(x),), _f32(g))[0]


def _avg_pool_args(node, first):
    return (node.args + ((), 0, False, True, None)[len(node.args) - first - 2:])[:first + 7]


@pad_rule(aten.avg_pool2d.default, aten.avg_pool3d.default)
def pad_avg_pool(node, ins, cx):
    (lay,) = ins
    n = _AVG_POOL_DIMS[node.op]
    args = _avg_pool_args(node, 0)
    out, extra = _pool_layout(node, cx, lay, n, args[1], args[2], args[3], 1, args[4],
                              node.shape)
    axes = _sym_axes(lay, range(len(lay) - n, len(lay)))
    if not axes:
        return Pad(out)
    return Pad(out, args=args + (n, extra), pre=((0, axes, 0),), fn=_avg_pool_fn,
               tag="avg_pool")


@pad_rule(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def pad_avg_pool_backward(node, ins, cx):
    g, x = node.args[:2]
    n = _AVG_POOL_DIMS[node.op]
    args = _avg_pool_args(node, 1)
    xl = ins[_i(x)]
    want, extra = _pool_layout(node, cx, xl, n, args[2], args[3], args[4], 1, args[5],
                               node.inputs[_i(g)].shape)
    if not same_layout(cx, ins[_i(g)], want):
        raise NoPadRule(node.op, "gradient padded unlike the pooled output",
                        unlike(ins[_i(g)], want))
    axes = _sym_axes(xl, range(len(xl) - n, len(xl)))
    if not axes:
        return Pad(xl)
    out_axes = _sym_axes(want, range(len(want) - n, len(want)))
    return Pad(xl, args=args + (n, extra), pre=((_i(g), out_axes, 0), (_i(x), axes, 0)),
               fn=_avg_pool_backward_fn, tag="avg_pool_backward")


# Adaptive average pooling to any size along padded spatial dims (a VGG head's 7 x 7, a
# pyramid's 1, 2, 3 and 6 bins): each output's window is torch's integer one over the true
# size, start floor(i * n / out) to end ceil((i + 1) * n / out), made on the device from
# the run-time n; the sums over those windows (the tail zeroed first, never read) are
# divided by the windows' sizes. (Output size 1 reaches us as a mean.)

_ADAPTIVE_AVG = {aten._adaptive_avg_pool2d.default: 2, aten._adaptive_avg_pool3d.default: 3,
                 aten._adaptive_avg_pool2d_backward.default: 2,
                 aten._adaptive_avg_pool3d_backward.default: 3}


def _adaptive_windows(env, dim, n_pad, out):
    """(membership (n_out, n_pad) as 0/1, window sizes (n_out,)) along one dim, pooled to
    dim ``out`` (a symbol's: its padded rows' windows lie past the true ones)."""
    n = dsize(dim, env.n) if is_sym(dim) else dim[0]
    o = env.count((out,), (0,))
    i = jnp.arange(env.dsize(out))
    start = (i * n) // o
    end = ((i + 1) * n + o - 1) // o
    j = jnp.arange(n_pad)
    return (j[None, :] >= start[:, None]) & (j[None, :] < end[:, None]), \
        jnp.maximum(end - start, 1)


def _adaptive_parts(env, lay, spatial, out_lay):
    return [_adaptive_windows(env, d, p, o)
            for d, p, o in zip(lay[len(lay) - len(out_lay):], spatial, out_lay)]


def _adaptive_avg_fn(out_lay, ctx, env, in_lays, x, output_size):
    n = len(out_lay)
    xf = _f32(x)
    parts = _adaptive_parts(env, in_lays[0], x.shape[x.ndim - n:], out_lay)
    total = _apply(xf, [m.astype(xf.dtype) for m, _ in parts])
    return total / _window_counts(parts, xf.dtype)


def _window_counts(parts, dtype):
    """The windows' element counts, shaped to divide the pooled spatial dims."""
    count = None
    for k, (_, c) in enumerate(parts):
        c = c.reshape((-1,) + (1,) * (len(parts) - k - 1)).astype(dtype)
        count = c if count is None else count * c
    return count


def _adaptive_avg_backward_fn(ctx, env, in_lays, g, x, n):
    gf = _f32(g)
    parts = _adaptive_parts(env, in_lays[1], x.shape[x.ndim - n:], in_lays[0][g.ndim - n:])
    return _apply(gf / _window_counts(parts, gf.dtype), [m.astype(gf.dtype) for m, _ in parts],
                  transpose=True)


@pad_rule(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def pad_adaptive_avg_pool(node, ins, cx):
    (lay,) = ins
    n = _ADAPTIVE_AVG[node.op]
    pooled = _pooled_dims(cx, lay, node.args[1])
    out = lay[:len(lay) - n] + pooled
    axes = _sym_axes(lay, range(len(lay) - n, len(lay)))
    if not axes:
        return Pad(out)
    # (windows are positions: along a merged dim padded inside, the true elements first)
    return Pad(out, args=(node.args[0], pooled), pre=((0, axes, 0),),
               fn=_true_first_fn(functools.partial(_adaptive_avg_fn, pooled), lay, 0),
               tag="adaptive_avg")


def _pooled_dims(cx, lay, output_size) -> tuple:
    """The dims an adaptive pool of spatial dims laid out as ``lay``'s last ones pools
    to: ``output_size``, each fixed, or a symbol that a size following a padded dim's
    symbol was learnt as (``Cx.fit_symbol``: ``interpolate(x, size=(H // 2, W // 2),
    mode="area")``, a size computed in Python)."""
    lead = len(lay) - len(output_size)
    out = []
    for k, v in enumerate(output_size):
        d = lay[lead + k]
        nd = _learnt_size(cx, d, k, v) if is_sym(d) else None
        out.append(nd if nd is not None else (v,))
    return tuple(out)


def _learnt_size(cx, d, k, v):
    """The dim for size ``v`` of the ``k``-th spatial dim, of layout ``d``, that the op at
    the site resamples or pools to, where automatic dynamic learnt that size following a
    symbol (``Cx.fit_symbol``, the resampled dim's own symbol first); else None."""
    return cx.fit_symbol(("resize", cx.site, k), v, ("fit", k),
                         prefer=d[0] if is_sym(d) and len(d) == 1 else None)


def _true_first_fn(fn, lay, fill):
    """``fn`` (a rule's for dims padded at their end) of an input of layout ``lay`` whose
    merged dims padded inside (an adaptive pooling of flattened pixels) are given their
    true elements first, in torch's order, and ``fill`` after them."""
    inside = _inside_dims(lay)
    if not inside:
        return fn

    def first(ctx, env, in_lays, x, *args):
        for a, dim in inside:
            x = _true_first(env, x, a, dim, env.count(lay, (a,)), fill)
        return fn(ctx, env, in_lays, x, *args)
    return first


def _inside_dims(lay) -> list:
    """(axis, dim) of each merged dim of layout ``lay`` padded inside."""
    return [(a, dim) for a, dim in enumerate(lay) if is_sym(dim) and _inside_padded(dim)]


def _back_in_place_fn(fn, lay):
    """``fn`` (the backward of a ``_true_first_fn``'s) whose result, laid out ``lay``
    with the true elements first along merged dims padded inside, goes back to their
    places."""
    inside = _inside_dims(lay)
    if not inside:
        return fn

    def back(ctx, env, in_lays, *args):
        out = fn(ctx, env, in_lays, *args)
        for a, dim in inside:
            out = _compact(env, out, a, dim, back=True)
        return out
    return back


@pad_rule(aten._adaptive_avg_pool2d_backward.default,
          aten._adaptive_avg_pool3d_backward.default)
def pad_adaptive_avg_pool_backward(node, ins, cx):
    g, x = node.args
    return _adaptive_backward_pad(node, ins, cx, _ADAPTIVE_AVG[node.op], (g, x),
                                  _adaptive_avg_backward_fn, "adaptive_avg_backward")


def _adaptive_backward_pad(node, ins, cx, n, tensors, fn, tag):
    """An adaptive pool's backward: the gradient (and indices) of concrete pooled dims,
    padded elsewhere as the input is; along the input's padded spatial dims, ``fn``."""
    g, x = tensors[:2]
    gl, xl = ins[_i(g)], ins[_i(x)]
    pooled = _sym_axes(gl, range(len(gl) - n, len(gl)))
    if pooled and not _sym_axes(xl, range(len(xl) - n, len(xl))) \
            or not same_layout(cx, gl[:len(gl) - n], xl[:len(xl) - n]) \
            or not all(same_layout(cx, ins[_i(t)], gl) for t in tensors[2:]):
        raise NoPadRule(node.op, "gradient or indices padded unlike the pooled output",
                        unlike(gl[:len(gl) - n], xl[:len(xl) - n]) | _syms(gl[len(gl) - n:]))
    axes = _sym_axes(xl, range(len(xl) - n, len(xl)))
    if not axes:
        return Pad(xl)
    # (the gradient's padded pooled rows, a pooled size learnt as a symbol's, add 0)
    return Pad(xl, args=tensors + (n,), pre=((_i(g), pooled, 0),) if pooled else (),
               fn=_back_in_place_fn(fn, xl), tag=tag)


# Adaptive max pooling along padded spatial dims: the same windows, the pick made among
# their members only (the tail never one); indices into the true plane, as max pooling's.

_ADAPTIVE_MAX = {aten.adaptive_max_pool2d.default: 2, aten.adaptive_max_pool3d.default: 3,
                 aten.adaptive_max_pool2d_backward.default: 2,
                 aten.adaptive_max_pool3d_backward.default: 3}


def _adaptive_max_fn(out_lay, ctx, env, in_lays, x, output_size):
    n = len(out_lay)
    spatial = x.shape[x.ndim - n:]
    parts = _adaptive_parts(env, in_lays[0], spatial, out_lay)
    vals, idx = adaptive_max(x, tuple(env.dsize(d) for d in out_lay), [m for m, _ in parts])
    return vals, _plane_index(idx, spatial, _true_plane(env, in_lays[0], n))


def _adaptive_max_backward_fn(ctx, env, in_lays, g, x, indices, n):
    return _argmax_backward(env, in_lays[1], g, x, indices, n)


@pad_rule(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def pad_adaptive_max_pool(node, ins, cx):
    (lay,) = ins
    n = _ADAPTIVE_MAX[node.op]
    pooled = _pooled_dims(cx, lay, node.args[1])
    out = lay[:len(lay) - n] + pooled
    axes = _sym_axes(lay, range(len(lay) - n, len(lay)))
    if not axes:
        return Pad((out, out))
    return Pad((out, out), args=(node.args[0], pooled),
               fn=_true_first_fn(functools.partial(_adaptive_max_fn, pooled), lay, "min"),
               tag="adaptive_max")


@pad_rule(aten.adaptive_max_pool2d_backward.default,
          aten.adaptive_max_pool3d_backward.default)
def pad_adaptive_max_pool_backward(node, ins, cx):
    return _adaptive_backward_pad(node, ins, cx, _ADAPTIVE_MAX[node.op], tuple(node.args),
                                  _adaptive_max_backward_fn, "adaptive_max_backward")


# ---- upsampling -------------------------------------------------------------------------

# Nearest upsampling of a padded spatial dim by a whole factor s (U-Nets, feature pyramids):
# output i reads input i // s, so the first s * n outputs (the true ones) read the true
# inputs; the output's symbol is ``s*H`` (true s * n, padded s * N). A factor whose float32
# scale would not give i // s at both sizes (torch computes floor(i * (1 / s))), or an
# output no whole multiple of the input, compiles exactly. The backward sums each input's
# s outputs, the gradient's padded positions zeroed first.

_NEAREST_BACKWARD_OPS = {aten.upsample_nearest1d_backward.default: (1, False),
                         aten.upsample_nearest2d_backward.default: (2, False),
                         aten.upsample_nearest3d_backward.default: (3, False),
                         aten._upsample_nearest_exact1d_backward.default: (1, True),
                         aten._upsample_nearest_exact2d_backward.default: (2, True),
                         aten._upsample_nearest_exact3d_backward.default: (3, True)}


def _factor_of(op, cx, sym, n_out) -> int:
    """The whole factor f of upsampling ``sym`` to ``n_out`` true elements, or refuse."""
    n = cx.sizes[sym]
    f = n_out // n
    if f < 1 or f * n != n_out:
        raise NoPadRule(op, f"upsampling {sym} to {n_out}: no whole factor", retry=False)
    return f


def _upsampled_layout(op, cx, lay, size, factor):
    """An upsampling's output layout: its ``len(size)`` spatial dims each ``size[k]``, or
    for a padded ``H``, ``f*H`` (true f n, padded f N), f being what ``factor(H, k)``
    vouches for."""
    lead = len(lay) - len(size)
    dims = list(lay[:lead])
    for k, d in enumerate(lay[lead:]):
        if not is_sym(d):
            dims.append((size[k],))
            continue
        sym = _lone_sym(op, d)
        f = factor(sym, k)
        dims.append(d if f == 1 else (cx.scaled(sym, f, 0),))
    return tuple(dims)


def _whole_factor(op, cx, sym, n_out, scale, exact, dt=None) -> int:
    """The factor s of upsampling ``sym`` to ``n_out`` true elements, checked to read
    input i // s at the true and the padded size (``dt``: also in the backward's dtype)."""
    f = _factor_of(op, cx, sym, n_out)
    for size in (cx.sizes[sym], cx.buckets[sym]):
        want = np.arange(f * size) // f
        if not np.array_equal(nearest_source(size, f * size, scale, exact), want) or (
                dt is not None and not np.array_equal(
                    np.argmax(_nearest(size, f * size, scale, exact, dt), axis=1), want)):
            raise NoPadRule(op, f"upsampling by {f} at scale {scale}: not i // {f}",
                            retry=False)
    return f


@pad_rule(*NEAREST)
def pad_upsample_nearest(node, ins, cx):
    (lay,) = ins
    n, exact = NEAREST[node.op]
    x, size = node.args[:2]
    scales = tuple(node.args[2:]) + (None,) * (n - len(node.args[2:]))
    lead = len(lay) - n
    to_run_time = _to_run_time_lengths(node, cx, lay, size, scales,
                                       "nearest_exact" if exact else "nearest", False)
    if to_run_time is not None:
        return to_run_time
    if not has_sym(lay[lead:]):
        return Pad(lay[:lead] + concrete(node.shape[lead:]))
    try:
        _to_other_symbols(node.op, cx, lay, size, scales)
        out = _upsampled_layout(node.op, cx, lay, size, lambda sym, k: _whole_factor(
            node.op, cx, sym, size[k], scales[k], exact))
    except NoPadRule:
        return _between_or_refuse(node, cx, lay, size, scales,
                                  "nearest_exact" if exact else "nearest", False)
    return Pad(out, args=(x, tuple(sym_or_int(d) for d in out[lead:])) + node.args[2:])


def _upsampled_input(node, cx, gl, out_size, in_size, check):
    """An upsampling backward's input layout from its gradient's ``gl``: each ``f*H`` back
    to ``H`` (``check(H, k)`` vouches for the factor of spatial dim k), the rest as given."""
    n = len(out_size)
    lead = len(gl) - n
    dims = list(gl[:lead])
    for k in range(n):
        d = gl[lead + k]
        if not is_sym(d):
            dims.append((in_size[lead + k],))
            continue
        name = _lone_sym(node.op, d)
        f = out_size[k] // in_size[lead + k]
        base = name.split("*", 1)[1] if f > 1 and name.startswith(f"{f}*") else name
        if base not in cx.sizes or (f > 1 and base == name) or \
                cx.sizes[base] != in_size[lead + k]:
            raise NoPadRule(node.op, f"gradient dim {d} is no upsampled input dim", {name})
        check(base, k)
        dims.append((base,))
    return tuple(dims)


@pad_rule(*_NEAREST_BACKWARD_OPS)
def pad_upsample_nearest_backward(node, ins, cx):
    """The input's layout from the gradient's: each ``f*H`` back to ``H``."""
    g, out_size, in_size = node.args[:3]
    n, exact = _NEAREST_BACKWARD_OPS[node.op]
    scales = tuple(node.args[3:]) + (None,) * (n - len(node.args[3:]))
    gl = ins[_i(g)]
    lead = len(gl) - n
    dt = _index_dtype(jdt(node.dtype))
    try:
        _from_other_symbols(node.op, cx, gl, in_size, scales)
        xl = _upsampled_input(node, cx, gl, out_size, in_size, lambda base, k: _whole_factor(
            node.op, cx, base, out_size[k], scales[k], exact, dt))
    except NoPadRule:
        back = _from_run_time_lengths(node, cx, gl, in_size, scales,
                                      "nearest_exact" if exact else "nearest", False)
        if back is None:
            raise
        return back
    axes = _sym_axes(gl, range(lead, len(gl)))
    return Pad(xl, args=(g, tuple(sym_or_int(d) for d in gl[lead:]),
                         tuple(sym_or_int(d) for d in xl)) + node.args[3:],
               pre=((_i(g), axes, 0),) if axes else ())


# Bilinear upsampling of padded spatial dims (a segmentation head, ``scale_factor=2``):
# where the taps and weights of the true size's first outputs are those of the padded
# size's (a scale given, or a size a whole multiple: the source positions then do not
# depend on the size), but for the last true element, which torch pairs with itself (its
# second tap clamped) and the padded size with the first padding element, the padding is
# first filled with the last true element, so both give it; its gradient, the fill's,
# flows back to that element. With align_corners the taps depend on the size: made on the
# device from the true sizes (``_device_taps``). Sizes not a whole multiple: exact.


def _linear_factor(op, cx, sym, n_out, align_corners, scale, dt) -> int:
    """``_whole_factor`` for linear interpolation: the true size's taps are the padded
    size's first ones, but for the last true element's clamped second tap. With
    align_corners they depend on the size: made on the device (``_device_taps``)."""
    n, big = cx.sizes[sym], cx.buckets[sym]
    f = _factor_of(op, cx, sym, n_out)
    if align_corners:
        return f
    t0, t1, tw = linear_taps(n, f * n, align_corners, scale, dt)
    p0, p1, pw = (a[:f * n] for a in linear_taps(big, f * big, align_corners, scale, dt))
    if not (np.array_equal(t0, p0) and np.array_equal(tw, pw) and np.all(
            (t1 == p1) | ((t1 == n - 1) & (t0 == n - 1) & (p1 == n)))):
        raise NoPadRule(op, f"bilinear taps of {sym} depend on its size", retry=False)
    return f


def _fill_from_last(env, x, lay, axes):
    """``x`` with the padding of each of ``axes`` filled with that dim's last true element."""
    for a in axes:
        n = env.n[_lone_sym(aten.upsample_bilinear2d.default, lay[a])]
        last = lax.dynamic_index_in_dim(x, n - 1, a, keepdims=True)
        x = jnp.where(env.mask(lay, (a,)), x, last)
    return x


def _device_taps(n_in, n_out, size_out, dt):
    """align_corners linear taps (first, second, the second's weight) of ``size_out``
    outputs from the run-time true sizes, as torch computes them (the scale ``(n_in - 1) /
    (n_out - 1)`` divided exactly, times the output's position, floored); outputs past
    ``n_out`` read true elements too (their values are padding)."""
    dst = jnp.arange(size_out, dtype=dt)
    scale = jnp.where(n_out > 1, divide(jnp.asarray(n_in - 1, dt),
                                        jnp.asarray(jnp.maximum(n_out - 1, 1), dt)), 0)
    src = scale.astype(dt) * dst
    x0 = jnp.minimum(jnp.floor(src).astype(jnp.int32), n_in - 1)
    return x0, jnp.minimum(x0 + 1, n_in - 1), jnp.clip(src - x0.astype(dt), 0, 1)


def _bilinear_align_corners(env, lay, x, out_lay):
    """Bilinear interpolation with align_corners of ``x`` (layout ``lay``) to the layout
    ``out_lay``: along a padded dim the taps come from the true sizes (``_device_taps``);
    they never read the padding."""
    xf = _f32(x)
    dt = _index_dtype(xf.dtype)
    for axis in (-1, -2):
        d_in, d_out = lay[axis], out_lay[axis]
        n_in = dsize(d_in, env.n) if is_sym(d_in) else d_in[0]
        n_out = dsize(d_out, env.n) if is_sym(d_out) else d_out[0]
        x0, x1, w1 = _device_taps(n_in, n_out, env.dsize(d_out), dt)
        w1 = w1.astype(xf.dtype).reshape((-1,) + (1,) * (-axis - 1))
        xf = jnp.take(xf, x0, axis=axis) * (1 - w1) + jnp.take(xf, x1, axis=axis) * w1
    return xf.astype(x.dtype)


def _bilinear_fn(ctx, env, in_lays, x, output_size, align_corners, *scales):
    lay = in_lays[0]
    if align_corners:
        return _bilinear_align_corners(env, lay, x, scales[-1])
    x = _fill_from_last(env, x, lay, _sym_axes(lay, range(len(lay) - 2, len(lay))))
    return lower_upsample_bilinear(x, output_size, align_corners, *scales)


def _bilinear_backward_fn(ctx, env, in_lays, g, output_size, input_size, align_corners,
                          *rest):
    *scales, lay, out_lay = rest
    axes = _sym_axes(lay, range(len(lay) - 2, len(lay)))

    def fwd(x):
        if align_corners:
            return _bilinear_align_corners(env, lay, x, out_lay)
        return lower_upsample_bilinear(_fill_from_last(env, x, lay, axes), output_size,
                                       align_corners, *scales)
    gf = _f32(g)
    return vjp(fwd, (jnp.zeros(input_size, gf.dtype),), gf)[0]


def _resampling_2d(node, ins, cx, kind):
    """(layout, size, align_corners, scales, its ``_to_run_time_lengths`` or None) of a
    bilinear or bicubic resampling."""
    (lay,) = ins
    size, align_corners = node.args[1:3]
    scales = tuple(node.args[3:]) + (None,) * (2 - len(node.args[3:]))
    return lay, size, align_corners, scales, _to_run_time_lengths(node, cx, lay, size, scales,
                                                                  kind, align_corners)


@pad_rule(aten.upsample_bilinear2d.default)
def pad_upsample_bilinear(node, ins, cx):
    lay, size, align_corners, scales, to_run_time = _resampling_2d(node, ins, cx, "linear")
    if to_run_time is not None:
        return to_run_time
    if not has_sym(lay[2:]):
        return Pad(lay[:2] + concrete(node.shape[2:]))
    dt = _index_dtype(jdt(node.dtype))
    try:
        _to_other_symbols(node.op, cx, lay, size, scales)
        out = _upsampled_layout(node.op, cx, lay, size, lambda sym, k: _linear_factor(
            node.op, cx, sym, size[k], align_corners, scales[k], dt))
    except NoPadRule:
        return _between_or_refuse(node, cx, lay, size, scales, "linear", align_corners)
    # (align_corners: the output layout rides last, for the taps made on the device)
    extra = (out,) if align_corners else ()
    return Pad(out, args=(node.args[0], tuple(sym_or_int(d) for d in out[2:]), align_corners)
               + scales + extra, fn=_bilinear_fn, tag="bilinear")


@pad_rule(aten.upsample_bilinear2d_backward.default)
def pad_upsample_bilinear_backward(node, ins, cx):
    """The input's layout from the gradient's (``_upsampled_input``)."""
    g, out_size, in_size, align_corners = node.args[:4]
    scales = tuple(node.args[4:]) + (None,) * (2 - len(node.args[4:]))
    gl = ins[_i(g)]
    dt = _index_dtype(jdt(node.dtype))
    try:
        _from_other_symbols(node.op, cx, gl, in_size, scales)
        xl = _upsampled_input(node, cx, gl, out_size, in_size, lambda base, k: _linear_factor(
            node.op, cx, base, out_size[k], align_corners, scales[k], dt))
    except NoPadRule:
        back = _from_run_time_lengths(node, cx, gl, in_size, scales, "linear", align_corners)
        if back is None:
            raise
        return back
    axes = _sym_axes(gl, range(2, 4))
    return Pad(xl, args=(g, tuple(sym_or_int(d) for d in gl[2:]),
                         tuple(sym_or_int(d) for d in xl), align_corners) + scales + (xl, gl),
               pre=((_i(g), axes, 0),) if axes else (), fn=_bilinear_backward_fn,
               tag="bilinear_backward")


# A fixed size resampled to a length known at run time (a ViT's grid of position
# embeddings interpolated to the patch grid of an image of varying size): the output's
# length is a symbol's, guessed from its size (``Cx.symbolize``); its taps are made on the
# host for every length of the bucket and the executable picks the run-time length's row
# (``resample.taps_table``). Bucket past ``TAPS_TABLE_MAX``, or a scale given: exact.


def _resampled_to(env, x, kind, align_corners, out_lay, fused, follow=()):
    """``x`` resampled to ``out_lay``'s spatial dims. ``follow``: ((axis, root, pairs), ...)
    for padded input dims (``_between_run_time_lengths``)."""
    n = 2 if kind in ("linear", "cubic") else len(out_lay) - 2
    xf = x if kind.startswith("nearest") else _f32(x)
    dt = _index_dtype(xf.dtype)
    rows = {axis: (root, pairs) for axis, root, pairs in follow}
    for axis in range(-1, -n - 1, -1):   # (the width first: torch's separable sum)
        d = out_lay[axis]
        if axis in rows:
            root, pairs = rows[axis]
            cols, weights = pairs_table(kind, pairs, env.dsize(d), align_corners, dt, fused)
            row = env.n[root] - 1
            cols, weights = jnp.asarray(cols)[row], jnp.asarray(weights)[row]
        elif is_sym(d):
            cols, weights = taps_table(kind, xf.shape[axis], env.dsize(d), align_corners, dt,
                                       fused)
            row = dsize(d, env.n) - 1
            cols, weights = jnp.asarray(cols)[row], jnp.asarray(weights)[row]
        else:
            cols, weights = _one_length_taps(kind, xf.shape[axis], d[0], align_corners, dt,
                                             fused)
        xf = resample_axis(xf, axis, cols, weights)
    return xf.astype(x.dtype)


def _to_run_time_lengths_fn(ctx, env, in_lays, x, kind, align_corners, out_lay,
                            follow=()):
    return _resampled_to(env, x, kind, align_corners, out_lay, kind == "cubic", follow)


def _from_run_time_lengths_fn(ctx, env, in_lays, g, kind, align_corners, out_lay,
                              input_size, follow=()):
    gf = _f32(g)
    return vjp(lambda x: _resampled_to(env, x, kind, align_corners, out_lay, False, follow),
               (jnp.zeros(input_size, gf.dtype),), gf)[0]


def _tabulated(node, cx, out):
    for d in out:
        if is_sym(d) and dsize(d, cx.buckets) > TAPS_TABLE_MAX:
            raise NoPadRule(node.op, f"resampling to a length padded past {TAPS_TABLE_MAX}",
                            retry=False)


def _to_run_time_lengths(node, cx, lay, size, scales, kind, align_corners):
    """The resampling of concrete spatial dims to sizes guessed to be symbols' (their taps
    tabulated), or None where no output size is a symbol's or the input is padded there."""
    lead = len(lay) - len(size)
    if has_sym(lay[lead:]):
        return None
    p = _between_run_time_lengths(node, cx, lay, size, scales, kind, align_corners)
    return p if p is not None and has_sym(p.layout[lead:]) else None


# A padded length resampled to another (a feature pyramid's top-down path,
# ``interpolate(p4, size=c3.shape[-2:])``; a segmentation head back to the image's size)
# or to a fixed one: where both lengths follow one input symbol (the image's H), the
# taps are made on the host as torch computes them for every size of that symbol up to
# its bucket (``Cx.follow``: each size's pair of lengths), and the executable picks the
# run-time size's row. Lengths of two input symbols, one read from a value, a bucket past
# ``TAPS_TABLE_MAX``, or a scale given: exact.


def _followed_pairs(op, cx, a, b):
    """(the input symbol that symbol ``a`` and ``b`` (a symbol or an int) follow, the
    pair of their sizes at each size 1..bucket of it (None where either has none)), or
    refuse."""
    syms = {a} | ({b} if type(b) is str else set())
    roots = [r for r in sorted(cx.inputs) if syms <= cx.follow(r, cx.sizes[r]).keys()]
    if len(roots) != 1:
        # (retried: a guess may have taken b for another symbol of its size, W for H)
        raise NoPadRule(op, f"resampling {a} to {b}: lengths not ruled by one input's",
                        syms)
    (root,) = roots
    if cx.buckets[root] > TAPS_TABLE_MAX:
        raise NoPadRule(op, f"resampling {a}: {root} padded past {TAPS_TABLE_MAX}",
                        retry=False)
    pairs = []
    for v in range(1, cx.buckets[root] + 1):
        n = cx.follow(root, v)
        pair = (n.get(a), n[b] if type(b) is str and b in n else b if type(b) is int
                else None)
        ok = None not in pair and pair[0] >= 1 and pair[1] >= 1
        if ok and (pair[0] > cx.buckets[a] or type(b) is str and pair[1] > cx.buckets[b]):
            ok = False   # (a size past this bucket: never run with this executable)
        pairs.append(pair if ok else None)
    now = (cx.sizes[a], cx.sizes[b] if type(b) is str else b)
    if pairs[cx.sizes[root] - 1] != now:
        raise NoPadRule(op, f"resampling {a} to {b}: sizes not ruled by {root}", syms)
    return root, tuple(pairs)


def _kin(cx, sym, v, site):
    """The dim of size ``v`` for a length resampled from or to symbol ``sym``: the one
    symbol of that size that follows the input symbol ``sym`` follows (no guess: a square
    image's H and W have levels of equal sizes), else ``Cx.symbolize``'s guess."""
    if v > 1:
        roots = [r for r in sorted(cx.inputs) if sym in cx.follow(r, cx.sizes[r])]
        if len(roots) == 1:
            kin = [t for t, n in cx.follow(roots[0], cx.sizes[roots[0]]).items() if n == v]
            if len(kin) == 1:
                return (kin[0],)
    return cx.symbolize(v, site)


def _between_run_time_lengths(node, cx, lay, size, scales, kind, align_corners):
    """The resampling of spatial dims to lengths of symbols (guessed from the sizes) or to
    fixed ones, the taps tabulated for each run-time length (a concrete input dim) or for
    each size of the input symbol a padded one follows; None where a scale is given."""
    lead = len(lay) - len(size)
    if any(s is not None for s in scales):
        return None
    out, follow = list(lay[:lead]), []
    for k, v in enumerate(size):
        d = lay[lead + k]
        known = set(cx.sizes)
        nd = _learnt_size(cx, d, k, v)
        if nd is not None:
            if nd[0] not in known:   # (made here at its padded size: may be padded on)
                cx.elastic.add(nd[0])
        elif is_sym(d):
            nd = _kin(cx, d[0], v, ("out", k))
        else:
            nd = cx.symbolize(v, ("out", k))
        out.append(nd)
        if is_sym(d):
            follow.append((k - len(size), *_followed_pairs(
                node.op, cx, _lone_sym(node.op, d), nd[0])))
    out = tuple(out)
    _tabulated(node, cx, out[lead:])
    return Pad(out, args=(node.args[0], kind, align_corners, out, tuple(follow)),
               fn=_to_run_time_lengths_fn, tag="resample to run-time lengths")


def _to_other_symbols(op, cx, lay, size, scales) -> None:
    """Refuse the whole-factor way where a dim is resampled, at no given scale, to the
    size of another symbol (``interpolate(p4, size=c3.shape[-2:])``; a fixed size back to
    the size it was resampled from, MobileViT's map at a multiple of its patch): tabulated
    then at every size, so that sizes where the factor happens to be whole key alike."""
    lead = len(lay) - len(size)
    if all(v is None for v in scales) and any(
            _another_symbols_size(cx, d, v) for d, v in zip(lay[lead:], size)):
        raise NoPadRule(op, "resampling to another symbol's size", retry=False)


def _another_symbols_size(cx, d, v) -> bool:
    """Is ``v`` (over 1) the size of a symbol other than dim ``d``'s?"""
    return v > 1 and any(cx.sizes[t] == v for t in cx.sizes if (t,) != d)


def _from_other_symbols(op, cx, gl, in_size, scales) -> None:
    """``_to_other_symbols`` for a resampling's backward: refuse the whole-factor way
    where, at no given scale, a fixed gradient dim goes back to an input size that a
    symbol has (the forward resampled that symbol to a fixed size)."""
    lead = len(gl) - len(scales)
    if all(v is None for v in scales) and any(
            not is_sym(d) and _another_symbols_size(cx, d, v)
            for d, v in zip(gl[lead:], in_size[lead:])):
        raise NoPadRule(op, "resampling from another symbol's size", retry=False)


def _between_or_refuse(node, cx, lay, size, scales, kind, align_corners):
    """``_between_run_time_lengths``, or the reason it does not apply (exact)."""
    between = _between_run_time_lengths(node, cx, lay, size, scales, kind, align_corners)
    if between is None:
        raise NoPadRule(node.op, f"resampling {kind} of a padded dim at a given scale",
                        _syms(lay), retry=False)
    return between


def _from_run_time_lengths(node, cx, gl, in_size, scales, kind, align_corners):
    """The gradient of a resampling to run-time lengths (``_to_run_time_lengths``,
    ``_between_run_time_lengths``): to the input's size, each input dim a symbol's where
    its size is (guessed, as the forward's output was) and then tabulated as the forward
    was, the gradient's padding zeroed first; None where it does not apply."""
    n = len(in_size) - 2 if kind.startswith("nearest") else 2
    lead = len(gl) - n
    if any(s is not None for s in scales) or len(gl) != len(in_size):
        return None
    xl, follow = list(gl[:lead]), []
    for k in range(n):
        out = gl[lead + k]
        d = _kin(cx, out[0], in_size[lead + k], ("in", k)) if is_sym(out) else \
            cx.symbolize(in_size[lead + k], ("in", k))
        xl.append(d)
        if is_sym(d):
            follow.append((k - n, *_followed_pairs(
                node.op, cx, d[0], _lone_sym(node.op, out) if is_sym(out) else out[0])))
    xl = tuple(xl)
    if not has_sym(gl[lead:] + xl[lead:]):
        return Pad(xl)   # (sizes a guess kept concrete: the plain resampling)
    axes = _sym_axes(gl, range(lead, len(gl)))
    return Pad(xl, args=(node.args[0], kind, align_corners, gl, tuple(
        sym_or_int(d) for d in xl), tuple(follow)), pre=((_i(node.args[0]), axes, 0),),
        fn=_from_run_time_lengths_fn, tag="resample from a run-time length")


@pad_rule(aten.upsample_bicubic2d.default)
def pad_upsample_bicubic(node, ins, cx):
    """Batch dims pass; concrete spatial dims to run-time lengths (above); padded ones to
    lengths that follow the same input symbol, tabulated (``_between_run_time_lengths``);
    at a given scale: exact."""
    lay, size, align_corners, scales, to_run_time = _resampling_2d(node, ins, cx, "cubic")
    if to_run_time is not None:
        return to_run_time
    if has_sym(lay[2:]):
        return _between_or_refuse(node, cx, lay, size, scales, "cubic", align_corners)
    return Pad(lay[:2] + concrete(node.shape[2:]))


@pad_rule(aten.upsample_bicubic2d_backward.default)
def pad_upsample_bicubic_backward(node, ins, cx):
    g, out_size, in_size, align_corners = node.args[:4]
    scales = tuple(node.args[4:]) + (None,) * (2 - len(node.args[4:]))
    gl = ins[_i(g)]
    if not has_sym(gl[2:]):
        return Pad(gl[:2] + concrete(tuple(in_size[2:])))
    back = _from_run_time_lengths(node, cx, gl, in_size, scales, "cubic", align_corners)
    if back is None:
        raise NoPadRule(node.op, "bicubic resampling of a padded dim", _syms(gl[2:]))
    return back


# ---- recurrent cells ----------------------------------------------------------------


def _cell_rows(node, ins, name):
    """(input gates, hidden gates, state) layouts of a fused cell: rows (the batch) are
    independent and may be padded; the gate and feature dims must be concrete."""
    ig, hg, state = (ins[_i(t)] for t in node.args[:3])
    if has_sym(ig[-1:] + hg[-1:] + state[-1:]) or any(
            t is not None and has_sym(ins[_i(t)]) for t in node.args[3:]):
        raise NoPadRule(node.op, f"{name} cell with a dynamic feature dim",
                        _syms(ig, hg, state))
    if not (ig[:-1] == hg[:-1] == state[:-1]):
        raise NoPadRule(node.op, f"{name} cell batch layouts differ", _syms(ig, hg, state))
    return ig, hg, state


@pad_rule(aten._thnn_fused_lstm_cell.default)
def pad_lstm_cell(node, ins, cx):
    """The gate dim is split in four: concrete."""
    ig, _, c = _cell_rows(node, ins, "LSTM")
    return Pad((c, c, ig))


@pad_rule(aten._thnn_fused_lstm_cell_backward_impl.default)
def pad_lstm_cell_backward(node, ins, cx):
    """The bias gradient sums the gates over the batch: padded rows are zeroed first."""
    ghy, gcy, c, cy, ws, has_bias = node.args
    cl, wl = ins[_i(c)], ins[_i(ws)]
    if has_sym(cl[-1:] + wl[-1:]):
        raise NoPadRule(node.op, "LSTM cell with a dynamic feature dim", _syms(cl, wl))
    axes = _sym_axes(cl, range(len(cl) - 1))
    pre = tuple((_i(t), axes, 0) for t in (ghy, gcy, c, cy, ws) if t is not None) if axes else ()
    outs = (wl, cl, (wl[-1],) if has_bias else None)
    return Pad(outs, pre=pre)


@pad_rule(aten._thnn_fused_gru_cell.default)
def pad_gru_cell(node, ins, cx):
    """The gate dims are split in three: concrete."""
    _, _, h = _cell_rows(node, ins, "GRU")
    return Pad((h, h[:-1] + ((node.shape[1][-1],),)))   # (a concrete dim's factors)


@pad_rule(aten._thnn_fused_gru_cell_backward.default)
def pad_gru_cell_backward(node, ins, cx):
    """The bias gradients sum the gates over the batch: padded rows are zeroed first."""
    ghy, ws, has_bias = node.args
    gl, wl = ins[_i(ghy)], ins[_i(ws)]
    if has_sym(gl[-1:] + wl[-1:]):
        raise NoPadRule(node.op, "GRU cell with a dynamic feature dim", _syms(gl, wl))
    axes = _sym_axes(gl, range(len(gl) - 1))
    pre = tuple((_i(t), axes, 0) for t in (ghy, ws)) if axes else ()
    gates = gl[:-1] + ((node.shape[0][-1],),)   # (a concrete dim's factors)
    bias = ((node.shape[0][-1],),) if has_bias else None
    return Pad((gates, gates, gl, bias, bias), pre=pre)


def _time_mask(env, in_lays, x_index):
    t = in_lays[x_index][0]
    return env.dim_mask(t) if is_sym(t) else None


def _layer_fn(op, x_index, ctx, env, in_lays, *args):
    return layer_forward(op, _time_mask(env, in_lays, x_index), *args)


def _layer_backward_fn(op, x_index, ctx, env, in_lays, *args):
    return layer_backward(op, _time_mask(env, in_lays, x_index), *args)


def _layer_layouts(op, ins, layer, cx):
    """(x's layout, the states' layouts, the outputs' layouts: out and final states) of
    a recurrent layer: the time and batch dims may be padded; the feature dims are
    concrete, and the batch dims (and a mask's dims) the same."""
    xl = ins[_i(layer.x)]
    sl = tuple(ins[_i(s)] for s in layer.states)
    if has_sym(xl[2:] + sum((lay[1:] for lay in sl), ())) or any(
            w is not None and has_sym(ins[_i(w)]) for w in layer.weights):
        raise NoPadRule(op, "recurrent layer with a dynamic feature dim", _syms(xl, *sl))
    if not all(same_layout(cx, lay[:1], xl[1:2]) for lay in sl) or (
            layer.valid is not None and not same_layout(cx, ins[_i(layer.valid)], xl[:2])):
        raise NoPadRule(op, "recurrent layer batch layouts differ", _syms(xl, *sl))
    return xl, sl, ((xl[0], xl[1], sl[0][1]),) + sl


def _zeroed(ins, with_axes):
    """``pre`` entries zeroing the padding of the given (argument, padded axes)."""
    return tuple((_i(t), axes, 0) for t, axes in
                 ((t, _sym_axes(ins[_i(t)], axes)) for t, axes in with_axes if t is not None)
                 if axes)


def _layer_padding(layer, cotangents=()):
    """(argument, axes) whose padding a layer op zeroes: time and batch of the input (and
    of the output's cotangent), the batch of the states (and of theirs), the mask's."""
    return tuple(zip(cotangents, ((0, 1),) + ((0,),) * len(layer.states))) + (
        (layer.x, (0, 1)),) + tuple((s, (0,)) for s in layer.states) + ((layer.valid, (0, 1)),)


@pad_rule(recurrent.lstm_layer, recurrent.rnn_layer)
def pad_recurrent_layer(node, ins, cx):
    """Batch rows are independent; padded steps at the end of the time dim keep the
    carry (an op's own per-row mask is padded with False). Padding is zeroed first so
    that the pullback kept for the backward is finite there (its zero cotangents then
    contribute exact zeros)."""
    layer = recurrent.forward_args(node.op, node.args)[0]
    _, _, outs = _layer_layouts(node.op, ins, layer, cx)
    return Pad(outs, pre=_zeroed(ins, _layer_padding(layer)),
               fn=functools.partial(_layer_fn, node.op, _i(layer.x)), tag=str(node.op))


@pad_rule(recurrent.lstm_layer_backward, recurrent.rnn_layer_backward)
def pad_recurrent_layer_backward(node, ins, cx):
    """Cotangents and inputs zeroed on the padding (the weight gradients sum over steps
    and rows); the output is left as it is: it names the forward's kept pullback."""
    layer, cotangents, _, output_mask = recurrent.backward_args(node.op, node.args)
    xl, sl, want = _layer_layouts(node.op, ins, layer, cx)
    got = tuple(None if g is None else ins[_i(g)] for g in cotangents)
    if any(g is not None and not same_layout(cx, g, w) for g, w in zip(got, want)):
        raise NoPadRule(node.op, "recurrent layer cotangents padded unlike its outputs",
                        _syms(*got, *want))
    lays = (xl,) + sl + tuple(None if w is None else ins[_i(w)] for w in layer.weights)
    outs = tuple(lay if m else None for lay, m in zip(lays, output_mask))
    return Pad(outs, pre=_zeroed(ins, _layer_padding(layer, cotangents)),
               fn=functools.partial(_layer_backward_fn, node.op, _i(layer.x)),
               tag=str(node.op))


# ---- roll ---------------------------------------------------------------------------


def _roll_fn(ctx, env, in_lays, x, shifts, dims):
    lay = in_lays[0]
    for shift, d in zip(shifts, dims):
        d = norm_dim(d, x.ndim)
        if not is_sym(lay[d]):
            x = jnp.roll(x, shift, d)
            continue
        n = env.count(lay, (d,))   # true positions rotate among themselves
        src = jnp.clip(jnp.mod(jnp.arange(x.shape[d]) - shift, n), 0, x.shape[d] - 1)
        x = jnp.take(x, src, axis=d)
    return x


@pad_rule(aten.roll.default)
def pad_roll(node, ins, cx):
    (lay,) = ins
    shifts, dims = (tuple(node.args) + ((),))[1:3]
    if not dims:
        if has_sym(lay):
            raise NoPadRule(node.op, "roll of the flattened tensor", _syms(lay))
        return Pad(lay)
    if not any(_lone_sym(node.op, lay[norm_dim(d, len(lay))]) for d in dims):
        return Pad(lay)
    return Pad(lay, fn=_roll_fn, tag="roll")


# ---- losses -------------------------------------------------------------------------


def _nll_layouts(node, ins, xl, tl, weight, cx):
    """The class dim's layout where it is dynamic (the in-batch negatives of a
    contrastive loss: a padded batch's logits against each other; class weights, if
    any, laid out alike), else None; the targets must be padded as the input's other
    dims (labels of 16 read as a 16-pixel H // 2 beside a batch of 16 are withdrawn)."""
    classes = xl[1] if len(xl) >= 2 else xl[0] if xl else (1,)
    if not is_sym(classes):
        classes = None
    elif weight is not None and not same_layout(cx, ins[_i(weight)], (classes,)):
        raise NoPadRule(node.op, "nll_loss over a dynamic class dim, its weights not",
                        _syms(xl, ins[_i(weight)]))
    if not same_layout(cx, tl, xl[:1] + xl[2:] if len(xl) >= 2 else ()):
        raise NoPadRule(node.op, f"targets {tl} padded unlike the input {xl}",
                        unlike(tl, xl[:1] + xl[2:] if len(xl) >= 2 else ()))
    return classes


def _nll_classes_fn(classes, ctx, env, in_lays, x, target, weight, reduction, ignore_index):
    """``nll_loss`` over a padded class dim: targets checked against its true size."""
    n = env.count((classes,), (0,))
    check(out_of_range(target, 0, n, ignore_index), "nll_loss: a target is out of bounds "
          "(not in [0, the number of classes)); the class dim is dynamic: checked against "
          "its true size")
    return nll_loss_values(x, target, weight, reduction, ignore_index)


@pad_rule(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def pad_nll_loss(node, ins, cx):
    x, target, weight, reduction, ignore = node.args
    xl, tl = ins[_i(x)], ins[_i(target)]
    classes = _nll_layouts(node, ins, xl, tl, weight, cx)
    pre = ()
    ta = tuple(a for a in range(len(tl)) if is_sym(tl[a]))
    if ta:
        xa = tuple(a for a in range(len(xl)) if a != 1 and is_sym(xl[a]))
        pre = ((_i(target), ta, ignore), (_i(x), xa, 0))
    out = tl if reduction == 0 else ()
    if classes is None:
        return Pad((out, ()), pre=pre)
    return Pad((out, ()), pre=pre, fn=functools.partial(_nll_classes_fn, classes),
               tag="nll_loss classes")


@pad_rule(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def pad_nll_loss_backward(node, ins, cx):
    g, x, target, weight, reduction, ignore, total = node.args
    xl, tl = ins[_i(x)], ins[_i(target)]
    _nll_layouts(node, ins, xl, tl, weight, cx)   # (its targets were checked forward)
    ta = tuple(a for a in range(len(tl)) if is_sym(tl[a]))
    pre = ()
    if ta:
        pre = ((_i(target), ta, ignore),)
        if reduction == 0:
            pre += ((_i(g), ta, 0),)
    return Pad(xl, pre=pre)


def _given(node, names: tuple, defaults: tuple) -> list:
    """``node``'s arguments ``names`` in order: given by position or keyword, else their
    defaults."""
    kw = dict(node.kwargs)
    return [node.args[k] if k < len(node.args) else kw.get(n, d)
            for k, (n, d) in enumerate(zip(names, defaults))]


def _true_reduce(env, lay, v, reduction, dtype=None):
    """Terms ``v`` of padded layout ``lay`` summed over the true elements (the padding's
    left out), or their mean (``reduction`` 1: over the true count), as torch ``dtype``
    (None: as computed)."""
    axes = tuple(range(len(lay)))
    m = env.mask(lay, axes)
    s = jnp.sum(v if m is None else jnp.where(m, v, 0))
    s = s / env.count(lay, axes) if reduction == 1 else s
    return s if dtype is None else s.astype(jdt(dtype))


def _mse_fn(ctx, env, in_lays, x, t, reduction=1):
    return _true_reduce(env, env_broadcast(in_lays[0], in_lays[1]),
                        jnp.square(x.astype(jnp.float32) - t.astype(jnp.float32)), reduction,
                        ctx.dtype)


def env_broadcast(a, b):
    n = max(len(a), len(b))
    a = ((1,),) * (n - len(a)) + tuple(a)
    b = ((1,),) * (n - len(b)) + tuple(b)
    return tuple(x if x != (1,) else y for x, y in zip(a, b))


@pad_rule(aten.mse_loss.default)
def pad_mse_loss(node, ins, cx):
    reduction = node.args[2] if len(node.args) > 2 else dict(node.kwargs).get("reduction", 1)
    lay = broadcast_layouts(node.op, list(ins), max(len(l) for l in ins), cx)
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
    if not same_layout(cx, ins[_i(t)], xl):
        raise NoPadRule(node.op, "layouts differ", unlike(xl, ins[_i(t)]))
    if not has_sym(xl):
        return Pad(xl)
    return Pad(xl, fn=_mse_backward_fn, tag="mse_backward")


def _bce_logits_fn(lay, ctx, env, in_lays, x, t, weight=None, pos_weight=None, reduction=1):
    return _true_reduce(env, lay, lower_bce_logits(x, t, weight, pos_weight, 0), reduction,
                        ctx.dtype)


@pad_rule(aten.binary_cross_entropy_with_logits.default)
def pad_bce_logits(node, ins, cx):
    """Elementwise terms (the weights broadcast to the input, as torch's): the
    reductions sum the true ones."""
    x, t, weight, pos_weight, reduction = _given(
        node, ("self", "target", "weight", "pos_weight", "reduction"), (None,) * 4 + (1,))
    xl = ins[_i(x)]
    broadcast_layouts(node.op, [ins[_i(a)] for a in (x, t, weight, pos_weight)
                                if a is not None], len(xl), cx)
    if reduction == 0:
        return Pad(xl)
    if not has_sym(xl):
        return Pad(())
    return Pad((), fn=functools.partial(_bce_logits_fn, xl), tag="bce_logits")


def _smooth_l1_backward_fn(lay, ctx, env, in_lays, g, x, t, reduction, beta):
    d = lower_smooth_l1_loss_backward(g, x, t, 2, beta)   # (2: not over the padded count)
    if reduction == 1:
        d = d / env.count(lay, tuple(range(len(lay))))
    return d.astype(jdt(ctx.dtype))


@pad_rule(aten.smooth_l1_loss_backward.default)
def pad_smooth_l1_loss_backward(node, ins, cx):
    """Elementwise; a mean's gradient divides by the true count."""
    lay = broadcast_layouts(node.op, list(ins), max(len(l) for l in ins), cx)
    if node.args[3] != 1 or not has_sym(lay):
        return Pad(lay)
    return Pad(lay, fn=functools.partial(_smooth_l1_backward_fn, lay), tag="smooth_l1_backward")


# Margin losses over classes, a row each: the rows may be padded (never the classes); the
# padding rows' targets are set to a class (multi-margin) or to none (multilabel: -1 first)
# so that they index in bounds, and the reductions count the true rows.

def _row_loss_layouts(node, xl, tl, cx, multilabel: bool):
    """The rows' layout (the input's first dim) where only rows are padded, the targets
    as the rows (as the input, for multilabel); else refuses."""
    want = xl if multilabel else xl[:1]
    if len(xl) != 2 or is_sym(xl[1]) or not same_layout(cx, tl, want):
        raise NoPadRule(node.op, "margin loss over a dynamic class dim, or targets padded "
                        "unlike the rows", _syms(xl, tl))
    return xl[:1]


def _multi_margin_fn(rows, ctx, env, in_lays, x, target, p=1, margin=1, weight=None,
                     reduction=1):
    return _true_reduce(env, rows, _multi_margin(x, target, p, margin, weight, 0), reduction,
                        ctx.dtype)


@pad_rule(aten.multi_margin_loss.default)
def pad_multi_margin_loss(node, ins, cx):
    x, target, _, _, weight, reduction = _given(
        node, ("self", "target", "p", "margin", "weight", "reduction"), (None,) * 5 + (1,))
    xl, tl = ins[_i(x)], ins[_i(target)]
    if not has_sym(xl) and not has_sym(tl):
        return Pad(concrete(node.shape))
    if weight is not None and has_sym(ins[_i(weight)]):
        raise NoPadRule(node.op, "class weights with a dynamic dim", _syms(ins[_i(weight)]))
    rows = _row_loss_layouts(node, xl, tl, cx, False)
    pre = ((_i(target), (0,), 0),)
    if reduction == 0:
        return Pad(rows, pre=pre)
    return Pad((), pre=pre, fn=functools.partial(_multi_margin_fn, rows), tag="multi_margin")


def _multi_margin_backward_fn(rows, ctx, env, in_lays, g, x, target, p, margin, weight=None,
                              reduction=1):
    def loss(x_):
        v = _multi_margin(x_, target, p, margin, weight, 0)
        return v if reduction == 0 else _true_reduce(env, rows, v, reduction)
    return vjp(loss, (_f32(x),), _f32(g))[0].astype(jdt(ctx.dtype))


@pad_rule(aten.multi_margin_loss_backward.default)
def pad_multi_margin_loss_backward(node, ins, cx):
    _, x, target, _, _, weight, _ = _given(
        node, ("grad_output", "self", "target", "p", "margin", "weight", "reduction"),
        (None,) * 6 + (1,))
    xl, tl = ins[_i(x)], ins[_i(target)]
    if not has_sym(xl) and not has_sym(tl):
        return Pad(xl)
    if weight is not None and has_sym(ins[_i(weight)]):
        raise NoPadRule(node.op, "class weights with a dynamic dim", _syms(ins[_i(weight)]))
    rows = _row_loss_layouts(node, xl, tl, cx, False)
    return Pad(xl, pre=((_i(target), (0,), 0),),
               fn=functools.partial(_multi_margin_backward_fn, rows), tag="multi_margin_bwd")


def _multilabel_fn(rows, ctx, env, in_lays, x, target, reduction):
    v, is_target = _multilabel_margin(x, target, 0)
    return (_true_reduce(env, rows, v, reduction, ctx.dtype[0]) if reduction else v,
            is_target.astype(x.dtype).reshape(target.shape))


@pad_rule(aten.multilabel_margin_loss_forward.default)
def pad_multilabel_margin_loss(node, ins, cx):
    x, target, reduction = node.args
    xl, tl = ins[_i(x)], ins[_i(target)]
    if not has_sym(xl) and not has_sym(tl):
        return Pad(tuple(concrete(s) for s in node.shape))
    rows = _row_loss_layouts(node, xl, tl, cx, True)
    return Pad((rows if reduction == 0 else (), tl), pre=((_i(target), (0,), -1),),
               fn=functools.partial(_multilabel_fn, rows), tag="multilabel_margin")


def _multilabel_backward_fn(rows, ctx, env, in_lays, g, x, target, reduction, is_target):
    def loss(x_):
        v = _multilabel_margin(x_, target, 0)[0]
        return v if reduction == 0 else _true_reduce(env, rows, v, reduction)
    return vjp(loss, (x,), g)[0]


@pad_rule(aten.multilabel_margin_loss_backward.default)
def pad_multilabel_margin_loss_backward(node, ins, cx):
    _, x, target, _, _ = node.args
    xl, tl = ins[_i(x)], ins[_i(target)]
    if not has_sym(xl) and not has_sym(tl):
        return Pad(xl)
    rows = _row_loss_layouts(node, xl, tl, cx, True)
    return Pad(xl, pre=((_i(target), (0,), -1),),
               fn=functools.partial(_multilabel_backward_fn, rows), tag="multilabel_margin_bwd")


# CTC: each row's lengths bound what its alpha and beta read (t < input length, s <= 2 *
# target length), so steps past the true T and labels past the true S are never read;
# padding rows read their own garbage lengths. The loss reads the lengths on the host for
# log_alpha's width, 2 L + 1 (L the longest target): a symbol of the targets' S where L
# is S, so one executable serves every batch in a bucket of T and S (speech recognition
# at varying utterance lengths).

def _ctc_layouts(node, ins, cx, lp, targets, lengths):
    """(T, B) of the log-probabilities' layout; refuses a dynamic class dim, padded
    concatenated targets, and targets or lengths padded unlike the batch."""
    ll = ins[_i(lp)]
    if is_sym(ll[2]):
        raise NoPadRule(node.op, "ctc_loss over a dynamic class dim", _syms(ll))
    tl = ins[_i(targets)]
    if len(tl) != 2 and has_sym(tl):
        raise NoPadRule(node.op, "ctc_loss of padded concatenated targets", _syms(tl))
    lays = [tl[:1]] if len(tl) == 2 else []
    lays += [ins[_i(x)] for x in lengths if type(x) is ir.Input]
    if not all(same_layout(cx, lay, ll[1:2]) for lay in lays):
        raise NoPadRule(node.op, "ctc_loss targets or lengths padded unlike the batch",
                        _syms(ll, *lays))
    return ll[0], ll[1]


@pad_rule(aten._ctc_loss.Tensor, aten._ctc_loss.default)
def pad_ctc_loss(node, ins, cx):
    lp, targets, il, tl = node.args[:4]
    T, B = _ctc_layouts(node, ins, cx, lp, targets, (il, tl))
    width = node.shape[1][2]
    S = ins[_i(targets)][1] if len(ins[_i(targets)]) == 2 else (0,)
    sym = _lone_sym(node.op, S)
    if sym is not None and width == 2 * cx.sizes[sym] + 1:
        W = (cx.scaled(sym, 2, 1),)
    else:
        W = (width,)
    return Pad(((B,), (B, T, W)))


@pad_rule(aten._ctc_loss_backward.Tensor, aten._ctc_loss_backward.default)
def pad_ctc_loss_backward(node, ins, cx):
    g, lp, targets, il, tl, nll, log_alpha = node.args[:7]
    T, B = _ctc_layouts(node, ins, cx, lp, targets, (il, tl))
    al = ins[_i(log_alpha)]
    if not same_layout(cx, al[:2], (B, T)) or not same_layout(cx, ins[_i(nll)], (B,)):
        raise NoPadRule(node.op, "ctc_loss_backward's log_alpha padded unlike its input",
                        _syms(al, ins[_i(lp)]))
    return Pad(ins[_i(lp)])


@pad_rule(aten._trilinear.default)
def pad_trilinear(node, ins, cx):
    """``nn.Bilinear``'s product (and its gradients): any dim may be padded (a batch); a
    summed one's padding is zeroed in every operand first (the weight's gradient sums
    over the batch)."""
    i1, i2, i3, e1, e2, e3, sumdim = node.args[:7]
    operands = (i1, i2, i3)
    lays = [ins[_i(t)] for t in operands]
    rank, dims = _trilinear_operands(lays, (e1, e2, e3))
    full = []
    pre = []
    for t, lay, ds in zip(operands, lays, dims):
        f = [(1,)] * rank
        for d, dim in zip(ds, lay):
            f[d] = dim
        full.append(tuple(f))
        summed = tuple(a for a, d in enumerate(ds) if d in sumdim and is_sym(lay[a]))
        if summed:
            pre.append((_i(t), summed, 0))
    out = broadcast_layouts(node.op, full, rank, cx)
    return Pad(tuple(d for k, d in enumerate(out) if k not in set(sumdim)), pre=tuple(pre))


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
    if not same_layout(cx, gl[:len(il)], il):   # (a guess took the 6 ids for a 6-long T)
        raise NoPadRule(node.op, f"gradient {gl} padded unlike the indices {il}",
                        unlike(gl[:len(il)], il))
    axes = tuple(a for a in range(len(il)) if is_sym(il[a]))
    pre = ((_i(g), axes, 0), (_i(idx), axes, 0)) if axes else ()
    return Pad(((node.shape[0],),) + gl[len(il):], pre=pre)


# ---- indexing -----------------------------------------------------------------------


def _leading_index(node, ins, xl, indices, into_padded: bool = False, cx=None):
    """(layout of the broadcast index, p, k) of ``x[:, ..., idx0, ..., idx(k-1)]``: after p
    full dims, k adjacent index tensors index dims of x (rows of a table, the columns
    ``x[:, cols]``), concrete ones unless ``into_padded``; None for other patterns."""
    p = 0
    while p < len(indices) and indices[p] is None:
        p += 1
    k = len(indices) - p
    if k == 0 or any(i is None for i in indices[p:]):
        return None
    if has_sym(xl[p:p + k]) and not into_padded:
        raise NoPadRule(node.op, "indexing into a dynamic dim", _syms(xl))
    ils = [ins[_i(i)] for i in indices[p:]]
    nd = max(len(l) for l in ils)
    return broadcast_layouts(node.op, ils, nd, cx), p, k


@pad_rule(aten.index.Tensor)
def pad_index(node, ins, cx):
    x, indices = node.args
    xl = ins[_i(x)]
    r = _leading_index(node, ins, xl, indices, into_padded=True, cx=cx)
    if r is None:
        if not any(map(has_sym, filter(None, ins))):
            # (nothing dynamic: runs as it is, Longformer's ``x[rows, :, cols]`` at its
            # global tokens)
            return Pad(concrete(node.shape))
        raise NoPadRule(node.op, "index pattern", _syms(*ins))
    il, p, k = r
    out = xl[:p] + il + xl[p + k:]
    padded = tuple((d, xl[d]) for d in range(p, p + k) if is_sym(xl[d]))
    if not padded:
        return Pad(out)
    # (a padding mask read at its keys: ``mask[batch, kv]``; hidden states at a mixture
    # of experts' sorted token ids, ``h.view(-1, C)[perm // k]``: a dim padded inside)
    return Pad(out, fn=functools.partial(_index_true_size_fn, dict(padded)),
               tag="index true size")


def _true_indices(op: str, padded: dict, env, x, indices) -> list:
    """Index tensors into ``x``'s leading dims, where the dims in ``padded`` are padded:
    there an index counts from the end of the true size, is checked against it, and
    points at the true element's position in the padded layout (``_spread``)."""
    idx = []
    for d, i in enumerate(indices):
        if i is not None and d in padded:
            i = _at_true_positions(op, env, padded[d], d, i, wraps=True)
        elif i is not None:
            check_index(i, x.shape[d], _out_of_bounds(op, d, x.shape[d]), wraps=True)
        idx.append(i)
    return idx


def _at_true_positions(op: str, env, dim, d: int, index, wraps=False):
    """``index``'s values along dim ``d`` (of layout ``dim``), true positions (counted
    from the end where ``wraps``), checked against its true size and pointed at their
    places in its padded layout (``_spread``)."""
    n = env.count((dim,), (0,))
    check_index(index, n, f"{op}: index out of bounds for dimension {d} (a dynamic dim: "
                "checked against its true size)", wraps=wraps)
    return _spread(env, dim, jnp.where(index < 0, index + n, index) if wraps else index)


def _index_true_size_fn(padded, ctx, env, in_lays, x, indices):
    """``x[i0, i1, ...]`` into padded dims of x."""
    return x[_jnp_index(_true_indices("index", padded, env, x, indices), x.ndim)]


def _index_put_true_size_fn(padded, rows, packed, ctx, env, in_lays, x, indices, values,
                            accumulate=False):
    """``x[i0, i1, ...] = values`` (or ``+=``) into padded dims of x. ``rows``: the
    broadcast index's layout where its padding must write nowhere (a write, not a sum:
    ``inv[perm] = arange(n)`` from a padded perm), else None. ``packed``: values' dims to
    compact first (``_compacted_like``)."""
    for d, dim, flat in packed:   # (compacted, its tail holds true elements again: 0)
        lay = tuple(flat if a == d else (1,) for a in range(values.ndim))
        packed_values = _to_length(_compact(env, values, d, dim), d, env.dsize(flat))
        values = sanitize(env, packed_values, lay, (d,), 0)
    idx = _true_indices("index_put", padded, env, x, indices)
    if rows is None:
        return put_at(x, idx, values, accumulate)
    at = next(a for a, i in enumerate(idx) if i is not None)
    valid = env.mask(rows, range(len(rows)))
    idx[at] = jnp.where(valid, idx[at], x.shape[at])   # out of bounds: dropped
    return x.at[_jnp_index(idx, x.ndim)].set(values.astype(x.dtype), mode="drop")


def _to_length(x, d: int, n: int):
    """``x`` cut or zero-padded at its end along ``d`` to length ``n``."""
    if x.shape[d] >= n:
        return lax.slice_in_dim(x, 0, n, axis=d)
    widths = [(0, 0)] * x.ndim
    widths[d] = (0, n - x.shape[d])
    return jnp.pad(x, widths)


@pad_rule(aten.index_put.default)
def pad_index_put(node, ins, cx):
    x, indices, values = node.args[:3]
    xl = ins[_i(x)]
    fill = _mask_fill(node, ins, cx)
    if fill is not None:
        return fill
    r = _leading_index(node, ins, xl, indices, into_padded=True, cx=cx)
    if r is None:
        if not any(map(has_sym, filter(None, ins))):
            return Pad(xl)   # (nothing dynamic: runs as it is)
        raise NoPadRule(node.op, "index pattern", _syms(*ins))
    il, p, k = r
    vl = ins[_i(values)]
    masks = [i for i in indices if i is not None and node.inputs[_i(i)].dtype == torch.bool]
    if masks and any(map(is_sym, xl + vl)) and per_element_count(
            node.inputs[_i(x)].shape, p, node.inputs[_i(masks[0])].shape,
            node.inputs[_i(values)].shape) is not None:
        return _pad_mask_rows_put(node, xl, ins[_i(masks[0])], vl)
    axes = tuple(p + a for a in range(len(il)) if is_sym(il[a]))
    accumulate = node.args[3] if len(node.args) > 3 else dict(node.kwargs).get("accumulate")
    if axes and accumulate and len(vl) != len(il) + len(xl) - k:
        # (a write of broadcast values drops the padded rows' writes; a sum would add
        # them at the padding's indices)
        raise NoPadRule(node.op, "broadcast values", _syms(vl, il))
    written = xl[:p] + il + xl[p + k:]   # (the values broadcast to it, from the right)
    vl, packed = _compacted_like(cx, vl, written)
    if len(vl) > len(written) or not all(
            v == (1,) or same_layout(cx, (v,), (w,)) for v, w in zip(vl[::-1], written[::-1])):
        raise NoPadRule(node.op, f"values {vl} written at {written}", _syms(vl, written))
    pre = ((_i(values), axes, 0),) if axes and accumulate else ()
    rows = il if axes and not accumulate else None   # (padding rows write nowhere)
    padded = tuple((d, xl[d]) for d in range(p, p + k) if is_sym(xl[d]))
    if not padded and rows is None and not packed:
        return Pad(xl, pre=pre)
    if masks:
        raise NoPadRule(node.op, "a boolean mask over a padded dim", _syms(xl))
    if padded and node.inputs[_i(x)].op is ir.DATA and \
            node.inputs[_i(x)] not in ir.HOST_RECIPES:
        # (a buffer kept between steps, written in place: a static cache whose length
        # automatic dynamic marked would stay padded after the write, and the forward
        # replayed on it next would be inlined at every call; a constant made on the host
        # this step, the zeros an index's gradient is summed into, is no such buffer)
        raise NoPadRule(node.op, "a write at positions of a padded dim of a graph input",
                        _syms(xl))
    # (a write at positions: ``y[:, cols] = v`` along a padded T)
    return Pad(xl, pre=pre, fn=functools.partial(_index_put_true_size_fn, dict(padded), rows,
                                                 packed),
               tag="index_put true size")


def _mask_fill(node, ins, cx):
    """``x[mask] = v`` (or ``+=``) of one value, the mask laid out as x's leading dims
    (Longformer's ``extended_mask[attention_mask == 2] = max``): element by element, a
    ``where`` (the mask's padding writes into x's); else None."""
    x, indices, values = node.args[:3]
    if len(indices) != 1 or indices[0] is None or \
            node.inputs[_i(indices[0])].dtype != torch.bool or \
            math.prod(node.inputs[_i(values)].shape) != 1:
        return None
    xl, ml = ins[_i(x)], ins[_i(indices[0])]
    if has_sym(ins[_i(values)]) or len(ml) > len(xl) or not same_layout(cx, ml, xl[:len(ml)]):
        return None
    return Pad(xl, fn=functools.partial(_mask_fill_fn, len(ml)), tag="mask fill")


def _mask_fill_fn(rank, ctx, env, in_lays, x, indices, values, accumulate=False):
    mask = indices[0].reshape(indices[0].shape + (1,) * (x.ndim - rank))
    v = values.reshape(()).astype(x.dtype)
    return jnp.where(mask, x + v if accumulate else v, x)


def _compacted_like(cx, vl, written):
    """(``vl`` with each merged dim padded inside that ``written`` holds compacted at that
    place read compacted, and those dims: (position in vl, the merged dim, written's dim),
    to compact first). Compacted there: ``written``'s dim is that merged dim's ``_flat``
    (the gradient of a mixture of experts' outputs taken back to the sorted order, laid
    out as (B, T, k) by a view), or a lone symbol of as many true elements (BEiT's
    relative position bias, gathered by a host index of (N+1)^2 positions and viewed as
    (N+1, N+1): its gradient, laid out so, summed back at that index's positions)."""
    out, packed = list(vl), []
    for a in range(1, min(len(vl), len(written)) + 1):
        w, v = written[-a], vl[-a]
        if not _inside_padded(v):
            continue
        flat = _compacted(cx, w)
        if flat == v or flat is None and _is_lone_sym(w) and \
                cx.sizes[w[0]] == dsize(v, cx.sizes):
            out[-a] = w
            packed.append((len(vl) - a, v, w))
    return tuple(out), tuple(packed)


def _pad_mask_rows_put(node, xl, ml, vl):
    """``x[mask] = v`` with one row of v per selected element where only v's rows are
    padded (``x[mask] = y[mask]``: a count that varies): the count checked is their true
    number, padding rows write nowhere."""
    if has_sym(xl) or has_sym(ml) or has_sym(vl[1:]) or len(vl[0]) != 1:
        raise NoPadRule(node.op, "values per element of a boolean mask", _syms(xl, ml, vl))
    return Pad(xl, fn=functools.partial(_mask_rows_put_fn, vl[0]), tag="mask_rows_put")


def _mask_rows_put_fn(rows, ctx, env, in_lays, x, indices, values, accumulate=False):
    mask = next(i for i in indices if i is not None)
    return mask_rows_put(x, mask, values, accumulate, env.count((rows,), (0,)))


def _same_but(op, a, b, d):
    if len(a) != len(b) or any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != d):
        raise NoPadRule(op, f"layouts {a} and {b} differ", _syms(a, b))


@pad_rule(aten.scatter.src, aten.scatter.value, aten.scatter_add.default,
          aten.scatter_reduce.two)
def pad_scatter(node, ins, cx):
    """Writes stay in their row: padded rows of the index write into padded rows of the
    result. Along the scatter dim the index may be padded where x is, with the same
    symbol (a sort's gradient: the sort's indices written back): its padded positions
    then write to themselves, in x's padding, whatever they held."""
    x, dim, index = node.args[:3]
    xl, il = ins[_i(x)], ins[_i(index)]
    d = norm_dim(dim, len(xl))
    own = is_sym(il[d])
    if own and node.op is aten.scatter_reduce.two:
        raise NoPadRule(node.op, "scatter_reduce from a padded index dim", _syms(il))
    into_own = own and len(il) == len(xl) and same_layout(cx, (il[d],), (xl[d],))
    if own and not into_own and node.op is not aten.scatter_add.default:
        raise NoPadRule(node.op, "scatter from a padded index dim into another",
                        _syms(il, xl))
    _same_but(node.op, xl, il, d)
    inside = is_sym(xl[d]) and _inside_padded(xl[d])
    if inside and node.op is aten.scatter_reduce.two:
        _end_padded(node.op, xl[d])
    src = node.args[3] if len(node.args) > 3 else None
    if type(src).__name__ == "Input" and ins[_i(src)] != il and len(ins[_i(src)]):
        _same_but(node.op, ins[_i(src)], il, -1)
    # (along a dim padded inside, a gather's gradient there: ``pad_gather``)
    inside_fn = dict(fn=functools.partial(_scatter_inside_fn, node.op, xl[d]),
                     tag="scatter inside") if inside else {}
    if own and not into_own:
        # gather's gradient from a padded length into a concrete dim (DeBERTa's relative
        # positions): the padding's values add 0, at position 0 (the index's padding
        # is zeroed by the bounds check's sanitizing)
        return Pad(xl, pre=((_i(src), (d,), 0),), **inside_fn)
    if own:
        return Pad(xl, fn=functools.partial(_scatter_to_own_fn, node.op, il, d),
                   tag="scatter to own")
    return Pad(xl, **inside_fn)


def _scatter_inside_fn(op, dim_layout, ctx, env, in_lays, x, dim, index, src):
    """scatter (or scatter_add) along a dim padded inside: each index value, a true
    position, checked against the true size and written at its place in the layout."""
    at = _at_true_positions(op.__name__.split(".")[0], env, dim_layout,
                            norm_dim(dim, x.ndim), index)
    return _scatter_at(op, x, dim, at, src)


def _scatter_to_own_fn(op, index_layout, d, ctx, env, in_lays, x, dim, index, src):
    """scatter (or scatter_add) where ``index`` is padded along the scatter dim ``d`` as
    x is: a padded position writes at its own position, in x's padding. Along a dim
    padded inside (cummax's gradient over flattened pixels: its indices, true positions)
    the true positions' values are checked and pointed at their places in the layout."""
    own = lax.broadcasted_iota(index.dtype, index.shape, d)
    valid = env.mask(index_layout, (d,))
    if _inside_padded(index_layout[d]):
        index = _at_true_positions(op.__name__.split(".")[0], env, index_layout[d], d,
                                   jnp.where(valid, index, 0))
    return _scatter_at(op, x, dim, jnp.where(valid, index, own), src)


def _scatter_at(op, x, dim, index, src):
    """scatter (or scatter_add) of ``src`` into ``x`` at ``index`` (positions in x's
    padded layout)."""
    if op is aten.scatter_add.default:
        return scatter_along("scatter_add", x, dim, index, src, "add")
    return scatter_along("scatter", x, dim, index, src)


@pad_rule(aten.gather.default)
def pad_gather(node, ins, cx):
    """Index values point at valid positions; padded index rows gather garbage rows.
    Along a dim padded inside (Funnel's sinusoids for positions ``arange(-2T, 2T)``, laid
    out (4, T), gathered at relative positions) each index value, a true position, is
    checked against the true size and read at its place in the padded layout."""
    x, dim, index = node.args[:3]
    xl, il = ins[_i(x)], ins[_i(index)]
    d = norm_dim(dim, len(xl))
    _same_but(node.op, xl, il, d)
    if is_sym(xl[d]) and _inside_padded(xl[d]):
        return Pad(il, fn=functools.partial(_gather_inside_fn, xl[d]), tag="gather inside")
    return Pad(il)


def _gather_inside_fn(dim_layout, ctx, env, in_lays, x, dim, index, *, sparse_grad=False):
    d = norm_dim(dim, x.ndim)
    return x[_full_index(_at_true_positions("gather", env, dim_layout, d, index), d)]


@pad_rule(aten.index_select.default)
def pad_index_select(node, ins, cx):
    """Rows picked by a padded index (``nonzero``'s positions, a count that varies) land
    in the result's padded rows; x's own dim may be padded at its end (the index points at
    true rows)."""
    x, dim, index = node.args
    xl, il = ins[_i(x)], ins[_i(index)]
    if not xl:
        raise NoPadRule(node.op, "index_select of a 0-d tensor", _syms(il))
    d = norm_dim(dim, len(xl))
    _end_padded(node.op, xl[d])
    return Pad(xl[:d] + (il[0] if il else (1,),) + xl[d + 1:])


@pad_rule(aten.index_add.default)
def pad_index_add(node, ins, cx):
    """index_select's gradient: padded index rows add zero rows (to row 0)."""
    x, dim, index, source = node.args[:4]
    xl, il, sl = ins[_i(x)], ins[_i(index)], ins[_i(source)]
    if not xl:
        raise NoPadRule(node.op, "index_add into a 0-d tensor", _syms(il, sl))
    d = norm_dim(dim, len(xl))
    _end_padded(node.op, xl[d])
    rows = il[0] if il else (1,)
    if sl[d] != rows:
        raise NoPadRule(node.op, f"source rows {sl[d]} and index {rows} differ", _syms(sl, il))
    _same_but(node.op, xl, sl, d)
    pre = _zero_padded(index, il) + ((_i(source), (d,), 0),) if is_sym(rows) else ()
    return Pad(xl, pre=pre)


@pad_rule(aten.masked_scatter.default)
def pad_masked_scatter(node, ins, cx):
    """x[mask] = source.flatten() (``masked_select``'s gradient) where only source's
    leading dim is padded (a ``masked_select``'s result): its true elements are a
    prefix of the flattened source, which the mask's count is checked against."""
    x, mask, source = node.args
    xl, ml, sl = ins[_i(x)], ins[_i(mask)], ins[_i(source)]
    if has_sym(xl) or has_sym(ml) or not sl or has_sym(sl[1:]) or len(sl[0]) != 1:
        raise NoPadRule(node.op, "masked_scatter other than from a source padded along its "
                                 "leading dim", _syms(xl, ml, sl))
    return Pad(concrete(node.shape), fn=functools.partial(_masked_scatter_fn, sl),
               tag="masked_scatter_rows")


def _masked_scatter_fn(source_layout, ctx, env, in_lays, x, mask, source):
    available = env.count(source_layout, tuple(range(len(source_layout))))
    return masked_scatter_from(x, mask, source, available)


# ---- index checks in padded graphs ----------------------------------------------------


def _zero_padded(marker, lay) -> tuple:
    """Sanitizing of an index operand's padded positions to 0, an index in bounds (they
    gather into, or write to, padded positions of the result either way)."""
    axes = tuple(a for a in range(len(lay)) if is_sym(lay[a]))
    return ((_i(marker), axes, 0),) if axes else ()


def _dim_indexed(node, ins):
    """gather, scatter's family: x indexed along ``dim``; along a padded dim (padded at
    its end: ``_end_padded``) the bound is its true size, checked here."""
    x, dim, index = node.args[:3]
    xl, il = ins[_i(x)], ins[_i(index)]
    pre = _zero_padded(index, il)
    if not xl or not is_sym(xl[norm_dim(dim, len(xl))]):
        return pre, ()
    d = norm_dim(dim, len(xl))
    name = node.op._schema.name.split("::")[-1]
    return pre, ((_i(index), xl[d], f"{name}: index out of bounds for dimension {d} "
                                     f"(a dynamic dim: checked against its true size)"),)


def _leading_indexed(node, ins):
    """x[i0, i1, ...] and its index_put: x's leading dims indexed (boolean masks are not
    checked; into a padded dim of x the rules check against the true size)."""
    x, indices = node.args[:2]
    pre = ()
    for i in indices:
        if i is not None and node.inputs[_i(i)].dtype != torch.bool:
            pre += _zero_padded(i, ins[_i(i)])
    return pre, ()


def _embedding_indexed(node, ins):
    w, indices = node.args[:2]
    return None if is_sym(ins[_i(w)][0]) else (_zero_padded(indices, ins[_i(indices)]), ())


_INDEXED = {
    aten.index.Tensor: _leading_indexed, aten.index_put.default: _leading_indexed,
    aten.gather.default: _dim_indexed, aten.scatter.src: _dim_indexed,
    aten.scatter.value: _dim_indexed, aten.scatter_add.default: _dim_indexed,
    aten.scatter_reduce.two: _dim_indexed,
    aten.embedding.default: _embedding_indexed,
    aten.index_select.default: _dim_indexed, aten.index_add.default: _dim_indexed,
    # the rule checks against the source's true count; x and the mask are concrete
    aten.masked_scatter.default: lambda node, ins: ((), ()),
    # the rule's own sanitizing makes padded targets ignore_index; its class dim is
    # concrete (a padded one has no rule)
    aten.nll_loss_forward.default: lambda node, ins: ((), ()),
    aten.nll_loss2d_forward.default: lambda node, ins: ((), ()),
    # k checked against the true size by the rules' own lowerings (a dim padded at its end)
    aten.topk.default: lambda node, ins: ((), ()),
    aten.kthvalue.default: lambda node, ins: ((), ()),
}


def index_check_pre(node, ins):
    """How ``node``'s index checks (``registry.check``) stay right in a padded graph:
    (the sanitizing its index operands need first, ((input, axes, fill), ...); the bounds
    to check against a padded dim's true size, ((input, dim, message), ...)), or None where
    they cannot (an op without such a plan: its checks are off). Nothing padded flowing
    in: its values are exact, its own checks right."""
    if not any(has_sym(lay) for lay in ins if lay is not None):
        return (), ()
    plan = _INDEXED.get(node.op)
    return None if plan is None else plan(node, ins)
