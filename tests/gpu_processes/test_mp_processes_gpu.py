"""cuSOLVERMp (backend="mp") with one process per GPU: two ranks launched
with `python -m jaxmg.launch`, their NCCL communicator made from an id that
rank 0 publishes through jax.distributed's key-value store. Needs two GPUs:
NCCL refuses two ranks on one GPU."""

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
import numpy as np
import jax, jax.numpy as jnp
import jaxmg, jaxmg.launch
from jax.sharding import NamedSharding, PartitionSpec as P
assert jaxmg.launch.initialize()
jax.config.update("jax_enable_x64", True)
mesh = jax.make_mesh((jax.process_count(),), ("x",))
rng = np.random.default_rng(0)  # the same matrices in every process
failures = []

def put(x, spec):
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda i: x[i])

def check(name, x, want, tol):
    # Replicated results: every rank holds them whole.
    got = np.asarray(x.addressable_shards[0].data)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    print(f"{name}: {err:.3g}", flush=True)
    if not err < tol:
        failures.append(f"{name}: {err:.3g}")

for dtype in (np.float64, np.complex64):
    tol = 5e4 * np.finfo(dtype).eps
    n = 512
    m = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if dtype == np.complex64 else 0)
    a = (m @ m.conj().T / n + np.eye(n)).astype(dtype)
    b = rng.standard_normal((n, 2)).astype(dtype)
    A = put(a, P("x", None))
    x = jaxmg.potrs(A, put(b, P()), backend="mp")
    check(f"potrs {dtype.__name__}", x, np.linalg.solve(a, b), tol)
    w = jaxmg.eigvalsh(A, backend="mp")
    check(f"eigvalsh {dtype.__name__}", w, np.linalg.eigvalsh(a), tol)
    t = rng.standard_normal((600, n)).astype(dtype)
    xl = jaxmg.lstsq(put(t, P("x", None)), put(b[:1].repeat(600, 0)[:, :1], P()), backend="mp")[0]
    check(f"lstsq {dtype.__name__}", xl, np.linalg.lstsq(t, b[:1].repeat(600, 0)[:, :1], rcond=None)[0], tol)
print("FAILURES" if failures else "ALL OK", failures, flush=True)
import os
os._exit(1 if failures else 0)
"""


@pytest.mark.skipif(GPUS < 2, reason="NCCL needs a GPU per rank: two GPUs")
def test_mp_one_process_per_gpu(tmp_path):
    logs = pathlib.Path(os.environ.get("JAXMG_TEST_LOGS", tmp_path))
    logs.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = dict(os.environ, PYTHONPATH=str(JAXMG_PATH), PYTHONUNBUFFERED="1")
    with open(logs / "mp_0_1.out", "w") as out, open(logs / "mp_0_1.err", "w") as err:
        code = subprocess.run(
            [sys.executable, "-m", "jaxmg.launch", "-n", "2", "--gpus", "0,1", "--timeout", "200",
             str(script)],
            env=env, stdout=out, stderr=err, timeout=230, cwd=tmp_path,
        ).returncode
    text = (logs / "mp_0_1.out").read_text()
    print(text[-3000:])
    if code != 0:
        print("\n".join((logs / "mp_0_1.err").read_text().splitlines()[-40:]))
    assert code == 0
    for rank in range(2):
        assert f"[rank {rank}] ALL OK" in text
