"""``torch.equal`` and ``torch.allclose`` on lazy tensors: computed on the device with one
bool read (they ran eagerly, copying both tensors to the host). Each against eager torch
at random sizes and dtypes, with no fallback."""

import random

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV
from lowering_harness import assert_torchs_error

NAN, INF = float("nan"), float("inf")


def _pairs(seed):
    """(a, b) pairs: equal, one element apart, NaN/inf/-0.0 and mixed dtypes."""
    r = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    s = tuple(r.randint(1, 5) for _ in range(r.randint(0, 3)))
    a = torch.randn(s, generator=g)
    b = a.clone()
    c = a.clone().reshape(-1)
    c[r.randrange(c.numel())] += 1e-3
    special = torch.tensor([NAN, INF, -INF, -0.0, 1.0])
    ints = torch.randint(-5, 5, s, generator=g)
    return [(a, b), (a, c.reshape(s)), (special, special.clone()),
            (torch.tensor([-0.0]), torch.tensor([0.0])), (ints, ints.double()),
            (ints, ints.clone()), (ints > 0, (ints > 0).long()),
            (a.to(torch.complex64), b.to(torch.complex64))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_against_torch(seed):
    lr.reset_metrics()
    for a, b in _pairs(seed):
        assert torch.equal(a.to(DEV), b.to(DEV)) == torch.equal(a, b), (a, b)
    assert lr.metrics()["fallback_ops"] == {}


def test_equal_of_other_sizes_reads_nothing():
    a, b = torch.ones(2, 3).to(DEV), torch.ones(3, 2).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    assert not torch.equal(a, b) and not torch.equal(a, b.reshape(6))
    assert torch.equal(torch.ones(()).to(DEV), torch.ones(1).to(DEV)) is False
    assert lr.metrics()["graphs_executed"] == 0 and lr.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("seed", [0, 1])
def test_allclose_against_torch(seed):
    lr.reset_metrics()
    for a, b in _pairs(seed):
        if a.dtype != b.dtype:
            continue
        for kw in ({}, {"equal_nan": True}, {"rtol": 1e-2, "atol": 1e-3}):
            assert torch.allclose(a.to(DEV), b.to(DEV), **kw) == torch.allclose(a, b, **kw)
    x = torch.randn(4, 3)
    assert torch.allclose(x.to(DEV), x[:1].to(DEV)) == torch.allclose(x, x[:1])   # broadcast
    assert lr.metrics()["fallback_ops"] == {}


def test_allclose_of_two_dtypes_raises_torchs_error():
    assert_torchs_error(torch.allclose, [torch.ones(2), torch.ones(2, dtype=torch.int64)])


def test_equal_with_a_cpu_tensor_still_answers():
    a = torch.arange(4.0)
    assert torch.equal(a.to(DEV), a) == torch.equal(a, a)
