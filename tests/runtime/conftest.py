"""Shared helpers for the lazy runtime tests: torch (eager, CPU) is the oracle."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lazy_runtime as lr  # noqa: E402

DEV = lr.device()


def load_example(name: str):
    """Import examples/train_<name>.py as a module."""
    path = ROOT / "examples" / f"train_{name}.py"
    spec = importlib.util.spec_from_file_location(f"_lazy_example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def to_lazy(x):
    if isinstance(x, torch.Tensor):
        return x.to(DEV)
    if isinstance(x, (list, tuple)):
        return type(x)(to_lazy(v) for v in x)
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu() if x.device.type != "cpu" else x
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def assert_same(got, want, rtol=1e-5, atol=1e-6, what=""):
    """Same structure, shapes, dtypes and (close) values."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{what}: structure"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, rtol, atol, f"{what}[{i}]")
        return
    if not isinstance(want, torch.Tensor):
        assert got == pytest.approx(want, rel=rtol, abs=atol), what
        return
    got = to_cpu(got)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype == torch.bool or not (want.is_floating_point() or want.is_complex()):
        assert torch.equal(got, want), f"{what}: values differ\n{got}\n{want}"
    else:
        torch.testing.assert_close(got.detach(), want.detach(), rtol=rtol, atol=atol,
                                   equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.fixture(autouse=True)
def _clean_pending():
    """Each test starts with nothing pending (a failed test must not leak into the next)."""
    try:
        lr.sync()
    except Exception:
        pass
    yield
