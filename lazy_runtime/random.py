"""Random numbers on the lazy device.

Every random op gets its own RNG leaf: (seed, counter) enters the graph as a runtime
input, so seeds and counters never recompile. Inside the graph the key is
``fold_in(key(seed), counter)`` (JAX's threefry). The stream is deterministic for a given
seed and op sequence, statistically right, and different from torch's CPU generator.

The seed follows torch: ``torch.manual_seed(s)`` (or ``lazy_runtime.manual_seed(s)``)
restarts the lazy stream from ``s``.
"""

from __future__ import annotations

import torch

from . import ir

_state = {"seed": None, "counter": 0, "torch_seed": None}


def manual_seed(seed: int) -> None:
    _state["seed"] = int(seed) & 0x7FFFFFFFFFFFFFFF
    _state["counter"] = 0
    _state["torch_seed"] = torch.initial_seed()


def next_leaf() -> ir.Node:
    ts = torch.initial_seed()
    if _state["seed"] is None or ts != _state["torch_seed"]:
        manual_seed(ts)
    _state["counter"] += 1
    return ir.leaf(ir.RNG, (_state["seed"], _state["counter"]), (2,), torch.int64)


def key_from(r):
    """A JAX PRNG key from the traced (seed, counter) pair of an RNG leaf."""
    import jax
    import jax.numpy as jnp
    seed = r[0]
    k = jax.random.key(0)
    k = jax.random.fold_in(k, (seed & 0xFFFFFFFF).astype(jnp.uint32))
    k = jax.random.fold_in(k, (seed >> 32).astype(jnp.uint32))
    return jax.random.fold_in(k, r[1].astype(jnp.uint32))
