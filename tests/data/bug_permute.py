import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x):
        h = x.permute(0, 2, 1)
        y = self.proj(h)
        return y


__shapeinfer__ = {"model": "Net()", "inputs": {"x": "float32[B, T, 16]"}}
