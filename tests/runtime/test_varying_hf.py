"""benchmarks/varying_hf.py on one model: a Mixtral (grouped experts) fine-tuned at three
lengths in one bucket, nothing marked: losses eager torch's, two compiles (the first
graph; the second, padded, where automatic dynamic learns the lengths), none exact."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_a_mixture_of_experts_fine_tuned_at_varying_lengths():
    pytest.importorskip("transformers")
    import varying_hf
    assert [b["input_ids"].shape[1] for b in varying_hf.batches("lm", 3)] == [36, 44, 42]
    r = varying_hf.run("mixtral", 3)
    assert r["exact"] == 0 and r["compiles"] == 2, r
    assert r["worst"] < 1e-5, r
