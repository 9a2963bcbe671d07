"""The mp engine's Python side (padding, the cyclic layout, right-hand sides
and pivots on the grid's rows, results back in JAX's layout) on forced CPU
devices, with the cuSOLVERMp calls replaced by a model of their contract
(tests/mp_model.py): 1-D meshes and 2-D grids, orders no block divides."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg
import mp_model
from jaxmg._src.engines import mp

MESHES = ["1", "2", "4", "1x2", "2x1", "2x2", "2x4"]
_REAL_CALL = mp.call


@pytest.fixture(autouse=True)
def modelled_cusolvermp(monkeypatch):
    monkeypatch.setattr(mp, "call", mp_model.fake_call)
    monkeypatch.setattr(mp, "check", lambda *args, **kwargs: None)
    monkeypatch.setattr(mp, "version", lambda: 901)


def _mesh(kind):
    if "x" in kind:
        shape = tuple(map(int, kind.split("x")))
        names = ("r", "c", "d")[: len(shape)]
        return jax.make_mesh(shape, names, devices=helpers.devices(int(np.prod(shape))))
    return jax.make_mesh((int(kind),), ("x",), devices=helpers.devices(int(kind)))


def _put(x, mesh):
    names = mesh.axis_names
    spec = P("x", None) if len(names) == 1 else P(names[0], names[1:] if len(names) > 2 else names[1])
    if all(x.shape[d] % mesh.shape[ax] == 0 for d, ax in enumerate(spec) if ax is not None):
        return jax.device_put(x, NamedSharding(mesh, spec)), {}
    return jax.device_put(x, NamedSharding(mesh, P())), {"mesh": mesh, "spec": spec}


def _err(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return np.abs(got - want).max() / max(1.0, np.abs(want).max())


# Each mesh with a real order its tiles do not divide and a complex one they
# do, and the other way round on every other mesh.
@pytest.mark.parametrize("kind, dtype, n", [
    *((k, d, n) for i, k in enumerate(MESHES)
      for d, n in (((np.float64, 37), (np.complex128, 64)) if i % 2 else
                   ((np.float64, 64), (np.complex128, 37)))),
    ("2x2x2", np.complex128, 37),  # a grid's columns over two mesh axes
])
def test_cholesky_lu_and_eigen(kind, dtype, n):
    mesh, rng = _mesh(kind), np.random.default_rng(n)
    a = helpers.spd(rng, n, dtype)
    g = (helpers.random_matrix(rng, n, dtype) + 3 * np.sqrt(n) * np.eye(n)).astype(dtype)
    g[[0, 5]] = g[[5, 0]]
    b = helpers.random_matrix(rng, n, dtype, 3)
    A, kw = _put(a, mesh)
    G, _ = _put(g, mesh)
    tol = 1e-10
    assert _err(jaxmg.potrs(A, b, backend="mp", tile_size=4, **kw), np.linalg.solve(a, b)) < tol
    f = jaxmg.cho_factor(A, backend="mp", tile_size=4, **kw)
    assert _err(jaxmg.cho_solve(f, b), np.linalg.solve(a, b)) < tol
    assert abs(float(jaxmg.cho_logdet(f)) - np.linalg.slogdet(a)[1]) < tol * n
    assert _err(jaxmg.solve(G, b, backend="mp", tile_size=4, **kw), np.linalg.solve(g, b)) < tol
    sign, logabs = jaxmg.slogdet(G, backend="mp", tile_size=4, **kw)
    ref_sign, ref_logabs = np.linalg.slogdet(g)
    assert abs(float(logabs) - ref_logabs) < tol * n and abs(complex(sign) - ref_sign) < 1e-8
    w, v = jaxmg.eigh(A, backend="mp", tile_size=4, **kw)
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), atol=tol * n)
    v = np.asarray(v)
    assert np.abs(a @ v - v * np.asarray(w)).max() < tol * n


@pytest.mark.parametrize("kind", MESHES)
@pytest.mark.parametrize("shape", [(50, 37), (64, 64)])
def test_qr_and_lstsq(kind, shape):
    mesh, rng = _mesh(kind), np.random.default_rng(7)
    a = helpers.random_matrix(rng, shape[0], np.complex128, shape[1])
    b = helpers.random_matrix(rng, shape[0], np.complex128, 2)
    A, kw = _put(a, mesh)
    q, r = jaxmg.qr(A, backend="mp", **kw)
    q, r = np.asarray(q), np.asarray(r)
    assert q.shape == shape and np.abs(np.tril(r, -1)).max() == 0
    assert _err(q @ r, a) < 1e-12
    x = jaxmg.lstsq(A, b, backend="mp", **kw)[0]
    assert _err(x, np.linalg.lstsq(a, b, rcond=None)[0]) < 1e-10


@pytest.mark.parametrize("kind", ["2", "2x2"])
def test_derivatives(kind):
    mesh, rng = _mesh(kind), np.random.default_rng(9)
    a = helpers.spd(rng, 24, np.float64)
    b = rng.standard_normal((24, 2))
    A, _ = _put(a, mesh)
    with jax.set_mesh(mesh):
        for loss in (lambda x, be: jnp.sum(jaxmg.solve(x, b, backend=be) ** 2),
                     lambda x, be: jnp.sum(jaxmg.potrs(x, b, backend=be) ** 2),
                     lambda x, be: jnp.sum(jaxmg.eigvalsh(x, backend=be) ** 3)):
            assert _err(jax.grad(loss)(A, "mp"), jax.grad(loss)(A, "jax")) < 1e-10


def test_not_positive_definite_gives_nan_and_info():
    mesh = _mesh("2x2")
    bad = np.eye(16)
    bad[7, 7] = -1.0
    x, info = jaxmg.potrs(_put(bad, mesh)[0], np.ones(16), backend="mp", return_info=True)
    assert int(info) > 0 and np.isnan(np.asarray(x)).all()


@pytest.mark.parametrize("kind", ["2", "2x2"])
@pytest.mark.parametrize("shape", [(40, 24), (24, 40)])
def test_svd_and_polar(kind, shape):
    mesh, rng = _mesh(kind), np.random.default_rng(11)
    a = helpers.random_matrix(rng, shape[0], np.complex128, shape[1])
    A, kw = _put(a, mesh)
    u, s, vh = jaxmg.svd(A, full_matrices=False, backend="mp", **kw)
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), rtol=1e-10)
    assert _err(np.asarray(u) * np.asarray(s) @ np.asarray(vh), a) < 1e-10
    side = "right" if shape[0] >= shape[1] else "left"
    up, p = jaxmg.polar(A, side=side, backend="mp", **kw)
    up, p = np.asarray(up), np.asarray(p)
    assert _err(up @ p if side == "right" else p @ up, a) < 1e-10
    assert np.abs(p - p.conj().T).max() < 1e-10


@pytest.mark.parametrize("kind, dtype, shape", [
    ("2", np.float64, (40, 24)),
    ("2x2", np.complex128, (24, 40)),
    ("2x2", np.complex128, (24, 24)),
])
def test_svd_and_polar_derivatives(kind, dtype, shape):
    mesh, rng = _mesh(kind), np.random.default_rng(12)
    a = helpers.random_matrix(rng, shape[0], dtype, shape[1])
    k = min(shape)
    w_s = rng.standard_normal(k)
    w_uv = helpers.random_matrix(rng, shape[0], dtype, shape[1])
    w_h = helpers.random_matrix(rng, max(shape) if shape[0] < shape[1] else shape[1], dtype)
    side = "right" if shape[0] >= shape[1] else "left"
    A, kw = _put(a, mesh)

    def svd_loss(x, backend):
        u, s, vh = jaxmg.svd(x, full_matrices=False, backend=backend, **kw)
        # Gauge-free: the singular values and U V^H.
        return jnp.sum(w_s * s ** 2) + jnp.real(jnp.sum(w_uv * (u @ vh)))

    def polar_loss(x, backend):
        u, p = jaxmg.polar(x, side=side, backend=backend, **kw)
        p_w = w_h[: p.shape[0], : p.shape[1]]
        return jnp.real(jnp.sum(w_uv * u)) + jnp.real(jnp.sum(p_w * p))

    with jax.set_mesh(mesh):
        for loss in (svd_loss, polar_loss):
            got, want = jax.grad(loss)(A, "mp"), jax.grad(loss)(A, "jax")
            assert _err(got, want) < 1e-8, loss.__name__
            tangent = helpers.random_matrix(rng, shape[0], dtype, shape[1])
            t_got = jax.jvp(lambda x: loss(x, "mp"), (A,), (tangent,))[1]
            t_want = jax.jvp(lambda x: loss(x, "jax"), (A,), (tangent,))[1]
            assert abs(float(t_got) - float(t_want)) < 1e-8 * max(1, abs(float(t_want)))


def test_each_rank_asks_for_the_transposed_grid(monkeypatch):
    """The handler reads its block as the transpose's local matrix, so an R x C
    mesh asks cuSOLVERMp for a C x R grid (ranks numbered column-major)."""
    from jaxmg._src.placement import Placement

    seen = []

    def fake_ffi_call(target, results, **kwargs):
        def run(*operands, **attrs):
            grid = attrs["grid"]
            seen.append((target, grid["rows"], grid["cols"], grid["block"]))
            return tuple(jnp.zeros(r.shape, r.dtype) for r in results)

        return run

    monkeypatch.setattr(mp, "call", _REAL_CALL)
    monkeypatch.setattr(mp, "load", lambda: None)
    monkeypatch.setattr(mp, "_group", lambda ids: {})
    monkeypatch.setattr(jax.ffi, "ffi_call", fake_ffi_call)
    mesh = _mesh("2x4")
    placement = Placement(mesh, ("r", "c"), False)
    a = jax.device_put(np.eye(64), NamedSharding(mesh, P(("r", "c"), None)))
    jax.jit(lambda x: mp.potrf(x, placement, 8))(a)
    assert seen and all(s[1:] == (4, 2, 8) for s in seen), seen


@pytest.mark.parametrize("kind", ["2", "2x2"])
@pytest.mark.parametrize("b_rows", [True, False])
def test_inside_shard_map(kind, b_rows):
    mesh, rng = _mesh(kind), np.random.default_rng(13)
    axes = mesh.axis_names
    n = 48
    a = helpers.spd(rng, n, np.complex128)
    b = helpers.random_matrix(rng, n, np.complex128, 2)
    rows = P(axes if len(axes) > 1 else axes[0], None)
    b_spec = rows if b_rows else P()

    def body(a_blk, b_blk):
        kw = dict(backend="mp", mesh=mesh, spec=rows)
        x, info = jaxmg.potrs(a_blk, b_blk, return_info=True, **kw)
        w, vh = jaxmg.syevd(a_blk, **kw)
        return x, info[None], w, vh

    run = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(rows, b_spec),
                                out_specs=(b_spec, P(axes), P(), rows), check_vma=False))
    x, info, w, vh = run(jax.device_put(a, NamedSharding(mesh, rows)),
                         jax.device_put(b, NamedSharding(mesh, b_spec)))
    assert not np.asarray(info).any()
    assert _err(x, np.linalg.solve(a, b)) < 1e-10
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), atol=1e-10)
    v = np.asarray(vh).conj().T
    assert np.abs(a @ v - v * np.asarray(w)).max() < 1e-10



@pytest.mark.parametrize("kind", ["2", "2x2"])
def test_lstsq_derivatives(kind):
    mesh, rng = _mesh(kind), np.random.default_rng(14)
    a = helpers.random_matrix(rng, 40, np.complex128, 24)
    b = helpers.random_matrix(rng, 40, np.complex128, 2)
    w = helpers.random_matrix(rng, 24, np.complex128, 2)
    A, kw = _put(a, mesh)

    def loss(x, y, backend):
        return jnp.real(jnp.sum(w * jaxmg.lstsq(x, y, backend=backend, **kw)[0]))

    with jax.set_mesh(mesh):
        got = jax.grad(loss, argnums=(0, 1))(A, b, "mp")
        want = jax.grad(loss, argnums=(0, 1))(A, b, "jax")
    for g1, g2 in zip(got, want):
        assert _err(g1, g2) < 1e-9
