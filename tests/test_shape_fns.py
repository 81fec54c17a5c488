"""The pure shape functions with int dims (the runtime's path) against torch, on
random sizes; and their symbolic answers evaluated at the same sizes."""

import random

import pytest
import sympy
import torch
import torch.nn.functional as F

from shapeinfer import shape_fns as sf
from shapeinfer import symbolic as sym

RNG = random.Random(0)


def _eval(shape, sizes):
    return tuple(sym.evaluate(d, sizes) for d in shape)


def test_narrow_dim_matches_python_slicing():
    for _ in range(300):
        n = RNG.randint(0, 9)
        start = RNG.choice([None, RNG.randint(-12, 12)])
        stop = RNG.choice([None, RNG.randint(-12, 12)])
        step = RNG.randint(1, 3)
        assert sf.narrow_dim(n, start, stop, step) == len(range(n)[start:stop:step]), (n, start, stop, step)


@pytest.mark.parametrize("start,stop", [(-2, None), (None, -1), (1, None), (None, 3), (-3, -1)])
def test_narrow_dim_symbolic_bounds_are_exact_or_unknown(start, stop):
    T = sym.symbol("T")
    d = sf.narrow_dim(T, start, stop, 1)
    for n in range(1, 9):
        if d is not None:
            assert sym.evaluate(d, {"T": n}) == len(range(n)[start:stop]), (start, stop, n, d)


def test_squeeze_shape():
    B = sym.symbol("B")
    assert sf.squeeze_shape((3, 1, 4)) == (3, 4)
    assert sf.squeeze_shape((3, 1, 4), (1,)) == (3, 4)
    assert sf.squeeze_shape((3, 1, 4), (0,)) == (3, 1, 4)
    assert sf.squeeze_shape((B, 1), (1,)) == (B,)
    assert sf.squeeze_shape((B, 1), (0,)) is None  # B may be 1
    assert sf.squeeze_shape((2 * B, 1)) == (2 * B,)  # 2*B is never 1


def test_pool_shape_matches_torch_including_ceil_mode():
    for _ in range(200):
        k = RNG.randint(1, 4)
        s = RNG.randint(1, 4)
        p = RNG.randint(0, k // 2)
        d = RNG.randint(1, 2)
        size = RNG.randint(d * (k - 1) + 1, 20)
        ceil = RNG.random() < 0.5
        x = torch.empty(1, 1, size)
        real = F.max_pool1d(x, k, s, p, d, ceil_mode=ceil).shape
        assert sf.pool_shape((1, 1, size), k, s, p, d, ceil, 1) == tuple(real), (size, k, s, p, d, ceil)


def test_pool_shape_symbolic_ceil_mode_is_exact_or_unknown():
    L = sym.symbol("L")
    for k, s, p in [(2, 2, 0), (3, 2, 1), (3, 3, 0), (2, 3, 0), (1, 2, 0)]:
        (_, o) = sf.pool_shape((1, L), k, s, p, 1, True, 1)
        for n in range(max(k - 2 * p, 1), 30):
            real = F.max_pool1d(torch.empty(1, 1, n), k, s, p, ceil_mode=True).shape[-1]
            if o is not None:
                assert sym.evaluate(o, {"L": n}) == real, (k, s, p, n, o)


def test_conv_shape_matches_torch():
    for _ in range(100):
        k, s, p, d = RNG.randint(1, 4), RNG.randint(1, 3), RNG.randint(0, 2), RNG.randint(1, 2)
        size = RNG.randint(d * (k - 1) + 1, 16)
        w = torch.empty(2, 3, k)
        real = F.conv1d(torch.empty(1, 3, size), w, stride=s, padding=p, dilation=d).shape
        assert sf.conv_shape((1, 3, size), (2, 3, k), s, p, d) == tuple(real)
        op = RNG.randint(0, max(s, d) - 1)
        wt = torch.empty(3, 2, k)
        try:
            real_t = F.conv_transpose1d(torch.empty(1, 3, size), wt, stride=s, padding=p, output_padding=op,
                                        dilation=d).shape
        except RuntimeError:  # output too small: the shape function says so too
            with pytest.raises(sf.ShapeError):
                sf.conv_shape((1, 3, size), (3, 2, k), s, p, d, 1, True, op)
            continue
        assert sf.conv_shape((1, 3, size), (3, 2, k), s, p, d, 1, True, op) == tuple(real_t)


def test_reshape_and_broadcast_match_torch():
    for _ in range(100):
        shape = tuple(RNG.randint(1, 4) for _ in range(RNG.randint(1, 4)))
        n = sf.numel(shape)
        target = (-1, shape[-1])
        assert sf.reshape_shape(shape, target) == tuple(torch.empty(shape).reshape(target).shape)
        other = tuple(RNG.choice([1, d]) for d in shape[RNG.randint(0, len(shape) - 1):])
        assert sf.broadcast_shapes(shape, other) == tuple(torch.broadcast_shapes(shape, other))
        assert n == torch.empty(shape).numel()


def test_matmul_shape_matches_torch():
    for a, b in [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((5, 1, 2, 3), (4, 3, 2)), ((2, 3), (3, 4))]:
        assert sf.matmul_shape(a, b) == tuple((torch.empty(a) @ torch.empty(b)).shape)



def test_concrete_broadcast_and_matmul_agree_with_torch_and_the_symbolic_path():
    """Plain int sizes take a fast path (every op the runtime records): torch's shapes,
    zero sizes included, and the general path's errors where torch refuses."""
    rng = random.Random(1)
    for _ in range(300):
        shapes = [tuple(rng.choice([0, 1, 1, 2, 3]) for _ in range(rng.randint(0, 4)))
                  for _ in range(rng.randint(1, 3))]
        try:
            want = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            with pytest.raises(sf.ShapeError, match="cannot broadcast"):
                sf.broadcast_shapes(*shapes)
            continue
        assert sf.broadcast_shapes(*shapes) == want, shapes
        symbolic = [tuple(sympy.Integer(d) if d > 1 else d for d in s) for s in shapes]
        assert tuple(sym.normalize(d) for d in sf.broadcast_shapes(*symbolic)) == want
    for a, b in [((2, 0), (0, 3)), ((4, 2, 3), (1, 3, 5)), ((0, 3), (3,)), ((3, 4), (5, 6)),
                 ((2, 2, 3), (3, 3, 1))]:
        try:
            want = tuple((torch.empty(a) @ torch.empty(b)).shape)
        except RuntimeError:
            with pytest.raises(sf.ShapeError):
                sf.matmul_shape(a, b)
            continue
        assert sf.matmul_shape(a, b) == want, (a, b)

def test_chunk_sizes_match_torch():
    for n in range(0, 13):
        for k in range(1, 6):
            real = [t.shape[0] for t in torch.empty(n).chunk(k)]
            assert sf.chunk_sizes(n, k) == real, (n, k)


def test_reshape_with_zero_sizes_matches_torch():
    # every target of up to three sizes from {-1, 0, 1, 2, 3, 6}, over shapes with and
    # without elements: torch either gives a shape (ours must equal it) or raises (so must we)
    sizes = [-2, -1, 0, 1, 2, 3, 6]
    targets = [(a,) for a in sizes] + [(a, b) for a in sizes for b in sizes] + \
        [(a, b, c) for a in sizes for b in sizes for c in (-1, 0, 2)]
    for shape in [(2, 3), (0, 3), (6,), (0,), (2, 0, 3)]:
        for target in targets:
            try:
                real = tuple(torch.empty(shape).reshape(target).shape)
            except RuntimeError:
                with pytest.raises(sf.ShapeError):
                    sf.reshape_shape(shape, target)
                continue
            assert sf.reshape_shape(shape, target) == real, (shape, target)


def test_reshape_infers_minus_one_when_the_known_sizes_may_be_zero():
    # [B, 4*(T//4), C] viewed as [B, T//4, 4, -1]: T//4 is 0 for T < 4, where torch raises;
    # elsewhere the -1 is C (a requirement is sent, nothing raised, no crash)
    B, T, C = sym.symbol("B"), sym.symbol("T"), sym.symbol("C")
    n = sym.floordiv(T, 4)
    sent = []
    with sf.collect_requirements(lambda op, a, b, what: sent.append((op, a, b))):
        out = sf.reshape_shape((B, sym.mul(4, n), C), (B, n, 4, -1))
    assert sent and sent[0][0] == ">"
    for t in range(4, 20):
        sizes = {"B": 2, "T": t, "C": 3}
        real = tuple(torch.empty(2, 4 * (t // 4), 3).view(2, t // 4, 4, -1).shape)
        assert _eval(out, sizes) == real


def test_floors_compare_through_their_bounds():
    T = sym.symbol("T")
    f = sym.mul(4, sym.floordiv(T, 4))
    cases = [("<=", f, T), (">", f, T), (">=", f, sym.sub(T, 3)), (">", f, sym.sub(T, 3)),
             ("<", f, sym.sub(T, 4)), (">=", T, sym.mul(2, sym.floordiv(T, 2)))]
    for op, a, b in cases:
        verdict = sym.compare(op, a, b)
        truths = {sym.holds_at(sym.relation(op, a, b), {"T": t}) for t in range(1, 40)}
        # decided only when every size agrees, and then the same way
        assert verdict is None or truths == {verdict}, (op, a, b, verdict, truths)
        if len(truths) == 1:
            assert verdict is not None, (op, a, b)
