"""The LAPACK-backed factorizations and solvers of ``jax.lax.linalg`` the lowerings use,
run one matrix at a time when graphs compile for the CPU.

Why: jaxlib 0.10's CPU LAPACK kernels split a batch of matrices into tasks on XLA's
intra-op thread pool and block until they finish. XLA runs independent ops of a graph at
once on that same pool, so as many batched LAPACK calls as the pool has threads (two on
a two-core machine: Qwen3.5-MoE's two triangular solves of one system) each hold a thread
and wait for tasks no thread is left to run: the graph never finishes (no error, no CPU
used). One matrix per call runs in the calling thread. The batch becomes a loop
(``lax.map``) around the call, and JAX's gradients of it (which call LAPACK again: a
Cholesky's vjp solves triangular systems) loop too. (jaxlib 0.11 builds without that
parallel path; the loop costs a few µs per matrix.) On a GPU the calls are kept as
they are.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.lax import linalg as lax_linalg

from .common import on_xla_cpu


def per_matrix(fn, arrays: tuple, core: tuple):
    """``fn(*arrays)`` with the leading (batch) dims of ``arrays`` looped over on the CPU:
    each array's last ``core[i]`` dims are one problem's, the dims before them the batch
    (the same for all); the results get the batch dims back."""
    batch = arrays[0].shape[:arrays[0].ndim - core[0]]
    if not batch or math.prod(batch) == 1 or not on_xla_cpu():
        return fn(*arrays)
    count = math.prod(batch)
    flat = tuple(a.reshape((count,) + a.shape[a.ndim - k:]) for a, k in zip(arrays, core))
    out = lax.map(lambda xs: fn(*xs), flat)
    return jax.tree_util.tree_map(lambda r: r.reshape(batch + r.shape[1:]), out)


def lu(a):
    return per_matrix(lax_linalg.lu, (a,), (2,))


def triangular_solve(a, b, **kw):
    return per_matrix(lambda a_, b_: lax_linalg.triangular_solve(a_, b_, **kw), (a, b), (2, 2))


def cholesky(a, **kw):
    return per_matrix(lambda a_: lax_linalg.cholesky(a_, **kw), (a,), (2,))


def qr(a, **kw):
    return per_matrix(lambda a_: lax_linalg.qr(a_, **kw), (a,), (2,))


def svd(a, **kw):
    return per_matrix(lambda a_: lax_linalg.svd(a_, **kw), (a,), (2,))


def eigh(a, **kw):
    return per_matrix(lambda a_: lax_linalg.eigh(a_, **kw), (a,), (2,))


def qr_raw(a):
    """``jnp.linalg.qr(a, mode="raw")``: (LAPACK's geqrf result transposed, taus)."""
    return per_matrix(lambda a_: jnp.linalg.qr(a_, mode="raw"), (a,), (2,))


def householder_product(a, taus):
    return per_matrix(lax_linalg.householder_product, (a, taus), (2, 1))


def ormqr(a, taus, c, **kw):
    return per_matrix(lambda a_, t_, c_: lax_linalg.ormqr(a_, t_, c_, **kw), (a, taus, c),
                      (2, 1, 2))
