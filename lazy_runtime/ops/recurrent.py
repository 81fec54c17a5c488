"""Recurrent layers as one op each: an LSTM, GRU or RNN layer lowers to a ``lax.scan``.

``aten::lstm``, ``aten::gru``, ``aten::rnn_tanh`` and ``aten::rnn_relu`` are
CompositeImplicitAutograd: torch would unroll the time loop into a cell per step before
the ops reach ``__torch_dispatch__`` (hundreds of recorded ops, and an unrolled loop for
XLA). On the lazy device they are taken over at their autograd key
(``AutogradPrivateUse1``, which only lazy tensors carry): each layer and direction becomes
one ``lazy_runtime::lstm_layer`` op (``rnn_layer`` for the one-state layers, its ``mode``
"gru", "rnn_tanh" or "rnn_relu") under an ``autograd.Function`` whose backward is one
``*_layer_backward`` op. Dropout between layers, bidirectional layers and ``batch_first``
are composed from ordinary ops around them. A packed sequence's layer (``aten::lstm.data``
& co.) runs the same ops with a per-row mask of the valid steps; packing and unpacking are
one gather each (see "packed sequences" below). Variants the layer op does not cover
(projections, unbatched or mixed-device arguments) keep torch's composite.

The backward's lowering reuses the forward's JAX VJP, residuals included, when both are
lowered in one trace (a training step's graph): the forward's lowering leaves its pullback
in ``TRACE_SCRATCH`` under its output. Otherwise it recomputes the forward.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import torch
from jax import lax

from .common import HIGHEST
from .nn import _f32, gru_step, lstm_step
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
# the layers with one state: ``mode`` is "gru", "rnn_tanh" or "rnn_relu"
_DEF.define("rnn_layer(Tensor x, Tensor h0, Tensor w_ih, Tensor w_hh, Tensor? b_ih, "
            "Tensor? b_hh, Tensor? valid, str mode, bool reverse, bool keep_vjp) -> "
            "(Tensor, Tensor)")
_DEF.define("rnn_layer_backward(Tensor? grad_out, Tensor? grad_h, Tensor x, Tensor h0, "
            "Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh, Tensor? valid, Tensor out, "
            "str mode, bool reverse, bool[6] output_mask) -> "
            "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")

lstm_layer = torch.ops.lazy_runtime.lstm_layer.default
lstm_layer_backward = torch.ops.lazy_runtime.lstm_layer_backward.default
rnn_layer = torch.ops.lazy_runtime.rnn_layer.default
rnn_layer_backward = torch.ops.lazy_runtime.rnn_layer_backward.default

# gate blocks stacked in a layer's weights (torch's order: LSTM i, f, g, o; GRU r, z, n)
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


class Layer(NamedTuple):
    """A layer op's arguments, whatever its mode (tensors, JAX values or padding
    layouts alike): ``states`` is (h0, c0) for an LSTM and (h0,) otherwise, ``weights``
    (w_ih, w_hh, b_ih, b_hh)."""
    mode: str
    x: Any
    states: tuple
    weights: tuple
    valid: Any
    reverse: bool

    def inputs(self) -> tuple:
        """What the backward returns gradients for, in its order."""
        return (self.x,) + self.states + self.weights


def forward_args(op, args) -> tuple[Layer, bool]:
    """(the layer, keep_vjp) of a forward op's arguments."""
    if op is lstm_layer:
        x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, reverse, keep_vjp = args
        return Layer("lstm", x, (h0, c0), (w_ih, w_hh, b_ih, b_hh), valid, reverse), keep_vjp
    x, h0, w_ih, w_hh, b_ih, b_hh, valid, mode, reverse, keep_vjp = args
    return Layer(mode, x, (h0,), (w_ih, w_hh, b_ih, b_hh), valid, reverse), keep_vjp


def backward_args(op, args) -> tuple[Layer, tuple, Any, tuple]:
    """(the layer, the cotangents of (out, *states), the forward's output, output_mask)
    of a backward op's arguments."""
    if op is lstm_layer_backward:
        g_out, g_h, g_c, x, h0, c0, w_ih, w_hh, b_ih, b_hh, valid, out, reverse, mask = args
        layer = Layer("lstm", x, (h0, c0), (w_ih, w_hh, b_ih, b_hh), valid, reverse)
        return layer, (g_out, g_h, g_c), out, mask
    g_out, g_h, x, h0, w_ih, w_hh, b_ih, b_hh, valid, out, mode, reverse, mask = args
    return Layer(mode, x, (h0,), (w_ih, w_hh, b_ih, b_hh), valid, reverse), (g_out, g_h), out, mask


def _call_forward(layer: Layer, keep_vjp: bool):
    if layer.mode == "lstm":
        return lstm_layer(layer.x, *layer.states, *layer.weights, layer.valid, layer.reverse,
                          keep_vjp)
    return rnn_layer(layer.x, *layer.states, *layer.weights, layer.valid, layer.mode,
                     layer.reverse, keep_vjp)


def _call_backward(layer: Layer, cotangents, out, mask):
    if layer.mode == "lstm":
        return lstm_layer_backward(*cotangents, layer.x, *layer.states, *layer.weights,
                                   layer.valid, out, layer.reverse, mask)
    return rnn_layer_backward(*cotangents, layer.x, *layer.states, *layer.weights,
                              layer.valid, out, layer.mode, layer.reverse, mask)


# ---- types -------------------------------------------------------------------------------

def _layer_types(layer: Layer):
    """``[(shape, dtype)]`` of (out, *states); torch's message when the arguments don't
    fit."""
    what = "lstm_layer" if layer.mode == "lstm" else "rnn_layer"
    if layer.mode not in GATES:
        raise RuntimeError(f"rnn_layer: unknown mode {layer.mode!r}")
    x = layer.x
    T, B, n_in = tuple(x.shape)
    H = layer.states[0].shape[-1]
    G = GATES[layer.mode] * H
    want = dict(zip(("h0", "c0"), ((s, (B, H)) for s in layer.states)))
    want.update(zip(("w_ih", "w_hh", "b_ih", "b_hh"),
                    zip(layer.weights, ((G, n_in), (G, H), (G,), (G,)))))
    for name, (t, shape) in want.items():
        if t is not None and tuple(t.shape) != shape:
            raise RuntimeError(f"{what}: {name} has shape {list(t.shape)}, expected "
                               f"{list(shape)}")
        if t is not None and t.dtype != x.dtype:
            raise RuntimeError(f"{what}: {name} is {t.dtype}, the input {x.dtype}")
    valid = layer.valid
    if valid is not None and (tuple(valid.shape) != (T, B) or valid.dtype != torch.bool):
        raise RuntimeError(f"{what}: valid is {valid.dtype}{list(valid.shape)}, expected "
                           f"torch.bool{[T, B]}")
    return [((T, B, H), x.dtype)] + [((B, H), x.dtype)] * len(layer.states)


def _backward_types(layer: Layer, output_mask):
    return [(tuple(t.shape), t.dtype) if m and t is not None else None
            for t, m in zip(layer.inputs(), output_mask)]


def _forward_rule(op, *args):
    return _layer_types(forward_args(op, args)[0])


def _backward_rule(op, *args):
    layer, _, _, mask = backward_args(op, args)
    return _backward_types(layer, mask)


# ---- lowering ----------------------------------------------------------------------------

_CELLS = {"lstm": lambda gx, gh, carry: lstm_step(gx + gh, carry[1])[:2],
          "gru": lambda gx, gh, carry: gru_step(gx, gh, carry[0])[:1],
          "rnn_tanh": lambda gx, gh, carry: (jnp.tanh(gx + gh),),
          "rnn_relu": lambda gx, gh, carry: (jax.nn.relu(gx + gh),)}


def _scan(mode, reverse, valid, x, states, w_ih, w_hh, b_ih=None, b_hh=None):
    """One layer over ``x`` [T, B, I]: (out [T, B, H], *final states). The input
    projection is one matmul for all steps; the loop carries only ``h @ w_hh.T`` (with
    ``b_hh`` where a GRU's reset gate scales it). ``valid`` (bool [T] for a time dim
    padded at its end, [T, B, 1] per row, or None): where it is False a step keeps the
    carry, and its output is the carried ``h``."""
    dtype = x.dtype
    x, w_ih, w_hh = (_f32(t) for t in (x, w_ih, w_hh))
    states = tuple(_f32(s) for s in states)
    gx = jnp.matmul(x, w_ih.T, precision=HIGHEST)
    b_h = None
    if b_ih is not None:
        if mode == "gru":
            gx, b_h = gx + _f32(b_ih), _f32(b_hh)
        else:
            gx = gx + (_f32(b_ih) + _f32(b_hh))
    w_hh_t = w_hh.T
    cell = _CELLS[mode]

    def step(carry, inp):
        g, ok = inp
        gh = jnp.matmul(carry[0], w_hh_t, precision=HIGHEST)
        new = cell(g, gh if b_h is None else gh + b_h, carry)
        if ok is not None:
            new = tuple(jnp.where(ok, n, c) for n, c in zip(new, carry))
        return new, new[0]

    final, out = lax.scan(step, states, (gx, valid), reverse=reverse)
    return (out.astype(dtype),) + tuple(s.astype(dtype) for s in final)


def _primals(layer: Layer) -> tuple:
    return (layer.x,) + layer.states + layer.weights[:2] + \
        (() if layer.weights[2] is None else layer.weights[2:])


def _scan_fn(layer: Layer, time_valid):
    """The layer as a function of its primals. The steps' mask: the op's per-row
    ``valid`` (padding included, as False) if it has one, else the padded time dim's
    (None: every step)."""
    mask = time_valid if layer.valid is None else layer.valid[..., None]
    n = len(layer.states)
    return lambda x, *rest: _scan(layer.mode, layer.reverse, mask, x, rest[:n], *rest[n:])


def layer_forward(op, time_valid, *args):
    """A forward op's lowering, exact (``time_valid`` None) or over a padded time dim."""
    layer, keep_vjp = forward_args(op, args)
    fn = _scan_fn(layer, time_valid)
    if not keep_vjp:
        return fn(*_primals(layer))
    outs, pull = jax.vjp(fn, *_primals(layer))
    # the backward finds the pullback by the output it is given (held here, so the id
    # stays this tracer's until the trace ends and the executor clears the scratch)
    TRACE_SCRATCH[("rnn_layer", id(outs[0]))] = (outs[0], pull)
    return outs


def layer_backward(op, time_valid, *args):
    """A backward op's lowering: the kept pullback of its forward, or a recomputed one."""
    layer, cotangents, out, output_mask = backward_args(op, args)
    kept = TRACE_SCRATCH.get(("rnn_layer", id(out)))
    if kept is not None and kept[0] is out:
        pull = kept[1]
    else:  # the forward ran in another graph: recompute it
        pull = jax.vjp(_scan_fn(layer, time_valid), *_primals(layer))[1]
    shapes = (out.shape,) + (out.shape[1:],) * len(layer.states)
    cot = tuple(jnp.zeros(s, out.dtype) if g is None else g
                for g, s in zip(cotangents, shapes))
    grads = tuple(pull(cot)) + (None, None) * (layer.weights[2] is None)
    return tuple(g if m else None for g, m in zip(grads, output_mask))


# ---- eager kernels (fallback) ------------------------------------------------------------

def _torch_cell(mode, gx, gh, states):
    """One step in torch ops: (the new states, what its backward reads)."""
    if mode == "lstm":
        c = states[1]
        i, f, g, o = (gx + gh).chunk(4, -1)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        c_new = f * c + i * g
        return (o * c_new.tanh(), c_new), (i, f, g, o, c_new)
    if mode == "gru":
        x_r, x_z, x_n = gx.chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
        n = (x_n + r * h_n).tanh()
        return (n + z * (states[0] - n),), (r, z, n, h_n)
    h = (gx + gh).tanh() if mode == "rnn_tanh" else (gx + gh).relu()
    return (h,), (h,)


def _torch_cell_backward(mode, d_new, states, saved):
    """One step's backward by hand, from the new states' gradients: (the gradient of
    the input projection ``x @ w_ih.T + b_ih``, of the hidden one ``h @ w_hh.T + b_hh``,
    the states' gradients by other paths than the hidden projection)."""
    if mode == "lstm":
        dh, dc = d_new
        i, f, g, o, c_new = saved
        tc = c_new.tanh()
        dc = dc + dh * o * (1 - tc * tc)
        d = torch.cat([dc * g * i * (1 - i), dc * states[1] * f * (1 - f),
                       dc * i * (1 - g * g), dh * tc * o * (1 - o)], -1)
        return d, d, (0, dc * f)
    (dh,) = d_new
    if mode == "gru":
        r, z, n, h_n = saved
        d_n = dh * (1 - z) * (1 - n * n)
        d_r = d_n * h_n * r * (1 - r)
        d_z = dh * (states[0] - n) * z * (1 - z)
        return torch.cat([d_r, d_z, d_n], -1), torch.cat([d_r, d_z, d_n * r], -1), (dh * z,)
    (h,) = saved
    d = dh * (1 - h * h) if mode == "rnn_tanh" else dh * (h > 0)
    return d, d, (0,)


def _reference(layer: Layer):
    """The layer in torch ops, step by step (what a fallback runs): (out, final states,
    the steps as (t, the states before, what their backward reads, the rows' mask
    [B, 1] or None))."""
    x, valid = layer.x, layer.valid
    w_ih, w_hh, b_ih, b_hh = layer.weights
    states, outs, steps = layer.states, [None] * x.shape[0], []
    for t in (range(x.shape[0] - 1, -1, -1) if layer.reverse else range(x.shape[0])):
        gx, gh = x[t] @ w_ih.T, states[0] @ w_hh.T
        if b_ih is not None:
            gx, gh = gx + b_ih, gh + b_hh
        new, saved = _torch_cell(layer.mode, gx, gh, states)
        m = None if valid is None else valid[t].unsqueeze(-1)
        steps.append((t, states, saved, m))
        states = new if m is None else tuple(torch.where(m, a, b) for a, b in zip(new, states))
        outs[t] = states[0]
    out = torch.stack(outs) if outs else x.new_empty((0,) + tuple(layer.states[0].shape))
    return out, states, steps


def _cpu_forward(op, *args):
    out, states, _ = _reference(forward_args(op, args)[0])
    return (out,) + tuple(states)


def _cpu_backward(op, *args):
    """Backpropagation through time by hand (a kernel runs below autograd: no tape). A
    masked row's step passes the states' gradients through untouched."""
    layer, cotangents, _, output_mask = backward_args(op, args)
    x = layer.x
    w_ih, w_hh, b_ih, _ = layer.weights
    steps = _reference(layer)[2]
    g_out = cotangents[0]
    ds = [torch.zeros_like(s) if g is None else g.clone()
          for s, g in zip(layer.states, cotangents[1:])]
    dx, dw_ih, dw_hh = torch.zeros_like(x), torch.zeros_like(w_ih), torch.zeros_like(w_hh)
    db_ih, db_hh = w_ih.new_zeros(w_ih.shape[0]), w_ih.new_zeros(w_ih.shape[0])
    for t, before, saved, m in reversed(steps):
        if g_out is not None:
            ds[0] = ds[0] + g_out[t]
        kept = [0] * len(ds)
        if m is not None:
            kept, ds = [d * ~m for d in ds], [d * m for d in ds]
        d_x, d_h, direct = _torch_cell_backward(layer.mode, ds, before, saved)
        dx[t] = d_x @ w_ih
        dw_ih += d_x.T @ x[t]
        dw_hh += d_h.T @ before[0]
        db_ih += d_x.sum(0)
        db_hh += d_h.sum(0)
        ds = [d + k for d, k in zip(direct, kept)]
        ds[0] = ds[0] + d_h @ w_hh
    grads = (dx, *ds, dw_ih, dw_hh) + ((None, None) if b_ih is None else (db_ih, db_hh))
    return tuple(g if m else None for g, m in zip(grads, output_mask))


def _meta_forward(op, *args):
    layer = forward_args(op, args)[0]
    return tuple(layer.x.new_empty(s) for s, _ in _layer_types(layer))


def _meta_backward(op, *args):
    layer, _, _, mask = backward_args(op, args)
    return tuple(None if t is None else layer.x.new_empty(t[0])
                 for t in _backward_types(layer, mask))


for _name, _fwd, _bwd in (("lstm_layer", lstm_layer, lstm_layer_backward),
                          ("rnn_layer", rnn_layer, rnn_layer_backward)):
    rule(_fwd, multi=True, pure=True)(functools.partial(_forward_rule, _fwd))
    rule(_bwd, multi=True, pure=True)(functools.partial(_backward_rule, _bwd))
    lowering(_fwd)(functools.partial(layer_forward, _fwd, None))
    lowering(_bwd)(functools.partial(layer_backward, _bwd, None))
    for _key, _kernels in (("CPU", (_cpu_forward, _cpu_backward)),
                           ("Meta", (_meta_forward, _meta_backward))):
        _DEF.impl(_name, functools.partial(_kernels[0], _fwd), _key)
        _DEF.impl(_name + "_backward", functools.partial(_kernels[1], _bwd), _key)


# ---- autograd and aten::lstm/gru/rnn_* on the lazy device --------------------------------

class _LayerFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mode, valid, reverse, keep_vjp, x, w_ih, w_hh, b_ih, b_hh, *states):
        layer = Layer(mode, x, states, (w_ih, w_hh, b_ih, b_hh), valid, reverse)
        outs = _call_forward(layer, keep_vjp)
        ctx.mode, ctx.reverse = mode, reverse
        ctx.set_materialize_grads(False)  # an unused output's grad stays None: no zeros op
        ctx.save_for_backward(x, w_ih, w_hh, b_ih, b_hh, valid, outs[0], *states)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *cotangents):
        x, w_ih, w_hh, b_ih, b_hh, valid, out, *states = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [bool(m) for m in (need[4], *need[9:], *need[5:9])]   # the op's order
        grads = (None,) * len(mask)
        if any(mask) and any(g is not None for g in cotangents):
            # errors of the op are deferred to the next barrier by the dispatch (an
            # exception must not cross autograd's engine on this device)
            layer = Layer(ctx.mode, x, tuple(states), (w_ih, w_hh, b_ih, b_hh), valid,
                          ctx.reverse)
            grads = _call_backward(layer, cotangents, out, mask)
        n = len(states)
        return (None,) * 4 + (grads[0],) + tuple(grads[1 + n:]) + tuple(grads[1:1 + n])


def _fits_layer_op(mode, rank, input, states, params, has_biases, num_layers,
                   bidirectional) -> bool:
    from ..tensor import LazyTensor
    per_layer = 4 if has_biases else 2
    n_dir = 2 if bidirectional else 1
    if input.dim() != rank or len(states) != (2 if mode == "lstm" else 1) or \
            len(params) != per_layer * num_layers * n_dir:
        return False  # unbatched, projections (w_hr), or a malformed call: torch's composite
    tensors = [input, *states, *params]
    if not all(isinstance(t, LazyTensor) and t.dtype == input.dtype for t in tensors):
        return False
    H = states[0].shape[-1]
    return all(s.shape[-1] == H for s in states) and \
        params[1].shape == (GATES[mode] * H, H)


def _layers(mode, x, states, params, has_biases, num_layers, dropout, train, bidirectional,
            valid=None):
    """The stacked layers over time-major ``x``: (out [T, B, n_dir * H], *final states
    [num_layers * n_dir, B, H])."""
    per_layer = 4 if has_biases else 2
    n_dir = 2 if bidirectional else 1
    grad = torch.is_grad_enabled()
    finals = [[] for _ in states]
    for layer in range(num_layers):
        if layer and dropout and train:
            x = torch.dropout(x, dropout, True)
        outs = []
        for d in range(n_dir):
            k = layer * n_dir + d
            w = params[k * per_layer:(k + 1) * per_layer]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            own = tuple(s[k] for s in states)
            args = (x, w[0], w[1], b_ih, b_hh) + own
            keep = grad and any(t is not None and t.requires_grad for t in args)
            out, *final = _LayerFunction.apply(mode, valid, bool(d), keep, *args)
            outs.append(out)
            for acc, f in zip(finals, final):
                acc.append(f)
        x = outs[0] if n_dir == 1 else torch.cat(outs, -1)
    return (x,) + tuple(torch.stack(f) for f in finals)


def _states(mode, hx) -> tuple:
    return tuple(hx) if mode == "lstm" else (hx,)


def _layers_on_input(mode, aten_op):
    """``aten::<mode>.input`` for lazy tensors: one layer op per layer and direction."""
    def run(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
            batch_first):
        states = _states(mode, hx)
        if not _fits_layer_op(mode, 3, input, states, params, has_biases, num_layers,
                              bidirectional):
            return aten_op.decompose(input, hx, params, has_biases, num_layers, dropout, train,
                                     bidirectional, batch_first)
        x = input.transpose(0, 1) if batch_first else input
        out, *finals = _layers(mode, x, states, params, has_biases, num_layers, dropout, train,
                               bidirectional)
        return (out.transpose(0, 1) if batch_first else out, *finals)
    run.__name__ = run.__qualname__ = f"{mode}_input"
    return run


lstm_input = _layers_on_input("lstm", torch.ops.aten.lstm.input)


# ---- packed sequences ---------------------------------------------------------------------
#
# A PackedSequence's ``batch_sizes`` must stay a CPU tensor (torch checks), so the packing
# is known on the host: packing, unpacking and the packed LSTM are gathers with host-made
# indices, one op each, where torch's composites loop over the time steps.

def _on_host(t) -> bool:
    from ..tensor import LazyTensor
    return isinstance(t, torch.Tensor) and not isinstance(t, LazyTensor) and \
        t.device.type == "cpu"


def _packed_steps(batch_sizes):
    """(the valid mask [T, B] of the steps the packing keeps, each packed row's step t and
    batch row b [N], in the packing's order: time-major)."""
    B = int(batch_sizes[0]) if len(batch_sizes) else 0
    valid = torch.arange(B)[None, :] < batch_sizes[:, None]
    t, b = valid.nonzero(as_tuple=True)
    return valid, t, b


def _packed_rows(shape, t, b):
    """Each place of a padded [T, B] grid: its packed row, row 0 where no row lands."""
    rows = torch.zeros(shape, dtype=torch.int64)
    rows[t, b] = torch.arange(len(t))
    return rows


# Packing and unpacking index the padded grid by (step, row) and the packed rows by a
# [T, B] grid of rows, never a flattened [T * B] or [B * T] dim: the host-made indices
# then have the sizes T, B and N = sum(lengths), which automatic dynamic pads (one compile
# per bucket of them, not one per batch of lengths), and positions in a flattened grid
# would differ between its true and padded layouts.

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
    _, t, b = _packed_steps(batch_sizes)
    at = (b, t) if batch_first else (t, b)
    return input[tuple(i.to(input.device) for i in at)], batch_sizes


def _pad_packed(data, batch_sizes, batch_first, padding_value, total_length):
    """``aten::_pad_packed_sequence``: (padded, lengths on the host)."""
    if not _on_host(batch_sizes) or _on_host(data):
        return torch.ops.aten._pad_packed_sequence.default.decompose(
            data, batch_sizes, batch_first, padding_value, total_length)
    lengths = torch.ops.aten._pad_packed_sequence.default(
        torch.empty((data.shape[0], 0)), batch_sizes, batch_first, padding_value,
        total_length)[1]
    valid, t, b = _packed_steps(batch_sizes)
    T, B = valid.shape
    T_out = max(T, total_length)
    rows = _packed_rows((T_out, B), t, b)
    empty = torch.ones((T_out, B), dtype=torch.bool)   # (the places no packed row fills)
    empty[:T] = ~valid
    if batch_first:
        rows, empty = rows.T.contiguous(), empty.T.contiguous()
    empty = empty.reshape(empty.shape + (1,) * (data.dim() - 1))
    out = data[rows.to(data.device)]
    return out.masked_fill(empty.to(data.device), padding_value), lengths


def _layers_on_packed(mode, aten_op):
    """``aten::<mode>.data``: the packed rows unpacked to [T, B, I] with a per-row mask of
    the valid steps, the stacked layers, the output packed again. A row's final states
    are its last valid step's (masked steps keep the carry), as torch's are."""
    def run(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
            bidirectional):
        states = _states(mode, hx)
        if not (_on_host(batch_sizes) and batch_sizes.dim() == 1 and len(batch_sizes)
                and _fits_layer_op(mode, 2, data, states, params, has_biases, num_layers,
                                   bidirectional)):
            return aten_op.decompose(data, batch_sizes, hx, params, has_biases, num_layers,
                                     dropout, train, bidirectional)
        valid, t, b = _packed_steps(batch_sizes)
        dev = data.device
        x = data[_packed_rows(valid.shape, t, b).to(dev)]
        out, *finals = _layers(mode, x, states, params, has_biases, num_layers, dropout,
                               train, bidirectional, valid.to(dev))
        return (out[t.to(dev), b.to(dev)], *finals)
    run.__name__ = run.__qualname__ = f"{mode}_packed"
    return run


lstm_packed = _layers_on_packed("lstm", torch.ops.aten.lstm.data)

# aten's recurrent layers and packing, taken over at AutogradPrivateUse1 (and reached in
# the dispatch under inference_mode, with autograd's keys off)
LAYER_OPS = {getattr(torch.ops.aten, mode).input: _layers_on_input(mode, getattr(
    torch.ops.aten, mode).input) for mode in ("gru", "rnn_tanh", "rnn_relu")}
LAYER_OPS.update({getattr(torch.ops.aten, mode).data: _layers_on_packed(mode, getattr(
    torch.ops.aten, mode).data) for mode in ("gru", "rnn_tanh", "rnn_relu")})
LAYER_OPS.update({torch.ops.aten.lstm.input: lstm_input, torch.ops.aten.lstm.data: lstm_packed,
                  torch.ops.aten._pack_padded_sequence.default: pack_padded})


_ATEN = torch.library.Library("aten", "IMPL")
for _op, _fn in LAYER_OPS.items():
    _ATEN.impl(_op, _fn, "AutogradPrivateUse1")
_ATEN.impl("_pad_packed_sequence", _pad_packed, "AutogradPrivateUse1")
