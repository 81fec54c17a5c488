"""A shape bug inside a helper two calls below forward: the error is reported where it
happens, with the lines that called it."""
import torch.nn as nn


def attend(q, k):
    return q @ k  # a missing transpose: (B, T, 8) @ (B, T, 8)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        return attend(self.q(x), x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x)


__shapeinfer__ = {"model": "Net()", "inputs": {"x": "float32[B, T, 8]"}}
