"""Calls dispatched without waiting on the 8 CPU devices of one process: a
loop of one jaxmg program and a loop of two alternating programs finish with
correct results. Without care they stall: XLA:CPU runs every device's part of
a program on one pool of max(cores, devices) threads, also running there each
device's launch, which blocks while that device has 32 computations in flight;
a jaxmg call needs all its devices' parts running at once, so a launch
blocked behind it starves it of the thread its last device needs.

Each loop runs in a process of its own with two usable cores (the pool then
holds as many threads as devices, as on a small machine), a short jaxmg
timeout (a stalled call fails in seconds instead of minutes) and a wall-clock
limit on the whole process."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import helpers
import jaxmg

CALLS = 300
LIMIT_S = 150
TIMEOUT_S = "5"

PRELUDE = textwrap.dedent("""
    import json, os
    # A small machine: two cores, XLA's default pool size.
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    for name in ("PJRT_NPROC", "NPROC"):
        os.environ.pop(name, None)
    {environment}
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from jax.sharding import PartitionSpec as P
    import helpers, jaxmg

    rng = np.random.default_rng(0)
    mesh = helpers.mesh(8)
    n = 16
    a = helpers.spd(rng, n, np.float64, 10.0)
    b = helpers.random_matrix(rng, n, np.float64, 2)
    h = helpers.hermitian(rng, n, np.float64)
    a_dev, b_dev, h_dev = helpers.rows(a, mesh), helpers.rows(b, mesh), helpers.rows(h, mesh)
    tolerance = helpers.tolerance(np.float64, n, 10.0)

    def errors(outs, check):
        \"\"\"Waits for every result; the worst error relative to the
        tolerance and the messages of the calls that failed.\"\"\"
        worst, failures = 0.0, []
        for out in outs:
            try:
                worst = max(worst, check(out) / tolerance)
            except Exception as e:
                failures.append(str(e).splitlines()[0][:300])
        return {{"calls": len(outs), "worst": worst, "failures": failures[:3],
                 "failed": len(failures)}}

    def solved(x):
        return helpers.residual(a, x, b)

    def decomposed(w_v):
        w, v = np.asarray(w_v[0]), np.asarray(w_v[1])
        scale = np.abs(w).max()
        return max(np.abs(w - np.linalg.eigvalsh(h)).max() / scale,
                   np.linalg.norm(h @ v - v * w) / (np.linalg.norm(h) * scale))
    """)


# XLA's own pool on this small machine, max(2 cores, 8 devices), which jaxmg
# would widen when imported before JAX starts.
XLA_DEFAULT_POOL = 'os.environ["PJRT_NPROC"] = "8"'


def run_loops(body: str, environment: str = XLA_DEFAULT_POOL) -> dict:
    """Runs `body` (which prints `RESULT <name> <json>` lines) after PRELUDE in
    a fresh process on 8 devices; returns the results by name, or fails the
    test naming what did not finish."""
    code = PRELUDE.format(environment=environment) + textwrap.dedent(body)
    try:
        proc = helpers.run_python(
            code, devices=8, timeout=LIMIT_S, env={"JAXMG_TIMEOUT_S": TIMEOUT_S}
        )
        output, finished = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired as e:
        output, finished = _text(e.stdout) + _text(e.stderr), False
    results = {}
    for line in output.splitlines():
        if line.startswith("RESULT "):
            _, name, payload = line.split(" ", 2)
            results[name] = json.loads(payload)
    if not finished:
        pytest.fail(
            f"the loops did not finish within {LIMIT_S} s (finished: {sorted(results)}); "
            f"output: {output[-3000:]}"
        )
    return results


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def check_loop(result: dict, calls: int):
    assert result["failed"] == 0, result
    assert result["calls"] == calls, result
    assert result["worst"] <= 1.0, result


def test_one_program_called_in_a_loop_without_waiting():
    results = run_loops(f"""
        jaxmg.potrs(a_dev, b_dev).block_until_ready()  # compiled, plan kept
        outs = [jaxmg.potrs(a_dev, b_dev) for _ in range({CALLS})]
        print("RESULT potrs " + json.dumps(errors(outs, solved)), flush=True)
        """)
    check_loop(results["potrs"], CALLS)


def test_two_programs_alternating_without_waiting():
    results = run_loops(f"""
        jax.block_until_ready((jaxmg.potrs(a_dev, b_dev), jaxmg.syevd(h_dev)))
        solves, decompositions = [], []
        for _ in range({CALLS}):
            solves.append(jaxmg.potrs(a_dev, b_dev))
            decompositions.append(jaxmg.syevd(h_dev))
        print("RESULT potrs " + json.dumps(errors(solves, solved)), flush=True)
        print("RESULT syevd " + json.dumps(errors(decompositions, decomposed)), flush=True)
        """)
    check_loop(results["potrs"], CALLS)
    check_loop(results["syevd"], CALLS)


def test_jitted_program_in_a_loop_with_the_pool_jaxmg_asks_for():
    """A jitted program holding a jaxmg call is dispatched by JAX alone, so
    jaxmg cannot wait for it; imported before JAX starts its devices, jaxmg
    asks for a pool of two threads per device (PJRT_NPROC, unless set), and
    the un-waited loop finishes."""
    results = run_loops(
        f"""
        assert os.environ["PJRT_NPROC"] == "16", os.environ.get("PJRT_NPROC")
        spec = P("x", None)
        solve = jax.jit(jax.shard_map(
            lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=spec, tile_size=1),
            mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False))
        solve(a_dev, b_dev).block_until_ready()
        outs = [solve(a_dev, b_dev) for _ in range({CALLS})]
        print("RESULT jit " + json.dumps(errors(outs, solved)), flush=True)
        """,
        environment="",
    )
    check_loop(results["jit"], CALLS)


@pytest.mark.parametrize("devices", [2, 8])
def test_eager_call_on_cpu_devices_of_one_process_returns_its_result_ready(rng, devices):
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, 64, np.float64, 10.0)
    b = helpers.random_matrix(rng, 64, np.float64, 3)
    a_dev, b_dev = helpers.rows(a, mesh), helpers.rows(b, mesh)
    for x in (jaxmg.potrs(a_dev, b_dev), jaxmg.solve(a_dev, b_dev, assume_a="pos")):
        assert x.is_ready()
        assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, 64, 10.0)
    factor = jaxmg.cho_factor(a_dev)
    assert all(leaf.is_ready() for leaf in jax.tree_util.tree_leaves(factor))


@pytest.mark.parametrize("value", ["abc", "0", "-4", "2.5"])
def test_a_pool_size_xla_would_ignore_is_warned_of_at_import(value):
    env = dict(os.environ, PJRT_NPROC=value, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(sys.path),
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    run = subprocess.run([sys.executable, "-W", "always", "-c", "import jaxmg"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"PJRT_NPROC={value!r} is not a positive number of threads" in run.stderr, run.stderr
