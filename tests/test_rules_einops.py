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


# ---- pack / unpack ---------------------------------------------------------------------

def packing(x, img, cls):
    from einops import pack, unpack

    packed, ps = pack([cls, x], "b * c")
    first, rest = unpack(packed, ps, "b * c")
    tokens, ps2 = pack([x, img.flatten(2).transpose(1, 2)], "b * c")
    a, b = unpack(tokens, ps2, "b * c")
    both, ps3 = pack([img, img[:, :, 0]], "b c *")
    c, d = unpack(both, ps3, "b c *")
    head, tail = unpack(tokens, [[1], [-1]], "b * c")
    sq, flat = unpack(packed, [[1, 1], [-1]], "b * c")
    lone, lps = pack([x], "* c")
    back = unpack(lone, lps, "* c")[0]
    return rest, a, b, c, d, head, tail, sq, flat, back


def test_pack_unpack():
    check(packing, {"x": ("B", "T", 3), "img": ("B", 3, "H", "W"), "cls": ("B", 3)}, RANGES)


def unpack_open_piece(pairs, extra, tokens):
    from einops import pack, unpack

    packed, _ = pack([pairs, extra], "b * c")
    h, rest = unpack(packed, [[-1, 2], [3]], "b * c")
    g, more = unpack(tokens, [[-1, 2], [3]], "b * c")  # unknown: N - 3 may be negative or odd
    return h, g


def test_unpack_open_piece_with_known_factor():
    check(unpack_open_piece, {"pairs": ("B", "T", 2, 4), "extra": ("B", 3, 4), "tokens": ("B", "N", 4)},
          {"B": (1, 4), "T": (1, 6), "N": [5, 7, 11, 13]})


def unpack_overlapping(tokens):
    from einops import unpack

    a, mid, b = unpack(tokens, [[4], [-1], [4]], "b * c")  # unknown: T - 8 when T >= 8, else 0
    return mid


def test_unpack_overlapping_pieces():
    # einops slices from both ends: with T < 8 the -1 piece comes out empty, no error
    check(unpack_overlapping, {"tokens": ("B", "T", 2)},
          [{"B": 2, "T": 5}, {"B": 3, "T": 9}, {"B": 1, "T": 8}, {"B": 4, "T": 12}])


def pack_mismatch(x, y):
    from einops import pack

    p, ps = pack([x, y], "b * c")  # error: SI115
    return p


def pack_rank(x, y):
    from einops import pack

    p, ps = pack([x, y], "b t * c")  # error: SI132
    return p


def unpack_rank(x):
    from einops import unpack

    a, b = unpack(x, [[2], [3]], "b * c")  # error: SI132
    return a


def unpack_sizes(x):
    from einops import unpack

    a, b = unpack(x, [[2], [3]], "b * c")  # error: SI132
    return a


def unpack_indivisible(x):
    from einops import unpack

    a, b = unpack(x, [[-1, 4], [1]], "b * c")  # error: SI111
    return a


def unpack_two_open(x):
    from einops import unpack

    a, b = unpack(x, [[-1], [-1]], "b * c")  # error: SI132
    return a


def pack_no_star(x):
    from einops import pack

    p, ps = pack([x], "b c")  # error: SI132
    return p


@pytest.mark.parametrize("model,inputs,sizes", [
    (pack_mismatch, {"x": ("B", "T", 3), "y": ("B", "T", 4)}, [{"B": 2, "T": 3}, {"B": 5, "T": 7}]),
    (pack_rank, {"x": ("B", "T", 3), "y": ("B", 3)}, [{"B": 2, "T": 3}, {"B": 3, "T": 6}]),
    (unpack_rank, {"x": ("B", 5, 2, 3)}, [{"B": 2}, {"B": 7}]),
    (unpack_sizes, {"x": ("B", 6, 3)}, [{"B": 2}, {"B": 7}]),
    (unpack_indivisible, {"x": ("B", 10, 3)}, [{"B": 2}, {"B": 5}]),
    (unpack_two_open, {"x": ("B", 10, 3)}, [{"B": 2}, {"B": 5}]),
    (pack_no_star, {"x": ("B", 3)}, [{"B": 2}]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_pack_unpack_errors(model, inputs, sizes):
    from rule_harness import check_error

    for s in sizes:
        check_error(model, inputs, s)


def unpack_symbolic_sum(x):
    from einops import unpack

    a, b = unpack(x, [[2], [3]], "b * c")  # error: SI300
    return a


def test_unpack_symbolic_sum_is_a_condition():
    """Pieces of 2 and 3 from an axis of T: right only when T == 5, an error at a sample
    that fails it (torch agrees at T = 4 and runs at T = 5)."""
    from rule_harness import analyze_only, check_error

    check_error(unpack_symbolic_sum, {"x": ("B", "T", 3)}, {"B": 2, "T": 4})
    diags = analyze_only(unpack_symbolic_sum, {"x": ("B", "T", 3)}, {"B": 2, "T": 5})["diagnostics"]
    assert [d["severity"] for d in diags if d["code"] == "SI300"] == ["warning"], diags
    check(unpack_symbolic_sum, {"x": ("B", "T", 3)}, [{"B": 2, "T": 5}, {"B": 4, "T": 5}])


# ---- EinMix -----------------------------------------------------------------------------

class Mixers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from einops.layers.torch import EinMix

        self.channel = EinMix("b t c -> b t d", weight_shape="c d", bias_shape="d", c=6, d=5)
        self.heads = EinMix("b t (h c) -> b t (h e)", weight_shape="h c e", bias_shape="h e", h=2, c=3, e=4)
        self.time = EinMix("b t c -> b u c", weight_shape="t u", t=4, u=7)
        self.scale = EinMix("b ... c -> b ... c", weight_shape="c", c=6)
        self.patch = EinMix("b c (h p1) (w p2) -> b h w d", weight_shape="c p1 p2 d", c=3, p1=2, p2=2, d=8)

    def forward(self, x, img):
        a = self.channel(x)
        b = self.heads(x)
        c = self.time(x[:, :4])
        d = self.scale(x)
        e = self.patch(img)
        return a, b, c, d, e


def test_einmix():
    check(Mixers(), {"x": ("B", "T", 6), "img": ("B", 3, "H", "W")},
          {"B": (1, 5), "T": (4, 9), "H": [2, 4, 6], "W": [2, 4, 8]})


class OneEinMix(torch.nn.Module):
    """One EinMix layer whose einsum does not fit the input."""

    def __init__(self, pattern, weight_shape, bias_shape=None, **lengths):
        super().__init__()
        from einops.layers.torch import EinMix

        self.mix = EinMix(pattern, weight_shape=weight_shape, bias_shape=bias_shape, **lengths)

    def forward(self, x):
        y = self.mix(x)  # error: SI132
        return y


class EinMixBadBias(OneEinMix):
    """The einsum fits; the bias, added in place, does not."""

    def forward(self, x):
        y = self.mix(x)  # error: SI101
        return y


@pytest.mark.parametrize("model,inputs,sizes", [
    (OneEinMix("b t c -> b t d", "c d", c=6, d=5), {"x": ("B", "T", 7)}, [{"B": 2, "T": 3}, {"B": 5, "T": 4}]),
    (OneEinMix("b t (h c) -> b t (h e)", "h c e", h=2, c=3, e=4), {"x": ("B", 6)}, [{"B": 2}, {"B": 3}]),
    (OneEinMix("b t (h c) -> b t (h e)", "h c e", h=2, c=3, e=4), {"x": ("B", "T", 5)}, [{"B": 2, "T": 3}]),
    (EinMixBadBias("b t c -> b t c", "b", "c", b=2, c=5), {"x": (2, "T", 1)}, [{"T": 3}, {"T": 6}]),
], ids=["channels", "rank", "group", "bias"])
def test_einmix_errors(model, inputs, sizes):
    from rule_harness import check_error

    for s in sizes:
        check_error(model, inputs, s)
