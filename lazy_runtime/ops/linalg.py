"""Matrix products. Shapes from ``shape_fns.matmul_shape``; JAX matmuls at full precision,
accumulating half types in float32 as torch does."""

from __future__ import annotations

import jax.numpy as jnp
import torch

from .common import HIGHEST, jdt, opmath, sf
from .registry import lowering, rule

aten = torch.ops.aten


def _check_dtypes(op, *ts):
    d = ts[0].dtype
    for t in ts[1:]:
        if t.dtype != d:
            raise RuntimeError(f"{op}: expected m1 and m2 to have the same dtype, but got: "
                               f"{d} != {t.dtype}".replace("torch.", ""))
    return d


def _mm(a, b, out_dtype):
    acc = jdt(opmath(out_dtype))
    pref = acc if acc != a.dtype else None
    return jnp.matmul(a, b, precision=HIGHEST, preferred_element_type=pref)


@rule(aten.mm.default)
def mm_rule(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError("mm: both arguments must be 2D")
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("mm", a, b)


@rule(aten.bmm.default)
def bmm_rule(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError("bmm: both arguments must be 3D")
    sf.require_equal(a.shape[0], b.shape[0], "SI130", "bmm batch sizes")
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("bmm", a, b)


@rule(aten.mv.default, aten.dot.default)
def mv_rule(a, b):
    return sf.matmul_shape(tuple(a.shape), tuple(b.shape)), _check_dtypes("mv", a, b)


@lowering(aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default, ctx=True)
def lower_mm(ctx, a, b):
    return _mm(a, b, ctx.dtype)


@rule(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def addmm_rule(x, a, b, *, beta=1, alpha=1):
    out = sf.matmul_shape(tuple(a.shape), tuple(b.shape))
    sf.broadcast_shapes(tuple(x.shape), out)
    return out, _check_dtypes("addmm", x, a, b)


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, ctx=True)
def lower_addmm(ctx, x, a, b, *, beta=1, alpha=1):
    p = _mm(a, b, ctx.dtype)
    if alpha != 1:
        p = p * alpha
    if beta == 0:
        return p
    return p + (x if beta == 1 else x * beta).astype(p.dtype)
