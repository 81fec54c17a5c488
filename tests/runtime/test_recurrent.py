"""nn.LSTM on the lazy device: one scan op per layer and direction, against eager torch.

Covers the layer op's configurations (layers, directions, biases, batch_first, float64,
dropout off), its backward reusing the forward's pullback in one graph and recomputing it
across graphs, the eager fallback kernels, and the variants left to torch's composite
(projections; unbatched input, which nn.LSTM batches before the op). Packed sequences
(packing, the packed LSTM as the same ops with a per-row mask, unpacking), inference
mode, and GRU/RNN (the one-state layer op, the same paths) against torch too.
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

LAYER = "lazy_runtime.lstm_layer.default"
BACKWARD = "lazy_runtime.lstm_layer_backward.default"
CELL = torch.ops.aten._thnn_fused_lstm_cell.default


def _count_records(monkeypatch, *ops):
    """op -> how many times it is recorded from now on."""
    counts = {op: 0 for op in ops}
    real = dispatch.record

    def counting(func, *a, **k):
        if func in counts:
            counts[func] += 1
        return real(func, *a, **k)
    monkeypatch.setattr(dispatch, "record", counting)
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


# ---- packed sequences ----------------------------------------------------------------------

PACKED = [
    dict(num_layers=1, batch_first=True, enforce_sorted=True),
    dict(num_layers=2, bidirectional=True, enforce_sorted=False),
    dict(num_layers=1, bidirectional=True, batch_first=True, bias=False, enforce_sorted=False),
]


def _packed_case(r, cfg, dtype):
    """(T, B, lengths, the padded input) for ``cfg``: random lengths, the longest T."""
    T, B, n_in = r.randint(2, 8), r.randint(1, 5), r.randint(1, 5)
    lengths = [T] + [r.randint(1, T) for _ in range(B - 1)]
    if cfg["enforce_sorted"]:
        lengths.sort(reverse=True)
    else:
        r.shuffle(lengths)
    x = torch.randn((B, T, n_in) if cfg.get("batch_first") else (T, B, n_in), dtype=dtype)
    return T, B, torch.tensor(lengths), x


def _run_packed(model, x, lengths, cfg, extra=0):
    """pack -> model -> unpack (``extra`` steps of padding past the longest), its loss's
    backward: (padded out, lengths, h, c or None, grad x)."""
    pack = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=cfg.get("batch_first",
                                             False), enforce_sorted=cfg["enforce_sorted"])
    out, state = model(pack)
    h, c = state if isinstance(state, tuple) else (state, None)
    padded, lens = nn.utils.rnn.pad_packed_sequence(
        out, batch_first=cfg.get("batch_first", False), padding_value=-2.0,
        total_length=x.shape[1 if cfg.get("batch_first") else 0] + extra)
    loss = (padded.sin() * 1.5).sum() + (h * h).sum()
    if c is not None:
        loss = loss + c.cos().sum()
    if x.requires_grad:
        loss.backward()
    return padded, lens, h, c, x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cfg", PACKED, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_packed_lstm_matches_torch_as_one_op_per_layer(cfg, dtype, monkeypatch):
    """Each row's h and c are its last valid step's; steps past a row's length are
    dropped from the packed output; unpacking pads with the given value."""
    counts = _count_records(monkeypatch, recurrent.lstm_layer, recurrent.lstm_layer_backward,
                            CELL)
    r = random.Random(str(cfg) + str(dtype))
    T, B, lengths, x = _packed_case(r, cfg, dtype)
    kw = {k: v for k, v in cfg.items() if k != "enforce_sorted"}
    eager, lazy = _pair(r.randint(0, 99), input_size=x.shape[-1], hidden_size=r.randint(1, 6),
                        **kw)
    eager.to(dtype), lazy.to(dtype)
    lr.reset_metrics()
    want = _run_packed(eager, x.clone().requires_grad_(), lengths, cfg, extra=1)
    got = _run_packed(lazy, x.to(DEV).requires_grad_(), lengths, cfg, extra=1)
    lr.mark_step()
    tol = (1e-4, 1e-5) if dtype == torch.float32 else (1e-10, 1e-12)
    for name, w, g in zip(("out", "lengths", "h", "c", "grad x"), want, got):
        assert_same(g, w.detach(), *tol, what=name)
    assert got[1].device.type == "cpu"
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, *tol, what=f"grad {name}")
    assert lr.metrics()["fallback_ops"] == {}
    layers = cfg["num_layers"] * (2 if cfg.get("bidirectional") else 1)
    assert counts == {recurrent.lstm_layer: layers, recurrent.lstm_layer_backward: layers,
                      CELL: 0}


def test_packed_lstm_eager_fallback_kernels_mask_the_rows():
    """The CPU kernels (forced) apply the per-row mask, forward and backward."""
    cfg = dict(num_layers=2, bidirectional=True, enforce_sorted=False)
    _, _, lengths, x = _packed_case(random.Random(7), cfg, torch.float64)
    eager, lazy = _pair(8, input_size=x.shape[-1], hidden_size=3, num_layers=2,
                        bidirectional=True)
    eager.double(), lazy.double()
    want = _run_packed(eager, x.clone().requires_grad_(), lengths, cfg)
    lr.reset_metrics()
    with lr.force_fallback(recurrent.lstm_layer, recurrent.lstm_layer_backward):
        got = _run_packed(lazy, x.to(DEV).requires_grad_(), lengths, cfg)
        lr.mark_step()
    for name, w, g in zip(("out", "lengths", "h", "c", "grad x"), want, got):
        assert_same(g, w.detach(), 1e-10, 1e-12, what=name)
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, 1e-10, 1e-12, what=f"grad {name}")
    assert lr.metrics()["fallback_ops"] == {LAYER: 4, BACKWARD: 4}


def test_packed_lstm_trains_with_one_compile():
    """A training step over a packed batch: one graph, compiled once for its sizes."""
    torch.manual_seed(9)
    eager = nn.LSTM(3, 4, batch_first=True)
    lazy = copy.deepcopy(eager).to(DEV)
    opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (eager, lazy)]
    lengths = torch.tensor([5, 5, 3, 1])
    lr.mark_step()
    lr.reset_metrics()
    for step in range(3):
        x = torch.randn(4, 5, 3)
        losses = []
        for model, opt, xx in ((eager, opts[0], x), (lazy, opts[1], x.to(DEV))):
            pack = nn.utils.rnn.pack_padded_sequence(xx, lengths, batch_first=True)
            out, (h, _) = model(pack)
            loss = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0].mean() + h.sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        lr.mark_step()
        assert losses[1].item() == pytest.approx(losses[0].item(), rel=1e-4, abs=1e-5), step
        if step == 0:
            assert lr.metrics()["compiles"] == 1, lr.metrics()["recompile_reasons"]
    m = lr.metrics()
    assert m["compiles"] == 1 and m["graphs_executed"] == 3, m["sync_reasons"]


VARYING = [
    (nn.LSTM, dict(batch_first=True, enforce_sorted=False)),
    (nn.GRU, dict(num_layers=2, bidirectional=True, enforce_sorted=True)),
    (nn.RNN, dict(batch_first=True, enforce_sorted=True)),
]


@pytest.mark.parametrize("cls,cfg", VARYING, ids=lambda v: getattr(v, "__name__", None) or
                         "-".join(f"{k}={v}" for k, v in v.items()))
def test_packed_batches_of_varying_lengths_compile_once_per_bucket(cls, cfg, monkeypatch):
    """Batches whose longest length and total length change every step (as a loader's
    do): packing, the packed layers and unpacking index with host-made indices of sizes
    T, B and sum(lengths), which automatic dynamic pads, so after the second batch (which
    learns which sizes vary) every batch in the same buckets runs the same executable.
    Padding holds NaN and huge indices; every loss, output and gradient is eager's."""
    monkeypatch.setattr(lr.config, "poison_padding", True)
    torch.manual_seed(len(str(cfg)))
    kw = {k: v for k, v in cfg.items() if k != "enforce_sorted"}
    eager = cls(3, 4, **kw)
    lazy = copy.deepcopy(eager).to(DEV)
    r = random.Random(str(cfg))
    lr.mark_step()
    lr.reset_metrics()
    for T in (12, 9, 14, 11, 10):   # (T + 2 in bucket 16, sum(lengths) in 33..64 for B = 4)
        lengths = [T] + [r.randint(max(T - 4, 8), T) for _ in range(3)]
        if cfg["enforce_sorted"]:
            lengths.sort(reverse=True)
        else:
            r.shuffle(lengths)
        lengths = torch.tensor(lengths)
        x = torch.randn((4, T, 3) if cfg.get("batch_first") else (T, 4, 3))
        want = _run_packed(eager, x.clone().requires_grad_(), lengths, cfg, extra=2)
        got = _run_packed(lazy, x.to(DEV).requires_grad_(), lengths, cfg, extra=2)
        lr.mark_step()
        for name, w, g in zip(("out", "lengths", "h", "c", "grad x"), want, got):
            if w is not None:
                assert_same(g, w.detach(), 1e-4, 1e-5, what=f"{name} at T={T}")
        for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
            assert_same(pl.grad, pe.grad, 1e-4, 1e-5, what=f"grad {name} at T={T}")
            pe.grad = pl.grad = None
    m = lr.metrics()
    assert m["compiles"] == 2 and m["graphs_executed"] == 5, m["recompile_reasons"]
    assert m["recompile_reasons"][1].startswith("padded"), m["recompile_reasons"]
    assert m["fallback_ops"] == {}


def test_packing_errors_name_the_problem():
    x = torch.randn(4, 3, 2).to(DEV)
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        nn.utils.rnn.pack_padded_sequence(x, torch.tensor([2, 4, 1]))
    with pytest.raises(RuntimeError, match="a length is 5, but the input has 4 time steps"):
        nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 4, 1]))
    with pytest.raises(RuntimeError, match="1D CPU int64 tensor"):
        torch._pack_padded_sequence(x, torch.tensor([4, 3, 1]).to(DEV), False)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_inference_mode_records_the_layer_op(packed, monkeypatch):
    """With autograd's keys off, aten::lstm reaches the dispatch: the same layer op."""
    counts = _count_records(monkeypatch, recurrent.lstm_layer, CELL)
    eager, lazy = _pair(10, input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
    x, lengths = torch.randn(6, 3, 3), torch.tensor([6, 5, 2])
    lr.reset_metrics()
    with torch.inference_mode():
        if packed:
            cfg = dict(enforce_sorted=True)
            want = _run_packed(eager, x, lengths, cfg)[:4]
            got = _run_packed(lazy, x.to(DEV), lengths, cfg)[:4]
        else:
            want, got = eager(x), lazy(x.to(DEV))
    assert_same(got, want, 1e-4, 1e-5, "outputs")
    assert counts == {recurrent.lstm_layer: 4, CELL: 0}
    assert lr.metrics()["fallback_ops"] == {}


# ---- GRU and RNN: the one-state layer op ---------------------------------------------------

GRU_CELL = torch.ops.aten._thnn_fused_gru_cell.default
RNNS = [
    (nn.GRU, dict(num_layers=2, bidirectional=True)),
    (nn.GRU, dict(bias=False, batch_first=True)),
    (nn.GRU, dict(num_layers=3, batch_first=True, bidirectional=True)),
    (nn.RNN, dict(nonlinearity="tanh", num_layers=2)),
    (nn.RNN, dict(nonlinearity="relu", bidirectional=True)),
    (nn.RNN, dict(nonlinearity="relu", bias=False, batch_first=True)),
]


def _rnn_pair(cls, cfg, dtype, seed, n_in, H):
    torch.manual_seed(seed)
    eager = cls(n_in, H, **cfg).to(dtype)
    return eager, copy.deepcopy(eager).to(DEV)


def _run_rnn(model, x, h0=None):
    """Forward, a loss nonlinear in both outputs, backward: (out, h, grad x, grad h0)."""
    out, h = model(x, h0)
    ((out.sin() * 1.5).sum() + (h * h).sum()).backward()
    return out, h, x.grad, None if h0 is None else h0.grad


def _assert_rnn_match(eager, lazy, want, got, tol):
    for name, w, g in zip(("out", "h", "grad x", "grad h0"), want, got):
        if w is not None:
            assert_same(g, w.detach(), *tol, what=name)
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, *tol, what=f"grad {name}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cls,cfg", RNNS, ids=lambda c: c.__name__ if isinstance(c, type) else
                         "-".join(f"{k}={v}" for k, v in c.items()))
def test_gru_and_rnn_match_torch_as_one_op_per_layer(cls, cfg, dtype, monkeypatch):
    counts = _count_records(monkeypatch, recurrent.rnn_layer, recurrent.rnn_layer_backward,
                            GRU_CELL)
    r = random.Random(str(cls) + str(cfg) + str(dtype))
    T, B, n_in, H = r.randint(1, 9), r.randint(1, 5), r.randint(1, 6), r.randint(1, 7)
    eager, lazy = _rnn_pair(cls, cfg, dtype, r.randint(0, 99), n_in, H)
    x = torch.randn((B, T, n_in) if cfg.get("batch_first") else (T, B, n_in), dtype=dtype)
    n_states = cfg.get("num_layers", 1) * (2 if cfg.get("bidirectional") else 1)
    h0 = torch.randn(n_states, B, H, dtype=dtype) if r.random() < 0.5 else None
    lr.reset_metrics()
    want = _run_rnn(eager, x.clone().requires_grad_(),
                    None if h0 is None else h0.clone().requires_grad_())
    got = _run_rnn(lazy, x.to(DEV).requires_grad_(),
                   None if h0 is None else h0.to(DEV).requires_grad_())
    lr.mark_step()
    tol = (1e-4, 1e-5) if dtype == torch.float32 else (1e-10, 1e-12)
    _assert_rnn_match(eager, lazy, want, got, tol)
    assert lr.metrics()["fallback_ops"] == {}
    assert counts == {recurrent.rnn_layer: n_states, recurrent.rnn_layer_backward: n_states,
                      GRU_CELL: 0}


@pytest.mark.parametrize("cls,cfg", [(nn.GRU, dict(num_layers=2, bidirectional=True)),
                                     (nn.RNN, dict(nonlinearity="tanh")),
                                     (nn.RNN, dict(nonlinearity="relu", num_layers=2))],
                         ids=["gru", "rnn_tanh", "rnn_relu"])
def test_gru_and_rnn_eager_fallback_kernels(cls, cfg):
    """The CPU kernels (forced): the steps in torch ops and backpropagation by hand."""
    eager, lazy = _rnn_pair(cls, cfg, torch.float64, 12, 3, 4)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    want = _run_rnn(eager, x.clone().requires_grad_())
    lr.reset_metrics()
    with lr.force_fallback(recurrent.rnn_layer, recurrent.rnn_layer_backward):
        got = _run_rnn(lazy, x.to(DEV).requires_grad_())
        lr.mark_step()
    _assert_rnn_match(eager, lazy, want, got, (1e-10, 1e-12))
    n = cfg.get("num_layers", 1) * (2 if cfg.get("bidirectional") else 1)
    assert lr.metrics()["fallback_ops"] == {"lazy_runtime.rnn_layer.default": n,
                                            "lazy_runtime.rnn_layer_backward.default": n}


@pytest.mark.parametrize("cls,cfg", [(nn.GRU, dict(bidirectional=True, num_layers=2)),
                                     (nn.RNN, dict(nonlinearity="relu", batch_first=True))],
                         ids=["gru", "rnn_relu"])
def test_packed_gru_and_rnn_match_torch(cls, cfg, monkeypatch):
    counts = _count_records(monkeypatch, recurrent.rnn_layer, recurrent.rnn_layer_backward)
    pcfg = dict(cfg, enforce_sorted=False)
    _, _, lengths, x = _packed_case(random.Random(str(cls)), pcfg, torch.float64)
    eager, lazy = _rnn_pair(cls, cfg, torch.float64, 13, x.shape[-1], 4)
    want = _run_packed(eager, x.clone().requires_grad_(), lengths, pcfg, extra=1)
    got = _run_packed(lazy, x.to(DEV).requires_grad_(), lengths, pcfg, extra=1)
    lr.mark_step()
    for name, w, g in zip(("out", "lengths", "h", "c", "grad x"), want, got):
        if w is not None:
            assert_same(g, w.detach(), 1e-10, 1e-12, what=name)
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        assert_same(pl.grad, pe.grad, 1e-10, 1e-12, what=f"grad {name}")
    n = cfg.get("num_layers", 1) * (2 if cfg.get("bidirectional") else 1)
    assert counts == {recurrent.rnn_layer: n, recurrent.rnn_layer_backward: n}


def test_gru_inference_mode_records_the_layer_op(monkeypatch):
    counts = _count_records(monkeypatch, recurrent.rnn_layer, GRU_CELL)
    eager, lazy = _rnn_pair(nn.GRU, dict(num_layers=2), torch.float32, 14, 3, 4)
    x = torch.randn(6, 3, 3)
    with torch.inference_mode():
        want, got = eager(x), lazy(x.to(DEV))
    assert_same(got, want, 1e-4, 1e-5, "outputs")
    assert counts == {recurrent.rnn_layer: 2, GRU_CELL: 0}


def test_gru_cell_matches_torch():
    """nn.GRUCell keeps torch's fused cell op (one step: no loop to take over)."""
    torch.manual_seed(11)
    cell = nn.GRUCell(3, 4).double()
    cell_l = copy.deepcopy(cell).to(DEV)
    x, h = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    want = cell(x, h)
    want.pow(2).sum().backward()
    got = cell_l(x.to(DEV), h.to(DEV))
    got.pow(2).sum().backward()
    lr.mark_step()
    assert_same(got, want.detach(), 1e-10, 1e-12, "cell h")
    for (name, pe), pl in zip(cell.named_parameters(), cell_l.parameters()):
        assert_same(pl.grad, pe.grad, 1e-10, 1e-12, what=f"grad {name}")
