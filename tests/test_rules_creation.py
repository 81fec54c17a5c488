"""Creation ops with symbolic sizes against torch: zeros/ones/full/empty/rand*/arange,
the *_like family, Tensor.new_*, tensor(), eye, linspace, with dtypes."""

import pytest
import torch

from rule_harness import Input, check


def creation(x):
    B, T = x.shape[0], x.shape[1]
    a = torch.zeros(B, T)
    b = torch.ones((B, 3, T), dtype=torch.int64)
    c = torch.full((B, T), 1.5)
    d = torch.full((T,), 7)
    e = torch.full((B,), True)
    f = torch.empty(B * T)
    g = torch.randn(B, T, dtype=torch.float64)
    h = torch.rand(T)
    i = torch.arange(T)
    j = torch.arange(1, T)
    k = torch.arange(0, T, 2)
    m = torch.arange(T, dtype=torch.float32)
    n = torch.arange(0.0, 2.5, 0.5)
    o = torch.zeros_like(x)
    p = torch.ones_like(x, dtype=torch.bool)
    q = torch.randn_like(x.float())
    r = torch.full_like(x, 3)
    s = x.new_zeros(B, 2)
    t = x.new_ones((T, T))
    u = x.new_full((B,), 2.0)
    v = x.new_empty(3, T)
    w = torch.eye(T)
    y = torch.linspace(0, 1, T)
    z = torch.randint(0, 5, (B, T))
    aa = torch.tensor([1, 2, 3])
    ab = torch.tensor([[1.0, 2.0]])
    ac = x.new_tensor([1, 2])
    ad = torch.zeros(x.shape)
    ae = torch.zeros(x.size())
    af = torch.ones(x.shape[:-1] + (4,))
    ag = torch.arange(T).unsqueeze(0).expand(B, -1)
    ah = torch.randperm(T)
    ai = torch.empty_like(x.float()).uniform_()
    aj = torch.zeros(B, T, device=x.device)
    ak = torch.tril(torch.ones(T, T, dtype=torch.bool))
    al = torch.arange(B * T).view(B, T)
    return a


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.int64], ids=str)
def test_creation_with_symbolic_sizes(dt):
    check(creation, {"x": Input(("B", "T"), dt)}, {"B": (1, 6), "T": (1, 11)})


def arange_symbolic(x):
    T = x.shape[1]
    a = torch.arange(T - 1)
    b = torch.arange(2, T + 2)
    c = torch.arange(0, T, 3)
    d = torch.arange(T, 0, -1)
    e = torch.arange(T // 2, T)
    return a


def test_arange_symbolic_bounds():
    check(arange_symbolic, {"x": ("B", "T")}, {"B": (1, 4), "T": (2, 13)}, n=6)
