"""Matrices, meshes and tolerances shared by the tests."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.extend.core import jaxprs_in_params
from jax.sharding import NamedSharding, PartitionSpec as P
from scipy.linalg import lapack

import jaxmg

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def devices(count: int) -> list:
    """The first `count` devices; a test needing more than there are fails, or
    skips on GPU runs of the CPU suites (tools/gpu_check), which have only the
    GPUs there are."""
    present = jax.devices()
    if len(present) < count:
        message = f"needs {count} devices, {len(present)} present"
        if os.environ.get("JAXMG_TEST_ALLOW_FEWER_DEVICES"):
            import pytest

            pytest.skip(message)
        raise AssertionError(message)
    return present[:count]


def mesh(n_devices: int, axis: str = "x", first: int = 0):
    """A 1-D mesh over devices [first, first + n_devices)."""
    return jax.make_mesh((n_devices,), (axis,), devices=devices(first + n_devices)[first:])


def random_matrix(rng, n: int, dtype, m: int | None = None) -> np.ndarray:
    m = n if m is None else m
    x = rng.standard_normal((n, m))
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal((n, m))
    return x.astype(dtype)


def spd(rng, n: int, dtype, condition: float = 10.0) -> np.ndarray:
    """A symmetric/Hermitian positive-definite matrix with the given condition
    number (eigenvalues spread geometrically), exactly symmetric."""
    return with_eigenvalues(rng, np.geomspace(1.0, condition, n) if n > 1 else np.ones(1), dtype)


def with_eigenvalues(rng, w, dtype) -> np.ndarray:
    """A symmetric/Hermitian matrix with the eigenvalues w (up to rounding)
    and random eigenvectors, exactly symmetric."""
    n = len(w)
    q, _ = np.linalg.qr(
        random_matrix(rng, n, np.complex128 if np.iscomplexobj(dtype(0)) else np.float64)
    )
    a = (q * np.asarray(w, dtype=np.float64)) @ q.conj().T
    return ((a + a.conj().T) / 2).astype(dtype)


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


def replicated(x, mesh_):
    """x placed whole on every device of the mesh."""
    return jax.device_put(jnp.asarray(x), NamedSharding(mesh_, P()))


def rows(x, mesh_, axis: str = "x"):
    """x row-sharded over the mesh (its rows must divide over the devices)."""
    spec = P(axis, *([None] * (np.ndim(x) - 1)))
    return jax.device_put(jnp.asarray(x), NamedSharding(mesh_, spec))


def promote(x) -> np.ndarray:
    """x as a float64/complex128 NumPy array, for reference arithmetic."""
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def residual(a, x, b) -> float:
    """||A X - B|| / ||B|| in double precision."""
    a, x, b = promote(a), promote(x), promote(b)
    return float(np.linalg.norm(a @ x - b) / np.linalg.norm(b))


def inverse_error(a, inv) -> float:
    """||inv A - I|| (A well scaled: its eigenvalues lie in [1, condition])."""
    a, inv = promote(a), promote(inv)
    return float(np.linalg.norm(inv @ a - np.eye(a.shape[0])))


def lapack_potrf_info(a) -> int:
    """The info LAPACK's potrf (of a's own precision, upper triangle) reports
    for a: 0, or the order of the first leading minor that is not positive
    definite."""
    a = np.asarray(a)
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    _, info = potrf(a, lower=False)
    return int(info)


def run_python(code: str, *, devices: int = 2, timeout: float = 120, env: dict | None = None):
    """Runs `code` in a fresh interpreter on `devices` host CPU devices, with
    jaxmg and these helpers importable; returns the CompletedProcess (raises
    subprocess.TimeoutExpired if it does not finish in time)."""
    # Not resolved: under Bazel these are the runfiles copies (with the library).
    paths = [str(pathlib.Path(jaxmg.__file__).parents[1]), str(pathlib.Path(__file__).parent)]
    full_env = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "PYTHONPATH")}
    full_env.update(
        PYTHONPATH=os.pathsep.join(paths),
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
    )
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout
    )


def ffi_targets(closed_jaxpr) -> list[str]:
    """The FFI targets a closed jaxpr calls, nested jaxprs included, one per call."""
    found = []

    def walk(jx):
        for eqn in jx.eqns:
            if "target_name" in eqn.params:
                found.append(str(eqn.params["target_name"]))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(closed_jaxpr.jaxpr)
    return found


def dot_precisions(jaxpr, found=None) -> list:
    """The precision of every dot_general in a jaxpr, its inner jaxprs included."""
    found = [] if found is None else found
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for inner in jaxprs_in_params(eqn.params):
            dot_precisions(inner, found)
    return found


@contextlib.contextmanager
def compiled_programs():
    """A list that holds one entry per program XLA compiles inside the block."""
    compiled = []

    def listen(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield compiled
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
