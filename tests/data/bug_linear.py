import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3)
        self.fc = nn.Linear(8 * 25 * 25, 10)

    def forward(self, x):
        x = self.conv(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


__shapeinfer__ = {"model": "Net()", "inputs": {"x": "float32[B, 1, 28, 28]"}}
