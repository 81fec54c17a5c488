"""Torch is the oracle, one op rule at a time.

``check(model, inputs, sizes)`` analyzes a small module (or a plain function) once, at
the first of several random size sets, then runs it for real at every size set and
compares each variable's real shape and dtype with the analyzer's symbolic entry
evaluated at those sizes (the comparison of shapes is ``tests/oracle.py``'s ``compare``;
this file adds dtypes, random size sets and expected diagnostics).

Expectations written next to the code, in the model's own source:

- ``y = f(x)  # unknown``: ``y`` may be (and must be) unknown, never wrong; further
  words on the comment (``# unknown: SI003``) name a diagnostic code that must be
  reported on that line;
- ``y = f(x)  # error: SI131``: a definite shape error; the analyzer must report that
  code, with severity error, on that line, and torch itself must raise there
  (``check_error``).

A wrong shape is worse than an unknown one: ``check`` fails first, with its own
message, on any entry whose evaluated shape or dtype is fully known but differs from
torch's, and only then on entries that are merely unknown.
"""

from __future__ import annotations

import inspect
import os
import random
import re
import sys
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapeinfer  # noqa: E402
from oracle import UNKNOWN, WRONG, Report, ShapeRecorder, compare, expand_at_sizes  # noqa: E402

__all__ = ["Input", "check", "check_error", "size_sets", "CaseResult", "analyze_only"]


# ---------------------------------------------------------------------------
# inputs and sizes

@dataclass
class Input:
    """A tensor input: ``dims`` (symbol names or ints), dtype, and for integer tensors
    the range of values, ``high`` an int or a symbol name (exclusive)."""

    dims: tuple
    dtype: torch.dtype = torch.float32
    low: int = 0
    high: Any = 10
    make: Optional[Callable] = None  # make(shape, generator) -> tensor, overrides the rest

    def build(self, sizes: dict, gen: torch.Generator) -> torch.Tensor:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in self.dims)
        if self.make is not None:
            return self.make(shape, gen)
        if self.dtype == torch.bool:
            return torch.rand(shape, generator=gen) > 0.5
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return torch.randn(shape, generator=gen, dtype=self.dtype)
        high = sizes[self.high] if isinstance(self.high, str) else self.high
        return torch.randint(self.low, max(high, self.low + 1), shape, generator=gen, dtype=self.dtype)

    def spec(self) -> tuple:
        return tuple(self.dims)


def _as_input(v):
    if isinstance(v, Input):
        return v
    if isinstance(v, tuple) and all(isinstance(d, (str, int)) for d in v):
        return Input(v)
    return v  # a plain Python argument, passed as is


_PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97]


def size_sets(ranges: dict, n: int = 4, seed: int = 0) -> list[dict]:
    """``n`` size sets for the symbols in ``ranges`` (name -> (lo, hi) inclusive, or a
    list of allowed values). Within one set the symbols differ from each other where
    the ranges allow (a swapped dim must not pass); set 1 uses primes and set 2 odd
    sizes where the ranges have them; no two sets are equal when avoidable."""
    rng = random.Random(seed)
    choices = {}
    for name, r in ranges.items():
        if isinstance(r, tuple):
            lo, hi = r
            choices[name] = list(range(lo, hi + 1))
        else:
            choices[name] = list(r)
    out: list[dict] = []
    for i in range(n):
        best = None
        for attempt in range(60):
            s = {}
            for name, opts in choices.items():
                pool = opts
                if i == 1:
                    pool = [v for v in opts if v in _PRIMES] or opts
                elif i == 2:
                    pool = [v for v in opts if v % 2] or opts
                s[name] = rng.choice(pool)
            distinct = len(set(s.values())) == len(s)
            fresh = s not in out
            score = (distinct, fresh)
            if best is None or score > best[0]:
                best = (score, s)
            if distinct and fresh:
                break
        out.append(best[1])
    return out


def _build(inputs: dict, sizes: dict, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {k: (v.build(sizes, gen) if isinstance(v, Input) else v) for k, v in inputs.items()}


# ---------------------------------------------------------------------------
# recording dtypes alongside shapes

def _dtype_of(v, depth=0):
    if isinstance(v, torch.Tensor):
        return str(v.dtype).replace("torch.", "")
    if isinstance(v, (tuple, list)) and not isinstance(v, torch.Size) and depth < 8:
        items = tuple(_dtype_of(x, depth + 1) for x in v)
        return None if all(x is None for x in items) else items
    return None


class _Recorder(ShapeRecorder):
    """The oracle's recorder, also keeping the dtype of every recorded value."""

    def __init__(self, files):
        super().__init__(files)
        self.dtypes: dict = defaultdict(set)

    def _flush(self, frame, state, next_line):
        group = state[1]
        if group is not None:
            local_vars = frame.f_locals
            for b in group.bindings:
                if b.body is not None and (next_line is None or not b.body[0] <= next_line <= b.body[1]):
                    continue
                for name in b.names:
                    if name in local_vars:
                        d = _dtype_of(local_vars[name])
                        if d is not None:
                            self.dtypes[(state[0].path, b.line, name)].add(d)
        super()._flush(frame, state, next_line)


def _record(fn, files, kwargs):
    with torch.no_grad(), _Recorder(files) as rec:
        fn(**kwargs)
    return dict(rec.entries), dict(rec.dtypes)


def _judge_dtype(real, entries: list):
    """(status, claimed): exact, unknown or wrong for one recorded dtype structure."""
    statuses = []
    claims = []
    for e in entries:
        st, cl = _judge_dtype_one(real, e)
        statuses.append(st)
        claims.append(cl)
    if "exact" in statuses:
        return "exact", claims
    if UNKNOWN in statuses or not statuses:
        return UNKNOWN, claims
    return WRONG, claims


def _judge_dtype_one(real, entry: dict):
    if entry.get("type") == "union":
        results = [_judge_dtype_one(real, o) for o in entry.get("options", [])]
        sts = [r[0] for r in results]
        return ("exact" if "exact" in sts else UNKNOWN if UNKNOWN in sts or not sts else WRONG), \
            "|".join(str(r[1]) for r in results)
    if isinstance(real, str):
        if entry.get("type") != "Tensor":
            return UNKNOWN, entry.get("type")
        claimed = entry.get("dtype", "?")
        if claimed in (None, "?"):
            return UNKNOWN, "?"
        return ("exact" if claimed == real else WRONG), claimed
    elements = entry.get("elements")
    if not isinstance(elements, list):
        return UNKNOWN, entry.get("type")
    if len(elements) != len(real):
        return UNKNOWN, f"{len(elements)} elements"  # the shape check reports lengths
    sts, cls = [], []
    for r, e in zip(real, elements):
        if r is None:
            continue
        st, cl = _judge_dtype_one(r, e)
        sts.append(st)
        cls.append(cl)
    worst = WRONG if WRONG in sts else UNKNOWN if UNKNOWN in sts else "exact"
    return worst, tuple(cls)


# ---------------------------------------------------------------------------
# expectations in comments

_MARK = re.compile(r"#\s*(unknown|error)\b:?\s*([A-Z]{2}\d{3}(?:[ ,]+[A-Z]{2}\d{3})*)?")


def _marks(fn) -> dict[int, tuple[str, tuple[str, ...]]]:
    """{line: (kind, codes)} for ``# unknown`` / ``# error: CODE`` comments in the
    source of ``fn`` (the forward of a module, or a function)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return {}
    out = {}
    for i, text in enumerate(lines):
        if "#" not in text:
            continue
        m = _MARK.search(text[text.index("#"):])
        if m:
            codes = tuple(re.findall(r"[A-Z]{2}\d{3}", m.group(2) or ""))
            out[start + i] = (m.group(1), codes)
    return out


def _target(model):
    if isinstance(model, torch.nn.Module):
        return type(model).forward, model
    return model, model


def _files(fn) -> list[str]:
    return [os.path.realpath(inspect.getsourcefile(fn))]


# ---------------------------------------------------------------------------
# the check

@dataclass
class CaseResult:
    analysis: dict
    report: Report
    dtype_problems: list = field(default_factory=list)  # (status, where, real, claimed, sizes)
    diagnostics: list = field(default_factory=list)
    sizes: list = field(default_factory=list)

    def codes_at(self, line: int) -> set:
        return {d["code"] for d in self.diagnostics if d.get("line") == line}

    def entry(self, name: str) -> list:
        return [e for e in self.analysis["entries"] if e["name"] == name]


def analyze_only(model, inputs: dict, sizes: dict, seed: int = 0):
    """The analyzer's JSON for ``model`` at one size set (no real run)."""
    inputs = {k: _as_input(v) for k, v in inputs.items()}
    dims = {k: v.spec() for k, v in inputs.items() if isinstance(v, Input)}
    fn, call = _target(model)
    kwargs = _build(inputs, sizes, seed)
    return shapeinfer.analyze(model, kwargs=kwargs, dims=dims).to_json()


def check(model, inputs: dict, sizes, *, n: int = 4, seed: int = 0, allow_unknown: Sequence[str] = (),
          exact: bool = True) -> CaseResult:
    """Analyze ``model`` once and compare with torch at ``n`` random size sets.

    ``inputs`` maps forward's parameters to ``Input`` (or a dims tuple for float32,
    or a plain value); ``sizes`` is either the ranges for ``size_sets`` (a dict of
    (lo, hi) / lists) or an explicit list of size dicts. Fails on any WRONG entry
    (shape or dtype), then, unless ``exact`` is false, on any unknown entry other than
    those marked ``# unknown`` or named in ``allow_unknown``.
    """
    inputs = {k: _as_input(v) for k, v in inputs.items()}
    sets = list(sizes) if isinstance(sizes, (list, tuple)) else size_sets(sizes, n, seed)
    dims = {k: v.spec() for k, v in inputs.items() if isinstance(v, Input)}
    fn, call = _target(model)
    files = _files(fn)
    marks = _marks(fn)

    sample = _build(inputs, sets[0], seed)
    analysis = shapeinfer.analyze(model, kwargs=sample, dims=dims).to_json()

    report = Report(title=getattr(fn, "__qualname__", str(fn)))
    dtype_problems = []
    for k, sizes_k in enumerate(sets):
        kwargs = _build(inputs, sizes_k, seed + k)
        shapes, dtypes = _record(call, files, kwargs)
        assert shapes, f"nothing recorded at {sizes_k}"
        report = report + compare(analysis, shapes, sizes_k, files)
        expanded = expand_at_sizes(analysis, sizes_k)
        by_key: dict = defaultdict(list)
        for e in expanded["entries"]:
            by_key[(os.path.realpath(e["file"]), e["line"], e["name"])].append(e)
        for key, reals in dtypes.items():
            for real in reals:
                st, claimed = _judge_dtype(real, by_key.get(key, []))
                if st != "exact":
                    dtype_problems.append((st, f"line {key[1]} {key[2]}", real, claimed, sizes_k))
    result = CaseResult(analysis, report, dtype_problems, analysis["diagnostics"], sets)

    # 1. never wrong
    wrong = [p for p in report.problems if p.status == WRONG]
    wrong_dt = [p for p in dtype_problems if p[0] == WRONG]
    if wrong or wrong_dt:
        msg = ["WRONG: the analyzer claims a shape or dtype that torch does not produce"]
        msg += [f"  {p}" for p in wrong]
        msg += [f"  dtype {w} at {s}: real {r}, analyzer {c}" for _, w, r, c, s in wrong_dt]
        msg.append(report.format())
        raise AssertionError("\n".join(msg))

    # 2. expectations in comments: unknown lines must be unknown (and name their notes)
    unknown_lines = {line for line, (kind, _) in marks.items() if kind == "unknown"}
    for line, (kind, codes) in marks.items():
        for code in codes:
            assert code in result.codes_at(line), \
                f"line {line}: expected diagnostic {code}, got {sorted(result.codes_at(line))}"
        if kind == "unknown":
            unknown_here = [p for p in report.problems if p.line == line and p.status == UNKNOWN]
            assert unknown_here, f"line {line} is marked unknown but the analyzer is exact there"

    # 3. exact
    if exact:
        allowed = set(allow_unknown)
        left = [p for p in report.problems if p.line not in unknown_lines and p.name not in allowed]
        left_dt = [p for p in dtype_problems
                   if int(p[1].split()[1]) not in unknown_lines and p[1].split()[2] not in allowed]
        if left or left_dt:
            msg = ["UNKNOWN: the analyzer is not exact"]
            msg += [f"  {p}" for p in left]
            msg += [f"  dtype {w} at {s}: real {r}, analyzer {c}" for _, w, r, c, s in left_dt]
            notable = [d for d in result.diagnostics if d["severity"] != "note" or d["code"] == "SI001"]
            msg += [f"  diag line {d['line']}: {d['code']} {d['message']}" for d in notable]
            raise AssertionError("\n".join(msg))
    return result


def check_error(model, inputs: dict, sizes: dict, seed: int = 0) -> dict:
    """``model`` has lines marked ``# error: CODE``. At ``sizes`` torch must raise on
    the first of them, and the analyzer must report each CODE there as an error.
    Returns the analyzer's JSON."""
    inputs = {k: _as_input(v) for k, v in inputs.items()}
    dims = {k: v.spec() for k, v in inputs.items() if isinstance(v, Input)}
    fn, call = _target(model)
    marks = {line: codes for line, (kind, codes) in _marks(fn).items() if kind == "error"}
    assert marks, "no '# error: CODE' line in the model"
    kwargs = _build(inputs, sizes, seed)
    file = _files(fn)[0]
    # torch confirms the error, on the marked line
    try:
        with torch.no_grad():
            call(**kwargs)
    except Exception as e:  # noqa: BLE001 - any torch error
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                 if os.path.realpath(f.filename) == file]
        assert lines and lines[-1] == min(marks), \
            f"torch raised {type(e).__name__} at line {lines[-1] if lines else '?'}, " \
            f"expected line {min(marks)}: {e}"
    else:
        raise AssertionError("torch does not raise: not a real error")
    analysis = shapeinfer.analyze(model, kwargs=kwargs, dims=dims).to_json()
    diags = analysis["diagnostics"]
    for line, codes in marks.items():
        here = [d for d in diags if d["line"] == line and d["severity"] == "error"]
        for code in codes:
            assert any(d["code"] == code for d in here), \
                f"line {line}: expected error {code}; diagnostics: " + \
                "; ".join(f"{d['line']}:{d['severity']} {d['code']} {d['message']}" for d in diags)
    return analysis
