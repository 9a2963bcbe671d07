"""Triangular solves with a row-sharded triangular matrix, like
``jax.scipy.linalg.solve_triangular``: the solve walks the devices' row
blocks in order (forward for lower, backward for upper), each block solved
where it lives and sent to the others, which update their own rows.
Derivatives and transposes go through `lax.custom_linear_solve`."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, batching, operators, sharding
from jaxmg._src.eager import returns_ready_on_cpus
from jaxmg._src.placement import BATCH_ELEMENT, Placement, resolve_placement

TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}


BACKENDS = ("auto", "jaxmg", "jax")


@returns_ready_on_cpus
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     debug=None, check_finite=True, *, mesh=None, spec=None, backend="auto"):
    """x with op(a) @ x = b for a triangular a, like
    ``jax.scipy.linalg.solve_triangular``.

    Args:
      a: (..., N, N) triangular matrix (only the `lower` or upper triangle is
        read), rows sharded over one mesh axis, or on one device.
      b: (..., N) or (..., N, K) right-hand sides, replicated or row-sharded.
      trans: 0 or "N" (a), 1 or "T" (a^T), 2 or "C" (a^H).
      lower: whether a is lower triangular.
      unit_diagonal: the diagonal is taken to be ones (not read).
      overwrite_b, debug, check_finite: accepted for compatibility; ignored.
      mesh, spec: as for :func:`jaxmg.potrs`.
      backend: "jaxmg" (the block-by-block solve over the devices), "jax"
        (JAX's solve on the whole matrix) or "auto": jaxmg's on a mesh of
        several devices. float16 and bfloat16, which jaxmg's solvers do not
        take, go to JAX's own solve unless backend, mesh or spec ask for
        jaxmg's.

    Returns:
      x with b's shape.
    """
    del overwrite_b, debug, check_finite
    arguments.check_choice(backend, "backend", BACKENDS)
    code = TRANS.get(trans) if isinstance(trans, str) else arguments.integer_or_none(trans)
    if code not in TRANS.values():
        raise ValueError(f"jaxmg: trans must be 0, 1, 2 or 'N', 'T', 'C', got {trans!r}")
    lower = arguments.check_flag(lower, "lower")
    unit_diagonal = arguments.check_flag(unit_diagonal, "unit_diagonal")
    a, b = arguments.promote((a, "a"), (b, "b"))
    if jnp.dtype(a.dtype) in arguments.HALF and backend != "jaxmg" and mesh is None and spec is None:
        # JAX's triangular solve takes half precision, which jaxmg's solvers do not.
        return _half_precision(a, b, trans=code, lower=lower, unit_diagonal=unit_diagonal)
    arguments.check_dtype(a, "a", "triangular_solve")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"jaxmg: a must be a square (..., N, N) matrix, got shape {a.shape}")
    # jax.scipy's batching: b is a vector when it has one dimension, or one
    # fewer than a with N entries last.
    vector = b.ndim >= 1 and batching.vector_rhs(b, a.ndim, a.shape[-1], "solve_triangular")
    if b.ndim < 1 or (vector and b.shape[-1] != a.shape[-1]) or (
        not vector and b.shape[-2:-1] != a.shape[-1:]
    ):
        raise ValueError(
            f"jaxmg: b must be (..., {a.shape[-1]}) or (..., {a.shape[-1]}, K) to match a, "
            f"got {b.shape}"
        )
    if b.size == 0:  # nothing to solve (JAX's ops on empty sharded arrays fail on meshes)
        return jnp.zeros(jnp.broadcast_shapes(a.shape[:-2], b.shape[:-1 if vector else -2])
                         + b.shape[-1 if vector else -2:], b.dtype)
    if a.ndim > 2 or b.ndim > 2:
        fn = functools.partial(solve_triangular, trans=code, lower=lower,
                               unit_diagonal=unit_diagonal, mesh=mesh, spec=spec, backend=backend)
        return batching.broadcast_map(fn, (a, b), (2, 1 if vector else 2))
    placement = resolve_placement(a, mesh, spec, "a", others=(b,))
    return triangular_solve(a, b, placement, lower=lower, trans=code,
                            unit_diagonal=unit_diagonal, whole=backend == "jax")


def triangular_solve(a, b, placement: Placement, *, lower: bool, trans: int,
                     unit_diagonal: bool, whole: bool = False):
    """op(tri(a)) x = b on a placement (b: (N,) or (N, K)), differentiable;
    `whole`: JAX's solve on the gathered matrix."""
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    x = _solve(a, b2, placement=placement, lower=lower, trans=trans, unit=unit_diagonal,
               whole=whole)
    return x[:, 0] if vector else x


def _triangle(a, lower: bool, unit: bool):
    t = jnp.tril(a) if lower else jnp.triu(a)
    if unit:
        n = a.shape[0]
        t = jnp.where(jnp.eye(n, dtype=bool), jnp.asarray(1, a.dtype), t)
    return t


@functools.partial(jax.jit, static_argnames=("placement", "lower", "trans", "unit", "whole"))
def _solve(a, b, *, placement, lower, trans, unit, whole):
    # Every vector of the solve replicated: under explicit sharding the
    # solves, the product and their transposes must all agree on b's type.
    b = sharding.constrain(b, placement, P())
    if placement is BATCH_ELEMENT:  # JAX's solver takes it whole
        a = sharding.whole_element(a)
    plain = jax.lax.stop_gradient(a)

    def solve(_, r):
        return _forward(plain, r, placement, lower, trans, unit, whole)

    def transpose_solve(_, r):
        # op(A)^T: A^T for A, A for A^T, conj(A) for A^H.
        if trans == 2:
            return jnp.conj(_forward(plain, jnp.conj(r), placement, lower, 0, unit, whole))
        return _forward(plain, r, placement, lower, 1 - trans, unit, whole)

    tri = operators.op(_triangle(a, lower, unit), trans)
    matvec = lambda x: sharding.matmul(tri, x, placement, P())  # noqa: E731
    return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)


def _forward(a, b, placement: Placement, lower: bool, trans: int, unit: bool, whole: bool):
    """op(tri(a)) x = b without derivatives: JAX's solve on one device, the
    block-by-block solve over the row blocks of several."""
    if trans:
        # op(A)'s rows are A's columns: transpose (an all-to-all), and the
        # triangle flips.
        a = sharding.constrain(operators.op(a, trans), placement, P(placement.axis, None))
        lower = not lower
    if whole or placement.n_devices == 1 or placement.mesh is None:
        whole = sharding.constrain(a, placement, P())
        x = jsl.solve_triangular(whole, sharding.constrain(b, placement, P()), lower=lower,
                                 unit_diagonal=unit)
        return sharding.constrain(x, placement, P())
    n = a.shape[0]
    k = placement.n_devices
    n_pad = -(-n // k) * k
    a = sharding.constrain(sharding.pad_matrix(a, n_pad, 1), placement, P(placement.axis, None))
    b = sharding.constrain(sharding.pad_rows(b, n_pad), placement, P())
    x = jax.shard_map(
        functools.partial(_blocks, lower=lower, unit=unit, axis=placement.axis, parts=k),
        mesh=placement.mesh,
        in_specs=(P(placement.axis, None), P()),
        out_specs=P(),
        check_vma=False,
    )(a, b)
    return x[:n]


def _blocks(a_rows, b, *, lower, unit, axis, parts):
    """Inside shard_map: a_rows is this device's (m, N) block of rows of the
    triangular A, b all of B. Device i solves its diagonal block once the
    blocks before it (in solve order) are known; each solved block is summed
    over the devices (only its owner contributes), and every later device
    subtracts its rows' share."""
    m = a_rows.shape[0]
    me = jax.lax.axis_index(axis)
    rhs = jax.lax.dynamic_slice_in_dim(b, me * m, m, 0)
    x = jnp.zeros_like(b)
    for i in range(parts) if lower else range(parts - 1, -1, -1):
        # This device's rows of A's i-th column block: the diagonal block on
        # device i; rows still to solve on the devices after it.
        block = a_rows[:, i * m:(i + 1) * m]
        mine = jsl.solve_triangular(block, rhs, lower=lower, unit_diagonal=unit)
        xi = jax.lax.psum(jnp.where(me == i, mine, jnp.zeros_like(mine)), axis)
        rhs = rhs - sharding.matmul_highest(block, xi)
        x = x.at[i * m:(i + 1) * m].set(xi)
    return x


def _half_precision(a, b, **options):
    """JAX's triangular solve of float16 or bfloat16 operands: as it is on CPUs,
    in float32 elsewhere (XLA's GPU triangular solve refuses float16; an H100,
    jax 0.11.2), rounded back to a's dtype."""

    def own(a, b):
        return jsl.solve_triangular(a, b, **options)

    def widened(a, b):
        return own(a.astype(jnp.float32), b.astype(jnp.float32)).astype(a.dtype)

    return jax.lax.platform_dependent(a, b, cpu=own, default=widened)
