"""The jax.scipy.linalg / jnp.linalg-style API (cho_factor, cho_solve,
cho_logdet, lu_factor, lu_solve, solve, inv, slogdet, eigh, eigvalsh):
values against float64 NumPy for every dtype on meshes of 1, 2 and 4 devices
and an uneven one (N = 13 on 3 devices); lu_solve's trans = 0/1/2; vector
and matrix right-hand sides, row-sharded or replicated (x comes back in b's
layout); slogdet's sign for negative and complex determinants; factor reuse
(one factorisation, several solves; the factor is a pytree that crosses
jax.jit); on_failure = "nan" / "raise" / "checkify"; argument errors."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg

CONDITION = 10.0
# mesh id -> (devices, N): N divides over the devices, except on "3dev-uneven",
# where a is replicated and jaxmg is told mesh= and spec= (helpers.put_rows).
MESHES = {"1dev": (1, 12), "2dev": (2, 12), "4dev": (4, 12), "3dev-uneven": (3, 13)}


def dtype_id(dtype):
    return np.dtype(dtype).name


# Every dtype on 2 devices and on the uneven mesh, two on each of 1 and 4
# devices (test_solve runs the full product).
CASES = [(d, m) for d in helpers.DTYPES for m in ("2dev", "3dev-uneven")] + [
    (np.float32, "1dev"), (np.complex128, "1dev"), (np.float64, "4dev"), (np.complex64, "4dev"),
]
CASE_IDS = [f"{dtype_id(d)}-{m}" for d, m in CASES]


def real_dtype(dtype):
    return np.finfo(dtype).dtype


def general(rng, n, dtype, condition=CONDITION, det_sign=None):
    """A non-symmetric matrix U diag(s) V^H with singular values in
    [1, condition]; for real dtypes, det_sign (+1/-1) fixes the determinant's sign."""
    base = np.complex128 if np.iscomplexobj(dtype(0)) else np.float64
    u, _ = np.linalg.qr(helpers.random_matrix(rng, n, base))
    v, _ = np.linalg.qr(helpers.random_matrix(rng, n, base))
    s = np.geomspace(1.0, condition, n) if n > 1 else np.ones(1)
    a = (u * s) @ v.conj().T
    if det_sign is not None and np.sign(np.linalg.det(a).real) != det_sign:
        a[0] = -a[0]
    return a.astype(dtype)


def setup(mesh_id):
    devices, n = MESHES[mesh_id]
    return helpers.mesh(devices), n


def tol(dtype, n):
    return helpers.tolerance(dtype, n, CONDITION)


def check_solution(op_a, x, b, dtype):
    n = op_a.shape[0]
    x = np.asarray(x)
    assert x.shape == b.shape and x.dtype == dtype
    assert helpers.residual(op_a, x.reshape(n, -1), b.reshape(n, -1)) <= tol(dtype, n)


# ---- solve / cho_solve / lu_solve ----------------------------------------------


@pytest.mark.parametrize("mesh_id", list(MESHES))
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_solve(rng, dtype, mesh_id):
    """solve with assume_a = "gen" (LU) and "pos" (Cholesky), matrix and vector b."""
    mesh, n = setup(mesh_id)
    kw = helpers.solve_kwargs(np.empty((n, n)), mesh)
    g = general(rng, n, dtype)
    a = helpers.spd(rng, n, dtype, CONDITION)
    b = helpers.random_matrix(rng, n, dtype, 3)
    x = jaxmg.solve(helpers.put_rows(g, mesh), helpers.replicated(b, mesh), **kw)
    check_solution(g, x, b, dtype)
    b_vec = helpers.replicated(b[:, 0], mesh)
    x = jaxmg.solve(helpers.put_rows(a, mesh), b_vec, assume_a="pos", **kw)
    check_solution(a, x, b[:, 0], dtype)


@pytest.mark.parametrize("assume_a", ["sym", "her"])
def test_solve_assume_sym_her(rng, assume_a):
    """"sym"/"her" accept any symmetric/Hermitian (indefinite) matrix."""
    dtype, mesh = np.complex128, helpers.mesh(2)
    if assume_a == "sym":
        x = helpers.random_matrix(rng, 12, dtype)
        h = ((x + x.T) / 2).astype(dtype)  # complex symmetric, not Hermitian
    else:
        h = helpers.hermitian(rng, 12, dtype)
    b = helpers.random_matrix(rng, 12, dtype, 2)
    x = jaxmg.solve(helpers.rows(h, mesh), helpers.replicated(b, mesh), assume_a=assume_a)
    assert helpers.residual(h, x, b) <= helpers.tolerance(dtype, 12, np.linalg.cond(h))


# (dtype, mesh, trans): every trans for complex128 (where all three differ),
# two per other dtype (for real dtypes trans 2 is trans 1).
LU_CASES = [
    (np.float32, "2dev", 0), (np.float32, "2dev", 1), (np.float64, "2dev", 1),
    (np.float64, "2dev", 2), (np.complex64, "2dev", 0), (np.complex64, "2dev", 2),
    (np.complex128, "2dev", 0), (np.complex128, "2dev", 1), (np.complex128, "2dev", 2),
    (np.complex128, "3dev-uneven", 1), (np.complex128, "3dev-uneven", 2),
]


@pytest.mark.parametrize(
    "dtype, mesh_id, trans", LU_CASES, ids=[f"{dtype_id(d)}-{m}-trans{t}" for d, m, t in LU_CASES]
)
def test_lu_solve_trans(rng, dtype, mesh_id, trans):
    """op(A) x = b for op = A, A^T, A^H."""
    mesh, n = setup(mesh_id)
    g = general(rng, n, dtype)
    op = [g, g.T, g.conj().T][trans]
    f = jaxmg.lu_factor(helpers.put_rows(g, mesh), **helpers.solve_kwargs(g, mesh))
    b = helpers.random_matrix(rng, n, dtype, 4)
    check_solution(op, jaxmg.lu_solve(f, helpers.replicated(b, mesh), trans=trans), b, dtype)


ROUTINES = ("cho_solve", "lu_solve")


def factor_and_matrix(rng, routine, n, dtype, mesh, backend="auto"):
    if routine == "cho_solve":
        a = helpers.spd(rng, n, dtype, CONDITION)
        return jaxmg.cho_factor(helpers.rows(a, mesh), backend=backend), a, jaxmg.cho_solve
    a = general(rng, n, dtype)
    return jaxmg.lu_factor(helpers.rows(a, mesh), backend=backend), a, jaxmg.lu_solve


@pytest.mark.parametrize("layout", ["rows", "replicated"])
@pytest.mark.parametrize("rhs", ["vector", "matrix"])
@pytest.mark.parametrize("routine, devices", [("cho_solve", 4), ("lu_solve", 2)], ids=ROUTINES)
def test_rhs_layout(rng, routine, devices, rhs, layout):
    """x has b's shape and b's sharding: row-sharded in, row-sharded out;
    replicated in, replicated out (as jaxmg.potrs has always done)."""
    dtype, n, mesh = np.float64, 12, helpers.mesh(devices)
    f, a, solve = factor_and_matrix(rng, routine, n, dtype, mesh)
    b = helpers.random_matrix(rng, n, dtype, 3)
    b = b[:, 0] if rhs == "vector" else b
    b_dev = helpers.rows(b, mesh) if layout == "rows" else helpers.replicated(b, mesh)
    x = solve(f, b_dev)
    check_solution(a, x, b, dtype)
    assert x.sharding.is_equivalent_to(b_dev.sharding, x.ndim), (x.sharding, b_dev.sharding)
    assert not b_dev.is_deleted()


@pytest.mark.parametrize("call", ["potrs", "solve-pos", "solve-gen"])
@pytest.mark.parametrize("rhs", ["vector", "matrix"])
def test_rhs_of_unknown_layout_under_jit(rng, call, rhs):
    """Under jit on mesh axes of type Auto a traced b does not say its layout;
    with the mesh named (mesh=, spec=) x comes back row-sharded like a."""
    n = 12
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=helpers.devices(4))
    a = helpers.spd(rng, n, np.float64)
    b = helpers.random_matrix(rng, n, np.float64, 2)
    b = b[:, 0] if rhs == "vector" else b
    kw = {"mesh": mesh, "spec": P("x", None)}
    fn = {"potrs": lambda a, b: jaxmg.potrs(a, b, **kw),
          "solve-pos": lambda a, b: jaxmg.solve(a, b, assume_a="pos", **kw),
          "solve-gen": lambda a, b: jaxmg.solve(a, b, **kw)}[call]
    for b_dev in (helpers.rows(b, mesh), helpers.replicated(b, mesh)):
        x = jax.jit(fn)(helpers.rows(a, mesh), b_dev)
        check_solution(a, x, b, np.float64)
        assert x.sharding.spec[0] == "x", x.sharding


# ---- factor reuse ----------------------------------------------------------------


def count(targets, routine):
    return sum(1 for t in targets if re.fullmatch(rf"jaxmg_[sdcz]{routine}_\w+", t))


@pytest.mark.parametrize("routine", ROUTINES)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=dtype_id)
def test_factor_reuse(rng, dtype, routine):
    """One factor, several solves, each correct; solving against a factor
    runs no factorisation."""
    n, mesh = 12, helpers.mesh(2)
    # Forced: on GPUs a matrix this small would go to JAX's own solvers.
    f, a, solve = factor_and_matrix(rng, routine, n, dtype, mesh, backend="jaxmg")
    for k in (None, 1, 3):
        b = helpers.random_matrix(rng, n, dtype, k or 1)
        b = b[:, 0] if k is None else b
        check_solution(a, solve(f, helpers.replicated(b, mesh)), b, dtype)
    b = helpers.replicated(helpers.random_matrix(rng, n, dtype, 2), mesh)
    factorisation = "potrf" if routine == "cho_solve" else "getrf"
    one_solve = helpers.ffi_targets(jax.make_jaxpr(solve)(f, b))
    assert count(one_solve, factorisation) == 0, one_solve
    three = helpers.ffi_targets(jax.make_jaxpr(lambda f, b: [solve(f, b * k) for k in range(3)])(f, b))
    assert count(three, factorisation) == 0, three
    assert count(three, "cholsolve" if routine == "cho_solve" else "lusolve") >= 3, three


@pytest.mark.parametrize("routine", ROUTINES)
def test_factor_is_a_pytree_through_jit(rng, routine):
    """The factor flattens to arrays (its layout static) and crosses jax.jit
    as an argument, also twice with different values (one compilation)."""
    dtype, n, mesh = np.complex64, 12, helpers.mesh(4)
    f, a, solve = factor_and_matrix(rng, routine, n, dtype, mesh)
    leaves, treedef = jax.tree_util.tree_flatten(f)
    assert leaves and all(isinstance(x, jax.Array) for x in leaves)
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(rebuilt) is type(f) and rebuilt.layout == f.layout
    traces = []

    @jax.jit
    def run(f, b):
        traces.append(1)
        return solve(f, b)

    b = helpers.random_matrix(rng, n, dtype, 2)
    check_solution(a, run(f, helpers.replicated(b, mesh)), b, dtype)
    f2, a2, _ = factor_and_matrix(rng, routine, n, dtype, mesh)
    check_solution(a2, run(f2, helpers.replicated(b, mesh)), b, dtype)
    assert len(traces) == 1
    # The factor is also a jit result.
    f3 = jax.jit(lambda x: jax.tree_util.tree_map(lambda y: y, x))(f)
    check_solution(a, solve(f3, helpers.replicated(b, mesh)), b, dtype)


# ---- determinants ----------------------------------------------------------------


# (dtype, determinant): real ones positive and negative, complex ones off the real axis.
DETERMINANTS = [
    (np.float32, "positive"), (np.float32, "negative"), (np.float64, "positive"),
    (np.float64, "negative"), (np.complex64, "complex"), (np.complex128, "complex"),
]


SLOGDET_CASES = [(d, k, m) for d, k in DETERMINANTS for m in ("2dev", "3dev-uneven")] + [
    (np.float64, "negative", "1dev"), (np.complex64, "complex", "1dev"),
    (np.float32, "negative", "4dev"), (np.complex128, "complex", "4dev"),
]


@pytest.mark.parametrize(
    "dtype, det, mesh_id",
    SLOGDET_CASES,
    ids=[f"{dtype_id(d)}-{k}-{m}" for d, k, m in SLOGDET_CASES],
)
def test_slogdet(rng, dtype, det, mesh_id):
    """(sign, log|det|) like jnp.linalg.slogdet: sign has a's dtype (+-1 for
    real a, e^{i phi} for complex), logabsdet the real dtype."""
    mesh, n = setup(mesh_id)
    complex_ = det == "complex"
    g = general(rng, n, dtype, det_sign={"positive": 1, "negative": -1}.get(det))
    sign, logabsdet = jaxmg.slogdet(helpers.put_rows(g, mesh), **helpers.solve_kwargs(g, mesh))
    ref_sign, ref_log = np.linalg.slogdet(helpers.promote(g))
    assert sign.shape == () and sign.dtype == dtype
    assert logabsdet.shape == () and logabsdet.dtype == real_dtype(dtype)
    assert abs(complex(sign) - ref_sign) <= tol(dtype, n)
    assert abs(float(logabsdet) - ref_log) <= tol(dtype, n) * max(1.0, abs(ref_log))
    if complex_:
        assert abs(complex(sign).imag) > 1e-3, "the test determinant should not be real"


@pytest.mark.parametrize("dtype, mesh_id", CASES, ids=CASE_IDS)
def test_cho_logdet_and_slogdet_pos(rng, dtype, mesh_id):
    mesh, n = setup(mesh_id)
    a = helpers.spd(rng, n, dtype, 1e3)
    a_dev, kw = helpers.put_rows(a, mesh), helpers.solve_kwargs(a, mesh)
    ref = np.linalg.slogdet(helpers.promote(a))[1]
    logdet = jaxmg.cho_logdet(jaxmg.cho_factor(a_dev, **kw))
    assert logdet.shape == () and logdet.dtype == real_dtype(dtype)
    assert abs(float(logdet) - ref) <= tol(dtype, n) * abs(ref)
    sign, logabsdet = jaxmg.slogdet(a_dev, assume_a="pos", **kw)
    assert sign.dtype == dtype and complex(sign) == 1
    assert abs(float(logabsdet) - ref) <= tol(dtype, n) * abs(ref)


# ---- inverses and eigendecompositions --------------------------------------------


# Both assume_a for every dtype on 2 devices; one each elsewhere.
INV_CASES = [(d, "2dev", k) for d in helpers.DTYPES for k in ("gen", "pos")] + [
    (np.float64, "3dev-uneven", "gen"), (np.complex64, "3dev-uneven", "pos"),
    (np.float32, "3dev-uneven", "pos"), (np.complex128, "3dev-uneven", "gen"),
    (np.complex128, "1dev", "gen"), (np.float32, "1dev", "pos"),
    (np.float64, "4dev", "pos"), (np.complex64, "4dev", "gen"),
]


@pytest.mark.parametrize(
    "dtype, mesh_id, assume_a", INV_CASES, ids=[f"{dtype_id(d)}-{m}-{k}" for d, m, k in INV_CASES]
)
def test_inv(rng, dtype, mesh_id, assume_a):
    """inv like jnp.linalg.inv, row-sharded like a."""
    mesh, n = setup(mesh_id)
    a = helpers.spd(rng, n, dtype, CONDITION) if assume_a == "pos" else general(rng, n, dtype)
    a_dev = helpers.put_rows(a, mesh)
    inv = jaxmg.inv(a_dev, assume_a=assume_a, **helpers.solve_kwargs(a, mesh))
    assert inv.shape == (n, n) and inv.dtype == dtype
    assert helpers.inverse_error(a, inv) <= tol(dtype, n)
    assert inv.sharding.is_equivalent_to(a_dev.sharding, 2), (inv.sharding, a_dev.sharding)


@pytest.mark.parametrize("dtype, mesh_id", CASES, ids=CASE_IDS)
def test_eigh_and_eigvalsh(rng, dtype, mesh_id):
    """(eigenvalues ascending, eigenvectors as columns), like jnp.linalg.eigh;
    vectors column-sharded. Vectors checked through A V = V diag(w) and
    V^H V = I only (they are unique up to phase)."""
    mesh, n = setup(mesh_id)
    h = helpers.hermitian(rng, n, dtype)
    h_dev, kw = helpers.put_rows(h, mesh), helpers.solve_kwargs(h, mesh)
    result = jaxmg.eigh(h_dev, **kw)
    assert isinstance(result, tuple) and len(result) == 2
    w, v = result
    assert result.eigenvalues is w and result.eigenvectors is v
    ref = np.linalg.eigvalsh(helpers.promote(h))
    scale = np.abs(ref).max()
    assert w.dtype == real_dtype(dtype) and v.dtype == dtype and v.shape == (n, n)
    assert np.all(np.diff(np.asarray(w)) >= 0)
    assert np.abs(np.asarray(w) - ref).max() <= helpers.tolerance(dtype, n) * scale
    h64, v64 = helpers.promote(h), helpers.promote(v)
    residual = np.linalg.norm(h64 @ v64 - v64 * np.asarray(w, np.float64)) / np.linalg.norm(h64)
    assert residual <= helpers.tolerance(dtype, n)
    assert np.linalg.norm(v64.conj().T @ v64 - np.eye(n)) <= helpers.tolerance(dtype, n)
    if n % mesh.shape["x"] == 0:
        assert v.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "x")), 2), v.sharding
    w2 = jaxmg.eigvalsh(h_dev, **kw)
    assert w2.dtype == w.dtype
    assert np.abs(np.asarray(w2) - ref).max() <= helpers.tolerance(dtype, n) * scale


def test_mirrors_jax_conventions(rng):
    """Named results as jnp.linalg's (SlogdetResult, EighResult fields);
    positional arguments as jax.scipy.linalg's (lu_solve(lu_and_piv, b, trans),
    cho_solve(c, b), solve(a, b))."""
    n, mesh, dtype = 8, helpers.mesh(2), np.float64
    a = helpers.spd(rng, n, dtype, CONDITION)
    a_dev, b = helpers.rows(a, mesh), helpers.random_matrix(rng, n, dtype, 1)[:, 0]
    ref = jnp.asarray(a)
    assert jaxmg.slogdet(a_dev)._fields == jnp.linalg.slogdet(ref)._fields == ("sign", "logabsdet")
    fields = ("eigenvalues", "eigenvectors")
    assert jaxmg.eigh(a_dev)._fields == jnp.linalg.eigh(ref)._fields == fields
    for op, x in [
        (a.T, jaxmg.lu_solve(jaxmg.lu_factor(a_dev), b, 1)),
        (a, jaxmg.cho_solve(jaxmg.cho_factor(a_dev), b)),
        (a, jaxmg.solve(a_dev, b, assume_a="pos")),
    ]:
        check_solution(op, x, b, dtype)


# ---- failures: on_failure = "nan" | "raise" | "checkify" -------------------------


def singular(n, dtype):
    """Exactly singular: row and column n // 2 are zero, so LU meets an exact
    zero pivot whichever way it pivots."""
    a = general(np.random.default_rng(0), n, dtype)
    a[n // 2, :] = 0
    a[:, n // 2] = 0
    return a


def not_spd(rng, n, dtype):
    w = np.geomspace(1.0, 10.0, n)
    w[n // 2] = -1.0
    return helpers.with_eigenvalues(rng, w, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=dtype_id)
def test_on_failure_nan(rng, dtype):
    """The default: NaN results, info > 0, nothing raised; slogdet of a
    singular matrix is (0, -inf) like NumPy's."""
    n, mesh = 12, helpers.mesh(2)
    bad_np = not_spd(rng, n, dtype)
    s, bad = helpers.rows(singular(n, dtype), mesh), helpers.rows(bad_np, mesh)
    zero = helpers.rows(np.zeros((n, n), dtype), mesh)
    b = helpers.replicated(helpers.random_matrix(rng, n, dtype, 2), mesh)
    for a in (s, zero):
        f = jaxmg.lu_factor(a)
        assert int(f.info) > 0
        assert np.isnan(np.asarray(jaxmg.lu_solve(f, b))).all()
        assert np.isnan(np.asarray(jaxmg.solve(a, b))).all()
        assert np.isnan(np.asarray(jaxmg.inv(a))).all()
        sign, logabsdet = jaxmg.slogdet(a)
        assert complex(sign) == 0 and float(logabsdet) == -np.inf
    f = jaxmg.cho_factor(bad)
    assert int(f.info) > 0
    # The failing column, as LAPACK reports it (JAX's own solvers do not say).
    assert int(jaxmg.cho_factor(bad, backend="jaxmg").info) == helpers.lapack_potrf_info(bad_np)
    assert np.isnan(np.asarray(jaxmg.cho_solve(f, b))).all()
    assert np.isnan(float(jaxmg.cho_logdet(f)))
    assert np.isnan(np.asarray(jaxmg.solve(bad, b, assume_a="pos"))).all()
    assert np.isnan(np.asarray(jaxmg.inv(bad, assume_a="pos"))).all()
    assert np.isnan(float(jaxmg.slogdet(bad, assume_a="pos").logabsdet))


CALLS = {
    "cho_factor": lambda a, b, **kw: jaxmg.cho_factor(a, **kw),
    "solve-pos": lambda a, b, **kw: jaxmg.solve(a, b, assume_a="pos", **kw),
    "inv-pos": lambda a, b, **kw: jaxmg.inv(a, assume_a="pos", **kw),
    "lu_factor": lambda a, b, **kw: jaxmg.lu_factor(a, **kw),
    "solve-gen": lambda a, b, **kw: jaxmg.solve(a, b, **kw),
    "inv-gen": lambda a, b, **kw: jaxmg.inv(a, **kw),
}


def failing_input(call, rng, n, dtype):
    if call.endswith("pos") or call.startswith("cho"):
        return not_spd(rng, n, dtype), "not positive definite"
    return singular(n, dtype), "singular"


@pytest.mark.parametrize("call", list(CALLS))
def test_on_failure_raise_eager(rng, call):
    n, mesh, dtype = 12, helpers.mesh(2), np.float64
    bad, message = failing_input(call, rng, n, dtype)
    b = helpers.replicated(np.ones(n, dtype), mesh)
    with pytest.raises(jaxmg.LinAlgError, match=message):
        CALLS[call](helpers.rows(bad, mesh), b, on_failure="raise")
    # A good matrix raises nothing.
    good = helpers.spd(rng, n, dtype, CONDITION)
    out = CALLS[call](helpers.rows(good, mesh), b, on_failure="raise")
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(out))


@pytest.mark.parametrize("call", ["solve-pos", "solve-gen"])
def test_on_failure_raise_under_jit(rng, call, caplog):
    """Inside jit the failure surfaces when the result is waited for, as a
    runtime error naming the cause, and only there: JAX's log of the
    exception on each device is left out. A good matrix runs through."""
    n, mesh, dtype = 12, helpers.mesh(2), np.float64
    bad, message = failing_input(call, rng, n, dtype)
    b = helpers.replicated(np.ones(n, dtype), mesh)
    run = jax.jit(lambda a, b: CALLS[call](a, b, on_failure="raise", mesh=mesh, spec=P("x", None)))
    with caplog.at_level("DEBUG"), pytest.raises(Exception, match=message):
        np.asarray(run(helpers.rows(bad, mesh), b))
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()], caplog.text
    good = helpers.spd(rng, n, dtype, CONDITION)
    assert helpers.residual(good, run(helpers.rows(good, mesh), b), np.ones(n)) <= tol(dtype, n)


RAISE_THEN_COLLECTIVE = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import jaxmg
n = 16
mesh = jax.make_mesh((8,), ("x",))
good = np.eye(n) * 2.0
bad = good.copy()
bad[3, 3] = -1.0
calls = {
    "inv-pos": lambda a: jaxmg.inv(a, assume_a="pos", on_failure="raise"),
    "inv-gen": lambda a: jaxmg.inv(a * (a > 0), on_failure="raise"),
    "solve-pos": lambda a: jaxmg.solve(a, jnp.ones(n), assume_a="pos", on_failure="raise"),
    "lu_factor": lambda a: jaxmg.lu_factor(a * (a > 0), on_failure="raise")[0],
    "cho_factor": lambda a: jaxmg.cho_factor(a, on_failure="raise")[0],
}
for name, call in calls.items():
    run = jax.jit(lambda a: jnp.sum(call(a)))  # a collective after the failed call
    try:
        run(jax.device_put(bad, NamedSharding(mesh, P("x", None)))).block_until_ready()
        print(name, "did not raise")
    except Exception as e:
        print(name, "raised:", str(e).splitlines()[-1])
    print(name, "then", float(run(jax.device_put(good, NamedSharding(mesh, P("x", None))))))
"""


def test_on_failure_raise_under_jit_with_a_collective_after_it_raises_on_every_device():
    """Every device stops at the failed call's check: raised on one device
    only, the others waited in the next collective until XLA aborted the
    process (hence a process of its own here)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8", JAXMG_TIMEOUT_S="60")
    run = subprocess.run([sys.executable, "-c", RAISE_THEN_COLLECTIVE], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("inv-pos", "inv-gen", "solve-pos", "lu_factor", "cho_factor"):
        assert re.search(rf"{name} raised:.*(not positive definite|singular)", run.stdout), \
            run.stdout
        then = re.search(rf"{name} then (\S+)", run.stdout)
        assert then and np.isfinite(float(then.group(1))), run.stdout


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_on_failure_checkify_of_a_general_inverse_on_every_device(rng, jit):
    """inv checks after its solves: a check followed by a shard_map gives an
    error that JAX's checkify cannot read on Explicit mesh axes."""
    mesh, n = helpers.mesh(8), 16
    checked = checkify.checkify(lambda a: jaxmg.inv(a, on_failure="checkify"))
    checked = jax.jit(checked) if jit else checked
    err, _ = checked(helpers.rows(singular(n, np.float64), mesh))
    assert "singular" in err.get()
    err, out = checked(helpers.rows(helpers.spd(rng, n, np.float64, CONDITION), mesh))
    assert err.get() is None and np.isfinite(np.asarray(out)).all()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("call", ["solve-pos", "solve-gen", "inv-pos", "lu_factor"])
def test_on_failure_checkify(rng, call, jit):
    n, mesh, dtype = 12, helpers.mesh(2), np.complex128
    bad, message = failing_input(call, rng, n, dtype)
    b = helpers.replicated(np.ones(n, dtype), mesh)
    checked = checkify.checkify(
        lambda a, b: CALLS[call](a, b, on_failure="checkify", mesh=mesh, spec=P("x", None))
    )
    checked = jax.jit(checked) if jit else checked
    err, _ = checked(helpers.rows(bad, mesh), b)
    assert err.get() is not None and message in err.get()
    with pytest.raises(checkify.JaxRuntimeError, match=message):
        err.throw()
    good = helpers.spd(rng, n, dtype, CONDITION)
    err, out = checked(helpers.rows(good, mesh), b)
    assert err.get() is None
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(out))


# ---- argument errors ---------------------------------------------------------------


HALF_CALLS = {
    "cho_factor": lambda a: jaxmg.cho_factor(a),
    "lu_factor": lambda a: jaxmg.lu_factor(a),
    "solve": lambda a: jaxmg.solve(a, jnp.ones(a.shape[0], a.dtype)),
    "solve-pos": lambda a: jaxmg.solve(a, jnp.ones(a.shape[0], a.dtype), assume_a="pos"),
    "inv": lambda a: jaxmg.inv(a),
    "inv-pos": lambda a: jaxmg.inv(a, assume_a="pos"),
    "slogdet": lambda a: jaxmg.slogdet(a),
    "eigh": lambda a: jaxmg.eigh(a),
    "eigvalsh": lambda a: jaxmg.eigvalsh(a),
}


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("call", list(HALF_CALLS))
def test_half_precision_rejected(call, dtype):
    mesh = helpers.mesh(2)
    a = helpers.rows(jnp.eye(4, dtype=dtype), mesh)
    with pytest.raises(TypeError, match=r"(?s)(float16|bfloat16).*cast.*astype\(jnp\.float32\)"):
        HALF_CALLS[call](a)


@pytest.mark.parametrize("trans", [3, -1, "T", None])
def test_bad_trans(trans):
    mesh = helpers.mesh(2)
    f = jaxmg.lu_factor(helpers.rows(np.eye(4), mesh))
    with pytest.raises(ValueError, match=r"trans must be 0 \(A\), 1 \(A\^T\) or 2 \(A\^H\), got"):
        jaxmg.lu_solve(f, np.ones(4), trans=trans)


@pytest.mark.parametrize(
    "call",
    [
        lambda a: jaxmg.solve(a, jnp.ones(4), assume_a="posdef"),
        lambda a: jaxmg.inv(a, assume_a="posdef"),
        lambda a: jaxmg.slogdet(a, assume_a="posdef"),
    ],
    ids=["solve", "inv", "slogdet"],
)
def test_bad_assume_a(call):
    """An unknown assume_a is refused (never silently taken for "gen")."""
    a = helpers.rows(np.eye(4), helpers.mesh(2))
    with pytest.raises(ValueError, match=r"assume_a must be .*'posdef'"):
        call(a)


@pytest.mark.parametrize("call", ["cho_factor", "lu_factor", "solve", "inv", "eigh", "eigvalsh"])
def test_bad_on_failure(call):
    a = helpers.rows(np.eye(4), helpers.mesh(2))
    fn = {
        "cho_factor": jaxmg.cho_factor, "lu_factor": jaxmg.lu_factor, "inv": jaxmg.inv,
        "eigh": jaxmg.eigh, "eigvalsh": jaxmg.eigvalsh,
        "solve": lambda a, **kw: jaxmg.solve(a, jnp.ones(4), **kw),
    }[call]
    with pytest.raises(ValueError, match=r"on_failure must be one of .*'nan'.*'loud'"):
        fn(a, on_failure="loud")


def test_bad_rhs_and_factor_types():
    mesh = helpers.mesh(2)
    a = helpers.rows(np.eye(4), mesh)
    cf, lf = jaxmg.cho_factor(a), jaxmg.lu_factor(a)
    for solve, f in ((jaxmg.cho_solve, cf), (jaxmg.lu_solve, lf)):
        for b in (np.ones(5), np.ones((5, 2)), np.ones((4, 2, 2))):
            with pytest.raises(ValueError, match=r"b must have shape \(4,\) or \(4, K\)"):
                solve(f, b)
    with pytest.raises(TypeError, match="CholeskyFactor"):
        jaxmg.cho_solve(lf, np.ones(4))
    with pytest.raises(TypeError, match="LUFactor"):
        jaxmg.lu_solve(cf, np.ones(4))
    with pytest.raises(ValueError, match="square"):
        jaxmg.solve(helpers.rows(np.ones((4, 6)), mesh), np.ones(4))


@pytest.mark.parametrize("routine", ["solve-gen", "solve-pos"])
def test_rhs_dtype_differs_from_a(rng, routine):
    """b of another dtype than a: either promoted (and solved correctly, as
    jax.scipy.linalg.solve does) or refused with a TypeError naming the
    dtypes; never a runtime failure of the solver."""
    n, mesh = 8, helpers.mesh(2)
    a = helpers.spd(rng, n, np.float64, CONDITION)
    b = helpers.random_matrix(rng, n, np.complex128, 2)
    assume_a = routine.split("-")[1]
    try:
        x = jaxmg.solve(helpers.rows(a, mesh), helpers.replicated(b, mesh), assume_a=assume_a)
        x = np.asarray(x)
    except TypeError as e:
        assert "dtype" in str(e) and "complex128" in str(e), str(e)
        return
    assert x.dtype == np.complex128 and helpers.residual(a, x, b) <= tol(np.float64, n)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("order", [("r", "c"), ("c", "r")])
def test_rows_over_both_axes_of_a_two_dimensional_mesh(rng, dtype, order):
    """A 2 x 2 mesh with rows over both axes, P(("r", "c"), None) or the other
    order (which deals rows to the devices differently): every routine gives
    NumPy's answer, and results keep a's row sharding."""
    mesh = jax.make_mesh((2, 2), ("r", "c"), devices=helpers.devices(4))
    rows = NamedSharding(mesh, P(order, None))
    n = 12
    a_np = helpers.spd(rng, n, dtype, CONDITION)
    g_np = general(rng, n, dtype)
    b_np = helpers.random_matrix(rng, n, dtype, 3)
    a, g, b = (jax.device_put(x, rows) for x in (a_np, g_np, b_np))
    x = jaxmg.solve(a, b, assume_a="pos")
    assert x.sharding.spec == P(order, None)
    check_solution(a_np, x, b_np, dtype)
    check_solution(g_np, jaxmg.solve(g, b), b_np, dtype)
    check_solution(a_np, jaxmg.cho_solve(jaxmg.cho_factor(a), b), b_np, dtype)
    tol = 100 * n * np.finfo(dtype).eps
    inv = np.asarray(jaxmg.inv(a, assume_a="pos"))
    assert np.abs(inv @ a_np - np.eye(n)).max() < tol * np.linalg.cond(a_np)
    w = np.asarray(jaxmg.eigvalsh(a))
    assert np.abs(w - np.linalg.eigvalsh(a_np)).max() < tol * np.abs(w).max()
    logdet = float(jaxmg.slogdet(g).logabsdet)
    assert abs(logdet - np.linalg.slogdet(g_np)[1]) < tol * max(1.0, abs(logdet))


@pytest.mark.parametrize("axis", ["r", "c"])
@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_rows_over_one_axis_of_a_two_dimensional_mesh(rng, axis, kind):
    """Rows over one axis of a 2 x 2 mesh, replicated along the other (as a
    data-parallel computation leaves a matrix): jaxmg splits each device's
    rows further along the other axis and runs on all four devices. NumPy's
    answers; x keeps b's sharding on explicit axes (on auto axes, where b's
    rows do not match the factor's, it comes back replicated); factors and
    inverses come back over both axes, the named one first. Under jit too."""
    types = (jax.sharding.AxisType.Explicit if kind == "explicit" else jax.sharding.AxisType.Auto,) * 2
    mesh = jax.make_mesh((2, 2), ("r", "c"), devices=helpers.devices(4), axis_types=types)
    rows = NamedSharding(mesh, P(axis, None))
    both = (axis, "c" if axis == "r" else "r")
    n, dtype = 12, np.float64
    a_np, g_np = helpers.spd(rng, n, dtype, CONDITION), general(rng, n, dtype)
    b_np = helpers.random_matrix(rng, n, dtype, 3)
    a, g, b = (jax.device_put(x, rows) for x in (a_np, g_np, b_np))
    x = jaxmg.solve(a, b, assume_a="pos")
    assert x.sharding.spec == (P(axis, None) if kind == "explicit" else P())
    check_solution(a_np, x, b_np, dtype)
    check_solution(g_np, jax.jit(jaxmg.solve)(g, b), b_np, dtype)
    check_solution(g_np, jaxmg.lu_solve(jaxmg.lu_factor(g), b), b_np, dtype)
    c = jaxmg.cho_factor(a, lower=True)
    over_both = NamedSharding(mesh, P(both, None))
    assert c[0].sharding.is_equivalent_to(over_both, 2), c[0].sharding
    np.testing.assert_allclose(np.tril(np.asarray(c[0])), np.linalg.cholesky(a_np), rtol=1e-12, atol=1e-12)
    inv = jaxmg.inv(g)
    assert inv.sharding.is_equivalent_to(over_both, 2), inv.sharding
    np.testing.assert_allclose(np.asarray(inv), np.linalg.inv(g_np), rtol=1e-10, atol=1e-12)
    w, v = jaxmg.eigh(a)
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a_np), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a_np @ np.asarray(v), np.asarray(v) * np.asarray(w), atol=1e-10)
    logdet = float(jaxmg.slogdet(g).logabsdet)
    np.testing.assert_allclose(logdet, np.linalg.slogdet(g_np)[1], rtol=1e-12)


def test_inside_shard_map_over_a_two_dimensional_mesh(rng):
    """Inside the caller's shard_map over both axes: rows over both work and
    match NumPy; rows over one axis only are refused, naming the other."""
    mesh = jax.make_mesh((2, 2), ("r", "c"), devices=helpers.devices(4))
    n = 16
    a_np = helpers.spd(rng, n, np.float64, CONDITION)
    b_np = helpers.random_matrix(rng, n, np.float64, 2)
    rows = NamedSharding(mesh, P(("r", "c"), None))
    a, b = jax.device_put(a_np, rows), jax.device_put(b_np, rows)

    def solve(spec):
        return jax.shard_map(
            lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=spec),
            mesh=mesh, in_specs=(P(("r", "c"), None),) * 2, out_specs=P(("r", "c"), None),
        )(a, b)

    check_solution(a_np, solve(P(("r", "c"), None)), b_np, np.float64)
    with pytest.raises(ValueError, match=r"rows are sharded over \('r',\) only.*\{'c': 2\}"):
        solve(P("r", None))
