"""JAXMg's routines for the inside of the caller's shard_map, under their
names: ``potrs_shardmap_ctx(a, b, T_A)``, ``potri_shardmap_ctx(a, T_A)``,
``syevd_shardmap_ctx(a, T_A, return_eigenvectors=True)`` and
``potri_symmetrize``. jaxmg's own potrs, potri and syevd already take this
device's row block of a there; these return what that package's do, the
status last as an int32 vector of one (so that an out_spec of P(None) fits
it): potrs's and potri's as JAXMg's (7 where A is not positive definite),
syevd's LAPACK's info. A block cannot be padded there, so with pad=True
(JAXMg's default, which pads the block to a multiple of T_A) the tile is the
largest divisor of the block's rows up to T_A; with pad=False T_A must
divide them, as that package requires.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxmg._src import arguments, peer_calls, sharding
from jaxmg._src.cholesky import potri, potrs
from jaxmg._src.eigh import syevd
from jaxmg._src.engines import mg


def potrs_shardmap_ctx(a, b, T_A, pad=True):  # noqa: N803 (JAXMg's names)
    """(x, status): x solves A x = b on every device (b: all of its rows, or
    this device's); status is 0, or 7 where A is not positive definite (x is
    then NaN)."""
    tile = _tile("potrs_shardmap_ctx", a, T_A, pad)
    x, info = potrs(a, b, tile_size=tile, return_info=True)
    return x, peer_calls.cusolver_status(info[None])


def potri_shardmap_ctx(a, T_A, pad=True):  # noqa: N803
    """(a_inv, status): this device's rows of A^{-1}, all of it (where JAXMg
    returns its upper triangle, which potri_symmetrize completes: applied to
    the whole inverse it leaves it as it is), and the status, as potrs's."""
    tile = _tile("potri_shardmap_ctx", a, T_A, pad)
    inverse, info = potri(a, tile_size=tile, return_info=True)
    return inverse, peer_calls.cusolver_status(info[None])


def syevd_shardmap_ctx(a, T_A, return_eigenvectors=True, pad=True):  # noqa: N803
    """(w, vh, status), or (w, status) without eigenvectors: all eigenvalues
    in ascending order, this device's rows of V^H (row i of V^H is the
    conjugate of the eigenvector of w[i]), and LAPACK's info."""
    tile = _tile("syevd_shardmap_ctx", a, T_A, pad)
    vectors = arguments.check_flag(return_eigenvectors, "return_eigenvectors")
    *out, info = syevd(a, compute_vectors=vectors, tile_size=tile, return_info=True)
    return (*out, info[None])


def potri_symmetrize(a):
    """The Hermitian matrix whose upper triangle a holds (laid out as a)."""
    a = arguments.as_array(a, "a")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"jaxmg.potri_symmetrize takes a square matrix, got shape {a.shape}")
    strictly_upper = jnp.triu(a, 1)
    return jnp.triu(a) + sharding.adjoint_rows(strictly_upper, sharding.rows_placement(a))


def _tile(routine: str, a, T_A, pad):  # noqa: N803
    tile = peer_calls.check_tile(routine, T_A)
    rows = getattr(a, "shape", (0,))[0]
    if not arguments.check_flag(pad, "pad") or rows < 1:
        return tile
    return mg.largest_divisor(rows, tile)
