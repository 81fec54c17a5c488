"""Recurrent layers and cells, multi-head attention and transformer layers."""

from __future__ import annotations

import torch.nn as nn

from .. import shape_fns
from ..values import TupleV
from .common import NONE, T, bool_arg, is_none, like, shape_of, sym
from .registry import module_rule


def _check(a, b, what):
    if sym.equal(a, b) is False:
        raise shape_fns.ShapeError("SI152", f"{what}: got {sym.dim_pretty(a)}, expected {sym.dim_pretty(b)}",
                                   (a, b))
    shape_fns.require_equal(a, b, "SI152", what)


@module_rule(nn.RNN, nn.LSTM, nn.GRU)
def rnn_module(ctx, module, input, hx=None):
    x = T(input)
    s = shape_of(x)
    batched = len(s) == 3
    if len(s) not in (2, 3):
        raise shape_fns.ShapeError("SI152", f"{type(module).__name__} expects a 2-d or 3-d input, got "
                                   f"{len(s)}-d {sym.shape_str(s)}", s)
    if batched:
        seq, batch = (s[1], s[0]) if module.batch_first else (s[0], s[1])
    else:
        seq, batch = s[0], None
    _check(s[-1], module.input_size, f"{type(module).__name__} input_size")
    dirs = 2 if module.bidirectional else 1
    out_size = module.proj_size if getattr(module, "proj_size", 0) else module.hidden_size
    if batched:
        out = (batch, seq, dirs * out_size) if module.batch_first else (seq, batch, dirs * out_size)
    else:
        out = (seq, dirs * out_size)
    lead = (module.num_layers * dirs,)
    tail = (batch,) if batched else ()
    h_shape = lead + tail + (out_size,)
    c_shape = lead + tail + (module.hidden_size,)
    if not is_none(hx):
        states = hx.items if isinstance(hx, TupleV) else (hx,)
        expected = (h_shape, c_shape) if isinstance(module, nn.LSTM) else (h_shape,)
        for st, exp in zip(states, expected):
            for a, b in zip(shape_of(st, "hidden state"), exp):
                _check(a, b, f"{type(module).__name__} hidden state")
    output = like(x, out)
    h = like(x, h_shape)
    if isinstance(module, nn.LSTM):
        return TupleV((output, TupleV((h, like(x, c_shape)))))
    return TupleV((output, h))


@module_rule(nn.RNNCell, nn.LSTMCell, nn.GRUCell)
def rnn_cell_module(ctx, module, input, hx=None):
    x = T(input)
    s = shape_of(x)
    if len(s) not in (1, 2):
        raise shape_fns.ShapeError("SI152", f"{type(module).__name__} expects a 1-d or 2-d input, got "
                                   f"{len(s)}-d {sym.shape_str(s)}", s)
    _check(s[-1], module.input_size, f"{type(module).__name__} input_size")
    h_shape = tuple(s[:-1]) + (module.hidden_size,)
    if not is_none(hx):
        states = hx.items if isinstance(hx, TupleV) else (hx,)
        for st in states:
            for a, b in zip(shape_of(st, "hidden state"), h_shape):
                _check(a, b, f"{type(module).__name__} hidden state")
    h = like(x, h_shape)
    if isinstance(module, nn.LSTMCell):
        return TupleV((h, h))
    return h


@module_rule(nn.MultiheadAttention)
def multihead_attention_module(ctx, module, query, key, value, key_padding_mask=None, need_weights=True,
                               attn_mask=None, average_attn_weights=True, is_causal=False):
    q, k, v = shape_of(query, "query"), shape_of(key, "key"), shape_of(value, "value")
    _check(q[-1], module.embed_dim, "MultiheadAttention embed_dim")
    _check(k[-1], module.kdim, "MultiheadAttention kdim")
    _check(v[-1], module.vdim, "MultiheadAttention vdim")
    batched = len(q) == 3
    if batched:
        if module.batch_first:
            batch, lq, lk = q[0], q[1], k[1]
        else:
            lq, batch, lk = q[0], q[1], k[0]
        _check(k[0 if module.batch_first else 1], batch, "MultiheadAttention key batch")
    else:
        batch, lq, lk = None, q[0], k[0]
    out = like(T(query), q)
    if not bool_arg(need_weights, True):
        return TupleV((out, NONE))
    heads = () if bool_arg(average_attn_weights, True) else (module.num_heads,)
    lead = (batch,) if batched else ()
    return TupleV((out, like(T(query), lead + heads + (lq, lk))))


def _transformer_layer(ctx, module, src, d_model):
    s = shape_of(src)
    _check(s[-1], d_model, f"{type(module).__name__} d_model")
    return T(src)


@module_rule(nn.TransformerEncoderLayer)
def transformer_encoder_layer(ctx, module, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
    return _transformer_layer(ctx, module, src, module.self_attn.embed_dim)


@module_rule(nn.TransformerDecoderLayer)
def transformer_decoder_layer(ctx, module, tgt, memory, tgt_mask=None, memory_mask=None,
                              tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=False,
                              memory_is_causal=False):
    _transformer_layer(ctx, module, memory, module.self_attn.embed_dim)
    return _transformer_layer(ctx, module, tgt, module.self_attn.embed_dim)


@module_rule(nn.TransformerEncoder)
def transformer_encoder(ctx, module, src, mask=None, src_key_padding_mask=None, is_causal=None):
    layer = module.layers[0]
    out = _transformer_layer(ctx, module, src, layer.self_attn.embed_dim)
    return out


@module_rule(nn.TransformerDecoder)
def transformer_decoder(ctx, module, tgt, memory, *args, **kwargs):
    layer = module.layers[0]
    _transformer_layer(ctx, module, memory, layer.self_attn.embed_dim)
    return _transformer_layer(ctx, module, tgt, layer.self_attn.embed_dim)


@module_rule(nn.Transformer)
def transformer(ctx, module, src, tgt, *args, **kwargs):
    _transformer_layer(ctx, module, src, module.d_model)
    return _transformer_layer(ctx, module, tgt, module.d_model)
