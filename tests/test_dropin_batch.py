"""NumPy-style leading batch dimensions, without vmap: a of shape
(..., N, N) with its rows sharded (P(None, ..., "x", None)), broadcast
against b's batch dimensions as jnp.linalg.solve does (b of shape (N,) is
one vector for every matrix; (..., N, K) a stack of right-hand sides), and
batches for inv, det, slogdet, cholesky and eigh; against JAX in every mode
(vmap adds a further batch axis in front) on every mesh."""

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
