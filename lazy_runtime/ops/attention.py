"""The fused attention kernels of torch's inference fast path, as lowered ops.

``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` in eval mode under
``no_grad`` call ``_native_multi_head_attention`` / ``_transformer_encoder_layer_fwd`` on
any device torch counts as supported, the lazy one included. These decompositions spell
out what torch's CPU kernels compute (QKV projection, scaled scores, masked softmax, output
projection; the layer's norms and feed-forward) in recorded ops, so an encoder stays one
graph. Arguments torch's kernels refuse raise ``NoLowering``: they run eagerly, and torch
raises its own error.

``nn.TransformerEncoder`` with a padding mask would also pack its input into a nested
tensor, which has no lazy form: ``_nested_tensor_from_mask_left_aligned`` answers False on
the lazy device, so the encoder takes the path torch takes for a mask that is not
left-aligned (the layers apply the padding mask densely; the same values).
"""

from __future__ import annotations

import math

import torch

from ..errors import NoLowering
from .registry import decomposition

aten = torch.ops.aten


def _mask_for(scores, mask, mask_type, op):
    """``mask`` broadcast against ``scores`` as torch's ``_masked_softmax`` reads it:
    type 0 an (L, L) attention mask and type 1 a (B, L) padding mask of 4-d square scores,
    otherwise a mask of the scores' own shape."""
    shape = tuple(scores.shape)
    if mask.dtype != torch.bool:
        raise NoLowering(op, f"{mask.dtype} mask (torch wants bool: its error)")
    if len(shape) == 4 and mask_type in (0, 1):
        b, _, l1, l2 = shape
        want = (l1, l1) if mask_type == 0 else (b, l1)
        if l1 != l2 or tuple(mask.shape) != want:
            raise NoLowering(op, "mask shape torch refuses (its error)")
        return mask if mask_type == 0 else mask.view(b, 1, 1, l1)
    if mask_type not in (None, 0, 1, 2) or tuple(mask.shape) != shape:
        raise NoLowering(op, "mask shape or type torch refuses (its error)")
    return mask


@decomposition(aten._masked_softmax.default)
def masked_softmax(x, mask, dim=None, mask_type=None):
    """Softmax with the masked scores at -inf: a fully masked row is NaN, as in torch."""
    op = aten._masked_softmax.default
    if not x.dtype.is_floating_point or x.dim() == 0:
        raise NoLowering(op, f"{x.dtype} {x.dim()}-d input (torch's error)")
    full = _mask_for(x, mask, mask_type, op)
    return torch.softmax(x.masked_fill(full, float("-inf")), x.dim() - 1 if dim is None else dim)


def _check_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, op):
    d = embed_dim
    ok = (query.dim() == 3 and key.dim() == 3 and value.dim() == 3
          and query.shape == key.shape == value.shape and query.shape[2] == d
          and tuple(qkv_weight.shape) == (3 * d, d) and tuple(qkv_bias.shape) == (3 * d,)
          and num_head > 0 and d % num_head == 0 and query.dtype.is_floating_point)
    if not ok:
        raise NoLowering(op, "arguments torch's kernel refuses (its error)")


def _project_qkv(query, key, value, d, qkv_weight):
    """[B, T, 3D]: one product for self-attention, one per distinct input otherwise."""
    if query is key and key is value:
        return torch.matmul(query, qkv_weight.t())
    w_q, w_k, w_v = qkv_weight.split(d, 0)
    return torch.cat([torch.matmul(query, w_q.t()), torch.matmul(key, w_k.t()),
                      torch.matmul(value, w_v.t())], 2)


@decomposition(aten._native_multi_head_attention.default)
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                proj_weight, proj_bias, mask=None, need_weights=True,
                                average_attn_weights=True, mask_type=None):
    """(output [B, T, D], weights or None). A float mask counts as bool (nonzero: masked),
    as torch's kernel converts it; the weights are averaged over heads when asked."""
    op = aten._native_multi_head_attention.default
    _check_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, op)
    b, t, d = tuple(query.shape)
    if b * t * d == 0:
        return torch.empty_like(query), None
    dh = d // num_head
    qkv = _project_qkv(query, key, value, d, qkv_weight) + qkv_bias
    # [B, T, 3, H, dh] -> three [B, H, T, dh]
    q, k, v = qkv.view(b, t, 3, num_head, dh).permute(2, 0, 3, 1, 4).unbind(0)
    scores = torch.matmul(q * (1.0 / math.sqrt(dh)), k.transpose(-2, -1))
    if mask is None:
        weights = torch.softmax(scores, -1)
    else:
        weights = masked_softmax(scores, mask.to(torch.bool), 3, mask_type)
    ctx = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, d)
    out = torch.nn.functional.linear(ctx, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (weights.sum(1) / num_head if average_attn_weights else weights)


@decomposition(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias,
                                  proj_weight, proj_bias, use_gelu, norm_first, eps,
                                  norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                  ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                                  mask=None, mask_type=None):
    """One post-norm or pre-norm encoder layer: self-attention and a ReLU/GELU
    feed-forward, each with its residual, as torch's fused kernel (no dropout)."""
    if src.numel() == 0:
        return src.clone()
    f = torch.nn.functional

    def norm(x, w, bias):
        return f.layer_norm(x, (embed_dim,), w, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                    proj_weight, proj_bias, mask, False, True, mask_type)[0]
    x = x + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = f.linear(x, ffn_weight_1, ffn_bias_1)
    hidden = f.gelu(hidden) if use_gelu else f.relu(hidden)
    x = f.linear(hidden, ffn_weight_2, ffn_bias_2) + residual
    return norm(x, norm_weight_2, norm_bias_2) if not norm_first else x


@decomposition(aten._nested_tensor_from_mask_left_aligned.default)
def nested_tensor_from_mask_left_aligned(t, mask):
    """False on the lazy device (see the module docstring): no nested tensor is made."""
    return False
