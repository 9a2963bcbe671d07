"""det(a) as jax.scipy.linalg.det: values (positive, negative and complex
determinants) against JAX in every mode on every mesh; exactly singular
matrices give 0 (not NaN); the derivative stays finite at singular
matrices and equals JAX's there (the adjugate: non-zero at corank 1, zero
at corank 2 and at the zero matrix, as JAX's own tests check); det agrees
with slogdet; errors naming the argument."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import dropin
from dropin import N, ROWS, api

# Orders of the determinant of N = 24 matrices with singular values in [1, 10]:
# 10^12, well inside float32's range.


def square(rng, dtype):
    a = dropin.general(rng, N, dtype)
    if not dropin.is_complex(dtype) and rng.integers(2):
        a[0] = -a[0]  # either sign of determinant
    return (a,)


@pytest.mark.parametrize("case", dropin.sweep())
def test_det(rng, case):
    dropin.check_case(case, lambda a: api.det(a), jsl.det, square, (ROWS,), rng)


@pytest.mark.parametrize("sign", [1, -1])
def test_det_sign_and_slogdet(rng, sign):
    """det = sign * exp(logabsdet) of slogdet, for either sign."""
    mesh, dtype = dropin.mesh(4, "explicit"), np.float64
    a = dropin.general(rng, N, dtype)
    if np.sign(np.linalg.det(a)) != sign:
        a[0] = -a[0]
    a_dev = dropin.place(a, ROWS, mesh)
    d = float(api.det(a_dev))
    s, logabsdet = api.slogdet(a_dev)
    assert np.sign(d) == sign == float(s)
    assert abs(d - float(s) * np.exp(float(logabsdet))) <= dropin.tol(dtype) * abs(d)


# JAX's own singular examples (tests/linalg_test.py): rank 2 with a non-zero
# gradient, rank 1 with a zero gradient, exactly representable in float32.
CORANK1 = np.array([[50, -30, 45], [-30, 90, -81], [45, -81, 81]], np.float32)
CORANK2 = np.array([[36, -42, 18], [-42, 49, -21], [18, -21, 9]], np.float32)


def adjugate_transpose(a):
    """d det / dA = adj(A)^T, by cofactors in float64."""
    a = np.asarray(a, np.float64)
    n = a.shape[0]
    out = np.empty_like(a)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(a, i, 0), j, 1)
            out[i, j] = (-1) ** (i + j) * np.linalg.det(minor)
    return out


@pytest.mark.parametrize("name", ["corank1", "corank2", "zero"])
@pytest.mark.parametrize("devices, kind", [(1, "auto"), (3, "explicit"), (3, "auto")])
def test_det_grad_at_singular_matrices(name, devices, kind):
    """Finite, equal to JAX's, equal to the adjugate's transpose; det itself 0."""
    a = {"corank1": CORANK1, "corank2": CORANK2, "zero": np.zeros((3, 3), np.float32)}[name]
    mesh = dropin.mesh(devices, kind)
    a_dev = dropin.place(a, ROWS, mesh)
    hadamard = np.prod(np.linalg.norm(a.astype(np.float64), axis=1))
    assert abs(float(api.det(a_dev))) <= dropin.tol(np.float32, 3) * hadamard
    with dropin.transform_context(mesh):
        g = np.asarray(jax.grad(lambda a: api.det(a))(a_dev))
    assert np.isfinite(g).all(), g
    want = adjugate_transpose(a)
    assert np.abs(want - np.asarray(jax.grad(jsl.det)(jnp.asarray(a)))).max() <= 1e-3 * max(
        1, np.abs(want).max()
    )
    assert np.abs(g - want).max() <= 1e-3 * max(1.0, np.abs(want).max()), (g, want)


@pytest.mark.parametrize("devices, kind", [(2, "auto"), (4, "explicit")])
def test_det_jvp_of_singular_matrix(rng, devices, kind):
    """Forward mode at a rank-deficient N x N matrix: tr(adj(A) dA), finite."""
    dtype = np.float64
    a = dropin.with_singular_values(rng, N, N, np.r_[np.geomspace(1, 2, N - 1), 0.0], dtype)
    da = dropin.random(rng, (N, N), dtype)
    mesh = dropin.mesh(devices, kind)
    with dropin.transform_context(mesh):
        _, got = jax.jvp(
            lambda a: api.det(a), (dropin.place(a, ROWS, mesh),), (dropin.place(da, ROWS, mesh),)
        )
    _, want = jax.jvp(jsl.det, (jnp.asarray(a),), (jnp.asarray(da),))
    assert np.isfinite(float(got))
    assert abs(float(got) - float(want)) <= dropin.tol(dtype, N, 1e2) * max(1.0, abs(float(want)))


@pytest.mark.parametrize("devices, kind", [(2, "auto"), (4, "explicit")])
def test_exactly_singular_det_is_zero(devices, kind):
    """JAX's example: det is 0, not NaN."""
    x = np.array([[-1.0, 3.0 / 2], [2.0 / 3, -1.0]], np.float32)
    x = np.kron(np.eye(devices // 2), x)  # block diagonal: rows for every device
    got = api.det(dropin.place(x, ROWS, dropin.mesh(devices, kind)))
    assert np.isfinite(float(got)) and abs(float(got)) <= 1e-6


@pytest.mark.parametrize("devices", [1, 2])
def test_orders_two_and_three_as_jax_closed_forms(devices):
    """JAX computes det of a 2 x 2 or 3 x 3 matrix from its entries: exact
    for integer entries, overflowing as the products do."""
    mesh = dropin.mesh(devices)
    for a in (np.array([[2.0, 1.0], [1.0, 2.0]]), np.array([[4.0, 1, 0], [1, 5, 1], [0, 1, 6]]),
              np.diag([1e200, 1e200, 1e-300]), np.diag([1e-200, 1e-200, 1e300])):
        assert float(api.det(a, mesh=mesh)) == float(jnp.linalg.det(a))


def test_errors_name_the_argument():
    mesh = dropin.mesh(2)
    with pytest.raises(ValueError, match=r"\ba\b"):
        api.det(dropin.place(np.ones((N, N // 2)), ROWS, mesh))


# ---- against JAX directly: batched derivatives, slogdet's method ----

import jaxmg  # noqa: E402


def test_det_grad_through_a_batch_as_jax(rng):
    """jax.grad of det over leading batch axes, singular elements included
    (JAX issue 6121's case: 16 matrices of order 1, all ones)."""
    ones = jnp.ones((16, 1, 1))
    want = jax.grad(lambda x: jnp.linalg.det(x).sum())(ones)
    np.testing.assert_allclose(jax.grad(lambda x: jaxmg.det(x).sum())(ones), want, atol=1e-12)
    a = dropin.random(rng, (3, 3, 3), np.float64)
    a[0] = 0  # a singular (zero) element beside invertible ones
    a[1, 2] = a[1, 0]  # and a rank-deficient one
    got = jax.grad(lambda x: jaxmg.det(x).sum())(a)
    want = jax.grad(lambda x: jnp.linalg.det(x).sum())(a)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("method", [None, "lu", "qr"])
def test_slogdet_methods_as_jnp(rng, method):
    a = dropin.random(rng, (2, 5, 5), np.float64)
    sign, logabsdet = jaxmg.slogdet(a, method=method)
    want = jnp.linalg.slogdet(a, method=method)
    np.testing.assert_allclose(sign, want.sign)
    np.testing.assert_allclose(logabsdet, want.logabsdet, rtol=1e-10)


def test_slogdet_qr_refuses_complex_as_jnp(rng):
    a = dropin.random(rng, (4, 4), np.complex128)
    with pytest.raises(NotImplementedError):
        jnp.linalg.slogdet(a, method="qr")
    with pytest.raises(NotImplementedError, match="method='qr'"):
        jaxmg.slogdet(a, method="qr")
    with pytest.raises(ValueError, match="method"):
        jaxmg.slogdet(a, method="cholesky")
