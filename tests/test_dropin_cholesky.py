"""A triangular Cholesky factor as jax.scipy.linalg gives it: cholesky(a,
lower=), cho_factor returning (c, lower) that unpacks and that cho_solve
takes (also a factor the user made with jax.scipy, and the other way
round), solve(..., assume_a="pos", lower=) reading one triangle; against
JAX in every mode on every mesh, NaN where the matrix is not positive
definite (as JAX), errors naming the argument."""

import contextlib

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import dropin
import helpers
from dropin import K, N, PLAIN, REP, ROWS, api


def triangle(c, lower):
    return jnp.tril(c) if lower else jnp.triu(c)


def spd_and_rhs(shape):
    def make(rng, dtype):
        return dropin.spd(rng, N, dtype), dropin.random(rng, shape, dtype)

    return make


def with_garbage(rng, a, lower):
    """a's unread triangle (strictly above the diagonal for lower) overwritten."""
    junk = dropin.random(rng, a.shape, a.dtype) * 100
    keep = np.tril(np.ones(a.shape, bool)) if lower else np.triu(np.ones(a.shape, bool))
    return np.where(keep, a, junk)


@pytest.mark.parametrize("case, lower", dropin.sweep(also=("lower", (True, False))))
def test_cholesky(rng, case, lower):
    """The triangular factor itself (zeros in the other triangle, as JAX)."""
    dropin.check_case(
        case,
        lambda a: api.cholesky(dropin.hermitian_part(a), lower=lower),
        lambda a: jsl.cholesky(dropin.hermitian_part(a), lower=lower),
        lambda rng, dtype: (dropin.spd(rng, N, dtype),),
        (ROWS,),
        rng,
    )


@pytest.mark.parametrize("lower, devices, kind", [(True, 4, "auto"), (False, 3, "explicit")])
def test_cholesky_reads_one_triangle(rng, lower, devices, kind):
    """Only the selected triangle is read: junk in the other changes nothing."""
    mesh, dtype = dropin.mesh(devices, kind), np.complex128
    a = dropin.spd(rng, N, dtype)
    got = api.cholesky(dropin.place(with_garbage(rng, a, lower), ROWS, mesh), lower=lower)
    dropin.assert_close(got, jsl.cholesky(dropin.promote(a), lower=lower), dtype)


@pytest.mark.parametrize("case, lower", dropin.sweep(also=("lower", (True, False)), small=True))
def test_cho_factor_unpacks_as_c_lower(rng, case, lower):
    """c, lower = cho_factor(a, lower=...): lower is the flag asked for, c
    holds the factor in that triangle, in the caller's (N, N) layout."""
    a = dropin.place(dropin.spd(rng, N, case.dtype), ROWS, case.mesh)
    c, got_lower = api.cho_factor(a, lower=lower)
    assert isinstance(got_lower, (bool, np.bool_)) and got_lower == lower
    assert c.shape == (N, N)

    def factor(a):
        c, low = api.cho_factor(dropin.hermitian_part(a), lower=lower)
        return triangle(c, low)

    dropin.check_case(
        case,
        factor,
        lambda a: jsl.cholesky(dropin.hermitian_part(a), lower=lower),
        lambda rng, dtype: (dropin.spd(rng, N, dtype),),
        (ROWS,),
        rng,
    )


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("devices, kind", [(0, "plain"), (3, "auto"), (2, "explicit")])
def test_cho_factor_is_a_pair_as_jax(rng, devices, kind, lower):
    """cho_factor's result, eager, jitted and vmapped, is a 2-sequence as
    jax.scipy's (c, lower): len, indexing, slicing and iteration (JAX's tests
    compare results by len() and element by element); its parts, taken by
    index, go back into cho_solve."""
    dtype = np.complex128
    a, b = dropin.spd(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    mesh = None if kind == "plain" else dropin.mesh(devices, kind)
    a_dev = dropin.place_or_plain(a, ROWS, mesh)
    want = jsl.cho_factor(dropin.promote(a), lower=lower)
    got = api.cho_factor(a_dev, lower=lower)
    dropin.assert_sequence_close(got, want, dtype, what="eager")
    factor = jax.jit(lambda a: api.cho_factor(a, lower=lower))
    with dropin.jit_context(mesh):
        dropin.assert_sequence_close(factor(a_dev), want, dtype, what="jit")
    x = api.cho_solve((got[0], got[1]), dropin.place_or_plain(b, REP, mesh))
    dropin.assert_close(x, jsl.cho_solve(want, b), dtype, condition=dropin.CONDITION)
    # Under vmap, JAX's lower comes back as a batch of flags; only c is compared.
    pair = np.stack([a, a.conj()])
    batched = jax.vmap(lambda a: api.cho_factor(a, lower=lower))(jnp.asarray(pair))
    assert len(batched) == 2 and bool(np.all(batched[1] == lower))
    dropin.assert_close(batched[0], jsl.cho_factor(dropin.promote(pair), lower=lower)[0], dtype,
                        condition=dropin.CONDITION)


# (lower, b's shape and placement): turned over with the cases.
SOLVE_FORMS = ((True, (N, K), REP), (False, (N,), ROWS), (True, (N,), REP), (False, (N, K), ROWS))


def form_id(form):
    lower, shape, how = form
    return f"{'lower' if lower else 'upper'}-b{len(shape)}d-{how}"


@pytest.mark.parametrize("case, form", dropin.sweep(also=("form", SOLVE_FORMS, form_id)))
def test_cho_solve_of_cho_factor(rng, case, form):
    """cho_solve((c, lower), b) with the tuple rebuilt by hand from cho_factor's result."""
    lower, shape, b_how = form

    def solve(a, b):
        c, low = api.cho_factor(dropin.hermitian_part(a), lower=lower)
        return api.cho_solve((c, low), b)

    def ref(a, b):
        return jsl.cho_solve(jsl.cho_factor(dropin.hermitian_part(a), lower=lower), b)

    dropin.check_case(case, solve, ref, spd_and_rhs(shape), (ROWS, b_how), rng)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("devices, kind", [(1, "auto"), (4, "auto"), (2, "explicit"), (0, "plain")])
def test_cho_solve_takes_jax_factor(rng, devices, kind, lower):
    """A factor the user made with jax.scipy.linalg.cho_factor (then placed
    row-sharded, or left on one device) goes into jaxmg.cho_solve."""
    dtype = np.float64
    a, b = dropin.spd(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    c, low = jsl.cho_factor(jnp.asarray(a), lower=lower)
    if kind == "plain":
        c_dev, b_dev = c, jnp.asarray(b)
    else:
        mesh = dropin.mesh(devices, kind)
        c_dev, b_dev = dropin.place(np.asarray(c), ROWS, mesh), dropin.place(b, REP, mesh)
    x = api.cho_solve((c_dev, low), b_dev)
    dropin.assert_close(x, np.linalg.solve(a, b), dtype, condition=dropin.CONDITION)


@pytest.mark.parametrize("devices", [0, 4])
def test_jax_cho_solve_takes_jaxmg_factor(rng, devices):
    """The other way round: jax.scipy.linalg.cho_solve takes what
    jaxmg.cho_factor returns (on an Auto mesh, or one device)."""
    dtype = np.complex64
    a, b = dropin.spd(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    how, mesh = (dropin.PLAIN, None) if devices == 0 else (ROWS, dropin.mesh(devices))
    x = jsl.cho_solve(api.cho_factor(dropin.place(a, how, mesh), lower=True), jnp.asarray(b))
    dropin.assert_close(x, np.linalg.solve(dropin.promote(a), b), dtype, condition=dropin.CONDITION)


@pytest.mark.parametrize("case, lower", dropin.sweep(also=("lower", (True, False)), small=True))
def test_solve_pos_lower(rng, case, lower):
    """solve(a, b, assume_a="pos", lower=...) as jax.scipy.linalg.solve."""
    dropin.check_case(
        case,
        lambda a, b: api.solve(dropin.hermitian_part(a), b, assume_a="pos", lower=lower),
        lambda a, b: dropin.cho_solve_ref(dropin.hermitian_part(a), b, lower=lower),
        spd_and_rhs((N, K)),
        (ROWS, REP),
        rng,
    )


@pytest.mark.parametrize("lower", [True, False])
def test_solve_pos_reads_the_triangle_lower_names(rng, lower):
    """lower=True reads the lower triangle, lower=False (the default) the upper."""
    mesh, dtype = dropin.mesh(3, "explicit"), np.complex128
    a, b = dropin.spd(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    a_dev = dropin.place(with_garbage(rng, a, lower), ROWS, mesh)
    kw = {"lower": True} if lower else {}
    x = api.solve(a_dev, dropin.place(b, REP, mesh), assume_a="pos", **kw)
    dropin.assert_close(x, np.linalg.solve(a, b), dtype, condition=dropin.CONDITION)


def with_non_finite(a, lower, read: bool):
    """a with NaN and Inf strictly above the diagonal (below it for lower=False),
    or, with `read`, in the triangle that `lower` names."""
    a = a.copy()
    upper_part = np.triu_indices(a.shape[0], 1)
    rows, cols = upper_part if lower != read else upper_part[::-1]
    a[rows[::2], cols[::2]] = np.nan
    a[rows[1::2], cols[1::2]] = np.inf
    return a


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("devices, kind", [(1, "auto"), (4, "auto"), (3, "explicit")])
def test_nan_and_inf_in_the_unread_triangle_change_nothing(rng, devices, kind, lower):
    """As jax.scipy (and LAPACK's potrf): the triangle that is not read may
    hold NaN and Inf; the factor, the solves and the inverse are the same as
    for a clean matrix. In the triangle read, they give NaN."""
    mesh, dtype = dropin.mesh(devices, kind), np.float64
    a, b = dropin.spd(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    dirty = dropin.place(with_non_finite(a, lower, read=False), ROWS, mesh)
    b_dev = dropin.place(b, REP, mesh)
    want = np.linalg.solve(a, b)
    assert np.isfinite(np.asarray(jsl.cho_solve(jsl.cho_factor(with_non_finite(a, lower, False), lower=lower), b))).all()
    dropin.assert_close(api.cholesky(dirty, lower=lower), jsl.cholesky(dropin.promote(a), lower=lower), dtype)
    dropin.assert_close(api.cho_solve(api.cho_factor(dirty, lower=lower), b_dev), want, dtype,
                        condition=dropin.CONDITION)
    dropin.assert_close(api.solve(dirty, b_dev, assume_a="pos", lower=lower), want, dtype,
                        condition=dropin.CONDITION)
    if not lower:  # jaxmg.potrs reads the upper triangle, as cho_factor's default
        dropin.assert_close(api.potrs(dirty, b_dev), want, dtype, condition=dropin.CONDITION)
    read = dropin.place(with_non_finite(a, lower, read=True), ROWS, mesh)
    assert np.isnan(np.asarray(api.solve(read, b_dev, assume_a="pos", lower=lower))).all()


@pytest.mark.parametrize("devices, kind", [(2, "auto"), (4, "explicit")])
def test_not_positive_definite_gives_nan(rng, devices, kind):
    """Where JAX gives NaN, so does jaxmg: the factor's triangle (the other
    stays zero), the solves."""
    mesh, dtype = dropin.mesh(devices, kind), np.float32
    bad = dropin.place(dropin.not_spd(rng, N, dtype), ROWS, mesh)
    b = dropin.place(dropin.random(rng, (N, K), dtype), REP, mesh)
    upper = np.triu(np.ones((N, N), bool))
    factor = np.asarray(api.cholesky(bad))
    assert np.isnan(factor[upper]).all() and (factor[~upper] == 0).all()
    c, lower = api.cho_factor(bad, lower=True)
    assert np.isnan(np.asarray(c)[upper.T]).all() and (np.asarray(c)[~upper.T] == 0).all()
    assert np.isnan(np.asarray(api.cho_solve((c, lower), b))).all()
    assert np.isnan(np.asarray(api.solve(bad, b, assume_a="pos", lower=True))).all()


def test_errors_name_the_argument(rng):
    mesh, dtype = dropin.mesh(2), np.float64
    a = dropin.place(dropin.spd(rng, N, dtype), ROWS, mesh)
    with pytest.raises(ValueError, match=r"\ba\b.*\(24, 12\)|\(24, 12\).*\ba\b"):
        api.cholesky(dropin.place(np.ones((N, N // 2), dtype), ROWS, mesh))
    with pytest.raises(ValueError, match=r"\ba\b"):
        api.cho_factor(dropin.place(np.ones(N, dtype), ROWS, mesh))
    c = api.cho_factor(a)
    with pytest.raises(ValueError, match=r"\bb\b"):
        api.cho_solve(c, dropin.place(np.ones((N + 2, 1), dtype), REP, mesh))


# ---- jnp.linalg.cholesky's keywords, against JAX directly ----

import jaxmg  # noqa: E402


@pytest.mark.parametrize("kw", [dict(upper=True), dict(upper=False), dict(symmetrize_input=True),
                                dict(symmetrize_input=False), dict(upper=True,
                                                                   symmetrize_input=False)],
                         ids=str)
def test_cholesky_takes_jnp_keywords(rng, kw):
    """jnp-style calls (upper=, symmetrize_input=) mean what they mean to
    jnp.linalg.cholesky: lower by default, both triangles averaged unless
    symmetrize_input=False (then the triangle factored is read alone)."""
    a = dropin.spd(rng, 6, np.float64)
    junk = a + np.triu(dropin.random(rng, (6, 6), np.float64), 1)  # not symmetric
    for x in (a, junk):
        got = jaxmg.cholesky(dropin.place(x, ROWS, dropin.mesh(2)), **kw)
        np.testing.assert_allclose(got, jnp.linalg.cholesky(x, **kw), rtol=1e-10, atol=1e-10)


def test_cholesky_lower_and_upper_must_agree(rng):
    a = dropin.spd(rng, 4, np.float64)
    np.testing.assert_allclose(jaxmg.cholesky(a, lower=True, upper=False), jsl.cholesky(a, True),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="lower.*upper"):
        jaxmg.cholesky(a, lower=True, upper=True)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("form", ["jnp lower", "jnp upper", "scipy lower", "scipy upper"])
def test_cholesky_derivative_along_a_tangent_that_is_not_hermitian(rng, dtype, form):
    """As the installed JAX differentiates (from 0.11.2 it first makes the
    tangent Hermitian from its lower triangle; before, it used all of it),
    eagerly and under jit, with jaxmg's engine on 4 devices."""
    mesh = dropin.mesh(4, "explicit")
    a, t = dropin.spd(rng, N, dtype), dropin.random(rng, (N, N), dtype)
    upper = form.endswith("upper")
    if form.startswith("jnp"):
        ours = lambda a: api.cholesky(a, upper=upper, symmetrize_input=False)  # noqa: E731
        theirs = lambda a: jnp.linalg.cholesky(a, upper=upper, symmetrize_input=False)  # noqa: E731
    else:
        ours = lambda a: api.cholesky(a, lower=not upper)  # noqa: E731
        theirs = lambda a: jsl.cholesky(a, lower=not upper)  # noqa: E731
    expected = jax.jvp(theirs, (dropin.promote(a),), (dropin.promote(t),))[1]
    with jax.set_mesh(mesh):
        placed_a, placed_t = dropin.place(a, ROWS, mesh), dropin.place(t, ROWS, mesh)
        eager = jax.jvp(ours, (placed_a,), (placed_t,))[1]
        jitted = jax.jit(lambda a, t: jax.jvp(ours, (a,), (t,))[1])(placed_a, placed_t)
    dropin.assert_close(eager, expected, dtype)
    dropin.assert_close(jitted, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("lower", [False, True])
def test_cho_solve_of_cho_factor_derivative_as_jax(rng, dtype, lower):
    """cho_solve(cho_factor(a), b) differentiated as JAX differentiates it
    (the factor stands for the triangle of a that was read), forward and
    reverse, eagerly and under jit, on 4 devices and on none. cho_logdet of
    the same factor keeps jnp.linalg.slogdet's derivative (all of a)."""
    mesh = dropin.mesh(4, "explicit")
    a, t = dropin.spd(rng, N, dtype), dropin.random(rng, (N, N), dtype)
    b = dropin.promote(dropin.random(rng, (N, K), dtype))

    def solved(linalg):
        return lambda a: linalg.cho_solve(linalg.cho_factor(a, lower=lower), b)

    def loss(linalg):
        return lambda a: jnp.sum(jnp.abs(solved(linalg)(a)) ** 2)

    pa, pt = dropin.promote(a), dropin.promote(t)
    tangent = jax.jvp(solved(jsl), (pa,), (pt,))[1]
    gradient = jax.grad(loss(jsl))(pa)
    logdet_gradient = jax.grad(lambda a: jnp.linalg.slogdet(a)[1])(pa)
    ours_logdet = lambda a: jaxmg.cho_logdet(jaxmg.cho_factor(a, lower=lower))  # noqa: E731
    assert float(jnp.max(jnp.abs(gradient - jnp.conj(gradient).T))) > 1e-3  # not Hermitian
    for where in ("none", "mesh"):
        x, u = (pa, pt) if where == "none" else (dropin.place(a, ROWS, mesh),
                                                 dropin.place(t, ROWS, mesh))
        with jax.set_mesh(mesh) if where == "mesh" else contextlib.nullcontext():
            eager = jax.jvp(solved(jaxmg), (x,), (u,))[1]
            jitted = jax.jit(lambda x, u: jax.jvp(solved(jaxmg), (x,), (u,))[1])(x, u)
            grads = [jax.grad(loss(jaxmg))(x), jax.jit(jax.grad(loss(jaxmg)))(x)]
            logdet_grad = jax.grad(ours_logdet)(x)
        dropin.assert_close(eager, tangent, dtype)
        dropin.assert_close(jitted, tangent, dtype)
        for g in grads:
            dropin.assert_close(g, gradient, dtype)
        dropin.assert_close(logdet_grad, logdet_gradient, dtype)


@pytest.mark.parametrize("how", [REP, "columns", PLAIN])
def test_pos_solve_lower_derivatives_of_a_matrix_not_row_sharded(rng, how):
    """solve(a, b, assume_a="pos", lower=True) under jax.set_mesh with a
    replicated, column-sharded or on one device: grad, jit(grad) and jvp as
    JAX's (the read triangle's tangent was typed unlike the matrix read)."""
    mesh = dropin.mesh(4, "explicit")
    a, t = dropin.spd(rng, N, np.float64), dropin.random(rng, (N, N), np.float64)
    b = dropin.promote(dropin.random(rng, (N,), np.float64))

    def loss(linalg):
        return lambda a: jnp.sum(linalg.solve(a, b, assume_a="pos", lower=True) ** 2)

    pa, pt = dropin.promote(a), dropin.promote(t)
    gradient = jax.grad(loss(jsl))(pa)
    tangent = jax.jvp(lambda a: jsl.solve(a, b, assume_a="pos", lower=True), (pa,), (pt,))[1]
    with jax.set_mesh(mesh):
        if how == "columns":
            x, u = (jax.device_put(m, NamedSharding(mesh, P(None, "x"))) for m in (pa, pt))
        else:
            x, u = dropin.place(pa, how, mesh), dropin.place(pt, how, mesh)
        grads = [jax.grad(loss(api))(x), jax.jit(jax.grad(loss(api)))(x)]
        got = jax.jvp(lambda a: api.solve(a, b, assume_a="pos", lower=True), (x,), (u,))[1]
    for g in grads:
        dropin.assert_close(g, gradient, np.float64)
    dropin.assert_close(got, tangent, np.float64)


def test_numpy_cholesky_symmetrizes_a_column_sharded_matrix(rng):
    """jnp.linalg.cholesky's default symmetrize_input averages a with its
    transpose: with a's columns sharded the two terms came in different
    layouts, which explicit sharding refused to add."""
    mesh = dropin.mesh(4, "explicit")
    a = dropin.spd(rng, N, np.float64) + 0.01 * dropin.random(rng, (N, N), np.float64)
    pa = dropin.promote(a)
    loss = lambda linalg: lambda a: jnp.sum(linalg.cholesky(a) ** 2)  # noqa: E731
    with jax.set_mesh(mesh):
        columns = jax.device_put(pa, NamedSharding(mesh, P(None, "x")))
        got, grad = jaxmg.numpy.linalg.cholesky(columns), jax.grad(loss(jaxmg.numpy.linalg))(columns)
    dropin.assert_close(got, jnp.linalg.cholesky(pa), np.float64)
    dropin.assert_close(grad, jax.grad(loss(jnp.linalg))(pa), np.float64)


@pytest.mark.parametrize("devices", [1, 4])
def test_a_lower_factor_holds_no_more_memory_than_an_upper_one(rng, devices):
    """cho_factor(a, lower=True) factors a's transpose; the factor keeps a
    itself for derivatives, not that transpose (one more copy of A)."""
    import gc

    mesh = dropin.mesh(devices, "explicit")
    a = dropin.place(dropin.spd(rng, N, np.float64), ROWS, mesh)

    def held(lower):
        gc.collect()
        before = sum(x.nbytes for x in jax.live_arrays())
        f = jaxmg.cho_factor(a, lower=lower)
        jax.block_until_ready(f)
        gc.collect()
        return sum(x.nbytes for x in jax.live_arrays()) - before, f

    (upper_bytes, upper), (lower_bytes, lower) = held(False), held(True)
    assert upper_bytes > 0
    assert lower_bytes == upper_bytes
    c_u, c_l = np.asarray(upper[0]), np.asarray(lower[0])
    np.testing.assert_allclose(c_l, c_u.conj().T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(upper=False), dict(upper=True), dict(symmetrize_input=False)],
                         ids=str)
def test_an_eager_cholesky_compiles_one_program(rng, kw):
    """An eager jnp-style cholesky of a new shape compiles one program, as
    jnp's does: its symmetrization and triangle reads are compiled with the
    factorisation, not one small program each (every compiled program keeps
    memory mappings of its own, of which a process has a limited number)."""
    mesh = dropin.mesh(2)
    placed = dropin.place(dropin.spd(rng, 26, np.float64), ROWS, mesh)
    with helpers.compiled_programs() as compiled:
        got = jaxmg.cholesky(placed, **kw)
    np.testing.assert_allclose(got, jnp.linalg.cholesky(np.asarray(placed), **kw), rtol=1e-10,
                               atol=1e-10)
    assert len(compiled) <= 1  # none where an earlier test compiled it


# ---- factors as the solve of lax.custom_linear_solve and lax.custom_root ----

from jax.test_util import check_grads  # noqa: E402


def _spd_of(x):
    return x @ x.T + 3 * jnp.eye(x.shape[0], dtype=x.dtype)


def _solve_with_factor_of(a, b):
    """x with a x = b through lax.custom_linear_solve, whose solve (and
    transposed solve) is a cho_solve with a factor made outside it."""
    factor = jaxmg.cho_factor(a)
    matvec = lambda x: jnp.dot(a, x, precision="highest")  # noqa: E731
    return jax.lax.custom_linear_solve(matvec, b, lambda _, r: jaxmg.cho_solve(factor, r),
                                       symmetric=True)


def _root_with_factor_of(a, b):
    """x with a x - b = 0 through lax.custom_root, Newton's step and the
    tangent solve both cho_solves with one factor."""
    factor = jaxmg.cho_factor(a)
    step = lambda _, r: jaxmg.cho_solve(factor, r)  # noqa: E731
    tangent = lambda g, r: jax.lax.custom_linear_solve(g, r, step, symmetric=True)  # noqa: E731
    return jax.lax.custom_root(lambda x: jnp.dot(a, x, precision="highest") - b, b, step,
                               tangent)


@pytest.mark.parametrize("how", [_solve_with_factor_of, _root_with_factor_of],
                         ids=["custom_linear_solve", "custom_root"])
def test_factors_serve_as_solves_of_custom_linear_solve_and_custom_root(rng, how):
    """A factor closed over by the solves of lax's implicit-function
    primitives: values, under jit, and derivatives to second order against
    finite differences."""
    x0, b = rng.standard_normal((3, 3)), rng.standard_normal(3)
    want = np.linalg.solve(np.asarray(_spd_of(x0)), b)
    np.testing.assert_allclose(how(_spd_of(x0), b), want, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(how)(_spd_of(x0), b), want, rtol=1e-12)
    check_grads(lambda x, y: how(_spd_of(x), y), (x0, b), order=2, modes=("fwd", "rev"),
                rtol=1e-3)
