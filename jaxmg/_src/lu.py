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
from jax.sharding import PartitionSpec as P

import numpy as np

from jaxmg._src import (
    arguments,
    batching,
    dispatch,
    factor_pytree,
    failures,
    numpy_rules,
    operators,
    peer_calls,
    sharding,
    triangular,
)
from jaxmg._src.eager import onto_mesh, returns_ready_on_cpus
from jaxmg._src.mixed import api as mixed_api
from jaxmg._src.engines import mp
from jaxmg._src.engines.base import Layout
from jaxmg._src.placement import (BATCH_ELEMENT, factor_on_devices, resolve_placement,
                                   whole_on_its_devices)


@factor_pytree.register(data_fields=("lu", "piv", "a", "info"), meta_fields=("layout",))
@dataclasses.dataclass(frozen=True)
class LUFactor:
    """The result of :func:`jaxmg.lu_factor`; pass it to :func:`jaxmg.lu_solve`.

    lu, piv: the LU factors and pivots in the engine's layout (the "jaxmg"
    engine factors A^T with partial pivoting, kept block-cyclic; pivots
    sharded like its columns) or JAX's own (lu, piv). a: the matrix, kept for
    derivatives (None when donated). info: 0, or k > 0 when U(k, k) is
    exactly zero.

    A sequence of two as jax.scipy's ``(lu, piv)``: it unpacks, indexes and
    has len 2 like that tuple (JAX's tests compare results by len and item).
    """

    lu: jax.Array
    piv: jax.Array
    a: jax.Array | None
    info: jax.Array
    layout: Layout

    @property
    def dtype(self):
        """A's dtype, which solves promote b to (as jax.scipy's lu)."""
        return self.lu.dtype

    def on_devices(self) -> "LUFactor":
        """This factor, its arrays back on its devices if they left them (the
        pivots' rows at the same axis as lu's)."""
        return factor_on_devices(self, self.layout.placement, "lu", ("lu", "piv", "a"))

    @numpy_rules.default_rules
    def __iter__(self):
        """Unpacks as jax.scipy's ``(lu, piv)``: P A = L U with L (unit
        diagonal) and U in one (N, N) matrix, rows sharded, and the 0-based
        row interchanges."""
        self = self.on_devices()
        if self.a is None:  # donated: no derivatives
            convert = lambda a, lu_, piv: _matrices(lu_, piv, layout=self.layout)  # noqa: E731
        else:
            convert = functools.partial(_jax_form, self.layout)
        for _ in range(self.lu.ndim - 2):  # a factor made under vmap, unpacked outside
            convert = jax.vmap(convert)
        return iter(convert(self.a, self.lu, self.piv))

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return tuple(self)[index]


TRANS = (0, 1, 2)


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


@returns_ready_on_cpus
def lu_factor(a, overwrite_a=False, check_finite=True, *, tile_size=None, mesh=None, spec=None,
              backend="auto", donate=False, on_failure="nan", precision="highest"):
    """LU factorisation with partial pivoting, kept sharded in the engine's
    layout for :func:`lu_solve` and :func:`slogdet`; it unpacks as
    jax.scipy's ``(lu, piv)``. precision="mixed": a MixedFactor (BF16
    tensor-core LU and a) that lu_solve refines against a. Arguments (and
    leading batch dimensions) as for :func:`jaxmg.cho_factor`. A rectangular
    (M, N) a gives jax.scipy's ``(lu, piv)`` tuple itself, from JAX's LU of
    the whole matrix on one device (jaxmg's distributed engines factor square
    matrices)."""
    del overwrite_a, check_finite
    failures.check_on_failure(on_failure)
    a = arguments.inexact(a, "a")
    mixed = mixed_api.check_precision(precision)
    if mixed:
        mixed_api.check_options(tile_size=tile_size, backend=backend, donate=donate)
    else:
        donate = arguments.check_donate(donate, a)
    if batching.batched(a):
        if mixed:
            mixed_api.check_batch((a, "a", a.ndim - 2))
        fn = functools.partial(lu_factor, tile_size=tile_size, mesh=mesh, spec=spec,
                               backend=backend, on_failure=on_failure, precision=precision)
        return batching.broadcast_map(fn, (a,), (2,))
    if mixed:
        return mixed_api.factor("general", a, mesh=mesh, spec=spec, on_failure=on_failure)
    arguments.check_rank2(a, "a", square=False)
    if a.shape[0] != a.shape[1]:
        return _rectangular_lu_factor(a, placement=_whole_matrix(a, mesh, spec))
    layout = dispatch.cached_layout(a, "getrf", tile_size, mesh, spec, backend)
    f = factorise(a, layout, donate=donate)
    failures.report(f.info, on_failure, failures.SINGULAR)
    return f


def _solve_matrix(a, b, *, tile_size=None, mesh=None, spec=None, return_info=False, donate=False):
    """x with a @ x = b from lu_factor and lu_solve: JAXMg's lu_solve(a, b, T_A)."""
    a, b = peer_calls.check_arrays("lu_solve", a, b)
    return_info = arguments.check_flag(return_info, "return_status")
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, donate=donate)
    x = lu_solve(f, b)
    return (x, f.info) if return_info else x


@returns_ready_on_cpus
@peer_calls.accepts_matrix_form(_solve_matrix)
def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solves op(A) X = B, op(A) = A, A^T or A^H for trans = 0, 1, 2, like
    jax.scipy.linalg.lu_solve.

    lu_and_piv: the LUFactor from :func:`lu_factor` (the factor stays in the
    engine's layout), or jax.scipy's ``(lu, piv)`` pair (solved by
    distributed triangular solves). Differentiable with respect to b and A.

    Called as JAXMg's ``lu_solve(a, b, T_A, mesh=None, matrix_specs=None, *,
    return_status=False, donate=False)``, with the matrix a itself first, it
    solves a @ x = b (lu_factor with tile_size=T_A, then lu_solve); status
    is jaxmg's info (0, or k > 0 where U(k, k) is exactly zero).
    """
    del overwrite_b, check_finite
    f = lu_and_piv
    trans = check_trans(trans)
    if isinstance(f, (mixed_api.MixedFactor, LUFactor)):
        f = f.on_devices()
        b, dtype = arguments.as_array(b, "b"), f.dtype
        b = arguments.varying_alike(b, *jax.tree.leaves(f))[0]
        if b.dtype != dtype:
            return operators.solve_promoted(lambda r: lu_solve(f, r, trans), b, dtype)
        mixed = isinstance(f, mixed_api.MixedFactor)
        nd = (f.a if mixed else f.lu).ndim - 2
        if nd or b.ndim > 2:  # a factor of a batch, or a batch of b
            fn = lambda f, b: lu_solve(f, b, trans)  # noqa: E731
            n = f.n if mixed else f.layout.n
            return batching.factor_solve_map(fn, f, b, nd, n, "lu_solve")
        if mixed:
            return mixed_api.solve_with(f, b, trans, kind="general")[0]
        if sharding.is_explicit(f.layout.placement) and whole_on_its_devices(b):
            raise operators.FactorUnderShardedVmap("lu_solve", "lu_and_piv")
        b = operators.as_rhs(onto_mesh(b, f.layout.placement.mesh), f.layout.n)
        return _lu_solve(f, b, trans=trans,
                         b_sharded=operators.is_row_sharded(b, f.layout.placement))
    if not isinstance(f, (tuple, list)) or len(f) != 2:
        raise TypeError(
            "jaxmg.lu_solve takes the LUFactor that jaxmg.lu_factor returns, or a pair "
            f"(lu, piv) as jax.scipy.linalg.lu_factor returns; got {type(f).__name__}"
        )
    lu_, b = arguments.promote((f[0], "lu"), (b, "b"))
    piv = arguments.as_array(f[1], "piv")
    if not jnp.issubdtype(piv.dtype, jnp.integer):
        raise TypeError(f"jaxmg: piv must hold integers (lu_factor's pivot rows), got {piv.dtype}")
    if lu_.ndim > 2 or b.ndim > 2:
        fn = lambda lu_, piv, b: lu_solve((lu_, piv), b, trans)  # noqa: E731
        vector = batching.vector_rhs(b, lu_.ndim, lu_.shape[-1], "lu_solve")
        return batching.broadcast_map(fn, (lu_, piv, b), (2, 1, 1 if vector else 2))
    arguments.check_rank2(lu_, "lu")
    arguments.check_square_matrices(lu_, "lu_solve", "lu")
    b = operators.as_rhs(b, lu_.shape[0])
    arguments.check_same_dtype(b, lu_.dtype, other="lu")
    placement = resolve_placement(lu_, None, None, "lu", others=(b,))
    return _solve_with_matrices(lu_, piv, b, placement, trans)


@returns_ready_on_cpus
def lu(a, permute_l=False, overwrite_a=False, check_finite=True, *, tile_size=None, mesh=None,
       spec=None, backend="auto"):
    """(p, l, u) with a = p @ l @ u, like jax.scipy.linalg.lu (permute_l:
    (p @ l, u)); l has a unit diagonal, u is upper triangular, all (N, N)
    with rows sharded like a. Differentiable; a may have leading batch
    dimensions. A rectangular (M, N) a gives p (M, M), l (M, K), u (K, N),
    K = min(M, N), from JAX's LU of the whole matrix on one device (jaxmg's
    distributed engines factor square matrices)."""
    del overwrite_a, check_finite
    permute_l = arguments.check_flag(permute_l, "permute_l")
    a = arguments.inexact(a, "a")
    if batching.batched(a):
        fn = functools.partial(lu, permute_l=permute_l, tile_size=tile_size, mesh=mesh,
                               spec=spec, backend=backend)
        return batching.broadcast_map(fn, (a,), (2,))
    arguments.check_rank2(a, "a", square=False)
    if a.shape[0] != a.shape[1]:
        return _rectangular_lu(a, placement=_whole_matrix(a, mesh, spec),
                               permute_l=permute_l)
    layout = dispatch.cached_layout(a, "getrf", tile_size, mesh, spec, backend)
    p, l_, u = _plu(a, layout=layout)
    if permute_l:
        # p in l's dtype, as JAX's: a real p times a complex l is a promotion
        # that jax.numpy_dtype_promotion("strict") refuses.
        return sharding.matmul(p.astype(l_.dtype), l_, layout.placement, layout.row_spec), u
    return p, l_, u


def _whole_matrix(a, mesh, spec):
    """The placement of a rectangular a, which JAX's LU factors whole."""
    arguments.check_dtype(a, "a", "lu")
    return resolve_placement(a, mesh, spec, "a")


@functools.partial(jax.jit, static_argnames=("placement", "permute_l"))
def _rectangular_lu(a, *, placement, permute_l):
    return jax.scipy.linalg.lu(sharding.constrain(a, placement, P()), permute_l=permute_l)


@functools.partial(jax.jit, static_argnames=("placement",))
def _rectangular_lu_factor(a, *, placement):
    return jax.scipy.linalg.lu_factor(sharding.constrain(a, placement, P()))


def det(a, *, tile_size=None, mesh=None, spec=None, backend="auto"):
    """det a from an LU factorisation (see jaxmg.det)."""
    if whole_on_its_devices(a) or a.shape[-1] in (2, 3):
        # As slogdet; and JAX's closed forms for orders 2 and 3, exact for
        # integer entries.
        return jnp.linalg.det(sharding.whole_element(a))
    layout = dispatch.cached_layout(a, "getrf", tile_size, mesh, spec, backend)
    return _det(layout, a)


def solve_gen(a, b, layout: Layout, b_sharded: bool):
    """(x, info) of a @ x = b by LU, differentiable."""
    return _solve_gen(a, b, layout=layout, b_sharded=b_sharded)


def solve_gen_x(a, b, *, layout, b_sharded):
    return _solve_gen(a, b, layout=layout, b_sharded=b_sharded)[0]


def slogdet(a, *, tile_size=None, mesh=None, spec=None, backend="auto"):
    """(sign, log|det a|) from an LU factorisation, differentiable."""
    if whole_on_its_devices(a):
        # Each matrix lies on its devices, where JAX's solver runs anyway; and
        # vmap over a batch sharded on explicit mesh axes takes JAX's slogdet
        # but not this module's jitted programs (jax 0.10).
        return tuple(jnp.linalg.slogdet(sharding.whole_element(a)))
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
    plain = _no_grad_factor(f)
    return _slogdet_program(f.layout, a, plain.lu, plain.piv, plain.info)


def inv(a, *, tile_size=None, mesh=None, spec=None, backend="auto", on_failure="nan"):
    """a's inverse by LU solves against the identity, row-sharded like a."""
    if whole_on_its_devices(a):
        failures.check_on_failure(on_failure)
        x, info = _inverse_without_gathers(sharding.whole_element(a))
        failures.report(info, on_failure, failures.SINGULAR)
        return x
    failures.check_on_failure(on_failure)
    f = lu_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend)
    eye, sharded = operators.eye(f.layout, a)
    x = _lu_solve(f, eye, trans=0, b_sharded=sharded)
    # After the solves: JAX's checkify loses an error that a later shard_map
    # carries on Explicit mesh axes (jax 0.10 to 0.12).
    failures.report(f.info, on_failure, failures.SINGULAR)
    return x


def _inverse_without_gathers(a):
    """(a^-1, info) as U^-1 L^-1 P from P a = L U, P as a 0/1 matrix: for an
    element of a batch sharded on explicit mesh axes, where vmap refuses the
    row gather of an LU solve (jax.numpy.linalg.inv's too, jax 0.10)."""
    lu_, _, perm = jax.lax.linalg.lu(a)
    p = (perm[:, None] == jnp.arange(a.shape[0])[None, :]).astype(a.dtype)
    y = jax.lax.linalg.triangular_solve(lu_, p, left_side=True, lower=True, unit_diagonal=True)
    x = jax.lax.linalg.triangular_solve(lu_, y, left_side=True, lower=False)
    diagonal = jnp.diagonal(lu_)
    singular = jnp.any((diagonal == 0) | jnp.isnan(diagonal))
    return failures.nan_where(singular, x), singular.astype(jnp.int32)


def _solve_with_matrices(lu_, piv, b, placement, trans: int):
    """op(A) x = b from jax.scipy's (lu, piv) of A: P A = L U."""
    n = lu_.shape[0]
    # int32, as JAX's own lu_solve casts them (pivots made elsewhere may be int64).
    piv = sharding.constrain(piv.astype(jnp.int32), placement, P())
    perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)
    tri = functools.partial(triangular.triangular_solve, lu_, placement=placement)
    if trans == 0:
        y = tri(b[perm], lower=True, trans=0, unit_diagonal=True)
        return tri(y, lower=False, trans=0, unit_diagonal=False)
    # A^T = U^T L^T P: U^T z = b, L^T w = z, x = P^T w (A^H likewise, conjugated).
    z = tri(b, lower=False, trans=trans, unit_diagonal=False)
    w = tri(z, lower=True, trans=trans, unit_diagonal=True)
    return jnp.zeros_like(w).at[perm].set(w)


def check_trans(trans) -> int:
    """trans as 0, 1 or 2; like JAX, any integer-like of those values (True too)."""
    number = arguments.integer_or_none(trans)
    if number not in TRANS:
        raise ValueError(f"jaxmg: trans must be 0 (A), 1 (A^T) or 2 (A^H), got {trans!r}")
    return number


# --------------------------------------------------------------------------
# The factor and solves against it (not differentiated: see below)
# --------------------------------------------------------------------------


def _no_grad(a):
    return jax.lax.stop_gradient(a) if isinstance(a, jax.core.Tracer) else a


def _lu_impl(a, *, layout: Layout):
    lu_, piv, info = layout.engine.lu(a, layout)
    return lu_, piv, layout.engine.finite_info(a, info, layout)


_lu = jax.jit(_lu_impl, static_argnames=("layout",))
_lu_donating = jax.jit(_lu_impl, static_argnames=("layout",), donate_argnums=0)


def factorise(a, layout: Layout, *, donate=False) -> LUFactor:
    if layout.placement is BATCH_ELEMENT:  # JAX's solver takes it whole; so do the solves
        a = sharding.whole_element(a)
    lu_, piv, info = (_lu_donating if donate else _lu)(_no_grad(a), layout=layout)
    return LUFactor(lu_, piv, None if donate else a, info, layout)


@functools.partial(jax.jit, static_argnames=("layout", "b_sharded", "trans"))
def _solve_with_factor(lu_, piv, info, b, *, layout: Layout, b_sharded: bool, trans: int):
    return layout.engine.lu_solve(lu_, piv, info, b, layout, b_sharded, trans)


def solve_with_factor(f: LUFactor, b, trans: int = 0, b_sharded=None):
    """X with op(A) X = B, op = A, A^T, A^H for trans 0, 1, 2 (no derivatives)."""
    trans = check_trans(trans)
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


@functools.partial(jax.jit, static_argnames=("layout",))
def _matrices(lu_, piv, *, layout: Layout):
    return layout.engine.lu_matrices(lu_, piv, layout)


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
    if f.layout.placement is BATCH_ELEMENT:  # typed as the whole matrix its solves take
        b = sharding.whole_element(b)
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
        return operators.solve_without_matrix(b, solve, transpose_solve)
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
@numpy_rules.default_rules
def _lu_slogdet_jvp(layout, primals, tangents):
    a, lu_, piv, info = primals
    da = sharding.constrain_result(tangents[0], layout.placement, layout.row_spec)
    sign, logabsdet = _lu_slogdet(layout, a, lu_, piv, info)
    eye, sharded = operators.eye(layout, a)
    inverse_t = _lu_solve_core(LUFactor(lu_, piv, a, info, layout), eye, 1, sharded)
    trace = jnp.sum(inverse_t * da)  # tr(A^-1 dA)
    if jnp.iscomplexobj(a):
        phase = jnp.imag(trace)
        dsign = sign * jax.lax.complex(jnp.zeros_like(phase), phase)  # i Im(trace), no weak 1j
        return (sign, logabsdet), (dsign, jnp.real(trace))
    return (sign, logabsdet), (jnp.zeros_like(sign), trace)


# One program, as _det: its derivative rule, traced under an eager jvp,
# then runs where the operands' concrete mesh is known.
_slogdet_program = jax.jit(_lu_slogdet, static_argnums=(0,))


def _lu_tangent(lu_, piv, da, layout):
    """d(L + U - I) for P A = L U moved by dA: with X = L^-1 P dA U^-1 (a
    strictly lower plus an upper triangular part), dL = L tril(X, -1) and
    dU = triu(X) U."""
    placement, n = layout.placement, lu_.shape[0]
    l_ = jnp.tril(lu_, -1) + jnp.eye(n, dtype=lu_.dtype)
    u = jnp.triu(lu_)
    perm = jax.lax.linalg.lu_pivots_to_permutation(sharding.constrain(piv, placement, P()), n)
    pda = sharding.constrain_result(sharding.constrain(da, placement, P())[perm], placement,
                                    layout.row_spec)
    y = triangular.triangular_solve(l_, pda, placement, lower=True, trans=0, unit_diagonal=True)
    x_t = triangular.triangular_solve(u, jnp.swapaxes(y, 0, 1), placement, lower=False, trans=1,
                                      unit_diagonal=False)
    x = jnp.swapaxes(x_t, 0, 1)
    dl = sharding.matmul(l_, jnp.tril(x, -1), placement, layout.row_spec)
    du = sharding.matmul(jnp.triu(x), u, placement, layout.row_spec)
    return l_, u, dl, du


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _jax_form(layout, a, lu_, piv):
    return _matrices(lu_, piv, layout=layout)


@_jax_form.defjvp
@numpy_rules.default_rules
def _jax_form_jvp(layout, primals, tangents):
    a, lu_, piv = primals
    lu_j, piv_j = _jax_form(layout, a, lu_, piv)
    _, _, dl, du = _lu_tangent(lu_j, piv_j, tangents[0], layout)
    return (lu_j, piv_j), (dl + du, jax.custom_derivatives.zero_from_primal(piv_j))


def _permutation_matrix(piv, n, dtype, layout):
    """p with a = p @ l @ u, rows sharded: p[perm[i], i] = 1 (P = p^T)."""
    piv = sharding.constrain(piv, layout.placement, P())
    perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)
    rows = jnp.arange(n, dtype=perm.dtype)[:, None]
    p = (rows == perm[None, :]).astype(jnp.finfo(dtype).dtype)  # real, as jax.scipy's
    return sharding.constrain_result(p, layout.placement, layout.row_spec)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _plu_core(layout, a):
    f = factorise(a, layout)
    lu_, piv = _matrices(f.lu, f.piv, layout=layout)
    n = a.shape[0]
    l_ = jnp.tril(lu_, -1) + jnp.eye(n, dtype=lu_.dtype)
    u = jnp.triu(lu_)
    return _permutation_matrix(piv, n, a.dtype, layout), l_, u


@_plu_core.defjvp
@numpy_rules.default_rules
def _plu_jvp(layout, primals, tangents):
    # P A = L U: L^-1 P dA U^-1 = L^-1 dL + dU U^-1, a strictly lower plus an
    # upper triangular part.
    (a,), (da,) = primals, tangents
    f = factorise(a, layout)
    # The factors through _jax_form, differentiable in a: the tangent moves
    # with a, so second derivatives hold (the bare factor is a constant).
    lu_j, piv_j = _jax_form(layout, a, f.lu, f.piv)
    l_, u, dl, du = _lu_tangent(lu_j, piv_j, da, layout)
    p = _permutation_matrix(piv_j, a.shape[0], a.dtype, layout)
    return (p, l_, u), (jnp.zeros_like(p), dl, du)


def _plu_impl(a, *, layout):
    return _plu_core(layout, a)


_plu = jax.jit(_plu_impl, static_argnames=("layout",))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _det_core(layout, a):
    f = factorise(a, layout)
    sign, logabsdet = lu_slogdet(f.lu, f.piv, f.info, layout=layout)
    return sign * jnp.exp(logabsdet).astype(sign.dtype), f.info


@_det_core.defjvp
@numpy_rules.default_rules
def _det_jvp(layout, primals, tangents):
    # d det A = sum(M * dA) with M = adj(A)^T, which is det(A) A^-T where A is
    # invertible; at a singular A, JAX's own rule (cofactors from its LU) on
    # the whole matrix keeps it finite.
    (a,), (da,) = primals, tangents
    y, info = _det_core(layout, a)
    placement = layout.placement

    whole = lambda x: sharding.constrain(x, placement, P())  # noqa: E731

    def invertible(a):
        # A^-T through the differentiable solve, so second derivatives hold too.
        eye, sharded = operators.eye(layout, a)
        inverse_t = _lu_solve_core(factorise(a, layout), eye, 1, sharded)
        return whole(y * inverse_t)

    def singular(a):
        grad = jax.grad(jnp.linalg.det, holomorphic=jnp.iscomplexobj(a))
        return whole(grad(whole(a)).astype(a.dtype))

    # M depends on A alone: the branch taken never meets a tangent, so the
    # linear part below is one product (a tangent inside a cond that vmap
    # turns into a select does not transpose in JAX 0.10). Replicated
    # operands: under vmap the branches become a select over them, which
    # explicit sharding wants alike on every side.
    m = jax.lax.cond(whole(info == 0), invertible, singular, whole(a))
    dy = jnp.sum(m * whole(da))
    return (y, info), (dy, jax.custom_derivatives.zero_from_primal(info))


def _det_result(layout, a):
    return _det_core(layout, a)[0]


_det = jax.jit(_det_result, static_argnums=(0,))


# --------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------

_lu_solve = jax.jit(_lu_solve_core, static_argnames=("trans", "b_sharded"))
_solve_gen = jax.jit(_solve_gen_core, static_argnames=("layout", "b_sharded"))
