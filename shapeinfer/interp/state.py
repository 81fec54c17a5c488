"""Analysis state: the context shared by a whole analysis, and per-path frames."""

from __future__ import annotations

import ast
import linecache
import os
from dataclasses import dataclass, field
from typing import Optional

import sympy
import torch

from .. import symbolic as sym
from ..diagnostics import CODES, ERROR, WARNING, Diagnostic
from ..values import TensorType, TupleV, UnionV, Unknown, Value, fork_copy

MAX_UNION = 8  # options kept in one union before it is widened
MAX_DEPTH = 60  # nested calls

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep


def is_stdlib_file(filename: str) -> bool:
    return filename.startswith(_STDLIB_DIR) and "site-packages" not in filename


def is_library_file(filename: str) -> bool:
    """Files whose variables are not reported (torch's and the standard library's own)."""
    return filename.startswith(_TORCH_DIR) or (filename.startswith(_STDLIB_DIR)
                                               and "site-packages" not in filename)


_PARSED: dict = {}  # filename -> (stat stamp, tree, defs): files parsed once per process


def _parsed(filename: str) -> tuple:
    """The parsed file and its function definitions by first line. Files on disk are
    parsed once per process while they are unchanged (the AST is never mutated)."""
    try:
        st = os.stat(filename)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    cached = _PARSED.get(filename)
    if stamp is not None and cached is not None and cached[0] == stamp:
        return cached[1], cached[2]
    lines = linecache.getlines(filename)
    tree = None
    if lines:
        try:
            tree = ast.parse("".join(lines), filename)
        except SyntaxError:
            tree = None
    defs: dict[int, ast.AST] = {}
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                defs.setdefault(first, node)
                defs.setdefault(node.lineno, node)
    if stamp is not None:
        _PARSED[filename] = (stamp, tree, defs)
    return tree, defs


def clear_parsed_sources() -> None:
    """Forget the files parsed so far (to time an analysis from cold)."""
    _PARSED.clear()


class SourceCache:
    """Parsed files and the function definitions in them, by first line."""

    def __init__(self):
        self._files: dict[str, Optional[ast.Module]] = {}
        self._defs: dict[str, dict[int, ast.AST]] = {}

    def module(self, filename: str) -> Optional[ast.Module]:
        if filename not in self._files:
            self._files[filename], self._defs[filename] = _parsed(filename)
        return self._files[filename]

    def function_node(self, code) -> Optional[ast.AST]:
        filename = code.co_filename
        if self.module(filename) is None:
            return None
        node = self._defs[filename].get(code.co_firstlineno)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != code.co_name \
                and code.co_name != "<lambda>":
            # decorators or a lambda on the same line: search the neighbourhood
            for n in self._defs[filename].values():
                if getattr(n, "name", None) == code.co_name and n.lineno >= code.co_firstlineno:
                    return n
        return node

    def line(self, filename: str, lineno: int) -> str:
        return linecache.getline(filename, lineno).rstrip("\n")


def describe_exception(exc: BaseException) -> str:
    """``Type: message (at file:line)``, the line being the analyzer's own innermost frame."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if f"{os.sep}shapeinfer{os.sep}" in code.co_filename:
            where = f" (at {os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name})"
        tb = tb.tb_next
    message = str(exc)
    if len(message) > 300:
        message = message[:300] + "..."
    return f"{type(exc).__name__}: {message}{where}"


@dataclass
class Entry:
    """What a variable held at one line: values, each under a path condition."""

    file: str
    line: int
    name: str
    values: list = field(default_factory=list)  # list of (cond, Value)


class AnalysisContext:
    """State of one analysis: symbols, recorded entries, diagnostics, caches."""

    def __init__(self, symbols: dict[str, int]):
        self.symbols = dict(symbols)  # name -> sample value
        self.sources = SourceCache()
        self.entries: dict[tuple, Entry] = {}
        self.diagnostics: list[Diagnostic] = []
        self._diag_keys: set = set()
        self.depth = 0
        self.loc: tuple[str, int, int] = ("<unknown>", 0, 0)
        self.attr_overlay: dict[tuple[int, str], Value] = {}
        # keys the analysis added to real dicts (in the overlay; the dict is never changed):
        # id -> (the dict, its added keys in order). A hook registered on a live module
        # (transformers installs its output-capturing hooks at the first call) is one.
        self.added_keys: dict[int, tuple[dict, list]] = {}
        self.pc = sympy.true  # the path condition of the statement being analyzed
        self.data_conditions = 0
        self.size_audit = None  # a SizeAudit sees every value (see size_audit.py)
        self.call_stack: list = []  # (file, line, col) of the calls being interpreted

    def data_condition(self, line: int, speculative: bool = False) -> sympy.Symbol:
        """A fresh opaque condition for a branch on tensor values. Paths split on it are
        kept apart (so correlated branches stay consistent) and joined where they agree;
        a `when` that mentions it names no declared symbol, so it is never evaluated.
        A speculative one stands for a test on a value the analysis lost."""
        self.data_conditions += 1
        return sympy.Symbol(f"data_L{line}_{self.data_conditions}{_SPECULATIVE if speculative else ''}")

    # ---- locations and diagnostics ----
    def at(self, filename: str, node: ast.AST) -> None:
        self.loc = (filename, getattr(node, "lineno", self.loc[1]), getattr(node, "col_offset", 0) + 1)

    def report(self, code: str, message: str, *, severity: str = "", notes=(), when=None,
               loc: Optional[tuple] = None, dims: Optional[tuple] = None) -> None:
        file, line, col = loc or self.loc
        if when is None and self.pc is not sympy.true:
            when = self.pc
        if when is not None and infeasible(when):
            return  # on no path at all (a join of states that never occur together)
        if is_speculative(when) and (severity or CODES.get(code, ("", ERROR))[1]) == ERROR:
            # only on paths that exist if a value the analysis lost allows them: the real
            # run may never take them, so this is not claimed as an error
            severity, message = WARNING, f"{message} (on a path an unknown value may rule out)"
        key = (code, file, line, col, message, str(when))
        if key in self._diag_keys:
            return
        self._diag_keys.add(key)
        self.diagnostics.append(Diagnostic(code, message, file, line, col, severity,
                                           tuple(notes), None if when in (None, True, sympy.true)
                                           else str(when), dims,
                                           tuple(c for c in self.call_stack if c[1] > 0)))

    def internal_failure(self, what: str, exc: BaseException) -> Unknown:
        """An analyzer failure (not the model's): an SI005 at the current location whose
        message is the exception, and the Unknown that stands for the lost value."""
        reason = f"{what} failed: {describe_exception(exc)}"
        try:
            self.report("SI005", reason)
        except Exception:  # the path condition itself is what failed: report without it
            file, line, col = self.loc
            self.diagnostics.append(Diagnostic("SI005", reason, file, line, col))
        return Unknown(reason)

    # ---- entries ----
    def record(self, filename: str, line: int, name: str, value: Value, pc) -> None:
        if is_library_file(filename):
            return
        key = (filename, line, name)
        pc = without_data_conditions(pc)  # reaching this line is what matters, not how
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = Entry(filename, line, name)
        for cond, v in flatten_union(value, pc):
            if (cond, v) not in entry.values and len(entry.values) < 64:
                entry.values.append((cond, v))

    def sample_holds(self, cond) -> Optional[bool]:
        return sym.holds_at(cond, self.symbols)


_NEGATED_REL = {sympy.Lt: sympy.Ge, sympy.Le: sympy.Gt, sympy.Ne: sympy.Eq}


def infeasible(cond) -> bool:
    """Whether a condition is false for propositional reasons: ``a & ~a``, or
    ``T < 16 & T >= 16`` (a relation and its negation are one proposition). Arithmetic
    contradictions (``T < 5 & T > 10``) are not looked for."""
    if cond is sympy.false or cond is False:
        return True
    if not isinstance(cond, sympy.Basic) or cond is sympy.true or condition_too_big(cond):
        return False
    props: dict = {}

    def prop(rel):
        positive = rel
        negate = False
        if type(rel) in _NEGATED_REL:
            positive = _NEGATED_REL[type(rel)](rel.lhs, rel.rhs)
            negate = True
        sym_ = props.setdefault(positive, sympy.Symbol(f"_p{len(props)}"))
        return sympy.Not(sym_) if negate else sym_

    boolean = cond.xreplace({r: prop(r) for r in cond.atoms(sympy.Rel)})
    try:
        return sympy.satisfiable(boolean) is False
    except Exception:
        return False


_SPECULATIVE = "_unknown"


def is_speculative(cond) -> bool:
    return any(s.name.endswith(_SPECULATIVE) for s in getattr(cond, "free_symbols", ()))


def is_data_condition(cond) -> bool:
    return any(s.name.startswith("data_L") for s in getattr(cond, "free_symbols", ()))


MAX_DATA_CONDITIONS = 2
MAX_CONDITION_ATOMS = 8


MAX_CONDITION_NODES = 60


def condition_too_big(cond) -> bool:
    """Whether a condition has grown past what is worth carrying (each check stops
    early, so it is cheap even on a large expression)."""
    if not isinstance(cond, sympy.Basic) or cond in (sympy.true, sympy.false):
        return False
    for count, _ in enumerate(sympy.preorder_traversal(cond)):
        if count > MAX_CONDITION_NODES:
            return True
    data = [s for s in cond.free_symbols if s.name.startswith("data_L")]
    return len(data) > MAX_DATA_CONDITIONS or len(cond.atoms(sympy.Rel)) + len(data) > MAX_CONDITION_ATOMS


def without_data_conditions(cond):
    """Drop the conjuncts of a path condition that are opaque data conditions."""
    if not is_data_condition(cond):
        return cond
    if isinstance(cond, sympy.And):
        return sympy.And(*[c for c in cond.args if not is_data_condition(c)])
    if isinstance(cond, (sympy.Symbol, sympy.Not)):
        return sympy.true
    return cond


def flatten_union(value: Value, pc=sympy.true) -> list:
    """(condition, value) pairs for a possibly conditional value under a path condition."""
    if isinstance(value, UnionV):
        out = []
        for cond, v in value.options:
            c = sympy.And(pc, cond)
            if c is not sympy.false:
                out.extend(flatten_union(v, c))
        return out
    return [(pc, value)]


def make_union(options: list) -> Value:
    """Build a union from (cond, value) pairs, merging equal values and dropping false
    conditions; a single survivor is returned as itself."""
    merged: list = []
    flat = [pair for cond, v in options for pair in flatten_union(v, cond)]
    for cond, v in flat:
        if infeasible(cond):
            continue
        for i, (c2, v2) in enumerate(merged):
            if _same(v, v2):
                merged[i] = (sympy.Or(c2, cond), v2)
                break
        else:
            merged.append((cond, v))
    if not merged:
        return Unknown("no path reaches this value")
    merged = _widen_same_condition(merged)
    if len(merged) == 1:
        return merged[0][1]
    if len(merged) > MAX_UNION:
        return Unknown(f"more than {MAX_UNION} shape variants")
    if any(condition_too_big(c) for c, _ in merged):
        # conditions are growing (many data-dependent splits): keep what the variants
        # agree on instead, so the analysis stays fast
        return widen_values([v for _, v in merged])
    return UnionV(tuple((simplify_condition(c), v) for c, v in merged))


def _widen_same_condition(options: list) -> list:
    """Options under one same condition are values from paths whose conditions were
    dropped (too big): which one holds is unknown, so they are widened into one value
    rather than each claimed under a condition that does not tell them apart."""
    groups: dict = {}
    for cond, v in options:
        groups.setdefault(cond, []).append(v)
    if len(groups) == len(options):
        return options
    return [(cond, widen_values(values)) for cond, values in groups.items()]


def simplify_condition(cond):
    """Simplify a small condition; large ones are left as they are, because boolean
    minimisation is exponential in the number of atoms."""
    if not isinstance(cond, sympy.Basic) or cond in (sympy.true, sympy.false):
        return cond
    atoms = cond.atoms(sympy.Rel) | {a for a in cond.free_symbols if not a.is_integer}
    if len(atoms) > 4:
        return cond
    # deep=False: minimise the logic only; simplifying every relation inside (floors,
    # Min/Max of the sizes) can take seconds per call on recurrent models (xLSTM)
    return sympy.simplify_logic(cond, deep=False)


def _same(a, b) -> bool:
    try:
        return a == b
    except Exception:
        return a is b


class Frame:
    """One path through one function: its variables and its path condition."""

    def __init__(self, filename: str, globals_: dict, env: Optional[dict] = None, pc=sympy.true,
                 scope: Optional["Frame"] = None, cells: Optional[dict] = None, func=None):
        self.filename = filename
        self.globals = globals_
        self.env: dict[str, Value] = env if env is not None else {}
        self.pc = pc
        self.scope = scope  # the enclosing frame for closures
        self.cells = cells or {}  # free variables of a real function (name -> Value)
        self.func = func  # the Python function (or None) this frame runs
        self.returns: list = []  # (pc, Value)
        self.yields: list = []  # values yielded by a generator function

    def fork(self, cond=sympy.true) -> "Frame":
        pc = sympy.And(self.pc, cond)
        if condition_too_big(pc):  # forget how data-dependent paths split: sound, smaller
            pc = without_data_conditions(pc)
        f = Frame(self.filename, self.globals, fork_copy(self.env), pc,
                  self.scope, self.cells, self.func)
        f.returns = self.returns  # returns and yields are shared by all paths of one call
        f.yields = self.yields
        return f


@dataclass
class Flow:
    """How a block ended: the frame that falls through (or None), and the frames that
    left by ``break`` or ``continue``. Returns are collected on the frame itself."""

    normal: Optional[Frame]
    breaks: list = field(default_factory=list)
    continues: list = field(default_factory=list)


def relative_condition(pc, parent_pc):
    """``pc`` without the conjuncts it shares with ``parent_pc`` (pc = parent & rest)."""
    if pc == parent_pc:
        return sympy.true
    parent = set(sympy.And.make_args(parent_pc)) if parent_pc is not sympy.true else set()
    own = sympy.And.make_args(pc)
    if parent <= set(own):
        return sympy.And(*[c for c in own if c not in parent])
    return None


def join_frames(frames: list, parent_pc=None) -> Optional[Frame]:
    """Join paths: a variable that differs becomes a union over the paths' conditions.
    With ``parent_pc`` (the condition before the paths split), conditions are kept
    relative to it, so they do not grow with every join."""
    frames = [f for f in frames if f is not None]
    if not frames:
        return None
    if len(frames) == 1:
        return frames[0]
    base = frames[0]
    names = []
    for f in frames:
        for n in f.env:
            if n not in names:
                names.append(n)
    conds = [f.pc for f in frames]
    if parent_pc is not None:
        rel = [relative_condition(f.pc, parent_pc) for f in frames]
        if all(r is not None for r in rel):
            conds = rel
        else:
            parent_pc = None
    env = {}
    for n in names:
        opts = [(c, f.env[n]) for c, f in zip(conds, frames) if n in f.env]
        first = opts[0][1]
        if all(_same(v, first) for _, v in opts[1:]):
            env[n] = first
        else:
            env[n] = make_union(opts)
    pc = simplify_condition(sympy.Or(*conds))
    if parent_pc is not None:
        pc = parent_pc if pc is sympy.true else sympy.And(parent_pc, pc)
    joined = Frame(base.filename, base.globals, env, pc, base.scope, base.cells, base.func)
    joined.returns = base.returns
    joined.yields = base.yields
    return joined


def widen_values(values: list) -> Value:
    """The most precise value that covers all of ``values`` without conditions."""
    first = values[0]
    if all(_same(v, first) for v in values[1:]):
        return first
    if all(isinstance(v, TensorType) for v in values):
        dtype = first.dtype if all(v.dtype == first.dtype for v in values) else None
        if any(v.shape is None or len(v.shape) != len(first.shape) for v in values):
            return TensorType(dtype, None, first.device, "rank differs across a data-dependent branch")
        dims = tuple(d if all(sym.equal(v.shape[i], d) is True for v in values) else None
                     for i, d in enumerate(first.shape))
        return TensorType(dtype, dims, first.device,
                          None if None not in dims else "size differs across a data-dependent branch")
    if all(isinstance(v, TupleV) and len(v.items) == len(first.items) for v in values):
        return TupleV(tuple(widen_values([v.items[i] for v in values]) for i in range(len(first.items))))
    return Unknown("value differs across a data-dependent branch")
