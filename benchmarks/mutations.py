"""Mutation benchmark for shape-bug finding: generate shape-breaking edits of every
example model, classify each by running it with torch (sample size + oracle sizes),
and check that the analyzer reports the breaking ones and stays silent on the benign
ones. The generator and the rules are in tests/mutations.py.

Usage: python benchmarks/mutations.py [--files mnist.py,vae.py] [--kinds width,slice]
                                      [--markdown] [--json out.json] [--all-problems]
Prints the unedited models' error counts, a table per mutation kind (precision and
recall), then every missed bug and every false alarm with the edit, torch's error and
the analyzer's diagnostics. About 3 minutes for everything on 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import mutations as M  # noqa: E402
import shapeinfer  # noqa: E402
from shapeinfer.spec import load_targets  # noqa: E402

PROBLEMS = ("missed", "wrong-line", "bad-when", "warning", "false-alarm")


def unedited_errors(files) -> list[str]:
    out = []
    for path in files:
        with contextlib.redirect_stdout(io.StringIO()):
            targets = load_targets(path)
        for t in targets:
            args, kwargs = t.make_args(t.sizes)
            res = shapeinfer.analyze(t.model, args=args, kwargs=kwargs, dims=t.dims)
            out += [f"{path.name}: {d.code} line {d.line}: {d.message}" for d in res.errors]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", help="comma-separated example file names (default: all examples/*.py)")
    ap.add_argument("--kinds", help=f"comma-separated kinds (default: {','.join(M.KINDS)})")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--json", help="write every outcome to this file")
    ap.add_argument("--all-problems", action="store_true",
                    help="also list SI300-only finds (listed by default) and build errors")
    args = ap.parse_args()
    files = M.example_files()
    if args.files:
        wanted = set(args.files.split(","))
        files = [p for p in files if p.name in wanted]
    kinds = tuple(args.kinds.split(",")) if args.kinds else M.KINDS

    start = time.perf_counter()
    errs = unedited_errors(files)
    print(f"unedited models: {len(files)} files, {len(errs)} error diagnostic(s)")
    for e in errs:
        print("  " + e)
    outcomes = []
    per_file = collections.Counter()
    for path in files:
        t0 = time.perf_counter()
        for mutant in M.generate(path, kinds):
            outcomes.append(M.evaluate(mutant))
            per_file[path.name] += 1
        print(f"  {path.name}: {per_file[path.name]} mutants in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    elapsed = time.perf_counter() - start
    rows = M.summarize(outcomes)
    print()
    print(M.format_table(rows, markdown=args.markdown))
    print(f"\n{len(outcomes)} mutants of {len(files)} files in {elapsed:.0f} s")

    print("\nPer file (breaking: found / total; benign: false alarms / total):")
    for path in files:
        sel = [o for o in outcomes if o.mutant.file == path]
        brk = [o for o in sel if o.breaking]
        ben = [o for o in sel if o.benign]
        print(f"  {path.name:<30} breaking {sum(o.status == 'found' for o in brk):3d} / {len(brk):3d}   "
              f"benign {sum(o.status == 'false-alarm' for o in ben):2d} / {len(ben):3d}")

    for status in PROBLEMS:
        sel = [o for o in outcomes if o.status == status]
        if not sel:
            continue
        title = {"missed": "Missed bugs (torch fails, the analyzer reports no error)",
                 "wrong-line": "Errors only at other lines (torch fails elsewhere first)",
                 "bad-when": "Error at the right line but its `when` misses the failing sizes",
                 "warning": "Found only by an SI300 warning whose `when` holds where torch failed",
                 "false-alarm": "False alarms (torch runs at every size, the analyzer reports an error)"}[status]
        print(f"\n## {title}: {len(sel)}\n")
        for o in sel:
            print(M.describe(o))
            print()
    if args.all_problems:
        sel = [o for o in outcomes if o.klass == "build-error"]
        print(f"\n## Build errors (left out): {len(sel)}\n")
        for o in sel:
            print(f"{o.mutant.id}: {o.mutant.description}: {o.note}")

    if args.json:
        data = {"table": rows, "unedited_errors": errs, "outcomes": [
            {"id": o.mutant.id, "kind": o.mutant.kind, "lines": list(o.mutant.lines),
             "description": o.mutant.description, "class": o.klass, "status": o.status,
             "failures": [vars(f) for f in o.failures], "diagnostics": o.diagnostics,
             "names_dims": o.names_dims, "note": o.note} for o in outcomes]}
        Path(args.json).write_text(json.dumps(data, indent=1, default=str))


if __name__ == "__main__":
    main()
