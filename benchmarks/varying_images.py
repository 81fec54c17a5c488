"""Images of varying size: the CNN example trained on batches whose height and width
change every step, eager torch against torch.compile and lazy_runtime.

    python benchmarks/varying_images.py [--model cnn|unet|unet-bilinear] [--steps 60]
        [--cap-per-shape 12] [--write]

``cnn``: the model of examples/train_cnn.py (conv, batch norm, max pool, adaptive average
pool) with 16 and 32 channels, batches of 16 images whose height and width are drawn
uniform in [17, 64] each step (seed 0; square and oblong). ``unet``: a U-Net (``UNet``:
max pools down, nearest upsampling up, skips concatenated) classifying each pixel, sizes
multiples of 4 in [16, 64]; ``unet-bilinear``: the same, upsampling bilinearly with
``align_corners=True``. Adam; each step ends with the loss read. Contenders: eager torch (and, as a control, eager torch with the first conv's
bias moved by one part in 10^7: that bias, before a batch norm, has a gradient of
rounding noise only, which Adam scales up, so losses part after some steps whatever
computes them); torch.compile with ``dynamic=True``; lazy_runtime with
one executable per shape (buckets off, as torch_xla compiles); lazy_runtime with the
images' H and W marked dynamic (``lr.mark_dynamic``, power-of-two buckets: the convolution,
batch norm and pooling run padded, ``ops/padding.py``); the same with the step under
``lr.compile_step`` (replayed whole, at sizes never traced once its bucket's executable has
been traced at three). torch uses one intra-op thread.
Reported: compiles (XLA's for the runtime, graphs for torch.compile), the exact-shape
compiles among them, total and median step time, and the largest relative difference of
a loss from eager torch's. The per-shape runtime is capped (``--cap-per-shape`` steps).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import time
from pathlib import Path

# torch.compile must compile for real: no FX-graph/Inductor caches from earlier runs.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import lazy_runtime as lr  # noqa: E402
import train_cnn as CNN  # noqa: E402

HEADINGS = {"cnn": "## Images of varying size: the CNN trained with H and W dynamic",
            "unet": "## Images of varying size: a U-Net trained with H and W dynamic",
            "unet-bilinear": "## Images of varying size: a U-Net with bilinear upsampling "
                             "(align_corners) trained with H and W dynamic"}
DATE = datetime.date.today().isoformat()
WHOLE = "lazy_runtime, H and W dynamic, whole step"


class UNet(nn.Module):
    """Two levels down (conv, max pool) and up (nearest upsampling, skip concatenated), a
    per-pixel class head: segmentation at whatever size the image has (a multiple of 4)."""

    def __init__(self, classes=2, up=None):
        super().__init__()
        self.up = up or {}   # interpolate's mode (nearest by default)
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        self.enc1, self.enc2, self.mid = block(1, 16), block(16, 32), block(32, 32)
        self.dec2, self.dec1 = block(64, 16), block(32, 16)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2, **self.up), e2], 1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2, **self.up), e1], 1))
        return self.head(d1)


def sizes(steps: int, model: str) -> list:
    """(H, W) per step: uniform in [17, 64] (the CNN), multiples of 4 in [16, 64] (the
    U-Net, whose skips need sizes its pools halve evenly)."""
    rng = random.Random(0)
    if model.startswith("unet"):
        return [(4 * rng.randint(4, 16), 4 * rng.randint(4, 16)) for _ in range(steps)]
    return [(rng.randint(17, 64), rng.randint(17, 64)) for _ in range(steps)]


def batch(step: int, H: int, W: int, model: str):
    x, y = CNN.make_batch(step, batch=16, size=max(H, W))
    x = x[:, :, :H, :W].contiguous()
    if model.startswith("unet"):   # each pixel: inside the bright square or not
        y = (x[:, 0] > 0.5).long()
    return x, y


def make_model(model: str, nudge: float):
    torch.manual_seed(0)
    m = UNet(up=_UPSAMPLE.get(model)) if model.startswith("unet") else \
        CNN.SmallCNN(channels=(16, 32))
    first = m.enc1[0] if model.startswith("unet") else m.conv1
    with torch.no_grad():   # (the control: a change the size of one rounding)
        first.bias.mul_(1 + nudge)
    return m


def run(name, steps, model_name, device=None, prepare=None, mark=False, counter=None,
        nudge=0.0, whole=False):
    """``whole``: the step under ``lr.compile_step`` (the optimizer's step count on the
    device: ``lr.compile_optimizer``), its CPU batch passed as it is."""
    model = make_model(model_name, nudge)
    if device is not None:
        model = model.to(device)
    fwd = prepare(model) if prepare else model
    opt = CNN.make_optimizer(model)
    if whole:
        opt = lr.compile_optimizer(opt)

    def one_step(x, y):
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device is not None:
            lr.mark_step()
        return loss
    step_fn = lr.compile_step(one_step, model, opt) if whole else one_step
    times, losses = [], []
    for step, (H, W) in enumerate(sizes(steps, model_name)):
        x, y = batch(step, H, W, model_name)
        t0 = time.perf_counter()
        if device is not None:
            if mark:
                lr.mark_dynamic(lr.mark_dynamic(x, 2, "H"), 3, "W")
            if not whole:
                x, y = x.to(device), y.to(device)
        loss = step_fn(x, y)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        print(f"  {name:>14s} step {step:3d} {H}x{W} {times[-1] * 1e3:8.1f} ms", file=sys.stderr)
    out = {"times": times, "losses": losses, "compiles": counter() if counter else 0,
           "exact": 0}
    if device is not None:
        m = lr.metrics()
        out["exact"] = sum(m["exact_compiles"].values())
        out["buckets"] = m["buckets"]
        out["replayed"] = (m["step_replays"], m["step_replays_across_sizes"])
    return out


def dynamo_graphs():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


_WHAT = {"cnn": "the CNN of examples/train_cnn.py with 16 and 32 channels, Adam, batches of 16 "
                "images whose height and width are each uniform in [17, 64] (a new shape "
                "almost every step, square and oblong)",
         "unet": "a U-Net (two max pools down, two nearest upsamplings up, the skips "
                 "concatenated, batch norm; `UNet` in the script), per-pixel cross entropy, "
                 "Adam, batches of 16 images whose height and width are each a multiple of 4 "
                 "in [16, 64]",
         "unet-bilinear": "the U-Net of `--model unet` upsampling as the common U-Net does, "
                          "`F.interpolate(scale_factor=2, mode=\"bilinear\", "
                          "align_corners=True)` (taps that depend on the size), per-pixel "
                          "cross entropy, Adam, batches of 16 images whose height and width "
                          "are each a multiple of 4 in [16, 64]"}
_UPSAMPLE = {"unet-bilinear": {"mode": "bilinear", "align_corners": True}}


def table(rows: dict, steps: int, cap: int, model: str) -> str:
    eager = rows["eager torch"]
    n_compiled = len(rows["torch.compile (dynamic=True)"]["times"])
    compile_cap = f" --cap-compile {n_compiled}" if n_compiled < steps else ""
    lines = [f"{HEADINGS[model]} ({DATE})", "",
             f"`python benchmarks/varying_images.py --model {model} --steps {steps} "
             f"--cap-per-shape {cap}{compile_cap} --write`: {_WHAT[model]}, each step "
             "ending with the "
             "loss read; one intra-op thread for torch. torch.compile with `dynamic=True` "
             "(Inductor's caches disabled: cold compiles, as the runtime's"
             + (f"; capped at {n_compiled} steps" if compile_cap else "") + "); "
             "the per-shape runtime (buckets off, as torch_xla) is capped at "
             f"{cap} steps; the dynamic runtime marks H and W (`lr.mark_dynamic`, "
             "power-of-two buckets).", "",
             "| contender | steps | compiles (exact) | total (s) | median step (ms) "
             f"| vs eager (same steps) | largest loss difference, first {cap} steps | all "
             "steps |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def diff(r, n):
        return max(abs(a - b) / max(abs(b), 1e-12)
                   for a, b in zip(r["losses"][:n], eager["losses"]))
    for name, r in rows.items():
        n = len(r["times"])
        ratio = sum(r["times"]) / sum(eager["times"][:n])
        lines.append(f"| {name} | {n} | {r['compiles']} ({r['exact']}) | {sum(r['times']):.1f} "
                     f"| {statistics.median(r['times']) * 1e3:.1f} | {ratio:.2f}x "
                     f"| {diff(r, cap):.1e} | {diff(r, n):.1e} |")
    if "buckets" in rows.get("lazy_runtime, H and W dynamic", {}):
        lines += ["", f"Buckets: {rows['lazy_runtime, H and W dynamic']['buckets']}."]
    if WHOLE in rows:
        n, across = rows[WHOLE]["replayed"]
        lines += ["", f"Whole step (`lr.compile_step`, `lr.compile_optimizer`): {n} of "
                      f"{len(rows[WHOLE]['times'])} steps replayed, {across} of them at "
                      "sizes never traced (`step_replays_across_sizes`)."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(HEADINGS), default="cnn")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--cap-per-shape", type=int, default=12)
    p.add_argument("--cap-compile", type=int, default=0,
                   help="steps of torch.compile (0: all)")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    lr.config.compile_cache = None   # cold compiles: their count and time are the point
    dev = lr.device()
    model = a.model
    rows = {"eager torch": run("eager", a.steps, model),
            "eager torch, a conv bias moved by 1e-7 (control)": run("eager, moved", a.steps,
                                                                   model, nudge=1e-7)}
    torch._dynamo.reset()
    rows["torch.compile (dynamic=True)"] = run(
        "torch.compile", a.cap_compile or a.steps, model,
        prepare=lambda m: torch.compile(m, dynamic=True), counter=dynamo_graphs)
    for name, policy, mark, steps, whole in (
            ("lazy_runtime, one executable per shape", "off", False, a.cap_per_shape, False),
            ("lazy_runtime, H and W dynamic", "pow2", True, a.steps, False),
            (WHOLE, "pow2", True, a.steps, True)):
        lr.config.buckets = policy
        lr.clear_cache()
        lr.reset_metrics()
        rows[name] = run(name.split(", ")[1][:14], steps, model, dev, mark=mark,
                         counter=lambda: lr.metrics()["compiles"], whole=whole)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results_file import emit
    emit(HEADINGS[model], table(rows, a.steps, a.cap_per_shape, model), a.write)


if __name__ == "__main__":
    main()
