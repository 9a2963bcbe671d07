"""precision="mixed" through the public API: solve, potrs, cho_factor /
cho_solve, lu_factor / lu_solve on plain and row-sharded arrays, the
RefinementInfo they report, derivatives, jit and vmap, the float64 fallback
on a matrix that is not positive definite, and the options refused by name."""

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import helpers
import jaxmg

N = 48


def spd(rng, dtype=np.float64, n=N):
    return helpers.spd(rng, n, dtype, 100.0)


def general(rng, dtype=np.float64, n=N):
    return helpers.random_matrix(rng, n, dtype, n) + n**0.5 * np.eye(n, dtype=dtype)


def close(x, a, b, op=lambda a: a):
    want = np.linalg.solve(op(a), b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-11 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_solve_reaches_float64_accuracy_and_reports_its_refinement(rng, dtype, assume_a):
    a = spd(rng, dtype) if assume_a == "pos" else general(rng, dtype)
    b = helpers.random_matrix(rng, N, dtype, 3)
    x, info = jaxmg.solve(a, b, assume_a=assume_a, precision="mixed", return_info=True)
    close(x, a, b)
    assert isinstance(info, jaxmg.RefinementInfo)
    assert np.asarray(info.iterations).shape == (3,) and (np.asarray(info.iterations) >= 1).all()
    assert not np.asarray(info.fallback).any() and int(np.max(info.info)) == 0
    assert (np.asarray(info.backward_error) <= 1e-15).all()


def test_potrs_on_rows_sharded_over_two_devices(rng):
    mesh = helpers.mesh(2)
    a, b = spd(rng), helpers.random_matrix(rng, N, np.float64, 2)
    x, info = jaxmg.potrs(helpers.rows(a, mesh), b, precision="mixed", return_info=True)
    close(x, a, b)
    assert not np.asarray(info.fallback).any()


def test_cho_factor_reads_the_triangle_it_is_told(rng):
    a, b = spd(rng), helpers.random_matrix(rng, N, np.float64, 2)
    lower_only = np.tril(a) + np.triu(np.full_like(a, 7.0), 1)  # the other triangle is junk
    f = jaxmg.cho_factor(lower_only, lower=True, precision="mixed")
    assert isinstance(f, jaxmg.MixedFactor) and int(f.info) == 0
    # the norms its solves refine with are the Hermitian matrix's, not the junk's
    anorm, row_floor = f.norms
    assert float(anorm) == pytest.approx(np.abs(a).sum(1).max(), rel=1e-12)
    np.testing.assert_allclose(np.asarray(row_floor),
                               np.finfo(np.float64).eps * np.linalg.norm(a, axis=1), rtol=1e-12)
    close(jaxmg.cho_solve(f, b), a, b)
    close(jaxmg.cho_solve(f, b[:, 0]), a, b[:, 0])


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_lu_factor_and_lu_solve_in_every_op(rng, dtype, trans):
    a, b = general(rng, dtype), helpers.random_matrix(rng, N, dtype, 2)
    f = jaxmg.lu_factor(a, precision="mixed")
    close(jaxmg.lu_solve(f, b, trans=trans), a, b, [lambda m: m, lambda m: m.T,
                                                    lambda m: m.conj().T][trans])


@pytest.mark.parametrize("scaled", ["rows", "columns"])
def test_badly_scaled_matrices_are_as_accurate_as_float64_lu(rng, scaled):
    """Scales over six orders of magnitude: the residual's rounding is then far
    below what the normwise floor estimates, and refinement must go on to it,
    in every op (the transposed ones are refined against A^H). Judged row by
    row, |r| / (|A| |x| + |b|), where stopping at the normwise floor would
    show in the small rows; the forward error, which the conditioning spreads
    by a decade between seeds for both solvers, within 100x of JAX's; both
    measured against x refined with residuals in extended precision (NumPy's
    own solve runs LAPACK's LU as JAX's does, and can agree with it to the
    bit, which would make JAX's error 0)."""
    base = helpers.random_matrix(rng, N, np.float64) + 7 * np.eye(N)
    d = np.geomspace(1.0, 1e6, N)
    a = base * d[None, :] if scaled == "columns" else d[:, None] * base
    b = helpers.random_matrix(rng, N, np.float64, 2)
    f = jaxmg.lu_factor(a, precision="mixed")
    lu_piv = jax.scipy.linalg.lu_factor(a)
    eps = np.finfo(float).eps
    for trans, op in enumerate([lambda m: m, lambda m: m.T, lambda m: m.conj().T]):
        m = op(a)
        want = _refined_solution(m, b)

        def errors(x):
            x = np.asarray(x)
            rows = np.abs(b - m @ x) / (np.abs(m) @ np.abs(x) + np.abs(b))
            return rows.max(), np.abs(x - want).max() / np.abs(want).max()

        backward, forward = errors(jaxmg.lu_solve(f, b, trans=trans))
        reference = errors(jax.scipy.linalg.lu_solve(lu_piv, b, trans=trans))
        assert backward <= max(10 * reference[0], 100 * eps), (trans, backward, reference)
        assert forward <= max(100 * reference[1], 100 * eps), (trans, forward, reference)


@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_one_dominant_row_is_refined_to_float64_accuracy_or_falls_back(rng, assume_a):
    """A penalty entry on the diagonal, 100 to 1000 times ||A||_inf: the
    largest row's rounding says nothing of the others', whose residuals must
    still reach theirs. Stopping at the largest row's (a normwise floor)
    left x thousands of times less accurate than float64's, reported
    converged. Judged as above, row by row and by the forward error."""
    n = 400
    u = np.linalg.qr(rng.standard_normal((n, n)))[0]
    v = u if assume_a == "pos" else np.linalg.qr(rng.standard_normal((n, n)))[0]
    a = (u * np.geomspace(1.0, 1 / 3e7, n)) @ v.T
    a = (a + a.T) / 2 if assume_a == "pos" else a
    a[0, 0] += (100 if assume_a == "pos" else 1000) * np.abs(a).sum(1).max()
    b = rng.standard_normal((n, 1))
    want = _refined_solution(a, b)

    def errors(x):
        x = np.asarray(x)
        rows = np.abs(b - a @ x) / (np.abs(a) @ np.abs(x) + np.abs(b))
        return rows.max(), np.abs(x - want).max() / np.abs(want).max()

    x, info = jaxmg.solve(a, b, assume_a=assume_a, precision="mixed", return_info=True)
    backward, forward = errors(x)
    reference = errors(jax.scipy.linalg.solve(a, b, assume_a=assume_a))
    eps = np.finfo(float).eps
    assert backward <= max(10 * reference[0], 100 * eps), (backward, reference, info)
    assert forward <= max(10 * reference[1], 100 * eps), (forward, reference, info)


@pytest.mark.parametrize("size", [1e-39, 1e39])
@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_a_matrix_near_float64_s_range_limits_refines_as_at_unit_scale(rng, assume_a, size):
    """A power of two brings A into the low precision's range; that power
    (2^127 and beyond here) lies outside float32's, and held there it made
    the factorisation fail (info 1 for a matrix of condition 100) and the
    solve fall back to float64."""
    a = (spd(rng) if assume_a == "pos" else general(rng)) * size
    b = helpers.random_matrix(rng, N, np.float64, 2)
    x, info = jaxmg.solve(a, b, assume_a=assume_a, precision="mixed", return_info=True)
    assert int(info.factor_info) == 0 and not np.any(np.asarray(info.fallback))
    assert np.all(np.asarray(info.iterations) <= 6)
    close(x, a, b)
    f = jaxmg.lu_factor(a, precision="mixed") if assume_a == "gen" else jaxmg.cho_factor(
        a, precision="mixed")
    assert int(f.info) == 0


def _refined_solution(m, b, steps=3):
    """m^-1 b to about float64's rounding of the exact one: LU solves
    refined with residuals in extended precision (np.longdouble)."""
    x = np.linalg.solve(m, b)
    wide = m.astype(np.longdouble)
    for _ in range(steps):
        r = b.astype(np.longdouble) - wide @ x.astype(np.longdouble)
        x = x + np.linalg.solve(m, r.astype(np.float64))
    return x


def test_transposed_solves_and_gradients_factor_once(rng, monkeypatch):
    """lu_solve(trans=1 or 2) and the gradient of a general solve run A^T's
    and A^H's sweeps on A's one factorisation, not a second of A^T."""
    from jaxmg._src.mixed import solvers

    calls = []
    factorise = solvers.factorise
    monkeypatch.setattr(solvers, "factorise", lambda *a, **k: calls.append(1) or factorise(*a, **k))
    jax.clear_caches()  # counted as traced: a program compiled by an earlier test would hide them
    a, b = general(rng), helpers.random_matrix(rng, N, np.float64, 2)
    f = jaxmg.lu_factor(a, precision="mixed")
    for trans in (1, 2):
        close(jaxmg.lu_solve(f, b, trans=trans), a, b, lambda m: m.T)
    assert len(calls) == 1
    calls.clear()
    jax.grad(lambda a: jnp.sum(jaxmg.solve(a, b, precision="mixed") ** 2))(a)
    assert len(calls) == 1


@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_derivatives_match_the_float64_solver(rng, assume_a):
    a = spd(rng) if assume_a == "pos" else general(rng)
    b = helpers.random_matrix(rng, N, np.float64, 2)

    def loss(a, b, precision):
        return jnp.sum(jaxmg.solve(a, b, assume_a=assume_a, precision=precision) ** 2)

    got = jax.grad(loss, argnums=(0, 1))(a, b, "mixed")
    want = jax.grad(loss, argnums=(0, 1))(a, b, "highest")
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-12)


def test_jit_and_vmap(rng):
    a = spd(rng)
    bs = helpers.random_matrix(rng, 4, np.float64, N)  # 4 right-hand sides, one per batch
    solve = jax.jit(functools.partial(jaxmg.solve, assume_a="pos", precision="mixed"))
    close(solve(a, bs[0]), a, bs[0])
    xs = jax.vmap(lambda b: jaxmg.solve(a, b, assume_a="pos", precision="mixed"))(bs)
    close(np.asarray(xs).T, a, bs.T)
    batch = np.stack([a, 2 * a])
    x = jaxmg.solve(batch, bs[:2], assume_a="pos", precision="mixed")
    close(x[1], 2 * a, bs[1])


def test_not_positive_definite_falls_back_and_fails_like_float64(rng):
    a = spd(rng)
    a[5, 5] = -1e3
    b = helpers.random_matrix(rng, N, np.float64, 1)
    x, info = jaxmg.solve(a, b, assume_a="pos", precision="mixed", return_info=True)
    assert np.asarray(info.fallback).all() and int(np.max(info.info)) > 0
    assert np.isnan(np.asarray(x)).all()
    with pytest.raises(jaxmg.LinAlgError, match="not positive definite"):
        jaxmg.solve(a, b, assume_a="pos", precision="mixed", on_failure="raise")


def test_highest_precision_return_info(rng):
    a, b = spd(rng), helpers.random_matrix(rng, N, np.float64, 2)
    x, info = jaxmg.solve(a, b, assume_a="pos", return_info=True)
    close(x, a, b)
    assert int(info) == 0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(precision="low"), ValueError, r"precision must be one of \('highest', 'mixed'\)"),
        (dict(precision="mixed", tile_size=64), ValueError, r"tile_size does not apply"),
        (dict(precision="mixed", backend="jaxmg"), ValueError, r"backend='jaxmg' names a float64"),
        (dict(precision="mixed", donate=True), ValueError, r"cannot give a's buffer away"),
    ],
    ids=["unknown", "tile_size", "backend", "donate"],
)
def test_refused_options_name_the_argument(rng, kwargs, error, match):
    a, b = spd(rng), np.ones(N)
    with pytest.raises(error, match=match):
        jaxmg.potrs(a, b, **kwargs)


def test_single_precision_matrix_is_refused_with_the_fix(rng):
    a = spd(rng).astype(np.float32)
    with pytest.raises(TypeError, match=r"takes float64 or complex128.*float32.*precision='highest'"):
        jaxmg.solve(a, np.ones(N, np.float32), assume_a="pos", precision="mixed")
    # the LAPACK-named potrs promotes no integers: the same words, naming a's own dtype
    with pytest.raises(TypeError, match=r"jaxmg: precision='mixed' .* a has dtype int64"):
        jaxmg.potrs(np.ones((N, N), np.int64), np.ones(N), precision="mixed")
    f64 = jaxmg.cho_factor(spd(rng), precision="mixed")
    x = jaxmg.cho_solve(f64, np.ones(N, np.float32))  # b promoted, as jax.scipy promotes
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x, jaxmg.cho_solve(f64, np.ones(N)))
    with pytest.raises(TypeError, match=r"lu_solve takes lu_factor's factor; this one is "
                                         r"cho_factor's \(solve with jaxmg.cho_solve\)"):
        jaxmg.lu_solve(f64, np.ones(N))
    lu_f = jaxmg.lu_factor(spd(rng), precision="mixed")
    with pytest.raises(TypeError, match=r"cho_solve takes cho_factor's factor; this one is "
                                         r"lu_factor's \(solve with jaxmg.lu_solve\)"):
        jaxmg.cho_solve(lu_f, np.ones(N))
    a = spd(rng)
    x = jaxmg.solve(a, np.ones(N, np.float32), assume_a="pos", precision="mixed")  # promoted, as JAX does
    assert x.dtype == np.float64 and np.abs(a @ np.asarray(x) - 1).max() < 1e-12


@pytest.mark.parametrize("cond", [1e4, 1e8, 1e12])
def test_ill_conditioned_spd_reaches_the_float64_floor_or_falls_back(rng, cond):
    """Whatever the conditioning, x is finite with a float64 backward error:
    BF16 failing sends the factorisation to BF16x3, a refinement that stalls
    (or a factor that is not finite) to GMRES-IR and the float64 fallback."""
    n = 128
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = (q * np.logspace(0, -np.log10(cond), n)) @ q.T
    a = (a + a.T) / 2
    b = rng.standard_normal((n, 2))
    x, info = jaxmg.solve(a, b, assume_a="pos", precision="mixed", return_info=True)
    x = np.asarray(x)
    assert np.isfinite(x).all()
    berr = np.abs(b - a @ x).max(0) / (np.abs(a).sum(1).max() * np.abs(x).max(0) + np.abs(b).max(0))
    assert (berr <= 1e-15).all(), (berr, info)
    assert (np.asarray(info.backward_error) <= 1e-15).all()


@pytest.mark.parametrize("lower", [False, True])
def test_solve_lower_derivative_is_jax_scipy_s(rng, lower):
    """solve(assume_a="pos", lower=...) differentiates like jax.scipy's: its
    tangent solve uses a as given, in both precisions."""
    import jax.scipy.linalg as jsl

    a, b = spd(rng), helpers.random_matrix(rng, N, np.float64, 2)

    def grad(solve, **kw):
        return np.asarray(jax.grad(lambda a: jnp.sum(solve(a, b, assume_a="pos", lower=lower,
                                                          **kw) ** 3))(a))

    want = grad(jsl.solve)
    for kw in ({}, {"precision": "mixed"}):
        np.testing.assert_allclose(grad(jaxmg.solve, **kw), want, rtol=1e-8, atol=1e-14)


def test_factor_solves_keep_on_failure(rng):
    a = spd(rng)
    a[5, 5] = -1e3
    f = jaxmg.cho_factor(a, precision="mixed", on_failure="raise")
    with pytest.raises(jaxmg.LinAlgError, match="not positive definite"):
        jaxmg.cho_solve(f, np.ones(N))
    g = np.zeros((N, N))
    with pytest.raises(jaxmg.LinAlgError, match="singular"):
        jaxmg.lu_solve(jaxmg.lu_factor(g, precision="mixed", on_failure="raise"), np.ones(N))


@pytest.mark.parametrize("spec", [None, P(None, "x"), P("x", None)], ids=["mesh only", "columns", "rows"])
def test_mesh_and_spec_place_the_rows(rng, spec):
    mesh = helpers.mesh(2)
    a, b = spd(rng), helpers.random_matrix(rng, N, np.float64, 2)
    close(jaxmg.potrs(a, b, mesh=mesh, spec=spec, precision="mixed"), a, b)


@pytest.mark.parametrize("call", ["solve-pos", "solve-gen", "cho_factor", "lu_factor"])
@pytest.mark.parametrize("kwargs, error, match", [
    (dict(mesh="x"), TypeError, "mesh must be a jax.sharding.Mesh, got str"),
    (dict(spec=P("y", None)), ValueError, "spec names axis 'y', not in the mesh axes"),
    (dict(spec="x"), TypeError, "spec must be a jax.sharding.PartitionSpec"),
    (dict(mesh="1 device"), ValueError, r"a lives on devices \[0, 1\] but mesh= has devices "
                                        r"\[0\]"),
], ids=["mesh-str", "spec-axis", "spec-str", "mesh-other-devices"])
def test_mesh_and_spec_are_checked_as_at_highest_precision(rng, call, kwargs, error, match):
    a = helpers.rows(spd(rng, n=16), helpers.mesh(2))
    if kwargs.get("mesh") == "1 device":
        kwargs = dict(mesh=helpers.mesh(1))
    fn = {"solve-pos": lambda **kw: jaxmg.solve(a, np.ones(16), assume_a="pos", **kw),
          "solve-gen": lambda **kw: jaxmg.solve(a, np.ones(16), **kw),
          "cho_factor": lambda **kw: jaxmg.cho_factor(a, **kw),
          "lu_factor": lambda **kw: jaxmg.lu_factor(a, **kw)}[call]
    for precision in ("highest", "mixed"):
        with pytest.raises(error, match=match):
            fn(precision=precision, **kwargs)


def test_a_spec_over_two_axes_is_refused(rng):
    mesh = jax.make_mesh((1, 2), ("r", "c"), devices=helpers.devices(2))
    with pytest.raises(ValueError, match=r"takes rows sharded over one mesh axis"):
        jaxmg.potrs(spd(rng), np.ones(N), mesh=mesh, spec=P("r", "c"), precision="mixed")


@pytest.mark.parametrize("sharded", ["a", "b"])
def test_a_batch_sharded_along_its_batch_axis_on_explicit_axes_is_refused(rng, sharded):
    """Refused at once, naming precision and the fix, where it used to fail
    inside the factorisation with JAX's scatter message (a NumPy a beside
    such a b is placed like it, so either may be named)."""
    from jax.sharding import NamedSharding

    mesh = helpers.mesh(2)
    a = np.stack([spd(rng)] * 2)
    b = rng.normal(size=(2, N, 1))
    if sharded == "a":
        a = jax.device_put(a, NamedSharding(mesh, P("x", None, None)))
    else:
        b = jax.device_put(b, NamedSharding(mesh, P("x", None, None)))
    with pytest.raises(ValueError, match=r"precision='mixed' does not take .*: reshard"):
        jaxmg.solve(a, b, assume_a="pos", precision="mixed")


@pytest.mark.parametrize("lower", [False, True], ids=["upper", "lower"])
def test_spd_solve_of_order_1024_reads_one_triangle(rng, lower):
    # Two right-hand sides: A is mirrored once (hermitian.mirrored), on CPUs by
    # a sum of triangles: XLA's CPU compiler crashed on the select of a
    # against a^T from order 1024.
    n = 1024
    a, b = spd(rng, n=n), helpers.random_matrix(rng, n, np.float64, 2)
    junk = np.triu(np.full_like(a, 3.0), 1)
    given = np.tril(a) + junk if lower else np.triu(a) + junk.T
    x, info = jaxmg.solve(given, b, assume_a="pos", lower=lower, precision="mixed",
                          return_info=True)
    close(x, a, b)
    assert not np.asarray(info.fallback).any()


MIXED_CALLS = {
    "solve": lambda a, b: jaxmg.solve(a, b, precision="mixed"),
    "solve pos": lambda a, b: jaxmg.solve(a, b, assume_a="pos", precision="mixed"),
    "potrs": lambda a, b: jaxmg.potrs(a, b, precision="mixed"),
    "cho_solve": lambda a, b: jaxmg.cho_solve(jaxmg.cho_factor(a, precision="mixed"), b),
    "lu_solve": lambda a, b: jaxmg.lu_solve(jaxmg.lu_factor(a, precision="mixed"), b, trans=1),
}


@pytest.mark.parametrize("bshape", [(0,), (0, 3)], ids=["b(0,)", "b(0,3)"])
def test_an_empty_system_gives_what_jax_scipy_gives(bshape):
    import jax.scipy.linalg as jsl

    a, b = np.zeros((0, 0)), np.zeros(bshape)
    want = jsl.solve(a, b)
    for name, call in MIXED_CALLS.items():
        for fn in (call, jax.jit(call)):
            x = fn(a, b)
            assert x.shape == want.shape and x.dtype == want.dtype, name
    x, info = jaxmg.solve(a, b, precision="mixed", return_info=True)
    assert np.shape(info.iterations) == bshape[1:] and np.shape(info.info) == ()
    assert not np.asarray(info.fallback).any()


@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_a_non_finite_column_of_b_comes_back_nan_not_zero(rng, assume_a):
    """Refinement cannot improve on its start x = 0 there: that column must
    not come back as zeros (jax.scipy propagates the NaN); the others are
    solved as usual."""
    a = spd(rng, n=16) if assume_a == "pos" else general(rng, n=16)
    b = helpers.random_matrix(rng, 16, np.float64, 3)
    b[4, 0], b[:, 2] = np.inf, 0.0
    x, info = jaxmg.solve(a, b, assume_a=assume_a, precision="mixed", return_info=True)
    x = np.asarray(x)
    assert np.isnan(x[:, 0]).all()
    close(x[:, 1:], a, b[:, 1:])
    assert np.asarray(info.fallback).tolist() == [True, False, False]
    assert np.isinf(np.asarray(info.backward_error)[0])
    # info and factor_info describe the matrix (one per matrix), which is fine
    assert np.shape(info.info) == np.shape(info.factor_info) == () and int(info.info) == 0
    f = jaxmg.lu_factor(a, precision="mixed")
    assert np.isnan(np.asarray(jaxmg.lu_solve(f, b[:, 0], trans=2))).all()


def test_cho_factor_lower_derivative_is_the_matrix_as_given(rng):
    """cho_factor(lower=True)'s solves differentiate a as given, as
    solve(assume_a="pos", lower=True) does: the full matrix's derivative."""
    a, b = spd(rng, n=16), helpers.random_matrix(rng, 16, np.float64, 2)
    got = jax.grad(lambda a: jnp.sum(jaxmg.cho_solve(
        jaxmg.cho_factor(a, lower=True, precision="mixed"), b) ** 2))(a)
    want = jax.grad(lambda a: jnp.sum(jnp.linalg.solve(a, b) ** 2))(a)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_a_tiny_b_is_refined_to_float64_accuracy(rng, assume_a):
    """b of entries near 1e-300: the residuals would be subnormal, which
    XLA's CPU code flushes to zero, and refinement stopped at a float32-like
    x (relative error 1e-8) reporting a backward error of 0."""
    a = spd(rng, n=16) if assume_a == "pos" else general(rng, n=16)
    b = helpers.random_matrix(rng, 16, np.float64, 2) * 1e-300
    x, info = jaxmg.solve(a, b, assume_a=assume_a, precision="mixed", return_info=True)
    want = np.linalg.solve(a, b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-13 * np.abs(want).max()
    assert (np.asarray(info.backward_error) > 0).all()


@pytest.mark.parametrize("routine", ["cho", "lu"])
def test_factors_of_a_batch_and_solves_of_a_batch_of_b(rng, routine):
    """cho_factor / lu_factor(precision="mixed") take leading batch
    dimensions, and their solves a batch of b, as precision="highest" does
    (they once refused both, pointing at jax.vmap)."""
    factor, solve = ((jaxmg.cho_factor, jaxmg.cho_solve) if routine == "cho"
                     else (jaxmg.lu_factor, jaxmg.lu_solve))
    make = spd if routine == "cho" else general
    a = np.stack([make(rng, n=16) for _ in range(3)])
    b = rng.normal(size=(3, 16, 2))
    f = factor(a, precision="mixed")
    assert isinstance(f, jaxmg.MixedFactor) and np.asarray(f.info).shape == (3,)
    x = solve(f, b)
    assert x.shape == (3, 16, 2)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-12)
    one = solve(factor(a[0], precision="mixed"), b)  # one factor, a batch of b
    np.testing.assert_allclose(np.asarray(one), np.linalg.solve(a[0], b), rtol=1e-10, atol=1e-12)


def test_wrong_forms_are_refused_as_highest_refuses_them(rng):
    import jax.scipy.linalg as jsl

    a = spd(rng, n=8)
    with pytest.raises(TypeError, match=r"does not unpack as jax.scipy's \(c, lower\).*jaxmg.cho_solve"):
        jsl.cho_solve(jaxmg.cho_factor(a, precision="mixed"), np.ones(8))
    with pytest.raises(TypeError, match=r"\(lu, piv\).*jaxmg.lu_solve"):
        lu_, piv = jaxmg.lu_factor(a, precision="mixed")
    with pytest.raises(TypeError, match=r"cho_logdet needs a float64 factor.*precision='highest'"):
        jaxmg.cho_logdet(jaxmg.cho_factor(a, precision="mixed"))
    for error in (ValueError, TypeError):  # as precision="highest" refuses it
        with pytest.raises(error, match=r"jaxmg: a must be square, got shape \(8, 6\)"):
            jaxmg.potrs(a[:, :6], np.ones(8), precision="mixed")


def test_an_order_the_devices_do_not_divide_is_solved_on_the_mesh(rng):
    """N = 21 over 2 devices with mesh=: precision="highest" solves it; the
    mixed solves pad A (sharded rows must divide evenly) and give x of N rows,
    the info of A's own pivots, and the derivative of A."""
    import jax.scipy.linalg as jsl

    mesh, n = helpers.mesh(2), 21
    a, s = general(rng, n=n), spd(rng, n=n)
    b = helpers.random_matrix(rng, n, np.float64, 2)
    close(jaxmg.solve(a, b, mesh=mesh, precision="mixed"), a, b)
    x, info = jaxmg.solve(s, b[:, 0], assume_a="pos", mesh=mesh, precision="mixed", return_info=True)
    close(x, s, b[:, 0])
    assert x.shape == (n,) and not bool(info.fallback)
    close(jaxmg.lu_solve(jaxmg.lu_factor(a, mesh=mesh, precision="mixed"), b, trans=1), a, b, lambda m: m.T)
    # the padding is sized from the triangle read, so the norms refined with are A's own
    held = np.tril(s) + np.triu(np.full_like(s, 1e12), 1)
    f = jaxmg.cho_factor(held, lower=True, mesh=mesh, precision="mixed")
    close(jaxmg.cho_solve(f, b), s, b)
    (anorm, row_floor), (want_anorm, want_floor) = f.norms, jaxmg.cho_factor(s, precision="mixed").norms
    np.testing.assert_allclose(np.asarray(anorm), np.asarray(want_anorm))
    np.testing.assert_allclose(np.asarray(row_floor)[:n], np.asarray(want_floor))  # then the pad's
    singular = a.copy()
    singular[:, 4] = 0
    x, info = jaxmg.solve(singular, b, mesh=mesh, precision="mixed", return_info=True)
    assert np.isnan(np.asarray(x)).all() and int(info.info) == 5
    with jax.set_mesh(mesh):
        got = jax.grad(lambda s: jnp.sum(jaxmg.solve(s, b, assume_a="pos", mesh=mesh,
                                                      precision="mixed") ** 2))(s)
    want = jax.grad(lambda s: jnp.sum(jsl.solve(s, b, assume_a="pos") ** 2))(s)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-12)


# Each route (solve and cho_solve share the SPD one, solve and lu_solve the
# general one) on both axis types, by one routine each: a case compiles for
# about 12 s.
@pytest.mark.parametrize("routine, axis_type", [
    ("solve pos", "auto"), ("cho_solve", "explicit"), ("solve gen", "explicit"),
    ("lu_solve", "auto")])
def test_x_is_sharded_like_b(rng, axis_type, routine):
    """b's rows sharded beside a's: x comes back with b's sharding, eager and
    under jit, and the derivatives hold (on explicit axes jit, eager grad and
    jvp once refused such a b: the refinement's x did not match b's type)."""
    import jax.scipy.linalg as jsl
    from jax.sharding import AxisType, NamedSharding

    kind = AxisType.Explicit if axis_type == "explicit" else AxisType.Auto
    mesh = jax.make_mesh((2,), ("x",), axis_types=(kind,), devices=helpers.devices(2))
    pos = routine in ("solve pos", "cho_solve")
    a = spd(rng) if pos else general(rng)
    b = helpers.random_matrix(rng, N, np.float64, 3)
    rows = NamedSharding(mesh, P("x", None))
    sa, sb = jax.device_put(a, rows), jax.device_put(b, rows)

    def call(a, b):
        if routine.startswith("solve"):
            return jaxmg.solve(a, b, assume_a="pos" if pos else "gen", precision="mixed")
        if pos:
            return jaxmg.cho_solve(jaxmg.cho_factor(a, precision="mixed"), b)
        return jaxmg.lu_solve(jaxmg.lu_factor(a, precision="mixed"), b)

    x = call(sa, sb)
    close(x, a, b)
    assert x.sharding.is_equivalent_to(rows, 2), x.sharding
    with jax.set_mesh(mesh):
        y = jax.jit(call)(sa, sb)
        g = jax.jit(jax.grad(lambda b: jnp.sum(call(sa, b) ** 2)))(sb)
    close(y, a, b)
    if kind == AxisType.Explicit:
        assert y.sharding.is_equivalent_to(rows, 2), y.sharding
    want = 2 * np.linalg.solve(a.T, np.linalg.solve(a, b))
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-9, atol=1e-12)

    def reference(a, b):
        if routine.startswith("solve"):
            return jsl.solve(a, b, assume_a="pos" if pos else "gen")
        if pos:  # a factor's solves differentiate a as given, as a solve does
            return jnp.linalg.solve(a, b)
        return jsl.lu_solve(jsl.lu_factor(a), b)

    loss = lambda solver, b: lambda a: jnp.sum(solver(a, b) ** 2)  # noqa: E731
    tangent = helpers.random_matrix(rng, N, np.float64)
    with jax.set_mesh(mesh):
        ga = jax.grad(loss(call, sb))(sa)
        _, ta = jax.jvp(lambda a: call(a, sb), (sa,), (jax.device_put(tangent, rows),))
    np.testing.assert_allclose(np.asarray(ga), jax.grad(loss(reference, b))(a), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ta), jax.jvp(lambda a: reference(a, b), (a,), (tangent,))[1],
                               rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_a_one_device_explicit_mesh(rng, assume_a):
    """a on a one-device mesh of explicit axes, P("x", None): its rows are
    not split, and the solve's operands must not carry the axis in their
    type (the SPD solve once refused to add the norms' unsharded parts)."""
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Explicit,), devices=helpers.devices(1))
    a = spd(rng) if assume_a == "pos" else general(rng)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    sa = jax.device_put(a, NamedSharding(mesh, P("x", None)))
    close(jaxmg.solve(sa, b, assume_a=assume_a, precision="mixed"), a, b)
    with jax.set_mesh(mesh):
        close(jax.jit(lambda a: jaxmg.solve(a, b, assume_a=assume_a, precision="mixed"))(sa), a, b)


def test_vmap_of_numpy_matrices_with_mesh(rng):
    """Under vmap a NumPy a is traced, so it is not moved to the mesh before
    the solve's programs: they must still find its devices."""
    mesh = helpers.mesh(2)
    a = np.stack([general(rng, n=16), general(rng, n=16)])
    b = helpers.random_matrix(rng, 2, np.float64, 16)
    x = jax.vmap(lambda a, b: jaxmg.solve(a, b, mesh=mesh, precision="mixed"))(a, b)
    for i in range(2):
        close(x[i], a[i], b[i])


def failing_at(factor, update: str, seen: list | None = None):
    """factor (a blocked factorisation), reporting a failure (info 3) where it
    runs with `update`; each call's (update, span) is appended to seen."""
    def wrapped(a, scale, *, cfg, rows, **kwargs):
        if seen is not None:
            seen.append((cfg.update, cfg.span))
        f, info = factor(a, scale, cfg=cfg, rows=rows, **kwargs)
        return f, jnp.where(cfg.update == update, jnp.int32(3), info)
    return wrapped


def test_a_failed_low_precision_factorisation_goes_to_float64_at_once(rng, monkeypatch):
    """Where FP16 cannot factor A the solve is float64's, with no second
    low-precision factorisation before it (on GPUs one cost about what the
    float64 Cholesky does, and twice that where it did not refine: api.py),
    and no refinement: every column falls back, after 0 solves, and info
    tells where the factorisation failed. An LU that fails meets a singular
    matrix: the same."""
    from jaxmg._src.mixed import cholesky as chol, lu

    seen = []
    monkeypatch.setattr(chol, "_cholesky", failing_at(chol._cholesky, "fp16", seen))
    monkeypatch.setattr(lu, "_lu", failing_at(lu._lu, "bf16x3", seen))
    s, b = spd(rng, n=16), helpers.random_matrix(rng, 16, np.float64, 2)
    for solve in (lambda s, b: jaxmg.solve(s, b, assume_a="pos", precision="mixed", return_info=True),
                  jax.jit(lambda s, b: jaxmg.solve(s, b, assume_a="pos", precision="mixed",
                                                   return_info=True))):
        seen.clear()
        jax.clear_caches()  # each is traced anew, and so calls the patched factorisation
        x, info = solve(s, b)
        assert seen == [("fp16", None)]
        assert int(info.factor_info) == 3 and int(info.info) == 0
        assert np.asarray(info.fallback).all() and not np.asarray(info.iterations).any()
        close(x, s, b)
    seen.clear()
    _, info = jaxmg.solve(general(rng, n=16), b, precision="mixed", return_info=True)
    assert seen == [("bf16x3", None)] and int(info.factor_info) == 3


def test_vmap_over_row_sharded_spd_matrices_whose_factorisations_fail(rng, monkeypatch):
    """Under vmap over row-sharded operands of explicit axes, matrices whose
    low-precision factorisation failed are each solved by the float64
    fallback, through solve and through cho_factor / cho_solve."""
    from jax.sharding import NamedSharding

    from jaxmg._src.mixed import cholesky as chol

    monkeypatch.setattr(chol, "_cholesky", failing_at(chol._cholesky, "fp16"))
    jax.clear_caches()
    mesh = helpers.mesh(2)
    s = np.stack([spd(rng, n=16), spd(rng, n=16)])
    b = helpers.random_matrix(rng, 2, np.float64, 16)
    sharded = jax.device_put(s, NamedSharding(mesh, P(None, "x", None)))
    x, info = jax.vmap(lambda a, b: jaxmg.solve(a, b, assume_a="pos", precision="mixed",
                                                return_info=True))(sharded, b)
    assert np.asarray(info.factor_info).tolist() == [3, 3]
    assert np.asarray(info.fallback).all() and np.asarray(info.info).tolist() == [0, 0]
    y = jax.vmap(lambda a, b: jaxmg.cho_solve(jaxmg.cho_factor(a, precision="mixed"), b))(sharded, b)
    for i in range(2):
        close(x[i], s[i], b[i])
        close(y[i], s[i], b[i])


def test_vmap_over_row_sharded_spd_matrices_one_not_positive_definite(rng, monkeypatch):
    """Panels of 8 rows, so that the factorisations have stops between block
    columns: under vmap, over row-sharded operands of explicit axes, each
    matrix still gets its own answer and order (the batch stops only where
    every matrix failed: test_mixed_precision)."""
    from jax.sharding import NamedSharding
    from scipy.linalg import lapack

    from jaxmg._src.mixed import api

    monkeypatch.setattr(api, "SPD", dict(api.SPD, block_size=8))
    s = np.stack([spd(rng, n=32), spd(rng, n=32)])
    s[1, 20, 20] = -5.0
    b = helpers.random_matrix(rng, 2, np.float64, 32)
    sharded = jax.device_put(s, NamedSharding(helpers.mesh(2), P(None, "x", None)))
    x, info = jax.vmap(lambda a, b: jaxmg.solve(a, b, assume_a="pos", precision="mixed",
                                                return_info=True))(sharded, b)
    order = lapack.dpotrf(s[1], lower=True)[1]
    assert order > 16  # in the third block column of four
    assert np.asarray(info.factor_info).tolist() == [0, order]
    assert np.asarray(info.info).tolist() == [0, order]
    close(x[0], s[0], b[0])
    assert np.all(np.isnan(np.asarray(x[1])))


# --------------------------------------------------------------------------
# General matrices through the Cholesky factor of A^H A (from GRAM_FROM;
# lowered here to this file's order)
# --------------------------------------------------------------------------

@pytest.fixture
def gram_route(monkeypatch):
    from jaxmg._src.mixed import api

    monkeypatch.setattr(api, "GRAM_FROM", N)


def uniform_general(rng, dtype, cond, n=N):
    """U diag(s) V^H with s from 1 down to 1 / cond."""
    u, _ = np.linalg.qr(helpers.random_matrix(rng, n, dtype))
    v, _ = np.linalg.qr(helpers.random_matrix(rng, n, dtype))
    return ((u * np.geomspace(1.0, 1.0 / cond, n)) @ v.conj().T).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_gram_route_factors_no_lu_and_reaches_float64_accuracy(rng, gram_route, dtype):
    from jaxmg._src.mixed import normal

    a, b = uniform_general(rng, dtype, 10.0), helpers.random_matrix(rng, N, dtype, 3)
    f = jaxmg.lu_factor(a, precision="mixed")
    assert isinstance(f.factor, normal.GramFactor) and int(f.info) == 0
    x, info = jaxmg.solve(a, b, precision="mixed", return_info=True)
    close(x, a, b)
    assert not np.asarray(info.fallback).any() and (np.asarray(info.iterations) >= 1).all()
    assert (np.asarray(info.backward_error) <= 1e-15).all()


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_gram_route_solves_every_op(rng, gram_route, dtype, trans):
    a, b = uniform_general(rng, dtype, 10.0), helpers.random_matrix(rng, N, dtype, 2)
    f = jaxmg.lu_factor(a, precision="mixed")
    op = [lambda m: m, lambda m: m.T, lambda m: m.conj().T][trans]
    close(jaxmg.lu_solve(f, b, trans=trans), a, b, op)


def test_gram_route_derivatives_jit_and_vmap_match_float64(rng, gram_route):
    a, b = uniform_general(rng, np.float64, 10.0), helpers.random_matrix(rng, N, np.float64, 2)

    def loss(a, b, precision):
        return jnp.sum(jaxmg.solve(a, b, precision=precision) ** 2)

    got = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(a, b, "mixed")
    want = jax.grad(loss, argnums=(0, 1))(a, b, "highest")
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-12)
    xs = jax.vmap(lambda b: jaxmg.solve(a, b, precision="mixed"))(b.T)
    close(np.asarray(xs).T, a, b)


@pytest.mark.parametrize("cond", [1e6, 1e12])
def test_gram_route_beyond_its_reach_falls_back_to_float64_lu(rng, gram_route, cond):
    """cond(A^H A) = cond^2: G's FP16 Cholesky fails (or refinement stalls)
    and float64 LU answers, as accurate as JAX's."""
    a, b = uniform_general(rng, np.float64, cond), helpers.random_matrix(rng, N, np.float64, 1)
    x, info = jaxmg.solve(a, b, precision="mixed", return_info=True)
    assert np.asarray(info.fallback).all() and int(info.info) == 0
    reference = jax.scipy.linalg.lu_solve(jax.scipy.linalg.lu_factor(a), b)
    berr = lambda x: np.abs(b - a @ np.asarray(x)).max() / (np.abs(a).sum(1).max() * np.abs(x).max())  # noqa: E731
    assert berr(x) <= 10 * berr(reference) + 1e-17


def test_gram_route_of_a_singular_matrix_fails_like_float64(rng, gram_route):
    a = uniform_general(rng, np.float64, 10.0)
    a[:, 7] = 0
    x, info = jaxmg.solve(a, np.ones(N), precision="mixed", return_info=True)
    assert int(info.info) > 0 and np.isnan(np.asarray(x)).all()
    with pytest.raises(jaxmg.LinAlgError, match="singular"):
        jaxmg.lu_solve(jaxmg.lu_factor(a, precision="mixed", on_failure="raise"), np.ones(N))


@pytest.mark.parametrize("sharded", [False, True], ids=["one device", "rows sharded"])
@pytest.mark.parametrize("route", ["spd", "gram", "blocked lu"])
def test_every_product_of_a_mixed_solve_names_its_precision(rng, monkeypatch, route, sharded):
    """No product runs at JAX's default precision, which on a GPU is TF32
    (10 bits) for float32 operands and would cap what refinement reaches:
    each names XLA's algorithm for the updates or Precision.HIGHEST. CPUs
    compute the default in float32, so only the programs can show it."""
    from jaxmg._src.mixed import api

    monkeypatch.setattr(api, "GRAM_FROM", N if route == "gram" else 10 * N)
    a, b = (spd(rng) if route == "spd" else general(rng)), helpers.random_matrix(rng, N, np.float64, 2)
    if sharded:
        a = helpers.rows(a, helpers.mesh(2))
    factor, solve = ((jaxmg.cho_factor, jaxmg.cho_solve) if route == "spd"
                     else (jaxmg.lu_factor, jaxmg.lu_solve))

    def solves(a, b):
        f = factor(a, precision="mixed")
        adjoint = () if route == "spd" else (solve(f, b, trans=2),)
        return solve(f, b), *adjoint, jaxmg.solve(a, b, assume_a="pos" if route == "spd" else "gen",
                                                  precision="mixed")

    jaxpr = jax.make_jaxpr(lambda a, b: jax.jvp(solves, (a, b), (a, b)))(a, b)
    precisions = helpers.dot_precisions(jaxpr.jaxpr)
    assert precisions
    default = jax.lax.Precision.DEFAULT
    assert not [p for p in precisions if p is None or p == (default, default)], precisions


@pytest.mark.parametrize("n", [N, N - 1])  # N - 1: padded to a multiple of the devices
def test_rows_sharded_general_matrices_take_the_gram_route_too(rng, gram_route, n):
    from jaxmg._src.mixed import normal

    mesh = helpers.mesh(2)
    a, b = uniform_general(rng, np.float64, 10.0, n), helpers.random_matrix(rng, n, np.float64, 2)
    f = jaxmg.lu_factor(a, precision="mixed", mesh=mesh, spec=P("x", None))
    assert isinstance(f.factor, normal.GramFactor) and int(f.info) == 0
    for trans, op in ((0, a), (1, a.T)):
        close(jaxmg.lu_solve(f, b, trans=trans), op, b)
    x, info = jaxmg.solve(a, b, precision="mixed", mesh=mesh, spec=P("x", None), return_info=True)
    close(x, a, b)
    assert not np.asarray(info.fallback).any()


def test_below_gram_from_rows_sharded_general_matrices_take_the_blocked_lu(rng):
    from jaxmg._src.mixed import lu as lum

    a, b = uniform_general(rng, np.float64, 10.0), helpers.random_matrix(rng, N, np.float64, 2)
    f = jaxmg.lu_factor(helpers.rows(a, helpers.mesh(2)), precision="mixed")
    assert isinstance(f.factor, lum.LUFactor)
    close(jaxmg.lu_solve(f, b), a, b)


def test_gram_defaults_reach_cond_100_over_many_panels(rng):
    """The default's Cholesky updates (BF16x3) keep the preconditioner good at
    cond 100 with G factored over 8 panels; FP16 updates stalled there (on an
    H200 at N=32768 too) and fell back."""
    from jaxmg._src.mixed import api, solvers

    n = 512
    a = uniform_general(rng, np.float64, 100.0, n)
    b = helpers.random_matrix(rng, n, np.float64, 1)
    x, info = solvers.general_solve(jnp.asarray(a), jnp.asarray(b), **dict(api.GRAM, block_size=64))
    assert not np.asarray(info.fallback).any() and int(info.factor_info) == 0
    assert np.asarray(info.iterations).max() <= 15
    close(x, a, b)


def test_jit_and_vmap_with_a_mesh_of_auto_axes(rng):
    """mesh= a mesh of Auto axes under the user's jit, and under eager vmap:
    the traced a was placed by reshard, which takes explicit axes only."""
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,), devices=helpers.devices(2))
    a, g = spd(rng), general(rng)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    rows = jax.device_put(a, NamedSharding(mesh, P("x", None)))
    pos = jax.jit(lambda a, b: jaxmg.solve(a, b, assume_a="pos", mesh=mesh, precision="mixed"))
    close(pos(rows, b), a, b)
    factored = jax.jit(lambda a, b: jaxmg.cho_solve(
        jaxmg.cho_factor(a, mesh=mesh, precision="mixed"), b))
    close(factored(a, b), a, b)
    xs = jax.vmap(lambda a: jaxmg.solve(a, b, mesh=mesh, precision="mixed"))(np.stack([g, 2 * g]))
    close(xs[1], 2 * g, b)


STRICT_FORMS = {
    "solve-pos": lambda a, b: jaxmg.solve(a, b, assume_a="pos", precision="mixed"),
    "solve-gen": lambda a, b: jaxmg.solve(a, b, precision="mixed"),
    "cho": lambda a, b: jaxmg.cho_solve(jaxmg.cho_factor(a, precision="mixed"), b),
    "lu": lambda a, b: jaxmg.lu_solve(jaxmg.lu_factor(a, precision="mixed"), b),
}


@pytest.mark.parametrize("rows", [False, True], ids=["plain", "rows"])
@pytest.mark.parametrize("name", list(STRICT_FORMS))
def test_strict_promotion_and_rank_raise_give_the_permissive_result(rng, name, rows):
    """Under jax_numpy_dtype_promotion="strict" and rank promotion "raise"
    (JAX's test defaults) a mixed solve runs eagerly, jitted and
    differentiated, as it does without them: the caller's rules govern the
    caller's arrays, not jaxmg's per-column arithmetic (a scale of shape (K,)
    against (N, K), int32 beside int64 indices), which failed there."""
    solve = STRICT_FORMS[name]
    a = spd(rng) if name in ("solve-pos", "cho") else general(rng)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    if rows:
        a = helpers.rows(a, helpers.mesh(2))
    forms = {"eager": solve, "jit": jax.jit(solve),
             "grad": jax.grad(lambda a, b: jnp.sum(solve(a, b) ** 2))}
    with jax.set_mesh(helpers.mesh(2)) if rows else contextlib.nullcontext():
        want = {form: np.asarray(f(a, b)) for form, f in forms.items()}
        with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
            got = {form: np.asarray(f(a, b)) for form, f in forms.items()}
    for form in forms:
        np.testing.assert_allclose(got[form], want[form], rtol=1e-10, atol=1e-12, err_msg=form)


def test_the_callers_rank_promotion_still_governs_batch_broadcasting(rng):
    a = np.stack([spd(rng), spd(rng)])
    b = helpers.random_matrix(rng, N, np.float64, 2)  # no batch axis against a's one
    f = jaxmg.cho_factor(a, precision="mixed")
    with jax.numpy_rank_promotion("raise"), pytest.raises(ValueError, match="rank promotion"):
        jaxmg.cho_solve(f, b)
    with jax.numpy_rank_promotion("allow"):
        assert jaxmg.cho_solve(f, b).shape == (2, N, 2)
