"""Whole-step replay at sizes never traced (``compile_step`` with dynamic dims: its
arguments' padded dims followed, ``step_numbers``). Each check runs the same steps
traced op by op (the oracle for the replay: one executable, the same inputs) and eagerly,
at lengths that vary inside a bucket: a length traced at three others is replayed, a
branch on a size, a number computed from one, a host constant made for one and a size
that only looked constant are each honoured."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, load_example


class Net(nn.Module):
    """A position constant made on the host for T (``arange``), a number computed from
    T (``/ x.shape[1]``) and a result of T rows returned."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 16)
        self.b = nn.Linear(16, 3)

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)
        return self.b(torch.tanh(self.a(x + pos[None, :, None] * 0.01)))


def net_step(model, opt, dev):
    def step(x, y):
        if dev is not None:
            x, y = lr.mark_dynamic(x.to(dev), 1, "T"), y.to(dev)
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, 3), y.reshape(-1)) \
            + out.sum() / x.shape[1] * 1e-3
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss, out.detach() * 1.0
    return step


def run_steps(make_model, make_step, lengths, mode, batch):
    """Losses and returned values of the steps at ``lengths`` (``mode``: "eager",
    "traced" or "whole"), the final parameters, and the whole step's replays at each."""
    torch.manual_seed(0)
    model = make_model()
    dev = None if mode == "eager" else DEV
    if dev is not None:
        model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if dev is not None:
        opt = lr.compile_optimizer(opt)
    step = make_step(model, opt, dev)
    if mode == "whole":
        step = lr.compile_step(step, model, opt)
    lr.clear_cache()
    lr.reset_metrics()
    g = torch.Generator().manual_seed(1)
    out, replayed = [], []
    for T in lengths:
        r0 = lr.metrics()["step_replays_across_sizes"]
        loss, value = step(*batch(g, T))
        out.append((loss.item(), value.cpu()))
        replayed.append(lr.metrics()["step_replays_across_sizes"] - r0)
    return out, [p.detach().cpu() for p in model.parameters()], replayed, lr.metrics()


def net_batch(g, T):
    return torch.randn(4, T, 6, generator=g), torch.randint(0, 3, (4, T), generator=g)


def _as_traced_and_eager(make_model, lengths):
    """``net_step`` on ``make_model`` under ``compile_step``: every loss, returned value
    and final parameter as traced op by op (bit for bit) and as eager torch's. Returns
    the replays across sizes at each length and the metrics, whole and traced."""
    traced, p_traced, _, m_traced = run_steps(make_model, net_step, lengths, "traced",
                                              net_batch)
    whole, p_whole, replayed, m = run_steps(make_model, net_step, lengths, "whole",
                                            net_batch)
    eager, _, _, _ = run_steps(make_model, net_step, lengths, "eager", net_batch)
    for (a, va), (b, vb), (c, vc) in zip(traced, whole, eager):
        assert a == b and torch.equal(va, vb)
        assert abs(b - c) < 1e-5 and torch.allclose(vb, vc, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(p_traced, p_whole))
    return replayed, m, m_traced


def test_a_step_replays_at_lengths_never_traced():
    """T in one bucket (16): after the step is traced at three lengths, each new length
    is replayed: its arguments padded at their own length, the position constant made
    again for it, the number computed from T linked, the result returned at T rows;
    bit for bit what tracing gives. A new bucket replays from its second length."""
    lengths = [9, 9, 9, 10, 11, 12, 13, 14, 15, 16, 9, 5, 6, 7]
    replayed, m, m_traced = _as_traced_and_eager(Net, lengths)
    # 9 is traced three times (the optimizer's first step, then two that agree), 10 and
    # 11 start the family of lengths (12 is its third), 13-16 and 9 are replayed by it;
    # 5 opens bucket 8 (traced), 6 and 7 replay from the family of bucket 16
    assert replayed == [0] * 6 + [1] * 5 + [0, 1, 1], (replayed, m["replay_misses"])
    assert m["compiles"] == m_traced["compiles"] - 1   # (the traced loop's 1st step: 2)
    assert m["exact_compiles"] == {}
    assert "across sizes" in lr.metrics_report()


class Gated(Net):
    """A branch on a value computed on the host (``fold``) from a constant made for T:
    ``(arange(T) < 14).all()``, true up to T = 14."""

    def forward(self, x):
        out = super().forward(x)
        return out if bool((torch.arange(x.shape[1], device=x.device) < 14).all()) else -out


def test_a_value_computed_on_the_host_for_the_length_is_checked_at_each_replay():
    """The step's Python branches on a value computed on the host from a constant made
    for T: a family traced at 10-12 (true) replays 13 and 14, where the constant made
    again gives true too, and traces 15 and 16, where it gives false (the other branch,
    as eager torch takes it)."""
    replayed, m, _ = _as_traced_and_eager(Gated, [9, 9, 9, 10, 11, 12, 15, 13, 16, 14])
    assert replayed == [0] * 7 + [1, 0, 1], (replayed, m["replay_misses"])


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_the_gpt_step_replays_at_lengths_never_traced(dropout):
    """The GPT example, its length dynamic: bit for bit what tracing every step gives,
    with dropout too (its masks drawn for the padded values, the same stream offsets)."""
    ex = load_example("gpt")

    def gpt_step(model, opt, dev):
        def step(x, y):
            x, y = x.to(dev), y.to(dev)
            logits = model(lr.mark_dynamic(x, 1, "T"))
            loss = ex.loss_fn(logits, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss, logits.detach()[:, 0] * 1.0
        return step

    def batch(g, T):
        return ex.make_batch(int(torch.randint(0, 99, (), generator=g)), batch=3, length=T)
    lengths = [9, 9, 9, 12, 13, 10, 11, 14, 15]
    make = lambda: ex.GPT(block=32, dropout=dropout)  # noqa: E731
    traced, p0, _, _ = run_steps(make, gpt_step, lengths, "traced", batch)
    whole, p1, replayed, m = run_steps(make, gpt_step, lengths, "whole", batch)
    assert [(a, v.tolist()) for a, v in traced] == [(a, v.tolist()) for a, v in whole]
    assert all(torch.equal(a, b) for a, b in zip(p0, p1))
    assert sum(replayed) == 3 and replayed[-3:] == [1, 1, 1], m["replay_misses"]
    assert m["exact_compiles"] == {}


class Strided(nn.Module):
    """A strided convolution (its output length H // 8 is a derived symbol), a number
    read from it, and a branch on the input's length."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(2, 3, 8, stride=8)

    def forward(self, x):
        h = self.c(x)
        extra = h.square().mean() if x.size(-1) > 36 else 0.0
        return h.sum() / h.size(-1) + extra


def strided_step(model, opt, dev):
    def step(x, y):
        if dev is not None:
            x = lr.mark_dynamic(x.to(dev), 2, "H")
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss, loss.detach() * 1.0
    return step


def test_a_size_that_only_looked_constant_and_a_branch_are_honoured():
    """H in bucket 64. Traced at 34-36 the read length H // 8 was 4 each time; past the
    branch (H > 36) the family is traced again (37-39); at 40 the read length would be
    5: the family cannot vouch for it (4 as traced, or H // 8?) and traces it; from
    then on H // 8 is linked (41, 47, 48, 60 replay). Every step is eager torch's."""
    lengths = [33, 33, 33, 34, 35, 36, 37, 38, 39, 40, 41, 47, 48, 60]
    batch = lambda g, H: (torch.randn(2, 2, H, generator=g), None)  # noqa: E731
    whole, _, replayed, m = run_steps(Strided, strided_step, lengths, "whole", batch)
    eager, _, _, _ = run_steps(Strided, strided_step, lengths, "eager", batch)
    for (a, _), (b, _) in zip(whole, eager):
        assert abs(a - b) < 1e-5
    assert replayed == [0] * 10 + [1] * 4, (replayed, m["replay_misses"])


class PaddedToEight(nn.Module):
    """Features padded up to a multiple of 8 along T (the amount a function of T, no
    branch on it), a cumulative sum over the padded length."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 4)

    def forward(self, x):
        h = self.a(x)
        return F.pad(h, (0, 0, 0, (8 - h.shape[1] % 8) % 8)).cumsum(1)


def padded_step(model, opt, dev):
    def step(x):
        if dev is not None:
            x = lr.mark_dynamic(x.to(dev), 1, "T")
        out = model(x)
        loss = out.mean() + out[:, 0].sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss, out.sum(1).detach() * 1.0
    return step


def test_a_pads_own_size_is_never_replayed_as_traced():
    """A pad up to a multiple of 8 is a symbol of the pad's own, with no rule: traced at
    57, 58 and 60 its size was 64 each time, 40 at 39. The family must not vouch for 64
    there (before: replayed with the traced 64, its loss far from eager's)."""
    lengths = [45, 52, 57, 58, 60, 39, 41, 59]
    batch = lambda g, T: (torch.randn(2, T, 6, generator=g),)  # noqa: E731
    whole, _, replayed, m = run_steps(PaddedToEight, padded_step, lengths, "whole", batch)
    eager, _, _, _ = run_steps(PaddedToEight, padded_step, lengths, "eager", batch)
    for T, (a, va), (b, vb) in zip(lengths, whole, eager):
        assert abs(a - b) < 1e-4 * max(1.0, abs(b)), (T, a, b, replayed)
        assert torch.allclose(va, vb, rtol=1e-4, atol=1e-3), (T, replayed)
    assert m["exact_compiles"] == {}


def test_arguments_marked_inside_the_step_keep_their_places():
    """CPU arguments (two of one shape, one of another) marked dynamic inside the step:
    each marked leaf is matched to its own argument, also where it was made at the
    address of an argument's old leaf, freed when marked (before: the third argument's
    leaf took the second's place and the second the first's, and a replay padded the
    vector ``a`` as the matrix ``m``: an error, or where the shapes agree, another
    argument's values)."""
    w0 = torch.randn(4, generator=torch.Generator().manual_seed(8))
    w = torch.nn.Parameter(w0.clone())
    opt = torch.optim.SGD([w], lr=0.01)

    def step(a, b, m):
        if w.device == DEV:   # (compile_step has its CPU arguments on the device)
            a, b, m = (lr.mark_dynamic(x.to(DEV), x.dim() - 1, "T") for x in (a, b, m))
        out = {"dot": torch.dot(a, b), "diff": a - 2 * b, "mv": m @ a,
               "addmv": torch.addmv(w, m, b, beta=0.5, alpha=2.0)}
        out["addmv"].sin().sum().backward()
        opt.step()
        opt.zero_grad()
        return {k: v.detach() * 1.0 for k, v in out.items()}

    def args(T):
        g = torch.Generator().manual_seed(T)
        return torch.randn(T, generator=g), torch.randn(T, generator=g), \
            torch.randn(4, T, generator=g)

    lengths = [12, 13, 16, 11, 10, 13, 10, 15, 12]
    eager = [step(*args(T)) for T in lengths]
    w = torch.nn.Parameter(w0.to(DEV))   # (the step's own, on the lazy device)
    opt = torch.optim.SGD([w], lr=0.01)
    whole = lr.compile_step(step, None, opt)
    lr.clear_cache()
    lr.reset_metrics()
    for T, want in zip(lengths, eager):
        got = whole(*args(T))
        for k in want:
            torch.testing.assert_close(got[k].cpu(), want[k], rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{k} at {T}: {m}")
    assert lr.metrics()["step_replays_across_sizes"] > 0


def _seeded(T, *shapes):
    """Random tensors of ``shapes`` (``"T"`` there: the length), seeded by ``T``."""
    g = torch.Generator().manual_seed(T)
    return tuple(torch.randn(*[T if d == "T" else d for d in s], generator=g) for s in shapes)


def _padding_models():
    """(fn, inputs at a length, the dims marked per input, params) of padding rule tests'
    models: every way LM code cuts a padded T, a cat of two dynamic pieces (a prompt and
    an answer), and vector contractions over a padded T."""
    from test_padding_rules import prompt_and_answer, slicing
    g = torch.Generator().manual_seed(0)

    def contract(a, b, m, w):
        return {"dot": torch.dot(a, b), "mv": m @ a, "addmv": torch.addmv(w, m, b)}
    return {
        "slices": (slicing, lambda T: _seeded(T, (3, "T", 5)) + (
            torch.randint(0, 50, (3, T), generator=torch.Generator().manual_seed(T)),),
            [(1, "T"), (1, "T")], [torch.randn(5, 5, generator=g)]),
        "cat": (prompt_and_answer, lambda T: _seeded(T, (2, "T", 4), (2, 5 + T % 4, 4)),
                [(1, "P"), (1, "A")], [torch.randn(4, 4, generator=g)]),
        "contractions": (contract, lambda T: _seeded(T, ("T",), ("T",), (4, "T")),
                         [(0, "T"), (0, "T"), (1, "T")], [torch.randn(4, generator=g)]),
    }


@pytest.mark.parametrize("name", ["slices", "cat", "contractions"])
def test_padding_rule_models_replay_as_eager(name):
    """A step of a padding rule test's model (its outputs, the gradient of their weighted
    sum, SGD on its parameters) under ``compile_step`` at lengths in one bucket, its
    inputs marked dynamic inside the step: every output and the final parameters as
    eager torch's, and some lengths replayed that were never traced."""
    from test_padding_rules import _marked, _weighted_sum
    fn, inputs, dims, params = _padding_models()[name]
    lengths = [12, 13, 16, 11, 10, 13, 10, 15, 9, 14]

    def run(dev):
        ps = [torch.nn.Parameter(p.clone().to(dev or "cpu")) for p in params]
        opt = torch.optim.SGD(ps, lr=1e-3)

        def step(*xs):
            if dev is not None:
                xs = [_marked(x.to(dev), m) for x, m in zip(xs, dims)]
            out = fn(*xs, *ps)
            _weighted_sum(out).backward()
            opt.step()
            opt.zero_grad()
            return {k: v.detach() * 1 for k, v in out.items()}
        if dev is not None:
            step = lr.compile_step(step, None, opt)
            lr.clear_cache()
            lr.reset_metrics()
        outs = [{k: v.cpu() for k, v in step(*inputs(T)).items()} for T in lengths]
        return outs, [p.detach().cpu() for p in ps]

    eager, p_eager = run(None)
    whole, p_whole = run(DEV)
    for T, want, got in zip(lengths, eager, whole):
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-4,
                                       msg=lambda m: f"{k} at {T}: {m}")
    for a, b in zip(p_whole, p_eager):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    m = lr.metrics()
    assert m["step_replays_across_sizes"] > 0, m["replay_misses"]


def test_a_step_whose_length_changes_its_graph_is_traced():
    """A Python loop over the length (``range(T)``: each T another graph) is never
    replayed at a length it was not traced at; each step is right."""
    class Looped(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(6, 3)

        def forward(self, x):
            return sum(self.a(x[:, t]) for t in range(x.shape[1]))

    lengths = [9, 9, 9, 10, 11, 12, 13, 14]
    whole, _, replayed, _ = run_steps(Looped, squared_step(), lengths, "whole", net_batch)
    eager, _, _, _ = run_steps(Looped, squared_step(), lengths, "eager", net_batch)
    assert all(abs(a - b) <= 1e-5 * abs(b) for (a, _), (b, _) in zip(whole, eager))
    assert sum(replayed) == 0


def test_a_copy_of_the_model_keeps_its_own_replays():
    """Two replayers over copies of one model do not share families (a family belongs to
    its step's entry)."""
    torch.manual_seed(0)
    a = Net().to(DEV)
    b = copy.deepcopy(a)
    oa = lr.compile_optimizer(torch.optim.SGD(a.parameters(), lr=0.1))
    ob = lr.compile_optimizer(torch.optim.SGD(b.parameters(), lr=0.1))
    sa = lr.compile_step(net_step(a, oa, DEV), a, oa)
    sb = lr.compile_step(net_step(b, ob, DEV), b, ob)
    g = torch.Generator().manual_seed(1)
    for T in [9, 9, 9, 10, 11, 12, 13]:
        x, y = net_batch(g, T)
        la, _ = sa(x, y)
        lb, _ = sb(x, y)
        assert la.item() == lb.item()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu())


class Branchy(nn.Module):
    """A branch on the length inside a forward the runtime replays by signature."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 3)

    def forward(self, x):
        h = self.a(x)
        return h * 2.0 if x.shape[1] > 12 else h


def squared_step(replayed_forward=False):
    """A step maker: the mean square of the model's output (on the device, T marked
    dynamic; ``replayed_forward``: the model under ``lr.compile(replay=True)``)."""
    def make(model, opt, dev):
        fwd = lr.compile(model, replay=True) if dev is not None and replayed_forward \
            else model

        def step(x, y):
            if dev is not None:
                x = lr.mark_dynamic(x.to(dev), 1, "T")
            loss = fwd(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss, loss.detach() * 1.0
        return step
    return make


def test_a_branch_inside_a_replayed_forward_is_honoured():
    """The forward's own replay (by exact signature) runs no Python: inside a whole step
    traced at followed sizes it ties the trace to the sizes it was given. Lengths past
    the forward's branch (13, 14) are never replayed from the family of shorter ones,
    and every step is eager torch's."""
    lengths = [9, 9, 9, 10, 11, 12, 10, 11, 12, 13, 14, 15, 16]
    step = squared_step(replayed_forward=True)
    whole, _, replayed, m = run_steps(Branchy, step, lengths, "whole", net_batch)
    eager, _, _, _ = run_steps(Branchy, step, lengths, "eager", net_batch)
    assert all(abs(a - b) <= 1e-5 * abs(b) for (a, _), (b, _) in zip(whole, eager))
    assert sum(replayed[9:11]) == 0, (replayed, m["replay_misses"])


def test_a_length_of_one_is_not_replayed_from_a_padded_family():
    """A dynamic dim of size 1 compiles concrete (its own executable): a family of
    padded lengths never replays it, and both are right."""
    lengths = [9, 9, 9, 10, 11, 12, 1, 1, 13, 1]
    whole, _, replayed, m = run_steps(Net, net_step, lengths, "whole", net_batch)
    eager, _, _, _ = run_steps(Net, net_step, lengths, "eager", net_batch)
    for (a, va), (b, vb) in zip(whole, eager):
        assert abs(a - b) < 1e-5 and torch.allclose(va, vb, atol=1e-5)
    assert replayed[6] == replayed[7] == replayed[9] == 0 and replayed[8] == 1, \
        (replayed, m["replay_misses"])


class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 3)
        self.ln = nn.LayerNorm(3)

    def forward(self, x):
        return self.ln(self.a(x))


LOSSES = {
    "mse": lambda out: F.mse_loss(out, torch.zeros_like(out)),
    "l1": lambda out: F.l1_loss(out, out.detach() * 0.5),
    # (their backwards take 2 / (T - 1) and 2 / (12 T - 1), computed in torch's C++)
    "var_std": lambda out: out.var(1).mean() + out.std(),
    "log_softmax": lambda out: F.log_softmax(out, 1).mean(),
    "norm": lambda out: out.norm() + F.normalize(out, dim=1).sum(),
}


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_losses_replay_at_lengths_never_traced(loss):
    """Each loss's numbers that follow T (divisors, a variance's 2 / (T - 1)) are linked;
    the step's second argument (targets it never reads, T long too) may change with it.
    Right at every length, replayed from the fourth on."""
    def make(model, opt, dev):
        def step(x, y):
            if dev is not None:
                x = lr.mark_dynamic(x.to(dev), 1, "T")
            total = LOSSES[loss](model(x))
            total.backward()
            opt.step()
            opt.zero_grad()
            return total, total.detach() * 1.0
        return step
    lengths = [9, 9, 9, 10, 11, 12, 13, 14, 15]
    whole, _, replayed, m = run_steps(Normed, make, lengths, "whole", net_batch)
    eager, _, _, _ = run_steps(Normed, make, lengths, "eager", net_batch)
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for (a, _), (b, _) in zip(whole, eager))
    assert replayed == [0] * 6 + [1] * 3, (replayed, m["replay_misses"])


def test_a_transformers_causal_lm_replays_at_lengths_never_traced():
    """transformers' GPT-2 trained with its own loss (``labels=``: ``F.pad(labels, (0,
    1), value=-100)`` then shifted, a cross entropy of the T+1-1 targets against T
    logits) at lengths that vary: no exact compile, replayed at lengths never traced, bit
    for bit what tracing gives and eager torch's losses."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100,
                                  n_positions=64, eos_token_id=0, bos_token_id=0,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)

    def make():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(cfg)

    def make_step(model, opt, dev):
        def step(x, y):
            if dev is not None:
                x = lr.mark_dynamic(x.to(dev), 1, "T")
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss, loss.detach() * 1.0
        return step

    def batch(g, T):
        return torch.randint(0, 100, (2, T), generator=g), None
    lengths = [9, 9, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22]
    traced, p0, _, _ = run_steps(make, make_step, lengths, "traced", batch)
    whole, p1, replayed, m = run_steps(make, make_step, lengths, "whole", batch)
    eager, _, _, _ = run_steps(make, make_step, lengths, "eager", batch)
    assert [a for a, _ in traced] == [a for a, _ in whole]
    assert all(torch.equal(a, b) for a, b in zip(p0, p1))
    assert all(abs(a - b) <= 1e-5 * abs(b) for (a, _), (b, _) in zip(whole, eager))
    assert m["exact_compiles"] == {} and sum(replayed) >= 5, (replayed, m)


def test_a_topk_along_a_replayed_length_checks_k_against_it():
    """topk along T runs padded (the padding sorts last); a step replayed at a length
    never traced checks k against it in the graph, as torch's rule does at the call:
    right where k fits, torch's error where it does not (with one bucket for every
    length, the replay would otherwise pick padding)."""
    old = lr.config.buckets
    lr.config.buckets = [16]
    try:
        def make(model, opt, dev):
            def step(x, y):
                if dev is not None:
                    x = lr.mark_dynamic(x.to(dev), 1, "T")
                total = model(x).amax(-1).topk(4, dim=1).values.sum()
                total.backward()
                opt.step()
                opt.zero_grad()
                return total, total.detach() * 1.0
            return step
        lengths = [9, 10, 11, 12, 13, 14, 4]
        whole, _, replayed, m = run_steps(Normed, make, lengths, "whole", net_batch)
        eager, _, _, _ = run_steps(Normed, make, lengths, "eager", net_batch)
        assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b))
                   for (a, _), (b, _) in zip(whole, eager))
        assert replayed[5:] == [1, 1], (replayed, m["replay_misses"])
        model = Normed().to(DEV)
        step = make(model, lr.compile_optimizer(torch.optim.SGD(model.parameters(), lr=0.1)),
                    DEV)
        step = lr.compile_step(step, model)
        for T in lengths[:-1]:
            step(*net_batch(torch.Generator().manual_seed(T), T))[0].item()
        with pytest.raises(RuntimeError, match="selected index k out of range.*true size"):
            step(*net_batch(torch.Generator().manual_seed(3), 3))[0].item()
    finally:
        lr.config.buckets = old
