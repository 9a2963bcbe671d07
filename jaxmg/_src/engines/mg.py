"""jaxmg's own engine: the matrix in a 1-D block-cyclic layout of column
tiles over the devices, LAPACK on CPU devices and cuSOLVERMg on GPUs, one
participant driving the library over every participant's buffers
(collective.py, xla_ext/engines/{lapack,mg}).

A device's row block of A, read column-major, is a column block of A^T: the
engine works on M = A^T, conjugating where a routine needs A. The order is
padded to a multiple of devices x tile (an identity block for the
factorisations; for syevd, eigenvalues above every one of A's). Factors stay
padded and block-cyclic, rows sharded; LU pivots are sharded like the
factor's columns."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, config, cyclic, failures, sharding
from jaxmg._src.engines import base
from jaxmg._src.engines.base import block_tile, largest_divisor
from jaxmg._src.placement import Placement, platform_of, spans_processes

# cusolverMgGetrf (cuSOLVER 12.0.4, H200) rejects T_A = 1024 with
# CUSOLVER_STATUS_INVALID_VALUE for the matrix descriptor; 256 is verified.
GPU_LU_MAX_TILE = 256
# cusolverMgSyevd takes tiles up to 1024 (JAXMg 0.0.8 lowers larger ones to
# it for that reason; jaxmg's default, 1024, is verified on the GPUs).
GPU_SYEVD_MAX_TILE = 1024
_GPU_MAX_TILE = {"getrf": GPU_LU_MAX_TILE, "syevd": GPU_SYEVD_MAX_TILE}


def choose_tile(n: int, n_devices: int, requested: int | None) -> int:
    """The tile width T_A: as requested, but never wider than a device's share."""
    tile = requested if requested is not None else config.DEFAULT_TILE
    return max(1, min(tile, math.ceil(n / n_devices)))


def padded_size(n: int, n_devices: int, tile: int) -> int:
    step = n_devices * tile
    return math.ceil(n / step) * step


def _shard_map(body, placement, in_specs, out_specs):
    return jax.shard_map(body, mesh=placement.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def _padded(a, layout, diagonal):
    n_pad = padded_size(layout.n, layout.placement.n_devices, layout.tile)
    return sharding.constrain(sharding.pad_matrix(a, n_pad, diagonal), layout.placement,
                              layout.row_spec)


def _b_spec(placement, b_sharded):
    return P(placement.axis, None) if b_sharded else P()


# --------------------------------------------------------------------------
# The per-device calls (inside shard_map)
# --------------------------------------------------------------------------


def _potrs_body(a, b, *, placement, tile, b_sharded):
    results = (
        jax.ShapeDtypeStruct(a.shape, a.dtype),
        jax.ShapeDtypeStruct(b.shape, b.dtype),
        collective.info_shape(),
    )
    return collective.call("potrs", placement, (a, b), results, tile=tile, b_sharded=b_sharded)


def _potri_body(a, *, placement, tile):
    results = (jax.ShapeDtypeStruct(a.shape, a.dtype), collective.info_shape())
    return collective.call("potri", placement, (a,), results, tile=tile)


def _syevd_body(a, *, placement, tile, vectors):
    real = jnp.finfo(a.dtype).dtype
    results = (
        jax.ShapeDtypeStruct(a.shape, a.dtype),
        jax.ShapeDtypeStruct((a.shape[1],), real),
        collective.info_shape(),
    )
    return collective.call("syevd", placement, (a,), results, tile=tile, vectors=vectors)


def _solve_blocks(routine, operands, layout, b_sharded: bool, **attrs):
    """Runs `routine` (cholsolve, lusolve) on the padded factor(s) and b."""
    placement = layout.placement
    factor, b = operands[0], operands[-1]
    b_spec = _b_spec(placement, b_sharded)
    b = sharding.constrain(sharding.pad_rows(b, factor.shape[0]), placement, b_spec)
    specs = (layout.row_spec,) + ((P(placement.axis),) if len(operands) == 3 else ()) + (b_spec,)

    def body(*blocks):
        result = jax.ShapeDtypeStruct(blocks[-1].shape, blocks[-1].dtype)
        (x,) = collective.call(
            routine, placement, blocks, (result,), tile=layout.tile, alias=False,
            b_sharded=b_sharded, **attrs,
        )
        return x

    x = _shard_map(body, placement, specs, b_spec)(*operands[:-1], b)
    return sharding.unpad(x, placement, layout.n, (0,)), b_spec


def _mirror_upper(r, placement):
    """cuSOLVERMg leaves the inverse's lower triangle in column-major terms,
    which is the upper one of the row-major result; mirror it down (the CPU
    engine returns both triangles). Written with triu: the same select over
    iotas gave non-Hermitian results on two GPUs and crashed XLA:CPU 0.10."""
    lower = sharding.constrain(jnp.conj(jnp.triu(r, 1)).T, placement, P(placement.axis, None))
    return jnp.triu(r) + lower


def _mirror_upper_blocks(r, axis):
    """_mirror_upper on this device's row block, inside shard_map: the
    transpose's row block comes from one all_to_all."""
    nl, n = r.shape
    nd = n // nl
    received = jax.lax.all_to_all(r.reshape(nl, nd, nl), axis, split_axis=1, concat_axis=1)
    transposed = jnp.conj(received).transpose(2, 1, 0).reshape(nl, n)
    rows = jnp.arange(nl, dtype=jnp.int32)[:, None] + jax.lax.axis_index(axis) * nl
    cols = jnp.arange(n, dtype=jnp.int32)[None, :]
    return jnp.where(rows <= cols, r, transposed)


def _contiguous_rows(x, layout):
    """A factor's rows, which lie block-cyclic over the devices (device d's
    slot s holds tile s * n + d), in order: the one-dimensional case of the
    cuSOLVERMp relayout (cyclic.py), all-to-alls inside shard_map."""
    return cyclic.from_cyclic(x, layout.placement, layout.tile, one_dimensional=True)


def _block_cyclic_diagonal(factor, layout):
    """The factor's diagonal, in block-cyclic order, with each entry's global
    index. Device d's block, read column-major, holds its tiles' columns: the
    diagonal entry of global column g sits at (local column, g)."""
    placement = layout.placement
    n_devices, tile = placement.n_devices, layout.tile

    def body(block):
        local = jnp.arange(block.shape[0], dtype=jnp.int32)
        d = jax.lax.axis_index(placement.axis)
        g = ((local // tile) * n_devices + d) * tile + local % tile
        return block[local, g], g

    return _shard_map(body, placement, (layout.row_spec,),
                      (P(placement.axis), P(placement.axis)))(factor)


class Mg(base.Engine):
    name = "jaxmg"

    def tile(self, routine, n, placement, requested):
        tile = choose_tile(n, placement.n_devices, requested)
        if routine in _GPU_MAX_TILE and platform_of(placement) == "cuda":
            return min(tile, _GPU_MAX_TILE[routine])
        return tile

    def finite_info(self, a, info, layout, upper: bool = False):
        # The leader checks the blocks where they live (xla_ext/engines:
        # Run; the Cholesky routines their upper triangle), reporting the
        # padded order + 1: no collective of XLA's, which in a job of several
        # processes would not end with jaxmg's faults.
        n_pad = padded_size(layout.n, layout.placement.n_devices, layout.tile)
        return jnp.where(info == n_pad + 1, jnp.int32(layout.n + 1), info)

    # Cholesky

    def cholesky(self, a, layout):
        spec = layout.row_spec

        def body(block):
            results = (jax.ShapeDtypeStruct(block.shape, block.dtype), collective.info_shape())
            return collective.call("potrf", layout.placement, (block,), results, tile=layout.tile)

        factor, info = _shard_map(body, layout.placement, (spec,), (spec, P()))(
            _padded(a, layout, 1))
        return factor, info[0]

    def cho_solve(self, factor, info, b, layout, b_sharded):
        x, b_spec = _solve_blocks("cholsolve", (factor, b), layout, b_sharded)
        x = failures.nan_where_failed(x, info)
        return sharding.constrain_result(x, layout.placement, b_spec)

    def potrs(self, a, b, layout, b_sharded):
        placement, n = layout.placement, layout.n
        a_spec, b_spec = layout.row_spec, _b_spec(placement, b_sharded)
        a = _padded(a, layout, 1)
        b = sharding.constrain(sharding.pad_rows(b, a.shape[0]), placement, b_spec)
        body = functools.partial(_potrs_body, placement=placement, tile=layout.tile,
                                 b_sharded=b_sharded)
        # The factor is returned (and dropped by the caller) so that a donated
        # `a` has an output of its shape to back.
        factor, x, info = _shard_map(body, placement, (a_spec, b_spec), (a_spec, b_spec, P()))(a, b)
        return sharding.unpad(x, placement, n, (0,)), info[0], factor

    def cholesky_logdet(self, factor, info, layout):
        diag, g = _block_cyclic_diagonal(factor, layout)
        diag = jnp.where(g < layout.n, diag, 1)
        logdet = 2 * jnp.sum(jnp.log(jnp.real(diag)))
        return failures.nan_where_failed(logdet, info)

    def cholesky_upper(self, factor, info, layout):
        # The engine factors M = A^T = conj(A) as M = L L^H; L read row-major
        # is L^T = U with A = U^H U.
        u = sharding.unpad(_contiguous_rows(factor, layout), layout.placement, layout.n, (0, 1))
        return jnp.triu(failures.nan_where_failed(u, info))  # as JAX: NaN in the triangle only

    def potri(self, a, layout):
        placement = layout.placement
        inv, info = _shard_map(
            functools.partial(_potri_body, placement=placement, tile=layout.tile),
            placement, (layout.row_spec,), (layout.row_spec, P()),
        )(_padded(a, layout, 1))
        if platform_of(placement) == "cuda":
            inv = _mirror_upper(inv, placement)
        return sharding.unpad(inv, placement, layout.n, (0, 1)), info[0]

    # LU

    def lu(self, a, layout):
        # A's row blocks read column-major are A^T: the engine is handed A^T's
        # row blocks (a transpose, an all-to-all), so that it factors A itself,
        # P A = L U, as LAPACK and jax.scipy do. Over several processes it
        # factors A^T as the rows hold it: the all-to-all would be an XLA
        # collective, which ranks sharing a GPU cannot run and which would not
        # end with jaxmg's faults; such a factor solves, but does not unpack.
        spec = layout.row_spec
        n_devices = layout.placement.n_devices
        if not spans_processes(layout.placement):
            a = sharding.constrain_result(jnp.transpose(a), layout.placement, spec)

        def body(block):
            results = (
                jax.ShapeDtypeStruct(block.shape, block.dtype),
                jax.ShapeDtypeStruct((block.shape[1] // n_devices,), jnp.int32),
                collective.info_shape(),
            )
            return collective.call("getrf", layout.placement, (block,), results, tile=layout.tile)

        lu, piv, info = _shard_map(
            body, layout.placement, (spec,), (spec, P(layout.placement.axis), P())
        )(_padded(a, layout, 1))
        return lu, piv, info[0]

    def lu_solve(self, lu, piv, info, b, layout, b_sharded, trans):
        # The library solves M^T X = B (its trans 0) or M X = B (1) with M the
        # factored matrix, here A: A X = B is its 1, A^T X = B its 0, and
        # A^H X = B is A^T conj(X) = conj(B).
        conj = trans == 2 and jnp.iscomplexobj(b)
        rhs = jnp.conj(b) if conj else b
        factored_a = not spans_processes(layout.placement)  # else A^T (see lu)
        x, b_spec = _solve_blocks("lusolve", (lu, piv, rhs), layout, b_sharded,
                                  trans=int((trans == 0) == factored_a))
        x = jnp.conj(x) if conj else x
        x = failures.nan_where_failed(x, info)
        return sharding.constrain_result(x, layout.placement, b_spec)

    def lu_matrices(self, lu, piv, layout):
        # The factor read row-major is (L U)^T with rows block-cyclic.
        placement, n = layout.placement, layout.n
        if spans_processes(placement):
            raise ValueError(
                "jaxmg: an LU factor over several processes is A^T's (the transpose to factor "
                "A itself would need an XLA collective), so it does not unpack into "
                "jax.scipy's (lu, piv); solve with it by jaxmg.lu_solve, or factor with "
                "backend='jax' to unpack"
            )
        lu_t = _contiguous_rows(lu, layout)
        lu_ = sharding.constrain(jnp.transpose(lu_t), placement, layout.row_spec)
        n_dev, t = placement.n_devices, layout.tile
        piv = sharding.constrain(piv, placement, P())
        ordered = piv.reshape(n_dev, -1, t).transpose(1, 0, 2).reshape(-1)
        return sharding.unpad(lu_, placement, n, (0, 1)), ordered[:n] - 1

    def lu_slogdet(self, lu, piv, info, layout):
        diag, g = _block_cyclic_diagonal(lu, layout)
        diag = jnp.where(g < layout.n, diag, 1)
        # LAPACK's pivots are 1-based global rows; each non-trivial one is a swap.
        swaps = jnp.sum(piv != g + 1)
        return base.slogdet_from(diag, swaps, lu.dtype)

    # Eigendecomposition

    def syevd(self, a, layout, vectors):
        placement, n = layout.placement, layout.n
        n_pad = padded_size(n, placement.n_devices, layout.tile)
        # Padding eigenvalues sort last: the leading n pairs are a's own.
        pad_value = base.eigenvalue_bound(a) if n_pad > n else 1
        a = sharding.constrain(sharding.pad_matrix(a, n_pad, pad_value), placement,
                               layout.row_spec)
        vh, w, info = _shard_map(
            functools.partial(_syevd_body, placement=placement, tile=layout.tile,
                              vectors=vectors),
            placement, (layout.row_spec,), (layout.row_spec, P(), P()),
        )(a)
        v = sharding.unpad(jnp.conj(vh).T, placement, n, (0, 1)) if vectors else None
        return w[:n], v, info[0]

    # Inside the caller's shard_map

    def potrs_blocks(self, a, b, placement, tile):
        rows, n = a.shape
        b_sharded = b.shape[0] == rows and rows != n
        t = block_tile(rows, tile)
        placement = Placement(placement.mesh, placement.axis, manual=True)
        _, x, info = _potrs_body(a, b, placement=placement, tile=t, b_sharded=b_sharded)
        # NaN also where the leader found a not finite (info N + 1, set after the solve).
        return failures.nan_where_failed(x, info[0]), info[0]

    def potri_blocks(self, a, placement, tile):
        t = block_tile(a.shape[0], tile)
        inv, info = _potri_body(a, placement=placement, tile=t)
        if platform_of(placement) == "cuda":
            inv = _mirror_upper_blocks(inv, placement.axis)
        return failures.nan_where_failed(inv, info[0]), info[0]

    def syevd_blocks(self, a, placement, tile, vectors):
        t = block_tile(a.shape[0], tile)
        if t > GPU_SYEVD_MAX_TILE and platform_of(placement) == "cuda":
            t = largest_divisor(a.shape[0], GPU_SYEVD_MAX_TILE)
        vh, w, info = _syevd_body(a, placement=placement, tile=t, vectors=vectors)
        # This device's rows of V^H: the caller gets them as they are.
        w = failures.nan_where_failed(w, info[0])
        return w, (failures.nan_where_failed(vh, info[0]) if vectors else None), info[0]


ENGINE = base.registered(Mg())
