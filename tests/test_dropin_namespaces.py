"""jaxmg.numpy.linalg and jaxmg.scipy.linalg against jax.numpy.linalg and
jax.scipy.linalg: the same parameters in the same order with the same
defaults, the same results and result types for the call forms where the two
JAX namespaces differ (qr's modes and pivoting, cholesky's default triangle,
eigh's and svd's positional arguments), JAX's own functions for the names
jaxmg does not implement, and jaxmg's options passed through.
With JAXMG_DROPIN_REFERENCE=1 the namespaces are JAX's own."""

from __future__ import annotations

import inspect
import os

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import helpers
from dropin import REFERENCE

if REFERENCE:
    mnp_linalg, msl = jnp.linalg, jsl
else:
    import jaxmg.numpy
    import jaxmg.scipy.linalg

    mnp_linalg, msl = jaxmg.numpy.linalg, jaxmg.scipy.linalg

NUMPY_NAMES = ("cholesky", "cond", "det", "eigh", "eigvalsh", "inv", "lstsq", "matrix_norm",
               "matrix_power", "matrix_rank", "norm", "pinv", "qr", "slogdet", "solve", "svd",
               "svdvals", "tensorinv", "tensorsolve")
SCIPY_NAMES = ("cho_factor", "cho_solve", "cholesky", "det", "eigh", "expm", "expm_frechet",
               "inv", "lu", "lu_factor", "lu_solve", "polar", "qr", "solve", "solve_triangular", "svd")


def _jax_parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("namespace,name", [("numpy", n) for n in NUMPY_NAMES]
                         + [("scipy", n) for n in SCIPY_NAMES])
def test_parameters_are_jax_own(namespace, name):
    """JAX's parameters first, in order, same kind and default; anything
    after them is keyword-only (jaxmg's options)."""
    ours = getattr(mnp_linalg if namespace == "numpy" else msl, name)
    theirs = getattr(jnp.linalg if namespace == "numpy" else jsl, name)
    want = _jax_parameters(theirs)
    got = _jax_parameters(ours)
    assert got[:len(want)] == want
    rest = {kind for _, kind, _ in got[len(want):]}
    assert rest <= {inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD}


@pytest.mark.parametrize("namespace,name", [("numpy", "multi_dot"), ("numpy", "vector_norm"),
                                            ("numpy", "eig"), ("scipy", "sqrtm"),
                                            ("scipy", "schur"), ("scipy", "block_diag")])
def test_other_names_are_jax_functions(namespace, name):
    ours = getattr(mnp_linalg if namespace == "numpy" else msl, name)
    assert ours is getattr(jnp.linalg if namespace == "numpy" else jsl, name)
    assert name in dir(mnp_linalg if namespace == "numpy" else msl)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        msl.no_such_routine  # noqa: B018


def _assert_same(got, want, rtol):
    """Equal values; the same type, or for JAX's named tuples (private
    classes) a named tuple with the same fields."""
    if hasattr(want, "_fields"):
        assert isinstance(got, tuple) and got._fields == want._fields
    else:
        assert type(got) is type(want)
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w, rtol)
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shape", [(6, 4), (4, 4), (4, 6), (3, 6, 4)])
@pytest.mark.parametrize("mode", ["full", "r", "economic"])
@pytest.mark.parametrize("pivoting", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_scipy_qr_modes(shape, mode, pivoting, dtype):
    """scipy's modes: full gives q (M, M), economic q (M, K), r gives (r,)
    with r (M, N); pivoting appends p. The factors equal JAX's (both
    Householder QR with LAPACK's sign convention on CPU)."""
    a = helpers.random_matrix(np.random.default_rng(3), shape[-2], dtype, m=shape[-1])
    a = np.broadcast_to(a, shape).copy() if len(shape) == 3 else a
    got = msl.qr(a, mode=mode, pivoting=pivoting)
    want = jsl.qr(a, mode=mode, pivoting=pivoting)
    _assert_same(got, want, 1e-4 if dtype == np.complex64 else 1e-10)


def test_scipy_qr_positional_and_errors():
    a = helpers.random_matrix(np.random.default_rng(4), 5, np.float64, m=3)
    _assert_same(msl.qr(a, False, None, "economic"), jsl.qr(a, False, None, "economic"), 1e-10)
    q, r = msl.qr(a)  # default mode "full"
    assert q.shape == (5, 5) and r.shape == (5, 3)
    with pytest.raises(ValueError):
        msl.qr(a, mode="reduced")  # jnp.linalg's name, not scipy's
    with pytest.raises(ValueError):
        msl.qr(a, mode="raw")


def test_numpy_qr_keeps_numpy_modes():
    a = helpers.random_matrix(np.random.default_rng(5), 5, np.float64, m=3)
    for mode in ("reduced", "complete", "r"):
        _assert_same(mnp_linalg.qr(a, mode), jnp.linalg.qr(a, mode), 1e-10)


def test_cholesky_default_triangle_per_namespace():
    """jax.scipy's cholesky gives U by default, jnp.linalg's L, and only
    jnp's symmetrizes: a non-symmetric input tells the two apart."""
    rng = np.random.default_rng(6)
    a = helpers.spd(rng, 5, np.float64)
    a_skewed = a + np.triu(rng.normal(size=(5, 5)), 1) * 0.1
    for x in (a, a_skewed):
        _assert_same(msl.cholesky(x), jsl.cholesky(x), 1e-12)
        _assert_same(msl.cholesky(x, True), jsl.cholesky(x, True), 1e-12)
        _assert_same(mnp_linalg.cholesky(x), jnp.linalg.cholesky(x), 1e-12)
        _assert_same(mnp_linalg.cholesky(x, upper=True), jnp.linalg.cholesky(x, upper=True),
                     1e-12)


def test_eigh_positional_arguments():
    """jax.scipy's eigh(a, b, lower, eigvals_only) against jnp's eigh(a,
    UPLO, symmetrize_input), positionally."""
    rng = np.random.default_rng(7)
    a = helpers.hermitian(rng, 6, np.float64)
    skewed = a + np.triu(rng.normal(size=(6, 6)), 1)
    for x in (a, skewed):
        _assert_same(msl.eigh(x, None, False, True), jsl.eigh(x, None, False, True), 1e-10)
        w, v = msl.eigh(x)
        w_jax, _ = jsl.eigh(x)
        np.testing.assert_allclose(w, w_jax, rtol=1e-10, atol=1e-10)
        assert type(msl.eigh(x)) is tuple
        w, v = mnp_linalg.eigh(x, "U", False)
        w_jax, v_jax = jnp.linalg.eigh(x, "U", False)
        np.testing.assert_allclose(w, w_jax, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.abs(v), np.abs(v_jax), atol=1e-8)
        np.testing.assert_allclose(mnp_linalg.eigvalsh(x, "U"), jnp.linalg.eigvalsh(x, "U"),
                                   rtol=1e-10, atol=1e-10)


def test_svd_positional_arguments():
    a = helpers.random_matrix(np.random.default_rng(8), 6, np.float64, m=4)
    got = msl.svd(a, False, True, False, True, "gesvd")
    want = jsl.svd(a, False, True, False, True, "gesvd")
    assert type(got) is type(want) and [g.shape for g in got] == [w.shape for w in want]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_allclose(msl.svd(a, compute_uv=False), jsl.svd(a, compute_uv=False),
                               rtol=1e-12)
    s = mnp_linalg.svd(a, True, False)
    np.testing.assert_allclose(s, jnp.linalg.svd(a, True, False), rtol=1e-12)


def test_same_results_in_jit_vmap_and_grad():
    rng = np.random.default_rng(9)
    a = np.stack([helpers.spd(rng, 4, np.float64) for _ in range(3)])
    b = rng.normal(size=(3, 4))
    solve = jax.jit(jax.vmap(msl.solve))
    np.testing.assert_allclose(solve(a, b), jax.vmap(jsl.solve)(a, b), rtol=1e-10)
    g = jax.grad(lambda x: jnp.sum(mnp_linalg.inv(x)))(a[0])
    g_jax = jax.grad(lambda x: jnp.sum(jnp.linalg.inv(x)))(a[0])
    np.testing.assert_allclose(g, g_jax, rtol=1e-8, atol=1e-10)
    q = jax.jit(lambda x: msl.qr(x, mode="economic"))(a[0])
    assert type(q) is tuple and q[0].shape == (4, 4)


@pytest.mark.skipif(REFERENCE, reason="jaxmg's options exist on jaxmg's namespaces only")
def test_jaxmg_options_pass_through():
    mesh = helpers.mesh(2)
    rng = np.random.default_rng(10)
    a = helpers.spd(rng, 8, np.float64)
    b = rng.normal(size=(8,))
    x = msl.solve(helpers.put_rows(a, mesh), b, assume_a="pos", backend="jaxmg")
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10)
    u = mnp_linalg.cholesky(helpers.put_rows(a, mesh), backend="jaxmg")
    np.testing.assert_allclose(u, np.linalg.cholesky(a), rtol=1e-10)
    with pytest.raises(TypeError, match="no_such_option"):
        msl.inv(a, no_such_option=1)
    with pytest.raises(ValueError, match="pivoting"):
        msl.qr(a, pivoting=True, backend="jaxmg")


@pytest.mark.skipif(REFERENCE, reason="JAX's pivoted QR refuses matrix axes sharded on "
                    "explicit mesh axes")
@pytest.mark.parametrize("mode", ["full", "economic", "r"])
def test_scipy_pivoted_qr_of_row_sharded_matrix(mode):
    """The README's row-sharded a (explicit axes, as jax.make_mesh makes
    them) is gathered for JAX's pivoted QR, eagerly and under jit; the
    results are JAX's for the same matrix."""
    mesh = helpers.mesh(2)
    a = helpers.random_matrix(np.random.default_rng(12), 8, np.float64, m=6)
    want = jsl.qr(a, mode=mode, pivoting=True)
    _assert_same(msl.qr(helpers.rows(a, mesh), mode=mode, pivoting=True), want, 1e-10)
    jitted = jax.jit(lambda x: msl.qr(x, mode=mode, pivoting=True))(helpers.rows(a, mesh))
    _assert_same(jitted, want, 1e-10)
    batch = helpers.rows(np.stack([a] * 4), mesh)
    got = msl.qr(batch, mode=mode, pivoting=True)
    assert got[-1].shape[0] == 4
    _assert_same(tuple(x[2] for x in got), want, 1e-10)


@pytest.mark.skipif(REFERENCE, reason="the top-level jaxmg.qr has no JAX counterpart")
@pytest.mark.parametrize("call", [dict(pivoting=False), dict(pivoting=True),
                                  dict(mode="economic", pivoting=False),
                                  dict(mode="r", check_finite=True),
                                  dict(mode="full", overwrite_a=False), dict(lwork=None)])
def test_top_level_qr_reads_scipy_keywords_as_scipy(call):
    """jaxmg.qr(a) is jnp's (mode "economic" refused, as there); with a
    scipy-only keyword it returns what jax.scipy.linalg.qr returns for the same call (mode "full"
    by default there: q is M x M for a tall a)."""
    import jaxmg

    a = helpers.random_matrix(np.random.default_rng(11), 6, np.float64, m=4)
    _assert_same(jaxmg.qr(a, **call), jsl.qr(a, **call), 1e-10)
    _assert_same(jaxmg.qr(a), jnp.linalg.qr(a), 1e-10)
    _assert_same(jaxmg.qr(a, "full"), jnp.linalg.qr(a, "full"), 1e-10)
    with pytest.raises(ValueError, match="return_info"):
        jaxmg.qr(a, pivoting=False, return_info=True)
    with pytest.raises(ValueError, match="mode"):
        jaxmg.qr(a, mode="economic")


def test_import_jaxmg_gives_both_namespaces():
    """As `import jax` gives jax.numpy.linalg and jax.scipy.linalg (in a fresh
    interpreter: this one has imported them already)."""
    import pathlib
    import subprocess
    import sys

    import jaxmg

    code = "import jaxmg; print(jaxmg.numpy.linalg.solve.__module__, jaxmg.scipy.linalg.solve)"
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(pathlib.Path(jaxmg.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "jaxmg.numpy.linalg" in out.stdout
