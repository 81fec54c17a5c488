"""torch.linalg's factorizations and solvers against eager torch, forward and backward.

All cases are recorded first and computed by one barrier (two XLA compiles for the file,
forward values then gradients). Decompositions that are unique only up to signs (SVD, eigh)
are compared through sign-invariant quantities: values, reconstructions, |vectors|, and
the gradients of those (well defined for distinct singular values/eigenvalues). LU
factors, pivots, QR and geqrf's reflectors (Householder, as LAPACK), lstsq's ranks and
``info`` are compared exactly as torch's. At the end: what stays eager still gives torch's
results, and orthogonal parametrizations train as in eager torch.
"""

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, ROOT, assert_same
from lowering_harness import F32, F64, Case, lowering_tests, rnd, shape

pytestmark = [pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated"),
              pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")]
CASES: list = []
L = torch.linalg
aten = torch.ops.aten


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def batch(r):
    return shape(r, r.randint(0, 2), 1, 4)


def well_conditioned(g, s, dt):
    """Random entries in [-1, 1] plus n*I: far from singular."""
    return rnd(g, s, dt, -1, 1) + s[-1] * torch.eye(s[-1], dtype=dt)


def spd(g, s, dt):
    a = rnd(g, s, dt, -1, 1)
    return a @ a.mT + s[-1] * torch.eye(s[-1], dtype=dt)


def square(g, r, dt, make=well_conditioned):
    return make(g, batch(r) + (r.randint(1, 5),) * 2, dt)


def _solve_inputs(g, r, dt, rhs):
    a = square(g, r, dt)
    n = a.shape[-1]
    if rhs == "vector":
        return [a, rnd(g, (n,), dt)]
    if rhs == "batched-vector":
        return [a, rnd(g, a.shape[:-1], dt)]
    if rhs == "right":
        return [a, rnd(g, a.shape[:-2] + (r.randint(1, 4), n), dt)]
    return [a, rnd(g, (r.randint(1, 3),) + a.shape[:-2] + (n, r.randint(1, 4)), dt)]


def _dims(r, rows):
    m, n = r.randint(1, 5), r.randint(1, 5)
    m, n = max(m, n), min(m, n)
    return {"tall": (m + 1, n), "wide": (n, m + 1), "square": (m, m)}[rows]


def _cholesky_solve_inputs(g, r, dt, upper):
    a = square(g, r, dt, spd)
    c = L.cholesky(a, upper=upper)
    return [rnd(g, (r.randint(1, 3),) + a.shape[:-2] + (a.shape[-1], r.randint(1, 4)), dt), c]


def _svd_invariants(a, full=False):
    u, s, vh = L.svd(a, full_matrices=full)
    k = s.shape[-1]
    u1, vh1 = u[..., :k], vh[..., :k, :]
    out = (s, (u1 * s.unsqueeze(-2)) @ vh1, u1.abs(), vh1.abs())
    if full:  # the complements are unique only as subspaces
        out += (u[..., k:] @ u[..., k:].mT, vh[..., k:, :].mT @ vh[..., k:, :])
    return out


def _eigh_invariants(a, uplo):
    w, v = L.eigh(a, UPLO=uplo)
    return w, v.abs(), (v * w.unsqueeze(-2)) @ v.mT


def _singular(g, dt, n, rank):
    """An n x n matrix of the given rank, far from the tolerances around it."""
    u, _ = L.qr(rnd(g, (n, n), F64))
    s = torch.zeros(n, dtype=F64)
    s[:rank] = torch.tensor([3.0, 1.0][:rank])
    return ((u * s) @ u.mT).to(dt)


def _singular_batch(g, dt):
    """5 x 5 matrices with a zero column at 0, 2 or 4 (U's first exact zero pivot), or none."""
    a = well_conditioned(g, (4, 5, 5), dt)
    for i, col in enumerate((0, 2, 4)):
        a[i, :, col] = 0
    return a


def _not_positive_definite(g, dt, exact=F64):
    """L D L^H with L unit lower triangular (entries of dtype ``exact``): the elimination's
    pivots are D, whose first negative entry is at 0, 2, 3 or nowhere."""
    n = 4
    low = torch.tril(rnd(g, (4, n, n), exact, -1, 1), -1) + torch.eye(n, dtype=exact)
    d = torch.rand((4, n), generator=g, dtype=F64) + 1
    d[0, 0] = d[1, 2] = d[2, 3] = -1
    return ((low * d.unsqueeze(-2)) @ low.mH).to(dt)


# matrix_exp's scales, from its Taylor degree 1 (float32) or 2 (float64) to 18 with
# squarings
_MEXP_SCALES = (1e-9, 1e-5, 1e-2, 0.1, 0.3, 1.0, 6.0)


def _reflectors(g, r, dt, rows, drop=0):
    """geqrf's (reflectors, taus) of a random matrix, ``drop`` taus fewer."""
    a, tau = torch.geqrf(rnd(g, batch(r) + _dims(r, rows), dt))
    return [a, tau[..., :tau.shape[-1] - drop]]


def _ormqr_inputs(g, r, dt, left, rows="tall"):
    a, tau = _reflectors(g, r, dt, rows)
    m, p = a.shape[-2], r.randint(1, 4)
    return [a, tau, rnd(g, a.shape[:-2] + ((m, p) if left else (p, m)), dt)]


def _lstsq_inputs(g, r, dt, rows, rhs):
    """A well-conditioned A (its singular values far from 0: gradients through pinv)."""
    s = batch(r) + _dims(r, rows)
    m = s[-2]
    a = rnd(g, s, dt, -1, 1) + max(s[-2:]) * torch.eye(m, s[-1], dtype=dt)
    return [a, rnd(g, a.shape[:-1] if rhs == "vector" else a.shape[:-2] + (m, 2), dt)]


# (rows, right-hand side) per driver; gelsd and gelss with m > n run eagerly (their
# residuals' shape depends on the ranks)
_LSTSQ_CASES = {None: (("tall", "matrix"), ("wide", "vector"), ("square", "matrix")),
                "gels": (("tall", "matrix"), ("tall", "vector"), ("wide", "matrix"),
                         ("square", "vector")),
                "gelsd": (("wide", "matrix"), ("square", "vector")),
                "gelss": (("wide", "vector"), ("square", "matrix"))}


def _rank_deficient(g, dt, zero_only=False):
    """A zero matrix and exactly rank 1, 2 and 3 (4 x 5) matrices with generic columns
    (a QR with or without column pivoting sees the same rank); only the zero matrix for
    gels, which assumes full rank."""
    ranks = (0,) if zero_only else (0, 1, 2, 3)
    a = torch.stack([rnd(g, (4, k), F64) @ rnd(g, (k, 5), F64) for k in ranks])
    return [a.to(dt), rnd(g, (len(ranks), 4, 2), dt)]


def _ldl_inputs(g, r, dt):
    """torch's LDL^T of a symmetric indefinite matrix whose small diagonal asks for 2x2
    pivot blocks."""
    n = r.randint(2, 6)
    a = rnd(g, batch(r) + (n, n), dt)
    a = a + a.mT - 1.9 * torch.diag_embed(a.diagonal(dim1=-2, dim2=-1))
    ld, piv = L.ldl_factor(a)
    return [ld, piv, rnd(g, a.shape[:-2] + (n, r.randint(1, 3)), dt)]


TOL = {F32: dict(rtol=1e-4, atol=1e-4), F64: dict(rtol=1e-7, atol=1e-8)}

for _dt in (F32, F64):
    _t = str(_dt)[6:]
    _tol = TOL[_dt]

    # ---- inverse and solve -------------------------------------------------------------
    case(f"inv-{_t}", L.inv, lambda g, r, dt=_dt: [square(g, r, dt)], grad=True, **_tol)
    case(f"inv-transposed-{_t}", lambda a: L.inv(a.mT), lambda g, r, dt=_dt: [square(g, r, dt)],
         grad=True, **_tol)

    for _rhs in ("matrix", "vector", "batched-vector", "right"):
        case(f"solve-{_rhs}-{_t}",
             lambda a, b, rhs=_rhs: L.solve(a, b, left=rhs != "right"),
             lambda g, r, dt=_dt, rhs=_rhs: _solve_inputs(g, r, dt, rhs), grad=True, **_tol)
    case(f"solve_ex-lu-pivots-{_t}", lambda a, b: L.solve_ex(a, b)[:1] + aten._linalg_solve_ex(
        a, b)[1:3], lambda g, r, dt=_dt: _solve_inputs(g, r, dt, "matrix"), **_tol)

    # ---- Cholesky ----------------------------------------------------------------------
    for _upper in (False, True):
        case(f"cholesky-upper={_upper}-{_t}", lambda a, u=_upper: L.cholesky(a, upper=u),
             lambda g, r, dt=_dt: [square(g, r, dt, spd)], grad=True, **_tol)
        case(f"cholesky_solve-upper={_upper}-{_t}",
             lambda b, c, u=_upper: torch.cholesky_solve(b, c, upper=u),
             lambda g, r, dt=_dt, u=_upper: _cholesky_solve_inputs(g, r, dt, u), grad=True,
             **_tol)

        case(f"cholesky-deprecated-upper={_upper}-{_t}",
             lambda a, u=_upper: torch.cholesky(a, upper=u),
             lambda g, r, dt=_dt: [square(g, r, dt, spd)], grad=True, **_tol)
        case(f"cholesky_inverse-upper={_upper}-{_t}",
             lambda c, u=_upper: torch.cholesky_inverse(c, upper=u),
             lambda g, r, dt=_dt, u=_upper: _cholesky_solve_inputs(g, r, dt, u)[1:], grad=True,
             **_tol)

    # ---- QR: Householder signs, as LAPACK ------------------------------------------------
    for _mode, _rows in (("reduced", "tall"), ("reduced", "wide"), ("complete", "tall"),
                         ("complete", "square"), ("r", "wide")):
        case(f"qr-{_mode}-{_rows}-{_t}", lambda a, mode=_mode: L.qr(a, mode=mode),
             lambda g, r, dt=_dt, rows=_rows: [rnd(g, batch(r) + _dims(r, rows), dt)],
             grad=_mode == "reduced" or _rows == "square", **_tol)

    # ---- SVD and eigh: sign-invariant quantities -------------------------------------------
    for _rows in ("tall", "wide", "square"):
        case(f"svd-{_rows}-{_t}", _svd_invariants,
             lambda g, r, dt=_dt, rows=_rows: [rnd(g, batch(r) + _dims(r, rows), dt)],
             grad=True, **_tol)
    case(f"svd-full-{_t}", lambda a: _svd_invariants(a, True),
         lambda g, r, dt=_dt: [rnd(g, batch(r) + _dims(r, "tall"), dt)], **_tol)
    case(f"svdvals-{_t}", L.svdvals, lambda g, r, dt=_dt: [rnd(g, batch(r) + _dims(r, "wide"),
                                                                dt)], grad=True, **_tol)
    case(f"matrix_norm-2-{_t}", lambda a: L.matrix_norm(a, 2),
         lambda g, r, dt=_dt: [rnd(g, batch(r) + _dims(r, "tall"), dt)], grad=True, **_tol)
    for _uplo in ("L", "U"):  # a non-symmetric input: only the UPLO triangle counts
        case(f"eigh-{_uplo}-{_t}", lambda a, u=_uplo: _eigh_invariants(a, u),
             lambda g, r, dt=_dt: [square(g, r, dt, rnd)], grad=True, **_tol)
    case(f"eigvalsh-{_t}", L.eigvalsh, lambda g, r, dt=_dt: [square(g, r, dt, spd)], grad=True,
         **_tol)

    # ---- determinants: LU of A^T for a contiguous A, of A otherwise ------------------------
    for _name, _fn in (("det", L.det), ("slogdet", L.slogdet), ("logdet", torch.logdet)):
        case(f"{_name}-{_t}", _fn, lambda g, r, dt=_dt: [square(g, r, dt, spd)], grad=True,
             **_tol)
        case(f"{_name}-transposed-{_t}", lambda a, f=_fn: f(a.mT),
             lambda g, r, dt=_dt: [square(g, r, dt, spd)], grad=True, **_tol)
    case(f"det-signed-{_t}", L.det, lambda g, r, dt=_dt: [rnd(g, batch(r) + (3, 3), dt)],
         grad=True, **_tol)
    case(f"det-lu-pivots-{_t}", lambda a: aten._linalg_det(a) + aten._linalg_det(a.mT),
         lambda g, r, dt=_dt: [rnd(g, (2, 4, 4), dt)], **_tol)
    case(f"det-slogdet-singular-{_t}", lambda a: (L.det(a),) + tuple(L.slogdet(a)),
         lambda g, r, dt=_dt: [_singular_batch(g, dt)], **_tol)

    # ---- LU ----------------------------------------------------------------------------
    for _rows in ("tall", "wide", "square"):
        case(f"lu_factor-{_rows}-{_t}", L.lu_factor,
             lambda g, r, dt=_dt, rows=_rows: [rnd(g, batch(r) + _dims(r, rows), dt)], **_tol)
        case(f"lu-{_rows}-{_t}", L.lu,
             lambda g, r, dt=_dt, rows=_rows: [rnd(g, batch(r) + _dims(r, rows), dt)],
             grad=True, **_tol)
    case(f"lu_factor-grad-{_t}", L.lu_factor, lambda g, r, dt=_dt: [square(g, r, dt)],
         grad=True, **_tol)
    for _data, _piv in ((True, True), (False, True), (True, False)):
        case(f"lu_unpack-{_data}-{_piv}-{_t}",
             lambda a, d=_data, p=_piv: torch.lu_unpack(*L.lu_factor(a), d, p),
             lambda g, r, dt=_dt: [rnd(g, batch(r) + _dims(r, "tall"), dt)], **_tol)
    for _left, _adjoint in ((True, False), (True, True), (False, False), (False, True)):
        case(f"lu_solve-left={_left}-adjoint={_adjoint}-{_t}",
             lambda a, b, le=_left, ad=_adjoint: L.lu_solve(*L.lu_factor(a), b, left=le,
                                                            adjoint=ad),
             lambda g, r, dt=_dt, le=_left: _solve_inputs(g, r, dt, "matrix" if le else "right"),
             grad=True, **_tol)

    # ---- triangular solves -------------------------------------------------------------
    for _upper, _left, _unit in ((True, True, False), (False, True, True), (True, False, False),
                                 (False, False, True)):
        case(f"solve_triangular-{_upper}-{_left}-{_unit}-{_t}",
             lambda a, b, u=_upper, le=_left, un=_unit: L.solve_triangular(
                 a, b, upper=u, left=le, unitriangular=un),
             lambda g, r, dt=_dt, le=_left: _solve_inputs(g, r, dt, "matrix" if le else "right"),
             grad=True, **_tol)
    for _upper, _transpose in ((True, False), (False, True)):
        case(f"triangular_solve-{_upper}-{_transpose}-{_t}",
             lambda b, a, u=_upper, tr=_transpose: torch.triangular_solve(
                 b, a, upper=u, transpose=tr),
             lambda g, r, dt=_dt: _solve_inputs(g, r, dt, "matrix")[::-1], grad=True, **_tol)

    # ---- pseudo-inverse ------------------------------------------------------------------
    case(f"pinv-{_t}", L.pinv, lambda g, r, dt=_dt: [rnd(g, batch(r) + _dims(r, "tall"), dt)],
         grad=True, **_tol)
    case(f"pinv-hermitian-{_t}", lambda a: L.pinv(a, hermitian=True),
         lambda g, r, dt=_dt: [square(g, r, dt, spd)], grad=True, **_tol)
    case(f"pinv-rank-deficient-{_t}", lambda a: (L.pinv(a), L.pinv(a, rtol=0.3),
                                                 L.pinv(a, atol=0.5), L.matrix_rank(a)),
         lambda g, r, dt=_dt: [_singular(g, dt, 5, 2)], **_tol)

    # ---- info: LAPACK's index of the first zero pivot / non-positive-definite minor --------
    case(f"info-inv-solve-lu-{_t}", lambda a, b: (L.inv_ex(a).info, L.solve_ex(a, b).info,
                                                  L.lu_factor_ex(a).info),
         lambda g, r, dt=_dt: [_singular_batch(g, dt), rnd(g, (5, 2), dt)])
    case(f"info-cholesky-{_t}", lambda a: (L.cholesky_ex(a).info,
                                           L.cholesky_ex(a.mT, upper=True).info),
         lambda g, r, dt=_dt: [_not_positive_definite(g, dt)])

    # ---- matrix exponential: each Taylor degree (by the 1-norm), scaling and squaring -----
    case(f"matrix_exp-{_t}", L.matrix_exp, lambda g, r, dt=_dt: [square(g, r, dt, rnd)],
         grad=True, **_tol)
    case(f"matrix_exp-degrees-{_t}", lambda a: tuple(L.matrix_exp(a * s) for s in _MEXP_SCALES),
         lambda g, r, dt=_dt: [rnd(g, (r.randint(2, 5),) * 2, dt, -1, 1)], grad=True, **_tol)
    case(f"matrix_exp-batched-large-{_t}", lambda a: torch.matrix_exp(a * 4),
         lambda g, r, dt=_dt: [rnd(g, (2, 3, 3), dt, -1, 1)], grad=True, **_tol)

    # ---- Householder reflectors: geqrf, householder_product / orgqr, ormqr ---------------
    for _rows in ("tall", "wide", "square"):
        case(f"geqrf-{_rows}-{_t}", torch.geqrf,
             lambda g, r, dt=_dt, rows=_rows: [rnd(g, batch(r) + _dims(r, rows), dt)], **_tol)
    case(f"householder_product-{_t}", L.householder_product,
         lambda g, r, dt=_dt: _reflectors(g, r, dt, "tall"), grad=True, **_tol)
    case(f"householder_product-fewer-taus-{_t}", torch.orgqr,
         lambda g, r, dt=_dt: _reflectors(g, r, dt, "tall", drop=1), grad=True, **_tol)
    case(f"householder_product-random-{_t}", L.householder_product,
         lambda g, r, dt=_dt: [rnd(g, (4, 3), dt, -1, 1), rnd(g, (3,), dt, 0, 1.5)],
         grad=True, **_tol)
    for _left, _tr in ((True, False), (True, True), (False, False), (False, True)):
        case(f"ormqr-left={_left}-transpose={_tr}-{_t}",
             lambda a, tau, c, le=_left, tr=_tr: torch.ormqr(a, tau, c, left=le, transpose=tr),
             lambda g, r, dt=_dt, le=_left: _ormqr_inputs(g, r, dt, le), grad=True, **_tol)
    case(f"ormqr-wide-{_t}", torch.ormqr,
         lambda g, r, dt=_dt: _ormqr_inputs(g, r, dt, True, "wide"), grad=True, **_tol)

    # ---- least squares: each driver's outputs as torch returns them ----------------------
    for _drv, _kinds in _LSTSQ_CASES.items():
        for _rows, _rhs in _kinds:
            case(f"lstsq-{_drv}-{_rows}-{_rhs}-{_t}",
                 lambda a, b, d=_drv: tuple(L.lstsq(a, b, driver=d)),
                 lambda g, r, dt=_dt, rows=_rows, rhs=_rhs: _lstsq_inputs(g, r, dt, rows, rhs),
                 grad=True, **_tol)
        case(f"lstsq-{_drv}-rank-deficient-{_t}",
             lambda a, b, d=_drv: tuple(L.lstsq(a, b, rcond=1e-4, driver=d)),
             lambda g, r, dt=_dt, d=_drv: _rank_deficient(g, dt, d == "gels"), **_tol)
    case(f"lstsq-broadcast-{_t}", lambda a, b: tuple(L.lstsq(a, b)),
         lambda g, r, dt=_dt: [rnd(g, (1, 5, 3), dt), rnd(g, (3, 5, 2), dt)], grad=True, **_tol)

    # ---- LDL^T: ldl_solve from torch's factors (1x1 and 2x2 pivot blocks) -------------------
    for _herm in (False, True):
        case(f"ldl_solve-hermitian={_herm}-{_t}",
             lambda ld, piv, b, h=_herm: L.ldl_solve(ld, piv, b, hermitian=h),
             lambda g, r, dt=_dt: _ldl_inputs(g, r, dt), **_tol)

    # ---- empty matrices (their lowerings once failed to build) -------------------------------
    for _shape in ((0, 0), (2, 0, 0)):
        case(f"empty-{_shape}-{_t}",
             lambda a: (L.cholesky(a), L.cholesky_ex(a, upper=True), L.pinv(a, hermitian=True),
                        L.pinv(a, atol=torch.zeros((3,) + a.shape[:-2]).to(a.device)),
                        L.inv(a), L.det(a), L.eigvalsh(a)),
             lambda g, r, dt=_dt, s=_shape: [torch.zeros(s, dtype=dt)])


(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


# ---- config.check_linalg_errors ---------------------------------------------------------

SINGULAR = {
    "inv": (L.inv, lambda: [torch.zeros(3, 3)]),
    "inv-batched": (L.inv, lambda: [torch.stack([torch.eye(3), torch.ones(3, 3)])]),
    "solve": (L.solve, lambda: [torch.ones(3, 3), torch.ones(3, 1)]),
    "cholesky": (L.cholesky, lambda: [torch.diag(torch.tensor([1.0, 2.0, -1.0]))]),
    "cholesky-batched": (L.cholesky, lambda: [torch.stack([torch.eye(2), -torch.eye(2)])]),
    "lu_factor": (L.lu_factor, lambda: [torch.zeros(2, 2)]),
    "lstsq-gels": (lambda a, b: L.lstsq(a, b, driver="gels"),  # R's second pivot is 0
                   lambda: [torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]),
                            torch.ones(3, 1)]),
}


def _eager_error(fn, xs):
    with pytest.raises(Exception) as eager:
        fn(*xs)
    return eager.value


@pytest.fixture
def check_linalg_errors():
    before = lr.config.check_linalg_errors
    lr.config.check_linalg_errors = True
    yield
    lr.config.check_linalg_errors = before


@pytest.mark.parametrize("name", SINGULAR)
def test_checked_errors_are_torchs(name, check_linalg_errors):
    fn, make = SINGULAR[name]
    want = _eager_error(fn, make())
    with pytest.raises(type(want)) as got:
        fn(*[x.to(DEV) for x in make()])
    assert str(got.value) == str(want)


def test_unchecked_errors_cost_no_barrier():
    """The default: no read of ``info`` while recording; the results hold inf/NaN."""
    assert not lr.config.check_linalg_errors
    a, b = torch.ones(3, 3).to(DEV), torch.ones(3, 1).to(DEV)
    lr.reset_metrics()
    x, y = L.inv(a), L.solve(a, b)
    c = L.cholesky(-torch.eye(2).to(DEV))
    assert lr.metrics()["syncs"] == 0 and lr.metrics()["graphs_executed"] == 0
    lr.mark_step()
    assert lr.metrics()["syncs"] == 1
    assert not torch.isfinite(x.cpu()).all() and not torch.isfinite(y.cpu()).all()
    assert torch.isnan(c.cpu().diagonal()).all()


# ---- invalid arguments: the rules raise torch's errors while recording -------------------

_I = torch.ones(3, 3, dtype=torch.int64)
INVALID = {
    "inv-non-square": (L.inv, [torch.ones(3, 4)]),
    "inv-1d": (L.inv, [torch.ones(3)]),
    "inv-int": (L.inv, [_I]),
    "inv-half": (L.inv, [torch.eye(3, dtype=torch.float16)]),
    "solve-dtypes": (L.solve, [torch.eye(3), torch.ones(3, 3, dtype=F64)]),
    "solve-shapes": (L.solve, [torch.eye(3), torch.ones(4, 2)]),
    "solve-right-shapes": (lambda a, b: L.solve(a, b, left=False),
                           [torch.eye(3), torch.ones(2, 4)]),
    "solve-batches": (L.solve, [torch.ones(2, 3, 3), torch.ones(4, 3, 3)]),
    "cholesky-int": (L.cholesky, [_I]),
    "qr-mode": (lambda a: L.qr(a, mode="x"), [torch.eye(3)]),
    "svd-1d": (L.svd, [torch.ones(3)]),
    "eigh-uplo": (lambda a: L.eigh(a, UPLO="X"), [torch.eye(3)]),
    "det-non-square": (L.det, [torch.ones(2, 3)]),
    "slogdet-int": (L.slogdet, [_I]),
    "lu_factor-1d": (L.lu_factor, [torch.ones(3)]),
    "lu_solve-pivots": (L.lu_solve, [torch.eye(3), torch.ones(3, dtype=torch.int64),
                                     torch.ones(3, 1)]),
    "solve_triangular-1d": (lambda a, b: L.solve_triangular(a, b, upper=True),
                            [torch.eye(3), torch.ones(3)]),
    "triangular_solve-sizes": (torch.triangular_solve, [torch.ones(4, 2), torch.eye(3)]),
    "cholesky_solve-dtypes": (torch.cholesky_solve, [torch.ones(3, 2), torch.eye(3, dtype=F64)]),
    "lu_unpack-pivots": (torch.lu_unpack, [torch.eye(3), torch.ones(3)]),
    "pinv-int": (L.pinv, [_I]),
    "matrix_exp-non-square": (L.matrix_exp, [torch.ones(2, 3)]),
    "matrix_exp-int": (L.matrix_exp, [_I]),
    "geqrf-1d": (torch.geqrf, [torch.ones(3)]),
    "householder_product-wide": (L.householder_product, [torch.ones(3, 4), torch.ones(2)]),
    "householder_product-taus": (L.householder_product, [torch.ones(4, 3), torch.ones(4)]),
    "householder_product-batch": (L.householder_product, [torch.ones(2, 4, 3),
                                                          torch.ones(3, 2)]),
    "householder_product-dtypes": (L.householder_product, [torch.ones(4, 3),
                                                           torch.ones(2, dtype=F64)]),
    "ormqr-rows": (torch.ormqr, [torch.ones(5, 3), torch.ones(3), torch.ones(4, 2)]),
    "ormqr-right-columns": (lambda a, t, c: torch.ormqr(a, t, c, left=False),
                            [torch.ones(5, 3), torch.ones(3), torch.ones(5, 2)]),
    "ormqr-taus": (torch.ormqr, [torch.ones(5, 3), torch.ones(2), torch.ones(5, 2)]),
    "ormqr-ndim": (torch.ormqr, [torch.ones(2, 5, 3), torch.ones(2, 3), torch.ones(5, 2)]),
    "ormqr-dtypes": (torch.ormqr, [torch.ones(5, 3), torch.ones(3), torch.ones(5, 2, dtype=F64)]),
    "lstsq-dtypes": (L.lstsq, [torch.ones(5, 3), torch.ones(5, 2, dtype=F64)]),
    "lstsq-rows": (L.lstsq, [torch.ones(5, 3), torch.ones(4, 2)]),
    "lstsq-dims": (L.lstsq, [torch.ones(5, 3), torch.ones(2, 5, 2)]),
    "ldl_solve-pivots": (L.ldl_solve, [torch.eye(3), torch.ones(2, dtype=torch.int32),
                                       torch.ones(3, 1)]),
    "ldl_solve-rows": (L.ldl_solve, [torch.eye(3), torch.ones(3, dtype=torch.int32),
                                     torch.ones(4, 1)]),
}


@pytest.mark.parametrize("name", INVALID)
def test_invalid_arguments_raise_torchs_error_when_recorded(name):
    fn, xs = INVALID[name]
    want = _eager_error(fn, xs)
    lr.reset_metrics()
    with pytest.raises(type(want)) as got:
        fn(*[x.to(DEV) for x in xs])
    assert str(got.value) == str(want)
    assert lr.metrics()["fallback_ops"] == {}  # the rule raised, not eager torch


# ---- what stays eager: torch's result all the same -----------------------------------------


def _eager_as_torch(fn, xs, op, rtol=1e-5, atol=1e-6):
    """``fn`` on lazy tensors ran ``op`` eagerly (only it) and gave torch's values."""
    want = fn(*xs)
    lr.reset_metrics()
    got = fn(*[x.to(DEV) for x in xs])
    lr.mark_step()
    assert_same(got, want, rtol, atol, str(op))
    assert set(lr.metrics()["fallback_ops"]) == {str(op)}


@pytest.mark.parametrize("driver", ["gelsd", "gelss"])
def test_lstsq_svd_drivers_with_more_rows_run_eagerly(driver):
    """The residuals of gelsd/gelss exist only when every matrix has full rank."""
    g = torch.Generator().manual_seed(0)
    a = torch.stack([rnd(g, (5, 3), F64), rnd(g, (5, 1), F64) @ rnd(g, (1, 3), F64)])
    _eager_as_torch(lambda a, b: tuple(L.lstsq(a, b, driver=driver)),
                    [a, rnd(g, (2, 5, 2), F64)], aten.linalg_lstsq.default)


def test_ldl_factor_runs_eagerly_and_its_factors_solve_lazily():
    g = torch.Generator().manual_seed(0)
    a = rnd(g, (2, 4, 4), F64)
    a = a + a.mT
    _eager_as_torch(L.ldl_factor_ex, [a], aten.linalg_ldl_factor_ex.default)
    b = rnd(g, (2, 4, 3), F64)
    want = L.ldl_solve(*L.ldl_factor(a), b)
    lr.reset_metrics()
    got = L.ldl_solve(*L.ldl_factor(a.to(DEV)), b.to(DEV))
    assert_same(got, want, 1e-7, 1e-8, "ldl_solve")
    assert set(lr.metrics()["fallback_ops"]) == {"aten.linalg_ldl_factor_ex.default"}


# ---- end to end: orthogonal parametrizations train as in eager torch -----------------------


@pytest.mark.parametrize("shape", [(5, 5), (4, 6)], ids=["square", "wide"])
@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_parametrization_trains_as_in_torch(orthogonal_map, shape):
    """Forward, backward and three SGD steps of an orthogonal ``nn.Linear``. The square
    one is parametrized on the lazy device (its initial Q comes from geqrf and
    householder_product there); the other on the CPU (torch completes it with randn)."""
    from torch.nn.utils.parametrizations import orthogonal
    torch.manual_seed(0)
    ref = torch.nn.Linear(*shape, dtype=F64)
    lazy = torch.nn.Linear(*shape, dtype=F64)
    lazy.load_state_dict(ref.state_dict())
    torch.manual_seed(1)
    orthogonal(ref, orthogonal_map=orthogonal_map)
    torch.manual_seed(1)
    lr.reset_metrics()
    if shape[0] == shape[1]:
        lazy = orthogonal(lazy.to(DEV), orthogonal_map=orthogonal_map)
    else:
        lazy = orthogonal(lazy, orthogonal_map=orthogonal_map).to(DEV)
    # its check that the initial weight is orthogonal reads a bool on the host
    assert set(lr.metrics()["fallback_ops"]) <= {"aten.allclose.default"}
    lr.mark_step()
    x = torch.randn(7, shape[0], dtype=F64)
    models = (ref, lazy)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    lr.reset_metrics()
    for step in range(3):
        outs = []
        for m, opt, dev in zip(models, opts, ("cpu", DEV)):
            out = m(x.to(dev))
            (out.tanh() ** 2).sum().backward()
            grads = [p.grad.clone() for p in m.parameters()]
            opt.step()
            opt.zero_grad()
            outs.append((out, grads))
        lr.mark_step()
        assert_same(outs[1], outs[0], 1e-9, 1e-10, f"step {step}")
    assert_same(lazy.weight, ref.weight, 1e-9, 1e-10, "weight")
    assert lr.metrics()["fallback_ops"] == {}


_CONCURRENT_SOLVES = """
import torch
import lazy_runtime as lr
dev = lr.device()
gen = torch.Generator().manual_seed(0)
a = (torch.randn(512, 64, 64, generator=gen).tril() + 8 * torch.eye(64)).to(dev)
b = torch.randn(512, 64, 64, generator=gen).to(dev)
for _ in range(20):
    xs = [torch.linalg.solve_triangular(a * (k + 1), b + k, upper=False) for k in range(4)]
    total = sum(x.sum() for x in xs)
    total.item()
print("done")
"""


def test_independent_batched_solves_in_one_graph_finish():
    # jaxlib 0.10's CPU LAPACK kernels wait on XLA's own thread pool for a batch's tasks:
    # as many independent batched solves as it has threads never finished (Qwen3.5-MoE's
    # two triangular solves of one system; its training step hung). Run apart, bounded.
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _CONCURRENT_SOLVES], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, LAZY_RUNTIME_COMPILE_CACHE="off"))
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]
