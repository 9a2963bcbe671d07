"""Results typed as JAX's on explicit mesh axes, where types decide what the
caller's code after the call may do: operands replicated on the mesh give
replicated results, as JAX's functions give them (indexing and dynamic
slices of a result then work as they do on JAX's), eagerly and under jit;
rows sharded stay sharded; and forward-mode Jacobians (vmap of jvp) of a
matrix whose rows the devices do not divide, and second-order checks of
slogdet's and inv's gradients on host arrays, run under jax.set_mesh as
JAX's do."""

import jax
import jax.numpy as jnp
import jax.test_util
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import dropin
import jaxmg.numpy.linalg as mnl
import jaxmg.scipy.linalg as msl

DEVICES = 4
N = 8


def _spd(rng, n=N):
    g = rng.standard_normal((n, n)).astype(np.float32)
    return g @ g.T + n * np.eye(n, dtype=np.float32)


def _general(rng, n=N):
    return rng.standard_normal((n, n)).astype(np.float32) + 3 * np.eye(n, dtype=np.float32)


# name: (call on a namespace pair (numpy.linalg, scipy.linalg), input maker)
CALLS = {
    "svd": (lambda nl, sl, a: nl.svd(a), _general),
    "svd_batch": (lambda nl, sl, a: nl.svd(a, full_matrices=False),
                  lambda rng: np.stack([_general(rng), _general(rng)])),
    "eigh": (lambda nl, sl, a: nl.eigh(a), _spd),
    "eigvalsh": (lambda nl, sl, a: nl.eigvalsh(a), _spd),
    "cholesky": (lambda nl, sl, a: nl.cholesky(a), _spd),
    "qr": (lambda nl, sl, a: nl.qr(a), _general),
    "pinv": (lambda nl, sl, a: nl.pinv(a), _general),
    "inv": (lambda nl, sl, a: nl.inv(a), _general),
    "solve": (lambda nl, sl, a: nl.solve(a, a[:, :2]), _general),
    "lstsq": (lambda nl, sl, a: nl.lstsq(a, a[:, 0])[0], _general),
    "matrix_power": (lambda nl, sl, a: nl.matrix_power(a, -2), _general),
    "lu": (lambda nl, sl, a: sl.lu(a), _general),
    "polar": (lambda nl, sl, a: sl.polar(a), _general),
    "expm": (lambda nl, sl, a: sl.expm(a / 8), _general),
    "cho_solve": (lambda nl, sl, a: sl.cho_solve(sl.cho_factor(a), a[:, :1]), _spd),
    "solve_triangular": (lambda nl, sl, a: sl.solve_triangular(a, a[:, :2], lower=True),
                         _general),
}


def _specs(out):
    return [tuple(jax.typeof(x).sharding.spec) + (None,) * (x.ndim - len(jax.typeof(x).sharding.spec))
            for x in jax.tree.leaves(out)]


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", list(CALLS))
def test_replicated_operands_give_replicated_results(rng, name, mode):
    call, make = CALLS[name]
    a = make(rng)
    mesh = dropin.mesh(DEVICES, "explicit")
    placed = jax.device_put(a, NamedSharding(mesh, P()))
    ours = lambda x: call(mnl, msl, x)  # noqa: E731
    theirs = lambda x: call(jnp.linalg, jsl, x)  # noqa: E731
    if mode == "jit":
        ours, theirs = jax.jit(ours), jax.jit(theirs)
    with jax.set_mesh(mesh):
        got, want = ours(placed), theirs(placed)
        assert _specs(got) == _specs(want), (_specs(got), _specs(want))
        first = jax.tree.leaves(got)[0]
        # what the caller's code does next: a dynamic slice of a row, as of JAX's result
        row = jax.lax.dynamic_slice_in_dim(first, jnp.int32(1), 1, axis=first.ndim - 2) \
            if first.ndim >= 2 else first[jnp.int32(1)]
        np.testing.assert_allclose(np.asarray(row), np.asarray(
            jax.lax.dynamic_slice_in_dim(jax.tree.leaves(want)[0], 1, 1, axis=first.ndim - 2)
            if first.ndim >= 2 else jax.tree.leaves(want)[0][1]), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", ["inv", "matrix_power", "eigvalsh"])
def test_a_replicated_batch_under_jit_of_vmap(rng, name):
    """jit(vmap(f)) of a batch replicated on the mesh: the elements' results
    come typed replicated, as JAX's, and the caller's dynamic slice works."""
    mesh = dropin.mesh(DEVICES, "explicit")
    batch = np.stack([_spd(rng), _spd(rng)])
    ours = {"inv": mnl.inv, "matrix_power": lambda a: mnl.matrix_power(a, -2),
            "eigvalsh": mnl.eigvalsh}[name]
    theirs = {"inv": jnp.linalg.inv, "matrix_power": lambda a: jnp.linalg.matrix_power(a, -2),
              "eigvalsh": jnp.linalg.eigvalsh}[name]

    def sliced(f):
        return jax.jit(lambda a, i: jax.lax.dynamic_slice_in_dim(jax.vmap(f)(a), i, 1, axis=1))

    with jax.set_mesh(mesh):
        placed = jax.device_put(batch, NamedSharding(mesh, P()))
        got, want = sliced(ours)(placed, 1), sliced(theirs)(placed, 1)
        assert _specs(got) == _specs(want), (_specs(got), _specs(want))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=1e-6)


def test_a_named_spec_keeps_jaxmgs_layout(rng):
    """A call that names its spec (or mesh) asks for jaxmg's layout: rows
    sharded even where the operand is replicated."""
    mesh = dropin.mesh(DEVICES, "explicit")
    placed = jax.device_put(_general(rng), NamedSharding(mesh, P()))
    with jax.set_mesh(mesh):
        assert _specs(mnl.inv(placed)) == [(None, None)]
        assert _specs(mnl.inv(placed, mesh=mesh, spec=P("x", None))) == [("x", None)]
        assert _specs(mnl.svd(placed, spec=P("x", None))[0]) == [("x", None)]


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_rows_sharded_stay_sharded(rng, mode):
    mesh = dropin.mesh(DEVICES, "explicit")
    a, s = (jax.device_put(x, NamedSharding(mesh, P("x", None)))
            for x in (_general(rng), _spd(rng)))
    calls = {"svd": lambda a, s: mnl.svd(a)[0], "pinv": lambda a, s: mnl.pinv(a),
             "cholesky": lambda a, s: mnl.cholesky(s), "inv": lambda a, s: mnl.inv(a),
             "slogdet": lambda a, s: mnl.inv(a) * mnl.slogdet(a)[1]}
    with jax.set_mesh(mesh):
        for name, call in calls.items():
            out = (call if mode == "eager" else jax.jit(call))(a, s)
            assert jax.typeof(out).sharding.spec[0] == "x", (name, jax.typeof(out))


@pytest.mark.parametrize("n", [2, 6])
def test_forward_jacobians_under_an_explicit_mesh(n):
    """jax.jacfwd (vmap of jvp) of eigh's vectors, to third order, on a
    matrix the 4 devices cannot split evenly: JAX's own regression test
    (issue 1383), run under jax.set_mesh."""
    mesh = dropin.mesh(DEVICES, "explicit")
    with jax.set_mesh(mesh):
        tmp = jax.random.uniform(jax.random.key(0), (n, n))
        a = jnp.dot(tmp, tmp.T) + jnp.eye(n)

        def f(eigh):
            def g(x):
                _, v = eigh(x)
                return jnp.dot(jnp.dot(v, x), v.T)
            return g

        for order in (1, 3) if n == 2 else (1,):
            ours, theirs = f(mnl.eigh), f(jnp.linalg.eigh)
            for _ in range(order):
                ours, theirs = jax.jacfwd(ours), jax.jacfwd(theirs)
            got = np.asarray(ours(a))
            assert not np.isnan(got).any()
            if n == 2:  # distinct eigenvalues far apart: JAX's derivatives as reference
                np.testing.assert_allclose(got, np.asarray(theirs(a)), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["slogdet", "inv"])
def test_second_order_gradients_under_an_explicit_mesh(rng, name):
    """jax.test_util.check_grads to order 2 (linearize, then transpose) of a
    host matrix under jax.set_mesh: the identity the LU solves read is made
    while JAX evaluates the known parts of the derivative eagerly."""
    mesh = dropin.mesh(DEVICES, "explicit")
    a = _general(rng, 4).astype(np.float64)
    f = {"slogdet": lambda x: mnl.slogdet(x)[1], "inv": mnl.inv}[name]
    with jax.set_mesh(mesh):
        jax.test_util.check_grads(f, (a,), 2, atol=1e-1, rtol=2e-1)
