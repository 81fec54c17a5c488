"""``compile(model, shapes=plan)``: mark a model's inputs dynamic from the analyzer's plan.

The plan is a ``shapeinfer.analyze`` result, its ``to_json()`` dict, or the path of the
JSON written by ``shapeinfer report --format json``. Its ``inputs`` give each forward
parameter's symbolic shape (``["B", "T"]``); every dim that is a plain symbol is marked
dynamic under that name on each call, so the runtime compiles once per bucket from the
first call on (no automatic-dynamic warm-up, no guessing which input dim is which).
When the plan says forward's control flow depends only on shapes, calls are replayed
(``replay.py``): a signature seen before reuses its recorded graph without running Python.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import types

import torch

from .dynamic import mark_dynamic
from .optimizer_replay import OptimizerReplayer
from .replay_numbers import ForwardReplayer
from .replay_sizes import SizePolicy
from .state_stamp import StampedModuleState
from .tensor import LazyTensor
from . import ir

_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


def _plan_json(shapes) -> dict:
    if hasattr(shapes, "to_json"):
        return shapes.to_json()
    if isinstance(shapes, dict):
        return shapes
    if not isinstance(shapes, (str, os.PathLike)):
        raise TypeError(f"shapes= takes a plan (shapeinfer.analyze's result), its to_json() "
                        f"dict or the path of its JSON, not {type(shapes).__name__}")
    with open(shapes) as f:   # (a missing file: FileNotFoundError naming it)
        try:
            data = json.load(f)
        except ValueError as e:
            raise ValueError(f"{shapes}: not a JSON plan ({e}); `shapeinfer report "
                             f"--format json` writes one") from None
    if not isinstance(data, dict):
        raise ValueError(f"{shapes}: not a JSON plan (a {type(data).__name__}, not an object)")
    return data


def input_marks(shapes) -> dict:
    """{forward parameter: {dim: symbol}} from a plan."""
    data = _plan_json(shapes)
    out = {}
    for name, dims in (data.get("inputs") or {}).items():
        marks = {d: s for d, s in enumerate(dims) if isinstance(s, str) and _SYMBOL.match(s)}
        if marks:
            out[name] = marks
    return out


def compile(model, shapes=None, replay=None):  # noqa: A001  (the public name of the contract)
    """Make ``model``'s forward mark its inputs dynamic as ``shapes`` (a plan) says, and
    replay recorded graphs where that is sound.

    Returns ``model`` itself (its ``forward`` is wrapped on the instance), so parameters,
    optimizers and ``state_dict`` are unchanged. Without ``shapes`` it marks nothing:
    automatic dynamic still applies.

    ``replay``: None (the default) replays when the plan says the forward's control flow
    depends only on shapes and constant attributes (``control_flow.shape_only``); True
    replays without a plan (the caller vouches for that); False never replays. A replayed
    call with an exact signature seen before records no ops (see ``replay.py``); where the
    plan also vouches for forward's size arithmetic (``size_arithmetic``), so does a call
    at dynamic sizes never traced (``replay_sizes.py``). An argument may be a plain
    object holding tensors (a key-value cache, written in place): see
    ``replay.object_state``. An int or float argument that changes between calls
    (a sampler's noise level) is followed where the call runs without autograd
    (``replay_numbers.py``): replayed at values never traced once three are.
    """
    if not callable(getattr(model, "forward", None)):
        raise TypeError(f"lazy_runtime.compile takes a module (something with a forward), "
                        f"not {type(model).__name__}")
    data = _plan_json(shapes) if shapes is not None else {}
    marks = input_marks(data)
    control = data.get("control_flow") or {}
    shape_only = bool(control.get("shape_only", False))
    if replay is None:
        replay = shape_only
    forward = model.forward
    # replay across sizes only where the analyzer vouches for forward's size arithmetic
    sizes = SizePolicy.from_plan(control) if replay else None
    inner = ForwardReplayer(forward, StampedModuleState(model), sizes=sizes) \
        if replay else forward
    if not marks and not replay:
        return model
    sig = inspect.signature(forward)

    @functools.wraps(forward)
    def compiled_forward(*args, **kwargs):
        if marks:
            bound = sig.bind_partial(*args, **kwargs)
            for name, dims in marks.items():
                t = bound.arguments.get(name)
                if t is None or not hasattr(t, "ndim"):
                    continue
                if isinstance(t, LazyTensor) and (t._vw or t._st.node.op is not ir.DATA):
                    continue  # a computed value: its layout comes from the graph
                for d, s in dims.items():
                    if d < t.ndim:
                        mark_dynamic(t, d, s)
        return inner(*args, **kwargs)

    model.forward = compiled_forward
    model._lr_shape_only = shape_only
    model._lr_input_marks = marks
    model._lr_replayer = inner if replay else None
    return model


def compile_optimizer(opt, capturable: bool = True):
    """Replay ``opt.step()``: a step whose parameters, grads, state layout and
    hyper-parameters were seen before records one node instead of the optimizer's
    Python (a few hundred ops for Adam on a small model).

    Replay needs every step-dependent value on the device: with ``capturable=True`` (the
    default here) optimizers that have the option (Adam, AdamW, ...) keep their step count
    as a device tensor and compute the bias corrections in the graph. Hyper-parameters are
    guarded by value until two steps differ only in some numbers' values (a learning rate
    a scheduler sets): those are then followed (``replay_numbers``), and a step at a
    value never traced replays once three values are traced. A hyper-parameter held in a
    tensor is moved to the device here (a scheduler fills it in place and the replay
    reads it like state).
    Where ``foreach`` is left to torch (None), it is set (torch picks the ``_foreach_*``
    path for lazy tensors anyway, see ``ops.foreach.make_default_for``): the per-tensor
    loop applies each hyper-parameter to each parameter as a separate number; the
    ``_foreach_*`` ops apply one to all, so the step counters and bias corrections every
    parameter shares are computed once in the graph.
    Returns ``opt`` (its ``step`` is wrapped on the instance).
    """
    _check_optimizer(opt, "compile_optimizer")
    for group in opt.param_groups:
        if capturable and "capturable" in group:
            group["capturable"] = True
        lazy = next((p for p in group["params"] if isinstance(p, LazyTensor)), None)
        for k, v in group.items():
            if k != "params" and type(v) is torch.Tensor and lazy is not None:
                # (a CPU one would be copied into every step: to the device, once)
                group[k] = v.to(lazy.device)
        if group.get("foreach", False) is None and not group.get("fused") and \
                not group.get("differentiable", False):   # (torch refuses those with foreach)
            group["foreach"] = True
    step = opt.step
    replayer = OptimizerReplayer(opt, step)

    def replayed_step(self, *args, **kwargs):
        return replayer(*args, **kwargs)

    # a bound method, as torch's LR schedulers expect of ``opt.step`` (they rewrap it)
    opt.step = types.MethodType(functools.wraps(step)(replayed_step), opt)
    return opt


def _check_optimizer(opt, what: str) -> None:
    """TypeError unless ``opt`` is an optimizer (torch's, or one shaped like it)."""
    if not (isinstance(getattr(opt, "param_groups", None), list)
            and callable(getattr(opt, "step", None))):
        raise TypeError(f"lazy_runtime.{what} takes a torch.optim optimizer (param_groups "
                        f"and step), not {type(opt).__name__}")
