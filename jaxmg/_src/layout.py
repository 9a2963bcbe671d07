"""The block-cyclic conversion on its own, as the solvers run it (for tests,
tools and users who want to see the layout)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, config
from jaxmg._src.placement import Placement


def convert_block(a, *, placement, tile: int, to_block_cyclic: bool = True):
    """Per device (inside shard_map): converts this device's (N/n, N) row block.

    Read column-major, the blocks are the column blocks of a^T; after the
    conversion device d's local slot s holds tile s * n + d.
    """
    # The conversion moves bytes: another dtype travels as the float of its width.
    carrier = a.dtype if a.dtype in _SOLVER_DTYPES else _CARRIERS.get(a.dtype.itemsize)
    if carrier is None:
        raise TypeError(f"jaxmg: the layout moves elements of 4, 8 or 16 bytes, got {a.dtype}")
    bits = jax.lax.bitcast_convert_type(a, carrier) if a.dtype != carrier else a
    results = (jax.ShapeDtypeStruct(bits.shape, bits.dtype),)
    (out,) = collective.call(
        "layout", placement, (bits,), results, tile=tile, to_block_cyclic=to_block_cyclic
    )
    return jax.lax.bitcast_convert_type(out, a.dtype) if a.dtype != carrier else out


_SOLVER_DTYPES = frozenset(jnp.dtype(d) for d in config.SUPPORTED_DTYPES)
_CARRIERS = {4: jnp.dtype(jnp.float32), 8: jnp.dtype(jnp.float64)}


@functools.partial(jax.jit, static_argnames=("mesh", "axis", "tile", "to_block_cyclic"))
def block_cyclic(a, *, mesh, axis: str, tile: int, to_block_cyclic: bool = True):
    """The whole row-sharded (N, N) matrix after conversion: row block d holds
    rows of tiles d, d + n, d + 2n, ... (N must be a multiple of n * tile)."""
    placement = Placement(mesh, axis, manual=False)
    spec = P(axis, None)
    return jax.shard_map(
        functools.partial(
            convert_block, placement=placement, tile=tile, to_block_cyclic=to_block_cyclic
        ),
        mesh=mesh,
        in_specs=(spec,),
        out_specs=spec,
        check_vma=False,
    )(a)
