"""jaxmg.cyclic_1d (JAXMg's 1-D block-cyclic layout of a row-sharded matrix)
against a layout built tile by tile here, eagerly and under jit, on 1-D and
2-D meshes; verify_cyclic accepts it and refuses other layouts; bad
arguments are refused naming them."""

import functools

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import helpers
import jaxmg

SPEC = P("x", None)


def tile_by_tile(a, devices, tile):
    """Device e's block: tiles e, e + devices, ... of a's rows, zero rows after
    them up to a whole number of tiles (unless a tile holds a block or more)."""
    per_device = a.shape[0] // devices
    if tile >= per_device:
        return a
    block = -(-per_device // tile) * tile
    tiles = [a[i:i + tile] for i in range(0, a.shape[0], tile)]
    out = np.zeros((devices * block, a.shape[1]), a.dtype)
    for e in range(devices):
        mine = np.concatenate(tiles[e::devices]) if tiles[e::devices] else a[:0]
        out[e * block:e * block + len(mine)] = mine
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("rows_per_device,tile", [(4, 1), (4, 2), (6, 4), (10, 3), (3, 2),
                                                  (2, 5)])
def test_rows_land_tile_by_tile(rng, rows_per_device, tile, dtype):
    mesh = helpers.mesh(4)
    a = helpers.random_matrix(rng, 4 * rows_per_device, dtype, 5)
    out = jaxmg.cyclic_1d(helpers.rows(a, mesh), tile, mesh, (SPEC,))
    expected = tile_by_tile(a, 4, tile)
    assert out.shape == expected.shape and out.dtype == dtype
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, SPEC), 2)
    jaxmg.verify_cyclic(a, out, tile)


def test_under_jit_with_a_static_tile_and_on_a_2d_mesh(rng):
    mesh = jax.make_mesh((2, 2), ("x", "y"), devices=helpers.devices(4))
    a = helpers.random_matrix(rng, 12, np.float64)
    placed = helpers.rows(a, mesh)
    call = jax.jit(functools.partial(jaxmg.cyclic_1d, mesh=mesh, in_specs=SPEC),
                   static_argnums=1)
    out = call(placed, T_A=4)
    np.testing.assert_array_equal(np.asarray(out), tile_by_tile(a, 2, 4))
    jaxmg.verify_cyclic(a, out, 4)
    lowered = call.lower(placed, T_A=4).compile().as_text()
    assert "all-to-all" in lowered and "all-gather" not in lowered


def test_verify_cyclic_refuses_another_layout(rng):
    mesh = helpers.mesh(4)
    a = helpers.random_matrix(rng, 16, np.float64)
    with pytest.raises(AssertionError, match="row 2 of a"):
        jaxmg.verify_cyclic(a, helpers.rows(a, mesh), 2)
    out = jaxmg.cyclic_1d(helpers.rows(a, mesh), 2, mesh, [SPEC])
    with pytest.raises(AssertionError):
        jaxmg.verify_cyclic(a, out, 1)
    jaxmg.verify_cyclic(a, out, 2, devices=4)


def test_bad_arguments_are_refused_naming_them(rng):
    mesh = helpers.mesh(4)
    a = helpers.rows(helpers.random_matrix(rng, 12, np.float64), mesh)
    with pytest.raises(ValueError, match="pad=False.*T_A"):
        jaxmg.cyclic_1d(a, 2, mesh, SPEC, pad=False)
    np.testing.assert_array_equal(np.asarray(jaxmg.cyclic_1d(a, 3, mesh, SPEC, pad=False)),
                                  tile_by_tile(np.asarray(a), 4, 3))
    unplaced = np.asarray(a)  # a NumPy array: placed on the mesh first
    np.testing.assert_array_equal(np.asarray(jaxmg.cyclic_1d(unplaced, 2, mesh, SPEC)),
                                  tile_by_tile(unplaced, 4, 2))
    with pytest.raises(TypeError, match="in_specs"):
        jaxmg.cyclic_1d(a, 2, mesh, "x")
    with pytest.raises(ValueError, match="in_specs"):
        jaxmg.cyclic_1d(a, 2, mesh, (SPEC, SPEC))
    with pytest.raises(ValueError, match="A must be sharded along the rows"):
        jaxmg.cyclic_1d(a, 2, mesh, P(None, "x"))
    with pytest.raises(ValueError, match="T_A"):
        jaxmg.cyclic_1d(a, 0, mesh, SPEC)
    with pytest.raises(ValueError, match="rank-2"):
        jaxmg.cyclic_1d(np.ones(8), 2, mesh, SPEC)
    with pytest.raises(ValueError, match="do not split"):
        jaxmg.cyclic_1d(np.ones((10, 10)), 2, mesh, SPEC)


def test_plot_block_to_cyclic_draws_each_rows_device():
    pytest.importorskip("matplotlib", reason="plot_block_to_cyclic draws with matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    fig, axs = jaxmg.plot_block_to_cyclic(100, 7, 4)
    before, after = (ax.get_images()[0].get_array() for ax in axs)
    assert before.shape == after.shape == (8, 100)
    np.testing.assert_array_equal(before[0], np.arange(100) // 25)
    np.testing.assert_array_equal(after[0], np.arange(100) // 7 % 4)
    _, axs = jaxmg.plot_block_to_cyclic(8, 3, 4, N_rows=2)  # a tile holds a block: no move
    np.testing.assert_array_equal(axs[1].get_images()[0].get_array()[1], np.arange(8) // 2)
    with pytest.raises(ValueError, match="multiple of ndev"):
        jaxmg.plot_block_to_cyclic(10, 2, 4)
    matplotlib.pyplot.close("all")
