"""Conformance sweep: torch's older nn test lists (``common_nn``) on the lazy device.

``torch.testing._internal.common_nn`` keeps the module and loss tests torch ran before
``ModuleInfo``: ``module_tests``, ``get_new_module_tests()`` and ``criterion_tests``,
282 entries with constructor variants the module database does not have (dilated and
grouped transposed convolutions, padding modes, losses without a batch dim, reductions).
Each entry's module is built as torch's test builds it, in its default dtype (float64
mostly), and called once eagerly on the CPU and once on the lazy device from the same
weights and inputs (a loss with its target), in training mode: outputs, the gradients of
sum(out_i * (w + i)) with respect to the floating inputs and every parameter, and the
buffers after the call, compared as ``module_sweep.py`` compares them (float64 within
1e-10). Statuses as there. Workers are subprocesses (``opinfo_sweep.run_workers``).

Usage: python benchmarks/nn_tests_sweep.py [--only Conv2d,L1Loss] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from module_sweep import TOLERANCE64, _call  # noqa: E402
from opinfo_sweep import _compare, guarded, report, run_workers  # noqa: E402

# Entries whose values cannot equal torch's, with the reason (a prefix of the test name).
KNOWN = {
    "RReLU": "random: the slopes come from the lazy random stream",
    "FractionalMaxPool": "random: the pooling regions come from the lazy random stream",
    "Embedding_sparse": "refused: sparse gradients have no lazy form",
    "EmbeddingBag_sparse": "refused: sparse gradients have no lazy form",
}


def entries() -> list:
    """(name, test object, is a loss) of every entry, in a fixed order."""
    from torch.testing._internal import common_nn as C
    import torch.nn as nn
    out = []
    for kind, tests in ((C.NewModuleTest, C.module_tests + C.get_new_module_tests()),
                        (C.CriterionTest, C.criterion_tests)):
        for d in tests:
            d = dict(d)
            if "constructor" not in d:
                d["constructor"] = getattr(nn, d["module_name"])
            d.pop("module_name", None)
            test = kind(**d)
            out.append((test.get_name()[len("test_"):], test, kind is C.CriterionTest))
    return out


def _run(test, is_loss: bool) -> dict:
    import torch
    import lazy_runtime as lr
    from torch.testing._internal.common_utils import set_default_dtype
    dtype = getattr(test, "default_dtype", None) or \
        test._extra_kwargs.get("default_dtype", torch.float64)
    with set_default_dtype(dtype):
        torch.manual_seed(0)
        module = test.constructor(*test.constructor_args)
        inputs = test._get_input()
        args = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if is_loss:
            args.append(test._get_target())
        args += list(test.extra_args)
    args = [a.detach().requires_grad_(a.is_floating_point() or a.is_complex())
            if isinstance(a, torch.Tensor) else a for a in args]
    sample = types.SimpleNamespace(forward_input=types.SimpleNamespace(args=args, kwargs={}))
    lr.reset_metrics()
    try:
        want = _call(copy.deepcopy(module), sample, "cpu", True)
    except Exception as e:   # (torch itself refuses: not the device's business)
        return {"status": "skipped", "detail": f"torch: {type(e).__name__}: {str(e)[:150]}"}
    try:
        got = _call(copy.deepcopy(module).to(lr.device()), sample, lr.device(), True)
        lr.mark_step()
    except Exception as e:
        return {"status": "lazy_error", "detail": f"{type(e).__name__}: {str(e)[:200]}"}
    rec: dict = {}
    for what, a, b in zip(("output", "gradient", "buffer"), want, got):
        d = _compare(a, b)
        if d:
            rec.update(status="differs", detail=f"{what}: {d}")
            break
    fallbacks = dict(lr.metrics()["fallback_ops"])
    if "status" not in rec:
        rec["status"] = "fallback" if fallbacks else "match"
    if fallbacks:
        rec["fallback_ops"] = fallbacks
    return rec


def worker(start: int, stop: int, only) -> None:
    """Sweep entries start..stop, one JSON line each (flushed: a crash loses one)."""
    import opinfo_sweep
    opinfo_sweep.WIDE_TOLERANCE[0] = TOLERANCE64
    tests = entries()
    for i in range(start, min(stop, len(tests))):
        name, test, is_loss = tests[i]
        if only and not any(name.startswith(o) for o in only):
            continue
        print(json.dumps({"i": i, "op": name, "dtype": "nn", "started": True}), flush=True)
        rec = guarded(lambda: _run(test, is_loss))
        rec.update(i=i, op=name, dtype="nn")
        print(json.dumps(rec), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help="comma-separated prefixes of test names")
    p.add_argument("--json", default="", help="write every record here")
    p.add_argument("--worker", nargs=2, metavar=("START", "STOP"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    only = [s for s in a.only.split(",") if s]
    if a.worker:
        worker(int(a.worker[0]), int(a.worker[1]), only)
        return 0
    total = len(entries())
    records = run_workers(lambda start: [sys.executable, __file__, "--worker", str(start),
                                         str(total), "--only", a.only], total, "nn")
    report(records, lambda r: next((w for k, w in KNOWN.items() if r["op"].startswith(k)),
                                   None) if r["status"] in ("differs", "lazy_error") else None,
           "tests", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
