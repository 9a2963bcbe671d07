"""The move between JAX's row blocks and cuSOLVERMp's 2-D block-cyclic layout
(jaxmg/_src/cyclic.py) on forced CPU devices: every device's local matrix
against ScaLAPACK's definition, the way back, the diagonal the mp engine's
log-determinants read, and that no device ever gathers the whole matrix."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
from jaxmg._src import cyclic
from jaxmg._src.engines import mp
from jaxmg._src.placement import Placement

MESHES = [
    ((1,), ("x",)),
    ((2,), ("x",)),
    ((4,), ("x",)),
    ((8,), ("x",)),
    ((2, 2), ("r", "c")),
    ((4, 2), ("r", "c")),
    ((2, 4), ("r", "c")),
    ((1, 2), ("r", "c")),
    ((2, 1), ("r", "c")),
    ((2, 2, 2), ("a", "b", "c")),
]


def _placement(shape, names):
    mesh = jax.make_mesh(shape, names, devices=helpers.devices(int(np.prod(shape))))
    return Placement(mesh, names if len(names) > 1 else names[0], False)


def _local(m, t, grid, i, j):
    """Process (i, j)'s local matrix by ScaLAPACK's definition."""
    rows = [g for g in range(m.shape[0]) if (g // t) % grid[0] == i]
    cols = [g for g in range(m.shape[1]) if (g // t) % grid[1] == j]
    return m[np.ix_(rows, cols)]


@pytest.mark.parametrize("mesh_shape, names", MESHES)
@pytest.mark.parametrize("t", [1, 2, 4])
@pytest.mark.parametrize("wide", [1, 2])
def test_every_local_matrix_is_scalapacks_and_the_way_back_restores(mesh_shape, names, t, wide):
    placement = _placement(mesh_shape, names)
    r, c = cyclic.grid(placement)
    rows = cyclic.padded(21, t, placement)
    m = np.arange(rows * rows * wide, dtype=np.float32).reshape(rows, rows * wide)
    x = jax.device_put(m, NamedSharding(placement.mesh, P(placement.axes, None)))
    y = jax.jit(lambda v: cyclic.to_cyclic(v, placement, t))(x)
    assert y.sharding.spec == cyclic.cyclic_spec(placement) or r * c == 1
    lr, lc = rows // r, rows * wide // c
    seen = set()
    for shard in y.addressable_shards:
        i, j = shard.index[0].start or 0, shard.index[1].start or 0
        i, j = i // lr, j // lc
        seen.add((i, j))
        np.testing.assert_array_equal(np.asarray(shard.data), _local(m, t, (r, c), i, j))
    assert seen == {(i, j) for i in range(r) for j in range(c)}
    z = jax.jit(lambda v: cyclic.from_cyclic(v, placement, t))(y)
    np.testing.assert_array_equal(np.asarray(z), m)


@pytest.mark.parametrize("mesh_shape, names", [((4,), ("x",)), ((2, 4), ("r", "c"))])
def test_no_device_gathers_the_matrix(mesh_shape, names):
    placement = _placement(mesh_shape, names)
    t = 8
    n = cyclic.padded(500, t, placement)
    rows = P(placement.axes, None)
    for move, spec in ((cyclic.to_cyclic, rows), (cyclic.from_cyclic, cyclic.cyclic_spec(placement))):
        arg = jax.ShapeDtypeStruct((n, n), np.float64, sharding=NamedSharding(placement.mesh, spec))
        hlo = jax.jit(lambda v: move(v, placement, t)).lower(arg).compile().as_text()
        assert "all-to-all" in hlo
        assert "all-gather" not in hlo and "all-reduce" not in hlo


@pytest.mark.parametrize("r, c, tiles_in", [(2, 1, 3), (4, 1, 5), (2, 2, 1), (4, 2, 3), (2, 4, 7)])
def test_messages_pad_by_less_than_a_tile_per_peer(r, c, tiles_in):
    _, _, _, _, cap = cyclic._tables(r, c, tiles_in)
    assert cap == -(-tiles_in // r)  # the most any device sends any owner, no more


@pytest.mark.parametrize("mesh_shape, names", [((1,), ("x",)), ((2,), ("x",)), ((2, 2), ("r", "c")),
                                               ((2, 4), ("r", "c")), ((4, 2), ("r", "c"))])
def test_diagonal_of_the_cyclic_layout(mesh_shape, names):
    placement = _placement(mesh_shape, names)
    t = 2
    n = cyclic.padded(19, t, placement)
    m = np.random.default_rng(0).standard_normal((n, n))
    x = jax.device_put(m, NamedSharding(placement.mesh, P(placement.axes, None)))
    d, g = jax.jit(lambda v: mp.diagonal(cyclic.to_cyclic(v, placement, t), placement, t))(x)
    d, g = np.asarray(d), np.asarray(g)
    assert sorted(g.tolist()) == list(range(n))
    np.testing.assert_array_equal(d, np.diagonal(m)[g])


def test_row_order_lists_each_owners_tiles_in_turn():
    np.testing.assert_array_equal(cyclic.row_order(8, 2, 2), [0, 1, 4, 5, 2, 3, 6, 7])
    np.testing.assert_array_equal(cyclic.row_order(6, 1, 3), [0, 3, 1, 4, 2, 5])
    np.testing.assert_array_equal(cyclic.row_order(4, 2, 1), [0, 1, 2, 3])


def test_a_matrix_that_does_not_split_into_tiles_is_refused():
    placement = _placement((2,), ("x",))
    x = jax.device_put(np.zeros((6, 6)), NamedSharding(placement.mesh, P("x", None)))
    with pytest.raises(ValueError, match="pad it with cyclic.padded"):
        cyclic.to_cyclic(x, placement, 4)


def _spd_on_2x2(seed):
    mesh = jax.make_mesh((2, 2), ("r", "c"), devices=helpers.devices(4))
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((16, 16))
    return mesh, g @ g.T + 16 * np.eye(16), rng.standard_normal((16, 2))


def test_a_2d_block_matrix_is_taken_as_rows_over_both_axes():
    import jaxmg

    mesh, a, b = _spd_on_2x2(3)
    blocks = jax.device_put(a, NamedSharding(mesh, P("r", "c")))
    x = jaxmg.potrs(blocks, b)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
    w = jaxmg.eigvalsh(blocks)
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), rtol=1e-10)
    columns = jax.device_put(a, NamedSharding(mesh, P(None, "c")))
    x = jaxmg.potrs(columns, b)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)


def test_derivatives_of_a_2d_block_matrix_match_those_of_its_rows():
    import jax.numpy as jnp

    import jaxmg

    mesh, a, b = _spd_on_2x2(4)
    losses = {
        "solve": lambda x: jnp.sum(jaxmg.solve(x, b) ** 2),
        "potrs": lambda x: jnp.sum(jaxmg.potrs(x, b) ** 2),
        "eigvalsh": lambda x: jnp.sum(jaxmg.eigvalsh(x) ** 3),
        "slogdet": lambda x: jaxmg.slogdet(x)[1],
        "cho_logdet": lambda x: jaxmg.cho_logdet(jaxmg.cho_factor(x)),
        "inv": lambda x: jnp.sum(jaxmg.inv(x, assume_a="pos") ** 2),
    }
    blocks = jax.device_put(a, NamedSharding(mesh, P("r", "c")))
    rows = jax.device_put(a, NamedSharding(mesh, P(("r", "c"), None)))
    with jax.set_mesh(mesh):
        for name, loss in losses.items():
            got, want = jax.grad(loss)(blocks), jax.grad(loss)(rows)
            assert got.sharding.spec == P("r", "c"), name
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12, err_msg=name)
