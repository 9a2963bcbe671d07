"""jax.vmap over leading batch dimensions of A, of B only and of both, of a
jitted call (and jit of vmap), of jax.grad, and of the factor pytrees; every
batched result equals the per-example calls (and NumPy). Batched A has shape
(batch, N, N) placed P(None, "x", None). Also jaxmg calls inside
jax.lax.scan and fori_loop (one call site running several iterations), and
factors as lax.cond branches and loop carries."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg

CONDITION = 10.0
BATCH = 3
N = 8
ROWS = P("x", None)


def general(rng, n, dtype):
    """Non-symmetric, singular values in [1, CONDITION]."""
    base = np.complex128 if np.iscomplexobj(dtype(0)) else np.float64
    u, _ = np.linalg.qr(helpers.random_matrix(rng, n, base))
    v, _ = np.linalg.qr(helpers.random_matrix(rng, n, base))
    return ((u * np.geomspace(1.0, CONDITION, n)) @ v.conj().T).astype(dtype)


def batched(x, mesh):
    """A stack of matrices, each row-sharded: P(None, "x", None)."""
    return jax.device_put(jnp.asarray(x), NamedSharding(mesh, P(None, "x", None)))


def close(got, want, dtype, n=N, scale=None):
    got, want = helpers.promote(got), helpers.promote(want)
    scale = np.abs(want).max() if scale is None else scale
    err = np.abs(got - want).max()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert err <= helpers.tolerance(dtype, n, CONDITION) * max(scale, 1.0), err


# ---- batch of A, of B, of both -------------------------------------------------------

# name: (jaxmg call on one example (a, b), NumPy reference, matrix kind)
CALLS = {
    "solve-gen": (lambda a, b, **kw: jaxmg.solve(a, b, **kw), np.linalg.solve, "general"),
    "solve-pos": (
        lambda a, b, **kw: jaxmg.solve(a, b, assume_a="pos", **kw), np.linalg.solve, "spd"
    ),
    "lu_solve-trans2": (lambda a, b, **kw: jaxmg.lu_solve(jaxmg.lu_factor(a, **kw), b, trans=2),
                        lambda a, b: np.linalg.solve(a.conj().T, b), "general"),
    "cho_solve": (lambda a, b, **kw: jaxmg.cho_solve(jaxmg.cho_factor(a, **kw), b),
                  lambda a, b: np.linalg.solve(a, b), "spd"),
}


def make(rng, kind, dtype, n=N):
    return helpers.spd(rng, n, dtype, CONDITION) if kind == "spd" else general(rng, n, dtype)


@pytest.mark.parametrize("batch", ["A", "B", "both"])
@pytest.mark.parametrize("name", list(CALLS))
def test_vmap_solves(rng, name, batch):
    dtype, mesh = np.complex128, helpers.mesh(2)
    call, ref, kind = CALLS[name]
    a = np.stack([make(rng, kind, dtype) for _ in range(BATCH)])
    b = helpers.random_matrix(rng, N, dtype, 2 * BATCH).T.reshape(BATCH, N, 2)
    kw = {"mesh": mesh, "spec": ROWS}
    if batch == "A":
        x = jax.vmap(lambda a: call(a, helpers.replicated(b[0], mesh), **kw))(batched(a, mesh))
        want = [ref(a[i], b[0]) for i in range(BATCH)]
    elif batch == "B":
        a_dev = helpers.rows(a[0], mesh)
        x = jax.vmap(lambda b: call(a_dev, b))(helpers.replicated(b, mesh))
        want = [ref(a[0], b[i]) for i in range(BATCH)]
    else:
        x = jax.vmap(lambda a, b: call(a, b, **kw))(batched(a, mesh), helpers.replicated(b, mesh))
        want = [ref(a[i], b[i]) for i in range(BATCH)]
    assert x.shape == (BATCH, N, 2) and x.dtype == dtype
    close(x, np.stack(want), dtype)
    # Equal to the per-example calls.
    i = BATCH - 1
    a_i = a[i] if batch != "B" else a[0]
    b_i = b[i] if batch != "A" else b[0]
    one = call(helpers.rows(a_i, mesh), helpers.replicated(b_i, mesh))
    close(x[i], one, dtype)


# name: (batched jaxmg result of one example a, NumPy reference)
UNARY = {
    "slogdet": (lambda a, **kw: jnp.stack(jaxmg.slogdet(a, **kw)).real,
                lambda a: np.array(np.linalg.slogdet(a)).real, "general"),
    "slogdet-sign": (lambda a, **kw: jaxmg.slogdet(a, **kw).sign,
                     lambda a: np.linalg.slogdet(a)[0], "general"),
    "cho_logdet": (lambda a, **kw: jaxmg.cho_logdet(jaxmg.cho_factor(a, **kw)),
                   lambda a: np.linalg.slogdet(a)[1], "spd"),
    "inv-gen": (lambda a, **kw: jaxmg.inv(a, **kw), np.linalg.inv, "general"),
    "inv-pos": (lambda a, **kw: jaxmg.inv(a, assume_a="pos", **kw), np.linalg.inv, "spd"),
    "eigvalsh": (lambda a, **kw: jaxmg.eigvalsh(a, **kw), np.linalg.eigvalsh, "spd"),
    "eigh-values": (lambda a, **kw: jaxmg.eigh(a, **kw).eigenvalues, np.linalg.eigvalsh, "spd"),
    # |V|^2 elementwise: invariant under each eigenvector's phase (the
    # eigenvalues are distinct).
    "eigh-|v|^2": (lambda a, **kw: jnp.abs(jaxmg.eigh(a, **kw).eigenvectors) ** 2,
                   lambda a: np.abs(np.linalg.eigh(a)[1]) ** 2, "spd"),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_vmap_over_a(rng, name):
    """Log-determinants, inverses and eigendecompositions of a batch of A;
    complex A (the sign of a complex determinant is complex)."""
    dtype, mesh = np.complex64, helpers.mesh(4)
    call, ref, kind = UNARY[name]
    a = np.stack([make(rng, kind, dtype) for _ in range(BATCH)])
    got = jax.vmap(lambda a: call(a, mesh=mesh, spec=ROWS))(batched(a, mesh))
    want = np.stack([ref(helpers.promote(a[i])) for i in range(BATCH)])
    close(got, want, dtype)
    one = call(helpers.rows(a[1], mesh))
    close(got[1], one, dtype)


def test_vmap_uneven(rng):
    """N = 7 on 3 devices: the batch replicated, mesh=/spec= given."""
    dtype, n, mesh = np.float64, 7, helpers.mesh(3)
    kw = {"mesh": mesh, "spec": ROWS}
    a = np.stack([general(rng, n, dtype) for _ in range(BATCH)])
    b = helpers.random_matrix(rng, n, dtype, BATCH).T
    a_dev, b_dev = helpers.replicated(a, mesh), helpers.replicated(b, mesh)
    x = jax.vmap(lambda a, b: jaxmg.solve(a, b, **kw))(a_dev, b_dev)
    close(x, np.linalg.solve(a, b[..., None])[..., 0], dtype, n)
    logdet = jax.vmap(lambda a: jaxmg.slogdet(a, **kw).logabsdet)(a_dev)
    close(logdet, np.linalg.slogdet(a)[1], dtype, n)


def test_nested_vmap(rng):
    """Two batch dimensions: vmap of vmap."""
    dtype, mesh = np.float64, helpers.mesh(2)
    a = np.stack([helpers.spd(rng, N, dtype, CONDITION) for _ in range(4)]).reshape(2, 2, N, N)
    b = helpers.random_matrix(rng, N, dtype, 4).T.reshape(2, 2, N)
    a_dev = jax.device_put(jnp.asarray(a), NamedSharding(mesh, P(None, None, "x", None)))
    solve = lambda a, b: jaxmg.solve(a, b, assume_a="pos", mesh=mesh, spec=ROWS)  # noqa: E731
    x = jax.vmap(jax.vmap(solve))(a_dev, helpers.replicated(b, mesh))
    close(x, np.linalg.solve(a, b[..., None])[..., 0], dtype)


# ---- with jit ------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["vmap(jit)", "jit(vmap)"])
def test_vmap_and_jit(rng, order):
    dtype, mesh = np.float32, helpers.mesh(2)
    a = np.stack([general(rng, N, dtype) for _ in range(BATCH)])
    b = helpers.random_matrix(rng, N, dtype, BATCH).T
    solve = lambda a, b: jaxmg.solve(a, b, mesh=mesh, spec=ROWS)  # noqa: E731
    fn = jax.vmap(jax.jit(solve)) if order == "vmap(jit)" else jax.jit(jax.vmap(solve))
    x = fn(batched(a, mesh), helpers.replicated(b, mesh))
    close(x, np.linalg.solve(a.astype(np.float64), b[..., None])[..., 0], dtype)
    # A second batch through the same compiled function.
    x2 = fn(batched(a[::-1], mesh), helpers.replicated(b, mesh))
    close(x2, np.linalg.solve(a[::-1].astype(np.float64), b[..., None])[..., 0], dtype)


@pytest.mark.parametrize("routine", ["cho", "lu"])
def test_vmap_factor_pytrees(rng, routine):
    """vmap(cho_factor) gives a batched factor that vmap(cho_solve) accepts;
    likewise LU; and one factor closed over serves a batch of b."""
    dtype, mesh = np.complex128, helpers.mesh(2)
    kw = {"mesh": mesh, "spec": ROWS}
    kind = "spd" if routine == "cho" else "general"
    a = np.stack([make(rng, kind, dtype) for _ in range(BATCH)])
    b = helpers.random_matrix(rng, N, dtype, BATCH).T
    if routine == "cho":
        factor_fn, solve_fn = jaxmg.cho_factor, jaxmg.cho_solve
    else:
        factor_fn, solve_fn = jaxmg.lu_factor, jaxmg.lu_solve
    factors = jax.block_until_ready(jax.vmap(lambda a: factor_fn(a, **kw))(batched(a, mesh)))
    assert type(factors) is type(factor_fn(helpers.rows(a[0], mesh)))
    x = jax.vmap(solve_fn)(factors, helpers.replicated(b, mesh))
    close(x, np.linalg.solve(a, b[..., None])[..., 0], dtype)
    one = factor_fn(helpers.rows(a[0], mesh))
    x = jax.vmap(lambda b: solve_fn(one, b))(helpers.replicated(b, mesh))
    close(x, np.linalg.solve(a[0], b.T).T, dtype)


# ---- with grad ------------------------------------------------------------------------------


GRAD_CASES = [("solve-gen", False), ("solve-gen", True), ("cho_logdet", True)]


@pytest.mark.parametrize(
    "name, jit", GRAD_CASES, ids=[f"{n}-{'jit' if j else 'eager'}" for n, j in GRAD_CASES]
)
def test_vmap_of_grad(rng, name, jit):
    """Per-example gradients with respect to A (and b): equal to jax.numpy's
    per-example gradients, and batched A's cotangent keeps its sharding."""
    dtype, mesh = np.float64, helpers.mesh(2)
    kw = {"mesh": mesh, "spec": ROWS}
    if name == "cho_logdet":
        a = np.stack([helpers.spd(rng, N, dtype, CONDITION) for _ in range(BATCH)])
    else:
        a = np.stack([general(rng, N, dtype) for _ in range(BATCH)])
    b = helpers.random_matrix(rng, N, dtype, BATCH).T
    ours, ref = {
        "solve-gen": (lambda a, b: jnp.sum(jaxmg.solve(a, b, **kw) ** 2),
                      lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2)),
        "cho_logdet": (lambda a, b: jaxmg.cho_logdet(jaxmg.cho_factor(a, **kw)) * jnp.sum(b),
                       lambda a, b: jnp.linalg.slogdet(a).logabsdet * jnp.sum(b)),
    }[name]
    fn = jax.vmap(jax.grad(ours, argnums=(0, 1)))
    fn = jax.jit(fn) if jit else fn
    a_dev = batched(a, mesh)
    with jax.set_mesh(mesh):
        ga, gb = fn(a_dev, helpers.replicated(b, mesh))
    want_a, want_b = jax.vmap(jax.grad(ref, argnums=(0, 1)))(jnp.asarray(a), jnp.asarray(b))
    close(ga, want_a, dtype, scale=np.abs(np.asarray(want_a)).max())
    close(gb, want_b, dtype, scale=np.abs(np.asarray(want_b)).max())
    assert ga.sharding.is_equivalent_to(a_dev.sharding, 3), ga.sharding


# ---- scan and fori_loop ------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_scan_repeated_solve(rng, jit):
    """x_{k+1} = A^-1 x_k for 4 steps: one call site, several iterations,
    each meeting its own participants."""
    dtype, mesh = np.float64, helpers.mesh(4)
    a = general(rng, N, dtype)
    b = helpers.random_matrix(rng, N, dtype, 2)
    a_dev = helpers.rows(a, mesh)

    def run(a, b):
        def body(x, _):
            x = jaxmg.solve(a, x, mesh=mesh, spec=ROWS)
            return x, jnp.sum(x)
        return jax.lax.scan(body, b, None, length=4)

    x, sums = (jax.jit(run) if jit else run)(a_dev, helpers.replicated(b, mesh))
    want, want_sums = b, []
    for _ in range(4):
        want = np.linalg.solve(a, want)
        want_sums.append(want.sum())
    close(x, want, dtype, scale=np.abs(want).max())
    close(sums, np.array(want_sums), dtype, scale=np.abs(want_sums).max())


def test_scan_over_matrices(rng):
    """scan over a stack of matrices: a different A each iteration."""
    dtype, mesh = np.complex128, helpers.mesh(2)
    kw = {"mesh": mesh, "spec": ROWS}
    a = np.stack([helpers.spd(rng, N, dtype, CONDITION) for _ in range(BATCH)])
    b = helpers.random_matrix(rng, N, dtype, 1)[:, 0]

    def body(carry, a):
        f = jaxmg.cho_factor(a, **kw)
        return carry + jaxmg.cho_logdet(f), jaxmg.cho_solve(f, helpers.replicated(b, mesh))

    run = jax.jit(lambda a: jax.lax.scan(body, jnp.zeros((), np.float64), a))
    total, xs = run(batched(a, mesh))
    close(xs, np.linalg.solve(a, np.broadcast_to(b, (BATCH, N))[..., None])[..., 0], dtype)
    close(total, np.linalg.slogdet(a)[1].sum(), dtype, scale=1.0)


def test_fori_loop(rng):
    """fori_loop: an inverse iteration-like loop x <- normalise(A^-1 x)
    converging to the eigenvector of A's smallest eigenvalue."""
    dtype, mesh = np.float64, helpers.mesh(2)
    w = np.array([0.1, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0])
    a = helpers.with_eigenvalues(rng, w, dtype)
    a_dev = helpers.rows(a, mesh)

    def body(i, x):
        x = jaxmg.solve(a_dev, x, assume_a="pos", mesh=mesh, spec=ROWS)
        return x / jnp.linalg.norm(x)

    x = jax.lax.fori_loop(0, 12, body, helpers.replicated(np.ones(N) / np.sqrt(N), mesh))
    v0 = np.linalg.eigh(a)[1][:, 0]
    assert abs(abs(float(np.dot(np.asarray(x), v0))) - 1.0) <= 1e-8


# ---- factors as lax.cond branches and loop carries ----------------------------------------------

FACTORS = {"lu": (jaxmg.lu_factor, jaxmg.lu_solve), "cho": (jaxmg.cho_factor, jaxmg.cho_solve)}


def _factor_placements():
    yield "one_device", lambda a: jnp.asarray(a)
    for kind in (jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit):
        def put(a, kind=kind):
            mesh = jax.make_mesh((2,), ("x",), axis_types=(kind,), devices=helpers.devices(2))
            return jax.device_put(a, NamedSharding(mesh, P("x", None)))
        yield f"rows_{kind.name}", put


@pytest.mark.parametrize("place", [p for _, p in _factor_placements()],
                         ids=[name for name, _ in _factor_placements()])
@pytest.mark.parametrize("routine", FACTORS)
def test_factor_of_a_concrete_and_a_traced_matrix_share_a_structure(rng, routine, place):
    """A factor of a closed-over (concrete) matrix and one of a traced matrix
    meet as lax.cond branches and as scan / while_loop carries, which need
    one pytree structure, as jax.scipy's (lu, piv) / (c, lower) tuples have."""
    factor, solve = FACTORS[routine]
    a0 = helpers.spd(rng, N, np.float64)
    a = place(a0)
    b = rng.standard_normal(N)

    chosen = jax.lax.cond(False, lambda: factor(a), lambda: factor(2 * a))
    np.testing.assert_allclose(solve(chosen, b), np.linalg.solve(2 * a0, b), rtol=1e-10)

    in_jit = jax.jit(lambda p: solve(jax.lax.cond(p, lambda: factor(a), lambda: factor(2 * a)), b))
    np.testing.assert_allclose(in_jit(True), np.linalg.solve(a0, b), rtol=1e-10)

    last, _ = jax.lax.scan(lambda f, s: (factor(a * s), None), factor(a), jnp.array([2.0, 3.0]))
    np.testing.assert_allclose(solve(last, b), np.linalg.solve(3 * a0, b), rtol=1e-10)

    _, looped = jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, factor(a * (c[0] + 2.0))),
                                   (0, factor(a)))
    np.testing.assert_allclose(solve(looped, b), np.linalg.solve(3 * a0, b), rtol=1e-10)


@pytest.mark.parametrize("made", ["eagerly", "under_jit"])
def test_a_jitted_solve_serves_factors_on_other_devices(rng, made):
    """Factors of the same mesh shape on other devices, made eagerly or
    under jit, have one structure: one jitted solve serves them all, each
    on its own devices (its trace names no devices)."""
    a0 = helpers.spd(rng, N, np.float64)
    b = rng.standard_normal(N)
    solve = jax.jit(lambda f, b: jaxmg.lu_solve(f, b))
    factor = jaxmg.lu_factor if made == "eagerly" else jax.jit(jaxmg.lu_factor)
    for first, factor_of in ((0, jaxmg.lu_factor), (2, factor)):
        mesh = helpers.mesh(2, first=first)
        f = factor_of(helpers.rows(a0, mesh))
        x = solve(f, helpers.replicated(b, mesh))
        np.testing.assert_allclose(x, np.linalg.solve(a0, b), rtol=1e-10)
        assert x.sharding.device_set == set(mesh.devices.flat)


@pytest.mark.parametrize("move", ["device_get", "pickle"])
@pytest.mark.parametrize("made", ["cond", "scan", "jit"])
def test_a_factor_out_of_control_flow_finds_its_devices(rng, made, move):
    """A factor that came out of lax.cond, a scan or a jit (its layout names
    the mesh by shape only) takes its arrays' mesh, so that brought to the
    host it solves on its devices as an eager factor does."""
    a0 = helpers.spd(rng, N, np.float64)
    b = rng.standard_normal(N)
    mesh = helpers.mesh(2)
    a = helpers.rows(a0, mesh)
    if made == "cond":
        f = jax.lax.cond(True, lambda: jaxmg.lu_factor(2 * a), lambda: jaxmg.lu_factor(a))
    elif made == "scan":
        f, _ = jax.lax.scan(lambda f, s: (jaxmg.lu_factor(a * s), None), jaxmg.lu_factor(a),
                            jnp.array([2.0]))
    else:
        f = jax.jit(jaxmg.lu_factor)(2 * a)
    moved = jax.device_get(f) if move == "device_get" else pickle.loads(pickle.dumps(f))
    x = jaxmg.lu_solve(moved, b)
    np.testing.assert_allclose(x, np.linalg.solve(2 * a0, b), rtol=1e-10)
    assert x.sharding.device_set == set(mesh.devices.flat)
