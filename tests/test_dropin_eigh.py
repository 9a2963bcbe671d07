"""eigh and eigvalsh with jax.numpy.linalg's options: UPLO= ("L", "U")
picks the triangle read when symmetrize_input=False; symmetrize_input=True
(the default) decomposes (a + a^H) / 2, also in derivatives; eigvalsh(UPLO=)
likewise; jax.scipy.linalg.eigh's lower= and eigvals_only= too. Against JAX
in every mode on every mesh (eigenvalues, and |V|^2, which no eigenvector
phase changes); A V = V diag(w) and V^H V = I where JAX's eigh tests check
them; the generalized problem (b, type 1 to 3) as jax.scipy.linalg.eigh
solves it from jax 0.12; errors naming the argument."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
import scipy.linalg

import dropin
from dropin import N, ROWS, api

# ||A|| / (smallest eigenvalue gap) of dropin.spaced: how much rounding in A
# moves the eigenvectors.
SPREAD = 15.0


def spaced(rng, dtype):
    return (dropin.spaced(rng, N, dtype),)


def invariants(result):
    w, v = result
    return w, jnp.abs(v) ** 2


def triangle_only(rng, a, uplo):
    """a with junk in the triangle UPLO does not name."""
    junk = dropin.random(rng, a.shape, a.dtype) * 10
    keep = np.tril(np.ones(a.shape, bool)) if uplo == "L" else np.triu(np.ones(a.shape, bool))
    return np.where(keep, a, junk)


def check_decomposition(h, w, v, dtype):
    """Eigenvalues against NumPy in float64; A V = V diag(w) and V^H V = I."""
    h, w, v = dropin.promote(h), np.asarray(w), np.asarray(v)
    n = h.shape[0]
    norm = max(np.linalg.norm(h), 1.0)
    dropin.assert_close(w, np.linalg.eigvalsh(h), dtype, n, what="eigenvalues")
    v64 = v.astype(dropin.wide(dtype))
    assert np.linalg.norm(h @ v64 - v64 * w) <= dropin.tol(dtype, n) * norm
    assert np.linalg.norm(v64.conj().T @ v64 - np.eye(n)) <= dropin.tol(dtype, n)


@pytest.mark.parametrize("case", dropin.sweep())
def test_eigh(rng, case):
    """The default call (symmetrize_input=True): in derivatives the tangent
    is symmetrized as JAX does."""
    dropin.check_case(
        case,
        lambda a: invariants(api.eigh(a)),
        lambda a: invariants(jnp.linalg.eigh(a)),
        spaced,
        (ROWS,),
        rng,
        condition=SPREAD,
    )


# (UPLO, symmetrize_input, devices, kind, jit)
UPLO_CASES = [
    ("L", False, 2, "auto", False),
    ("U", False, 3, "explicit", True),
    (None, True, 8, "auto", True),
    ("U", True, 1, "explicit", False),
    ("L", True, 4, "explicit", False),
]


@pytest.mark.parametrize(
    "uplo, symmetrize, devices, kind, jit",
    UPLO_CASES,
    ids=[f"UPLO={u}-sym={s}-{d}dev-{k}-{'jit' if j else 'eager'}" for u, s, d, k, j in UPLO_CASES],
)
def test_eigh_uplo_and_symmetrize_input(rng, uplo, symmetrize, devices, kind, jit):
    """symmetrize_input=False reads the UPLO triangle only (junk in the
    other); True decomposes the Hermitian part of a non-Hermitian a."""
    dtype, mesh = np.complex64 if jit else np.float64, dropin.mesh(devices, kind)
    h = dropin.spaced(rng, N, dtype)
    if symmetrize:
        skew = dropin.random(rng, (N, N), dtype)
        a = (h + (skew - skew.conj().T) / 2).astype(dtype)  # Hermitian part: h
    else:
        a = triangle_only(rng, h, uplo)

    def call(a):
        return api.eigh(a, UPLO=uplo, symmetrize_input=symmetrize)

    a_dev = dropin.place(a, ROWS, mesh)
    if jit:
        with dropin.jit_context(mesh):
            w, v = jax.jit(call)(a_dev)
    else:
        w, v = call(a_dev)
    check_decomposition(h, w, v, dtype)
    w_only = api.eigvalsh(a_dev, UPLO=uplo or "L", symmetrize_input=symmetrize)
    dropin.assert_close(w_only, np.linalg.eigvalsh(dropin.promote(h)), dtype, what="eigvalsh")


@pytest.mark.parametrize("case, uplo", dropin.sweep(also=("UPLO", ("L", "U")), small=True))
def test_eigvalsh(rng, case, uplo):
    """eigvalsh(a, UPLO=) in every mode, symmetrize_input at its default."""
    dropin.check_case(
        case,
        lambda a: api.eigvalsh(a, UPLO=uplo),
        lambda a: jnp.linalg.eigvalsh(a, UPLO=uplo),
        spaced,
        (ROWS,),
        rng,
        condition=SPREAD,
    )


def test_eigvalsh_defaults_to_the_lower_triangle(rng):
    """jnp.linalg.eigvalsh's default UPLO is "L"."""
    mesh, dtype = dropin.mesh(4, "auto"), np.complex128
    h = dropin.spaced(rng, N, dtype)
    w = api.eigvalsh(dropin.place(triangle_only(rng, h, "L"), ROWS, mesh), symmetrize_input=False)
    dropin.assert_close(w, np.linalg.eigvalsh(h), dtype)


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("devices, kind", [(1, "auto"), (4, "auto"), (3, "explicit")])
def test_nan_in_the_unread_triangle_changes_nothing_without_symmetrizing(rng, devices, kind, uplo):
    """As jnp.linalg.eigh(symmetrize_input=False): NaN and Inf in the triangle
    UPLO does not name change nothing; with symmetrize_input (the default)
    they reach (a + a^H) / 2, and w and v are NaN, as JAX's."""
    dtype, mesh = np.float64, dropin.mesh(devices, kind)
    h = dropin.spaced(rng, N, dtype)
    a = h.copy()
    rows, cols = np.triu_indices(N, 1) if uplo == "L" else np.tril_indices(N, -1)
    a[rows[::2], cols[::2]] = np.nan
    a[rows[1::2], cols[1::2]] = np.inf
    a_dev = dropin.place(a, ROWS, mesh)
    w, v = api.eigh(a_dev, UPLO=uplo, symmetrize_input=False)
    check_decomposition(h, w, v, dtype)
    w_only = api.eigvalsh(a_dev, UPLO=uplo, symmetrize_input=False)
    dropin.assert_close(w_only, np.linalg.eigvalsh(h), dtype, what="eigvalsh")
    w, v = api.eigh(a_dev, UPLO=uplo)
    assert np.isnan(np.asarray(w)).all() and np.isnan(np.asarray(v)).all()


@pytest.mark.parametrize("devices, kind", [(2, "explicit"), (8, "auto")])
def test_eigh_scipy_keywords(rng, devices, kind):
    """jax.scipy.linalg.eigh's lower= and eigvals_only=."""
    dtype, mesh = np.float32, dropin.mesh(devices, kind)
    h = dropin.spaced(rng, N, dtype)
    a_dev = dropin.place(h, ROWS, mesh)
    w, v = api.eigh(a_dev, lower=False)
    check_decomposition(h, w, v, dtype)
    w_only = api.eigh(a_dev, eigvals_only=True)
    want = jsl.eigh(dropin.promote(h), eigvals_only=True)
    dropin.assert_close(w_only, want, dtype)


def test_errors_name_the_argument(rng):
    mesh = dropin.mesh(2)
    a = dropin.place(dropin.spaced(rng, N, np.float64), ROWS, mesh)
    with pytest.raises(ValueError, match=r"\bUPLO\b"):
        api.eigh(a, UPLO="X")
    with pytest.raises(ValueError, match=r"\bUPLO\b"):
        api.eigvalsh(a, UPLO="upper")
    with pytest.raises(ValueError, match=r"\ba\b"):
        api.eigh(dropin.place(np.ones((N, N // 2)), ROWS, mesh))


def test_eigh_takes_jax_scipy_keywords(rng):
    """jax.scipy.linalg.eigh's overwrite_a, overwrite_b, turbo and
    check_finite change nothing."""
    mesh = dropin.mesh(2, "auto")
    a = dropin.place(dropin.spaced(rng, N, np.float64), ROWS, mesh)
    w, v = api.eigh(a)
    w2, v2 = api.eigh(a, overwrite_a=True, overwrite_b=True, turbo=False, check_finite=False)
    np.testing.assert_array_equal(np.asarray(w2), np.asarray(w))
    np.testing.assert_array_equal(np.asarray(v2), np.asarray(v))


def test_eigh_subset_raises_as_jax(rng):
    """eigvals (a subset): JAX's NotImplementedError, naming the argument."""
    a = dropin.spaced(rng, N, np.float64)
    with pytest.raises(NotImplementedError):
        jsl.eigh(a, eigvals=(0, 2))
    with pytest.raises(NotImplementedError, match=r"\beigvals\b"):
        api.eigh(a, eigvals=(0, 2))


# ---- the generalized problem (b, type) -------------------------------------------------------


def _jax_solves_generalized() -> bool:
    try:
        jsl.eigh(np.eye(2), np.eye(2))
    except NotImplementedError:  # jax < 0.12
        return False
    return True


JAX_GENERALIZED = _jax_solves_generalized()
TYPES = (1, 2, 3)


def generalized_ref(a, b, kind):
    """(w, v) of the generalized problem by JAX: its own eigh from jax 0.12;
    before that, the reduction through b = L L^H spelled out in jnp."""
    if JAX_GENERALIZED:
        return jsl.eigh(a, b, type=kind)
    h = lambda x: jnp.conj(jnp.swapaxes(x, -1, -2))  # noqa: E731
    l_ = jnp.linalg.cholesky((b + h(b)) / 2)
    a = (a + h(a)) / 2
    if kind == 1:
        half = jsl.solve_triangular(l_, a, lower=True)  # L^-1 a
        c = jsl.solve_triangular(l_, h(half), lower=True)  # L^-1 a L^-H
    else:
        c = h(l_) @ a @ l_
    w, y = jnp.linalg.eigh(c)
    return w, (l_ @ y if kind == 3 else jsl.solve_triangular(l_, y, lower=True, trans="C"))


def pencil(rng, dtype):
    """a with spaced eigenvalues and b positive definite at condition 2: the
    generalized eigenvalues keep gaps wide enough for derivatives."""
    return dropin.spaced(rng, N, dtype), dropin.spd(rng, N, dtype, condition=2.0)


def skip_without_jax_generalized():
    if dropin.REFERENCE and not JAX_GENERALIZED:
        pytest.skip("JAX before 0.12 has no generalized eigh to run these against")


@pytest.mark.parametrize("case, kind", dropin.sweep(small=True, also=("type", TYPES)))
def test_generalized_eigh(rng, case, kind):
    """eigh(a, b=b, type=k) against JAX's generalized eigh in every mode, on
    every mesh size: eigenvalues and |V|^2."""
    skip_without_jax_generalized()
    dropin.check_case(
        case,
        lambda a, b: invariants(api.eigh(a, b=b, type=kind)),
        lambda a, b: invariants(generalized_ref(a, b, kind)),
        pencil,
        (ROWS, ROWS),
        rng,
    )


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=dropin.dtype_id)
@pytest.mark.parametrize("kind_of_mesh", ["auto", "explicit"])
def test_generalized_eigh_solves_the_problem(rng, kind, dtype, kind_of_mesh):
    """The three problems as scipy.linalg.eigh states them, on 4 devices: a v
    = w b v, a b v = w v, b a v = w v; v^H b v = I (types 1, 2), v^H b^-1 v
    = I (type 3); eigvals_only gives the same w; the vectors come back by
    columns as the standard problem's."""
    skip_without_jax_generalized()
    mesh = dropin.mesh(4, kind_of_mesh)
    a, b = pencil(rng, dtype)
    w, v = api.eigh(dropin.place(a, ROWS, mesh), b=dropin.place(b, ROWS, mesh), type=kind)
    a64, b64 = dropin.promote(a), dropin.promote(b)
    w64, v64 = np.asarray(w).astype(np.float64), np.asarray(v).astype(dropin.wide(dtype))
    dropin.assert_close(w, scipy_eigvals(a64, b64, kind), dtype, what="eigenvalues")
    lhs = {1: a64 @ v64, 2: a64 @ b64 @ v64, 3: b64 @ a64 @ v64}[kind]
    rhs = (b64 @ v64 if kind == 1 else v64) * w64
    scale = np.linalg.norm(a64) * np.linalg.norm(b64) * max(1.0, np.linalg.norm(v64))
    assert np.linalg.norm(lhs - rhs) <= dropin.tol(dtype) * scale
    metric = np.linalg.inv(b64) if kind == 3 else b64
    assert np.linalg.norm(v64.conj().T @ metric @ v64 - np.eye(N)) <= dropin.tol(dtype) * 10
    if not dropin.REFERENCE:
        assert v.sharding.spec == jax.sharding.PartitionSpec(None, "x")
    only = api.eigh(dropin.place(a, ROWS, mesh), b=dropin.place(b, ROWS, mesh), type=kind,
                    eigvals_only=True)
    dropin.assert_close(only, w, dtype, what="eigvals_only")


def scipy_eigvals(a, b, kind):
    return scipy.linalg.eigh(a, b, type=kind, eigvals_only=True)


def test_generalized_eigh_broadcasts_batches(rng):
    """A batch of a against one b, and vmap over pairs, as JAX's broadcasting
    eigh (jnp.vectorize over (n,n),(n,n)) does."""
    skip_without_jax_generalized()
    dtype = np.float64
    a = np.stack([pencil(rng, dtype)[0] for _ in range(2)])
    b = pencil(rng, dtype)[1]
    w = api.eigh(a, b=b, type=2, eigvals_only=True)
    assert w.shape == (2, N)
    for i in range(2):
        dropin.assert_close(w[i], scipy_eigvals(a[i], b, 2), dtype, what=f"batch element {i}")
    bs = np.stack([b, pencil(rng, dtype)[1]])
    wv, vv = jax.vmap(lambda a, b: tuple(api.eigh(a, b=b)))(a, bs)
    assert wv.shape == (2, N) and vv.shape == (2, N, N)
    dropin.assert_close(wv[1], scipy_eigvals(a[1], bs[1], 1), dtype, what="vmap element 1")


def test_generalized_eigh_of_a_b_not_positive_definite(rng):
    """b not positive definite: NaN results, or LinAlgError with
    on_failure="raise"."""
    skip_without_jax_generalized()
    a = dropin.spaced(rng, N, np.float64)
    b = dropin.not_spd(rng, N, np.float64)
    mesh = dropin.mesh(2)
    w, v = api.eigh(dropin.place(a, ROWS, mesh), b=dropin.place(b, ROWS, mesh))
    assert np.isnan(np.asarray(w)).all() and np.isnan(np.asarray(v)).all()
    if not dropin.REFERENCE:
        import jaxmg

        with pytest.raises(jaxmg.LinAlgError):
            api.eigh(a, b=b, on_failure="raise")


@pytest.mark.parametrize("keyword, error, words", [
    ({"type": 4}, ValueError, "type must be 1, 2, or 3"),
    ({"type": 0, "b": "eye"}, ValueError, "type must be 1, 2, or 3"),
    ({"b": "small"}, ValueError, r"\(3, 3\)"),
    ({"b": "vector"}, ValueError, r"argument b to eigh must have shape \[\.\.\., n, n\]"),
    ({"b": "eye", "UPLO": "U"}, ValueError, "UPLO"),
    ({"b": "eye", "symmetrize_input": False}, ValueError, "symmetrize_input"),
], ids=["type", "type-with-b", "b-order", "b-vector", "UPLO", "symmetrize_input"])
def test_generalized_eigh_refuses_bad_arguments(rng, keyword, error, words):
    """A type JAX refuses (its message), a b of another order, and the
    standard problem's triangle options beside b, by name."""
    if dropin.REFERENCE:
        pytest.skip("jaxmg's own refusals")
    a = dropin.spaced(rng, N, np.float64)
    b = {"eye": np.eye(N), "small": np.eye(3), "vector": np.ones(N)}
    keyword = {k: b.get(v, v) if isinstance(v, str) else v for k, v in keyword.items()}
    with pytest.raises(error, match=words):
        api.eigh(a, **keyword)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128],
                         ids=dropin.dtype_id)
def test_eigvalsh_eager_as_jit_and_jax(rng, dtype):
    """Eager eigvalsh equals its jitted self and jnp.linalg.eigvalsh within the
    tolerance JAX's _CompileAndCheck allows (1e-6 for 32-bit types, 1e-15 for
    64-bit ones): the eigenvalues of eigh, as JAX computes them."""
    a = dropin.random(rng, (50, 50), dtype) * 3
    h = (a + a.conj().T) / 2
    tol = 1e-6 if np.finfo(dtype).bits == 32 else 1e-15
    eager = np.asarray(api.eigvalsh(h))
    np.testing.assert_allclose(np.asarray(jax.jit(api.eigvalsh)(h)), eager, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(jnp.linalg.eigvalsh(h)), eager, rtol=tol, atol=tol)
