"""Train a small MLP classifier on the lazy device (lazy_runtime over JAX/XLA).

The data are synthetic: a fixed random "teacher" network labels Gaussian inputs, so the
loss falls steadily. Every training step (forward, backward, AdamW) becomes one XLA
graph; from the second step on the cached executable is reused (see the metrics).

    python examples/train_mlp.py [--steps N]
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in=32, hidden=64, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = F.relu(self.fc2(h))
        logits = self.out(h)
        return logits


def make_model(seed=0):
    torch.manual_seed(seed)
    return MLP()


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)


def make_batch(step, batch=64, d_in=32, classes=10):
    teacher = torch.Generator().manual_seed(1234)
    w = torch.randn(d_in, classes, generator=teacher)
    g = torch.Generator().manual_seed(step)
    x = torch.randn(batch, d_in, generator=g)
    y = (x @ w).argmax(dim=1)
    return x, y


def loss_fn(logits, y):
    return F.cross_entropy(logits, y)


def train(model, opt, steps, device=None, first_step=0):
    """Plain PyTorch training; ``device`` is the lazy device (None: eager on the CPU)."""
    from lazy_runtime.training import train_steps

    return train_steps(model, opt, make_batch, loss_fn, steps, device, first_step)


__shapeinfer__ = {
    "model": "MLP(d_in=32, hidden=64, classes=10)",
    "inputs": {"x": "float32[B, 32]"},
    "sizes": {"B": 4},
    "oracle_sizes": [{"B": 1}, {"B": 3}, {"B": 9}],
}


if __name__ == "__main__":
    from lazy_runtime.training import run_demo

    run_demo(__doc__, 30, make_model, make_optimizer, make_batch, loss_fn)
