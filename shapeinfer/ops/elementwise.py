"""Elementwise ops: unary maps, broadcasting binary ops with type promotion, where."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import shape_fns
from .common import T, Const, TensorType, default_float, int_dtype, is_none, like, result_dtype, to_dtype
from .fft import real_of
from .registry import op


def _spellings(name: str, *namespaces):
    return tuple(getattr(ns, name) for ns in namespaces if hasattr(ns, name))


def _unary_group(names, dtype_rule, namespaces=(torch, F, torch.special)):
    for name in names:
        op(name, *_spellings(name, *namespaces), methods=(name,))(_make_unary(dtype_rule))


def _make_unary(dtype_rule):
    def unary(ctx, input, *args, **kwargs):
        t = T(input)
        return like(t, t.shape, dtype_rule(t.dtype))

    return unary


def _same(dtype):
    return dtype


def _float(dtype):
    """Ops that turn integer inputs into the default float dtype (sqrt, exp, sigmoid...)."""
    if dtype is None:
        return None
    return dtype if dtype.is_floating_point or dtype.is_complex else default_float()


def _to_bool(dtype):
    return torch.bool


def _to_long(dtype):
    return torch.int64


_unary_group(["relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "gelu", "silu", "mish",
              "hardswish", "hardsigmoid", "softplus", "softsign", "tanhshrink", "softshrink", "hardshrink",
              "logsigmoid", "rrelu", "threshold", "neg", "negative", "positive", "sign", "sgn", "square", "clamp", "clip", "clamp_min", "clamp_max", "floor",
              "ceil", "round", "trunc", "frac", "fix", "nan_to_num", "contiguous", "clone", "detach",
              "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
              "bitwise_not", "conj", "resolve_conj", "resolve_neg", "cpu", "cuda",
              "pin_memory", "coalesce"], _same)
_unary_group(["sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
              "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
              "erf", "erfc", "erfinv", "reciprocal", "lgamma", "digamma", "logit", "sinc", "i0",
              "expit"], _float)
_unary_group(["abs", "absolute"], real_of)  # the magnitude of a complex number is real
_unary_group(["angle"], lambda d: real_of(_float(d)))
_unary_group(["isnan", "isinf", "isfinite", "isposinf", "isneginf", "logical_not", "signbit"], _to_bool)


@op("to", methods=("to",))
def to(ctx, input, *args, dtype=None, **kwargs):
    t = T(input)
    new = to_dtype(dtype, None)
    for a in args:
        if isinstance(a, TensorType):
            new = a.dtype
        else:
            try:
                new = to_dtype(a, new)
            except Exception:
                pass  # a device or a memory format
    return like(t, t.shape, new)


@op("type_as", methods=("type_as",))
def type_as(ctx, input, other):
    return like(T(input), T(input).shape, T(other).dtype)


def _cast(dtype):
    def cast(ctx, input, *args, **kwargs):
        return like(T(input), T(input).shape, dtype)

    return cast


for _name, _dtype in [("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
                      ("bfloat16", torch.bfloat16), ("long", torch.int64), ("int", torch.int32),
                      ("short", torch.int16), ("bool", torch.bool), ("byte", torch.uint8), ("char", torch.int8)]:
    op(_name, methods=(_name,))(_cast(_dtype))


@op("type", methods=("type",))
def type_(ctx, input, dtype=None, *args, **kwargs):
    return like(T(input), T(input).shape, to_dtype(dtype, T(input).dtype))


def _binary(dtype_rule):
    def binary(ctx, input, other, *args, alpha=None, out=None, **kwargs):
        a, b = T(input), T(other, "other")
        shape = None if a.shape is None or b.shape is None else shape_fns.broadcast_shapes(a.shape, b.shape)
        base = input if isinstance(input, TensorType) else b
        return like(base, shape, dtype_rule(input, other))

    return binary


def _promoted(a, b):
    return result_dtype(a, b)


def _true_div(a, b):
    d = result_dtype(a, b)
    return default_float() if d is not None and not (d.is_floating_point or d.is_complex) else d


def _compare_dtype(a, b):
    return torch.bool


def _div_with_mode(ctx, input, other, *, rounding_mode=None, out=None):
    base = _binary(_true_div if is_none(rounding_mode) else _promoted)
    return base(ctx, input, other)


op("div", torch.div, torch.divide, torch.true_divide, methods=("div", "divide", "true_divide",
                                                              "__truediv__"))(_div_with_mode)
op("rdiv", methods=("__rtruediv__",))(_binary(_true_div))
for _name in ["add", "sub", "subtract", "mul", "multiply", "remainder", "fmod", "floor_divide", "pow",
              "maximum", "minimum", "fmax", "fmin", "atan2", "arctan2", "hypot", "copysign", "xlogy",
              "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
              "rsub", "heaviside", "nextafter"]:
    fn = _binary(_true_div if _name in ("atan2", "arctan2", "hypot", "xlogy") else _promoted)
    op(_name, *_spellings(_name, torch, torch.special), methods=(_name,))(fn)
op("dunder", methods=("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                      "__floordiv__", "__mod__", "__pow__", "__and__", "__or__", "__xor__"))(_binary(_promoted))
for _name in ["eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal",
              "not_equal", "logical_and", "logical_or", "logical_xor", "isclose"]:
    op(_name, *_spellings(_name, torch), methods=(_name,))(_binary(_compare_dtype))


@op("where", torch.where, methods=("where",))
def where(ctx, condition, input=None, other=None, *, out=None):
    if is_none(input):  # where(condition) is nonzero(condition, as_tuple=True)
        from . import indexing

        return indexing.nonzero(ctx, condition, as_tuple=Const(True))
    c, a, b = T(condition), T(input), T(other, "other")
    shapes = [x.shape for x in (c, a, b)]
    shape = None if None in shapes else shape_fns.broadcast_shapes(*shapes)
    return like(a if isinstance(input, TensorType) else b, shape, result_dtype(input, other))


@op("masked_fill", torch.masked_fill, methods=("masked_fill",))
def masked_fill(ctx, input, mask, value):
    t, m = T(input), T(mask, "mask")
    if m.dtype is not None and m.dtype != torch.bool:
        raise shape_fns.ShapeError("SI160", f"masked_fill: mask must be bool, got {m.dtype}")
    if t.shape is not None and m.shape is not None:
        out = shape_fns.broadcast_shapes(t.shape, m.shape)
        if len(out) != len(t.shape):
            raise shape_fns.ShapeError("SI101", "masked_fill: mask has more dims than the input")
    return t


@op("lerp", torch.lerp, methods=("lerp",))
def lerp(ctx, input, end, weight, *, out=None):
    a, b, w = T(input), T(end), T(weight)
    return like(a, shape_fns.broadcast_shapes(*[x.shape for x in (a, b, w)]), a.dtype)


@op("addcmul", torch.addcmul, torch.addcdiv, methods=("addcmul", "addcdiv"))
def addcmul(ctx, input, tensor1, tensor2, *, value=1, out=None):
    a, b, c = T(input), T(tensor1), T(tensor2)
    return like(a, shape_fns.broadcast_shapes(a.shape, b.shape, c.shape), result_dtype(a, b, c))


@op("float_power", torch.float_power, methods=("float_power",))
def float_power(ctx, input, exponent, *, out=None):
    out = _binary(_promoted)(ctx, input, exponent)
    return like(out, out.shape, torch.float64)


@op("softmax", torch.softmax, F.softmax, torch.log_softmax, F.log_softmax, torch.special.softmax,
    torch.special.log_softmax, methods=("softmax", "log_softmax"))
def softmax(ctx, input, dim=None, _stacklevel=3, dtype=None, **kwargs):
    t = T(input)
    if not is_none(dim) and t.shape is not None:
        shape_fns.normalize_dim(dim.obj if hasattr(dim, "obj") else dim, len(t.shape))
    return like(t, t.shape, to_dtype(dtype, _float(t.dtype)))


@op("softmin", F.softmin)
def softmin(ctx, input, dim=None, _stacklevel=3, dtype=None):
    return softmax(ctx, input, dim, _stacklevel, dtype)


@op("glu", F.glu)
def glu(ctx, input, dim=-1):
    t = T(input)
    d = shape_fns.normalize_dim(dim.obj if hasattr(dim, "obj") else dim, len(t.shape))
    shape = list(t.shape)
    shape[d] = shape_fns.sym.floordiv(shape[d], 2)
    return like(t, shape)


@op("normalize", F.normalize)
def normalize(ctx, input, p=2.0, dim=1, eps=1e-12, out=None):
    return T(input)


@op("cumsum", torch.cumsum, torch.cumprod, methods=("cumsum", "cumprod"))
def cumsum(ctx, input, dim, *, dtype=None, out=None):
    t = T(input)
    shape_fns.normalize_dim(dim.obj if hasattr(dim, "obj") else dim, max(len(t.shape), 1))
    d = to_dtype(dtype, None)
    if d is None:
        d = torch.int64 if int_dtype(t.dtype) or t.dtype == torch.bool else t.dtype
    return like(t, t.shape, d)


@op("requires_grad_", methods=("requires_grad_", "retain_grad", "share_memory_", "fill_", "zero_",
                               "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
                               "copy_", "clamp_", "masked_fill_", "index_fill_", "scatter_"))
def inplace_same(ctx, input, *args, **kwargs):
    return T(input)


def _dtype_flag(attribute: str):
    def rule(ctx, input):
        from ..values import SymScalar

        t = T(input)
        return Const(getattr(t.dtype, attribute)) if t.dtype is not None else SymScalar(bool, None)

    return rule


op("is_floating_point", torch.is_floating_point, methods=("is_floating_point",))(_dtype_flag("is_floating_point"))
op("is_complex", torch.is_complex, methods=("is_complex",))(_dtype_flag("is_complex"))


@op("dim", methods=("dim", "ndimension"))
def dim(ctx, input):
    from ..values import Const, SymScalar

    t = T(input)
    return Const(len(t.shape)) if t.shape is not None else SymScalar(int, None, "rank unknown")


@op("element_size", methods=("element_size",))
def element_size(ctx, input):
    from ..values import Const

    t = T(input)
    return Const(torch.empty((), dtype=t.dtype).element_size())


@op("item", methods=("item", "tolist"))
def item(ctx, input):
    from ..values import SymScalar

    t = T(input)
    kind = float if t.dtype is not None and t.dtype.is_floating_point else (
        bool if t.dtype == torch.bool else int)
    ctx.report("SI003", "value read from tensor data with .item(); it is unknown to the analysis")
    return SymScalar(kind, None, "value of a tensor (.item())")
