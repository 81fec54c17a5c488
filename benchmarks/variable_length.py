"""Variable-length training and inference: eager torch, torch.compile (defaults),
lazy_runtime compiling once per shape (buckets off: classic LazyTensor, as torch_xla) and
lazy_runtime shape-polymorphic (buckets from the analyzer's plan).

    python benchmarks/variable_length.py [--steps 200] [--cap-per-shape 30]
        [--cap-compile 200] [--write] [--plot benchmarks/variable_length.png]

Training: the GPT of examples/train_gpt.py (block 256, dropout 0 so that losses are
comparable), batch 8, sequence lengths uniform in [16, 256] (seed 0), AdamW, one
``loss.item()`` per step. Inference: logits for batch sizes uniform in [1, 16] and lengths
in [16, 256]. The per-shape contenders are slow (a compile at almost every step): they
run only the first ``--cap-*`` steps, and are compared with the others at that step.
The plot needs matplotlib (``pip install -c constraints.txt -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import copy
import os
import datetime
import importlib.util
import statistics
import sys
import time
from pathlib import Path

# torch.compile must compile for real: no FX-graph/Inductor caches from earlier runs.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lazy_runtime as lr  # noqa: E402
import shapeinfer  # noqa: E402

lr.config.compile_cache = None   # compile time is measured: cold compiles


def load_gpt():
    spec = importlib.util.spec_from_file_location("train_gpt", ROOT / "examples" / "train_gpt.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EX = load_gpt()


def lengths(n, seed=0, lo=16, hi=256):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi + 1, (n,), generator=g).tolist()


def make_model():
    torch.manual_seed(0)
    return EX.GPT(vocab=64, block=256, d_model=32, heads=4, layers=2, dropout=0.0)


def train_run(name, model, steps, device=None, prepare=None, compiled_counter=None,
              replay_optimizer=False, whole_step=False):
    """Train ``steps`` steps; per-step wall times, losses and compile counts.
    ``whole_step``: the step through ``lr.compile_step``."""
    opt = EX.make_optimizer(model)
    if replay_optimizer:
        lr.compile_optimizer(opt)
    fwd = prepare(model) if prepare else model

    def one_step(x, y):
        if device is not None:
            x, y = x.to(device), y.to(device)
        loss = EX.loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device is not None:
            lr.mark_step()
        return loss
    run_step = lr.compile_step(one_step, model, opt) if whole_step else one_step
    times, losses, compiles, compile_s = [], [], [], []
    for step, T in enumerate(lengths(steps)):
        x, y = EX.make_batch(step, batch=8, length=T)
        t0 = time.perf_counter()
        loss = run_step(x, y)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        compiles.append(compiled_counter() if compiled_counter else 0)
        if device is not None:
            compile_s.append(lr.metrics()["compile_seconds"])
        print(f"  {name:>16s} step {step:3d} T={T:3d} {times[-1]*1e3:8.1f} ms "
              f"loss {losses[-1]:.4f} compiles {compiles[-1]}", file=sys.stderr)
    return {"times": times, "losses": losses, "compiles": compiles, "compile_s": compile_s}


def infer_run(name, model, calls, device=None, prepare=None, compiled_counter=None):
    fwd = prepare(model) if prepare else model
    g = torch.Generator().manual_seed(1)
    times, outs, compiles = [], [], []
    with torch.no_grad():
        for i in range(calls):
            B = int(torch.randint(1, 17, (1,), generator=g))
            T = int(torch.randint(16, 257, (1,), generator=g))
            x = torch.randint(0, 64, (B, T), generator=g)
            t0 = time.perf_counter()
            out = fwd(x.to(device) if device is not None else x)
            out = out.cpu() if device is not None else out
            times.append(time.perf_counter() - t0)
            outs.append(out[:, -1].clone())
            compiles.append(compiled_counter() if compiled_counter else 0)
    return {"times": times, "outs": outs, "compiles": compiles,
            "compile_s": [lr.metrics()["compile_seconds"]] if device is not None else []}


def lazy_counter():
    return lr.metrics()["compiles"]


def dynamo_counter():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def lazy_prepare(plan=None):
    def prep(model):
        return lr.compile(model, shapes=plan) if plan is not None else model
    return prep


def summary(res, eager=None, kind="train"):
    t = res["times"]
    out = {"steps": len(t), "compiles": res["compiles"][-1], "total_s": sum(t),
           "median_ms": statistics.median(t) * 1e3}
    # time of the steps that compiled, beyond a median step: the cost of compiling
    med = statistics.median(t)
    prev = 0
    extra = 0.0
    for c, dt in zip(res["compiles"], t):
        if c > prev:
            extra += max(dt - med, 0.0)
        prev = c
    # the lazy runtime measures its XLA compiles itself
    out["compile_s"] = res["compile_s"][-1] if res.get("compile_s") else extra
    if eager is not None:
        n = len(t)
        et = eager["times"][:n]
        out["eager_total_s"] = sum(et)
        out["ratio_vs_eager"] = sum(t) / sum(et)
        ce = cl = 0.0
        out["break_even_step"] = None
        for i, (a, b) in enumerate(zip(t, et)):
            cl += a
            ce += b
            if out["break_even_step"] is None and i > 0 and cl <= ce:
                out["break_even_step"] = i
        if kind == "train":
            d = [abs(a - b) for a, b in zip(res["losses"], eager["losses"][:n])]
            out["max_loss_diff"] = max(d)
            out["final_loss_diff"] = d[-1]
        else:
            out["max_out_diff"] = max(float((a - b).abs().max())
                                      for a, b in zip(res["outs"], eager["outs"][:n]))
    return out


def plot(results, path, steps):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        cum, s = [], 0.0
        for dt in r["times"]:
            s += dt
            cum.append(s)
        a1.plot(range(1, len(cum) + 1), cum, label=name)
        a2.plot(range(1, len(cum) + 1), r["compiles"], label=name)
    a1.set_xlabel("step")
    a1.set_ylabel("cumulative wall time (s)")
    a1.set_yscale("log")
    a2.set_xlabel("step")
    a2.set_ylabel("compiles (graphs)")
    a1.legend(fontsize=8)
    a2.legend(fontsize=8)
    fig.suptitle(f"GPT training, batch 8, lengths uniform in [16, 256], {steps} steps")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


BATCH_BUCKET = 16   # inference: every batch padded to one size (config.buckets per symbol)


def fresh_lazy(policy) -> None:
    """An empty compile cache and metrics, and bucket policy ``policy``, for the next
    lazy contender."""
    lr.config.buckets = policy
    lr.clear_cache()
    lr.reset_metrics()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--cap-per-shape", type=int, default=30)
    p.add_argument("--cap-compile", type=int, default=200)
    p.add_argument("--infer-calls", type=int, default=60)
    p.add_argument("--cap-infer-per-shape", type=int, default=15)
    p.add_argument("--write", action="store_true")
    p.add_argument("--plot", default=str(ROOT / "benchmarks" / "variable_length.png"))
    args = p.parse_args()
    # One intra-op thread for every contender: on this shared 2-core machine two OpenMP
    # threads next to any other process slow eager torch down by 10-100x (spin-waits).
    torch.set_num_threads(1)
    dev = lr.device()
    base = make_model()
    sample = torch.randint(0, 64, (2, 12))
    t0 = time.perf_counter()
    plan = shapeinfer.analyze(base, args=(sample,), dims={"idx": ("B", "T")})
    analysis_s = time.perf_counter() - t0

    results = {}
    print("eager", file=sys.stderr)
    results["eager torch"] = train_run("eager", copy.deepcopy(base), args.steps)

    print("torch.compile", file=sys.stderr)
    torch._dynamo.reset()
    mc = copy.deepcopy(base)
    results["torch.compile"] = train_run("torch.compile", mc, args.cap_compile,
                                         prepare=lambda m: torch.compile(m),
                                         compiled_counter=dynamo_counter)

    print("lazy per shape", file=sys.stderr)
    fresh_lazy("off")
    results["lazy, per shape"] = train_run("lazy/per-shape", copy.deepcopy(base).to(dev),
                                           args.cap_per_shape, dev,
                                           compiled_counter=lazy_counter)
    fresh_lazy("pow2")
    print("lazy shape-polymorphic", file=sys.stderr)
    results["lazy, shape-polymorphic"] = train_run(
        "lazy/buckets", copy.deepcopy(base).to(dev), args.steps, dev,
        prepare=lazy_prepare(plan), compiled_counter=lazy_counter, replay_optimizer=True)
    poly_metrics = lr.metrics()
    fresh_lazy("pow2")
    print("lazy shape-polymorphic, whole step", file=sys.stderr)
    results["lazy, shape-polymorphic, whole step"] = train_run(
        "lazy/whole-step", copy.deepcopy(base).to(dev), args.steps, dev,
        prepare=lazy_prepare(plan), compiled_counter=lazy_counter, replay_optimizer=True,
        whole_step=True)
    whole_metrics = lr.metrics()

    eager = results["eager torch"]
    table = {k: summary(v, eager if k != "eager torch" else None) for k, v in results.items()}

    # inference: varying batch sizes and lengths
    inf = {}
    inf["eager torch"] = infer_run("eager", copy.deepcopy(base), args.infer_calls)
    fresh_lazy("off")
    inf["lazy, per shape"] = infer_run("lazy/per-shape", copy.deepcopy(base).to(dev),
                                       args.cap_infer_per_shape, dev,
                                       compiled_counter=lazy_counter)
    inf_metrics = {}
    for label, policy in (("lazy, shape-polymorphic", "pow2"),
                          (f"lazy, shape-polymorphic, batch bucket {BATCH_BUCKET}",
                           {"B": [BATCH_BUCKET], "T": "pow2"})):
        fresh_lazy(policy)
        inf[label] = infer_run("lazy/buckets", copy.deepcopy(base).to(dev), args.infer_calls,
                               dev, prepare=lazy_prepare(plan), compiled_counter=lazy_counter)
        inf_metrics[label] = lr.metrics()
    fresh_lazy("pow2")
    inf_table = {k: summary(v, inf["eager torch"] if k != "eager torch" else None, "infer")
                 for k, v in inf.items()}

    try:
        plot(results, args.plot, args.steps)
        plotted = True
    except ImportError:
        plotted = False

    n = args.cap_per_shape
    at_cap = {"poly": sum(results["lazy, shape-polymorphic"]["times"][:n]),
              "compile": sum(results["torch.compile"]["times"][:n]),
              "eager": sum(results["eager torch"]["times"][:n])}
    md = render(args, table, inf_table, poly_metrics, inf_metrics, analysis_s, plotted, at_cap,
                whole_metrics)
    print(md)
    if args.write:   # (in place of the section of an earlier run)
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from results_file import replace_section
        replace_section("## Shape-polymorphic compilation", md)


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def render(args, table, inf_table, pm, im, analysis_s, plotted, at_cap, wm):
    today = datetime.date.today().isoformat()
    im0 = im["lazy, shape-polymorphic"]
    lines = [f"## Shape-polymorphic compilation ({today})", "",
             f"`python benchmarks/variable_length.py --steps {args.steps} --cap-per-shape "
             f"{args.cap_per_shape} --cap-compile {args.cap_compile} --write`. GPT of "
             "examples/train_gpt.py with block 256 (d_model 32, 4 heads, 2 layers, dropout 0), "
             "batch 8, sequence lengths uniform in [16, 256] (seed 0), AdamW; each step ends "
             "with `loss.item()`; torch uses one intra-op thread (`torch.set_num_threads(1)`) and "
             "Inductor's caches are disabled. Compile time: the runtime's own XLA compile "
             "seconds (lazy); for torch.compile, the wall time of the steps that compiled beyond "
             "a median step. Ratio and break-even are against eager torch over the same steps; "
             "break-even: the first step at which cumulative time is at most eager's. The "
             "per-shape runtime (buckets off: one compile per new length, as torch_xla) is "
             f"capped at {args.cap_per_shape} steps: compare it at that step. "
             f"Analysis of the model (shapeinfer.analyze, B and T symbolic): {analysis_s:.2f} s; "
             "plan `control_flow.shape_only`: true and `size_arithmetic.polynomial`: true, so "
             "`lr.compile` marks B and T dynamic and replays forward and backward: "
             f"{pm['replays']} replayed calls (forward and optimizer) in {args.steps} "
             f"training steps, {pm['replays_across_sizes']} of them at a length never traced "
             f"(predicted from traced lengths); inference: {im0['replays']} of "
             f"{args.infer_calls} calls, "
             f"{im0['replays_across_sizes']} across sizes. The shape-polymorphic contender also "
             "replays the optimizer step (`lr.compile_optimizer`). The whole-step row runs "
             "the same step through `lr.compile_step`: a length is replayed whole once "
             "traced, and at lengths never traced once its bucket's executable has been "
             f"traced at three ({wm['step_replays']} of {args.steps} steps replayed here, "
             f"{wm['step_replays_across_sizes']} of them at lengths never traced); the other "
             "steps are traced as in the row above.",
             "",
             "| contender | steps | compiles | compile (s) | total (s) | median step (ms) | "
             "vs eager | break-even step | final loss diff | max loss diff |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, s in table.items():
        lines.append(f"| {k} | {s['steps']} | {s['compiles']} | {s['compile_s']:.1f} | "
                     f"{s['total_s']:.1f} | {s['median_ms']:.1f} | "
                     f"{_f(s.get('ratio_vs_eager'), '.2f')}x | "
                     f"{_f(s.get('break_even_step'), 'd')} | "
                     f"{_f(s.get('final_loss_diff'), '.1e')} | {_f(s.get('max_loss_diff'), '.1e')} |")
    per = table["lazy, per shape"]
    n = per["steps"]
    lines += ["", f"Shape-polymorphic buckets: {pm['buckets']}; padded executions "
              f"{pm['padded_executions']}; exact compiles {pm['exact_compiles'] or 'none'}.",
              ""]
    lines.append(f"At step {n} (the per-shape cap): per-shape {per['total_s']:.1f} s, "
                 f"shape-polymorphic {at_cap['poly']:.1f} s, torch.compile "
                 f"{at_cap['compile']:.1f} s, eager {at_cap['eager']:.1f} s.")
    lines += ["", "Inference (no grad, logits read back): batch sizes uniform in [1, 16], lengths "
              f"in [16, 256], {args.infer_calls} calls (per-shape capped at "
              f"{args.cap_infer_per_shape}). The last row pads every batch to "
              f"{BATCH_BUCKET} (`lr.config.buckets = {{\"B\": [{BATCH_BUCKET}], \"T\": "
              "\"pow2\"}`): one compile per length bucket, and one more per length bucket met "
              "at batch 1 (a dynamic dim of size 1 is compiled as 1).", "",
              "| contender | calls | compiles | total (s) | median call (ms) | vs eager | "
              "max |logit diff| |", "|---|---:|---:|---:|---:|---:|---:|"]
    for k, s in inf_table.items():
        lines.append(f"| {k} | {s['steps']} | {s['compiles']} | {s['total_s']:.1f} | "
                     f"{s['median_ms']:.1f} | {_f(s.get('ratio_vs_eager'), '.2f')}x | "
                     f"{_f(s.get('max_out_diff'), '.1e')} |")
    lines += [""] + [f"Inference buckets ({k}): {m['buckets']}." for k, m in im.items()]
    lines += [""]
    if plotted:
        lines += ["![compiles and cumulative time per step](variable_length.png)", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
