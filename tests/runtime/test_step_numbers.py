"""Whole-step replay at int arguments never traced (``lazy_runtime/step_numbers.py``): a
decoding step ``step(x, pos)`` replays at new positions once three traced positions
agree. Every call is checked against eager torch, including the calls where a replay
must not happen: a branch on the int, a slice torch clips, a bucket left, a value picked
by ``pos % 4``, a use of the int no replay can follow."""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV

L, D = 16, 8


@pytest.fixture(autouse=True)
def _fresh_families():
    """Automatic dynamic learns by graph structure: a graph of another test with this
    structure at other sizes would make these dims dynamic (and a parameter with a
    dynamic dim is not replayed whole). Each test starts from no families."""
    lr.clear_cache()
    yield


class CacheStep(nn.Module):
    """A decoder-like step over a static cache buffer; ``kind`` picks how the cache is
    written and read."""

    def __init__(self, kind="mask"):
        super().__init__()
        self.kind = kind
        self.lin, self.out = nn.Linear(D, D), nn.Linear(D, D)
        self.register_buffer("k", torch.zeros(2, L, D))

    def forward(self, x, pos):
        self.k[:, pos] = torch.tanh(self.lin(x))
        if self.kind == "grow":          # attention over k[:, :pos + 1]
            k = self.k[:, :pos + 1]
            att = torch.einsum("bd,btd->bt", x, k)
        else:                            # over the whole cache, masked past pos
            k = self.k
            att = torch.einsum("bd,btd->bt", x, k)
            att = att.masked_fill(torch.arange(L, device=x.device) > pos, float("-inf"))
        return self.out(torch.einsum("bt,btd->bd", F.softmax(att, -1), k))


def pair(module):
    """A copy of ``module`` on the lazy device, and ``module``."""
    return copy.deepcopy(module).to(DEV), module


def drive(step, eager_fn, calls, check=True):
    """Each call's result from ``step`` (compiled) and from eager torch, compared."""
    g = torch.Generator().manual_seed(1)
    for args in calls:
        x = torch.randn(2, D, generator=g)
        got = step(x, *args)
        want = eager_fn(x, *args)
        if check:
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for a, b in zip(got, want):
                if isinstance(b, torch.Tensor):
                    torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)
                else:
                    assert a == b


@pytest.mark.parametrize("kind", ["mask", "grow"])
def test_decoding_positions_replay(kind):
    lr.reset_metrics()
    lazy, eager = pair(CacheStep(kind))
    step = lr.compile_step(lambda x, pos: lazy(x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, eager, [(p,) for p in range(L)])
    m = lr.metrics()
    # traced: 0 and 1 (constants of ``arange(L) > pos`` there, as torch.compile has them),
    # 2 (the int a run-time input from then on), then three positions of one executable;
    # the growing read once more where it enters a new bucket (size 9): the family of the
    # bucket before lends its traces (``Family.borrowed``; three traces each before)
    assert m["step_replays"] >= (10 if kind == "mask" else 8), m["step_replays"]


def test_a_new_bucket_borrows_the_traces_of_the_one_before():
    """The growing read ``k[:, :pos + 1]`` enters bucket 16 at position 8: that trace
    and the family of bucket 8 (positions of one Python, another executable) together
    vouch for 9, so one trace there, not three. A branch taken otherwise (from 10 on the
    result is scaled by 2.0, not 3.0: one graph, another number) is no sibling: traced
    three times apart. Every call, in order and at random, as eager torch's."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep("grow"))

    def body(m, x, pos):
        return m(x, pos) * (2.0 if pos > 9 else 3.0)
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    traced = []
    g = torch.Generator().manual_seed(4)
    calls = list(range(L - 1)) + torch.randint(0, L - 1, (12,), generator=g).tolist()
    with torch.no_grad():
        for p in calls:
            before = lr.metrics()["step_replays"]
            drive(step, lambda x, pos: body(eager, x, pos), [(p,)])
            if lr.metrics()["step_replays"] == before:
                traced.append(p)
    assert [p for p in traced if 8 <= p < L - 1] == [8, 10, 11, 12], traced


def test_a_number_baked_into_a_bucket_stays_fixed_when_borrowing():
    """``full(.., pos // 4)`` is a constant of the graph (made by a host factory): it
    kept one value over the bucket-8 family's traces, so a bucket-16 family borrowing
    them keeps its own trace's value (2 at position 8) and traces 12, where it is 3,
    instead of replaying 2 there."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep("grow"))

    def body(m, x, pos):
        return m(x, pos) + torch.full((2, D), pos // 4, device=x.device)
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(L - 1)])
    assert lr.metrics()["step_replays"] >= 4


def test_a_branch_on_the_int_is_guarded():
    lr.reset_metrics()
    lazy, eager = pair(CacheStep())

    def body(m, x, pos):
        y = m(x, pos)
        if pos % 3 == 0:     # a Python branch: replays at other remainders keep out
            y = y * 2
        return y
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(L)])
    assert lr.metrics()["step_replays"] >= 6


def test_an_index_computed_by_python_is_followed_exactly():
    """``pos % 4`` equals ``pos`` at 1, 2 and 3: the replay at 4 must not pick ``pos``."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep())

    def body(m, x, pos):
        return m(x, pos) + m.k[:, pos % 4]
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(1, 12)])
    assert lr.metrics()["step_replays"] >= 4


def test_slices_torch_would_clip_are_traced():
    """``x[:, pos:pos + 4]`` of a dim of 16 is clipped from pos 13 on (and ``narrow``, whose
    end torch computes, would raise there): those calls are traced, and right."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep())

    def body(m, x, pos):
        y = m(x, pos)
        return y + m.k[:, pos:pos + 4].sum(1), m.k.narrow(1, min(pos, L - 2), 2).sum(1)
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(L)])
    assert lr.metrics()["step_replays"] >= 6


def test_an_int_returned_is_computed_at_the_call():
    lazy, eager = pair(CacheStep())

    def body(m, x, pos):
        return m(x, pos), pos + 1
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        pos, seen = 0, []
        for _ in range(8):
            _, pos = step(torch.randn(2, D), pos)
            seen.append(pos)
    assert seen == list(range(1, 9))
    assert all(type(p) is int for p in seen)


def test_a_use_no_replay_can_follow_unfollows_the_int():
    """``float(pos)`` escapes the record: the int is keyed by value again, and a value
    traced twice replays as before."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep())

    def body(m, x, pos):
        return m(x, pos) * float(pos)
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in (1, 2, 3, 3, 3, 3, 4)])
    m = lr.metrics()
    assert any("float()" in r for r in m["replay_misses"]), m["replay_misses"]
    assert m["step_replays"] >= 1


def test_an_int_that_changes_the_graph_replays_per_value():
    """A count of layers, alternating: each value's traces form a family of their own."""
    lr.reset_metrics()
    torch.manual_seed(0)
    eager = nn.Linear(D, D)
    lazy = copy.deepcopy(eager).to(DEV)

    def body(m, x, n):
        for _ in range(n):
            x = torch.tanh(m(x))
        return x
    step = lr.compile_step(lambda x, n: body(lazy, x.to(DEV), n), lazy)
    with torch.no_grad():
        drive(step, lambda x, n: body(eager, x, n), [(n,) for n in (1, 2) * 5])
    assert lr.metrics()["step_replays"] >= 4


def test_followed_int_guards_and_expressions():
    """The record itself: arithmetic as exact expressions, comparisons as guards."""
    from lazy_runtime.traced_numbers import Tape, evaluate, follow, guards_hold, recording
    tape = Tape((5,))
    with recording(tape):
        p = follow(5, 0)
        q = max(p, 3) // 2 - (-p) % 3
    assert int.__int__(q) == 1 and type(q) is not int and tape.pinned is None
    assert len(tape.guards) == 1   # max's comparison: p < 3 was False
    assert evaluate(q._e, (9,)) == 9 // 2 - (-9) % 3
    assert guards_hold(tape.guards, (9,)) and not guards_hold(tape.guards, (2,))
    assert str(p) == "5" and type(p + 1.5) is float and tape.pinned is None  # (after)
    with recording(tape):   # a float made of it is followed too; ``float()`` pins
        h = (p + 1.5) / 4 - 2 ** -p
        assert type(h) is not float and float.__float__(h) == (5 + 1.5) / 4 - 2 ** -5
        assert evaluate(h._e, (7,)) == (7 + 1.5) / 4 - 2 ** -7 and tape.pinned is None
        float(p)
    assert tape.pinned == "float()"


def test_returned_views_are_made_again():
    """A step returning ``logits[:, -1]`` (a view) and the same tensor twice replays (it
    was refused), each result right and the two sharing one value."""
    lr.reset_metrics()
    torch.manual_seed(0)
    eager = nn.Linear(D, D)
    lazy = copy.deepcopy(eager).to(DEV)

    def body(m, x):
        y = m(x).reshape(2, 2, D // 2)
        return y[:, -1], y, y
    step = lr.compile_step(lambda x: body(lazy, x.to(DEV)), lazy)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(2, D, generator=g)
            got, want = step(x), body(eager, x)
            for a, b in zip(got, want):
                torch.testing.assert_close(a.cpu(), b)
            assert got[1] is got[2] and got[0]._st is got[1]._st
    assert lr.metrics()["step_replays"] == 3


_TABLE = [0, 1, 2, 3, 7, 5, 6, 4, 8, 9, 10, 11, 12, 13, 14, 15]
USES = {   # (how the step uses pos, whether calls at positions never traced replay)
    "start // 2": (lambda m, x, p: m.lin(x) + m.k[:, p // 2:p // 2 + 3].sum(1), True),
    "scalar": (lambda m, x, p: m.lin(x) + p, True),
    "times pos % 3": (lambda m, x, p: m.lin(x) * (p % 3), True),   # 0 and 1: constants
    "narrow": (lambda m, x, p: m.lin(x) + m.k.narrow(1, p % (L - 3), 3).sum(1), True),
    "python table": (lambda m, x, p: m.lin(x) + m.k[:, _TABLE[p]], False),
    "negative select": (lambda m, x, p: m.lin(x) + m.k[:, -p - 1], False),
    "suffix": (lambda m, x, p: m.lin(x) + m.k[:, p:].sum(1), False),
    "roll": (lambda m, x, p: m.lin(x) + torch.roll(m.k, p, 1)[:, 0], False),
    "tensor of it": (lambda m, x, p: m.lin(x) + m.k[:, torch.tensor([p, p // 2],
                                                                   device=x.device)].sum(1),
                     False),
}


@pytest.mark.parametrize("use", list(USES))
def test_followed_int_uses_match_eager(use):
    """Each use of a followed position, at every position in order and then at random
    ones: every call as eager torch's. ``table[pos]`` (a Python list indexed by it) equals
    ``pos`` at the first traced positions: the number it yields reached torch as a plain
    int, so nothing is linked to ``pos`` and no untraced position replays."""
    g = torch.Generator().manual_seed(2)
    calls = list(range(L - 1)) + torch.randint(0, L - 1, (10,), generator=g).tolist()
    check_uses(*USES[use], calls, g, min_replays=8)


def check_uses(body, replays, calls, g, min_replays):
    """``body(module, x, number)`` under ``compile_step`` at each of ``calls``, every call
    against eager torch; a value never traced replays only where ``replays`` says."""
    lr.reset_metrics()
    torch.manual_seed(0)
    eager = CacheStep()
    lazy = copy.deepcopy(eager).to(DEV)
    step = lr.compile_step(lambda x, p: body(lazy, x.to(DEV), p), lazy)
    seen = set()
    with torch.no_grad():
        for p in calls:
            x = torch.randn(2, D, generator=g)
            before = lr.metrics()["step_replays"]
            torch.testing.assert_close(step(x, p).cpu(), body(eager, x, p), rtol=1e-5,
                                       atol=1e-6)
            if lr.metrics()["step_replays"] > before and p not in seen:
                assert replays, f"value {p} replayed, never traced"
            seen.add(p)
    if replays:
        assert lr.metrics()["step_replays"] >= min_replays, lr.metrics()["replay_misses"]


def test_a_returned_int_python_cannot_compute_is_traced():
    """``100 // (pos - 6)`` at 6 raises in the step's Python: that call is traced (and
    raises ZeroDivisionError, as eager torch's step does), not replayed with a result
    it cannot have; the calls around it replay."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep())

    def body(m, x, pos):
        return m(x, pos), 100 // (pos - 6)
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(6)])
        x = torch.randn(2, D)   # (the cache is written before the error, both ways)
        with pytest.raises(ZeroDivisionError):
            step(x, 6)
        with pytest.raises(ZeroDivisionError):
            body(eager, x, 6)
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(7, 12)])
    assert lr.metrics()["step_replays"] >= 5


def test_a_returned_read_that_grows_with_the_position():
    """``k[:, :pos + 1]`` returned (a dynamic dim whose true size follows the position):
    each replay returns it at its own length."""
    lr.reset_metrics()
    lazy, eager = pair(CacheStep("grow"))

    def body(m, x, pos):
        y = m(x, pos)
        return y, m.k[:, :pos + 1].sum(-1) * 1
    step = lr.compile_step(lambda x, pos: body(lazy, x.to(DEV), pos), lazy)
    with torch.no_grad():
        drive(step, lambda x, pos: body(eager, x, pos), [(p,) for p in range(L)])
    assert lr.metrics()["step_replays"] >= 6


FLOAT_USES = {   # (how the step uses a float argument, whether new values replay)
    "scale": (lambda m, x, a: m.lin(x) * a, True),
    "affine": (lambda m, x, a: m.lin(x) * (1 - a * 0.1) + a / 3, True),
    "branch": (lambda m, x, a: m.lin(x) * 2 if a > 0.5 else m.lin(x) - a, True),
    "power": (lambda m, x, a: m.lin(x) * a ** 2.5 - 2.0 ** a, True),
    "clamp": (lambda m, x, a: m.lin(x).clamp(max=a), True),
    "rounded": (lambda m, x, a: m.lin(x) * round(a, 1), False),          # pins
    "math.sqrt": (lambda m, x, a: m.lin(x) * math.sqrt(a), False),       # unlinked
    "index from int()": (lambda m, x, a: m.lin(x) + m.k[:, int(a * 10)], False),  # pins
}


@pytest.mark.parametrize("use", list(FLOAT_USES))
def test_followed_float_uses_match_eager(use):
    """A float argument that changes every call (a learning rate, a temperature) is
    followed as ints are: each call as eager torch's; values never traced replay only
    where the float's every use is recorded (``round``, ``int()`` pin it; a number C code
    made of it, ``math.sqrt``, is linked to nothing)."""
    g = torch.Generator().manual_seed(3)
    calls = [0.05 * i for i in range(1, 20)] + torch.rand(10, generator=g).tolist()
    check_uses(*FLOAT_USES[use], calls, g, min_replays=15)
