"""16-bit (bfloat16, float16) results bit for bit as torch's CPU kernels round them.

Most of torch's 16-bit elementwise kernels compute in float32 and round once, and so does
the runtime. These are the kernels that do otherwise, found by comparing every OpInfo op
exactly in bfloat16 (benchmarks/opinfo_sweep.py with the 16-bit tolerances at 0):

- number and 0-d operands (and ``alpha``) rounded to the 16-bit type first: ``add``,
  ``sub``, ``rsub``, ``fmod``, ``remainder``, ``atan2``, ``pow(number, tensor)``; ``mul``
  and ``div`` take them unrounded;
- computed in the 16-bit type itself, each operation rounded: ``logit``, ``xlogy``,
  ``special.entr``, ``special.xlog1py``, ``mvlgamma``, ``linalg.cross``, ``addr``;
- ``pow(tensor, number)``: the exponent rounded to the type; bfloat16 squares, cubes and
  inverse squares multiply in bfloat16;
- a product feeding an add (``a * b + c``, ``linalg.cross``): the product rounded first,
  never one fused multiply-add (LLVM's on a CPU with float16 arithmetic, AVX512-FP16);
- ``addmm`` with ``beta``: the scaled input added in float32 (``addmv``, whose kernel
  rounds ``beta * input`` first, and ``baddbmm`` are not bit for bit yet).

Each case runs at three random sizes; values are compared exactly on XLA:CPU (a GPU's
transcendentals round differently: within a 16-bit ulp there). Subnormal results are
kept out: XLA:CPU flushes them to zero (see lazy_runtime/README.md).
"""

import math

import pytest
import torch

from conftest import DEV, PLATFORM

HALF = [torch.bfloat16, torch.float16]
C = 1.7170948287741004   # no 16-bit type holds it: rounding it or not shows


def _values(n, seed, *, positive=False, unit=False):
    g = torch.Generator().manual_seed(seed)
    if unit:
        return torch.rand(n, generator=g) * 0.98 + 0.01
    x = (torch.randn(n, generator=g) * 10).round(decimals=1)
    return x.abs() + 0.25 if positive else x


def _assert_bitwise(want, got):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if PLATFORM != "cpu":
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2, equal_nan=True)
        return
    same = (want == got) | (want.isnan() & got.isnan())
    bad = (~same).flatten().nonzero().flatten()[:3].tolist()
    assert bool(same.all()), (
        f"{int((~same).sum())} of {want.numel()} differ, e.g. at {bad}: "
        f"torch {want.flatten()[bad].tolist()} lazy {got.flatten()[bad].tolist()}")


def _check(fn, *inputs):
    _assert_bitwise(fn(*inputs), fn(*(t.to(DEV) for t in inputs)))


SCALAR_CASES = {
    "add": lambda t: t + C,
    "radd": lambda t: C + t,
    "sub": lambda t: t - C,
    "rsub": lambda t: C - t,
    "add alpha": lambda t: torch.add(t, t.flip(0), alpha=C),
    "sub alpha": lambda t: torch.sub(t, t.flip(0), alpha=C),
    "add number alpha": lambda t: torch.add(t, 2.3, alpha=C),
    "add_ in place": lambda t: t.clone().add_(C),
    "add 0-d float32": lambda t: t + torch.tensor(C),
    "fmod": lambda t: torch.fmod(t, C),
    "remainder": lambda t: torch.remainder(t, C),
    "number % tensor": lambda t: C % t,
    "atan2 0-d float32": lambda t: torch.atan2(t, torch.tensor(C)),
    "pow(number, tensor)": lambda t: torch.pow(C, t / 100),
    "xlogy(tensor, number)": lambda t: torch.xlogy(t, C),
    "xlogy(number, tensor)": lambda t: torch.xlogy(C, t.abs()),
    # unrounded in torch: these must stay so
    "mul": lambda t: t * C,
    "div": lambda t: t / C,
    "number / tensor": lambda t: C / t,
    "mul 0-d float32": lambda t: t * torch.tensor(C),
    "eq": lambda t: t == 1.001,
    "floor division": lambda t: torch.div(t, C, rounding_mode="floor"),
    "clamp": lambda t: t.clamp(-C, C),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(SCALAR_CASES))
def test_number_operands_rounded_where_torch_rounds_them(name, dtype):
    # torch's vectorized loop computes ``a + alpha * b`` in float32 and rounds once; its
    # scalar loop over the last elements rounds ``alpha * b`` first: lengths torch covers
    # with vectors only, where alpha is involved
    sizes = (1024, 64, 4096) if "alpha" in name else (1000, 37, 4096)
    for n, seed in zip(sizes, range(3)):
        _check(SCALAR_CASES[name], _values(n, seed).to(dtype))


OWN_TYPE_CASES = {
    "logit": (lambda t: torch.logit(t), dict(unit=True)),
    "logit eps": (lambda t: torch.logit(t, 0.1), dict(unit=True)),
    "xlogy": (lambda t: torch.xlogy(t, t.flip(0)), dict(positive=True)),
    "special.entr": (torch.special.entr, dict(positive=True)),
    "special.xlog1py": (lambda t: torch.special.xlog1py(t, t.flip(0)), dict(positive=True)),
    "special.xlog1py number": (lambda t: torch.special.xlog1py(t, 0.3), dict(positive=True)),
    "mvlgamma": (lambda t: torch.mvlgamma(t + 2, 3), dict(positive=True)),
    "linalg.cross": (lambda t: torch.linalg.cross(t.reshape(-1, 3), t.flip(0).reshape(-1, 3)),
                     {}),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(OWN_TYPE_CASES))
def test_kernels_computing_in_the_16_bit_type(name, dtype):
    fn, kind = OWN_TYPE_CASES[name]
    for n, seed in ((999, 3), (36, 4), (3000, 5)):
        _check(fn, _values(n, seed, **kind).to(dtype))


EXPONENTS = [2, 3, 4, 7, -1, -2, -3, 0.5, -0.5, 0.50001, 1.7, 2.001, 3.001, -2.001, 2.5,
             -1.3, 2.0, 3.0, -2.0]


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("exponent", EXPONENTS, ids=str)
def test_pow_of_a_number_exponent(exponent, dtype):
    # torch's bfloat16 x ** -0.5 rounds the square root first in its scalar loop over the
    # last elements only: lengths its vectorized loop covers whole
    sizes = (1024, 64, 2560) if (exponent, dtype) == (-0.5, torch.bfloat16) else (1000, 33, 2500)
    for n, seed in zip(sizes, (6, 7, 8)):
        x = _values(n, seed)
        x = x.clamp(-4, 4) if abs(exponent) > 2 else x   # no subnormal or infinite results
        x[x.abs() < 0.1] = 0.5
        _check(lambda t: t.pow(exponent), x.to(dtype))


def test_float32_powers_beyond_cubes_are_cs_pow():
    """torch takes C's pow (one rounding) for exponents past 3, not repeated products."""
    x = _values(4000, 9).clamp(-1.6, 1.6)
    x[x.abs() < 0.5] = 0.75   # no subnormal results (XLA:CPU flushes them)
    for exponent in (4, 10, 57):
        want = x.pow(exponent)
        got = x.to(DEV).pow(exponent).cpu()
        torch.testing.assert_close(got, want, rtol=2e-7, atol=0)


def _float16_addr_rounds_the_product() -> bool:
    """Whether torch's float16 ``addr`` on this CPU rounds the outer product to float16
    before adding (its kernels with native float16 arithmetic, AVX512-FP16, do; others
    add in float32, as the lazy device does): judged on 400 random sums."""
    g = torch.Generator().manual_seed(0)
    c, v, w = (torch.randn(s, generator=g).half() for s in ((20, 20), 20, 20))
    in_float32 = (c.float() + v.float()[:, None] * w.float()).half()
    return not torch.equal(torch.addr(c, v, w), in_float32)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (C, 1), (-4.7, 2.03), (0, 2.0), (0.5, C)])
def test_scaled_products_add_the_scaled_input_in_float32(beta, alpha, dtype):
    g = torch.Generator().manual_seed(10)
    for n in (4, 9, 17):   # (larger float16 products' sums meet torch's order of adding)
        a, b, c = (torch.randn(n, n, generator=g).to(dtype) for _ in range(3))
        v, w = (torch.randn(n, generator=g).to(dtype) for _ in range(2))
        _check(lambda c, a, b: torch.addmm(c, a, b, beta=beta, alpha=alpha), c, a, b)
        addr = lambda c, v, w: torch.addr(c, v, w, beta=beta, alpha=alpha)  # noqa: E731
        if dtype == torch.float16 and _float16_addr_rounds_the_product():
            # torch's answer depends on the CPU here: the lazy device keeps the float32
            # sum (torch's kernel without native float16 arithmetic), one float16
            # rounding from this CPU's
            got = addr(c.to(DEV), v.to(DEV), w.to(DEV)).cpu()
            torch.testing.assert_close(got, addr(c, v, w), rtol=2e-3, atol=2e-3)
            continue
        _check(addr, c, v, w)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.int8, torch.float32,
                                   torch.float64, torch.complex64], ids=str)
def test_addr_of_other_types_and_shapes(dtype):
    g = torch.Generator().manual_seed(11)

    def make(*shape):
        t = torch.randn(shape, generator=g) * 3
        return t > 0 if dtype == torch.bool else t.to(dtype)
    for shape in [(5, 7), (7,), (5, 1), ()]:
        for beta, alpha in [(1, 1), (0, 1), (2, 3), (0, 0)]:
            x, v1, v2 = make(*shape), make(5), make(7)
            if dtype.is_floating_point and shape:
                x.view(-1)[0] = math.nan   # beta=0 ignores it, as torch's kernel
            want = torch.addr(x, v1, v2, beta=beta, alpha=alpha)
            got = torch.addr(x.to(DEV), v1.to(DEV), v2.to(DEV), beta=beta, alpha=alpha)
            torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6,
                                       equal_nan=True)


@pytest.mark.parametrize("call,message", [
    (lambda d: torch.addr(torch.zeros(5, 5, dtype=torch.int64, device=d),
                          torch.ones(5, dtype=torch.int64, device=d),
                          torch.ones(5, dtype=torch.int64, device=d), beta=0.5),
     "must not be a floating point"),
    (lambda d: torch.addr(torch.zeros(5, 5, device=d), torch.ones(5, 2, device=d),
                          torch.ones(5, device=d)), "Expected 1-D argument vec1"),
    (lambda d: torch.addr(torch.zeros(5, 5, dtype=torch.int8, device=d),
                          torch.ones(5, dtype=torch.int8, device=d),
                          torch.ones(5, dtype=torch.int8, device=d), alpha=300),
     "without overflow"),
])
def test_addr_raises_torchs_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call("cpu")
    with pytest.raises(RuntimeError, match=message):
        call(DEV).cpu()


def test_addr_gradients_match():
    grads = []
    for d in ("cpu", DEV):
        torch.manual_seed(12)
        ts = [torch.randn(s, dtype=torch.bfloat16).to(d).requires_grad_() for s in
              [(4, 3), (4,), (3,)]]
        torch.addr(*ts, beta=0.7, alpha=1.3).float().pow(2).sum().backward()
        grads.append([t.grad.cpu() for t in ts])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_muon_step_matches_eager():
    """Muon's Newton-Schulz iteration is bfloat16 ``addmm`` with a ``beta``: before, the
    scaled input was rounded to bfloat16 first and the weights drifted by 2e-3."""
    if not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon is newer than this torch")
    weights = []
    for d in ("cpu", DEV):
        torch.manual_seed(13)
        layer = torch.nn.Linear(6, 4, bias=False).to(d)
        opt = torch.optim.Muon(layer.parameters(), lr=0.02)
        for step in range(2):
            x = torch.randn(5, 6, generator=torch.Generator().manual_seed(step)).to(d)
            layer(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        weights.append(layer.weight.detach().cpu())
    torch.testing.assert_close(weights[1], weights[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_16_bit_value_feeding_a_reduction_is_rounded_first(dtype):
    """XLA:CPU's YNNPACK fusions read a reduction's 16-bit operand from its float32
    source unrounded, even without excess precision: such graphs compile without them."""
    x = _values(3000 * 3, 14, positive=True).reshape(3000, 3) + 2
    for fn in (lambda t: torch.lgamma(t).sum(-1), lambda t: torch.exp(t / 10).mean(-1),
               lambda t: (t * C).sum(0)):
        _check(fn, x.to(dtype))


FUSABLE_CASES = {
    "a * b - c * d": lambda a, b, c: a * b - c * b.flip(0),
    "a * b + c": lambda a, b, c: a * b + c,
    "c - a * b": lambda a, b, c: c - a * b,
    "a ** 2 + c": lambda a, b, c: a ** 2 + c,
    "square + c": lambda a, b, c: a.square() + c,
    "in place": lambda a, b, c: a.clone().mul_(b).add_(c),
    "cross of separate inputs": lambda a, b, c: torch.linalg.cross(a.reshape(-1, 3),
                                                                   b.reshape(-1, 3)),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(FUSABLE_CASES))
def test_a_16_bit_product_feeding_an_add_is_rounded_first(name, dtype):
    """torch rounds each product to the 16-bit type; LLVM (XLA:CPU) fuses a 16-bit product
    with the add after it into one multiply-add, rounded once, where the CPU has float16
    arithmetic (AVX512-FP16: a quarter of float16 results differed by an ulp). Elsewhere
    nothing is fused and this passes either way."""
    for n, seed in ((999, 3), (36, 4), (3000, 5)):
        _check(FUSABLE_CASES[name], *(_values(n, seed + k).to(dtype) for k in (0, 10, 20)))
