"""torch.special's functions, polygamma, nextafter, signbit and frexp against eager torch:
values at random sizes in every dtype torch's CPU kernels accept (edge values included:
0, -0, poles, ends of the domains, large arguments, inf, NaN), type promotion of integer
and scalar arguments, and gradients where torch defines them.

All cases are recorded first and computed by one barrier (values, then gradients)."""

import torch

from lowering_harness import BF16, BOOL, F16, F32, F64, I32, I64, Case, lowering_tests, rnd, shape

S = torch.special
CASES: list = []
INF, NAN = float("inf"), float("nan")
# tolerances by dtype: torch's float32 kernels and these lowerings round differently
TOL = {F64: dict(rtol=1e-10, atol=1e-12), F32: dict(rtol=1e-4, atol=1e-5),
       F16: dict(rtol=1e-2, atol=1e-2), BF16: dict(rtol=2e-2, atol=2e-2)}


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def mixed(g, r, dtype, scale=3.0, edges=()):
    """Random values at a random size, some at ``scale`` times more, and ``edges``."""
    n = shape(r, 1, 20, 40)[0]
    x = rnd(g, (n,), F64, -scale, scale) * torch.where(torch.rand(n, generator=g) < 0.2, 10, 1)
    return torch.cat([x, torch.tensor(edges, dtype=F64)]).to(dtype)


EDGES = (0.0, -0.0, 1.0, -1.0, 2.0, -2.5, 1e-8, INF, -INF, NAN)

# ---- unary functions on the real line ------------------------------------------------------

for _name, _fn, _scale, _dtypes in (
        ("i0e", S.i0e, 10, (F32, F64, F16, BF16)), ("i1e", S.i1e, 10, (F32, F64, F16, BF16)),
        ("erfcx", S.erfcx, 10, (F32, F64)), ("log_ndtr", S.log_ndtr, 10, (F32, F64)),
        ("bessel_j0", S.bessel_j0, 10, (F32, F64)), ("bessel_j1", S.bessel_j1, 10, (F32, F64)),
        ("bessel_y0", S.bessel_y0, 10, (F32, F64)), ("bessel_y1", S.bessel_y1, 10, (F32, F64)),
        ("modified_i0", S.modified_bessel_i0, 10, (F32, F64)),
        ("modified_i1", S.modified_bessel_i1, 10, (F32, F64)),
        ("modified_k0", S.modified_bessel_k0, 5, (F32, F64)),
        ("modified_k1", S.modified_bessel_k1, 5, (F32, F64)),
        ("scaled_k0", S.scaled_modified_bessel_k0, 5, (F32, F64)),
        ("scaled_k1", S.scaled_modified_bessel_k1, 5, (F32, F64)),
        ("spherical_j0", S.spherical_bessel_j0, 5, (F32, F64)),
        ("airy_ai", S.airy_ai, 3, (F32, F64))):
    for _dt in _dtypes:
        case(f"{_name}-{str(_dt)[6:]}", _fn,
             lambda g, r, dt=_dt, s=_scale: [mixed(g, r, dt, s, EDGES + (5.0, 8.0, 30.0))],
             **TOL[_dt])
    case(f"{_name}-int", _fn, lambda g, r: [rnd(g, (3, 4), I64, -6, 7)], **TOL[F32])

# arguments where torch's rational approximations change (Bessel functions at 5, Airy at
# +-2.09 and 103.892, K at 2, erfcx's continued fraction at 25), and large ones
_SWITCHES = (4.999, 5.0, 5.001, 2.09, -2.09, 2.0899, -2.0901, 1.999, 2.0, 2.001, 8.3203,
             24.9, 25.0, 26.6, 27.0, 49.0, 51.0, 103.8, 103.9, 1e3, -1e3, 1e-6, 1e-5, 700.0)
for _name, _fn in (("bessel_j0", S.bessel_j0), ("bessel_y1", S.bessel_y1),
                   ("airy_ai", S.airy_ai), ("modified_k0", S.modified_bessel_k0),
                   ("modified_k1", S.modified_bessel_k1),
                   ("scaled_k0", S.scaled_modified_bessel_k0),
                   ("erfcx", S.erfcx), ("i1e", S.i1e)):
    case(f"{_name}-switches", _fn, lambda g, r: [torch.tensor(_SWITCHES, dtype=F64)],
         rtol=1e-9, atol=1e-12)
case("airy_ai-oscillating-f64", S.airy_ai, lambda g, r: [rnd(g, (30,), F64, -200, -2)],
     rtol=1e-8, atol=1e-10)
case("ndtri-f64", S.ndtri, lambda g, r: [torch.cat([
    rnd(g, (shape(r, 1, 20, 40)[0],), F64, 0, 1), 10.0 ** -rnd(g, (10,), F64, 1, 300),
    torch.tensor([0.0, 1.0, 0.5, -0.1, 1.1, 1 - 1e-16, NAN], dtype=F64)])], **TOL[F64])
case("ndtri-f32", S.ndtri, lambda g, r: [torch.cat([
    rnd(g, (shape(r, 1, 20, 40)[0],), F32, 0, 1), torch.tensor([0.0, 1.0, 1e-30, NAN])])],
    **TOL[F32])
case("ndtri-int", S.ndtri, lambda g, r: [torch.tensor([0, 1, 2])])
case("erfcx-bool", S.erfcx, lambda g, r: [torch.tensor([True, False])])

# ---- polygamma, zeta ---------------------------------------------------------------------

POLE_EDGES = (0.0, -0.0, -1.0, -3.0, -2.5, -0.5, 0.5, 1.0, 10.0, 1e-8, 1e20, INF, -INF, NAN)
for _n in range(5):
    for _dt in (F64, F32):
        # near the poles at negative integers the terms cancel: looser for double
        case(f"polygamma{_n}-{str(_dt)[6:]}", lambda x, n=_n: torch.polygamma(n, x),
             lambda g, r, dt=_dt: [mixed(g, r, dt, 5, POLE_EDGES)],
             **(dict(rtol=1e-9, atol=1e-9) if _dt == F64 else dict(rtol=1e-3, atol=1e-4)))
case("polygamma1-f16", lambda x: torch.polygamma(1, x), lambda g, r: [rnd(g, (7,), F16, 0.1, 4)],
     **TOL[F16])
case("polygamma2-int", lambda x: torch.polygamma(2, x), lambda g, r: [rnd(g, (5,), I64, 1, 6)],
     **TOL[F32])
for _dt in (F64, F32):
    case(f"zeta-{str(_dt)[6:]}", S.zeta, lambda g, r, dt=_dt: [
        rnd(g, (4, 1), dt, 1, 6), rnd(g, (1, 5), dt, 0.1, 5)], **TOL[_dt])
    # q <= 0: integer x sums the terms up to q > 0, others are NaN; integer q are poles
    case(f"zeta-negative-q-{str(_dt)[6:]}", S.zeta, lambda g, r, dt=_dt: [
        torch.tensor([[2.0], [3.0], [4.0], [2.5], [1.0], [0.5], [INF]], dtype=dt),
        torch.tensor([-4.25, -2.5, -0.5, 0.0, -3.0, 0.5, 1.0, 2.0, NAN], dtype=dt)],
        rtol=1e-9 if _dt == F64 else 1e-5, atol=1e-9)
case("zeta-scalar-q", lambda x: S.zeta(x, 2.5), lambda g, r: [rnd(g, (6,), F64, 1.1, 8)],
     **TOL[F64])
case("zeta-scalar-x", lambda q: S.zeta(3, q), lambda g, r: [rnd(g, (6,), F32, 0.1, 8)],
     **TOL[F32])
case("zeta-int-f32-promotes", S.zeta, lambda g, r: [
    rnd(g, (5,), I64, 2, 5), rnd(g, (5,), F32, 0.5, 3)], **TOL[F32])

# ---- bits: nextafter, signbit, frexp -------------------------------------------------------

BIT_EDGES = (0.0, -0.0, 1.0, -1.0, 1e-310, -1e-40, 3e-6, 1e30, INF, -INF, NAN)
for _dt in (F64, F32, F16, BF16):
    case(f"nextafter-{str(_dt)[6:]}", torch.nextafter, lambda g, r, dt=_dt: [
        mixed(g, r, dt, 3, BIT_EDGES)[:20], mixed(g, r, dt, 3, BIT_EDGES).flip(0)[:20]],
        rtol=0, atol=0)
    case(f"frexp-{str(_dt)[6:]}", torch.frexp,
         lambda g, r, dt=_dt: [mixed(g, r, dt, 1e3, BIT_EDGES)], rtol=0, atol=0)
    case(f"signbit-{str(_dt)[6:]}", torch.signbit,
         lambda g, r, dt=_dt: [mixed(g, r, dt, 3, BIT_EDGES)])
case("nextafter-f32-f64", torch.nextafter, lambda g, r: [
    rnd(g, (3, 1), F32), rnd(g, (4,), F64)], rtol=0, atol=0)
for _dt in (I64, I32, BOOL):
    case(f"signbit-{str(_dt)[6:]}", torch.signbit, lambda g, r, dt=_dt: [rnd(g, (6,), dt, -3, 3)])

# ---- orthogonal polynomials ----------------------------------------------------------------

POLYNOMIALS = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
               "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
               "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p")
# the ends of [-1, 1] (and [0, 1] for the shifted ones), points outside, NaN
# (not NaN: most of torch's kernels then return an uninitialized value)
X_EDGES = (-1.0, 1.0, 0.0, 0.5, -0.5, 1.5, -1.5, 2.0)
N_EDGES = (0.0, 1.0, 2.0, 5.0, 7.0, 9.0, 12.0, 20.0, -1.0, -3.0, 2.7, NAN, INF)


def poly_args(g, r, dtype):
    """x (column) and n (row): every x at every degree, degrees up to past the switch to
    the trigonometric forms, negative, fractional (truncated) and not finite."""
    x = torch.cat([rnd(g, (shape(r, 1, 3, 6)[0],), F64, -1.2, 1.2), torch.tensor(X_EDGES)])
    return [x.to(dtype)[:, None], torch.tensor(N_EDGES).to(dtype)[None]]


for _name in POLYNOMIALS:
    _fn = getattr(S, _name)
    for _dt in (F64, F32):
        case(f"{_name}-{str(_dt)[6:]}", _fn, lambda g, r, dt=_dt: poly_args(g, r, dt),
             **(TOL[F64] if _dt == F64 else dict(rtol=1e-4, atol=1e-4)))
    case(f"{_name}-n-scalar", lambda x, f=_fn: f(x, 6), lambda g, r: [rnd(g, (7,), F64, -2, 2)],
         **TOL[F64])
    case(f"{_name}-x-scalar", lambda n, f=_fn: f(0.3, n), lambda g, r: [
        torch.arange(-1, 11, dtype=I64)], **TOL[F32])
    case(f"{_name}-int-x", _fn, lambda g, r: [rnd(g, (3, 1), I64, -2, 3),
                                                torch.arange(4, dtype=I32)], **TOL[F32])
    case(f"{_name}-f16-x-f32-n", _fn, lambda g, r: [
        rnd(g, (4,), F16, -1, 1), torch.tensor([3.0])], **TOL[F32])
for _name in ("chebyshev_polynomial_t", "hermite_polynomial_h", "hermite_polynomial_he"):
    case(f"{_name}-nan", getattr(S, _name), lambda g, r: [
        torch.tensor([NAN, 0.5]), torch.tensor([[0.0], [1.0], [3.0], [9.0]])])
# large degrees: the recurrences run hundreds of steps; outside [-1, 1] they overflow
for _name in ("chebyshev_polynomial_t", "legendre_polynomial_p", "laguerre_polynomial_l",
              "hermite_polynomial_he"):
    case(f"{_name}-large-n", getattr(S, _name), lambda g, r: [
        torch.tensor([[0.3], [-0.999], [1.02], [-3.0]], dtype=F64),
        torch.tensor([100.0, 129.0, 600.0], dtype=F64)], rtol=1e-8, atol=1e-10)

# ---- gradients -----------------------------------------------------------------------------

for _n in range(4):
    case(f"polygamma{_n}-grad", lambda x, n=_n: torch.polygamma(n, x),
         lambda g, r: [rnd(g, shape(r), F64, 0.2, 6)], grad=True, **TOL[F64])
for _name, _fn, _lo, _hi in (("i0e", S.i0e, -8, 8), ("i1e", S.i1e, -8, 8),
                             ("ndtri", S.ndtri, 0.01, 0.99), ("erfcx", S.erfcx, -4, 30),
                             ("log_ndtr", S.log_ndtr, -30, 8), ("digamma", torch.digamma, -3, 6)):
    case(f"{_name}-grad", _fn, lambda g, r, lo=_lo, hi=_hi: [rnd(g, shape(r), F64, lo, hi)],
         grad=True, **TOL[F64])
    case(f"{_name}-grad-f32", _fn, lambda g, r, lo=_lo, hi=_hi: [rnd(g, shape(r), F32, lo, hi)],
         grad=True, rtol=1e-3, atol=1e-4)
case("frexp-grad", lambda x: torch.frexp(x)[0], lambda g, r: [rnd(g, (5,), F64)], grad=True)


(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)
