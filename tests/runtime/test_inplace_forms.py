"""In-place ops recorded through their functional forms: the bitwise operators (``&=``,
``|=``, ``^=``, ``<<=``, ``>>=``: ``__iand__`` & co., whose functional forms are the
``bitwise_*`` ops) and in-place ops whose functional overload has another name
(``pow_(tensor)``, ``floor_divide_``, ``ldexp_``). All ran eagerly; ``pow_(number)`` was
recorded as ``pow.Scalar`` (a number raised to tensor powers), right only because its
lowering did not look at the argument types."""

import random

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV
from lazy_runtime import dispatch

aten = torch.ops.aten


def _bitwise_updates(x, y, n):
    x &= y
    x |= n > 0
    x ^= y
    return x


def _shift_updates(i, j):
    i <<= 2
    i >>= j
    i &= 12
    i |= 1
    i ^= 3
    return i


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inplace_bitwise_operators(seed):
    g = torch.Generator().manual_seed(seed)
    s = (random.Random(seed).randint(1, 6), 3)
    x, y = torch.rand(s, generator=g) > 0.5, torch.rand(s, generator=g) > 0.5
    n = torch.randn(s, generator=g)
    i = torch.randint(-50, 50, s, generator=g, dtype=torch.int32)
    j = torch.randint(0, 3, s, generator=g, dtype=torch.int32)
    lr.reset_metrics()
    lazy_bits = _bitwise_updates(x.to(DEV), y.to(DEV), n.to(DEV))
    lazy_shifts = _shift_updates(i.to(DEV), j.to(DEV))
    assert torch.equal(lazy_bits.cpu(), _bitwise_updates(x.clone(), y, n))
    assert torch.equal(lazy_shifts.cpu(), _shift_updates(i.clone(), j))
    assert lr.metrics()["fallback_ops"] == {}


def _arithmetic_updates(x, e, d, k):
    x.pow_(e)
    x.pow_(0.5)
    x.floor_divide_(d)
    x.ldexp_(k)
    return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inplace_ops_with_renamed_functional_overloads(seed):
    g = torch.Generator().manual_seed(seed)
    s = (random.Random(seed).randint(1, 6), 2)
    x = torch.rand(s, generator=g) * 4 + 0.5
    e = torch.rand(s, generator=g) * 2
    d = torch.rand(s, generator=g) + 0.25
    k = torch.randint(-2, 3, s, generator=g)
    lr.reset_metrics()
    lazy = _arithmetic_updates(x.to(DEV), e.to(DEV), d.to(DEV), k.to(DEV)).cpu()
    torch.testing.assert_close(lazy, _arithmetic_updates(x.clone(), e, d, k))
    assert lr.metrics()["fallback_ops"] == {}


def _in_place_ops():
    for name in dir(aten):
        if not name.endswith("_") or name.startswith("_"):
            continue
        packet = getattr(aten, name)
        for overload in packet.overloads():
            yield getattr(packet, overload)


def test_every_functional_form_takes_the_in_place_ops_arguments():
    """The functional form found by name takes the same arguments as the in-place op."""
    found = 0
    for op in _in_place_ops():
        if op in dispatch.FUNCTIONAL_OF or dispatch._mutated_args(op)[1]:
            continue
        functional = dispatch.functional_of(op)
        if functional is None or not isinstance(functional, torch._ops.OpOverload):
            continue
        found += 1
        args = [(a.name, str(a.type)) for a in op._schema.arguments]
        assert [(a.name, str(a.type)) for a in functional._schema.arguments] == args, op
    assert found > 150
