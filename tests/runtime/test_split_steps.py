"""Training steps whose lengths vary, against eager torch: a seq2seq ``nn.Transformer``
and steps cut by a read in their middle (the inputs embedded before the read are data of
the second graph, beside activations the first one left padded). Lengths vary without
marks (automatic dynamic) or with them, and no graph may compile exactly."""

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from varying_seq2seq import Seq2Seq  # noqa: E402


@pytest.fixture(autouse=True)
def _poisoned():
    """Host padding holds NaN (ints: a large number), so a leak shows."""
    old = lr.config.poison_padding
    lr.config.poison_padding = True
    yield
    lr.config.poison_padding = old


def _seq2seq_losses(model, opt, device, sizes):
    losses = []
    for i, (S, T) in enumerate(sizes):
        g = torch.Generator().manual_seed(i)
        src = torch.randint(1, 20, (3, S), generator=g)
        src[0, -2:] = 0
        tgt = torch.randint(1, 20, (3, T + 1), generator=g)
        tgt[1, -1] = 0
        src, tgt = src.to(device), tgt.to(device)
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 20), tgt[:, 1:].reshape(-1), ignore_index=0)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device is DEV:
            lr.mark_step()
        losses.append(loss.item())
    return losses


def test_a_transformer_seq2seq_whose_lengths_vary_runs_padded():
    """Source and target lengths both vary, now and then equal (or one apart). The
    decoder's check of its causal mask (``(mask == causal).all()``, a read) is computed on
    the host, so each step is one graph; the slice ``tgt[:, :-1]``'s learnt length and the
    T-1 derived beside it are one padded length in the weights' gradients. Before: two
    graphs per step, the second compiled exactly at nearly every step."""
    torch.manual_seed(0)
    eager = Seq2Seq(vocab=20, d=16, heads=2, layers=1, ff=32)
    lazy = copy.deepcopy(eager).to(DEV)
    # (SGD: Adam would turn the key bias's gradient, zero but for rounding, into steps
    # of lr in either direction)
    opt_e = torch.optim.SGD(eager.parameters(), 0.1, momentum=0.9)
    opt_l = torch.optim.SGD(lazy.parameters(), 0.1, momentum=0.9)
    sizes = [(5, 4), (6, 5), (7, 4), (9, 5), (6, 6), (10, 4)]
    lr.mark_step()
    lr.reset_metrics()
    with warnings.catch_warnings():   # (torch's note on mixed mask types, both sides)
        warnings.simplefilter("ignore")
        want = _seq2seq_losses(eager, opt_e, "cpu", sizes)
        got = _seq2seq_losses(lazy, opt_l, DEV, sizes)
    assert_same(torch.tensor(got), torch.tensor(want), 1e-4, 1e-5, what="losses")
    for p, q in zip(lazy.parameters(), eager.parameters()):
        assert_same(p.detach(), q.detach(), 1e-4, 1e-5, what="parameters")
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["graphs_executed"] == len(sizes) and m["host_folds"] >= len(sizes), m
    # the first two steps exact (two graph families: momentum buffers are made in the
    # first), then one executable per bucket of the source length (8, 16)
    assert m["padded_executions"] == len(sizes) - 2 and m["compiles"] == 4, m


def test_a_transformer_seq2seq_step_replays_whole_at_lengths_never_traced():
    """Under ``compile_step`` the decoder's causal-mask check (a value computed on the
    host from constants made for T) no longer refuses the step: the traces keep it, and a
    replay at lengths never traced makes those constants again and checks it comes out
    as traced. Losses and parameters as eager torch's. Before: every step traced."""
    torch.manual_seed(0)
    eager = Seq2Seq(vocab=20, d=16, heads=2, layers=1, ff=32)
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e = torch.optim.SGD(eager.parameters(), 0.1, momentum=0.9)
    opt_l = torch.optim.SGD(lazy.parameters(), 0.1, momentum=0.9)

    def step(model, opt, src, tgt):
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 20), tgt[:, 1:].reshape(-1), ignore_index=0)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    whole = lr.compile_step(lambda src, tgt: step(lazy, opt_l, src, tgt), lazy, opt_l)
    sizes = [(9, 5), (10, 6), (11, 7), (12, 5), (13, 6), (14, 7), (15, 6), (16, 7),
             (10, 5), (12, 7), (11, 6), (15, 7)]   # (S, T): buckets 16 and 8
    lr.mark_step()
    lr.reset_metrics()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (S, T) in enumerate(sizes):
            g = torch.Generator().manual_seed(i)
            src = torch.randint(1, 20, (3, S), generator=g)
            src[0, -2:] = 0
            tgt = torch.randint(1, 20, (3, T + 1), generator=g)
            want = step(eager, opt_e, src, tgt).item()
            assert whole(src, tgt).item() == pytest.approx(want, rel=1e-4, abs=1e-5), i
    for p, q in zip(lazy.parameters(), eager.parameters()):
        assert_same(p.detach(), q.detach(), 1e-4, 1e-5, what="parameters")
    m = lr.metrics()
    assert m["step_replays_across_sizes"] >= 4, m["replay_misses"]
    assert m["exact_compiles"] == {}, m["recompile_reasons"]


def _split_step(emb, head, ids, device):
    """Embeds ``ids``, reads a value (the cut), then uses ``ids`` again: the targets of a
    loss and, in the backward, the embedding's indices."""
    h = emb(ids)
    if bool((h.abs().sum() > 0).item()):   # a read: the graph before it runs here
        h = h * 2
    logits = head(torch.tanh(h))
    loss = F.cross_entropy(logits.transpose(1, 2), ids % 7)
    loss.backward()
    if device is DEV:
        lr.mark_step()
    return loss.detach()


def test_ids_copied_in_before_a_read_keep_their_automatic_marks():
    """The ids' length is learnt dynamic by the first graph; the second graph gets the
    same ids as data of an earlier step (not copied in since its barrier): it lays them
    out as the first graph did. Before: exact there, while the embedding's gradient came
    padded (its padded lowering failed: an exact compile at every length)."""
    torch.manual_seed(1)
    emb, head = nn.Embedding(11, 8), nn.Linear(8, 7)
    emb_l, head_l = copy.deepcopy(emb).to(DEV), copy.deepcopy(head).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    for T in (9, 10, 12, 11):
        ids = torch.randint(0, 11, (2, T), generator=torch.Generator().manual_seed(T))
        want = _split_step(emb, head, ids, "cpu")
        got = _split_step(emb_l, head_l, ids.to(DEV), DEV)
        assert_same(got, want, 1e-5, 1e-6, what=f"loss at T={T}")
        for p, q in ((emb_l.weight, emb.weight), (head_l.weight, head.weight)):
            assert_same(p.grad, q.grad, 1e-5, 1e-6, what=f"gradient at T={T}")
            p.grad = q.grad = None
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    # the first length exact, then one executable for each graph at the bucket of 16
    assert m["compiles"] <= 4, m["recompile_reasons"]


def test_one_length_padded_at_two_buckets_is_padded_alike():
    """A (T, T) mask marked on its own and the ids' ``L - 1`` (L = T + 1 marked): at T = 4
    the mask's bucket is 4 and the ids' 8. Where they meet, the mask is padded to 8 too.
    Before: the broadcast refused (two paddings of one length), an exact compile."""
    torch.manual_seed(2)
    emb = torch.randn(11, 8)
    lr.reset_metrics()
    for T in (4, 7):
        ids = torch.randint(0, 11, (2, T + 1), generator=torch.Generator().manual_seed(T))
        mask = torch.full((T, T), float("-inf")).triu(1)
        outs = []
        for x, m, w in ((ids, mask, emb),
                        (lr.mark_dynamic(ids.clone(), 1, "L").to(DEV),
                         lr.mark_dynamic(lr.mark_dynamic(mask.clone(), 0, "M"), 1, "M").to(DEV),
                         emb.to(DEV))):
            h = F.embedding(x[:, :-1], w)
            scores = h @ h.transpose(1, 2) + m
            outs.append(scores.softmax(-1) @ h)
        assert_same(outs[1], outs[0], 1e-5, 1e-6, what=f"attention at T={T}")
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["buckets"]["M"] == [8], m["buckets"]


def _read_then_loss(emb, ids, labels, device):
    """A read of the ids' mean cuts the step; after it, only the ids (laid out by the first
    graph's automatic marks) and the labels (copied in before the cut, unused before it)
    enter the second graph: no padded result of the first."""
    scale = 1.0 + float(ids.float().mean().item()) / 100
    loss = F.cross_entropy((emb(ids) * scale).transpose(1, 2), labels)
    loss.backward()
    if device is DEV:
        lr.mark_step()
    return loss.detach()


def test_a_graph_after_a_read_learns_its_other_inputs_lengths():
    """The labels' length is learnt by the second graph's family as it would be without
    the laid ids beside them (marks of an earlier graph do not stop the learning, as a
    user's marks or padded results do)."""
    torch.manual_seed(3)
    emb = nn.Embedding(11, 5)
    emb_l = copy.deepcopy(emb).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    for T in (9, 10, 13, 12):
        g = torch.Generator().manual_seed(T)
        ids, labels = torch.randint(0, 11, (2, T), generator=g), torch.randint(0, 5, (2, T),
                                                                               generator=g)
        want = _read_then_loss(emb, ids, labels, "cpu")
        got = _read_then_loss(emb_l, ids.to(DEV), labels.to(DEV), DEV)
        assert_same(got, want, 1e-5, 1e-6, what=f"loss at T={T}")
        assert_same(emb_l.weight.grad, emb.weight.grad, 1e-5, 1e-6, what=f"gradient at T={T}")
        emb.weight.grad = emb_l.weight.grad = None
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["padded_executions"] >= 5, m["recompile_reasons"]
