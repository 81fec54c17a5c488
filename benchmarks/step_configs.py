"""The benchmarked training steps (each example's model, optimizer and batches), apart from
lazy_runtime: ``eager_step`` times them with eager torch in a process that never imports
the runtime (see there), ``runtime_step`` on every contender."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 5   # whole-step replay starts at step 5 (state made, optimizer capture, 2 traces)


def load_example(name):
    path = ROOT / "examples" / f"train_{name}.py"
    spec = importlib.util.spec_from_file_location(f"ex_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Config:
    """One benchmark row: a torch model + optimizer + batches, and its JAX twin."""

    def __init__(self, name, example, make_model, batches, jax_kwargs, note):
        self.name, self.ex, self.make_model, self.batches = name, example, make_model, batches
        self.jax_kwargs, self.note = jax_kwargs, note


def configs(steps):
    out = []
    for name in ("mlp", "cnn", "lstm", "gpt"):
        ex = load_example(name)
        make = (lambda ex=ex: ex.make_model(dropout=0.0)) if name == "gpt" else ex.make_model
        batches = [ex.make_batch(s) for s in range(steps + 5)]
        out.append(Config(name, ex, make, batches, {}, "example defaults"))
    # A wider MLP: the same code, more arithmetic per recorded op.
    ex = load_example("mlp")
    gen = torch.Generator().manual_seed(0)
    wide = dict(d_in=512, hidden=2048, classes=10)
    batches = [(torch.randn(256, 512, generator=gen), torch.randint(0, 10, (256,), generator=gen))
               for _ in range(steps + 5)]

    def make_wide(ex=ex):
        torch.manual_seed(0)
        return ex.MLP(**wide)
    out.append(Config("mlp-wide", ex, make_wide, batches, wide, "512-2048-2048-10, batch 256"))
    return out


def training_step(cfg, model, opt, device):
    """``step(x, y) -> loss``: one training step of ``cfg``'s example on ``device``, its
    batch copied there first (every contender copies its batch)."""
    def step(x, y):
        x, y = x.to(device), y.to(device)
        loss = cfg.ex.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def config_named(name, steps):
    """The row named ``name`` ("mlp", "cnn", "lstm", "gpt" or "mlp-wide")."""
    for cfg in configs(steps):
        if cfg.name == name:
            return cfg
    raise SystemExit(f"no benchmark row named {name!r} (mlp, cnn, lstm, gpt, mlp-wide)")
