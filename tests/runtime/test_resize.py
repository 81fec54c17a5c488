"""Tensors whose buffer changes size: ``out=`` tensors torch resizes (an empty one, the
usual way to call an out= op; one of another shape, with torch's warning), ``resize_``,
``resize_as_`` and ``set_``. Each compared with eager torch at random sizes. All were
refused (a lazy tensor's buffer could not be resized or swapped), out= with an empty
tensor included."""

import random
import warnings

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV


def _sizes(seed):
    rng = random.Random(seed)
    return rng.randint(2, 6), rng.randint(2, 7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_out_tensors_without_elements_take_the_results_shape(seed):
    m, n = _sizes(seed)
    a, b = torch.randn(m, n), torch.randn(n)
    out = torch.empty(0, device=DEV)
    assert torch.add(a.to(DEV), b.to(DEV), out=out) is out
    values, indices = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.int64, device=DEV)
    got = torch.max(a.to(DEV), 1, out=(values, indices))
    assert got[0] is values and got[1] is indices
    host = torch.empty(0, dtype=torch.int64, device=DEV)
    torch.arange(m, out=host)   # (computed on the host: an out= op with no functional form)
    assert torch.equal(out.cpu(), a + b)
    assert torch.equal(values.cpu(), a.max(1).values)
    assert torch.equal(indices.cpu(), a.max(1).indices)
    assert torch.equal(host.cpu(), torch.arange(m))


def test_an_out_tensor_with_elements_is_resized_with_torchs_warning():
    a = torch.randn(3, 4)
    out = torch.zeros(2, device=DEV)
    with pytest.warns(UserWarning, match=r"had shape \[2\], which does not match the "
                                         r"required output shape \[3, 4\]"):
        torch.neg(a.to(DEV), out=out)
    assert torch.equal(out.cpu(), -a)
    same = torch.zeros(3, 4, device=DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (the right shape: written, no warning)
        torch.neg(a.to(DEV), out=same)
    assert torch.equal(same.cpu(), -a)


def test_an_out_tensor_a_view_shares_is_not_resized():
    out = torch.zeros(2, device=DEV)
    view = out[:1]
    with pytest.raises(lr.UnsupportedOperation, match="view of it"):
        torch.sin(torch.randn(3).to(DEV), out=out)
    assert view.shape == (1,) and out.shape == (2,)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.add(torch.randn(2).to(DEV), 1, out=torch.empty(0, dtype=torch.int64,
                                                             device=DEV))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resize_keeps_the_elements_in_order(seed):
    m, n = _sizes(seed)
    a = torch.randn(m, n)
    shrunk, x = a.clone(), (a + 1).to(DEV)   # (a pending value resized)
    shrunk.add_(1).resize_(n, m - 1)
    assert x.resize_(n, m - 1) is x
    assert x.shape == (n, m - 1) and torch.equal(x.cpu(), shrunk)
    grown = a.to(DEV)
    grown.resize_(m * n + 5)
    # the first m * n elements are torch's; torch leaves the others uninitialized: zeros
    assert torch.equal(grown.cpu(), torch.cat([a.flatten(), torch.zeros(5)]))
    like = a.to(DEV).resize_as_(torch.empty(n, m, device=DEV))
    assert torch.equal(like.cpu(), a.reshape(n, m))
    assert a.to(DEV).resize_(0).shape == (0,)


def test_resize_of_a_tensor_with_a_view_is_refused():
    x = torch.randn(3).to(DEV)
    view = x[1:]
    with pytest.raises(lr.UnsupportedOperation, match="views"):
        x.resize_(5)
    with pytest.raises(lr.UnsupportedOperation, match="views"):
        view.resize_(5)
    assert x.shape == (3,) and view.shape == (2,)
    with pytest.raises(lr.UnsupportedOperation, match="memory_format"):
        torch.randn(1, 2, 3, 4).to(DEV).resize_(2, 2, 3, 4,
                                                memory_format=torch.channels_last)


@pytest.mark.parametrize("device", ["cpu", DEV])
def test_set_shares_the_source_and_old_views_keep_the_old_buffer(device):
    a, b = torch.randn(3, 4), torch.randn(6)
    x, y = a.clone().to(device), b.clone().to(device)
    old_row = x[0]
    assert x.set_(y) is x
    x.add_(1)                     # written through x: y sees it
    part = torch.zeros(2, device=device).set_(y[2:5:2])   # a strided view as the source
    part.mul_(10)
    old_row.mul_(0)               # the old buffer: x and y unchanged
    want = b + 1
    want[2:5:2] *= 10
    assert torch.equal(y.cpu(), want) and torch.equal(x.cpu(), want)
    assert part.stride() == (2,) and torch.equal(part.cpu(), want[2:5:2])
    assert torch.equal(old_row.cpu(), torch.zeros(4))
    assert x.set_().shape == (0,) and y.shape == (6,)
    with pytest.raises(RuntimeError, match="Could not set tensor of type double to a "
                                           "tensor of type float"):
        torch.zeros(2, device=device).set_(torch.zeros(2, dtype=torch.float64, device=device))
