"""Torch is the oracle: record the real shapes a model's code produces, and compare
them with what the analyzer claims.

Recording
---------
``record_shapes(fn, files, *args, **kwargs)`` calls ``fn(*args, **kwargs)`` under
``sys.settrace`` and returns ``{(file, line, name): {value, ...}}`` for every
statement executed in one of ``files`` that binds a plain name (the entry contract
shared with the analyzer):

- ``file`` is the absolute, symlink-resolved path (``os.path.realpath``);
- ``line`` is the first line of the binding statement (``stmt.lineno`` in ``ast``);
- binding statements are ``Assign`` (every target, tuple/list unpacking and starred
  included), ``AnnAssign`` with a value, ``AugAssign``, ``for`` targets and
  ``with ... as`` targets; attributes and subscripts are not names and are skipped;
- a ``torch.Tensor`` value is recorded as its shape, a tuple of ints; a tuple or
  list (namedtuples included, ``torch.Size`` excluded) as a ``Seq`` of its
  elements' values, where an element that is neither is ``None``; a container
  holding no tensor at any depth, and any other value, is not recorded;
- every distinct value seen is kept (loops, several calls).

``record_call`` does the same and also returns ``fn``'s result; ``ShapeRecorder``
is the context manager underneath. Exceptions from ``fn`` propagate unchanged and
the previous trace function is always restored. Only the calling thread is traced,
and a tracer already installed (a debugger, coverage) is suspended meanwhile.

Comparing
---------
``compare(analysis_json, recorded, sizes, files)`` checks one recording, made at the
concrete ``sizes`` (symbol -> int), against the analyzer's ``result.to_json()`` and
returns a ``Report``: each recorded entry is *exact*, *unknown* or *wrong*.
``str(report)`` lists the counts and every offending entry; reports of several runs
add up with ``+``.
"""

from __future__ import annotations

import ast
import dis
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable

import torch

from shapeinfer.analysis import display_path

__all__ = [
    "Seq", "ShapeRecorder", "record_shapes", "record_call", "merge_recordings",
    "format_value", "Problem", "Report", "compare",
]


# ---------------------------------------------------------------------------
# recorded values

@dataclass(frozen=True)
class Seq:
    """A recorded tuple or list: ``kind`` is "tuple" or "list"; each element is a
    shape (tuple of ints), a nested ``Seq``, or ``None`` for a non-tensor value."""

    kind: str
    elements: tuple

    def __repr__(self) -> str:
        return format_value(self)


_MAX_DEPTH = 8


def value_of(v: Any, depth: int = 0):
    """The recorded form of a runtime value, or None when it is not recorded."""
    if isinstance(v, torch.Tensor):
        try:
            return tuple(int(d) for d in v.shape)
        except Exception:  # exotic tensor subclasses (nested tensors) with no plain shape
            return None
    if isinstance(v, torch.Size):
        return None
    if isinstance(v, (tuple, list)) and depth < _MAX_DEPTH:
        elements = tuple(value_of(e, depth + 1) for e in v)
        if all(e is None for e in elements):
            return None
        return Seq("tuple" if isinstance(v, tuple) else "list", elements)
    return None


def format_value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, Seq):
        inner = ", ".join(format_value(e) for e in v.elements)
        return f"{v.kind}[{inner}]"
    return "(" + ", ".join(str(d) for d in v) + ")"


def _format_set(values) -> str:
    items = sorted((format_value(v) for v in values))
    return "{" + ", ".join(items) + "}"


# ---------------------------------------------------------------------------
# statement index of one source file

def _names(target: ast.AST) -> list[str]:
    """Plain names bound by an assignment target (unpacking and starred included)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        out: list[str] = []
        for elt in target.elts:
            out.extend(_names(elt))
        return out
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []  # attributes and subscripts


@dataclass
class _Binding:
    line: int                 # the statement's first line: the entry's line
    names: tuple[str, ...]
    body: tuple[int, int] | None = None  # for/with: bound only when the body is entered


@dataclass
class _Group:
    """Statements sharing source lines (usually one statement). A group is pending
    from its first line event until a line event of another group, or a backward
    jump onto a loop header, or the frame's return."""

    bindings: list[_Binding] = field(default_factory=list)
    is_loop: bool = False


class _FileIndex:
    def __init__(self, path: str):
        self.path = path
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        spans: list[tuple[int, int, ast.stmt]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                spans.append((*self._span(node), node))
        # union statements whose spans share a line (``a = 1; b = 2``, one-line loops)
        parent = list(range(len(spans)))

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        for i, (lo, hi, _) in enumerate(spans):
            for line in range(lo, hi + 1):
                if line in owner:
                    parent[find(i)] = find(owner[line])
                else:
                    owner[line] = i
        groups: dict[int, _Group] = {}
        for i, (_, _, node) in enumerate(spans):
            g = groups.setdefault(find(i), _Group())
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                g.is_loop = True
            b = self._binding(node)
            if b is not None:
                g.bindings.append(b)
        self.group_of_line: dict[int, _Group] = {line: groups[find(i)] for line, i in owner.items()}

    @staticmethod
    def _span(node: ast.stmt) -> tuple[int, int]:
        """Lines whose line events belong to this statement itself: all of a simple
        statement, the header of a compound one."""
        start = node.lineno
        for dec in getattr(node, "decorator_list", ()):
            start = min(start, dec.lineno)
        if isinstance(node, ast.Match):  # 3.10+: the cases are not statements
            return start, max(node.lineno, node.subject.end_lineno)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            return start, max(node.lineno, body[0].lineno - 1)
        return start, node.end_lineno or node.lineno

    @staticmethod
    def _binding(node: ast.stmt) -> _Binding | None:
        names: list[str] = []
        body = None
        if isinstance(node, ast.Assign):
            for t in node.targets:
                names.extend(_names(t))
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                names.extend(_names(node.target))
        elif isinstance(node, ast.AugAssign):
            names.extend(_names(node.target))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            names.extend(_names(node.target))
            body = (node.body[0].lineno, node.body[-1].end_lineno)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    names.extend(_names(item.optional_vars))
            body = (node.body[0].lineno, node.body[-1].end_lineno)
        if not names:
            return None
        return _Binding(node.lineno, tuple(dict.fromkeys(names)), body)


# ---------------------------------------------------------------------------
# the tracer

_YIELD = dis.opmap.get("YIELD_VALUE")
# code objects that bind no statement-level names of their own; their lines belong
# to the enclosing statement, so reading "its" targets there would be wrong
_EXPRESSION_SCOPES = {"<lambda>", "<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"}


class ShapeRecorder:
    """Context manager recording tensor shapes bound in ``files`` (see module doc).

    >>> with ShapeRecorder(["model.py"]) as rec:
    ...     model(x)
    >>> rec.entries  # {(abs_path, line, name): {shape, ...}}
    """

    def __init__(self, files: Iterable[str | os.PathLike]):
        self.files = {os.path.realpath(os.fspath(f)) for f in files}
        self.entries: dict[tuple[str, int, str], set] = defaultdict(set)
        self._indexes: dict[str, _FileIndex] = {}
        self._code_index: dict[Any, _FileIndex | None] = {}
        self._frames: dict[Any, list] = {}  # frame -> [index, pending group, last line]
        self._previous = None
        self._active = False

    # -- install / remove
    def __enter__(self) -> "ShapeRecorder":
        self._previous = sys.gettrace()
        self._active = True
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self._previous)
        self._active = False
        self._frames.clear()
        self._previous = None

    # -- helpers
    def _index_for(self, code) -> _FileIndex | None:
        try:
            return self._code_index[code]
        except KeyError:
            pass
        index = None
        if code.co_name not in _EXPRESSION_SCOPES:
            path = os.path.realpath(code.co_filename)
            if path in self.files:
                index = self._indexes.get(path)
                if index is None:
                    index = self._indexes[path] = _FileIndex(path)
        self._code_index[code] = index
        return index

    def _flush(self, frame, state, next_line: int | None) -> None:
        group = state[1]
        state[1] = None
        if group is None or not group.bindings:
            return
        local_vars = frame.f_locals
        path = state[0].path
        for b in group.bindings:
            if b.body is not None and (next_line is None or not b.body[0] <= next_line <= b.body[1]):
                continue  # loop exhausted / with-block exit: the target was not (re)bound
            for name in b.names:
                if name in local_vars:
                    v = value_of(local_vars[name])
                    if v is not None:
                        self.entries[(path, b.line, name)].add(v)

    # -- trace functions
    def _on_call(self, frame, event, arg):
        if not self._active:
            return None
        index = self._index_for(frame.f_code)
        if index is None:
            return None
        if frame not in self._frames:  # a resumed generator keeps its state
            self._frames[frame] = [index, None, -1]
        return self._on_event

    def _on_event(self, frame, event, arg):
        if not self._active:
            return None
        state = self._frames.get(frame)
        if state is None:
            return None
        try:
            if event == "line":
                line = frame.f_lineno
                group = state[0].group_of_line.get(line)
                pending = state[1]
                if pending is not None and (group is not pending or (line == state[2] and group.is_loop)):
                    self._flush(frame, state, line)
                state[1] = group
                state[2] = line
            elif event == "return":
                code = frame.f_code
                if _YIELD is not None and frame.f_lasti >= 0 and code.co_code[frame.f_lasti] == _YIELD:
                    return self._on_event  # suspended, not finished: keep the pending statement
                self._flush(frame, state, None)
                del self._frames[frame]
            elif event == "exception":
                # the pending statement did not complete: its targets hold stale values
                state[1] = None
        except Exception as e:  # a bug here must not masquerade as the model's error
            raise RuntimeError(f"shape recorder failed at {frame.f_code.co_filename}:"
                               f"{frame.f_lineno}: {type(e).__name__}: {e}") from e
        return self._on_event


def record_call(fn: Callable, files: Iterable[str | os.PathLike], *args, **kwargs):
    """``(fn(*args, **kwargs), recorded)`` with shapes recorded in ``files``."""
    with ShapeRecorder(files) as rec:
        result = fn(*args, **kwargs)
    return result, dict(rec.entries)


def record_shapes(fn: Callable, files: Iterable[str | os.PathLike], *args, **kwargs):
    """``{(abs_path, line, name): {value, ...}}`` for one call ``fn(*args, **kwargs)``."""
    return record_call(fn, files, *args, **kwargs)[1]


def merge_recordings(*recordings):
    out: dict = defaultdict(set)
    for r in recordings:
        for k, vs in r.items():
            out[k] |= set(vs)
    return dict(out)


# ---------------------------------------------------------------------------
# comparison with the analyzer's JSON

EXACT, UNKNOWN, WRONG = "exact", "unknown", "wrong"
_RANK = {EXACT: 0, UNKNOWN: 1, WRONG: 2}


def _worst(*statuses: str) -> str:
    return max(statuses, key=_RANK.__getitem__, default=EXACT)


@dataclass
class Problem:
    file: str
    line: int
    name: str
    status: str            # UNKNOWN or WRONG
    sizes: dict
    expected: str          # what torch produced
    claimed: str           # the analyzer's entry as written (symbolic)
    got: str = ""          # the analyzer's entry evaluated at ``sizes``
    reason: str = ""

    def where(self) -> str:
        return f"{display_path(self.file)}:{self.line} {self.name}"

    def at(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.sizes.items())

    def __str__(self) -> str:
        s = f"{self.status.upper():7} {self.where()} [{self.at()}]: real {self.expected}, analyzer {self.claimed}"
        if self.got and self.got != self.claimed:
            s += f" = {self.got}"
        return s + (f" ({self.reason})" if self.reason else "")


@dataclass
class Report:
    exact: int = 0
    unknown: int = 0
    wrong: int = 0
    problems: list[Problem] = field(default_factory=list)
    diagnostics: list[dict] = field(default_factory=list)
    title: str = ""

    @property
    def total(self) -> int:
        return self.exact + self.unknown + self.wrong

    @property
    def ok(self) -> bool:
        return self.unknown == 0 and self.wrong == 0

    def __add__(self, other: "Report") -> "Report":
        diags = list(self.diagnostics) + [d for d in other.diagnostics if d not in self.diagnostics]
        return Report(self.exact + other.exact, self.unknown + other.unknown,
                      self.wrong + other.wrong, self.problems + other.problems, diags,
                      self.title or other.title)

    def summary(self) -> str:
        pct = 100.0 * self.exact / self.total if self.total else 100.0
        head = f"{self.title}: " if self.title else ""
        return (f"{head}{self.total} recorded entries: {self.exact} exact ({pct:.1f}%), "
                f"{self.unknown} unknown, {self.wrong} wrong")

    def format(self, limit: int = 40) -> str:
        """Summary, then each offending entry (worst first) with, under it, one line
        per size set where it failed."""
        lines = [self.summary()]
        groups: dict[tuple, list[Problem]] = defaultdict(list)
        for p in self.problems:
            groups[(p.file, p.line, p.name)].append(p)
        ordered = sorted(groups.values(), key=lambda ps: (
            -max(_RANK[p.status] for p in ps), ps[0].file, ps[0].line, ps[0].name))
        for ps in ordered[:limit]:
            status = _worst(*(p.status for p in ps))
            claims = list(dict.fromkeys(p.claimed for p in ps))
            lines.append(f"  {status.upper():7} {ps[0].where()}: analyzer {' | '.join(claims)}")
            for p in ps:
                detail = f"real {p.expected}"
                if p.got and p.got != p.claimed:
                    detail += f", analyzer gives {p.got}"
                if p.reason:
                    detail += f" ({p.reason})"
                lines.append(f"            at {p.at()}: {detail}")
        if len(ordered) > limit:
            lines.append(f"  ... and {len(ordered) - limit} more entries")
        notable = [d for d in self.diagnostics if d.get("severity") in ("error", "warning")]
        if notable and not self.ok:
            lines.append("  analyzer diagnostics:")
            for d in notable[:20]:
                lines.append(f"    {display_path(str(d.get('file', '?')))}:{d.get('line', '?')}: "
                             f"{d.get('severity')} {d.get('code', '')}: {d.get('message', '')}")
            if len(notable) > 20:
                lines.append(f"    ... and {len(notable) - 20} more")
        return "\n".join(lines)

    __str__ = format


def _match_file(name: str, tracked: set[str]) -> str | None:
    """The tracked absolute path an analyzer "file" field refers to."""
    if not name:
        return None
    candidate = os.path.realpath(name if os.path.isabs(name) else os.path.join(os.getcwd(), name))
    if candidate in tracked:
        return candidate
    norm = os.path.normpath(name).replace(os.sep, "/")
    while norm.startswith("./"):
        norm = norm[2:]
    for t in tracked:
        if t.replace(os.sep, "/").endswith("/" + norm.lstrip("/")):
            return t
    return None


@lru_cache(maxsize=4096)
def _parse(text: str, names: tuple[str, ...]):
    import sympy

    local = {n: sympy.Symbol(n, integer=True, positive=True) for n in names}
    return sympy.sympify(text, locals=local)


class _Unevaluable(Exception):
    pass


def _eval_dim(dim, names, subs):
    """An int, or None for an unknown dim ("?"); raises _Unevaluable on leftover
    symbols; a non-integer value is returned as its string (never equal to an int)."""
    if dim is None or dim == "?":
        return None
    if isinstance(dim, bool):
        raise _Unevaluable(f"bad dim {dim!r}")
    if isinstance(dim, int):
        return dim
    try:
        expr = _parse(str(dim), names)
    except Exception as e:
        raise _Unevaluable(f"cannot parse dim {dim!r}: {type(e).__name__}") from e
    val = expr.subs(subs) if getattr(expr, "free_symbols", None) else expr
    if getattr(val, "free_symbols", None):
        raise _Unevaluable(f"dim {dim!r} has symbols with no size: {sorted(map(str, val.free_symbols))}")
    try:
        if val.is_Integer:
            return int(val)
    except AttributeError:
        pass
    return f"{val}"


def _eval_when(cond, names, subs):
    """True/False, or None when the condition cannot be decided."""
    import sympy

    if cond is None:
        return True
    if isinstance(cond, bool):
        return cond
    try:
        val = _parse(str(cond), names)
        val = val.subs(subs) if getattr(val, "free_symbols", None) else val
    except Exception:
        return None
    if val is sympy.true or val is True:
        return True
    if val is sympy.false or val is False:
        return False
    return None


def _shape_parts(shape_item):
    if isinstance(shape_item, dict):
        return shape_item.get("shape"), shape_item.get("when")
    return shape_item, None


def _describe_entry(entry: dict) -> str:
    if "elements" in entry and entry.get("elements") is not None:
        kind = entry.get("type", "seq")
        return f"{kind}[" + ", ".join(_describe_entry(e) for e in entry["elements"]) + "]"
    shapes = entry.get("shapes")
    if shapes is None:
        t = entry.get("type", "?")
        return f"{t}={entry['value']}" if "value" in entry else str(t)
    parts = []
    for s in shapes:
        dims, when = _shape_parts(s)
        txt = "(" + ", ".join(str(d) for d in (dims or [])) + ")" if dims is not None else "?"
        parts.append(txt + (f" when {when}" if when else ""))
    return "{" + ", ".join(parts) + "}"


def _judge_tensors(recorded: set, entries: list[dict], names, subs):
    """(status, evaluated description, reason) for recorded shapes vs tensor entries."""
    with_shapes = [e for e in entries if isinstance(e.get("shapes"), list)]
    if not with_shapes:
        types = sorted({str(e.get("type")) for e in entries}) or ["no entry"]
        return UNKNOWN, "", f"analyzer type {'/'.join(types)}, not a tensor"
    full: set = set()
    patterns: list[tuple] = []  # shapes with unknown dims, or whose condition is undecided
    reasons: list[str] = []
    for e in with_shapes:
        for item in e["shapes"]:
            dims, when = _shape_parts(item)
            holds = _eval_when(when, names, subs)
            if holds is False:
                continue
            if dims is None:
                patterns.append(None)  # unknown rank
                continue
            try:
                ev = tuple(_eval_dim(d, names, subs) for d in dims)
            except _Unevaluable as err:
                patterns.append(None)
                reasons.append(str(err))
                continue
            if holds is None:
                reasons.append(f"condition {when!r} undecided")
                patterns.append(ev)
            elif any(d is None for d in ev):
                patterns.append(ev)
            else:
                full.add(ev)

    def fits(pattern, shape):
        return pattern is None or (len(pattern) == len(shape) and
                                   all(p is None or p == s for p, s in zip(pattern, shape)))

    extra = full - recorded
    missed = {r for r in recorded if r not in full and not any(fits(p, r) for p in patterns)}
    shown = sorted(format_value(s) for s in full) + sorted(
        "?" if p is None else "(" + ", ".join("?" if d is None else str(d) for d in p) + ")"
        for p in patterns)
    got = "{" + ", ".join(shown) + "}"
    if extra or missed:
        why = []
        if missed:
            why.append("missing " + _format_set(missed))
        if extra:
            why.append("never seen " + _format_set(extra))
        return WRONG, got, "; ".join(why + reasons)
    if patterns:
        return UNKNOWN, got, "; ".join(reasons) or "unknown dims"
    return EXACT, got, ""


def _judge(recorded: set, entries: list[dict], names, subs):
    tensors = {v for v in recorded if isinstance(v, tuple)}
    seqs = [v for v in recorded if isinstance(v, Seq)]
    results = []
    if tensors:
        results.append(_judge_tensors(tensors, entries, names, subs))
    if seqs:
        results.append(_judge_seqs(seqs, entries, names, subs))
    status = _worst(*(r[0] for r in results))
    got = " | ".join(r[1] for r in results if r[1])
    reason = "; ".join(r[2] for r in results if r[2])
    return status, got, reason


def _judge_seqs(seqs: list[Seq], entries: list[dict], names, subs):
    containers = [e for e in entries if isinstance(e.get("elements"), list)]
    if not containers:
        types = sorted({str(e.get("type")) for e in entries}) or ["no entry"]
        return UNKNOWN, "", f"analyzer type {'/'.join(types)}, not a tuple/list"
    by_len: dict[int, list[dict]] = defaultdict(list)
    for c in containers:
        by_len[len(c["elements"])].append(c)
    statuses, gots, reasons = [], [], []
    for n in sorted({len(s.elements) for s in seqs}):
        if n not in by_len:
            statuses.append(WRONG)
            reasons.append(f"real length {n}, analyzer lengths {sorted(by_len)}")
            continue
        parts = []
        for i in range(n):
            values = {s.elements[i] for s in seqs if len(s.elements) == n} - {None}
            if not values:
                parts.append("-")
                continue
            elems = [c["elements"][i] for c in by_len[n] if isinstance(c["elements"][i], dict)]
            st, got, why = _judge(values, elems, names, subs)
            statuses.append(st)
            parts.append(got or "?")
            if why:
                reasons.append(f"[{i}] {why}")
        gots.append("[" + ", ".join(parts) + "]")
    return _worst(*statuses), " | ".join(gots), "; ".join(reasons)


def expand_at_sizes(analysis: dict, sizes: dict) -> dict:
    """The analyzer's JSON evaluated at ``sizes`` where the oracle's comparison cannot:
    every list of symbolic length (``length``, ``prefix``, ``element``) written out as
    plain ``elements`` (torch returns tuples where the analyzer has lists of symbolic
    length, from split and unbind: the kinds are not compared, the elements are), and
    every union of values of different kinds (``type: union``) replaced by the option
    whose ``when`` holds at these sizes."""
    import sympy

    subs = {sympy.Symbol(k, integer=True, positive=True): v for k, v in sizes.items()}

    def expand(v):
        if not isinstance(v, dict):
            return v
        if v.get("type") in ("list", "tuple") and "length" in v and "element" in v:
            try:
                n = sympy.sympify(str(v["length"]), locals={str(s): s for s in subs}).subs(subs)
            except (sympy.SympifyError, TypeError):
                return v
            if not getattr(n, "is_Integer", False):
                return v
            prefix = [expand(x) for x in v.get("prefix", [])]
            rest = int(n) - len(prefix)
            if rest < 0:
                return v
            return {**v, "elements": prefix + [expand(v["element"])] * rest}
        if v.get("type") == "union" and isinstance(v.get("options"), list):
            # the one option whose condition holds at these sizes, if it is decided
            holding = [o for o in v["options"] if _holds(o.get("when"), subs) is True]
            if len(holding) == 1:
                chosen = {k: x for k, x in holding[0].items() if k != "when"}
                return expand({**chosen, "file": v.get("file"), "line": v.get("line"), "name": v.get("name")})
            return v
        out = dict(v)
        if isinstance(v.get("elements"), list):
            out["elements"] = [expand(x) for x in v["elements"]]
        if isinstance(v.get("options"), list):
            out["options"] = [expand(x) for x in v["options"]]
        return out

    return {**analysis, "entries": [expand(e) for e in analysis["entries"]]}


def _holds(cond, subs):
    import sympy

    if cond is None:
        return True
    try:
        v = sympy.sympify(str(cond), locals={str(s): s for s in subs})
        v = v.subs(subs) if isinstance(v, sympy.Basic) else v
    except (sympy.SympifyError, TypeError):
        return None
    return True if v in (sympy.true, True) else False if v in (sympy.false, False) else None


def compare(analysis_json: dict, recorded: dict, sizes: dict[str, int],
            files: Iterable[str | os.PathLike] | None = None, title: str = "") -> Report:
    """Judge every recorded entry against the analyzer's entry at the same
    (file, line, name), evaluating its symbolic shapes at ``sizes``.

    exact: the set of evaluated shapes (those whose ``when`` holds) equals the set of
    real shapes. unknown: no entry, not a tensor/container entry, or a "?" dim (with
    nothing contradicting the real shapes). wrong: anything else.
    """
    analysis_json = expand_at_sizes(analysis_json, sizes)
    if files is None:
        tracked = {k[0] for k in recorded}
    else:
        tracked = {os.path.realpath(os.fspath(f)) for f in files}
    symbols = dict(analysis_json.get("symbols") or {})
    names = tuple(sorted(set(symbols) | set(sizes)))
    import sympy

    subs = {sympy.Symbol(n, integer=True, positive=True): sympy.Integer(v) for n, v in sizes.items()}

    index: dict[tuple[str, int, str], list[dict]] = defaultdict(list)
    file_cache: dict[str, str | None] = {}
    for e in analysis_json.get("entries") or []:
        f = e.get("file", "")
        if f not in file_cache:
            file_cache[f] = _match_file(f, tracked)
        path = file_cache[f]
        if path is not None:
            index[(path, int(e.get("line", -1)), e.get("name"))].append(e)

    report = Report(diagnostics=list(analysis_json.get("diagnostics") or []), title=title)
    for key in sorted(recorded):
        path, line, name = key
        if path not in tracked:
            continue
        values = recorded[key]
        entries = index.get(key, [])
        if not entries:
            status, raw, got, reason = UNKNOWN, "nothing", "", "no analyzer entry"
        else:
            status, got, reason = _judge(set(values), entries, names, subs)
            raw = " / ".join(_describe_entry(e) for e in entries)
        if status == EXACT:
            report.exact += 1
        else:
            if status == UNKNOWN:
                report.unknown += 1
            else:
                report.wrong += 1
            report.problems.append(Problem(path, line, name, status, dict(sizes),
                                           _format_set(values), raw, got, reason))
    return report
