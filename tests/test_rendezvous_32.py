"""Meshes of 1 to 32 devices (this target forces 32 host devices): every
participant count meets, including the large ones."""

import jax
import numpy as np
import pytest

import helpers
import jaxmg
from jaxmg._src import library

CONDITION = 10.0


def dtype_id(dtype):
    return np.dtype(dtype).name


@pytest.mark.parametrize("devices", [1, 2, 5, 7, 16, 31, 32])
def test_potrs_any_device_count(rng, devices):
    n = 64
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, n, np.float64, CONDITION)
    b = helpers.random_matrix(rng, n, np.float64, 2)
    x = jaxmg.potrs(
        helpers.put_rows(a, mesh),
        helpers.replicated(b, mesh),
        tile_size=1,
        **helpers.solve_kwargs(a, mesh)
    )
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, n, CONDITION)
    jax.block_until_ready(x)  # every device's shard, not only the one read above
    assert library.live_meetings() == 0


@pytest.mark.parametrize("tile", [None, 1, 3], ids=["tile_default", "tile1", "tile3"])
@pytest.mark.parametrize("n", [32, 100])
@pytest.mark.parametrize("devices", [16, 32])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=dtype_id)
def test_potrs_16_and_32_devices(rng, dtype, devices, n, tile):
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, n, dtype, CONDITION)
    b = helpers.random_matrix(rng, n, dtype, 3)
    b_dev = helpers.rows(b, mesh) if n % devices == 0 else helpers.replicated(b, mesh)
    x, info = jaxmg.potrs(
        helpers.put_rows(a, mesh),
        b_dev,
        tile_size=tile,
        return_info=True,
        **helpers.solve_kwargs(a, mesh)
    )
    assert int(info) == 0
    assert x.sharding.is_equivalent_to(b_dev.sharding, 2)
    assert helpers.residual(a, x, b) <= helpers.tolerance(dtype, n, CONDITION)


def test_potri_and_syevd_32_devices(rng):
    n, mesh = 64, helpers.mesh(32)
    a = helpers.spd(rng, n, np.complex128, CONDITION)
    inv = jaxmg.potri(helpers.rows(a, mesh), tile_size=1)
    assert helpers.inverse_error(a, inv) <= helpers.tolerance(np.complex128, n, CONDITION)
    h = helpers.hermitian(rng, n, np.complex128)
    w, v = jaxmg.syevd(helpers.rows(h, mesh), tile_size=1)
    np.testing.assert_allclose(
        np.asarray(w),
        np.linalg.eigvalsh(h),
        rtol=0,
        atol=helpers.tolerance(np.complex128, n) * np.abs(w).max(),
    )
    v = np.asarray(v)
    assert np.linalg.norm(h @ v - v * np.asarray(w)) / np.linalg.norm(h) <= helpers.tolerance(
        np.complex128, n
    )
    assert np.linalg.norm(v.conj().T @ v - np.eye(n)) <= helpers.tolerance(np.complex128, n)


def test_subset_of_32_devices(rng):
    """16 devices from the middle of the 32."""
    n, mesh = 48, helpers.mesh(16, first=9)
    a = helpers.spd(rng, n, np.float32, CONDITION)
    b = helpers.random_matrix(rng, n, np.float32, 1)[:, 0]
    x = jaxmg.potrs(helpers.rows(a, mesh), helpers.rows(b, mesh), tile_size=3)
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float32, n, CONDITION)
