"""AlexNet (Krizhevsky et al., 2012) in its common single-tower form: a ``features``
stack of convolutions and max pooling, adaptive average pooling to 6x6, and a
``classifier`` stack of dropout and linear layers. Widths are scaled down.

Thanks to the adaptive pooling any image of at least 63x63 pixels is accepted.
"""

import torch
import torch.nn as nn


class AlexNet(nn.Module):
    def __init__(self, num_classes=10, widths=(16, 32, 48, 32, 32), hidden=128, dropout=0.5):
        super().__init__()
        w1, w2, w3, w4, w5 = widths
        self.features = nn.Sequential(
            nn.Conv2d(3, w1, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(w1, w2, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(w2, w3, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(w3, w4, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(w4, w5, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(w5 * 6 * 6, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


__shapeinfer__ = {
    "model": "AlexNet(num_classes=10)",
    "inputs": {"x": "float32[B, 3, H, W]"},
    "sizes": {"B": 2, "H": 96, "W": 80},
    "oracle_sizes": [
        {"B": 1, "H": 63, "W": 70},
        {"B": 3, "H": 64, "W": 64},
        {"B": 2, "H": 127, "W": 100},
    ],
}


if __name__ == "__main__":
    model = AlexNet().eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 96, 80))
    print("output:", tuple(out.shape))
