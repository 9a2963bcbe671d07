"""The per-device side of a call to a leader engine (LAPACK, cuSOLVERMg):
inside shard_map, every device calls the FFI target with its block, its
position on the axis and the call's identity; the library's rendezvous does
the rest."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxmg._src import config, library, processes
from jaxmg._src.placement import Placement, axis_devices, concrete_mesh, platform_of

_CALL_IDS = itertools.count(1)


def _call_id(placement: Placement, platform: str) -> int:
    """A fresh id for this call site (the rendezvous key); a call over devices
    of several processes is registered to meet over the job channel."""
    if jax.process_count() > 1:
        devices = axis_devices(placement, "across processes")
        if len({d.process_index for d in devices}) > 1:
            call_id = processes.next_call_id()
            owners = processes.check_one_device_per_process(devices)
            processes.register_call(call_id, owners, platform)
            return call_id
    return next(_CALL_IDS)


def _device_ids(placement: Placement) -> np.ndarray:
    """The CUDA ordinals of the call's GPUs in axis order; none where the
    call is traced on an abstract mesh in one process (its participants then
    exchange them when they run)."""
    if concrete_mesh(placement) is None and jax.process_count() == 1:
        return np.zeros((0,), dtype=np.int64)
    devices = axis_devices(placement, "on GPUs of several processes")
    return np.array([processes.ordinal(d) for d in devices], dtype=np.int64)


def call(routine: str, placement: Placement, operands, results, *, tile: int, alias=True,
         b_sharded=False, trans=0, vectors=True, to_block_cyclic=True):
    """Calls the target of `routine` on this device's blocks.

    operands[0] is the matrix block. With `alias` it is aliased with
    results[0] (the routine overwrites it), so XLA reuses its buffer when the
    caller donates it and copies it otherwise; without, it is only read.
    Under vmap the call runs once per batch element, in order (the
    rendezvous keeps each iteration's meeting apart).
    """
    platform = platform_of(placement)
    attrs = {}
    if platform == "cuda":
        library.cuda_library()
        attrs["device_ids"] = _device_ids(placement)
    else:
        library.library()
    call_id = _call_id(placement, platform)
    index = jax.lax.axis_index(placement.axis).astype(jnp.int32)
    engine = "mg" if platform == "cuda" else "lapack"
    fn = jax.ffi.ffi_call(
        library.target_name(engine, routine, operands[0].dtype),
        results,
        input_output_aliases={0: 0} if alias else None,
        vmap_method="sequential",
    )
    site = dict(
        n_devices=np.int64(placement.n_devices),
        tile=np.int64(tile),
        call_id=np.int64(call_id),
        timeout_ms=np.int64(config.timeout_ms()),
    )
    options = dict(
        b_sharded=bool(b_sharded),
        trans=np.int64(trans),
        vectors=bool(vectors),
        to_block_cyclic=bool(to_block_cyclic),
    )
    return fn(*operands, index, site=site, options=options, **attrs)


def info_shape():
    return jax.ShapeDtypeStruct((1,), jnp.int32)
