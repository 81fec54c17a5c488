"""The harness of the lowering tests: cases recorded lazily and computed by one barrier,
against eager torch (the oracle). Each ``test_lowerings*.py`` file holds its own cases."""

import random
import warnings

import pytest
import torch

import lazy_runtime as lr
from conftest import assert_same, to_lazy

F32, F64, I64, I32, BOOL, BF16, F16, U8 = (torch.float32, torch.float64, torch.int64, torch.int32,
                                          torch.bool, torch.bfloat16, torch.float16, torch.uint8)
C64, C128 = torch.complex64, torch.complex128


class Case:
    """``grad``: False, True (all float inputs need grad) or the input positions that do."""

    def __init__(self, name, fn, make, rtol=1e-5, atol=1e-6, grad=False):
        self.name, self.fn, self.make, self.rtol, self.atol, self.grad = \
            name, fn, make, rtol, atol, grad


def rnd(gen, shape, dtype=F32, lo=-3, hi=3):
    if dtype == BOOL:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_complex:
        part = torch.float64 if dtype == C128 else F32
        return torch.complex(rnd(gen, shape, part, lo, hi), rnd(gen, shape, part, lo, hi))
    if not dtype.is_floating_point:
        return torch.randint(lo, hi, shape, generator=gen).to(dtype)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def shape(r, ndim=None, lo=1, hi=6):
    return tuple(r.randint(lo, hi) for _ in range(ndim if ndim is not None else r.randint(1, 3)))


def _inputs(c):
    seed = sum(map(ord, c.name))
    return c.make(torch.Generator().manual_seed(seed), random.Random(seed))


def _record(c, grad):
    xs = _inputs(c)
    if grad:
        want = c.grad if isinstance(c.grad, tuple) else range(len(xs))
        xs = [x.requires_grad_() if i in want and (x.is_floating_point() or x.is_complex())
              else x for i, x in enumerate(xs)]
        eager = _grads(c, xs)
        lx = [x.detach().to(lr.device()).requires_grad_(x.requires_grad) for x in xs]
        return _grads(c, lx), eager
    return c.fn(*to_lazy(xs)), c.fn(*xs)


def run_all(cases, grad):
    """Record every case lazily, then one barrier; eager results alongside. If the shared
    graph fails, each case runs alone so that only the broken one fails."""
    out = {}
    lr.reset_metrics()
    for c in cases:
        try:
            lazy, eager = _record(c, grad)
            out[c.name] = (lazy, eager, None)
        except Exception as e:  # a broken rule fails only its own test
            out[c.name] = (None, None, e)
    try:
        lr.mark_step()
    except Exception:
        for c in cases:
            if out[c.name][2] is not None:
                continue
            try:
                lazy, eager = _record(c, grad)
                lr.mark_step()
                out[c.name] = (lazy, eager, None)
            except Exception as e:
                out[c.name] = (None, None, e)
    out["__fallbacks__"] = lr.metrics()["fallback_ops"]
    return out


def _grads(c, xs):
    out = c.fn(*xs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    total = 0
    for i, o in enumerate(outs):
        if o.is_complex():   # a real loss of both parts
            o = torch.view_as_real(o.resolve_conj())
        if o.is_floating_point():
            w = torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(o.dtype)
            total = total + (o * (w.to(o.device) + i)).sum()
    ins = [x for x in xs if x.requires_grad]
    return list(torch.autograd.grad(total, ins, allow_unused=True))


# float64 results within this (every case met it when it was set: a lowering that computes
# a float64 value through float32 would not)
TOL64 = 1e-10


def check_forward(c, results):
    lazy, eager, err = results[c.name]
    if err is not None:
        raise err
    assert_same(lazy, eager, c.rtol, c.atol, c.name, TOL64)


def check_backward(c, results):
    lazy, eager, err = results[c.name]
    if err is not None:
        raise err
    for i, (lg, eg) in enumerate(zip(lazy, eager)):
        if eg is None:
            assert lg is None or not lg.cpu().any()
            continue
        assert_same(lg, eg, max(c.rtol, 1e-4), max(c.atol, 1e-5), f"{c.name} grad {i}",
                    TOL64)


def lowering_tests(cases):
    """The tests of a case file: its two shared barriers (values, then gradients), each
    case's values and gradients against torch, and no case run eagerly. A file binds them
    to module names so that pytest collects them."""
    grad_cases = [c for c in cases if c.grad]

    @pytest.fixture(scope="module")
    def forward_results():
        return run_all(cases, grad=False)

    @pytest.fixture(scope="module")
    def backward_results():
        return run_all(grad_cases, grad=True)

    @pytest.mark.parametrize("c", cases, ids=[c.name for c in cases])
    def test_lowering_matches_torch(c, forward_results):
        check_forward(c, forward_results)

    @pytest.mark.parametrize("c", grad_cases, ids=[c.name for c in grad_cases])
    def test_backward_matches_torch(c, backward_results):
        check_backward(c, backward_results)

    def test_every_case_was_lowered_not_run_eagerly(forward_results, backward_results):
        assert forward_results["__fallbacks__"] == {}
        assert backward_results["__fallbacks__"] == {}

    return (forward_results, backward_results, test_lowering_matches_torch,
            test_backward_matches_torch, test_every_case_was_lowered_not_run_eagerly)


def error_of(fn, xs):
    """(type, message) of the error ``fn(*xs)`` raises, or None."""
    try:
        fn(*xs)
    except Exception as e:  # the error itself is what is compared
        return type(e), str(e)
    return None


def assert_torchs_error(fn, xs):
    """``fn`` on lazy copies of ``xs`` (its result read) raises the error eager torch
    raises on ``xs``; metrics are reset first, for the caller's checks of them."""
    def read(out):
        if isinstance(out, (tuple, list)):
            return [read(o) for o in out]
        return out.cpu() if isinstance(out, torch.Tensor) else out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (uint8 masks and indices are deprecated)
        want = error_of(fn, [x.clone() for x in xs])
        assert want is not None, "torch accepts this case"
        lr.reset_metrics()
        assert error_of(lambda *a: read(fn(*a)), to_lazy([x.clone() for x in xs])) == want
