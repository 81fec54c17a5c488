"""``control_flow.size_arithmetic``: what the analysis vouches for about forward's size
arithmetic (``shapeinfer/size_audit.py``), which the runtime relies on to replay a graph
at sizes it never traced. Every floor or remainder of a symbol must be caught, inline
ones included, and every relation between symbols listed."""

import torch
import torch.nn as nn

import shapeinfer


def audit(module, shape=(2, 9, 4), dims=("B", "T", None), name="x"):
    plan = shapeinfer.analyze(module, args=(torch.randn(*shape),), dims={name: dims})
    return plan.to_json()["control_flow"]["size_arithmetic"]


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def scores(x):
    return (x @ x.transpose(1, 2)).reshape(x.shape[0], -1)[:, 1:]


def halve(x):
    return x[:, : x.shape[1] // 2]


def roll_third(x):
    return torch.roll(x, x.shape[1] // 3, 1)


def narrow_mod(x):
    return x.narrow(1, x.shape[1] % 4, 2)


def causal_sum(x):
    T = x.shape[1]
    return x @ torch.tril(torch.ones(T, T))       # [B, T] and [T, T]: no B*T*T anywhere


def test_polynomial_sizes_with_their_degrees():
    sa = audit(Fn(scores))
    assert sa["polynomial"] and sa["reasons"] == []
    assert sa["degree"] == {"B": 1, "T": 2}       # the T x T scores
    assert sa["total_degree"] == 3                # B*T*T elements
    # the keys are a contract (total_degree was added; old plans lack it)
    assert set(sa) == {"polynomial", "reasons", "conditions", "degree", "total_degree"}


def test_total_degree_bounds_monomials_jointly():
    sa = audit(Fn(causal_sum), shape=(3, 6), dims=("B", "T"))
    assert sa["polynomial"]
    assert sa["degree"] == {"B": 1, "T": 2}
    assert sa["total_degree"] == 2                # below the box's 1 + 2
    # with one symbol only, the total is that symbol's degree
    one = audit(Fn(scores), shape=(2, 9, 4), dims=(None, "T", None))
    assert one["degree"] == {"T": 2} and one["total_degree"] == 2


def test_floors_and_remainders_are_caught_even_inline():
    for fn, text in [(halve, "T//2"), (roll_third, "T//3"), (narrow_mod, "T%4")]:
        sa = audit(Fn(fn))
        assert not sa["polynomial"], text
        assert any(text in r.replace(" ", "") for r in sa["reasons"]), (text, sa["reasons"])


def test_conditions_and_choices():
    class M(nn.Module):
        def forward(self, x):
            T = x.shape[1]
            y = x * 2 if T > 5 else x
            return y[:, : min(T, 7)]

    sa = audit(M())
    assert sa["polynomial"]
    assert "T > 5" in sa["conditions"]
    assert "T <= 7" in sa["conditions"] or "7 <= T" in sa["conditions"]


def test_conv_output_sizes_are_floors():
    sa = audit(nn.Conv1d(4, 4, 3, stride=2), shape=(2, 4, 11), dims=("B", None, "L"),
               name="input")
    assert not sa["polynomial"]


def test_a_lambda_made_by_python_is_interpreted():
    # (a lambda kept as a module attribute used to fail: its body is an expression)
    plan = shapeinfer.analyze(Fn(lambda x: x[:, 1:] * 2), args=(torch.randn(2, 9, 4),),
                              dims={"x": ("B", "T", None)})
    assert plan.shape_only
    assert plan.to_json()["control_flow"]["size_arithmetic"]["polynomial"]
    assert [d.code for d in plan.diagnostics] == []
    two = shapeinfer.analyze(Fn((lambda x: x, lambda x: x[:, :2])[1]), args=(torch.randn(2, 9, 4),),
                             dims={"x": ("B", "T", None)})
    assert [d.code for d in two.diagnostics] == ["SI006"]
