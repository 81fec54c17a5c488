"""Complex operands of the ops added to ``COMPLEX_OK`` after ``test_complex.py``'s (they ran
eagerly): ``addbmm``, ``masked_scatter``, ``put``, ``take``, ``scatter(..., reduce=)``,
``logaddexp``, ``silu``, ``logsumexp``, ``linalg.vector_norm`` with a ``dtype``, the
deprecated ``cholesky``/``cholesky_inverse``/``triangular_solve``, and the random fills
``normal_``/``uniform_``. Each against eager torch at several random sizes
(0-d or size 1 among them where the op takes them), complex64 and complex128, special
values (inf, nan, signed zeros in either part) where the op computes with them, and
gradients where torch defines them; nothing may run eagerly.

The cases are recorded first and computed by one barrier (two XLA compiles: values, then
gradients), with ``tests/runtime/lowering_harness.py``. Special-value results are compared
through ``view_as_real``: ``assert_close`` counts a complex value as NaN when either part
is, so (inf+nanj) would pass for (nan+nanj). Signs of zeros are not compared.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
import test_complex
from conftest import DEV, assert_same
from test_complex import LINALG_TOL, _hpd, _with_rhs
from lowering_harness import (BOOL, C64, C128, F32, F64, Case, assert_torchs_error,
                              lowering_tests, rnd, shape)

pytestmark = [pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter"),
              pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated"),
              pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")]
aten = torch.ops.aten
CASES: list = []
COVERS: dict = {}   # case name -> the ATen ops it is there to check
INF, NAN = math.inf, math.nan
# torch's complex64 log1p gives NaN for a subnormal argument with a nonzero imaginary part
# (torch.log1p(torch.tensor(1e-44+1e-44j)): NaN), so logaddexp of parts ~90 apart does
# too; the lazy result is the exact one. Special values keep clear of that range.
_PARTS = [0.0, -0.0, 1.0, -1.5, 2.0, 30.0, -30.0, INF, -INF, NAN]


def case(name, fn, make, ops=(), **kw):
    CASES.append(Case(name, fn, make, **kw))
    COVERS[name] = ops


def special(dt, parts=_PARTS):
    """Every pair of ``parts`` as (real, imaginary): a flat complex tensor."""
    re = torch.tensor([a for a in parts for _ in parts], dtype=F64)
    im = torch.tensor([b for _ in parts for b in parts], dtype=F64)
    return torch.complex(re, im).to(dt)


def pairs(dt):
    """Every special value against every other (x, y)."""
    s = special(dt)
    return [s.repeat_interleave(len(s)), s.repeat(len(s))]


def parts(*outs):
    """Results as their real views (each part compared, NaNs included)."""
    return tuple(torch.view_as_real(o) if o.is_complex() else o for o in outs)


SIZES = [(), (1,), (3, 4), (2, 1, 5)]   # sizes of elementwise inputs


for dt in (C64, C128):
    n = str(dt)[6:]
    # ---- elementwise: logaddexp, silu ----------------------------------------------
    for k, s in enumerate(SIZES):
        case(f"logaddexp-{k}-{n}", torch.logaddexp,
             lambda g, r, s=s, dt=dt: [rnd(g, s, dt), rnd(g, s, dt)],
             (aten.logaddexp.default,), grad=True, rtol=1e-4, atol=1e-5)
        case(f"silu-{k}-{n}", F.silu, lambda g, r, s=s, dt=dt: [rnd(g, s, dt)],
             (aten.silu.default,), rtol=1e-4, atol=1e-5)   # (torch: no complex gradient)
    # sgn is +0 at both zeros, as torch's (XLA's sign kept -0.0's sign); the signs of the
    # parts of finite values (torch's complex64 kernel gives NaN+NaNj at an infinity, its
    # complex128 one NaN+0j: left to the ISA, not compared)
    case(f"sgn-signed-zeros-{n}", lambda z: torch.signbit(torch.view_as_real(torch.sgn(z))),
         lambda g, r, dt=dt: [special(dt, [0.0, -0.0, 1.0, -1.5])], (aten.sgn.default,))
    case(f"logaddexp-broadcast-{n}", lambda a, b: (torch.logaddexp(a, b),
                                                   torch.logaddexp(b, a[0])),
         lambda g, r, dt=dt: [rnd(g, (3, 1), dt, -40, 40), rnd(g, (1, 4), dt, -40, 40)],
         (aten.logaddexp.default,), grad=True, rtol=1e-4, atol=1e-5)
    case(f"logaddexp-special-{n}", lambda a, b: parts(torch.logaddexp(a, b)),
         lambda g, r, dt=dt: pairs(dt), (aten.logaddexp.default,), rtol=1e-4, atol=1e-5)
    case(f"silu-special-{n}", lambda a: parts(F.silu(a)),
         lambda g, r, dt=dt: [special(dt, _PARTS + [100.0, -100.0, 1e10, -1e10])],
         (aten.silu.default,), rtol=1e-4, atol=1e-5)
    # ---- reductions: logsumexp, vector_norm with a dtype -----------------------------
    case(f"logsumexp-{n}", lambda a, b, c: (torch.logsumexp(a, 0), torch.logsumexp(b, 0),
                                            torch.logsumexp(b, 1, keepdim=True),
                                            torch.logsumexp(c, (0, 2)),
                                            torch.logsumexp(c, -1, keepdim=True),
                                            torch.logsumexp(c[:, :0], 1)),
         lambda g, r, dt=dt: [rnd(g, (), dt), rnd(g, shape(r, 2, 1, 6), dt, -30, 30),
                              rnd(g, shape(r, 3, 1, 5), dt)],
         (aten.logsumexp.default,), grad=True, rtol=1e-4, atol=1e-5)
    case(f"logsumexp-special-{n}", lambda a, b, s: parts(
        torch.logsumexp(torch.stack([a, b], 1), 1),
        torch.logsumexp(torch.stack([a, b, b.flip(0)], 0), 0),
        torch.logsumexp(s.reshape(10, 10), 1), torch.logsumexp(s.reshape(10, 10), 0)),
        lambda g, r, dt=dt: pairs(dt) + [special(dt)], (aten.logsumexp.default,),
        rtol=1e-4, atol=1e-5)
    wide = C128   # (torch refuses a narrower dtype)
    # (no gradient of ord=inf: torch's compares |x| with the wider norm, never equal,
    # and its gradient is NaN throughout)
    case(f"vector_norm-dtype-{n}", lambda a, b, c, w=wide: (
        torch.linalg.vector_norm(a, dtype=w), torch.linalg.vector_norm(b, 1, dtype=w),
        torch.linalg.vector_norm(c, 3, 1, keepdim=True, dtype=w),
        torch.linalg.vector_norm(b, 0, dtype=w), torch.linalg.vector_norm(c, dtype=b.dtype)),
        lambda g, r, dt=dt: [rnd(g, (), dt), rnd(g, shape(r, 2, 1, 6), dt),
                             rnd(g, shape(r, 3, 1, 5), dt)],
        (aten.linalg_vector_norm.default,), grad=True, rtol=1e-4, atol=1e-5)
    case(f"vector_norm-dtype-special-{n}", lambda a, c, w=wide: tuple(
        torch.linalg.vector_norm(a.reshape(10, 10), o, 1, dtype=w)
        for o in (2, 1, INF, -INF, 0, 3)) + (
            torch.linalg.vector_norm(c, INF, (0, 2), dtype=w), a.reshape(10, 10).abs()),
        lambda g, r, dt=dt: [special(dt), rnd(g, shape(r, 3, 1, 5), dt)],
        (aten.linalg_vector_norm.default, aten.abs.default), rtol=1e-4, atol=1e-5)
    # ---- matmul: addbmm ------------------------------------------------------------
    for k, (b, i, j, m) in enumerate([(1, 1, 1, 1), (3, 2, 4, 5), (2, 3, 1, 4), (0, 2, 2, 3)]):
        case(f"addbmm-{k}-{n}", lambda x, a, c: (torch.addbmm(x, a, c),
                                                 torch.addbmm(x, a, c, beta=0.5j, alpha=2 - 1j),
                                                 torch.addbmm(x[0], a, c, beta=0)),
             lambda g, r, dt=dt, b=b, i=i, j=j, m=m: [rnd(g, (i, m), dt), rnd(g, (b, i, j), dt),
                                                      rnd(g, (b, j, m), dt)],
             (aten.addbmm.default,), grad=True, rtol=1e-4, atol=1e-5)
    # ---- indexing: masked_scatter, put, take, scatter(reduce=) -----------------------
    for k, s in enumerate([(), (1,), (3, 4), (2, 3, 4)]):
        case(f"masked_scatter-{k}-{n}", lambda x, m, src: (
            x.masked_scatter(m, src), x.masked_scatter(m[..., :1] if m.ndim else m, src)),
            lambda g, r, s=s, dt=dt: [rnd(g, s, dt), rnd(g, s, BOOL),
                                      rnd(g, (max(math.prod(s), 1) + 1,), dt)],
            (aten.masked_scatter.default, aten.masked_scatter_backward.default), grad=(0, 2))
        case(f"put-take-{k}-{n}", lambda x, i, src: (
            x.put(i, src), x.put(i, src, accumulate=True), x.take(i), x.take(i[:0]),
            x.take(i.reshape(-1, 1))),
            lambda g, r, s=s, dt=dt: [rnd(g, s, dt),
                                      torch.randint(-math.prod(s), math.prod(s), (5,),
                                                    generator=g),
                                      rnd(g, (5,), dt)],
            (aten.put.default, aten.take.default), grad=(0, 2))
    case(f"put-take-special-{n}", lambda x, i, src: parts(
        x.put(i, src), x.put(i, src, accumulate=True), x.take(i)),
        lambda g, r, dt=dt: [special(dt), torch.randint(-100, 100, (60,), generator=g),
                             special(dt)[torch.randperm(100, generator=g)[:60]]],
        (aten.put.default, aten.take.default))
    for k, (s, ix) in enumerate([((1,), (1,)), ((4, 5), (2, 3)), ((2, 3, 4), (2, 2, 3))]):
        case(f"scatter-reduce-{k}-{n}", lambda x, i, src: (
            x.scatter(0, i, src, reduce="add"), x.scatter(-1, i, src, reduce="multiply"),
            x.scatter(0, i, 2 - 1j, reduce="add"), x.scatter(-1, i, 0.5j, reduce="multiply")),
            lambda g, r, s=s, ix=ix, dt=dt: [rnd(g, s, dt),
                                             torch.randint(0, min(s[0], s[-1]), ix, generator=g),
                                             rnd(g, ix, dt)],
            (aten.scatter.reduce, aten.scatter.value_reduce))

# ---- the backward of replication padding (from ``F.pad(mode="replicate")``'s gradient) -------
_PAD_BACKWARD = (aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
                 aten.replication_pad3d_backward.default)
for dt in (C64, C128):
    n = str(dt)[6:]
    for d, pad in ((1, (2, 1)), (2, (1, -1, 2, 0)), (3, (0, 1, 1, 2, -1, 1))):
        case(f"replicate-pad-{d}d-{n}", lambda x, pad=pad: F.pad(x, pad, mode="replicate"),
             lambda g, r, d=d, dt=dt: [rnd(g, (2, 2) + tuple(r.randint(2, 5) for _ in range(d)),
                                           dt)],
             (_PAD_BACKWARD[d - 1],), grad=True)

# ---- linalg: the deprecated cholesky, cholesky_inverse, triangular_solve -------------------
# (matrices as test_complex.py makes them: batches of 0-2 dims, 1 x 1 to 4 x 4)
for dt in (C64, C128):
    n, tol = str(dt)[6:], LINALG_TOL[dt]
    for upper in (False, True):
        case(f"cholesky-upper={upper}-{n}", lambda a, u=upper: torch.cholesky(a, upper=u),
             lambda g, r, dt=dt: [_hpd(g, r, dt)], (aten.cholesky.default,), grad=True, **tol)
        case(f"cholesky_inverse-upper={upper}-{n}",
             lambda f, u=upper: torch.cholesky_inverse(f, upper=u),
             lambda g, r, dt=dt, u=upper: [torch.linalg.cholesky(_hpd(g, r, dt), upper=u)],
             (aten.cholesky_inverse.default,), grad=True, **tol)
    for upper, transpose, unit, rhs in ((True, False, False, "matrix"),
                                        (True, True, False, "broadcast"),
                                        (False, True, True, "matrix"),
                                        (False, False, False, "broadcast")):
        case(f"triangular_solve-{upper}-{transpose}-{unit}-{rhs}-{n}",
             lambda a, b, u=upper, t=transpose, un=unit: torch.triangular_solve(
                 b, a, upper=u, transpose=t, unitriangular=un),
             _with_rhs(dt, rhs), (aten.triangular_solve.default,), grad=True, **tol)
    case(f"linalg-1x1-{n}", lambda a, b: (torch.cholesky(a), torch.cholesky_inverse(a, True),
                                          *torch.triangular_solve(b, a, transpose=True)),
         lambda g, r, dt=dt: [rnd(g, (1, 1), dt).abs().to(dt) + 1, rnd(g, (1, 3), dt)],
         (aten.cholesky.default, aten.cholesky_inverse.default, aten.triangular_solve.default),
         grad=True, **tol)

(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)

# test_complex.py's check that every op in COMPLEX_OK has a case counts these cases too,
# and the random fills (checked by their statistics, below)
test_complex.COVERS.update({f"more: {k}": v for k, v in COVERS.items()})
test_complex.COVERS["more: random fills"] = (aten.normal_.default, aten.uniform_.default)


def test_every_op_added_here_has_a_case_for_both_dtypes():
    added = {aten.addbmm.default, aten.masked_scatter.default, aten.put.default,
             aten.take.default, aten.scatter.reduce, aten.scatter.value_reduce,
             aten.logaddexp.default, aten.silu.default, aten.logsumexp.default,
             aten.linalg_vector_norm.default, aten.masked_scatter_backward.default,
             aten.cholesky.default, aten.cholesky_inverse.default,
             aten.triangular_solve.default, *_PAD_BACKWARD}
    for n in ("complex64", "complex128"):
        covered = set().union(*(ops for k, ops in COVERS.items() if k.endswith(n)))
        assert added <= covered, sorted(map(str, added - covered))


# ---- errors torch raises --------------------------------------------------------------


@pytest.mark.parametrize("x, dtype", [(C64, F32), (C128, F64), (C128, C64), (F32, C64),
                                      (F64, F32)],
                         ids=["real-dtype", "real-dtype-128", "narrower", "complex-dtype",
                              "narrower-real"])
def test_vector_norm_refuses_the_dtypes_torch_refuses(x, dtype):
    """A real dtype for complex values, a complex one for real values, a narrower one."""
    assert_torchs_error(lambda t: torch.linalg.vector_norm(t, dtype=dtype),
                        [rnd(torch.Generator().manual_seed(0), (3,), x)])
    assert lr.metrics()["fallback_ops"] == {}


def test_a_complex_silu_has_no_gradient_as_in_torch():
    x = rnd(torch.Generator().manual_seed(1), (3,), C64).to(DEV).requires_grad_()
    with pytest.raises(RuntimeError, match="does not support automatic differentiation"):
        F.silu(x)


# ---- random fills: torch's distribution of each part -----------------------------------


@pytest.mark.parametrize("dt", [C64, C128])
def test_random_complex_fills_draw_both_parts_as_torch_does(dt):
    """torch fills the real view of a complex tensor: ``normal_(mean, std)`` draws each
    part from N(mean, std^2 / 2) (so |z - mean(1+i)|^2 has mean std^2), ``uniform_(a, b)``
    each part from U(a, b). Values come from the lazy stream, so only their statistics
    are compared (20000 draws: the bounds are over 6 standard errors wide)."""
    lr.manual_seed(0)
    lr.reset_metrics()
    n = 20000
    draws = (torch.randn(n, dtype=dt, device=DEV), torch.randn_like(torch.empty(n, dtype=dt,
                                                                                device=DEV)),
             torch.empty(n, dtype=dt, device=DEV).normal_(2.0, 3.0),
             torch.rand(n, dtype=dt, device=DEV),
             torch.empty(n, dtype=dt, device=DEV).uniform_(-1.0, 3.0),
             torch.empty((), dtype=dt, device=DEV).normal_(), torch.rand(1, dtype=dt, device=DEV))
    z, z_like, zn, u, uab, z0, u1 = [torch.view_as_real(d).cpu() for d in draws]
    assert lr.metrics()["fallback_ops"] == {}
    assert all(d.dtype == dt for d in draws) and draws[5].shape == () and draws[6].shape == (1,)
    part = F32 if dt == C64 else F64
    for d, mean, std in ((z, 0.0, 0.5 ** 0.5), (z_like, 0.0, 0.5 ** 0.5),
                         (zn, 2.0, 3 * 0.5 ** 0.5), (u, 0.5, 12 ** -0.5),
                         (uab, 1.0, 4 * 12 ** -0.5)):
        assert d.dtype == part
        assert torch.allclose(d.mean(0), torch.tensor(mean, dtype=part), atol=6 * std / n ** 0.5)
        assert torch.allclose(d.std(0), torch.tensor(std, dtype=part), rtol=0.03)
    assert float(torch.corrcoef(z.T)[0, 1].abs()) < 0.05   # the parts are independent
    assert bool(((u >= 0) & (u < 1)).all()) and bool(((uab >= -1) & (uab < 3)).all())
    assert bool(((u1 >= 0) & (u1 < 1)).all()) and bool(z0.isfinite().all())
    assert not torch.equal(z, z_like) and not torch.equal(z[:, 0], z[:, 1])


def test_random_fills_of_complex_tensors_are_deterministic_for_a_seed():
    def draw():
        lr.manual_seed(7)
        return (torch.randn(5, dtype=C64, device=DEV).cpu(),
                torch.empty(4, dtype=C128, device=DEV).uniform_(-2, 2).cpu())
    a, b = draw(), draw()
    assert_same(a, b, 0, 0)


# ---- dynamic dims ---------------------------------------------------------------------


def test_complex_logsumexp_and_elementwise_ops_along_a_padded_dim():
    """Padding of a complex logsumexp holds -inf + 0j (the real "min" fill has no complex
    form: the graph failed to trace)."""
    lr.reset_metrics()
    for n in (5, 7, 6):   # one bucket: 8
        x = rnd(torch.Generator().manual_seed(n), (n, 8), C64)
        xl = x.to(DEV)
        lr.mark_dynamic(xl, 0)
        f = lambda t: (torch.logsumexp(t, 0), torch.logsumexp(t, (0, 1)),  # noqa: E731
                       torch.logsumexp(t, 1), torch.logaddexp(t, t * 2j), F.silu(t),
                       torch.linalg.vector_norm(t, 3, 0, dtype=C128))
        assert_same(f(xl), f(x), 1e-4, 1e-5)
    m = lr.metrics()
    assert m["fallback_ops"] == {}
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["compile_reasons"]
