"""The memo of pure rules' answers (``dispatch._memo_key``) on and off, in traced
training steps of the examples.

    python benchmarks/rule_memo.py [--blocks 20] [--steps 10] [--write]

Example after example in one process; the memo (emptied for each) is switched on and off
between blocks of ``--steps``
traced steps (trace, ``mark_step``, loss read), alternated so that both see the machine's
same minutes, after 5 warm-up steps. Reported: µs per recorded op of the trace (the
step's Python before ``mark_step`` over the ops it recorded, as ``runtime_step.py``'s
column), medians over all steps of a mode, and the memo's entries at the end (a bounded
number: its keys repeat from step to step). ``--write`` puts the table into
benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## The rule memo in traced steps"
NAMES = ("mlp", "cnn", "lstm", "gpt")


def _switch(on: bool, pure: set) -> None:
    from lazy_runtime import dispatch
    dispatch.PURE_RULES.clear()
    if on:
        dispatch.PURE_RULES.update(pure)
    dispatch._RULE_CACHE.clear()   # (it holds each op's pure flag)


def bench(name: str, blocks: int, steps: int) -> dict:
    import lazy_runtime as lr
    from lazy_runtime import dispatch
    from lazy_runtime.metrics import METRICS
    from runtime_step import dispatch_us_per_op, lazy_step
    from step_configs import WARMUP, config_named

    pure = set(dispatch.PURE_RULES)
    cfg = config_named(name, 2 * steps)   # (batches for dispatch_us_per_op's steps)
    step, _, _ = lazy_step(cfg, "plain")
    dispatch._RULE_MEMO.clear()
    for i in range(WARMUP):
        x, y = cfg.batches[i % len(cfg.batches)]
        loss = step(x, y)
        lr.mark_step()
        loss.item()
    per_op = {True: [], False: []}
    try:
        for b in range(blocks):
            for on in ((True, False) if b % 2 else (False, True)):
                _switch(on, pure)
                for i in range(steps):
                    x, y = cfg.batches[i % len(cfg.batches)]
                    ops0 = METRICS.traced_ops
                    t0 = time.perf_counter()
                    loss = step(x, y)
                    t1 = time.perf_counter()
                    lr.mark_step()
                    loss.item()
                    per_op[on].append((t1 - t0) * 1e6 / (METRICS.traced_ops - ops0))
        entries = len(dispatch._RULE_MEMO)
        inside = {True: [], False: []}
        for r in range(6):
            for on in ((True, False) if r % 2 else (False, True)):
                _switch(on, pure)
                inside[on].append(dispatch_us_per_op(cfg, 2 * steps))
    finally:
        _switch(True, pure)
    return {"off": statistics.median(per_op[False]), "on": statistics.median(per_op[True]),
            "entries": entries, "dispatch_off": statistics.median(inside[False]),
            "dispatch_on": statistics.median(inside[True])}


def table(rows: dict, blocks: int, steps: int) -> str:
    import jax
    import torch
    lines = [f"{HEADING} ({datetime.date.today().isoformat()})", "",
             f"`python benchmarks/rule_memo.py --blocks {blocks} --steps {steps} --write`: "
             f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__}. "
             "Traced training steps of each example (every op recorded, `mark_step`, loss "
             "read) with the memo of pure rules' answers on and off, alternated in blocks "
             f"of {steps} steps in one process ({blocks} blocks of each). µs per recorded op: "
             "the step's Python before `mark_step` over the ops it recorded (torch's "
             "autograd, module and optimizer code included), medians of all steps of a mode. "
             "In dispatch: the part of it inside the runtime's `__torch_dispatch__` "
             "(`runtime_step.dispatch_us_per_op`, six runs of each mode alternated, "
             f"{2 * steps} steps each, medians), steadier on this shared machine.",
             "",
             "| example | memo off (µs/op) | memo on (µs/op) | on / off | in dispatch off "
             "| in dispatch on | on / off | memo entries |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['off']:.2f} | {r['on']:.2f} | {r['on'] / r['off']:.3f}x "
                     f"| {r['dispatch_off']:.2f} | {r['dispatch_on']:.2f} "
                     f"| {r['dispatch_on'] / r['dispatch_off']:.3f}x | {r['entries']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--names", default=",".join(NAMES))
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    rows = {}
    for name in a.names.split(","):
        rows[name] = bench(name, a.blocks, a.steps)
        print(name, rows[name], flush=True)
    emit(HEADING, table(rows, a.blocks, a.steps), a.write)


if __name__ == "__main__":
    main()
