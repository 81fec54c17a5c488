"""Special values (NaN, infinities, -0.0, the largest floats, thresholds) where a lowering
differed from torch's CPU kernels, against eager torch:

- floor and trunc division are IEEE's (torch's): XLA's simplifier makes ``x / broadcast``
  and ``x / const`` a multiplication by the reciprocal, 1 ulp off in a third of the
  quotients, which moves a floor across an integer; the 16-bit trunc division rounds its
  quotient first. (True division keeps XLA's form, a documented difference: exact
  quotients cost the MLP's step 15-25%.);
- ``x ** 0.5`` and ``x ** -0.5`` are torch's sqrt and rsqrt kernels (NaN at -inf, -0.0 kept;
  float16: C's pow);
- hardswish and hardsigmoid follow torch's ``min(max(x + 3, 0), 6) / 6``; the backward of
  hardtanh, hardswish, elu and softplus follow torch's vectorized kernels at NaN and at
  their thresholds; relu and clamps keep -0.0 (relu6, hardtanh, clamp at a 0.0
  bound); lgamma is 0 at 1 and 2;
- nan_to_num of a 16-bit tensor clamps to that type's range, and logit's eps bounds are
  in that type;
- margin losses skip a NaN term (torch's ``if (z > 0)``); mse and smooth-l1 backward and
  bce-with-logits (16-bit, op by op) follow torch's kernels;
- cumsum and cumprod accumulate in torch's CPU accumulation type (double for float), and
  so do var, std and var_mean (along a padded dynamic dim too); group norm's moments stay
  in float as torch's group norm kernel computes them.

Exact cases use rtol 0 (and atol the smallest normal: XLA:CPU flushes subnormals). All
cases are recorded first and computed by one barrier.
"""

import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same
from lowering_harness import BF16, C64, C128, F16, F32, F64, Case, lowering_tests, rnd

CASES: list = []
NAN, INF = float("nan"), float("inf")


def exact(dtype):
    """IEEE's values; a subnormal result may be 0 (XLA:CPU flushes subnormals)."""
    return dict(rtol=0, atol=torch.finfo(dtype).tiny)


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


def values(dtype, *vals):
    return torch.tensor(vals, dtype=F64).to(dtype)


def big(dtype):
    return torch.finfo(dtype).max


def specials(dtype):
    """Values that showed the differences, as a column and a row (every pair)."""
    m = big(dtype)
    v = values(dtype, NAN, INF, -INF, 0.0, -0.0, m, -m, 1e30 if dtype != F16 else 1e4, 1.0,
               -1.0, 0.5, -2.5, 3.0, 0.3)
    return v[:, None].clone(), v[None, :].clone()


def pairs(dtype):
    return lambda g, r: list(specials(dtype))


def named(dtype):
    return str(dtype)[6:]


for dt in (F32, F64, BF16):
    n = named(dt)
    case(f"div-floor-pairs-{n}", lambda a, b: torch.div(a, b, rounding_mode="floor"), pairs(dt),
         **exact(dt))
    case(f"floor-divide-pairs-{n}", torch.floor_divide, pairs(dt), **exact(dt))
    case(f"div-trunc-pairs-{n}", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
         pairs(dt), **exact(dt))
    # (1 ulp in float64: torch's AVX512 kernels take a vectorized pow for ``x ** 0.5``,
    # 1 ulp from the square root at 2.0 on some CPUs; exact in 32 and 16 bits)
    case(f"pow-half-{n}", lambda x: (x ** 0.5, x ** -0.5, torch.float_power(x, 0.5)),
         lambda g, r, dt=dt: [values(dt, -INF, -0.0, 0.0, INF, NAN, 4.0, 2.0)],
         rtol=torch.finfo(F64).eps, atol=torch.finfo(dt).tiny)
    case(f"hardswish-{n}", F.hardswish,
         lambda g, r, dt=dt: [values(dt, big(dt), -3.0, 3.0, -INF, INF, NAN, 1.0)])
    if dt != F64:   # (XLA's float64 lgamma is exact there)
        case(f"lgamma-{n}", torch.lgamma, lambda g, r, dt=dt: [values(dt, 1.0, 2.0, 3.0, 0.5)],
             atol=1e-30)   # (0 at 1 and 2: XLA's lgamma(1) was 4.8e-7)

# a 16-bit trunc division rounds the quotient first (4094 / 3 -> 1365); float16 pow: C's
case("div-trunc-f16", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
     lambda g, r: [values(F16, 4094.0, 3.0, 4094.0), values(F16, 3.0, 0.30004883, -2.5)],
     **exact(F16))

for dt in (F32, F64):
    n = named(dt)
    if dt == F64:   # (0 at -3, where x / 6 + 0.5 gave 2.8e-17)
        case(f"hardsigmoid-{n}", F.hardsigmoid,
             lambda g, r, dt=dt: [values(dt, -3.0, 3.0, -2.9, 1.0, NAN, INF, -INF)],
             atol=1e-30, grad=True)
    # backward kernels at NaN and at their thresholds (64 elements: torch's vectorized loop)
    edges = (NAN, -3.0, 3.0, INF, -INF, 20.0, 2.5, -1.0, 0.5, 0.0) * 7
    for name, fn in (("hardtanh", F.hardtanh), ("relu6", F.relu6),
                     ("hardswish-backward", F.hardswish), ("elu", F.elu), ("selu", F.selu),
                     ("celu", lambda x: F.celu(x, 2.0)), ("softplus", F.softplus),
                     ("softplus-beta", lambda x: F.softplus(x, 2.0, 5.0))):
        case(f"{name}-edges-{n}", fn, lambda g, r, dt=dt: [values(dt, *edges)], grad=True)
    case(f"relu-negative-zero-{n}", lambda x: torch.signbit(F.relu(x)),
         lambda g, r, dt=dt: [values(dt, -0.0, 0.0, -1.0, 2.0, NAN)])
    # an element equal to a clamp's bound stays itself (torch's std::max): -0.0 at 0.0
    case(f"clamp-negative-zero-{n}", lambda x: [torch.signbit(y) for y in (
        F.relu6(x), F.hardtanh(x, 0.0, 1.0), x.clamp(0, 1), x.clamp_min(0.0),
        x.clamp_max(-0.0), x.clamp(torch.zeros_like(x), torch.ones_like(x)))],
         lambda g, r, dt=dt: [values(dt, -0.0, 0.0, -1.0, 2.0, 1.0)])

    # torch's i1 kernels give +0.0 at -0.0 (jax's kept the sign)
    case(f"i1-negative-zero-{n}", lambda x: [torch.signbit(f(x)) for f in (
        torch.special.i1, torch.special.i1e, torch.special.modified_bessel_i1)],
         lambda g, r, dt=dt: [values(dt, -0.0, 0.0, -1.0, 2.0, NAN)])

    def nan_rows(g, r, dt=dt):
        x = rnd(g, (4, 6), dt)
        x[0, 0], x[1, 3], x[3] = NAN, NAN, NAN
        return [x]
    case(f"multi-margin-nan-{n}", lambda x: F.multi_margin_loss(
        x, torch.tensor([1, 2, 0, 4]), reduction="none"), nan_rows, grad=True)
    case(f"multi-margin-p2-nan-{n}", lambda x: F.multi_margin_loss(
        x, torch.tensor([1, 2, 0, 4]), p=2), nan_rows, grad=True)
    case(f"multilabel-margin-nan-{n}", lambda x: F.multilabel_margin_loss(
        x, torch.tensor([[1, 3, -1, 0, 0, 0]] * 4), reduction="none"), nan_rows, grad=True)
    case(f"mse-backward-largest-{n}", F.mse_loss,
         lambda g, r, dt=dt: [values(dt, big(dt), big(dt), 1.0, -1.0, 2.0, 0.5),
                              values(dt, -1, 0, 1, 2, -big(dt), 3)], grad=(0,))
    case(f"smooth-l1-backward-nan-{n}", lambda x, t: F.smooth_l1_loss(x, t, beta=0.5),
         lambda g, r, dt=dt: [values(dt, NAN, 1.0, INF, 0.2, NAN, -3.0),
                              values(dt, 0.0, NAN, 1.0, 0.0, NAN, INF)], grad=True)

for dt in (F16, BF16):
    n = named(dt)
    case(f"nan-to-num-{n}", torch.nan_to_num, lambda g, r, dt=dt: [values(dt, INF, -INF, NAN, 1)],
         **exact(dt))
    # logit's bounds in the 16-bit type: 1 - 1e-6 is 1 there (inf at 1), 1 - 0.01 rounds
    case(f"logit-eps-{n}", lambda x: (torch.logit(x, 1e-6), torch.logit(x, 0.01)),
         lambda g, r, dt=dt: [values(dt, 0.0, 1.0, 0.5, 0.999, 1e-7, 0.3, NAN)], rtol=1e-3)
    case(f"bce-logits-{n}", lambda x, t: (
        F.binary_cross_entropy_with_logits(x, t, reduction="none"),
        F.binary_cross_entropy_with_logits(x, t, reduction="none",
                                           pos_weight=torch.tensor([2.0], dtype=x.dtype))),
        lambda g, r, dt=dt: [values(dt, -big(dt), -big(dt), -2.5, 1.0),
                             values(dt, 6.1035e-05, 0.5, 0.0, 0.3)], rtol=1e-2, atol=1e-3)

# var and std of float32 in double, as torch's CPU kernels: a float32 mean near 1e4 is off by
# half an ulp (5e-4), which a variance of 1e-4 feels (6e-4 relative error in float32)
case("var-std-large-mean-float32", lambda x: (x.var(-1), x.std(-1, correction=0),
                                              torch.var(x, 0), x.std()),
     lambda g, r: [(1e4 + rnd(g, (8, 4096), F64, -0.02, 0.02)).to(F32)], rtol=1e-5, atol=0)
# (rtol 1e-5: torch's whole-tensor std is 1.7e-6 from the exact value, the lazy one exact)
# var_mean (and std_mean, through it) as torch's var_mean kernel: double for float32 (its
# var was 1.1e-3 off in float32), complex128 for complex64
case("var_mean-large-mean-float32", lambda x: (*torch.var_mean(x, -1), *torch.std_mean(x, -1),
                                               *torch.var_mean(x, 0, correction=0),
                                               *torch.var_mean(x)),
     lambda g, r: [(1e4 + rnd(g, (8, 4096), F64, -0.02, 0.02)).to(F32)], rtol=1e-6, atol=0)
case("var_mean-large-mean-complex64", lambda x: torch.var_mean(x, -1),
     lambda g, r: [(1e4 + 1e4j + rnd(g, (4, 4096), C128, -0.02, 0.02)).to(C64)],
     rtol=1e-6, atol=0)

# torch's CPU scans accumulate in double for float (float for float16): 1e30 * -1e30 does not
# overflow there, and the product's 0 stays 0
case("cumprod-overflow-float32", lambda x: (x.cumprod(-1), x.cumsum(-1)),
     lambda g, r: [values(F32, 1e30, -1e30, 1.0, -1.0, 0.0, 2.0)])
case("cumprod-overflow-float16", lambda x: x.cumprod(-1),
     lambda g, r: [values(F16, 1e4, -1e4, 1.0, -1.0, 0.0, 2.0)])


(forward_results, backward_results, test_lowering_matches_torch,
 test_backward_matches_torch, test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


def test_var_along_a_padded_dynamic_dim_accumulates_as_torch():
    """The padded path (``padding._var_fn``) accumulated in float32: 1.9e-2 off for var,
    var_mean and std of float32 values near 1e4 with spread 0.01."""
    g = torch.Generator().manual_seed(0)
    for length in (1000, 1001):   # one bucket
        x = (1e4 + rnd(g, (4, length), F64, -0.02, 0.02)).to(F32)
        xl = lr.mark_dynamic(x.to(DEV), 1, "T")
        for fn in (lambda t: t.var(1), lambda t: t.std(1, correction=0),
                   lambda t: torch.var_mean(t, 1)):
            assert_same(fn(xl), fn(x), rtol=1e-6, atol=0, what=f"length {length}")


def test_complex_var_along_a_padded_dynamic_dim_counts_the_imaginary_parts():
    """The padded path cast complex values to their real type (the imaginary parts
    dropped: var 0.44 where torch gives 0.81); it now shares the lowerings' |dev|**2."""
    g = torch.Generator().manual_seed(1)
    for length in (5, 7):   # one bucket
        x = rnd(g, (3, length), C64)
        xl = lr.mark_dynamic(x.to(DEV), 1, "T")
        for fn in (lambda t: t.var(1), lambda t: t.std(1, correction=0),
                   lambda t: torch.var_mean(t, 1)):
            assert_same(fn(xl), fn(x), rtol=1e-5, atol=1e-6, what=f"length {length}")
    assert lr.metrics()["padded_executions"] > 0


def _ops_of(t):
    seen, stack, ops = set(), [t._st.node], []
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            ops.append(n)
            stack.extend(n.inputs)
    return ops


def test_group_norm_moments_stay_in_float_as_torchs_kernel():
    """torch's group norm kernel accumulates its moments in float for float32 (where its
    var_mean accumulates in double): group norm's var_mean node says so (aux), a user's
    does not."""
    x = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(1))
    w, b = torch.rand(6) + 0.5, torch.randn(6)
    out = F.group_norm(x.to(DEV), 3, w.to(DEV), b.to(DEV))
    user = torch.var_mean(x.to(DEV), 1)[0]
    mine = [n.aux for n in _ops_of(out) if n.op is torch.ops.aten.var_mean.correction]
    theirs = [n.aux for n in _ops_of(user) if n.op is torch.ops.aten.var_mean.correction]
    assert mine == ["opmath"] and theirs == [None]
    assert_same(out, F.group_norm(x, 3, w, b), rtol=1e-5, atol=1e-6, what="group norm")
