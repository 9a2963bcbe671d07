"""The scipy/numpy-style entry points that choose a factorisation:
``assume_a="pos"`` runs Cholesky, anything else LU with partial pivoting."""

from __future__ import annotations

import functools
import typing

import jax
import jax.numpy as jnp

from jaxmg._src import arguments, cholesky, dispatch, failures, lu, operators, plans
from jaxmg._src.placement import eager_key

ASSUME_A = ("gen", "sym", "her", "pos")


class SlogdetResult(typing.NamedTuple):
    sign: jax.Array
    logabsdet: jax.Array


def _check_assume_a(assume_a):
    if assume_a not in ASSUME_A:
        raise ValueError(f"jaxmg: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}")


def solve(a, b, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto",
          on_failure="nan"):
    """x with a @ x = b, like ``jax.scipy.linalg.solve``. assume_a: "pos"
    (symmetric/Hermitian positive definite: Cholesky) or "gen", "sym", "her"
    (LU with partial pivoting). x is NaN where the factorisation failed."""
    tile = arguments.check_tile(tile_size)
    key = eager_key((a, b), "solve", tile, mesh, spec, backend, assume_a, on_failure)
    plan = plans.find(key)
    if plan is not None:
        return plan(a, b)
    _check_assume_a(assume_a)
    failures.check_on_failure(on_failure)
    pos = assume_a == "pos"
    layout = dispatch.matrix_layout(a, "potrs" if pos else "getrf", tile_size, mesh, spec,
                                    backend, "solve")
    b = operators.as_rhs(arguments.as_array(b, "b"), layout.n)
    arguments.check_same_dtype(b, a.dtype)
    b_sharded = operators.is_row_sharded(b, layout.placement)
    if on_failure == "nan":
        if pos:
            plan = functools.partial(cholesky.solve_pos_result, layout=layout, b_sharded=b_sharded)
        else:
            plan = functools.partial(lu.solve_gen_x, layout=layout, b_sharded=b_sharded)
        return plans.keep(key, plan)(a, b)
    if pos:
        x, info = cholesky.solve_pos(a, b, layout=layout, b_sharded=b_sharded, with_info=True)
    else:
        x, info = lu.solve_gen(a, b, layout, b_sharded)
    failures.report(info, on_failure, failures.NOT_SPD if pos else failures.SINGULAR)
    return x


def slogdet(a, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto"):
    """(sign, log|det a|) like ``jnp.linalg.slogdet``; "pos" uses Cholesky."""
    _check_assume_a(assume_a)
    if assume_a == "pos":
        f = cholesky.cho_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
        return SlogdetResult(jnp.ones((), a.dtype), cholesky.cho_logdet(f))
    return SlogdetResult(*lu.slogdet(a, tile_size=tile_size, mesh=mesh, spec=spec,
                                     backend=backend))


def inv(a, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto",
        on_failure="nan"):
    """a's inverse like ``jnp.linalg.inv``, row-sharded like a. "pos": the
    Cholesky-based inverse (jaxmg.potri); otherwise LU solves against I."""
    _check_assume_a(assume_a)
    if assume_a == "pos":
        return cholesky.spd_inverse(a, tile_size=tile_size, mesh=mesh, spec=spec,
                                    backend=backend, on_failure=on_failure)
    return lu.inv(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend,
                  on_failure=on_failure)
