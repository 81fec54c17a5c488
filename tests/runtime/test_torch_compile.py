"""torch.compile and torch.export meeting lazy tensors.

The lazy device compiles what it records, so a script that wraps its model or its step
in ``torch.compile`` runs as written there (dynamo gives the frame up), with the same
results and the same one compile per step; ``fullgraph=True`` and ``torch.export`` say
why they cannot trace it.
"""

import jax
import jax.numpy  # noqa: F401
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_runtime as lr
from lazy_runtime import dispatch
from lazy_runtime.tensor import NOT_TRACED

from conftest import DEV

dynamo = pytest.importorskip("torch._dynamo")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def _train(device, wrap):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    forward = wrap(model)

    def step(x, y):
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step = wrap(step)
    losses, compiles = [], []
    for s in range(3):
        g = torch.Generator().manual_seed(s)
        x, y = torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
        before = lr.metrics()["compiles"]
        loss = step(x.to(device), y.to(device))
        if device == DEV:
            lr.mark_step()
            compiles.append(lr.metrics()["compiles"] - before)
        losses.append(loss.item())
    return losses, compiles, model[0].weight.detach().cpu()


def test_a_compiled_model_and_step_run_as_written_on_the_lazy_device():
    want, _, want_w = _train("cpu", lambda f: f)
    lr.reset_metrics()
    got, compiles, got_w = _train(DEV, torch.compile)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got_w, want_w, rtol=1e-4, atol=1e-6)
    # the step is still one lazy graph, compiled once; nothing ran eagerly
    assert compiles[1:] == [0, 0]
    assert lr.metrics()["fallback_ops"] == {}
    # dynamo gave the frames up at the lazy tensors, and skips the runtime's own code
    # (and JAX's) instead of trying to trace the dispatch those frames run into
    assert any(NOT_TRACED in reason for reason in dynamo.utils.counters["graph_break"])
    for module in (dispatch, jax.numpy):
        assert dynamo.trace_rules.check_file(module.__file__).skipped


def test_fullgraph_and_export_say_why_they_cannot_trace_lazy_tensors():
    model = nn.Linear(3, 2).to(DEV)
    x = torch.ones(2, 3).to(DEV)
    with pytest.raises(dynamo.exc.Unsupported, match="do not trace lazy tensors"):
        torch.compile(model, fullgraph=True)(x)
    with pytest.raises(Exception, match="do not trace lazy tensors"):
        torch.export.export(model, (x,))
    # the model still runs uncompiled
    torch.testing.assert_close(model(x).cpu(), model.cpu()(torch.ones(2, 3)))


def test_a_module_compiled_on_the_cpu_first_still_runs_on_the_lazy_device():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(2, 3)
    want = compiled(x)
    assert dynamo.utils.counters["stats"]["unique_graphs"] >= 1   # dynamo did trace it
    model.to(DEV)
    torch.testing.assert_close(compiled(x.to(DEV)).cpu(), want)
