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

from jaxmg._src.mixed import blocks as blk, cholesky as chol, lu as lum, placement, refine as rf


class Refinement(NamedTuple):
    """What a mixed-precision solve did, per column of b (shape b.shape[1:]):

    iterations: low-precision solves, the first included (the refinement's cost).
    gmres: whether GMRES-IR ran. fallback: whether the float64 factorisation
    solved the column. backward_error: ||b - A x||_inf / (||A||_inf ||x||_inf
    + ||b||_inf) of the returned x. factor_info: the low-precision
    factorisation's info (its failing order, or 0). info: 0, or the float64
    factorisation's info where the fallback ran and failed (the matrix is
    not positive definite / singular: x is then NaN).
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
    method: str = "auto",
    max_iterations: int = 30,
    restart: int = 20,
    inner_tolerance: float = 1e-4,
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
    and info > 0 if `a` is not positive definite).
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
    method: str = "auto",
    max_iterations: int = 30,
    restart: int = 20,
    inner_tolerance: float = 1e-4,
    mesh=None,
    axis: str | None = None,
):
    """Solves a x = b (a: N x N, float64 or complex128) at float64 accuracy
    from a low-precision LU with partial pivoting. b: (N,) or (N, K).

    Returns (x, Refinement). Columns that do not converge are solved by
    float64 LU (x is NaN and info > 0 where U has an exactly zero pivot).
    """
    return _front("general", a, b, locals())


def _front(kind: str, a, b, args):
    blk.check_matrix(a)
    if jnp.finfo(a.dtype).bits != 64:
        raise TypeError(
            f"a has dtype {jnp.dtype(a.dtype).name}; the mixed-precision solves refine to "
            "float64 accuracy and take float64 or complex128 (cast a first)"
        )
    b = jnp.asarray(b) if not hasattr(b, "shape") else b
    n = a.shape[0]
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"b must have shape ({n},) or ({n}, K) to match a, got {tuple(b.shape)}")
    variants = chol.VARIANTS if kind == "spd" else lum.VARIANTS
    cfg = blk.config(
        a.dtype, block_size=args["block_size"], update=args["update"], panel=args["panel"],
        variant=args["variant"], panel_solve=args["panel_solve"], variants=variants,
    )
    opts = rf.options(args["method"], args["max_iterations"], args["restart"], args["inner_tolerance"])
    rows = placement.resolve(a, args["mesh"], args["axis"])
    x, record = _solve(a, b.reshape(n, -1).astype(a.dtype), kind=kind, cfg=cfg, opts=opts, rows=rows)
    if b.ndim == 1:
        x = x[:, 0]
        record = Refinement(*(f[0] if f.ndim else f for f in record))
    return x, record


@functools.partial(jax.jit, static_argnames=("kind", "cfg", "opts", "rows"))
def _solve(a, b, *, kind, cfg, opts, rows):
    out_specs = (P(), Refinement(P(), P(), P(), P(), P(), P()))
    body = functools.partial(_solve_body, kind=kind, cfg=cfg, opts=opts, rows=rows)
    return placement.call(rows, body, out_specs, a, b)


def _solve_body(a, b, *, kind, cfg, opts, rows):
    anorm, floor = rf.norms(a)
    finite = jnp.isfinite(anorm) & (anorm > 0)
    scale = jnp.where(finite, jnp.exp2(-jnp.round(jnp.log2(jnp.where(finite, anorm, 1)))), 1)
    if kind == "spd":
        factor, factor_info = chol._factor(a, scale, cfg=cfg, rows=rows)
        low_solve = chol._sweeps
    else:
        factor, factor_info = lum._factor(a, scale, cfg=cfg, rows=rows)
        low_solve = lum._sweeps

    def precondition(r):
        s = jnp.max(jnp.abs(r), axis=0)
        s = jnp.where(s > 0, s, 1)
        return low_solve(factor, r / s).astype(r.dtype) * s

    matvec = functools.partial(_matvec, a, rows)
    x, iterations, gmres, converged, berr = rf.refine(
        matvec, precondition, b, anorm, floor, opts, start_ok=factor_info == 0
    )

    def fallback(x):
        x64, info = (_spd_fallback if kind == "spd" else _general_fallback)(a, b, anorm, floor, rows, cfg)
        x = jnp.where(converged, x, x64)
        return x, rf.backward_error(b - matvec(x), x, b, anorm), info

    x, berr, info = lax.cond(
        jnp.all(converged), lambda x: (x, berr, jnp.zeros((), jnp.int32)), fallback, x
    )
    return rows.whole(x), Refinement(iterations, gmres, ~converged, berr, factor_info, info)


def _matvec(a, rows: placement.Rows, x):
    return rows.row_product(a, x)


_FALLBACK_REFINEMENT = rf.Options(method="ir", max_iterations=4)


def _spd_fallback(a, b, anorm, floor, rows: placement.Rows, cfg: blk.Config):
    """Float64 Cholesky: JAX's own on one device (its info recovered by the
    blocked float64 factorisation only when it failed), the blocked one at
    float64 on row-sharded matrices (JAX's would gather the matrix); then a
    few float64 refinement steps."""
    nb = cfg.block_size
    exact = blk.Config(nb, "f64", "float64", "left", "trsm")
    if rows.sharded:
        factor, info = chol._factor(a, jnp.ones((), anorm.dtype), cfg=exact, rows=rows)
        solve = functools.partial(chol._sweeps, factor)
    else:
        c = jsl.cho_factor(a, lower=True)
        failed = ~jnp.all(jnp.isfinite(jnp.diagonal(c[0]).real))
        info = lax.cond(
            failed,
            lambda a: chol._factor(a, jnp.ones((), anorm.dtype), cfg=exact, rows=rows)[1],
            lambda a: jnp.zeros((), jnp.int32),
            a,
        )
        solve = functools.partial(jsl.cho_solve, c)
    return _fallback_solve(a, b, anorm, floor, rows, solve, info)


def _general_fallback(a, b, anorm, floor, rows: placement.Rows, cfg: blk.Config):
    """Float64 LU: JAX's own on one device, the blocked one at float64 on
    row-sharded matrices; then a few float64 refinement steps."""
    if rows.sharded:
        exact = blk.Config(cfg.block_size, "f64", "float64", "right", "trsm")
        factor, info = lum._factor(a, jnp.ones((), anorm.dtype), cfg=exact, rows=rows)
        solve = functools.partial(lum._sweeps, factor)
    else:
        lu_, piv = jsl.lu_factor(a)
        diag = jnp.diagonal(lu_)
        bad = (diag == 0) | ~jnp.isfinite(diag)
        info = jnp.where(jnp.any(bad), 1 + jnp.argmax(bad), 0).astype(jnp.int32)
        solve = functools.partial(jsl.lu_solve, (lu_, piv))
    return _fallback_solve(a, b, anorm, floor, rows, solve, info)


def _fallback_solve(a, b, anorm, floor, rows, solve, info):
    matvec = functools.partial(_matvec, a, rows)
    precondition = lambda r: solve(r).astype(r.dtype)  # noqa: E731
    x, *_ = rf.refine(matvec, precondition, b, anorm, floor, _FALLBACK_REFINEMENT, start_ok=info == 0)
    return jnp.where(info == 0, x, jnp.nan), info
