"""Fused optimizers (``fused=True``) on the lazy device: their kernels are recorded.

``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_`` and ``_fused_adagrad_`` against torch's
CPU kernels (one call over parameters of every floating dtype, each option, a GradScaler's
``grad_scale`` and ``found_inf``), then training loops with a GradScaler: one graph per
step, nothing run eagerly.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr

from conftest import DEV

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _tensors(seed, small_16bit):
    """One parameter (with its gradient and state) per dtype and size. torch 2.13's fused
    SGD leaves the vectorized blocks of 16-bit parameters unchanged (pytorch#191763,
    fixed after 2.13): its 16-bit ones are kept under 8 elements, the scalar loop."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for dtype in DTYPES:
        sizes = (3, 7) if small_16bit and dtype.itemsize == 2 else (5, 67)
        for n in sizes:
            out.append([torch.randn(n, generator=g).to(dtype) for _ in range(5)])
    return out


def _scalars(device, grad_scale, found_inf):
    out = {}
    if grad_scale is not None:
        out["grad_scale"] = torch.full((1,), grad_scale).to(device)
    if found_inf is not None:
        out["found_inf"] = torch.full((), found_inf).to(device)
    return out


ADAM = dict(beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
CASES = {
    "adam": ("adam", ADAM),
    "adam-wd-amsgrad-maximize": ("adam", ADAM | dict(weight_decay=0.1, amsgrad=True,
                                                     maximize=True)),
    "adamw-wd": ("adamw", ADAM | dict(weight_decay=0.05, beta1=0.7)),
    "sgd": ("sgd", dict(weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False,
                        maximize=False, is_first_step=False)),
    "sgd-momentum-first": ("sgd", dict(weight_decay=0.01, momentum=0.9, dampening=0.0,
                                       nesterov=True, maximize=False, is_first_step=True)),
    "sgd-momentum-dampening": ("sgd", dict(weight_decay=0.0, momentum=0.5, dampening=0.3,
                                           nesterov=False, maximize=True,
                                           is_first_step=False)),
    "adagrad": ("adagrad", dict(lr_decay=0.01, weight_decay=0.1, eps=1e-10, maximize=False)),
}


def _call(kind, rows, device, options, lr_value, extra):
    rows = [[t.clone().to(device) for t in row] for row in rows]
    params, grads, a, b, c = (list(x) for x in zip(*rows))
    step = [torch.full((), 3.0).to(device) for _ in params]
    if kind in ("adam", "adamw"):
        op = torch._fused_adam_ if kind == "adam" else torch._fused_adamw_
        b = [x.abs() for x in b]
        c = [x.abs() for x in c] if options["amsgrad"] else []
        op(params, grads, a, b, c, step, lr=lr_value, **options, **extra)
        return params + grads + a + b + c
    if kind == "sgd":
        buffers = a if options["momentum"] else []
        torch._fused_sgd_(params, grads, buffers, lr=lr_value, **options, **extra)
        return params + grads + buffers
    b = [x.abs() for x in b]
    torch._fused_adagrad_(params, grads, b, step, lr=lr_value, **options, **extra)
    return params + grads + b


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("grad_scale, found_inf, tensor_lr", [
    (None, None, False), (1024.0, 0.0, True),
    (1024.0, 1.0, False)])   # an overflow found: the kernels change nothing
def test_a_fused_kernel_matches_torch(name, grad_scale, found_inf, tensor_lr):
    kind, options = CASES[name]
    rows = _tensors(len(name), small_16bit=kind == "sgd")
    lr.reset_metrics()
    results = {}
    for device in ("cpu", DEV):
        lr_value = torch.tensor(0.01).to(device) if tensor_lr else 0.01
        results[device] = [t.cpu() for t in _call(kind, rows, device, options, lr_value,
                                                   _scalars(device, grad_scale, found_inf))]
    for got, want in zip(results[DEV], results["cpu"]):
        torch.testing.assert_close(got, want)
    assert lr.metrics()["fallback_ops"] == {}


def _train(device, make_optimizer, dtype=torch.float32):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Linear(32, 3)).to(dtype).to(device)
    opt = make_optimizer(model.parameters())
    scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=2.0 ** 10,
                                  growth_interval=2)
    losses, graphs = [], []
    for step in range(6):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 6, generator=g).to(dtype), torch.randn(8, 3, generator=g).to(dtype)
        if step == 3:
            x[0, 0] = float("inf")
        before = lr.metrics()["graphs_executed"]
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        if device == DEV:
            lr.mark_step()
        losses.append(loss.item())
        graphs.append(lr.metrics()["graphs_executed"] - before)
    params = torch.cat([p.detach().cpu().double().flatten() for p in model.parameters()])
    return losses, params, scaler.get_scale(), graphs


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, fused=True),
], ids=["adamw", "sgd-nesterov"])
def test_a_scaled_fused_training_step_is_one_graph(make):
    want_losses, want_params, want_scale, _ = _train("cpu", make)
    lr.reset_metrics()
    losses, params, scale, graphs = _train(DEV, make)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want_losses), rtol=1e-5,
                               atol=1e-6, equal_nan=True)
    torch.testing.assert_close(params, want_params, rtol=1e-5, atol=1e-6)
    assert scale == want_scale
    assert lr.metrics()["fallback_ops"] == {}
    # with grad_scale and found_inf handed to the fused kernel, GradScaler reads nothing
    # on the host: the whole step (the loss read at its end aside) is one graph
    assert graphs == [1] * 6, graphs


def test_arguments_torch_refuses_raise_its_error():
    def call(device):
        p = torch.zeros(3).to(device)
        torch._fused_adamw_([p], [p.clone()], [p.clone()], [p.clone()], [],
                            [torch.ones(()).to(device)] * 2, lr=0.1, beta1=0.9, beta2=0.99,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with pytest.raises(RuntimeError) as want:
        call("cpu")
    with pytest.raises(RuntimeError) as got:
        call(DEV)
    assert str(got.value) == str(want.value)


def _gpt2_mixed_precision(device, steps=5):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100,
                                     n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, eos_token_id=0, bos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, fused=True)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    kind = torch.device(device).type
    scaler = torch.amp.GradScaler(kind, init_scale=2.0 ** 8)
    losses, graphs = [], []
    for step in range(steps):
        before = lr.metrics()["graphs_executed"]
        ids = torch.randint(0, 100, (4, 16), generator=torch.Generator().manual_seed(step))
        with torch.autocast(kind, dtype=torch.float16):
            loss = model(ids.to(device), labels=ids.to(device)).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        schedule.step()
        if device == DEV:
            lr.mark_step()
        losses.append(loss.item())
        graphs.append(lr.metrics()["graphs_executed"] - before)
    return losses, graphs


def test_a_float16_gpt2_step_with_a_scaler_and_fused_adamw_is_one_graph():
    """transformers' GPT-2 under float16 autocast, GradScaler (unscale_, clipping, step,
    update), fused AdamW and a schedule: eager's losses, one graph a step, nothing eager."""
    want, _ = _gpt2_mixed_precision("cpu")
    lr.reset_metrics()
    got, graphs = _gpt2_mixed_precision(DEV)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    assert graphs == [1] * len(got)
    assert lr.metrics()["fallback_ops"] == {}
