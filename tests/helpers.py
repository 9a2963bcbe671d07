"""Matrices, meshes and tolerances shared by the tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def mesh(n_devices: int, axis: str = "x", first: int = 0):
    """A 1-D mesh over devices [first, first + n_devices)."""
    devices = jax.devices()[first : first + n_devices]
    assert len(devices) == n_devices, f"need {first + n_devices} devices, have {len(jax.devices())}"
    return jax.make_mesh((n_devices,), (axis,), devices=devices)


def random_matrix(rng, n: int, dtype, m: int | None = None) -> np.ndarray:
    m = n if m is None else m
    x = rng.standard_normal((n, m))
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal((n, m))
    return x.astype(dtype)


def spd(rng, n: int, dtype, condition: float = 10.0) -> np.ndarray:
    """A symmetric/Hermitian positive-definite matrix with the given condition
    number (eigenvalues spread geometrically), exactly symmetric."""
    q, _ = np.linalg.qr(random_matrix(rng, n, np.complex128 if np.iscomplexobj(dtype(0)) else np.float64))
    w = np.geomspace(1.0, condition, n) if n > 1 else np.ones(1)
    a = (q * w) @ q.conj().T
    a = (a + a.conj().T) / 2
    return a.astype(dtype)


def hermitian(rng, n: int, dtype) -> np.ndarray:
    """A symmetric/Hermitian (indefinite) matrix."""
    x = random_matrix(rng, n, dtype)
    return ((x + x.conj().T) / 2).astype(dtype)


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def tolerance(dtype, n: int, condition: float = 1.0, factor: float = 30.0) -> float:
    """Relative error bound for a backward-stable solver: a small multiple of
    eps * N * condition."""
    return factor * eps(dtype) * max(n, 1) * condition


def put_rows(x, mesh_, axis: str = "x"):
    """Places x row-sharded when its rows divide over the mesh, replicated
    otherwise (then jaxmg is told the spec explicitly)."""
    n = mesh_.shape[axis]
    spec = P(axis, None) if x.shape[0] % n == 0 else P()
    return jax.device_put(jnp.asarray(x), NamedSharding(mesh_, spec))


def solve_kwargs(x, mesh_, axis: str = "x") -> dict:
    """mesh/spec arguments needed when put_rows had to replicate."""
    n = mesh_.shape[axis]
    return {} if x.shape[0] % n == 0 else {"mesh": mesh_, "spec": P(axis, None)}
