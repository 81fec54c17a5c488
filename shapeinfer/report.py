"""Human-facing output: per-line type listings, the IDE-style report, and diagnostics
rendered as text, JSON or SARIF."""

from __future__ import annotations

import ast
import json
import linecache
import os
from typing import Iterable

from .analysis import AnalysisResult, display_path
from .diagnostics import CODES, Diagnostic
from .render import variants_str

SEVERITY_ORDER = {"error": 0, "warning": 1, "note": 2}


def types_by_line(results: Iterable[AnalysisResult], path: str) -> dict[int, list[tuple[str, str]]]:
    """line -> [(name, type text)] for one file, merged over several analyses."""
    merged: dict[tuple[int, str], list] = {}
    for result in results:
        for e in result.entries_in(path):
            merged.setdefault((e.line, e.name), [])
            for cv in e.values:
                if cv not in merged[(e.line, e.name)]:
                    merged[(e.line, e.name)].append(cv)
    by_line: dict[int, list[tuple[str, str]]] = {}
    for (line, name), values in sorted(merged.items(), key=lambda kv: kv[0][0]):
        by_line.setdefault(line, []).append((name, variants_str(values)))
    return by_line


def _functions(path: str) -> list[ast.AST]:
    source = "".join(linecache.getlines(path))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def report_text(results: list[AnalysisResult], path: str, width: int = 48) -> str:
    """The analyzed source with each line's types beside it, grouped by function."""
    by_line = types_by_line(results, path)
    out: list[str] = []
    symbols = {}
    for r in results:
        symbols.update(r.symbols)
    if symbols:
        out.append("symbols: " + ", ".join(f"{k} (sample {v})" for k, v in symbols.items()))
    shown: set[int] = set()
    for fn in sorted(_functions(path), key=lambda f: f.lineno):
        lines = range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)
        if not any(line in by_line for line in lines) or fn.lineno in shown:
            continue
        # nested functions are shown inside their parent
        shown.update(lines)
        qual = fn.name
        out.append("")
        out.append(f"def {qual}  ({display_path(path)}:{fn.lineno})")
        for line in lines:
            src = linecache.getline(path, line).rstrip("\n")
            types = "; ".join(f"{n}: {t}" for n, t in by_line.get(line, []))
            if types:
                out.append(f"{line:5d} | {src:<{width}}  # {types}")
            else:
                out.append(f"{line:5d} | {src}")
    diags = [d for r in results for d in r.diagnostics]
    if diags:
        out.append("")
        out.append(diagnostics_text(diags, min_severity="note"))
    return "\n".join(out).rstrip() + "\n"


def sort_diagnostics(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    seen, out = set(), []
    for d in sorted(diags, key=lambda d: (d.file, d.line, d.col, SEVERITY_ORDER.get(d.severity, 3), d.code)):
        key = (d.file, d.line, d.col, d.code, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def diagnostic_text(d: Diagnostic) -> str:
    """``path:line:col: CODE message``, the source line with a caret, then notes."""
    path = display_path(d.file)
    severity = "" if d.severity == "error" else f"{d.severity}: "
    lines = [f"{path}:{d.line}:{d.col}: {d.code} {severity}{d.message}"]
    src = linecache.getline(d.file, d.line).rstrip("\n") if os.path.exists(d.file) else ""
    if src:
        lines.append(f"    {src}")
        lines.append("    " + " " * max(d.col - 1, 0) + "^")
    for f, ln, c in _call_sites(d):
        lines.append(f"  called from {display_path(f)}:{ln}:{c}")
    if d.when:
        lines.append(f"  when: {d.when}")
    for n in d.notes:
        lines.append(f"  note: {n}")
    name, _, what = CODES.get(d.code, ("", "", ""))
    if what and d.severity == "error":
        lines.append(f"  help: {d.code} ({name}): {what}")
    return "\n".join(lines)


MAX_CALL_SITES = 8


def _call_sites(d: Diagnostic) -> list:
    """The call sites to show, innermost first (as a reader walks out from the error);
    a deep stack keeps its innermost and outermost ones."""
    sites = list(reversed(d.stack))
    if len(sites) > MAX_CALL_SITES:
        sites = sites[:MAX_CALL_SITES - 2] + sites[-2:]
    return sites


def diagnostics_text(diags: Iterable[Diagnostic], min_severity: str = "warning") -> str:
    limit = SEVERITY_ORDER[min_severity]
    chosen = [d for d in sort_diagnostics(diags) if SEVERITY_ORDER.get(d.severity, 3) <= limit]
    return "\n".join(diagnostic_text(d) for d in chosen)


def diagnostics_json(diags: Iterable[Diagnostic]) -> str:
    items = []
    for d in sort_diagnostics(diags):
        items.append(d.to_json(display_path))
    return json.dumps({"version": 1, "diagnostics": items}, indent=2)


def _sarif_properties(d: Diagnostic) -> dict:
    """SARIF's property bag carries what the message names as data: dims, condition."""
    props = {k: v for k, v in (("dims", list(d.dims)), ("when", d.when)) if v}
    return {"properties": props} if props else {}


def _sarif_location(file: str, line: int, col: int) -> dict:
    return {"physicalLocation": {
        "artifactLocation": {"uri": display_path(file).replace(os.sep, "/")},
        "region": {"startLine": max(line, 1), "startColumn": max(col, 1)}}}


def _sarif_related(d: Diagnostic) -> dict:
    """The call sites that led to ``d``, innermost first, as SARIF related locations."""
    related = [{"id": i, **_sarif_location(f, ln, c), "message": {"text": "called from here"}}
               for i, (f, ln, c) in enumerate(_call_sites(d))]
    return {"relatedLocations": related} if related else {}


def diagnostics_sarif(diags: Iterable[Diagnostic]) -> str:
    """SARIF 2.1.0, for code-scanning tools."""
    diags = sort_diagnostics(diags)
    used = sorted({d.code for d in diags})
    rules = [{"id": c, "name": CODES.get(c, (c,))[0], "shortDescription": {"text": CODES.get(c, ("", "", c))[2]}}
             for c in used]
    level = {"error": "error", "warning": "warning", "note": "note"}
    results = [{
        "ruleId": d.code,
        "level": level.get(d.severity, "warning"),
        "message": {"text": d.message + (f" (when {d.when})" if d.when else "")},
        "locations": [_sarif_location(d.file, d.line, d.col)],
        **_sarif_related(d),
        **_sarif_properties(d),
    } for d in diags]
    doc = {"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
           "runs": [{"tool": {"driver": {"name": "shapeinfer",
                                         "rules": rules}}, "results": results}]}
    return json.dumps(doc, indent=2)
