"""Conformance sweep: every modeling file of the installed transformers on the lazy device,
against eager torch.

Each model is built as ``transformers_sweep.py`` builds it (the file's bare ``*Model``
first, its config shrunk, random weights, eval mode, a sample input of 2 x 7 tokens, or
images, audio or features of the config's sizes); here N(0, 0.02) is added to every float
parameter (``_perturb``). Models whose sample fails eagerly are skipped, unless it runs
with ``use_cache=False``. Per model: one forward eagerly and one on the lazy device
(``use_cache=False`` where forward takes it), a loss ``sum(out_i * w_i)`` over every float
output with fixed random weights, and its backward. Each model ends as:

- ``match``: every output within 1e-4 of eager's (relative to that output's largest
  value) and every gradient within 1e-4 (relative to the model's largest eager gradient,
  as ``runtime_hf_sweep.py`` measures); or, beyond that, float64 runs find the lazy
  outputs and gradients no further from float64's than float32 rounding explains: twice
  eager float32's worst error, or ten times how far float64's values move when every
  weight moves by a float32 ulp, the largest of three such moves (``ill_conditioned``: a
  model whose float32 values amplify rounding); or, further still, the model run in
  float64 on the lazy device is within 1e-10 of eager float64 (``lazy_float64``: a wrong
  lowering is as wrong in float64, while float32 values a few ulps from a threshold, a
  ReLU's input at 1e-8, fall on either side of it); ``fallbacks`` lists the ops torch ran;
- ``differs``: the lazy outputs or gradients further from float64's than that (or no
  float64 run possible), or a gradient present on one side only;
- ``random``: the forward draws random numbers in eval mode (two eager runs under two
  seeds differ): values from the lazy stream differ from torch's by design, so nothing is
  compared;
- ``lazy error``: the lazy device raised where eager torch did not (the error's last
  lines kept);
- ``skipped``, ``timeout``, ``crashed``: the model or its sample could not be built or
  run eagerly / the per-model limit / the worker died.

With ``--train`` each model is trained instead: ``TRAIN_STEPS`` AdamW steps on its batch
against random targets of its float outputs (mean squared error), eagerly and as a whole
step under ``lr.compile_step`` (the optimizer through ``lr.compile_optimizer``), the
batch and targets copied to the device in the step. It ends as ``match`` (every step's
loss within 1e-4 of eager's, relative, or, beyond, within twice how far eager's own move
when every weight moves by a float32 ulp, and the step replayed), ``traced`` (the losses
agree, but every step was traced: the record keeps the runtime's reasons), ``differs``,
or as above.

Each model runs in a worker process killed past the limit (``transformers_sweep``'s).

Usage: python benchmarks/runtime_transformers_sweep.py [--train] [--limit 180] [--only a,b]
                                                      [--every N] [--json FILE] [--write]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import transformers_sweep as ts  # noqa: E402

JSON = ROOT / "benchmarks" / "runtime_transformers_sweep.json"
TITLE = "## Conformance: every transformers model on the lazy device"
TRAIN_TITLE = "## Conformance: every transformers model trained under compile_step"
TRAIN_JSON = ROOT / "benchmarks" / "runtime_transformers_training.json"
TOLERANCE = 1e-4
TOLERANCE_64 = 1e-10   # float64 on the lazy device against eager float64 (ulps: 1e-16)
_TRAIN_ENV = "RUNTIME_TRANSFORMERS_SWEEP_TRAIN"


# ---- one model -----------------------------------------------------------------------------


def tensor_leaves(out) -> list:
    """The tensors of a model's output, in order (ModelOutput, tuples, lists and dicts
    walked; caches and other objects left out)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensor_leaves(o)]
    return []


def _floating(ts_) -> list:
    return [t for t in ts_ if t.is_floating_point()]


def _forward(model, kwargs):
    import inspect

    takes = inspect.signature(model.forward).parameters
    extra = {"use_cache": False} if "use_cache" in takes else {}
    return tensor_leaves(model(**kwargs, **extra))


def _summed(outs, others, term):
    """The sum of ``term(out, other)`` over the outputs that need grad (None if none)."""
    total = None
    for t, w in zip(outs, others):
        if t.requires_grad:
            x = term(t, w)
            total = x if total is None else total + x
    return total


def _loss(outs, weights):
    return _summed(outs, weights, lambda t, w: (t * w).sum())


def relative_difference(lazy, eager) -> float:
    """max |lazy - eager| over max |eager| (NaN where eager has NaN counts as equal; a
    NaN or inf elsewhere, or a shape or dtype apart, is inf)."""
    import torch

    if lazy.shape != eager.shape or lazy.dtype != eager.dtype:
        return float("inf")
    if not lazy.is_floating_point():
        return 0.0 if torch.equal(lazy, eager) else float("inf")
    lazy, eager = lazy.double(), eager.double()
    same_nan = torch.isnan(lazy) == torch.isnan(eager)
    if not bool(same_nan.all()):
        return float("inf")
    finite = torch.isfinite(eager)
    infinite = ~finite & ~torch.isnan(eager)
    if not bool((lazy[infinite] == eager[infinite]).all()):
        return float("inf")
    if not bool(finite.any()):
        return 0.0
    diff = (lazy[finite] - eager[finite]).abs().max().item()
    scale = eager[finite].abs().max().item()
    return diff / scale if scale else diff


def _runs_without_cache(model, kwargs) -> bool:
    """Whether the sample the analyzer's sweep found failing runs with ``use_cache=False``
    (hybrid models' caches of linear-attention layers refuse ``get_seq_length``)."""
    import inspect
    import warnings

    import torch

    if model is None or "use_cache" not in inspect.signature(model.forward).parameters:
        return False
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _forward(model, kwargs)
    except Exception:
        return False
    return True


def _is_random(model, kwargs) -> bool:
    """Whether two eager forwards under two seeds differ."""
    import torch

    runs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            runs.append(_forward(model, kwargs))
    return any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(*runs))


def check_model(module_name: str) -> dict:
    """Build one modeling file's model, run it eagerly and lazily; a record of how they
    compare."""
    return _checked(module_name, _compare)


def check_training(module_name: str) -> dict:
    """Build one modeling file's model, train it a few steps eagerly and as a whole step
    under ``lr.compile_step``; a record of how the losses compare and whether the step
    replayed."""
    return _checked(module_name, _compare_training)


def _checked(module_name: str, compare) -> dict:
    import warnings

    record, model, kwargs, _ = ts.prepare(module_name)
    start = time.perf_counter()
    if record.get("status") == "skipped":
        return record
    if not record.get("sample_runs") and not _runs_without_cache(model, kwargs):
        record.update(status="skipped",
                      reason=f"sample fails eagerly: {record.get('sample_error', '')}")
        return record
    record["status"] = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compare(record, model, kwargs)
    except Exception as e:   # (an error of the sweep's own, outside the lazy run)
        record.update(status="sweep error", reason=f"{type(e).__name__}: {str(e)[:300]}",
                      traceback=traceback.format_exc()[-1500:])
    record["seconds"] = round(record["seconds"] + time.perf_counter() - start, 2)
    return record


TRAIN_STEPS = 6


def _mse(outs, targets):
    """The mean squared distance of the outputs that need grad to their targets, summed."""
    return _summed(outs, targets, lambda t, w: ((t - w) ** 2).mean())


def _compare_training(record: dict, model, kwargs) -> None:
    """``TRAIN_STEPS`` AdamW steps on one batch and random targets of the float outputs
    (mean squared error; eval mode: no dropout), eagerly and as a
    whole step under ``lr.compile_step`` (the optimizer through ``lr.compile_optimizer``,
    as the runtime's README says): the losses compared, and whether the step was replayed
    (from its third call on, as a shape-stable step is)."""
    import lazy_runtime as lr

    prepared = _prepared(record, model, kwargs)
    if prepared is None:
        return
    lazy_model, reference, weights = prepared

    def training_step(m, opt, device=None):
        def step(batch, targets):
            m.train()
            m.eval()   # (each step: LeViT's eval-mode cache would hold the last step's graph)
            if device is not None:   # (the batch and targets copied in the step, as usual)
                batch = _on(batch, device)
                targets = [t.to(device) for t in targets]
            loss = _mse(_floating(_forward(m, batch)), targets)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step

    if _mse(_floating(_forward(model, kwargs)), weights) is None:
        record.update(status="skipped", reason="no output has a gradient")
        return
    eager_step = training_step(model, _adamw(model))
    try:
        eager = [eager_step(kwargs, weights).item() for _ in range(TRAIN_STEPS)]
    except Exception as e:
        record.update(status="skipped", reason=f"eager training fails: {type(e).__name__}: "
                                               f"{str(e)[:200]}")
        return
    dev = lr.device()
    lr.clear_cache()   # (each model compiles its own: the worker's memory stays bounded)
    lr.reset_metrics()
    try:
        lazy_model = lazy_model.to(dev)
        opt = lr.compile_optimizer(_adamw(lazy_model))
        step = lr.compile_step(training_step(lazy_model, opt, dev), lazy_model, opt)
        lazy = [step(kwargs, weights).item() for _ in range(TRAIN_STEPS)]
    except Exception as e:
        record.update(status="lazy error", reason=f"{type(e).__name__}: {str(e)[:400]}",
                      traceback=traceback.format_exc()[-2500:], **_metrics(lr))
        return
    m = lr.metrics()
    record.update(_metrics(lr), eager_losses=eager, lazy_losses=lazy,
                  step_replays=m["step_replays"],
                  replay_misses=dict(list(m["replay_misses"].items())[:3]))
    apart = _losses_apart(lazy, eager)
    record["difference"] = apart
    if apart > TOLERANCE:
        # eager runs judge: how far do eager float32 trainings move apart when every
        # weight moves by a float32 ulp (routing among experts, a top-k, a normalization of
        # tiny variance turn rounding into different steps)? The lazy losses may be that far.
        spread = 0.0
        for seed in range(3):
            nudged = _nudged(copy.deepcopy(reference), seed)
            moved = training_step(nudged, _adamw(nudged))
            spread = max(spread, _losses_apart(
                [moved(kwargs, weights).item() for _ in range(TRAIN_STEPS)], eager))
        record["spread"] = bound = spread
        referee = _float64_losses(training_step, reference, kwargs, weights) \
            if apart > max(2 * spread, TOLERANCE) else None
        if referee is not None:
            # chaos the nudges did not reach: the lazy losses no further from float64's
            # than eager float32's are (CLAP's contrastive logits, scaled by exp(logit_scale))
            lazy_off, eager_off = _losses_apart(lazy, referee), _losses_apart(eager, referee)
            record.update(lazy_from_float64=lazy_off, eager_from_float64=eager_off)
            if lazy_off <= 2 * max(eager_off, spread, TOLERANCE):
                bound = max(spread, eager_off)
        if apart > max(2 * bound, TOLERANCE):
            record.update(status="differs", reason=f"losses {lazy} against eager {eager}; "
                                                   f"eager nudged by an ulp moves {spread:.1e}")
            return
        from64 = "" if referee is None else (f"; from float64's, lazy {lazy_off:.1e}, eager "
                                             f"float32 {eager_off:.1e}")
        record.update(ill_conditioned=True,
                      reason=f"losses {apart:.1e} from eager's; eager's own with the weights "
                             f"moved by an ulp, up to {spread:.1e}{from64}")
    if not m["step_replays"]:
        record.update(status="traced", reason="not replayed: "
                                              f"{'; '.join(record['replay_misses']) or '?'}")
    else:
        record["status"] = "match"


def _float64_losses(training_step, reference, kwargs, weights):
    """The losses of the same training in float64 (eagerly, a copy of the reference), or
    None where the model does not run in float64."""
    try:
        model = copy.deepcopy(reference).double()
        step = training_step(model, _adamw(model))
        batch, targets = _doubled(kwargs), [w.double() for w in weights]
        return [step(batch, targets).item() for _ in range(TRAIN_STEPS)]
    except Exception:
        return None


def _adamw(model):
    """AdamW at lr 1e-3 with eps 1e-6: Adam's default 1e-8 turns gradients of rounding
    noise (1e-9 where the gradient is mathematically zero) into steps of the full rate and
    a random sign, and two float32 runs apart after a few steps."""
    import torch

    return torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6)


def _losses_apart(losses, reference) -> float:
    """The largest difference of two runs' losses, relative (to 1 where smaller)."""
    return max(abs(a - b) / max(abs(b), 1.0) for a, b in zip(losses, reference))


def _run(model, kwargs, weights, backward=True, device=None):
    """(output tensors, {parameter: grad}) of one forward and the backward of
    ``sum(out_i * w_i)``, on ``device`` (the lazy one: barrier, then read back)."""
    import torch

    import lazy_runtime as lr

    if device is not None:
        kwargs = _on(kwargs, device)
        weights = [w.to(device) for w in weights]
    # (train then eval again: eval-mode caches built by an earlier run, LeViT's attention
    # biases keyed by device, hold values from before ``_perturb`` and no gradient)
    model.train()
    model.eval()
    torch.manual_seed(0)
    outs = _forward(model, kwargs)
    loss = _loss(_floating(outs), weights)
    if loss is not None and backward:
        loss.backward()
    if device is not None:
        lr.mark_step()
    return ([t.detach().cpu() for t in outs],
            {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None})


def _prepared(record: dict, model, kwargs):
    """(a copy for the lazy device, a copy kept as the reference, random weights of the
    float outputs) after ``_perturb``; None, the record saying why, where the forward
    draws random numbers."""
    import torch

    _perturb(model)
    lazy_model, reference = copy.deepcopy(model), copy.deepcopy(model)
    if _is_random(model, kwargs):
        record.update(status="random", reason="the forward draws random numbers in eval mode")
        return None
    torch.manual_seed(0)
    with torch.no_grad():
        shapes = [t.shape for t in _floating(_forward(model, kwargs))]
    gen = torch.Generator().manual_seed(0)
    return lazy_model, reference, [torch.randn(s, generator=gen) for s in shapes]


def _on(kwargs: dict, device) -> dict:
    """The keyword arguments with their tensors moved to ``device``."""
    import torch

    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def _compare(record: dict, model, kwargs) -> None:
    import lazy_runtime as lr

    prepared = _prepared(record, model, kwargs)
    if prepared is None:
        return
    lazy_model, reference, weights = prepared
    backward = True
    try:
        eager = _run(model, kwargs, weights)
    except Exception as e:   # torch's own backward refuses: forwards compared only
        record["eager_backward_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        backward = False
        eager = _run(copy.deepcopy(reference), kwargs, weights, backward=False)
    dev = lr.device()
    lr.clear_cache()   # (each model compiles its own: the worker's memory stays bounded)
    lr.reset_metrics()
    t0 = time.perf_counter()
    try:
        lazy = _run(lazy_model.to(dev), kwargs, weights, backward, device=dev)
    except Exception as e:
        record.update(status="lazy error", reason=f"{type(e).__name__}: {str(e)[:400]}",
                      traceback=traceback.format_exc()[-2500:], **_metrics(lr))
        return
    record["lazy_seconds"] = round(time.perf_counter() - t0, 2)
    record.update(_metrics(lr))
    apart = differences(lazy, eager)
    worst = max(apart, key=apart.get, default=None)
    record.update(outputs=len(eager[0]), gradients=len(eager[1]),
                  difference=apart.get(worst, 0.0), where=worst)
    if worst is None or apart[worst] <= TOLERANCE:
        record["status"] = "match"
        return
    if apart[worst] == float("inf"):   # a shape, a NaN's place, a gradient on one side only
        record.update(status="differs", reason=worst if "side only" in worst else
                      f"{worst}: a shape, a dtype, or a NaN's or an infinity's place apart")
        return
    # Beyond the tolerance: float64 runs judge whether the lazy values are further from
    # the exact ones than float32 rounding explains: eager float32's own error, and how far
    # the float64 values move when every weight moves by a float32 ulp (a model whose
    # float32 values amplify rounding, such as a softmax over logits of hundreds; the
    # largest of three such moves, which vary tenfold with the direction).
    try:
        exact64 = copy.deepcopy(reference).double()
        args64 = (_doubled(kwargs), [w.double() for w in weights], backward)
        moved = [_run(_nudged(copy.deepcopy(exact64), seed), *args64) for seed in range(3)]
        exact = _run(exact64, *args64)
    except Exception as e:
        record.update(status="differs", reason=f"{worst}: {apart[worst]:.1e} (no float64 "
                                               f"run: {type(e).__name__})")
        return
    lazy_error, eager_error = differences(lazy, exact), differences(eager, exact)
    moves = [differences(m, exact) for m in moved]
    sensitivity = {k: max(d.get(k, 0.0) for d in moves) for k in lazy_error}
    worse = []
    for group in ("output", "grad"):   # each group's worst lazy error against the bound
        keys = [k for k in lazy_error if k.startswith(group)]
        if keys:
            k = max(keys, key=lazy_error.get)
            bound = max(2 * max(map(eager_error.get, keys)),
                        10 * max(map(sensitivity.get, keys)), TOLERANCE)
            if lazy_error[k] > bound:
                worse.append((k, bound))
    record.update(lazy_error=max(lazy_error.values()), eager_error=max(eager_error.values()),
                  sensitivity=max(sensitivity.values()))
    if worse:
        k, bound = worse[0]
        reason = (f"{k}: {apart[k]:.1e} from eager; from float64 {lazy_error[k]:.1e}, over "
                  f"the bound {bound:.1e}")
        apart64 = _lazy_float64_apart(exact64, exact, args64)
        if apart64 is not None and apart64 <= TOLERANCE_64:
            # the lowering computes the float64 values: the float32 ones fell on the other
            # side of a tie (a ReLU's input a few ulps from zero, HGNetV2's), not a bug
            record.update(status="match", ill_conditioned=True, lazy_float64=apart64,
                          reason=f"{reason}; float64 on the lazy device {apart64:.1e} from "
                                 f"eager float64: a tie in float32 rounding")
        else:
            record.update(status="differs", lazy_float64=apart64, reason=reason + (
                "" if apart64 is None else f"; float64 on the lazy device {apart64:.1e}"))
    else:
        record.update(status="match", ill_conditioned=True,
                      reason=f"{worst}: {apart[worst]:.1e} from eager; from float64 eager float32 "
                             f"{record['eager_error']:.1e}, lazy {record['lazy_error']:.1e}, "
                             f"an ulp on the weights moves it up to {record['sensitivity']:.1e}")


def _lazy_float64_apart(exact64, exact, args64) -> float | None:
    """How far the model run in float64 on the lazy device is from eager float64 (the
    largest of ``differences``); None where it cannot run. A wrong lowering is as wrong in
    float64; values that float32 rounding puts on either side of a threshold agree there."""
    import lazy_runtime as lr

    dev = lr.device()
    try:
        lazy64 = _run(copy.deepcopy(exact64).to(dev), *args64, device=dev)
    except Exception:
        return None
    return max(differences(lazy64, exact).values(), default=0.0)


def _nudged(model, seed: int):
    """``model`` with every weight moved by N(0, 1) float32 ulps."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.mul_(1 + 2.0 ** -23 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


def _doubled(kwargs: dict) -> dict:
    return {k: v.double() if getattr(v, "is_floating_point", lambda: False)() else v
            for k, v in kwargs.items()}


def differences(a: tuple, b: tuple) -> dict:
    """{"output i ..." / "grad of name": how far run ``a`` is from run ``b``}: each output
    relative to its largest value, each gradient relative to the model's largest."""
    (outs_a, grads_a), (outs_b, grads_b) = a, b
    out = {}
    if len(outs_a) != len(outs_b):
        out[f"{len(outs_a)} outputs against {len(outs_b)}"] = float("inf")
    for i, (x, y) in enumerate(zip(outs_a, outs_b)):
        both_float = x.is_floating_point() and y.is_floating_point()   # (float64's: exact)
        out[f"output {i} {tuple(y.shape)}"] = relative_difference(
            *((x.double(), y.double()) if both_float else (x, y)))
    for name in sorted(set(grads_a) ^ set(grads_b)):
        out[f"grad of {name} on one side only"] = float("inf")
    scale = max((g.abs().max().item() for g in grads_b.values() if g.numel()), default=0.0) or 1.0
    for name in set(grads_a) & set(grads_b):
        x, y = grads_a[name].double(), grads_b[name].double()
        if x.shape != y.shape or (not bool(x.isfinite().all()) and bool(y.isfinite().all())):
            out[f"grad of {name}"] = float("inf")
        elif x.numel():
            out[f"grad of {name}"] = (x - y).abs().max().item() / scale
    return out


def _perturb(model) -> None:
    """N(0, 0.02) added to every float parameter: a zero-initialized router otherwise
    gives every expert one score, and the order topk picks among ties is unspecified
    (torch's CPU kernel and XLA's differ)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.02)


def _metrics(lr) -> dict:
    m = lr.metrics()
    return dict(fallbacks=dict(m["fallback_ops"]), compiles=m["compiles"],
                graphs=m["graphs_executed"])


# ---- reporting ------------------------------------------------------------------------------

STATUSES = ("match", "traced", "differs", "random", "lazy error", "sweep error", "skipped",
            "timeout", "crashed")


def describe(r: dict) -> str:
    name = r["module"].rsplit(".", 1)[-1]
    if r["status"] == "match":
        fb = r.get("fallbacks") or {}
        at = f" at {r['where']}" if r.get("where") else ""
        extra = (f"{r['difference']:.1e}{at}, {r.get('compiles', 0)} compiles"
                 + (f", {r['step_replays']} replays" if "step_replays" in r else "")
                 + (f", fallbacks {fb}" if fb else "")
                 + (" (ill-conditioned)" if r.get("ill_conditioned") else ""))
    else:
        extra = r.get("reason", "")[:200]
    return f"{name:<40} {r['status']:<11} {r.get('seconds', 0):6.1f}s  {extra}"


def summarize(records: list[dict]) -> dict:
    by_status = Counter(r["status"] for r in records)
    fallbacks = Counter()
    for r in records:
        for op, n in (r.get("fallbacks") or {}).items():
            fallbacks[op] += 1
    return {"files": len(records), **{s: by_status.get(s, 0) for s in STATUSES},
            "with_fallbacks": sum(1 for r in records
                                  if r["status"] == "match" and r.get("fallbacks")),
            "fallback_ops_by_models": dict(fallbacks.most_common(20))}


def table(records: list[dict], summary: dict, wall: float, train: bool = False,
          every: int = 1) -> str:
    import torch
    import transformers

    what = (f"{TRAIN_STEPS} AdamW steps (lr 1e-3, eps 1e-6) on one batch, the loss the mean "
            "squared error of the float outputs to random targets, eagerly and as a whole "
            "step under `lr.compile_step`. *match*: "
            f"the losses within {TOLERANCE:g} of eager's (relative), or within twice how far "
            "eager's own move when every weight moves by a float32 ulp, and the step "
            "replayed; "
            "*traced*: the losses agree but the step was traced every time (why: the "
            "record's replay misses)") if train else (
            "one forward and the backward of sum(out_i * w_i) over its float outputs, "
            f"eagerly and on the lazy device. *match*: outputs and gradients within "
            f"{TOLERANCE:g} of eager's (relative to the output's / the model's largest "
            "gradient's magnitude), or, ill-conditioned, no further from float64's than "
            "float32 rounding explains (see the script)")
    lines = [f"{TRAIN_TITLE if train else TITLE} ({datetime.date.today().isoformat()})", "",
             f"`python benchmarks/runtime_transformers_sweep.py{' --train' if train else ''}"
             f"{f' --every {every}' if every > 1 else ''}`: "
             f"transformers {transformers.__version__}, torch {torch.__version__}; "
             f"{summary['files']} modeling files, {wall / 60:.0f} minutes. Each model built as "
             "the analyzer's robustness sweep builds it (shrunk config, random weights plus "
             "N(0, 0.02), eval mode, 2 x 7 tokens or the config's images, audio or features); "
             f"{what}.", "", "| outcome | models |", "|---|---:|"]
    lines += [f"| {s} | {summary[s]} |" for s in STATUSES]
    lines += [f"| match, with ops run eagerly by torch | {summary['with_fallbacks']} |", ""]
    if summary["fallback_ops_by_models"]:
        lines.append("Ops run eagerly, by the number of models reaching them: " + ", ".join(
            f"`{op}` {n}" for op, n in summary["fallback_ops_by_models"].items()) + ".")
        lines.append("")
    odd = [r for r in records if r.get("ill_conditioned") or r["status"] in (
        "differs", "random", "lazy error", "sweep error", "timeout", "crashed")]
    if odd:
        lines += ["| model | outcome | why |", "|---|---|---|"]
        lines += [f"| {r['module'].split('.')[2]} | {r['status']}"
                  f"{' (ill-conditioned)' if r.get('ill_conditioned') else ''} | "
                  f"{r.get('reason', '').replace('|', '/')[:220]} |" for r in odd]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--limit", type=float, default=180.0, help="seconds per model")
    p.add_argument("--only", default="", help="comma-separated model directory names")
    p.add_argument("--json", default=None,
                   help=f"where to write the records (default: {JSON.name} for a full sweep)")
    p.add_argument("--every", type=int, default=1,
                   help="every n-th modeling file only (in name order: a sample)")
    p.add_argument("--train", action="store_true",
                   help=f"train each model {TRAIN_STEPS} steps under lr.compile_step instead")
    p.add_argument("--write", action="store_true",
                   help=f"put the summary into benchmarks/RESULTS.md under {TITLE!r} "
                        f"(with --train: {TRAIN_TITLE!r})")
    a = p.parse_args()
    if a.worker:   # (the parent's --train reaches its workers through the environment)
        ts.worker_main(check_training if os.environ.get(_TRAIN_ENV) else check_model)
        return
    if a.train:
        os.environ[_TRAIN_ENV] = "1"
    modules = ts.modeling_modules()
    if a.only:
        wanted = set(a.only.split(","))
        modules = [m for m in modules if m.split(".")[2] in wanted]
    modules = modules[::a.every]
    start = time.time()
    records = ts.run_sweep(modules, a.limit, 1, progress=lambda s: print(s, flush=True),
                           script=__file__, describe=describe)
    summary = summarize(records)
    wall = time.time() - start
    text = table(records, summary, wall, a.train, a.every)
    print()
    print(text)
    out = a.json or (None if a.only or a.every > 1 else TRAIN_JSON if a.train else JSON)
    if out is not None:
        Path(out).write_text(json.dumps({"summary": summary, "records": records}, indent=1))
    if a.write:
        from results_file import replace_section
        replace_section(TRAIN_TITLE if a.train else TITLE, text)


if __name__ == "__main__":
    main()
