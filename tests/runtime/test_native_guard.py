"""The lazy device's C++ guard (``lazy_runtime/native_guard.py``): built and registered
where a C++ compiler is found, cached, and torch's Python guard where it cannot be built
(the runtime works the same; errors inside backward are then deferred: test_errors.py)."""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lazy_runtime as lr
from lazy_runtime import backend, native_guard
from conftest import DEV

ROOT = Path(__file__).resolve().parents[2]
HAS_COMPILER = any(shutil.which(c) for c in ("c++", "g++", "clang++"))
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler")


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


_TRAIN = ("import torch, lazy_runtime as lr\n"
          "from lazy_runtime.backend import DEVICE_GUARD\n"
          "torch.manual_seed(0)\n"
          "m = torch.nn.Linear(3, 2).to(lr.device())\n"
          "loss = m(torch.ones(4, 3).to(lr.device())).square().sum()\n"
          "loss.backward()\n"
          "print(DEVICE_GUARD[0]); print(round(m.weight.grad.sum().item(), 4))\n")


@needs_compiler
def test_the_guard_is_native_where_a_compiler_is_found():
    assert backend.DEVICE_GUARD[0] == "native"
    assert backend.errors_cross_backward()
    assert "device guard    : native" in lr.metrics_report()
    # torch's questions answered in C++: the device and its default stream
    x = torch.randn(2, 3, device=DEV, requires_grad=True)
    y = (x * 3).sum()
    y.backward()
    assert torch.equal(x.grad.cpu(), torch.full((2, 3), 3.0))


@needs_compiler
def test_the_built_library_is_cached_and_rebuilt_for_another_source(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZY_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    first = native_guard.built_library()
    assert first.parent == tmp_path / "cache" and first.is_file()
    mtime = first.stat().st_mtime_ns
    assert native_guard.built_library() == first and first.stat().st_mtime_ns == mtime
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    # another source (an edit) gets a library of its own
    src = tmp_path / "device_guard.cpp"
    src.write_text(native_guard.SOURCE.read_text() + "\n// edited\n")
    monkeypatch.setattr(native_guard, "SOURCE", src)
    other = native_guard.built_library()
    assert other != first and other.is_file() and first.is_file()


@needs_compiler
def test_a_cached_library_that_does_not_load_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZY_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    path = native_guard.built_library()
    path.write_bytes(b"not a shared library")
    lib = native_guard._load()
    assert lib.lazy_runtime_register_device_guard() == 0   # loads; the device has its guard
    assert path.read_bytes() != b"not a shared library"   # rebuilt


def test_a_shared_cache_folder_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)   # another user could have put a library there
    assert not native_guard.private_dir(shared)
    mine = tmp_path / "mine"
    assert native_guard.private_dir(mine) and mine.is_dir()


def test_without_a_compiler_torchs_python_guard_is_kept_and_training_works(tmp_path):
    r = _run(_TRAIN, CXX=str(tmp_path / "no-such-compiler"), PATH=str(tmp_path),
             LAZY_RUNTIME_CACHE_DIR=str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr[-2000:]
    guard, grad = r.stdout.strip().splitlines()[-2:]
    assert guard.startswith("python (the C++ guard could not be built") and "compiler" in guard
    want = _run(_TRAIN, LAZY_RUNTIME_NATIVE_GUARD="0")
    assert want.returncode == 0, want.stderr[-2000:]
    assert want.stdout.strip().splitlines()[-2] == "python (LAZY_RUNTIME_NATIVE_GUARD=0)"
    assert grad == want.stdout.strip().splitlines()[-1]


@needs_compiler
def test_a_failing_build_says_why_and_keeps_the_python_guard(tmp_path):
    fake = tmp_path / "c++"
    fake.write_text("#!/bin/sh\necho 'device_guard.cpp:1: error: broken on purpose' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    r = _run(_TRAIN, CXX=str(fake), LAZY_RUNTIME_CACHE_DIR=str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr[-2000:]
    guard = r.stdout.strip().splitlines()[-2]
    assert guard.startswith("python (") and "error: broken on purpose" in guard
    assert not list((tmp_path / "cache").iterdir())   # no half-written library left


@needs_compiler
def test_a_raising_grad_fn_hook_raises_from_backward_instead_of_aborting():
    # torch's Python guard calls into Python while the exception unwinds through the
    # engine: "terminate called without an active exception" (SIGABRT)
    code = ("import torch, lazy_runtime as lr\n"
            "x = torch.randn(3, device=lr.device(), requires_grad=True)\n"
            "y = (x * 2).exp()\n"
            "def hook(*a):\n    raise ValueError('boom')\n"
            "y.grad_fn.register_hook(hook)\n"
            "try:\n    y.sum().backward()\nexcept ValueError as e:\n    print('raised', e)\n"
            "print(round((x * 0).sum().item(), 1))\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-2:] == ["raised boom", "0.0"]


@needs_compiler
def test_pinned_memory_is_host_memory_so_a_pinning_dataloader_runs():
    """torch takes the lazy device for the process's accelerator and asks its hooks for a
    pinned-memory allocator (torch's Python hooks have none: pin_memory() raised
    NotImplementedError); the C++ hooks give host memory."""
    from torch.utils.data import DataLoader, TensorDataset
    xs, ys = torch.randn(8, 3), torch.arange(8)
    seen = []
    for xb, yb in DataLoader(TensorDataset(xs, ys), batch_size=4, pin_memory=True):
        seen.append((xb, yb))
        x = xb.to(DEV, non_blocking=True)
        assert torch.equal((x * 2).cpu(), xb * 2)
    assert torch.equal(torch.cat([x for x, _ in seen]), xs)
    t = torch.randn(5)
    p = t.pin_memory()
    assert torch.equal(p, t) and p.device.type == "cpu" and p.data_ptr() != t.data_ptr()
    assert not p.is_pinned()   # (no pointer is pinned: host memory as any other)


@needs_compiler
def test_hooks_that_cannot_be_built_leave_the_guard_standing(tmp_path, monkeypatch):
    """The hooks are a library of their own (another torch's hooks API may differ): one
    that fails to build is reported, and the guard is unaffected."""
    assert native_guard.HOOKS[0] == native_guard.NATIVE
    broken = tmp_path / "device_hooks.cpp"
    broken.write_text("#error broken on purpose\n")
    monkeypatch.setattr(native_guard, "HOOKS_SOURCE", broken)
    monkeypatch.setenv("LAZY_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    status = native_guard._install_hooks()
    assert status.startswith("python (the C++ hooks could not be built") and "broken" in status
    assert backend.DEVICE_GUARD[0] == native_guard.NATIVE
    monkeypatch.setattr(native_guard, "HOOKS", [status])
    assert f"device guard    : native; hooks: {status}" in lr.metrics_report()
