"""NumPy-style leading batch dimensions, without vmap: a of shape
(..., N, N) with its rows sharded (P(None, ..., "x", None)), broadcast
against b's batch dimensions as jnp.linalg.solve does (b of shape (N,) is
one vector for every matrix; (..., N, K) a stack of right-hand sides), and
batches for inv, det, slogdet, cholesky and eigh; against JAX in every mode
(vmap adds a further batch axis in front) on every mesh."""

import warnings

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import dropin
from dropin import K, N, PLAIN, REP, ROWS, api


def matrices(rng, batch, dtype, kind=dropin.general):
    return np.stack([kind(rng, N, dtype) for _ in range(int(np.prod(batch)))]).reshape(
        batch + (N, N)
    )


# (a's batch shape, b's shape, b's placement): broadcasting as jnp.linalg.solve.
SOLVE_FORMS = (
    ((2,), (2, N, K), ROWS),
    ((2,), (N, K), REP),
    ((2, 1), (3, N, K), REP),
    ((), (2, N, K), ROWS),
    ((2,), (N,), REP),
)


def form_id(form):
    batch, b_shape, how = form
    return f"a{batch}-b{b_shape}-{how}".replace(" ", "")


@pytest.mark.parametrize("case, form", dropin.sweep(also=("form", SOLVE_FORMS, form_id)))
def test_solve_broadcasts(rng, case, form):
    batch, b_shape, b_how = form

    def make(rng, dtype):
        return matrices(rng, batch, dtype), dropin.random(rng, b_shape, dtype)

    dropin.check_case(
        case, lambda a, b: api.solve(a, b), jnp.linalg.solve, make, (ROWS, b_how), rng
    )


@pytest.mark.parametrize("case", dropin.sweep(small=True))
def test_solve_pos_batch(rng, case):
    """assume_a="pos" on a batch of matrices with a batch of right-hand sides."""

    def make(rng, dtype):
        return matrices(rng, (2,), dtype, dropin.spd), dropin.random(rng, (2, N, K), dtype)

    dropin.check_case(
        case,
        lambda a, b: api.solve(dropin.hermitian_part(a), b, assume_a="pos"),
        lambda a, b: jnp.linalg.solve(dropin.hermitian_part(a), b),
        make,
        (ROWS, ROWS),
        rng,
    )


def invariant_eigh(result):
    w, v = result
    return w, jnp.abs(v) ** 2


# name: (jaxmg call, JAX's, matrix kind, batch shape, condition of the compared values)
UNARY = {
    "inv": (lambda a: api.inv(a), jnp.linalg.inv, dropin.general, (1, 2), dropin.CONDITION),
    "det": (lambda a: api.det(a), jsl.det, dropin.general, (2,), dropin.CONDITION),
    "slogdet": (
        lambda a: api.slogdet(a),
        jnp.linalg.slogdet,
        dropin.general,
        (3,),
        dropin.CONDITION,
    ),
    "cholesky": (
        lambda a: api.cholesky(dropin.hermitian_part(a), lower=True),
        lambda a: jsl.cholesky(dropin.hermitian_part(a), lower=True),
        dropin.spd,
        (2,),
        dropin.CONDITION,
    ),
    "eigh": (
        lambda a: invariant_eigh(api.eigh(a)),
        lambda a: invariant_eigh(jnp.linalg.eigh(a)),
        dropin.spaced,
        (2,),
        15.0,
    ),
}


@pytest.mark.parametrize("case, name", dropin.sweep(also=("name", tuple(UNARY), str)))
def test_unary_batch(rng, case, name):
    call, ref, kind, batch, condition = UNARY[name]
    dropin.check_case(
        case,
        call,
        ref,
        lambda rng, dtype: (matrices(rng, batch, dtype, kind),),
        (ROWS,),
        rng,
        condition=condition,
    )


@pytest.mark.parametrize("name", list(UNARY))
def test_plain_batch(rng, name):
    """A batch on one device, as jnp.linalg takes it."""
    call, ref, kind, batch, condition = UNARY[name]
    dtype = np.float64
    a = matrices(rng, batch, dtype, kind)
    dropin.assert_close(call(dropin.place(a, PLAIN)), ref(jnp.asarray(a)), dtype, N, condition)


def test_batch_result_shapes(rng):
    """Shapes as jnp.linalg's: solve broadcasts, det and slogdet one value
    per matrix, eigh (..., N) and (..., N, N)."""
    mesh, dtype = dropin.mesh(2, "explicit"), np.float32
    a = dropin.place(matrices(rng, (2, 1), dtype), ROWS, mesh)
    b = dropin.place(dropin.random(rng, (3, N, K), dtype), ROWS, mesh)
    assert api.solve(a, b).shape == (2, 3, N, K)
    assert api.det(a).shape == (2, 1)
    assert [x.shape for x in api.slogdet(a)] == [(2, 1), (2, 1)]
    h = dropin.place(matrices(rng, (2, 1), dtype, dropin.spaced), ROWS, mesh)
    w, v = api.eigh(h)
    assert w.shape == (2, 1, N) and v.shape == (2, 1, N, N)
    assert jax.tree.leaves(api.inv(a))[0].shape == (2, 1, N, N)


# ---- leading batch dimensions of the factorisations, against JAX directly ----

import jaxmg  # noqa: E402


def _close(got, want, tol=1e-9):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape,
                                                                 want.dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _rows2(x):
    """x with its matrix rows sharded over a 2-device mesh."""
    return dropin.place(x, ROWS, dropin.mesh(2))


def test_lu_factor_and_cho_factor_take_batches(rng):
    a = np.stack([dropin.general(rng, 4, np.float64) for _ in range(3)])
    s = np.stack([dropin.spd(rng, 4, np.float64) for _ in range(3)])
    lu_, piv = jaxmg.lu_factor(_rows2(a))
    want_lu, want_piv = jsl.lu_factor(a)
    _close(lu_, want_lu)
    _close(piv, want_piv)
    c, lower = jaxmg.cho_factor(_rows2(s), lower=True)
    assert lower is True
    _close(np.tril(c), np.tril(jsl.cho_factor(s, lower=True)[0]))
    # a batched factor solves a shared b and a batch of b
    b, bs = dropin.random(rng, (4, 2), np.float64), dropin.random(rng, (3, 4), np.float64)
    _close(jaxmg.lu_solve(jaxmg.lu_factor(a), b), jsl.lu_solve(jsl.lu_factor(a), b))
    with pytest.warns(FutureWarning, match="jaxmg.cho_solve"):  # one vector per matrix, as JAX reads it
        x = jaxmg.cho_solve(jaxmg.cho_factor(s), bs)
    _close(x, jsl.cho_solve(jsl.cho_factor(s), bs))


@pytest.mark.parametrize("place", [lambda x: x, _rows2], ids=["plain", "rows"])
def test_cho_logdet_of_a_batched_factor(rng, place):
    """One log det per matrix of the batch (it was NaN: the batch was read as
    one matrix's diagonal)."""
    s = np.stack([dropin.spd(rng, 4, np.float64) for _ in range(6)]).reshape(2, 3, 4, 4)
    got = jaxmg.cho_logdet(jaxmg.cho_factor(place(s)))
    assert got.shape == (2, 3)
    _close(got, np.linalg.slogdet(s)[1])


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_takes_batches(rng, mode):
    a = dropin.random(rng, (2, 3, 5, 3), np.float64)
    got, want = jaxmg.qr(a, mode=mode), jnp.linalg.qr(a, mode=mode)
    if mode == "r":
        _close(np.abs(got), np.abs(want))
        return
    q, r = got
    assert np.shape(q) == want.Q.shape and np.shape(r) == want.R.shape
    _close(np.abs(r), np.abs(want.R))
    _close(np.asarray(q) @ np.asarray(r), a)


def test_svd_and_polar_take_batches(rng):
    a = dropin.random(rng, (3, 5, 3), np.float64)
    _close(jaxmg.svd(a, compute_uv=False), jnp.linalg.svd(a, compute_uv=False))
    u, s, vh = jaxmg.svd(a, full_matrices=False)
    assert np.shape(u) == (3, 5, 3) and np.shape(vh) == (3, 3, 3)
    _close((np.asarray(u) * np.asarray(s)[..., None, :]) @ np.asarray(vh), a)
    # grad of the singular values through the batch
    f = lambda x: jnp.sum(jaxmg.svd(x, compute_uv=False))  # noqa: E731
    g = lambda x: jnp.sum(jnp.linalg.svd(x, compute_uv=False))  # noqa: E731
    _close(jax.grad(f)(a), jax.grad(g)(a), 1e-8)
    for side, x in (("right", a), ("left", np.swapaxes(a, -1, -2))):
        up, p = jaxmg.polar(x, side=side)
        want_u, want_p = jsl.polar(x, side=side)
        _close(up, want_u, 1e-8)
        _close(p, want_p, 1e-8)


# (a's shape, b's shape): jax.scipy's rule for triangular, LU and Cholesky
# solves: b is a vector when it has one dimension, or one fewer than a with
# N entries last; otherwise a (..., N, K) matrix; batch axes broadcast.
SOLVE_B_FORMS = [((3, 4, 4), (4,)), ((3, 4, 4), (4, 2)), ((4, 4), (3, 4, 2)), ((3, 4, 4), (3, 4)),
                 ((1, 4, 4), (3, 4))]


@pytest.mark.parametrize("shapes", SOLVE_B_FORMS, ids=str)
def test_triangular_lu_cho_solves_broadcast_b(rng, shapes):
    a_shape, b_shape = shapes
    a = dropin.random(rng, a_shape, np.float64) + 4 * np.eye(4)
    b = dropin.random(rng, b_shape, np.float64)
    t = np.tril(a)
    spd = a @ np.swapaxes(a, -1, -2)
    f = jsl.lu_factor(a)
    # jax.scipy reads b as one vector per matrix here, and warns that it will not (at trace time)
    batched_vectors = len(b_shape) == len(a_shape) - 1 > 1 and b_shape[-1] == a_shape[-1]
    for ours, theirs in [
        (lambda: jaxmg.solve_triangular(t, b, lower=True), lambda: jsl.solve_triangular(t, b, lower=True)),
        (lambda: jaxmg.cho_solve((t, True), b), lambda: jsl.cho_solve((t, True), b)),
        (lambda: jaxmg.lu_solve(f, b, 1), lambda: jsl.lu_solve(f, b, 1)),
        (lambda: jaxmg.lu_solve(jaxmg.lu_factor(a), b, 1), lambda: jsl.lu_solve(f, b, 1)),
        (lambda: jaxmg.cho_solve(jaxmg.cho_factor(spd), b), lambda: jsl.cho_solve(jsl.cho_factor(spd), b)),
    ]:
        x, warned = _warned(ours)
        _close(x, theirs())
        assert warned == batched_vectors, (warned, shapes)


def _warned(call):
    """call()'s result and how many FutureWarnings it gave (one where JAX
    gives one: none doubled); jaxmg's point at the caller's line (this
    file), not at jaxmg's wrappers, and spell the fix."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    future = [w for w in caught if issubclass(w.category, FutureWarning)]
    for w in future:
        if str(w.message).startswith("jaxmg."):
            assert w.filename == __file__, w.filename
            assert "b[..., None]).squeeze(-1)" in str(w.message), w.message
    return out, len(future)


def test_batched_vector_warning_under_jit(rng):
    a = dropin.random(rng, (3, 4, 4), np.float64) + 4 * np.eye(4)
    t, b = np.tril(a), dropin.random(rng, (3, 4), np.float64)
    with pytest.warns(FutureWarning, match=r"jaxmg\.cho_solve: b of shape \(3, 4\)"):
        x = jax.jit(lambda t, b: jaxmg.cho_solve((t, True), b))(t, b)
    _close(x, jsl.cho_solve((t, True), b))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the future reading's spelling is silent
        y = jax.jit(lambda t, b: jaxmg.cho_solve((t, True), b[..., None]).squeeze(-1))(t, b)
    _close(y, x)


def test_mismatched_b_is_refused_as_by_jax(rng):
    a = dropin.random(rng, (2, 3, 4, 4), np.float64) + 4 * np.eye(4)
    b = dropin.random(rng, (3, 4), np.float64)  # neither a vector per matrix nor (..., 4, K)
    with pytest.raises(ValueError):
        jsl.solve_triangular(a, b, lower=True)
    with pytest.raises(ValueError):
        jaxmg.solve_triangular(a, b, lower=True)


def test_batch_of_vectors_is_refused_naming_the_fix(rng):
    """a (3, 4, 4) with b (3, 4): JAX since 0.5 refuses it and names b[..., None]."""
    a = dropin.random(rng, (3, 4, 4), np.float64) + 4 * np.eye(4)
    b = dropin.random(rng, (3, 4), np.float64)
    with pytest.raises(ValueError, match=r"b\[\.\.\., None\]"):
        jnp.linalg.solve(a, b)
    with pytest.raises(ValueError, match=r"b\[\.\.\., None\]"):
        jaxmg.solve(a, b)


RANK_PROMOTING = {  # a batch of two beside an unbatched operand, as jnp.vectorize sees them
    "solve": lambda a, b, m: jaxmg.numpy.linalg.solve(a, b),
    "cho_solve": lambda a, b, m: jaxmg.scipy.linalg.cho_solve(jaxmg.scipy.linalg.cho_factor(a), b),
    "lu_solve": lambda a, b, m: jaxmg.scipy.linalg.lu_solve(jaxmg.scipy.linalg.lu_factor(a), b),
    "solve_triangular": lambda a, b, m: jaxmg.scipy.linalg.solve_triangular(a, b),
    "eigh with b": lambda a, b, m: jaxmg.scipy.linalg.eigh(a, m, eigvals_only=True),
}


@pytest.mark.parametrize("name", list(RANK_PROMOTING))
@pytest.mark.parametrize("place", ["plain", "rows"])
def test_rank_promotion_is_refused_or_warned_as_jax_config_says(rng, name, place):
    """jax_numpy_rank_promotion "raise" refuses, "warn" warns, "allow" (the
    default) broadcasts, as jnp.vectorize in JAX's own solves does."""
    a = np.stack([dropin.spd(rng, N, np.float64)] * 2)
    b, m = dropin.random(rng, (N, K), np.float64), dropin.spd(rng, N, np.float64)
    if place == "rows":
        mesh = dropin.mesh(4)
        a, b, m = (dropin.place(a, ROWS, mesh, batched=1), dropin.place(b, REP, mesh),
                   dropin.place(m, ROWS, mesh))
    call = RANK_PROMOTING[name]
    with jax.numpy_rank_promotion("raise"), pytest.raises(ValueError, match="rank promotion"):
        call(a, b, m)
    with jax.numpy_rank_promotion("warn"), pytest.warns(UserWarning, match="rank promotion"):
        call(a, b, m)
    assert np.shape(call(a, b, m))[0] == 2
