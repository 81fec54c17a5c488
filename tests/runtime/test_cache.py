"""The compile cache: structural keys, reuse, recompile reasons, LRU bound, and scalars
that change every step without recompiling."""

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV


def _step(x, s=2.0):
    y = (x * s + 1).relu().sum(0)
    lr.mark_step()
    return y


def test_same_graph_is_compiled_once():
    lr.reset_metrics()
    for _ in range(3):
        y = _step(torch.randn(4, 3).to(DEV))
    m = lr.metrics()
    assert m["graphs_executed"] == 3
    assert m["compiles"] <= 1 and m["cache_hits"] >= 2
    assert y.shape == (3,)


def test_an_op_of_hundreds_of_inputs_is_compiled_once():
    # a stack of 300 tensors (a running statistic kept per step of a loop: TimesFM 2.5's
    # 512 patches): its input markers past 255 were new objects at every call, so its key
    # never met the cached one and it compiled at every barrier
    lr.reset_metrics()
    x = torch.randn(300, 3, dtype=torch.float64)   # (a sum of 300: float32 rounds apart)
    for _ in range(3):
        xd = x.to(DEV)
        y = torch.stack([xd[i] * (i + 1) for i in range(300)]).sum(0)
        lr.mark_step()
    m = lr.metrics()
    assert m["compiles"] <= 1 and m["cache_hits"] >= 2, m["recompile_reasons"]
    weights = torch.arange(1, 301, dtype=torch.float64)[:, None]
    torch.testing.assert_close(y.cpu(), (x * weights).sum(0))


def test_a_difference_deep_in_long_arguments_is_located():
    # the arguments' short forms read alike; the reason says where they first differ
    lr.clear_cache()
    lr.reset_metrics()
    x = torch.randn(6).to(DEV)
    for sizes in ([1] * 40 + [6], [1] * 39 + [6, 1]):
        (x.reshape(sizes) * 2).cpu()
    reason = lr.metrics()["recompile_reasons"][-1]
    assert reason.endswith("(at [1][39]: 1 -> 6)"), reason


def test_new_shape_recompiles_and_says_why():
    lr.clear_cache()  # no graph family seen before at another size (automatic dynamic)
    _step(torch.randn(4, 3).to(DEV))
    lr.reset_metrics()
    _step(torch.randn(5, 3).to(DEV))
    m = lr.metrics()
    assert m["compiles"] == 1
    assert "input shape (4, 3) -> (5, 3)" in m["recompile_reasons"][-1]


def test_new_dtype_recompiles_and_says_why():
    _step(torch.randn(4, 3).to(DEV))
    lr.reset_metrics()
    _step(torch.randn(4, 3, dtype=torch.float64).to(DEV))
    reason = lr.metrics()["recompile_reasons"][-1]
    assert "dtype" in reason and "float64" in reason, reason


def test_new_op_recompiles_and_says_why():
    x = torch.randn(4, 3).to(DEV)
    y = (x * 2.0 + 1).relu().sum(0)
    lr.mark_step()
    lr.reset_metrics()
    y = (x * 2.0 + 1).sigmoid().sum(0)  # noqa: F841  (only live tensors are computed)
    lr.mark_step()
    reason = lr.metrics()["recompile_reasons"][-1]
    assert "relu" in reason and "sigmoid" in reason, reason


def test_changing_float_scalars_do_not_recompile():
    x = torch.randn(4, 3).to(DEV)
    _step(x, 0.5)
    lr.reset_metrics()
    outs = [_step(x, s) for s in (0.25, 0.75, 1.5)]
    assert lr.metrics()["compiles"] == 0
    for s, y in zip((0.25, 0.75, 1.5), outs):
        torch.testing.assert_close(y.cpu(), (x.cpu() * s + 1).relu().sum(0))


def test_changing_int_scalars_of_float_and_int64_tensors_do_not_recompile_int32_ones_do():
    def f(t, n):   # a per-step count (``loss / n_tokens``), a step number
        return (t / n + t * n - n).clamp(min=-n, max=n * 2) + t.add(n, alpha=2)

    x = torch.randn(4, 3)
    xl = x.to(DEV)
    f(xl, 3).cpu()
    lr.reset_metrics()
    for n in (2, 7, -3, 1000, 2 ** 40):
        torch.testing.assert_close(f(xl, n).cpu(), f(x, n), rtol=1e-6, atol=0)
        assert f(xl, n).dtype == torch.float32
    assert lr.metrics()["compiles"] == 0, lr.metrics()["recompile_reasons"]
    f(xl, 1).cpu()   # 0 and 1 are constants (as torch.compile specializes them)
    assert lr.metrics()["compiles"] == 1
    for dtype, compiles in ((torch.int64, 0), (torch.int32, 2)):
        i = torch.arange(6, dtype=dtype) + 2 ** 30
        il = i.to(DEV)
        ((il * 3 + 3) * 0.5).cpu()   # (a float read: integer ones are computed on the host)
        lr.reset_metrics()
        # int64: computed in int64 either way (wrapping alike); int32: the int's own value
        # would wrap where its float's does not (a constant)
        for n in (2, 5):
            got = ((il * n + n) * 0.5).cpu()   # (outside the assert: pytest would keep
            assert torch.equal(got, (i * n + n) * 0.5)   # the temporaries alive)
        assert lr.metrics()["compiles"] == compiles, (dtype, lr.metrics()["recompile_reasons"])


def test_lr_schedule_does_not_recompile():
    model = torch.nn.Linear(3, 2).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.5)
    x = torch.randn(5, 3).to(DEV)
    compiles = []
    for _ in range(4):
        lr.reset_metrics()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        lr.mark_step()
        compiles.append(lr.metrics()["compiles"])
    assert compiles[1:] == [0, 0, 0]


def test_lru_cache_is_bounded():
    old = lr.config.cache_size
    lr.clear_cache()
    lr.config.cache_size = 2
    lr.config.automatic_dynamic = False  # every shape its own graph (the classic case)
    try:
        lr.reset_metrics()
        for n in (2, 3, 4):
            _step(torch.randn(n, 3).to(DEV))
        assert lr.cache_info()["size"] == 2
        assert lr.metrics()["cache_evictions"] == 1
        _step(torch.randn(2, 3).to(DEV))  # evicted: compiles again
        assert lr.metrics()["compiles"] == 4
        _step(torch.randn(4, 3).to(DEV))  # still cached
        assert lr.metrics()["compiles"] == 4
    finally:
        lr.config.cache_size = old
        lr.config.automatic_dynamic = True


def test_momentum_sgd_needs_two_graphs_then_none():
    """The first SGD-momentum step creates the buffers (a different graph); later steps
    reuse one executable."""
    model = torch.nn.Linear(3, 2).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(5, 3).to(DEV)
    lr.reset_metrics()
    for _ in range(4):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        lr.mark_step()
    assert lr.metrics()["graphs_executed"] == 4
    assert lr.metrics()["compiles"] <= 2


def test_changed_compile_settings_compile_again_and_say_why():
    """An executable is compiled for a device and an excess-precision setting: a cached one
    compiled under other settings is not reused (it would keep the old rounding, or refuse
    the new device's arrays)."""
    x = torch.randn(5)

    def run():
        return (x.to(DEV) * 3 - 1).sum().item()

    run()
    lr.reset_metrics()
    run()
    assert lr.metrics()["compiles"] == 0
    old = lr.config.excess_precision
    lr.config.excess_precision = not old
    try:
        run()
        run()
        assert lr.metrics()["compiles"] == 1
        assert lr.metrics()["recompile_reasons"][-1] == (
            f"compile settings changed: excess precision {old} -> {not old}")
    finally:
        lr.config.excess_precision = old


def test_compiler_options_reach_xla_and_compile_again_when_changed(monkeypatch):
    """``config.compiler_options``: XLA options of the runtime's compiles; a change compiles
    again and says so; options XLA refuses are named in the error, and the runtime keeps
    working once they are taken back."""
    x = torch.rand(6, generator=torch.Generator().manual_seed(0)) + 1   # (a sum far from 0)

    def run():
        return (x.to(DEV) * 5 + 2).sum().item()

    run()
    lr.reset_metrics()
    monkeypatch.setattr(lr.config, "compiler_options", {"xla_cpu_enable_fast_math": False})
    run()
    run()
    assert lr.metrics()["compiles"] == 1
    assert lr.metrics()["recompile_reasons"][-1] == (
        "compile settings changed: compiler options {} -> {'xla_cpu_enable_fast_math': False}")
    assert "XLA options {'xla_cpu_enable_fast_math': False}" in lr.metrics_report()
    monkeypatch.setattr(lr.config, "compiler_options", {"xla_no_such_option": 1})
    with pytest.raises(lr.LazyRuntimeError, match=r"config.compiler_options .*"
                                                  r"xla_no_such_option.*XLA refused them"):
        run()
    monkeypatch.setattr(lr.config, "compiler_options", ["not", "a", "dict"])
    with pytest.raises(lr.LazyRuntimeError, match="compiler_options must be a dict"):
        run()
    monkeypatch.setattr(lr.config, "compiler_options", {})
    assert run() == pytest.approx((x * 5 + 2).sum().item(), rel=1e-5)
