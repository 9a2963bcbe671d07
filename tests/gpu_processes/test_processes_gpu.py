"""One process per GPU (MPMD) on real GPUs: ranks launched with
`python -m jaxmg.launch`, each owning one device of the mesh; the leader
drives cuSOLVERMg over every rank's buffers through CUDA IPC. Several ranks
may share one GPU (CUDA IPC works between processes on one device, and
cuSOLVERMg takes the repeated id), so this runs on a one-GPU machine too.
Each rank checks its own shards against NumPy: ranks sharing a GPU cannot run
XLA collectives (NCCL refuses two ranks on one GPU)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from conftest import GPUS

# Where this process imports jaxmg from (the installed package, or a checkout on
# PYTHONPATH): the launched ranks import the same one.
JAXMG_PATH = pathlib.Path(importlib.util.find_spec("jaxmg").origin).parents[1]

JOB = """
import os, time
import numpy as np
import jax, jax.numpy as jnp
import jaxmg, jaxmg.launch
from jax.sharding import NamedSharding, PartitionSpec as P
assert jaxmg.launch.initialize()
jax.config.update("jax_enable_x64", True)
from jaxmg._src import processes
rank, n_ranks = jax.process_index(), jax.process_count()
assert jax.devices()[0].platform == "gpu"
mesh = jax.make_mesh((n_ranks,), ("x",))
# A multiple of ranks x 256 (the LU tile on GPUs): padding would move rows
# between devices, an XLA collective that ranks sharing a GPU cannot run.
N = 1024
rng = np.random.default_rng(0)

def put(x, spec):
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda i: x[i])

def local(x, want):
    # This rank's shard of x against the same rows/columns of `want`.
    shard = x.addressable_shards[0]
    return np.asarray(shard.data), np.asarray(want)[shard.index]

failures = []
def check(name, x, want, tol):
    got, ref = local(x, want)
    err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
    if not err < tol:
        failures.append(f"{name}: {err:.3g}")

start = time.perf_counter()
for dtype in [getattr(np, name) for name in os.environ["JOB_DTYPES"].split(",")]:
    print(f"{time.perf_counter() - start:6.1f} s: checking {dtype.__name__}", flush=True)
    tol = 2e4 * np.finfo(dtype).eps
    m = rng.standard_normal((N, N))
    if np.iscomplexobj(np.zeros(1, dtype)):
        m = m + 1j * rng.standard_normal((N, N))
    A = (m @ m.conj().T / N + np.eye(N)).astype(dtype)
    G = (m + 3 * N ** 0.5 * np.eye(N)).astype(dtype)
    B = rng.standard_normal((N, 3)).astype(dtype)
    a, g = put(A, P("x", None)), put(G, P("x", None))
    b_rep, b_rows = put(B, P()), put(B, P("x", None))
    # Forced: at this N "auto" picks JAX's own solver, whose collectives
    # cannot run between ranks that share a GPU.
    kw = dict(backend="jaxmg")
    X = np.linalg.solve(A.astype(np.complex128), B)
    x, info = jaxmg.potrs(a, b_rep, return_info=True, **kw)
    check(f"potrs {dtype.__name__}", x, X, tol)
    if int(np.asarray(info.addressable_shards[0].data).ravel()[0]) != 0:
        failures.append(f"potrs info {dtype.__name__}")
    check(f"solve pos {dtype.__name__}", jaxmg.solve(a, b_rows, assume_a="pos", **kw), X, tol)
    f = jaxmg.cho_factor(a, **kw)
    check(f"cho_solve {dtype.__name__}", jaxmg.cho_solve(f, b_rows), X, tol)
    XG = np.linalg.solve(G.astype(np.complex128), B)
    check(f"solve gen {dtype.__name__}", jaxmg.solve(g, b_rows, **kw), XG, tol)
    lu = jaxmg.lu_factor(g, **kw)
    check(f"lu_solve T {dtype.__name__}", jaxmg.lu_solve(lu, b_rows, trans=1),
          np.linalg.solve(G.T.astype(np.complex128), B), tol)
    check(f"eigvalsh {dtype.__name__}", jaxmg.eigvalsh(a, **kw), np.linalg.eigvalsh(A), tol)
    # V comes column-sharded: this rank holds whole eigenvectors, so it
    # checks A v = w v and |v| = 1 for its own.
    w, v = jaxmg.eigh(a, **kw)
    check(f"eigh values {dtype.__name__}", w, np.linalg.eigvalsh(A), tol)
    shard = v.addressable_shards[0]
    cols, W = np.asarray(shard.data), np.asarray(w.addressable_shards[0].data)[shard.index[1]]
    resid = np.abs(A @ cols - cols * W).max() / np.abs(A).max()
    if not (resid < tol and (np.abs(np.linalg.norm(cols, axis=0) - 1) < tol).all()):
        failures.append(f"eigh vectors {dtype.__name__}: {resid:.3g}")

# Failure: NaN and info on every rank.
bad = put(-np.eye(N), P("x", None))
x = jaxmg.solve(bad, put(np.ones((N, 1)), P("x", None)), assume_a="pos", backend="jaxmg")
if not np.isnan(np.asarray(x.addressable_shards[0].data)).all():
    failures.append("non-SPD: not NaN")
_, info = jaxmg.potrs(bad, put(np.ones((N, 1)), P()), return_info=True, backend="jaxmg")
if int(np.asarray(info.addressable_shards[0].data).ravel()[0]) != 1:
    failures.append("non-SPD: info is not 1 on this rank")

# Repeated calls: no growth in file descriptors, channel state or GPU memory.
a, b = put(np.eye(N) * 2, P("x", None)), put(np.ones((N, 1)), P())
step = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=P("x", None), backend="jaxmg"))
step(a, b).block_until_ready()
fds = len(os.listdir("/proc/self/fd"))
used = (jax.local_devices()[0].memory_stats() or {}).get("bytes_in_use", 0)
t = time.perf_counter()
for _ in range(300):
    x = step(a, b)
x.block_until_ready()
per_call = (time.perf_counter() - t) / 300
stats = processes.stats()
if len(os.listdir("/proc/self/fd")) != fds or stats["pending"] != 0:
    failures.append(f"leak: fds {fds} -> {len(os.listdir('/proc/self/fd'))}, {stats}")
if (jax.local_devices()[0].memory_stats() or {}).get("bytes_in_use", 0) > used:
    failures.append("GPU memory grew over 300 calls")
print(f"per-call ms {per_call * 1e3:.3f} N={N}", flush=True)
print("FAILURES" if failures else "ALL OK", failures, flush=True)
os._exit(1 if failures else 0)
"""


def launch(tmp_path, gpus: str, dtypes: str, logs: pathlib.Path, timeout: float = 240):
    """Runs the job; its output goes straight to files in `logs`, so a run
    cut short still leaves what it printed."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = dict(os.environ, PYTHONPATH=str(JAXMG_PATH), PYTHONUNBUFFERED="1", JOB_DTYPES=dtypes)
    n = len(gpus.split(","))
    name = logs / ("processes_gpus_" + gpus.replace(",", "_"))
    with open(f"{name}.out", "w") as out, open(f"{name}.err", "w") as err:
        code = subprocess.run(
            [sys.executable, "-m", "jaxmg.launch", "-n", str(n), "--gpus", gpus,
             "--timeout", str(timeout), str(script)],
            env=env, stdout=out, stderr=err, timeout=timeout + 30, cwd=tmp_path,
        ).returncode
    return code, pathlib.Path(f"{name}.out").read_text(), pathlib.Path(f"{name}.err").read_text()


# Every dtype at least once, on one GPU alone too; a job spends most of its
# time compiling every routine per dtype, so each case takes one or two.
CASES = [("0,0", "float32,complex128"), ("0,0,0,0", "float64")]
if GPUS >= 2:
    CASES += [("0,1", "complex64,float64"), ("1,0", "float32")]


@pytest.mark.parametrize("gpus, dtypes", CASES)
def test_one_process_per_device(tmp_path, gpus, dtypes):
    logs = pathlib.Path(os.environ.get("JAXMG_TEST_LOGS", tmp_path))
    logs.mkdir(parents=True, exist_ok=True)
    code, out, err = launch(tmp_path, gpus, dtypes, logs)
    print(out[-3000:])
    if code != 0:
        errors = [line for line in err.splitlines() if "Error" in line or "jaxmg" in line]
        print("\n".join(errors[-30:]))
    assert code == 0, f"see the logs in {logs}"
    for rank in range(len(gpus.split(","))):
        assert f"[rank {rank}] ALL OK" in out
