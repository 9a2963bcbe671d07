"""The public API in jax.scipy.linalg / jnp.linalg terms: solves, inverses,
log-determinants and eigendecompositions of a row-sharded matrix, with
forward and reverse derivatives, vmap, and factor reuse.

Derivatives never gather A: solves go through `lax.custom_linear_solve`, so
the tangent and cotangent solves reuse the sharded factor through jaxmg
calls; log-determinants, inverses and eigendecompositions have JVP rules
built from matrix products XLA shards."""

from __future__ import annotations

import functools
import typing

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxmg._src import dispatch, distribution as dist, factors, plans, potri as potri_mod
from jaxmg._src import syevd as syevd_mod
from jaxmg._src.factors import CholeskyFactor, Layout, LUFactor

ON_FAILURE = ("nan", "raise", "checkify")


class LinAlgError(ArithmeticError):
    """A factorisation failed (matrix not positive definite, or singular)."""


class EighResult(typing.NamedTuple):
    eigenvalues: jax.Array
    eigenvectors: jax.Array


class SlogdetResult(typing.NamedTuple):
    sign: jax.Array
    logabsdet: jax.Array


# --------------------------------------------------------------------------
# Arguments and failure reporting
# --------------------------------------------------------------------------


def _layout(a, routine: str, tile_size, mesh, spec, backend, what: str) -> Layout:
    dist.check_rank2(a, "a")
    dist.check_dtype(a, "a")
    tile = dist.check_tile(tile_size)
    placement = dist.resolve_placement(a, mesh, spec, "a")
    if placement.manual:
        raise ValueError(
            f"jaxmg.{what} takes the global (sharded) matrix, not a shard_map block; inside "
            "shard_map use jaxmg.potrs, jaxmg.potri or jaxmg.syevd on the blocks"
        )
    n = dist.check_square(a, placement, "a")
    engine = dispatch.choose(routine, n, placement, backend)
    if engine == "mp":
        return factors.layout(placement, n, tile or 0, engine)
    tile = dist.choose_tile(n, placement.n_devices, tile)
    if routine == "getrf" and engine == "jaxmg":
        tile = dispatch.lu_tile(tile, placement)
    return factors.layout(placement, n, tile, engine)


def _cached_layout(a, routine: str, tile_size, mesh, spec, backend, what: str) -> Layout:
    """_layout, kept as an eager call's plan: a factorisation repeated on arrays of
    the same sharding, shape and dtype skips the checks."""
    key = dist.eager_key((a,), "layout", routine, dist.check_tile(tile_size), mesh, spec, backend)
    return plans.find_or_make(key, lambda: _layout(a, routine, tile_size, mesh, spec, backend, what))


def _check_assume_a(assume_a):
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise ValueError(f"jaxmg: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}")


def _check_on_failure(on_failure):
    if on_failure not in ON_FAILURE:
        raise ValueError(f"jaxmg: on_failure must be one of {ON_FAILURE}, got {on_failure!r}")


def _raise_if_failed(info, message):
    if int(info) != 0:
        raise LinAlgError(f"{message} (info={int(info)})")


def report(info, on_failure: str, message: str):
    """Acts on a factorisation's info: "nan" leaves the NaN results alone,
    "raise" raises LinAlgError (at once for concrete values; from inside a
    compiled program otherwise), "checkify" records a checkify error."""
    _check_on_failure(on_failure)
    if on_failure == "nan":
        return
    if on_failure == "checkify":
        checkify.check(info == 0, message + " (info={info})", info=info)
        return
    if isinstance(info, jax.core.Tracer):
        jax.debug.callback(functools.partial(_raise_if_failed, message=message), info)
    else:
        _raise_if_failed(info, message)


_NOT_SPD = "jaxmg: the matrix is not positive definite"
_SINGULAR = "jaxmg: the matrix is singular"


def _no_grad_factor(f):
    """The factor's arrays without derivatives: only `a` carries them."""
    if isinstance(f, CholeskyFactor):
        return CholeskyFactor(
            jax.lax.stop_gradient(f.factor), None, jax.lax.stop_gradient(f.info), f.layout
        )
    return LUFactor(
        jax.lax.stop_gradient(f.lu), jax.lax.stop_gradient(f.piv), None,
        jax.lax.stop_gradient(f.info), f.layout,
    )


def _keep_rows_sharded(a, layout: Layout):
    """a, constrained row-sharded: a sharding constraint transposes to the
    same constraint, so A's cotangent (an outer product) stays sharded too."""
    return dist.constrain_result(a, layout.placement, layout.row_spec)




def _hermitian_part(x, placement: dist.Placement, n: int):
    rows = P(placement.axis, None)
    return (x + dist.constrain_result(jnp.conj(x).T, placement, rows)) / 2


def _matvec(a, layout: Layout, b, trans=0):
    """x -> op(a) @ x (op as lu_solve's trans), typed like b. Under explicit
    sharding a local product per row block (no ambiguous contraction for
    the transposes to resolve), whose result is resharded like b."""
    placement = layout.placement
    spec = getattr(jax.typeof(b).sharding, "spec", None)
    if not dist.is_explicit(placement) or spec is None:
        return lambda x: _op(a, trans) @ x
    if layout.n % placement.n_devices:  # explicit and uneven: all replicated
        return lambda x: dist.constrain(_op(a, trans) @ x, placement, spec)
    axis = placement.axis
    rows = P(axis, None) if b.ndim == 2 else P(axis)
    if trans == 0:
        body, in_specs, out_specs = (lambda ab, xb: ab @ xb), (layout.row_spec, P()), rows
    else:
        def body(ab, xb):
            return jax.lax.psum(_op(ab, trans) @ xb, axis)

        in_specs, out_specs = (layout.row_spec, rows), P()
    product = jax.shard_map(body, mesh=placement.mesh, in_specs=in_specs, out_specs=out_specs)

    def matvec(x):
        x = dist.constrain(x, placement, in_specs[1])
        a_rows = dist.constrain(a, placement, layout.row_spec)
        return dist.constrain(product(a_rows, x), placement, spec)

    return matvec


def _eye(layout: Layout, dtype):
    """The identity, row-sharded where the devices can split N evenly (explicit
    sharding allows no uneven shards), and whether it is."""
    placement = layout.placement
    sharded = not (dist.is_explicit(placement) and layout.n % placement.n_devices)
    spec = layout.row_spec if sharded else P()
    if placement.manual:
        return jnp.eye(layout.n, dtype=dtype), sharded
    return _eye_maker(layout.n, jnp.dtype(dtype), placement.mesh, spec)(), sharded


@functools.lru_cache(maxsize=64)
def _eye_maker(n: int, dtype, mesh, spec):
    # Built in place on the mesh: an eager identity would live on one device,
    # which a mesh spanning processes cannot take. One jitted maker per shape
    # and placement: a new one per call would compile on every eager call.
    return jax.jit(functools.partial(jnp.eye, n, dtype=dtype), out_shardings=NamedSharding(mesh, spec))


# --------------------------------------------------------------------------
# Cholesky
# --------------------------------------------------------------------------


def cho_factor(
    a, *, tile_size=None, mesh=None, spec=None, backend="auto", donate=False, on_failure="nan"
) -> CholeskyFactor:
    """Cholesky factor of a symmetric/Hermitian positive-definite matrix, kept
    sharded in solver layout for :func:`cho_solve` and :func:`cho_logdet`.

    a: (N, N), rows sharded ``P(axis, None)``; only one triangle is read.
    donate: reuse a's buffer for the factor (a is deleted; no derivatives
    with respect to a then). Other arguments as for :func:`jaxmg.potrs`.
    """
    _check_on_failure(on_failure)
    layout = _cached_layout(a, "potrs", tile_size, mesh, spec, backend, "cho_factor")
    f = factors.cholesky(a, layout, donate=donate)
    report(f.info, on_failure, _NOT_SPD)
    return f


def cho_solve(c_and_a: CholeskyFactor, b):
    """Solves A X = B with the factor from :func:`cho_factor`. b: (N,) or (N, K),
    replicated or row-sharded like A; X comes back in b's layout. Derivatives
    flow to b and (through the factor) to A."""
    f = c_and_a
    if not isinstance(f, CholeskyFactor):
        raise TypeError("jaxmg.cho_solve takes the CholeskyFactor that jaxmg.cho_factor returns")
    b = factors._as_matrix(b, f.layout)
    return _cho_solve(f, b, b_sharded=factors.is_row_sharded(b, f.layout.placement))


def _cho_solve_core(f: CholeskyFactor, b, b_sharded: bool):
    plain = _no_grad_factor(f)

    def solve(_, r):
        return factors.cho_solve(plain, r, b_sharded)

    if f.a is None:
        return solve(None, b)
    matvec = _matvec(_keep_rows_sharded(f.a, f.layout), f.layout, b)
    if jnp.iscomplexobj(b):
        transpose_solve = lambda _, r: jnp.conj(solve(None, jnp.conj(r)))  # noqa: E731
        return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)
    return jax.lax.custom_linear_solve(matvec, b, solve, symmetric=True)


def _solve_pos_core(a, b, layout: Layout, b_sharded: bool, with_info: bool = True):
    f = factors.cholesky(a, layout)
    x = _cho_solve_core(f, b, b_sharded)
    # Without info, XLA drops the work that computes it (the "jax" engine's NaN scan).
    return (x, f.info) if with_info else (x, None)


# One compiled program per call site and shapes: an eager call costs one dispatch.
_cho_solve = jax.jit(_cho_solve_core, static_argnames=("b_sharded",))
solve_pos = jax.jit(_solve_pos_core, static_argnames=("layout", "b_sharded", "with_info"))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _spd_logdet(layout, a, factor, info):
    return factors.cholesky_logdet(factor, info, layout=layout)


@_spd_logdet.defjvp
def _spd_logdet_jvp(layout, primals, tangents):
    a, factor, info = primals
    da = dist.constrain_result(tangents[0], layout.placement, layout.row_spec)
    y = _spd_logdet(layout, a, factor, info)
    # The inverse through the differentiable solve, so derivatives of this
    # rule (second order) are right too.
    eye, sharded = _eye(layout, a.dtype)
    inverse = _cho_solve_core(CholeskyFactor(factor, a, info, layout), eye, sharded)
    # d log det A = tr(A^-1 dA) = sum((A^-1)^T * dA), and (A^-1)^T = conj(A^-1).
    return y, jnp.real(jnp.sum(jnp.conj(inverse) * da))


def cho_logdet(c_and_a: CholeskyFactor):
    """log det A from :func:`cho_factor`'s result (real; NaN if A is not
    positive definite). Differentiable with respect to A."""
    f = c_and_a
    plain = _no_grad_factor(f)
    if f.a is None:
        return factors.cholesky_logdet(plain.factor, plain.info, layout=f.layout)
    return _spd_logdet(f.layout, f.a, plain.factor, plain.info)


# --------------------------------------------------------------------------
# LU
# --------------------------------------------------------------------------


def lu_factor(
    a, *, tile_size=None, mesh=None, spec=None, backend="auto", donate=False, on_failure="nan"
) -> LUFactor:
    """LU factorisation with partial pivoting, kept sharded in solver layout
    for :func:`lu_solve` and :func:`slogdet`. Arguments as for :func:`cho_factor`."""
    _check_on_failure(on_failure)
    layout = _cached_layout(a, "getrf", tile_size, mesh, spec, backend, "lu_factor")
    f = factors.lu(a, layout, donate=donate)
    report(f.info, on_failure, _SINGULAR)
    return f


def _op(a, trans):
    return a if trans == 0 else (a.T if trans == 1 else jnp.conj(a).T)


def lu_solve(lu_and_piv: LUFactor, b, trans=0):
    """Solves op(A) X = B, op(A) = A, A^T or A^H for trans = 0, 1, 2, with the
    factor from :func:`lu_factor`. Differentiable with respect to b and A."""
    f = lu_and_piv
    if not isinstance(f, LUFactor):
        raise TypeError("jaxmg.lu_solve takes the LUFactor that jaxmg.lu_factor returns")
    if trans not in (0, 1, 2):
        raise ValueError(f"jaxmg: trans must be 0 (A), 1 (A^T) or 2 (A^H), got {trans!r}")
    b = factors._as_matrix(b, f.layout)
    return _lu_solve(f, b, trans=trans, b_sharded=factors.is_row_sharded(b, f.layout.placement))


def _lu_solve_core(f: LUFactor, b, trans: int, b_sharded: bool):
    plain = _no_grad_factor(f)
    op_factors = {}

    def with_op(r, t):
        # cuSOLVERMp's getrs has no transpose: the mp engine factors op(A)
        # itself, once per trace (XLA drops it when nothing needs it).
        if t == 0 or f.layout.engine != "mp" or f.a is None:
            return factors.lu_solve(plain, r, t, b_sharded)
        if t not in op_factors:
            op_a = jax.lax.stop_gradient(_op(f.a, t))
            op_factors[t] = _no_grad_factor(factors.lu(op_a, f.layout))
        return factors.lu_solve(op_factors[t], r, 0, b_sharded)

    def solve(_, r):
        return with_op(r, trans)

    def transpose_solve(_, r):
        # The transpose of op(A): A^T for A, A for A^T, conj(A) for A^H.
        if trans == 2:
            return jnp.conj(with_op(jnp.conj(r), 0))
        return with_op(r, 1 - trans)

    if f.a is None:
        return solve(None, b)
    a = _keep_rows_sharded(f.a, f.layout)
    matvec = _matvec(a, f.layout, b, trans)
    return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)


def _solve_gen_core(a, b, layout: Layout, b_sharded: bool):
    f = factors.lu(a, layout)
    return _lu_solve_core(f, b, 0, b_sharded), f.info


_lu_solve = jax.jit(_lu_solve_core, static_argnames=("trans", "b_sharded"))
_solve_gen = jax.jit(_solve_gen_core, static_argnames=("layout", "b_sharded"))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _lu_slogdet(layout, a, lu_, piv, info):
    return factors.lu_slogdet(lu_, piv, info, layout=layout)


@_lu_slogdet.defjvp
def _lu_slogdet_jvp(layout, primals, tangents):
    a, lu_, piv, info = primals
    da = dist.constrain_result(tangents[0], layout.placement, layout.row_spec)
    sign, logabsdet = _lu_slogdet(layout, a, lu_, piv, info)
    eye, sharded = _eye(layout, a.dtype)
    inverse_t = _lu_solve_core(LUFactor(lu_, piv, a, info, layout), eye, 1, sharded)
    trace = jnp.sum(inverse_t * da)  # tr(A^-1 dA)
    if jnp.iscomplexobj(a):
        return (sign, logabsdet), (sign * 1j * jnp.imag(trace), jnp.real(trace))
    return (sign, logabsdet), (jnp.zeros_like(sign), trace)


# --------------------------------------------------------------------------
# scipy / numpy-style entry points
# --------------------------------------------------------------------------


def solve(
    a, b, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto",
    on_failure="nan",
):
    """x with a @ x = b, like ``jax.scipy.linalg.solve``. assume_a: "pos"
    (symmetric/Hermitian positive definite: Cholesky) or "gen", "sym", "her"
    (LU with partial pivoting). x is NaN where the factorisation failed."""
    tile = dist.check_tile(tile_size)
    key = dist.eager_key((a, b), "solve", tile, mesh, spec, backend, assume_a, on_failure)
    plan = plans.find(key)
    if plan is not None:
        return plan(a, b)
    _check_assume_a(assume_a)
    _check_on_failure(on_failure)
    pos = assume_a == "pos"
    layout = _layout(a, "potrs" if pos else "getrf", tile_size, mesh, spec, backend, "solve")
    b = factors._as_matrix(b, layout)
    if jnp.dtype(b.dtype) != jnp.dtype(a.dtype):
        raise TypeError(
            f"jaxmg: b has dtype {jnp.dtype(b.dtype).name} but a has {jnp.dtype(a.dtype).name}; "
            "cast with b.astype(a.dtype)"
        )
    b_sharded = factors.is_row_sharded(b, layout.placement)
    if on_failure == "nan":
        if pos:
            plan = functools.partial(solve_pos_result, layout=layout, b_sharded=b_sharded)
        else:
            plan = functools.partial(_solve_gen_x, layout=layout, b_sharded=b_sharded)
        return plans.keep(key, plan)(a, b)
    if pos:
        x, info = solve_pos(a, b, layout=layout, b_sharded=b_sharded, with_info=True)
    else:
        x, info = _solve_gen(a, b, layout=layout, b_sharded=b_sharded)
    report(info, on_failure, _NOT_SPD if pos else _SINGULAR)
    return x


def solve_pos_result(a, b, *, layout, b_sharded, with_info=False):
    """x, or (x, info) with_info: what jaxmg.potrs and jaxmg.solve return."""
    x, info = solve_pos(a, b, layout=layout, b_sharded=b_sharded, with_info=with_info)
    return (x, info) if with_info else x


def _solve_gen_x(a, b, *, layout, b_sharded):
    return _solve_gen(a, b, layout=layout, b_sharded=b_sharded)[0]


def slogdet(a, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto"):
    """(sign, log|det a|) like ``jnp.linalg.slogdet``; "pos" uses Cholesky."""
    _check_assume_a(assume_a)
    if assume_a == "pos":
        f = cho_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
        logdet = cho_logdet(f)
        return SlogdetResult(jnp.ones((), a.dtype), logdet)
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
    plain = _no_grad_factor(f)
    return SlogdetResult(*_lu_slogdet(f.layout, a, plain.lu, plain.piv, plain.info))


def inv(a, *, assume_a="gen", tile_size=None, mesh=None, spec=None, backend="auto",
        on_failure="nan"):
    """a's inverse like ``jnp.linalg.inv``, row-sharded like a. "pos": the
    Cholesky-based inverse (jaxmg.potri); otherwise LU solves against I."""
    _check_assume_a(assume_a)
    if assume_a == "pos":
        return spd_inverse(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend,
                           on_failure=on_failure)
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend,
                  on_failure=on_failure)
    eye, sharded = _eye(f.layout, a.dtype)
    return _lu_solve(f, eye, trans=0, b_sharded=sharded)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _spd_inverse(config, a):
    placement, tile, engine = config
    return potri_mod.run(a, placement=placement, tile=tile, engine=engine)


@_spd_inverse.defjvp
def _spd_inverse_jvp(config, primals, tangents):
    (a,), (da,) = primals, tangents
    placement = config[0]
    y, info = _spd_inverse(config, a)
    rows = P(placement.axis, None)
    dy = -dist.matmul(dist.matmul(y, da, placement, rows), y, placement, rows)
    return (y, info), (dy, np.zeros(info.shape, dtype=jax.dtypes.float0))


def _spd_inverse_result(a, *, config, with_info):
    y, info = _spd_inverse(config, a)
    return (y, info) if with_info else y


# Eager calls of the routines below keep a plan (plans.py) that runs one of
# these programs: a single dispatch, as for potrs.
spd_inverse_program = jax.jit(_spd_inverse_result, static_argnames=("config", "with_info"))


def _reporting(program, on_failure: str, message: str):
    """A plan: the compiled program, then the on_failure action on its info (last output)."""

    def plan(a):
        *out, info = program(a)
        report(info, on_failure, message)
        return out[0] if len(out) == 1 else tuple(out)

    return plan


def spd_inverse(a, *, tile_size=None, mesh=None, spec=None, backend="auto", on_failure="nan"):
    _check_on_failure(on_failure)
    tile = dist.check_tile(tile_size)
    key = dist.eager_key((a,), "inv", tile, mesh, spec, backend, on_failure)

    def make():
        layout = _layout(a, "potri", tile_size, mesh, spec, backend, "inv")
        config = (layout.placement, tile, layout.engine)
        program = functools.partial(spd_inverse_program, config=config, with_info=True)
        return _reporting(program, on_failure, _NOT_SPD)

    return plans.find_or_make(key, make)(a)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _eigh(config, a):
    placement, tile, engine = config
    w, v, info = syevd_mod.run(a, placement=placement, tile=tile, vectors=True, engine=engine)
    return w, v, info


@_eigh.defjvp
def _eigh_jvp(config, primals, tangents):
    # The standard eigenvector derivative, as jnp.linalg.eigh differentiates
    # (degenerate eigenvalues give the same non-finite terms there).
    (a,), (da,) = primals, tangents
    placement, n = config[0], a.shape[0]
    rows, cols = P(placement.axis, None), P(None, placement.axis)
    w, v, info = _eigh(config, a)
    # A P("r", "c") input's tangent comes in 2-D blocks; the products want rows.
    da = _hermitian_part(dist.constrain_result(da, placement, rows), placement, n)
    da_v = dist.matmul(da, v, placement, cols)
    vdag_da_v = dist.matmul(jnp.conj(v).T, da_v, placement, rows)
    eye = jnp.eye(n, dtype=w.dtype)
    f = 1 / (eye + w[None, :] - w[:, None]) - eye
    # diag(V^H dA V) column by column: no gather across the sharded rows.
    dw = dist.constrain(jnp.real(jnp.sum(jnp.conj(v) * da_v, axis=0)), placement, P())
    dv = dist.matmul(v, f.astype(v.dtype) * vdag_da_v, placement, cols)
    return (w, v, info), (dw, dv, np.zeros(info.shape, dtype=jax.dtypes.float0))


def _syevd_result(a, *, config, vectors, with_info):
    """What jaxmg.syevd returns: (w, v) or w, then info if with_info."""
    if vectors:
        w, v, info = _eigh(config, a)
        out = (w, v)
    else:
        w, info = _eigvalsh(config, a)
        out = (w,)
    out = out + (info,) if with_info else out
    return out[0] if len(out) == 1 else out


syevd_program = jax.jit(_syevd_result, static_argnames=("config", "vectors", "with_info"))
_NO_CONVERGENCE = "jaxmg: the eigensolver did not converge"


def _eigen_plan(a, vectors: bool, tile_size, mesh, spec, backend, on_failure):
    _check_on_failure(on_failure)
    tile = dist.check_tile(tile_size)
    key = dist.eager_key((a,), "eigh", vectors, tile, mesh, spec, backend, on_failure)

    def make():
        layout = _layout(a, "syevd", tile_size, mesh, spec, backend, "eigh")
        config = (layout.placement, tile, layout.engine)
        program = functools.partial(syevd_program, config=config, vectors=vectors, with_info=True)
        return _reporting(program, on_failure, _NO_CONVERGENCE)

    return plans.find_or_make(key, make)


def eigh(a, *, tile_size=None, mesh=None, spec=None, backend="auto", on_failure="nan"):
    """(eigenvalues ascending, eigenvectors as columns) like
    ``jnp.linalg.eigh``; the vectors are column-sharded, ``P(None, axis)``."""
    return EighResult(*_eigen_plan(a, True, tile_size, mesh, spec, backend, on_failure)(a))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _eigvalsh(config, a):
    placement, tile, engine = config
    w, _, info = syevd_mod.run(a, placement=placement, tile=tile, vectors=False, engine=engine)
    return w, info


@_eigvalsh.defjvp
def _eigvalsh_jvp(config, primals, tangents):
    (w, _, info), (dw, _, _) = jax.jvp(functools.partial(_eigh, config), primals, tangents)
    return (w, info), (dw, np.zeros(info.shape, dtype=jax.dtypes.float0))


def eigvalsh(a, *, tile_size=None, mesh=None, spec=None, backend="auto", on_failure="nan"):
    """Eigenvalues in ascending order, like ``jnp.linalg.eigvalsh`` (the
    eigenvectors are computed only when differentiating)."""
    return _eigen_plan(a, False, tile_size, mesh, spec, backend, on_failure)(a)
