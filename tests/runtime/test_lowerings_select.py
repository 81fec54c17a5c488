"""Selection, search, running-extreme, scatter-reduce, cdist and Bessel lowerings against
eager torch, at random sizes and several dtypes, forward and backward.

All cases are recorded first and computed by one barrier, so the whole file costs two XLA
compiles (forward values, then gradients), not one per case.
"""

import pytest
import torch

import lazy_runtime as lr
from lowering_harness import (BOOL, F32, F64, I32, I64, Case, assert_torchs_error,
                              lowering_tests, rnd, shape)

CASES: list = []
NAN, INF = float("nan"), float("inf")


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def with_nans(g, x, frac=0.3):
    """``x`` with about ``frac`` of its elements NaN, and at least one."""
    x = x.clone()
    x[torch.rand(x.shape, generator=g) < frac] = NAN
    x.view(-1)[0] = NAN
    return x


def distinct(g, s, dtype):
    """Values all different (torch's tie choice is unspecified for some ops)."""
    n = 1
    for d in s:
        n *= d
    return (torch.randperm(n, generator=g) - n // 2).reshape(s).to(dtype)


def ties(g, s, dtype=F32):
    """Few distinct values, so that equal values meet along every dim."""
    return torch.randint(-2, 2, s, generator=g).to(dtype)


# ---- kthvalue (ties: torch's quickselect picks an unspecified index, so distinct values) --

# (k comes from the size: the harness passes only tensors to a gradient case)
for _dt in (F32, F64):
    case(f"kthvalue-{_dt}", lambda x: x.kthvalue(x.shape[1] // 2 + 1, 1),
         lambda g, r, dt=_dt: [distinct(g, shape(r, 2), dt) / 7], grad=True)
case("kthvalue-int64-keepdim", lambda x: x.kthvalue(x.shape[0], 0, keepdim=True),
     lambda g, r: [distinct(g, shape(r, 3), I64)])
case("kthvalue-last-dim-3d", lambda x: x.kthvalue(1),
     lambda g, r: [rnd(g, shape(r, 3))], grad=True)
case("kthvalue-nan-is-largest", lambda x: x.kthvalue(x.shape[0], 0),
     lambda g, r: [torch.cat([torch.full((1, 3), NAN), rnd(g, (r.randint(1, 5), 3))])])
case("kthvalue-0d", lambda x: x.kthvalue(1), lambda g, r: [rnd(g, ())], grad=True)

# ---- nonzero_static (a static count: rows past the true positions filled, extra ones cut)

for _dt, _make in ((F32, lambda g, s: ties(g, s)), (I64, lambda g, s: rnd(g, s, I64)),
                   (BOOL, lambda g, s: rnd(g, s, BOOL))):
    for _size in (0, 3, 40):
        case(f"nonzero_static-{_dt}-{_size}",
             lambda x, n=_size: torch.nonzero_static(x, size=n),
             lambda g, r, m=_make: [m(g, shape(r, 3))])
case("nonzero_static-fill", lambda x: torch.nonzero_static(x, size=30, fill_value=7),
     lambda g, r: [ties(g, shape(r, 2))])
case("nonzero_static-nan-counts", lambda x: torch.nonzero_static(x, size=8),
     lambda g, r: [with_nans(g, ties(g, (4,)))])
case("nonzero_static-0d", lambda x: torch.nonzero_static(x, size=2),
     lambda g, r: [torch.tensor(1.5)])

# ---- median / nanmedian (index among ties: the stable sort's, as torch's CPU kernel) -----

for _dt in (F32, F64):
    case(f"median-all-{_dt}", lambda x: x.median(), lambda g, r, dt=_dt: [rnd(g, shape(r), dt)],
         grad=True)
    case(f"median-dim-{_dt}", lambda x: x.median(-1),
         lambda g, r, dt=_dt: [rnd(g, shape(r, 3), dt)], grad=True)
    case(f"nanmedian-all-{_dt}", lambda x: x.nanmedian(),
         lambda g, r, dt=_dt: [with_nans(g, rnd(g, shape(r, 2), dt))], grad=True)
    case(f"nanmedian-dim-{_dt}", lambda x: x.nanmedian(0, keepdim=True),
         lambda g, r, dt=_dt: [with_nans(g, rnd(g, shape(r, 2, lo=2), dt))], grad=True)
case("median-all-ties-int64", lambda x: x.median(), lambda g, r: [ties(g, shape(r), I64)])
case("median-dim-ties-int64", lambda x: x.median(1, keepdim=True),
     lambda g, r: [ties(g, shape(r, 3), I64)])
case("median-dim-ties-float", lambda x: x.median(0), lambda g, r: [ties(g, shape(r, 2, hi=9))],
     grad=True)
case("median-nan-propagates", lambda x: (x.median(), x.median(1)),
     lambda g, r: [with_nans(g, rnd(g, shape(r, 2)))])
# an all-NaN row's index is whatever torch's nth_element leaves there: values only
case("nanmedian-all-nan-row", lambda x: x.nanmedian(1).values,
     lambda g, r: [torch.cat([torch.full((1, 4), NAN), with_nans(g, rnd(g, (3, 4)))])])
case("nanmedian-int64", lambda x: (x.nanmedian(), x.nanmedian(0)),
     lambda g, r: [ties(g, shape(r, 2), I64)])
case("median-empty-input", lambda x: x.median(), lambda g, r: [torch.empty(0, 3)])
case("median-no-rows", lambda x: x.median(1), lambda g, r: [torch.empty(0, 3)])
case("median-0d", lambda x: (x.median(), x.median(0)), lambda g, r: [rnd(g, ())])

# ---- mode (torch: the smallest most frequent value; its last index in rows of <= 16) -----

case("mode-float", lambda x: x.mode(1), lambda g, r: [ties(g, shape(r, 2, hi=12))], grad=True)
case("mode-int64-keepdim", lambda x: x.mode(0, keepdim=True),
     lambda g, r: [ties(g, shape(r, 3), I64)])
case("mode-f64-distinct", lambda x: x.mode(), lambda g, r: [rnd(g, shape(r, 2), F64)],
     grad=True)
case("mode-bool", lambda x: x.mode(-1), lambda g, r: [rnd(g, shape(r, 2), BOOL)])
case("mode-0d", lambda x: x.mode(), lambda g, r: [rnd(g, ())])

# ---- searchsorted -----------------------------------------------------------------------


def sorted_rows(g, s, dtype=F32):
    return rnd(g, s, dtype).sort(-1).values


case("searchsorted-1d", lambda b, v: torch.searchsorted(b, v),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),)), rnd(g, shape(r, 2), F32, -4, 4)])
case("searchsorted-right", lambda b, v: torch.searchsorted(b, v, right=True),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),), I64), rnd(g, shape(r, 2), I64, -4, 4)])
case("searchsorted-side-right-int32",
     lambda b, v: torch.searchsorted(b, v, side="right", out_int32=True),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),), I64), rnd(g, shape(r, 2), I64, -4, 4)])
case("searchsorted-side-left", lambda b, v: torch.searchsorted(b, v, side="left"),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),), I64), rnd(g, shape(r, 1), I64, -4, 4)])
case("searchsorted-batched-f64", lambda b, v: torch.searchsorted(b, v),
     lambda g, r: [sorted_rows(g, (b := shape(r, 2)) + (r.randint(1, 9),), F64),
                   rnd(g, b + (r.randint(1, 5),), F64, -4, 4)])
case("searchsorted-sorter", lambda b, v, s: torch.searchsorted(b, v, sorter=s, right=True),
     lambda g, r: [b := ties(g, (3, r.randint(1, 9))), rnd(g, (3, 4), F32, -3, 3).round(),
                   torch.sort(b, stable=True).indices])
case("searchsorted-promotes", lambda b, v: torch.searchsorted(b, v),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),), I64), rnd(g, shape(r, 2), F64)])
case("searchsorted-nan",
     lambda b, v: (torch.searchsorted(b, v), torch.searchsorted(b, v, right=True)),
     lambda g, r: [torch.cat([sorted_rows(g, (r.randint(1, 6),)), torch.tensor([NAN, NAN])]),
                   with_nans(g, rnd(g, (7,)))])
case("searchsorted-0d-value", lambda b, v: torch.searchsorted(b, v),
     lambda g, r: [sorted_rows(g, (5,)), rnd(g, ())])
case("searchsorted-empty-boundaries", lambda b, v: torch.searchsorted(b, v),
     lambda g, r: [torch.empty(0), rnd(g, (3,))])
case("searchsorted-scalar", lambda b: (torch.searchsorted(b, 0.5),
                                       torch.searchsorted(b, 1, right=True, out_int32=True)),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),))])
case("searchsorted-scalar-int-boundaries", lambda b: torch.searchsorted(b, 0.5),
     lambda g, r: [sorted_rows(g, (r.randint(1, 9),), I64)])

# ---- cummax / cummin (ties and NaN: torch keeps the last index) --------------------------

for _name in ("cummax", "cummin"):
    for _dt in (F32, F64):
        case(f"{_name}-{_dt}", lambda x, n=_name: getattr(x, n)(1),
             lambda g, r, dt=_dt: [rnd(g, shape(r, 3), dt)], grad=True)
    case(f"{_name}-ties", lambda x, n=_name: getattr(x, n)(0),
         lambda g, r: [ties(g, shape(r, 2, hi=9))], grad=True)
    case(f"{_name}-int64", lambda x, n=_name: getattr(x, n)(-1),
         lambda g, r: [ties(g, shape(r, 2, hi=9), I64)])
    case(f"{_name}-nan", lambda x, n=_name: getattr(x, n)(1),
         lambda g, r: [with_nans(g, ties(g, shape(r, 2, hi=9)))], grad=True)
    case(f"{_name}-signed-zero", lambda x, n=_name: getattr(x, n)(0),
         lambda g, r: [torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0, -1.0, -0.0])])
    case(f"{_name}-bool", lambda x, n=_name: getattr(x, n)(0),
         lambda g, r: [rnd(g, (r.randint(1, 9),), BOOL)])
    case(f"{_name}-0d", lambda x, n=_name: getattr(x, n)(0), lambda g, r: [rnd(g, ())],
         grad=True)

# ---- logcumsumexp -----------------------------------------------------------------------

for _dt in (F32, F64):
    case(f"logcumsumexp-{_dt}", lambda x: x.logcumsumexp(1),
         lambda g, r, dt=_dt: [rnd(g, shape(r, 3), dt, -10, 10)], rtol=1e-5, atol=1e-5,
         grad=True)
case("logcumsumexp-infinities", lambda x: x.logcumsumexp(0),
     lambda g, r: [torch.tensor([-INF, -INF, 1.0, INF, INF, -INF, 2.0, NAN, 3.0])])
case("logcumsumexp-0d", lambda x: x.logcumsumexp(0), lambda g, r: [rnd(g, ())], grad=True)

# ---- scatter_reduce ---------------------------------------------------------------------


def scatter_inputs(g, r, dtype, dim, wide_src=False):
    """self, index and src: index no larger than self apart from ``dim``; ``wide_src``: src
    larger than index (torch reads only index's extent, but then has no backward)."""
    s = shape(r, 2, lo=2)
    idx_shape = tuple(r.randint(1, n) for n in s)
    src_shape = tuple(n + r.randint(0, wide_src) for n in idx_shape)
    index = torch.randint(0, s[dim], idx_shape, generator=g)
    return [rnd(g, s, dtype), index, rnd(g, src_shape, dtype)]


for _k, _red in enumerate(("sum", "prod", "mean", "amax", "amin")):
    _d = _k % 2
    for _inc in (True, False):
        case(f"scatter_reduce-{_red}-self{_inc}",
             lambda x, i, s, red=_red, inc=_inc, d=_d: x.scatter_reduce(d, i, s, red,
                                                                          include_self=inc),
             lambda g, r, d=_d: scatter_inputs(g, r, F32, d), grad=True)
    case(f"scatter_reduce-{_red}-int64",
         lambda x, i, s, red=_red, d=1 - _d: (x.scatter_reduce(d, i, s, red),
                                               x.scatter_reduce(d, i, s, red, include_self=False)),
         lambda g, r, d=1 - _d: scatter_inputs(g, r, I64, d, wide_src=True))
    case(f"scatter_reduce-{_red}-f64",
         lambda x, i, s, red=_red, d=_d: x.scatter_reduce(d, i, s, red, include_self=False),
         lambda g, r, d=_d: scatter_inputs(g, r, F64, d), grad=True)
case("scatter_reduce-nan", lambda x, i, s: (x.scatter_reduce(1, i, s, "amax"),
                                             x.scatter_reduce(1, i, s, "amin"),
                                             x.scatter_reduce(1, i, s, "prod")),
     lambda g, r: [(a := scatter_inputs(g, r, F32, 1, True))[0], a[1], with_nans(g, a[2])])
case("scatter_reduce-legacy-max-min",
     lambda x, i, s: (x.scatter_reduce(0, i, s, "max", include_self=False),
                      x.scatter_reduce(0, i, s, "min")),
     lambda g, r: scatter_inputs(g, r, F32, 0, wide_src=True))
case("scatter_reduce-int32-index", lambda x, i, s: x.scatter_reduce(1, i.int(), s, "mean"),
     lambda g, r: scatter_inputs(g, r, F32, 1))
# forward only: the backward's scatter_add into a 0-d tensor is layout.py's (not lowered
# for an index of several elements)
case("scatter_reduce-0d", lambda x, i, s: x.scatter_reduce(0, i, s, "prod", include_self=False),
     lambda g, r: [rnd(g, ()), torch.zeros(3, dtype=I64), rnd(g, (3,))])

# ---- cdist (and its backward) -----------------------------------------------------------


def cdist_inputs(g, r, dtype, p):
    """Two point sets with exact coincidences: a repeated point (distance 0) and, for p < 1,
    a point off another in one coordinate only (coordinate differences of 0)."""
    m = r.randint(1, 5)
    x1 = rnd(g, (r.randint(2, 5), m), dtype)
    near = x1[1:2].clone()
    near[0, 0] += 1
    x2 = torch.cat([rnd(g, (r.randint(1, 4), m), dtype), x1[:1], near])
    return [x1, x2]


for _p in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF):
    for _dt in (F32, F64):
        case(f"cdist-p{_p}-{_dt}", lambda a, b, p=_p: torch.cdist(a, b, p=p),
             lambda g, r, dt=_dt, p=_p: cdist_inputs(g, r, dt, p), rtol=1e-4, atol=1e-5,
             grad=True)
case("cdist-batched-broadcast", lambda a, b: torch.cdist(a, b, p=2.0),
     lambda g, r: [rnd(g, (2, 1, r.randint(1, 5), 3)), rnd(g, (3, r.randint(1, 5), 3))],
     rtol=1e-4, atol=1e-5, grad=True)
case("cdist-batched-p1.5", lambda a, b: torch.cdist(a, b, p=1.5),
     lambda g, r: [rnd(g, (2, r.randint(1, 5), 4), F64), rnd(g, (2, r.randint(1, 5), 4), F64)],
     grad=True)

# ---- i0 / i1 ----------------------------------------------------------------------------

for _dt in (F32, F64):
    case(f"i0-{_dt}", torch.i0, lambda g, r, dt=_dt: [rnd(g, shape(r), dt, -8, 8)],
         grad=True)
    case(f"i1-{_dt}", torch.special.i1, lambda g, r, dt=_dt: [rnd(g, shape(r), dt, -8, 8)])
case("i0-int-to-float", torch.i0, lambda g, r: [rnd(g, shape(r), I64)])
case("special-i0", torch.special.i0, lambda g, r: [rnd(g, shape(r), F32)], grad=True)

(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


# ---- invalid arguments: the rule raises torch's own error when the op is recorded -------

_ERRORS = {
    "kthvalue-k": (lambda x: x.kthvalue(4, 1), [torch.ones(2, 3)]),
    "kthvalue-empty-dim": (lambda x: x.kthvalue(1, 1), [torch.ones(2, 0)]),
    "kthvalue-bool": (lambda x: x.kthvalue(1), [torch.ones(2, dtype=BOOL)]),
    "median-empty-dim": (lambda x: x.median(-1), [torch.ones(2, 0)]),
    "mode-empty-dim": (lambda x: x.mode(1), [torch.ones(2, 0)]),
    "median-bool": (lambda x: x.median(), [torch.ones(2, dtype=BOOL)]),
    "searchsorted-side-right": (lambda b, v: torch.searchsorted(b, v, side="left", right=True),
                                [torch.ones(3), torch.ones(2)]),
    "searchsorted-side": (lambda b, v: torch.searchsorted(b, v, side="middle"),
                          [torch.ones(3), torch.ones(2)]),
    "searchsorted-sorter-dtype": (lambda b, v, s: torch.searchsorted(b, v, sorter=s),
                                  [torch.ones(3), torch.ones(2), torch.zeros(3, dtype=I32)]),
    "searchsorted-sorter-shape": (lambda b, v, s: torch.searchsorted(b, v, sorter=s),
                                  [torch.ones(3), torch.ones(2), torch.zeros(2, dtype=I64)]),
    "searchsorted-scalar-2d": (lambda b: torch.searchsorted(b, 1.0), [torch.ones(2, 3)]),
    "searchsorted-0d-boundaries": (torch.searchsorted, [torch.tensor(1.0), torch.ones(3)]),
    "searchsorted-leading-dims": (torch.searchsorted, [torch.ones(2, 3), torch.ones(3, 3)]),
    "logcumsumexp-int": (lambda x: x.logcumsumexp(0), [torch.ones(3, dtype=I64)]),
    "scatter_reduce-reduce": (lambda x, i, s: x.scatter_reduce(0, i, s, "add"),
                              [torch.ones(3), torch.zeros(2, dtype=I64), torch.ones(2)]),
    "scatter_reduce-index-dtype": (lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
                                   [torch.ones(3), torch.zeros(2).short(), torch.ones(2)]),
    "scatter_reduce-src-dtype": (lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
                                 [torch.ones(3), torch.zeros(2, dtype=I64),
                                  torch.ones(2, dtype=F64)]),
    "scatter_reduce-ndim": (lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
                            [torch.ones(3), torch.zeros(2, 1, dtype=I64), torch.ones(2, 1)]),
    "scatter_reduce-sizes": (lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
                             [torch.ones(2, 2), torch.zeros(2, 3, dtype=I64), torch.ones(3, 1)]),
    "cdist-int": (lambda a, b: torch.cdist(a, b), [torch.ones(2, 3, dtype=I64)] * 2),
    "cdist-columns": (lambda a, b: torch.cdist(a, b), [torch.ones(2, 3), torch.ones(2, 4)]),
    "cdist-negative-p": (lambda a, b: torch.cdist(a, b, p=-1.0), [torch.ones(2, 3)] * 2),
    "cdist-dtypes": (lambda a, b: torch.ops.aten._cdist_forward(a, b, 1.0, None),
                     [torch.ones(2, 3), torch.ones(2, 3, dtype=F64)]),
}


@pytest.mark.parametrize("name", list(_ERRORS))
def test_invalid_arguments_raise_torchs_error(name):
    assert_torchs_error(*_ERRORS[name])
    assert lr.metrics()["fallback_ops"] == {}  # raised by the rule, not by eager torch
