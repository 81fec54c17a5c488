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


def _sync_seed() -> None:
    ts = torch.initial_seed()
    if _state["seed"] is None or ts != _state["torch_seed"]:
        manual_seed(ts)


def get_state() -> torch.Tensor:
    """The stream's state as torch's generators give theirs: a uint8 CPU tensor (for
    ``torch.utils.checkpoint``, which saves it to replay dropout when it recomputes)."""
    _sync_seed()
    words = [_state["seed"], _state["counter"], _state["torch_seed"]]
    return torch.tensor(words, dtype=torch.int64).view(torch.uint8)


def set_state(state: torch.Tensor) -> None:
    if state.dtype != torch.uint8 or state.numel() != 24:
        raise ValueError(f"not a lazy_runtime RNG state ({state.numel()} {state.dtype} "
                         f"values, not 24 uint8)")
    words = state.detach().cpu().contiguous().view(torch.int64).tolist()
    _state["seed"], _state["counter"], _state["torch_seed"] = words


def next_leaf() -> ir.Node:
    _sync_seed()
    _state["counter"] += 1
    return ir.leaf(ir.RNG, (_state["seed"], _state["counter"]), (2,), torch.int64)


def position() -> tuple:
    """(seed, counter) of the stream now: the next leaf gets counter + 1."""
    _sync_seed()
    return _state["seed"], _state["counter"]


def leaves_at(offsets, count: int) -> list:
    """Leaves at ``counter + offset`` for each offset, then skip ``count`` positions: what
    ``count`` calls of ``next_leaf`` would have drawn, for a replayed graph."""
    seed, base = position()
    _state["counter"] = base + count
    return [ir.leaf(ir.RNG, (seed, base + o), (2,), torch.int64) for o in offsets]


def skip(count: int) -> None:
    """Advance the stream by ``count`` positions (what a replayed step drew)."""
    _sync_seed()
    _state["counter"] += count


def key_from(r):
    """A JAX PRNG key from the traced (seed, counter) pair of an RNG leaf."""
    import jax
    import jax.numpy as jnp
    seed = r[0]
    k = jax.random.key(0)
    k = jax.random.fold_in(k, (seed & 0xFFFFFFFF).astype(jnp.uint32))
    k = jax.random.fold_in(k, (seed >> 32).astype(jnp.uint32))
    return jax.random.fold_in(k, r[1].astype(jnp.uint32))
