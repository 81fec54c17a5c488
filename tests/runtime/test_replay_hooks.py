"""Module hooks under replay (``replay.replayable_hook``): a hook declared replayable, or
transformers' output-capturing hook, is left to the trace (its effect on the tensors is
in the graph) and the call is replayed; any other hook keeps the call traced, so its
Python side effects still happen at every call. Each against eager torch with the same
hooks."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.modules.module as nn_module

import lazy_runtime as lr
from conftest import DEV, tiny_bert


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 16)
        self.b = nn.Linear(16, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g))
            for _ in range(n)]


def _step(model, opt, device=None):
    def step(x, y):
        if device is not None:
            x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def _pair(seed=0):
    """A model and its copy on the device, each with its AdamW; the lazy one's step
    replayed whole."""
    torch.manual_seed(seed)
    eager = Net()
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_l = lr.compile_optimizer(torch.optim.AdamW(lazy.parameters(), lr=1e-2))
    whole = lr.compile_step(_step(lazy, opt_l, DEV), lazy, opt_l)
    return eager, lazy, _step(eager, opt_e), whole


def _agree(eager_step, whole, data, changes=None):
    """Both steps over ``data`` (``changes[i]()`` before call i): losses as eager's."""
    lr.reset_metrics()
    for i, (x, y) in enumerate(data):
        if changes and i in changes:
            changes[i]()
        want = eager_step(x, y).item()
        assert whole(x, y).item() == pytest.approx(want, rel=1e-5, abs=1e-6), i
    return lr.metrics()


def _doubled(module, args, out):
    return out * 2.0


def test_a_declared_forward_hook_is_replayed_with_its_effect():
    eager, lazy, eager_step, whole = _pair()
    hook = lr.replayable_hook(_doubled)
    assert hook is _doubled
    eager.b.register_forward_hook(hook)
    lazy.b.register_forward_hook(hook)
    m = _agree(eager_step, whole, batches(7))
    # step 1 makes AdamW's state, step 2 captures the optimizer's replay, 3 and 4 agree
    assert m["step_replays"] == 3, m["replay_misses"]


def test_an_undeclared_hook_keeps_the_step_traced_and_its_side_effects():
    eager, lazy, eager_step, whole = _pair()
    calls = []

    def counting(module, args, out):   # a side effect a replay would lose
        calls.append(tuple(out.shape))

    eager.a.register_forward_hook(counting)
    lazy.a.register_forward_hook(counting)
    m = _agree(eager_step, whole, batches(6))
    assert len(calls) == 12   # each eager and each lazy call ran it
    assert m["step_replays"] == 0
    reason = " ".join(m["replay_misses"])
    assert "Linear forward hook" in reason and "counting" in reason, reason
    assert "lr.replayable_hook" in reason


def test_a_declared_hook_removed_or_added_between_calls_is_seen():
    """The hooks are part of the signature (and the state guard watches their tables):
    a replay after the hook is removed is not the hooked step's, nor one after another
    declared hook is added."""
    eager, lazy, eager_step, whole = _pair(seed=1)
    hook = lr.replayable_hook(_doubled)
    handles = [eager.b.register_forward_hook(hook), lazy.b.register_forward_hook(hook)]

    def remove():
        for h in handles:
            h.remove()

    @lr.replayable_hook
    def shifted(module, args):
        return (args[0] + 0.5,)

    def add():
        eager.a.register_forward_pre_hook(shifted)
        lazy.a.register_forward_pre_hook(shifted)

    m = _agree(eager_step, whole, batches(14, seed=2), {6: remove, 10: add})
    assert m["step_replays"] >= 6, m["replay_misses"]


def test_a_declared_backward_hook_is_replayed_with_its_effect():
    eager, lazy, eager_step, whole = _pair(seed=3)

    @lr.replayable_hook
    def clipped(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-0.01, 0.01) for g in grad_input)

    eager.b.register_full_backward_hook(clipped)
    lazy.b.register_full_backward_hook(clipped)
    m = _agree(eager_step, whole, batches(7, seed=4))
    assert m["step_replays"] == 3, m["replay_misses"]


class _Scaler:
    """A hook that is a method: declared through its function, for every instance."""

    def __init__(self, factor):
        self.factor = factor

    def hook(self, module, args, out):
        return out * self.factor


def test_a_declared_global_hook_and_a_method_are_replayed():
    eager, lazy, eager_step, whole = _pair(seed=5)
    lr.replayable_hook(_Scaler.hook)
    scaler = _Scaler(0.5)
    eager.a.register_forward_hook(scaler.hook)
    lazy.a.register_forward_hook(scaler.hook)

    @lr.replayable_hook
    def on_every_tanh_input(module, args, out):   # every module's output, offset
        return out + 0.125

    handle = nn_module.register_module_forward_hook(on_every_tanh_input)
    try:
        m = _agree(eager_step, whole, batches(7, seed=6))
    finally:
        handle.remove()
    assert m["step_replays"] == 3, m["replay_misses"]


def test_a_declared_hook_in_a_replayed_forward():
    """``lr.compile(model, replay=True)``: a hook on a submodule runs inside the forward
    a replay leaves out; declared, the forward and its backward are replayed."""
    torch.manual_seed(7)
    eager = Net()
    lazy = copy.deepcopy(eager).to(DEV)
    for m in (eager, lazy):
        m.a.register_forward_hook(lr.replayable_hook(_doubled))
    lazy = lr.compile(lazy, replay=True)
    lr.reset_metrics()
    for x, _ in batches(4, seed=8):
        want = eager(x)
        want.pow(2).sum().backward()
        got = lazy(x.to(DEV))
        got.pow(2).sum().backward()
        torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lazy.a.weight.grad.cpu(), eager.a.weight.grad,
                               rtol=1e-5, atol=1e-6)
    assert lr.metrics()["replays"] == 3, lr.metrics()["replay_misses"]


def test_transformers_hidden_states_captured_by_hooks_are_replayed():
    """``output_hidden_states=True`` installs transformers' output-capturing forward
    hooks on each layer (every backbone asks for them): they only append to the
    collector the model's forward made for the call, so the step replays, a loss on an
    inner layer's hidden state as eager torch's."""
    eager = tiny_bert(layers=2)
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_l = lr.compile_optimizer(torch.optim.AdamW(lazy.parameters(), lr=1e-3))

    def step(model, opt, ids):
        loss = model(input_ids=ids, output_hidden_states=True).hidden_states[1].pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    whole = lr.compile_step(lambda ids: step(lazy, opt_l, ids.to(DEV)), lazy, opt_l)
    gen = torch.Generator().manual_seed(1)
    lr.reset_metrics()
    for i in range(7):
        ids = torch.randint(1, 99, (2, 7), generator=gen)
        want = step(eager, opt_e, ids).item()
        assert whole(ids).item() == pytest.approx(want, rel=1e-4), i
    hooked = [m for m in lazy.modules() if m._forward_hooks]
    assert hooked   # the hooks this is about are there
    m = lr.metrics()
    assert m["step_replays"] >= 3, m["replay_misses"]
