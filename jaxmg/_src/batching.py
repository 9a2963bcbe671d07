"""NumPy-style batch dimensions: leading axes of the arguments broadcast
against each other, and the routine runs once per batch element (under vmap,
so a distributed call meets once per element, in order)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxmg._src import arguments, failures, numpy_rules
from jaxmg._src.placement import axis_names, explicit_spec


def broadcast_map(fn, args, core_ndims):
    """fn over the broadcast leading axes of `args`, where args[i] has
    core_ndims[i] trailing core axes; outputs get the batch axes in front."""
    return batch_map(fn, args, [a.ndim - k for a, k in zip(args, core_ndims)])


def batch_map(fn, args, batch_ndims):
    """fn over the broadcast leading axes of `args`, where every leaf of the
    pytree args[i] (an array, or a factor such as LUFactor) has
    batch_ndims[i] leading batch axes; outputs get the batch axes in front.
    One vmap per batch axis, not one over their product: the axes keep their
    shardings (merging a sharded axis into another is a reshape that
    explicit sharding refuses)."""
    shapes = []
    for a, k in zip(args, batch_ndims):
        leaves = jax.tree.leaves(a)
        shapes.append(leaves[0].shape[:k] if leaves else ())
    _check_rank_promotion(shapes)
    batch = jnp.broadcast_shapes(*shapes)
    if 0 in batch and not any(arguments.is_traced(x) for x in jax.tree.leaves(args)):
        return _empty_batch(fn, args, batch_ndims, batch)

    def expand(x, k):
        return jnp.broadcast_to(x, batch + x.shape[k:])

    full = [jax.tree.map(lambda x, k=k: expand(x, k), a) for a, k in zip(args, batch_ndims)]
    full = _batch_axes_sharded_alike(full, len(batch))
    reports = []

    def element(*xs):
        with failures.deferred_reports() as made:
            out = fn(*xs)
        reports[:] = [(on_failure, message) for _, on_failure, message in made]
        return out, [info for info, _, _ in made]

    mapped = element
    for _ in batch:
        mapped = jax.vmap(mapped)
    out, infos = mapped(*full)
    for info, (on_failure, message) in zip(infos, reports):
        failures.report_batch(info, on_failure, message)
    return out


def _empty_batch(fn, args, batch_ndims, batch):
    """fn's results over an empty batch: zeros of their shapes, made here
    (JAX's ops on empty arrays sharded over a mesh give arrays that cannot
    be read, jax 0.10 to 0.12)."""
    element = [jax.tree.map(lambda x, k=k: jax.ShapeDtypeStruct(x.shape[k:], x.dtype), a)
               for a, k in zip(args, batch_ndims)]
    shapes = jax.eval_shape(fn, *element)
    return jax.tree.map(lambda s: jnp.zeros(batch + s.shape, s.dtype), shapes)


def _check_rank_promotion(batch_shapes):
    """What jnp.vectorize (which JAX's solves and generalized eigh batch
    with) does under jax_numpy_rank_promotion "warn" or "raise" when the
    operands' batch ranks differ."""
    mode = numpy_rules.callers_rank_promotion()
    if mode == "allow" or len({len(s) for s in batch_shapes}) < 2:
        return
    message = (f"jaxmg: operands with batch shapes {list(batch_shapes)} require rank promotion. "
               "Set the jax_numpy_rank_promotion config option to 'allow' to disable this "
               "message, or give the operands the same number of batch axes")
    if mode == "raise":
        raise ValueError(message)
    warnings.warn(message, stacklevel=arguments.user_stacklevel())


def _batch_axes_sharded_alike(args, k: int):
    """args with each of the k batch axes sharded the same way in every leaf
    (the first sharding given wins), as vmap needs on explicit mesh axes."""
    leaves, tree = jax.tree.flatten(args)
    typed = [explicit_spec(x) for x in leaves]
    target, used = [], set()
    for j in range(k):  # a mesh axis shards one batch axis at most
        entry = next((t[1][j] for t in typed if t is not None and t[1][j] is not None
                      and not used & set(axis_names(t[1][j]))), None)
        target.append(entry)
        used |= set(axis_names(entry))
    # A batch sharded along its batch axes runs JAX's solver on each matrix
    # where it lies, which takes the matrix whole: its own axes are gathered
    # here, once, rather than per element under vmap.
    sharded_batch = any(entry is not None for entry in target)
    out = []
    for x, t in zip(leaves, typed):
        if t is not None:
            # A core axis sharded over a mesh axis the batch now takes is
            # gathered too: an axis can shard one dimension only.
            core = [None if sharded_batch or used & set(axis_names(e)) else e for e in t[1][k:]]
            if tuple(t[1][:k]) != tuple(target) or tuple(core) != tuple(t[1][k:]):
                x = jax.sharding.reshard(x, NamedSharding(t[0], P(*target, *core)))
        out.append(x)
    return jax.tree.unflatten(tree, out)


def factor_solve_map(solve, f, b, factor_batch_ndim: int, n: int, routine: str):
    """solve(f, b) over a factor of a batch (factor_batch_ndim leading axes
    on each of its leaves) and b's batch axes, b read as vectors or (N, K)
    matrices by jax.scipy's rule (vector_rhs) for an order-n factor."""
    vector = vector_rhs(b, factor_batch_ndim + 2, n, routine)
    return batch_map(solve, (f, b), (factor_batch_ndim, b.ndim - (1 if vector else 2)))


def batched(a, core_ndim: int = 2) -> bool:
    return getattr(a, "ndim", 0) > core_ndim


def vector_rhs(b, a_ndim: int, n: int, routine: str) -> bool:
    """Whether b is a vector (core (N,)) rather than a matrix (N, K) by
    jax.scipy's rule for triangular, LU and Cholesky solves against an
    order-n a of a_ndim dimensions: b.ndim is 1, or one fewer than a's with
    n entries along its last axis. JAX warns of the second reading (it will
    read such a b as a batch of matrices); so does `routine`, with the fix."""
    if b.ndim == 1:
        return True
    if b.ndim == a_ndim - 1 and b.shape[-1] == n:
        warnings.warn(
            f"jaxmg.{routine}: b of shape {b.shape} is read as one vector per matrix of the "
            f"batch (batched 1D solves), a reading JAX has deprecated (it will read b as a "
            f"batch of ({n}, K) matrices); write {routine}(..., b[..., None]).squeeze(-1) to "
            "keep this meaning and silence this warning",
            FutureWarning, stacklevel=arguments.user_stacklevel())
        return True
    return False
