"""Derivatives of every public routine, forward and reverse mode, checked
against central differences the way jax.test_util.check_grads does (order 1;
order 2 where JAX checks its own routines at order 2: solves,
log-determinants, SPD inverse): solve (pos/gen), cho_solve (w.r.t. A and b),
lu_solve (trans 0/1/2), cho_logdet, slogdet, inv (pos/gen), eigh
(eigenvalues and gauge-invariant functions of the eigenvectors), eigvalsh
and the seed names potrs/potri/syevd, in float64 and complex128, under
jax.jit and eagerly (under jax.set_mesh), row-sharded and on an uneven
mesh. Gradients with respect to a row-sharded A come back row-sharded and
equal jax.numpy's own on the gathered matrix; a gradient costs one
factorisation; degenerate eigenvalues are handled as jnp.linalg.eigh
handles them.

The checked functions place their arguments on the mesh themselves (the
perturbed points are NumPy arrays) and return replicated results (JAX
requires a cotangent typed like the output); routines that read one
triangle of A are checked on (A + A^H) / 2."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from jax.test_util import check_jvp, check_vjp

import helpers
import jaxmg

CONDITION = 4.0
N = 6
DTYPES = (np.float64, np.complex128)
MODES = ("fwd", "rev")
# check_grads' default tolerance for float64 (1e-5) sits at the edge of its
# central-difference error (eps = 1e-4) for the second-order checks.
TOL = dict(atol=1e-4, rtol=1e-4)


def dtype_id(dtype):
    return np.dtype(dtype).name


def general(rng, n, dtype, condition=CONDITION):
    """Non-symmetric, singular values in [1, condition]."""
    base = np.complex128 if np.iscomplexobj(dtype(0)) else np.float64
    u, _ = np.linalg.qr(helpers.random_matrix(rng, n, base))
    v, _ = np.linalg.qr(helpers.random_matrix(rng, n, base))
    return ((u * np.geomspace(1.0, condition, n)) @ v.conj().T).astype(dtype)


def spaced(rng, n, dtype):
    """Hermitian with well separated eigenvalues (eigenvector derivatives
    divide by their gaps), of both signs."""
    return helpers.with_eigenvalues(rng, np.linspace(-2.0, 3.0, n), dtype)


def on_mesh(f, mesh, hermitian=False, uneven=False):
    """f(a, *rest) as check_grads needs it: a placed row-sharded (or, when
    uneven, replicated with mesh=/spec= passed), optionally made Hermitian;
    the rest replicated; the results replicated."""
    rows = NamedSharding(mesh, P("x", None))
    rep = NamedSharding(mesh, P())
    kw = {"mesh": mesh, "spec": P("x", None)} if uneven else {}

    def wrapped(a, *rest):
        a = jax.device_put(a, rep if uneven else rows)
        if hermitian:
            a = (a + jax.sharding.reshard(jnp.conj(a).T, rep if uneven else rows)) / 2
        out = f(a, *(jax.device_put(r, rep) for r in rest), **kw)
        return jax.tree_util.tree_map(lambda y: jax.sharding.reshard(y, rep), out)

    return wrapped


def _blocking(fn):
    return lambda *args: jax.block_until_ready(fn(*args))


def check_grads(f, args, order, modes):
    """jax.test_util.check_grads, the same checks in the same order, but each
    evaluation waited for before the next is dispatched (XLA:CPU can deadlock
    with several multi-device programs in flight; check_grads itself does not
    wait)."""

    def check(f, args, order, msg):
        if "fwd" in modes:
            check_jvp(_blocking(f), _blocking(functools.partial(jax.jvp, f)), args,
                      err_msg=f"JVP of {msg}" if msg else "JVP", **TOL)
            if order > 1:
                check(functools.partial(jax.jvp, f), (args, args), order - 1, "JVP")
        if "rev" in modes:
            def f_vjp(*primals):
                out, vjp = jax.vjp(f, *primals)
                return jax.block_until_ready(out), _blocking(vjp)

            check_vjp(_blocking(f), f_vjp, args, err_msg=f"VJP of {msg}" if msg else "VJP", **TOL)
            if order > 1:
                def vjp_of_output(*primals):
                    out, vjp = jax.vjp(f, *primals)
                    return vjp(out)

                check(vjp_of_output, args, order - 1, "VJP")

    check(f, tuple(args), order, "")


def grads(f, args, mesh, *, mode, order=1, jit=True, **on_mesh_kw):
    fn = on_mesh(f, mesh, **on_mesh_kw)
    fn = jax.jit(fn) if jit else fn
    with jax.set_mesh(mesh):
        check_grads(fn, args, order=order, modes=(mode,))


# ---- solves ------------------------------------------------------------------------

# (dtype, jit): complex under jit, real eagerly (both: the same rules).
VARIANTS = [(np.float64, False), (np.complex128, True)]
VARIANT_IDS = ["float64-eager", "complex128-jit"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("assume_a", ["gen", "pos"])
@pytest.mark.parametrize("dtype, jit", VARIANTS, ids=VARIANT_IDS)
def test_solve(rng, dtype, jit, assume_a, mode):
    """d x = A^-1 (dB - dA x), with respect to A and b together."""
    mesh = helpers.mesh(2)
    a = helpers.spd(rng, N, dtype, CONDITION) if assume_a == "pos" else general(rng, N, dtype)
    b = helpers.random_matrix(rng, N, dtype, 2)
    grads(
        lambda a, b, **kw: jaxmg.solve(a, b, assume_a=assume_a, **kw),
        (a, b), mesh, mode=mode, jit=jit, hermitian=assume_a == "pos",
    )


@pytest.mark.parametrize("mode", MODES)
def test_cho_solve(rng, mode):
    """Through one reused factor: two solves against it, vector and matrix b."""
    dtype, mesh = np.complex128, helpers.mesh(2)

    def f(a, b, **kw):
        factor = jaxmg.cho_factor(a, **kw)
        return jaxmg.cho_solve(factor, b), jaxmg.cho_solve(factor, b[:, 0] * 2)

    args = (helpers.spd(rng, N, dtype, CONDITION), helpers.random_matrix(rng, N, dtype, 2))
    grads(f, args, mesh, mode=mode, hermitian=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("routine", ["cho_solve", "lu_solve"])
def test_solve_wrt_b_only(rng, routine, dtype):
    """The factor of a concrete row-sharded A closed over, b differentiated
    (forward and reverse), eagerly."""
    mesh = helpers.mesh(2)
    if routine == "cho_solve":
        factor = jaxmg.cho_factor(helpers.rows(helpers.spd(rng, N, dtype, CONDITION), mesh))
    else:
        factor = jaxmg.lu_factor(helpers.rows(general(rng, N, dtype), mesh))
    solve = getattr(jaxmg, routine)
    b = helpers.random_matrix(rng, N, dtype, 2)
    fn = lambda b: solve(factor, jax.device_put(b, NamedSharding(mesh, P())))  # noqa: E731
    with jax.set_mesh(mesh):
        check_grads(fn, (b,), order=1, modes=MODES)


# Complex, where all three differ (real LU: test_solve, test_second_order).
LU_CASES = [(np.complex128, 0), (np.complex128, 1), (np.complex128, 2)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "dtype, trans", LU_CASES, ids=[f"{dtype_id(d)}-trans{t}" for d, t in LU_CASES]
)
def test_lu_solve(rng, dtype, trans, mode):
    mesh = helpers.mesh(2)
    args = (general(rng, N, dtype), helpers.random_matrix(rng, N, dtype, 2))
    grads(
        lambda a, b, **kw: jaxmg.lu_solve(jaxmg.lu_factor(a, **kw), b, trans=trans),
        args, mesh, mode=mode,
    )


# ---- log-determinants and inverses ---------------------------------------------------

FUNCTIONS = {
    # name: (f, matrix kind, read as Hermitian)
    "cho_logdet": (lambda a, **kw: jaxmg.cho_logdet(jaxmg.cho_factor(a, **kw)), "spd", True),
    "slogdet": (lambda a, **kw: jaxmg.slogdet(a, **kw), "general", False),
    "slogdet-pos": (lambda a, **kw: jaxmg.slogdet(a, assume_a="pos", **kw).logabsdet, "spd", True),
    "inv-gen": (lambda a, **kw: jaxmg.inv(a, **kw), "general", False),
    "inv-pos": (lambda a, **kw: jaxmg.inv(a, assume_a="pos", **kw), "spd", True),
}


def matrix(rng, kind, dtype):
    return {
        "spd": lambda: helpers.spd(rng, N, dtype, CONDITION),
        "general": lambda: general(rng, N, dtype),
        "spaced": lambda: spaced(rng, N, dtype),
    }[kind]()


# Complex (the sign of a complex determinant moves; conjugations in the
# Hermitian routines). test_second_order checks float64 at orders 1 and 2.
DET_CASES = [
    ("cho_logdet", np.complex128), ("slogdet", np.complex128), ("slogdet-pos", np.complex128),
    ("inv-gen", np.complex128), ("inv-pos", np.complex128),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, dtype", DET_CASES, ids=[f"{n}-{dtype_id(d)}" for n, d in DET_CASES])
def test_determinants_and_inverses(rng, name, dtype, mode):
    """slogdet: both outputs (the sign's derivative is non-zero for complex A)."""
    f, kind, hermitian = FUNCTIONS[name]
    grads(f, (matrix(rng, kind, dtype),), helpers.mesh(2), mode=mode, hermitian=hermitian)


# Order 2 (forward-over-forward and reverse-over-reverse), as JAX checks
# jnp.linalg.slogdet, solve and the Cholesky-based routines.
SECOND_ORDER = {
    "solve-gen": (lambda a, b, **kw: jaxmg.solve(a, b, **kw), "general", False),
    "cho_logdet": FUNCTIONS["cho_logdet"],
    "slogdet": (lambda a, **kw: jaxmg.slogdet(a, **kw).logabsdet, "general", False),
    "inv-pos": FUNCTIONS["inv-pos"],
}


# (check_grads at order 2 checks order 1 on the way.)
SECOND_ORDER_CASES = [
    ("slogdet", "fwd"), ("slogdet", "rev"), ("cho_logdet", "fwd"), ("cho_logdet", "rev"),
    ("inv-pos", "fwd"), ("solve-gen", "rev"),
]


@pytest.mark.parametrize(
    "name, mode", SECOND_ORDER_CASES, ids=[f"{n}-{m}" for n, m in SECOND_ORDER_CASES]
)
def test_second_order(rng, name, mode):
    dtype = np.float64
    f, kind, hermitian = SECOND_ORDER[name]
    args = (matrix(rng, kind, dtype),)
    if name.startswith("solve"):
        args += (helpers.random_matrix(rng, N, dtype, 1)[:, 0],)
    grads(f, args, helpers.mesh(2), mode=mode, order=2, hermitian=hermitian)


# ---- eigendecompositions ------------------------------------------------------------

EIGEN = {
    "eigh-values": lambda a, **kw: jaxmg.eigh(a, **kw).eigenvalues,
    # Gauge invariant: unchanged by a phase (sign) per eigenvector.
    "eigh-sum-abs-v4": lambda a, **kw: jnp.sum(jnp.abs(jaxmg.eigh(a, **kw).eigenvectors) ** 4),
    "eigh-v-sin(w)-vH": lambda a, **kw: _v_f_vh(*jaxmg.eigh(a, **kw)),
    "eigvalsh": lambda a, **kw: jaxmg.eigvalsh(a, **kw),
}


def _v_f_vh(w, v):
    """V diag(sin w) V^H: invariant under each eigenvector's phase. V is
    column-sharded: gathered first (under a mesh), since a product over a
    sharded contraction has no unambiguous sharding."""
    if not jax.sharding.get_abstract_mesh().empty:
        v = jax.sharding.reshard(v, P())
    return (v * jnp.sin(w).astype(v.dtype)) @ jnp.conj(v).T


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(EIGEN))
def test_eigh(rng, name, mode):
    """Row-sharded on 2 devices (the uneven placement and degenerate
    eigenvalues: test_eigh_degenerate_like_jnp)."""
    dtype = np.complex128
    a = helpers.with_eigenvalues(rng, np.linspace(-2.0, 3.0, N), dtype)
    grads(EIGEN[name], (a,), helpers.mesh(2), mode=mode, hermitian=True)


@pytest.mark.parametrize("name", ["solve-gen", "eigh-v-sin(w)-vH"])
def test_uneven(rng, name):
    """N = 7 on 3 devices, a replicated with mesh=/spec= given: reverse mode
    for a solve (A and b), forward mode for an eigendecomposition."""
    dtype, n, mesh = np.complex128, N + 1, helpers.mesh(3)
    if name == "solve-gen":
        f, mode = (lambda a, b, **kw: jaxmg.solve(a, b, **kw)), "rev"
        args, hermitian = (general(rng, n, dtype), helpers.random_matrix(rng, n, dtype, 2)), False
    else:
        f, mode, hermitian = EIGEN[name], "fwd", True
        args = (helpers.with_eigenvalues(rng, np.linspace(-2.0, 3.0, n), dtype),)
    grads(f, args, mesh, mode=mode, hermitian=hermitian, uneven=True)


# ---- the seed names ------------------------------------------------------------------

SEEDS = {
    # name: (f, matrix kind, modes)
    "potrs": (lambda a, b, **kw: jaxmg.potrs(a, b, **kw), "spd", MODES),
    "potri": (lambda a, **kw: jaxmg.potri(a, **kw), "spd", MODES),
    "syevd-values": (lambda a, **kw: jaxmg.syevd(a, **kw)[0], "spaced", ("rev",)),
    "syevd-no-vectors": (
        lambda a, **kw: jaxmg.syevd(a, compute_vectors=False, **kw), "spaced", ("fwd",)
    ),
}


@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_names(rng, name):
    """potrs, potri: forward and reverse (in that order)."""
    dtype = np.float64
    f, kind, modes = SEEDS[name]
    args = (matrix(rng, kind, dtype),)
    if name == "potrs":
        args += (helpers.random_matrix(rng, N, dtype, 2),)
    for mode in modes:
        grads(f, args, helpers.mesh(2), mode=mode, hermitian=True)


# ---- distributed gradients, equal to jax.numpy's ---------------------------------------

# name: (scalar loss of jaxmg, the same with jax.numpy, matrix kind)
LOSSES = {
    "solve-gen": (lambda a, b, **kw: jaxmg.solve(a, b, **kw),
                  lambda a, b: jnp.linalg.solve(a, b), "general"),
    "solve-pos": (lambda a, b, **kw: jaxmg.solve(a, b, assume_a="pos", **kw),
                  lambda a, b: jnp.linalg.solve(a, b), "spd"),
    "slogdet": (lambda a, b, **kw: jaxmg.slogdet(a, **kw).logabsdet,
                lambda a, b: jnp.linalg.slogdet(a).logabsdet, "general"),
    "cho_logdet": (lambda a, b, **kw: jaxmg.cho_logdet(jaxmg.cho_factor(a, **kw)),
                   lambda a, b: jnp.linalg.slogdet(a).logabsdet, "spd"),
    "inv-gen": (lambda a, b, **kw: jaxmg.inv(a, **kw), lambda a, b: jnp.linalg.inv(a), "general"),
    "eigvalsh": (lambda a, b, **kw: jaxmg.eigvalsh(a, **kw),
                 lambda a, b: jnp.linalg.eigvalsh(a), "spaced"),
    "eigh-vectors": (lambda a, b, **kw: _v_f_vh(*jaxmg.eigh(a, **kw)),
                     lambda a, b: _v_f_vh(*jnp.linalg.eigh(a)), "spaced"),
}


def scalar(out, weights):
    """A real scalar that depends on every entry of out (complex ones too)."""
    out = jnp.reshape(out, (-1,))
    return jnp.sum(jnp.real(out * weights[: out.shape[0]]))


GRAD_CASES = [(name, True) for name in LOSSES] + [("solve-gen", False)]


@pytest.mark.parametrize(
    "name, jit", GRAD_CASES, ids=[f"{n}-{'jit' if j else 'eager'}" for n, j in GRAD_CASES]
)
def test_gradient_sharded_like_a_and_equal_to_jnp(rng, name, jit):
    """jax.grad with respect to a row-sharded A is row-sharded like A and
    equals jax.numpy's gradient on the gathered matrix. Hermitian inputs for
    routines that read one triangle, and symmetric-invariant losses there."""
    dtype, n, mesh = np.complex128, 8, helpers.mesh(4)
    f, ref, kind = LOSSES[name]
    a = {
        "spd": lambda: helpers.spd(rng, n, dtype, CONDITION),
        "general": lambda: general(rng, n, dtype),
        "spaced": lambda: helpers.with_eigenvalues(rng, np.linspace(-2.0, 3.0, n), dtype),
    }[kind]()
    b = helpers.random_matrix(rng, n, dtype, 2)
    weights = helpers.random_matrix(rng, n * n, dtype, 1)[:, 0]
    a_dev = helpers.rows(a, mesh)
    grad = jax.grad(lambda a, b: scalar(f(a, b), weights))
    grad = jax.jit(grad) if jit else grad
    with jax.set_mesh(mesh):
        g = grad(a_dev, helpers.replicated(b, mesh))
    expected = jax.grad(lambda a, b: scalar(ref(a, b), weights))(jnp.asarray(a), jnp.asarray(b))
    expected = np.asarray(expected)
    if kind != "general":
        # jaxmg reads one triangle: only the Hermitian part of the gradient is defined.
        g_h, e_h = np.asarray(g), expected
        g_h, e_h = (g_h + g_h.conj().T) / 2, (e_h + e_h.conj().T) / 2
    else:
        g_h, e_h = np.asarray(g), expected
    assert g.shape == a.shape and g.dtype == dtype
    assert g.sharding.is_equivalent_to(a_dev.sharding, 2), (g.sharding, a_dev.sharding)
    bound = helpers.tolerance(dtype, n, 100.0) * max(1.0, np.abs(e_h).max())
    assert np.abs(g_h - e_h).max() <= bound


def test_gradient_wrt_uneven_a(rng):
    """N = 7 on 3 devices (a replicated, mesh=/spec= given): gradients of a
    solve, slogdet and cho_logdet equal jax.numpy's."""
    dtype, n, mesh = np.float64, 7, helpers.mesh(3)
    kw = {"mesh": mesh, "spec": P("x", None)}
    g, a = general(rng, n, dtype), helpers.spd(rng, n, dtype, CONDITION)
    b = helpers.random_matrix(rng, n, dtype, 1)[:, 0]
    g_dev, a_dev = helpers.replicated(g, mesh), helpers.replicated(a, mesh)
    b_dev = helpers.replicated(b, mesh)
    logdet = lambda x: jnp.linalg.slogdet(x).logabsdet  # noqa: E731
    cases = [
        (lambda x: jnp.sum(jaxmg.solve(x, b_dev, **kw) ** 2),
         lambda x: jnp.sum(jnp.linalg.solve(x, b) ** 2), g, g_dev),
        (lambda x: jaxmg.slogdet(x, **kw).logabsdet, logdet, g, g_dev),
        (lambda x: jaxmg.cho_logdet(jaxmg.cho_factor(x, **kw)), logdet, a, a_dev),
    ]
    with jax.set_mesh(mesh):
        for ours, ref, x, x_dev in cases:
            got = np.asarray(jax.jit(jax.grad(ours))(x_dev))
            want = np.asarray(jax.grad(ref)(jnp.asarray(x)))
            bound = helpers.tolerance(dtype, n, 100.0) * np.abs(want).max()
            assert np.abs(got - want).max() <= bound


# ---- costs and special points ---------------------------------------------------------


@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_gradient_costs_one_factorisation(rng, assume_a):
    """The tangent and cotangent solves reuse the factor: the gradient of a
    solve with respect to A and b runs one factorisation."""
    dtype, mesh = np.float64, helpers.mesh(2)
    a = helpers.spd(rng, N, dtype, CONDITION) if assume_a == "pos" else general(rng, N, dtype)
    b = helpers.replicated(helpers.random_matrix(rng, N, dtype, 2), mesh)
    loss = lambda a, b: jnp.sum(jaxmg.solve(a, b, assume_a=assume_a, backend="jaxmg") ** 2)  # noqa: E731
    with jax.set_mesh(mesh):
        jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(helpers.rows(a, mesh), b)
    targets = helpers.ffi_targets(jaxpr)
    factorisation = "potrf" if assume_a == "pos" else "getrf"
    assert sum(1 for t in targets if re.fullmatch(rf"jaxmg_d{factorisation}_\w+", t)) == 1, targets


def test_eigh_degenerate_like_jnp(rng):
    """A repeated eigenvalue (exactly: a diagonal matrix): eigenvalue
    derivatives stay finite and equal jnp.linalg.eigh's, forward and reverse;
    eigenvector derivatives are non-finite exactly where jnp.linalg.eigh's
    are (the same 1 / (w_j - w_i) terms)."""
    dtype, n, mesh = np.complex128, 7, helpers.mesh(3)
    kw = {"mesh": mesh, "spec": P("x", None)}
    a = np.diag([2.0, 0.5, -1.0, 0.5, 4.0, 0.5, 3.0]).astype(dtype)
    da = helpers.hermitian(rng, n, dtype)
    a_dev, da_dev = helpers.replicated(a, mesh), helpers.replicated(da, mesh)
    eigvals_sq = lambda w: jnp.sum(w**2)  # noqa: E731
    with jax.set_mesh(mesh):
        eigh_jvp = jax.jit(lambda a, da: jax.jvp(lambda x: tuple(jaxmg.eigh(x, **kw)), (a,), (da,)))
        (w, _), (dw, dv) = eigh_jvp(a_dev, da_dev)
        g_eigvalsh = jax.jit(jax.grad(lambda x: eigvals_sq(jaxmg.eigvalsh(x, **kw))))(a_dev)
        g_eigh = jax.jit(jax.grad(lambda x: eigvals_sq(jaxmg.eigh(x, **kw).eigenvalues)))(a_dev)
    (_, _), (dw_ref, dv_ref) = jax.jvp(jnp.linalg.eigh, (jnp.asarray(a),), (jnp.asarray(da),))
    g_ref = jax.grad(lambda x: eigvals_sq(jnp.linalg.eigvalsh(x)))(jnp.asarray(a))
    tol = helpers.tolerance(dtype, n, 10.0)
    np.testing.assert_array_equal(np.asarray(w), [-1.0, 0.5, 0.5, 0.5, 2.0, 3.0, 4.0])
    assert np.isfinite(np.asarray(dw)).all()
    assert np.abs(np.asarray(dw) - np.asarray(dw_ref)).max() <= tol
    for g in (g_eigvalsh, g_eigh):
        assert np.isfinite(np.asarray(g)).all()
        assert np.abs(np.asarray(g) - np.asarray(g_ref)).max() <= tol * 10
    finite, finite_ref = np.isfinite(np.asarray(dv)), np.isfinite(np.asarray(dv_ref))
    assert not finite_ref.all(), "the reference should have non-finite eigenvector derivatives"
    np.testing.assert_array_equal(finite, finite_ref)
