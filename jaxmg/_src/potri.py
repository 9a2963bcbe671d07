"""potri: inverse of a symmetric/Hermitian positive-definite matrix."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, dispatch, distribution as dist, native, plans


def potri(
    a, *, tile_size=None, mesh=None, spec=None, backend="auto", return_info=False, donate=False
):
    """Inverts a symmetric (Hermitian) positive-definite matrix via Cholesky.

    Args:
      a: (N, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        only one triangle is read (the upper one in row-major terms).
      tile_size, mesh, spec, backend, donate: as for :func:`jaxmg.potrs`.
      return_info: also return LAPACK's info (0, or the order k of the first
        leading minor that is not positive definite).

    Returns:
      The full (both triangles) inverse, (N, N), sharded like a; all NaN if a
      is not positive definite. Plus info (int32 scalar) if ``return_info``.
    """
    tile = dist.check_tile(tile_size)
    key = dist.eager_key((a,), "potri", tile, mesh, spec, backend, return_info, donate)
    plan = plans.find(key)
    if plan is not None:
        return plan(a)
    dist.check_rank2(a, "a")
    dist.check_dtype(a, "a")
    placement = dist.resolve_placement(a, mesh, spec, "a")
    n = dist.check_square(a, placement, "a")
    engine = dispatch.choose("potri", n, placement, backend)
    if placement.manual:
        t = dist.largest_divisor_at_most(a.shape[0], tile or dist.DEFAULT_TILE)
        inv, info = _potri_body(a, placement=placement, tile=t)
        if collective.platform_of(placement) == "cuda":
            inv = _mirror_upper_blocks(inv, placement.axis)
        info = info[0]
    elif donate:
        inv, info = _potri_donating(a, placement=placement, tile=tile, engine=engine)
    else:
        from jaxmg._src import linalg  # differentiable

        plan = functools.partial(
            linalg.spd_inverse_program, config=(placement, tile, engine), with_info=bool(return_info)
        )
        return plans.keep(key, plan)(a)
    return (inv, info) if return_info else inv


def _potri_impl(a, *, placement, tile, engine):
    n = a.shape[0]
    if engine == "jax":
        inv, info = native.potri(a, placement)
        return dist.constrain_result(inv, placement, P(placement.axis, None)), info
    t = dist.choose_tile(n, placement.n_devices, tile)
    n_pad = dist.padded_size(n, placement.n_devices, t)
    a_spec = P(placement.axis, None)
    a = dist.constrain(dist.pad_matrix(a, n_pad, 1), placement, a_spec)
    inv, info = jax.shard_map(
        functools.partial(_potri_body, placement=placement, tile=t),
        mesh=placement.mesh,
        in_specs=(a_spec,),
        out_specs=(a_spec, P()),
        check_vma=False,
    )(a)
    if collective.platform_of(placement) == "cuda":
        inv = _mirror_upper(inv, placement)
    return dist.unpad(inv, placement, n, (0, 1)), info[0]


def _mirror_upper(r, placement):
    """cuSOLVERMg leaves the inverse's lower triangle in column-major terms,
    which is the upper one of the row-major result; mirror it down (the CPU
    engine returns both triangles). Written with triu: the same select over
    iotas gave non-Hermitian results on two GPUs and crashed XLA:CPU 0.10."""
    lower = dist.constrain(jnp.conj(jnp.triu(r, 1)).T, placement, P(placement.axis, None))
    return jnp.triu(r) + lower


_potri = jax.jit(_potri_impl, static_argnames=("placement", "tile", "engine"))
run = _potri
_potri_donating = jax.jit(_potri_impl, static_argnames=("placement", "tile", "engine"), donate_argnums=0)


def _potri_body(a, *, placement, tile):
    results = (jax.ShapeDtypeStruct(a.shape, a.dtype), collective.info_shape())
    return collective.call("potri", placement, (a,), results, tile=tile)


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
