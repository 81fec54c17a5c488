"""benchmarks/varying_spectral.py on its 2-d model: an FNO-2d trained at grids of three
sizes, nothing marked: losses eager torch's, none compiled exactly."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_a_two_dimensional_neural_operator_trained_at_varying_grids():
    import varying_spectral
    assert [tuple(x.shape) for x, _ in varying_spectral.batches("fno2d", 3)] == [
        (2, 40, 42), (2, 18, 32), (2, 48, 47)]
    r = varying_spectral.run("fno2d auto", 3)
    assert r["exact"] == 0, r
    assert r["worst"] < 1e-5, r
