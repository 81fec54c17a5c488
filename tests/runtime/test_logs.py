"""The runtime's logs (``lazy_runtime.log``): compiles with their reasons, fallbacks,
automatic dynamic dims and replay misses, as they happen; ``set_logs`` and
``LAZY_RUNTIME_LOG``; bad settings in the environment warn and the program runs."""

import logging
import os
import subprocess
import sys

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, ROOT
from lazy_runtime import log

aten = torch.ops.aten


@pytest.fixture
def records(caplog):
    caplog.set_level(logging.DEBUG, logger="lazy_runtime")
    lr.reset_metrics()
    return caplog


def _messages(caplog, channel, level=None):
    return [r.getMessage() for r in caplog.records
            if r.name == f"lazy_runtime.{channel}" and (level is None or r.levelno == level)]


def test_each_compile_is_logged_with_its_reason(records):
    lr.clear_cache()
    for n in (5, 5, 7):
        (torch.arange(float(n)).to(DEV) * 3).sum().item()
    m = lr.metrics()
    got = _messages(records, "compiles")
    assert len(got) == m["compiles"] == len(m["recompile_reasons"]) == 2   # (5 reused once)
    for message, reason in zip(got, m["recompile_reasons"]):
        assert message.startswith("compiled a graph of ") and message.endswith(": " + reason)
    assert "cache empty" in got[0]
    # the second size made the dim dynamic: said so when it happened
    assert m["automatic_dynamic"] == ["input 0 dim 0 -> s0_0"]
    assert _messages(records, "dynamic") == [
        "dims made dynamic automatically: input 0 dim 0 -> s0_0"]


def test_a_full_cache_logs_its_evictions(records, monkeypatch):
    lr.clear_cache()
    monkeypatch.setattr(lr.config, "cache_size", 1)
    monkeypatch.setattr(lr.config, "automatic_dynamic", False)
    for n in (2, 3, 4):
        (torch.ones(n).to(DEV) + 1).sum().item()
    assert len(_messages(records, "cache")) == lr.metrics()["cache_evictions"] == 2


def test_a_fallback_is_logged_once_then_at_debug(records):
    x = torch.randn(4).to(DEV)
    with lr.force_fallback(aten.sin.default):
        for _ in range(3):
            x.sin().cpu()
    assert lr.metrics()["fallback_ops"]["aten.sin.default"] == 3
    first = _messages(records, "fallbacks", logging.INFO)
    assert len(first) == 1 and first[0].startswith("aten.sin.default ran eagerly in torch")
    assert len(_messages(records, "fallbacks", logging.DEBUG)) == 2


def test_a_whole_step_replay_miss_is_logged_with_its_reason(records):
    lin = torch.nn.Linear(3, 2).to(DEV)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def step(x):
        loss = lin(x).sum()
        loss.backward()
        print_me = loss.item()   # a read inside the step: never replayed whole
        opt.step()
        opt.zero_grad()
        return print_me
    replayer = lr.compile_step(step, lin, opt)
    for _ in range(3):
        replayer(torch.randn(4, 3))
    misses = lr.metrics()["replay_misses"]
    (reason,) = [r for r in misses if "more than one barrier" in r]
    assert _messages(records, "replays", logging.INFO) == [f"not replayed: {reason}"]


def test_set_logs_prints_the_channels_named_to_stderr(capfd):
    try:
        lr.set_logs("compiles")
        assert not log.ROOT.propagate
        lr.clear_cache()
        (torch.ones(3).to(DEV) * 5).sum().item()
        x = torch.randn(2).to(DEV)
        with lr.force_fallback(aten.cos.default):
            x.cos().cpu()
        err = capfd.readouterr().err
        assert "[lazy_runtime.compiles] compiled a graph of" in err
        assert "lazy_runtime.fallbacks" not in err
    finally:
        lr.set_logs()
    assert log.ROOT.propagate and not log.ROOT.handlers
    with pytest.raises(ValueError, match="unknown lazy_runtime log channel.*recompiles.*"
                                         "choose from compiles"):
        lr.set_logs("recompiles")


def test_the_environment_turns_logs_on_and_bad_values_only_warn():
    code = ("import torch, lazy_runtime as lr\n"
            "print(lr.config.cache_size)\n"
            "(torch.ones(3).to(lr.device()) + 2).sum().item()\n")
    env = dict(os.environ, LAZY_RUNTIME_LOG="compiles,recompiles",
               LAZY_RUNTIME_CACHE_SIZE="sixty")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["64"]
    assert "LAZY_RUNTIME_CACHE_SIZE='sixty' is not a positive integer: using 64" in done.stderr
    assert "LAZY_RUNTIME_LOG: unknown channel(s) recompiles ignored" in done.stderr
    assert "[lazy_runtime.compiles] compiled a graph of" in done.stderr
