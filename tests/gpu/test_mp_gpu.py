"""The cuSOLVERMp engine (backend="mp") on real GPUs, one process: every
routine it serves and every dtype on a one-GPU mesh and, where the machine
has two GPUs, on two ranks (a thread per GPU, NCCL between them) as a 1-D
mesh and as the 2-D meshes 1 x 2 and 2 x 1, whose matrices come in as
P("r", "c") blocks. Orders that no block size divides exercise the padding,
and the default blocks give every rank several (the cyclic layout)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxmg
from jaxmg._src.engines import mp

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
RANKS = ["1", "2", "1x2", "2x1"] if len(jax.devices()) >= 2 else ["1"]
pytestmark = pytest.mark.usefixtures("cusolvermp")


def _mesh(kind):
    if "x" in kind:
        r, c = map(int, kind.split("x"))
        return jax.make_mesh((r, c), ("r", "c"), devices=jax.devices()[: r * c])
    return jax.make_mesh((int(kind),), ("x",), devices=jax.devices()[: int(kind)])


def _spec(mesh):
    return P("r", "c") if len(mesh.axis_names) == 2 else P("x", None)


def _tol(dtype, n):
    return 50 * n * float(np.finfo(dtype).eps)


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.iscomplexobj(np.zeros(1, dtype)):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _spd(rng, n, dtype):
    m = _random(rng, (n, n), np.complex128 if np.iscomplexobj(np.zeros(1, dtype)) else np.float64)
    return (m @ m.conj().T / n + np.eye(n)).astype(dtype)


def _rows(x, mesh):
    """x with its rows sharded (padding rows are added by jaxmg, not here:
    an order the ranks do not divide is passed with mesh and spec)."""
    spec = _spec(mesh)
    if all(x.shape[d] % mesh.shape[ax] == 0 for d, ax in enumerate(spec) if ax is not None):
        return jax.device_put(x, NamedSharding(mesh, spec)), {}
    return jax.device_put(x, NamedSharding(mesh, P())), {"mesh": mesh, "spec": spec}


def _err(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return np.abs(got - want).max() / max(1.0, np.abs(want).max())


def test_version_is_detected():
    v = mp.version()
    assert v >= 800, v
    print("cuSOLVERMp version", v)


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_potrs_and_factor_reuse(ranks, dtype):
    mesh, rng, n = _mesh(ranks), np.random.default_rng(1), 301
    a = _spd(rng, n, dtype)
    b = _random(rng, (n, 3), dtype)
    A, kw = _rows(a, mesh)
    want = np.linalg.solve(a.astype(np.complex128), b)
    x, info = jaxmg.potrs(A, b, backend="mp", return_info=True, **kw)
    assert int(info) == 0
    assert _err(x, want) < _tol(dtype, n)
    assert _err(jaxmg.potrs(A, b[:, 0], backend="mp", **kw), want[:, 0]) < _tol(dtype, n)
    f = jaxmg.cho_factor(A, backend="mp", **kw)
    assert f.layout.engine.name == "mp"
    assert _err(jaxmg.cho_solve(f, b), want) < _tol(dtype, n)
    sign, logdet = np.linalg.slogdet(a.astype(np.complex128))
    assert abs(float(jaxmg.cho_logdet(f)) - logdet.real) < _tol(dtype, n) * n


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_general_and_slogdet(ranks, dtype):
    mesh, rng, n = _mesh(ranks), np.random.default_rng(2), 257
    g = (_random(rng, (n, n), dtype) + 3 * np.sqrt(n) * np.eye(n)).astype(dtype)
    g[[0, 5]] = g[[5, 0]]  # a swap, so the sign has a pivot to count
    b = _random(rng, (n, 2), dtype)
    G, kw = _rows(g, mesh)
    want = np.linalg.solve(g.astype(np.complex128), b)
    assert _err(jaxmg.solve(G, b, backend="mp", **kw), want) < _tol(dtype, n)
    sign, logabs = jaxmg.slogdet(G, backend="mp", **kw)
    ref_sign, ref_logabs = np.linalg.slogdet(g.astype(np.complex128))
    assert abs(float(logabs) - ref_logabs) < _tol(dtype, n) * n
    assert abs(complex(sign) - ref_sign) < 1e-3


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [512, 300])
def test_eigh(ranks, dtype, n):
    mesh, rng = _mesh(ranks), np.random.default_rng(3)
    a = _spd(rng, n, dtype) - 2 * np.eye(n, dtype=dtype)
    A, kw = _rows(a, mesh)
    w, v = jaxmg.eigh(A, backend="mp", **kw)
    ref = np.linalg.eigvalsh(a.astype(np.complex128))
    scale = np.abs(ref).max()
    assert np.abs(np.asarray(w) - ref).max() / scale < _tol(dtype, n)
    v = np.asarray(v).astype(np.complex128)
    resid = np.abs(a @ v - v * np.asarray(w)).max() / scale
    assert resid < _tol(dtype, n)
    assert np.abs(v.conj().T @ v - np.eye(n)).max() < _tol(dtype, n)
    assert np.abs(np.asarray(jaxmg.eigvalsh(A, backend="mp", **kw)) - ref).max() / scale < _tol(dtype, n)


@pytest.mark.parametrize("ranks", RANKS)
def test_not_positive_definite_gives_nan_and_info(ranks):
    mesh, n = _mesh(ranks), 256
    bad = np.eye(n)
    bad[7, 7] = -1.0
    A = jax.device_put(bad, NamedSharding(mesh, _spec(mesh)))
    x, info = jaxmg.potrs(A, np.ones(n), backend="mp", return_info=True)
    assert int(info) == 8
    assert np.isnan(np.asarray(x)).all()


def test_derivatives_through_the_mp_engine():
    mesh, rng, n = _mesh(RANKS[-1]), np.random.default_rng(6), 128
    a, b = _spd(rng, n, np.float64), rng.standard_normal(n)
    A = jax.device_put(a, NamedSharding(mesh, _spec(mesh)))

    def loss(a, backend):
        return jnp.sum(jaxmg.potrs(a, b, backend=backend) ** 2)

    with jax.set_mesh(mesh):
        g_mp = jax.grad(loss)(A, "mp")
        g_jax = jax.grad(loss)(A, "jax")
    assert _err(g_mp, g_jax) < 1e-8


def test_repeated_calls_keep_memory_flat():
    """Two windows of 200 calls: a per-call leak grows in both (XLA's pools
    may settle once, by a few KiB, in the first)."""
    mesh, n = _mesh(RANKS[-1]), 1024
    A = jax.device_put(2 * np.eye(n), NamedSharding(mesh, _spec(mesh)))
    b = jax.device_put(np.ones((n, 1)), NamedSharding(mesh, P()))
    step = jax.jit(lambda a, b: jaxmg.potrs(a, b, backend="mp"))
    used = []
    with jax.set_mesh(mesh):
        for _ in range(3):
            for _ in range(200):
                x = step(A, b)
            x.block_until_ready()
            used.append([d.memory_stats()["bytes_in_use"] for d in mesh.devices.flat])
    assert used[1] == used[2], used
    assert _err(x, np.full((n, 1), 0.5)) < 1e-12


# Last: a rank whose cuSOLVERMp call fails leaves the others waiting in NCCL.
@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_qr(ranks, dtype):
    mesh, rng, (m, n) = _mesh(ranks), np.random.default_rng(5), (400, 301)
    a = _random(rng, (m, n), dtype)
    A, kw = _rows(a, mesh)
    q, r = jaxmg.qr(A, backend="mp", **kw)
    q, r = np.asarray(q), np.asarray(r)
    assert q.shape == (m, n) and r.shape == (n, n)
    assert np.abs(np.tril(r, -1)).max() == 0
    assert np.abs(q.conj().T @ q - np.eye(n)).max() < _tol(dtype, m)
    assert _err(q @ r, a) < _tol(dtype, m)


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lstsq(ranks, dtype):
    mesh, rng, (m, n) = _mesh(ranks), np.random.default_rng(4), (400, 301)
    a, b = _random(rng, (m, n), dtype), _random(rng, (m, 2), dtype)
    A, kw = _rows(a, mesh)
    x, _, _, _, info = jaxmg.lstsq(A, b, backend="mp", return_info=True, **kw)
    assert int(info) == 0
    want = np.linalg.lstsq(a.astype(np.complex128), b, rcond=None)[0]
    assert _err(x, want) < 10 * _tol(dtype, n)
    assert _err(jaxmg.lstsq(A, b[:, 0], **kw)[0], want[:, 0]) < 10 * _tol(dtype, n)  # auto


@pytest.mark.parametrize("ranks", RANKS)
def test_potrs_and_syevd_inside_shard_map(ranks):
    mesh, rng, n = _mesh(ranks), np.random.default_rng(8), 256
    a, b = _spd(rng, n, np.float64), rng.standard_normal((n, 2))
    rows = P(mesh.axis_names if len(mesh.axis_names) > 1 else "x", None)

    def body(a_blk, b_all):
        kw = dict(backend="mp", mesh=mesh, spec=rows)
        x, info = jaxmg.potrs(a_blk, b_all, return_info=True, **kw)
        w, vh = jaxmg.syevd(a_blk, **kw)
        return x, info[None], w, vh

    run = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(rows, P()),
                                out_specs=(P(), P(mesh.axis_names), P(), rows), check_vma=False))
    x, info, w, vh = run(jax.device_put(a, NamedSharding(mesh, rows)), b)
    assert not np.asarray(info).any()
    assert _err(x, np.linalg.solve(a, b)) < _tol(np.float64, n)
    v = np.asarray(vh).T
    assert np.abs(a @ v - v * np.asarray(w)).max() < _tol(np.float64, n) * np.abs(w).max()
