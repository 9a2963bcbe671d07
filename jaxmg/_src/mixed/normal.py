"""The general mixed solve's factor without pivots: the low-precision
Cholesky factor of the Gram matrix G = A^H A.

A^{-1} = G^{-1} A^H, so with L L^H ~ G factored in low precision, the
preconditioner M r = L^-H L^-1 (A^H r) refines x against A as the LU factor
would, and A^H's solves use M' r = A L^-H L^-1 r (A^-H = A G^-1). ||I - M A||
grows with cond(A)^2 (G's condition number): on one H200 at N=32768 it
converged at cond 100 (Cholesky updates at BF16x3; with FP16 updates it
stalled there), and at cond 1e3 G's Cholesky failed and the solve fell back
to float64 LU.

Against a blocked LU it trades pivoting for flops: forming G is N^3
multiply-adds (SYRK's half of a GEMM) at FP16 rates and its Cholesky N^3/3
on the SPD path, but no column waits for a global pivot search, which
bounds any partial-pivoting panel on a GPU (docs/benchmarks.md). A^H is kept
as a float32 (complex64) copy, scaled by a power of two that brings A's
largest column 2-norm into [1, 2), so that G's diagonal lies in [0, 4) and
every entry of G and of its factor within float16's range; G's products
and each A^H r read it.

Memory, in copies of the float64 A: the scaled A^H 0.5, G 0.5 (its lower
block columns, the upper triangle left zero), the Cholesky factor 0.25.

With A's rows sharded over devices, A^H is kept with its columns sharded
(the transpose of each device's rows, no data moved): each block column of
G is then a sum over the devices of their rows' products, reduced to its
rows' owners, and G, with its block columns full height (zero above the
diagonal block), is factored by the SPD path's sharded Cholesky, whose
factor keeps full-height block columns too (0.5 copies). A^H r is a
product reduced over the devices, A y one formed where A's rows live.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from jaxmg._src.mixed import blocks as blk, cholesky as chol, placement, precision

# The variant names the precision G is formed at ("gram": FP16 products,
# "gram_bf16x3": BF16x3, about 16 significant bits, at three times their cost); the
# Cholesky's updates run at the Config's `update`.
VARIANTS = ("gram", "gram_bf16x3")
_GRAM_PRODUCTS = {"gram": "fp16", "gram_bf16x3": "bf16x3"}


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("cholesky", "adjoint", "scale"),
    meta_fields=(),
)
@dataclasses.dataclass(frozen=True)
class GramFactor:
    """cholesky: L L^H = G_c = (c A)^H (c A); adjoint: c A^H at the panel
    precision; scale: c."""

    cholesky: chol.CholeskyFactor
    adjoint: jax.Array
    scale: jax.Array


def scaled_adjoint(a, panel_dtype, rows: placement.Rows = placement.Rows()):
    """(c A^H in panel_dtype, c) with c the power of two that brings A's
    largest column 2-norm into [1, 2); A^H's columns sharded as A's rows are."""
    norms = jnp.sqrt(jnp.sum(jnp.abs(a) ** 2, axis=0))
    c = blk.power_of_two_near_inverse(jnp.max(norms))
    return rows.columns(jnp.conj(a.T * c.astype(a.dtype)).astype(panel_dtype)), c


def gram(ah, block_size: int, update: str, rows: placement.Rows = placement.Rows()):
    """The lower block columns of G = A^H A from A^H, products at `update`;
    the upper triangle outside the diagonal blocks zero (the Cholesky reads
    the lower one). Rows sharded: G's rows sharded likewise."""
    n = ah.shape[0]
    if rows.sharded:
        columns = [rows.rows(jnp.pad(precision.matmul(ah[o:], ah[o : o + w], update, adjoint_y=True),
                                     ((o, 0), (0, 0))))
                   for o, w in blk.partition(n, block_size)]
        return rows.rows(jnp.concatenate(columns, axis=1))
    g = jnp.zeros((n, n), ah.dtype)
    for o, w in blk.partition(n, block_size):
        column = precision.matmul(ah[o:], ah[o : o + w], update, adjoint_y=True)
        g = lax.dynamic_update_slice(g, column, (o, o))
    return g


@precision.jit(static_argnames=("cfg", "rows"))
def factor(a, *, cfg: blk.Config, rows: placement.Rows = placement.Rows()):
    """(GramFactor, info): info 0, or the order at which G's low-precision
    Cholesky found it not positive definite (A singular, or conditioned
    beyond the reach of this factor)."""
    specs = GramFactor(chol.factor_specs(a.shape[0], cfg.block_size, rows), P(None, rows.axis), P())
    body = functools.partial(factor_body, cfg=cfg, rows=rows)
    return placement.call(rows, body, (specs, P()), a)


def factor_body(a, *, cfg: blk.Config, rows: placement.Rows):
    """factor, traced where the mesh is in context (placement.call)."""
    ah, c = scaled_adjoint(a, blk.work_dtype(a.dtype, cfg.panel), rows)
    g = gram(ah, cfg.block_size, _GRAM_PRODUCTS[cfg.variant], rows)
    left = dataclasses.replace(cfg, variant="left")
    f, info = chol._factor(g, jnp.ones((), jnp.finfo(g.dtype).dtype), cfg=left, rows=rows)
    return GramFactor(f, ah, c), info


def solve(f: GramFactor, r, *, adjoint: bool = False):
    """~A^{-1} r (adjoint: ~A^{-H} r) at the factor's precision. r: (N, K),
    of entries near 1 (the refinement scales its columns)."""
    rows = f.cholesky.rows
    r = r.astype(f.adjoint.dtype)
    if adjoint and rows.sharded:  # A^-H = A G^-1: A's rows (A^H's columns) where they live
        out = rows.row_product(jnp.conj(f.adjoint).T, chol._sweeps(f.cholesky, r))
    elif adjoint:
        out = placement.dot(f.adjoint, chol._sweeps(f.cholesky, r), adjoint_x=True)
    else:
        out = chol._sweeps(f.cholesky, rows.whole(placement.dot(f.adjoint, r)))
    # G_c^-1 (c A^H) = A^-1 / c, and (c A^H)^H G_c^-1 = A^-H / c
    return blk.times_scale(out, f.scale)

