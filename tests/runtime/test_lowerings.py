"""Every lowering against eager torch, at random sizes and several dtypes.

All cases of a module are recorded first and computed by one barrier, so the whole file
costs two XLA compiles (forward values, then gradients), not one per case.
"""

import torch
import torch.nn.functional as F

from lowering_harness import (BF16, BOOL, F16, F32, F64, I32, I64, U8, Case, lowering_tests, rnd,
                              shape)

CASES: list = []


def case(name, fn, make, **kw):
    CASES.append(Case(name, fn, make, **kw))


# ---- elementwise: unary over dtypes ----------------------------------------------------
UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 1), "exp": torch.exp, "expm1": torch.expm1,
    "log": lambda x: torch.log(x.abs() + 1), "log1p": lambda x: torch.log1p(x.abs()),
    "log2": lambda x: torch.log2(x.abs() + 1), "sin": torch.sin, "cos": torch.cos,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf, "atan": torch.atan,
    "reciprocal": lambda x: torch.reciprocal(x.abs() + 1), "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "relu": torch.relu,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "mish": F.mish, "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "elu": F.elu,
    "softplus": F.softplus, "hardtanh": F.hardtanh, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "isnan": torch.isnan, "square": torch.square,
    "hardshrink": lambda x: F.hardshrink(x, 0.7), "softshrink": lambda x: F.softshrink(x, 0.4),
    "clamp": lambda x: torch.clamp(x, -1.5, 0.5), "clamp_min": lambda x: x.clamp(min=0.25),
    "pow2": lambda x: x ** 2, "pow_half": lambda x: x.abs() ** 0.5, "rpow": lambda x: 2 ** x,
}
for _name, _fn in UNARY.items():
    for _dt in (F32, F64):
        case(f"{_name}-{_dt}", _fn, lambda g, r, dt=_dt: [rnd(g, shape(r), dt)],
             grad=_name not in ("isnan", "sign", "floor", "ceil", "round", "trunc"))
for _name in ("neg", "abs", "sign", "relu", "square", "clamp"):
    case(f"{_name}-int64", UNARY[_name], lambda g, r: [rnd(g, shape(r), I64)])
# poles and special values (digamma at +-0 once gave NaN where torch gives -+inf)
_POLES = [0.0, -0.0, -1.0, -2.0, 1.0, -1.5, 0.5, float("inf"), -float("inf"), float("nan")]
for _name, _fn in (("digamma", torch.digamma), ("lgamma", torch.lgamma)):
    case(f"{_name}-poles", _fn, lambda g, r: [torch.tensor(_POLES, dtype=F64)])
    case(f"{_name}-int", _fn, lambda g, r: [rnd(g, (12,), I64, -3, 6)])
# integer powers with negative exponents: 1 / a**n truncated, as torch (XLA gave garbage)
case("pow-int-negative-exponents", lambda a, e: (a ** e, 3 ** e, (-1) ** e, a ** 3),
     lambda g, r: [torch.tensor([6, 2, -1, -1, 1, 0, 3, -2]), torch.tensor([-8, -1, -3, -2, -5,
                                                                           -1, 2, 3])])
case("native_dropout_backward-int", lambda g, m: torch.ops.aten.native_dropout_backward(
    g, m, 2.0), lambda g, r: [rnd(g, (3, 4), I64), rnd(g, (3, 4), BOOL)])
case("sign-bool", lambda x: (torch.sign(x), torch.sgn(x)), lambda g, r: [rnd(g, (6,), BOOL)])
# sgn's gradient of a real input is an efficient zero tensor (once no lazy kernel made one)
case("sgn-grad", lambda x: torch.sgn(x) * 3 + x, lambda g, r: [rnd(g, shape(r), F64)],
     grad=True)
for _name in ("exp", "sqrt", "sigmoid"):  # integer inputs promote to float
    case(f"{_name}-int-to-float", UNARY[_name], lambda g, r: [rnd(g, shape(r), I32)])
for _name in ("relu", "gelu", "exp", "tanh"):
    case(f"{_name}-bf16", UNARY[_name], lambda g, r: [rnd(g, shape(r), BF16)], rtol=1e-2,
         atol=1e-2)
    case(f"{_name}-f16", UNARY[_name], lambda g, r: [rnd(g, shape(r), F16)], rtol=1e-3,
         atol=1e-3)

# ---- elementwise: binary with broadcasting, scalars and promotion ---------------------


def bcast_pair(g, r, da=F32, db=F32):
    s = shape(r, r.randint(1, 3))
    t = tuple(1 if r.random() < 0.3 else d for d in s)[r.randint(0, len(s) - 1):]
    return [rnd(g, s, da), rnd(g, t, db)]


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul,
    "div": lambda a, b: a / (b.abs() + 0.5), "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=0.5), "maximum": torch.maximum,
    "minimum": torch.minimum, "atan2": torch.atan2, "pow": lambda a, b: a.abs() ** b,
    "eq": torch.eq, "lt": torch.lt, "ge": torch.ge, "ne": torch.ne,
    "where": lambda a, b: torch.where(a > 0, a, b), "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "lerp_hi": lambda a, b: torch.lerp(a, b, 0.8),
    "floor_div": lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"),
    "trunc_div": lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="trunc"),
    "remainder": lambda a, b: torch.remainder(a, b.abs() + 1),
    "fmod": lambda a, b: torch.fmod(a, b.abs() + 1),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, -7.5),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.3),
    "addcdiv": lambda a, b: torch.addcdiv(a, a, b.abs() + 1, value=-0.7),
    "clamp_t": lambda a, b: torch.clamp(a, min=b - 1, max=b + 1),
}
for _name, _fn in BINARY.items():
    for _dt in (F32, F64):
        case(f"{_name}-{_dt}", _fn, lambda g, r, dt=_dt: bcast_pair(g, r, dt, dt),
             grad=_name in ("add", "sub", "mul", "div", "maximum", "lerp", "where",
                            "addcmul", "addcdiv", "atan2"))
for _name in ("add", "sub", "mul", "maximum", "eq", "lt", "floor_div", "trunc_div",
              "remainder", "where"):
    case(f"{_name}-int64", BINARY[_name], lambda g, r: bcast_pair(g, r, I64, I64))
case("promote-int32-int64", torch.add, lambda g, r: bcast_pair(g, r, I32, I64))
case("promote-int-float", torch.mul, lambda g, r: bcast_pair(g, r, I64, F32))
case("promote-f32-f64", torch.add, lambda g, r: bcast_pair(g, r, F32, F64))
case("promote-bool-int", torch.add, lambda g, r: bcast_pair(g, r, BOOL, I32))
case("promote-u8-bool", torch.mul, lambda g, r: bcast_pair(g, r, U8, BOOL))
case("int-true-div", torch.div, lambda g, r: [rnd(g, (4,), I64), rnd(g, (4,), I64, 1, 5)])
case("int-times-float-scalar", lambda a: a * 2.5, lambda g, r: [rnd(g, shape(r), I64)])
case("float-plus-int-scalar", lambda a: a + 3, lambda g, r: [rnd(g, shape(r), F32)])
case("f32-plus-f64-0d", lambda a, b: a + b, lambda g, r: [rnd(g, (3, 2), F32), rnd(g, (), F64)])
case("bool-ops", lambda a, b: (a & b) | (a ^ ~b), lambda g, r: bcast_pair(g, r, BOOL, BOOL))
case("logical", lambda a, b: torch.logical_and(a > 0, b > 0) ^ torch.logical_not(b < 1),
     lambda g, r: bcast_pair(g, r))
case("rsub", lambda a: 1 - a, lambda g, r: [rnd(g, shape(r))], grad=True)
case("scalar-div", lambda a: 3.0 / (a.abs() + 1), lambda g, r: [rnd(g, shape(r))], grad=True)
case("int64-exact", lambda a: a * 3 + (2 ** 40 + 1),
     lambda g, r: [torch.tensor([2 ** 41 + 7, -5, 2 ** 52 + 3])])
case("f64-exact", lambda a: a / 3 + 1e-12, lambda g, r: [rnd(g, (5,), F64)])
case("nan-propagation", lambda a: torch.maximum(a, a * 0) + torch.clamp(a, 0, 1),
     lambda g, r: [torch.tensor([float("nan"), 1.0, -2.0])])
case("to-dtype", lambda a: (a.to(torch.int32), a.to(torch.float64), a.to(BOOL), a.to(BF16)),
     lambda g, r: [rnd(g, (2, 5), F32)])
case("bf16-math", lambda a, b: (a * b + a).sum(), lambda g, r: bcast_pair(g, r, BF16, BF16),
     rtol=2e-2, atol=5e-2)

# ---- reductions -------------------------------------------------------------------------


def red_input(dt=F32):
    return lambda g, r: [rnd(g, shape(r, 3, 2, 6), dt)]


REDUCTIONS = {
    "sum": lambda x: x.sum(), "sum_dim": lambda x: x.sum(1), "sum_keep": lambda x: x.sum((0, 2),
                                                                                         True),
    "mean": lambda x: x.mean(), "mean_dim": lambda x: x.mean(-1, keepdim=True),
    "prod": lambda x: x.prod(1), "amax": lambda x: x.amax(0), "amin": lambda x: x.amin((1, 2)),
    "max": lambda x: x.max(), "max_dim": lambda x: x.max(1), "min_dim": lambda x: x.min(2, True),
    "argmax": lambda x: x.argmax(1), "argmin": lambda x: x.argmin(), "var": lambda x: x.var(1),
    "std": lambda x: x.std((0, 1), correction=0), "logsumexp": lambda x: x.logsumexp(1),
    "cumsum": lambda x: x.cumsum(1), "norm": lambda x: x.norm(), "norm1": lambda x: x.norm(1, 2),
    "any": lambda x: (x > 1).any(1), "all": lambda x: (x > -2).all(),
    "softmax": lambda x: x.softmax(1), "log_softmax": lambda x: x.log_softmax(-1),
}
for _name, _fn in REDUCTIONS.items():
    case(f"{_name}", _fn, red_input(), rtol=1e-5, atol=1e-5,
         grad=_name not in ("argmax", "argmin", "any", "all", "max_dim", "min_dim"))
for _name in ("sum", "sum_dim", "prod", "amax", "max_dim", "argmax", "cumsum"):
    case(f"{_name}-int64", REDUCTIONS[_name], red_input(I64))
case("sum-bool", lambda x: (x > 0).sum(1), red_input())


def _with_ties_and_nans(dt):
    """Few distinct values (ties), and for floats NaN, -0.0 and 0.0 among them."""
    def make(g, r):
        x = rnd(g, shape(r, 3, 2, 7), dt, -2, 3)
        if dt.is_floating_point:
            x = x.round()
            x[rnd(g, x.shape, BOOL) & rnd(g, x.shape, BOOL)] = float("nan")
            x[x == 0] = torch.where(rnd(g, x[x == 0].shape, BOOL), -0.0, 0.0).to(dt)
        return [x]
    return make


# ops whose torch decompositions reach prims (where, var, broadcast_in_dim): lowered now
case("var_mean", lambda x: torch.var_mean(x, 1), red_input(), grad=True)
case("var_mean-keep-f64", lambda x: torch.var_mean(x, (0, 2), correction=0, keepdim=True),
     red_input(F64), grad=True)
case("group_norm", lambda x: F.group_norm(x, 2), lambda g, r: [rnd(g, (2, 4, 3, 3))], grad=True)
case("diag", lambda x: torch.diag(x[0, 0]), red_input(), grad=True)
case("diag_embed", lambda x: torch.diag_embed(x, 1), red_input(), grad=True)
case("sinc", torch.sinc, lambda g, r: [torch.cat([rnd(g, (5,)), torch.zeros(1)])], grad=True)
case("bucketize", lambda x, b: torch.bucketize(x, b.sort()[0], right=True),
     lambda g, r: [rnd(g, shape(r)).round(), rnd(g, (5,)).round()])
# (every mode and its backward: test_lowerings_sampling.py)
case("grid_sample", lambda img, grid: F.grid_sample(img, grid.tanh(), align_corners=False),
     lambda g, r: [rnd(g, (2, 3, 5, 4)), rnd(g, (2, 3, 4, 2))], rtol=1e-4, atol=1e-5)
# shifts: torch defines every amount (a negative one or one past the width: 0 or the sign)
for _dt in (I64, I32, torch.uint8):
    case(f"lshift-{_dt}", lambda a, b: a << b, lambda g, r, dt=_dt: [
        rnd(g, (12,), dt, 0 if dt == torch.uint8 else -50, 50),
        rnd(g, (12,), dt, 0 if dt == torch.uint8 else -3, 70 if dt != torch.uint8 else 12)])
    case(f"rshift-{_dt}", lambda a, b: torch.bitwise_right_shift(a, b), lambda g, r, dt=_dt: [
        rnd(g, (12,), dt, 0 if dt == torch.uint8 else -50, 50),
        rnd(g, (12,), dt, 0 if dt == torch.uint8 else -3, 70 if dt != torch.uint8 else 12)])
case("lshift-scalar-bool", lambda a: (a > 0) << 3, red_input())

# sorts: stable ones against torch's stable sort, with ties (NaN the largest, -0.0 == 0.0)
for _dt in (F32, F64, I64, I32, BOOL):
    for _desc in (False, True):
        case(f"sort-stable-{'desc' if _desc else 'asc'}-{_dt}",
             lambda x, d=_desc: torch.sort(x, dim=1, descending=d, stable=True),
             _with_ties_and_nans(_dt))
case("argsort-stable-desc-int64", lambda x: torch.argsort(x, dim=-1, descending=True, stable=True),
     _with_ties_and_nans(I64))
# unstable sort and topk: distinct values (ties may come in any order there), with grads
case("sort", lambda x: x.sort(0), red_input(F64), grad=True)
case("sort-desc-last", lambda x: x.sort(descending=True), red_input(), grad=True)
case("argsort", lambda x: x.argsort(1), red_input())
case("topk", lambda x: x.topk(2, dim=1), red_input(F64), grad=True)
case("topk-smallest-last", lambda x: x.topk(1, largest=False), red_input(), grad=True)
case("topk-int64", lambda x: x.topk(2, dim=0),
     lambda g, r: [torch.randperm(60, generator=g)[:12 * r.randint(2, 4)].reshape(-1, 3, 4)])
case("mean-f64", lambda x: x.mean((0, 2)), red_input(F64))
case("sum-bf16", lambda x: x.sum(1), red_input(BF16), rtol=1e-2, atol=1e-1)

# ---- matrix products -----------------------------------------------------------------------


def mats(*shapes, dt=F32):
    return lambda g, r: [rnd(g, s, dt) for s in shapes]


case("mm", torch.mm, mats((3, 4), (4, 5)), grad=True)
case("bmm", torch.bmm, mats((2, 3, 4), (2, 4, 5)), grad=True)
case("matmul-bcast", torch.matmul, mats((2, 1, 3, 4), (3, 4, 2)), grad=True)
case("matmul-vec", torch.matmul, mats((3, 4), (4,)), grad=True)
case("dot", torch.dot, mats((5,), (5,)))
case("addmm", lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0),
     mats((5,), (3, 4), (4, 5)), grad=True)
case("linear", F.linear, mats((2, 3, 4), (5, 4), (5,)), grad=True)
case("einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), mats((2, 3, 4), (2, 4, 2)))
case("mm-f64", torch.mm, mats((3, 4), (4, 5), dt=F64))
case("mm-int", torch.mm, mats((3, 4), (4, 5), dt=I64))
# integer kernels take float alpha/beta converted to the integer type (0.6 -> 0, -1.5 -> -1)
for _beta, _alpha in ((0.2, 0.6), (-1.5, 2.7), (3, 2)):
    case(f"addmm-int-{_beta}-{_alpha}",
         lambda x, a, b, be=_beta, al=_alpha: torch.addmm(x, a, b, beta=be, alpha=al),
         mats((5,), (3, 4), (4, 5), dt=I64))
    case(f"addmv-int32-{_beta}-{_alpha}",
         lambda x, a, b, be=_beta, al=_alpha: torch.addmv(x, a, b, beta=be, alpha=al),
         mats((3,), (3, 4), (4,), dt=I32))
    case(f"baddbmm-int-{_beta}-{_alpha}",
         lambda x, a, b, be=_beta, al=_alpha: torch.baddbmm(x, a, b, beta=be, alpha=al),
         mats((2, 3, 5), (2, 3, 4), (2, 4, 5), dt=I64))
case("mm-bf16", torch.mm, mats((8, 16), (16, 4), dt=BF16), rtol=2e-2, atol=5e-2)


def grouped(kind):
    """Inputs of ``torch._grouped_mm`` (a mixture-of-experts layer's product): random group
    sizes, empty ones included, covering the ragged dim (torch leaves positions past the
    last offset undefined); sizes of 4s (torch's CPU kernel wants 16-byte strides)."""
    def make(g, r):
        sizes = [r.choice((0, 1, 3, 4, 6)) for _ in range(r.randint(1, 3))]
        sizes[-1] += -sum(sizes) % 4 or (4 if not sum(sizes) else 0)
        offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
        n, k, m = 4 * r.randint(1, 3), 4 * r.randint(1, 3), r.randint(1, 5)
        total, G = int(offs[-1]), len(sizes)
        a, b = {"2d3d": ((total, k), (G, k, n)), "3d2d": ((G, m, k), (k, total)),
                "2d2d": ((m, total), (total, n))}[kind]
        return [rnd(g, a), rnd(g, b), offs]
    return make


for _k in range(3):
    for _kind in ("2d3d", "3d2d", "2d2d"):
        case(f"grouped_mm-{_kind}-{_k}", lambda a, b, o: torch._grouped_mm(a, b, offs=o),
             grouped(_kind), grad=(0, 1))
case("grouped_mm-3d3d", torch._grouped_mm, mats((3, 2, 4), (3, 4, 8)), grad=True)

# ---- layout and indexing ---------------------------------------------------------------------

LAYOUT = {
    "view": lambda x: x.view(-1, x.shape[-1]) * 1, "permute": lambda x: x.permute(2, 0, 1) * 1,
    "transpose": lambda x: x.transpose(0, 2).contiguous(), "expand": lambda x: x[:1].expand(
        3, -1, -1) + 0, "select": lambda x: x[1] + x[:, -1, None].sum(), "slice": lambda x: x[
            :, 1:3, ::2] * 2, "narrow": lambda x: x.narrow(2, 1, 2) + 1,
    "chunk": lambda x: [c * 1 for c in x.chunk(2, 1)], "split": lambda x: [
        c + 1 for c in x.split([1, x.shape[1] - 1], 1)],
    "unbind": lambda x: [c * 1 for c in x.unbind(0)], "cat": lambda x: torch.cat([x, x * 2], 1),
    "stack": lambda x: torch.stack([x, -x], 2), "repeat": lambda x: x.repeat(1, 2, 1, 1),
    "flip": lambda x: x.flip(0, 2), "roll": lambda x: x.roll(1, 1),
    "pad": lambda x: F.pad(x, (1, 2, 0, 1)), "pad-neg": lambda x: F.pad(x, (-1, 1)),
    "tril": lambda x: x.tril(), "triu": lambda x: x.triu(1), "diagonal": lambda x: x.diagonal(
        0, 1, 2) * 1, "unfold": lambda x: x.unfold(1, 2, 1) * 1, "flatten": lambda x: x.flatten(
            1) * 1, "squeeze": lambda x: x[:, :1].squeeze(1) * 1, "unsqueeze": lambda x: x.unsqueeze(
                -1) * 1, "movedim": lambda x: x.movedim(0, -1) * 1, "t": lambda x: x[0].t() * 1,
    "index-int": lambda x: x[torch.tensor([0, 1, 0])] * 1,
    "index-adv": lambda x: x[:, torch.tensor([1, 0]), torch.tensor([0, 1])],
    "index_select": lambda x: x.index_select(2, torch.tensor([1, 0, 1])),
    "gather": lambda x: x.gather(1, torch.zeros(2, 1, 2, dtype=torch.long)),
}
for _name, _fn in LAYOUT.items():
    case(_name, _fn, lambda g, r: [rnd(g, (2, r.randint(2, 4), r.randint(3, 5)))],
         grad=_name not in ("flip", "roll", "unfold", "diagonal"))
case("scatter-0d", lambda x, src: (x.scatter(0, torch.zeros(3, dtype=torch.long), src),
                                   x.scatter_add(0, torch.zeros(3, dtype=torch.long), src),
                                   x.scatter(0, torch.zeros(2, dtype=torch.long), 7.0),
                                   x.scatter(0, torch.zeros(0, dtype=torch.long), src),
                                   x.scatter(0, torch.zeros(3, dtype=torch.long), src,
                                             reduce="multiply"),
                                   x.scatter(0, torch.zeros(2, dtype=torch.long), 1.5,
                                             reduce="add")),
     lambda g, r: [rnd(g, ()), rnd(g, (r.randint(3, 5),))])   # (torch's backward fails here)
case("scatter", lambda x: torch.zeros(3, 4).scatter(1, torch.tensor([[0], [2], [3]]), x),
     lambda g, r: [rnd(g, (3, 1))])
case("scatter_add", lambda x: torch.ones(3, 4).scatter_add(0, torch.tensor([[0, 1, 2, 0]]), x),
     lambda g, r: [rnd(g, (1, 4))])
# the older reduce= form of scatter (it ran eagerly); duplicate indices combine
_DUP = torch.tensor([[0, 2, 0], [1, 1, 3], [3, 0, 3]])
_DUP0 = torch.tensor([[0, 2, 0, 1], [2, 2, 1, 1]])
case("scatter-reduce-arg", lambda x, s: (
    x.scatter(1, _DUP, s, reduce="add"), x.scatter(1, _DUP, s, reduce="multiply"),
    x.scatter(0, _DUP0, 2.5, reduce="multiply"), x.scatter(1, _DUP, -1.5, reduce="add")),
     lambda g, r: [rnd(g, (3, 4)), rnd(g, (3, 3))])
case("scatter-reduce-arg-int", lambda x, s: (
    x.scatter(1, _DUP, s, reduce="add"), x.scatter(1, _DUP, s, reduce="multiply"),
    x.scatter(0, _DUP0, 3, reduce="multiply")),
     lambda g, r: [rnd(g, (3, 4), I64), rnd(g, (3, 3), I64)])
case("index_put", lambda x: x.index_put((torch.tensor([0, 2]),), torch.tensor(9.0)),
     lambda g, r: [rnd(g, (3, 4))])
case("index_put_acc", lambda x: x.index_put((torch.tensor([0, 0]),), torch.ones(2, 4),
                                            accumulate=True), lambda g, r: [rnd(g, (3, 4))])
def _setitem(x, index, v):
    x = x.clone()
    x[index] = v
    return x


# boolean-mask writes that need no count of the selected elements are a ``where`` (they
# ran eagerly): one value, or values broadcasting over the selection; leading full dims
case("mask-put", lambda x, a, b, row, col: (
    x.index_put((a > 0,), torch.tensor(9.0)),                       # masked_fill
    x.index_put((a[:, 0] > 0,), torch.tensor(-2.0, dtype=torch.float64)),  # rows, cast
    x.index_put((a[:, 0] > 0,), row),                               # a row per selected row
    x.index_put((a[:, 0] > 0,), row[None] * 2, accumulate=True),
    _setitem(x, (slice(None), b[0] > 0), col),                      # x[:, mask] = col
    x.index_put((a > 0,), torch.ones(1) * 3, accumulate=True)),
     lambda g, r: [rnd(g, (4, 5)), rnd(g, (4, 5)), rnd(g, (4, 5)), rnd(g, (5,)),
                   rnd(g, (4, 1))])
# ... and ``x[mask] = v`` with v requiring grad (a mask token) is ``x.copy_(where(..))``, so
# its backward needs no count either (torch's indexes the gradient by the mask)
case("mask-setitem", lambda x, x3, a, row, col, s: (
    _setitem(x * 1, a[:, 0] > 0, row), _setitem(x * 1, (slice(None), a[0] > 0), col),
    _setitem(x * 1, a > 0, s), _setitem(x3 * 1, a[:3, :4] > 0, row),
    _setitem(x3 * 1, (slice(None), a[:4, :5] > 0), s.reshape(1))),
     lambda g, r: [rnd(g, (4, 5)), rnd(g, (3, 4, 5)), rnd(g, (4, 5)), rnd(g, (5,)),
                   rnd(g, (4, 1)), rnd(g, ())], grad=True)
# one value per selected element of a leading mask (``x[mask] = v``, ``x[mask]``'s gradient):
# a scatter to the mask's positions, the count checked on the device (the values are made
# with the mask's count on the host: selecting them would run eagerly)
def _per_element(g, r):
    m, rows, none = rnd(g, (4, 5), BOOL), rnd(g, (4,), BOOL), torch.zeros(4, 5, dtype=BOOL)
    return [rnd(g, (4, 5)), m, rnd(g, (int(m.sum()),)), rows, rnd(g, (int(rows.sum()), 5)),
            rnd(g, (int(rows.sum()), 1)), none, rnd(g, (0,))]


case("mask-put-per-element", lambda x, m, v, rows, vr, vcol, none, v0: (
    x.index_put((m,), v), x.index_put((m,), v, accumulate=True),
    x.index_put((rows,), vr), x.index_put((rows,), vcol, accumulate=True),  # a column each
    x.index_put((none,), v0)), _per_element)
case("mask-put-int-bool", lambda x, m, b: (
    x.index_put((m,), torch.tensor(7)), x.index_put((m[:, 1],), x[0] * 0 + 5, accumulate=True),
    b.index_put((m,), torch.tensor(True)), b.index_put((m[:, 0],), b[1], accumulate=True)),
     lambda g, r: [rnd(g, (3, 4), I64), rnd(g, (3, 4), BOOL), rnd(g, (3, 4), BOOL)])
# masked_scatter: the masked positions take the source's elements in order (it ran
# eagerly: the count is data, the shape is not); multimodal models merge features so
case("masked_scatter", lambda x, a, src, row: (
    x.masked_scatter(a > 0, src), x.masked_scatter(a[:1] > 0, src),     # a broadcast mask
    row.masked_scatter(a > 0, src),                                      # a broadcast x
    x.masked_scatter(a > 5, src[:0])),                                   # nothing masked
     lambda g, r: [rnd(g, (4, 5)), rnd(g, (4, 5)), rnd(g, (25,)), rnd(g, (5,))], grad=True)
# booleans accumulate as a logical or (their lowering once failed: XLA has no bool add)
case("bool-accumulate", lambda x, v: (
    x.index_put((torch.tensor([0, 2, 2]),), v, accumulate=True),
    x.index_add(1, torch.tensor([1, 1, 3, 0]), x),
    x.scatter_add(1, torch.tensor([[0, 0, 3, 3]] * 3), x)),
     lambda g, r: [rnd(g, (3, 4), BOOL), rnd(g, (3, 4), BOOL)])
case("embedding", lambda w, i: F.embedding(i, w), lambda g, r: [rnd(g, (7, 3)), rnd(
    g, (2, 5), I64, 0, 7)], grad=True)
case("one_hot", lambda i: F.one_hot(i, 6), lambda g, r: [rnd(g, (4,), I64, 0, 6)])

# ---- nn ops -------------------------------------------------------------------------------------


def img(n=2, c=3, h=7, w=6):
    return lambda g, r: [rnd(g, (n, c, h, w)), rnd(g, (4, c, 3, 3)), rnd(g, (4,))]


case("conv2d", lambda x, w, b: F.conv2d(x, w, b), img(), rtol=1e-4, atol=1e-5, grad=True)
case("conv2d-stride-pad", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), img(),
     rtol=1e-4, atol=1e-5, grad=True)
case("conv2d-dilation", lambda x, w, b: F.conv2d(x, w, None, padding=2, dilation=2), img(),
     rtol=1e-4, atol=1e-5, grad=True)
case("conv2d-groups", lambda x, w: F.conv2d(x, w, groups=2, padding="same"),
     lambda g, r: [rnd(g, (2, 4, 6, 5)), rnd(g, (6, 2, 3, 3))], rtol=1e-4, atol=1e-5, grad=True)
# grouped convolutions: on the CPU a depthwise one is a sum of shifted products, another's
# weight gradient one conv grouped over its features, not XLA's dense expansion of a
# batch-grouped one (a 24576-channel depthwise conv once asked for 18 GiB)
# 1 x ... x 1 kernels: a matrix product over the channels on the CPU (strided, padded)
case("conv2d-pointwise-strided-padded",
     lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=3),
     lambda g, r: [rnd(g, (2, 5, 7, 6)), rnd(g, (4, 5, 1, 1)), rnd(g, (4,))], rtol=1e-4,
     atol=1e-5, grad=True)
case("conv1d-pointwise-unbatched", lambda x, w: F.conv1d(x, w, stride=3),
     lambda g, r: [rnd(g, (5, 11)), rnd(g, (3, 5, 1))], rtol=1e-4, atol=1e-5, grad=True)
case("conv3d-pointwise-bfloat16", lambda x, w: F.conv3d(x, w, stride=(1, 2, 1)),
     lambda g, r: [rnd(g, (1, 4, 3, 5, 2), BF16), rnd(g, (6, 4, 1, 1, 1), BF16)], rtol=2e-2,
     atol=5e-2, grad=True)
case("conv_transpose2d-pointwise-strided",
     lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1),
     lambda g, r: [rnd(g, (2, 4, 3, 5)), rnd(g, (4, 3, 1, 1))], rtol=1e-4, atol=1e-5, grad=True)
case("conv2d-groups-unbatched-bfloat16", lambda x, w: F.conv2d(x, w, padding=1, groups=2),
     lambda g, r: [rnd(g, (4, 5, 4), BF16), rnd(g, (6, 2, 3, 3), BF16)], rtol=2e-2, atol=5e-2,
     grad=True)
case("conv_transpose2d-groups-strided",
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                        groups=3),
     lambda g, r: [rnd(g, (2, 6, 4, 3)), rnd(g, (6, 2, 3, 3)), rnd(g, (6,))], rtol=1e-4,
     atol=1e-5, grad=True)
case("conv1d-depthwise-causal", lambda x, w, b: F.conv1d(x, w, b, padding=3, groups=6),
     lambda g, r: [rnd(g, (2, 6, 9)), rnd(g, (6, 1, 4)), rnd(g, (6,))], rtol=1e-4, atol=1e-5,
     grad=True)
case("conv2d-groups-strided-dilated",
     lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=3),
     lambda g, r: [rnd(g, (2, 6, 7, 8)), rnd(g, (9, 2, 3, 2))], rtol=1e-4, atol=1e-5,
     grad=True)
case("conv3d-groups-strided", lambda x, w: F.conv3d(x, w, stride=2, groups=2),
     lambda g, r: [rnd(g, (1, 4, 5, 4, 6)), rnd(g, (4, 2, 2, 3, 2))], rtol=1e-4, atol=1e-5,
     grad=True)
case("conv2d-depthwise-strided-dilated",
     lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=3),
     lambda g, r: [rnd(g, (2, 3, 9, 8)), rnd(g, (6, 1, 3, 2))], rtol=1e-4, atol=1e-5,
     grad=True)
case("conv_transpose2d-depthwise",
     lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=3),
     lambda g, r: [rnd(g, (2, 3, 4, 5)), rnd(g, (3, 1, 3, 3))], rtol=1e-4, atol=1e-5,
     grad=True)
case("conv_transpose1d-depthwise-multiplier",
     lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=2, output_padding=1,
                                        groups=2, dilation=2),
     lambda g, r: [rnd(g, (2, 4, 5)), rnd(g, (4, 1, 3)), rnd(g, (2,))], rtol=1e-4, atol=1e-5,
     grad=True)
case("conv_transpose2d-depthwise-unbatched-bfloat16",
     lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, groups=3),
     lambda g, r: [rnd(g, (3, 4, 3), BF16), rnd(g, (3, 1, 3, 3), BF16)], rtol=2e-2, atol=5e-2,
     grad=True)
case("conv1d-depthwise-padding-past-the-kernel",   # (its input gradient crops the spread)
     lambda x, w: F.conv1d(x, w, stride=2, padding=4, groups=4),
     lambda g, r: [rnd(g, (2, 4, 6)), rnd(g, (4, 1, 3))], rtol=1e-4, atol=1e-5, grad=True)
case("conv1d-depthwise-unbatched", lambda x, w: F.conv1d(x, w, padding=1, groups=4),
     lambda g, r: [rnd(g, (4, 9)), rnd(g, (8, 1, 3))], rtol=1e-4, atol=1e-5, grad=True)
case("conv_transpose1d-depthwise",
     lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1, output_padding=2, groups=4,
                                     dilation=2),
     lambda g, r: [rnd(g, (2, 4, 5)), rnd(g, (4, 2, 3))], rtol=1e-4, atol=1e-5, grad=True)
case("conv2d-depthwise-bfloat16", lambda x, w: F.conv2d(x, w, padding=1, groups=3),
     lambda g, r: [rnd(g, (1, 3, 5, 4), BF16), rnd(g, (3, 1, 3, 3), BF16)],
     rtol=2e-2, atol=5e-2, grad=True)
case("conv1d", lambda x, w: F.conv1d(x, w, stride=2), lambda g, r: [rnd(g, (2, 3, 9)), rnd(
    g, (5, 3, 3))], rtol=1e-4, atol=1e-5, grad=True)
case("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1,
                                                         output_padding=1),
     lambda g, r: [rnd(g, (2, 3, 4, 5)), rnd(g, (3, 2, 3, 3))], rtol=1e-4, atol=1e-5, grad=True)
# output_padding up to the dilation, past the stride (its lowering once failed to build)
case("conv_transpose2d-output-padding-past-stride",
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2),
                                        output_padding=(2, 3), groups=2, dilation=(4, 4)),
     lambda g, r: [rnd(g, (2, 2, 4, 4)), rnd(g, (2, 2, 4, 5)), rnd(g, (4,))],
     rtol=1e-4, atol=1e-5, grad=True)
case("conv_transpose3d-output-padding-past-stride",
     lambda x, w: F.conv_transpose3d(x, w, stride=(1, 2, 1), output_padding=(2, 1, 1),
                                     dilation=(3, 2, 2)),
     lambda g, r: [rnd(g, (2, 3, 3, 4)), rnd(g, (2, 2, 2, 3, 2))], rtol=1e-4, atol=1e-5,
     grad=True)
for _dt in (BF16, F16):   # computed in float32, rounded once (its backward's vjp once failed)
    case(f"conv_transpose2d-{_dt}", lambda x, w: F.conv_transpose2d(x, w, stride=2),
         lambda g, r, dt=_dt: [rnd(g, (1, 3, 4, 3), dt), rnd(g, (3, 2, 3, 3), dt)],
         rtol=2e-2, atol=5e-2, grad=True)
    case(f"conv2d-{_dt}", lambda x, w: F.conv2d(x, w, padding=1),
         lambda g, r, dt=_dt: [rnd(g, (1, 3, 5, 4), dt), rnd(g, (2, 3, 3, 3), dt)],
         rtol=2e-2, atol=5e-2, grad=True)
case("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda g, r: [rnd(g, (2, 3, 6, 7))], grad=True)
case("max_pool2d-ceil", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
     lambda g, r: [rnd(g, (1, 2, 8, 7))], grad=True)
case("max_pool2d-indices", lambda x: F.max_pool2d(x, 2, return_indices=True)[1],
     lambda g, r: [rnd(g, (2, 2, 4, 6))])
case("avg_pool2d", lambda x: F.avg_pool2d(x, 2), lambda g, r: [rnd(g, (2, 3, 6, 7))], grad=True)
case("avg_pool2d-pad", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
     lambda g, r: [rnd(g, (1, 2, 7, 6))], grad=True)
case("avg_pool2d-pad-count", lambda x: F.avg_pool2d(x, 3, 1, 1),
     lambda g, r: [rnd(g, (1, 2, 5, 6))], grad=True)
case("avg_pool2d-ceil", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
     lambda g, r: [rnd(g, (1, 2, 8, 7))], grad=True)
case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
     lambda g, r: [rnd(g, (2, 3, 6, 6))], grad=True)
case("adaptive_avg_pool2d-uneven", lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
     lambda g, r: [rnd(g, (1, 2, 7, 5))], grad=True)
case("max_pool3d", lambda x: F.max_pool3d(x, 2, 1, 1, dilation=(1, 2, 1)),
     lambda g, r: [rnd(g, (1, 2) + shape(r, 3, 3, 6))], grad=True)
case("max_pool3d-indices-ceil", lambda x: F.max_pool3d(x, 3, 2, ceil_mode=True,
                                                         return_indices=True),
     lambda g, r: [rnd(g, (2, 1) + shape(r, 3, 4, 7))], grad=True)
case("avg_pool3d", lambda x: F.avg_pool3d(x, (2, 3, 2), 2, 1, count_include_pad=False),
     lambda g, r: [rnd(g, (1, 2) + shape(r, 3, 3, 7))], grad=True)
case("avg_pool3d-ceil-divisor", lambda x: F.avg_pool3d(x, 2, ceil_mode=True, divisor_override=3),
     lambda g, r: [rnd(g, (2, 1) + shape(r, 3, 2, 6), F64)], grad=True)
case("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
     lambda g, r: [rnd(g, (2, 3) + shape(r, 2, 4, 10))], grad=True)
case("adaptive_max_pool2d-ties", lambda x: F.adaptive_max_pool2d(x.round(), (2, 3),
                                                                  return_indices=True),
     lambda g, r: [rnd(g, (2, 2) + shape(r, 2, 3, 9))])
case("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 1)),
     lambda g, r: [rnd(g, (1, 2) + shape(r, 3, 2, 8))], grad=True)
case("adaptive_avg_pool1d-uneven", lambda x: F.adaptive_avg_pool1d(x, 4),
     lambda g, r: [rnd(g, (2, 3, r.randint(5, 11)), F64)], grad=True)
# upsampling: the forward is torch's decomposition (bicubic's: lowered, host-side taps), the
# backward our per-axis matrices
_UPSAMPLE = [("nearest", None, dict(scale_factor=2)), ("nearest", None, dict(size=(7, 3))),
             ("nearest-exact", None, dict(scale_factor=1.7)),
             ("bilinear", False, dict(scale_factor=1.5)), ("bilinear", True, dict(size=(9, 4))),
             ("bicubic", False, dict(scale_factor=0.6)), ("bicubic", True, dict(size=(5, 11)))]
for _mode, _ac, _kw in _UPSAMPLE:
    for _dt in (F32, F64):
        case(f"interpolate-{_mode}-{_ac}-{sorted(_kw)[0]}-{_dt}",
             lambda x, m=_mode, ac=_ac, kw=_kw: F.interpolate(x, mode=m, align_corners=ac, **kw),
             lambda g, r, dt=_dt: [rnd(g, (2, 2) + shape(r, 2, 3, 8), dt)], grad=True)
case("interpolate-linear1d", lambda x: F.interpolate(x, scale_factor=2.5, mode="linear"),
     lambda g, r: [rnd(g, (2, 3, r.randint(3, 8)))], grad=True)
case("interpolate-nearest1d", lambda x: F.interpolate(x, size=7), lambda g, r: [
    rnd(g, (2, 3, r.randint(3, 9)))], grad=True)
case("interpolate-trilinear", lambda x: F.interpolate(x, size=(3, 5, 4), mode="trilinear",
                                                      align_corners=True),
     lambda g, r: [rnd(g, (1, 2) + shape(r, 3, 2, 5))], grad=True)
case("interpolate-nearest3d", lambda x: F.interpolate(x, scale_factor=(2, 1, 3)),
     lambda g, r: [rnd(g, (1, 2) + shape(r, 3, 2, 5))], grad=True)
for _dim in (0, 2, -1):
    case(f"weight_norm-dim{_dim}", lambda v, g, d=_dim: torch._weight_norm(v, g, d),
         lambda g, r, d=_dim: (lambda s: [rnd(g, s, F64), rnd(g, tuple(
             n if i == d else 1 for i, n in enumerate(s)) if d != -1 else (), F64)])(
                 shape(r, 3, 2, 5)), grad=True)
case("layer_norm", lambda x, w, b: F.layer_norm(x, (5,), w, b), lambda g, r: [
    rnd(g, (2, 3, 5)), rnd(g, (5,)), rnd(g, (5,))], rtol=1e-4, atol=1e-5, grad=True)
case("layer_norm-noaffine", lambda x: F.layer_norm(x, (3, 4)), lambda g, r: [rnd(g, (2, 3, 4))],
     rtol=1e-4, atol=1e-5, grad=True)
case("batch_norm-train", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     lambda g, r: [rnd(g, (4, 3, 5)), rnd(g, (3,)), rnd(g, (3,))], rtol=1e-4, atol=1e-5,
     grad=True)
# (float64: the output alone, so its backward is native_batch_norm_backward, whose bias
# gradient came from a float32 seed)
case("batch_norm-train-f64", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     lambda g, r: [rnd(g, (4, 3, 5), F64), rnd(g, (3,), F64), rnd(g, (3,), F64)], grad=True)
case("batch_norm-eval", lambda x, m, v: F.batch_norm(x, m, v.abs() + 0.5, training=False),
     lambda g, r: [rnd(g, (4, 3, 2, 2)), rnd(g, (3,)), rnd(g, (3,))], rtol=1e-4, atol=1e-5,
     grad=(0,))
case("cross_entropy", lambda x, t: F.cross_entropy(x, t), lambda g, r: [
    rnd(g, (6, 5)), rnd(g, (6,), I64, 0, 5)], grad=True)
case("cross_entropy-weight-ignore", lambda x, t, w: F.cross_entropy(
    x, t, weight=w.abs(), ignore_index=2), lambda g, r: [rnd(g, (6, 5)), rnd(
        g, (6,), I64, 0, 5), rnd(g, (5,))], grad=(0,))
case("cross_entropy-2d-sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
     lambda g, r: [rnd(g, (2, 4, 3, 3)), rnd(g, (2, 3, 3), I64, 0, 4)], grad=True)
case("nll_loss-none", lambda x, t: F.nll_loss(x, t, reduction="none"), lambda g, r: [
    rnd(g, (6, 5)), rnd(g, (6,), I64, 0, 5)], grad=True)
def _multilabel_targets(g, r, rows, c):
    """Class labels, each row ended by -1 at a random place (or not at all), with more
    labels (and -1s) after its end: they must not count."""
    t = torch.randint(0, c, rows + (c,), generator=g)
    for row in t.view(-1, c):
        end = r.randint(0, c)
        if end < c:
            row[end] = -1
            if end + 1 < c:
                row[r.randint(end + 1, c - 1)] = -1
    return t


for _red in ("mean", "sum", "none"):
    for _dt in (F32, F64):
        case(f"multilabel_margin_loss-{_red}-{_dt}", lambda x, t, red=_red:
             F.multilabel_margin_loss(x, t, reduction=red),
             lambda g, r, dt=_dt: (lambda rows, c: [rnd(g, rows + (c,), dt),
                                                    _multilabel_targets(g, r, rows, c)])(
                 (r.randint(1, 5),) if r.random() < 0.8 else (), r.randint(2, 6)),
             rtol=1e-5, atol=1e-6, grad=(0,))
for _p, _red, _weighted in ((1, "mean", False), (2, "sum", True), (1, "none", True),
                            (2, "none", False)):
    case(f"multi_margin_loss-p{_p}-{_red}-{'w' if _weighted else 'nw'}",
         lambda x, t, w, p=_p, red=_red, wt=_weighted: F.multi_margin_loss(
             x, t, p=p, margin=0.7, weight=w.abs() if wt else None, reduction=red),
         # (one row's target of shape (1,) gives its unreduced loss that shape: it was ())
         lambda g, r: (lambda n, c: [rnd(g, (n, c) if n else (c,), F64),
                                     rnd(g, (n,) if n else (1,) if c % 2 else (), I64, 0, c),
                                     rnd(g, (c,), F64)])(
             r.randint(0, 5), r.randint(2, 6)), grad=(0,))
case("multi_margin_loss-one-row-target-of-one", lambda x, t: F.multi_margin_loss(
    x, t, reduction="none"), lambda g, r: [rnd(g, (r.randint(2, 6),), F64),
                                          torch.tensor([1])], grad=(0,))
for _pad in ((2, 1), (1, -1, 2, 0), (0, 1, 1, 2, -1, 1)):
    case(f"replicate-pad-{len(_pad) // 2}d", lambda x, pad=_pad: F.pad(x, pad, mode="replicate"),
         lambda g, r, n=len(_pad) // 2: [rnd(g, (2, 2) + shape(r, n, 2, 5))], grad=True)
# a crop of a whole side, then a pad of the other: the edge that is left is the last element
# (the backward's lowering once failed on the empty axis)
case("replicate-pad-crop-everything", lambda x: F.pad(x, (-4, 5, 2, -3), mode="replicate"),
     lambda g, r: [rnd(g, (2, 3, 4, 4), F64)], grad=True)
case("bilinear", F.bilinear, lambda g, r: (lambda n, a, b, o: [
    rnd(g, (n, a)), rnd(g, (n, b)), rnd(g, (o, a, b)), rnd(g, (o,))])(*shape(r, 4, 1, 6)),
     rtol=1e-4, atol=1e-5, grad=True)
case("bilinear-batched-nobias", lambda x1, x2, w: F.bilinear(x1, x2, w),
     lambda g, r: [rnd(g, (2, 3, 4), F64), rnd(g, (2, 3, 5), F64), rnd(g, (1, 4, 5), F64)],
     grad=True)
case("rrelu-eval", lambda x: F.rrelu(x, 0.1, 0.3, training=False),
     lambda g, r: [rnd(g, shape(r))], grad=True)
case("mse_loss", F.mse_loss, lambda g, r: [rnd(g, (3, 4)), rnd(g, (3, 4))], grad=True)
case("bce_logits", F.binary_cross_entropy_with_logits, lambda g, r: [
    rnd(g, (3, 4)), rnd(g, (3, 4), F32, 0, 1)], grad=True)
case("dropout-eval", lambda x: F.dropout(x, 0.5, training=False), lambda g, r: [rnd(g, (3, 4))])
case("dropout-p0", lambda x: F.dropout(x, 0.0, training=True), lambda g, r: [rnd(g, (3, 4))])
case("sdpa-causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda g, r: [rnd(g, (2, 2, 5, 4)) for _ in range(3)], rtol=1e-4, atol=1e-5, grad=True)


def _lstm(x, h, c, wi, wh, bi, bh):
    return torch._VF.lstm(x, (h, c), (wi, wh, bi, bh), True, 1, 0.0, False, False, True)


case("lstm", _lstm, lambda g, r: [rnd(g, (2, 3, 4)), rnd(g, (1, 2, 5)), rnd(g, (1, 2, 5)),
                                   rnd(g, (20, 4)), rnd(g, (20, 5)), rnd(g, (20,)),
                                   rnd(g, (20,))], rtol=1e-4, atol=1e-5, grad=True)


def _lstm_bi(x, h, c, *w):   # two layers, both directions, no biases, batch first
    return torch._VF.lstm(x, (h, c), w, False, 2, 0.0, True, True, True)


def _lstm_bi_inputs(g, r, dt):
    T, B, n_in, H = r.randint(1, 6), r.randint(1, 4), r.randint(1, 5), r.randint(1, 5)
    ws = []
    for k in range(4):  # (layer, direction) pairs: w_ih, then w_hh
        ws += [rnd(g, (4 * H, n_in if k < 2 else 2 * H), dt, -1, 1), rnd(g, (4 * H, H), dt, -1, 1)]
    return [rnd(g, (B, T, n_in), dt), rnd(g, (4, B, H), dt), rnd(g, (4, B, H), dt)] + ws


for _dt in (F32, F64):
    case(f"lstm-bidirectional-2layer-{_dt}", _lstm_bi,
         lambda g, r, dt=_dt: _lstm_bi_inputs(g, r, dt), rtol=1e-4, atol=1e-5, grad=True)

(forward_results, backward_results, test_lowering_matches_torch, test_backward_matches_torch,
 test_every_case_was_lowered_not_run_eagerly) = lowering_tests(CASES)


def test_bicubic_output_read_after_its_gradient_in_one_graph():
    # torch's decomposition floored source coordinates on the device: with the backward in
    # the same graph, XLA:CPU computed coordinates that land on whole numbers (4 -> 12) a
    # last bit low in one fusion and not in another, and whole rows came out 3.1 off
    import lazy_runtime as lr
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def run(device):
        leaf = x.clone().requires_grad_(True)
        y = F.interpolate(leaf.to(device), size=12, mode="bicubic")
        ramp = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape).to(device)
        grad, = torch.autograd.grad((y * ramp).sum(), [leaf])
        return y.detach().cpu(), grad
    want, got = run("cpu"), run(lr.device())
    torch.testing.assert_close(got[0], want[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-12)


def test_wide_grouped_convolution_backward_needs_no_dense_scratch():
    # XLA:CPU expands JAX's weight gradient of a grouped conv (grouped over its batch) into
    # a dense conv over every pair of channels: GLM-5-Next's 24576-channel depthwise conv1d
    # asked for 18 GiB. Here dense would be 4096 * 4096 * 4 taps * 4 bytes = 256 MiB.
    import jax
    import jax.numpy as jnp

    from lazy_runtime.ops.nn import lower_convolution_backward

    def scratch(per_group):
        x = jax.ShapeDtypeStruct((2, 4096, 16), jnp.float32)
        w = jax.ShapeDtypeStruct((4096, per_group, 4), jnp.float32)
        g = jax.ShapeDtypeStruct((2, 4096, 19), jnp.float32)
        groups = 4096 // per_group
        fn = jax.jit(lambda g_, x_, w_: lower_convolution_backward(
            g_, x_, w_, None, [1], [3], [1], False, [0], groups, [True, True, False])[:2])
        return fn.lower(g, x, w).compile().memory_analysis().temp_size_in_bytes

    for per_group in (1, 2):   # depthwise (shifted sums), grouped (one feature-grouped conv)
        assert scratch(per_group) < 16 << 20, per_group


def _lowered_convolution_equations(x_shape, w_shape, geometry):
    """The JAX equations (nested ones included) of the runtime's convolution lowering and
    of its backward (input and weight gradients) for float32 arguments of these shapes:
    [forward's, backward's]."""
    import jax
    import jax.extend.core
    import jax.numpy as jnp

    from lazy_runtime.ops.nn import lower_convolution, lower_convolution_backward

    out_shape = tuple(jax.eval_shape(
        lambda x_, w_: jax.lax.conv_general_dilated(
            x_, w_, geometry[0], [(p, p) for p in geometry[1]], rhs_dilation=geometry[2],
            dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=geometry[5]),
        jax.ShapeDtypeStruct(x_shape, jnp.float32), jax.ShapeDtypeStruct(w_shape, jnp.float32)
    ).shape)
    context = type("Context", (), {"shape": out_shape})()
    x, w, g = (jax.ShapeDtypeStruct(s, jnp.float32) for s in (x_shape, w_shape, out_shape))

    def equations(jaxpr):
        found = []
        for eqn in jaxpr.eqns:
            found.append(eqn)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                found += equations(sub)
        return found

    forward = jax.make_jaxpr(lambda x_, w_: lower_convolution(context, x_, w_, None, *geometry))
    backward = jax.make_jaxpr(lambda g_, x_, w_: lower_convolution_backward(
        g_, x_, w_, None, *geometry, [True, True, False])[:2])
    return [equations(forward(x, w).jaxpr), equations(backward(g, x, w).jaxpr)]


def test_grouped_2d_convolution_is_dense_convolutions_on_the_cpu():
    # XLA:CPU's grouped 2-d conv (and its gradients) ran 3-10x slower than one dense conv
    # per group (benchmarks/grouped_conv_grad.py); the lowering and its backward use none
    geometry = ([1, 1], [1, 1], [1, 1], False, [0, 0], 4)
    for eqns in _lowered_convolution_equations((2, 8, 6, 5), (12, 2, 3, 3), geometry):
        counts = [e.params["feature_group_count"] for e in eqns
                  if e.primitive.name == "conv_general_dilated"]
        assert counts and set(counts) == {1}, counts


def test_pointwise_convolution_is_a_matrix_product_on_the_cpu():
    # XLA:CPU's convolution of a 1x1 kernel (and its gradients) took about twice a
    # matrix product's time; the lowering and its backward call none
    geometry = ([2, 2], [0, 0], [1, 1], False, [0, 0], 1)
    for eqns in _lowered_convolution_equations((2, 8, 6, 5), (12, 8, 1, 1), geometry):
        found = {e.primitive.name for e in eqns}
        assert "dot_general" in found and "conv_general_dilated" not in found, found


def test_grouped_2d_convolution_keeps_an_infinite_weight_in_its_group():
    # neighbouring groups are one dense conv over block-diagonal weights: the zeros between
    # them are chosen, not products (inf * 0 would be NaN in the other groups' outputs)
    import lazy_runtime as lr

    gen = torch.Generator().manual_seed(3)
    for size in ((2, 8, 5, 6), (8, 5, 6)):   # batched and unbatched
        x = torch.randn(size, generator=gen)
        w = torch.randn(8, 2, 3, 3, generator=gen)
        w[0, 1, 1, 1] = float("inf")
        want = F.conv2d(x, w, padding=1, groups=4)
        got = F.conv2d(x.to(lr.device()), w.to(lr.device()), padding=1, groups=4).cpu()
        assert want[..., 2:, :, :].isfinite().all()
        torch.testing.assert_close(got, want, equal_nan=True)
