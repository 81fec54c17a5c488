"""Helpers shared by the rule and lowering modules."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch

from shapeinfer import shape_fns as sf

from .. import dtypes as D

HIGHEST = jax.lax.Precision.HIGHEST


def jdt(dtype: torch.dtype):
    """The numpy/JAX dtype of a torch dtype."""
    return D.TORCH_TO_NUMPY[dtype]


@functools.lru_cache(maxsize=None)
def type_name(dtype: torch.dtype) -> str:
    """torch's ScalarType name (``Long``, ``Float``, ``BFloat16``), as its C++ error
    messages spell it."""
    return torch.empty(0, dtype=dtype).type()[len("torch."):-len("Tensor")]


def is_array(x) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer))


def cast(x, dtype):
    if not is_array(x) or x.dtype == dtype:
        return x
    return from_bool(x, dtype) if x.dtype == jnp.bool_ else x.astype(dtype)


def from_bool(x, dtype):
    """A bool array as ``dtype``: a select of 1 and 0 where the type is inexact, for XLA
    rewrites ``a * convert(mask)`` to ``select(mask, a, 0)``, which makes ``inf * False``
    and ``nan * False`` 0 where torch gives NaN (an autograd formula's ``grad * mask``)."""
    if not jnp.issubdtype(dtype, jnp.inexact):
        return x.astype(dtype)
    return jnp.where(x, jnp.ones((), dtype), jnp.zeros((), dtype))


def bshape(*xs) -> tuple:
    """The broadcast shape of the tensors among ``xs`` (other values are ignored)."""
    shape = None
    for x in xs:
        if isinstance(x, torch.Tensor):
            s = x.shape
            if shape is None:
                shape = s
            elif s != shape:
                shape = sf.broadcast_shapes(tuple(shape), tuple(s))
    return () if shape is None else tuple(shape)


def norm_dim(d: int, ndim: int) -> int:
    return sf.normalize_dim(d, ndim)


def norm_dims(dims, ndim: int) -> tuple:
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    if len(dims) == 0:
        return tuple(range(ndim))
    return tuple(sorted(sf.normalize_dim(d, max(ndim, 1)) for d in dims)) if ndim else ()


def scalar_as(dtype, v):
    """A Scalar argument as torch's integer kernels take it: converted to the tensors' type
    (``alpha=0.6`` with int64 tensors is 0)."""
    if dtype.is_floating_point or dtype.is_complex:
        return v
    if dtype == torch.bool:
        return bool(v)
    info = torch.iinfo(dtype)
    if not info.min <= v <= info.max:
        raise RuntimeError(f"value cannot be converted to type {_C_NAMES.get(dtype, dtype)} "
                           "without overflow")
    return int(v)


_C_NAMES = {torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t",
            torch.int32: "int32_t", torch.int64: "int64_t"}


def number_in(dtype: torch.dtype, v):
    """A Scalar argument as torch's kernels convert it to the tensors' type: floats rounded
    to it (a double through float32 for the 16-bit types), integers as ``scalar_as``."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.tensor(v, dtype=dtype).item()
    return scalar_as(dtype, v)


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype torch computes in for ``dtype`` (float32 for the half types)."""
    return torch.float32 if dtype in D.HALF_TYPES else dtype


HALF_BITS = {jnp.dtype(jnp.float16): (5, 10), jnp.dtype(jnp.bfloat16): (8, 7)}


def rounded_apart(v, low):
    """``v`` (float32) rounded to the 16-bit numpy type ``low``'s precision, still float32,
    in a form no compiler fuses with what follows: LLVM narrows a float32 product of
    16-bit values rounded to 16 bits into a 16-bit product, then fuses it with a following
    add into one multiply-add rounded once (XLA:CPU on a CPU with float16 arithmetic, as
    AVX512-FP16), where torch rounds the product first. ``reduce_precision`` is bit
    arithmetic, opaque to both; it flushes what is below the type's normal range, which
    the plain cast rounds instead. Other types: ``v``."""
    bits = HALF_BITS.get(jnp.dtype(low))
    if bits is None:
        return v
    tiny = jnp.finfo(low).tiny
    return jnp.where(jnp.abs(v) < tiny, v.astype(low).astype(v.dtype),
                     jax.lax.reduce_precision(v, *bits))


def c_exp(z):
    """Complex exp with C's (torch's CPU) values where a real part is infinite and the
    imaginary part is not finite: 0 for -inf, (inf, nan) for +inf; XLA gives NaN."""
    re, odd = jnp.real(z), ~jnp.isfinite(jnp.imag(z))
    r = jnp.where(odd & (re == -jnp.inf), jnp.zeros((), z.dtype), jnp.exp(z))
    return jnp.where(odd & (re == jnp.inf), jnp.array(complex(jnp.inf, jnp.nan), z.dtype), r)


def c_abs(z):
    """|z|; for complex values inf where a part is infinite, the other NaN or not (C's
    hypot, as torch), where XLA gives NaN."""
    if not jnp.iscomplexobj(z):
        return jnp.abs(z)
    inf = jnp.isinf(jnp.real(z)) | jnp.isinf(jnp.imag(z))
    return jnp.where(inf, jnp.array(jnp.inf, jnp.real(z).dtype), jnp.abs(z))


def c_log(z):
    """Complex log with C's value (inf, nan) where one part is infinite and the other NaN;
    XLA gives NaN."""
    re, im = jnp.real(z), jnp.imag(z)
    odd = (jnp.isinf(re) & jnp.isnan(im)) | (jnp.isnan(re) & jnp.isinf(im))
    return jnp.where(odd, jnp.array(complex(jnp.inf, jnp.nan), z.dtype), jnp.log(z))


def vjp(f, primals, cotangent):
    """Gradients of ``f`` at ``primals`` for ``cotangent`` (backward ops as JAX vjps). The
    cotangent takes the dtype of ``f``'s output (a 16-bit op computing in float32 returns
    float32, where torch's gradient arrives in the 16-bit type)."""
    out, pull = jax.vjp(f, *primals)
    return pull(jax.tree.map(lambda c, o: c.astype(o.dtype), cotangent, out))


def _keep_nan(reduce, x, axis, keepdims, initial):
    r = reduce(x, axis=axis, keepdims=keepdims, initial=initial)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return r
    return jnp.where(jnp.isnan(x).any(axis=axis, keepdims=keepdims), jnp.nan, r)


def amax(x, axis=None, keepdims=False, initial=None):
    """``jnp.max`` that keeps a NaN as torch does: XLA:CPU's ``reduce_max`` may drop one
    (openxla/xla#21461; measured: most rows of a (5000, 2) float32 max over its last axis)."""
    return _keep_nan(jnp.max, x, axis, keepdims, initial)


def amin(x, axis=None, keepdims=False, initial=None):
    """``jnp.min`` that keeps a NaN (see ``amax``)."""
    return _keep_nan(jnp.min, x, axis, keepdims, initial)


def divide(a, b):
    """``a / b`` rounded as IEEE (and torch) divide, where XLA's algebraic simplifier would
    not: it makes a division by a broadcast or a constant (``x / 3.0``, ``x / s``, ``x / row``)
    a multiplication by the reciprocal (1 ulp off in about a third of the quotients; ``inf /
    1e38`` NaN, the reciprocal flushed to 0), ``(a / b) / c`` into ``a / (b * c)`` and ``a / (b
    / c)`` into ``(a * c) / b`` (overflowing where torch's quotients do not). Each operand
    becomes a select XLA cannot see through; a NaN in either makes the quotient NaN anyway.
    For the divisions whose result rounding decides (floor and trunc division, reciprocal,
    torch's pow and hard-activation kernels); true division (``div``, ``addcdiv``) keeps
    XLA's form: the exact quotient cost the MLP example's step 15-25% (README)."""
    dt = jnp.result_type(a, b)
    if not jnp.issubdtype(dt, jnp.floating):
        return jnp.true_divide(a, b)   # (complex values: their own algorithm)
    a, b = jnp.asarray(a, dt), jnp.asarray(b, dt)
    nan = jnp.isnan(a) | jnp.isnan(b)
    return jnp.where(nan, jnp.nan, a) / jnp.where(nan, jnp.nan, b)


__all__ = ["jnp", "jax", "sf", "D", "HIGHEST", "jdt", "is_array", "cast", "bshape", "norm_dim",
           "norm_dims", "opmath", "vjp", "amax", "amin", "from_bool", "divide"]


def check_index(index, size: int, message: str, wraps: bool = False, ignore=None) -> None:
    """``index`` must lie in [0, size), or in [-size, size) where torch wraps negative
    indices (elements equal to ``ignore`` aside); otherwise the graph raises ``message``
    after it runs (``registry.check``; ``registry.check_input`` where ``index`` is an
    input's own elements)."""
    from .registry import check, check_input
    low = -size if wraps else 0
    if not check_input(index, low, size, ignore, message):
        check(out_of_range(index, low, size, ignore), message)


def out_of_range(index, low: int, high: int, ignore=None):
    """Elementwise: ``index`` outside [low, high) and not ``ignore`` (a JAX or a numpy
    array: the device's checks and the host's judge alike)."""
    bad = (index < low) | (index >= high)
    return bad if ignore is None else bad & (index != ignore)


def broadcast_sizes(x: tuple, y: tuple) -> tuple:
    """The broadcast of two concrete shapes, or torch's error where they do not broadcast."""
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q and 1 not in (p, q):
            raise RuntimeError(f"The size of tensor a ({p}) must match the size of tensor b "
                               f"({q}) at non-singleton dimension {i}")
    return tuple(q if p == 1 else p for p, q in zip(x, y))


def on_xla_cpu() -> bool:
    """Whether the graph is compiled for XLA:CPU (some ops are lowered otherwise there:
    grouped and 1x1 convolutions, ``nn.py``; LAPACK calls, ``lapack.py``)."""
    from ..config import config
    return config.jax_device().platform == "cpu"
