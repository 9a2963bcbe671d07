"""Edges a JAX user meets: N that does not divide over an Auto-axis mesh
(a replicated with mesh= and spec=, since JAX cannot place uneven rows) for
inv(assume_a="gen") and the derivatives of slogdet and cho_logdet; 0 x 0
matrices (JAX returns sign 1 and log|det| 0, det 1, and empty arrays, no
error); the values-only SVD of a 400000 x 2 matrix without M x M work; and
a tile_size inside shard_map that does not divide the local rows, which is
honoured (the result equals the same call outside shard_map to rounding)
or refused naming tile_size, never silently changed."""

import re

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import dropin
import helpers
import jaxmg
import jaxmg.numpy
from dropin import K, PLAIN, REP, ROWS, api

UNEVEN = 13  # divides over none of 2, 3, 4, 8 devices


def uneven_kw(mesh):
    return {"mesh": mesh, "spec": P("x", None)}


# (name, devices, kind, mode): each mode on a different Auto mesh, and one
# Explicit mesh (where this works today) as a guard.
UNEVEN_CASES = [
    ("inv-gen", 2, "auto", "eager"),
    ("inv-gen", 3, "auto", "jit"),
    ("inv-gen", 4, "auto", "grad"),
    ("inv-gen", 8, "auto", "jvp"),
    ("inv-gen", 3, "explicit", "grad"),
    ("slogdet", 2, "auto", "grad"),
    ("slogdet", 3, "auto", "jvp"),
    ("slogdet", 8, "auto", "grad"),
    ("slogdet", 4, "explicit", "jvp"),
    ("cho_logdet", 4, "auto", "grad"),
    ("cho_logdet", 8, "auto", "jvp"),
    ("cho_logdet", 3, "auto", "grad"),
    ("cho_logdet", 2, "explicit", "grad"),
]


@pytest.mark.parametrize(
    "name, devices, kind, mode",
    UNEVEN_CASES,
    ids=[f"{n}-{d}dev-{k}-{m}" for n, d, k, m in UNEVEN_CASES],
)
def test_uneven_rows(rng, name, devices, kind, mode):
    mesh = dropin.mesh(devices, kind)
    kw = uneven_kw(mesh)
    dtype = np.complex128 if mode == "jvp" else np.float64
    if name == "inv-gen":
        fn, ref = (lambda a: api.inv(a, assume_a="gen", **kw)), jnp.linalg.inv
        make = lambda rng, dtype: (dropin.general(rng, UNEVEN, dtype),)  # noqa: E731
    elif name == "slogdet":
        fn, ref = (lambda a: api.slogdet(a, **kw)), jnp.linalg.slogdet
        make = lambda rng, dtype: (dropin.general(rng, UNEVEN, dtype),)  # noqa: E731
    else:

        def fn(a):
            return api.cho_logdet(api.cho_factor(dropin.hermitian_part(a), **kw))

        def ref(a):
            return jnp.linalg.slogdet(dropin.hermitian_part(a))[1]

        make = lambda rng, dtype: (dropin.spd(rng, UNEVEN, dtype),)  # noqa: E731
    dropin.check(mode, mesh, dtype, fn, ref, make, (REP,), rng, n=UNEVEN)


# ---- N = 0 -------------------------------------------------------------------------------------

# name: (jaxmg call on a 0 x 0 matrix a, a (0, K) right-hand side b and a
# (0,) vector v, JAX's)
EMPTY = {
    "slogdet": (
        lambda a, b, v: tuple(api.slogdet(a)),
        lambda a, b, v: tuple(jnp.linalg.slogdet(a)),
    ),
    "det": (lambda a, b, v: api.det(a), lambda a, b, v: jsl.det(a)),
    "inv": (lambda a, b, v: api.inv(a), lambda a, b, v: jnp.linalg.inv(a)),
    "inv-pos": (lambda a, b, v: api.inv(a, assume_a="pos"), lambda a, b, v: jnp.linalg.inv(a)),
    "solve": (lambda a, b, v: api.solve(a, b), lambda a, b, v: jsl.solve(a, b)),
    "solve-vector": (lambda a, b, v: api.solve(a, v), lambda a, b, v: jsl.solve(a, v)),
    "solve-pos": (
        lambda a, b, v: api.solve(a, b, assume_a="pos"),
        lambda a, b, v: dropin.cho_solve_ref(a, b),
    ),
    "cho_solve": (
        lambda a, b, v: api.cho_solve(api.cho_factor(a), b),
        lambda a, b, v: jsl.cho_solve(jsl.cho_factor(a), b),
    ),
    "cholesky": (lambda a, b, v: api.cholesky(a), lambda a, b, v: jsl.cholesky(a)),
    "lu_factor": (lambda a, b, v: tuple(api.lu_factor(a)), lambda a, b, v: jsl.lu_factor(a)),
    "lu": (lambda a, b, v: api.lu(a), lambda a, b, v: jsl.lu(a)),
    "solve_triangular": (
        lambda a, b, v: api.solve_triangular(a, b),
        lambda a, b, v: jsl.solve_triangular(a, b),
    ),
    "eigh": (lambda a, b, v: tuple(api.eigh(a)), lambda a, b, v: tuple(jnp.linalg.eigh(a))),
    "eigvalsh": (lambda a, b, v: api.eigvalsh(a), lambda a, b, v: jnp.linalg.eigvalsh(a)),
}

# Where: the issue's meshes (and one device) for the names it lists, one mesh for the rest.
ISSUE_EMPTY = ("slogdet", "inv", "solve", "cho_solve", "eigh", "eigvalsh")
EMPTY_CASES = [(name, 4, "explicit") for name in EMPTY] + [
    (name, devices, kind)
    for name in ISSUE_EMPTY
    for devices, kind in ((1, "auto"), (3, "auto"), (0, PLAIN))
]


@pytest.mark.parametrize(
    "name, devices, kind", EMPTY_CASES, ids=[f"{n}-{d}dev-{k}" for n, d, k in EMPTY_CASES]
)
def test_empty_matrix(name, devices, kind):
    """The results JAX gives for N = 0, each waited for (a failure there
    would only show once the result is read)."""
    dtype = np.float32
    args = np.zeros((0, 0), dtype), np.zeros((0, K), dtype), np.zeros((0,), dtype)
    call, ref = EMPTY[name]
    if kind == PLAIN:
        got = call(*(jnp.asarray(x) for x in args))
    else:
        mesh = dropin.mesh(devices, kind)
        got = call(*(dropin.place(x, h, mesh) for x, h in zip(args, (ROWS, REP, REP))))
    got = jax.block_until_ready(got)
    dropin.assert_close(got, ref(*dropin.promote(args)), dtype, 1, what=name)


def test_empty_slogdet_values():
    """sign 1 (a's dtype) and log|det| 0, as JAX."""
    mesh = dropin.mesh(2)
    sign, logabsdet = api.slogdet(dropin.place(np.zeros((0, 0), np.complex64), ROWS, mesh))
    assert complex(sign) == 1 and float(logabsdet) == 0
    assert np.asarray(sign).dtype == np.complex64 and np.asarray(logabsdet).dtype == np.float32


def test_empty_matrix_under_jit():
    mesh = dropin.mesh(2, "explicit")
    a = dropin.place(np.zeros((0, 0), np.float64), ROWS, mesh)
    b = dropin.place(np.zeros((0, K), np.float64), REP, mesh)
    with dropin.jit_context(mesh):
        x, (sign, logabsdet), w = jax.jit(
            lambda a, b: (api.solve(a, b), api.slogdet(a), api.eigvalsh(a))
        )(a, b)
    assert np.asarray(x).shape == (0, K) and np.asarray(w).shape == (0,)
    assert float(sign) == 1 and float(logabsdet) == 0


EMPTY_BATCH = {
    "inv": (api.inv, jnp.linalg.inv),
    "cholesky": (jaxmg.numpy.linalg.cholesky, jnp.linalg.cholesky),
    "eigh-vectors": (lambda a: api.eigh(a)[1], lambda a: jnp.linalg.eigh(a)[1]),
    "slogdet": (lambda a: tuple(api.slogdet(a)), lambda a: tuple(jnp.linalg.slogdet(a))),
    "pinv": (api.pinv, jnp.linalg.pinv),
    "cond": (jaxmg.numpy.linalg.cond, jnp.linalg.cond),
    "cho_factor": (lambda a: api.cho_factor(a)[0], lambda a: jsl.cho_factor(a)[0]),
    "solve": (lambda a: api.solve(a, np.zeros((0, 8, 1), np.float32)),
              lambda a: jnp.linalg.solve(a, np.zeros((0, 8, 1), np.float32))),
    "solve_triangular": (lambda a: api.solve_triangular(a, np.zeros((0, 8), np.float32)),
                         lambda a: jsl.solve_triangular(a, np.zeros((0, 8), np.float32))),
}


@pytest.mark.parametrize("layout", ["rows", "replicated"])
@pytest.mark.parametrize("name", list(EMPTY_BATCH))
def test_an_empty_batch_on_a_mesh_gives_readable_results_of_jaxs_shapes(name, layout):
    """An empty batch placed on a mesh: results JAX's shapes and dtypes, that
    can be read (JAX's ops on empty sharded arrays gave arrays that cannot)."""
    a = np.zeros((0, 8, 8), np.float32)
    mesh = dropin.mesh(4, "explicit")
    placed = jax.device_put(a, NamedSharding(mesh, P(None, "x", None) if layout == "rows" else P()))
    call, ref = EMPTY_BATCH[name]
    for got, want in zip(jax.tree.leaves(call(placed)), jax.tree.leaves(ref(a))):
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype


def test_an_empty_triangular_system_on_a_mesh_solves():
    mesh = dropin.mesh(4, "explicit")
    rep = lambda x: jax.device_put(x, NamedSharding(mesh, P()))  # noqa: E731
    for a in (np.zeros((0, 0), np.float32), rep(np.zeros((0, 0), np.float32))):
        x = api.solve_triangular(a, rep(np.zeros((0,), np.float32)))
        assert np.asarray(x).shape == (0,) and x.dtype == np.float32


# ---- the values-only SVD of a tall, thin matrix ------------------------------------------------

TALL_THIN = (400_000, 2)


def tall_thin(rng, dtype=np.float32):
    return dropin.with_singular_values(rng, *TALL_THIN, [3.0, 1.0], dtype)


@pytest.mark.parametrize("devices", [1, 4])
def test_svd_values_only_needs_no_m_by_m_work(rng, devices):
    """svd(t, compute_uv=False) of 400000 x 2: the compiled program's
    temporary memory is at most two copies of t (a working copy to factor
    in place, one gathered), where M x M would be 200000 times t's size."""
    mesh = dropin.mesh(devices)
    t = dropin.place(tall_thin(rng), ROWS, mesh)
    with dropin.jit_context(mesh):
        compiled = jax.jit(lambda t: api.svd(t, compute_uv=False)).lower(t).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    size = np.dtype(np.float32).itemsize * TALL_THIN[0] * TALL_THIN[1]
    assert temp <= 2 * size + 2**20, f"temp {temp} bytes for a {size}-byte matrix"


@pytest.mark.parametrize("devices, kind", [(4, "auto"), (2, "explicit")])
def test_svd_values_only_of_tall_thin(rng, devices, kind):
    """The values themselves, eagerly (a 640 GB request fails here at once)."""
    dtype = np.float32
    t = tall_thin(rng, dtype)
    s = api.svd(dropin.place(t, ROWS, dropin.mesh(devices, kind)), compute_uv=False)
    want = np.linalg.svd(t.astype(np.float64), compute_uv=False)
    dropin.assert_close(s, want, dtype, n=TALL_THIN[1], condition=3.0)


# ---- tile_size inside shard_map -----------------------------------------------------------------

SHARD_N, SHARD_DEVICES = 40, 4  # 10 local rows


@pytest.mark.parametrize("tile", [3, 5], ids=["tile3-not-dividing", "tile5-dividing"])
@pytest.mark.parametrize("routine", ["potrs", "potri"])
def test_shard_map_tile_is_honoured_or_refused(rng, routine, tile):
    """At N = 40 on 4 devices: the call inside shard_map (local blocks of 10
    rows) equals the same call outside to rounding (4 eps of the largest
    entry; a different tile moves a condition-1000 solve by ~40 eps), or
    raises a ValueError naming tile_size. A dividing tile must work."""
    dtype, mesh = np.float32, dropin.mesh(SHARD_DEVICES)
    a = dropin.place(dropin.spd(rng, SHARD_N, dtype, 1e3), ROWS, mesh)
    b = dropin.place(dropin.random(rng, (SHARD_N, K), dtype), REP, mesh)
    if routine == "potrs":
        outside = api.potrs(a, b, tile_size=tile)
        block, out_spec = (lambda a, b: api.potrs(a, b, tile_size=tile)), P()
    else:
        outside = api.potri(a, tile_size=tile)
        block, out_spec = (lambda a, b: api.potri(a, tile_size=tile)), P("x", None)
    inside = jax.shard_map(
        block, mesh=mesh, in_specs=(P("x", None), P()), out_specs=out_spec, check_vma=False
    )
    try:
        got = np.asarray(inside(a, b))
    except ValueError as error:
        assert tile != 5, f"a dividing tile_size was refused: {error}"
        assert "tile_size" in str(error), error
        return
    want = np.asarray(outside)
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= 4 * helpers.eps(dtype) * np.abs(want).max(), err


# ---- integer inputs, lists, mixed dtypes: as JAX ----

INT_CALLS = {
    "solve": (lambda x: jaxmg.solve(x, np.array([1, 2])),
              lambda x: jsl.solve(x, np.array([1, 2]))),
    "solve_triangular": (lambda x: jaxmg.solve_triangular(x, np.array([1, 2]), lower=True),
                         lambda x: jsl.solve_triangular(x, np.array([1, 2]), lower=True)),
    "inv": (jaxmg.inv, jsl.inv),
    "det": (jaxmg.det, jsl.det),
    "slogdet": (lambda x: tuple(jaxmg.slogdet(x)), lambda x: tuple(jnp.linalg.slogdet(x))),
    "cholesky": (jaxmg.cholesky, jsl.cholesky),
    "lu": (jaxmg.lu, jsl.lu),
    "lu_factor": (lambda x: tuple(jaxmg.lu_factor(x)), jsl.lu_factor),
    "eigvalsh": (jaxmg.eigvalsh, jnp.linalg.eigvalsh),
    "qr_r": (lambda x: jaxmg.qr(x, mode="r"), lambda x: jnp.linalg.qr(x, mode="r")),
    "svd_s": (lambda x: jaxmg.svd(x, compute_uv=False),
              lambda x: jnp.linalg.svd(x, compute_uv=False)),
}


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("call", list(INT_CALLS))
def test_integer_and_bool_inputs_are_promoted_as_jax(call, dtype):
    a = np.array([[4, 1], [1, 3]]).astype(dtype) if dtype != np.bool_ else np.eye(2, dtype=bool)
    mine, theirs = INT_CALLS[call]
    got, want = jax.tree.leaves(mine(a)), jax.tree.leaves(theirs(a))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype, (call, np.asarray(g).dtype, w.dtype)
        np.testing.assert_allclose(np.abs(g), np.abs(w), rtol=1e-5, atol=1e-6)


def test_lists_are_refused_as_by_jax():
    """jnp.linalg and jax.scipy's solve (but its assume_a="pos"), inv, det
    refuse lists; so do those namespaces here, and jaxmg's own routines,
    naming the fix."""
    import jaxmg.numpy.linalg as mnp
    import jaxmg.scipy.linalg as msl

    a, b = [[4.0, 1.0], [1.0, 3.0]], [1.0, 2.0]
    with pytest.raises(TypeError):
        jsl.solve(a, b)
    for call in (lambda: jaxmg.solve(a, b), lambda: jaxmg.solve(a, b, assume_a="sym"),
                 lambda: jaxmg.inv(a), lambda: jaxmg.solve_triangular(np.eye(2), b),
                 lambda: msl.solve(a, b), lambda: msl.inv(a), lambda: msl.det(a),
                 lambda: mnp.cholesky(a), lambda: mnp.eigh(a), lambda: mnp.svd(a)):
        with pytest.raises(TypeError, match="list"):
            call()


def test_non_square_matrices_are_refused_naming_the_shape():
    """ValueError with the shape, as jnp.linalg's inv, det and slogdet."""
    import jaxmg.numpy.linalg as mnp

    for ns in (jnp.linalg, mnp):
        for call in (ns.inv, ns.det, ns.slogdet):
            for shape in ((4, 3), (2, 4, 3)):
                with pytest.raises(ValueError, match=re.escape(str(shape))):
                    call(np.ones(shape))


SCIPY_LIST_CALLS = {  # jax.scipy.linalg reads lists here (jnp.asarray)
    "cholesky": lambda m, a, b: m.cholesky(a),
    "cho_factor": lambda m, a, b: tuple(m.cho_factor(a))[0],
    "cho_solve": lambda m, a, b: m.cho_solve((np.linalg.cholesky(a).tolist(), True), b),
    "lu": lambda m, a, b: m.lu(a),
    "lu_factor": lambda m, a, b: tuple(m.lu_factor(a)),
    "lu_solve": lambda m, a, b: m.lu_solve((np.asarray(a).tolist(), np.arange(2, dtype=np.int32)), b),
    "polar": lambda m, a, b: m.polar(a),
    "qr": lambda m, a, b: m.qr(a),
    "svd": lambda m, a, b: m.svd(a, compute_uv=False),
    "eigh": lambda m, a, b: m.eigh(a, eigvals_only=True),
    "solve_triangular": lambda m, a, b: m.solve_triangular(a, b, lower=True),
    "cholesky_by_name": lambda m, a, b: m.cholesky(a=a, lower=True),
    "cho_solve_by_name": lambda m, a, b: m.cho_solve(
        c_and_lower=(np.linalg.cholesky(a).tolist(), True), b=b),
    "solve_triangular_by_name": lambda m, a, b: m.solve_triangular(b=b, a=a, lower=True),
    "solve_pos": lambda m, a, b: m.solve(a, b, assume_a="pos"),
    "expm_frechet": lambda m, a, b: m.expm_frechet(a, a, compute_expm=False),
}


@pytest.mark.parametrize("name", list(SCIPY_LIST_CALLS))
def test_scipy_namespace_reads_lists_as_jax_scipy(name):
    import jaxmg.scipy.linalg as msl

    a, b = [[4.0, 1.0], [1.0, 3.0]], [1.0, 2.0]
    got = jax.tree.leaves(SCIPY_LIST_CALLS[name](msl, a, b))
    want = jax.tree.leaves(SCIPY_LIST_CALLS[name](jsl, a, b))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.abs(np.asarray(g)), np.abs(np.asarray(w)), rtol=1e-5,
                                   atol=1e-6)


def test_mixed_float_dtypes_promote_as_jax():
    a = np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)
    for b in (np.array([1.0, 2.0]), np.array([1.0, 2.0j]), np.array([1, 2])):
        for mine, theirs in ((jaxmg.solve, jsl.solve),
                             (lambda x, y: jaxmg.cho_solve((x, False), y),
                              lambda x, y: jsl.cho_solve((x, False), y))):
            got, want = mine(a, b), theirs(a, b)
            assert np.asarray(got).dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("devices", [1, 2])
def test_factors_promote_b_as_jax(devices):
    """jaxmg's own factors against a wider b: jax.scipy promotes the factor
    and b together (a complex b against a real factor too)."""
    mesh = dropin.mesh(devices)
    a = np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)
    for b in (np.array([1.0, 2.0]), np.array([1.0, 2.0j], np.complex64),
              np.array([[1.0, 2.0j], [3.0, -1.0j]]), np.array([1, 2])):
        for mine, theirs in ((jaxmg.cho_solve(jaxmg.cho_factor(a, mesh=mesh), b),
                              jsl.cho_solve(jsl.cho_factor(a), b)),
                             (jaxmg.lu_solve(jaxmg.lu_factor(a, mesh=mesh), b, trans=2),
                              jsl.lu_solve(jsl.lu_factor(a), b, trans=2))):
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("b_shape", [(4,), (2, 4, 3)])
def test_positive_definite_solve_of_a_batch(b_shape):
    """A batch of matrices against one vector (which once raised an
    IndexError) and against a batch of right-hand sides."""
    a = np.broadcast_to(4 * np.eye(4) + 1, (2, 4, 4))
    b = np.arange(np.prod(b_shape), dtype=float).reshape(b_shape)
    got = api.solve(a, b, assume_a="pos")
    want = np.linalg.solve(a, b[:, None] if b.ndim == 1 else b)
    assert got.shape == (2, 4) + b_shape[2:]
    np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-5)


@pytest.mark.skipif(dropin.REFERENCE, reason="the reference needs no placing of inputs")
def test_eager_reverse_mode_of_unplaced_inputs_under_set_mesh_stays_on_the_mesh(rng):
    """Unplaced inputs (jnp.asarray's) under jax.set_mesh are put on the
    mesh; their cotangents come back there, as JAX's do, not committed to
    the input's one device (where jacrev's and hessian's next step refused
    them beside the mesh's arrays)."""
    mesh = dropin.mesh(4, "explicit")
    a = jnp.asarray(dropin.spd(rng, 8, np.float64))
    b = jnp.asarray(dropin.random(rng, (8,), np.float64))
    with jax.set_mesh(mesh):
        grad = jax.grad(lambda a: jnp.sum(api.solve(a, b)))(a)
        jac = jax.jacrev(api.inv)(a)
        hess = jax.hessian(lambda a: api.det(a))(a)
    assert set(grad.sharding.device_set) == set(mesh.devices.flat)
    dropin.assert_close(grad, jax.grad(lambda a: jnp.sum(jsl.solve(a, b)))(a), np.float64)
    dropin.assert_close(jac, jax.jacrev(jsl.inv)(a), np.float64)
    dropin.assert_close(hess, jax.hessian(jsl.det)(a), np.float64)


@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_a_scalar_b_beside_a_batch_is_a_value_error(assume_a):
    """As JAX's (it once raised an IndexError), naming b's shape."""
    a = np.broadcast_to(4 * np.eye(4) + 1, (2, 4, 4))
    with pytest.raises(ValueError):
        jsl.solve(a, np.float32(1.0), assume_a=assume_a)
    with pytest.raises(ValueError, match=r"shape \(\)"):
        api.solve(a, np.float32(1.0), assume_a=assume_a)


def test_positive_definite_solve_refuses_vectors_of_another_length():
    """A ValueError naming b's shape, as jax.scipy.linalg.solve raises (the
    reference solves as jnp.linalg.solve, which reads this b otherwise)."""
    a = np.broadcast_to(4 * np.eye(4) + 1, (2, 4, 4))
    with pytest.raises(ValueError):
        jsl.solve(a, np.ones((2, 3)), assume_a="pos")
    if not dropin.REFERENCE:
        with pytest.raises(ValueError, match=re.escape("(2, 3)")):
            api.solve(a, np.ones((2, 3)), assume_a="pos")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_triangular_solve_is_jaxs(dtype):
    """JAX's triangular solve takes half precision: jax.scipy-style calls get
    its answer on CPUs, and on GPUs (whose triangular solve refuses float16) a
    float32 solve rounded back; derivatives and vmap go through. jaxmg's own
    solver, asked for by name, refuses naming the cast."""
    dtype = jnp.dtype(dtype)
    if dropin.REFERENCE and dtype == jnp.float16 and jax.default_backend() != "cpu":
        pytest.skip("JAX's own triangular solve refuses float16 on GPUs")
    lower = np.tril(np.ones((4, 4))) + 3 * np.eye(4)
    a, b = lower.astype(dtype), np.arange(1.0, 9.0).reshape(4, 2).astype(dtype)
    rtol = 4 * float(jnp.finfo(dtype).eps)
    for transposed, call in ((False, lambda a, b: api.solve_triangular(a, b, lower=True)),
                             (True, jax.jit(lambda a, b: api.solve_triangular(a, b, trans=1,
                                                                              lower=True)))):
        got = call(a, b)
        assert got.dtype == dtype
        exact = np.linalg.solve(lower.T if transposed else lower, np.asarray(b, np.float64))
        np.testing.assert_allclose(np.asarray(got, np.float64), exact, rtol=rtol)
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(api.solve_triangular(a, b, lower=True), np.float32),
                                      np.asarray(jsl.solve_triangular(a, b, lower=True), np.float32))
    cotangent = jax.grad(lambda b: api.solve_triangular(a, b, lower=True).astype(jnp.float32).sum())(b)
    assert cotangent.dtype == dtype
    np.testing.assert_allclose(np.asarray(cotangent, np.float64),
                               np.linalg.solve(lower.T, np.ones((4, 2))), rtol=rtol)
    columns = jax.vmap(lambda c: api.solve_triangular(a, c, lower=True), in_axes=1, out_axes=1)(b)
    np.testing.assert_allclose(np.asarray(columns, np.float64),
                               np.linalg.solve(lower, np.asarray(b, np.float64)), rtol=rtol)
    if not dropin.REFERENCE:
        with pytest.raises(TypeError, match="triangular_solve does not accept dtype .*astype"):
            api.solve_triangular(a, b, lower=True, backend="jaxmg")


WRONG_RANK_OR_SHAPE = {  # JAX refuses these with a TypeError (0.12.1 some with a ValueError)
    "qr of a vector": lambda ns: ns.qr(np.ones(4)),
    "svd of a vector": lambda ns: ns.svd(np.ones(4)),
    "svdvals of a vector": lambda ns: ns.svdvals(np.ones(4)),
    "cholesky of 3 x 4": lambda ns: ns.cholesky(np.ones((3, 4))),
    "eigh of 3 x 4": lambda ns: ns.eigh(np.ones((3, 4))),
    "eigvalsh of 2 x 3 x 4": lambda ns: ns.eigvalsh(np.ones((2, 3, 4))),
    "lstsq of a 3-D a": lambda ns: ns.lstsq(np.ones((2, 3, 4)), np.ones((2, 3))),
    "lstsq of a vector a": lambda ns: ns.lstsq(np.ones(4), np.ones(4)),
}


SCIPY_WRONG_RANK = {
    "lu of a vector": lambda ns: ns.lu(np.ones(4)),
    "lu_factor of a vector": lambda ns: ns.lu_factor(np.ones(4)),
    "eigh of 3 x 4": lambda ns: ns.eigh(np.ones((3, 4))),
}


@pytest.mark.parametrize("case", list(WRONG_RANK_OR_SHAPE) + ["scipy " + c for c in SCIPY_WRONG_RANK])
def test_a_matrix_of_the_wrong_rank_or_shape_raises_both_of_jaxs_errors(case):
    """JAX raises TypeError here (jax 0.12.1 a ValueError for some, from
    checks before its primitives); jaxmg's error is a TypeError and a
    ValueError (as jnp.linalg.inv and det raise for a non-square matrix),
    naming the shape."""
    import jaxmg.numpy.linalg as mnp
    import jaxmg.scipy.linalg as msl

    if case.startswith("scipy "):
        call, theirs, mine = SCIPY_WRONG_RANK[case[6:]], jsl, msl
    else:
        call, theirs, mine = WRONG_RANK_OR_SHAPE[case], jnp.linalg, mnp
    with pytest.raises((TypeError, ValueError)):
        call(theirs)
    for error in (TypeError, ValueError):
        with pytest.raises(error, match=r"shape \("):
            call(mine)


SQUARE_ONLY = {  # JAX: ValueError, but TypeError for matrix_power; jaxmg's is both
    "inv of 3 x 4": ("numpy", lambda ns: ns.inv(np.ones((3, 4))), "(3, 4)"),
    "det of a vector": ("numpy", lambda ns: ns.det(np.ones(4)), "(4,)"),
    "slogdet of 2 x 3 x 4": ("numpy", lambda ns: ns.slogdet(np.ones((2, 3, 4))), "(2, 3, 4)"),
    "pinv of a vector": ("numpy", lambda ns: ns.pinv(np.ones(4)), "(4,)"),
    "matrix_power of 3 x 4": (  # JAX's words, which JAX's tests match
        "numpy", lambda ns: ns.matrix_power(np.ones((3, 4)), 2), "must be square"),
    "expm of 3 x 4": ("scipy", lambda ns: ns.expm(np.ones((3, 4))), "(3, 4)"),
    "cho_solve with a 3 x 4 factor": (
        "scipy", lambda ns: ns.cho_solve((jnp.ones((3, 4)), True), jnp.ones(3)), "(3, 4)"),
    "lu_solve with a 3 x 4 factor": (
        "scipy", lambda ns: ns.lu_solve((jnp.ones((3, 4)), jnp.arange(3)), jnp.ones(3)), "(3, 4)"),
}


@pytest.mark.parametrize("case", list(SQUARE_ONLY))
def test_a_matrix_that_is_not_square_raises_both_errors_naming_the_shape(case):
    """Where JAX's check raises one of ValueError and TypeError, code
    catching either catches jaxmg's, whose message names the shape (a
    factor's included, which JAX reports as a core-dimension mismatch) or,
    for matrix_power, is JAX's own."""
    import jaxmg.numpy.linalg as mnp
    import jaxmg.scipy.linalg as msl

    namespace, call, shape = SQUARE_ONLY[case]
    theirs, mine = (jnp.linalg, mnp) if namespace == "numpy" else (jsl, msl)
    with pytest.raises((TypeError, ValueError)):
        call(theirs)
    for error in (TypeError, ValueError):
        with pytest.raises(error, match=re.escape(shape)):
            call(mine)


TRACED_FLAGS = {
    "cho_factor lower": lambda ns, a, flag: ns.cho_factor(a, lower=flag)[0],
    "solve_triangular lower": lambda ns, a, flag: ns.solve_triangular(a, a[0], lower=flag),
    "eigh lower": lambda ns, a, flag: ns.eigh(a, lower=flag)[0],
    "cholesky lower": lambda ns, a, flag: ns.cholesky(a, lower=flag),
}


@pytest.mark.parametrize("case", list(TRACED_FLAGS))
def test_a_traced_flag_raises_jaxs_value_error(case):
    """A flag passed through jit as a traced value, where it must choose the
    program: JAX raises a ValueError (a static argument it cannot hash); jaxmg's
    error is that ValueError and the TypeError of a flag that is not a bool,
    and names the fix."""
    import jaxmg.scipy.linalg as msl

    call, a = TRACED_FLAGS[case], 2 * np.eye(3)
    with pytest.raises(ValueError):
        jax.jit(lambda a, flag: call(jsl, a, flag))(a, True)
    for error in (ValueError, TypeError):
        with pytest.raises(error, match="traced value.*static_argnames=\\('lower',\\)"):
            jax.jit(lambda a, flag: call(msl, a, flag))(a, True)
    np.testing.assert_allclose(jax.jit(lambda a: call(msl, a, True))(a),
                               jax.jit(lambda a: call(jsl, a, True))(a), atol=1e-12)
