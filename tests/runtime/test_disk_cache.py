"""Compiled executables kept between processes (``config.compile_cache``, JAX's
persistent compilation cache): a second process loads what the first compiled."""

import json
import os
import stat
import subprocess
import sys

import pytest
import torch

import lazy_runtime as lr
from lazy_runtime import disk_cache
from lazy_runtime.config import default_compile_cache, parse_compile_cache

from conftest import DEV, ROOT

STEP = """
import json, torch
import lazy_runtime as lr
lr.disk_cache.MIN_COMPILE_SECONDS = 0   # (however quickly this machine compiles)
torch.manual_seed(0)
dev = lr.device()
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=0.1)
for _ in range(2):
    loss = model(torch.ones(3, 4).to(dev)).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(); lr.mark_step()
m = lr.metrics()
print(json.dumps({"loss": loss.item(), "compiles": m["compiles"],
                  "disk_cache_hits": m["disk_cache_hits"]}))
"""


def _run(cache: str) -> dict:
    env = {**os.environ, "LAZY_RUNTIME_COMPILE_CACHE": cache, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", STEP], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    folder = tmp_path / "xla"
    first = _run(str(folder))
    assert first["compiles"] >= 1 and first["disk_cache_hits"] == 0
    assert any(folder.iterdir())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700   # private: entries are executables
    second = _run(str(folder))
    assert second["compiles"] == first["compiles"]
    assert second["disk_cache_hits"] == second["compiles"]
    assert second["loss"] == first["loss"]
    off = _run("off")
    assert off["disk_cache_hits"] == 0 and off["loss"] == first["loss"]


def test_a_folder_that_cannot_be_used_is_a_warning_not_an_error(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setattr(lr.config, "compile_cache", str(not_a_folder))
    with pytest.warns(RuntimeWarning, match="compiling without a disk cache"):
        got = (torch.arange(5.0).to(DEV) * 3).sum().item()
    assert got == 30.0
    assert lr.metrics()["disk_cache_hits"] == 0
    assert disk_cache._USABLE[str(not_a_folder)] is False


@pytest.mark.parametrize("text, want", [
    ("off", None), ("0", None), ("No", None),
    ("on", default_compile_cache()), ("", default_compile_cache()),
    ("~/somewhere", os.path.expanduser("~/somewhere")), ("/tmp/x", "/tmp/x")])
def test_the_environment_setting(text, want):
    assert parse_compile_cache(text) == want


def test_the_default_folder_follows_the_runtime_cache_folder(monkeypatch):
    monkeypatch.setenv("LAZY_RUNTIME_CACHE_DIR", "/somewhere/else")
    assert default_compile_cache() == "/somewhere/else/xla"
    monkeypatch.delenv("LAZY_RUNTIME_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert default_compile_cache() == "/xdg/lazy_runtime/xla"
