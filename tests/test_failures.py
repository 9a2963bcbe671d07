"""What goes wrong, and how it is reported: matrices that are not positive
definite (all-NaN results and LAPACK's info), and every kind of bad argument
(an exception whose message names it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg


def dtype_id(dtype):
    return np.dtype(dtype).name


def one_negative(rng, n, dtype):
    """SPD but for one eigenvalue, which is negative."""
    w = np.geomspace(1.0, 10.0, n)
    w[n // 2] = -1.0
    return helpers.with_eigenvalues(rng, w, dtype)


MATRICES = {"indefinite": helpers.hermitian, "one_negative": one_negative}
# (N, devices, tile): one tile per device; several, padded; several, not padded.
LAYOUTS = {"N8-2dev": (8, 2, None), "N37-3dev-T2": (37, 3, 2), "N96-8dev-T3": (96, 8, 3)}


def placed(a, mesh):
    return helpers.put_rows(a, mesh), helpers.solve_kwargs(a, mesh)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("matrix", list(MATRICES))
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_potrs_not_positive_definite(rng, dtype, matrix, layout):
    n, devices, tile = LAYOUTS[layout]
    mesh = helpers.mesh(devices)
    a = MATRICES[matrix](rng, n, dtype)
    expected_info = helpers.lapack_potrf_info(a)
    assert expected_info > 0, "the test matrix must not be positive definite"
    b = helpers.random_matrix(rng, n, dtype, 3)
    a_dev, kwargs = placed(a, mesh)
    x, info = jaxmg.potrs(
        a_dev, helpers.replicated(b, mesh), tile_size=tile, return_info=True, **kwargs
    )
    assert int(info) == expected_info
    assert x.shape == b.shape and np.isnan(np.asarray(x)).all()
    # Without return_info the failure still shows: x is all NaN.
    x = jaxmg.potrs(a_dev, helpers.replicated(b, mesh), tile_size=tile, **kwargs)
    assert np.isnan(np.asarray(x)).all()
    # A vector right-hand side too.
    x, info = jaxmg.potrs(
        a_dev, helpers.replicated(b[:, 0], mesh), tile_size=tile, return_info=True, **kwargs
    )
    assert int(info) == expected_info and x.shape == (n,) and np.isnan(np.asarray(x)).all()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("matrix", list(MATRICES))
@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_potri_not_positive_definite(rng, dtype, matrix, layout):
    n, devices, tile = LAYOUTS[layout]
    mesh = helpers.mesh(devices)
    a = MATRICES[matrix](rng, n, dtype)
    expected_info = helpers.lapack_potrf_info(a)
    assert expected_info > 0
    a_dev, kwargs = placed(a, mesh)
    inv, info = jaxmg.potri(a_dev, tile_size=tile, return_info=True, **kwargs)
    assert int(info) == expected_info
    assert inv.shape == (n, n) and np.isnan(np.asarray(inv)).all()
    inv = jaxmg.potri(a_dev, tile_size=tile, **kwargs)
    assert np.isnan(np.asarray(inv)).all()


@pytest.mark.parametrize("k", [1, 2, 3, 7, 12, 13])
@pytest.mark.parametrize("routine", ["potrs", "potri"])
def test_info_is_order_of_first_bad_minor(rng, routine, k):
    """Near-identity matrix with a[k-1, k-1] = -1: leading minors 1..k-1 are
    positive definite, minor k is not, so info = k, in a's own row order
    (N = 13 on 3 devices with tile 2: padded, tiles permuted)."""
    n, mesh = 13, helpers.mesh(3)
    noise = helpers.hermitian(rng, n, np.complex128) * 1e-3
    a = np.eye(n) + noise
    a[k - 1, k - 1] = -1.0
    assert helpers.lapack_potrf_info(a) == k
    a_dev, kwargs = placed(a, mesh)
    if routine == "potrs":
        out, info = jaxmg.potrs(a_dev, np.ones(n, a.dtype), tile_size=2, return_info=True, **kwargs)
    else:
        out, info = jaxmg.potri(a_dev, tile_size=2, return_info=True, **kwargs)
    assert int(info) == k
    assert np.isnan(np.asarray(out)).all()


@pytest.mark.parametrize("dtype", helpers.DTYPES, ids=dtype_id)
def test_syevd_non_finite_input(rng, dtype):
    """LAPACK cannot diagonalise a matrix holding NaN: info > 0, w and v all NaN."""
    n, mesh = 12, helpers.mesh(3)
    a = helpers.hermitian(rng, n, dtype)
    a[3, 3] = np.nan
    w, v, info = jaxmg.syevd(helpers.rows(a, mesh), tile_size=2, return_info=True)
    assert int(info) > 0
    assert np.isnan(np.asarray(w)).all() and np.isnan(np.asarray(v)).all()
    w, info = jaxmg.syevd(
        helpers.rows(a, mesh), tile_size=2, compute_vectors=False, return_info=True
    )
    assert int(info) > 0 and np.isnan(np.asarray(w)).all()


@pytest.mark.parametrize("n, tile", [(12, 2), (10, 4)], ids=["even", "padded"])
@pytest.mark.parametrize("where", [(5, 1), (0, 9), (3, 3)], ids=["lower", "upper", "diagonal"])
@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
def test_non_finite_entry_fails_the_factorisations(rng, n, tile, where, value):
    """A NaN or Inf in what a factorisation reads, even one it lets through,
    fails it with NaN results: info is the routine's own order where it
    stopped there, else N + 1 (also when the engine pads the matrix). The
    Cholesky routines and syevd read a's upper triangle only (as jax.scipy's
    cho_factor, and LAPACK's potrf and syevd): one below the diagonal is not
    theirs, and they answer as for the clean matrix; LU reads it all. The
    engine's leader checks the blocks where they live."""
    mesh = helpers.mesh(2)
    clean = helpers.spd(rng, n, np.float64, 10.0)
    a = clean.copy()
    a[where] = value
    kw = dict(tile_size=tile, backend="jaxmg", mesh=mesh, spec=P("x", None))
    b = np.ones((n, 2))

    def failed(info):
        return 0 < int(info) <= n + 1

    x, info = jaxmg.potrs(a, b, return_info=True, **kw)
    inverse, inverse_info = jaxmg.potri(a, return_info=True, **kw)
    if where[0] > where[1]:  # below the diagonal: unread
        assert int(info) == 0 and int(inverse_info) == 0 and int(jaxmg.cho_factor(a, **kw).info) == 0
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(clean, b), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(inverse), np.linalg.inv(clean), rtol=1e-10, atol=1e-12)
    else:
        assert failed(info) and np.isnan(np.asarray(x)).all()
        if where == (3, 3) and value == np.inf:  # Cholesky takes sqrt(inf) and goes on
            assert int(info) == n + 1
        assert failed(inverse_info) and np.isnan(np.asarray(inverse)).all()
        assert failed(jaxmg.cho_factor(a, **kw).info)
    assert failed(jaxmg.lu_factor(a, **kw).info)
    w, info = jaxmg.syevd(a, compute_vectors=False, return_info=True, **kw)
    if where[0] > where[1]:  # the eigensolver reads the upper triangle too
        assert int(info) == 0
        np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(clean), rtol=1e-10)
    else:
        assert int(info) > 0 and np.isnan(np.asarray(w)).all()  # LAPACK's count, or N + 1


def test_failure_does_not_poison_next_call(rng):
    mesh = helpers.mesh(2)
    bad = helpers.hermitian(rng, 8, np.float64)
    good = helpers.spd(rng, 8, np.float64)
    b = helpers.random_matrix(rng, 8, np.float64, 2)
    _, info = jaxmg.potrs(helpers.rows(bad, mesh), b, return_info=True)
    assert int(info) > 0
    x, info = jaxmg.potrs(helpers.rows(good, mesh), b, return_info=True)
    assert int(info) == 0
    assert helpers.residual(good, x, b) <= helpers.tolerance(np.float64, 8, 10.0)


# ---- Bad arguments -------------------------------------------------------


def _potrs(a, **kwargs):
    b = np.ones(a.shape[0], dtype=a.dtype) if getattr(a, "ndim", 0) >= 1 else np.ones(1)
    return jaxmg.potrs(a, b, **kwargs)


ROUTINES = {"potrs": _potrs, "potri": jaxmg.potri, "syevd": jaxmg.syevd}


@pytest.fixture
def mesh2():
    return helpers.mesh(2)


@pytest.fixture
def a8(mesh2):
    return helpers.rows(np.eye(8), mesh2)


@pytest.mark.parametrize("routine", list(ROUTINES))
class TestBadMatrix:
    def test_rank_3(self, routine):
        with pytest.raises(
            ValueError, match=r"a must be a 2-D \(N, N\) matrix, got shape \(2, 8, 8\)"
        ):
            ROUTINES[routine](jnp.zeros((2, 8, 8)))

    def test_rank_1(self, routine):
        with pytest.raises(ValueError, match=r"a must be a 2-D \(N, N\) matrix, got shape \(8,\)"):
            ROUTINES[routine](jnp.zeros(8))

    def test_not_square(self, routine, mesh2):
        a = helpers.rows(np.zeros((8, 6)), mesh2)
        with pytest.raises(ValueError, match=r"a must be square, got shape \(8, 6\)"):
            ROUTINES[routine](a)

    @pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint8, jnp.bool_])
    def test_unsupported_dtype(self, routine, mesh2, dtype):
        a = helpers.rows(np.eye(8), mesh2).astype(dtype)
        with pytest.raises(
            TypeError, match=rf"a has dtype {jnp.dtype(dtype).name}; supported are float32"
        ):
            ROUTINES[routine](a)

    @pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
    def test_half_precision_suggests_float32(self, routine, mesh2, dtype):
        a = helpers.rows(np.eye(8), mesh2).astype(dtype)
        with pytest.raises(TypeError, match=r"a has dtype \w*16.*a\.astype\(jnp\.float32\)"):
            ROUTINES[routine](a)

    # Placements jax.scipy accepts are accepted: the result is the row-sharded input's.
    @pytest.mark.parametrize("placement", ["columns", "columns_spec", "replicated", "numpy"])
    def test_other_placements_give_the_row_sharded_result(self, routine, mesh2, placement):
        a = np.diag(np.arange(1.0, 9.0))
        want = ROUTINES[routine](helpers.rows(a, mesh2))
        got = {
            "columns": lambda: ROUTINES[routine](
                jax.device_put(a, NamedSharding(mesh2, P(None, "x")))),
            "columns_spec": lambda: ROUTINES[routine](a, mesh=mesh2, spec=P(None, "x")),
            "replicated": lambda: ROUTINES[routine](helpers.replicated(a, mesh2)),
            "numpy": lambda: ROUTINES[routine](a),
        }[placement]()
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)

    @pytest.mark.parametrize("tile", [0, -1])
    def test_tile_not_positive(self, routine, a8, tile):
        with pytest.raises(ValueError, match=rf"tile_size must be a positive int, got {tile}"):
            ROUTINES[routine](a8, tile_size=tile)

    @pytest.mark.parametrize("tile", [2.0, True, "2"], ids=["float", "bool", "str"])
    def test_tile_not_int(self, routine, a8, tile):
        with pytest.raises(TypeError, match=r"tile_size must be a positive int"):
            ROUTINES[routine](a8, tile_size=tile)

    def test_axis_not_in_mesh(self, routine, mesh2):
        with pytest.raises(ValueError, match=r"spec names axis 'y', not in the mesh axes \('x',\)"):
            ROUTINES[routine](np.eye(8), mesh=mesh2, spec=P("y", None))

    @pytest.mark.parametrize("spec, message", [
        (P("x", "x"), r"names mesh axis 'x' more than once"),
        (P(None, None, None), r"has 3 entries, but it describes one matrix a"),
    ], ids=["repeated axis", "three entries"])
    def test_spec_that_no_sharding_of_a_matrix_has(self, routine, mesh2, spec, message):
        with pytest.raises(ValueError, match=message):
            ROUTINES[routine](np.eye(8), mesh=mesh2, spec=spec)

    def test_spec_without_mesh_for_a_matrix_on_one_device(self, routine):
        with pytest.raises(ValueError, match=r"lies on one device and no mesh was given; pass "
                                             r"mesh= with spec="):
            ROUTINES[routine](np.eye(8), spec=P("x", None))

    def test_spec_not_partition_spec(self, routine, mesh2):
        with pytest.raises(TypeError, match=r"spec must be a jax.sharding.PartitionSpec"):
            ROUTINES[routine](np.eye(8), mesh=mesh2, spec=("x", None))

    def test_mesh_not_mesh(self, routine):
        with pytest.raises(TypeError, match=r"mesh must be a jax.sharding.Mesh, got str"):
            ROUTINES[routine](np.eye(8), mesh="x", spec=P("x", None))

    def test_unknown_backend(self, routine, a8):
        with pytest.raises(ValueError, match=r"backend must be one of"):
            ROUTINES[routine](a8, backend="lapack")

    @pytest.mark.parametrize(
        "value, message",
        [
            ("soon", r"JAXMG_TIMEOUT_S='soon' is not a number of seconds"),
            ("0", r"JAXMG_TIMEOUT_S='0' must be positive"),
            ("-3", r"JAXMG_TIMEOUT_S='-3' must be positive"),
        ],
        ids=["text", "zero", "negative"],
    )
    def test_bad_timeout_variable(self, routine, a8, monkeypatch, value, message):
        monkeypatch.setenv("JAXMG_TIMEOUT_S", value)
        with pytest.raises(ValueError, match=message):
            # A tile not used elsewhere in this file: a fresh trace reads the variable.
            ROUTINES[routine](a8, tile_size=3)


class TestBadRightHandSide:
    def test_rows_mismatch(self, a8):
        with pytest.raises(
            ValueError,
            match=r"b must have shape \(8,\) or \(8, K\) to match a's 8 rows, got \(6,\)",
        ):
            jaxmg.potrs(a8, np.ones(6))

    def test_rows_mismatch_matrix(self, a8):
        with pytest.raises(ValueError, match=r"b must have shape .* got \(9, 2\)"):
            jaxmg.potrs(a8, np.ones((9, 2)))

    def test_rank_3(self, a8):
        with pytest.raises(ValueError, match=r"b must have shape .* got \(8, 2, 2\)"):
            jaxmg.potrs(a8, np.ones((8, 2, 2)))

    def test_scalar(self, a8):
        with pytest.raises(ValueError, match=r"b must have shape .* got \(\)"):
            jaxmg.potrs(a8, np.float64(1.0))

    @pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int32])
    def test_dtype_differs(self, a8, dtype):
        with pytest.raises(
            TypeError, match=rf"b has dtype {np.dtype(dtype).name} but a has float64"
        ):
            jaxmg.potrs(a8, np.ones(8, dtype))


def test_a_wrong_keyword_names_the_routine():
    with pytest.raises(TypeError, match=r"jaxmg.inv\(\) got an unexpected keyword argument "
                                        "'precision'"):
        jaxmg.inv(np.eye(4), precision="mixed")
    with pytest.raises(TypeError, match=r"jaxmg.slogdet\(\) got an unexpected keyword"):
        jaxmg.slogdet(np.eye(4), on_failure="raise")


@pytest.mark.parametrize("routine", ["pinv", "matrix_rank"])
def test_a_routine_built_on_the_svd_names_itself_when_refusing_a_backend(routine):
    with pytest.raises(ValueError, match=rf"jaxmg: {routine} takes backend in .*got 'jaxmg'"):
        getattr(jaxmg, routine)(np.eye(4), backend="jaxmg")


@pytest.mark.parametrize("kwargs, match", [
    (dict(eps="x"), "polar's eps must be a number in \\(0, 1\\) or None, got 'x'"),
    (dict(eps=-1.0), "polar's eps must be a number"),
    (dict(max_iterations=0), "polar's max_iterations must be a positive int or None, got 0"),
    (dict(max_iterations=2.5), "polar's max_iterations must be a positive int"),
])
def test_polar_refuses_qdwh_options_out_of_range(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jaxmg.polar(np.eye(4) + 0.1, **kwargs)


def test_polar_refuses_an_integer_matrix_as_jax_does():
    with pytest.raises(ValueError, match="polar takes a floating or complex matrix, got int32"):
        jaxmg.polar(np.eye(4, dtype=np.int32))
