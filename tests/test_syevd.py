"""syevd: every dtype, order and mesh, default and small tiles. Eigenvalues
against np.linalg.eigvalsh; eigenvectors only through ||A V - V diag(w)||
and ||V^H V - I|| (never elementwise: they are unique only up to phase and,
for repeated eigenvalues, up to a rotation of their subspace)."""

import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg

SIZES = (1, 7, 37, 96)
MESHES = {"1dev": (1, 0), "2dev": (2, 0), "3dev": (3, 0), "8dev": (8, 0), "3dev@3": (3, 3)}


def dtype_id(dtype):
    return np.dtype(dtype).name


def make_mesh(mesh_id):
    devices, first = MESHES[mesh_id]
    return helpers.mesh(devices, first=first)


def real_dtype(dtype):
    return np.finfo(dtype).dtype


def check_eigenvalues(a, w, dtype):
    n = a.shape[0]
    w = np.asarray(w)
    assert w.shape == (n,) and w.dtype == real_dtype(dtype)
    assert np.all(np.diff(w) >= 0), "eigenvalues must come in ascending order"
    ref = np.linalg.eigvalsh(helpers.promote(a))
    scale = max(np.abs(ref).max(), np.finfo(np.float64).tiny)  # ||A||_2
    assert np.abs(w - ref).max() <= helpers.tolerance(dtype, n) * scale


def check_eigenvectors(a, w, v, dtype):
    n = a.shape[0]
    v = np.asarray(v)
    assert v.shape == (n, n) and v.dtype == dtype
    a64, v64, w64 = helpers.promote(a), helpers.promote(v), helpers.promote(w)
    scale = max(np.linalg.norm(a64), np.finfo(np.float64).tiny)
    assert np.linalg.norm(a64 @ v64 - v64 * w64) / scale <= helpers.tolerance(dtype, n)
    assert np.linalg.norm(v64.conj().T @ v64 - np.eye(n)) <= helpers.tolerance(dtype, n)


@pytest.mark.parametrize("tile", [None, 2], ids=["tile_default", "tile2"])
@pytest.mark.parametrize("mesh_id", list(MESHES))
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_eigh(rng, dtype, n, mesh_id, tile):
    mesh = make_mesh(mesh_id)
    a = helpers.hermitian(rng, n, dtype)
    w, v, info = jaxmg.syevd(
        helpers.put_rows(a, mesh), tile_size=tile, return_info=True, **helpers.solve_kwargs(a, mesh)
    )
    assert info.shape == () and info.dtype == np.int32 and int(info) == 0
    check_eigenvalues(a, w, dtype)
    check_eigenvectors(a, w, v, dtype)
    if n % mesh.size == 0:  # eigenvectors come sharded by columns
        assert v.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "x")), 2), v.sharding


@pytest.mark.parametrize("tile", [1, 3, 5])
@pytest.mark.parametrize("devices", [3, 8])
@pytest.mark.parametrize("n", [37, 96])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=dtype_id)
def test_eigh_small_tiles(rng, dtype, n, devices, tile):
    mesh = helpers.mesh(devices)
    a = helpers.hermitian(rng, n, dtype)
    w, v = jaxmg.syevd(helpers.put_rows(a, mesh), tile_size=tile, **helpers.solve_kwargs(a, mesh))
    check_eigenvalues(a, w, dtype)
    check_eigenvectors(a, w, v, dtype)


@pytest.mark.parametrize("return_info", [False, True])
@pytest.mark.parametrize("n", [7, 96])
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_eigenvalues_only(rng, dtype, n, return_info):
    mesh = helpers.mesh(3)
    a = helpers.hermitian(rng, n, dtype)
    out = jaxmg.syevd(
        helpers.put_rows(a, mesh),
        compute_vectors=False,
        tile_size=2,
        return_info=return_info,
        **helpers.solve_kwargs(a, mesh),
    )
    if return_info:
        w, info = out
        assert int(info) == 0
    else:
        w = out  # a single array, not a tuple
    check_eigenvalues(a, w, dtype)


SPECTRA = {
    # Repeated eigenvalues: the vectors of a cluster are any orthonormal basis.
    "repeated": lambda n: np.repeat([-2.0, 1.0, 3.0], -(-n // 3))[:n],
    # Negative definite: padding must still sort after every eigenvalue.
    "negative": lambda n: -np.geomspace(1.0, 1e3, n),
    "zero": lambda n: np.zeros(n),
    # Large eigenvalues of both signs.
    "wide": lambda n: np.linspace(-1e4, 1e4, n),
}


@pytest.mark.parametrize("spectrum", list(SPECTRA))
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_special_spectra(rng, dtype, spectrum):
    """N = 13 on 3 devices with tile 2 is padded to 18: the padding
    eigenvalues must stay out of the way whatever a's spectrum."""
    n, mesh = 13, helpers.mesh(3)
    a = helpers.with_eigenvalues(rng, SPECTRA[spectrum](n), dtype)
    w, v = jaxmg.syevd(helpers.replicated(a, mesh), tile_size=2, mesh=mesh, spec=P("x", None))
    check_eigenvalues(a, w, dtype)
    check_eigenvectors(a, w, v, dtype)


@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_reads_upper_triangle_only(rng, dtype):
    n, mesh = 11, helpers.mesh(3)
    a = helpers.hermitian(rng, n, dtype)
    garbage = np.where(np.tri(n, k=-1, dtype=bool), helpers.random_matrix(rng, n, dtype) * 100, a)
    w, v = jaxmg.syevd(helpers.replicated(garbage, mesh), tile_size=2, mesh=mesh, spec=P("x", None))
    check_eigenvalues(a, w, dtype)
    check_eigenvectors(a, w, v, dtype)


def test_diagonal_exact():
    """A diagonal matrix: its eigenvalues are its sorted diagonal, exactly,
    wherever the tiles holding each diagonal entry went."""
    mesh = helpers.mesh(8)
    d = np.array([5.0, -1.0, 3.0, 0.5, 2.0, -4.0, 7.0, 1.0] * 2) * np.repeat([1.0, 10.0], 8)
    w, v = jaxmg.syevd(helpers.rows(np.diag(d), mesh), tile_size=1)
    np.testing.assert_array_equal(np.asarray(w), np.sort(d))
    check_eigenvectors(np.diag(d), w, v, np.float64)


def test_cusolvermg_tiles_on_gpus_are_capped_where_cusolvermg_refuses_wider(monkeypatch):
    """syevd's at 1024 (wider ones JAXMg 0.0.8 lowers to it too), getrf's at
    256; the other routines take the tile asked for (up to N / devices)."""
    from jaxmg._src.engines import mg
    from jaxmg._src.placement import Placement

    monkeypatch.setattr(mg, "platform_of", lambda placement: "cuda")
    placement = Placement(helpers.mesh(2), "x", manual=False)
    assert mg.ENGINE.tile("syevd", 8192, placement, 2048) == 1024
    assert mg.ENGINE.tile("syevd", 8192, placement, 512) == 512
    assert mg.ENGINE.tile("getrf", 8192, placement, 1024) == 256
    assert mg.ENGINE.tile("potrf", 8192, placement, 2048) == 2048
    assert mg.ENGINE.tile("potrf", 8192, placement, 8192) == 4096
