"""torch.func's transforms and forward-mode AD on lazy tensors: functorch runs above the
device, so their ops are recorded like any other, nothing run eagerly."""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
from torch.func import functional_call, grad, hessian, jacrev, jvp, vmap

import lazy_runtime as lr

from conftest import DEV


def _forward_ad(device):
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(3, 4, generator=g).to(device), torch.randn(3, 4, generator=g).to(device)
    with fwAD.dual_level():
        y = torch.tanh(fwAD.make_dual(x, t)).sum(1) * 2
        # a view as the primal: its tangent is laid out like its base
        z = (fwAD.make_dual(x[1:], t[1:]) ** 2).mean()
        tangents = [fwAD.unpack_dual(y).tangent, fwAD.unpack_dual(z).tangent]
    _, j = jvp(lambda a: (a.sin() * a).sum(), (x,), (t,))
    h = hessian(lambda a: (a ** 3).sum())(x[0])
    return [v.cpu() for v in (*tangents, j, h)]


@pytest.mark.parametrize("pair", [
    lambda x: (x, x.clone()),
    lambda x: (x[1:], x),              # a view counts its base's elements
    lambda x: (x[1:], x[1:].clone()),
    lambda x: (x.view(torch.int32), x),
    lambda x: (x.view(torch.int16), x),  # counted in the view's own element size
    lambda x: (x.reshape(-1)[:5], torch.zeros(12).to(x.device)),
])
def test_has_same_storage_numel_answers_as_torch(pair):
    for_cpu = pair(torch.zeros(3, 4))
    for_lazy = pair(torch.zeros(3, 4).to(DEV))
    same = torch.ops.aten._has_same_storage_numel
    assert same(*for_lazy) == same(*for_cpu)


def _per_sample_gradients(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(5, 4).to(device)

    def loss(p, xi):
        return functional_call(model, p, (xi,)).pow(2).sum()
    per_sample = vmap(grad(loss), in_dims=(None, 0))(params, x.unsqueeze(1))
    jac = jacrev(lambda xi: functional_call(model, params, (xi,)))(x[0])
    return [per_sample["0.weight"].cpu(), per_sample["2.bias"].cpu(), jac.cpu()]


@pytest.mark.parametrize("compute", [_forward_ad, _per_sample_gradients],
                         ids=["forward-ad-jvp-hessian", "vmap-grad-jacrev"])
def test_a_transform_matches_torch_with_nothing_run_eagerly(compute):
    want = compute("cpu")
    lr.reset_metrics()
    got = compute(DEV)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert lr.metrics()["fallback_ops"] == {}
