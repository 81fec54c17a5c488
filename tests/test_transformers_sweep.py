"""The robustness sweep (benchmarks/transformers_sweep.py) on a small, diverse sample of
transformers modeling files: no exception escapes ``analyze``, and whatever cannot be
analyzed says why. Also the analyzer's containment of its own failures, and the Python
constructs the sweep found missing."""

import contextvars
import sys
from pathlib import Path

import pytest
import torch

import shapeinfer
from shapeinfer.values import ListV, TensorType, Unknown

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from transformers_sweep import analyze_file  # noqa: E402

# decoder-only, encoder, encoder-decoder, MoE, state-space, audio (features and waveform),
# vision (conv, windowed attention, ViT), and a two-tower model whose text-only sample
# fails for real (the analysis must still finish)
SAMPLE = ["llama", "bert", "t5", "mixtral", "mamba", "whisper", "wav2vec2", "resnet", "swin", "vit", "gpt2",
          "clip"]


@pytest.mark.parametrize("name", SAMPLE)
def test_modeling_file_is_analyzed_without_escaping_exceptions(name):
    record, result = analyze_file(f"transformers.models.{name}.modeling_{name}")
    assert record["status"] == "analyzed", record
    assert record["known"] > 0, record
    for d in result.diagnostics:  # every diagnostic says where and why
        assert d.code and d.message and d.file and d.line > 0, d
    for entry in result.entries.values():  # every unknown carries its reason
        for _, v in entry.values:
            if isinstance(v, Unknown):
                assert v.reason, (entry.file, entry.line, entry.name)
    if record["sample_runs"]:
        assert record["internal"] == [], record["internal"]


def test_sweep_records_a_reason_for_what_it_cannot_build():
    record, result = analyze_file("transformers.models.auto.modeling_auto")
    assert record["status"] == "skipped" and record["reason"] and result is None


# ---- containment: an analyzer failure becomes a diagnostic, the analysis goes on ----------


def _helper(x):
    return x * 2


class _CallsHelper(torch.nn.Module):
    def forward(self, x):
        y = _helper(x)
        z = x + 1
        return y, z


class _ReturnsEarly(torch.nn.Module):
    def inner(self, x):
        return x @ x.transpose(0, 1)
        return x  # noqa: unreachable: must stay unreached when the line above fails

    def forward(self, x):
        w = self.inner(x)
        return w


def test_failure_inside_a_call_is_contained_at_the_call(monkeypatch):
    from shapeinfer.interp import calls

    original = calls.Caller.call_function

    def failing(self, func, *rest):
        if func is _helper:
            raise ZeroDivisionError("injected")
        return original(self, func, *rest)

    monkeypatch.setattr(calls.Caller, "call_function", failing)
    result = shapeinfer.analyze(_CallsHelper(), (torch.randn(3, 4),), dims={"x": ("B", 4)})
    [failure] = [d for d in result.diagnostics if d.code == "SI005"]
    assert "ZeroDivisionError: injected" in failure.message and "_helper" in failure.message
    assert failure.file == __file__ and failure.line == _CallsHelper.forward.__code__.co_firstlineno + 1
    values = {e.name: e.values[0][1] for e in result.entries_in(__file__)}
    assert isinstance(values["y"], Unknown) and "injected" in values["y"].reason
    assert isinstance(values["z"], TensorType) and str(values["z"].shape) == "(B, 4)"


def test_failed_return_statement_still_returns(monkeypatch):
    from shapeinfer.interp import interpreter

    original = interpreter.ops.binop

    def failing(interp, op, *rest, **kw):
        if op == "MatMult":
            raise KeyError("injected")
        return original(interp, op, *rest, **kw)

    monkeypatch.setattr(interpreter.ops, "binop", failing)
    result = shapeinfer.analyze(_ReturnsEarly(), (torch.randn(3, 4),), dims={"x": ("B", 4)})
    assert [d.code for d in result.diagnostics] == ["SI005"]
    w = next(e for e in result.entries_in(__file__) if e.name == "w")
    # the unreachable `return x` must not be taken for the result
    assert [type(v) for _, v in w.values] == [Unknown]


def test_failure_outside_any_statement_reports_forward(monkeypatch):
    from shapeinfer.interp import calls

    def failing(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(calls.Caller, "call_module", failing)
    result = shapeinfer.analyze(_CallsHelper(), (torch.randn(3, 4),), dims={"x": ("B", 4)})
    [failure] = result.diagnostics
    assert failure.code == "SI005" and "RuntimeError: injected" in failure.message
    assert failure.file == __file__ and failure.line == _CallsHelper.forward.__code__.co_firstlineno
    assert isinstance(result.output, Unknown)


# ---- constructs the sweep found ---------------------------------------------------------


class _Registry(dict):
    def get(self, key):
        return super().get(str(key)) or {}


_REGISTRY = _Registry({"a": {"n": 3}})
_COLLECTOR = contextvars.ContextVar("collector")


class _UsesRegistryAndFlags(torch.nn.Module):
    def forward(self, x):
        token = _COLLECTOR.set({"seen": []})
        collected = _COLLECTOR.get()
        _COLLECTOR.reset(token)
        found = _REGISTRY.get("a")
        missing = _REGISTRY.get("b")
        flags = [False, True, True]
        first = flags.index(True)
        count = flags.count(True)
        return x.reshape(found["n"] * first * count, -1), missing


def test_super_method_of_a_builtin_base_context_variables_and_index_of_concrete_lists():
    model = _UsesRegistryAndFlags()
    x = torch.randn(6, 4)
    result = shapeinfer.analyze(model, (x,), dims={"x": (6, "N")})
    values = {e.name: e.values[0][1] for e in result.entries_in(__file__)}
    assert values["found"].obj == {"n": 3} and values["missing"].items == {}
    assert values["first"].obj == 1 and values["count"].obj == 2
    assert isinstance(values["collected"].items["seen"], ListV)
    with pytest.raises(LookupError):  # the real variable is left alone
        _COLLECTOR.get()
    out, _ = model(x)
    assert isinstance(result.output.items[0], TensorType)
    assert result.output.items[0].shape[0] == out.shape[0]
    assert not result.diagnostics, result.diagnostics
