"""JAXMg's cyclic_1d, verify_cyclic and plot_block_to_cyclic: a row-sharded
matrix's rows in the 1-D block-cyclic layout of cuSOLVERMg, for code that
lays its matrix out itself (jaxmg's routines do this on their own).

Rows go in tiles of T_A: tile q to device q mod D, each device's tiles in
increasing order, D the devices of a's row axis. Each device's block of s
rows grows to s + (-s mod T_A) (zero rows last), which always holds its
tiles. The rows move by one all-to-all inside shard_map: no device gathers
the matrix.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, peer_calls
from jaxmg._src.placement import Placement


def cyclic_1d(a, T_A, mesh, in_specs, pad=True):  # noqa: N803 (JAXMg's names)
    """a's rows in the 1-D block-cyclic layout of tile T_A over the devices
    of its row axis, sharded as a: (D * (s + padding), N) for D devices of s
    rows each. Where T_A is s or more every row stays where it is (a comes
    back). pad=False refuses a T_A that does not divide s rather than pad.
    in_specs: a's PartitionSpec P(axis, None), alone or in a list or tuple.
    a is not donated (JAXMg's is)."""
    a = arguments.as_array(a, "a")
    if a.ndim != 2:
        raise ValueError(f"jaxmg.cyclic_1d takes a rank-2 matrix a, got shape {a.shape}")
    tile = peer_calls.check_tile("cyclic_1d", T_A)
    axis = _row_axis(in_specs)
    devices = Placement(mesh, axis, manual=False).n_devices
    rows = a.shape[0]
    if rows % devices:
        raise ValueError(f"jaxmg.cyclic_1d: a's {rows} rows do not split over the {devices} "
                         f"devices of axis {axis!r}; pad a to a multiple of {devices} rows")
    per_device = rows // devices
    if tile >= per_device:
        return a
    if not arguments.check_flag(pad, "pad") and per_device % tile:
        raise ValueError(
            f"jaxmg.cyclic_1d: with pad=False, T_A ({tile}) must divide each device's "
            f"{per_device} rows; pass pad=True, or a T_A that divides {per_device}")
    if not isinstance(a, jax.core.Tracer):
        a = jax.device_put(a, NamedSharding(mesh, P(axis, None)))
    send, receive = _tables(devices, per_device, tile)
    move = jax.shard_map(
        functools.partial(_exchange, axis=axis, send=send, receive=receive),
        mesh=mesh, in_specs=P(axis, None), out_specs=P(axis, None), check_vma=False)
    return move(a)


def verify_cyclic(a, a_cyclic, T_A, devices=None):  # noqa: N803
    """Raises AssertionError unless a_cyclic is cyclic_1d's layout of a (each
    row of a where that layout puts it); devices: how many a_cyclic's rows are
    spread over (default: its sharding's, else jax.device_count())."""
    if devices is None:
        sharding = getattr(a_cyclic, "sharding", None)
        if isinstance(sharding, NamedSharding) and len(sharding.spec) and sharding.spec[0]:
            devices = Placement(sharding.mesh, sharding.spec[0], manual=False).n_devices
        else:
            devices = jax.device_count()
    a, a_cyclic = np.asarray(a), np.asarray(a_cyclic)
    destination = destinations(a.shape[0], devices, T_A)
    for row, where in enumerate(destination):
        if not np.allclose(a[row], a_cyclic[where]):
            raise AssertionError(f"jaxmg.verify_cyclic: row {row} of a is not row {where} of "
                                 f"a_cyclic (tile {T_A}, {devices} devices)")


def plot_block_to_cyclic(N, T_A, ndev, N_rows=8):  # noqa: N803 (JAXMg's names)
    """(fig, axs): the device that holds each of the N rows of a matrix, drawn
    as a band N_rows high: axs[0] in JAX's row sharding over ndev devices,
    axs[1] in cyclic_1d's layout of tile T_A. Needs matplotlib."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    tile = peer_calls.check_tile("plot_block_to_cyclic", T_A)
    if isinstance(ndev, bool) or not isinstance(ndev, (int, np.integer)) or ndev < 1:
        raise ValueError(f"jaxmg.plot_block_to_cyclic: ndev must be a positive int, got {ndev!r}")
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < ndev or N % ndev:
        raise ValueError(f"jaxmg.plot_block_to_cyclic: N must be a positive multiple of ndev "
                         f"({ndev}), got {N!r}")
    per_device = N // ndev
    rows = np.arange(N)
    cyclic = tile < per_device
    block = block_rows(per_device, tile) if cyclic else per_device
    colours = ListedColormap([plt.cm.tab20(d % 20) for d in range(ndev)])
    fig, axs = plt.subplots(2, 1, figsize=(8, 5), constrained_layout=True)
    for ax, owner, title in (
            (axs[0], rows // per_device, f"row sharding: {per_device} rows a device"),
            (axs[1], rows // tile % ndev if cyclic else rows // per_device,
             f"1-D block-cyclic, tile {tile} (blocks of {block} rows, zeros after a device's own)")):
        ax.imshow(np.tile(owner, (N_rows, 1)), aspect="auto", interpolation="nearest",
                  cmap=colours, vmin=-0.5, vmax=ndev - 0.5)
        ax.set_title(title)
        ax.set_xlabel("row of the matrix")
        ax.set_yticks([])
    fig.legend(handles=[Patch(facecolor=colours(d), label=f"device {d}") for d in range(ndev)],
               loc="outside right center")
    return fig, axs


def block_rows(per_device: int, tile: int) -> int:
    """A device's rows in the cyclic layout: its own, up to a whole number of
    tiles."""
    return per_device + -per_device % tile


def destinations(rows: int, devices: int, tile: int) -> np.ndarray:
    """For every row of the matrix, its row in the cyclic layout. Where a tile
    holds a device's rows or more, every row stays where it is."""
    block = block_rows(rows // devices, tile)
    r = np.arange(rows)
    q = r // tile
    return (q % devices) * block + (q // devices) * tile + r % tile


def _row_axis(in_specs):
    """The row axis of a's spec, read as JAXMg's in_specs (alone or in a list
    or tuple of one)."""
    spec = peer_calls.spec_of_a("cyclic_1d", None, in_specs)
    if not isinstance(spec, P) or len(spec) != 2:  # (spec_of_a refuses the other layouts)
        raise ValueError(f"jaxmg.cyclic_1d lays out a matrix whose rows are sharded, "
                         f"P(axis, None); got in_specs {in_specs!r}")
    return spec[0]


@functools.lru_cache(maxsize=64)
def _tables(devices: int, per_device: int, tile: int):
    """send[s]: for each receiving device and slot, s's local row (per_device
    = a zero row); receive[e]: for each row of e's block, its place in the
    (sender, slot) messages (one past them: a zero row)."""
    block = block_rows(per_device, tile)
    destination = destinations(devices * per_device, devices, tile).reshape(devices, -1)
    owner = destination // block
    counts = np.stack([np.bincount(o, minlength=devices) for o in owner])
    slots = int(counts.max())
    send = np.full((devices, devices, slots), per_device, np.int32)
    receive = np.full((devices, block), devices * slots, np.int32)
    for s in range(devices):
        for e in range(devices):
            local = np.flatnonzero(owner[s] == e)
            send[s, e, :local.size] = local
            receive[e, destination[s, local] - e * block] = s * slots + np.arange(local.size)
    return send, receive


def _exchange(block, *, axis, send, receive):
    me = jax.lax.axis_index(axis)
    padded = jnp.concatenate([block, jnp.zeros_like(block[:1])])
    outgoing = padded[jnp.asarray(send)[me]]
    incoming = jax.lax.all_to_all(outgoing, axis, 0, 0, tiled=True)
    incoming = incoming.reshape(-1, block.shape[1])
    incoming = jnp.concatenate([incoming, jnp.zeros_like(block[:1])])
    return incoming[jnp.asarray(receive)[me]]

