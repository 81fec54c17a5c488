"""Keyword spellings: every argument name torch accepts by keyword is one the op's rule
accepts (a rule that rejects one reports a false SI007), then the spellings found in
transformers (bloom's ``baddbmm(batch1=, batch2=)``, ``zeros(size=)``, ``new_zeros(size=)``)
against torch at random sizes, and the keyword misuses torch rejects."""

import ast
import inspect
import os
from collections import defaultdict

import pytest
import torch

from rule_harness import Input, check, check_error
from shapeinfer.ops.registry import FUNCTION_RULES, METHOD_RULES

_STUBS = os.path.join(os.path.dirname(torch.__file__), "_C")


def _stub_keywords(path: str, cls: str = None) -> dict:
    """{name: set of argument names} over every overload in one of torch's .pyi stubs,
    which are generated from the same signatures as torch's argument parser."""
    tree = ast.parse(open(path).read())
    body = tree.body if cls is None else next(n for n in tree.body
                                              if isinstance(n, ast.ClassDef) and n.name == cls).body
    out = defaultdict(set)
    for node in body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            # torch's parser takes a varargs list by its name too: zeros(size=(2, 3))
            names = [x.arg for x in a.args + a.kwonlyargs] + ([a.vararg.arg] if a.vararg else [])
            out[node.name].update(n for n in names if n != "self")
    return out


def _torch_keywords(obj, name: str, stubs: dict):
    if inspect.isfunction(obj):  # defined in Python (torch.split, F.softmax, Tensor.split)
        params = inspect.signature(obj, follow_wrapped=False).parameters.values()
        return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
    return stubs.get(name)


def _accepts(rule, name: str) -> bool:
    params = rule.signature.parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return True
    p = params.get(name)
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def _rule_rows():
    functions = _stub_keywords(os.path.join(_STUBS, "_VariableFunctions.pyi"))
    methods = _stub_keywords(os.path.join(_STUBS, "__init__.pyi"), "TensorBase")
    for fn, rule in FUNCTION_RULES.items():
        name = getattr(fn, "__name__", None)
        # builtins only where torch.<name> is that object (not an alias of another op)
        if inspect.isfunction(fn) or getattr(torch, name or "", None) is fn:
            yield f"{getattr(fn, '__module__', '')}.{name}", rule, _torch_keywords(fn, name, functions)
    for name, rule in METHOD_RULES.items():
        yield f"Tensor.{name}", rule, _torch_keywords(getattr(torch.Tensor, name, None), name, methods)


def test_rules_accept_every_keyword_torch_accepts():
    checked, missing = 0, []
    for where, rule, names in _rule_rows():
        if names is None:
            continue
        checked += 1
        missing += [f"{where} (rule {rule.name}): {n}=" for n in sorted(names) if not _accepts(rule, n)]
    assert checked > 150, checked
    assert not missing, "keywords torch accepts but the rule rejects:\n  " + "\n  ".join(missing)


# ---- the spellings against torch ----------------------------------------------------------


def keyword_spellings(x, b1, b2):
    B, T = x.shape
    a = torch.zeros(size=(B, T))
    b = torch.ones(size=[T, 2], dtype=torch.int64)
    c = torch.empty(size=x.shape)
    d = torch.rand(size=(B,))
    e = torch.randn(size=(T, B))
    f = torch.full(size=(B, T), fill_value=2)
    g = x.new_zeros(size=(T,))
    h = x.new_ones(size=(B, 3))
    i = x.new_empty(size=(T, T))
    j = x.new_full(size=(B,), fill_value=1.5)
    k = torch.randint(low=0, high=5, size=(B, T))
    m = torch.randint(5, size=(T,))
    n = torch.baddbmm(x.new_zeros(1, b1.shape[1], b2.shape[2]), batch1=b1, batch2=b2, beta=0.0, alpha=0.5)
    o = n.baddbmm(batch1=b1, batch2=b2)
    p = torch.addmm(input=x[0], mat1=x.t(), mat2=x)
    q = torch.bmm(input=b1, mat2=b2)
    r = torch.matmul(input=x, other=x.t())
    s = x.mm(mat2=x.t())
    t = torch.mv(input=x, vec=x[0])
    u = torch.dot(x[0], tensor=x[-1])
    v = torch.inner(x, other=x)
    w = torch.outer(input=x[0], vec2=x[:, 0])
    y = x.view(size=(T, B))
    z = x.reshape(shape=(-1,))
    aa = torch.reshape(x, shape=(T, -1))
    ab = x[:1].expand(size=(3, T))
    ac = x.repeat(repeats=(2, 1))
    ad = x.permute(dims=(1, 0))
    ae = torch.swapaxes(x, axis0=0, axis1=1)
    af = x.tile(dims=(2,))
    ag = torch.max(x, other=x.flip(0))
    ah = torch.full_like(x, fill_value=3)
    ai = x.split(split_size=1)
    aj = torch.tensor_split(x, sections=2, dim=1)
    ak = torch.tensor_split(x, indices=(1, 3), dim=1)
    al = torch.addbmm(x[0, 0], batch1=b1, batch2=b2)
    am = torch.addmv(x[:, 0], mat=x, vec=x[0])
    an = torch.addr(x, vec1=x[:, 0], vec2=x[0])
    return a


@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=str)
def test_keyword_spellings(dt):
    inputs = {"x": Input(("B", "T"), dt), "b1": Input(("N", 3, "K"), dt), "b2": Input(("N", "K", 4), dt)}
    check(keyword_spellings, inputs, {"B": (1, 6), "T": (2, 9), "N": (1, 5), "K": (1, 7)})


def tensor_split_indices(x):
    a = torch.tensor_split(x, (3, 1), dim=0)
    b = torch.tensor_split(x, [-1, 2])
    c = torch.tensor_split(x, [7, 9])
    d = x.tensor_split(3, dim=1)
    return a


def test_tensor_split_points():
    check(tensor_split_indices, {"x": (5, 4)}, [{}])


def view_dtype(x):
    a = x.view(torch.int8)
    b = x.view(dtype=torch.int32)
    c = x.view(torch.float16)
    d = x.view(torch.uint8)
    return a


def test_view_dtype_scales_the_last_dim():
    check(view_dtype, {"x": ("B", "T")}, {"B": (1, 6), "T": (1, 9)})


def view_dtype_wider(x):
    a = x.view(torch.float64)
    b = x.view(torch.complex128)
    return a


def test_view_dtype_to_a_wider_element():
    check(view_dtype_wider, {"x": ("B", 4)}, {"B": (1, 6)})


# ---- misuses torch rejects ------------------------------------------------------------------


def zeros_size_twice(x):
    a = torch.zeros(2, size=(3,))  # error: SI007
    return a


def zeros_size_int(x):
    a = torch.zeros(size=x.shape[0])  # error: SI007
    return a


def new_full_int(x):
    a = x.new_full(3, 1.0)  # error: SI007
    return a


def view_dtype_odd(x):
    a = x.new_zeros(x.shape[0], 3).view(torch.float64)  # error: SI111
    return a


def view_dtype_0d(x):
    a = x.sum().view(torch.int8)  # error: SI111
    return a


def addmm_input_too_big(x):
    a = torch.addmm(torch.zeros(2, 1, 1), x, x.t())  # error: SI114
    return a


def dot_of_matrices(x):
    a = torch.dot(x, x)  # error: SI161
    return a


def inner_last_dims(x):
    a = torch.inner(x, x.new_ones(2, x.shape[1] + 1))  # error: SI130
    return a


@pytest.mark.parametrize("model", [zeros_size_twice, zeros_size_int, new_full_int, view_dtype_odd, view_dtype_0d,
                                   addmm_input_too_big, dot_of_matrices, inner_last_dims], ids=lambda f: f.__name__)
def test_keyword_misuse_is_an_error(model):
    check_error(model, {"x": ("B", "T")}, {"B": 3, "T": 5})
