"""``torch.autocast(device_type="lazy_jax")`` against ``torch.autocast("cpu")``: the lazy
device follows the CPU policy, so each op's result dtype is the CPU's and its values agree
to the precision of the dtype it computed in.

All cases are recorded first and computed by one barrier (one XLA compile)."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, to_cpu
from lazy_runtime import autocast

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


def _randn(g, *shape, dtype=F32):
    return torch.randn(shape, generator=g).to(dtype)


# name -> (fn, make inputs from a generator); every case runs under both dtypes
CASES = {
    # run in the autocast dtype
    "mm": (torch.mm, lambda g, dt: [_randn(g, 3, 5), _randn(g, 5, 4)]),
    "addmm": (torch.addmm, lambda g, dt: [_randn(g, 4), _randn(g, 3, 5), _randn(g, 5, 4)]),
    "bmm": (torch.bmm, lambda g, dt: [_randn(g, 2, 3, 5), _randn(g, 2, 5, 4)]),
    "baddbmm": (torch.baddbmm,
                lambda g, dt: [_randn(g, 2, 3, 4), _randn(g, 2, 3, 5), _randn(g, 2, 5, 4)]),
    "matmul-3d-2d": (torch.matmul, lambda g, dt: [_randn(g, 2, 3, 5), _randn(g, 5, 4)]),
    "linear-bias": (F.linear, lambda g, dt: [_randn(g, 6, 5), _randn(g, 4, 5), _randn(g, 4)]),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=1),
               lambda g, dt: [_randn(g, 2, 3, 9), _randn(g, 4, 3, 3), _randn(g, 4)]),
    "conv2d-stride": (lambda x, w: F.conv2d(x, w, stride=2),
                      lambda g, dt: [_randn(g, 2, 3, 7, 6), _randn(g, 4, 3, 3, 3)]),
    "conv_transpose2d": (F.conv_transpose2d,
                         lambda g, dt: [_randn(g, 1, 3, 4, 4), _randn(g, 3, 2, 3, 3)]),
    "prelu": (F.prelu, lambda g, dt: [_randn(g, 2, 3, 4), _randn(g, 3)]),
    "sdpa-causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    lambda g, dt: [_randn(g, 2, 5, 8) for _ in range(3)]),
    "float64-not-cast": (torch.mm, lambda g, dt: [_randn(g, 3, 5, dtype=F64),
                                              _randn(g, 5, 2, dtype=F64)]),
    # run in float32
    "mse_loss-of-bf16": (F.mse_loss, lambda g, dt: [_randn(g, 4, 5, dtype=BF16),
                                                _randn(g, 4, 5, dtype=BF16)]),
    "cross_entropy-of-f16": (F.cross_entropy,
                             lambda g, dt: [_randn(g, 6, 5, dtype=F16),
                                        torch.randint(0, 5, (6,), generator=g)]),
    "prod-of-bf16": (torch.prod, lambda g, dt: [_randn(g, 5, dtype=BF16) / 2 + 1]),
    "bce_with_logits": (F.binary_cross_entropy_with_logits,
                        lambda g, dt: [_randn(g, 4, 3, dtype=BF16), torch.rand(4, 3, generator=g)]),
    # the widest floating type among the inputs
    "cat-mixed": (lambda a, b: torch.cat([a, b]),
                  lambda g, dt: [_randn(g, 2, 3, dtype=dt), _randn(g, 4, 3)]),
    "stack-low": (lambda a, b: torch.stack([a, b]),
                  lambda g, dt: [_randn(g, 2, 3, dtype=dt), _randn(g, 2, 3, dtype=dt)]),
    # not autocast ops: their dtypes as given
    "add-relu": (lambda a, b: torch.relu(a + b), lambda g, dt: [_randn(g, 3, 4), _randn(g, 3, 4)]),
    "mm-then-add": (lambda a, b, c: a @ b + c,
                    lambda g, dt: [_randn(g, 3, 5), _randn(g, 5, 4), _randn(g, 3, 4)]),
}


def _tol(dtype):
    return dict(rtol=2e-2, atol=2e-2) if dtype is BF16 else dict(rtol=2e-3, atol=2e-3)


@pytest.fixture(scope="module")
def results():
    """(lazy, cpu) results of every case under both dtypes, after one barrier."""
    out = {}
    for i, (name, (fn, make)) in enumerate(sorted(CASES.items())):
        for dtype in (BF16, F16):
            xs = make(torch.Generator().manual_seed(i), dtype)
            with torch.autocast("cpu", dtype=dtype):
                want = fn(*xs)
            with torch.autocast(DEV.type, dtype=dtype):
                got = fn(*[x.to(DEV) for x in xs])
            out[name, dtype] = (got, want)
    lr.mark_step()
    return out


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_under_autocast_matches_cpu_autocast(results, name, dtype):
    got, want = results[name, dtype]
    got = to_cpu(got)
    assert got.dtype == want.dtype, f"{name}: {got.dtype} != cpu autocast's {want.dtype}"
    torch.testing.assert_close(got.float(), want.float(), **_tol(want.dtype))


def test_promoting_two_lower_dtypes_is_torchs_error():
    """``cat`` of bfloat16 and float16 under float16 autocast: torch's CPU autocast refuses
    (it promotes only to float32 or the autocast dtype); so does the lazy device's."""
    a, b = torch.randn(2, 3, dtype=BF16), torch.randn(2, 3, dtype=F16)
    errors = []
    for dev in ("cpu", DEV):
        with torch.autocast(torch.device(dev).type, dtype=F16):
            with pytest.raises(RuntimeError, match="Unexpected floating ScalarType") as e:
                torch.cat([a.to(dev), b.to(dev)])
        errors.append(str(e.value).splitlines()[0])
    assert errors[0] == errors[1]


def test_policy_covers_every_cpu_autocast_op():
    """Every overload torch's CPU autocast registers has a kernel on the lazy device,
    with CPU's policy (spot checks of each kind)."""
    registered = autocast._cpu_autocast_ops()
    assert len(registered) > 100
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", "AutocastPrivateUse1")
    assert {autocast.policy(b) for _, b, _ in registered} == {"lower", "fp32", "promote"}
    assert (autocast.policy("conv2d"), autocast.policy("nll_loss"),
            autocast.policy("stack")) == ("lower", "fp32", "promote")


def test_training_under_autocast_matches_cpu_autocast():
    """Forward and loss under autocast, backward and SGD outside it: float32 parameters get
    float32 gradients through the casts, and three steps follow CPU autocast's."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6, 5), torch.nn.LayerNorm(5),
                                torch.nn.Linear(5, 3))
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_l = torch.optim.SGD(lazy.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    lr.reset_metrics()
    for _ in range(3):
        x, y = torch.randn(4, 3, 8, generator=g), torch.randint(0, 3, (4,), generator=g)
        for model, opt, dev in ((eager, opt_e, "cpu"), (lazy, opt_l, DEV)):
            with torch.autocast(torch.device(dev).type, dtype=BF16):
                out = model(x.to(dev))
                loss = F.cross_entropy(out, y.to(dev))
            assert out.dtype == BF16 and loss.dtype == F32
            loss.backward()
            opt.step()
            opt.zero_grad()
        lr.mark_step()
    assert lr.metrics()["fallback_ops"] == {}
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        assert pl.dtype == F32
        torch.testing.assert_close(to_cpu(pl.detach()), pe.detach(), rtol=2e-2, atol=2e-2)


def test_an_unsupported_dtype_disables_autocast_with_torchs_warning():
    x = torch.randn(3, 4).to(DEV)
    w = torch.randn(2, 4).to(DEV)
    with pytest.warns(UserWarning, match="Disabling autocast"):
        with torch.autocast(device_type=DEV.type, dtype=F64):
            y = F.linear(x, w)
    assert y.dtype == F32


def test_autocast_off_costs_nothing_and_casts_nothing():
    x = torch.randn(3, 4).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast(device_type=DEV.type, dtype=BF16, enabled=False):
            assert (x @ x.T).dtype == F32


def test_replays_are_keyed_by_the_autocast_state():
    """A whole step or a forward traced under autocast is not replayed without it (its
    casts were traced), and the other way round."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(x):
        out = model(x.to(DEV))
        out.float().sum().backward()
        opt.step()
        opt.zero_grad()
        return out.detach()
    step = lr.compile_step(train, model, opt)
    forward = lr.compile(copy.deepcopy(model), replay=True)
    x = torch.randn(2, 4)
    lr.reset_metrics()
    for on in (True, True, True, True, False, False, False, True):
        with torch.autocast(DEV.type, dtype=BF16, enabled=on):
            want = BF16 if on else F32
            assert step(x).dtype == want
            with torch.no_grad():
                assert forward(x.to(DEV)).dtype == want
        lr.mark_step()
    m = lr.metrics()
    assert m["step_replays"] >= 3 and m["replays"] >= 3
