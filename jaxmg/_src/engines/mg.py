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

from jaxmg._src import collective, config, sharding
from jaxmg._src.engines import base
from jaxmg._src.placement import Placement, platform_of

# cusolverMgGetrf (cuSOLVER 12.0.4, H200) rejects T_A = 1024 with
# CUSOLVER_STATUS_INVALID_VALUE for the matrix descriptor; 256 is verified.
GPU_LU_MAX_TILE = 256


def choose_tile(n: int, n_devices: int, requested: int | None) -> int:
    """The tile width T_A: as requested, but never wider than a device's share."""
    tile = requested if requested is not None else config.DEFAULT_TILE
    return max(1, min(tile, math.ceil(n / n_devices)))


def padded_size(n: int, n_devices: int, tile: int) -> int:
    step = n_devices * tile
    return math.ceil(n / step) * step


def largest_divisor_at_most(n: int, limit: int) -> int:
    """Tile for local blocks inside shard_map, where rows cannot be re-padded."""
    for t in range(min(n, limit), 0, -1):
        if n % t == 0:
            return t
    return 1


def _shard_map(body, placement, in_specs, out_specs):
    return jax.shard_map(body, mesh=placement.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def _padded(a, layout, diagonal):
    n_pad = padded_size(layout.n, layout.placement.n_devices, layout.tile)
    return sharding.constrain(sharding.pad_matrix(a, n_pad, diagonal), layout.placement,
                              layout.row_spec)


def _b_spec(placement, b_sharded):
    return P(placement.axis, None) if b_sharded else P()


def _failed_to_nan(x, info):
    return jnp.where(info == 0, x, jnp.asarray(jnp.nan, x.dtype))


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
    rows = jnp.arange(nl)[:, None] + jax.lax.axis_index(axis) * nl
    cols = jnp.arange(n)[None, :]
    return jnp.where(rows <= cols, r, transposed)


def _block_cyclic_diagonal(factor, layout):
    """The factor's diagonal, in block-cyclic order, with each entry's global
    index. Device d's block, read column-major, holds its tiles' columns: the
    diagonal entry of global column g sits at (local column, g)."""
    placement = layout.placement
    n_devices, tile = placement.n_devices, layout.tile

    def body(block):
        local = jnp.arange(block.shape[0])
        d = jax.lax.axis_index(placement.axis)
        g = ((local // tile) * n_devices + d) * tile + local % tile
        return block[local, g], g

    return _shard_map(body, placement, (layout.row_spec,),
                      (P(placement.axis), P(placement.axis)))(factor)


class Mg(base.Engine):
    name = "jaxmg"

    def tile(self, routine, n, placement, requested):
        tile = choose_tile(n, placement.n_devices, requested)
        if routine == "getrf" and platform_of(placement) == "cuda":
            return min(tile, GPU_LU_MAX_TILE)
        return tile

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
        return sharding.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)

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
        return jnp.where(info == 0, logdet, jnp.nan)

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
        spec = layout.row_spec
        n_devices = layout.placement.n_devices

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
        x, b_spec = _solve_blocks("lusolve", (lu, piv, b), layout, b_sharded, trans=trans)
        return sharding.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)

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
        # Padding eigenvalues exceed every |eigenvalue| of a (<= its inf-norm),
        # so they sort last and the leading n pairs are a's own.
        pad_value = jnp.max(jnp.sum(jnp.abs(a), axis=1)) + 1 if n_pad > n else 1
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
        t = largest_divisor_at_most(rows, tile or config.DEFAULT_TILE)
        placement = Placement(placement.mesh, placement.axis, manual=True)
        _, x, info = _potrs_body(a, b, placement=placement, tile=t, b_sharded=b_sharded)
        return x, info[0]

    def potri_blocks(self, a, placement, tile):
        t = largest_divisor_at_most(a.shape[0], tile or config.DEFAULT_TILE)
        inv, info = _potri_body(a, placement=placement, tile=t)
        if platform_of(placement) == "cuda":
            inv = _mirror_upper_blocks(inv, placement.axis)
        return inv, info[0]

    def syevd_blocks(self, a, placement, tile, vectors):
        t = largest_divisor_at_most(a.shape[0], tile or config.DEFAULT_TILE)
        vh, w, info = _syevd_body(a, placement=placement, tile=t, vectors=vectors)
        # This device's rows of V^H: the caller gets them as they are.
        return w, (vh if vectors else None), info[0]


ENGINE = Mg()
