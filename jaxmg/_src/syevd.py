"""syevd: eigenvalues and eigenvectors of a symmetric/Hermitian matrix."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, dispatch, distribution as dist, native, plans


def syevd(
    a,
    *,
    compute_vectors=True,
    tile_size=None,
    mesh=None,
    spec=None,
    backend="auto",
    return_info=False,
    donate=False,
):
    """Eigendecomposition ``a = V diag(w) V^H`` of a symmetric (Hermitian) matrix.

    Args:
      a: (N, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        only one triangle is read (the upper one in row-major terms).
      compute_vectors: also compute the eigenvectors.
      tile_size, mesh, spec, backend, donate: as for :func:`jaxmg.potrs`.
      return_info: also return LAPACK's info (0 on success).

    Returns:
      w: (N,) real eigenvalues in ascending order, replicated.
      v: (N, N) eigenvectors as columns (``v[:, i]`` belongs to ``w[i]``),
        sharded by columns, ``P(None, axis)``: each device holds a block of
        eigenvectors. Only when ``compute_vectors``.
      info (int32 scalar) last, if ``return_info``. On failure w and v are NaN.
    """
    tile = dist.check_tile(tile_size)
    vectors = bool(compute_vectors)
    key = dist.eager_key((a,), "syevd", vectors, tile, mesh, spec, backend, return_info, donate)
    plan = plans.find(key)
    if plan is not None:
        return plan(a)
    dist.check_rank2(a, "a")
    dist.check_dtype(a, "a")
    placement = dist.resolve_placement(a, mesh, spec, "a")
    n = dist.check_square(a, placement, "a")
    engine = dispatch.choose("syevd", n, placement, backend)
    if placement.manual and engine == "mp":
        from jaxmg._src import mp

        mp.check_syevd(vectors)
        placement = dist.Placement(placement.mesh, placement.axis, manual=True)
        vh, w, info = mp.syevd(a, placement, mp.dividing_block(n, placement, tile))
        out = (w, vh) if vectors else (w,)
    elif placement.manual:
        t = dist.largest_divisor_at_most(a.shape[0], tile or dist.DEFAULT_TILE)
        vh, w, info = _syevd_body(a, placement=placement, tile=t, vectors=vectors)
        # This device's rows of V^H: the caller gets them as they are.
        out = (w, vh) if vectors else (w,)
        info = info[0]
    elif donate:
        w, v, info = _syevd_donating(a, placement=placement, tile=tile, vectors=vectors, engine=engine)
        out = (w, v) if vectors else (w,)
    else:
        from jaxmg._src import linalg  # differentiable

        plan = functools.partial(
            linalg.syevd_program, config=(placement, tile, engine), vectors=vectors,
            with_info=bool(return_info),
        )
        return plans.keep(key, plan)(a)
    out = out + (info,) if return_info else out
    return out[0] if len(out) == 1 else out


def _syevd_impl(a, *, placement, tile, vectors, engine):
    n = a.shape[0]
    if engine == "jax":
        w, v, info = native.syevd(a, placement, vectors)
        v = dist.constrain_result(v, placement, P(None, placement.axis)) if vectors else None
        return w, v, info
    if engine == "mp":
        from jaxmg._src import cyclic, mp

        t = mp.block_size(n, placement, tile)
        n_pad = cyclic.padded(n, t, placement)
        mp.check_syevd(vectors)
    else:
        t = dist.choose_tile(n, placement.n_devices, tile)
        n_pad = dist.padded_size(n, placement.n_devices, t)
    a_spec = P(placement.axis, None)
    # Padding eigenvalues exceed every |eigenvalue| of a (<= its inf-norm),
    # so they sort last and the leading n pairs are a's own.
    pad_value = jnp.max(jnp.sum(jnp.abs(a), axis=1)) + 1 if n_pad > n else 1
    a = dist.constrain(dist.pad_matrix(a, n_pad, pad_value), placement, a_spec)
    if engine == "mp":
        vh, w, info = mp.syevd(a, placement, t)
        info = info[None]
    else:
        vh, w, info = jax.shard_map(
            functools.partial(_syevd_body, placement=placement, tile=t, vectors=vectors),
            mesh=placement.mesh,
            in_specs=(a_spec,),
            out_specs=(a_spec, P(), P()),
            check_vma=False,
        )(a)
    v = dist.unpad(jnp.conj(vh).T, placement, n, (0, 1)) if vectors else None
    return w[:n], v, info[0]


_STATIC = ("placement", "tile", "vectors", "engine")
_syevd = jax.jit(_syevd_impl, static_argnames=_STATIC)
run = _syevd
_syevd_donating = jax.jit(_syevd_impl, static_argnames=_STATIC, donate_argnums=0)


def _syevd_body(a, *, placement, tile, vectors):
    real = jnp.finfo(a.dtype).dtype
    results = (
        jax.ShapeDtypeStruct(a.shape, a.dtype),
        jax.ShapeDtypeStruct((a.shape[1],), real),
        collective.info_shape(),
    )
    return collective.call("syevd", placement, (a,), results, tile=tile, vectors=vectors)
