"""einops: ``rearrange``, ``reduce``, ``repeat`` and their ``einops.layers.torch`` modules.

The pattern is parsed here and the shapes computed symbolically, instead of interpreting
einops' recipe machinery (which is built for real tensors and caches by shape).
"""

from __future__ import annotations

import re

from .. import shape_fns
from ..values import ListV, TupleV
from .common import T, RuleUnknown, dim_arg, like, py, shape_of, sym
from .registry import module_rule, op

try:
    import einops
    import einops.layers.torch as einops_layers
except ImportError:  # einops is optional
    einops = None

_TOKEN = re.compile(r"\(|\)|\.\.\.|[A-Za-z_][A-Za-z0-9_]*|\d+")


def _parse_side(text: str) -> list:
    """Items of one side: a name, '...', a number, or a list (a parenthesized group)."""
    items: list = []
    group = None
    for tok in _TOKEN.findall(text):
        if tok == "(":
            if group is not None:
                raise shape_fns.ShapeError("SI132", f"einops: nested parentheses in {text!r}")
            group = []
        elif tok == ")":
            if group is None:
                raise shape_fns.ShapeError("SI132", f"einops: unbalanced ')' in {text!r}")
            items.append(group)
            group = None
        else:
            (group if group is not None else items).append(int(tok) if tok.isdigit() else tok)
    if group is not None:
        raise shape_fns.ShapeError("SI132", f"einops: unbalanced '(' in {text!r}")
    return items


def _sizes_from_input(left: list, shape: tuple, lengths: dict) -> tuple[dict, tuple]:
    """Sizes of the named axes (and the dims under '...') from the input shape."""
    n_fixed = sum(1 for it in left if it != "...")
    has_ellipsis = "..." in left
    if (len(shape) < n_fixed) if has_ellipsis else (len(shape) != n_fixed):
        raise shape_fns.ShapeError("SI132", f"einops: pattern has {n_fixed} axes, input has rank {len(shape)}")
    sizes = dict(lengths)
    ellipsis: tuple = ()
    pos = 0
    for it in left:
        if it == "...":
            k = len(shape) - n_fixed
            ellipsis = tuple(shape[pos:pos + k])
            pos += k
            continue
        dim = shape[pos]
        pos += 1
        group = it if isinstance(it, list) else [it]
        known = sym.product(sizes[a] if isinstance(a, str) else a for a in group
                            if not isinstance(a, str) or a in sizes)
        unknown = [a for a in group if isinstance(a, str) and a not in sizes]
        if len(unknown) > 1:
            raise shape_fns.ShapeError("SI132", f"einops: cannot infer sizes of {unknown} in one axis")
        if unknown:
            sizes[unknown[0]] = shape_fns._exact_div(dim, known) if known != 1 else dim
        else:
            shape_fns.require_equal(known, dim, "SI132", f"einops: axis {group} of size {sym.dim_pretty(dim)}")
    return sizes, ellipsis


def _output_shape(right: list, sizes: dict, ellipsis: tuple, allow_new: bool) -> tuple:
    out = []
    for it in right:
        if it == "...":
            out.extend(ellipsis)
            continue
        group = it if isinstance(it, list) else [it]
        parts = []
        for a in group:
            if a == "...":
                parts.extend(ellipsis)
            elif isinstance(a, int):
                parts.append(a)
            elif a in sizes:
                parts.append(sizes[a])
            else:
                raise shape_fns.ShapeError("SI132", f"einops: axis {a!r} appears only on the output side"
                                           + ("; give its length as a keyword" if allow_new else ""))
        out.append(sym.product(parts))
    return tuple(out)


def _stack_input(tensor):
    """einops accepts a list of tensors, stacked along a new first axis."""
    if isinstance(tensor, (TupleV, ListV)):
        items = list(tensor.items) if not isinstance(tensor, ListV) or tensor.is_concrete else None
        if items is None:
            elem = T(tensor.tail)
            return like(elem, (tensor.length,) + tuple(shape_of(elem)))
        return like(T(items[0]), shape_fns.stack_shape([shape_of(x) for x in items]))
    return T(tensor)


def _lengths(kwargs: dict) -> dict:
    out = {}
    for k, v in kwargs.items():
        d = dim_arg(v)
        if d is None:
            raise RuleUnknown(f"einops: length of {k} is unknown")
        out[k] = d
    return out


def einops_shape(kind: str, shape: tuple, pattern: str, lengths: dict) -> tuple:
    if "->" not in pattern:
        raise shape_fns.ShapeError("SI132", f"einops: pattern {pattern!r} has no '->'")
    lhs, rhs = (_parse_side(p) for p in pattern.split("->"))
    sizes, ellipsis = _sizes_from_input(lhs, shape, lengths)
    if kind == "reduce":
        kept = {a for it in rhs for a in (it if isinstance(it, list) else [it]) if isinstance(a, str)}
        return _output_shape(rhs, {k: v for k, v in sizes.items() if k in kept or k in lengths}, ellipsis, False)
    return _output_shape(rhs, sizes, ellipsis, kind == "repeat")


def _rule(kind: str):
    def rule(ctx, tensor, pattern, *args, **axes_lengths):
        x = _stack_input(tensor)
        if kind == "reduce" and args:
            pass  # the reduction ('mean', 'max', ...) does not change the shape
        out = einops_shape(kind, shape_of(x), py(pattern, "pattern"), _lengths(axes_lengths))
        return like(x, out)

    return rule


def _module(kind: str):
    def rule(ctx, module, input):
        x = T(input)
        return like(x, einops_shape(kind, shape_of(x), module.pattern, dict(module.axes_lengths)))

    return rule


def einsum(ctx, *tensors_and_pattern):
    """einops.einsum(*tensors, pattern): axes are words separated by spaces."""
    *tensors, pattern = tensors_and_pattern
    text = py(pattern, "pattern")
    lhs, _, rhs = text.partition("->")
    names: dict = {}

    def letters(side: str) -> str:
        out = ""
        for word in side.replace("(", " ").replace(")", " ").split():
            if word == "...":
                out += "..."
                continue
            if word not in names:
                names[word] = chr(ord("a") + len(names))
            out += names[word]
        return out

    equation = ",".join(letters(part) for part in lhs.split(",")) + "->" + letters(rhs)
    ts = [T(t) for t in tensors]
    return like(ts[0], shape_fns.einsum_shape(equation, [shape_of(t) for t in ts]))


if einops is not None:
    op("einops.einsum", getattr(einops, "einsum", None))(einsum)
    op("einops.rearrange", einops.rearrange)(_rule("rearrange"))
    op("einops.reduce", einops.reduce)(_rule("reduce"))
    op("einops.repeat", einops.repeat)(_rule("repeat"))
    module_rule(einops_layers.Rearrange)(_module("rearrange"))
    module_rule(einops_layers.Reduce)(_module("reduce"))
    module_rule(einops_layers.Repeat)(_module("repeat")) if hasattr(einops_layers, "Repeat") else None
