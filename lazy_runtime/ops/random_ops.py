"""Random ops. Each node gets an RNG leaf (``_rng``: seed and counter, runtime inputs);
the lowering derives a JAX key from it. Values differ from torch's CPU generator; a
user-supplied ``torch.Generator`` makes the op run eagerly instead (fallback).
``multinomial`` is a decomposition into the fills below and lowered ops."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from ..errors import NoLowering
from ..random import key_from
from .common import jdt
from .registry import decomposition, lowering, rule

aten = torch.ops.aten

_IN_PLACE = [aten.normal_.default, aten.uniform_.default, aten.bernoulli_.float,
             aten.bernoulli_.Tensor, aten.random_.default, getattr(aten.random_, "from"),
             aten.random_.to, aten.exponential_.default, aten.bernoulli.default, aten.bernoulli.p]


@rule(*_IN_PLACE)
def random_rule(x, *args, generator=None, **kwargs):
    if generator is not None:
        raise NoLowering(aten.normal_.default, "explicit torch.Generator")
    return tuple(x.shape), x.dtype


def _float_of(x):
    return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32


def _parts(x, draw):
    """A complex ``x``'s fill as torch makes it: ``draw`` fills its real view (real and
    imaginary parts alike, independent)."""
    z = draw(x.shape + (2,), jnp.real(x).dtype)
    return jax.lax.complex(z[..., 0], z[..., 1])


@lowering(aten.normal_.default)
def lower_normal_(x, mean=0.0, std=1.0, *, generator=None, _rng):
    if jnp.iscomplexobj(x):   # torch: normal_(mean, std / sqrt(2)) of both parts
        return _parts(x, lambda shape, dt: jax.random.normal(key_from(_rng), shape, dt)
                      * (std / math.sqrt(2)) + mean)
    z = jax.random.normal(key_from(_rng), x.shape, _float_of(x))
    return z * std + mean


@lowering(aten.uniform_.default)
def lower_uniform_(x, lo=0.0, hi=1.0, *, generator=None, _rng):
    if jnp.iscomplexobj(x):   # torch: uniform_(lo, hi) of both parts
        return _parts(x, lambda shape, dt: jax.random.uniform(key_from(_rng), shape, dt,
                                                               lo, hi))
    return jax.random.uniform(key_from(_rng), x.shape, _float_of(x), lo, hi)


@lowering(aten.bernoulli_.float, aten.bernoulli.p)
def lower_bernoulli_p(x, p=0.5, *, generator=None, _rng):
    return jax.random.bernoulli(key_from(_rng), p, x.shape)


def _check_probabilities(p):
    """torch's check of a tensor of probabilities (NaN fails it too)."""
    from .registry import check
    check(~((p >= 0) & (p <= 1)),
          "Expected p_in >= 0 && p_in <= 1 to be true, but got false.")


@lowering(aten.bernoulli_.Tensor)
def lower_bernoulli_t(x, p, *, generator=None, _rng):
    _check_probabilities(p)
    return jax.random.bernoulli(key_from(_rng), jnp.broadcast_to(p, x.shape))


@lowering(aten.bernoulli.default)
def lower_bernoulli(x, *, generator=None, _rng):
    _check_probabilities(x)
    return jax.random.bernoulli(key_from(_rng), x)


def _int_range(x, lo, hi, rng):
    if hi is None:
        hi = 2 ** 53 if jnp.issubdtype(x.dtype, jnp.floating) else \
            (2 if x.dtype == jnp.bool_ else int(jnp.iinfo(x.dtype).max) + 1)
    dt = jnp.int64
    return jax.random.randint(key_from(rng), x.shape, lo, hi, dtype=dt) if hi <= 2 ** 62 else \
        jax.random.randint(key_from(rng), x.shape, lo, 2 ** 62, dtype=dt)


@lowering(aten.random_.default)
def lower_random_(x, *, generator=None, _rng):
    return _int_range(x, 0, None, _rng)


@lowering(getattr(aten.random_, "from"))
def lower_random_from(x, lo, hi, *, generator=None, _rng):
    return _int_range(x, lo, hi, _rng)


@lowering(aten.random_.to)
def lower_random_to(x, hi, *, generator=None, _rng):
    return _int_range(x, 0, hi, _rng)


@lowering(aten.exponential_.default)
def lower_exponential_(x, lambd=1.0, *, generator=None, _rng):
    return jax.random.exponential(key_from(_rng), x.shape, _float_of(x)) / lambd


# ---- samplers of torch.distributions (Gamma, Beta, Dirichlet, Poisson, Binomial) ----------

_SAMPLERS = (aten._standard_gamma.default, aten._sample_dirichlet.default,
             aten.binomial.default)


_FLOAT_32_64 = (torch.float32, torch.float64)


@rule(*_SAMPLERS)
def sampler_rule(x, *args, generator=None):
    if generator is not None:
        raise NoLowering(aten._standard_gamma.default, "explicit torch.Generator")
    # (torch's CPU kernels: float and double only)
    if x.dtype not in _FLOAT_32_64 or any(a.dtype != x.dtype for a in args):
        raise NoLowering(aten._standard_gamma.default, "a dtype or mixed dtypes torch's "
                                                       "CPU kernel refuses (its error)")
    return tuple(x.shape), x.dtype


@rule(aten.poisson.default)
def poisson_rule(rate, generator=None):
    if generator is not None:
        raise NoLowering(aten.poisson.default, "explicit torch.Generator")
    if not rate.dtype.is_floating_point:
        raise NoLowering(aten.poisson.default, "a non-floating rate (torch's error)")
    return tuple(rate.shape), rate.dtype


def _sample_dtype(x):
    """JAX's samplers draw in float32 or float64 (a 16-bit rate in float32, rounded)."""
    return jnp.float64 if x.dtype == jnp.float64 else jnp.float32


def _gamma(key, alpha):
    """Gamma(alpha, 1) draws as torch's kernel returns them: never below the type's
    smallest normal number (a concentration <= 0 or NaN gives it; infinity gives inf)."""
    tiny = jnp.finfo(alpha.dtype).tiny
    g = jax.random.gamma(key, alpha, alpha.shape, alpha.dtype)
    return jnp.where(g > tiny, g, jnp.where(alpha == jnp.inf, g, tiny))


@lowering(aten._standard_gamma.default)
def lower_standard_gamma(alpha, *, generator=None, _rng):
    return _gamma(key_from(_rng), alpha)


@lowering(aten._sample_dirichlet.default)
def lower_sample_dirichlet(alpha, *, generator=None, _rng):
    """torch's algorithm: Gamma draws (clamped as ``_gamma``) over their sum along the
    last dim, again never below the smallest normal number."""
    if alpha.ndim == 0:
        alpha = alpha.reshape(1)
        return lower_sample_dirichlet(alpha, _rng=_rng).reshape(())
    g = _gamma(key_from(_rng), alpha)
    return jnp.maximum(g / g.sum(-1, keepdims=True), jnp.finfo(alpha.dtype).tiny)


@lowering(aten.poisson.default)
def lower_poisson(rate, *, generator=None, _rng):
    from .registry import check
    check(~(rate >= 0), "invalid Poisson rate, expected rate to be non-negative")
    dt = _sample_dtype(rate)
    # (a rate the check refuses, NaN or infinite, drawn as 0: JAX's rejection loop would
    # not end at NaN; torch's kernel gives -2**63 at infinity)
    ok = jnp.isfinite(rate) & (rate >= 0)
    draw = jax.random.poisson(key_from(_rng), jnp.where(ok, rate, 0).astype(dt), rate.shape,
                              jnp.int64)
    return jnp.where(rate == jnp.inf, -2.0 ** 63, draw).astype(rate.dtype)


@lowering(aten.binomial.default)
def lower_binomial(count, prob, *, generator=None, _rng):
    """Draws where count > 0 and 0 < prob < 1; torch's answers elsewhere: 0 for a count
    or probability <= 0, the count for a probability >= 1, NaN for NaN or an infinite
    count."""
    # (only valid parameters reach JAX's rejection loop, which would not end at NaN)
    drawn = (count > 0) & jnp.isfinite(count) & (prob > 0) & (prob < 1)
    draw = jax.random.binomial(key_from(_rng), jnp.where(drawn, count, 1),
                               jnp.where(drawn, prob, 0.5), count.shape, count.dtype)
    out = jnp.where((count <= 0) | (prob <= 0), 0, jnp.where(prob >= 1, count, draw))
    return jnp.where(jnp.isnan(count) | jnp.isnan(prob) | jnp.isinf(count), jnp.nan, out)


@rule(aten._standard_gamma_grad.default)
def standard_gamma_grad_rule(alpha, sample):
    if not alpha.dtype.is_floating_point or sample.dtype != alpha.dtype:
        raise NoLowering(aten._standard_gamma_grad.default, "dtypes torch refuses")
    return tuple(alpha.shape), alpha.dtype


@lowering(aten._standard_gamma_grad.default)
def lower_standard_gamma_grad(alpha, sample):
    """d sample / d alpha at a fixed uniform (the reparameterized gradient of Gamma's
    ``rsample``)."""
    dt = _sample_dtype(alpha)
    return jax.lax.random_gamma_grad(alpha.astype(dt), sample.astype(dt)).astype(alpha.dtype)


# ---- multinomial ------------------------------------------------------------------------


def _valid_distribution(p) -> bool:
    """Whether torch's checks pass: every probability finite and >= 0 and each row with a
    positive one. One read of a boolean: a barrier if ``p`` is pending, as torch's own
    checks synchronize a GPU (folded on the host if ``p`` is device data)."""
    ok = torch.logical_and(torch.logical_and(torch.isfinite(p), p >= 0).all(),
                           (p > 0).any(-1).all())
    return bool(aten._local_scalar_dense.default(ok))   # (``item`` would decompose)


def _static_ok(p, num_samples, replacement) -> bool:
    return (p.dim() in (1, 2) and p.dtype.is_floating_point and num_samples > 0
            and (replacement or num_samples <= p.shape[-1]) and p.shape[-1] <= 2 ** 24
            and p.numel() > 0)


@decomposition(aten.multinomial.default)
def multinomial(p, num_samples, replacement=False, *, generator=None):
    """torch's algorithms with the lazy stream's draws. Without replacement (or for one
    sample): the ``num_samples`` largest of ``p / q``, ``q`` exponential (Gumbel top-k: no
    repeats; a zero probability only once every positive one is drawn, as in torch). With
    replacement: the first category whose cumulative probability exceeds a uniform draw
    (float64, normalized by the total, so that it reaches exactly 1: a zero probability is
    never drawn). Arguments or probabilities torch refuses run torch (its error)."""
    op = aten.multinomial.default
    if generator is not None:
        raise NoLowering(op, "explicit torch.Generator")
    if not _static_ok(p, num_samples, replacement) or not _valid_distribution(p):
        raise NoLowering(op, "arguments or probabilities torch refuses (its error)")
    if not replacement or num_samples == 1:
        keys = p / aten.exponential_.default(torch.empty_like(p))
        if num_samples == 1:
            return keys.argmax(-1, keepdim=True)
        return keys.topk(num_samples, -1).indices
    cdf = p.to(torch.float64).cumsum(-1)
    cdf = cdf / cdf[..., -1:]
    draws = torch.empty(tuple(p.shape[:-1]) + (num_samples,), dtype=torch.float64,
                        device=p.device)
    return torch.searchsorted(cdf, aten.uniform_.default(draws), right=True)


__all__ = ["jdt"]
