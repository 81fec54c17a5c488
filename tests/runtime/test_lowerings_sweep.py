"""Ops an OpInfo sweep found running eagerly, now lowered, against eager torch: histc and
histogram (values on their bin edges included), addbmm, index_reduce, put, the batch norm
variants with running-stat updates, and antialiased bilinear/bicubic interpolation.

All cases are recorded first and computed by one barrier (values, then gradients)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from lowering_harness import (BF16, F16, F32, F64, I64, Case, lowering_tests, rnd, shape)

aten = torch.ops.aten
CASES: list = []
FLOATS = (F32, F64)
HALVES = (F16, BF16)


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def exact(name, fn, make, **kw):
    """A case whose values must agree exactly (bin counts, integer results)."""
    case(name, fn, make, rtol=0, atol=0, **kw)


def dname(dt):
    return str(dt)[6:]


# ---- histc / histogram ------------------------------------------------------------------


def on_edges(g, dt, lo, hi, bins, n=40):
    """Random values plus every linspace edge of [lo, hi] (where the bin is decided)."""
    return torch.cat([torch.linspace(lo, hi, bins + 1, dtype=dt),
                      rnd(g, (n,), dt, lo - 1, hi + 1)])


def data_edges(g, dt, bins, n=50):
    """Random values plus the edges torch makes from their own min and max."""
    x = rnd(g, (n,), dt, -3, 5)
    return torch.cat([torch.linspace(x.min().item(), x.max().item(), bins + 1, dtype=dt), x])


for _dt, _bins in itertools.product(FLOATS + HALVES, (1, 4, 7, 16, 31, 100)):
    _id = f"{dname(_dt)}-{_bins}"
    exact(f"histc-data-{_id}", lambda x, b=_bins: torch.histc(x, b),
          lambda g, r, dt=_dt, b=_bins: [data_edges(g, dt, b)])
    exact(f"histc-range-edges-{_id}", lambda x, b=_bins: torch.histc(x, b, -1.3, 2.1),
          lambda g, r, dt=_dt, b=_bins: [on_edges(g, dt, -1.3, 2.1, b)])
    if _dt in FLOATS:
        exact(f"histogram-data-{_id}", lambda x, b=_bins: torch.histogram(x, b),
              lambda g, r, dt=_dt, b=_bins: [data_edges(g, dt, b)])
        exact(f"histogram-bins-{_id}", lambda x, e: torch.histogram(x, e),
              lambda g, r, dt=_dt, b=_bins: [on_edges(g, dt, -2, 2, b),
                                             torch.sort(rnd(g, (b + 1,), dt, -2, 2)).values])
    exact(f"histogram-range-edges-{_id}",
          lambda x, b=_bins: torch.histogram(x, b, range=(-0.7, 3.1)),
          lambda g, r, dt=_dt, b=_bins: [on_edges(g, dt, -0.7, 3.1, b)])
for _dt in FLOATS:
    _d = dname(_dt)
    case(f"histogram-weight-density-{_d}",
         lambda x, w: torch.histogram(x, 9, weight=w, density=True),
         lambda g, r, dt=_dt: [data_edges(g, dt, 9, 30), rnd(g, (40,), dt, 0, 2)])
    case(f"histogram-weight-range-{_d}",
         lambda x, w: torch.histogram(x, 5, range=(-1., 1.), weight=w),
         lambda g, r, dt=_dt: [rnd(g, (3, 7), dt), rnd(g, (21,), dt, -1, 2)])
    case(f"histogram-bins-density-{_d}", lambda x, e: torch.histogram(x, e, density=True),
         lambda g, r, dt=_dt: [rnd(g, (30,), dt), torch.tensor([-2., -0.5, 0, 0.1, 3], dtype=dt)])
    exact(f"histogram-bins-unsorted-{_d}", lambda x, e: torch.histogram(x, e),
          lambda g, r, dt=_dt: [rnd(g, (30,), dt), rnd(g, (6,), dt)])
    exact(f"histogram-const-{_d}", lambda x: torch.histogram(x, 4),
          lambda g, r, dt=_dt: [torch.full((5,), 3.0, dtype=dt)])
    exact(f"histogram-empty-{_d}", lambda x: torch.histogram(x, 3),
          lambda g, r, dt=_dt: [torch.zeros(0, dtype=dt)])
    exact(f"histogram-range-point-{_d}", lambda x: torch.histogram(x, 4, range=(1., 1.)),
          lambda g, r, dt=_dt: [rnd(g, (9,), dt, 0.4, 1.6)])
    exact(f"histogram-large-{_d}", lambda x: torch.histogram(x, 5, range=(-1e30, 1e30)),
          lambda g, r, dt=_dt: [rnd(g, (20,), dt) * 1e30])
for _dt in FLOATS + HALVES:
    _d = dname(_dt)
    # NaN and inf are outside every range: never counted
    exact(f"histc-nan-inf-{_d}", lambda x: torch.histc(x, 4, -1, 1),
          lambda g, r, dt=_dt: [torch.tensor([float("nan"), 0.5, float("inf"), -float("inf"),
                                              1, -1, 0, -0.5], dtype=dt)])
    exact(f"histc-const-{_d}", lambda x: torch.histc(x, 4),
          lambda g, r, dt=_dt: [torch.full((5,), 3.0, dtype=dt)])
    exact(f"histc-empty-{_d}", lambda x: torch.histc(x, 4), lambda g, r, dt=_dt: [
        torch.zeros(0, dtype=dt)])
    exact(f"histc-equal-bounds-{_d}", lambda x: torch.histc(x, 6, 2, 2),
          lambda g, r, dt=_dt: [rnd(g, shape(r, 2), dt)])
    exact(f"histc-2d-{_d}", lambda x: torch.histc(x, 6, -2, 2),
          lambda g, r, dt=_dt: [rnd(g, shape(r, 2, 2, 9), dt)])


@pytest.mark.parametrize("dt", [torch.uint8, torch.int8, torch.int32, torch.int64])
def test_histc_of_integers_counts_as_torchs_cuda_kernel(dt):
    """torch's CPU kernel refuses integers; its CUDA kernel (what code written for a GPU,
    transformers' MoE routing among it, calls) truncates the bounds to integers, takes the
    data's own where they are equal, and bins in integer arithmetic: for these small values
    the same bins as the float kernel on the truncated bounds, the oracle here."""
    g = torch.Generator().manual_seed(dt.itemsize)
    lo = 0 if dt == torch.uint8 else -20
    cases = [(4, 0, 3), (5, 0, 0), (7, -2, 9), (3, 2, 2), (6, 1.7, 8.9), (9, -300, 300),
             (1, 0, 30), (16, 2.5, 2.9)]
    lazy, want = [], []
    lr.reset_metrics()
    for bins, *bounds in cases:
        x = torch.randint(lo, 40, (int(torch.randint(1, 60, (1,), generator=g)),),
                          generator=g).to(dt)
        ints = [int(b) for b in bounds]
        want.append(torch.histc(x.double(), bins, *ints).to(dt))
        # (through a float op that rounds: integer ops on data alone, and float ones that
        # do not round, would be folded on the host)
        xd = x.to(lr.device()).double()
        on_device = (xd.sin() * 0 + xd).to(dt)
        lazy.append(torch.histc(on_device, bins, *bounds))
    with pytest.raises(RuntimeError, match="not implemented"):
        torch.histc(x, 4)   # torch's CPU kernel
    for case_, got, expected in zip(cases, lazy, want):
        assert torch.equal(got.cpu(), expected), case_
    assert lr.metrics()["fallback_ops"] == {} and lr.metrics()["host_folds"] == 0


def test_histc_refuses_a_non_finite_data_range():
    """torch's error (the range is read from the data: the case runs torch)."""
    for v in (float("inf"), float("nan")):
        x = torch.tensor([v, 0.5]).to(lr.device())
        with pytest.raises(RuntimeError, match="not finite"):
            torch.histc(x, 4)
        with pytest.raises(RuntimeError, match="not finite"):
            torch.histogram(x.cpu().to(lr.device()), 4)


# ---- addbmm -------------------------------------------------------------------------------


def batches(g, r, dt, n=None, x_shape=None):
    b, i, k, j = n if n is not None else r.randint(1, 4), r.randint(1, 5), r.randint(1, 5), \
        r.randint(1, 5)
    return [rnd(g, x_shape if x_shape is not None else (i, j), dt), rnd(g, (b, i, k), dt),
            rnd(g, (b, k, j), dt)]


for _dt in FLOATS:
    _d = dname(_dt)
    for _k in range(3):
        case(f"addbmm-{_d}-{_k}", torch.addbmm, lambda g, r, dt=_dt: batches(g, r, dt), grad=True)
    case(f"addbmm-scaled-{_d}", lambda x, a, b: torch.addbmm(x, a, b, beta=0.5, alpha=-1.5),
         lambda g, r, dt=_dt: batches(g, r, dt), grad=True)
    case(f"addbmm-broadcast-{_d}", lambda x, a, b: torch.addbmm(x, a, b, alpha=2),
         lambda g, r, dt=_dt: batches(g, r, dt, x_shape=(1,)), grad=True)
    # beta=0 ignores the input, NaN and inf included
    case(f"addbmm-beta0-nan-{_d}", lambda x, a, b: torch.addbmm(x, a, b, beta=0),
         lambda g, r, dt=_dt: [torch.full((2, 3), float("nan"), dtype=dt),
                               rnd(g, (3, 2, 4), dt), rnd(g, (3, 4, 3), dt)], grad=True)
    case(f"addbmm-no-batches-{_d}", lambda x, a, b: torch.addbmm(x, a, b, beta=2),
         lambda g, r, dt=_dt: batches(g, r, dt, n=0))
    case(f"addbmm-inplace-{_d}", lambda x, a, b: x.clone().addbmm_(a, b, alpha=0.25),
         lambda g, r, dt=_dt: batches(g, r, dt), grad=True)
for _dt in HALVES:
    case(f"addbmm-{dname(_dt)}", lambda x, a, b: torch.addbmm(x, a, b, beta=0.5, alpha=0.75),
         lambda g, r, dt=_dt: batches(g, r, dt, n=4), rtol=2e-2, atol=2e-2, grad=True)
exact("addbmm-int64", lambda x, a, b: torch.addbmm(x, a, b, beta=2, alpha=3),
      lambda g, r: batches(g, r, I64))
exact("addbmm-int64-float-scalars", lambda x, a, b: torch.addbmm(x, a, b, beta=1.7, alpha=2.5),
      lambda g, r: batches(g, r, I64))   # (truncated to ints, as torch's kernel takes them)


# ---- index_reduce -----------------------------------------------------------------------


def reduce_args(g, r, dt, dim, ties=False):
    """[self, index, source] along ``dim``: repeated indices and rows never indexed."""
    s = list(shape(r, 3, 2, 5))
    n = r.randint(1, 7)
    src = list(s)
    src[dim] = n
    lo, hi = (-2, 3) if ties else (-3, 3)
    make = (lambda sh: rnd(g, sh, dt, lo, hi).round()) if ties else (lambda sh: rnd(g, sh, dt))
    return [make(tuple(s)), torch.randint(0, max(s[dim] - 1, 1), (n,), generator=g),
            make(tuple(src))]


for _red, _self, _dt, _dim in itertools.product(("prod", "mean", "amax", "amin"), (True, False),
                                                FLOATS, (0, 1, -1)):
    _id = f"{_red}-{'self' if _self else 'noself'}-{dname(_dt)}-dim{_dim}"
    case(f"index-reduce-{_id}",
         lambda x, i, s, red=_red, inc=_self, d=_dim: x.index_reduce(d, i, s, red,
                                                                     include_self=inc),
         lambda g, r, dt=_dt, d=_dim: reduce_args(g, r, dt, d % 3), grad=(0, 2))
for _red, _self in itertools.product(("prod", "mean", "amax", "amin"), (True, False)):
    _id = f"{_red}-{'self' if _self else 'noself'}"
    exact(f"index-reduce-int64-{_id}",
          lambda x, i, s, red=_red, inc=_self: x.index_reduce(0, i, s, red, include_self=inc),
          lambda g, r: reduce_args(g, r, I64, 0))
    case(f"index-reduce-bf16-{_id}",
         lambda x, i, s, red=_red, inc=_self: x.index_reduce(1, i, s, red, include_self=inc),
         lambda g, r: reduce_args(g, r, BF16, 1), rtol=2e-2, atol=2e-2)
    # NaN in the source (amax/amin propagate it), and 0-d tensors
    case(f"index-reduce-nan-{_id}",
         lambda x, i, s, red=_red, inc=_self: x.index_reduce(0, i, s, red, include_self=inc),
         lambda g, r: [rnd(g, (4, 3)), torch.tensor([2, 0, 2]),
                       torch.tensor([[float("nan"), 1, -2], [0.5, float("nan"), 3], [1, 2, 3.]])])
    case(f"index-reduce-0d-{_id}",
         lambda x, i, s, red=_red, inc=_self: x.index_reduce(0, i, s, red, include_self=inc),
         lambda g, r: [rnd(g, ()), torch.tensor([0]), rnd(g, ())], grad=(0, 2))
case("index-reduce-inplace", lambda x, i, s: x.clone().index_reduce_(0, i, s, "amax"),
     lambda g, r: reduce_args(g, r, F32, 0), grad=(0, 2))


# ---- put ----------------------------------------------------------------------------------


def put_args(g, r, dt, unique):
    x = rnd(g, shape(r, 2, 2, 6), dt)
    n = x.numel()
    idx = torch.randperm(n, generator=g)[:r.randint(1, n)] if unique else \
        torch.randint(0, n, (r.randint(1, 2 * n),), generator=g)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.5, idx - n, idx)  # negatives
    return [x, idx, rnd(g, tuple(idx.shape), dt)]


for _dt, _acc in itertools.product(FLOATS + HALVES + (I64,), (False, True)):
    _id = f"{dname(_dt)}-{'acc' if _acc else 'set'}"
    _tol = dict(rtol=1e-2, atol=1e-2) if _dt in HALVES else {}
    _grad = (0, 2) if _dt in FLOATS else False
    # duplicate indices: accumulate sums them, otherwise the last write wins (torch's
    # serial order)
    case(f"put-dup-{_id}", lambda x, i, s, a=_acc: x.put(i, s, accumulate=a),
         lambda g, r, dt=_dt: put_args(g, r, dt, False), grad=_grad, **_tol)
    case(f"put-unique-{_id}", lambda x, i, s, a=_acc: x.put(i, s, accumulate=a),
         lambda g, r, dt=_dt: put_args(g, r, dt, True), grad=_grad, **_tol)
case("put-inplace-2d-index", lambda x, i, s: x.clone().put_(i.reshape(2, -1), s.reshape(2, -1)),
     lambda g, r: [rnd(g, (3, 4)), torch.tensor([0, -1, 5, 5, 11, 2]), rnd(g, (6,))], grad=(0, 2))
case("put-transposed-self", lambda x, i, s: x.t().put(i, s),
     lambda g, r: [rnd(g, (3, 4)), torch.tensor([1, 4, 7]), rnd(g, (3,))], grad=(0, 2))
case("put-empty-index", lambda x, i, s: x.put(i, s),
     lambda g, r: [rnd(g, (3,)), torch.zeros(0, dtype=torch.long), rnd(g, (0,))])


# ---- batch norm variants ------------------------------------------------------------------


def bn_args(g, r, dt):
    c = r.randint(1, 4)
    return [rnd(g, (r.randint(2, 4), c) + shape(r, r.randint(0, 2), 1, 4), dt),
            rnd(g, (c,), dt), rnd(g, (c,), dt), rnd(g, (c,), dt), rnd(g, (c,), dt, 0.5, 2)]


def legit(training):
    def fn(x, w, b, m, v):
        m, v = m.clone(), v.clone()   # updated in place: returned to be compared
        return (*aten._native_batch_norm_legit(x, w, b, m, v, training, 0.3, 1e-5), m, v)
    return fn


def with_update(x, w, b, m, v):
    m, v = m.clone(), v.clone()
    return (*aten._batch_norm_with_update(x, w, b, m, v, 0.3, 1e-5)[:3], m, v)


for _dt in FLOATS + HALVES:
    _tol = dict(rtol=2e-2, atol=2e-2) if _dt in HALVES else dict(rtol=1e-4, atol=1e-5)
    _d = dname(_dt)
    case(f"bn-legit-train-{_d}", legit(True), lambda g, r, dt=_dt: bn_args(g, r, dt),
         grad=(0, 1, 2), **_tol)
    case(f"bn-legit-eval-{_d}", legit(False), lambda g, r, dt=_dt: bn_args(g, r, dt),
         grad=(0, 1, 2), **_tol)
    case(f"bn-legit-no-stats-{_d}",
         lambda x, w, b: aten._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5),
         lambda g, r, dt=_dt: bn_args(g, r, dt)[:3], grad=True, **_tol)
    case(f"bn-with-update-{_d}", with_update, lambda g, r, dt=_dt: bn_args(g, r, dt),
         grad=(0, 1, 2), **_tol)
case("bn-legit-no-affine", lambda x, m, v: legit(True)(x, None, None, m, v),
     lambda g, r: [a for i, a in enumerate(bn_args(g, r, F32)) if i in (0, 3, 4)], grad=(0,),
     rtol=1e-4, atol=1e-5)


# ---- antialiased interpolation ------------------------------------------------------------


def aa(mode, align, **kw):
    return lambda x: F.interpolate(x, mode=mode, align_corners=align, antialias=True, **kw)


_AA_SIZES = [((9, 11), dict(size=(3, 4))),                          # downsampling
             ((4, 5), dict(size=(9, 7))),                           # upsampling
             ((6, 10), dict(scale_factor=(1.7, 0.45))),             # both, by scale
             ((8, 8), dict(scale_factor=0.3, recompute_scale_factor=False)),
             ((6, 7), dict(size=(6, 3))),                           # one axis unchanged
             ((5, 7), dict(scale_factor=(1.0, 0.5), recompute_scale_factor=False)),
             ((7, 4), dict(size=(1, 1))),
             ((12, 3), dict(size=(5, 1)))]                          # width 1 (see resample)
for _mode, _align, _dt, (_in, _kw) in itertools.product(("bilinear", "bicubic"), (False, True),
                                                        FLOATS, _AA_SIZES):
    _id = f"{_mode}-{'align' if _align else 'noalign'}-{dname(_dt)}-{_in}-{sorted(_kw.items())}"
    case(f"aa-{_id}", aa(_mode, _align, **_kw),
         lambda g, r, dt=_dt, s=_in: [rnd(g, (r.randint(1, 3), r.randint(1, 3)) + s, dt)],
         grad=True, rtol=1e-5 if _dt == F32 else 1e-10, atol=1e-5 if _dt == F32 else 1e-12)
for _mode in ("bilinear", "bicubic"):
    # inf and NaN reach only the outputs whose window holds them
    case(f"aa-nonfinite-{_mode}", aa(_mode, False, size=(4, 3)),
         lambda g, r: [torch.where(torch.rand(1, 2, 16, 9, generator=g) < 0.02, float("inf"),
                                   rnd(g, (1, 2, 16, 9))).index_fill(2, torch.tensor([3]),
                                                                     float("nan"))])


(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)
