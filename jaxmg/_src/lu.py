"""LU with partial pivoting: general solves, log-determinants and inverses,
and the factor kept for reuse (sharded in the engine's layout).

Solves are differentiated through `lax.custom_linear_solve` (the tangent and
cotangent solves reuse the factor with op(A) = A^T or A^H); the
log-determinant has a JVP rule from tr(A^-1 dA)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jaxmg._src import arguments, dispatch, failures, operators, sharding
from jaxmg._src.engines import mp
from jaxmg._src.engines.base import Layout


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("lu", "piv", "a", "info"),
    meta_fields=("layout",),
)
@dataclasses.dataclass(frozen=True)
class LUFactor:
    """The result of :func:`jaxmg.lu_factor`; pass it to :func:`jaxmg.lu_solve`.

    lu, piv: the LU factors and pivots in the engine's layout (the "jaxmg"
    engine factors A^T with partial pivoting, kept block-cyclic; pivots
    sharded like its columns) or JAX's own (lu, piv). a: the matrix, kept for
    derivatives (None when donated). info: 0, or k > 0 when U(k, k) is
    exactly zero.
    """

    lu: jax.Array
    piv: jax.Array
    a: jax.Array | None
    info: jax.Array
    layout: Layout


TRANS = (0, 1, 2)


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


def lu_factor(a, *, tile_size=None, mesh=None, spec=None, backend="auto", donate=False,
              on_failure="nan") -> LUFactor:
    """LU factorisation with partial pivoting, kept sharded in the engine's
    layout for :func:`lu_solve` and :func:`slogdet`. Arguments as for
    :func:`jaxmg.cho_factor`."""
    failures.check_on_failure(on_failure)
    donate = arguments.check_flag(donate, "donate")
    layout = dispatch.cached_layout(a, "getrf", tile_size, mesh, spec, backend, "lu_factor")
    f = factorise(a, layout, donate=donate)
    failures.report(f.info, on_failure, failures.SINGULAR)
    return f


def lu_solve(lu_and_piv: LUFactor, b, trans=0):
    """Solves op(A) X = B, op(A) = A, A^T or A^H for trans = 0, 1, 2, with the
    factor from :func:`lu_factor`. Differentiable with respect to b and A."""
    f = lu_and_piv
    if not isinstance(f, LUFactor):
        raise TypeError("jaxmg.lu_solve takes the LUFactor that jaxmg.lu_factor returns")
    check_trans(trans)
    b = operators.as_rhs(b, f.layout.n)
    return _lu_solve(f, b, trans=int(trans),
                     b_sharded=operators.is_row_sharded(b, f.layout.placement))


def solve_gen(a, b, layout: Layout, b_sharded: bool):
    """(x, info) of a @ x = b by LU, differentiable."""
    return _solve_gen(a, b, layout=layout, b_sharded=b_sharded)


def solve_gen_x(a, b, *, layout, b_sharded):
    return _solve_gen(a, b, layout=layout, b_sharded=b_sharded)[0]


def slogdet(a, *, tile_size=None, mesh=None, spec=None, backend="auto"):
    """(sign, log|det a|) from an LU factorisation, differentiable."""
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
    plain = _no_grad_factor(f)
    return _lu_slogdet(f.layout, a, plain.lu, plain.piv, plain.info)


def inv(a, *, tile_size=None, mesh=None, spec=None, backend="auto", on_failure="nan"):
    """a's inverse by LU solves against the identity, row-sharded like a."""
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend,
                  on_failure=on_failure)
    eye, sharded = operators.eye(f.layout, a.dtype)
    return _lu_solve(f, eye, trans=0, b_sharded=sharded)


def check_trans(trans):
    if isinstance(trans, bool) or trans not in TRANS or not isinstance(trans, (int, jnp.integer)):
        raise ValueError(f"jaxmg: trans must be 0 (A), 1 (A^T) or 2 (A^H), got {trans!r}")


# --------------------------------------------------------------------------
# The factor and solves against it (not differentiated: see below)
# --------------------------------------------------------------------------


def _no_grad(a):
    return jax.lax.stop_gradient(a) if isinstance(a, jax.core.Tracer) else a


def _lu_impl(a, *, layout: Layout):
    return layout.engine.lu(a, layout)


_lu = jax.jit(_lu_impl, static_argnames=("layout",))
_lu_donating = jax.jit(_lu_impl, static_argnames=("layout",), donate_argnums=0)


def factorise(a, layout: Layout, *, donate=False) -> LUFactor:
    lu_, piv, info = (_lu_donating if donate else _lu)(_no_grad(a), layout=layout)
    return LUFactor(lu_, piv, None if donate else a, info, layout)


@functools.partial(jax.jit, static_argnames=("layout", "b_sharded", "trans"))
def _solve_with_factor(lu_, piv, info, b, *, layout: Layout, b_sharded: bool, trans: int):
    return layout.engine.lu_solve(lu_, piv, info, b, layout, b_sharded, trans)


def solve_with_factor(f: LUFactor, b, trans: int = 0, b_sharded=None):
    """X with op(A) X = B, op = A, A^T, A^H for trans 0, 1, 2 (no derivatives)."""
    check_trans(trans)
    b = operators.as_rhs(b, f.layout.n)
    b2 = b[:, None] if b.ndim == 1 else b
    if b_sharded is None:
        b_sharded = operators.is_row_sharded(b, f.layout.placement)
    x = _solve_with_factor(f.lu, f.piv, f.info, b2, layout=f.layout, b_sharded=bool(b_sharded),
                           trans=trans)
    return x[:, 0] if b.ndim == 1 else x


@functools.partial(jax.jit, static_argnames=("layout",))
def lu_slogdet(lu_, piv, info, *, layout: Layout):
    return layout.engine.lu_slogdet(lu_, piv, info, layout)


# --------------------------------------------------------------------------
# Derivative rules
# --------------------------------------------------------------------------


def _no_grad_factor(f: LUFactor) -> LUFactor:
    return LUFactor(
        jax.lax.stop_gradient(f.lu), jax.lax.stop_gradient(f.piv), None,
        jax.lax.stop_gradient(f.info), f.layout,
    )


def _lu_solve_core(f: LUFactor, b, trans: int, b_sharded: bool):
    plain = _no_grad_factor(f)
    op_factors = {}

    def with_op(r, t):
        # cuSOLVERMp's getrs has no transpose: the mp engine factors op(A)
        # itself, once per trace (XLA drops it when nothing needs it).
        if t == 0 or f.layout.engine is not mp.ENGINE or f.a is None:
            return solve_with_factor(plain, r, t, b_sharded)
        if t not in op_factors:
            op_a = jax.lax.stop_gradient(operators.op(f.a, t))
            op_factors[t] = _no_grad_factor(factorise(op_a, f.layout))
        return solve_with_factor(op_factors[t], r, 0, b_sharded)

    def solve(_, r):
        return with_op(r, trans)

    def transpose_solve(_, r):
        # The transpose of op(A): A^T for A, A for A^T, conj(A) for A^H.
        if trans == 2:
            return jnp.conj(with_op(jnp.conj(r), 0))
        return with_op(r, 1 - trans)

    if f.a is None:
        return solve(None, b)
    a = operators.keep_rows_sharded(f.a, f.layout)
    matvec = operators.matvec(a, f.layout, b, trans)
    return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)


def _solve_gen_core(a, b, layout: Layout, b_sharded: bool):
    f = factorise(a, layout)
    return _lu_solve_core(f, b, 0, b_sharded), f.info


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _lu_slogdet(layout, a, lu_, piv, info):
    return lu_slogdet(lu_, piv, info, layout=layout)


@_lu_slogdet.defjvp
def _lu_slogdet_jvp(layout, primals, tangents):
    a, lu_, piv, info = primals
    da = sharding.constrain_result(tangents[0], layout.placement, layout.row_spec)
    sign, logabsdet = _lu_slogdet(layout, a, lu_, piv, info)
    eye, sharded = operators.eye(layout, a.dtype)
    inverse_t = _lu_solve_core(LUFactor(lu_, piv, a, info, layout), eye, 1, sharded)
    trace = jnp.sum(inverse_t * da)  # tr(A^-1 dA)
    if jnp.iscomplexobj(a):
        return (sign, logabsdet), (sign * 1j * jnp.imag(trace), jnp.real(trace))
    return (sign, logabsdet), (jnp.zeros_like(sign), trace)


# --------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------

_lu_solve = jax.jit(_lu_solve_core, static_argnames=("trans", "b_sharded"))
_solve_gen = jax.jit(_solve_gen_core, static_argnames=("layout", "b_sharded"))
