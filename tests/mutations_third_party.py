"""Shape-breaking mutations of the third-party targets (tests/third_party_models.py:
Hugging Face DistilBERT, OPT, GPT-NeoX, Mistral, ViT, the Whisper encoder, and
x-transformers' ``TransformerWrapper(Decoder)``): the same generator kinds and the same
rules as ``tests/mutations.py``, applied to a copy of each model's own modeling file.

Generating
----------
``generate(target)`` edits the file that defines the target's top-level class
(``modeling_distilbert.py``, ..., ``x_transformers/x_transformers.py``; the shared files
it calls into, attention and masking helpers, are left alone). These files hold far
more code than one small config runs, so only statements that run are edited: the file
is traced (``sys.settrace``) while the unedited model is built and run at every size
of the target, and a mutant is kept only when every line it edits belongs to a statement
that ran. ``width`` edits of a file's own class taking a config object (``Layer(config)``)
are left out (``config + 1`` is no width). The kinds are those of tests/mutations.py
(``width``, ``kernel``, ``permute``, ``reshape``, ``cat``, ``transpose``, ``slice``,
``unseen``; ``unseen`` inserts its line at the top of the top-level class's forward);
``cat`` also takes ``cat``/``stack`` imported from torch by name (x-transformers);
``reshape`` leaves ``view(shape)`` of a shape variable alone (``shape + 1`` would be a
TypeError on a tuple, not a wrong size).
At most ``per_kind`` mutants of each kind are kept per model, drawn with
``random.Random`` seeded by (model, kind), so the whole run stays a few minutes.

Classifying and checking
------------------------
``evaluate(target, mutant)`` writes the mutated file to a fresh temporary directory
and executes it as the module it replaces (same module name, so relative imports and
the library's registries resolve as for the original; the installed file is never
touched and ``sys.modules`` keeps the original). The model is built from that module's
classes with the same configuration (``build_from``), so torch and the analyzer both
run the mutated source. From there ``tests/mutations.judge`` decides, exactly as for
the examples: torch runs the mutant at every size of the target (breaking = raises at
one), and a breaking mutant is found when an error diagnostic sits at the edited line
or at the innermost line of the mutated file in torch's traceback, with a ``when`` that
holds at a failing size; any error on a benign mutant is a false alarm.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mutations as M  # noqa: E402
from third_party_models import HF_TARGETS, OTHER_TARGETS, ThirdPartyTarget  # noqa: E402

TARGETS = HF_TARGETS + OTHER_TARGETS
PER_KIND = 6


def target_named(name: str) -> ThirdPartyTarget:
    return next(t for t in TARGETS if t.name == name)


# ---------------------------------------------------------------------------
# the model's own file, built from a (mutated) copy

_UNEDITED: dict = {}


def _unedited(target: ThirdPartyTarget):
    """The target's model built from the installed file (once per process)."""
    if target.name not in _UNEDITED:
        torch.manual_seed(0)
        with contextlib.redirect_stdout(io.StringIO()):
            _UNEDITED[target.name] = target.build()
    return _UNEDITED[target.name]


def source_file(target: ThirdPartyTarget) -> Path:
    """The file that defines the target's top-level class."""
    cls = type(_unedited(target))
    return Path(sys.modules[cls.__module__].__file__)


def load_copy(module_name: str, path: str):
    """Execute the file at ``path`` as module ``module_name`` (relative imports resolve in
    its package); ``sys.modules`` keeps whatever it held before."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    saved = sys.modules.get(module_name)
    sys.modules[module_name] = module
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            spec.loader.exec_module(module)
    finally:
        if saved is not None:
            sys.modules[module_name] = saved
        else:
            del sys.modules[module_name]
    return module


def build_from(target: ThirdPartyTarget, module) -> torch.nn.Module:
    """The target's model built from ``module``'s classes with the target's configuration."""
    orig = _unedited(target)
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):
        if target.name == "x-transformers Decoder":
            # mirrors third_party_models._x_transformers_decoder (checked by a test)
            model = module.TransformerWrapper(num_tokens=100, max_seq_len=64,
                                              attn_layers=module.Decoder(dim=32, depth=2, heads=2))
        else:  # a transformers model: the same class, the same config
            model = getattr(module, type(orig).__name__)(orig.config)
    return model.eval()


class BuiltTarget:
    """A third-party target with its model built, in the shape ``mutations.judge`` takes."""

    def __init__(self, target: ThirdPartyTarget, model):
        self.target = target
        self.model = model
        self.dims = target.dims
        self.sizes = dict(target.sizes[0])
        self.oracle_sizes = [dict(s) for s in target.sizes[1:]]
        self.symbols = []
        for spec in target.dims.values():
            self.symbols += [d for d in spec if isinstance(d, str) and d not in self.symbols]

    def make_args(self, sizes=None, seed: int = 0):
        torch.manual_seed(seed)
        return (), self.target.make_inputs({**self.sizes, **(sizes or {})})


# ---------------------------------------------------------------------------
# generating

def covered_lines(target: ThirdPartyTarget, path: Path) -> set:
    """Lines of ``path`` that run while the unedited model is built and run at every size."""
    real = os.path.realpath(path)
    seen: dict = {}
    lines: set = set()

    def local(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        f = frame.f_code.co_filename
        inside = seen.get(f)
        if inside is None:
            inside = seen[f] = os.path.realpath(f) == real
        if inside:
            lines.add(frame.f_lineno)
            return local
        return None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        # built here, the way mutants are built: its __init__ lines count
        model = build_from(target, sys.modules[type(_unedited(target)).__module__])
        with torch.no_grad():
            for sizes in target.sizes:
                torch.manual_seed(0)
                model(**target.make_inputs(sizes))
    finally:
        sys.settrace(old)
    return lines


def _statement_lines(tree: ast.Module, covered: set) -> set:
    """Every line of each simple statement that ran, and the header lines of compound ones."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno not in covered:
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            decorators = getattr(node, "decorator_list", [])
            first = min([node.lineno] + [d.lineno for d in decorators])
            out |= set(range(first, body[0].lineno))
        else:
            out |= set(range(node.lineno, node.end_lineno + 1))
    return out


# parameter names of a file's own layer classes that say a size
_SIZE_PARAM = re.compile(r"(^|_)(dim|dims|size|features|channels|heads|hidden|width|len|num_tokens)(_|$)")


class _ThirdPartyGen(M._Gen):
    def user_width_args(self, name: str) -> list:
        """Library files are full of helpers (``exists(val)``, ``cast_tuple(val, depth)``):
        only the file's own classes count, and of their leading arguments those named as
        sizes (``dim``, ``dim_head``, ``heads``, ``num_tokens``, ...)."""
        if name not in self.classes:
            return []
        return [(i, kw) for i, kw in super().user_width_args(name) if _SIZE_PARAM.search(kw)]

    def reshape(self, fn):
        """``view(shape)`` of a shape variable is left alone (``shape + 1`` is a TypeError
        on a tuple, not a wrong size)."""
        whole = {(c.args[0].lineno, c.args[0].col_offset) for c in M._walk_calls(fn)
                 if isinstance(c.func, ast.Attribute) and c.func.attr in ("view", "reshape")
                 and len(c.args) == 1 and not c.keywords
                 and isinstance(c.args[0], (ast.Name, ast.Attribute, ast.Subscript))}
        before = len(self.out)
        super().reshape(fn)
        self.out[before:] = [m for m in self.out[before:]
                             if tuple(int(x) for x in m.id.split(":")[2:4]) not in whole]

    def cat(self, fn):
        super().cat(fn)
        # ``from torch import cat, stack``: the same edits on the bare names
        imported = {a.asname or a.name for n in self.tree.body if isinstance(n, ast.ImportFrom)
                    and n.module == "torch" for a in n.names if a.name in ("cat", "stack")}
        for call in M._walk_calls(fn):
            if not (isinstance(call.func, ast.Name) and call.func.id in imported):
                continue
            dim = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "dim"),
                                                               None)
            v = M._int_value(dim) if dim is not None else 0
            if v is None:
                continue
            for d in (v + 1, v - 1):
                if dim is None:
                    end = self.src.offset(call.end_lineno, call.end_col_offset) - 1
                    new = self.src.insert(end, f", dim={d}")
                    self.add("cat", call, new, f"{call.func.id}(..) dim 0 -> {d}", f"dim{d}")
                else:
                    self.add("cat", dim, self.src.replace(dim, str(d)), f"{call.func.id}(..) dim {v} -> {d}",
                             f"dim{d}")


def _declaration(target: ThirdPartyTarget, class_name: str) -> dict:
    """The target as a ``__shapeinfer__`` declaration (for the ``unseen`` generator)."""
    inputs = target.make_inputs(target.sizes[0])
    specs = {}
    for name, dims in target.dims.items():
        dtype = str(inputs[name].dtype).replace("torch.", "")
        specs[name] = f"{dtype}[{', '.join(str(d) for d in dims)}]"
    return {"model": class_name, "inputs": specs, "sizes": dict(target.sizes[0]),
            "oracle_sizes": [dict(s) for s in target.sizes[1:]]}


def _is_config(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "config") or (
        isinstance(node, ast.Attribute) and node.attr == "config")


def generate_all(target: ThirdPartyTarget, kinds=M.KINDS) -> list[M.Mutant]:
    """Every mutant of the target's own file at code that runs, in source order per kind."""
    path = source_file(target)
    g = _ThirdPartyGen(path)
    g.classes = {n.name for n in g.tree.body if isinstance(n, ast.ClassDef)}
    ran = _statement_lines(g.tree, covered_lines(target, path))
    fns = list(M._model_functions(g.tree))
    for kind in kinds:
        if kind == "unseen":
            g.unseen([_declaration(target, type(_unedited(target)).__name__)])
        elif kind in ("width", "kernel"):
            if "width" not in kinds or kind == "width":  # one pass makes both kinds
                for fn, _cls in fns:
                    g.width_and_kernel(fn)
        else:
            for fn, _cls in fns:
                getattr(g, kind)(fn)
    out = []
    config_texts = {ast.unparse(n) for n in ast.walk(g.tree) if _is_config(n)}
    for m in g.out:
        if m.kind not in kinds:
            continue
        if m.kind != "unseen" and not all(line in ran for line in range(m.lines[0], m.lines[1] + 1)):
            continue
        if m.kind == "width" and any(m.description.endswith(f": {c} -> {c} + 1") for c in config_texts):
            continue
        out.append(m)
    return out


def generate(target: ThirdPartyTarget, kinds=M.KINDS, per_kind: Optional[int] = PER_KIND) -> list[M.Mutant]:
    """At most ``per_kind`` mutants of each kind (a seeded sample; all with None)."""
    every = generate_all(target, kinds)
    out = []
    for kind in kinds:
        ms = [m for m in every if m.kind == kind]
        if per_kind is not None and len(ms) > per_kind:
            ms = random.Random(f"{target.name}:{kind}").sample(ms, per_kind)
            ms.sort(key=lambda m: m.lines)
        out += ms
    return out


# ---------------------------------------------------------------------------
# running

def reference_attention():
    """Torch runs the models with the reference ("math") attention kernel: the fused CPU
    kernel ``scaled_dot_product_attention`` picks by default does not check that key and
    value have the same length (key [.., 66, 16] with value [.., 64, 16] returns a result),
    where the reference kernel raises, as the documented shapes require."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


_BASELINE: dict = {}


def _baseline_at(target: ThirdPartyTarget, sizes: dict):
    key = (target.name, M._key(sizes))
    if key not in _BASELINE:
        built = BuiltTarget(target, _unedited(target))
        with reference_attention():
            _BASELINE[key] = M._run(built, sizes, str(source_file(target)))[0]
    return _BASELINE[key]


def _forget(path: str):
    """Drop the analyzer's and linecache's copies of a temporary file."""
    import linecache

    from shapeinfer.interp import state

    state._PARSED.pop(path, None)
    linecache.cache.pop(path, None)


def evaluate(target: ThirdPartyTarget, mutant: M.Mutant, witness: bool = True) -> M.Outcome:
    base = tempfile.mkdtemp(prefix="shapemut_tp_")
    path = os.path.join(base, mutant.file.name)
    with open(path, "w") as f:
        f.write(mutant.source)
    module_name = type(_unedited(target)).__module__
    try:
        try:
            model = build_from(target, load_copy(module_name, path))
        except Exception as e:  # the mutant cannot be built: left out, like the examples' build errors
            return M.Outcome(mutant, "build-error", "build-error",
                             note=f"{type(e).__name__}: {e}".replace(path, mutant.file.name)[:300])
        built = BuiltTarget(target, model)
        with reference_attention():
            out = M.judge(mutant, path, [built], lambda i, s: _baseline_at(target, s), witness)
        if out.breaking:  # say where only the reference kernel raises
            quiet = [f for f in out.failures if M._run(built, f.sizes, path)[1] is None]
            if quiet:
                out.note = (f"torch's default CPU attention kernel runs it at {len(quiet)} of "
                            f"{len(out.failures)} failing size sets")
        return out
    finally:
        _forget(path)
        shutil.rmtree(base, ignore_errors=True)


def unedited_errors(target: ThirdPartyTarget) -> list:
    """Error diagnostics on the model built from an unedited copy of its file."""
    import shapeinfer

    path = source_file(target)
    base = tempfile.mkdtemp(prefix="shapemut_tp_")
    copy = os.path.join(base, path.name)
    shutil.copyfile(path, copy)
    try:
        built = BuiltTarget(target, build_from(target, load_copy(type(_unedited(target)).__module__, copy)))
        args, kwargs = built.make_args()
        with contextlib.redirect_stdout(io.StringIO()):
            res = shapeinfer.analyze(built.model, args=args, kwargs=kwargs, dims=built.dims)
        return [f"{os.path.basename(d.file)}:{d.line} {d.code} {d.message}" for d in res.errors]
    finally:
        _forget(copy)
        shutil.rmtree(base, ignore_errors=True)
