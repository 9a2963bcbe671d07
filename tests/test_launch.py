"""python -m jaxmg.launch: N local processes joined by jax.distributed, output
prefixed by rank, a failing rank stops the job with its status (a rank killed
by a signal named as such), the ranks die with the launcher (SIGKILL or
SIGTERM, also when started through a wrapper), and a jaxmg call on a mesh with
several devices in each of several processes fails with a clear message; the ranks autotune alone."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import jaxmg

PATHS = os.pathsep.join(
    [str(pathlib.Path(jaxmg.__file__).parents[1]), str(pathlib.Path(__file__).parent)]
)


def launch(tmp_path, body: str, n: int = 2, extra=(), timeout: float = 180,
           flags="--xla_force_host_platform_device_count=2"):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=PATHS, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
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


@pytest.mark.parametrize("own", ["", " --xla_gpu_shard_autotuning=true"])
def test_ranks_autotune_alone_unless_the_user_says_otherwise(tmp_path, own):
    """XLA:GPU's autotuning shared between processes waits for ever when they
    compile different programs; initialize() turns it off before XLA starts,
    keeping the user's other flags and a setting of their own."""
    result = launch(tmp_path, """
        import os, jax
        import jaxmg.launch
        assert jaxmg.launch.initialize()
        print("flags", os.environ["XLA_FLAGS"], "devices", jax.local_device_count(), flush=True)
        jax.distributed.shutdown()
    """, flags="--xla_force_host_platform_device_count=2" + own)
    assert result.returncode == 0, result.stderr[-3000:]
    want = own.strip() or "--xla_gpu_shard_autotuning=false"
    for rank in (0, 1):
        line = next(l for l in result.stdout.splitlines() if l.startswith(f"[rank {rank}] flags"))
        assert line.split()[3:] == ["--xla_force_host_platform_device_count=2", want, "devices", "2"], line


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


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "soon"])
def test_timeout_must_be_a_positive_number_of_seconds(tmp_path, seconds):
    result = launch(tmp_path, "print('ran')\n", extra=("--timeout", seconds))
    assert result.returncode == 2
    assert "--timeout takes" in result.stderr and "ran" not in result.stdout


def _launch_module(tmp_path, *argv):
    (tmp_path / "job_module.py").write_text("import sys\nprint('module args', sys.argv[1:])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([PATHS, str(tmp_path)]), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "jaxmg.launch", *argv], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv, expected", [
    (("-n", "2", "-m", "job_module", "--flag", "1"), "['--flag', '1']"),
    (("-n", "1", "--timeout", "60", "-m", "job_module"), "[]"),
    (("-n", "1", "--", "-m", "job_module", "x"), "['x']"),
])
def test_a_module_runs_as_with_python_m(tmp_path, argv, expected):
    """-m MODULE among the launcher's options, as `python -m` takes it:
    everything after MODULE is the module's; and without a warning from
    runpy about jaxmg.launch being imported twice."""
    result = _launch_module(tmp_path, *argv)
    assert result.returncode == 0, result.stderr[-2000:]
    ranks = int(argv[1])
    for rank in range(ranks):
        assert f"[rank {rank}] module args {expected}" in result.stdout
    assert "RuntimeWarning" not in result.stderr, result.stderr


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


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # gone while read: ESRCH
        return False
    return state not in ("Z", "X")


def _gone_within(pids, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _env():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=PATHS, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    return env


def _start_sleepers(tmp_path, n: int):
    """A launcher whose n ranks print their pid and sleep; returns it and the pids."""
    script = tmp_path / "sleep.py"
    script.write_text("import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(120)\n")
    launcher = subprocess.Popen([sys.executable, "-m", "jaxmg.launch", "-n", str(n), str(script)],
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    pids = []
    while len(pids) < n:
        line = launcher.stdout.readline()
        assert line, launcher.stderr.read()[-2000:]
        pids.append(int(line.split()[-1]))
    return launcher, pids


def test_ranks_die_with_a_launcher_killed_by_sigkill(tmp_path):
    launcher, pids = _start_sleepers(tmp_path, 2)
    launcher.kill()
    launcher.wait()
    alive = [p for p in pids if not _gone_within([p], 5.0)]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, f"ranks {alive} outlived their launcher"


def test_sigterm_to_the_launcher_stops_its_ranks(tmp_path):
    launcher, pids = _start_sleepers(tmp_path, 2)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
    assert _gone_within(pids, 5.0)


def test_a_rank_started_through_a_wrapper_dies_with_the_launcher(tmp_path):
    # The shell between the launcher and Python gets the kernel's signal; the
    # Python rank below it is ended by initialize()'s watch on the launcher.
    job, log, pid_file = tmp_path / "job.py", tmp_path / "rank.log", tmp_path / "pid"
    job.write_text(textwrap.dedent(f"""
        import os, time
        import jaxmg.launch
        assert jaxmg.launch.initialize()
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(120)
    """))
    wrapper = ["/bin/sh", "-c", f"{sys.executable} {job} 2>>{log}; true"]
    code = f"import sys; from jaxmg import launch; sys.exit(launch.run(1, {wrapper!r}))"
    launcher = subprocess.Popen([sys.executable, "-c", code], env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < until and launcher.poll() is None
        time.sleep(0.05)
    rank = int(pid_file.read_text())
    launcher.kill()
    launcher.wait()
    gone = _gone_within([rank], 5.0)
    if not gone:
        os.kill(rank, signal.SIGKILL)
    assert gone, "the rank outlived its launcher"
    assert f"jaxmg.launch: the launcher (process {launcher.pid}) is gone; rank 0 stops" in \
        log.read_text()


def test_a_rank_killed_by_a_signal_is_named(tmp_path):
    start = time.monotonic()
    result = launch(tmp_path, """
        import os, signal, time
        if os.environ["JAXMG_PROCESS_ID"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
    """)
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 1 was killed by SIGKILL; stopping the other ranks" in result.stderr
    assert time.monotonic() - start < 60


def test_a_line_a_killed_rank_left_open_ends_before_the_launchers_message(tmp_path):
    """stdout and stderr in one pipe (as a log file or a scheduler's output
    would take them): the killed rank's unfinished line and the launcher's
    message naming it are two lines."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        if os.environ["JAXMG_PROCESS_ID"] == "1":
            sys.stdout.write("call 7 o")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
    """))
    result = subprocess.run([sys.executable, "-m", "jaxmg.launch", "-n", "2", str(script)],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=180)
    lines = result.stdout.splitlines()
    assert result.returncode == 128 + signal.SIGKILL
    assert "[rank 1] call 7 o" in lines, lines
    assert "jaxmg.launch: rank 1 was killed by SIGKILL; stopping the other ranks" in lines, lines
