"""The Hermitian matrix of one stored triangle (jaxmg/_src/mixed/hermitian.py):
its products, norms and lower block columns against NumPy on the mirrored
matrix, over several block rows (the blocks made small here), and a public
mixed solve that reads its triangle where it lies."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers
import jaxmg
from jaxmg._src.mixed import hermitian, refine

N = 45  # three block rows of 16, the last partial


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(hermitian, "BLOCK_ROWS", 16)


def junk_triangle(rng, dtype, upper):
    """A matrix whose other triangle is junk, and the Hermitian one it stands for."""
    a = helpers.random_matrix(rng, N, dtype)  # complex: its diagonal not real either
    kept = np.triu(a) if upper else np.tril(a)
    strict = np.triu(a, 1) if upper else np.tril(a, -1)
    full = kept + np.conj(strict).T
    full[np.diag_indices(N)] = full.diagonal().real  # as LAPACK's Cholesky reads it
    return a, full


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("upper", [True, False], ids=["upper", "lower"])
@pytest.mark.parametrize("k", [1, 3])
def test_product_is_the_mirrored_matrix_s(rng, small_blocks, dtype, upper, k):
    a, full = junk_triangle(rng, dtype, upper)
    x = helpers.random_matrix(rng, N, dtype, k)
    y = jax.jit(hermitian.product, static_argnums=2)(a, x, upper)
    np.testing.assert_allclose(np.asarray(y), full @ x, rtol=0, atol=1e-12 * np.abs(full @ x).max())


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("upper", [True, False], ids=["upper", "lower"])
def test_norms_and_mirror_are_the_hermitian_matrix_s(rng, small_blocks, dtype, upper):
    a, full = junk_triangle(rng, dtype, upper)
    anorm, row_floor = jax.jit(hermitian.norms, static_argnums=1)(a, upper)
    want_anorm, want_floor = refine.norms(jnp.asarray(full))
    assert float(anorm) == pytest.approx(float(want_anorm), rel=1e-13)
    np.testing.assert_allclose(np.asarray(row_floor), np.asarray(want_floor), rtol=1e-13)
    np.testing.assert_array_equal(np.asarray(hermitian.mirrored(jnp.asarray(a), upper)), full)


@pytest.mark.parametrize("upper", [True, False], ids=["upper", "lower"])
def test_lower_column_is_the_hermitian_matrix_s_below_the_diagonal_block(rng, upper):
    a, full = junk_triangle(rng, np.complex128, upper)
    for o, w in ((0, 16), (16, 16), (32, 13)):
        c = np.asarray(hermitian.lower_column(jnp.asarray(a), o, w, upper))
        assert c.shape == (N - o, w)
        np.testing.assert_array_equal(np.tril(c[:w], -1), np.tril(full[o : o + w, o : o + w], -1))
        np.testing.assert_array_equal(c[:w].diagonal().real, full.diagonal()[o : o + w])
        np.testing.assert_array_equal(c[w:], full[o + w :, o : o + w])


# k columns of b: one refines by the triangle, two by a matrix mirrored once.
@pytest.mark.parametrize("lower, k", [(False, 2), (True, 1)], ids=["upper-mirrored", "lower-triangle"])
def test_solve_refines_against_the_triangle_it_reads(rng, small_blocks, lower, k):
    n = 40  # a shape of its own: compiled with the small blocks
    a = helpers.spd(rng, n, np.float64, 100.0)
    b = helpers.random_matrix(rng, n, np.float64, k)
    junk = np.triu(np.full_like(a, 5.0), 1)
    given = np.tril(a) + junk if lower else np.triu(a) + junk.T
    solve = functools.partial(jaxmg.solve, assume_a="pos", lower=lower, precision="mixed",
                              return_info=True)
    x, info = solve(given, b)
    want = np.linalg.solve(a, b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-11 * np.abs(want).max()
    assert not np.asarray(info.fallback).any()
    assert (np.asarray(info.backward_error) <= 1e-15).all()
    # its gradient is of the matrix as given, as the float64 solve's is
    loss = lambda m, s: jnp.sum(s(m, b)[0] if s is solve else s(m, b))  # noqa: E731
    highest = functools.partial(jaxmg.solve, assume_a="pos", lower=lower)
    g_mixed = jax.grad(loss)(jnp.asarray(given), solve)
    g_highest = jax.grad(loss)(jnp.asarray(given), highest)
    np.testing.assert_allclose(np.asarray(g_mixed), np.asarray(g_highest), rtol=1e-9, atol=1e-12)


def test_complex_diagonal_is_read_as_real_like_the_float64_cholesky(rng, small_blocks):
    n = 37
    a = helpers.spd(rng, n, np.complex128, 100.0)
    noisy = a + np.diag(1e-3j * rng.standard_normal(n))  # only the real part is A's
    b = helpers.random_matrix(rng, n, np.complex128, 1)
    for k in (1, 2):  # by the triangle, and mirrored once
        x, info = jaxmg.solve(noisy, b[:, :1].repeat(k, 1), assume_a="pos", precision="mixed",
                              return_info=True)
        want = np.asarray(jaxmg.solve(noisy, b[:, :1].repeat(k, 1), assume_a="pos"))
        assert np.abs(np.asarray(x) - want).max() <= 1e-11 * np.abs(want).max()
        assert not np.asarray(info.fallback).any()
