import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(16, 24)

    def forward(self, x):
        ya = self.a(x)
        yb = self.b(x)
        z = torch.cat([ya, yb], dim=0)
        return z


__shapeinfer__ = {"model": "Net()", "inputs": {"x": "float32[B, 16]"}}
