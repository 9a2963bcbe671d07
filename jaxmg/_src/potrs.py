"""potrs: solve A X = B for symmetric/Hermitian positive-definite A."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, dispatch, distribution as dist, factors, native, plans


def potrs(
    a,
    b,
    *,
    tile_size=None,
    mesh=None,
    spec=None,
    backend="auto",
    return_info=False,
    donate=False,
):
    """Solves ``a @ x = b`` by a Cholesky factorisation distributed over devices.

    Args:
      a: (N, N) symmetric (real) or Hermitian (complex) positive-definite
        matrix, rows sharded over one mesh axis, ``P(axis, None)``. Only one
        triangle is read (the upper one in row-major terms).
      b: (N,) or (N, K) right-hand sides with a's dtype; row-sharded on the
        same axis or replicated.
      tile_size: column tile T_A of the block-cyclic layout (default 1024,
        capped at N / devices). N need not be a multiple of anything.
      mesh, spec: the mesh and a's PartitionSpec; read from ``a.sharding``
        when not given (required inside ``jit`` unless a mesh is set with
        ``jax.set_mesh``). Inside ``shard_map``, pass the local blocks.
      backend: "jaxmg" (the distributed solver), "jax" (JAX's own solver on
        the replicated matrix) or "auto": jaxmg on CPU; on GPUs JAX for a
        one-device mesh or N below a measured crossover, else jaxmg.
      return_info: also return LAPACK's info: 0 on success, k > 0 if the
        leading minor of order k is not positive definite.
      donate: let jaxmg reuse a's buffer (a is deleted); saves one copy of A.

    Returns:
      x with b's shape and layout (all NaN if a is not positive definite),
      and info (int32 scalar) if ``return_info``.
    """
    tile = dist.check_tile(tile_size)  # before the key: 2.0 == 2 must not find 2's plan
    key = dist.eager_key((a, b), "potrs", tile, mesh, spec, backend, return_info, donate)
    plan = plans.find(key)
    if plan is not None:
        return plan(a, b)
    dist.check_rank2(a, "a")
    dtype = dist.check_dtype(a, "a")
    placement = dist.resolve_placement(a, mesh, spec, "a")
    n = dist.check_square(a, placement, "a")
    b = jnp.asarray(b) if not hasattr(b, "shape") else b
    rows = (a.shape[0], n) if placement.manual else (n,)
    if b.ndim not in (1, 2) or b.shape[0] not in rows:
        raise ValueError(
            f"jaxmg: b must have shape ({n},) or ({n}, K) to match a's {n} rows, got {b.shape}"
        )
    if jnp.dtype(b.dtype) != dtype:
        raise TypeError(
            f"jaxmg: b has dtype {jnp.dtype(b.dtype).name} but a has {dtype.name}; "
            f"cast with b.astype(a.dtype)"
        )
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    engine = dispatch.choose("potrs", n, placement, backend)
    if placement.manual and engine == "mp":
        x, info = _mp_potrs_blocks(a, b2, placement, tile)
    elif placement.manual:
        x, info = _potrs_blocks(a, b2, placement, tile)
    elif donate:
        b_sharded = factors.is_row_sharded(b, placement)
        x, info, _ = _potrs_donating(
            a, b2, placement=placement, tile=tile, b_sharded=b_sharded, engine=engine
        )
    else:
        from jaxmg._src import linalg  # differentiable: factor, then solve against it

        tile = (tile or 0) if engine == "mp" else dist.choose_tile(n, placement.n_devices, tile)
        layout = factors.layout(placement, n, tile, engine)
        plan = functools.partial(
            linalg.solve_pos_result, layout=layout, b_sharded=factors.is_row_sharded(b, placement),
            with_info=bool(return_info),
        )
        return plans.keep(key, plan)(a, b)
    x = x[:, 0] if vector else x
    return (x, info) if return_info else x


def _potrs_impl(a, b, *, placement, tile, b_sharded, engine):
    n = a.shape[0]
    if engine == "jax":
        x, info = native.potrs(a, b, placement)
        b_spec = P(placement.axis, None) if b_sharded else P()
        return dist.constrain_result(x, placement, b_spec), info, None
    if engine == "mp":
        layout = factors.layout(placement, n, tile or 0, engine)
        factor, info = factors._cholesky_impl(a, layout=layout)
        x = factors._cho_solve_impl(factor, info, b, layout=layout, b_sharded=b_sharded)
        return x, info, factor
    t = dist.choose_tile(n, placement.n_devices, tile)
    n_pad = dist.padded_size(n, placement.n_devices, t)
    a_spec = P(placement.axis, None)
    b_spec = P(placement.axis, None) if b_sharded else P()
    a = dist.constrain(dist.pad_matrix(a, n_pad, 1), placement, a_spec)
    b = dist.constrain(dist.pad_rows(b, n_pad), placement, b_spec)
    body = functools.partial(_potrs_body, placement=placement, tile=t, b_sharded=b_sharded)
    # The factor is returned (and dropped by the caller) so that a donated
    # `a` has an output of its shape to back.
    factor, x, info = jax.shard_map(
        body,
        mesh=placement.mesh,
        in_specs=(a_spec, b_spec),
        out_specs=(a_spec, b_spec, P()),
        check_vma=False,
    )(a, b)
    return dist.unpad(x, placement, n, (0,)), info[0], factor


# The one-call factor-and-solve serves donated calls (no derivatives); other
# calls go through linalg.solve_pos.
_potrs_donating = jax.jit(
    _potrs_impl, static_argnames=("placement", "tile", "b_sharded", "engine"), donate_argnums=0
)


def _potrs_blocks(a, b, placement, tile):
    """Inside the caller's shard_map: a is this device's (N/n, N) block."""
    rows, n = a.shape
    b_sharded = b.shape[0] == rows and rows != n
    t = dist.largest_divisor_at_most(rows, tile or dist.DEFAULT_TILE)
    placement = dist.Placement(placement.mesh, placement.axis, manual=True)
    _, x, info = _potrs_body(a, b, placement=placement, tile=t, b_sharded=b_sharded)
    return x, info[0]


def _mp_potrs_blocks(a, b, placement, tile):
    """cuSOLVERMp inside the caller's shard_map: a is this device's (N/n, N)
    block, b its rows of B or all of it; no padding is possible there, so the
    block size divides every rank's share."""
    from jaxmg._src import mp

    rows, n = a.shape
    placement = dist.Placement(placement.mesh, placement.axis, manual=True)
    b_sharded = b.shape[0] == rows and rows != n
    whole_b = jax.lax.all_gather(b, placement.axes, tiled=True) if b_sharded else b
    t = mp.dividing_block(n, placement, tile)
    factor, info = mp.potrf(a, placement, t)
    x = mp.potrs(factor, whole_b, placement, t)
    x = jnp.where(info == 0, x, jnp.asarray(jnp.nan, x.dtype))
    if b_sharded:
        x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(placement.axes) * rows, rows, 0)
    return x, info


def _potrs_body(a, b, *, placement, tile, b_sharded):
    results = (
        jax.ShapeDtypeStruct(a.shape, a.dtype),
        jax.ShapeDtypeStruct(b.shape, b.dtype),
        collective.info_shape(),
    )
    return collective.call("potrs", placement, (a, b), results, tile=tile, b_sharded=b_sharded)
