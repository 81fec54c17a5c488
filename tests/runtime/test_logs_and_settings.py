"""The runtime's logs (``lazy_runtime.log``): compiles with their reasons, fallbacks,
automatic dynamic dims and replay misses, as they happen; ``set_logs`` and
``LAZY_RUNTIME_LOG``. Settings: the environment's are parsed (bucket policies included),
a bad one warns and the program runs; a bad ``config.buckets`` is named in the error."""

import logging
import os
import subprocess
import sys

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, ROOT
from lazy_runtime import LazyRuntimeError, log
from lazy_runtime.config import Config, env_flag, parse_buckets, parse_options

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
    code += ("for n in (5, 7, 9):\n"
             "    (torch.ones(n).to(lr.device()) * 2).sum().item()\n"
             "print(lr.metrics()['buckets'])\n")
    env = dict(os.environ, LAZY_RUNTIME_LOG="compiles,recompiles",
               LAZY_RUNTIME_CACHE_SIZE="sixty", LAZY_RUNTIME_BUCKETS="40, 12")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["64", "{'s0_0': [12]}"]   # (sizes 7 and 9: 12)
    assert "LAZY_RUNTIME_CACHE_SIZE='sixty' is not a positive integer: using 64" in done.stderr
    assert "LAZY_RUNTIME_LOG: unknown channel(s) recompiles ignored" in done.stderr
    assert "[lazy_runtime.compiles] compiled a graph of" in done.stderr


def test_bucket_policies_are_parsed_from_their_spelling(monkeypatch):
    assert parse_buckets(" pow2 ") == "pow2" and parse_buckets("off") == "off"
    assert parse_buckets("64,16, 32") == [16, 32, 64]
    assert parse_buckets("B=16;T=pow2; *=off;") == {"B": [16], "T": "pow2", "*": "off"}
    for bad in ("pow3", "", "16,x", "0,4", "=4", "B=16;T"):
        with pytest.raises(ValueError):
            parse_buckets(bad)
    monkeypatch.setenv("LAZY_RUNTIME_BUCKETS", "B=pow3")
    with pytest.warns(RuntimeWarning, match="LAZY_RUNTIME_BUCKETS='B=pow3'.*using pow2"):
        assert Config().buckets == "pow2"


def test_a_bad_bucket_policy_in_code_is_named_in_the_error(monkeypatch):
    monkeypatch.setattr(lr.config, "buckets", "pow3")
    x = lr.mark_dynamic(torch.ones(5), 0, "N").to(DEV)
    with pytest.raises(LazyRuntimeError, match="config.buckets: 'pow3' is not a bucket "
                                               "policy"):
        (x * 2).sum().item()


def test_yes_no_settings_take_the_usual_spellings_and_warn_at_others(monkeypatch):
    name = "LAZY_RUNTIME_CHECK_INDICES"
    for raw, want in (("on", True), ("YES", True), ("1", True), ("Off", False),
                      ("no", False), (" 0 ", False), ("", True)):
        monkeypatch.setenv(name, raw)
        assert env_flag(name, True) is want, raw
    monkeypatch.delenv(name)
    assert env_flag(name, False) is False
    monkeypatch.setenv(name, "n")   # not a spelling: the default, said so
    with pytest.warns(RuntimeWarning, match="LAZY_RUNTIME_CHECK_INDICES='n' is not one of "
                                            "1/true/yes/on or 0/false/no/off: using 1"):
        assert env_flag(name, True) is True


def test_xla_options_are_parsed_from_the_environment(monkeypatch):
    assert parse_options(" xla_a=true xla_b=3;xla_c=0.5  xla_d=FUSION,CUBLAS; ") == {
        "xla_a": True, "xla_b": 3, "xla_c": 0.5, "xla_d": "FUSION,CUBLAS"}
    assert parse_options("") == {} and parse_options("--xla_e=2") == {"xla_e": 2}
    with pytest.raises(ValueError, match="'xla_a' is not name=value"):
        parse_options("xla_a")
    monkeypatch.setenv("LAZY_RUNTIME_XLA_OPTIONS", "xla_a=1 =2")
    with pytest.warns(RuntimeWarning, match="LAZY_RUNTIME_XLA_OPTIONS='xla_a=1 =2'.*no options"):
        assert Config().compiler_options == {}
