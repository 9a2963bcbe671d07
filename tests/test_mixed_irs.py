"""The general mixed solve by cuSOLVER's iterative-refinement solver
(jaxmg/_src/mixed/irs.py), the route the probes compare jaxmg's with:
float64 accuracy against NumPy, its record (iterations, fallback, info), a
forced fallback, a singular matrix, the transposed solves of derivatives,
vmap and jit. These need a CUDA GPU and skip elsewhere; the checks of its
settings and of its CPU branch run anywhere."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers
from jaxmg._src import library
from jaxmg._src.mixed import api, irs, placement
from jaxmg._src.mixed.solvers import Refinement

gpu = pytest.mark.skipif(not irs.available(), reason="cuSOLVER's IRS needs a CUDA GPU and jaxmg's library")
N = 4096


def route(a, b, settings=irs.Settings()):
    """(x, record) by the whole route (irs.solve): cuSOLVER, and jaxmg's
    mixed solve where cuSOLVER stops short of its bound."""
    x, record = _route(a, b.reshape(b.shape[0], -1), settings)
    return (x[:, 0], jax.tree.map(lambda r: r[0] if r.ndim else r, record)) if b.ndim == 1 \
        else (x, record)


@functools.partial(jax.jit, static_argnums=2)
def _route(a, b, settings):
    def jaxmgs(a, b, transpose):
        rows = placement.Rows()
        return api._factor_and_solve(a, b, kind="general", triangle=None, rows=rows,
                                     cfg=api._config("general", a, rows), trans=int(transpose))

    return irs.solve(a, b, settings, jaxmgs)


def general(rng, dtype=np.float64, n=N):
    return helpers.random_matrix(rng, n, dtype, n) / np.sqrt(n) + 3 * np.eye(n, dtype=dtype)


def native_backward_error(a, b):
    x = np.linalg.solve(a, b)
    r = b - a @ x
    return np.abs(r).max(axis=0) / (np.abs(a).sum(axis=1).max() * np.abs(x).max(axis=0)
                                     + np.abs(b).max(axis=0))


def test_settings_refuse_unknown_values_by_name():
    with pytest.raises(ValueError, match="lowest"):
        irs.Settings(lowest="int8")
    with pytest.raises(ValueError, match="refiner"):
        irs.Settings(refiner="cg")
    for wrong in (5, 2**31, 6.0, True):  # counts -1 to -5 are cuSOLVER's codes; int32
        with pytest.raises(ValueError, match="max_iterations"):
            irs.Settings(max_iterations=wrong)


def test_the_library_lists_the_one_gpu_targets_for_float64_types_only():
    try:
        targets = library.targets()
    except RuntimeError as exc:
        pytest.skip(f"jaxmg's library is not built: {exc}")
    dn = {k[2]: v for k, v in targets.items() if k[:2] == ("dn", "irsgesv")}
    assert sorted(dn) == ["complex128", "float64"]
    assert {v[1] for v in dn.values()} == {"CUDA"}
    assert dn["float64"][0] == "jaxmg_ddn_irsgesv_cuda"


def test_off_a_gpu_the_irs_route_runs_the_blocked_lu(rng):
    """The program picks its branch where it runs: on CPU devices the
    blocked LU, with its own record (iterations >= 1, no fallback)."""
    cpu = jax.devices("cpu")[0]
    a = jax.device_put(general(rng, n=64), cpu)
    b = jax.device_put(helpers.random_matrix(rng, 64, np.float64, 2), cpu)
    x, record = _route(a, b, irs.Settings())
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(np.asarray(a), np.asarray(b)),
                               rtol=1e-11, atol=1e-12)
    assert (np.asarray(record.iterations) >= 1).all() and not np.asarray(record.fallback).any()


def test_the_measured_defaults():
    assert irs.Settings() == irs.Settings("fp16", "classical_gmres", 30)


@gpu
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_solve_on_a_gpu_reaches_float64_accuracy(rng, dtype, k):
    a, b = general(rng, dtype), helpers.random_matrix(rng, N, dtype, k)
    x, info = route(a, b)
    want = np.linalg.solve(a, b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-11 * np.abs(want).max()
    berr = np.asarray(info.backward_error)
    assert berr.shape == (k,) and (berr <= 10 * native_backward_error(a, b)).all()
    assert int(info.info) == 0 and np.asarray(info.iterations).shape == (k,)
    fallback, iterations = np.asarray(info.fallback), np.asarray(info.iterations)
    assert ((iterations >= 1) | fallback).all()


@gpu
def test_a_system_cusolver_refines_below_the_bound_keeps_its_answer():
    """U S V^T of condition 10: cuSOLVER's classic-then-GMRES refinement
    (gmres in the record) ends below refine.tolerance, so no blocked LU."""
    from tools.bench import matrices

    a = matrices.conditioned(N, "float64", "general", 10.0, seed=5)
    b = jnp.ones((N, 1))
    x, record = jax.jit(lambda a, b: irs.checked(a, b, irs.Settings(), _unreachable))(a, b)
    assert bool(record.gmres[0]) and not bool(record.fallback[0]) and 1 <= int(record.iterations[0]) <= 30
    an, bn = np.asarray(a), np.asarray(b)
    assert float(record.backward_error[0]) <= 10 * native_backward_error(an, bn)[0]


def _unreachable(a, b, transpose):
    """Stands in for the blocked route: its marks (999) show where it ran."""
    k = b.shape[1]
    marks = Refinement(jnp.full((k,), 999, jnp.int32), jnp.zeros((k,), bool), jnp.zeros((k,), bool),
                       jnp.zeros((k,)), jnp.int32(999), jnp.int32(999))
    return jnp.full_like(b, jnp.nan), marks


@gpu
def test_where_cusolver_stops_short_the_callers_route_finishes(rng):
    """A diagonally dominant complex matrix: cuSOLVER stops at sqrt(N) eps
    (about 3e-15 here), above the bound (about 6e-16); the caller's route
    then solves it, and its iterations add to cuSOLVER's."""
    a, b = general(rng, np.complex128), helpers.random_matrix(rng, N, np.complex128, 1)
    x, record = jax.jit(lambda a, b: irs.checked(a, b, irs.Settings(), _unreachable))(a, b)
    assert int(record.info) == 999 and int(record.iterations[0]) > 999


@gpu
def test_several_columns_refine_classically_to_cusolvers_tolerance(rng):
    """GMRES takes one column: three refine classically, to cuSOLVER's own
    test ||r|| < sqrt(N) eps ||A|| ||x||."""
    a, b = general(rng, np.complex128), helpers.random_matrix(rng, N, np.complex128, 3)
    x, record = jax.jit(lambda a, b: irs.refined(a, b, irs.Settings()))(a, b)
    assert not np.asarray(record.fallback).any() and (np.asarray(record.iterations) >= 1).all()
    assert (np.asarray(record.backward_error) <= np.sqrt(N) * np.finfo(np.float64).eps).all()
    want = np.linalg.solve(a, b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-11 * np.abs(want).max()


@gpu
def test_a_refinement_that_cannot_converge_still_ends_at_float64_accuracy():
    """Six iterations allowed on a matrix of condition 1e8: whether cuSOLVER
    falls back or stops, the answer meets float64 LU's accuracy (the
    blocked LU takes over where cuSOLVER's stops above the bound)."""
    from tools.bench import matrices

    a = np.asarray(matrices.conditioned(N, "float64", "general", 1e8, seed=3))
    b = np.ones((N,))
    x, info = route(a, b, irs.Settings(max_iterations=6))
    assert int(info.info) == 0
    assert float(info.backward_error) <= 10 * native_backward_error(a, b[:, None])[0]


@gpu
def test_an_exactly_singular_matrix_gives_nan_and_its_pivot(rng):
    """cuSOLVER's own record of a singular matrix is a failure without the
    pivot (on the H200: info 0, x not finite, which refined reports as
    N + 1); the route hands it to jaxmg's solve, which names it."""
    a = general(rng)
    a[:, 7] = 0
    x, record = jax.jit(lambda a, b: irs.refined(a, b, irs.Settings()))(a, np.ones((N, 1)))
    assert int(record.info) > 0 and np.isnan(np.asarray(x)).all()
    x, info = route(a, np.ones(N))
    assert int(info.info) == 8 and np.isnan(np.asarray(x)).all()  # column 7: U(8, 8) = 0


@gpu
@pytest.mark.parametrize("scale", [1e6, 1e-6])
def test_matrices_beyond_fp16s_range_are_scaled_into_it(rng, scale):
    """Entries of 3e6 overflow FP16 and of 3e-8 underflow it: the power of
    two applied first keeps cuSOLVER's FP16 factorisation, no fallback."""
    a, b = scale * general(rng), helpers.random_matrix(rng, N, np.float64, 1)
    x, record = jax.jit(lambda a, b: irs.refined(a, b, irs.Settings()))(a, b)
    assert not bool(record.fallback[0]) and int(record.iterations[0]) >= 1
    want = np.linalg.solve(a, b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-11 * np.abs(want).max()


@gpu
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_gradients_match_the_float64_solve(rng, dtype):
    """Cotangents are solves with A^T: cuSOLVER on a's own rows."""
    a, b = general(rng, dtype), helpers.random_matrix(rng, N, dtype, 1)[:, 0]

    def loss(solve):
        return lambda a, b: jnp.sum(jnp.abs(solve(a, b)) ** 2)

    mixed = jax.grad(loss(lambda a, b: route(a, b)[0]), argnums=(0, 1))(a, b)
    exact = jax.grad(loss(jnp.linalg.solve), argnums=(0, 1))(a, b)
    for got, want in zip(mixed, exact):
        scale = np.abs(np.asarray(want)).max()
        assert np.abs(np.asarray(got) - np.asarray(want)).max() <= 1e-9 * scale


@gpu
def test_vmap_and_jit_give_each_system_its_solution(rng):
    a = np.stack([general(rng), general(rng)])
    b = helpers.random_matrix(rng, N, np.float64, 2).T
    solve = jax.jit(jax.vmap(lambda a, b: route(a, b)[0]))
    x = np.asarray(solve(a, b))
    for i in range(2):
        want = np.linalg.solve(a[i], b[i])
        assert np.abs(x[i] - want).max() <= 1e-11 * np.abs(want).max()
