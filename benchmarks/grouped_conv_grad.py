"""Grouped convolutions on the CPU: XLA's own convolution and JAX's gradients of it (the
weight gradient a convolution grouped over its batch, which XLA:CPU expands into a dense
one over every pair of channels) against the runtime's lowerings (a depthwise conv as a
sum of shifted products; another 2-d one as dense convolutions over block-diagonal
weights, neighbouring groups joined up to 16 input channels, with JAX's gradients of
them; another 1-d or 3-d one's weight gradient one convolution grouped over its
features), with torch's eager kernels beside them.

    python benchmarks/grouped_conv_grad.py [--repeats 7] [--only NAME] [--write]

Per shape: the XLA scratch each compiled backward (input and weight gradients) asks for
(``memory_analysis``), and the median ms of the forward and of the backward over
``--repeats`` rounds, the three run in turn within each round.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from lazy_runtime.ops.common import HIGHEST, vjp  # noqa: E402
from lazy_runtime.ops.nn import _DN, lower_convolution, lower_convolution_backward  # noqa: E402

# (name, input shape, weight shape, stride, padding, dilation, groups)
SHAPES = (
    ("ConvNeXt depthwise 7x7", (8, 96, 56, 56), (96, 1, 7, 7), 1, 3, 1, 96),
    ("MobileNetV2 depthwise 3x3 s2", (8, 144, 56, 56), (144, 1, 3, 3), 2, 1, 1, 144),
    ("ResNeXt 32 groups 3x3", (8, 256, 28, 28), (256, 8, 3, 3), 1, 1, 1, 32),
    ("ResNeXt 32 x 4 channels 3x3 s2", (8, 128, 56, 56), (128, 4, 3, 3), 2, 1, 1, 32),
    ("RegNet 8 groups of 24 3x3", (8, 192, 28, 28), (192, 24, 3, 3), 1, 1, 1, 8),
    ("wav2vec2 positional conv", (2, 768, 200), (768, 48, 128), 1, 64, 1, 16),
    ("Mamba causal conv1d", (4, 1536, 256), (1536, 1, 4), 1, 3, 1, 1536),
    ("GLM-5-Next causal conv1d", (2, 24576, 64), (24576, 1, 4), 1, 3, 1, 24576),
)


# XLA's backward is not run where its scratch is over this (GLM-5-Next's asks for 18 GiB)
MAX_RUN_SCRATCH = 4 << 30


def _out_shape(x_shape, w_shape, stride, padding, dilation):
    return x_shape[:1] + w_shape[:1] + tuple(
        (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1
        for size, k in zip(x_shape[2:], w_shape[2:]))


def xla_forms(stride, padding, dilation, groups):
    """(forward, backward) with XLA's convolution and JAX's own gradients of it."""
    def forward(g, x, w):
        n = w.ndim - 2
        return jax.lax.conv_general_dilated(
            x, w, window_strides=(stride,) * n, padding=[(padding, padding)] * n,
            rhs_dilation=(dilation,) * n, dimension_numbers=_DN[n], feature_group_count=groups,
            precision=HIGHEST)

    def backward(g, x, w):
        return vjp(lambda x_, w_: forward(None, x_, w_), (x, w), g)

    return jax.jit(forward), jax.jit(backward)


# (a forward convolution's lowering reads its context only for a transposed one's shape)
_NO_CONTEXT = types.SimpleNamespace(shape=None)


def runtime_forms(stride, padding, dilation, groups):
    """(forward, backward): the runtime's lowerings of ``aten.convolution`` and
    ``aten.convolution_backward``."""
    def forward(g, x, w):
        n = w.ndim - 2
        return lower_convolution(_NO_CONTEXT, x, w, None, [stride] * n, [padding] * n,
                                 [dilation] * n, False, [0] * n, groups)

    def backward(g, x, w):
        n = w.ndim - 2
        return lower_convolution_backward(g, x, w, None, [stride] * n, [padding] * n,
                                          [dilation] * n, False, [0] * n, groups,
                                          [True, True, False])[:2]

    return jax.jit(forward), jax.jit(backward)


def torch_forms(stride, padding, dilation, groups, n):
    geometry = ([stride] * n, [padding] * n, [dilation] * n, False, [0] * n, groups)

    def forward(g, x, w):
        return torch.ops.aten.convolution(x, w, None, *geometry)

    def backward(g, x, w):
        return torch.ops.aten.convolution_backward(g, x, w, None, *geometry,
                                                   [True, True, False])[:2]
    return forward, backward


def scratch_of(exe):
    try:
        return exe.memory_analysis().temp_size_in_bytes
    except Exception:   # (no analysis on this backend)
        return None


def measure(name, x_shape, w_shape, stride, padding, dilation, groups, repeats) -> dict:
    rng = np.random.default_rng(0)
    g_shape = _out_shape(x_shape, w_shape, stride, padding, dilation)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in (g_shape, x_shape, w_shape)]
    args = [jax.device_put(a) for a in arrays]
    targs = [torch.from_numpy(a) for a in arrays]
    row = {"name": name, "groups": groups}
    runs = {}
    for label, forms in (("xla", xla_forms(stride, padding, dilation, groups)),
                         ("runtime", runtime_forms(stride, padding, dilation, groups))):
        for part, fn in zip(("forward", "backward"), forms):
            exe = fn.lower(*args).compile()
            if part == "backward":
                row[f"{label}_scratch"] = scratch_of(exe)
                if (row[f"{label}_scratch"] or 0) > MAX_RUN_SCRATCH:
                    continue   # (compiled for its analysis only)
            runs[f"{label}_{part}"] = (lambda e=exe: jax.block_until_ready(e(*args)))
    for part, fn in zip(("forward", "backward"),
                        torch_forms(stride, padding, dilation, groups, len(x_shape) - 2)):
        runs[f"torch_{part}"] = (lambda f=fn: f(*targs))
    for run in runs.values():   # (warm)
        run()
    times = {label: [] for label in runs}
    for _ in range(repeats):
        for label, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[label].append((time.perf_counter() - t0) * 1e3)
    for label in ("xla", "runtime", "torch"):
        for part in ("forward", "backward"):
            ts = times.get(f"{label}_{part}")
            row[f"{label}_{part}_ms"] = statistics.median(ts) if ts else None
    # the runtime's results against torch's (the test suite checks both at small sizes)
    ours = [runs["runtime_forward"]()] + list(runs["runtime_backward"]())
    want = [runs["torch_forward"]()] + list(runs["torch_backward"]())
    row["max_rel_diff"] = max(float(np.max(np.abs(np.asarray(p) - q.numpy()))
                                    / (np.max(np.abs(q.numpy())) + 1e-30))
                              for p, q in zip(ours, want))
    return row


def _ms(v):
    return "not run" if v is None else f"{v:.2f}"


def _ratio(a, b):
    return "" if a is None or b is None else f"{a / b:.2f}"


def _mib(n):
    return "?" if n is None else f"{n / 2**20:,.1f}"


def table(rows) -> str:
    lines = ["| shape | groups | backward's XLA scratch, XLA's conv (MiB) | runtime's (MiB) | "
             "forward ms: XLA's conv | runtime's | torch | backward ms: XLA's conv + JAX's "
             "gradients | runtime's | torch | runtime / torch (forward, backward) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['groups']} | {_mib(r['xla_scratch'])} | "
            f"{_mib(r['runtime_scratch'])} | {_ms(r['xla_forward_ms'])} | "
            f"{_ms(r['runtime_forward_ms'])} | {_ms(r['torch_forward_ms'])} | "
            f"{_ms(r['xla_backward_ms'])} | {_ms(r['runtime_backward_ms'])} | "
            f"{_ms(r['torch_backward_ms'])} | "
            f"{_ratio(r['runtime_forward_ms'], r['torch_forward_ms'])}, "
            f"{_ratio(r['runtime_backward_ms'], r['torch_backward_ms'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", help="a substring of the shapes' names")
    parser.add_argument("--write", action="store_true",
                        help="put the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    rows = []
    for shape in SHAPES:
        if args.only and args.only not in shape[0]:
            continue
        rows.append(measure(*shape, repeats=args.repeats))
        r = rows[-1]
        print(f"{r['name']}: scratch {_mib(r['xla_scratch'])} -> {_mib(r['runtime_scratch'])} "
              f"MiB; backward ms xla {_ms(r['xla_backward_ms'])} runtime "
              f"{_ms(r['runtime_backward_ms'])} torch {_ms(r['torch_backward_ms'])} (runtime "
              f"against torch: {r['max_rel_diff']:.1e})", flush=True)
    text = table(rows)
    print(text)
    if args.write:
        from results_file import replace_section
        heading = "## A grouped convolution's backward on the CPU"
        replace_section(heading,
                        f"{heading}\n\nMeasured {datetime.date.today()} (`python benchmarks/"
                        f"grouped_conv_grad.py --repeats {args.repeats}`), float32, the "
                        f"backward is the input and weight gradients; medians:\n\n{text}\n")


if __name__ == "__main__":
    main()
