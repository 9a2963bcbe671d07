"""lstsq, qr and svd as jax.numpy.linalg's, on row-sharded matrices, tall,
square and wide (M < N):

- lstsq(a, b, rcond=None, *, numpy_resid=False) returns JAX's 4-tuple
  (x, residuals, rank, singular values), minimum-norm x for wide or
  rank-deficient a, rcond cutting small singular values;
- qr(a, mode="reduced" | "complete" | "r");
- svd(a, full_matrices=True, compute_uv=True, hermitian=False).

Factors are compared with JAX's after fixing the phases the decomposition
leaves free (diag(R) real positive; the first row of U real positive), and
checked for orthonormality and reconstruction. Derivatives where JAX has
them: lstsq's, QR's of tall and square matrices, the reduced SVD's."""

import jax.numpy as jnp
import numpy as np
import pytest

import dropin
import helpers
from dropin import K, REP, ROWS, api

M = 24  # rows, split over every mesh
TALL, SQUARE, WIDE = (M, 8), (M, M), (M, 40)


def shape_id(shape):
    return {TALL: "tall", SQUARE: "square", WIDE: "wide"}[shape]


def matrix(shape):
    def make(rng, dtype):
        return (dropin.general(rng, shape[1], dtype, m=shape[0]),)

    return make


# Singular values evenly spaced over [1, 10]: gaps of at least 9 / 23, so
# singular vectors move at most ~25 times the rounding of a.
SPREAD = 25.0


def spread_matrix(shape):
    def make(rng, dtype):
        k = min(shape)
        return (dropin.with_singular_values(rng, *shape, np.linspace(1.0, 10.0, k), dtype),)

    return make


# ---- lstsq ------------------------------------------------------------------------------

# (a's shape, b's shape, b's placement)
LSTSQ_FORMS = ((TALL, (M, K), REP), (WIDE, (M,), ROWS), (SQUARE, (M, K), ROWS), (TALL, (M,), REP))


def lstsq_id(form):
    shape, b_shape, how = form
    return f"{shape_id(shape)}-b{len(b_shape)}d-{how}"


@pytest.mark.parametrize("case, form", dropin.sweep(also=("form", LSTSQ_FORMS, lstsq_id)))
def test_lstsq(rng, case, form):
    """The 4-tuple, equal to jnp.linalg.lstsq's (numpy_resid=False: the
    residuals are computed for every shape)."""
    shape, b_shape, b_how = form

    def make(rng, dtype):
        return matrix(shape)(rng, dtype) + (dropin.random(rng, b_shape, dtype),)

    dropin.check_case(
        case, lambda a, b: api.lstsq(a, b), jnp.linalg.lstsq, make, (ROWS, b_how), rng
    )


@pytest.mark.parametrize("rcond", [None, -1, 0.5])
@pytest.mark.parametrize("shape", [TALL, WIDE], ids=shape_id)
def test_lstsq_rcond(rng, shape, rcond):
    """Singular values below rcond * max are dropped (rank and minimum-norm x
    as JAX's): rcond=0.5 drops three, None (eps * max(M, N)) an exact zero,
    -1 (eps) none of a full-rank a."""
    dtype, mesh = np.float64, dropin.mesh(4, "explicit" if rcond == 0.5 else "auto")
    k = min(shape)
    if rcond == -1:
        s, rank = np.geomspace(10.0, 1.0, k), k
    else:
        s = np.r_[np.geomspace(10.0, 6.0, k - 3), [1.0, 0.5, 0.0]]
        rank = k - 3 if rcond == 0.5 else k - 1
    a = dropin.with_singular_values(rng, *shape, s, dtype)
    b = dropin.random(rng, (M, K), dtype)
    got = api.lstsq(dropin.place(a, ROWS, mesh), dropin.place(b, REP, mesh), rcond=rcond)
    want = jnp.linalg.lstsq(jnp.asarray(a), jnp.asarray(b), rcond=rcond)
    assert int(got[2]) == int(want[2]) == rank
    dropin.assert_close(got, want, dtype, M, condition=10.0)


@pytest.mark.parametrize("shape", [TALL, WIDE], ids=shape_id)
def test_lstsq_numpy_resid(rng, shape):
    """numpy_resid=True: residuals as NumPy's (empty for a wide a)."""
    dtype, mesh = np.complex128, dropin.mesh(3, "auto")
    a = dropin.general(rng, shape[1], dtype, m=shape[0])
    b = dropin.random(rng, (M, K), dtype)
    got = api.lstsq(dropin.place(a, ROWS, mesh), dropin.place(b, REP, mesh), numpy_resid=True)
    want = np.linalg.lstsq(a, b, rcond=None)
    assert np.asarray(got[1]).shape == want[1].shape
    dropin.assert_close(got, want, dtype, M, condition=10.0)


# ---- qr --------------------------------------------------------------------------------------


def fixed_phases(q, r):
    """q[:, :k] and r[:k] with diag(r) real positive (k = min(M, N)): unique
    for a of full rank, and smooth in a."""
    r = dropin.whole(r)
    k = min(r.shape[-2], r.shape[-1])
    d = jnp.diagonal(r[..., :k, :k], axis1=-2, axis2=-1)
    phase = d / jnp.abs(d).astype(d.dtype)
    r = jnp.conj(phase)[..., :, None] * r[..., :k, :]
    return (None if q is None else q[..., :, :k] * phase[..., None, :]), r


def qr_invariants(mode):
    def invariants(result):
        if mode == "r":
            return fixed_phases(None, result)[1]
        q, r = result
        return fixed_phases(q, r)

    return invariants


# (mode, a's shape)
QR_VALUE_FORMS = (
    ("reduced", TALL),
    ("complete", TALL),
    ("r", TALL),
    ("reduced", WIDE),
    ("r", SQUARE),
    ("complete", WIDE),
    ("r", WIDE),
    ("reduced", SQUARE),
    ("complete", SQUARE),
)


def qr_id(form):
    mode, shape = form
    return f"{mode}-{shape_id(shape)}"


@pytest.mark.parametrize(
    "case, form", dropin.sweep(modes=("eager", "jit", "vmap"), also=("form", QR_VALUE_FORMS, qr_id))
)
def test_qr(rng, case, form):
    mode, shape = form
    check_qr(case, mode, shape, rng)


def check_qr(case, mode, shape, rng):
    inv = qr_invariants(mode)
    kw = {} if mode == "reduced" else {"mode": mode}  # qr(a) as users write it
    dropin.check_case(
        case,
        lambda a: inv(api.qr(a, **kw)),
        lambda a: inv(jnp.linalg.qr(a, mode=mode)),
        matrix(shape),
        (ROWS,),
        rng,
    )


# JAX differentiates QR of tall and square matrices, reduced or R only.
QR_DERIVATIVE_FORMS = (("reduced", TALL), ("r", SQUARE), ("reduced", SQUARE), ("r", TALL))


@pytest.mark.parametrize(
    "case, form",
    dropin.sweep(modes=("grad", "jvp"), also=("form", QR_DERIVATIVE_FORMS, qr_id), small=True),
)
def test_qr_derivatives(rng, case, form):
    mode, shape = form
    check_qr(case, mode, shape, rng)


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("shape", [TALL, WIDE], ids=shape_id)
def test_qr_shapes_and_factors(rng, shape, mode):
    """Shapes as JAX's for the mode; q orthonormal (unitary for "complete"),
    r upper triangular, q @ r = a; mode="r" returns r alone."""
    dtype, mesh = np.complex64, dropin.mesh(2, "explicit")
    m, n = shape
    k = min(m, n)
    a = dropin.general(rng, n, dtype, m=m)
    out = api.qr(dropin.place(a, ROWS, mesh), mode=mode)
    if mode == "r":
        r = np.asarray(out)
        assert r.shape == (k, n)
        q = None
    else:
        q, r = (np.asarray(x) for x in out)
        cols = m if mode == "complete" else k
        assert q.shape == (m, cols) and r.shape == (cols, n)
        q64 = q.astype(np.complex128)
        assert np.abs(q64.conj().T @ q64 - np.eye(cols)).max() <= dropin.tol(dtype, m)
        dropin.assert_close(
            q64 @ r, a.astype(np.complex128), dtype, m, condition=10.0, check_dtype=False
        )
    assert np.array_equal(r, np.triu(r))


# ---- svd ------------------------------------------------------------------------------------


def svd_invariants(result, compute_uv):
    """s, and U's first k columns and V^H's first k rows with U's first row
    real positive (unique for distinct singular values)."""
    if not compute_uv:
        return result
    u, s, vh = result
    k = s.shape[-1]
    u, vh = u[..., :, :k], dropin.whole(vh)[..., :k, :]
    top = dropin.whole(u)[..., 0, :]
    phase = top / jnp.abs(top).astype(top.dtype)
    return u * jnp.conj(phase)[..., None, :], s, phase[..., :, None] * vh


# (full_matrices, compute_uv, hermitian, shape); None: JAX's default (full matrices).
SVD_VALUE_FORMS = (
    (None, True, False, TALL),
    (False, True, False, WIDE),
    (True, True, False, WIDE),
    (False, False, False, TALL),
    (False, True, True, SQUARE),
    (None, False, False, WIDE),
    (True, True, False, TALL),
)


def svd_id(form):
    *flags, shape = form
    full, uv = flags[:2]
    hermitian = "-hermitian" if len(flags) > 2 and flags[2] else ""
    return f"full={'default' if full is None else full}-uv={uv}{hermitian}-{shape_id(shape)}"


def svd_call(svd, full, uv, herm):
    """The call as a user writes it: options at their defaults left out."""
    kw = {} if full is None else {"full_matrices": full}
    kw.update({"hermitian": True} if herm else {})
    return lambda a: svd_invariants(svd(a, compute_uv=uv, **kw), uv)


def svd_make(shape, herm):
    if herm:
        # Indefinite and Hermitian, |eigenvalues| distinct: 0.1 .. 2.4, alternating signs.
        def make(rng, dtype):
            w = np.linspace(0.1, 2.4, shape[0]) * (-1.0) ** np.arange(shape[0])
            return (helpers.with_eigenvalues(rng, w, dtype),)

        return make
    return spread_matrix(shape)


@pytest.mark.parametrize(
    "case, form",
    dropin.sweep(modes=("eager", "jit", "vmap"), also=("form", SVD_VALUE_FORMS, svd_id)),
)
def test_svd(rng, case, form):
    full, uv, herm, shape = form
    dropin.check_case(
        case,
        svd_call(api.svd, full, uv, herm),
        svd_call(jnp.linalg.svd, full, uv, herm),
        svd_make(shape, herm),
        (ROWS,),
        rng,
        condition=SPREAD,
    )


# JAX differentiates the reduced SVD (and the singular values alone).
SVD_DERIVATIVE_FORMS = ((False, True, TALL), (False, False, WIDE), (False, True, SQUARE))


@pytest.mark.parametrize(
    "case, form",
    dropin.sweep(modes=("grad", "jvp"), also=("form", SVD_DERIVATIVE_FORMS, svd_id), small=True),
)
def test_svd_derivatives(rng, case, form):
    full, uv, shape = form
    dropin.check_case(
        case,
        svd_call(api.svd, full, uv, False),
        svd_call(jnp.linalg.svd, full, uv, False),
        spread_matrix(shape),
        (ROWS,),
        rng,
        condition=SPREAD,
    )


@pytest.mark.parametrize("full_matrices", [True, False])
@pytest.mark.parametrize("shape", [TALL, WIDE], ids=shape_id)
def test_svd_shapes_and_factors(rng, shape, full_matrices):
    """u (M, M) and vh (N, N) unitary with full_matrices, (M, K) and (K, N)
    orthonormal without; u diag(s) vh = a; s descending."""
    dtype, mesh = np.float64, dropin.mesh(8, "auto")
    m, n = shape
    k = min(m, n)
    a = dropin.general(rng, n, dtype, m=m)
    u, s, vh = (
        np.asarray(x) for x in api.svd(dropin.place(a, ROWS, mesh), full_matrices=full_matrices)
    )
    assert s.shape == (k,) and np.all(np.diff(s) <= 0)
    assert u.shape == ((m, m) if full_matrices else (m, k))
    assert vh.shape == ((n, n) if full_matrices else (k, n))
    for x in (u.T, vh):
        assert np.abs(x @ x.T - np.eye(x.shape[0])).max() <= dropin.tol(dtype, m)
    dropin.assert_close((u[:, :k] * s) @ vh[:k], a, dtype, m, condition=10.0)


@pytest.mark.parametrize("shape", [TALL, WIDE], ids=shape_id)
def test_svd_defaults_as_jax(rng, shape):
    """svd(a) as jnp.linalg.svd(a): full matrices (u M x M, vh N x N) unless
    full_matrices=False; compute_uv=False returns s alone."""
    mesh, dtype = dropin.mesh(2, "auto"), np.float32
    a = dropin.general(rng, shape[1], dtype, m=shape[0])
    got = api.svd(dropin.place(a, ROWS, mesh))
    want = jnp.linalg.svd(jnp.asarray(a))
    assert [np.shape(x) for x in got] == [x.shape for x in want]
    s = api.svd(dropin.place(a, ROWS, mesh), compute_uv=False)
    assert np.shape(s) == (min(shape),)


def test_errors_name_the_argument(rng):
    mesh = dropin.mesh(2)
    a = dropin.place(dropin.general(rng, 8, np.float64, m=M), ROWS, mesh)
    with pytest.raises(ValueError, match=r"\bmode\b"):
        api.qr(a, mode="economic")  # jnp refuses it ("full" it takes)
    with pytest.raises(ValueError, match=r"\bb\b"):
        api.lstsq(a, dropin.place(np.ones((M + 2, 1)), REP, mesh))


# ---- jnp.linalg.qr's other modes, svd's subset_by_index ----

import jaxmg  # noqa: E402


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (0, 2)], ids=str)
def test_qr_raw_and_full_modes_as_jnp(rng, shape):
    """mode="raw": LAPACK's Householder form (h is (N, M), tau (K,)); "full":
    NumPy's old name of "reduced", which jnp still takes."""
    a = dropin.random(rng, shape, np.float64)
    h, tau = jaxmg.qr(a, mode="raw")
    want = jnp.linalg.qr(a, mode="raw")
    np.testing.assert_allclose(h, want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tau, want[1], rtol=1e-12, atol=1e-12)
    q, r = jaxmg.qr(a, mode="full")
    want_q, want_r = jnp.linalg.qr(a, mode="reduced")
    assert np.shape(q) == want_q.shape and np.shape(r) == want_r.shape
    np.testing.assert_allclose(np.abs(r), np.abs(want_r), rtol=1e-10, atol=1e-12)


def test_svd_subset_by_index_raises_as_jnp_on_cpu(rng):
    a = dropin.random(rng, (6, 4), np.float64)
    for full in (True, False):
        with pytest.raises(Exception) as want:
            jnp.linalg.svd(a, full, False, subset_by_index=(0, 2))
        with pytest.raises(want.type):
            jaxmg.svd(a, full, False, subset_by_index=(0, 2))


def test_svd_takes_jax_scipy_keywords(rng):
    """jax.scipy.linalg.svd's overwrite_a, check_finite and lapack_driver
    change nothing; a driver scipy does not have is refused by name."""
    mesh, dtype = dropin.mesh(2, "auto"), np.float64
    a = dropin.place(dropin.general(rng, 8, dtype, m=M), ROWS, mesh)
    want = api.svd(a, full_matrices=False, compute_uv=False)
    for driver in ("gesdd", "gesvd"):
        got = api.svd(a, full_matrices=False, compute_uv=False, overwrite_a=True,
                      check_finite=False, lapack_driver=driver)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(ValueError, match=r"\blapack_driver\b"):
        api.svd(a, lapack_driver="gejsv")
