"""potrs: every dtype, order and mesh, default and small tiles; right-hand
sides of every shape and layout. Residuals against float64 NumPy."""

import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg

CONDITION = 10.0
SIZES = (1, 7, 37, 96)
# (devices, first device): 1, 2, 3 and 8 devices, and devices 3..5.
MESHES = {"1dev": (1, 0), "2dev": (2, 0), "3dev": (3, 0), "8dev": (8, 0), "3dev@3": (3, 3)}


def dtype_id(dtype):
    return np.dtype(dtype).name


@pytest.mark.parametrize("tile", [None, 2], ids=["tile_default", "tile2"])
@pytest.mark.parametrize("mesh_id", list(MESHES))
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_solve(rng, dtype, n, mesh_id, tile):
    mesh = helpers.mesh(MESHES[mesh_id][0], first=MESHES[mesh_id][1])
    a = helpers.spd(rng, n, dtype, CONDITION)
    b = helpers.random_matrix(rng, n, dtype, 5)
    x, info = jaxmg.potrs(
        helpers.put_rows(a, mesh),
        helpers.replicated(b, mesh),
        tile_size=tile,
        return_info=True,
        **helpers.solve_kwargs(a, mesh),
    )
    assert x.shape == b.shape and x.dtype == dtype
    assert info.shape == () and info.dtype == np.int32 and int(info) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(dtype, n, CONDITION)


# Tiles that give each device several tiles, with and without padding
# (N = 96 is a multiple of 3 * 1, 8 * 1 and 8 * 3; not of 3 * 3, 3 * 5 or
# 8 * 5; N = 37 never is).
@pytest.mark.parametrize("tile", [1, 3, 5])
@pytest.mark.parametrize("devices", [3, 8])
@pytest.mark.parametrize("n", [37, 96])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=dtype_id)
def test_solve_small_tiles(rng, dtype, n, devices, tile):
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, n, dtype, CONDITION)
    b = helpers.random_matrix(rng, n, dtype, 3)
    x = jaxmg.potrs(
        helpers.put_rows(a, mesh),
        helpers.replicated(b, mesh),
        tile_size=tile,
        **helpers.solve_kwargs(a, mesh),
    )
    assert helpers.residual(a, x, b) <= helpers.tolerance(dtype, n, CONDITION)


RHS = {"vector": None, "k1": 1, "k5": 5}  # None: b has shape (N,)


@pytest.mark.parametrize("layout", ["replicated", "rows"])
@pytest.mark.parametrize("rhs", list(RHS))
@pytest.mark.parametrize("mesh_id", list(MESHES))
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=dtype_id)
def test_rhs_shape_and_layout(rng, dtype, mesh_id, rhs, layout):
    """x has b's shape and b's layout: row-sharded in, row-sharded out;
    replicated in, replicated out. (Default tiles: see test_solve.)"""
    n, tile = 48, 3  # 48 divides over 1, 2, 3 and 8 devices; on 3 devices tiles of 3 need padding
    mesh = helpers.mesh(MESHES[mesh_id][0], first=MESHES[mesh_id][1])
    a = helpers.spd(rng, n, dtype, CONDITION)
    k = RHS[rhs]
    b = helpers.random_matrix(rng, n, dtype, k or 1)
    b = b[:, 0] if k is None else b
    b_dev = helpers.replicated(b, mesh) if layout == "replicated" else helpers.rows(b, mesh)
    x = jaxmg.potrs(helpers.rows(a, mesh), b_dev, tile_size=tile)
    assert x.shape == b.shape and x.dtype == dtype
    assert x.sharding.is_equivalent_to(b_dev.sharding, x.ndim), (x.sharding, b_dev.sharding)
    x2, b2 = np.asarray(x).reshape(n, -1), b.reshape(n, -1)
    assert helpers.residual(a, x2, b2) <= helpers.tolerance(dtype, n, CONDITION)
    # b is an input: it is never consumed.
    assert not b_dev.is_deleted()


@pytest.mark.parametrize("rhs", ["vector", "k5"])
@pytest.mark.parametrize("devices", [3, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=dtype_id)
def test_rows_sharded_rhs_default_tile(rng, dtype, devices, rhs):
    n, mesh = 48, helpers.mesh(devices)
    a = helpers.spd(rng, n, dtype, CONDITION)
    b = helpers.random_matrix(rng, n, dtype, 5)
    b = b[:, 0] if rhs == "vector" else b
    b_dev = helpers.rows(b, mesh)
    x = jaxmg.potrs(helpers.rows(a, mesh), b_dev)
    assert x.shape == b.shape and x.sharding.is_equivalent_to(b_dev.sharding, x.ndim), x.sharding
    assert helpers.residual(a, np.asarray(x).reshape(n, -1), b.reshape(n, -1)) <= helpers.tolerance(
        dtype, n, CONDITION
    )


@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_reads_upper_triangle_only(rng, dtype):
    """Only the upper triangle (row-major) is read: garbage below the
    diagonal must not change the solution."""
    n, mesh = 11, helpers.mesh(3)
    a = helpers.spd(rng, n, dtype, CONDITION)
    garbage = np.where(np.tri(n, k=-1, dtype=bool), helpers.random_matrix(rng, n, dtype) * 100, a)
    b = helpers.random_matrix(rng, n, dtype, 2)
    x = jaxmg.potrs(
        helpers.replicated(garbage, mesh),
        helpers.replicated(b, mesh),
        tile_size=2,
        mesh=mesh,
        spec=P("x", None),
    )
    assert helpers.residual(a, x, b) <= helpers.tolerance(dtype, n, CONDITION)


def test_identity_and_diagonal_exact():
    """A diagonal system with powers of 4 (exact square roots) is solved
    exactly; a wrong tile placement would pair rows with wrong diagonals."""
    mesh = helpers.mesh(8)
    n = 16
    d = 4.0 ** np.arange(n)
    a = np.diag(d)
    b = np.outer(d, [1.0, 2.0, -3.0])
    x = jaxmg.potrs(helpers.rows(a, mesh), helpers.rows(b, mesh), tile_size=1)
    np.testing.assert_array_equal(np.asarray(x), np.tile([1.0, 2.0, -3.0], (n, 1)))


def test_result_sharding_on_mesh_devices(rng):
    """The result lives on the mesh's devices, not elsewhere."""
    mesh = helpers.mesh(3, first=3)
    a = helpers.spd(rng, 12, np.float64, CONDITION)
    b = helpers.random_matrix(rng, 12, np.float64, 2)
    x = jaxmg.potrs(helpers.rows(a, mesh), helpers.rows(b, mesh), tile_size=2)
    assert x.sharding.device_set == set(mesh.devices.flat)
    assert isinstance(x.sharding, NamedSharding)
