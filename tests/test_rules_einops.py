"""einops rearrange/reduce/repeat and their layers, against real runs at random sizes."""

import pytest
import torch

einops = pytest.importorskip("einops")
from einops import rearrange, reduce, repeat  # noqa: E402
from einops.layers.torch import Rearrange, Reduce  # noqa: E402

from rule_harness import check  # noqa: E402

RANGES = {"B": (1, 5), "T": (2, 9), "H": [2, 4, 6], "W": [2, 4, 8]}


def patterns(x, img):
    a = rearrange(x, "b t (h d) -> b h t d", h=2)
    b = rearrange(a, "b h t d -> b t (h d)")
    c = reduce(x, "b t c -> b c", "mean")
    d = repeat(x, "b t c -> b t r c", r=3)
    e = rearrange(x, "b ... -> (b ...)")
    f = rearrange(img, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=2, p2=2)
    g = reduce(img, "b c (h 2) (w 2) -> b c h w", "max")
    h = rearrange([x, x], "n b t c -> b t n c")
    i = repeat(x[:, 0], "b c -> b t c", t=x.shape[1])
    return a


def test_rearrange_reduce_repeat():
    check(patterns, {"x": ("B", "T", 8), "img": ("B", 3, "H", "W")}, RANGES)


class Patchify(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.to_patches = Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=2, p2=2)
        self.pool = Reduce("b n d -> b d", "mean")

    def forward(self, img):
        p = self.to_patches(img)
        q = self.pool(p)
        return q


def layers(img):
    m = Patchify()
    out = m(img)
    return out


def test_einops_layers():
    check(layers, {"img": ("B", 3, "H", "W")}, RANGES)


def bad_split(x):
    a = rearrange(x, "b t (h d) -> b h t d", h=3)  # error: SI111
    return a


def test_indivisible_split_is_an_error():
    from rule_harness import check_error

    check_error(bad_split, {"x": ("B", "T", 8)}, {"B": 2, "T": 5})


def einsums(q, k):
    from einops import einsum

    sim = einsum(q, k, "b h i d, b h j d -> b h i j")
    out = einsum(sim, k, "b h i j, b h j d -> b h i d")
    return out


def test_einops_einsum():
    check(einsums, {"q": ("B", 2, "T", 4), "k": ("B", 2, "T", 4)}, RANGES)
