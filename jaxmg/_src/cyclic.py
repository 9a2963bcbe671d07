"""JAX's row blocks <-> the 2-D block-cyclic layout of cuSOLVERMp, moved by
XLA's collectives (NCCL all-to-all on GPUs) inside shard_map.

A matrix M (rows x cols) enters with its rows sharded over every device of a
placement, the first mesh axis major: P(("r", "c"), None). The grid is R x C:
R the size of the first axis, C the product of the others (1 on a 1-D mesh).
In the cyclic layout, device (i, j) holds the row tiles I with I mod R == i
and the column tiles J with J mod C == j (tiles of t x t), each in increasing
order: a local matrix sharded P("r", "c"). Read column-major that block is the
local matrix of M^T on a C x R grid, which is what the engine hands over.

Two exchanges, each an all-to-all over one mesh axis group: rows move within
the columns of the mesh (to the device row owning their tile), then column
tiles move within the rows of the mesh. Every message is a whole number of
tiles; where a device holds unequal counts for its peers the tables pad to
the largest and the padding is dropped on arrival. Scratch is a few copies of
the local block, never the whole matrix.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src.placement import Placement


def grid(placement: Placement) -> tuple[int, int]:
    """(R, C): the mesh axis sharding rows first, and the product of the rest."""
    shape = placement.mesh.shape
    axes = placement.axes
    return shape[axes[0]], math.prod(shape[a] for a in axes[1:])


def cyclic_spec(placement: Placement) -> P:
    axes = placement.axes
    cols = axes[1:] if len(axes) > 2 else (axes[1] if len(axes) == 2 else None)
    return P(axes[0], cols)


def granule(t: int, placement: Placement) -> int:
    """What each padded dimension must be a multiple of."""
    r, c = grid(placement)
    return t * r * c


def padded(n: int, t: int, placement: Placement) -> int:
    g = granule(t, placement)
    return -(-max(n, 1) // g) * g


def choose_block(n: int, placement: Placement, limit: int) -> int:
    """The largest power-of-two tile up to `limit` whose padding of n stays
    within an eighth of n (powers of two: cuSOLVERMp 0.8's syevd needs them)."""
    t = 1 << int(math.log2(max(1, limit)))
    while t > 1 and padded(n, t, placement) - n > n // 8:
        t //= 2
    return t


@functools.lru_cache(maxsize=64)
def _tables(r: int, c: int, tiles_in: int):
    """Index tables of the row exchange for a grid of r x c and `tiles_in`
    row tiles per device in JAX's layout (tiles_in * c tiles per device row
    of the grid, which gets r * c * tiles_in / r of them).

    send[s]: for every owner o and slot, device s's local tile (tiles_in = none).
    gather[i]: for device row i's cyclic tiles in order, their position in the
      received (c, r, cap) slots. scatter[i]: its inverse (one past = padding).
    back[s]: for device s's tiles in order, their position in (r, cap) slots.
    """
    n_dev = r * c
    total = n_dev * tiles_in
    per_owner = total // r
    owner = np.arange(total) % r
    cap = 0
    lists = {}
    for s in range(n_dev):
        tiles = np.arange(s * tiles_in, (s + 1) * tiles_in)
        for o in range(r):
            lists[s, o] = tiles[owner[tiles] == o] - s * tiles_in
            cap = max(cap, len(lists[s, o]))
    send = np.full((n_dev, r, cap), tiles_in, np.int32)
    back = np.zeros((n_dev, tiles_in), np.int32)
    slot_of = np.zeros(total, np.int64)  # a tile's place in its (device, owner) list
    for (s, o), ks in lists.items():
        send[s, o, : len(ks)] = ks
        back[s, ks] = o * cap + np.arange(len(ks))
        slot_of[s * tiles_in + ks] = np.arange(len(ks))
    gather = np.zeros((r, per_owner), np.int32)
    scatter = np.full((r, c * r * cap), per_owner, np.int32)
    for i in range(r):
        for kk in range(per_owner):
            tile = kk * r + i
            s = tile // tiles_in
            src_row, src_col = divmod(s, c)
            at = (src_col * r + src_row) * cap + slot_of[tile]
            gather[i, kk] = at
            scatter[i, at] = kk
    return send.reshape(n_dev, r * cap), gather, scatter, back, cap


def _grid_axes(placement: Placement, one_dimensional: bool):
    """(R, C, the axes of the grid's rows, those of its columns). One
    dimensional: every device in one grid column, as jaxmg's own engine deals
    row tiles (R = all the devices, C = 1)."""
    if one_dimensional:
        return placement.n_devices, 1, placement.axes, ()
    r, c = grid(placement)
    return r, c, placement.axes[:1], placement.axes[1:]


def _check(shape, t: int, placement: Placement, one_dimensional=False) -> tuple[int, int]:
    r, c, _, _ = _grid_axes(placement, one_dimensional)
    rows, cols = shape
    if rows % (t * r * c) or cols % (t * c):
        raise ValueError(
            f"jaxmg internal: a {rows} x {cols} matrix does not split into {t} x {t} tiles over "
            f"a {r} x {c} grid; pad it with cyclic.padded first"
        )
    return r, c


def _global_shape(x, placement: Placement, cyclic_in: bool, one_dimensional=False):
    """x's global shape; inside shard_map x is a device's block."""
    if not placement.manual:
        return x.shape
    r, c, _, _ = _grid_axes(placement, one_dimensional)
    return (x.shape[0] * r, x.shape[1] * c) if cyclic_in else (x.shape[0] * r * c, x.shape[1])


def to_cyclic(m, placement: Placement, t: int, one_dimensional: bool = False):
    """M (rows sharded over all devices) -> the cyclic layout, sharded
    cyclic_spec (inside shard_map: a device's row block -> its cyclic block).
    one_dimensional: the row tiles dealt over all devices, the columns left
    whole (jaxmg's own engine's layout)."""
    rows, cols = _global_shape(m, placement, False, one_dimensional)
    r, c = _check((rows, cols), t, placement, one_dimensional)
    if r * c == 1:
        return m
    axes = placement.axes
    _, _, row_axes, col_axes = _grid_axes(placement, one_dimensional)
    send, gather, _, _, cap = _tables(r, c, rows // (t * r * c))

    def body(x):
        s = jax.lax.axis_index(axes)
        tiles = x.reshape(-1, t, cols)
        out = jnp.take(tiles, jnp.asarray(send)[s], axis=0, mode="fill", fill_value=0)
        out = jax.lax.all_to_all(out.reshape(r, cap, t, cols), row_axes, 0, 0, tiled=True)
        if c > 1:
            # Column tile J goes to mesh column J mod c, its columns kept in order.
            out = out.reshape(r * cap * t, cols // (t * c), c, t).transpose(2, 0, 1, 3)
            out = jax.lax.all_to_all(out, col_axes, 0, 0, tiled=True)
        out = out.reshape(c * r * cap, t, cols // c)
        i = jax.lax.axis_index(row_axes)
        return jnp.take(out, jnp.asarray(gather)[i], axis=0).reshape(-1, cols // c)

    if placement.manual:
        return body(m)
    out_spec = P(placement.axis, None) if one_dimensional else cyclic_spec(placement)
    return jax.shard_map(body, mesh=placement.mesh, in_specs=P(placement.axis, None),
                         out_specs=out_spec, check_vma=False)(m)


def from_cyclic(x, placement: Placement, t: int, one_dimensional: bool = False):
    """The inverse of to_cyclic: back to rows sharded over all devices."""
    rows, cols = _global_shape(x, placement, True, one_dimensional)
    r, c = _check((rows, cols), t, placement, one_dimensional)
    if r * c == 1:
        return x
    axes = placement.axes
    _, _, row_axes, col_axes = _grid_axes(placement, one_dimensional)
    _, _, scatter, back, cap = _tables(r, c, rows // (t * r * c))

    def body(blk):
        i = jax.lax.axis_index(row_axes)
        tiles = blk.reshape(-1, t, cols // c)
        out = jnp.take(tiles, jnp.asarray(scatter)[i], axis=0, mode="fill", fill_value=0)
        if c > 1:
            out = out.reshape(c, r * cap * t, cols // c)
            out = jax.lax.all_to_all(out, col_axes, 0, 0, tiled=True)
            out = out.reshape(c, r * cap * t, cols // (t * c), t).transpose(1, 2, 0, 3)
        out = jax.lax.all_to_all(out.reshape(r, cap, t, cols), row_axes, 0, 0, tiled=True)
        s = jax.lax.axis_index(axes)
        out = jnp.take(out.reshape(r * cap, t, cols), jnp.asarray(back)[s], axis=0)
        return out.reshape(-1, cols)

    if placement.manual:
        return body(x)
    in_spec = P(placement.axis, None) if one_dimensional else cyclic_spec(placement)
    return jax.shard_map(body, mesh=placement.mesh, in_specs=in_spec,
                         out_specs=P(placement.axis, None), check_vma=False)(x)


def row_order(n: int, t: int, parts: int) -> np.ndarray:
    """Global indices of 0..n-1 in cyclic order over `parts` owners of t-tiles
    (the order in which a P(axis) concatenation of the owners' pieces lists them)."""
    tiles = np.arange(n).reshape(-1, t)
    return np.concatenate([tiles[o::parts].reshape(-1) for o in range(parts)])
