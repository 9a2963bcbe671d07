"""Which engine runs a call: jaxmg's distributed solvers, or JAX's own
single-device solvers where those are faster."""

from __future__ import annotations

from jaxmg._src import collective, distribution as dist

BACKENDS = ("auto", "jaxmg", "jax", "mp")
# What cuSOLVERMp offers of the routines both engines have (it has no potri).
MP_ROUTINES = ("potrs", "syevd", "getrf")

# Orders below which JAX's own solver on one GPU beats cuSOLVERMg spread over
# several (H200, float64: two-GPU potrf only wins from N~32768; cuSOLVERMg's
# syevd is slower than one-GPU eigh at every size that fits one GPU; LU's
# two-GPU getrf wins from N=16384, float32 and float64).
GPU_CROSSOVER = {"potrs": 24576, "potri": 24576, "syevd": 49152, "getrf": 16384}


def choose(routine: str, n: int, placement: dist.Placement, backend: str) -> str:
    """"jaxmg", "mp" or "jax" for this call. On CPU, auto always picks jaxmg
    (its purpose there is to run the multi-device protocol). On GPUs of one
    machine it picks cuSOLVERMg (faster than cuSOLVERMp there: LU 489 ms
    against 808 ms at N=32768 on two H200s, potrs 227 against 253) or JAX's
    solver below the crossovers; on GPUs of several machines, which
    cuSOLVERMg cannot span, cuSOLVERMp."""
    if backend not in BACKENDS:
        raise ValueError(f"jaxmg: backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "mp":
        if routine not in MP_ROUTINES:
            raise ValueError(
                f"jaxmg: backend='mp' has no {routine} (cuSOLVERMp lacks it); use backend='auto' "
                "or 'jaxmg', or for an inverse jaxmg.inv(a, assume_a='gen')"
            )
        from jaxmg._src import mp

        mp.check(placement, routine)
        return "mp"
    if placement.manual:
        if backend == "jax":
            raise ValueError(
                "jaxmg: backend='jax' needs the whole matrix; inside shard_map use the default"
            )
        return "jaxmg"
    platform = collective.platform_of(placement)
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
        return "jax"
    if backend != "auto":
        return backend
    if platform == "cpu":
        return "jaxmg"
    if placement.n_devices > 1 and routine in MP_ROUTINES and _machines(placement) > 1:
        from jaxmg._src import mp

        mp.check(placement, routine)
        return "mp"
    if placement.n_devices == 1 or n < GPU_CROSSOVER[routine]:
        return "jax"
    return "jaxmg"


def _machines(placement: dist.Placement) -> int:
    if collective._concrete_mesh(placement) is None:
        return 1  # an abstract mesh: tracing for one process's devices
    devices = collective._axis_devices(placement, "")
    if len({d.process_index for d in devices}) == 1:
        return 1
    from jaxmg._src import processes

    return processes.host_count(devices)


# cusolverMgGetrf (cuSOLVER 12.0.4, H200) rejects T_A = 1024 with
# CUSOLVER_STATUS_INVALID_VALUE for the matrix descriptor; 256 is verified.
GPU_LU_MAX_TILE = 256


def lu_tile(tile: int, placement: dist.Placement) -> int:
    """The tile the LU engine can take on this platform."""
    if collective.platform_of(placement) == "cuda":
        return min(tile, GPU_LU_MAX_TILE)
    return tile
