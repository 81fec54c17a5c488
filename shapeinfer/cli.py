"""Command line: ``shapeinfer annotate|report|check FILE...``.

Exit codes: 0 success; 1 ``check`` found errors or ``annotate --check`` found stale
annotations; 2 the request could not be carried out for some file (missing file,
syntax error, unknown model, bad input spec). Every file is processed even when an
earlier one fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Optional

EXIT_OK, EXIT_FINDINGS, EXIT_FAILED = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("files", nargs="+", metavar="FILE", help="Python file(s) defining the model")
    common.add_argument("--model", metavar="EXPR",
                        help='class or factory call in the file, e.g. "Net(num_classes=10)"')
    common.add_argument("--input", action="append", default=[], metavar="NAME=SPEC",
                        help='a forward input, e.g. "x=float32[B,3,H,W]" (repeatable)')
    common.add_argument("--sizes", metavar="SYM=N,...", help="sample sizes, e.g. B=8,H=32,W=32")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")

    p = argparse.ArgumentParser(prog="shapeinfer", description="Symbolic shape analysis for PyTorch models.")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("annotate", parents=[common], help="write shapes into the source as comments")
    mode = a.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff instead of writing")
    mode.add_argument("--check", action="store_true", help="exit 1 if annotations are stale (pre-commit)")
    r = sub.add_parser("report", parents=[common], help="print the source with each line's types")
    r.add_argument("--format", choices=["text", "json"], default="text")
    c = sub.add_parser("check", parents=[common], help="report shape errors; exit 1 if any")
    c.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    c.add_argument("--warnings", action="store_true", help="also print warnings")
    return p


def _err(msg: str) -> None:
    print(f"shapeinfer: error: {msg}", file=sys.stderr)


def _analyze_file(path: str, args, log) -> Optional[list]:
    """Analyses of every target in the file, or None (after printing why) on failure."""
    import shapeinfer
    from .spec import SpecError, load_targets

    try:
        targets = load_targets(path, args.model, args.input or None, args.sizes)
    except SpecError as e:
        _err(str(e))
        return None
    results = []
    for t in targets:
        start = time.perf_counter()
        log(f"analyzing {path}: {t.name} with {', '.join(f'{k}={v}' for k, v in t.sizes.items()) or 'no symbols'}")
        try:
            targs, tkwargs = t.make_args(t.sizes)
            results.append(shapeinfer.analyze(t.model, args=targs, kwargs=tkwargs, dims=t.dims))
        except shapeinfer.AnalysisError as e:
            _err(f"{path}: {t.name}: {e}")
            return None
        except SpecError as e:
            _err(f"{path}: {e}")
            return None
        except Exception as e:  # the analyzer itself failed: say so, keep going with other files
            _err(f"{path}: analyzing {t.name} failed: {type(e).__name__}: {e}")
            return None
        log(f"  done in {time.perf_counter() - start:.2f}s")
    return results


def main(argv: Optional[list] = None) -> int:
    args = _parser().parse_args(argv)
    log = (lambda msg: None) if args.quiet or args.command == "report" and args.format == "json" \
        else (lambda msg: print(msg, file=sys.stderr))
    status = EXIT_OK
    json_docs = []
    all_diags = []
    for path in args.files:
        results = _analyze_file(path, args, log)
        if results is None:
            status = EXIT_FAILED
            continue
        if args.command == "annotate":
            status = max(status, _annotate(path, results, args))
        elif args.command == "report":
            if args.format == "json":
                json_docs.append(_merge_json([r.to_json() for r in results]))
            else:
                from .report import report_text

                sys.stdout.write(report_text(results, path))
        else:
            diags = [d for r in results for d in r.diagnostics]
            all_diags.extend(diags)
            if any(d.severity == "error" for d in diags):
                status = max(status, EXIT_FINDINGS)
    if args.command == "report" and args.format == "json":
        doc = json_docs[0] if len(json_docs) == 1 else _merge_json(json_docs)
        print(json.dumps(doc, indent=2))
    if args.command == "check":
        _print_check(all_diags, args)
    return status


def _print_check(diags, args) -> None:
    from .report import diagnostics_json, diagnostics_sarif, diagnostics_text

    if args.format == "json":
        print(diagnostics_json(diags))
    elif args.format == "sarif":
        print(diagnostics_sarif(diags))
    else:
        text = diagnostics_text(diags, "warning" if args.warnings else "error")
        if text:
            print(text)
        n_err = sum(1 for d in diags if d.severity == "error")
        n_warn = sum(1 for d in diags if d.severity == "warning")
        print(f"{n_err} error(s), {n_warn} warning(s)", file=sys.stderr)


def _merge_json(docs: list) -> dict:
    out = {"version": 1, "symbols": {}, "entries": [], "diagnostics": []}
    for d in docs:
        out["symbols"].update(d["symbols"])
        out["entries"].extend(d["entries"])
        out["diagnostics"].extend(d["diagnostics"])
    return out


def _annotate(path: str, results, args) -> int:
    from .annotate import Annotated, Failed, annotate_source, unified_diff, write_atomically
    from .report import types_by_line

    try:
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
    except OSError as e:
        _err(f"{path}: {e.strerror}")
        return EXIT_FAILED
    outcome = annotate_source(source, types_by_line(results, path))
    if isinstance(outcome, Failed):
        _err(f"{path}: {outcome.reason}")
        return EXIT_FAILED
    if not isinstance(outcome, Annotated):
        if not args.quiet and not args.diff:
            print(f"{path}: annotations up to date", file=sys.stderr)
        return EXIT_OK
    if args.diff:
        sys.stdout.write(unified_diff(path, source, outcome.source))
        return EXIT_OK
    if args.check:
        print(f"{path}: annotations are stale; run 'shapeinfer annotate {path}'", file=sys.stderr)
        return EXIT_FINDINGS
    write_atomically(path, outcome.source)
    if not args.quiet:
        print(f"{path}: annotated {outcome.lines} line(s)", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
