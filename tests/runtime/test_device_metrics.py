"""The device object, metrics keys and report, recording without running, backward on the
calling thread, shared 0-d constants, and XLA:GPU when present."""

import copy
import os
import subprocess
import sys

import jax
import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, ROOT, load_example


def test_device_is_a_torch_device():
    dev = lr.device()
    assert isinstance(dev, torch.device) and dev.type == "lazy_jax"
    m = torch.nn.Linear(2, 3).to(dev)
    assert m.weight.device == dev and isinstance(m.weight, torch.nn.Parameter)
    assert torch.zeros(2, device=dev).device == dev


def test_metrics_keys_and_report():
    lr.reset_metrics()
    (torch.randn(3).to(DEV) * 2).sum().item()
    m = lr.metrics()
    for key in ("compiles", "cache_hits", "graphs_executed", "compile_seconds",
                "execute_seconds", "traced_ops", "fallback_ops", "recompile_reasons"):
        assert key in m, key
    assert m["graphs_executed"] == 1 and m["traced_ops"] >= 2
    report = lr.metrics_report()
    assert "compiles" in report and "fallback ops" in report
    assert "excess precision off" in report.splitlines()[1], report
    lr.reset_metrics()
    assert lr.metrics()["graphs_executed"] == 0


def test_recording_runs_nothing_until_the_barrier():
    """Tracing only records: no compile, no execution, until the barrier runs one graph.
    (What a recorded op costs is measured in ``benchmarks/runtime_step.py``, not timed
    here: a timed test on this shared machine fails on noise and first-call costs.)"""
    x = torch.randn(16, 16).to(DEV)
    y = torch.randn(16, 16).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    outs = [x + y * i for i in range(1, 51)]
    m = lr.metrics()
    assert (m["traced_ops"], m["compiles"], m["graphs_executed"]) == (100, 0, 0)
    lr.sync()
    m = lr.metrics()
    assert m["graphs_executed"] == 1 and m["compiles"] <= 1
    torch.testing.assert_close(outs[-1].cpu(), x.cpu() + y.cpu() * 50)


def test_backward_runs_on_the_calling_thread():
    """``loss.backward()`` on the lazy device runs autograd single-threaded (every op is
    Python: a device worker thread only adds handoffs); other entry points still work."""
    import threading
    x = torch.randn(3, 4).to(DEV).requires_grad_()
    threads = []
    y = x * 2
    y.register_hook(lambda g: threads.append(threading.get_ident()))
    (y * y).sum().backward()
    assert threads == [threading.get_ident()]
    g = x.grad.cpu()
    x.grad = None
    torch.autograd.backward([(x * 2 * x * 2).sum()])
    torch.testing.assert_close(x.grad.cpu(), g)


def test_filled_scalars_are_shared_across_steps_and_keep_their_sign():
    """0-d constants (the ``ones_like`` that seeds every backward) reuse one device array
    per (dtype, fill) across steps; a zero keeps its sign, a fill its type."""
    z = torch.randn(()).to(DEV)
    pos = 1 / torch.full_like(z, 0.0)
    neg = 1 / torch.full_like(z, -0.0)
    assert (pos.item(), neg.item()) == (float("inf"), float("-inf"))
    # factories made on the host are shared within a step by their arguments: a fill of
    # True, 1 and 1.0 gives three dtypes, -0.0 is not 0.0
    made = [torch.full((), v, device=DEV) for v in (True, 1, 1.0, 0.0, -0.0)]
    assert [t.dtype for t in made] == [torch.bool, torch.int64, torch.float32,
                                        torch.float32, torch.float32]
    assert [(1 / t).item() for t in made[3:]] == [float("inf"), float("-inf")]
    x = torch.randn(3).to(DEV).requires_grad_()
    lr.mark_step()
    transfers = []
    for _ in range(2):
        before = lr.metrics()["transfers_to_device"]
        (x * x).sum().backward()
        lr.mark_step()
        transfers.append(lr.metrics()["transfers_to_device"] - before)
    assert transfers[1] == 0, transfers
    torch.testing.assert_close(x.grad.cpu(), 4 * x.detach().cpu())


@pytest.mark.parametrize("make", [
    lambda **k: torch.zeros(3, 4, **k),
    lambda **k: torch.ones(2, 5, dtype=torch.int32, **k),
    lambda **k: torch.full((4,), 2.7, dtype=torch.int64, **k),   # truncated, as torch does
    lambda **k: torch.full((2, 3), -0.0, **k),
    lambda **k: torch.full((3,), float("nan"), dtype=torch.float64, **k),
    lambda **k: torch.full((2, 2), 1 + 2j, **k),
    lambda **k: torch.full((3,), 1.5, dtype=torch.bfloat16, **k),
    lambda **k: torch.zeros(0, 3, dtype=torch.bool, **k),
    lambda **k: torch.ones((), dtype=torch.float16, **k),
    lambda **k: torch.ones([2, 3], dtype=torch.complex64, **k),
    lambda **k: torch.ones(3, dtype=torch.bool, **k),
    lambda **k: torch.zeros((2,), dtype=torch.uint8, layout=torch.strided, **k),
    lambda **k: torch.full([3], 0.1, **k),   # (rounded to float32 as torch rounds it)
], ids=["zeros", "ones-int32", "full-int-truncated", "full-neg-zero", "full-nan-f64",
        "full-complex", "full-bf16", "zeros-empty-bool", "ones-0d-f16", "ones-complex",
        "ones-bool", "zeros-uint8-strided", "full-float-rounded"])
def test_uniform_factories_match_torch_and_copy_once(make):
    """``zeros``/``ones``/``full`` on the device: torch's values, dtypes and signs, from
    one shared device array per shape, dtype and value (an LSTM makes its zero states each
    call: no copy each step)."""
    want = make()
    copies = []
    for _ in range(2):
        before = lr.metrics()["transfers_to_device"]
        got = make(device=DEV)
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        got = got.cpu()
        copies.append(lr.metrics()["transfers_to_device"] - before)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(torch.signbit(got.real), torch.signbit(want.real))
    assert copies[1] == 0, copies



def test_zeros_ones_and_full_follow_the_default_dtype_and_torchs_errors():
    """(``zeros``/``ones`` of plain sizes, ``full`` of a float in float32/float64, take a
    path that makes no host tensor.)"""
    torch.set_default_dtype(torch.float64)
    try:
        assert torch.zeros(2, device=DEV).dtype == torch.float64
        assert torch.ones((1, 2), device=DEV).dtype == torch.float64
        assert torch.full((2,), 0.1, device=DEV).cpu().equal(torch.full((2,), 0.1))
    finally:
        torch.set_default_dtype(torch.float32)
    for make in (lambda **k: torch.zeros(2, -1, **k), lambda **k: torch.ones((-3,), **k),
                 lambda **k: torch.full((2,), 1e300, **k),
                 lambda **k: torch.full((2,), 7e4, dtype=torch.float16, **k)):
        with pytest.raises(RuntimeError) as want:
            make()
        with pytest.raises(RuntimeError) as got:
            make(device=DEV)
        assert str(got.value) == str(want.value)


def test_copies_to_the_device_are_staged_until_a_graph_reads_them():
    """``.to(dev)`` copies on the host; the first barrier reading the copy puts it on the
    device, once: the source may change afterwards, a second graph reuses the array."""
    src = torch.randn(4, 3)
    want = src.clone()
    lr.mark_step()
    lr.clear_cache()   # (no graph family learnt in another test runs these padded)
    before = lr.metrics()["transfers_to_device"]
    x = src.to(DEV)
    src.add_(100.0)   # the copy was taken at .to(dev)
    assert lr.metrics()["transfers_to_device"] == before
    torch.testing.assert_close((x * 2).cpu(), want * 2)
    assert lr.metrics()["transfers_to_device"] == before + 1
    torch.testing.assert_close((x + 1).cpu(), want + 1)
    torch.testing.assert_close(x.cpu(), want)
    assert lr.metrics()["transfers_to_device"] == before + 1


def test_a_staged_input_of_a_padded_graph_is_padded_on_the_host():
    """A dynamic input staged on the host is padded there and copied once (not copied,
    read back and copied again padded)."""
    lr.reset_metrics()
    for T in (5, 7):
        src = torch.randn(2, T)
        x = lr.mark_dynamic(src.to(DEV), 1, "T")
        before = lr.metrics()["transfers_to_device"], lr.metrics()["transfers_to_host"]
        got = (x.exp() * 3).sum(1)
        lr.mark_step()
        after = lr.metrics()["transfers_to_device"], lr.metrics()["transfers_to_host"]
        assert (after[0] - before[0], after[1] - before[1]) == (1, 0), (T, before, after)
        torch.testing.assert_close(got.cpu(), (src.exp() * 3).sum(1))
    assert lr.metrics()["compiles"] >= 1 and not lr.metrics()["exact_compiles"]

def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


@pytest.mark.skipif(not _gpus(), reason="no XLA:GPU device (jax.devices('gpu') is empty)")
@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm", "gpt"])
def test_example_trains_on_xla_gpu(name):
    """Three training steps on XLA:GPU give eager torch's (CPU) losses: the lowerings ask
    for full-precision products, so no TF32 creeps in."""
    old = lr.config.platform
    lr.config.platform = "gpu"
    try:
        ex = load_example(name)
        eager = ex.make_model(dropout=0.0) if name == "gpt" else ex.make_model()
        model = copy.deepcopy(eager).to(DEV)
        losses_e = ex.train(eager, ex.make_optimizer(eager), 3)
        losses = ex.train(model, ex.make_optimizer(model), 3, DEV)
        assert losses == pytest.approx(losses_e, rel=1e-4, abs=1e-5)
        weight = next(model.parameters())
        assert weight._st.node.value.devices().pop().platform == "gpu"
    finally:
        lr.config.platform = old


@pytest.mark.skipif(not _gpus(), reason="no XLA:GPU device (jax.devices('gpu') is empty)")
def test_16_bit_results_round_as_torch_on_xla_gpu():
    """XLA:GPU kept a fused float16 quotient in float32 (4094 / 3 truncated to 1364) until
    the runtime's compiles turned excess precision off (``config.excess_precision``, off by
    default): torch rounds the quotient to 1365 before truncating it."""
    old = lr.config.platform
    lr.config.platform = "gpu"
    try:
        a = torch.tensor([4094.0, 1.0, 4094.0], dtype=torch.float16)
        b = torch.tensor([3.0, 0.30004883, -2.5], dtype=torch.float16)
        got = torch.div(a.to(DEV), b.to(DEV), rounding_mode="trunc").cpu()
        assert torch.equal(got, torch.div(a, b, rounding_mode="trunc")), got
    finally:
        lr.config.platform = old


_OTHER_DEFAULT_DEVICE = """
import jax
jax.config.update("jax_default_device", jax.devices("cpu")[1])
import sys, torch
import lazy_runtime as lr
sys.path.insert(0, "tests/runtime")
from conftest import load_example
platform = sys.argv[1]
lr.config.platform = platform or None
want = jax.devices("cpu")[0 if platform else 1]
ex = load_example("mlp")
torch.manual_seed(0)
model = ex.make_model().to(lr.device())
losses = ex.train(model, ex.make_optimizer(model), 2, lr.device())
opt = lr.compile_optimizer(ex.make_optimizer(model))


def train(x):
    loss = (model(x.to(lr.device())) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


step = lr.compile_step(train, model, opt)
for _ in range(6):
    step(torch.randn(4, 32)).item()
assert lr.metrics()["step_replays"] >= 1, lr.metrics()["step_replays"]
assert next(model.parameters())._st.node.value.devices() == {want}
assert f"XLA device      : {want}" in lr.metrics_report(), lr.metrics_report()
print(want)
"""


@pytest.mark.parametrize("platform", ["cpu", ""], ids=["platform-named", "jax-default"])
def test_the_runtime_device_need_not_be_jax_default_device(platform):
    """On a GPU machine with ``LAZY_RUNTIME_PLATFORM=cpu``, jax's default device is the GPU:
    executables compiled for it refused the runtime's CPU arrays. Here two CPU devices stand
    in for the two platforms: jax's default is cpu:1. A named platform takes its first
    device; without one the runtime follows ``jax_default_device``."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    env.pop("LAZY_RUNTIME_PLATFORM", None)
    r = subprocess.run([sys.executable, "-c", _OTHER_DEFAULT_DEVICE, platform], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == ("cpu:0" if platform else "cpu:1"), r.stdout


def test_torch_takes_the_lazy_device_for_its_accelerator():
    """The torch rule behind the CUDA warning: a named PrivateUse1 backend is the process's
    accelerator (so CUDA autograd, which asks it for streams, breaks). If a torch release
    stops doing this, the warning below is stale."""
    assert torch.accelerator.current_accelerator().type == "lazy_jax"


def test_warns_where_cuda_is_usable(monkeypatch):
    from lazy_runtime import backend
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.warns(RuntimeWarning, match=r"pytorch/pytorch#161129"):
        assert backend.warn_if_cuda()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not backend.warn_if_cuda()


@pytest.mark.parametrize("make", [
    lambda x, s: torch.zeros_like(x, device="cpu"),
    lambda x, s: torch.full_like(x, 2.5, dtype=torch.float64, device="cpu"),
    lambda x, s: torch.ones_like(x, device=torch.device("cpu")),
    lambda x, s: x.new_zeros((2, 3), device="cpu"),
    lambda x, s: x.new_full((2,), 7, device="cpu"),
    lambda x, s: torch.empty_like(x, device="cpu").fill_(1),
    lambda x, s: torch.linspace(s, 5.0, 4, device="cpu"),
    lambda x, s: torch.logspace(0.0, s, 3, device="cpu"),
], ids=["zeros_like", "full_like", "ones_like", "new_zeros", "new_full", "empty_like",
        "linspace", "logspace"])
def test_a_factory_naming_the_cpu_makes_a_cpu_tensor(make):
    """``zeros_like(x, device="cpu")`` & co. of lazy arguments: a CPU tensor, as eager
    torch gives; those that take only x's shape and dtype run no barrier."""
    x, s = torch.randn(3, 2), torch.tensor(2.0)
    want = make(x, s)
    xl = x.to(DEV) * 1   # pending
    sl = s.to(DEV)
    lr.mark_step()
    xl = xl * 1
    syncs = lr.metrics()["syncs"]
    got = make(xl, sl)
    assert type(got) is torch.Tensor and got.device.type == "cpu"
    torch.testing.assert_close(got, want)
    assert lr.metrics()["syncs"] == syncs   # (sl's value is data: read without a barrier)


def test_a_copy_or_factory_naming_another_accelerator_is_refused():
    """Only the CPU (and meta) are made from lazy arguments; another accelerator is refused
    with the way through the CPU (called at the dispatch boundary: on this machine torch
    refuses a CUDA device before it)."""
    from lazy_runtime import dispatch
    aten = torch.ops.aten
    x = torch.randn(3).to(DEV)
    cuda = {"device": torch.device("cuda")}
    for func, args in ((aten._to_copy.default, (x,)), (aten.zeros_like.default, (x,)),
                       (aten.randn_like.default, (x,))):
        with pytest.raises(lr.UnsupportedOperation, match="go through .cpu()"):
            dispatch._run(func, args, dict(cuda))
    assert torch.zeros_like(x, device="meta").device.type == "meta"
