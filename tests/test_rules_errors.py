"""Definite shape errors: the analyzer reports an error with its stable code on the
line where torch itself raises for the same input (check_error runs torch first to
confirm that the error is real)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rule_harness import Input, check_error

SIZES = {"B": 3, "T": 5}


class WrongInFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.fc(x)  # error: SI131
        return y


def bad_cat(x, y):
    z = torch.cat([x, y], dim=1)  # error: SI115
    return z


def bad_stack(x, y):
    z = torch.stack([x, y[:, 1:]])  # error: SI115
    return z


def bad_permute(x):
    z = x.permute(0, 2, 1)  # error: SI112
    return z


def repeated_permute(x):
    z = x.permute(0, 0)  # error: SI202
    return z


def bad_matmul(x, w):
    z = x @ w  # error: SI130
    return z


def bad_bmm(x):
    z = torch.bmm(x, x)  # error: SI130
    return z


def bad_broadcast(x, y):
    z = x + y  # error: SI101
    return z


def bad_view(x):
    z = x.view(x.shape[0], 7)  # error: SI111
    return z


def two_holes(x):
    z = x.view(-1, -1)  # error: SI110
    return z


def bad_dim(x):
    z = x.sum(3)  # error: SI201
    return z


def bad_transpose(x):
    z = x.transpose(0, 2)  # error: SI201
    return z


class WrongChannels(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3)

    def forward(self, x):
        y = self.conv(x)  # error: SI141
        return y


class TooSmall(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 7)

    def forward(self, x):
        y = self.conv(x[:, :, 1:])  # error: SI143
        return y


class WrongNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(6)

    def forward(self, x):
        y = self.ln(x)  # error: SI150
        return y


class WrongBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(5)

    def forward(self, x):
        y = self.bn(x)  # error: SI150
        return y


class WrongRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 4)

    def forward(self, x):
        y, _ = self.lstm(x)  # error: SI152
        return y


class WrongAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)

    def forward(self, x):
        y, _ = self.attn(x, x, x)  # error: SI152
        return y


def float_embedding(x, w):
    y = F.embedding(x, w)  # error: SI151
    return y


def bad_index(x):
    y = x[:, 5]  # error: SI120
    return y


def too_many_indices(x):
    y = x[0, 0, 0]  # error: SI120
    return y


def bad_expand(x):
    y = x.expand(3, 4)  # error: SI114
    return y


def bad_einsum(x, w):
    y = torch.einsum("ij,jk->ik", x, w)  # error: SI132
    return y


def bad_sdpa(q, k):
    y = F.scaled_dot_product_attention(q, k, k[..., :1, :])  # error: SI153
    return y


def bad_pixel_shuffle(x):
    y = F.pixel_shuffle(x, 2)  # error: SI147
    return y


def bad_pool(x):
    y = F.max_pool2d(x, 3)  # error: SI144
    return y


def bad_split(x):
    a, b = x.split([2, 2], dim=1)  # error: SI116
    return a


def bad_masked_fill(x, m):
    y = x.masked_fill(m, 0.0)  # error: SI160
    return y


def mixed_matmul(x, w):
    y = x @ w  # error: SI160
    return y


def mixed_einsum(x, w):
    y = torch.einsum("bi,ij->bj", x, w)  # error: SI160
    return y


class MixedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)  # error: SI160
        return y


class MixedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 3, 1)

    def forward(self, x):
        y = self.conv(x)  # error: SI160
        return y


CASES = [
    (WrongInFeatures(), {"x": ("B", "T", 6)}),
    (bad_cat, {"x": ("B", "T", 4), "y": ("B", "T", 5)}),
    (bad_stack, {"x": ("B", "T"), "y": ("B", "T")}),
    (bad_permute, {"x": ("B", "T")}),
    (repeated_permute, {"x": ("B", "T")}),
    (bad_matmul, {"x": ("B", "T", 4), "w": (5, 3)}),
    (bad_bmm, {"x": ("B", 4, 5)}),
    (bad_broadcast, {"x": ("B", 4), "y": ("B", 5)}),
    (bad_view, {"x": ("B", 3, 5)}),
    (two_holes, {"x": ("B", "T")}),
    (bad_dim, {"x": ("B", "T")}),
    (bad_transpose, {"x": ("B", "T")}),
    (WrongChannels(), {"x": ("B", 3, 8, 8)}),
    (TooSmall(), {"x": ("B", 3, 7, "T")}),
    (WrongNorm(), {"x": ("B", "T", 5)}),
    (WrongBatchNorm(), {"x": ("B", 4, 6, 6)}),
    (WrongRNN(), {"x": ("T", "B", 5)}),
    (WrongAttention(), {"x": ("T", "B", 6)}),
    (float_embedding, {"x": ("B", "T"), "w": (10, 4)}),
    (bad_index, {"x": ("B", 4)}),
    (too_many_indices, {"x": ("B", "T")}),
    (bad_expand, {"x": (2, 4)}),
    (bad_einsum, {"x": ("B", 4), "w": (5, "T")}),
    (bad_sdpa, {"q": ("B", "T", 4), "k": ("B", "T", 5)}),
    (bad_pixel_shuffle, {"x": ("B", 6, 4, 4)}),
    (bad_pool, {"x": ("B", "T")}),
    (bad_split, {"x": ("B", 5)}),
    (bad_masked_fill, {"x": ("B", "T"), "m": Input(("B", "T"), torch.int64)}),
    (mixed_matmul, {"x": ("B", 4), "w": Input((4, "T"), torch.float64)}),
    (mixed_einsum, {"x": Input(("B", 4), torch.int64), "w": (4, "T")}),
    (MixedLinear(), {"x": Input(("B", 4), torch.float64)}),
    (MixedConv(), {"x": Input(("B", 4, "T"), torch.float64)}),
]


def _name(model):
    return type(model).__name__ if isinstance(model, nn.Module) else model.__name__


@pytest.mark.parametrize("model,inputs", CASES, ids=[_name(m) for m, _ in CASES])
def test_definite_error_is_reported_where_torch_raises(model, inputs):
    check_error(model, inputs, SIZES)


def view_zero_ambiguous(x):
    z = x[:, :0].view(0, -1)  # error: SI110
    return z


def view_zero_with_elements(x):
    z = x.view(0, -1)  # error: SI110
    return z


def view_negative_size(x):
    z = x.view(-2, x.shape[1])  # error: SI111
    return z


@pytest.mark.parametrize("model", [view_zero_ambiguous, view_zero_with_elements, view_negative_size],
                         ids=lambda f: f.__name__)
def test_view_minus_one_with_zero_sizes_is_an_error(model):
    check_error(model, {"x": ("B", "T")}, SIZES)
