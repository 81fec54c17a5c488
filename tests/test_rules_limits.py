"""Limits torch puts on sizes that the shape alone does not show: reflection/circular
padding below/at most the padded size and their input ranks, instance norm's more than
one spatial element, and element counts divisible by a view's fixed sizes when the count
is a product of floors. Torch is the oracle at every size set."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rule_harness import analyze_only, check, check_error
from shapeinfer import symbolic as sym


def _when_holds(diag: dict, sizes: dict):
    import sympy

    cond = sympy.sympify(diag["when"], locals={k: sym.symbol(k) for k in sizes})
    return sym.holds_at(cond, {sym.symbol(k): v for k, v in sizes.items()})


# ---- padding ---------------------------------------------------------------------------

class Pads(nn.Module):
    def __init__(self):
        super().__init__()
        self.reflect = nn.ReflectionPad2d(3)
        self.reflect1 = nn.ReflectionPad1d((2, 1))
        self.circular = nn.CircularPad2d((1, 4, 2, 0))
        self.replicate = nn.ReplicationPad2d(5)
        self.conv = nn.Conv2d(4, 2, 3, padding=2, padding_mode="reflect")

    def forward(self, x):
        a = self.reflect(x)
        b = self.reflect1(x[:, :, 0])
        c = self.circular(x)
        d = self.replicate(x)
        e = self.conv(x)
        f = F.pad(x, (1, 2, 3, 0), mode="reflect")
        g = F.pad(x[0], (4, 4), mode="circular")
        return a


def test_padding_modes_at_sizes_they_allow():
    res = check(Pads(), {"x": ("B", 4, "H", "W")}, {"B": (1, 3), "H": (4, 9), "W": (4, 11)}, n=5)
    # the minimum sizes are reported as notes, with the condition under which torch fails
    notes = [d for d in res.diagnostics if d["code"] == "SI300"]
    assert notes and all(d["severity"] == "note" for d in notes), notes
    for bad in ({"B": 2, "H": 3, "W": 5}, {"B": 2, "H": 5, "W": 3}):
        assert any(_when_holds(d, bad) for d in notes)
        with pytest.raises(RuntimeError):
            Pads()(torch.zeros(bad["B"], 4, bad["H"], bad["W"]))


class Fails(nn.Module):
    """One layer that torch rejects; the subclass's forward names the expected code."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer


class FailsSI146(Fails):
    def forward(self, x):
        y = self.layer(x)  # error: SI146
        return y


class FailsAtSample(Fails):
    """A minimum size the sample violates: the SI300 requirement is an error there."""

    def forward(self, x):
        y = self.layer(x)  # error: SI300
        return y


class FailsSI143(Fails):
    def forward(self, x):
        y = self.layer(x)  # error: SI143
        return y


class FailsSI150(Fails):
    def forward(self, x):
        y = self.layer(x)  # error: SI150
        return y


def reflect_rank(x):
    y = F.pad(x, (1, 1), mode="reflect")  # error: SI146
    return y


def circular_wraps_twice(x):
    y = F.pad(x, (3, 3), mode="circular")  # error: SI146
    return y


PAD_ERRORS = [
    (FailsSI146(nn.ReflectionPad2d(4)), {"x": ("B", 3, 4, 4)}, [{"B": 1}, {"B": 3}]),
    (FailsSI146(nn.ReflectionPad2d((1, 2, 3, 1))), {"x": ("B", 3, 3, 8)}, [{"B": 2}]),
    (FailsAtSample(nn.ReflectionPad2d(4)), {"x": ("B", 3, "H", "H")}, [{"B": 2, "H": 4}, {"B": 1, "H": 3}]),
    (FailsSI146(nn.ReflectionPad2d(4)), {"x": ("B", "H")}, [{"B": 2, "H": 9}]),  # 2-d input
    (FailsSI146(nn.ReflectionPad2d(4)), {"x": ("B", 3, 2, "H", "H")}, [{"B": 2, "H": 9}]),  # 5-d input
    (reflect_rank, {"x": ("B", 3, "H", "H")}, [{"B": 2, "H": 9}]),
    (circular_wraps_twice, {"x": ("B", 3, 2)}, [{"B": 2}, {"B": 5}]),
    (FailsSI146(nn.CircularPad2d(1)), {"x": ("B", "H")}, [{"B": 2, "H": 9}]),
    (FailsSI146(nn.Conv2d(3, 2, 5, padding=3, padding_mode="reflect")), {"x": ("B", 3, 3, 8)}, [{"B": 2}]),
]


def _id(v):
    if isinstance(v, Fails):
        return f"{type(v).__name__}-{type(v.layer).__name__}"
    return getattr(v, "__name__", None)


@pytest.mark.parametrize("model,inputs,sizes", PAD_ERRORS, ids=_id)
def test_padding_errors(model, inputs, sizes):
    for s in sizes:
        check_error(model, inputs, s)


# ---- instance norm ---------------------------------------------------------------------

class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.tracked = nn.InstanceNorm2d(4, track_running_stats=True).eval()
        self.inorm1 = nn.InstanceNorm1d(4)

    def forward(self, x):
        a = self.inorm(x)
        b = self.tracked(x[:, :, :1, :1])  # running statistics: one element is fine
        c = self.inorm1(x.flatten(2))
        d = self.inorm(x[0])
        e = F.instance_norm(x)
        return a


def test_instance_norm_at_sizes_it_allows():
    check(Norms(), {"x": ("B", 4, "H", "W")}, {"B": (1, 3), "H": (1, 6), "W": (2, 7)})


def functional_one_by_one(x):
    y = F.instance_norm(x)  # error: SI143
    return y


NORM_ERRORS = [
    (FailsSI143(nn.InstanceNorm2d(4, affine=True)), {"x": ("B", 4, 1, 1)}, [{"B": 1}, {"B": 5}]),
    (FailsSI143(nn.InstanceNorm2d(4, affine=True)), {"x": (4, 1, 1)}, [{}]),  # unbatched
    (FailsAtSample(nn.InstanceNorm2d(4, affine=True)), {"x": ("B", 4, "H", "W")}, [{"B": 2, "H": 1, "W": 1}]),
    (FailsSI150(nn.InstanceNorm2d(4, affine=True)), {"x": ("B", 4)}, [{"B": 3}]),
    (functional_one_by_one, {"x": ("B", 3, 1)}, [{"B": 2}]),
]


@pytest.mark.parametrize("model,inputs,sizes", NORM_ERRORS, ids=_id)
def test_instance_norm_errors(model, inputs, sizes):
    for s in sizes:
        check_error(model, inputs, s)


def test_instance_norm_spatial_condition_names_the_failing_sizes():
    model = FailsAtSample(nn.InstanceNorm2d(4, affine=True))
    diags = analyze_only(model, {"x": ("B", 4, "H", "W")}, {"B": 2, "H": 3, "W": 1})["diagnostics"]
    (d,) = [d for d in diags if d["code"] == "SI300"]
    assert d["severity"] == "note" and _when_holds(d, {"B": 2, "H": 1, "W": 1})
    assert not _when_holds(d, {"B": 2, "H": 2, "W": 1})


# ---- divisibility of a product of floors -----------------------------------------------

class StridedView(nn.Module):
    """dcgan's Discriminator tail: a strided conv, then view(-1, 2) of B*h*w elements."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 4, 16)

    def forward(self, x):
        out = self.conv(x)
        y = out.view(-1, 2)  # error: SI300
        return y


def test_view_of_a_product_of_floors_needs_divisibility():
    inputs = {"x": ("B", 1, "H", "W")}
    # B * ((H - 4)//16 + 1) * ((W - 4)//16 + 1) elements: odd at B=1, H=W=16 (torch fails)
    check_error(StridedView(), inputs, {"B": 1, "H": 16, "W": 16})
    check_error(StridedView(), inputs, {"B": 3, "H": 40, "W": 16})
    good = [{"B": 2, "H": 16, "W": 16}, {"B": 1, "H": 20, "W": 21}, {"B": 3, "H": 20, "W": 40}]
    res = check(StridedView(), inputs, good)
    (d,) = [d for d in res.diagnostics if d["code"] == "SI300" and d["severity"] != "note"]
    assert d["severity"] == "warning" and "divisible by 2" in d["message"]
    for bad in ({"B": 1, "H": 16, "W": 16}, {"B": 3, "H": 40, "W": 16}, {"B": 5, "H": 36, "W": 36}):
        assert _when_holds(d, bad), bad
    for fine in good:
        assert not _when_holds(d, fine), fine
