"""The OpInfo conformance sweep's judgement (benchmarks/opinfo_sweep.py): what counts as
agreeing with torch, and which differences it explains, and a sweep of three ops (torch's
test utilities import ``expecttest``: the ``dev`` extra)."""

import math
import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import opinfo_sweep as S  # noqa: E402


def test_integers_and_bools_must_agree_exactly():
    a = torch.tensor([1, 2, 3])
    assert S._compare(a, a.clone()) is None
    assert "1 of 3" in S._compare(a, torch.tensor([1, 2, 4]))
    assert S._compare(torch.tensor([True]), torch.tensor([False])) is not None


def test_floats_agree_within_their_dtypes_tolerance_nan_included():
    a = torch.tensor([1.0, float("nan"), -float("inf")])
    assert S._compare(a, a + torch.tensor([1e-6, 0, 0])) is None
    assert "tolerance 0.0001" in S._compare(a, a + torch.tensor([1e-2, 0, 0]))
    d = a.double()
    assert S._compare(d, d + torch.tensor([1e-6, 0, 0], dtype=torch.float64)) is not None


def test_structure_shape_and_dtype_are_compared_first():
    a = torch.zeros(2, 3)
    assert "float32[3, 2]" in S._compare(a, torch.zeros(3, 2))
    assert "float64" in S._compare(a, a.double())
    assert S._compare((a, 1), (a, 1)) is None
    assert S._compare((a, 1), (a,)) == "structure"
    assert S._compare(2.0, 2.0 + 1e-9) is None and S._compare(math.nan, math.nan) is None


def test_exact16_compares_16_bit_values_bit_for_bit():
    a = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    b = torch.tensor([1.0, 2.015625], dtype=torch.bfloat16)   # one ulp above 2
    assert S._compare(a, b) is None
    S._EXACT16[0] = True
    try:
        assert "1 of 2" in S._compare(a, b)
        assert S._compare(a.float(), a.float() + 1e-6) is None   # other types as before
    finally:
        S._EXACT16[0] = False


@pytest.mark.parametrize("name,known", [
    ("nn.functional.dropout", True), ("bernoulli", True), ("linalg.eigh", True),
    ("sparse.sampled_addmm", True), ("resize_as_", False), ("add", False),
    ("linalg.eigvalsh", False), ("index_select", False)])
def test_only_named_differences_are_explained(name, known):
    assert (S._known(name) is not None) == known


def test_a_variants_differences_are_its_own():
    assert S._known("addbmm", "inplace") is not None and S._known("addbmm") is None
    assert S._known("linalg.matrix_rank", "out") is not None
    assert S._known("linalg.matrix_rank", "inplace") is None
    assert S._known("nn.functional.dropout3d", "inplace_view+grad") is not None
    assert S._known("addbmm", "inplace+grad") == S._known("addbmm", "inplace")
    assert "random" in S._known("nn.functional.dropout3d", "inplace_view")


def test_a_small_sweep_runs_where_torchs_test_utilities_are_installed(capsys):
    pytest.importorskip("expecttest")
    assert S.main(["--only", "add,index_select,histc", "--dtypes", "float32"]) == 0
    out = capsys.readouterr().out
    assert "float32: 3 op variants: match 3" in out


@pytest.mark.parametrize("variant,only", [
    # kron(out=) wrote through an ``_unsafe_view`` of its out= tensor (which was a copy
    # here), softmax(out=) and masked_select(out=) could not resize the host copy they ran
    # on; the in-place methods on strided views of a larger tensor; ops on non-contiguous
    # inputs
    ("out", "kron,softmax,masked_select"), ("inplace_view", "add,addcmul,index_fill"),
    # (view_copy of a strided view: torch's decomposition views first, and refused it)
    ("noncontig", "sum,view_copy,matmul"),
    # ``_foreach_norm``'s dtype, given positionally, was dropped
    ("foreach", "_foreach_norm,_foreach_addcdiv,_foreach_pow")])
def test_out_in_place_and_non_contiguous_variants_agree(variant, only, capsys):
    pytest.importorskip("expecttest")
    how = ["--db", "foreach"] if variant == "foreach" else ["--variant", variant]
    assert S.main(["--only", only, "--dtypes", "float32", *how]) == 0
    # (every variant of the three matches: softmax has two)
    counts = re.search(r"float32: (\d+) op variants: match (\d+)\n", capsys.readouterr().out)
    assert counts and counts[1] == counts[2] and int(counts[1]) >= 3


def test_dtypes_torch_refuses_are_refused_on_the_device(capsys):
    # the device computed elu, layer_norm and a bool matrix product, which torch's CPU
    # kernels refuse: now they run eagerly and torch raises (ops/kernel_dtypes.py)
    pytest.importorskip("expecttest")
    assert S.main(["--refused", "--only", "nn.functional.elu,nn.functional.layer_norm,mm",
                   "--dtypes", "bool,int32", "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "lazy_value" not in out
    assert re.search(r"bool: 3 op variants: (match|fallback) ", out)
    assert re.search(r"int32: 2 op variants: (match|fallback) ", out)   # (mm takes int32)
