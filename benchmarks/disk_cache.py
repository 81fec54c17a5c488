"""Time to first result with compiled executables on disk (``config.compile_cache``)
against cold compiles, for each example's training step.

    python benchmarks/disk_cache.py [--rounds 3] [--names mlp,cnn,lstm,gpt] [--write]

Each measurement is a fresh process (a first result is a process's first): the first
training step traced, ``mark_step`` and the loss read, timed from before the model is
moved to the device. "cold": an empty cache folder (every graph compiled, then stored);
"disk": the same folder again (every graph loaded). The two alternate, round after round,
each round with a new folder; reported: medians of the rounds. ``--write`` puts the table
into benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Compiled executables on disk: time to first result"
NAMES = ("mlp", "cnn", "lstm", "gpt")

ONE_PROCESS = """
import json, sys, time
sys.path[:0] = [{root!r}, {benchmarks!r}]
import lazy_runtime as lr
from step_configs import configs, training_step
cfg = next(c for c in configs(2) if c.name.split(" ")[0] == {name!r})
dev = lr.device()
t0 = time.perf_counter()
model = cfg.make_model().to(dev)
step = training_step(cfg, model, cfg.ex.make_optimizer(model), dev)
loss = step(*cfg.batches[0])
lr.mark_step()
loss.item()
m = lr.metrics()
print(json.dumps({{"first_s": time.perf_counter() - t0, "compile_s": m["compile_seconds"],
                  "compiles": m["compiles"], "disk_hits": m["disk_cache_hits"]}}))
"""


def first_result(name: str, folder: str) -> dict:
    code = ONE_PROCESS.format(root=str(ROOT), benchmarks=str(ROOT / "benchmarks"), name=name)
    env = {**os.environ, "LAZY_RUNTIME_COMPILE_CACHE": folder}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(names, rounds: int) -> dict:
    rows = {}
    for name in names:
        runs = {"cold": [], "disk": []}
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as tmp:
                folder = os.path.join(tmp, "xla")
                runs["cold"].append(first_result(name, folder))
                runs["disk"].append(first_result(name, folder))
        assert all(r["disk_hits"] == r["compiles"] for r in runs["disk"]), runs["disk"]
        rows[name] = {mode: {k: statistics.median(r[k] for r in rs)
                             for k in ("first_s", "compile_s", "compiles")}
                      for mode, rs in runs.items()}
        print(name, rows[name], flush=True)
    return rows


def table(rows: dict, rounds: int) -> str:
    import jax
    import torch
    lines = [f"{HEADING} ({datetime.date.today().isoformat()})", "",
             f"`python benchmarks/disk_cache.py --rounds {rounds} --write`: jax "
             f"{jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__}. "
             "Each example's first training step in a fresh process (model to the device, "
             "trace, `mark_step`, loss read): with an empty compile cache folder (cold: "
             "every graph compiled) and then the same folder again (every graph loaded from "
             f"disk); medians of {rounds} rounds, a new folder each. Compile: the runtime's "
             "`compile_seconds` (lowering to JAX included, which runs either way).",
             "",
             "| example | graphs | first result, cold (s) | first result, disk (s) | cold / disk "
             "| compile, cold (s) | compile, disk (s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        cold, disk = r["cold"], r["disk"]
        lines.append(f"| {name} | {cold['compiles']:.0f} | {cold['first_s']:.2f} "
                     f"| {disk['first_s']:.2f} | {cold['first_s'] / disk['first_s']:.2f}x "
                     f"| {cold['compile_s']:.2f} | {disk['compile_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--names", default=",".join(NAMES))
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    emit(HEADING, table(bench(a.names.split(","), a.rounds), a.rounds), a.write)


if __name__ == "__main__":
    main()
