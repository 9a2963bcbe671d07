"""polar and svd on the cuSOLVERMp engine (backend="mp"): QDWH iterations of
cuSOLVERMp QRs, then cuSOLVERMp's eigh of the Hermitian factor, on a one-GPU
mesh and, where the machine has two GPUs, on a two-rank mesh."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxmg

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
RANKS = [1, 2] if len(jax.devices()) >= 2 else [1]
SHAPES = [(400, 256), (256, 256), (256, 384)]
pytestmark = pytest.mark.usefixtures("cusolvermp")


def _mesh(ranks):
    return jax.make_mesh((ranks,), ("x",), devices=jax.devices()[:ranks])


def _tol(dtype, n):
    return 50 * n * float(np.finfo(dtype).eps)


def _wide(dtype):
    return np.complex128 if np.iscomplexobj(np.zeros(1, dtype)) else np.float64


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.iscomplexobj(np.zeros(1, dtype)):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _with_singular_values(rng, shape, s, dtype):
    m, n = shape
    w = np.linalg.qr(_random(rng, (m, len(s)), _wide(dtype)))[0]
    v = np.linalg.qr(_random(rng, (n, len(s)), _wide(dtype)))[0]
    return ((w * s) @ v.conj().T).astype(dtype)


def _rows(x, mesh):
    if x.shape[0] % mesh.size == 0:
        return jax.device_put(x, NamedSharding(mesh, P("x", None))), {}
    return jax.device_put(x, NamedSharding(mesh, P())), {"mesh": mesh, "spec": P("x", None)}


def _orthonormality(u, cols=True):
    u = np.asarray(u).astype(np.complex128)
    g = u.conj().T @ u if cols else u @ u.conj().T
    return np.abs(g - np.eye(g.shape[0])).max()


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_svd(ranks, dtype, shape):
    mesh, rng = _mesh(ranks), np.random.default_rng(7)
    a = _random(rng, shape, dtype)
    A, kw = _rows(a, mesh)
    u, s, vh, info = jaxmg.svd(A, full_matrices=False, backend="mp", return_info=True, **kw)
    assert int(info) == 0
    k, tol = min(shape), _tol(dtype, max(shape))
    assert u.shape == (shape[0], k) and s.shape == (k,) and vh.shape == (k, shape[1])
    ref = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    s = np.asarray(s)
    assert np.all(np.diff(s) <= 0)
    assert np.abs(s - ref).max() / ref[0] < tol
    recon = (np.asarray(u).astype(np.complex128) * s) @ np.asarray(vh)
    assert np.abs(recon - a).max() / ref[0] < tol
    assert _orthonormality(u) < tol and _orthonormality(vh, cols=False) < tol
    s_only = jaxmg.svd(A, compute_uv=False, backend="mp", **kw)
    assert np.abs(np.asarray(s_only) - ref).max() / ref[0] < tol


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_polar(ranks, dtype, shape):
    mesh, rng = _mesh(ranks), np.random.default_rng(8)
    a = _random(rng, shape, dtype)
    side = "right" if shape[0] >= shape[1] else "left"
    A, kw = _rows(a, mesh)
    u, p, info = jaxmg.polar(A, side=side, backend="mp", return_info=True, **kw)
    assert int(info) == 0
    w, s, vh = np.linalg.svd(a.astype(np.complex128), full_matrices=False)
    p_ref = (vh.conj().T * s) @ vh if side == "right" else (w * s) @ w.conj().T
    u, p = np.asarray(u).astype(np.complex128), np.asarray(p).astype(np.complex128)
    tol = _tol(dtype, max(shape)) * s[0] / s[-1]
    assert np.abs(u - w @ vh).max() < tol
    assert np.abs(p - p_ref).max() / s[0] < tol
    assert np.abs(p - p.conj().T).max() / s[0] < _tol(dtype, max(shape))
    assert np.abs((u @ p if side == "right" else p @ u) - a).max() / s[0] < _tol(dtype, max(shape))


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_polar_of_an_ill_conditioned_matrix(ranks, dtype):
    mesh, rng, shape = _mesh(ranks), np.random.default_rng(9), (384, 256)
    cond = 1e6 if np.finfo(dtype).eps > 1e-10 else 1e12
    s = np.geomspace(1.0, 1 / cond, shape[1])
    a = _with_singular_values(rng, shape, s, dtype)
    A, kw = _rows(a, mesh)
    u, p = jaxmg.polar(A, backend="mp", **kw)
    tol = _tol(dtype, shape[0])
    u, p = np.asarray(u).astype(np.complex128), np.asarray(p).astype(np.complex128)
    assert _orthonormality(u) < tol
    assert np.abs(u @ p - a).max() < tol
    assert np.linalg.eigvalsh((p + p.conj().T) / 2).min() > -tol


def test_auto_on_two_gpus_matches_numpy():
    if len(jax.devices()) < 2:
        pytest.skip("needs two GPUs: auto picks 'jax' on one")
    rng = np.random.default_rng(10)
    a = _random(rng, (300, 256), np.float64)
    u, s, vh = jaxmg.svd(jax.device_put(a, NamedSharding(_mesh(2), P("x", None))),
                         full_matrices=False)
    assert np.abs(np.asarray(s) - np.linalg.svd(a, compute_uv=False)).max() < 1e-10 * s[0]
    assert np.abs((np.asarray(u) * np.asarray(s)) @ np.asarray(vh) - a).max() < 1e-10 * s[0]
