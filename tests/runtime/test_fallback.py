"""Ops without a lowering run eagerly in torch (the graph is cut there) and their results
re-enter the lazy world; counted per op in metrics()["fallback_ops"]."""

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_same

aten = torch.ops.aten


def test_forced_fallback_is_correct_and_counted():
    x = torch.randn(4, 5)
    xl = x.to(DEV)
    lr.reset_metrics()
    with lr.force_fallback(aten.gelu.default):
        yl = F.gelu(xl * 2) + 1
    lr.mark_step()
    assert_same(yl, F.gelu(x * 2) + 1)
    m = lr.metrics()
    assert m["fallback_ops"] == {"aten.gelu.default": 1}
    assert m["sync_reasons"].get("fallback") == 1  # its pending input was materialized


def test_fallback_of_an_inplace_op_writes_back_through_views():
    x = torch.randn(3, 4)
    xl = x.to(DEV)
    with lr.force_fallback(aten.mul_.Tensor):
        xl[1].mul_(torch.full((4,), 3.0).to(DEV))
        x[1].mul_(torch.full((4,), 3.0))
    lr.mark_step()
    assert_same(xl, x)
    assert lr.metrics()["fallback_ops"].get("aten.mul_.Tensor") == 1


def test_data_dependent_shapes_read_their_mask_or_fall_back():
    """``nonzero`` and ``x[mask]`` read only the mask on the host (torch's kernels read it
    too) and stay lazy; ``unique`` is run by torch on the values read there (no
    fallback: its input is not materialized as one)."""
    x = torch.tensor([[0.0, 1.5], [-2.0, 0.0]])
    xl = x.to(DEV)
    lr.reset_metrics()
    assert_same(torch.nonzero(xl), torch.nonzero(x))
    assert_same(torch.argwhere(xl), torch.argwhere(x))
    assert_same(torch.where(xl != 0)[1], torch.where(x != 0)[1])
    assert_same(xl[xl > 0] * 2, x[x > 0] * 2)
    assert_same(xl[:, xl[0] > 1], x[:, x[0] > 1])
    assert_same(xl[x > 0] + 1, x[x > 0] + 1)   # a CPU mask
    assert_same(torch.unique(xl), torch.unique(x))
    assert lr.metrics()["fallback_ops"] == {}


def test_integer_transposed_convolution_runs_torchs_kernel():
    """Its lowering is a JAX vjp, which integers do not have (it once failed the barrier)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 3, (2, 2, 4, 5), generator=g)
    w = torch.randint(-3, 3, (2, 3, 3, 2), generator=g)
    lr.reset_metrics()
    got = F.conv_transpose2d(x.to(DEV), w.to(DEV), stride=2, output_padding=1) + 1
    assert_same(got, F.conv_transpose2d(x, w, stride=2, output_padding=1) + 1)
    assert lr.metrics()["fallback_ops"] == {"aten.convolution.default": 1}


def test_a_decomposition_that_declines_its_arguments_falls_back(monkeypatch):
    """A decomposition may cover only some arguments and return NotImplemented for the
    rest (torch's own do): the op then runs eagerly (values and grad as torch's)."""
    from lazy_runtime import dispatch
    from lazy_runtime.ops import registry
    op = aten._pdist_forward.default   # an op with no rule or lowering of its own
    declined = []

    def covers_nothing(*args, **kwargs):
        declined.append(op)
        return NotImplemented
    monkeypatch.setitem(registry.DECOMPOSITIONS, op, covers_nothing)
    dispatch.clear_handler_cache()
    try:
        x = torch.randn(5, 3, requires_grad=True)
        xl = x.detach().to(DEV).requires_grad_()
        lr.reset_metrics()
        want = F.pdist(x)
        got = F.pdist(xl)
        want.sin().sum().backward()
        got.sin().sum().backward()
        lr.mark_step()
        assert_same(got, want.detach())
        assert_same(xl.grad, x.grad)
        assert declined and lr.metrics()["fallback_ops"].get(str(op)) == 1
    finally:
        monkeypatch.undo()
        dispatch.clear_handler_cache()


def test_training_with_a_fallback_op_matches_eager():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    ml = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    ml.load_state_dict(m.state_dict())
    ml.to(DEV)
    x = torch.randn(6, 4)
    with lr.force_fallback(aten.gelu.default, aten.gelu_backward.default):
        losses = []
        for model, inp in ((m, x), (ml, x.to(DEV))):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(2):
                loss = model(inp).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                lr.mark_step()
                losses.append(loss.item())
    assert losses[2:] == [torch.tensor(v).item() for v in losses[:2]] or \
        all(abs(a - b) < 1e-5 for a, b in zip(losses[2:], losses[:2]))
    assert lr.metrics()["fallback_ops"].get("aten.gelu_backward.default", 0) >= 1


@pytest.mark.parametrize("shapes", [((4, 3), (4, 3)), ((4, 3), (3,)), ((1, 3), (5, 1)),
                                    ((2, 4, 3), (4, 1)), ((), ()), ((), (3,))])
def test_masked_select_reads_only_its_mask_values_and_gradients(shapes):
    g = torch.Generator().manual_seed(len(shapes[1]))
    for _ in range(3):   # several random masks (counts)
        x = torch.randn(shapes[0], generator=g)
        mask = torch.rand(shapes[1], generator=g) > 0.4
        xl, xc = x.to(DEV).requires_grad_(), x.clone().requires_grad_()
        lr.reset_metrics()
        got, want = torch.masked_select(xl, mask.to(DEV)), torch.masked_select(xc, mask)
        (got.exp() * 2).sum().backward()
        (want.exp() * 2).sum().backward()
        assert_same(got, want.detach())
        assert_same(xl.grad, xc.grad)
        assert_same(torch.masked_select(xl, mask) * 1, want)   # a CPU mask
        assert lr.metrics()["fallback_ops"] == {}


def test_a_masked_selection_reads_only_its_mask():
    """``x[mask]`` has a data-dependent shape: the mask is read on the host and its true
    positions index x, which stays lazy (a gather; its gradient a scatter back)."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 3, generator=g)
    x = torch.randn(6, 3, generator=g)

    def step(device):
        wd = w.clone().to(device).requires_grad_(True)
        xd = x.to(device)
        loss = (wd * xd)[xd > 0].pow(2).mean()
        loss.backward()
        return loss.detach().cpu(), wd.grad.cpu()

    want = step("cpu")
    lr.reset_metrics()
    got = step(DEV)
    assert_same(got, want)
    assert lr.metrics()["fallback_ops"] == {}


def test_a_mask_write_of_the_wrong_count_raises_torchs_error():
    x = torch.zeros(5)
    mask = torch.tensor([True, False, True, True, False])
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.index_put((mask,), torch.ones(2))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.to(DEV).index_put((mask.to(DEV),), torch.ones(2).to(DEV)).cpu()
    lr.mark_step()
    got = x.to(DEV).index_put((mask.to(DEV),), torch.arange(3.0).to(DEV)).cpu()
    assert torch.equal(got, x.index_put((mask,), torch.arange(3.0)))


def test_a_mask_write_of_values_requiring_grad_one_per_element():
    """``x[mask] = v`` with one row of ``v`` per selected row and ``v`` requiring grad: a
    scatter (not the ``where`` of a broadcast mask token); v's gradient, ``grad[mask]``,
    a gather at the mask's positions, read on the host."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 3, generator=g)
    mask = torch.tensor([True, False, True, True, False, True])
    v = torch.randn(4, 3, generator=g)
    scale = torch.arange(3.0)

    def run(device):
        vd = v.clone().to(device).requires_grad_(True)
        xd = x.clone().to(device)
        xd[mask.to(device)] = vd
        (xd * scale.to(device)).sum().backward()
        return xd.detach().cpu(), vd.grad.cpu()

    want = run("cpu")
    lr.reset_metrics()
    assert_same(run(DEV), want)
    assert lr.metrics()["fallback_ops"] == {}
