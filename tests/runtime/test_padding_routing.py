"""Padding rules for routing tokens (a mixture of experts): a sort along a merged dim padded
inside (a batch's (B, T, k) expert picks flattened), indexing a merged dim padded inside
at the sort's positions, the inverse permutation written from padded positions, views of
the sorted order back to (B, T), histograms over a given range, and torch's grouped
product over rows sorted by expert. Values and gradients against eager torch at several
sizes of one bucket (the padding poisoned: NaN, or a large integer), one compile."""

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, assert_grads_same
from test_padding_rules import _check_padded, _poisoned_padding, _sizes  # noqa: F401

K, E, C = 2, 4, 8


def _tokens(T):
    """Hidden states (2, T, C) and each token's K expert picks (2, T, K), seeded by T."""
    g = torch.Generator().manual_seed(T)
    return [torch.randn(2, T, C, generator=g), torch.randint(0, E, (2, T, K), generator=g)]


def _routed(h, picks):
    """Each token's rows gathered in the order of its experts, scaled, put back in the
    tokens' order and summed over its picks (transformers' grouped experts, by hand)."""
    flat = h.reshape(-1, C)
    experts, perm = torch.sort(picks.reshape(-1), stable=True)
    rows = flat[perm // K] * (experts[:, None] + 1.0)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.size(0), device=h.device)
    back = rows[inverse].view(h.shape[0] * h.shape[1], K, C).sum(1).reshape(h.shape)
    return {"routed": back + h, "experts": experts, "perm": perm}


def test_tokens_sorted_by_expert_and_put_back():
    """The sort of the flattened picks compacts them (true elements first: its positions
    are torch's, into the unpadded order); indexing the flattened hidden states there,
    the inverse permutation (an index_put from padded positions: their writes dropped),
    and the view of the sorted order back to (B, T, C) spread the rows back."""
    m = _check_padded(_routed, _tokens, [(1, "T"), (1, "T")], _sizes(9, 16, 3, 5),
                      rtol=1e-5, atol=1e-5)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _counted(h, picks):
    experts, _ = torch.sort(picks.reshape(-1))
    # (torch's CPU kernel counts floats only; off the CPU transformers counts integers)
    ints = experts.int() if experts.device.type != "cpu" else experts.float()
    weights = h[..., 0].detach().reshape(-1, 1).expand(-1, K).reshape(-1)
    hist, _ = torch.histogram(picks.reshape(-1).float(), 3, range=(0.0, 3.0),
                              weight=weights)
    return {"per expert": torch.histc(ints, E, 0, E - 1).float() * 1.0,
            "weighted": hist * 1.0}


def test_histograms_count_only_true_elements():
    """histc of sorted integer picks (padding set past the range) and a weighted
    histogram (the padding's weight 0) over a padded (B, T, K)."""
    m = _check_padded(_counted, _tokens, [(1, "T"), (1, "T")], _sizes(9, 16, 3, 6),
                      rtol=1e-5, atol=1e-5)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _grouped(h, picks, w):
    """Rows sorted by expert through each expert's weight (``torch._grouped_mm``, offsets
    from the counts), put back in the tokens' order."""
    experts, perm = torch.sort(picks.reshape(-1), stable=True)
    counts = torch.histc(experts.int() if h.device.type != "cpu" else experts.float(),
                         E, 0, E - 1)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    out = torch._grouped_mm(h.reshape(-1, C)[perm // K], w, offs=offs)
    n = perm.size(0)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n, device=h.device)
    # (h reached otherwise too, as a residual does: the gradient's zeros of the rows
    # indexed are then laid out as the flattened (B, T), not kept at their size)
    return {"out": out[inverse].view(-1, K, 4).sum(1).reshape(*h.shape[:2], 4),
            "h": h * 1.0}


def test_grouped_product_over_rows_sorted_by_expert():
    """The padding rows, sorted after every true one, lie past the last offset (the counts
    are the true ones): no expert multiplies them, and the weight's gradient (the product
    with the ragged dim contracted) sums true rows only."""
    w = torch.randn(E, C, 4, generator=torch.Generator().manual_seed(1)).requires_grad_()
    m = _check_padded(_grouped, _tokens, [(1, "T"), (1, "T")], _sizes(9, 16, 3, 7),
                      params=(w,), rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_a_mixture_of_experts_layer_at_varying_lengths_compiles_once():
    """transformers' Mixtral block (grouped experts), unmodified, with nothing marked: its
    sort, histogram, grouped products, inverse permutation and the constants the step
    makes of merged sizes (an arange over B*T*k picks: laid out at its use, not learnt as
    a size of its own) run padded once automatic dynamic has seen two lengths."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    config = transformers.MixtralConfig(hidden_size=32, intermediate_size=40,
                                        num_local_experts=E, num_experts_per_tok=K)
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    block = MixtralSparseMoeBlock(config)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.1)
    lazy = block.__class__(config)
    lazy.load_state_dict(block.state_dict())
    lazy = lazy.to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    for T in (11, 13, 9, 12):
        x = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(T))
        x.requires_grad_()
        block(x).sin().sum().backward()
        xl = x.detach().to(DEV).requires_grad_()
        lazy(xl).sin().sum().backward()
        lr.mark_step()
        torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
        assert_grads_same(block, lazy, 1e-4, 1e-5, f"at {T}")
    m = lr.metrics()
    # (the first length compiles as it is; from the second on, one padded executable)
    assert m["exact_compiles"] == {} and m["compiles"] == 2, m["recompile_reasons"]
