"""igamma / igammac (torch.special.gammainc / gammaincc) against eager torch: torch's
algorithm (calc_igamma / calc_igammac: series, continued fraction, asymptotic expansion)
at random sizes with broadcasting, a from 1e-3 to 1e3, x near a (the branch boundaries:
|x - a| / a against 0.3 and 4.5 / sqrt(a), x against 0.5, 1, 1.1 and a), far below and far
above a, the ends of the domain (0, -0, negative, inf, NaN, a == 0), float64, float32 and
16-bit, integer promotion, a 0-d operand, the in-place and out= forms, and the gradient
with respect to x.

All cases are recorded first and computed by one barrier (values, then gradients)."""

import torch

from lowering_harness import BF16, F16, F32, F64, I32, I64, Case, lowering_tests, rnd, shape

S = torch.special
CASES: list = []
INF, NAN = float("inf"), float("nan")
# float64: within about 1e-12 of torch (C's lgamma of a ~ 1e3 rounds at 1e-12 of the
# exponent; XLA flushes subnormal results to zero, hence the absolute tolerance). float32:
# glibc's float lgamma is not correctly rounded, and an ulp of a log(x) ~ 700 is 6e-5 of
# the result (torch's own float32 values are no closer to the function there).
TOL = {F64: dict(rtol=2e-12, atol=1e-290), F32: dict(rtol=1e-4, atol=1e-30),
       F16: dict(rtol=1e-2, atol=1e-3), BF16: dict(rtol=2e-2, atol=1e-2)}
FNS = (("igamma", torch.igamma), ("igammac", torch.igammac))


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def around(g, r, dtype):
    """a from 1e-3 to 1e3 (a column) and x in every region of torch's branches (a row of
    ratios x / a: near 1 within 4.5 / sqrt(a) and 0.3, far below and above)."""
    n = shape(r, 1, 4, 9)[0]
    a = 10 ** rnd(g, (n, 1), F64, -3, 3)
    ratio = torch.cat([1 + rnd(g, (6,), F64, -0.35, 0.35), 1 + rnd(g, (4,), F64, -0.05, 0.05),
                       10 ** rnd(g, (4,), F64, -3, 1.5), torch.tensor([1.0, 0.5, 2.0])])
    return [a.to(dtype), (a * ratio).to(dtype)]


def small_x(g, r, dtype):
    """x at torch's switches 0.5, 1, 1.1 (and -0.4 / log x against a), a small and large."""
    x = torch.tensor([0.1, 0.3, 0.5, 0.50001, 0.7, 0.9, 1.0, 1.00001, 1.05, 1.1, 1.1000001,
                      1.2, 2.0, 3.0], dtype=F64)
    a = torch.cat([10 ** rnd(g, (shape(r, 1, 3, 6)[0],), F64, -3, 1),
                   torch.tensor([0.2, 0.5, 0.577, 1.0, 1.1, 2.0, 25.0])])
    return [a[:, None].to(dtype), x.to(dtype)]


EDGES = (0.0, -0.0, -1.0, 1.0, 1e-300, 1e-8, 20.0, 200.0, 1e4, INF, -INF, NAN)


def edges(g, r, dtype):
    """Every pair of edge values: the ends of the domain, in torch's order."""
    e = torch.tensor(EDGES, dtype=F64).to(dtype)
    return [e[:, None], e[None]]


def random_pairs(g, r, dtype):
    """Broadcast random sizes: a (n, 1) and x (m,) log-uniform."""
    n, m = shape(r, 2, 2, 30)
    return [(10 ** rnd(g, (n, 1), F64, -3, 3)).to(dtype),
            (10 ** rnd(g, (m,), F64, -4, 3.5)).to(dtype)]


def regions(g, r, dtype):
    """``around``, ``small_x``, ``edges`` and ``random_pairs`` in one pair of flat tensors:
    one op in the graph (each igamma op costs 2.5-3 s of XLA compile here: its loops)."""
    pairs = [torch.broadcast_tensors(*make(g, r, dtype))
             for make in (around, small_x, edges, random_pairs)]
    return [torch.cat([a.reshape(-1) for a, _ in pairs]),
            torch.cat([x.reshape(-1) for _, x in pairs])]


for _name, _fn in FNS:
    for _dt in (F64, F32):
        case(f"{_name}-regions-{str(_dt)[6:]}", _fn, lambda g, r, dt=_dt: regions(g, r, dt),
             **TOL[_dt])
    # large a: the asymptotic expansion within 4.5 / sqrt(a), the series and continued
    # fraction just outside
    case(f"{_name}-large-a", _fn, lambda g, r: [
        torch.tensor([[250.0], [1000.0], [5000.0]], dtype=F64),
        torch.tensor([0.7, 0.85, 0.9, 0.99, 1.0, 1.01, 1.1, 1.2, 1.4]) * torch.tensor(
            [[250.0], [1000.0], [5000.0]], dtype=F64)], **TOL[F64])
    for _dt in (F16, BF16):
        case(f"{_name}-{str(_dt)[6:]}", _fn, lambda g, r, dt=_dt: [
            rnd(g, (7, 1), dt, 0.1, 20), rnd(g, (5,), dt, 0.0, 30)], **TOL[_dt])
    # integers promote with a floating operand (torch refuses two integer tensors)
    case(f"{_name}-int-a", _fn, lambda g, r: [rnd(g, (4, 1), I64, 0, 8),
                                               rnd(g, (5,), F32, 0, 9)], **TOL[F32])
    case(f"{_name}-int-x-f64", _fn, lambda g, r: [rnd(g, (6,), F64, 0.1, 9),
                                                   rnd(g, (6,), I32, 0, 9)], **TOL[F64])
    # a 0-d operand: it does not promote a float32 tensor
    case(f"{_name}-0d-x", lambda a, f=_fn: f(a, torch.tensor(2.5, dtype=F64).to(a.device)),
         lambda g, r: [rnd(g, (5,), F32, 0.1, 6)], **TOL[F32])
    case(f"{_name}-0d-a", _fn, lambda g, r: [torch.tensor(3.0, dtype=F64),
                                              rnd(g, (2, 3), F64, 0, 8)], **TOL[F64])
    case(f"{_name}-f32-f64", _fn, lambda g, r: [rnd(g, (3, 1), F32, 0.1, 5),
                                                 rnd(g, (4,), F64, 0.1, 5)], **TOL[F64])
# past the padded buckets (4096 elements): computed at its own shape
case("igamma-unpadded", torch.igamma, lambda g, r: [10 ** rnd(g, (70, 1), F64, -2, 2),
                                                    10 ** rnd(g, (70,), F64, -2, 2.5)],
     **TOL[F64])
case("gammainc", S.gammainc, lambda g, r: around(g, r, F64), **TOL[F64])
case("gammaincc", S.gammaincc, lambda g, r: around(g, r, F64), **TOL[F64])
# the in-place and out= forms
case("igamma_", lambda a, x: a.clone().igamma_(x), lambda g, r: [
    rnd(g, (4, 5), F64, 0.1, 20), rnd(g, (5,), F64, 0, 30)], **TOL[F64])
case("igammac_", lambda a, x: a.clone().igammac_(x), lambda g, r: [
    rnd(g, (4, 5), F32, 0.1, 20), rnd(g, (4, 5), F32, 0, 30)], **TOL[F32])
case("gammainc-out", lambda a, x: S.gammainc(a, x, out=torch.empty_like(a)), lambda g, r: [
    rnd(g, (6,), F64, 0.1, 20), rnd(g, (6,), F64, 0, 30)], **TOL[F64])

# ---- gradients: with respect to x only (torch has none for a) --------------------------------

for _name, _fn in FNS:
    case(f"{_name}-grad", _fn, lambda g, r: [rnd(g, (4, 1), F64, 0.2, 30),
                                              rnd(g, (5,), F64, 0.1, 40)], grad=(1,), **TOL[F64])
    case(f"{_name}-grad-f32", _fn, lambda g, r: [rnd(g, (6,), F32, 0.5, 10),
                                                 rnd(g, (6,), F32, 0.1, 12)],
         grad=(1,), rtol=1e-3, atol=1e-5)


(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)
