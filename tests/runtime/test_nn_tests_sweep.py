"""torch's older nn test lists (common_nn) on the lazy device (benchmarks/nn_tests_sweep.py):
a few entries swept, each as eager torch."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import nn_tests_sweep as S  # noqa: E402


def test_entries_are_built_as_torchs_tests_build_them():
    pytest.importorskip("expecttest")
    names = [name for name, _, _ in S.entries()]
    assert len(names) == len(set(names)) > 250
    assert "MultiMarginLoss_1d_no_reduce" in names and "Conv2d_dilated" in names


def test_a_few_entries_agree_with_torch(capsys):
    # MultiMarginLoss of one row with a target of shape (1,), unreduced: its loss had
    # shape () where torch gives (1,). Bicubic from 4x4 to 12x12 in float64: whole rows were
    # off (source coordinates floored on the device)
    pytest.importorskip("expecttest")
    assert S.main(["--only", "MultiMarginLoss_1d,Conv2d_dilated,L1Loss_no_batch_dim,"
                   "interpolate_bicubic_2d"]) == 0
    counts = re.search(r"nn: (\d+) tests: match (\d+)\n", capsys.readouterr().out)
    assert counts and counts[1] == counts[2] and int(counts[1]) >= 5
