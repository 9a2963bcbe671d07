"""JAXMg's call forms of potrs, potri and syevd (T_A, mesh and in_specs
positionally or by name, return_status, return_eigenvectors, pad; later,
matrix_specs, donate, potrs's return_logdet, lu_solve of a matrix and gesvd)
give what jaxmg's own call form gives, eagerly and under jit; conflicting or
malformed ones are refused naming the argument."""

import functools
import inspect

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import helpers
import jaxmg

N = 40
SPEC = P("x", None)


@pytest.fixture(scope="module")
def mesh():
    return helpers.mesh(min(4, jax.device_count()))  # one GPU: a mesh of one


@pytest.fixture
def spd(rng, mesh):
    a = helpers.spd(rng, N, np.float64)
    return a, helpers.rows(a, mesh)


def same(x, y):
    for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("backend", ["auto", "jaxmg"])
@pytest.mark.parametrize("in_specs", [SPEC, (SPEC,), [SPEC], (SPEC, P(None, None))],
                         ids=["spec", "tuple", "list", "a-and-b"])
@pytest.mark.parametrize("tile", [1, 3, 5])
def test_potrs_positional(rng, mesh, spd, tile, in_specs, backend):
    a, placed = spd
    b = helpers.replicated(helpers.random_matrix(rng, N, np.float64, 1), mesh)
    x = jaxmg.potrs(placed, b, tile, mesh, in_specs, backend=backend)
    ours = jaxmg.potrs(placed, b, tile_size=tile, mesh=mesh, spec=SPEC, backend=backend)
    if (N // mesh.size) % tile == 0:
        same(x, ours)
    else:  # JAXMg's padding of each row block, as inside shard_map; ours pads at the end
        np.testing.assert_allclose(np.asarray(x), np.asarray(ours), rtol=1e-10)
    assert x.shape == (N, 1)
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)


@pytest.mark.parametrize("routine", ["potrs", "syevd"])
def test_column_sharded_spec_as_jaxmg_1x_takes_it(rng, mesh, spd, routine):
    a, placed = spd
    columns = jax.device_put(a, jax.sharding.NamedSharding(mesh, P(None, "x")))
    if routine == "potrs":
        b = helpers.replicated(helpers.random_matrix(rng, N, np.float64, 1), mesh)
        x = jaxmg.potrs(columns, b, 4, mesh, P(None, "x"))
        assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)
    else:
        w, _ = jaxmg.syevd(columns, 4, mesh, (P(None, "x"),))
        np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), rtol=1e-10, atol=1e-10)


def test_potrs_under_jit_with_status(rng, mesh, spd):
    a, placed = spd
    b = helpers.replicated(np.ones((N, 1)), mesh)

    @functools.partial(jax.jit, static_argnames=("t",))
    def solve(a, b, t):
        call = functools.partial(jaxmg.potrs, mesh=mesh, in_specs=(SPEC,), pad=True,
                                 return_status=True)
        return call(a, b, t)

    x, status = solve(placed, b, 2)
    assert int(status) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)
    bad = np.diag(np.arange(N) - 1.0)
    x, status = solve(helpers.rows(bad, mesh), b, 2)
    assert status.shape == () and status.dtype == np.int32
    assert int(status) == 7 and np.isnan(np.asarray(x)).all()
    _, info = jaxmg.potrs(helpers.rows(bad, mesh), b, tile_size=2, return_info=True)
    assert int(info) == helpers.lapack_potrf_info(bad) == 1


@pytest.mark.parametrize("status", [False, True])
def test_potrs_later_forms(rng, mesh, spd, status):
    """JAXMg's later potrs: matrix_specs for in_specs, return_logdet giving
    (x, log det a[, status]) from one factorisation."""
    a, placed = spd
    b = helpers.replicated(helpers.random_matrix(rng, N, np.float64, 2), mesh)
    out = jaxmg.potrs(placed, b, 4, mesh, matrix_specs=SPEC, return_logdet=True,
                      return_status=status)
    assert len(out) == 2 + status
    same(out[0], jaxmg.potrs(placed, b, tile_size=4))
    np.testing.assert_allclose(float(out[1]), np.linalg.slogdet(a)[1], rtol=1e-12)
    if status:
        assert int(out[2]) == 0
    x, logdet = jax.jit(lambda a, b: jaxmg.potrs(a, b, 4, matrix_specs=(SPEC,),
                                                  return_logdet=True))(placed, b)
    np.testing.assert_allclose(float(logdet), np.linalg.slogdet(a)[1], rtol=1e-12)
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)


def test_potri_positional(mesh, spd):
    a, placed = spd
    inv, status = jaxmg.potri(placed, 5, mesh, [SPEC], True)
    same(inv, jaxmg.potri(placed, tile_size=5))
    assert int(status) == 0
    assert helpers.inverse_error(a, inv) <= helpers.tolerance(np.float64, N, 10.0)


@pytest.mark.parametrize("vectors", [True, False])
@pytest.mark.parametrize("status", [True, False])
def test_syevd_forms(mesh, spd, vectors, status):
    a, placed = spd
    out = jaxmg.syevd(placed, 2, mesh, (SPEC,), vectors, return_status=status, pad=False)
    ours = jaxmg.syevd(placed, tile_size=2, compute_vectors=vectors, return_info=status)
    same(out, ours)
    out = out if isinstance(out, tuple) else (out,)
    assert len(out) == 1 + vectors + status
    np.testing.assert_allclose(np.asarray(out[0]), np.linalg.eigvalsh(a), rtol=1e-12, atol=1e-12)


@pytest.fixture
def general(rng, mesh):
    a = helpers.random_matrix(rng, N, np.float64) + N * np.eye(N)
    return a, helpers.rows(a, mesh)


@pytest.mark.parametrize("rhs", ["vector", "matrix"])
def test_lu_solve_of_a_matrix(rng, mesh, general, rhs):
    """JAXMg's lu_solve(a, b, T_A, mesh, matrix_specs): a matrix where
    jax.scipy's lu_solve takes a factor; b's rank kept."""
    a, placed = general
    b = helpers.random_matrix(rng, N, np.float64, 2)
    b = b[:, 0] if rhs == "vector" else b
    x = jaxmg.lu_solve(placed, b, 4, mesh, SPEC)
    assert x.shape == b.shape
    same(x, jaxmg.lu_solve(jaxmg.lu_factor(placed, tile_size=4), b))
    assert helpers.residual(a, x.reshape(N, -1), b.reshape(N, -1)) <= helpers.tolerance(
        np.float64, N, 10.0)
    x, status = jaxmg.lu_solve(a=placed, b=b, T_A=3, matrix_specs=(SPEC,), return_status=True,
                               pad=True, donate=False)
    assert int(status) == 0 and x.shape == b.shape


def test_lu_solve_of_a_matrix_under_jit(rng, mesh, general):
    a, placed = general
    b = helpers.replicated(np.ones((N, 1)), mesh)
    solve = jax.jit(functools.partial(jaxmg.lu_solve, T_A=2, mesh=mesh, matrix_specs=SPEC,
                                      return_status=True))
    x, status = solve(placed, b)
    assert int(status) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)
    singular = np.ones((N, N))
    x, status = solve(helpers.rows(singular, mesh), b)
    assert int(status) > 0 and np.isnan(np.asarray(x)).all()


def test_lu_solve_of_a_factor_unchanged(rng, general):
    """jax.scipy's form still takes its trans third: (lu, piv), b, trans."""
    a, placed = general
    b = helpers.random_matrix(rng, N, np.float64, 1)
    x = jaxmg.lu_solve(jax.scipy.linalg.lu_factor(a), b, 1)
    np.testing.assert_allclose(a.T @ np.asarray(x), b, atol=1e-10)


@pytest.mark.parametrize("u, vh", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("full", [False, True])
def test_gesvd(rng, mesh, u, vh, full):
    a = helpers.random_matrix(rng, N, np.float64, N // 2)  # tall: full differs from reduced
    placed = helpers.rows(a, mesh)
    out = jaxmg.gesvd(placed, 4, mesh, SPEC, compute_u=u, compute_vh=vh, full_matrices=full,
                      return_status=True)
    out = list(out)
    assert int(out.pop()) == 0
    s = out.pop(1 if u else 0)
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    k = N if full else N // 2
    if u:
        assert out[0].shape == (N, k)
    if vh:
        assert out[-1].shape == (N // 2, N // 2)
    if u and vh:
        recon = np.asarray(out[0])[:, : N // 2] * np.asarray(s) @ np.asarray(out[1])
        np.testing.assert_allclose(recon, a, atol=1e-12)
    alone = jaxmg.gesvd(placed, 4, compute_u=False, compute_vh=False)
    np.testing.assert_allclose(np.asarray(alone), np.asarray(s), rtol=1e-12)


def test_our_signature_is_shown():
    assert "tile_size" in inspect.signature(jaxmg.potrs).parameters
    assert "compute_vectors" in inspect.signature(jaxmg.syevd).parameters
    assert "trans" in inspect.signature(jaxmg.lu_solve).parameters


@pytest.mark.parametrize("call, error, words", [
    (lambda a, b, m: jaxmg.potrs(a, b, 4, tile_size=4), TypeError, "T_A and tile_size"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, T_A=4), TypeError, "multiple values for argument 'T_A'"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, m, (SPEC, P(), P())), ValueError, "in_specs"),
    (lambda a, b, m: jaxmg.potri(a, 4, m, (SPEC, P())), ValueError, "in_specs"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, m, 12345), TypeError, "in_specs"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, m, SPEC, spec=SPEC), TypeError, "in_specs and spec"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, m, SPEC, True, True, 1), TypeError, "at most 7"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, pad="yes"), TypeError, "pad"),
    (lambda a, b, m: jaxmg.syevd(a, 2, return_eigenvectors="no"), TypeError, "compute_vectors"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, m, SPEC, matrix_specs=SPEC), TypeError,
     "matrix_specs and in_specs"),
    (lambda a, b, m: jaxmg.potri(a, 4, return_logdet=True), TypeError, "no return_logdet"),
    (lambda a, b, m: jaxmg.potrs(a, b, 4, return_logdet=True, precision="mixed"), ValueError,
     "return_logdet needs the float64 factor"),
    (lambda a, b, m: jaxmg.lu_solve(a, b), TypeError, "no T_A"),
    (lambda a, b, m: jaxmg.lu_solve(a, b, 0), ValueError, "T_A must be positive"),
    (lambda a, b, m: jaxmg.potrs(a, b, 2.5), TypeError, "T_A must be positive"),
    (lambda a, b, m: jaxmg.lu_solve(a, b, 2, trans=1), TypeError, r"unexpected argument.*trans"),
    (lambda a, b, m: jaxmg.gesvd(a, 2, matrix_specs=SPEC, in_specs=SPEC), TypeError,
     "matrix_specs and in_specs"),
    (lambda a, b, m: jaxmg.syevd(np.ones((4, 3)), 2), ValueError, "A to be square"),
    (lambda a, b, m: jaxmg.gesvd(a, -1), ValueError, "T_A"),
    (lambda a, b, m: jaxmg.gesvd(a, 2, compute_u="yes"), TypeError, "compute_u"),
    (lambda a, b, m: jaxmg.gesvd(np.ones((4, 4), np.int32), 2), TypeError, "int32"),
    (lambda a, b, m: jaxmg.gesvd(np.ones(4), 2), ValueError, "rank-2 matrix A"),
    (lambda a, b, m: jaxmg.potri(a, 2, m, P(None, "x")), ValueError,
     r"A must be sharded along the rows with PartitionSpec P\(str, None\)"),
    (lambda a, b, m: jaxmg.potrs(a, b, 2, m, P()), ValueError, "A must be sharded along the rows"),
    (lambda a, b, m: jaxmg.syevd(a, 2, m, (P(None, None),)), ValueError,
     "A must be sharded along the rows"),
    (lambda a, b, m: jaxmg.potrs(a, b, 2, m, (SPEC, P("x", None))), ValueError,
     "b must be replicated along all shards"),
], ids=["tile twice", "T_A twice", "three specs", "potri two specs", "not a spec", "spec twice",
        "too many", "pad", "vectors", "both spec names", "potri logdet", "mixed logdet",
        "lu no T_A", "lu T_A zero", "potrs T_A float", "lu trans",
        "gesvd both spec names", "syevd not square", "gesvd T_A", "gesvd flag", "gesvd int", "gesvd vector",
        "potri columns", "potrs replicated a", "syevd replicated a", "potrs sharded b"])
def test_refused(mesh, spd, call, error, words):
    b = helpers.replicated(np.ones((N, 1)), mesh)
    with pytest.raises(error, match=words):
        call(spd[1], b, mesh)


IN_THEIR_WORDS = {  # JAXMg's interface tests match these phrases
    "vector a": (lambda f, a, b: f(np.ones(4), b, 2), ValueError, "rank-2 matrix A"),
    "3-d b": (lambda f, a, b: f(a, b[None], 2), ValueError, "rank-1 or rank-2 RHS B"),
    "dtypes": (lambda f, a, b: f(a, b.astype(np.float32), 2), TypeError, "matching A/B dtypes"),
    "int": (lambda f, a, b: f(np.eye(4, dtype=np.int32), np.ones((4, 1), np.int32), 2),
            TypeError, "supports float32"),
    "not square": (lambda f, a, b: f(a[:, :3], b, 2), ValueError, "A to be square"),
    "rows of b": (lambda f, a, b: f(a, b[:3], 2), ValueError, "matching leading dimensions"),
    "both spec names": (lambda f, a, b: f(a, b, 2, matrix_specs=SPEC, in_specs=SPEC), ValueError,
                        "Specify only one"),
}


@pytest.mark.parametrize("routine", ["potrs", "lu_solve"])
@pytest.mark.parametrize("case", list(IN_THEIR_WORDS))
def test_refused_in_their_words(mesh, spd, routine, case):
    call, error, words = IN_THEIR_WORDS[case]
    b = helpers.replicated(np.ones((N, 1)), mesh)
    with pytest.raises(error, match=words):
        call(getattr(jaxmg, routine), spd[1], b)




IN_0_0_8_TERMS = {  # JAXMg 0.0.8 asserted these; its interface tests expect its types and words
    "potrs vector a": (lambda a, b, m: jaxmg.potrs(np.ones(N), b, 1, m, (SPEC,)),
                       (ValueError, AssertionError, IndexError), "a must be a 2D array"),
    "potri vector a": (lambda a, b, m: jaxmg.potri(np.ones(N), T_A=1, mesh=m, in_specs=SPEC),
                       (ValueError, AssertionError), "a must be a 2D array"),
    "syevd vector a": (lambda a, b, m: jaxmg.syevd(np.ones(N), 4, m, (SPEC,)),
                       (ValueError, AssertionError), "a must be a 2D array"),
    "potrs non-square a": (lambda a, b, m: jaxmg.potrs(a[:, :4], b, 1, m, (SPEC,)),
                           (ValueError, AssertionError), "expects A to be square"),
    "syevd non-square a": (lambda a, b, m: jaxmg.syevd(a[:, :4], 4, m, (SPEC,)),
                           (ValueError, AssertionError), "expects A to be square"),
    "rows of b": (lambda a, b, m: jaxmg.potrs(a, b[:3], 1, m, (SPEC, P(None, None))),
                  (ValueError, AssertionError), "A and b must have the same number of columns"),
    "potri two specs": (lambda a, b, m: jaxmg.potri(a, T_A=1, mesh=m, in_specs=(SPEC, SPEC)),
                        (ValueError,), "in_specs must be a single PartitionSpec"),
    "syevd two specs": (lambda a, b, m: jaxmg.syevd(a, 4, m, (SPEC, SPEC)), (ValueError,),
                        "in_specs must be a single PartitionSpec or a 1-element list/tuple"),
    "potri no spec": (lambda a, b, m: jaxmg.potri(a, T_A=1, mesh=m, in_specs="x"), (TypeError,),
                      "in_specs must be a PartitionSpec"),
    "syevd no spec": (lambda a, b, m: jaxmg.syevd(a, 4, m, 12345), (TypeError,),
                      "in_specs must be a PartitionSpec or a 1-element list/tuple containing one"),
}


@pytest.mark.parametrize("case", list(IN_0_0_8_TERMS))
def test_refused_as_jaxmg_0_0_8_refused(mesh, spd, case):
    """Each refusal is an instance of every type listed (jaxmg's ValueError
    and 0.0.8's AssertionError, IndexError for potrs's vector a) and says
    what 0.0.8 said."""
    call, types, words = IN_0_0_8_TERMS[case]
    b = helpers.replicated(np.ones((N, 1)), mesh)
    for kind in types:
        with pytest.raises(kind, match=words):
            call(spd[1], b, mesh)
# ---- JAXMg's routines for the inside of the caller's shard_map ---------------

def inside(mesh, body, in_specs, out_specs):
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=False))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_shardmap_ctx_routines_as_jaxmgs_tests_call_them(rng, mesh, dtype):
    """potrs_shardmap_ctx, potri_shardmap_ctx (then potri_symmetrize) and
    syevd_shardmap_ctx with the out_specs JAXMg's own tests give them: each
    status a vector of one, 0; x, the inverse and the eigenpairs right."""
    a = helpers.spd(rng, N, dtype)
    b = helpers.random_matrix(rng, N, dtype, 2)
    rows, whole = helpers.rows(a, mesh), helpers.replicated(b, mesh)
    x, status = inside(mesh, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=4),
                       (SPEC, P(None, None)), (P(None, None), P(None)))(rows, whole)
    assert status.shape == (1,) and status.dtype == np.int32 and int(status[0]) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(dtype, N, 10.0)
    inverse, status = inside(mesh, functools.partial(jaxmg.potri_shardmap_ctx, T_A=4),
                             (SPEC,), (SPEC, P(None)))(rows)
    assert status.shape == (1,) and int(status[0]) == 0
    assert helpers.inverse_error(a, jaxmg.potri_symmetrize(inverse)) <= helpers.tolerance(dtype, N, 10.0)
    w, vh, status = inside(mesh, functools.partial(jaxmg.syevd_shardmap_ctx, T_A=4),
                           (SPEC,), (P(None), SPEC, P(None)))(rows)
    assert status.shape == (1,) and int(status[0]) == 0
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), atol=1e-10 * np.abs(a).max())
    v = np.asarray(vh).conj().T
    np.testing.assert_allclose(a @ v, v * np.asarray(w), atol=1e-9 * np.abs(a).max())
    w_alone, status = inside(mesh, functools.partial(jaxmg.syevd_shardmap_ctx, T_A=4,
                                                     return_eigenvectors=False),
                             (SPEC,), (P(None), P(None)))(rows)
    np.testing.assert_allclose(np.asarray(w_alone), np.asarray(w), rtol=1e-12)


def test_shardmap_ctx_reports_a_matrix_that_is_not_positive_definite(mesh):
    """JAXMg's test: diag(-1, 0, 1, ...) is not positive definite: status 7, as
    JAXMg's; x and the inverse are NaN."""
    a = np.diag(np.arange(N, dtype=np.float64) - 1)
    rows = helpers.rows(a, mesh)
    x, status = inside(mesh, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=2),
                       (SPEC, P(None, None)), (P(None, None), P(None)))(
        rows, helpers.replicated(np.ones((N, 1)), mesh))
    assert status.shape == (1,) and status.dtype == np.int32 and int(status[0]) == 7
    assert np.isnan(np.asarray(x)).all()
    inverse, status = inside(mesh, functools.partial(jaxmg.potri_shardmap_ctx, T_A=2),
                             (SPEC,), (SPEC, P(None)))(rows)
    assert int(status[0]) == 7 and np.isnan(np.asarray(inverse)).all()


def test_shardmap_ctx_routines_take_a_matrix_of_order_0(mesh):
    """N = 0 inside shard_map (JAXMg's multi-process runner makes one when it
    counts no GPUs): empty results and status 0, as jax.scipy gives."""
    a = jax.device_put(np.zeros((0, 0)), jax.NamedSharding(mesh, SPEC))
    b = helpers.replicated(np.zeros((0, 2)), mesh)
    x, status = inside(mesh, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=2),
                       (SPEC, P(None, None)), (P(None, None), P(None)))(a, b)
    assert x.shape == (0, 2) and np.asarray(status).tolist() == [0]
    inverse, status = inside(mesh, functools.partial(jaxmg.potri_shardmap_ctx, T_A=2),
                             (SPEC,), (SPEC, P(None)))(a)
    assert inverse.shape == (0, 0) and not np.asarray(status).any()
    w, vh, status = inside(mesh, functools.partial(jaxmg.syevd_shardmap_ctx, T_A=2),
                           (SPEC,), (P(None), SPEC, P(None)))(a)
    assert w.shape == (0,) and w.dtype == np.float64 and vh.shape == (0, 0)
    assert not np.asarray(status).any()
    x, status = inside(mesh, lambda a, b: jaxmg.potrs(a, b, 4, return_status=True),
                       (SPEC, P(None, None)), (P(None, None), P()))(a, b)
    assert x.shape == (0, 2) and int(status) == 0


def test_potrs_in_jaxmgs_call_form_takes_a_row_block_and_all_of_b_inside_shard_map(rng, mesh):
    a = helpers.spd(rng, N, np.float64)
    b = helpers.random_matrix(rng, N, np.float64, 1)
    x, status = inside(mesh, lambda a, b: jaxmg.potrs(a, b, 5, return_status=True),
                       (SPEC, P(None, None)), (P(None, None), P()))(
        helpers.rows(a, mesh), helpers.replicated(b, mesh))
    assert int(status) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)


def test_syevd_lowers_a_tile_wider_than_cusolvermgs_with_jaxmgs_warning(mesh, spd):
    """JAXMg 0.0.8's syevd: T_A above 1024 is lowered to 1024, with its
    warning; its syevd_shardmap_ctx refuses one."""
    from jaxmg.utils import JaxMgWarning

    a, placed = spd
    with pytest.warns(JaxMgWarning, match="T_A has a maximum value of 1024"):
        w, _ = jaxmg.syevd(placed, 2048, mesh, (SPEC,))
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="T_A has a maximum value of 1024"):
        inside(mesh, functools.partial(jaxmg.syevd_shardmap_ctx, T_A=2048),
               (SPEC,), (P(None), SPEC, P(None)))(placed)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("tile", [3, 4, 7])
def test_padded_row_blocks_give_the_same_numbers_inside_and_outside_shard_map(
        rng, mesh, dtype, tile):
    """JAXMg's pad=True where T_A does not divide a device's rows: each row
    block is padded to a multiple of T_A, inside shard_map and in the call
    form outside it alike, so both give the same x and inverse to the bit
    (JAXMg's tests compare them in float32)."""
    if mesh.size < 2:
        pytest.skip("one device: the call form outside shard_map takes jaxmg's own path there")
    if (N // mesh.size) % tile == 0:
        pytest.skip(f"T_A={tile} divides the {N // mesh.size} rows of each of "
                    f"{mesh.size} devices: nothing to pad")
    a = helpers.spd(rng, N, dtype)
    b = helpers.random_matrix(rng, N, dtype, 2)
    rows, whole = helpers.rows(a, mesh), helpers.replicated(b, mesh)
    x_in, status = inside(mesh, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=tile),
                          (SPEC, P(None, None)), (P(None, None), P(None)))(rows, whole)
    x_out, status_out = jaxmg.potrs(rows, whole, tile, mesh, (SPEC, P(None, None)),
                                    return_status=True)
    np.testing.assert_array_equal(np.asarray(x_in), np.asarray(x_out))
    assert int(status[0]) == 0 and int(status_out) == 0
    assert helpers.residual(a, x_in, b) <= helpers.tolerance(dtype, N, 100.0)
    inv_in, status = inside(mesh, functools.partial(jaxmg.potri_shardmap_ctx, T_A=tile),
                            (SPEC,), (SPEC, P(None)))(rows)
    inv_out = jax.jit(lambda a: jaxmg.potri(a, tile, mesh, SPEC))(rows)
    np.testing.assert_array_equal(np.asarray(inv_in), np.asarray(inv_out))
    assert inv_in.shape == (N, N) and int(status[0]) == 0
    assert helpers.inverse_error(a, inv_in) <= helpers.tolerance(dtype, N, 100.0)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("tile", [1, 3, 8])
def test_on_one_device_both_call_forms_run_the_same_solver(rng, monkeypatch, dtype, tile):
    """On a mesh of one device, auto gives the whole matrix to JAX's solver
    in JAXMg's call form outside shard_map; inside shard_map the block is
    that whole matrix, and auto picks the same solver there, unpadded, so
    both forms give the same numbers to the bit (JAXMg's float32 tests
    compare them; cuSOLVERMg against JAX's solver differs by ~4e-5)."""
    from jaxmg._src.engines import native

    ran = []
    for method in ("potrs_blocks", "potri_blocks", "syevd_blocks"):
        original = getattr(native.Native, method)
        monkeypatch.setattr(native.Native, method,
                            lambda self, *args, _f=original, _m=method: ran.append(_m) or
                            _f(self, *args))
    one = helpers.mesh(1)
    n = 10
    a = helpers.spd(rng, n, dtype)
    b = helpers.random_matrix(rng, n, dtype, 1)
    rows, whole = helpers.rows(a, one), helpers.replicated(b, one)
    x_out = jax.jit(lambda a, b: jaxmg.potrs(a, b, tile, one, (SPEC, P(None, None))))(rows, whole)
    x_in, status = inside(one, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=tile),
                          (SPEC, P(None, None)), (P(None, None), P(None)))(rows, whole)
    np.testing.assert_array_equal(np.asarray(x_in), np.asarray(x_out))
    assert int(status[0]) == 0
    assert helpers.residual(a, x_in, b) <= helpers.tolerance(dtype, n, 100.0)
    inv_out = jax.jit(lambda a: jaxmg.potri(a, tile, one, SPEC))(rows)
    inv_in, status = inside(one, functools.partial(jaxmg.potri_shardmap_ctx, T_A=tile),
                            (SPEC,), (SPEC, P(None)))(rows)
    np.testing.assert_array_equal(np.asarray(inv_in), np.asarray(inv_out))
    assert int(status[0]) == 0
    w_out, v_out = jax.jit(lambda a: jaxmg.syevd(a, tile, one, SPEC))(rows)
    w_in, vh_in, status = inside(one, functools.partial(jaxmg.syevd_shardmap_ctx, T_A=tile),
                                 (SPEC,), (P(None), SPEC, P(None)))(rows)
    np.testing.assert_array_equal(np.asarray(w_in), np.asarray(w_out))
    np.testing.assert_array_equal(np.asarray(vh_in), np.asarray(v_out).conj().T)
    assert int(status[0]) == 0
    assert ran == ["potrs_blocks", "potri_blocks", "syevd_blocks"]


@pytest.mark.parametrize("bad", ["inf on the diagonal", "nan above it"])
def test_on_one_device_a_matrix_that_is_not_finite_fails_in_both_call_forms(bad):
    """A NaN or Inf in the triangle read fails the call in both forms alike
    on one device, with the same info (N + 1 where JAX's solver let it
    through with a finite answer), status 7 and every result NaN."""
    one = helpers.mesh(1)
    a = 4.0 * np.eye(6)
    a[(3, 3) if bad.startswith("inf") else (1, 2)] = np.inf if bad.startswith("inf") else np.nan
    rows, whole = helpers.rows(a, one), helpers.replicated(np.ones((6, 1)), one)
    x, info = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=one, spec=SPEC, return_info=True))(
        rows, whole)
    x_in, status = inside(one, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=2),
                          (SPEC, P(None, None)), (P(None, None), P(None)))(rows, whole)
    info_in = inside(one, lambda a, b: jaxmg.potrs(a, b, return_info=True)[1],
                     (SPEC, P(None, None)), P())(rows, whole)
    assert int(info) == int(info_in) != 0 and int(status[0]) == 7  # JAXMg's status
    assert np.isnan(np.asarray(x)).all() and np.isnan(np.asarray(x_in)).all()
    inverse, status = inside(one, functools.partial(jaxmg.potri_shardmap_ctx, T_A=2),
                             (SPEC,), (SPEC, P(None)))(rows)
    assert int(status[0]) == 7 and np.isnan(np.asarray(inverse)).all()
    w, vh, status = inside(one, functools.partial(jaxmg.syevd_shardmap_ctx, T_A=2),
                           (SPEC,), (P(None), SPEC, P(None)))(rows)
    w_out = jax.jit(lambda a: jaxmg.syevd(a, 2, one, SPEC, return_eigenvectors=False,
                                          return_status=True))(rows)
    assert int(status[0]) == int(w_out[1]) != 0  # syevd's status is its info
    assert np.isnan(np.asarray(w)).all() and np.isnan(np.asarray(vh)).all()


def test_inside_shard_map_backend_jax_takes_only_a_whole_matrix(rng, mesh):
    """backend='jax' inside shard_map runs where an axis of one device holds
    the whole matrix, and is refused, naming the fix, where the rows are
    spread; backend='jaxmg' runs jaxmg's engine on one device too."""
    a = helpers.spd(rng, N, np.float64)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    one = helpers.mesh(1)
    for backend in ("jax", "jaxmg"):
        x = inside(one, lambda a, b, backend=backend: jaxmg.potrs(a, b, backend=backend),
                   (SPEC, P(None, None)), P(None, None))(helpers.rows(a, one),
                                                         helpers.replicated(b, one))
        assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)
    if mesh.size < 2:
        pytest.skip("one device: no spread rows to refuse backend='jax' for")
    with pytest.raises(ValueError, match="backend='jax' needs the whole matrix.*backend='auto'"):
        inside(mesh, lambda a, b: jaxmg.potrs(a, b, backend="jax"),
               (SPEC, P(None, None)), P(None, None))(helpers.rows(a, mesh),
                                                     helpers.replicated(b, mesh))


def test_padded_row_blocks_take_b_as_this_devices_rows_or_a_vector(rng, mesh):
    a = helpers.spd(rng, N, np.float64)
    b = helpers.random_matrix(rng, N, np.float64, 3)
    tile = 3 if (N // mesh.size) % 3 else 7
    x, status = inside(mesh, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=tile),
                       (SPEC, SPEC), (SPEC, P(None)))(helpers.rows(a, mesh), helpers.rows(b, mesh))
    assert x.shape == (N, 3) and int(status[0]) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)
    x, _ = inside(mesh, functools.partial(jaxmg.potrs_shardmap_ctx, T_A=tile),
                  (SPEC, P(None)), (P(None), P(None)))(helpers.rows(a, mesh),
                                                       helpers.replicated(b[:, 0], mesh))
    assert x.shape == (N,)
    assert helpers.residual(a, x, b[:, 0]) <= helpers.tolerance(np.float64, N, 10.0)


def test_padded_call_forms_keep_derivatives_layouts_and_refusals(rng, mesh):
    """The call forms that pad row blocks differentiate as jaxmg's own (grad
    and jvp, eager and jitted), run on a mesh with a second axis of size 1,
    give x b's row layout, and refuse a on other devices than mesh='s."""
    if mesh.size < 2:
        pytest.skip("one device: the call form outside shard_map takes jaxmg's own path there")
    a = helpers.spd(rng, N, np.float64)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    tile = 3 if (N // mesh.size) % 3 else 7
    rows, whole = helpers.rows(a, mesh), helpers.replicated(b, mesh)

    def loss(routine, tile_size):
        return lambda a: (routine(a, whole, tile_size, mesh, SPEC) if routine is jaxmg.potrs
                          else routine(a, tile_size, mesh, SPEC)).sum()

    with jax.set_mesh(mesh):  # grad seeds its cotangent on the mesh's axes
        for routine in (jaxmg.potrs, jaxmg.potri):
            divides = next(t for t in range(tile, 0, -1) if (N // mesh.size) % t == 0)
            want = jax.grad(loss(routine, divides))(rows)
            for transform in (jax.grad, lambda f: jax.jit(jax.grad(f))):
                np.testing.assert_allclose(np.asarray(transform(loss(routine, tile))(rows)),
                                           np.asarray(want), rtol=1e-9, atol=1e-12)
        _, tangent = jax.jvp(lambda a: jaxmg.potrs(a, whole, tile, mesh, SPEC), (rows,), (rows,))
    x = np.linalg.solve(a, b)
    np.testing.assert_allclose(np.asarray(tangent), -x, rtol=1e-9, atol=1e-12)  # d(A^-1 b)[A] = -x

    two_axes = jax.sharding.Mesh(np.asarray(mesh.devices).reshape(-1, 1), ("x", "y"))
    placed = jax.device_put(a, jax.sharding.NamedSharding(two_axes, SPEC))
    x_two = jaxmg.potrs(placed, b, tile, two_axes, SPEC)
    assert helpers.residual(a, x_two, b) <= helpers.tolerance(np.float64, N, 10.0)

    x_rows = jaxmg.potrs(rows, helpers.rows(b, mesh), tile, mesh, SPEC)
    assert x_rows.sharding.spec[0] == "x"
    assert helpers.residual(a, x_rows, b) <= helpers.tolerance(np.float64, N, 10.0)

    others = helpers.mesh(mesh.size, first=0) if jax.device_count() < 2 * mesh.size else (
        helpers.mesh(mesh.size, first=mesh.size))
    if others.devices.flat[0] != mesh.devices.flat[0]:
        with pytest.raises(ValueError, match="mesh= has devices"):
            jaxmg.potrs(rows, whole, tile, others, SPEC)


def test_padded_row_blocks_report_a_matrix_that_is_not_positive_definite(mesh):
    a = np.diag(np.arange(N, dtype=np.float64) - 1)
    tile = 3 if (N // mesh.size) % 3 else 7
    x, status = jaxmg.potrs(helpers.rows(a, mesh), helpers.replicated(np.ones((N, 1)), mesh),
                            tile, mesh, SPEC, return_status=True)
    assert int(status) == 7 and np.isnan(np.asarray(x)).all()


@pytest.mark.parametrize("sharded", [False, True])
def test_potri_symmetrize_completes_the_upper_triangle(rng, mesh, sharded):
    h = helpers.hermitian(rng, N, np.complex128)
    upper = np.triu(h) + np.tril(rng.standard_normal((N, N)), -1)  # below: whatever is there
    given = helpers.rows(upper, mesh) if sharded else upper
    np.testing.assert_array_equal(np.asarray(jaxmg.potri_symmetrize(given)), h)
    with pytest.raises(ValueError, match="square matrix"):
        jaxmg.potri_symmetrize(upper[:3])


@pytest.mark.parametrize("call", [
    lambda a, b: jaxmg.potrs_shardmap_ctx(a, b, 0),
    lambda a, b: jaxmg.potri_shardmap_ctx(a, 2.5),
    lambda a, b: jaxmg.syevd_shardmap_ctx(a, -1),
], ids=["potrs", "potri", "syevd"])
def test_shardmap_ctx_refuses_a_tile_in_jaxmgs_words(mesh, spd, call):
    with pytest.raises((TypeError, ValueError), match="T_A must be positive"):
        inside(mesh, call, (SPEC, P(None, None)), (P(None, None), P(None)))(
            spd[1], helpers.replicated(np.ones((N, 1)), mesh))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_random_psd_is_hermitian_positive_definite_and_seeded(dtype):
    from jaxmg.utils import random_psd

    a = np.asarray(random_psd(16, dtype=dtype, seed=1234))
    assert a.dtype == dtype and a.shape == (16, 16)
    np.testing.assert_allclose(a, a.conj().T, rtol=0, atol=10 * np.finfo(dtype).eps)
    assert np.linalg.eigvalsh(a.astype(np.complex128)).min() > 0
    np.testing.assert_array_equal(a, np.asarray(random_psd(16, dtype=dtype, seed=1234)))
    assert not np.array_equal(a, np.asarray(random_psd(16, dtype=dtype, seed=1235)))


def test_cholesky_status_is_jaxmgs_in_every_peer_form(mesh):
    """potri's status and potrs's with return_logdet are 7 too where a is not
    positive definite, as JAXMg's; a matrix whose lower triangle alone is
    positive definite fails, as only the upper one is read."""
    lower_only = np.diag(np.arange(N, dtype=np.float64) + 1)
    lower_only[0, 1] = 2.0
    for bad in (np.diag(np.arange(N) - 1.0), lower_only):
        rows = helpers.rows(bad, mesh)
        inverse, status = jaxmg.potri(rows, 2, mesh, (SPEC,), True)
        assert int(status) == 7 and np.isnan(np.asarray(inverse)).all()
        b = helpers.replicated(np.ones((N, 1)), mesh)
        x, _, status = jaxmg.potrs(rows, b, 2, mesh, matrix_specs=SPEC, return_logdet=True,
                                   return_status=True)
        assert int(status) == 7 and np.isnan(np.asarray(x)).all()
    _, status = jaxmg.potri(helpers.rows(np.eye(N), mesh), 2, mesh, (SPEC,), True)
    assert int(status) == 0


@pytest.mark.parametrize("jitted", [True, False])
def test_inside_shard_map_the_gpus_come_from_its_mesh_without_set_mesh(jitted):
    """JAXMg's shard_map routines take no mesh; on GPUs the call needs the
    devices of its rows' axes, in order: those of the mesh given to
    jax.shard_map (none set with jax.set_mesh), in any device order."""
    from jaxmg._src import placement

    devices = helpers.devices(4)[::-1]
    for shape, names, axis in [((4,), ("x",), "x"), ((2, 2), ("x", "y"), ("x", "y"))]:
        mesh = jax.make_mesh(shape, names, devices=devices)
        seen = []

        def body(block):
            here = placement.Placement(jax.sharding.get_abstract_mesh(), axis, True)
            seen.append(placement.axis_devices(here, "in this test"))
            return block

        spec = P(axis, None)
        call = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)
        (jax.jit(call) if jitted else call)(helpers.rows(np.ones((8, 2)), mesh, axis))
        assert [d.id for d in seen[-1]] == [d.id for d in mesh.devices.reshape(-1)]
        assert [d.id for d in seen[-1]] != [d.id for d in jax.devices()[:4]]


# ---- JAXMg 1.x's *_shardmap_ctx: outside shard_map, under the caller's jit ----

def test_shardmap_ctx_routines_outside_shard_map_are_jaxmg_1x_forms(rng, mesh):
    """Called under the caller's jit with mesh and matrix_specs, as JAXMg 1.x's
    are: a_work (a itself) first, the status (a vector of one) last, the
    results between right; a donated by that jit."""
    a = helpers.spd(rng, N, np.float64)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    rows, whole = helpers.rows(a, mesh), helpers.replicated(b, mesh)
    potrs_ctx = jax.jit(lambda a, b: jaxmg.potrs_shardmap_ctx(a, b, 4, mesh, SPEC),
                        donate_argnums=0)
    a_work, x, status = potrs_ctx(rows.copy(), whole)
    np.testing.assert_array_equal(np.asarray(a_work), a)
    assert status.shape == (1,) and int(status[0]) == 0
    assert helpers.residual(a, x, b) <= helpers.tolerance(np.float64, N, 10.0)
    _, x, logdet, status = jax.jit(lambda a, b: jaxmg.potrs_shardmap_ctx(
        a, b, 4, mesh, matrix_specs=SPEC, return_logdet=True))(rows, whole)
    np.testing.assert_allclose(float(logdet), np.linalg.slogdet(a)[1], rtol=1e-12)
    _, w, v, status = jax.jit(lambda a: jaxmg.syevd_shardmap_ctx(a, 4, mesh, SPEC))(rows)
    np.testing.assert_allclose(a @ np.asarray(v), np.asarray(v) * np.asarray(w), atol=1e-9 * N)
    _, w_alone, status = jaxmg.syevd_shardmap_ctx(rows, 4, mesh, in_specs=(SPEC,),
                                                  return_eigenvectors=False)
    np.testing.assert_allclose(np.asarray(w_alone), np.asarray(w), rtol=1e-12)
    general = a + np.triu(rng.standard_normal((N, N)), 1)
    _, x, status = jax.jit(lambda a, b: jaxmg.lu_solve_shardmap_ctx(a, b, 4, mesh, SPEC))(
        helpers.rows(general, mesh), whole)
    assert int(status[0]) == 0
    assert helpers.residual(general, x, b) <= helpers.tolerance(np.float64, N, 100.0)
    a_work, u, s, vh, status = jaxmg.gesvd_shardmap_ctx(rows, 4, mesh, SPEC)
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(u) * np.asarray(s) @ np.asarray(vh), a, atol=1e-9 * N)
    a_work, s_alone, status = jaxmg.gesvd_shardmap_ctx(rows, 4, mesh, SPEC, compute_u=False,
                                                       compute_vh=False)
    assert s_alone.shape == (N,) and status.shape == (1,)


def test_shardmap_ctx_status_outside_shard_map_reports_failure(mesh):
    a = np.diag(np.arange(N, dtype=np.float64) - 1)  # not positive definite
    _, x, status = jaxmg.potrs_shardmap_ctx(helpers.rows(a, mesh),
                                            helpers.replicated(np.ones((N, 1)), mesh), 2, mesh,
                                            SPEC)
    assert int(status[0]) == 7 and np.isnan(np.asarray(x)).all()


def test_jaxmg_1x_shardmap_ctx_refused_inside_shard_map(mesh):
    body = lambda a, b: jaxmg.lu_solve_shardmap_ctx(a, b, 2)  # noqa: E731
    with pytest.raises(ValueError, match="outside jax.shard_map"):
        inside(mesh, body, (SPEC, P(None, None)), P(None, None))(
            helpers.rows(np.eye(N), mesh), helpers.replicated(np.ones((N, 1)), mesh))
    body = lambda a, b: jaxmg.potrs_shardmap_ctx(a, b, 2, mesh, SPEC)  # noqa: E731
    with pytest.raises(ValueError, match="0.0.8's form"):
        inside(mesh, body, (SPEC, P(None, None)), P(None, None))(
            helpers.rows(np.eye(N), mesh), helpers.replicated(np.ones((N, 1)), mesh))
    with pytest.raises(TypeError, match="fourth argument is the mesh"):
        jaxmg.potrs_shardmap_ctx(helpers.rows(np.eye(N), mesh),
                                 helpers.replicated(np.ones((N, 1)), mesh), 2, False)
    with pytest.raises(TypeError, match="matrix_specs and in_specs"):
        jaxmg.potrs_shardmap_ctx(helpers.rows(np.eye(N), mesh),
                                 helpers.replicated(np.ones((N, 1)), mesh), 2, mesh, SPEC,
                                 in_specs=SPEC)
