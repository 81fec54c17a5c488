"""Conformance sweep: torch's own module database (ModuleInfo) on the lazy device.

For every entry of ``torch.testing._internal.common_modules.module_db`` (every ``nn``
module torch tests: layers, losses, normalizations, recurrent layers, transformers, the
``Lazy*`` modules) and each dtype asked for, the sweep builds the module from each of its
sample constructor inputs, in training and in eval mode, and runs one call eagerly on the
CPU and on the lazy device from the same weights and inputs. It compares the outputs,
the gradients of sum(out_i * (w + i)) (fixed weights ``w``) with respect to the inputs
that require grad and every parameter, and the buffers after the call (a BatchNorm's
running statistics). A ``Lazy*`` module is moved to the device uninitialized, as a user
would, initialized by its first call there, then given the eager module's weights.

Each module and mode ends as ``match``, ``fallback`` (every sample agrees and some ATen op
ran eagerly: listed), ``differs`` (``known`` where the difference is intended: random
values), ``lazy_error`` (the lazy device raised where torch did not), ``barrier_error``
(the graph failed), ``crashed`` or ``timeout``. Workers are subprocesses, as in
``opinfo_sweep.py`` (whose comparison this uses).

``--variant padded`` (``padded_last``) marks the first (last) dim of each forward input
dynamic on the lazy device (``lr.mark_dynamic``) and pads it to a bucket list chosen so
that the small sizes of the samples are padded (``PADDED_BUCKETS``), with NaN, a large
int or True in the padding (``config.poison_padding``): a padding rule that lets padding
reach a value shows it; an op without a rule compiles its graph exactly (listed).

Usage: python benchmarks/module_sweep.py [--dtypes float32,float64] [--samples 6]
           [--only nn.Linear,nn.LSTM] [--json module_sweep.json] [--noncontig]
           [--variant op|padded|padded_last]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from opinfo_sweep import (PADDED, PADDED_DIM, _compare, guarded, padded_copy,  # noqa: E402
                          report, run_workers, strided_copy, weighted_total)

# float64's tolerance here (opinfo_sweep's 1e-7 let a float32 bias gradient of BatchNorm
# through: 3e-8 off)
TOLERANCE64 = 1e-10

# Modules whose values cannot equal torch's, with the reason.
KNOWN = {
    "nn.FractionalMaxPool2d": "random: the pooling regions come from the lazy random stream",
    "nn.FractionalMaxPool3d": "random: the pooling regions come from the lazy random stream",
}

# The padded variants' buckets: sizes up to 12 (most samples' dims) are padded to 13, and
# so on; a size equal to one of these runs unpadded.
PADDED_BUCKETS = [13, 29, 61, 125, 253, 509, 1021, 2045, 4093, 8191]


_CALLS = [0]   # calls so far (each padded call's marked dims one symbol)


def _call(module, sample, device, training: bool, noncontig: bool = False,
          variant: str = "op"):
    """(outputs, gradients, buffers) of one call of ``module`` on ``sample``'s forward
    input moved to ``device`` (``noncontig``: as strided views made there, whose
    gradients reach the leaves on the CPU through the copy; a padded ``variant``: with
    a dim of each marked dynamic on the lazy device)."""
    import torch
    from torch.utils._pytree import tree_map
    leaves = []
    padded = variant in PADDED
    _CALLS[0] += 1

    def prep(x):
        if not isinstance(x, torch.Tensor):
            return x
        y = x.detach().clone()
        if padded:   # (one symbol for the call's inputs, as a user marks a batch dim)
            y = padded_copy(y.to(device), PADDED_DIM[variant], f"C{_CALLS[0]}")
        if x.requires_grad:
            leaves.append(y.requires_grad_(True))
        return strided_copy(y, device)[1] if noncontig else y.to(device)
    module.train(training)
    args = tree_map(prep, sample.forward_input.args)
    kwargs = tree_map(prep, sample.forward_input.kwargs)
    torch.manual_seed(0)
    out = module(*args, **kwargs)
    total = weighted_total(out, padded)
    wrt = leaves + [p for p in module.parameters() if p.requires_grad]
    grads = None
    if total is not None and wrt:
        grads = list(torch.autograd.grad(total, wrt, allow_unused=True))
    return out, grads, list(module.buffers())


def _has_uninitialized(module) -> bool:
    from torch.nn.parameter import is_lazy
    return any(map(is_lazy, module.parameters())) or any(map(is_lazy, module.buffers()))


def _dry_call(module, sample, device) -> None:
    """One call without grad: what initializes a ``Lazy*`` module."""
    import torch
    from torch.utils._pytree import tree_map

    def prep(x):
        return x.detach().to(device) if isinstance(x, torch.Tensor) else x
    with torch.no_grad():
        module(*tree_map(prep, sample.forward_input.args),
               **tree_map(prep, sample.forward_input.kwargs))


def _run_module(info, dtype, training: bool, n_samples: int, noncontig: bool = False,
                variant: str = "op") -> dict:
    import torch
    import lazy_runtime as lr
    dev = lr.device()
    samples = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True,
                                      training=training)[:n_samples]
    lr.reset_metrics()
    pairs, errors = [], []
    for s in samples:
        args, kwargs = s.constructor_input.args, s.constructor_input.kwargs
        try:
            torch.manual_seed(0)
            eager = info.module_cls(*args, **kwargs).to(dtype)
            fresh = copy.deepcopy(eager)
            lazy_init = _has_uninitialized(eager)
            if lazy_init:
                _dry_call(eager, s, "cpu")
            state = copy.deepcopy(eager.state_dict())
            want = _call(eager, s, "cpu", training, noncontig, variant)
        except Exception:
            continue   # a sample torch itself refuses
        try:
            if lazy_init:   # moved uninitialized, initialized by a call on the device
                lazy = fresh.to(dev)
                _dry_call(lazy, s, dev)
                lazy.load_state_dict(state)
            else:
                lazy = copy.deepcopy(fresh).to(dev)
                lazy.load_state_dict(state)
            got = _call(lazy, s, dev, training, noncontig, variant)
            lr.mark_step()
            pairs.append((want, got))
        except Exception as e:
            errors.append(f"{type(e).__name__}: {str(e)[:200]}")
    rec = {"samples": len(pairs) + len(errors)}
    if variant in PADDED:   # (how the graphs ran: padded, or exactly for want of a rule)
        rec.update(padded_runs=lr.metrics()["padded_executions"],
                   exact=sorted(lr.metrics()["exact_compiles"]))
    diffs = []
    for (out0, g0, b0), (out1, g1, b1) in pairs:
        for what, a, b in (("output", out0, out1), ("gradient", g0, g1), ("buffer", b0, b1)):
            d = _compare(a, b)
            if d:
                diffs.append(f"{what}: {d}")
                break
    fallbacks = dict(lr.metrics()["fallback_ops"])
    if errors:
        rec.update(status="lazy_error", detail=errors[0])
    elif diffs:
        rec.update(status="differs", detail=diffs[0])
    elif not pairs:
        rec["status"] = "skipped"
    else:
        rec["status"] = "fallback" if fallbacks else "match"
    if fallbacks:
        rec["fallback_ops"] = fallbacks
    return rec


def worker(dtype_name: str, start: int, stop: int, n_samples: int, only,
           noncontig: bool = False, variant: str = "op") -> None:
    """Sweep module_db[start:stop], train and eval, one JSON line per module and mode."""
    import opinfo_sweep
    import torch
    if variant in PADDED:
        import lazy_runtime as lr
        lr.config.poison_padding = True   # (a value that reads the padding shows it)
        lr.config.buckets = PADDED_BUCKETS
    opinfo_sweep.WIDE_TOLERANCE[0] = TOLERANCE64
    from torch.testing._internal.common_modules import module_db
    dtype = getattr(torch, dtype_name)
    for i in range(start, min(stop, len(module_db))):
        info = module_db[i]
        if only and info.name not in only:
            continue
        if dtype not in info.dtypes:
            continue
        print(json.dumps({"i": i, "op": info.name, "dtype": dtype_name, "started": True}),
              flush=True)
        for training in (True, False):
            # (an exception here is the sweep's own failure: sample generation)
            rec = guarded(lambda: _run_module(info, dtype, training, n_samples, noncontig,
                                              variant))
            rec.update(i=i, op=f"{info.name} ({'train' if training else 'eval'})",
                       dtype=dtype_name)
            print(json.dumps(rec), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--samples", type=int, default=6, help="sample inputs per module")
    p.add_argument("--only", default="", help="comma-separated ModuleInfo names (nn.Linear)")
    p.add_argument("--json", default="", help="write every record here")
    p.add_argument("--noncontig", action="store_true",
                   help="inputs as strided views made on each device (not contiguous)")
    p.add_argument("--variant", default="op", choices=("op",) + PADDED,
                   help="padded: the first (padded_last: last) dim of each forward input "
                        "marked dynamic on the lazy device, its padding poisoned")
    p.add_argument("--worker", nargs=3, metavar=("DTYPE", "START", "STOP"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    only = [s for s in a.only.split(",") if s]
    if a.worker:
        worker(a.worker[0], int(a.worker[1]), int(a.worker[2]), a.samples, only, a.noncontig,
               a.variant)
        return 0
    from torch.testing._internal.common_modules import module_db
    records = []
    for dtype in a.dtypes.split(","):
        def command(start, dtype=dtype):
            return [sys.executable, __file__, "--worker", dtype, str(start),
                    str(len(module_db)), "--samples", str(a.samples)] + \
                   (["--only", ",".join(only)] if only else []) + \
                   (["--noncontig"] if a.noncontig else []) + ["--variant", a.variant]
        records += run_workers(command, len(module_db), dtype)
    report(records, lambda r: KNOWN.get(r["op"].split(" ")[0]) if r["status"] in (
        "differs", "lazy_error", "fallback") else None, "modules x modes", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
