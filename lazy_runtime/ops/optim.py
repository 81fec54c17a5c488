"""The optimizer step's own kernels: GradScaler's ops and the fused optimizers
(``Adam``/``AdamW``/``SGD``/``Adagrad`` with ``fused=True``), as decompositions into the
per-tensor ops torch's CPU kernels apply, so they are recorded like any other op.

Each decomposes the op's functional form; its in-place spelling, the one torch calls,
writes the results back (``dispatch._mutating``). Arguments torch's kernels refuse answer
``NotImplemented``: the op runs eagerly and torch raises its error. The fused kernels'
arithmetic follows torch's CPU kernels step for step (in float32 for 16-bit tensors,
rounded once at the end); torch's vectorized loops fuse some multiply-adds, so results
agree to float rounding, not bit for bit.
"""

from __future__ import annotations

import torch

from ..tensor import new_base, node_of
from .foreach import with_shared_scalars
from .registry import decomposition

aten = torch.ops.aten
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


# ---- GradScaler's ops (torch.amp.GradScaler: unscale_, update) ----------------------


def _one_float32(t) -> bool:
    return t.numel() == 1 and t.dtype == torch.float32


@decomposition(aten._amp_foreach_non_finite_check_and_unscale.default)
def amp_unscale(grads, found_inf, inv_scale):
    """Each gradient times ``inv_scale`` (a 16-bit one computed in float32 and rounded, as
    torch's kernels do and as the lazy ``mul`` of a 0-d float32 does); ``found_inf``
    becomes 1 where any element of any gradient is not finite, and is kept otherwise."""
    if not (_one_float32(found_inf) and _one_float32(inv_scale)) or any(
            g.dtype not in _FLOATS for g in grads):
        return NotImplemented
    inv = inv_scale.reshape(())
    out = [g * inv for g in grads]
    if not grads:
        return out, found_inf.clone()
    bad = torch.stack([torch.isfinite(g).logical_not().any() for g in grads]).any()
    return out, torch.where(bad, torch.ones_like(found_inf), found_inf)



@decomposition(aten._amp_update_scale.default)
def amp_update_scale(scale, growth_tracker, found_inf, growth_factor: float,
                     backoff_factor: float, growth_interval: int):
    """torch's kernel: after an overflow the scale times ``backoff_factor`` and the count of
    good steps reset; else that count plus one, and at ``growth_interval`` the scale times
    ``growth_factor`` (kept if finite) and the count reset. The products are in float64
    (the float32 scale times a C double), rounded to float32."""
    if not (_one_float32(scale) and _one_float32(found_inf)) or growth_tracker.numel() != 1 \
            or growth_tracker.dtype != torch.int32:
        return NotImplemented
    found = found_inf.reshape(()) != 0
    wide = scale.to(torch.float64)
    backed_off = (wide * backoff_factor).to(torch.float32)
    grown = (wide * growth_factor).to(torch.float32)
    good_steps = growth_tracker + 1
    grow = good_steps == growth_interval
    new_scale = torch.where(found, backed_off,
                            torch.where(grow & torch.isfinite(grown), grown, scale))
    new_tracker = torch.where(found | grow, torch.zeros_like(growth_tracker), good_steps)
    return new_scale, new_tracker


# ---- fused optimizers -----------------------------------------------------------------


def _rec(packet, *args):
    """``packet(*args)`` recorded directly (``dispatch.call_op``), as the ``_foreach_*``
    ops' elements are: a fused step records some twenty ops per parameter, and going
    through torch's dispatcher again costs about 5 µs an op."""
    if not _CALL_OP:
        from ..dispatch import call_op
        _CALL_OP.append(call_op)
    return _CALL_OP[0](packet, args, {})


_CALL_OP: list = []


def _opmath(t):
    """``t`` in its compute dtype: float32 for 16-bit floats."""
    return t if t.dtype in _WIDE else t.to(torch.float32)


def _as(t, dtype):
    # (``to`` a tensor's own dtype would still pass through torch's dispatcher)
    return t if t.dtype == dtype else t.to(dtype)


_WIDE = (torch.float32, torch.float64)


def _usable(lists, grad_scale, found_inf, steps=None) -> bool:
    """What torch's fused kernels accept: equally long lists (an empty one: not used) of
    one floating dtype and shape per parameter, a one-element step count per parameter
    (for the kernels that take ``steps``), float32 ``grad_scale``/``found_inf`` of one
    element."""
    params = lists[0]
    used = [x for x in lists if len(x)]
    if any(len(x) != len(params) for x in used) or \
            steps is not None and len(steps) != len(params):
        return False
    for group in zip(*used):
        if group[0].dtype not in _FLOATS or any(
                t.dtype != group[0].dtype or t.shape != group[0].shape for t in group[1:]):
            return False
    return all(s.numel() == 1 for s in steps or ()) and all(
        t is None or (t.numel() == 1 and t.dtype == torch.float32)
        for t in (grad_scale, found_inf))


def _step_with_shared_scalars(numbers, fn):
    """``fn()`` with one graph input per distinct float among ``numbers`` (a fused step's
    hyperparameters, a tensor lr aside)."""
    return with_shared_scalars([float(v) for v in numbers if isinstance(v, (int, float))], fn)


def _gradient(p, g, grad_scale, maximize: bool, weight_decay: float):
    """Every fused kernel's start: the parameter and its gradient in their compute dtype,
    the gradient divided by ``grad_scale`` if given (and the value the kernel stores back
    into it: the quotient rounded to its dtype), negated to maximize, plus the parameter
    times ``weight_decay``."""
    P, G, g_out = _opmath(p), _opmath(g), g
    if grad_scale is not None:
        G = _rec(aten.div, G, _as(grad_scale.reshape(()), G.dtype))
        g_out = _as(G, g.dtype)
    if maximize:
        G = _rec(aten.neg, G)
    if weight_decay != 0:
        G = _rec(aten.add, G, _rec(aten.mul, P, weight_decay))
    return P, G, g_out


def _kept_if_skipped(found_inf, new, old):
    """torch's kernels return at once where ``found_inf`` is exactly 1: nothing changes."""
    if found_inf is None:
        return new
    skip = found_inf.reshape(()) == 1.0
    return [n if n is o else _rec(aten.where, skip, o, n) for n, o in zip(new, old)]


def _as_float64(lr):
    """The learning rate as a 0-d float64 tensor: a tensor lr's own; a float's, one input
    of the graph (what the kernel derives from it, ``1 - lr * weight_decay``, is then
    computed in the graph, in float64 as in Python: the same numbers, and one input a
    replay that follows a scheduled lr can link to it, ``replay_numbers``)."""
    if isinstance(lr, torch.Tensor):
        return lr.reshape(()).to(torch.float64)
    from ..dispatch import _scalar_leaf
    return new_base(_scalar_leaf(float(lr)))


def _fused_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr,
                beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
                found_inf=None, decoupled):
    lists = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else [])
    if not _usable(lists, grad_scale, found_inf, state_steps) or (
            amsgrad and len(max_exp_avg_sqs) != len(params)) or (
            not amsgrad and len(max_exp_avg_sqs)):
        return NotImplemented
    lr = _as_float64(lr)

    def step():
        mul, add, div = aten.mul, aten.add, aten.div
        outs = [[] for _ in range(5)]
        corrections: dict = {}
        decay = 1 - lr * weight_decay if decoupled and weight_decay != 0 else None
        for i, (p, g, m, v, s) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs,
                                                 state_steps)):
            P, G, g_out = _gradient(p, g, grad_scale, maximize,
                                    0 if decoupled else weight_decay)
            if decay is not None:
                P = _rec(mul, P, _compute(decay, P.dtype))
            M = _rec(aten.lerp, _opmath(m), G, 1 - beta1)
            V = _rec(add, _rec(mul, _opmath(v), beta2), _rec(mul, _rec(mul, G, 1 - beta2), G))
            new = [None, g_out, _as(M, m.dtype), _as(V, v.dtype)]
            if amsgrad:
                V = _rec(aten.maximum, _opmath(max_exp_avg_sqs[i]), V)
                new.append(_as(V, max_exp_avg_sqs[i].dtype))
            neg_step_size, bc2_sqrt = _per_step(corrections, s, P.dtype, lambda n: (
                -lr / (1 - beta1 ** n), torch.sqrt(1 - beta2 ** n)))
            denom = _rec(add, _rec(div, _rec(aten.sqrt, V), bc2_sqrt), eps)
            P = _rec(add, P, _rec(div, _rec(mul, neg_step_size, M), denom))
            new[0] = _as(P, p.dtype)
            old = [p, g, exp_avgs[i], exp_avg_sqs[i]] + (
                [max_exp_avg_sqs[i]] if amsgrad else [])
            for out, value in zip(outs, _kept_if_skipped(found_inf, new, old)):
                out.append(value)
        return tuple(outs)
    return _step_with_shared_scalars((beta1, beta2, 1 - beta1, 1 - beta2, eps, weight_decay,
                                      lr), step)


def _per_step(memo: dict, step, dtype, make) -> tuple:
    """``make(n)``, the float64 numbers a kernel derives from a parameter's step count
    ``n`` (read as float32, as torch's kernels read it), in the compute ``dtype``. An
    optimizer's step counts are usually one value (one node): computed once per call."""
    key = (node_of(step), dtype)
    if key not in memo:
        n = step.reshape(()).to(torch.float64)
        memo[key] = tuple(_compute(x, dtype) for x in make(n))
    return memo[key]


def _compute(x, dtype):
    """A float64 number or 0-d tensor in the compute ``dtype`` (the kernel's
    ``scalar_t(x)``)."""
    return _as(x, dtype) if isinstance(x, torch.Tensor) else x


@decomposition(aten._fused_adam.default, aten._fused_adam.tensor_lr)
def fused_adam(*args, **kwargs):
    return _fused_adam(*args, **kwargs, decoupled=False)


@decomposition(aten._fused_adamw.default, aten._fused_adamw.tensor_lr)
def fused_adamw(*args, **kwargs):
    return _fused_adam(*args, **kwargs, decoupled=True)


@decomposition(aten._fused_sgd.default, aten._fused_sgd.tensor_lr)
def fused_sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
              nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    buffers = momentum_buffer_list if momentum != 0 else []
    if not _usable((params, grads, buffers), grad_scale, found_inf) or (
            momentum != 0 and len(buffers) != len(params)):
        return NotImplemented
    neg_lr = -_as_float64(lr)

    def step():
        outs = [[], [], []]
        for i, (p, g) in enumerate(zip(params, grads)):
            P, G, g_out = _gradient(p, g, grad_scale, maximize, weight_decay)
            new, old = [None, g_out], [p, g]
            if momentum != 0:
                B = G if is_first_step else _rec(
                    aten.add, _rec(aten.mul, _opmath(buffers[i]), momentum),
                    _rec(aten.mul, G, 1 - dampening))
                new.append(_as(B, buffers[i].dtype))
                old.append(buffers[i])
                G = _rec(aten.add, G, _rec(aten.mul, B, momentum)) if nesterov else B
            new[0] = _as(_rec(aten.add, P, _rec(aten.mul, G, _compute(neg_lr, P.dtype))), p.dtype)
            for out, value in zip(outs, _kept_if_skipped(found_inf, new, old)):
                out.append(value)
        return tuple(outs)
    return _step_with_shared_scalars((weight_decay, momentum, 1 - dampening, neg_lr),
                                     step)


@decomposition(aten._fused_adagrad.default, aten._fused_adagrad.tensor_lr)
def fused_adagrad(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
                  maximize, grad_scale=None, found_inf=None):
    if not _usable((params, grads, state_sums), grad_scale, found_inf, state_steps):
        return NotImplemented
    tensor_lr = isinstance(lr, torch.Tensor)
    lr = _as_float64(lr)

    def step():
        outs = [[], [], []]
        corrections: dict = {}
        for p, g, acc, s in zip(params, grads, state_sums, state_steps):
            P, G, g_out = _gradient(p, g, grad_scale, maximize, weight_decay)
            S = _rec(aten.add, _opmath(acc), _rec(aten.mul, G, G))
            clr, = _per_step(corrections, s, P.dtype, lambda n: (
                lr / (1.0 + (n - 1.0) * lr_decay),))
            P = _rec(aten.sub, P, _rec(aten.div, _rec(aten.mul, clr, G),
                                       _rec(aten.add, _rec(aten.sqrt, S), eps)))
            new = [_as(P, p.dtype), g_out, _as(S, acc.dtype)]
            for out, value in zip(outs, _kept_if_skipped(found_inf, new, [p, g, acc])):
                out.append(value)
        # (the float-lr overload also returns the steps, which its schema marks written)
        return tuple(outs) if tensor_lr else (*outs, list(state_steps))
    return _step_with_shared_scalars((lr_decay, weight_decay, eps, lr), step)
