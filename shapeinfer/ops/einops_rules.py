"""einops: ``rearrange``, ``reduce``, ``repeat``, ``einsum``, ``pack``/``unpack`` and the
``einops.layers.torch`` modules (``Rearrange``, ``Reduce``, ``EinMix``).

The pattern is parsed here and the shapes computed symbolically, instead of interpreting
einops' recipe machinery (which is built for real tensors and caches by shape).
"""

from __future__ import annotations

import re

from .. import shape_fns
from ..values import ListV, TupleV, from_python, int_value
from .common import T, RuleUnknown, dim_arg, dims_arg, like, py, same_dtype, shape_of, sym
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


# ---- pack / unpack: the '*' axis is a sum of products of the packed dims ----------------


def _star_pattern(pattern: str, opname: str) -> tuple[int, int]:
    """(axes before '*', axes after '*'), with einops' own checks of the pattern."""
    axes = pattern.split()
    if len(set(axes)) != len(axes):
        raise shape_fns.ShapeError("SI132", f"{opname}: duplicate axis names in {pattern!r}")
    if "*" not in axes:
        raise shape_fns.ShapeError("SI132", f"{opname}: no '*' axis in {pattern!r}")
    for a in axes:
        if a != "*" and (not a.isidentifier() or a.startswith("_") or a.endswith("_")):
            raise shape_fns.ShapeError("SI132", f"{opname}: invalid axis name {a!r} in {pattern!r}")
    before = axes.index("*")
    return before, len(axes) - before - 1


def pack_shapes(shapes: list, pattern: str) -> tuple[tuple, list]:
    """einops.pack: each input reshaped to (*before, -1, *after), then concatenated along
    the '*' axis. Returns the packed shape and the packed shapes (what '*' matched)."""
    before, after = _star_pattern(pattern, "pack")
    if not shapes:
        raise shape_fns.ShapeError("SI132", "pack of an empty sequence")
    flat, packed = [], []
    for i, s in enumerate(shapes):
        if len(s) < before + after:
            raise shape_fns.ShapeError("SI132", f"pack: tensor #{i} has shape {sym.shape_str(s)}, but "
                                       f"{pattern!r} needs at least {before + after} axes", s)
        packed.append(tuple(s[before:len(s) - after]))
        flat.append(shape_fns.reshape_shape(s, tuple(s[:before]) + (-1,) + tuple(s[len(s) - after:])))
    return shape_fns.cat_shape(flat, before), packed


def unpack_shapes(shape: tuple, packed: list, pattern: str) -> list:
    """einops.unpack. Without a -1 the pieces must add up to the '*' axis. With one, step
    by step as einops does it: split positions along the axis (from the start up to the
    piece with -1, from the end after it), a slice per piece (Python clamping, so
    overlapping pieces come out empty), then a reshape per piece."""
    before, after = _star_pattern(pattern, "unpack")
    if len(shape) != before + 1 + after:
        raise shape_fns.ShapeError("SI132", f"unpack: {pattern!r} needs an input of rank {before + 1 + after}, "
                                   f"got {sym.shape_str(shape)}", shape)
    open_pieces = [i for i, p in enumerate(packed) if -1 in p]
    if len(open_pieces) > 1:
        raise shape_fns.ShapeError("SI132", f"unpack: more than one -1 in {list(packed)}")
    lengths = [None if i in open_pieces else sym.product(p) for i, p in enumerate(packed)]
    axis = shape[before]
    if axis is None or any(n is None for i, n in enumerate(lengths) if i not in open_pieces):
        raise RuleUnknown("unpack: the packed axis or a packed shape has an unknown size")
    start, end = tuple(shape[:before]), tuple(shape[before + 1:])
    if not open_pieces:
        # the slices fit exactly when the pieces add up; otherwise some reshape fails
        shape_fns.require_equal(shape_fns.sum_dims(lengths), axis, "SI132",
                                f"unpack: pieces {', '.join(sym.shape_str(p) for p in packed)} of an axis of size "
                                f"{sym.dim_pretty(axis)}")
        return [start + tuple(p) + end for p in packed]
    positions = [0] * len(packed) + [axis]
    cut = open_pieces[0]
    for i in range(cut):
        positions[i + 1] = sym.add(positions[i], lengths[i])
    for j in range(len(packed) - 1, cut, -1):
        positions[j] = sym.sub(positions[j + 1], lengths[j])
    out = []
    for i, p in enumerate(packed):
        piece = shape_fns.narrow_dim(axis, positions[i], positions[i + 1])
        out.append(shape_fns.reshape_shape(start + (piece,) + end, start + tuple(p) + end))
    return out


def _size_tuple(dims) -> TupleV:
    """A torch.Size as a value: a tuple of (possibly symbolic) ints."""
    return TupleV(tuple(int_value(d, "unknown dim") for d in dims))


def pack(ctx, tensors, pattern):
    if not isinstance(tensors, (TupleV, ListV)) or (isinstance(tensors, ListV) and not tensors.is_concrete):
        raise RuleUnknown("pack of a sequence of unknown length")
    ts = [T(t) for t in tensors.items]
    out, packed = pack_shapes([shape_of(t) for t in ts], py(pattern, "pattern"))
    dtype = ts[0].dtype if len({t.dtype for t in ts}) == 1 else None  # cat promotes; rare
    return TupleV((like(ts[0], out, dtype), ListV([_size_tuple(p) for p in packed])))


def unpack(ctx, tensor, packed_shapes, pattern):
    x = T(tensor)
    if not isinstance(packed_shapes, (TupleV, ListV)) or \
            (isinstance(packed_shapes, ListV) and not packed_shapes.is_concrete):
        raise RuleUnknown("unpack with packed shapes of unknown length")
    packed = [dims_arg(p, "packed shape") for p in packed_shapes.items]
    shapes = unpack_shapes(shape_of(x), packed, py(pattern, "pattern"))
    return ListV([like(x, s) for s in shapes])


def einmix_module(ctx, module, input):
    """EinMix.forward: optional pre-rearrange, einsum with the weight, in-place bias add,
    optional post-rearrange; the einsum pattern and sub-layers are the module's own."""
    x = T(input)
    s = shape_of(x)
    if module.pre_rearrange is not None:
        s = einops_shape("rearrange", s, module.pre_rearrange.pattern, dict(module.pre_rearrange.axes_lengths))
    w = from_python(module.weight)
    s = shape_fns.einsum_shape(module.einsum_pattern, [s, w.shape])
    dtype = same_dtype("EinMix einsum", x, w)
    if module.bias is not None:
        grown = shape_fns.broadcast_shapes(s, tuple(module.bias.shape))
        if len(grown) != len(s):  # `result += bias` cannot change the result's shape
            raise shape_fns.ShapeError("SI101", f"EinMix bias {sym.shape_str(tuple(module.bias.shape))} "
                                       f"does not fit the result {sym.shape_str(s)}", grown)
        for have, new in zip(s, grown):
            shape_fns.require_equal(new, have, "SI101", "EinMix bias added in place")
    if module.post_rearrange is not None:
        s = einops_shape("rearrange", s, module.post_rearrange.pattern, dict(module.post_rearrange.axes_lengths))
    return like(x, s, dtype)


if einops is not None:
    op("einops.einsum", getattr(einops, "einsum", None))(einsum)
    op("einops.rearrange", einops.rearrange)(_rule("rearrange"))
    op("einops.reduce", einops.reduce)(_rule("reduce"))
    op("einops.repeat", einops.repeat)(_rule("repeat"))
    module_rule(einops_layers.Rearrange)(_module("rearrange"))
    module_rule(einops_layers.Reduce)(_module("reduce"))
    module_rule(einops_layers.Repeat)(_module("repeat")) if hasattr(einops_layers, "Repeat") else None
    op("einops.pack", getattr(einops, "pack", None))(pack)
    op("einops.unpack", getattr(einops, "unpack", None))(unpack)
    if hasattr(einops_layers, "EinMix"):
        module_rule(einops_layers.EinMix)(einmix_module)
