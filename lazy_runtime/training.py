"""The training loop the example scripts share: plain PyTorch, one barrier per step."""

from __future__ import annotations

import argparse


def train_steps(model, opt, make_batch, loss_fn, steps, device=None, first_step=0) -> list[float]:
    """Train for ``steps`` steps; ``device`` is the lazy device (None: eager on the CPU).
    Losses are read after the loop, so reading them adds no barrier inside it."""
    from .executor import mark_step
    from .heap import paused

    losses = []
    for step in range(first_step, first_step + steps):
        x, y = make_batch(step)
        with paused():   # (a traced step's objects live until its barrier: kept young)
            if device is not None:
                x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if device is not None:
                mark_step()
        losses.append(loss)
    return [float(loss.item()) for loss in losses]


def run_demo(doc: str, default_steps: int, make_model, make_optimizer, make_batch, loss_fn) -> None:
    """An example's ``__main__``: train on the lazy device, print the loss curve and the
    metrics report (``--steps N`` to change the length)."""
    from .device import device
    from .metrics import metrics_report

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=default_steps)
    steps = parser.parse_known_args()[0].steps
    dev = device()
    model = make_model().to(dev)
    losses = train_steps(model, make_optimizer(model), make_batch, loss_fn, steps, dev)
    for i in range(0, steps, max(1, steps // 10)):
        print(f"step {i:4d}  loss {losses[i]:.4f}")
    print(f"output: final loss {losses[-1]:.4f} after {steps} steps")
    print(metrics_report())
