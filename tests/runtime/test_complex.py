"""Complex tensors and the FFT against eager torch: every op in ``COMPLEX_OK`` has a case
(values, and gradients where torch defines them), recorded lazily and computed by one
barrier. Then: views between complex and real written through in place, ops without a
checked complex lowering running eagerly (and giving torch's results or errors), and a
small spectral model (FFT, complex weights, Adam) training as in eager torch."""

import importlib

import pytest
import torch

import lazy_runtime as lr
import torch.nn.functional as F
from lazy_runtime.training import train_steps
from conftest import DEV, assert_same
from lazy_runtime.ops import linalg
from lazy_runtime.ops.registry import COMPLEX_OK
from test_lowerings_linalg import _not_positive_definite
from lowering_harness import (BOOL, C64, C128, F32, F64, I64, Case, check_backward,
                              lowering_tests, rnd, run_all, shape)

pytestmark = pytest.mark.filterwarnings("ignore:Casting complex values to real discards")
aten = torch.ops.aten
CASES: list = []
COVERS: dict = {}   # case name -> the ATen ops it is there to check


def case(name, fn, make, ops=(), **kw):
    CASES.append(Case(name, fn, make, **kw))
    COVERS[name] = ops


def one(dtype, lo=-3, hi=3):
    return lambda g, r: [rnd(g, shape(r, 2, 1, 5), dtype, lo, hi)]


def two(dtype, other=None):
    def make(g, r):
        s = shape(r, 2, 1, 5)
        return [rnd(g, s, dtype), rnd(g, s, other or dtype)]
    return make


def _write_views(a, b):
    """Writes through slices, selects, diagonals and as_strided views of complex tensors,
    and through the real view of a complex one."""
    a = a * 1
    a[0] = b[0]
    a[:, 1:2] = b[:, :1] * 2j
    a.diagonal().mul_(1 - 1j)
    a.as_strided((2,), (2,), 1).add_(b.reshape(-1)[:2])
    torch.view_as_real(a)[..., 1].mul_(3)
    return a


for dt in (C64, C128):
    n = str(dt)[6:]
    case(f"add-{n}", lambda a, b: a + b * 2, two(dt), (aten.add.Tensor,), grad=True)
    case(f"scalar-ops-{n}", lambda a: (a + (1 - 2j), aten.add.Scalar(a, 2.5),
                                       aten.sub.Scalar(a, 1j), aten.mul.Scalar(a, 0.5 + 1j),
                                       aten.div.Scalar(a, 4.0)), one(dt),
         (aten.add.Tensor, aten.add.Scalar, aten.sub.Scalar, aten.mul.Scalar, aten.div.Scalar),
         grad=True)
    case(f"sub-rsub-{n}", lambda a, b: (a - b, 1.5 - a, torch.rsub(a, b, alpha=2)), two(dt),
         (aten.sub.Tensor, aten.rsub.Scalar, aten.rsub.Tensor), grad=True)
    case(f"mul-div-{n}", lambda a, b: (a * b, a / b, a * 2.5, a / (1 + 1j)), two(dt),
         (aten.mul.Tensor, aten.div.Tensor), grad=True)
    case(f"mixed-real-{n}", lambda a, b: (a * b, a + b, b / a), two(dt, F32),
         (aten.mul.Tensor, aten.add.Tensor, aten.div.Tensor), grad=True)
    case(f"unary-{n}", lambda a: (-a, a.abs(), a.sgn(), a.sqrt(), a.rsqrt(), a.exp(), a.log(),
                                  a.reciprocal(), +a),
         one(dt), (aten.neg.default, aten.abs.default, aten.sgn.default, aten.sqrt.default,
                   aten.rsqrt.default, aten.exp.default, aten.log.default,
                   aten.reciprocal.default, aten.positive.default), grad=True, rtol=1e-4)
    case(f"trig-{n}", lambda a: (a.sin(), a.cos(), a.tan(), a.sinh(), a.cosh(), a.tanh(),
                                 a.sigmoid()),
         one(dt, -1, 1), (aten.sin.default, aten.cos.default, aten.tan.default,
                          aten.sinh.default, aten.cosh.default, aten.tanh.default,
                          aten.sigmoid.default, aten.tanh_backward.default,
                          aten.sigmoid_backward.default), grad=True, rtol=1e-4)
    case(f"more-unary-{n}", lambda a: (a.exp2(), a.expm1(), a.log2(), a.log10(), a.log1p(),
                                       a.asin(), a.acos(), a.atan(), a.asinh(), a.acosh(),
                                       a.atanh(), torch.addcdiv(a, a, a + 4, value=0.5)),
         one(dt, -1, 1), (aten.exp2.default, aten.expm1.default, aten.log2.default,
                          aten.log10.default, aten.log1p.default, aten.asin.default,
                          aten.acos.default, aten.atan.default, aten.asinh.default,
                          aten.acosh.default, aten.atanh.default, aten.addcdiv.default),
         grad=True, rtol=1e-4, atol=1e-5)
    case(f"norms-stats-{n}", lambda a: (torch.linalg.vector_norm(a), a.norm(dim=1),
                                        torch.linalg.vector_norm(a, 1, dim=0),
                                        torch.linalg.vector_norm(a, float("inf")),
                                        a.var(), a.std(1), *torch.var_mean(a, 0), a.prod(),
                                        torch.linalg.vecdot(a, a)),
         lambda g, r: [rnd(g, shape(r, 2, 2, 5), dt, -1, 1)],
         (aten.linalg_vector_norm.default, aten.var.correction, aten.std.correction,
          aten.var_mean.correction, aten.prod.default, torch.ops.prims.conj_physical.default),
         grad=True, rtol=1e-4, atol=1e-5)
    case(f"logical-{n}", lambda a, b: (a.any(), a.all(1), (a * 0).any(), a.logical_not(),
                                       a.logical_and(b), a.logical_or(b * 0), a.bool(),
                                       a.nan_to_num(), torch.count_nonzero(a * 0 + b, 1)),
         two(dt), (aten.any.default, aten.all.dim, aten.logical_not.default,
                   aten.logical_and.default, aten.logical_or.default, aten.nan_to_num.default))
    case(f"logical-more-{n}", lambda a, b: (a.all(), a.all((0, 1)), (a * 0).any(1),
                                            (a * 0).any((0,)), a.logical_xor(b * 0),
                                            a.clone().zero_()),
         two(dt), (aten.all.default, aten.all.dims, aten.any.dim, aten.any.dims,
                   aten.logical_xor.default, aten.zero.default))
    case(f"vdot-{n}", lambda a, b: (torch.vdot(a, b), torch.linalg.vecdot(a, b)),
         lambda g, r: [rnd(g, (5,), dt), rnd(g, (5,), dt)],
         (torch.ops.prims.conj_physical.default,), grad=True, rtol=1e-4, atol=1e-5)
    case(f"masked-fill-tensor-{n}", lambda a, m, v: a.masked_fill(m, v),
         lambda g, r: [rnd(g, (3, 4), dt), rnd(g, (3, 4), BOOL), rnd(g, (), dt)],
         (aten.masked_fill.Tensor,), grad=(0, 2))
    case(f"addmv-baddbmm-{n}", lambda x, m, v, c: (torch.addmv(x, m, v, beta=0.5, alpha=2j),
                                                   torch.baddbmm(c, c, c, alpha=0.5 - 1j)),
         lambda g, r: [rnd(g, (3,), dt), rnd(g, (3, 4), dt), rnd(g, (4,), dt),
                       rnd(g, (2, 3, 3), dt)],
         (aten.addmv.default, aten.baddbmm.default), grad=True, rtol=1e-4, atol=1e-5)
    case(f"pow-{n}", lambda a, b: (a ** 2, a ** b, 2 ** a, a ** 0.5),
         lambda g, r: [rnd(g, (3, 4), dt, 0.5, 2), rnd(g, (3, 4), dt, -1, 1)],
         (aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar), grad=True,
         rtol=1e-4, atol=1e-5)
    case(f"compare-{n}", lambda a, b: (a == b, a != b, a == a, a != 1j, a.isnan(),
                                       a.isfinite(), a.isinf()), two(dt),
         (aten.eq.Tensor, aten.ne.Tensor, aten.eq.Scalar, aten.ne.Scalar, aten.isnan.default,
          aten.isfinite.default, aten.isinf.default))
    case(f"where-fill-{n}", lambda a, b, m: (torch.where(m, a, b), a.masked_fill(m, 2 - 1j),
                                             a.clone().fill_(3j), a.clone(),
                                             torch.diag_embed(a)),
         lambda g, r: two(dt)(g, r) + [rnd(g, (1,), BOOL)],
         (aten.where.self, aten.masked_fill.Scalar, aten.fill.Scalar, aten.clone.default,
          torch.ops.prims.where.default),
         grad=(0, 1))
    case(f"addcmul-lerp-{n}", lambda a, b: (torch.addcmul(a, a, b, value=0.5),
                                            torch.lerp(a, b, 0.25)),
         two(dt), (aten.addcmul.default, aten.lerp.Scalar), grad=True)
    case(f"convert-{n}", lambda a: (a.to(F32 if dt == C64 else F64), a.to(I64), a.to(BOOL),
                                    a.to(C128), a.real.to(dt)),
         lambda g, r: [rnd(g, (2, 5), dt) * 3], (aten._to_copy.default,))
    case(f"reduce-{n}", lambda a: (a.sum(), a.sum(1), a.mean(), a.mean(0, keepdim=True),
                                   a.prod(1), a.cumsum(0), a.cumprod(1)),
         one(dt, -1, 1), (aten.sum.default, aten.sum.dim_IntList, aten.mean.default,
                          aten.mean.dim, aten.prod.dim_int, aten.cumsum.default,
                          aten.cumprod.default),
         grad=True, rtol=1e-4, atol=1e-5)
    case(f"matmul-{n}", lambda a, b, v, c: (a @ b, torch.bmm(c, c), a @ v, v @ v,
                                            torch.addmm(a[:, :2], a, b, beta=0.5)),
         lambda g, r: [rnd(g, (3, 4), dt), rnd(g, (4, 2), dt), rnd(g, (4,), dt),
                       rnd(g, (2, 3, 3), dt)],
         (aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default,
          aten.addmm.default), grad=True, rtol=1e-4, atol=1e-5)
    case(f"einsum-{n}", lambda a, b: torch.einsum("bij,bjk->bik", a, b),
         lambda g, r: [rnd(g, (2, 3, 4), dt), rnd(g, (2, 4, 5), dt)], (aten.bmm.default,),
         grad=True, rtol=1e-4, atol=1e-5)
    case(f"layout-{n}", lambda a, b: (torch.cat([a, b], 0), torch.stack([a, b], 1),
                                      a.repeat(2, 1), a.flip(0), a.roll(1, 1),
                                      F.pad(a, (1, 2)), a.tril(), a.triu(1),
                                      a.t().reshape(-1)),
         two(dt), (aten.cat.default, aten.stack.default, aten.repeat.default, aten.flip.default,
                   aten.roll.default, aten.constant_pad_nd.default, aten.tril.default,
                   aten.triu.default, aten._unsafe_view.default), grad=True)
    case(f"indexing-{n}", lambda a, i: (a[i], a.index_select(1, i), a.gather(0, i[None]),
                                        torch.zeros_like(a).index_put((i,), a[:2], True),
                                        torch.zeros_like(a).scatter(0, i[None], a[:1, :2]),
                                        torch.zeros_like(a).scatter(0, i[None], 2j),
                                        torch.zeros_like(a).scatter_add(0, i[None], a[:1, :2]),
                                        torch.zeros_like(a).index_add(0, i, a[:2])),
         lambda g, r: [rnd(g, (4, 5), dt), torch.tensor([1, 3])],
         (aten.index.Tensor, aten.index_select.default, aten.gather.default,
          aten.index_put.default, aten.scatter.src, aten.scatter.value, aten.scatter_add.default,
          aten.index_add.default), grad=(0,))
    case(f"written-views-{n}", _write_views, two(dt),
         (aten.slice_scatter.default, aten.select_scatter.default,
          aten.diagonal_scatter.default, aten.as_strided_scatter.default), grad=True)
    case(f"parts-{n}", lambda a: (a.real, a.imag, torch.view_as_real(a), a.conj(),
                                  torch.conj_physical(a), a.angle(), a.conj().imag),
         one(dt), (aten.view_as_real.default, aten._conj.default, aten._conj_physical.default,
                   aten.angle.default), grad=True)
    part = F32 if dt == C64 else F64
    case(f"build-{part}", lambda x, y: (torch.complex(x, y), torch.polar(x.abs(), y),
                                        torch.view_as_complex(torch.stack([x, y], -1)),
                                        x.angle(), torch.view_as_complex(
                                            torch.stack([x, y], -1)[1:])),
         two(part), (aten.complex.default, aten.polar.default, aten.view_as_complex.default),
         grad=True)
    case(f"fft-{n}", lambda a: (torch.fft.fft(a), torch.fft.ifft(a, n=7), torch.fft.fft2(a),
                                torch.fft.ifftn(a, norm="ortho"),
                                torch.fft.fft(a, dim=0, norm="forward"),
                                torch.fft.irfft(a), torch.fft.irfft2(a, s=(3, 6)),
                                torch.fft.hfft(a, n=5)),
         lambda g, r: [rnd(g, (r.randint(2, 5), r.randint(3, 6)), dt)],
         (aten._fft_c2c.default, aten._fft_c2r.default), grad=True, rtol=1e-4, atol=1e-4)
    case(f"rfft-{part}", lambda x: (torch.fft.rfft(x), torch.fft.rfft2(x, norm="ortho"),
                                    torch.fft.rfftn(x, s=(4, 6), norm="forward"),
                                    torch.fft.fftn(x), torch.fft.ihfft(x),
                                    torch.fft.irfft(torch.fft.rfft(x), n=x.shape[-1])),
         lambda g, r: [rnd(g, (2, r.randint(2, 5), r.randint(3, 8)), part)],
         (aten._fft_r2c.default,), grad=True, rtol=1e-4, atol=1e-4)


# ---- torch.linalg on complex matrices ------------------------------------------------------
# Decompositions unique up to a phase per vector (SVD, eigh) are compared through
# phase-invariant quantities (and their gradients: torch refuses a loss depending on the
# phases); LU, QR and Cholesky factors are LAPACK's and compared as they are.
L = torch.linalg
LINALG_TOL = {C64: dict(rtol=1e-4, atol=1e-4), C128: dict(rtol=1e-7, atol=1e-8)}


def _batch(r):
    return shape(r, r.randint(0, 2), 1, 4)


def _dims(r, rows):
    m, n = r.randint(1, 4), r.randint(1, 4)
    m, n = max(m, n), min(m, n)
    return {"tall": (m + 1, n), "wide": (n, m + 1), "square": (m, m)}[rows]


def _general(dt, rows):
    return lambda g, r: [rnd(g, _batch(r) + _dims(r, rows), dt, -1, 1)]


def _invertible(g, r, dt):
    """Entries in the unit square plus n*I: far from singular."""
    n = r.randint(1, 5)
    return rnd(g, _batch(r) + (n, n), dt, -1, 1) + n * torch.eye(n, dtype=dt)


def _hpd(g, r, dt):
    """Hermitian positive definite."""
    a = _invertible(g, r, dt)
    return a @ a.mH


def _with_rhs(dt, rhs, make=_invertible):
    def inputs(g, r):
        a = make(g, r, dt)
        n = a.shape[-1]
        k = r.randint(1, 3)
        b = {"matrix": a.shape[:-2] + (n, k), "vector": (n,), "batched-vector": a.shape[:-1],
             "right": a.shape[:-2] + (k, n), "broadcast": (2,) + a.shape[:-2] + (n, k)}[rhs]
        return [a, rnd(g, b, dt)]
    return inputs


def _cholesky_inputs(dt, upper):
    def inputs(g, r):
        a, b = _with_rhs(dt, "broadcast", _hpd)(g, r)
        return [b, L.cholesky(a, upper=upper)]
    return inputs


def _svd_invariants(a, full=False):
    u, s, vh = L.svd(a, full_matrices=full)
    k = s.shape[-1]
    u1, vh1 = u[..., :k], vh[..., :k, :]
    out = (s, (u1 * s.unsqueeze(-2).to(a.dtype)) @ vh1, u1.abs(), vh1.abs())
    if full:  # the complements are unique only as subspaces
        out += (u[..., k:] @ u[..., k:].mH, vh[..., k:, :].mH @ vh[..., k:, :])
    return out


def _eigh_invariants(a, uplo):
    w, v = L.eigh(a, UPLO=uplo)
    return w, v.abs(), (v * w.unsqueeze(-2).to(a.dtype)) @ v.mH


def _flat(*outs):
    """The tensors of ``outs`` (tuples of them flattened)."""
    return tuple(t for o in outs for t in (o if isinstance(o, tuple) else (o,)))


_LU = (aten.linalg_lu_factor_ex.default,)
_SOLVE = (aten._linalg_solve_ex.default, aten.linalg_lu_solve.default)
_DET = (aten._linalg_det.default, aten._linalg_slogdet.default, linalg.lu_det)

for dt in (C64, C128):
    n, tol = str(dt)[6:], LINALG_TOL[dt]
    case(f"inv-{n}", lambda a: (L.inv(a), L.inv(a.mT)), lambda g, r, dt=dt: [_invertible(g, r, dt)],
         (aten.linalg_inv_ex.default,), grad=True, **tol)
    for rhs in ("matrix", "vector", "batched-vector", "right", "broadcast"):
        case(f"solve-{rhs}-{n}", lambda a, b, rhs=rhs: L.solve(a, b, left=rhs != "right"),
             _with_rhs(dt, rhs), _SOLVE, grad=True, **tol)
    case(f"solve_ex-lu-pivots-{n}", lambda a, b: aten._linalg_solve_ex(a, b)[:3],
         _with_rhs(dt, "matrix"), _SOLVE, **tol)
    for left, adjoint in ((True, False), (True, True), (False, False), (False, True)):
        case(f"lu_solve-left={left}-adjoint={adjoint}-{n}",
             lambda a, b, le=left, ad=adjoint: L.lu_solve(*L.lu_factor(a), b, left=le,
                                                          adjoint=ad),
             _with_rhs(dt, "matrix" if left else "right"), _LU + _SOLVE, grad=True, **tol)
    for rows in ("tall", "wide", "square"):
        case(f"lu-{rows}-{n}", lambda a: (*L.lu(a), *L.lu_factor(a)), _general(dt, rows),
             _LU + (aten.linalg_lu.default,), grad=True, **tol)
        case(f"qr-{rows}-{n}", L.qr, _general(dt, rows),
             (aten.linalg_qr.default,), grad=True, **tol)
        case(f"svd-{rows}-{n}", _svd_invariants, _general(dt, rows),
             (aten._linalg_svd.default,), **tol)   # gradients: see below
    case(f"qr-complete-r-{n}", lambda a: (*L.qr(a, mode="complete"), L.qr(a, mode="r")[1]),
         _general(dt, "tall"),
         (aten.linalg_qr.default,), **tol)
    case(f"svd-full-svdvals-{n}", lambda a: _svd_invariants(a, True) + (L.svdvals(a),),
         _general(dt, "tall"), (aten._linalg_svd.default,), **tol)
    case(f"lu_unpack-{n}", lambda a: (*torch.lu_unpack(*L.lu_factor(a)),
                                      *torch.lu_unpack(*L.lu_factor(a), False),
                                      *torch.lu_unpack(*L.lu_factor(a), True, False)),
         _general(dt, "tall"), _LU + (aten.lu_unpack.default,), **tol)
    for upper in (False, True):
        case(f"cholesky-upper={upper}-{n}", lambda a, u=upper: L.cholesky(a, upper=u),
             lambda g, r, dt=dt: [_hpd(g, r, dt)], (aten.linalg_cholesky_ex.default,),
             grad=True, **tol)
        case(f"cholesky_solve-upper={upper}-{n}",
             lambda b, c, u=upper: torch.cholesky_solve(b, c, upper=u),
             _cholesky_inputs(dt, upper), (aten.cholesky_solve.default,), grad=True, **tol)
    case(f"cholesky-info-{n}", lambda a: (L.cholesky_ex(a).info,
                                          L.cholesky_ex(a.mH, upper=True).info),
         lambda g, r, dt=dt: [_not_positive_definite(g, dt, C128)],
         (aten.linalg_cholesky_ex.default,))
    for uplo in ("L", "U"):  # only the UPLO triangle counts (the real part of its diagonal)
        case(f"eigh-{uplo}-{n}", lambda a, u=uplo: _eigh_invariants(a, u),
             lambda g, r, dt=dt: [rnd(g, _batch(r) + (r.randint(1, 5),) * 2, dt)],
             (aten._linalg_eigh.default,), grad=True, **tol)
    case(f"eigvalsh-{n}", L.eigvalsh, lambda g, r, dt=dt: [_hpd(g, r, dt)],
         (aten._linalg_eigh.default,), grad=True, **tol)
    for name, fn in (("det", L.det), ("slogdet", L.slogdet), ("logdet", torch.logdet)):
        case(f"{name}-{n}", lambda a, f=fn: _flat(f(a), f(a.mT)),
             lambda g, r, dt=dt: [_invertible(g, r, dt)], _DET, grad=True, **tol)
    case(f"det-lu-pivots-{n}", lambda a: aten._linalg_det(a) + aten._linalg_slogdet(a.mT),
         lambda g, r, dt=dt: [rnd(g, (2, 4, 4), dt)], _DET, **tol)
    for upper, left, unit in ((True, True, False), (False, True, True), (True, False, False),
                              (False, False, True)):
        case(f"solve_triangular-{upper}-{left}-{unit}-{n}",
             lambda a, b, u=upper, le=left, un=unit: L.solve_triangular(
                 a, b, upper=u, left=le, unitriangular=un),
             _with_rhs(dt, "matrix" if left else "right"),
             (aten.linalg_solve_triangular.default,), grad=True, **tol)
    case(f"pinv-{n}", lambda a: (L.pinv(a), L.pinv(a.mT)), _general(dt, "tall"),
         (aten.linalg_pinv.atol_rtol_tensor,), grad=True, **tol)
    case(f"pinv-hermitian-{n}", lambda a: L.pinv(a, hermitian=True),
         lambda g, r, dt=dt: [_hpd(g, r, dt)], (aten.linalg_pinv.atol_rtol_tensor,),
         grad=True, **tol)

(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


def test_every_complex_op_is_checked_by_a_case():
    importlib.import_module("test_complex_more")   # (its cases join COVERS on import)
    covered = set().union(*COVERS.values())
    assert COMPLEX_OK <= covered, sorted(map(str, COMPLEX_OK - covered))


@pytest.mark.parametrize("dt", [C64, C128])
def test_svd_gradients_of_complex_matrices(dt):
    """torch's complex SVD backward checks (``allclose``: computed on the device, one bool
    read) that the loss does not depend on the singular vectors' phases; all is lowered."""
    cases = [Case(f"svd-grad-{rows}-{dt}", _svd_invariants, _general(dt, rows), grad=True,
                  **LINALG_TOL[dt]) for rows in ("tall", "wide", "square")]
    results = run_all(cases, grad=True)
    for c in cases:
        check_backward(c, results)
    assert set(results["__fallbacks__"]) == set()


# ---- views written through, ops without a complex lowering, errors --------------------


def test_writes_through_real_and_complex_views_reach_the_base():
    c = rnd(torch.Generator().manual_seed(0), (3, 4), C64)
    f = rnd(torch.Generator().manual_seed(1), (3, 4, 2), F32)
    lc, lf = c.to(DEV), f.to(DEV)
    for t in (c, lc):
        torch.view_as_real(t)[:, 1:, 0].mul_(-2)    # the real parts of columns 1..3
        t.real[0] += 1
        t.imag.clamp_(min=0)                       # clamp: no complex operand
        t.conj()[2].mul_(1j)                       # a conjugate view written through
    for t in (f, lf):
        z = torch.view_as_complex(t)
        z[1] = z[1] * (2 - 1j)
        z.add_(z.conj())
    assert_same(lc, c)
    assert_same(lf, f)


def test_bitcast_views_share_bits_with_their_base():
    x = torch.randn(2, 6)
    lx = x.to(DEV)
    for t in (x, lx):
        bits = t.view(torch.int32)
        bits[:, ::2] ^= 1 << 31                    # flip the sign bits of even columns
    assert_same(lx, x)
    assert_same(lx.view(torch.int32), x.view(torch.int32))


def test_an_op_without_a_complex_lowering_runs_eagerly_with_torchs_result_or_error():
    c = rnd(torch.Generator().manual_seed(2), (4, 3), C64)
    lc = c.to(DEV)
    lr.reset_metrics()
    assert_same(torch.linalg.matrix_exp(lc[:3]), torch.linalg.matrix_exp(c[:3]), 1e-5, 1e-5)
    assert lr.metrics()["fallback_ops"]
    with pytest.raises(RuntimeError, match="not implemented for 'ComplexFloat'|complex"):
        (lc < lc).cpu()


@pytest.mark.parametrize("make", [lambda d: torch.view_as_complex(torch.randn(3, 2).to(d)),
                                  lambda d: torch.randn(3).to(d).to(torch.cfloat)],
                         ids=["complex-view-of-real", "conversion"])
def test_complex_values_made_without_a_recorded_op_are_still_checked(make):
    """A complex view of a real tensor and a conversion make complex values without a
    recorded op: the first complex operand of the process may come from them."""
    from lazy_runtime import dtypes
    seen = dtypes.COMPLEX_IN_USE[0]
    dtypes.COMPLEX_IN_USE[0] = False
    try:
        c = make(DEV)
        with pytest.raises(RuntimeError, match="not implemented for 'ComplexFloat'"):
            torch.lt(c, c).cpu()
    finally:
        dtypes.COMPLEX_IN_USE[0] = seen or dtypes.COMPLEX_IN_USE[0]


def test_a_copy_standing_for_a_view_refuses_writes():
    lx = torch.randn(4).to(DEV)
    y = lx.view(torch.uint8)                       # a different item size: runs eagerly
    assert y.shape == (16,)
    with pytest.raises(lr.UnsupportedOperation, match="not a view of its input"):
        y.add_(1)
    assert_same(y + 1, lx.cpu().view(torch.uint8) + 1)


def test_errors_are_torchs():
    lf = torch.randn(3, 4).to(DEV)
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        torch.view_as_complex(lf)
    with pytest.raises(RuntimeError, match="stride 1"):
        torch.view_as_complex(torch.randn(2, 3).to(DEV).t())
    with pytest.raises(RuntimeError, match="only supported for complex"):
        torch.view_as_real(lf)


def _rotary(x, freqs_cis):
    """Rotary embeddings as Meta's Llama reference code writes them (complex products)."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)


def test_llama_style_rotary_embeddings_forward_and_backward():
    freqs = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
    angles = torch.outer(torch.arange(5).float(), freqs)
    cis = torch.polar(torch.ones_like(angles), angles)[None, :, None, :]
    q = torch.randn(2, 5, 3, 8, requires_grad=True)
    ql = q.detach().to(DEV).requires_grad_()
    lr.reset_metrics()
    want, got = _rotary(q, cis), _rotary(ql, cis.to(DEV))
    want.pow(2).sum().backward()
    got.pow(2).sum().backward()
    assert_same(got, want.detach(), 1e-5, 1e-5)
    assert_same(ql.grad, q.grad, 1e-5, 1e-5)
    assert lr.metrics()["fallback_ops"] == {}


def test_stft_and_its_inverse():
    x, window = torch.randn(2, 300), torch.hann_window(64)
    spec = torch.stft(x, 64, hop_length=16, window=window, return_complex=True)
    lspec = torch.stft(x.to(DEV), 64, hop_length=16, window=window.to(DEV),
                       return_complex=True)
    assert_same(lspec, spec, 1e-4, 1e-4)
    back = torch.istft(lspec, 64, hop_length=16, window=window.to(DEV), length=300)
    assert_same(back, torch.istft(spec, 64, hop_length=16, window=window, length=300),
                1e-4, 1e-5)


# ---- a spectral model trains as in eager torch -----------------------------------------


class SpectralConv1d(torch.nn.Module):
    """A Fourier layer (as in Fourier neural operators): the lowest ``modes`` frequencies
    of each channel mixed by complex weights, the rest dropped; plus a pointwise path."""

    def __init__(self, channels, modes):
        super().__init__()
        self.modes = modes
        scale = 1 / channels
        self.weight = torch.nn.Parameter(scale * torch.randn(channels, channels, modes,
                                                             dtype=torch.cfloat))
        self.pointwise = torch.nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        xf = torch.fft.rfft(x, norm="ortho")
        out = torch.zeros_like(xf)
        out[..., :self.modes] = torch.einsum("bim,iom->bom", xf[..., :self.modes], self.weight)
        y = torch.fft.irfft(out, n=x.shape[-1], norm="ortho")
        return F.gelu(y + self.pointwise(x))


def test_a_spectral_model_with_complex_weights_trains_as_in_eager_torch():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(SpectralConv1d(4, 5), SpectralConv1d(4, 5))
    lazy = torch.nn.Sequential(SpectralConv1d(4, 5), SpectralConv1d(4, 5))
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEV)
    data = torch.randn(4, 2, 3, 4, 16)

    def run(model, device):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        return train_steps(model, opt, lambda i: data[i].unbind(), F.mse_loss, 4, device)

    want = run(eager, None)
    lr.reset_metrics()
    got = run(lazy, DEV)
    assert got == pytest.approx(want, rel=1e-4)
    for (name, p), q in zip(lazy.named_parameters(), eager.parameters()):
        assert_same(p, q, 1e-4, 1e-5, name)
    m = lr.metrics()
    assert m["fallback_ops"] == {}
    assert m["compiles"] <= 2     # the first step, then one graph for every later step


# ---- dynamic dims --------------------------------------------------------------------


def _spectral_features(x):
    c = torch.fft.fft(x.to(torch.cfloat))
    return (torch.fft.rfft(x).abs().sum(1) + torch.view_as_real(c).sum((1, 2))
            + torch.fft.irfft(torch.fft.rfft(x), n=x.shape[1]).sum(1) + c.conj().angle().sum(1)
            + torch.polar(x.abs(), x).imag.sum(1)
            + torch.view_as_complex(torch.stack([x, -x], -1)).imag.sum(1)
            + x.view(torch.int32).bitwise_and(0xFF).float().sum(1))


def test_complex_views_and_ffts_along_concrete_dims_run_padded():
    lr.reset_metrics()
    for n in (5, 7, 6):   # one bucket: 8
        x = torch.randn(n, 8)
        xl = x.to(DEV)
        lr.mark_dynamic(xl, 0)
        assert_same(_spectral_features(xl), _spectral_features(x), 1e-4, 1e-4)
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["compile_reasons"]


def test_a_one_sided_fft_along_a_padded_dim_runs_padded():
    """Its ``n//2+1`` outputs (a derived symbol) and its inverse back to n points (before:
    an exact compile at each length)."""
    lr.reset_metrics()
    for n in (5, 7, 6):   # one bucket: 8
        x = torch.randn(8, n)
        xl = lr.mark_dynamic(x.to(DEV), 1)
        assert_same(torch.fft.rfft(xl).abs(), torch.fft.rfft(x).abs(), 1e-4, 1e-5)
        assert_same(torch.fft.irfft(torch.fft.rfft(xl) * 2, n=n),
                    torch.fft.irfft(torch.fft.rfft(x) * 2, n=n), 1e-4, 1e-5)
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["compiles"] == 2, m["compile_reasons"]


# ---- what runs eagerly ------------------------------------------------------------------


def test_an_eager_fallback_conjugates_through_views_as_torch_does():
    """Inside ``__torch_dispatch__`` torch excludes the conjugate bit's key: a CPU kernel run
    there by a fallback ignored ``x.conj()`` views (complex lstsq's residuals, sums of
    squared magnitudes, came out negative)."""
    g = torch.Generator().manual_seed(4)
    a = torch.randn(5, 3, dtype=C64, generator=g)
    b = torch.randn(5, 2, dtype=C64, generator=g)
    lr.reset_metrics()
    got = torch.linalg.lstsq(a.to(DEV), b.to(DEV), driver="gels")
    want = torch.linalg.lstsq(a, b, driver="gels")
    assert_same(got.residuals, want.residuals, 1e-4, 1e-5)
    assert_same(got.solution, want.solution, 1e-4, 1e-5)
    assert bool((got.residuals.cpu() >= 0).all())
    assert lr.metrics()["fallback_ops"] == {"aten.linalg_lstsq.default": 1}


def test_complex_logcumsumexp_runs_torchs_kernel():
    x = torch.randn(3, 4, dtype=C64, generator=torch.Generator().manual_seed(5))
    assert_same(torch.logcumsumexp(x.to(DEV), 1), torch.logcumsumexp(x, 1), 1e-5, 1e-6)
