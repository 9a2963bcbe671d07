"""``jax.numpy.linalg`` with jaxmg's solvers: each function takes the
arguments of its jax.numpy.linalg namesake, in the same order and with the
same defaults, and returns what it returns. jaxmg's own options (mesh, spec,
backend, tile_size, ...) follow as keywords. Names jaxmg does not implement
(eig, multi_dot, vector_norm, ...) are JAX's own functions."""

from __future__ import annotations

import jax.numpy as _jnp

import jaxmg

cond = jaxmg.cond
lstsq = jaxmg.lstsq
matrix_norm = jaxmg.matrix_norm
matrix_power = jaxmg.matrix_power
matrix_rank = jaxmg.matrix_rank
norm = jaxmg.norm
pinv = jaxmg.pinv
svdvals = jaxmg.svdvals
tensorinv = jaxmg.tensorinv
tensorsolve = jaxmg.tensorsolve


def det(a, **options):
    """det a; see :func:`jaxmg.det`."""
    return jaxmg.det(a, **options)


def inv(a, **options):
    """a's inverse; see :func:`jaxmg.inv`."""
    return jaxmg.inv(a, **options)


def slogdet(a, *, method=None, **options):
    """SlogdetResult(sign, logabsdet); see :func:`jaxmg.slogdet`."""
    return jaxmg.slogdet(a, method=method, **options)


def solve(a, b, **options):
    """x with a @ x = b; see :func:`jaxmg.solve`."""
    return jaxmg.solve(a, b, **options)


def cholesky(a, *, upper=False, symmetrize_input=True, **options):
    """L with a = L L^H (U = L^H with upper=True); see :func:`jaxmg.cholesky`."""
    return jaxmg.cholesky(a, upper=upper, symmetrize_input=symmetrize_input, **options)


def eigh(a, UPLO=None, symmetrize_input=True, **options):  # noqa: N803
    """EighResult(eigenvalues, eigenvectors); see :func:`jaxmg.eigh`."""
    return jaxmg.eigh(a, UPLO, symmetrize_input, **options)


def eigvalsh(a, UPLO="L", *, symmetrize_input=True, **options):  # noqa: N803
    """The eigenvalues in ascending order; see :func:`jaxmg.eigvalsh`."""
    return jaxmg.eigvalsh(a, UPLO, symmetrize_input=symmetrize_input, **options)


def qr(a, mode="reduced", **options):
    """QRResult(Q, R), or R for mode "r"; see :func:`jaxmg.qr`."""
    return jaxmg.qr(a, mode, **options)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None,
        **options):
    """SVDResult(U, S, Vh), or S without compute_uv; see :func:`jaxmg.svd`."""
    return jaxmg.svd(a, full_matrices, compute_uv, hermitian, subset_by_index, **options)


__all__ = ["cholesky", "cond", "det", "eigh", "eigvalsh", "inv", "lstsq", "matrix_norm",
           "matrix_power", "matrix_rank", "norm", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals", "tensorinv", "tensorsolve"]


def __getattr__(name):
    return getattr(_jnp.linalg, name)


def __dir__():
    return sorted(set(__all__) | set(dir(_jnp.linalg)))
