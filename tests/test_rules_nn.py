"""nn layers and their functional forms against torch: convolutions (stride, padding,
dilation, groups, transposed with output_padding), pooling (ceil_mode, adaptive),
normalization, embedding, dropout, activations, upsampling, padding, pixel shuffle,
linear/bilinear, containers."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rule_harness import Input, check


class Conv1(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(3, 8, 3)
        self.b = nn.Conv1d(8, 4, 5, stride=2, padding=2, dilation=2)
        self.c = nn.Conv1d(4, 6, 3, padding="same", groups=2)
        self.d = nn.ConvTranspose1d(6, 5, 4, stride=3, padding=1, output_padding=2)
        self.e = nn.Conv1d(5, 5, 3, padding=1, padding_mode="reflect")

    def forward(self, x):
        a = self.a(x)
        b = self.b(a)
        c = self.c(b)
        d = self.d(c)
        e = self.e(d)
        f = F.conv1d(x, self.a.weight, stride=2)
        return e


def test_conv1d():
    check(Conv1(), {"x": ("B", 3, "L")}, {"B": (1, 4), "L": (12, 40)})


class Conv2(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b = nn.Conv2d(8, 8, (3, 5), stride=(1, 2), padding=(1, 0), dilation=(2, 1), groups=4)
        self.c = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.d = nn.ConvTranspose2d(4, 2, (2, 3), stride=(2, 1), dilation=2, groups=2)
        self.e = nn.Conv2d(2, 6, 1, bias=False)
        self.f = nn.Conv2d(6, 6, 3, padding=1, padding_mode="circular")

    def forward(self, x):
        a = self.a(x)
        b = self.b(a)
        c = self.c(b)
        d = self.d(c)
        e = self.e(d)
        f = self.f(e)
        g = F.conv2d(x, self.a.weight, self.a.bias, 1, "valid")
        h = F.conv_transpose2d(c, self.d.weight, stride=(2, 1), dilation=2, groups=2)
        i = self.a(x[0])
        return f


def test_conv2d():
    check(Conv2(), {"x": ("B", 3, "H", "W")}, {"B": (1, 3), "H": (12, 30), "W": (14, 31)})


class Conv3(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(2, 4, 3, stride=(1, 2, 2), padding=1)
        self.b = nn.ConvTranspose3d(4, 2, 2, stride=2)

    def forward(self, x):
        a = self.a(x)
        b = self.b(a)
        return b


def test_conv3d():
    check(Conv3(), {"x": ("B", 2, "D", "H", "W")}, {"B": (1, 2), "D": (3, 6), "H": (4, 9), "W": (4, 9)})


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.mp = nn.MaxPool2d(3, stride=2, padding=1)
        self.mpc = nn.MaxPool2d(2, ceil_mode=True)
        self.ap = nn.AvgPool2d(3, stride=2, ceil_mode=True, padding=1)
        self.aap = nn.AdaptiveAvgPool2d((3, 4))
        self.aapn = nn.AdaptiveAvgPool2d((None, 2))
        self.amp = nn.AdaptiveMaxPool2d(1)
        self.mpi = nn.MaxPool2d(2, return_indices=True)
        self.mp1 = nn.MaxPool1d(3, stride=2, ceil_mode=True)
        self.ap1 = nn.AvgPool1d(2)
        self.mp3 = nn.MaxPool3d(2)

    def forward(self, x):
        a = self.mp(x)
        b = self.mpc(x)
        c = self.ap(x)
        d = self.aap(x)
        e = self.aapn(x)
        f = self.amp(x)
        g, gi = self.mpi(x)
        h = F.max_pool2d(x, 2, 2)
        i = F.avg_pool2d(x, (2, 3), stride=(1, 2), ceil_mode=True)
        j = F.adaptive_avg_pool2d(x, 1)
        k = F.adaptive_max_pool2d(x, (2, 2))
        m = self.mp1(x.flatten(2))
        n = self.ap1(x.flatten(2))
        o = F.max_pool1d(x.flatten(2), 4, ceil_mode=True)
        p = self.mp3(x.unsqueeze(1))
        q = F.adaptive_avg_pool1d(x.flatten(2), 5)
        r = F.max_pool2d(x, 3, 2, 1, 1, True)
        s = F.lp_pool2d(x, 2, 2)
        return a


def test_pooling_ceil_mode_and_adaptive():
    check(Pools(), {"x": ("B", 3, "H", "W")}, {"B": (1, 3), "H": (4, 17), "W": (4, 19)}, n=6)


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn1 = nn.BatchNorm1d(4)
        self.bn2 = nn.BatchNorm2d(4)
        self.ln = nn.LayerNorm(6)
        self.ln2 = nn.LayerNorm([5, 6])
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.inorm1 = nn.InstanceNorm1d(4)
        self.lrn = nn.LocalResponseNorm(2)
        self.rms = nn.RMSNorm(6)

    def forward(self, x):
        a = self.bn2(x)
        b = self.bn1(x.flatten(2))
        c = self.bn1(x.mean((2, 3)))
        d = self.ln(x)
        e = self.ln2(x)
        f = self.gn(x)
        g = self.inorm(x)
        h = self.inorm1(x.flatten(2))
        i = F.layer_norm(x, (6,))
        j = F.batch_norm(x, self.bn2.running_mean, self.bn2.running_var)
        k = F.group_norm(x, 2)
        m = F.instance_norm(x)
        n = self.lrn(x)
        o = self.rms(x)
        p = F.normalize(x, dim=1)
        return a


def test_normalization():
    check(Norms(), {"x": ("B", 4, 5, 6)}, {"B": (2, 5)})


def test_normalization_double():
    check(Norms().double(), {"x": Input(("B", 4, 5, 6), torch.float64)}, {"B": (2, 5)})


class Misc(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.drop = nn.Dropout(0.1)
        self.drop2 = nn.Dropout2d(0.1)
        self.acts = nn.ModuleList([nn.ReLU(), nn.GELU(), nn.Tanh(), nn.Sigmoid(), nn.LeakyReLU(0.2),
                                   nn.ELU(), nn.SiLU(), nn.Softplus(), nn.Hardswish(), nn.PReLU()])
        self.sm = nn.Softmax(dim=-1)
        self.lsm = nn.LogSoftmax(dim=1)
        self.flat = nn.Flatten()
        self.unflat = nn.Unflatten(1, (2, 3))
        self.ident = nn.Identity()
        self.glu = nn.GLU()

    def forward(self, idx):
        e = self.emb(idx)
        f = F.embedding(idx, self.emb.weight)
        d = self.drop(e)
        d2 = self.drop2(e.unsqueeze(-1))
        for act in self.acts:
            d = act(d)
        a = self.sm(d)
        b = self.lsm(d)
        c = self.flat(d)
        g = self.unflat(d.transpose(1, 2))
        h = self.ident(g)
        i = self.glu(d)
        j = F.dropout(d, 0.5, training=False)
        k = F.one_hot(idx.long(), 10)
        return a


@pytest.mark.parametrize("dt", [torch.int64, torch.int32], ids=str)
def test_embedding_dropout_activations(dt):
    check(Misc(), {"idx": Input(("B", "T"), dt, high=10)}, {"B": (1, 5), "T": (1, 9)})


class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 4, mode="mean")
        self.bag_last = nn.EmbeddingBag(10, 4, include_last_offset=True)

    def forward(self, idx, rows):
        offsets = torch.arange(0, idx.shape[0], 2)
        a = self.bag(idx, offsets)
        b = self.bag_last(idx, offsets)   # the last offset ends the last bag
        c = self.bag(rows)
        d = self.bag_last(rows)           # 2-d input: one bag per row either way
        return a


def test_embedding_bag():
    check(Bags(), {"idx": Input(("T",), torch.int64, high=10),
                   "rows": Input(("B", "L"), torch.int64, high=10)},
          {"T": (3, 9), "B": (1, 5), "L": (1, 4)})


class Resample(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.up2 = nn.Upsample(size=(7, 5), mode="bilinear", align_corners=False)
        self.up3 = nn.Upsample(scale_factor=(1.5, 0.5))
        self.ps = nn.PixelShuffle(2)
        self.pu = nn.PixelUnshuffle(2)
        self.rp = nn.ReflectionPad2d((1, 2, 0, 3))
        self.zp = nn.ZeroPad2d(2)
        self.cp = nn.ConstantPad1d((3, 1), 0.5)
        self.rep = nn.ReplicationPad2d(1)

    def forward(self, x):
        a = self.up(x)
        b = self.up2(x)
        c = self.up3(x)
        d = self.ps(x)
        e = self.pu(a)
        f = self.rp(x)
        g = self.zp(x)
        h = self.cp(x.flatten(2))
        i = self.rep(x)
        j = F.interpolate(x, scale_factor=3)
        k = F.interpolate(x, size=(4, 6), mode="bilinear", align_corners=True)
        m = F.interpolate(x, scale_factor=0.5, mode="area")
        n = F.pad(x, (1, 1))
        o = F.pad(x, (0, 1, 2, 3), mode="reflect")
        p = F.pad(x, [2, 2, 1, 1, 0, 1])
        q = F.interpolate(x.flatten(2), scale_factor=2.5, mode="linear")
        r = F.interpolate(x, size=x.shape[-1])
        return a


def test_upsample_pad_pixel_shuffle():
    check(Resample(), {"x": ("B", 4, "H", "W")}, {"B": (1, 3), "H": (4, 11), "W": (4, 13)}, n=5)


class Linears(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.nb = nn.Linear(6, 3, bias=False)
        self.bil = nn.Bilinear(6, 5, 7)
        self.seq = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
        self.md = nn.ModuleDict({"p": nn.Linear(6, 5), "q": nn.Linear(5, 1)})
        self.ml = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x, y):
        a = self.fc(x)
        b = self.nb(x)
        c = self.bil(x, y)
        d = self.seq(x)
        e = self.md["q"](self.md["p"](x))
        h = x
        for layer in self.ml:
            h = layer(h)
        f = F.linear(x, self.fc.weight, self.fc.bias)
        g = F.bilinear(x, y, self.bil.weight)
        i = self.seq[0](x)
        j = self.fc(x[0, 0])
        return a


def test_linear_bilinear_containers():
    check(Linears(), {"x": ("B", "T", 6), "y": ("B", "T", 5)}, {"B": (1, 5), "T": (1, 7)})
