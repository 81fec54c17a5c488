"""The abstract interpreter on the Python constructs models use: each test states the
expected shapes next to the code, and checks them against real runs at several sizes."""

import ast

import torch
import torch.nn as nn
import torch.nn.functional as F
import pytest
import sympy

import shapeinfer
from shapeinfer import symbolic as sym


def entries(result):
    """name -> list of (shape strings or value, when) at the last line binding it."""
    out = {}
    for e in sorted(result.to_json()["entries"], key=lambda e: e["line"]):
        out[e["name"]] = e
    return out


def evaluate(entry, sizes):
    """The concrete shapes an entry claims at the given sizes."""
    shapes = []
    for s in entry["shapes"]:
        dims, when = (s["shape"], s["when"]) if isinstance(s, dict) else (s, None)
        if when is not None:
            cond = sympy.sympify(when, locals={k: sym.symbol(k) for k in sizes})
            if not sym.holds_at(cond, sizes):
                continue
        shapes.append(tuple(sym.evaluate(sympy.sympify(d, locals={k: sym.symbol(k) for k in sizes}), sizes)
                            if d != "?" else None for d in dims))
    return shapes


class Branchy(nn.Module):
    """A branch on a symbolic size: both paths are analyzed, each with its condition."""

    def __init__(self):
        super().__init__()
        self.max_len = 16

    def forward(self, x):
        if x.size(1) > self.max_len:
            y = x[:, : self.max_len]
        else:
            y = F.pad(x, (0, 0, 0, self.max_len - x.size(1)))
        z = y * 2
        return z


def test_symbolic_branch_gives_conditional_shapes():
    m = Branchy()
    r = shapeinfer.analyze(m, args=(torch.randn(2, 20, 3),), dims={"x": ("B", "T", 3)})
    lines = {(x["line"], x["name"]): x for x in r.to_json()["entries"]}
    y_then = next(v for (line, n), v in lines.items() if n == "y" and "when" in v["shapes"][0]
                  and v["shapes"][0]["when"] == "T > 16")
    y_else = next(v for (line, n), v in lines.items() if n == "y" and v["shapes"][0]["when"] == "T <= 16")
    # under T > 16 the slice is known to be 16 long: the path condition is used
    assert y_then["shapes"][0]["shape"] == ["B", "16", "3"] and y_else["shapes"][0]["shape"] == ["B", "16", "3"]
    e = entries(r)
    assert e["z"]["shapes"] == [["B", "16", "3"]]  # both paths agree after the join
    for T in (5, 16, 17, 40):
        real = m(torch.randn(2, T, 3)).shape
        assert evaluate(e["z"], {"B": 2, "T": T}) == [tuple(real)]


class Loops(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 6)
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x):  # x: [B, T, 4]
        h = x.new_zeros(x.size(0), 6)
        outs = []
        for t in range(x.size(1)):
            h = self.cell(x[:, t], h)
            outs.append(h)
        seq = torch.stack(outs, dim=1)
        for layer in self.layers:
            seq = layer(seq)
        n = 0
        while n < 3:
            n += 1
        sq = [v * 2 for v in x.unbind(1)]
        tot = sum(x.shape)
        g = (lambda a: a.sum(-1))(seq)
        w = seq if x.size(0) > 1 else seq[0]
        with torch.no_grad():
            k = seq.mean(1)
        return seq, sq, tot, g, w, k, n


@pytest.mark.parametrize("sizes", [(3, 7), (2, 1), (5, 12)])
def test_loops_comprehensions_lambdas_with(sizes):
    B, T = sizes
    m = Loops()
    r = shapeinfer.analyze(m, args=(torch.randn(2, 5, 4),), dims={"x": ("B", "T", 4)})
    e = entries(r)
    seq, sq, tot, g, w, k, n = m(torch.randn(B, T, 4))
    at = {"B": B, "T": T}
    assert evaluate(e["h"], at) == [(B, 6)]
    assert evaluate(e["seq"], at) == [tuple(seq.shape)]
    assert evaluate(e["g"], at) == [tuple(g.shape)]
    assert evaluate(e["k"], at) == [tuple(k.shape)]
    assert tuple(w.shape) in evaluate(e["w"], at) and len(evaluate(e["w"], at)) == 1
    assert e["n"]["values"] == [1, 2, 3] and n == 3  # one value per unrolled iteration
    assert sym.evaluate(sympy.sympify(e["tot"]["value"], locals={"B": sym.symbol("B"), "T": sym.symbol("T")}),
                        at) == tot
    assert e["sq"]["type"] == "list" and e["sq"]["length"] == "T"


class DataDependent(nn.Module):
    def forward(self, x):
        idx = torch.nonzero(x > 0)
        v = x.sum().item()
        y = x[x > 0]
        if x.sum() > 0:
            z = x * 2
        else:
            z = x[:, :1]
        return idx, v, y, z


def test_data_dependent_values_are_unknown_with_reasons_never_wrong():
    r = shapeinfer.analyze(DataDependent(), args=(torch.randn(3, 4),), dims={"x": ("B", "C")})
    e = entries(r)
    assert e["idx"]["shapes"] == [["?", "2"]]
    assert e["v"]["value"] == "?"
    assert e["y"]["shapes"] == [["?"]]
    assert e["z"]["shapes"] == [["B", "1"]]  # the line in the else branch
    z_after_join = r.output.items[3]  # one shape or the other, depending on data
    options = sorted(str(v.shape) for _, v in z_after_join.options)
    assert options == ["(B, 1)", "(B, C)"]
    assert all(str(c).lstrip("~").startswith("data_L") for c, _ in z_after_join.options)
    codes = {d["code"] for d in r.to_json()["diagnostics"]}
    assert "SI003" in codes


class Helpers(nn.Module):
    """Helpers, super(), keyword defaults, *args/**kwargs, closures and getattr defaults."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 4)
        self.act = "gelu"

    def _act(self, x, kind=None):
        kind = kind or self.act
        fn = {"gelu": F.gelu, "relu": F.relu}[kind]
        return fn(x)

    def _combine(self, *parts, dim=-1, **unused):
        joined = torch.cat(parts, dim=dim)
        return joined

    def forward(self, x, mask=None):
        scale = getattr(self, "scale", 2.0)

        def inner(t):
            return self.proj(t) * scale

        h = inner(x)
        a = self._act(h)
        both = self._combine(a, h, dim=1, extra=True)
        out = both if mask is None else both.masked_fill(mask, 0.0)
        return out


def test_helpers_closures_and_defaults():
    m = Helpers()
    r = shapeinfer.analyze(m, args=(torch.randn(3, 8),), dims={"x": ("B", 8)})
    e = entries(r)
    assert e["h"]["shapes"] == [["B", "4"]]
    assert e["both"]["shapes"] == [["B", "8"]]
    assert e["out"]["shapes"] == [["B", "8"]]
    assert not [d for d in r.diagnostics if d.severity == "error"]


class Viewing(nn.Module):
    def forward(self, x):  # [B, T, C]
        B, T, C = x.shape
        heads = x.view(B, T, 2, C // 2).transpose(1, 2)
        flat = x.reshape(-1, C)
        back = flat.view(B, -1, C)
        last = x[:, -1]
        tail = x[:, 1:]
        head = x[..., :3]
        return heads, flat, back, last, tail, head


@pytest.mark.parametrize("sizes", [(2, 5, 8), (3, 9, 6), (1, 2, 4)])
def test_shape_arithmetic_stays_symbolic(sizes):
    B, T, C = sizes
    m = Viewing()
    r = shapeinfer.analyze(m, args=(torch.randn(2, 6, 8),), dims={"x": ("B", "T", "C")})
    e = entries(r)
    real = m(torch.randn(B, T, C))
    at = {"B": B, "T": T, "C": C}
    for name, t in zip(["heads", "flat", "back", "last", "tail", "head"], real):
        assert evaluate(e[name], at) == [tuple(t.shape)], name
    assert e["flat"]["shapes"] == [["B*T", "C"]]


def test_analysis_never_runs_the_model():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            return y

    m = Boom()
    m.fc.register_forward_hook(lambda *a: (_ for _ in ()).throw(AssertionError("ran")))
    r = shapeinfer.analyze(m, args=(torch.randn(2, 4),), dims={"x": ("B", 4)})  # raises if the hook runs
    # the hook is interpreted (forward hooks may replace the output), not run: what it
    # returns is beyond the analysis, so y is unknown with a reason rather than a guess
    assert entries(r)["y"]["type"] == "unknown" and entries(r)["y"]["reason"]


def test_bad_dims_spec_is_a_clear_error():
    m = nn.Linear(4, 4)
    with pytest.raises(shapeinfer.AnalysisError, match="has 3 entries"):
        shapeinfer.analyze(m, args=(torch.randn(2, 4),), dims={"input": ("B", 4, 1)})
    with pytest.raises(shapeinfer.AnalysisError, match="not a parameter"):
        shapeinfer.analyze(m, args=(torch.randn(2, 4),), dims={"x": ("B", 4)})


def test_unknown_function_degrades_one_variable():
    def mystery(t):
        return torch.ops.aten.special_airy_ai(t)

    class M(nn.Module):
        def forward(self, x):
            a = mystery(x)
            b = x + 1
            return a, b

    r = shapeinfer.analyze(M(), args=(torch.randn(2, 3),), dims={"x": ("B", 3)})
    e = entries(r)
    assert e["b"]["shapes"] == [["B", "3"]]
    assert e["a"]["type"] == "unknown" and e["a"]["reason"]


class TwoShapes(nn.Module):
    def forward(self, x):
        if x.size(1) > 4:
            y = x[:, :4]
        else:
            y = torch.cat([x, x], 1)
        z = y + 1
        return z


def test_join_keeps_both_shapes_with_their_conditions():
    m = TwoShapes()
    r = shapeinfer.analyze(m, args=(torch.randn(2, 6),), dims={"x": ("B", "T")})
    z = entries(r)["z"]
    assert {s["when"]: tuple(s["shape"]) for s in z["shapes"]} == {"T > 4": ("B", "4"),
                                                                   "T <= 4": ("B", "2*T")}
    for T in (1, 4, 5, 9):
        assert evaluate(z, {"B": 3, "T": T}) == [tuple(m(torch.randn(3, T)).shape)]


class Imports(nn.Module):
    def forward(self, x):
        import math
        import torch.nn.functional as fn
        scale = math.sqrt(x.size(-1))
        y = fn.relu(x) / scale
        import copy
        z = copy.copy(y)  # standard library on an abstract value: unknown, not interpreted
        return y, z


def test_imports_inside_functions_and_stdlib_calls():
    r = shapeinfer.analyze(Imports(), args=(torch.randn(2, 9),), dims={"x": ("B", "D")})
    e = entries(r)
    assert e["y"]["shapes"] == [["B", "D"]]
    assert e["scale"]["type"] == "float" and e["scale"]["value"] == "sqrt(D)"
    assert e["z"]["type"] == "unknown" and "copy" in e["z"]["reason"]


class TooSmall(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 7)

    def forward(self, x):
        y = self.conv(x[:, :, :2, :2])
        return y


def test_sign_decided_through_min():
    # x[:, :, :2] is Min(2, T) long: always shorter than the 7-wide kernel
    r = shapeinfer.analyze(TooSmall(), args=(torch.randn(1, 3, 9, 9),), dims={"x": ("B", 3, "T", "T")})
    assert [d.code for d in r.errors] == ["SI143"]
    with pytest.raises(RuntimeError):
        TooSmall()(torch.randn(1, 3, 9, 9))


def test_control_flow_summary_for_replay():
    dd = shapeinfer.analyze(DataDependent(), args=(torch.randn(3, 4),), dims={"x": ("B", "C")}).to_json()
    assert dd["control_flow"]["shape_only"] is False
    assert any("SI003" in r for r in dd["control_flow"]["reasons"])
    ok = shapeinfer.analyze(TwoShapes(), args=(torch.randn(2, 6),), dims={"x": ("B", "T")}).to_json()
    control = dict(ok["control_flow"])
    assert control.pop("size_arithmetic")["polynomial"] is True  # see test_size_audit.py
    assert control == {"shape_only": True, "reasons": []}
    assert ok["inputs"] == {"x": ["B", "T"]}


class CatOfEmptyList(nn.Module):
    def forward(self, x):
        parts = []
        a = torch.cat(parts, dim=0)
        b = torch.stack(parts)
        return x


def test_cat_and_stack_of_an_empty_list_are_unknown_with_a_reason_not_a_crash():
    # torch raises for both; an empty list in the analysis is more often one whose items
    # were lost than the model's bug, so the result is unknown (a note), never SI005
    with pytest.raises((RuntimeError, ValueError)):
        torch.cat([], dim=0)
    r = shapeinfer.analyze(CatOfEmptyList(), args=(torch.randn(2, 3),), dims={"x": ("B", None)})
    codes = [(d.code, d.severity) for d in r.diagnostics]
    assert codes == [("SI001", "note"), ("SI001", "note")], r.diagnostics
    assert all("empty list" in d.message for d in r.diagnostics)
    got = entries(r)
    assert got["a"]["type"] == "unknown" and "empty list" in got["a"]["reason"]
    assert got["b"]["type"] == "unknown" and "empty list" in got["b"]["reason"]


class LoopOverPathDependentSplits(nn.Module):
    """After a branch, `x` is [B, 5, 2] on one path and [B, T] on the other: the loop
    over its steps runs 5 times on one, T times on the other."""

    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(1, 4)

    def forward(self, x):
        if x.size(1) > 10:
            x = x[:, :10].reshape(x.size(0), 5, -1)
        h = torch.zeros(x.size(0), 4)
        c = torch.zeros(x.size(0), 4)
        for step in x.split(1, dim=1):
            h, c = self.cell(step, (h, c))
        return h


def test_loop_over_a_union_runs_once_per_path():
    model = LoopOverPathDependentSplits()
    r = shapeinfer.analyze(model, args=(torch.randn(3, 8),), dims={"x": ("B", "T")})
    # the 3-d step reaches the LSTMCell only when T > 10: an error under that condition
    assert [(d.code, d.when) for d in r.errors] == [("SI152", "T > 10")]
    with pytest.raises(ValueError, match="1D or 2D"):
        model(torch.randn(3, 11))
    step = entries(r)["step"]
    for t in (4, 8, 10):
        assert evaluate(step, {"B": 3, "T": t}) == [tuple(torch.randn(3, t).split(1, dim=1)[0].shape)]
    for t in (11, 16):  # torch's steps before the LSTMCell raises
        x = torch.randn(3, t)[:, :10].reshape(3, 5, -1)
        assert evaluate(step, {"B": 3, "T": t}) == [tuple(x.split(1, dim=1)[0].shape)]
    h = next(o for o in entries(r)["h"]["options"] if o["when"] == "T <= 10")
    assert evaluate(h, {"B": 3, "T": 8}) == [tuple(model(torch.randn(3, 8)).shape)]


class NamesBoundInALostBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:   # (the test makes the analyzer fail on this condition)
            n = 1
        else:
            n = 2
        return x * n


def test_a_compound_statement_lost_to_a_failure_leaves_its_names_unknown_not_undefined(
        monkeypatch):
    # a RecursionError deep in torch's pytree (``TreeSpec.__post_init__``, reached from
    # transformers' vmapped masks) lost a whole ``if``: the names both branches bind were
    # then reported undefined (SI008) after it, on code that runs
    from shapeinfer.interp.interpreter import Interpreter
    real_eval = Interpreter.eval

    def failing_eval(self, node, frame):
        if isinstance(node, ast.Compare) and getattr(node, "lineno", None) == line:
            raise RecursionError("maximum recursion depth exceeded")
        return real_eval(self, node, frame)

    import inspect
    line = inspect.getsourcelines(NamesBoundInALostBranch.forward)[1] + 1
    monkeypatch.setattr(Interpreter, "eval", failing_eval)
    r = shapeinfer.analyze(NamesBoundInALostBranch(), args=(torch.randn(2, 3),),
                           dims={"x": ("B", None)})
    assert not r.errors, r.errors
    assert [d.code for d in r.diagnostics if d.code == "SI004"] == ["SI004"]


class _FrozenSpec:
    """Sets its attributes as a frozen dataclass's ``__post_init__`` does (torch's pytree
    ``TreeSpec``): through ``object.__setattr__`` called on the class."""

    def __init__(self, count):
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "scratch", 0)
        object.__delattr__(self, "scratch")

    def __setattr__(self, name, value):
        raise AttributeError("frozen")


class ObjectSetattrCalledOnTheClass(nn.Module):
    def forward(self, x):
        spec = _FrozenSpec(x.size(1))
        y = x.reshape(-1, spec.count)
        return y


def test_object_setattr_called_on_the_class_sets_the_instance_attribute():
    r = shapeinfer.analyze(ObjectSetattrCalledOnTheClass(), args=(torch.randn(2, 3),),
                           dims={"x": ("B", "C")})
    assert not r.errors and not [d for d in r.diagnostics if d.code == "SI009"], r.diagnostics
    got = entries(r)
    for b, c in ((2, 3), (4, 5), (1, 7)):
        want = ObjectSetattrCalledOnTheClass()(torch.randn(b, c)).shape
        assert evaluate(got["y"], {"B": b, "C": c}) == [tuple(want)]
