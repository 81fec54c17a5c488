"""Unit tests of the shape oracle itself: the recorder (tests/oracle.py) and the
comparison with analyzer JSON. Each test writes a small module to a temporary file
so that the expected line numbers are the ones in the source text."""

import importlib.util
import os
import sys
import textwrap

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from oracle import Seq, ShapeRecorder, compare, record_call, record_shapes  # noqa: E402

_counter = [0]


def load(tmp_path, source, name="mod"):
    """Write ``source`` to a file, import it, return (module, absolute path)."""
    _counter[0] += 1
    path = tmp_path / f"{name}_{_counter[0]}.py"
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    spec = importlib.util.spec_from_file_location(f"_oracle_test_{name}_{_counter[0]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, os.path.realpath(path)


def at(path, rec):
    """Recorded entries of one file as {(line, name): set}."""
    return {(line, name): v for (f, line, name), v in rec.items() if f == path}


def test_straight_line_and_non_tensors(tmp_path):
    m, p = load(tmp_path, """
        import torch
        def f(x):
            y = x.t()
            n = x.size(0)
            s = x.shape
            z: torch.Tensor = y * 2
            w: int
            return z
    """)
    rec = record_shapes(m.f, [p], torch.zeros(2, 3))
    assert at(p, rec) == {(3, "y"): {(3, 2)}, (6, "z"): {(3, 2)}}


def test_loop_variable_shapes(tmp_path):
    m, p = load(tmp_path, """
        def f(x):
            outs = []
            for chunk in x.split(2, dim=0):
                y = chunk * 2
                outs.append(y)
            for i, c in enumerate(x.split(3)):
                pass
            return outs
    """)
    rec = record_shapes(m.f, [p], torch.zeros(5, 3))
    assert at(p, rec) == {
        (3, "chunk"): {(2, 3), (1, 3)},
        (4, "y"): {(2, 3), (1, 3)},
        (6, "c"): {(3, 3), (2, 3)},
    }


def test_one_line_loops_and_statements_sharing_a_line(tmp_path):
    m, p = load(tmp_path, """
        import torch
        def f(x):
            for t in x.split(1): u = t.squeeze(0)
            a = x[:1]; b = x[:2]
            while a.size(0) < 4: a = torch.cat([a, a])
            return a
    """)
    rec = record_shapes(m.f, [p], torch.zeros(3, 2))
    assert at(p, rec) == {
        (3, "t"): {(1, 2)},
        (3, "u"): {(2,)},
        (4, "a"): {(1, 2)},
        (4, "b"): {(2, 2)},
        (5, "a"): {(2, 2), (4, 2)},
    }


def test_empty_loop_does_not_record_a_stale_target(tmp_path):
    m, p = load(tmp_path, """
        def f(x):
            t = x
            for t in x[:0]:
                pass
            return t
    """)
    assert at(p, record_shapes(m.f, [p], torch.zeros(2, 2))) == {(2, "t"): {(2, 2)}}


def test_tuple_unpacking_starred_and_containers(tmp_path):
    m, p = load(tmp_path, """
        def f(x):
            a, (b, c) = x, (x[0], x[:1])
            first, *rest = x.split(1)
            pair = (x, 3, [x.t()])
            h = c0 = x.new_zeros(4)
            sizes = (1, 2)
            return pair
    """)
    rec = record_shapes(m.f, [p], torch.zeros(3, 2))
    assert at(p, rec) == {
        (2, "a"): {(3, 2)},
        (2, "b"): {(2,)},
        (2, "c"): {(1, 2)},
        (3, "first"): {(1, 2)},
        (3, "rest"): {Seq("list", ((1, 2), (1, 2)))},
        (4, "pair"): {Seq("tuple", ((3, 2), None, Seq("list", ((2, 3),))))},
        (5, "h"): {(4,)},
        (5, "c0"): {(4,)},
    }


def test_augmented_assignment(tmp_path):
    m, p = load(tmp_path, """
        def f(x):
            y = x.clone()
            y += 1
            y *= x
            outs = []
            outs += [y]
            return y
    """)
    rec = record_shapes(m.f, [p], torch.zeros(2, 2))
    assert at(p, rec) == {
        (2, "y"): {(2, 2)}, (3, "y"): {(2, 2)}, (4, "y"): {(2, 2)},
        (6, "outs"): {Seq("list", ((2, 2),))},
    }


def test_nested_calls_and_untracked_files(tmp_path):
    other, q = load(tmp_path, """
        def helper(x):
            hidden = x * 3
            return hidden
    """, name="other")
    m, p = load(tmp_path, """
        import torch
        def inner(x):
            z = x.sum(0)
            return z
        def outer(x, helper):
            y = inner(x)
            w = helper(x)
            v = inner(w[:1])
            return v
    """)
    rec = record_shapes(m.outer, [p], torch.zeros(2, 3), other.helper)
    assert {k[0] for k in rec} == {p}
    assert at(p, rec) == {
        (3, "z"): {(3,)},
        (6, "y"): {(3,)},
        (7, "w"): {(2, 3)},
        (8, "v"): {(3,)},
    }


def test_recursion_keeps_frames_apart(tmp_path):
    m, p = load(tmp_path, """
        def f(x, n):
            y = x[:n]
            if n > 1:
                r = f(x, n - 1)
            return y
    """)
    assert at(p, record_shapes(m.f, [p], torch.zeros(4), 3)) == {
        (2, "y"): {(3,), (2,), (1,)}, (4, "r"): {(2,), (1,)},
    }


def test_multi_line_statements(tmp_path):
    m, p = load(tmp_path, """
        import torch
        def f(x):
            y = torch.cat(
                [x,
                 x],
                dim=0,
            )
            z = (
                y
                + 1
            )
            for part in torch.split(
                z,
                2,
            ):
                q = part
            return y
    """)
    rec = record_shapes(m.f, [p], torch.zeros(1, 3))
    assert at(p, rec) == {
        (3, "y"): {(2, 3)},
        (8, "z"): {(2, 3)},
        (12, "part"): {(2, 3)},
        (16, "q"): {(2, 3)},
    }


def test_with_targets_and_exit(tmp_path):
    m, p = load(tmp_path, """
        import contextlib
        import torch
        @contextlib.contextmanager
        def ctx(x):
            yield x * 2
        def f(x):
            with ctx(x) as (d), torch.no_grad():
                d = d[:1]
            e = d
            return e
    """)
    assert at(p, record_shapes(m.f, [p], torch.zeros(3, 2))) == {
        # the generator's own frame binds nothing; ``d`` re-bound in the body is not
        # mistaken for the with-target when the header line fires again on exit
        (7, "d"): {(3, 2)},
        (8, "d"): {(1, 2)},
        (9, "e"): {(1, 2)},
    }


def test_branches_comprehensions_and_lambdas(tmp_path):
    m, p = load(tmp_path, """
        def f(x, flag):
            if flag:
                y = x[:1]
            else:
                y = x[:2]
            x = [x[:n] for x in (x, x) for n in (1,)]
            g = (lambda g: g * 2)(y)
            return x
    """)
    rec = record_shapes(m.f, [p], torch.zeros(3), True)
    assert at(p, rec) == {
        (3, "y"): {(1,)},
        (6, "x"): {Seq("list", ((1,), (1,)))},
        (7, "g"): {(1,)},
    }


def test_generators_and_send(tmp_path):
    m, p = load(tmp_path, """
        def gen(x):
            for i in range(2):
                got = yield x[: i + 1]
                kept = got
        def f(x):
            out = []
            g = gen(x)
            item = next(g)
            while True:
                try:
                    item = g.send(item * 2)
                except StopIteration:
                    break
            return kept_shape(item)
        def kept_shape(t):
            return t
    """)
    rec = record_shapes(m.f, [p], torch.zeros(3))
    assert at(p, rec) == {
        (3, "got"): {(1,), (2,)},
        (4, "kept"): {(1,), (2,)},
        (8, "item"): {(1,)},
        (11, "item"): {(2,)},
    }


def test_exceptions_propagate_and_trace_is_removed(tmp_path):
    m, p = load(tmp_path, """
        def f(x):
            y = x[:1]
            try:
                y = x.view(7)
            except RuntimeError:
                z = y
            y = x.view(5)
            return y
    """)
    before = sys.gettrace()
    with pytest.raises(RuntimeError):
        with ShapeRecorder([p]) as rec:
            m.f(torch.zeros(2, 3))
    assert sys.gettrace() is before
    # the failing statements recorded nothing (the stale ``y`` is not reported there)
    assert at(p, dict(rec.entries)) == {(2, "y"): {(1, 3)}, (6, "z"): {(1, 3)}}


def test_previous_tracer_is_restored(tmp_path):
    m, p = load(tmp_path, """
        def f(x):
            y = x + 1
            return y
    """)
    calls = []

    def outer_tracer(frame, event, arg):
        calls.append(event)
        return None

    old = sys.gettrace()
    sys.settrace(outer_tracer)
    try:
        result, rec = record_call(m.f, [p], torch.zeros(2))
        assert sys.gettrace() is outer_tracer
    finally:
        sys.settrace(old)
    assert result.shape == (2,)
    assert at(p, rec) == {(2, "y"): {(2,)}}


def test_modules_and_relative_paths(tmp_path, monkeypatch):
    m, p = load(tmp_path, """
        import torch
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 4)
            def forward(self, x):
                h = self.lin(x)
                h = torch.relu(h)
                return h
    """)
    monkeypatch.chdir(tmp_path)
    model = m.Block()
    with torch.no_grad():
        rec = record_shapes(model, [os.path.basename(p)], torch.zeros(5, 3))
    assert at(p, rec) == {(7, "h"): {(5, 4)}, (8, "h"): {(5, 4)}}


# ---------------------------------------------------------------------------
# compare()

def _analysis(file, entries, symbols=None):
    return {"version": 1, "symbols": symbols or {}, "diagnostics": [],
            "entries": [{"file": file, **e} for e in entries]}


def test_compare_exact_wrong_unknown(tmp_path, monkeypatch):
    path = str(tmp_path / "model.py")
    recorded = {
        (path, 3, "a"): {(2, 8, 5)},
        (path, 4, "b"): {(2, 8, 5)},
        (path, 5, "c"): {(2, 3)},
        (path, 6, "d"): {(2, 3)},
        (path, 7, "e"): {(2, 3)},
        (path, 8, "f"): {(4,), (2,)},
    }
    monkeypatch.chdir(tmp_path)
    analysis = _analysis("model.py", [  # relative to the cwd
        {"line": 3, "name": "a", "type": "Tensor", "dtype": "float32",
         "shapes": [["B", "2*S + 2", "floor(H/4)"]]},
        {"line": 4, "name": "b", "type": "Tensor", "shapes": [["B", "8", "H"]]},
        {"line": 5, "name": "c", "type": "Tensor", "shapes": [["B", "?"]]},
        {"line": 6, "name": "d", "type": "int", "value": 3},
        {"line": 8, "name": "f", "type": "Tensor", "shapes": [["2*B"], ["B"]]},
    ], symbols={"B": 4, "S": 3, "H": 20})
    report = compare(analysis, recorded, {"B": 2, "S": 3, "H": 22}, [path])
    assert (report.exact, report.unknown, report.wrong) == (2, 3, 1), str(report)
    text = str(report)
    assert "model.py:4 b" in text and "WRONG" in text
    assert "no analyzer entry" in text
    assert not report.ok
    total = report + report
    assert (total.exact, total.unknown, total.wrong) == (4, 6, 2)


def test_compare_conditions_and_sympy_names(tmp_path):
    path = str(tmp_path / "m.py")
    recorded = {(path, 2, "x"): {(3, 10)}, (path, 3, "y"): {(6,)}}
    analysis = _analysis(path, [
        {"line": 2, "name": "x", "type": "Tensor", "shapes": [
            {"shape": ["N", "S"], "when": "Eq(Mod(S, 2), 0)"},
            {"shape": ["N", "S + 1"], "when": "Eq(Mod(S, 2), 1)"},
        ]},
        {"line": 3, "name": "y", "type": "Tensor", "shapes": [["E*N"]]},
    ])
    assert compare(analysis, recorded, {"N": 3, "S": 10, "E": 2}, [path]).ok
    # at S = 9 the second alternative holds: (3, 10) is still right
    report = compare(analysis, {(path, 2, "x"): {(3, 10)}}, {"N": 3, "S": 9, "E": 2}, [path])
    assert report.ok, str(report)
    report = compare(analysis, {(path, 2, "x"): {(3, 9)}}, {"N": 3, "S": 9, "E": 2}, [path])
    assert report.wrong == 1


def test_compare_containers(tmp_path):
    path = str(tmp_path / "pkg" / "m.py")  # the analyzer names it relative to another cwd
    recorded = {
        (path, 2, "hidden"): {Seq("tuple", ((2, 3, 4), (2, 3, 4)))},
        (path, 3, "pair"): {Seq("tuple", ((3,), None))},
        (path, 4, "bad"): {Seq("list", ((3,), (3,)))},
    }
    analysis = _analysis("pkg/m.py", [
        {"line": 2, "name": "hidden", "type": "tuple", "elements": [
            {"type": "Tensor", "shapes": [["2", "B", "4"]]},
            {"type": "Tensor", "shapes": [["2", "B", "4"]]}]},
        {"line": 3, "name": "pair", "type": "tuple", "elements": [
            {"type": "Tensor", "shapes": [["B"]]}, {"type": "int", "value": 1}]},
        {"line": 4, "name": "bad", "type": "list", "elements": [
            {"type": "Tensor", "shapes": [["B"]]}]},
    ])
    report = compare(analysis, recorded, {"B": 3}, [path])
    assert (report.exact, report.unknown, report.wrong) == (2, 0, 1), str(report)
    assert "real length 2" in str(report)
