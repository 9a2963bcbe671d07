"""The in-process rendezvous of a call's participants: no leaks over many
calls, concurrent programs from several Python threads, and a clear, quick
error (not a hang) when a participant never arrives.

The timeout tests come last in this file: a meeting that timed out stays
registered until its missing participant arrives (here: never), so
live_meetings() is no longer 0 after them."""

import functools
import gc
import json
import os
import subprocess
import textwrap
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg
from jaxmg._src import layout, library
from jaxmg._src.placement import Placement

CONDITION = 10.0


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def snapshot() -> dict:
    gc.collect()
    return {
        "meetings": library.live_meetings(),
        "threads": len(os.listdir("/proc/self/task")),
        "python_threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")),
        "rss": rss_bytes(),
    }


# ---- (b) Many calls: nothing grows -------------------------------------------


def test_10000_calls_leak_nothing(rng):
    n, mesh = 8, helpers.mesh(2)
    a = helpers.spd(rng, n, np.float64, CONDITION)
    b = helpers.random_matrix(rng, n, np.float64, 2)
    a_dev, b_dev = helpers.rows(a, mesh), helpers.replicated(b, mesh)
    solve = jax.jit(
        lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=P("x", None), tile_size=2, return_info=True)
    )

    def calls(count):
        """`count` calls, asynchronously dispatched; returns the last x and
        the sum of the infos sampled at each synchronisation point."""
        info_sum = 0
        for i in range(count):
            x, info = solve(a_dev, b_dev)
            if i % 200 == 199:  # keep the queue of in-flight calls short
                info_sum += int(info)
        x.block_until_ready()
        return x, info_sum + int(info)

    calls(1000)  # warm-up: compilation, thread pools, allocator
    before = snapshot()
    assert before["meetings"] == 0
    start = time.monotonic()
    x, info_sum = calls(10_000)
    elapsed = time.monotonic() - start
    after = snapshot()

    assert info_sum == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, n, CONDITION)
    assert after["meetings"] == 0, after
    assert after["threads"] <= before["threads"], (before, after)
    assert after["python_threads"] == before["python_threads"], (before, after)
    assert after["fds"] <= before["fds"], (before, after)
    assert after["rss"] - before["rss"] < 50 * 2**20, (before, after)
    assert elapsed < 60, f"10,000 calls took {elapsed:.1f} s"


# ---- (c) Concurrent programs from several Python threads ---------------------

CONCURRENT = textwrap.dedent("""
    import json, threading, time
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from jax.sharding import PartitionSpec as P
    import helpers, jaxmg
    from jaxmg._src import library

    ITERATIONS = {iterations}
    rng = np.random.default_rng(0)
    mesh = helpers.mesh(8)
    spec = P("x", None)
    # Program 1: a float64 solve; program 2: a complex64 inverse. Different
    # shapes, dtypes, tiles and routines: two distinct compiled programs.
    a = helpers.spd(rng, 32, np.float64, 10.0)
    b = helpers.random_matrix(rng, 32, np.float64, 2)
    c = helpers.spd(rng, 24, np.complex64, 10.0)
    solve = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=spec, tile_size=2))
    invert = jax.jit(lambda c: jaxmg.potri(c, mesh=mesh, spec=spec, tile_size=3))
    args = {{"solve": (helpers.rows(a, mesh), helpers.replicated(b, mesh)), "invert": (helpers.rows(c, mesh),)}}
    programs = {{"solve": solve, "invert": invert}}
    for name in programs:
        jax.block_until_ready(programs[name](*args[name]))

    def error(name, out):
        if name == "solve":
            return helpers.residual(a, out, b) / helpers.tolerance(np.float64, 32, 10.0)
        return helpers.inverse_error(c, out) / helpers.tolerance(np.complex64, 24, 10.0)

    report = {{name: {{"done": 0, "worst": 0.0, "errors": []}} for name in programs}}

    def worker(name):
        try:
            # Each thread waits for its call before the next: XLA:CPU cannot
            # hold many multi-device programs in flight at once (it deadlocks
            # the same way with its own psum), see README.
            for _ in range(ITERATIONS):
                out = jax.block_until_ready(programs[name](*args[name]))
                report[name]["worst"] = max(report[name]["worst"], error(name, out))
                report[name]["done"] += 1
        except Exception as e:
            report[name]["errors"].append(repr(e)[:500])

    threads = [threading.Thread(target=worker, args=(name,)) for name in programs]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["seconds"] = time.monotonic() - start
    report["meetings"] = library.live_meetings()
    print("REPORT " + json.dumps(report))
    """)


def test_two_programs_from_two_threads():
    """Two different jitted programs, each called many times from its own
    Python thread onto the same 8 devices, run side by side: both finish, all
    results correct. Run in a process of its own: if the participants of the
    two programs wait for each other, that process hangs (until the
    rendezvous timeout) and is killed, not this one."""
    iterations = 100
    limit_s = 60
    try:
        proc = helpers.run_python(
            CONCURRENT.format(iterations=iterations),
            devices=8,
            timeout=limit_s,
            env={"JAXMG_TIMEOUT_S": "20"},
        )
    except subprocess.TimeoutExpired as e:
        proc, output = None, (e.stdout or "") + (e.stderr or "")
    if proc is None:
        pytest.fail(
            f"deadlock: {iterations} calls each of two jaxmg programs dispatched from two threads "
            f"did not finish within {limit_s} s (one call alone takes well under a millisecond)"
            + (f"; output: {output}" if output else "")
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    report = json.loads(lines[-1][len("REPORT ") :])
    for name in ("solve", "invert"):
        assert report[name]["errors"] == [], report
        assert report[name]["done"] == iterations, report
        assert report[name]["worst"] <= 1.0, report
    assert report["meetings"] == 0, report


def test_same_mesh_sequential_programs_interleaved(rng):
    """Several different programs alternating on one thread (async dispatch):
    each call meets its own participants."""
    mesh = helpers.mesh(3)
    spec = P("x", None)
    a = helpers.spd(rng, 12, np.complex128, CONDITION)
    b = helpers.random_matrix(rng, 12, np.complex128, 1)
    h = helpers.hermitian(rng, 12, np.complex128)
    programs = [
        jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=spec, tile_size=2)),
        jax.jit(lambda a: jaxmg.potri(a, mesh=mesh, spec=spec, tile_size=1)),
        jax.jit(lambda h: jaxmg.syevd(h, mesh=mesh, spec=spec, tile_size=2)),
    ]
    a_dev, b_dev, h_dev = helpers.rows(a, mesh), helpers.rows(b, mesh), helpers.rows(h, mesh)
    outs = []
    for _ in range(100):
        outs.append((programs[0](a_dev, b_dev), programs[1](a_dev), programs[2](h_dev)))
    x, inv, (w, v) = outs[-1]
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.complex128, 12, CONDITION)
    assert helpers.inverse_error(a, inv) <= helpers.tolerance(np.complex128, 12, CONDITION)
    np.testing.assert_allclose(
        np.asarray(w),
        np.linalg.eigvalsh(h),
        atol=helpers.tolerance(np.complex128, 12) * np.abs(w).max(),
    )
    for x2, inv2, (w2, _) in outs:
        np.testing.assert_array_equal(np.asarray(x2), np.asarray(x))
        np.testing.assert_array_equal(np.asarray(inv2), np.asarray(inv))
        np.testing.assert_array_equal(np.asarray(w2), np.asarray(w))
    jax.block_until_ready(outs)  # every device's shards, not only those read above
    assert library.live_meetings() == 0


# ---- (a) A participant that never arrives: an error, quickly -----------------


@pytest.mark.parametrize(
    "devices, callers, missing",
    [(2, [0], "[1]"), (3, [0, 2], "[1]"), (4, [1], "[0, 2, 3]")],
    ids=["2dev-only0", "3dev-no1", "4dev-only1"],
)
def test_missing_participant_times_out(monkeypatch, devices, callers, missing):
    monkeypatch.setenv("JAXMG_TIMEOUT_S", "0.5")  # read when the call is traced
    mesh = helpers.mesh(devices)
    placement = Placement(mesh, "x", manual=True)
    convert = functools.partial(layout.convert_block, placement=placement, tile=1)

    def body(block):
        index = jax.lax.axis_index("x")
        arrives = jnp.isin(index, jnp.asarray(callers))
        return jax.lax.cond(arrives, convert, lambda blk: blk, block)

    run = jax.jit(
        jax.shard_map(
            body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False
        )
    )
    a = jax.device_put(
        np.ones((2 * devices, 2 * devices), np.float32), NamedSharding(mesh, P("x", None))
    )
    start = time.monotonic()
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(run(a))
    elapsed = time.monotonic() - start
    message = str(raised.value)
    assert f"participants {missing} of {devices} did not reach call" in message, message
    assert "within 500 ms" in message, message
    assert "set PJRT_NPROC to at least twice the number of devices" in message, message
    assert elapsed < 10, f"the error took {elapsed:.1f} s"
