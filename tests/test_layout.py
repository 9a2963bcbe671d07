"""The block-cyclic conversion on its own: where every tile of rows lands,
for several device counts, orders and tiles and for elements of 4, 8 and 16
bytes; and the way back."""

import functools

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
from jaxmg._src import layout
from jaxmg._src.placement import Placement

# (devices, N, tile): N is a multiple of devices * tile.
CASES = [
    (1, 6, 2),  # one device: nothing moves
    (2, 8, 1),
    (2, 12, 2),
    (2, 8, 4),  # one tile per device: the identity
    (3, 18, 2),
    (3, 36, 3),
    (4, 32, 2),
    (5, 30, 3),
    (8, 16, 1),
    (8, 48, 2),
    (8, 96, 3),
]
# Elements of 4, 8 and 16 bytes (integers too: the conversion moves bytes).
DTYPES = [np.float32, np.int32, np.float64, np.complex64, np.complex128]


def case_id(case):
    devices, n, tile = case
    return f"{devices}dev-N{n}-T{tile}"


def numbered(n, dtype):
    """A matrix whose every entry is distinct, so any misplacement shows."""
    a = np.arange(n * n, dtype=np.float64).reshape(n, n) + 1
    if np.issubdtype(dtype, np.complexfloating):
        a = a - 1j * a[::-1, ::-1]
    return a.astype(dtype)


def expected_block_cyclic(a, devices, tile):
    """Row block d (rows [d N/n, (d+1) N/n)) holds, slot s after slot s-1, the
    rows of tile s * n + d of a."""
    n = a.shape[0]
    slots = n // (devices * tile)
    blocks = []
    for d in range(devices):
        for s in range(slots):
            t = s * devices + d
            blocks.append(a[t * tile : (t + 1) * tile])
    return np.concatenate(blocks)


def convert(a, mesh, tile, to_block_cyclic=True):
    a_dev = jax.device_put(a, NamedSharding(mesh, P("x", None)))
    return layout.block_cyclic(
        a_dev, mesh=mesh, axis="x", tile=tile, to_block_cyclic=to_block_cyclic
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_placement_and_round_trip(case, dtype):
    devices, n, tile = case
    mesh = helpers.mesh(devices)
    a = numbered(n, dtype)
    cyclic = convert(a, mesh, tile)
    assert cyclic.dtype == dtype and cyclic.shape == (n, n)
    expected = expected_block_cyclic(a, devices, tile)
    np.testing.assert_array_equal(np.asarray(cyclic), expected)
    # Device d of the axis holds row block d of the converted matrix.
    on_axis = list(mesh.devices.flat)
    for shard in cyclic.addressable_shards:
        d = on_axis.index(shard.device)
        rows = shard.index[0]
        assert (rows.start or 0, rows.stop or n) == (d * n // devices, (d + 1) * n // devices)
        np.testing.assert_array_equal(np.asarray(shard.data), expected[rows])
    back = convert(np.asarray(cyclic), mesh, tile, to_block_cyclic=False)
    np.testing.assert_array_equal(np.asarray(back), a)


@pytest.mark.parametrize("case", [(2, 12, 2), (3, 36, 3), (8, 48, 2)], ids=case_id)
def test_inverse_direction_first(case):
    """to_block_cyclic=False is the inverse permutation: applied first, the
    forward conversion undoes it."""
    devices, n, tile = case
    mesh = helpers.mesh(devices)
    a = numbered(n, np.float64)
    contiguous = convert(a, mesh, tile, to_block_cyclic=False)
    assert not np.array_equal(np.asarray(contiguous), a)
    np.testing.assert_array_equal(np.asarray(convert(np.asarray(contiguous), mesh, tile)), a)


def test_subset_mesh():
    """Devices 3..5: positions on the axis, not device ids, decide placement."""
    mesh = helpers.mesh(3, first=3)
    a = numbered(12, np.complex128)
    cyclic = convert(a, mesh, 2)
    np.testing.assert_array_equal(np.asarray(cyclic), expected_block_cyclic(a, 3, 2))


def test_convert_block_in_own_shard_map():
    """convert_block is the per-device call: inside the caller's shard_map it
    does the same as block_cyclic."""
    devices, n, tile = 4, 24, 3
    mesh = helpers.mesh(devices)
    placement = Placement(mesh, "x", manual=True)
    a = numbered(n, np.float32)
    body = functools.partial(layout.convert_block, placement=placement, tile=tile)
    run = jax.jit(
        jax.shard_map(
            body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False
        )
    )
    out = run(jax.device_put(a, NamedSharding(mesh, P("x", None))))
    np.testing.assert_array_equal(np.asarray(out), expected_block_cyclic(a, devices, tile))


def test_n_not_multiple_of_devices_times_tile_fails():
    mesh = helpers.mesh(2)
    a = numbered(12, np.float64)
    with pytest.raises(Exception, match=r"multiple of tile\*n_devices=8"):
        np.asarray(convert(a, mesh, 4))
