"""Training-step time of each example: eager torch (CPU), lazy_runtime, and the same model
written directly with jax.jit; tracing overhead per recorded op; time to first result.

    python benchmarks/runtime_step.py [--steps 20] [--rounds 10] [--write]
    python benchmarks/runtime_step.py --eager-device cuda [--write]   # on a GPU machine

``--write`` puts the table into benchmarks/RESULTS.md under "## lazy_runtime" (replacing
only that section), or "## lazy_runtime on a GPU" with ``--eager-device cuda`` (eager torch
on CUDA; lazy_runtime and jax.jit then run on jax's default device, XLA:GPU). Eager torch,
the whole step replayed and jax.jit run side by side in alternating blocks of ``--steps``
steps (``--rounds`` each); eager torch runs first, in a process of its own
(``eager_step``: on the CPU, its OpenMP workers spin on after each block and slowed the
lazy block that followed; on CUDA, torch breaks a backward in a process that imported
lazy_runtime); the traced and replayed lazy modes run after them. Medians after warm-up;
every timed step ends with the loss read back to the host, so asynchronous execution is
not flattered.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import statistics
import sys
import time
from pathlib import Path

import jax
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402
from step_configs import WARMUP, configs, training_step  # noqa: E402
import runtime_jax_models as jm  # noqa: E402
from results_file import replace_section  # noqa: E402

lr.config.compile_cache = None   # first results are timed with cold compiles

DATE = datetime.date.today().isoformat()   # (of the run)


def _median_ms(ts):
    return statistics.median(ts) * 1e3


def eager_in_own_process(steps, rounds):
    """``eager_step``'s medians on ``EAGER_DEVICE``, from a process without lazy_runtime,
    run before this process's contenders. Not alternated with them, on purpose. On the
    CPU, torch's OpenMP workers spin-wait after its ops (libgomp's default) and took the
    cores from the next contender's XLA threads: alternated with eager torch, the MLP's
    whole step measured 1.22-1.43x of jax.jit, where without eager in the rotation, or
    with ``OMP_WAIT_POLICY=PASSIVE``, it measured 0.91-1.09x (four runs each, 2026-11-22).
    On CUDA, a backward fails in a process that imported lazy_runtime (see
    ``eager_step``)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "eager_step.py"), "--device",
           EAGER_DEVICE, "--steps", str(steps), "--rounds", str(rounds)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_side_by_side(cfg, rounds, eager_elsewhere):
    """The whole step replayed (``lr.compile_step``) and jax.jit in alternating blocks: each
    block one pass over the timed batches, ``rounds`` blocks each, after warm-up. A noisy
    moment of this shared machine lands on both alike (run one after another, the small
    steps' medians moved by 2x from run to run). Eager torch's numbers come from
    ``eager_elsewhere`` (its own process: ``eager_in_own_process``). Medians in ms; jax's
    first call (trace and compile) in s."""
    whole = lr.compile_step(*lazy_step(cfg, "whole"))
    lr.clear_cache()
    lr.reset_metrics()

    def lazy(x, y):
        whole(x, y).item()

    contenders = {"whole": lazy, "jax": jm.training_step(cfg.name, **cfg.jax_kwargs)}
    first = {}
    for name, f in contenders.items():
        for i, (x, y) in enumerate(cfg.batches[:WARMUP]):
            t0 = time.perf_counter()
            f(x, y)
            first.setdefault(name, time.perf_counter() - t0)
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, f in contenders.items():
            for x, y in cfg.batches[WARMUP:]:
                t0 = time.perf_counter()
                f(x, y)
                times[name].append(time.perf_counter() - t0)
    m = lr.metrics()
    out = {name: _median_ms(ts) for name, ts in times.items()}
    out["eager"] = eager_elsewhere[cfg.name]["eager"]
    out.update(jax_first_s=first["jax"], step_replays=m["step_replays"],
               whole_compiles=m["compiles"],
               whole_steps=WARMUP + rounds * (len(cfg.batches) - WARMUP))
    return out


def shape_only(cfg) -> bool:
    """The analyzer's verdict on the example's forward (its ``__shapeinfer__`` spec): does
    control flow depend only on shapes? That is what licenses replay."""
    import shapeinfer
    from shapeinfer.spec import load_targets
    target = load_targets(ROOT / "examples" / f"train_{cfg.name.split('-')[0]}.py")[0]
    args, kwargs = target.make_args()
    plan = shapeinfer.analyze(cfg.make_model(), args=args, kwargs=kwargs, dims=target.dims)
    return plan.shape_only


EAGER_DEVICE = "cpu"   # --eager-device


def lazy_step(cfg, mode):
    """(the example's training step on the lazy device, its model, its optimizer) for
    ``mode``: "plain" (traced every step), "replay" (forward/backward and optimizer
    replayed, loss traced) or "whole" (the optimizer replayed; ``lr.compile_step`` is the
    caller's)."""
    dev = lr.device()
    model = cfg.make_model().to(dev)
    if mode == "replay":
        model = lr.compile(model, replay=True)
    opt = cfg.ex.make_optimizer(model)
    if mode != "plain":
        opt = lr.compile_optimizer(opt)

    return training_step(cfg, model, opt, dev), model, opt


def timed_step(train_step, x, y):
    """(seconds before ``mark_step``, seconds to the loss read, ops recorded) of one lazy
    step."""
    ops0 = lr.metrics()["traced_ops"]
    t0 = time.perf_counter()
    loss = train_step(x, y)
    t1 = time.perf_counter()
    lr.mark_step()
    loss.item()
    return t1 - t0, time.perf_counter() - t0, lr.metrics()["traced_ops"] - ops0


def bench_lazy(cfg, steps, mode="plain"):
    """Lazy steps traced ("plain") or with forward, backward and optimizer replayed
    ("replay"), one after another (``lazy_step``)."""
    train_step, model, opt = lazy_step(cfg, mode)
    lr.clear_cache()
    lr.reset_metrics()
    times, trace_us = [], []
    ttfr = None
    for i, (x, y) in enumerate(cfg.batches[:steps + WARMUP]):
        trace_s, step_s, ops = timed_step(train_step, x, y)
        if i == 0:
            ttfr = step_s
        if i >= WARMUP:
            times.append(step_s)
            if ops:
                trace_us.append(trace_s / ops * 1e6)
    m = lr.metrics()
    return dict(step_ms=_median_ms(times), ttfr_s=ttfr,
                us_per_op=statistics.median(trace_us) if trace_us else float("nan"),
                ops_per_step=(m["traced_ops"]) // (steps + WARMUP), compiles=m["compiles"],
                replays=m["replays"])


def dispatch_us_per_op(cfg, steps):
    """µs per recorded op spent inside the runtime's ``__torch_dispatch__`` (recording,
    rules, views, write-back) during a traced step: the tracer's own share of the step's
    Python time, apart from torch's (autograd's engine, module and optimizer code).
    A separate run: the timer around each op adds its own small cost."""
    from lazy_runtime.tensor import LazyTensor
    train_step, model, opt = lazy_step(cfg, "plain")
    for x, y in cfg.batches[:WARMUP]:
        train_step(x, y)
        lr.mark_step()
    inner = LazyTensor.__dict__["__torch_dispatch__"]
    real, clock, spent, depth = inner.__func__, time.perf_counter, [0.0], [0]

    def timed(cls, func, types, args=(), kwargs=None):
        if depth[0]:   # an op recorded from inside another (a decomposition) counts once
            return real(cls, func, types, args, kwargs)
        depth[0] = 1
        t0 = clock()
        try:
            return real(cls, func, types, args, kwargs)
        finally:
            spent[0] += clock() - t0
            depth[0] = 0
    LazyTensor.__torch_dispatch__ = classmethod(timed)
    per_op = []
    try:
        for x, y in cfg.batches[WARMUP:WARMUP + steps]:
            spent[0], ops0 = 0.0, lr.metrics()["traced_ops"]
            train_step(x, y)
            per_op.append(spent[0] * 1e6 / (lr.metrics()["traced_ops"] - ops0))
            lr.mark_step()
    finally:
        LazyTensor.__torch_dispatch__ = inner
    return statistics.median(per_op)


def run(steps, rounds):
    rows = []
    elsewhere = eager_in_own_process(steps, rounds)
    for cfg in configs(steps):
        side = bench_side_by_side(cfg, rounds, elsewhere)
        lazy = bench_lazy(cfg, steps)
        lazy["dispatch_us_per_op"] = dispatch_us_per_op(cfg, steps)
        verdict = shape_only(cfg)
        rep = bench_lazy(cfg, steps, "replay") if verdict else None
        rows.append((cfg, side, lazy, rep))
        print(f"{cfg.name:9s} eager {side['eager']:8.2f} ms | whole step {side['whole']:8.2f} "
              f"ms ({side['step_replays']} of {side['whole_steps']} steps replayed whole, "
              f"{side['whole_compiles']} compiles) | jax.jit {side['jax']:8.2f} ms | whole/jax "
              f"{side['whole'] / side['jax']:.2f}x, whole/eager "
              f"{side['whole'] / side['eager']:.2f}x", flush=True)
        if rep is not None:
            print(f"{cfg.name:9s} replay {rep['step_ms']:8.2f} ms ({rep['ops_per_step']} ops/step "
                  f"traced, {rep['replays']} replays, {rep['compiles']} compiles)", flush=True)
        print(f"{cfg.name:9s} lazy {lazy['step_ms']:8.2f} ms ({lazy['ops_per_step']} ops/step, "
              f"{lazy['us_per_op']:.1f} us/op, first result {lazy['ttfr_s']:.2f} s, "
              f"{lazy['compiles']} compiles) | jax.jit first {side['jax_first_s']:.2f} s | "
              f"lazy/jax {lazy['step_ms'] / side['jax']:.2f}x, lazy/eager "
              f"{lazy['step_ms'] / side['eager']:.2f}x", flush=True)
    return rows


def bench_executables(cfg, reps=200):
    """The whole step's XLA executable alone (its inputs captured from one replay) against
    the jax.jit step, both waited for, alternated: what is left once Python is gone."""
    whole = lr.compile_step(*lazy_step(cfg, "whole"))
    lr.clear_cache()   # no graph family learnt from another row runs padded here
    replays = lr.metrics()["step_replays"]
    for x, y in cfg.batches:
        whole(x, y).item()
        if lr.metrics()["step_replays"] > replays:
            break
    exe = whole._last[2].ready.exe   # the trace just replayed
    real, seen = exe.compiled, []
    exe.compiled = lambda *a: seen.append(a) or real(*a)
    whole(x, y).item()
    exe.compiled = real
    contenders = {"whole step": lambda: real(*seen[0])}
    variants = {"jax.jit": {}}
    if cfg.name == "lstm":
        variants["jax.jit, loop unrolled"] = {"unroll": True}
    for label, extra in variants.items():
        params, opt_state, model_state, step = jm.MODELS[cfg.name.split("-")[0]](
            **cfg.jax_kwargs, **extra)
        xn, yn = (a.numpy() for a in cfg.batches[0])
        contenders[label] = (lambda step=step, a=(params, opt_state, model_state, xn, yn):
                             step(*a))
    times = {k: [] for k in contenders}
    for _ in range(reps):
        for k, f in contenders.items():
            t0 = time.perf_counter()
            with jax.enable_x64(k == "whole step"):
                jax.block_until_ready(f())
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def micro_overhead(n=5000):
    """Tracing cost of one recorded op (no autograd), in microseconds; for the
    ``_foreach_*`` ops of an optimizer, per tensor of a list of ten."""
    dev = lr.device()
    x = torch.randn(64, 64).to(dev)
    y = torch.randn(64, 64).to(dev)
    xs = [torch.randn(64, 32).to(dev) for _ in range(10)]
    ys = [torch.randn(64, 32).to(dev) for _ in range(10)]
    lr.mark_step()
    res = {}
    for name, fn, per in (
            ("add", lambda: x + y, 1), ("mul by float", lambda: x * 0.5, 1),
            ("matmul", lambda: x @ y, 1), ("view", lambda: x.view(-1), 1),
            ("foreach add_ with alpha", lambda: torch._foreach_add_(xs, ys, alpha=0.1), 10),
            ("foreach mul_ by float", lambda: torch._foreach_mul_(xs, 0.9), 10),
            ("foreach addcdiv_", lambda: torch._foreach_addcdiv_(xs, ys, ys, value=-0.01), 10),
            ("foreach sqrt", lambda: torch._foreach_sqrt(xs), 10)):
        samples = []
        calls = n // per
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - t0) / (calls * per) * 1e6)
            lr.sync()
        res[name] = statistics.median(samples)
    return res


def _title():
    return "## lazy_runtime" + ("" if EAGER_DEVICE == "cpu" else " on a GPU")


def table(rows, micro, steps, rounds):
    where = f"XLA:{jax.devices()[0].platform.upper()}"
    flag = "" if EAGER_DEVICE == "cpu" else f" --eager-device {EAGER_DEVICE}"
    lines = [f"{_title()} ({DATE})", "",
             f"`python benchmarks/runtime_step.py --steps {steps} --rounds {rounds}{flag} "
             f"--write`: {platform_line()}. "
             "One training step (forward, backward, optimizer) per row; each timed step ends "
             f"with `loss.item()`. eager: torch on `{EAGER_DEVICE}`"
             + (" (`benchmarks/eager_step.py`, in a process of its own before the others: "
                "torch's OpenMP workers spin on after its ops and, alternated with it, the "
                "lazy block after it ran up to 1.4x slower (see `eager_in_own_process`))"
                if EAGER_DEVICE == "cpu" else
                " (`benchmarks/eager_step.py`, in a process of its own before the others: "
                "with lazy_runtime imported torch takes the lazy device for the process's "
                "accelerator and a CUDA backward fails, pytorch/pytorch#161129; the batch "
                "copied to the GPU in the step, as the lazy and jax steps copy theirs)")
             + "; whole step: "
             f"`lr.compile_step(train_step, model, opt)` with `compile_optimizer` on {where}: "
             "the whole step (input copies, forward, loss, backward, optimizer, zero_grad) "
             "replayed without its Python from step 5 on; jax.jit: the same model hand-written "
             "in JAX (`benchmarks/runtime_jax_models.py`). "
             + "The whole step and jax.jit run side by side "
             f"(`bench_side_by_side`): in alternating blocks of {steps} steps, {rounds} blocks "
             f"each after {WARMUP} warm-up steps, medians of all"
             + ("; run one after another, the small steps' medians moved by up to 2x between "
                "runs on this shared machine. " if EAGER_DEVICE == "cpu" else ". ") +
             f"lazy: traced every step (trace + `mark_step` + read), median of {steps} steps "
             f"after {WARMUP} warm-up; replay: `lr.compile(model, replay=True)` where the "
             "analyzer finds the example's forward shape-only (all five) and "
             "`lr.compile_optimizer(opt)` (Adam/AdamW made capturable): forward and backward "
             "are replayed from step 2 on, the optimizer from step 3, the loss is still traced "
             "(ops/step counts what is traced, warm-up included). First result: trace + "
             "compile + run of step 1 from an empty cache. µs per recorded op: the step's "
             "Python time before `mark_step` (autograd, optimizer code and input copies "
             "included) over the ATen ops it recorded; in dispatch: the part of it spent "
             "inside the runtime's `__torch_dispatch__` (recording, rules, views, write-back; "
             "`dispatch_us_per_op`, a separate run), the rest being torch's own (autograd's "
             "engine, module and optimizer code). The small examples are tracing-bound "
             "(hundreds of ops of microseconds each); the wide MLP shows the runtime once each "
             "op does real work.", "",
             "| model | eager (ms) | lazy (ms) | lazy replay (ms) | whole step (ms) | jax.jit (ms) "
             "| lazy / jax.jit | replay / jax.jit | whole step / jax.jit | whole step / eager "
             "| ops/step traced (replay) | µs per recorded op | of which in dispatch "
             "| first result lazy (s) | first result jax (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cfg, side, lazy, rep in rows:
        r = rep["step_ms"] if rep else float("nan")
        e, w, j = side["eager"], side["whole"], side["jax"]
        lines.append(f"| {cfg.name} ({cfg.note}) | {e:.2f} | {lazy['step_ms']:.2f} | "
                     f"{r:.2f} | {w:.2f} | {j:.2f} | {lazy['step_ms'] / j:.2f}x | "
                     f"{r / j:.2f}x | {w / j:.2f}x | {w / e:.2f}x | {lazy['ops_per_step']} "
                     f"({rep['ops_per_step'] if rep else '-'}) | "
                     f"{lazy['us_per_op']:.1f} | {lazy['dispatch_us_per_op']:.1f} | "
                     f"{lazy['ttfr_s']:.2f} | "
                     f"{side['jax_first_s']:.2f} |")
    lines += ["", "Tracing overhead of one recorded op outside autograd (median of 5 x 5000; "
              "foreach: per tensor of a list of ten, `micro_overhead`): " +
              ", ".join(f"{k} {v:.1f} µs" for k, v in micro.items()) + ".", ""]
    return "\n".join(lines)


def executables_table(exes) -> str:
    lines = ["Executables alone (`bench_executables`: the whole step's XLA executable on inputs "
             "captured from one replay, against the jax.jit step; each call waited for; "
             "medians of 200 alternated calls, µs): what the step costs once no Python runs.",
             "", "| model | whole step executable | jax.jit | ratio | jax.jit, LSTM loop "
             "unrolled |", "|---|---:|---:|---:|---:|"]
    for name, t in exes:
        unrolled = t.get("jax.jit, loop unrolled")
        lines.append(f"| {name} | {t['whole step']:.0f} | {t['jax.jit']:.0f} | "
                     f"{t['whole step'] / t['jax.jit']:.2f}x | "
                     f"{'-' if unrolled is None else format(unrolled, '.0f')} |")
    return "\n".join(lines) + "\n"


def write_results(text):
    replace_section(_title(), text)


def platform_line():
    dev = jax.devices()[0]
    cuda = (f", {torch.cuda.get_device_name()}" if EAGER_DEVICE.startswith("cuda") else "")
    return (f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), "
            f"torch {torch.__version__}{cuda}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=10,
                   help="blocks of --steps steps per side-by-side contender")
    p.add_argument("--eager-device", default="cpu",
                   help="torch device of the eager contender (cuda on a GPU machine)")
    p.add_argument("--write", action="store_true")
    p.add_argument("--micro", action="store_true",
                   help="only the tracing overhead of single ops (printed, not written)")
    args = p.parse_args()
    if args.micro:
        print(", ".join(f"{k} {v:.2f} µs" for k, v in micro_overhead().items()))
        return
    global EAGER_DEVICE
    EAGER_DEVICE = args.eager_device
    print(platform_line())
    rows = run(args.steps, args.rounds)
    micro = micro_overhead()
    text = table(rows, micro, args.steps, args.rounds)
    exes = [(cfg.name, bench_executables(cfg)) for cfg in configs(args.steps)]
    text += "\n" + executables_table(exes)
    print(text)
    if args.write:
        write_results(text)


if __name__ == "__main__":
    main()
