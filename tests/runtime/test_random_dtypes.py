"""RNG policy (seeded, deterministic, statistically right, no recompiles) and dtype
policy (int64 and float64 stay exact; torch's promotion rules)."""

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same


def _dropout_mask(seed, n=20000, p=0.3):
    torch.manual_seed(seed)
    x = torch.ones(n).to(DEV)
    return F.dropout(x, p, training=True).cpu()


def test_dropout_is_deterministic_for_a_seed_and_statistically_right():
    a, b, c = _dropout_mask(1), _dropout_mask(1), _dropout_mask(2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    kept = a != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.02
    torch.testing.assert_close(a[kept], torch.full_like(a[kept], 1 / 0.7))


def test_consecutive_random_ops_differ_and_do_not_recompile():
    x = torch.ones(1000).to(DEV)
    lr.reset_metrics()
    masks = []
    for _ in range(3):
        masks.append(F.dropout(x, 0.5, training=True))
        lr.mark_step()
    assert not torch.equal(masks[0].cpu(), masks[1].cpu())
    assert lr.metrics()["compiles"] <= 1


def test_rng_state_round_trip_replays_the_same_draws():
    """``torch.lazy_jax.get_rng_state``/``set_rng_state``, as torch's own generators."""
    x = torch.ones(64, 64).to(DEV)
    state = torch.lazy_jax.get_rng_state()
    assert state.dtype == torch.uint8
    a = F.dropout(x, 0.5)
    torch.lazy_jax.set_rng_state(state)
    b = F.dropout(x, 0.5)
    c = F.dropout(x, 0.5)
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(b.cpu(), c.cpu())
    with pytest.raises(ValueError, match="RNG state"):
        torch.lazy_jax.set_rng_state(torch.zeros(5, dtype=torch.uint8))


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_the_same_dropout(reentrant):
    """``torch.utils.checkpoint`` saves the device's RNG state and restores it when it
    recomputes the forward: the gradients equal the ones without checkpointing."""
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.GELU(),
                                torch.nn.Linear(16, 8)).to(DEV)
    x = torch.randn(4, 8)
    grads = []
    for use_checkpoint in (False, True):
        torch.manual_seed(1)
        xl = x.to(DEV).requires_grad_()
        out = checkpoint(block, xl, use_reentrant=reentrant) if use_checkpoint else block(xl)
        (out * torch.linspace(-1, 1, 32).reshape(4, 8).to(DEV)).sum().backward()
        grads.append([xl.grad.cpu()] + [p.grad.cpu() for p in block.parameters()])
        block.zero_grad()
    for a, b in zip(*grads):
        assert_same(a, b, 1e-5, 1e-6)


def test_random_fills_have_the_right_moments():
    torch.manual_seed(0)
    n = torch.randn(20000, device=DEV).cpu()
    u = torch.rand(20000, device=DEV).cpu()
    assert abs(n.mean().item()) < 0.03 and abs(n.std().item() - 1) < 0.03
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.01
    i = torch.randint(3, 7, (1000,), device=DEV).cpu()
    assert set(i.tolist()) == {3, 4, 5, 6} and i.dtype == torch.int64


def test_random_like_factories_are_lowered_with_the_right_moments():
    """randn_like, rand_like and randint_like: the seeded stream, not a fallback."""
    x = torch.zeros(20000, dtype=torch.float64).to(DEV)
    lr.reset_metrics()
    n, u = torch.randn_like(x), torch.rand_like(x, dtype=torch.float32)
    i, j = torch.randint_like(x, 3, 7), torch.randint_like(x, 4)
    lr.mark_step()
    assert lr.metrics()["fallback_ops"] == {}
    n, u, i, j = (t.cpu() for t in (n, u, i, j))
    assert n.dtype == torch.float64 and u.dtype == torch.float32 and i.dtype == torch.float64
    assert abs(n.mean().item()) < 0.03 and abs(n.std().item() - 1) < 0.03
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.01
    assert set(i.tolist()) == {3, 4, 5, 6} and set(j.tolist()) == {0, 1, 2, 3}
    assert not torch.equal(n, torch.randn_like(x).cpu())   # the stream moves on
    lr.reset_metrics()
    assert torch.randn_like(x, device="cpu").shape == x.shape   # another device: torch's
    assert lr.metrics()["fallback_ops"] == {"aten.randn_like.default": 1}


def test_int64_and_float64_stay_exact():
    big = torch.tensor([2 ** 53 + 1, -(2 ** 62)], dtype=torch.int64)
    assert_same((big.to(DEV) + 2).cpu(), big + 2)
    f = torch.tensor([1 / 3, 1e-300], dtype=torch.float64)
    got = (f.to(DEV) * 3).cpu()
    assert got.dtype == torch.float64 and torch.equal(got, f * 3)


@pytest.mark.parametrize("make,expect", [
    (lambda d: torch.ones(2, dtype=torch.int32, device=d) * 2.5, torch.float32),
    (lambda d: torch.ones(2, dtype=torch.int32, device=d) + torch.ones(2, dtype=torch.int64,
                                                                         device=d), torch.int64),
    (lambda d: torch.ones(2, dtype=torch.uint8, device=d).sum(), torch.int64),
    (lambda d: torch.ones(2, dtype=torch.float16, device=d) + 1.5, torch.float16),
    (lambda d: torch.ones(2, device=d) + torch.tensor(1.0, dtype=torch.float64), torch.float32),
    (lambda d: torch.ones(2, dtype=torch.bool, device=d) + True, torch.bool),
    (lambda d: torch.arange(5, device=d) / 2, torch.float32),
])
def test_promotion_follows_torch(make, expect):
    lazy = make(DEV)
    eager = make("cpu")
    assert lazy.dtype == eager.dtype == expect
    assert_same(lazy, eager)


def test_item_tolist_and_print():
    x = torch.tensor([1.5, -2.0]).to(DEV)
    assert (x * 2).sum().item() == -1.0
    for t in (torch.tensor(0.1), torch.tensor(0.1, dtype=torch.float64),
              torch.tensor([7], dtype=torch.int64), torch.tensor(True),
              torch.tensor([[3]], dtype=torch.uint8), torch.tensor(0.1, dtype=torch.float16),
              torch.tensor(0.1, dtype=torch.bfloat16)):
        for make in (lambda u: u, lambda u: u * 1):   # data copied, and computed
            got, want = make(t.to(DEV)).item(), make(t).item()
            assert (type(got), got) == (type(want), want), t.dtype
            # torch's own dispatch (``_local_scalar_dense``) gives the same
            got = torch.Tensor.item(make(t.to(DEV)))
            assert (type(got), got) == (type(want), want), t.dtype
    # a view, a pending value, and more than one element (torch's error)
    assert x[1].item() == -2.0 and (x + 1)[0].item() == 2.5
    with pytest.raises(RuntimeError, match="2 elements cannot be converted to Scalar"):
        x.item()
    with pytest.raises(RuntimeError, match="2 elements cannot be converted to Scalar"):
        torch.tensor([1.5, -2.0]).item()
    assert (x * 2).tolist() == [3.0, -4.0]
    text = repr(x * 2)
    assert "3." in text and "lazy_jax" in text
