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


@lowering(aten.bernoulli_.Tensor)
def lower_bernoulli_t(x, p, *, generator=None, _rng):
    return jax.random.bernoulli(key_from(_rng), jnp.broadcast_to(p, x.shape))


@lowering(aten.bernoulli.default)
def lower_bernoulli(x, *, generator=None, _rng):
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
