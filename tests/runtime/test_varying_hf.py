"""benchmarks/varying_hf.py on single models fine-tuned at three lengths, nothing
marked: a Mixtral (grouped experts) and an XLNet (relative positions) at lengths in one
bucket, two compiles each (the first graph; the second, padded, where automatic dynamic
learns the lengths); a Wav2Vec2-Conformer on raw audio; losses eager torch's, none
exact."""

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


def test_relative_positions_fine_tuned_at_varying_lengths():
    """XLNet: its 2T relative positions, made on the host, are ``2*T`` (automatic dynamic
    learns it from two lengths), its shifting views gather them: two compiles, none exact
    (before: an exact compile at every length)."""
    pytest.importorskip("transformers")
    import varying_hf
    r = varying_hf.run("xlnet", 3)
    assert r["exact"] == 0 and r["compiles"] == 2, r
    assert r["worst"] < 1e-5, r


def test_a_conformer_on_raw_audio_at_varying_lengths():
    """Wav2Vec2-Conformer: the window of its relative positions, centred in a table
    (``pe[:, c - T + 1:c + T]``), follows the length ``T`` its convolutions derive from
    the signal's: cut at a start read at run time, it is ``2*T-1``. Three lengths (437,
    628, 455: the signal's buckets 512, 1024, 512): three compiles, none exact (before:
    three, two of them exact)."""
    pytest.importorskip("transformers")
    import varying_hf
    assert [b["input_values"].shape[1] for b in varying_hf.batches("audio", 3)] == \
        [437, 628, 455]
    r = varying_hf.run("wav2vec2_conformer", 3)
    assert r["exact"] == 0 and r["compiles"] == 3, r
    assert r["worst"] < 1e-5, r
