"""torch.amp.GradScaler on the lazy device: its two ops are recorded, not run eagerly.

``_amp_foreach_non_finite_check_and_unscale_`` (``unscale_``) and ``_amp_update_scale_``
(``update``) against torch's CPU kernels, bit for bit, and a scaled training loop against
eager torch with nothing falling back.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr

from conftest import DEV

aten = torch.ops.aten
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.nan_to_num(got, nan=0.0), torch.nan_to_num(want, nan=0.0))


def _grads(seed, poison):
    g = torch.Generator().manual_seed(seed)
    out = []
    for dtype in DTYPES:
        shape = tuple(int(s) for s in torch.randint(1, 6, (int(torch.randint(0, 3, (1,),
                                                                         generator=g)),),
                                                    generator=g))
        out.append((torch.randn(shape, generator=g) * 300).to(dtype))
    if poison is not None:
        dtype, value = poison
        t = out[DTYPES.index(dtype)].reshape(-1)
        t[int(torch.randint(0, t.numel(), (1,), generator=g))] = value
    return out


@pytest.mark.parametrize("seed, poison, found_shape, inv", [
    (0, None, (), 1 / 1000),
    (1, (torch.float16, float("inf")), (1,), 2.0 ** -16),
    (2, (torch.bfloat16, float("nan")), (), 0.3),
    (3, (torch.float64, -float("inf")), (1,), 1.0),
])
def test_unscale_matches_torch(seed, poison, found_shape, inv):
    lr.reset_metrics()
    results = {}
    for device in ("cpu", DEV):
        grads = [g.to(device) for g in _grads(seed, poison)]
        found = torch.zeros(found_shape).to(device)
        torch._amp_foreach_non_finite_check_and_unscale_(
            grads, found, torch.full((1,), inv).to(device))
        results[str(device)] = [t.cpu() for t in (*grads, found)]
    for got, want in zip(results[str(DEV)], results["cpu"]):
        _same(got, want)
    assert results["cpu"][-1].item() == (poison is not None)
    assert lr.metrics()["fallback_ops"] == {}


def test_unscale_keeps_a_found_inf_already_set():
    found = torch.ones(()).to(DEV)
    grads = [torch.ones(3).to(DEV)]
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.full((1,), 0.5).to(DEV))
    assert found.item() == 1.0 and grads[0].cpu().tolist() == [0.5] * 3


# (scale, good steps so far, found_inf, growth factor, backoff factor, growth interval)
UPDATE_CASES = [
    (65536.0, 0, 0.0, 2.0, 0.5, 2000),      # a good step
    (65536.0, 1999, 0.0, 2.0, 0.5, 2000),   # the interval reached: grow, reset
    (65536.0, 1500, 1.0, 2.0, 0.5, 2000),   # an overflow: back off, reset
    (3.0, 2, 0.0, 1.7, 0.3, 3),             # factors no float32 holds exactly: the
    (12345.0, 2, 5.0, 1.7, 0.3, 3),         # products are rounded once, from float64
    (12345.0, 0, 0.0, 1.3, 0.3, 1),         # (and any nonzero found_inf counts)
    (3e38, 0, 0.0, 2.0, 0.5, 1),            # growing would overflow: the scale stays
    (3e-30, 4, 1.0, 2.0, 0.3, 10),          # backing off a tiny scale (XLA:CPU flushes
                                            # a subnormal one to 0: README, "Policies")
]


def test_update_scale_matches_torch():
    lr.reset_metrics()
    results = {}
    for device in ("cpu", DEV):
        out = []
        for scale, steps, found, growth, backoff, interval in UPDATE_CASES:
            s = torch.full((), scale).to(device)
            tracker = torch.full((), steps, dtype=torch.int32).to(device)
            returned = torch._amp_update_scale_(s, tracker, torch.full((1,), found).to(device),
                                                growth, backoff, interval)
            assert returned is s
            out += [s, tracker]
        results[str(device)] = [t.cpu() for t in out]
    for got, want in zip(results[str(DEV)], results["cpu"]):
        _same(got, want)
    assert lr.metrics()["fallback_ops"] == {}


def test_arguments_torch_refuses_raise_its_error():
    for device in ("cpu", DEV):
        with pytest.raises(RuntimeError) as caught:
            torch._amp_update_scale_(torch.ones(()).to(device),
                                     torch.zeros((), dtype=torch.int64).to(device),
                                     torch.zeros(()).to(device), 2.0, 0.5, 10)
        if device == "cpu":
            want = str(caught.value)
        else:
            assert str(caught.value) == want


def _scaled_training(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Linear(16, 3)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(str(torch.device(device).type), init_scale=2.0 ** 12,
                                  growth_interval=2)
    scales, losses, compiles = [], [], []
    for step in range(6):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
        if step == 3:
            x[0, 0] = float("inf")      # an overflow: the step is skipped, the scale backs off
        before = lr.metrics()["compiles"]
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(scaler.get_scale())
        losses.append(loss.item())
        compiles.append(lr.metrics()["compiles"] - before)
    return scales, losses, model[0].weight.detach().cpu(), compiles


def test_a_scaled_training_loop_matches_eager_with_nothing_run_eagerly():
    want_scales, want_losses, want_w, _ = _scaled_training("cpu")
    lr.reset_metrics()
    scales, losses, w, compiles = _scaled_training(DEV)
    assert scales == want_scales
    assert want_scales[3] < want_scales[2]      # the overflow step backed off
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want_losses),
                               rtol=1e-4, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(w, want_w, rtol=1e-4, atol=1e-6)
    assert lr.metrics()["fallback_ops"] == {}
    # the steps after the first compile nothing new, but for the overflow step and the one
    # after it (the skipped optimizer step, then a scale grown after a reset count)
    assert compiles[0] > 0 and compiles[2] == 0 and compiles[5] == 0, compiles
