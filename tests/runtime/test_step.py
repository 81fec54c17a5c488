"""Whole-step replay (``lazy_runtime/step.py``): a training step whose two traces agree
runs from the third call on without its Python. Checked bit for bit against the same
steps traced op by op (random streams included) and against eager torch; and every
refusal: a value read inside the step, a value kept outside its owners, a scheduler
stepped inside the step, a lazy tensor from outside picked by a followed number; each is
traced, right, and counted. A lazy tensor from outside (an lru-cached table) is read as
traced while the storage that held its value holds it still.
Schedules set between steps (float or tensor learning rates) replay."""

import copy
import functools
import weakref

import jax
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
import lazy_runtime.state_stamp as state_stamp
import lazy_runtime.step as lr_step
from lazy_runtime.training import train_steps
from conftest import DEV, load_example, train_as_eager


class Net(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.a = nn.Linear(6, 16)
        self.b = nn.Linear(16, 3)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)   # a host constant
        return self.b(self.drop(torch.tanh(self.a(x + pos * 0.01))))


def batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g))
            for _ in range(n)]


def make(dropout=0.0, seed=0):
    torch.manual_seed(seed)
    model = Net(dropout).to(DEV)
    opt = lr.compile_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
    return model, opt


def run(step_fn, data):
    """Losses of the steps, and the logits each returned."""
    losses, logits = [], []
    for x, y in data:
        out = step_fn(x, y)
        loss, z = out if isinstance(out, tuple) else (out, None)
        losses.append(loss.item())
        logits.append(None if z is None else z.cpu())
    return losses, logits


def train_step(model, opt, loss_fn=F.cross_entropy, extra=None, after=(), logits=False,
               device=DEV):
    """One training step: forward (``extra(model, logits)`` applied to its result), loss,
    backward, optimizer step, zero_grad, then each of ``after``; returns the loss (and the
    logits)."""
    def step(x, y):
        if device is not None:
            x, y = x.to(device), y.to(device)
        z = model(x)
        if extra is not None:
            z = extra(model, z)
        loss = loss_fn(z, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        for then in after:
            then()
        return (loss, z.detach()) if logits else loss
    return step


def traced_step(model, opt):
    return train_step(model, opt, after=(lr.mark_step,), logits=True)


def fresh_step(whole, seed, dropout=0.3):
    """A new model and optimizer with their step (replayed whole or traced), metrics
    reset and the lazy random stream restarted from ``seed``."""
    model, opt = make(dropout=dropout)
    step = traced_step(model, opt)
    if whole:
        step = lr.compile_step(step, model, opt)
    lr.reset_metrics()
    torch.manual_seed(seed)
    return model, opt, step


def test_whole_step_replay_equals_tracing_bit_for_bit_with_dropout():
    data = batches(7)
    runs = {}
    for whole in (False, True):
        model, _, step = fresh_step(whole, seed=1)
        runs[whole] = run(step, data), [p.detach().cpu() for p in model.parameters()]
        if whole:
            m = lr.metrics()
            # step 1 creates AdamW's state, step 2 captures the optimizer's own replay
            # (so step 3's graph differs), steps 3 and 4 agree: steps 5 to 7 replayed
            assert m["step_replays"] == 3, m["replay_misses"]
    (losses0, logits0), params0 = runs[False]
    (losses1, logits1), params1 = runs[True]
    assert losses0 == losses1
    assert all(torch.equal(a, b) for a, b in zip(logits0, logits1))
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))
    assert len(set(losses1)) == len(losses1)   # dropout masks and batches did change


def test_whole_step_replay_over_a_replayed_forward():
    data = batches(8, seed=3)
    runs = {}
    for whole in (False, True):
        model, opt = make(dropout=0.2)
        model = lr.compile(model, replay=True)    # the forward's own replay inside the step
        step = traced_step(model, opt)
        if whole:
            step = lr.compile_step(step, model, opt)
        lr.reset_metrics()
        torch.manual_seed(2)
        runs[whole] = run(step, data)[0], [p.detach().cpu() for p in model.parameters()]
        if whole:
            assert lr.metrics()["step_replays"] == 4, lr.metrics()["replay_misses"]
    assert runs[False][0] == runs[True][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[False][1], runs[True][1]))


def test_a_changed_mode_or_hyper_parameter_is_traced_not_replayed():
    model, opt = make(dropout=0.3)
    whole = lr.compile_step(traced_step(model, opt), model, opt)
    data = batches(9, seed=4)
    for x, y in data[:6]:
        whole(x, y)
    lr.reset_metrics()
    for change in (lambda: model.eval(), lambda: opt.param_groups[0].update(lr=0.5),
                   lambda: setattr(model.b, "scale", 2.0)):
        change()   # each makes a new signature: traced (the first call of it)
        x, y = data[6]
        whole(x, y)
        assert lr.metrics()["step_replays"] == 0
    lr.reset_metrics()
    model.train()
    opt.param_groups[0]["lr"] = 1e-2
    del model.b.scale
    whole(*data[7])   # back to the replayed signature: replayed again
    assert lr.metrics()["step_replays"] == 1


def replayed_like_traced(data, seed, changes):
    """Train on ``data`` traced and replayed whole, applying ``changes[i](model, opt)``
    before call i; both must agree bit for bit. The whole-step run's metrics and
    optimizer."""
    runs = {}
    for whole in (False, True):
        model, opt, step = fresh_step(whole, seed=seed)
        losses = []
        for i, (x, y) in enumerate(data):
            if i in changes:
                changes[i](model, opt)
            losses.append(step(x, y)[0].item())
        runs[whole] = losses, [p.detach().cpu() for p in model.parameters()], lr.metrics(), opt
    (losses0, params0, _, _), (losses1, params1, metrics, opt) = runs[False], runs[True]
    assert losses0 == losses1
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))
    return metrics, opt


def test_a_state_change_discards_the_launch_made_before_the_guard():
    """A replay of the previous call's signature launches before its state guard runs;
    when the guard then fails (the learning rate changed), the launch's results are
    dropped and no random number is drawn: the step is traced, bit for bit as tracing."""
    def set_lr(value):
        return lambda model, opt: opt.param_groups[0].update(lr=value)
    m, _ = replayed_like_traced(batches(9, seed=5), 3, {6: set_lr(0.5), 7: set_lr(1e-2)})
    # steps 5 and 6 replayed, 7 traced (new learning rate), 8 and 9 replayed
    assert m["step_replays"] == 4, m["replay_misses"]


def test_a_parameter_given_new_data_is_replayed_with_it():
    """``p.data = x`` between calls: the replay reads the new buffer (same shape: the same
    signature, still replayed), bit for bit as tracing."""
    def new_data(model, opt):
        model.a.weight.data = torch.full((16, 6), 0.05).to(DEV)
    m, _ = replayed_like_traced(batches(9, seed=7), 5, {6: new_data})
    assert m["step_replays"] == 5, m["replay_misses"]


def _freeze(model, opt):
    model.a.weight.requires_grad_(False)


def _grad_by_hand(model, opt):
    model.b.bias.grad = torch.ones(3).to(DEV)


def _new_moment(model, opt):
    opt.state[model.a.bias]["exp_avg"] = torch.full((16,), 0.5).to(DEV)


def _forward_hook(model, opt):
    model.b.register_forward_hook(lambda mod, args, out: out * 2.0)


def _new_parameter(model, opt):
    model.b.bias = nn.Parameter(torch.zeros(3).to(DEV))


@pytest.mark.parametrize("versions", [True, False], ids=["dict-versions", "compared"])
@pytest.mark.parametrize("change", [_freeze, _grad_by_hand, _new_moment, _forward_hook,
                                    _new_parameter])
def test_each_state_change_between_replays_is_seen(change, versions, monkeypatch):
    """A change to the model's or optimizer's state between two replayed calls (a frozen
    parameter, a grad set by hand, a state tensor replaced, a hook, a parameter replaced)
    reaches the next step, bit for bit as tracing sees it; with the guard reading dicts'
    version tags and with it comparing every key and value (Pythons without the tags)."""
    if not versions:
        monkeypatch.setattr(state_stamp, "_DICT_VERSION", None)
    else:
        assert state_stamp._DICT_VERSION is not None   # CPython 3.11 has them
    m, _ = replayed_like_traced(batches(9, seed=8), 4, {6: change})
    assert m["step_replays"] >= 2, m["replay_misses"]   # replayed before the change


def test_values_shared_when_traced_must_be_shared_again():
    """AdamW's step counters hold one value (one input of the graph). Advancing one of
    them by hand breaks that: the next call is traced, not replayed with the shared
    value, and equals tracing bit for bit."""
    def advance_one(model, opt):
        next(iter(opt.state.values()))["step"].add_(10.0)
    m, opt = replayed_like_traced(batches(12, seed=6), 4, {6: advance_one})
    # steps 5 and 6 replayed; 7 and 8 traced (the counters apart: the optimizer captured
    # again, the step's two new traces agree); 9 to 12 replayed
    assert m["step_replays"] == 6, m["replay_misses"]
    # the counter advanced by hand, and the others
    assert len({id(s["step"]._st.node) for s in opt.state.values()}) == 2


def test_values_held_across_replays_keep_their_meaning():
    """A replay puts a parameter's new value into the leaf it held when nothing else holds
    that leaf. Tensors a user keeps must not notice: a copy (``copy_`` shares the leaf)
    keeps the old value, a view shows the new one."""
    model, opt = make()
    step = lr.compile_step(traced_step(model, opt), model, opt)
    data = batches(12, seed=9)
    for x, y in data[:5]:
        step(x, y)
    w = model.a.weight.detach()
    kept = torch.empty(16, 6, device=DEV).copy_(w)   # holds w's leaf itself
    lr.mark_step()
    want_kept = w.cpu()
    row = w[0]   # a view: follows the parameter
    lr.reset_metrics()
    for x, y in data[5:8]:
        step(x, y)
    assert lr.metrics()["step_replays"] == 3, lr.metrics()["replay_misses"]
    assert torch.equal(kept.cpu(), want_kept)
    assert not torch.equal(w.cpu(), want_kept)   # trained
    assert torch.equal(row.cpu(), w.cpu()[0])


def test_an_argument_changed_after_the_call_does_not_reach_the_step(monkeypatch):
    """Each call's CPU arguments are copied for the executable (JAX on the CPU may read a
    host array in place while it runs; the copies' buffers are reused once JAX lets go):
    no array it is given shares memory with an argument, and changing an argument in
    place after the call, before the result is read, changes nothing."""
    given = []
    call = jax.stages.Compiled.__call__

    def recording_call(self, datas, *rest):
        given.extend(a for a in datas if isinstance(a, np.ndarray))
        return call(self, datas, *rest)

    data = batches(10, seed=10)
    runs = []
    for change in (False, True):
        model, opt = make()
        step = lr.compile_step(traced_step(model, opt), model, opt)
        lr.reset_metrics()
        losses = []
        for i, (x, y) in enumerate(data):
            x = x.clone()
            if i == 8:
                given.clear()
                monkeypatch.setattr(jax.stages.Compiled, "__call__", recording_call)
            loss = step(x, y)[0]
            monkeypatch.undo()
            if i == 8:
                assert len(given) == 2   # x and y, replayed
                assert not any(np.shares_memory(a, t.numpy()) for a in given for t in (x, y))
            if change:
                x.mul_(-100.0)
            losses.append(loss.item())
        assert lr.metrics()["step_replays"] == 6, lr.metrics()["replay_misses"]
        runs.append(losses)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("make_arg", [
    lambda: torch.randn(4, 6),
    lambda: torch.randn(6, 4).t(),                        # not contiguous
    lambda: torch.randn(4, 6, requires_grad=True),
    lambda: torch.randn(4, 6).to(torch.bfloat16),          # no numpy dtype in torch
    lambda: torch._neg_view(torch.randn(4, 6)),            # a negative view
    lambda: torch.arange(24).reshape(4, 6),
], ids=["float", "transposed", "requires-grad", "bfloat16", "neg-view", "int64"])
def test_a_host_argument_copy_is_the_general_conversion(make_arg):
    """``_host_copy`` (a reused buffer where it can) gives what the general conversion
    gives, in memory of its own, for every kind of CPU tensor."""
    from lazy_runtime import dtypes
    t = make_arg()
    buffers = []
    for _ in range(3):
        got = lr_step._host_copy(buffers, t)
        want = dtypes.tensor_to_numpy(t)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
        if t.dtype != torch.bfloat16:
            assert not np.shares_memory(got, t.detach().resolve_neg().numpy())
        del got
    assert len(buffers) <= 1   # one buffer, reused once let go


def test_a_step_copying_an_empty_tensor_each_call_is_replayed():
    """An empty tensor made each call (transformers' caches start as ``torch.tensor([])``)
    has no values: two traces agree on it, and the step is replayed."""
    def concat_empty(model, z):
        return torch.cat([torch.tensor([], device=z.device).reshape(0, z.shape[1]), z])
    model, opt = make()
    step = lr.compile_step(train_step(model, opt, extra=concat_empty), model, opt)
    lr.reset_metrics()
    data = batches(6)
    losses, _ = run(step, data)
    assert lr.metrics()["step_replays"] >= 2, lr.metrics()["replay_misses"]
    model2, opt2 = make()
    assert losses == pytest.approx(run(train_step(model2, opt2, extra=concat_empty), data)[0],
                                   rel=1e-6)


def test_whole_step_training_of_an_example_matches_eager():
    ex = load_example("mlp")
    data = [ex.make_batch(i) for i in range(6)]
    torch.manual_seed(0)
    base = ex.make_model()
    eager = copy.deepcopy(base)
    want = train_steps(eager, ex.make_optimizer(eager), ex.make_batch, ex.loss_fn, len(data))
    model = copy.deepcopy(base).to(DEV)
    opt = lr.compile_optimizer(ex.make_optimizer(model))
    lr.reset_metrics()
    whole = lr.compile_step(train_step(model, opt, ex.loss_fn), model, opt)  # no mark_step
    got = [whole(x, y).item() for x, y in data]
    assert lr.metrics()["step_replays"] == 2   # steps 5 and 6 (as above)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["cnn", "lstm"])
def test_whole_step_of_an_example_equals_tracing(name):
    # batch norm's running statistics (buffers written in place) and an LSTM's state
    ex = load_example(name)
    data = [ex.make_batch(i) for i in range(7)]
    runs = {}
    for whole in (False, True):
        model = ex.make_model().to(DEV)
        opt = lr.compile_optimizer(ex.make_optimizer(model))
        step = train_step(model, opt, ex.loss_fn, after=(lr.mark_step,))
        if whole:
            step = lr.compile_step(step, model, opt)
        lr.reset_metrics()
        losses = [step(x, y).item() for x, y in data]
        runs[whole] = losses, [t.detach().cpu() for t in model.state_dict().values()]
        if whole:   # from step 4 or 5 (the optimizer's own replay may start at step 3)
            assert lr.metrics()["step_replays"] >= 3, lr.metrics()["replay_misses"]
    assert runs[False][0] == runs[True][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[False][1], runs[True][1]))


def refused(step, model, opt, n=5):
    """Run ``n`` calls of ``step`` whole; the misses counted and the losses."""
    lr.reset_metrics()
    whole = lr.compile_step(step, model, opt)
    losses = [whole(x, y).item() for x, y in batches(n)]
    m = lr.metrics()
    return m["step_replays"], m["replay_misses"], losses


def plain_losses(step, n=5):
    return [step(x, y).item() for x, y in batches(n)]


def test_steps_that_cannot_be_replayed_whole_are_traced_and_right():
    def reads_a_value(model, z):
        return z * (1.0 + 0.0 * float(z.detach().sum()))  # .item() inside: 2 barriers

    kept = []

    def keeps_a_value(model, z):
        kept[:] = [z.detach() * 2]                       # kept outside the owners
        return z

    cases = {reads_a_value: "more than one barrier", keeps_a_value: "keeps a value"}
    for extra, reason in cases.items():
        model, opt = make()
        want = plain_losses(train_step(model, opt, extra=extra, after=(lr.mark_step,)))
        model, opt = make()
        replays, misses, got = refused(train_step(model, opt, extra=extra), model, opt)
        assert replays == 0 and any(reason in k for k in misses), (extra.__name__, misses)
        assert got == want, extra.__name__


@functools.lru_cache(maxsize=4)
def _cached_offsets(n: int, device) -> torch.Tensor:
    """A table made on the device at its first call and kept (as transformers' models keep
    patch coordinates and position tables, ``compile_compatible_method_lru_cache``)."""
    return torch.linspace(-1.0, 1.0, n, device=device)


def _adds_cached_offsets(model, z):
    return z + _cached_offsets(z.shape[-1], z.device)


def test_a_tensor_from_outside_the_step_is_read_as_it_is_while_it_lives_unwritten():
    """The table is made by the first step and read by the next ones, none handing it to
    the step: replayed, with the losses of the step traced; written in place between calls,
    the next call is traced and reads the new values (a replay read the old ones before),
    though a view of the table made before the write still holds the old value's leaf;
    freed (the cache cleared), the new table made is read."""
    losses = {}
    held = []
    for mode in ("traced", "whole", "unchanged"):
        _cached_offsets.cache_clear()
        model, opt = make()
        step = train_step(model, opt, extra=_adds_cached_offsets)
        if mode == "whole":
            step = lr.compile_step(step, model, opt)
        lr.reset_metrics()
        losses[mode] = []
        for i, (x, y) in enumerate(batches(14)):
            if i == 6 and mode != "unchanged":
                view = _cached_offsets(3, torch.device(DEV))[:2]
                held[:] = [view, view * 1.0]   # (the view's cached node: the old leaf)
                old = weakref.ref(view._st.node)
                del view
                with torch.no_grad():
                    _cached_offsets(3, torch.device(DEV)).mul_(3.0)
                lr.mark_step()
                assert old() is not None   # (alive, yet no longer the table's value)
            elif i == 10:
                # (freed: a tensor still held elsewhere would be replayed as traced, as any
                # value the Python no longer reads: the documented assumption)
                held.clear()
                _cached_offsets.cache_clear()
            losses[mode].append(step(x, y).item())
            if mode != "whole":
                lr.mark_step()
        if mode == "whole":
            m = lr.metrics()
    _cached_offsets.cache_clear()
    assert losses["whole"] == losses["traced"]
    assert losses["whole"][6] != losses["unchanged"][6]   # (the write reached the loss)
    # replayed at calls 5-6, 9-10 and 14 (counting from 1: the optimizer's first step,
    # then two traces to agree, as without the table; two again after each change, and
    # after the cache is cleared one more, whose table is made inside the step)
    assert m["step_replays"] == 5, m


def test_a_tensor_from_outside_picked_by_a_followed_number_is_not_replayed():
    """``tables[k]`` with ``k`` an int argument that changes: a replay at another ``k``
    would read the traced table (indexing a list by a followed int records nothing), so
    the step is traced, right."""
    tables = [torch.full((3,), float(k)).to(DEV) for k in range(4)]
    ks = [0, 1, 2, 3, 1, 2, 3, 0]

    def stepper(model, opt, after=()):
        def step(x, y, k):
            return train_step(model, opt, extra=lambda m_, z: z + tables[k], after=after)(x, y)
        return step
    traced = stepper(*make(), after=(lr.mark_step,))
    want = [traced(x, y, k).item() for k, (x, y) in zip(ks, batches(8))]
    model, opt = make()
    lr.reset_metrics()
    whole = lr.compile_step(stepper(model, opt), model, opt)
    got = [whole(x, y, k).item() for k, (x, y) in zip(ks, batches(8))]
    m = lr.metrics()
    assert got == want
    assert m["step_replays"] == 0, m
    assert any("argument numbers it follows" in k for k in m["replay_misses"]), m


def test_a_scheduler_stepped_inside_the_step_is_traced_every_step():
    """A step whose own Python sets the learning rate (the scheduler stepped inside it)
    cannot be replayed: a replay runs no Python."""
    def halving(opt):
        return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    model, opt = make()
    replays, misses, got = refused(train_step(model, opt, after=(halving(opt).step,)), model,
                                   opt, n=6)
    assert replays == 0 and any("sets an optimizer hyper-parameter" in k for k in misses)
    model, opt = make()
    assert got == plain_losses(train_step(model, opt, after=(halving(opt).step, lr.mark_step)),
                               n=6)
    torch.manual_seed(0)   # and eager torch (the optimizer's replay under a scheduler too)
    eager = Net()
    eopt = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    want = plain_losses(train_step(eager, eopt, after=(halving(eopt).step,), device=None), n=6)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)


SCHEDULES = {
    "adamw, cosine": (lambda ps: torch.optim.AdamW(ps, lr=1e-2),
                      lambda o, n: torch.optim.lr_scheduler.CosineAnnealingLR(o, n)),
    # betas[0] cycled with the learning rate: a tuple of floats set every step
    "adam, one cycle": (lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-3),
                        lambda o, n: torch.optim.lr_scheduler.OneCycleLR(o, 0.05, total_steps=n)),
    "sgd, exponential": (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
                         lambda o, n: torch.optim.lr_scheduler.ExponentialLR(o, 0.8)),
    # two groups, each its own schedule (their learning rates followed apart)
    "two groups, lambda": (lambda ps: torch.optim.AdamW(
        [{"params": ps[:2], "lr": 1e-2}, {"params": ps[2:], "lr": 3e-3}]),
        lambda o, n: torch.optim.lr_scheduler.LambdaLR(
            o, [lambda e: 0.9 ** e, lambda e: 1 / (1 + e)])),
    "rmsprop, warm-up": (lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
                         lambda o, n: torch.optim.lr_scheduler.LinearLR(o, 0.1, 1.0, n)),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_a_schedule_over_float_hyper_parameters_is_replayed(name):
    """A scheduler setting a float learning rate (and Adam's ``betas`` under OneCycleLR)
    between steps: the floats are followed (``step_numbers``), and from the third step at a
    new value on the steps replay at values never traced; losses and parameters equal
    the same steps traced op by op bit for bit, and eager torch's."""
    make_opt, make_sched = SCHEDULES[name]
    n = 12

    def run(device, whole):
        torch.manual_seed(0)
        model = Net().to(device) if device else Net()
        opt = make_opt(list(model.parameters()))
        if device:
            opt = lr.compile_optimizer(opt)
        sched = make_sched(opt, n)
        step = train_step(model, opt, device=device, after=() if whole else (lr.mark_step,))
        if whole:
            step = lr.compile_step(step, model, opt)
        lr.clear_cache()   # (families of other tests' graphs: see test_step_numbers)
        lr.reset_metrics()
        losses, seen = [], set()
        for x, y in batches(n):   # (the scheduler steps outside: a replay runs no Python)
            losses.append(step(x, y).item())
            seen.add(opt.param_groups[0]["lr"])
            sched.step()
        assert len(seen) == n   # a new learning rate every step
        return losses, [p.detach().cpu() for p in model.parameters()], lr.metrics()
    got, params, m = run(DEV, True)
    assert m["step_replays"] >= n - 6, m["replay_misses"]
    traced, traced_params, _ = run(DEV, False)
    assert got == traced
    assert all(torch.equal(a, b) for a, b in zip(params, traced_params))
    want, eager_params, _ = run(None, False)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    for a, b in zip(params, eager_params):   # (XLA's and torch's roundings, 12 steps)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_schedule_over_a_tensor_learning_rate_is_replayed():
    """A learning rate held in a tensor (torch's advice for schedules under torch.compile)
    is moved to the device by compile_optimizer; the scheduler fills it in place and the
    step reads it like the optimizer's state: the steps replay, and the losses and
    parameters are eager torch's."""
    lr.clear_cache()   # (families of other tests' graphs: see test_step_numbers)
    def run(device):
        torch.manual_seed(0)
        model = Net().to(device) if device else Net()
        opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-2),
                                capturable=device is not None, foreach=device is not None)
        if device:
            opt = lr.compile_optimizer(opt)
            assert isinstance(opt.param_groups[0]["lr"], lr.LazyTensor)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 8)
        step = train_step(model, opt, device=device)
        if device:
            step = lr.compile_step(step, model, opt)
        lr.reset_metrics()
        losses = []
        for x, y in batches(8):   # (the scheduler steps outside: a replay runs no Python)
            losses.append(step(x, y).item())
            sched.step()
        return losses, list(model.parameters()), lr.metrics()
    got, params, m = run(DEV)
    want, eager_params, _ = run(None)
    assert m["step_replays"] >= 4, m["replay_misses"]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)


def test_a_padded_step_is_replayed_and_a_new_size_from_its_second_call():
    """A step whose length is dynamic runs one padded executable per bucket. Each size
    is replayed once traced and confirmed: by a second trace, or (a new size) by doing
    what a confirmed trace of another size does, on the same executable. Bit for bit
    what tracing every step gives, with fewer compiles."""
    ex = load_example("gpt")
    lengths = [9, 9, 9, 9, 9, 12, 12, 9, 13, 13, 12]   # one bucket: 16
    runs = {}
    for whole in (False, True):
        torch.manual_seed(0)
        model = ex.GPT(block=32, dropout=0.0).to(DEV)
        opt = lr.compile_optimizer(ex.make_optimizer(model))

        def step(x, y):
            x, y = x.to(DEV), y.to(DEV)
            loss = ex.loss_fn(model(lr.mark_dynamic(x, 1, "T")), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            lr.mark_step()
            return loss
        if whole:
            step = lr.compile_step(step, model, opt)
        lr.clear_cache()
        lr.reset_metrics()
        losses = [step(*ex.make_batch(i, batch=3, length=T)).item()
                  for i, T in enumerate(lengths)]
        runs[whole] = losses, [p.detach().cpu() for p in model.parameters()], lr.metrics()
    (l0, p0, m0), (l1, p1, m1) = runs[False], runs[True]
    assert l0 == l1
    assert all(torch.equal(a, b) for a, b in zip(p0, p1))
    # T=9: steps 2 and 3 agree (a padded graph inlines the optimizer's replay, so its
    # capture changes nothing), 4 and 5 replayed; T=12 and T=13 confirmed by T=9 on
    # their first call and replayed on the next (7, 10); 8 (T=9) and 11 (T=12) replayed
    assert m1["step_replays"] == 6, m1["replay_misses"]
    # the traced loop compiles its bucket twice: once traced op by op, once with the
    # optimizer's replay as one op (only exact values reach it); the whole step once
    assert (m1["compiles"], m0["compiles"]) == (1, 2) and m1["exact_compiles"] == {}


def test_a_padded_step_returning_a_dynamic_value_is_replayed():
    """Its result is padded inside the executable: a replay returns it padded at the
    call's true size (it was refused, and traced every call), right at every length."""
    lr.clear_cache()
    torch.manual_seed(0)
    model = nn.Linear(4, 3).to(DEV)
    opt = lr.compile_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))

    def step(x):
        z = model(lr.mark_dynamic(x, 1, "T"))
        z.square().mean().backward()
        opt.step()
        opt.zero_grad()
        return z.detach().clone()   # [2, T, 3]: padded inside the executable
    step = lr.compile_step(step, model, opt)
    lr.reset_metrics()
    for T in (5, 5, 5, 5, 6):
        x = torch.randn(2, T, 4)
        w, b = model.weight.detach().cpu(), model.bias.detach().cpu()
        assert torch.allclose(step(x).cpu(), x @ w.T + b, atol=1e-6)
    m = lr.metrics()
    assert m["step_replays"] == 2, m["replay_misses"]   # the third and fourth T = 5 calls
    assert not any("dynamic dim" in k for k in m["replay_misses"]), m["replay_misses"]


@pytest.mark.parametrize("where", ["device", "cpu"])
def test_a_step_selecting_by_a_mask_is_traced_at_each_call(where):
    """``logits[mask]`` reads the mask (its positions are the step's data): a replay
    would reuse one call's positions, so each call is traced, and right."""
    model, opt = make()
    eager = copy.deepcopy(model).to("cpu")
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-2)

    def masked_step(m, o, device):
        def step(x, y):
            mask = y > 0
            out = m(x.to(device))[mask.to(device) if where == "device" else mask]
            loss = out.pow(2).mean()
            loss.backward()
            o.step()
            o.zero_grad()
            return loss
        return step

    step = lr.compile_step(masked_step(model, opt, DEV), model, opt)
    lr.reset_metrics()
    g = torch.Generator().manual_seed(11)
    for x, _ in batches(6, seed=11):   # the same count at other positions each call
        y = torch.tensor([0, 1, 2, 1, 0])[torch.randperm(5, generator=g)]
        got = step(x, y).item()
        want = masked_step(eager, eager_opt, "cpu")(x, y).item()
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert lr.metrics()["step_replays"] == 0, lr.metrics()["replay_misses"]


def test_arguments_written_in_place_are_written_back():
    """A step that updates its lazy argument in place (a recurrent state, a KV cache
    passed in) and returns it: a replay writes the argument it is given and returns that
    very tensor (or a view of it), as the traced calls do; values as eager torch's. The
    same tensor given for two written arguments, or a buffer of the model given for one,
    is traced (the executable computed them apart). Before, a replay returned a new
    tensor and left the argument as it was."""
    lr.clear_cache()   # (families of other tests' graphs: see test_step_numbers)
    torch.manual_seed(0)
    eager = nn.Linear(3, 3)
    eager.register_buffer("buf", torch.zeros(3, 3))
    lazy = copy.deepcopy(eager).to(DEV)

    def body(m, h, c):
        with torch.no_grad():
            h.add_(torch.tanh(m(h)))
            c[:, 1] = h[:, 0] * 2
        return h, c[0], h.sum()
    step = lr.compile_step(lambda h, c: body(lazy, h, c), lazy)
    h0, c0 = torch.randn(3, 3), torch.zeros(3, 3)
    he, ce, hl, cl = h0.clone(), c0.clone(), h0.to(DEV), c0.to(DEV)
    lr.reset_metrics()
    for i in range(6):
        got, want = step(hl, cl), body(eager, he, ce)
        assert got[0] is hl and got[1]._st is cl._st
        for a, b in zip(got, want):
            torch.testing.assert_close(a.cpu(), b)
        torch.testing.assert_close(hl.cpu(), he)
        torch.testing.assert_close(cl.cpu(), ce)
    assert lr.metrics()["step_replays"] == 4
    for h_args in ("twice", "buffer"):
        x = torch.randn(3, 3)
        xe, xl = x.clone(), x.to(DEV)
        if h_args == "twice":
            step(xl, xl), body(eager, xe, xe)
        else:
            step(xl, lazy.buf), body(eager, xe, eager.buf)
            torch.testing.assert_close(lazy.buf.cpu(), eager.buf)
        torch.testing.assert_close(xl.cpu(), xe)
    assert lr.metrics()["step_replays"] == 4


def test_an_argument_returned_untouched_is_that_argument():
    """Returned without being read or written (it was refused): a replay returns the
    argument it is given; a view of it over that argument's own storage."""
    lr.clear_cache()   # (families of other tests' graphs: see test_step_numbers)
    torch.manual_seed(0)
    lin = nn.Linear(3, 3).to(DEV)

    def body(x, h):
        with torch.no_grad():
            return lin(x.to(DEV)), h, h[1:]
    step = lr.compile_step(body, lin)
    lr.reset_metrics()
    for i in range(5):
        h = torch.randn(4, 3).to(DEV)
        _, same, rows = step(torch.randn(2, 3), h)
        assert same is h and rows._st is h._st
        torch.testing.assert_close(rows.cpu(), h.cpu()[1:])
    assert lr.metrics()["step_replays"] == 3


def test_a_returned_value_with_a_dynamic_dim_is_replayed():
    """Per-row outputs of a step whose batch dim is dynamic (it was refused: the step ran
    traced every call): a replay returns them padded at the call's true size, as a traced
    barrier leaves them; values as eager torch's at each batch size."""
    lr.clear_cache()
    torch.manual_seed(0)
    eager = nn.Linear(4, 3)
    lazy = copy.deepcopy(eager).to(DEV)

    def body(m, x):
        with torch.no_grad():
            return torch.tanh(m(x)) * 2
    step = lr.compile_step(lambda x: body(lazy, lr.mark_dynamic(x.to(DEV), 0)), lazy)
    g = torch.Generator().manual_seed(1)
    lr.reset_metrics()
    for b in (5, 6, 5, 6, 5, 6, 7, 7, 7):
        x = torch.randn(b, 4, generator=g)
        got = step(x)
        assert tuple(got.shape) == (b, 3)
        torch.testing.assert_close(got.cpu(), body(eager, x))
        torch.testing.assert_close((got + 1).sum(0).cpu(), (body(eager, x) + 1).sum(0))
    assert lr.metrics()["step_replays"] >= 4, lr.metrics()["replay_misses"]


# ---- argument objects: a key-value cache passed to the step --------------------------


def _cached_decode(how="in place", steps=8, change=None):
    """The replay tests' ``CachedAttention`` decoding under ``compile_step`` (the cache an
    argument), against eager torch: (outputs, eager outputs, cache tensors, eager ones,
    metrics)."""
    from test_replay import CachedAttention, KVCache
    torch.manual_seed(4)
    eager = CachedAttention(how)
    lazy = copy.deepcopy(eager).to(DEV)
    xs = [torch.randn(3, 1, 8) for _ in range(steps)]
    runs = []
    for model, dev, step in ((eager, None, None), (lazy, DEV, "whole")):
        cache = KVCache(device=dev)
        fn = (lambda x, c, model=model: model(x, c)[0])
        if step:
            fn = lr.compile_step(fn, model)
            lr.reset_metrics()
        outs = []
        with torch.no_grad():
            for i, x in enumerate(xs):
                if change is not None:
                    change(i, cache, model)
                outs.append(fn(x.to(dev) if dev else x, cache))
        runs.append((outs, cache.tensors()))
    (want, want_cache), (got, got_cache) = runs
    return got, want, got_cache, want_cache, lr.metrics()


def test_a_cache_object_argument_of_a_whole_step_is_state_written_in_place():
    got, want, got_cache, want_cache, m = _cached_decode()
    assert m["step_replays"] == 6, m["replay_misses"]
    for a, b in zip(got + got_cache, want + want_cache):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


def _hold_a_parameter(i, cache, model):
    if i == 0 and cache.layers[0].keys.device.type != "cpu":
        cache.layers[1].bias = model.qkv[0].bias


def _share_one_tensor(i, cache, model):
    if i == 0:
        cache.layers[1].values = cache.layers[1].keys


@pytest.mark.parametrize("how,change,reason", [
    ("rebinds", None, "the step changes an attribute of an argument object"),
    ("counts", None, "the step changes an attribute of an argument object"),
    ("in place", _hold_a_parameter, "an argument object holds a tensor the model or the "
                                    "optimizer holds"),
    ("in place", _share_one_tensor, "an argument object holds one tensor in two places")],
    ids=["rebinds", "counts", "holds a parameter", "one tensor twice"])
def test_a_cache_object_a_whole_step_cannot_take_is_traced_with_the_reason(how, change,
                                                                             reason):
    got, want, got_cache, want_cache, m = _cached_decode(how, steps=5, change=change)
    assert m["step_replays"] == 0
    assert m["replay_misses"].get(f"whole step: {reason}", 0) >= 1, m["replay_misses"]
    for a, b in zip(got + got_cache, want + want_cache):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


def test_a_step_reading_a_value_with_nothing_left_to_compute_is_not_replayed():
    """ASGD's per-tensor-group step (not capturable) reads its step count with ``.item()``
    after incrementing it, and the barrier of that read leaves nothing pending: the step
    seemed to have one barrier, was replayed, and counted two steps per replay (and kept
    its learning rate ``eta`` stale). Any value read inside the step refuses its replay."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2).double()
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 3, generator=g, dtype=torch.float64),) for _ in range(6)]
    opt, m = train_as_eager(model, lambda ps: torch.optim.ASGD(ps, foreach=True),
                       lambda mod, x: mod(x).square().mean(), batches)
    assert opt.state[model.weight]["step"].item() == 6
    assert m["step_replays"] == 0
    assert any("reads a value" in k for k in m["replay_misses"]), m["replay_misses"]


def test_a_gradient_penalty_step_is_replayed():
    """A step that makes its input require grad and takes a double backward (a WGAN-GP
    penalty): the returned loss's autograd graph held that input, which refused the
    replay ("keeps a value"); its result now comes back without its graph, as a replay
    returns it. As eager torch throughout."""
    def penalized(m, x, y):
        x = x.clone().requires_grad_(True)
        out = m(x)
        g, = torch.autograd.grad(out.sum(), x, create_graph=True)
        return F.mse_loss(out, y) + 0.1 * (g.norm(2, dim=1) - 1).square().mean()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randn(5, 6, generator=gen, dtype=torch.float64),
                torch.randn(5, 3, generator=gen, dtype=torch.float64)) for _ in range(7)]
    _, m = train_as_eager(model, lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
                     penalized, batches)
    # Calls 4-7 replayed, mostly; now and then a value of the double backward's graph is
    # still alive at a trace's barrier (an output more of its graph: the traces differ,
    # and one more confirms the step), which this test cannot steer
    assert m["step_replays"] >= 1, m["replay_misses"]
    assert not any("keeps a value" in k for k in m["replay_misses"]), m["replay_misses"]


def _grads_kept_or_made(zero_first: bool):
    """An SGD step under ``compile_step`` beside eager torch, its grads zeroed in place at
    its end or (``zero_first``) set to None before its backward: after every call, each
    loss, parameter and grad as eager's. Returns the metrics."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    eager = copy.deepcopy(model)
    model = model.to(DEV)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (eager, model)]

    def make_step(m, o):
        def step(x, y):
            if zero_first:
                o.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            o.step()
            if not zero_first:
                o.zero_grad(set_to_none=False)   # (the grads stay, zeroed)
            return loss
        return step
    lazy_step = lr.compile_step(make_step(model, opts[1]), model, opts[1])
    eager_step = make_step(eager, opts[0])
    lr.reset_metrics()
    g = torch.Generator().manual_seed(2)
    for _ in range(7):
        x = torch.randn(5, 6, generator=g, dtype=torch.float64)
        y = torch.randn(5, 3, generator=g, dtype=torch.float64)
        assert lazy_step(x, y).item() == pytest.approx(eager_step(x, y).item(), rel=1e-12)
        for a, b in zip(eager.parameters(), model.parameters()):
            assert torch.allclose(a, b.cpu(), rtol=1e-12, atol=1e-12)
            assert torch.allclose(a.grad, b.grad.cpu(), rtol=1e-12, atol=1e-12)
    return lr.metrics()


def test_a_step_zeroing_grads_in_place_is_replayed_with_the_grads_right():
    """``zero_grad(set_to_none=False)`` keeps the grads across calls, and autograd's grads
    are views of whole storages (a transpose of a transpose, a reshape of a [1, n] sum):
    state a replay could not hold, so the step was refused. Such a grad is made a base
    tensor in place at the call's start (no other tensor shares its storage); the step
    replays, with the grads as eager torch's after every call."""
    m = _grads_kept_or_made(zero_first=False)
    assert m["step_replays"] >= 3, m["replay_misses"]


def test_a_step_zeroing_grads_first_is_replayed_with_the_grads_right():
    """``zero_grad()`` before ``backward()`` (the tutorials' order): the step gives every
    parameter a new grad, which a replay sets again from the value it computed (the step
    was refused: a replay did not make them); the grads as eager's after every call."""
    m = _grads_kept_or_made(zero_first=True)
    assert m["step_replays"] >= 3, m["replay_misses"]


def test_two_optimizers_in_one_step():
    """``compile_step(fn, models, [opt_a, opt_b])``: a GAN-like step with an optimizer
    per part, replayed as one, as eager torch."""
    torch.manual_seed(0)
    parts = nn.ModuleList([nn.Linear(4, 6), nn.Linear(6, 1)]).double()
    eager = copy.deepcopy(parts)
    parts = parts.to(DEV)

    def make(ps):
        return [torch.optim.Adam(ps[0].parameters(), lr=1e-2),
                torch.optim.SGD(ps[1].parameters(), lr=0.05, momentum=0.5)]
    lazy_opts, eager_opts = make(parts), make(eager)
    for o in lazy_opts:
        lr.compile_optimizer(o)

    def make_step(ps, opts):
        def step(z, real):   # (each zero_grad before its backward, as GAN scripts do)
            fake = ps[0](z)
            d_loss = (ps[1](real) - 1).square().mean() + ps[1](fake.detach()).square().mean()
            opts[1].zero_grad()
            d_loss.backward()
            opts[1].step()
            g_loss = (ps[1](fake) - 1).square().mean()
            opts[0].zero_grad()
            g_loss.backward()   # (the discriminator's grads too: kept until its next step)
            opts[0].step()
            return d_loss.detach(), g_loss.detach()
        return step
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)   # (Adam made capturable: its step count)
    try:
        lazy_step = lr.compile_step(make_step(parts, lazy_opts), parts, lazy_opts)
        eager_step = make_step(eager, eager_opts)
        lr.reset_metrics()
        g = torch.Generator().manual_seed(4)
        for _ in range(7):
            z = torch.randn(5, 4, generator=g, dtype=torch.float64)
            real = torch.randn(5, 6, generator=g, dtype=torch.float64)
            for a, b in zip(lazy_step(z, real), eager_step(z, real)):
                assert a.item() == pytest.approx(b.item(), rel=1e-12)
    finally:
        torch.set_default_dtype(prev)
    for a, b in zip(eager.parameters(), parts.parameters()):
        assert torch.allclose(a, b.cpu(), rtol=1e-12, atol=1e-12)
        assert torch.allclose(a.grad, b.grad.cpu(), rtol=1e-12, atol=1e-12)
    assert lr.metrics()["step_replays"] >= 3, lr.metrics()["replay_misses"]


@pytest.mark.parametrize("keep", ["grad", "view"])
def test_a_step_keeping_a_grad_it_made_elsewhere_is_not_replayed(keep):
    """A replay gives the parameter a new grad; one the step also put in a list (or a
    view of it) would not be there: refused, and the list holds the grads as traced."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []

    def step(x):
        opt.zero_grad()
        model(x).square().sum().backward()
        g = model.weight.grad
        kept.append(g if keep == "grad" else g.view(-1))
        opt.step()
    step = lr.compile_step(step, model, opt)
    lr.reset_metrics()
    for _ in range(5):
        step(torch.randn(4, 3))
        assert torch.equal(kept[-1].cpu().view(2, 3), model.weight.grad.cpu())
    m = lr.metrics()
    assert m["step_replays"] == 0
    # (the view: refused as kept, or, at the next call, as a grad not its storage's own)
    assert any("keeps a" in k or "not a lazy base" in k for k in m["replay_misses"]), \
        m["replay_misses"]
