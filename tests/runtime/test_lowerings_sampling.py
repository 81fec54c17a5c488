"""grid_sample (2-D and 3-D) and adaptive_max_pool3d lowerings against eager torch, values
and gradients, at random sizes, in every mode, padding mode and align_corners.

All cases are recorded first and computed by one barrier (values, then gradients)."""

import itertools

import torch
import torch.nn.functional as F

from lowering_harness import BF16, F16, F32, F64, Case, lowering_tests, rnd, shape

CASES: list = []
MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


# ---- grid_sample ----------------------------------------------------------------------------


def sample(mode, padding, align):
    return lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                      align_corners=align)


def random_grid(g, r, n, dtype):
    """[input, grid]: random sizes, positions in [-1.5, 1.5] (some outside the input)."""
    batch = r.randint(1, 3)
    return [rnd(g, (batch, r.randint(1, 3)) + shape(r, n, 1, 6), dtype),
            rnd(g, (batch,) + shape(r, n, 1, 4) + (n,), dtype, -1.5, 1.5)]


def exact_grid(g, r, n, dtype):
    """[input, grid] with grid values on the borders, pixel centres and corners: exact
    positions where floor, rounding and clipping change (and their gradients)."""
    vals = torch.tensor([-2, -1.5, -1, -0.75, -0.5, 0, 1 / 3, 0.5, 1, 1.5, 2], dtype=dtype)
    pick = torch.randint(0, len(vals), (2,) + (3,) * n + (n,), generator=g)
    return [rnd(g, (2, 2) + shape(r, n, 2, 5), dtype), vals[pick]]


def quarter_grid(g, r, n, dtype, align):
    """[input, grid] for 16-bit types: positions a quarter pixel from the pixel centres,
    so that their arithmetic is exact in any precision (torch's CPU kernel rounds every
    step to the 16-bit type, a lowering computes in float32 as torch's CUDA kernels do)."""
    sizes = [r.choice((3, 5)) if align else r.choice((2, 4)) for _ in range(n)]
    out = shape(r, n, 1, 4)
    coords = []
    for k in range(n):   # the grid's component k is the spatial axis n - 1 - k
        size = sizes[n - 1 - k]
        u = torch.randint(-2, size + 1, (2,) + out, generator=g) + torch.where(
            torch.rand((2,) + out, generator=g) < 0.5, 0.25, 0.75)
        coords.append(u * 2 / (size - 1) - 1 if align else (u + 0.5) * 2 / size - 1)
    return [rnd(g, (2, 2) + tuple(sizes), dtype), torch.stack(coords, -1).to(dtype)]


for _n, _mode, _pad, _align in itertools.product((2, 3), MODES, PADDINGS, (False, True)):
    if _n == 3 and _mode == "bicubic":   # torch has no 3-D bicubic
        continue
    _id = f"{_n}d-{_mode}-{_pad}-{'align' if _align else 'noalign'}"
    _fn = sample(_mode, _pad, _align)
    case(f"grid-{_id}-f64-exact", _fn, lambda g, r, n=_n: exact_grid(g, r, n, F64),
         rtol=1e-9, atol=1e-12, grad=True)
    if _mode != "nearest":   # (nearest's ties are among the exact positions)
        case(f"grid-{_id}-f32", _fn, lambda g, r, n=_n: random_grid(g, r, n, F32),
             rtol=1e-4, atol=1e-5, grad=True)
# 16-bit types (not bfloat16 bicubic: torch's CPU kernel rounds each step of its cubic
# weights and sums to bfloat16, a lowering computes in float32 as torch's CUDA kernel does)
for _n, _mode, _pad, _align, _dt in [(2, "bilinear", "reflection", True, F16),
                                     (2, "bilinear", "reflection", True, BF16),
                                     (2, "nearest", "border", False, BF16),
                                     (2, "bicubic", "zeros", False, F16),
                                     (3, "bilinear", "zeros", False, BF16),
                                     (3, "bilinear", "border", True, F16),
                                     (3, "nearest", "reflection", True, F16)]:
    case(f"grid-{_n}d-{_mode}-{_pad}-{_align}-{str(_dt)[6:]}", sample(_mode, _pad, _align),
         lambda g, r, n=_n, dt=_dt, a=_align: quarter_grid(g, r, n, dt, a),
         rtol=2e-2, atol=2e-2, grad=True)
# output_mask: only the grid needs a gradient (torch skips the input's), or only the input
for _n in (2, 3):
    case(f"grid-{_n}d-grid-grad-only", sample("bilinear", "zeros", False),
         lambda g, r, n=_n: random_grid(g, r, n, F64), grad=(1,))
    case(f"grid-{_n}d-input-grad-only", sample("bilinear", "reflection", True),
         lambda g, r, n=_n: random_grid(g, r, n, F64), grad=(0,))
case("grid-2d-larger", sample("bicubic", "border", False),
     lambda g, r: [rnd(g, (2, 3, 9, 11)), rnd(g, (2, 7, 5, 2), F32, -1.2, 1.2)],
     rtol=1e-4, atol=1e-4, grad=True)


# ---- adaptive_max_pool3d --------------------------------------------------------------------


def amp3(out):
    return lambda x: F.adaptive_max_pool3d(x, out, return_indices=True)


for _i in range(3):   # windows of unequal sizes, overlapping, and a size of 1
    case(f"amp3d-random-{_i}", lambda x, i=_i: amp3((3, 2, 5)[i:] + (4, 1, 3)[:i])(x),
         lambda g, r: [rnd(g, (r.randint(1, 3),) + shape(r, 4, 1, 8))], grad=True)
case("amp3d-f64-no-batch", amp3((2, 3, 2)), lambda g, r: [rnd(g, (2, 5, 4, 7), F64)],
     grad=True)
case("amp3d-bf16", amp3((2, 2, 3)), lambda g, r: [rnd(g, (1, 2, 4, 5, 6), BF16)],
     rtol=1e-2, atol=1e-2, grad=True)
case("amp3d-f16", amp3((3, 1, 2)), lambda g, r: [rnd(g, (2, 1, 3, 4, 5), F16)],
     rtol=1e-2, atol=1e-2, grad=True)
# ties (torch takes the first maximum in d, h, w order), all -inf windows (their first
# position), NaN (torch keeps the last one)
case("amp3d-ties", amp3((2, 3, 2)), lambda g, r: [rnd(g, (2, 2, 5, 6, 5), F32, -1, 2).floor()],
     grad=True)
case("amp3d-all-minus-inf", amp3((2, 2, 3)),
     lambda g, r: [torch.full((1, 2, 3, 4, 5), -float("inf"))])
case("amp3d-nan", amp3((1, 2, 2)), lambda g, r: [torch.where(
    torch.rand(2, 3, 4, 5, 6, generator=g) < 0.1, float("nan"),
    rnd(g, (2, 3, 4, 5, 6)).floor())])
case("amp2d-all-minus-inf-nan", lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
     lambda g, r: [torch.tensor([[-float("inf")] * 4, [float("nan"), 1, float("nan"), 1],
                                 [1, 1, -float("inf"), 0], [float("nan")] * 4,
                                 [-float("inf")] * 4])[None]])


(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)
