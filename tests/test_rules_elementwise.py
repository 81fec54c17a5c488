"""Elementwise rules against torch: broadcasting, type promotion (tensor-tensor,
tensor-scalar, 0-d tensors), comparisons, true division, where/masked_fill,
unary maps, activations, softmax."""

import pytest
import torch
import torch.nn.functional as F

from rule_harness import Input, check

F32, F64, I64, I32, BOOL = torch.float32, torch.float64, torch.int64, torch.int32, torch.bool
RANGES = {"B": (1, 6), "T": (2, 9), "D": (1, 7)}


def arithmetic(x, y):
    a = x + y
    b = x - y
    c = x * y
    d = x / y
    e = torch.add(x, y, alpha=2)
    f = torch.maximum(x, y)
    g = torch.sub(y, x)
    h = x.mul(y)
    i = torch.true_divide(x, y)
    j = torch.div(x, y, rounding_mode="floor")
    k = x.div(y, rounding_mode="trunc")
    m = torch.remainder(x, y)
    n = x ** 2
    o = torch.pow(x, y)
    return a


ARITH_DTYPES = [(F32, F32), (F32, F64), (I64, F32), (I64, I64), (I32, I64), (F64, I32)]


@pytest.mark.parametrize("dx,dy", ARITH_DTYPES, ids=[f"{a}-{b}".replace("torch.", "") for a, b in ARITH_DTYPES])
def test_arithmetic_broadcast_promotion(dx, dy):
    check(arithmetic, {"x": Input(("B", 1, "D"), dx, low=1), "y": Input(("T", 1), dy, low=1)}, RANGES)


def compare_ops(x, y):
    a = x > y
    b = x == y
    c = torch.lt(x, y)
    d = x.ne(y)
    e = torch.logical_and(x, y)
    f = torch.logical_or(x, y)
    g = torch.logical_not(x)
    h = ~(x > y)
    i = (x >= y) & (x <= y)
    j = (x > y) | (x < y)
    k = torch.eq(x, y)
    m = torch.isclose(x.float(), y.float())
    return a


CMP_DTYPES = [(F32, F32), (I64, F32), (BOOL, BOOL), (BOOL, I64), (F64, F32)]


@pytest.mark.parametrize("dx,dy", CMP_DTYPES, ids=[f"{a}-{b}".replace("torch.", "") for a, b in CMP_DTYPES])
def test_comparisons_give_bool(dx, dy):
    check(compare_ops, {"x": Input(("B", "T", 1), dx), "y": Input(("D",), dy)}, RANGES)


def scalar_ops(x):
    a = x + 1
    b = x * 2.5
    c = x / 2
    d = 1 - x
    e = 2.0 * x
    f = x // 2
    g = x % 3
    h = x > 0.5
    i = x * True
    j = x + x.shape[0]
    k = 3 / (x + 1)
    m = x ** 0.5
    n = 2 ** x
    o = -x
    p = abs(x)
    return a


@pytest.mark.parametrize("dx", [F32, F64, I64, I32], ids=str)
def test_tensor_with_python_scalars(dx):
    check(scalar_ops, {"x": Input(("B", "T"), dx, low=1)}, RANGES)


def bool_scalar_ops(m):
    a = m + 1
    b = m * 1.5
    c = m & True
    d = m | m
    e = m.sum()
    f = m.float()
    g = m.long() * 2
    h = m / 2
    i = m.int() + m.long()
    return a


def test_bool_tensor_promotion():
    check(bool_scalar_ops, {"m": Input(("B", "T"), BOOL)}, RANGES)


def zero_dim(x, s):
    a = x + s
    b = x * s
    c = s + 1
    d = s * 1.5
    e = torch.maximum(x, s)
    return a


ZD = [(F32, F64), (I64, F32), (I32, I64), (F64, F32), (BOOL, F32), (I64, I64)]


@pytest.mark.parametrize("dx,ds", ZD, ids=[f"{a}-{b}".replace("torch.", "") for a, b in ZD])
def test_zero_dim_tensor_promotion(dx, ds):
    check(zero_dim, {"x": Input(("B", "T"), dx), "s": Input((), ds)}, RANGES)


def where_fill(x, y, m):
    a = torch.where(m, x, y)
    b = torch.where(x > 0, x, 0.0)
    c = torch.where(m, 1.0, y)
    d = x.masked_fill(m, float("-inf"))
    e = x.masked_fill(~m, 0)
    f = torch.where(m, x, y.double())
    g = x.where(m, y)
    h = torch.clamp(x, min=-1.0, max=1.0)
    i = x.clamp(min=0)
    j = torch.lerp(x, y, 0.5)
    return a


def test_where_and_masked_fill():
    check(where_fill, {"x": ("B", "T", "D"), "y": ("T", 1), "m": Input(("B", 1, "D"), BOOL)}, RANGES)


def where_int(x, m):
    a = torch.where(m, x, 0)
    b = torch.where(m, x, 1.5)
    c = x.masked_fill(m, 7)
    return a


def test_where_int_with_scalars():
    check(where_int, {"x": Input(("B", "T"), I64), "m": Input(("T",), BOOL)}, RANGES)


def unary(x):
    a = torch.relu(x)
    b = torch.sigmoid(x)
    c = x.exp()
    d = torch.sqrt(x.abs())
    e = torch.tanh(x)
    f = F.gelu(x)
    g = F.silu(x)
    h = F.leaky_relu(x, 0.1)
    i = F.elu(x)
    j = x.neg()
    k = torch.isnan(x)
    m = x.sign()
    n = F.softplus(x)
    o = F.hardtanh(x)
    p = torch.log1p(x.abs())
    q = x.floor()
    r = x.round()
    s = F.relu6(x)
    t = x.clone().detach().contiguous()
    u = F.mish(x)
    v = F.hardswish(x)
    w = F.logsigmoid(x)
    return a


@pytest.mark.parametrize("dx", [F32, F64], ids=str)
def test_unary_float(dx):
    check(unary, {"x": Input(("B", "T", "D"), dx)}, RANGES)


def unary_int(x):
    a = torch.relu(x)
    b = torch.sigmoid(x)
    c = x.exp()
    d = torch.sqrt(x)
    e = x.abs()
    f = x.neg()
    g = torch.isnan(x)
    h = x.sign()
    i = x.clamp(0, 3)
    j = x.float().tanh()
    k = torch.log(x + 1)
    m = x.sin()
    n = x.square()
    return a


def test_unary_int():
    check(unary_int, {"x": Input(("B", "T"), I64)}, RANGES)


def casts(x):
    a = x.float()
    b = x.double()
    c = x.long()
    d = x.int()
    e = x.bool()
    f = x.half()
    g = x.to(torch.float64)
    h = x.to(dtype=torch.int32)
    i = x.type(torch.int16)
    j = x.type_as(a.double())
    k = x.to(a)
    m = x.to("cpu")
    n = x.to("cpu", torch.float16)
    o = x.byte()
    return a


@pytest.mark.parametrize("dx", [F32, I64], ids=str)
def test_casts(dx):
    check(casts, {"x": Input(("B", "T"), dx)}, RANGES)


def softmaxes(x):
    a = torch.softmax(x, dim=-1)
    b = F.log_softmax(x, dim=1)
    c = x.softmax(0)
    d = F.softmax(x, dim=-1, dtype=torch.float64)
    e = x.log_softmax(-1)
    f = F.softmin(x, dim=1)
    g = F.glu(x, dim=-1)
    h = F.normalize(x, dim=-1)
    i = torch.cumsum(x, dim=1)
    j = x.cumprod(0)
    return a


@pytest.mark.parametrize("dx", [F32, F64], ids=str)
def test_softmax_family(dx):
    check(softmaxes, {"x": Input(("B", "T", "D"), dx)}, {"B": (1, 5), "T": (2, 9), "D": [2, 4, 6, 8, 10]})


def cumsum_int(x, m):
    a = torch.cumsum(x, 0)
    b = m.cumsum(-1)
    c = x.cumsum(1, dtype=torch.float32)
    return a


def test_cumsum_dtypes():
    check(cumsum_int, {"x": Input(("B", "T"), I32), "m": Input(("T",), BOOL)}, RANGES)
