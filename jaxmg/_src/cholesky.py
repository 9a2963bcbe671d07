"""Cholesky: solves, inverses and log-determinants of symmetric/Hermitian
positive-definite matrices, and the factor kept for reuse (it stays sharded in
the engine's layout, so k solves against one matrix cost one factorisation).

Derivatives never gather A: solves go through `lax.custom_linear_solve`, so
the tangent and cotangent solves reuse the sharded factor; the log-determinant
and inverse have JVP rules built from matrix products XLA shards."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import (
    arguments,
    batching,
    dispatch,
    factor_pytree,
    failures,
    numpy_rules,
    operators,
    padded_blocks,
    peer_calls,
    plans,
    sharding,
    triangular,
)
from jaxmg._src.eager import onto_mesh, returns_ready_on_cpus
from jaxmg._src.mixed import api as mixed_api
from jaxmg._src.engines.base import Layout
from jaxmg._src.placement import (BATCH_ELEMENT, check_square, eager_key, factor_on_devices,
                                  resolve_placement, whole_on_its_devices)


@factor_pytree.register(data_fields=("factor", "a", "info"), meta_fields=("layout", "lower"))
@dataclasses.dataclass(frozen=True)
class CholeskyFactor:
    """The result of :func:`jaxmg.cho_factor`; pass it to :func:`jaxmg.cho_solve`.

    factor: the Cholesky factor in the engine's layout (padded, block-cyclic,
    rows sharded) or, for the "jax" engine, JAX's own upper factor. a: the
    matrix itself, kept for derivatives (None when it was donated); its
    `lower` triangle is the one factored. info: 0,
    or the order of the first leading minor that is not positive definite.

    It unpacks as jax.scipy's ``(c, lower)``: c is the (N, N) triangular
    factor, rows sharded (``lower``: L with A = L L^H, else U with A = U^H U),
    so ``c, lower = jaxmg.cho_factor(a)`` and jax.scipy.linalg.cho_solve work;
    it indexes and has len 2 like that tuple too.
    """

    factor: jax.Array
    a: jax.Array | None
    info: jax.Array
    layout: Layout
    lower: bool = False

    @property
    def dtype(self):
        """A's dtype, which solves promote b to (as jax.scipy's c)."""
        return self.factor.dtype

    def on_devices(self) -> "CholeskyFactor":
        """This factor, its arrays back on its devices if they left them."""
        return factor_on_devices(self, self.layout.placement, "factor", ("factor", "a"))

    @numpy_rules.default_rules
    def __iter__(self):
        self = self.on_devices()
        if self.a is None:  # donated: no derivatives
            convert = triangular_factor
        else:
            convert = lambda f: _jax_form(f.layout, f.lower, f.a, f.factor, f.info)  # noqa: E731
        for _ in range(self.factor.ndim - 2):  # a factor made under vmap, unpacked outside
            convert = jax.vmap(convert)
        return iter((convert(self), self.lower))

    def __len__(self):
        return 2

    def __getitem__(self, index):
        if isinstance(index, int) and index in (1, -1):  # no conversion for the flag
            return self.lower
        return tuple(self)[index]


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


@returns_ready_on_cpus
@peer_calls.accepts_peer_calls(arrays=2, with_logdet=lambda *a, **k: _potrs_with_logdet(*a, **k),
                               cholesky_status=True, padded=padded_blocks.potrs_through_blocks)
def potrs(a, b, *, tile_size=None, mesh=None, spec=None, backend="auto", return_info=False,
          donate=False, precision="highest"):
    """Solves ``a @ x = b`` by a Cholesky factorisation distributed over devices.

    Args:
      a: (N, N) symmetric (real) or Hermitian (complex) positive-definite
        matrix, rows sharded over one mesh axis, ``P(axis, None)``. Only one
        triangle is read (the upper one in row-major terms).
      b: (N,) or (N, K) right-hand sides with a's dtype; row-sharded on the
        same axis or replicated.
      tile_size: column tile T_A of the block-cyclic layout (default 1024,
        capped at N / devices). N need not be a multiple of anything.
      mesh, spec: the mesh and a's PartitionSpec; read from ``a.sharding``
        when not given (required inside ``jit`` unless a mesh is set with
        ``jax.set_mesh``). Inside ``shard_map``, pass the local blocks.
      backend: "jaxmg" (the distributed solver), "jax" (JAX's own solver on
        the replicated matrix), "mp" (cuSOLVERMp) or "auto": JAX's solver
        on a mesh (or inside shard_map, an axis) of one device, and on GPUs
        below a measured crossover; else jaxmg.
      return_info: also return the info: 0 on success; from jaxmg's engines
        k > 0 if the leading minor of order k is not positive definite, from
        JAX's solver 1; N + 1 for a NaN or Inf in the triangle read.
      donate: let jaxmg reuse a's buffer (a is deleted); saves one copy of A.
      precision: "highest" (the factorisation in a's precision) or "mixed"
        (float64/complex128 only: a Cholesky with BF16 tensor-core updates,
        refined against a to float64 accuracy, falling back to a float64
        factorisation where refinement does not converge). With "mixed"
        the info returned is a RefinementInfo (info, iterations, fallback,
        backward_error, ...).

    Returns:
      x with b's shape and layout (all NaN if a is not positive definite),
      and info (int32 scalar) if ``return_info``.

    JAXMg's call form, ``potrs(a, b, T_A, mesh, in_specs,
    return_status=False, pad=True)`` (``matrix_specs`` for in_specs, and
    ``return_logdet``, in its later releases), runs too (T_A is tile_size,
    in_specs a's spec; pad has no effect); its status is JAXMg's: 0, or 7
    where a is not positive definite.
    """
    return_info = arguments.check_flag(return_info, "return_info")
    if mixed_api.check_precision(precision):
        mixed_api.check_options(tile_size=tile_size, backend=backend, donate=donate)
        x, record = mixed_api.solve("spd", a, b, triangle="upper", mesh=mesh, spec=spec)
        return (x, record) if return_info else x
    # Checked before the key: 2.0 == 2 and 1 == True must not find another's plan.
    tile = arguments.check_tile(tile_size)
    donate = arguments.check_donate(donate, a, b)
    key = eager_key((a, b), "potrs", tile, mesh, spec, backend, return_info, donate)
    plan = plans.find(key)
    if plan is not None:
        return plan(a, b)
    arguments.check_rank2(a, "a")
    dtype = arguments.check_dtype(a, "a", "cholesky")
    placement = resolve_placement(a, mesh, spec, "a", row_blocks=True)
    n = check_square(a, placement, "a")
    b = arguments.as_array(b, "b")
    rows = (a.shape[0], n) if placement.manual else (n,)
    if b.ndim not in (1, 2) or b.shape[0] not in rows:
        raise ValueError(
            f"jaxmg: b must have shape ({n},) or ({n}, K) to match a's {n} rows, got {b.shape}"
        )
    arguments.check_same_dtype(b, dtype)
    if placement.manual:
        engine = dispatch.choose("potrs", n, placement, backend, dtype.itemsize)
        vector = b.ndim == 1
        x, info = engine.potrs_blocks(a, b[:, None] if vector else b, placement, tile)
        x = x[:, 0] if vector else x
        return (x, info) if return_info else x
    layout = dispatch.layout("potrs", n, placement, tile, backend, dtype.itemsize)
    b_sharded = operators.is_row_sharded(b, placement)
    if donate and arguments.differentiated(b):  # the factor's solve carries b's derivative
        f = factorise(a, layout, donate=True)
        x = _cho_solve(f, b, b_sharded=b_sharded)
        return (x, f.info) if return_info else x
    if donate:
        vector = b.ndim == 1
        x, info, _ = _potrs_donating(a, b[:, None] if vector else b, layout=layout,
                                     b_sharded=b_sharded)
        x = x[:, 0] if vector else x
        return (x, info) if return_info else x
    plan = functools.partial(solve_pos_result, layout=layout, b_sharded=b_sharded,
                             with_info=return_info)
    return plans.keep(key, plan)(a, b)


@returns_ready_on_cpus
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, *, tile_size=None,
               mesh=None, spec=None, backend="auto", donate=False,
               on_failure="nan", precision="highest") -> CholeskyFactor:
    """Cholesky factor of a symmetric/Hermitian positive-definite matrix, kept
    sharded in the engine's layout for :func:`cho_solve` and :func:`cho_logdet`.

    a: (N, N), rows sharded ``P(axis, None)``; the triangle that `lower`
    names is read (the upper one by default, as jax.scipy.linalg). Leading
    batch dimensions (..., N, N) factor one matrix at a time; the factor
    keeps them, and cho_solve broadcasts b against them as jax.scipy does.
    lower: which factor unpacking the result gives (see CholeskyFactor).
    overwrite_a, check_finite: accepted for compatibility; ignored (donate=
    is jaxmg's way to give up a's buffer).
    donate: reuse a's buffer for the factor (a is deleted; no derivatives
    with respect to a then). precision="mixed": a MixedFactor (the
    low-precision factor and a) that cho_solve refines against a. Other
    arguments as for :func:`jaxmg.potrs`.
    """
    del overwrite_a, check_finite
    failures.check_on_failure(on_failure)
    lower = arguments.check_flag(lower, "lower")
    a = arguments.inexact(a, "a")
    mixed = mixed_api.check_precision(precision)
    if mixed:
        mixed_api.check_options(tile_size=tile_size, backend=backend, donate=donate)
    else:
        donate = arguments.check_donate(donate, a)
    if batching.batched(a):
        if mixed:
            mixed_api.check_batch((a, "a", a.ndim - 2))
        fn = functools.partial(cho_factor, lower=lower, tile_size=tile_size, mesh=mesh,
                               spec=spec, backend=backend, on_failure=on_failure,
                               precision=precision)
        return batching.broadcast_map(fn, (a,), (2,))
    if mixed:
        return mixed_api.factor("spd", a, triangle="lower" if lower else "upper", mesh=mesh,
                                spec=spec, on_failure=on_failure)
    layout = dispatch.cached_layout(a, "potrs", tile_size, mesh, spec, backend)
    f = factorise(upper_read(a, lower, layout), layout, donate=donate)
    failures.report(f.info, on_failure, failures.NOT_SPD)
    if not lower:
        return f
    # The caller's a, not the transpose the engine factored: that would be
    # one more copy of A for as long as the factor lives.
    return dataclasses.replace(f, a=None if f.a is None else a, lower=True)


@returns_ready_on_cpus
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solves A X = B with a Cholesky factor, like jax.scipy.linalg.cho_solve.

    c_and_lower: the CholeskyFactor from :func:`cho_factor` (the factor stays
    in the engine's layout), or a ``(c, lower)`` pair of a triangular factor
    and whether it is lower, as jax.scipy.linalg.cho_factor returns (solved
    by two distributed triangular solves).
    b: (N,) or (N, K), replicated or row-sharded like A; X comes back in b's
    layout. Derivatives flow to b and (through the factor) to A.
    """
    del overwrite_b, check_finite
    f = c_and_lower
    if isinstance(f, (mixed_api.MixedFactor, CholeskyFactor)):
        f = f.on_devices()
        b, dtype = arguments.as_array(b, "b"), f.dtype
        b = arguments.varying_alike(b, *jax.tree.leaves(f))[0]
        if b.dtype != dtype:
            return operators.solve_promoted(lambda r: cho_solve(f, r), b, dtype)
        mixed = isinstance(f, mixed_api.MixedFactor)
        nd = (f.a if mixed else f.factor).ndim - 2
        if nd or b.ndim > 2:  # a factor of a batch, or a batch of b
            n = f.n if mixed else f.layout.n
            return batching.factor_solve_map(cho_solve, f, b, nd, n, "cho_solve")
        if mixed:
            return mixed_api.solve_with(f, b, kind="spd")[0]
        if sharding.is_explicit(f.layout.placement) and whole_on_its_devices(b):
            raise operators.FactorUnderShardedVmap("cho_solve", "c_and_lower")
        return _solve_with(f, b, triangle_read=True)
    if not isinstance(f, (tuple, list)) or len(f) != 2:
        raise TypeError(
            "jaxmg.cho_solve takes the CholeskyFactor that jaxmg.cho_factor returns, or a pair "
            f"(c, lower) as jax.scipy.linalg.cho_factor returns; got {type(f).__name__}"
        )
    c, lower = f
    lower = arguments.check_flag(lower, "lower")
    c, b = arguments.promote((c, "c"), (b, "b"))
    if c.ndim > 2 or b.ndim > 2:
        fn = lambda c, b: cho_solve((c, lower), b)  # noqa: E731
        vector = batching.vector_rhs(b, c.ndim, c.shape[-1], "cho_solve")
        return batching.broadcast_map(fn, (c, b), (2, 1 if vector else 2))
    arguments.check_rank2(c, "c")
    arguments.check_square_matrices(c, "cho_solve", "c")
    b = operators.as_rhs(b, c.shape[0])
    arguments.check_same_dtype(b, c.dtype, other="c")
    placement = resolve_placement(c, None, None, "c", others=(b,))
    # A = L L^H: L y = b, then L^H x = y (U^H U likewise, the other way round).
    first, second = (0, 2) if lower else (2, 0)
    y = triangular.triangular_solve(c, b, placement, lower=lower, trans=first,
                                    unit_diagonal=False)
    return triangular.triangular_solve(c, y, placement, lower=lower, trans=second,
                                       unit_diagonal=False)


def _solve_with(f: CholeskyFactor, b, triangle_read: bool):
    """cho_solve with one factor; triangle_read: differentiated as JAX's
    cho_solve (the factor stands for the triangle of a it read), else as
    solve(assume_a="pos") (all of a)."""
    b = operators.as_rhs(onto_mesh(b, f.layout.placement.mesh), f.layout.n)
    return _cho_solve(f, b, b_sharded=operators.is_row_sharded(b, f.layout.placement),
                      triangle_read=triangle_read)


class _FalseByDefault(int):
    """cholesky's default lower: equal to False, as scipy's, yet told apart
    from a lower=False the caller gave (a jnp-style call gives none)."""

    def __repr__(self):
        return "False"


_LOWER_NOT_GIVEN = _FalseByDefault(0)


@returns_ready_on_cpus
def cholesky(a, lower=_LOWER_NOT_GIVEN, overwrite_a=False, check_finite=True, *, upper=None,
             symmetrize_input=None, tile_size=None, mesh=None, spec=None, backend="auto"):
    """The Cholesky factor of a symmetric/Hermitian positive-definite matrix,
    like jax.scipy.linalg.cholesky: U with a = U^H U (``lower=False``, the
    default), or L with a = L L^H, zeros in the other triangle, rows sharded
    like a; NaN where a is not positive definite. Differentiable; a may have
    leading batch dimensions.

    jnp.linalg.cholesky's keywords work too: ``upper`` (the opposite of
    `lower`; giving both, they must agree) and ``symmetrize_input`` (factor
    (a + a^H) / 2, so both triangles count). A call with either of them and
    no `lower` is read as jnp's: lower by default (upper=False),
    symmetrize_input=True, and without symmetrizing the lower triangle read
    (upper=True gives L^H); otherwise scipy's: upper, the `lower` triangle
    read."""
    del overwrite_a, check_finite
    lower = None if lower is _LOWER_NOT_GIVEN else lower
    numpy_style = lower is None and (upper is not None or symmetrize_input is not None)
    if upper is not None:
        upper = arguments.check_flag(upper, "upper")
        if lower is not None and arguments.check_flag(lower, "lower") == upper:
            raise ValueError(
                f"jaxmg: cholesky got lower={lower} and upper={upper}; pass one of them "
                "(upper is jnp.linalg's name, lower jax.scipy.linalg's)"
            )
        lower = not upper
    lower = numpy_style if lower is None else arguments.check_flag(lower, "lower")
    if symmetrize_input is None:
        symmetrize_input = numpy_style
    symmetrize_input = arguments.check_flag(symmetrize_input, "symmetrize_input")
    a = arguments.inexact(a, "a")
    if batching.batched(a):
        side = dict(upper=not lower) if numpy_style else dict(lower=lower)
        fn = functools.partial(cholesky, symmetrize_input=symmetrize_input, tile_size=tile_size,
                               mesh=mesh, spec=spec, backend=backend, **side)
        return batching.broadcast_map(fn, (a,), (2,))
    layout = dispatch.cached_layout(a, "potrs", tile_size, mesh, spec, backend)
    if layout.placement is BATCH_ELEMENT:  # JAX's solver takes it whole
        a = sharding.whole_element(a)
    return _cholesky_program(a, layout=layout, lower=lower, symmetrize=symmetrize_input,
                             numpy_upper=numpy_style and not lower)


@functools.partial(jax.jit, static_argnames=("layout", "lower", "symmetrize", "numpy_upper"))
def _cholesky_program(a, *, layout: Layout, lower: bool, symmetrize: bool, numpy_upper: bool):
    """One compiled program for the reads around the factorisation: called
    eagerly, each would compile a program of its own per shape."""
    if symmetrize and layout.n:  # both terms row-sharded (a may come by columns)
        rows = sharding.constrain_result(a, layout.placement, layout.row_spec)
        a = (rows + upper_read(a, True, layout)) / 2
    if numpy_upper:  # jnp reads the lower triangle, then gives L^H
        return upper_read(_cholesky_matrix(upper_read(a, True, layout), layout=layout,
                                           lower=True), True, layout)
    return _cholesky_matrix(upper_read(a, lower, layout), layout=layout, lower=lower)


def upper_read(a, lower: bool, layout: Layout):
    """The matrix whose upper triangle (the one the engines read) is a's
    `lower` triangle: a itself, or a^H for the lower one."""
    if not lower or layout.n == 0:
        return a
    return sharding.constrain_result(jnp.conj(a).T, layout.placement, layout.row_spec)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def lower_read_as_solved(a, layout: Layout):
    """upper_read(a, True) for jaxmg.solve: differentiated as the matrix it
    stands for (a itself, Hermitian), not as a^H, so that solve(lower=True)
    has jax.scipy.linalg.solve's derivative (its tangent solve uses a)."""
    return upper_read(a, True, layout)


@lower_read_as_solved.defjvp
@numpy_rules.default_rules
def _lower_read_as_solved_jvp(layout, primals, tangents):
    read = lower_read_as_solved(primals[0], layout)
    return read, _typed_as(tangents[0], read)


def _typed_as(tangent, primal):
    """The tangent with the primal's type: on explicit mesh axes they must
    match, and the primal may be row-sharded where the tangent is not (an
    unplaced or column-sharded matrix under jax.set_mesh), or the other way
    round."""
    want = getattr(jax.typeof(primal), "sharding", None)
    if want is not None and not want.mesh.empty and jax.typeof(tangent).sharding != want:
        return jax.sharding.reshard(tangent, want)
    return tangent


def triangular_factor(f: CholeskyFactor):
    """The factor as jax.scipy's c: U (or L when f.lower), (N, N), rows sharded."""
    u = _upper(f.factor, f.info, layout=f.layout)
    return sharding.constrain_result(jnp.conj(u).T, f.layout.placement,
                                     f.layout.row_spec) if f.lower else u


@returns_ready_on_cpus
def cho_logdet(c_and_a: CholeskyFactor):
    """log det A from :func:`cho_factor`'s result (real; NaN if A is not
    positive definite). Differentiable with respect to A."""
    f = c_and_a
    if isinstance(f, mixed_api.MixedFactor):
        raise TypeError(
            "jaxmg.cho_logdet needs a float64 factor: precision='mixed' keeps a low-precision "
            "one, whose log det has its precision only. Use cho_factor(a) (precision='highest') "
            "for the log det; the mixed factor still solves (cho_solve)")
    if not isinstance(f, CholeskyFactor):
        raise TypeError("jaxmg.cho_logdet takes the CholeskyFactor that jaxmg.cho_factor returns")
    f = f.on_devices()
    if f.factor.ndim > 2:  # the factor of a batch: one log det per matrix
        return batching.batch_map(cho_logdet, (f,), (f.factor.ndim - 2,))
    plain = _no_grad_factor(f)
    if f.a is None:
        return cholesky_logdet(plain.factor, plain.info, layout=f.layout)
    return _spd_logdet_program(f.layout, f.lower, f.a, plain.factor, plain.info)


def _potrs_with_logdet(a, b, *, tile_size=None, mesh=None, spec=None, backend="auto",
                       return_info=False, donate=False, precision="highest"):
    """potrs's (x, log det a[, info]), JAXMg's return_logdet: one factorisation."""
    if mixed_api.check_precision(precision):
        raise ValueError("jaxmg.potrs: return_logdet needs the float64 factor; leave precision "
                         "out (precision='mixed' keeps a low-precision one)")
    f = cho_factor(a, tile_size=tile_size, mesh=mesh, spec=spec, backend=backend, donate=donate)
    # Differentiated as potrs without the log det: all of a, as solve(assume_a="pos").
    b = arguments.as_array(b, "b")
    arguments.check_same_dtype(b, f.dtype)  # as potrs
    x, logdet = _solve_with(f, b, triangle_read=False), cho_logdet(f)
    return (x, logdet, f.info) if arguments.check_flag(return_info, "return_info") else (x, logdet)


@returns_ready_on_cpus
@peer_calls.accepts_peer_calls(arrays=1, cholesky_status=True,
                               padded=padded_blocks.potri_through_blocks)
def potri(a, *, tile_size=None, mesh=None, spec=None, backend="auto", return_info=False,
          donate=False):
    """Inverts a symmetric (Hermitian) positive-definite matrix via Cholesky.

    Args:
      a: (N, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        only one triangle is read (the upper one in row-major terms).
      tile_size, mesh, spec, backend, donate: as for :func:`jaxmg.potrs`.
      return_info: also return LAPACK's info (0, or the order k of the first
        leading minor that is not positive definite).

    Returns:
      The full (both triangles) inverse, (N, N), sharded like a; all NaN if a
      is not positive definite. Plus info (int32 scalar) if ``return_info``.

    JAXMg 0.0.8's call form, ``potri(a, T_A, mesh, in_specs,
    return_status=False, pad=True)``, runs too, as for :func:`jaxmg.potrs`.
    """
    tile = arguments.check_tile(tile_size)
    return_info = arguments.check_flag(return_info, "return_info")
    donate = arguments.check_donate(donate, a)
    key = eager_key((a,), "potri", tile, mesh, spec, backend, return_info, donate)
    plan = plans.find(key)
    if plan is not None:
        return plan(a)
    arguments.check_rank2(a, "a")
    arguments.check_dtype(a, "a", "cholesky")
    placement = resolve_placement(a, mesh, spec, "a", row_blocks=True)
    n = check_square(a, placement, "a")
    if placement.manual:
        engine = dispatch.choose("potri", n, placement, backend, a.dtype.itemsize)
        inv, info = engine.potri_blocks(a, placement, tile)
    elif donate:
        inv, info = _potri_donating(
            a, layout=dispatch.layout("potri", n, placement, tile, backend, a.dtype.itemsize))
    else:
        layout = dispatch.layout("potri", n, placement, tile, backend, a.dtype.itemsize)
        plan = functools.partial(spd_inverse_program, layout=layout, with_info=return_info)
        return plans.keep(key, plan)(a)
    return (inv, info) if return_info else inv


def spd_inverse(a, *, tile_size=None, mesh=None, spec=None, backend="auto", on_failure="nan"):
    """inv(a, assume_a="pos"): the Cholesky-based inverse, row-sharded like a."""
    failures.check_on_failure(on_failure)
    tile = arguments.check_tile(tile_size)
    key = eager_key((a,), "inv", tile, mesh, spec, backend, on_failure)

    def make():
        layout = dispatch.matrix_layout(a, "potri", tile_size, mesh, spec, backend)
        program = functools.partial(spd_inverse_program, layout=layout, with_info=True)
        return failures.reporting(program, on_failure, failures.NOT_SPD)

    return plans.find_or_make(key, make)(a)


def solve_pos_result(a, b, *, layout, b_sharded, with_info=False):
    """x, or (x, info) with_info: what jaxmg.potrs and jaxmg.solve return."""
    x, info = solve_pos(a, b, layout=layout, b_sharded=b_sharded, with_info=with_info)
    return (x, info) if with_info else x


# --------------------------------------------------------------------------
# The factor and solves against it (not differentiated: see below)
# --------------------------------------------------------------------------


def _no_grad(a):
    # The factor itself is not differentiated: derivatives go through `a`. (An
    # eager stop_gradient is an op dispatch of its own: only tracers need it.)
    return jax.lax.stop_gradient(a) if isinstance(a, jax.core.Tracer) else a


def _cholesky_impl(a, *, layout: Layout):
    factor, info = layout.engine.cholesky(a, layout)
    return factor, layout.engine.finite_info(a, info, layout, upper=True)


_cholesky = jax.jit(_cholesky_impl, static_argnames=("layout",))
_cholesky_donating = jax.jit(_cholesky_impl, static_argnames=("layout",), donate_argnums=0)


def factorise(a, layout: Layout, *, donate=False) -> CholeskyFactor:
    if layout.placement is BATCH_ELEMENT:  # JAX's solver takes it whole; so do the solves
        a = sharding.whole_element(a)
    factor, info = (_cholesky_donating if donate else _cholesky)(_no_grad(a), layout=layout)
    return CholeskyFactor(factor, None if donate else a, info, layout)


@functools.partial(jax.jit, static_argnames=("layout", "b_sharded"))
def _solve_with_factor(factor, info, b, *, layout: Layout, b_sharded: bool):
    return layout.engine.cho_solve(factor, info, b, layout, b_sharded)


def solve_with_factor(f: CholeskyFactor, b, b_sharded=None):
    """X with A X = B from a Cholesky factor (no derivatives). b_sharded:
    whether b's rows are sharded (None: read from b's sharding)."""
    b = operators.as_rhs(b, f.layout.n)
    b2 = b[:, None] if b.ndim == 1 else b
    if b_sharded is None:
        b_sharded = operators.is_row_sharded(b, f.layout.placement)
    x = _solve_with_factor(f.factor, f.info, b2, layout=f.layout, b_sharded=bool(b_sharded))
    return x[:, 0] if b.ndim == 1 else x


@functools.partial(jax.jit, static_argnames=("layout",))
def cholesky_logdet(factor, info, *, layout: Layout):
    return layout.engine.cholesky_logdet(factor, info, layout)


@functools.partial(jax.jit, static_argnames=("layout",))
def _upper(factor, info, *, layout: Layout):
    return layout.engine.cholesky_upper(factor, info, layout)


def _potrs_impl(a, b, *, layout: Layout, b_sharded: bool):
    x, info, factor = layout.engine.potrs(a, b, layout, b_sharded)
    info = layout.engine.finite_info(a, info, layout, upper=True)
    return failures.nan_where_failed(x, info), info, factor


# The one-call factor-and-solve serves donated calls (no derivatives); other
# calls go through solve_pos.
_potrs_donating = jax.jit(_potrs_impl, static_argnames=("layout", "b_sharded"), donate_argnums=0)


def _potri_impl(a, *, layout: Layout):
    inv, info = layout.engine.potri(a, layout)
    info = layout.engine.finite_info(a, info, layout, upper=True)
    return failures.nan_where_failed(inv, info), info


_potri = jax.jit(_potri_impl, static_argnames=("layout",))
_potri_donating = jax.jit(_potri_impl, static_argnames=("layout",), donate_argnums=0)


# --------------------------------------------------------------------------
# Derivative rules
# --------------------------------------------------------------------------


def _no_grad_factor(f: CholeskyFactor) -> CholeskyFactor:
    """The factor's arrays without derivatives: only `a` carries them."""
    return CholeskyFactor(
        jax.lax.stop_gradient(f.factor), None, jax.lax.stop_gradient(f.info), f.layout
    )


def _cho_solve_core(f: CholeskyFactor, b, b_sharded: bool, triangle_read: bool = False):
    """X with A X = B, differentiable in f.a. triangle_read: differentiated
    as the matrix the factor stands for (cho_factor's, which reads one
    triangle of a), not as a itself (solve's, as jax.scipy.linalg.solve)."""
    plain = _no_grad_factor(f)
    if f.layout.placement is BATCH_ELEMENT:  # typed as the whole matrix its solves take
        b = sharding.whole_element(b)

    def solve(_, r):
        return solve_with_factor(plain, r, b_sharded)

    def transpose_solve(_, r):  # A^T = conj(A) for a Hermitian A
        return jnp.conj(solve(None, jnp.conj(r))) if jnp.iscomplexobj(r) else solve(None, r)

    if f.a is None:
        return operators.solve_without_matrix(b, solve, transpose_solve)
    if triangle_read:
        a = _as_factored(f.layout, f.lower, f.a, plain.factor, plain.info)
    else:
        a = upper_read(f.a, f.lower, f.layout)
    matvec = operators.matvec(operators.keep_rows_sharded(a, f.layout), f.layout, b)
    if jnp.iscomplexobj(b):
        return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)
    return jax.lax.custom_linear_solve(matvec, b, solve, symmetric=True)


def _solve_pos_core(a, b, layout: Layout, b_sharded: bool, with_info: bool = True):
    f = factorise(a, layout)
    x = _cho_solve_core(f, b, b_sharded)
    # Without info, XLA drops the work that computes it (the "jax" engine's NaN scan).
    return (x, f.info) if with_info else (x, None)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _spd_logdet(layout, lower, a, factor, info):
    return cholesky_logdet(factor, info, layout=layout)


@_spd_logdet.defjvp
@numpy_rules.default_rules
def _spd_logdet_jvp(layout, lower, primals, tangents):
    a, factor, info = primals
    f = CholeskyFactor(factor, a, info, layout, lower)
    # Differentiated as log det of all of A, as jnp.linalg.slogdet.
    da = sharding.constrain_result(upper_read(tangents[0], lower, layout), layout.placement,
                                   layout.row_spec)
    y = _spd_logdet(layout, lower, a, factor, info)
    # The inverse through the differentiable solve, so derivatives of this
    # rule (second order) are right too.
    eye, sharded = operators.eye(layout, a)
    inverse = _cho_solve_core(f, eye, sharded)
    # d log det A = tr(A^-1 dA) = sum((A^-1)^T * dA), and (A^-1)^T = conj(A^-1).
    return y, jnp.real(jnp.sum(jnp.conj(inverse) * da))


# One program: its derivative rule, traced under an eager jvp, then runs
# where the operands' concrete mesh is known.
_spd_logdet_program = jax.jit(_spd_logdet, static_argnums=(0, 1))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _spd_inverse(layout, a):
    return _potri(a, layout=layout)


@_spd_inverse.defjvp
@numpy_rules.default_rules
def _spd_inverse_jvp(layout, primals, tangents):
    (a,), (da,) = primals, tangents
    placement = layout.placement
    y, info = _spd_inverse(layout, a)
    rows = P(placement.axis, None)
    dy = -sharding.matmul(sharding.matmul(y, da, placement, rows), y, placement, rows)
    return (y, info), (dy, jax.custom_derivatives.zero_from_primal(info))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _cholesky_factor(layout, lower, a):
    f = factorise(a, layout)
    return triangular_factor(dataclasses.replace(f, lower=lower))


@_cholesky_factor.defjvp
@numpy_rules.default_rules
def _cholesky_factor_jvp(layout, lower, primals, tangents):
    (a,), (da,) = primals, tangents
    c = _cholesky_factor(layout, lower, a)
    return c, _cholesky_tangent(c, da, layout, lower)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _jax_form(layout, lower, a, factor, info):
    """jax.scipy's c from the engine's factor of a (its `lower` triangle),
    differentiable in a."""
    return triangular_factor(CholeskyFactor(factor, a, info, layout, lower))


@_jax_form.defjvp
@numpy_rules.default_rules
def _jax_form_jvp(layout, lower, primals, tangents):
    a, factor, info = primals
    c = _jax_form(layout, lower, a, factor, info)
    return c, _cholesky_tangent(c, upper_read(tangents[0], lower, layout), layout, lower)


TANGENT_FROM_LOWER_TRIANGLE = jax.__version_info__ >= (0, 11, 2)


def _cholesky_tangent(c, da, layout, lower):
    """dc for the factor c (L, or U = L^H) of A = L L^H moved by dA:
    dL = L phi(L^-1 dA L^-H), phi taking the lower triangle with half its
    diagonal."""
    l_ = c if lower else jnp.conj(c).T
    placement = layout.placement
    # As jax.scipy.linalg.cholesky differentiates (which matters only for a
    # tangent that is not Hermitian): the factor of M = L L^H moves with dM^H,
    # which JAX from 0.11.2 first makes Hermitian from its lower triangle
    # (dM's upper one, the triangle the engines read).
    if TANGENT_FROM_LOWER_TRIANGLE:
        da = _hermitian_from_upper(da, placement)
    else:
        da = sharding.constrain_result(jnp.conj(da).T, placement, layout.row_spec)
    y = triangular.triangular_solve(l_, da, placement, lower=True, trans=0, unit_diagonal=False)
    x = triangular.triangular_solve(l_, jnp.conj(y).T, placement, lower=True, trans=0,
                                    unit_diagonal=False)
    x = jnp.conj(x).T
    phi = jnp.tril(x) - jnp.diag(jnp.diagonal(x)) / 2 if c.shape[0] else x
    dl = sharding.matmul(l_, phi, placement, layout.row_spec)
    return dl if lower else sharding.constrain_result(jnp.conj(dl).T, placement, layout.row_spec)


def _hermitian_from_upper(x, placement):
    """The Hermitian matrix whose upper triangle is x's (its diagonal real)."""
    strictly_upper = jnp.triu(x, 1)
    diagonal = jnp.real(jnp.triu(x) - strictly_upper).astype(x.dtype)
    return strictly_upper + sharding.adjoint_rows(strictly_upper, placement) + diagonal


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _as_factored(layout, lower, a, factor, info):
    """a as the engines read it (upper_read: the factored triangle above the
    diagonal), differentiated as the matrix its factor stands for, as JAX
    differentiates cho_solve(cho_factor(a), b)."""
    return upper_read(a, lower, layout)


@_as_factored.defjvp
@numpy_rules.default_rules
def _as_factored_jvp(layout, lower, primals, tangents):
    a, factor, info = primals
    read = _as_factored(layout, lower, a, factor, info)
    f = CholeskyFactor(factor, a, info, layout, lower)
    tangent = _factored_tangent(f, upper_read(tangents[0], lower, layout))
    return read, _typed_as(tangent, read)


def _factored_tangent(f: CholeskyFactor, da):
    """The tangent of the matrix f's factor stands for, upper_read(f.a) moved
    by da: from jax 0.11.2 the Hermitian matrix of da's triangle that was
    read; before, the one JAX's Cholesky derivative of the day gave,
    dA = dL L^H + L dL^H."""
    placement = f.layout.placement
    if TANGENT_FROM_LOWER_TRIANGLE:
        return _hermitian_from_upper(da, placement)
    c = _jax_form(f.layout, f.lower, f.a, f.factor, f.info)
    dc = _cholesky_tangent(c, da, f.layout, f.lower)
    l_, dl = (c, dc) if f.lower else (jnp.conj(c).T, jnp.conj(dc).T)
    product = sharding.matmul(dl, jnp.conj(l_).T, placement, f.layout.row_spec)
    return product + sharding.adjoint_rows(product, placement)


def _cholesky_matrix_impl(a, *, layout, lower):
    return _cholesky_factor(layout, lower, a)


_cholesky_matrix = jax.jit(_cholesky_matrix_impl, static_argnames=("layout", "lower"))


def _spd_inverse_result(a, *, layout, with_info):
    y, info = _spd_inverse(layout, a)
    return (y, info) if with_info else y


# --------------------------------------------------------------------------
# Programs: one compiled program per call site and shapes, so an eager call
# (through its plan) costs one dispatch
# --------------------------------------------------------------------------

_cho_solve = jax.jit(_cho_solve_core, static_argnames=("b_sharded", "triangle_read"))
solve_pos = jax.jit(_solve_pos_core, static_argnames=("layout", "b_sharded", "with_info"))
spd_inverse_program = jax.jit(_spd_inverse_result, static_argnames=("layout", "with_info"))
