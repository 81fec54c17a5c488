"""Matrix products, then torch.linalg's factorizations and solvers.

Products: shapes from ``shape_fns.matmul_shape``; JAX matmuls at full precision,
accumulating half types in float32 as torch does. Factorizations: see their section.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax.lax import linalg as lax_linalg

from ..config import config
from ..errors import NoLowering
from .common import HIGHEST, jdt, opmath, sf, type_name
from .registry import decomposition, lowering, rule

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


@rule(aten.mm.default)
def mm_rule(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError("mm: both arguments must be 2D")
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("mm", a, b)


@rule(aten.bmm.default)
def bmm_rule(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError("bmm: both arguments must be 3D")
    sf.require_equal(a.shape[0], b.shape[0], "SI130", "bmm batch sizes")
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("bmm", a, b)


@rule(aten.mv.default, aten.dot.default)
def mv_rule(a, b):
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("mv", a, b)


@lowering(aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default, ctx=True)
def lower_mm(ctx, a, b):
    return _mm(a, b, ctx.dtype)


@rule(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def addmm_rule(x, a, b, *, beta=1, alpha=1):
    out = sf.matmul_shape(tuple(a.shape), tuple(b.shape))
    sf.broadcast_shapes(tuple(x.shape), out)
    return out, _check_dtypes("addmm", x, a, b)


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, ctx=True)
def lower_addmm(ctx, x, a, b, *, beta=1, alpha=1):
    p = _mm(a, b, ctx.dtype)
    if alpha != 1:
        p = p * alpha
    if beta == 0:
        return p
    return p + (x if beta == 1 else x * beta).astype(p.dtype)


# ---- factorizations and solvers (torch.linalg) -----------------------------------------
# float32/float64 are lowered; integer inputs raise torch's error where torch checks the
# dtype itself, other dtypes (half types, complex) run eagerly and torch decides.
# LU factors and pivots are LAPACK's (getrf: partial pivoting, 1-based int32 pivots), as
# the backward formulas hand them back to ``linalg_lu_solve``/``lu_unpack``. ``info``
# outputs follow LAPACK too: computed on the device, read only by ``check_errors``.

_LOWERED = (torch.float32, torch.float64)


def _floating(op, A, name=None, low_precision=True):
    """A's dtype where it is lowered. With ``name``, torch's own check of the op first:
    integers (and, without ``low_precision``, half types) raise its message."""
    d = A.dtype
    if d in _LOWERED:
        return d
    if name is not None and not (d.is_floating_point or d.is_complex):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. "
                           f"Got {type_name(d)}")
    if name is not None and not low_precision and not d.is_complex:
        raise RuntimeError(f"{name}: Low precision dtypes not supported. Got {type_name(d)}")
    raise NoLowering(op, f"{d} (float32 and float64 are lowered)")


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
    x, y = tuple(a[:-2]), tuple(b[:-2])
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q and 1 not in (p, q):
            raise RuntimeError(f"The size of tensor a ({p}) must match the size of tensor b "
                               f"({q}) at non-singleton dimension {i}")
    return tuple(q if p == 1 else p for p, q in zip(x, y))


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


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
    lu, piv, _ = lax_linalg.lu(a)
    return lu, piv + 1, _first_true(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0)


def _tri_solve(a, b, upper, left=True, unit=False, transpose=False):
    """``op(a) X = b`` (``X op(a) = b`` unless ``left``) with ``a`` triangular."""
    a, b = _broadcast(a, b)
    return lax_linalg.triangular_solve(a, b, left_side=left, lower=not upper,
                                       transpose_a=transpose, unit_diagonal=unit)


def _lu_solve(lu, piv, b, left=True, adjoint=False):
    """``A X = b`` from getrf's ``P A = L U`` (torch's pivots); ``adjoint`` solves with
    ``A^T``, ``left=False`` solves ``X A = b``."""
    if not left:  # X A = b  <=>  A^T X^T = b^T
        return _mT(_lu_solve(lu, piv, _mT(b), True, not adjoint))
    lu, b = _broadcast(lu, b)
    n = lu.shape[-1]
    perm = lax_linalg.lu_pivots_to_permutation(piv - 1, n)
    perm = jnp.broadcast_to(perm, lu.shape[:-1])[..., None]  # A[perm] = L U
    if not adjoint:
        y = _tri_solve(lu, jnp.take_along_axis(b, perm, axis=-2), False, unit=True)
        return _tri_solve(lu, y, True)
    y = _tri_solve(lu, b, True, transpose=True)  # U^T L^T (P X) = b
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


def _first_bad_pivot(a):
    """1 + the first step of symmetric Gaussian elimination whose pivot is not > 0 (NaN
    included, as in potrf), 0 if none."""
    n = a.shape[-1]
    a = jnp.tril(a) + _mT(jnp.tril(a, -1))
    rows = jnp.arange(n)

    def step(k, carry):
        a, pivots = carry
        p = a[..., k, k]
        c = jnp.where(rows > k, a[..., :, k], 0)
        a = a - c[..., :, None] * c[..., None, :] / p[..., None, None]
        return a, pivots.at[..., k].set(p)

    _, pivots = jax.lax.fori_loop(0, n, step, (a, jnp.zeros(a.shape[:-1], a.dtype)))
    return _first_true(~(pivots > 0))


@rule(aten.linalg_cholesky_ex.default, multi=True)
def cholesky_ex_rule(A, *, upper=False, check_errors=False):
    _square(A, "linalg.cholesky")
    d = _floating(aten.linalg_cholesky_ex.default, A, "linalg.cholesky")
    _no_check(aten.linalg_cholesky_ex.default, check_errors)
    return [(tuple(A.shape), d), (tuple(A.shape[:-2]), torch.int32)]


@lowering(aten.linalg_cholesky_ex.default)
def lower_cholesky_ex(A, *, upper=False, check_errors=False):
    """torch reads the lower triangle, or the upper one for ``upper`` (then A = U^T U)."""
    a = _mT(A) if upper else A
    l = lax_linalg.cholesky(a, symmetrize_input=False)
    return (_mT(l) if upper else l), _potrf_info(a, l)


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
    q, r = lax_linalg.qr(A, full_matrices=mode == "complete")
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
    s = ((*batch, k), d)
    if not compute_uv:
        return [((0,), d), s, ((0,), d)]
    return [((*batch, m, m if full_matrices else k), d), s,
            ((*batch, n if full_matrices else k, n), d)]


@lowering(aten._linalg_svd.default)
def lower_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    """Singular vectors are unique up to sign (per pair, for distinct singular values);
    JAX's signs may differ from torch's, as they do between torch's own CPU and CUDA."""
    if not compute_uv:
        return _empty(A.dtype), lax_linalg.svd(A, compute_uv=False), _empty(A.dtype)
    return tuple(lax_linalg.svd(A, full_matrices=full_matrices))


@rule(aten._linalg_eigh.default, multi=True)
def eigh_rule(A, UPLO="L", compute_v=True):
    _square(A, "linalg.eigh")
    if len(UPLO) != 1 or UPLO.upper() not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    d = _floating(aten._linalg_eigh.default, A)
    return [(tuple(A.shape[:-1]), d), (tuple(A.shape) if compute_v else (0,), d)]


@lowering(aten._linalg_eigh.default)
def lower_eigh(A, UPLO="L", compute_v=True):
    """Ascending eigenvalues, as torch; eigenvectors are unique up to sign (for distinct
    eigenvalues). Only the ``UPLO`` triangle is read, as by LAPACK's syevd."""
    v, w = lax_linalg.eigh(A, lower=UPLO.upper() == "L", symmetrize_input=False)
    return w, (v if compute_v else _empty(A.dtype))


# det and slogdet: torch factors A^T when A is contiguous (A otherwise), and their
# backward reads that choice back from ``A.is_contiguous()`` to solve with the LU. A
# lowering cannot see strides, so the aten ops decompose into ``lu_det``, which takes the
# choice as an argument.
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
    return [(batch, A.dtype)] * 3 + [(tuple(A.shape), A.dtype),
                                     (tuple(A.shape[:-1]), torch.int32)]


@lowering(lu_det)
def lower_lu_det(A, transposed):
    lu, piv, _ = _lu(_mT(A) if transposed else A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    swaps = jnp.sum(piv != jnp.arange(1, A.shape[-1] + 1, dtype=piv.dtype), axis=-1)
    parity = (1 - 2 * (swaps % 2)).astype(A.dtype)
    return (parity * jnp.prod(diag, axis=-1), parity * jnp.prod(jnp.sign(diag), axis=-1),
            jnp.sum(jnp.log(jnp.abs(diag)), axis=-1), lu, piv)


def _det_input(op, A, name, low_precision):
    _square(A, name)
    _floating(op, A, name, low_precision)
    return A.is_contiguous()


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
    """(X, A broadcast to the batch): the coefficient matrix is handed back, as by torch."""
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
    """A X = B with A = L L^T (= U^T U for ``upper``): two triangular solves."""
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
        if tol is not None:
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
    """V diag(1/s) U^T over the singular values above the tolerance (eigenvalues by
    magnitude, for ``hermitian``), as torch computes it."""
    if hermitian:
        u, s = lax_linalg.eigh(A, symmetrize_input=False)
        size, v, uh = jnp.abs(s), u, _mT(u)
        smax = jnp.max(size, axis=-1, keepdims=True)
    else:
        u, s, vh = lax_linalg.svd(A, full_matrices=False)
        size, v, uh = s, _mT(vh), _mT(u)
        smax = s[..., :1]
    keep = size > _pinv_tol(atol, rtol, smax, A.dtype, *A.shape[-2:])
    s_inv = jnp.where(keep, 1 / s, 0).astype(A.dtype)
    return jnp.matmul(v * s_inv[..., None, :], uh, precision=HIGHEST)
