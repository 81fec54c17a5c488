"""Offsets read from values: a slice, select or their scatter whose start changes between
steps (``cache[:, pos] = k``, ``x[:, s:s + 8]``) runs with its start as a run-time input
once automatic dynamic has seen it move: one graph for every start, not one per start.
Eager torch is the oracle at random starts (negative, strided, at the end of the dim)."""

import random

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same


def _slice(s, x):
    return (x[:, s:s + 8] * 2).sum(1)


def _strided(s, x):
    return x[:, s:s + 9:3] + 1


def _strided_write(s, x):
    y = x.clone()
    y[:, s:s + 3:2] = 7.0
    return y


def _select_negative(s, x):
    return x[-s - 1] * 1.5


def _select_write(s, x, k):
    c = x.clone()
    c[:, :, s] = k
    return c


def _slice_write(s, x, k):
    c = x.clone()
    c[:, :, s:s + 1] = k
    return c


def _narrow(s, x):
    return torch.narrow(x, 1, s, 5).exp()


def _user_scatter(s, x):   # torch's own bounds: negative, the end left out at -3
    return torch.slice_scatter(x, torch.ones(4, 3, device=x.device), 1, -s - 3,
                               None if s == 0 else -s)


def _slice_grad(s, x):
    (x[:, s:s + 8].square()).sum().backward()
    return x.grad


def _select_grad(s, x):
    (x[:, s] * torch.arange(4.0, device=x.device)).sum().backward()
    return x.grad


CASES = {   # name: (function, argument shapes, largest start)
    "slice": (_slice, [(4, 64)], 56),
    "strided slice": (_strided, [(4, 64)], 55),
    "strided write": (_strided_write, [(4, 64)], 61),
    "select, negative index": (_select_negative, [(8, 5)], 7),
    "select write (a KV cache)": (_select_write, [(2, 3, 32, 4), (2, 3, 4)], 31),
    "slice write": (_slice_write, [(2, 3, 32, 4), (2, 3, 1, 4)], 31),
    "narrow": (_narrow, [(4, 64)], 59),
    "slice_scatter, torch's bounds": (_user_scatter, [(4, 64)], 61),
    "slice backward": (_slice_grad, [(4, 64)], 56),
    "select backward": (_select_grad, [(4, 64)], 63),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cut_at_moving_starts_matches_torch_with_two_compiles(name):
    fn, shapes, top = CASES[name]
    rng = random.Random(name)
    starts = [2, 3, top] + rng.sample(range(2, top), 3)
    grads = name.endswith("backward")
    lr.reset_metrics()
    for s in starts:
        args = [torch.randn(*shape, requires_grad=grads and i == 0)
                for i, shape in enumerate(shapes)]
        lazy = [a.detach().to(DEV).requires_grad_(a.requires_grad) for a in args]
        assert_same(fn(s, *lazy).cpu(), fn(s, *args), what=f"{name} at {s}")
    m = lr.metrics()
    # the first start compiles exactly; the second teaches the family its offsets
    assert m["compiles"] == 2, m["recompile_reasons"]
    assert any("offset at node" in line for line in m["automatic_dynamic"]), m


def _decode(device, steps, grow, L=40):
    """A decoding loop over a static KV cache: write position ``pos``, attend to the
    positions written so far (a mask over the whole cache, or ``grow``: a slice of it)."""
    g = torch.Generator().manual_seed(0)
    B, H, D = 2, 3, 8
    kc = torch.zeros(B, H, L, D, device=device)
    vc = torch.zeros(B, H, L, D, device=device)
    w = torch.randn(D, 3 * D, generator=g).to(device)
    xs = torch.randn(steps, B, H, 1, D, generator=g)
    outs = []
    for pos in range(steps):
        q, k, v = (xs[pos].to(device) @ w).split(D, -1)
        kc[:, :, pos] = k[:, :, 0]
        vc[:, :, pos:pos + 1] = v
        if grow:
            a = F.softmax(q @ kc[:, :, :pos + 1].transpose(-1, -2) * 0.3, -1)
            h = a @ vc[:, :, :pos + 1]
        else:
            seen = torch.arange(L, device=device) <= pos
            att = (q @ kc.transpose(-1, -2) * 0.3).masked_fill(~seen, float("-inf"))
            h = F.softmax(att, -1) @ vc
        if device == DEV:
            lr.mark_step()
        outs.append(h.cpu())
    return torch.stack(outs), kc.cpu()


@pytest.mark.parametrize("grow", [False, True], ids=["mask", "growing slice"])
def test_decoding_over_a_static_cache_compiles_a_few_graphs_not_one_per_position(grow):
    lr.reset_metrics()
    steps = 18
    got = _decode(DEV, steps, grow)
    assert_same(got, _decode("cpu", steps, grow), rtol=1e-4, atol=1e-5)
    m = lr.metrics()
    # positions 0 and 1 are constants (as torch.compile specializes them) and the second
    # moving start is learnt: 4 graphs; a growing slice adds one per bucket of its length
    assert m["compiles"] <= (8 if grow else 4), m["recompile_reasons"]
    assert m["exact_compiles"] == {}, m


def test_an_offset_beside_a_dynamic_batch_dim():
    lr.reset_metrics()
    for b, s in ((5, 0), (6, 7), (7, 3), (5, 12)):
        x = torch.randn(b, 20)
        xl = x.to(DEV)
        lr.mark_dynamic(xl, 0)
        assert_same((xl[:, s:s + 8].exp() * xl[:, s + 1, None]).sum(0).cpu(),
                    (x[:, s:s + 8].exp() * x[:, s + 1, None]).sum(0))
    assert lr.metrics()["compiles"] == 2, lr.metrics()["recompile_reasons"]


def test_comparing_an_int64_tensor_with_a_changing_int_does_not_recompile():
    x = torch.randn(10) * 10
    xl = x.to(DEV)
    ops = (torch.le, torch.lt, torch.eq, torch.ne, torch.gt, torch.ge)
    for op in ops:
        op(xl.long(), 5).cpu()
    lr.reset_metrics()
    for n in (2, 7, -3, 2 ** 40):
        for op in ops:
            assert torch.equal(op(xl.long(), n).cpu(), op(x.long(), n))
    assert lr.metrics()["compiles"] == 0, lr.metrics()["recompile_reasons"]


def test_a_value_grown_by_cat_each_step_compiles_once_per_bucket():
    """``ids = cat([ids, new], 1)`` every step (a generation loop's ids, a dynamic KV
    cache): the result is padded to its length's bucket, and the next step's symbol,
    derived from the step before, gets a name of its own graph (not ``T+1+1``). Where
    the grown length enters a new bucket (16 -> 17), the input is padded to that bucket
    too (``dynamic.Rebucket``): the next step (17 -> 18) runs the same executable, one
    compile per bucket where there were two."""
    emb = torch.randn(50, 6)
    ids = torch.randint(0, 50, (3, 5))
    embl, idsl = emb.to(DEV), ids.to(DEV)
    lr.reset_metrics()
    for step in range(24):
        def grow(e, x):
            h = e[x].mean(1)                                   # over the grown length
            new = (h.sum(1, keepdim=True).abs() * 7).long() % 50
            return torch.cat([x, new], 1), h
        ids, want = grow(emb, ids)
        idsl, got = grow(embl, idsl)
        assert_same(got.cpu(), want, what=f"step {step}")
    assert torch.equal(idsl.cpu(), ids)
    m = lr.metrics()
    # lengths 5 to 28: the first graph exact, the second padded (the length learnt),
    # the third names the grown symbol ~0, then one per bucket (16, 32), both symbols in it
    assert m["compiles"] == 5 and m["exact_compiles"] == {}, m["recompile_reasons"]
    assert all("~0=" in r and "~0+1=" in r for r in m["recompile_reasons"][3:])


def test_two_values_grown_one_apart_share_each_bucket():
    """A generation loop's ids and its cache (``generate`` with a dynamic cache): both
    grow by ``cat`` every step, the cache one shorter. Where the longer enters a new
    bucket, the shorter (there on the next step) is padded to it too
    (``dynamic._lockstep``): one compile per bucket, not two (9 graphs for these 40 steps
    without it)."""
    emb = torch.randn(50, 6)
    ids = torch.randint(0, 50, (3, 5))
    cache = emb[ids[:, :-1]]
    embl, idsl, cachel = emb.to(DEV), ids.to(DEV), cache.to(DEV)
    lr.reset_metrics()

    def grow(e, x, c):
        c = torch.cat([c, e[x[:, -1:]]], 1)
        h = c.mean(1) + e[x].mean(1)
        new = (h.sum(1, keepdim=True).abs() * 7).long() % 50
        return torch.cat([x, new], 1), c, h
    for step in range(40):   # (ids 5 -> 45 long)
        ids, cache, want = grow(emb, ids, cache)
        idsl, cachel, got = grow(embl, idsl, cachel)
        assert_same(got.cpu(), want, what=f"step {step}")
    assert torch.equal(idsl.cpu(), ids) and torch.equal(cachel.cpu(), cache)
    m = lr.metrics()
    # exact, padded (the length learnt), the grown symbols named, then buckets 16, 32, 64
    assert m["compiles"] == 6 and m["exact_compiles"] == {}, m["recompile_reasons"]
    assert all("~0=" in r and "~1=" in r for r in m["recompile_reasons"][3:])
