"""Replay across sizes (``lazy_runtime/replay_sizes.py``): a call at a length never
traced reuses the templates of other lengths, with every size-dependent int predicted
from the traced ones. Checked against eager torch at every step, including lengths on
both sides of a size condition, and refused where the analyzer cannot vouch for the
forward's size arithmetic (``T // 2``)."""

import copy

import pytest
import torch
import torch.nn as nn

import lazy_runtime as lr
import shapeinfer
from conftest import DEV, PLATFORM, load_example
from lazy_runtime import replay_sizes
from lazy_runtime.replay_sizes import SizePolicy, predict


# ---- the fit ------------------------------------------------------------------------


def test_predict_recovers_polynomials_up_to_one_degree_above_the_plan():
    pol = SizePolicy([], {"T": 1})      # fits degree 2: one more than the plan saw
    f = [lambda t: 3, lambda t: t, lambda t: t * t - 1, lambda t: 4 * t * t, lambda t: 2 * t + 7]
    obs = [({"T": t}, [g(t) for g in f]) for t in (5, 9, 12, 20)]
    for t in (1, 7, 40, 200):
        assert predict(obs, {"T": t}, pol) == [g(t) for g in f]
    # three lengths pin down a quadratic but leave no trace to verify it with
    assert predict(obs[:3], {"T": 7}, pol) is None
    # a repeated size verifies nothing
    assert predict(obs[:3] + [obs[0]], {"T": 7}, pol) is None
    # a cubic (two degrees above the plan) is caught by the verifying trace
    cubic = [({"T": t}, [t ** 3]) for t in (5, 9, 12, 20)]
    assert predict(cubic, {"T": 7}, pol) is None


def test_predict_refuses_what_the_traces_do_not_determine_or_fit():
    pol = SizePolicy([], {"B": 0, "T": 0})   # monomials 1, B, T, B*T
    obs = [({"B": b, "T": t}, [b * t + 1]) for b, t in ((2, 3), (2, 5), (4, 3), (3, 4))]
    assert predict(obs, {"B": 4, "T": 5}, pol) is None      # determined, not verified
    assert predict(obs[:3], {"B": 3, "T": 7}, pol) is None  # B*T not determined yet
    obs.append(({"B": 5, "T": 7}, [36]))
    assert predict(obs, {"B": 4, "T": 5}, pol) == [21]
    assert predict(obs, {"B": 2, "T": 9}, pol) == [19]
    # values no polynomial of the allowed degree fits (T // 2 behind a false certificate)
    pol_t = SizePolicy([], {"T": 0})
    assert predict([({"T": t}, [t // 2]) for t in (4, 6, 9)], {"T": 12}, pol_t) is None
    # a non-integer prediction is refused
    assert predict([({"T": t}, [t // 2]) for t in (4, 6, 8)], {"T": 7}, pol_t) is None


# (B, T) pairs in general position for B of degree 1, T of degree 2, total degree 3
# (allowed: B**a * T**b, a <= 2, b <= 3, a + b <= 4: eleven monomials)
BT = [(8, 20), (5, 27), (7, 23), (6, 30), (8, 18), (5, 25), (7, 32), (6, 21), (8, 29), (5, 19),
      (7, 26), (6, 24), (8, 31), (5, 22), (7, 17), (6, 28)]


def test_total_degree_needs_fewer_traces_than_the_box():
    tot = SizePolicy([], {"B": 1, "T": 2}, total_degree=3)
    box = SizePolicy([], {"B": 1, "T": 2})
    assert len(tot.monomials(["B", "T"])) == 11 and len(box.monomials(["B", "T"])) == 12
    f = [lambda b, t: b * t, lambda b, t: t * t - 1, lambda b, t: 4 * b * t * t,
         lambda b, t: 3 * b * b * t * t - t ** 3 + 2, lambda b, t: b * t ** 3, lambda b, t: 7,
         lambda b, t: b * b + b]
    obs = [({"B": b, "T": t}, [g(b, t) for g in f]) for b, t in BT[:12]]
    for b, t in BT[12:] + [(1, 1), (16, 256), (3, 100)]:
        assert predict(obs, {"B": b, "T": t}, tot) == [g(b, t) for g in f]
        assert predict(obs, {"B": b, "T": t}, box) is None   # the box needs 13
    # eleven traces determine every size but leave none to verify the fit with
    assert predict(obs[:11], {"B": 8, "T": 31}, tot) is None
    # beyond the total degree (B**2 * T**3: 5) or a symbol's degree (B**3): caught
    for g in (lambda b, t: b * b * t ** 3, lambda b, t: b ** 3):
        bad = [({"B": b, "T": t}, [g(b, t)]) for b, t in BT[:12]]
        assert predict(bad, {"B": 8, "T": 31}, tot) is None


def test_plans_without_total_degree_use_the_box():
    old = SizePolicy.from_plan({"shape_only": True, "size_arithmetic": {
        "polynomial": True, "conditions": [], "degree": {"B": 1, "T": 2}}})
    assert old.total_degree is None and len(old.monomials(["B", "T"])) == 12
    new = SizePolicy.from_plan({"shape_only": True, "size_arithmetic": {
        "polynomial": True, "conditions": [], "degree": {"B": 1, "T": 2}, "total_degree": 3}})
    assert new.total_degree == 3 and len(new.monomials(["B", "T"])) == 11
    # a symbol the analyzer gave no degree: its total degree is not vouched for either
    assert len(SizePolicy([], {"T": 2}, 2).monomials(["B", "T"])) == 3 * 4


def test_fillers_put_ints_back_as_fill_does():
    H = replay_sizes._HOLE
    for obj in [(4, (5, 6), [7, "a", (8,)], 1.5, None), (3,), 9, (), [(), [1]], ("x", 2.0)]:
        ints: list = []
        skel = replay_sizes.split(obj, ints)
        vals = [v + 100 for v in ints]
        want = replay_sizes.fill(skel, iter(vals))
        got = replay_sizes._filler(skel)(vals)
        assert got == want and type(got) is type(want)
    assert replay_sizes.split((2, [3]), []) == (H, (replay_sizes._LIST, (H,)))


def test_policy_conditions_split_families():
    pol = SizePolicy(["T <= 256", "Ne(T, Min(256, T))"], {"T": 2})
    assert pol.truths({"T": 10}) == (True, False)
    assert pol.truths({"T": 300}) == (False, True)
    assert pol.truths({"B": 3}) is None      # a condition on a symbol the call does not size
    assert SizePolicy.from_plan({"shape_only": True,
                                 "size_arithmetic": {"polynomial": False}}) is None


# ---- whole runs against eager ---------------------------------------------------------


def _train(model, opt, batches, loss_fn, lazy):
    losses = []
    for x, y in batches:
        if lazy:
            x, y = x.to(DEV), y.to(DEV)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if lazy:
            lr.mark_step()
        losses.append(loss.item())
    return losses


def _gpt_both_ways(sizes):
    """GPT trained at ``sizes`` [(B, T)] eagerly, traced every step and replayed as the
    plan allows: the replayed run must equal the traced one bit for bit (on XLA:CPU; on
    XLA:GPU, whose reductions differ with the shape, to an ulp). Returns the replayed
    run's metrics and model."""
    gpt = load_example("gpt")
    torch.manual_seed(0)
    base = gpt.GPT(vocab=32, block=64, d_model=16, heads=2, layers=1, dropout=0.0)
    plan = shapeinfer.analyze(base, args=(torch.randint(0, 32, (2, 7)),),
                              dims={"idx": ("B", "T")})
    sa = plan.to_json()["control_flow"]["size_arithmetic"]
    assert sa["polynomial"] and sa["degree"] == {"B": 1, "T": 2} and sa["total_degree"] == 3
    batches = [gpt.make_batch(i, batch=b, length=t, vocab=32) for i, (b, t) in enumerate(sizes)]
    eager = copy.deepcopy(base)
    want = _train(eager, gpt.make_optimizer(eager), batches, gpt.loss_fn, lazy=False)
    runs = {}
    for replay in (False, None):     # traced every step; replayed as the plan allows
        model = lr.compile(copy.deepcopy(base).to(DEV), shapes=plan, replay=replay)
        lr.reset_metrics()
        runs[replay] = (_train(model, gpt.make_optimizer(model), batches, gpt.loss_fn, True),
                        [p.cpu() for p in model.parameters()], lr.metrics(), model)
    (traced, pt, _, _), (replayed, pr, m, model) = runs[False], runs[None]
    if PLATFORM == "cpu":
        assert replayed == traced
        for a, b in zip(pr, pt):
            assert torch.equal(a, b)
    else:   # XLA:GPU reduces another shape in another order: an ulp apart (H100)
        assert replayed == pytest.approx(traced, rel=1e-6)
        for a, b in zip(pr, pt):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert replayed == pytest.approx(want, rel=1e-5)
    # (parameters against eager: Adam moves the key bias, whose gradient is zero up to
    # rounding, by up to a step; test_replay.py checks that tolerance)
    return m, model


def test_gpt_training_at_new_lengths_replays_and_equals_tracing():
    lengths = [20, 27, 23, 30, 18, 25, 32, 21, 20]   # one bucket (32): one compile
    m, _ = _gpt_both_ways([(4, t) for t in lengths])
    # five lengths are traced (T has degree 2: a cubic fit, verified), the other three
    # new ones are predicted, and the repeated 20 is an exact replay
    assert m["replays_across_sizes"] == 3, m["replay_misses"]
    assert m["replays"] == 4


def test_gpt_training_at_new_batch_sizes_and_lengths_equals_tracing():
    # B and T vary together: twelve traced (B, T) pairs (the eleven allowed monomials
    # plus one to verify), then every new pair is predicted; the last is an exact replay
    m, model = _gpt_both_ways(BT + [(8, 20)])    # buckets (8, 32): one graph
    assert m["replays_across_sizes"] == 4, m["replay_misses"]
    assert m["replays"] == 5
    # a rebuilt entry is exactly the family's skeleton with the predicted ints put back
    rep = model._lr_replayer
    (seen,) = rep.families.values()
    obs = [(s, replay_sizes.parts(e)[1]) for s, e in seen]
    like = seen[-1][1]
    skel = replay_sizes.parts(like)[0]
    for b, t in [(5, 29), (8, 17), (6, 26)]:
        ints = predict(obs, {"B": b, "T": t}, rep.sizes)
        e = replay_sizes.rebuild(like, skel, ints, type(like), type(like.fwd))
        assert replay_sizes.parts(e) == (skel, tuple(ints))
        assert b * t in ints                    # a view's flattened batch


class Branchy(nn.Module):
    """Which layer runs depends on the length; the slice bound is a polynomial of it."""

    def __init__(self):
        super().__init__()
        self.short = nn.Linear(8, 8)
        self.long = nn.Linear(8, 8)

    def forward(self, x):
        B, T, C = x.shape
        h = self.long(x) if T > 12 else self.short(x)
        return h[:, 1:].sum(1) + torch.arange(T - 1, device=x.device).sum()


class Halving(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x[:, : x.shape[1] // 2])


def _inference(module, sizes, expect_across):
    torch.manual_seed(0)
    eager = module()
    plan = shapeinfer.analyze(eager, args=(torch.randn(2, 5, 8),), dims={"x": ("B", "T", None)})
    lazy = lr.compile(copy.deepcopy(eager).to(DEV), shapes=plan)
    lr.reset_metrics()
    with torch.no_grad():
        for b, t in sizes:
            x = torch.randn(b, t, 8)
            torch.testing.assert_close(lazy(x.to(DEV)).cpu(), eager(x), rtol=1e-5, atol=1e-5)
    assert lr.metrics()["replays_across_sizes"] == expect_across, lr.metrics()["replay_misses"]
    return plan


def test_a_size_condition_keeps_each_side_apart():
    # T > 12 is false for the first four, true for the next four: each side needs four
    # traces (T has degree 1: a verified quadratic fit) before it predicts
    sizes = [(2, 5), (2, 7), (2, 9), (2, 11), (2, 6), (2, 14), (2, 20), (2, 16), (2, 26),
             (2, 18), (2, 10)]
    plan = _inference(Branchy, sizes, expect_across=3)
    assert "T > 12" in plan.to_json()["control_flow"]["size_arithmetic"]["conditions"]


def test_a_new_batch_size_is_not_predicted_from_lengths_alone():
    _inference(Branchy, [(2, 5), (2, 7), (2, 9), (2, 11), (3, 6), (2, 8)], expect_across=1)


def test_floor_division_of_a_size_is_never_predicted():
    plan = _inference(Halving, [(2, 6), (2, 8), (2, 10), (2, 9), (2, 12), (2, 14)],
                      expect_across=0)
    sa = plan.to_json()["control_flow"]["size_arithmetic"]
    assert not sa["polynomial"] and "T//2" in sa["reasons"][0].replace(" ", "")
