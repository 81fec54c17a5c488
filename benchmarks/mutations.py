"""Mutation benchmark for shape-bug finding: generate shape-breaking edits of every
example model and of the third-party targets' own modeling files, classify each by
running it with torch (sample size + oracle sizes), and check that the analyzer reports
the breaking ones and stays silent on the benign ones. The generator and the rules are
in tests/mutations.py (third-party files: tests/mutations_third_party.py).

Usage: python benchmarks/mutations.py [--suite examples|third-party|all]
                                      [--files mnist.py,vae.py] [--targets DistilBERT,OPT]
                                      [--kinds width,slice] [--per-kind N]
                                      [--markdown] [--json out.json] [--all-problems]
Prints the unedited models' error counts, a table per mutation kind (precision and
recall) for each suite, a table per third-party model, then every missed bug and every
false alarm with the edit, torch's error and the analyzer's diagnostics. About 2 minutes
for the examples and 1.5 for the third-party targets on 2 cores.
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


def run_examples(args, kinds) -> tuple[list, list]:
    files = M.example_files()
    if args.files:
        wanted = set(args.files.split(","))
        files = [p for p in files if p.name in wanted]
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
    print()
    print(M.format_table(M.summarize(outcomes), markdown=args.markdown))
    print(f"\n{len(outcomes)} mutants of {len(files)} files in {elapsed:.0f} s")

    print("\nPer file (breaking: found / total; benign: false alarms / total):")
    for path in files:
        sel = [o for o in outcomes if o.mutant.file == path]
        brk = [o for o in sel if o.breaking]
        ben = [o for o in sel if o.benign]
        print(f"  {path.name:<30} breaking {sum(o.status == 'found' for o in brk):3d} / {len(brk):3d}   "
              f"benign {sum(o.status == 'false-alarm' for o in ben):2d} / {len(ben):3d}")
    return outcomes, errs


def run_third_party(args, kinds) -> tuple[list, list]:
    import mutations_third_party as T

    targets = T.TARGETS
    if args.targets:
        wanted = set(args.targets.split(","))
        targets = [t for t in targets if t.name in wanted]
    start = time.perf_counter()
    errs = []
    for t in targets:
        errs += [f"{t.name}: {e}" for e in T.unedited_errors(t)]
    print(f"unedited third-party models: {len(targets)}, {len(errs)} error diagnostic(s)")
    for e in errs:
        print("  " + e)
    outcomes, by_target = [], {}
    for t in targets:
        t0 = time.perf_counter()
        mutants = T.generate(t, kinds, per_kind=args.per_kind)
        by_target[t.name] = [T.evaluate(t, m) for m in mutants]
        outcomes += by_target[t.name]
        print(f"  {t.name}: {len(mutants)} mutants of {T.source_file(t).name} in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    elapsed = time.perf_counter() - start
    print()
    print(M.format_table(M.summarize(outcomes), markdown=args.markdown))
    print(f"\n{len(outcomes)} mutants of {len(targets)} third-party models in {elapsed:.0f} s\n")
    # one row per model: its "all" row, named after the model
    rows = {f"{name} ({T.source_file(T.target_named(name)).name})": M.summarize(outs)["all"]
            for name, outs in by_target.items() if outs}
    print(M.format_table(rows, markdown=args.markdown).replace("kind", "model", 1))
    return outcomes, errs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", choices=("examples", "third-party", "all"), default="all",
                    help="the examples/*.py, the third-party targets of tests/third_party_models.py, or both")
    ap.add_argument("--files", help="comma-separated example file names (default: all examples/*.py)")
    ap.add_argument("--targets", help="comma-separated third-party target names (default: all)")
    ap.add_argument("--kinds", help=f"comma-separated kinds (default: {','.join(M.KINDS)})")
    ap.add_argument("--per-kind", type=int, default=None,
                    help="third-party: at most N mutants of each kind per model (a seeded sample; default all)")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--json", help="write every outcome to this file")
    ap.add_argument("--all-problems", action="store_true",
                    help="also list SI300-only finds (listed by default) and build errors")
    args = ap.parse_args()
    kinds = tuple(args.kinds.split(",")) if args.kinds else M.KINDS

    outcomes, errs = [], []
    if args.suite in ("examples", "all"):
        print("# Examples\n")
        o, e = run_examples(args, kinds)
        outcomes, errs = outcomes + o, errs + e
    if args.suite in ("third-party", "all"):
        print("\n# Third-party targets\n")
        o, e = run_third_party(args, kinds)
        outcomes, errs = outcomes + o, errs + e

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
        tables = {suite: M.summarize([o for o in outcomes if o.mutant.file.is_relative_to(ROOT) == (suite == "examples")])
                  for suite in ("examples", "third-party")}
        data = {"tables": tables, "unedited_errors": errs, "outcomes": [
            {"id": o.mutant.id, "kind": o.mutant.kind, "lines": list(o.mutant.lines),
             "description": o.mutant.description, "class": o.klass, "status": o.status,
             "failures": [vars(f) for f in o.failures], "diagnostics": o.diagnostics,
             "names_dims": o.names_dims, "note": o.note} for o in outcomes]}
        Path(args.json).write_text(json.dumps(data, indent=1, default=str))


if __name__ == "__main__":
    main()
