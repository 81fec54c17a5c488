"""DCGAN: a generator of transposed convolutions turning a latent vector into a
64x64 image, and a discriminator of strided convolutions scoring images.

Both keep their layers in an ``nn.Sequential`` called ``main`` and keep the
multi-GPU branch of the original (``input.is_cuda and self.ngpu > 1``), which is
never taken on CPU. The discriminator accepts any image of at least 64x64 pixels:
its last 4x4 convolution then yields a score map, flattened by ``.view(-1, 1)``.
"""

import torch
import torch.nn as nn


class Generator(nn.Module):
    def __init__(self, ngpu=1, nz=16, ngf=8, nc=3):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # latent nz x 1 x 1
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # ngf x 32 x 32
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
            # nc x 64 x 64
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


class Discriminator(nn.Module):
    def __init__(self, ngpu=1, nc=3, ndf=8):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # nc x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # ndf x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output.view(-1, 1).squeeze(1)


__shapeinfer__ = [
    {
        "model": "Generator(nz=16)",
        "inputs": {"input": "float32[B, 16, 1, 1]"},
        "sizes": {"B": 4},
        "oracle_sizes": [{"B": 1}, {"B": 3}, {"B": 6}],
    },
    {
        "model": "Discriminator()",
        "inputs": {"input": "float32[B, 3, H, W]"},
        "sizes": {"B": 2, "H": 64, "W": 64},
        "oracle_sizes": [
            {"B": 3, "H": 64, "W": 80},
            {"B": 1, "H": 72, "W": 64},
            {"B": 2, "H": 100, "W": 93},
        ],
    },
]


if __name__ == "__main__":
    netG, netD = Generator(nz=16).eval(), Discriminator().eval()
    with torch.no_grad():
        fake = netG(torch.randn(4, 16, 1, 1))
        score = netD(fake)
    print("generator output:", tuple(fake.shape))
    print("discriminator output:", tuple(score.shape))
