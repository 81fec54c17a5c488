"""Training step of a Fourier neural operator (complex weights, FFTs in forward and
backward): eager torch on the CPU, lazy_runtime (traced every step, and the whole step
replayed with ``lr.compile_step``) and the same model written in jax.jit, side by side.

    python benchmarks/spectral_step.py [--steps 10] [--rounds 8] [--width 32]

The contenders run in alternating blocks of ``--steps`` steps (``--rounds`` each) after
warm-up; every timed step ends with the loss read back. Medians in ms.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
import runtime_jax_models as jm  # noqa: E402

WARMUP = 5


class SpectralConv1d(nn.Module):
    def __init__(self, channels, modes):
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(torch.randn(channels, channels, modes, dtype=torch.cfloat)
                                   / channels)

    def forward(self, h):
        hf = torch.fft.rfft(h)
        out = torch.zeros_like(hf)
        out[..., :self.modes] = torch.einsum("bim,iom->bom", hf[..., :self.modes], self.weight)
        return torch.fft.irfft(out, n=h.shape[-1])


class FNO1d(nn.Module):
    def __init__(self, modes, width, layers=2):
        super().__init__()
        self.lift = nn.Linear(2, width)
        self.spectral = nn.ModuleList(SpectralConv1d(width, modes) for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Conv1d(width, width, 1) for _ in range(layers))
        self.project = nn.Sequential(nn.Linear(width, 32), nn.GELU(), nn.Linear(32, 1))

    def forward(self, u):
        grid = torch.linspace(0, 1, u.shape[-1], device=u.device).expand_as(u)
        h = self.lift(torch.stack([u, grid], dim=-1)).transpose(1, 2)
        for spectral, pointwise in zip(self.spectral, self.pointwise):
            h = F.gelu(spectral(h) + pointwise(h))
        return self.project(h.transpose(1, 2)).squeeze(-1)


def batches(n, batch, length, t=0.002):
    """Random smooth periodic functions and the heat equation's solution from them."""
    out = []
    k = torch.arange(1, 9, dtype=torch.float32)
    x = torch.linspace(0, 1, length + 1)[:-1]
    damp = torch.exp(-(2 * math.pi * torch.arange(length // 2 + 1)) ** 2 * t)
    for s in range(n):
        g = torch.Generator().manual_seed(s)
        a, b = torch.randn(batch, 8, generator=g) / k, torch.randn(batch, 8, generator=g) / k
        phase = 2 * math.pi * k[:, None] * x
        u = a @ torch.sin(phase) + b @ torch.cos(phase)
        out.append((u, torch.fft.irfft(torch.fft.rfft(u) * damp, n=length)))
    return out


def jax_fno(model):
    """The same network in JAX, from the torch model's initial weights (complex weights
    kept as (real, imaginary) pairs, as torch's Adam treats them)."""
    p = {k: jnp.asarray(torch.view_as_real(v).numpy() if v.is_complex() else v.numpy())
         for k, v in model.state_dict().items()}
    modes = model.spectral[0].modes
    layers = len(model.spectral)

    def forward(p, u):
        L = u.shape[-1]
        grid = jnp.broadcast_to(jnp.linspace(0, 1, L, dtype=jnp.float32), u.shape)
        h = jnp.stack([u, grid], -1) @ p["lift.weight"].T + p["lift.bias"]
        h = jnp.swapaxes(h, 1, 2)
        for i in range(layers):
            w = p[f"spectral.{i}.weight"]
            hf = jnp.fft.rfft(h)
            weight = jax.lax.complex(w[..., 0], w[..., 1])
            mixed = jnp.einsum("bim,iom->bom", hf[..., :modes], weight)
            s = jnp.fft.irfft(jnp.zeros_like(hf).at[..., :modes].set(mixed), n=L)
            pw = jnp.einsum("oi,bil->bol", p[f"pointwise.{i}.weight"][..., 0], h)
            h = jax.nn.gelu(s + pw + p[f"pointwise.{i}.bias"][:, None], approximate=False)
        h = jnp.swapaxes(h, 1, 2)
        h = jax.nn.gelu(h @ p["project.0.weight"].T + p["project.0.bias"], approximate=False)
        return (h @ p["project.2.weight"].T + p["project.2.bias"])[..., 0]

    def loss_fn(p, u, y):
        return jnp.mean((forward(p, u) - y) ** 2)
    init, step = jm.make_step(loss_fn, jm.adam(3e-3))
    return p, init(p), None, step


def run(steps, rounds, width, modes, batch, length):
    data = batches(WARMUP + steps, batch, length)
    torch.manual_seed(0)
    reference = FNO1d(modes, width)
    models = {}

    def fresh():
        m = FNO1d(modes, width)
        m.load_state_dict(reference.state_dict())
        return m

    def train_step(model, opt):
        def step(u, y):
            loss = F.mse_loss(model(u), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step

    eager_model = fresh()
    eager = train_step(eager_model, torch.optim.Adam(eager_model.parameters(), lr=3e-3))
    traced_model = fresh().to(lr.device())
    traced = train_step(traced_model, torch.optim.Adam(traced_model.parameters(), lr=3e-3))
    whole_model = fresh().to(lr.device())
    whole_opt = lr.compile_optimizer(torch.optim.Adam(whole_model.parameters(), lr=3e-3))
    whole = lr.compile_step(train_step(whole_model, whole_opt), whole_model, whole_opt)
    state = list(jax_fno(reference))
    models.update(eager=eager_model, traced=traced_model, whole=whole_model)

    def jitted(u, y):
        params, opt_state, model_state, step = state
        params, opt_state, model_state, loss = step(params, opt_state, model_state,
                                                    u.numpy(), y.numpy())
        state[:3] = params, opt_state, model_state
        return float(loss)

    dev = lr.device()

    def lazy(f):
        def call(u, y):
            loss = f(u.to(dev), y.to(dev))
            lr.mark_step()
            return loss.item()
        return call

    contenders = {"eager": lambda u, y: eager(u, y).item(), "lazy traced": lazy(traced),
                  "whole step": lazy(whole), "jax.jit": jitted}
    first, losses = {}, {}
    for name, f in contenders.items():
        for u, y in data[:WARMUP]:
            t0 = time.perf_counter()
            losses.setdefault(name, []).append(f(u, y))
            first.setdefault(name, time.perf_counter() - t0)
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, f in contenders.items():
            for u, y in data[WARMUP:]:
                t0 = time.perf_counter()
                f(u, y)
                times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    return med, first, losses, lr.metrics()


def main():
    # torch's OpenMP threads and XLA's pool in one process fight over the 2 cores: eager
    # steps took 0.4-0.6 s here beside jax (15 ms alone, with 1 thread or 2 alike)
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--modes", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=256)
    a = ap.parse_args()
    med, first, losses, m = run(a.steps, a.rounds, a.width, a.modes, a.batch, a.length)
    print(f"FNO-1d width {a.width}, {a.modes} modes, 2 layers, batch {a.batch}, "
          f"length {a.length}; medians of {a.rounds} x {a.steps} steps")
    print("| contender | step (ms) | / eager | / jax.jit | first step (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, ms in med.items():
        print(f"| {name} | {ms:.2f} | {ms / med['eager']:.2f}x | {ms / med['jax.jit']:.2f}x "
              f"| {first[name]:.2f} |")
    print("warm-up losses:", {k: [round(x, 4) for x in v] for k, v in losses.items()})
    print("fallback ops:", m["fallback_ops"], " whole-step replays:", m["step_replays"])
    assert np.allclose(losses["eager"], losses["whole step"], rtol=1e-3)


if __name__ == "__main__":
    main()
