"""``jax.scipy.linalg`` with jaxmg's solvers: each function takes the
arguments of its jax.scipy namesake, in the same order and with the same
defaults, and returns what it returns. jaxmg's own options (mesh, spec,
backend, tile_size, ...) follow as keywords. Names jaxmg does not implement
(expm, schur, ...) are JAX's own functions."""

from __future__ import annotations

import functools
import inspect

import jax.numpy as jnp
import jax.scipy.linalg as _jax_linalg

import jaxmg
from jaxmg._src import arguments, least_squares


def _reading_lists(routine, pair: bool = False):
    """routine taking nested lists (and tuples) as arrays for its first two
    arguments, as its jax.scipy namesake does (jnp.asarray); with pair, the
    first is a (factor, lower or piv) pair whose factor may be one. solve,
    inv, det and expm stay as jax.scipy's, which refuse lists."""
    names = list(inspect.signature(routine).parameters)[:2]

    def array(x):
        return jnp.asarray(x) if isinstance(x, (list, tuple)) else x

    def first(x):
        if pair and isinstance(x, (list, tuple)) and len(x) == 2:
            return (array(x[0]), x[1])
        return array(x)

    @functools.wraps(routine)
    def call(*args, **kwargs):
        args = list(args)
        for position, (name, convert) in enumerate(zip(names, (first, array))):
            if position < len(args):
                args[position] = convert(args[position])
            elif name in kwargs:
                kwargs[name] = convert(kwargs[name])
        return routine(*args, **kwargs)

    return call


cho_factor = _reading_lists(jaxmg.cho_factor)
cho_solve = _reading_lists(jaxmg.cho_solve, pair=True)
det = jaxmg.det
inv = jaxmg.inv
expm = jaxmg.expm
expm_frechet = jaxmg.expm_frechet
lu = _reading_lists(jaxmg.lu)
lu_factor = _reading_lists(jaxmg.lu_factor)
lu_solve = _reading_lists(jaxmg.lu_solve, pair=True)
polar = _reading_lists(jaxmg.polar)
solve = jaxmg.solve
solve_triangular = _reading_lists(jaxmg.solve_triangular)


@_reading_lists
def cholesky(a, lower=False, overwrite_a=False, check_finite=True, **options):
    """scipy's Cholesky factor: U with a = U^H U, or L with lower=True; see
    :func:`jaxmg.cholesky`."""
    return jaxmg.cholesky(a, lower, overwrite_a, check_finite, **options)


@_reading_lists
def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         turbo=True, eigvals=None, type=1, check_finite=True, **options):  # noqa: A002
    """(w, v), or w with eigvals_only; see :func:`jaxmg.eigh`."""
    result = jaxmg.eigh(a, lower=lower, eigvals_only=eigvals_only, b=b,
                        overwrite_a=overwrite_a, overwrite_b=overwrite_b, turbo=turbo,
                        eigvals=eigvals, type=type, check_finite=check_finite, **options)
    return result if arguments.check_flag(eigvals_only, "eigvals_only") else tuple(result)


@_reading_lists
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd", **options):
    """(u, s, vh), or s without compute_uv; see :func:`jaxmg.svd`."""
    result = jaxmg.svd(a, full_matrices, compute_uv, overwrite_a=overwrite_a,
                       check_finite=check_finite, lapack_driver=lapack_driver, **options)
    return tuple(result) if arguments.check_flag(compute_uv, "compute_uv") else result


@_reading_lists
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True,
       **options):
    """scipy's QR (modes "full", "economic", "r"; pivoting); see
    :func:`jaxmg.qr`."""
    del overwrite_a, lwork, check_finite
    return least_squares.scipy_qr(a, mode, pivoting, **options)


__all__ = [
    "cho_factor", "cho_solve", "cholesky", "det", "eigh", "expm", "expm_frechet", "inv", "lu",
    "lu_factor", "lu_solve", "polar", "qr", "solve", "solve_triangular", "svd",
]


def __getattr__(name):
    return getattr(_jax_linalg, name)


def __dir__():
    return sorted(set(__all__) | set(dir(_jax_linalg)))
