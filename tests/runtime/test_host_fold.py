"""Reads of small integer values computed only from data: folded on the host by torch's
CPU kernels, no barrier; everything else read is still a barrier."""

import copy
import random
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same, tiny_bert
from lazy_runtime import fold


def _fresh():
    lr.mark_step()
    lr.reset_metrics()


def _steps_match_eager(eager, lazy, make_optimizer, loss_of, batches, rel):
    """Train ``eager`` and ``lazy`` (its copy on the device, each step a whole step under
    ``compile_step``) on ``batches``, each loss as eager's; the metrics after."""
    opt_e = make_optimizer(eager.parameters())
    opt_l = lr.compile_optimizer(make_optimizer(lazy.parameters()))

    def step(model, opt, ids, device=None):
        loss = loss_of(model, ids.to(device) if device is not None else ids)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    whole = lr.compile_step(lambda ids: step(lazy, opt_l, ids, DEV), lazy, opt_l)
    _fresh()
    for i, ids in enumerate(batches):
        want = step(eager, opt_e, ids)
        assert whole(ids).item() == pytest.approx(want.item(), rel=rel), i
    return lr.metrics()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_integer_reads_from_data_are_folded_and_match_torch(seed):
    r = random.Random(seed)
    n = r.randint(3, 40)
    lengths = torch.randint(1, 50, (n,))
    labels = torch.randint(-2, 9, (n,))
    labels[labels < 0] = -100
    x = torch.randn(n, 3)
    _fresh()
    ll, lab, xl = lengths.to(DEV), labels.to(DEV), x.to(DEV)
    pending = xl * 2 + 1    # work recorded before the reads: it must stay uncut
    got = [ll.max().item(), (lab != -100).sum().item(), (ll * 3 - 7).tolist(),
           (xl > 0).any().item(), torch.cumsum(ll, 0).flip(0).cpu(),
           (ll // 3 + lab.clamp(min=0)).cpu()]
    want = [lengths.max().item(), (labels != -100).sum().item(), (lengths * 3 - 7).tolist(),
            (x > 0).any().item(), torch.cumsum(lengths, 0).flip(0),
            lengths // 3 + labels.clamp(min=0)]
    m = lr.metrics()
    assert m["syncs"] == 0 and m["graphs_executed"] == 0, m["sync_reasons"]
    assert m["host_folds"] == len(got)
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert_same(g, w, what="folded read")
        else:
            assert g == w
    assert_same(pending.cpu(), x * 2 + 1, what="the graph recorded before the reads")


def test_what_is_not_folded_is_still_a_barrier(monkeypatch):
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    _fresh()
    xl = x.to(DEV)
    # (a float: summed in another order, within float32 rounding of the terms' magnitude,
    # not of the sum's, which may cancel)
    got = (xl * 2).sum().item()
    assert got == pytest.approx((x * 2).sum().item(), abs=1e-6 * (x * 2).abs().sum().item())
    assert lr.metrics()["sync_reasons"] == {"read": 1}
    r = torch.randint(0, 9, (6,), device=DEV)      # a random op: its stream position
    assert r.sum().item() == r.cpu().sum().item()  # and the value read stay the graph's
    assert lr.metrics()["sync_reasons"] == {"read": 2}
    monkeypatch.setattr(fold, "MAX_ELEMENTS", 10)  # too large
    ints = torch.arange(20).to(DEV)
    assert (ints + 1).sum().item() == 210
    assert lr.metrics()["sync_reasons"] == {"read": 3}
    assert lr.metrics()["host_folds"] == 0


def test_unsorted_packed_sequence_pads_without_a_barrier():
    """torch's pad_packed_sequence reads ``unsorted_indices`` with ``.cpu()``: the
    inverse permutation of host-made indices, folded."""
    torch.manual_seed(4)
    eager = nn.LSTM(3, 4, bidirectional=True)
    lazy = nn.LSTM(3, 4, bidirectional=True)
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEV)
    x, lengths = torch.randn(6, 4, 3), torch.tensor([3, 6, 1, 4])
    _fresh()
    outs = []
    for model, xx in ((eager, x), (lazy, x.to(DEV))):
        pack = nn.utils.rnn.pack_padded_sequence(xx, lengths, enforce_sorted=False)
        out, (h, _) = model(pack)
        padded, lens = nn.utils.rnn.pad_packed_sequence(out)
        outs.append((padded, lens, h))
    m = lr.metrics()
    assert m["syncs"] == 0 and m["host_folds"] == 1, m["sync_reasons"]
    lr.mark_step()
    for name, w, g in zip(("padded", "lengths", "h"), *outs):
        assert_same(g, w.detach(), 1e-4, 1e-5, what=name)


def test_a_step_that_folds_a_read_of_its_arguments_replays_once_per_value():
    """A folded value may steer the step's Python (here its sign). Computed from the
    step's CPU arguments alone, it is computed again from each call's before the step is
    replayed: each value its own replay, each call its own branch."""
    torch.manual_seed(5)
    eager = nn.Linear(3, 1)
    lazy = nn.Linear(3, 1)
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEV)

    def step(model, x, labels):
        sign = 1.0 if (labels != -100).sum().item() > 2 else -1.0
        return model(x).sum() * sign

    whole = lr.compile_step(lambda x, labels: step(lazy, x, labels), lazy)
    _fresh()
    for i in range(12):
        x = torch.randn(4, 3)
        labels = torch.tensor([1, 2, 3, 4]) if i % 3 else torch.tensor([1, -100, -100, 2])
        got = whole(x, labels)
        assert got.item() == pytest.approx(step(eager, x, labels).item(), rel=1e-5), i
    m = lr.metrics()
    # the first call learns the read; then each value's calls: two traces, then replays
    assert m["step_replays"] == 12 - 1 - 2 - 2, m
    assert not m["replay_misses"], m["replay_misses"]


def test_a_step_that_folds_a_read_of_the_models_state_is_not_replayed_as_a_whole():
    """A value computed on the host from the model's state (a count of its positive
    weights): the state changes without the signature changing, so the step is traced."""
    torch.manual_seed(5)
    eager = nn.Linear(3, 1)
    lazy = nn.Linear(3, 1)
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEV)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.5)
    opt_l = torch.optim.SGD(lazy.parameters(), lr=0.5)

    def step(model, opt, x):
        sign = 1.0 if (model.weight > 0).sum().item() > 1 else -1.0
        loss = model(x).sum() * sign
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    whole = lr.compile_step(lambda x: step(lazy, opt_l, x), lazy, opt_l)
    _fresh()
    for i in range(6):
        x = torch.randn(4, 3)
        assert whole(x).item() == pytest.approx(step(eager, opt_e, x).item(), rel=1e-5), i
    m = lr.metrics()
    assert m["step_replays"] == 0
    assert any("computed on the host from its state" in k for k in m["replay_misses"]), \
        m["replay_misses"]


def test_an_integer_division_that_would_trap_on_the_host_is_left_to_the_graph():
    """torch's CPU kernel divides in C: the type's minimum by -1 kills the process
    (SIGFPE; ``torch.div(INT_MIN, -1, rounding_mode="trunc")`` eagerly, and ``lcm``, which
    divides by a gcd that can be -1). A fold never runs a division by -1, gcd or lcm; the
    graph gives the wrapped value. In a child process, so that a
    regression fails this test instead of ending the suite."""
    code = """if True:
        import torch, lazy_runtime as lr
        d = lr.device()
        for dt in (torch.int32, torch.int64):
            a = torch.tensor([torch.iinfo(dt).min, 7], dtype=dt).to(d)
            m1 = torch.tensor([-1, -1], dtype=dt).to(d)
            print(torch.div(a, m1, rounding_mode="trunc").tolist(),
                  torch.div(a, -1, rounding_mode="trunc").tolist(),
                  (a // m1).tolist(), torch.fmod(a, m1).tolist(), (a % m1).tolist())
        low = torch.tensor([-2**31 + 1, -2**31], dtype=torch.int32).to(d)
        print(torch.gcd(low, low.flip(0)).tolist(), torch.lcm(low, low.flip(0)).shape)
        print(lr.metrics()["host_folds"])
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")
    for line, dt in zip(lines, (torch.int32, torch.int64)):
        low = torch.iinfo(dt).min
        assert line == str([low, -7]) + " " + str([low, -7]) + " " + str([low, -7]) + \
            " [0, 0] [0, 0]"
    assert lines[2] == "[-1, -1] torch.Size([2])"   # (gcd and lcm: INT_MIN / -1 inside)
    assert lines[3] == "0"   # (every read went to the graph)


def test_repeat_interleave_reads_its_length_without_a_barrier():
    """Without ``output_size`` the result's length is the repeats' sum: repeats already on
    the device are read (a transfer, counted as a fold: a replay would not read them
    again), pending ones computed from data are folded; the graph recorded before goes on
    uncut, and the recorded op is the form given ``output_size``."""
    torch.manual_seed(6)
    x, rp = torch.randn(5, 3), torch.tensor([2, 0, 3, 1, 1])
    _fresh()
    xl, rl = x.to(DEV), rp.to(DEV)
    pending = xl * 2 + 1
    got = [xl.repeat_interleave(rl, dim=0), torch.repeat_interleave(rl * 2),
           xl.repeat_interleave((rl[:3] - 1).clamp(min=0), dim=1)]
    want = [x.repeat_interleave(rp, dim=0), torch.repeat_interleave(rp * 2),
            x.repeat_interleave((rp[:3] - 1).clamp(min=0), dim=1)]
    m = lr.metrics()
    assert m["syncs"] == 0 and m["graphs_executed"] == 0, m["sync_reasons"]
    assert m["host_folds"] == 3 and m["fallback_ops"] == {}
    for g, w in zip(got, want):
        assert_same(g, w, what="repeat_interleave")
    assert_same(pending.cpu(), x * 2 + 1, what="the graph recorded before the read")
    assert lr.metrics()["graphs_executed"] == 1


def test_a_step_reading_repeat_interleaves_length_is_not_replayed_as_a_whole():
    """The repeats (data already on the device) size the graph: a replay would not read
    them again, so compile_step refuses the step and each call records its own length."""
    torch.manual_seed(7)
    eager = nn.Linear(3, 1)
    lin = nn.Linear(3, 1)
    lin.load_state_dict(eager.state_dict())
    lin.to(DEV)

    def step(x, rp):
        return lin(x.repeat_interleave(rp, dim=0)).sum()
    whole = lr.compile_step(step, lin)
    _fresh()
    for i in range(4):
        x, rp = torch.randn(3, 3), torch.tensor([1 + i % 2, 0, 2])
        got = whole(x.to(DEV), rp.to(DEV))
        want = eager(x.repeat_interleave(rp, dim=0)).sum()
        assert got.item() == pytest.approx(want.item(), rel=1e-5), i
    m = lr.metrics()
    assert m["step_replays"] == 0 and m["fallback_ops"] == {}
    assert any("computed on the host" in k for k in m["replay_misses"]), m["replay_misses"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bincount_reads_its_length_and_counts_on_the_device(seed):
    """``bincount``'s length is the input's largest value + 1: read on the host (data: no
    barrier), the counts a scatter-add recorded in the graph, weights that are still
    pending included. Values, dtypes and lengths as torch's, ``minlength`` and an empty
    input too; ``unique`` runs on the same read, no fallback either."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 30, (1,), generator=g))
    labels = torch.randint(0, 9, (n,), generator=g)
    w = torch.rand(n, generator=g)
    _fresh()
    ll, wl = labels.to(DEV), w.to(DEV)
    got = [torch.bincount(ll), torch.bincount(ll, wl * 2), torch.bincount(ll, minlength=12),
           torch.bincount(ll.to(torch.uint8), wl.double()), torch.bincount(ll, wl.half()),
           torch.bincount(ll[:0], minlength=3), torch.unique(ll, return_counts=True)[1]]
    want = [torch.bincount(labels), torch.bincount(labels, w * 2),
            torch.bincount(labels, minlength=12),
            torch.bincount(labels.to(torch.uint8), w.double()),
            torch.bincount(labels, w.half()), torch.bincount(labels[:0], minlength=3),
            torch.unique(labels, return_counts=True)[1]]
    m = lr.metrics()
    assert m["syncs"] == 0 and m["fallback_ops"] == {}, (m["sync_reasons"], m["fallback_ops"])
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount((ll - 20).cpu().to(DEV)).cpu()   # torch's own error


def test_a_read_through_float_ops_that_never_round_is_folded():
    """``nn.Transformer``'s decoder checks its causal mask against one it makes (``(mask ==
    causal).all()`` through float triangles of -inf): computed on the host, no barrier.
    A read through float arithmetic, which may round otherwise, is still a barrier."""
    from torch.nn.modules.transformer import _detect_is_causal_mask
    x = torch.randn(6, 6)
    _fresh()
    mask = nn.Transformer.generate_square_subsequent_mask(6, device=DEV)
    xl = x.to(DEV)
    got = [_detect_is_causal_mask(mask, None, 6),
           (mask.t().neg().abs().tril(-1) == mask.t().abs()).all().item(),
           (torch.where(xl > 0, xl, -xl) == xl.abs()).all().item(),
           (torch.maximum(xl, xl.flip(0)) >= xl).sum().item()]
    want = [True, True, True, 36]
    m = lr.metrics()
    assert got == want
    assert m["syncs"] == 0 and m["graphs_executed"] == 0, m["sync_reasons"]
    assert m["host_folds"] == len(got)
    assert ((xl * 0.1 + 1) > 1).sum().item() == ((x * 0.1 + 1) > 1).sum().item()
    assert lr.metrics()["sync_reasons"] == {"read": 1}


def test_a_read_through_arithmetic_that_did_not_round_is_folded():
    """Masks built by arithmetic on 0/1 values (LED's ``(1.0 - mask) * finfo.min``, a
    mask converted to float, max-pooled as CANINE's, padded and clamped as Longformer's)
    round nowhere: each such result equals its float64 one, so it is folded, no barrier.
    The same ops on values where they do round (a product by 0.1, an int past 2**24, a
    subnormal result) are barriers, their reads still the graph's."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.randint(0, 2, (3, 8), generator=gen)
    mask[:, 0] = 1
    _fresh()
    ml = mask.to(DEV)
    lo = torch.finfo(torch.float32).min
    ext = (1.0 - ml[:, None, None, :].float()) * lo
    pooled = F.max_pool1d(ml.float().unsqueeze(1), 4, 4).squeeze(1)
    padded = F.pad(ml.float(), (0, 4), value=0.0).clamp(0.0, 1.0)
    got = [(ext < 0).sum().item(), (ext + 2.0 == 2.0).sum().item(),
           bool(pooled.bool().all()), (padded * 3.0 - 1.0 > 0).sum().item(),
           (ml.float() * 0.5 + 0.25 == 0.75).sum().item()]
    m = mask.float()
    want = [int((m == 0).sum()), int((m == 1).sum()),
            bool(F.max_pool1d(m.unsqueeze(1), 4, 4).bool().all()), int(m.sum()),
            int(m.sum())]
    assert got == want
    metrics = lr.metrics()
    assert metrics["syncs"] == 0 and metrics["host_folds"] == len(got), \
        metrics["sync_reasons"]
    x = torch.randn(4, 5, generator=gen)
    xl = x.to(DEV)
    big = torch.tensor([2 ** 24 + 1, 3]).to(DEV)
    tiny = torch.full((3,), 1e-20).to(DEV)
    rounded = [((xl * 0.1) > 0.05).sum().item(), (big.float() == 2 ** 24).sum().item(),
               ((tiny * 1e-20) > 0).sum().item(), ((xl + 1.0) - 1.0 == xl).sum().item(),
               (big * 1.0 == 2 ** 24).sum().item()]
    assert rounded[:3] == [int(((x * 0.1) > 0.05).sum()), 1, 0]
    assert rounded[3:] == [int(((x + 1.0) - 1.0 == x).sum()), 1]
    assert lr.metrics()["sync_reasons"] == {"read": 5}
    # a float to an integer type outside its range (NaN too) is undefined in C: torch's
    # CPU kernel and XLA give different values, so the read is the graph's
    odd = torch.tensor([float("nan"), 1.0, 3e20, -2.5]).to(DEV)
    as_ints = odd.long()
    assert as_ints.sum().item() == sum(as_ints.cpu().tolist())
    assert lr.metrics()["sync_reasons"]["read"] == 6
    assert lr.metrics()["host_folds"] == len(got)


class _WindowMask(nn.Module):
    """LED's and Longformer's step: the attention mask padded to the attention window,
    an extended mask made by arithmetic, and a host test of it (LED's ``is_global_attn``)
    that branches the forward; the mask comes as an argument."""

    def __init__(self, window=8):
        super().__init__()
        self.window = window
        self.proj = nn.Linear(4, 4)
        self.glob = nn.Linear(4, 4)

    def forward(self, x, mask):
        pad = (self.window - x.shape[1] % self.window) % self.window
        x = F.pad(x, (0, 0, 0, pad))
        mask = F.pad(mask, (0, pad), value=0)
        ext = (1.0 - mask[:, None, :].float()) * torch.finfo(torch.float32).min
        scores = self.proj(x) @ x.transpose(1, 2) + ext.clamp(max=0.0)
        out = scores.softmax(-1) @ x
        if (ext > 0).any():   # global tokens (marked 2, made positive): another path
            out = out + self.glob(x)
        return out[:, : x.shape[1] - pad]


def test_a_window_padded_mask_read_on_the_host_replays_whole():
    torch.manual_seed(0)
    eager = _WindowMask()
    gen = torch.Generator().manual_seed(4)
    batches = []
    for i in range(10):
        mask = torch.ones(2, 5, dtype=torch.long)
        mask[1, 3:] = 0
        if i % 2:
            mask[0, 0] = 2
        batches.append((torch.randn(2, 5, 4, generator=gen), mask))
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e = torch.optim.SGD(eager.parameters(), 0.1)
    opt_l = lr.compile_optimizer(torch.optim.SGD(lazy.parameters(), 0.1))

    def step(model, opt, x, mask):
        loss = model(x, mask).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    whole = lr.compile_step(lambda x, mask: step(lazy, opt_l, x.to(DEV), mask.to(DEV)),
                            lazy, opt_l)
    _fresh()
    for i, (x, mask) in enumerate(batches):
        want = step(eager, opt_e, x, mask).item()
        assert whole(x, mask).item() == pytest.approx(want, rel=1e-5), i
    m = lr.metrics()
    # each mask (with global tokens or not) traced till two traces agree (the second
    # call of each captures the optimizer's own replay), then replayed: calls 7 to 10
    assert m["step_replays"] == 4, m["replay_misses"]
    assert m["sync_reasons"] == {"step": 6}   # each trace folded its read (no barrier)
    assert m["host_folds"] == 6
    # a mask whose conversion to float rounds (and whose extended mask overflows): the
    # fold of this call's argument is refused, so the call is traced, the read a barrier
    x, mask = batches[1]
    mask = mask.clone()
    mask[0, 0] = 2 ** 25 + 1
    _fresh()
    assert whole(x, mask).item() == pytest.approx(step(eager, opt_e, x, mask).item(),
                                                  rel=1e-5)
    m = lr.metrics()
    assert m["step_replays"] == 0 and m["sync_reasons"]["read"] == 1, m


class _Gated(nn.Module):
    """A forward that branches on a value folded on the host: from a mask it makes
    itself (``generate_square_subsequent_mask``, as nn.Transformer's decoder checks it),
    or from its argument."""

    def __init__(self, of_argument: bool):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.of_argument = of_argument

    def forward(self, x):
        T = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=x.device)
        causal = (mask == torch.triu(torch.full((T, T), float("-inf"), device=x.device),
                                     1)).all()
        positive = (x > -3).all()
        return self.lin(x) * (2.0 if bool(positive if self.of_argument else causal) else -1.0)


@pytest.mark.parametrize("of_argument", [False, True])
def test_a_forward_that_folds_a_read_replays_only_from_constants_it_made(of_argument):
    """``lr.compile(replay=True)``: a fold of constants the call made on the host (the
    causal-mask check) is the same at every call of the signature, so the forward
    replays; a fold of its argument refuses the replay (each call takes its branch)."""
    torch.manual_seed(6)
    eager = _Gated(of_argument)
    lazy = _Gated(of_argument)
    lazy.load_state_dict(eager.state_dict())
    lr.compile(lazy.to(DEV), replay=True)
    _fresh()
    with torch.no_grad():
        for i in range(5):
            x = torch.randn(2, 5, 4) - (4.0 if i == 3 else 0.0)   # (one call fails positive)
            assert_same(lazy(x.to(DEV)).cpu(), eager(x), 1e-5, 1e-6, what=f"call {i}")
    m = lr.metrics()
    if of_argument:
        assert m["replays"] == 0 and m["replay_misses"], m
    else:
        assert m["replays"] >= 3, m["replay_misses"]


class _Short(nn.Module):
    """A branch on a value folded from a constant made for T: ``(arange(T) < 14).all()``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        short = (torch.arange(x.shape[1], device=x.device) < 14).all()
        return self.lin(x) * (2.0 if bool(short) else -1.0)


def test_a_forward_replayed_across_sizes_computes_its_fold_again():
    """Replay across sizes (a plan vouching for the size arithmetic): the fold is made
    again for the new length and must come out as traced. Traced at 9-13 (true), a call
    at 15 would give false: traced, the other branch taken; at 14, true: replayed."""
    import shapeinfer
    torch.manual_seed(0)
    base = _Short()
    plan = shapeinfer.analyze(base, args=(torch.randn(2, 7, 4),), dims={"x": ("B", "T", None)})
    lazy = lr.compile(_Short().to(DEV), shapes=plan, replay=True)
    lazy.load_state_dict(base.state_dict())
    _fresh()
    across = []
    with torch.no_grad():
        for T in [9, 10, 11, 12, 13, 15, 14]:
            x = torch.randn(2, T, 4)
            before = lr.metrics()["replays_across_sizes"]
            assert_same(lazy(x.to(DEV)).cpu(), base(x), 1e-5, 1e-6, what=f"T={T}")
            across.append(lr.metrics()["replays_across_sizes"] - before)
    assert across[-2:] == [0, 1], (across, lr.metrics()["replay_misses"])


def test_a_bert_step_with_a_padding_mask_from_its_input_replays_whole():
    """transformers' encoders test the padding mask on the host (``mask.all()``: no mask
    at all where nothing is padded): computed again from each call's token ids, batches
    with and without padding each replay the whole step, with eager torch's losses."""
    eager = tiny_bert(layers=1)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(1, 99, (2, 7), generator=gen) for _ in range(10)]
    for ids in batches[1::2]:
        ids[0, -3:] = 0   # padded
    m = _steps_match_eager(
        eager, copy.deepcopy(eager).to(DEV), lambda ps: torch.optim.AdamW(ps, 1e-3),
        lambda model, ids: model(input_ids=ids, attention_mask=ids != 0)
        .last_hidden_state.pow(2).mean(), batches, rel=1e-4)
    assert m["step_replays"] >= 3, m
    assert not any("computed on the host" in k for k in m["replay_misses"]), \
        m["replay_misses"]


class _ListIndexedTokens(nn.Module):
    """What GPT-Neo, DeBERTa and BERT-like encoders do inside a step: a mask value made as
    a tensor from a Python number (``torch.tensor(finfo.min, device=...)``), a scale made
    as a CPU tensor and divided into a lazy one (``torch.sqrt(torch.tensor(d))``), and a
    test of the last and first tokens read through an index list (``pad in ids[:, [-1,
    0]]``), which torch turns into a new CPU tensor copied to the device; and LongT5's
    locality mask, a larger boolean one made on the CPU each call and moved (VideoMAE's
    position table is larger still)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, ids):
        h = self.emb(ids)
        low = torch.tensor(torch.finfo(h.dtype).min, dtype=h.dtype, device=h.device)
        h = torch.where(ids[..., None] == 0, low.clamp(min=-5.0), h)
        h = h / torch.sqrt(torch.tensor(h.size(-1), dtype=torch.float))
        if 0 in ids[:, [-1, 0]]:
            h = h * 0.5
        near = (torch.arange(300)[:, None] - torch.arange(300)[None]).abs() < 2   # 90000
        t = ids.shape[1]
        h = h + near.to(h.device)[:t, :t].float() @ h * 0.1
        return self.out(h).mean()


def test_a_step_copying_cpu_tensors_it_makes_itself_replays_by_their_values():
    # such copies made every trace were new values each time: the traces never agreed
    # (GPT-Neo, Falcon) or the host test was refused (ConvBERT, DeBERTa and nine more),
    # and the step was traced every call
    torch.manual_seed(0)
    eager = _ListIndexedTokens()
    lazy = _ListIndexedTokens().to(DEV)
    lazy.load_state_dict(eager.state_dict())
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(1, 20, (2, 5), generator=gen) for _ in range(12)]
    for ids in batches[2::3]:
        ids[1, -1] = 0   # the host test's other answer: its own signature
    m = _steps_match_eager(eager, lazy, lambda ps: torch.optim.SGD(ps, 0.1),
                           lambda model, ids: model(ids), batches, rel=1e-5)
    assert m["step_replays"] >= 6, (m["step_replays"], m["replay_misses"])
    assert not any("never agreed" in k or "computed on the host" in k
                   for k in m["replay_misses"]), m["replay_misses"]


def test_a_step_copying_a_cpu_tensor_held_elsewhere_is_not_replayed_with_a_stale_value():
    # a CPU tensor the step does not make (a closure's, a global's) may change between
    # calls: still alive when the step ends, it is not a constant by its value
    torch.manual_seed(0)
    model = nn.Linear(3, 1).to(DEV)
    scale = torch.tensor(1.0)
    x = torch.randn(4, 3)

    def step(x):
        with torch.no_grad():
            return (model(x.to(DEV)) * scale.to(DEV)).mean()

    whole = lr.compile_step(step, model)
    _fresh()
    for i in range(8):
        scale.fill_(float(i // 3 + 1))   # the same for three calls, then another
        with torch.no_grad():
            want = (model(x.to(DEV)).cpu() * scale).mean()
        assert whole(x).item() == pytest.approx(want.item(), rel=1e-6), i
