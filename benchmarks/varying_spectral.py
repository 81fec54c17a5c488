"""Fourier neural operators at varying resolutions: how many graphs compile, how many at an
exact shape, and whether the losses are eager torch's.

    python benchmarks/varying_spectral.py [--steps 8] [--only fno1d,fno2d,...] [--write]

A neural operator is trained at the resolutions its data comes in (that it does not care
which is its point), so sizes change from batch to batch. Two models as the FNO papers'
code writes them, trained unmodified with SGD on batches of 4 (1-d) or 2 (2-d):

* ``fno1d``: ``spectral_step.py``'s FNO-1d (width 16, 8 modes, 2 layers): ``rfft``, the
  lowest modes mixed by complex weights and written into ``zeros_like`` of the spectrum,
  ``irfft(..., n=T)``, beside a pointwise convolution; lengths drawn uniform in [48, 128]
  (multiples of 4, seed 0);
* ``fno2d``: its 2-d form (width 8, 4 x 4 modes, 2 layers): ``rfft2``, the lowest and the
  highest row modes (``x_ft[:, :, -m1:, :m2]``) mixed, written into ``zeros(B, C, H,
  W//2+1)``, ``irfft2(..., s=(H, W))``; grids of H and W drawn uniform in [16, 48] each.

Each is run twice: ``marked`` (the length, or H and W, marked with ``lr.mark_dynamic``)
and ``auto`` (nothing marked: automatic dynamic learns which sizes vary). Reported per
model: steps, compiles, exact-shape compiles among them, the largest relative difference
of a loss from eager torch's, the median step of each (lazy_runtime's includes its
compiles). torch uses one intra-op thread.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from spectral_step import FNO1d  # noqa: E402

HEADING = "## Fourier neural operators at varying resolutions"


class SpectralConv2d(nn.Module):
    def __init__(self, channels, modes1, modes2):
        super().__init__()
        self.m1, self.m2 = modes1, modes2
        scale = 1 / channels
        self.w1 = nn.Parameter(scale * torch.randn(channels, channels, modes1, modes2,
                                                   dtype=torch.cfloat))
        self.w2 = nn.Parameter(scale * torch.randn(channels, channels, modes1, modes2,
                                                   dtype=torch.cfloat))

    def forward(self, x):
        B, C, H, W = x.shape
        x_ft = torch.fft.rfft2(x)
        out = torch.zeros(B, C, H, W // 2 + 1, dtype=torch.cfloat, device=x.device)
        m1, m2 = self.m1, self.m2
        out[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], self.w1)
        out[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2],
                                            self.w2)
        return torch.fft.irfft2(out, s=(H, W))


class FNO2d(nn.Module):
    def __init__(self, modes=4, width=8, layers=2):
        super().__init__()
        self.lift = nn.Linear(3, width)
        self.spectral = nn.ModuleList(SpectralConv2d(width, modes, modes)
                                      for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Conv2d(width, width, 1) for _ in range(layers))
        self.project = nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, 1))

    def forward(self, u):
        B, H, W = u.shape
        gy = torch.linspace(0, 1, H, device=u.device)[None, :, None].expand(B, H, W)
        gx = torch.linspace(0, 1, W, device=u.device)[None, None, :].expand(B, H, W)
        h = self.lift(torch.stack([u, gy, gx], dim=-1)).permute(0, 3, 1, 2)
        for spectral, pointwise in zip(self.spectral, self.pointwise):
            h = F.gelu(spectral(h) + pointwise(h))
        return self.project(h.permute(0, 2, 3, 1)).squeeze(-1)


MODELS = {
    "fno1d": lambda: FNO1d(8, 16),
    "fno2d": FNO2d,
}
ROWS = {f"{name} {how}": (name, how) for name in MODELS for how in ("marked", "auto")}


def batches(name: str, steps: int) -> list:
    """``steps`` (input, target) pairs at sizes drawn as the docstring says, seeded."""
    rng = random.Random(0)
    out = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        shape = (4, rng.randint(12, 32) * 4) if name == "fno1d" else \
            (2, rng.randint(16, 48), rng.randint(16, 48))
        out.append((torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)))
    return out


def run(row: str, steps: int) -> dict:
    from varying_vision import side_by_side
    name, how = ROWS[row]

    def mark(x):
        if how == "auto":
            return x
        for d in range(1, x.dim()):
            x = lr.mark_dynamic(x, d, "HW"[d - 1] if x.dim() == 3 else "T")
        return x
    return side_by_side(MODELS[name], lambda out, x, y: (out - y).square().mean(),
                        batches(name, steps), mark)


def main():
    from varying_vision import main as sizes_main
    sizes_main(__doc__, ROWS, run, 8, HEADING, lambda steps: (
        f"`python benchmarks/varying_spectral.py --steps {steps} --write`: Fourier neural "
        "operators (1-d and 2-d) trained unmodified (SGD) at resolutions drawn each step, "
        "the sizes marked dynamic (power-of-two buckets) or not marked at all (automatic "
        "dynamic); each against eager torch in the same loop. See the script's docstring "
        "for the models."))


if __name__ == "__main__":
    main()
