"""JAX's own single-device solvers behind jaxmg's conventions (the triangle
read, NaN and info on failure). Used for small problems and one-device
meshes; the matrix is replicated first, so every device of the mesh computes
the (small) result. Its factors are JAX's own: the upper Cholesky factor, and
LU with LAPACK's pivots."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax.sharding import PartitionSpec as P

from jaxmg._src import failures, sharding
from jaxmg._src.engines import base
from jaxmg._src.placement import BATCH_ELEMENT


def _failed(values):
    # JAX's solvers report failure as NaN; the failing order is not known here.
    return jnp.any(jnp.isnan(values)).astype(jnp.int32)


def _whole(x, placement):
    return sharding.constrain(x, placement, P())


def _b_spec(layout, b_sharded):
    return P(layout.placement.axis, None) if b_sharded else P()


class Native(base.Engine):
    name = "jax"

    def cholesky(self, a, layout):
        c, _ = jsl.cho_factor(_whole(a, layout.placement), lower=False)
        return c, _failed(jnp.diagonal(c))

    def cho_solve(self, factor, info, b, layout, b_sharded):
        x = jsl.cho_solve((factor, False), _whole(b, layout.placement))
        return sharding.constrain_result(failures.nan_where_failed(x, info), layout.placement,
                                         _b_spec(layout, b_sharded))

    def cholesky_logdet(self, factor, info, layout):
        logdet = 2 * jnp.sum(jnp.log(jnp.real(jnp.diagonal(factor))))
        return failures.nan_where_failed(logdet, info)

    def cholesky_upper(self, factor, info, layout):
        return sharding.constrain_result(jnp.triu(factor), layout.placement, layout.row_spec)

    def potri(self, a, layout):
        factor, info = self.cholesky(a, layout)
        eye = jnp.eye(a.shape[0], dtype=a.dtype)
        if layout.placement is BATCH_ELEMENT:
            # Batched and sharded like the factor: vmap over a batch sharded
            # on explicit mesh axes wants both operands of a triangular solve
            # so (jax 0.10). A factor that failed is NaN already.
            eye = eye + 0 * factor
        inv = jsl.cho_solve((factor, False), eye)
        # Exactly Hermitian, as the engines' inverses: the lower triangle
        # mirrored, a real diagonal.
        lower = jnp.tril(inv, -1)
        diagonal = jnp.real(jnp.diagonal(inv)).astype(inv.dtype)
        inv = lower + jnp.conj(lower).mT + jnp.diag(diagonal)
        return sharding.constrain_result(inv, layout.placement, layout.row_spec), info

    def lu(self, a, layout):
        lu, piv = jsl.lu_factor(_whole(a, layout.placement))
        singular = jnp.any(jnp.diagonal(lu) == 0) | jnp.any(jnp.isnan(jnp.diagonal(lu)))
        return lu, piv, singular.astype(jnp.int32)

    def lu_solve(self, lu, piv, info, b, layout, b_sharded, trans):
        x = jsl.lu_solve((lu, piv), _whole(b, layout.placement), trans=trans)
        return sharding.constrain_result(failures.nan_where_failed(x, info), layout.placement,
                                         _b_spec(layout, b_sharded))

    def lu_matrices(self, lu, piv, layout):
        return sharding.constrain_result(lu, layout.placement, layout.row_spec), piv

    def lu_slogdet(self, lu, piv, info, layout):
        diag = jnp.diagonal(lu)
        swaps = jnp.sum(piv != jnp.arange(piv.shape[0], dtype=piv.dtype))
        return base.slogdet_from(diag, swaps, lu.dtype)

    def syevd(self, a, layout, vectors):
        # a's upper triangle, read as the lower one of a^H: JAX's default
        # triangle, so the vectors match jaxmg's LAPACK engine and JAX's own.
        a = jnp.conj(_whole(a, layout.placement)).T
        if vectors:
            w, v = jnp.linalg.eigh(a, UPLO="L", symmetrize_input=False)
            v = sharding.constrain_result(v, layout.placement, P(None, layout.placement.axis))
        else:
            w, v = jnp.linalg.eigvalsh(a, UPLO="L", symmetrize_input=False), None
        return w, v, _failed(w)

    # Inside shard_map dispatch sends a matrix here where one device holds
    # all of it (an axis of one device: the block is the matrix), and any
    # matrix of order 0. They run the whole-matrix methods above with the
    # checks the routines make outside shard_map, so that both call forms
    # give the same bits, info and NaN on failure.
    def potrs_blocks(self, a, b, placement, tile):
        layout = self._whole_block(a, placement, tile)
        if layout is None:
            return b, jnp.int32(0)
        factor, info = self.cholesky(a, layout)
        info = self.finite_info(a, info, layout, upper=True)
        return self.cho_solve(factor, info, b, layout, b_sharded=False), info

    def potri_blocks(self, a, placement, tile):
        layout = self._whole_block(a, placement, tile)
        if layout is None:
            return a, jnp.int32(0)
        inverse, info = self.potri(a, layout)
        info = self.finite_info(a, info, layout, upper=True)
        return failures.nan_where_failed(inverse, info), info

    def syevd_blocks(self, a, placement, tile, vectors):
        layout = self._whole_block(a, placement, tile)
        if layout is None:
            w = jnp.zeros((0,), jnp.finfo(a.dtype).dtype)
            return w, (a if vectors else None), jnp.int32(0)
        w, v, info = self.syevd(a, layout, vectors)
        info = self.finite_info(a, info, layout, upper=True)
        vh = failures.nan_where_failed(jnp.conj(v).T, info) if vectors else None
        return failures.nan_where_failed(w, info), vh, info

    def _whole_block(self, a, placement, tile):
        """The layout of one device's whole matrix, None for order 0. The
        tile must still divide the rows: the same code must not start
        failing when run on several devices."""
        if a.shape[1] == 0:
            return None
        base.block_tile(a.shape[0], tile)
        return base.layout(placement, a.shape[1], 0, self)

    def qr(self, a, placement):
        q, r = jnp.linalg.qr(_whole(a, placement), mode="reduced")
        return q, r, jnp.int32(0)


ENGINE = base.registered(Native())
