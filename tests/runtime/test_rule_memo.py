"""The memo of pure rules' answers (``dispatch._memo_key``, ``registry.PURE_RULES``): a
memoized answer must be the one the rule would give, so every input the key leaves out
or coarsens is probed here: argument types equal as values, torch's default dtype, and
the dynamic scalars a refusal reads."""

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV
from lazy_runtime import dispatch
from lazy_runtime.ops.elementwise import number_fits
from lazy_runtime.ops.registry import PURE_RULES, RULES

aten = torch.ops.aten

_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
           torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
           torch.complex128)
_SMALL_NONNEGATIVE = (0.0, -0.0, 1e-300, 0.5, 1.0, 3e-4, 99.9, 126.99, 127.0)
_SMALL_NEGATIVE = (-128.0, -127.5, -1.0, -0.5, -1e-300, -3e-4)


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
def test_each_scalar_class_fits_every_dtype_alike(dtype):
    """A rule reads a dynamic float through ``number_fits`` only: the key keeps which class
    it is in, so every value of a class must get one answer, for every dtype."""
    for members in (_SMALL_NONNEGATIVE, _SMALL_NEGATIVE):
        answers = {number_fits(v, dtype) for v in members}
        assert len(answers) == 1, (dtype, members)
        assert len({dispatch._scalar_class(v) for v in members}) == 1
    assert dispatch._scalar_class(0.5) != dispatch._scalar_class(-0.5)
    for v in (127.5, -128.5, 200.0, 1e6, float("inf"), float("-inf")):
        assert dispatch._scalar_class(v) == (v,)   # outside the classes: the value itself


def test_masked_fill_value_out_of_range_after_one_in_range():
    """The same op and layout with a dynamic value: 100 fits int8, 200 does not (torch
    refuses it); 100 fits uint8, -100 does not. The memo entry of the first must not
    answer for the second."""
    x = torch.ones(4, dtype=torch.int8)
    mask = torch.tensor([True, False, True, False])
    xd, md = x.to(DEV), mask.to(DEV)
    assert torch.equal(xd.masked_fill(md, 100.0).cpu(), x.masked_fill(mask, 100.0))
    with pytest.raises(RuntimeError, match="without overflow"):
        x.masked_fill(mask, 200.0)
    with pytest.raises(RuntimeError, match="without overflow"):
        xd.masked_fill(md, 200.0).cpu()
    assert torch.equal(xd.masked_fill(md, -100.0).cpu(), x.masked_fill(mask, -100.0))
    # uint8: 100 fits, -100 (the negative class) does not
    u, ud = x.to(torch.uint8), x.to(torch.uint8).to(DEV)
    assert torch.equal(ud.masked_fill(md, 100.0).cpu(), u.masked_fill(mask, 100.0))
    with pytest.raises(RuntimeError, match="without overflow"):
        ud.masked_fill(md, -100.0).cpu()


def test_an_int_and_an_equal_float_constant_are_told_apart():
    """``pow(x, 2)`` and ``pow(x, 2.0)``: equal constants in the node's template, results
    of other dtypes (the key holds each argument's type)."""
    x = torch.arange(5)
    for exponent in (2, 2.0, 2, True):
        got = torch.pow(x.to(DEV), exponent)
        want = torch.pow(x, exponent)
        assert got.dtype == want.dtype, exponent
        assert torch.equal(got.cpu(), want)


def test_the_default_dtype_is_part_of_the_key():
    """An integer true division is a float of torch's default dtype."""
    x = torch.arange(6)
    before = torch.get_default_dtype()
    try:
        for default in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(default)
            got = torch.div(x.to(DEV), 4)
            assert got.dtype == torch.div(x, 4).dtype == default
            assert torch.equal(got.cpu(), torch.div(x, 4))
    finally:
        torch.set_default_dtype(before)


def _train(steps: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 3)).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, sizes = [], []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(5, 1, 8, 8, generator=g).to(DEV)
        y = torch.randint(0, 3, (5,), generator=g).to(DEV)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lr.mark_step()
        losses.append(loss.item())
        sizes.append(len(dispatch._RULE_MEMO))
    return losses, sizes


def test_memoized_answers_are_the_rules_answers(monkeypatch):
    """Training steps traced with the memo and again without it record the same graphs
    (the second run compiles nothing: each graph's key, output shapes and dtypes
    included, is in the cache) and give the same losses. The memo stops growing once the
    step repeats: Adam's per-step scalars share their entries."""
    lr.clear_cache()
    dispatch._RULE_MEMO.clear()
    with_memo, sizes = _train(4)
    assert sizes[1] == sizes[-1] > 0
    monkeypatch.setattr(dispatch, "PURE_RULES", set())
    monkeypatch.setattr(dispatch, "_RULE_CACHE", {})
    dispatch._RULE_MEMO.clear()
    lr.reset_metrics()
    without, sizes = _train(4)
    assert sizes[-1] == 0
    assert lr.metrics()["compiles"] == 0
    assert without == with_memo


def test_pure_rules_are_registered_rules():
    assert PURE_RULES and all(op in RULES for op in PURE_RULES)
    # a rule that reads a tensor's values stays out: ctc_loss's lengths as a tensor
    assert aten._ctc_loss.Tensor in RULES and aten._ctc_loss.Tensor not in PURE_RULES
