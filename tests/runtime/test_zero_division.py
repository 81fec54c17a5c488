"""Integer division by zero (``//``, ``%``, ``fmod``, ``div`` with a rounding mode): torch
raises ``RuntimeError('ZeroDivisionError')``, XLA gives a value. The lowerings check the
divisor on the device and the error (``ZeroDivisionCheckError``, a ``RuntimeError``) is
raised at the next read, as the index checks are (``test_index_checks.py``)."""

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV
from lowering_harness import assert_torchs_error
from lazy_runtime import ZeroDivisionCheckError

DIVISIONS = {
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "div-trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div-floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "number-remainder": lambda a, b: 7 % b,
}


def _operands(dtype, seed, zero):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-50, 50, (3, 4), generator=g).to(dtype)
    b = torch.randint(1, 9, (4,), generator=g).to(dtype) * (1 - 2 * (seed % 2))
    if zero:
        b[seed % 4] = 0
    return a, b


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64])
def test_nonzero_divisors_give_torchs_values(dtype):
    lr.reset_metrics()
    for seed in range(3):
        a, b = _operands(dtype, seed, zero=False)
        lazy = [fn(a.to(DEV), b.to(DEV)) for fn in DIVISIONS.values()]
        for fn, got in zip(DIVISIONS.values(), lazy):
            want = fn(a, b)
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    assert lr.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("name", list(DIVISIONS))
def test_a_zero_divisor_raises_at_the_read(name):
    fn = DIVISIONS[name]
    a, b = _operands(torch.int64, 1, zero=True)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    out = fn(a.to(DEV), b.to(DEV))
    with pytest.raises(ZeroDivisionCheckError, match="ZeroDivisionError"):
        out.cpu()
    with pytest.raises(ZeroDivisionCheckError):   # the graph's values hold the error
        out.sum().item()


@pytest.mark.parametrize("fn", [lambda x: x // 0, lambda x: torch.remainder(x, 0),
                                lambda x: torch.fmod(x, 0),
                                lambda x: torch.div(x, 0, rounding_mode="trunc")])
def test_the_number_zero_as_divisor_raises_torchs_error_at_once(fn):
    """A number divisor is known when the op is recorded: torch runs and raises."""
    assert_torchs_error(fn, [torch.arange(5)])


def test_float_division_by_zero_is_not_checked():
    a, b = torch.tensor([5.0, -7.0, 0.0]), torch.tensor([0.0, 0.0, 0.0])
    for fn in DIVISIONS.values():
        torch.testing.assert_close(fn(a.to(DEV), b.to(DEV)).cpu(), fn(a, b), equal_nan=True)
    torch.testing.assert_close((a.to(DEV) // 0).cpu(), a // 0, equal_nan=True)
    torch.testing.assert_close((torch.arange(3).to(DEV) / 0).cpu(), torch.arange(3) / 0,
                               equal_nan=True)


def test_checks_off_give_xlas_values():
    a, b = _operands(torch.int32, 0, zero=True)
    lr.config.check_indices = False
    try:
        (a.to(DEV) % b.to(DEV)).cpu()   # no error: a value XLA chose
    finally:
        lr.config.check_indices = True


@pytest.mark.parametrize("name", [n for n in DIVISIONS if n != "number-remainder"])
def test_divisions_of_bools_raise_torchs_error(name):
    assert_torchs_error(DIVISIONS[name], [torch.tensor([True, False])] * 2)
