"""Eigenvalues and eigenvectors of symmetric/Hermitian matrices: the
LAPACK-named syevd and the jnp.linalg-style eigh and eigvalsh, with the
standard eigenvector derivative; the generalized problem (eigh's b) through
b's Cholesky factor."""

from __future__ import annotations

import functools
import typing

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import (
    arguments,
    batching,
    cholesky,
    dispatch,
    failures,
    numpy_rules,
    peer_calls,
    plans,
    sharding,
    triangular,
)
from jaxmg._src.eager import one_program, returns_ready_on_cpus
from jaxmg._src.engines.base import Layout
from jaxmg._src.placement import (
    BATCH_ELEMENT,
    beside,
    check_square,
    eager_key,
    resolve_placement,
    spans_processes,
)


class EighResult(typing.NamedTuple):
    eigenvalues: jax.Array
    eigenvectors: jax.Array


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


@returns_ready_on_cpus
@peer_calls.accepts_peer_calls(arrays=1)
def syevd(a, *, compute_vectors=True, tile_size=None, mesh=None, spec=None, backend="auto",
          return_info=False, donate=False):
    """Eigendecomposition ``a = V diag(w) V^H`` of a symmetric (Hermitian) matrix.

    Args:
      a: (N, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        only one triangle is read (the upper one in row-major terms).
      compute_vectors: also compute the eigenvectors.
      tile_size, mesh, spec, backend, donate: as for :func:`jaxmg.potrs`.
      return_info: also return LAPACK's info (0 on success).

    Returns:
      w: (N,) real eigenvalues in ascending order, replicated.
      v: (N, N) eigenvectors as columns (``v[:, i]`` belongs to ``w[i]``),
        sharded by columns, ``P(None, axis)``: each device holds a block of
        eigenvectors. Only when ``compute_vectors``.
      info (int32 scalar) last, if ``return_info``. On failure w and v are NaN.

    JAXMg 0.0.8's call form, ``syevd(a, T_A, mesh, in_specs,
    return_eigenvectors=True, return_status=False, pad=True)``, runs too, as
    for :func:`jaxmg.potrs` (return_eigenvectors is compute_vectors).
    """
    tile = arguments.check_tile(tile_size)
    vectors = arguments.check_flag(compute_vectors, "compute_vectors")
    return_info = arguments.check_flag(return_info, "return_info")
    donate = arguments.check_donate(donate, a)
    key = eager_key((a,), "syevd", vectors, tile, mesh, spec, backend, return_info, donate)
    plan = plans.find(key)
    if plan is not None:
        return plan(a)
    arguments.check_rank2(a, "a")
    arguments.check_dtype(a, "a", "eigh")
    placement = resolve_placement(a, mesh, spec, "a", row_blocks=True)
    n = check_square(a, placement, "a")
    if placement.manual:
        engine = dispatch.choose("syevd", n, placement, backend, a.dtype.itemsize)
        w, v, info = engine.syevd_blocks(a, placement, tile, vectors)
    elif donate:
        w, v, info = _syevd_donating(a, layout=dispatch.layout("syevd", n, placement, tile, backend,
                                                               a.dtype.itemsize),
                                     vectors=vectors)
    else:
        layout = dispatch.layout("syevd", n, placement, tile, backend, a.dtype.itemsize)
        plan = functools.partial(syevd_program, layout=layout, vectors=vectors,
                                 with_info=return_info)
        return plans.keep(key, plan)(a)
    out = (w, v) if vectors else (w,)
    out = out + (info,) if return_info else out
    return out[0] if len(out) == 1 else out


UPLOS = (None, "L", "U")


@returns_ready_on_cpus
def eigh(a, UPLO=None, symmetrize_input=True, *, lower=True, eigvals_only=False,
         b=None, overwrite_a=False, overwrite_b=False, turbo=True, eigvals=None, type=1,
         check_finite=True, tile_size=None, mesh=None, spec=None, backend="auto",
         on_failure="nan"):
    """(eigenvalues ascending, eigenvectors as columns) like ``jnp.linalg.eigh``;
    the vectors are column-sharded, ``P(None, axis)``.

    UPLO: the triangle read when not symmetrizing, "L" or "U" (None: as
    `lower` says, the lower one by default). symmetrize_input: use
    (a + a^H) / 2 (as JAX does by default), so both triangles count.
    lower, eigvals_only: jax.scipy.linalg.eigh's names (eigvals_only: the
    eigenvalues alone). a may have leading batch dimensions.
    b, type: the generalized problem, as jax.scipy.linalg.eigh solves it
    (jax 0.12): with b Hermitian positive definite, type 1 is a v = w b v,
    2 is a b v = w v and 3 is b a v = w v; v^H b v = I (types 1 and 2) or
    v^H b^-1 v = I (type 3). Through b = L L^H (:func:`jaxmg.cholesky`), the
    standard problem of L^-1 a L^-H (type 1) or L^H a L, and the back
    transform, all on a's devices; a and b are symmetrized, and a b that is
    not positive definite gives NaN. b and a broadcast over batch dimensions.
    eigvals (a subset) raises NotImplementedError, as in JAX.
    overwrite_a, overwrite_b, turbo, check_finite: accepted and ignored.
    """
    del overwrite_a, overwrite_b, turbo, check_finite
    _check_problem(b, eigvals, type, UPLO, symmetrize_input)
    lower = arguments.check_flag(lower, "lower")
    if b is not None:
        # b on a's devices (the entry put an unplaced a on b's): the steps
        # between them (b's factor, its solves with a) would else meet on two.
        b = beside(b, a)
        return _generalized_problem(a, b, type, not arguments.check_flag(eigvals_only,
                                                                         "eigvals_only"),
                                    lower, tile_size=tile_size, mesh=mesh, spec=spec,
                                    backend=backend, on_failure=on_failure)
    if arguments.check_flag(eigvals_only, "eigvals_only"):
        return eigvalsh(a, UPLO if UPLO is not None else ("L" if lower else "U"),
                        symmetrize_input=symmetrize_input, tile_size=tile_size, mesh=mesh,
                        spec=spec, backend=backend, on_failure=on_failure)
    uplo = UPLO if UPLO is not None else ("L" if lower else "U")
    return EighResult(*_eigen(a, True, uplo, symmetrize_input, tile_size, mesh, spec, backend,
                              on_failure))


def _check_problem(b, eigvals, type_, uplo, symmetrize_input):
    if eigvals is not None:
        raise NotImplementedError(
            "jaxmg: eigh has no eigvals (subset) argument: take w[lo:hi + 1] and v[:, lo:hi + 1] "
            "of the full result"
        )
    if isinstance(type_, bool) or type_ not in (1, 2, 3):
        raise ValueError(f"jaxmg: eigh's type must be 1, 2, or 3, got type={type_!r}")
    if b is not None and (uplo is not None
                          or not arguments.check_flag(symmetrize_input, "symmetrize_input")):
        raise ValueError(
            "jaxmg: with b, eigh reads a and b whole, (x + x^H) / 2, as jax.scipy.linalg.eigh "
            "does: UPLO and symmetrize_input=False apply to the standard problem only"
        )


@one_program("kind", "vectors", "lower", "tile_size", "on_failure",
             when=lambda named: named["on_failure"] == "nan")
def _generalized_problem(a, b, kind, vectors, lower, *, tile_size, mesh, spec, backend,
                         on_failure):
    return _generalized(a, b, kind, vectors, lower, dict(tile_size=tile_size, mesh=mesh,
                                                         spec=spec, backend=backend,
                                                         on_failure=on_failure))


def _generalized(a, b, kind: int, vectors: bool, lower: bool, options: dict):
    """eigh's generalized problem of type `kind` (see :func:`eigh`)."""
    a, b = arguments.promote((a, "a"), (b, "b"))
    for x, name in ((a, "a"), (b, "b")):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"jaxmg: argument {name} to eigh must have shape [..., n, n] (a "
                             f"square matrix, or a batch of them), got {x.shape}")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"jaxmg: eigh's a and b must have the same order N, got shapes "
                         f"{a.shape} and {b.shape}")
    if a.ndim > 2 or b.ndim > 2:
        fn = functools.partial(_generalized, kind=kind, vectors=vectors, lower=lower,
                               options=options)
        return batching.broadcast_map(fn, (a, b), (2, 2))
    place = {k: options[k] for k in ("mesh", "spec")}
    where = sharding.rows_placement(a, **place) or sharding.rows_placement(b, **place)
    mm = sharding.row_products(where)
    # Adjoints laid out by rows again, as the solves and products take them.
    adjoint = functools.partial(sharding.adjoint_rows, where=where)
    tri = functools.partial(triangular.solve_triangular, lower=True, **place)
    l_ = cholesky.cholesky(b, lower=True, symmetrize_input=True, tile_size=options["tile_size"],
                           backend=options["backend"], **place)
    a = sharding.hermitian_part(a, where)
    # Type 1: L^-1 a L^-H = L^-1 (L^-1 a)^H for Hermitian a; else L^H a L.
    c = tri(l_, adjoint(tri(l_, a))) if kind == 1 else mm(mm(adjoint(l_), a), l_)
    result = eigh(c, lower=lower, eigvals_only=not vectors, **options)
    if not vectors:
        return result
    w, y = result
    if where is not None:
        y = sharding.constrain_result(y, where, P(where.axis, None))
    v = mm(l_, y) if kind == 3 else tri(l_, y, trans=2)
    if where is not None:  # by columns, as the standard problem's
        v = sharding.constrain_result(v, where, P(None, where.axis))
    return EighResult(w, v)


@returns_ready_on_cpus
def eigvalsh(a, UPLO="L", *, symmetrize_input=True, tile_size=None, mesh=None, spec=None,
             backend="auto", on_failure="nan"):
    """Eigenvalues in ascending order, like ``jnp.linalg.eigvalsh`` (the
    eigenvectors are computed only when differentiating). UPLO and
    symmetrize_input as for :func:`eigh`."""
    return _eigen(a, False, UPLO, symmetrize_input, tile_size, mesh, spec, backend, on_failure)


def _eigen(a, vectors, uplo, symmetrize_input, tile_size, mesh, spec, backend, on_failure):
    if uplo not in UPLOS:
        raise ValueError(f"jaxmg: UPLO must be 'L' or 'U', got {uplo!r}")
    symmetrize_input = arguments.check_flag(symmetrize_input, "symmetrize_input")
    a = arguments.inexact(a, "a")
    if batching.batched(a):
        fn = lambda x: _eigen(x, vectors, uplo, symmetrize_input, tile_size, mesh, spec,  # noqa: E731
                              backend, on_failure)
        return batching.broadcast_map(fn, (a,), (2,))
    read = "both" if symmetrize_input else ("U" if uplo == "U" else "L")
    return _plan(a, vectors, read, tile_size, mesh, spec, backend, on_failure)(a)


def _plan(a, vectors: bool, read: str, tile_size, mesh, spec, backend, on_failure):
    failures.check_on_failure(on_failure)
    tile = arguments.check_tile(tile_size)
    key = eager_key((a,), "eigh", vectors, read, tile, mesh, spec, backend, on_failure)

    def make():
        layout = dispatch.matrix_layout(a, "syevd", tile_size, mesh, spec, backend)
        read_ = _read_across_processes(read, layout)
        program = functools.partial(eigen_program, layout=layout, vectors=vectors, read=read_)
        return failures.reporting(program, on_failure, failures.NO_CONVERGENCE)

    return plans.find_or_make(key, make)


def _read_across_processes(read: str, layout: Layout) -> str:
    """Over several processes jaxmg's engine reads the upper triangle as the
    rows hold it: the other triangle (UPLO="L", or the symmetrised matrix)
    needs a transpose, an XLA all-to-all, which ranks sharing a GPU cannot
    run and which would not end with jaxmg's faults. symmetrize_input reads
    the upper triangle there (the same for a Hermitian a); UPLO="L" alone is
    refused."""
    if layout.engine.name != "jaxmg" or not spans_processes(layout.placement):
        return read
    if read == "L":
        raise ValueError(
            "jaxmg: over several processes eigh reads a's upper triangle (reading the lower "
            "one needs a transpose between the processes): pass UPLO='U', or "
            "symmetrize_input=True for a Hermitian a"
        )
    return "U"


def _read(a, layout: Layout, read: str):
    """The matrix whose upper triangle (the one the engines read) holds what
    `read` asks for: a's upper triangle, its lower one, or (a + a^H) / 2."""
    if read == "U" or layout.n == 0:
        return a
    if layout.placement is BATCH_ELEMENT:  # JAX's solver takes it whole
        a = sharding.whole_element(a)
    adjoint = jnp.conj(a).T
    if sharding.is_explicit(layout.placement):  # laid out as a is (rows, or 2-D blocks)
        adjoint = jax.sharding.reshard(adjoint, jax.typeof(a).sharding)
    else:
        adjoint = sharding.constrain_result(adjoint, layout.placement, layout.row_spec)
    return adjoint if read == "L" else (a + adjoint) / 2


# --------------------------------------------------------------------------
# The engine's decomposition (not differentiated)
# --------------------------------------------------------------------------


def _syevd_impl(a, *, layout: Layout, vectors: bool):
    w, v, info = layout.engine.syevd(a, layout, vectors)
    info = layout.engine.finite_info(a, info, layout, upper=True)
    v = failures.nan_where_failed(v, info) if vectors else v
    return failures.nan_where_failed(w, info), v, info


run = jax.jit(_syevd_impl, static_argnames=("layout", "vectors"))
_syevd_donating = jax.jit(_syevd_impl, static_argnames=("layout", "vectors"), donate_argnums=0)


# --------------------------------------------------------------------------
# Derivative rules
# --------------------------------------------------------------------------


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _eigh(layout, a):
    return run(a, layout=layout, vectors=True)


@_eigh.defjvp
@numpy_rules.default_rules
def _eigh_jvp(layout, primals, tangents):
    # The standard eigenvector derivative, as jnp.linalg.eigh differentiates
    # (degenerate eigenvalues give the same non-finite terms there).
    (a,), (da,) = primals, tangents
    placement, n = layout.placement, a.shape[0]
    rows, cols = P(placement.axis, None), P(None, placement.axis)
    w, v, info = _eigh(layout, a)
    # A P("r", "c") input's tangent comes in 2-D blocks; the products want rows.
    da = sharding.hermitian_part(sharding.constrain_result(da, placement, rows), placement)
    da_v = sharding.matmul(da, v, placement, cols)
    vdag_da_v = sharding.matmul(jnp.conj(v).T, da_v, placement, rows)
    eye = jnp.eye(n, dtype=w.dtype)
    f = 1 / (eye + w[None, :] - w[:, None]) - eye
    # diag(V^H dA V) column by column: no gather across the sharded rows.
    dw = sharding.constrain(jnp.real(jnp.sum(jnp.conj(v) * da_v, axis=0)), placement, P())
    dv = sharding.matmul(v, f.astype(v.dtype) * vdag_da_v, placement, cols)
    return (w, v, info), (dw, dv, jax.custom_derivatives.zero_from_primal(info))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _eigvalsh(layout, a):
    w, _, info = run(a, layout=layout, vectors=False)
    return w, info


@_eigvalsh.defjvp
@numpy_rules.default_rules
def _eigvalsh_jvp(layout, primals, tangents):
    (w, _, info), (dw, _, _) = jax.jvp(functools.partial(_eigh, layout), primals, tangents)
    return (w, info), (dw, jax.custom_derivatives.zero_from_primal(info))


def _syevd_result(a, *, layout, vectors, with_info):
    """What jaxmg.syevd returns: (w, v) or w, then info if with_info."""
    if vectors:
        w, v, info = _eigh(layout, a)
        out = (w, v)
    else:
        w, info = _eigvalsh(layout, a)
        out = (w,)
    out = out + (info,) if with_info else out
    return out[0] if len(out) == 1 else out


def _eigen_result(a, *, layout, vectors, read):
    return _syevd_result(_read(a, layout, read), layout=layout, vectors=vectors, with_info=True)


# --------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------

syevd_program = jax.jit(_syevd_result, static_argnames=("layout", "vectors", "with_info"))
eigen_program = jax.jit(_eigen_result, static_argnames=("layout", "vectors", "read"))
