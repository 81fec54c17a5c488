"""Less common rules against torch: where(condition), Tensor.unfold, F.unfold, losses,
distances, one_hot, clamp family with tensors."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from rule_harness import Input, check


def where_cond(x):
    idx = torch.where(x > 0)  # unknown: SI003
    rows = idx[0]  # unknown
    return rows


def test_where_with_condition_only_is_data_dependent():
    check(where_cond, {"x": ("B", "T")}, {"B": (1, 5), "T": (1, 8)})


def windows(x):
    a = x.unfold(1, 3, 1)
    b = x.unfold(-1, 2, 2)
    c = x.unfold(0, 1, 1)
    d = F.unfold(x.unsqueeze(1), kernel_size=2)
    e = F.unfold(x.unsqueeze(1), kernel_size=(2, 3), stride=2, padding=1)
    return a


def test_sliding_windows():
    check(windows, {"x": ("B", "T", "D")}, {"B": (1, 4), "T": (3, 11), "D": (3, 9)})


class Losses(nn.Module):
    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()
        self.ce_none = nn.CrossEntropyLoss(reduction="none")
        self.mse = nn.MSELoss(reduction="none")
        self.bce = nn.BCEWithLogitsLoss()

    def forward(self, logits, target, y):
        a = self.ce(logits, target)
        b = self.ce_none(logits, target)
        c = F.cross_entropy(logits, target, reduction="sum")
        d = F.nll_loss(F.log_softmax(logits, -1), target, reduction="none")
        e = self.mse(logits, y)
        f = F.mse_loss(logits, y)
        g = self.bce(logits, y)
        h = F.l1_loss(logits, y, reduction="none")
        i = F.cross_entropy(logits.unsqueeze(-1), target.unsqueeze(-1), reduction="none")
        j = F.kl_div(logits.log_softmax(-1), y.softmax(-1), reduction="batchmean")
        return a


def test_losses():
    check(Losses(), {"logits": ("B", "C"), "target": Input(("B",), torch.int64, high="C"), "y": ("B", "C")},
          {"B": (1, 6), "C": (2, 7)})


def distances(x, y):
    a = F.cosine_similarity(x, y, dim=-1)
    b = F.pairwise_distance(x, y)
    c = torch.cdist(x, y)
    d = F.pairwise_distance(x, y, keepdim=True)
    e = torch.cosine_similarity(x, y[:, :1], dim=1)
    return a


def test_distances():
    check(distances, {"x": ("B", "T", "D"), "y": ("B", "T", "D")}, {"B": (1, 4), "T": (1, 6), "D": (1, 6)})


def tensor_args(x, lo, hi):
    a = torch.clamp(x, lo, hi)
    b = x.clamp(max=hi)
    c = torch.minimum(x, hi)
    d = torch.addcmul(x, lo, hi, value=0.5)
    e = F.one_hot(x.argmax(-1), x.shape[-1])
    return a


def test_clamp_with_tensor_bounds():
    check(tensor_args, {"x": ("B", "T", "D"), "lo": ("T", 1), "hi": ("D",)},
          {"B": (1, 4), "T": (1, 6), "D": (1, 6)})
