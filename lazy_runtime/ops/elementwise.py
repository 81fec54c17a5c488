"""Elementwise ops: broadcasting shape rule, torch's type promotion, one JAX function each.

``elementwise(ops, fn, kind, operands)`` registers, for every spelling in ``ops``, a rule
(broadcast shape of the tensor arguments; compute and result dtypes by promotion ``kind``
over the ``operands`` positions) and a lowering that casts every JAX argument to the
compute dtype, applies ``fn`` and casts to the result dtype. Float scalars are runtime
inputs (``dynamic_scalars``) unless named in ``static``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch._decomp
from jax import lax

from .. import dtypes as D
from ..config import config
from ..errors import NoLowering
from .common import (bshape, c_abs, c_exp, c_log, cast, divide, is_array, jdt, number_in,
                     rounded_apart, vjp)
from .registry import (ELEMENTWISE, RULES, SAME_LAYOUT, ZERO_DIVISION, check,
                       decomposed_in_own_type, decomposed_where, decomposition, lowering,
                       refuse, rule)

aten = torch.ops.aten


_TORCH_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
                torch.bfloat16: "BFloat16"}


def _integers_only(rule_fn, name):
    """``rule_fn`` refusing a floating-point result with torch's message."""
    def checked(*args, **kwargs):
        out = rule_fn(*args, **kwargs)
        if out[1].is_floating_point or out[1].is_complex:
            raise NotImplementedError(f'"{name}_cpu" not implemented for '
                                      f"'{_TORCH_NAMES.get(out[1], out[1])}'")
        return out
    return checked


def elementwise(*ops, fn, kind=D.DEFAULT, operands=None, keep=(), static=(), integral=None,
                typed=False, opmath=True, round_scalars=False, product=False):
    """Register ``ops`` as elementwise: rule (broadcast shape, promoted dtype), lowering
    (``fn`` in the compute dtype) and padding (passes through). ``integral``: the name
    of torch's kernel, for ops torch refuses on floating-point inputs when called.
    ``typed``: ``fn`` takes the result's torch dtype first (torch's kernel depends on it).
    ``opmath=False``: torch's CPU kernel computes 16-bit results in their own type, each
    operation rounded (``logit``, ``xlogy``), not in float32 with one rounding.
    ``round_scalars``: for a 16-bit result, torch's kernel takes number and 0-d operands
    (and ``alpha``) rounded to that type (``bfloat16 + 1.717`` adds 1.71875), as
    ``add``, ``sub``, ``fmod``; ``mul`` and ``div`` take them unrounded. ``product``:
    ``fn`` may end in a product of two 16-bit values (``mul``, ``x ** 2``): a 16-bit result
    is rounded apart from what follows, as torch's kernel rounds it (``rounded_apart``:
    else ``a * b + c`` in float16 is one fused multiply-add), unless excess precision is
    allowed."""
    apart = product and opmath

    def elementwise_rule(*args, **kwargs):
        if len(args) == 2 and type(args[0]) is type(args[1]) and isinstance(args[0], torch.Tensor):
            a, b = args  # fast path: two tensors of one dtype and shape
            if a.dtype == b.dtype and a.shape == b.shape and a.ndim and kind == D.DEFAULT \
                    and a.dtype not in D.HALF_TYPES:
                return tuple(a.shape), a.dtype, a.dtype
        if kind in _KEEPS_FLOAT:
            fast = _one_float_layout(args)
            if fast is not None:
                return fast
        shape = bshape(*args)
        ins = args if operands is None else [args[i] for i in operands if i < len(args)]
        compute, result = D.elementwise_dtypes(kind, *ins)
        return shape, result, (compute if opmath or result not in D.HALF_TYPES else result)

    def lower_elementwise(ctx, *args, **kwargs):
        cd = jdt(ctx.aux)
        if round_scalars and ctx.dtype in D.HALF_TYPES:
            args = [_in_type(a, ctx.dtype) for a in args]
            kwargs = {k: _in_type(v, ctx.dtype) for k, v in kwargs.items()}
        args = [a if i in keep else cast(a, cd) for i, a in enumerate(args)]
        kwargs = {k: cast(v, cd) for k, v in kwargs.items()}
        r = fn(ctx.dtype, *args, **kwargs) if typed else fn(*args, **kwargs)
        if tuple(r.shape) != tuple(ctx.shape):
            r = jnp.broadcast_to(r, ctx.shape)
        if apart and ctx.dtype in D.HALF_TYPES and not config.excess_precision:
            r = rounded_apart(r, jdt(ctx.dtype))
        return r.astype(jdt(ctx.dtype))

    ELEMENTWISE.update(ops)
    rule(*ops, dynamic_scalars=True, static=static, pure=True)(
        elementwise_rule if integral is None else _integers_only(elementwise_rule, integral))
    if kind in _KEEPS_FLOAT and integral is None:   # (its _one_float_layout answer)
        SAME_LAYOUT.update((op, elementwise_rule) for op in ops)
    lowering(*ops, ctx=True)(lower_elementwise)


def _in_type(v, dtype):
    """A number or array rounded to the 16-bit ``dtype`` as torch converts a Scalar (a
    double through float32); 16-bit arrays and everything else unchanged."""
    low = jdt(dtype)
    if is_array(v):
        return v if v.dtype == low or not jnp.issubdtype(v.dtype, jnp.floating) \
            else v.astype(jnp.float32).astype(low)
    if type(v) is float or type(v) is int:
        rounded = number_in(dtype, v)
        return v if rounded == v else rounded
    return v


_KEEPS_FLOAT = (D.DEFAULT, D.INT_TO_FLOAT)
_REAL_NUMBERS = (float, int, bool)


def _one_float_layout(args):
    """(shape, dtype, dtype) where every tensor among ``args`` has one shape and one
    floating dtype (not a 16-bit one) and the rest are Python real numbers: nothing to
    broadcast or promote (an optimizer's per-parameter ops). None otherwise."""
    shape = dtype = None
    for a in args:
        if isinstance(a, torch.Tensor):
            if shape is None:
                shape, dtype = a.shape, a.dtype
            elif a.shape != shape or a.dtype != dtype:
                return None
        elif type(a) not in _REAL_NUMBERS:
            return None
    if dtype is None or not dtype.is_floating_point or dtype in D.HALF_TYPES:
        return None
    return tuple(shape), dtype, dtype


def _int(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_


def _keep_int(f):
    """Rounding functions are the identity on integers (as in torch)."""
    return lambda x: x if _int(x) else f(x)


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + lax.erf(x * 0.7071067811865476))


def _softplus(x, beta=1, threshold=20):
    bx = x * beta
    return jnp.where(bx > threshold, x, jnp.log1p(jnp.exp(jnp.minimum(bx, threshold))) / beta)


def _elu(x, alpha=1, scale=1, input_scale=1):
    return jnp.where(x > 0, x * scale, alpha * scale * jnp.expm1(x * input_scale))


def _mish(x):
    return x * jnp.tanh(_softplus(x))


def _relu(x):
    """torch's ``clamp_min(x, 0)``: keeps -0.0 and NaN."""
    return jnp.where(x < 0, jnp.zeros((), x.dtype), x)


def _relu6_of_x_plus_3(x):
    return jnp.minimum(jnp.maximum(x + 3, 0), 6)


def _hardsigmoid(x):
    """torch's CPU kernel: ``min(max(x + 3, 0), 6) / 6``."""
    return divide(_relu6_of_x_plus_3(x), 6)


def _hardswish(x):
    """torch's CPU kernel: ``x * min(max(x + 3, 0), 6) / 6`` (inf at the largest floats,
    where ``x * (x / 6 + 0.5)`` is not)."""
    return divide(x * _relu6_of_x_plus_3(x), 6)


def _lgamma(x):
    """lgamma, exactly 0 at 1 and 2 as C's ``lgamma`` (XLA's gives 4.8e-7 at 1)."""
    return jnp.where((x == 1) | (x == 2), jnp.zeros((), x.dtype), lax.lgamma(x))


def _sign(x):
    if x.dtype == jnp.bool_:
        return x   # a bool is its own sign, as in torch
    if jnp.issubdtype(x.dtype, jnp.floating):   # torch's (0 < x) - (x < 0): 0 for NaN and -0
        one = jnp.ones((), x.dtype)
        return jnp.where(x > 0, one, jnp.where(x < 0, -one, jnp.zeros((), x.dtype)))
    if jnp.issubdtype(x.dtype, jnp.complexfloating):   # torch's sgn: +0 at both zeros
        return jnp.where(x == 0, jnp.zeros((), x.dtype), jnp.sign(x))
    return jnp.sign(x)


def _c10_div(a, b):
    """``a / b`` for complex values as c10::complex divides (Smith's algorithm, as numpy):
    no C99 recovery of infinities, so a denominator with infinite parts gives NaN where
    XLA's division gives 0."""
    c, d = jnp.real(b), jnp.imag(b)
    big_c = jnp.abs(c) >= jnp.abs(d)
    rat = jnp.where(big_c, d / c, c / d)
    scl = 1 / jnp.where(big_c, c + d * rat, d + c * rat)
    ar, ai = jnp.real(a), jnp.imag(a)
    re = jnp.where(big_c, (ar + ai * rat) * scl, (ar * rat + ai) * scl)
    im = jnp.where(big_c, (ai - ar * rat) * scl, (ai * rat - ar) * scl)
    zero = (c == 0) & (d == 0)   # a complex infinity or NaN, part by part
    return lax.complex(jnp.where(zero, ar / jnp.abs(c), re), jnp.where(zero, ai / jnp.abs(d), im))


def _silu(x):
    """torch's complex kernel is ``x / (1 + exp(-x))`` (NaN where exp(-x) overflows)."""
    if jnp.iscomplexobj(x):
        return _c10_div(x, 1 + jnp.exp(-x))
    return x * jax.nn.sigmoid(x)


def _logaddexp(x, y):
    """Complex: torch's kernel (``LogAddExp.h``): NaN if either has a NaN part; of two
    infinite real parts alike, the smaller for -inf and log(exp(x) + exp(y)) for +inf;
    else log1p(exp(min - max)) + max, ordered by real part (ties: x is the max), the
    imaginary part not wrapped. An exp(min - max) of real part -inf is 0 (C's cexp, where
    XLA's gives NaN for an infinite or NaN imaginary part)."""
    if not jnp.iscomplexobj(x):
        return jnp.logaddexp(x, y)
    swap = jnp.real(x) < jnp.real(y)
    lo, hi = jnp.where(swap, x, y), jnp.where(swap, y, x)
    diff = lo - hi
    r = jnp.where(jnp.real(diff) == -jnp.inf, hi, jnp.log1p(jnp.exp(diff)) + hi)
    tie = ~jnp.isfinite(jnp.real(lo)) & (jnp.real(lo) == jnp.real(hi))
    r = jnp.where(tie, jnp.where(jnp.real(lo) < 0, lo, c_log(c_exp(lo) + c_exp(hi))), r)
    nan = jnp.isnan(x) | jnp.isnan(y)   # (jnp.isnan: of either part)
    return jnp.where(nan, jnp.array(complex(math.nan, math.nan), r.dtype), r)


# ---- unary --------------------------------------------------------------------------

_UNARY = [
    (aten.neg.default, jnp.negative, D.DEFAULT),
    (aten.abs.default, c_abs, D.COMPLEX_TO_FLOAT),
    (aten.sign.default, _sign, D.DEFAULT),
    (aten.sgn.default, _sign, D.DEFAULT),
    (aten.sqrt.default, jnp.sqrt, D.INT_TO_FLOAT),
    (aten.rsqrt.default, lax.rsqrt, D.INT_TO_FLOAT),
    (aten.exp.default, jnp.exp, D.INT_TO_FLOAT),
    (aten.exp2.default, jnp.exp2, D.INT_TO_FLOAT),
    (aten.expm1.default, jnp.expm1, D.INT_TO_FLOAT),
    (aten.log.default, jnp.log, D.INT_TO_FLOAT),
    (aten.log2.default, jnp.log2, D.INT_TO_FLOAT),
    (aten.log10.default, jnp.log10, D.INT_TO_FLOAT),
    (aten.log1p.default, jnp.log1p, D.INT_TO_FLOAT),
    (aten.sin.default, jnp.sin, D.INT_TO_FLOAT),
    (aten.cos.default, jnp.cos, D.INT_TO_FLOAT),
    (aten.tan.default, jnp.tan, D.INT_TO_FLOAT),
    (aten.asin.default, jnp.arcsin, D.INT_TO_FLOAT),
    (aten.acos.default, jnp.arccos, D.INT_TO_FLOAT),
    (aten.atan.default, jnp.arctan, D.INT_TO_FLOAT),
    (aten.sinh.default, jnp.sinh, D.INT_TO_FLOAT),
    (aten.cosh.default, jnp.cosh, D.INT_TO_FLOAT),
    (aten.tanh.default, jnp.tanh, D.INT_TO_FLOAT),
    (aten.asinh.default, jnp.arcsinh, D.INT_TO_FLOAT),
    (aten.acosh.default, jnp.arccosh, D.INT_TO_FLOAT),
    (aten.atanh.default, jnp.arctanh, D.INT_TO_FLOAT),
    (aten.sigmoid.default, jax.nn.sigmoid, D.INT_TO_FLOAT),
    (aten.erf.default, lax.erf, D.INT_TO_FLOAT),
    (aten.erfc.default, lax.erfc, D.INT_TO_FLOAT),
    (aten.erfinv.default, lax.erf_inv, D.INT_TO_FLOAT),
    (aten.lgamma.default, _lgamma, D.INT_TO_FLOAT),
    (aten.reciprocal.default, lambda x: divide(1, x), D.INT_TO_FLOAT),
    (aten.floor.default, _keep_int(jnp.floor), D.DEFAULT),
    (aten.ceil.default, _keep_int(jnp.ceil), D.DEFAULT),
    (aten.round.default, _keep_int(jnp.round), D.DEFAULT),
    (aten.trunc.default, _keep_int(jnp.trunc), D.DEFAULT),
    (aten.frac.default, lambda x: x - jnp.trunc(x), D.DEFAULT),
    (aten.relu.default, _relu, D.DEFAULT),
    (aten.silu.default, _silu, D.DEFAULT),
    (aten.mish.default, _mish, D.DEFAULT),
    (aten.hardsigmoid.default, _hardsigmoid, D.DEFAULT),
    (aten.hardswish.default, _hardswish, D.DEFAULT),
    (aten.isnan.default, jnp.isnan, D.ALWAYS_BOOL),
    (aten.isinf.default, jnp.isinf, D.ALWAYS_BOOL),
    (aten.isfinite.default, jnp.isfinite, D.ALWAYS_BOOL),
    (aten.logical_not.default, jnp.logical_not, D.ALWAYS_BOOL),
    (aten.bitwise_not.default, lambda x: jnp.logical_not(x) if x.dtype == jnp.bool_
     else jnp.invert(x), D.DEFAULT),
    (aten.clone.default, lambda x, memory_format=None: x, D.NO_OPMATH),
    (aten.positive.default, lambda x: x, D.NO_OPMATH),
]
for _op, _fn, _kind in _UNARY:
    elementwise(_op, fn=_fn, kind=_kind, operands=(0,))

# torch builds no integer or bool frac kernel (its error)
refuse((aten.frac.default,), lambda args, dt: not (dt.is_floating_point or dt.is_complex),
       "frac of integers or bools")

elementwise(aten.round.decimals, kind=D.DEFAULT, operands=(0,),
            fn=lambda x, decimals=0: jnp.round(x, decimals))
elementwise(aten.gelu.default, fn=_gelu, operands=(0,))
elementwise(aten.hardtanh.default, fn=lambda x, lo=-1, hi=1: _clamp(x, lo, hi), operands=(0,))
elementwise(aten.leaky_relu.default, operands=(0,),
            fn=lambda x, slope=0.01: jnp.where(x > 0, x, x * slope))
elementwise(aten.elu.default, fn=_elu, operands=(0,))
elementwise(aten.softplus.default, fn=_softplus, operands=(0,))
elementwise(aten.threshold.default, operands=(0,),
            fn=lambda x, threshold, value: jnp.where(x <= threshold, value, x))
# in the operand's own type: the default posinf/neginf are its largest values (float16's 65504)
elementwise(aten.nan_to_num.default, operands=(0,), kind=D.NO_OPMATH,
            fn=lambda x, nan=None, posinf=None, neginf=None: jnp.nan_to_num(
                x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf))


def _logit(dtype, x, eps=None):
    """torch's kernel: ``x`` clamped to ``[eps, 1 - eps]``, the bounds in the input's type
    (a 16-bit ``1 - 1e-6`` is 1: inf at 1, as in torch), then ``log(x / (1 - x))``."""
    if eps is not None:
        lo, hi = (jnp.asarray(b, jdt(dtype)).astype(x.dtype) for b in (eps, 1 - eps))
        x = jnp.clip(x, lo, hi)
    return jnp.log(x / (1 - x))


elementwise(aten.logit.default, operands=(0,), kind=D.INT_TO_FLOAT, fn=_logit, typed=True,
            opmath=False)

# ---- binary -------------------------------------------------------------------------


def _add(a, b, alpha=1):
    return a + (b if _is_one(alpha) else b * alpha)


def _sub(a, b, alpha=1):
    return a - (b if _is_one(alpha) else b * alpha)


def _is_one(v) -> bool:
    return not is_array(v) and v == 1


def _div_mode(dtype, a, b, rounding_mode=None):
    if rounding_mode is None:
        return divide(a, b)
    if rounding_mode == "floor":
        return _floor_divide(dtype, a, b)
    if _int(a):   # (a number divisor takes the tensor's type, as in torch)
        a, b = jnp.broadcast_arrays(a, jnp.asarray(b, a.dtype))
        return lax.div(a, b)  # C division truncates
    return jnp.trunc(_step_rounding(dtype, b)(divide(a, b)))


def _step_rounding(dtype, b):
    """How torch's 16-bit division kernels round each step: to the 16-bit type (a
    ``Vectorized<Half>`` op), except by a single-element divisor, computed in float (its
    ``is_scalar(2)`` kernels). The identity for the other types."""
    if dtype not in D.HALF_TYPES or not is_array(b) or b.size == 1:
        return lambda v: v
    return lambda v: v.astype(jdt(dtype)).astype(v.dtype)


def _floor_divide(dtype, a, b):
    """torch's ``div_floor_floating``: ``(a - fmod(a, b)) / b``, one less where the remainder
    and ``b`` differ in sign, rounded to the nearest integer; a zero quotient takes the sign
    of ``a / b``; ``b == 0`` gives ``a / b``. (Integers: Python's floor division.)"""
    dt = jnp.result_type(a, b)
    if jnp.issubdtype(dt, jnp.integer):
        return jnp.floor_divide(a, b)
    step = _step_rounding(dtype, b)
    a, b = jnp.broadcast_arrays(jnp.asarray(a, dt), jnp.asarray(b, dt))   # (a number divisor)
    mod = lax.rem(a, b)
    div = step(divide(step(a - mod), b))
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), step(div - 1), div)
    floor = jnp.floor(div)
    floor = jnp.where(step(div - floor) > 0.5, step(floor + 1), floor)
    quotient = step(divide(a, b))
    r = jnp.where(div != 0, floor, jnp.copysign(jnp.zeros((), div.dtype), quotient))
    return jnp.where(b == 0, quotient, r)


def _nonzero_divisor(fn):
    """``fn(a, b, ...)``, an integer division, checked for a zero divisor:
    torch raises where XLA gives a value (``ZeroDivisionCheckError`` at the next read; off
    where the divisor is padded, as every check)."""
    def checked(dtype, a, b, **kwargs):
        if jnp.issubdtype(jnp.result_type(a, b), jnp.integer):   # (a true division: float)
            check(jnp.asarray(b) == 0, ZERO_DIVISION)
        return fn(dtype, a, b, **kwargs)
    return checked


def _pow(a, b):
    if isinstance(b, int) and not isinstance(b, bool) and b >= 0 \
            and (b <= 3 or not jnp.issubdtype(a.dtype, jnp.floating)):
        return lax.integer_pow(a, b)
    if isinstance(b, int) and not isinstance(b, bool) and b > 3:
        return jnp.power(a, float(b))   # floats beyond cubes: C's pow, one rounding, as torch
    if type(b) is float and b in _POW_KERNELS and jnp.issubdtype(a.dtype, jnp.floating):
        return _POW_KERNELS[b](a)
    if not jnp.issubdtype(jnp.result_type(a, b), jnp.integer):
        return jnp.power(a, b)
    # integers: a negative power is 1 / a**n truncated (0 unless a is 1 or -1), as in torch;
    # XLA's integer power gives garbage for negative exponents
    neg = b < 0
    r = jnp.power(a, jnp.where(neg, 0, b))
    unit = jnp.where(a == 1, 1, jnp.where(a == -1, jnp.where(b % 2 != 0, -1, 1), 0))
    return jnp.where(neg, unit, r).astype(r.dtype)


# torch's ``pow_tensor_scalar_kernel`` for a number exponent: sqrt, rsqrt and reciprocal
# kernels for 0.5, -0.5 and -1 (NaN for -inf, -0.0 for -0.0 where C's pow differs), products
# for 2, 3 and -2. (float16 takes C's pow for 0.5 and -0.5: ``_pow_of_type``.)
_POW_KERNELS = {0.5: jnp.sqrt, -0.5: lambda x: divide(1, jnp.sqrt(x)), -1.0: lambda x: divide(1, x),
                2.0: lambda x: x * x, 3.0: lambda x: x * x * x,
                -2.0: lambda x: divide(1, x * x)}


def _pow_of_type(dtype, a, b):
    """torch's float16 kernel is C's ``pow`` for every number exponent (+inf for -inf ** 0.5,
    where the sqrt kernel of the other types gives NaN). Both 16-bit kernels take the
    exponent in the tensor's type (bfloat16 ``x ** 1.7`` is ``x ** 1.703125``); bfloat16's
    products (2, 3, -2 after that rounding) round each multiplication."""
    if dtype not in D.HALF_TYPES or type(b) not in (int, float) or b in (0.5, -0.5, -1):
        return jnp.power(a, b) if dtype == torch.float16 and b in (0.5, -0.5) else _pow(a, b)
    b = number_in(dtype, b)
    if dtype == torch.bfloat16:
        if b not in (2.0, 3.0, -2.0):
            return jnp.power(a, b)
        x = a.astype(jnp.bfloat16)
        return (x * x * x if b == 3.0 else x * x if b == 2.0 else divide(1, x * x)).astype(a.dtype)
    return _POW_KERNELS[b](a) if b in (2.0, 3.0, -2.0, -1.0) else jnp.power(a, b)


def _lerp(a, b, w):
    d = b - a
    return jnp.where(jnp.abs(w) < 0.5, a + w * d, b - d * (1 - w))


elementwise(aten.add.Tensor, aten.add.Scalar, fn=_add, operands=(0, 1), round_scalars=True)
elementwise(aten.sub.Tensor, aten.sub.Scalar, fn=_sub, operands=(0, 1), round_scalars=True)
elementwise(aten.rsub.Tensor, aten.rsub.Scalar, fn=lambda a, b, alpha=1: _sub(b, a, alpha),
            operands=(0, 1), round_scalars=True)


def _alpha_refused(args, kwargs, dt) -> bool:
    """torch's check of ``alpha`` against the result dtype: no bool alpha but for bools,
    no complex alpha but for complex results, no float alpha for integer results."""
    alpha = kwargs.get("alpha") if kwargs else None
    if alpha is None or type(alpha) is int:
        return False
    if type(alpha) is bool:
        return dt is not torch.bool
    if isinstance(alpha, complex):
        return not dt.is_complex
    return isinstance(alpha, float) and not (dt.is_floating_point or dt.is_complex)


refuse((aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor,
        aten.rsub.Scalar), _alpha_refused, "an alpha of a kind the result dtype refuses "
       "(torch's error)", with_kwargs=True, same_layout=True)
elementwise(aten.mul.Tensor, aten.mul.Scalar, fn=jnp.multiply, operands=(0, 1), product=True)
elementwise(aten.div.Tensor, aten.div.Scalar, fn=jnp.true_divide, kind=D.INT_TO_FLOAT,
            operands=(0, 1))
elementwise(aten.floor_divide.default, aten.floor_divide.Scalar,
            fn=_nonzero_divisor(_floor_divide), operands=(0, 1), typed=True)
elementwise(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor,
            fn=_nonzero_divisor(lambda dtype, a, b: jnp.remainder(a, b)), operands=(0, 1),
            typed=True, round_scalars=True)
elementwise(aten.fmod.Tensor, aten.fmod.Scalar,
            fn=_nonzero_divisor(lambda dtype, a, b: jnp.fmod(a, b)), operands=(0, 1), typed=True,
            round_scalars=True)
elementwise(aten.pow.Tensor_Tensor, aten.pow.Scalar, fn=_pow, operands=(0, 1),
            round_scalars=True)
elementwise(aten.pow.Tensor_Scalar, fn=_pow_of_type, operands=(0, 1), static=(1,), typed=True,
            product=True)
# an integer tensor to a negative Python power: torch refuses it (a tensor of negative
# exponents is allowed)
refuse((aten.pow.Tensor_Scalar,), lambda args, dt: type(args[1]) is int and args[1] < 0
       and not (dt.is_floating_point or dt.is_complex), "integer to a negative power")
elementwise(aten.maximum.default, fn=jnp.maximum, operands=(0, 1))
elementwise(aten.minimum.default, fn=jnp.minimum, operands=(0, 1))
elementwise(aten.fmax.default, fn=jnp.fmax, operands=(0, 1))
elementwise(aten.fmin.default, fn=jnp.fmin, operands=(0, 1))
elementwise(aten.atan2.default, fn=jnp.arctan2, kind=D.INT_TO_FLOAT, operands=(0, 1),
            round_scalars=True)
elementwise(aten.hypot.default, fn=jnp.hypot, operands=(0, 1))
elementwise(aten.copysign.Tensor, aten.copysign.Scalar, fn=jnp.copysign, kind=D.INT_TO_FLOAT,
            operands=(0, 1))
elementwise(aten.logaddexp.default, fn=_logaddexp, operands=(0, 1))
elementwise(aten.xlogy.Tensor, fn=jax.scipy.special.xlogy, kind=D.INT_TO_FLOAT, operands=(0, 1),
            opmath=False)
decomposed_in_own_type(aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
for _name, _fn in (("eq", jnp.equal), ("ne", jnp.not_equal), ("lt", jnp.less),
                   ("le", jnp.less_equal), ("gt", jnp.greater), ("ge", jnp.greater_equal)):
    _packet = getattr(aten, _name)
    elementwise(_packet.Tensor, _packet.Scalar, fn=_fn, kind=D.ALWAYS_BOOL, operands=(0, 1))
for _name, _fn in (("logical_and", jnp.logical_and), ("logical_or", jnp.logical_or),
                   ("logical_xor", jnp.logical_xor)):
    elementwise(getattr(aten, _name).default, fn=_fn, kind=D.ALWAYS_BOOL, operands=(0, 1))
for _name, _fn in (("bitwise_and", jnp.bitwise_and), ("bitwise_or", jnp.bitwise_or),
                   ("bitwise_xor", jnp.bitwise_xor)):
    _packet = getattr(aten, _name)
    elementwise(_packet.Tensor, _packet.Scalar, fn=_fn, operands=(0, 1))
# floating operands: torch's kernels refuse them ("bitwise_and_cpu" not implemented for
# 'Float') when the op is called; their lowering failed only at the graph's compile
refuse((aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_or.Tensor,
        aten.bitwise_or.Scalar, aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar,
        aten.bitwise_not.default),
       lambda args, dt: dt.is_floating_point or dt.is_complex,
       "floating operands (torch's error)")


def _shift(left):
    """torch's shifts, defined for every amount: a negative one or one past the width
    gives 0 (left) or the sign (right); XLA leaves those to the hardware."""
    def fn(a, b):
        dt = jnp.result_type(a, b)   # (``a`` may be a number: ``2 << t``)
        bits = jnp.iinfo(dt).bits
        a, b = jnp.asarray(a).astype(dt), jnp.asarray(b).astype(dt)   # (-5 >> u8: wraps)
        out_of_range = (b < 0) | (b >= bits)
        if left:
            return jnp.where(out_of_range, 0, jnp.left_shift(a, jnp.where(out_of_range, 0, b)))
        if jnp.issubdtype(dt, jnp.unsignedinteger):   # no sign to shift in: 0
            return jnp.where(out_of_range, 0, jnp.right_shift(a, jnp.where(out_of_range, 0, b)))
        return jnp.right_shift(a, jnp.where(out_of_range, bits - 1, b))
    return fn


for _names, _left in ((("__lshift__", "bitwise_left_shift"), True),
                      (("__rshift__", "bitwise_right_shift"), False)):
    _lsh, _blsh = (getattr(aten, n) for n in _names)
    elementwise(_lsh.Tensor, _lsh.Scalar, _blsh.Tensor, _blsh.Tensor_Scalar, _blsh.Scalar_Tensor,
                fn=_shift(_left), operands=(0, 1), integral="lshift" if _left else "rshift")

def _gcd(a, b):
    """torch's ``calc_gcd``: Euclid on ``abs`` of both (wrapping: abs of the type's
    minimum stays negative) with C's truncating remainder. A fixed number of steps, for
    Euclid on values below 2**bits ends within 1.44 * bits + 2 (Lame): a loop that cannot
    run on, where a loop until done could."""
    a, b = jnp.broadcast_arrays(jnp.abs(a), jnp.abs(b))

    def step(_, ab):
        a, b = ab
        done = a == 0
        return jnp.where(done, a, lax.rem(b, jnp.where(done, jnp.ones_like(a), a))), \
            jnp.where(done, b, a)
    steps = int(jnp.iinfo(a.dtype).bits * 1.45) + 3
    return lax.fori_loop(0, steps, step, (a, b))[1]


def _lcm(a, b):
    """torch's ``abs(a / gcd * b)`` (0 where the gcd is), wrapping on overflow; C++
    computes it in int for the narrower types (then wraps to the type)."""
    a, b = jnp.broadcast_arrays(a, b)
    dt = a.dtype
    g = _gcd(a, b)
    wide = jnp.promote_types(dt, jnp.int32)
    a, b, g = (v.astype(wide) for v in (a, b, g))
    r = jnp.abs(lax.div(a, jnp.where(g == 0, jnp.ones_like(g), g)) * b)
    return jnp.where(g == 0, 0, r).astype(dt)


elementwise(aten.gcd.default, fn=_gcd, operands=(0, 1), integral="gcd")
elementwise(aten.lcm.default, fn=_lcm, operands=(0, 1), integral="lcm")
refuse((aten.gcd.default, aten.lcm.default), lambda args, dt: dt is torch.bool,
       "gcd or lcm of bools (torch builds no kernel)")
elementwise(aten.div.Tensor_mode, aten.div.Scalar_mode, fn=_nonzero_divisor(_div_mode),
            operands=(0, 1), typed=True)


def _true_division_without_a_mode(op):
    """``div(a, b, rounding_mode=None)`` is a true division: a float result for integers
    (the rounding modes keep the integer type)."""
    rule_fn, multi = RULES[op]

    def typed_by_mode(*args, **kwargs):
        mode = args[2] if len(args) > 2 else kwargs.get("rounding_mode")
        if mode is not None:
            return rule_fn(*args, **kwargs)
        compute, result = D.elementwise_dtypes(D.INT_TO_FLOAT, *args[:2])
        return bshape(*args[:2]), result, compute
    RULES[op] = (typed_by_mode, multi)


for _op in (aten.div.Tensor_mode, aten.div.Scalar_mode):
    _true_division_without_a_mode(_op)
_INTEGER_DIVISIONS = (aten.floor_divide.default, aten.floor_divide.Scalar, aten.remainder.Tensor,
                      aten.remainder.Scalar, aten.remainder.Scalar_Tensor, aten.fmod.Tensor,
                      aten.fmod.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
# torch builds no bool kernels for them (its error)
refuse(_INTEGER_DIVISIONS, lambda args, dt: dt is torch.bool, "a division of bools")
# the number 0 as divisor is known when the op is recorded: torch runs (its error, at once);
# any other divisor is checked on the device (``_nonzero_divisor``: a number that may
# change between steps is a graph input)
refuse(_INTEGER_DIVISIONS, lambda args, dt: type(args[1]) in (int, bool) and args[1] == 0
       and not (dt.is_floating_point or dt.is_complex), "an integer division by the number 0")
elementwise(aten.lerp.Scalar, aten.lerp.Tensor, fn=_lerp, operands=(0, 1))
elementwise(aten.addcmul.default, operands=(0, 1, 2),
            fn=lambda s, a, b, value=1: s + (a * b if _is_one(value) else value * a * b))
# torch's CPU kernel: ``self + value * t1 / t2`` (the product first: inf where it overflows)
elementwise(aten.addcdiv.default, operands=(0, 1, 2),
            fn=lambda s, a, b, value=1: s + (a if _is_one(value) else value * a) / b)
elementwise(aten.clamp.default, aten.clamp.Tensor, operands=(0, 1, 2),
            fn=lambda x, lo=None, hi=None: _clamp(x, lo, hi))
elementwise(aten.clamp_min.default, aten.clamp_min.Tensor, operands=(0, 1),
            fn=lambda x, lo: _clamp(x, lo, None))
elementwise(aten.clamp_max.default, aten.clamp_max.Tensor, operands=(0, 1),
            fn=lambda x, hi: _clamp(x, None, hi))
# prims.where: what torch's decompositions of diag, diag_embed, sinc, bucketize and
# grid_sample reach (its operands share a dtype: no promotion to differ from where's)
elementwise(aten.where.self, torch.ops.prims.where.default, fn=jnp.where, operands=(1, 2),
            keep=(0,))
# torch's where wants a bool (or deprecated uint8) condition: other dtypes are its error
refuse((aten.where.self,), lambda args, dt: args[0].dtype not in (torch.bool, torch.uint8),
       "a condition neither bool nor uint8 (torch's error)")


@functools.lru_cache(maxsize=None)
def _range(dtype) -> tuple:
    info = torch.finfo(dtype) if dtype.is_floating_point or dtype.is_complex else \
        torch.iinfo(dtype)
    return info.min, info.max


_FLOAT_MAX = {d: torch.finfo(d).max for d in (torch.float16, torch.bfloat16, torch.float32,
                                                torch.float64)}


def number_fits(v, dtype) -> bool:
    """Whether torch's checked conversion of the Python number ``v`` to ``dtype`` (of a
    fill value, a ``value=``/``alpha=`` argument) surely passes; where it may raise "value
    cannot be converted to type ... without overflow", the op runs eagerly and torch
    decides. Conservative: -1 into uint8 (which torch wraps) runs eagerly too."""
    if type(v) is float:   # (the common case: a float argument of a floating op)
        hi = _FLOAT_MAX.get(dtype)
        if hi is not None:
            return -hi <= v <= hi or not math.isfinite(v)   # inf and nan pass
    if type(v) is bool or dtype == torch.bool:
        return True
    if isinstance(v, complex):
        return dtype.is_complex and number_fits(v.real, dtype) and number_fits(v.imag, dtype)
    if not isinstance(v, (int, float)):
        return True   # (not a number the rule can judge: as before)
    lo, hi = _range(dtype)
    if dtype.is_floating_point or dtype.is_complex:
        return not math.isfinite(v) or lo <= v <= hi   # inf and nan pass
    return math.isfinite(v) and lo <= v <= hi


def converts_safely(src, dst) -> bool:
    """Whether every value of dtype ``src`` passes torch's checked conversion to ``dst``
    (a 0-d value tensor that torch reads with ``.item()``); where not, the op runs
    eagerly, for the check depends on the value."""
    if src == dst or src == torch.bool or (dst == torch.bool and not src.is_complex):
        return True
    if dst == torch.float16 and src in (torch.int32, torch.int64):
        return False   # 65504 is float16's largest
    return torch.promote_types(src, dst) == dst


def _lerp_refused(args, kwargs, dt) -> bool:
    """torch's lerp: end and a tensor weight of self's dtype, a floating or complex self,
    a number weight that converts to it."""
    x, end = args[0], args[1]
    w = args[2] if len(args) > 2 else kwargs.get("weight")
    dt = x.dtype
    if end.dtype is not dt or not (dt.is_floating_point or dt.is_complex):
        return True
    return w.dtype is not dt if isinstance(w, torch.Tensor) else not number_fits(w, dt)


def _integral(t) -> bool:
    return not (t.dtype.is_floating_point or t.dtype.is_complex)


def _addc_refused(divides: bool):
    """torch refuses addcdiv of two integer (or bool) tensors, addcmul of bools, and a
    ``value`` that its checked conversion refuses."""
    def bad(args, kwargs, dt):
        value = args[3] if len(args) > 3 else kwargs.get("value", 1)
        refused = _integral(args[1]) and _integral(args[2]) if divides else dt is torch.bool
        return refused or not number_fits(value, dt)
    return bad


# (same_layout: one float dtype and numbers that fit it are none of these refusals)
refuse((aten.lerp.Scalar, aten.lerp.Tensor), _lerp_refused,
       "arguments of another dtype than self's, or an integer self (torch's errors)",
       with_kwargs=True, same_layout=True)
refuse((aten.addcmul.default,), _addc_refused(False), "bools, or a value out of range",
       with_kwargs=True, same_layout=True)
refuse((aten.addcdiv.default,), _addc_refused(True),
       "integer division, or a value out of range (torch's errors)", with_kwargs=True,
       same_layout=True)


def _clamp(x, lo, hi):
    """torch's clamp: a NaN element stays NaN, and an element equal to a bound stays
    itself (``-0.0`` clamped at ``0.0`` is ``-0.0``, as ``std::max`` gives)."""
    if _int(x):
        return x if lo is None and hi is None else jnp.clip(x, lo, hi)
    if lo is not None:
        x = jnp.where(jnp.isnan(x) | (x == lo), x, jnp.maximum(x, lo))
    if hi is not None:
        x = jnp.where(jnp.isnan(x) | (x == hi), x, jnp.minimum(x, hi))
    return x


# masked_fill keeps self's dtype; the mask only broadcasts into self.
@rule(aten.masked_fill.Scalar, aten.masked_fill.Tensor, dynamic_scalars=True, pure=True)
def masked_fill_rule(x, mask, value):
    if not _masked_fill_ok(x, mask, value):
        raise NoLowering(aten.masked_fill.Scalar, "arguments torch refuses or converts with "
                                                  "a check of the value (its errors)")
    return tuple(x.shape), x.dtype


def _masked_fill_ok(x, mask, value) -> bool:
    """A bool mask broadcasting into x (a bigger one: torch's result or its error), and a
    number or 0-d tensor that torch's checked conversion to x's dtype surely passes."""
    if mask.dtype != torch.bool or not _broadcasts_into(mask.shape, x.shape):
        return False
    if isinstance(value, torch.Tensor):
        return value.ndim == 0 and converts_safely(value.dtype, x.dtype)
    return number_fits(value, x.dtype)


def _broadcasts_into(small, big) -> bool:
    return small == big or (len(small) <= len(big) and all(
        m in (1, b) for m, b in zip(reversed(small), reversed(big))))


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def lower_masked_fill(x, mask, value):
    return jnp.where(mask, cast(value, x.dtype) if is_array(value) else value, x)


# ---- backward of activations: the vjp of the forward lowering ----------------------


def _backward_of(f):
    def lower(grad, x, *params):
        return vjp(lambda z: f(z, *params), (x,), grad)[0]
    return lower


elementwise(aten.gelu_backward.default, operands=(0, 1),
            fn=lambda g, x, approximate="none": _backward_of(_gelu)(g, x, approximate))
elementwise(aten.silu_backward.default, operands=(0, 1),
            fn=_backward_of(lambda x: x * jax.nn.sigmoid(x)))
elementwise(aten.mish_backward.default, operands=(0, 1), fn=_backward_of(_mish))
# (conjugated for complex y, as torch's kernels: the identity on real numbers)
elementwise(aten.tanh_backward.default, operands=(0, 1),
            fn=lambda g, y: g * jnp.conj(1 - y * y))


# torch's kernel multiplies by the float constant ``1.0f / 6.0f`` (in double too)
_ONE_SIXTH = float(np.float32(1 / 6))


def _softplus_backward(g, x, beta, threshold):
    """torch's CPU kernel: ``z = exp(x * beta)``; ``g`` past the threshold, else ``g * z /
    (z + 1)`` (the vjp of the forward's ``min`` halved the gradient at the threshold)."""
    z = jnp.exp(x * beta)
    return jnp.where(x * beta > threshold, g, g * z / (z + 1))


def _hardswish_backward(g, x):
    """torch's vectorized kernel: 0 up to -3, ``g`` from 3 on, else ``g * (x / 3 + 0.5)``
    (NaN for NaN)."""
    inner = g * (divide(x, 3) + 0.5)
    return jnp.where(x <= -3, jnp.zeros((), g.dtype), jnp.where(x >= 3, g, inner))


elementwise(aten.sigmoid_backward.default, operands=(0, 1),
            fn=lambda g, y: g * jnp.conj(y * (1 - y)))
elementwise(aten.threshold_backward.default, operands=(0, 1),
            fn=lambda g, x, threshold: jnp.where(x <= threshold, 0, g))
# (torch's vectorized kernels, which treat all but a tensor's last few elements: a NaN input
# fails ``lo < x < hi`` and gets 0; its scalar loop would pass the gradient)
elementwise(aten.hardtanh_backward.default, operands=(0, 1),
            fn=lambda g, x, lo, hi: jnp.where((x > lo) & (x < hi), g, 0))
elementwise(aten.hardshrink_backward.default, aten.softshrink_backward.default,
            operands=(0, 1), fn=lambda g, x, lambd: jnp.where(jnp.abs(x) <= lambd, 0, g))
elementwise(aten.leaky_relu_backward.default, operands=(0, 1),
            fn=lambda g, x, slope, self_is_result: jnp.where(x > 0, g, g * slope))
elementwise(aten.elu_backward.default, operands=(0, 5),
            fn=lambda g, alpha, scale, input_scale, is_result, x: _elu_backward(
                g, alpha, scale, input_scale, is_result, x), keep=())
elementwise(aten.softplus_backward.default, operands=(0, 1), fn=_softplus_backward)
elementwise(aten.hardsigmoid_backward.default, operands=(0, 1),
            fn=lambda g, x: jnp.where((x > -3) & (x < 3), g * _ONE_SIXTH, 0))
elementwise(aten.hardswish_backward.default, operands=(0, 1), fn=_hardswish_backward)


def _elu_backward(g, alpha, scale, input_scale, is_result, x):
    """torch's vectorized kernel: the positive branch where ``x > 0``, so a NaN input takes
    the negative one (NaN)."""
    negcoef = alpha * scale
    if is_result:
        return jnp.where(x > 0, g * scale, g * input_scale * (x + negcoef))
    return jnp.where(x > 0, g * scale, g * input_scale * negcoef * jnp.exp(x * input_scale))


# ---- conversion and fills -------------------------------------------------------------


@rule(aten._to_copy.default)
def to_copy_rule(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
                 memory_format=None):
    return tuple(x.shape), dtype if dtype is not None else x.dtype


@lowering(aten._to_copy.default, ctx=True)
def lower_to_copy(ctx, x, **kwargs):
    dt = jdt(ctx.dtype)
    if jnp.iscomplexobj(x) and not jnp.issubdtype(dt, jnp.complexfloating):
        x = x != 0 if dt == jnp.bool_ else jnp.real(x)   # torch drops the imaginary part
    return cast(x, dt)


@decomposition(torch.ops.prims.convert_element_type.default)
def convert_element_type(x, dtype):
    """The prim torch's own decompositions cast with (``renorm`` of 16-bit tensors)."""
    return aten._to_copy.default(x, dtype=dtype)


@rule(aten.fill.Scalar, aten.fill.Tensor, dynamic_scalars=True)
def fill_rule(x, value):
    if not (value.ndim == 0 if isinstance(value, torch.Tensor) else number_fits(value, x.dtype)):
        raise NoLowering(aten.fill.Scalar, "a value tensor of dims, or a number out of the "
                                           "dtype's range (torch's errors)")
    return tuple(x.shape), x.dtype


@lowering(aten.fill.Scalar, aten.fill.Tensor, ctx=True)
def lower_fill(ctx, x, value):
    v = value.astype(jdt(ctx.dtype)) if is_array(value) else value
    return jnp.full(ctx.shape, v, dtype=jdt(ctx.dtype))


@rule(aten.zero.default)
def zero_rule(x):
    return tuple(x.shape), x.dtype


@lowering(aten.zero.default, ctx=True)
def lower_zero(ctx, x):
    return jnp.zeros(ctx.shape, jdt(ctx.dtype))


# ---- modified Bessel functions ---------------------------------------------------------
# i0, and i1 for its derivative; torch's decompositions of both reach the prims.
elementwise(aten.i0.default, torch.ops.prims.bessel_i0.default, fn=jax.scipy.special.i0,
            kind=D.INT_TO_FLOAT, operands=(0,))


def plus_zero_at_zero(f):
    """``f`` with +0.0 at both zeros: torch's i1 kernels (Cephes's, odd functions) give
    +0.0 at -0.0 where jax's keep the sign."""
    return lambda x: jnp.where(x == 0, jnp.zeros_like(x), f(x))


elementwise(aten.special_i1.default, torch.ops.prims.bessel_i1.default,
            fn=plus_zero_at_zero(jax.scipy.special.i1), kind=D.INT_TO_FLOAT, operands=(0,))


# ---- bool and integer operands torch's kernels refuse -----------------------------------
# (found by comparing random (op, dtype) pairs with torch: these gave a value here)

def _is_bool(a) -> bool:
    return type(a) is bool or (isinstance(a, torch.Tensor) and a.dtype is torch.bool)


# "Subtraction, the `-` operator, with a bool tensor is not supported" (a Python bool is
# wrapped as one), and negating one
refuse((aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar),
       lambda args, dt: _is_bool(args[0]) or _is_bool(args[1]),
       "a bool operand of a subtraction (torch's error)")
refuse((aten.neg.default, aten.abs.default, aten.relu.default, aten.ceil.default,
        aten.floor.default, aten.round.default, aten.round.decimals, aten.trunc.default),
       lambda args, dt: args[0].dtype is torch.bool, "a bool operand (torch's error)")
refuse((aten.hypot.default,), lambda args, dt: not dt.is_floating_point,
       "integer operands (torch's error)")


def _ldexp_lowered(x, other) -> bool:
    """Where ldexp's decomposition (``x * 2 ** other``) gives torch's kernel's dtype: x and
    the exponent of one floating dtype, or integer exponents of a float32 x (or of a
    float64 x of dims, or with 0-d exponents). Elsewhere torch 2.13's kernel decides the
    dtype otherwise (a float16 x with integer exponents stays float16; the decomposition
    gave float32) or refuses (bool exponents): those run eagerly."""
    integer = not other.is_floating_point() and not other.is_complex() and \
        other.dtype is not torch.bool
    return x.is_floating_point() and (other.dtype == x.dtype or integer and (
        x.dtype is torch.float32 or x.dtype is torch.float64 and (x.ndim or not other.ndim)))


decomposed_where(aten.ldexp.Tensor, _ldexp_lowered, "mixed dtypes (torch's kernel decides)")
decomposed_where(aten.heaviside.default,
                  lambda x, values: x.dtype == values.dtype and not x.is_complex(),
                  "operands of two dtypes, or complex ones (torch's error)")
decomposed_where(aten.logaddexp2.default, lambda a, b: a.is_floating_point() or
                  b.is_floating_point(), "integer operands (torch's error)")
refuse((aten.logaddexp.default,), lambda args, dt: not (dt.is_floating_point or dt.is_complex),
       "integer operands (torch's error)")
# a Python exponent the result dtype cannot hold: torch's checked conversion raises
refuse((aten.pow.Tensor_Scalar,), lambda args, dt: not number_fits(args[1], dt),
       "an exponent out of the dtype's range (torch's error)")
