"""Indexing rules against torch: ints, slices with symbolic bounds, negative indices,
None, Ellipsis, steps, index tensors (advanced indexing), boolean masks (data-dependent:
unknown with a note, never a guessed shape), gather/index_select/take_along_dim."""

import torch

from rule_harness import Input, check

RANGES = {"B": (1, 6), "T": (2, 10), "D": (1, 7)}


def slicing(x):
    a = x[0]
    b = x[:, 0]
    c = x[..., -1]
    d = x[:, :x.shape[1] - 1]
    e = x[:, 1:]
    f = x[:, None]
    g = x[None, ..., None]
    h = x[:, ::2]
    i = x[:, 1::3]
    j = x[-1, -1]
    k = x[:, -2:]
    m = x[:, :-1]
    n = x[:, 1:-1]
    o = x[..., :2]
    p = x[:, :, None, 0]
    q = x[:, 2:100]
    r = x[:, x.shape[1]:]
    s = x[1:2, :, 0:1]
    return a


def test_slices_ints_none_ellipsis():
    check(slicing, {"x": ("B", "T", "D")}, {"B": (2, 6), "T": (2, 10), "D": (1, 7)})


def symbolic_bounds(x, t0):
    T = x.shape[1]
    a = x[:, :T - 1]
    b = x[:, T // 2:]
    c = x[:, :T // 2]
    d = x[:, t0:]
    e = x[:, :t0]
    f = x[:, T - 3:T - 1]  # unknown (the sign of T - 3 is not decided: no piecewise dims)
    g = x[:, -T:]
    h = x[:, :2 * T]
    return a


def test_symbolic_slice_bounds():
    check(symbolic_bounds, {"x": ("B", "T", "D"), "t0": 2}, {"B": (1, 6), "T": (3, 11), "D": (1, 7)})


def advanced(x, idx, rows):
    a = x[idx]
    b = x[:, idx]
    c = x[rows, idx]
    d = x[[0, 1]]
    e = x[:, [0, 0, 1]]
    f = x[idx, :, idx]
    g = x[rows[:, None], idx]
    h = x[..., idx]
    i = x[0, idx]
    j = x[:, idx, 0]
    return a


def test_index_tensors():
    check(advanced, {"x": ("B", "T", "D"), "idx": Input(("K",), torch.int64, high=1),
                     "rows": Input(("K",), torch.int64, high=1)},
          {"B": (2, 6), "T": (2, 9), "D": (2, 7), "K": (1, 5)})


def masks(x, m):
    a = x[m]  # unknown: SI003
    b = x[x > 0]  # unknown: SI003
    c = x[:, m[0]]  # unknown: SI003
    d = torch.masked_select(x, x > 0)  # unknown: SI003
    e = x.nonzero()  # unknown: SI003
    f = x.masked_fill(m, 0.0)
    return f


def test_boolean_masks_are_data_dependent():
    check(masks, {"x": ("B", "T"), "m": Input(("B", "T"), torch.bool)}, RANGES)


def gathers(x, idx, idx2):
    a = torch.gather(x, 1, idx2)
    b = x.index_select(0, idx)
    c = torch.index_select(x, 2, idx)
    d = x.gather(-1, idx2[..., :1].expand(-1, -1, x.shape[2]))
    e = torch.take_along_dim(x, idx2, dim=1)
    f = x.scatter(1, idx2, 0.0)
    g = x.index_add(0, idx, x[:idx.shape[0]]) if False else x
    return a


def test_gather_index_select():
    check(gathers, {"x": ("B", "T", "D"), "idx": Input(("K",), torch.int64, high=1),
                    "idx2": Input(("B", "S", "D"), torch.int64, high=1)},
          {"B": (1, 5), "T": (2, 9), "D": (1, 7), "K": (1, 5), "S": (1, 6)})


def setitem(x):
    y = x.clone()
    y[:, 0] = 0
    z = y[:, 1:] * 2
    w = x.new_ones(x.shape)
    return z


def test_slices_after_setitem():
    check(setitem, {"x": ("B", "T")}, RANGES)
