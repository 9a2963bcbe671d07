"""JAX's own single-device solvers behind jaxmg's conventions (the same
triangle read, NaN and info on failure). Used for small problems and
one-device meshes; the matrix is replicated first, so every device of the
mesh computes the (small) result."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax.sharding import PartitionSpec as P

from jaxmg._src import distribution as dist


def _failed(values):
    # JAX's solvers report failure as NaN; the failing order is not known here.
    return jnp.any(jnp.isnan(values)).astype(jnp.int32)


def potrs(a, b, placement):
    a = dist.constrain(a, placement, P())
    b = dist.constrain(b, placement, P())
    factor = jsl.cho_factor(a, lower=False)
    x = jsl.cho_solve(factor, b)
    return x, _failed(jnp.diagonal(factor[0]))


def potri(a, placement):
    a = dist.constrain(a, placement, P())
    factor = jsl.cho_factor(a, lower=False)
    inv = jsl.cho_solve(factor, jnp.eye(a.shape[0], dtype=a.dtype))
    return inv, _failed(jnp.diagonal(factor[0]))


def syevd(a, placement, vectors: bool):
    a = dist.constrain(a, placement, P())
    if vectors:
        w, v = jnp.linalg.eigh(a, UPLO="U", symmetrize_input=False)
    else:
        w, v = jnp.linalg.eigvalsh(a, UPLO="U"), None
    return w, v, _failed(w)
