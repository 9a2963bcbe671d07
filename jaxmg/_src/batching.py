"""NumPy-style batch dimensions: leading axes of the arguments broadcast
against each other, and the routine runs once per batch element (under vmap,
so a distributed call meets once per element, in order)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def broadcast_map(fn, args, core_ndims):
    """fn over the broadcast leading axes of `args`, where args[i] has
    core_ndims[i] trailing core axes; outputs get the batch axes in front."""
    batch = jnp.broadcast_shapes(*(a.shape[: a.ndim - k] for a, k in zip(args, core_ndims)))
    size = math.prod(batch)
    flat = []
    for a, k in zip(args, core_ndims):
        core = a.shape[a.ndim - k:]
        flat.append(jnp.broadcast_to(a, batch + core).reshape((size,) + core))
    out = jax.vmap(fn)(*flat)
    return jax.tree.map(lambda o: o.reshape(batch + o.shape[1:]), out)


def batched(a, core_ndim: int = 2) -> bool:
    return getattr(a, "ndim", 0) > core_ndim
