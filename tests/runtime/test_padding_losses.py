"""Padding rules of losses and per-sample layers against eager torch, at several random
sizes inside one bucket with the padding poisoned (NaN, a large int or True): pointwise
losses reduced over a padded batch (binary cross entropy with logits, smooth L1's
gradient, MSE), margin losses over padded rows, ``nn.Bilinear``, instance norm over a
padded batch (its batch norm over (sample, channel) pairs, weight and running statistics
repeated per sample), a target marked with a symbol of its own meeting the output of the
same length computed from another input, cross entropy over a padded class dim (a
contrastive loss's in-batch negatives), and CTC loss over padded frames and labels. One
compile each, none at an exact shape."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same
from test_padding_rules import _check_padded, _poisoned_padding, _sizes  # noqa: F401


def _one_compile(m, runs):
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == runs, m["recompile_reasons"]


def _gen(n):
    return torch.Generator().manual_seed(n)


def pointwise_losses(x, y, r, w):
    """x (B, 5) features, y (B, 5) labels in [0, 1], r (B, 5) regression targets. (Sums
    scaled down: the check's sine of a sum near 150 turns its float32 rounding, a few ulp
    apart between any two summation orders, into gradients 1e-4 apart.)"""
    z = x @ w
    pos = torch.linspace(0.5, 2.0, 5)
    weight = torch.linspace(1.0, 0.2, 5)
    if z.device.type != "cpu":
        pos, weight = pos.to(z.device), weight.to(z.device)
    return {
        "bce_mean": F.binary_cross_entropy_with_logits(z, y),
        "bce_sum": F.binary_cross_entropy_with_logits(z, y, weight, reduction="sum",
                                                      pos_weight=pos) * 0.05,
        "bce_none": F.binary_cross_entropy_with_logits(z, y, pos_weight=pos,
                                                       reduction="none") * 1.0,
        "smooth_l1_mean": F.smooth_l1_loss(z, r, beta=0.5),
        "smooth_l1_sum": F.smooth_l1_loss(z, r, reduction="sum") * 0.05,
        "smooth_l1_none": F.smooth_l1_loss(z, r, reduction="none", beta=2.0) * 1.0,
        "mse": F.mse_loss(z, r),
    }


def test_pointwise_losses_over_a_padded_batch():
    w = torch.randn(5, 5, generator=_gen(0)).requires_grad_()

    def inputs(B):
        g = _gen(B)
        return (torch.randn(B, 5, generator=g), torch.rand(B, 5, generator=g),
                torch.randn(B, 5, generator=g) * 2)
    sizes = _sizes(9, 16)
    m = _check_padded(pointwise_losses, inputs, [(0, "B")] * 3, sizes, params=(w,),
                      rtol=1e-4, atol=1e-5)
    _one_compile(m, len(sizes))


def margin_losses(x, t, labels, x1, x2, w, bw, bb):
    """x (B, 6) scores, t (B,) classes, labels (B, 6) label lists ended by -1, x1 (B, 3)
    and x2 (B, 4) the two inputs of a bilinear map (sums scaled down as in
    ``pointwise_losses``)."""
    z = x @ w
    cw = torch.linspace(0.5, 1.5, 6, dtype=z.dtype)
    if z.device.type != "cpu":
        cw = cw.to(z.device)
    return {
        "multi_margin": F.multi_margin_loss(z, t),
        "multi_margin_p2": F.multi_margin_loss(z, t, p=2, margin=0.5, weight=cw,
                                               reduction="sum") * 0.05,   # (as above)
        "multi_margin_none": F.multi_margin_loss(z, t, reduction="none") * 1.0,
        "multilabel": F.multilabel_margin_loss(z, labels),
        "multilabel_none": F.multilabel_margin_loss(z, labels, reduction="none") * 1.0,
        "bilinear": F.bilinear(x1, x2, bw, bb),
    }


def test_margin_losses_and_bilinear_over_padded_rows():
    params = [torch.randn(6, 6, generator=_gen(1)).requires_grad_(),
              torch.randn(2, 3, 4, generator=_gen(2)).requires_grad_(),
              torch.randn(2, generator=_gen(3)).requires_grad_()]

    def inputs(B):
        g = _gen(B)
        labels = torch.randint(0, 6, (B, 6), generator=g)
        ends = torch.randint(0, 7, (B,), generator=g)
        labels[torch.arange(6)[None, :] >= ends[:, None]] = -1
        return (torch.randn(B, 6, generator=g), torch.randint(0, 6, (B,), generator=g), labels,
                torch.randn(B, 3, generator=g), torch.randn(B, 4, generator=g))
    sizes = _sizes(9, 16)
    m = _check_padded(margin_losses, inputs, [(0, "B")] * 5, sizes, params=params,
                      rtol=1e-4, atol=1e-5)
    _one_compile(m, len(sizes))


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine_running_stats"])
def test_instance_norm_over_a_padded_batch_and_height(affine):
    """nn.InstanceNorm2d runs batch norm over (1, B * C, H, W): its channels are the
    padded batch's (sample, channel) pairs, its weight and running statistics repeated per
    sample; the running statistics are averaged back over the true samples."""
    torch.manual_seed(0)
    eager = nn.InstanceNorm2d(3, affine=affine, track_running_stats=affine)
    lazy = copy.deepcopy(eager).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    sizes = [(5, 10), (7, 12), (8, 16), (6, 9)]   # (B, H): buckets 8 and 16
    for B, H in sizes:
        x = torch.randn(B, 3, H, 6, generator=_gen(B * H))
        xe = x.clone().requires_grad_()
        xl = lr.mark_dynamic(lr.mark_dynamic(x, 0, "B"), 2, "H").to(DEV).requires_grad_()
        outs = [m(v) for m, v in ((eager, xe), (lazy, xl))]
        for o in outs:
            (o.sin() * 1.5).sum().backward()
        lr.mark_step()
        assert_same(outs[1], outs[0].detach(), 1e-4, 1e-5, what=f"out at {B, H}")
        assert_same(xl.grad, xe.grad, 1e-4, 1e-5, what=f"grad x at {B, H}")
        for (name, a), b in zip(eager.named_parameters(), lazy.parameters()):
            assert_same(b.grad, a.grad, 1e-4, 1e-5, what=f"grad {name} at {B, H}")
            a.grad = b.grad = None
        for (name, a), b in zip(eager.named_buffers(), lazy.buffers()):
            assert_same(b, a, 1e-5, 1e-6, what=f"{name} at {B, H}")
    _one_compile(lr.metrics(), len(sizes))


def downsampled(x, target, w):
    """x (B, 4, T) through a convolution and a pool to (B, 4, T // 2), against a target
    of that length marked with a symbol of its own."""
    h = F.max_pool1d(F.conv1d(x, w, padding=1).relu(), 2)
    return {"mse": F.mse_loss(h, target), "smooth_l1": F.smooth_l1_loss(h, target),
            "diff": (h - target) * 2}


@pytest.mark.parametrize("sizes,s_bucket", [([20, 26, 32], 16), ([33, 40, 50], 32)],
                         ids=["same_bucket", "rebucketed"])
def test_a_target_marked_apart_meets_the_output_of_its_length(sizes, s_bucket):
    """The output's T // 2 (derived from T) and the target's own S are one length in each
    trace: the rules take them as one (with S padded as T // 2 is where their buckets
    differ: 16 of T = 33 padded to 32, S = 16 to 16), one executable for all."""
    w = torch.randn(4, 4, 3, generator=_gen(4)).requires_grad_()

    def inputs(T):
        g = _gen(T)
        return torch.randn(2, 4, T, generator=g), torch.randn(2, 4, T // 2, generator=g)
    m = _check_padded(downsampled, inputs, [(2, "T"), (2, "S")], sizes, params=(w,),
                      rtol=1e-4, atol=1e-5)
    _one_compile(m, len(sizes))
    assert m["buckets"]["S"] == [s_bucket], m["buckets"]


def contrastive(x, y, wx, wy):
    """In-batch negatives (CLIP's loss): a padded batch's embeddings scored against each
    other, the classes of the cross entropy being the batch itself."""
    u = F.normalize(x @ wx, dim=-1)
    v = F.normalize(y @ wy, dim=-1)
    logits = u @ v.T * 5.0
    labels = torch.arange(x.shape[0], device=x.device)
    w = torch.linspace(0.5, 1.5, x.shape[0], device=x.device)
    return {"clip": (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2,
            "weighted": F.cross_entropy(logits, labels, weight=w, label_smoothing=0.1),
            "none": F.cross_entropy(logits, labels.flip(0), reduction="none") * 1.0}


def test_cross_entropy_over_a_padded_class_dim():
    params = [torch.randn(8, 6, generator=_gen(5)).requires_grad_(),
              torch.randn(4, 6, generator=_gen(6)).requires_grad_()]

    def inputs(B):
        g = _gen(B)
        return torch.randn(B, 8, generator=g), torch.randn(B, 4, generator=g)
    sizes = _sizes(9, 16)
    m = _check_padded(contrastive, inputs, [(0, "B")] * 2, sizes, params=params,
                      rtol=1e-4, atol=1e-5)
    _one_compile(m, len(sizes))


def test_a_target_past_the_true_classes_of_a_padded_class_dim_raises():
    """Checked against the true class count (13), not the bucket's (16)."""
    lr.mark_step()
    lr.reset_metrics()
    logits = lr.mark_dynamic(torch.randn(13, 13), 1, "C").to(DEV)
    target = torch.tensor([0, 12, 13]).to(DEV)
    loss = F.cross_entropy(logits[:3], target)
    with pytest.raises(lr.IndexCheckError, match="the class dim is dynamic"):
        loss.item()
    assert lr.metrics()["padded_executions"] >= 1


def ctc_losses(x, targets, il, tl, w):
    """x (T, B, 4) frames, targets (B, S) labels 1..5 padded to the longest, lengths on the
    host (as a speech recognizer's batch); sums scaled down as in ``pointwise_losses``."""
    lp = (x @ w).log_softmax(-1)
    impossible = tl.clone()
    impossible[0] = il[0] + 1   # (more labels than frames: an infinite loss, zeroed)
    return {"mean": F.ctc_loss(lp, targets, il, tl),
            "sum": F.ctc_loss(lp, targets, il, tl, reduction="sum") * 0.05,
            "none": F.ctc_loss(lp, targets, il, tl, reduction="none") * 0.05,
            "zero_infinity": F.ctc_loss(lp, targets, il, impossible.clamp(max=targets.shape[1]),
                                        zero_infinity=True)}


def test_ctc_loss_over_padded_frames_and_labels():
    """Frames (T) and labels (S) padded: each row's lengths bound what it reads; log_alpha's
    width 2 S + 1 is a symbol of S. One compile for batches in one bucket of T and S."""
    w = torch.randn(4, 6, generator=_gen(7)).requires_grad_()
    wl = w.detach().to(DEV).requires_grad_()
    lr.mark_step()
    lr.reset_metrics()
    sizes = [(21, 6), (30, 8), (25, 5), (32, 7)]   # (T, S): buckets 32 and 8
    for T, S in sizes:
        g = _gen(T * S)
        x = torch.randn(T, 3, 4, generator=g)
        tl = torch.tensor([S, max(S - 2, 1), 3])
        il = torch.tensor([T, T - 3, T - 7])
        targets = torch.randint(1, 6, (3, S), generator=g)
        xe = x.clone().requires_grad_()
        xl = lr.mark_dynamic(x, 0, "T").to(DEV).requires_grad_()
        tgl = lr.mark_dynamic(targets, 1, "S").to(DEV)
        want = ctc_losses(xe, targets, il, tl, w)
        got = ctc_losses(xl, tgl, il, tl, wl)
        for outs in (want, got):
            sum((v.sin() * (i + 1)).sum() for i, v in enumerate(outs.values())).backward()
        lr.mark_step()
        for k in want:
            assert_same(got[k], want[k].detach(), 1e-4, 1e-5, what=f"{k} at {T, S}")
        assert_same(xl.grad, xe.grad, 1e-4, 1e-5, what=f"grad x at {T, S}")
        assert_same(wl.grad, w.grad, 1e-4, 1e-5, what=f"grad w at {T, S}")
        w.grad = wl.grad = None
    m = lr.metrics()
    _one_compile(m, len(sizes))
    assert m["buckets"]["2*S+1"] == [17], m["buckets"]
