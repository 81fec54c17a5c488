"""NaN and infinities where XLA's answer differed from torch's, against eager torch:

- a max or min reduction keeps its NaN (XLA:CPU's ``reduce_max``/``reduce_min`` may drop it:
  openxla/xla#21461; a (5000, 2) float32 max over its last axis lost most of its NaNs), and
  so do their gradients (NaN rows, from torch's ``grad / count * mask``);
- a pooling window's index is its last NaN (torch's CPU scan);
- ``cdist`` with p=inf skips a NaN difference as torch's ``std::max`` does;
- ``x * mask`` with a bool (or a bool converted to float) is NaN where ``x`` is inf or NaN
  and the mask False (XLA rewrites ``a * convert(mask)`` to a select, giving 0);
- ``sign``/``sgn`` of NaN is 0 (torch's ``(0 < x) - (x < 0)``).

The shapes are those that showed the drop (a long first axis, a short last one; 64 x 64).
All cases are recorded first and computed by one barrier.
"""

import torch
import torch.nn.functional as F

from lowering_harness import BF16, F32, F64, I64, Case, lowering_tests, rnd

CASES: list = []
NAN, INF = float("nan"), float("inf")
SHAPES = ((5000, 2), (64, 64), (7, 3))


def with_nans(g, x, frac=0.3):
    x = x.clone()
    x[torch.rand(x.shape, generator=g) < frac] = NAN
    return x


def nan_input(s, dtype):
    return lambda g, r: [with_nans(g, rnd(g, s, dtype))]


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


REDUCTIONS = {
    "amax-last": lambda x: x.amax(-1),
    "amin-first": lambda x: x.amin(0),
    "amax-keepdim": lambda x: x.amax(-1, keepdim=True),
    "max-all": lambda x: x.max(),
    "min-all": lambda x: x.min(),
    "max-dim": lambda x: tuple(x.max(-1)),
    "min-dim": lambda x: tuple(x.min(0)),
    "aminmax": lambda x: tuple(torch.aminmax(x, dim=-1)),
    "norm-inf": lambda x: torch.linalg.vector_norm(x, INF, dim=-1),
    "norm-neg-inf": lambda x: torch.linalg.vector_norm(x, -INF, dim=0),
    "matrix-norm-inf": lambda x: torch.linalg.matrix_norm(x, INF),
}

for s in SHAPES:
    for dtype in (F32, F64, BF16):
        for name, fn in REDUCTIONS.items():
            if dtype == BF16 and name.startswith(("norm", "matrix")):
                continue   # (bfloat16 norms accumulate otherwise: not what is tested here)
            case(f"{name}-{'x'.join(map(str, s))}-{str(dtype)[6:]}", fn, nan_input(s, dtype),
                 grad=s == (7, 3) and dtype == F64)

# a reduction of integers is unchanged by the NaN guard (no NaN to keep)
case("amax-int64", lambda x: x.amax(-1), lambda g, r: [rnd(g, (5000, 2), I64, -50, 50)])


def two_nans_per_window(g, r):
    """Windows holding several NaNs, ties and -inf: which index wins is torch's order."""
    x = torch.randint(-2, 2, (2, 3, 9, 11), generator=g).to(F32)
    x[torch.rand(x.shape, generator=g) < 0.35] = NAN
    x[torch.rand(x.shape, generator=g) < 0.1] = -INF
    return [x]


case("max-pool2d-indices", lambda x: tuple(F.max_pool2d(x, 3, 2, return_indices=True)),
     two_nans_per_window, grad=True)
case("max-pool2d-padded", lambda x: tuple(F.max_pool2d(x, 3, 1, 1, return_indices=True)),
     two_nans_per_window)
case("max-pool3d-indices",
     lambda x: tuple(F.max_pool3d(x[None], (2, 3, 3), return_indices=True)), two_nans_per_window)
case("adaptive-max-pool2d",
     lambda x: tuple(F.adaptive_max_pool2d(x, (4, 5), return_indices=True)), two_nans_per_window)
case("cdist-inf", lambda a, b: torch.cdist(a, b, p=INF),
     lambda g, r: [with_nans(g, rnd(g, (2, 40, 3))), with_nans(g, rnd(g, (2, 7, 3)))])
case("cdist-inf-with-infs", lambda a, b: torch.cdist(a, b, p=INF),
     lambda g, r: [torch.tensor([[INF, 1.0], [NAN, -INF], [2.0, 3.0]]),
                   torch.tensor([[INF, 0.0], [1.0, -INF]])])



def specials(dtype):
    """Values with NaN, infinities and signed zeros, and a bool mask of their shape."""
    def make(g, r):
        x = rnd(g, (6, 50), dtype)
        pick = torch.rand(x.shape, generator=g)
        x[pick < 0.1] = NAN
        x[(pick >= 0.1) & (pick < 0.2)] = INF
        x[(pick >= 0.2) & (pick < 0.3)] = -INF
        x[(pick >= 0.3) & (pick < 0.4)] = -0.0
        return [x, torch.rand(x.shape, generator=g) < 0.5]
    return make


for dtype in (F32, F64, BF16):
    t = str(dtype)[6:]
    case(f"mul-bool-mask-{t}", lambda x, m: x * m, specials(dtype))
    case(f"mul-converted-mask-{t}", lambda x, m: x * m.to(x.dtype) * 2, specials(dtype))
    case(f"mask-times-scalar-{t}", lambda x, m: m.float() * float("inf") + x.float(),
         specials(dtype))
    case(f"sign-{t}", lambda x, m: torch.sign(x), specials(dtype))
    case(f"sgn-{t}", lambda x, m: torch.sgn(x), specials(dtype))
case("dropout-style-mask", lambda x, m: x * m.to(x.dtype) / 0.5, specials(F32), grad=(0,))

(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)
