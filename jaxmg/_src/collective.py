"""The per-device side of a jaxmg call: inside shard_map, every device calls
the FFI target with its block, its position on the axis and the call's
identity; the library's rendezvous does the rest."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmg._src import distribution, library, processes


_PLATFORMS = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda"}


def _concrete_mesh(placement: distribution.Placement):
    """The concrete Mesh of the call: given, or (inside shard_map, where only
    an AbstractMesh is visible) the one set with `jax.set_mesh`."""
    if isinstance(placement.mesh, jax.sharding.Mesh):
        return placement.mesh
    return distribution.context_concrete_mesh()


def platform_of(placement: distribution.Placement) -> str:
    mesh = _concrete_mesh(placement)
    if mesh is not None:
        platform = mesh.devices.flat[0].platform
    else:
        device = getattr(placement.mesh, "abstract_device", None)
        platform = device.platform if device is not None else jax.default_backend()
    if platform not in _PLATFORMS:
        raise NotImplementedError(f"jaxmg: no backend for platform {platform!r} (cpu and cuda exist)")
    return _PLATFORMS[platform]


def _axis_devices(placement: distribution.Placement, why: str):
    """The devices along the call's axis, in axis order."""
    mesh = _concrete_mesh(placement)
    if mesh is None:
        raise ValueError(
            f"jaxmg: inside shard_map {why}, pass mesh= (the concrete jax.sharding.Mesh) or "
            "call under `with jax.set_mesh(mesh):`"
        )
    # The row axes first, in order (the first one major), as P((r, c), None) deals rows.
    axes = [mesh.axis_names.index(ax) for ax in placement.axes]
    return list(np.moveaxis(mesh.devices, axes, list(range(len(axes)))).reshape(-1))


def _call_id(placement: distribution.Placement, platform: str) -> int:
    """A fresh id for this call site; a call over devices of several
    processes is registered to meet over the job channel."""
    if jax.process_count() > 1:
        devices = _axis_devices(placement, "across processes")
        if len({d.process_index for d in devices}) > 1:
            call_id = processes.next_call_id()
            owners = processes.check_one_device_per_process(devices)
            processes.register_call(call_id, owners, platform)
            return call_id
    return distribution.next_call_id()


def call(routine: str, placement, operands, results, *, tile: int, alias=True, **attrs):
    """Calls jaxmg_<x><routine>_<platform> on this device's blocks.

    operands[0] is the matrix block. With `alias` it is aliased with
    results[0] (the routine overwrites it), so XLA reuses its buffer when the
    caller donates it and copies it otherwise; without, it is only read.
    Under vmap the call runs once per batch element, in order (the
    rendezvous keeps each iteration's meeting apart).
    """
    a = operands[0]
    platform = platform_of(placement)
    if platform == "cuda":
        library.cuda_library()
        devices = _axis_devices(placement, "on GPUs")
        attrs["device_ids"] = np.array([processes.ordinal(d) for d in devices], dtype=np.int64)
    else:
        library.library()
    call_id = _call_id(placement, platform)
    index = jax.lax.axis_index(placement.axis).astype(jnp.int32)
    engine = "mg" if platform == "cuda" else "lapack"
    fn = jax.ffi.ffi_call(
        library.target_name(engine, routine, a.dtype),
        results,
        input_output_aliases={0: 0} if alias else None,
        vmap_method="sequential",
    )
    site = dict(
        n_devices=np.int64(placement.n_devices),
        tile=np.int64(tile),
        call_id=np.int64(call_id),
        timeout_ms=np.int64(distribution.timeout_ms()),
    )
    options = dict(
        b_sharded=bool(attrs.pop("b_sharded", False)),
        trans=np.int64(attrs.pop("trans", 0)),
        vectors=bool(attrs.pop("vectors", True)),
        to_block_cyclic=bool(attrs.pop("to_block_cyclic", True)),
    )
    return fn(*operands, index, site=site, options=options, **attrs)


def info_shape():
    return jax.ShapeDtypeStruct((1,), jnp.int32)
