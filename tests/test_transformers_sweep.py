"""The robustness sweep (benchmarks/transformers_sweep.py) on a small, diverse sample of
transformers modeling files: no exception escapes ``analyze``, and whatever cannot be
analyzed says why. Also the analyzer's containment of its own failures, and the Python
constructs the sweep found missing."""

import contextvars
import zlib
import sys
from pathlib import Path

import pytest
import torch

import shapeinfer
from shapeinfer.values import ListV, TensorType, Unknown

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from transformers_sweep import analyze_file, prepare  # noqa: E402

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
    if record["sample_runs"]:  # the sample is valid: no analyzer failure, no false error
        assert record["internal"] == [], record["internal"]
        assert record["error_messages"] == [], record["error_messages"]


def test_sweep_records_a_reason_for_what_it_cannot_build():
    record, result = analyze_file("transformers.models.auto.modeling_auto")
    assert record["status"] == "skipped" and record["reason"] and result is None


def test_a_model_whose_shrunk_sizes_do_not_fit_is_built_with_fewer_layers():
    # SAM's shrunk widths no longer fit its prompt encoder's: its defaults with two layers
    # per stack (23M parameters) run the sample
    record, model, kwargs, _ = prepare("transformers.models.sam.modeling_sam")
    assert record.get("status") is None and record["sample_runs"], record
    assert record["config"] == "fewer layers" and "shapes cannot be" in record["shrunk_sample_error"]
    assert model.config.vision_config.num_hidden_layers == 2
    with torch.no_grad():
        model(**kwargs)


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


class _Box:
    def __init__(self, x):
        if x.sum() > 0:  # on tensor data: both paths, each setting the attribute
            self.v = x * 2
        else:
            self.v = x[:, :1]


class _BuildsBox(torch.nn.Module):
    def forward(self, x):
        box = _Box(x)
        v = box.v
        return v


def test_object_initialized_on_forked_paths_keeps_what_each_path_set():
    x = torch.randn(3, 4)
    result = shapeinfer.analyze(_BuildsBox(), (x,), dims={"x": ("B", 4)})
    assert not result.errors, result.errors
    v = next(e for e in result.entries_in(__file__) if e.name == "v")
    assert sorted(str(t.shape) for _, t in v.values) == ["(B, 1)", "(B, 4)"]
    assert tuple(_BuildsBox()(x).shape) in {(3, 4), (3, 1)}


class _BranchesOn(torch.nn.Module):
    def __init__(self, lost: bool):
        super().__init__()
        self.lost = lost

    def forward(self, x):
        # zlib.crc32 of a tensor has no rule: its value is lost to the analysis
        flag = zlib.crc32(x) if self.lost else x.sum() > 0
        if flag:
            y = x @ torch.ones(5, 2)
        else:
            y = x
        return y


def test_error_on_a_path_only_a_lost_value_opens_is_a_warning():
    x = torch.randn(3, 4)
    lost = shapeinfer.analyze(_BranchesOn(lost=True), (x,), dims={"x": ("B", 4)})
    assert not lost.errors, lost.errors
    [matmul] = [d for d in lost.diagnostics if d.code == "SI130"]
    assert matmul.severity == "warning" and "unknown value" in matmul.message
    on_data = shapeinfer.analyze(_BranchesOn(lost=False), (x,), dims={"x": ("B", 4)})
    assert [d.code for d in on_data.errors] == ["SI130"]  # tensor data can take that path: an error


class _FillsStates(torch.nn.Module):
    """A cache-like list of per-layer states, filled lazily in forward."""

    def __init__(self):
        super().__init__()
        self.states = [None, None]

    def forward(self, x):
        for i in range(2):
            if self.states[i] is None:
                self.states[i] = x[:, : i + 1]
        first, second = self.states
        return self.states[1] * 2, first


def test_items_assigned_into_a_real_list_are_seen_and_the_list_is_left_alone():
    model = _FillsStates()
    result = shapeinfer.analyze(model, (torch.randn(3, 4),), dims={"x": ("B", 4)})
    assert model.states == [None, None]
    assert not result.diagnostics, result.diagnostics
    out, first = result.output.items
    assert str(out.shape) == "(B, 2)" and str(first.shape) == "(B, 1)"
    real_out, real_first = model(torch.randn(3, 4))
    assert (tuple(real_out.shape), tuple(real_first.shape)) == ((3, 2), (3, 1))


class _RebuildsTable(torch.nn.Module):
    """Sinusoidal position tables rebuilt in forward (XGLM, M2M100) as module state."""

    def forward(self, x):
        self.table = torch.nn.Buffer(x * 2, persistent=False)
        weight = torch.nn.Parameter(x[:, :2])
        width = self.table.shape[-1]
        return weight, width


def test_parameters_and_buffers_built_from_abstract_tensors_are_those_tensors():
    result = shapeinfer.analyze(_RebuildsTable(), (torch.randn(3, 4),), dims={"x": ("B", 4)})
    assert not result.diagnostics, result.diagnostics
    weight, width = result.output.items
    assert str(weight.shape) == "(B, 2)" and width.obj == 4


@pytest.mark.parametrize("call", [
    lambda: shapeinfer.analyze(torch.relu, (torch.randn(2),)),  # no signature to bind
    lambda: shapeinfer.analyze(torch.nn.Linear(3, 4), (torch.randn(2, 3),), dims={"input": 5}),
    lambda: shapeinfer.analyze(torch.nn.Linear(3, 4), (torch.randn(2, 3),), dims=[("B", 3)]),
    lambda: shapeinfer.analyze(torch.nn.Linear(3, 4), (torch.randn(2, 3), 1)),
], ids=["builtin", "dims-entry", "dims-type", "arity"])
def test_a_bad_request_is_an_analysis_error(call):
    with pytest.raises(shapeinfer.AnalysisError):
        call()
