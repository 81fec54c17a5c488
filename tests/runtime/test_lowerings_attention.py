"""The transformer inference fast path (``_native_multi_head_attention``,
``_transformer_encoder_layer_fwd``, ``_masked_softmax``) and ``torch.distributions``'
argument checks (``_is_all_true``/``_is_any_true``) against eager torch at random sizes,
and the modules that reach them (eval mode, ``no_grad``) with no op run eagerly."""

import pytest
import torch
import torch.nn as nn

import lazy_runtime as lr
from conftest import assert_same
from lowering_harness import BOOL, F32, F64, Case, lowering_tests, rnd

aten = torch.ops.aten
CASES: list = []


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


# ---- _masked_softmax ------------------------------------------------------------------------


def scores_and_mask(g, r, mask_type, dtype=F64, dense=0.5):
    """[scores (B, H, L, L), bool mask of the type]; ``dense`` of the positions masked
    (0.9: some rows fully masked, which torch gives as NaN)."""
    b, h, length = r.randint(1, 3), r.randint(1, 4), r.randint(1, 6)
    mshape = {0: (length, length), 1: (b, length)}.get(mask_type, (b, h, length, length))
    return [rnd(g, (b, h, length, length), dtype),
            torch.rand(mshape, generator=g) < dense]


for _mt in (0, 1, 2):
    for _dense in (0.3, 0.9):
        for _dim in (None, 3, 0):
            case(f"masked-softmax-type{_mt}-{_dense}-dim{_dim}",
                 lambda x, m, mt=_mt, d=_dim: aten._masked_softmax(x, m, d, mt),
                 lambda g, r, mt=_mt, dn=_dense: scores_and_mask(g, r, mt, dense=dn))
case("masked-softmax-3d-f32", lambda x, m: aten._masked_softmax(x, m, 2, 2),
     lambda g, r: [rnd(g, (2, 3, 5)), rnd(g, (2, 3, 5), BOOL)], rtol=1e-5)


# ---- _native_multi_head_attention -----------------------------------------------------------


def mha_inputs(g, r, mask_kind, heads, dtype=F32, distinct=False):
    """[x (, key, value), qkv_weight, qkv_bias, proj_weight, proj_bias (, mask)]."""
    b, t, d = r.randint(1, 4), r.randint(1, 7), heads * r.randint(1, 4)
    xs = [rnd(g, (b, t, d), dtype, -1, 1) for _ in range(3 if distinct else 1)]
    ws = [rnd(g, (3 * d, d), dtype, -0.5, 0.5), rnd(g, (3 * d,), dtype, -0.5, 0.5),
          rnd(g, (d, d), dtype, -0.5, 0.5), rnd(g, (d,), dtype, -0.5, 0.5)]
    if mask_kind == "none":
        return xs + ws
    if mask_kind == "padding-float":   # what nn.MultiheadAttention passes: 0 / -inf
        keep = torch.rand(b, t, generator=g) < 0.7
        keep[:, 0] = True
        mask = torch.zeros(b, t, dtype=dtype).masked_fill(~keep, float("-inf"))
    elif mask_kind == "attn-bool":
        mask = torch.rand(t, t, generator=g) < 0.4
    else:  # "merged": (B, H, T, T) with some fully masked rows (NaN, as torch)
        mask = torch.rand(b, heads, t, t, generator=g) < 0.6
    return xs + ws + [mask]


_MASK_TYPE = {"none": None, "padding-float": 1, "attn-bool": 0, "merged": 2}


def mha(mask_kind, heads, need_weights, average, distinct=False):
    def fn(*a):
        q, k, v = (a[0], a[1], a[2]) if distinct else (a[0], a[0], a[0])
        rest = a[3:] if distinct else a[1:]
        mask = rest[4] if len(rest) > 4 else None
        return aten._native_multi_head_attention(
            q, k, v, q.shape[2], heads, *rest[:4], mask, need_weights, average,
            _MASK_TYPE[mask_kind])
    return fn


for _kind in _MASK_TYPE:
    for _heads in (1, 2, 3):
        for _nw, _avg in ((True, True), (True, False), (False, True)):
            case(f"mha-{_kind}-h{_heads}-w{int(_nw)}{int(_avg)}", mha(_kind, _heads, _nw, _avg),
                 lambda g, r, k=_kind, h=_heads: mha_inputs(g, r, k, h), rtol=1e-4, atol=1e-5)
case("mha-distinct-qkv", mha("attn-bool", 2, True, True, distinct=True),
     lambda g, r: mha_inputs(g, r, "attn-bool", 2, distinct=True), rtol=1e-4, atol=1e-5)
case("mha-f64", mha("padding-float", 4, True, False),
     lambda g, r: mha_inputs(g, r, "padding-float", 4, F64), rtol=1e-9, atol=1e-12)
def empty_batch(inputs):
    """The inputs with an empty sequence of the same width."""
    return [inputs[0][:, :0]] + inputs[1:]


case("mha-empty-sequence", mha("none", 2, True, True),
     lambda g, r: empty_batch(mha_inputs(g, r, "none", 2)))


# ---- _transformer_encoder_layer_fwd --------------------------------------------------------


def encoder_inputs(g, r, mask_kind, heads=2):
    """[src, the layer's 16 weight tensors (, mask)]."""
    b, t, d, ff = r.randint(1, 4), r.randint(1, 7), heads * r.randint(1, 4), r.randint(2, 9)
    m = mha_inputs(g, r, mask_kind, heads)
    src = rnd(g, (b, t, d), F32, -1, 1)
    weights = [rnd(g, s, F32, -0.5, 0.5) for s in
               [(3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (d,), (d,), (ff, d), (ff,),
                (d, ff), (d,)]]
    if mask_kind == "none":
        return [src] + weights
    mask = m[-1]   # regenerate at this layer's sizes
    mask = {"padding-float": lambda: torch.zeros(b, t).masked_fill(
                torch.rand(b, t, generator=g) < 0.3, float("-inf")),
            "attn-bool": lambda: torch.rand(t, t, generator=g) < 0.4,
            "merged": lambda: torch.rand(b, heads, t, t, generator=g) < 0.3}[mask_kind]()
    return [src] + weights + [mask]


def encoder_layer(mask_kind, gelu, norm_first, heads=2):
    def fn(src, *w):
        mask = w[12] if len(w) > 12 else None
        return aten._transformer_encoder_layer_fwd(
            src, src.shape[2], heads, w[0], w[1], w[2], w[3], gelu, norm_first, 1e-5,
            w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], mask, _MASK_TYPE[mask_kind])
    return fn


for _kind in _MASK_TYPE:
    for _gelu in (False, True):
        for _first in (False, True):
            case(f"encoder-layer-{_kind}-gelu{int(_gelu)}-first{int(_first)}",
                 encoder_layer(_kind, _gelu, _first),
                 lambda g, r, k=_kind: encoder_inputs(g, r, k), rtol=1e-4, atol=1e-5)
case("encoder-layer-empty", encoder_layer("none", True, False),
     lambda g, r: empty_batch(encoder_inputs(g, r, "none")))


# ---- torch.distributions' checks ------------------------------------------------------------

for _p in (0.0, 0.5, 1.0):
    case(f"is-all-true-{_p}", lambda x: aten._is_all_true(x),
         lambda g, r, p=_p: [torch.rand(3, 4, generator=g) < p])
    case(f"is-any-true-{_p}", lambda x: aten._is_any_true(x),
         lambda g, r, p=_p: [torch.rand(5, generator=g) < p])


# No gradients: torch gives these kernels none (its modules call them only under no_grad).
(forward_results, backward_results, test_lowering_matches_torch, _,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


# ---- the modules ----------------------------------------------------------------------------


def _padding_mask(b, t, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    return torch.arange(t)[None, :] >= lengths[:, None]   # True: padding, left-aligned


@pytest.mark.parametrize("b,t", [(2, 5), (3, 9), (1, 4)])
def test_transformer_encoder_eval_runs_as_one_graph(b, t):
    """An encoder in eval mode with a padding mask: torch's fast path on the CPU packs it
    into a nested tensor (zeros at padded positions, then the final norm); the lazy device
    takes the dense path. Real positions agree with both of torch's paths; all positions
    with torch's dense one; nothing runs eagerly."""
    torch.manual_seed(b * 10 + t)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16)).eval()
    dense = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16),
                                  enable_nested_tensor=False).eval()
    dense.load_state_dict(encoder.state_dict())
    x, pad = torch.randn(b, t, 16), _padding_mask(b, t, t)
    with torch.no_grad():
        nested_out = encoder(x, src_key_padding_mask=pad)
        dense_out = dense(x, src_key_padding_mask=pad)
        lr.reset_metrics()
        lazy = encoder.to(lr.device())
        out = lazy(x.to(lr.device()), src_key_padding_mask=pad.to(lr.device())).cpu()
    assert lr.metrics()["fallback_ops"] == {}
    assert_same(out, dense_out, 1e-4, 1e-5, "encoder, all positions")
    assert_same(out[~pad], nested_out[~pad], 1e-4, 1e-5, "encoder, real positions")


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_eval_with_masks(need_weights, average):
    torch.manual_seed(3)
    mha = nn.MultiheadAttention(12, 2, batch_first=True).eval()
    x, pad = torch.randn(3, 6, 12), _padding_mask(3, 6, 1)
    causal = nn.Transformer.generate_square_subsequent_mask(6) == float("-inf")
    with torch.no_grad():
        want = mha(x, x, x, key_padding_mask=pad, attn_mask=causal, need_weights=need_weights,
                   average_attn_weights=average)
        lr.reset_metrics()
        m = mha.to(lr.device())
        xl = x.to(lr.device())
        got = m(xl, xl, xl, key_padding_mask=pad.to(lr.device()),
                attn_mask=causal.to(lr.device()), need_weights=need_weights,
                average_attn_weights=average)
    assert lr.metrics()["fallback_ops"] == {}
    assert_same(got[0], want[0], 1e-4, 1e-5, "attention output")
    assert (got[1] is None) == (want[1] is None)
    if want[1] is not None:
        assert_same(got[1], want[1], 1e-4, 1e-5, "attention weights")
