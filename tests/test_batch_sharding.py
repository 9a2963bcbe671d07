"""A batch of matrices sharded along its batch axis (each matrix whole on its
devices): every routine gives JAX's results, keeps the batch axis sharded and
compiles to a program without collectives, eagerly, under jit, under vmap and
under jit of vmap, on meshes of Explicit and of Auto axes, as JAX's own
linalg functions do; derivatives too (det's on explicit axes under jax.set_mesh, where
JAX's own has none). backend="jaxmg", which would spread one
matrix over devices, is refused naming the layout."""

import re
from contextlib import nullcontext

import jax
import jax.experimental.checkify
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import helpers
import jaxmg
import jaxmg.numpy.linalg as mnl
import jaxmg.scipy.linalg as msl

BATCH, N, K = 8, 6, 3


def spd(rng, dtype):
    return np.stack([helpers.spd(rng, N, dtype) for _ in range(BATCH)])


def general(rng, dtype):
    return helpers.random_matrix(rng, BATCH * N, dtype, N).reshape(BATCH, N, N) \
        + 3 * np.eye(N, dtype=dtype)


def tall(rng, dtype):
    return helpers.random_matrix(rng, BATCH * 10, dtype, N).reshape(BATCH, 10, N)


def rhs(rng, dtype):
    return helpers.random_matrix(rng, BATCH * N, dtype, K).reshape(BATCH, N, K)


# name: (make the arguments, jaxmg's function, JAX's)
ROUTINES = {
    "cholesky": ((spd,), mnl.cholesky, jnp.linalg.cholesky),
    "eigh": ((spd,), mnl.eigh, jnp.linalg.eigh),
    "eigvalsh": ((spd,), mnl.eigvalsh, jnp.linalg.eigvalsh),
    "inv": ((general,), mnl.inv, jnp.linalg.inv),
    "inv-pos": ((spd,), lambda a: jaxmg.inv(a, assume_a="pos"), jnp.linalg.inv),
    "det": ((general,), mnl.det, jnp.linalg.det),
    "cho_logdet": ((spd,), lambda a: jaxmg.cho_logdet(jaxmg.cho_factor(a)),
                   lambda a: jnp.linalg.slogdet(a)[1]),
    "slogdet": ((general,), mnl.slogdet, jnp.linalg.slogdet),
    "solve": ((general, rhs), mnl.solve, jnp.linalg.solve),
    "solve-pos": ((spd, rhs), lambda a, b: msl.solve(a, b, assume_a="pos"),
                  lambda a, b: jsl.solve(a, b, assume_a="pos")),
    "cho_solve": ((spd, rhs), lambda a, b: msl.cho_solve(msl.cho_factor(a), b),
                  lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b)),
    "lu_solve": ((general, rhs), lambda a, b: msl.lu_solve(msl.lu_factor(a), b),
                 lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b)),
    "solve_triangular": ((general, rhs), lambda a, b: msl.solve_triangular(a, b, lower=True),
                         lambda a, b: jsl.solve_triangular(a, b, lower=True)),
    "lu": ((tall,), msl.lu, jax.vmap(jsl.lu)),
    "qr": ((tall,), mnl.qr, jnp.linalg.qr),
    "svd": ((tall,), lambda a: mnl.svd(a, full_matrices=False),
            lambda a: jnp.linalg.svd(a, full_matrices=False)),
}
AXIS_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def mesh_of(kind):
    return jax.make_mesh((2,), ("i",), axis_types=(AXIS_TYPES[kind],),
                         devices=helpers.devices(2))


def sign_free(name, out):
    """Outputs compared up to the phase freedom of eigenvectors and singular
    vectors: their products instead."""
    if name == "eigh":
        w, v = out
        return w, jnp.abs(v)
    if name == "svd":
        u, s, vh = out
        return u @ (s[..., None] * vh), s
    if name == "qr":
        q, r = out
        return (q @ r,)
    return out


def assert_close(name, got, want, dtype):
    tol = 200 * helpers.eps(dtype)
    for g, w in zip(jax.tree.leaves(sign_free(name, got)), jax.tree.leaves(sign_free(name, want))):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def batch_sharded(out, mesh):
    for leaf in jax.tree.leaves(out):
        spec = leaf.sharding.spec
        assert len(spec) > 0 and spec[0] == "i", leaf.sharding


@pytest.mark.parametrize("form", ["eager", "jit", "vmap", "jit-vmap"])
@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=["float32", "complex64"])
@pytest.mark.parametrize("name", list(ROUTINES))
def test_batch_stays_where_it_lies(rng, name, dtype, kind, form):
    makers, ours, theirs = ROUTINES[name]
    if name in ("lu", "qr", "svd") and dtype == np.complex64 and form == "jit-vmap":
        pytest.skip("covered by float32 and the other call forms (time)")
    args = tuple(make(rng, dtype) for make in makers)
    mesh = mesh_of(kind)
    placed = jax.device_put(args, NamedSharding(mesh, P("i")))
    fn = {"eager": ours, "jit": jax.jit(ours), "vmap": jax.vmap(ours),
          "jit-vmap": jax.jit(jax.vmap(ours))}[form]
    out = fn(*placed)
    assert_close(name, out, theirs(*args), dtype)
    batch_sharded(out, mesh)
    if form.startswith("jit"):
        assert "all-" not in fn.lower(*placed).compile().as_text()


@pytest.mark.parametrize("form", ["eager", "jit", "vmap"])
@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("name", list(ROUTINES))
def test_batch_with_rows_sharded_too(rng, name, kind, form):
    """A batch over one mesh axis whose matrices' rows lie over another,
    P("i", "m", None): each matrix is gathered onto its batch devices (JAX's
    solver takes none sharded; on explicit axes JAX's own functions refuse
    such input) and the batch axis stays sharded."""
    makers, ours, theirs = ROUTINES[name]
    args = tuple(make(rng, np.float32) for make in makers)
    mesh = jax.make_mesh((2, 2), ("i", "m"), axis_types=(AXIS_TYPES[kind],) * 2,
                         devices=helpers.devices(4))
    placed = jax.device_put(args, NamedSharding(mesh, P("i", "m", None)))
    # eager and jit gather the batch's rows once; vmap hands each element over sharded
    out = {"eager": ours, "jit": jax.jit(ours), "vmap": jax.vmap(ours)}[form](*placed)
    assert_close(name, out, theirs(*args), np.float32)
    batch_sharded(out, mesh)


@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("name", ["cholesky", "inv", "slogdet", "solve", "eigvalsh", "det"])
def test_derivatives(rng, name, kind):
    """jit(jvp) of a batch sharded along its batch axis. det's on explicit
    axes needs jax.set_mesh (without it, as JAX's own det derivative with or
    without it, jax 0.10.2 to 0.12.1, it fails in a triangular solve against
    an unbatched identity)."""
    makers, ours, theirs = ROUTINES[name]
    args = tuple(make(rng, np.float32) for make in makers)
    tangents = tuple(helpers.random_matrix(rng, int(np.prod(x.shape[:-1])), np.float32,
                                           x.shape[-1]).reshape(x.shape) for x in args)
    if name in ("cholesky", "eigvalsh"):
        tangents = tuple((t + np.swapaxes(t, -1, -2)) / 2 for t in tangents)
    mesh = mesh_of(kind)
    placed = jax.device_put((args, tangents), NamedSharding(mesh, P("i")))
    context = jax.set_mesh(mesh) if (name, kind) == ("det", "explicit") else nullcontext()
    with context:
        got = jax.jit(lambda x, t: jax.jvp(ours, x, t))(*placed)
    want = jax.jvp(theirs, args, tangents)
    assert_close(name, got, want, np.float32)


@pytest.mark.parametrize("name", ["slogdet", "inv", "eigvalsh", "cho_logdet"])
def test_eager_gradient_on_auto_axes(rng, name):
    """Eager grad (JVP tracers over the concrete batch) keeps each matrix
    where it lies too. (On explicit axes JAX's own eager gradients fail, jax
    0.10; under jit they are tested above.)"""
    makers, ours, theirs = ROUTINES[name]
    a = makers[0](rng, np.float32)
    placed = jax.device_put(a, NamedSharding(mesh_of("auto"), P("i")))
    loss = lambda f: lambda x: jnp.sum(jnp.real(jax.tree.leaves(f(x))[-1]))  # noqa: E731
    got = jax.grad(loss(ours))(placed)
    assert_close(name, got, jax.grad(loss(theirs))(a), np.float32)
    batch_sharded(got, None)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("a_spec, b_spec", [
    (P(None, "i"), P(None, "i")),  # the second of two batch axes sharded
    (P("i"), P()),  # b's batch not sharded
    (P(), P("i")),  # a's not
    (P(None, None, "i"), P("i")),  # a's rows sharded, b's batch
    (P("i"), P(None, "i")),  # crossed: one mesh axis cannot shard both batch axes
], ids=["second-axis", "b-unsharded", "a-unsharded", "a-rows", "crossed"])
def test_batch_axes_sharded_unalike(rng, kind, a_spec, b_spec, jit):
    """Two batch axes, one sharded, and operands whose batch axes are
    sharded differently: solved as JAX solves the unsharded batch, and
    where a batch axis is sharded, x keeps it."""
    a = general(rng, np.float32).reshape(2, 4, N, N)
    b = rhs(rng, np.float32).reshape(2, 4, N, K)
    mesh = mesh_of(kind)
    placed_a = jax.device_put(a, NamedSharding(mesh, a_spec))
    placed_b = jax.device_put(b, NamedSharding(mesh, b_spec))
    solve = jax.jit(mnl.solve) if jit else mnl.solve
    x = solve(placed_a, placed_b)
    assert_close("solve", x, jnp.linalg.solve(a, b), np.float32)
    if a_spec == P(None, "i") or kind == "explicit":
        spec = tuple(x.sharding.spec) + (None, None)
        assert "i" in spec[:2], x.sharding


def test_distributed_backend_refused(rng):
    mesh = mesh_of("explicit")
    a = jax.device_put(spd(rng, np.float64), NamedSharding(mesh, P("i")))
    with pytest.raises(ValueError, match="batch sharded along its batch axis"):
        jaxmg.cholesky(a, backend="jaxmg")


FAILING = {  # name: (jaxmg's call with on_failure, element 5 of the batch made to fail, words)
    "solve-pos": (lambda a, b, how: jaxmg.solve(a, b, assume_a="pos", on_failure=how),
                  "not positive definite"),
    "cho_factor": (lambda a, b, how: jaxmg.cho_solve(jaxmg.cho_factor(a, on_failure=how), b),
                   "not positive definite"),
    "inv": (lambda a, b, how: jaxmg.inv(a, on_failure=how), "singular"),
    "lu_factor": (lambda a, b, how: jaxmg.lu_solve(jaxmg.lu_factor(a, on_failure=how), b),
                  "singular"),
}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("how", ["raise", "checkify"])
@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("name", list(FAILING))
def test_failure_names_its_batch_element(rng, name, kind, how, jit):
    """on_failure="raise" and "checkify" report the first failing matrix of a
    batch sharded along its batch axis by its index; JAX's per-element
    callbacks and checkify's batched errors slice or sort along that axis,
    which Explicit axes refuse. A batch without failures raises nothing."""
    call, words = FAILING[name]
    mesh = mesh_of(kind)
    good = spd(rng, np.float64)
    bad = good.copy()
    bad[5, :, 2] = bad[5, 2, :] = 0.0  # singular and not positive definite
    b = jax.device_put(rhs(rng, np.float64), NamedSharding(mesh, P("i")))
    run = (lambda a: call(a, b, how)) if how == "raise" else \
        jax.experimental.checkify.checkify(lambda a: call(a, b, how))
    run = jax.jit(run) if jit else run
    place = lambda a: jax.device_put(a, NamedSharding(mesh, P("i")))  # noqa: E731
    pattern = rf"{words}.*batch element (\(5,\)|\[5\])"
    if how == "raise":
        with pytest.raises(Exception, match=pattern):
            np.asarray(run(place(bad)))
        out = run(place(good))
    else:
        err, _ = run(place(bad))
        assert re.search(pattern, err.get() or ""), err.get()
        err, out = run(place(good))
        assert err.get() is None
    assert np.isfinite(np.asarray(out)).all()


@pytest.mark.parametrize("name", ["inv", "solve", "det", "cholesky", "eigh"])
def test_matrices_of_a_manual_shard_map_under_rank_promotion_raise(rng, name):
    """jnp.linalg's routines mapped over the matrices each device holds inside
    a shard_map, under rank promotion "raise" (JAX's shard_map_test does this
    with inv): inv's gather-free inverse broadcast a column against a row."""
    makers, ours, theirs = ROUTINES[name]
    mesh = mesh_of("explicit")
    args = [make(rng, np.float64) for make in makers]
    with jax.set_mesh(mesh), jax.numpy_rank_promotion("raise"):
        placed = [jax.device_put(x, NamedSharding(mesh, P("i"))) for x in args]
        mapped = jax.shard_map(lambda *xs: jax.lax.map(lambda e: ours(*e), xs),
                               out_specs=P("i"))
        got = mapped(*placed)
    assert_close(name, got, theirs(*args), np.float64)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("name", ["solve", "solve-pos", "solve_triangular"])
def test_vmap_over_right_hand_sides_sharded_along_the_batch(rng, name, kind, jit):
    """jax.vmap(solve, in_axes=(None, 0)): one matrix, right-hand sides whose
    batch axis is sharded (JAX's pjit_test does this with solve_triangular).
    The mesh axes are the batch's, so each device solves its own right-hand
    sides as JAX does; jaxmg spread a over the same axes and failed."""
    (make_a, _), ours, theirs = ROUTINES[name]
    mesh = mesh_of(kind)
    a = make_a(rng, np.float64)[0]
    b = helpers.random_matrix(rng, 16, np.float64, N)
    with jax.set_mesh(mesh):
        placed = jax.device_put(b, NamedSharding(mesh, P("i")))
        run = jax.vmap(ours, in_axes=(None, 0))
        got = (jax.jit(run) if jit else run)(a, placed)
    assert_close(name, got, jax.vmap(theirs, in_axes=(None, 0))(a, b), np.float64)
    if kind == "explicit":
        assert got.sharding.spec[0] == "i", got.sharding


SAME_B_EVERYWHERE = {
    "solve": (general, lambda a, b: mnl.solve(a, b), lambda a, b: jnp.linalg.solve(a, b)),
    # JAX's own "pos" solve has no derivative here (pvary of a varying b, jax 0.10).
    "solve-pos": (spd, lambda a, b: msl.solve(a, b, assume_a="pos"),
                  lambda a, b: jnp.linalg.solve(a, b)),
    "lu_solve": (general, lambda a, b: msl.lu_solve(msl.lu_factor(a), b),
                 lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b)),
    "cho_solve": (spd, lambda a, b: msl.cho_solve(msl.cho_factor(a), b),
                  lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b)),
    "solve_triangular": (general, lambda a, b: msl.solve_triangular(a, b, lower=True),
                         lambda a, b: jsl.solve_triangular(a, b, lower=True)),
}


@pytest.mark.parametrize("derivative", [False, True], ids=["value", "grad"])
@pytest.mark.parametrize("name", list(SAME_B_EVERYWHERE))
def test_each_devices_matrix_against_one_b_inside_shard_map(rng, name, derivative):
    """Inside a shard_map each device solves its own matrix against a b that
    is the same on every device (in_specs P()): JAX's solves take b only typed
    as varying like the matrix, which jaxmg's solves failed on (and the
    derivatives of its factor solves)."""
    make, ours, theirs = SAME_B_EVERYWHERE[name]
    mesh = mesh_of("explicit")
    a = make(rng, np.float64)[:2]
    b = rhs(rng, np.float64)[0, :, 0]

    def run(solve):
        value = lambda m, v: solve(m, v)  # noqa: E731
        if derivative:
            value = jax.grad(lambda m, v: jnp.sum(solve(m, v) ** 2))
        body = jax.shard_map(lambda m, v: value(m[0], v)[None], mesh=mesh,
                             in_specs=(P("i"), P()), out_specs=P("i"))
        placed = jax.device_put(a, NamedSharding(mesh, P("i")))
        return np.asarray(jax.jit(body)(placed, jax.device_put(b, NamedSharding(mesh, P()))))

    np.testing.assert_allclose(run(ours), run(theirs), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["eigh", "eigvalsh", "inv-pos", "inv", "det", "slogdet",
                                  "cholesky", "cho_logdet"])
def test_derivatives_of_each_devices_matrix_inside_shard_map(rng, name):
    """grad inside a shard_map, each device its own matrix: the zero tangents
    of jaxmg's integer outputs (info, pivots) are typed as varying like their
    values, as JAX's differentiation there checks; they were not."""
    (make,), ours, theirs = ROUTINES[name]
    mesh = mesh_of("explicit")
    a = make(rng, np.float64)[:2]

    def run(fn):
        loss = lambda m: sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(fn(m))  # noqa: E731
                             if jnp.issubdtype(x.dtype, jnp.inexact))
        body = jax.shard_map(lambda m: jax.grad(loss)(m[0])[None], mesh=mesh,
                             in_specs=P("i"), out_specs=P("i"))
        return np.asarray(jax.jit(body)(jax.device_put(a, NamedSharding(mesh, P("i")))))

    np.testing.assert_allclose(run(ours), run(theirs), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("name", ["cho", "lu"])
def test_one_factor_vmapped_over_right_hand_sides_sharded_along_the_batch(rng, name, kind):
    """Factor once, then jax.vmap the solves over right-hand sides whose batch
    axis is sharded: the factor unpacked as jax.scipy's pair solves where each
    b lies; jaxmg's factor itself, spread over those Explicit axes, is refused
    naming that fix (its engine layout needs the axes the vmap holds)."""
    a = (spd if name == "cho" else general)(rng, np.float64)[0]
    b = helpers.random_matrix(rng, 16, np.float64, N)
    mesh = mesh_of(kind)
    factor_of, solve = ((msl.cho_factor, msl.cho_solve) if name == "cho"
                        else (msl.lu_factor, msl.lu_solve))
    with jax.set_mesh(mesh):
        placed = jax.device_put(b, NamedSharding(mesh, P("i")))
        f = factor_of(a)
        pair = tuple(f)
        x = jax.vmap(lambda v: solve(pair, v))(placed)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b.T).T, rtol=1e-10, atol=1e-12)
        if kind == "explicit":
            with pytest.raises(ValueError, match=r"tuple\(factor\)"):
                jax.vmap(lambda v: solve(f, v))(placed)
        else:
            x = jax.vmap(lambda v: solve(f, v))(placed)
            np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b.T).T, rtol=1e-10,
                                       atol=1e-12)


CLOSED_OVER = {
    "inv": (general, lambda L, a, v: L.inv(a) @ v),
    "det": (general, lambda L, a, v: L.det(a) * v),
    "slogdet": (general, lambda L, a, v: L.slogdet(a)[1] * v),
    "eigvalsh": (spd, lambda L, a, v: L.eigvalsh(a) * v),
    "eigh": (spd, lambda L, a, v: L.eigh(a)[0] * v),
    "cholesky": (spd, lambda L, a, v: L.cholesky(a) @ v),
    "pinv": (general, lambda L, a, v: L.pinv(a) @ v),
    "svdvals": (general, lambda L, a, v: L.svd(a, compute_uv=False) * v),
    "solve": (general, lambda L, a, v: L.solve(a, v)),
    "solve-against-a-matrix": (general, lambda L, a, v: L.solve(a, a.T) @ v),
}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("a_spec", [P(), P("i", None)], ids=["replicated", "rows"])
@pytest.mark.parametrize("name", list(CLOSED_OVER))
def test_a_closed_over_matrix_under_vmap_over_a_sharded_batch(rng, name, a_spec, jit):
    """jax.vmap over vectors whose batch axis is sharded on Explicit axes,
    with a matrix of no batch closed over (inv(a) @ v for each v): the vmap
    holds the mesh axes, so no shard_map may use them, and each device takes
    the whole matrix to JAX's solver; jaxmg spread it over them and failed.
    JAX's own functions take the replicated matrix (and refuse sharded rows)."""
    make, fn = CLOSED_OVER[name]
    a0 = make(rng, np.float64)[0]
    v0 = helpers.random_matrix(rng, 4, np.float64, N)
    mesh = mesh_of("explicit")
    with jax.set_mesh(mesh):
        a, a_replicated = (jax.device_put(a0, NamedSharding(mesh, s)) for s in (a_spec, P()))
        v = jax.device_put(v0, NamedSharding(mesh, P("i")))

        def run(L, m):
            mapped = lambda: jax.vmap(lambda w: fn(L, m, w))(v)  # noqa: E731
            return np.asarray(jax.jit(mapped)() if jit else mapped())

        np.testing.assert_allclose(run(mnl, a), run(jnp.linalg, a_replicated),
                                   rtol=1e-10, atol=1e-10)


PARTLY_MANUAL = {
    "pinv": lambda L, m: L.pinv(m),
    "inv": lambda L, m: L.inv(m),
    "slogdet": lambda L, m: L.slogdet(m)[1],
    "eigvalsh": lambda L, m: L.eigvalsh(m),
    "solve": lambda L, m: L.solve(m, jnp.arange(N, dtype=m.dtype)),
    "lstsq": lambda L, m: L.lstsq(m, jnp.arange(N, dtype=m.dtype))[0],
    "svdvals": lambda L, m: L.svd(m, compute_uv=False),
    "matrix_power": lambda L, m: L.matrix_power(m, 3),
}


@pytest.mark.parametrize("kind", list(AXIS_TYPES))
@pytest.mark.parametrize("name", list(PARTLY_MANUAL))
def test_derivatives_inside_a_shard_map_manual_over_the_batch_axis_only(rng, name, kind):
    """shard_map(axis_names={"b"}): each device group's matrix, its rows
    sharded over the other axis "x", differentiated. pinv's derivative
    multiplied matrices whose rows are sharded on Explicit axes without
    naming the product's sharding."""
    fn = PARTLY_MANUAL[name]
    mesh = jax.make_mesh((2, 2), ("b", "x"), axis_types=(AXIS_TYPES[kind],) * 2,
                         devices=helpers.devices(4))
    a = spd(rng, np.float64)[:2]
    grad = lambda L: jax.grad(lambda m: jnp.sum(fn(L, m) ** 2))  # noqa: E731
    body = jax.shard_map(lambda m: grad(mnl)(m[0])[None], mesh=mesh, in_specs=P("b"),
                         out_specs=P("b"), axis_names={"b"})
    got = jax.jit(body)(jax.device_put(a, NamedSharding(mesh, P("b", "x", None))))
    want = np.stack([grad(jnp.linalg)(jnp.asarray(m)) for m in a])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("first", ["outside", "inside"])
def test_a_plan_made_outside_such_a_vmap_is_not_reused_inside_it(rng, first):
    """Eager calls keep the plan of a matrix of the same sharding, shape and
    dtype; inside a vmap that holds the mesh axes the plan differs (the
    matrix whole), so neither side may take the other's."""
    a0 = general(rng, np.float64)[0]
    v0 = helpers.random_matrix(rng, 4, np.float64, N)
    mesh = mesh_of("explicit")
    a = jax.device_put(a0, NamedSharding(mesh, P("i", None)))
    v = jax.device_put(v0, NamedSharding(mesh, P("i")))

    def outside():
        f = msl.lu_factor(a)
        assert f.layout.placement.mesh is not None, f.layout.placement  # spread over "i"
        np.testing.assert_allclose(msl.lu_solve(f, v0[0]), np.linalg.solve(a0, v0[0]), rtol=1e-10)

    def inside():
        got = jax.vmap(lambda w: mnl.inv(a) @ w)(v)
        np.testing.assert_allclose(np.asarray(got), np.linalg.solve(a0, v0.T).T, rtol=1e-10)

    for step in ((outside, inside) if first == "outside" else (inside, outside)):
        step()
