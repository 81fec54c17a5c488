"""The rule tables: one row per op, found by the op's name.

``op`` registers a shape rule for several spellings of the same torch operation at
once (``torch.relu``, ``F.relu``, ``Tensor.relu``), refusing duplicates.
``module_rule`` registers a rule for ``nn.Module`` types, which read their
hyper-parameters from the live module object.

A rule is a pure function ``rule(ctx, *args, **kwargs) -> Value`` over abstract values
(see ``values``); it raises ``ShapeError`` for a definite error and returns ``Unknown``
with a reason when it cannot decide.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

FUNCTION_RULES: dict[Any, "Rule"] = {}
METHOD_RULES: dict[str, "Rule"] = {}
MODULE_RULES: dict[type, "Rule"] = {}


@dataclass(frozen=True)
class Rule:
    name: str
    fn: Callable
    signature: inspect.Signature


class DuplicateRule(Exception):
    pass


def _register(table: dict, key, rule: Rule) -> None:
    if key in table and table[key].fn is not rule.fn:
        raise DuplicateRule(f"{key!r} already has the rule {table[key].name}")
    table[key] = rule


def op(name: str, *functions, methods: tuple = ()):
    """Register ``fn`` as the shape rule of ``functions`` (objects) and tensor ``methods``
    (names). Functions may be given as None where a spelling does not exist in this
    torch version."""

    def decorate(fn: Callable) -> Callable:
        rule = Rule(name, fn, inspect.signature(fn))
        for f in functions:
            if f is not None:
                _register(FUNCTION_RULES, f, rule)
        for m in methods:
            _register(METHOD_RULES, m, rule)
        return fn

    return decorate


def module_rule(*module_types: type):
    def decorate(fn: Callable) -> Callable:
        rule = Rule(fn.__name__, fn, inspect.signature(fn))
        for t in module_types:
            _register(MODULE_RULES, t, rule)
        return fn

    return decorate


def lookup_function(fn) -> "Rule | None":
    try:
        return FUNCTION_RULES.get(fn)
    except TypeError:  # unhashable callables
        return None
