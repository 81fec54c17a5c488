"""``memory_format=torch.channels_last``: accepted everywhere a training script passes it,
values and gradients equal eager torch's (which runs channels-last kernels); the lazy
tensors report contiguous strides (README, Policies: "Memory formats")."""

import copy

import torch
import torch.nn as nn

from conftest import DEV, assert_same

CL = torch.channels_last


def test_a_cnn_moved_and_fed_channels_last_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, stride=2))
    lazy = copy.deepcopy(model).to(DEV, memory_format=CL)
    model = model.to(memory_format=CL)
    x = torch.randn(2, 3, 9, 9)
    xl = x.to(DEV).to(memory_format=CL)
    want, got = model(x.to(memory_format=CL)), lazy(xl)
    want.square().sum().backward()
    got.square().sum().backward()
    assert_same(got, want.detach(), 1e-5, 1e-6, what="output")
    for p, q in zip(lazy.parameters(), model.parameters()):
        assert_same(p.grad, q.grad, 1e-4, 1e-5, what="gradient")
    for t in (xl, lazy[0].weight, got, xl.contiguous(memory_format=CL),
              xl.clone(memory_format=CL), torch.empty_like(xl, memory_format=CL)):
        assert t.stride() == torch.empty(t.shape).stride()
        assert t.is_contiguous() and not t.is_contiguous(memory_format=CL)
    assert want.is_contiguous(memory_format=CL)   # (eager: the format kept)
