"""RNG policy (seeded, deterministic, statistically right, no recompiles), the random ops
built on it (multinomial, training-mode rrelu), and dtype policy (int64 and float64 stay
exact; torch's promotion rules)."""

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
    away = torch.randn_like(x, device="cpu")   # another device: torch makes it there
    assert type(away) is torch.Tensor and away.device.type == "cpu" and away.shape == x.shape
    assert lr.metrics()["syncs"] == 0


def _error_or_value(fn, *xs):
    try:
        return fn(*xs)
    except Exception as e:  # the error itself is what is compared
        return type(e), str(e)


# ---- multinomial ----------------------------------------------------------------------------

PROBS = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0], [0.0, 2.0, 0.0, 1.0, 1.0]])


def _multinomial(seed, p, n, replacement):
    torch.manual_seed(seed)
    return torch.multinomial(p.to(DEV) * 1, n, replacement)   # pending: the checks read


def test_multinomial_is_lowered_deterministic_and_draws_the_probabilities():
    lr.reset_metrics()
    draws = [_multinomial(s, PROBS, 20000, True) for s in (1, 1, 2)]
    firsts = _multinomial(3, PROBS.repeat_interleave(10000, 0), 3, False)
    singles = _multinomial(4, PROBS[1].expand(20000, 5), 1, False)
    lr.mark_step()
    assert lr.metrics()["fallback_ops"] == {}
    a, b, c = (d.cpu() for d in draws)
    assert torch.equal(a, b) and not torch.equal(a, c)
    want = PROBS / PROBS.sum(1, keepdim=True)
    for got in (a, c):
        freq = torch.stack([torch.bincount(row, minlength=5) for row in got]) / got.shape[1]
        assert (freq[want == 0] == 0).all()          # a zero probability is never drawn
        torch.testing.assert_close(freq, want, rtol=0, atol=0.015)
    # the first of each row drawn without replacement, and single draws: distributed as p
    firsts = firsts.cpu()[:, 0].view(2, 10000)
    freq = torch.stack([torch.bincount(row, minlength=5) for row in firsts]) / 10000
    torch.testing.assert_close(freq, want, rtol=0, atol=0.02)
    freq = torch.bincount(singles.cpu()[:, 0], minlength=5) / 20000
    torch.testing.assert_close(freq, want[1], rtol=0, atol=0.015)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_multinomial_without_replacement_never_repeats(dtype):
    """All positive categories come before any zero one (torch's ``p / q`` keys: a zero
    probability is drawn only once every positive one is)."""
    p = torch.rand(6, 7, generator=torch.Generator().manual_seed(0)).to(dtype)
    p[:, 2] = 0
    p[1:3, 4:] = 0
    for n in (1, 4, 7):
        got, want = _multinomial(5, p, n, False).cpu(), torch.multinomial(p, n)
        assert got.shape == want.shape and got.dtype == want.dtype == torch.int64
        for row, probs in zip(got.tolist(), p):
            assert len(set(row)) == len(row)
            positive = int((probs > 0).sum())
            assert all(probs[i] > 0 for i in row[:positive])
    one_d = _multinomial(6, p[0], 3, True).cpu()
    assert one_d.shape == (3,) and set(one_d.tolist()) <= set(range(7)) - {2}


@pytest.mark.parametrize("p,n,replacement", [
    (torch.tensor([1.0, -1.0, 0.0]), 2, True),
    (torch.tensor([1.0, float("nan")]), 2, True),
    (torch.tensor([1.0, float("inf")]), 2, True),
    (torch.tensor([[1.0, 1.0], [0.0, 0.0]]), 2, True),
    (torch.tensor([1.0, -1.0, 0.0]), 1, False),
    (torch.tensor([[0.0, 0.0], [1.0, 1.0]]), 1, False),
    (torch.tensor([1.0, 1.0]), 3, False),
    (torch.tensor([1.0, 1.0]), 0, True),
    (torch.tensor([1, 1]), 1, True),
    (torch.ones(2, 2, 2), 1, True),
])
def test_multinomial_raises_torchs_errors(p, n, replacement):
    want = _error_or_value(torch.multinomial, p, n, replacement)
    assert isinstance(want, tuple)
    for lazy in (p.to(DEV), p.to(DEV) * 1):   # device data (folded check) and pending
        assert _error_or_value(torch.multinomial, lazy, n, replacement) == want


# ---- rrelu --------------------------------------------------------------------------------


def _rrelu(seed, x, lower=0.1, upper=0.3):
    torch.manual_seed(seed)
    xl = x.to(DEV).requires_grad_()
    out = F.rrelu(xl, lower, upper, training=True)
    out.sum().backward()
    return out, xl.grad


def test_training_rrelu_draws_slopes_in_range_and_its_gradient_is_the_noise():
    x = torch.randn(20000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    lr.reset_metrics()
    (a, ga), (b, _), (c, _) = _rrelu(1, x), _rrelu(1, x), _rrelu(2, x)
    lr.mark_step()
    assert lr.metrics()["fallback_ops"] == {}
    a, b, c, ga = (t.detach().cpu() for t in (a, b, c, ga))
    assert torch.equal(a, b) and not torch.equal(a, c)
    neg = x <= 0
    slopes = a[neg] / x[neg]
    assert torch.equal(a[~neg], x[~neg]) and torch.equal(ga[~neg], torch.ones_like(ga[~neg]))
    torch.testing.assert_close(ga[neg], slopes)              # the saved noise
    assert 0.1 <= slopes.min().item() and slopes.max().item() <= 0.3
    # uniform on [0.1, 0.3]: mean 0.2, standard deviation 0.2 / sqrt(12)
    assert abs(slopes.mean().item() - 0.2) < 0.003
    assert abs(slopes.std().item() - 0.2 / 12 ** 0.5) < 0.003


def test_in_place_training_rrelu_is_lowered():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    y = x.to(DEV)
    lr.reset_metrics()
    F.rrelu_(y, 0.2, 0.25, training=True)
    got = y.cpu()
    assert lr.metrics()["fallback_ops"] == {}
    neg = x <= 0
    assert torch.equal(got[~neg], x[~neg])
    slopes = got[neg] / x[neg]
    assert 0.2 <= slopes.min().item() and slopes.max().item() <= 0.25


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_rrelu_dtypes_and_evaluation_mode_match_torch(dtype):
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).to(dtype)
    out, grad = _rrelu(3, x, 0.125, 1 / 3)
    out, grad = out.detach().cpu(), grad.cpu()
    want = F.rrelu(x, training=True)
    assert out.dtype == grad.dtype == want.dtype and out.shape == want.shape
    neg = x <= 0
    assert torch.equal(out[~neg], x[~neg])
    slopes = grad[neg].float()
    assert 0.12 <= slopes.min().item() and slopes.max().item() <= 0.34
    torch.testing.assert_close(out[neg], (x[neg].float() * slopes).to(dtype), rtol=1e-2,
                               atol=1e-2)
    module = torch.nn.RReLU(0.1, 0.4).eval()
    assert torch.equal(module.to(DEV)(x.to(DEV)).cpu(), module(x))


def test_float16_training_rrelu_raises_torchs_error():
    """torch's CPU kernel has no float16 training rrelu: its error (through the fallback);
    evaluation mode is lowered."""
    x = torch.randn(5).half()
    want = _error_or_value(F.rrelu, x, 0.1, 0.3, True)
    assert isinstance(want, tuple)
    assert _error_or_value(F.rrelu, x.to(DEV), 0.1, 0.3, True) == want
    lr.reset_metrics()
    assert torch.equal(F.rrelu(x.to(DEV), 0.1, 0.3).cpu(), F.rrelu(x, 0.1, 0.3))
    assert lr.metrics()["fallback_ops"] == {}


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


SAMPLERS = {   # name: (draw(params on a device), params, mean, variance), per element
    "gamma": (lambda a: torch._standard_gamma(a), 2.5, 2.5, 2.5),
    "gamma small": (lambda a: torch._standard_gamma(a), 0.3, 0.3, 0.3),
    "poisson": (lambda r: torch.poisson(r), 4.0, 4.0, 4.0),
    "binomial": (lambda c: torch.binomial(c, torch.full_like(c, 0.3)), 10.0, 3.0, 2.1),
    "dirichlet": (lambda a: torch._sample_dirichlet(a.reshape(-1, 2)).reshape(-1), 2.0,
                  0.5, 0.05),   # (two equal concentrations: Beta(2, 2) per pair)
}


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_distribution_samplers_are_lowered_seeded_and_statistically_right(name, dtype):
    """The samplers behind torch.distributions (Gamma, Beta, Dirichlet, Poisson,
    Binomial) draw from the lazy stream: deterministic for a seed, the right mean and
    variance over 20000 draws, no eager fallback."""
    draw, param, mean, var = SAMPLERS[name]
    lr.reset_metrics()

    def sample(seed):
        torch.manual_seed(seed)
        return draw(torch.full((20000,), param, dtype=dtype).to(DEV)).cpu()
    a, b, c = sample(3), sample(3), sample(4)
    assert a.dtype == dtype and torch.equal(a, b) and not torch.equal(a, c)
    n = a.numel()
    assert abs(a.mean().item() - mean) < 5 * (var / n) ** 0.5, a.mean()
    assert abs(a.var().item() - var) < 0.06 * var, a.var()
    assert lr.metrics()["fallback_ops"] == {}


def test_sampler_edge_values_and_errors_follow_torch():
    """Where torch's kernels answer without drawing, the lazy ones answer the same:
    Gamma never below the smallest normal number (a concentration <= 0 or NaN gives it),
    a binomial 0 for a count or probability <= 0, the count for a probability >= 1, NaN
    for a NaN probability; a negative Poisson rate raises torch's message; 16-bit gamma
    torch's error."""
    conc = torch.tensor([0., -1., float("nan"), float("inf")])
    assert torch.equal(torch._standard_gamma(conc.to(DEV)).cpu(), torch._standard_gamma(conc))
    # (not a NaN count: torch's own kernel never returns there)
    count = torch.tensor([10., 10., 10., -3., 0., 4., 5.])
    prob = torch.tensor([1.5, 1.0, -0.1, 0.5, 0.5, 0.0, float("nan")])
    got = torch.binomial(count.to(DEV), prob.to(DEV)).cpu()
    torch.testing.assert_close(got, torch.binomial(count, prob), equal_nan=True)
    with pytest.raises(RuntimeError, match="invalid Poisson rate"):
        torch.poisson(torch.tensor([1.0, -1.0]).to(DEV)).cpu()
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        torch._standard_gamma(torch.ones(2, dtype=torch.half).to(DEV)).cpu()


def test_gamma_rsample_gradient_is_lowered_and_torchs():
    """``Gamma.rsample``'s gradient (``_standard_gamma_grad``: d sample / d concentration
    at a fixed uniform) against torch's at torch's own samples, and a reparameterized
    loss's backward on the lazy device with no fallback."""
    torch.manual_seed(0)
    conc = torch.tensor([0.2, 0.9, 2.5, 7.0, 40.0], dtype=torch.float64).repeat(40)
    sample = torch._standard_gamma(conc)
    want = torch._standard_gamma_grad(conc, sample)
    got = torch._standard_gamma_grad(conc.to(DEV), sample.to(DEV)).cpu()
    # (each an approximation: torch's kernel a series, a saddle-point expansion and a
    # rational fit by region; JAX's its own. They agree within 1e-4, the float32 models'
    # tolerance, in float64 too)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    lr.reset_metrics()
    c = torch.full((4000,), 3.0).to(DEV).requires_grad_()
    loss = torch.distributions.Gamma(c, torch.ones(4000).to(DEV)).rsample().sum()
    loss.backward()
    # E[d sample / d concentration] = 1 for Gamma(c, 1)
    assert abs(c.grad.cpu().mean().item() - 1.0) < 0.05
    assert lr.metrics()["fallback_ops"] == {}


def test_bernoulli_refuses_probabilities_outside_zero_one_as_torch():
    """A probability outside [0, 1] (or NaN), as a tensor or a number, raises torch's
    message (the lazy draw answered 0 or 1 before); valid ones draw."""
    for bad in (1.5, -0.1, float("nan")):
        p = torch.tensor([0.2, bad, 0.3])
        for fn in (lambda q: torch.bernoulli(q), lambda q: torch.zeros_like(q).bernoulli_(q)):
            with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
                fn(p.to(DEV)).cpu()
        with pytest.raises(RuntimeError, match=r"expects p to be in \[0, 1\]"):
            torch.bernoulli(torch.zeros(3).to(DEV), bad)
        with pytest.raises(RuntimeError, match=r"expects p to be in \[0, 1\]"):
            torch.zeros(3).to(DEV).bernoulli_(bad)
    assert set(torch.bernoulli(torch.tensor([0.0, 1.0, 0.5]).to(DEV)).cpu()[:2].tolist()) \
        == {0.0, 1.0}
