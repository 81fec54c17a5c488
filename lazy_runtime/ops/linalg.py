"""Matrix products, then torch.linalg's factorizations, solvers and matrix functions.

Products: shapes from ``shape_fns.matmul_shape``; JAX matmuls at full precision,
accumulating half types in float32 as torch does. Factorizations and solvers (inverse,
solve, Cholesky, QR, SVD, eigh, determinants, LU, triangular solves, pinv), the matrix
exponential, Householder reflectors (geqrf, householder_product, ormqr), least squares
(lstsq, per LAPACK driver) and LDL^T solves: see their sections.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch
from jax.lax import linalg as lax_linalg

from ..config import config
from ..errors import NoLowering
from . import lapack
from .common import (HIGHEST, broadcast_sizes, jdt, number_in, opmath, scalar_as, sf,
                     type_name)
from .registry import COMPLEX_OK, decomposed_in_own_type, decomposition, lowering, rule

aten = torch.ops.aten


def _check_dtypes(op, *ts):
    d = ts[0].dtype
    for t in ts[1:]:
        if t.dtype != d:
            raise RuntimeError(f"{op}: expected m1 and m2 to have the same dtype, but got: "
                               f"{d} != {t.dtype}".replace("torch.", ""))
    return d


def _mm(a, b, out_dtype):
    acc = jdt(opmath(out_dtype))
    pref = acc if acc != a.dtype else None
    return jnp.matmul(a, b, precision=HIGHEST, preferred_element_type=pref)


@rule(aten.mm.default, pure=True)
def mm_rule(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError("mm: both arguments must be 2D")
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("mm", a, b)


@rule(aten.bmm.default, pure=True)
def bmm_rule(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError("bmm: both arguments must be 3D")
    sf.require_equal(a.shape[0], b.shape[0], "SI130", "bmm batch sizes")
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("bmm", a, b)


@rule(aten.mv.default, aten.dot.default, pure=True)
def mv_rule(a, b):
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("mv", a, b)


@lowering(aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default, ctx=True)
def lower_mm(ctx, a, b):
    return _mm(a, b, ctx.dtype)


# ---- grouped products (``torch._grouped_mm``: mixture-of-experts layers) ------------------
#
# ``offs`` holds each group's end along the ragged dim (cumulative, int32): 2-D x 3-D splits
# the rows of ``a`` among ``b``'s groups, 3-D x 2-D the columns of ``b`` among ``a``'s, and
# 2-D x 2-D the contracted dim (one product per group, the weight gradient of the first);
# 3-D x 3-D is a batched product. Positions past the last offset belong to no group: zero
# rows or columns (as torch's CPU kernel leaves them), nothing summed.

_GROUPED = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@rule(aten._grouped_mm.default)
def grouped_mm_rule(a, b, offs=None, bias=None, out_dtype=None):
    op = aten._grouped_mm.default
    if bias is not None or out_dtype not in (None, a.dtype) or a.dtype != b.dtype or \
            a.dtype not in _GROUPED or (offs is None) != (a.ndim == 3 and b.ndim == 3) or \
            (offs is not None and (offs.ndim != 1 or offs.dtype != torch.int32)):
        raise NoLowering(op, "a bias, another output dtype, or arguments torch refuses")
    k_a, k_b = a.shape[-1], b.shape[-2]
    if (a.ndim, b.ndim) == (2, 3) and k_a == k_b and offs.shape[0] == b.shape[0]:
        return (a.shape[0], b.shape[2]), a.dtype
    if (a.ndim, b.ndim) == (3, 2) and k_a == k_b and offs.shape[0] == a.shape[0]:
        return (a.shape[1], b.shape[1]), a.dtype
    if (a.ndim, b.ndim) == (2, 2) and k_a == k_b:
        return (offs.shape[0], a.shape[0], b.shape[1]), a.dtype
    if (a.ndim, b.ndim) == (3, 3) and k_a == k_b and a.shape[0] == b.shape[0]:
        return (a.shape[0], a.shape[1], b.shape[2]), a.dtype
    raise NoLowering(op, "shapes torch refuses (its error)")


@lowering(aten._grouped_mm.default, ctx=True)
def lower_grouped_mm(ctx, a, b, offs=None, bias=None, out_dtype=None):
    acc = jdt(opmath(ctx.dtype))
    kw = dict(precision=HIGHEST, preferred_element_type=acc)
    if offs is None:
        return jnp.matmul(a, b, **kw).astype(a.dtype)
    ends = offs.astype(jnp.int32)
    sizes = jnp.diff(ends, prepend=jnp.zeros((1,), jnp.int32))
    if b.ndim == 3:   # rows of a among b's groups
        out = jax.lax.ragged_dot(a, b, sizes, **kw)
    elif a.ndim == 3:   # columns of b among a's groups: the transposed product
        out = jax.lax.ragged_dot(b.T, jnp.swapaxes(a, 1, 2), sizes, **kw).T
    else:   # the contracted dim split: one product per group
        dims = jax.lax.RaggedDotDimensionNumbers(
            dot_dimension_numbers=(([1], [0]), ([], [])), lhs_ragged_dimensions=[1],
            rhs_group_dimensions=[])
        out = jax.lax.ragged_dot_general(a, b, sizes, dims, **kw)
    return out.astype(a.dtype)


def _addmm_rule(kernel: str):
    """The rule of addmm, addmv or baddbmm (``kernel``: torch's CPU kernel, in its error)."""
    def addmm_rule(x, a, b, *, beta=1, alpha=1):
        out = sf.matmul_shape(tuple(a.shape), tuple(b.shape))
        sf.broadcast_shapes(tuple(x.shape), out)
        dtype = _check_dtypes("addmm", x, a, b)
        if dtype == torch.bool:
            raise RuntimeError(f'"{kernel}" not implemented for \'Bool\'')
        scalar_as(dtype, beta), scalar_as(dtype, alpha)   # torch's overflow error, if any
        return out, dtype
    return addmm_rule


rule(aten.addmm.default, pure=True)(_addmm_rule("addmm_impl_cpu_"))
rule(aten.addmv.default, pure=True)(_addmm_rule("addmv_impl_cpu"))
rule(aten.baddbmm.default, pure=True)(_addmm_rule("baddbmm"))


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, ctx=True)
def lower_addmm(ctx, x, a, b, *, beta=1, alpha=1):
    beta, alpha = scalar_as(ctx.dtype, beta), scalar_as(ctx.dtype, alpha)
    p = _mm(a, b, ctx.dtype)
    if alpha != 1:
        p = p * alpha
    if beta == 0:
        return p
    x = x.astype(p.dtype)   # 16-bit: torch's kernel scales and adds in float32, one rounding
    return p + (x if beta == 1 else x * beta)


@decomposition(aten.addr.default)
def addr(x, v1, v2, *, beta=1, alpha=1):
    """``beta * x + alpha * v1 * v2`` in torch's CPU kernel's arithmetic: the scalars in the
    tensors' dtype, each operation in it (16-bit: each rounded), where torch's own
    decomposition computes 16-bit types in float32 and rounds once. Arguments torch's
    kernel refuses run eagerly (its errors)."""
    dtype = x.dtype
    if v1.dim() != 1 or v2.dim() != 1 or not dtype == v1.dtype == v2.dtype \
            or not _expandable(tuple(x.shape), (v1.shape[0], v2.shape[0])) \
            or not (dtype.is_floating_point or dtype.is_complex) \
            and (isinstance(beta, float) or isinstance(alpha, float)):
        return NotImplemented
    try:
        beta, alpha = number_in(dtype, beta), number_in(dtype, alpha)
    except RuntimeError:
        return NotImplemented
    outer = v1.unsqueeze(1) * alpha * v2 if dtype != torch.bool else \
        v1.unsqueeze(1) & v2 & alpha
    if not beta:   # x ignored, NaN included, as the kernel's beta == 0 branch
        return outer.expand(v1.shape[0], v2.shape[0]).clone()
    if dtype == torch.bool:
        return outer.logical_or(x)
    return x * beta + outer


decomposed_in_own_type(aten.linalg_cross.default)


def _expandable(shape, out) -> bool:
    return len(shape) <= len(out) and all(
        s in (1, o) for s, o in zip(reversed(shape), reversed(out)))


@rule(aten.addbmm.default)
def addbmm_rule(x, a, b, *, beta=1, alpha=1):
    op = aten.addbmm.default
    out = (a.shape[1], b.shape[2]) if a.ndim == 3 and b.ndim == 3 else None
    if out is None or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1] \
            or not x.dtype == a.dtype == b.dtype or x.dtype == torch.bool \
            or not _expandable(tuple(x.shape), out):
        raise NoLowering(op, "arguments torch refuses (its error)")
    scalar_as(x.dtype, beta), scalar_as(x.dtype, alpha)   # torch's overflow error, if any
    return out, x.dtype


@lowering(aten.addbmm.default, ctx=True)
def lower_addbmm(ctx, x, a, b, *, beta=1, alpha=1):
    """The sum of the batch's products is one product over the batch and inner dims
    together; beta=0 ignores ``x`` (NaN included), as torch's first addmm does."""
    n, m = a.shape[0], a.shape[2]
    if n and a.dtype in (jnp.float16, jnp.bfloat16):
        # torch adds one batch's product at a time (in float32: alpha * a @ b + beta * r),
        # rounding each sum to the 16-bit type
        r = jnp.broadcast_to(x, (a.shape[1], b.shape[2]))
        for i in range(n):
            p = alpha * _mm(a[i], b[i], ctx.dtype)
            scale = beta if i == 0 else 1
            r = (p if scale == 0 else p + scale * r.astype(p.dtype)).astype(a.dtype)
        return r
    a2 = jnp.moveaxis(a, 0, 1).reshape(a.shape[1], n * m)
    return lower_addmm(ctx, x, a2, b.reshape(n * m, b.shape[2]), beta=beta, alpha=alpha)


# ---- factorizations and solvers (torch.linalg) -----------------------------------------
# float32/float64 are lowered, and complex64/complex128 for the ops in ``COMPLEX_OK``
# (listed at the end of this section); integer inputs raise torch's error where torch
# checks the dtype itself, other dtypes (half types) run eagerly and torch decides.
# Transposes that LAPACK's complex routines conjugate are ``_mH`` (``_mT`` for reals).
# LU factors and pivots are LAPACK's (getrf: partial pivoting, 1-based int32 pivots), as
# the backward formulas hand them back to ``linalg_lu_solve``/``lu_unpack``. ``info``
# outputs follow LAPACK too: computed on the device, read only by ``check_errors``.

_LOWERED = (torch.float32, torch.float64)
_COMPLEX = (torch.complex64, torch.complex128)


def _floating(op, A, name=None, low_precision=True):
    """A's dtype where it is lowered (complex ones for ops in ``COMPLEX_OK``). With
    ``name``, torch's own check of the op first: integers (and, without ``low_precision``,
    half types) raise its message."""
    d = A.dtype
    if d in _LOWERED or (d in _COMPLEX and op in COMPLEX_OK):
        return d
    if name is not None and not (d.is_floating_point or d.is_complex):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. "
                           f"Got {type_name(d)}")
    if name is not None and not low_precision and not d.is_complex:
        raise RuntimeError(f"{name}: Low precision dtypes not supported. Got {type_name(d)}")
    raise NoLowering(op, f"{d} (float32 and float64 are lowered, complex for some ops)")


def _real(d):
    """The dtype of a real result (singular values, eigenvalues, |det|) from ``d``."""
    return d.to_real() if d.is_complex else d


def _same_dtype(A, B, msg):
    if A.dtype != B.dtype:
        raise RuntimeError(msg.format(type_name(A.dtype), type_name(B.dtype)))


def _no_check(op, check_errors):
    """``check_errors=True`` asks the op itself to read ``info``: eager torch does it."""
    if check_errors:
        raise NoLowering(op, "check_errors=True reads info on the host")


def _matrix(A, name, arg="A"):
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")


def _square(A, name):
    _matrix(A, name)
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")


def _min_dims(t, name):
    if t.ndim < 2:
        raise RuntimeError(f"{name}: Expected tensor with 2 or more dimensions. Got size: "
                           f"{list(t.shape)} instead")


def _solver(A, b, left, name):
    """torch's checks of ``A X = B`` (``X A = B`` unless ``left``), ``b`` B's shape."""
    _square(A, name)
    if len(b) < 2:
        raise RuntimeError(f"{name}: The input tensor B must have at least 2 dimensions.")
    k = -2 if left else -1
    if A.shape[k] != b[k]:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation {eq} "
                           f"({A.shape[-2]}x{A.shape[-1]} and {b[-2]}x{b[-1]})")


def _legacy_solver(B, A, name):
    """The checks of the older solvers (``triangular_solve``, ``cholesky_solve``)."""
    _same_dtype(B, A, "Expected b and A to have the same dtype, but found b of type {} and "
                      "A of type {} instead.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"A must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")
    if A.shape[-1] != B.shape[-2]:
        raise RuntimeError(f"Incompatible matrix sizes for {name}: each A matrix is "
                           f"{A.shape[-1]} by {A.shape[-1]} but each b matrix is "
                           f"{B.shape[-2]} by {B.shape[-1]}")


def _batch(a, b) -> tuple:
    """The broadcast batch dims of two stacks of matrices of shapes ``a`` and ``b``."""
    return broadcast_sizes(tuple(a[:-2]), tuple(b[:-2]))


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    """The conjugate transpose (the transpose of a real matrix)."""
    return jnp.conj(_mT(x)) if jnp.iscomplexobj(x) else _mT(x)


def _eye_like(a):
    return jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)


def _empty(dtype):
    """What torch returns for an output it was asked not to compute."""
    return jnp.zeros((0,), dtype)


def _broadcast(a, b):
    """``a`` and ``b`` with their batch dims broadcast (JAX's solvers want them equal)."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:]))


def _first_true(x):
    """LAPACK's ``info``: 1 + the index of the first True along the last axis, 0 if none."""
    if x.shape[-1] == 0:
        return jnp.zeros(x.shape[:-1], jnp.int32)
    return jnp.where(x.any(-1), jnp.argmax(x, -1) + 1, 0).astype(jnp.int32)


def _lu(a):
    """getrf: (LU, 1-based int32 pivots, info = the first zero of U's diagonal). JAX's
    ``lu`` pivots as LAPACK does (it calls getrf on CPU) but counts pivots from 0."""
    lu, piv, _ = lapack.lu(a)
    return lu, piv + 1, _first_true(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0)


def _tri_solve(a, b, upper, left=True, unit=False, transpose=False):
    """``op(a) X = b`` (``X op(a) = b`` unless ``left``) with ``a`` triangular; ``op`` the
    conjugate transpose for ``transpose``."""
    a, b = _broadcast(a, b)
    return lapack.triangular_solve(a, b, left_side=left, lower=not upper,
                                   transpose_a=transpose, unit_diagonal=unit,
                                   conjugate_a=transpose and jnp.iscomplexobj(a))


def _lu_solve(lu, piv, b, left=True, adjoint=False):
    """``A X = b`` from getrf's ``P A = L U`` (torch's pivots); ``adjoint`` solves with
    ``A^H``, ``left=False`` solves ``X A = b``."""
    if not left:  # X A = b  <=>  A^H X^H = b^H
        return _mH(_lu_solve(lu, piv, _mH(b), True, not adjoint))
    lu, b = _broadcast(lu, b)
    n = lu.shape[-1]
    perm = lax_linalg.lu_pivots_to_permutation(piv - 1, n)
    perm = jnp.broadcast_to(perm, lu.shape[:-1])[..., None]  # A[perm] = L U
    if not adjoint:
        y = _tri_solve(lu, jnp.take_along_axis(b, perm, axis=-2), False, unit=True)
        return _tri_solve(lu, y, True)
    y = _tri_solve(lu, b, True, transpose=True)  # U^H L^H (P X) = b
    y = _tri_solve(lu, y, False, unit=True, transpose=True)
    return jnp.take_along_axis(y, jnp.argsort(perm, axis=-2), axis=-2)


def check_errors(func, args, kwargs):
    """``_linalg_check_errors`` (a dispatch special: it returns nothing). torch raises for a
    singular or non-positive-definite input by reading ``info``, a device->host barrier
    inside every graph using inv/solve/cholesky. Only ``config.check_linalg_errors`` reads
    it, and torch's own kernel raises (its exception type and text); otherwise the results
    hold inf/NaN, as on XLA devices."""
    if config.check_linalg_errors:
        func(args[0].cpu(), *args[1:], **kwargs)


@rule(aten.linalg_inv_ex.default, multi=True)
def inv_ex_rule(A, *, check_errors=False):
    _square(A, "linalg.inv")
    d = _floating(aten.linalg_inv_ex.default, A, "linalg.inv", low_precision=False)
    _no_check(aten.linalg_inv_ex.default, check_errors)
    return [(tuple(A.shape), d), (tuple(A.shape[:-2]), torch.int32)]


@lowering(aten.linalg_inv_ex.default)
def lower_inv_ex(A, *, check_errors=False):
    lu, piv, info = _lu(A)
    return _lu_solve(lu, piv, _eye_like(A)), info


def _vector_rhs(a, b) -> bool:
    """torch's rule for a right-hand side of ``solve`` that is a (batch of) vector(s)."""
    return len(b) == 1 or (len(b) == len(a) - 1 and tuple(b) == tuple(a[:-1]))


@rule(aten._linalg_solve_ex.default, multi=True)
def solve_ex_rule(A, B, *, left=True, check_errors=False):
    op = aten._linalg_solve_ex.default
    d = _floating(op, A, "linalg.solve")
    _same_dtype(A, B, "linalg.solve: Expected A and B to have the same dtype, but found A of "
                      "type {} and B of type {} instead")
    vector = _vector_rhs(A.shape, B.shape)
    b = tuple(B.shape) + (1,) if vector else tuple(B.shape)
    _solver(A, b, left, "linalg.solve")
    if vector and not left:
        raise RuntimeError("linalg.solve: Vector broadcasting of the left hand side is not "
                           "supported for left=False. In this case linalg.solve is equivalent "
                           "to B / A.squeeze(-1)")
    _no_check(op, check_errors)
    x = _batch(b, A.shape) + (b[-2:-1] if vector else b[-2:])
    return [(x, d), (tuple(A.shape), d), (tuple(A.shape[:-1]), torch.int32),
            (tuple(A.shape[:-2]), torch.int32)]


@lowering(aten._linalg_solve_ex.default)
def lower_solve_ex(A, B, *, left=True, check_errors=False):
    """torch factors A itself here (not A^T), whatever A's layout."""
    vector = _vector_rhs(A.shape, B.shape)
    lu, piv, info = _lu(A)
    x = _lu_solve(lu, piv, B[..., None] if vector else B, left)
    return (x[..., 0] if vector else x), lu, piv, info


def _potrf_info(a, l):
    """LAPACK's potrf ``info`` for ``a`` (its lower triangle) and JAX's factor ``l``: the
    order of the first leading minor that is not positive-definite, 0 if none. JAX only
    fills a failed factor with NaN, so the order comes from replaying the elimination's
    pivots, and only when some factor failed."""
    failed = jnp.isnan(l).any((-2, -1))
    order = jax.lax.cond(failed.any(), _first_bad_pivot,
                         lambda a: jnp.zeros(a.shape[:-2], jnp.int32), a)
    # a factor that failed where the replay, rounding differently, did not: still a failure
    return jnp.where(failed, jnp.where(order > 0, order, a.shape[-1]), 0).astype(jnp.int32)


def _diag_embed(a):
    """``a`` with everything but its diagonal zeroed."""
    return jnp.where(jnp.eye(a.shape[-1], dtype=bool), a, 0)


def _first_bad_pivot(a):
    """1 + the first step of Hermitian Gaussian elimination whose pivot is not > 0 (NaN
    included, as in potrf, which reads only the real part of the diagonal), 0 if none."""
    n = a.shape[-1]
    a = jnp.tril(a, -1) + _mH(jnp.tril(a, -1)) + jnp.real(_diag_embed(a))
    rows = jnp.arange(n)

    def step(k, carry):
        a, pivots = carry
        p = jnp.real(a[..., k, k])
        c = jnp.where(rows > k, a[..., :, k], 0)
        a = a - c[..., :, None] * jnp.conj(c[..., None, :]) / p[..., None, None]
        return a, pivots.at[..., k].set(p)

    pivots = jnp.zeros(a.shape[:-1], jnp.real(a).dtype)
    _, pivots = jax.lax.fori_loop(0, n, step, (a, pivots))
    return _first_true(~(pivots > 0))


@rule(aten.linalg_cholesky_ex.default, multi=True)
def cholesky_ex_rule(A, *, upper=False, check_errors=False):
    _square(A, "linalg.cholesky")
    d = _floating(aten.linalg_cholesky_ex.default, A, "linalg.cholesky")
    _no_check(aten.linalg_cholesky_ex.default, check_errors)
    return [(tuple(A.shape), d), (tuple(A.shape[:-2]), torch.int32)]


@lowering(aten.linalg_cholesky_ex.default)
def lower_cholesky_ex(A, *, upper=False, check_errors=False):
    """torch reads the lower triangle, or the upper one for ``upper`` (then A = U^H U)."""
    if A.shape[-1] == 0:   # 0 x 0 matrices: nothing to factor (JAX's replay cannot index)
        return A, jnp.zeros(A.shape[:-2], jnp.int32)
    a = _mH(A) if upper else A
    l = lapack.cholesky(a, symmetrize_input=False)
    return (_mH(l) if upper else l), _potrf_info(a, l)


@rule(aten.cholesky.default)
def cholesky_rule(A, upper=False):
    """The deprecated ``torch.cholesky`` reads ``info`` itself: eager when errors are checked."""
    _square(A, "cholesky")
    d = _floating(aten.cholesky.default, A)
    if config.check_linalg_errors:
        raise NoLowering(aten.cholesky.default, "it checks info itself")
    return tuple(A.shape), d


@lowering(aten.cholesky.default)
def lower_cholesky(A, upper=False):
    return lower_cholesky_ex(A, upper=upper)[0]


@rule(aten.cholesky_inverse.default)
def cholesky_inverse_rule(L, upper=False):
    _square(L, "cholesky_inverse")
    return tuple(L.shape), _floating(aten.cholesky_inverse.default, L)


@lowering(aten.cholesky_inverse.default)
def lower_cholesky_inverse(L, upper=False):
    return lower_cholesky_solve(_eye_like(L), L, upper)


_QR_MODES = {"reduced": (True, False), "complete": (True, True), "r": (False, False)}


@rule(aten.linalg_qr.default, multi=True)
def qr_rule(A, mode="reduced"):
    _matrix(A, "linalg.qr")
    d = _floating(aten.linalg_qr.default, A, "linalg.qr")
    if mode not in _QR_MODES:
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    compute_q, complete = _QR_MODES[mode]
    *batch, m, n = A.shape
    k = m if complete else min(m, n)
    q = (*batch, m, k) if compute_q else (0,)
    return [(q, d), ((*batch, k, n), d)]


@lowering(aten.linalg_qr.default)
def lower_qr(A, mode="reduced"):
    """Householder QR, as LAPACK's geqrf/orgqr (which JAX calls on CPU): torch's signs."""
    q, r = lapack.qr(A, full_matrices=mode == "complete")
    return (_empty(A.dtype) if mode == "r" else q), r


@rule(aten._linalg_svd.default, multi=True)
def svd_rule(A, full_matrices=False, compute_uv=True, *, driver=None):
    op = aten._linalg_svd.default
    _matrix(A, "linalg.svd")
    d = _floating(op, A, "linalg.svd")
    if driver is not None:
        raise NoLowering(op, f"driver={driver!r} (a cuSOLVER choice)")
    *batch, m, n = A.shape
    k = min(m, n)
    s = ((*batch, k), _real(d))
    if not compute_uv:
        return [((0,), d), s, ((0,), d)]
    return [((*batch, m, m if full_matrices else k), d), s,
            ((*batch, n if full_matrices else k, n), d)]


@lowering(aten._linalg_svd.default)
def lower_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    """Singular vectors are unique up to sign (per pair, for distinct singular values);
    JAX's signs may differ from torch's, as they do between torch's own CPU and CUDA."""
    if not compute_uv:
        return _empty(A.dtype), lapack.svd(A, compute_uv=False), _empty(A.dtype)
    return tuple(lapack.svd(A, full_matrices=full_matrices))


@rule(aten._linalg_eigh.default, multi=True)
def eigh_rule(A, UPLO="L", compute_v=True):
    _square(A, "linalg.eigh")
    if len(UPLO) != 1 or UPLO.upper() not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    d = _floating(aten._linalg_eigh.default, A)
    return [(tuple(A.shape[:-1]), _real(d)), (tuple(A.shape) if compute_v else (0,), d)]


@lowering(aten._linalg_eigh.default)
def lower_eigh(A, UPLO="L", compute_v=True):
    """Ascending eigenvalues, as torch; eigenvectors are unique up to sign (a phase, if
    complex; for distinct eigenvalues). Only the ``UPLO`` triangle is read, as by LAPACK's
    syevd/heevd (and only the real part of the diagonal)."""
    v, w = lapack.eigh(A, lower=UPLO.upper() == "L", symmetrize_input=False)
    return w, (v if compute_v else _empty(A.dtype))


# det and slogdet: torch factors A^T when a real A is contiguous (A otherwise, and always
# for complex A), and their backward reads that choice back from ``A.is_contiguous()`` to
# solve with the LU. A lowering cannot see strides, so the aten ops decompose into
# ``lu_det``, which takes the choice as an argument.
_LIB = torch.library.Library("lazy_runtime", "FRAGMENT")
_LIB.define("lu_det(Tensor A, bool transposed) -> "
            "(Tensor det, Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)")
lu_det = torch.ops.lazy_runtime.lu_det.default


def _lu_det_cpu(A, transposed):
    """The op on the CPU (where it falls back, under ``force_fallback``)."""
    lu, piv, _ = torch.linalg.lu_factor_ex(A.mT if transposed else A)
    sign, logabsdet = torch.linalg.slogdet(A)
    return torch.linalg.det(A), sign, logabsdet, lu, piv


_LIB.impl("lu_det", _lu_det_cpu, "CPU")


@rule(lu_det, multi=True)
def lu_det_rule(A, transposed):
    batch = tuple(A.shape[:-2])
    return [(batch, A.dtype)] * 2 + [(batch, _real(A.dtype)), (tuple(A.shape), A.dtype),
                                     (tuple(A.shape[:-1]), torch.int32)]


@lowering(lu_det)
def lower_lu_det(A, transposed):
    lu, piv, _ = _lu(_mT(A) if transposed else A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    swaps = jnp.sum(piv != jnp.arange(1, A.shape[-1] + 1, dtype=piv.dtype), axis=-1)
    parity = (1 - 2 * (swaps % 2)).astype(A.dtype)
    # the sign of a complex number is its phase x/|x|, as in jnp.sign
    return (parity * jnp.prod(diag, axis=-1), parity * jnp.prod(jnp.sign(diag), axis=-1),
            jnp.sum(jnp.log(jnp.abs(diag)), axis=-1), lu, piv)


def _det_input(op, A, name, low_precision):
    """Whether torch factors A^T (see above)."""
    _square(A, name)
    _floating(op, A, name, low_precision)
    return A.is_contiguous() and not A.is_complex()


@decomposition(aten._linalg_det.default)
def linalg_det(A):
    det, _, _, lu, piv = lu_det(A, _det_input(aten._linalg_det.default, A, "linalg.det", True))
    return det, lu, piv


@decomposition(aten._linalg_slogdet.default)
def linalg_slogdet(A):
    transposed = _det_input(aten._linalg_slogdet.default, A, "linalg.slogdet", False)
    _, sign, logabsdet, lu, piv = lu_det(A, transposed)
    return sign, logabsdet, lu, piv


@rule(aten.linalg_lu_factor_ex.default, multi=True)
def lu_factor_ex_rule(A, *, pivot=True, check_errors=False):
    op = aten.linalg_lu_factor_ex.default
    _min_dims(A, "torch.lu_factor")
    d = _floating(op, A)
    if not pivot:
        raise NoLowering(op, "LU without pivoting")
    _no_check(op, check_errors)
    *batch, m, n = A.shape
    return [(tuple(A.shape), d), ((*batch, min(m, n)), torch.int32), (tuple(batch), torch.int32)]


@lowering(aten.linalg_lu_factor_ex.default)
def lower_lu_factor_ex(A, *, pivot=True, check_errors=False):
    return _lu(A)


def _unpacked_types(shape, dtype, data, pivots):
    """The (P, L, U) types of ``linalg_lu``/``lu_unpack``: empty where not asked for."""
    *batch, m, n = shape
    k = min(m, n)
    p = ((*batch, m, m), dtype) if pivots else ((0,), dtype)
    if not data:
        return [p, ((0,), dtype), ((0,), dtype)]
    return [p, ((*batch, m, k), dtype), ((*batch, k, n), dtype)]


def _unpack(lu, piv, data=True, pivots=True):
    """(P, L, U) with A = P L U from getrf's factors."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    p = _empty(lu.dtype)
    if pivots:  # A[perm] = L U, so P is the transposed one-hot of perm
        perm = lax_linalg.lu_pivots_to_permutation(piv - 1, m)
        p = _mT(jax.nn.one_hot(perm, m, dtype=lu.dtype))
    if not data:
        return p, _empty(lu.dtype), _empty(lu.dtype)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    return p, lower, jnp.triu(lu[..., :k, :])


@rule(aten.linalg_lu.default, multi=True)
def lu_rule(A, *, pivot=True):
    _min_dims(A, "linalg.lu")
    d = _floating(aten.linalg_lu.default, A)
    if not pivot:
        raise NoLowering(aten.linalg_lu.default, "LU without pivoting")
    return _unpacked_types(A.shape, d, True, True)


@lowering(aten.linalg_lu.default)
def lower_lu(A, *, pivot=True):
    lu, piv, _ = _lu(A)
    return _unpack(lu, piv)


@rule(aten.lu_unpack.default, multi=True)
def lu_unpack_rule(LU, pivots, unpack_data=True, unpack_pivots=True):
    _min_dims(LU, "torch.lu_unpack")
    if unpack_pivots and pivots.dtype != torch.int32:
        raise RuntimeError("torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of "
                           "torch.int32 dtype.\nNote: this function is intended to be used "
                           "with the output produced by torch.linalg.lu_factor")
    d = _floating(aten.lu_unpack.default, LU)
    return _unpacked_types(LU.shape, d, unpack_data, unpack_pivots)


@lowering(aten.lu_unpack.default)
def lower_lu_unpack(LU, pivots, unpack_data=True, unpack_pivots=True):
    return _unpack(LU, pivots, unpack_data, unpack_pivots)


@rule(aten.linalg_lu_solve.default)
def lu_solve_rule(LU, pivots, B, *, left=True, adjoint=False):
    name = "linalg.lu_solve"
    d = _floating(aten.linalg_lu_solve.default, LU, "torch." + name)
    _same_dtype(LU, B, name + ": Expected LU and B to have the same dtype, but found LU of "
                              "type {} and B of type {} instead")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"{name}: pivots should be a Tensor of scalar type torch.int32")
    _square(LU, "torch." + name)
    _solver(LU, tuple(B.shape), left, name)
    if pivots.shape[-1:] != LU.shape[-1:]:
        raise RuntimeError(f"{name}: Number of pivots per batch should be same as the "
                           "dimension of the matrix")
    if tuple(pivots.shape) != tuple(LU.shape[:-1]):
        raise RuntimeError(f"{name}: Expected LU.shape[:-1] and pivots.shape to be the same, "
                           f"but got pivots with shape {list(pivots.shape)} instead")
    return _batch(B.shape, LU.shape) + tuple(B.shape[-2:]), d


@lowering(aten.linalg_lu_solve.default)
def lower_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    return _lu_solve(LU, pivots, B, left, adjoint)


@rule(aten.linalg_solve_triangular.default)
def solve_triangular_rule(A, B, *, upper, left=True, unitriangular=False):
    op = aten.linalg_solve_triangular.default
    _solver(A, tuple(B.shape), left, "linalg.solve_triangular")
    d = _floating(op, A)
    if B.dtype != d:
        raise NoLowering(op, "A and B of different dtypes")
    return _batch(B.shape, A.shape) + tuple(B.shape[-2:]), d


@lowering(aten.linalg_solve_triangular.default)
def lower_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    return _tri_solve(A, B, upper, left, unitriangular)


@rule(aten.triangular_solve.default, multi=True)
def triangular_solve_rule(B, A, upper=True, transpose=False, unitriangular=False):
    for t, arg in ((B, "b"), (A, "A")):
        if t.ndim < 2:
            raise RuntimeError(f"torch.triangular_solve: Expected {arg} to have at least 2 "
                               f"dimensions, but it has {t.ndim} dimensions instead")
    _legacy_solver(B, A, "triangular_solve")
    d = _floating(aten.triangular_solve.default, A)
    batch = _batch(B.shape, A.shape)
    return [(batch + tuple(B.shape[-2:]), d), (batch + tuple(A.shape[-2:]), d)]


@lowering(aten.triangular_solve.default)
def lower_triangular_solve(B, A, upper=True, transpose=False, unitriangular=False):
    """(X, A broadcast to the batch): the coefficient matrix is handed back, as by torch.
    ``transpose`` is A^T, not A^H, for complex A too (LAPACK's trtrs with 'T')."""
    if transpose and jnp.iscomplexobj(A):   # (conj(A)^H = A^T)
        x = _tri_solve(jnp.conj(A), B, upper, unit=unitriangular, transpose=True)
    else:
        x = _tri_solve(A, B, upper, unit=unitriangular, transpose=transpose)
    return x, jnp.broadcast_to(A, x.shape[:-2] + A.shape[-2:])


@rule(aten.cholesky_solve.default)
def cholesky_solve_rule(B, L, upper=False):
    for t, arg in ((B, "b"), (L, "u")):
        if t.ndim < 2:
            raise RuntimeError(f"{arg} should have at least 2 dimensions, but has {t.ndim} "
                               "dimensions instead")
    _legacy_solver(B, L, "cholesky_solve")
    d = _floating(aten.cholesky_solve.default, L)
    return _batch(B.shape, L.shape) + tuple(B.shape[-2:]), d


@lowering(aten.cholesky_solve.default)
def lower_cholesky_solve(B, L, upper=False):
    """A X = B with A = L L^H (= U^H U for ``upper``): two triangular solves."""
    y = _tri_solve(L, B, upper, transpose=upper)
    return _tri_solve(L, y, upper, transpose=not upper)


@rule(aten.linalg_pinv.atol_rtol_tensor)
def pinv_rule(A, *, atol=None, rtol=None, hermitian=False):
    if A.dtype not in _LOWERED + (torch.complex64, torch.complex128) or A.ndim < 2:
        raise RuntimeError(f"linalg.pinv({type_name(A.dtype)}{{{list(A.shape)}}}): expected a "
                           "tensor with 2 or more dimensions of float, double, cfloat or "
                           "cdouble types")
    d = _floating(aten.linalg_pinv.atol_rtol_tensor, A)
    batch = tuple(A.shape[:-2])
    for tol in (atol, rtol):  # per-matrix tolerances broadcast with the batch
        if tol is not None and A.numel() > 0:   # (torch returns an empty A's shape as is)
            batch = _batch(batch + (1, 1), tuple(tol.shape) + (1, 1))
    return batch + (A.shape[-1], A.shape[-2]), d


def _pinv_tol(atol, rtol, smax, dtype, m, n):
    """torch's cut-off: max(atol, rtol * the largest singular value), in float64; rtol
    defaults to eps * max(m, n), or to 0 where a positive atol is given."""
    f64 = jnp.float64
    default = jnp.asarray(jnp.finfo(dtype).eps * max(m, n), f64)
    a = jnp.zeros((), f64) if atol is None else atol.astype(f64)
    if rtol is None:
        rtol = default if atol is None else jnp.where(a > 0, 0.0, default)
    return jnp.maximum(a[..., None], rtol.astype(f64)[..., None] * smax)


@lowering(aten.linalg_pinv.atol_rtol_tensor)
def lower_pinv(A, *, atol=None, rtol=None, hermitian=False):
    """V diag(1/s) U^H over the singular values above the tolerance (eigenvalues by
    magnitude, for ``hermitian``), as torch computes it."""
    if A.size == 0:   # as torch: no tolerance broadcast (nor the max of no eigenvalue)
        return jnp.zeros(A.shape[:-2] + (A.shape[-1], A.shape[-2]), A.dtype)
    if hermitian:
        u, s = lapack.eigh(A, symmetrize_input=False)
        size, v, uh = jnp.abs(s), u, _mH(u)
        smax = jnp.max(size, axis=-1, keepdims=True)
    else:
        u, s, vh = lapack.svd(A, full_matrices=False)
        size, v, uh = s, _mH(vh), _mH(u)
        smax = s[..., :1]
    keep = size > _pinv_tol(atol, rtol, smax, A.dtype, *A.shape[-2:])
    s_inv = jnp.where(keep, 1 / s, 0).astype(A.dtype)
    return jnp.matmul(v * s_inv[..., None, :], uh, precision=HIGHEST)



# Lowerings above that are right for complex matrices too (conjugate transposes where
# LAPACK's complex routines take them; real singular values, eigenvalues and log|det|),
# each checked against torch in tests/runtime/test_complex.py (triangular_solve and the
# deprecated cholesky/cholesky_inverse: in ops/complex_ops.py, checked in
# test_complex_more.py). Still eager for complex: matrix_exp (its degree table is
# real-only), the Householder ops and lstsq (their LAPACK drivers' complex conventions are
# not replayed), ldl_solve (hermitian=False and True differ for complex: not replayed).
COMPLEX_OK.update([
    aten.linalg_inv_ex.default, aten._linalg_solve_ex.default, aten._linalg_det.default,
    aten._linalg_slogdet.default, lu_det, aten.linalg_lu_factor_ex.default,
    aten.linalg_lu.default, aten.lu_unpack.default, aten.linalg_lu_solve.default,
    aten.linalg_cholesky_ex.default, aten.linalg_qr.default, aten._linalg_svd.default,
    aten._linalg_eigh.default, aten.linalg_solve_triangular.default,
    aten.cholesky_solve.default, aten.linalg_pinv.atol_rtol_tensor,
])

# ---- matrix exponential ----------------------------------------------------------------
# torch's algorithm (Bader, Blanes & Casas 2019: Taylor polynomials of degree 1, 2, 4, 8, 12
# or 18, evaluated with few products, then scaling and squaring), so that the values agree
# to rounding, not only to the approximation's accuracy. A stack of more than one matrix
# uses degree 18 for every matrix; a single matrix picks its degree by its 1-norm.

_MEXP_THETAS = {
    torch.float32: (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
                    5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00),
    torch.float64: (2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
                    4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00),
}
_SQRT177 = 0.1330413469565007072504e+2
_X3 = 2. / 3.
# degree 8: A4 = A2 (x1 A + x2 A2); A8 = (x3 A2 + A4)(x4 I + x5 A + x6 A2 + x7 A4)
_T8 = (_X3 * ((1. + _SQRT177) / 88.), _X3 * ((1. + _SQRT177) / 352.), _X3,
       (-271. + 29. * _SQRT177) / (315. * _X3), (-11. + 11. * _SQRT177) / (1260. * _X3),
       (-99. + 11. * _SQRT177) / (5040. * _X3), (89. - _SQRT177) / (5040. * _X3),
       (857. - 58. * _SQRT177) / 630.)
# degrees 12 and 18: rows of coefficients of (I, A, A2, A3[, A6])
_T12 = ((9.0198e-16, 0.46932117595418237389, -0.20099424927047284052,
         -0.04623946134063071740),
        (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031,
         0.01108844528519167989),
        (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968,
         0.00610700528898058230),
        (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079,
         -0.00675951846863086359))
_T18 = ((0., -1.00365581030144618291e-01, -8.02924648241156932449e-03,
         -8.92138498045729985177e-04, 0.),
        (0., 3.97849749499645077844e-01, 1.36783778460411720168e+00,
         4.98289622525382669416e-01, -6.37898194594723280150e-04),
        (-1.09676396052962061844e+01, 1.68015813878906206114e+00,
         5.71779846478865511061e-02, -6.98210122488052056106e-03,
         3.34975017086070470649e-05),
        (-9.04316832390810593223e-02, -6.76404519071381882256e-02,
         6.75961301770459654925e-02, 2.95552570429315521194e-02,
         -1.39180257516060693404e-05),
        (0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
         -1.40086798182036094347e-05))


def _dot(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def _combine(mats, coeffs):
    """sum(c * m) in the order given (a zero coefficient still counts, as in torch)."""
    out = None
    for m, c in zip(mats, coeffs):
        t = m * jnp.asarray(c, m.dtype)
        out = t if out is None else out + t
    return out


def _powers(a, k):
    """The first ``k`` of I, A, A^2, A^3, A^6."""
    p = [_eye_like(a), a]
    if k > 2:
        p.append(_dot(a, a))
    if k > 3:
        p.append(_dot(a, p[2]))
    if k > 4:
        p.append(_dot(p[3], p[3]))
    return p[:k]


def _taylor(degree, a):
    if degree == 1:
        return a + _eye_like(a)
    if degree == 2:
        i, a1, a2 = _powers(a, 3)
        return i + a1 + a2 / 2
    if degree == 4:
        p = _powers(a, 3)
        return _combine(p + [_dot(p[2], _combine(p, (1 / 2., 1 / 6., 1 / 24.)))],
                        (1., 1., 0., 1.))
    if degree == 8:
        x1, x2, x3, x4, x5, x6, x7, y2 = _T8
        p = _powers(a, 3)
        a4 = _dot(p[2], _combine(p[1:], (x1, x2)))
        a8 = _dot(_combine([p[2], a4], (x3, 1.)), _combine(p + [a4], (x4, x5, x6, x7)))
        return _combine(p + [a4, a8], (1., 1., y2, 0., 1.))
    rows = _T12 if degree == 12 else _T18
    p = _powers(a, len(rows))
    b = [_combine(p, row) for row in rows]
    if degree == 12:
        b2 = b[2] + _dot(b[3], b[3])
        return b[0] + _dot(b[1] + b2, b2)
    b3 = b[3] + _dot(b[0], b[4])
    return b[1] + _dot(b[2] + b3, b3)


def _taylor18_squared(a, norm, theta):
    """Degree 18 on A / 2^s, squared s times, s = max(0, ceil(log2(|A|_1 / theta)))."""
    s = jnp.maximum(jnp.ceil(jnp.log2(norm / jnp.asarray(theta, a.dtype))), 0)
    e = _taylor(18, a * jnp.exp2(-s)[..., None, None])
    # an infinite norm would square forever (the result is inf/NaN after ~1100 anyway)
    s = jnp.where(jnp.isnan(s), 0, jnp.minimum(s, 2048)).astype(jnp.int32)

    def square(i, e):
        return jnp.where((i < s)[..., None, None], _dot(e, e), e)

    return jax.lax.fori_loop(0, jnp.max(s), square, e)


@rule(aten.linalg_matrix_exp.default)
def matrix_exp_rule(A):
    _square(A, "linalg.matrix_exp")
    return tuple(A.shape), _floating(aten.linalg_matrix_exp.default, A, "linalg.matrix_exp")


@lowering(aten.linalg_matrix_exp.default, ctx=True)
def lower_matrix_exp(ctx, A):
    n = A.shape[-1]
    if n <= 1 or A.size == 0:
        return jnp.exp(A)
    thetas = _MEXP_THETAS[ctx.dtype]
    a = A.reshape((-1, n, n))
    norm = jnp.max(jnp.sum(jnp.abs(a), -2), -1)
    if a.shape[0] != 1:
        return _taylor18_squared(a, norm, thetas[5]).reshape(A.shape)
    # one matrix: the lowest degree whose bound holds; degree 18 from the last bound up,
    # NaN where the norm is NaN (no branch taken in torch: its output stays NaN)
    bounds = jnp.asarray(thetas, a.dtype)
    nrm = norm[0]
    pick = jnp.where(nrm >= bounds[4], 5, jnp.sum(nrm > bounds[:5]).astype(jnp.int32))
    pick = jnp.where(jnp.isnan(nrm), 6, pick)
    branches = [functools.partial(_taylor, d) for d in (1, 2, 4, 8, 12)] + [
        lambda x: _taylor18_squared(x, norm, thetas[5]), lambda x: jnp.full_like(x, jnp.nan)]
    return jax.lax.switch(pick, branches, a).reshape(A.shape)


# ---- Householder reflectors: geqrf, householder_product (orgqr), ormqr ------------------
# LAPACK's compact QR (which JAX calls on CPU and cuSOLVER's on GPU): R above the diagonal
# of ``geqrf``'s first output, reflectors v_i = (0, .., 1, A[i+1:, i]) below it, and
# H_i = I - tau_i v_i v_i^T, as torch returns them.


def _geqrf(a):
    """LAPACK's geqrf (JAX's public spelling transposes the reflectors, as numpy does)."""
    h, taus = lapack.qr_raw(a)
    return _mT(h), taus


@rule(aten.geqrf.default, multi=True)
def geqrf_rule(A):
    if A.ndim < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    d = _floating(aten.geqrf.default, A)
    *batch, m, n = A.shape
    return [(tuple(A.shape), d), ((*batch, min(m, n)), d)]


@lowering(aten.geqrf.default)
def lower_geqrf(A):
    return _geqrf(A)


def _vector_tau(op, tau):
    if tau.ndim == 0:  # torch's error is an IndexError of its own
        raise NoLowering(op, "a 0-d tau")


def _reflector_checks(name, A, tau):
    if A.ndim - tau.ndim != 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but "
                           f"got tau.ndim equal to {tau.ndim} and input.ndim is equal to "
                           f"{A.ndim}")


def _same_batch(name, A, t, arg):
    if tuple(t.shape[:A.ndim - 2]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{name}: Expected batch dimensions of {arg} to be equal to "
                           f"input.shape[:-2], but got {list(t.shape[:A.ndim - 2])}")


@rule(aten.linalg_householder_product.default)
def householder_product_rule(A, tau):
    name = "torch.linalg.householder_product"
    if A.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    _vector_tau(aten.linalg_householder_product.default, tau)
    if A.shape[-1] < tau.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    _reflector_checks(name, A, tau)
    _same_batch(name, A, tau, "tau")
    _same_dtype(tau, A, name + ": tau dtype {} does not match input dtype {}")
    return tuple(A.shape), _floating(aten.linalg_householder_product.default, A)


@lowering(aten.linalg_householder_product.default)
def lower_householder_product(A, tau):
    return lapack.householder_product(A, tau)


@rule(aten.ormqr.default)
def ormqr_rule(A, tau, C, left=True, transpose=False):
    name = "torch.ormqr"
    if A.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if C.ndim < 2:
        raise RuntimeError(f"{name}: other must have at least 2 dimensions.")
    k = -2 if left else -1
    if C.shape[k] != A.shape[-2]:
        raise RuntimeError(f"{name}: other.shape[{k}] must be equal to input.shape[-2]")
    _vector_tau(aten.ormqr.default, tau)
    if tau.shape[-1] != min(C.shape[k], A.shape[-1]):
        raise RuntimeError(f"{name}: tau.shape[-1] must be equal to min(other.shape[{k}], "
                           "input.shape[-1])")
    _reflector_checks(name, A, tau)
    if C.ndim != A.ndim:
        raise RuntimeError(f"{name}: Expected other to have the same number of dimensions as "
                           f"input, but got other.ndim equal to {C.ndim} and input.ndim is "
                           f"equal to {A.ndim}")
    _same_batch(name, A, tau, "tau")
    _same_batch(name, A, C, "other")
    _same_dtype(A, C, name + ": Expected input and other to have the same dtype, but input "
                             "has dtype{} and other has dtype {}")
    _same_dtype(A, tau, name + ": Expected input and tau to have the same dtype, but input "
                               "has dtype{} and tau has dtype {}")
    return tuple(C.shape), _floating(aten.ormqr.default, A)


@lowering(aten.ormqr.default)
def lower_ormqr(A, tau, C, left=True, transpose=False):
    return lapack.ormqr(A, tau, C, left=left, transpose=transpose)


# ---- least squares (linalg_lstsq) ------------------------------------------------------
# Each LAPACK driver as torch calls it on the CPU, outputs included: gelsy (the default:
# QR, rank by incremental condition estimation, then the minimum-norm solution of the
# leading rank rows; see ``_gelsy`` on pivoting), gels (QR or LQ, no rank: full rank
# assumed; residuals for m > n), gelsd/gelss (SVD: singular values, rank above a cut-off).
# LAPACK's scaling of A and B into a safe range is repeated, so that ranks are decided on
# the same numbers. gelsd/gelss with m > n return residuals only when every matrix has full
# rank: an output whose shape depends on the values, so torch computes them. The gradient
# is torch's formula (through pinv), whatever the driver.

_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lamch(dtype):
    """LAPACK's machine constants: (rounding epsilon, safe minimum, small and big norms
    between which A and B are not scaled)."""
    fi = jnp.finfo(dtype)
    small = float(fi.tiny) / float(fi.eps)
    return float(fi.eps) / 2, float(fi.tiny), small, 1 / small


def _scale_into_range(x, dtype):
    """(x scaled as by LAPACK's drivers, the factor): a max-norm below SMLNUM or above
    BIGNUM is brought to that bound."""
    _, _, small, big = _lamch(dtype)
    nrm = jnp.max(jnp.abs(x), axis=(-2, -1), keepdims=True)
    f = jnp.where((nrm > 0) & (nrm < small), small / nrm, jnp.where(nrm > big, big / nrm, 1))
    return x * f.astype(x.dtype), f.astype(x.dtype)


def _sign(x):
    """Fortran's SIGN(1, x)."""
    return jnp.copysign(jnp.ones_like(x), x)


def _negligible_sest_ratios(aa, ag, one):
    """dlaic1's quantities where |sest| is negligible (both jobs): which of |alpha| and
    |gamma| is larger, both made safe to divide by, and the ratios and norms of each."""
    le = ag <= aa
    aa_, ag_ = jnp.where(aa == 0, one, aa), jnp.where(ag == 0, one, ag)
    r1 = ag / aa_
    r2 = aa / ag_
    return le, aa_, ag_, r1, jnp.sqrt(one + r1 * r1), r2, jnp.sqrt(one + r2 * r2)


def _laic1_max(alpha, gamma, sest, eps):
    """LAPACK's dlaic1, job 1: the largest singular value of [[x^T w-block], ...] grown by
    one column (w, gamma) from estimate ``sest`` (alpha = x . w): (sestpr, s, c)."""
    aa, ag, ae = jnp.abs(alpha), jnp.abs(gamma), jnp.abs(sest)
    one, zero = jnp.ones_like(alpha), jnp.zeros_like(alpha)
    # sest == 0
    s1 = jnp.maximum(ag, aa)
    s1_ = jnp.where(s1 == 0, one, s1)
    sa, ca = alpha / s1_, gamma / s1_
    tmp = jnp.sqrt(sa * sa + ca * ca)
    tmp_ = jnp.where(s1 == 0, one, tmp)
    a_out = (jnp.where(s1 == 0, zero, s1 * tmp), jnp.where(s1 == 0, zero, sa / tmp_),
             jnp.where(s1 == 0, one, ca / tmp_))
    # |gamma| <= eps |sest|
    t = jnp.maximum(ae, aa)
    t_ = jnp.where(t == 0, one, t)
    b_out = (t * jnp.sqrt((ae / t_) ** 2 + (aa / t_) ** 2), one, zero)
    # |alpha| <= eps |sest|
    c_out = (jnp.where(ag <= ae, ae, ag), jnp.where(ag <= ae, one, zero),
             jnp.where(ag <= ae, zero, one))
    # |sest| negligible
    le, aa_, ag_, r1, d1, r2, d2 = _negligible_sest_ratios(aa, ag, one)
    d_out = (jnp.where(le, aa * d1, ag * d2),
             jnp.where(le, _sign(alpha) / d1, (alpha / ag_) / d2),
             jnp.where(le, (gamma / aa_) / d1, _sign(gamma) / d2))
    # the general case
    ae_ = jnp.where(ae == 0, one, ae)
    z1, z2 = alpha / ae_, gamma / ae_
    b = (one - z1 * z1 - z2 * z2) * 0.5
    c = z1 * z1
    root = jnp.sqrt(b * b + c)
    t = jnp.where(b > 0, c / jnp.where(b > 0, b + root, one), root - b)
    t_ = jnp.where(t == 0, one, t)
    sine, cosine = -z1 / t_, -z2 / (one + t)
    tmp = jnp.sqrt(sine * sine + cosine * cosine)
    tmp = jnp.where(tmp == 0, one, tmp)
    e_out = (jnp.sqrt(t + one) * ae, sine / tmp, cosine / tmp)
    return _laic1_select(sest, aa, ag, ae, eps, a_out, b_out, c_out, d_out, e_out)


def _laic1_min(alpha, gamma, sest, eps):
    """LAPACK's dlaic1, job 2: the estimate of the smallest singular value."""
    aa, ag, ae = jnp.abs(alpha), jnp.abs(gamma), jnp.abs(sest)
    one, zero = jnp.ones_like(alpha), jnp.zeros_like(alpha)
    # sest == 0
    both0 = jnp.maximum(ag, aa) == 0
    sine, cosine = jnp.where(both0, one, -gamma), jnp.where(both0, zero, alpha)
    s1 = jnp.maximum(jnp.abs(sine), jnp.abs(cosine))
    sa, ca = sine / s1, cosine / s1
    tmp = jnp.sqrt(sa * sa + ca * ca)
    a_out = (zero, sa / tmp, ca / tmp)
    # |gamma| <= eps |sest|
    b_out = (ag, zero, one)
    # |alpha| <= eps |sest|
    c_out = (jnp.where(ag <= ae, ag, ae), jnp.where(ag <= ae, zero, one),
             jnp.where(ag <= ae, one, zero))
    # |sest| negligible
    le, aa_, ag_, r1, d1, r2, d2 = _negligible_sest_ratios(aa, ag, one)
    d_out = (jnp.where(le, ae * (r1 / d1), ae / d2),
             jnp.where(le, -(gamma / aa_) / d1, -_sign(gamma) / d2),
             jnp.where(le, _sign(alpha) / d1, (alpha / ag_) / d2))
    # the general case: is the root closer to zero or to one?
    ae_ = jnp.where(ae == 0, one, ae)
    z1, z2 = alpha / ae_, gamma / ae_
    norma = jnp.maximum(one + z1 * z1 + jnp.abs(z1 * z2), jnp.abs(z1 * z2) + z2 * z2)
    near0 = one + 2 * (z1 - z2) * (z1 + z2) >= 0
    b0 = (z1 * z1 + z2 * z2 + one) * 0.5
    c0 = z2 * z2
    t0 = c0 / (b0 + jnp.sqrt(jnp.abs(b0 * b0 - c0)))
    t0_ = jnp.where(t0 == 0, one, t0)
    b1 = (z2 * z2 + z1 * z1 - one) * 0.5
    c1 = z1 * z1
    root1 = jnp.sqrt(b1 * b1 + c1)
    t1 = jnp.where(b1 >= 0, -c1 / jnp.where(b1 >= 0, b1 + root1, one), b1 - root1)
    t1_ = jnp.where(t1 == 0, one, t1)
    tiny = 4 * eps * eps * norma
    sine = jnp.where(near0, z1 / (one - t0), -z1 / t1_)
    cosine = jnp.where(near0, -z2 / t0_, -z2 / (one + t1))
    est = jnp.where(near0, jnp.sqrt(t0 + tiny), jnp.sqrt(one + t1 + tiny)) * ae
    tmp = jnp.sqrt(sine * sine + cosine * cosine)
    tmp = jnp.where(tmp == 0, one, tmp)
    e_out = (est, sine / tmp, cosine / tmp)
    return _laic1_select(sest, aa, ag, ae, eps, a_out, b_out, c_out, d_out, e_out)


def _laic1_select(sest, aa, ag, ae, eps, *outs):
    """dlaic1's cases, in its order: sest = 0, gamma negligible, alpha negligible, sest
    negligible, the general case."""
    conds = (sest == 0, ag <= eps * ae, aa <= eps * ae, (ae <= eps * aa) | (ae <= eps * ag))
    res = outs[-1]
    for cond, out in reversed(list(zip(conds, outs[:-1]))):
        res = tuple(jnp.where(cond, o, r) for o, r in zip(out, res))
    return res


def _gelsy_rank(r, rcond):
    """dgelsy's rank of one matrix from its QR's R (the upper triangle of ``r``):
    columns are added while the estimated condition number of R[:k, :k] stays below
    1/rcond."""
    mn = min(r.shape)
    eps = jnp.asarray(_lamch(r.dtype)[0], r.dtype)
    rcond = jnp.asarray(rcond, r.dtype)
    rows = jnp.arange(mn)
    first = jnp.where(rows == 0, 1, 0).astype(r.dtype)
    smax = jnp.abs(r[0, 0])

    def step(i, state):
        xmin, xmax, smin, smax, rank, going = state
        w = jnp.where(rows < i, r[:mn, i], 0)
        gamma = r[i, i]
        smin_new, s1, c1 = _laic1_min(jnp.dot(xmin, w, precision=HIGHEST), gamma, smin, eps)
        smax_new, s2, c2 = _laic1_max(jnp.dot(xmax, w, precision=HIGHEST), gamma, smax, eps)
        take = going & (smax_new * rcond <= smin_new)
        xmin = jnp.where(take, jnp.where(rows == i, c1, s1 * xmin), xmin)
        xmax = jnp.where(take, jnp.where(rows == i, c2, s2 * xmax), xmax)
        return (xmin, xmax, jnp.where(take, smin_new, smin), jnp.where(take, smax_new, smax),
                rank + take.astype(jnp.int32), take)

    state = (first, first, smax, smax, jnp.int32(1), smax != 0)
    rank = jax.lax.fori_loop(1, mn, step, state)[4]
    return jnp.where(smax == 0, 0, rank)


def _batched(f, x, *rest):
    """``f`` of one matrix mapped over the batch dims of ``x``."""
    batch = x.shape[:-2]
    flat = x.reshape((-1,) + x.shape[-2:])
    out = jax.vmap(lambda m: f(m, *rest))(flat)
    return out.reshape(batch + out.shape[1:])


def _gelsy(a, b, rcond):
    """(solution (*, n, k), rank): A = Q R; rank from R; x = the minimum-norm solution of
    R[:rank] x = (Q^T b)[:rank]. No column pivoting: torch hands dgelsy an uninitialized
    ``jpvt``, which fixes every column whose entry is not 0 (always so from the second
    matrix of a batch on, holding the first one's permutation; mostly so for the first);
    the two agree wherever the rank is clear."""
    m, n = a.shape[-2:]
    k = min(m, n)
    a, fa = _scale_into_range(a, a.dtype)
    qr, taus = _geqrf(a)
    rank = _batched(_gelsy_rank, qr, rcond)
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    qr, taus, fa, r = (jnp.broadcast_to(x, batch + x.shape[len(a.shape) - 2:])
                       for x in (qr, taus, fa, rank))
    b, fb = _scale_into_range(jnp.broadcast_to(b, batch + b.shape[-2:]), a.dtype)
    c = lapack.ormqr(qr, taus, b, left=True, transpose=True)[..., :k, :]
    keep = jnp.arange(k) < r[..., None]                         # the leading rank rows
    rows = jnp.where(keep[..., None], jnp.triu(qr[..., :k, :]), 0)
    # the minimum-norm x of rows x = c: rows^T = U T, x = U T^{-T} c (T's trailing block,
    # all zero, replaced by I so that its part of the solution is 0)
    u, t = lapack.qr(_mT(rows), full_matrices=False)
    both = keep[..., :, None] & keep[..., None, :]
    t = jnp.where(both, t, jnp.eye(k, dtype=t.dtype))
    y = lapack.triangular_solve(t, jnp.where(keep[..., None], c, 0), left_side=True,
                                lower=False, transpose_a=True)
    return _dot(u, y) * (fa / fb), rank


def _gels(a, b):
    """(solution, raw residual rows (Q^T b)[n:]): QR for m >= n, LQ (a QR of A^T) else.
    As in dgels, the residual rows stay in B's scaled units and an A of zeros has the
    solution 0 and residuals 0."""
    m, n = a.shape[-2:]
    a, fa = _scale_into_range(a, a.dtype)
    b, fb = _scale_into_range(b, a.dtype)
    a, b = _broadcast(a, b)
    zero = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True) == 0
    if m >= n:
        qr, taus = _geqrf(a)
        c = lapack.ormqr(qr, taus, b, left=True, transpose=True)
        x = _tri_solve(jnp.triu(qr[..., :n, :]), c[..., :n, :], True)
        rest = c[..., n:, :]
    else:
        qr, taus = _geqrf(_mT(a))                     # A = R^T Q^T
        y = _tri_solve(jnp.triu(qr[..., :m, :]), b, True, transpose=True)
        y = jnp.concatenate([y, jnp.zeros(y.shape[:-2] + (n - m, y.shape[-1]), y.dtype)], -2)
        x = lapack.ormqr(qr, taus, y, left=True, transpose=False)
        rest = b[..., :0, :]
    return jnp.where(zero, 0, x * (fa / fb)), jnp.where(zero, 0, rest)


def _svd_lstsq(a, b, rcond, driver):
    """gelsd/gelss for m <= n: (solution, rank, singular values); singular values at or
    below the cut-off count as zero."""
    eps, sfmin, _, _ = _lamch(a.dtype)
    a, fa = _scale_into_range(a, a.dtype)
    u, s, vh = lapack.svd(a, full_matrices=False)
    if driver == "gelsd":
        rc = eps if rcond <= 0 or rcond >= 1 else rcond
        cut = jnp.asarray(rc, a.dtype) * jnp.max(s, axis=-1, keepdims=True)
    else:
        rc = eps if rcond < 0 else rcond
        cut = jnp.maximum(jnp.asarray(rc, a.dtype) * s[..., :1], jnp.asarray(sfmin, a.dtype))
    keep = s > cut
    rank = jnp.sum(keep, axis=-1).astype(jnp.int64)
    b, fb = _scale_into_range(b, a.dtype)
    inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(a.dtype)
    x = _dot(_mT(vh) * inv[..., None, :], _dot(_mT(u), b))
    return x * (fa / fb), rank, s / fa[..., 0]


def _lstsq_args(a, b, rcond, driver, eps):
    """(driver, rcond, vector rhs, B's matrix shape) from shapes (a rule's and a lowering's
    arguments alike)."""
    drv = "gelsy" if driver is None else driver.lower()
    vector = _vector_rhs(a, b)
    m, n = a[-2:]
    return (drv, eps * max(m, n) if rcond is None else rcond, vector,
            tuple(b) + (1,) if vector else tuple(b))


@rule(aten.linalg_lstsq.default, multi=True)
def lstsq_rule(A, B, rcond=None, *, driver=None):
    op = aten.linalg_lstsq.default
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if B.ndim < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if A.dtype != B.dtype:
        raise RuntimeError("torch.linalg.lstsq: Expected input and other to have the same "
                           f"dtype, but got input's dtype {type_name(A.dtype)} and other's "
                           f"dtype {type_name(B.dtype)}")
    if not 0 <= A.ndim - B.ndim <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to "
                           "other.dim() and (input.dim() - other.dim()) <= 1")
    d = _floating(op, A)
    drv, _, vector, b = _lstsq_args(A.shape, B.shape, rcond, driver, 0.0)
    if drv not in _LSTSQ_DRIVERS:
        raise NoLowering(op, f"driver={driver!r}: torch raises its error")
    if A.ndim != B.ndim and not vector:
        raise NoLowering(op, "a matrix B with fewer dims than A (torch's own batch rule)")
    if A.shape[-2] != b[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    *batch_a, m, n = A.shape
    if m == 0 or n == 0 or b[-1] == 0:
        raise NoLowering(op, "an empty matrix")
    if drv in ("gelsd", "gelss") and m > n:
        raise NoLowering(op, f"{drv} with m > n: the residuals' shape depends on the ranks")
    if config.check_linalg_errors:
        raise NoLowering(op, "it checks info itself")
    batch = _batch(b, A.shape)
    x = batch + ((n,) if vector else (n, b[-1]))
    residuals = batch + (b[-1],) if drv == "gels" and m > n else (0,)
    rank = (0,) if drv == "gels" else tuple(batch_a)
    s = (*batch_a, min(m, n)) if drv in ("gelsd", "gelss") else (0,)
    return [(x, d), (residuals, d), (rank, torch.int64), (s, d)]


@lowering(aten.linalg_lstsq.default)
def lower_lstsq(A, B, rcond=None, *, driver=None):
    drv, rc, vector, _ = _lstsq_args(A.shape, B.shape, rcond, driver,
                                     float(jnp.finfo(A.dtype).eps))
    b = B[..., None] if vector else B
    m, n = A.shape[-2:]
    empty = _empty(A.dtype)
    residuals, rank, s = empty, jnp.zeros((0,), jnp.int64), empty
    if drv == "gelsy":
        x, rank = _gelsy(A, b, rc)
        rank = rank.astype(jnp.int64)
    elif drv == "gels":
        x, rest = _gels(A, b)
        if m > n:
            residuals = jnp.sum(rest * rest, axis=-2)
    else:
        x, rank, s = _svd_lstsq(A, b, rc, drv)
    return (x[..., 0] if vector else x), residuals, rank, s


# ---- LDL^T (Bunch-Kaufman) ---------------------------------------------------------------
# ldl_factor (LAPACK's sytrf) is not lowered: a JAX replay of dsytf2's pivoting matched
# torch's LD and pivots on random matrices but not on some with exact ties between
# candidate pivots (small-integer matrices), where which of two equal magnitudes wins
# depends on MKL's rounding. ldl_solve is lowered: given LD and pivots it is dsytrs's
# sequence of interchanges, eliminations and 1x1/2x2 diagonal solves.


def _sytrs_lower(ld, piv, b):
    """dsytrs (lower) for one matrix: solve with A = L D L^T as sytrf stores it."""
    n = ld.shape[-1]
    idx = jnp.arange(n)

    def swap(b, i, j):
        p = jnp.where(idx == i, j, jnp.where(idx == j, i, idx))
        return b[p]

    def forward(state):  # L D X = B, k increasing
        b, k = state
        p = piv[k]
        two = p < 0
        kp = jnp.where(two, -p, p) - 1
        b = swap(b, jnp.where(two, k + 1, k), kp)
        k1 = jnp.minimum(k + 1, n - 1)
        bk, bk1 = b[k], b[k1]
        # one: eliminate column k, then divide by D(k)
        b1 = b - jnp.where(idx > k, ld[:, k], 0)[:, None] * bk[None, :]
        b1 = jnp.where((idx == k)[:, None], b1 * (1 / ld[k, k]), b1)
        # two: eliminate columns k and k+1, then solve with the 2x2 block
        below = (idx > k1)[:, None]
        b2 = b - jnp.where(below, ld[:, k][:, None] * bk[None, :], 0)
        b2 = b2 - jnp.where(below, ld[:, k1][:, None] * bk1[None, :], 0)
        akm1k = ld[k1, k]
        akm1, ak = ld[k, k] / akm1k, ld[k1, k1] / akm1k
        denom = akm1 * ak - 1
        bkm1, bk_ = bk / akm1k, bk1 / akm1k
        b2 = jnp.where((idx == k)[:, None], ((ak * bkm1 - bk_) / denom)[None, :], b2)
        b2 = jnp.where((idx == k1)[:, None], ((akm1 * bk_ - bkm1) / denom)[None, :], b2)
        return jnp.where(two, b2, b1), k + jnp.where(two, 2, 1)

    def backward(state):  # L^T X = B, k decreasing
        b, k = state
        p = piv[k]
        two = p < 0
        below = idx > k
        tail = jnp.where(below[:, None], b, 0)
        b = b.at[k].add(-_dot(jnp.where(below, ld[:, k], 0), tail))
        km1 = jnp.maximum(k - 1, 0)
        b = jnp.where(two & (idx == km1)[:, None],
                      b - _dot(jnp.where(below, ld[:, km1], 0), tail)[None, :], b)
        b = swap(b, k, jnp.where(two, -p, p) - 1)
        return b, k - jnp.where(two, 2, 1)

    b, _ = jax.lax.while_loop(lambda s: s[1] < n, forward, (b, 0))
    b, _ = jax.lax.while_loop(lambda s: s[1] >= 0, backward, (b, n - 1))
    return b


@rule(aten.linalg_ldl_solve.default)
def ldl_solve_rule(LD, pivots, B, *, hermitian=False):
    op, name = aten.linalg_ldl_solve.default, "torch.linalg.ldl_solve"
    _square(LD, name)
    if B.ndim < 2:  # torch's error is an IndexError of its own
        raise NoLowering(op, "a 1-d B")
    d = _floating(op, LD, name)
    _legacy_solver(B, LD, name)
    if tuple(pivots.shape) != tuple(LD.shape[:-1]):
        raise RuntimeError(f"{name}: Expected LD.shape[:-1] and pivots.shape to be the same, "
                           f"but got pivots with shape {list(pivots.shape)} instead")
    if pivots.dtype.is_floating_point or pivots.dtype.is_complex:
        raise NoLowering(op, f"{pivots.dtype} pivots")
    lb, bb = tuple(LD.shape[:-2]), tuple(B.shape[:-2])
    if lb and bb and lb != bb:  # torch's kernel does not broadcast these (it crashes)
        raise NoLowering(op, "batch dims of LD and B that need broadcasting")
    return (lb or bb) + tuple(B.shape[-2:]), d


@lowering(aten.linalg_ldl_solve.default)
def lower_ldl_solve(LD, pivots, B, *, hermitian=False):
    """For real matrices, hermitian or not is the same factorization."""
    batch = LD.shape[:-2] or B.shape[:-2]
    n = LD.shape[-1]
    if n == 0 or B.size == 0:
        return jnp.broadcast_to(B, batch + B.shape[-2:])
    ld = jnp.broadcast_to(LD, batch + LD.shape[-2:]).reshape((-1, n, n))
    piv = jnp.broadcast_to(pivots, batch + (n,)).reshape((-1, n)).astype(jnp.int32)
    b = jnp.broadcast_to(B, batch + B.shape[-2:]).reshape((-1,) + B.shape[-2:])
    return jax.vmap(_sytrs_lower)(ld, piv, b).reshape(batch + B.shape[-2:])
