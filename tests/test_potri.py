"""potri: every dtype, order and mesh, default and small tiles. The inverse
is checked by ||inv A - I|| in float64, for being Hermitian (both triangles
filled) and for its layout."""

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import helpers
import jaxmg

CONDITION = 10.0
SIZES = (1, 7, 37, 96)
MESHES = {"1dev": (1, 0), "2dev": (2, 0), "3dev": (3, 0), "8dev": (8, 0), "3dev@3": (3, 3)}


def dtype_id(dtype):
    return np.dtype(dtype).name


def make_mesh(mesh_id):
    devices, first = MESHES[mesh_id]
    return helpers.mesh(devices, first=first)


def check_inverse(a, inv, dtype):
    n = a.shape[0]
    inv = np.asarray(inv)
    assert inv.shape == (n, n) and inv.dtype == dtype
    assert np.isfinite(inv).all()
    # Both triangles are filled, mirrored: exactly Hermitian.
    np.testing.assert_array_equal(inv, inv.conj().T)
    assert helpers.inverse_error(a, inv) <= helpers.tolerance(dtype, n, CONDITION)


@pytest.mark.parametrize("tile", [None, 2], ids=["tile_default", "tile2"])
@pytest.mark.parametrize("mesh_id", list(MESHES))
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_inverse(rng, dtype, n, mesh_id, tile):
    mesh = make_mesh(mesh_id)
    a = helpers.spd(rng, n, dtype, CONDITION)
    a_dev = helpers.put_rows(a, mesh)
    inv, info = jaxmg.potri(
        a_dev, tile_size=tile, return_info=True, **helpers.solve_kwargs(a, mesh)
    )
    assert info.shape == () and info.dtype == np.int32 and int(info) == 0
    check_inverse(a, inv, dtype)
    if n % mesh.size == 0:  # a was row-sharded: the inverse is too
        assert inv.sharding.is_equivalent_to(a_dev.sharding, 2), inv.sharding


@pytest.mark.parametrize("tile", [1, 3, 5])
@pytest.mark.parametrize("devices", [3, 8])
@pytest.mark.parametrize("n", [37, 96])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=dtype_id)
def test_inverse_small_tiles(rng, dtype, n, devices, tile):
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, n, dtype, CONDITION)
    inv = jaxmg.potri(helpers.put_rows(a, mesh), tile_size=tile, **helpers.solve_kwargs(a, mesh))
    check_inverse(a, inv, dtype)


@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_reads_upper_triangle_only(rng, dtype):
    n, mesh = 11, helpers.mesh(3)
    a = helpers.spd(rng, n, dtype, CONDITION)
    garbage = np.where(np.tri(n, k=-1, dtype=bool), helpers.random_matrix(rng, n, dtype) * 100, a)
    inv = jaxmg.potri(helpers.replicated(garbage, mesh), tile_size=2, mesh=mesh, spec=P("x", None))
    check_inverse(a, inv, dtype)


def test_diagonal_exact():
    """diag(4^k) has the exact inverse diag(4^-k); every entry off the
    diagonal must come back exactly zero, wherever its tile went."""
    mesh = helpers.mesh(8)
    d = 4.0 ** np.arange(16)
    inv = jaxmg.potri(helpers.rows(np.diag(d), mesh), tile_size=1)
    np.testing.assert_array_equal(np.asarray(inv), np.diag(1.0 / d))
