"""What training scripts do around the step, under ``lr.compile_step`` against eager torch:
gradient clipping, accumulation, activation checkpointing, weight and spectral norm, a
parameter group per weight decay, frozen and tied weights, batch norm. Every loss and
the final parameters equal eager torch's within 1e-12 (float64), and the step replays."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from conftest import train_as_eager


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def batches(n=7):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 6, generator=g, dtype=torch.float64),
             torch.randn(6, 3, generator=g, dtype=torch.float64)) for _ in range(n)]


def mse(m, x, y):
    return F.mse_loss(m(x), y)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2)


def accumulated(m, x, y):
    """Two micro-batches: the first's backward here, the second's by the step."""
    (F.mse_loss(m(x[:3]), y[:3]) / 2).backward()
    return F.mse_loss(m(x[3:]), y[3:]) / 2


def checkpointed(m, x, y):
    return F.mse_loss(m[2](m[1](checkpoint(m[0], x, use_reentrant=False))), y)


def smoothed(m, x, y):
    return F.cross_entropy(m(x), y.argmax(1), label_smoothing=0.1)


def weight_normed():
    m = mlp()
    m[0] = nn.utils.parametrizations.weight_norm(m[0])
    return m


def spectral_normed():
    m = mlp()
    m[0] = nn.utils.parametrizations.spectral_norm(m[0])
    return m


def groups(params):
    """No weight decay for biases (a group of their own, with its own lr)."""
    ps = list(params)
    return torch.optim.AdamW([{"params": [p for p in ps if p.ndim > 1], "weight_decay": 0.1},
                              {"params": [p for p in ps if p.ndim <= 1], "weight_decay": 0.0,
                               "lr": 5e-3}], lr=1e-2)


def frozen_first():
    m = mlp()
    m[0].requires_grad_(False)
    return m


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.mid = nn.Linear(6, 6)
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x):
        ids = (x.abs() * 3).long().clamp(max=9)
        return self.head(torch.tanh(self.mid(self.embed(ids)))).mean(1)[:, :3]


def tied():
    torch.manual_seed(0)
    return Tied().double()


def batch_normed():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(),
                         nn.Linear(8, 3)).double()


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


CASES = {
    "clip_grad_norm": (mlp, adamw, mse, lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.5)),
    "clip_grad_norm_inf": (mlp, adamw, mse, lambda m: nn.utils.clip_grad_norm_(
        m.parameters(), 0.5, norm_type=float("inf"), foreach=True)),
    "clip_grad_value": (mlp, adamw, mse,
                        lambda m: nn.utils.clip_grad_value_(m.parameters(), 0.05)),
    "accumulation": (mlp, adamw, accumulated, None),
    "checkpoint": (mlp, adamw, checkpointed, None),
    "label_smoothing": (mlp, adamw, smoothed, None),
    "weight_norm": (weight_normed, adamw, mse, None),
    "spectral_norm": (spectral_normed, adamw, mse, None),
    "param_groups": (mlp, groups, mse, None),
    "frozen_layer": (frozen_first, adamw, mse, None),
    "tied_weights": (tied, adamw, mse, None),
    "batch_norm": (batch_normed, sgd, mse, None),
}


@pytest.fixture(autouse=True)
def _float64_default():
    """AdamW made capturable keeps its step count in the default dtype."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_training_step_with_it_replays_as_eager_torch(name):
    make_model, make_opt, loss_of, before_step = CASES[name]
    _, m = train_as_eager(make_model(), make_opt, loss_of, batches(), before_step,
                          capturable=True)
    assert m["step_replays"] >= 3, m["replay_misses"]
