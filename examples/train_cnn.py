"""Train a small CNN (conv, batch norm, max pool, adaptive average pool) on the lazy
device. Synthetic images: a bright square in one of four quadrants, plus noise; the
label is the quadrant.

    python examples/train_cnn.py [--steps N]
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, channels=(8, 16), classes=4):
        super().__init__()
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c2, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        h = torch.flatten(self.pool(h), 1)
        logits = self.fc(h)
        return logits


def make_model(seed=0):
    torch.manual_seed(seed)
    return SmallCNN()


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-2)


def make_batch(step, batch=16, size=16):
    g = torch.Generator().manual_seed(step)
    y = torch.randint(0, 4, (batch,), generator=g)
    x = 0.3 * torch.randn(batch, 1, size, size, generator=g)
    half = size // 2
    for i in range(batch):
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * half + 2:r * half + half - 2, c * half + 2:c * half + half - 2] += 1.0
    return x, y


def loss_fn(logits, y):
    return F.cross_entropy(logits, y)


def train(model, opt, steps, device=None, first_step=0):
    """Plain PyTorch training; ``device`` is the lazy device (None: eager on the CPU)."""
    from lazy_runtime.training import train_steps

    return train_steps(model, opt, make_batch, loss_fn, steps, device, first_step)


__shapeinfer__ = {
    "model": "SmallCNN(channels=(8, 16), classes=4)",
    "inputs": {"x": "float32[B, 1, H, W]"},
    "sizes": {"B": 2, "H": 16, "W": 12},
    "oracle_sizes": [{"B": 1, "H": 8, "W": 20}, {"B": 3, "H": 24, "W": 16},
                     {"B": 5, "H": 12, "W": 8}],
}


if __name__ == "__main__":
    from lazy_runtime.training import run_demo

    run_demo(__doc__, 25, make_model, make_optimizer, make_batch, loss_fn)
