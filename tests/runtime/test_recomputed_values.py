"""A value a choosing reduction reads (amax, max, min) is one value in the executable.
XLA may compute a cheap producer again inside each consumer's fusion, rounded its own
way; amax's gradient compares the amax with its input for equality, so a copy one bit
off lost its row's gradient (a layer norm's output: 8 of 44 rows on this CPU, as
``jax.jit(jax.grad(...))`` of the same max does). Eager torch is the oracle."""

import copy

import pytest
import torch
import torch.nn as nn

import lazy_runtime as lr
from conftest import DEV, assert_same


def _normed(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 3), nn.LayerNorm(3))


@pytest.mark.parametrize("reduce", ["amax", "max", "min dim values", "inf norm"])
@pytest.mark.parametrize("shape", [(4, 11), (3, 7), (5, 13)])
def test_the_gradient_of_a_max_of_a_layer_norm_reaches_every_row(reduce, shape):
    pick = {"amax": lambda y: y.amax(-1).sum(),
            "max": lambda y: y.max() + y.sum() * 0,
            "min dim values": lambda y: (y == y.min(-1, keepdim=True).values).float().mul(
                y).sum(),
            "inf norm": lambda y: torch.linalg.vector_norm(y, float("inf"), dim=-1).sum()}[reduce]
    model = _normed(sum(shape))
    lazy = copy.deepcopy(model).to(DEV)
    x = torch.randn(*shape, 6, generator=torch.Generator().manual_seed(len(reduce)))
    pick(model(x)).backward()
    pick(lazy(x.to(DEV))).backward()
    lr.mark_step()
    for (name, p), q in zip(model.named_parameters(), lazy.parameters()):
        assert_same(q.grad, p.grad, 1e-4, 1e-4, what=name)


def test_a_mask_of_the_maxima_counts_every_row():
    """User code: one element per row equals its row's max (no ties), in one graph."""
    model = _normed(0)
    lazy = copy.deepcopy(model).to(DEV)
    x = torch.randn(4, 11, 6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = lazy(x.to(DEV))
        counts = (y == y.amax(-1, keepdim=True)).float().sum((0, 1))
        want = model(x)
        assert_same(counts, (want == want.amax(-1, keepdim=True)).float().sum((0, 1)))
    assert counts.sum().item() == 44
