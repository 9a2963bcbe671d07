"""The per-device side of a jaxmg call: inside shard_map, every device calls
the FFI target with its block, its position on the axis and the call's
identity; the library's rendezvous does the rest."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmg._src import distribution, library


def platform_of(placement: distribution.Placement) -> str:
    devices = getattr(placement.mesh, "devices", None)
    if devices is not None:
        return devices.flat[0].platform
    return jax.default_backend()


def call(routine: str, placement, operands, results, *, tile: int, **attrs):
    """Calls jaxmg_<x><routine>_<platform> on this device's blocks.

    operands[0] is the matrix block; it is aliased with results[0], so XLA
    reuses its buffer when the caller donates it and copies it otherwise.
    """
    a = operands[0]
    platform = platform_of(placement)
    if platform != "cpu":
        raise NotImplementedError(
            f"jaxmg: the {platform} backend is not built yet; this release runs on CPU devices"
        )
    library.library()
    index = jax.lax.axis_index(placement.axis).astype(jnp.int32)
    # The layout conversion moves bytes: one target serves every dtype.
    if routine == "layout":
        target = f"jaxmg_layout_{platform}"
    else:
        target = library.target_name(routine, a.dtype, platform)
    fn = jax.ffi.ffi_call(target, results, input_output_aliases={0: 0})
    return fn(
        *operands,
        index,
        n_devices=np.int64(placement.n_devices),
        tile=np.int64(tile),
        call_id=np.int64(distribution.next_call_id()),
        timeout_ms=np.int64(distribution.timeout_ms()),
        **attrs,
    )


def info_shape():
    return jax.ShapeDtypeStruct((1,), jnp.int32)
