"""embedding (max_norm's renorm, scale_grad_by_freq), embedding_bag and ctc_loss lowerings
against eager torch, at random sizes, forward and backward, in every argument variant the
lowerings take.

All cases are recorded first and computed by one barrier, so the whole file costs two XLA
compiles (forward values, then gradients), not one per case.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import lazy_runtime as lr
from lazy_runtime.backend import errors_cross_backward
from conftest import assert_same, to_lazy
from lowering_harness import BF16, F32, F64, I32, I64, Case, lowering_tests, rnd, shape

CASES: list = []
aten = torch.ops.aten
MODES = ("sum", "mean", "max")
MODE_ID = {"sum": 0, "mean": 1, "max": 2}


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


# ---- embedding ----------------------------------------------------------------------------


def renormed(**kw):
    """F.embedding with max_norm: its output and the weight it renormed in place (a copy,
    so that the gradient still reaches the input)."""
    def fn(w, i):
        w = w.clone()
        return F.embedding(i, w, **kw), w
    return fn


def lookup(g, r, dtype=F32, idx_dtype=I64, vocab=None, many=False):
    """[weight, indices]: a few rows, indices 1-D or 2-D (``many``: more of them than rows,
    so that most repeat)."""
    vocab = r.randint(3, 8) if vocab is None else vocab
    size = (r.randint(1, 3), r.randint(vocab, 2 * vocab)) if many else shape(r, None, 1, 7)
    return [rnd(g, (vocab, r.randint(1, 5)), dtype),
            torch.randint(0, vocab, size, generator=g).to(idx_dtype)]


# the rows named by the indices (repeats once) and longer than max_norm are scaled down
for _p in (2.0, 1.0, 3.0, float("inf")):
    case(f"embedding-max-norm-p{_p}", renormed(max_norm=2.0, norm_type=_p), lookup, grad=True)
case("embedding-max-norm-f64-padding", renormed(max_norm=1.5, padding_idx=1),
     lambda g, r: lookup(g, r, F64, vocab=6), grad=True)
case("embedding-max-norm-bf16", renormed(max_norm=2.0),
     lambda g, r: lookup(g, r, BF16), rtol=1e-2, atol=1e-2)
case("embedding-max-norm-int32", renormed(max_norm=1.0),
     lambda g, r: lookup(g, r, idx_dtype=I32), grad=True)
# scale_grad_by_freq: each gradient row divided by how often its index occurs
for _pad in (None, 0, -1):
    case(f"embedding-scale-grad-by-freq-padding-{_pad}",
         lambda w, i, pad=_pad: F.embedding(i, w, padding_idx=pad, scale_grad_by_freq=True),
         lambda g, r: lookup(g, r, vocab=5, many=True), grad=(0,))
case("embedding-scale-grad-by-freq-f64-int32",
     lambda w, i: F.embedding(i, w, scale_grad_by_freq=True),
     lambda g, r: lookup(g, r, F64, I32, many=True), grad=(0,))


# ---- embedding_bag ------------------------------------------------------------------------


def bags(g, r, n=None, nb=None, vocab=None, dim=None, dtype=F32, idx_dtype=I64,
         last=False, pad=None):
    """[weight, indices, offsets]: offsets start at 0 and never decrease (repeats and a
    cut at the end make empty bags); ``last``: the offsets end with len(indices)."""
    n = r.randint(0 if pad is None else 3, 14) if n is None else n
    nb = r.randint(1, 5) if nb is None else nb
    vocab = r.randint(2, 9) if vocab is None else vocab
    dim = r.randint(1, 5) if dim is None else dim
    offsets = [0] + sorted(r.randint(0, n) for _ in range(nb - 1)) + ([n] if last else [])
    indices = torch.randint(0, vocab, (n,), generator=g)
    if pad is not None and n:
        indices[torch.rand(n, generator=g) < 0.3] = pad % vocab
        indices[-1] = pad % vocab
    return [rnd(g, (vocab, dim), dtype), indices.to(idx_dtype),
            torch.tensor(offsets, dtype=idx_dtype)]


def all_outputs(op, mode, ilo=False, pad=-1):
    """All four outputs of the aten op (torch's backward reads them)."""
    return lambda w, i, o: op(w, i, o, False, MODE_ID[mode], False, None, ilo, pad)


EB = aten._embedding_bag.default
EB_FWD = aten._embedding_bag_forward_only.default

# F.embedding_bag: its values (``_embedding_bag_forward_only`` arrives, the weight needing no
# grad) and its gradients (``_embedding_bag``, then ``_embedding_bag_backward``)
for _m in MODES:
    for _dt in (F32, F64):
        case(f"eb-{_m}-{_dt}", lambda w, i, o, m=_m: F.embedding_bag(i, w, o, mode=m),
             lambda g, r, dt=_dt: bags(g, r, dtype=dt), grad=(0,))
    case(f"eb-2d-{_m}", lambda w, i, m=_m: F.embedding_bag(i, w, mode=m),
         lambda g, r: [rnd(g, (5, 3)), torch.randint(0, 5, shape(r, 2), generator=g)],
         grad=(0,))
    case(f"eb-padding-last-offset-{_m}",
         lambda w, i, o, m=_m: F.embedding_bag(i, w, o, mode=m, padding_idx=2,
                                               include_last_offset=True),
         lambda g, r: bags(g, r, pad=2, last=True), grad=(0,))
    case(f"eb-empty-bags-{_m}", lambda w, i, o, m=_m: F.embedding_bag(i, w, o, mode=m),
         lambda g, r: [rnd(g, (6, 3)), torch.tensor([1, 4, 4, 0, 5]),
                       torch.tensor([0, 0, 2, 2, 5, 5])], grad=(0,))
    # all four outputs, on torch's fast path (float32, no padding: sum mode skips
    # offset2bag) and off it (float64, padding: bag sizes less the padding)
    case(f"eb-aten-{_m}-f32", all_outputs(EB, _m), lambda g, r: bags(g, r))
    case(f"eb-aten-{_m}-f64-padding", all_outputs(EB, _m, pad=1),
         lambda g, r: bags(g, r, dtype=F64, pad=1))
    # forward_only sizes sum mode's bag_size like the offsets, the last one included
    case(f"eb-aten-forward-only-{_m}-last-offset", all_outputs(EB_FWD, _m, ilo=True),
         lambda g, r: bags(g, r, last=True))
    # torch's quirk (pytorch#89677) when the last offset stops short of the indices: its
    # fast path ends the last bag there, its other path (max mode, float64) does not
    case(f"eb-aten-short-last-offset-{_m}", all_outputs(EB, _m, ilo=True),
         lambda g, r: [rnd(g, (7, 3)), torch.randint(0, 7, (9,), generator=g),
                       torch.tensor([0, 2, 2, 6])])
case("eb-aten-short-last-offset-sum-f64", all_outputs(EB, "sum", ilo=True),
     lambda g, r: [rnd(g, (7, 3), F64), torch.randint(0, 7, (9,), generator=g),
                   torch.tensor([0, 2, 2, 6])])
case("eb-last-offset-sum", lambda w, i, o: F.embedding_bag(i, w, o, include_last_offset=True,
                                                           mode="sum"),
     lambda g, r: bags(g, r, last=True), grad=(0,))
case("eb-padding-negative-mean", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean",
                                                                 padding_idx=-1),
     lambda g, r: bags(g, r, vocab=6, pad=5), grad=(0,))
case("eb-no-indices-sum", lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"),
     lambda g, r: bags(g, r, n=0, nb=3), grad=(0,))
case("eb-aten-no-indices-max", all_outputs(EB, "max"), lambda g, r: bags(g, r, n=0, nb=2))
case("eb-int32-mean", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"),
     lambda g, r: bags(g, r, idx_dtype=I32), grad=(0,))
case("eb-aten-int32-offsets-max", all_outputs(EB, "max"),
     lambda g, r: (lambda b: [b[0], b[1].long(), b[2]])(bags(g, r, idx_dtype=I32)))
case("eb-max-ties", lambda w, i, o: aten._embedding_bag(w, i, o, False, 2),
     lambda g, r: [torch.randint(-1, 2, (5, 4), generator=g).float(),
                   torch.randint(0, 5, (12,), generator=g), torch.tensor([0, 3, 3, 8])],
     grad=(0,))
case("eb-max-nan", lambda w, i, o: aten._embedding_bag(w, i, o, False, 2),
     lambda g, r: [torch.tensor([[float("nan"), 1.0, -float("inf")], [2.0, float("nan"), 0.5],
                                 [-1.0, 3.0, float("nan")], [-float("inf")] * 3]),
                   torch.tensor([0, 1, 2, 1, 0, 3, 3, 2, 1]), torch.tensor([0, 2, 4, 6, 7])])
case("eb-mean-bf16", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"),
     lambda g, r: bags(g, r, dtype=BF16), rtol=2e-2, atol=2e-2)
case("eb-sum-larger", lambda w, i, o: F.embedding_bag(i, w, o, mode="sum", max_norm=None),
     lambda g, r: bags(g, r, n=20, nb=6, vocab=30, dim=8), grad=(0,))
case("eb-per-sample-weights",
     lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
     lambda g, r: (lambda b: b + [rnd(g, b[1].shape)])(bags(g, r)), grad=(0, 3))
case("eb-per-sample-weights-padding-last-f64",
     lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                        padding_idx=0, include_last_offset=True),
     lambda g, r: (lambda b: b + [rnd(g, b[1].shape, F64)])(
         bags(g, r, dtype=F64, pad=0, last=True)), grad=(0, 3))
case("eb-per-sample-weights-2d",
     lambda w, i, p: F.embedding_bag(i, w, mode="sum", per_sample_weights=p),
     lambda g, r: (lambda s: [rnd(g, (6, 3)), torch.randint(0, 6, s, generator=g),
                              rnd(g, s)])(shape(r, 2)), grad=(0, 2))
case("eb-aten-per-sample-weights", lambda w, i, o, p: aten._embedding_bag(
    w, i, o, False, 0, False, p, False, -1),
     lambda g, r: (lambda b: b + [rnd(g, b[1].shape)])(bags(g, r)))


# ---- ctc_loss -------------------------------------------------------------------------------


def ctc(g, r, T=None, B=None, C=None, S=None, concat=False, dtype=F32, blank=0,
        impossible=False, raw=False):
    """[log_probs (or logits if ``raw``), targets] and the lengths (lists): targets avoid
    the blank; input lengths leave room for every target (unless ``impossible``)."""
    T = r.randint(6, 12) if T is None else T
    B = r.randint(1, 4) if B is None else B
    C = r.randint(3, 7) if C is None else C
    S = r.randint(1, 4) if S is None else S
    tl = [r.randint(0, S) for _ in range(B)]
    tl[0] = S
    labels = [c for c in range(C) if c != blank % C]
    tg = torch.tensor([[labels[r.randrange(len(labels))] for _ in range(S)] for _ in range(B)],
                      dtype=I64)
    # a repeated label needs a blank between: at most 2 * tl steps
    il = [r.randint(min(2 * t + 1, T), T) for t in tl]
    il[-1] = T
    if impossible:
        il[0], tg[0, :2] = 1, labels[0]
        tl[0] = max(tl[0], 2)
    x = rnd(g, (T, B, C), dtype)
    lp = x if raw else x.log_softmax(2)
    targets = torch.cat([tg[b, :tl[b]] for b in range(B)]) if concat else tg
    return [lp, targets], il, tl


def ctc_case(name, make, reduction="mean", zero_infinity=False, blank=0, tensors=False,
             logits=False, **kw):
    """F.ctc_loss with the lengths ``make`` draws (lists, or tensors if ``tensors``);
    ``logits``: its first tensor goes through log_softmax first."""
    store = {}   # the lengths of the latest draw (made just before each call)

    def mk(g, r):
        xs, il, tl = make(g, r)
        store["il"], store["tl"] = il, tl
        if tensors:
            return xs + [torch.tensor(il), torch.tensor(tl)]
        return xs

    def fn(lp, tg, *lens):
        il, tl = lens if lens else (store["il"], store["tl"])
        lp = lp.log_softmax(2) if logits else lp
        return F.ctc_loss(lp, tg, il, tl, blank=blank, reduction=reduction,
                          zero_infinity=zero_infinity)
    case(name, fn, mk, grad=(0,), **kw)


# (reductions: none here, mean (the default) and sum below)
ctc_case("ctc-none", lambda g, r: ctc(g, r, dtype=F64), reduction="none")
ctc_case("ctc-float32", lambda g, r: ctc(g, r), rtol=1e-4, atol=1e-5)
ctc_case("ctc-concat-sum", lambda g, r: ctc(g, r, concat=True, dtype=F64), reduction="sum")
ctc_case("ctc-tensor-lengths-none", lambda g, r: ctc(g, r, dtype=F64), reduction="none",
         tensors=True)
ctc_case("ctc-tensor-lengths-concat-mean", lambda g, r: ctc(g, r, concat=True),
         tensors=True, rtol=1e-4, atol=1e-5)
for _zi in (False, True):   # an input too short for its target: an infinite loss
    ctc_case(f"ctc-impossible-zero-inf-{_zi}",
             lambda g, r: ctc(g, r, B=3, S=3, dtype=F64, impossible=True),
             reduction="none", zero_infinity=_zi)
ctc_case("ctc-impossible-tensor-lengths-zero-inf-mean",
         lambda g, r: ctc(g, r, B=2, S=2, dtype=F64, impossible=True, concat=True),
         zero_infinity=True, tensors=True)
ctc_case("ctc-blank-last", lambda g, r: ctc(g, r, C=5, blank=4, dtype=F64), blank=4)
ctc_case("ctc-blank-middle-tensor", lambda g, r: ctc(g, r, C=6, blank=2, dtype=F64,
                                                     concat=True), blank=2, tensors=True)
ctc_case("ctc-empty-targets", lambda g, r: ctc(g, r, B=3, S=0, dtype=F64), reduction="none")
# gradients w.r.t. arbitrary log_probs (torch's formula has an exp(lp) term), and through
# log_softmax (where that term cancels)
ctc_case("ctc-raw-log-probs", lambda g, r: ctc(g, r, dtype=F64, raw=True), reduction="none")
ctc_case("ctc-raw-log-probs-concat", lambda g, r: ctc(g, r, dtype=F64, raw=True, concat=True),
         reduction="sum", tensors=True)
ctc_case("ctc-logits", lambda g, r: ctc(g, r, dtype=F64, raw=True), logits=True)
ctc_case("ctc-longer", lambda g, r: ctc(g, r, T=40, B=5, C=12, S=9), reduction="mean",
         rtol=1e-4, atol=1e-5)


def _ctc_raw(concat, tensors):
    """aten._ctc_loss's two outputs; log_alpha only where torch sets it (t < input
    length, s <= 2 * target length)."""
    store = {}

    def mk(g, r):
        xs, il, tl = ctc(g, r, dtype=F64, concat=concat)
        store["il"], store["tl"] = il, tl
        return xs + ([torch.tensor(il), torch.tensor(tl)] if tensors else [])

    def fn(lp, tg, *lens):
        il, tl = lens if lens else (store["il"], store["tl"])
        nll, la = aten._ctc_loss(lp, tg, il, tl, 0, False)
        T, S = la.shape[1], la.shape[2]
        ilv = torch.tensor(store["il"]).to(la.device)
        tlv = torch.tensor(store["tl"]).to(la.device)
        keep = (torch.arange(T).to(la.device)[None, :, None] < ilv[:, None, None]) & (
            torch.arange(S).to(la.device)[None, None, :] <= 2 * tlv[:, None, None])
        return nll, torch.where(keep, la, torch.zeros((), dtype=la.dtype).to(la.device))
    return fn, mk


for _concat in (False, True):
    _fn, _mk = _ctc_raw(_concat, tensors=_concat)
    case(f"ctc-aten-outputs-concat-{_concat}", _fn, _mk)


# ---- fractional max pooling: windows from explicit samples, torch's CPU pick ------------------


def fractional(n, kernel, shrink=0, ratio=None):
    """F.fractional_max_pool{n}d with the case's samples: ``shrink`` windows fewer than fit
    along each dim (at least one), or ``output_ratio``."""
    pool = (F.fractional_max_pool2d, F.fractional_max_pool3d)[n - 2]

    def fn(x, u):
        if ratio is not None:
            return pool(x, kernel, output_ratio=ratio, _random_samples=u, return_indices=True)
        out = tuple(max(1, s - kernel + 1 - shrink) for s in x.shape[-n:])
        return pool(x, kernel, out, _random_samples=u, return_indices=True)
    return fn


def pool_input(n, kernel, dtype=F32, batched=True, ties=False, special=False, extra=0):
    """[x, samples]: random spatial sizes from ``kernel`` up; ``ties``: small integers
    (windows with equal maxima); ``special``: NaN and -inf entries, and all -inf windows;
    ``extra``: rows of samples beyond the batch (torch ignores them)."""
    def make(g, r):
        lead = (r.randint(1, 3), r.randint(1, 3))
        hi = 9 if n == 2 else 6
        x = rnd(g, (lead if batched else lead[1:]) + tuple(r.randint(kernel + 1, hi)
                                                          for _ in range(n)), dtype)
        if ties:
            x = x.round()
        if special:
            x = torch.where(x > 2, float("nan"), torch.where(x < -1, float("-inf"), x))
        u = torch.rand((lead[0] + extra,) + lead[1:] + (n,), generator=g, dtype=F64)
        return [x, u.to(dtype) if batched else u[:1 + extra].to(dtype)]
    return make


for _n in (2, 3):
    for _dt in (F32, F64):
        _t = str(_dt)[6:]
        case(f"fractional{_n}d-{_t}", fractional(_n, 2, shrink=1), pool_input(_n, 2, _dt),
             grad=(0,))
        # every window that fits (in 3-D, torch's check is strict: one fewer)
        case(f"fractional{_n}d-k3-most-{_t}", fractional(_n, 3, shrink=_n - 2),
             pool_input(_n, 3, _dt), grad=(0,))
    case(f"fractional{_n}d-ties", fractional(_n, 2, shrink=2),
         pool_input(_n, 2, ties=True), grad=(0,))
    case(f"fractional{_n}d-nan-inf", fractional(_n, 2, shrink=1),
         pool_input(_n, 2, special=True))
    case(f"fractional{_n}d-unbatched-k1", fractional(_n, 1, shrink=1),
         pool_input(_n, 1, batched=False), grad=(0,))
    case(f"fractional{_n}d-ratio", fractional(_n, 2, ratio=(0.5,) * _n), pool_input(_n, 2),
         grad=(0,))
    for _b in (True, False):
        case(f"fractional{_n}d-extra-samples-{'batched' if _b else 'unbatched'}",
             fractional(_n, 2, shrink=1), pool_input(_n, 2, batched=_b, extra=2), grad=(0,))
    case(f"fractional{_n}d-bf16", fractional(_n, 2, shrink=1), pool_input(_n, 2, BF16))


(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


@pytest.mark.parametrize("n", [2, 3])
def test_fractional_max_pool_module_draws_from_the_lazy_stream(n):
    """The module draws its samples with ``torch.rand`` on the input's device: the lazy
    random stream (no fallback). The same draw, repeated after reseeding, and handed to
    eager torch gives the module's output and gradient."""
    module = (torch.nn.FractionalMaxPool2d, torch.nn.FractionalMaxPool3d)[n - 2]
    lr.clear_cache()   # (a padded draw differs from this one: no automatic dynamic)
    x = torch.randn((2, 3) + (7,) * n)
    xl = x.to(lr.device()).requires_grad_()
    lr.manual_seed(5)
    lr.reset_metrics()
    got = module(2, output_ratio=0.6)(xl)
    got.sin().sum().backward()
    lr.mark_step()
    assert lr.metrics()["fallback_ops"] == {}
    lr.manual_seed(5)
    u = torch.rand(2, 3, n, device=lr.device()).cpu()
    x.requires_grad_()
    want = module(2, output_ratio=0.6, _random_samples=u)(x)
    want.sin().sum().backward()
    assert_same(got, want.detach())
    assert_same(xl.grad, x.grad)


# ---- declined variants: torch's result (or error) through the fallback -----------------------


def _error_or_value(fn, xs):
    try:
        return fn(*xs)
    except Exception as e:  # the error itself is what is compared
        return type(e), str(e)


DECLINED = {
    # the weights' gradient with scale_grad_by_freq: torch's CPU kernel scales by an oddly
    # indexed count; the forward is lowered, the backward falls back
    "eb-scale-grad-by-freq": "aten._embedding_bag_backward.default",
    "ctc-input-length-too-long": "aten._ctc_loss.default",
    "ctc-half": "aten._ctc_loss.default",
    "eb-offsets-2d": "aten._embedding_bag_forward_only.default",
}


def _declined(name):
    w = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    i, o = torch.tensor([1, 1, 2, 3, 1, 5]), torch.tensor([0, 3])
    lp = torch.randn(5, 2, 4).log_softmax(2)
    tg = torch.tensor([[1, 2], [3, 3]])
    if name == "eb-scale-grad-by-freq":
        def fn(w, i, o):
            w = w.detach().requires_grad_()
            F.embedding_bag(i, w, o, mode="sum", scale_grad_by_freq=True).sum().backward()
            return w.grad
        return fn, [w, i, o]
    if name == "ctc-input-length-too-long":
        return (lambda lp, tg: F.ctc_loss(lp, tg, [6, 5], [2, 2])), [lp, tg]
    if name == "ctc-half":
        return (lambda lp, tg: aten._ctc_loss(lp, tg, [5, 5], [2, 2])), [lp.half(), tg]
    return (lambda w, i, o: aten._embedding_bag_forward_only(w, i, o)), [w, i, o[:, None]]


@pytest.mark.parametrize("name", list(DECLINED))
def test_declined_variants_fall_back_to_torch(name):
    fn, xs = _declined(name)
    want = _error_or_value(fn, xs)
    lr.reset_metrics()
    got = _error_or_value(fn, to_lazy(xs))
    lr.mark_step()
    if isinstance(want, tuple) and isinstance(want[0], type):
        assert got == want
    else:
        assert_same(got, want)
    assert DECLINED[name] in lr.metrics()["fallback_ops"]


def test_sparse_embedding_bag_gradient_is_a_clear_error():
    w = torch.randn(6, 3).to(lr.device()).requires_grad_()
    i, o = torch.tensor([1, 2, 3]).to(lr.device()), torch.tensor([0, 2]).to(lr.device())
    loss = F.embedding_bag(i, w, o, sparse=True).sum()
    if errors_cross_backward():   # the C++ device guard: raised by backward(), as on the CPU
        with pytest.raises(lr.UnsupportedOperation, match="sparse=True"):
            loss.backward()
    else:   # torch's Python guard: kept for the next barrier (test_errors.py)
        loss.backward()
        with pytest.raises(lr.LazyRuntimeError, match="sparse=True"):
            lr.mark_step()


# ---- modules in a training step -------------------------------------------------------------


class _Tiny(torch.nn.Module):
    """EmbeddingBag features of each frame, a linear map to classes, log_softmax."""

    def __init__(self):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(20, 8, mode="mean", padding_idx=0)
        self.out = torch.nn.Linear(8, 6)

    def forward(self, tokens, offsets, T, B):
        h = self.bag(tokens, offsets)                      # [T * B, 8]
        return self.out(h).view(T, B, 6).log_softmax(2)


def _train(model, dev, batches, T=7, B=3):
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    losses = []
    for tokens, offsets, targets, il, tl in batches:
        opt.zero_grad()
        lp = model(tokens.to(dev), offsets.to(dev), T, B)
        loss = loss_fn(lp, targets.to(dev), il.to(dev), tl.to(dev))
        loss.backward()
        opt.step()
        if dev != "cpu":
            lr.mark_step()
        losses.append(loss.detach().cpu())
    return torch.stack(losses), {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_embedding_bag_and_ctc_loss_train_like_eager():
    T, B = 7, 3
    g = torch.Generator().manual_seed(3)
    batches = []
    for _ in range(3):
        n = 40
        tokens = torch.randint(0, 20, (n,), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=I64),
                             torch.sort(torch.randint(0, n + 1, (T * B - 1,), generator=g))[0]])
        targets = torch.randint(1, 6, (B, 3), generator=g)
        batches.append((tokens, offsets, targets, torch.tensor([7, 6, 7]),
                        torch.tensor([3, 2, 1])))
    torch.manual_seed(0)
    model = _Tiny()
    eager = copy.deepcopy(model)
    want_losses, want_state = _train(eager, "cpu", batches)
    lr.reset_metrics()
    got_losses, got_state = _train(model, lr.device(), batches)
    assert lr.metrics()["fallback_ops"] == {}
    assert_same(got_losses, want_losses, 1e-5, 1e-5, "losses")
    for k in want_state:
        assert_same(got_state[k], want_state[k], 1e-5, 1e-5, k)


def test_embedding_max_norm_and_scale_grad_by_freq_train_like_eager():
    """nn.Embedding(max_norm=..., scale_grad_by_freq=True, padding_idx=0): the renorm in
    place on the weight each step and the scaled gradient, lowered."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(12, 4, max_norm=1.0, scale_grad_by_freq=True, padding_idx=0),
        torch.nn.Linear(4, 3))
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 12, (3, 8), generator=g) for _ in range(3)]
    states, losses = [], []
    lr.reset_metrics()
    for dev in ("cpu", lr.device()):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        for tokens in batches:
            loss = m(tokens.to(dev)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().cpu())
        states.append({k: v.detach().cpu() for k, v in m.state_dict().items()})
    lr.mark_step()
    assert lr.metrics()["fallback_ops"] == {}
    assert_same(losses[3:], losses[:3], 1e-5, 1e-6, "losses")
    for k in states[0]:
        assert_same(states[1][k], states[0][k], 1e-5, 1e-6, k)
