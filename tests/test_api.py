"""How callers use jaxmg: inside their own jit (mesh=/spec= or jax.set_mesh),
inside their own shard_map with local blocks, on Auto-axes meshes, with NumPy
inputs, single-device arrays, and with and without donating a."""

import functools
import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from jax.experimental import checkify
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import helpers
import jaxmg
from jaxmg._src import plans

CONDITION = 10.0
DTYPE = np.complex128  # complex: a conjugation slip cannot hide


def tol(n, dtype=DTYPE):
    return helpers.tolerance(dtype, n, CONDITION)


def auto_mesh(devices: int, first: int = 0) -> Mesh:
    """A mesh with Auto axes, as jax.sharding.Mesh builds it."""
    return Mesh(np.array(helpers.devices(first + devices)[first:]), ("x",))


def check_eigh(a, w, v, dtype=DTYPE):
    n = a.shape[0]
    np.testing.assert_allclose(
        np.asarray(w),
        np.linalg.eigvalsh(helpers.promote(a)),
        rtol=0,
        atol=helpers.tolerance(dtype, n) * np.abs(np.asarray(w)).max(),
    )
    a64, v64 = helpers.promote(a), helpers.promote(v)
    assert np.linalg.norm(a64 @ v64 - v64 * np.asarray(w)) / np.linalg.norm(
        a64
    ) <= helpers.tolerance(dtype, n)
    assert np.linalg.norm(v64.conj().T @ v64 - np.eye(n)) <= helpers.tolerance(dtype, n)


# ---- Inside the caller's jit ---------------------------------------------


@pytest.mark.parametrize("n, tile", [(12, 2), (13, 2)], ids=["N12", "N13-padded"])
def test_jit_with_mesh_and_spec(rng, n, tile):
    mesh = helpers.mesh(3)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    h = helpers.hermitian(rng, n, DTYPE)
    kw = dict(mesh=mesh, spec=P("x", None), tile_size=tile)

    @jax.jit
    def run(a, b, h):
        x, info = jaxmg.potrs(a, b, return_info=True, **kw)
        inv = jaxmg.potri(a, **kw)
        w, v = jaxmg.syevd(h, **kw)
        return x, info, inv, w, v

    x, info, inv, w, v = run(
        helpers.put_rows(a, mesh), helpers.replicated(b, mesh), helpers.put_rows(h, mesh)
    )
    assert int(info) == 0
    assert helpers.residual(a, x, b) <= tol(n)
    assert helpers.inverse_error(a, inv) <= tol(n)
    check_eigh(h, w, v)


def test_jit_composes_with_other_ops(rng):
    """jaxmg inside a larger jitted computation, called twice with new data."""
    n, mesh = 16, helpers.mesh(2)
    run = jax.jit(
        lambda a, b: 2.0 * jaxmg.potrs(a + 0.0, b, mesh=mesh, spec=P("x", None), tile_size=2)
    )
    for _ in range(2):
        a = helpers.spd(rng, n, DTYPE, CONDITION)
        b = helpers.random_matrix(rng, n, DTYPE, 3)
        x = run(helpers.rows(a, mesh), helpers.rows(b, mesh))
        assert helpers.residual(a, np.asarray(x) / 2, b) <= tol(n)


def test_jit_under_set_mesh(rng):
    """`with jax.set_mesh(mesh):` replaces mesh= inside the caller's jit."""
    n, mesh = 12, helpers.mesh(2)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    with jax.set_mesh(mesh):
        x = jax.jit(lambda a, b: jaxmg.potrs(a, b, spec=P("x", None), tile_size=2))(
            helpers.rows(a, mesh), helpers.replicated(b, mesh)
        )
        inv = jax.jit(lambda a: jaxmg.potri(a, tile_size=2))(helpers.rows(a, mesh))
    assert helpers.residual(a, x, b) <= tol(n)
    assert helpers.inverse_error(a, inv) <= tol(n)


def test_eager_under_set_mesh(rng):
    n, mesh = 12, helpers.mesh(3)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    with jax.set_mesh(mesh):
        x = jaxmg.potrs(helpers.rows(a, mesh), helpers.replicated(b, mesh), tile_size=2)
    assert helpers.residual(a, x, b) <= tol(n)


def test_jit_of_an_auto_axis_array_spreads_it_over_its_mesh(rng):
    """Under jit an array put on a mesh of Auto axes has a type that names
    the mesh but not the layout: jaxmg spreads the rows over that mesh (as
    under jax.set_mesh), whatever the layout was. A
    batch under vmap stays with JAX's solver, each matrix where it lies; a
    plain array (no mesh) runs JAX's solver, and backend="jaxmg" names the
    fixes there."""
    from jaxmg._src import library

    n = 8
    a = helpers.spd(rng, n, DTYPE)
    ours = library.target_name("lapack", "potri", DTYPE)
    for shape in ((1,), (2,), (2, 2)):
        names = ("x", "y")[: len(shape)]
        mesh = jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * len(shape),
                             devices=helpers.devices(int(np.prod(shape))))
        for spec in (P(), P(None, names[-1])):
            a_dev = jax.device_put(a, NamedSharding(mesh, spec))
            for backend in ("auto", "jaxmg"):
                f = jax.jit(functools.partial(jaxmg.potri, backend=backend))
                # auto on one CPU device picks JAX's solver, as it does eagerly
                spread = backend == "jaxmg" or mesh.size > 1
                assert (ours in f.lower(a_dev).as_text()) == spread, (shape, spec, backend)
                assert helpers.inverse_error(a, f(a_dev)) <= tol(n)
        batch = jax.device_put(np.stack([a, 2 * a]), NamedSharding(mesh, P(names[0])))
        f = jax.jit(jax.vmap(jaxmg.potri))
        assert ours not in f.lower(batch).as_text()
        inverses = f(batch)
        assert helpers.inverse_error(a, inverses[0]) <= tol(n)
        assert helpers.inverse_error(2 * a, inverses[1]) <= tol(n)
    plain = jnp.asarray(a)
    assert ours not in jax.jit(jaxmg.potri).lower(plain).as_text()
    assert helpers.inverse_error(a, jax.jit(jaxmg.potri)(plain)) <= tol(n)
    with pytest.raises(ValueError, match=r"backend='jaxmg' needs to know the devices.*jax.set_mesh"):
        jax.jit(functools.partial(jaxmg.potri, backend="jaxmg"))(plain)


def test_several_calls_in_one_jit(rng):
    """Three jaxmg calls in one program, dispatched 50 times without waiting:
    every call site meets its own participants."""
    n, mesh = 16, helpers.mesh(8)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    kw = dict(mesh=mesh, spec=P("x", None))

    @jax.jit
    def run(a, b):
        x = jaxmg.potrs(a, b, tile_size=1, **kw)
        inv = jaxmg.potri(a, tile_size=2, **kw)
        w, v = jaxmg.syevd(a, **kw)
        return x, inv, w, v

    outs = [run(helpers.rows(a, mesh), helpers.replicated(b, mesh)) for _ in range(50)]
    for x, inv, w, v in (outs[0], outs[-1]):
        assert helpers.residual(a, x, b) <= tol(n)
        assert helpers.inverse_error(a, inv) <= tol(n)
        check_eigh(a, w, v)


# ---- Inside the caller's shard_map -----------------------------------------


@pytest.mark.parametrize("tile", [2, 100], ids=["tile2", "tile100-capped"])
@pytest.mark.parametrize("b_layout", ["rows", "replicated"])
@pytest.mark.parametrize("devices", [2, 3])
def test_shard_map_potrs_local_blocks(rng, devices, b_layout, tile):
    """A tile that divides the blocks' 6 rows, or one beyond them (capped at
    them, as outside shard_map it is capped at N / devices)."""
    n = 6 * devices
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    b_spec = P("x", None) if b_layout == "rows" else P()

    def body(a_block, b_block):
        assert a_block.shape == (n // devices, n)
        x, info = jaxmg.potrs(a_block, b_block, tile_size=tile, return_info=True)
        assert x.shape == b_block.shape
        return x, info[None]

    run = jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(P("x", None), b_spec),
            out_specs=(b_spec, P("x")),
            check_vma=False,
        )
    )
    b_dev = jax.device_put(b, NamedSharding(mesh, b_spec))
    x, info = run(helpers.rows(a, mesh), b_dev)
    np.testing.assert_array_equal(np.asarray(info), np.zeros(devices))
    assert helpers.residual(a, x, b) <= tol(n)


def test_shard_map_potri_local_blocks(rng):
    n, devices = 12, 3
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, n, DTYPE, CONDITION)

    def body(a_block):
        inv, info = jaxmg.potri(a_block, tile_size=2, return_info=True)
        return inv, info[None]

    run = jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=P("x", None),
            out_specs=(P("x", None), P("x")),
            check_vma=False,
        )
    )
    inv, info = run(helpers.rows(a, mesh))
    np.testing.assert_array_equal(np.asarray(info), np.zeros(devices))
    inv = np.asarray(inv)
    np.testing.assert_array_equal(inv, inv.conj().T)
    assert helpers.inverse_error(a, inv) <= tol(n)


def test_shard_map_syevd_local_blocks(rng):
    """Inside shard_map syevd returns w and this device's rows of V^H."""
    n, devices = 12, 3
    mesh = helpers.mesh(devices)
    h = helpers.hermitian(rng, n, DTYPE)
    run = jax.jit(
        jax.shard_map(
            lambda blk: jaxmg.syevd(blk, tile_size=2),
            mesh=mesh,
            in_specs=P("x", None),
            out_specs=(P(), P("x", None)),
            check_vma=False,
        )
    )
    w, vh = run(helpers.rows(h, mesh))
    check_eigh(h, w, np.asarray(vh).conj().T)


def test_shard_map_not_positive_definite(rng):
    n, devices = 12, 2
    mesh = helpers.mesh(devices)
    a = helpers.hermitian(rng, n, DTYPE)
    expected = helpers.lapack_potrf_info(a)
    assert expected > 0

    def body(a_block, b_block):
        x, info = jaxmg.potrs(a_block, b_block, return_info=True)
        return x, info[None]

    run = jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(P("x", None), P("x", None)),
            out_specs=(P("x", None), P("x")),
            check_vma=False,
        )
    )
    x, info = run(helpers.rows(a, mesh), helpers.rows(np.ones((n, 1), DTYPE), mesh))
    np.testing.assert_array_equal(np.asarray(info), [expected] * devices)
    assert np.isnan(np.asarray(x)).all()


# ---- Auto-axes meshes ------------------------------------------------------


@pytest.mark.parametrize(
    "n, devices, tile", [(8, 1, None), (12, 2, 5), (37, 3, 2), (96, 8, 5), (96, 8, None)]
)
def test_auto_axes_mesh(rng, n, devices, tile):
    mesh = auto_mesh(devices)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    h = helpers.hermitian(rng, n, DTYPE)
    kw = dict(tile_size=tile, **helpers.solve_kwargs(a, mesh))
    b_dev = helpers.rows(b, mesh) if n % devices == 0 else helpers.replicated(b, mesh)
    x = jaxmg.potrs(helpers.put_rows(a, mesh), b_dev, **kw)
    assert x.sharding.is_equivalent_to(b_dev.sharding, 2)
    assert helpers.residual(a, x, b) <= tol(n)
    assert helpers.inverse_error(a, jaxmg.potri(helpers.put_rows(a, mesh), **kw)) <= tol(n)
    w, v = jaxmg.syevd(helpers.put_rows(h, mesh), **kw)
    check_eigh(h, w, v)


def test_auto_axes_mesh_in_jit(rng):
    n, mesh = 24, auto_mesh(3, first=2)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 1)
    x = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=P("x", None), tile_size=3))(
        helpers.rows(a, mesh), helpers.rows(b, mesh)
    )
    assert helpers.residual(a, x, b) <= tol(n)


MESH_SHAPES = {
    "4x1": ((4, 1), ("x", "y")),  # a second axis of size 1 is allowed
    "1x4": ((1, 4), ("y", "x")),
    "named": ((4,), ("gpus",)),
}


@pytest.mark.parametrize("axis_types", ["explicit", "auto"])
@pytest.mark.parametrize("shape", list(MESH_SHAPES))
def test_mesh_shapes_and_axis_names(rng, shape, axis_types):
    dims, names = MESH_SHAPES[shape]
    axis = "gpus" if "gpus" in names else "x"
    if axis_types == "explicit":
        mesh = jax.make_mesh(dims, names, devices=helpers.devices(4))
    else:
        mesh = Mesh(np.array(helpers.devices(4)).reshape(dims), names)
    n = 12
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    a_dev = jax.device_put(a, NamedSharding(mesh, P(axis, None)))
    assert helpers.residual(a, jaxmg.potrs(a_dev, b, tile_size=1), b) <= tol(n)
    assert helpers.inverse_error(a, jaxmg.potri(a_dev, tile_size=1)) <= tol(n)
    check_eigh(a, *jaxmg.syevd(a_dev, tile_size=1))


@pytest.mark.parametrize("spec", [P(), P("r", "c"), P("c", None)], ids=str)
def test_a_mesh_of_explicit_and_auto_axes_is_refused_naming_the_fix(rng, spec):
    """JAX lays a matrix out over both kinds of axis at once neither by
    reshard nor by with_sharding_constraint (it failed inside jaxmg)."""
    mesh = jax.make_mesh((2, 4), ("r", "c"), devices=helpers.devices(8),
                         axis_types=(jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto))
    a = jax.device_put(helpers.spd(rng, 8, np.float64, CONDITION), NamedSharding(mesh, spec))
    for call in (lambda: jaxmg.solve(a, np.ones(8), assume_a="pos"), lambda: jaxmg.inv(a),
                 lambda: jaxmg.eigvalsh(a)):
        with pytest.raises(ValueError, match=r"spread over mesh axes of two types .*Explicit.*"
                                             r"put it on a mesh of the same devices"):
            call()


def test_a_matrix_on_other_devices_than_the_set_mesh_is_named(rng):
    a = helpers.rows(helpers.spd(rng, 8, np.float64, CONDITION), helpers.mesh(4, first=4))
    with jax.set_mesh(helpers.mesh(8)):
        for call in (lambda: jaxmg.solve(a, np.ones(8), assume_a="pos"), lambda: jaxmg.inv(a)):
            with pytest.raises(ValueError, match=r"a lives on devices \[4, 5, 6, 7\], but the "
                                                 r"mesh of jax.set_mesh has devices \[0, 1, 2"):
                call()
    with jax.set_mesh(helpers.mesh(4)), pytest.raises(
            ValueError, match=r"a lives on devices \[2\], but the mesh of jax.set_mesh"):
        jaxmg.solve(jax.device_put(np.eye(8) * 2.0, helpers.devices(8)[2]), np.ones(8))
    # an uncommitted one goes onto the mesh
    with jax.set_mesh(helpers.mesh(4)):
        x = jaxmg.solve(jnp.asarray(np.eye(8) * 2.0), np.ones(8))
    np.testing.assert_allclose(np.asarray(x), np.full(8, 0.5))


def test_permuted_devices(rng):
    """A mesh over devices in no particular order: positions on the axis,
    not device ids, decide who holds which rows."""
    mesh = Mesh(np.array([helpers.devices(8)[i] for i in (5, 2, 7, 0)]), ("x",))
    n = 16
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    a_dev = helpers.rows(a, mesh)
    x = jaxmg.potrs(a_dev, helpers.rows(b, mesh), tile_size=1)
    assert helpers.residual(a, x, b) <= tol(n)
    assert helpers.inverse_error(a, jaxmg.potri(a_dev, tile_size=2)) <= tol(n)
    check_eigh(a, *jaxmg.syevd(a_dev, tile_size=1))


# ---- Where the data comes from ------------------------------------------


def test_numpy_inputs_with_mesh_and_spec(rng):
    n, mesh = 12, helpers.mesh(3)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    kw = dict(mesh=mesh, spec=P("x", None), tile_size=2)
    x = jaxmg.potrs(a, b, **kw)
    assert helpers.residual(a, x, b) <= tol(n)
    assert helpers.residual(a, jaxmg.potrs(a, b[:, 0], **kw)[:, None], b[:, :1]) <= tol(n)
    assert helpers.inverse_error(a, jaxmg.potri(a, **kw)) <= tol(n)
    h = helpers.hermitian(rng, n, DTYPE)
    check_eigh(h, *jaxmg.syevd(h, **kw))


@pytest.mark.parametrize("axis_types", ["explicit", "auto"])
@pytest.mark.parametrize("other", ["2x2 (r, c)", "1-D y", "reversed x"])
def test_mesh_of_the_same_devices_in_other_axes_or_order_moves_the_arrays(rng, other,
                                                                          axis_types):
    """a and b on a mesh of 4 devices, mesh= another mesh of them: both move
    onto mesh= (rows over all of it), as the README says, eagerly."""
    n = 12
    devices = jax.devices()[:4]
    types = {"explicit": jax.sharding.AxisType.Explicit, "auto": jax.sharding.AxisType.Auto}
    make = lambda shape, names, devs: jax.make_mesh(  # noqa: E731
        shape, names, devices=devs, axis_types=(types[axis_types],) * len(names))
    home = make((4,), ("x",), devices)
    mesh = {"2x2 (r, c)": make((2, 2), ("r", "c"), devices), "1-D y": make((4,), ("y",), devices),
            "reversed x": make((4,), ("x",), devices[::-1])}[other]
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    g = a + np.triu(helpers.random_matrix(rng, n, DTYPE), 1)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    put = lambda x: jax.device_put(x, NamedSharding(home, P("x", None)))  # noqa: E731
    x = jaxmg.solve(put(a), put(b), assume_a="pos", mesh=mesh)
    assert x.sharding.mesh == mesh
    assert helpers.residual(a, x, b) <= tol(n)
    x = jaxmg.lu_solve(jaxmg.lu_factor(put(g), mesh=mesh), put(b))
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(g, b), rtol=1e-9, atol=1e-12)
    h = helpers.hermitian(rng, n, DTYPE)
    check_eigh(h, *jaxmg.syevd(put(h), mesh=mesh))


def test_numpy_right_hand_side(rng):
    n, mesh = 12, helpers.mesh(2)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 3)
    x = jaxmg.potrs(helpers.rows(a, mesh), b)
    assert x.sharding.is_fully_replicated
    assert helpers.residual(a, x, b) <= tol(n)


@pytest.mark.parametrize("n", [1, 10])
def test_single_device_array(rng, n):
    """jnp.asarray(numpy) lives on one device: a one-device mesh."""
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    h = helpers.hermitian(rng, n, DTYPE)
    assert helpers.residual(a, jaxmg.potrs(jnp.asarray(a), jnp.asarray(b)), b) <= tol(n)
    assert helpers.inverse_error(a, jaxmg.potri(jnp.asarray(a), tile_size=3)) <= tol(n)
    check_eigh(h, *jaxmg.syevd(jnp.asarray(h)))


def test_array_on_another_single_device(rng):
    n = 9
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 1)
    device = helpers.devices(6)[5]
    x = jaxmg.potrs(jax.device_put(a, device), jax.device_put(b, device), tile_size=2)
    assert x.sharding.device_set == {device}
    assert helpers.residual(a, x, b) <= tol(n)


OPERANDS_ON_OTHER_DEVICES = {
    "solve": lambda a, b: jaxmg.solve(a, b),
    "solve-raise": lambda a, b: jaxmg.solve(a, b, on_failure="raise"),
    "potrs": lambda a, b: jaxmg.potrs(a, b),
    "solve_triangular": lambda a, b: jaxmg.solve_triangular(a, b),
    "lstsq": lambda a, b: jaxmg.lstsq(a, b),
    "eigh": lambda a, b: jaxmg.eigh(a, b=b),
    "eigh-raise": lambda a, b: jaxmg.eigh(a, b=b, on_failure="raise"),
}


@pytest.mark.parametrize("routine", list(OPERANDS_ON_OTHER_DEVICES))
@pytest.mark.parametrize("explicit", [False, True])
def test_operands_committed_to_other_devices_are_named(rng, routine, explicit):
    """a sharded over four devices, b committed to one of them: refused as
    JAX refuses committed arrays on different devices, naming both operands
    and the fix, whichever path the call takes (with Explicit axes a raising
    eigh's inner steps failed on a mesh axis the message did not name)."""
    n = 8
    types = (jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto,)
    mesh = jax.make_mesh((4,), ("x",), axis_types=types, devices=helpers.devices(4))
    a = helpers.rows(helpers.spd(rng, n, DTYPE, CONDITION), mesh)
    b = jax.device_put(helpers.spd(rng, n, DTYPE, CONDITION), helpers.devices(4)[1])
    with pytest.raises(ValueError, match=r"a lives on devices \[0, 1, 2, 3\] and b on devices "
                                         r"\[1\].*jax.device_put\(b, NamedSharding\("
                                         r"a.sharding.mesh, P\(\)\)\)"):
        OPERANDS_ON_OTHER_DEVICES[routine](a, b)
    # where b is put as the message says, the call runs (b of any rank)
    out = OPERANDS_ON_OTHER_DEVICES[routine](a, jax.device_put(b, NamedSharding(a.sharding.mesh,
                                                                               P())))
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(out))


UNPLACED_MATRIX = {
    "solve": (lambda a, b: jaxmg.solve(a, b), np.linalg.solve),
    "solve-pos-raise": (lambda a, b: jaxmg.solve(a, b, assume_a="pos", on_failure="raise"),
                        np.linalg.solve),
    "solve_triangular": (lambda a, b: jaxmg.solve_triangular(a, b, lower=True),
                         lambda a, b: scipy.linalg.solve_triangular(a, b, lower=True)),
    "lstsq": (lambda a, b: jaxmg.lstsq(a, b)[0], lambda a, b: np.linalg.lstsq(a, b)[0]),
    "expm_frechet": (lambda a, b: jaxmg.expm_frechet(a / 40, b / 40)[1],
                     lambda a, b: scipy.linalg.expm_frechet(a / 40, b / 40)[1]),
    "eigh": (lambda a, b: jaxmg.eigh(a, b=b)[0], lambda a, b: scipy.linalg.eigh(a, b)[0]),
    "eigh-raise": (lambda a, b: jaxmg.eigh(a, b=b, on_failure="raise")[0],
                   lambda a, b: scipy.linalg.eigh(a, b)[0]),
}


@pytest.mark.parametrize("unplaced", ["numpy", "jnp.asarray"])
@pytest.mark.parametrize("routine", list(UNPLACED_MATRIX))
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("which", ["a", "b"])
def test_an_unplaced_operand_goes_where_the_other_lies(rng, routine, explicit, unplaced, which):
    """One operand sharded over four devices, the other a NumPy array or an
    uncommitted jnp.asarray: the call runs on the sharded one's devices, as
    jit moves such an operand for JAX's functions (an unplaced a beside a
    sharded b failed inside the solvers; so did generalized eigh raising on
    failure, whichever was unplaced)."""
    n = 8
    types = (jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto,)
    mesh = jax.make_mesh((4,), ("x",), axis_types=types, devices=helpers.devices(4))
    a = helpers.spd(rng, n, np.float64, CONDITION)
    b = helpers.spd(rng, n, np.float64, CONDITION)
    loose = np.asarray if unplaced == "numpy" else jnp.asarray
    ours, theirs = UNPLACED_MATRIX[routine]
    args = (loose(a), helpers.rows(b, mesh)) if which == "a" else (helpers.rows(a, mesh), loose(b))
    got = ours(*args)
    assert got.sharding.device_set == set(mesh.devices.flat)
    np.testing.assert_allclose(np.asarray(got), theirs(a, b), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("unplaced", ["numpy", "jnp.asarray"])
@pytest.mark.parametrize("routine", ["solve", "inv", "eigh", "cholesky", "svd", "pinv", "det",
                                     "lstsq", "expm"])
def test_results_of_unplaced_inputs_are_uncommitted_as_jaxs(rng, routine, unplaced):
    """JAX's results of NumPy or jnp.asarray inputs are uncommitted, so the
    caller's next step may meet arrays on other devices; jaxmg's are too."""
    n = 8
    a = np.asarray(helpers.spd(rng, n, np.float64, CONDITION))
    b = helpers.random_matrix(rng, n, np.float64, n)
    loose = np.asarray if unplaced == "numpy" else jnp.asarray
    calls = {
        "solve": lambda m: (jaxmg.solve(m, loose(b)), jnp.linalg.solve(m, b)),
        "inv": lambda m: (jaxmg.inv(m), jnp.linalg.inv(m)),
        "eigh": lambda m: (jaxmg.eigh(m)[0], jnp.linalg.eigh(m)[0]),
        "cholesky": lambda m: (jaxmg.cholesky(m), jax.scipy.linalg.cholesky(m)),
        "svd": lambda m: (jaxmg.svd(m)[1], jnp.linalg.svd(m)[1]),
        "pinv": lambda m: (jaxmg.pinv(m), jnp.linalg.pinv(m)),
        "det": lambda m: (jaxmg.det(m), jnp.linalg.det(m)),
        "lstsq": lambda m: (jaxmg.lstsq(m, loose(b))[0], jnp.linalg.lstsq(m, b)[0]),
        "expm": lambda m: (jaxmg.expm(m / 40), jax.scipy.linalg.expm(m / 40)),
    }
    ours, theirs = calls[routine](loose(a))
    assert not theirs.committed
    assert not ours.committed
    mesh = helpers.mesh(4)
    other = jax.device_put(jnp.ones(ours.shape), NamedSharding(mesh, P(*(None,) * ours.ndim)))
    np.testing.assert_allclose(np.asarray(ours + other), np.asarray(theirs + other),
                               rtol=1e-8, atol=1e-8)


def test_an_unplaced_matrix_named_a_goes_where_b_lies(rng):
    mesh = helpers.mesh(4)
    a = helpers.spd(rng, 8, np.float64, CONDITION)
    b = helpers.rows(helpers.random_matrix(rng, 8, np.float64, 2), mesh)
    x = jaxmg.solve(a=a, b=b)
    assert x.sharding.device_set == set(mesh.devices.flat)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, np.asarray(b)), rtol=1e-9)


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("routine", ["lu_solve", "cho_solve"])
def test_jax_scipys_unplaced_factor_goes_where_b_lies(rng, routine, explicit):
    """jax.scipy's own factor tuples of a NumPy matrix are uncommitted: with
    a b on other devices they are solved there, as jax.scipy solves them."""
    n = 8
    types = (jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto,)
    mesh = jax.make_mesh((4,), ("x",), axis_types=types, devices=helpers.devices(4))
    a = helpers.spd(rng, n, np.float64, CONDITION)
    b = helpers.random_matrix(rng, n, np.float64, 2)
    factor = (jax.scipy.linalg.lu_factor(a) if routine == "lu_solve"
              else jax.scipy.linalg.cho_factor(a))
    # (rows of b sharded on Explicit axes: JAX's own lu_solve refuses them too)
    on_mesh = (jax.device_put(b, NamedSharding(mesh, P())) if explicit
               else helpers.rows(b, mesh))
    for placed in (on_mesh, jax.device_put(b, helpers.devices(4)[1])):
        x = getattr(jaxmg, routine)(factor, placed)
        assert x.sharding.device_set == placed.sharding.device_set
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-9)


def test_a_deleted_unplaced_matrix_beside_a_committed_operand_is_named(rng):
    a = jnp.asarray(helpers.spd(rng, 8, np.float64, CONDITION))
    b = helpers.random_matrix(rng, 8, np.float64, 2)
    jaxmg.potrs(a, b, donate=True)
    assert a.is_deleted()
    committed = jax.device_put(b, helpers.devices(2)[1])
    with pytest.raises(ValueError, match="a was deleted"):
        jaxmg.solve(a, committed)
    with pytest.raises(ValueError, match="b was deleted"):
        jaxmg.eigh(helpers.rows(helpers.spd(rng, 8, np.float64, CONDITION), helpers.mesh(4)),
                   b=a)


@pytest.mark.parametrize("routine", ["solve", "potrs", "eigh-b", "lstsq"])
def test_a_deleted_operand_beside_numpy_is_named(rng, routine):
    """A donated (deleted) array with NumPy operands: jaxmg's message naming
    it (JAX's own error, 'Array has been deleted', names none)."""
    a = helpers.spd(rng, 8, np.float64, CONDITION)
    gone = jnp.asarray(a)
    jaxmg.potrs(gone, a[:, :1], donate=True)
    assert gone.is_deleted()
    calls = {
        "solve": lambda: jaxmg.solve(gone, a[:, :2]),
        "potrs": lambda: jaxmg.potrs(gone, a[:, :2]),
        "eigh-b": lambda: jaxmg.eigh(a, b=gone),
        "lstsq": lambda: jaxmg.lstsq(a, gone),
    }
    name = "a" if routine in ("solve", "potrs") else "b"
    with pytest.raises(ValueError, match=f"jaxmg: {name} was deleted"):
        calls[routine]()


def test_under_set_mesh_an_unplaced_matrix_stays_with_the_mesh(rng):
    """Under jax.set_mesh the mesh decides where a NumPy a goes; a b
    committed off the mesh is refused as JAX refuses it, with a ValueError."""
    mesh = jax.make_mesh((4,), ("x",), devices=helpers.devices(4))
    a = helpers.spd(rng, 8, np.float64, CONDITION)
    off_mesh = jax.device_put(helpers.random_matrix(rng, 8, np.float64, 2), helpers.devices(6)[5])
    with jax.set_mesh(mesh), pytest.raises(ValueError):
        jaxmg.solve(a, off_mesh)


def test_a_factor_and_a_right_hand_side_on_other_devices_are_named(rng):
    mesh = helpers.mesh(4)
    factor = jaxmg.cho_factor(helpers.rows(helpers.spd(rng, 8, DTYPE, CONDITION), mesh))
    b = jax.device_put(helpers.random_matrix(rng, 8, DTYPE, 1), helpers.devices(4)[2])
    with pytest.raises(ValueError, match=r"cho_solve's c_and_lower lives on devices "
                                         r"\[0, 1, 2, 3\] and b on devices \[2\]"):
        jaxmg.cho_solve(factor, b)
    # uncommitted, b goes where the factor is
    x = jaxmg.cho_solve(factor, jnp.asarray(helpers.random_matrix(rng, 8, DTYPE, 1)))
    assert np.all(np.isfinite(np.asarray(x)))


# A factor whose arrays left its devices (jax.device_get, pickling, a
# checkpoint's tree_map to NumPy) is put back on them by its solves, as jit
# puts NumPy operands on their devices; pickled, it names its devices by id.
FACTORS = {
    "cho": (jaxmg.cho_factor, jaxmg.cho_solve),
    "lu": (jaxmg.lu_factor, jaxmg.lu_solve),
    "cho-mixed": (functools.partial(jaxmg.cho_factor, precision="mixed"), jaxmg.cho_solve),
    "lu-mixed": (functools.partial(jaxmg.lu_factor, precision="mixed"), jaxmg.lu_solve),
}
MOVES = {
    "device_get": jax.device_get,
    "tree_map-numpy": lambda f: jax.tree.map(np.asarray, f),
    "pickle-host": lambda f: pickle.loads(pickle.dumps(jax.device_get(f))),
    "pickle": lambda f: pickle.loads(pickle.dumps(f)),
}


def placed(x, where):
    if where == "rows":
        return helpers.rows(x, helpers.mesh(4))
    if where == "2-D blocks":
        mesh = jax.make_mesh((2, 2), ("r", "c"), devices=helpers.devices(8)[4:])
        return jax.device_put(x, NamedSharding(mesh, P("r", "c")))
    if where == "replicated":
        return jax.device_put(x, NamedSharding(helpers.mesh(4), P()))
    return jnp.asarray(x)


# (a row-sharded mixed factor's mesh is abstract: the test after this one)
OFF_DEVICES = [(routine, where, move) for routine in FACTORS
               for where in ("rows", "2-D blocks", "replicated", "one device") for move in MOVES
               if not (routine.endswith("mixed") and where in ("rows", "2-D blocks"))]


@pytest.mark.parametrize("routine, where, move", OFF_DEVICES,
                         ids=["-".join(case) for case in OFF_DEVICES])
def test_a_factor_off_its_devices_solves_as_before(rng, routine, where, move):
    factor, solve = FACTORS[routine]
    a = helpers.spd(rng, 8, np.float64, CONDITION)
    b = rng.standard_normal(8)
    f = factor(placed(a, where))
    moved = MOVES[move](f)
    assert type(moved) is type(f)
    np.testing.assert_allclose(np.asarray(solve(moved, b)), np.asarray(solve(f, b)),
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda b: solve(moved, b))(b)),
                               np.linalg.solve(a, b), rtol=1e-10)
    if not routine.endswith("mixed"):  # it unpacks as JAX's pair, as before
        for x, y in zip(moved, f):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-13, atol=1e-13)


def test_a_batch_of_factors_off_its_devices_solves(rng):
    a = np.stack([helpers.spd(rng, 8, np.float64, CONDITION) for _ in range(3)])
    b = rng.standard_normal((3, 8))
    f = jax.device_get(jax.vmap(jaxmg.cho_factor)(jnp.asarray(a)))
    np.testing.assert_allclose(np.asarray(jaxmg.cho_solve(f, b)),
                               np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-10)
    assert np.isclose(float(jaxmg.cho_logdet(jax.device_get(jaxmg.cho_factor(
        helpers.rows(a[0], helpers.mesh(4)))))), np.linalg.slogdet(a[0])[1])


def test_a_row_sharded_mixed_factor_off_its_devices_is_refused(rng):
    a = helpers.rows(helpers.spd(rng, 8, np.float64, CONDITION), helpers.mesh(4))
    f = jax.device_get(jaxmg.cho_factor(a, precision="mixed"))
    with pytest.raises(ValueError, match="precision='mixed' factor's arrays are no longer on "
                                         "the devices.*keep it on its devices"):
        jaxmg.cho_solve(f, np.ones(8))


LOAD_FACTOR = """
import pickle, sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxmg
try:
    f = pickle.load(open(sys.argv[1], "rb"))
    x = jaxmg.cho_solve(f, np.load(sys.argv[2]))
    np.testing.assert_allclose(np.asarray(x), np.load(sys.argv[3]), rtol=1e-13)
    print("same solution on", sorted(d.id for d in x.sharding.device_set))
except ValueError as e:
    print("refused:", e)
"""


@pytest.mark.parametrize("devices", [8, 2])
def test_a_pickled_factor_loads_in_a_process_with_its_devices(rng, tmp_path, devices):
    mesh = jax.make_mesh((4,), ("x",), devices=helpers.devices(8)[4:])
    a = jax.device_put(helpers.spd(rng, 8, np.float64, CONDITION), NamedSharding(mesh, P("x")))
    b = rng.standard_normal(8)
    f = jaxmg.cho_factor(a)
    (tmp_path / "f.pkl").write_bytes(pickle.dumps(f))
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "x.npy", np.asarray(jaxmg.cho_solve(f, b)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    run = subprocess.run([sys.executable, "-c", LOAD_FACTOR, *(str(tmp_path / name) for name in
                                                               ("f.pkl", "b.npy", "x.npy"))],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    if devices == 8:
        assert "same solution on [4, 5, 6, 7]" in run.stdout
    else:
        assert "refused: jaxmg: this factor was made on cpu devices [4, 5, 6, 7], and this " \
               "process has no device 4" in run.stdout, run.stdout


# ---- Donation ----------------------------------------------------------------

ROUTINES = ["potrs", "potri", "syevd"]


def call(routine, a_dev, b, **kw):
    if routine == "potrs":
        return jaxmg.potrs(a_dev, b, **kw)
    if routine == "potri":
        return jaxmg.potri(a_dev, **kw)
    return jaxmg.syevd(a_dev, **kw)


def check(routine, a, out, b):
    n = a.shape[0]
    if routine == "potrs":
        assert helpers.residual(a, out, b) <= tol(n)
    elif routine == "potri":
        assert helpers.inverse_error(a, out) <= tol(n)
    else:
        check_eigh(a, *out)


@pytest.mark.parametrize("tile", [None, 2], ids=["tile_default", "tile2"])
@pytest.mark.parametrize("routine", ROUTINES)
def test_inputs_kept_by_default(rng, routine, tile):
    n, mesh = 12, helpers.mesh(3)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    a_dev, b_dev = helpers.rows(a, mesh), helpers.rows(b, mesh)
    out = call(routine, a_dev, b_dev, tile_size=tile)
    check(routine, a, out, b)
    assert not a_dev.is_deleted() and not b_dev.is_deleted()
    # ... and unchanged: the in-place work happened on a copy.
    np.testing.assert_array_equal(np.asarray(a_dev), a)
    np.testing.assert_array_equal(np.asarray(b_dev), b)
    # A second call on the same input gives the same answer.
    again = call(routine, a_dev, b_dev, tile_size=tile)
    for first, second in zip(jax.tree.leaves(out), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(first), np.asarray(second))


@pytest.mark.parametrize("tile", [None, 2], ids=["tile_default", "tile2"])
@pytest.mark.parametrize("routine", ROUTINES)
def test_donate_consumes_a(rng, routine, tile):
    n, mesh = 12, helpers.mesh(3)
    a = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.random_matrix(rng, n, DTYPE, 2)
    a_dev, b_dev = helpers.rows(a, mesh), helpers.rows(b, mesh)
    out = call(routine, a_dev, b_dev, tile_size=tile, donate=True)
    check(routine, a, out, b)
    deleted = a_dev.is_deleted()
    assert deleted, "donate=True must hand a's buffer to jaxmg (a.is_deleted() is False)"
    assert not b_dev.is_deleted()


def test_an_array_donated_then_passed_in_jaxmgs_positional_form_is_named(rng):
    """potrs(a, b, T_A, mesh, in_specs) binds no signature of jaxmg's; its
    arguments are still checked (a deleted buffer reached the program and
    crashed the process)."""
    mesh = helpers.mesh(8)
    a = helpers.rows(helpers.spd(rng, 16, np.float64, CONDITION), mesh)
    b = np.ones((16, 2))
    jaxmg.potrs(a, b, 2, mesh, P("x", None), donate=True)
    assert a.is_deleted()
    for donate in (False, True):
        with pytest.raises(ValueError, match="a was deleted: an earlier call with donate=True"):
            jaxmg.potrs(a, b, 2, mesh, P("x", None), donate=donate)


def test_donate_refuses_b_that_is_a_and_a_differentiated_a(rng):
    """donate=True gives a's buffer away: b may not be a itself (XLA would
    read a buffer it gave the result), and a may not be differentiated (its
    derivative would be lost, or XLA's refusal would not name donate). Each
    is a ValueError naming donate, with a left whole."""
    n, mesh = 12, helpers.mesh(2)
    a_dev = helpers.rows(helpers.spd(rng, n, DTYPE, CONDITION), mesh)
    with pytest.raises(ValueError, match="donate=True.*b is a itself"):
        jaxmg.potrs(a_dev, a_dev, donate=True)
    assert not a_dev.is_deleted()
    b = np.ones((n, 1), DTYPE)
    differentiated = {
        "potrs": lambda x: jaxmg.potrs(x, b, donate=True).sum(),
        "cho_factor": lambda x: jaxmg.cho_solve(jaxmg.cho_factor(x, donate=True), b).sum(),
        "lu_factor": lambda x: jaxmg.lu_solve(jaxmg.lu_factor(x, donate=True), b).sum(),
        "potri": lambda x: jaxmg.potri(x, donate=True).sum(),
        "syevd": lambda x: jaxmg.syevd(x, compute_vectors=False, donate=True).sum(),
    }
    with jax.set_mesh(mesh):
        for name, loss in differentiated.items():
            for transform in (jax.grad, lambda f: jax.jit(jax.grad(f)),
                              lambda f: lambda x: jax.jvp(f, (x,), (x,))[1]):
                with pytest.raises(ValueError, match="donate=True gives up a"):
                    transform(loss)(a_dev)
                assert not a_dev.is_deleted(), name
        # A donated a still solves differentiably in b, as JAX's solve does.
        a_np = np.asarray(a_dev)
        want = jax.grad(lambda y: jnp.real(jnp.sum(jnp.linalg.solve(a_np, y))))(b.astype(DTYPE))
        for name, loss in {
            "potrs": lambda y: jaxmg.potrs(helpers.rows(a_np, mesh), y, donate=True),
            "cho_factor": lambda y: jaxmg.cho_solve(
                jaxmg.cho_factor(helpers.rows(a_np, mesh), donate=True), y),
            "lu_factor": lambda y: jaxmg.lu_solve(
                jaxmg.lu_factor(helpers.rows(a_np, mesh), donate=True), y),
        }.items():
            for transform in (jax.grad, lambda f: jax.jit(jax.grad(f))):
                g = transform(lambda y: jnp.real(jnp.sum(loss(y))))(b.astype(DTYPE))
                np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-10,
                                           err_msg=name)


def test_donated_results_correct_over_repeated_calls(rng):
    """Donated calls reuse buffers; results must stay right call after call."""
    n, mesh = 24, helpers.mesh(8)
    for _ in range(3):
        a = helpers.spd(rng, n, DTYPE, CONDITION)
        inv = jaxmg.potri(helpers.rows(a, mesh), tile_size=1, donate=True)
        assert helpers.inverse_error(a, inv) <= tol(n)


# ---- Repeated eager calls --------------------------------------------------




def _small_problem(rng, n=12):
    """n, a 2-device mesh, an SPD matrix, it row-sharded there, and a replicated b."""
    mesh = helpers.mesh(2)
    a_np = helpers.spd(rng, n, DTYPE, CONDITION)
    b = helpers.replicated(helpers.random_matrix(rng, n, DTYPE, 1), mesh)
    return n, mesh, a_np, helpers.put_rows(a_np, mesh), b


def _check_solve(a_np, b, x, n):
    want = np.linalg.solve(helpers.promote(a_np), helpers.promote(np.asarray(b)))
    np.testing.assert_allclose(helpers.promote(np.asarray(x)), want, atol=tol(n) * np.abs(want).max())


def test_repeated_eager_calls_reuse_one_plan(rng):
    n = 12
    mesh = helpers.mesh(2)
    a_np = helpers.spd(rng, n, DTYPE, CONDITION)
    a = helpers.put_rows(a_np, mesh)
    plans.clear()
    for _ in range(3):
        b = helpers.replicated(helpers.random_matrix(rng, n, DTYPE, 2), mesh)
        _check_solve(a_np, b, jaxmg.potrs(a, b, tile_size=2), n)
    assert plans.count() == 1


def test_plans_follow_sharding_shape_and_options(rng):
    """Each distinct call gets its own plan and its own right answer, also
    when the calls come again in another order."""
    n = 12
    a_np = helpers.spd(rng, n, DTYPE, CONDITION)
    m2, m3 = helpers.mesh(2), helpers.mesh(3)
    b1 = helpers.random_matrix(rng, n, DTYPE, 1)
    b3 = helpers.random_matrix(rng, n, DTYPE, 3)
    cases = [
        (helpers.put_rows(a_np, m2), helpers.replicated(b1, m2), {}),
        (helpers.put_rows(a_np, m2), helpers.replicated(b3, m2), {}),
        (helpers.put_rows(a_np, m2), helpers.put_rows(b3, m2), {}),
        (helpers.put_rows(a_np, m3), helpers.replicated(b1, m3), {}),
        (helpers.put_rows(a_np, m2), helpers.replicated(b1, m2), {"tile_size": 3}),
        (helpers.put_rows(a_np, m2), helpers.replicated(b1[:, 0], m2), {}),
    ]
    plans.clear()
    for a, b, kw in cases + cases[::-1]:
        x = jaxmg.potrs(a, b, **kw)
        assert x.shape == b.shape
        _check_solve(a_np, b, x, n)
    x, info = jaxmg.potrs(*cases[0][:2], return_info=True)
    _check_solve(a_np, cases[0][1], x, n)
    assert int(info) == 0
    assert plans.count() == len(cases) + 1


def test_solve_plans_keep_each_assumption_and_failure_mode(rng):
    n, mesh, a_np, a, b = _small_problem(rng)
    plans.clear()
    for _ in range(2):
        _check_solve(a_np, b, jaxmg.solve(a, b, assume_a="pos"), n)
        _check_solve(a_np, b, jaxmg.solve(a, b), n)
    assert plans.count() == 2
    singular = helpers.put_rows(np.zeros((n, n), DTYPE), mesh)
    assert np.isnan(np.asarray(jaxmg.solve(singular, b))).all()
    with pytest.raises(jaxmg.LinAlgError, match="singular"):
        jaxmg.solve(singular, b, on_failure="raise")
    assert plans.count() == 2  # "raise" reports on every call: no plan


def test_every_eager_routine_reuses_its_plan(rng):
    """potri, syevd, eigh, eigvalsh and the factorisations keep one plan per
    call signature (one dispatch on repeats), and a repeat on new values of the
    same shape still gives that matrix's answer. (inv is one jitted program,
    test_eager_programs.py.)"""
    n = 12
    mesh = helpers.mesh(2)
    calls = {
        "potri": lambda a: jaxmg.potri(a),
        "syevd": lambda a: jaxmg.syevd(a)[0],
        "syevd values": lambda a: jaxmg.syevd(a, compute_vectors=False),
        "eigh": lambda a: jaxmg.eigh(a).eigenvalues,
        "eigvalsh": lambda a: jaxmg.eigvalsh(a),
        "cho_factor": lambda a: jaxmg.cho_solve(jaxmg.cho_factor(a), jnp.eye(n, dtype=a.dtype)),
        "lu_factor": lambda a: jaxmg.lu_solve(jaxmg.lu_factor(a), jnp.eye(n, dtype=a.dtype)),
    }
    plans.clear()
    for name, call in calls.items():
        before = plans.count()
        for _ in range(3):
            a_np = helpers.spd(rng, n, DTYPE, CONDITION)
            got = helpers.promote(np.asarray(call(helpers.put_rows(a_np, mesh))))
            a_hi = helpers.promote(a_np)
            want = np.linalg.eigvalsh(a_hi) if got.ndim == 1 else np.linalg.inv(a_hi)
            np.testing.assert_allclose(got, want, atol=tol(n) * np.abs(want).max(), err_msg=name)
        assert plans.count() == before + 1, name


def test_planned_calls_still_report_failures(rng):
    n, mesh, _, a, _ = _small_problem(rng)
    bad = helpers.put_rows(np.full((n, n), np.nan, DTYPE), mesh)
    not_spd = helpers.put_rows(-np.eye(n, dtype=DTYPE), mesh)
    for call in (lambda x: jaxmg.eigh(x, on_failure="raise"), lambda x: jaxmg.eigvalsh(x, on_failure="raise")):
        call(a)  # the plan is made on a good matrix
        with pytest.raises(jaxmg.LinAlgError, match="did not converge"):
            call(bad)
    jaxmg.inv(a, assume_a="pos", on_failure="raise")
    with pytest.raises(jaxmg.LinAlgError, match="not positive definite"):
        jaxmg.inv(not_spd, assume_a="pos", on_failure="raise")
    assert np.isnan(np.asarray(jaxmg.inv(not_spd, assume_a="pos"))).all()
    jaxmg.lu_factor(a, on_failure="raise")
    with pytest.raises(jaxmg.LinAlgError, match="singular"):
        jaxmg.lu_factor(helpers.put_rows(np.zeros((n, n), DTYPE), mesh), on_failure="raise")
    inv, info = jaxmg.potri(not_spd, return_info=True)
    assert int(info) > 0 and np.isnan(np.asarray(inv)).all()


def test_plans_keep_each_result_form_and_never_stand_in_for_donation(rng):
    n, mesh, a_np, a, _ = _small_problem(rng)
    want_w = np.linalg.eigvalsh(helpers.promote(a_np))
    for _ in range(2):  # the second round runs every form from its plan
        w, v = jaxmg.syevd(a)
        w2, v2, info = jaxmg.syevd(a, return_info=True)
        values = jaxmg.syevd(a, compute_vectors=False)
        values2, info2 = jaxmg.syevd(a, compute_vectors=False, return_info=True)
        for got in (w, w2, values, values2):
            np.testing.assert_allclose(np.asarray(got), want_w, atol=tol(n) * np.abs(want_w).max())
        assert v.shape == v2.shape == (n, n) and int(info) == int(info2) == 0
        inv = jaxmg.potri(a)
        inv2, info3 = jaxmg.potri(a, return_info=True)
        np.testing.assert_allclose(np.asarray(inv2), np.asarray(inv))
        assert inv.shape == (n, n) and int(info3) == 0
    for call in (jaxmg.potri, lambda x, **kw: jaxmg.syevd(x, **kw), jaxmg.cho_factor):
        fresh = helpers.put_rows(a_np, mesh)
        call(fresh)  # a plan that keeps its input
        assert not fresh.is_deleted()
        call(fresh, donate=True)
        assert fresh.is_deleted()


def test_planned_info_follows_each_matrix(rng):
    n, mesh, _, a, _ = _small_problem(rng)
    not_spd = helpers.put_rows(-np.eye(n, dtype=DTYPE), mesh)
    assert int(jaxmg.potri(a, return_info=True)[1]) == 0
    inv, info = jaxmg.potri(not_spd, return_info=True)  # from the plan just made
    assert int(info) > 0 and np.isnan(np.asarray(inv)).all()
    jaxmg.inv(a, assume_a="pos", on_failure="checkify")
    err, _ = checkify.checkify(lambda x: jaxmg.inv(x, assume_a="pos", on_failure="checkify"))(not_spd)
    with pytest.raises(checkify.JaxRuntimeError, match="not positive definite"):
        err.throw()


def test_checks_still_refuse_after_a_plan(rng):
    _, mesh, _, a, b = _small_problem(rng)
    jaxmg.potrs(a, b)
    jaxmg.potrs(a, b, tile_size=2)
    for bad in (2.0, True, np.float64(2)):  # equal to 2 as keys, refused as tiles
        with pytest.raises(TypeError, match="tile_size must be a positive int"):
            jaxmg.potrs(a, b, tile_size=bad)
    with pytest.raises(TypeError, match="b has dtype complex64"):
        jaxmg.potrs(a, b.astype(np.complex64))
    with pytest.raises(ValueError, match="b must have shape"):
        jaxmg.potrs(a, b[:6])
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        jaxmg.potrs(a, b, mesh=[mesh])
    with pytest.raises(ValueError, match="backend must be one of"):
        jaxmg.potrs(a, b, backend="fast")
    jaxmg.potrs(a, b, donate=True)  # a plan without donation does not stand in
    assert a.is_deleted()


def test_no_plan_kept_for_traced_or_context_calls(rng):
    n, mesh, a_np, a, b = _small_problem(rng)
    plans.clear()
    with jax.set_mesh(mesh):
        _check_solve(a_np, b, jaxmg.potrs(a, b), n)
    run = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=P("x", None)))
    _check_solve(a_np, b, run(a, b), n)
    assert plans.count() == 0


def test_repeated_eager_calls_compile_nothing(rng):
    """After one call of each routine, calling it again eagerly on new values
    compiles nothing (an inv that built a fresh jitted identity per call
    compiled on every call)."""
    n = 12
    mesh = helpers.mesh(2)
    a_np = helpers.spd(rng, n, DTYPE, CONDITION)
    b_np = helpers.random_matrix(rng, n, DTYPE, 2)

    def calls(a, b):
        f = jaxmg.cho_factor(a)
        lu = jaxmg.lu_factor(a)
        return [
            jaxmg.potrs(a, b), jaxmg.solve(a, b, assume_a="pos"), jaxmg.solve(a, b),
            jaxmg.cho_solve(f, b), jaxmg.cho_logdet(f), jaxmg.lu_solve(lu, b), jaxmg.inv(a),
            jaxmg.inv(a, assume_a="pos"), jaxmg.potri(a), jaxmg.eigh(a), jaxmg.eigvalsh(a),
            jaxmg.syevd(a), jaxmg.slogdet(a),
        ]

    def place(x):
        return helpers.put_rows(x, mesh), helpers.replicated(b_np, mesh)

    jax.block_until_ready(calls(*place(a_np)))
    with helpers.compiled_programs() as compiles:
        jax.block_until_ready(calls(*place(2 * a_np)))
    assert compiles == []
