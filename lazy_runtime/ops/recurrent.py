"""Recurrent layers as one op each: an LSTM layer lowers to a ``lax.scan``.

``aten::lstm`` is CompositeImplicitAutograd: torch would unroll the time loop into a cell
per step before the ops reach ``__torch_dispatch__`` (hundreds of recorded ops, and an
unrolled loop for XLA). On the lazy device it is taken over at its autograd key
(``AutogradPrivateUse1``, which only lazy tensors carry): each layer and direction becomes
one ``lazy_runtime::lstm_layer`` op under an ``autograd.Function`` whose backward is one
``lazy_runtime::lstm_layer_backward`` op. Dropout between layers, bidirectional layers and
``batch_first`` are composed from ordinary ops around them. A packed sequence's LSTM
(``aten::lstm.data``) runs the same ops with a per-row mask of the valid steps; packing and
unpacking are one gather each (see "packed sequences" below). Variants the layer op does
not cover (projections, unbatched or mixed-device arguments) keep torch's composite.

The backward's lowering reuses the forward's JAX VJP, residuals included, when both are
lowered in one trace (a training step's graph): the forward's lowering leaves its pullback
in ``TRACE_SCRATCH`` under its output. Otherwise it recomputes the forward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax import lax

from .common import HIGHEST
from .nn import _f32
from .registry import TRACE_SCRATCH, lowering, rule

_DEF = torch.library.Library("lazy_runtime", "DEF")
# ``valid`` (bool [T, B], or None for all): where it is False a step keeps the carry
# (a packed sequence's rows past their length)
_DEF.define("lstm_layer(Tensor x, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor? b_ih, "
            "Tensor? b_hh, Tensor? valid, bool reverse, bool keep_vjp) -> "
            "(Tensor, Tensor, Tensor)")
_DEF.define("lstm_layer_backward(Tensor? grad_out, Tensor? grad_h, Tensor? grad_c, Tensor x, "
            "Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh, "
            "Tensor? valid, Tensor out, bool reverse, bool[7] output_mask) -> "
            "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")

lstm_layer = torch.ops.lazy_runtime.lstm_layer.default
lstm_layer_backward = torch.ops.lazy_runtime.lstm_layer_backward.default


# ---- types -------------------------------------------------------------------------------

def _layer_types(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid=None):
    """``[(shape, dtype)]`` of (out, h, c); torch's message when the arguments don't fit."""
    T, B, n_in = tuple(x.shape)
    H = h0.shape[-1]
    want = {"h0": (h0, (B, H)), "c0": (c0, (B, H)), "w_ih": (w_ih, (4 * H, n_in)),
            "w_hh": (w_hh, (4 * H, H)), "b_ih": (b_ih, (4 * H,)), "b_hh": (b_hh, (4 * H,))}
    for name, (t, shape) in want.items():
        if t is not None and tuple(t.shape) != shape:
            raise RuntimeError(f"lstm_layer: {name} has shape {list(t.shape)}, expected "
                               f"{list(shape)}")
        if t is not None and t.dtype != x.dtype:
            raise RuntimeError(f"lstm_layer: {name} is {t.dtype}, the input {x.dtype}")
    if valid is not None and (tuple(valid.shape) != (T, B) or valid.dtype != torch.bool):
        raise RuntimeError(f"lstm_layer: valid is {valid.dtype}{list(valid.shape)}, expected "
                           f"torch.bool{[T, B]}")
    return [((T, B, H), x.dtype), ((B, H), x.dtype), ((B, H), x.dtype)]


@rule(lstm_layer, multi=True)
def lstm_layer_rule(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp):
    return _layer_types(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid)


def _backward_types(x, h0, c0, w_ih, w_hh, b_ih, b_hh, output_mask):
    ins = (x, h0, c0, w_ih, w_hh, b_ih, b_hh)
    return [(tuple(t.shape), t.dtype) if m and t is not None else None
            for t, m in zip(ins, output_mask)]


@rule(lstm_layer_backward, multi=True)
def lstm_layer_backward_rule(grad_out, grad_h, grad_c, x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid,
                             out, reverse, output_mask):
    return _backward_types(x, h0, c0, w_ih, w_hh, b_ih, b_hh, output_mask)


# ---- lowering ----------------------------------------------------------------------------

def _scan(reverse, valid, x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM layer over ``x`` [T, B, I]: (out [T, B, H], h, c). The input projection is
    one matmul for all steps; the loop carries only ``h @ w_hh.T``. ``valid`` (bool [T]
    for a time dim padded at its end, [T, B, 1] per row, or None): where it is False a
    step keeps the carry, and its output is the carried ``h``."""
    dtype = x.dtype
    x, h0, c0, w_ih, w_hh = (_f32(t) for t in (x, h0, c0, w_ih, w_hh))
    gx = jnp.matmul(x, w_ih.T, precision=HIGHEST)
    if b_ih is not None:
        gx = gx + (_f32(b_ih) + _f32(b_hh))
    w_hh_t = w_hh.T

    def cell(carry, step):
        h, c = carry
        g, ok = step
        g = g + jnp.matmul(h, w_hh_t, precision=HIGHEST)
        i, f, gg, o = jnp.split(g, 4, axis=-1)
        c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
        h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
        if ok is not None:
            h_new, c_new = jnp.where(ok, h_new, h), jnp.where(ok, c_new, c)
        return (h_new, c_new), h_new

    (h, c), out = lax.scan(cell, (h0, c0), (gx, valid), reverse=reverse)
    return out.astype(dtype), h.astype(dtype), c.astype(dtype)


def _primals(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    return (x, h0, c0, w_ih, w_hh) + (() if b_ih is None else (b_ih, b_hh))


def _mask(time_valid, valid):
    """The steps' mask: the op's per-row ``valid`` (padding included, as False) if it
    has one, else the padded time dim's (None: every step)."""
    return time_valid if valid is None else valid[..., None]


def layer_forward(time_valid, x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp):
    """The lowering, exact (``time_valid`` None) or over a padded time dim."""
    prims = _primals(x, h0, c0, w_ih, w_hh, b_ih, b_hh)
    mask = _mask(time_valid, valid)
    if not keep_vjp:
        return _scan(reverse, mask, *prims)
    outs, pull = jax.vjp(lambda *p: _scan(reverse, mask, *p), *prims)
    # the backward finds the pullback by the output it is given (held here, so the id
    # stays this tracer's until the trace ends and the executor clears the scratch)
    TRACE_SCRATCH[("lstm_layer", id(outs[0]))] = (outs[0], pull)
    return outs


def layer_backward(time_valid, grad_out, grad_h, grad_c, x, h0, c0, w_ih, w_hh, b_ih, b_hh,
                   valid, out, reverse, output_mask):
    kept = TRACE_SCRATCH.get(("lstm_layer", id(out)))
    if kept is not None and kept[0] is out:
        pull = kept[1]
    else:  # the forward ran in another graph: recompute it
        prims = _primals(x, h0, c0, w_ih, w_hh, b_ih, b_hh)
        mask = _mask(time_valid, valid)
        pull = jax.vjp(lambda *p: _scan(reverse, mask, *p), *prims)[1]
    shapes = (out.shape, out.shape[1:], out.shape[1:])
    cot = tuple(jnp.zeros(s, out.dtype) if g is None else g
                for g, s in zip((grad_out, grad_h, grad_c), shapes))
    grads = tuple(pull(cot)) + (None, None) * (b_ih is None)
    return tuple(g if m else None for g, m in zip(grads, output_mask))


@lowering(lstm_layer)
def lower_lstm_layer(*args):
    return layer_forward(None, *args)


@lowering(lstm_layer_backward)
def lower_lstm_layer_backward(*args):
    return layer_backward(None, *args)


# ---- eager kernels (fallback) and shapes for meta tensors --------------------------------

def _reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse):
    """The layer in torch ops, step by step (what a fallback runs): (out, h, c) and the
    steps as (t, h before, c before, gates after their activations, the cell's c, the
    rows' mask [B, 1] or None)."""
    h, c, outs, steps = h0, c0, [None] * x.shape[0], []
    for t in (range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])):
        g = x[t] @ w_ih.T + h @ w_hh.T
        if b_ih is not None:
            g = g + b_ih + b_hh
        i, f, gg, o = g.chunk(4, -1)
        i, f, gg, o = i.sigmoid(), f.sigmoid(), gg.tanh(), o.sigmoid()
        c_new = f * c + i * gg
        m = None if valid is None else valid[t].unsqueeze(-1)
        steps.append((t, h, c, (i, f, gg, o), c_new, m))
        h_new = o * c_new.tanh()
        if m is None:
            h, c = h_new, c_new
        else:
            h, c = torch.where(m, h_new, h), torch.where(m, c_new, c)
        outs[t] = h
    out = torch.stack(outs) if outs else x.new_empty((0,) + tuple(h0.shape))
    return out, h, c, steps


def _cpu_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp):
    return _reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse)[:3]


def _cpu_backward(grad_out, grad_h, grad_c, x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, out,
                  reverse, output_mask):
    """Backpropagation through time by hand (a kernel runs below autograd: no tape). A
    masked row's step passes ``dh`` and ``dc`` through untouched."""
    steps = _reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse)[3]
    dh = torch.zeros_like(h0) if grad_h is None else grad_h.clone()
    dc = torch.zeros_like(c0) if grad_c is None else grad_c.clone()
    dx, dw_ih, dw_hh = torch.zeros_like(x), torch.zeros_like(w_ih), torch.zeros_like(w_hh)
    db = w_ih.new_zeros(w_ih.shape[0])
    for t, h, c, (i, f, gg, o), c_new, m in reversed(steps):
        if grad_out is not None:
            dh = dh + grad_out[t]
        keep_h = keep_c = 0
        if m is not None:
            keep_h, keep_c = dh * ~m, dc * ~m
            dh, dc = dh * m, dc * m
        tc = c_new.tanh()
        dc = dc + dh * o * (1 - tc * tc)
        d = torch.cat([dc * gg * i * (1 - i), dc * c * f * (1 - f), dc * i * (1 - gg * gg),
                       dh * tc * o * (1 - o)], -1)
        dx[t] = d @ w_ih
        dw_ih += d.T @ x[t]
        dw_hh += d.T @ h
        db += d.sum(0)
        dh, dc = d @ w_hh + keep_h, dc * f + keep_c
    grads = (dx, dh, dc, dw_ih, dw_hh) + ((None, None) if b_ih is None else (db, db.clone()))
    return tuple(g if m else None for g, m in zip(grads, output_mask))


def _meta_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp):
    return tuple(x.new_empty(s) for s, _ in _layer_types(x, h0, c0, w_ih, w_hh, b_ih, b_hh,
                                                          valid))


def _meta_backward(grad_out, grad_h, grad_c, x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, out,
                   reverse, output_mask):
    return tuple(None if t is None else x.new_empty(t[0]) for t in
                 _backward_types(x, h0, c0, w_ih, w_hh, b_ih, b_hh, output_mask))


_DEF.impl("lstm_layer", _cpu_forward, "CPU")
_DEF.impl("lstm_layer_backward", _cpu_backward, "CPU")
_DEF.impl("lstm_layer", _meta_forward, "Meta")
_DEF.impl("lstm_layer_backward", _meta_backward, "Meta")


# ---- autograd and aten::lstm on the lazy device ------------------------------------------

class _LSTMLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp):
        out, h, c = lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp)
        ctx.reverse = reverse
        ctx.set_materialize_grads(False)  # an unused output's grad stays None: no zeros op
        ctx.save_for_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, out)
        return out, h, c

    @staticmethod
    def backward(ctx, grad_out, grad_h, grad_c):
        mask = [bool(m) for m in ctx.needs_input_grad[:7]]
        grads = (None,) * 7
        if any(mask) and not (grad_out is None and grad_h is None and grad_c is None):
            # errors of the op are deferred to the next barrier by the dispatch (an
            # exception must not cross autograd's engine on this device)
            grads = lstm_layer_backward(grad_out, grad_h, grad_c, *ctx.saved_tensors,
                                        ctx.reverse, mask)
        return tuple(grads) + (None, None, None)


def _fits_layer_op(rank, input, hx, params, per_layer, num_layers, n_dir) -> bool:
    from ..tensor import LazyTensor
    if input.dim() != rank or len(hx) != 2 or len(params) != per_layer * num_layers * n_dir:
        return False  # unbatched, projections (w_hr), or a malformed call: torch's composite
    tensors = [input, *hx, *params]
    if not all(isinstance(t, LazyTensor) and t.dtype == input.dtype for t in tensors):
        return False
    H = hx[0].shape[-1]
    return hx[1].shape[-1] == H and params[1].shape == (4 * H, H)


def _layers(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, valid=None):
    """The stacked layers over time-major ``x``: (out [T, B, n_dir * H], h_n, c_n)."""
    per_layer = 4 if has_biases else 2
    n_dir = 2 if bidirectional else 1
    h0, c0 = hx
    grad = torch.is_grad_enabled()
    hs, cs = [], []
    for layer in range(num_layers):
        if layer and dropout and train:
            x = torch.dropout(x, dropout, True)
        outs = []
        for d in range(n_dir):
            k = layer * n_dir + d
            w = params[k * per_layer:(k + 1) * per_layer]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            args = (x, h0[k], c0[k], w[0], w[1], b_ih, b_hh)
            keep = grad and any(t is not None and t.requires_grad for t in args)
            out, h, c = _LSTMLayer.apply(*args, valid, bool(d), keep)
            outs.append(out)
            hs.append(h)
            cs.append(c)
        x = outs[0] if n_dir == 1 else torch.cat(outs, -1)
    return x, torch.stack(hs), torch.stack(cs)


def lstm_input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
               batch_first):
    """``aten::lstm.input`` for lazy tensors: one ``lstm_layer`` per layer and direction."""
    n_dir = 2 if bidirectional else 1
    if not _fits_layer_op(3, input, hx, params, 4 if has_biases else 2, num_layers, n_dir):
        return torch.ops.aten.lstm.input.decompose(input, hx, params, has_biases, num_layers,
                                                   dropout, train, bidirectional, batch_first)
    x = input.transpose(0, 1) if batch_first else input
    out, h, c = _layers(x, hx, params, has_biases, num_layers, dropout, train, bidirectional)
    return out.transpose(0, 1) if batch_first else out, h, c


# ---- packed sequences ---------------------------------------------------------------------
#
# A PackedSequence's ``batch_sizes`` must stay a CPU tensor (torch checks), so the packing
# is known on the host: packing, unpacking and the packed LSTM are gathers with host-made
# indices, one op each, where torch's composites loop over the time steps.

def _on_host(t) -> bool:
    from ..tensor import LazyTensor
    return isinstance(t, torch.Tensor) and not isinstance(t, LazyTensor) and \
        t.device.type == "cpu"


def _packed_places(batch_sizes, batch_first: bool, time_dim: int):
    """(the valid mask [T, B] of the steps the packing keeps, the packed rows' places in a
    padded tensor flattened over its first two dims [T, B] or, ``batch_first``, [B, T],
    whose time dim is ``time_dim`` long)."""
    B = int(batch_sizes[0]) if len(batch_sizes) else 0
    valid = torch.arange(B)[None, :] < batch_sizes[:, None]
    t, b = valid.nonzero(as_tuple=True)   # row-major: time-major, as the packing is
    return valid, (b * time_dim + t) if batch_first else (t * B + b)


def _gather_rows(data, places, n_places: int, fill):
    """Rows of ``data`` [N, *] put at ``places`` of a [n_places, *] result, ``fill``
    elsewhere: one gather from ``data`` with a filler row appended."""
    src = torch.full((n_places,), len(places), dtype=torch.int64)
    src[places] = torch.arange(len(places))
    filler = data.new_full((1,) + tuple(data.shape[1:]), fill)
    return torch.cat([data, filler]).index_select(0, src.to(data.device))


def pack_padded(input, lengths, batch_first):
    """``aten::_pack_padded_sequence``: (data [sum(lengths), *], batch_sizes on the host).
    Torch's own kernel, on a host tensor with the input's leading dims and no data,
    checks the lengths and computes ``batch_sizes``."""
    if not _on_host(lengths):
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got "
                           f"{lengths.dim()}D {lengths.device} {lengths.dtype} tensor")
    probe = torch.empty(tuple(input.shape[:2]) + (1 if input.numel() else 0,)) \
        if input.dim() >= 2 else torch.empty(input.shape)
    batch_sizes = torch.ops.aten._pack_padded_sequence.default(probe, lengths, batch_first)[1]
    time_dim = input.shape[1 if batch_first else 0]
    if len(batch_sizes) > time_dim:
        raise RuntimeError(f"pack_padded_sequence: a length is {len(batch_sizes)}, but the "
                           f"input has {time_dim} time steps")
    _, places = _packed_places(batch_sizes, batch_first, time_dim)
    flat = input.reshape((-1,) + tuple(input.shape[2:]))
    return flat.index_select(0, places.to(input.device)), batch_sizes


def _pad_packed(data, batch_sizes, batch_first, padding_value, total_length):
    """``aten::_pad_packed_sequence``: (padded, lengths on the host)."""
    if not _on_host(batch_sizes) or _on_host(data):
        return torch.ops.aten._pad_packed_sequence.default.decompose(
            data, batch_sizes, batch_first, padding_value, total_length)
    lengths = torch.ops.aten._pad_packed_sequence.default(
        torch.empty((data.shape[0], 0)), batch_sizes, batch_first, padding_value,
        total_length)[1]
    T, B = len(batch_sizes), (int(batch_sizes[0]) if len(batch_sizes) else 0)
    T_out = max(T, total_length)
    _, places = _packed_places(batch_sizes, batch_first, T_out)
    out = _gather_rows(data, places, T_out * B, padding_value)
    lead = (B, T_out) if batch_first else (T_out, B)
    return out.reshape(lead + tuple(data.shape[1:])), lengths


def lstm_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                 bidirectional):
    """``aten::lstm.data``: the packed rows unpacked to [T, B, I] with a per-row mask of the
    valid steps, the stacked layers, the output packed again. A row's ``h_n`` and
    ``c_n`` are its last valid step's (masked steps keep the carry), as torch's are."""
    n_dir = 2 if bidirectional else 1
    if not (_on_host(batch_sizes) and batch_sizes.dim() == 1 and len(batch_sizes)
            and _fits_layer_op(2, data, hx, params, 4 if has_biases else 2, num_layers,
                               n_dir)):
        return torch.ops.aten.lstm.data.decompose(data, batch_sizes, hx, params, has_biases,
                                                  num_layers, dropout, train, bidirectional)
    valid, places = _packed_places(batch_sizes, False, len(batch_sizes))
    T, B = valid.shape
    x = _gather_rows(data, places, T * B, 0).reshape(T, B, data.shape[1])
    out, h, c = _layers(x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                        valid.to(data.device))
    out = out.reshape(T * B, out.shape[-1]).index_select(0, places.to(data.device))
    return out, h, c


_ATEN = torch.library.Library("aten", "IMPL")
_ATEN.impl("lstm.input", lstm_input, "AutogradPrivateUse1")
_ATEN.impl("lstm.data", lstm_packed, "AutogradPrivateUse1")
_ATEN.impl("_pack_padded_sequence", pack_padded, "AutogradPrivateUse1")
_ATEN.impl("_pad_packed_sequence", _pad_packed, "AutogradPrivateUse1")
