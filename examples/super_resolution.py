"""Single-image super-resolution with a sub-pixel convolution (ESPCN-style): a stack
of same-padding convolutions producing ``upscale_factor ** 2`` channels, rearranged
by ``nn.PixelShuffle`` into an image ``upscale_factor`` times larger.
"""

import torch
import torch.nn as nn
import torch.nn.init as init


class Net(nn.Module):
    def __init__(self, upscale_factor, channels=16):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, channels, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(channels, channels, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(channels, channels // 2, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(channels // 2, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        gain = init.calculate_gain("relu")
        for conv in (self.conv1, self.conv2, self.conv3):
            init.orthogonal_(conv.weight, gain)
        init.orthogonal_(self.conv4.weight)


__shapeinfer__ = {
    "model": "Net(upscale_factor=3)",
    "inputs": {"x": "float32[B, 1, H, W]"},
    "sizes": {"B": 2, "H": 24, "W": 20},
    "oracle_sizes": [
        {"B": 1, "H": 17, "W": 31},
        {"B": 3, "H": 32, "W": 32},
        {"B": 2, "H": 9, "W": 14},
    ],
}


if __name__ == "__main__":
    model = Net(upscale_factor=3).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 1, 24, 20))
    print("output:", tuple(out.shape))
