"""Analysis of third-party models (Hugging Face transformers) against real runs, and the
time torch.export with the same dynamic dims takes on the same model.

Usage: python benchmarks/third_party.py   (needs the 'models' extra)
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import shapeinfer  # noqa: E402
from shapeinfer.interp.state import clear_parsed_sources  # noqa: E402
from third_party_models import HF_TARGETS, OTHER_TARGETS, run_oracle  # noqa: E402


def time_analysis(target, runs=3) -> tuple[float, float]:
    """(cold, warm) seconds: the first analysis parses every source file it reads; later
    ones in the same process reuse the parsed files (median of ``runs``)."""
    model = target.build()
    kwargs = target.make_inputs(target.sizes[0])
    clear_parsed_sources()
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        shapeinfer.analyze(model, kwargs=kwargs, dims=target.dims)
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[1:])


def time_export(target) -> str:
    model = target.build()
    kwargs = target.make_inputs(target.sizes[0])
    dims = {}
    for name, spec in target.dims.items():
        dims[name] = {i: torch.export.Dim(d, min=1 if d == "B" else 2, max=64)
                      for i, d in enumerate(spec) if isinstance(d, str)}
    note = ""
    for attempt in range(2):
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.export.export(model, (), kwargs=kwargs, dynamic_shapes=dims)
            return f"{time.perf_counter() - start:.2f} s{note}"
        except Exception as e:  # report, do not hide: export failing is a result
            if attempt == 0 and "DynamicCache" in str(e):
                # decoder models return a cache object export cannot flatten: retry without
                kwargs = {**kwargs, "use_cache": False}
                dims = {**dims, "use_cache": None}
                note = " (with use_cache=False)"
                continue
            return f"failed after {time.perf_counter() - start:.1f} s ({type(e).__name__}: {str(e)[:60]})"
    return "failed"


def main() -> None:
    print(f"{'model':<16} {'exact':>6} {'unknown':>8} {'wrong':>6} {'exact %':>8} {'errors':>7} "
          f"{'analysis s cold/warm':>20}  torch.export")
    for target in HF_TARGETS + OTHER_TARGETS:
        result, report = run_oracle(target)
        total = report.exact + report.unknown + report.wrong
        print(f"{target.name:<16} {report.exact:6d} {report.unknown:8d} {report.wrong:6d} "
              f"{100 * report.exact / total:7.1f}% {len(result.errors):7d} {'%.2f / %.3f' % time_analysis(target):>20}  "
              f"{time_export(target)}", flush=True)


if __name__ == "__main__":
    main()
