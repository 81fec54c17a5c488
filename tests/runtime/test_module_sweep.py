"""Modules on the lazy device against torch's own module database (ModuleInfo), and lazy
modules (``nn.LazyLinear``) moved to the device before their first call."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import lazy_runtime as lr

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import module_sweep as S  # noqa: E402

DEV = lr.device()


def lazy_model():
    return nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d(), nn.ReLU(), nn.LazyLinear(3))


def test_a_lazy_module_moved_uninitialized_infers_its_shapes_on_the_device():
    """As on the CPU or CUDA: ``.to(dev)`` before the first call keeps the parameters
    uninitialized; the first call makes them, on the device, of the shapes the input
    asks for. Given the eager twin's weights, training steps then match eager torch."""
    eager, model = lazy_model(), lazy_model().to(DEV)
    assert model[0].has_uninitialized_params() and model[1].has_uninitialized_params()
    x = torch.randn(6, 5)
    with torch.no_grad():
        eager(x)
        model(x.to(DEV))
    assert not any(m.has_uninitialized_params() for m in model if hasattr(
        m, "has_uninitialized_params"))
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in eager.state_dict().items()}
    assert shapes["0.weight"] == (8, 5) and shapes["1.running_mean"] == (8,)
    assert all(p.device == DEV and isinstance(p, nn.Parameter) and p.requires_grad
               for p in model.parameters())
    assert all(b.device == DEV for b in model.buffers())
    model.load_state_dict(eager.state_dict())
    # (SGD: the first layer's bias gets a gradient of ~1e-8 through the batch norm, and
    # Adam's step at such a gradient turns float32 rounding into a step of lr)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, model)]
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(6, 5, generator=g), torch.randn(6, 3, generator=g)
        losses = []
        for m, opt, dev in ((eager, opts[0], "cpu"), (model, opts[1], DEV)):
            loss = (m(x.to(dev)) - y.to(dev)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for a, b in zip(eager.state_dict().values(), model.state_dict().values()):
        assert torch.allclose(a, b.cpu(), atol=1e-5)


def test_a_lazy_parameter_on_the_device_refuses_use_before_its_first_call():
    """Torch's own error for an uninitialized parameter, not a wrong shape."""
    model = nn.LazyLinear(4).to(DEV)
    with pytest.raises(ValueError, match="uninitialized parameter"):
        model.weight + 1


def _info(name):
    from torch.testing._internal.common_modules import module_db
    return next(i for i in module_db if i.name == name)


@pytest.mark.parametrize("name,training", [
    ("nn.BatchNorm2d", True), ("nn.LazyConv1d", False), ("nn.GRU", True),
    ("nn.TransformerEncoderLayer", False), ("nn.CTCLoss", True)])
def test_the_module_sweep_finds_these_modules_agreeing_with_torch(name, training):
    """Outputs, input and parameter gradients, and buffers after the call (a
    BatchNorm's running statistics), against eager torch on the same weights."""
    rec = S._run_module(_info(name), torch.float32, training, 2)
    assert rec["status"] == "match", rec
    assert rec["samples"] >= 1


@pytest.mark.parametrize("name,variant", [
    ("nn.BCEWithLogitsLoss", "padded"), ("nn.InstanceNorm2d", "padded"),
    ("nn.Bilinear", "padded"), ("nn.Conv2d", "padded_last")])
def test_the_padded_module_sweep_runs_them_padded_and_agreeing(name, variant, monkeypatch):
    """``--variant padded``: each forward input's first (last) dim marked, padded to the
    sweep's buckets (sizes up to 12 padded to 13), its padding poisoned; the samples run
    padded (``padded_runs``), none at an exact shape, and agree with torch."""
    monkeypatch.setattr(lr.config, "poison_padding", True)
    monkeypatch.setattr(lr.config, "buckets", S.PADDED_BUCKETS)
    rec = S._run_module(_info(name), torch.float32, True, 3, variant=variant)
    assert rec["status"] == "match", rec
    assert rec["padded_runs"] >= 1 and rec["exact"] == [], rec


def test_the_module_sweep_tells_a_wrong_buffer_apart():
    """Its judgement can fail: a module whose lazy run updates a buffer differently."""
    class Drifts(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(2))

        def forward(self, x):
            self.count.add_(1 if x.device.type == "cpu" else 2)
            return x * 2

    out = torch.ones(2, requires_grad=True)
    want = S._call(Drifts(), _Sample(out), "cpu", True)
    got = S._call(Drifts().to(DEV), _Sample(out), DEV, True)
    assert S._compare(want[0], got[0]) is None
    assert S._compare(want[2], got[2]) is not None


class _Sample:
    """A ModuleInput's forward input, as the sweep reads it."""

    def __init__(self, *args):
        self.forward_input = type("FunctionInput", (), {"args": args, "kwargs": {}})


def test_float64_modules_agree_with_torch_to_float64_precision():
    """The sweep compares float64 within 1e-10: BatchNorm's bias gradient was computed
    from a float32 seed in float64 (3e-8 off, inside the 1e-7 op sweeps allow)."""
    import opinfo_sweep
    before = opinfo_sweep.WIDE_TOLERANCE[0]
    opinfo_sweep.WIDE_TOLERANCE[0] = S.TOLERANCE64
    try:
        rec = S._run_module(_info("nn.BatchNorm1d"), torch.float64, True, 2)
    finally:
        opinfo_sweep.WIDE_TOLERANCE[0] = before
    assert rec["status"] == "match", rec
