"""Replay at numbers never traced (``lazy_runtime/replay_numbers.py``): ``compile_optimizer``
under a learning-rate schedule (the hyper-parameters a scheduler changes are followed, and
``opt.step()`` replays at values never traced), and a forward given numbers that change
(a sampler's step and noise level). Checked bit for bit against the same run traced op by
op, against eager torch, and for each refusal: a use the record cannot follow, a constant
made from the learning rate, a branch on it, a step that sets it, a number that sets a
shape, and a forward with autograd (its numbers stay keyed by value)."""

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

import lazy_runtime as lr
from lazy_runtime import replay
from conftest import DEV, assert_same

STEPS = 14
SCHEDULES = {
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)),
    # (cycles Adam's betas, or SGD's momentum, with the learning rate)
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05,
                                                              total_steps=40),
}
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05),
    # (its decomposition takes a float lr as one graph input, so a replay links to it)
    "adamw-fused": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05, fused=True),
}


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def training_step(model, opt):
    """``step(x) -> loss``: the mean square of the model's output, backward, the
    optimizer's step, its grads zeroed."""
    def step(x):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def run(model, opt, schedule, dev, steps=STEPS):
    """Train ``steps`` steps on fixed batches; (losses, parameters on the CPU)."""
    g = torch.Generator().manual_seed(1)
    losses = []
    step = training_step(model, opt)
    for _ in range(steps):
        x = torch.randn(4, 8, generator=g)
        loss = step(x.to(dev) if dev else x)
        schedule.step()
        if dev:
            lr.mark_step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def lazy_run(make_opt, make_schedule, compiled: bool, steps=STEPS):
    model = make_model().to(DEV)
    opt = make_opt(model.parameters())
    for group in opt.param_groups:   # the traced run computes as compile_optimizer's does
        if "capturable" in group:
            group["capturable"] = True
        if group.get("foreach", False) is None and not group.get("fused"):
            group["foreach"] = True
    if compiled:
        lr.compile_optimizer(opt)
    schedule = make_schedule(opt)
    lr.reset_metrics()
    return run(model, opt, schedule, DEV, steps), lr.metrics()


def compiled_run(make_opt, make_schedule):
    """``lazy_run`` with ``compile_optimizer``, checked bit for bit against the same run
    traced op by op; (losses, parameters, metrics)."""
    (traced, _), ((losses, params), m) = (lazy_run(make_opt, make_schedule, c)
                                          for c in (False, True))
    assert losses == traced[0]
    for a, b in zip(params, traced[1]):
        assert torch.equal(a, b)
    return losses, params, m


@pytest.mark.parametrize("optimizer, schedule", [
    (o, s) for o in OPTIMIZERS for s in SCHEDULES
    # (OneCycleLR cycles betas[0] too, and the fused kernel's decomposition derives
    # 1 - beta1 on the host: that number links to nothing, so that step is traced)
    if not (o == "adamw-fused" and s == "onecycle")])
def test_a_scheduled_optimizer_replays_at_new_values_bit_for_bit(optimizer, schedule):
    make_opt, make_schedule = OPTIMIZERS[optimizer], SCHEDULES[schedule]
    losses, params, m = compiled_run(make_opt, make_schedule)
    # step 1 makes the state, 2 is captured by value, 3 learns that the numbers change,
    # 3-5 are traced at three values: 6-14 replay at values never traced
    assert m["replays"] == STEPS - 5, m["replay_misses"]
    eager = make_model()
    opt_e = make_opt(eager.parameters())
    want_losses, want_params = run(eager, opt_e, make_schedule(opt_e), None)
    assert losses == pytest.approx(want_losses, rel=1e-4, abs=1e-6)
    for a, b in zip(params, want_params):
        assert_same(a, b, rtol=1e-4, atol=1e-6, what="parameter")


def test_a_step_schedule_replays_each_new_value_on_one_executable():
    """StepLR: each value repeats; the first traced at a value is replayed by value on
    the template of the first traced at another (one executable, not one per value)."""
    make_opt = OPTIMIZERS["adamw"]

    def make_schedule(o):
        return torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)
    lr.clear_cache()
    _, _, m = compiled_run(make_opt, make_schedule)
    # traced: steps 1 (state made), 2 (captured), 4, 7 and 10 (new values); the rest
    # replayed, by value and (13, 14) by the family of 4, 7 and 10
    assert m["replays"] == STEPS - 5, m["replay_misses"]
    # the two graphs with a replayed step: the value captured before numbers were
    # followed, and the one template of every later value (the traced graphs were
    # compiled by the traced run)
    assert m["compiles"] == 2, m["recompile_reasons"]


class RoundingSGD(torch.optim.SGD):
    """SGD whose step rounds its learning rate: a use the record cannot follow."""

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(p.grad, alpha=-round(g["lr"], 4))


class TensorLrSGD(torch.optim.SGD):
    """SGD that makes a tensor of its learning rate on the host: a constant of each
    trace, which differs between traces."""

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            rate = torch.tensor(g["lr"]).to(g["params"][0].device)
            for p in g["params"]:
                p.sub_(p.grad * rate)


class BranchingSGD(torch.optim.SGD):
    """SGD that takes another path below a learning rate: a guard."""

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(p.grad, alpha=-g["lr"] if g["lr"] > 0.03 else -3 * g["lr"])


class DecayingSGD(torch.optim.SGD):
    """SGD that decays its own learning rate: a step that sets a hyper-parameter."""

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(p.grad, alpha=-g["lr"])
            g["lr"] = g["lr"] * 0.99


@pytest.mark.parametrize("cls, replays, reason", [
    (RoundingSGD, 0, "used in a way a replay cannot follow (round())"),
    (TensorLrSGD, 0, None),
    (BranchingSGD, 6, None),   # (above 0.03 two values traced, below a family: 4-6)
    (DecayingSGD, 0, "sets a hyper-parameter"),
], ids=["pinned", "host-constant", "branch", "sets-lr"])
def test_followed_numbers_never_replay_what_they_cannot_vouch_for(cls, replays, reason):
    """Each step is right (as eager torch's); replayed only where the record vouches."""
    def make_schedule(o):   # 0.1, 0.05, 0.033, ... crosses BranchingSGD's 0.03 at step 4
        return torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s))
    steps = 12
    (losses, params), m = lazy_run(lambda ps: cls(ps, lr=0.1), make_schedule, True, steps)
    eager = make_model()
    opt_e = cls(eager.parameters(), lr=0.1)
    want_losses, want_params = run(eager, opt_e, make_schedule(opt_e), None, steps)
    assert losses == pytest.approx(want_losses, rel=1e-4, abs=1e-6)
    for a, b in zip(params, want_params):
        assert_same(a, b, rtol=1e-4, atol=1e-6, what="parameter")
    assert m["replays"] == replays, m["replay_misses"]
    if reason is not None:
        assert any(reason in r for r in m["replay_misses"]), m["replay_misses"]


def test_an_optimizer_followed_by_a_whole_step_is_left_to_it():
    """Under ``compile_step``'s trace the groups hold its ``TracedFloat``s: the
    optimizer's own replayer refuses, and the whole step follows the numbers."""
    model = make_model().to(DEV)
    opt = lr.compile_optimizer(torch.optim.AdamW(model.parameters(), lr=0.01))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    whole = lr.compile_step(training_step(model, opt), model, opt)
    eager = make_model()
    opt_e = torch.optim.AdamW(eager.parameters(), lr=0.01)
    schedule_e = torch.optim.lr_scheduler.LambdaLR(opt_e, lambda s: 1.0 / (1 + s))
    step_e = training_step(eager, opt_e)
    lr.reset_metrics()
    g = torch.Generator().manual_seed(1)
    for _ in range(10):
        x = torch.randn(4, 8, generator=g)
        got = whole(x).item()
        want = step_e(x).item()
        schedule.step()
        schedule_e.step()
        assert got == pytest.approx(want, rel=1e-5)
    m = lr.metrics()
    assert m["step_replays"] > 0, m["replay_misses"]
    assert any("followed by a whole step's trace" in r for r in m["replay_misses"])


def test_a_template_inlined_at_other_scalars_computes_what_its_call_does():
    """A graph that runs padded inlines a CALL: at scalars other than its template's, the
    inlined body takes the call's (``Template.instantiate``), not the baked ones."""
    rp = replay.Replayer(lambda x, a: x * a + 1.5, lambda: ((), []), differentiable=False)
    x = torch.randn(3, 4)
    xl = x.to(DEV)
    rp(xl, 2.0)
    (e,) = rp.entries.values()
    assert e.state == "ready"
    values = np.asarray([n.value for n in e.fwd.nodes if n.op == "scalar"], np.float64)
    assert sorted(values.tolist()) == [1.5, 2.0]
    scalars = values * 3   # x * 6 + 4.5, whichever order the template holds them in
    call = e.fwd.call([xl._st.node], scalars)
    called = replay.new_base(replay.ir.getitem(call, 0))
    (inlined,) = replay.inline([replay.ir.getitem(call, 0)])
    assert_same(called, x * 6 + 4.5, rtol=1e-6, atol=1e-6)
    assert_same(replay.new_base(inlined), x * 6 + 4.5, rtol=1e-6, atol=1e-6)


def test_each_compiled_optimizer_follows_its_own_numbers():
    """Following is per optimizer: another one, its learning rate constant, is keyed by
    value (replayed from its second step)."""
    model = make_model().to(DEV)
    other = copy.deepcopy(model)
    a = lr.compile_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    b = lr.compile_optimizer(torch.optim.SGD(other.parameters(), lr=0.1))
    sa = torch.optim.lr_scheduler.LambdaLR(a, lambda s: 1.0 / (1 + s))
    lr.reset_metrics()
    run(model, a, sa, DEV, 8)
    assert lr.metrics()["replays"] == 8 - 4
    lr.reset_metrics()
    run(other, b, torch.optim.lr_scheduler.ConstantLR(b, factor=1.0, total_iters=1), DEV, 4)
    assert lr.metrics()["replays"] == 4 - 1


class Denoiser(nn.Module):
    """One step of a sampler: the step's embedding and the noise level are Python numbers
    (an int and a float) that change every call; the path taken depends on the level."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.freqs = nn.Parameter(torch.randn(4), requires_grad=False)

    def forward(self, x, t, sigma):
        emb = torch.cat([torch.sin(self.freqs * t), torch.cos(self.freqs * t)])
        h = self.lin(x + emb) / (sigma ** 2 + 1) ** 0.5
        return x - sigma * h if sigma > 0.1 else h


def sample(model, x, steps=20, dev=None):
    x = x.to(dev) if dev else x.clone()
    with torch.no_grad():
        for i in range(steps):
            x = model(x, steps - i, 2.0 * 0.8 ** i)
            if dev:
                lr.mark_step()
    return x.cpu() if dev else x


def test_a_forward_replays_at_numbers_never_traced_without_autograd():
    torch.manual_seed(0)
    eager = Denoiser()
    x = torch.randn(3, 8)
    traced = sample(copy.deepcopy(eager).to(DEV), x, dev=DEV)
    model = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lr.reset_metrics()
    got = sample(model, x, dev=DEV)
    assert torch.equal(got, traced)
    assert_same(got, sample(eager, x), rtol=1e-5, atol=1e-5)
    m = lr.metrics()
    # call 1 is captured by value, 2 learns that both numbers change, 2-4 are traced at
    # three values, 5-14 replay; the level passes 0.1 at call 15 (the other branch):
    # 15-17 are traced, 18-20 replay
    assert m["replays"] == 13 and m["replay_misses"] == {}, m


class Sized(nn.Module):
    def forward(self, x, n):
        return x[:n] * n + torch.ones(n, x.shape[1], device=x.device)


def test_numbers_that_set_shapes_or_run_with_autograd_are_keyed_by_value():
    """A number that sets a cut and a shape changes the template: its traces never form a
    family, so only values seen before replay. With autograd the numbers are not followed
    (the backward's numbers come from torch's C++ formulas)."""
    model = lr.compile(Sized(), replay=True)
    x = torch.randn(9, 3)
    lr.reset_metrics()
    with torch.no_grad():
        for n in (2, 3, 4, 5, 6, 7, 3, 4):
            assert_same(model(x.to(DEV), n), x[:n] * n + 1, rtol=1e-6, atol=1e-6)
    assert lr.metrics()["replays"] == 2   # (3 and 4 again)
    torch.manual_seed(0)
    eager = Denoiser()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lazy.lin.weight.requires_grad_(True)
    lr.reset_metrics()
    for i in range(6):
        sigma = 0.5 + i / 10
        out = lazy(x[:3, :].repeat(1, 3)[:, :8].to(DEV), 3, sigma)
        out.sum().backward()
        want = eager(x[:3, :].repeat(1, 3)[:, :8], 3, sigma)
        want.sum().backward()
        assert_same(out, want, rtol=1e-5, atol=1e-6)
        assert_same(lazy.lin.weight.grad, eager.lin.weight.grad, rtol=1e-5, atol=1e-6)
    m = lr.metrics()
    assert m["replays"] == 0 and m["replay_misses"] == {}, m


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale):
        return self.lin(x) * scale


def test_a_replayed_forward_given_a_number_a_whole_step_follows_is_traced_inside_it():
    """``compile_step`` passes a number it follows as a ``TracedFloat`` (a float with a
    ``__dict__``): the forward's replayer refuses it (it was looked into as an object
    whose value is not in its ``__dict__``, and replayed at the first value seen), so the
    step records the forward's arithmetic on it and replays whole."""
    torch.manual_seed(0)
    eager = Scaled()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    step = lr.compile_step(lambda x, s: lazy(x, s), lazy)
    x = torch.randn(2, 4)
    lr.reset_metrics()
    with torch.no_grad():
        for i in range(10):
            assert_same(step(x, 1.0 + i / 2), eager(x, 1.0 + i / 2), rtol=1e-5, atol=1e-6)
    m = lr.metrics()
    assert m["step_replays"] == 6, m["replay_misses"]
    assert m["replay_misses"] == {"an argument is a number a whole step's trace follows": 3}


def test_a_whole_step_with_a_fused_optimizer_follows_its_scheduled_lr():
    """The fused kernel's learning rate is one graph input, which ``compile_step`` links
    to the followed lr (it derived ``1 - lr * weight_decay`` on the host before)."""
    def train(dev):
        torch.manual_seed(0)
        model = make_model()
        if dev:
            model = model.to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1, fused=True)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))
        step = training_step(model, opt)
        step = lr.compile_step(step, model, opt) if dev else step
        g = torch.Generator().manual_seed(1)
        lr.reset_metrics()
        losses = []
        for _ in range(12):
            losses.append(step(torch.randn(4, 8, generator=g)).item())
            schedule.step()
        return losses
    got = train(DEV)
    m = lr.metrics()
    assert got == pytest.approx(train(None), rel=1e-4, abs=1e-6)
    # step 1 makes the state, 2 is keyed by value, 3 follows the lr, 3-5 form the family
    assert m["step_replays"] == 7, m["replay_misses"]


class NextLevel(nn.Module):
    def forward(self, x, sigma):
        return x * sigma, sigma * 0.9


def test_a_forward_returning_a_number_made_from_a_followed_one_is_keyed_by_value():
    """A replay would not compute the returned number: the numbers are keyed by value
    again at once, and the caller always gets a plain float."""
    model = lr.compile(NextLevel(), replay=True)
    x, xe, sigma = torch.ones(2).to(DEV), torch.ones(2), 1.0
    lr.reset_metrics()
    with torch.no_grad():
        for i in range(8):
            x, nxt = model(x, sigma)
            xe = xe * sigma
            assert type(nxt) is float and nxt == sigma * 0.9
            sigma = nxt if i < 5 else 1.0
    assert_same(x, xe, rtol=1e-6, atol=0)
    m = lr.metrics()
    assert m["replays"] == 2, m   # (1.0 again, twice)
    assert "a number is used in a way a replay cannot follow (returns a number computed " \
           "from them)" in m["replay_misses"], m["replay_misses"]
