"""Python's garbage collector in training steps whose lengths vary, with the runtime's
pause of automatic collection (``lazy_runtime.heap.paused``, ``config.pause_gc``) off
and on.

    python benchmarks/gc_varying_lengths.py [--steps 200] [--pairs 2] [--write]

The GPT and lengths of ``variable_length.py`` (batch 8, lengths uniform in [16, 256]),
the forward under ``lr.compile(model, shapes=plan)`` and AdamW under
``lr.compile_optimizer``, each step ending with the loss read; two loops: the step traced
each time (``traced``) and the step under ``lr.compile_step`` (``whole step``: replayed
once its length has been traced and confirmed, traced otherwise). Each (loop, mode) runs
in a process of its own (the heap freeze happens once a process), the modes alternated
pair by pair; the steps after the first ``--steps // 2`` are timed (compiles, four in
all, come early). Full: Python's generation-2 collections in those steps and their time;
young: the generation 0 and 1 collections' time per step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

from gc_pauses import Collections, _med, child

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Python's collector in steps whose lengths vary"
DATE = datetime.date.today().isoformat()   # (of the run)
LOOPS = ("traced", "whole step")


def one_process(loop: str, pause: bool, steps: int) -> dict:
    """Runs inside the child process."""
    import copy
    import gc

    import torch
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lazy_runtime as lr
    import shapeinfer
    import variable_length as V

    torch.set_num_threads(1)
    lr.config.pause_gc = pause
    dev = lr.device()
    base = V.make_model()
    plan = shapeinfer.analyze(base, args=(torch.randint(0, 64, (2, 12)),),
                              dims={"idx": ("B", "T")})
    model = copy.deepcopy(base).to(dev)
    opt = V.EX.make_optimizer(model)
    lr.compile_optimizer(opt)
    fwd = lr.compile(model, shapes=plan)

    def one_step(x, y):
        loss = V.EX.loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lr.mark_step()
        return loss
    run = lr.compile_step(one_step, model, opt) if loop == "whole step" else \
        lambda x, y: one_step(x.to(dev), y.to(dev))
    seen = Collections()
    times = []
    warm = steps // 2
    for step, T in enumerate(V.lengths(steps)):
        if step == warm:
            gc.callbacks.append(seen)
        x, y = V.EX.make_batch(step, batch=8, length=T)
        t0 = time.perf_counter()
        run(x, y).item()
        if step >= warm:
            times.append(time.perf_counter() - t0)
    gc.callbacks.remove(seen)
    return dict(total_s=sum(times), mean_ms=statistics.mean(times) * 1e3,
                median_ms=statistics.median(times) * 1e3, counts=seen.counts,
                spent_ms=[s * 1e3 for s in seen.spent], timed=len(times),
                replays=lr.metrics()["step_replays"], compiles=lr.metrics()["compiles"])


def run(steps: int, pairs: int) -> dict:
    rows = {(loop, p): [] for loop in LOOPS for p in (False, True)}
    for k in range(pairs):
        for loop in LOOPS:
            for pause in ((False, True) if k % 2 == 0 else (True, False)):
                r = child(__file__, "--child", loop, str(int(pause)), str(steps))
                rows[loop, pause].append(r)
                print(f"{loop:10s} pause={'on ' if pause else 'off'} total {r['total_s']:.2f} s"
                      f" mean {r['mean_ms']:6.2f} ms median {r['median_ms']:6.2f} ms | "
                      f"collections {r['counts']} "
                      f"({', '.join(f'{s:.1f}' for s in r['spent_ms'])} ms)", flush=True)
    return rows


def table(rows, steps, pairs) -> str:
    timed = steps - steps // 2
    lines = [f"{HEADING} ({DATE})", "",
             f"`python benchmarks/gc_varying_lengths.py --steps {steps} --pairs {pairs} "
             f"--write`: the GPT of \"Shape-polymorphic compilation\" (batch 8, lengths "
             f"uniform in [16, 256]), its forward under `lr.compile` with the analyzer's plan "
             f"and AdamW under `lr.compile_optimizer`, each step ending with the loss read; "
             f"the step traced every time, or under `lr.compile_step`. {steps} steps in a "
             f"process of its own per run, the last {timed} timed, with the runtime's pause of "
             "automatic collection (`config.pause_gc`, see lazy_runtime/README, Policies) off "
             f"and on, alternated; {pairs} processes per cell, medians over them. Full: "
             "Python's generation-2 collections in the timed steps and their time; young: "
             "the generation 0 and 1 collections' time per step.", "",
             "| loop | pause | full collections | their time (ms) | young (ms/step) "
             "| timed steps (s) | step mean (ms) | step median (ms) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for loop in LOOPS:
        for pause in (False, True):
            rs = rows[loop, pause]
            lines.append(
                f"| {loop} | {'on' if pause else 'off'} | {_med(rs, lambda r: r['counts'][2]):g}"
                f" | {_med(rs, lambda r: r['spent_ms'][2]):.1f}"
                f" | {_med(rs, lambda r: (r['spent_ms'][0] + r['spent_ms'][1]) / timed):.3f}"
                f" | {_med(rs, lambda r: r['total_s']):.2f}"
                f" | {_med(rs, lambda r: r['mean_ms']):.2f}"
                f" | {_med(rs, lambda r: r['median_ms']):.2f} |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        loop, pause, steps = sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
        print(json.dumps(one_process(loop, pause, steps)))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    emit(HEADING, table(run(a.steps, a.pairs), a.steps, a.pairs), a.write)


if __name__ == "__main__":
    main()
