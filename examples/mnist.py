"""The classic MNIST digit classifier: two convolutions, max pooling, dropout, two
fully connected layers and a log-softmax over the classes.

Only the batch size varies: the first linear layer fixes the image to 28x28.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, num_classes=10, channels=(16, 32), hidden=64):
        super().__init__()
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, 1)
        self.conv2 = nn.Conv2d(c1, c2, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        # 28 -> 26 -> 24 after the two valid 3x3 convolutions, 12 after pooling
        self.fc1 = nn.Linear(c2 * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


__shapeinfer__ = {
    "model": "Net(num_classes=10)",
    "inputs": {"x": "float32[B, 1, 28, 28]"},
    "sizes": {"B": 4},
    "oracle_sizes": [{"B": 1}, {"B": 3}, {"B": 7}],
}


if __name__ == "__main__":
    model = Net().eval()
    with torch.no_grad():
        out = model(torch.randn(4, 1, 28, 28))
    print("output:", tuple(out.shape))
