"""nn.LSTM on the lazy device: one scan op per layer and direction, against eager torch.

Covers the layer op's configurations (layers, directions, biases, batch_first, float64,
dropout off), its backward reusing the forward's pullback in one graph and recomputing it
across graphs, the eager fallback kernels, and the variants left to torch's composite
(projections; unbatched input, which nn.LSTM batches before the op).
"""

import copy
import random

import pytest
import torch
import torch.nn as nn

import lazy_runtime as lr
from conftest import DEV, assert_same
from lazy_runtime import dispatch
from lazy_runtime.ops import recurrent
from lazy_runtime.ops.registry import RULES

LAYER = "lazy_runtime.lstm_layer.default"
BACKWARD = "lazy_runtime.lstm_layer_backward.default"
CELL = torch.ops.aten._thnn_fused_lstm_cell.default


def _count_records(monkeypatch, *ops):
    """op -> how many times it is recorded from now on (its rule runs once per record)."""
    counts = {op: 0 for op in ops}
    for op in ops:
        fn, multi = RULES[op]

        def counting(*a, _fn=fn, _op=op, **k):
            counts[_op] += 1
            return _fn(*a, **k)
        monkeypatch.setitem(RULES, op, (counting, multi))
    monkeypatch.setattr(dispatch, "_RULE_CACHE", {})
    return counts


def _pair(seed, **kw):
    torch.manual_seed(seed)
    eager = nn.LSTM(**kw)
    return eager, copy.deepcopy(eager).to(DEV)


def _loss(out, h, c):
    # nonlinear in every output, so each one's gradient reaches the layer
    return (out.sin() * 1.5).sum() + (h * h).sum() + c.cos().sum()


def _run_both(eager, lazy, x, hx=None, split=False):
    """Forward and backward of both; ``split``: a barrier between forward and backward."""
    xe = x.clone().requires_grad_()
    out, (h, c) = eager(xe, hx)
    _loss(out, h, c).backward()
    xl = x.to(DEV).requires_grad_()
    hxl = None if hx is None else tuple(t.to(DEV) for t in hx)
    out_l, (h_l, c_l) = lazy(xl, hxl)
    if split:
        lr.mark_step()
    _loss(out_l, h_l, c_l).backward()
    lr.mark_step()
    return (out, h, c, xe.grad), (out_l, h_l, c_l, xl.grad)


def _assert_match(eager, lazy, want, got, tol):
    for name, w, g in zip(("out", "h", "c", "grad x"), want, got):
        assert_same(g, w.detach(), *tol, what=name)
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, *tol, what=f"grad {name}")


CONFIGS = [
    dict(num_layers=1),
    dict(num_layers=2, batch_first=True),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=3, bidirectional=True, batch_first=True, bias=False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_lstm_matches_torch_as_one_op_per_layer(cfg, dtype, monkeypatch):
    counts = _count_records(monkeypatch, recurrent.lstm_layer, recurrent.lstm_layer_backward,
                            CELL)
    r = random.Random(str(cfg) + str(dtype))
    T, B, n_in, H = r.randint(1, 9), r.randint(1, 5), r.randint(1, 6), r.randint(1, 7)
    eager, lazy = _pair(r.randint(0, 99), input_size=n_in, hidden_size=H, **cfg)
    eager.to(dtype), lazy.to(dtype)
    x = torch.randn((B, T, n_in) if cfg.get("batch_first") else (T, B, n_in), dtype=dtype)
    lr.reset_metrics()
    want, got = _run_both(eager, lazy, x)
    tol = (1e-4, 1e-5) if dtype == torch.float32 else (1e-10, 1e-12)
    _assert_match(eager, lazy, want, got, tol)
    m = lr.metrics()
    assert m["fallback_ops"] == {}
    layers = cfg["num_layers"] * (2 if cfg.get("bidirectional") else 1)
    assert counts == {recurrent.lstm_layer: layers, recurrent.lstm_layer_backward: layers,
                      CELL: 0}


def test_given_state_and_an_unused_output():
    """hx passed in (its gradient too), and a loss that reads only the last hidden
    state: the other outputs' cotangents are None inside the backward op."""
    eager, lazy = _pair(1, input_size=3, hidden_size=4, num_layers=2)
    x = torch.randn(6, 2, 3)
    h0, c0 = torch.randn(2, 2, 4, requires_grad=True), torch.randn(2, 2, 4, requires_grad=True)
    h0l, c0l = (t.detach().to(DEV).requires_grad_() for t in (h0, c0))
    eager(x, (h0, c0))[1][0].pow(2).sum().backward()
    lazy(x.to(DEV), (h0l, c0l))[1][0].pow(2).sum().backward()
    lr.mark_step()
    assert_same(h0l.grad, h0.grad, 1e-4, 1e-5, "grad h0")
    assert_same(c0l.grad, c0.grad, 1e-4, 1e-5, "grad c0")
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, 1e-4, 1e-5, what=f"grad {name}")


def _count_scans(monkeypatch):
    calls = []
    real = recurrent._scan

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(recurrent, "_scan", counting)
    return calls


@pytest.mark.parametrize("split", [False, True], ids=["one graph", "two graphs"])
def test_backward_reuses_the_forward_pullback_within_a_graph(monkeypatch, split):
    """In one graph the backward applies the pullback its forward kept (one scan traced
    per layer); when a barrier separates them it recomputes the forward (two)."""
    calls = _count_scans(monkeypatch)
    # a size no other test uses: the graphs compile here, so the lowerings run
    eager, lazy = _pair(2, input_size=5, hidden_size=3, num_layers=1)
    x = torch.randn(11, 3, 5)
    want, got = _run_both(eager, lazy, x, split=split)
    _assert_match(eager, lazy, want, got, (1e-4, 1e-5))
    assert len(calls) == (2 if split else 1)
    assert recurrent.TRACE_SCRATCH == {}   # cleared when the trace ended


def test_eager_fallback_kernels():
    eager, lazy = _pair(3, input_size=2, hidden_size=3, num_layers=2, bidirectional=True)
    x = torch.randn(4, 2, 2)
    lr.reset_metrics()
    with lr.force_fallback(recurrent.lstm_layer, recurrent.lstm_layer_backward):
        want, got = _run_both(eager, lazy, x)
    _assert_match(eager, lazy, want, got, (1e-5, 1e-6))
    assert lr.metrics()["fallback_ops"] == {LAYER: 4, BACKWARD: 4}


def test_no_grad_and_eval_records_no_backward():
    eager, lazy = _pair(4, input_size=3, hidden_size=4, num_layers=2, dropout=0.5)
    eager.eval(), lazy.eval()
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        want = eager(x)
        got = lazy(x.to(DEV))
    assert_same(got[0], want[0], 1e-4, 1e-5, "out")
    assert_same(list(got[1]), list(want[1]), 1e-4, 1e-5, "state")


def test_dropout_between_layers_in_training():
    """Dropout between layers is an ordinary recorded op (its masks differ from torch's
    RNG, see test_random_dtypes); with p = 1 the second layer sees zeros, so its output
    is that layer's on a zero input."""
    _, lazy = _pair(5, input_size=3, hidden_size=4, num_layers=2, dropout=1.0)
    ref = copy.deepcopy(lazy)
    x = torch.randn(5, 2, 3).to(DEV)
    out = lazy(x)[0]
    # layer 2 sees zeros: its output is the same as on a zero input
    with torch.no_grad():
        ref_l2 = nn.LSTM(4, 4)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref_l2, f"{name}_l0").copy_(getattr(ref, f"{name}_l1").cpu())
        zero_out = ref_l2(torch.zeros(5, 2, 4))[0]
    assert_same(out, zero_out, 1e-5, 1e-6, "layer 2 on dropped input")


@pytest.mark.parametrize("variant", ["proj_size", "unbatched"])
def test_variants_left_to_torch_composite_stay_correct(variant, monkeypatch):
    counts = _count_records(monkeypatch, recurrent.lstm_layer)
    kw = dict(input_size=3, hidden_size=4, num_layers=2)
    if variant == "proj_size":
        kw["proj_size"] = 2
    eager, lazy = _pair(6, **kw)
    lr.reset_metrics()
    if variant == "unbatched":
        x = torch.randn(5, 3)
        want, got = eager(x)[0], lazy(x.to(DEV))[0]
    else:
        x = torch.randn(5, 2, 3)
        want, got = eager(x)[0], lazy(x.to(DEV))[0]
    want.sum().backward()
    got.sum().backward()
    lr.mark_step()
    assert_same(got, want.detach(), 1e-4, 1e-5, "out")
    for (name, pe_), pl_ in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl_.grad, pe_.grad, 1e-4, 1e-5, what=f"grad {name}")
    # nn.LSTM batches an unbatched input itself before calling aten::lstm
    assert counts[recurrent.lstm_layer] == (2 if variant == "unbatched" else 0)
