"""Complex tensors: the views between complex and real (``view_as_real``,
``view_as_complex``, ``conj``), the ops building complex values (``complex``, ``polar``)
or taking them apart (``angle``), and ``COMPLEX_OK``: the lowerings checked against torch
for complex operands. Any other op with a complex operand runs eagerly (``dispatch``),
so a lowering written for real numbers never silently meets a complex one.

``conj`` is a view here, but a materialized one: torch marks a conjugate view with a bit
and resolves it later; a lazy tensor's value is already conjugated (``is_conj()`` is
False), and a write through it is conjugated back into its base.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from .. import dtypes as D
from ..errors import NoLowering
from .common import jdt
from .registry import COMPLEX_OK, lowering, rule

aten = torch.ops.aten


def _real_part(d, name):
    """The float dtype of the parts of a ``name`` result built from ``d`` values."""
    if d not in D.COMPLEX_OF:   # half types would make complex32, which XLA lacks
        if d in D.HALF_TYPES:
            raise NoLowering(getattr(aten, name).default, f"{d} parts")
        raise RuntimeError(f"{name}: expected both inputs to be Half, Float or Double tensors "
                           f"but got {str(d)[6:].capitalize()}")
    return d


# ---- views ------------------------------------------------------------------------------

@rule(aten.view_as_real.default)
def view_as_real_rule(x):
    if x.dtype not in D.REAL_OF:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return tuple(x.shape) + (2,), D.REAL_OF[x.dtype]


@lowering(aten.view_as_real.default)
def lower_view_as_real(x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@rule(aten.view_as_complex.default)
def view_as_complex_rule(x):
    if x.dtype not in D.COMPLEX_OF:
        if x.dtype in D.HALF_TYPES:
            raise NoLowering(aten.view_as_complex.default, f"{x.dtype} parts")
        raise RuntimeError("view_as_complex is only supported for floating point tensors, "
                           f"but got a tensor of scalar type: {str(x.dtype)[6:].capitalize()}")
    if x.ndim == 0 or x.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if x.stride(-1) != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in x.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if x.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return tuple(x.shape[:-1]), D.COMPLEX_OF[x.dtype]


@lowering(aten.view_as_complex.default)
def lower_view_as_complex(x):
    return lax.complex(x[..., 0], x[..., 1])


# (prims.conj_physical: what torch's decompositions of vdot/vecdot reach)
@rule(aten._conj.default, aten._conj_physical.default, torch.ops.prims.conj_physical.default)
def conj_rule(x):
    return tuple(x.shape), x.dtype


@lowering(aten._conj.default, aten._conj_physical.default,
          torch.ops.prims.conj_physical.default)
def lower_conj(x):
    return jnp.conj(x)


# ---- building and taking apart ------------------------------------------------------------

def _parts_rule(name, a, b):
    if a.dtype != b.dtype:
        raise RuntimeError(f"Expected object of scalar type {str(a.dtype)[6:].capitalize()} but "
                           f"got scalar type {str(b.dtype)[6:].capitalize()} for second argument")
    shape = torch.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    return tuple(shape), D.COMPLEX_OF[_real_part(a.dtype, name)]


@rule(aten.complex.default)
def complex_rule(real, imag):
    return _parts_rule("complex", real, imag)


@rule(aten.polar.default)
def polar_rule(r, theta):
    return _parts_rule("polar", r, theta)


@lowering(aten.complex.default)
def lower_complex(re, im):
    re, im = jnp.broadcast_arrays(re, im)
    return lax.complex(re, im)


@lowering(aten.polar.default)
def lower_polar(r, theta):
    r, theta = jnp.broadcast_arrays(r, theta)
    return lax.complex(r * jnp.cos(theta), r * jnp.sin(theta))


@rule(aten.angle.default)
def angle_rule(x):
    d = x.dtype
    if d in D.REAL_OF:
        return tuple(x.shape), D.REAL_OF[d]
    return tuple(x.shape), d if d.is_floating_point else torch.get_default_dtype()


@lowering(aten.angle.default, ctx=True)
def lower_angle(ctx, x):
    if jnp.iscomplexobj(x):
        return jnp.angle(x)
    x = x.astype(jdt(ctx.dtype))   # torch: pi where negative, 0 elsewhere, nan kept
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.pi, 0).astype(x.dtype))


# Lowerings written for real numbers that are also right for complex ones (jnp and lax
# follow the same conventions as torch there: branch cuts, conjugate-free products).
# Each is checked against torch in tests/runtime/test_complex.py.
COMPLEX_OK.update([
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor,
    aten.rsub.Scalar, aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar,
    aten.neg.default, aten.abs.default, aten.sgn.default, aten.sqrt.default,
    aten.rsqrt.default, aten.exp.default, aten.log.default, aten.reciprocal.default,
    aten.positive.default, aten.sin.default, aten.cos.default, aten.tan.default,
    aten.sinh.default, aten.cosh.default, aten.tanh.default, aten.sigmoid.default,
    aten.tanh_backward.default, aten.sigmoid_backward.default,
    aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar, aten.eq.Tensor,
    aten.eq.Scalar, aten.ne.Tensor, aten.ne.Scalar, aten.isnan.default, aten.isfinite.default,
    aten.isinf.default, aten.where.self, torch.ops.prims.where.default,
    aten.masked_fill.Scalar, aten.fill.Scalar,
    aten.clone.default, aten.addcmul.default, aten.lerp.Scalar, aten._to_copy.default,
    aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim,
    aten.prod.dim_int, aten.cumsum.default, aten.cumprod.default, aten.mm.default,
    aten.bmm.default, aten.mv.default, aten.dot.default, aten.addmm.default,
    aten.cat.default, aten.stack.default, aten.repeat.default, aten.flip.default,
    aten.roll.default, aten.constant_pad_nd.default, aten.tril.default, aten.triu.default,
    aten._unsafe_view.default, aten.index.Tensor, aten.index_select.default,
    aten.gather.default, aten.index_put.default, aten.scatter.src, aten.scatter.value,
    aten.scatter_add.default, aten.index_add.default, aten.slice_scatter.default,
    aten.select_scatter.default, aten.diagonal_scatter.default,
    aten.as_strided_scatter.default, aten.exp2.default, aten.expm1.default, aten.log2.default,
    aten.log10.default, aten.log1p.default, aten.asin.default, aten.acos.default,
    aten.atan.default, aten.asinh.default, aten.acosh.default, aten.atanh.default,
    aten.addcdiv.default, aten.linalg_vector_norm.default, aten.var.correction,
    aten.std.correction, aten.var_mean.correction, aten.prod.default,
    torch.ops.prims.conj_physical.default, aten.any.default, aten.all.dim,
    aten.logical_not.default, aten.logical_and.default, aten.logical_or.default,
    aten.nan_to_num.default, aten.zero.default, aten.masked_fill.Tensor, aten.all.default,
    aten.all.dims, aten.any.dim, aten.any.dims, aten.logical_xor.default, aten.addmv.default,
    aten.baddbmm.default,
])
COMPLEX_OK.update([
    aten.view_as_real.default, aten.view_as_complex.default, aten._conj.default,
    aten._conj_physical.default, aten.complex.default,
    aten.polar.default, aten.angle.default,
])

# Checked later against torch (tests/runtime/test_complex_more.py), with what each needed:
# addbmm, masked_scatter (and its backward), put, take and scatter's add/multiply reduce
# as they were; logaddexp, silu, logsumexp following torch's complex kernels (ops/
# elementwise.py, ops/reduction.py); vector_norm with a complex dtype (the input cast to
# it); normal_ and uniform_ filling both parts as torch does (ops/random_ops.py).
# The deprecated cholesky, cholesky_inverse (through cholesky_ex and cholesky_solve) and
# triangular_solve (its transpose=True is A^T for complex A: ops/linalg.py) too.
# (silu_backward stays out: torch has no complex silu gradient.)
COMPLEX_OK.update([
    aten.addbmm.default, aten.masked_scatter.default, aten.masked_scatter_backward.default,
    aten.put.default, aten.take.default, aten.scatter.reduce, aten.scatter.value_reduce,
    aten.logaddexp.default, aten.silu.default, aten.logsumexp.default,
    aten.normal_.default, aten.uniform_.default, aten.cholesky.default,
    aten.cholesky_inverse.default, aten.triangular_solve.default,
])
# ... and the backward of replication padding (a sum of the grads each element was copied
# to, linear: no conjugate), which ran eagerly for complex grads (``nn_tests_sweep.py``)
COMPLEX_OK.update([
    aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
    aten.replication_pad3d_backward.default,
])
