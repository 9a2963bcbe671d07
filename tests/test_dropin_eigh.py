"""eigh and eigvalsh with jax.numpy.linalg's options: UPLO= ("L", "U")
picks the triangle read when symmetrize_input=False; symmetrize_input=True
(the default) decomposes (a + a^H) / 2, also in derivatives; eigvalsh(UPLO=)
likewise; jax.scipy.linalg.eigh's lower= and eigvals_only= too. Against JAX
in every mode on every mesh (eigenvalues, and |V|^2, which no eigenvector
phase changes); A V = V diag(w) and V^H V = I where JAX's eigh tests check
them; errors naming the argument."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

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


@pytest.mark.parametrize("keyword", [{"b": "eye"}, {"type": 2}, {"eigvals": (0, 2)}],
                         ids=["b", "type", "eigvals"])
def test_eigh_generalized_or_subset_raises_as_jax(rng, keyword):
    """The generalized problem (b, type) and eigvals subsets: JAX's
    NotImplementedError, naming the argument."""
    a = dropin.spaced(rng, N, np.float64)
    keyword = {k: (np.eye(N) if v == "eye" else v) for k, v in keyword.items()}
    with pytest.raises(NotImplementedError):
        jsl.eigh(a, **keyword)
    with pytest.raises(NotImplementedError, match=rf"\b{next(iter(keyword))}\b"):
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
