"""jnp.linalg's pinv, svdvals, matrix_rank, cond, norm, matrix_norm,
matrix_power, tensorinv and tensorsolve, and jax.scipy.linalg's expm and
expm_frechet, on jaxmg's routines: on plain arrays and on matrices whose rows
are sharded over Auto or Explicit mesh axes (where JAX's own refuse them),
eagerly and under jit, they give what JAX's give on the same values, with
the same dtype and shape; pinv's derivatives are JAX's; a sharded result
stays sharded; bad arguments raise JAX's exception types."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import dropin
import helpers
import jaxmg
import jaxmg.numpy.linalg as mnp
import jaxmg.scipy.linalg as msl

DEVICES = 4
M, N = 16, 12

rng = np.random.default_rng(7)


def _matrix(dtype, m=M, n=N):
    x = rng.standard_normal((m, n))
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal((m, n))
    return x.astype(dtype)


def _rank_three(dtype):
    return (_matrix(dtype, M, 3) @ _matrix(dtype, 3, N)).astype(dtype)


def _square(dtype):
    return (_matrix(dtype, M, M) + 4 * np.eye(M)).astype(dtype)


def _hermitian(dtype):
    x = _matrix(dtype, M, M)
    return ((x + x.conj().T) / 2).astype(dtype)


def _tensor(dtype):
    return (_matrix(dtype, 16, 16) + 4 * np.eye(16)).astype(dtype).reshape(4, 4, 4, 4)


# name: (call on a linalg namespace, the inputs, whether the result is a matrix kept row-sharded)
CALLS = {
    "pinv": (lambda ns, a: ns.pinv(a), lambda d: [_matrix(d)], True),
    "pinv_wide": (lambda ns, a: ns.pinv(a), lambda d: [_matrix(d, 8, 12)], True),
    "pinv_rank_deficient": (lambda ns, a: ns.pinv(a), lambda d: [_rank_three(d)], True),
    "pinv_rtol": (lambda ns, a: ns.pinv(a, 0.3), lambda d: [_matrix(d)], True),
    "pinv_rcond": (lambda ns, a: ns.pinv(a, rcond=0.3), lambda d: [_matrix(d)], True),
    "pinv_hermitian": (lambda ns, a: ns.pinv(a, hermitian=True), lambda d: [_hermitian(d)], True),
    "svdvals": (lambda ns, a: ns.svdvals(a), lambda d: [_matrix(d)], False),
    "matrix_rank": (lambda ns, a: ns.matrix_rank(a), lambda d: [_rank_three(d)], False),
    "matrix_rank_rtol": (lambda ns, a: ns.matrix_rank(a, 2.0), lambda d: [_matrix(d)], False),
    "matrix_rank_tol": (lambda ns, a: ns.matrix_rank(a, tol=2.0), lambda d: [_matrix(d)], False),
    "matrix_rank_hermitian": (lambda ns, a: ns.matrix_rank(a, hermitian=True),
                              lambda d: [_hermitian(d)], False),
    "cond": (lambda ns, a: ns.cond(a), lambda d: [_matrix(d)], False),
    "cond_-2": (lambda ns, a: ns.cond(a, -2), lambda d: [_matrix(d)], False),
    "cond_1": (lambda ns, a: ns.cond(a, 1), lambda d: [_square(d)], False),
    "cond_-inf": (lambda ns, a: ns.cond(a, -np.inf), lambda d: [_square(d)], False),
    "cond_fro": (lambda ns, a: ns.cond(a, "fro"), lambda d: [_square(d)], False),
    "cond_nuc": (lambda ns, a: ns.cond(a, "nuc"), lambda d: [_square(d)], False),
    "cond_singular": (lambda ns, a: ns.cond(a, 1), lambda d: [np.ones((M, M), d)], False),
    "norm_2": (lambda ns, a: ns.norm(a, 2), lambda d: [_matrix(d)], False),
    "norm_-2_keepdims": (lambda ns, a: ns.norm(a, -2, keepdims=True), lambda d: [_matrix(d)],
                         False),
    "norm_nuc_axes": (lambda ns, a: ns.norm(a, "nuc", axis=(1, 0)), lambda d: [_matrix(d)], False),
    "norm_2_batch": (lambda ns, a: ns.norm(a, 2, axis=(0, 2)),
                     lambda d: [_matrix(d, 16, 16).reshape(4, 4, 16)], False),
    "norm_fro": (lambda ns, a: ns.norm(a), lambda d: [_matrix(d)], False),
    "norm_inf": (lambda ns, a: ns.norm(a, np.inf), lambda d: [_matrix(d)], False),
    "norm_vector_axis": (lambda ns, a: ns.norm(a, 3, axis=1), lambda d: [_matrix(d)], False),
    "matrix_norm_2": (lambda ns, a: ns.matrix_norm(a, ord=2), lambda d: [_matrix(d)], False),
    "matrix_norm_nuc": (lambda ns, a: ns.matrix_norm(a, ord="nuc", keepdims=True),
                        lambda d: [_matrix(d)], False),
    "matrix_norm_fro": (lambda ns, a: ns.matrix_norm(a), lambda d: [_matrix(d)], False),
    "matrix_power_5": (lambda ns, a: ns.matrix_power(a, 5), lambda d: [_square(d) / 4], True),
    # A^-3 magnifies rounding by about cond(A)^3: a shift keeps float32's within the tolerance
    # (at cond ~26 jaxmg's and JAX's complex64 answers on an H200 differed by 1.1x of it)
    "matrix_power_-3": (lambda ns, a: ns.matrix_power(a, -3),
                        lambda d: [_square(d) + 4 * np.eye(M, dtype=d)], True),
    "tensorinv": (lambda ns, a: ns.tensorinv(a), lambda d: [_tensor(d)], True),
    "tensorinv_ind1": (lambda ns, a: ns.tensorinv(a, 1),
                       lambda d: [_matrix(d, 16, 16).reshape(16, 4, 4) + 4 * np.eye(16, dtype=d)
                                  .reshape(16, 4, 4)], True),
    "tensorsolve": (lambda ns, a, b: ns.tensorsolve(a, b),
                    lambda d: [_tensor(d), _matrix(d, 4, 4)], True),
    "tensorsolve_axes": (lambda ns, a, b: ns.tensorsolve(a, b, axes=(0,)),
                         lambda d: [_tensor(d), _matrix(d, 4, 4)], False),
}


def _place(x, kind):
    if kind == "plain":
        return jnp.asarray(x)
    mesh = dropin.mesh(DEVICES, kind)
    return jax.device_put(x, NamedSharding(mesh, P("x")))


def _close(got, want, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
        return
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    scale = np.abs(want[finite]).max() if finite.any() else 1.0
    tol = 2000 * np.finfo(dtype).eps * scale
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=tol)


# Every call in each dtype and placement, eager and jitted in turn: each call
# and each placement runs both ways.
@pytest.mark.parametrize("name, dtype, kind, mode", [
    pytest.param(name, dtype, kind, mode, id=f"{name}-{dropin.dtype_id(dtype)}-{kind}-{mode}")
    for i, name in enumerate(CALLS)
    for j, dtype in enumerate((np.float32, np.complex64))
    for k, kind in enumerate(("plain", "auto", "explicit"))
    for mode in [("eager", "jit")[(i + j + k) % 2]]
])
def test_matches_jax(name, dtype, kind, mode):
    call, inputs, keeps_rows = CALLS[name]
    values = inputs(dtype)
    want = call(jnp.linalg, *values)
    args = [_place(v, kind) for v in values]
    run = call if mode == "eager" else jax.jit(call, static_argnums=0)
    got = run(mnp, *args)
    _close(got, want, dtype)
    if kind == "explicit" and keeps_rows:
        assert got.sharding.spec[0] == "x", got.sharding.spec


def test_top_level_names_are_the_namespace_ones():
    for name in ("pinv", "svdvals", "matrix_rank", "cond", "norm", "matrix_norm", "matrix_power",
                 "tensorinv", "tensorsolve"):
        assert getattr(mnp, name) is getattr(jaxmg, name)
    assert msl.expm is jaxmg.expm


@pytest.mark.parametrize("kind", ["plain", "explicit"])
def test_batches(kind):
    """Leading batch dimensions, a per-matrix rtol, and the caller's vmap."""
    a = np.stack([_matrix(np.float32), 3 * _rank_three(np.float32)])
    rtol = np.array([1e-3, 0.5], np.float32)
    placed = jnp.asarray(a) if kind == "plain" else jax.device_put(
        a, NamedSharding(dropin.mesh(2, "explicit"), P("x")))
    _close(mnp.pinv(placed, rtol), jnp.linalg.pinv(a, rtol), np.float32)
    _close(jax.vmap(mnp.pinv)(placed), jax.vmap(jnp.linalg.pinv)(a), np.float32)
    _close(mnp.matrix_rank(placed), jnp.linalg.matrix_rank(a), np.float32)
    _close(mnp.svdvals(placed), jnp.linalg.svdvals(a), np.float32)
    sq = np.stack([_square(np.float32), _square(np.float32)])
    placed_sq = jnp.asarray(sq) if kind == "plain" else jax.device_put(
        sq, NamedSharding(dropin.mesh(2, "explicit"), P("x")))
    _close(mnp.matrix_power(placed_sq, -2), jnp.linalg.matrix_power(sq, -2), np.float32)
    _close(mnp.cond(placed_sq, "fro"), jnp.linalg.cond(sq, "fro"), np.float32)
    _close(mnp.cond(placed_sq), jnp.linalg.cond(sq), np.float32)


@pytest.mark.parametrize("shape", [(M, N), (8, N)], ids=["tall", "wide"])
@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=dropin.dtype_id)
def test_pinv_derivatives(shape, hermitian, dtype):
    """jvp under jit on an explicitly row-sharded matrix and eager grad on a
    plain one, against JAX's pinv derivative on the same values."""
    if hermitian:
        a = _hermitian(dtype)
    else:
        a = _matrix(dtype, *shape)
    da = _matrix(dtype, *a.shape)
    want = jax.jvp(lambda x: jnp.linalg.pinv(x, hermitian=hermitian), (a,), (da,))
    placed = _place(a, "explicit")
    got = jax.jit(lambda x, dx: jax.jvp(lambda y: mnp.pinv(y, hermitian=hermitian), (x,),
                                        (dx,)))(placed, _place(da, "explicit"))
    _close(got[0], want[0], dtype)
    _close(got[1], want[1], dtype)

    def loss(pinv):
        return lambda x: jnp.sum(jnp.abs(jnp.sin(pinv(x, hermitian=hermitian))) ** 2)

    _close(jax.grad(loss(mnp.pinv))(jnp.asarray(a)), jax.grad(loss(jnp.linalg.pinv))(a), dtype)


ERRORS = {
    "pinv rtol and rcond": lambda ns: ns.pinv(np.eye(3), 0.1, rcond=0.1),
    "pinv of a vector": lambda ns: ns.pinv(np.ones(3)),
    "matrix_rank rtol and tol": lambda ns: ns.matrix_rank(np.eye(3), 0.1, tol=0.1),
    "cond of a vector": lambda ns: ns.cond(np.ones(3)),
    "cond empty": lambda ns: ns.cond(np.ones((0, 3))),
    "cond not square": lambda ns: ns.cond(np.ones((3, 2)), 1),
    "cond bad p": lambda ns: ns.cond(np.eye(3), 3),
    "matrix_power vector": lambda ns: ns.matrix_power(np.ones(3), 2),
    "matrix_power not square": lambda ns: ns.matrix_power(np.ones((3, 2)), 2),
    "matrix_power float exponent": lambda ns: ns.matrix_power(np.eye(3), 1.5),
    "tensorinv ind 0": lambda ns: ns.tensorinv(np.eye(4).reshape(2, 2, 2, 2), 0),
    "tensorinv not square": lambda ns: ns.tensorinv(np.ones((2, 3, 4))),
    "tensorsolve shapes": lambda ns: ns.tensorsolve(np.ones((2, 2, 4)), np.ones((3, 2))),
    "tensorsolve sizes": lambda ns: ns.tensorsolve(np.ones((2, 3, 5)), np.ones((2, 3))),
    "norm bad ord": lambda ns: ns.norm(np.eye(3), 3),
    "norm three axes": lambda ns: ns.norm(np.ones((2, 2, 2)), 2),
    "norm -2 of empty": lambda ns: ns.norm(np.ones((0, 3)), -2),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_jax_own(name):
    """The same type and, where JAX's own function words it, the same message
    (JAX's tests match some literally)."""
    with pytest.raises(Exception) as theirs:
        ERRORS[name](jnp.linalg)
    with pytest.raises(theirs.type) as ours:
        ERRORS[name](mnp)
    if name != "pinv of a vector":  # raised inside JAX's SVD
        assert str(ours.value) == str(theirs.value)


def test_edges_as_jax():
    """Empty pinv, a vector's rank, the zeroth power, int matrix powers,
    the exponential of empty matrices."""
    for ns_result, jax_result in [
        (mnp.pinv(np.ones((0, 3), np.float32)), jnp.linalg.pinv(np.ones((0, 3), np.float32))),
        (mnp.matrix_rank(np.zeros(3)), jnp.linalg.matrix_rank(np.zeros(3))),
        (mnp.norm(np.ones((0, 3), np.float32), 2), jnp.linalg.norm(np.ones((0, 3), np.float32), 2)),
        (mnp.matrix_rank(np.array([0.0, 2.0])), jnp.linalg.matrix_rank(np.array([0.0, 2.0]))),
        (mnp.matrix_power(np.eye(3, dtype=np.float32) * 2, 0),
         jnp.linalg.matrix_power(np.eye(3, dtype=np.float32) * 2, 0)),
        (mnp.matrix_power(np.arange(9).reshape(3, 3), 3),
         jnp.linalg.matrix_power(np.arange(9).reshape(3, 3), 3)),
        (msl.expm(np.zeros((0, 0), np.float32)), jsl.expm(np.zeros((0, 0), np.float32))),
        (msl.expm(np.zeros((2, 0, 0), np.int32)), jsl.expm(np.zeros((2, 0, 0), np.int32))),
    ]:
        assert isinstance(ns_result, jax.Array)  # NumPy in, a jax.Array out, as JAX
        assert ns_result.shape == jax_result.shape and ns_result.dtype == jax_result.dtype
        np.testing.assert_array_equal(np.asarray(ns_result), np.asarray(jax_result))


@pytest.mark.parametrize("kind", ["plain", "explicit"])
@pytest.mark.parametrize("p", [None, 2, -2, 1, np.inf, "fro"])
def test_cond_of_a_singular_matrix_is_inf_as_numpy(kind, p):
    """NumPy's inf (JAX from 0.11.2; 0.10 gave NaN for p None and 2), for
    rows sharded too; a NaN entry still gives NaN."""
    singular = np.diag(np.r_[np.arange(1.0, 12.0), 0.0])
    x = singular if kind == "plain" else jax.device_put(
        singular, NamedSharding(dropin.mesh(DEVICES, kind), P("x", None)))
    assert np.asarray(mnp.cond(x, p)) == np.linalg.cond(singular, p)  # inf, or 0 for p -2
    with_nan = singular.copy()
    with_nan[0, 0] = np.nan
    assert np.isnan(np.asarray(mnp.cond(with_nan, p)))


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")], ids=["rows", "columns"])
@pytest.mark.parametrize("ord_, axis", [
    (np.inf, None), (-np.inf, None), (np.inf, 1), (-np.inf, 0), (1, None), (-1, None),
    (1, (1, 0)), (np.float32(np.inf), None), (3, 1)])
def test_norms_of_a_sharded_matrix_with_a_nan_are_nan_as_numpy(spec, ord_, axis):
    """XLA's max and min across CPU devices skip NaN; the norms do not."""
    x = _square(np.float64)
    x[5, 3] = np.nan
    sharded = jax.device_put(x, NamedSharding(dropin.mesh(DEVICES, "explicit"), spec))
    np.testing.assert_allclose(np.asarray(mnp.norm(sharded, ord_, axis)),
                               np.linalg.norm(x, ord_, axis), rtol=1e-13)  # NaN where NumPy's


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("kind", ["plain", "auto", "explicit"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=dropin.dtype_id)
@pytest.mark.parametrize("norm", [1e-3, 0.3, 1.5, 3.0, 40.0])
def test_expm_matches_jax(norm, dtype, kind, mode):
    """Each Pade degree (the 1-norm picks it) and the scaling and squaring."""
    a = _matrix(dtype, M, M)
    a = (a * norm / np.abs(a).sum(axis=0).max()).astype(dtype)
    want = jsl.expm(a)
    run = msl.expm if mode == "eager" else jax.jit(msl.expm)
    got = run(_place(a, kind))
    _close(got, want, dtype)
    if kind == "explicit":
        assert got.sharding.spec[0] == "x", got.sharding.spec


def test_expm_forms():
    """upper_triangular, batches and vmap, max_squarings exceeded (NaN, as
    JAX), a list refused, the derivative, JAX's error for a matrix that is not
    square."""
    u = np.triu(_matrix(np.float32, M, M))
    _close(msl.expm(_place(u, "explicit"), upper_triangular=True),
           jsl.expm(u, upper_triangular=True), np.float32)
    b = np.stack([_matrix(np.float32, M, M) / 8 for _ in range(DEVICES)])
    _close(msl.expm(b), jsl.expm(b), np.float32)
    _close(jax.vmap(msl.expm)(b), jsl.expm(b), np.float32)  # (a batch sharded on explicit
    # axes fails in JAX's own expm too: lax.cond under vmap there, jax 0.10)
    big = _matrix(np.float32, M, M) * 1e3
    assert np.isnan(np.asarray(msl.expm(big, max_squarings=2))).all()
    assert np.isnan(np.asarray(jsl.expm(big, max_squarings=2))).all()
    for expm in (jsl.expm, msl.expm):  # JAX's refuses a list
        with pytest.raises(TypeError):
            expm(u.tolist())
    a = _matrix(np.float32, M, M) / 10

    def loss(expm):
        return lambda x: jnp.sum(jnp.sin(expm(x)))

    _close(jax.jit(jax.grad(loss(msl.expm)))(_place(a, "explicit")), jax.grad(loss(jsl.expm))(a),
           np.float32)
    with pytest.raises(ValueError) as theirs:
        jsl.expm(np.ones((3, 2)))
    with pytest.raises(ValueError) as ours:
        msl.expm(np.ones((3, 2)))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("layout, mode", [
    *(("2-D blocks", mode) for mode in ("eager", "jit")),
    *(("batch of row-sharded matrices", mode) for mode in ("eager", "jit", "vmap", "jit-vmap")),
])
def test_expm_of_layouts_whose_products_need_moving(layout, mode):
    """A 2-D block layout (its products contracted a sharded axis against
    another) and a batch whose matrices' rows are sharded (the degree chosen
    per matrix selected between differently sharded results), also under
    jax.vmap, whose batch each matrix is of."""
    if layout == "2-D blocks":
        a = _matrix(np.float32, M, M) / 4
        mesh = jax.make_mesh((2, 2), ("r", "c"), devices=helpers.devices(4))
        placed = jax.device_put(a, NamedSharding(mesh, P("r", "c")))
    else:
        a = np.stack([_matrix(np.float32, M, M) * s for s in (0.01, 0.3, 3.0)])
        placed = jax.device_put(a, NamedSharding(dropin.mesh(DEVICES, "explicit"),
                                                 P(None, "x", None)))
    run = jax.vmap(msl.expm) if mode.endswith("vmap") else msl.expm
    run = jax.jit(run) if mode.startswith("jit") else run
    _close(run(placed), jsl.expm(a), np.float32)
    frechet = jax.vmap(msl.expm_frechet) if mode.endswith("vmap") else msl.expm_frechet
    value, derivative = frechet(placed, placed)
    want = jsl.expm_frechet(a, a)
    _close(value, want[0], np.float32)
    _close(derivative, want[1], np.float32)


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("kind", ["plain", "auto", "explicit"])
def test_expm_frechet(kind, mode):
    """(expm(A), its derivative along E), or the derivative alone, as JAX's;
    JAX's errors for shapes that do not match."""
    a = _matrix(np.complex64, M, M) / 4
    e = _matrix(np.complex64, M, M)
    want = jsl.expm_frechet(a, e)
    run = msl.expm_frechet if mode == "eager" else jax.jit(msl.expm_frechet,
                                                           static_argnames="compute_expm")
    got = run(_place(a, kind), _place(e, kind))
    _close(got[0], want[0], np.complex64)
    _close(got[1], want[1], np.complex64)
    _close(run(_place(a, kind), _place(e, kind), compute_expm=False), want[1], np.complex64)
    if kind == "explicit":
        assert got[1].sharding.spec[0] == "x", got[1].sharding.spec
    for bad in [(np.ones((3, 2)), np.ones((3, 2))), (np.eye(3), np.ones(3)),
                (np.eye(3), np.eye(2))]:
        with pytest.raises(ValueError) as theirs:
            jsl.expm_frechet(*bad)
        with pytest.raises(ValueError) as ours:
            msl.expm_frechet(*bad)
        assert str(ours.value) == str(theirs.value)
