"""The image transformation network of fast neural style transfer (Johnson et al.):
reflection-padded convolutions downsampling twice, five residual blocks, and two
upsampling layers (nearest-neighbour ``interpolate`` then a convolution), with
instance normalization throughout.

The output has the input's size only when H and W are multiples of 4: each
stride-2 convolution rounds up, and upsampling doubles exactly.
"""

import torch


class TransformerNet(torch.nn.Module):
    def __init__(self, channels=(8, 16, 32)):
        super().__init__()
        c1, c2, c3 = channels
        # Initial convolution layers
        self.conv1 = ConvLayer(3, c1, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(c1, affine=True)
        self.conv2 = ConvLayer(c1, c2, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(c2, affine=True)
        self.conv3 = ConvLayer(c2, c3, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(c3, affine=True)
        # Residual layers
        self.res1 = ResidualBlock(c3)
        self.res2 = ResidualBlock(c3)
        self.res3 = ResidualBlock(c3)
        self.res4 = ResidualBlock(c3)
        self.res5 = ResidualBlock(c3)
        # Upsampling layers
        self.deconv1 = UpsampleConvLayer(c3, c2, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(c2, affine=True)
        self.deconv2 = UpsampleConvLayer(c2, c1, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(c1, affine=True)
        self.deconv3 = ConvLayer(c1, 3, kernel_size=9, stride=1)
        # Non-linearities
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.res3(y)
        y = self.res4(y)
        y = self.res5(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    """Two 3x3 convolutions with instance norm, added to the block's input."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    """Upsample by ``upsample`` (nearest neighbour), then a reflection-padded conv.

    This gives fewer checkerboard artifacts than a transposed convolution.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode="nearest", scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


__shapeinfer__ = {
    "model": "TransformerNet()",
    "inputs": {"X": "float32[B, 3, H, W]"},
    "sizes": {"B": 2, "H": 32, "W": 24},
    "oracle_sizes": [
        {"B": 1, "H": 30, "W": 22},
        {"B": 3, "H": 16, "W": 16},
        {"B": 2, "H": 21, "W": 35},
    ],
}


if __name__ == "__main__":
    model = TransformerNet().eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, 30, 22))
    print("output:", tuple(out.shape))
