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
    return batch_map(fn, args, [a.ndim - k for a, k in zip(args, core_ndims)])


def batch_map(fn, args, batch_ndims):
    """fn over the broadcast leading axes of `args`, where every leaf of the
    pytree args[i] (an array, or a factor such as LUFactor) has
    batch_ndims[i] leading batch axes; outputs get the batch axes in front."""
    shapes = []
    for a, k in zip(args, batch_ndims):
        leaves = jax.tree.leaves(a)
        shapes.append(leaves[0].shape[:k] if leaves else ())
    batch = jnp.broadcast_shapes(*shapes)
    size = math.prod(batch)

    def flatten(x, k):
        core = x.shape[k:]
        return jnp.broadcast_to(x, batch + core).reshape((size,) + core)

    flat = [jax.tree.map(lambda x, k=k: flatten(x, k), a) for a, k in zip(args, batch_ndims)]
    out = jax.vmap(fn)(*flat)
    return jax.tree.map(lambda o: o.reshape(batch + o.shape[1:]), out)


def batched(a, core_ndim: int = 2) -> bool:
    return getattr(a, "ndim", 0) > core_ndim


def vector_rhs(b, a_ndim: int, n: int) -> bool:
    """Whether b is a vector (core (N,)) rather than a matrix (N, K) by
    jax.scipy's rule for triangular, LU and Cholesky solves against an
    order-n a of a_ndim dimensions: b.ndim is 1, or one fewer than a's with
    n entries along its last axis."""
    return b.ndim == 1 or (b.ndim == a_ndim - 1 and b.shape[-1] == n)
