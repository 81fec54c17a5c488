"""Replay (``lazy_runtime/replay.py``): a call with a signature seen before reuses its
recorded forward and backward graphs without running Python. Checked against the same
run traced op by op (random streams included, so results are bit for bit equal) and
against eager torch; and every guard: a changed attribute, mode or shape re-traces, and
a forward that cannot be replayed is traced every time, with the reason counted."""

import copy
import random
import types

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from lazy_runtime.training import train_steps
from conftest import DEV, assert_same, load_example


def train_losses(model, opt, batches, loss_fn):
    losses = []
    for x, y in batches:
        loss = loss_fn(model(x.to(DEV)), y.to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        lr.mark_step()
        losses.append(loss.item())
    return losses


@pytest.fixture(scope="module")
def gpt():
    return load_example("gpt")


def test_gpt_training_replayed_equals_traced_bit_for_bit(gpt):
    batches = [gpt.make_batch(i) for i in range(5)]
    runs = {}
    for replay in (False, True):
        torch.manual_seed(0)
        model = gpt.make_model(dropout=0.1).to(DEV)          # dropout: the random stream
        if replay:
            model = lr.compile(model, replay=True)
        opt = gpt.make_optimizer(model)
        lr.reset_metrics()
        losses = train_losses(model, opt, batches, gpt.loss_fn)
        runs[replay] = (losses, lr.metrics(), [p.cpu() for p in model.parameters()])
    (traced, mt, pt), (replayed, mr, pr) = runs[False], runs[True]
    assert replayed == traced
    for a, b in zip(pr, pt):
        assert torch.equal(a, b)
    assert mr["replays"] == 4 and mr["replay_misses"] == {}
    # the optimizer and the loss are still traced; forward and backward are not
    assert mr["traced_ops"] < 0.6 * mt["traced_ops"], (mr["traced_ops"], mt["traced_ops"])
    assert mr["last_graph_ops"] < 0.6 * mt["last_graph_ops"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm"])
def test_example_training_replayed_equals_traced(name):
    ex = load_example(name)
    batches = [ex.make_batch(i) for i in range(3)]
    runs = {}
    for replay in (False, True):
        # both runs from one state: automatic dynamic learns families by graph structure,
        # and one another test's graphs taught would pad one run and not the other
        lr.clear_cache()
        torch.manual_seed(0)
        model = ex.make_model().to(DEV)
        if replay:
            model = lr.compile(model, replay=True)
        opt = ex.make_optimizer(model)
        lr.reset_metrics()
        runs[replay] = (train_losses(model, opt, batches, ex.loss_fn), lr.metrics(),
                        [t.cpu() for t in model.state_dict().values()])
    assert runs[True][0] == runs[False][0]
    for a, b in zip(runs[True][2], runs[False][2]):       # parameters and buffers
        assert torch.equal(a, b)
    assert runs[True][1]["replays"] == 2, runs[True][1]["replay_misses"]


def test_gpt_training_replayed_matches_eager(gpt):
    torch.manual_seed(0)
    eager = gpt.make_model(dropout=0.0)
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    opt_e, opt_l = gpt.make_optimizer(eager), gpt.make_optimizer(lazy)
    batches = [gpt.make_batch(i) for i in range(4)]
    lr.reset_metrics()
    want = train_steps(eager, opt_e, batches.__getitem__, gpt.loss_fn, len(batches))
    got = train_losses(lazy, opt_l, batches, gpt.loss_fn)
    assert got == pytest.approx(want, rel=1e-4)
    assert lr.metrics()["replays"] == 3
    # Adam divides by sqrt(v): float32 rounding in near-zero grads moves a weight by up to
    # one step (lr = 3e-3), with or without replay (traced == replayed exactly, above)
    for a, b in zip(lazy.parameters(), eager.parameters()):
        assert_same(a, b, rtol=1e-3, atol=3e-3)


class Net(nn.Module):
    """BatchNorm (buffers written in place), a plain flag read by forward, two outputs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 3)
        self.use_relu = True

    def forward(self, x, scale=1.0):
        h = self.bn(self.fc(x))
        h = F.relu(h) if self.use_relu else torch.tanh(h)
        return self.head(h) * scale, h.sum(1)


def test_buffers_flags_modes_and_input_grads():
    torch.manual_seed(1)
    eager = Net()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lr.reset_metrics()
    xs = [torch.randn(5, 6) for _ in range(6)]
    # (use_relu, training, scale): each change is a new signature; repeats replay
    settings = [(True, True, 1.0), (True, True, 1.0), (False, True, 1.0), (False, True, 1.0),
                (False, False, 2.0), (False, False, 2.0)]
    for x, (flag, training, scale) in zip(xs, settings):
        for m in (eager, lazy):
            m.use_relu = flag
            m.train(training)
        xe = x.clone().requires_grad_()
        xl = x.to(DEV).requires_grad_()
        ye, se = eager(xe, scale=scale)
        yl, sl = lazy(xl, scale=scale)
        (ye.pow(2).mean() + se.mean()).backward()
        (yl.pow(2).mean() + sl.mean()).backward()
        assert_same((yl, sl), (ye, se), rtol=1e-4, atol=1e-5)
        assert_same(xl.grad, xe.grad, rtol=1e-4, atol=1e-5)
        for (name, a), b in zip(lazy.named_parameters(), eager.parameters()):
            assert_same(a.grad, b.grad, rtol=1e-4, atol=1e-5, what=name)
        assert_same(lazy.bn.running_mean, eager.bn.running_mean, rtol=1e-5, atol=1e-6)
        assert_same(lazy.bn.num_batches_tracked, eager.bn.num_batches_tracked)
        lr.mark_step()
    assert lr.metrics()["replays"] == 3


class Weighted(nn.Module):
    """Reads attributes that are no plain numbers: a tuple, a list, a numpy number."""

    def __init__(self):
        super().__init__()
        self.weights = (1.0, 2.0)
        self.offsets = [1.0, [0.5]]
        self.scale = np.float32(1.0)
        self.power = 2
        self.fn = torch.tanh

    def forward(self, x):
        return (x * self.weights[1] + self.offsets[0] + self.offsets[1][0]) * \
            float(self.scale) + self.fn(x) ** self.power


def test_tuple_list_and_numpy_attributes_are_part_of_the_signature():
    """A tuple or a list attribute (changed in place too, nested as well) and a numpy
    number are read by value, a function by identity; an int attribute that becomes a
    float is a new signature (they were not part of it: a replay gave the first value's
    result)."""
    model = lr.compile(Weighted(), replay=True)
    eager = Weighted()
    x = torch.randn(4)
    changes = [lambda m: None, lambda m: setattr(m, "weights", (1.0, 5.0)),
               lambda m: m.offsets.__setitem__(0, 10.0),
               lambda m: m.offsets[1].__setitem__(0, -3.0),
               lambda m: setattr(m, "scale", np.float32(0.5)),
               lambda m: setattr(m, "power", 2.0),
               lambda m: setattr(m, "fn", torch.sigmoid), lambda m: None]
    lr.reset_metrics()
    with torch.no_grad():
        for change in changes:
            change(model)
            change(eager)
            for _ in range(2):
                assert_same(model(x.to(DEV)), eager(x), rtol=1e-6, atol=1e-6)
    m = lr.metrics()
    assert m["replays"] == len(changes) + 1 and m["replay_misses"] == {}, m


class Settings:
    def __init__(self):
        self.scale = 2.0
        self.extra = False
        self.table = {"shift": 1.0}
        self.inner = types.SimpleNamespace(power=2)


class Configured(nn.Module):
    """Reads a config object shared by its submodules (as transformers' models do)."""

    def __init__(self, cfg=None):
        super().__init__()
        self.config = cfg or Settings()
        self.lin = nn.Linear(3, 3)
        self.sub = nn.Sequential(nn.Tanh())
        self.sub.config = self.config

    def forward(self, x):
        c = self.config
        y = self.sub(self.lin(x)) * c.scale + c.table["shift"]
        y = y ** c.inner.power
        return (y, y + 1) if self.sub.config.extra else y


class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.tensor([1.0, 2.0, 3.0])   # a CPU tensor, not a buffer

    def forward(self, x):
        return x * self.table.to(x.device)


def test_a_cpu_tensor_attribute_changed_in_place_is_a_new_signature():
    """Read into the graph as a constant of the template: its version counter is part of
    the signature (a replay kept the old values)."""
    model = lr.compile(Table(), replay=True)
    x = torch.ones(3)
    lr.reset_metrics()
    with torch.no_grad():
        for value in (1.0, 1.0, 10.0, 10.0):
            model.table[0] = value
            assert model(x.to(DEV)).cpu().tolist() == [value, 2.0, 3.0]
    m = lr.metrics()
    # (each write bumps the version: a call after a write is a new signature)
    assert m["replays"] == 0 and m["replay_misses"] == {}, m
    with torch.no_grad():
        model(x.to(DEV))
    assert lr.metrics()["replays"] == 1


class Logging(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(len(self.seen))
        return x * 2


def test_a_forward_that_appends_to_a_list_attribute_is_traced():
    """The list is read by value: its change inside the call refuses the capture (a
    replay would not append, as the Python would)."""
    model = lr.compile(Logging(), replay=True)
    lr.reset_metrics()
    with torch.no_grad():
        for _ in range(3):
            model(torch.ones(2).to(DEV))
    assert model.seen == [0, 1, 2]
    m = lr.metrics()
    assert m["replays"] == 0, m
    assert m["replay_misses"] == {"changes a module attribute or optimizer state": 3}, m


class CoinFlip(nn.Module):
    def __init__(self, draw):
        super().__init__()
        self.draw = draw

    def forward(self, x):
        return x.flip(-1) if self.draw() < 0.5 else x * 1


@pytest.mark.parametrize("draw, name", [
    (random.random, "Python's random module"),
    (np.random.random, "numpy's random generator"),
    (lambda: torch.rand(()).item(), "torch's CPU generator")], ids=["python", "numpy", "torch"])
def test_a_call_that_draws_on_the_host_is_traced(draw, name):
    """A branch on a number drawn on the host (augmentation, layer drop) would be baked
    into a replay: a forward, or a whole step, that moves a host generator is traced."""
    model = lr.compile(CoinFlip(draw), replay=True)
    step = lr.compile_step(lambda x: CoinFlip(draw)(x))
    x = torch.arange(4.0)
    for call in (lambda: model(x.to(DEV)), lambda: step(x)):
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        lr.reset_metrics()
        with torch.no_grad():
            flips = sum(bool(torch.equal(call().cpu(), x.flip(-1))) for _ in range(16))
        assert 0 < flips < 16
        m = lr.metrics()
        assert m["replays"] == m["step_replays"] == 0, m
        assert any(name in r for r in m["replay_misses"]), m["replay_misses"]


def test_a_config_object_attributes_are_part_of_the_signature():
    """An object a module holds (a config) is read by value, nested ones and dicts too,
    changed in place or not: a replay gave the first value's result, and its structure."""
    torch.manual_seed(0)
    eager = Configured()
    model = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    x = torch.randn(2, 3)
    changes = [lambda c: None, lambda c: setattr(c, "scale", 10.0),
               lambda c: c.table.__setitem__("shift", -2.0),
               lambda c: setattr(c.inner, "power", 3), lambda c: setattr(c, "extra", True)]
    lr.reset_metrics()
    with torch.no_grad():
        for change in changes:
            change(model.config)
            change(eager.config)
            for _ in range(2):
                assert_same(model(x.to(DEV)), eager(x), rtol=1e-5, atol=1e-6)
    m = lr.metrics()
    assert m["replays"] == len(changes) and m["replay_misses"] == {}, m


class Ones(nn.Module):
    def forward(self, x):
        return x + torch.ones(3, device=x.device) * 0.1


def test_the_default_dtype_is_part_of_the_signature():
    """A factory without a dtype makes the default one: a forward (and a whole step)
    captured under float32 replayed its float32 constant under float64."""
    model = lr.compile(Ones(), replay=True)
    step = lr.compile_step(lambda x: Ones()(x))
    x = torch.ones(3, dtype=torch.float64)
    want = {d: x + torch.ones(3, dtype=d) * 0.1 for d in (torch.float32, torch.float64)}
    assert not torch.equal(*want.values())
    lr.reset_metrics()
    try:
        with torch.no_grad():
            for default in (torch.float32, torch.float32, torch.float32, torch.float64,
                            torch.float64, torch.float64):
                torch.set_default_dtype(default)
                assert torch.equal(model(x.to(DEV)).cpu(), want[default])
                assert torch.equal(step(x).cpu(), want[default])
    finally:
        torch.set_default_dtype(torch.float32)
    m = lr.metrics()
    assert m["replays"] == 4 and m["step_replays"] == 2, m["replay_misses"]


def test_no_grad_calls_replay_the_forward_only(gpt):
    torch.manual_seed(0)
    eager = gpt.make_model(dropout=0.0).eval()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lr.reset_metrics()
    with torch.no_grad():
        for i in range(3):
            x, _ = gpt.make_batch(i, batch=3, length=7)
            assert_same(lazy(x.to(DEV)), eager(x), rtol=1e-4, atol=1e-5)
    m = lr.metrics()
    assert m["replays"] == 2 and m["traced_ops"] < 200


def test_replay_with_padded_inputs_inlines_and_shares_the_bucket_executable(gpt):
    import shapeinfer
    torch.manual_seed(0)
    eager = gpt.GPT(block=32, dropout=0.0)
    plan = shapeinfer.analyze(eager, args=(torch.randint(0, 64, (2, 12)),),
                              dims={"idx": ("B", "T")})
    assert plan.to_json()["control_flow"]["shape_only"] is True
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), shapes=plan)   # replay from the plan
    opt_e, opt_l = gpt.make_optimizer(eager), lr.compile_optimizer(gpt.make_optimizer(lazy))
    lr.mark_step()
    lr.reset_metrics()
    for T in (9, 9, 13, 9, 11):                                     # one bucket: T=16
        x, y = gpt.make_batch(T, batch=2, length=T)
        le = gpt.loss_fn(eager(x), y)
        le.backward()
        opt_e.step()
        opt_e.zero_grad()
        ll = gpt.loss_fn(lazy(x.to(DEV)), y.to(DEV))
        ll.backward()
        opt_l.step()
        opt_l.zero_grad()
        lr.mark_step()
        assert ll.item() == pytest.approx(le.item(), rel=1e-4)
    m = lr.metrics()
    # forward: the repeats of 9; optimizer: steps 3-5; padded graphs inline both, so
    # they share the traced steps' executable
    assert m["replays"] == 2 + 3 and m["exact_compiles"] == {}, m["replay_misses"]
    assert m["padded_executions"] == 5 and m["compiles"] <= 3, m["recompile_reasons"]


class Unreplayable(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.what = what
        self.calls = 0
        self.outside = None

    def forward(self, x):
        y = self.fc(x)
        if self.what == "item":
            return y * float(y.sum().item() > 0)
        if self.what == "closure":
            return y + self.outside
        if self.what == "counter":
            self.calls += 1
            return y
        return x                       # "identity": returns its argument


@pytest.mark.parametrize("what,reason", [
    ("item", "synchronizes"), ("counter", "changes a module attribute"),
    ("identity", "returns (a view of) an argument")])
def test_forwards_that_cannot_be_replayed_are_traced_with_a_reason(what, reason):
    torch.manual_seed(2)
    eager = Unreplayable(what)
    eager.outside = torch.randn(4)
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lazy.outside = eager.outside.to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    for i in range(3):
        x = torch.randn(3, 4)
        with torch.no_grad():
            assert_same(lazy(x.to(DEV)), eager(x), rtol=1e-5, atol=1e-6)
        lr.mark_step()
    m = lr.metrics()
    assert m["replays"] == 0, m
    assert any(reason in r for r in m["replay_misses"]), m["replay_misses"]


@pytest.mark.parametrize("grad", [False, True])
def test_a_tensor_from_before_the_call_is_read_as_traced_while_its_storage_holds_it(grad):
    """A tensor attribute that is no parameter or buffer (made before the call, as an lru
    cache's table): replayed; written in place (a view made before still holding the old
    value), the next call is captured again and reads the new values; forward and
    backward against eager."""
    torch.manual_seed(2)
    eager = Unreplayable("closure")
    eager.outside = torch.randn(4)
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lazy.outside = eager.outside.to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    held = []
    for i in range(9):
        if i == 4:
            held[:] = [lazy.outside[:2], lazy.outside[:2] * 1.0]   # (the old leaf held)
            with torch.no_grad():
                eager.outside.mul_(3.0)
                lazy.outside.mul_(3.0)
            lr.mark_step()
        x = torch.randn(3, 4)
        with torch.set_grad_enabled(grad):
            want, got = eager(x), lazy(x.to(DEV))
            if grad:
                want.square().sum().backward()
                got.square().sum().backward()
        lr.mark_step()
        assert_same(got, want, rtol=1e-5, atol=1e-6)
        if grad:
            assert_same(lazy.fc.weight.grad, eager.fc.weight.grad, rtol=1e-5, atol=1e-6)
    m = lr.metrics()
    assert m["replays"] == 7, m   # (calls 2-4 and 6-9: captured again after the write)
    assert any("written in place or freed" in r for r in m["replay_misses"]), m


_TABLES = []


class PicksATable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, k: int):
        return self.fc(x) + _TABLES[k]


def test_a_tensor_from_before_the_call_picked_by_a_followed_number_is_not_predicted():
    """``tables[k]`` with ``k`` an int that changes (followed without autograd): a replay at
    another ``k`` would read the traced table, so none is predicted; each value right."""
    torch.manual_seed(3)
    eager = PicksATable()
    tables = [torch.full((4,), float(k)) for k in range(4)]
    on_device = [t.to(DEV) for t in tables]
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lr.mark_step()
    lr.reset_metrics()
    with torch.no_grad():
        for k in [0, 1, 2, 3, 1, 2, 3, 0, 2]:
            x = torch.randn(3, 4)
            _TABLES[:] = tables
            want = eager(x, k)
            _TABLES[:] = on_device
            got = lazy(x.to(DEV), k)
            lr.mark_step()
            assert_same(got, want, rtol=1e-5, atol=1e-6)
    _TABLES.clear()
    m = lr.metrics()
    assert any("tensor from before the call" in r for r in m["replay_misses"]), m


def test_a_backward_that_never_comes_stops_the_captures():
    torch.manual_seed(3)
    eager = Net()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    lr.reset_metrics()
    for _ in range(5):
        x = torch.randn(4, 6)
        assert_same(lazy(x.to(DEV))[0], eager(x)[0], rtol=1e-4, atol=1e-5)  # grad on, unused
        lr.mark_step()
    m = lr.metrics()
    assert m["replays"] == 0 and "its backward was never traced" in m["replay_misses"]


def test_compile_replays_only_when_the_plan_says_shape_only(gpt):
    model = gpt.make_model(dropout=0.0).to(DEV)
    plan = {"inputs": {"idx": ["B", "T"]}, "control_flow": {"shape_only": False}}
    assert lr.compile(model, shapes=plan)._lr_replayer is None
    plan["control_flow"]["shape_only"] = True
    assert lr.compile(gpt.make_model(dropout=0.0).to(DEV), shapes=plan)._lr_replayer is not None
    assert lr.compile(gpt.make_model(dropout=0.0).to(DEV), shapes=plan,
                      replay=False)._lr_replayer is None


def test_hugging_face_model_training_replays_bit_for_bit():
    """Third-party code: keyword arguments, a ModelOutput result, dropout, the loss
    computed inside forward."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4,
                                        hidden_dim=64, dropout=0.1, attention_dropout=0.1)
    runs = {}
    for replay in (False, True):
        torch.manual_seed(0)
        model = transformers.DistilBertForSequenceClassification(cfg).to(DEV)
        if replay:
            model = lr.compile(model, replay=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        lr.reset_metrics()
        losses = []
        for i in range(3):
            g = torch.Generator().manual_seed(i)
            ids, y = torch.randint(0, 100, (2, 9), generator=g), torch.randint(0, 2, (2,), generator=g)
            out = model(input_ids=ids.to(DEV), labels=y.to(DEV))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            lr.mark_step()
            losses.append(out.loss.item())
        runs[replay] = (losses, lr.metrics())
    assert runs[True][0] == runs[False][0]
    assert runs[True][1]["replays"] == 2 and runs[True][1]["replay_misses"] == {}


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4),
    # (writes the grads in place: autograd's grads of a Linear are views of its results)
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-2),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01)],
    ids=["sgd", "sgd-nesterov", "adam", "adamw"])
def test_optimizer_steps_replay_bit_for_bit(make_opt):
    ex = load_example("mlp")
    batches = [ex.make_batch(i) for i in range(5)]
    runs = {}
    for replay in (False, True):
        torch.manual_seed(0)
        model = ex.make_model().to(DEV)
        opt = make_opt(model.parameters())
        for group in opt.param_groups:     # the traced run computes the same way
            if "capturable" in group:
                group["capturable"] = True
            if group.get("foreach", False) is None:
                group["foreach"] = True
        if replay:
            model, opt = lr.compile(model, replay=True), lr.compile_optimizer(opt)
        lr.reset_metrics()
        runs[replay] = (train_losses(model, opt, batches, ex.loss_fn), lr.metrics(),
                        [p.cpu() for p in model.parameters()])
    assert runs[True][0] == runs[False][0]
    for a, b in zip(runs[True][2], runs[False][2]):
        assert torch.equal(a, b)
    # forward: steps 2-5; optimizer: steps 3-5 (step 1 creates the state, step 2 captures)
    assert runs[True][1]["replays"] == 4 + 3, runs[True][1]["replay_misses"]


def test_an_optimizer_counting_steps_on_the_cpu_is_traced_with_the_reason():
    ex = load_example("mlp")
    model = ex.make_model().to(DEV)
    opt = lr.compile_optimizer(torch.optim.Adam(model.parameters(), lr=1e-2), capturable=False)
    lr.reset_metrics()
    train_losses(model, opt, [ex.make_batch(i) for i in range(3)], ex.loss_fn)
    m = lr.metrics()
    assert m["replays"] == 0, m
    assert any("capturable=True" in r for r in m["replay_misses"]), m["replay_misses"]


class TwoBiases(nn.Module):
    """Two biases added the same way: their grads are one value (as an LSTM's are)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3, bias=False)
        self.b1 = nn.Parameter(torch.randn(3))
        self.b2 = nn.Parameter(torch.randn(3))

    def forward(self, x, y=None):
        h = self.fc(x) + self.b1 + self.b2
        return h if y is None else h * self.fc(y)


def test_a_value_that_enters_twice_replays_while_the_places_still_share_it():
    torch.manual_seed(4)
    eager = TwoBiases()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    opt_e = torch.optim.Adam(eager.parameters(), lr=1e-2)
    opt_l = lr.compile_optimizer(torch.optim.Adam(lazy.parameters(), lr=1e-2))
    batches = [(torch.randn(5, 4), torch.randn(5, 3)) for _ in range(5)]
    lr.reset_metrics()
    want = train_steps(eager, opt_e, batches.__getitem__, F.mse_loss, len(batches))
    got = train_losses(lazy, opt_l, batches, F.mse_loss)
    assert got == pytest.approx(want, rel=1e-5)
    # the optimizer's step reads b1.grad and b2.grad, one value: replayed from step 3 on
    assert lr.metrics()["replays"] == 4 + 3, lr.metrics()["replay_misses"]
    # captured with one value in both places (two tensors a barrier left sharing it),
    # called with two values: traced, not replayed
    lr.reset_metrics()
    x, other = torch.randn(2, 4), torch.randn(2, 4)
    w, b1, b2 = (t.detach().cpu() for t in (lazy.fc.weight, lazy.b1, lazy.b2))
    with torch.no_grad():
        xl = x.to(DEV)
        xl2 = torch.zeros(2, 4, device=DEV).copy_(xl)
        lr.mark_step()
        lazy(xl, xl2)   # captured: one value in both places
        assert_same(lazy(xl, xl2), (x @ w.T + b1 + b2) * (x @ w.T), rtol=1e-5, atol=1e-6)
        assert_same(lazy(xl, other.to(DEV)), (x @ w.T + b1 + b2) * (other @ w.T), rtol=1e-5,
                    atol=1e-6)
    m = lr.metrics()
    assert m["replays"] == 1, m["replay_misses"]
    assert m["replay_misses"].get("arguments no longer share values as when captured") == 1
    # one tensor in both places is a signature of its own (which places hold one tensor
    # is part of it): captured apart, then replayed
    lr.reset_metrics()
    with torch.no_grad():
        for _ in range(2):
            assert_same(lazy(xl, xl), (x @ w.T + b1 + b2) * (x @ w.T), rtol=1e-5, atol=1e-6)
    m = lr.metrics()
    assert m["replays"] == 1 and m["replay_misses"] == {}, m["replay_misses"]


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    lambda ps: torch.optim.Adamax(ps, lr=1e-2),
    lambda ps: torch.optim.NAdam(ps, lr=1e-2),
    lambda ps: torch.optim.RAdam(ps, lr=1e-2),
    lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True),
    lambda ps: torch.optim.Adagrad(ps, lr=0.1),
    lambda ps: torch.optim.Adadelta(ps, lr=1.0),
    lambda ps: torch.optim.ASGD(ps, lr=0.05, t0=1),
    lambda ps: torch.optim.Rprop(ps, lr=0.01)],
    ids=["sgd-nesterov", "adam-amsgrad", "adamax", "nadam", "radam", "rmsprop", "adagrad",
         "adadelta", "asgd", "rprop"])
def test_compiled_optimizers_run_their_foreach_path_and_match_eager(make_opt):
    """compile_optimizer makes torch take each optimizer's ``_foreach_*`` path (and the
    capturable one where there is one); the parameters follow eager torch's per-tensor
    loop on the CPU, with clip_grad_norm_ before each step."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2))
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e = make_opt(eager.parameters())
    opt_l = lr.compile_optimizer(make_opt(lazy.parameters()))
    assert all(g["foreach"] for g in opt_l.param_groups)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        x = torch.randn(6, 5, generator=g)
        for model, opt, dev in ((eager, opt_e, None), (lazy, opt_l, DEV)):
            model(x if dev is None else x.to(dev)).square().mean().backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            opt.zero_grad()
        lr.mark_step()
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        assert_same(pl, pe.detach(), rtol=1e-5, atol=1e-6, what="parameter")


def test_a_scalar_made_before_a_replayed_call_is_not_taken_for_its_own():
    """Two ``zeros(())`` made in one trace are one value, but not across the start of a
    capture: the forward's own constant must be made inside it, or the capture would
    read a tensor from outside (and never replay)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) + torch.zeros((), device=x.device)

    torch.manual_seed(0)
    model = lr.compile(M().to(DEV), replay=True)
    lr.reset_metrics()
    for _ in range(4):
        z = torch.zeros((), device=DEV)   # the same recipe, just before the call
        (model(torch.randn(2, 3).to(DEV)) + z).sum().backward()
        lr.mark_step()
    m = lr.metrics()
    assert m["replays"] == 3 and m["replay_misses"] == {}, m["replay_misses"]


# ---- an argument object: a key-value cache written in place -----------------------------


class KVLayer:
    def __init__(self, batch, heads, length, dim, device):
        self.keys = torch.zeros(batch, heads, length, dim, device=device)
        self.values = torch.zeros(batch, heads, length, dim, device=device)
        self.length = torch.zeros((), dtype=torch.long, device=device)


class KVCache:
    """A cache as transformers' ``StaticCache`` is: plain Python objects holding tensors
    the forward writes in place at a position tensor."""

    def __init__(self, batch=3, heads=2, length=8, dim=4, device=None, layers=2):
        self.layers = [KVLayer(batch, heads, length, dim, device) for _ in range(layers)]
        self.max_len = length
        self.scale = 1.0

    def tensors(self):
        return [t for l in self.layers for t in (l.keys, l.values, l.length)]


class CachedAttention(nn.Module):
    """Two attention layers over one new position a call; ``how`` picks a variant the
    replay cannot take."""

    def __init__(self, how="in place", d=8, heads=2):
        super().__init__()
        self.how, self.heads = how, heads
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(2))

    def forward(self, x, cache):
        b, _, d = x.shape
        h = self.heads
        for qkv, layer in zip(self.qkv, cache.layers):
            q, k, v = qkv(x).view(b, 1, 3, h, d // h).permute(2, 0, 3, 1, 4)
            pos = torch.arange(1, device=x.device) + layer.length
            layer.length.add_(1)
            if self.how == "rebinds":
                layer.keys = layer.keys.index_copy(2, pos, k)
            else:
                layer.keys.index_copy_(2, pos, k)
            layer.values.index_copy_(2, pos, v)
            if self.how == "counts":
                cache.calls = getattr(cache, "calls", 0) + 1
            seen = torch.arange(cache.max_len, device=x.device) < layer.length
            att = (q @ layer.keys.transpose(-1, -2) * cache.scale).masked_fill(~seen, -1e9)
            x = x + (att.softmax(-1) @ layer.values).transpose(1, 2).reshape(b, 1, d)
        return x, cache


def decode(model, cache, xs, device, between=None):
    outs = []
    for i, x in enumerate(xs):
        if between is not None:
            between(i, cache)
        with torch.no_grad():
            y, back = model(x.to(device) if device else x, cache)
        assert back is cache
        outs.append(y)
        if device:
            lr.mark_step()
    return outs


def test_a_cache_object_argument_is_read_and_written_in_place_by_a_replay():
    torch.manual_seed(4)
    eager = CachedAttention()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    xs = [torch.randn(3, 1, 8) for _ in range(6)]
    want_cache = KVCache()
    want = decode(eager, want_cache, xs, None)
    lr.reset_metrics()
    cache = KVCache(device=DEV)
    got = decode(lazy, cache, xs, DEV)
    m = lr.metrics()
    assert m["replays"] == 5 and m["replay_misses"] == {}, m["replay_misses"]
    assert_same(got, want, rtol=1e-5, atol=1e-6)
    assert_same(cache.tensors(), want_cache.tensors(), rtol=1e-5, atol=1e-6)
    # a new cache of the same structure replays from its first call
    lr.reset_metrics()
    again = decode(lazy, KVCache(device=DEV), xs[:3], DEV)
    assert lr.metrics()["replays"] == 3
    assert_same(again, want[:3], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how,reason", [
    ("rebinds", "changes an attribute of an argument object"),
    ("counts", "changes an attribute of an argument object"),
    ("cpu tensor", "the argument's KVCache.layers[1].length is a tensor not on the lazy device"),
    ("function", "the argument's KVCache.hook is a function"),
])
def test_a_cache_object_the_replay_cannot_see_through_is_traced_with_a_reason(how, reason):
    torch.manual_seed(5)
    eager = CachedAttention(how)
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    xs = [torch.randn(3, 1, 8) for _ in range(4)]
    want = decode(eager, KVCache(), xs, None)
    cache = KVCache(device=DEV)
    if how == "cpu tensor":
        cache.layers[1].length = torch.zeros((), dtype=torch.long)
    if how == "function":
        cache.hook = lambda t: t
    lr.reset_metrics()
    got = decode(lazy, cache, xs, DEV)
    m = lr.metrics()
    assert m["replays"] == 0 and any(reason in r for r in m["replay_misses"]), m
    assert_same(got, want, rtol=1e-5, atol=1e-6)
    # the report says why, most frequent first
    report = lr.metrics_report()
    assert f"  replay misses   : {sum(m['replay_misses'].values())}" in report
    assert any(line.startswith("    - ") and reason in line for line in report.splitlines())


def test_a_cache_object_changed_between_calls_is_a_new_signature():
    """A plain attribute set between calls (the scale) and tensors that alias differently
    from the traced call (keys and values one tensor) are each traced anew, never
    replayed with the old graph."""
    torch.manual_seed(6)
    eager = CachedAttention()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    xs = [torch.randn(3, 1, 8) for _ in range(8)]

    def between(i, cache):
        if i == 4:
            cache.scale = 0.5
        if i == 6:   # from here on one tensor holds a layer's keys and values
            layer = cache.layers[0]
            layer.values = layer.keys

    want = decode(eager, KVCache(), xs, None, between)
    lr.reset_metrics()
    got = decode(lazy, KVCache(device=DEV), xs, DEV, between)
    assert_same(got, want, rtol=1e-5, atol=1e-6)
    # traced: calls 0, 4 and 6 (new signatures); replayed: 1-3, 5 and 7
    assert lr.metrics()["replays"] == 5, lr.metrics()["replay_misses"]


class Context:
    """An argument object holding a tensor that requires grad."""

    def __init__(self, device=None):
        self.scale = torch.full((4,), 0.5, device=device, requires_grad=True)
        self.shift = torch.zeros(4, device=device)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, ctx):
        return self.fc(x) * ctx.scale + ctx.shift


def test_gradients_reach_the_tensors_of_an_argument_object():
    torch.manual_seed(7)
    eager = Scaled()
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), replay=True)
    ctx_e, ctx_l = Context(), Context(DEV)
    lr.reset_metrics()
    for _ in range(4):
        x = torch.randn(3, 4)
        eager(x, ctx_e).pow(2).sum().backward()
        lazy(x.to(DEV), ctx_l).pow(2).sum().backward()
        lr.mark_step()
    assert lr.metrics()["replays"] == 3, lr.metrics()["replay_misses"]
    assert_same(ctx_l.scale.grad, ctx_e.scale.grad, rtol=1e-5, atol=1e-5)
    assert_same(lazy.fc.weight.grad, eager.fc.weight.grad, rtol=1e-5, atol=1e-5)


class Opaque:
    """An argument whose attributes cannot be read."""

    @property
    def __dict__(self):
        raise RuntimeError("not here")


def test_an_argument_object_that_cannot_be_looked_into_is_a_reason_not_an_error():
    class Scale(nn.Module):
        def forward(self, x, ctx):
            return x * 2

    lazy = lr.compile(Scale(), replay=True)
    lr.reset_metrics()
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert_same(lazy(x.to(DEV), Opaque()), x * 2)
    assert lr.metrics()["replay_misses"] == {
        "an argument of type Opaque could not be looked into (RuntimeError)": 1}


def test_a_module_argument_is_not_replayed():
    lin = nn.Linear(4, 4)

    class Apply(nn.Module):
        def forward(self, x, f):
            return f(x) * 2

    lazy = lr.compile(Apply(), replay=True)
    lazy_lin = copy.deepcopy(lin).to(DEV)
    lr.reset_metrics()
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert_same(lazy(x.to(DEV), lazy_lin), lin(x) * 2)
    assert lr.metrics()["replay_misses"] == {"an argument of type Linear": 1}


class Doubling(nn.Module):
    """Writes its first argument in place; reads the second after the write."""

    def forward(self, x, y=None):
        x.mul_(2)
        return x.sum(0) if y is None else y * 3


def test_an_argument_written_in_place_may_be_a_view_at_a_replay():
    """Captured with a base tensor, replayed with a view of another tensor: the write goes
    through the view into its base (it replaced the whole base with the view's value)."""
    model = lr.compile(Doubling(), replay=True)
    lr.reset_metrics()
    with torch.no_grad():
        for _ in range(2):
            x = torch.ones(3, 4).to(DEV)
            model(x)
            assert_same(x, torch.full((3, 4), 2.0))
        buf = torch.ones(2, 3, 4).to(DEV)
        out = model(buf[1])
        assert_same(out, torch.full((4,), 6.0))
        want = torch.ones(2, 3, 4)
        want[1] *= 2
        assert_same(buf, want)
        # a view written whole replays too (autograd's grads are such views)
        view = torch.ones(4, 3).to(DEV).t()
        for _ in range(2):
            model(view)
        assert_same(view, torch.full((3, 4), 4.0))
    m = lr.metrics()
    assert m["replays"] == 4 and m["replay_misses"] == {}, m


class FirstRowFive(nn.Module):
    def forward(self, v):
        v[0] = 5.0
        return v.sum()


def test_views_written_in_ways_a_template_cannot_hold_are_traced():
    """Captured with two tensors apart, a call with two views of one storage is not
    replayed from it (the write through one changes the other): a signature of its own,
    whose capture is refused, so it is traced, and right. So is a view written in part
    (its new value is its storage's, which the template does not take)."""
    model = lr.compile(Doubling(), replay=True)
    lr.reset_metrics()
    with torch.no_grad():
        for _ in range(2):
            out = model(torch.ones(2, 2).to(DEV), torch.ones(2, 2).to(DEV))
            assert_same(out, torch.full((2, 2), 3.0))
        buf = torch.ones(2, 2).to(DEV)
        for _ in range(2):
            buf.fill_(1)
            out = model(buf[:], buf[:])
            assert_same(out, torch.full((2, 2), 6.0))
    m = lr.metrics()
    assert m["replays"] == 1, m
    assert m["replay_misses"] == {
        "writes into a view whose storage another of its tensors shares": 1}, m
    model = lr.compile(FirstRowFive(), replay=True)
    lr.reset_metrics()
    with torch.no_grad():
        buf = torch.ones(3, 2, 2).to(DEV)
        for i in range(2):
            assert model(buf[i]).item() == 12.0
        want = torch.ones(3, 2, 2)
        want[:2, 0] = 5.0
        assert_same(buf, want)
    assert lr.metrics()["replay_misses"] == {
        "reads the storage of a view argument beyond the view (writes part of it)": 1}


def test_a_forward_branching_on_a_value_it_reads_is_never_replayed():
    """``self.scale.item()`` of a computed buffer needs no barrier, but the branch it
    steers is Python a replay would not run: replayed, the call kept the branch of the
    traces after the buffer changed (a wrong result)."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("scale", torch.tensor(2.0))

        def forward(self, x):
            return self.lin(x) * 2 if self.scale.item() > 1 else self.lin(x)

    torch.manual_seed(0)
    model = lr.compile(Scaled().to(DEV), replay=True)
    x = torch.ones(1, 2, device=DEV)
    lr.reset_metrics()
    with torch.no_grad():
        for _ in range(3):
            model(x)
            lr.mark_step()
        model.scale.fill_(0.5)
        lr.mark_step()
        assert torch.equal(model(x).cpu(), model.lin(x).cpu())
    m = lr.metrics()
    assert m["replays"] == 0
    assert any("reads a value" in k for k in m["replay_misses"]), m["replay_misses"]
