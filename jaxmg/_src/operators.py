"""Pieces the derivative rules of the solvers share: op(A) x under explicit
sharding, A kept row-sharded, and the sharded identity that log-determinant
and inverse derivatives solve against."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxmg._src import arguments, sharding
from jaxmg._src.engines.base import Layout
from jaxmg._src.placement import sharding_of


def op(a, trans: int):
    """A, A^T or A^H for trans = 0, 1, 2 (lu_solve's numbering)."""
    return a if trans == 0 else (a.T if trans == 1 else jnp.conj(a).T)


def keep_rows_sharded(a, layout: Layout):
    """a, constrained row-sharded: a sharding constraint transposes to the
    same constraint, so A's cotangent (an outer product) stays sharded too."""
    return sharding.constrain_result(a, layout.placement, layout.row_spec)


def solve_without_matrix(b, solve, transpose_solve):
    """solve(None, b), differentiable in b, for a factor that kept no matrix
    (a donated one): lax.custom_linear_solve then needs only the solves (the
    tangent solve and, for cotangents, the transposed one). Its matvec, an
    identity of b's shape, closes over nothing that has a tangent, so it is
    never evaluated."""
    return jax.lax.custom_linear_solve(lambda x: x, b, solve, transpose_solve)


def matvec(a, layout: Layout, b, trans=0):
    """x -> op(a) @ x, typed like b. Under explicit sharding a local product
    per row block (no ambiguous contraction for the transposes to resolve),
    whose result is resharded like b."""
    placement = layout.placement
    spec = getattr(jax.typeof(b).sharding, "spec", None)
    if not sharding.is_explicit(placement) or spec is None:
        return lambda x: sharding.matmul_highest(op(a, trans), x)
    if layout.n % placement.n_devices:  # explicit and uneven: all replicated
        return lambda x: sharding.constrain(sharding.matmul_highest(op(a, trans), x), placement,
                                            spec)
    axis = placement.axis
    rows = P(axis, None) if b.ndim == 2 else P(axis)
    if trans == 0:
        body, in_specs, out_specs = sharding.matmul_highest, (layout.row_spec, P()), rows
    else:
        def body(ab, xb):
            return jax.lax.psum(sharding.matmul_highest(op(ab, trans), xb), axis)

        in_specs, out_specs = (layout.row_spec, rows), P()
    product = jax.shard_map(body, mesh=placement.mesh, in_specs=in_specs, out_specs=out_specs)

    def apply(x):
        x = sharding.constrain(x, placement, in_specs[1])
        a_rows = sharding.constrain(a, placement, layout.row_spec)
        return sharding.constrain(product(a_rows, x), placement, spec)

    return apply


def eye(layout: Layout, like):
    """The identity of `like`'s dtype, row-sharded where the devices can
    split N evenly (no array takes uneven shards), and whether it is."""
    placement, dtype = layout.placement, jnp.dtype(like.dtype)
    sharded = placement.n_devices > 1 and layout.n % placement.n_devices == 0
    spec = layout.row_spec if sharded else P()
    if placement.manual or placement.mesh is None:
        return jnp.eye(layout.n, dtype=dtype), sharded
    if not isinstance(placement.mesh, Mesh):
        # Traced on a mesh known only by its shape: made beside `like`, from
        # whose devices a program evaluated eagerly later (jax.checkpoint's,
        # jax.core.eval_jaxpr's) takes its own; alone it would have none.
        return _eye_beside(like, n=layout.n, placement=placement, spec=spec), sharded
    made = _eye_maker(layout.n, dtype, placement.mesh, spec)()
    if isinstance(made, jax.core.Tracer):
        # Traced, the maker's out_shardings lay it out but leave its type
        # replicated (jax 0.10): on explicit axes the solve's result would
        # follow. (A concrete one is typed by its sharding.)
        made = sharding.constrain(made, placement, spec)
    elif jax.config.jax_disable_jit:  # the maker ran op by op, on one device
        made = jax.device_put(made, NamedSharding(placement.mesh, spec))
    return made, sharded


@functools.lru_cache(maxsize=64)
def _eye_maker(n: int, dtype, mesh, spec):
    # Built in place on the mesh: an eager identity would live on one device,
    # which a mesh spanning processes cannot take. One jitted maker per shape
    # and placement: a new one per call would compile on every eager call.
    return jax.jit(functools.partial(jnp.eye, n, dtype=dtype), out_shardings=NamedSharding(mesh, spec))


@functools.partial(jax.jit, static_argnames=("n", "placement", "spec"))
def _eye_beside(like, *, n, placement, spec):
    return sharding.constrain(jnp.eye(n, dtype=like.dtype), placement, spec)


def is_row_sharded(b, placement) -> bool:
    """b's rows sharded over the factor's axis (else it is treated as
    replicated). A b traced on mesh axes of type Auto does not say its
    layout: it is taken as sharded like a's rows, the layout that scales."""
    if placement.n_devices == 1:
        return False
    sharding = sharding_of(b)
    if sharding is None:
        return isinstance(b, jax.core.Tracer) and placement.placed and not placement.manual
    spec = getattr(sharding, "spec", None)
    if spec is None or len(spec) == 0:
        return False
    rows = spec[0][0] if isinstance(spec[0], tuple) and len(spec[0]) == 1 else spec[0]
    return rows == placement.axis


def as_rhs(b, n: int, name="b"):
    """b as an array of shape (n,) or (n, K), else a ValueError naming it."""
    b = jnp.asarray(b) if not hasattr(b, "shape") else b
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(
            f"jaxmg: {name} must have shape ({n},) or ({n}, K) to match the factor's order {n}, "
            f"got {tuple(b.shape)}"
        )
    return b


def solve_promoted(solve, b, dtype):
    """solve(b) against a factor of `dtype`, b promoted as jax.scipy promotes
    both: a narrower b is cast to the factor's dtype. A wider one (JAX would
    widen the factor, whose values stay those of `dtype`) is solved in the
    factor's precision and returned in the wider dtype; a complex b against
    a real factor as its real and imaginary parts. b: an array (the
    callers' as_array made it one)."""
    wide = arguments.solve_dtype(b, dtype)
    if wide == jnp.dtype(dtype):
        return solve(b.astype(dtype))
    if jnp.issubdtype(wide, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
        x_re, x_im = solve(jnp.real(b).astype(dtype)), solve(jnp.imag(b).astype(dtype))
        return jax.lax.complex(x_re, x_im).astype(wide)
    return solve(b.astype(dtype)).astype(wide)


class FactorUnderShardedVmap(ValueError):
    """A factor spread over mesh axes, solved under a vmap whose right-hand
    sides are sharded over those axes: the vmap holds them, and the factor's
    engine layout needs them."""

    def __init__(self, routine: str, pair: str):
        super().__init__(
            f"jaxmg.{routine}: b is one of a batch sharded along its batch axis over the mesh "
            f"axes this factor is spread over (a vmap over right-hand sides), where the factor's "
            f"own solves cannot run. Unpack the factor before the vmap, {pair} = tuple(factor), "
            f"and vmap {routine}({pair}, b): JAX's solves then run where each b lies; or pass "
            f"the right-hand sides as the columns of one b, without vmap")
