"""The settings JAX's own linear-algebra tests run under, and what those tests
check besides values: strict dtype promotion with rank promotion "raise"
(every implicit int32/int64 mix or broadcast is an error there), derivative
products at Precision.HIGHEST, eager and jit giving the same eigenvectors,
the Hermitian SVD under every transformation, and JAX's error type for a
half-precision input."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dropin
import helpers
from dropin import PLAIN, ROWS, api

STRICT_DTYPES = (np.float32, np.float64, np.complex128)
PLACEMENTS = ((PLAIN, 1), (ROWS, 4))


def _spd(rng, n, dtype):
    return dropin.spd(rng, n, dtype)


def _hermitian(rng, n, dtype):
    x = dropin.random(rng, (n, n), dtype)
    return (x + x.conj().T) / 2


# name -> (the call, the test matrix, whether a real loss of it can be differentiated)
ROUTINES = {
    "det": (lambda a: api.det(a), dropin.general, True),
    "slogdet": (lambda a: api.slogdet(a), dropin.general, True),
    "lu": (lambda a: api.lu(a), dropin.general, True),
    "lu_factor_solve": (lambda a: api.lu_solve(api.lu_factor(a), a[:, :2]), dropin.general, True),
    "inv": (lambda a: api.inv(a), dropin.general, True),
    "solve": (lambda a: api.solve(a, a[:, 0]), dropin.general, True),
    "cholesky": (lambda a: api.cholesky(a), _spd, True),
    "eigh": (lambda a: api.eigh(a)[0], _hermitian, True),
    "svd_hermitian": (lambda a: api.svd(a, hermitian=True, compute_uv=False), _hermitian, False),
    "qr": (lambda a: api.qr(a), dropin.general, False),
    "polar": (lambda a: getattr(api, "polar")(a), dropin.general, False),
}


def _loss(fn):
    def loss(a):
        return sum(jnp.sum(jnp.abs(x) ** 2) for x in jax.tree.leaves(fn(a))
                   if jnp.issubdtype(x.dtype, jnp.inexact))
    return loss


def _skip_missing(name):
    if name == "polar" and not hasattr(api, "polar"):
        pytest.skip("the reference API has no polar")


# Every routine in every dtype; the placements taken in turn, so each routine
# and each dtype runs both on one device and row-sharded.
STRICT_CASES = [
    pytest.param(name, dtype, placement, id=f"{name}-{dropin.dtype_id(dtype)}-{placement[0]}")
    for i, name in enumerate(ROUTINES) for j, dtype in enumerate(STRICT_DTYPES)
    for placement in [PLACEMENTS[(i + j) % len(PLACEMENTS)]]
]


@pytest.mark.parametrize("name, dtype, placement", STRICT_CASES)
def test_strict_promotion_gives_the_permissive_result(rng, name, dtype, placement):
    """Under jax_numpy_dtype_promotion="strict" and rank promotion "raise"
    (JAX's test defaults) every routine runs, eager, jitted and
    differentiated, and returns what it returns without them."""
    _skip_missing(name)
    fn, kind, differentiable = ROUTINES[name]
    how, devices = placement
    mesh_ = dropin.mesh(devices) if how == ROWS else None
    a = dropin.place(kind(rng, dropin.N, dtype), how, mesh_)
    forms = {"eager": fn, "jit": jax.jit(fn)}
    if differentiable:
        forms["grad"] = jax.grad(_loss(fn), holomorphic=False)
    want = {form: jax.tree.map(np.asarray, f(a)) for form, f in forms.items()}
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        got = {form: jax.tree.map(np.asarray, f(a)) for form, f in forms.items()}
    for form in forms:
        for g, w in zip(jax.tree.leaves(got[form]), jax.tree.leaves(want[form])):
            assert g.dtype == w.dtype, form
            np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                       atol=0, err_msg=form)


HIGHEST = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
DIFFERENTIATED = {
    "cholesky": (lambda a: api.cholesky(a), _spd),
    "eigh": (lambda a: api.eigh(a), _hermitian),
    "eigvalsh": (lambda a: api.eigvalsh(a), _hermitian),
    "inv": (lambda a: api.inv(a), dropin.general),
    "solve": (lambda a: api.solve(a, a[:, :1]), dropin.general),
    "slogdet": (lambda a: api.slogdet(a), dropin.general),
    "det": (lambda a: api.det(a), dropin.general),
    "lu": (lambda a: api.lu(a), dropin.general),
    "solve_triangular": (lambda a: api.solve_triangular(a, a[:, :1], lower=True), dropin.general),
    "cho_solve": (lambda a: api.cho_solve(api.cho_factor(a), a[:, :1]), _spd),
}


@pytest.mark.parametrize("name", list(DIFFERENTIATED))
def test_derivative_products_run_at_full_precision(rng, name):
    """Every matrix product in a derivative runs at Precision.HIGHEST, as in
    JAX's own rules (on a GPU the float32 default is TF32, 10 bits)."""
    fn, kind = DIFFERENTIATED[name]
    a = kind(rng, 4, np.float32)  # det of order 2 or 3 is JAX's closed form, with no product
    jaxpr = jax.make_jaxpr(functools.partial(jax.jvp, fn))((a,), (a,))
    precisions = helpers.dot_precisions(jaxpr.jaxpr)
    # JAX's own det rule has none; jaxmg's derivatives all multiply.
    assert precisions or dropin.REFERENCE, "the derivative has no matrix product to check"
    assert all(p == HIGHEST for p in precisions), precisions


@pytest.mark.parametrize("symmetrize", [True, False])
@pytest.mark.parametrize("dtype", dropin.DTYPES, ids=dropin.dtype_id)
def test_eigh_eager_and_jit_give_the_same_vectors(rng, dtype, symmetrize):
    """One plain matrix, the default (lower) triangle: eager, jit and vmap
    return the same eigenvectors (an eigenvector's sign or phase is not
    unique, so differing code paths would flip them)."""
    x = dropin.random(rng, (9, 9), dtype)
    fn = functools.partial(api.eigh, symmetrize_input=symmetrize)
    w_e, v_e = fn(x)
    w_j, v_j = jax.jit(fn)(x)
    w_v, v_v = jax.vmap(fn)(x[None])
    tol = 50 * np.finfo(dtype).eps
    for w, v in ((w_j, v_j), (w_v[0], v_v[0])):
        np.testing.assert_allclose(w, w_e, rtol=tol, atol=tol)
        np.testing.assert_allclose(v, v_e, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", (np.float32, np.complex128), ids=dropin.dtype_id)
def test_hermitian_svd_under_jit_vmap_and_jvp(rng, dtype):
    """svd(a, hermitian=True) on a plain traced matrix: the singular values
    |eigenvalues| and a = U diag(s) V^H, as jnp.linalg.svd(hermitian=True)."""
    h = _hermitian(rng, dropin.N, dtype)
    want = np.linalg.svd(h.astype(dropin.wide(dtype)), compute_uv=False)
    tol = 100 * dropin.N * np.finfo(dtype).eps
    svd = functools.partial(api.svd, hermitian=True)
    u, s, vh = jax.jit(svd)(h)
    np.testing.assert_allclose(s, want, rtol=tol, atol=tol)
    np.testing.assert_allclose((u * s) @ vh, h, atol=tol * np.abs(want).max())
    s_batch = jax.vmap(lambda x: svd(x, compute_uv=False))(h[None])
    np.testing.assert_allclose(s_batch[0], want, rtol=tol, atol=tol)
    s_primal, ds = jax.jvp(lambda x: svd(x, compute_uv=False), (h,), (h,))
    np.testing.assert_allclose(s_primal, want, rtol=tol, atol=tol)
    # s(h + t h) = (1 + t) s(h): the derivative along h is s itself.
    np.testing.assert_allclose(ds, want, rtol=10 * tol, atol=10 * tol * want.max())


def test_half_precision_raises_jaxs_error():
    """A float16 matrix: the error JAX raises for it, message included: a
    TypeError "qr does not accept dtype float16" (jax 0.11 on, JAX's
    testQrInvalidDtypeCPU), a NotImplementedError "Unsupported dtype float16"
    before; jaxmg's is both, naming the cast."""
    a = np.ones((5, 6), np.float16)
    with pytest.raises((TypeError, NotImplementedError),
                       match="qr does not accept dtype float16|Unsupported dtype float16"):
        jax.block_until_ready(api.qr(a))
    if not dropin.REFERENCE:
        for error in (TypeError, NotImplementedError):
            with pytest.raises(error, match=r"qr does not accept dtype float16 \(Unsupported "
                                            r"dtype float16\).*cast it first, e\.g\. "
                                            r"a\.astype\(jnp\.float32\)"):
                api.qr(a)


@pytest.mark.parametrize("name, primitive", [
    ("cholesky", "cholesky"), ("eigh", "eigh"), ("eigvalsh", "eigh"), ("svd", "svd"),
    ("solve", "lu"), ("inv", "lu"), ("slogdet", "lu"),
])
def test_half_precision_names_jaxs_primitive(name, primitive):
    """jnp.linalg's routines refuse float16 as JAX's (from jax 0.11) do, by
    the primitive: "cholesky does not accept dtype float16" (JAX's
    testLinalgPrimitivesInvalidDtype); on jax 0.10 JAX's own differ."""
    x = np.ones((3, 3), np.float16)
    args = (x, x) if name == "solve" else (x,)
    if dropin.REFERENCE and not _jax_names_primitives():
        pytest.skip("jax before 0.11 words these refusals otherwise")
    with pytest.raises(TypeError, match=f"{primitive} does not accept dtype float16"):
        getattr(api, name)(*args)


def _jax_names_primitives() -> bool:
    try:
        jnp.linalg.cholesky(np.ones((3, 3), np.float16))
    except TypeError as e:
        return "does not accept dtype" in str(e)
    except Exception:  # noqa: BLE001 - any other refusal is the older wording
        return False
    return True
