"""Reflection and replication padding (the runtime's own decompositions: slices, flips
or an edge expanded, a cat; and their backward, crops included) and ``unfold``'s
backward (windows' gradients added back) against eager torch at random sizes, dtypes
and pads."""

import random

import pytest
import torch
import torch.nn.functional as F

from conftest import DEV


def _random_pads(rng, crops: bool):
    """A shape and pads for 1 to 3 padded dims: each pad below its dim's size, and down
    to minus half of it where ``crops``."""
    k = rng.choice([1, 2, 3])
    shape = [rng.randint(1, 3) for _ in range(rng.choice([1, 2]))] + \
        [rng.randint(2, 9) for _ in range(k)]
    pads = []
    for j in range(k):
        n = shape[-1 - j]
        low = -(n // 2) if crops else 0
        pads += [rng.randint(low, n - 1), rng.randint(low, n - 1)]
    return shape, pads


@pytest.mark.parametrize("mode,crops", [("reflect", False), ("reflect", True),
                                        ("replicate", False), ("replicate", True)])
def test_edge_padding_and_its_gradient_match_torch(mode, crops):
    """(Reflection by negative pads runs eagerly: torch's values.)"""
    rng = random.Random(len(mode) * 2 + crops)
    for _ in range(6):
        shape, pads = _random_pads(rng, crops)
        dt = rng.choice([torch.float32, torch.float64])
        x = torch.randn(*shape, dtype=dt, requires_grad=True)
        try:
            want = F.pad(x, pads, mode=mode)
        except RuntimeError:   # (nothing left of a dim: torch's error)
            continue
        if want.numel() == 0:   # (torch's gradient of nothing is uninitialized memory)
            continue
        w = torch.randn(want.shape, dtype=dt)
        (want * w).sum().backward()
        xl = x.detach().to(DEV).requires_grad_()
        got = F.pad(xl, pads, mode=mode)
        (got * w.to(DEV)).sum().backward()
        assert torch.equal(got.cpu(), want.detach()), (shape, pads)
        # (an edge's gradient is a sum: float32 rounds it in another order)
        torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


def test_reflection_padding_by_nothing_and_beyond_the_input_as_torch():
    """No pad at all gives a copy (never the input itself); a pad as long as the dim
    raises torch's error."""
    x = torch.randn(2, 5)
    xl = x.to(DEV)
    y = F.pad(xl, (0, 0), mode="reflect")
    assert y is not xl and torch.equal(y.cpu(), x)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(xl, (5, 0), mode="reflect").cpu()


def test_unfold_gradient_matches_torch():
    rng = random.Random(3)
    for _ in range(8):
        shape = [rng.randint(1, 9) for _ in range(rng.randint(1, 3))]
        d = rng.randrange(len(shape))
        size, step = rng.randint(1, shape[d]), rng.randint(1, 4)
        x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
        y = x.unfold(d, size, step)
        w = torch.randn(y.shape, dtype=torch.float64)
        (y * w).sum().backward()
        xl = x.detach().to(DEV).requires_grad_()
        (xl.unfold(d, size, step) * w.to(DEV)).sum().backward()
        torch.testing.assert_close(xl.grad.cpu(), x.grad)
