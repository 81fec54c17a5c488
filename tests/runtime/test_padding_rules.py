"""Padding rules against eager torch: slicing, selecting and concatenating inside a padded
dim, roll, convolutions along padded batch and spatial dims, batch norm statistics over
padded dims, the LSTM and GRU cells and layers with a padded batch, an LSTM with padded
time and batch dims (and with a packed sequence's per-row mask), and the CNN/LSTM
examples trained with a dynamic batch. Each test runs several random sizes inside one
bucket: values and gradients must equal eager torch (padding never leaks: inputs' padding
holds NaN), with one compile per bucket."""

import copy
import functools
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same, load_example

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from varying_vision import DETR, YOLO, Attention, Swin  # noqa: E402


@pytest.fixture(autouse=True)
def _poisoned_padding():
    """Inputs padded on the host hold NaN (ints: a large number) in their padding, so a
    rule that lets padding leak shows it (zeros would hide a leak into a sum)."""
    old = lr.config.poison_padding
    lr.config.poison_padding = True
    yield
    lr.config.poison_padding = old


def _sizes(lo, hi, k=3, seed=0):
    """``k`` distinct random sizes in [lo, hi] (one pow2 bucket when hi is a power of 2),
    always including ``hi`` (a full bucket: no padding at all)."""
    return random.Random(seed).sample(range(lo, hi), k - 1) + [hi]


def _weighted_sum(outs):
    """A scalar whose gradient reaches every output element (a nonlinear one: the plain
    sum of a batch norm's output has zero gradient)."""
    return sum((v.float().sin() * (i + 1)).sum() for i, v in enumerate(outs.values())
               if v.is_floating_point() and v.requires_grad)


def _backward(total) -> None:
    if isinstance(total, torch.Tensor):   # (else no output has a gradient: integers)
        total.backward()


def _marked(x, marks):
    """``x`` with ``marks`` (one (dim, name) pair, or a list of them, maybe empty) marked
    dynamic."""
    for d, name in [marks] if marks and type(marks[0]) is int else marks:
        x = lr.mark_dynamic(x, d, name)
    return x


def _rgb_images(n):
    """A batch of two 3-channel images of size ``n`` (H, W), seeded by H."""
    return [torch.randn(2, 3, *n, generator=torch.Generator().manual_seed(n[0]))]


def _module_call(module):
    """(``fn(x, *params)``: ``module`` applied to x with those parameters, its output as
    ``{"out": y}`` unless a dict; copies of its parameters, requiring grad)."""
    names = [n for n, _ in module.named_parameters()]

    def fn(x, *ps):
        out = torch.func.functional_call(module, dict(zip(names, ps)), (x,))
        return out if isinstance(out, dict) else {"out": out}
    return fn, [p.detach().clone().requires_grad_() for p in module.parameters()]


def _check_images_through(module, sizes, compiles=1):
    """``module`` on batches of two RGB images of each of ``sizes`` (H and W marked):
    values and gradients eager's (``_check_padded``), ``compiles`` compiles, none
    exact."""
    run, params = _module_call(module)
    m = _check_padded(run, _rgb_images, [[(2, "H"), (3, "W")]], sizes, params=params,
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == compiles, m["recompile_reasons"]


def _check_padded(fn, make_inputs, dims, sizes, params=(), rtol=1e-5, atol=1e-5,
                  input_grads=True):
    """Run ``fn`` eagerly and lazily (inputs' ``dims`` marked dynamic: one (dim, name)
    pair per input, or a list of them) at each size; compare every output and the
    gradients of the inputs (floating ones, unless not ``input_grads``) and ``params``."""
    lazy_params = [p.detach().to(DEV).requires_grad_() for p in params]
    lr.mark_step()
    lr.reset_metrics()
    for n in sizes:
        xs = make_inputs(n)
        for x in xs:
            x.requires_grad_(input_grads and x.is_floating_point())
        want = fn(*xs, *params)
        _backward(_weighted_sum(want))
        xls = [_marked(x.detach(), marks).to(DEV).requires_grad_(x.requires_grad)
               for x, marks in zip(xs, dims)]
        got = fn(*xls, *lazy_params)
        _backward(_weighted_sum(got))
        lr.mark_step()
        for k in want:
            assert_same(got[k], want[k].detach(), rtol, atol, what=f"{k} at {n}")
        for i, (xl, x) in enumerate(zip(xls, xs)):
            if x.requires_grad:
                assert_same(xl.grad, x.grad, rtol, atol, what=f"grad of input {i} at {n}")
        for i, (pl, p) in enumerate(zip(lazy_params, params)):
            assert_same(pl.grad, p.grad, rtol, atol, what=f"grad of param {i} at {n}")
            p.grad = pl.grad = None
    return lr.metrics()


def slicing(x, ids, w):
    """x (B, T, C), ids (B, T): every way LM code cuts a padded T."""
    T = x.shape[1]
    h = x @ w
    outs = {}
    outs["shift"] = (h[:, 1:] * h[:, :-1]).sum(1)                 # T-1 from both ends
    outs["to_T-1"] = h[:, :T - 1] * 2                             # end computed as T - 1
    outs["last"] = h[:, -1] * 3                                   # the last true element
    outs["first"] = h[:, 0]
    outs["tail3"] = h[:, -3:].sum(1)                              # concrete, from the end
    outs["narrow"] = h.narrow(1, 1, 2) * 1.0                      # concrete, from the front
    outs["middle"] = h[:, 1:-1].mean(1)                           # T-2, true-size mean
    outs["split"] = h.split([1, T - 1], 1)[1].amax(1)
    outs["cat"] = torch.cat([h[:, -1:], h[:, :-1]], 1) * 1.0     # back to T
    outs["roll"] = torch.roll(h, 2, 1) - torch.roll(h, -1, (1,))
    outs["flip"] = h.flip(1)[:, 1:] * 1.0
    logits = h[:, :-1]                                            # shifted-target loss
    outs["lm_loss"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                      ids[:, 1:].reshape(-1) % logits.shape[-1])
    return outs


def test_slices_selects_cat_roll_inside_a_padded_dim_at_random_sizes():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 5, generator=g).requires_grad_()

    def inputs(T):
        gi = torch.Generator().manual_seed(T)
        return torch.randn(3, T, 5, generator=gi), torch.randint(0, 50, (3, T), generator=gi)

    sizes = _sizes(9, 16, 4)
    # 1e-4 (float32's, as for the examples): the input's gradient sums a dozen weighted
    # outputs, terms near 100; on an AMD EPYC XLA's sums differed from torch's by up to
    # 1.1e-4 (an element of 25) and 4.1e-5 (one of 0.26, the terms cancelling)
    m = _check_padded(slicing, inputs, [(1, "T"), (1, "T")], sizes, params=(w,),
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]
    assert m["buckets"]["T"] == [16] and m["buckets"]["T-1"] == [16]


def prompt_and_answer(p, a, w):
    """A prompt (B, P, C) and an answer (B, A, C) of lengths of their own, concatenated
    along time (with a separator in between, once), and read across it."""
    h = torch.cat([p @ w, a @ w], 1)                             # (B, P+A, C)
    sep = torch.cat([p, p.new_zeros(p.shape[0], 1, p.shape[2]), a], 1)
    return {"attn": F.softmax(h.sum(-1), 1), "pooled": h.mean(1), "last": h[:, -1],
            "first": h[:, 0], "answer": h[:, p.shape[1]:] * 2, "sep": sep.amax(1),
            "predicts_answer": h[:, p.shape[1] - 1:-1] * 3,   # the shifted cut of LM losses
            "h": h * 1.0}


def test_a_cat_of_two_dynamic_pieces_runs_padded_at_random_sizes():
    """Each piece keeps its symbol; the cat's is their sum, padded to the sum of their
    buckets; its backward cuts each piece back out at the other's true size."""
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(3)).requires_grad_()

    def inputs(n):
        g = torch.Generator().manual_seed(n)
        return torch.randn(2, n, 4, generator=g), torch.randn(2, 5 + n % 4, 4, generator=g)

    sizes = _sizes(9, 16, 4, seed=4)
    assert len({5 + n % 4 for n in sizes}) > 1
    m = _check_padded(prompt_and_answer, inputs, [(1, "P"), (1, "A")], sizes, params=(w,),
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]
    assert m["buckets"]["(P+A)"] == [24], m["buckets"]
    # another bucket of one piece: one executable more
    m = _check_padded(prompt_and_answer, lambda n: inputs(n)[:1] + (torch.randn(2, 3, 4),),
                      [(1, "P"), (1, "A")], [12], params=(w,), rtol=1e-4, atol=1e-4)
    assert m["compiles"] == 1 and m["exact_compiles"] == {}, m["recompile_reasons"]


def test_a_gradient_expanded_to_a_cat_of_two_pieces_before_it_in_the_graph():
    """The same cat trained where only the weight needs a gradient (SGD's update in the
    graph): the sum's gradient, expanded to the cat's length (a concrete size in the
    graph), comes before the cat in the graph's order, though the program made it after;
    the plan is tried again with the cat's symbol known from the start (before: its size
    kept concrete met the symbol, and every size compiled exactly)."""
    w0 = torch.randn(4, 4, generator=torch.Generator().manual_seed(3))

    def train(dev):
        w = torch.nn.Parameter(w0.clone().to(dev))
        opt = torch.optim.SGD([w], lr=1e-3)
        outs = []
        for n in [12, 13, 10, 15]:
            g = torch.Generator().manual_seed(n)
            p, a = torch.randn(2, n, 4, generator=g), torch.randn(2, 5 + n % 4, 4, generator=g)
            if dev != "cpu":
                p, a = _marked(p.to(dev), (1, "P")), _marked(a.to(dev), (1, "A"))
            out = prompt_and_answer(p, a, w)
            _weighted_sum(out).backward()
            opt.step()
            opt.zero_grad()
            out = {k: v.detach() * 1 for k, v in out.items()}   # (read after the step)
            outs.append({k: v.cpu() for k, v in out.items()})
        return outs, w.detach().cpu()

    want, w_want = train("cpu")
    lr.mark_step()
    lr.reset_metrics()
    got, w_got = train(DEV)
    for a, b in zip(got, want):
        for k in b:
            assert_same(a[k], b[k], 1e-4, 1e-4, what=k)
    assert_same(w_got, w_want, 1e-4, 1e-4, what="w")
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _group_normed(x, w, b, scale):
    """GroupNorm of one group over 8 channels (its decomposition views (B, C, H, W) as
    (B, 1, C, H*W) and back), then a per-channel scale, as PoolFormer's blocks."""
    return {"out": F.group_norm(x, 1, w, b) * scale.view(1, -1, 1, 1)}


def test_group_norm_where_a_padded_dim_has_the_channel_count():
    """W = 8 beside 8 channels: the view back from (B, 1, C, H*W) keeps the channels
    concrete (before: read as W, its symbol twice, so the per-channel scale met W and the
    graph compiled exactly: transformers' PoolFormer at a 32-pixel image)."""
    g = torch.Generator().manual_seed(2)
    params = [torch.randn(8, generator=g).requires_grad_() for _ in range(3)]

    def inputs(n):
        return [torch.randn(2, 8, *n, generator=torch.Generator().manual_seed(n[0]))]
    m = _check_padded(_group_normed, inputs, [[(2, "H"), (3, "W")]],
                      [(12, 8), (14, 8), (10, 8)], params=params, rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_sort_and_topk_along_a_concrete_dim_of_a_padded_batch():
    def ranked(x, w):
        y = x @ w
        values, idx = y.sort(dim=1, descending=True)
        top, top_idx = y.topk(3, dim=-1, largest=False)
        return {"values": values, "idx": idx, "top": top, "top_idx": top_idx,
                "argsort": y.argsort(dim=1, stable=True)}

    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(1)).requires_grad_()
    sizes = _sizes(9, 16, 3, seed=2)
    m = _check_padded(ranked, lambda B: [torch.randn(B, 4, generator=torch.Generator(
        ).manual_seed(B))], [(0, "B")], sizes, params=(w,))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]


def ordered(x):
    """Every sort-like op along dim 1 of ``x``, its values (with gradients) and indices."""
    outs = {}
    for name, (v, i) in {
            "sort": x.sort(dim=1), "sort descending": x.sort(dim=1, descending=True),
            "sort stable": torch.sort(x, dim=1, stable=True, descending=True),
            "topk": x.topk(3, dim=1), "topk smallest": x.topk(2, dim=-1, largest=False),
            "kthvalue": x.kthvalue(2, dim=1, keepdim=True), "median": x.median(dim=1),
            "nanmedian": x.nanmedian(dim=1, keepdim=True)}.items():
        outs[name], outs[name + " indices"] = v, i
    outs["argsort"] = x.argsort(dim=1, stable=True)
    return outs


def test_sorts_and_order_statistics_along_a_padded_dim_run_padded():
    """Along a dim padded at its end, the padding sorts after every true element (NaN
    too): sort, topk, kthvalue, median, nanmedian and their gradients (the sort's indices
    scattered back) equal eager's, one compile for the bucket."""
    def rows(T):
        x = torch.randn(3, T, generator=torch.Generator().manual_seed(T))
        x[1, T // 2] = float("nan")   # (sorted after the numbers, before the padding)
        x[2, 1] = float("inf")
        return [x]

    sizes = _sizes(9, 16, 3, seed=3)
    m = _check_padded(ordered, rows, [(1, "T")], sizes)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]


def repeated(x, w):
    """x (B, T, C) repeated along its padded T and its batch: the (r, T) dim reduced,
    normalized along, contracted over and viewed back into its copies."""
    y = x.repeat(2, 3, 1)                              # (2B, 3T, C)
    z = x.repeat(2, 1, 1, 1)                           # a new leading dim
    return {"sum_T": y.sum(1), "softmax_T": y.softmax(1), "mean": y.mean((0, 1)),
            # (scaled: the weighted sum's sine of a sum of ~100 products of ~1 turns its
            # rounding into gradients that differ)
            "contract": y.transpose(1, 2) @ y @ w * 0.01,
            "copies": y.view(2, -1, 3, *x.shape[1:])[1, :, 2],
            "lead": z.sum(0) * w[0, 0], "max_T": y.amax(1)}


def test_repeat_along_a_padded_dim_runs_padded():
    """``x.repeat`` along a dim padded at its end: r copies of the padded length, one
    flattened (r, T) dim (before: an exact compile at every length)."""
    w = torch.randn(4, 4).requires_grad_()
    sizes = _sizes(9, 16, 3, seed=5)
    m = _check_padded(repeated, lambda T: [torch.randn(2, T, 4, generator=torch.Generator(
        ).manual_seed(T))], [(1, "T")], sizes, params=(w,), rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]


def _gathered_rows(x, w):
    """Rows of ``x`` (B, T, C) flattened to B*T, a dim padded inside, gathered at true
    positions computed from its length (Funnel's sinusoids of ``arange(-2T, 2T)``, laid
    out (4, T), read at relative positions)."""
    B, T, C = x.shape
    rows = (x @ w).reshape(B * T, C)
    at = (torch.arange(T, device=x.device) * 7 + 3) % (B * T)         # (T,) positions
    return {"rows": rows.gather(0, at[:, None].expand(T, C)) * 1.0}


def test_a_gather_along_a_dim_padded_inside():
    """Each index value, a true position, is read at its place in the padded layout (a
    gather there read the wrong elements: it compiled exactly at every length)."""
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(8)).requires_grad_()
    m = _check_padded(_gathered_rows, lambda T: [torch.randn(
        3, T, 4, generator=torch.Generator().manual_seed(T))], [(1, "T")], [9, 13, 11],
        params=(w,), input_grads=False)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]


def _additive_attention(x, wq, wk, wg):
    """SwiftFormer's attention over the pixels of a map: a global query, pooled over them,
    repeated once per pixel (``repeat(1, H * W, 1)``), times the keys."""
    B, C, H, W = x.shape
    t = x.permute(0, 2, 3, 1).reshape(B, H * W, C)
    q, k = F.normalize(t @ wq, dim=-1), F.normalize(t @ wk, dim=-1)
    g = ((q @ wg) * 0.5).softmax(1)                                     # (B, H*W, 1)
    pooled = (g * q).sum(1).unsqueeze(1).repeat(1, k.shape[1], 1)       # (B, H*W, C)
    return {"out": (pooled * k + q).reshape(B, H, W, C).permute(0, 3, 1, 2)}


def test_a_dim_of_one_repeated_once_per_element_of_a_merged_dim():
    """A dim of one repeated H * W times is laid out as the merged (H, W) it meets, as an
    expand to it is (before: the concrete H * W, and an exact compile at every size)."""
    g = torch.Generator().manual_seed(4)
    params = [(torch.randn(*s, generator=g) * 0.5).requires_grad_()
              for s in [(3, 3), (3, 3), (3, 1)]]
    m = _check_padded(_additive_attention, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(9, 11), (13, 10), (11, 15)], params=params, rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_a_sum_of_a_merged_padded_dim_differentiates_padded():
    """``x.reshape(-1, C).sin().sum()``: the sum's gradient is expanded to 2T rows before
    the view that merges B and T comes in the graph; the plan is tried again knowing the
    merged dims (``Cx.merged``), and the expand is laid out as the view (before: the
    graph compiled exactly at every length)."""
    m = _check_padded(lambda x: {"flat": x.reshape(-1, x.shape[-1])},
                      lambda T: [torch.randn(2, T, 4, generator=torch.Generator().manual_seed(T))],
                      [(1, "T")], _sizes(9, 16, 3, seed=6))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


_RESAMPLE_MODES = {"bilinear": dict(mode="bilinear", align_corners=False),
                   "bilinear-corners": dict(mode="bilinear", align_corners=True),
                   "bicubic": dict(mode="bicubic", align_corners=False),
                   "bicubic-corners": dict(mode="bicubic", align_corners=True),
                   "nearest": dict(mode="nearest"), "nearest-exact": dict(mode="nearest-exact")}


@pytest.mark.parametrize("mode", sorted(_RESAMPLE_MODES))
def test_a_fixed_grid_resampled_to_a_padded_grid(mode):
    """A ViT's position embeddings (a fixed 5 x 6 grid) interpolated to the patch grid of
    an image whose H and W vary (``interpolate_pos_encoding``): the output's lengths are
    the patch grid's symbols, the taps tabulated on the host for every length of the
    bucket; values and the embeddings' gradient equal eager's. Before: an exact compile at
    every image size."""
    def vit_grid(x, w, pos):
        h = F.conv2d(x, w, stride=4)                                  # (B, 3, H//4, W//4)
        grid = F.interpolate(pos, size=h.shape[-2:], **_RESAMPLE_MODES[mode])
        return {"tokens": h + grid, "grid": grid * 1.0}

    def images(n):
        g = torch.Generator().manual_seed(n)
        return [torch.randn(2, 3, n, 28, generator=g)]

    w, pos = torch.randn(3, 3, 4, 4).requires_grad_(), torch.randn(1, 3, 5, 6).requires_grad_()
    m = _check_padded(vit_grid, images, [(2, "H")], [36, 44, 52], params=(w, pos),
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


@pytest.mark.parametrize("mode", sorted(_RESAMPLE_MODES))
def test_a_feature_pyramid_resamples_each_level_to_the_next_ones_size(mode):
    """A feature pyramid's top-down path (``interpolate(p4, size=c3.shape[-2:])``) and a
    head back to the image's size, H and W varying, odd ones included: each level's
    length a symbol derived from H (``(H+1)//2`` of a stride-2 conv), the factor between
    levels 2 at some sizes and not at others. The taps are tabulated for every size of H
    up to its bucket, so every size runs one executable; values and gradients equal
    eager's. Before: an exact compile at every size where a factor was not whole."""
    def pyramid(x, w2, w3, w4):
        c2 = F.conv2d(x, w2, stride=2, padding=1)                      # (H+1)//2
        c3 = F.conv2d(torch.tanh(c2), w3, stride=2, padding=1)         # ((H+1)//2+1)//2
        c4 = F.conv2d(torch.tanh(c3), w4, stride=2, padding=1)
        p3 = c3 + F.interpolate(c4, size=c3.shape[-2:], **_RESAMPLE_MODES[mode])
        p2 = c2 + F.interpolate(p3, size=c2.shape[-2:], **_RESAMPLE_MODES[mode])
        return {"p3": p3, "out": F.interpolate(p2, size=x.shape[-2:], **_RESAMPLE_MODES[mode])}

    g = torch.Generator().manual_seed(4)
    ws = [(torch.randn(3, 3, 3, 3, generator=g) * 0.3).requires_grad_() for _ in range(3)]
    # (the weights' gradients sum thousands of products: eager's float32 ones are 3e-4
    # from float64's, the padded graph's as far)
    m = _check_padded(pyramid, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(19, 26), (30, 21), (32, 32)], params=ws, rtol=1e-4, atol=1e-3)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_attention_over_the_pixels_of_a_padded_image():
    """Attention over the flattened (H, W) grid of an image whose H and W vary: the
    gradient's zeros of the packed projection's length (H * W) are laid out as that
    merged dim (a constant kept at its size meets a contradiction, then takes the merged
    dim of that size). Values and gradients equal eager's, one compile. Before: an exact
    compile at every size."""
    torch.manual_seed(0)
    # (benchmarks/varying_vision.py's: a diffusion U-Net's block)
    _check_images_through(Attention(), [(10, 12), (13, 9), (16, 16)])


class _CausalPixels(nn.Module):
    """Attention over an image's flattened pixels, each attending to those before it (an
    image GPT's), the causal mask built at the pixel count as code does it."""

    def __init__(self, mask, c=8):
        super().__init__()
        self.mask, self.proj = mask, nn.Conv2d(3, c, 3, padding=1)
        self.qkv = nn.Linear(c, 3 * c)

    def forward(self, x):
        h = self.proj(x).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(h).chunk(3, -1)
        n = h.shape[1]
        s = q @ k.transpose(1, 2) / 8 ** 0.5
        if self.mask == "tril":
            s = s.masked_fill(torch.ones(n, n, device=x.device).tril() == 0, float("-inf"))
        else:
            s = s + torch.full((n, n), float("-inf"), device=x.device).triu(1)
        return (s.softmax(-1) @ v).sum(-1)


@pytest.mark.parametrize("mask", ["tril", "triu"])
def test_a_causal_mask_over_flattened_pixels_runs_padded(mask):
    """tril/triu of a (H*W, H*W) matrix, the merged dims padded inside: the mask compares
    the pixels' indices in the true flattened order. Values and gradients eager's, one
    compile for three sizes. Before: an exact compile at each."""
    torch.manual_seed(0)
    _check_images_through(_CausalPixels(mask), [(5, 6), (7, 5), (8, 8)])


def _sine_positions(x, w):
    """DETR's sine position embedding of an image's feature map (from a mask of the
    padded pixels: none here), feature pairs interleaved by step-2 slices of a concrete
    dim (``arange(8)`` long: a size H takes too)."""
    B, _, H, W = x.shape
    not_mask = ~torch.zeros(B, H, W, dtype=torch.bool, device=x.device)
    y = not_mask.cumsum(1, dtype=torch.float32)
    xe = not_mask.cumsum(2, dtype=torch.float32)
    y = y / (y[:, -1:, :] + 1e-6) * 6.28
    xe = xe / (xe[:, :, -1:] + 1e-6) * 6.28
    dim_t = 100 ** (2 * (torch.arange(8, device=x.device) // 2) / 8)
    py, px = y[..., None] / dim_t, xe[..., None] / dim_t
    py = torch.stack((py[..., 0::2].sin(), py[..., 1::2].cos()), 4).flatten(3)
    px = torch.stack((px[..., 0::2].sin(), px[..., 1::2].cos()), 4).flatten(3)
    pos = torch.cat((py, px), 3).permute(0, 3, 1, 2)
    return {"pos": pos * 1.0, "out": torch.tanh(F.conv2d(x + pos, w, padding=1))}


def test_a_sine_position_embedding_with_step_two_slices_of_a_concrete_dim():
    """Step-2 slices of a concrete dim beside padded ones run padded (their length was
    taken as the slice's span, not its count: the graph compiled exactly), and where the
    dim's length equals a symbol's (8 = H), the guess that read it as H is withdrawn (the
    refusal of a step-2 slice inside a padded dim is retried). Before: an exact compile
    at every size."""
    def images(n):
        return [torch.randn(2, 16, *n, generator=torch.Generator().manual_seed(n[0]))]

    w = (torch.randn(4, 16, 3, 3, generator=torch.Generator().manual_seed(1)) * 0.1)
    m = _check_padded(_sine_positions, images, [[(2, "H"), (3, "W")]],
                      [(8, 12), (7, 10), (13, 9), (16, 16)], params=(w.requires_grad_(),),
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]   # H's buckets 8 and 16


def test_a_constant_that_stayed_while_the_sizes_changed_stays_concrete():
    """DETR's sine features' ``arange(8)`` stayed 8 while H and W changed, so where its
    map is 8 high (H = 31) it is not read as that size (``dynamic._steady_leaves``): its
    step-2 slices, which run padded along a padded dim, would make symbols of it and an
    executable of their own (2 compiles here; DETR at 24 sizes: 6, 4 after)."""
    torch.manual_seed(0)
    _check_images_through(DETR(), [(20, 27), (26, 23), (31, 18), (32, 29)])


def _patches(x, w, p):
    """Patchify by views (MAE, DiT): (B, C, H, W) to (B, H/p * W/p, p * p * C) tokens, a
    linear map, and back to an image."""
    B, C, H, W = x.shape
    t = x.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1).reshape(
        B, (H // p) * (W // p), p * p * C)
    h = torch.tanh(t @ w)
    y = (h @ w.t()).reshape(B, H // p, W // p, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(
        B, C, H, W)
    return {"tokens": h, "image": y - x}


@pytest.mark.parametrize("p", [4, 3])
def test_patchify_by_views_splits_a_padded_dim(p):
    """``view(B, C, H // p, p, W // p, p)`` splits padded H into (H//p, p): the padding is
    H//p's trailing rows where H's bucket is a multiple of p (p = 4 and power-of-two
    buckets: one executable for the sizes of a bucket); the two merge back into H. With
    p = 3 no power-of-two bucket is: exact, and still right (padding an input's bucket on
    to a multiple of 3 ran such splits padded everywhere, ``reshape(-1, 3)`` too, where a
    float16 ``linalg.cross`` then differed from torch's in its last bit: left exact)."""
    w = torch.randn(3 * p * p, 8, generator=torch.Generator().manual_seed(2)) * 0.2
    sizes = [(20, 8 * p), (28, 8 * p), (32, 4 * p)] if p == 4 else [(9, 12), (15, 12)]
    m = _check_padded(lambda x, w: _patches(x, w, p), _rgb_images, [[(2, "H"), (3, "W")]],
                      sizes, params=(w.requires_grad_(),), rtol=1e-4, atol=1e-5)
    if p == 4:
        assert m["exact_compiles"] == {}, m["recompile_reasons"]
        assert m["compiles"] == 2, m["recompile_reasons"]   # W's buckets 32 and 16
    else:
        assert "view splits dynamic dim" in m["recompile_reasons"][0], m["recompile_reasons"]


def _unfold_fold(x, w, p=2):
    """MobileViT's unfolding and folding (transformers' ``MobileViTLayer``): the batch,
    channels and patch rows merged into one dim, ``reshape(B * C * H // p, p, W // p, p)``,
    the patches as tokens, attention-like mixing across them, and back."""
    B, C, H, W = x.shape
    nh, nw = H // p, W // p
    t = x.reshape(B * C * nh, p, nw, p).transpose(1, 2).reshape(B, C, nh * nw, p * p)
    t = t.transpose(1, 3).reshape(B * p * p, nh * nw, C)
    h = torch.tanh(t @ w)
    h = h.softmax(1) * h                                          # across the patches
    y = h.contiguous().view(B, p * p, nh * nw, C).transpose(1, 3).reshape(B * C * nh, nw, p, p)
    y = y.transpose(1, 2).reshape(B, C, nh * p, nw * p)
    return {"tokens": h, "image": y * x}


def test_a_view_splits_a_padded_dim_merged_after_concrete_dims():
    """``reshape(B * C * H // p, p, W // p, p)`` splits padded H into (H//p, p) where the
    outer part ends a dim that the batch and channels begin: one executable per pair of
    buckets (before: exact at every size, "view splits dynamic dim")."""
    w = torch.randn(3, 3, generator=torch.Generator().manual_seed(2)) * 0.5
    m = _check_padded(_unfold_fold, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(10, 12), (14, 8), (12, 16), (16, 14)], params=(w.requires_grad_(),),
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]   # W's buckets 16 and 8


def _to_a_multiple_and_back(x, w, p=4):
    """MobileViT's unfolding where a size is no multiple of the patch: the map resampled
    to the next multiple (a size computed in Python: fixed in the trace), worked on, then
    resampled back to the size read from it before and joined with it."""
    H, W = x.shape[-2:]
    size = (-(-H // p) * p, -(-W // p) * p)
    y = F.interpolate(x, size=size, mode="bilinear") if size != (H, W) else x
    y = torch.tanh(F.conv2d(y, w, padding=1))
    y = F.interpolate(y, size=(H, W), mode="bilinear") if size != (H, W) else y
    return {"out": torch.cat([x, y], 1)}


def test_a_fixed_size_resampled_back_to_the_size_it_came_from():
    """The resampling back to (H, W) from the fixed multiple gives H and W again (a guess
    by size, as a fixed size resampled to a run-time length is), so that the cat with the
    map before it meets one layout; its backward resamples to them too: one executable
    for the sizes of a multiple (the multiple is fixed in the trace: it keys the graph).
    Before: exact at every size ("cat of different layouts")."""
    w = torch.randn(3, 3, 3, 3, generator=torch.Generator().manual_seed(3)) * 0.3
    m = _check_padded(_to_a_multiple_and_back, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(9, 11), (10, 10), (11, 9), (13, 14)], params=(w.requires_grad_(),),
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]   # multiples 12 x 12 and 16 x 16


def test_a_fixed_width_upsampled_by_a_scale_beside_a_padded_height_of_its_size():
    """At a given scale the backward's fixed W goes back to its own size, also where a
    symbol has that size (H = 16 beside W = 16): one compile, none exact."""
    w = torch.randn(1, 2, 1, 1, generator=torch.Generator().manual_seed(3)).requires_grad_()
    m = _check_padded(lambda x, w: {"up": F.interpolate(x * w, scale_factor=2)},
                      lambda H: (torch.randn(2, 2, H, 16, generator=torch.Generator(
                          ).manual_seed(H)),), [(2, "H")], [9, 16, 13], params=(w,))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _mobilevit_block(x, w):
    """MobileViT's block with patches of 2: the map resampled to even sizes where it is
    not, unfolded into patches (``_unfold_fold``) and folded back, resampled back."""
    H, W = x.shape[-2:]
    size = (-(-H // 2) * 2, -(-W // 2) * 2)
    y = F.interpolate(x, size=size, mode="bilinear") if size != (H, W) else x
    y = _unfold_fold(y, w)["image"]
    y = F.interpolate(y, size=(H, W), mode="bilinear") if size != (H, W) else y
    return {"out": torch.cat([x, y], 1)}


def test_a_size_computed_in_python_is_learnt_as_the_symbol_it_follows():
    """With patches of 2, odd sizes resample to H + 1 (``ceil(H / 2) * 2``, computed in
    Python: fixed in each trace): automatic dynamic sees the resampling's size change
    with H between two graphs of the structure and lays it out as ``H+1`` from then on
    (``Cx.fit_symbol``), padded on to an even size for the patches' view (17 to 18), so
    the sizes share executables (before: one per size)."""
    w = torch.randn(3, 3, generator=torch.Generator().manual_seed(2)) * 0.5
    m = _check_padded(_mobilevit_block, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(9, 11), (13, 7), (11, 15), (15, 13), (13, 9), (9, 13)],
                      params=(w.requires_grad_(),), rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert any("resampling at node" in line for line in m["automatic_dynamic"]), m
    # the first graph, the one after which the sizes are learnt, W's bucket 16 again
    assert m["compiles"] == 3, m["recompile_reasons"]


def _half_sized(x, w):
    """Maps resampled or pooled to half the image's size, computed in Python (a
    multi-scale loss's downsampled target, a pyramid level): ``H // 2``, ``(W + 1) //
    2``; area resampling is an adaptive average pool."""
    H, W = x.shape[-2:]
    y = x * w
    size = (H // 2, (W + 1) // 2)
    out = {mode: F.interpolate(y, size=size, mode=mode)
           for mode in ("bilinear", "nearest", "area")}
    out["max"], at = F.adaptive_max_pool2d(y, size, return_indices=True)
    out["max_at"] = at.float()
    return out


def test_a_resampling_to_half_a_size_computed_in_python_is_learnt():
    """A size that follows H as ``H // 2`` fits no ``a * H + b``: it is fitted as ``(H +
    c) // k`` (``Cx._fits``; a fit of the dim resampled first, not ``H//2 + 1`` for W),
    and adaptive pools take it as their output's dim, so the sizes after the one it is
    learnt at share one executable (before: one per size)."""
    w = torch.randn(1, 3, 1, 1, generator=torch.Generator().manual_seed(4))
    m = _check_padded(_half_sized, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(12, 14), (10, 11), (15, 16), (13, 9), (16, 13)],
                      params=(w.requires_grad_(),), rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert any("resampling at node" in line for line in m["automatic_dynamic"]), m
    assert m["compiles"] == 2, m["recompile_reasons"]


def _relative_position_index(gh: int, gw: int, n: int) -> torch.Tensor:
    """BEiT's relative position index of a gh x gw patch grid and a class token, made on
    the host at each size: (N+1, N+1) positions into a table of ``n`` rows."""
    coords = torch.stack(torch.meshgrid(torch.arange(gh), torch.arange(gw),
                                        indexing="ij")).flatten(1)
    rel = coords[:, :, None] - coords[:, None, :]
    idx = torch.zeros(gh * gw + 1, gh * gw + 1, dtype=torch.long)
    idx[1:, 1:] = (rel[0] + gh - 1) * (2 * gw - 1) + rel[1] + gw - 1
    idx[0, :], idx[:, 0], idx[0, 0] = n - 3, n - 2, n - 1
    return idx % n


def _relative_bias_attention(x, w, table):
    """BEiT's attention over the patches of an image and a class token, the bias of two
    heads gathered from ``table`` by a host index flattened to (N+1)^2 positions, viewed
    back as (N+1, N+1); its gradient is summed into the table at those positions."""
    h = F.conv2d(x, w, stride=4)
    gh, gw = h.shape[-2:]
    t = h.flatten(2).transpose(1, 2)
    t = torch.cat([t.mean(1, keepdim=True), t], 1)                     # (B, N+1, 3)
    scores = (t @ t.transpose(1, 2)).unsqueeze(1) * 0.1                # (B, 1, N+1, N+1)
    idx = _relative_position_index(gh, gw, table.shape[0])
    bias = table[idx.view(-1)].view(gh * gw + 1, gh * gw + 1, -1).permute(2, 0, 1)
    return {"out": (scores + bias).softmax(-1) @ t.unsqueeze(1)}


def test_a_bias_gathered_by_a_host_index_of_the_squared_token_count(monkeypatch):
    """The host index of (N+1)^2 positions is an input automatic dynamic gives a symbol of
    its own; its view as (N+1, N+1) reads that symbol as the tokens' twice (not split by
    the concrete N+1, which the scores' dims contradict), its bucket grown to the square
    of theirs (one per bucket of N+1, past ``max_bucket`` too), and the gradient laid out
    so is summed into the table at the index's positions compacted. The first graph is
    exact (the index is concrete until automatic dynamic sees its size change); then one
    executable for the six sizes. Before: exact at every size (``add``; where the view
    took the symbol, ``index_put``; the table's gradient at a graph whose table is not
    padded skipped the compaction: every row wrong)."""
    g = torch.Generator().manual_seed(5)
    w = (torch.randn(3, 3, 4, 4, generator=g) * 0.3).requires_grad_()
    table = (torch.randn(40, 2, generator=g) * 0.5).requires_grad_()
    monkeypatch.setattr(lr.config, "max_bucket", 1024)   # (the index's sizes pass it at 31)
    m = _check_padded(_relative_bias_attention, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(16, 20), (20, 24), (24, 20), (28, 24), (20, 28), (24, 24)],
                      params=(w, table), rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {"aten.add.Tensor": 1}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]


def test_a_batch_of_squared_lengths_viewed_as_squares():
    """The square read beside a dim kept whole before it (a batch of flat (T, T)
    matrices, (B, S) viewed as (B, T, T)): one executable (before: the rule failed on the
    batch's own symbol, and every size compiled exactly)."""
    def fn(x, y):
        m = y.view(y.shape[0], x.shape[1], x.shape[1])
        return {"out": (m @ x.unsqueeze(-1)).squeeze(-1) + x}

    def inputs(n):
        B, T = n
        g = torch.Generator().manual_seed(T)
        return [torch.randn(B, T, generator=g), torch.randn(B, T * T, generator=g)]
    m = _check_padded(fn, inputs, [[(0, "B"), (1, "T")], [(0, "B"), (1, "S")]],
                      [(3, 5), (4, 6), (3, 7)])
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_heads_split_from_a_width_that_an_image_size_shares():
    """DETR at images whose feature map is 16 high, its width 16 too: the queries' (5, B,
    16), guessed to be H' wide, split into heads (5, 2 * B, 8) is refused (a dim split
    after concrete ones only where more dims follow), so the guess is withdrawn:
    one compile. Taken, it led the mask's zeros to a merged layout: a compile per size
    here, and in ``benchmarks/varying_vision.py``'s run the positions' cumsum exactly."""
    torch.manual_seed(0)
    _check_images_through(DETR(), [(64, 40), (62, 36), (63, 44)])


def _vit_tokens(x, w, cls, reg):
    """A ViT's tokens: the patch grid flattened (a merged dim: padded at its end where only
    H varies, inside where W varies too), a class token before it, register tokens after."""
    h = F.conv2d(x, w, stride=4).flatten(2).transpose(1, 2)           # (B, H/4 * W/4, 3)
    t = torch.cat([cls.expand(x.shape[0], -1, -1), h, reg.expand(x.shape[0], -1, -1)], 1)
    t = (t * 0.1).softmax(1) * t                                       # across the tokens
    return {"cls": t[:, 0], "patches": t[:, 1:-2].transpose(1, 2).unflatten(
        2, (x.shape[2] // 4, x.shape[3] // 4)) * 1.0, "pooled": t[:, 1:].mean(1)}


def _vit_token_params():
    g = torch.Generator().manual_seed(3)
    return [torch.randn(*s, generator=g).requires_grad_() for s in [(3, 3, 4, 4), (1, 1, 3),
                                                                    (1, 2, 3)]]


_GRIDS = {"H": [(36, 28), (44, 28), (52, 28)], "HW": [(36, 28), (44, 20), (52, 32)]}
_GRID_MARKS = {"H": [(2, "H")], "HW": [(2, "H"), (3, "W")]}


@pytest.mark.parametrize("marks", sorted(_GRIDS))
def test_tokens_of_a_padded_patch_grid_cat_with_class_and_register_tokens(marks):
    """The cat's dim is a symbol of its own, the true tokens first; the class token, the
    patch tokens cut out again (their layout the grid's) and the gradients of all three
    equal eager's. Before: an exact compile at every size."""
    m = _check_padded(_vit_tokens, _rgb_images, [_GRID_MARKS[marks]], _GRIDS[marks],
                      params=_vit_token_params(), rtol=1e-4)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_gradients_of_patch_grid_tokens_alone_run_padded():
    """Only the gradients leave the graph, so the gradient's zeros of the cat's length
    come first in it, before the cat derives that length's symbol: a constant is laid out
    at its first use (before: a concrete length, an exact compile at every size)."""
    params = _vit_token_params()
    lazy = [p.detach().to(DEV).requires_grad_() for p in params]
    lr.mark_step()
    lr.reset_metrics()
    for n in _GRIDS["HW"]:
        x = torch.randn(2, 3, *n, generator=torch.Generator().manual_seed(n[0]))
        _weighted_sum(_vit_tokens(x, *params)).backward()
        _weighted_sum(_vit_tokens(_marked(x, _GRID_MARKS["HW"]).to(DEV), *lazy)).backward()
        lr.mark_step()
        for i, (pl, p) in enumerate(zip(lazy, params)):
            assert_same(pl.grad, p.grad, 1e-4, 1e-5, what=f"grad of param {i} at {n}")
            p.grad = pl.grad = None
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_running_max_min_and_logcumsumexp_along_a_padded_dim_run_padded():
    """Prefix scans keep their true positions before the padding: values, the running
    max's and min's indices, and their gradients (scattered back along the padded dim)."""
    def running(x):
        v, i = torch.cummax(x, 1)
        w, j = torch.cummin(x, 1)
        return {"cummax": v, "cummax indices": i, "cummin": w, "cummin indices": j,
                "logcumsumexp": torch.logcumsumexp(x, 1)}

    sizes = _sizes(9, 16, 3, seed=5)
    m = _check_padded(running, lambda T: [torch.randn(3, T, generator=torch.Generator(
        ).manual_seed(T))], [(1, "T")], sizes)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_ties_sort_stably_and_mode_counts_true_elements_along_a_padded_dim():
    """Equal values keep their order (a stable sort, as torch's), and mode's longest run
    never reaches into the padding: small integers, many ties."""
    def tied(x):
        v, i = torch.sort(x, dim=1, stable=True)
        mode, mode_i = x.mode(dim=1)
        return {"values": v, "indices": i, "mode": mode, "mode indices": mode_i}

    sizes = _sizes(9, 16, 3, seed=4)
    m = _check_padded(tied, lambda T: [torch.randint(0, 3, (4, T), generator=torch.Generator(
        ).manual_seed(T)).float()], [(1, "T")], sizes)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def strided(x):
    """x (B, T, C), T odd: step-k slices of a padded T (Funnel's pooled tokens, YOLO's
    space-to-depth), from the front, to the end or a fixed distance from it."""
    return {"even": x[:, ::2] * 2, "odd": x[:, 1::2].sin(), "inner": x[:, 1:-1:3].cos(),
            "head": x[:, :5:2] * 1.0,
            "pooled": torch.cat([x[:, :1], x], 1)[:, ::2].sum(1),
            "focus": torch.cat([x[:, 1::2, :2], x[:, 2::2, :2]], 2).mean(1)}


def test_strided_slices_of_a_padded_dim_run_padded_with_their_gradients():
    """Each slice is a dim of ``ceil((T - cut) / step)`` true elements, the first of the
    padded input's slice; its gradient writes them back at their places. Sizes where no
    two of those lengths coincide (which keys a trace apart, a guess of which is which)."""
    def inputs(T):
        return [torch.randn(2, T, 3, generator=torch.Generator().manual_seed(T))]

    m = _check_padded(strided, inputs, [(1, "T")], [17, 23, 29, 31])
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]
    assert {"(T+1)//2", "T//2", "T//3"} <= m["buckets"].keys(), m["buckets"]


def test_space_to_depth_by_step_two_slices_runs_padded():
    """YOLOv5's Focus (the four step-2 slices of an image cat along channels), a strided
    convolution, a pool and an upsampling back to the stem's map: one compile for the
    sizes of a bucket (before: an exact compile at each)."""
    torch.manual_seed(0)
    _check_images_through(YOLO(), [(24, 28), (28, 20), (32, 32)])


def peaks(x):
    """x (B, C, H, W): picks over each map's flattened pixels (CenterNet's top-k peaks, a
    keypoint's argmax and its row), a dim padded inside."""
    flat = x.flatten(2)
    top, at = flat.topk(5, -1)
    idx = flat.argmax(-1)
    return {"top": top, "top_at": at.float(), "peak": flat.max(-1).values,
            "peak_at": idx.float(), "row": (idx // x.shape[-1]).float(),
            "low_at": flat.argmin(-1, keepdim=True).float(),
            "median": flat.median(-1).values, "kth": flat.kthvalue(3, -1).values,
            "mode": flat.round().mode(-1).values}


def test_picks_over_flattened_pixels_run_padded():
    """topk, argmax, max, argmin, median, kthvalue and mode along flattened (H, W): the
    true pixels put first, in torch's order, so values and indices are torch's, and the
    gradients go back to their pixels (before: an exact compile at every size). Two
    compiles: the first size keeps the gradient's zeros of 540 flattened pixels concrete
    (a constant as long as no symbol), the second learns that they follow (H, W)."""
    # (not square: ``idx // W`` at H = W would be either symbol's size, a guess kept
    # concrete first, an executable of its own)
    m = _check_padded(peaks, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(20, 27), (26, 23), (31, 18), (32, 29)])
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]


def running(x):
    """x (B, C, H, W): running sums, products and minima, and flips, over each map's
    flattened pixels (a dim padded inside)."""
    flat = x.flatten(2)
    # (cumprod's gradient, lowered as torch's formula, is 8x further from float64 than
    # torch's own kernel at 540 pixels, padded or not: its values only)
    return {"cumsum": flat.cumsum(-1), "cumprod": (flat.detach() * 0.1 + 1).cumprod(-1),
            "logcumsumexp": flat.logcumsumexp(-1),
            "cummin_at": flat.cummin(-1).indices.float(), "cummax": flat.cummax(-1).values,
            "flip": flat.flip(-1) * 1.0,
            "flip_both": flat.flip(-1, 1) * 1.0}


def test_running_ops_and_flips_over_flattened_pixels_run_padded():
    """cumsum, cumprod, logcumsumexp, cummin/cummax and flip along flattened (H, W) run
    on the true pixels put first in torch's order and go back to their places (the
    gradients of the running ops flip too; cummax's scatters to its indices' places in the
    padded layout; before: an exact compile at every size)."""
    m = _check_padded(running, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(20, 27), (26, 23), (31, 18), (32, 29)], rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def pooled_flat(x):
    """x (B, C, H, W): adaptive pools over each map's flattened pixels (a dim padded
    inside), 1-d and 2-d ((C, H*W) as a plane), with max's indices."""
    flat = x.flatten(2)
    top, at = F.adaptive_max_pool1d(flat, 5, return_indices=True)
    plane, at2 = F.adaptive_max_pool2d(flat[:, None], (2, 7), return_indices=True)
    return {"avg": F.adaptive_avg_pool1d(flat, 6), "avg2d": F.adaptive_avg_pool2d(flat, (2, 3)),
            "max": top, "max_at": at.float(), "max2d": plane, "max2d_at": at2.float()}


def test_adaptive_pools_over_flattened_pixels_run_padded():
    """Adaptive average and max pooling along flattened (H, W) pool the true pixels put
    first in torch's order (windows are positions in it); their gradients go back to the
    pixels' places. Values, max's indices and gradients eager's, one compile for three
    sizes (before: an exact compile at each)."""
    m = _check_padded(pooled_flat, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(5, 7), (7, 6), (8, 8)], rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


class _SpatialTransformer(nn.Module):
    """A spatial transformer (Jaderberg et al.): an affine map predicted from the pooled
    image, its grid over the image's own size (``affine_grid(theta, x.size())``), the
    image sampled there (``mode``, ``padding_mode``), then a convolution."""

    def __init__(self, mode, padding_mode, align_corners):
        super().__init__()
        self.loc = nn.Linear(3, 6)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.how = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    def forward(self, x):
        eye = torch.tensor([1.0, 0, 0, 0, 1, 0], device=x.device)
        theta = (eye + 0.3 * torch.tanh(self.loc(x.mean((2, 3))))).view(-1, 2, 3) * 1.2
        grid = F.affine_grid(theta, list(x.shape), align_corners=self.how["align_corners"])
        return self.conv(F.grid_sample(x, grid, **self.how))


@pytest.mark.parametrize("how", [("bilinear", "zeros", False), ("bilinear", "border", True),
                                 ("nearest", "reflection", False),
                                 ("bicubic", "reflection", True)])
def test_grid_sampling_of_a_padded_image_runs_padded(how):
    """The grid unnormalized by the image's true H and W, the padding never read, the
    output gradient zeroed at the grid's padded points (before: an exact compile at every
    size)."""
    torch.manual_seed(0)
    run, params = _module_call(_SpatialTransformer(*how))
    # (atol 1e-3: the affine map's gradient sums the grid's over every pixel; eager
    # float32's is itself up to 4e-4 from float64's, the lazy one, padded or not, alike)
    m = _check_padded(run, _rgb_images, [[(2, "H"), (3, "W")]], [(20, 27), (26, 23), (31, 18)],
                      params=params, rtol=1e-4, atol=1e-3)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_max_pool_backward_when_automatic_dynamic_pads_the_gradient_only():
    """Two pools of one input in a row: one graph family whose pooled sizes changed, so
    the gradient's weights are marked dynamic but the pooled maps cannot be: the backward
    compiles exactly (it once built a padded program that failed)."""
    x = torch.randn(2, 3, 8, 9)
    lr.reset_metrics()
    for pool in (torch.nn.MaxPool2d(3, 2, ceil_mode=True), torch.nn.MaxPool2d(2, 1, dilation=2)):
        xl, xe = x.to(DEV).requires_grad_(), x.clone().requires_grad_()
        grads = []
        for t in (xl, xe):
            out = pool(t)
            w = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(t.device)
            grads += torch.autograd.grad((out * w).sum(), [t])
        assert_same(grads[0], grads[1])
    m = lr.metrics()
    assert m["automatic_dynamic"], "the second pool was not seen as the same family"
    assert not any("padded lowering failed" in r for r in m["recompile_reasons"]), m


def _with_rule(monkeypatch, fn, rule):
    """``fn(x) * 2`` of a padded x, its op's padding rule replaced by ``rule``: the
    metrics after its values were checked against eager's."""
    from lazy_runtime.ops.registry import PAD_RULES
    monkeypatch.setitem(PAD_RULES, getattr(torch.ops.aten, fn.__name__).default, rule)
    lr.reset_metrics()
    x = torch.randn(3, 5)
    xl = lr.mark_dynamic(x.to(DEV), 0, "B")
    assert_same(fn(xl) * 2, fn(x) * 2)
    return lr.metrics()


def test_a_symbol_padded_further_at_every_try_is_refused(monkeypatch):
    """A rule asking for its input symbol padded past its bucket again and again (a size
    growing with its own padding: an image network's output padded from the bucket of
    its reflection pads, met by the input it is compared with, doubled it at every try,
    20 GB in two steps) is refused at the second ask: an exact compile, its reason
    saying why."""
    from lazy_runtime.dynamic import Rebucket

    def chasing(node, ins, cx):
        raise Rebucket("B", 2 * cx.buckets["B"])
    m = _with_rule(monkeypatch, torch.tanh, chasing)
    assert m["exact_compiles"] == {"aten.tanh.default": 1}
    assert "B padded past its bucket again (to 16)" in m["recompile_reasons"][-1], \
        m["recompile_reasons"]


def test_a_padded_lowering_that_fails_compiles_exactly_instead(monkeypatch):
    from lazy_runtime.dynamic import Pad

    def broken(ctx, env, in_lays, x):
        raise ValueError("a bug in a padding rule")
    m = _with_rule(monkeypatch, torch.sin, lambda node, ins, cx: Pad(ins[0], fn=broken))
    assert m["exact_compiles"] == {"aten.sin.default": 1}
    assert "padded lowering failed" in m["recompile_reasons"][-1], m["recompile_reasons"]


def test_a_padding_rule_that_fails_compiles_exactly_instead(monkeypatch):
    """A rule's own failure (not a refusal) is a refusal: the graph compiles exactly, the
    reason naming it; before, the barrier raised (argmax along dim 0 of a 0-d tensor
    did)."""
    def broken(node, ins, cx):
        raise IndexError("a bug in a padding rule")
    m = _with_rule(monkeypatch, torch.cos, broken)
    assert m["exact_compiles"] == {"aten.cos.default": 1}
    assert m["recompile_reasons"][-1].startswith(
        "exact shape (its padding rule failed (IndexError: a bug in a padding rule): "
        "aten.cos.default)"), m["recompile_reasons"]


def test_a_choosing_reduction_of_a_0d_tensor_beside_a_padded_one():
    one, x = torch.tensor(2.5), torch.randn(5, 3)
    xl = lr.mark_dynamic(x.to(DEV), 0, "B")
    lr.reset_metrics()
    got = (one.to(DEV).argmax(0, keepdim=True), one.to(DEV).max(-1), xl.amax(0))
    assert_same(got, (one.argmax(0, keepdim=True), one.max(-1), x.amax(0)))
    assert lr.metrics()["exact_compiles"] == {}, lr.metrics()["recompile_reasons"]


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32])
def test_logsumexp_along_a_padded_dim_of_any_dtype(dtype):
    """The padding adds nothing: -inf among the values as floats (bool's own lowest,
    False, added e^0 per padded element)."""
    m = _check_padded(lambda x: {"lse": torch.logsumexp(x, 1)}, lambda T: [
        (torch.randn(3, T, generator=torch.Generator().manual_seed(T)) * 3).to(dtype)],
        [(1, "T")], _sizes(9, 16, 3, seed=7))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_a_padded_result_feeds_a_graph_that_compiles_exactly():
    """The exact graph is traced at the leaf's true shape, not at its padded buffer's."""
    x = torch.randn(3, 2)
    y = lr.mark_dynamic(x.to(DEV), 0, "B") * 2
    lr.mark_step()                    # y stays padded on the device (3 of 4 rows)
    lr.reset_metrics()
    # (a search of sorted values along a padded dim has no padding rule)
    got = torch.searchsorted(y.T.contiguous(), y.T.contiguous() + 0.5)
    assert_same(got, torch.searchsorted((x * 2).T.contiguous(), (x * 2).T.contiguous() + 0.5))
    assert lr.metrics()["exact_compiles"] == {"aten.searchsorted.Tensor": 1}


def convs(x, w_same, w_valid, w_strided, w_dilated, b):
    """x (B, C, T): conv1d along a padded T (and batch)."""
    outs = {}
    outs["same"] = F.conv1d(x, w_same, b, padding=1)
    outs["valid"] = F.conv1d(x, w_valid)                           # T-2
    outs["strided"] = F.conv1d(x, w_strided, b, stride=2, padding=1)  # (T+1)//2
    outs["dilated"] = F.conv1d(x, w_dilated, dilation=2, padding=1)   # T-2
    outs["valid_sum"] = outs["valid"].sum(2)
    outs["strided_mean"] = outs["strided"].mean(2)
    return outs


def test_conv1d_along_a_padded_time_dim_values_and_gradients():
    g = torch.Generator().manual_seed(1)
    shapes = [(4, 3, 3), (4, 3, 3), (4, 3, 3), (4, 3, 3), (4,)]
    params = [torch.randn(*s, generator=g).requires_grad_() for s in shapes]
    sizes = _sizes(9, 16, 3, seed=1)
    m = _check_padded(convs, lambda T: (torch.randn(2, 3, T),), [(2, "T")], sizes,
                      params=params, rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_a_conv_that_grows_a_padded_dim_runs_padded():
    """A 1-wide kernel with padding 1: T + 2 outputs, both ends reading only padding
    (before: an exact compile; see also the even kernel's growth by one below)."""
    lr.mark_step()
    lr.reset_metrics()
    w, b = torch.randn(4, 3, 1), torch.randn(4)
    for T in (7, 5, 8):
        x = torch.randn(2, 3, T)
        xl = lr.mark_dynamic(x.to(DEV), 2, "T")
        assert_same(F.conv1d(xl, w.to(DEV), b.to(DEV), padding=1).sin(),
                    F.conv1d(x, w, b, padding=1).sin(), 1e-5, 1e-5, what=f"at {T}")
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _compare_models(eager, lazy, x, xl, what, rtol, atol):
    """One forward and backward of both models: outputs, input and parameter gradients."""
    x.requires_grad_(), xl.requires_grad_()
    want, got = eager(x), lazy(xl)
    _weighted_sum(want).backward()
    _weighted_sum(got).backward()
    lr.mark_step()
    for k in want:
        assert_same(got[k], want[k].detach(), rtol, atol, what=f"{k} {what}")
    assert_same(xl.grad, x.grad, rtol, atol, what=f"grad x {what}")
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, rtol, atol, what=f"grad {name} {what}")
        pe.grad = pl.grad = None


def _model_pair(cls):
    """An eager model and its lazy copy; metrics start afresh."""
    torch.manual_seed(0)
    eager = cls()
    lazy = copy.deepcopy(eager).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    return eager, lazy


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)  # a bias before a
        # training batch norm has a zero gradient: only rounding noise to compare
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return {"out": h, "pooled": h.mean((2, 3))}


def test_conv2d_and_batch_norm_over_padded_batch_and_height_train_and_eval():
    eager, lazy = _model_pair(ConvBN)
    # sizes whose outputs cannot be mistaken for each other (B, H//2 and W//2 differ):
    # a collision costs an exact compile (see test_dynamic), never a wrong value
    rng = random.Random(2)
    for B, H in [(rng.randint(5, 7), rng.randint(17, 31)) for _ in range(2)] + [(8, 32)]:
        x = torch.randn(B, 3, H, 7)
        for mode in ("train", "eval"):
            eager.train(mode == "train"), lazy.train(mode == "train")
            xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 0, "B"), 2, "H").to(DEV)
            what = f"{mode} at B={B}, H={H}"
            _compare_models(eager, lazy, x.clone(), xl, what, rtol=1e-3, atol=1e-4)
            for (name, be), bl in zip(eager.named_buffers(), lazy.buffers()):
                assert_same(bl, be, 1e-5, 1e-5, what=f"{name} {what}")
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]      # train and eval, one bucket
    assert m["buckets"]["B"] == [8] and m["buckets"]["H"] == [32]


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.cell = nn.LSTMCell(4, 6)

    def forward(self, x):
        seq, (h, c) = self.lstm(x)
        hc = None
        for t in range(x.shape[1]):
            hc = self.cell(x[:, t], hc)
        return {"seq": seq, "h": h, "c": c, "cell_h": hc[0], "cell_c": hc[1]}


class GatedRecurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 5, batch_first=True, bidirectional=True)
        self.cell = nn.GRUCell(4, 5)

    def forward(self, x):
        seq, h = self.gru(x)
        hc = None
        for t in range(x.shape[1]):
            hc = self.cell(x[:, t], hc)
        return {"seq": seq, "h": h, "cell_h": hc}


@pytest.mark.parametrize("cls", [Recurrent, GatedRecurrent], ids=["lstm", "gru"])
def test_recurrent_layers_and_cells_with_a_padded_batch(cls):
    eager, lazy = _model_pair(cls)
    for B in _sizes(5, 8, 3, seed=3):
        x = torch.randn(B, 3, 4)
        xl = lr.mark_dynamic(x.to(DEV), 0, "B")
        _compare_models(eager, lazy, x, xl, f"at B={B}", rtol=1e-4, atol=1e-5)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


class Sequences(nn.Module):
    """Two layers, both directions: the reverse scan starts in the padding."""

    def __init__(self, cls=nn.LSTM):
        super().__init__()
        self.rnn = cls(4, 6, num_layers=2, batch_first=True, bidirectional=True)

    def forward(self, x):
        seq, state = self.rnn(x)
        h, c = state if isinstance(state, tuple) else (state, state)
        return {"seq": seq, "last": seq[:, -1], "h": h, "c": c}


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN], ids=lambda c: c.__name__)
def test_recurrent_layers_with_a_padded_time_and_batch(cls):
    """The time loop is one scan: steps past the true length keep the carry, so h (and c)
    are the last true step's and every gradient is exact."""
    eager, lazy = _model_pair(functools.partial(Sequences, cls))
    rng = random.Random(5)
    for B, T in [(rng.randint(5, 7), rng.randint(9, 15)) for _ in range(2)] + [(8, 16)]:
        x = torch.randn(B, T, 4)
        xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 0, "B"), 1, "T").to(DEV)
        _compare_models(eager, lazy, x, xl, f"at B={B}, T={T}", rtol=1e-4, atol=1e-5)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]
    assert m["buckets"]["T"] == [16]


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_layer_op_with_a_row_mask_and_padded_time_and_batch(mode):
    """A packed sequence's layer op: its per-row mask is padded with False, so padded
    steps and rows keep the carry in both directions; one compile for the bucket. The
    eager side runs the op's CPU kernels (hand BPTT)."""
    from lazy_runtime.ops.recurrent import GATES, _LayerFunction
    torch.manual_seed(3)
    H, n_in, G = 3, 2, GATES[mode] * 3
    weights = [torch.randn(G, n_in), torch.randn(G, H), torch.randn(G), torch.randn(G)]
    weights_l = [w.to(DEV).requires_grad_() for w in weights]
    for w in weights:
        w.requires_grad_()
    lr.mark_step()
    lr.reset_metrics()
    rng = random.Random(6)
    for B, T in [(rng.randint(5, 7), rng.randint(9, 15)) for _ in range(2)] + [(8, 16)]:
        lengths = torch.tensor([T] + [rng.randint(1, T) for _ in range(B - 1)])
        valid = torch.arange(T)[:, None] < lengths[None, :]
        x = torch.randn(T, B, n_in)
        states = [torch.randn(B, H) for _ in range(2 if mode == "lstm" else 1)]
        xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 0, "T"), 1, "B").to(DEV)
        validl = lr.mark_dynamic(lr.mark_dynamic(valid.clone(), 0, "T"), 1, "B").to(DEV)
        states_l = [lr.mark_dynamic(t.clone(), 0, "B").to(DEV) for t in states]
        results = []
        for xx, ss, ws, vv in ((x, states, weights, valid), (xl, states_l, weights_l, validl)):
            xx = xx.requires_grad_()
            outs = [t for rev in (False, True)
                    for t in _LayerFunction.apply(mode, vv, rev, True, xx, *ws, *ss)]
            sum((t.sin() * (i + 1)).sum() for i, t in enumerate(outs)).backward()
            results.append((outs, xx.grad, [w.grad for w in ws]))
        lr.mark_step()
        (want, gx, gw), (got, gxl, gwl) = results
        what = f"at B={B}, T={T}"
        assert_same(got, [t.detach() for t in want], 1e-4, 1e-5, what=f"outputs {what}")
        assert_same(gxl, gx, 1e-4, 1e-5, what=f"grad x {what}")
        assert_same(gwl, gw, 1e-4, 1e-5, what=f"grad weights {what}")
        for w in weights + weights_l:
            w.grad = None
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


@pytest.mark.parametrize("name", ["cnn", "lstm"])
def test_examples_train_with_a_dynamic_batch_without_exact_compiles(name):
    ex = load_example(name)
    eager = ex.make_model()
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e, opt_l = ex.make_optimizer(eager), ex.make_optimizer(lazy)
    lr.mark_step()
    lr.reset_metrics()
    for step, B in enumerate(_sizes(5, 8, 3, seed=4)):
        x, y = ex.make_batch(step, batch=B)
        le = ex.loss_fn(eager(x), y)
        le.backward()
        xl, yl = (lr.mark_dynamic(t.to(DEV), 0, "B") for t in (x, y))
        ll = ex.loss_fn(lazy(xl), yl)
        ll.backward()
        opt_e.step(), opt_e.zero_grad(), opt_l.step(), opt_l.zero_grad()
        lr.mark_step()
        assert ll.item() == pytest.approx(le.item(), rel=1e-4, abs=1e-5), (step, B)
    for (pname, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        if name == "cnn" and pname.endswith("bias") and pname.startswith("conv"):
            continue   # before a batch norm: Adam steps on a gradient of rounding noise
        assert_same(pl, pe, 1e-4, 1e-5, what=pname)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["buckets"]["B"] == [8], m["recompile_reasons"]


def indexed(x, rows, cols, w):
    """x (B, T, C) padded along T, rows (T,) padded too (as nonzero's positions), cols (5,)
    below every T: index_select and x[:, cols] into and out of padded dims."""
    h = torch.tanh(x @ w)
    outs = {}
    outs["select_T"] = h.index_select(1, cols) * 1.0              # from a padded dim
    outs["columns"] = h[:, :, cols % h.shape[2]] * 2.0            # x[:, :, cols]
    outs["select_rows"] = (w * 1.0).index_select(0, rows % w.shape[0]).sin()  # a table
    outs["by_rows"] = h[:, 0][:, rows % h.shape[2]] * 1.0          # x[:, rows]
    return outs


def test_index_select_and_column_indexing_with_padded_indices_and_dims():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 4, generator=g).requires_grad_()

    def inputs(n):
        gi = torch.Generator().manual_seed(n)
        return (torch.randn(2, n, 4, generator=gi), torch.randint(0, 99, (n,), generator=gi),
                torch.tensor([0, 3, 1, 3, 2]))

    sizes = _sizes(5, 8, 3)
    m = _check_padded(indexed, inputs, [(1, "T"), (0, "T"), (0, "K")], sizes, params=(w,),
                      rtol=1e-5, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]


def written(x, rows, w):
    """x (B, T, C) padded along T, rows (R,) padded (as nonzero's positions): one value
    written at a boolean mask over x (``x[mask] = v``: Longformer's global-attention
    mask) and at rows of a padded index (``h[:, rows] = v``: its ``attn[rows, :, cols] =
    min``), the rows' padding writing nowhere."""
    h = torch.tanh(x @ w)
    masked = h.clone()
    masked[h > 0.3] = 0.75
    at_rows = h.clone()
    at_rows[:, rows % h.shape[1]] = -0.5
    return {"masked": masked * 1.0, "at_rows": at_rows * 1.0}


def test_one_value_written_at_a_mask_or_at_padded_rows_runs_padded():
    """Before: an exact compile at every size ("a boolean mask over a padded dim",
    "broadcast values")."""
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(1)).requires_grad_()

    def inputs(n):
        gi = torch.Generator().manual_seed(n)
        return torch.randn(2, n, 4, generator=gi), torch.randint(0, 99, (n,), generator=gi)

    m = _check_padded(written, inputs, [(1, "T"), (0, "R")], _sizes(5, 8, 3), params=(w,),
                      rtol=1e-5, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def _longformer_scores(x, w, window=4):
    """Longformer's sliding-window scores (transformers' ``_chunk`` and
    ``_pad_and_transpose_last_two_dims``): x (T, B, C), T a multiple of 2 * window, split
    into 2 heads; query and key cut into overlapping chunks of 2w every w tokens by
    ``as_strided`` of a view (not contiguous), their products padded by a row and viewed
    with the last two dims swapped."""
    T, B, C = x.shape
    q = (x @ w).view(T, B, 2, C // 2).transpose(0, 1).transpose(1, 2).reshape(B * 2, T, -1)

    def chunk(h):
        h = h.view(h.size(0), h.size(1) // (window * 2), window * 2, h.size(2))
        size, stride = list(h.size()), list(h.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        return h.as_strided(size=size, stride=stride)
    s = torch.einsum("bcxd,bcyd->bcxy", (chunk(q), chunk(q.flip(-1))))
    s = F.pad(s, (0, 0, 0, 1))
    return {"scores": s.view(*s.shape[:-2], s.size(-1), s.size(-2))}


def test_overlapping_chunks_cut_by_as_strided_run_padded():
    """``as_strided`` that cuts one dim of a tensor's storage into windows, reading the
    others whole, is recorded as the same view made by unfold (``LazyTensor.as_strided``):
    padded as unfold is, its gradient unfold's; a view regrouping concrete dims across
    their bounds ((9, 8) as (8, 9)) too. Values and gradients eager's, one compile for
    three lengths. Before: exact at each (as_strided of a padded dim)."""
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    m = _check_padded(_longformer_scores, lambda T: (torch.randn(
        T, 2, 8, generator=torch.Generator().manual_seed(T), dtype=torch.float64),),
        [(0, "T")], [40, 48, 56], params=(w.requires_grad_(),), rtol=1e-5, atol=1e-5)
    # (float64 values equal to 1e-12; the gradients' weights are taken in float32, where a
    # score 1e-15 apart may round to the next float: 4e-6 apart at most)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def _longformer_diagonals(x, w, window=4):
    """The chunks' scores (``_longformer_scores``) laid out as each token's 2w+1 diagonals
    (transformers' ``_sliding_chunks_query_key_matmul``): zeros of T // w chunks of w rows
    (a size the code computes from T), written piecewise from the scores, then viewed as
    (B, heads, T, 2w + 1)."""
    s = _longformer_scores(x, w, window)["scores"]
    bh, chunks = s.shape[:2]
    d = s.new_zeros((bh, chunks + 1, window, 2 * window + 1))
    d[:, :-1, :, window:] = s[:, :, :window, :window + 1]
    d[:, -1, :, window:] = s[:, -1, window:, :window + 1]
    d[:, 1:, :, :window] = s[:, :, -(window + 1):-1, window + 1:]
    d[:, 0, 1:window, 1:window] = s[:, 0, :window - 1, 1 - window:]
    return {"diagonals": d.view(bh // 2, 2, x.shape[0], 2 * window + 1).transpose(2, 1)}


def test_diagonals_of_overlapping_chunks_run_padded():
    """Zeros whose size the code computes from T (T // w chunks, automatic dynamic's fit
    ``T//4``, a floor) written piecewise from the chunks' scores and viewed as T: the
    fit sees T though the zeros come first in the graph, ``T//4`` with 4 merges back
    into T (as a view's split does). Values and gradients eager's; the first length
    exact (nothing learnt yet: the zeros' size kept), one padded compile for the next
    two. Before: exact at each (a scatter of different layouts)."""
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    m = _check_padded(_longformer_diagonals, lambda T: (torch.randn(
        T, 2, 8, generator=torch.Generator().manual_seed(T), dtype=torch.float64),),
        [(0, "T")], [40, 48, 56], params=(w.requires_grad_(),), rtol=1e-5, atol=1e-5)
    assert m["exact_compiles"] == {"aten.slice_scatter.default": 1}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]


def _longformer_context(p, v, window=4):
    """Longformer's weighted sum of values (transformers'
    ``_sliding_chunks_matmul_attn_probs_value``): weights p (T, B, 2, 2w+1) split by a view
    into T // w chunks of w rows, their diagonals laid out by a pad and two views; values v
    (T, B, 2, D) padded by w at both ends and cut by ``as_strided`` into windows of 3w
    every w (T // w of them, counted over the padded length)."""
    T, B, H, D = v.shape
    probs = p.transpose(0, 1).transpose(1, 2).reshape(B * H, T // window, window, -1)
    padded = F.pad(v.transpose(0, 1).transpose(1, 2).reshape(B * H, T, D),
                   (0, 0, window, window), value=-1)
    st = padded.stride()
    chunks = padded.as_strided(size=(B * H, T // window, 3 * window, D),
                               stride=(st[0], window * st[1], st[1], st[2]))
    diag = F.pad(probs, (0, window + 1)).view(B * H, T // window, -1)[:, :, :-window]
    diag = diag.view(B * H, T // window, window, 3 * window + 1)[:, :, :, :-1]
    out = torch.einsum("bcwd,bcdh->bcwh", (diag, chunks))
    return {"context": out.view(B, H, T, D).transpose(1, 2)}


def test_windows_over_a_grown_dim_meet_chunks_split_by_a_view():
    """The values' windows, counted over T + 2w (``((T+8) - 8) // 4``), and the weights'
    chunks, T split by a view (``T // 4``), are one symbol (a window op over a dim a pad
    grew is counted from the dim before the pad; one spelling for a floor), so their
    product pads; the windows' gradient goes back to the grown dim. Values and gradients
    eager's, one compile for three lengths. Before: exact at each (the product's batch
    layouts differ)."""
    def inputs(T):
        g = torch.Generator().manual_seed(T)
        return (torch.rand(T, 2, 2, 9, generator=g, dtype=torch.float64),
                torch.randn(T, 2, 2, 8, generator=g, dtype=torch.float64))

    m = _check_padded(_longformer_context, inputs, [(0, "T"), (0, "T")], [40, 48, 56],
                      rtol=1e-5, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def _rows_and_columns_of_a_fixed_table(x, table):
    """``table[rows, :, cols]`` (index tensors apart: a pattern no padding rule reads)
    read and written beside a padded T: nothing dynamic flows in, so it runs as it is
    (Longformer's global tokens)."""
    rows, cols = torch.tensor([0, 2, 3]).to(x.device), torch.tensor([1, 0, 4]).to(x.device)
    picked = table[rows, :, cols]                                  # (3, 3)
    written = table.clone()
    written[rows, :, cols] = picked * 2
    return {"read": x.sum(1) @ picked, "written": written * x.mean()}


def test_an_index_pattern_with_nothing_dynamic_runs_as_it_is():
    def inputs(n):
        gi = torch.Generator().manual_seed(n)
        return torch.randn(2, n, 3, generator=gi), torch.randn(4, 3, 5, generator=gi)

    m = _check_padded(_rows_and_columns_of_a_fixed_table, inputs, [(1, "T"), []],
                      _sizes(5, 8, 3))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _read_at_keys(mask, h):
    """A padding mask read at ``[batch, kv]`` (transformers' mask functions), from the end
    too, combined with scores whose T comes from elsewhere."""
    B, T = mask.shape
    b = torch.arange(B, device=mask.device)[:, None]
    kv = torch.arange(T, device=mask.device)[None, :]
    return {"at keys": (h * mask[b, kv]).sum(1), "from the end": h * mask[b, kv - T],
            "last key": mask[b[:, 0], -1] * 1.0}


def test_indexing_into_a_padded_dim_counts_from_its_true_size():
    def inputs(n):
        gi = torch.Generator().manual_seed(n)
        return (torch.rand(3, n, generator=gi) > 0.3, torch.randn(3, n, generator=gi))

    sizes = _sizes(5, 8, 3)
    m = _check_padded(_read_at_keys, inputs, [(1, "T"), (1, "T")], sizes)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]
    x = lr.mark_dynamic(torch.zeros(2, 6).to(DEV), 1, "T")   # (padded to 8: 6 and 7 exist)
    with pytest.raises(Exception, match="index out of bounds"):
        x[torch.tensor([0, 1]).to(DEV), torch.tensor([2, 6]).to(DEV)].cpu()


def _write_at_positions(x, v):
    """Writes at positions of a padded T: columns set (one from the end), columns added
    to (a repeated column adds twice), rows and columns by pairs; gradients reach x and
    the values."""
    T = x.shape[1]
    cols = torch.tensor([0, 2, -1], device=x.device)
    y = x * 1.0
    y[:, cols] = v[:, :3] * 2
    rows = torch.arange(x.shape[0], device=x.device)[:, None]
    z = torch.index_put(x * 1.0, (rows, torch.tensor([[1, 1, T - 2]], device=x.device)),
                        v[:, 3:6], accumulate=True)
    w = x * 1.0
    w[torch.tensor([0, 2], device=x.device), torch.tensor([T - 1, 1], device=x.device)] = \
        v[0, :2]
    return {"set": y, "added": z, "pairs": w}


def test_writing_at_positions_of_a_padded_dim_counts_from_its_true_size():
    sizes = _sizes(9, 16, 3, seed=6)
    v = torch.randn(3, 6, generator=torch.Generator().manual_seed(6)).requires_grad_()
    m = _check_padded(_write_at_positions, lambda T: [
        torch.randn(3, T, generator=torch.Generator().manual_seed(T))], [(1, "T")], sizes,
        params=(v,))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]
    y = lr.mark_dynamic(torch.zeros(2, 12).to(DEV), 1, "T") * 2   # (padded to 16)
    with pytest.raises(Exception, match="index_put: index out of bounds.*true size"):
        y[:, torch.tensor([3, 12]).to(DEV)] = 1.0
        y.cpu()


def test_padding_a_dynamic_dim_back_to_a_fixed_length():
    """``F.pad(mask, (0, L - T))`` (a static KV cache's mask): once automatic dynamic saw
    the result keep its size while T changed, one padded graph serves every T."""
    def fn(x, ids):
        L = 12
        return {"fixed": F.pad(x, (0, L - x.shape[1]), value=-1.5).exp(),
                "both": F.pad(x[:, None], (0, L - x.shape[1], 1, 2)) * 2,
                "ints": F.pad(ids, (0, L - ids.shape[1]), value=7) + 1}

    def inputs(n):
        gi = torch.Generator().manual_seed(n)
        return (torch.randn(3, n, generator=gi), torch.randint(0, 9, (3, n), generator=gi))

    m = _check_padded(fn, inputs, [(1, "T"), (1, "T")], [5, 6, 7, 8])
    # the first size runs padded as a pad that grows T by L - T (nothing learnt yet),
    # then one padded graph back to the fixed length serves the others
    assert m["compiles"] == 2 and m["padded_executions"] == 4, m["recompile_reasons"]
    assert any("pad to a fixed size" in line for line in m["automatic_dynamic"]), m


def test_a_size_two_symbols_share_is_guessed_as_each_in_turn():
    """A value made inside the graph (the zeros a slice's backward scatters into, here
    (B, P+A, C)) has its dims guessed from the symbols' sizes; where the batch and the
    prompt are both 8, its first dim is kept 8, then tried as B and as P, until one
    fits (it used to stay 8, and the graph compiled at its exact shape). Such a trace
    may read a dim as the other symbol of its size: an executable of its own at most."""
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(3)).requires_grad_()
    wl = w.detach().to(DEV).requires_grad_()
    lr.mark_step()
    lr.reset_metrics()
    for P, A in [(8, 5), (7, 6), (8, 7)]:
        g = torch.Generator().manual_seed(P * 10 + A)
        p, a = torch.randn(8, P, 4, generator=g), torch.randn(8, A, 4, generator=g)
        want = prompt_and_answer(p, a, w)["predicts_answer"]
        want.sin().sum().backward()
        pl, al = p.to(DEV), a.to(DEV)
        for t, s in ((pl, "P"), (al, "A")):
            lr.mark_dynamic(t, 0, "B")
            lr.mark_dynamic(t, 1, s)
        got = prompt_and_answer(pl, al, wl)["predicts_answer"]
        got.sin().sum().backward()
        lr.mark_step()
        assert_same(got, want.detach(), 1e-5, 1e-5, what=f"cut at {P, A}")
        assert_same(wl.grad, w.grad, 1e-5, 1e-5, what=f"grad at {P, A}")
        w.grad = wl.grad = None
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] <= 2 and m["padded_executions"] == 3, m["recompile_reasons"]


class Pools(nn.Module):
    """Max and average pooling along padded H and W: halving, "same", strided with
    padding, and a window that shrinks the dim (its input gets -inf or zeros at the end);
    max pooling's indices kept, average pooling with and without the padding counted."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        h = self.conv(x)
        outs = {"half": F.max_pool2d(h, 2), "same": F.max_pool2d(h, 3, 1, 1),
                "dilated": F.max_pool2d(h, 2, 1, dilation=2)}
        outs["strided"], outs["strided_at"] = F.max_pool2d(h, 3, 2, 1, return_indices=True)
        outs["global"] = F.adaptive_avg_pool2d(F.relu(outs["half"]), 1)
        outs["avg_half"] = F.avg_pool2d(h, 2)
        outs["avg_strided"] = F.avg_pool2d(h, 3, 2, 1)
        outs["avg_strided_true"] = F.avg_pool2d(h, 3, 2, 1, count_include_pad=False)
        outs["avg_same_true"] = F.avg_pool2d(h, 3, 1, 1, count_include_pad=False)
        outs["avg_valid"] = F.avg_pool2d(h, 3, 1, 0)
        outs["avg_divided"] = F.avg_pool2d(h, 3, 2, 1, divisor_override=4)
        return outs


def test_pooling_along_padded_height_and_width_values_indices_and_gradients():
    """Values, indices (flat positions in the true H x W plane, as torch's) and gradients
    equal eager torch's at sizes inside one bucket, square or not: one compile."""
    eager, lazy = _model_pair(Pools)
    # no two of H, W, H // 2, (H + 1) // 2, H - 2 and W's alike: one executable
    sizes = [(9, 21), (13, 19), (11, 27), (9, 29)]
    for H, W in sizes:
        x = torch.randn(2, 2, H, W, generator=torch.Generator().manual_seed(H * W))
        xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 2, "H"), 3, "W").to(DEV)
        _compare_models(eager, lazy, x.clone(), xl, f"at H={H}, W={W}", 1e-3, 1e-4)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]
    # where sizes coincide (H = W, H = W // 2) a gradient's dims are read as either
    # symbol: right, at the cost of an executable of its own
    for H, W in [(12, 12), (15, 31)]:
        x = torch.randn(2, 2, H, W, generator=torch.Generator().manual_seed(H * W))
        xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 2, "H"), 3, "W").to(DEV)
        _compare_models(eager, lazy, x.clone(), xl, f"at H={H}, W={W}", 1e-3, 1e-4)
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["compiles"] <= 3, m["recompile_reasons"]


def test_the_cnn_example_trains_on_images_of_varying_size_one_compile_per_bucket():
    """The CNN example (conv, batch norm, max pool, adaptive average pool) on square and
    oblong images of several sizes: every loss as eager torch's, no exact compile. At H =
    33 the 16 labels look like H // 2 (16, padded to 32): the loss refuses that guess."""
    cnn = load_example("cnn")
    sizes = [(16, 16), (12, 20), (14, 14), (10, 16), (16, 12), (13, 13), (33, 20)]
    losses = {}
    for device in (None, DEV):
        model = cnn.make_model()
        if device is not None:
            model = model.to(device)
            lr.mark_step()
            lr.reset_metrics()
        opt = cnn.make_optimizer(model)
        losses[device] = []
        for step, (H, W) in enumerate(sizes):
            x, y = cnn.make_batch(step, size=max(H, W))
            x = x[:, :, :H, :W].contiguous()
            if device is not None:
                x, y = lr.mark_dynamic(lr.mark_dynamic(x, 2, "H"), 3, "W").to(device), \
                    y.to(device)
            loss = cnn.loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if device is not None:
                lr.mark_step()
            losses[device].append(loss.item())
    m = lr.metrics()
    assert losses[DEV] == pytest.approx(losses[None], rel=1e-4, abs=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["padded_executions"] == len(sizes), m["recompile_reasons"]
    assert m["compiles"] <= 5, m["recompile_reasons"]


def pools3d(x, w):
    """x (B, C, D, 4, 5): 3-d max and average pooling along a padded depth."""
    h = x * w
    vals, at = F.max_pool3d(h, (3, 2, 2), (2, 1, 2), (1, 0, 1), return_indices=True)
    return {"max": vals, "max_at": at, "avg": F.avg_pool3d(h, 2),
            "avg_true": F.avg_pool3d(h, 3, 1, 1, count_include_pad=False)}


def test_3d_pooling_along_a_padded_depth():
    w = torch.randn(1, 2, 1, 1, 1, generator=torch.Generator().manual_seed(7)).requires_grad_()
    sizes = [9, 13, 15]   # odd: D // 2 and (D + 1) // 2 apart (else an executable more)
    m = _check_padded(pools3d, lambda D: (torch.randn(2, 2, D, 4, 5, generator=torch.Generator(
        ).manual_seed(D)),), [(2, "D")], sizes, params=(w,), rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == len(sizes), m["recompile_reasons"]


class TinyUNet(nn.Module):
    """Down by a max pool, up by nearest upsampling, the skip concatenated."""

    mode = "nearest"

    def __init__(self, scale=2, width=4):
        super().__init__()
        self.scale = scale
        self.enc = nn.Conv2d(2, width, 3, padding=1)
        self.mid = nn.Conv2d(width, width, 3, padding=1)
        self.dec = nn.Conv2d(2 * width, 3, 3, padding=1)

    def forward(self, x):
        e = F.relu(self.enc(x))
        m = F.relu(self.mid(F.max_pool2d(e, self.scale)))
        u = F.interpolate(m, scale_factor=self.scale, mode=self.mode,
                          **({"align_corners": True} if self.corners else {}))
        return {"out": self.dec(torch.cat([u, e], 1)), "up": u}

    corners = False


class BilinearUNet(TinyUNet):
    mode = "bilinear"


class CornersUNet(BilinearUNet):
    """Up as the common U-Net's ``nn.Upsample(scale_factor=2, mode="bilinear",
    align_corners=True)``: taps that depend on the size."""
    corners = True


@pytest.mark.parametrize("cls", ["TinyUNet", "BilinearUNet", "CornersUNet", "TransposedUNet"])
def test_a_unet_runs_padded_at_varying_image_sizes(cls):
    """Up by nearest or bilinear upsampling (``2*((H+0)//2)``: true 2 * (h // 2), padded
    2 * (N // 2)) or by a transposed convolution (``2*((H+0)//2)+0``), meeting the skip's ``H`` where the
    sizes are even: one executable for the oblong sizes of a bucket."""
    eager, lazy = _model_pair(globals()[cls])
    for H, W in [(10, 14), (12, 10), (14, 12)]:
        x = torch.randn(2, 2, H, W, generator=torch.Generator().manual_seed(H * W))
        xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 2, "H"), 3, "W").to(DEV)
        _compare_models(eager, lazy, x.clone(), xl, f"at H={H}, W={W}", 1e-4, 1e-5)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1 and m["padded_executions"] == 3, m["recompile_reasons"]


@pytest.mark.parametrize("scale", [3, 1.5])
def test_nearest_upsampling_by_other_factors_along_a_padded_dim(scale):
    """By 3 (float32's 1 / 3 still reads i // 3 at both sizes): padded; by 1.5: no whole
    factor, compiled exactly; values and gradients as torch's either way."""
    w = torch.randn(1, 2, 1, generator=torch.Generator().manual_seed(2)).requires_grad_()

    def up(x, w):
        return {"up": F.interpolate(x * w, scale_factor=scale, mode="nearest")}

    m = _check_padded(up, lambda T: (torch.randn(2, 2, T, generator=torch.Generator(
        ).manual_seed(T)),), [(2, "T")], [9, 13, 15], params=(w,))
    if scale == 3:
        assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]
    else:
        assert set(m["exact_compiles"]) == {"aten.upsample_nearest1d.default"}, m


class BNUNet(nn.Module):
    """Two levels down and up, 16 and 32 channels, each convolution batch-normalized."""

    def __init__(self):
        super().__init__()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        self.enc1, self.enc2, self.mid = block(2, 16), block(16, 32), block(32, 32)
        self.dec2, self.dec1 = block(64, 16), block(32, 16)
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2), e2], 1))
        return {"out": self.head(self.dec1(torch.cat([F.interpolate(d2, scale_factor=2),
                                                      e1], 1)))}


def test_parameters_moved_by_module_to_are_never_read_as_dynamic_dims():
    """The first step right after ``model.to(dev)``: the parameters are new on the device
    too, but ``Module.to`` moved them, so their 16 and 32 channels are not guessed as
    ``W // 4`` and ``W // 2`` of a 64-wide image (the guesses and their withdrawals had
    run out of retries: an exact compile). Per-pixel targets are guessed, as data."""
    torch.manual_seed(0)
    eager = BNUNet()
    lazy = copy.deepcopy(eager).to(DEV)
    lr.reset_metrics()
    opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in (eager, lazy)]
    for H, W in [(40, 64), (40, 16)]:
        x = torch.randn(4, 2, H, W, generator=torch.Generator().manual_seed(H + W))
        y = (x[:, 0] > 0).long()
        xl = lr.mark_dynamic(lr.mark_dynamic(x.clone(), 2, "H"), 3, "W").to(DEV)
        losses = []
        for m, opt, xs, ys in ((eager, opts[0], x, y), (lazy, opts[1], xl, y.to(DEV))):
            loss = F.cross_entropy(m(xs)["out"], ys)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5), (H, W)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]


def transposed_convs(x, w2, w3, w3d, b):
    """x (B, C, T): transposed convolutions along a padded T, each kind of output dim."""
    return {"up2": F.conv_transpose1d(x, w2, b, stride=2),                    # 2*T+0
            "up2_pad": F.conv_transpose1d(x, w3, stride=2, padding=1,
                                          output_padding=1),                  # 2*T+0
            "up3": F.conv_transpose1d(x, w3, b, stride=3, padding=1),        # 3*T-2
            "same": F.conv_transpose1d(x, w3, padding=1),                     # T
            "grow": F.conv_transpose1d(x, w3),                                # T+2
            "dilated": F.conv_transpose1d(x, w3d, stride=2, dilation=2)}      # 2*T+3


def test_transposed_conv1d_along_a_padded_time_dim_values_and_gradients():
    g = torch.Generator().manual_seed(4)
    params = [torch.randn(*s, generator=g).requires_grad_()
              for s in [(3, 4, 2), (3, 4, 3), (3, 4, 3), (4,)]]
    m = _check_padded(transposed_convs, lambda T: (torch.randn(2, 3, T, generator=torch.Generator(
        ).manual_seed(T)),), [(2, "T")], [9, 13, 16], params=params, rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


class TransposedUNet(nn.Module):
    """Down by a strided convolution, up by a transposed one (kernel 2, stride 2)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(2, 4, 3, padding=1)
        self.down = nn.Conv2d(4, 8, 2, stride=2)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.dec = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x):
        e = F.relu(self.enc(x))
        u = F.relu(self.up(F.relu(self.down(e))))
        return {"out": self.dec(torch.cat([u, e], 1)), "up": u}


def adaptive_pools(x, w):
    """x (B, C, H, 6): adaptive average and max pooling to sizes that split a padded H
    unevenly (max pooling's indices: positions in the true H x 6 plane, as torch's)."""
    h = x * w
    vals, at = F.adaptive_max_pool2d(h, (5, 2), return_indices=True)
    return {"max_vals": vals, "max_at": at, "seven": F.adaptive_avg_pool2d(h, (7, 4)), "pyramid2": F.adaptive_avg_pool2d(h, 2),
            "pyramid3": F.adaptive_avg_pool2d(h, (3, 6)), "global": F.adaptive_avg_pool2d(h, 1),
            "1d": F.adaptive_avg_pool1d(h.flatten(2), 5),
            "max": F.adaptive_max_pool2d(h, (4, 3))}


def test_adaptive_pooling_to_any_size_along_a_padded_dim():
    w = torch.randn(1, 2, 1, 1, generator=torch.Generator().manual_seed(8)).requires_grad_()
    m = _check_padded(adaptive_pools, lambda H: (torch.randn(2, 2, H, 6, generator=torch.Generator(
        ).manual_seed(H)),), [(2, "H")], [9, 13, 16], params=(w,), rtol=1e-5, atol=1e-6)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


@pytest.mark.parametrize("how", ["scale 2", "size 2H", "align_corners", "align_corners 3",
                                 "scale 1.5"])
def test_bilinear_upsampling_along_padded_dims(how):
    """By a whole factor with size-free taps: padded (the last true element's clamped tap
    made by filling the padding with it); with align_corners (taps that depend on the
    size, a U-Net's ``nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)``)
    padded too, the taps made on the device from the true sizes; a factor of 1.5:
    exact."""
    w = torch.randn(1, 2, 1, 1, generator=torch.Generator().manual_seed(3)).requires_grad_()

    def up(x, w):
        h = x * w
        if how == "scale 2":
            y = F.interpolate(h, scale_factor=2, mode="bilinear")
        elif how == "size 2H":
            y = F.interpolate(h, size=(2 * h.shape[2], 2 * h.shape[3]), mode="bilinear")
        elif how == "align_corners":
            y = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=True)
        elif how == "align_corners 3":
            y = F.interpolate(h, size=(3 * h.shape[2], 7), mode="bilinear", align_corners=True)
        else:
            y = F.interpolate(h, scale_factor=1.5, mode="bilinear")
        return {"up": y}

    m = _check_padded(up, lambda H: (torch.randn(2, 2, H, 5, generator=torch.Generator(
        ).manual_seed(H)),), [(2, "H")], [9, 13, 16], params=(w,), rtol=1e-5, atol=1e-6)
    if how != "scale 1.5":
        assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]
    else:
        assert set(m["exact_compiles"]) == {"aten.upsample_bilinear2d.default"}, m


def test_bilinear_upsampling_of_a_padded_batch():
    """Only the batch padded: the backward's input size has its symbol too."""
    w = torch.randn(1, 2, 1, 1, generator=torch.Generator().manual_seed(5)).requires_grad_()
    m = _check_padded(lambda x, w: {"up": F.interpolate(x * w, scale_factor=2, mode="bilinear")},
                      lambda B: (torch.randn(B, 2, 3, 5, generator=torch.Generator(
                          ).manual_seed(B)),), [(0, "B")], [9, 13, 16], params=(w,))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_ceil_mode_max_pooling_along_a_padded_dim():
    """The output's size by torch's ceil_mode rule at the true and padded sizes (a derived
    symbol); the last window runs past the true size into the -inf padding, as torch's
    runs past the input."""
    w = torch.randn(1, 2, 1, 1, generator=torch.Generator().manual_seed(6)).requires_grad_()

    def pools(x, w):
        h = x * w
        vals, at = F.max_pool2d(h, 3, 2, ceil_mode=True, return_indices=True)
        return {"ceil": vals, "ceil_at": at, "ceil2": F.max_pool2d(h, 2, ceil_mode=True)}

    def padded_window(x, w):   # (apart: its odd sizes are ceil2's, its padded ones not)
        return {"ceil_pad": F.max_pool2d(x * w, 3, 2, 1, ceil_mode=True)}

    for fn in (pools, padded_window):
        m = _check_padded(fn, lambda H: (torch.randn(2, 2, H, 5, generator=torch.Generator(
            ).manual_seed(H)),), [(2, "H")], [9, 13, 15], params=(w,))
        assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


@pytest.mark.parametrize("padding", [0, 1])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_ceil_mode_average_pooling_along_padded_dims(padding, count_include_pad):
    """Average pooling in ceil_mode: the last window runs past the true size into zeros
    and is divided as torch divides, counting the explicit padding (to the true size
    plus the padding at most) or only the true positions; heights whose last window
    overhangs and ones whose does not (odd ones: k3's windows fit, k2's overhang; even
    ones would make the two outputs' sizes coincide), beside a concrete width."""
    w = torch.randn(1, 2, 1, 1, generator=torch.Generator().manual_seed(7)).requires_grad_()

    def pools(x, w):
        h = x * w
        return {"k3s2": F.avg_pool2d(h, 3, 2, padding, ceil_mode=True,
                                     count_include_pad=count_include_pad),
                "k2": F.avg_pool2d(h, 2, ceil_mode=True, padding=min(padding, 1),
                                   count_include_pad=count_include_pad),
                "k3s3": F.avg_pool2d(h, 3, 3, padding, ceil_mode=True,
                                     count_include_pad=count_include_pad)}

    m = _check_padded(pools, lambda H: (torch.randn(2, 2, H, 7, generator=torch.Generator(
        ).manual_seed(H)),), [(2, "H")], [9, 11, 13, 15], params=(w,))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_dropout_along_a_padded_dim_runs_padded():
    """Dropout's random key is an input of its own, not broadcast with the values: a
    padded length runs padded (it compiled exactly). Its true elements are dropped at
    rate p and the rest scaled by 1 / (1 - p); its backward masks the gradient alike."""
    lr.mark_step()
    lr.reset_metrics()
    for T in (37, 50, 61):
        x = lr.mark_dynamic(torch.ones(8, T, 64).to(DEV), 1, "T").requires_grad_()
        y = F.dropout(x, 0.25, training=True)
        y.sum().backward()
        got, grad = y.cpu(), x.grad.cpu()
        assert set(got.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
        assert abs((got == 0).float().mean().item() - 0.25) < 0.02   # (n >= 18944: 4 sd)
        assert torch.equal(grad, got)   # (d sum / dx: the same mask, the same scale)
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["compiles"] <= 2, m


RANDOM_OPS = {   # each: (the op on x = ones(8, T, 64), its mean, its standard deviation)
    "randn_like": (lambda x: torch.randn_like(x), 0.0, 1.0),
    "rand_like": (lambda x: torch.rand_like(x), 0.5, 12 ** -0.5),
    "randint_like": (lambda x: torch.randint_like(x, 10), 4.5, (99 / 12) ** 0.5),
    "normal_": (lambda x: (x * 2).normal_(1.0, 2.0), 1.0, 2.0),
    "uniform_": (lambda x: (x * 2).uniform_(-1.0, 1.0), 0.0, 3 ** -0.5),
    "exponential_": (lambda x: (x * 2).exponential_(), 1.0, 1.0),
    "bernoulli_": (lambda x: (x * 2).bernoulli_(0.25), 0.25, 0.1875 ** 0.5),
}


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_random_ops_along_a_padded_dim_run_padded(name):
    """Random fills of a value with a padded dim (``randn_like`` of a reparameterization,
    a diffusion step's noise) draw for the padded value: they ran at the exact length
    before. The true elements have the distribution's mean and standard
    deviation (n = 8 * T * 64 >= 18944: 5 standard errors)."""
    fn, mean, sd = RANDOM_OPS[name]
    lr.mark_step()
    lr.reset_metrics()
    for T in (37, 61):
        x = lr.mark_dynamic(torch.ones(8, T, 64).to(DEV), 1, "T")
        got = (fn(x) + x * 0).cpu().double()   # (meets the padded x: one layout)
        assert got.shape == (8, T, 64)
        n = got.numel()
        assert abs(got.mean().item() - mean) < 5 * sd / n ** 0.5, got.mean()
        assert abs(got.std().item() - sd) < 0.05 * sd, got.std()
    m = lr.metrics()
    assert m["exact_compiles"] == {} and m["padded_executions"] == 2, m


@pytest.mark.parametrize("pad", [(0, 1), (1, 0), (2, 3), (0, -1), (-2, 0)])
def test_constant_pad_of_a_padded_dim_grows_or_crops_it(pad):
    """``F.pad`` along a padded dim by constants (a causal LM's ``F.pad(labels, (0, 1),
    value=-100)``, and the crop that is its gradient): the symbol ``T+k`` (or ``T-k``),
    the true elements shifted by the left pad, ``value`` around them; it compiled
    exactly. Values and gradients as eager torch's at three lengths, one compile."""
    lr.clear_cache()   # (automatic dynamic would take the other pads' graphs for these)

    def fn(x):
        y = F.pad(x, (0, 0) + pad, value=-3.0)   # (x: [2, T, 3])
        return {"y": y, "z": y.cumsum(1) * y}
    m = _check_padded(fn, lambda n: [torch.randn(2, 3, n).transpose(1, 2)], [(1, "T")],
                      _sizes(9, 14))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m


def test_vector_contractions_over_a_padded_dim():
    """dot, vdot, mv and addmv over a padded length: both operands' padding zeroed (NaN
    there would reach the sum); their gradients."""
    w = torch.randn(4, generator=torch.Generator().manual_seed(8)).requires_grad_()

    def contract(a, b, m, w):
        return {"dot": torch.dot(a, b), "vdot": torch.vdot(a, a * 2), "mv": m @ a,
                "addmv": torch.addmv(w, m, b, beta=0.5, alpha=2.0)}

    def inputs(T):
        g = torch.Generator().manual_seed(T)
        return [torch.randn(T, generator=g), torch.randn(T, generator=g),
                torch.randn(4, T, generator=g)]
    m = _check_padded(contract, inputs, [(0, "T"), (0, "T"), (1, "T")], _sizes(9, 16, 3, 9),
                      params=(w,), rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_with_padded_rows(reduce):
    """Rows of a padded batch reduce into their own rows; the index points at true
    positions of a concrete dim (include_self both ways); gradients where torch has them."""
    def scattered(x, idx):
        base = torch.ones(x.shape[0], 4, device=x.device)
        return {"self": base.scatter_reduce(1, idx, x, reduce),
                "no self": (base * 2).scatter_reduce(1, idx, x, reduce, include_self=False)}

    def inputs(B):
        g = torch.Generator().manual_seed(B)
        return [torch.randn(B, 6, generator=g), torch.randint(0, 4, (B, 6), generator=g)]
    m = _check_padded(scattered, inputs, [(0, "B"), (0, "B")], _sizes(9, 16, 3, 10),
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_gather_from_a_concrete_dim_by_a_padded_length():
    """DeBERTa's relative-position attention: scores over 2k relative buckets (a concrete
    dim) gathered at a (T, T) index of clamped relative positions; the gradient scatters
    from the padded length into the concrete dim (its padding adds nothing)."""
    span = 4

    def relative(x, scores):
        T = x.shape[1]
        pos = torch.arange(T, device=x.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-span, span - 1) + span
        idx = rel.expand(x.shape[0], T, T)
        picked = torch.gather(scores * x[..., :1], -1, idx)        # (B, T, T)
        return {"picked": picked,
                "summed": torch.scatter_add(torch.zeros_like(scores), -1, idx, picked)}

    def inputs(T):
        g = torch.Generator().manual_seed(T)
        return [torch.randn(2, T, 3, generator=g), torch.randn(2, T, 2 * span, generator=g)]
    m = _check_padded(relative, inputs, [(1, "T"), (1, "T")], _sizes(9, 16, 3, 11),
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_a_residual_around_a_padded_valid_convolution(mode):
    """``h + conv(F.pad(h, 1))`` with a valid 3x3 conv (TensorFlow's "same" padding in
    transformers' MobileNetV2, a style-transfer block's reflection pad, whose gradient
    takes the middle back) where h comes from a strided conv (its padded
    size, ``(31 - 1) // 2``, no power of two: the pad's ``h+2`` is padded to 16): the
    conv's output is h's dim again, padded as h is, so the residual adds them (before: an
    exact compile at every size, ``h+2-2`` against ``h``)."""
    down, conv = nn.Conv2d(3, 3, 3, stride=2), nn.Conv2d(3, 3, 3)
    fn, params = _module_call(nn.ModuleList([down, conv]))

    def block(x, *ps):
        h = F.conv2d(x, ps[0], ps[1], stride=2)
        y = F.conv2d(F.pad(h, (1, 1, 1, 1), mode=mode), ps[2], ps[3])
        return {"out": h + torch.relu(y)}
    m = _check_padded(block, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(n, n + 2) for n in _sizes(17, 28, 3, 12)], params=params,
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_ffts_along_a_padded_length():
    """FNet's token mixing (``fftn`` of a real input over tokens and features, its real
    part), an inverse transform and the normalizations along a padded length: a DFT of
    the true length, values and gradients eager torch's, one compile."""
    def mix(x):
        return {"fnet": torch.fft.fftn(x, dim=(1, 2)).real,
                "inverse": torch.fft.ifft(x.to(torch.complex64), dim=1, norm="ortho").imag,
                "forward norm": torch.fft.fft(x, dim=1, norm="forward").real * 3}

    def inputs(T):
        return [torch.randn(2, T, 6, generator=torch.Generator().manual_seed(T))]
    m = _check_padded(mix, inputs, [(1, "T")], _sizes(9, 16, 3, 3), rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]
    from lazy_runtime.ops import padding   # (past DFT_MAX: exact, the matrix too large)
    old, padding.DFT_MAX = padding.DFT_MAX, 8
    try:
        m = _check_padded(mix, inputs, [(1, "T")], [9], rtol=1e-4, atol=1e-4)
    finally:
        padding.DFT_MAX = old
    assert "padded dim longer than 8" in m["recompile_reasons"][-1], m["recompile_reasons"]


def test_real_ffts_along_a_padded_length():
    """A Fourier neural operator's layer over a padded length: ``rfft`` (the derived
    symbol ``T//2+1``), its lowest modes mixed, written into zeros like it, ``irfft(...,
    n=T)`` back; an inverse without ``n`` (``2 * (T//2)`` points: the spectrum past it
    unread), ``rfft2`` and ``irfft2`` with the padded dim not last, and a one-sided
    transform whose last dim is concrete beside a padded one: values and gradients eager
    torch's, no exact compile; one compile per parity of T (``irfft``'s gradient doubles
    the entries below the Nyquist one, ``(T-1)//2`` of them; a length-less ``irfft``
    is ``2*(T//2+1-1)`` points, T itself where T is even)."""
    def spectral(x, w):
        hf = torch.fft.rfft(x, dim=1)
        out = torch.zeros_like(hf)
        out[:, :3] = torch.einsum("btc,tcd->btd", hf[:, :3], w)
        grid = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")
        return {"fno": torch.fft.irfft(out, n=x.shape[1], dim=1),
                "no n": torch.fft.irfft(hf * 0.5, dim=1, norm="forward") * 2,
                "2d": torch.fft.irfft2(grid * grid.abs(), s=x.shape[1:], dim=(1, 2),
                                       norm="ortho"),
                "last concrete": torch.fft.rfftn(x, dim=(2, 1)).abs()}

    def inputs(T):
        return [torch.randn(2, T, 6, generator=torch.Generator().manual_seed(T))]
    w = torch.randn(3, 6, 6, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    m = _check_padded(spectral, inputs, [(1, "T")], [11, 13, 10, 16],
                      params=[w.requires_grad_()], rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 2, m["recompile_reasons"]


def test_a_two_dimensional_fourier_layer_over_a_padded_grid():
    """FNO-2d's layer, H and W padded: ``rfft2``, the lowest and the highest row modes
    (``[-3:]``) mixed, written into ``zeros(B, C, H, W//2+1)`` made after the transform
    (which the graph reaches first: laid out with the symbol ``W//2+1`` all the same),
    ``irfft2(..., s=(H, W))``; 3 modes of a spectrum of 5 (W = 9: read from the front, as
    their weights' 3 are) and of 6 (as near one end as the other). No exact compile, one
    compile per parity of W (before: one per size of W)."""
    def layer(x, w1, w2):
        B, C, H, W = x.shape
        xf = torch.fft.rfft2(x)
        out = torch.zeros(B, C, H, W // 2 + 1, dtype=torch.cfloat, device=x.device)
        out[:, :, :3, :3] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :3, :3], w1)
        out[:, :, -3:, :3] = torch.einsum("bixy,ioxy->boxy", xf[:, :, -3:, :3], w2)
        return {"out": torch.fft.irfft2(out, s=(H, W))}

    def inputs(hw):
        return [torch.randn(2, 4, *hw, generator=torch.Generator().manual_seed(sum(hw)))]
    g = torch.Generator().manual_seed(2)
    ws = [(torch.randn(4, 4, 3, 3, dtype=torch.cfloat, generator=g) / 4).requires_grad_()
          for _ in range(2)]
    m = _check_padded(layer, inputs, [[(2, "H"), (3, "W")]],
                      [(13, 9), (11, 14), (16, 11), (10, 12), (15, 10)], params=ws,
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 2, m["recompile_reasons"]


def test_relative_shifts_of_scores_over_padded_positions():
    """The relative-position shift of the Conformer (ESPnet, transformers'
    Wav2Vec2-Conformer: scores (T, P) of P = 2T-1 relative positions, a zero column put
    first, viewed as (P+1, T), the first row dropped, viewed back, cut to ``[..., :P // 2
    + 1]``) and of Transformer-XL (the zero column along dim 1, viewed (P+1, T), viewed
    back), T and P padded: the views that reorder padded dims gather their true elements
    in torch's order, the cut to T positions is T's prefix. Values and gradients eager
    torch's, one compile (before: an exact compile at every size)."""
    def shifts(q, p):
        s = q @ p.transpose(-1, -2)                                   # (B, H, T, P)
        pad = torch.zeros((*s.size()[:3], 1), dtype=s.dtype, device=s.device)
        x = torch.cat([pad, s], dim=-1).view(*s.size()[:2], s.size(3) + 1, s.size(2))
        conformer = x[:, :, 1:].view_as(s)[:, :, :, : s.size(-1) // 2 + 1]
        t = s.permute(2, 3, 0, 1)                                     # (T, P, B, H)
        pad = torch.zeros((t.size(0), 1, *t.size()[2:]), dtype=t.dtype, device=t.device)
        x = torch.cat([pad, t], dim=1).view(t.size(1) + 1, t.size(0), *t.size()[2:])
        return {"conformer": conformer.softmax(-1), "xl": x[1:].view_as(t) * 1.5}

    def inputs(T):
        g = torch.Generator().manual_seed(T)
        return [torch.randn(2, 2, T, 4, generator=g), torch.randn(2, 2 * T - 1, 4, generator=g)]
    m = _check_padded(shifts, inputs, [(2, "T"), (1, "P")], [9, 13, 11, 16],
                      rtol=1e-4, atol=1e-4)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_a_slice_of_a_merged_dim_padded_at_its_end():
    """``x.reshape(B, 2 * T)[:, 1:]``: (T, 2) merged has its padding at its end, so a cut
    of it is a cut of one symbol (before: exact, a position inside a merged dim)."""
    def cut(x):
        flat = x.reshape(x.shape[0], -1)
        return {"shifted": flat[:, 1:] * flat[:, :-1], "tail": flat[:, -3:].sum(1)}

    def inputs(T):
        return [torch.randn(3, T, 2, generator=torch.Generator().manual_seed(T))]
    m = _check_padded(cut, inputs, [(1, "T")], _sizes(9, 16, 3, 8))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_an_image_network_of_reflection_pads_and_strides_at_varying_sizes():
    """The fast style-transfer network (``examples/fast_neural_style.py``: reflection pads
    before every convolution, two stride-2 ones, two nearest upsamplings back) whose
    output meets its input in the loss: each pad grows H by exactly its width (so the
    strides' arithmetic follows H's padded size and the output is padded as the input
    is), values and gradients eager torch's, one compile for three sizes (before: an
    exact compile at every size)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from fast_neural_style import TransformerNet
    torch.manual_seed(0)
    net = TransformerNet((4, 8, 8))
    fn, params = _module_call(net)

    def loss(x, *ps):
        return {"reconstruction": (fn(x, *ps)["out"] - x).square().mean(1)}
    m = _check_padded(loss, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(36, 44), (48, 60), (64, 40)], params=params, rtol=1e-4,
                      atol=2e-3)   # (float32 against float32: the first conv's weight
    # gradient, of a scale of 160, is 4e-4 off float64's in eager torch and here alike)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def test_a_loop_bounded_by_values_never_runs_on_padding():
    """A polynomial's recurrence runs until the degree n: the padding of n (poisoned here:
    2**61, as garbage could be) is 0 first, else the loop ran for ever (at an x broadcast
    into the padding, |x| < 1, whose values stay finite)."""
    def polys(n):
        x = torch.full((1,), 0.3, device=n.device)
        return {"legendre": torch.special.legendre_polynomial_p(x, n),
                "laguerre": torch.special.laguerre_polynomial_l(x, n)}

    m = _check_padded(polys, lambda T: [torch.randint(0, 6, (T,), generator=torch.Generator(
        ).manual_seed(T))], [(0, "T")], _sizes(9, 16, 3, 11))
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]


def _to_multiple(x, w, k):
    """A sequence padded at its end up to a multiple of ``k`` (the amount a function of
    T), cut into windows of ``k``, each window's mean broadcast back over it, a strided
    conv, then cropped back to T (``y[..., :T]``)."""
    B, C, T = x.shape
    h = F.pad(x, (0, (k - T % k) % k))
    win = h.reshape(B, C, h.shape[-1] // k, k)
    h = h + (win - win.mean(-1, keepdim=True)).reshape(B, C, -1)
    y = F.conv_transpose1d(F.conv1d(h, w, stride=2), w, stride=2)
    return {"y": y[..., :T] * 1.0, "windows": win.amax(-1)}


# amounts 3, 7, 2, 5, 1: the first trace pads by a constant (nothing learnt yet); 33
# and 35 both pad to 40, which looks like a pad to a fixed length until 42 pads to 48
_MULTIPLES = {"amounts": ([37, 41, 46, 51, 63], 2), "fixed_first": ([33, 35, 42, 46, 38], 3)}


@pytest.mark.parametrize("case", sorted(_MULTIPLES))
def test_padding_up_to_a_multiple_is_one_graph_for_every_amount(case):
    """``F.pad(x, (0, (8 - T % 8) % 8))``: an amount that changes with T. Once automatic
    dynamic saw it change, the padded dim is a symbol of the pad's own whatever the
    amount, and the crop back to T (and that pad's gradient, a crop by an amount that
    changes) takes T's symbol: one executable for every T of a bucket, values and
    gradients eager's. Before: one compile per amount."""
    w = torch.randn(4, 4, 2, generator=torch.Generator().manual_seed(5)) * 0.3

    def inputs(n):
        return [torch.randn(2, 4, n, generator=torch.Generator().manual_seed(n))]

    sizes, compiles = _MULTIPLES[case]
    lr.clear_cache()   # (what the other case learnt and compiled)
    m = _check_padded(lambda x, w: _to_multiple(x, w, 8), inputs, [(2, "T")], sizes,
                      params=(w.requires_grad_(),), rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == compiles, m["recompile_reasons"]
    assert any("pad by a varying amount" in line for line in m["automatic_dynamic"]), m


def _tf_same(x, k, s):
    """``x`` padded as TensorFlow's "same" padding pads before a k x k convolution of
    stride s (transformers' MobileNet and EfficientNet ports): by an amount that depends
    on the size's remainder, its odd unit at the end."""
    pad = []
    for n in (x.shape[-1], x.shape[-2]):
        total = max(k - (s if n % s == 0 else n % s), 0)
        pad += [total // 2, total - total // 2]
    return F.pad(x, pad)


class _TFSame(nn.Module):
    """Stride-2 convolutions (3 x 3, a depthwise one, 5 x 5) after TensorFlow's "same"
    padding, a stride-1 one on a residual, a pooled head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, groups=8)
        self.c3 = nn.Conv2d(8, 8, 3)
        self.c4 = nn.Conv2d(8, 4, 5, stride=2)

    def forward(self, x):
        h = torch.relu(self.c1(_tf_same(x, 3, 2)))
        h = torch.relu(self.c2(_tf_same(h, 3, 2)))
        h = h + self.c3(_tf_same(h, 3, 1))
        h = self.c4(_tf_same(h, 5, 2))
        return {"out": h, "pooled": h.mean((2, 3))}


def test_tensorflow_same_padding_before_strided_convolutions_at_every_parity():
    """TensorFlow's "same" padding before a stride-2 convolution pads ``(0, 1)`` at an
    even size and ``(1, 1)`` at an odd one: once automatic dynamic saw the low amount
    change, the pad's low amount is read at run time and the padded dim is a symbol of
    the pad's own, so every parity of every level shares one executable (values and
    gradients eager's); the pads' gradients crop back to the symbols the pads grew.
    Before: a compile per combination of parities (every size here)."""
    torch.manual_seed(0)
    run, params = _module_call(_TFSame())
    # (37, 44): H odd, odd, even at the three strided levels, W even, even, odd; (44, 37)
    # the other way, so the second size shows every pad's amounts changing
    m = _check_padded(run, _rgb_images, [[(2, "H"), (3, "W")]],
                      [(37, 44), (44, 37), (45, 58), (62, 51), (41, 33)], params=params,
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]
    assert any("pad shifted by a varying amount" in line for line in m["automatic_dynamic"])


def test_a_window_attention_block_padded_up_to_its_window():
    """A Swin block's core (tokens padded right and below up to a multiple of the window,
    split into windows, attention inside each, merged back, cropped to the grid: ``t[:,
    :H, :W]``) at image sizes whose pads differ: values and gradients eager's,
    no exact compile (before: every size compiled exactly, the windows' merged batch
    of attention and the crop's gradient read as other symbols of their sizes), and
    fewer compiles than sizes: a size whose pad adds nothing to a dim has no crop there,
    a graph of its own."""
    torch.manual_seed(0)
    # (benchmarks/varying_vision.py's; (H/2, W/2) padded by (1, 2), (3, 1), (2, 3),
    # (1, 1), (3, 2): all within one bucket)
    _check_images_through(Swin(c=8), [(38, 36), (34, 46), (36, 42), (54, 62), (50, 52)],
                          compiles=2)


def _windowed_lm(ids, mask, emb, qkv, out, w=8):
    """Longformer's ``_pad_to_window_size``: ids (with a pad id) and mask padded up to a
    multiple of the window inside the forward, attention inside each window (keys the
    mask leaves out filled), the output cropped back with ``h[:, :-pad]``."""
    B, T = ids.shape
    pad = (w - T % w) % w
    if pad > 0:
        ids = F.pad(ids, (0, pad), value=1)
        mask = F.pad(mask, (0, pad), value=0)
    h = F.embedding(ids, emb)
    Tp = h.shape[1]
    q, k, v = (h @ qkv).view(B, Tp // w, w, 3, -1).unbind(3)
    a = (q @ k.transpose(-1, -2) / 4.0).masked_fill(mask.view(B, Tp // w, 1, w) == 0, -1e4)
    h = h + (a.softmax(-1) @ v).reshape(B, Tp, -1)
    if pad > 0:
        h = h[:, :-pad]
    return {"logits": h @ out}


def test_a_sequence_padded_up_to_its_attention_window_inside_the_forward():
    """Ids and their mask padded up to a multiple of the window (8) inside the forward, as
    Longformer does, and the output cropped back by the amount: one executable for every
    length of a bucket once the pad's amount was seen to change; values and gradients
    eager's. Before: a compile per amount, exact where the crop's length met the
    loss's."""
    g = torch.Generator().manual_seed(6)
    params = [torch.randn(*s, generator=g) * 0.3 for s in [(20, 8), (8, 24), (8, 20)]]

    def inputs(n):
        gi = torch.Generator().manual_seed(n)
        return [torch.randint(2, 20, (2, n), generator=gi),
                (torch.rand(2, n, generator=gi) > 0.2).long()]

    # pads 7, 5, 3, 2, 1: the first graph pads by a constant, the others share one
    m = _check_padded(_windowed_lm, inputs, [(1, "T"), (1, "T")], [41, 35, 45, 38, 63],
                      params=[p.requires_grad_() for p in params], rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]


def _spectrogram(wav, w, center):
    """A log power spectrogram (``torch.stft``: reflect-padded when centred, framed by
    ``as_strided``), a conv over its frames and their mean."""
    s = torch.stft(wav, 32, 8, window=torch.hann_window(32, device=wav.device),
                   center=center, return_complex=True)
    feats = (s.abs() ** 2 + 1e-6).log()
    return {"feats": feats, "out": F.conv1d(feats, w, padding=1).tanh().mean(-1)}


@pytest.mark.parametrize("center", [True, False])
def test_a_spectrogram_of_signals_of_varying_length(center):
    """``torch.stft`` of a padded signal (a spectrogram front end: the signal is data,
    needing no gradient): its frames are windows along the padded dim (a symbol counting
    them, as a strided convolution's output), the centring reflection is cut and joined
    by slices, flips and a cat; values and gradients eager's, one compile. Before: an
    exact compile at every length. (The signal's own gradient, autograd's ``as_strided``
    backward, an ``index_add`` of host-made positions, still compiles exactly.)"""
    w = torch.randn(4, 17, 3, generator=torch.Generator().manual_seed(7)) * 0.2

    def signals(n):
        return [torch.randn(2, n, generator=torch.Generator().manual_seed(n))]

    # (T + 32, the centred signal, stays in T's bucket: one compile)
    m = _check_padded(lambda x, w: _spectrogram(x, w, center), signals, [(1, "T")],
                      [150, 181, 201, 224], params=(w.requires_grad_(),), rtol=1e-4,
                      atol=1e-4, input_grads=False)
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


class _ReflectNet(nn.Module):
    """An image-to-image generator's edges (CycleGAN's ResNet blocks): reflection padding
    before each convolution, by ``nn.ReflectionPad2d`` and by ``padding_mode``, and a
    replicated edge."""

    def __init__(self):
        super().__init__()
        self.pad = nn.ReflectionPad2d((3, 2, 1, 3))
        self.c1 = nn.Conv2d(3, 4, (5, 6))
        self.c2 = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
        self.c3 = nn.Conv2d(4, 3, 3, padding=(2, 1), padding_mode="replicate")

    def forward(self, x):
        h = self.c2(torch.tanh(self.c1(self.pad(x))))
        return {"out": x + self.c3(h)[:, :, 1:-1]}


def test_reflection_and_replication_padding_of_images_of_varying_size():
    """Reflection and replication padding of padded H and W (slices near each end,
    flipped or expanded, joined by a cat; the backward adds the edges' gradients back):
    values and gradients eager's, one compile for the sizes of a bucket. Before: torch's
    decompositions gathered with indices made on the host at each size, an executable
    per size, and replication's backward compiled exactly."""
    torch.manual_seed(0)
    _check_images_through(_ReflectNet(), [(9, 11), (12, 9), (11, 10)])


def _frames(x, w):
    """Frames of a signal by ``Tensor.unfold`` (windows of 8 every 4, and of 5 every 1),
    weighted and summed."""
    return {"hop4": x.unfold(-1, 8, 4) @ w, "hop1": x.unfold(1, 5, 1).sum(-1) * 1.0}


def test_unfolding_a_padded_dim_into_windows():
    """``x.unfold(dim, size, step)`` along a padded dim: the window count is a symbol
    (a convolution's output dim); values and gradients eager's, one compile."""
    w = torch.randn(8, 3, generator=torch.Generator().manual_seed(8))

    def signals(n):
        return [torch.randn(2, n, generator=torch.Generator().manual_seed(n))]

    m = _check_padded(_frames, signals, [(1, "T")], [19, 26, 32],
                      params=(w.requires_grad_(),))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_unfolding_a_concrete_dim_beside_a_padded_batch():
    """Windows along a concrete dim of a batch whose size varies: the padded batch passes
    through, and the gradient is laid out at the padded batch's size."""
    w = torch.randn(4, 2, generator=torch.Generator().manual_seed(9))

    def batches(n):
        return [torch.randn(n, 11, generator=torch.Generator().manual_seed(n))]

    m = _check_padded(lambda x, w: {"y": x.unfold(1, 4, 3) @ w}, batches, [(0, "B")],
                      [5, 7, 8], params=(w.requires_grad_(),))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_a_same_convolution_of_an_even_kernel_grows_the_padded_dim():
    """wav2vec2's positional convolution: kernel 16, padding 8, grouped, so T + 1
    outputs, the last cut by ``[..., :-1]`` (its ``SamePadLayer``). The result is
    ``T+1``, padded by exactly 1 as the convolution of the padded input is long, its true
    outputs torch's (the input's padding reads as zeros); the cut is T again, so the
    residual adds. Values and gradients eager torch's, one compile (before: an exact
    compile at every length: a window op that grows a dynamic dim)."""
    torch.manual_seed(0)
    conv = nn.Conv1d(8, 8, 16, padding=8, groups=4)
    fn, params = _module_call(conv)

    def block(x, *ps):
        h = x.transpose(1, 2)
        y = fn(h, *ps)["out"][..., :-1]
        return {"out": (h + F.gelu(y)).transpose(1, 2) * 1.5,
                "grown": fn(h, *ps)["out"].square().mean(-1)}

    def inputs(T):
        return [torch.randn(2, T, 8, generator=torch.Generator().manual_seed(T))]
    m = _check_padded(block, inputs, [(1, "T")], _sizes(17, 32, 3, 2), params=params,
                      rtol=1e-4, atol=1e-5)
    assert m["exact_compiles"] == {} and m["compiles"] == 1, m["recompile_reasons"]
