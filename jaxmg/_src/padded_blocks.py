"""JAXMg's pad=True for a device's row block inside shard_map: where T_A does
not divide the block's rows, each device pads its block to a multiple of
T_A, as that package does, rather than lowering the tile.

A device's r rows of the N x N matrix become rp = r + extra rows of an
(ndev * rp) square matrix whose column blocks are padded the same way; the
padding is an identity, so the factorisation of A is that of the padded
matrix restricted to A's rows and columns. b is padded (with zeros) and x
unpadded to match. JAXMg's call forms outside shard_map, with pad=True and
such a T_A, run through the same blocks, so that both forms give the same
numbers (jaxmg.potrs with tile_size pads the whole matrix at its end
instead)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, dispatch, numpy_rules, peer_calls, sharding
from jaxmg._src.engines import native
from jaxmg._src.placement import Placement, inside_shard_map, resolve_placement


def plan(routine: str, a, T_A, pad):  # noqa: N803 (JAXMg's name)
    """(tile, extra rows per device) for a device's row block a; the tile is
    None where auto gives a to JAX's solver (one device's whole matrix, where
    it fits), which has no tiles."""
    tile = peer_calls.check_tile(routine, T_A)
    shape = getattr(a, "shape", (0,))
    rows = shape[0]
    if not arguments.check_flag(pad, "pad") or rows < 1 or len(shape) != 2:
        return tile, 0
    try:
        placement = resolve_placement(a, None, None, row_blocks=True)
    except ValueError:
        return tile, 0  # the routine says why
    if shape[1] != rows * jax.lax.axis_size(placement.axis):
        return tile, 0  # no row block: the routine refuses it
    engine = dispatch.choose(routine.removesuffix("_shardmap_ctx"), shape[1], placement, "auto",
                             jnp.dtype(a.dtype).itemsize)
    if engine is native.ENGINE:
        return None, 0
    tile = min(tile, rows)
    return tile, -rows % tile


def pad_matrix(a, extra: int):
    """The (r + extra, ndev * (r + extra)) padded block of a's (r, N) rows."""
    rows, n = a.shape
    devices, padded = n // rows, rows + extra
    blocks = jnp.pad(a.reshape(rows, devices, rows), ((0, extra), (0, 0), (0, extra)))
    blocks = blocks.reshape(padded, devices * padded)
    me = jax.lax.axis_index(resolve_placement(a, None, None, row_blocks=True).axis)
    i = jnp.arange(padded)[:, None]
    ones = (i >= rows) & (jnp.arange(devices * padded)[None, :] == me * padded + i)
    return jnp.where(ones, jnp.ones((), a.dtype), blocks)


def pad_rhs(b, rows: int, n: int, extra: int):
    """b (this device's rows, or all N) with zero rows where a's were added."""
    if b.shape[0] == rows and rows != n:
        return jnp.pad(b, ((0, extra),) + ((0, 0),) * (b.ndim - 1))
    split = b.reshape(n // rows, rows, *b.shape[1:])
    split = jnp.pad(split, ((0, 0), (0, extra)) + ((0, 0),) * (b.ndim - 1))
    return split.reshape(-1, *b.shape[1:])


def unpad_rhs(x, rows: int, n: int, extra: int):
    if x.shape[0] == rows + extra and rows != n:
        return x[:rows]
    split = x.reshape(n // rows, rows + extra, *x.shape[1:])
    return split[:, :rows].reshape(n, *x.shape[1:])


def unpad_matrix(a, rows: int, n: int):
    """This device's r rows of the N x N result from its padded block."""
    padded = a.shape[0]
    return a[:rows].reshape(rows, n // rows, padded)[:, :, :rows].reshape(rows, n)


def potrs_blocks(potrs, a, b, tile: int, extra: int):
    """(x, info) of jaxmg's potrs (passed in) on a's padded row block."""
    rows, n = a.shape
    if not extra:
        return potrs(a, b, tile_size=tile, return_info=True)
    x, info = potrs(pad_matrix(a, extra), pad_rhs(b, rows, n, extra), tile_size=tile,
                    return_info=True)
    return unpad_rhs(x, rows, n, extra), info


def potri_blocks(potri, a, tile: int, extra: int):
    """(this device's rows of A^-1, info) of jaxmg's potri on the padded block."""
    if not extra:
        return potri(a, tile_size=tile, return_info=True)
    inverse, info = potri(pad_matrix(a, extra), tile_size=tile, return_info=True)
    return unpad_matrix(inverse, *a.shape), info


# --------------------------------------------------------------------------
# JAXMg's call forms outside shard_map, through the same blocks
# --------------------------------------------------------------------------


def potrs_through_blocks(a, b, *, routine, fallback, **ours):
    """potrs's JAXMg call form where its tile needs padded blocks, else None.
    routine: jaxmg's potrs; fallback(a, b): it with these options, which
    gives the derivatives (the blocks call the engine directly)."""
    found = _blocks_layout((a, b), ours)
    if found is None or getattr(b, "ndim", 0) not in (1, 2) or b.shape[0] != a.shape[0]:
        return None
    mesh, axis, tile = found
    b_rows = _rows_of(b, axis)
    blocks = _through_blocks(routine, mesh, axis, tile, b_rows)
    x, status = _differentiable(blocks, fallback)(a, b)
    return (x, status) if ours.get("return_info") else x


def potri_through_blocks(a, *, routine, fallback, **ours):
    """potri's JAXMg call form where its tile needs padded blocks, else None."""
    found = _blocks_layout((a,), ours)
    if found is None:
        return None
    blocks = _through_blocks(routine, *found, False)
    inverse, status = _differentiable(blocks, fallback)(a)
    return (inverse, status) if ours.get("return_info") else inverse


def _differentiable(blocks, fallback):
    """blocks, with fallback's derivatives (and its values under them)."""

    def with_status(*arrays):
        out = fallback(*arrays, return_info=True)
        return out[0], peer_calls.cusolver_status(out[-1])

    @jax.custom_jvp
    def routine(*arrays):
        out, status = blocks(*arrays)
        return out, status[0]

    @routine.defjvp
    @numpy_rules.default_rules
    def _(primals, tangents):
        return jax.jvp(with_status, primals, tangents)

    return routine


def _blocks_layout(arrays, ours):
    """(mesh, row axis, tile) where a's rows lie whole on each device of one
    mesh axis and the tile does not divide them; None otherwise."""
    a = arrays[0]
    if set(ours) - {"tile_size", "mesh", "spec", "return_info", "donate", "backend"}:
        return None
    if ours.get("backend", "auto") not in ("auto", "jaxmg") or inside_shard_map():
        return None
    if getattr(a, "ndim", 0) != 2 or a.shape[0] != a.shape[1] or ours.get("tile_size") is None:
        return None
    own = getattr(a, "sharding", None)
    mesh = ours.get("mesh") or getattr(own, "mesh", None)
    spec = ours.get("spec") or getattr(own, "spec", None)
    if not isinstance(mesh, jax.sharding.Mesh) or not isinstance(spec, P) or len(spec) < 1:
        return None
    axis = spec[0]
    if (not isinstance(axis, str) or any(e is not None for e in spec[1:])
            or axis not in mesh.axis_names or mesh.shape[axis] != mesh.size or mesh.size < 2):
        return None
    devices = set(mesh.devices.flat)
    if any(isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)
           and set(x.sharding.device_set) != devices and x.committed for x in arrays):
        return None  # jaxmg's own path says where the arrays should be
    n = a.shape[0]
    if n % mesh.size:
        return None
    rows = n // mesh.size
    tile = min(ours["tile_size"], rows)
    return (mesh, axis, tile) if rows % tile else None


def _rows_of(b, axis: str) -> bool:
    """Whether b (not traced) is row-sharded over `axis`: x comes back so."""
    if isinstance(b, jax.core.Tracer) or not isinstance(b, jax.Array):
        return False
    spec = getattr(b.sharding, "spec", None)
    return isinstance(spec, P) and len(spec) > 0 and spec[0] == axis and b.ndim == 2 and all(
        e is None for e in spec[1:])


@functools.lru_cache(maxsize=64)
def _through_blocks(routine, mesh, axis: str, tile: int, rows_out: bool):
    """The jitted shard_map (over `axis` alone) of jaxmg's potrs or potri
    (`routine`) on padded row blocks, with JAXMg's status."""
    rows = P(axis, None)
    if routine.__name__ == "potrs":
        def body(a, b):
            x, info = potrs_blocks(routine, a, b, *plan("potrs", a, tile, True))
            if rows_out:
                x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(axis) * a.shape[0],
                                                 a.shape[0])
            return x, peer_calls.cusolver_status(info[None])

        in_specs, out_specs = (rows, P()), (rows if rows_out else P(), P())
    else:
        def body(a):
            inverse, info = potri_blocks(routine, a, *plan("potri", a, tile, True))
            return inverse, peer_calls.cusolver_status(info[None])

        in_specs, out_specs = (rows,), (rows, P())
    blocks = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                           axis_names=frozenset({axis}), check_vma=False)
    placement = Placement(mesh, axis, manual=False)

    def laid_out(*arrays):  # shard_map takes explicitly sharded arrays only as in_specs
        return blocks(*(sharding.constrain(x, placement, spec)
                        for x, spec in zip(arrays, in_specs)))

    return jax.jit(laid_out)
