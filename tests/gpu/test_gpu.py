"""The public API on real GPUs, through XLA: every routine and dtype with
cuSOLVERMg forced (backend="jaxmg") and with the automatic choice, failure
reporting, and memory stability over repeated calls. Residuals are computed
on the device; tolerances scale with eps and N."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxmg

DTYPES = [jnp.float32, jnp.float64, jnp.complex64, jnp.complex128]
SIZES = [1, 7, 100, 1000, 4096]


def meshes():
    gpus = jax.devices()
    out = [("1gpu", [gpus[0]])]
    if len(gpus) >= 2:
        out += [("2gpu", gpus[:2]), ("gpu1-only", [gpus[1]])]
    return out


MESHES = meshes()


def _mesh(devices):
    return jax.make_mesh((len(devices),), ("x",), devices=devices)


def _eps(dtype):
    return float(jnp.finfo(dtype).eps)


@functools.partial(jax.jit, static_argnames=("n", "dtype"))
def _spd(key, n, dtype):
    k1, k2 = jax.random.split(key)
    m = jax.random.normal(k1, (n, n), jnp.float64)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        m = m + 1j * jax.random.normal(k2, (n, n), jnp.float64)
    a = m @ m.conj().T / n + jnp.eye(n)
    return ((a + a.conj().T) / 2).astype(dtype)


def _place(x, mesh):
    rows = x.shape[0] % mesh.size == 0
    sharding = NamedSharding(mesh, P("x", None) if rows else P())
    return jax.device_put(x, sharding), ({} if rows else {"mesh": mesh, "spec": P("x", None)})


def _rel(x):
    return float(jnp.linalg.norm(x))


def _local(x):
    """A result gathered onto one device, for reference arithmetic."""
    return jnp.asarray(np.asarray(x))


@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
@pytest.mark.parametrize("backend", ["jaxmg", "auto"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("n", SIZES)
def test_potrs(n, dtype, backend, mesh_name, devices):
    mesh = _mesh(devices)
    a64 = _spd(jax.random.key(n), n, jnp.complex128 if jnp.dtype(dtype).kind == "c" else jnp.float64)
    b64 = jax.random.normal(jax.random.key(1), (n, 3)).astype(a64.dtype)
    a, kw = _place(a64.astype(dtype), mesh)
    x, info = jaxmg.potrs(a, b64.astype(dtype), backend=backend, tile_size=256, return_info=True, **kw)
    assert int(info) == 0
    x = _local(x).astype(a64.dtype)
    resid = _rel(a64 @ x - b64) / (_rel(a64) * _rel(x))
    assert resid < 50 * _eps(dtype) * max(n, 1) ** 0.5, resid


@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("n", [1, 7, 100, 1000, 4096])
def test_potri(n, dtype, mesh_name, devices):
    mesh = _mesh(devices)
    a64 = _spd(jax.random.key(n + 1), n, jnp.complex128 if jnp.dtype(dtype).kind == "c" else jnp.float64)
    a, kw = _place(a64.astype(dtype), mesh)
    # cuSOLVERMg's potri is wrong across distinct GPUs: jaxmg refuses it there
    # and auto uses JAX's solver.
    backend = "jaxmg" if mesh.size == 1 else "auto"
    if mesh.size > 1:
        with pytest.raises(ValueError, match="potri is disabled on several GPUs"):
            jaxmg.potri(a, backend="jaxmg", **kw)
    inv, info = jaxmg.potri(a, backend=backend, tile_size=256, return_info=True, **kw)
    assert int(info) == 0
    inv = _local(inv).astype(a64.dtype)
    assert _rel(inv - inv.conj().T) <= 10 * _eps(dtype) * _rel(inv)
    assert _rel(inv @ a64 - jnp.eye(n)) / n**0.5 < 200 * _eps(dtype) * n


@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
@pytest.mark.parametrize("vectors", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("n", [1, 7, 100, 1000])
def test_syevd(n, dtype, vectors, mesh_name, devices):
    mesh = _mesh(devices)
    real = jnp.complex128 if jnp.dtype(dtype).kind == "c" else jnp.float64
    m = _spd(jax.random.key(n + 2), n, real) - 1.5 * jnp.eye(n, dtype=real)  # indefinite
    a, kw = _place(m.astype(dtype), mesh)
    out = jaxmg.syevd(a, compute_vectors=vectors, backend="jaxmg", tile_size=128, return_info=True, **kw)
    w, info = (out[0], out[2]) if vectors else out
    w = _local(w)
    assert int(info) == 0
    w_ref = jnp.linalg.eigvalsh(m)
    scale = float(jnp.max(jnp.abs(w_ref)))
    assert float(jnp.max(jnp.abs(w - w_ref))) < 100 * _eps(dtype) * n * scale
    if vectors:
        v = _local(out[1]).astype(real)
        assert _rel(m @ v - v * w.astype(real)) / _rel(m) < 100 * _eps(dtype) * n
        assert _rel(v.conj().T @ v - jnp.eye(n)) < 100 * _eps(dtype) * n


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_potrs_large(dtype):
    n = 16384
    mesh = _mesh(jax.devices())
    a64 = _spd(jax.random.key(3), n, jnp.float64)
    a, kw = _place(a64.astype(dtype), mesh)
    b = jax.random.normal(jax.random.key(4), (n, 1), jnp.float64)
    x, info = jaxmg.potrs(a, b.astype(dtype), backend="jaxmg", tile_size=1024, return_info=True, **kw)
    assert int(info) == 0
    x = _local(x).astype(jnp.float64)
    assert _rel(a64 @ x - b) / (_rel(a64) * _rel(x)) < 50 * _eps(dtype) * n**0.5


@pytest.mark.parametrize("backend", ["jaxmg", "auto"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex128], ids=lambda d: jnp.dtype(d).name)
def test_not_positive_definite(dtype, backend):
    n = 300
    mesh = _mesh(jax.devices()[:1])
    real = jnp.complex128 if jnp.dtype(dtype).kind == "c" else jnp.float64
    m = _spd(jax.random.key(5), n, real)
    m = m.at[200, 200].set(-1000.0)
    a, kw = _place(m.astype(dtype), mesh)
    x, info = jaxmg.potrs(a, jnp.ones((n, 2), dtype), backend=backend, return_info=True, **kw)
    assert bool(jnp.all(jnp.isnan(x)))
    assert int(info) > 0
    if backend == "jaxmg":
        assert int(info) == 201  # LAPACK's convention: order of the failing minor
    inv, info = jaxmg.potri(a, backend=backend, return_info=True, **kw)
    assert bool(jnp.all(jnp.isnan(inv))) and int(info) > 0


def test_repeated_calls_do_not_grow_memory():
    n = 2048
    mesh = _mesh(jax.devices())
    a, _ = _place(_spd(jax.random.key(6), n, jnp.float64), mesh)
    b = jnp.ones((n, 1))
    solve = jax.jit(
        lambda a, b: jaxmg.potrs(a, b, backend="jaxmg", tile_size=256, mesh=mesh, spec=P("x", None))
    )

    def in_use():
        return sum(d.memory_stats()["bytes_in_use"] for d in mesh.devices.flat)

    for _ in range(5):
        solve(a, b).block_until_ready()
    before = in_use()
    for _ in range(200):
        x = solve(a, b)
    x.block_until_ready()
    del x
    assert in_use() - before <= 8 * n  # nothing accumulates per call


def test_inputs_survive_and_donation():
    n = 512
    mesh = _mesh(jax.devices()[:1])
    a, kw = _place(_spd(jax.random.key(7), n, jnp.float32), mesh)
    jaxmg.potrs(a, jnp.ones((n,), jnp.float32), backend="jaxmg", **kw).block_until_ready()
    assert not a.is_deleted()
    jaxmg.potri(a, backend="jaxmg", donate=True, **kw).block_until_ready()
    assert a.is_deleted()


def _general(key, n, dtype):
    """A non-symmetric, well-conditioned matrix with a negative determinant sign mix."""
    k1, k2 = jax.random.split(key)
    m = jax.random.normal(k1, (n, n), jnp.float64)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        m = m + 1j * jax.random.normal(k2, (n, n), jnp.float64)
    return (m / n**0.5 + 3 * jnp.eye(n)).astype(dtype)


@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
@pytest.mark.parametrize("backend", ["jaxmg", "auto"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("n", [1, 7, 100, 1000, 4096])
def test_lu_solve(n, dtype, backend, mesh_name, devices):
    """getrf + getrs for op(A) = A, A^T, A^H; slogdet against numpy."""
    mesh = _mesh(devices)
    wide = jnp.complex128 if jnp.dtype(dtype).kind == "c" else jnp.float64
    a64 = _general(jax.random.key(n + 11), n, wide)
    b64 = jax.random.normal(jax.random.key(2), (n, 3)).astype(wide)
    a, kw = _place(a64.astype(dtype), mesh)
    f = jaxmg.lu_factor(a, backend=backend, tile_size=256, **kw)
    assert int(f.info) == 0
    for trans, op in enumerate([a64, a64.T, a64.conj().T]):
        x = _local(jaxmg.lu_solve(f, b64.astype(dtype), trans=trans)).astype(wide)
        resid = _rel(op @ x - b64) / (_rel(a64) * _rel(x))
        assert resid < 50 * _eps(dtype) * max(n, 1) ** 0.5, (trans, resid)
    sign, logabs = jaxmg.slogdet(a, backend=backend, tile_size=256, **kw)
    sign_ref, logabs_ref = np.linalg.slogdet(np.asarray(a64))
    assert abs(float(logabs) - logabs_ref) < 1e3 * _eps(dtype) * max(n, 1)
    assert abs(complex(sign) - complex(sign_ref)) < 1e3 * _eps(dtype) * max(n, 1)


@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex128], ids=lambda d: jnp.dtype(d).name)
def test_factor_reuse_and_logdet(dtype, mesh_name, devices):
    n = 2000
    mesh = _mesh(devices)
    wide = jnp.complex128 if jnp.dtype(dtype).kind == "c" else jnp.float64
    a64 = _spd(jax.random.key(21), n, wide)
    a, kw = _place(a64.astype(dtype), mesh)
    f = jaxmg.cho_factor(a, backend="jaxmg", tile_size=256, **kw)
    for k in (1, 5, 300):
        b64 = jax.random.normal(jax.random.key(k), (n, k)).astype(wide)
        x = _local(jaxmg.cho_solve(f, b64.astype(dtype))).astype(wide)
        assert _rel(a64 @ x - b64) / (_rel(a64) * _rel(x)) < 50 * _eps(dtype) * n**0.5
    logdet_ref = np.linalg.slogdet(np.asarray(a64))[1]
    assert abs(float(jaxmg.cho_logdet(f)) - logdet_ref) < 1e3 * _eps(dtype) * n


@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
def test_gradients_match_jax(mesh_name, devices):
    """Reverse-mode gradients through the cuSOLVERMg path equal JAX's own."""
    n = 512
    mesh = _mesh(devices)
    a64 = _spd(jax.random.key(31), n, jnp.float64)
    g64 = _general(jax.random.key(32), n, jnp.float64)
    b = jax.random.normal(jax.random.key(33), (n,))
    a, kw = _place(a64, mesh)
    g, _ = _place(g64, mesh)

    def ours(a, g):
        x = jaxmg.solve(a, b, assume_a="pos", backend="jaxmg", tile_size=128, **kw)
        y = jaxmg.solve(g, b, backend="jaxmg", tile_size=128, **kw)
        logdet = jaxmg.slogdet(a, assume_a="pos", backend="jaxmg", tile_size=128, **kw)[1]
        return jnp.sum(x * b) + jnp.sum(y**2) + logdet

    def reference(a, g):
        return (jnp.sum(jnp.linalg.solve(a, b) * b) + jnp.sum(jnp.linalg.solve(g, b) ** 2)
                + jnp.linalg.slogdet(a)[1])

    with jax.set_mesh(mesh):
        da, dg = jax.jit(jax.grad(ours, argnums=(0, 1)))(a, g)
    ra, rg = jax.grad(reference, argnums=(0, 1))(a64, g64)
    assert _rel(_local(da) - ra) < 1e-8 * _rel(ra)
    assert _rel(_local(dg) - rg) < 1e-8 * _rel(rg)


def test_vmap_and_scan():
    n, batch = 256, 3
    mesh = _mesh(jax.devices())
    a64 = jnp.stack([_spd(jax.random.key(40 + i), n, jnp.float64) for i in range(batch)])
    b = jax.random.normal(jax.random.key(44), (batch, n))
    a = jax.device_put(a64, NamedSharding(mesh, P(None, "x", None)))
    solve = functools.partial(jaxmg.potrs, backend="jaxmg", tile_size=64, mesh=mesh, spec=P("x", None))
    with jax.set_mesh(mesh):
        x = jax.jit(jax.vmap(solve))(a, b)
        _, xs = jax.lax.scan(lambda c, ab: (c, solve(*ab)), 0, (a, b))
    for i in range(batch):
        assert _rel(a64[i] @ _local(x[i]) - b[i]) < 1e-10 * _rel(b[i])
        assert _rel(_local(xs[i]) - _local(x[i])) < 1e-12 * _rel(x[i])


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
@pytest.mark.parametrize("mesh_name,devices", MESHES, ids=[m[0] for m in MESHES])
def test_jit_of_sharded_arrays_needs_no_mesh_context(mesh_name, devices, axis_type):
    """Inside the caller's own jit with neither jax.set_mesh nor mesh=, the
    arrays' types name only an abstract mesh (of explicit or Auto axes):
    cuSOLVERMg still runs (its participants exchange their GPUs' numbers
    when they meet), not JAX's solver, and the results are right."""
    from jaxmg._src import library

    n = 1024
    mesh = jax.make_mesh((len(devices),), ("x",), devices=devices,
                         axis_types=(getattr(jax.sharding.AxisType, axis_type),))
    a64 = _spd(jax.random.key(51), n, jnp.float64)
    g64 = _general(jax.random.key(52), n, jnp.float64)
    b64 = jax.random.normal(jax.random.key(53), (n, 2), jnp.float64)
    rows, whole = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P())
    a, g, b = jax.device_put(a64, rows), jax.device_put(g64, rows), jax.device_put(b64, whole)

    def f(a, g, b):
        return (jaxmg.solve(a, b, assume_a="pos", backend="jaxmg", tile_size=128),
                jaxmg.solve(g, b, backend="jaxmg", tile_size=128),
                jaxmg.cho_solve(jaxmg.cho_factor(a, backend="jaxmg", tile_size=128), b),
                jaxmg.eigh(a, backend="jaxmg", tile_size=128),
                jaxmg.solve(a, b, assume_a="pos", precision="mixed"),
                jaxmg.solve(a, b, assume_a="pos"))

    text = jax.jit(f).lower(a, g, b).as_text()
    for routine in ("potrf", "cholsolve", "getrf", "lusolve", "syevd"):
        assert library.target_name("mg", routine, jnp.float64) in text, routine
    x_pos, x_gen, x_fac, (w, v), x_mixed, x_auto = jax.jit(f)(a, g, b)
    a_np, g_np, b_np = np.asarray(a64), np.asarray(g64), np.asarray(b64)
    for x, m in ((x_pos, a_np), (x_gen, g_np), (x_fac, a_np), (x_mixed, a_np), (x_auto, a_np)):
        x = np.asarray(x)
        assert np.linalg.norm(m @ x - b_np) < 1e-10 * np.linalg.norm(m) * np.linalg.norm(x)
    w, v = np.asarray(w), np.asarray(v)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a_np), rtol=1e-10, atol=1e-10)
    assert np.linalg.norm(a_np @ v - v * w) < 1e-9 * np.linalg.norm(a_np)
