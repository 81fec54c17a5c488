"""Sizes decided from the path condition: after ``if T > 16:`` and ``if n > 1: ... else:``
the op rules know what the interpreter knows (``Min(32, T) - 16`` is 1 there), so a
squeeze, a broadcast or a reshape on that path is neither a union with an impossible
variant nor a false error. The chunked module below is xlstm's inference path in small
(transformers' modeling_xlstm: sequences longer than a chunk run chunk by chunk; a chunk
runs a chunkwise kernel on whole blocks, a step loop on the rest, and a one-step kernel
that squeezes the time dim when only one step is left). Torch is the oracle."""

import random
import sys
from pathlib import Path

import pytest
import sympy
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapeinfer  # noqa: E402
from oracle import compare, record_shapes  # noqa: E402
from shapeinfer import shape_fns  # noqa: E402
from shapeinfer import symbolic as sym  # noqa: E402

CHUNK = 8  # the sequence is processed in pieces of at most CHUNK steps
BLOCK = 4  # the chunkwise kernel takes whole blocks of BLOCK steps


def one_step(q):  # q: [B, H, 1, D] -> [B, H, 1, D]
    h = q.squeeze(2)
    h = h * torch.ones(h.shape[-1])
    return h[:, :, None, :]


def step_loop(q):  # the remaining steps one at a time
    outs = []
    for t in range(q.shape[2]):
        outs.append(q[:, :, t, :] * 2)
    return torch.stack(outs, dim=2)


def blocks(q):  # whole blocks at once
    b, h, n, d = q.shape
    nb = n // BLOCK
    x = q.reshape(b, h, nb, BLOCK, -1)
    return x.reshape(b, h, nb * BLOCK, d)


def any_length(q):
    n = q.shape[2]
    if n > 1:
        outs = []
        start = 0
        num_blocks = n // BLOCK
        if num_blocks > 0:
            outs.append(blocks(q[:, :, : num_blocks * BLOCK]))
            start = num_blocks * BLOCK
        if n - start > 0:
            outs.append(step_loop(q[:, :, start:n]))
        return torch.cat(outs, dim=2)
    if n != 1:
        raise ValueError("empty sequence")
    return one_step(q)


class Chunked(nn.Module):
    def __init__(self, heads=2, dim=6):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(dim, heads * dim)

    def layer(self, x):  # [B, n, C] -> [B, n, C]
        b, n, _ = x.shape
        q = self.proj(x).reshape(b, n, self.heads, -1).transpose(1, 2)
        h = any_length(q).transpose(1, 2)
        h = h.reshape(b, n, -1)
        return x.repeat(1, 1, self.heads) * h

    def forward(self, x):  # x: [B, T, C]
        if x.shape[1] > CHUNK:
            out = torch.zeros(x.shape[0], x.shape[1], self.heads * x.shape[2])
            offset = 0
            while offset < x.shape[1]:
                piece = x[:, offset: min(offset + CHUNK, x.shape[1])]
                out[:, offset: min(offset + CHUNK, x.shape[1])] = self.layer(piece)
                offset += CHUNK
            return out
        return self.layer(x)


# lengths that reach every path: one chunk (1 step, a few, whole blocks, blocks plus
# steps), then several chunks whose last piece is 1, 2, or BLOCK + 1 steps long
ORACLE_LENGTHS = [1, 2, 3, 4, 7, 8, 9, 10, 13, 16, 17, 21, 25, 33]


@pytest.mark.parametrize("sample", [3, 9, 17])
def test_chunked_model_has_no_false_error_and_no_wrong_shape(sample):
    torch.manual_seed(0)
    model = Chunked()
    res = shapeinfer.analyze(model, args=(torch.randn(2, sample, 6),), dims={"x": ("B", "T", 6)})
    assert not res.errors, [f"{d.line}: {d.code} {d.message} when {d.when}" for d in res.errors]
    analysis = res.to_json()
    report = None
    for t in ORACLE_LENGTHS:
        with torch.no_grad():
            recorded = record_shapes(model, [__file__], torch.randn(2, t, 6))
        r = compare(analysis, recorded, {"B": 2, "T": t}, [__file__])
        report = r if report is None else report + r
    assert report.wrong == 0, str(report)
    assert report.exact > 0


def test_squeeze_on_a_path_that_pins_the_dim_to_one():
    # the one-step kernel's input is one step long on its path: h is [B, H, D] only
    res = shapeinfer.analyze(Chunked(), args=(torch.randn(2, 9, 6),), dims={"x": ("B", "T", 6)})
    squeezed = [e for e in res.to_json()["entries"] if e["name"] == "h" and "squeeze" in _line(e)]
    assert squeezed
    for e in squeezed:  # (the widened last round of the while loop is unknown, not wrong)
        shapes = [s["shape"] if isinstance(s, dict) else s for s in e["shapes"]]
        assert {len(s) for s in shapes if s is not None} == {3}, e


def _line(entry) -> str:
    return Path(entry["file"]).read_text().splitlines()[entry["line"] - 1]


# ---- the symbolic core: decisions under facts, checked by brute force -----------------

T, B = sym.symbol("T"), sym.symbol("B")
_EXPRS = [
    sympy.Min(32, T) - 16, sympy.Max(0, sympy.Min(48, T) - sympy.Min(32, T)), sympy.floor(sympy.Min(16, T) / 64),
    sympy.floor(T / 4), T - 16, 1024 / T, 4 * sympy.floor(T / 4), sympy.Min(T, 5), -2 * sympy.Min(T, 4), T,
]
_CONDS = [sympy.true, T > 16, sympy.And(T > 16, sympy.Min(32, T) - 16 <= 1), T <= 1, sympy.And(T > 3, T < 5),
          sympy.And(T > 32, T <= 48), T < 64]
_OPS = ["==", "!=", "<", "<=", ">", ">="]


def _brute_force(op, a, b, cond, sizes=range(1, 200)):
    """True/False when ``a op b`` has that value at every T in ``sizes`` that meets ``cond``."""
    seen = set()
    for t in sizes:
        if not sym.holds_at(cond, {"T": t}):
            continue
        va, vb = sym.evaluate(a, {"T": t}), sym.evaluate(b, {"T": t})
        seen.add(sym._PY_OPS[op](va, vb))
    return seen


@pytest.mark.parametrize("cond", _CONDS, ids=str)
def test_decisions_under_facts_agree_with_every_size_that_meets_them(cond):
    rng = random.Random(0)
    decided = 0
    for _ in range(150):
        a = rng.choice(_EXPRS)
        b = rng.choice(_EXPRS + [0, 1, 16, 1024])
        op = rng.choice(_OPS)
        with sym.assuming(cond):
            verdict = sym.compare(op, a, b)
        if verdict is None:
            continue
        decided += 1
        seen = _brute_force(op, a, b, cond, range(1, 200 if cond is not sympy.true else 120))
        assert seen <= {verdict}, f"{a} {op} {b} under {cond}: decided {verdict}, sizes give {seen}"
    assert decided > 10


def test_equality_probes_reach_past_large_thresholds():
    # zero for every T up to 32768, not beyond: the old probes (T <= 1000) called it 0
    third_chunk = B * sympy.Max(0, sympy.Min(49152, T) - sympy.Min(32768, T))
    assert sym.equal(third_chunk, 0) is None
    assert sym.evaluate(third_chunk, {"B": 1, "T": 40000}) == 7232


def test_facts_pin_a_size_and_decide_through_it():
    with sym.assuming(sympy.And(T > 16, sympy.Min(32, T) - 16 <= 1)):
        assert sym.equal(sympy.Min(32, T) - 16, 1) is True
    with sym.assuming(T <= 1):  # T is positive: T is 1
        assert sym.equal(1024 / T, 1024) is True
    assert sym.equal(1024 / T, 1024) is None
    assert sym.compare(">", sympy.floor(sympy.Min(16, T) / 64), 0) is False


def test_broadcast_with_a_size_the_path_pins_to_one():
    with sym.assuming(T <= 1):
        assert shape_fns.broadcast_shapes((B, T, 4), (B, 256, 4)) == (B, 256, 4)
    assert (torch.ones(2, 1, 4) * torch.ones(2, 256, 4)).shape == (2, 256, 4)


@pytest.mark.parametrize("a, b", [(T + 2, T + 3), (B, 2 * B), (sympy.Min(T, 4), 256), (T, sympy.Min(5000, T - 1))],
                         ids=str)
def test_never_equal_sizes_fail_to_broadcast_except_where_one_is_1(a, b):
    with pytest.raises(shape_fns.ShapeError) as e:
        shape_fns.broadcast_shapes((a,), (b,))
    unless = e.value.unless if e.value.unless is not None else sympy.false
    for t in range(1, 40):
        for bb in (1, 2, 3):
            sizes = {"T": t, "B": bb}
            na, nb = sym.evaluate(a, sizes), sym.evaluate(b, sizes)
            if min(na, nb) < 0:
                continue
            try:
                torch.ones(na) * torch.ones(nb)
                runs = True
            except RuntimeError:
                runs = False
            assert runs == bool(sym.holds_at(unless, sizes)), (sizes, na, nb)


def test_broadcast_error_on_an_untaken_path_names_its_condition():
    class Doubled(nn.Module):
        def forward(self, x, y):  # x: [B, 4], y: [T, 4]
            if y.size(0) > 6:
                y = torch.cat([x, x])
            return x - y

    r = shapeinfer.analyze(Doubled(), args=(torch.randn(3, 4), torch.randn(3, 4)), dims={"x": ("B", 4), "y": ("T", 4)})
    assert [(d.code, d.when) for d in r.errors] == [("SI101", "(T > 6) & Ne(B, 1)")]
    with pytest.raises(RuntimeError):
        Doubled()(torch.randn(2, 4), torch.randn(7, 4))
    Doubled()(torch.randn(1, 4), torch.randn(7, 4))  # B = 1 broadcasts
