"""lstsq and qr on forced CPU devices (JAX's solvers on the whole matrix),
the cuSOLVERMp engine's refusals on CPU, and its padding, which must leave
QR and least squares of the user's matrix unchanged."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg
from jaxmg._src.engines import mp


@pytest.mark.parametrize("dtype", helpers.DTYPES)
@pytest.mark.parametrize("shape", [(12, 5), (40, 40), (33, 7)])
def test_lstsq_matches_numpy(dtype, shape):
    rng = np.random.default_rng(0)
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, shape[0], dtype, shape[1])
    b = helpers.random_matrix(rng, shape[0], dtype, 3)
    x = jaxmg.lstsq(helpers.put_rows(a, m), b, **helpers.solve_kwargs(a, m))[0]
    want = np.linalg.lstsq(helpers.promote(a), helpers.promote(b), rcond=None)[0]
    assert x.shape == (shape[1], 3)
    assert np.abs(np.asarray(x) - want).max() < helpers.tolerance(dtype, shape[0], 100)
    x1 = jaxmg.lstsq(helpers.put_rows(a, m), b[:, 0], **helpers.solve_kwargs(a, m))[0]
    assert x1.shape == (shape[1],)
    assert np.abs(np.asarray(x1) - want[:, 0]).max() < helpers.tolerance(dtype, shape[0], 100)


@pytest.mark.parametrize("dtype", helpers.DTYPES)
def test_qr_is_orthonormal_and_upper_triangular(dtype):
    rng = np.random.default_rng(1)
    m = helpers.mesh(2)
    a = helpers.random_matrix(rng, 20, dtype, 9)
    q, r, info = jaxmg.qr(helpers.rows(a, m), return_info=True)
    q, r = np.asarray(q), np.asarray(r)
    assert int(info) == 0 and q.shape == (20, 9) and r.shape == (9, 9)
    assert np.abs(np.tril(r, -1)).max() == 0
    tol = helpers.tolerance(dtype, 20, 10)
    assert np.abs(q.conj().T @ q - np.eye(9)).max() < tol
    assert np.abs(q @ r - a).max() < tol * max(1, np.abs(a).max())


def test_refusals_name_the_argument_and_the_fix():
    m = helpers.mesh(2)
    with pytest.raises(ValueError, match="mode must be one of"):
        jaxmg.qr(helpers.rows(np.ones((4, 6)), m), mode="economic")
    tall = helpers.rows(np.ones((6, 4)), m)
    with pytest.raises(ValueError, match=r"b must have shape \(6,\)"):
        jaxmg.lstsq(tall, np.ones(5))
    with pytest.raises(TypeError, match=r"b must have shape .* 3-dimensional"):  # as jnp's
        jaxmg.lstsq(tall, np.ones((6, 2, 2)))
    assert jaxmg.lstsq(tall, np.ones(6, np.float32))[0].dtype == np.float64  # promoted, as JAX does
    with pytest.raises(ValueError, match="backend in"):
        jaxmg.qr(tall, backend="jaxmg")


@pytest.mark.parametrize("call", [
    lambda a, b: jaxmg.potrs(a, b, backend="mp"),
    lambda a, b: jaxmg.solve(a, b, backend="mp"),
    lambda a, b: jaxmg.eigh(a, backend="mp"),
    lambda a, b: jaxmg.cho_factor(a, backend="mp"),
    lambda a, b: jaxmg.lstsq(a, b, backend="mp"),
    lambda a, b: jaxmg.qr(a, backend="mp"),
])
def test_mp_on_cpu_is_refused_with_the_alternative(call):
    m = helpers.mesh(2)
    a = helpers.rows(np.eye(8), m)
    with pytest.raises(ValueError, match="runs cuSOLVERMp on CUDA GPUs.*backend="):
        call(a, np.ones(8))


def test_mp_has_no_potri():
    m = helpers.mesh(2)
    with pytest.raises(ValueError, match="backend='mp' has no potri"):
        jaxmg.inv(helpers.rows(np.eye(8), m), assume_a="pos", backend="mp")


def _placement(ranks):
    from jaxmg._src.placement import Placement

    return Placement(helpers.mesh(ranks), "x", False)


def test_block_size_is_a_power_of_two_with_little_padding():
    assert mp.block_size(1000, _placement(1)) == 1024  # one rank: padded to 1024
    assert mp.block_size(5000, _placement(1)) == 1024  # 5120
    assert mp.block_size(900, _placement(1)) == 64  # 960: 1024 would pad by more than 1/8
    assert mp.block_size(3, _placement(1)) == 1
    assert mp.block_size(32768, _placement(2)) == mp.MANY_RANKS_BLOCK
    assert mp.block_size(32768, _placement(2), 128) == 128  # tile_size bounds it
    for n in (1, 7, 100, 1000, 4097, 20000):
        for ranks in (1, 2, 4):
            t = mp.block_size(n, _placement(ranks))
            assert t & (t - 1) == 0
            from jaxmg._src import cyclic

            padded = cyclic.padded(n, t, _placement(ranks))
            assert padded % (t * ranks) == 0 and padded - n <= max(n // 8, ranks - 1)


@pytest.mark.parametrize("ranks, shape", [(2, (401, 301)), (2, (400, 300)), (4, (30, 29)), (1, (9, 9))])
def test_padding_leaves_qr_and_least_squares_unchanged(ranks, shape):
    rng = np.random.default_rng(2)
    mesh = jax.make_mesh((ranks,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,),
                         devices=helpers.devices(ranks))
    a = rng.standard_normal(shape)
    rows_spec = P("x", None) if shape[0] % ranks == 0 else P()
    placement = _placement(ranks)
    block = mp.block_size(shape[1], placement)
    with jax.set_mesh(mesh):
        padded = jax.jit(lambda x: mp.pad_rectangular(x, placement, block))(
            jax.device_put(a, NamedSharding(mesh, rows_spec)))
    padded = np.asarray(padded)
    m, n = shape
    assert padded.shape[1] % (block * ranks) == 0 and padded.shape[0] % (block * ranks) == 0
    assert (padded[:m, :n] == a).all()
    p = padded.shape[1] - n
    np.testing.assert_array_equal(padded[m:m + p, n:], np.eye(p))
    assert not padded[m + p:].any() and not padded[:m, n:].any() and not padded[m:, :n].any()
    b = rng.standard_normal(m)
    b_pad = np.concatenate([b, np.zeros(padded.shape[0] - m)])
    x_pad = np.linalg.lstsq(padded, b_pad, rcond=None)[0]
    np.testing.assert_allclose(x_pad[:n], np.linalg.lstsq(a, b, rcond=None)[0], atol=1e-10)
    r_pad = np.linalg.qr(padded, mode="r")
    np.testing.assert_allclose(np.abs(r_pad[:n, :n]), np.abs(np.linalg.qr(a, mode="r")), atol=1e-10)


def test_auto_picks_cusolvermp_across_machines(monkeypatch):
    from jaxmg._src import dispatch

    placement = _placement(2)
    monkeypatch.setattr(dispatch, "platform_of", lambda p: "cuda")
    monkeypatch.setattr(mp, "platform_of", lambda p: "cuda")
    assert dispatch.choose("potrs", 65536, placement, "auto").name == "jaxmg"  # one machine
    monkeypatch.setattr(dispatch, "_machines", lambda p: 2)
    for routine in dispatch.MP_ROUTINES:
        assert dispatch.choose(routine, 65536, placement, "auto").name == "mp"
        assert dispatch.choose(routine, 1024, placement, "auto").name == "mp"
    assert dispatch.choose("potri", 65536, placement, "auto").name == "jax"  # mp has no potri
    assert dispatch.choose("potrs", 65536, placement, "jaxmg").name == "jaxmg"  # as asked


def test_machines_are_counted_from_the_processes_hosts(monkeypatch):
    from types import SimpleNamespace

    from jaxmg._src import processes

    hosts = {0: "node-a", 1: "node-a", 2: "node-b"}
    monkeypatch.setattr(processes, "open_channel", lambda: "job")
    monkeypatch.setattr(processes, "_process_info", lambda p: {"host": hosts[p]})
    devices = [SimpleNamespace(process_index=p) for p in (0, 1, 2, 2)]
    assert processes.host_count(devices[:2]) == 1
    assert processes.host_count(devices) == 2
    assert processes.host_count([SimpleNamespace(process_index=jax.process_index())]) == 1


def test_mp_inside_shard_map_takes_potrs_and_syevd_only(monkeypatch):
    from jaxmg._src import dispatch

    monkeypatch.setattr(dispatch, "platform_of", lambda p: "cuda")
    monkeypatch.setattr(mp, "platform_of", lambda p: "cuda")
    mesh = helpers.mesh(2)

    def body(a_blk):
        return jaxmg.qr(a_blk, backend="mp", mesh=mesh)[0]

    with pytest.raises(ValueError, match="a device's own matrix inside shard_map.*backend='auto'"):
        jax.shard_map(body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None),
                      check_vma=False)(helpers.rows(np.ones((16, 4)), mesh))
