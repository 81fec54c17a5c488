"""Shape-breaking mutations of the example models, classified by torch, checked against
the analyzer: the generator and evaluator shared by ``tests/test_mutations.py`` (a fast
subset) and ``benchmarks/mutations.py`` (everything).

Generating
----------
``generate(path)`` reads a model file and returns ``Mutant`` objects, each one edit of
the source text (made at ``ast`` node positions, so everything else stays byte for byte
the same: class names, ``__shapeinfer__``, formatting). Only code that builds or runs
the models is edited: methods of classes and module-level helpers, never the training
harness of the ``train_*.py`` files (``make_batch``, ``train``, ...). Kinds:

- ``width``     +1 on a layer's width argument (``nn.Linear(a, b)``'s a or b, a conv's
                channels, a norm's features, an LSTM's sizes, the leading numeric
                arguments of the file's own layer classes and helpers);
- ``kernel``    +1 on a conv/pool ``kernel_size``, ``stride`` or ``padding``;
- ``permute``   swapped ``permute`` entries, or ``transpose(a, b)`` on another pair;
- ``reshape``   +1 on one size of a ``view``/``reshape``, or ``flatten``'s start dim;
- ``cat``       the wrong ``dim`` of ``torch.cat``/``torch.stack`` (one up, one down);
- ``transpose`` a ``.transpose(..)``/``.t()``/``.permute(..)``/``.T`` removed;
- ``slice``     an off-by-one slice bound (``x[:, :n]`` -> ``x[:, :n - 1]``, ``a:`` -> ``a + 1:``);
- ``unseen``    a new first statement in ``forward``, ``if x.size(i) > K: x = ...`` with a
                wrong reshape, where K is the sample size (so the sample never takes
                the branch) and some oracle size is larger (so torch can take it):
                ``unseen-count`` breaks the element count of the reshape itself,
                ``unseen-layout`` keeps the count but moves elements between dims,
                so the failure (if any) surfaces later.

Classifying and checking
------------------------
``evaluate(mutant)`` writes the mutated file to a fresh temporary directory, loads its
``__shapeinfer__`` targets and runs every target with torch at the sample sizes and
at each ``oracle_sizes`` entry (sizes where the unedited model itself fails are
skipped). A mutant that raises at some size is *breaking*; one that runs everywhere
is *benign* (``benign-shapes`` when some submodule's output shape or the output
changed, ``benign-same`` otherwise); one whose model cannot even be built is
*build-error* and is left out. Then the analyzer runs in-process on each target at its
sample sizes. When a benign mutant draws an error diagnostic whose ``when`` holds at
none of the sizes tried, sizes satisfying ``when`` are searched for and torch is run
there too: a failure there makes the mutant breaking (the analyzer saw further).

A breaking mutant is

- ``found``: an error diagnostic in the mutated file at the edited line(s) or at the
  innermost line of the mutated file in torch's traceback, or at the line where torch's
  exception surfaces (the innermost frame outside torch and the standard library: the
  same as the last for the examples; a library's line, such as transformers'
  ``sdpa_attention.py``, when the mutated file calls into one), whose ``when`` (if any)
  holds at a size where torch failed (for ``unseen`` mutants a ``when`` is required);
- ``warning``: no such error, but an SI300 warning at those lines whose ``when``
  holds at a failing size;
- ``bad-when``: an error at those lines whose ``when`` is missing (``unseen``) or holds at
  none of the failing sizes;
- ``wrong-line``: errors, none at those lines;
- ``missed``: no error.

A benign mutant with any error diagnostic is a *false alarm*.
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import os
import re
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import sympy
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import shapeinfer  # noqa: E402
from shapeinfer.spec import SpecError, default_sizes, load_targets  # noqa: E402

KINDS = ("width", "kernel", "permute", "reshape", "cat", "transpose", "slice", "unseen")

# module-level functions of the train_*.py files that are the harness, not the model
HARNESS_FUNCTIONS = {"make_model", "make_optimizer", "make_batch", "loss_fn", "train", "main"}

# nn layers: their width arguments as (position, keyword)
_WIDTH_ARGS = {
    "Linear": [(0, "in_features"), (1, "out_features")],
    "LazyLinear": [(0, "out_features")],
    "Bilinear": [(0, "in1_features"), (1, "in2_features"), (2, "out_features")],
    **{f"Conv{d}d": [(0, "in_channels"), (1, "out_channels")] for d in (1, 2, 3)},
    **{f"ConvTranspose{d}d": [(0, "in_channels"), (1, "out_channels")] for d in (1, 2, 3)},
    **{f"BatchNorm{d}d": [(0, "num_features")] for d in (1, 2, 3)},
    **{f"InstanceNorm{d}d": [(0, "num_features")] for d in (1, 2, 3)},
    "GroupNorm": [(1, "num_channels")],
    "LayerNorm": [(0, "normalized_shape")],
    "Embedding": [(1, "embedding_dim")],
    **{n: [(0, "input_size"), (1, "hidden_size")]
       for n in ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")},
    "TransformerEncoderLayer": [(0, "d_model"), (2, "dim_feedforward")],
    "TransformerDecoderLayer": [(0, "d_model"), (2, "dim_feedforward")],
    "MultiheadAttention": [(0, "embed_dim")],
    **{f"AdaptiveAvgPool{d}d": [(0, "output_size")] for d in (1, 2, 3)},
    **{f"AdaptiveMaxPool{d}d": [(0, "output_size")] for d in (1, 2, 3)},
    "PixelShuffle": [(0, "upscale_factor")],
}
# conv/pool spatial arguments as (position, keyword)
_CONV_SPATIAL = [(2, "kernel_size"), (3, "stride"), (4, "padding")]
_POOL_SPATIAL = [(0, "kernel_size"), (1, "stride"), (2, "padding")]
_FPOOL_SPATIAL = [(1, "kernel_size"), (2, "stride"), (3, "padding")]
_SPATIAL_ARGS = {
    **{f"Conv{d}d": _CONV_SPATIAL for d in (1, 2, 3)},
    **{f"ConvTranspose{d}d": _CONV_SPATIAL for d in (1, 2, 3)},
    **{f"{p}Pool{d}d": _POOL_SPATIAL for p in ("Max", "Avg") for d in (1, 2, 3)},
    **{f"{p}_pool{d}d": _FPOOL_SPATIAL for p in ("max", "avg") for d in (1, 2, 3)},
}
_SPATIAL_KEYWORDS = {"kernel_size", "stride", "padding"}
_NON_LAYER_CALLS = {"super", "getattr", "setattr", "isinstance", "len", "range", "int", "float",
                    "print", "list", "tuple", "dict", "zip", "enumerate", "min", "max"}


@dataclass(frozen=True)
class Mutant:
    id: str            # "<file>:<kind>:<line>:<col>[:<variant>]", stable while the example is
    kind: str
    file: Path         # the original file
    lines: tuple       # (first, last) edited line in the mutated source
    description: str   # what was changed, "old -> new"
    source: str        # the mutated file


# ---------------------------------------------------------------------------
# generating

def _callee_name(call: ast.Call) -> Optional[str]:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    if (isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "getattr"
            and len(f.args) == 2 and isinstance(f.args[1], ast.Name)):
        return "LSTM"  # getattr(nn, rnn_type)(...): an RNN of the configured type
    return None


def _int_value(node) -> Optional[int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    return None


class _Source:
    """The file's text with offsets for (line, col) positions."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        for line in text.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets; the examples are ASCII in code
        return self.starts[line - 1] + col

    def span(self, node) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def segment(self, node) -> str:
        a, b = self.span(node)
        return self.text[a:b]

    def replace(self, node, new: str) -> str:
        a, b = self.span(node)
        return self.text[:a] + new + self.text[b:]

    def insert(self, offset: int, new: str) -> str:
        return self.text[:offset] + new + self.text[offset:]


def _bump(src: _Source, node, delta: int) -> tuple[ast.AST, str]:
    """(node to replace, its new text) for ``node`` plus ``delta``; a tuple's first element."""
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        return _bump(src, node.elts[0], delta)
    v = _int_value(node)
    if v is not None:
        return node, str(v + delta)
    text = src.segment(node)
    # "a * b + 1" and "a - b - 1" parse as meant; anything looser gets parentheses
    plain = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Div, ast.Pow,
                                                             ast.Add, ast.Sub)))
    if not plain:
        text = f"({text})"
    return node, f"{text} {'+' if delta > 0 else '-'} {abs(delta)}"


def _arg(call: ast.Call, pos: int, kw: str):
    if any(isinstance(a, ast.Starred) for a in call.args[:pos + 1]):
        return None
    if pos < len(call.args):
        return call.args[pos]
    for k in call.keywords:
        if k.arg == kw:
            return k.value
    return None


def _model_functions(tree: ast.Module):
    """(function node, enclosing class name or None) for every function that is model code."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield item, node.name
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name not in HARNESS_FUNCTIONS:
                yield node, None


def _user_callables(tree: ast.Module) -> dict:
    """Names of the file's own classes and functions -> their parameter names (self excluded)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            init = next((i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"),
                        None)
            if init is not None:
                out[node.name] = [a.arg for a in init.args.args[1:]]
        elif isinstance(node, ast.FunctionDef) and node.name not in HARNESS_FUNCTIONS:
            out[node.name] = [a.arg for a in node.args.args]
    return out


def _walk_calls(fn):
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            yield node


class _Gen:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.src = _Source(self.path.read_text())
        self.tree = ast.parse(self.src.text, filename=str(path))
        self.user = _user_callables(self.tree)
        self.out: list[Mutant] = []
        self.seen: set = set()

    def add(self, kind: str, node, new_source: str, description: str, variant: str = "",
            lines: Optional[tuple] = None):
        if new_source == self.src.text:
            return
        ident = f"{self.path.name}:{kind}:{node.lineno}:{node.col_offset}" + (f":{variant}" if variant else "")
        if ident in self.seen:
            return
        self.seen.add(ident)
        self.out.append(Mutant(ident, kind, self.path, lines or (node.lineno, node.end_lineno),
                               description, new_source))

    def bump(self, kind: str, node, delta: int, variant: str, where: str):
        target, new = _bump(self.src, node, delta)
        old = self.src.segment(target)
        self.add(kind, target, self.src.replace(target, new), f"{where}: {old} -> {new}", variant)

    def user_width_args(self, name: str) -> list:
        """(position, keyword) of the width arguments of the file's own class or helper."""
        params = self.user[name]
        return [(i, params[i] if i < len(params) else "") for i in range(min(2, len(params)))]

    # -- kinds ---------------------------------------------------------------
    def width_and_kernel(self, fn):
        for call in _walk_calls(fn):
            name = _callee_name(call)
            if name is None or name in _NON_LAYER_CALLS:
                continue
            where = self.src.segment(call.func) if not isinstance(call.func, ast.Call) else name
            specs = _WIDTH_ARGS.get(name)
            if specs is None and name in self.user:
                specs = self.user_width_args(name)
            for pos, kw in specs or ():
                arg = _arg(call, pos, kw)
                if arg is not None and not (isinstance(arg, ast.Constant) and not isinstance(arg.value, int)):
                    self.bump("width", arg, +1, f"{kw or pos}", f"{where}(..) {kw or pos}")
            spatial = list(_SPATIAL_ARGS.get(name, ()))
            spatial_kws = {kw for _, kw in spatial}
            for k in call.keywords:  # the file's own layers' kernel_size/stride/padding keywords
                if k.arg in _SPATIAL_KEYWORDS and k.arg not in spatial_kws:
                    spatial.append((10 ** 6, k.arg))
            for pos, kw in spatial:
                arg = _arg(call, pos, kw)
                if arg is None or isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    continue
                self.bump("kernel", arg, +1, kw, f"{where}(..) {kw}")

    def permute(self, fn):
        for call in _walk_calls(fn):
            f = call.func
            if not isinstance(f, ast.Attribute):
                continue
            if f.attr == "permute":
                dims = call.args[0].elts if len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)) \
                    else call.args
                if len(dims) < 2:
                    continue
                pairs = [(0, 1)] + ([(len(dims) - 2, len(dims) - 1)] if len(dims) > 2 else [])
                for i, j in pairs:
                    a, b = self.src.segment(dims[i]), self.src.segment(dims[j])
                    if a == b:
                        continue
                    # rewrite the whole argument list with the two entries swapped
                    texts = [self.src.segment(d) for d in dims]
                    texts[i], texts[j] = texts[j], texts[i]
                    first, last = dims[0], dims[-1]
                    a0 = self.src.offset(first.lineno, first.col_offset)
                    b0 = self.src.offset(last.end_lineno, last.end_col_offset)
                    new = self.src.text[:a0] + ", ".join(texts) + self.src.text[b0:]
                    self.add("permute", call, new, f"permute({', '.join(self.src.segment(d) for d in dims)}) -> "
                             f"permute({', '.join(texts)})", f"swap{i}{j}")
            elif f.attr in ("transpose", "swapaxes", "swapdims") and len(call.args) == 2:
                a, b = (_int_value(x) for x in call.args)
                if a is None or b is None:
                    continue
                na, nb = (a, b + 1) if a >= 0 and b >= 0 else (a - 1, b)
                node = call.args[0] if na != a else call.args[1]
                new_text = str(na if na != a else nb)
                new = self.src.replace(node, new_text)
                self.add("permute", call, new, f"{f.attr}({a}, {b}) -> {f.attr}({na}, {nb})")

    def transpose(self, fn):
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("transpose", "t", "permute", "swapaxes", "swapdims", "mT"):
                recv = node.func.value
                if isinstance(recv, ast.Name) and recv.id in ("torch", "F"):
                    if node.args:  # torch.transpose(x, a, b) -> x
                        self.add("transpose", node, self.src.replace(node, self.src.segment(node.args[0])),
                                 f"{self.src.segment(node)} -> {self.src.segment(node.args[0])}")
                    continue
                self.add("transpose", node, self.src.replace(node, self.src.segment(recv)),
                         f"removed .{node.func.attr}({', '.join(self.src.segment(a) for a in node.args)})")
            elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT") and isinstance(node.ctx, ast.Load):
                self.add("transpose", node, self.src.replace(node, self.src.segment(node.value)),
                         f"removed .{node.attr}")

    def reshape(self, fn):
        for call in _walk_calls(fn):
            f = call.func
            if not isinstance(f, ast.Attribute):
                continue
            is_torch_fn = isinstance(f.value, ast.Name) and f.value.id == "torch"
            if f.attr in ("view", "reshape"):
                args = call.args[1:] if is_torch_fn else call.args
                if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
                    args = args[0].elts
                if any(isinstance(a, ast.Starred) for a in args):
                    continue
                for i, a in enumerate(args):
                    if _int_value(a) == -1:
                        continue
                    if isinstance(a, ast.Attribute) and a.attr.endswith("dtype"):
                        continue
                    self.bump("reshape", a, +1, f"arg{i}", f".{f.attr}(..) size {i}")
            elif f.attr == "flatten":
                args = call.args[1:] if is_torch_fn else call.args
                start = args[0] if args else next((k.value for k in call.keywords if k.arg == "start_dim"), None)
                if start is not None:
                    self.bump("reshape", start, +1, "start_dim", "flatten start_dim")

    def cat(self, fn):
        for call in _walk_calls(fn):
            f = call.func
            if not (isinstance(f, ast.Attribute) and f.attr in ("cat", "stack", "concat", "concatenate")
                    and isinstance(f.value, ast.Name) and f.value.id == "torch"):
                continue
            dim = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "dim"),
                                                               None)
            if dim is None:
                end = self.src.offset(call.end_lineno, call.end_col_offset) - 1  # the closing paren
                for d in (1, -1):
                    self.add("cat", call, self.src.insert(end, f", dim={d}"),
                             f"torch.{f.attr}(..) dim 0 -> {d}", f"dim{d}")
                continue
            v = _int_value(dim)
            if v is None:
                continue
            for d in (v + 1, v - 1):
                self.add("cat", dim, self.src.replace(dim, str(d)), f"torch.{f.attr}(..) dim {v} -> {d}",
                         f"dim{d}")

    def slice(self, fn):
        for node in ast.walk(fn):
            if not isinstance(node, ast.Subscript):
                continue
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            for p in parts:
                if not isinstance(p, ast.Slice):
                    continue
                if p.upper is not None:
                    self.bump("slice", p.upper, -1, "upper", "slice upper bound")
                if p.lower is not None:
                    self.bump("slice", p.lower, +1, "lower", "slice lower bound")

    def unseen(self, targets_decl: list[dict]):
        from shapeinfer.spec import parse_input_spec

        classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        for decl in targets_decl:
            m = re.match(r"\s*([A-Za-z_]\w*)", decl["model"])
            cls = classes.get(m.group(1)) if m else None
            if cls is None:  # a factory function (resnet18()): find the class it returns
                fn = next((n for n in self.tree.body if isinstance(n, ast.FunctionDef)
                           and m and n.name == m.group(1)), None)
                for node in ast.walk(fn) if fn else ():
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
                        cls = classes[node.func.id]
                        break
            if cls is None:
                continue
            fwd = next((i for i in cls.body if isinstance(i, ast.FunctionDef) and i.name == "forward"), None)
            if fwd is None:
                continue
            body = fwd.body
            first = body[1] if (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                                and len(body) > 1) else body[0]
            indent = " " * first.col_offset
            at = self.src.offset(first.lineno, 0)
            specs = {n: parse_input_spec(n, s) for n, s in decl["inputs"].items()}
            symbols = []
            for s in specs.values():
                symbols += [d for d in s.dims if isinstance(d, str) and d not in symbols]
            sample = default_sizes(symbols, decl.get("sizes"))
            oracle = [default_sizes(symbols, {**decl.get("sizes", {}), **o}) for o in decl.get("oracle_sizes", [])]
            for name, spec in specs.items():
                for i, d in enumerate(spec.dims):
                    if not isinstance(d, str) or not any(o[d] > sample[d] for o in oracle):
                        continue
                    k = sample[d]
                    prefix = [f"{name}.size({j})" for j in range(i)]
                    rest = [f"{name}.size({j})" if isinstance(e, str) else str(e)
                            for j, e in enumerate(spec.dims) if j > i]
                    sl = f"{name}[{':, ' * i}:{k}]"
                    variants = {"count": ", ".join(prefix + [str(k + 1)] + rest)}
                    if k % 2 == 0 and k >= 2:
                        variants["layout"] = ", ".join(prefix + [f"{k // 2}", "-1"])
                    for v, shape in variants.items():
                        line = f"{indent}if {name}.size({i}) > {k}: {name} = {sl}.reshape({shape})  # mutation\n"
                        new = self.src.insert(at, line)
                        ident = f"{self.path.name}:unseen-{v}:{first.lineno}:{name}.{i}"
                        if ident in self.seen:
                            continue
                        self.seen.add(ident)
                        self.out.append(Mutant(ident, "unseen", self.path, (first.lineno, first.lineno),
                                               f"inserted in {cls.name}.forward: {line.strip()}", new))


def declared_targets(path: Path) -> list[dict]:
    """The file's ``__shapeinfer__`` declarations, read without importing it."""
    tree = ast.parse(Path(path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__shapeinfer__"
                                                for t in node.targets):
            v = ast.literal_eval(node.value)
            return list(v) if isinstance(v, (list, tuple)) else [v]
    return []


def generate(path, kinds=KINDS) -> list[Mutant]:
    """Every mutant of one file, in source order within each kind (deterministic)."""
    g = _Gen(Path(path))
    fns = list(_model_functions(g.tree))
    for kind in kinds:
        if kind == "unseen":
            g.unseen(declared_targets(g.path))
            continue
        for fn, _cls in fns:
            if kind in ("width", "kernel"):
                if kind == "width":
                    g.width_and_kernel(fn)
            else:
                getattr(g, kind)(fn)
    wanted = set(kinds)
    return [m for m in g.out if m.kind in wanted]


def example_files(include_train: bool = True) -> list[Path]:
    files = sorted((ROOT / "examples").glob("*.py"))
    return [p for p in files if include_train or not p.name.startswith("train_")]


# ---------------------------------------------------------------------------
# running

@dataclass
class Failure:
    target: int
    sizes: dict
    error: str          # "RuntimeError: ..." (first line)
    line: Optional[int]  # innermost line of the mutated file in the traceback
    witness: bool = False  # found by searching sizes that satisfy a diagnostic's `when`
    # innermost (file, line) of the traceback outside torch and the standard library: where
    # the error surfaces when the mutated file calls into a library (transformers' attention)
    surface: Optional[tuple] = None


@dataclass
class Outcome:
    mutant: Mutant
    klass: str                   # breaking | benign-shapes | benign-same | build-error
    status: str                  # found | warning | wrong-line | missed | ok | false-alarm | build-error
    failures: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)  # dicts, file relative to the temp dir
    matched: list = field(default_factory=list)      # the diagnostics that made it found/warning
    names_dims: Optional[bool] = None                 # does a matched message carry dims
    note: str = ""

    @property
    def breaking(self) -> bool:
        return self.klass == "breaking"

    @property
    def benign(self) -> bool:
        return self.klass.startswith("benign")

    @property
    def errors(self) -> list:
        return [d for d in self.diagnostics if d["severity"] == "error"]


def _sizes_of(target) -> list[dict]:
    sets = [target.sizes] + list(target.oracle_sizes)
    out = []
    for s in sets:
        full = default_sizes(target.symbols, {**target.sizes, **s})
        if full not in out:
            out.append(full)
    return out


def _shape_tree(v):
    if isinstance(v, torch.Tensor):
        return tuple(v.shape)
    if isinstance(v, (tuple, list)):
        return tuple(_shape_tree(e) for e in v)
    return None


_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.path.realpath(os.__file__)) + os.sep


def _run(target, sizes: dict, path: str, seed: int = 0):
    """Run one target at ``sizes``: (fingerprint, None) or (None, Failure fields)."""
    args, kwargs = target.make_args(sizes, seed=seed)
    shapes = []
    hooks = []
    for qual, mod in target.model.named_modules():
        hooks.append(mod.register_forward_hook(
            lambda m, i, o, qual=qual: shapes.append((qual, _shape_tree(o)))))
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            out = target.model(*args, **kwargs)
    except Exception as e:  # the mutant's shape error (or any error it causes)
        line = surface = None
        real = os.path.realpath(path)
        for fr in traceback.extract_tb(e.__traceback__):
            f = os.path.realpath(fr.filename)
            if f == real:
                line = fr.lineno
            if not f.startswith(_TORCH_DIR) and not (f.startswith(_STDLIB_DIR) and "site-packages" not in f):
                surface = (f, fr.lineno)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return None, (f"{type(e).__name__}: {msg}"[:300], line, surface)
    finally:
        for h in hooks:
            h.remove()
    return (tuple(shapes), _shape_tree(out)), None


_BASELINE: dict = {}


def _baseline(path: Path):
    """The unedited file's targets, and per target {sizes key: fingerprint, or None where
    the unedited model itself fails}; filled lazily by ``_baseline_at``."""
    key = str(path)
    if key not in _BASELINE:
        with contextlib.redirect_stdout(io.StringIO()):
            targets = load_targets(path)
        _BASELINE[key] = ([{} for _ in targets], targets)
    return _BASELINE[key]


def _baseline_at(path: Path, index: int, sizes: dict):
    per, targets = _baseline(path)
    k = _key(sizes)
    if k not in per[index]:
        per[index][k] = _run(targets[index], sizes, str(path))[0]
    return per[index][k]


def _key(sizes: dict) -> tuple:
    return tuple(sorted(sizes.items()))


def when_holds(when: Optional[str], sizes: dict) -> Optional[bool]:
    """Does a diagnostic's ``when`` hold at concrete sizes? None: no condition/undecidable."""
    if not when:
        return None
    loc = {k: sympy.Symbol(k, integer=True, positive=True) for k in sizes}
    try:
        expr = sympy.sympify(when, locals=loc)
        v = expr.subs({loc[k]: v for k, v in sizes.items()})
    except Exception:
        return None
    if v in (sympy.true, True):
        return True
    if v in (sympy.false, False):
        return False
    return None


def _witness_sizes(when: str, target, tried: list[dict], limit: int = 6) -> list[dict]:
    """Sizes near the sample sizes at which ``when`` holds (not already tried)."""
    nums = {int(n) for n in re.findall(r"\d+", when)}
    cands = {}
    for s in target.symbols:
        base = {target.sizes[s]} | {t[s] for t in tried}
        vals = set(base) | {1, 2, 3}
        for n in nums:
            vals |= {n - 1, n, n + 1, 2 * n}
        vals |= {2 * max(base) + 1}
        cands[s] = sorted(v for v in vals if 0 < v <= 4 * max(max(base), max(nums, default=1)) + 8)
    combos = itertools.product(*(cands[s] for s in target.symbols))

    def dist(c):
        return sum(abs(v - target.sizes[s]) / max(1, target.sizes[s]) for s, v in zip(target.symbols, c))

    out = []
    for c in sorted(combos, key=dist)[:4000]:
        sizes = dict(zip(target.symbols, c))
        if sizes in tried:
            continue
        if when_holds(when, sizes):
            out.append(sizes)
            if len(out) >= limit:
                break
    return out


_MSG_NUM = re.compile(r"\d")


def _names_dims(message: str, symbols) -> bool:
    if _MSG_NUM.search(message):
        return True
    return any(re.search(rf"\b{re.escape(s)}\b", message) for s in symbols)


def _purge_modules(directory: str):
    real = os.path.realpath(directory)
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f and os.path.realpath(f).startswith(real + os.sep):
            del sys.modules[name]


def evaluate(mutant: Mutant, workdir: Optional[str] = None, witness: bool = True) -> Outcome:
    base = tempfile.mkdtemp(prefix="shapemut_", dir=workdir)
    path = os.path.join(base, mutant.file.name)
    with open(path, "w") as f:
        f.write(mutant.source)
    try:
        return _evaluate(mutant, path, witness)
    finally:
        _purge_modules(base)
        shutil.rmtree(base, ignore_errors=True)


def _evaluate(mutant: Mutant, path: str, witness: bool) -> Outcome:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            targets = load_targets(path)
    except SpecError as e:
        return Outcome(mutant, "build-error", "build-error", note=str(e).replace(path, mutant.file.name)[:300])
    return judge(mutant, path, targets, lambda i, s: _baseline_at(mutant.file, i, s), witness)


def judge(mutant: Mutant, path: str, targets: list, baseline_at, witness: bool = True) -> Outcome:
    """Classify a mutant whose models are built (from the mutated file at ``path``) and
    check the analyzer on it. ``targets`` have ``model``, ``make_args(sizes, seed)``,
    ``sizes``, ``oracle_sizes``, ``symbols`` and ``dims`` (like ``shapeinfer.spec.Target``);
    ``baseline_at(i, sizes)`` is the unedited target i's fingerprint at ``sizes``, None
    where the unedited model itself fails there."""
    failures: list[Failure] = []
    changed = False
    symbols_all = set()
    for i, t in enumerate(targets):
        symbols_all |= set(t.symbols)
        for s in _sizes_of(t):
            orig = baseline_at(i, s)
            if orig is None:
                continue  # the unedited model fails here too: not a size to judge by
            fp, fail = _run(t, s, path)
            if fail is not None:
                failures.append(Failure(i, s, fail[0], fail[1], surface=fail[2]))
            elif fp != orig:
                changed = True
    real = os.path.realpath(path)
    diags = []  # (target index, diagnostic dict)
    for i, t in enumerate(targets):
        args, kwargs = t.make_args(t.sizes)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res = shapeinfer.analyze(t.model, args=args, kwargs=kwargs, dims=t.dims)
        except Exception as e:  # the analyzer itself crashed: an internal error counts as none found
            diags.append((i, {"file": mutant.file.name, "line": 0, "col": 0, "severity": "crash",
                              "code": "CRASH", "message": f"{type(e).__name__}: {e}"}))
            continue
        for d in res.diagnostics:
            j = d.to_json()
            in_file = os.path.realpath(d.file) == real
            j["file"] = mutant.file.name if in_file else os.path.basename(d.file)
            j["in_file"] = in_file
            j["path"] = os.path.realpath(d.file)
            diags.append((i, j))
    # a benign mutant with conditional errors: look for sizes where the condition holds
    if witness and not failures:
        for i, d in diags:
            if d["severity"] != "error" or not d.get("when"):
                continue
            t = targets[i]
            tried = _sizes_of(t)
            for s in _witness_sizes(d["when"], t, tried):
                if baseline_at(i, s) is None:
                    continue
                _, fail = _run(t, s, path)
                if fail is not None:
                    failures.append(Failure(i, s, fail[0], fail[1], witness=True, surface=fail[2]))
                    break
            if failures:
                break
    out = Outcome(mutant, "breaking" if failures else ("benign-shapes" if changed else "benign-same"), "",
                  failures, [d for _, d in diags])
    edited = set(range(mutant.lines[0], mutant.lines[1] + 1))
    if not failures:
        out.status = "false-alarm" if out.errors else "ok"
        return out
    lines_ok = edited | {f.line for f in failures if f.line is not None}

    def condition_ok(i, d):
        if not d.get("when"):
            return mutant.kind != "unseen"
        return any(when_holds(d["when"], f.sizes) for f in failures if f.target == i)

    surfaces = {f.surface for f in failures if f.surface is not None}

    def at_line(d):
        return (d.get("in_file") and d["line"] in lines_ok) or (d.get("path"), d["line"]) in surfaces

    found = [d for i, d in diags if d["severity"] == "error" and at_line(d) and condition_ok(i, d)]
    warned = [d for i, d in diags if d["severity"] == "warning" and d["code"] == "SI300"
              and at_line(d) and d.get("when") and condition_ok(i, d)]
    if found:
        out.status, out.matched = "found", found
    elif warned:
        out.status, out.matched = "warning", warned
    elif any(d["severity"] == "error" and at_line(d) for _, d in diags):
        out.status = "bad-when"  # the right line, but the condition misses the failing sizes
    elif out.errors:
        out.status = "wrong-line"
    else:
        out.status = "missed"
    if out.matched:
        out.names_dims = any(_names_dims(d["message"], symbols_all) for d in out.matched)
    return out


# ---------------------------------------------------------------------------
# reporting

def summarize(outcomes: list[Outcome]) -> dict:
    """Per kind (and "all"): counts, recall and precision."""
    rows = {}
    for kind in list(KINDS) + ["all"]:
        sel = [o for o in outcomes if kind == "all" or o.mutant.kind == kind]
        if not sel:
            continue
        brk = [o for o in sel if o.breaking]
        ben = [o for o in sel if o.benign]
        r = {
            "mutants": len(sel),
            "build_error": sum(o.klass == "build-error" for o in sel),
            "breaking": len(brk),
            "benign_shapes": sum(o.klass == "benign-shapes" for o in sel),
            "benign_same": sum(o.klass == "benign-same" for o in sel),
            "found": sum(o.status == "found" for o in brk),
            "warning": sum(o.status == "warning" for o in brk),
            "bad_when": sum(o.status == "bad-when" for o in brk),
            "wrong_line": sum(o.status == "wrong-line" for o in brk),
            "missed": sum(o.status == "missed" for o in brk),
            "witness": sum(any(f.witness for f in o.failures) for o in brk),
            "false_alarms": sum(o.status == "false-alarm" for o in ben),
            "no_dims": sum(o.status == "found" and o.names_dims is False for o in brk),
        }
        r["recall"] = r["found"] / r["breaking"] if r["breaking"] else None
        r["recall_with_warnings"] = (r["found"] + r["warning"]) / r["breaking"] if r["breaking"] else None
        alarms = r["found"] + r["false_alarms"]
        r["precision"] = r["found"] / alarms if alarms else None
        rows[kind] = r
    return rows


def _pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def format_table(rows: dict, markdown: bool = False) -> str:
    cols = ["mutants", "build_error", "breaking", "benign_shapes", "benign_same", "found", "warning",
            "bad_when", "wrong_line", "missed", "false_alarms", "recall", "recall_with_warnings", "precision"]
    heads = ["kind", "mutants", "build err", "breaking", "benign (shapes)", "benign (same)", "found",
             "SI300 only", "bad when", "wrong line", "missed", "false alarms", "recall", "recall+SI300", "precision"]
    lines = []
    data = []
    for kind, r in rows.items():
        data.append([kind] + [_pct(r[c]) if c in ("recall", "recall_with_warnings", "precision") else str(r[c])
                              for c in cols])
    if markdown:
        lines.append("| " + " | ".join(heads) + " |")
        lines.append("|---|" + "---:|" * (len(heads) - 1))
        for row in data:
            lines.append("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in data)) for i, h in enumerate(heads)]
        lines.append("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(heads, widths))))
        for row in data:
            lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def describe(o: Outcome) -> str:
    """One problem, in full: where, the edit, torch's error and the analyzer's diagnostics."""
    m = o.mutant
    lines = [f"{m.id}  [{o.klass} / {o.status}]",
             f"  {m.file.relative_to(ROOT) if m.file.is_relative_to(ROOT) else m.file}:{m.lines[0]}: {m.description}"]
    if m.kind == "unseen":
        lines.append(f"  (line numbers below are the mutated file's: one line inserted at {m.lines[0]})")
    for f in o.failures[:3]:
        at = f" (line {f.line})" if f.line else ""
        if f.surface and f.surface[1] != f.line:
            at += f" (surfaces at {os.path.basename(f.surface[0])}:{f.surface[1]})"
        lines.append(f"  torch{' (witness)' if f.witness else ''} at {f.sizes}{at}: {f.error}")
    if len(o.failures) > 3:
        lines.append(f"  ... torch failed at {len(o.failures)} size sets in all")
    shown = [d for d in o.diagnostics if d["severity"] in ("error", "warning", "crash")]
    if not shown:
        lines.append("  analyzer: no error or warning")
    for d in shown:
        when = f" when {d['when']}" if d.get("when") else ""
        lines.append(f"  analyzer: {d['file']}:{d['line']}: {d['severity']} {d['code']} {d['message']}{when}")
    if o.note:
        lines.append(f"  note: {o.note}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# the fast subset used by tests/test_mutations.py

def select_subset(seed: int = 0, per_kind: int = 4, files=None) -> list[Mutant]:
    """A deterministic sample: ``per_kind`` mutants of each kind, drawn from the mutants of
    all example files with ``random.Random`` seeded by (seed, kind)."""
    import random

    by_kind: dict = {}
    for path in files or example_files():
        for m in generate(path):
            by_kind.setdefault(m.kind, []).append(m)
    out = []
    for kind in KINDS:
        ms = by_kind.get(kind, [])
        out += random.Random(f"{seed}:{kind}").sample(ms, min(per_kind, len(ms)))
    return out
