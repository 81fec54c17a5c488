"""Training under a schedule: eager torch against ``lr.compile_step`` with the learning
rate a float (set by the scheduler every step: followed, ``lazy_runtime/step_numbers.py``)
and a tensor (``lr=torch.tensor(...)``, torch's advice for schedules under torch.compile:
the scheduler fills it in place), and against the step traced with its forward replayed
(``lr.compile(model, replay=True)``) and ``lr.compile_optimizer`` (a float learning rate
followed by the optimizer's own replay, ``lazy_runtime/replay_numbers.py``).

    python benchmarks/schedule.py [--steps 40]

The MLP and GPT examples with their AdamW under ``CosineAnnealingLR`` over the run, and
under ``OneCycleLR`` (which also cycles AdamW's ``betas[0]``, a tuple of floats set every
step), stepped after each training step (outside the compiled step: a replay runs no
Python). Reported: XLA compiles, whole steps replayed (or, for the traced step, the
optimizer steps replayed), the median step of the second half
(each step ends with the loss read on the host) and the largest relative difference of a
loss from eager torch's under the same schedule.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from lazy_runtime.metrics import METRICS  # noqa: E402
from step_configs import config_named, training_step  # noqa: E402

lr.config.compile_cache = None


SCHEDULES = {
    "cosine": lambda opt, steps: torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps),
    "one cycle": lambda opt, steps: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=3e-3, total_steps=steps),
}


def run(name: str, steps: int, device, tensor_lr: bool, schedule: str = "cosine",
        whole: bool = True) -> dict:
    """One contender's run; ``whole``: under ``compile_step`` (else traced every step, its
    forward replayed and its optimizer compiled)."""
    cfg = config_named(name, steps)
    model = cfg.make_model()
    opt = cfg.ex.make_optimizer(model)
    if tensor_lr:
        for group in opt.param_groups:
            group["lr"] = torch.tensor(group["lr"])
    opt_replays = [0]
    if device is not None:
        model.to(device)
        opt = lr.compile_optimizer(opt)
        if not whole:   # count the optimizer's own replays (the forward's are apart)
            compiled_step = opt.step

            def counted_step(self, *a, **k):
                before = METRICS.replays
                out = compiled_step(*a, **k)
                opt_replays[0] += METRICS.replays - before
                return out
            opt.step = types.MethodType(counted_step, opt)   # (bound, as schedulers expect)
    elif tensor_lr:   # (eager: torch takes a tensor lr off the foreach path only)
        for group in opt.param_groups:
            group["foreach"] = False
    sched = SCHEDULES[schedule](opt, steps)
    if device is not None and not whole:
        model = lr.compile(model, replay=True)
    step = training_step(cfg, model, opt, device or "cpu")
    if device is not None and whole:
        step = lr.compile_step(step, model, opt)
    elif device is not None:
        traced = step

        def step(x, y):
            loss = traced(x, y)
            lr.mark_step()
            return loss
    lr.clear_cache()
    lr.reset_metrics()
    losses, times = [], []
    for x, y in cfg.batches[:steps]:
        t = time.perf_counter()
        losses.append(step(x, y).item())
        times.append(time.perf_counter() - t)
        sched.step()
    m = lr.metrics()
    lazy = device is not None
    if lazy and not whole:
        replays = f"{opt_replays[0]} / {steps} opt.step"
    else:
        replays = f"{m['step_replays'] if lazy else 0} / {steps}"
    return {"losses": losses, "median_ms": statistics.median(times[steps // 2:]) * 1e3,
            "compiles": m["compiles"] if lazy else 0, "replays": replays}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args(argv)
    dev = lr.device()
    print("| example | schedule | contender | compiles | steps replayed "
          "| median step, 2nd half (ms) | largest loss difference from eager |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name in ("mlp", "gpt"):
        for schedule in SCHEDULES:
            eager = run(name, args.steps, None, False, schedule)
            rows = [("eager torch", eager),
                    ("compile_step, float lr", run(name, args.steps, dev, False, schedule))]
            if schedule == "cosine":
                rows.append(("compile_step, tensor lr", run(name, args.steps, dev, True)))
            rows.append(("traced, forward replayed, compile_optimizer, float lr",
                         run(name, args.steps, dev, False, schedule, whole=False)))
            for label, r in rows:
                diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], eager["losses"]))
                print(f"| {name} | {schedule} | {label} | {r['compiles']} | {r['replays']} "
                      f"| {r['median_ms']:.2f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
