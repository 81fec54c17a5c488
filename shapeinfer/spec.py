"""Which model to analyze and with which sample input.

A target comes either from CLI flags (``--model``, ``--input``, ``--sizes``) or from a
``__shapeinfer__`` declaration inside the file, so that ``shapeinfer annotate file.py``
works with no flags::

    __shapeinfer__ = {
        "model": "Net(num_classes=10)",          # evaluated in the file's namespace
        "inputs": {"x": "float32[B, 3, H, W]"},  # forward parameter -> dtype[dims]
        "sizes": {"B": 2, "H": 32},              # optional sample sizes
        "oracle_sizes": [{"B": 3, "H": 40}],     # optional extra sizes for tests
    }

``__shapeinfer__`` may also be a list of such dicts (one per model in the file).
Input spec grammar: ``dtype[d0, d1, ...]`` where each dim is an int or a symbol name;
an integer dtype may add ``<N`` for the exclusive upper bound of its random values
(``int64[B, T]<1000``); the default bound is 2, valid for any embedding table.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_NAME = "__shapeinfer__"

# Sample sizes used when the user gives none. Distinct values make accidental
# equalities between symbols unlikely, so a swapped dim is caught, not hidden.
DEFAULT_SIZES = {"B": 2, "N": 2, "T": 12, "L": 12, "S": 10, "H": 64, "W": 48, "C": 16, "D": 8}
FALLBACK_SIZE = 10

_DTYPES = {
    "float32": "float32", "float": "float32", "f32": "float32",
    "float64": "float64", "double": "float64", "f64": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}


class SpecError(ValueError):
    """A model or input specification the user gave cannot be used."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: str
    dims: tuple  # each a symbol name (str) or a concrete int
    high: int = 2

    def shape_at(self, sizes: dict[str, int]) -> tuple[int, ...]:
        out = []
        for d in self.dims:
            if isinstance(d, str):
                if d not in sizes:
                    raise SpecError(f"no size given for symbol {d!r} of input {self.name!r}")
                out.append(int(sizes[d]))
            else:
                out.append(int(d))
        return tuple(out)

    def make_tensor(self, sizes: dict[str, int], generator=None):
        import torch

        shape = self.shape_at(sizes)
        dtype = getattr(torch, self.dtype)
        if dtype.is_floating_point:
            return torch.randn(shape, generator=generator).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=generator).bool()
        return torch.randint(0, self.high, shape, generator=generator, dtype=dtype)


_INPUT_RE = re.compile(r"^\s*([A-Za-z_]\w*)?\s*\[(.*)\]\s*(?:<\s*(\d+))?\s*$")


def parse_input_spec(name: str, text: str) -> InputSpec:
    """Parse ``float32[B, 3, H, W]`` (the dtype may be omitted: float32)."""
    m = _INPUT_RE.match(text)
    if not m:
        raise SpecError(f"bad input spec {text!r} for {name!r}: expected e.g. 'float32[B, 3, H, W]'")
    dtype_name, body, high = m.group(1) or "float32", m.group(2), m.group(3)
    if dtype_name not in _DTYPES:
        raise SpecError(f"unknown dtype {dtype_name!r} in input spec {text!r}")
    dims: list = []
    for part in (p.strip() for p in body.split(",")) if body.strip() else ():
        if re.fullmatch(r"\d+", part):
            dims.append(int(part))
        elif re.fullmatch(r"[A-Za-z_]\w*", part):
            dims.append(part)
        else:
            raise SpecError(f"bad dim {part!r} in input spec {text!r}: use an int or a symbol name")
    return InputSpec(name, _DTYPES[dtype_name], tuple(dims), int(high) if high else 2)


def parse_inputs(texts: list[str]) -> dict[str, InputSpec]:
    """Parse CLI ``--input name=spec`` items."""
    out = {}
    for item in texts:
        if "=" not in item:
            raise SpecError(f"bad --input {item!r}: expected NAME=dtype[dims], e.g. x=float32[B,3,H,W]")
        name, _, text = item.partition("=")
        name = name.strip()
        out[name] = parse_input_spec(name, text)
    return out


def parse_sizes(text: str | None) -> dict[str, int]:
    """Parse ``B=8,H=32``."""
    sizes: dict[str, int] = {}
    if not text:
        return sizes
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"\s*[A-Za-z_]\w*\s*", name) or not value.strip().isdigit():
            raise SpecError(f"bad --sizes item {item!r}: expected NAME=INT, e.g. B=8,H=32")
        if int(value) <= 0:
            raise SpecError(f"size of {name.strip()} must be positive, got {value.strip()}")
        sizes[name.strip()] = int(value)
    return sizes


def default_sizes(symbols, given: dict[str, int] | None = None) -> dict[str, int]:
    given = dict(given or {})
    return {s: given.get(s, DEFAULT_SIZES.get(s, FALLBACK_SIZE)) for s in symbols}


@dataclass
class Target:
    """One model to analyze: a live module, its input specs and sample sizes."""

    name: str
    model: Any
    inputs: dict[str, InputSpec]
    sizes: dict[str, int] = field(default_factory=dict)
    oracle_sizes: list[dict[str, int]] = field(default_factory=list)

    @property
    def symbols(self) -> list[str]:
        seen: list[str] = []
        for spec in self.inputs.values():
            for d in spec.dims:
                if isinstance(d, str) and d not in seen:
                    seen.append(d)
        return seen

    @property
    def dims(self) -> dict[str, tuple]:
        return {name: spec.dims for name, spec in self.inputs.items()}

    def make_args(self, sizes: dict[str, int] | None = None, seed: int = 0):
        """Real sample tensors at ``sizes`` (default: the sample sizes), as (args, kwargs)."""
        import torch

        sizes = default_sizes(self.symbols, {**self.sizes, **(sizes or {})})
        gen = torch.Generator().manual_seed(seed)
        kwargs = {name: spec.make_tensor(sizes, gen) for name, spec in self.inputs.items()}
        return (), kwargs


def load_module(path: str | Path):
    """Import a user's file as a fresh module. Raises SpecError with the reason."""
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{path}: no such file")
    mod_name = f"_shapeinfer_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(mod_name, None)
        where = f"{path}:{e.lineno}:{e.offset or 0}" if e.lineno else str(path)   # (null bytes)
        raise SpecError(f"{where}: syntax error: {e.msg}") from e
    except Exception as e:  # user code failed at import time
        sys.modules.pop(mod_name, None)
        raise SpecError(f"{path}: importing the file failed: {type(e).__name__}: {e}") from e
    return module


def build_model(module, expr: str, path: str = "<file>"):
    try:
        model = eval(expr, vars(module))  # the user's own expression, in the user's own file
    except NameError as e:
        raise SpecError(f"{path}: unknown model {expr!r}: {e}") from e
    except Exception as e:
        raise SpecError(f"{path}: building model {expr!r} failed: {type(e).__name__}: {e}") from e
    if isinstance(model, type):
        raise SpecError(f"{path}: model {expr!r} is a class; call it, e.g. '{expr}()'")
    return model


def targets_from_module(module, path: str) -> list[Target]:
    decl = getattr(module, SPEC_NAME, None)
    if decl is None:
        raise SpecError(
            f"{path}: no model given: pass --model EXPR and --input NAME=dtype[dims], "
            f"or declare {SPEC_NAME} = {{'model': ..., 'inputs': {{...}}}} in the file"
        )
    decls = decl if isinstance(decl, (list, tuple)) else [decl]
    targets = []
    for d in decls:
        if not isinstance(d, dict) or "model" not in d or "inputs" not in d:
            raise SpecError(f"{path}: {SPEC_NAME} entries need 'model' and 'inputs' keys")
        inputs = {n: parse_input_spec(n, s) for n, s in d["inputs"].items()}
        targets.append(Target(
            name=d["model"],
            model=build_model(module, d["model"], path),
            inputs=inputs,
            sizes=dict(d.get("sizes", {})),
            oracle_sizes=[dict(s) for s in d.get("oracle_sizes", [])],
        ))
    return targets


def load_targets(path: str | Path, model: str | None = None, inputs: list[str] | None = None,
                 sizes: str | None = None) -> list[Target]:
    """Targets for a file: from CLI-style arguments if given, else from ``__shapeinfer__``."""
    module = load_module(path)
    given_sizes = parse_sizes(sizes)
    if model is None and not inputs:
        targets = targets_from_module(module, str(path))
    else:
        if model is None or not inputs:
            raise SpecError("--model and --input go together: give both, or neither to use "
                            f"the file's {SPEC_NAME}")
        targets = [Target(model, build_model(module, model, str(path)), parse_inputs(inputs))]
    for t in targets:
        if hasattr(t.model, "eval"):  # analyze in inference mode, as users deploy
            t.model.eval()
        t.sizes = default_sizes(t.symbols, {**t.sizes, **given_sizes})
    return targets
