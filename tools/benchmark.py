"""Times jaxmg's potrs, potri and syevd against JAX's own solvers and JAXMg 0.0.8.

Usage, from the repository root after `bazel build //xla_ext:libjaxmg_ffi.so`:

    PYTHONPATH=. .venv/bin/python tools/benchmark.py
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --sizes 4096 16384 --dtypes float64 --devices 1 2
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --peer-path /opt/jaxmg-0.0.8

    # CPU smoke test on two forced host devices:
    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu PYTHONPATH=. \\
        .venv/bin/python tools/benchmark.py --sizes 256 512 --dtypes float32 --repeats 2 --out /tmp/bench

For every routine x dtype x N x device count it times these implementations:

    jaxmg (auto)     jaxmg.<routine>(a, ..., tile_size=TILE): the library picks its engine
                     (JAX's own solver on one GPU or below a crossover N, else cuSOLVERMg)
    jaxmg (mg)       the same with backend="jaxmg": always the distributed solver
    jax native       JAX's solver on one device, jitted. potrs: cho_factor + cho_solve;
                     potri: cho_factor + cho_solve against the identity; syevd: jnp.linalg.eigh
    jax native inv   potri only: jnp.linalg.inv
    JAXMg 0.0.8      only with --peer-path DIR, a directory filled by
                     `pip install --no-deps --target DIR jaxmg==0.0.8`
    jaxmg (mg, jit)  only with --per-call-overhead, at N=1024: jaxmg (mg) called from inside
                     the caller's own jax.jit, to show the Python cost of an eager call

Method: A is built on the devices (SPD A = M M^H / N + I for potrs and potri, Hermitian
(M + M^H) / 2 for syevd, M standard normal), rows sharded P("x", None) over a 1-D mesh of
the first D devices; b is (N, 1) and replicated. Each measurement is one warm-up (compiling)
call, then up to --repeats timed calls (perf_counter around the call and
jax.block_until_ready; fewer once they have taken --budget seconds), alternating between
two input matrices when N <= 16384 and memory allows. Every timed result is checked on the
devices: potrs ||A x - b|| / (||A||_F ||x||), potri ||(X A - I)[rows]||_F / sqrt(rows),
syevd max_j ||A v_j - w_j v_j|| / max|w| (rows and columns sampled above N = 2048); a
residual above 100 sqrt(N) eps, or NaN, marks the measurement FAILED. A size is skipped
when four copies of A exceed 90% of the D devices' memory, jax native when four copies
exceed half of one device's; errors (out of memory included) are recorded and the run goes
on. float64 and complex128 turn on jax_enable_x64 in the workers (this script's choice).

Output: one progress line per measurement, then a table of median times in ms, also
written with every raw figure and the machine's description to <out>/benchmark.json, and a
log-log plot of time against N per routine to <out>/benchmark.png (skipped, with a note,
when matplotlib is missing). Worker logs go to <out>/logs/.

The process you start never initialises JAX itself: it runs the measurements in worker
processes of this same script (`--worker ours|peer|info`), one per implementation family and
device count, one after another, so each worker has the devices' memory to itself; the
public JAXMg package is also named `jaxmg`, and in its own process it can be imported under
that name with DIR first on sys.path. A worker that crashes or stalls (--task-timeout) costs
only the measurement in flight; the next worker resumes after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import faulthandler
import gc
import itertools
import json
import math
import os
import pathlib
import platform
import queue
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
ROUTINES = ("potrs", "potri", "syevd")
DTYPES = ("float32", "float64", "complex64", "complex128")
DEFAULT_SIZES = (1024, 4096, 8192, 16384, 32768)

AUTO, MG, MG_JIT = "jaxmg (auto)", "jaxmg (mg)", "jaxmg (mg, jit)"
NATIVE, NATIVE_INV, PEER = "jax native", "jax native inv", "JAXMg 0.0.8"
OURS_IMPLS = (AUTO, MG, MG_JIT, NATIVE, NATIVE_INV)
TABLE_IMPLS = (AUTO, MG, NATIVE, NATIVE_INV, PEER)

EVENT_PREFIX = "@@bench "
ROTATE_MAX_N = 16384  # above this, one input matrix is reused across repeats
OVERHEAD_N = 1024
FULL_CHECK_MAX_N = 2048  # above this, residuals are sampled on a few rows/columns
SAMPLES = 64


@dataclasses.dataclass(frozen=True)
class Task:
    """One measurement: an implementation of a routine on one problem."""

    id: int
    routine: str
    dtype: str
    n: int
    devices: int  # devices the implementation uses (1 for jax native)
    impl: str


# ---------------------------------------------------------------------------
# Worker side: runs inside a subprocess, talks JSON lines on stdout.
# ---------------------------------------------------------------------------


def emit(**event: Any) -> None:
    print(EVENT_PREFIX + json.dumps(event), flush=True)


def short_error(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else text
    return f"{type(exc).__name__}: {first}"[:240]


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory_bytes(device) -> int:
    """Memory JAX may allocate on `device` (host memory for CPU devices)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # CPU devices and some plugins do not report memory
        stats = {}
    return int(stats.get("bytes_limit") or host_memory_bytes())


def machine_info() -> dict[str, Any]:
    import jax
    import jaxlib

    devices = jax.devices()
    return {
        "platform": devices[0].platform,
        "device_count": len(devices),
        "device_kinds": [d.device_kind for d in devices],
        "device_memory_bytes": [device_memory_bytes(d) for d in devices],
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "python": sys.version.split()[0],
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
    }


class Bench:
    """Builds inputs and implementations for one worker's tasks and times them."""

    def __init__(self, settings: dict[str, Any], lib) -> None:
        import jax

        self.settings = settings
        self.lib = lib
        self.devices = jax.devices()
        self.on_cpu = self.devices[0].platform == "cpu"

    # -- inputs -----------------------------------------------------------

    def mesh(self, n_devices: int):
        import numpy as np
        from jax.sharding import Mesh

        return Mesh(np.array(self.devices[:n_devices]), ("x",))

    def memory(self, n_devices: int) -> tuple[int, int]:
        """(one device's memory, the memory of n_devices together)."""
        one = device_memory_bytes(self.devices[0])
        return one, one if self.on_cpu else one * n_devices

    def input_count(self, n: int, dtype: str, n_devices: int) -> tuple[int, str | None]:
        """How many input matrices to rotate between, or a reason to skip."""
        import numpy as np

        matrix = n * n * np.dtype(dtype).itemsize
        _, total = self.memory(n_devices)
        # Inputs plus about three working matrices (the call's copy, its
        # result, the residual check) must fit in 90% of the memory.
        if n <= ROTATE_MAX_N and (2 + 3) * matrix <= 0.9 * total:
            return 2, None
        if (1 + 3) * matrix <= 0.9 * total:
            return 1, None
        return 0, (f"needs ~{4 * matrix / 2**30:.1f} GiB, {n_devices} device(s) have "
                   f"{total / 2**30:.1f} GiB")

    def make_inputs(self, routine: str, n: int, dtype: str, mesh, count: int) -> list[tuple]:
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P

        rows = NamedSharding(mesh, P("x", None))
        replicated = NamedSharding(mesh, P())

        def build(key):
            km, kb = jax.random.split(key)
            m = jax.lax.with_sharding_constraint(jax.random.normal(km, (n, n), dtype), rows)
            if routine == "syevd":
                a = (m + m.conj().T) / 2
            else:
                a = m @ m.conj().T / n
                # Exact symmetry: the solvers read one triangle, the checks all of A.
                a = (a + a.conj().T) / 2 + jnp.eye(n, dtype=dtype)
            return a, jax.random.normal(kb, (n, 1), dtype)

        make = jax.jit(build, out_shardings=(rows, replicated))
        inputs = []
        for i in range(count):
            inputs.append(jax.block_until_ready(make(jax.random.key(1000 * n + i))))
        return inputs

    # -- implementations ----------------------------------------------------

    def implementation(self, task: Task, inputs: list[tuple], mesh) -> "Impl":
        if task.impl in (NATIVE, NATIVE_INV):
            return self.native(task, inputs)
        if task.impl == PEER:
            return self.peer(task, inputs, mesh)
        return self.ours(task, inputs, mesh)

    def ours(self, task: Task, inputs: list[tuple], mesh) -> "Impl":
        import jax
        from jax.sharding import PartitionSpec as P

        jaxmg = self.lib
        tile = self.settings["tile"]
        backend = "auto" if task.impl == AUTO else "jaxmg"
        kw: dict[str, Any] = {"tile_size": tile, "backend": backend}
        if task.impl == MG_JIT:
            kw.update(mesh=mesh, spec=P("x", None))
        if task.routine == "potrs":
            fn = lambda a, b: jaxmg.potrs(a, b, **kw)
        elif task.routine == "potri":
            fn = lambda a, b: jaxmg.potri(a, **kw)
        else:
            fn = lambda a, b: jaxmg.syevd(a, **kw)
        if task.impl == MG_JIT:
            fn = jax.jit(fn)
        engine, effective_tile = self.engine_of(task, inputs[0][0], tile, backend)
        return Impl(
            prepare=lambda k: (inputs[k], None),
            call=fn,
            residual=lambda k, out: check(task.routine, inputs[k], out),
            engine=engine,
            tile=effective_tile,
        )

    @staticmethod
    def engine_of(task: Task, a, tile: int, backend: str) -> tuple[str | None, int | None]:
        """Which engine jaxmg runs for this call, and its tile width."""
        try:
            from jaxmg._src import dispatch, distribution as dist

            placement = dist.resolve_placement(a, None, None)
            engine = dispatch.choose(task.routine, task.n, placement, backend)
            t = dist.choose_tile(task.n, placement.n_devices, tile) if engine == "jaxmg" else None
            return engine, t
        except Exception:  # private API: only for the report
            return None, None

    def native(self, task: Task, inputs: list[tuple]) -> "Impl":
        import jax
        import jax.numpy as jnp
        import jax.scipy.linalg as jsl

        device = self.devices[0]
        local = [tuple(jax.device_put(x, device) for x in pair) for pair in inputs]
        if task.routine == "potrs":
            fn = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b))
        elif task.routine == "potri" and task.impl == NATIVE:
            fn = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), jnp.eye(a.shape[0], dtype=a.dtype)))
        elif task.routine == "potri":
            fn = jax.jit(lambda a, b: jnp.linalg.inv(a))
        else:
            fn = jax.jit(lambda a, b: jnp.linalg.eigh(a))
        return Impl(
            prepare=lambda k: (local[k], None),
            call=fn,
            residual=lambda k, out: check(task.routine, local[k], out),
        )

    def peer(self, task: Task, inputs: list[tuple], mesh) -> "Impl":
        """JAXMg 0.0.8: positional (a, [b,] T_A, mesh, spec); it donates its inputs."""
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        peer = self.lib
        t_a = max(1, min(self.settings["tile"], task.n // task.devices))
        copy = jax.jit(lambda a, b: (jnp.copy(a), jnp.copy(b)))
        # Some JAXMg versions take potrs's specs as (spec_a, spec_b): tried second.
        spec_choices = [P("x", None), (P("x", None), P(None, None))]
        state = {"spec": None}

        def call_with(spec, a, b):
            if task.routine == "potrs":
                return peer.potrs(a, b, t_a, mesh, spec)
            if task.routine == "potri":
                return peer.potri(a, t_a, mesh, spec)
            return peer.syevd(a, t_a, mesh, spec)

        def call(a, b):
            if state["spec"] is not None:
                return call_with(state["spec"], a, b)
            try:
                out = call_with(spec_choices[0], a, b)
                state["spec"] = spec_choices[0]
            except (AssertionError, AttributeError, TypeError, ValueError) as first:
                if task.routine != "potrs":
                    raise
                try:
                    out = call_with(spec_choices[1], a, b)
                except Exception:
                    raise first from None
                state["spec"] = spec_choices[1]
            return out

        def prepare(k):
            start = time.perf_counter()
            fresh = jax.block_until_ready(copy(*inputs[k]))
            return fresh, time.perf_counter() - start

        def normalise(out):
            if task.routine == "syevd":
                return out[0], out[1]
            return out[0] if isinstance(out, (tuple, list)) else out

        impl = Impl(
            prepare=prepare,
            call=lambda a, b: normalise(call(a, b)),
            residual=lambda k, out: self.peer_residual(task, inputs[k], out, impl),
            tile=t_a,
            note="time excludes the fresh input copy each call needs (copy_ms)",
        )
        return impl

    @staticmethod
    def peer_residual(task: Task, pair: tuple, out, impl: "Impl") -> float:
        """As `check`, but a peer whose V holds eigenvectors as rows is accepted too."""
        value = check(task.routine, pair, out)
        if task.routine == "syevd" and not value < tolerance(task.n, pair[0].dtype):
            as_rows = check_syevd(pair[0], out[0], out[1], vectors_in_columns=False)
            if as_rows < value or math.isnan(value):
                remark = "eigenvectors returned as rows of V"
                if remark not in (impl.note or ""):
                    impl.note = f"{impl.note}; {remark}" if impl.note else remark
                return as_rows
        return value


@dataclasses.dataclass
class Impl:
    """How to run one implementation: fresh arguments for input k, the call, its check."""

    prepare: Callable[[int], tuple[tuple, float | None]]
    call: Callable[..., Any]
    residual: Callable[[int, Any], float]
    engine: str | None = None
    tile: int | None = None
    note: str | None = None


def tolerance(n: int, dtype) -> float:
    import numpy as np

    return 100.0 * math.sqrt(n) * float(np.finfo(np.dtype(dtype)).eps)


def _samples(n: int) -> Any:
    import numpy as np

    if n <= FULL_CHECK_MAX_N:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, SAMPLES).astype(np.int64))


def check(routine: str, pair: tuple, out) -> float:
    a, b = pair
    if routine == "potrs":
        return check_potrs(a, b, out)
    if routine == "potri":
        return check_potri(a, out)
    w, v = out
    return check_syevd(a, w, v)


def check_potrs(a, b, x) -> float:
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    r = jnp.matmul(a, x, precision=hi) - b
    return float(jnp.linalg.norm(r) / (jnp.linalg.norm(a) * jnp.linalg.norm(x)))


def check_potri(a, inv) -> float:
    import jax
    import jax.numpy as jnp

    rows = _samples(a.shape[0])
    hi = jax.lax.Precision.HIGHEST
    product = jnp.matmul(inv[rows, :], a, precision=hi)
    identity = (jnp.arange(a.shape[0])[None, :] == jnp.asarray(rows)[:, None]).astype(a.dtype)
    return float(jnp.linalg.norm(product - identity) / math.sqrt(len(rows)))


def check_syevd(a, w, v, vectors_in_columns: bool = True) -> float:
    import jax
    import jax.numpy as jnp

    cols = _samples(a.shape[0])
    vs = v[:, cols] if vectors_in_columns else jnp.conj(v[cols, :]).T
    hi = jax.lax.Precision.HIGHEST
    r = jnp.matmul(a, vs, precision=hi) - vs * w[cols][None, :]
    return float(jnp.max(jnp.linalg.norm(r, axis=0)) / jnp.max(jnp.abs(w)))


def time_impl(impl: Impl, n_inputs: int, repeats: int, budget_s: float) -> dict[str, Any]:
    """Warm-up call, then timed calls (rotating inputs) until `repeats` or `budget_s`."""
    import jax

    args, _ = impl.prepare(0)
    jax.block_until_ready(impl.call(*args))
    del args
    times, copies, residuals = [], [], []
    for i in range(repeats):
        k = (i + 1) % n_inputs  # the first timed call already sees a new matrix
        args, copy_s = impl.prepare(k)
        start = time.perf_counter()
        out = impl.call(*args)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - start)
        del args
        try:
            residuals.append(impl.residual(k, out))
        except Exception as exc:  # the timing stands; the result is unchecked
            residuals.append(float("nan"))
            impl.note = f"residual check failed: {short_error(exc)}"
        del out
        if copy_s is not None:
            copies.append(copy_s)
        if sum(times) > budget_s:
            break
    return {"times": times, "copies": copies, "residuals": residuals}


def summarise(task: Task, measured: dict[str, Any], impl: Impl, n_inputs: int, dtype) -> dict[str, Any]:
    ms = [1e3 * t for t in measured["times"]]
    copy_ms = [1e3 * t for t in measured["copies"]]
    residuals = measured["residuals"]
    worst = float("nan") if any(math.isnan(r) for r in residuals) else max(residuals)
    tol = tolerance(task.n, dtype)
    record = {
        "status": "ok" if worst <= tol else "failed",
        "median_ms": statistics.median(ms),
        "min_ms": min(ms),
        "times_ms": ms,
        "residual": None if math.isnan(worst) else worst,
        "tolerance": tol,
        "repeats_done": len(ms),
        "n_inputs": n_inputs,
        "engine": impl.engine,
        "tile": impl.tile,
        "note": impl.note,
    }
    if copy_ms:
        record["copy_ms"] = copy_ms
        record["median_with_copy_ms"] = statistics.median(t + c for t, c in zip(ms, copy_ms))
    return record


def load_library(kind: str, settings: dict[str, Any]):
    """Our jaxmg from the repository, or JAXMg 0.0.8 from --peer-path."""
    import importlib

    if kind == "ours":
        if str(REPO_ROOT) not in [str(pathlib.Path(p).resolve()) for p in sys.path if p]:
            sys.path.append(str(REPO_ROOT))
        return importlib.import_module("jaxmg")
    peer_path = pathlib.Path(settings["peer_path"]).resolve()
    if not (peer_path / "jaxmg" / "__init__.py").is_file():
        raise ImportError(f"no jaxmg package under --peer-path {peer_path}")
    sys.path.insert(0, str(peer_path))
    module = importlib.import_module("jaxmg")
    if peer_path not in pathlib.Path(module.__file__).resolve().parents:
        raise ImportError(f"`import jaxmg` found {module.__file__}, not the peer under {peer_path}")
    return module


def worker_main(kind: str, tasks_file: str) -> None:
    faulthandler.enable()  # a crash in native code leaves a Python stack in the log
    spec = json.loads(pathlib.Path(tasks_file).read_text())
    if kind == "info":
        emit(event="info", **machine_info())
        emit(event="result", id=0, status="ok")
        return
    settings = spec["settings"]
    tasks = [Task(**t) for t in spec["tasks"]]
    import jax

    if any(t.dtype in ("float64", "complex128") for t in tasks):
        jax.config.update("jax_enable_x64", True)  # the benchmark's choice, not the library's
    try:
        lib = load_library(kind, settings)
    except Exception as exc:
        for task in tasks:
            emit(event="result", id=task.id, status="error", error=f"import failed: {short_error(exc)}")
        return
    emit(event="library", kind=kind, file=getattr(lib, "__file__", None),
         version=getattr(lib, "__version__", None))
    bench = Bench(settings, lib)
    group_key = lambda t: (t.routine, t.dtype, t.n)
    for (routine, dtype, n), group in itertools.groupby(tasks, key=group_key):
        run_group(bench, routine, dtype, n, list(group), settings)


def run_group(bench: Bench, routine: str, dtype: str, n: int, tasks: list[Task],
              settings: dict[str, Any]) -> None:
    """Measures every task of one problem on shared inputs."""
    n_devices = max(t.devices for t in tasks)
    mesh = bench.mesh(n_devices)
    n_inputs, skip = bench.input_count(n, dtype, n_devices)
    if skip:
        for task in tasks:
            emit(event="result", id=task.id, status="skipped", error=skip)
        return
    try:
        inputs = bench.make_inputs(routine, n, dtype, mesh, n_inputs)
    except Exception as exc:
        for task in tasks:
            emit(event="result", id=task.id, status="error", error=f"inputs: {short_error(exc)}")
        gc.collect()
        return
    for task in tasks:
        emit(event="start", id=task.id)
        emit(event="result", id=task.id, **run_task(bench, task, inputs, mesh, n_inputs, settings))
        gc.collect()
    del inputs
    gc.collect()


def run_task(bench: Bench, task: Task, inputs: list[tuple], mesh, n_inputs: int,
             settings: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    if task.impl in (NATIVE, NATIVE_INV):
        one, _ = bench.memory(1)
        need = 4 * task.n * task.n * np.dtype(task.dtype).itemsize
        if need > 0.5 * one:
            return {"status": "skipped",
                    "error": f"4 copies of A ({need / 2**30:.1f} GiB) exceed half of one device"}
    try:
        impl = bench.implementation(task, inputs, mesh)
        measured = time_impl(impl, n_inputs, settings["repeats"], settings["budget_s"])
        return summarise(task, measured, impl, n_inputs, task.dtype)
    except Exception as exc:
        return {"status": "error", "error": short_error(exc)}


# ---------------------------------------------------------------------------
# Driver side: plans the tasks, runs the workers, prints and writes results.
# ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring (tools/benchmark.py) for the method and outputs.")
    parser.add_argument("--routines", nargs="+", choices=ROUTINES, default=list(ROUTINES),
                        metavar="R", help="potrs, potri and/or syevd (default: all three)")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES), metavar="N",
                        help="matrix orders (default: %(default)s)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["float32", "float64"],
                        metavar="T", help=f"{', '.join(DTYPES)} (default: float32 float64)")
    parser.add_argument("--devices", nargs="+", type=int, metavar="D",
                        help="device counts to run jaxmg on (default: all visible devices)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls after the warm-up (default 5)")
    parser.add_argument("--tile", type=int, default=1024,
                        help="block-cyclic tile T_A for jaxmg and JAXMg (default 1024)")
    parser.add_argument("--peer-path", type=pathlib.Path, metavar="DIR",
                        help="where `pip install --no-deps --target DIR jaxmg==0.0.8` put JAXMg")
    parser.add_argument("--per-call-overhead", action="store_true",
                        help=f"also time jaxmg (mg) called inside jax.jit at N={OVERHEAD_N}")
    parser.add_argument("--budget", type=float, default=60.0, metavar="S",
                        help="stop a measurement's timed calls after S seconds (default 60)")
    parser.add_argument("--task-timeout", type=float, default=1800.0, metavar="S",
                        help="kill a worker silent for S seconds (default 1800)")
    parser.add_argument("--out", type=pathlib.Path,
                        help="output folder (default results/<date>-<platform>)")
    parser.add_argument("--worker", choices=["ours", "peer", "info"], help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.tile < 1 or any(n < 1 for n in args.sizes):
        parser.error("--repeats, --tile and --sizes must be positive")
    return args


def plan_tasks(args: argparse.Namespace, device_counts: list[int]) -> list[tuple[str, int, list[Task]]]:
    """Tasks in the order they run, grouped by worker: (kind, devices, tasks)."""
    ids = itertools.count(1)
    plan = []
    for d in device_counts:
        ours: list[Task] = []
        peer: list[Task] = []
        for routine, dtype, n in itertools.product(args.routines, args.dtypes, args.sizes):
            impls = [AUTO, MG]
            if args.per_call_overhead and n == OVERHEAD_N:
                impls.append(MG_JIT)
            for impl in impls:
                ours.append(Task(next(ids), routine, dtype, n, d, impl))
            if d == device_counts[0]:  # jax native is one-device: measured once
                for impl in (NATIVE, NATIVE_INV) if routine == "potri" else (NATIVE,):
                    ours.append(Task(next(ids), routine, dtype, n, 1, impl))
        plan.append(("ours", d, ours))
        if args.peer_path:
            for routine, dtype, n in itertools.product(args.routines, args.dtypes, args.sizes):
                peer.append(Task(next(ids), routine, dtype, n, d, PEER))
            plan.append(("peer", d, peer))
    return plan


def worker_env(kind: str, n_devices: int, info: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    if kind == "peer" and info["platform"] == "gpu":
        # JAXMg uses every local device: show it only the first n_devices.
        visible = env.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(info["device_count"])]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:n_devices])
    return env


def _pump(stream, lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_worker(kind: str, tasks: list[Task], settings: dict[str, Any], env: dict[str, str],
               log_path: pathlib.Path, timeout_s: float) -> Iterator[dict[str, Any]]:
    """Runs a worker over `tasks`, yielding its events. If it crashes or stalls,
    the task in flight (or the problem whose inputs it was building) is reported
    as an error and a new worker takes the rest."""
    remaining = list(tasks)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    while remaining:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"settings": settings, "tasks": [dataclasses.asdict(t) for t in remaining]}, f)
            tasks_file = f.name
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", kind,
                   "--tasks", tasks_file]
        done: set[int] = set()
        in_flight: int | None = None
        loaded = False  # the worker imported its library
        failure = None
        with open(log_path, "a") as log:
            log.write(f"\n$ {shlex.join(command)}\n")
            log.flush()
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                    env=env, start_new_session=True)
            try:
                lines: queue.Queue[str | None] = queue.Queue()
                threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
                while True:
                    try:
                        line = lines.get(timeout=timeout_s)
                    except queue.Empty:
                        failure = f"no progress for {timeout_s:.0f} s: worker killed"
                        break
                    if line is None:
                        break
                    if not line.startswith(EVENT_PREFIX):
                        log.write(line)
                        continue
                    event = json.loads(line[len(EVENT_PREFIX):])
                    if event["event"] == "library":
                        loaded = True
                    elif event["event"] == "start":
                        in_flight = event["id"]
                    elif event["event"] == "result":
                        done.add(event["id"])
                        in_flight = None
                    yield event
            finally:
                if proc.poll() is None:  # stalled, or the driver was interrupted
                    os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
                os.unlink(tasks_file)
        remaining = [t for t in remaining if t.id not in done]
        if not remaining:
            return
        failure = failure or describe_exit(rc, log_path)
        if in_flight is not None:
            lost = [in_flight]
        elif loaded:  # died building the next problem's inputs
            key = lambda t: (t.routine, t.dtype, t.n)
            lost = [t.id for t in remaining if key(t) == key(remaining[0])]
        else:  # died on start-up: another worker would too
            lost = [t.id for t in remaining]
        for task_id in lost:
            yield {"event": "result", "id": task_id, "status": "error", "error": failure}
        remaining = [t for t in remaining if t.id not in lost]


def log_tail(path: pathlib.Path) -> str:
    """The most telling line a dead worker left in its log."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    own = text.rsplit("\n$ ", 1)[-1].splitlines()[1:]  # this worker's part only
    lines = [l.strip() for l in own if l.strip().strip("*")]
    fatal = [l for l in lines if l.startswith("Fatal Python error") or "Error" in l.split(":")[0]]
    return ((fatal or lines or ["(nothing in the log)"])[-1])[:240]


def describe_exit(rc: int, log_path: pathlib.Path) -> str:
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with status {rc}"
    return f"worker {how}: {log_tail(log_path)}"


def probe_machine(log_path: pathlib.Path) -> dict[str, Any]:
    """Device list and versions, from a short-lived worker (the driver never starts JAX)."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    info, error = None, "it printed nothing"
    for event in run_worker("info", [Task(0, "", "", 0, 0, "")], {}, env, log_path, 600):
        if event["event"] == "info":
            info = {k: v for k, v in event.items() if k != "event"}
        elif event.get("status") == "error":
            error = event["error"]
    if info is None:
        raise SystemExit(f"benchmark: cannot start JAX: {error} (see {log_path})")
    return info


def git_commit() -> dict[str, Any]:
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def progress_line(index: int, total: int, task: Task, record: dict[str, Any]) -> str:
    head = f"[{index}/{total}] {task.routine} {task.dtype} N={task.n} devices={task.devices} {task.impl}:"
    status = record["status"]
    if status in ("error", "skipped"):
        return f"{head} {status}: {record.get('error')}"
    resid = record.get("residual")
    text = f"{head} {format_ms(record['median_ms'])} ms (min {format_ms(record['min_ms'])}, "
    text += f"resid {resid:.1e})" if resid is not None else "resid NaN)"
    if record.get("engine"):
        text += f" [engine {record['engine']}" + (f", tile {record['tile']}]" if record.get("tile") else "]")
    if "copy_ms" in record:
        text += f" [+ input copy {format_ms(statistics.median(record['copy_ms']))} ms]"
    if status == "failed":
        text += f" FAILED (tolerance {record['tolerance']:.1e})"
    return text


def format_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def build_table(records: list[dict[str, Any]], device_counts: list[int],
                args: argparse.Namespace) -> tuple[str, list[str]]:
    """The summary table and its footnotes (errors are numbered E1, E2, ...)."""
    by_key = {(r["routine"], r["dtype"], r["n"], r["devices"], r["impl"]): r for r in records}
    impls = [i for i in TABLE_IMPLS
             if (i != NATIVE_INV or "potri" in args.routines) and (i != PEER or args.peer_path)]
    header = ["routine", "dtype", "N", "dev"] + impls + ["auto engine", "auto/native"]
    rows, errors = [], []

    def cell(record: dict[str, Any] | None) -> str:
        if record is None:
            return "-"
        if record["status"] == "skipped":
            return "skip"
        if record["status"] == "error":
            errors.append(record["error"])
            return f"E{len(errors)}"
        return format_ms(record["median_ms"]) + ("!" if record["status"] == "failed" else "")

    for routine, dtype, n, d in itertools.product(args.routines, args.dtypes, args.sizes, device_counts):
        found = {}
        for impl in impls:
            one_device = impl in (NATIVE, NATIVE_INV)
            found[impl] = by_key.get((routine, dtype, n, 1 if one_device else d, impl))
        if routine != "potri":
            found.pop(NATIVE_INV, None)
        auto, native = found.get(AUTO), found.get(NATIVE)
        ratio = "-"
        if auto and native and auto.get("median_ms") and native.get("median_ms"):
            ratio = f"{auto['median_ms'] / native['median_ms']:.2f}"
        engine = (auto or {}).get("engine") or "-"
        rows.append([routine, dtype, str(n), str(d)] + [cell(found.get(i)) for i in impls]
                    + [engine, ratio])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(h.rjust(w) if i >= 2 else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines), errors


def table_notes(records: list[dict[str, Any]], args: argparse.Namespace, errors: list[str]) -> list[str]:
    notes = [
        "Median ms over the timed calls (min and every call in benchmark.json). '!' = FAILED: "
        "residual above 100 sqrt(N) eps or NaN. 'skip' = does not fit in memory.",
        f"jaxmg (auto) and (mg) get tile_size={args.tile} (capped at N/devices) and do not donate a, "
        "so their time includes the copy of a the solver works in.",
        "jax native runs on one device whatever the dev column says; its potri is "
        "cho_factor + cho_solve(A, I), jax native inv is jnp.linalg.inv. "
        "auto/native < 1: jaxmg (auto) is faster.",
    ]
    peer = [r for r in records if r["impl"] == PEER and "copy_ms" in r]
    if args.peer_path:
        copy = statistics.median(c for r in peer for c in r["copy_ms"]) if peer else None
        notes.append(
            "JAXMg 0.0.8 donates (deletes) its inputs: each call gets a fresh copy of a and b made "
            "before the timer starts, so its time excludes that copy"
            + (f" (copies: median {format_ms(copy)} ms over all sizes; per-size copy_ms and "
               "median_with_copy_ms in benchmark.json)." if copy is not None else "."))
    notes += [f"E{i}: {e}" for i, e in enumerate(errors, 1)]
    return notes


def overhead_lines(records: list[dict[str, Any]], device_counts: list[int],
                   args: argparse.Namespace) -> list[str]:
    by_key = {(r["routine"], r["dtype"], r["n"], r["devices"], r["impl"]): r for r in records}
    lines = [f"Per-call overhead at N={OVERHEAD_N}: jaxmg (mg) called eagerly vs inside jax.jit "
             "(median ms)"]
    for routine, dtype, d in itertools.product(args.routines, args.dtypes, device_counts):
        eager = by_key.get((routine, dtype, OVERHEAD_N, d, MG), {}).get("median_ms")
        jitted = by_key.get((routine, dtype, OVERHEAD_N, d, MG_JIT), {}).get("median_ms")
        if eager is None or jitted is None:
            lines.append(f"  {routine} {dtype} dev={d}: not measured")
            continue
        lines.append(f"  {routine} {dtype} dev={d}: eager {format_ms(eager)}, jit {format_ms(jitted)}, "
                     f"difference {1e3 * (eager - jitted):+.0f} us")
    return lines


def plot(records: list[dict[str, Any]], args: argparse.Namespace, path: pathlib.Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "matplotlib is not installed: no plot written"
    multi = len({r["devices"] for r in records if r["impl"] not in (NATIVE, NATIVE_INV)}) > 1
    fig, axes = plt.subplots(1, len(args.routines), figsize=(6 * len(args.routines), 4.8), squeeze=False)
    styles = ["-", "--", ":", "-."]
    markers = "osD^v<>p*h"
    for ax, routine in zip(axes[0], args.routines):
        series: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
        for r in records:
            if r["routine"] == routine and r["impl"] != MG_JIT and r.get("median_ms") is not None:
                series.setdefault((r["impl"], r["dtype"], r["devices"]), []).append((r["n"], r["median_ms"]))
        labels = sorted({(impl, d) for impl, _, d in series})
        for (impl, dtype, d), points in sorted(series.items()):
            points.sort()
            colour = f"C{labels.index((impl, d)) % 10}"
            label = impl + (f" {d} dev" if multi and impl not in (NATIVE, NATIVE_INV) else "") + f" {dtype}"
            ax.plot([p[0] for p in points], [p[1] for p in points], color=colour,
                    linestyle=styles[args.dtypes.index(dtype) % len(styles)],
                    marker=markers[labels.index((impl, d)) % len(markers)], label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted(args.sizes), [str(n) for n in sorted(args.sizes)])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(routine)
        ax.set_xlabel("N")
        ax.set_ylabel("median time (ms)")
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.tasks)
        return
    started = datetime.datetime.now()
    if args.per_call_overhead and OVERHEAD_N not in args.sizes:
        args.sizes = sorted(args.sizes + [OVERHEAD_N])
        print(f"--per-call-overhead: added N={OVERHEAD_N} to the sizes", flush=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="jaxmg-bench-"))
    info = probe_machine(scratch / "probe.log")
    out = args.out or REPO_ROOT / "results" / f"{started:%Y-%m-%d}-{info['platform']}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    (scratch / "probe.log").replace(out / "logs" / "probe.log")
    scratch.rmdir()

    visible = info["device_count"]
    device_counts = sorted(set(args.devices or [visible]))
    if any(d > visible or d < 1 for d in device_counts):
        print(f"note: only {visible} device(s) visible; dropping --devices "
              f"{[d for d in device_counts if d > visible or d < 1]}", flush=True)
        device_counts = [d for d in device_counts if 1 <= d <= visible] or [visible]
    print(f"{visible} x {info['device_kinds'][0]} ({info['platform']}), jax {info['jax_version']}; "
          f"devices {device_counts}; output {out}", flush=True)

    settings = {"tile": args.tile, "repeats": args.repeats, "budget_s": args.budget,
                "peer_path": str(args.peer_path.resolve()) if args.peer_path else None}
    plan = plan_tasks(args, device_counts)
    tasks = {t.id: t for _, _, group in plan for t in group}
    total, done = len(tasks), 0
    records: list[dict[str, Any]] = []
    libraries: dict[str, Any] = {}
    for kind, d, group in plan:
        env = worker_env(kind, d, info)
        for event in run_worker(kind, group, settings, env, out / "logs" / f"{kind}-{d}dev.log",
                                args.task_timeout):
            if event["event"] == "library":
                libraries[kind] = {"file": event["file"], "version": event["version"]}
            if event["event"] != "result":
                continue
            done += 1
            task = tasks[event["id"]]
            record = {**dataclasses.asdict(task), **{k: v for k, v in event.items() if k != "event"}}
            records.append(record)
            print(progress_line(done, total, task, record), flush=True)

    records.sort(key=lambda r: r["id"])
    table, errors = build_table(records, device_counts, args)
    notes = table_notes(records, args, errors)
    print("\n" + table + "\n")
    for note in notes:
        print(note)
    if args.per_call_overhead:
        print("\n" + "\n".join(overhead_lines(records, device_counts, args)))

    report = {
        "date": started.isoformat(timespec="seconds"),
        "command": [sys.executable] + sys.argv,
        "machine": info,
        "git": git_commit(),
        "libraries": libraries,
        "settings": {**settings, "routines": args.routines, "sizes": args.sizes, "dtypes": args.dtypes,
                     "devices": device_counts, "tolerance": "100 * sqrt(N) * eps"},
        "results": records,
        "table": table.splitlines(),
        "notes": notes,
        "elapsed_s": round((datetime.datetime.now() - started).total_seconds(), 1),
    }
    (out / "benchmark.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nresults written to {out / 'benchmark.json'}")
    print(plot(records, args, out / "benchmark.png"))


if __name__ == "__main__":
    main()
