"""Indices out of bounds: XLA clamps them (a wrong value, silently); torch raises. The
lowerings of indexing ops check their indices on the device, and the error is raised when
the graph's values are first read or at the next barrier, as a CUDA device-side assert
surfaces at the next synchronization. The values that graph computed are unusable."""

import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same
from lazy_runtime import IndexCheckError

X = torch.arange(10.0).reshape(2, 5)
# (name, fn(x, index), indices torch accepts, indices torch refuses)
CASES = [
    ("index", lambda x, i: x[:, i] * 1, [[0, -5, 4]], [[0, 5], [-6]]),
    ("index_put", lambda x, i: x.index_put((torch.zeros_like(i), i), i.to(x.dtype)),
     [[-1, 3]], [[0, 7]]),
    ("index_select", lambda x, i: x.index_select(1, i), [[4, 0]], [[-1], [5]]),
    ("gather", lambda x, i: x.gather(1, i.expand(2, -1)), [[[4, 1]]], [[[-1, 0]], [[0, 5]]]),
    ("scatter", lambda x, i: x.scatter(1, i.expand(2, -1), 7.0), [[[4, 1]]], [[[5, 0]]]),
    ("scatter_add", lambda x, i: x.scatter_add(1, i.expand(2, -1), x[:, :i.shape[1]]),
     [[[4, 1]]], [[[-1, 0]]]),
    ("scatter_reduce", lambda x, i: x.scatter_reduce(1, i.expand(2, -1), x[:, :i.shape[1]],
                                                    "amax"), [[[2, 2]]], [[[9, 0]]]),
    ("index_add", lambda x, i: x.index_add(1, i, x[:, :i.shape[0]]), [[3, 3]], [[0, 5]]),
    ("embedding", lambda x, i: F.embedding(i, x.t()), [[4, 0, 2]], [[5], [-1]]),
    ("nll_loss", lambda x, i: F.nll_loss(x, i), [[4, 0]], [[4, 5], [-1, 0]]),
    ("cross_entropy", lambda x, i: F.cross_entropy(x, i, ignore_index=-100),
     [[-100, 2]], [[2, 9]]),
]


def _lazy_index(i):
    return torch.tensor(i).to(DEV)


@pytest.mark.parametrize("name,fn,good,bad", CASES, ids=[c[0] for c in CASES])
def test_indices_in_bounds_give_torchs_values(name, fn, good, bad):
    for i in good:
        assert_same(fn(X.to(DEV), _lazy_index(i)), fn(X, torch.tensor(i)), what=name)


@pytest.mark.parametrize("name,fn,good,bad", CASES, ids=[c[0] for c in CASES])
def test_indices_out_of_bounds_raise_at_the_first_read(name, fn, good, bad):
    for i in bad:
        with pytest.raises((IndexError, RuntimeError)):
            fn(X, torch.tensor(i))   # torch refuses them too
        out = fn(X.to(DEV), _lazy_index(i))   # recorded: nothing is known yet
        with pytest.raises(IndexCheckError, match="out of"):
            out.cpu()
        with pytest.raises(lr.LazyRuntimeError):   # its values stay unusable
            out.cpu()
        # the device goes on: the next graph runs
        assert_same(X.to(DEV) * 2, X * 2)


def test_a_failed_check_is_raised_by_the_next_barrier_too():
    out = X.to(DEV).index_select(1, _lazy_index([7]))
    other = X.to(DEV) + 1
    lr.mark_step()   # runs the graph without waiting for it
    with pytest.raises(IndexCheckError, match="out of"):
        lr.mark_step()
    assert isinstance(IndexCheckError("x"), IndexError)   # caught as torch's would be
    with pytest.raises(lr.LazyRuntimeError):
        out.cpu()
    with pytest.raises(lr.LazyRuntimeError):   # same graph: computed before the check ran
        other.cpu()
    assert_same(X.to(DEV) + 1, X + 1)


def test_graphs_without_index_ops_carry_no_checks():
    from lazy_runtime import executor
    y = (X.to(DEV) * 3).sum()
    lr.mark_step()
    assert executor.PENDING_CHECKS == []
    assert y.item() == pytest.approx(135.0)


def test_a_replayed_step_checks_its_indices():
    emb = torch.nn.Embedding(5, 3).to(DEV)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)

    def train_step(ids):
        loss = emb(ids).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step = lr.compile_step(train_step, emb, opt)
    for _ in range(4):   # traced, then replayed
        step(torch.tensor([1, 4])).item()
    loss = step(torch.tensor([1, 5]))
    with pytest.raises(IndexCheckError, match="out of"):
        loss.item()
    with pytest.raises(lr.LazyRuntimeError):   # the update the step made is unusable
        emb.weight.cpu()


def test_checks_can_be_turned_off(monkeypatch):
    """``config.check_indices`` off: no flags, XLA's clamped values (the graph compiles anew:
    the setting is read when a graph compiles)."""
    from lazy_runtime import executor
    monkeypatch.setattr(lr.config, "check_indices", False)
    lr.clear_cache()
    out = X.to(DEV).index_select(1, _lazy_index([7]))
    lr.mark_step()
    assert executor.PENDING_CHECKS == []
    assert out.cpu().shape == (2, 1)
    lr.clear_cache()


def test_flags_copied_at_launch_are_verified_as_well(monkeypatch):
    """Off the CPU the flags' copy to the host starts when the graph is launched
    (``Executable.copy_flags``), and an input's own indices are checked by a flag computed
    on the device; forced on here, the checks still judge right."""
    from lazy_runtime import executor
    real = executor.Executable.run

    def run_copying(self, *args):
        self.copy_flags = True
        return real(self, *args)
    monkeypatch.setattr(executor.Executable, "run", run_copying)
    x = torch.randn(3, 4)
    assert_same(x.to(DEV).index_select(1, _lazy_index([3, 0])) + 1,
                x.index_select(1, torch.tensor([3, 0])) + 1)
    out = x.to(DEV).index_select(1, _lazy_index([4])) + 1
    with pytest.raises(IndexCheckError, match="out of"):
        out.cpu()
    computed = x.to(DEV).index_select(1, (_lazy_index([2, 0]) * 2) - 1) + 1   # a device flag
    with pytest.raises(IndexCheckError, match="out of"):
        computed.cpu()


W = torch.randn(7, 3)
# (name, fn(table, ids)) over ids of a dynamic length: padded graphs check too, their
# padded positions first made index 0 (``padding.index_check_pre``)
PADDED = [
    ("embedding", lambda w, i: F.embedding(i, w).sum(-1)),
    ("index", lambda w, i: w[i].sum(-1)),
    ("gather", lambda w, i: w.t().gather(1, i[1:].expand(3, -1))),
    ("scatter_add", lambda w, i: (i[:1].float() * 0).expand(7, -1).scatter_add(
        0, i, i.float())),
    ("nll_loss", lambda w, i: F.nll_loss((i[1].float()[:, None] * w[:, 0]).log_softmax(-1),
                                         i[1], reduction="none")),
]


@pytest.mark.parametrize("name,fn", PADDED, ids=[p[0] for p in PADDED])
def test_padded_graphs_check_their_indices(name, fn):
    for length in (5, 6):   # one bucket (8): the second run replays the padded executable
        ids = torch.randint(0, 7, (2, length))
        padded0 = lr.metrics()["padded_executions"]
        got = fn(W.to(DEV), lr.mark_dynamic(ids.to(DEV), 1, "T"))
        assert_same(got, fn(W, ids), rtol=1e-5, atol=1e-6, what=name)
        assert lr.metrics()["padded_executions"] > padded0, "the graph ran padded"
        bad = ids.clone()
        bad[1, -1] = 7
        out = fn(W.to(DEV), lr.mark_dynamic(bad.to(DEV), 1, "T"))
        with pytest.raises(IndexCheckError, match="out of|index"):
            out.cpu()


def test_masked_scatter_with_too_few_source_elements_raises_torchs_error():
    mask = X > 3   # six positions
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        X.masked_scatter(mask, torch.arange(5.0))
    assert_same(X.to(DEV).masked_scatter(mask.to(DEV), torch.arange(6.0).to(DEV)),
                X.masked_scatter(mask, torch.arange(6.0)))
    out = X.to(DEV).masked_scatter(mask.to(DEV), torch.arange(5.0).to(DEV))
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        out.cpu()


def test_padded_gather_along_the_dynamic_dim_checks_its_true_length():
    def f(x, i):
        return x.gather(1, i) * 2

    for length in (5, 6):   # padded to 8: index `length` reads padding unless checked
        x = torch.randn(2, length)
        idx = torch.tensor([[0, length - 1], [1, 2]])
        padded0 = lr.metrics()["padded_executions"]
        assert_same(f(lr.mark_dynamic(x.to(DEV), 1, "T"), idx.to(DEV)), f(x, idx))
        assert lr.metrics()["padded_executions"] > padded0, "the graph ran padded"
        bad = idx.clone()
        bad[0, 1] = length
        with pytest.raises(RuntimeError):
            f(x, bad)
        out = f(lr.mark_dynamic(x.to(DEV), 1, "T"), bad.to(DEV))
        with pytest.raises(IndexCheckError, match="dynamic dim"):
            out.cpu()


def _embedding_step(pick):
    """A whole training step of an embedding table of five rows, looked up at
    ``pick(ids)``: (the step, the lazy table, the same table on the CPU)."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5, 3)
    cpu = torch.nn.Embedding(5, 3)
    cpu.load_state_dict(emb.state_dict())
    emb = emb.to(DEV)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)

    def train_step(ids):
        loss = emb(pick(ids)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return lr.compile_step(train_step, emb, opt), emb, cpu


# (name, pick, ids torch accepts, ids torch refuses): the step's argument is a host array;
# where the ids are its elements unchanged (a view, a transpose, a widening) the check is
# judged on the host, where not (a slice, a narrowing cast) on the device
PICKS = [
    ("view", lambda i: i.view(2, 2).t(), [[0, 4, 1, 2]], [4, 0, 5, 1]),
    ("widened", lambda i: i.long(), [[0, 4, 1, 2]], [4, 0, 5, 1]),
    ("sliced", lambda i: i[1:], [[7, 4, 1, 2], [-3, 0, 0, 0]], [0, 5, 1, 2]),
    ("narrowed", lambda i: i.int(), [[2 ** 32 + 1, 4, 0, 3]], [0, 2 ** 32 + 5, 1, 2]),
]


@pytest.mark.parametrize("name,pick,good,bad", PICKS, ids=[p[0] for p in PICKS])
def test_a_replayed_step_checks_the_ids_it_uses(name, pick, good, bad):
    dtype = torch.int32 if name == "widened" else torch.int64
    step, emb, cpu = _embedding_step(pick)
    for _ in range(3):   # traced, then replayed
        for ids in good:
            ids = torch.tensor(ids, dtype=dtype)
            assert step(ids).item() == pytest.approx(cpu(pick(ids)).sum().item(), rel=1e-5)
            cpu.weight.data -= 0.1 * torch.autograd.grad(cpu(pick(ids)).sum(), cpu.weight)[0]
    exe = step._last[2].ready.exe
    on_host = name in ("view", "widened")
    assert (exe.checks == ()) is on_host and bool(exe.input_checks) is on_host
    ids = torch.tensor(bad, dtype=dtype)
    with pytest.raises(IndexError):
        cpu(pick(ids))
    loss = step(ids)
    with pytest.raises(IndexCheckError, match="index out of range"):
        loss.item()
    with pytest.raises(lr.LazyRuntimeError):   # the update the step made is unusable
        emb.weight.cpu()


def test_a_replayed_step_checks_targets_beside_the_ignored_ones():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4).to(DEV)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def train_step(x, y):
        loss = F.cross_entropy(lin(x), y.view(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    step = lr.compile_step(train_step, lin, opt)
    x = torch.randn(4, 3)
    for _ in range(3):
        assert step(x, torch.tensor([[-100, 3], [0, -100]])).item() > 0
    assert not step._last[2].ready.exe.checks, "judged on the host"
    loss = step(x, torch.tensor([[-100, 4], [0, 1]]))
    with pytest.raises(IndexCheckError, match="target is out of bounds"):
        loss.item()


def test_a_device_input_is_checked_once_per_array(monkeypatch):
    """A device array is immutable: an executable checks one it ran on before (a model's
    positions, made once) no more."""
    from lazy_runtime import executor
    calls = []
    for where in ("_outside_on_device", "_outside_on_host"):   # (XLA:CPU: on the host)
        real = getattr(executor, where)
        monkeypatch.setattr(executor, where,
                            lambda *a, real=real: calls.append(a) or real(*a))
    pos = torch.tensor([0, 2]).to(DEV)
    lr.mark_step()
    for scale in (1.0, 2.0, 3.0):
        assert_same(F.embedding(pos, W.to(DEV) * scale),
                    F.embedding(torch.tensor([0, 2]), W * scale))
    assert len(calls) == 1
    out = F.embedding(torch.tensor([1, 7]).to(DEV), W.to(DEV) * 4.0)
    with pytest.raises(IndexCheckError, match="index out of range"):
        out.cpu()
    assert len(calls) == 2


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 300])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_the_host_judges_a_few_or_many_indices_alike(size, dtype):
    """A host array's check: up to ``_FEW`` integers judged in Python, more with numpy;
    both give what the elementwise rule gives, with and without an ignored value."""
    from lazy_runtime.executor import _outside_on_host
    from lazy_runtime.ops.common import out_of_range
    rng = np.random.default_rng(size)
    for low, high, ignore in ((0, 10, None), (0, 10, 3), (-5, 5, None)):
        c = types.SimpleNamespace(low=low, high=high, ignore=ignore)
        for trial in range(20):
            a = rng.integers(0, 12 if trial % 2 else 10, size).astype(dtype)
            want = bool(out_of_range(a, low, high, ignore).any())
            assert _outside_on_host(a, c) is want
            assert _outside_on_host(a.reshape(-1, 1) if size else a, c) is want
