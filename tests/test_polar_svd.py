"""polar and svd on forced CPU devices: backend "jax" against NumPy, the QDWH
iteration with JAX's QR standing in for cuSOLVERMp's on ill-conditioned
matrices, the mp engine's assembly of polar and SVD from QR and eigh (with
both stood in for), and the refusals."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg
from jaxmg._src import eigh as eigh_mod, polar as polar_mod, sharding
from jaxmg._src.engines import mp
from jaxmg._src.placement import resolve_placement

TALL, SQUARE, WIDE = (12, 5), (8, 8), (5, 12)


def dtype_id(dtype):
    return np.dtype(dtype).name


def with_singular_values(rng, m, n, s, dtype):
    """An m x n matrix with singular values s (len min(m, n)) and random singular vectors."""
    wide = np.complex128 if np.iscomplexobj(np.zeros(1, dtype)) else np.float64
    k = min(m, n)
    w = np.linalg.qr(helpers.random_matrix(rng, m, wide, k))[0]
    v = np.linalg.qr(helpers.random_matrix(rng, n, wide, k))[0]
    return ((w * s) @ v.conj().T).astype(dtype)


def reference_polar(a, side):
    """(u, p) from NumPy's SVD in double precision (unique for full rank)."""
    w, s, vh = np.linalg.svd(helpers.promote(a), full_matrices=False)
    u = w @ vh
    p = (vh.conj().T * s) @ vh if side == "right" else (w * s) @ w.conj().T
    return u, p


def check_orthonormal(u, axis_cols, tol):
    u = helpers.promote(u)
    g = u.conj().T @ u if axis_cols else u @ u.conj().T
    assert np.abs(g - np.eye(g.shape[0])).max() < tol


def check_hermitian_psd(p, tol):
    p = helpers.promote(p)
    scale = max(np.abs(p).max(), 1e-300)
    assert np.abs(p - p.conj().T).max() <= tol * scale
    assert np.linalg.eigvalsh((p + p.conj().T) / 2).min() >= -tol * scale


def check_svd(a, u, s, vh, dtype, condition=1.0):
    m, n = a.shape
    k = min(m, n)
    s = np.asarray(s)
    assert u.shape == (m, k) and s.shape == (k,) and vh.shape == (k, n)
    assert u.dtype == dtype and vh.dtype == dtype and s.dtype == np.finfo(dtype).dtype
    assert np.all(np.diff(s) <= 0), "singular values must come in descending order"
    ref = np.linalg.svd(helpers.promote(a), compute_uv=False)
    tol = helpers.tolerance(dtype, max(m, n))
    assert np.abs(s - ref).max() <= tol * ref[0]
    u64, vh64 = helpers.promote(u), helpers.promote(vh)
    assert np.abs((u64 * s) @ vh64 - a).max() <= tol * ref[0]
    check_orthonormal(u, True, tol * condition)
    check_orthonormal(vh, False, tol)


@pytest.mark.parametrize("shape", [TALL, SQUARE, WIDE, (9, 4)], ids=str)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_svd_jax_matches_numpy(rng, dtype, shape):
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, shape[0], dtype, shape[1])
    kw = helpers.solve_kwargs(a, m)
    u, s, vh, info = jaxmg.svd(helpers.put_rows(a, m), full_matrices=False, backend="jax",
                               return_info=True, **kw)
    assert int(info) == 0
    check_svd(a, u, s, vh, dtype)
    s_only = jaxmg.svd(helpers.put_rows(a, m), compute_uv=False, backend="jax", **kw)
    np.testing.assert_allclose(np.asarray(s_only), np.asarray(s),
                               atol=helpers.tolerance(dtype, max(shape)) * float(s[0]))


@pytest.mark.parametrize("side, shape", [("right", TALL), ("right", SQUARE), ("left", SQUARE),
                                         ("left", WIDE)], ids=str)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_polar_jax_matches_numpy(rng, dtype, side, shape):
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, shape[0], dtype, shape[1])
    u, p, info = jaxmg.polar(helpers.put_rows(a, m), side=side, backend="jax", return_info=True,
                             **helpers.solve_kwargs(a, m))
    assert int(info) == 0
    k = shape[1] if side == "right" else shape[0]
    assert u.shape == shape and p.shape == (k, k) and u.dtype == dtype and p.dtype == dtype
    u_ref, p_ref = reference_polar(a, side)
    tol = helpers.tolerance(dtype, max(shape), 10)
    scale = np.abs(a).max()
    got = helpers.promote(u) @ helpers.promote(p) if side == "right" else (
        helpers.promote(p) @ helpers.promote(u))
    assert np.abs(got - a).max() <= tol * scale
    assert np.abs(helpers.promote(u) - u_ref).max() <= tol
    assert np.abs(helpers.promote(p) - p_ref).max() <= tol * scale
    check_orthonormal(u, side == "right", tol)
    check_hermitian_psd(p, tol)


def test_results_are_row_sharded_like_a(rng):
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, 12, np.float64, 6)
    rows = NamedSharding(m, P("x", None))
    u, s, vh = jaxmg.svd(helpers.rows(a, m), full_matrices=False, backend="jax")
    assert u.sharding.is_equivalent_to(rows, 2) and vh.sharding.is_equivalent_to(rows, 2)
    assert s.sharding.is_equivalent_to(NamedSharding(m, P()), 1)
    u, p = jaxmg.polar(helpers.rows(a, m), backend="jax")
    assert u.sharding.is_equivalent_to(rows, 2) and p.sharding.is_equivalent_to(rows, 2)


def test_svd_and_polar_under_jit(rng):
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, 10, np.float64, 6)
    kw = dict(mesh=m, spec=P("x", None), backend="jax")
    s = jax.jit(lambda x: jaxmg.svd(x, compute_uv=False, **kw))(helpers.rows(a, m))
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    u, p = jax.jit(lambda x: jaxmg.polar(x, **kw))(helpers.rows(a, m))
    np.testing.assert_allclose(np.asarray(u) @ np.asarray(p), a, atol=1e-12)


@pytest.mark.parametrize("side", ["right", "left"])
def test_polar_with_qdwh_options_is_jax_own_qdwh(rng, side):
    """eps or max_iterations given where JAX's solver runs: JAX's QDWH with
    them (one step leaves u far from orthonormal), as jax.scipy.linalg.polar
    from jax 0.12 (0.10's drops max_iterations), rows sharded."""
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, 10, np.float64, 6)
    a = a if side == "right" else a.T

    def reference(a, **options):
        x = a if side == "right" else a.conj().T
        u, h, _, _ = jax.lax.linalg.qdwh(jnp.asarray(x), **options)
        return (u, h) if side == "right" else (u.conj().T, h.conj().T)

    for options in (dict(max_iterations=1), dict(eps=1e-3), dict(eps=1e-3, max_iterations=2)):
        expected = reference(a, **options)
        if jax.__version_info__ >= (0, 12):
            for e, theirs in zip(expected, jax.scipy.linalg.polar(a, side=side, **options)):
                np.testing.assert_allclose(np.asarray(e), np.asarray(theirs), atol=1e-12)
        placed = helpers.rows(a, m)
        for got in (jaxmg.polar(placed, side=side, backend="jax", **options),
                    jax.jit(lambda x: jaxmg.polar(x, side=side, **options))(placed)):
            for g, e in zip(got, expected):
                np.testing.assert_allclose(np.asarray(g), np.asarray(e), atol=1e-12)
            assert got[0].sharding.is_equivalent_to(NamedSharding(m, P("x", None)), 2)


def test_polar_with_qdwh_options_inside_shard_map_solves_each_device_s_matrix(rng):
    """There JAX's QDWH loop does not trace: each device's matrix is
    factored as without the options (converged), as before they counted."""
    m = helpers.mesh(2)
    a = np.stack([helpers.random_matrix(rng, 8, np.float64, 4) for _ in range(2)])
    body = lambda x: jaxmg.polar(x[0], eps=1e-3, max_iterations=1)[0][None]  # noqa: E731
    u = jax.jit(jax.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P("x")))(
        jax.device_put(a, NamedSharding(m, P("x"))))
    for ui, ai in zip(np.asarray(u), a):
        np.testing.assert_allclose(ui, reference_polar(ai, "right")[0], atol=1e-10)

# --------------------------------------------------------------------------
# The QDWH iteration, with jnp.linalg.qr as the QR
# --------------------------------------------------------------------------


def jax_qr(y):
    q, r = jnp.linalg.qr(y)
    return q, r, jnp.int32(0)


def condition_for(dtype):
    return 1e6 if np.finfo(dtype).eps > 1e-10 else 1e12


@pytest.mark.parametrize("shape", [(40, 24), (30, 30)], ids=str)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_qdwh_on_ill_conditioned_matrices(rng, dtype, shape):
    m, n = shape
    s = np.geomspace(1.0, 1 / condition_for(dtype), n)
    a = with_singular_values(rng, m, n, s, dtype)
    u, info = jax.jit(lambda x: polar_mod._qdwh(x, jax_qr))(a)
    assert int(info) == 0 and u.shape == shape and u.dtype == dtype
    u64, a64 = helpers.promote(u), helpers.promote(a)
    h = u64.conj().T @ a64
    tol = helpers.tolerance(dtype, m)
    check_orthonormal(u, True, tol)
    check_hermitian_psd(h, tol)
    assert np.abs(u64 @ ((h + h.conj().T) / 2) - a64).max() <= tol
    # H's eigenvalues are a's singular values.
    w = np.sort(np.linalg.eigvalsh((h + h.conj().T) / 2))[::-1]
    assert np.abs(w - s).max() <= tol


@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_qdwh_matches_the_polar_factor(rng, dtype):
    a = helpers.random_matrix(rng, 20, dtype, 11)
    u, _ = jax.jit(lambda x: polar_mod._qdwh(x, jax_qr))(a)
    u_ref, _ = reference_polar(a, "right")
    cond = np.linalg.cond(helpers.promote(a))
    assert np.abs(helpers.promote(u) - u_ref).max() <= helpers.tolerance(dtype, 20, cond)


@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_qdwh_steps_bring_every_singular_value_to_one(dtype):
    eps = float(np.finfo(dtype).eps)
    l0 = polar_mod._lower_bound(eps)
    steps = polar_mod._weights(l0, eps)
    assert l0 <= eps and len(steps) <= 6
    # A step on one singular value x: the QR of [root x; 1] has q1 q2 = root x / (root^2 x^2 + 1).
    x = np.geomspace(l0, 1.0, 2000)
    for keep, mix, root in steps:
        x = keep * x + mix * root * x / (root * root * x * x + 1)
    assert np.abs(x - 1).max() <= 10 * eps


def test_qdwh_passes_on_the_first_failing_qr():
    calls = []

    def failing_qr(y):
        q, r, _ = jax_qr(y)
        calls.append(None)
        return q, r, jnp.int32(5)

    _, info = jax.jit(lambda x: polar_mod._qdwh(x, failing_qr))(jnp.eye(4, 3))
    assert int(info) == 5 and calls


def test_qdwh_of_zero_is_finite():
    u, info = jax.jit(lambda x: polar_mod._qdwh(x, jax_qr))(jnp.zeros((5, 3)))
    assert int(info) == 0 and np.isfinite(np.asarray(u)).all()


# --------------------------------------------------------------------------
# The mp engine's polar and SVD, with JAX's QR and eigh standing in for
# cuSOLVERMp's (mp.check refuses CPU, so the engine is chosen directly)
# --------------------------------------------------------------------------


def fake_eigh(h, *, layout, vectors, info=0):
    w, v = jnp.linalg.eigh(sharding.constrain(h, layout.placement, P()))
    return w, (v if vectors else None), jnp.int32(info)


@pytest.fixture
def fake_mp(monkeypatch):
    qr_info = {"value": 0}

    def fake_qr(y, placement):
        if sharding.is_explicit(placement):
            assert jax.typeof(y).sharding.spec == P("x", None), "the stacked matrix is row-sharded"
        q, r = jnp.linalg.qr(sharding.constrain(y, placement, P()))
        return q, r, jnp.int32(qr_info["value"])

    monkeypatch.setattr(mp, "qr", fake_qr)
    monkeypatch.setattr(eigh_mod, "run", fake_eigh)
    return qr_info


def mp_engine(jitted, a, mesh, **static):
    """Runs polar's / svd's jitted body with engine "mp" (a fresh trace each time)."""
    placement = resolve_placement(a, mesh, P("x", None))
    body = functools.partial(jitted.__wrapped__, placement=placement, engine=mp.ENGINE, **static)
    return jax.jit(body)(a)


@pytest.mark.parametrize("shape", [TALL, SQUARE, WIDE, (9, 4)], ids=str)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_mp_svd_assembly(rng, fake_mp, dtype, shape):
    m = helpers.mesh(2)
    cond = 1e3
    s = np.geomspace(1.0, 1 / cond, min(shape))
    a = with_singular_values(rng, *shape, s, dtype)
    u, got_s, vh, info = mp_engine(polar_mod._svd, helpers.put_rows(a, m), m, compute_uv=True, full=False)
    assert int(info) == 0
    check_svd(a, u, got_s, vh, dtype)
    _, s_only, _, _ = mp_engine(polar_mod._svd, helpers.put_rows(a, m), m, compute_uv=False, full=False)
    assert np.abs(np.asarray(s_only) - s).max() <= helpers.tolerance(dtype, max(shape))


@pytest.mark.parametrize("side, shape", [("right", TALL), ("left", SQUARE), ("left", WIDE)],
                         ids=str)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_mp_polar_assembly(rng, fake_mp, dtype, side, shape):
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, shape[0], dtype, shape[1])
    u, p, info = mp_engine(polar_mod._polar, helpers.put_rows(a, m), m, side=side)
    assert int(info) == 0
    k = shape[1] if side == "right" else shape[0]
    assert u.shape == shape and p.shape == (k, k)
    u_ref, p_ref = reference_polar(a, side)
    cond = np.linalg.cond(helpers.promote(a))
    tol = helpers.tolerance(dtype, max(shape), cond)
    assert np.abs(helpers.promote(u) - u_ref).max() <= tol
    assert np.abs(helpers.promote(p) - p_ref).max() <= tol * np.abs(p_ref).max()
    check_hermitian_psd(p, helpers.tolerance(dtype, max(shape)))


@pytest.mark.parametrize("shape", [(9, 4), (4, 9), (10, 10)], ids=str)
def test_mp_engine_on_a_mesh_of_auto_axes(rng, fake_mp, shape):
    m = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                      devices=helpers.devices(2))
    a = helpers.random_matrix(rng, shape[0], np.complex128, shape[1])
    u, s, vh, info = mp_engine(polar_mod._svd, helpers.put_rows(a, m), m, compute_uv=True, full=False)
    assert int(info) == 0
    check_svd(a, u, s, vh, np.complex128)
    side = "right" if shape[0] >= shape[1] else "left"
    u, p, _ = mp_engine(polar_mod._polar, helpers.put_rows(a, m), m, side=side)
    u_ref, p_ref = reference_polar(a, side)
    assert np.abs(np.asarray(u) - u_ref).max() < 1e-10
    assert np.abs(np.asarray(p) - p_ref).max() < 1e-10


def test_mp_failure_gives_nan_and_info(rng, fake_mp, monkeypatch):
    m = helpers.mesh(2)
    a = helpers.rows(helpers.random_matrix(rng, 8, np.float64, 4), m)
    fake_mp["value"] = 3
    u, p, info = mp_engine(polar_mod._polar, a, m, side="right")
    assert int(info) == 3 and np.isnan(np.asarray(u)).all() and np.isnan(np.asarray(p)).all()
    fake_mp["value"] = 0
    monkeypatch.setattr(eigh_mod, "run", functools.partial(fake_eigh, info=7))
    u, s, vh, info = mp_engine(polar_mod._svd, a, m, compute_uv=True, full=False)
    assert int(info) == 7
    assert all(np.isnan(np.asarray(x)).all() for x in (u, s, vh))


# --------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------


def test_refusals_name_the_argument_and_the_fix():
    m = helpers.mesh(2)
    tall = helpers.rows(np.ones((6, 4)), m)
    wide = helpers.rows(np.ones((4, 6)), m)
    with pytest.raises(ValueError, match="side='right'.*M >= N.*use side='left'"):
        jaxmg.polar(wide)
    with pytest.raises(ValueError, match="side='left'.*M <= N.*use side='right'"):
        jaxmg.polar(tall, side="left")
    with pytest.raises(ValueError, match="side in"):
        jaxmg.polar(tall, side="top")
    with pytest.raises(ValueError, match="backend in"):
        jaxmg.svd(tall, backend="jaxmg")
    with pytest.raises(ValueError, match="backend in"):
        jaxmg.polar(tall, backend="lapack")
    with pytest.raises(ValueError, match="2-D"):
        jaxmg.svd(jnp.ones(4))
    with pytest.raises(TypeError, match="cast it first"):
        jaxmg.polar(jnp.ones((4, 4), jnp.float16))


@pytest.mark.parametrize("call", [
    lambda a: jaxmg.svd(a, backend="mp"),
    lambda a: jaxmg.svd(a, compute_uv=False, backend="mp"),
    lambda a: jaxmg.polar(a, backend="mp"),
])
def test_mp_on_cpu_is_refused_with_the_alternative(call):
    m = helpers.mesh(2)
    with pytest.raises(ValueError, match="backend='mp'.*runs cuSOLVERMp on CUDA GPUs.*'jax'"):
        call(helpers.rows(np.eye(8), m))


def test_auto_is_jax_on_cpu(rng):
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, 8, np.float64, 4)
    s = jaxmg.svd(helpers.rows(a, m), compute_uv=False)
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), rtol=1e-12)


# ---- jax.scipy.linalg.polar's signature ----


def test_polar_takes_side_positionally_and_method_svd():
    """polar(a, side, *, method, eps, max_iterations) as jax.scipy.linalg.polar."""
    jsl = jax.scipy.linalg
    a = jnp.asarray(np.random.default_rng(3).standard_normal((3, 5)))
    for got, want in ((jaxmg.polar(a, "left"), jsl.polar(a, "left")),
                      (jaxmg.polar(a.T, method="svd"), jsl.polar(a.T, method="svd")),
                      # (JAX 0.10.2's own polar fails when given eps)
                      (jaxmg.polar(a.T, "right", method="qdwh", eps=1e-12, max_iterations=20),
                       jsl.polar(a.T, "right", method="qdwh", max_iterations=20))):
        for g, w in zip(got, want):
            assert np.shape(g) == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-8)
    with pytest.raises(ValueError, match="method"):
        jaxmg.polar(a.T, method="newton")


@pytest.mark.parametrize("side, shape", [("right", WIDE), ("left", TALL)], ids=str)
def test_polar_by_svd_takes_either_side_of_any_shape(rng, side, shape):
    """method="svd" factors a wide matrix on the right and a tall one on the
    left, as jax.scipy.linalg.polar does; QDWH there is refused in JAX's
    NotImplementedError (and jaxmg's ValueError), naming method="svd"."""
    a = helpers.random_matrix(rng, shape[0], np.float64, shape[1])
    u, p = jaxmg.polar(a, side, method="svd")
    want_u, want_p = jax.scipy.linalg.polar(a, side, method="svd")
    k = shape[1] if side == "right" else shape[0]
    assert u.shape == shape and p.shape == (k, k)
    np.testing.assert_allclose(np.asarray(u), np.asarray(want_u), atol=1e-12)
    np.testing.assert_allclose(np.asarray(p), np.asarray(want_p), atol=1e-12)
    got = np.asarray(u) @ np.asarray(p) if side == "right" else np.asarray(p) @ np.asarray(u)
    np.testing.assert_allclose(got, a, atol=1e-12)
    m = helpers.mesh(2)
    sharded_u, sharded_p = jaxmg.polar(helpers.put_rows(a, m), side, method="svd",
                                       **helpers.solve_kwargs(a, m))
    np.testing.assert_allclose(np.asarray(sharded_u), np.asarray(want_u), atol=1e-12)
    np.testing.assert_allclose(np.asarray(sharded_p), np.asarray(want_p), atol=1e-12)
    for error in (NotImplementedError, ValueError):
        with pytest.raises(error, match="method='svd'"):
            jaxmg.polar(a, side)
