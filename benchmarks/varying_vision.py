"""Vision architectures at varying image sizes: how many graphs compile, how many of them
at an exact shape, and whether the losses are eager torch's.

    python benchmarks/varying_vision.py [--steps 8] [--only vit,fpn,...] [--write]

Nine small models as their papers' code writes them, trained unmodified with SGD on
batches of 2 images whose height and width change every step (drawn uniform in [24, 64],
seed 0; H and W marked dynamic with ``lr.mark_dynamic``, power-of-two buckets):

* ``vit``: patch embedding (stride 4), a 4 x 4 grid of position embeddings resized
  bicubically to the patch grid, a class token put before the flattened grid, two
  pre-norm encoder layers, the class token's logits;
* ``fpn``: three stride-2 convolutions, a top-down path resizing each level to the size
  of the next (``interpolate(p4, size=c3.shape[-2:])``, bilinear), a per-pixel head
  resized back to the image;
* ``attention``: a diffusion U-Net's block: group norm, attention over the H * W pixels
  (``scaled_dot_product_attention``), then ``nn.MultiheadAttention`` over them;
* ``detr``: two stride-2 convolutions, DETR's sine position embedding from a mask,
  ``nn.Transformer`` over the pixels with five learned queries;
* ``mae``: patchify by views (``reshape(B, C, H // 4, 4, W // 4, 4)``), a linear map,
  unpatchify, reconstruction loss (sizes multiples of 4);
* ``unet``: the image padded right and below up to a multiple of 8 (``F.pad(x, (0, (8 -
  W % 8) % 8, ...))``, as U-Nets do), two stride-2 convolutions, two transposed ones,
  the output cropped back to the image (``y[..., :H, :W]``), a per-pixel loss;
* ``swin``: a Swin block's core: patch embedding (stride 2), tokens padded up to a
  multiple of the window (4), split into windows, ``nn.MultiheadAttention`` inside each,
  merged back, cropped to the grid and added to the tokens;
* ``style``: fast style transfer's image transformation network
  (``examples/fast_neural_style.py``, channels 4, 8, 8): reflection pads before every
  convolution, two stride-2 ones, five residual blocks, two nearest upsamplings back,
  instance norms; its output against its input (sizes multiples of 4);
* ``yolo``: YOLOv5's stem and neck in brief: space-to-depth by step-2 slices (``Focus``:
  ``cat([x[..., ::2, ::2], x[..., 1::2, ::2], ...], 1)``), a stride-2 convolution, a
  max pool of stride 1 beside its input (SPPF's), nearest upsampling by 2 and a cat with
  the stem's map, a per-pixel loss against a step-2 slice of the image (sizes multiples
  of 4).

Reported per model: steps, compiles, exact-shape compiles among them, the largest relative
difference of a loss from eager torch's, and the median step of each (lazy_runtime's
includes its compiles: the point here is how few there are). torch uses one intra-op
thread.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import math
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lazy_runtime as lr  # noqa: E402

HEADING = "## Vision architectures at varying image sizes"
DATE = datetime.date.today().isoformat()


class ViT(nn.Module):
    def __init__(self, d=32, classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, 4)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, d, 4, 4) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.patch(x)
        pos = F.interpolate(self.pos, size=h.shape[-2:], mode="bicubic", align_corners=False)
        h = (h + pos).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], 1)
        return self.head(self.enc(h)[:, 0])


class FPN(nn.Module):
    def __init__(self, c=8, classes=2):
        super().__init__()
        self.c2, self.c3, self.c4 = (nn.Conv2d(i, c, 3, 2, 1) for i in (3, c, c))
        self.l2, self.l3, self.l4 = (nn.Conv2d(c, c, 1) for _ in range(3))
        self.head = nn.Conv2d(c, classes, 3, 1, 1)

    def forward(self, x):
        c2 = F.relu(self.c2(x))
        c3 = F.relu(self.c3(c2))
        c4 = F.relu(self.c4(c3))
        up = dict(mode="bilinear", align_corners=False)
        p3 = self.l3(c3) + F.interpolate(self.l4(c4), size=c3.shape[-2:], **up)
        p2 = self.l2(c2) + F.interpolate(p3, size=c2.shape[-2:], **up)
        return F.interpolate(self.head(p2), size=x.shape[-2:], **up)


class Attention(nn.Module):
    def __init__(self, c=8, classes=3):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.norm = nn.GroupNorm(2, c)
        self.qkv = nn.Conv2d(c, 3 * c, 1)
        self.mha = nn.MultiheadAttention(c, 2, batch_first=True)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        h = self.conv(x)
        B, C, H, W = h.shape
        q, k, v = (t.reshape(B, 2, C // 2, H * W).transpose(-1, -2)
                   for t in self.qkv(self.norm(h)).chunk(3, 1))
        h = h + F.scaled_dot_product_attention(q, k, v).transpose(-1, -2).reshape(B, C, H, W)
        t = h.flatten(2).transpose(1, 2)
        t = t + self.mha(t, t, t, need_weights=False)[0]
        return self.head(t.mean(1))


class DETR(nn.Module):
    def __init__(self, d=16, queries=5, classes=4):
        super().__init__()
        self.b1, self.b2 = nn.Conv2d(3, d, 3, 2, 1), nn.Conv2d(d, d, 3, 2, 1)
        self.t = nn.Transformer(d, 2, 1, 1, 32, dropout=0.0, batch_first=True)
        self.q = nn.Parameter(torch.randn(queries, d))
        self.cls = nn.Linear(d, classes)

    @staticmethod
    def positions(mask, d):
        not_mask = ~mask
        y = not_mask.cumsum(1, dtype=torch.float32)
        x = not_mask.cumsum(2, dtype=torch.float32)
        y = y / (y[:, -1:, :] + 1e-6) * 2 * math.pi
        x = x / (x[:, :, -1:] + 1e-6) * 2 * math.pi
        dim_t = 10000 ** (2 * (torch.arange(d // 2, device=mask.device) // 2) / (d // 2))
        px, py = x[..., None] / dim_t, y[..., None] / dim_t
        px = torch.stack((px[..., 0::2].sin(), px[..., 1::2].cos()), 4).flatten(3)
        py = torch.stack((py[..., 0::2].sin(), py[..., 1::2].cos()), 4).flatten(3)
        return torch.cat((py, px), 3).permute(0, 3, 1, 2)

    def forward(self, img):
        f = F.relu(self.b2(F.relu(self.b1(img))))
        B, C, H, W = f.shape
        mask = torch.zeros(B, H, W, dtype=torch.bool, device=img.device)
        src = (f + self.positions(mask, C)).flatten(2).transpose(1, 2)
        return self.cls(self.t(src, self.q.expand(B, -1, -1)))


class MAE(nn.Module):
    def __init__(self, p=4, d=16):
        super().__init__()
        self.p = p
        self.enc, self.dec = nn.Linear(3 * p * p, d), nn.Linear(d, 3 * p * p)

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.p
        t = x.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1).reshape(
            B, (H // p) * (W // p), p * p * C)
        y = self.dec(torch.tanh(self.enc(t)))
        return y.reshape(B, H // p, W // p, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(
            B, C, H, W)


class UNet(nn.Module):
    def __init__(self, c=8, classes=2):
        super().__init__()
        self.d1, self.d2 = nn.Conv2d(3, c, 3, 2, 1), nn.Conv2d(c, c, 3, 2, 1)
        self.u1, self.u2 = nn.ConvTranspose2d(c, c, 2, 2), nn.ConvTranspose2d(c, classes, 2, 2)

    def forward(self, x):
        H, W = x.shape[-2:]
        x = F.pad(x, (0, (8 - W % 8) % 8, 0, (8 - H % 8) % 8))
        h = F.relu(self.d2(F.relu(self.d1(x))))
        return self.u2(F.relu(self.u1(h)))[..., :H, :W]


class Swin(nn.Module):
    def __init__(self, c=16, ws=4, classes=3):
        super().__init__()
        self.ws = ws
        self.embed = nn.Conv2d(3, c, 2, 2)
        self.norm = nn.LayerNorm(c)
        self.attn = nn.MultiheadAttention(c, 2, batch_first=True)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 1)
        B, H, W, C = h.shape
        ws = self.ws
        t = F.pad(self.norm(h), (0, 0, 0, (ws - W % ws) % ws, 0, (ws - H % ws) % ws))
        Hp, Wp = t.shape[1], t.shape[2]
        w = t.view(B, Hp // ws, ws, Wp // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(
            -1, ws * ws, C)
        w = self.attn(w, w, w, need_weights=False)[0]
        t = w.view(B, Hp // ws, Wp // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(
            B, Hp, Wp, C)
        return self.head((h + t[:, :H, :W]).mean((1, 2)))


class YOLO(nn.Module):
    def __init__(self, c=8, classes=3):
        super().__init__()
        self.focus = nn.Conv2d(12, c, 3, 1, 1)
        self.down = nn.Conv2d(c, 2 * c, 3, 2, 1)
        self.lateral = nn.Conv2d(2 * c, c, 1)
        self.head = nn.Conv2d(3 * c, classes, 1)

    def forward(self, x):
        x = torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                       x[..., 1::2, 1::2]], 1)
        p3 = F.silu(self.focus(x))
        s = self.lateral(F.silu(self.down(p3)))
        s = torch.cat([s, F.max_pool2d(s, 5, 1, 2)], 1)
        return self.head(F.silu(torch.cat([F.interpolate(s, scale_factor=2.0), p3], 1)))


def _style_net():
    sys.path.insert(0, str(ROOT / "examples"))
    from fast_neural_style import TransformerNet
    return TransformerNet((4, 8, 8))


MODELS = {   # name: (model, the loss of its output given the image)
    "vit": (ViT, lambda out, x, y: F.cross_entropy(out, y)),
    "fpn": (FPN, lambda out, x, y: F.cross_entropy(out, (x[:, 0] > 0).long())),
    "attention": (Attention, lambda out, x, y: F.cross_entropy(out, y % 3)),
    "detr": (DETR, lambda out, x, y: F.cross_entropy(out.reshape(-1, 4),
                                                     y.repeat_interleave(5) % 4)),
    "mae": (MAE, lambda out, x, y: (out - x).square().mean()),
    "unet": (UNet, lambda out, x, y: F.cross_entropy(out, (x[:, 0] > 0).long())),
    "swin": (Swin, lambda out, x, y: F.cross_entropy(out, y % 3)),
    "style": (_style_net, lambda out, x, y: (out - x).square().mean()),
    "yolo": (YOLO, lambda out, x, y: F.cross_entropy(out, (x[:, 0, ::2, ::2] > 0).long())),
}


def sizes(steps: int, multiple: int) -> list:
    rng = random.Random(0)
    return [(rng.randint(24 // multiple, 64 // multiple) * multiple,
             rng.randint(24 // multiple, 64 // multiple) * multiple) for _ in range(steps)]


def side_by_side(make, loss_of, batches, mark, loss_on=None) -> dict:
    """A model from ``make()`` and its lazy copy trained with SGD on ``batches`` ((x, y)
    pairs), ``mark(x)`` the lazy step's input: compiles, exact ones, the largest loss
    difference and the median steps (``varying_audio.py``, ``varying_text.py`` too).
    ``loss_on(model, batch, dev)``: a batch's loss another way (``dev``: the lazy device
    to move it to, None eagerly; ``varying_hf.py``'s keyword batches)."""
    def pairs(model, batch, dev):
        x, y = batch
        if dev is not None:
            x, y = mark(x).to(dev), y.to(dev)
        return loss_of(model(x), x, y)
    loss_on = loss_on or pairs
    torch.manual_seed(0)
    eager = make()
    dev = lr.device()
    lazy = copy.deepcopy(eager).to(dev)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, lazy)]
    lr.clear_cache()
    lr.reset_metrics()
    times = {"eager": [], "lazy": []}
    worst = 0.0
    for batch in batches:
        losses = []
        for kind, model, opt in (("eager", eager, opts[0]), ("lazy", lazy, opts[1])):
            t0 = time.perf_counter()
            loss = loss_on(model, batch, dev if kind == "lazy" else None)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if kind == "lazy":
                lr.mark_step()
            losses.append(loss.item())
            times[kind].append(time.perf_counter() - t0)
        worst = max(worst, abs(losses[1] - losses[0]) / max(abs(losses[0]), 1e-12))
    m = lr.metrics()
    return {"steps": len(batches), "compiles": m["compiles"],
            "exact": sum(m["exact_compiles"].values()), "worst": worst,
            "eager": statistics.median(times["eager"]), "lazy": statistics.median(times["lazy"]),
            "why": sorted(m["exact_compiles"])}


def run(name: str, steps: int) -> dict:
    make, loss_of = MODELS[name]
    batches = []
    four = ("mae", "vit", "style", "yolo")
    for step, (H, W) in enumerate(sizes(steps, 4 if name in four else 1)):
        g = torch.Generator().manual_seed(step)
        batches.append((torch.randn(2, 3, H, W, generator=g),
                        torch.randint(0, 5, (2,), generator=g)))
    return side_by_side(make, loss_of, batches,
                        lambda x: lr.mark_dynamic(lr.mark_dynamic(x, 2, "H"), 3, "W"))


def table(heading: str, intro: str, rows: dict) -> str:
    """The section: ``intro``, then a row per model (``run``'s answers)."""
    lines = [f"{heading} ({DATE})", "", intro, "",
             "| model | steps | compiles | exact among them | ops compiled exactly "
             "| largest loss difference | median step, eager (ms) "
             "| median step, lazy_runtime, compiles included (ms) |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['steps']} | {r['compiles']} | {r['exact']} "
                     f"| {', '.join(r['why']) or '-'} | {r['worst']:.1e} "
                     f"| {r['eager'] * 1e3:.1f} | {r['lazy'] * 1e3:.1f} |")
    return "\n".join(lines) + "\n"


def main(doc=__doc__, models=MODELS, run=run, steps=8, heading=HEADING,
         intro=lambda steps: f"`python benchmarks/varying_vision.py --steps {steps} --write`: "
         "nine small vision models trained unmodified (SGD, batches of 2) at image sizes "
         "drawn uniform in [24, 64] each step, H and W marked dynamic (power-of-two "
         "buckets); each against eager torch in the same loop. See the script's docstring "
         "for the models."):
    """Run ``models`` (``run(name, steps)`` each) and print or write their section (the
    command line of this script, ``varying_audio.py`` and ``varying_text.py``)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--only", default=",".join(models))
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    lr.config.compile_cache = None   # cold compiles: their count is the point
    rows = {}
    for name in a.only.split(","):
        rows[name] = run(name, a.steps)
        print(name, rows[name], file=sys.stderr)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    emit(heading, table(heading, intro(a.steps), rows), a.write)


if __name__ == "__main__":
    main()
