"""Time the analysis of every example model (median of several runs).

Usage: python benchmarks/analyze.py [--runs N]
The first analysis in a process also pays for imports and sympy's caches; it is
reported separately as "first" and excluded from the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import shapeinfer  # noqa: E402
from shapeinfer.spec import load_targets  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    rows = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.name.startswith("train_"):
            continue  # lazy-runtime training scripts, not analysis targets
        for t in load_targets(path):
            targs, tkwargs = t.make_args(t.sizes)
            times = []
            for _ in range(args.runs + 1):
                start = time.perf_counter()
                result = shapeinfer.analyze(t.model, args=targs, kwargs=tkwargs, dims=t.dims)
                times.append(time.perf_counter() - start)
            rows.append((f"{path.name}:{type(t.model).__name__}", times[0], statistics.median(times[1:]),
                         len(result.entries)))
    print(f"{'model':<48} {'first s':>8} {'median s':>9} {'entries':>8}")
    for name, first, med, n in rows:
        print(f"{name:<48} {first:8.3f} {med:9.3f} {n:8d}")


if __name__ == "__main__":
    main()
