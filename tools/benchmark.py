"""Times jaxmg's potrs, LU solve, potri and syevd against JAX's own solvers and JAXMg 0.0.8.

Usage, from the repository root after `bazel build //xla_ext:libjaxmg_ffi.so`:

    PYTHONPATH=. .venv/bin/python tools/benchmark.py
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --sizes 4096 16384 --dtypes float64 --devices 1 2
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --routines potrs lu --sizes 65536 131072 \\
        --dtypes float64 --mem-fraction 0.95
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --routines potrs --largest --largest-budget 300
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --peer-path /opt/jaxmg-0.0.8
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --mp --routines potrs lu syevd --mp-tile 256
    # 2-D versus 1-D process grids for cuSOLVERMp on 8 GPUs:
    PYTHONPATH=. .venv/bin/python tools/benchmark.py --routines potrs syevd lu --grids 8x1 4x2 2x4 \\
        --mp --sizes 32768 65536

    # CPU smoke test on two forced host devices:
    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu PYTHONPATH=. \\
        .venv/bin/python tools/benchmark.py --sizes 256 512 --dtypes float32 --repeats 2 --out /tmp/bench

For every routine x dtype x N x device count (or grid) it times these implementations:

    jaxmg (auto)     jaxmg.<routine>(a, ..., tile_size=TILE): the library picks its engine
                     (JAX's own solver on one GPU or below a crossover N, else cuSOLVERMg).
                     lu: x = jaxmg.lu_solve(jaxmg.lu_factor(a, tile_size=TILE), b)
    jaxmg (mg)       the same with backend="jaxmg": always the distributed solver
    jaxmg (mp)       only with --mp: the same with backend="mp", cuSOLVERMp (CUDA GPUs only;
                     elsewhere the call's error is recorded). tile_size=--mp-tile, an upper
                     bound on cuSOLVERMp's block (no tile_size unless given: the library's
                     default block). It has no potri (n/a in the potri rows)
    jax native       JAX's solver on one device, jitted. potrs: cho_factor + cho_solve;
                     lu: jax.scipy.linalg.lu_factor + lu_solve; potri: cho_factor +
                     cho_solve against the identity; syevd: jnp.linalg.eigh
    jax native inv   potri only: jnp.linalg.inv
    JAXMg 0.0.8      only with --peer-path DIR, a directory filled by
                     `pip install --no-deps --target DIR jaxmg==0.0.8`; it has no LU
                     (n/a in the lu rows)
    jaxmg (mg, jit)  only with --per-call-overhead, at N=1024: jaxmg (mg) called from inside
                     the caller's own jax.jit, to show the Python cost of an eager call

Method: A is built on the devices, rows sharded P("x", None) over a 1-D mesh of the first
D devices, by a jitted function with those out_shardings in which every entry is a hash of
its row, its column and a seed: each device computes only its own rows, with no host copy,
no communication and no memory beyond its share of A, so orders like 65536 and 131072 can
be asked for (131072 in float64 is 128 GiB). W has entries of variance 1/N (uniform), so
its spectrum or singular values lie in about [-2, 2]; potrs and potri get the SPD
A = W + 3 I with W symmetric/Hermitian, syevd W itself, lu A = W + 3 I with W's entries
independent (not symmetric); condition numbers are at most about 5. b is (N, 1), standard
normal and replicated. Each measurement is one warm-up (compiling) call, then up to
--repeats timed calls (perf_counter around the call and jax.block_until_ready; fewer once
they have taken --budget seconds), alternating between two input matrices when
N <= 16384 and memory allows. Every timed result is checked on the devices: potrs and lu
||A x - b|| / (||A||_F ||x||), potri ||(X A - I)[rows]||_F / sqrt(rows), syevd
max_j ||A v_j - w_j v_j|| / max|w| (rows and columns sampled above N = 2048); a residual
above 100 sqrt(N) eps, or NaN, marks the measurement FAILED. A call that runs out of
memory (an exception, or a worker that died saying so) is recorded as OOM and the run
goes on; so is a case not even attempted because A alone exceeds 90% of the D devices'
memory (on CPU: four copies of A, as host memory exhaustion is no clean error; jax
native: two copies of A in one device, on CPU four in half of it). Other errors are
recorded likewise. float64 and complex128 turn on jax_enable_x64 in the workers (this
script's choice). --mem-fraction sets XLA_PYTHON_CLIENT_MEM_FRACTION for the workers
(JAX's pool is 75% of each GPU by default; cuSOLVERMg's workspace comes from that pool).

--grids RxC [RxC ...] (instead of --devices): each grid replaces a device count. A is built
the same way but in blocks P("r", "c") over jax.make_mesh((R, C), ("r", "c")) of the first
R*C devices (b replicated), and every implementation gets that A (jax native still copies
it to one device); with backend="mp" an R x C mesh runs on an R x C process grid (a 1-D
mesh on 1 x D), so e.g. --grids 8x1 4x2 2x4 compares 1-D and 2-D grids on 8 GPUs. The
residual checks then sum each block's product on the host. A grid needing more devices
than are visible is recorded as skipped ("skip" in the table) with the reason. Records
carry "grid": "RxC", the table a grid column and the plot's labels the grid; without
--grids there is no grid field or column.

--paired: jaxmg (auto) and jax native are warmed up, then called in alternation on the same
input (auto then native, native then auto, ...), each up to --repeats calls and --budget
seconds, so that a drift in the machine's speed falls on both alike; the table's auto/native
is then the median of the per-pair ratios, to three decimals (records: paired_ratio,
pair_ratios). With --devices 1 this is the one-GPU comparison of identical programs.
--impls auto native ... times only the implementations named.

--resume (with --out DIR): one run spread over several sittings, for grids longer than one
sitting may last (a device lent for 10 minutes at a time). The measurements in
DIR/benchmark.json are kept, those cut by --wall-budget are made again with the rest not
yet made, and the table, JSON and plot cover them all; each record says which sitting made
it ("sitting", an index into the JSON's "sittings": date, commit, command, seconds). A run
made with another --tile, --mp-tile, --donate, --mem-fraction, --paired or without the
peer is refused rather than mixed.

--largest: after the table, for potrs with jaxmg (mg) on the largest device count (or grid) and
each dtype, N doubles from the largest --sizes value until a call fails (out of memory,
or any other error), then the gap is bisected in steps of 8192. A size the table measured
(it ran, or ran out of memory) is taken from there; every other trial is one call with no
warm-up (its time includes compiling) in a fresh worker, and one whose A alone cannot fit
is not run. It reports the
largest N that ran and the fraction of memory its A takes: N^2 * itemsize over the D
GPUs' total memory (from nvidia-smi; host memory on CPU), and over JAX's pool. The dtypes
share --largest-budget seconds (default 300); a trial still running when its share is
spent is killed and the search reports what it found.

Output: one progress line per measurement, then a table of median times in ms, also
written with every raw figure and the machine's description to <out>/benchmark.json
(with the --largest search and its trials under "largest"), and a log-log plot of time
against N per routine to <out>/benchmark.png (skipped, with a note, when matplotlib is
missing). Worker logs go to <out>/logs/.

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
import functools
import gc
import itertools
import json
import math
import os
import pathlib
import platform
import queue
import re
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
ROUTINES = ("potrs", "lu", "potri", "syevd")
PEER_ROUTINES = ("potrs", "potri", "syevd")  # JAXMg 0.0.8 has no LU
DISPATCH_NAME = {"lu": "getrf"}  # jaxmg's name for a routine in its engine choice
DTYPES = ("float32", "float64", "complex64", "complex128")
DEFAULT_SIZES = (1024, 4096, 8192, 16384, 32768)

MP_ROUTINES = ("potrs", "lu", "syevd")  # backend="mp" (cuSOLVERMp) has no potri

AUTO, MG, MG_JIT, MP = "jaxmg (auto)", "jaxmg (mg)", "jaxmg (mg, jit)", "jaxmg (mp)"
NATIVE, NATIVE_INV, PEER = "jax native", "jax native inv", "JAXMg 0.0.8"
OURS_IMPLS = (AUTO, MG, MG_JIT, MP, NATIVE, NATIVE_INV)
TABLE_IMPLS = (AUTO, MG, MP, NATIVE, NATIVE_INV, PEER)
BACKEND = {AUTO: "auto", MG: "jaxmg", MG_JIT: "jaxmg", MP: "mp"}  # jaxmg's backend= per impl
IMPL_NAMES = {"auto": AUTO, "mg": MG, "mg-jit": MG_JIT, "mp": MP, "native": NATIVE, "native-inv": NATIVE_INV,
              "peer": PEER}

EVENT_PREFIX = "@@bench "
ROTATE_MAX_N = 16384  # above this, one input matrix is reused across repeats
OVERHEAD_N = 1024
FULL_CHECK_MAX_N = 2048  # above this, residuals are sampled on a few rows/columns
SAMPLES = 64
SHIFT = 3.0  # A = W + SHIFT I: W's spectrum (or singular values) lies in [-2, 2] ([0, 2])
LARGEST_STEP = 8192  # --largest bisects N in steps of this

OOM_PATTERN = re.compile(
    r"RESOURCE_EXHAUSTED|out of memory|could not allocate|ALLOC_FAILED|cudaErrorMemoryAllocation"
    r"|cuBLAS error 3 |bad_alloc|MemoryError|\bOOM\b", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Task:
    """One measurement: an implementation of a routine on one problem."""

    id: int
    routine: str
    dtype: str
    n: int
    devices: int  # devices the implementation uses (1 for jax native)
    impl: str
    grid: str | None = None  # "RxC" with --grids: A in blocks P("r", "c") over an R x C mesh


def grid_shape(grid: str) -> tuple[int, int]:
    r, c = grid.lower().split("x")
    return int(r), int(c)


def record_key(r: dict[str, Any]) -> tuple:
    return r["routine"], r["dtype"], r["n"], r["devices"], r["impl"], r.get("grid")


def series_key(task: Task) -> tuple:
    """One implementation's measurements across N (what --single-call-over predicts from)."""
    return task.routine, task.dtype, task.impl, task.devices, task.grid


def cut_by_budget(record: dict[str, Any]) -> bool:
    """Not made, or cut, because a time budget ran out: --resume makes it again."""
    return record.get("status") == "error" and "budget ran out" in str(record.get("error"))


def unit_name(d: int, grid: str | None) -> str:
    return grid or f"{d}dev"


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


def is_oom(text: str) -> bool:
    return bool(OOM_PATTERN.search(text or ""))


def error_result(exc: BaseException, prefix: str = "") -> dict[str, Any]:
    """A result for a measurement that raised: status "oom" when it ran out of memory."""
    text = prefix + short_error(exc)
    match = OOM_PATTERN.search(f"{type(exc).__name__}: {exc}")
    if match and not is_oom(text):  # say why, when the first line does not
        line = next(l for l in str(exc).splitlines() if OOM_PATTERN.search(l)).strip()
        text += f" [{line[:160]}]"
    return {"status": "oom" if match else "error", "error": text}


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory_bytes(device) -> int:
    """Memory JAX may allocate on `device` (host memory for CPU devices)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # CPU devices and some plugins do not report memory
        stats = {}
    return int(stats.get("bytes_limit") or host_memory_bytes())


def gpu_total_bytes(count: int) -> list[int] | None:
    """Physical memory of the first `count` visible GPUs (nvidia-smi), or None."""
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=60).stdout
        mib = {int(i): int(m) for i, m in (line.split(",") for line in text.strip().splitlines())}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        order = [int(i) for i in visible.split(",")] if visible else sorted(mib)
        return [mib[i] * 2**20 for i in order[:count]] if len(order) >= count else None
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return None


def machine_info() -> dict[str, Any]:
    import jax
    import jaxlib

    devices = jax.devices()
    on_gpu = devices[0].platform == "gpu"
    return {
        "platform": devices[0].platform,
        "device_count": len(devices),
        "device_kinds": [d.device_kind for d in devices],
        # What JAX's allocator may use (its pool; host memory for CPU devices) ...
        "device_memory_bytes": [device_memory_bytes(d) for d in devices],
        # ... and the devices' physical memory (GPUs only, from nvidia-smi).
        "device_total_bytes": gpu_total_bytes(len(devices)) if on_gpu else None,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "python": sys.version.split()[0],
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
    }


def _mix32(x):
    """The lowbias32 integer finaliser: a bijection on uint32 that scrambles all bits."""
    import jax.numpy as jnp

    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _uniform(lo, hi, salt, real_dtype):
    """Pseudo-random numbers in [-1, 1), one per (lo, hi) index pair (uint32 arrays)."""
    import jax.numpy as jnp

    h = _mix32(_mix32(lo * jnp.uint32(0x9E3779B1) + salt)
               ^ _mix32(hi * jnp.uint32(0x85EBCA77) + (salt ^ jnp.uint32(0x5BD1E995))))
    return (h >> 8).astype(real_dtype) * (2.0 ** -23) - 1


def test_matrix(n: int, dtype: str, kind: str, seed):
    """An N x N test matrix whose every entry is a hash of (its row, its column, seed).

    Nothing is communicated or gathered: under jax.jit with row-sharded out_shardings
    each device computes only its own rows. Entries of W have variance 1/N, so W's
    spectrum (symmetric/Hermitian W) or its singular values (general W) lie in about
    [-2, 2] ([0, 2]), and W + 3 I has a condition number of at most about 5.
    kind: "spd" W + 3 I with W symmetric/Hermitian; "wigner" W itself (for syevd);
    "general" W + 3 I with W's entries independent (not symmetric; for LU).
    """
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype)
    real = jnp.finfo(dtype).dtype
    is_complex = jnp.issubdtype(dtype, jnp.complexfloating)
    i = jax.lax.broadcasted_iota(jnp.uint32, (n, n), 0)
    j = jax.lax.broadcasted_iota(jnp.uint32, (n, n), 1)
    lo, hi = (i, j) if kind == "general" else (jnp.minimum(i, j), jnp.maximum(i, j))
    salt = _mix32(jnp.asarray(seed).astype(jnp.uint32))
    # Uniform on [-1, 1) has variance 1/3; complex entries split it between parts.
    scale = math.sqrt(3.0 / (2 * n if is_complex else n))
    a = _uniform(lo, hi, salt, real) * scale
    if is_complex:
        imag = _uniform(lo, hi, salt ^ jnp.uint32(0xC2B2AE35), real) * scale
        if kind != "general":  # Hermitian: conjugate below the diagonal, real on it
            imag = jnp.where(i > j, -imag, jnp.where(i == j, 0, imag))
        a = jax.lax.complex(a, imag)
    if kind != "wigner":
        a = jnp.where(i == j, a + SHIFT, a)
    return a.astype(dtype)


def too_big(n: int, itemsize: int, total: int, on_cpu: bool) -> str | None:
    """Why a problem is not even tried on devices with `total` bytes, or None.

    On GPUs a call that runs out of memory raises and is recorded as OOM, so
    anything that leaves room for A itself is tried. Host memory is not so
    forgiving (the kernel's OOM killer, swapping): on CPU, 4 copies must fit."""
    copies = 4 if on_cpu else 1
    need = copies * n * n * itemsize
    if need <= 0.9 * total:
        return None
    what = "4 copies of A need" if on_cpu else "A alone needs"
    return (f"not attempted: {what} {need / 2**30:.1f} GiB, more than 90% of the "
            f"{total / 2**30:.1f} GiB the device(s) have")


class Bench:
    """Builds inputs and implementations for one worker's tasks and times them."""

    def __init__(self, settings: dict[str, Any], lib) -> None:
        import jax

        self.settings = settings
        self.lib = lib
        self.devices = jax.devices()
        self.on_cpu = self.devices[0].platform == "cpu"
        # (routine, dtype, impl, devices, grid) -> {N: median seconds}, earlier sittings' included
        self.times: dict[tuple, dict[int, float]] = {}
        for *key, n, seconds in settings.get("known_times", []):
            self.times.setdefault(tuple(key), {})[n] = seconds

    def calls_for(self, task: Task) -> tuple[int, bool, float | None]:
        """(timed calls, warm-up?, predicted seconds): with --single-call-over S, a call
        predicted from this implementation's previous N (time x (N / N_prev)^3) to take
        more than S seconds is made once, without a warm-up, its compilation included."""
        repeats, warmup = self.settings["repeats"], self.settings.get("warmup", True)
        limit = self.settings.get("single_call_s")
        known = self.times.get(series_key(task), {})
        below = [n for n in known if n < task.n]
        if not (limit and warmup and below):
            return repeats, warmup, None
        n_prev = max(below)
        predicted = known[n_prev] * (task.n / n_prev) ** 3
        return (1, False, predicted) if predicted > limit else (repeats, warmup, predicted)

    def remember(self, task: Task, record: dict[str, Any]) -> dict[str, Any]:
        if record.get("median_ms") is not None and record.get("status") in ("ok", "failed"):
            self.times.setdefault(series_key(task), {})[task.n] = record["median_ms"] / 1e3
        return record

    # -- inputs -----------------------------------------------------------

    def sharding(self, n_devices: int, grid: str | None = None):
        """A's sharding: rows P("x", None) over a 1-D mesh of the first n_devices, or
        blocks P("r", "c") over an R x C mesh of the first R*C devices."""
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        if grid:
            r, c = grid_shape(grid)
            mesh = jax.make_mesh((r, c), ("r", "c"), devices=self.devices[:r * c])
            return NamedSharding(mesh, P("r", "c"))
        return NamedSharding(Mesh(np.array(self.devices[:n_devices]), ("x",)), P("x", None))

    def memory(self, n_devices: int) -> tuple[int, int]:
        """(one device's memory, the memory of n_devices together)."""
        one = device_memory_bytes(self.devices[0])
        return one, one if self.on_cpu else one * n_devices

    def input_count(self, n: int, dtype: str, n_devices: int) -> tuple[int, str | None]:
        """How many input matrices to rotate between, or why not even one is tried."""
        import numpy as np

        matrix = n * n * np.dtype(dtype).itemsize
        _, total = self.memory(n_devices)
        # Two inputs plus about three working matrices (the call's copy, its
        # result, the residual check) in 90% of the memory: rotate.
        if n <= ROTATE_MAX_N and (2 + 3) * matrix <= 0.9 * total:
            return 2, None
        reason = too_big(n, np.dtype(dtype).itemsize, total, self.on_cpu)
        return (0, reason) if reason else (1, None)

    def make_inputs(self, routine: str, n: int, dtype: str, sharding, count: int) -> list[tuple]:
        """`count` (A, b) pairs built where they live: A with `sharding`, b replicated."""
        import jax
        from jax.sharding import NamedSharding, PartitionSpec as P

        replicated = NamedSharding(sharding.mesh, P())
        kind = {"syevd": "wigner", "lu": "general"}.get(routine, "spd")
        make_a = jax.jit(lambda seed: test_matrix(n, dtype, kind, seed), out_shardings=sharding)
        make_b = jax.jit(lambda key: jax.random.normal(key, (n, 1), dtype), out_shardings=replicated)
        inputs = []
        for i in range(count):
            seed = 1000 * n + i
            a = jax.block_until_ready(make_a(seed % 2**31))
            inputs.append((a, jax.block_until_ready(make_b(jax.random.key(seed)))))
        # A donated A is rebuilt from its seed (deterministic) for the next call and the check.
        self.rebuild = lambda i: jax.block_until_ready(make_a((1000 * n + i) % 2**31))
        return inputs

    def live(self, inputs: list[tuple], k: int) -> tuple[tuple, float]:
        """Input pair k with A alive (rebuilt if a call donated it), and the rebuild's seconds."""
        a, b = inputs[k]
        if not a.is_deleted():
            return (a, b), 0.0
        start = time.perf_counter()
        a = self.rebuild(k)
        inputs[k] = (a, b)
        return (a, b), time.perf_counter() - start

    # -- implementations ----------------------------------------------------

    def implementation(self, task: Task, inputs: list[tuple], sharding) -> "Impl":
        if task.impl in (NATIVE, NATIVE_INV):
            return self.native(task, inputs)
        if task.impl == PEER:
            return self.peer(task, inputs, sharding)
        return self.ours(task, inputs, sharding)

    def ours(self, task: Task, inputs: list[tuple], sharding) -> "Impl":
        import jax

        jaxmg = self.lib
        backend = BACKEND[task.impl]
        # backend="mp": tile_size only bounds cuSOLVERMp's block; None = the library's default.
        tile = self.settings.get("mp_tile") if task.impl == MP else self.settings["tile"]
        kw: dict[str, Any] = {"backend": backend}
        if tile is not None:
            kw["tile_size"] = tile
        donate = bool(self.settings.get("donate")) and task.impl != MG_JIT
        if donate:
            kw["donate"] = True
        if task.impl == MG_JIT:
            kw.update(mesh=sharding.mesh, spec=sharding.spec)
        if task.routine == "potrs":
            fn = lambda a, b: jaxmg.potrs(a, b, **kw)
        elif task.routine == "lu":
            fn = lambda a, b: jaxmg.lu_solve(jaxmg.lu_factor(a, **kw), b)
        elif task.routine == "potri":
            fn = lambda a, b: jaxmg.potri(a, **kw)
        else:
            fn = lambda a, b: jaxmg.syevd(a, **kw)
        if task.impl == MG_JIT:
            fn = jax.jit(fn)
        engine, effective_tile = self.engine_of(task, inputs[0][0], tile, backend)
        if donate:
            return Impl(
                prepare=lambda k: self.live(inputs, k),
                call=fn,
                residual=lambda k, out: check(task.routine, self.live(inputs, k)[0], out),
                engine=engine,
                tile=effective_tile,
                note="donate=True: A is rebuilt between calls (not timed)",
            )
        return Impl(
            prepare=lambda k: (inputs[k], None),
            call=fn,
            residual=lambda k, out: check(task.routine, inputs[k], out),
            engine=engine,
            tile=effective_tile,
        )

    @staticmethod
    def engine_of(task: Task, a, tile: int | None, backend: str) -> tuple[str | None, int | None]:
        """Which engine jaxmg runs for this call, and its tile width (for "mp":
        cuSOLVERMp's block, which `tile` only bounds)."""
        try:
            from jaxmg._src import dispatch, distribution as dist

            placement = dist.resolve_placement(a, None, None)
            routine = DISPATCH_NAME.get(task.routine, task.routine)
            engine = dispatch.choose(routine, task.n, placement, backend)
            if engine == "mp":
                from jaxmg._src import mp

                return engine, mp.block_size(task.n, placement, tile)
            t = dist.choose_tile(task.n, placement.n_devices, tile) if engine == "jaxmg" else None
            return engine, t
        except Exception:  # private API: only for the report
            return None, None

    def native(self, task: Task, inputs: list[tuple]) -> "Impl":
        import jax
        import jax.numpy as jnp
        import jax.scipy.linalg as jsl
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        device = self.devices[0]
        one, _ = self.memory(1)
        matrix = task.n * task.n * np.dtype(task.dtype).itemsize
        # One device holds the copies: rotate only where they leave room to work.
        count = len(inputs) if (len(inputs) + 3) * matrix <= 0.9 * one else 1
        target = device
        if jax.sharding.AxisType.Explicit in inputs[0][0].sharding.mesh.axis_types:
            # A's type keeps an explicit mesh's sharding through device_put(x, device).
            target = NamedSharding(Mesh(np.array([device]), ("x",)), P())
        local = [tuple(jax.device_put(x, target) for x in pair) for pair in inputs[:count]]
        if task.routine == "potrs":
            fn = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b))
        elif task.routine == "lu":
            fn = jax.jit(lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b))
        elif task.routine == "potri" and task.impl == NATIVE:
            fn = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), jnp.eye(a.shape[0], dtype=a.dtype)))
        elif task.routine == "potri":
            fn = jax.jit(lambda a, b: jnp.linalg.inv(a))
        else:
            fn = jax.jit(lambda a, b: jnp.linalg.eigh(a))
        return Impl(
            prepare=lambda k: (local[k % count], None),
            call=fn,
            residual=lambda k, out: check(task.routine, local[k % count], out),
        )

    def peer(self, task: Task, inputs: list[tuple], sharding) -> "Impl":
        """JAXMg 0.0.8: positional (a, [b,] T_A, mesh, spec); it donates its inputs."""
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        peer = self.lib
        t_a = max(1, min(self.settings["tile"], task.n // task.devices))
        copy = jax.jit(lambda a, b: (jnp.copy(a), jnp.copy(b)))
        # Some JAXMg versions take potrs's specs as (spec_a, spec_b): tried second.
        mesh = sharding.mesh
        spec_choices = [sharding.spec, (sharding.spec, P(None, None))]
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
            if self.settings.get("donate"):  # no room for a copy: rebuild A instead
                (a, b), seconds = self.live(inputs, k)
                return (a, jax.block_until_ready(jnp.copy(b))), seconds
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
            residual=lambda k, out: self.peer_residual(task, self.live(inputs, k)[0], out, impl),
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
    if routine in ("potrs", "lu"):
        return check_solve(a, b, out)
    if routine == "potri":
        return check_potri(a, out)
    w, v = out
    return check_syevd(a, w, v)


# The checks read A in row chunks of at most this many bytes, one device at a time:
# a product with all of a large A in one XLA op can run out of memory by itself (the
# GPU autotuner copies an operand that size), after the solver it checks has worked.
CHECK_CHUNK_BYTES = 256 * 2**20


def _bounds(shard, shape) -> list[tuple[int, int]]:
    return [(sl.start or 0, dim if sl.stop is None else sl.stop) for sl, dim in zip(shard.index, shape)]


def _unique_shards(arr) -> list:
    """One addressable shard per distinct block (replicas are skipped)."""
    seen: dict[tuple, Any] = {}
    for shard in arr.addressable_shards:
        seen.setdefault(tuple(_bounds(shard, arr.shape)), shard)
    return list(seen.values())


def host_select(arr, rows=None, cols=None):
    """arr[rows][:, cols] of a 2-D array, as NumPy, read shard by shard: only the
    selected entries leave the devices, and nothing is gathered across them."""
    import jax.numpy as jnp
    import numpy as np

    rows = np.arange(arr.shape[0]) if rows is None else np.asarray(rows)
    cols = np.arange(arr.shape[1]) if cols is None else np.asarray(cols)
    out = np.empty((len(rows), len(cols)), dtype=arr.dtype)
    for shard in _unique_shards(arr):
        (r0, r1), (c0, c1) = _bounds(shard, arr.shape)
        ri = np.nonzero((rows >= r0) & (rows < r1))[0]
        ci = np.nonzero((cols >= c0) & (cols < c1))[0]
        if not len(ri) or not len(ci):
            continue
        block = shard.data
        if len(ri) < r1 - r0:
            block = block[jnp.asarray(rows[ri] - r0)]
        if len(ci) < c1 - c0:
            block = block[:, jnp.asarray(cols[ci] - c0)]
        out[np.ix_(ri, ci)] = np.asarray(block)
    return out


def _row_chunks(a) -> Iterator[tuple[int, tuple[int, int], Any, Any]]:
    """(first row, (first column, end column), device, chunk): each entry of A once,
    in single-device chunks of whole rows of its block."""
    import jax

    for shard in _unique_shards(a):
        (r0, r1), (c0, c1) = _bounds(shard, a.shape)
        rows_per_chunk = max(1, CHECK_CHUNK_BYTES // ((c1 - c0) * a.dtype.itemsize))
        rows = r1 - r0
        for start in range(0, rows, rows_per_chunk):
            size = min(rows_per_chunk, rows - start)
            chunk = shard.data if size == rows else jax.lax.dynamic_slice_in_dim(shard.data, start, size)
            yield r0 + start, (c0, c1), shard.device, chunk


@functools.cache
def _chunk_terms():
    import jax
    import jax.numpy as jnp

    def terms(chunk, v, target):
        r = jnp.matmul(chunk, v, precision=jax.lax.Precision.HIGHEST) - target
        return jnp.sum(jnp.abs(r) ** 2, axis=0), jnp.sum(jnp.abs(chunk) ** 2)

    return jax.jit(terms)


@functools.cache
def _chunk_product():
    import jax
    import jax.numpy as jnp

    def product(chunk, v):
        return jnp.matmul(chunk, v, precision=jax.lax.Precision.HIGHEST), jnp.sum(jnp.abs(chunk) ** 2)

    return jax.jit(product)


def product_residual(a, v, target) -> tuple[Any, float]:
    """For A (N, N) on the devices, V (N, k) and target(r0, r1) -> (r1 - r0, k) on the
    host: (per column, sum over rows of |A V - target|^2; ||A||_F^2)."""
    import jax
    import numpy as np

    on_device: dict[Any, Any] = {}
    columns, a_squared = np.zeros(v.shape[1]), 0.0
    if any(_bounds(s, a.shape)[1] != (0, a.shape[1]) for s in _unique_shards(a)):
        # A in blocks (--grids): each block's A[rows, cols] V[cols], summed on the host.
        product = _chunk_product()
        av = np.zeros((a.shape[0], v.shape[1]), dtype=np.result_type(a.dtype, np.float64))
        for r0, (c0, c1), device, chunk in _row_chunks(a):
            if (device, c0) not in on_device:
                on_device[device, c0] = jax.device_put(v[c0:c1].astype(a.dtype), device)
            part, a_sq = product(chunk, on_device[device, c0])
            av[r0:r0 + chunk.shape[0]] += np.asarray(part)
            a_squared += float(a_sq)
        columns = np.sum(np.abs(av - np.asarray(target(0, a.shape[0]))) ** 2, axis=0)
        return columns, a_squared
    terms = _chunk_terms()
    for r0, _, device, chunk in _row_chunks(a):
        if device not in on_device:
            on_device[device] = jax.device_put(v.astype(a.dtype), device)
        want = np.asarray(target(r0, r0 + chunk.shape[0]), dtype=a.dtype)
        col, a_sq = terms(chunk, on_device[device], jax.device_put(want, device))
        columns += np.asarray(col, dtype=np.float64)
        a_squared += float(a_sq)
    return columns, a_squared


def check_solve(a, b, x) -> float:
    """||A x - b|| / (||A||_F ||x||)."""
    import numpy as np

    n = a.shape[0]
    x, b = np.asarray(x).reshape(n, -1), np.asarray(b).reshape(n, -1)
    columns, a_squared = product_residual(a, x, lambda r0, r1: b[r0:r1])
    return float(math.sqrt(columns.sum()) / (math.sqrt(a_squared) * np.linalg.norm(x)))


def check_potri(a, inv) -> float:
    """||(X A - I)[rows]||_F / sqrt(rows), as ||A X[rows]^H - I[:, rows]||_F (A is Hermitian)."""
    import numpy as np

    rows = _samples(a.shape[0])
    v = host_select(inv, rows=rows).conj().T
    columns, _ = product_residual(a, v, lambda r0, r1: np.arange(r0, r1)[:, None] == rows[None, :])
    return float(math.sqrt(columns.sum()) / math.sqrt(len(rows)))


def check_syevd(a, w, v, vectors_in_columns: bool = True) -> float:
    """max_j ||A v_j - w_j v_j|| / max|w| over the sampled eigenpairs j."""
    import numpy as np

    cols = _samples(a.shape[0])
    vs = host_select(v, cols=cols) if vectors_in_columns else host_select(v, rows=cols).conj().T
    w = np.asarray(w)
    ws = w[cols]
    columns, _ = product_residual(a, vs, lambda r0, r1: vs[r0:r1] * ws[None, :])
    return float(math.sqrt(columns.max()) / np.max(np.abs(w)))


def _timed_call(impl: Impl, k: int, measured: dict[str, list]) -> float:
    """One timed call of `impl` on input k, its residual checked; its seconds."""
    import jax

    args, copy_s = impl.prepare(k)
    start = time.perf_counter()
    out = impl.call(*args)
    jax.block_until_ready(out)
    seconds = time.perf_counter() - start
    measured["times"].append(seconds)
    del args
    try:
        measured["residuals"].append(impl.residual(k, out))
    except Exception as exc:  # the timing stands; the result is unchecked
        measured["residuals"].append(float("nan"))
        impl.note = f"residual check failed: {short_error(exc)}"
    del out
    if copy_s is not None:
        measured["copies"].append(copy_s)
    return seconds


def _warm_up(impl: Impl) -> None:
    import jax

    args, _ = impl.prepare(0)
    jax.block_until_ready(impl.call(*args))


def time_impl(impl: Impl, n_inputs: int, repeats: int, budget_s: float,
              warmup: bool = True) -> dict[str, Any]:
    """Warm-up call, then timed calls (rotating inputs) until `repeats` or `budget_s`.
    Without the warm-up (--largest) the first timed call includes compilation."""
    if warmup:
        _warm_up(impl)
    measured: dict[str, list] = {"times": [], "copies": [], "residuals": []}
    for i in range(repeats):
        _timed_call(impl, (i + int(warmup)) % n_inputs, measured)  # the first timed call sees a new matrix
        if sum(measured["times"]) > budget_s:
            break
    return measured


def time_paired(impls: list[Impl], n_inputs: int, repeats: int, budget_s: float,
                warmup: bool = True) -> tuple[list[dict[str, Any]], list[float]]:
    """--paired: two implementations (warmed up unless `warmup` is False) called in
    alternation on the same input (AB, BA, AB, ...), so that drift in the machine's
    speed hits both alike; each gets up to `repeats` calls and `budget_s` seconds.
    Also returns the ratio of the first's time to the second's in each pair."""
    for impl in impls if warmup else ():
        _warm_up(impl)
    measured = [{"times": [], "copies": [], "residuals": []} for _ in impls]
    ratios = []
    for i in range(repeats):
        k = (i + int(warmup)) % n_inputs
        seconds = [0.0, 0.0]
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            seconds[j] = _timed_call(impls[j], k, measured[j])
        ratios.append(seconds[0] / seconds[1])
        if sum(sum(m["times"]) for m in measured) > 2 * budget_s:
            break
    return measured, ratios


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
    sharding = bench.sharding(n_devices, next((t.grid for t in tasks if t.grid), None))
    n_inputs, skip = bench.input_count(n, dtype, n_devices)
    if settings["repeats"] == 1 and not settings.get("warmup", True):
        n_inputs = min(n_inputs, 1)  # one call in all (--largest): one input is enough
    if skip:
        for task in tasks:
            emit(event="result", id=task.id, status="oom", error=skip, attempted=False)
        return
    try:
        inputs = bench.make_inputs(routine, n, dtype, sharding, n_inputs)
    except Exception as exc:
        result = error_result(exc, "inputs: ")
        for task in tasks:
            emit(event="result", id=task.id, **result)
        del exc
        gc.collect()
        return
    pair = paired_tasks(tasks) if settings.get("paired") else None
    for task in tasks:
        if pair and task is pair[1]:
            continue  # measured with pair[0]
        if pair and task is pair[0]:
            # A crash during the pair is charged to its first task; the second is made again.
            emit(event="start", id=pair[0].id)
            results = run_pair(bench, pair, inputs, sharding, n_inputs, settings)
            emit(event="result", id=pair[0].id, **results[0])
            emit(event="start", id=pair[1].id)
            emit(event="result", id=pair[1].id, **results[1])
            gc.collect()
            continue
        emit(event="start", id=task.id)
        emit(event="result", id=task.id, **run_task(bench, task, inputs, sharding, n_inputs, settings))
        gc.collect()
    del inputs
    gc.collect()


def paired_tasks(tasks: list[Task]) -> tuple[Task, Task] | None:
    """--paired: the (jaxmg (auto), jax native) tasks of one problem, if both are there."""
    auto = next((t for t in tasks if t.impl == AUTO), None)
    native = next((t for t in tasks if t.impl == NATIVE), None)
    return (auto, native) if auto and native else None


def native_skip(bench: Bench, task: Task) -> dict[str, Any] | None:
    """The result of a jax native task whose copies of A cannot fit one device, else None."""
    import numpy as np

    if task.impl not in (NATIVE, NATIVE_INV):
        return None
    one, _ = bench.memory(1)
    matrix = task.n * task.n * np.dtype(task.dtype).itemsize
    # A whole on one device and its result, at the least (on CPU: 4 copies in
    # half the host memory, as a crash there is not a clean error).
    copies, share = (4, 0.5) if bench.on_cpu else (2, 0.95)
    if copies * matrix <= share * one:
        return None
    return {"status": "oom", "attempted": False,
            "error": f"not attempted: {copies} copies of A ({copies * matrix / 2**30:.1f} "
                     f"GiB) exceed {share:.0%} of one device ({one / 2**30:.1f} GiB)"}


def run_task(bench: Bench, task: Task, inputs: list[tuple], sharding, n_inputs: int,
             settings: dict[str, Any]) -> dict[str, Any]:
    skip = native_skip(bench, task)
    if skip:
        return skip
    repeats, warmup, predicted = bench.calls_for(task)
    try:
        impl = bench.implementation(task, inputs, sharding)
        measured = time_impl(impl, n_inputs, repeats, settings["budget_s"], warmup)
        record = summarise(task, measured, impl, n_inputs, task.dtype)
    except Exception as exc:
        return error_result(exc)
    if not warmup and settings.get("warmup", True):
        record.update(single_call=True, predicted_s=predicted)
    return bench.remember(task, record)


def run_pair(bench: Bench, pair: tuple[Task, Task], inputs: list[tuple], sharding, n_inputs: int,
             settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Both tasks of a --paired problem, timed in alternation. If either cannot
    run (memory, an error), each is measured on its own instead."""
    plans = [bench.calls_for(t) for t in pair]
    warmup = all(w for _, w, _ in plans)  # one of them predicted long: one pair, cold
    try:
        if native_skip(bench, pair[1]):
            raise RuntimeError("jax native does not fit one device")
        impls = [bench.implementation(t, inputs, sharding) for t in pair]
        measured, ratios = time_paired(impls, n_inputs, settings["repeats"] if warmup else 1,
                                       settings["budget_s"], warmup)
    except Exception:
        gc.collect()
        return [run_task(bench, t, inputs, sharding, n_inputs, settings) for t in pair]
    results = [summarise(t, m, impl, n_inputs, t.dtype) for t, m, impl in zip(pair, measured, impls)]
    results[0].update(paired_ratio=statistics.median(ratios), pair_ratios=ratios)
    for result, (_, _, predicted) in zip(results, plans):
        if not warmup:
            result.update(single_call=True, predicted_s=predicted)
    return [bench.remember(t, r) for t, r in zip(pair, results)]


# ---------------------------------------------------------------------------
# Driver side: plans the tasks, runs the workers, prints and writes results.
# ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring (tools/benchmark.py) for the method and outputs.")
    parser.add_argument("--routines", nargs="+", choices=ROUTINES, default=list(ROUTINES),
                        metavar="R", help="potrs, lu, potri and/or syevd (default: all four)")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES), metavar="N",
                        help="matrix orders (default: %(default)s)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["float32", "float64"],
                        metavar="T", help=f"{', '.join(DTYPES)} (default: float32 float64)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--devices", nargs="+", type=int, metavar="D",
                       help="device counts to run jaxmg on (default: all visible devices)")
    where.add_argument("--grids", nargs="+", type=grid_arg, metavar="RxC",
                       help="instead of device counts: R x C meshes of the first R*C devices, "
                            "A in blocks P(\"r\", \"c\") (e.g. 8x1 4x2 2x4)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls after the warm-up (default 5)")
    parser.add_argument("--tile", type=int, default=1024,
                        help="block-cyclic tile T_A for jaxmg and JAXMg (default 1024)")
    parser.add_argument("--mp", action="store_true",
                        help="also time jaxmg (mp): backend=\"mp\", cuSOLVERMp (potrs, lu, syevd; "
                             "CUDA GPUs only)")
    parser.add_argument("--mp-tile", type=int, metavar="N",
                        help="tile_size for jaxmg (mp), an upper bound on cuSOLVERMp's block "
                             "(default: none passed, the library picks its block)")
    parser.add_argument("--peer-path", type=pathlib.Path, metavar="DIR",
                        help="where `pip install --no-deps --target DIR jaxmg==0.0.8` put JAXMg")
    parser.add_argument("--impls", nargs="+", choices=list(IMPL_NAMES), metavar="I",
                        help="time only these: " + ", ".join(IMPL_NAMES) + " (default: all that "
                             "apply; mp implies --mp, peer needs --peer-path)")
    parser.add_argument("--paired", action="store_true",
                        help="time jaxmg (auto) and jax native in alternation on the same inputs "
                             "(AB, BA, ...); auto/native is then the median of the pairs' ratios")
    parser.add_argument("--single-call-over", type=float, metavar="S",
                        help="make a call predicted (from the previous N, scaled by N^3) to take "
                             "over S seconds once, without a warm-up: its time includes compiling")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out: keep its measurements, make only those "
                             "missing or cut by --wall-budget, write one table of all")
    parser.add_argument("--per-call-overhead", action="store_true",
                        help=f"also time jaxmg (mg) called inside jax.jit at N={OVERHEAD_N}")
    parser.add_argument("--budget", type=float, default=60.0, metavar="S",
                        help="stop a measurement's timed calls after S seconds (default 60)")
    parser.add_argument("--task-timeout", type=float, default=1800.0, metavar="S",
                        help="kill a worker silent for S seconds (default 1800)")
    parser.add_argument("--wall-budget", type=float, metavar="S",
                        help="stop the table after S seconds in all: the measurements not yet "
                             "made are recorded as not run, and the table and JSON still written")
    parser.add_argument("--largest", action="store_true",
                        help="after the table, search the largest N potrs runs at on the most "
                             "devices (per dtype; doubling, then bisecting in steps of "
                             f"{LARGEST_STEP})")
    parser.add_argument("--largest-budget", type=float, default=300.0, metavar="S",
                        help="wall-clock seconds for the whole --largest search (default 300)")
    parser.add_argument("--donate", action="store_true",
                        help="jaxmg gets donate=True and JAXMg's inputs are rebuilt rather than "
                             "copied: one copy of A in memory, for N beyond half the devices")
    parser.add_argument("--mem-fraction", type=float, metavar="F",
                        help="set XLA_PYTHON_CLIENT_MEM_FRACTION=F for the workers (default: "
                             "leave the environment's, JAX's default 0.75 if unset)")
    parser.add_argument("--out", type=pathlib.Path,
                        help="output folder (default results/<date>-<platform>)")
    parser.add_argument("--worker", choices=["ours", "peer", "info"], help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.tile < 1 or any(n < 1 for n in args.sizes):
        parser.error("--repeats, --tile and --sizes must be positive")
    if args.mp_tile is not None and args.mp_tile < 1:
        parser.error("--mp-tile must be positive")
    if args.mem_fraction is not None and not 0 < args.mem_fraction <= 1:
        parser.error("--mem-fraction must be in (0, 1]")
    args.routines = [r for r in ROUTINES if r in args.routines]  # fixed order, no repeats
    args.sizes = sorted(set(args.sizes))
    args.dtypes = [t for t in DTYPES if t in args.dtypes]
    if args.grids:
        args.grids = list(dict.fromkeys(args.grids))  # the order given, no repeats
    if args.impls:
        args.impls = [IMPL_NAMES[i] for i in dict.fromkeys(args.impls)]
        args.mp = args.mp or MP in args.impls
        if PEER in args.impls and not args.peer_path:
            parser.error("--impls peer needs --peer-path")
    if args.resume and not args.out:
        parser.error("--resume needs --out, the folder of the run to continue")
    return args


def wanted(args: argparse.Namespace, impl: str) -> bool:
    return not args.impls or impl in args.impls


def grid_arg(text: str) -> str:
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip().lower())
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a grid RxC such as 4x2")
    return f"{int(match[1])}x{int(match[2])}"


def plan_tasks(args: argparse.Namespace, units: list[tuple[int, str | None]],
               visible: int) -> list[tuple[str, int, str | None, list[Task]]]:
    """Tasks in the order they run, grouped by worker: (kind, devices, grid, tasks).
    units: (device count, None) per --devices count, or (R*C, "RxC") per --grids grid."""
    ids = itertools.count(1)
    plan = []
    native_unit = next((u for u in units if u[0] <= visible), None)
    for d, grid in units:
        ours: list[Task] = []
        peer: list[Task] = []
        for routine, dtype, n in itertools.product(args.routines, args.dtypes, args.sizes):
            impls = [AUTO, MG]
            if args.mp and routine in MP_ROUTINES:
                impls.append(MP)
            if args.per_call_overhead and n == OVERHEAD_N:
                impls.append(MG_JIT)
            for impl in impls:
                if wanted(args, impl):
                    ours.append(Task(next(ids), routine, dtype, n, d, impl, grid))
            if (d, grid) == native_unit:  # jax native is one-device: measured once
                for impl in (NATIVE, NATIVE_INV) if routine == "potri" else (NATIVE,):
                    if wanted(args, impl):
                        ours.append(Task(next(ids), routine, dtype, n, 1, impl))
        if ours:
            plan.append(("ours", d, grid, ours))
        if args.peer_path and wanted(args, PEER):
            for routine, dtype, n in itertools.product(args.routines, args.dtypes, args.sizes):
                if routine in PEER_ROUTINES:
                    peer.append(Task(next(ids), routine, dtype, n, d, PEER, grid))
            if peer:
                plan.append(("peer", d, grid, peer))
    return plan


def worker_env(kind: str, n_devices: int, info: dict[str, Any],
               mem_fraction: float | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if mem_fraction is not None:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(mem_fraction)
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
               log_path: pathlib.Path, timeout_s: float,
               deadline: float | None = None) -> Iterator[dict[str, Any]]:
    """Runs a worker over `tasks`, yielding its events. If it crashes or stalls,
    the task in flight (or the problem whose inputs it was building) is reported
    as an error (as OOM when its log says so) and a new worker takes the rest.
    Past `deadline` (time.monotonic()) the worker is killed and nothing restarts."""
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
                    wait = timeout_s
                    if deadline is not None:
                        wait = min(wait, max(0.0, deadline - time.monotonic()))
                    try:
                        line = lines.get(timeout=wait)
                    except queue.Empty:
                        if wait < timeout_s:
                            failure = "time budget ran out: worker killed"
                        else:
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
        status = "oom" if is_oom(failure) else "error"
        for task_id in lost:
            yield {"event": "result", "id": task_id, "status": status, "error": failure}
        remaining = [t for t in remaining if t.id not in lost]
        if deadline is not None and time.monotonic() >= deadline:
            for task in remaining:
                yield {"event": "result", "id": task.id, "status": "error",
                       "error": "time budget ran out: not run"}
            return


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


def probe_machine(log_path: pathlib.Path, mem_fraction: float | None = None) -> dict[str, Any]:
    """Device list and versions, from a short-lived worker (the driver never starts JAX)."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    if mem_fraction is not None:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(mem_fraction)
    info, error = None, "it printed nothing"
    for event in run_worker("info", [Task(0, "", "", 0, 0, "")], {}, env, log_path, 600):
        if event["event"] == "info":
            info = {k: v for k, v in event.items() if k != "event"}
        elif event.get("status") == "error":
            error = event["error"]
    if info is None:
        raise SystemExit(f"benchmark: cannot start JAX: {error} (see {log_path})")
    return info


RESUME_SETTINGS = ("tile", "mp", "mp_tile", "mem_fraction", "donate", "paired", "peer_path")


def previous_run(path: pathlib.Path, settings: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[tuple, dict]]:
    """--resume: the earlier sittings of the run in `path` and its finished measurements
    by record_key (those cut by a time budget are made again). Exits if the run's
    settings differ from this one's where they change what is measured."""
    if not path.is_file():
        print(f"--resume: no {path} yet: starting the run", flush=True)
        return [], {}
    try:
        report = json.loads(path.read_text())
        old = report["settings"]
        results = report["results"]
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"--resume: cannot read {path} ({short_error(exc)}); give a new --out")
    # Unset, False and None alike: a JSON from before an option existed did not use it.
    differ = [f"{k}={old.get(k)!r} there, {settings.get(k)!r} now" for k in RESUME_SETTINGS
              if k != "peer_path" and (old.get(k) or None) != (settings.get(k) or None)]
    if bool(old.get("peer_path")) != bool(settings.get("peer_path")):
        differ.append("JAXMg 0.0.8 (--peer-path) in one sitting only")
    if differ:
        sys.exit(f"--resume: {path} was measured with other settings ({'; '.join(differ)}); "
                 "rerun with those, or give a new --out")
    sittings = report.get("sittings") or [{k: report.get(k) for k in ("date", "command", "git", "elapsed_s")}]
    finished = {record_key(r): r for r in results if not cut_by_budget(r)}
    return sittings, finished


def kept_record(task: Task, earlier: dict[str, Any]) -> dict[str, Any]:
    """An earlier sitting's measurement under this sitting's task id."""
    record = {**earlier, **dataclasses.asdict(task)}
    record.setdefault("sitting", 0)
    if record["grid"] is None:
        del record["grid"]
    return record


def git_commit() -> dict[str, Any]:
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def progress_line(index: int, total: int, task: Task, record: dict[str, Any]) -> str:
    grid = f" grid={task.grid}" if task.grid else ""
    head = f"[{index}/{total}] {task.routine} {task.dtype} N={task.n} devices={task.devices}{grid} {task.impl}:"
    status = record["status"]
    if status in ("error", "skipped", "oom"):
        return f"{head} {'OOM' if status == 'oom' else status}: {record.get('error')}"
    resid = record.get("residual")
    text = f"{head} {format_ms(record['median_ms'])} ms (min {format_ms(record['min_ms'])}, "
    text += f"resid {resid:.1e})" if resid is not None else "resid NaN)"
    if record.get("engine"):
        width = "block" if record["engine"] == "mp" else "tile"
        text += f" [engine {record['engine']}" + (f", {width} {record['tile']}]" if record.get("tile") else "]")
    if "copy_ms" in record:
        text += f" [+ input copy {format_ms(statistics.median(record['copy_ms']))} ms]"
    if record.get("single_call"):
        predicted = record.get("predicted_s")
        text += " [one call, compiling included" + (f": predicted {predicted:.3g} s]" if predicted else "]")
    if record.get("paired_ratio") is not None:
        text += f" [paired with jax native: ratio {record['paired_ratio']:.3f} over {len(record['pair_ratios'])}]"
    if status == "failed":
        text += f" FAILED (tolerance {record['tolerance']:.1e})"
    if record.get("note") and "residual check failed" in record["note"]:
        text += f" [{record['note']}]"
    return text


def format_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def build_table(records: list[dict[str, Any]], units: list[tuple[int, str | None]],
                args: argparse.Namespace) -> tuple[str, list[str]]:
    """The summary table and its footnotes (errors are numbered E1, E2, ...)."""
    by_key = {record_key(r): r for r in records}
    impls = [i for i in TABLE_IMPLS
             if (i != NATIVE_INV or "potri" in args.routines) and (i != PEER or args.peer_path)
             and (i != MP or args.mp) and wanted(args, i)]
    header = ["routine", "dtype", "N", "dev"] + (["grid"] if args.grids else []) + impls + [
        "auto engine", "auto/native"]
    rows, errors = [], []

    def cell(record: dict[str, Any] | None) -> str:
        if record is None:
            return "-"
        if record["status"] == "skipped":
            return "skip"
        if record["status"] == "oom":
            return "OOM"
        if record["status"] == "error":
            errors.append(record["error"])
            return f"E{len(errors)}"
        return (format_ms(record["median_ms"]) + ("~" if record.get("single_call") else "")
                + ("!" if record["status"] == "failed" else ""))

    for routine, dtype, n, (d, grid) in itertools.product(args.routines, args.dtypes, args.sizes, units):
        found = {}
        for impl in impls:
            one_device = impl in (NATIVE, NATIVE_INV)
            found[impl] = by_key.get((routine, dtype, n, 1, impl, None) if one_device
                                     else (routine, dtype, n, d, impl, grid))
        if routine != "potri":
            found.pop(NATIVE_INV, None)
        cells = {i: cell(found.get(i)) for i in impls}
        if PEER in cells and routine not in PEER_ROUTINES:
            cells[PEER] = "n/a"
        if MP in cells and routine not in MP_ROUTINES:
            cells[MP] = "n/a"
        auto, native = found.get(AUTO), found.get(NATIVE)
        ratio = "-"
        if auto and auto.get("paired_ratio") is not None:
            ratio = f"{auto['paired_ratio']:.3f}" + ("~" if auto.get("single_call") else "")
        elif auto and native and auto.get("median_ms") and native.get("median_ms"):
            ratio = f"{auto['median_ms'] / native['median_ms']:.2f}"
        engine = (auto or {}).get("engine") or "-"
        rows.append([routine, dtype, str(n), str(d)] + ([grid] if args.grids else [])
                    + [cells[i] for i in impls] + [engine, ratio])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(h.rjust(w) if i >= 2 else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines), errors


def table_notes(records: list[dict[str, Any]], args: argparse.Namespace, errors: list[str]) -> list[str]:
    notes = [
        "Median ms over the timed calls (min and every call in benchmark.json). '!' = FAILED: "
        "residual above 100 sqrt(N) eps or NaN. 'OOM' = ran out of memory, or was not "
        "attempted because A could not fit (the reason is in benchmark.json).",
        (f"jaxmg (auto) and (mg) get tile_size={args.tile} (capped at N/devices; LU on GPUs at 256) "
         + ("and donate=True: A is rebuilt between calls, untimed, as for JAXMg."
            if args.donate else "and do not donate a, so their time includes the copy of a the "
            "solver works in.")),
        "jax native runs on one device whatever the dev column says; its potri is "
        "cho_factor + cho_solve(A, I), jax native inv is jnp.linalg.inv. "
        "auto/native < 1: jaxmg (auto) is faster."
        + (" --paired: auto and native were called in alternation on the same input, and "
           "auto/native (3 decimals) is the median of the pairs' ratios." if args.paired else ""),
    ]
    if any(r.get("single_call") for r in records):
        notes.append("'~' = one call without a warm-up (--single-call-over: predicted from the previous N "
                     "to take longer), so its time includes compiling; a paired ratio marked '~' compares "
                     "two such calls.")
    if args.mp:
        notes.append(
            "jaxmg (mp) = backend=\"mp\" (cuSOLVERMp, CUDA GPUs only) with "
            + (f"tile_size={args.mp_tile}, an upper bound on its block"
               if args.mp_tile is not None else "no tile_size (the library's default block)")
            + (", donate=True" if args.donate else "")
            + "; its effective block is the record's \"tile\" in benchmark.json. "
            "It has no potri (n/a).")
    if args.grids:
        notes.append(
            "grid RxC: A in blocks P(\"r\", \"c\") over jax.make_mesh((R, C), (\"r\", \"c\")) of "
            "the first R*C devices (b replicated); jaxmg (mp) runs on an R x C process grid."
            + (" skip = the grid needs more devices than are visible."
               if any(r["status"] == "skipped" for r in records) else ""))
    if "lu" in args.routines:
        notes.append("lu = lu_factor + lu_solve of a non-symmetric A (jax native: "
                     "jax.scipy.linalg.lu_factor + lu_solve)"
                     + ("; JAXMg 0.0.8 has no LU (n/a)." if args.peer_path else "."))
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


def overhead_lines(records: list[dict[str, Any]], units: list[tuple[int, str | None]],
                   args: argparse.Namespace) -> list[str]:
    by_key = {record_key(r): r for r in records}
    lines = [f"Per-call overhead at N={OVERHEAD_N}: jaxmg (mg) called eagerly vs inside jax.jit "
             "(median ms)"]
    for routine, dtype, (d, grid) in itertools.product(args.routines, args.dtypes, units):
        eager = by_key.get((routine, dtype, OVERHEAD_N, d, MG, grid), {}).get("median_ms")
        jitted = by_key.get((routine, dtype, OVERHEAD_N, d, MG_JIT, grid), {}).get("median_ms")
        where = f"grid={grid}" if grid else f"dev={d}"
        if eager is None or jitted is None:
            lines.append(f"  {routine} {dtype} {where}: not measured")
            continue
        lines.append(f"  {routine} {dtype} {where}: eager {format_ms(eager)}, jit {format_ms(jitted)}, "
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
    multi = len({(r["devices"], r.get("grid")) for r in records
                 if r["impl"] not in (NATIVE, NATIVE_INV)}) > 1
    fig, axes = plt.subplots(1, len(args.routines), figsize=(6 * len(args.routines), 4.8), squeeze=False)
    styles = ["-", "--", ":", "-."]
    markers = "osD^v<>p*h"
    # One colour and marker per implementation and device count (or grid), the same in every panel.
    labels = sorted({(r["impl"], r["devices"], r.get("grid") or "") for r in records if r["impl"] != MG_JIT})
    for ax, routine in zip(axes[0], args.routines):
        series: dict[tuple[str, str, int, str], list[tuple[int, float]]] = {}
        for r in records:
            if r["routine"] == routine and r["impl"] != MG_JIT and r.get("median_ms") is not None:
                key = (r["impl"], r["dtype"], r["devices"], r.get("grid") or "")
                series.setdefault(key, []).append((r["n"], r["median_ms"]))
        for (impl, dtype, d, grid), points in sorted(series.items()):
            points.sort()
            index = labels.index((impl, d, grid))
            where = f" {grid}" if grid else f" {d} dev" if multi and impl not in (NATIVE, NATIVE_INV) else ""
            ax.plot([p[0] for p in points], [p[1] for p in points], color=f"C{index % 10}",
                    linestyle=styles[args.dtypes.index(dtype) % len(styles)],
                    marker=markers[index % len(markers)], label=impl + where + f" {dtype}")
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


ITEMSIZE = {"float32": 4, "float64": 8, "complex64": 8, "complex128": 16}


def find_largest(args: argparse.Namespace, info: dict[str, Any], units: list[tuple[int, str | None]],
                 records: list[dict[str, Any]], settings: dict[str, Any],
                 out: pathlib.Path) -> list[dict[str, Any]]:
    """--largest: per dtype, the largest N at which jaxmg (mg) potrs runs on the most devices.

    From the largest --sizes value, N doubles until a call fails (out of memory, or any
    other error), then the gap is bisected in steps of LARGEST_STEP; a size the table
    measured (it ran, or ran out of memory) is taken from there. Each other trial is one
    call (no warm-up, so its time includes compiling) in a fresh worker; trials whose A
    alone cannot fit are not run. The
    dtypes share --largest-budget seconds; a trial still running when its share is
    spent is killed, and the search reports what it found so far. With --grids: on the
    first grid of the most devices."""
    d = max(u[0] for u in units)
    grid = next(g for u, g in units if u == d)
    on_cpu = info["platform"] == "cpu"
    pool = info["device_memory_bytes"][0] if on_cpu else sum(info["device_memory_bytes"][:d])
    totals = info.get("device_total_bytes")
    physical = pool if on_cpu else (sum(totals[:d]) if totals else None)
    by_key = {record_key(r): r for r in records}
    ids = itertools.count(max([r["id"] for r in records], default=0) + 1)
    env = worker_env("ours", d, info, args.mem_fraction)
    trial_settings = {**settings, "repeats": 1, "warmup": False}
    end = time.monotonic() + args.largest_budget
    found = []
    for index, dtype in enumerate(args.dtypes):
        share_end = time.monotonic() + max(0.0, end - time.monotonic()) / (len(args.dtypes) - index)
        itemsize = ITEMSIZE[dtype]
        trials: list[dict[str, Any]] = []

        def trial(n: int) -> str:
            """Runs potrs at n: "ok", "fail" (OOM or another error) or "budget"."""
            entry: dict[str, Any] = {"n": n, "matrix_bytes": n * n * itemsize}
            reason = too_big(n, itemsize, pool, on_cpu)  # as the worker would decide
            known = by_key.get(("potrs", dtype, n, d, MG, grid))
            if known and (known["status"] == "ok" or (known["status"] == "oom"
                                                      and known.get("attempted", True))):
                entry.update(from_table=True, **{k: known[k] for k in (
                    "status", "median_ms", "residual", "error") if known.get(k) is not None})
                trials.append(entry)
                return "ok" if known["status"] == "ok" else "fail"
            if reason:
                entry.update(status="oom", attempted=False, error=reason)
            elif time.monotonic() >= share_end:
                return "budget"
            else:
                task = Task(next(ids), "potrs", dtype, n, d, MG, grid)
                result: dict[str, Any] = {"status": "error", "error": "no result"}
                started = time.monotonic()
                for event in run_worker("ours", [task], trial_settings, env,
                                        out / "logs" / f"largest-{unit_name(d, grid)}.log", args.task_timeout,
                                        deadline=share_end):
                    if event["event"] == "result":
                        result = event
                entry["wall_s"] = round(time.monotonic() - started, 1)
                entry["status"] = result["status"]
                for key in ("median_ms", "residual", "error", "note", "engine", "tile", "attempted"):
                    if result.get(key) is not None:
                        entry[key] = result[key]
                if "time budget ran out" in str(result.get("error")):
                    entry["status"] = "budget"
            trials.append(entry)
            line = f"--largest {dtype} N={n} devices={d}" + (f" grid={grid}: " if grid else ": ")
            if entry["status"] == "ok":
                line += f"ran, first call {entry['median_ms'] / 1e3:.1f} s (incl. compile)"
            else:
                line += f"{entry['status']}: {entry.get('error') or entry.get('note')}"
            print(line, flush=True)
            return {"ok": "ok", "budget": "budget"}.get(entry["status"], "fail")

        lo, hi, stopped = 0, None, None
        first = max(args.sizes)
        outcome = trial(first)  # from the table when it was measured there
        if outcome == "ok":
            lo = first
        elif outcome == "fail":
            hi = first
        else:
            stopped = "budget"
        while stopped is None and hi is None:
            outcome = trial(2 * lo)
            if outcome == "ok":
                lo *= 2
            elif outcome == "fail":
                hi = 2 * lo
            else:
                stopped = "budget"
        while stopped is None and hi - lo > LARGEST_STEP:
            mid = (lo + hi) // 2 // LARGEST_STEP * LARGEST_STEP
            mid = mid if mid > lo else lo + LARGEST_STEP
            if mid >= hi:
                break
            outcome = trial(mid)
            if outcome == "ok":
                lo = mid
            elif outcome == "fail":
                hi = mid
            else:
                stopped = "budget"
        best = next((t for t in trials if t["n"] == lo and t["status"] == "ok"), None)
        bound = next((t for t in trials if t["n"] == hi), None) if hi is not None else None
        matrix = lo * lo * itemsize
        found.append({
            "dtype": dtype, "devices": d, **({"grid": grid} if grid else {}), "impl": MG,
            "largest_n": lo or None,
            "matrix_bytes": matrix,
            "fraction_of_total_memory": matrix / physical if physical else None,
            "fraction_of_jax_pool": matrix / pool,
            "total_memory_bytes": physical, "jax_pool_bytes": pool,
            "time_ms": best.get("median_ms") if best else None,
            "time_from_table": bool(best and best.get("from_table")),
            "smallest_failing_n": hi,
            "failure": (bound or {}).get("error") or (bound or {}).get("note"),
            "failure_status": (bound or {}).get("status"),
            "complete": stopped is None, "trials": trials,
        })
    return found


def largest_lines(found: list[dict[str, Any]], args: argparse.Namespace, on_cpu: bool) -> list[str]:
    if not found:
        return []
    memory = "host memory" if on_cpu else "total GPU memory"
    grid = f" (grid {found[0]['grid']})" if found[0].get("grid") else ""
    lines = [f"Largest N for potrs, jaxmg (mg) on {found[0]['devices']} device(s){grid} (one call per "
             f"trial, steps of {LARGEST_STEP}, budget {args.largest_budget:.0f} s):"]
    for f in found:
        head = f"  {f['dtype']}: "
        if not f["largest_n"]:
            text = head + "no N ran"
            if f["smallest_failing_n"]:
                text += f" (N={f['smallest_failing_n']}: {f['failure_status']}: {f['failure']})"
            if not f["complete"]:
                text += "; search cut short by the time budget"
            lines.append(text)
            continue
        text = head + f"N={f['largest_n']} ran"
        if f["time_ms"] is not None:
            text += f" ({f['time_ms'] / 1e3:.1f} s, " + (
                "median in the table)" if f["time_from_table"] else "one call incl. compiling)")
        text += f"; A = {f['matrix_bytes'] / 2**30:.1f} GiB = "
        if f["fraction_of_total_memory"] is not None:
            text += (f"{f['fraction_of_total_memory']:.1%} of the {memory} "
                     f"({f['total_memory_bytes'] / 2**30:.1f} GiB)")
            if not on_cpu:
                text += f", {f['fraction_of_jax_pool']:.1%} of JAX's pool"
        else:
            text += f"{f['fraction_of_jax_pool']:.1%} of JAX's pool ({f['jax_pool_bytes'] / 2**30:.1f} GiB)"
        if f["smallest_failing_n"]:
            text += f"; N={f['smallest_failing_n']}: {f['failure_status']}"
            if f["failure"]:
                text += f" ({f['failure']})"
        if not f["complete"]:
            text += "; search cut short by the time budget"
        lines.append(text)
    return lines


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
    info = probe_machine(scratch / "probe.log", args.mem_fraction)
    out = args.out or REPO_ROOT / "results" / f"{started:%Y-%m-%d}-{info['platform']}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    (scratch / "probe.log").replace(out / "logs" / "probe.log")
    scratch.rmdir()

    visible = info["device_count"]
    if args.grids:
        units = [(math.prod(grid_shape(g)), g) for g in args.grids]
        where = f"grids {' '.join(args.grids)}"
        if any(d > visible for d, _ in units):
            where += f" ({', '.join(g for d, g in units if d > visible)} skipped: too few devices)"
    else:
        device_counts = sorted(set(args.devices or [visible]))
        if any(d > visible or d < 1 for d in device_counts):
            print(f"note: only {visible} device(s) visible; dropping --devices "
                  f"{[d for d in device_counts if d > visible or d < 1]}", flush=True)
            device_counts = [d for d in device_counts if 1 <= d <= visible] or [visible]
        units = [(d, None) for d in device_counts]
        where = f"devices {device_counts}"
    runnable = [u for u in units if u[0] <= visible]
    print(f"{visible} x {info['device_kinds'][0]} ({info['platform']}), jax {info['jax_version']}; "
          f"{where}; output {out}", flush=True)

    settings = {"tile": args.tile, "mp": args.mp, "mp_tile": args.mp_tile,
                "repeats": args.repeats, "budget_s": args.budget,
                "peer_path": str(args.peer_path.resolve()) if args.peer_path else None,
                "mem_fraction": args.mem_fraction, "donate": args.donate, "paired": args.paired,
                "single_call_s": args.single_call_over}
    plan = plan_tasks(args, units, visible)
    tasks = {t.id: t for *_, group in plan for t in group}
    records: list[dict[str, Any]] = []
    sittings: list[dict[str, Any]] = []
    if args.resume:
        sittings, earlier = previous_run(out / "benchmark.json", settings)
        for task in tasks.values():
            if record_key(dataclasses.asdict(task)) in earlier:
                records.append(kept_record(task, earlier[record_key(dataclasses.asdict(task))]))
        kept = {r["id"] for r in records}
        planned = {record_key(dataclasses.asdict(t)) for t in tasks.values()}
        ids = itertools.count(max(tasks, default=0) + 1)
        # Measurements of the run that this sitting does not plan stay in its JSON.
        extra = [{**r, "id": next(ids)} for key, r in earlier.items() if key not in planned]
        plan = [(kind, d, grid, [t for t in group if t.id not in kept]) for kind, d, grid, group in plan]
        plan = [step for step in plan if step[3]]
        settings["known_times"] = [[r["routine"], r["dtype"], r["impl"], r["devices"], r.get("grid"),
                                    r["n"], r["median_ms"] / 1e3]
                                   for r in records if r.get("status") in ("ok", "failed") and r.get("median_ms")]
        print(f"--resume: {len(kept)} of {len(tasks)} measurements kept from {len(sittings)} earlier "
              f"sitting(s) in {out / 'benchmark.json'}", flush=True)
    total, done = len(tasks) - len(records), 0
    libraries: dict[str, Any] = {}
    deadline = time.monotonic() + args.wall_budget if args.wall_budget else None
    for kind, d, grid, group in plan:
        env = worker_env(kind, d, info, args.mem_fraction)
        if d > visible:
            events = ({"event": "result", "id": t.id, "status": "skipped", "attempted": False,
                       "error": f"not attempted: grid {grid} needs {d} devices, {visible} visible"}
                      for t in group)
        elif deadline is not None and time.monotonic() >= deadline:
            events = ({"event": "result", "id": t.id, "status": "error",
                       "error": "--wall-budget ran out: not run"} for t in group)
        else:
            events = run_worker(kind, group, settings, env, out / "logs" / f"{kind}-{unit_name(d, grid)}.log",
                                args.task_timeout, deadline=deadline)
        for event in events:
            if event["event"] == "library":
                libraries[kind] = {"file": event["file"], "version": event["version"]}
            if event["event"] != "result":
                continue
            done += 1
            task = tasks[event["id"]]
            record = {**dataclasses.asdict(task), **{k: v for k, v in event.items() if k != "event"}}
            if args.resume:
                record["sitting"] = len(sittings)
            if record["grid"] is None:
                del record["grid"]
            records.append(record)
            print(progress_line(done, total, task, record), flush=True)

    if args.resume:
        records += extra
    records.sort(key=lambda r: r["id"])
    table, errors = build_table(records, units, args)
    notes = table_notes(records, args, errors)
    print("\n" + table + "\n")
    for note in notes:
        print(note)
    if args.per_call_overhead:
        print("\n" + "\n".join(overhead_lines(records, units, args)))
    largest: list[dict[str, Any]] = []
    if args.largest and not runnable:
        print("\n--largest: no grid fits the visible devices: no search", flush=True)
    elif args.largest:
        print(f"\n--largest: searching for up to {args.largest_budget:.0f} s", flush=True)
        largest = find_largest(args, info, runnable, records, settings, out)
        print("\n" + "\n".join(largest_lines(largest, args, info["platform"] == "cpu")))

    elapsed = round((datetime.datetime.now() - started).total_seconds(), 1)
    if args.resume:
        sittings.append({"date": started.isoformat(timespec="seconds"), "command": [sys.executable] + sys.argv,
                         "git": git_commit(), "device_kinds": info.get("device_kinds"), "elapsed_s": elapsed,
                         "measured": sum(1 for r in records
                                         if r.get("sitting") == len(sittings) and not cut_by_budget(r))})
    report = {
        "date": (sittings[0]["date"] if sittings else started.isoformat(timespec="seconds")),
        "command": [sys.executable] + sys.argv,
        "machine": info,
        "git": git_commit(),
        "libraries": libraries,
        "settings": {**{k: v for k, v in settings.items() if k != "known_times"}, "routines": args.routines, "sizes": args.sizes, "dtypes": args.dtypes,
                     "devices": [d for d, _ in units], **({"grids": args.grids} if args.grids else {}),
                     "tolerance": "100 * sqrt(N) * eps"},
        "results": records,
        "largest": largest or None,
        "table": table.splitlines(),
        "notes": notes,
        "elapsed_s": elapsed if not sittings else round(sum(x["elapsed_s"] for x in sittings), 1),
        **({"sittings": sittings} if sittings else {}),
    }
    (out / "benchmark.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nresults written to {out / 'benchmark.json'}")
    print(plot(records, args, out / "benchmark.png"))


if __name__ == "__main__":
    main()
