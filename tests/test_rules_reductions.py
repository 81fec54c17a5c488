"""Reductions and contractions against torch: sum/mean/var/std/amax/prod with dim and
keepdim, max/min with dim -> (values, indices), argmax, topk/sort/argsort,
matmul/@/bmm/mm/mv/einsum/outer/addmm, with dtypes."""

import pytest
import torch

from rule_harness import Input, check

RANGES = {"B": (1, 6), "T": (2, 9), "D": (1, 7)}
F32, F64, I64, BOOL = torch.float32, torch.float64, torch.int64, torch.bool


def reductions(x):
    a = x.sum()
    b = x.sum(1)
    c = x.sum(dim=-1, keepdim=True)
    d = torch.sum(x, (0, 2))
    e = x.mean(1) if x.is_floating_point() else x.float().mean(1)
    f = x.amax(dim=(1, 2))
    g = torch.amin(x, -1, keepdim=True)
    h = x.prod(0)
    i = x.int().argmax()
    j = x.int().argmax(dim=1)
    k = torch.argmin(x.int(), dim=-1, keepdim=True)
    m = x.any(1)
    n = torch.all(x, dim=0)
    o = x.count_nonzero(1)
    p = x.sum(1, dtype=torch.float64)
    return a


@pytest.mark.parametrize("dt", [F32, F64, I64, BOOL], ids=str)
def test_sum_mean_amax(dt):
    check(reductions, {"x": Input(("B", "T", "D"), dt)}, RANGES)


def float_reductions(x):
    a = x.var(1)
    b = x.std(dim=-1, keepdim=True)
    c = torch.var(x)
    d = x.std(unbiased=False)
    e = torch.var(x, dim=(0, 1), correction=0)
    f = torch.logsumexp(x, dim=1)
    g = x.norm(dim=-1)
    h = torch.norm(x)
    i = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    j, k = torch.var_mean(x, dim=1)
    m = x.mean()
    n = x.mean((1, 2), keepdim=True)
    o = x.nanmean(0)
    return a


@pytest.mark.parametrize("dt", [F32, F64], ids=str)
def test_var_std_norm(dt):
    check(float_reductions, {"x": Input(("B", "T", "D"), dt)}, RANGES)


def max_min(x, y):
    v, i = x.max(dim=1)
    a, b = torch.min(x, 0, keepdim=True)
    r = x.max(-1)  # a named tuple: rendered as a tuple (values, indices)
    vals = r.values
    idx = r.indices
    m = x.max()
    n = torch.max(x, y)
    o = torch.min(x, y)
    med, pos = x.median(dim=1)
    mm = x.median()
    mx = torch.max(x, dim=2)[0]
    return v


@pytest.mark.parametrize("dt", [F32, I64], ids=str)
def test_max_min_with_dim_give_values_and_indices(dt):
    check(max_min, {"x": Input(("B", "T", "D"), dt), "y": Input(("T", 1), dt)}, RANGES)


def sorting(x):
    v, i = x.topk(2, dim=1)
    a, b = torch.topk(x, 1)
    s, si = x.sort(dim=1, descending=True)
    c = torch.sort(x)  # a named tuple: rendered as a tuple (values, indices)
    d = x.argsort(dim=0)
    k = x.shape[1] // 2
    e, f = x.topk(k, dim=1)
    g = torch.kthvalue(x, 1, dim=1).values
    h = x.sort(0).indices
    i = x.topk(1).values
    j = torch.cummax(x, 1)[1]
    return v


@pytest.mark.parametrize("dt", [F32, I64], ids=str)
def test_topk_sort(dt):
    check(sorting, {"x": Input(("B", "T", "D"), dt)}, RANGES)


def matmuls(x, w, v, b3):
    a = x @ w
    b = torch.matmul(x, w)
    c = x @ v
    d = v @ w
    e = v @ v
    f = torch.bmm(x, b3)
    g = x[0] @ w
    h = torch.mm(x[0], w)
    i = torch.mv(x[0], v)
    j = x.matmul(w).relu()
    k = torch.einsum("btd,de->bte", x, w)
    m = torch.einsum("bij,bjk->bik", x, b3)
    n = torch.einsum("btd->bd", x)
    o = torch.einsum("i,j->ij", v, v)
    p = torch.outer(v, v)
    q = torch.einsum("...d,de->...e", x, w)
    r = torch.addmm(w[0], x[0], w)
    s = torch.baddbmm(x[:, :, :1], x, x.transpose(1, 2))
    t = torch.einsum("bij,bkj", x, x)
    u = x.transpose(1, 2) @ x
    z = torch.dot(v, v)
    return a


def test_matmul_family():
    check(matmuls, {"x": ("B", "T", "D"), "w": ("D", "E"), "v": ("D",), "b3": ("B", "D", "T")},
          {"B": (1, 5), "T": (2, 8), "D": (1, 7), "E": (1, 9)})


def matmul_broadcast(x, y):
    a = x @ y
    b = torch.matmul(y.transpose(-1, -2), x.transpose(-1, -2))
    return a


def test_matmul_broadcasts_batch_dims():
    check(matmul_broadcast, {"x": ("A", 1, "T", "D"), "y": ("B", "D", "E")},
          {"A": (1, 4), "B": (2, 5), "T": (1, 6), "D": (1, 6), "E": (1, 6)})


@pytest.mark.parametrize("dt", [I64, F64], ids=str)
def test_matmul_dtypes(dt):
    # operands of different dtypes are an error (torch does not promote): see test_rules_errors
    check(matmul_broadcast, {"x": Input(("A", 1, "T", "D"), dt), "y": Input(("B", "D", "E"), dt)},
          {"A": (1, 3), "B": (2, 4), "T": (1, 5), "D": (1, 5), "E": (1, 5)})
