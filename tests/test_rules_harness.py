"""The rule harness itself: it must catch a wrong shape, a wrong dtype, and an
unknown shape, each with its own message, and produce varied size sets."""

from dataclasses import replace

import pytest
import torch

from rule_harness import check, size_sets
from shapeinfer.ops.common import like
from shapeinfer.ops.registry import FUNCTION_RULES


def adds(x):
    a = x + 1
    b = (a, a.long())
    return b


@pytest.fixture
def patched_add(monkeypatch):
    rule = FUNCTION_RULES[torch.add]

    def patch(fn):
        monkeypatch.setitem(FUNCTION_RULES, torch.add, replace(rule, fn=fn))

    return patch


RANGES = {"B": (1, 5), "T": (2, 9)}


def test_correct_rules_pass():
    r = check(adds, {"x": ("B", "T")}, RANGES)
    assert r.report.exact == r.report.total > 0 and not r.dtype_problems


def test_wrong_dtype_is_caught(patched_add):
    patched_add(lambda ctx, a, b, *r, **k: like(a, a.shape, torch.float64))
    with pytest.raises(AssertionError, match="^WRONG"):
        check(adds, {"x": ("B", "T")}, RANGES)


def test_wrong_shape_is_caught(patched_add):
    patched_add(lambda ctx, a, b, *r, **k: like(a, a.shape[::-1]))
    with pytest.raises(AssertionError, match="^WRONG"):
        check(adds, {"x": ("B", "T")}, RANGES)


def test_unknown_is_not_exact(patched_add):
    patched_add(lambda ctx, a, b, *r, **k: like(a, (None,) * len(a.shape)))
    with pytest.raises(AssertionError, match="^UNKNOWN"):
        check(adds, {"x": ("B", "T")}, RANGES)
    check(adds, {"x": ("B", "T")}, RANGES, allow_unknown=("a", "b"))


def test_size_sets_vary():
    sets = size_sets({"B": (1, 8), "T": (2, 20), "D": [4, 8, 12]}, n=4, seed=3)
    assert len(sets) == 4 and len({tuple(s.items()) for s in sets}) == 4
    assert all(len(set(s.values())) == 3 for s in sets)
    assert sets[1]["T"] in (2, 3, 5, 7, 11, 13, 17, 19)
    assert sets[2]["T"] % 2 == 1
