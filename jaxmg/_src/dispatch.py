"""Which engine runs a call: jaxmg's distributed solvers, or JAX's own
single-device solvers where those are faster. Chosen once per call; the
Layout carries it from there."""

from __future__ import annotations


import jax
import jax.numpy as jnp

from jaxmg._src import arguments, plans, processes
from jaxmg._src.engines import base, mg, mp, native
from jaxmg._src.placement import (
    BATCH_ELEMENT,
    Placement,
    axis_devices,
    check_square,
    concrete_mesh,
    eager_key,
    platform_of,
    resolve_placement,
)

BACKENDS = ("auto", "jaxmg", "jax", "mp")
# What cuSOLVERMp offers of the routines both engines have (it has no potri).
MP_ROUTINES = ("potrs", "syevd", "getrf")
RECTANGULAR_BACKENDS = ("auto", "mp", "jax")

# Orders below which JAX's own solver on one GPU beats cuSOLVERMg spread over
# several (H200, float64: two-GPU potrf only wins from N~32768; cuSOLVERMg's
# syevd is slower than one-GPU eigh at every size that fits one GPU; LU's
# two-GPU getrf wins from N=16384, float32 and float64).
GPU_CROSSOVER = {"potrs": 24576, "potri": 24576, "syevd": 49152, "getrf": 16384}

_BY_NAME = {"jaxmg": mg.ENGINE, "jax": native.ENGINE, "mp": mp.ENGINE}


# What JAX's own solver holds beside the matrix, in copies of it (on one
# H200, float64: its Cholesky solve runs at N = 65536 and runs out of memory
# at N = 81920 with 139 GiB, donated or not).
NATIVE_COPIES = {"potrs": 2, "getrf": 2, "potri": 3, "syevd": 3}
# Room left for XLA's own buffers and the solver's workspace.
_MEMORY_MARGIN = 0.05


def choose(routine: str, n: int, placement: Placement, backend: str,
           itemsize: int | None = None) -> base.Engine:
    """The engine of this call. On CPU, auto picks jaxmg on several devices
    (its purpose there is to run the multi-device protocol) and JAX's solver
    on one. On GPUs of one machine it
    picks cuSOLVERMg (faster than cuSOLVERMp there: LU 489 ms against 808 ms
    at N=32768 on two H200s, potrs 227 against 253) or JAX's solver below the
    crossovers; on GPUs of several machines, which cuSOLVERMg cannot span,
    cuSOLVERMp."""
    if backend not in BACKENDS:
        raise ValueError(f"jaxmg: backend must be one of {BACKENDS}, got {backend!r}")
    if not placement.placed:
        _check_batch_element(placement, backend)
        if backend not in ("auto", "jax"):
            raise ValueError(
                f"jaxmg: backend={backend!r} needs to know the devices: under jit, pass mesh= "
                "and spec=, call under `with jax.set_mesh(mesh):`, or give the array an "
                "explicit sharding"
            )
        return native.ENGINE
    if n == 0:
        return native.ENGINE  # nothing to distribute; JAX's solvers take empty matrices
    if backend == "mp":
        if routine not in MP_ROUTINES:
            raise ValueError(
                f"jaxmg: backend='mp' has no {routine} (cuSOLVERMp lacks it); use backend='auto' "
                "or 'jaxmg', or for an inverse jaxmg.inv(a, assume_a='gen')"
            )
        mp.check(placement, routine)
        return mp.ENGINE
    if placement.manual:
        return _choose_for_blocks(routine, n, placement, backend, itemsize)
    platform = platform_of(placement)
    if platform == "cuda" and concrete_mesh(placement) is None and jax.process_count() > 1:
        # Traced on an abstract mesh with no concrete one in context, in a job
        # of several processes: which process's GPUs meet is not known. (In one process
        # the participants exchange their GPUs' numbers when they run.)
        if backend not in ("auto", "jax"):
            raise ValueError(
                f"jaxmg: backend={backend!r} across processes needs the mesh's GPUs: under "
                "jit, call under `with jax.set_mesh(mesh):` or pass mesh="
            )
        return native.ENGINE
    if platform == "cuda" and routine == "potri" and placement.n_devices > 1:
        # cusolverMgPotri (cuSOLVER 12.0.4, H200) returns wrong inverses across
        # two distinct GPUs from N~4096 on (JAXMg 0.0.8 fails the same check);
        # its potrf, potrs and syevd pass there.
        if backend == "jaxmg":
            raise ValueError(
                "jaxmg: backend='jaxmg' potri is disabled on several GPUs: cuSOLVERMg's potri "
                "returns wrong inverses across distinct GPUs. Use backend='auto' (JAX's solver) "
                "or a one-device mesh"
            )
        return native.ENGINE
    if backend != "auto":
        return _BY_NAME[backend]
    if platform == "cpu":
        # One device has nothing to distribute: JAX's solver, as under jit
        # without a mesh, so eager and jitted calls give the same bits.
        return native.ENGINE if placement.n_devices == 1 else mg.ENGINE
    if placement.n_devices > 1 and routine in MP_ROUTINES and _machines(placement) > 1:
        mp.check(placement, routine)
        return mp.ENGINE
    if placement.n_devices == 1 or n < GPU_CROSSOVER[routine]:
        if itemsize is None or _native_fits(routine, n, itemsize, placement):
            return native.ENGINE
    return mg.ENGINE


def _choose_for_blocks(routine: str, n: int, placement: Placement, backend: str,
                       itemsize: int | None) -> base.Engine:
    """Inside the caller's shard_map. Where the row axis has one device its
    block is the whole matrix: auto then picks what it picks for that
    device's matrix outside shard_map, so that both call forms give the same
    numbers (JAX's solver, unless it would not fit)."""
    whole = placement.n_devices == 1
    if backend == "jax" and not whole:
        raise ValueError(
            "jaxmg: backend='jax' needs the whole matrix, which inside shard_map only an axis "
            "of one device holds; use backend='auto' (the default)"
        )
    if backend == "jax" or (backend == "auto" and whole and _block_fits(routine, n, placement,
                                                                         itemsize)):
        return native.ENGINE
    return mg.ENGINE


def _block_fits(routine: str, n: int, placement: Placement, itemsize: int | None) -> bool:
    if itemsize is None or concrete_mesh(placement) is None:
        return True  # no device to ask: as outside shard_map, unknown memory counts as room
    return _native_fits(routine, n, itemsize, placement)


def _native_fits(routine: str, n: int, itemsize: int, placement: Placement) -> bool:
    """Whether JAX's solver has room on every device of the call (which each
    hold the whole matrix for it); unknown memory counts as room."""
    needed = NATIVE_COPIES[routine] * n * n * itemsize
    for device in _call_devices(placement):
        stats = device.memory_stats() if device.process_index == jax.process_index() else None
        if not stats or "bytes_limit" not in stats:
            continue
        free = stats["bytes_limit"] * (1 - _MEMORY_MARGIN) - stats.get("bytes_in_use", 0)
        if needed > free:
            return False
    return True


def _call_devices(placement: Placement):
    """The devices of the call; for an abstract mesh (under jit, one
    process), every local device of its platform, among which are its own."""
    if concrete_mesh(placement) is not None:
        return axis_devices(placement, "")
    return jax.local_devices(backend="gpu" if platform_of(placement) == "cuda" else "cpu")


def _check_batch_element(placement: Placement, backend: str) -> None:
    if placement is BATCH_ELEMENT and backend not in ("auto", "jax"):
        raise ValueError(
            f"jaxmg: backend={backend!r} spreads one matrix over devices, but here each matrix "
            "lies whole on its devices (a batch sharded along its batch axis, or a device's own "
            "matrix inside shard_map). Use backend='auto' (JAX's solver where each matrix lies); "
            "or shard each matrix's rows and loop over the batch; inside shard_map, "
            "jaxmg.potrs, potri and syevd take a matrix's row blocks"
        )


def check_rectangular_backend(backend, what: str) -> None:
    """The backends of the routines built on an SVD or QR (no cuSOLVERMg one)."""
    if backend not in RECTANGULAR_BACKENDS:
        raise ValueError(f"jaxmg: {what} takes backend in {RECTANGULAR_BACKENDS}, got {backend!r}")


def choose_rectangular(placement: Placement, backend: str, what: str) -> base.Engine:
    """The engine of lstsq, qr, svd and polar: cuSOLVERMp on a mesh of several
    GPUs, JAX's solvers on the whole matrix otherwise."""
    check_rectangular_backend(backend, what)
    if not placement.placed:
        _check_batch_element(placement, backend)
        if backend == "mp":
            raise ValueError(
                "jaxmg: backend='mp' needs to know the devices: under jit, pass mesh= and spec=, "
                "or call under `with jax.set_mesh(mesh):`"
            )
        return native.ENGINE
    if backend == "auto":
        on_gpus = platform_of(placement) == "cuda" and not placement.manual
        # cuSOLVERMp's NCCL group is made of the mesh's GPUs, which an
        # abstract mesh (under jit, no concrete mesh in context) does not name.
        known = concrete_mesh(placement) is not None
        backend = "mp" if on_gpus and placement.n_devices > 1 and known else "jax"
    if backend == "mp":
        mp.check(placement, what, instead="'jax'")
        return mp.ENGINE
    return native.ENGINE


def layout(routine: str, n: int, placement: Placement, tile: int | None, backend: str,
           itemsize: int | None = None) -> base.Layout:
    """The engine of this call and its layout of an order-n matrix (of
    elements of `itemsize` bytes: auto then checks JAX's solver fits)."""
    engine = choose(routine, n, placement, backend, itemsize)
    return base.layout(placement, n, engine.tile(routine, n, placement, tile), engine)


def _machines(placement: Placement) -> int:
    if concrete_mesh(placement) is None:
        return 1  # an abstract mesh: tracing for one process's devices
    devices = axis_devices(placement, "")
    if len({d.process_index for d in devices}) == 1:
        return 1
    return processes.host_count(devices)


# The JAX primitive each routine's refusals name, as JAX's own do.
JAX_PRIMITIVE = {"potrs": "cholesky", "potri": "cholesky", "getrf": "lu", "syevd": "eigh"}


def matrix_layout(a, routine: str, tile_size, mesh, spec, backend, others=()) -> base.Layout:
    """The checks of a square matrix argument of the jax.scipy-style API, then
    its layout (others: as resolve_placement takes them)."""
    arguments.check_rank2(a, "a")
    arguments.check_dtype(a, "a", JAX_PRIMITIVE[routine])
    tile = arguments.check_tile(tile_size)
    placement = resolve_placement(a, mesh, spec, "a", others=others)
    n = check_square(a, placement, "a")
    return layout(routine, n, placement, tile, backend, jnp.dtype(a.dtype).itemsize)


def cached_layout(a, routine: str, tile_size, mesh, spec, backend) -> base.Layout:
    """matrix_layout, kept as an eager call's plan: a factorisation repeated on
    arrays of the same sharding, shape and dtype skips the checks."""
    key = eager_key((a,), "layout", routine, arguments.check_tile(tile_size), mesh, spec, backend)
    return plans.find_or_make(key, lambda: matrix_layout(a, routine, tile_size, mesh, spec,
                                                         backend))
