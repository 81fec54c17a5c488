"""A small model with a shape bug on a path its sample input never takes.

`shapeinfer check examples/bugs/truncating.py` reports it, with the condition under which it
fails (T > 16), although a run at the sample size (T = 12) would succeed.
"""

import torch
import torch.nn as nn


class Truncating(nn.Module):
    def __init__(self, max_len: int = 16, width: int = 8):
        super().__init__()
        self.max_len = max_len
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        if x.size(1) > self.max_len:
            x = x[:, : self.max_len].reshape(x.size(0), self.max_len * 2, -1)  # bug: wrong length
        h = self.proj(x)
        return h.mean(1)


__shapeinfer__ = {"model": "Truncating()", "inputs": {"x": "float32[B, T, 8]"}, "sizes": {"B": 2, "T": 12}}

if __name__ == "__main__":
    print(Truncating()(torch.randn(2, 12, 8)).shape)
