"""``jax.scipy.linalg`` with jaxmg's solvers: each function takes the
arguments of its jax.scipy namesake, in the same order and with the same
defaults, and returns what it returns. jaxmg's own options (mesh, spec,
backend, tile_size, ...) follow as keywords. Names jaxmg does not implement
(expm, schur, ...) are JAX's own functions."""

from __future__ import annotations

import jax.scipy.linalg as _jax_linalg

import jaxmg
from jaxmg._src import arguments, least_squares

cho_factor = jaxmg.cho_factor
cho_solve = jaxmg.cho_solve
det = jaxmg.det
inv = jaxmg.inv
lu = jaxmg.lu
lu_factor = jaxmg.lu_factor
lu_solve = jaxmg.lu_solve
polar = jaxmg.polar
solve = jaxmg.solve
solve_triangular = jaxmg.solve_triangular


def cholesky(a, lower=False, overwrite_a=False, check_finite=True, **options):
    """scipy's Cholesky factor: U with a = U^H U, or L with lower=True; see
    :func:`jaxmg.cholesky`."""
    return jaxmg.cholesky(a, lower, overwrite_a, check_finite, **options)


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         turbo=True, eigvals=None, type=1, check_finite=True, **options):  # noqa: A002
    """(w, v), or w with eigvals_only; see :func:`jaxmg.eigh`."""
    result = jaxmg.eigh(a, lower=lower, eigvals_only=eigvals_only, b=b,
                        overwrite_a=overwrite_a, overwrite_b=overwrite_b, turbo=turbo,
                        eigvals=eigvals, type=type, check_finite=check_finite, **options)
    return result if arguments.check_flag(eigvals_only, "eigvals_only") else tuple(result)


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd", **options):
    """(u, s, vh), or s without compute_uv; see :func:`jaxmg.svd`."""
    result = jaxmg.svd(a, full_matrices, compute_uv, overwrite_a=overwrite_a,
                       check_finite=check_finite, lapack_driver=lapack_driver, **options)
    return tuple(result) if arguments.check_flag(compute_uv, "compute_uv") else result


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True,
       **options):
    """scipy's QR (modes "full", "economic", "r"; pivoting); see
    :func:`jaxmg.qr`."""
    del overwrite_a, lwork, check_finite
    return least_squares.scipy_qr(a, mode, pivoting, **options)


__all__ = [
    "cho_factor", "cho_solve", "cholesky", "det", "eigh", "inv", "lu", "lu_factor", "lu_solve",
    "polar", "qr", "solve", "solve_triangular", "svd",
]


def __getattr__(name):
    return getattr(_jax_linalg, name)


def __dir__():
    return sorted(set(__all__) | set(dir(_jax_linalg)))
