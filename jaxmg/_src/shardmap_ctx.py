"""JAXMg's ``*_shardmap_ctx`` routines, under their names, in both of that
package's meanings.

Inside the caller's shard_map (its 0.0.8 release): ``potrs_shardmap_ctx(a, b,
T_A)``, ``potri_shardmap_ctx(a, T_A)``, ``syevd_shardmap_ctx(a, T_A,
return_eigenvectors=True)`` and ``potri_symmetrize``. jaxmg's own potrs, potri
and syevd already take this device's row block of a there; these return what
that package's do, the status last as an int32 vector of one (so that an
out_spec of P(None) fits it): potrs's and potri's as JAXMg's (7 where A is not
positive definite), syevd's LAPACK's info. With pad=True (JAXMg's default)
potrs and potri pad each block to a multiple of T_A where T_A does not divide
its rows (padded_blocks.py); syevd's tile is then the largest divisor of the
rows up to T_A (its eigenvectors' rows would have to move between devices).
With pad=False T_A must divide the rows, as that package requires.

Outside shard_map, under the caller's jit (its 1.x releases, which also name
``gesvd_shardmap_ctx`` and ``lu_solve_shardmap_ctx``): the call form of the
routine of the same name with its mesh and ``matrix_specs``, returning the
matrix's work buffer first (``a_work``, which JAXMg returns so that the
caller's jit can donate a into it) and the status last, always. jaxmg leaves a
intact, so a_work is a itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmg._src import arguments, numpy_rules, padded_blocks, peer_calls, sharding
from jaxmg._src.cholesky import potri, potrs
from jaxmg._src.eigh import syevd
from jaxmg._src.engines import base, mg
from jaxmg._src.lu import lu_solve
from jaxmg._src.placement import inside_shard_map
from jaxmg._src.polar import gesvd


@numpy_rules.default_rules
def potrs_shardmap_ctx(a, b, T_A, *args, **kwargs):  # noqa: N803 (JAXMg's names)
    """Inside shard_map, ``(a, b, T_A, pad=True)``: (x, status), x solving
    A x = b on every device (b: all of its rows, or this device's); status
    is 0, or 7 where A is not positive definite (x is then NaN). Outside,
    ``(a, b, T_A, mesh=None, matrix_specs=None, *, in_specs=None,
    return_logdet=False, pad=True)``: (a_work, x, status), or (a_work, x,
    logdet, status)."""
    if inside_shard_map():
        _check_0_0_8_form("potrs_shardmap_ctx", args, kwargs, flags=1)
        return _potrs_in_block(a, b, T_A, *args, **kwargs)
    return _potrs_whole(a, b, T_A, *args, **kwargs)


def _potrs_in_block(a, b, T_A, pad=True):  # noqa: N803
    tile, extra = padded_blocks.plan("potrs_shardmap_ctx", a, T_A, pad)
    if extra:
        peer_calls.check_arrays("potrs_shardmap_ctx", a, b)
    x, info = padded_blocks.potrs_blocks(potrs, a, b, tile, extra)
    return x, peer_calls.cusolver_status(info[None])


def _potrs_whole(a, b, T_A, mesh=None, matrix_specs=None, *, in_specs=None,  # noqa: N803
                 return_logdet=False, pad=True):
    _check_mesh("potrs_shardmap_ctx", mesh)
    *out, status = potrs(a, b, T_A, mesh, return_logdet=return_logdet, pad=pad,
                         return_status=True, **_specs(matrix_specs, in_specs))
    return _work(a), *out, status[None]


@numpy_rules.default_rules
def potri_shardmap_ctx(a, T_A, pad=True):  # noqa: N803
    """(a_inv, status): this device's rows of A^{-1}, all of it (where JAXMg
    returns its upper triangle, which potri_symmetrize completes: applied to
    the whole inverse it leaves it as it is), and the status, as potrs's
    (JAXMg's 1.x releases have no potri)."""
    tile, extra = padded_blocks.plan("potri_shardmap_ctx", a, T_A, pad)
    if extra:
        peer_calls.check_arrays("potri_shardmap_ctx", a)
    inverse, info = padded_blocks.potri_blocks(potri, a, tile, extra)
    return inverse, peer_calls.cusolver_status(info[None])


@numpy_rules.default_rules
def syevd_shardmap_ctx(a, T_A, *args, **kwargs):  # noqa: N803
    """Inside shard_map, ``(a, T_A, return_eigenvectors=True, pad=True)``:
    (w, vh, status), or (w, status) without eigenvectors: all eigenvalues in
    ascending order, this device's rows of V^H (row i of V^H is the
    conjugate of the eigenvector of w[i]), and LAPACK's info. Outside,
    ``(a, T_A, mesh=None, matrix_specs=None, *, in_specs=None,
    return_eigenvectors=True, pad=True)``: (a_work, w, v, status) with the
    eigenvectors as v's columns, or (a_work, w, status)."""
    if inside_shard_map():
        _check_0_0_8_form("syevd_shardmap_ctx", args, kwargs, flags=2)
        return _syevd_in_block(a, T_A, *args, **kwargs)
    return _syevd_whole(a, T_A, *args, **kwargs)


def _syevd_in_block(a, T_A, return_eigenvectors=True, pad=True):  # noqa: N803
    if peer_calls.check_tile("syevd_shardmap_ctx", T_A) > mg.GPU_SYEVD_MAX_TILE:
        raise ValueError(f"jaxmg.syevd_shardmap_ctx: T_A has a maximum value of "
                         f"{mg.GPU_SYEVD_MAX_TILE} for SyevdMg, received T_A={T_A}")
    tile = _tile("syevd_shardmap_ctx", a, T_A, pad)
    vectors = arguments.check_flag(return_eigenvectors, "return_eigenvectors")
    *out, info = syevd(a, compute_vectors=vectors, tile_size=tile, return_info=True)
    return (*out, info[None])


def _syevd_whole(a, T_A, mesh=None, matrix_specs=None, *, in_specs=None,  # noqa: N803
                 return_eigenvectors=True, pad=True):
    _check_mesh("syevd_shardmap_ctx", mesh)
    *out, status = syevd(a, T_A, mesh, return_eigenvectors=return_eigenvectors, pad=pad,
                         return_status=True, **_specs(matrix_specs, in_specs))
    return _work(a), *out, status[None]


@numpy_rules.default_rules
def lu_solve_shardmap_ctx(a, b, T_A, mesh=None, matrix_specs=None, *, in_specs=None,  # noqa: N803
                          pad=True):
    """JAXMg 1.x's, outside shard_map: (a_work, x, status), x solving
    A x = b by LU with partial pivoting; status 0, or LAPACK's info (U(i, i)
    exactly zero: x is then NaN)."""
    _check_outside("lu_solve_shardmap_ctx")
    x, status = lu_solve(a, b, T_A, mesh, pad=pad, return_status=True,
                         **_specs(matrix_specs, in_specs))
    return _work(a), x, status[None]


@numpy_rules.default_rules
def gesvd_shardmap_ctx(a, T_A, mesh=None, matrix_specs=None, *, in_specs=None,  # noqa: N803
                       compute_u=True, compute_vh=True, full_matrices=False, pad=True):
    """JAXMg 1.x's, outside shard_map: (a_work, u, s, vh, status), less u or
    vh where compute_u or compute_vh is False, as jaxmg.gesvd's call form."""
    _check_outside("gesvd_shardmap_ctx")
    *out, status = gesvd(a, T_A, mesh, compute_u=compute_u, compute_vh=compute_vh,
                         full_matrices=full_matrices, pad=pad, return_status=True,
                         **_specs(matrix_specs, in_specs))
    return _work(a), *out, status[None]


@numpy_rules.default_rules
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
    return base.largest_divisor(rows, tile)


def _check_0_0_8_form(routine: str, extra_positional, kwargs, flags: int):
    """Inside shard_map only JAXMg 0.0.8's form runs: after T_A, up to
    `flags` flags (pad; syevd's return_eigenvectors first)."""
    theirs_1x = {"mesh", "matrix_specs", "in_specs", "return_logdet"} & set(kwargs)
    not_flags = [x for x in extra_positional if not isinstance(x, (bool, int, np.bool_, np.integer))]
    if len(extra_positional) > flags or not_flags or theirs_1x:
        raise ValueError(
            f"jaxmg.{routine} inside jax.shard_map is JAXMg 0.0.8's form, which takes this "
            f"device's row block of a and T_A (then pad); JAXMg 1.x's form with mesh and "
            f"matrix_specs lays a out over the mesh itself: call that one outside shard_map")


def _check_mesh(routine: str, mesh):
    if isinstance(mesh, bool):
        raise TypeError(
            f"jaxmg.{routine} outside jax.shard_map is JAXMg 1.x's form (a, ..., T_A, mesh, "
            f"matrix_specs), whose fourth argument is the mesh, got {mesh!r}; JAXMg 0.0.8's "
            "pad belongs to the form for inside shard_map (pass pad= by name here)")


def _work(a):
    """a_work: a itself, as a jax.Array (JAXMg returns its work buffer)."""
    return a if isinstance(a, jax.Array) else jnp.asarray(a)


def _check_outside(routine: str):
    if inside_shard_map():
        raise ValueError(
            f"jaxmg.{routine} is JAXMg 1.x's, which lays a out over the mesh itself: call it "
            "outside jax.shard_map (under your jit), with mesh and matrix_specs")


def _specs(matrix_specs, in_specs) -> dict:
    """a's spec under the name it was given: the routines refuse both."""
    return {name: value for name, value in (("matrix_specs", matrix_specs),
                                            ("in_specs", in_specs)) if value is not None}
