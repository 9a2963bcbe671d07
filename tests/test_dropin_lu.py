"""LU in LAPACK form, as jax.scipy.linalg gives it: lu_factor(a) unpacking
as (lu, piv) (L below the diagonal with its unit diagonal implied, U on and
above, 0-based row interchanges), lu(a) returning (p, l, u) or, with
permute_l, (p @ l, u); lu_solve((lu, piv), b, trans) on jaxmg's factor
rebuilt by hand and on one the user made with jax.scipy (and the other way
round); exactly singular and zero matrices as JAX factors them; against
JAX in every mode on every mesh; errors naming the argument."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import jax.test_util
import numpy as np
import pytest

import dropin
from dropin import K, N, REP, ROWS, api


def square(rng, dtype):
    return (dropin.general(rng, N, dtype),)


def check_lapack_form(a, lu, piv, dtype):
    """P A = L U with P from the interchanges, and |L| <= 1 (partial
    pivoting; sqrt(2) for complex entries, which LAPACK's pivot search
    measures by |Re| + |Im|)."""
    a, lu, piv = dropin.promote(a), np.asarray(lu), np.asarray(piv)
    n = a.shape[0]
    assert lu.shape == (n, n) and piv.shape == (n,) and np.issubdtype(piv.dtype, np.integer)
    assert all(i <= p < n for i, p in enumerate(piv)), piv
    pa = np.array(a)
    for i, p in enumerate(piv):
        pa[[i, p]] = pa[[p, i]]
    lower = np.tril(lu, -1) + np.eye(n)
    upper = np.triu(lu)
    dropin.assert_close(
        lower @ upper, pa, dtype, n, dropin.CONDITION, what="L U", check_dtype=False
    )
    bound = np.sqrt(2) if dropin.is_complex(dtype) else 1.0
    assert np.abs(np.tril(lu, -1)).max(initial=0) <= bound * (1 + dropin.tol(dtype, n))


@pytest.mark.parametrize("case", dropin.sweep())
def test_lu_factor(rng, case):
    """(lu, piv) equal to JAX's: the same pivots, the same factors. The
    factor object (which keeps the engine's layout for lu_solve) unpacks as
    that pair."""
    dropin.check_case(case, lambda a: tuple(api.lu_factor(a)), jsl.lu_factor, square, (ROWS,),
                      rng)


@pytest.mark.parametrize("devices, kind", [(3, "auto"), (4, "explicit"), (0, "plain")])
def test_lu_factor_unpacks_in_lapack_form(rng, devices, kind):
    dtype = np.complex64
    a = dropin.general(rng, N, dtype)
    mesh = None if kind == "plain" else dropin.mesh(devices, kind)
    lu, piv = api.lu_factor(dropin.place_or_plain(a, ROWS, mesh))
    check_lapack_form(a, lu, piv, dtype)


@pytest.mark.parametrize("devices, kind", [(0, "plain"), (2, "auto"), (4, "explicit")])
def test_lu_factor_is_a_pair_as_jax(rng, devices, kind):
    """lu_factor's result, eager, jitted and vmapped, is a 2-sequence as
    jax.scipy's (lu, piv): len, indexing, slicing and iteration (JAX's tests
    compare results by len() and element by element); its parts, taken by
    index, go back into lu_solve."""
    dtype = np.float64
    a, b = dropin.general(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    mesh = None if kind == "plain" else dropin.mesh(devices, kind)
    a_dev = dropin.place_or_plain(a, ROWS, mesh)
    want = jsl.lu_factor(dropin.promote(a))
    got = api.lu_factor(a_dev)
    dropin.assert_sequence_close(got, want, dtype, what="eager")
    with dropin.jit_context(mesh):
        dropin.assert_sequence_close(jax.jit(api.lu_factor)(a_dev), want, dtype, what="jit")
    x = api.lu_solve((got[0], got[-1]), dropin.place_or_plain(b, REP, mesh))
    dropin.assert_close(x, jsl.lu_solve(want, b), dtype, condition=dropin.CONDITION)
    pair = np.stack([a, a.T])
    dropin.assert_sequence_close(jax.vmap(api.lu_factor)(jnp.asarray(pair)),
                                 jax.vmap(jsl.lu_factor)(dropin.promote(pair)), dtype, what="vmap")


@pytest.mark.parametrize(
    "case, permute_l", dropin.sweep(also=("permute_l", (False, True)), small=True)
)
def test_lu(rng, case, permute_l):
    """(p, l, u), or (p @ l, u) with permute_l, equal to JAX's."""
    dropin.check_case(
        case,
        lambda a: api.lu(a, permute_l=permute_l),
        lambda a: jsl.lu(a, permute_l=permute_l),
        square,
        (ROWS,),
        rng,
    )


SECOND_ORDER = {
    "lu": lambda a: api.lu(a),
    "lu-permute_l": lambda a: api.lu(a, permute_l=True),
    "det": lambda a: api.det(a),
    "slogdet": lambda a: api.slogdet(a),
    "inv": lambda a: api.inv(a),
    "solve": lambda a: api.solve(a, jnp.arange(1.0, 9.0, dtype=a.dtype)),
}


SECOND_ORDER_FORMS = ((0, False, np.float64), (2, True, np.complex128), (4, False, np.complex128),
                      (0, True, np.float64))


# Each routine in two of the forms (devices, jit, dtype), taken in turn: every
# form meets three routines, and every routine runs once sharded.
@pytest.mark.parametrize("name, devices, jit, dtype", [
    (name, *SECOND_ORDER_FORMS[(i + k) % len(SECOND_ORDER_FORMS)])
    for i, name in enumerate(SECOND_ORDER) for k in (0, 2)
])
def test_second_derivatives_as_jax(rng, name, devices, jit, dtype):
    """Second-order forward and reverse derivatives (jax.test_util.check_grads
    order=2, as JAX's tests of lu, det, slogdet and inv) on one device or rows
    sharded, eager or jitted."""
    n = 8
    a = dropin.general(rng, n, dtype)
    mesh = dropin.mesh(devices) if devices else None
    a_dev = dropin.place(a, ROWS if mesh else dropin.PLAIN, mesh)
    fn = jax.jit(SECOND_ORDER[name]) if jit else SECOND_ORDER[name]
    context = dropin.jit_context(mesh) if jit else dropin.transform_context(mesh)
    with context:
        jax.test_util.check_grads(fn, (a_dev,), order=2, modes=["fwd", "rev"], atol=1e-5,
                                  rtol=1e-5)


def test_lu_reconstructs(rng):
    mesh, dtype = dropin.mesh(2, "explicit"), np.float64
    a = dropin.general(rng, N, dtype)
    p, l, u = api.lu(dropin.place(a, ROWS, mesh))
    p, l, u = (np.asarray(x) for x in (p, l, u))
    assert np.array_equal(p @ p.T, np.eye(N)) and set(np.unique(p)) <= {0, 1}
    assert np.array_equal(l, np.tril(l)) and np.allclose(np.diagonal(l), 1)
    assert np.array_equal(u, np.triu(u))
    dropin.assert_close(p @ l @ u, a, dtype, condition=dropin.CONDITION)


# (trans, b's shape, b's placement), turned over with the cases.
SOLVE_FORMS = ((0, (N, K), REP), (1, (N,), ROWS), (2, (N, K), ROWS), (0, (N,), REP))


def form_id(form):
    trans, shape, how = form
    return f"trans{trans}-b{len(shape)}d-{how}"


@pytest.mark.parametrize(
    "case, form", dropin.sweep(also=("form", SOLVE_FORMS, form_id), small=True)
)
def test_lu_solve_of_lu_factor(rng, case, form):
    """lu_solve((lu, piv), b, trans) with the tuple rebuilt by hand."""
    trans, shape, b_how = form

    def solve(a, b):
        lu, piv = api.lu_factor(a)
        return api.lu_solve((lu, piv), b, trans=trans)

    dropin.check_case(
        case,
        solve,
        lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=trans),
        lambda rng, dtype: (dropin.general(rng, N, dtype), dropin.random(rng, shape, dtype)),
        (ROWS, b_how),
        rng,
    )


@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("devices, kind", [(4, "auto"), (8, "explicit"), (0, "plain")])
def test_lu_solve_takes_jax_factor(rng, devices, kind, trans):
    """A factor made with jax.scipy.linalg.lu_factor goes into jaxmg.lu_solve,
    its pivots int32 or int64 (which JAX's own lu_solve casts, from 0.11)."""
    dtype = np.complex128
    a, b = dropin.general(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    lu, piv = jsl.lu_factor(jnp.asarray(a))
    piv = piv.astype(np.int64) if trans == 1 else piv
    if kind == "plain":
        factor, b_dev = (lu, piv), jnp.asarray(b)
    else:
        mesh = dropin.mesh(devices, kind)
        factor = (
            dropin.place(np.asarray(lu), ROWS, mesh),
            dropin.place(np.asarray(piv), REP, mesh),
        )
        b_dev = dropin.place(b, REP, mesh)
    x = api.lu_solve(factor, b_dev, trans=trans)
    op = [a, a.T, a.conj().T][trans]
    dropin.assert_close(x, np.linalg.solve(op, b), dtype, condition=dropin.CONDITION)


@pytest.mark.parametrize("devices", [0, 4])
def test_lu_permute_l_under_strict_dtype_promotion(rng, devices):
    """p @ l in l's dtype, as JAX's: no real-by-complex promotion."""
    dtype = np.complex64
    a = dropin.general(rng, N, dtype)
    placed = jnp.asarray(a) if devices == 0 else dropin.place(a, ROWS, dropin.mesh(devices))
    with jax.numpy_dtype_promotion("strict"):
        pl, u = api.lu(placed, permute_l=True)
    assert pl.dtype == u.dtype == dtype
    dropin.assert_close(np.asarray(pl) @ np.asarray(u), a, dtype)


@pytest.mark.parametrize("devices", [0, 2])
def test_jax_lu_solve_takes_jaxmg_factor(rng, devices):
    dtype = np.float32
    a, b = dropin.general(rng, N, dtype), dropin.random(rng, (N, K), dtype)
    how, mesh = (dropin.PLAIN, None) if devices == 0 else (ROWS, dropin.mesh(devices))
    x = jsl.lu_solve(api.lu_factor(dropin.place(a, how, mesh)), jnp.asarray(b))
    dropin.assert_close(x, np.linalg.solve(dropin.promote(a), b), dtype, condition=dropin.CONDITION)


@pytest.mark.parametrize("devices, kind", [(1, "auto"), (2, "explicit")])
def test_singular_and_zero_matrices(devices, kind):
    """As JAX's tests: an exactly singular 2 x 2 still factors, P L U = A;
    the zero matrix factors to zeros with no interchange."""
    mesh = dropin.mesh(devices, kind)
    x = np.array([[-1.0, 3.0 / 2], [2.0 / 3, -1.0]], np.float32)
    p, l, u = api.lu(dropin.place(x, ROWS, mesh))
    np.testing.assert_allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), x, atol=1e-6)
    lu, piv = api.lu_factor(dropin.place(np.zeros((2, 2), np.float32), ROWS, mesh))
    np.testing.assert_array_equal(np.asarray(lu), np.zeros((2, 2)))
    np.testing.assert_array_equal(np.asarray(piv), [0, 1])


def test_errors_name_the_argument(rng):
    mesh, dtype = dropin.mesh(2), np.float64
    with pytest.raises(ValueError, match=r"\ba\b"):
        api.lu_factor(dropin.place(np.ones(N, dtype), ROWS, mesh))
    with pytest.raises(ValueError, match=r"\ba\b"):  # (an (N, N/2) a is factored, as by JAX)
        api.lu(dropin.place(np.ones(N, dtype), ROWS, mesh))
    factor = api.lu_factor(dropin.place(dropin.general(rng, N, dtype), ROWS, mesh))
    b = dropin.place(np.ones((N, 1), dtype), REP, mesh)
    with pytest.raises(ValueError, match=r"\btrans\b"):
        api.lu_solve(factor, b, trans=3)
    with pytest.raises(ValueError, match=r"\bb\b"):
        api.lu_solve(factor, dropin.place(np.ones((N + 2, 1), dtype), REP, mesh))
    lu_, piv = factor
    with pytest.raises(TypeError, match="piv"):  # pivots that are not integers, as JAX
        api.lu_solve((lu_, piv.astype(dtype)), b)


# ---- rectangular LU, against JAX directly ----

import jaxmg  # noqa: E402


@pytest.mark.parametrize("shape", [(4, 6), (6, 4)], ids=str)
@pytest.mark.parametrize("permute_l", [False, True])
def test_lu_of_a_rectangular_matrix_as_jax(rng, shape, permute_l):
    """jax.scipy.linalg.lu's shapes for an (M, N) a: p (M, M), l (M, K),
    u (K, N), K = min(M, N) (permute_l: p @ l and u), on one device or with
    rows sharded; differentiable as JAX's."""
    a = dropin.random(rng, shape, np.float64)
    want = jsl.lu(a, permute_l=permute_l)
    for x in (a, dropin.place(a, ROWS, dropin.mesh(2))):
        got = jaxmg.lu(x, permute_l=permute_l)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.shape(g) == w.shape and np.asarray(g).dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    t = dropin.random(rng, shape, np.float64)
    got_t = jax.jvp(lambda x: jaxmg.lu(x, permute_l=permute_l), (a,), (t,))[1]
    want_t = jax.jvp(lambda x: jsl.lu(x, permute_l=permute_l), (a,), (t,))[1]
    for g, w in zip(got_t, want_t):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (2, 4, 6)], ids=str)
def test_lu_factor_of_a_rectangular_matrix_as_jax(rng, shape):
    """jax.scipy.linalg.lu_factor of an (M, N) a: lu (M, N) and piv (K,),
    eager and jitted, on one device or with rows sharded; derivatives as
    JAX's."""
    a = dropin.random(rng, shape, np.float64)
    want = jsl.lu_factor(a)
    inputs = [a] if len(shape) > 2 else [a, dropin.place(a, ROWS, dropin.mesh(2))]
    for x in inputs:
        for f in (jaxmg.lu_factor, jax.jit(jaxmg.lu_factor)):
            got = f(x)
            assert len(got) == 2
            for g, w in zip(got, want):
                assert np.shape(g) == w.shape and np.asarray(g).dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    t = dropin.random(rng, shape, np.float64)
    got_t = jax.jvp(lambda x: jaxmg.lu_factor(x)[0], (a,), (t,))[1]
    want_t = jax.jvp(lambda x: jsl.lu_factor(x)[0], (a,), (t,))[1]
    np.testing.assert_allclose(got_t, want_t, rtol=1e-10, atol=1e-10)
