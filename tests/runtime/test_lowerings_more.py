"""Ops that used to run eagerly, now lowered: ``segment_reduce`` (and its backward),
``repeat_interleave`` (its length read on the host without ``output_size``), ``take``,
``bucketize`` (a 0-d input or a number), ``scatter(..., reduce=)`` of bools,
``linspace``/``logspace`` with 0-d tensor ends, in-place ``polygamma_``, a number shifted or
divided by a tensor, ``gcd`` and ``lcm``. Each against eager torch at random sizes and
several dtypes, gradients where torch has them.

All cases are recorded first and computed by one barrier (two XLA compiles: values, then
gradients); the error tests compile a graph each.
"""

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, assert_same, to_lazy
from lowering_harness import (BF16, BOOL, F16, F32, F64, I32, I64, U8, Case,
                              assert_torchs_error, lowering_tests, rnd, shape)

# (torch deprecates ``scatter``'s reduce= with a tensor source: the form tested here)
pytestmark = pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")

CASES: list = []
NAN = float("nan")
REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def lengths(g, n, parts, dtype=I64):
    """``parts`` random lengths summing to ``n``, one of them (at least) zero."""
    cuts = torch.randint(0, n + 1, (parts - 2,), generator=g).sort().values
    lens = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]))
    at = int(torch.randint(0, parts, (), generator=g))
    return torch.cat([lens[:at], torch.tensor([0]), lens[at:]]).to(dtype)


def with_nans(g, x, frac=0.2):
    x = x.clone()
    x[torch.rand(x.shape, generator=g) < frac] = NAN
    return x


def with_zeros(g, x, frac=0.3):
    x = x.clone()
    x[torch.rand(x.shape, generator=g) < frac] = 0
    return x


def ties(g, s, dtype=F32):
    """Few distinct values: equal maxima within segments."""
    return torch.randint(-2, 2, s, generator=g).to(dtype)


def segment(red, index="lengths", **kw):
    """``segment_reduce`` of (data, lengths), or of (data, offsets) with ``index="offsets"``."""
    return lambda x, idx: torch.segment_reduce(x, red, **{index: idx}, **kw)


# ---- segment_reduce -----------------------------------------------------------------------

for _red in REDUCTIONS:
    for _dt in (F32, F64):
        case(f"segment-{_red}-{_dt}", segment(_red),
             lambda g, r, dt=_dt: [rnd(g, (n := r.randint(1, 12),) + shape(r, 1), dt),
                                   lengths(g, n, r.randint(2, 6))], grad=(0,))
    case(f"segment-{_red}-1d-initial", segment(_red, initial=0.5),
         lambda g, r: [rnd(g, (n := r.randint(1, 12),)), lengths(g, n, r.randint(2, 6))],
         grad=(0,))
    case(f"segment-{_red}-offsets", segment(_red, index="offsets"),
         lambda g, r: [rnd(g, (n := r.randint(1, 12), 3), F64),
                       torch.cat([torch.tensor([0]), lengths(g, n, 4).cumsum(0)])], grad=(0,))
    # rows of their own lengths: axis 1 of [B, N, C], lengths [B, S]
    case(f"segment-{_red}-batched-axis1", segment(_red, axis=1),
         lambda g, r: [rnd(g, (b := r.randint(1, 4), n := r.randint(1, 9), 2)),
                       torch.stack([lengths(g, n, 4) for _ in range(b)])], grad=(0,))
    case(f"segment-{_red}-nan", segment(_red),
         lambda g, r: [with_nans(g, rnd(g, (n := r.randint(2, 12), 2))),
                       lengths(g, n, r.randint(2, 5))])
for _red in ("max", "min"):   # ties: torch splits a positive gradient among the ties only
    case(f"segment-{_red}-ties", segment(_red),
         lambda g, r: [ties(g, (n := r.randint(4, 12), 3)), lengths(g, n, 3)], grad=(0,))
    case(f"segment-{_red}-initial-wins", segment(_red, initial=0.0),
         lambda g, r: [ties(g, (n := r.randint(4, 12),)), lengths(g, n, 3)], grad=(0,))
case("segment-prod-zeros", segment("prod"),
     lambda g, r: [with_zeros(g, rnd(g, (n := r.randint(4, 12), 3))), lengths(g, n, 3)],
     grad=(0,))
case("segment-prod-zeros-nan-initial", segment("prod", initial=-1.5),
     lambda g, r: [with_nans(g, with_zeros(g, rnd(g, (n := r.randint(4, 12), 2)))),
                   lengths(g, n, 3)], grad=(0,))
case("segment-mean-int32-lengths", segment("mean"),
     lambda g, r: [rnd(g, (n := r.randint(1, 12), 2)), lengths(g, n, 4, I32)], grad=(0,))
case("segment-sum-axis-minus-2", segment("sum", axis=-2),
     lambda g, r: [rnd(g, (n := r.randint(1, 12), 3)), lengths(g, n, 3)], grad=(0,))
# unsafe: lengths summing to less than the axis (the rest is in no segment)
case("segment-max-unsafe-short", segment("max", unsafe=True),
     lambda g, r: [rnd(g, (n := r.randint(3, 12), 2)), lengths(g, n - 2, 3)], grad=(0,))
# offsets that start late and end early
case("segment-sum-offsets-inside", segment("sum", index="offsets"),
     lambda g, r: [rnd(g, (n := r.randint(3, 12),)),
                   torch.cat([torch.tensor([1]), 1 + lengths(g, n - 2, 3).cumsum(0)])],
     grad=(0,))
case("segment-mean-empty-data", segment("mean", initial=2.0),
     lambda g, r: [torch.empty(0, 3), torch.zeros(3, dtype=I64)])
# 16-bit types: torch rounds every partial sum to the type; the lowering sums in float32
# and rounds once. Segments of at most 8 values in [-1, 1]: partial sums stay below 8,
# each of torch's (<= 8) roundings off by at most half an ulp there (float16 2**-8,
# bfloat16 2**-5), hence atol 8 * 2**-9 = 0.016 and 8 * 2**-6 = 0.125.
for _dt, _atol in ((F16, 0.016), (BF16, 0.125)):
    for _red in REDUCTIONS:
        case(f"segment-{_red}-{_dt}", segment(_red),
             lambda g, r, dt=_dt: [rnd(g, (n := r.randint(1, 16), 2), dt, -1, 1),
                                   lengths(g, n, 3) if n <= 8 else torch.tensor([8, 0, n - 8])],
             rtol=1e-2, atol=_atol)

# ---- repeat_interleave with output_size (the indices come from the repeats' cumsum) -------


def reps(g, n, total, dtype=I64):
    """``n`` repeats (some zero) summing to ``total``."""
    return lengths(g, total, n, dtype) if n >= 2 else torch.tensor([total], dtype=dtype)


case("repeat_interleave-repeats-only", lambda rp: torch.repeat_interleave(
    rp, output_size=2 * rp.shape[0]), lambda g, r: [reps(g, n := r.randint(1, 9), 2 * n)])
case("repeat_interleave-int32", lambda rp: torch.repeat_interleave(
    rp, output_size=3 * rp.shape[0]), lambda g, r: [reps(g, n := r.randint(1, 9), 3 * n, I32)])
case("repeat_interleave-dim0", lambda x, rp: x.repeat_interleave(
    rp, dim=0, output_size=2 * x.shape[0]),
    lambda g, r: [rnd(g, (n := r.randint(1, 7), 3)), reps(g, n, 2 * n)], grad=(0,))
case("repeat_interleave-dim1-int64", lambda x, rp: x.repeat_interleave(
    rp, dim=1, output_size=2 * x.shape[1]),
    lambda g, r: [rnd(g, (2, n := r.randint(1, 7)), I64), reps(g, n, 2 * n)])
case("repeat_interleave-flat-f64", lambda x, rp: x.repeat_interleave(
    rp, output_size=x.numel() + 1),
    lambda g, r: [rnd(g, s := shape(r, 2), F64), reps(g, s[0] * s[1], s[0] * s[1] + 1)],
    grad=(0,))
case("repeat_interleave-0d-repeats", lambda x, rp: x.repeat_interleave(
    rp, dim=0, output_size=2 * x.shape[0]),
    lambda g, r: [rnd(g, (r.randint(1, 7), 2), BOOL), torch.tensor(2)])
# without output_size: the length (the repeats' sum) is read on the host, then the form above
case("repeat_interleave-no-size-repeats-only", torch.repeat_interleave,
     lambda g, r: [reps(g, n := r.randint(1, 9), 2 * n)])
case("repeat_interleave-no-size-int32", torch.repeat_interleave,
     lambda g, r: [reps(g, n := r.randint(2, 9), 3 * n, I32)])
case("repeat_interleave-no-size-all-zero", torch.repeat_interleave,
     lambda g, r: [torch.zeros(r.randint(1, 5), dtype=I64)])
case("repeat_interleave-no-size-dim0", lambda x, rp: x.repeat_interleave(rp, dim=0),
     lambda g, r: [rnd(g, (n := r.randint(1, 7), 3)), reps(g, n, 2 * n)], grad=(0,))
case("repeat_interleave-no-size-dim-minus-1-int64", lambda x, rp: torch.repeat_interleave(
    x, rp, -1), lambda g, r: [rnd(g, (2, n := r.randint(2, 7)), I64), reps(g, n, 2 * n, I32)])
case("repeat_interleave-no-size-flat-f64", lambda x, rp: x.repeat_interleave(rp),
     lambda g, r: [rnd(g, s := shape(r, 2), F64), reps(g, s[0] * s[1], s[0] * s[1] + 1)],
     grad=(0,))
case("repeat_interleave-no-size-length-1", lambda x, rp: x.repeat_interleave(rp, dim=1),
     lambda g, r: [rnd(g, (2, r.randint(1, 5))), torch.tensor([r.randint(0, 3)])], grad=(0,))
case("repeat_interleave-no-size-0d-repeats", lambda x, rp: x.repeat_interleave(rp),
     lambda g, r: [rnd(g, (r.randint(1, 5), 2), BF16), torch.tensor(3)], grad=(0,))
# pending repeats computed from data: folded on the host
case("repeat_interleave-no-size-pending", lambda x, rp: x.repeat_interleave(
    (rp * 2 - 1).clamp(min=0), dim=0),
    lambda g, r: [rnd(g, (n := r.randint(1, 7), 2)), torch.randint(0, 3, (n,), generator=g)],
    grad=(0,))

# ---- take (flat indices; torch's decomposition read a 0-d index on the host) -------------

for _dt in (F32, I64, BOOL):
    case(f"take-{_dt}", torch.take,
         lambda g, r, dt=_dt: [rnd(g, s := shape(r, 3), dt),
                               torch.randint(-(n := s[0] * s[1] * s[2]), n, shape(r, 2),
                                             generator=g)], grad=(0,) if _dt == F32 else False)
case("take-0d-index", torch.take,
     lambda g, r: [rnd(g, shape(r, 2)), torch.tensor(-1)], grad=(0,))
case("take-0d-self", torch.take, lambda g, r: [rnd(g, (), F64), torch.tensor([0, -1, 0])],
     grad=(0,))
case("take-empty-index", torch.take,
     lambda g, r: [rnd(g, shape(r, 2)), torch.empty(0, 2, dtype=I64)])

# ---- bucketize (a 0-d input or a number: torch's decomposition read them on the host) ----


def boundaries(g, n, dtype=F32):
    return rnd(g, (n,), dtype).sort().values


case("bucketize-0d", lambda v, b: (torch.bucketize(v, b), torch.bucketize(v, b, right=True),
                                   torch.bucketize(v, b, out_int32=True)),
     lambda g, r: [rnd(g, ()).round(), boundaries(g, r.randint(1, 9)).round()])
case("bucketize-scalar", lambda b: (torch.bucketize(0.5, b), torch.bucketize(1, b, right=True),
                                    torch.bucketize(-1.5, b, out_int32=True)),
     lambda g, r: [boundaries(g, r.randint(1, 9))])
case("bucketize-scalar-int-boundaries", lambda b: (torch.bucketize(0.5, b),
                                                   torch.bucketize(2, b, right=True)),
     lambda g, r: [boundaries(g, r.randint(1, 9), I64)])
case("bucketize-nd-nan-f64", lambda v, b: torch.bucketize(v, b, right=True),
     lambda g, r: [with_nans(g, rnd(g, shape(r, 3), F64)), boundaries(g, 6, F64)])
case("bucketize-empty-boundaries", lambda v, b: (torch.bucketize(v, b), torch.bucketize(2, b)),
     lambda g, r: [rnd(g, (3,)), torch.empty(0)])

# ---- scatter(..., reduce=) of bools: torch adds with an or, multiplies with an and -------


def scatter_args(g, r, dim):
    s = shape(r, 2, lo=2)
    i = list(s)
    i[1 - dim] = r.randint(1, s[1 - dim])
    i[dim] = r.randint(1, 2 * s[dim])   # duplicates
    index = torch.randint(0, s[dim], tuple(i), generator=g)
    return [rnd(g, s, BOOL), index, rnd(g, tuple(i), BOOL)]


for _red in ("add", "multiply"):
    for _dim in (0, 1):
        case(f"scatter-bool-{_red}-dim{_dim}",
             lambda x, i, s, d=_dim, red=_red: x.scatter(d, i, s, reduce=red),
             lambda g, r, d=_dim: scatter_args(g, r, d))
    for _v in (True, False, 0.5, 0.0):
        case(f"scatter-bool-{_red}-value-{_v}",
             lambda x, i, s, v=_v, red=_red: x.scatter(1, i, v, reduce=red),
             lambda g, r: scatter_args(g, r, 1))
    case(f"scatter-bool-{_red}-0d", lambda x, i, s, red=_red: x.scatter(0, i, s, reduce=red),
         lambda g, r: [rnd(g, (), BOOL), torch.zeros(3, dtype=I64), rnd(g, (3,), BOOL)])

# ---- linspace / logspace with 0-d tensor ends ------------------------------------------
# linspace is torch's kernel value for value (exact: tolerance 0). logspace is torch's
# float64 ``pow(base, start + step * i)`` stored in the type, the exponent exactly torch's;
# XLA's pow of a runtime base agreed with libm's bit for bit in every trial, but it is a
# libm-class function whose last bit no one promises: float results get one unit in the
# last place (rtol 2.3e-16 for float64, 1.2e-7 for float32), integers (truncated) none.
# Each call names its end's device: a factory's result is on the device it names (torch's
# default device, the CPU, otherwise).


def ends(g, r, dtype=F32, lo=-100, hi=100):
    return [rnd(g, (), dtype, lo, hi), rnd(g, (), dtype, lo, hi)]


for _steps in (0, 1, 2, 7, 100, 1001):
    case(f"linspace-f32-{_steps}",
         lambda a, b, n=_steps: torch.linspace(a, b, n, device=a.device),
         lambda g, r: ends(g, r), rtol=0, atol=0)
for _dt in (F64, F16, BF16, I64, I32, U8):
    case(f"linspace-{_dt}",
         lambda a, b, dt=_dt: torch.linspace(a, b, 37, dtype=dt, device=a.device),
         lambda g, r, dt=_dt: ends(g, r, F64, *((0, 250) if dt == U8 else (-100, 100))),
         rtol=0, atol=0)
case("linspace-int-ends", lambda a, b: (torch.linspace(a, b, 50, device=a.device),
                                        torch.linspace(a, b, 9, dtype=I64, device=a.device)),
     lambda g, r: ends(g, r, I64), rtol=0, atol=0)
case("linspace-tensor-scalar", lambda a, b: (torch.linspace(a, 17.25, 33, device=a.device),
                                             torch.linspace(-3, b, 20, dtype=F64,
                                                            device=b.device)),
     lambda g, r: ends(g, r), rtol=0, atol=0)
case("linspace-infinite-start", lambda a, b: torch.linspace(a, b, 5, device=a.device),
     lambda g, r: [torch.tensor(float("inf")), torch.tensor(1.0)], rtol=0, atol=0)
for _steps, _base in ((1, 10.0), (2, 2.0), (9, 10.0), (200, 3.5)):
    case(f"logspace-f32-{_steps}", lambda a, b, n=_steps, bs=_base: torch.logspace(
        a, b, n, base=bs, device=a.device), lambda g, r: ends(g, r, F32, -8, 8), rtol=1.2e-7,
        atol=0)
case("logspace-f64", lambda a, b: torch.logspace(a, b, 101, dtype=F64, device=a.device),
     lambda g, r: ends(g, r, F64, -8, 8), rtol=2.3e-16, atol=0)
for _dt in (F16, BF16):
    case(f"logspace-{_dt}", lambda a, b, dt=_dt: torch.logspace(a, b, 23, base=2.0, dtype=dt,
                                                                device=a.device),
         lambda g, r: ends(g, r, F32, -6, 6), rtol=0, atol=0)
case("logspace-int64", lambda a, b: (torch.logspace(a, b, 13, dtype=I64, device=a.device),
                                     torch.logspace(a, b, 11, base=2.0, dtype=I64,
                                                    device=a.device),
                                     torch.logspace(a, 2, 1, base=3.0, dtype=I32,
                                                    device=a.device)),
     lambda g, r: ends(g, r, I64, -1, 7), rtol=0, atol=0)
case("logspace-scalar-ends", lambda a, b: (torch.logspace(a, 1.5, 12, device=a.device),
                                           torch.logspace(-2, b, 7, base=2.0, dtype=F64,
                                                          device=b.device)),
     lambda g, r: ends(g, r, F32, -3, 3), rtol=2.3e-16, atol=0)


# ---- a number shifted or divided by a tensor; in-place polygamma_ -----------------------
I8 = torch.int8

for _dt in (I8, I32, I64, U8):
    case(f"number-first-shifts-remainder-{_dt}",
         lambda t: (2 << t, -5 >> t, True << t, 7 % (t + 1), -9 % (t + 1)),
         lambda g, r, dt=_dt: [rnd(g, shape(r), dt, 0, 80)], rtol=0, atol=0)


def gcd_operands(dtype):
    """Random values with zeros, the type's minimum (whose abs wraps) and, for int64, two
    consecutive Fibonacci numbers (Euclid's longest run below 2**63: 90 steps)."""
    def make(g, r):
        info = torch.iinfo(dtype)
        a = rnd(g, (40,), dtype, max(info.min, -1000), min(info.max, 1000))
        b = rnd(g, (40,), dtype, max(info.min, -1000), min(info.max, 1000))
        a[:4], b[:4] = torch.tensor([0, info.min, info.min, 0]), torch.tensor([0, 0, 6, 12])
        if dtype == I64:
            a[4], b[4] = 7540113804746346429, 4660046610375530309
            a[5], b[5] = 2 ** 40, 3 ** 20   # (lcm wraps, as torch's)
        return [a, b]
    return make


for _dt in (I8, U8, torch.int16, I32, I64):
    case(f"gcd-lcm-{_dt}", lambda a, b: (torch.gcd(a, b), torch.lcm(a, b), a.clone().gcd_(b),
                                        torch.gcd(a[:, None], b[:7])),
         gcd_operands(_dt), rtol=0, atol=0)
case("gcd-mixed-dtypes", lambda a, b: torch.gcd(a.to(I8), b), gcd_operands(I32), rtol=0, atol=0)
for _dt in (I8, U8, I32, I64):   # (a number divisor: a trunc division failed to build)
    case(f"div-by-a-number-{_dt}", lambda t: (torch.div(t, 3, rounding_mode="trunc"),
                                             torch.div(t, 2, rounding_mode="floor"),
                                             torch.div(t, 7, rounding_mode=None)),
         lambda g, r, dt=_dt: [rnd(g, shape(r), dt, 0 if dt == U8 else -90, 90)])
for _dt in (BF16, F16):   # (torch's decomposition casts with prims.convert_element_type)
    case(f"renorm-{_dt}", lambda x: (torch.renorm(x, 2, 0, 1.0), torch.renorm(x, 1, 1, 0.5),
                                     torch.ops.prims.convert_element_type(x, I32)),
         lambda g, r, dt=_dt: [rnd(g, (4, 5), dt)], rtol=0, atol=0)
case("polygamma-inplace", lambda x: (x.clone().polygamma_(1), x.clone().polygamma_(3)),
     lambda g, r: [rnd(g, shape(r), F64, 0.1, 5)], rtol=1e-10, atol=0)

(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


# ---- errors torch finds in the data: raised at the next read -----------------------------

X = torch.arange(12.0).reshape(6, 2)


def _raises_lazily(fn, xs, error, match):
    """torch raises ``error`` (matching ``match``) eagerly; the lazy op records without
    running eagerly and its result raises when read."""
    with pytest.raises(error, match=match):
        fn(*xs)
    lr.reset_metrics()
    out = fn(*to_lazy(xs))
    assert lr.metrics()["fallback_ops"] == {}
    with pytest.raises(error, match=match):
        out.cpu()


@pytest.mark.parametrize("fn, xs, match", [
    (segment("sum"), [X, torch.tensor([2, 3])], "sum to data.size"),
    (segment("max"), [X, torch.tensor([7, -1])], "lengths contains negative value"),
    (segment("mean", unsafe=True), [X, torch.tensor([7, -1])], "segment_length >= 0"),
    (segment("sum", index="offsets"), [X, torch.tensor([0, 4, 3])], "segment_length >= 0"),
], ids=["lengths-sum", "lengths-negative", "unsafe-negative", "offsets-decreasing"])
def test_segment_reduce_bad_lengths_raise_torchs_error_at_the_read(fn, xs, match):
    _raises_lazily(fn, xs, RuntimeError, match)


def test_repeat_interleave_bad_repeats_raise_torchs_error_at_the_read():
    def f(rp):
        return torch.repeat_interleave(rp, output_size=4)
    _raises_lazily(f, [torch.tensor([1, 2])], RuntimeError, "allocated size does not match")
    _raises_lazily(f, [torch.tensor([5, -1])], RuntimeError, "repeats can not be negative")


def test_take_out_of_range_raises_at_the_read():
    _raises_lazily(torch.take, [X, torch.tensor([0, 12])], IndexError, "out of range")
    _raises_lazily(torch.take, [X, torch.tensor(-13)], IndexError, "out of range")


def test_linspace_end_out_of_the_types_range_raises_torchs_error_at_the_read():
    big = torch.tensor(1e300, dtype=F64)
    _raises_lazily(lambda a: torch.linspace(a, 1.0, 3, device=a.device), [big], RuntimeError,
                   "converted to type float without overflow")
    _raises_lazily(lambda a: torch.linspace(a, 1.0, 3, dtype=torch.int8, device=a.device),
                   [torch.tensor(300.0)], RuntimeError, "int8_t without overflow")
    _raises_lazily(lambda a: torch.logspace(a, 1.0, 1, device=a.device), [torch.tensor(50.0)],
                   RuntimeError, "float without overflow")


# ---- what stays eager: torch's errors, and shapes that depend on values ------------------

_EAGER = {
    "segment-int-data": (segment("sum"), [X.long(), torch.tensor([6])]),
    "segment-float-lengths": (segment("sum"), [X, torch.tensor([6.0])]),
    "segment-bad-reduce": (segment("median"), [X, torch.tensor([6])]),
    "segment-axis": (segment("sum", axis=1), [X, torch.tensor([1, 1])]),
    "take-int32-index": (torch.take, [X, torch.tensor([1], dtype=I32)]),
    "take-from-empty": (torch.take, [torch.empty(0), torch.tensor([0])]),
    "bucketize-2d-boundaries": (torch.bucketize, [X[0], X]),
    "repeat_interleave-2d": (lambda rp: torch.repeat_interleave(rp, output_size=3),
                             [torch.ones(1, 3, dtype=I64)]),
    "scatter-bool-src-dtype": (lambda x, i, s: x.scatter(0, i, s, reduce="add"),
                               [torch.ones(3, dtype=BOOL), torch.zeros(2, dtype=I64),
                                torch.ones(2, dtype=I64)]),
    "scatter-src-dtype": (lambda x, i, s: x.scatter(0, i, s),
                          [torch.ones(3), torch.zeros(2, dtype=I64), torch.ones(2, dtype=F64)]),
    "linspace-1d-start": (lambda a, b: torch.linspace(a, b, 3, device=a.device),
                          [torch.ones(1), torch.ones(())]),
    "linspace-bool": (lambda a, b: torch.linspace(a, b, 3, dtype=BOOL, device=a.device),
                      [torch.ones(())] * 2),
    "gcd-bool": (torch.gcd, [torch.ones(2, dtype=BOOL)] * 2),
    "frac-int": (torch.frac, [torch.ones(2, dtype=I32)]),
    "frac-bool": (torch.frac, [torch.ones(2, dtype=BOOL)]),
    "var-int": (torch.var, [torch.tensor([1, 2, 4])]),
    "std-bool": (lambda x: torch.std(x, 0), [torch.ones(3, dtype=BOOL)]),
    "var_mean-int": (torch.var_mean, [torch.tensor([1, 2, 4], dtype=I32)]),
}


@pytest.mark.parametrize("name", list(_EAGER))
def test_arguments_torch_refuses_run_eagerly_and_raise_its_error(name):
    assert_torchs_error(*_EAGER[name])
    assert lr.metrics()["fallback_ops"] != {}


@pytest.mark.parametrize("fn", [torch.gcd, torch.lcm])
def test_gcd_of_floats_raises_torchs_error(fn):
    assert_torchs_error(fn, [torch.ones(2), torch.ones(2, dtype=I64)])


@pytest.mark.parametrize("fn", [torch.repeat_interleave,
                                lambda rp: torch.ones(2, 3).to(rp.device).repeat_interleave(
                                    rp, dim=0)], ids=["indices", "dim0"])
def test_repeat_interleave_without_output_size_negative_repeats_raise_torchs_error(fn):
    """The repeats are read to size the result: torch's error at once, as eager."""
    assert_torchs_error(fn, [torch.tensor([2, -1])])


def test_segment_reduce_with_lengths_and_offsets_runs_eagerly():
    """torch then silently takes the offsets; refused rather than guessed."""
    lr.reset_metrics()
    out = torch.segment_reduce(X.to(DEV), "sum", lengths=torch.tensor([6]).to(DEV),
                               offsets=torch.tensor([0, 2, 6]).to(DEV))
    assert_same(out, torch.segment_reduce(X, "sum", lengths=torch.tensor([6]),
                                          offsets=torch.tensor([0, 2, 6])))
    assert lr.metrics()["fallback_ops"] == {"aten.segment_reduce.default": 1}
