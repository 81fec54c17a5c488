"""Conformance sweep: torch's own op database (OpInfo) run on the lazy device against eager.

For every entry of ``torch.testing._internal.common_methods_invocations.op_db`` (about 700
op variants) and each dtype asked for, the sweep takes the op's first sample inputs, runs
them eagerly on the CPU and on the lazy device (all samples of an op in one graph), and
compares structure, shapes, dtypes and values (exact for integers and bools; for floats a
tolerance by the result's dtype). With ``--grad`` it compares gradients instead (float64):
d(sum(out * w))/d(inputs) for a fixed weighting ``w``. With ``--variant`` it calls each op's
in-place method instead (on the input, or on a strided view of a larger tensor, compared
whole) or passes ``out=`` tensors with no elements (``_variant_call``). With ``--refused``
it takes the dtypes each op does *not* list for the CPU instead: where torch raises, the
lazy device must raise too (at the call or at its barrier), not compute a value. Each op
variant ends as:

- ``match``: every sample agrees with torch and nothing ran eagerly;
- ``fallback``: every sample agrees, some ATen op ran eagerly (listed: `fallback_ops`);
- ``differs``: some value differs from torch (``known`` gives the reason where torch's
  result is unspecified or random, see ``KNOWN``);
- ``lazy_error``: the lazy device raised where torch did not (``known`` where intended);
- ``barrier_error``: recording went through but the graph failed (a lowering bug);
- ``lazy_value`` (``--refused``): torch raised and the lazy device computed a value;
- ``crashed``/``timeout``: the worker died or overran; the sweep carries on after it.

Workers are subprocesses (a crash loses one op, not the sweep). torch's test utilities
import ``expecttest``, which the ``dev`` extra installs (``make test`` does).

Usage: python benchmarks/opinfo_sweep.py [--dtypes float32,float64,int64,bool,complex64]
           [--grad] [--samples 4] [--only add,matmul] [--json benchmarks/opinfo_sweep.json]
           [--exact16] [--tol64 1e-10] [--variant op|noncontig|inplace|inplace_view|out]
           [--db op|foreach] [--refused]
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Ops whose values cannot equal torch's, with the reason (substring of the OpInfo name).
RANDOM = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential",
          "cauchy", "geometric", "log_normal", "poisson", "lowrank", "fractional_max_pool",
          "rrelu", "empty")
KNOWN = {
    "nn.functional.scaled_dot_product_attention": "samples with dropout_p > 0 (the lazy "
                                                  "random stream)",
    "nn.functional.multi_head_attention_forward": "samples with dropout in training mode "
                                                  "(random)",
    "matrix_exp": "float32 rounding: one element 6 orders of magnitude below the matrix's "
                  "largest, where torch's float32 result is further from the float64 value "
                  "than the lazy one",
    "linalg.eigh": "eigenvectors are unique up to sign; LAPACK and XLA choose differently",
    "sort": "ties: torch's stable=False CPU sort leaves their order unspecified",
    "argsort": "ties: torch's stable=False CPU sort leaves their order unspecified",
    "topk": "ties: which of equal values' indices torch returns is unspecified",
    "kthvalue": "ties: which of equal values' indices torch returns is unspecified",
    "as_strided.partial_views": "a .to(device) copy of a view holds only the view's "
                                "elements (as on CUDA): offsets into the CPU base differ",
    "tensor_split": "torch wants tensor indices on the CPU (as for CUDA tensors)",
    "to_sparse": "refused: sparse layouts have no lazy form",
    "sparse.": "refused: sparse layouts have no lazy form",
    "chalf": "refused: complex32 is not supported on the device",
    "view_as_complex": "refused: complex32 (of float16 parts) is not supported on the device",
    "complex": "refused: complex32 (of float16 parts) is not supported on the device",
    "hash_tensor": "refused: uint64 is not supported on the device",
    "torch._scaled_mm": "refused: float8 dtypes are not supported on the device",
}


# ... and those of one way of calling it (``--variant``), by (variant, OpInfo name)
KNOWN_VARIANTS = {
    ("out", "linalg.matrix_rank"): "torch's out= kernel never writes its result: the out= "
                                   "tensor keeps the uninitialized memory its resize gave it",
    ("out", "linalg.matrix_rank.hermitian"): "torch's out= kernel never writes its result "
                                             "(as linalg.matrix_rank)",
    ("inplace", "addbmm"): "torch's CPU addbmm_ resizes a self that only broadcasts to the "
                           "result ([1] to [5, 10]); in-place ops refuse that elsewhere",
    ("inplace_view", "addbmm"): "torch's CPU addbmm_ resizes a self that only broadcasts "
                                "(as inplace)",
    **{("noncontig", name): "a .to(device) copy of a strided view holds only the view's "
                            "elements (as on CUDA): its storage offsets and strides are not "
                            "the CPU view's" for name in ("as_strided", "as_strided_copy",
                                                         "as_strided_scatter")},
    ("inplace_view+grad", "nn.functional.dropout3d"):
        "torch's autograd rebuilds a view of a tensor with Python dispatch from the view "
        "ops that made it (view replay), without the in-place unsqueeze_ dropout3d applies "
        "to an unbatched input: the backward's shapes disagree (eager CPU fails alike with "
        "torch._C._set_view_replay_enabled(True))",
    ("inplace_view", "resize_"): "refused: a view cannot be resized on the lazy device (its "
                                 "base would keep the old buffer)",
    ("refused", "nn.functional.dropout"): "torch's dropout takes another path on the CPU "
                                          "(bernoulli_, which refuses complex and integer "
                                          "tensors) than on other devices (native_dropout, "
                                          "whose kernel computes them): the device runs "
                                          "torch's native_dropout",
    **{("refused", name): "an empty input, for which torch's kernel returns before it "
                          "checks the dtype; the device refuses the dtype whatever the size "
                          "(torch's error for the same op on elements)"
       for name in ("nn.functional.linear", "searchsorted", "cumsum")},
    ("refused", "nn.functional.max_pool1d"): "torch's max_pool1d without indices has a CPU "
                                             "kernel of its own (floating point only); other "
                                             "devices, and the CPU when indices are asked "
                                             "for, take max_pool2d_with_indices, which takes "
                                             "integers",
}


def _known(name: str, variant: str = "op") -> str | None:
    """Why ``name`` called as ``variant`` (``inplace``, ``inplace+grad``: its gradients)
    cannot agree with torch, or None."""
    for how in (variant, variant.split("+")[0]):
        if (how, name) in KNOWN_VARIANTS:
            return KNOWN_VARIANTS[how, name]
    if any(r in name for r in RANDOM):
        return "random: values come from the lazy random stream, not torch's CPU generator"
    for key, why in KNOWN.items():
        if name == key or name.startswith(key) or key.endswith(".") and key in name:
            return why
    return None


# --exact16: float16/bfloat16 compared bit for bit (where torch's kernels round as the
# lowerings do; see lazy_runtime/README.md, Policies, "Dtypes")
_EXACT16 = [False]


# float64 and complex128's tolerance (a sweep may tighten it: a float64 result computed
# through float32 somewhere is off by ~1e-8)
WIDE_TOLERANCE = [1e-7]


def _tolerance(dtype) -> float:
    import torch
    if _EXACT16[0] and dtype in (torch.float16, torch.bfloat16):
        return 0.0
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4,
            torch.complex64: 1e-4}.get(dtype, WIDE_TOLERANCE[0])


def _compare(want, got) -> str | None:
    """None when ``got`` (lazy) agrees with ``want`` (eager), else what differs."""
    import torch
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"type {type(got).__name__}"
        got = got.cpu()
        if want.shape != got.shape or want.dtype != got.dtype:
            return f"{got.dtype}{list(got.shape)} where torch gives {want.dtype}{list(want.shape)}"
        if want.numel() == 0:
            return None
        if not (want.is_floating_point() or want.is_complex()):
            n = int((want != got).sum())
            return None if n == 0 else f"{n} of {want.numel()} values differ (exact)"
        tol = _tolerance(want.dtype)
        close = torch.isclose(got, want, rtol=tol, atol=tol, equal_nan=True)
        if bool(close.all()):
            return None
        return f"{int((~close).sum())} of {want.numel()} values differ (tolerance {tol})"
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(want) != len(got):
            return "structure"
        return next((r for r in map(_compare, want, got) if r), None)
    if isinstance(want, float) and isinstance(got, float):
        same = (math.isnan(want) and math.isnan(got)) or math.isclose(want, got, rel_tol=1e-6)
        return None if same else f"{got} where torch gives {want}"
    return None if want == got else f"{got!r} where torch gives {want!r}"


def _weighted_grads(op, sample, device, variant: str = "op"):
    """Gradients of sum(out_i * (w + i)) w.r.t. the sample's tensors that require grad
    (``variant``: as ``_variant_call``; in place, on a copy of the input that requires
    grad, or on a view of a larger tensor the copy is written into; ``noncontig``: the
    function on strided views the leaves are copied into)."""
    import torch
    from torch.utils._pytree import tree_map
    leaves = []

    def prep(x, padded=False):
        if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_nested:
            return x
        y = x.detach().clone().to(device)
        if padded:
            y = padded_copy(y, PADDED_DIM[variant])
        if x.requires_grad:
            leaves.append(y.requires_grad_(True))
        return strided_copy(y, device)[1] if variant == "noncontig" else y
    variant_of_call = "op" if variant in ("noncontig",) + PADDED else variant
    # (padded: the sample's input marked, its other tensors as they are)
    first = tree_map(lambda x: prep(x, variant in PADDED), sample.input)
    out = _apply_variant(op, first, tree_map(prep, sample.args),
                         tree_map(prep, sample.kwargs), device, variant_of_call)
    total = weighted_total(out, variant in PADDED)
    if total is None or not leaves:
        return None
    return torch.autograd.grad(total, leaves, allow_unused=True)


def weighted_total(out, from_ones: bool = False):
    """sum(out_i * (w + i)) over the tensors of ``out`` that require grad (complex ones as
    real pairs), ``w`` a fixed ramp from -1 to 1; None if there are none. ``from_ones``:
    ``w`` made from the output itself (``ones_like`` summed along each dim), so that it
    runs padded where the output does (a ramp copied in is a tensor of the output's true
    sizes, which a square output's padded graph could not tell apart)."""
    import torch
    from torch.utils._pytree import tree_flatten
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs:
        return None
    total = 0
    for i, t in enumerate(outs):
        t = torch.view_as_real(t) if t.is_complex() else t
        if from_ones:
            ones = torch.ones_like(t).detach()
            # (exact in binary: a weight that rounds to 0 in torch and not where XLA
            # fuses the multiply and the subtraction would make a difference of noise)
            w = sum((ones.cumsum(d) for d in range(t.ndim)), ones * 0) * 0.125 - 1.0625
        else:
            w = torch.linspace(-1, 1, t.numel(), dtype=t.dtype).reshape(t.shape).to(t.device)
        total = total + (t * (w + i)).sum()
    return total


PADDED_DIM = {"padded": 0, "padded_last": -1}   # the dim each padded variant marks
PADDED = tuple(PADDED_DIM)
VARIANTS = ("op", "noncontig", "inplace", "inplace_view", "out") + PADDED


def _variant_call(op, sample, device, variant: str):
    """The sample run as ``variant`` on ``device`` (its tensors copied there first):
    ``op``, the function; ``inplace``, the in-place method on (a copy of) the input;
    ``inplace_view``, the in-place method on a strided view of a larger zero tensor (every
    second element of its last dim, at offset 1), which is then compared whole; ``out``,
    the function writing into ``out=`` tensors with no elements, which torch resizes;
    ``noncontig``, the function on non-contiguous copies of the sample's tensors made on
    ``device`` (``strided_copy``; a strided CPU tensor moved to the device is a dense
    copy, as on CUDA). The in-place results carry whether the method returned its
    input."""
    import torch
    from torch.utils._pytree import tree_map

    def to_dev(x):   # (a copy: an in-place variant writes it; torch's eager sample kept)
        dense = isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_nested
        if not dense:
            return x
        if variant == "noncontig":
            return strided_copy(x, device)[1]
        return x.to(device) if variant in ("op",) + PADDED else x.clone().to(device)

    x, args, kwargs = tree_map(to_dev, (sample.input, sample.args, sample.kwargs))
    if variant in PADDED:
        x = tree_map(lambda t: padded_copy(t, PADDED_DIM[variant]), x)
    variant = "op" if variant in ("noncontig",) + PADDED else variant
    if variant == "out" and "device" in kwargs:   # (a factory's samples name the CPU)
        kwargs = dict(kwargs, device=device)
    want = op(sample.input, *sample.args, **sample.kwargs) if variant == "out" else None
    return _apply_variant(op, x, args, kwargs, device, variant, want)


_PADDED = [0]   # symbols named so far (each marked dim a symbol of its own)


def padded_copy(t, dim: int, name: str | None = None):
    """``t`` (already on the lazy device) with dim ``dim`` marked dynamic, so that graphs
    run it padded to its bucket, or compile exactly where an op has no padding rule; a
    dim of 0 or 1 stays concrete, as the runtime keeps it. Other tensors of the sample
    whose dims have that size are read as the same symbol by the runtime. ``name``: the
    symbol (default: one of its own)."""
    import torch
    import lazy_runtime as lr
    if not isinstance(t, torch.Tensor) or t.device != lr.device() or t.ndim == 0 or \
            t.shape[dim] < 2:
        return t
    _PADDED[0] += 1
    return lr.mark_dynamic(t, dim % t.ndim, name or f"P{_PADDED[0]}")


def strided_copy(t, device):
    """(a larger zero tensor on ``device``, a view of it holding ``t``'s values): every
    second element of its last dim, from offset 1 (neither contiguous nor at its
    storage's start); a 0-dim ``t`` as element 1 of a pair. Written by ``copy_``, so a
    ``t`` that requires grad gets the view's gradients."""
    import torch
    whole = torch.zeros((*t.shape[:-1], 2 * t.shape[-1] + 1) if t.ndim else (2,),
                        dtype=t.dtype, device=device)
    view = whole[..., 1::2] if t.ndim else whole[1]
    view.copy_(t)
    return whole, view


def _apply_variant(op, x, args, kwargs, device, variant: str, want=None):
    """``_variant_call`` on tensors already on ``device`` (``want``: torch's result, whose
    dtypes the out= tensors take)."""
    import torch
    from torch.utils._pytree import tree_map
    if variant == "op":
        return op(x, *args, **kwargs)
    if variant == "out":
        outs = tree_map(lambda t: torch.empty(0, dtype=t.dtype, device=device)
                        if isinstance(t, torch.Tensor) else t, want)
        outs = tuple(outs) if isinstance(outs, list) else outs
        got = op(x, *args, **kwargs, out=outs)
        return outs, got is outs or isinstance(outs, tuple) and all(
            a is b for a, b in zip(got, outs))
    if variant == "inplace_view":
        whole, x = strided_copy(x, device)
        got = op.inplace_variant(x, *args, **kwargs)
        return whole, x, got is x
    if x.requires_grad:   # (a leaf: autograd refuses in-place ops on it)
        x = x.clone()
    got = op.inplace_variant(x, *args, **kwargs)
    return x, got is x


def _run_op(op, dtype, grad: bool, n_samples: int, variant: str = "op",
            refused: bool = False) -> dict:
    import torch
    import lazy_runtime as lr
    dev = lr.device()

    samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))[:n_samples]
    lr.reset_metrics()
    pairs, errors, computed = [], [], []
    for s in samples:
        try:
            torch.manual_seed(0)
            want = _weighted_grads(op, s, "cpu", variant) if grad else \
                _variant_call(op, s, "cpu", variant)
        except Exception as e:   # a sample torch itself refuses
            if refused and _computes_anyway(op, s, variant):
                computed.append(f"torch: {type(e).__name__}: {str(e)[:150]}")
            continue
        if want is None:
            continue
        try:
            torch.manual_seed(0)
            got = _weighted_grads(op, s, dev, variant) if grad else \
                _variant_call(op, s, dev, variant)
            if variant in PADDED:   # (a graph per sample: its symbols met by no other's)
                lr.mark_step()
            pairs.append((want, got))
        except Exception as e:
            errors.append(f"{type(e).__name__}: {str(e)[:200]}")
    rec = {"samples": len(pairs) + len(errors)}
    try:
        lr.mark_step()
    except Exception as e:
        rec.update(status="barrier_error", detail=f"{type(e).__name__}: {str(e)[:300]}")
        return rec
    diffs = [d for d in (_compare(w, g) for w, g in pairs) if d]
    fallbacks = dict(lr.metrics()["fallback_ops"])
    if variant in PADDED:   # (how the graphs ran: padded, or exactly for want of a rule)
        rec.update(padded_runs=lr.metrics()["padded_executions"],
                   exact=sorted(lr.metrics()["exact_compiles"]))
    if computed:
        rec.update(status="lazy_value", detail=computed[0])
    elif errors:
        rec.update(status="lazy_error", detail=errors[0])
    elif diffs:
        rec.update(status="differs", detail=diffs[0])
    else:
        rec["status"] = "fallback" if fallbacks else "match"
    if fallbacks:
        rec["fallback_ops"] = fallbacks
    return rec


def _computes_anyway(op, sample, variant: str) -> bool:
    """Whether the lazy device gives a value for a sample torch refuses (its own barrier
    taken here, so that an error it defers is seen and stays out of the other samples)."""
    import torch
    import lazy_runtime as lr
    try:
        torch.manual_seed(0)
        got = _variant_call(op, sample, lr.device(), variant)
        lr.mark_step()
        torch.utils._pytree.tree_map(
            lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, got)
    except Exception:
        return False
    return True


def _names(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def database(name: str) -> list:
    """The OpInfo entries swept: torch's ``op_db``, or its ``_foreach_*`` ops' databases
    (``foreach``: unary, binary, pointwise, reduce and the others, in that order)."""
    from torch.testing._internal import common_methods_invocations as C
    if name == "op":
        return C.op_db
    return [op for part in ("unary", "binary", "pointwise", "reduce", "other")
            for op in getattr(C, f"foreach_{part}_op_db")]


def worker(dtype_name: str, start: int, stop: int, a) -> None:
    """Sweep entries start..stop of database ``a.db`` as ``a`` (the parsed command line)
    says, one JSON line per op (flushed, so a crash loses one op)."""
    import torch
    ops = database(a.db)
    only = [s for s in a.only.split(",") if s]
    grad, variant = a.grad, a.variant
    dtype = getattr(torch, dtype_name)
    if variant in PADDED:
        import lazy_runtime as lr
        lr.config.poison_padding = True   # (a value that reads the padding shows it)
    for i in range(start, min(stop, len(ops))):
        op, name = ops[i], _names(ops[i])
        if only and name not in only and op.name not in only:
            continue
        if grad and not (op.supports_autograd and dtype in op.supported_backward_dtypes("cpu")):
            continue
        if not grad and (dtype in op.supported_dtypes("cpu")) == a.refused:
            continue
        if variant.startswith("inplace") and op.inplace_variant is None or \
                variant == "out" and not op.supports_out:
            continue
        print(json.dumps({"i": i, "op": name, "dtype": dtype_name, "started": True}), flush=True)
        # (an exception here is the sweep's own failure on this op: sample generation)
        rec = guarded(lambda: _run_op(op, dtype, grad, a.samples, variant, a.refused))
        rec.update(i=i, op=name, dtype=dtype_name)
        print(json.dumps(rec), flush=True)


def _overrun(*_):
    raise TimeoutError("over 120 s")


def guarded(run, failed: str = "skipped") -> dict:
    """``run()``'s record, or one saying it overran 120 s (``timeout``) or raised (status
    ``failed``); then whatever it left pending on the lazy device is run (its error
    dropped), so the next entry starts clean."""
    import lazy_runtime as lr
    signal.signal(signal.SIGALRM, _overrun)
    signal.alarm(120)
    try:
        rec = run()
    except TimeoutError:
        rec = {"status": "timeout"}
    except Exception as e:
        rec = {"status": failed, "detail": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        signal.alarm(0)
    try:
        lr.sync()
    except Exception:
        pass
    return rec


def _sweep(dtype: str, total: int, flags: list) -> list[dict]:
    """Workers over the database from the start (``flags``: the command line's, passed
    on); after a crash, a new one from the next op."""
    def command(start: int) -> list:
        return [sys.executable, __file__, "--worker", dtype, str(start), str(total), *flags]
    return run_workers(command, total, dtype)


def run_workers(command, total: int, label: str) -> list[dict]:
    """Records of workers ``command(start)`` (each prints a JSON line as it starts an
    entry, ``"started": true``, and one when it ends it) over entries ``start..total``;
    after a crash, a new worker from the entry after the one it died in."""
    out, start = [], 0
    while start < total:
        started = finished = None
        # (stderr to a file: warnings would fill a pipe nobody reads while stdout streams)
        with tempfile.TemporaryFile("w+") as errors, subprocess.Popen(
                command(start), stdout=subprocess.PIPE, stderr=errors, text=True,
                cwd=ROOT) as proc:
            for line in proc.stdout:   # one entry at a time: progress as it goes
                rec = json.loads(line)
                if rec.pop("started", False):
                    started = rec
                    continue
                out.append(rec)
                started, finished = None, rec["i"]
                print(f"{label:9s} {rec['i']:4d} {rec['op']:45s} {rec['status']}", flush=True)
            proc.wait()
            errors.seek(0)
            err = errors.read()
        if proc.returncode == 0 and started is None:
            break
        if started is None and finished is None:   # died before its first entry
            raise RuntimeError(f"sweep worker failed:\n{err[-2000:]}")
        if started is None:   # died between entries (or at exit): nothing of it is lost
            start = finished + 1
            continue
        out.append(dict(started, status="crashed", detail=err[-300:]))
        start = started["i"] + 1
    return out


def _summary(records: list[dict]) -> str:
    lines = []
    for dtype in sorted({r["dtype"] for r in records}):
        rs = [r for r in records if r["dtype"] == dtype]
        counts = Counter(r["status"] for r in rs)
        lines.append(f"{dtype}: {len(rs)} op variants: " + ", ".join(
            f"{k} {counts[k]}" for k in ("match", "fallback", "differs", "lazy_error",
                                         "lazy_value", "barrier_error", "crashed", "timeout",
                                         "skipped")
            if counts[k]))
        for r in rs:
            if r["status"] in ("differs", "lazy_error", "lazy_value", "barrier_error",
                               "crashed", "timeout"):
                why = r.get("known") or "UNEXPLAINED"
                lines.append(f"    {r['status']:13s} {r['op']}: {why} ({r.get('detail', '')[:90]})")
    falls = Counter()
    for r in records:
        for k in r.get("fallback_ops", {}):
            falls[k] += 1
    if falls:
        lines.append("ops that ran eagerly (number of op variants reaching each):")
        lines.extend(f"    {n:3d} {k}" for k, n in falls.most_common())
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--grad", action="store_true", help="compare gradients (float64)")
    p.add_argument("--samples", type=int, default=4, help="sample inputs per op")
    p.add_argument("--only", default="", help="comma-separated OpInfo names")
    p.add_argument("--json", default="", help="write every record here")
    p.add_argument("--exact16", action="store_true",
                   help="compare float16/bfloat16 values bit for bit")
    p.add_argument("--tol64", type=float, default=None,
                   help="float64/complex128 tolerance (default 1e-7; 1e-10 finds a float64 "
                        "value computed through float32)")
    p.add_argument("--variant", choices=VARIANTS, default="op",
                   help="how each op is called: the function (op) on the samples or on "
                        "non-contiguous copies of them (noncontig), its in-place method on "
                        "the input (inplace) or on a strided view (inplace_view), with "
                        "out= tensors torch resizes (out), or with the first (padded) or "
                        "last (padded_last) dim of its input marked dynamic, its padding "
                        "NaN")
    p.add_argument("--db", choices=("op", "foreach"), default="op",
                   help="torch's op database (op_db) or its _foreach_* ops' (foreach)")
    p.add_argument("--refused", action="store_true",
                   help="the dtypes each op does not list for the CPU: where torch raises, "
                        "the lazy device must raise too")
    p.add_argument("--worker", nargs=3, metavar=("DTYPE", "START", "STOP"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.grad and a.variant == "out":
        p.error("--grad with --variant out: out= ops do not support autograd")
    if a.refused and a.grad:
        p.error("--refused compares values, not gradients")
    _EXACT16[0] = a.exact16
    if a.tol64 is not None:
        WIDE_TOLERANCE[0] = a.tol64
    if a.worker:
        worker(a.worker[0], int(a.worker[1]), int(a.worker[2]), a)
        return 0
    flags = ["--samples", str(a.samples), "--variant", a.variant, "--db", a.db,
             "--only", a.only] + (["--grad"] if a.grad else []) + \
        (["--exact16"] if a.exact16 else []) + \
        (["--tol64", str(a.tol64)] if a.tol64 is not None else []) + \
        (["--refused"] if a.refused else [])
    dtypes = ["float64"] if a.grad else a.dtypes.split(",")
    records = []
    for dtype in dtypes:
        records += _sweep(dtype, len(database(a.db)), flags)
    how = "refused" if a.refused else a.variant + ("+grad" if a.grad else "")

    def why(r):
        # (a graph that fails is a lowering's bug unless a variant's entry says otherwise)
        if r["status"] in ("differs", "lazy_error", "lazy_value") or \
                r["status"] == "barrier_error" and (how, r["op"]) in KNOWN_VARIANTS:
            return _known(r["op"], how)
        return None
    report(records, why, "op variants", a.json)
    return 0


def report(records: list, why, noun: str, json_path: str = "") -> None:
    """Give each record the reason ``why(record)`` knows for it (``known``; None: none),
    print the summary (entries counted as ``noun``) and write the records to
    ``json_path`` if given."""
    for r in records:
        reason = why(r)
        if reason:
            r["known"] = reason
    print(_summary(records).replace("op variants", noun))
    if json_path:
        Path(json_path).write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
