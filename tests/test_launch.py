"""python -m jaxmg.launch: N local processes joined by jax.distributed, output
prefixed by rank, a failing rank stops the job with its status, and a jaxmg
call on a mesh with several devices in each of several processes fails with a
clear message."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import time

import jaxmg

PATHS = os.pathsep.join(
    [str(pathlib.Path(jaxmg.__file__).parents[1]), str(pathlib.Path(__file__).parent)]
)


def launch(tmp_path, body: str, n: int = 2, extra=(), timeout: float = 180):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=PATHS, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    return subprocess.run(
        [sys.executable, "-m", "jaxmg.launch", "-n", str(n), *extra, str(script)],
        env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_ranks_join_one_job(tmp_path):
    result = launch(tmp_path, """
        import jax, jax.numpy as jnp
        import jaxmg.launch
        assert jaxmg.launch.initialize()
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((jax.device_count(),), ("x",))
        n = 2 * jax.device_count()
        x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("x")), lambda i: jnp.arange(n)[i])
        total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
        print("process", jax.process_index(), "of", jax.process_count(), "devices", jax.device_count(),
              "sum", int(total))
        jax.distributed.shutdown()
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank {rank}] process {rank} of 2 devices 4 sum 28" in result.stdout


def test_failing_rank_stops_the_job(tmp_path):
    start = time.monotonic()
    result = launch(tmp_path, """
        import os, sys, time
        if os.environ["JAXMG_PROCESS_ID"] == "1":
            print("rank one fails", flush=True)
            sys.exit(3)
        time.sleep(120)
    """, n=3)
    assert result.returncode == 3
    assert "[rank 1] rank one fails" in result.stdout
    assert "rank 1 exited with status 3" in result.stderr
    assert time.monotonic() - start < 60  # the sleeping ranks were stopped


def test_timeout(tmp_path):
    result = launch(tmp_path, "import time; time.sleep(120)\n", extra=("--timeout", "2"))
    assert result.returncode == 124
    assert "ran past 2 s" in result.stderr


def test_bad_process_count(tmp_path):
    result = launch(tmp_path, "pass\n", n=0)
    assert result.returncode == 2
    assert "-n must be at least 1" in result.stderr


def test_not_launched_is_a_no_op():
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXMG_")}
    env.update(PYTHONPATH=PATHS, JAX_PLATFORMS="cpu")
    code = "import jaxmg.launch; print(jaxmg.launch.initialize())"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_several_devices_per_process_across_processes_is_refused(tmp_path):
    result = launch(tmp_path, """
        import jax, numpy as np
        import jaxmg, jaxmg.launch
        jaxmg.launch.initialize()
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((jax.device_count(),), ("x",))
        n = 8
        a = jax.make_array_from_callback((n, n), NamedSharding(mesh, P("x", None)),
                                         lambda i: np.eye(n, dtype=np.float32)[i])
        try:
            jaxmg.solve(a, np.ones(n, np.float32), assume_a="pos")
        except NotImplementedError as e:
            print("refused:", e)
        local = jax.make_mesh((jax.local_device_count(),), ("x",), devices=jax.local_devices())
        b = jax.device_put(np.eye(n, dtype=np.float32) * 2, NamedSharding(local, P("x", None)))
        print("local solve", round(float(jaxmg.solve(b, np.ones(n, np.float32), assume_a="pos")[0]), 4))
        jax.distributed.shutdown()
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        assert (f"[rank {rank}] refused: jaxmg: the mesh spans processes [0, 1] with several devices "
                "in one process") in result.stdout
        assert f"[rank {rank}] local solve 0.5" in result.stdout


def test_one_gpu_per_process_names_each_rank_its_device(tmp_path):
    result = launch(tmp_path, """
        import os
        print("device", os.environ["JAXMG_LOCAL_DEVICE_IDS"], "rank", os.environ["JAXMG_PROCESS_ID"])
    """, n=3, extra=("--one-gpu-per-process",))
    assert result.returncode == 0, result.stderr[-2000:]
    for rank in range(3):
        assert f"[rank {rank}] device {rank} rank {rank}" in result.stdout


def test_gpus_lets_ranks_share_a_gpu(tmp_path):
    result = launch(tmp_path, """
        import os
        print("device", os.environ["JAXMG_LOCAL_DEVICE_IDS"], "fraction",
              os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "unset"))
    """, n=3, extra=("--gpus", "0,0,1"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[rank 0] device 0 fraction 0.450" in result.stdout
    assert "[rank 1] device 0 fraction 0.450" in result.stdout
    assert "[rank 2] device 1 fraction unset" in result.stdout


def test_gpus_must_name_one_gpu_per_rank(tmp_path):
    result = launch(tmp_path, "pass\n", n=3, extra=("--gpus", "0,1"))
    assert result.returncode == 2
    assert "--gpus names 2 GPUs for 3 processes" in result.stderr
