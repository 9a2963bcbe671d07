"""Solves at float64 accuracy from low-precision factorisations: factor
(Cholesky or LU, trailing updates at the chosen precision), refine against
the original matrix (jaxmg/_src/mixed/refine.py), and solve the columns
that did not converge with a float64 factorisation, so that the answer is
never less accurate than the float64 solver's."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax
from jax.sharding import PartitionSpec as P

from jaxmg._src import failures
from jaxmg._src.mixed import precision
from jaxmg._src.mixed import blocks as blk, cholesky as chol, hermitian, lu as lum, normal, placement
from jaxmg._src.mixed import refine as rf


class Refinement(NamedTuple):
    """What a mixed-precision solve did: per column of b (shape b.shape[1:])
    for iterations, gmres, fallback and backward_error; factor_info and info
    describe the matrix, one int32 per matrix (as precision="highest"'s info).

    iterations: low-precision solves, the first included (the refinement's cost).
    gmres: whether GMRES-IR ran. fallback: the column did not converge and
    the float64 factorisation solved it (with fallback=False: it is left to
    the caller, x holding the best refined value; a column of b that is not
    finite fails so, and its x is NaN). backward_error: ||b - A x||_inf / (||A||_inf ||x||_inf
    + ||b||_inf) of the returned x. factor_info: the low-precision
    factorisation's info (its failing order, or 0). info: 0, or > 0 where the
    fallback ran and the float64 factorisation failed too (the matrix is not
    positive definite / singular: x is then NaN): LAPACK's order, except for
    JAX's own Cholesky on one device, which does not report it (then
    factor_info, or 1).
    """

    iterations: jax.Array
    gmres: jax.Array
    fallback: jax.Array
    backward_error: jax.Array
    factor_info: jax.Array
    info: jax.Array


def spd_solve(
    a,
    b,
    *,
    block_size: int = 2048,
    update: str = "bf16",
    panel: str = "float32",
    variant: str = "left",
    panel_solve: str = "trsm",
    span: int | None = None,
    method: str = "auto",
    max_iterations: int = 30,
    restart: int = 20,
    inner_tolerance: float = 1e-4,
    fallback: bool = True,
    mesh=None,
    axis: str | None = None,
):
    """Solves a x = b for Hermitian positive-definite `a` (N x N, float64 or
    complex128; the low-precision Cholesky reads its lower triangle, the
    residuals use `a` as stored, so store both triangles) at float64
    accuracy. b: (N,) or (N, K). Factor options as for
    jaxmg._src.mixed.cholesky.cholesky, refinement options as refine.Options.

    Returns (x, Refinement). Columns are refined and judged separately;
    those that do not converge are solved by float64 Cholesky (then x is NaN
    and info > 0 if `a` is not positive definite). fallback=False leaves them
    to the caller (Refinement.fallback marks them): XLA reserves the float64
    factorisation's memory (about one copy of `a`) whenever the program has
    one, run or not, so a caller short of memory can run it apart.
    """
    return _front("spd", a, b, locals())


def general_solve(
    a,
    b,
    *,
    block_size: int = 2048,
    update: str = "bf16",
    panel: str = "float32",
    variant: str = "right",
    panel_solve: str = "trsm",
    span: int | None = None,
    method: str = "auto",
    max_iterations: int = 30,
    restart: int = 20,
    inner_tolerance: float = 1e-4,
    fallback: bool = True,
    mesh=None,
    axis: str | None = None,
):
    """Solves a x = b (a: N x N, float64 or complex128) at float64 accuracy
    from a low-precision LU with partial pivoting, or with variant="gram"
    from the Cholesky factor of A^H A (normal.py). b: (N,) or (N, K).

    Returns (x, Refinement). Columns that do not converge are solved by
    float64 LU (x is NaN and info > 0 where U has an exactly zero pivot);
    fallback=False leaves them to the caller, as for spd_solve.
    """
    return _front("general", a, b, locals())


def _front(kind: str, a, b, args):
    blk.check_matrix(a)
    blk.check_refinable(a)
    b = jnp.asarray(b) if not hasattr(b, "shape") else b
    n = a.shape[0]
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"b must have shape ({n},) or ({n}, K) to match a, got {tuple(b.shape)}")
    variants = chol.VARIANTS if kind == "spd" else GENERAL_VARIANTS
    cfg = blk.config(
        a.dtype, block_size=args["block_size"], update=args["update"], panel=args["panel"],
        variant=args["variant"], panel_solve=args["panel_solve"], variants=variants,
        bounded=kind == "spd" or args["variant"] in normal.VARIANTS, span=args["span"],
    )
    opts = rf.options(args["method"], args["max_iterations"], args["restart"], args["inner_tolerance"])
    if not isinstance(args["fallback"], bool):
        raise TypeError(f"fallback must be True or False, got {args['fallback']!r}")
    rows = placement.resolve(a, args["mesh"], args["axis"])
    b2 = b.reshape(n, -1).astype(a.dtype)
    x, record = _solve(a, b2, kind=kind, cfg=cfg, opts=opts, fallback=args["fallback"], rows=rows)
    if b.ndim == 1:
        x = x[:, 0]
        record = Refinement(*(f[0] if f.ndim else f for f in record))
    return x, record


GENERAL_VARIANTS = lum.VARIANTS + normal.VARIANTS


@precision.jit(static_argnames=("kind", "cfg", "opts", "fallback", "rows"))
def _solve(a, b, *, kind, cfg, opts, fallback, rows):
    out_specs = (P(), Refinement(P(), P(), P(), P(), P(), P()))
    body = functools.partial(_solve_body, kind=kind, cfg=cfg, opts=opts, fallback=fallback, rows=rows)
    return placement.call(rows, body, out_specs, a, b)


def factorise(kind: str, a, cfg: blk.Config, rows: placement.Rows, triangle: str | None = None):
    """The low-precision factorisation alone, for solving later with
    solve_factored: (CholeskyFactor or LUFactor, its info, A's norms for the
    refinement: refine.norms, one pass over A that the solves then skip).
    Where it fails, the solves go to float64 (api.py says why no second,
    more accurate factorisation is tried first). triangle ("spd", one
    device): a holds A in its "upper" or "lower" triangle only
    (hermitian.py); None: a is all of A."""
    upper = triangle == "upper"
    norms = _norms(a) if triangle is None else _triangle_norms(a, upper)
    if cfg.variant in normal.VARIANTS:
        return (*normal.factor(a, cfg=cfg, rows=rows), norms)
    factor = functools.partial(chol._cholesky, upper=upper) if kind == "spd" else lum._lu
    scale = _scale(kind, a, norms[0], rows.sharded)
    return (*factor(a, scale, cfg=cfg, rows=rows), norms)


def solve_factored(kind: str, a, factor, factor_info, norms, b, cfg: blk.Config, opts: rf.Options,
                   fallback: bool, rows: placement.Rows, adjoint: bool = False,
                   triangle: str | None = None):
    """Refines solves of a x = b (b: (N, K)) with a factor and the norms
    from factorise: (x, Refinement), as spd_solve / general_solve.
    adjoint (LU): solves a^H x = b with the same factor, against a^H's norms.
    triangle: as for factorise."""
    return _solve_factored(a, factor, factor_info, norms, b, kind=kind, cfg=cfg, opts=opts,
                           fallback=fallback, rows=rows, adjoint=adjoint and kind == "general",
                           triangle=triangle)


_norms = precision.jit(rf.norms)
_triangle_norms = precision.jit(hermitian.norms, static_argnums=1)


@precision.jit(static_argnums=(0, 3))
def _scale(kind: str, a, anorm, sharded: bool = False):
    """The power of two A is multiplied by before it is rounded: to a largest
    diagonal entry in [1, 2) for a Cholesky (so |L_ij| < sqrt(2), within
    float16's range), to ||A||_inf in [1, 2) for an LU. Rows sharded: the
    largest |a_ij| (the same for a positive-definite matrix, and no gather of
    the diagonal across devices; a then holds both triangles)."""
    if kind != "spd":
        return blk.power_of_two_near_inverse(anorm)
    largest = jnp.max(jnp.abs(a)) if sharded else jnp.max(jnp.abs(jnp.diagonal(a)))
    return blk.power_of_two_near_inverse(largest)


@precision.jit(static_argnames=("kind", "cfg", "opts", "fallback", "rows", "adjoint", "triangle"))
def _solve_factored(a, factor, factor_info, norms, b, *, kind, cfg, opts, fallback, rows, adjoint,
                    triangle=None):
    out_specs = (P(), Refinement(P(), P(), P(), P(), P(), P()))
    body = functools.partial(_refine_body, kind=kind, cfg=cfg, opts=opts, fallback=fallback,
                             rows=rows, adjoint=adjoint, triangle=triangle)
    return placement.call(rows, body, out_specs, a, factor, factor_info, norms, b)


def _solve_body(a, b, *, kind, cfg, opts, fallback, rows):
    norms = rf.norms(a)
    if cfg.variant in normal.VARIANTS:
        factor, factor_info = normal.factor_body(a, cfg=cfg, rows=rows)
    else:
        factor_body = chol._factor if kind == "spd" else lum._factor
        scale = _scale(kind, a, norms[0], rows.sharded)
        factor, factor_info = factor_body(a, scale, cfg=cfg, rows=rows)
    return _refine_body(a, factor, factor_info, norms, b, kind=kind, cfg=cfg, opts=opts,
                        fallback=fallback, rows=rows)


def _refine_body(a, factor, factor_info, norms, b, *, kind, cfg, opts, fallback, rows,
                 adjoint=False, triangle=None):
    anorm, row_floor = rf.norms(a, adjoint=True) if adjoint else norms
    if triangle is not None and b.shape[1] > hermitian.MAX_COLUMNS:
        a, triangle = hermitian.mirrored(a, triangle == "upper"), None  # one copy; then GEMMs
    if isinstance(factor, normal.GramFactor):
        low_solve = functools.partial(normal.solve, adjoint=adjoint)
    else:
        low_solve = chol._sweeps if kind == "spd" else functools.partial(lum._sweeps, adjoint=adjoint)

    def precondition(r):
        s = jnp.max(jnp.abs(r), axis=0)
        s = jnp.where(s > 0, s, 1)
        return low_solve(factor, r / s).astype(r.dtype) * s

    if triangle is None:
        matvec = functools.partial(_matvec, a, rows, adjoint=adjoint)
    else:
        matvec = functools.partial(hermitian.product, a, upper=triangle == "upper")
    x, iterations, gmres, converged, berr = rf.refine(
        matvec, precondition, b, anorm, row_floor, opts, start_ok=factor_info == 0
    )

    def fall_back(x):
        if kind == "spd":
            x64, info = _spd_fallback(a, b, anorm, row_floor, rows, cfg, factor_info, matvec, triangle)
        else:
            x64, info = _general_fallback(a, b, anorm, row_floor, rows, cfg, factor_info, matvec, adjoint)
        x = jnp.where(converged[None, :], x, x64)
        s = rf.column_scale(b).astype(b.dtype)  # as refine measures it: no subnormal residual
        return x, rf.backward_error(b * s - matvec(x * s), x * s, b * s, anorm), info

    info = jnp.zeros((), jnp.int32)
    if fallback:
        x, berr, info = lax.cond(jnp.all(converged), lambda x: (x, berr, info), fall_back, x)
    return rows.whole(x), Refinement(iterations, gmres, ~converged, berr, factor_info, info)


def _matvec(a, rows: placement.Rows, x, adjoint: bool = False):
    return rows.row_product(a, x, adjoint_x=adjoint)


_FALLBACK_REFINEMENT = rf.Options(method="ir", max_iterations=4)


def _spd_fallback(a, b, anorm, row_floor, rows: placement.Rows, cfg: blk.Config, factor_info, matvec,
                  triangle=None):
    """Float64 Cholesky: JAX's own on one device, the blocked one at float64
    on row-sharded matrices (JAX's would gather the matrix); then a few
    float64 refinement steps. JAX's does not report where it failed: the
    low-precision factorisation's order stands in (1 if that one passed), as
    jaxmg's JAX engine reports; the blocked one reports its own."""
    if rows.sharded:
        exact = blk.Config(cfg.block_size, "f64", "float64", "left", "trsm")
        factor, info = chol._factor(a, jnp.ones((), anorm.dtype), cfg=exact, rows=rows)
        solve = functools.partial(chol._sweeps, factor)
    else:
        c = jsl.cho_factor(a, lower=triangle != "upper")
        info = jnp.where(chol.did_not_factor(c[0]), jnp.maximum(factor_info, 1), 0).astype(jnp.int32)
        solve = functools.partial(jsl.cho_solve, c)
    return _fallback_solve(matvec, b, anorm, row_floor, solve, info)


def _general_fallback(a, b, anorm, row_floor, rows: placement.Rows, cfg: blk.Config, factor_info, matvec,
                      adjoint: bool = False):
    """Float64 LU: JAX's own on one device, the blocked one at float64 on
    row-sharded matrices; then a few float64 refinement steps (of a^H x = b
    with adjoint, from the same LU of a)."""
    if rows.sharded:
        exact = blk.Config(cfg.block_size, "f64", "float64", "right", "trsm")
        factor, info = lum._factor(a, jnp.ones((), anorm.dtype), cfg=exact, rows=rows)
        solve = functools.partial(lum._sweeps, factor, adjoint=adjoint)
    else:
        lu_, piv = jsl.lu_factor(a)
        diag = jnp.diagonal(lu_)
        bad = (diag == 0) | ~jnp.isfinite(diag)
        info = jnp.where(jnp.any(bad), 1 + jnp.argmax(bad), 0).astype(jnp.int32)
        solve = functools.partial(jsl.lu_solve, (lu_, piv), trans=2 if adjoint else 0)
    return _fallback_solve(matvec, b, anorm, row_floor, solve, info)


def _fallback_solve(matvec, b, anorm, row_floor, solve, info):
    precondition = lambda r: solve(r).astype(r.dtype)  # noqa: E731
    x, *_ = rf.refine(matvec, precondition, b, anorm, row_floor, _FALLBACK_REFINEMENT, start_ok=info == 0)
    return failures.nan_where_failed(x, info), info
