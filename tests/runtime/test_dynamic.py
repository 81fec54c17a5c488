"""Shape-polymorphic compilation against eager torch: every padding rule at several sizes
(values and gradients), whole models, training, bucket policies, automatic dynamic and the
exact-shape fallback. Compiles are few: each test's sizes share buckets."""

import copy
import re

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from conftest import DEV, assert_grads_same, assert_same, load_example


@pytest.fixture(autouse=True)
def _policy():
    """Settings restored after each test; inputs' padding holds NaN (ints: a large
    number), so a leak of padding into a value shows (zeros would hide it in a sum)."""
    old = (lr.config.buckets, lr.config.max_bucket, lr.config.automatic_dynamic,
           lr.config.poison_padding)
    lr.config.poison_padding = True
    yield
    (lr.config.buckets, lr.config.max_bucket, lr.config.automatic_dynamic,
     lr.config.poison_padding) = old


def kitchen_sink(x, ids, tgt, w, emb, mask):
    """One graph exercising every padding rule; x (B, T, C), ids/tgt (B, T)."""
    B, T, C = x.shape
    outs = {}
    h = torch.tanh(x @ w) * 2 + 1                                  # matmul, elementwise
    outs["sum_T"] = h.sum(1)                                       # sum over padded T
    outs["mean_T"] = h.mean(dim=1, keepdim=True)                   # true-size divisor
    outs["mean_all"] = h.mean()
    outs["var_T"] = h.var(dim=1)
    outs["std_T"] = h.std(dim=1, correction=0)
    outs["amax_T"] = h.amax(1)
    outs["amin_T"] = h.amin(1)
    outs["max_T"] = h.max(dim=1).values
    outs["argmax_T"] = h.argmax(dim=1)
    outs["logsumexp_T"] = torch.logsumexp(h, dim=1)
    outs["prod_T"] = (h.detach() * 0.1 + 1).prod(1)              # (backward slices T-1)
    outs["norm_T"] = torch.linalg.vector_norm(h, dim=1)
    outs["any_T"] = (h > 2.5).any(1)
    outs["all_T"] = (h > -0.5).all(1)
    outs["cumsum_T"] = h.detach().cumsum(1)                       # (its backward slices T-1: exact)
    outs["flip_T"] = h.flip(1) * 1.0
    outs["softmax_T"] = F.softmax(h.transpose(1, 2), dim=-1)      # softmax along padded T
    outs["log_softmax_T"] = F.log_softmax(h.transpose(1, 2), dim=-1)
    outs["layer_norm"] = F.layer_norm(h, (C,), weight=w[0], bias=w[1])
    flat = h.reshape(B * T, C)                                     # view merging B and T
    outs["flat_mm"] = flat.t() @ flat                              # contraction over B*T
    outs["bmm_T"] = torch.bmm(h.transpose(1, 2), h)                # contraction over T
    outs["ce"] = F.cross_entropy(flat, tgt.reshape(-1) % C)        # mean over padded B*T
    outs["ce_sum"] = F.cross_entropy(flat, tgt.reshape(-1) % C, reduction="sum")
    outs["mse"] = F.mse_loss(h, torch.zeros_like(h) + 0.5)
    e = emb[ids]                                                   # embedding (index)
    outs["emb"] = F.embedding(ids, emb).sum((1, 2))
    causal = torch.ones(T, T, device=x.device).tril()             # host constant (T, T)
    att = (h @ h.transpose(1, 2)).masked_fill(causal == 0, float("-inf"))
    outs["attn"] = F.softmax(att, dim=-1) @ h                      # masked causal attention
    pos = torch.arange(T, device=x.device)
    outs["pos"] = (e + emb[pos]).sum(1)
    outs["first"] = h[:, 0]                                        # select on padded dim
    outs["slice_mask"] = (mask[:T, :T] * 1.0).sum(0)               # slice of a buffer to T
    outs["split"] = torch.cat(h.split([1, C - 1], dim=2)[::-1], dim=2).sum(1)
    outs["stack"] = torch.stack([h, h * 2], dim=1).sum(2)
    outs["expand"] = (h.sum(2, keepdim=True).expand(B, T, C) * 1.0).sum(1)
    return outs


def _inputs(B, T, C=6, seed=0):
    g = torch.Generator().manual_seed(seed + 97 * T + B)
    x = torch.randn(B, T, C, generator=g)
    ids = torch.randint(0, 10, (B, T), generator=g)
    tgt = torch.randint(0, 100, (B, T), generator=g)
    return x, ids, tgt


def _params(C=6):
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(C, C, generator=g) * 0.5).requires_grad_()
    emb = torch.randn(16, C, generator=g).requires_grad_()
    mask = torch.ones(64, 64).tril()
    return w, emb, mask


def _scalarize(outs):
    return sum((v.float() * (i + 1)).sum() for i, v in enumerate(outs.values())
               if v.is_floating_point() and v.requires_grad)


def test_every_padding_rule_values_and_gradients_at_random_sizes():
    w, emb, mask = _params()
    wl, embl = (t.detach().to(DEV).requires_grad_() for t in (w, emb))
    maskl = mask.to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    sizes = [(2, 5), (2, 7), (2, 8), (2, 11)]  # T buckets 8, 8, 8, 16
    for B, T in sizes:
        x, ids, tgt = _inputs(B, T)
        want = kitchen_sink(x, ids, tgt, w, emb, mask)
        _scalarize(want).backward()
        xl = lr.mark_dynamic(x.to(DEV), 1, "T").requires_grad_()
        got = kitchen_sink(xl, ids.to(DEV), tgt.to(DEV), wl, embl, maskl)
        _scalarize(got).backward()
        lr.mark_step()
        for k in want:
            assert_same(got[k], want[k].detach(), rtol=2e-4, atol=2e-5, what=f"{k} at T={T}")
        assert_same(wl.grad, w.grad, rtol=2e-4, atol=2e-4, what=f"grad w at T={T}")
        assert_same(embl.grad, emb.grad, rtol=2e-4, atol=2e-4, what=f"grad emb at T={T}")
        for t in (w, emb, wl, embl):
            t.grad = None
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]      # buckets 8 and 16
    assert m["buckets"]["T"] == [8, 16]
    assert m["padded_executions"] == len(sizes)


def test_gpt_training_padded_matches_eager_and_compiles_once_per_bucket():
    ex = load_example("gpt")
    torch.manual_seed(0)
    eager = ex.GPT(block=32, dropout=0.0)
    lazy = copy.deepcopy(eager).to(DEV)
    opt_e, opt_l = ex.make_optimizer(eager), ex.make_optimizer(lazy)
    lr.mark_step()
    lr.reset_metrics()
    lengths = [9, 13, 16, 10, 12]                  # one bucket: 16
    for step, T in enumerate(lengths):
        x, y = ex.make_batch(step, batch=3, length=T)
        le = ex.loss_fn(eager(x), y)
        le.backward()
        ll = ex.loss_fn(lazy(lr.mark_dynamic(x.to(DEV), 1, "T")), y.to(DEV))
        ll.backward()
        if step == 0:
            lr.mark_step()
            for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
                assert_same(pl.grad, pe.grad, rtol=1e-4, atol=1e-5, what=f"grad of {name}")
        opt_e.step(), opt_e.zero_grad(), opt_l.step(), opt_l.zero_grad()
        lr.mark_step()
        assert ll.item() == pytest.approx(le.item(), rel=1e-4, abs=1e-5), step
    m = lr.metrics()
    # step 1 is cut in two (forward+backward padded; the optimizer alone, static), step 2
    # is the whole padded step; then nothing compiles
    assert m["compiles"] <= 3 and m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["padded_executions"] == len(lengths)


def test_a_length_equal_to_a_model_width_reuses_the_bucket():
    """T = 32 = d_model: the parameters (results of the last step, not data copied in
    this one) are not taken for T, so the step runs on its bucket's executable."""
    ex = load_example("gpt")
    torch.manual_seed(0)
    model = ex.GPT(block=64, dropout=0.0).to(DEV)
    opt = ex.make_optimizer(model)
    lr.mark_step()
    lr.reset_metrics()
    compiles = []
    for step, T in enumerate([20, 24, 28, 32, 30]):     # one bucket: 32
        x, y = ex.make_batch(step, batch=2, length=T)
        loss = ex.loss_fn(model(lr.mark_dynamic(x.to(DEV), 1, "T")), y.to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        lr.mark_step()
        compiles.append(lr.metrics()["compiles"])
    m = lr.metrics()
    assert compiles[-1] == compiles[1] and m["exact_compiles"] == {}, m["recompile_reasons"]


def test_a_size_equal_to_a_model_dim_is_still_right():
    """T == C: guesses of which 6 is T may be wrong; results never are."""
    w, emb, mask = _params()
    x, ids, tgt = _inputs(2, 6)
    want = kitchen_sink(x, ids, tgt, w, emb, mask)
    got = kitchen_sink(lr.mark_dynamic(x.to(DEV), 1, "T"), ids.to(DEV), tgt.to(DEV),
                       w.detach().to(DEV), emb.detach().to(DEV), mask.to(DEV))
    for k in want:
        assert_same(got[k], want[k].detach(), rtol=2e-4, atol=2e-5, what=k)


def test_padding_never_leaks_into_outputs_of_a_view():
    x = torch.randn(2, 5, 4)
    xl = lr.mark_dynamic(x.to(DEV), 1, "T")
    y = (xl * 2).reshape(10, 4)
    lr.mark_step()
    assert lr.metrics()["padded_executions"] >= 1
    assert_same(y, x.reshape(10, 4) * 2)
    assert_same(y[3:7], (x.reshape(10, 4) * 2)[3:7])
    assert_same(y.sum(0), (x * 2).reshape(10, 4).sum(0), rtol=1e-5, atol=1e-5)


# Ops reading along a dim padded *inside* (a flattened (3, T): the padding sits between
# its rows, and computed padding holds anything): each stays padded where that is right
# and compiles exactly where not (``padding._end_padded``); torch is the oracle either way.
INSIDE = {
    "select": lambda f: f[:, 7], "slice": lambda f: f[:, 2:9], "last": lambda f: f[:, -4:],
    "narrow": lambda f: f.narrow(1, 4, 3), "split": lambda f: f.split(4, 1)[1],
    "unfold": lambda f: f.unfold(1, 3, 2), "diff": lambda f: torch.diff(f, dim=1),
    "shift": lambda f: f[:, 1:] - f[:, :-1], "sum": lambda f: f.sum(1),
    "softmax": lambda f: f.softmax(1), "mm": lambda f: f @ f.t(),
    "unflatten": lambda f: f.reshape(2, 3, -1)[:, 1], "cumsum": lambda f: f.cumsum(1),
    "cumprod": lambda f: f.cumprod(1) * 1e-3, "argmax": lambda f: f.argmax(1),
    "argmin": lambda f: f.argmin(-1), "max": lambda f: f.max(1).indices,
    "flip": lambda f: f.flip(1), "cummax": lambda f: f.cummax(1).values,
    "cummin": lambda f: f.cummin(1).values * 2,
    "tril": lambda f: (f[:, :, None] * f[:, None, :]).tril(1).sum(1),
    "triu": lambda f: (f[:, :, None] * f[:, None, :]).triu(2).sum(2),
    "gather": lambda f: f.gather(1, _index_into(f)),
    "scatter_add": lambda f: f.scatter_add(1, _index_into(f),
                                           f.sum(1, keepdim=True).expand(-1, 3) * 0.1),
    # norms, losses, attention and recurrent layers that run padded along it (a sweep of
    # 56 such ops, 2026-11-22, found all right; most others compile exactly there)
    "batch_norm": lambda f: F.batch_norm(f.reshape(2, 3, -1), None, None, training=True),
    "group_norm": lambda f: F.group_norm(f.reshape(2, 3, -1), 3),
    "instance_norm": lambda f: F.instance_norm(f.reshape(2, 3, -1)),
    "rms_norm": lambda f: F.rms_norm(f, f.shape[-1:]),
    "logsumexp": lambda f: f.logsumexp(1), "var": lambda f: f.var(1),
    "cross_entropy": lambda f: F.cross_entropy(f.reshape(2, 3, -1),
                                               f.reshape(2, 3, -1).argmax(1).detach()),
    "attention": lambda f: F.scaled_dot_product_attention(*[f[:, None, :, None].expand(
        2, 1, -1, 2)] * 3).sum(-1)[:, 0],
    "lstm": lambda f: _RNNS["lstm"].to(f.device)(f[..., None])[0].sum(-1),
    "gru": lambda f: _RNNS["gru"].to(f.device)(f[..., None])[0].sum(-1),
}
_RNNS = {"lstm": torch.nn.LSTM(1, 3, batch_first=True).double(),
         "gru": torch.nn.GRU(1, 3, batch_first=True).double()}


def _index_into(f):
    return torch.tensor([[0, 5, 7], [9, 1, 12]]).to(f.device)


@pytest.mark.parametrize("name", sorted(INSIDE))
def test_ops_along_a_dim_padded_inside_match_torch(name):
    def f(x):
        return INSIDE[name]((x.exp() + 1).reshape(2, -1))

    def grad(x):   # weights from the output itself: its layout, padded as it is
        out = f(x)
        return torch.autograd.grad((out * out.detach().sin()).sum(), x)[0]
    for length in (5, 6):   # one bucket: the second replays the first's executable
        x = torch.randn(2, 3, length, dtype=torch.float64)
        assert_same(f(lr.mark_dynamic(x.to(DEV), 2, "T")), f(x), rtol=1e-6, atol=1e-8,
                    what=name)
        if f(x).is_floating_point():
            assert_same(grad(lr.mark_dynamic(x.to(DEV), 2, "T").requires_grad_()),
                        grad(x.requires_grad_()), rtol=1e-6, atol=1e-8, what=name)


def test_position_reading_ops_run_padded_along_a_dim_padded_inside():
    """Their values: ``test_ops_along_a_dim_padded_inside_match_torch``; here that none
    compiled at its exact shape: gather and scatter_add read and write each true position
    at its place in the padded layout (``padding.pad_gather``), argmax, max, cumsum,
    cumprod, flip and cummax run on the true elements put first, in torch's order (and
    cummax's gradient scatters to its indices' places), and tril and triu compare the
    positions' indices in the true order (before, each exact)."""
    lr.reset_metrics()
    for name in ("gather", "scatter_add", "argmax", "max", "cumsum", "cumprod", "flip",
                 "cummax", "tril", "triu"):
        for length in (5, 6):
            x = lr.mark_dynamic(torch.randn(2, 3, length).to(DEV), 2, "T")
            # (a float result: argmax's ints read alone are computed on the host)
            (INSIDE[name](x.reshape(2, -1)) * 1.5).cpu()
    assert lr.metrics()["exact_compiles"] == {}


def test_op_without_padding_rule_compiles_exactly_and_is_counted():
    lr.reset_metrics()
    x = torch.randn(2, 1, 3, 5)
    xl = lr.mark_dynamic(x.to(DEV), 3, "T")

    def upsample(t):   # (bicubic resampling of a padded dim by a given scale: no rule)
        return F.interpolate(t, scale_factor=1.5, mode="bicubic") + 1
    assert_same(upsample(xl), upsample(x), rtol=1e-5, atol=1e-5)
    assert lr.metrics()["exact_compiles"] == {"aten.upsample_bicubic2d.default": 1}
    # (the reason is the rule's: a refusal, not a missing rule)
    assert lr.metrics()["recompile_reasons"][-1].startswith(
        "exact shape (resampling cubic of a padded dim at a given scale: "
        "aten.upsample_bicubic2d.default)")


def test_bucket_policies_off_list_and_maximum():
    f = lambda t: (t * 3).sum(1)  # noqa: E731
    lr.config.buckets = "off"
    lr.reset_metrics()
    for T in (3, 4):
        x = torch.randn(2, T)
        assert_same(f(lr.mark_dynamic(x.to(DEV), 1, "T")), f(x), rtol=1e-5, atol=1e-5)
    assert lr.metrics()["padded_executions"] == 0 and lr.metrics()["compiles"] == 2
    lr.config.buckets = [6, 12]
    lr.reset_metrics()
    for T in (3, 5, 6, 7):
        x = torch.randn(2, T)
        assert_same(f(lr.mark_dynamic(x.to(DEV), 1, "T")), f(x), rtol=1e-5, atol=1e-5)
    assert lr.metrics()["buckets"] == {"T": [6, 12]}
    lr.config.buckets, lr.config.max_bucket = "pow2", 4
    lr.reset_metrics()
    x = torch.randn(2, 9)
    assert_same(f(lr.mark_dynamic(x.to(DEV), 1, "T")), f(x), rtol=1e-5, atol=1e-5)
    assert lr.metrics()["buckets"] == {"T": [9]}   # above the maximum: its own size


def test_a_bucket_policy_per_symbol():
    def run(policy, sizes):
        """(buckets, compiles) of ``(x * 3).sum(1)`` at each (B, T), both dims dynamic."""
        lr.config.buckets = policy
        lr.reset_metrics()
        for B, T in sizes:
            x = torch.randn(B, T)
            xl = lr.mark_dynamic(lr.mark_dynamic(x.to(DEV), 0, "B"), 1, "T")
            assert_same((xl * 3).sum(1), (x * 3).sum(1), rtol=1e-5, atol=1e-5)
        m = lr.metrics()
        return m["buckets"], m["compiles"]

    assert run({"B": [4], "T": "pow2"}, ((2, 3), (3, 4), (4, 3))) == ({"B": [4], "T": [4]}, 1)
    # B compiles per size; T by the list
    assert run({"B": "off", "*": [8]}, ((2, 3), (2, 5), (3, 5))) == ({"B": [2, 3], "T": [8]}, 2)


def test_a_dynamic_dim_of_size_one_stays_concrete():
    # B = 1: attention-style views merge B into the head dim, and the causal mask
    # broadcasts against it; B is compiled as 1 (once per bucket of T), never exactly
    w = torch.randn(8, 8)
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool))

    def f(x):   # x (B, T, 8), 2 heads of 4
        B, T, C = x.shape
        q = (x @ w.to(x.device)).view(B, T, 2, 4).transpose(1, 2).reshape(B * 2, T, 4)
        s = (q @ q.transpose(1, 2)).masked_fill(~mask.to(x.device)[:T, :T], -1e9)
        return s.softmax(-1).view(B, 2, T, T).sum(1)

    lr.reset_metrics()
    for B, T in ((1, 5), (1, 7), (3, 6), (1, 8)):
        x = torch.randn(B, T, 8)
        got = f(lr.mark_dynamic(lr.mark_dynamic(x.to(DEV), 0, "B"), 1, "T"))
        assert_same(got, f(x), rtol=1e-5, atol=1e-5)
    m = lr.metrics()
    assert not m["exact_compiles"] and m["compiles"] == 2, m["recompile_reasons"]


def test_mark_dynamic_on_a_cpu_tensor_and_automatic_dynamic():
    w = torch.randn(4, 3)
    wl = w.to(DEV)
    f = lambda t, w: F.softmax(t @ w, dim=0).sum(0)  # noqa: E731  softmax over the batch
    lr.mark_step()
    lr.reset_metrics()
    for B in (5, 6, 7, 3):
        x = torch.randn(B, 4)
        assert_same(f(x.to(DEV), wl), f(x, w), rtol=1e-5, atol=1e-6)
    m = lr.metrics()
    # 5: exact; 6: the batch dim became dynamic (bucket 8); 7: reused; 3: bucket 4
    assert m["compiles"] == 3 and m["padded_executions"] == 3, m["recompile_reasons"]
    assert m["automatic_dynamic"], m
    x = torch.randn(9, 4)
    lr.mark_dynamic(x, 0, "B")
    assert_same(f(x.to(DEV), wl), f(x, w), rtol=1e-5, atol=1e-6)
    assert lr.metrics()["buckets"]["B"] == [16]


def test_a_plain_input_beside_a_marked_one_learns_its_own_size():
    """A signal marked at T and labels of a length S of their own (a batch's longest,
    unmarked): S is learnt from the second batch on (before, the labels' every length
    compiled, keyed exactly); host-made constants are left to be laid out at their use."""
    w = torch.randn(3, 5)
    wl = w.to(DEV)

    def f(x, labels):
        h = (x @ w if x.device.type == "cpu" else x @ wl).log_softmax(-1)   # (T, 5)
        counts = F.one_hot(labels, 5).float().sum(0)                         # (S, 5)
        return {"score": h.sum(0) @ counts.T, "count": counts.sum(1)}
    lr.mark_step()
    lr.reset_metrics()
    sizes = [(20, 5), (25, 7), (30, 6), (18, 8)]   # (T, S): buckets 32 and 8
    for T, S in sizes:
        x, labels = torch.randn(T, 3), torch.randint(0, 5, (S, 4))
        got = f(lr.mark_dynamic(x, 0, "T").to(DEV), labels.to(DEV))
        for k, want in f(x, labels).items():
            assert_same(got[k], want, rtol=1e-5, atol=1e-5, what=f"{k} at {T, S}")
    m = lr.metrics()
    # (20, 5): T padded, S exact; (25, 7): S learnt; the others reuse it
    assert m["compiles"] == 2 and m["padded_executions"] == len(sizes), m["recompile_reasons"]
    assert len(m["automatic_dynamic"]) == 1 and re.fullmatch(
        r"input \d+ dim 0 -> s\d+_\d+", m["automatic_dynamic"][0]), m["automatic_dynamic"]
    assert not m["exact_compiles"], m["recompile_reasons"]


def test_compile_with_an_analyzer_plan_marks_inputs_from_the_first_call(tmp_path):
    import json

    import shapeinfer
    ex = load_example("gpt")
    torch.manual_seed(0)
    eager = ex.GPT(block=32, dropout=0.0)
    plan = shapeinfer.analyze(eager, args=(torch.randint(0, 64, (2, 12)),),
                              dims={"idx": ("B", "T")})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_json()))
    for shapes in (plan, str(path)):
        lazy = lr.compile(copy.deepcopy(eager).to(DEV), shapes=shapes)
        assert lazy._lr_input_marks == {"idx": {0: "B", 1: "T"}}
        assert lazy._lr_shape_only is True
    lr.mark_step()
    lr.reset_metrics()
    with torch.no_grad():
        for B, T in ((2, 9), (3, 14)):            # buckets (2, 16) and (4, 16)
            x = torch.randint(0, 64, (B, T))
            assert_same(lazy(x.to(DEV)), eager(x), rtol=1e-4, atol=1e-5)
    m = lr.metrics()
    assert m["padded_executions"] == 2 and m["exact_compiles"] == {}
    assert m["buckets"] == {"B": [2, 4], "T": [16]}


def _twins(layers, opt_cls, **opt_args):
    """An eager model of ``layers()`` (seeded), its copy on the device, an optimizer for
    each; metrics reset."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(*layers())
    lazy = copy.deepcopy(eager).to(DEV)
    opts = [opt_cls(m.parameters(), **opt_args) for m in (eager, lazy)]
    lr.mark_step()
    lr.reset_metrics()
    return eager, lazy, opts


# Losses over a data-dependent subset of rows or columns: the subset's positions are read
# on the host (its size is data; ``unique`` runs there) and the graph sees a new size
# almost every step.
def _mask_rows_ce(out, y):
    mask = y > 0
    return F.cross_entropy(out[mask], y[mask])


def _masked_select_sq(out, y):
    return out.masked_select((y > 0)[:, None]).pow(2).mean()


def _nonzero_index_select(out, y):
    rows = (y == 2).nonzero().squeeze(1)
    return out.index_select(0, rows).logsumexp(1).sum() + rows.numel() * 0.0


def _unique_columns(out, y):
    return out[:, torch.unique(y[:6])].tanh().mean()


# name -> (loss, the size of its subset for targets y)
_SUBSET_LOSSES = {
    "mask_rows_ce": (_mask_rows_ce, lambda y: int((y > 0).sum())),
    "masked_select_sq": (_masked_select_sq, lambda y: int((y > 0).sum())),
    "nonzero_index_select": (_nonzero_index_select, lambda y: int((y == 2).sum())),
    "unique_columns": (_unique_columns, lambda y: len(torch.unique(y[:6]))),
}


@pytest.mark.parametrize("name", sorted(_SUBSET_LOSSES))
def test_losses_over_data_dependent_subsets_compile_once_per_bucket(name):
    loss_fn, subset_size = _SUBSET_LOSSES[name]
    eager, lazy, opts = _twins(lambda: [torch.nn.Embedding(30, 8), torch.nn.Linear(8, 5)],
                               torch.optim.SGD, lr=0.5)
    g = torch.Generator().manual_seed(3)
    sizes = []
    for _ in range(8):
        ids = torch.randint(0, 30, (24,), generator=g)
        y = torch.randint(0, 5, (24,), generator=g)
        for model, opt, dev in ((eager, opts[0], "cpu"), (lazy, opts[1], DEV)):
            loss = loss_fn(model(ids.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
            lr.mark_step()
            if dev == "cpu":
                want = loss.detach()
        assert_same(loss, want, rtol=1e-5, atol=1e-6, what=f"{name} loss")
        sizes.append(subset_size(y))
    for a, b in zip(lazy.parameters(), eager.parameters()):
        assert_same(a, b.detach(), rtol=1e-4, atol=1e-6, what=name)
    m = lr.metrics()
    assert len(set(sizes)) >= 3, sizes
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    # the forward; the step after the cut at its first size, then once per bucket
    buckets = {1 << (n - 1).bit_length() for n in sizes[1:] if n > 1}
    assert m["compiles"] <= 2 + len(buckets) + (1 in sizes), (sizes, m["recompile_reasons"])
    assert m["padded_executions"] >= 4


def test_boolean_mask_rows_of_another_count_are_torch_error_when_padded():
    src = torch.randn(4, 8, 3)
    lr.mark_step()
    lr.reset_metrics()
    g = torch.Generator().manual_seed(5)
    for k in range(3):
        a = torch.rand(4, 8, generator=g) < 0.4
        a[0, 0] = False    # padding rows written to row 0 would show
        b = a.clone()
        if k == 2:    # one row fewer than the mask written through selects
            b.view(-1)[int(a.view(-1).to(torch.uint8).argmax())] = False
            with pytest.raises(RuntimeError, match="shape mismatch"):
                torch.zeros(4, 8, 3)[a] = src[b]
            dst = torch.zeros(4, 8, 3).to(DEV)
            dst[a] = src.to(DEV)[b]
            with pytest.raises(RuntimeError, match="shape mismatch"):
                dst.cpu()
            break
        want = torch.full((4, 8, 3), 7.0)
        want[a] = src[b]
        dst = torch.full((4, 8, 3), 7.0).to(DEV)
        dst[a] = src.to(DEV)[b]
        assert_same(dst, want)
    m = lr.metrics()
    assert m["padded_executions"] >= 1 and not m["exact_compiles"], m["recompile_reasons"]


def _trimmed_step(model, ids, lengths, opt):
    """A batch padded to 32 trimmed to its longest sequence (``int(lengths.max())``, a
    value read every step), a masked mean over time, a classification loss."""
    T = int(lengths.max())
    ids = ids[:, :T]
    mask = (torch.arange(T, device=ids.device)[None, :] < lengths[:, None]).float()
    h = torch.tanh(model[1](model[0](ids)))
    pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    loss = F.cross_entropy(model[2](pooled), lengths % 3)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def test_a_slice_to_a_length_read_from_a_value_compiles_once_per_bucket():
    eager, lazy, opts = _twins(lambda: [torch.nn.Embedding(40, 8), torch.nn.Linear(8, 8),
                                        torch.nn.Linear(8, 3)], torch.optim.Adam, lr=0.01)
    g = torch.Generator().manual_seed(4)
    longest = []
    for _ in range(7):
        ids = torch.randint(0, 40, (4, 32), generator=g)
        lengths = torch.randint(3, 30, (4,), generator=g)
        longest.append(int(lengths.max()))
        want = _trimmed_step(eager, ids, lengths, opts[0])
        got = _trimmed_step(lazy, ids.to(DEV), lengths.to(DEV), opts[1])
        lr.mark_step()
        assert_same(got, want.detach(), rtol=1e-5, atol=1e-6, what=f"loss at {longest}")
    for a, b in zip(lazy.parameters(), eager.parameters()):
        assert_same(a, b.detach(), rtol=1e-4, atol=1e-6)
    m = lr.metrics()
    assert len(set(longest)) >= 4, longest
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert any("slice at node" in line for line in m["automatic_dynamic"]), m
    # the step at its first length, then once per bucket (16, 32) of the others
    buckets = {min(1 << (n - 1).bit_length(), 32) for n in longest[1:]}
    assert m["compiles"] - 1 <= 1 + len(buckets), (longest, m["recompile_reasons"])


def test_constants_made_like_a_padded_value_are_laid_out_as_it():
    """``ones_like(y)`` of a (4, T) value at T = 4: laid out as y, not guessed dim by dim
    (eight such constants, each read as (T, T) first, ran the guess withdrawals out: an
    exact compile at the square size)."""
    def f(t):
        y = t * 2
        acc = y
        for k in range(8):
            acc = acc + torch.ones_like(y).cumsum(1) * (k + 1)
        return acc
    lr.reset_metrics()
    for T in (4, 3):
        x = torch.randn(4, T)
        assert_same(f(lr.mark_dynamic(x.to(DEV), 1, "T")), f(x), rtol=1e-6, atol=1e-6)
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 1, m["recompile_reasons"]


def test_a_learnt_slice_of_a_short_buffer_follows_its_length_past_the_buffer():
    """Position ids sliced from a buffer of 64 (``pos[:, :T]``, a slice automatic dynamic
    learns) beside token ids whose length T a pad by 8 grows past T's bucket (60 + 8:
    ConvBERT's span convolution pads T to 128): the slice is padded as T is, past the
    buffer's end, so the two embeddings add (before: an exact compile at that length)."""
    torch.manual_seed(0)
    tok, pos = torch.nn.Embedding(50, 8), torch.nn.Embedding(64, 8)
    conv = torch.nn.Conv1d(8, 8, 9)
    positions = torch.arange(64)[None]

    def step(ids, tok, pos, conv, positions):
        h = tok(ids) + pos(positions[:, :ids.shape[1]])
        y = conv(torch.nn.functional.pad(h.transpose(1, 2), (4, 4))).transpose(1, 2)
        return (h + y).sin().mean()
    lazy = [copy.deepcopy(m).to(DEV) for m in (tok, pos, conv)]
    lazy_positions = positions.to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    for T in (36, 44, 60, 52):
        ids = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(T))
        want = step(ids, tok, pos, conv, positions)
        want.backward()
        got = step(ids.to(DEV), *lazy, lazy_positions)
        got.backward()
        lr.mark_step()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        for a, b in zip((tok, pos, conv), lazy):
            assert_grads_same(a, b, 1e-4, 1e-6, f"at {T}")
    m = lr.metrics()
    assert m["exact_compiles"] == {}, m["recompile_reasons"]


class _RelativeAttention(torch.nn.Module):
    """XLNet's attention over relative positions (transformers' ``XLNetRelativeAttention``
    in brief): sinusoids of the 2T positions ``arange(T, -T, -1)`` made on the host, the
    scores against them shifted by views ``(T, 2T) -> (2T, T)``, the first row dropped,
    viewed back and cut to T by ``index_select``."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.d, self.heads = d, heads
        self.q, self.k, self.v, self.r = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, h):   # (T, B, d)
        T, B = h.shape[:2]
        pos = torch.arange(T, -T, -1.0, dtype=torch.int64, device=h.device).float()
        freq = torch.arange(0, self.d, 2.0, dtype=torch.int64, device=h.device).float()
        angle = pos[:, None] / torch.pow(10000, freq / self.d)
        pe = torch.cat([angle.sin(), angle.cos()], -1)[:, None].expand(-1, B, -1)
        q, k, v = (f(h).view(T, B, self.heads, -1) for f in (self.q, self.k, self.v))
        kr = self.r(pe).view(2 * T, B, self.heads, -1)
        ac = torch.einsum("ibnd,jbnd->bnij", q, k)
        bd = torch.einsum("ibnd,jbnd->bnij", q, kr)
        b, n, i, j = bd.shape
        bd = bd.reshape(b, n, j, i)[:, :, 1:].reshape(b, n, i, j - 1)
        bd = torch.index_select(bd, 3, torch.arange(T, device=h.device, dtype=torch.long))
        p = ((ac + bd) * 0.3).softmax(3)
        return torch.einsum("bnij,jbnd->ibnd", p, v).reshape(T, B, self.d)


def _train_at_lengths(model, make_input, lengths, mark=None):
    """``model`` trained (SGD) beside its lazy twin on ``make_input(T)`` at each length,
    its dim ``mark`` marked dynamic where given (else learnt): every loss and the final
    weights eager torch's. Returns the metrics."""
    torch.manual_seed(0)
    lazy = copy.deepcopy(model).to(DEV)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, lazy)]
    lr.mark_step()
    lr.clear_cache()   # (no graph family learnt in another test)
    lr.reset_metrics()
    for T in lengths:
        h = make_input(T)
        xl = h.to(DEV) if mark is None else lr.mark_dynamic(h.to(DEV), mark, "T")
        losses = []
        for m, opt, x in ((model, opts[0], h), (lazy, opts[1], xl)):
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        lr.mark_step()
        assert_same(losses[1], losses[0].detach(), rtol=1e-5, atol=1e-7, what=f"at {T}")
    for a, b in zip(lazy.parameters(), model.parameters()):
        assert_same(a, b.detach(), rtol=1e-4, atol=1e-6)
    return lr.metrics()


def test_constants_whose_length_follows_an_input_are_derived_from_its_symbol():
    """XLNet's relative attention trained at lengths that change every step, nothing
    marked: automatic dynamic learns that the host-made positions ``arange(T, -T, -1)``
    have 2T elements and their gradient's zeros ``2T - 1`` (not sizes of their own), so
    they are laid out as ``2*T`` and ``2*T-1``, padded as T is, and the shifting views
    gather their true elements. Losses and weights eager torch's; one compile for the
    first length, one per bucket after (before: an exact compile at every length)."""
    torch.manual_seed(0)
    m = _train_at_lengths(_RelativeAttention(), lambda T: torch.randn(
        T, 3, 16, generator=torch.Generator().manual_seed(T)), (12, 20, 17, 30, 9))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 3, m["recompile_reasons"]   # 12; 20, 17, 30 (32); 9 (16)
    assert {"2*s0_0", "2*s0_0-1"} <= m["buckets"].keys(), m["buckets"]


class _PooledTokens(torch.nn.Module):
    """Funnel's token pooling in brief (transformers' ``FunnelAttentionStructure``):
    positions made on the host from Python lists whose length depends on T's parity
    (``arange(top, -T, -1)``: 2T elements at an even T, 2T+1 at an odd one), added to the
    tokens, then the first token put before them and every second one kept (``cat([h[:,
    :1], h], 1)[:, ::2]``, a step-2 slice of a padded dim)."""

    def __init__(self, d=8):
        super().__init__()
        self.freq = torch.nn.Parameter(torch.rand(d))
        self.lin = torch.nn.Linear(d, d)

    def forward(self, h):   # (B, T, d)
        T = h.shape[1]
        top = 2 * ((T + 1) // 2)
        pos = torch.arange(top, -T, -1, device=h.device)
        pe = (pos.float()[:, None] * self.freq).sin()
        h = self.lin(h + pe.index_select(0, torch.arange(T, device=h.device) + (T - 1)))
        # (a linear layer after the pooling would copy it at an even T only, where the
        # slice's elements are not evenly spaced: a graph of another structure)
        return torch.cat([h[:, :1], h], 1)[:, ::2].tanh()


def test_a_constant_whose_length_formula_changes_with_a_parity_is_fitted_again():
    """Funnel-style pooling trained at lengths that change every step: the positions'
    length, learnt as ``2*T`` from two even lengths, is ``2T+1`` at an odd one; the first
    odd length keeps it concrete (its own compile) and the next fits it again from the
    two (``Cx._refit``), so the odd lengths of a bucket share one executable after it, as
    the even ones do (before: one compile per odd length). Losses and weights eager
    torch's."""
    m = _train_at_lengths(_PooledTokens(), lambda T: torch.randn(
        2, T, 8, generator=torch.Generator().manual_seed(T)), (12, 20, 17, 30, 25, 23, 27, 19))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    # 12; 20 (learnt, bucket 32) and 30; 17 (odd, concrete); 25 (fitted again), 23, 27, 19
    assert m["compiles"] == 4, m["recompile_reasons"]
    assert {"2*s0_0", "2*s0_0+1"} <= m["buckets"].keys(), m["buckets"]


class _WidePositions(torch.nn.Module):
    """Funnel's position table in brief: sinusoids of the 4T positions ``arange(-2T, 2T)``
    made on the host, read at ``2T + arange(T)``, beside a batch of 4 whose tokens a
    linear layer flattens to 4T rows (a merged dim of the table's length)."""

    def __init__(self, d=8):
        super().__init__()
        self.freq = torch.nn.Parameter(torch.rand(d))
        self.lin = torch.nn.Linear(d, d)

    def forward(self, h):   # (4, T, d)
        T = h.shape[1]
        h = self.lin(h)
        pe = (torch.arange(-2 * T, 2 * T, device=h.device).float()[:, None]
              * self.freq).sin()
        return h + pe.index_select(0, torch.arange(T, device=h.device) + 2 * T)


def test_a_constant_as_long_as_a_batch_of_tokens_follows_the_length_as_a_multiple():
    """The table's 4T positions learnt as following T as ``4*T`` (a multiple), before the
    merged (4, T) rows of that size, which kept it concrete first: a compile at every
    length before, one per bucket now."""
    m = _train_at_lengths(_WidePositions(), lambda T: torch.randn(
        4, T, 8, generator=torch.Generator().manual_seed(T)), (12, 20, 17, 30, 25))
    assert m["exact_compiles"] == {}, m["recompile_reasons"]
    assert m["compiles"] == 2, m["recompile_reasons"]   # 12; 20 and after (bucket 32)
    assert "4*s0_0" in m["buckets"], m["buckets"]


class _CentredPositions(torch.nn.Module):
    """The Conformer's relative positions (ESPnet; transformers' Wav2Vec2-Conformer): a
    table of ``2 * 64 - 1`` positions (learnt here, so its gradient flows back), the
    window of 2T - 1 centred in it cut at each length (``pe[:, c - T + 1:c + T]``), scores
    against it shifted by the Conformer's views."""

    def __init__(self, d=16, heads=2, longest=64):
        super().__init__()
        self.d, self.heads = d, heads
        self.pe = torch.nn.Parameter(torch.randn(1, 2 * longest - 1, d) * 0.1)
        self.q, self.k, self.v, self.p = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, x):   # (B, T, d)
        B, T, _ = x.shape
        c = self.pe.size(1) // 2
        rel = self.pe[:, c - T + 1:c + T]
        q, k, v = (f(x).view(B, T, self.heads, -1).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        p = self.p(rel).view(1, -1, self.heads, self.d // self.heads).transpose(1, 2)
        bd = q @ p.transpose(-1, -2)                                   # (B, H, T, 2T-1)
        zero = torch.zeros((*bd.size()[:3], 1), dtype=bd.dtype, device=bd.device)
        bd = torch.cat([zero, bd], -1).view(B, self.heads, 2 * T, T)[:, :, 1:]
        bd = bd.view(B, self.heads, T, 2 * T - 1)[:, :, :, :T]
        a = ((q @ k.transpose(-1, -2) + bd) * 0.3).softmax(-1)
        return (a @ v).transpose(1, 2).reshape(B, T, self.d)


@pytest.mark.parametrize("marked", [False, True])
def test_a_window_centred_in_a_table_moves_and_grows_with_the_length(marked):
    """``pe[:, c - T + 1:c + T]``: a slice whose start and length both change with T.
    Automatic dynamic learns its length as ``2*T - 1`` and its start (read at run time),
    its gradient's write into the table alike: one compile per bucket, none exact
    (before: an exact compile at every length). With T marked, the first graph is still
    exact: nothing says yet that the window's bounds, Python ints, follow T."""
    torch.manual_seed(0)
    m = _train_at_lengths(_CentredPositions(), lambda T: torch.randn(
        2, T, 16, generator=torch.Generator().manual_seed(T)), (12, 20, 17, 30, 9),
        mark=1 if marked else None)
    assert m["compiles"] == 3, m["recompile_reasons"]
    reasons = m["recompile_reasons"][1:]
    assert all(r.startswith("padded") for r in reasons), m["recompile_reasons"]
    assert any("window at node" in line for line in m["automatic_dynamic"]), m
