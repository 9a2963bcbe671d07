"""Least squares and reduced QR of tall matrices: cuSOLVERMp's geqrf and
orgqr (backend "mp"; least squares as R^-1 Q^H B), or JAX's own solvers on
the whole matrix."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, dispatch, sharding
from jaxmg._src.engines import mp, native
from jaxmg._src.placement import resolve_placement
from jaxmg._src.sharding import adjoint, matmul_highest


def _tall(a, name="a"):
    arguments.check_rank2(a, name)
    dtype = arguments.check_dtype(a, name)
    m, n = a.shape
    if m < n:
        raise ValueError(
            f"jaxmg: {name} must have at least as many rows as columns (M >= N), got {m} x {n}; "
            f"for a wide matrix use the transpose"
        )
    return dtype


def lstsq(a, b, *, mesh=None, spec=None, backend="auto", return_info=False):
    """Least-squares solution of ``a @ x ~ b`` (QR based; a must have full rank).

    Args:
      a: (M, N) matrix with M >= N, rows sharded over one mesh axis, ``P(axis, None)``.
      b: (M,) or (M, K) right-hand sides with a's dtype.
      mesh, spec: as for :func:`jaxmg.potrs`.
      backend: "mp" (cuSOLVERMp's QR over the GPUs, then R^-1 Q^H b), "jax" (``jnp.linalg.lstsq`` on
        the whole matrix) or "auto": "mp" on a mesh of several GPUs, else "jax".
      return_info: also return info (0 on success).

    Returns:
      x with shape (N,) or (N, K), replicated; and info if ``return_info``.
    """
    dtype = _tall(a)
    return_info = arguments.check_flag(return_info, "return_info")
    placement = resolve_placement(a, mesh, spec, "a")
    b = arguments.as_array(b, "b")
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(
            f"jaxmg: b must have shape ({a.shape[0]},) or ({a.shape[0]}, K) to match a's rows, "
            f"got {tuple(b.shape)}"
        )
    arguments.check_same_dtype(b, dtype)
    engine = dispatch.choose_rectangular(placement, backend, "lstsq")
    x, info = _lstsq(a, b[:, None] if b.ndim == 1 else b, placement=placement, engine=engine)
    x = x[:, 0] if b.ndim == 1 else x
    return (x, info) if return_info else x


@functools.partial(jax.jit, static_argnames=("placement", "engine"))
def _lstsq(a, b, *, placement, engine):
    if engine is native.ENGINE:
        whole = sharding.constrain(a, placement, P())
        x = jnp.linalg.lstsq(whole, sharding.constrain(b, placement, P()))[0]
        return x, jnp.int32(0)
    x, info = _mp_lstsq(a, b, placement)
    return jnp.where(info == 0, x, jnp.asarray(jnp.nan, x.dtype)), info


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _mp_lstsq(a, b, placement):
    return mp.gels(a, b, placement)


@_mp_lstsq.defjvp
def _mp_lstsq_jvp(placement, primals, tangents):
    # The normal equations' derivative, A^H A dx = dA^H (b - A x) + A^H (db - dA x),
    # solved with A^H A = R^H R from the QR.
    (a, b), (da, db) = primals, tangents
    q, r, info = mp.qr(a, placement)
    x = mp.solve_with_qr(q, r, b, placement)
    rows = P(placement.axis, None)
    da = sharding.constrain_result(da, placement, rows)
    res = sharding.constrain(b, placement, P()) - matmul_highest(a, x, placement, P())
    rhs = matmul_highest(adjoint(da), res, placement, P()) + matmul_highest(
        adjoint(a), sharding.constrain(db, placement, P()) - matmul_highest(da, x, placement, P()), placement, P())
    y = jax.scipy.linalg.solve_triangular(r, rhs, lower=False, trans="C")
    dx = jax.scipy.linalg.solve_triangular(r, y, lower=False)
    return (x, info), (dx, np.zeros(info.shape, dtype=jax.dtypes.float0))


def qr(a, *, mesh=None, spec=None, backend="auto", return_info=False):
    """Reduced QR decomposition ``a = q @ r`` of a tall matrix.

    Args:
      a: (M, N) matrix with M >= N, rows sharded over one mesh axis, ``P(axis, None)``.
      mesh, spec, backend, return_info: as for :func:`jaxmg.lstsq`.

    Returns:
      q: (M, N) with orthonormal columns, rows sharded like a; r: (N, N) upper
      triangular; and info if ``return_info``.
    """
    _tall(a)
    return_info = arguments.check_flag(return_info, "return_info")
    placement = resolve_placement(a, mesh, spec, "a")
    engine = dispatch.choose_rectangular(placement, backend, "qr")
    q, r, info = _qr(a, placement=placement, engine=engine)
    return (q, r, info) if return_info else (q, r)


@functools.partial(jax.jit, static_argnames=("placement", "engine"))
def _qr(a, *, placement, engine):
    q, r, info = engine.qr(a, placement)
    q = sharding.constrain_result(q, placement, P(placement.axis, None))
    return q, r, info
