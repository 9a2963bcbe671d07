"""The scipy/numpy-style entry points that choose a factorisation
(``assume_a="pos"``: Cholesky; anything else: LU with partial pivoting), and
NumPy-style batch dimensions for them."""

from __future__ import annotations

import functools
import typing

import jax
import jax.numpy as jnp

from jaxmg._src import arguments, batching, cholesky, dispatch, failures, lu, operators, plans
from jaxmg._src.eager import one_program, returns_ready_on_cpus
from jaxmg._src.mixed import api as mixed_api
from jaxmg._src.placement import eager_key

ASSUME_A = ("gen", "sym", "her", "pos")


class SlogdetResult(typing.NamedTuple):
    sign: jax.Array
    logabsdet: jax.Array


def _check_assume_a(assume_a):
    if assume_a not in ASSUME_A:
        raise ValueError(f"jaxmg: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}")


@returns_ready_on_cpus
def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False,
          check_finite=True, assume_a="gen", *, tile_size=None, mesh=None, spec=None,
          backend="auto", on_failure="nan", precision="highest", return_info=False):
    """x with a @ x = b, like ``jax.scipy.linalg.solve``.

    a: (..., N, N), rows sharded over one mesh axis (or on one device); b:
    (..., N) or (..., N, K), replicated or row-sharded. assume_a: "pos"
    (symmetric/Hermitian positive definite: Cholesky, reading the `lower` or
    upper triangle) or "gen", "sym", "her" (LU with partial pivoting). x is
    NaN where the factorisation failed. overwrite_a, overwrite_b, debug and
    check_finite are accepted for compatibility and ignored.

    precision: "highest" (factor in a's precision) or "mixed" (float64 /
    complex128: factor on BF16 tensor cores, refine against a to float64
    accuracy, fall back to float64 where refinement does not converge).
    return_info: also return the factorisation's
    info ("highest": an int32, 0 or LAPACK's code) or a RefinementInfo
    ("mixed": info, iterations, fallback, backward_error per column).
    """
    del overwrite_a, overwrite_b, debug, check_finite
    return_info = arguments.check_flag(return_info, "return_info")
    lower = arguments.check_flag(lower, "lower")  # before the key: 1.0 == True
    mixed = mixed_api.check_precision(precision)
    tile = arguments.check_tile(tile_size)
    # jax.scipy's "pos" solve takes lists; the others are jnp.linalg.solve's, which refuses them.
    a, b = arguments.promote((a, "a"), (b, "b"), lists=assume_a == "pos")
    key = eager_key((a, b), "solve", tile, mesh, spec, backend, assume_a, on_failure, lower,
                    return_info, mixed)
    plan = plans.find(key)
    if plan is not None:
        return plan(a, b)
    _check_assume_a(assume_a)
    failures.check_on_failure(on_failure)
    pos = assume_a == "pos"
    if a.ndim > 2 or b.ndim > 2:
        return _batched(functools.partial(
            solve, lower=lower, assume_a=assume_a, tile_size=tile_size, mesh=mesh, spec=spec,
            backend=backend, on_failure=on_failure, precision=precision,
            return_info=return_info), a, b, pos, mixed)
    if mixed:
        return _solve_mixed(a, b, lower, pos, tile_size, mesh, spec, backend, on_failure,
                            return_info)
    layout = dispatch.matrix_layout(a, "potrs" if pos else "getrf", tile_size, mesh, spec,
                                    backend, others=(b,))
    b = operators.as_rhs(b, layout.n)
    arguments.check_same_dtype(b, a.dtype)
    b_sharded = operators.is_row_sharded(b, layout.placement)
    if pos and lower:
        a = cholesky.lower_read_as_solved(a, layout)
        key = None  # the plan would run on a, not on the matrix read
    if on_failure == "nan" and not return_info:
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
    return (x, info) if return_info else x


def _batched(fn, a, b, pos: bool, mixed: bool):
    """fn over the batch dimensions, by jax.scipy's rule for a vector b:
    b.ndim == 1, or (Cholesky) one dimension fewer than a."""
    vector = b.ndim == 1 or (pos and b.ndim == a.ndim - 1)
    n = a.shape[-1]
    if b.ndim == 0 or (b.shape[-1] if vector else b.shape[-2]) != n:
        raise ValueError(
            f"jaxmg.solve: b of shape {tuple(b.shape)} does not fit a of shape {tuple(a.shape)}: "
            f"b must be ({n},) or (..., {n}, K). For one vector per matrix of the batch, pass "
            "b[..., None] and take [..., 0] of the result (JAX reads b so since 0.5)")
    if mixed:
        mixed_api.check_batch((a, "a", a.ndim - 2), (b, "b", b.ndim - (1 if vector else 2)))
    return batching.broadcast_map(fn, (a, b), (2, 1 if vector else 2))


def _solve_mixed(a, b, lower, pos, tile_size, mesh, spec, backend, on_failure, return_info):
    mixed_api.check_options(tile_size=tile_size, backend=backend)
    arguments.check_rank2(a, "a")
    x, record = mixed_api.solve("spd" if pos else "general", a, b,
                                triangle="lower" if lower else "upper", mesh=mesh, spec=spec,
                                on_failure=on_failure)
    return (x, record) if return_info else x


@returns_ready_on_cpus
@one_program("assume_a", "tile_size", "method")
def slogdet(a, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto",
            method=None):
    """(sign, log|det a|) like ``jnp.linalg.slogdet``; "pos" uses Cholesky.
    a may have leading batch dimensions. method: None, "lu" or "qr" (jnp's
    names; jaxmg computes both from its distributed LU factorisation, the
    same quantities to rounding; "qr" takes real matrices only, as jnp's)."""
    _check_assume_a(assume_a)
    if method not in (None, "lu", "qr"):
        raise ValueError(f"jaxmg: slogdet takes method=None, 'lu' or 'qr', got {method!r}")
    a = arguments.inexact(a, "a")
    arguments.check_square_matrices(a, "slogdet")
    if method == "qr" and jnp.iscomplexobj(a):
        raise NotImplementedError(
            "jaxmg: slogdet(method='qr') takes real matrices only (as jnp.linalg.slogdet); "
            "use method='lu' for complex ones"
        )
    if batching.batched(a):
        fn = functools.partial(slogdet, assume_a=assume_a, tile_size=tile_size, mesh=mesh,
                               spec=spec, backend=backend)
        return SlogdetResult(*batching.broadcast_map(fn, (a,), (2,)))
    if assume_a == "pos":
        f = cholesky.cho_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
        return SlogdetResult(jnp.ones((), a.dtype), cholesky.cho_logdet(f))
    return SlogdetResult(*lu.slogdet(a, tile_size=tile_size, mesh=mesh, spec=spec,
                                     backend=backend))


@returns_ready_on_cpus
def det(a, overwrite_a=False, check_finite=True, *, tile_size=None, mesh=None, spec=None,
        backend="auto"):
    """det a, like ``jax.scipy.linalg.det``, from an LU factorisation; its
    derivative stays finite at singular matrices. a may have leading batch
    dimensions."""
    del overwrite_a, check_finite
    a = arguments.inexact(a, "a")
    arguments.check_square_matrices(a, "det")
    if batching.batched(a):
        fn = functools.partial(det, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
        return batching.broadcast_map(fn, (a,), (2,))
    return lu.det(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)


@returns_ready_on_cpus
@one_program("overwrite_a", "check_finite", "assume_a", "tile_size", "on_failure",
             when=lambda named: named["on_failure"] == "nan")  # "raise" reads info eagerly
def inv(a, overwrite_a=False, check_finite=True, *, assume_a="gen", tile_size=None, mesh=None,
        spec=None, backend="auto", on_failure="nan"):
    """a's inverse like ``jnp.linalg.inv``, row-sharded like a. "pos": the
    Cholesky-based inverse (jaxmg.potri); otherwise LU solves against I. a
    may have leading batch dimensions."""
    del overwrite_a, check_finite
    _check_assume_a(assume_a)
    a = arguments.inexact(a, "a")
    arguments.check_square_matrices(a, "inv")
    if batching.batched(a):
        fn = functools.partial(inv, assume_a=assume_a, tile_size=tile_size, mesh=mesh, spec=spec,
                               backend=backend, on_failure=on_failure)
        return batching.broadcast_map(fn, (a,), (2,))
    if assume_a == "pos":
        return cholesky.spd_inverse(a, tile_size=tile_size, mesh=mesh, spec=spec,
                                    backend=backend, on_failure=on_failure)
    return lu.inv(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend,
                  on_failure=on_failure)
