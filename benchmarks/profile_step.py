"""Where a replayed whole training step (``lr.compile_step``) spends its host time: the
step's median time, then a cProfile of ``--steps`` replayed steps by own time. The step is
``step_configs``' (its batch copied to the device in the step, the loss read back).

    python benchmarks/profile_step.py [mlp|cnn|lstm|gpt|mlp-wide] [--steps 400] [--top 30]
    python benchmarks/profile_step.py gpt --jax    # the hand-written jax.jit step instead
    python benchmarks/profile_step.py gpt --phases # medians of each part of a step, both

On a GPU the executable's call returns before the GPU is done, so the wait shows in the
loss read (``_read_direct``), not in the call.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from lazy_runtime import state_stamp  # noqa: E402
from lazy_runtime import step as lr_step  # noqa: E402
from step_configs import config_named, training_step  # noqa: E402
import runtime_jax_models as jm  # noqa: E402


def replayed_step(name: str, steps: int):
    """(``step(x, y) -> loss`` replayed whole, the batches) after warm-up."""
    cfg = config_named(name, steps)
    dev = lr.device()
    model = cfg.make_model().to(dev)
    opt = lr.compile_optimizer(cfg.ex.make_optimizer(model))
    step = lr.compile_step(training_step(cfg, model, opt, dev), model, opt)
    for i in range(10):
        x, y = cfg.batches[i % len(cfg.batches)]
        step(x, y).item()
    if not lr.metrics()["step_replays"]:
        raise SystemExit(f"{name}: the step was not replayed whole after 10 steps")
    return step, cfg.batches


def jax_step(name: str, steps: int, read=True):
    """(the hand-written jax.jit step, the batches) after warm-up."""
    cfg = config_named(name, steps)
    step = jm.training_step(cfg.name, read=read, **cfg.jax_kwargs)
    for i in range(10):
        step(*cfg.batches[i % len(cfg.batches)])
    return step, cfg.batches


def phases(name: str, steps: int, rounds: int = 10) -> None:
    """Medians (µs) of each part of a step, the replayed step and jax.jit alternated in
    blocks of one pass over the ``steps`` + 5 batches, ``rounds`` each: the runtime's Python before the executable's call, the call
    (inputs sent, kernels launched), the runtime's Python after it (of which the state
    guard and the write-back, which frees the step's old values), and the loss read (the
    wait for the device included)."""
    replayed, batches = replayed_step(name, steps)
    jitted, _ = jax_step(name, steps, read=False)
    exe = replayed._last[2].ready.exe
    real, marks = exe.compiled, []
    spent = {"guard": 0.0, "write-back": 0.0}

    def timed(*a):
        marks.append(time.perf_counter())
        out = real(*a)
        marks.append(time.perf_counter())
        return out

    def timing(part, fn):
        def run(*a):
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                spent[part] += time.perf_counter() - t0
        return run
    exe.compiled = timed
    # (within "after call": the state guard, and the write-back, which frees the old values)
    real_holds, real_write = state_stamp.StateStamp.holds, lr_step._write_state
    state_stamp.StateStamp.holds = timing("guard", real_holds)
    lr_step._write_state = timing("write-back", real_write)
    parts = {k: [] for k in ("before call", "call", "after call", "guard", "write-back",
                             "read", "step")}
    jparts = {k: [] for k in ("call", "read", "step")}
    for _ in range(rounds):
        for x, y in batches:
            marks.clear()
            spent.update(dict.fromkeys(spent, 0.0))
            t0 = time.perf_counter()
            loss = replayed(x, y)
            t3 = time.perf_counter()
            loss.item()
            t4 = time.perf_counter()
            if len(marks) == 2:
                t1, t2 = marks
                for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, spent["guard"],
                                        spent["write-back"], t4 - t3, t4 - t0)):
                    parts[k].append(v)
        for x, y in batches:
            t0 = time.perf_counter()
            loss = jitted(x, y)
            t1 = time.perf_counter()
            float(loss)
            t2 = time.perf_counter()
            for k, v in zip(jparts, (t1 - t0, t2 - t1, t2 - t0)):
                jparts[k].append(v)
    exe.compiled = real
    state_stamp.StateStamp.holds, lr_step._write_state = real_holds, real_write

    def row(label, d):
        return f"{label:10s}" + "".join(
            f" | {k} {statistics.median(v) * 1e6:7.1f}" for k, v in d.items())
    print(f"{name} on {lr.config.jax_device()}, medians in µs of {len(parts['step'])} "
          f"and {len(jparts['step'])} steps")
    print(row("replayed", parts))
    print(row("jax.jit", jparts))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="mlp")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--jax", action="store_true", help="profile the jax.jit step instead")
    p.add_argument("--phases", action="store_true",
                   help="time each part of a step, the replayed step and jax.jit's")
    a = p.parse_args()
    if a.phases:
        return phases(a.model, min(a.steps, 50))
    if a.jax:
        step, batches = jax_step(a.model, a.steps)
        what = "jax.jit"
    else:
        replayed, batches = replayed_step(a.model, a.steps)
        what = "replayed"

        def step(x, y):
            return replayed(x, y).item()

    def run(n):
        for i in range(n):
            step(*batches[i % len(batches)])

    times = []
    for i in range(a.steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)
    print(f"{a.model}: median step {statistics.median(times) * 1e3:.3f} ms over {a.steps} "
          f"{what} steps ({lr.config.jax_device()})")
    prof = cProfile.Profile()
    prof.enable()
    run(a.steps)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
