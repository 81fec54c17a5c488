"""The conformance sweep over every transformers model (benchmarks/runtime_transformers_sweep.py)
on a small sample: each model's outputs and gradients on the lazy device agree with eager
torch's, in one graph, with nothing run eagerly; a model trained under ``lr.compile_step``
gives eager's losses, its step replayed; and the sweep reports a lowering broken on purpose
as differing (it can fail)."""

import sys
from pathlib import Path

import pytest
import torch
from torch._ops import ops

import lazy_runtime as lr
from lazy_runtime.ops.registry import LOWERINGS, Lowering

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from runtime_transformers_sweep import (  # noqa: E402
    check_model, check_training, relative_difference)

aten = ops.aten

# a decoder (GPT-2's Conv1D products, gelu_new), a vision transformer whose eval-mode
# attention biases are cached per device (LeViT), a mixture of experts whose router is
# initialized to zeros (AFMoE: every score tied without the sweep's perturbation)
SAMPLE = ["gpt2", "levit", "afmoe"]


def _module(name):
    return f"transformers.models.{name}.modeling_{name}"


@pytest.mark.parametrize("name", SAMPLE)
def test_a_transformers_model_matches_eager_in_one_graph(name):
    record = check_model(_module(name))
    assert record["status"] == "match", record
    assert not record.get("ill_conditioned"), record
    assert record["difference"] <= 1e-4 and record["gradients"] > 0, record
    assert record["fallbacks"] == {} and record["graphs"] == 1, record


def test_a_transformers_model_trains_as_eager_with_its_step_replayed():
    record = check_training(_module("gpt2"))
    assert record["status"] == "match", record
    assert record["step_replays"] >= 1 and record["difference"] <= 1e-4, record
    assert record["fallbacks"] == {}, record


def test_a_wrong_lowering_is_reported_as_differing(monkeypatch):
    real = LOWERINGS[aten.tanh.default]
    monkeypatch.setitem(LOWERINGS, aten.tanh.default,
                        Lowering(lambda *a, **k: real.fn(*a, **k) * 1.01, real.ctx))
    lr.clear_cache()   # (graphs compiled with the right tanh)
    try:
        record = check_model(_module("gpt2"))
    finally:
        lr.clear_cache()   # (graphs compiled with the wrong one)
    assert record["status"] == "differs", record
    # (wrong in float64 on the device too: not taken for a float32 rounding tie)
    assert record["lazy_float64"] > 1e-4, record
    assert "from float64" in record["reason"], record


def test_values_compare_with_nans_and_infinities_in_their_places():
    nan, inf = float("nan"), float("inf")
    want = torch.tensor([2.0, nan, inf, -inf])
    assert relative_difference(torch.tensor([2.0, nan, inf, -inf]), want) == 0.0
    assert relative_difference(torch.tensor([2.2, nan, inf, -inf]), want) == pytest.approx(0.1)
    assert relative_difference(torch.tensor([2.0, 1.0, inf, -inf]), want) == inf
    assert relative_difference(torch.tensor([2.0, nan, -inf, -inf]), want) == inf
    assert relative_difference(torch.tensor([2.0, nan, inf]), want) == inf
