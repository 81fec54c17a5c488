"""In-place ops, views and aliasing behave as in eager torch."""

import collections

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, assert_same


def both(fn, *inputs):
    """Run ``fn`` on CPU copies and lazy copies of ``inputs``; compare all results/inputs."""
    cpu = [t.clone() for t in inputs]
    lazy = [t.clone().to(DEV) for t in inputs]
    out_c = fn(*cpu)
    out_l = fn(*lazy)
    lr.mark_step()
    assert_same(list(lazy), list(cpu), what="inputs after")
    if out_c is not None:
        assert_same(out_l, out_c, what="result")


def test_add_inplace():
    both(lambda x: x.add_(1.5), torch.randn(3, 4))


def test_inplace_returns_the_same_object():
    x = torch.zeros(3).to(DEV)
    assert x.add_(1) is x
    assert x.mul_(2) is x
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]


def test_slice_written_in_place():
    def f(x):
        x[:, 1:3] = 7.0
        x[0] += 1
        x[1, 2] = -1
        return x * 1
    both(f, torch.randn(3, 4))


def test_view_sees_base_changes_and_base_sees_view_changes():
    def f(x):
        v = x.view(12)
        t = x.t()
        x.mul_(2)
        v[3] = 100.0
        t[0].zero_()
        return [v * 1, t * 1, x * 1]
    both(f, torch.randn(3, 4))


def test_chain_of_views():
    def f(x):
        y = x.permute(2, 0, 1)[1:, :, 0].unsqueeze(0)
        y.fill_(3.0)
        z = x.select(1, 1).narrow(1, 0, 2)
        z.add_(torch.ones(2, 2))
        return y * 1
    both(f, torch.randn(2, 3, 4))


def test_unbind_split_and_diagonal_writes():
    def f(x):
        a, b = x.unbind(0)
        a.mul_(-1)
        c = x.split(2, dim=2)[1]
        c.add_(10)
        x[0].diagonal().fill_(0.5)
        return [b * 1]
    both(f, torch.randn(2, 3, 4))


def test_copy_into_view_with_broadcast_and_dtype_change():
    def f(x):
        x[1:].copy_(torch.tensor([1, 2, 3, 4]))
        return x * 1
    both(f, torch.randn(3, 4))


def test_view_plans_are_reused_only_for_the_same_sizes_strides_and_offset():
    """A view's plan (its step, strides and offset) is kept by op, arguments and the
    input's sizes, strides and offset: views of a transposed, an offset and a plain
    input of one shape each get their own, and all read and write like torch's."""
    from lazy_runtime import dispatch

    def views(base):
        outs = []
        for x in (base[:, :4], base[:, :4].t().contiguous().t(), base[1:, 2:6],
                  base[:, :4]):
            y = x.transpose(0, 1)
            outs += [y.select(0, 1), y[1:, :2], *x.split(2, dim=1), x.unsqueeze(0)[0]]
            y[1:, :2].mul_(2)   # written through the cached plan's view
        return outs

    def layout(outs):
        return [(tuple(o.shape), o.stride(), o.storage_offset()) for o in outs]

    dispatch._VIEW_PLANS.clear()
    both(views, torch.randn(5, 6))
    n = len(dispatch._VIEW_PLANS)
    base = torch.randn(5, 6)
    want, got = views(base.clone()), views(base.to(DEV))   # every plan found, none added
    assert len(dispatch._VIEW_PLANS) == n
    assert layout(got) == layout(want)
    assert_same(got, want, what="views")


def test_as_strided_view_and_write():
    def f(x):
        v = x.as_strided((2, 2), (1, 4), 1)
        v.add_(5.0)
        return v * 1
    both(f, torch.randn(3, 4))



@pytest.mark.parametrize("size,stride,offset", [((2, 2), (1, 2), 7), ((2, 2), (1, 2), 10),
                                                ((3,), (5,), 0), ((2,), (-1,), 3)])
def test_as_strided_past_the_storage_raises_torchs_error(size, stride, offset):
    """It once read past the storage (clipped or uninitialized values); torch refuses."""
    x = torch.arange(10.0)
    with pytest.raises(RuntimeError) as want:
        x.as_strided(size, stride, offset)
    with pytest.raises(RuntimeError) as got:
        x.to(DEV).as_strided(size, stride, offset)
    assert str(got.value) == str(want.value).split("\n")[0]


@pytest.mark.parametrize("view", [
    lambda t: t.t().view(24),                       # not viewable: torch's error
    lambda t: t[:, ::2].view(-1),
    lambda t: t.t().reshape(6, 4).view(24),         # (reshape copied: contiguous)
    lambda t: t.t().view(2, 3, 4),                  # dims split within one stride: viewable
    lambda t: t[2:].view(2, 2, 3),
    lambda t: t.unsqueeze(0).transpose(0, 1).view(4, 6),
    lambda t: t.expand(2, 4, 6).view(2, 24),
])
def test_view_is_refused_where_torch_refuses_it(view):
    """``view`` keeps torch's strides rule (ATen's computeStride): where the sizes cannot be
    a view of these strides, torch's error, not a silently copied value."""
    base = torch.arange(24.0).reshape(4, 6)
    try:
        want = view(base)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            view(base.to(DEV))
        assert "view size is not compatible" in str(e)
        return
    got = view(base.to(DEV))
    assert got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)


LAYOUT_KEEPING = {
    "mul": lambda t: t * 2,
    "sin": lambda t: t.sin(),
    "add-first-permuted": lambda t: t + torch.ones(t.shape, device=t.device),
    "add-second-permuted": lambda t: torch.ones(t.shape, device=t.device) + t,
    "clone": lambda t: t.clone(),
    "to-float64": lambda t: t.double(),
    "to-its-device-float16": lambda t: t.to(t.device, torch.float16),
    "where": lambda t: torch.where(t > 0, t, 0.0),
    "index_fill": lambda t: t.index_fill(0, torch.tensor([1], device=t.device), 2.0),
    "flip": lambda t: t.flip(0),
    "zeros_like": torch.zeros_like,
    "full_like": lambda t: torch.full_like(t, 3.0),
    "sum-keeps-no-layout": lambda t: t.sum(0),
}


@pytest.mark.parametrize("name", list(LAYOUT_KEEPING))
@pytest.mark.parametrize("permute", [lambda x: x.t(), lambda x: x[:, ::2].t(),
                                     lambda x: x.reshape(2, 2, 3).permute(2, 0, 1)],
                         ids=["t", "strided-t", "permute-3d"])
def test_outputs_of_permuted_inputs_have_torchs_strides(name, permute):
    """torch's elementwise ops, clone and dtype copies keep a permuted input's layout; what
    a later reshape does (a view, or a copy) follows from it."""
    x = torch.arange(12.0).reshape(3, 4) - 5
    if name == "index_fill" and permute(x).stride() == (2, 4):   # (the strided t)
        pytest.skip("index_fill is torch's decomposition, which keeps only a dense layout")
    want = LAYOUT_KEEPING[name](permute(x))
    got = LAYOUT_KEEPING[name](permute(x.to(DEV)))
    assert got.stride() == want.stride() and got.is_contiguous() == want.is_contiguous()
    # (close, not equal: XLA:GPU's sin is an ulp from torch's; a misplaced value is not)
    torch.testing.assert_close(got.cpu(), want)


def test_a_reshape_that_copies_in_torch_copies_here():
    def run(x):
        y = x.t() * 2            # (1, 3)-strided in torch: reshape must copy
        flat = y.reshape(-1)
        flat.fill_(7.0)           # leaves y alone
        y.add_(1)                 # leaves flat alone
        z = (x.t() + 1).contiguous().view(-1)   # contiguous: a view, writes shared
        return y, flat, z
    x = torch.arange(6.0).reshape(2, 3)
    lr.reset_metrics()
    for got, want in zip(run(x.to(DEV)), run(x)):
        assert torch.equal(got.cpu(), want)
    assert lr.metrics()["fallback_ops"] == {}   # (prims.copy_strided included)


def test_as_strided_of_a_real_view_of_complex_counts_the_storage_in_real_parts():
    c = torch.randn(5, dtype=torch.complex64)
    real = torch.view_as_real(c.to(DEV))
    assert torch.equal(real.as_strided((10,), (1,), 0).cpu(),
                       torch.view_as_real(c).as_strided((10,), (1,), 0))
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 40"):
        real.as_strided((11,), (1,), 0)


def test_unfold_of_a_0d_tensor_is_a_view_of_its_one_element():
    for dim, size, step in [(0, 1, 1), (-1, 1, 3)]:
        x = torch.tensor(3.0).to(DEV)
        w = x.unfold(dim, size, step)
        assert w.shape == (1,) and w.stride() == (1,)
        w.mul_(2)
        assert x.cpu().item() == 6.0
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 0 is 1"):
        torch.tensor(3.0).to(DEV).unfold(0, 2, 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.tensor(3.0).to(DEV).unfold(1, 1, 1)

@pytest.mark.parametrize("rows,op", [
    (slice(1, None), lambda t: t.t_()), (slice(1, None), lambda t: t.transpose_(0, 1)),
    (slice(1, None), lambda t: t.swapdims_(1, 0)), (slice(1, None), lambda t: t.unsqueeze_(1)),
    (slice(1, 2), lambda t: t.squeeze_(0)), (slice(1, 2), lambda t: t.squeeze_()),
    (slice(1, 2), lambda t: t.squeeze_((0,))),
    (slice(1, None), lambda t: t.as_strided_((2, 2), (1, 3), 1)),
], ids=["t_", "transpose_", "swapdims_", "unsqueeze_", "squeeze_.dim", "squeeze_",
        "squeeze_.dims", "as_strided_"])
def test_in_place_view_ops_change_the_tensor_itself(rows, op):
    """The tensor becomes the view: its shape and strides change, it still shares its
    storage (writes through it reach the base), and autograd sees the new shape."""
    def f(base):
        v = base[rows]
        assert op(v) is v
        v.mul_(2)   # through the new view into the base
        return v.reshape(-1) * 1, tuple(v.shape), v.stride(), v.storage_offset()
    base_c = torch.arange(12.0).reshape(3, 4)
    base_l = base_c.clone().to(DEV)
    out_c, out_l = f(base_c), f(base_l)
    assert out_l[1:] == out_c[1:]
    assert_same(out_l[0], out_c[0], what="values")
    assert_same(base_l, base_c, what="base")
    x = torch.randn(3, 4, requires_grad=True)
    xl = x.detach().to(DEV).requires_grad_()
    op(x[rows] * 1).sin().sum().backward()
    op(xl[rows] * 1).sin().sum().backward()
    assert_same(xl.grad, x.grad, what="grad")


def test_detach_and_data_alias():
    x = torch.randn(3).to(DEV)
    d = x.detach()
    d.add_(1)
    x.data.mul_(0)
    assert x.cpu().tolist() == [0.0, 0.0, 0.0]


def test_inplace_dtype_rules():
    x = torch.zeros(3, dtype=torch.int64).to(DEV)
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(1.5)
    y = torch.zeros(3).to(DEV)
    y.add_(torch.ones(3, dtype=torch.int64).to(DEV))
    assert y.dtype == torch.float32 and y.cpu().tolist() == [1.0, 1.0, 1.0]


def test_optimizer_updates_and_zero_grad():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    ml = torch.nn.Linear(4, 2)
    ml.load_state_dict(m.state_dict())
    ml.to(DEV)
    x = torch.randn(6, 4)
    for model, inp in ((m, x), (ml, x.to(DEV))):
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        for _ in range(2):
            model(inp).pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        if model is ml:
            lr.mark_step()
    for pe, pl in zip(m.parameters(), ml.parameters()):
        assert_same(pl.detach(), pe.detach(), rtol=1e-5, atol=1e-6)
        assert pl.grad is not None and not pl.grad.cpu().any()


def test_in_place_on_a_view_of_a_leaf_with_grad_is_refused_like_torch():
    w = torch.randn(3, requires_grad=True).to(DEV).detach().requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w[0].add_(1)


def test_inplace_on_view_inside_autograd():
    a = torch.randn(3, 4, requires_grad=True)
    al = a.detach().to(DEV).requires_grad_()
    outs = []
    for t in (a, al):
        y = t * 2
        y[:, 1] = 0.0
        y.sum().backward()
        outs.append(t.grad)
    lr.mark_step()
    assert_same(outs[1], outs[0])


def test_buffers_given_one_value_share_it_until_one_is_written():
    """Two ``zeros(())`` are one value, a ``_foreach_*`` op applies its number to each
    tensor as one value, and a barrier leaves buffers that held one pending value sharing
    its result: an optimizer's step counters are read and advanced once per graph. A
    write to one of them is its own."""
    a = torch.zeros((), device=DEV)
    b = torch.zeros((), device=DEV)
    c = torch.zeros(2, device=DEV)
    d = torch.zeros(2, device=DEV)
    assert a._st.node is b._st.node
    assert c._st.node is not d._st.node   # only scalars: moments must not merge
    torch._foreach_mul_([a, b], 0.5)
    torch._foreach_add_([a, b], 1.5)
    assert a._st.node is b._st.node
    lr.mark_step()
    assert a._st.node is b._st.node
    a.add_(1.0)
    lr.mark_step()
    assert (a.item(), b.item()) == (2.5, 1.5)
    x, y = torch.full((), 3.0, device=DEV), torch.full((), -3.0, device=DEV)
    torch._foreach_mul_([x, y], -0.0)   # -0.0 is not 0.0: signs kept
    assert torch.signbit(x.cpu()) and not torch.signbit(y.cpu())


# ``_foreach_*`` ops over lists ``a`` and ``b`` of three tensors of different shapes.
_FOREACH = {
    "add_list_alpha": lambda a, b: torch._foreach_add_(a, b, alpha=0.5),
    "mul_scalar": lambda a, b: torch._foreach_mul_(a, 0.9),
    "mul_tensor": lambda a, b: torch._foreach_mul_(a, b[1].sum()),
    "div_scalarlist": lambda a, b: torch._foreach_div_(a, [2.0, -3.0, 0.5]),
    "sub_out_of_place": lambda a, b: torch._foreach_sub(a, b),
    "addcmul_value": lambda a, b: torch._foreach_addcmul_(a, b, b, value=0.1),
    "addcdiv_scalarlist": lambda a, b: torch._foreach_addcdiv_(
        a, b, [t.abs() + 1 for t in b], [0.1, 0.2, 0.3]),
    "addcdiv_tensor_of_values": lambda a, b: torch._foreach_addcdiv_(
        a, b, [t.abs() + 1 for t in b], torch.tensor([0.1, -0.2, 0.3])),
    "addcmul_tensor_of_values": lambda a, b: torch._foreach_addcmul_(
        a, b, b, torch.tensor([0.5, 0.25, -1.0])),
    "lerp_scalar": lambda a, b: torch._foreach_lerp_(a, b, 0.3),
    "sqrt": lambda a, b: torch._foreach_sqrt([t.abs() for t in a]),
    "neg_": lambda a, b: torch._foreach_neg_(a),
    "maximum_": lambda a, b: torch._foreach_maximum_(a, b),
    "clamp_min_scalar": lambda a, b: torch._foreach_clamp_min_(a, 0.1),
    "norm": lambda a, b: torch._foreach_norm(a),
    # (the dtype given positionally, as the OpInfo samples pass it: it was dropped)
    "norm_1_in_float64": lambda a, b: torch._foreach_norm(a, 1, torch.float64),
    "pow_number_base": lambda a, b: torch._foreach_pow(2.0, a),
    "copy_": lambda a, b: torch._foreach_copy_(a, b),
}


@pytest.mark.parametrize("name", sorted(_FOREACH))
def test_foreach_ops_match_torch(name):
    """Each ``_foreach_*`` op applies its single-tensor op per element (made without going
    back through torch's dispatcher once the overload torch picks is known): called twice
    (learning, then learned), values and written inputs as in eager torch."""
    g = torch.Generator().manual_seed(len(name))
    shapes = [(3, 4), (5,), (2, 3, 2)]

    def run(*ts):
        a, b = list(ts[:3]), list(ts[3:])
        first = _FOREACH[name](a, b)
        second = _FOREACH[name](a, b)
        return None if first is None else [first, second]
    both(run, *[torch.randn(s, generator=g) for s in shapes * 2])


# Lists on which the per-tensor ops after the first may skip their rules (one float32 or
# float64 layout per op) and lists on which they must not (broadcasting, 16-bit, integers,
# mixed dtypes, a number out of float32's range).
_LAYOUTS = {
    "float32": lambda g: [torch.randn(s, generator=g) for s in [(3, 4), (5,), (2, 3, 2)] * 2],
    "float64": lambda g: [torch.randn(s, generator=g, dtype=torch.float64)
                          for s in [(3, 4), (5,), ()] * 2],
    "broadcast": lambda g: [torch.randn(s, generator=g) for s in [(3, 4), (5,), (2, 3, 2),
                                                                  (4,), (1,), (3, 1)]],
    "float16": lambda g: [torch.randn(s, generator=g).half() for s in [(3, 4), (5,)] * 2],
    "int64": lambda g: [torch.randint(1, 9, s, generator=g) for s in [(3, 4), (5,)] * 2],
    "mixed": lambda g: [torch.randn(5, generator=g, dtype=d)
                        for d in (torch.float32, torch.float64, torch.float64, torch.float32)],
}
_ON_LAYOUTS = {
    "add_list_alpha": lambda a, b: torch._foreach_add_(a, b, alpha=0.5),
    "add_scalar": lambda a, b: torch._foreach_add_(a, 2),
    "mul_scalar": lambda a, b: torch._foreach_mul_(a, 0.9),
    "mul_huge": lambda a, b: torch._foreach_mul_(a, 1e300),
    "div_scalarlist": lambda a, b: torch._foreach_div_(a, [2.0, -3.0, 0.5][:len(a)]),
    "mul_ints_and_floats": lambda a, b: torch._foreach_mul_(a, [2, -3.5, 4][:len(a)]),
    "add_bool_alpha": lambda a, b: torch._foreach_add_(a, b, alpha=True),
    "sub_out_of_place": lambda a, b: torch._foreach_sub(a, b),
    "addcmul_value": lambda a, b: torch._foreach_addcmul_(a, b, b, value=0.1),
    "addcmul_huge": lambda a, b: torch._foreach_addcmul_(a, b, b, value=1e300),
    "addcdiv_scalarlist": lambda a, b: torch._foreach_addcdiv_(
        a, b, [t.abs() + 1 for t in b], [0.1, 0.2, 0.3][:len(a)]),
    "lerp_scalar": lambda a, b: torch._foreach_lerp_(a, b, 0.3),
    "sqrt": lambda a, b: torch._foreach_sqrt([t.abs() for t in a]),
    "exp": lambda a, b: torch._foreach_exp(a),
}


def _structure(n):
    """A node as its graph key sees it: op nodes by signature and inputs, a number by its
    value (each call makes its own leaf), any other leaf by identity."""
    if n.op is lr.ir.SCALAR:
        return ("scalar", n.value, n.dtype)
    if not n.inputs and n.op in lr.ir.SETTLED:
        return id(n)
    return (n.sig, tuple(_structure(i) for i in n.inputs))


def _structures(ts):
    return [_structure(lr.tensor.node_of(t)) for t in ts]


def _split(ts):
    return list(ts[:len(ts) // 2]), list(ts[len(ts) // 2:])


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("name", sorted(_ON_LAYOUTS))
def test_foreach_ops_skip_rules_only_where_the_answer_is_known(name, layout, monkeypatch):
    """The per-tensor ops of a ``_foreach_*`` op after the first are recorded without their
    rules where all their tensors share one float32/float64 shape and dtype and their
    numbers fit it (``dispatch.same_layout_recorder``): the nodes are the very ones the rule
    path records (interned nodes: the same objects), and values or torch's errors are as
    in eager torch on every layout, including those where the shortcut must step aside."""
    from lazy_runtime import dispatch
    g = torch.Generator().manual_seed(len(name) + len(layout))
    inputs = _LAYOUTS[layout](g)
    cpu = [t.clone() for t in inputs]
    try:
        expect = _ON_LAYOUTS[name](*_split(cpu))
    except Exception as e:   # torch refuses this op on this layout: so must the lazy one
        with pytest.raises(type(e)):
            _ON_LAYOUTS[name](*_split([t.to(DEV) for t in inputs]))
            lr.mark_step()
        return
    lazy = [t.to(DEV) for t in inputs]
    fast_in = [t.clone() for t in lazy]
    fast_out = _ON_LAYOUTS[name](*_split(fast_in))
    with monkeypatch.context() as m:
        m.setattr(dispatch, "same_layout_recorder", lambda *a: None)
        slow_in = [t.clone() for t in lazy]
        slow_out = _ON_LAYOUTS[name](*_split(slow_in))
    assert _structures(fast_in) == _structures(slow_in)
    if fast_out is not None:
        assert _structures(fast_out) == _structures(slow_out)
    lr.mark_step()
    # (torch's CPU _foreach_* of 16-bit tensors rounds a number to 16 bits first; its
    # single-tensor ops, its CUDA kernels and this device compute it in float: an ulp apart)
    tol = dict(rtol=2e-3, atol=1e-3) if layout == "float16" else {}
    assert_same(fast_in, cpu, what="inputs after", **tol)
    if expect is not None:
        assert_same(fast_out, expect, what="result", **tol)


def test_an_optimizer_step_records_one_rule_per_foreach_op(monkeypatch):
    """Adam's per-parameter ops (float32 parameters of several shapes) run their rules for
    the first parameter of each ``_foreach_*`` op only."""
    from lazy_runtime import dispatch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(5, 4).to(DEV)).sum().backward()
    lr.mark_step()
    seen = []
    real = dispatch.record
    monkeypatch.setattr(dispatch, "record", lambda f, *a, **k: seen.append(f) or real(f, *a, **k))
    opt.step()
    lr.mark_step()
    counts = collections.Counter(map(str, seen))
    assert len(counts) >= 5 and set(counts.values()) == {1}, counts


def test_optimizers_take_the_foreach_path_by_default_as_on_cuda():
    """torch picks the ``_foreach_*`` path for devices with foreach kernels (it lists the
    lazy device) only for tensors of the types it knows: lazy tensors are one of them, so
    an optimizer and ``clip_grad_norm_`` on lazy parameters take it unasked."""
    from torch.optim.optimizer import _default_to_fused_or_foreach
    from torch.utils._foreach_utils import _has_foreach_support
    params = list(torch.nn.Linear(3, 2).to(DEV).parameters())
    assert _default_to_fused_or_foreach(params, differentiable=False) == (False, True)
    assert _has_foreach_support(params, DEV)
    cpu = list(torch.nn.Linear(3, 2).parameters())
    assert _default_to_fused_or_foreach(cpu, differentiable=False) == (False, False)


def test_setting_data_replaces_contents_and_metadata_as_in_torch():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(3, 4))
    pl = torch.nn.Parameter(p.detach().clone().to(DEV))
    old_l = pl.data
    new = torch.arange(10.0, dtype=torch.float64).reshape(5, 2)
    p.data = new.clone()
    pl.data = new.clone().to(DEV)
    assert (pl.shape, pl.dtype, pl.requires_grad) == (p.shape, p.dtype, p.requires_grad)
    assert torch.equal(pl.detach().cpu(), p.detach())
    assert old_l.shape == (3, 4)   # an alias taken before keeps the old contents
    (pl * 2).sum().backward()
    lr.mark_step()
    assert torch.equal(pl.grad.cpu(), torch.full((5, 2), 2.0, dtype=torch.float64))
    with pytest.raises(lr.UnsupportedOperation, match="move x to the lazy device"):
        pl.data = torch.ones(2)


@pytest.mark.parametrize("dst,src,message", [
    ((2, 3), (1, 2, 3), r"output with shape \[2, 3\] doesn't match the broadcast shape"),
    ((2, 3), (4, 3), r"size of tensor a \(2\) must match the size of tensor b \(4\)")])
def test_copy_from_a_source_that_does_not_broadcast_raises_as_torch(dst, src, message):
    """copy_ recorded an expand its lowering could not do (a failed graph at the barrier,
    not torch's error at the call)."""
    for device in ("cpu", DEV):
        with pytest.raises(RuntimeError, match=message):
            torch.zeros(dst, device=device).copy_(torch.ones(src, device=device))
    x = torch.zeros(2, 3, device=DEV)
    x.copy_(torch.arange(3.0).to(DEV))   # (one that broadcasts)
    assert torch.equal(x.cpu(), torch.arange(3.0).expand(2, 3))


def test_an_in_place_view_op_on_a_view_then_backward_fails_as_torch_with_view_replay():
    """torch's autograd rebuilds a view of a tensor with Python dispatch from the ops that
    made it (view replay), without a later in-place ``unsqueeze_`` (what dropout3d does to
    an unbatched input in place): its backward copies a grad of five dims into one of
    four. torch's own error at the copy, as eager CPU gives with view replay on; the graph
    failed to lower at the barrier before."""
    def run(device):
        x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
        whole = torch.zeros(2, 3, 4, 11, dtype=torch.float64, device=device)
        v = whole[..., 1::2]
        v.copy_(x.to(device))
        v.unsqueeze_(0).mul_(torch.tensor([2.0, 3.0], dtype=torch.float64,
                                          device=device).view(1, 2, 1, 1, 1))
        v.squeeze_(0)
        whole.sum().backward()
    replay = torch._C._is_view_replay_enabled()
    torch._C._set_view_replay_enabled(True)
    try:
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            run("cpu")
    finally:
        torch._C._set_view_replay_enabled(replay)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        run(DEV)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_view_copy_of_a_strided_view(seed):
    """``view_copy`` takes any strides, as torch's kernel does (torch's decomposition
    views first: a strided input was refused)."""
    g = torch.Generator().manual_seed(seed)
    m, n = torch.randint(2, 6, (2,), generator=g).tolist()
    x = torch.randn(m, 2 * n, generator=g)
    want = torch.ops.aten.view_copy(x[:, ::2], [n, m])
    got = torch.ops.aten.view_copy(x.to(DEV)[:, ::2], [n, m])
    assert got.is_contiguous() and torch.equal(got.cpu(), want)
    assert lr.metrics()["fallback_ops"].get("aten.view_copy.default", 0) == 0
