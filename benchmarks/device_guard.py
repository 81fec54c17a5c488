"""Traced training steps with the lazy device's C++ guard (``lazy_runtime/native_guard.py``)
against torch's Python guard (what ``LAZY_RUNTIME_NATIVE_GUARD=0`` keeps).

    python benchmarks/device_guard.py [--blocks 16] [--steps 10] [--write]

Both guards in one process, alternated block by block (from process to process this
shared machine's step times moved by more than the difference). The process starts with
the C++ guard; torch's Python guard is then registered beside it by clearing the
PrivateUse1 slot of c10's guard registry, registering torch's own ``_DummyDeviceGuard``
(what ``_setup_privateuseone_for_python_backend`` registers), and the slot is switched
between the two (``guard_switch``: a benchmark's hack on torch's internals, not the
runtime's). Each example runs in a process of its own: ``--blocks`` blocks of
``--steps`` traced steps (trace, ``mark_step``, loss read) after warm-up, the guards
alternated; the median µs per recorded op of the step's Python before ``mark_step``,
wall time and the thread's CPU time (``time.thread_time``). ``--write`` puts the table
into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## The device guard in traced steps"
DATE = datetime.date.today().isoformat()   # (of the run)
NAMES = ("mlp", "cnn", "lstm", "gpt")
PRIVATE_USE1 = 20   # c10::DeviceType::PrivateUse1


def guard_switch():
    """``use(native)``: point c10's PrivateUse1 guard at the C++ guard or at torch's
    Python one."""
    import torch
    from lazy_runtime.backend import DEVICE_GUARD
    from torch.utils.backend_registration import _DummyDeviceGuard
    if DEVICE_GUARD[0] != "native":
        raise RuntimeError(f"the C++ guard is not in use: {DEVICE_GUARD[0]}")
    c10 = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libc10.so"))
    table = (ctypes.c_void_p * 64).from_address(ctypes.addressof(
        ctypes.c_void_p.in_dll(c10, "_ZN3c104impl26device_guard_impl_registryE")))
    native = table[PRIVATE_USE1]
    table[PRIVATE_USE1] = None
    python_guard = _DummyDeviceGuard()
    if not torch._C._acc.register_python_privateuseone_device_guard(python_guard):
        raise RuntimeError("torch did not register its Python guard")
    python = table[PRIVATE_USE1]

    def use(on: bool) -> None:
        table[PRIVATE_USE1] = native if on else python
    use.keep = python_guard   # (the registry does not own it)
    return use


def one_process(name: str, blocks: int, steps: int) -> dict:
    """Runs inside the child process: example ``name``'s traced steps, the guards
    alternated block by block."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lazy_runtime as lr
    from runtime_step import lazy_step
    from step_configs import config_named

    use = guard_switch()
    cfg = config_named(name, 20)
    step, _, _ = lazy_step(cfg, "plain")
    out = {g: {"wall": [], "cpu": []} for g in ("python", "native")}
    for b in range(blocks + 2):   # two warm-up blocks
        native = b % 2 == 1
        use(native)
        for i in range(steps):
            x, y = cfg.batches[(b * steps + i) % len(cfg.batches)]
            ops0 = lr.metrics()["traced_ops"]
            t0, c0 = time.perf_counter(), time.thread_time()
            loss = step(x, y)
            t1, c1 = time.perf_counter(), time.thread_time()
            lr.mark_step()
            loss.item()
            ops = lr.metrics()["traced_ops"] - ops0
            if b >= 2:
                row = out["native" if native else "python"]
                row["wall"].append((t1 - t0) / ops * 1e6)
                row["cpu"].append((c1 - c0) / ops * 1e6)
    return {g: {k: statistics.median(v) for k, v in r.items()} for g, r in out.items()}


def run(blocks: int, steps: int) -> dict:
    rows = {}
    for name in NAMES:
        done = subprocess.run([sys.executable, __file__, "--child", name, str(blocks),
                               str(steps)], capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
        rows[name] = r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:5s} python wall {r['python']['wall']:6.2f} cpu {r['python']['cpu']:6.2f}"
              f" | native wall {r['native']['wall']:6.2f} cpu {r['native']['cpu']:6.2f} us/op",
              flush=True)
    return rows


def table(rows, blocks, steps) -> str:
    lines = [f"{HEADING} ({DATE})", "",
             f"`python benchmarks/device_guard.py --blocks {blocks} --steps {steps} --write`: "
             "each example's traced training step with the runtime's C++ device guard "
             "(`lazy_runtime/native_guard.py`) and with torch's Python guard (what "
             "`LAZY_RUNTIME_NATIVE_GUARD=0` keeps), alternated in blocks of "
             f"{steps} steps in one process ({blocks} blocks after two warm-up blocks); µs "
             "per recorded op of the step's Python before `mark_step`, medians: wall time "
             "and the thread's CPU time.", "",
             "| example | Python guard, wall | C++ guard, wall | ratio | Python guard, CPU "
             "| C++ guard, CPU | ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in NAMES:
        p, n = rows[name]["python"], rows[name]["native"]
        lines.append(f"| {name} | {p['wall']:.2f} | {n['wall']:.2f} | {n['wall'] / p['wall']:.3f}x"
                     f" | {p['cpu']:.2f} | {n['cpu']:.2f} | {n['cpu'] / p['cpu']:.3f}x |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(one_process(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    text = table(run(a.blocks, a.steps), a.blocks, a.steps)
    emit(HEADING, text, a.write)


if __name__ == "__main__":
    main()
