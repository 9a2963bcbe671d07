"""Sharding of intermediate and result arrays: constraints that respect
explicit sharding (which allows no uneven shards), sharded products, and the
padding of a matrix to a layout's order."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxmg._src.placement import Placement, resolve_placement

def pad_matrix(a, n_pad: int, diagonal):
    """Embeds a in an n_pad x n_pad matrix, `diagonal` on the extra diagonal."""
    n = a.shape[0]
    if n_pad == n:
        return a
    a = jnp.pad(a, ((0, n_pad - n), (0, n_pad - n)))
    # An elementwise select, not a scatter: it keeps a's sharding as it is.
    rows = jnp.arange(n_pad)[:, None]
    cols = jnp.arange(n_pad)[None, :]
    return jnp.where((rows == cols) & (rows >= n), jnp.asarray(diagonal, a.dtype), a)


def pad_rows(b, n_pad: int):
    n = b.shape[0]
    return b if n_pad == n else jnp.pad(b, ((0, n_pad - n), (0, 0)))


def is_explicit(placement: Placement) -> bool:
    if placement.mesh is None:
        return False
    types = dict(zip(placement.mesh.axis_names, placement.mesh.axis_types))
    return all(types[ax] == jax.sharding.AxisType.Explicit for ax in placement.axes)


def whole_element(x):
    """An element of a batch sharded along its batch axis (under vmap), with
    its own axes gathered where explicit mesh axes shard them too
    (P("d", "m", None)): JAX's solvers, which run on such elements, take
    none sharded. The batch axis stays where it is."""
    typed = getattr(jax.typeof(x), "sharding", None)
    spec = getattr(typed, "spec", None)
    if spec is None or all(entry is None for entry in spec):
        return x
    return jax.sharding.reshard(x, typed.update(spec=P(*([None] * x.ndim))))


def unpad(x, placement: Placement, n: int, dims: tuple[int, ...]):
    """x restricted to its first n entries along `dims`. Explicit sharding
    cannot split n unevenly over the devices: such a result is replicated."""
    if all(x.shape[d] == n for d in dims):
        return x
    if is_explicit(placement) and n % placement.n_devices:
        x = constrain(x, placement, P())
    index = tuple(slice(0, n) if d in dims else slice(None) for d in range(x.ndim))
    return x[index]


def _even(shape, placement: Placement, spec):
    """spec, or replicated where it would split a dimension unevenly:
    explicit sharding allows no uneven shards, and neither does an eager
    array. One entry per dimension: vmap of a product whose out_sharding
    has fewer fails inside JAX (jax 0.10, an assertion in its batching)."""
    entries = tuple(spec) + (None,) * (len(shape) - len(spec))
    if any(e is not None and shape[d] % placement.n_devices for d, e in enumerate(entries)):
        return P(*(None,) * len(shape))
    return P(*entries)


def constrain_result(x, placement: Placement, spec):
    """constrain() for a result: a dimension the devices cannot split evenly
    stays whole under explicit sharding."""
    return constrain(x, placement, _even(x.shape, placement, spec))


def matmul(x, y, placement: Placement, spec):
    """x @ y with its result sharded as `spec` (explicit sharding needs the
    output named where both contracted dimensions are sharded); a dimension
    the devices cannot split evenly stays whole. At full precision, as JAX's
    own linear-algebra rules multiply (TF32 is the GPU default for float32)."""
    mm = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    if placement.mesh is None:
        return mm(x, y)
    if is_explicit(placement):
        spec = _even((x.shape[0], y.shape[-1]), placement, spec)
        return mm(x, y, out_sharding=NamedSharding(placement.mesh, spec))
    return constrain(mm(x, y), placement, spec)


def constrain(x, placement: Placement, spec):
    if placement.mesh is None and not placement.manual and not any(spec):
        return whole_element(x)  # an element of a sharded batch, for JAX's solvers
    if placement.manual or placement.mesh is None:
        return x
    even = _even(x.shape, placement, spec)
    if tuple(even) != tuple(spec) + (None,) * (x.ndim - len(spec)) and not is_explicit(placement):
        # Auto axes: an uneven split is refused by eager arrays, and by the
        # eager backward pass of jax.vjp where the constraint is transposed;
        # XLA places such a result.
        return x
    sharding = NamedSharding(placement.mesh, even)
    if is_explicit(placement):
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


def adjoint(x):
    """x^H (x^T for real x), of each matrix of a batch."""
    xt = jnp.swapaxes(x, -1, -2)
    return jnp.conj(xt) if jnp.iscomplexobj(x) else xt


def matmul_highest(x, y, placement: Placement | None = None, spec=P()):
    """x @ y at full precision, sharded as `spec` on `placement` (None: as XLA
    chooses). TF32, the GPU default for float32, would cap orthogonality near
    1e-3 in the polar and SVD iterations."""
    if placement is None:
        return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)
    return matmul(x, y, placement, spec)


def rows_placement(a, mesh=None, spec=None) -> Placement | None:
    """Where one matrix a lies on a mesh, rows sharded; None for a batch
    or an unplaced matrix (XLA places the products)."""
    if a.ndim != 2:
        return None
    where = resolve_placement(a, mesh, spec)
    return where if where.mesh is not None else None


def row_products(where: Placement | None):
    """x @ y at full precision; on a mesh, its rows sharded over the row
    axis (explicit sharding needs the result named)."""
    if where is None:
        return matmul_highest
    return functools.partial(matmul_highest, placement=where, spec=P(where.axis, None))


def adjoint_rows(x, where: Placement | None):
    """x^H, laid out by rows on `where` (None: as XLA chooses)."""
    return adjoint(x) if where is None else constrain_result(adjoint(x), where,
                                                             P(where.axis, None))


def hermitian_part(x, where: Placement | None):
    """(x + x^H) / 2, x^H laid out by rows as x (explicit sharding adds no
    row-sharded matrix to a column-sharded one)."""
    return (x + adjoint_rows(x, where)) / 2
