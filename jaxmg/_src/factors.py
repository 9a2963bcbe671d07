"""Factorisations kept for reuse: a Cholesky or LU factor stays sharded in
the solver's block-cyclic layout between calls, so k solves against one
matrix cost one factorisation. These are the raw (not differentiated)
operations; jaxmg/_src/linalg.py builds the public, differentiable API on
them."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, distribution as dist


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a factor lives and how: static, so it is part of a jit key."""

    placement: dist.Placement
    n: int  # the order of the user's matrix
    tile: int  # T_A (unused by the "jax" engine)
    engine: str  # "jaxmg": block-cyclic; "mp": cuSOLVERMp's; "jax": JAX's own, replicated

    @property
    def row_spec(self):
        return P(self.placement.axis, None)


@functools.lru_cache(maxsize=1024)
def layout(placement: dist.Placement, n: int, tile: int, engine: str) -> Layout:
    """One Layout object per value: jit's cache compares the same object at
    once, where a new one costs an eager call several microseconds. The "mp"
    engine's tile is cuSOLVERMp's block, `tile` only bounding it."""
    if engine == "mp":
        from jaxmg._src import mp

        tile = mp.block_size(n, placement, tile or None)
    return Layout(placement, n, tile, engine)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("factor", "a", "info"),
    meta_fields=("layout",),
)
@dataclasses.dataclass(frozen=True)
class CholeskyFactor:
    """The result of :func:`jaxmg.cho_factor`; pass it to :func:`jaxmg.cho_solve`.

    factor: the Cholesky factor in solver layout (padded, block-cyclic, rows
    sharded) or, for the "jax" engine, JAX's own upper factor. a: the matrix
    itself, kept for derivatives (None when it was donated). info: 0, or the
    order of the first leading minor that is not positive definite.
    """

    factor: jax.Array
    a: jax.Array | None
    info: jax.Array
    layout: Layout


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("lu", "piv", "a", "info"),
    meta_fields=("layout",),
)
@dataclasses.dataclass(frozen=True)
class LUFactor:
    """The result of :func:`jaxmg.lu_factor`; pass it to :func:`jaxmg.lu_solve`.

    lu, piv: the LU factors and pivots in solver layout (the "jaxmg" engine
    factors A^T with partial pivoting, kept block-cyclic; pivots sharded like
    its columns) or JAX's own (lu, piv). a: the matrix, kept for derivatives
    (None when donated). info: 0, or k > 0 when U(k, k) is exactly zero.
    """

    lu: jax.Array
    piv: jax.Array
    a: jax.Array | None
    info: jax.Array
    layout: Layout


# --------------------------------------------------------------------------
# Factorisations
# --------------------------------------------------------------------------


def _padded(a, layout: Layout, diagonal):
    if layout.engine == "mp":
        from jaxmg._src import cyclic

        n_pad = cyclic.padded(layout.n, layout.tile, layout.placement)
    else:
        n_pad = dist.padded_size(layout.n, layout.placement.n_devices, layout.tile)
    return dist.constrain(dist.pad_matrix(a, n_pad, diagonal), layout.placement, layout.row_spec)


def _cholesky_impl(a, *, layout: Layout):
    if layout.engine == "jax":
        c, _ = jsl.cho_factor(dist.constrain(a, layout.placement, P()), lower=False)
        return c, jnp.any(jnp.isnan(jnp.diagonal(c))).astype(jnp.int32)
    if layout.engine == "mp":
        from jaxmg._src import mp

        return mp.potrf(_padded(a, layout, 1), layout.placement, layout.tile)
    spec = layout.row_spec

    def body(block):
        results = (jax.ShapeDtypeStruct(block.shape, block.dtype), collective.info_shape())
        return collective.call("potrf", layout.placement, (block,), results, tile=layout.tile)

    factor, info = jax.shard_map(
        body, mesh=layout.placement.mesh, in_specs=(spec,), out_specs=(spec, P()), check_vma=False
    )(_padded(a, layout, 1))
    return factor, info[0]


def _lu_impl(a, *, layout: Layout):
    if layout.engine == "jax":
        lu, piv = jsl.lu_factor(dist.constrain(a, layout.placement, P()))
        singular = jnp.any(jnp.diagonal(lu) == 0) | jnp.any(jnp.isnan(jnp.diagonal(lu)))
        return lu, piv, singular.astype(jnp.int32)
    if layout.engine == "mp":
        from jaxmg._src import mp

        return mp.getrf(_padded(a, layout, 1), layout.placement, layout.tile)
    spec = layout.row_spec
    n_devices = layout.placement.n_devices

    def body(block):
        results = (
            jax.ShapeDtypeStruct(block.shape, block.dtype),
            jax.ShapeDtypeStruct((block.shape[1] // n_devices,), jnp.int32),
            collective.info_shape(),
        )
        return collective.call("getrf", layout.placement, (block,), results, tile=layout.tile)

    lu, piv, info = jax.shard_map(
        body,
        mesh=layout.placement.mesh,
        in_specs=(spec,),
        out_specs=(spec, P(layout.placement.axis), P()),
        check_vma=False,
    )(_padded(a, layout, 1))
    return lu, piv, info[0]


_cholesky = jax.jit(_cholesky_impl, static_argnames=("layout",))
_cholesky_donating = jax.jit(_cholesky_impl, static_argnames=("layout",), donate_argnums=0)
_lu = jax.jit(_lu_impl, static_argnames=("layout",))
_lu_donating = jax.jit(_lu_impl, static_argnames=("layout",), donate_argnums=0)


def _no_grad(a):
    # The factor itself is not differentiated: derivatives go through `a`. (An
    # eager stop_gradient is an op dispatch of its own: only tracers need it.)
    return jax.lax.stop_gradient(a) if isinstance(a, jax.core.Tracer) else a


def cholesky(a, layout: Layout, *, donate=False) -> CholeskyFactor:
    factor, info = (_cholesky_donating if donate else _cholesky)(_no_grad(a), layout=layout)
    return CholeskyFactor(factor, None if donate else a, info, layout)


def lu(a, layout: Layout, *, donate=False) -> LUFactor:
    lu_, piv, info = (_lu_donating if donate else _lu)(_no_grad(a), layout=layout)
    return LUFactor(lu_, piv, None if donate else a, info, layout)


# --------------------------------------------------------------------------
# Solves against a factor
# --------------------------------------------------------------------------


def is_row_sharded(b, placement: dist.Placement) -> bool:
    """b's rows sharded over the factor's axis (else it is treated as replicated)."""
    spec = getattr(dist.sharding_of(b), "spec", None)
    if spec is None or len(spec) == 0 or placement.n_devices == 1:
        return False
    rows = spec[0][0] if isinstance(spec[0], tuple) and len(spec[0]) == 1 else spec[0]
    return rows == placement.axis


def _solve_blocks(routine, operands, layout: Layout, b_sharded: bool, **attrs):
    """Runs `routine` (cholsolve, lusolve) on the padded factor(s) and b."""
    placement = layout.placement
    factor, b = operands[0], operands[-1]
    n_pad = factor.shape[0]
    b_spec = P(placement.axis, None) if b_sharded else P()
    b = dist.constrain(dist.pad_rows(b, n_pad), placement, b_spec)
    specs = (layout.row_spec,) + ((P(placement.axis),) if len(operands) == 3 else ()) + (b_spec,)

    def body(*blocks):
        result = jax.ShapeDtypeStruct(blocks[-1].shape, blocks[-1].dtype)
        (x,) = collective.call(
            routine, placement, blocks, (result,), tile=layout.tile, alias=False,
            b_sharded=b_sharded, **attrs,
        )
        return x

    x = jax.shard_map(
        body, mesh=placement.mesh, in_specs=specs, out_specs=b_spec, check_vma=False
    )(*operands[:-1], b)
    return dist.unpad(x, placement, layout.n, (0,)), b_spec


def _failed_to_nan(x, info):
    return jnp.where(info == 0, x, jnp.asarray(jnp.nan, x.dtype))


def _cho_solve_impl(factor, info, b, *, layout: Layout, b_sharded: bool):
    if layout.engine == "jax":
        b_spec = P(layout.placement.axis, None) if b_sharded else P()
        # JAX's factor of a matrix that is not positive definite is NaN already.
        x = jsl.cho_solve((factor, False), dist.constrain(b, layout.placement, P()))
        return dist.constrain_result(x, layout.placement, b_spec)
    if layout.engine == "mp":
        from jaxmg._src import mp

        b_spec = P(layout.placement.axis, None) if b_sharded else P()
        b_pad = dist.pad_rows(b, factor.shape[0])
        x = mp.potrs(factor, b_pad, layout.placement, layout.tile)[: layout.n]
        return dist.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)
    x, b_spec = _solve_blocks("cholsolve", (factor, b), layout, b_sharded)
    return dist.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)


def _lu_solve_impl(lu_, piv, info, b, *, layout: Layout, b_sharded: bool, trans: int):
    if layout.engine == "jax":
        b_spec = P(layout.placement.axis, None) if b_sharded else P()
        x = jsl.lu_solve((lu_, piv), dist.constrain(b, layout.placement, P()), trans=trans)
        return dist.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)
    if layout.engine == "mp":
        from jaxmg._src import mp

        if trans != 0:
            raise ValueError(
                "jaxmg: backend='mp' solves with A only (cuSOLVERMp's getrs has no transpose); "
                "jaxmg.lu_solve(trans=1 or 2) factors op(A) again from the matrix the factor "
                "keeps, which a donated factor no longer has: keep the factor (do not donate it) "
                "or, on one machine, use backend='jaxmg'"
            )
        b_spec = P(layout.placement.axis, None) if b_sharded else P()
        b_pad = dist.pad_rows(b, lu_.shape[0])
        x = mp.getrs(lu_, piv, b_pad, layout.placement, layout.tile)[: layout.n]
        return dist.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)
    x, b_spec = _solve_blocks("lusolve", (lu_, piv, b), layout, b_sharded, trans=trans)
    return dist.constrain_result(_failed_to_nan(x, info), layout.placement, b_spec)


_cho_solve = jax.jit(_cho_solve_impl, static_argnames=("layout", "b_sharded"))
_lu_solve = jax.jit(_lu_solve_impl, static_argnames=("layout", "b_sharded", "trans"))


def _as_matrix(b, layout: Layout, name="b"):
    b = jnp.asarray(b) if not hasattr(b, "shape") else b
    n = layout.n
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(
            f"jaxmg: {name} must have shape ({n},) or ({n}, K) to match the factor's order {n}, "
            f"got {tuple(b.shape)}"
        )
    return b


def _b_sharded(b, layout: Layout, b_sharded):
    return is_row_sharded(b, layout.placement) if b_sharded is None else bool(b_sharded)


def cho_solve(f: CholeskyFactor, b, b_sharded=None):
    """X with A X = B from a Cholesky factor (no derivatives: see linalg).
    b_sharded: whether b's rows are sharded (None: read from b's sharding)."""
    b = _as_matrix(b, f.layout)
    b2 = b[:, None] if b.ndim == 1 else b
    x = _cho_solve(f.factor, f.info, b2, layout=f.layout, b_sharded=_b_sharded(b, f.layout, b_sharded))
    return x[:, 0] if b.ndim == 1 else x


def lu_solve(f: LUFactor, b, trans: int = 0, b_sharded=None):
    """X with op(A) X = B, op = A, A^T, A^H for trans 0, 1, 2 (no derivatives)."""
    if trans not in (0, 1, 2):
        raise ValueError(f"jaxmg: trans must be 0 (A), 1 (A^T) or 2 (A^H), got {trans!r}")
    b = _as_matrix(b, f.layout)
    b2 = b[:, None] if b.ndim == 1 else b
    x = _lu_solve(
        f.lu, f.piv, f.info, b2, layout=f.layout,
        b_sharded=_b_sharded(b, f.layout, b_sharded), trans=trans,
    )
    return x[:, 0] if b.ndim == 1 else x


# --------------------------------------------------------------------------
# Diagonals of the factors (log-determinants)
# --------------------------------------------------------------------------


def _block_cyclic_diagonal(factor, layout: Layout):
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

    return jax.shard_map(
        body,
        mesh=placement.mesh,
        in_specs=(layout.row_spec,),
        out_specs=(P(placement.axis), P(placement.axis)),
        check_vma=False,
    )(factor)


def _diagonal(factor, layout: Layout):
    if layout.engine == "mp":
        from jaxmg._src import mp

        return mp.diagonal(factor, layout.placement, layout.tile)
    return _block_cyclic_diagonal(factor, layout)


def _cholesky_logdet_impl(factor, info, *, layout: Layout):
    if layout.engine == "jax":
        diag = jnp.diagonal(factor)
    else:
        diag, g = _diagonal(factor, layout)
        diag = jnp.where(g < layout.n, diag, 1)
    logdet = 2 * jnp.sum(jnp.log(jnp.real(diag)))
    return jnp.where(info == 0, logdet, jnp.nan)


def _lu_slogdet_impl(lu_, piv, info, *, layout: Layout):
    if layout.engine == "jax":
        diag = jnp.diagonal(lu_)
        swaps = jnp.sum(piv != jnp.arange(piv.shape[0]))
    elif layout.engine == "mp":
        diag, g = _diagonal(lu_, layout)
        diag = jnp.where(g < layout.n, diag, 1)
        # Every rank's pivots cover all rows; the last row pivots with itself,
        # which gives the numbering's base.
        rows = jnp.arange(piv.shape[0])
        swaps = jnp.sum(piv != rows + (piv[-1] - rows[-1]))
    else:
        diag, g = _block_cyclic_diagonal(lu_, layout)
        diag = jnp.where(g < layout.n, diag, 1)
        # LAPACK's pivots are 1-based global rows; each non-trivial one is a swap.
        swaps = jnp.sum(piv != g + 1)
    magnitude = jnp.abs(diag)
    logabsdet = jnp.sum(jnp.log(magnitude))
    # The sign from sums only (a product reduction of complex values across
    # GPUs comes out wrong in XLA): parity of swaps and negative entries, and
    # the sum of phases.
    zero = jnp.any(magnitude == 0)
    if jnp.iscomplexobj(diag):
        phase = jnp.sum(jnp.angle(diag)) + jnp.pi * swaps
        sign = jnp.exp(1j * phase).astype(lu_.dtype)
    else:
        flips = swaps + jnp.sum(diag < 0)
        sign = jnp.where(flips % 2 == 0, 1, -1).astype(lu_.dtype)
    return jnp.where(zero, jnp.zeros_like(sign), sign), logabsdet


cholesky_logdet = jax.jit(_cholesky_logdet_impl, static_argnames=("layout",))
lu_slogdet = jax.jit(_lu_slogdet_impl, static_argnames=("layout",))
