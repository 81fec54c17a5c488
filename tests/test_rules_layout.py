"""Layout rules against torch: permute/transpose, view/reshape with -1 (solved
symbolically), flatten/unflatten, squeeze/unsqueeze, expand/repeat, cat/stack,
split/chunk/unbind, including symbolic sizes."""

import pytest
import torch

from rule_harness import Input, check

RANGES = {"B": (1, 6), "T": (2, 9), "D": (1, 7)}


def permutes(x):
    a = x.permute(2, 0, 1)
    b = x.transpose(0, 2)
    c = torch.transpose(x, -1, -2)
    d = x.permute(0, 2, 1).contiguous()
    e = torch.permute(x, (1, 2, 0))
    f = x.swapaxes(0, 1)
    g = x.mT
    h = x[0].t()
    i = x[0].T
    j = torch.movedim(x, 0, -1)
    k = x.movedim((0, 1), (2, 0))
    return a


@pytest.mark.parametrize("dt", [torch.float32, torch.int64, torch.bool], ids=str)
def test_permute_transpose(dt):
    check(permutes, {"x": Input(("B", "T", "D"), dt)}, RANGES)


def reshapes(x):
    a = x.view(-1)
    b = x.reshape(x.shape[0], -1)
    c = x.view(-1, x.size(2))
    d = x.reshape(x.size(0) * x.size(1), x.size(2))
    e = x.flatten()
    f = x.flatten(1)
    g = torch.flatten(x, 0, 1)
    h = f.unflatten(1, (x.shape[1], x.shape[2]))
    i = e.view(x.shape[0], -1, x.shape[2])
    j = x.reshape(-1, 1, x.shape[2])
    k = x.view(x.shape)
    m = x.reshape(b.shape)
    n = x.view_as(x)
    o = b.reshape_as(x)
    p = x.ravel()
    q = torch.reshape(x, (-1, x.shape[-1]))
    return a


def test_view_reshape_flatten():
    check(reshapes, {"x": ("B", "T", "D")}, RANGES)


def reshape_split_heads(x):
    B, T, C = x.shape
    h = 4
    q = x.view(B, T, h, C // h).transpose(1, 2)
    k = x.view(B, T, h, -1)
    y = q.transpose(1, 2).contiguous().view(B, T, C)
    z = x.unflatten(-1, (h, -1))
    w = x.reshape(B, T, 2, -1).flatten(2)
    return y


def test_reshape_heads_with_divisible_sizes():
    check(reshape_split_heads, {"x": ("B", "T", "C")}, {"B": (1, 5), "T": (2, 9), "C": [4, 8, 12, 16]})


def squeezes(x):
    a = x.unsqueeze(0)
    b = x.unsqueeze(-1)
    c = a.squeeze(0)
    d = b.squeeze(-1)
    e = torch.unsqueeze(x, 1)
    f = x[:, None, :, None]
    g = f.squeeze(1)
    h = f.squeeze((1, 3))
    i = x.unsqueeze(1).squeeze()
    j = x.squeeze(0)
    return a


def test_squeeze_unsqueeze():
    check(squeezes, {"x": ("B", "T")}, {"B": (2, 6), "T": (2, 9)})


def squeeze_symbolic(x):
    a = x.squeeze(0)
    b = x.squeeze()
    c = x.unsqueeze(1).squeeze(1)
    d = x.squeeze(-1).sum()
    return a


def test_squeeze_of_a_symbolic_dim_depends_on_whether_it_is_one():
    # B and T may be 1: the result has a "when" per case, never a guessed rank
    check(squeeze_symbolic, {"x": ("B", "T")},
          [{"B": 1, "T": 3}, {"B": 4, "T": 5}, {"B": 2, "T": 1}, {"B": 1, "T": 1}])


def expands(x, y):
    a = x.expand(-1, y.shape[1], -1)
    b = x.expand(x.shape[0], y.shape[1], x.shape[2])
    c = x.expand_as(torch.empty(x.shape[0], 5, x.shape[2]))
    d = x.repeat(1, 3, 2)
    e = x.repeat(2, 1, 1, 1)
    f = y.expand(2, -1, -1)
    g = torch.broadcast_to(x, (x.shape[0], 4, x.shape[2]))
    h = x.tile((2,))
    i = x.repeat_interleave(3, dim=1)
    j = y.repeat(y.shape[0], 1)
    return a


def test_expand_repeat():
    check(expands, {"x": ("B", 1, "D"), "y": ("B", "T")}, RANGES)


def cats(x, y, z):
    a = torch.cat([x, y], dim=1)
    b = torch.cat((x, x, x), 0)
    c = torch.stack([x, x], dim=0)
    d = torch.stack((x, x, x), dim=-1)
    e = torch.cat([x, z.expand(-1, -1, x.shape[2])], dim=1)
    f = torch.concat([y, x], dim=-2)
    g = torch.cat([x.unsqueeze(0)] * 3)
    h = torch.stack([x[:, i] for i in range(2)], dim=1)
    i = torch.hstack([x, y])
    j = torch.vstack([x, x])
    return a


def test_cat_stack():
    check(cats, {"x": ("B", "T", "D"), "y": ("B", "S", "D"), "z": ("B", 1, 1)},
          {"B": (1, 6), "T": (2, 9), "D": (1, 7), "S": (1, 8)})


def cat_dtypes(x, y):
    a = torch.cat([x, y])
    b = torch.stack([x, y])
    return a


@pytest.mark.parametrize("dx,dy", [(torch.float32, torch.float64), (torch.int64, torch.float32),
                                   (torch.bool, torch.int32)], ids=["f32-f64", "i64-f32", "bool-i32"])
def test_cat_promotes(dx, dy):
    check(cat_dtypes, {"x": Input(("B", "T"), dx), "y": Input(("B", "T"), dy)}, RANGES)


def splits(x):
    a, b = x.split([2, x.shape[1] - 2], dim=1)
    c, d = torch.chunk(x, 2, dim=2)
    e = x.unbind(0)
    f = x.split(1, dim=0)
    g = torch.split(x, 3, dim=1)
    h, i, j = x.chunk(3, dim=1)
    k = torch.tensor_split(x, 3, dim=1)
    m = x.split(x.shape[2] // 2, dim=2)
    return a


def test_split_chunk_unbind_concrete():
    check(splits, {"x": ("B", 7, "D")}, {"B": [3], "D": [2, 4, 6, 8]})


def splits_symbolic(x):
    q, k, v = x.chunk(3, dim=-1)
    a, b = x.split(x.shape[-1] // 2, dim=-1)
    rows = x.unbind(1)
    first = rows[0]
    c = x.split([1, x.shape[1] - 1], dim=1)
    d = torch.stack(rows, dim=0)
    return q


def test_split_chunk_unbind_symbolic():
    check(splits_symbolic, {"x": ("B", "T", "C")}, {"B": (1, 5), "T": (2, 9), "C": [6, 12, 18]})


def narrow_select(x):
    a = x.narrow(1, 1, 2)
    b = x.select(1, 0)
    c = torch.narrow(x, -1, 0, x.shape[-1] - 1)
    d = x.roll(1, 0)
    e = x.flip(0)
    f = torch.tril(x)
    g = x.triu(1)
    return a


def test_narrow_select_same_shape():
    check(narrow_select, {"x": ("B", "T", "D")}, RANGES)


def pixel(x):
    a = torch.pixel_shuffle(x, 2)
    b = torch.pixel_unshuffle(a, 2)
    return a


def test_pixel_shuffle_functional():
    check(pixel, {"x": ("B", 8, "H", "W")}, {"B": (1, 3), "H": (1, 7), "W": (1, 9)})


def shape_values(x):
    n = x.numel()
    y = x.view(n)
    B, T, D = x.size()
    z = x.new_zeros(B * T, D)
    k = x.dim()
    w = x.reshape(B, T * D)
    return y


def test_shape_arithmetic():
    check(shape_values, {"x": ("B", "T", "D")}, RANGES)


def chunk_any(x):
    a, b = x.chunk(2, dim=1)
    c = x.chunk(3, dim=-1)
    parts = x.split(2, dim=1)
    return a


def test_chunk_and_split_of_any_symbolic_size():
    # odd and even sizes: the uneven case is exact (chunk) or unknown (split), never wrong
    check(chunk_any, {"x": ("B", "T", "C")}, {"B": (1, 4), "T": (2, 11), "C": (3, 13)}, n=6,
          allow_unknown=("parts", "c"))


def symbolic_lists(x):
    cols = [x[:, t] for t in range(x.shape[1])]
    a = torch.stack(cols, dim=1)
    b = torch.cat(cols, dim=-1)
    outs = []
    for t in range(x.shape[1]):
        outs.append(x[:, t] * 2)
    c = torch.stack(outs, 0)
    d = torch.cat([x] * 2, dim=1)
    e = torch.stack(x.unbind(1), dim=-1)
    return a


def test_stack_and_cat_of_symbolic_length_lists():
    check(symbolic_lists, {"x": ("B", "T", "D")}, RANGES)


def diffs(x):
    a = torch.diff(x, dim=-1)
    b = torch.diff(x, prepend=x[:, :1] - 1, dim=-1)
    c = x.diff(n=2, dim=0)
    d = torch.diff(x, append=x[:, -2:], dim=1)
    return a


def test_diff():
    check(diffs, {"x": ("B", "T")}, {"B": (3, 7), "T": (2, 9)})


def views_with_zero_sizes(x):
    B, T, C = x.shape
    usable = (T // 4) * 4
    k = x[:, :usable]
    if k.shape[1] > 0:  # deepseek_v4's compressor: whole windows of 4 tokens
        n = k.shape[1] // 4
        w = k.view(B, n, 4, -1)
    e = x[:, :0]
    a = e.view(B, -1)
    b = e.reshape(B, 0, C)
    c = e.view(-1)
    d = e.view(-1, C)
    f = x.new_zeros(0, C).view(0, C, 1)
    return a


def test_view_with_zero_sizes():
    check(views_with_zero_sizes, {"x": ("B", "T", "C")}, {"B": (1, 5), "T": (1, 13), "C": (1, 6)}, n=6)
