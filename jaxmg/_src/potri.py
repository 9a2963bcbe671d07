"""potri: inverse of a symmetric/Hermitian positive-definite matrix."""

from __future__ import annotations

import functools

import jax
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, distribution as dist


def potri(a, *, tile_size=None, mesh=None, spec=None, return_info=False, donate=False):
    """Inverts a symmetric (Hermitian) positive-definite matrix via Cholesky.

    Args:
      a: (N, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        only one triangle is read (the upper one in row-major terms).
      tile_size, mesh, spec, donate: as for :func:`jaxmg.potrs`.
      return_info: also return LAPACK's info (0, or the order k of the first
        leading minor that is not positive definite).

    Returns:
      The full (both triangles) inverse, (N, N), sharded like a; all NaN if a
      is not positive definite. Plus info (int32 scalar) if ``return_info``.
    """
    n = dist.check_square(a, "a")
    dist.check_dtype(a, "a")
    tile = dist.check_tile(tile_size)
    placement = dist.resolve_placement(a, mesh, spec, "a")
    if placement.manual:
        t = dist.largest_divisor_at_most(a.shape[0], tile or dist.DEFAULT_TILE)
        inv, info = _potri_body(a, placement=placement, tile=t)
        info = info[0]
    else:
        run = _potri_donating if donate else _potri
        inv, info = run(a, placement=placement, tile=tile)
    return (inv, info) if return_info else inv


def _potri_impl(a, *, placement, tile):
    n = a.shape[0]
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
    return dist.unpad(inv, placement, n, (0, 1)), info[0]


_potri = jax.jit(_potri_impl, static_argnames=("placement", "tile"))
_potri_donating = jax.jit(_potri_impl, static_argnames=("placement", "tile"), donate_argnums=0)


def _potri_body(a, *, placement, tile):
    results = (jax.ShapeDtypeStruct(a.shape, a.dtype), collective.info_shape())
    return collective.call("potri", placement, (a,), results, tile=tile)
