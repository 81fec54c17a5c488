"""The network of the Hogwild MNIST example (several processes training one shared
model): 5x5 convolutions with max pooling, channel dropout, ``x.view(-1, 320)`` and
two linear layers.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


__shapeinfer__ = {
    "model": "Net()",
    "inputs": {"x": "float32[B, 1, 28, 28]"},
    "sizes": {"B": 4},
    "oracle_sizes": [{"B": 1}, {"B": 2}, {"B": 6}],
}


if __name__ == "__main__":
    model = Net().eval()
    with torch.no_grad():
        out = model(torch.randn(4, 1, 28, 28))
    print("output:", tuple(out.shape))
