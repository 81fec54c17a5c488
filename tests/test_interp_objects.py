"""Objects the analysis builds or runs through: forward hooks, dict subclasses with their
own ``__setattr__``, and objects whose constructor forks on values the analysis lost.
Each test compares with what torch really does at several sizes."""

from collections import OrderedDict
from dataclasses import dataclass, fields
from typing import Optional

import pytest
import torch
import torch.nn as nn

import shapeinfer
from shapeinfer.values import TensorType, TupleV, Unknown
from shapeinfer import symbolic as sym


def _shape_at(value, sizes):
    assert isinstance(value, TensorType) and value.shape is not None, value
    return tuple(sym.evaluate(d, sizes) for d in value.shape)


# ---- forward hooks ------------------------------------------------------------------


_collected: list = []


def _record_output(module, args, output):
    _collected.append(output)  # returns None: the output is unchanged


def _flatten_output(module, args, output):
    return output.flatten(1)


def _transpose_input(module, args):
    return (args[0].transpose(1, 2),)


class Stages(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 6)

    def forward(self, x):
        return self.b(self.a(x))


def _hooked():
    m = Stages()
    m.a.register_forward_pre_hook(_transpose_input)  # (B, 4, T) -> (B, T, 4)
    m.a.register_forward_hook(_record_output)
    m.b.register_forward_hook(_flatten_output)  # (B, T, 6) -> (B, T*6)
    return m


@pytest.mark.parametrize("sizes", [{"B": 2, "T": 3}, {"B": 1, "T": 7}])
def test_forward_hooks_and_pre_hooks_run_as_module_call_runs_them(sizes):
    m = _hooked()
    x = torch.randn(sizes["B"], 4, sizes["T"])
    r = shapeinfer.analyze(m, args=(torch.randn(2, 4, 3),), dims={"x": ("B", 4, "T")})
    assert not r.errors
    assert _shape_at(r.output, sizes) == tuple(m(x).shape)


class InstallsHooksAtFirstCall(nn.Module):
    """What transformers' ``capture_outputs`` does: hooks registered on the layers at the
    first call (once), each appending its layer's output to a collector the forward made
    for the call; the forward returns the collected outputs."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 6), nn.Linear(6, 3)])
        self.collector = None
        self.seen = {}

    def _install(self):
        if getattr(self, "_installed", False):
            return
        for layer in self.layers:
            def hook(module, args, output):
                if self.collector is not None:
                    self.collector.append(output)
            layer.register_forward_hook(hook)
        self._installed = True

    def forward(self, x):
        self._install()
        for layer in self.layers:   # keys added to a real dict, each set twice: listed once
            self.seen[layer] = 0
            self.seen[layer] = self.seen[layer] + 1
        n = len(list(self.seen))
        self.collector = []
        for layer in self.layers:
            x = layer(x)
        seen, self.collector = tuple(self.collector), None
        return seen[-2][..., :n], seen[-1].sum(-1, keepdim=True) * seen[0][..., :1]


@pytest.mark.parametrize("sizes", [{"B": 2, "T": 5}, {"B": 4, "T": 1}, {"B": 1, "T": 8}])
def test_hooks_registered_during_the_analysis_run_and_the_model_is_left_alone(sizes):
    """A hook the forward registers on a live module is kept in the analysis' overlay (the
    module's hook table is never changed) and runs at the module's later calls: before,
    it was dropped, the collector stayed empty, and ``seen[-1]`` was a false SI120."""
    m = InstallsHooksAtFirstCall()
    r = shapeinfer.analyze(m, args=(torch.randn(2, 5, 4),), dims={"x": ("B", "T", 4)})
    assert not r.errors, r.errors
    assert not any(layer._forward_hooks for layer in m.layers)   # left alone
    assert not hasattr(m, "_installed") and m.seen == {}
    want = m(torch.randn(sizes["B"], sizes["T"], 4))
    assert isinstance(r.output, TupleV)
    assert [_shape_at(v, sizes) for v in r.output.items] == [tuple(w.shape) for w in want]


# ---- a dict subclass with its own __setattr__ ---------------------------------------


@dataclass
class Fields(OrderedDict):
    """Like transformers' ModelOutput: fields mirrored as items, set through super()."""

    first: Optional[torch.Tensor] = None
    second: Optional[torch.Tensor] = None

    def __post_init__(self):
        first = self.first
        if isinstance(first, tuple):  # a tuple is kept as an item, the field reset and restored
            setattr(self, "first", None)
            self["first"] = first
        elif first is not None:
            self["first"] = first

    def __setattr__(self, name, value):
        if value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)


class BuildsFields(nn.Module):
    def forward(self, x):
        out = Fields(first=(x, x[:, :2]))
        return out.first[1]


@pytest.mark.parametrize("sizes", [{"B": 2, "T": 5}, {"B": 3, "T": 9}])
def test_super_setattr_of_a_dict_subclass_sets_the_attribute(sizes):
    m = BuildsFields()
    r = shapeinfer.analyze(m, args=(torch.randn(2, 5),), dims={"x": ("B", "T")})
    assert not r.errors
    assert _shape_at(r.output, sizes) == tuple(m(torch.randn(sizes["B"], sizes["T"])).shape)


# ---- an object built from a value the analysis lost ---------------------------------


@dataclass
class Output(OrderedDict):
    """ModelOutput's pattern: a first field that may be a tensor, a dict or an iterable
    of (key, value) pairs; items only for the fields that are not None."""

    value: Optional[torch.Tensor] = None
    extra: Optional[torch.Tensor] = None

    def __post_init__(self):
        first = self.value
        if extra_is_none(self) and not torch.is_tensor(first):
            if isinstance(first, dict):
                for k, v in first.items():
                    self[k] = v
            else:
                try:
                    iterator = iter(first)
                    is_iterator = True
                except TypeError:
                    is_iterator = False
                if is_iterator:
                    for element in iterator:
                        if isinstance(element, tuple) and len(element) == 2:
                            self[element[0]] = element[1]
                elif first is not None:
                    self["value"] = first
        else:
            for f in fields(self):
                v = getattr(self, f.name)
                if v is not None:
                    self[f.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


def extra_is_none(out):
    return out.extra is None


class LostValue(nn.Module):
    def forward(self, x):
        lost = torch.ops.aten.special_airy_ai(x)  # no shape rule: unknown to the analysis
        return Output(value=lost)[0]


def test_object_built_from_an_unknown_value_indexes_to_unknown_not_an_error():
    m = LostValue()
    x = torch.randn(2, 5)
    assert m(x).shape == x.shape  # the item is there for real
    r = shapeinfer.analyze(m, args=(x,), dims={"x": ("B", "T")})
    assert not r.errors, [d.message for d in r.errors]
    assert isinstance(r.output, Unknown)


# ---- a method called for one option of a union runs under that option's condition ----


class Items:
    def __init__(self, items):
        self.items = items

    def __getitem__(self, i):
        return self.items[i]


class PerOption(nn.Module):
    def forward(self, x):
        lost = torch.ops.aten.special_airy_ai(x)  # unknown: `lost is not None` is undecided
        items = Items((x * 2,)) if lost is not None else Items(())
        return items[0]


def test_method_of_one_union_option_reports_under_that_options_condition():
    m = PerOption()
    x = torch.randn(2, 5)
    r = shapeinfer.analyze(m, args=(x,), dims={"x": ("B", "T")})
    # indexing the empty option is out of range only on a path the unknown value opens:
    # a warning with that condition, not an error
    assert not r.errors, [d.message for d in r.errors]
    assert any(d.code == "SI120" and d.when for d in r.diagnostics)
    options = [v for _, v in r.output.options] if hasattr(r.output, "options") else [r.output]
    tensors = [v for v in options if isinstance(v, TensorType)]
    assert tensors and all(_shape_at(t, {"B": 3, "T": 4}) == tuple(m(torch.randn(3, 4)).shape) for t in tensors)
