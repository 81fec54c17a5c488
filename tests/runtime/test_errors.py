"""Unsupported situations raise clear errors at once; nothing hangs or crashes."""

import io
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lazy_runtime as lr
from lazy_runtime.ops import registry
from conftest import DEV

ROOT = Path(__file__).resolve().parents[2]


def test_shape_errors_are_raised_when_recorded():
    a = torch.randn(2, 3).to(DEV)
    b = torch.randn(4, 5).to(DEV)
    with pytest.raises(RuntimeError, match="broadcast"):
        a + b
    with pytest.raises(RuntimeError, match="matmul|inner|mm"):
        a @ b


@pytest.mark.parametrize("fn", [
    lambda t: t + t.t(), lambda t: t @ t, lambda t: t.reshape(5, -1),
    lambda t: torch.cat([t, t.t()]), lambda t: t.expand(2, 3), lambda t: t.sum(5),
    lambda t: t.transpose(0, 7), lambda t: t.unsqueeze(4), lambda t: t.softmax(-3),
    lambda t: (t * 2).sum().backward(torch.ones(2)),
], ids=["broadcast", "matmul", "reshape", "cat", "expand", "sum-dim", "transpose-dim",
        "unsqueeze-dim", "softmax-dim", "backward-grad-shape"])
def test_shape_errors_have_torchs_exception_type_and_the_analyzers_code(fn):
    """What a rule refuses raises the type torch raises (``RuntimeError``; ``IndexError``
    for a dim out of range), so ``except RuntimeError`` code works unchanged; the
    analyzer's stable code rides along."""
    t = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(Exception) as want:
        fn(t)
    with pytest.raises(Exception) as got:
        fn(t.detach().to(DEV).requires_grad_())
    assert isinstance(got.value, type(want.value)), (got.value, want.value)
    if isinstance(got.value, lr.ShapeError):
        assert got.value.code.startswith("SI")


def test_a_platform_jax_cannot_use_is_named_in_the_error():
    old = lr.config.platform
    lr.config.platform = "no_such_platform"
    try:
        with pytest.raises(lr.LazyRuntimeError,
                           match="config.platform is 'no_such_platform' .*Unknown backend"):
            (torch.randn(3).to(DEV) * 2).cpu()
        assert "XLA device      : none (lazy_runtime.config.platform" in lr.metrics_report()
    finally:
        lr.config.platform = old
    assert torch.equal((torch.ones(2).to(DEV) * 2).cpu(), torch.full((2,), 2.0))


def test_resize_with_views_and_set_to_a_storage_are_refused():
    x = torch.randn(3).to(DEV)
    view = x[:2]
    with pytest.raises(lr.UnsupportedOperation):
        x.resize_(5)
    with pytest.raises(lr.UnsupportedOperation):
        x.set_(torch.randn(2).to(DEV).untyped_storage())
    assert view.shape == (2,)


def test_write_through_expanded_view_is_refused():
    x = torch.randn(1, 3).to(DEV)
    v = x.expand(4, 3)
    with pytest.raises(lr.UnsupportedOperation, match="expand"):
        v.add_(1)


def test_mixing_with_another_device_is_refused():
    with pytest.raises(Exception, match="meta|device"):
        torch.randn(3).to(DEV) + torch.randn(3, device="meta")


def test_torch_save_and_load_as_torch_does_for_storage_less_devices():
    """Saved with their values (a barrier), loaded on the lazy device, or where
    ``map_location`` says; the default ``weights_only`` load accepts them."""
    model = torch.nn.Linear(3, 2).to(DEV)
    x = torch.arange(6.0).reshape(2, 3).to(DEV) * 2          # pending until saved
    buf = io.BytesIO()
    torch.save({"state": model.state_dict(), "x": x}, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert lr.is_lazy(back["x"]) and back["state"]["weight"].device == DEV
    assert torch.equal(back["x"].cpu(), torch.arange(6.0).reshape(2, 3) * 2)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert type(on_cpu["x"]) is torch.Tensor and on_cpu["x"].device.type == "cpu"
    eager = torch.nn.Linear(3, 2)
    eager.load_state_dict(on_cpu["state"])
    assert torch.equal(eager.weight, model.weight.detach().cpu())
    assert torch.equal(pickle.loads(pickle.dumps(x)).cpu(), x.cpu())


def test_an_unsupported_dtype_is_refused():
    with pytest.raises(lr.UnsupportedOperation, match="dtype torch.complex32 is not supported"):
        (torch.zeros(3, dtype=torch.complex32).to(DEV) * 2).cpu()
    # a conversion on the device: refused when recorded (it once failed the barrier)
    x = torch.randn(3).to(DEV)
    with pytest.raises(lr.UnsupportedOperation, match="dtype torch.complex32 is not supported"):
        x.chalf()
    assert torch.equal((x * 2).cpu(), x.cpu() * 2)


@pytest.mark.parametrize("fn", [
    lambda x: torch.addmm(x, x, x), lambda x: torch.addmv(x[0], x, x[0]),
    lambda x: torch.baddbmm(x[None], x[None], x[None]),
    lambda x: torch.addmm(x.to(torch.uint8), x.to(torch.uint8), x.to(torch.uint8), beta=-1.5),
    lambda x: x.long() ** -1,
], ids=["addmm-bool", "addmv-bool", "baddbmm-bool", "addmm-uint8-negative-beta",
        "int-to-negative-python-power"])
def test_integer_matmul_refusals_are_torchs_when_recorded(fn):
    x = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError) as want:
        fn(x)
    with pytest.raises(RuntimeError) as got:
        fn(x.to(DEV))
    assert str(got.value) == str(want.value).split("\n")[0]


def test_numpy_is_refused_as_for_a_cuda_tensor_unless_forced():
    x = torch.randn(2, 3)
    lazy = (x.to(DEV) * 2).requires_grad_()
    for read in (lambda t: t.numpy(), lambda t: t.detach().numpy(), np_asarray):
        with pytest.raises(TypeError, match="lazy_jax:0 device type tensor to numpy.*cpu()"):
            read(lazy)
    assert (lazy.numpy(force=True) == (x * 2).numpy()).all()
    assert (lazy.detach().cpu().numpy() == (x * 2).numpy()).all()


def np_asarray(t):
    import numpy
    return numpy.asarray(t)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 4).to_sparse().to(DEV),
    lambda: torch.randn(3, 4).to(DEV).to_sparse(),
    lambda: torch.randn(3, 4).to(DEV).to_sparse_csr(),
    lambda: torch.nested.as_nested_tensor([torch.randn(2, 3).to(DEV)] * 2),
    lambda: torch.randn(2, 3).to(DEV).to_mkldnn(),
], ids=["sparse-to-device", "to_sparse", "to_sparse_csr", "nested", "mkldnn"])
def test_non_strided_layouts_are_refused_clearly(make):
    with pytest.raises(lr.UnsupportedOperation, match="cannot live on the lazy device"):
        make()


def test_a_sparse_embedding_gradient_is_refused_with_the_setting_to_change():
    emb = torch.nn.Embedding(10, 3, sparse=True).to(DEV)
    with pytest.raises(lr.UnsupportedOperation, match="sparse=False"):
        emb(torch.tensor([1, 2]).to(DEV)).sum().backward()
    lr.mark_step()


def test_a_failing_lowering_poisons_its_graph_not_the_runtime(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("deliberately broken")
    op = torch.ops.aten.cosh.default
    monkeypatch.setitem(registry.LOWERINGS, op, registry.Lowering(broken, False))
    x = torch.randn(3).to(DEV)
    y = torch.cosh(x * 1.25)
    with pytest.raises(lr.LazyRuntimeError, match="deliberately broken"):
        lr.mark_step()
    with pytest.raises(lr.LazyRuntimeError, match="no value"):
        y.cpu()
    monkeypatch.undo()
    z = (x * 2).cpu()  # the runtime still works
    assert z.shape == (3,)


def test_a_graph_that_needs_more_memory_than_is_free_is_refused_not_run(monkeypatch):
    """XLA's count of a compiled graph's scratch and results against the device's free
    memory: a graph that would not fit is refused with the way out named (a process
    killed for memory says nothing); its tensors hold the error; the runtime goes on."""
    from lazy_runtime import executor
    x = torch.randn(64, 64).to(DEV)
    lr.mark_step()
    monkeypatch.setattr(executor, "device_free_bytes", lambda device: 4096)
    y = torch.sinh(x @ x.t() * 0.02)   # 16 KiB of results, 4 KiB free
    with pytest.raises(lr.DeviceMemoryError, match=r"mark_step\(\) more often"):
        lr.mark_step()
    with pytest.raises(lr.LazyRuntimeError, match="no value"):
        y.cpu()
    monkeypatch.setattr(lr.config, "check_memory", False)   # the setting it names
    z = torch.sinh(x @ x.t() * 0.02)
    assert torch.allclose(z.cpu(), torch.sinh(x.cpu() @ x.cpu().t() * 0.02), rtol=1e-5)
    monkeypatch.undo()
    assert (x * 2).cpu().shape == (64, 64)   # measured again: it fits
    free = executor.device_free_bytes(lr.config.jax_device())
    assert free is None or free > 1 << 20


_BACKWARD_ERRORS = r"""
import torch, lazy_runtime as lr
from lazy_runtime import dispatch
from lazy_runtime.backend import DEVICE_GUARD
from lazy_runtime.ops import registry
dev = lr.device()
print("guard:", DEVICE_GUARD[0])


def bad(*args):
    raise ValueError("hook failed")


def backward(loss, kind):
    try:
        loss.backward()
    except Exception as e:
        print(kind, "raised at backward:", type(e).__name__, e)


op = torch.ops.aten.tanh_backward.default
old = registry.RULES[op]


def bad_rule(*args, **kwargs):
    raise ValueError("rule failed in backward")


registry.RULES[op] = (bad_rule, False)
dispatch.clear_handler_cache()
x = torch.randn(3).to(dev).requires_grad_()
backward(torch.tanh(x).sum(), "rule")
try:
    lr.mark_step()
    print("rule not raised at the barrier")
except lr.LazyRuntimeError as e:
    print("rule raised at the barrier:", e)
registry.RULES[op] = old
dispatch.clear_handler_cache()

for register in ("tensor", "post_accumulate", "module", "module_pre", "grad_fn"):
    m = torch.nn.Linear(4, 3).to(dev)
    x = torch.randn(2, 4).to(dev).requires_grad_()
    y = m(x)
    if register == "tensor":
        m.weight.register_hook(bad)
    elif register == "post_accumulate":
        m.weight.register_post_accumulate_grad_hook(bad)
    elif register == "module":
        m.register_full_backward_hook(bad)
        y = m(x)
    elif register == "module_pre":
        m.register_full_backward_pre_hook(bad)
        y = m(x)
    elif DEVICE_GUARD[0] == "native":   # (aborts the process with torch's Python guard)
        y.grad_fn.register_hook(bad)
    backward(y.sum(), register)
    try:
        lr.mark_step()
        print(register, "not raised at the barrier")
    except lr.LazyRuntimeError as e:
        print(register, "raised at the barrier:", e)
    m.zero_grad()
    print(register, "then", round((m(x) * 0).sum().item(), 3))

cpu = torch.nn.Linear(4, 3)
cpu.register_full_backward_hook(bad)
try:
    cpu(torch.randn(2, 4, requires_grad=True)).sum().backward()
except ValueError as e:
    print("cpu raised:", e)
raise ValueError("uncaught at the end")
"""


@pytest.mark.parametrize("native", ["1", "0"], ids=["native-guard", "python-guard"])
def test_errors_inside_backward_raise_as_on_the_cpu_or_at_the_barrier(tmp_path, native):
    """An op's error inside backward and a failing backward hook: with the C++ device
    guard they raise from ``backward()`` with their own type, as on the CPU; with torch's
    Python guard (an exception crossing autograd's engine aborts the process) they are
    kept and raised at the next barrier as ``LazyRuntimeError``. Either way the runtime
    goes on working. In a subprocess: an abort would take the test run with it."""
    if native == "1" and not shutil.which("c++") and not shutil.which("g++"):
        pytest.skip("no C++ compiler: the native guard cannot be built")
    script = tmp_path / "backward_errors.py"
    script.write_text(_BACKWARD_ERRORS)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": str(ROOT),
                            "LAZY_RUNTIME_NATIVE_GUARD": native})
    assert r.returncode == 1, r.stderr[-2000:]   # the final uncaught error, not an abort
    assert "uncaught at the end" in r.stderr
    out = r.stdout
    assert ("guard: native" in out) == (native == "1"), out
    kinds = ["rule", "tensor", "post_accumulate", "module", "module_pre"]
    if native == "1":
        kinds.append("grad_fn")
        assert "rule raised at backward: ValueError rule failed in backward" in out, out
        assert "rule not raised at the barrier" in out
        for kind in kinds[1:]:
            assert f"{kind} raised at backward: ValueError hook failed" in out, out
            assert f"{kind} not raised at the barrier" in out
    else:
        assert "rule raised at backward" not in out, out
        assert "rule raised at the barrier: aten.tanh_backward.default failed during " \
               "backward: ValueError: rule failed in backward" in out, out
        for kind in kinds[1:]:
            assert f"{kind} raised at backward" not in out, out
            assert f"{kind} raised at the barrier:" in out and "ValueError: hook failed" in out
    for kind in kinds[1:]:
        assert f"{kind} then 0.0" in out   # the runtime still works
    assert "cpu raised: hook failed" in out   # other devices: torch's own behaviour


def test_a_shift_of_floats_is_refused_when_called_as_torch_does():
    x = torch.tensor([1.5, 2.0])
    with pytest.raises(NotImplementedError, match='"lshift_cpu" not implemented') as want:
        x << 1
    with pytest.raises(NotImplementedError, match='"lshift_cpu" not implemented') as got:
        x.to(DEV) << 1
    assert str(got.value) == str(want.value)


def test_exit_waits_for_the_graphs_still_running():
    """XLA runs a graph asynchronously; a process exiting during one crashed now and then
    (the library's static destructors freed kernels the graph's threads still ran). The
    runtime's exit handler waits for each recent run, its results dropped or not, and for
    every live result; a script ending in ``mark_step()`` without a read exits cleanly."""
    import jax
    from lazy_runtime import executor

    def run_and_drop():
        a = torch.randn(1024, 1024).to(DEV)
        b = a
        for _ in range(12):
            b = torch.tanh(b @ a)
        lr.mark_step()
    run_and_drop()
    launched = list(executor._LAUNCHED)
    assert launched
    executor.wait_for_running_graphs()
    assert all(x.is_ready() for x in launched + jax.live_arrays())
    code = ("import torch, lazy_runtime as lr\n"
            "a = torch.randn(1024, 1024).to(lr.device())\n"
            "for _ in range(12):\n"
            "    a = torch.tanh(a @ a.t()) * 0.5\n"
            "lr.mark_step()\n"
            "del a\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]


def _json_file(tmp_path, text):
    path = tmp_path / "plan.json"
    path.write_text(text)
    return path


_LIN = torch.nn.Linear(3, 2)
_OPT = torch.optim.SGD(_LIN.parameters(), lr=0.1)

# (what a user got wrong, the call, the error, its message)
API_MISUSES = [
    ("shapes of another type", lambda tmp: lr.compile(_LIN, shapes=42), TypeError,
     r"shapes= takes a plan .* not int"),
    ("a plan file that is not JSON", lambda tmp: lr.compile(_LIN, shapes=_json_file(
        tmp, "{no")), ValueError, r"plan.json: not a JSON plan .*shapeinfer report"),
    ("a JSON file that is not an object", lambda tmp: lr.compile(_LIN, shapes=_json_file(
        tmp, "[1]")), ValueError, r"plan.json: not a JSON plan \(a list"),
    ("a missing plan file", lambda tmp: lr.compile(_LIN, shapes=tmp / "nope.json"),
     FileNotFoundError, "nope.json"),
    ("compile of a non-module", lambda tmp: lr.compile(3), TypeError,
     "takes a module .* not int"),
    ("mark_dynamic of a list", lambda tmp: lr.mark_dynamic([1, 2], 0), TypeError,
     "marks a tensor, not list"),
    ("mark_dynamic of a str dim", lambda tmp: lr.mark_dynamic(torch.ones(3), "0"),
     TypeError, "dim must be an int"),
    ("a symbol that is not a name", lambda tmp: lr.mark_dynamic(torch.ones(3), 0, "B'"),
     ValueError, "name must be a symbol"),
    ("a symbol that is not a str", lambda tmp: lr.mark_dynamic(torch.ones(3), 0, 7),
     TypeError, "name must be a str"),
    ("compile_step of a non-callable", lambda tmp: lr.compile_step(3, _LIN, _OPT),
     TypeError, "takes the step function first"),
    ("compile_step's model swapped", lambda tmp: lr.compile_step(print, _OPT, _LIN),
     TypeError, "model= takes a torch.nn.Module, not SGD"),
    ("compile_optimizer of a module", lambda tmp: lr.compile_optimizer(_LIN), TypeError,
     "takes a torch.optim optimizer .* not Linear"),
]


@pytest.mark.parametrize("what,call,error,message", API_MISUSES,
                         ids=[m[0] for m in API_MISUSES])
def test_api_misuse_is_named_at_the_call(what, call, error, message, tmp_path):
    with pytest.raises(error, match=message):
        call(tmp_path)
