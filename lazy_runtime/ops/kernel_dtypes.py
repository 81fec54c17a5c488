"""The dtypes torch's CPU kernels refuse, op by op: there the op runs eagerly, so torch
raises its own error (``"elu_cpu" not implemented for 'Long'``) where the lowering or
the decomposition would have computed a value. Found by ``benchmarks/opinfo_sweep.py
--refused`` (each OpInfo entry in the dtypes it does not list for the CPU), every
integer width checked; a refusal wider than torch's costs only an eager run, since
torch's kernel then decides. Where torch's CUDA kernel takes a dtype its CPU kernel
refuses and libraries rely on it for devices other than the CPU, the device follows CUDA:
``histc`` of integers (transformers' Mixtral counts its experts' tokens so). Imported
after the other op modules: it wraps their rules and decompositions.
"""

from __future__ import annotations

import torch

from .registry import RULES, decomposed_where, refuse

aten = torch.ops.aten

BOOL = frozenset({torch.bool})
INTEGER = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
COMPLEX = frozenset({torch.complex64, torch.complex128})
HALF = frozenset({torch.float16, torch.bfloat16})
NOT_FLOATING = BOOL | INTEGER | COMPLEX


def _first_dtype(args):
    return next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)


def refused_for(ops, dtypes, bad=None) -> None:
    """``ops`` run eagerly where their first tensor argument's dtype is in ``dtypes`` (or
    where ``bad(args, kwargs)``, given instead): the rule of a lowered op refuses them,
    a decomposed op's decomposition does. (Never for float32 and float64 operands alone,
    so an elementwise op keeps its same-layout shortcut, ``registry.SAME_LAYOUT``.)"""
    test = bad or (lambda args, kwargs: _first_dtype(args) in dtypes)
    reason = "a dtype torch's CPU kernel refuses (torch's error)"
    for op in ops:
        if op in RULES:
            refuse((op,), lambda args, kwargs, dt, _t=test: _t(args, kwargs), reason,
                   with_kwargs=True, same_layout=True)
        else:
            decomposed_where(op, lambda *args, _t=test, **kwargs: not _t(args, kwargs),
                             reason)


# no integers or bools
refused_for([aten._native_batch_norm_legit_functional.default,
             aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
             aten._native_batch_norm_legit.no_stats, aten._batch_norm_with_update.default,
             aten.native_layer_norm.default, aten.native_dropout.default,
             aten.normal_.default, aten.uniform_.default, aten.exponential_.default,
             aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor,
             aten.bernoulli.default, aten.elu.default, aten.celu.default, aten.selu.default,
             aten.gelu.default, aten.hardswish.default, aten.hardsigmoid.default,
             aten.leaky_relu.default, aten.mish.default, aten.softplus.default,
             aten.log_sigmoid_forward.default, aten.binary_cross_entropy_with_logits.default,
             aten.mse_loss.default, aten.soft_margin_loss.default, aten.max_unpool2d.default,
             aten.max_unpool3d.default, aten.im2col.default,
             aten.max_pool2d_with_indices_backward.default, aten.round.decimals,
             aten.renorm.default, aten.linalg_vector_norm.default, aten.dist.default],
            BOOL | INTEGER)
# floating point only
refused_for([aten.glu.default, aten.hardshrink.default, aten.huber_loss.default,
             aten.smooth_l1_loss.default], NOT_FLOATING)
# float32 and float64 only
refused_for([aten.multi_margin_loss.default, aten.multilabel_margin_loss_forward.default],
            NOT_FLOATING | HALF)
# no complex
refused_for([aten.native_group_norm.default, aten.index_reduce.default, aten.nansum.default,
             aten.special_xlog1py.default, aten.bernoulli.p, aten.bernoulli_.float],
            COMPLEX)
refused_for([aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar], BOOL | COMPLEX)
refused_for([aten.normal.Tensor_Tensor], (),   # a complex std (beside a tensor mean)
            lambda args, kwargs: isinstance(args[1], torch.Tensor) and args[1].is_complex())
refused_for([aten.special_log_ndtr.default], HALF)
# no bool
refused_for([aten.dot.default, aten.vdot.default, aten.mm.default, aten.bmm.default,
             aten.mv.default, aten.addmm.default, aten.addmv.default, aten.baddbmm.default,
             aten.addbmm.default, aten._trilinear.default, aten.trace.default,
             aten.clamp.Tensor, aten.threshold.default, aten.topk.default,
             aten.reflection_pad1d.default, aten.reflection_pad2d.default,
             aten.reflection_pad3d.default, aten.replication_pad1d.default,
             aten.replication_pad2d.default, aten.replication_pad3d.default], BOOL)
# interpolation and adaptive average pooling: floating point, and uint8 for nearest (uint8
# bilinear too, but torch interpolates it in fixed point, int16 weights, where the
# decomposition's float arithmetic put about one value in ten one apart: eager)
refused_for([aten.upsample_nearest1d.default, aten.upsample_nearest2d.default,
             aten.upsample_nearest3d.default, aten._upsample_nearest_exact1d.default,
             aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact3d.default],
            NOT_FLOATING - {torch.uint8})
refused_for([aten.upsample_linear1d.default, aten.upsample_bilinear2d.default,
             aten.upsample_trilinear3d.default, aten._adaptive_avg_pool2d.default,
             aten._adaptive_avg_pool3d.default], NOT_FLOATING)
# pooling: floating point and int64
refused_for([aten.avg_pool2d.default], BOOL | COMPLEX | (INTEGER - {torch.int64}))
refused_for([aten.avg_pool3d.default], BOOL | COMPLEX | HALF | (INTEGER - {torch.int64}))


def _conv_refused(args, kwargs) -> bool:
    """A convolution of bools, or of integers narrower than int64 dilated or transposed
    (torch's ``slow_conv_dilated``, ``slow_conv_transpose``: floating point and int64)."""
    dt = args[0].dtype
    if dt is torch.bool:
        return True
    return dt in INTEGER and dt is not torch.int64 and (
        any(d != 1 for d in args[5]) or bool(args[6]))


refused_for([aten.convolution.default], (), _conv_refused)
# bool ** bool
refused_for([aten.pow.Tensor_Tensor], (),
            lambda args, kwargs: all(isinstance(a, torch.Tensor) and a.dtype is torch.bool
                                     for a in args[:2]))
# hardtanh: no bool, and no negative lower limit for uint8
refused_for([aten.hardtanh.default], (), lambda args, kwargs: args[0].dtype is torch.bool or (
    args[0].dtype is torch.uint8 and (args[1] if len(args) > 1 else kwargs.get("min_val", -1))
    < 0))


def _random_out_of_range(args, kwargs) -> bool:
    """``random_(from, to)`` with a bound its integer dtype cannot hold (torch: "to - 1 is
    out of bounds for bool")."""
    x, bounds = args[0], list(args[1:3])
    if x.dtype.is_floating_point or x.dtype.is_complex:
        return False
    info = (0, 1) if x.dtype is torch.bool else (torch.iinfo(x.dtype).min,
                                                  torch.iinfo(x.dtype).max)
    low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds + [None])[:2]
    return low < info[0] or (high is not None and not info[0] <= high - 1 <= info[1])


refused_for([getattr(aten.random_, "from"), aten.random_.to], (), _random_out_of_range)
# a cumulative sum or product into a bool
refused_for([aten.cumsum.default, aten.cumprod.default], (),
            lambda args, kwargs: kwargs.get("dtype", args[2] if len(args) > 2 else None)
            is torch.bool)
