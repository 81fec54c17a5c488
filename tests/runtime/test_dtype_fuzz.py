"""Random (op, dtypes, operand) triples run eagerly and on the lazy device: the result's
dtype and values must be torch's, or both must raise an error of one type. Operands of
every dtype from bool to float64, 0-d or not, Python numbers among them; in-place forms
included. (Such a sweep found the bool and integer operands torch's kernels refuse that
``test_dtype_errors`` now lists.)"""

import random

import pytest
import torch

from lazy_runtime import LazyRuntimeError, ZeroDivisionCheckError

from conftest import DEV

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _t(f):
    """``f`` for a tensor second operand, ``a`` unchanged for a number (an op without a
    number form)."""
    return lambda a, b: f(a, b) if isinstance(b, torch.Tensor) else a


BINARY = [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
    lambda a, b: a // b, lambda a, b: a % b, lambda a, b: a ** b, lambda a, b: a == b,
    lambda a, b: a != b, lambda a, b: a < b, lambda a, b: a >= b, lambda a, b: a & b,
    lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: a >> b, lambda a, b: a << b,
    lambda a, b: torch.where(a > 0, a, b), lambda a, b: torch.fmod(a, b),
    lambda a, b: torch.copysign(a, b), lambda a, b: torch.xlogy(a, b),
    lambda a, b: torch.float_power(a, b), lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    lambda a, b: torch.div(a, b, rounding_mode="floor"),
    lambda a, b: torch.bitwise_left_shift(a, b),
    lambda a, b: a.clone().add_(b), lambda a, b: a.clone().mul_(b),
    lambda a, b: a.clone().div_(b), lambda a, b: a.clone().sub_(b),
    _t(torch.maximum), _t(torch.atan2), _t(torch.hypot), _t(torch.logaddexp),
    _t(torch.heaviside), _t(torch.gcd), _t(torch.fmax), _t(torch.nextafter), _t(torch.ldexp),
    _t(torch.logical_xor), _t(lambda a, b: torch.addcmul(a, a, b)),
    _t(lambda a, b: torch.lerp(a, b, 0.3)), _t(lambda a, b: torch.clamp(a, min=b)),
]
UNARY = [
    lambda a: -a, torch.abs, torch.exp, torch.log, torch.sqrt, torch.sigmoid, torch.round,
    torch.sign, torch.floor, torch.ceil, torch.trunc, torch.frac, torch.bitwise_not,
    torch.reciprocal, torch.sinh, torch.tanh, torch.erfinv, torch.log2, torch.expm1,
    torch.atanh, torch.sinc, torch.logit, torch.digamma, torch.lgamma, torch.erfc, torch.sgn,
    torch.isinf, torch.signbit, torch.nan_to_num, torch.square, torch.exp2,
    torch.logical_not, torch.rsqrt, torch.deg2rad, torch.relu, torch.count_nonzero,
    torch.nansum, lambda a: a.sum(), lambda a: a.prod(), lambda a: a.argmax(),
    lambda a: a.amax(), lambda a: a.all(), lambda a: a.median(), lambda a: a.var(),
    lambda a: a.cumsum(0), lambda a: a.cumprod(0), lambda a: a.cummax(0).values,
    lambda a: a.sort(0).values, lambda a: a.softmax(0), lambda a: a.log_softmax(0),
    lambda a: a.clone().sigmoid_(), lambda a: a.clone().abs_(), lambda a: a.clone().neg_(),
    lambda a: a.clone().sqrt_(),
]
NUMBERS = [2, -3, 0, 1, 2.5, -0.5, True, 1e10, 300, -1]


def _tensor(r, dtype, shape):
    g = torch.Generator().manual_seed(r.randrange(10 ** 6))
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        low = 0 if dtype is torch.uint8 else -20
        return torch.randint(low, 20, shape, generator=g).to(dtype)
    return (torch.randn(shape, generator=g) * 5).to(dtype)


def _one(seed, device):
    r = random.Random(seed)
    shape = r.choice([(3,), (2, 3), ()])
    a = _tensor(r, r.choice(DTYPES), shape).to(device)
    if r.random() < 0.5:
        f, args = r.choice(UNARY), (a,)
    else:
        f = r.choice(BINARY)
        b = r.choice(NUMBERS) if r.random() < 0.4 else \
            _tensor(r, r.choice(DTYPES), r.choice([shape, (1,), ()])).to(device)
        args = (a, b)
    try:
        out = f(*args)
        # (read here: an error the lazy device raised only at the read would count)
        return out.cpu() if isinstance(out, torch.Tensor) else out
    except Exception as e:   # (torch raises RuntimeError, NotImplementedError, ...)
        return e


@pytest.mark.parametrize("first", range(0, 400, 100))
def test_random_ops_and_dtypes_match_torch(first):
    for seed in range(first, first + 100):
        want, got = _one(seed, "cpu"), _one(seed, DEV)
        if isinstance(want, Exception):
            if isinstance(got, ZeroDivisionCheckError):   # (checked on the device: README)
                assert str(want) == "ZeroDivisionError", seed
                continue
            assert isinstance(got, type(want)) and not isinstance(got, LazyRuntimeError), \
                (seed, want, got)
            continue
        assert not isinstance(got, Exception), (seed, got)
        assert got.dtype == want.dtype and got.shape == want.shape, (seed, want, got)
        if want.is_floating_point():
            low = want.dtype in (torch.float16, torch.bfloat16)
            torch.testing.assert_close(got, want, rtol=1e-2 if low else 1e-5,
                                       atol=1e-2 if low else 1e-6, equal_nan=True,
                                       msg=f"seed {seed}")
        else:
            assert torch.equal(got, want), (seed, want, got)
