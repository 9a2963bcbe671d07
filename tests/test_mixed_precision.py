"""The mixed-precision solvers (jaxmg/_src/mixed): blocked factorisations
with low-precision trailing updates (emulated on CPU with the rounding of
the GPU presets), refinement to float64 accuracy, the float64 fallback, and
row-sharded inputs on forced host CPU devices.

Compiles dominate the run time here, so the solver cases share shapes and
options (N=200, block 64, K=3) and are compiled once per dtype."""

import re

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from scipy.linalg import lapack

from helpers import devices, hermitian, mesh, random_matrix, run_python, spd
import jaxmg
from jaxmg._src.mixed import blocks, cholesky, lu, normal, placement, precision, refine, solvers

CONDITIONS = (10.0, 1e4, 1e6)
DTYPES = (np.float64, np.complex128)
N, NB, K = 200, 64, 3  # shared by the solver cases: 64 does not divide 200


def backward_error(a, x, b) -> np.ndarray:
    """Per column ||b - A x||_inf / (||A||_inf ||x||_inf + ||b||_inf), in NumPy."""
    dtype = np.result_type(np.asarray(a).dtype, np.asarray(b).dtype)
    a, x, b = (np.asarray(v, dtype) for v in (a, x, b))
    x, b = x.reshape(len(a), -1), b.reshape(len(a), -1)
    r = b - a @ x
    den = np.abs(a).sum(1).max() * np.abs(x).max(0) + np.abs(b).max(0)
    return np.abs(r).max(0) / den


def fp64_spd(a, b):
    return np.asarray(jsl.cho_solve(jsl.cho_factor(jnp.asarray(a), lower=True), jnp.asarray(b)))


def fp64_general(a, b):
    return np.asarray(jsl.lu_solve(jsl.lu_factor(jnp.asarray(a)), jnp.asarray(b)))


def general(rng, n: int, dtype, condition: float) -> np.ndarray:
    """U diag(s) V^H with singular values spread geometrically over [1/condition, 1]."""
    u, _ = np.linalg.qr(random_matrix(rng, n, dtype))
    v, _ = np.linalg.qr(random_matrix(rng, n, dtype))
    s = np.geomspace(1.0, 1.0 / condition, n) if n > 1 else np.ones(1)
    return ((u * s) @ v.conj().T).astype(dtype)


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


# --------------------------------------------------------------------------
# Update precisions
# --------------------------------------------------------------------------

# Relative error bounds of one product with 40-term sums: the unit roundoff
# of the parts (2^-8 BF16, 2^-11 TF32) times a small factor; x3 drops the
# lo*lo terms (2^-16 for BF16), x6 keeps terms to 2^-24.
BOUNDS = {"bf16": 2**-6, "bf16x3": 2**-13, "bf16x6": 2**-20, "fp16": 2**-9, "tf32": 2**-9,
          "tf32x3": 2**-19, "f32": 2**-20, "f64": 2**-48}


@pytest.mark.parametrize("update", sorted(precision.UPDATES))
def test_update_precision_rounds_like_its_format(rng, update):
    x, y = rng.standard_normal((50, 40)), rng.standard_normal((30, 40))
    dtype = jnp.float64 if update == "f64" else jnp.float32
    got = precision.matmul(jnp.asarray(x, dtype), jnp.asarray(y, dtype), update, adjoint_y=True)
    ref = x @ y.T
    err = np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max()
    assert err < BOUNDS[update]
    if update in ("bf16", "fp16", "tf32"):  # really rounded, not float32 in disguise
        assert err > 2**-16


def _gpu_products(fn, *args) -> int:
    """The GEMMs in fn's program as lowered for a CUDA GPU (where the presets,
    not the emulation, run)."""
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text().count(
        "stablehlo.dot_general")


def test_span_bounds_the_terms_each_preset_product_sums(rng):
    """span: XLA's preset forms the product over spans of at most that many
    terms, summed in float32; the sum is still the product."""
    x = jnp.asarray(rng.standard_normal((8, 5000)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((6, 5000)), jnp.float32)

    def product(span, emulate=None):
        return lambda x, y: precision.matmul(x, y, "bf16x6", adjoint_y=True, span=span, emulate=emulate)

    assert [_gpu_products(product(s), x, y) for s in (None, 5000, 2048, 1000)] == [1, 1, 3, 5]
    ref = np.asarray(x, np.float64) @ np.asarray(y, np.float64).T
    got = np.asarray(product(2048, emulate=False)(x, y), np.float64)  # XLA:CPU runs it in float32
    assert np.abs(got - ref).max() / np.abs(ref).max() < BOUNDS["bf16x6"]


@pytest.mark.parametrize("routine", ["cholesky", "lu"])
def test_span_reaches_the_update_gemms_of_a_factorisation(routine):
    factor = cholesky.cholesky if routine == "cholesky" else lu.lu
    a = jnp.eye(512, dtype=jnp.float32)

    def products(span):
        return _gpu_products(lambda a: factor(a, block_size=128, update="bf16x3", panel_solve="trsm",
                                              span=span)[1], a)

    assert products(64) > products(None) > 0


def test_span_must_be_a_positive_int():
    for span in (0, True, 2.0, "2048"):
        with pytest.raises(ValueError, match=r"span must be a positive int or None, got"):
            solvers.spd_solve(jnp.eye(4), jnp.ones(4), span=span)
    with pytest.raises(ValueError, match=r"span must be a positive int or None, got 0"):
        solvers.general_solve(jnp.eye(4), jnp.ones(4), span=0)


def test_fp16_updates_round_to_float16_subnormals_and_overflow_past_its_range():
    """The emulation rounds as the GPU's F16 GEMM: entries below float16's
    normal range keep their subnormal value (reduce_precision would flush
    them to zero), entries beyond 65504 overflow."""
    tiny = jnp.full((4, 8), 1e-6, jnp.float32)
    got = np.asarray(precision.matmul(tiny, jnp.ones((4, 8), jnp.float32), "fp16", adjoint_y=True))
    assert np.allclose(got, 8 * np.float32(np.float16(1e-6)), rtol=1e-6) and got.min() > 0
    big = jnp.full((2, 2), 7e4, jnp.float32)
    assert not np.isfinite(np.asarray(precision.matmul(big, jnp.eye(2), "fp16", adjoint_y=True))).any()


def test_lu_refuses_float16_updates_by_name():
    with pytest.raises(ValueError, match=r"update='fp16' has float16's range.*use bf16, bf16x3 or tf32"):
        lu.lu(jnp.eye(4), update="fp16")
    with pytest.raises(ValueError, match=r"update='fp16' has float16's range"):
        solvers.general_solve(jnp.eye(4), jnp.ones(4), update="fp16")


@pytest.mark.parametrize("adjoint_y", [True, False])
def test_complex_update_is_the_complex_product(rng, adjoint_y):
    x = random_matrix(rng, 20, np.complex64, 12)
    y = random_matrix(rng, 12, np.complex64, 12)
    ref = x.astype(np.complex128) @ (y.conj().T if adjoint_y else y)
    got = np.asarray(precision.matmul(jnp.asarray(x), jnp.asarray(y), "bf16x6", adjoint_y=adjoint_y))
    assert np.abs(got - ref).max() / np.abs(ref).max() < BOUNDS["bf16x6"]


def test_unknown_update_names_the_choices():
    with pytest.raises(ValueError, match=r"update='fp8' is not a known precision; use one of"):
        cholesky.cholesky(jnp.eye(4), update="fp8")


def test_float64_updates_need_a_float64_panel():
    with pytest.raises(ValueError, match='update="f64" needs panel="float64"'):
        cholesky.cholesky(jnp.eye(4), update="f64")


def test_programs_take_the_compiler_options_only_when_nothing_traces_them(monkeypatch):
    real_jit, ran = jax.jit, []

    def recording_jit(fun, **options):
        jitted = real_jit(fun, **options)

        def run(*args, **kwargs):
            ran.append(options.get("compiler_options"))
            return jitted(*args, **kwargs)

        run.lower = jitted.lower
        return run

    monkeypatch.setattr(jax, "jit", recording_jit)
    double = precision.jit(lambda x: 2 * x)
    monkeypatch.setattr(jax, "jit", real_jit)
    x = jnp.arange(3.0)
    forms = {
        "eager": lambda: double(x),
        "jit": lambda: jax.jit(double)(x),
        "grad": lambda: jax.grad(lambda v: double(v).sum())(x) * x,
        "vmap": lambda: jax.vmap(double)(x),
        "jit of a constant": lambda: jax.jit(lambda: double(x))(),
    }
    for form, call in forms.items():
        np.testing.assert_allclose(call(), 2 * x, err_msg=form)
        assert ran.pop() == (precision.COMPILER_OPTIONS if form == "eager" else None), form


def test_a_mixed_solve_of_constants_inside_a_callers_jit(rng):
    a, b = spd(rng, 40, np.float64), rng.standard_normal(40)
    x = jax.jit(lambda: jaxmg.solve(a, b, assume_a="pos", precision="mixed"))()
    assert backward_error(a, x, b)[0] < 4 * eps(np.float64)


# --------------------------------------------------------------------------
# Diagonal block inverses
# --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("n,leaf", [(37, 4), (64, 16), (100, 8), (33, 32)])
def test_inverse_by_doubling_is_the_triangle_inverse(rng, dtype, unit, n, leaf):
    """Leaves solved as one batch, joined pairwise (n padded to a power of two
    of leaves): the inverse of the lower triangle only (the upper holds
    noise, as an LU's packed block does), exactly lower triangular."""
    m = random_matrix(rng, n, dtype) / np.sqrt(n) + 2 * np.eye(n, dtype=dtype)
    triangle = np.tril(m, -1) + np.eye(n) if unit else np.tril(m)
    got = np.asarray(blocks.inverse_lower(jnp.asarray(m), unit_diagonal=unit, leaf=leaf))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.abs(got @ triangle - np.eye(n)).max() < tol
    assert np.all(np.triu(got, 1) == 0)
    upper = np.asarray(blocks.inverse_upper(jnp.asarray(m), leaf=leaf))
    assert np.abs(upper @ np.triu(m) - np.eye(n)).max() < tol


def test_a_factorisation_of_many_panels_finishes_on_cpu():
    """Several diagonal blocks inverted at once: jaxlib 0.10's batched LAPACK
    kernels wait on the thread pool they run in, so as many batched triangular
    solves at once as the pool has threads never finished (on a 2-core
    machine this solve hung every time); the leaves now go one at a time."""
    code = (
        "import jax, jax.numpy as jnp, numpy as np\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "from jaxmg._src.mixed import solvers\n"
        "rng = np.random.default_rng(0)\n"
        "a = rng.standard_normal((1024, 1024)) + 96 * np.eye(1024)\n"
        "b = rng.standard_normal((1024, 1))\n"
        "x, r = solvers.general_solve(jnp.asarray(a), jnp.asarray(b), block_size=256,\n"
        "                             panel_solve='inverse')\n"
        "print(float(np.abs(a @ np.asarray(x) - b).max() / np.abs(b).max()), bool(r.fallback[0]))\n"
    )
    done = run_python(code, devices=1, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    residual, fallback = done.stdout.split()
    assert float(residual) < 1e-12 and fallback == "False"


def test_inverse_by_doubling_keeps_the_scale_of_a_graded_triangle(rng):
    """L = M D with D from 1 to 1e-9 and M unit lower triangular, well
    conditioned: X = D^-1 M^-1 has rows of sizes 1 to 1e9. Each joined block
    is X2 C X1 from the leaves' own inverses, so every row stays as accurate
    as the triangular solve's, relative to its own size."""
    n = 96
    m = np.eye(n) + np.tril(rng.standard_normal((n, n)), -1) * 0.3 / np.sqrt(n)
    l = m * np.geomspace(1, 1e-9, n)[None, :]
    want = np.asarray(blocks.inverse_lower(jnp.asarray(l), leaf=n))  # one triangular solve
    got = np.asarray(blocks.inverse_lower(jnp.asarray(l), leaf=8))
    row_size = np.abs(want).max(axis=1)
    assert np.all(np.abs(got - want).max(axis=1) < 1e-13 * row_size)
    assert np.abs(l @ got - np.eye(n)).max() < 1e-13


# --------------------------------------------------------------------------
# Blocked Cholesky
# --------------------------------------------------------------------------

# (N, block size, dtype, variant): block sizes that divide N and that do not.
CHOLESKY_CASES = [
    (1, 4, np.float64, "left"),
    (2, 1, np.complex128, "right"),
    (7, 3, np.float64, "right_full"),
    (64, 16, np.complex128, "left"),
    (200, 64, np.float64, "right"),
    (513, 128, np.float64, "left"),
]


@pytest.mark.parametrize("n,nb,dtype,variant", CHOLESKY_CASES)
def test_cholesky_in_float64_matches_lapack(rng, n, nb, dtype, variant):
    a = spd(rng, n, dtype, 100.0)
    f, info = cholesky.cholesky(jnp.asarray(a), block_size=nb, update="f64", panel="float64", variant=variant)
    lower = np.asarray(cholesky.dense(f))
    assert int(info) == 0
    assert np.array_equal(lower, np.tril(lower))
    assert np.linalg.norm(lower - np.linalg.cholesky(a)) <= 100 * n * eps(dtype) * np.linalg.norm(lower)


@pytest.mark.parametrize(
    "variant,panel_solve", [("left", "trsm"), ("right", "inverse"), ("right_full", "trsm")]
)
def test_cholesky_error_is_the_update_precisions(rng, variant, panel_solve):
    n = 96
    a = spd(rng, n, np.float64, 10.0)
    f, info = cholesky.cholesky(jnp.asarray(a), block_size=40, variant=variant, panel_solve=panel_solve)
    lower = np.asarray(cholesky.dense(f), np.float64)
    err = np.linalg.norm(lower @ lower.T - a) / np.linalg.norm(a)
    assert int(info) == 0
    assert 2**-14 < err < 2**-6  # BF16 products: worse than float32, as good as BF16


@pytest.mark.parametrize("n,nb,dtype,variant", [CHOLESKY_CASES[3], CHOLESKY_CASES[4]])
def test_cholesky_solve_applies_the_inverse(rng, n, nb, dtype, variant):
    a = spd(rng, n, dtype, 100.0)
    b = random_matrix(rng, n, dtype, 2)
    f, _ = cholesky.cholesky(jnp.asarray(a), block_size=nb, update="f64", panel="float64", variant=variant)
    x = np.asarray(cholesky.solve(f, jnp.asarray(b)))
    assert np.linalg.norm(a @ x - b) / np.linalg.norm(b) < 100 * n * eps(dtype) * 100


@pytest.mark.parametrize("variant", cholesky.VARIANTS)
@pytest.mark.parametrize("where", [0, 64, 199])
def test_cholesky_info_is_lapacks(rng, variant, where):
    a = spd(rng, N, np.float64, 10.0)
    a[where, where] = -1.0
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    expected = potrf(a, lower=True)[1]
    f, info = cholesky.cholesky(jnp.asarray(a), block_size=NB, variant=variant)
    assert int(info) == expected == where + 1


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("where", [0, 127, 128, 129, 300, 383])
def test_the_failing_pivot_search_in_sub_blocks_is_lapacks(rng, dtype, where):
    """The search that turns a failed diagonal block into LAPACK's order, in
    sub-blocks of cholesky.SEARCH_BLOCK (here 3 and a ragged one), the last
    of which may be the identity padding a short block."""
    n = 3 * cholesky.SEARCH_BLOCK + 50
    a = indefinite_at(rng, n, where, dtype)
    assert where == 0 or a[where, where].real > 0  # only the eliminations show it
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    expected = potrf(a, lower=True)[1]
    a[np.triu_indices(n, 1)] = np.nan  # only the lower triangle is read
    padded = np.eye(n + 30, dtype=dtype)
    padded[:n, :n] = a
    found = jax.jit(cholesky._first_nonpositive_pivot)
    assert int(found(jnp.asarray(a))) == int(found(jnp.asarray(padded))) == expected == where + 1


def test_a_factorisation_reports_lapacks_order_found_in_sub_blocks(rng):
    a = indefinite_at(rng, 300, 200, np.float64)
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    _, info = cholesky.cholesky(jnp.asarray(a), block_size=2 * cholesky.SEARCH_BLOCK)
    assert int(info) == potrf(a, lower=True)[1] == 201


def counted_panels(monkeypatch) -> list:
    """The offsets of the block columns whose panels a factorisation traced
    from now on factors, as they run (jax.effects_barrier() to wait for them)."""
    panels = []
    real_panel = cholesky._panel

    def counted(c, o, *rest):
        jax.debug.callback(lambda: panels.append(o))
        return real_panel(c, o, *rest)

    monkeypatch.setattr(cholesky, "_panel", counted)
    return panels


@pytest.mark.parametrize("on_mesh", [False, True])
@pytest.mark.parametrize("stop_every,factored", [(1, 2), (3, 3), (0, 5)])
def test_a_failed_factorisation_stops_at_its_next_stop(rng, monkeypatch, on_mesh, stop_every, factored):
    """A failure in block column 1 of 5: with a stop before every column the
    columns after it are not factored, with a stop every third one column
    more is, with none all are; LAPACK's order and the not-finite factor
    either way."""
    n, nb = 300, 64
    a = indefinite_at(rng, n, 100, np.float64)
    panels = counted_panels(monkeypatch)
    monkeypatch.setattr(cholesky, "STOP_EVERY", stop_every)
    cfg = blocks.config(np.float64, block_size=nb, update="bf16", panel="float32", variant="left",
                        panel_solve="trsm", variants=cholesky.VARIANTS)
    a_in, rows = jnp.asarray(a), placement.Rows()
    if on_mesh:
        a_in, _ = sharded(np.pad(a, ((0, 4), (0, 4))) + np.diag([0.0] * n + [1.0] * 4), AxisType.Explicit)
        rows = placement.resolve(a_in)
    f, info = fresh_factorisation(cfg, rows)(a_in)
    jax.effects_barrier()
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    assert int(info) == potrf(a, lower=True)[1] == 101
    assert sorted(panels) == [o for o, _ in blocks.partition(a_in.shape[0], nb)][:factored]
    assert not np.all(np.isfinite(np.asarray(cholesky.dense(f))))


@pytest.mark.parametrize("both_fail", [True, False])
def test_under_vmap_a_batch_stops_where_every_matrix_has_failed(rng, monkeypatch, both_fail):
    """One predicate for the batch, so that the stops stay conditionals: the
    batch stops where all its matrices have failed, and where one has not,
    all are factored to the end and each reports its own order."""
    n, nb = 300, 64
    other = indefinite_at(rng, n, 150, np.float64) if both_fail else spd(rng, n, np.float64, 10.0)
    a = np.stack([indefinite_at(rng, n, 100, np.float64), other])
    panels = counted_panels(monkeypatch)
    cfg = blocks.config(np.float64, block_size=nb, update="bf16", panel="float32", variant="left",
                        panel_solve="inverse", variants=cholesky.VARIANTS)
    program = jax.vmap(fresh_factorisation(cfg, placement.Rows()))
    f, info = program(jnp.asarray(a))
    jax.effects_barrier()
    assert np.asarray(info).tolist() == [101, 151 if both_fail else 0]
    offsets = [o for o, _ in blocks.partition(n, nb)]
    assert sorted(set(panels)) == (offsets[:3] if both_fail else offsets)


def fresh_factorisation(cfg, rows):
    """cholesky's factorisation as a new jit, traced with what the test patched."""
    return jax.jit(lambda a: placement.call(
        rows, lambda a: cholesky._factor(a, jnp.ones((), a.dtype), cfg=cfg, rows=rows),
        (cholesky.factor_specs(a.shape[0], cfg.block_size, rows), P()), a))


def test_stops_leave_a_factorisation_that_succeeds_as_it_was(rng, monkeypatch):
    a = jnp.asarray(spd(rng, 300, np.float64, 10.0))
    cfg = blocks.config(np.float64, block_size=64, update="bf16", panel="float32", variant="left",
                        panel_solve="inverse", variants=cholesky.VARIANTS)
    factors = []
    for stop_every in (1, 0):
        monkeypatch.setattr(cholesky, "STOP_EVERY", stop_every)
        f, info = fresh_factorisation(cfg, placement.Rows())(a)
        assert int(info) == 0
        factors.append(cholesky.dense(f))
    assert_same_factor(*factors)


def assert_same_factor(got, expected):
    """Equal factors from two programs, on a GPU up to the order of the GEMMs' sums."""
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(got, expected)
    else:  # GPU GEMMs are autotuned per program: sums in another order flip some
        # operands' BF16 rounding (2^-8 of an entry), 1e-5 apart on an H200
        np.testing.assert_allclose(got, expected, rtol=0, atol=2**-10)


def indefinite_at(rng, n: int, where: int, dtype) -> np.ndarray:
    """L D L^H: L unit lower triangular, D 1 but -0.1 at `where`, so the
    leading minors are positive up to order `where` and not at where + 1."""
    l = np.eye(n) + np.tril(random_matrix(rng, n, dtype), -1) * 1.5 / np.sqrt(n)
    d = np.ones(n)
    d[where] = -0.1
    return ((l * d) @ l.conj().T).astype(dtype)


def test_cholesky_info_of_an_indefinite_complex_matrix(rng):
    a = hermitian(rng, N, np.complex128)
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    expected = potrf(a, lower=True)[1]
    _, info = cholesky.cholesky(jnp.asarray(a), block_size=NB, update="f64", panel="float64")
    assert expected > 0 and int(info) == expected


def test_cholesky_under_jit_is_the_eager_factor(rng):
    a = jnp.asarray(spd(rng, N, np.float64, 10.0))
    eager, _ = cholesky.cholesky(a, block_size=NB)
    traced, _ = jax.jit(lambda a: cholesky.cholesky(a, block_size=NB))(a)
    assert_same_factor(cholesky.dense(traced), cholesky.dense(eager))


# --------------------------------------------------------------------------
# Blocked LU
# --------------------------------------------------------------------------

LU_CASES = [
    (1, 4, np.float64, "right"),
    (2, 1, np.complex128, "right_full"),
    (7, 3, np.float64, "right"),
    (64, 16, np.complex128, "right"),
    (200, 64, np.float64, "right_full"),
    (513, 128, np.float64, "right"),
]


def lu_parts(f):
    packed = np.asarray(lu.dense(f))
    n = len(packed)
    lower = np.tril(packed, -1) + np.eye(n)
    return lower, np.triu(packed), np.asarray(f.permutation)


@pytest.mark.parametrize("n,nb,dtype,variant", LU_CASES)
def test_lu_in_float64_is_a_pivoted_factorisation(rng, n, nb, dtype, variant):
    a = random_matrix(rng, n, dtype)
    f, info = lu.lu(jnp.asarray(a), block_size=nb, update="f64", panel="float64", variant=variant)
    lower, upper, perm = lu_parts(f)
    assert int(info) == 0
    assert sorted(perm) == list(range(n))
    # partial pivoting; complex pivots maximise |Re| + |Im|, so |l| <= sqrt(2)
    assert np.abs(lower).max() <= (np.sqrt(2) if np.iscomplexobj(a) else 1) + 1e-12
    err = np.linalg.norm(a[perm] - lower @ upper) / np.linalg.norm(a)
    assert err < 100 * n * eps(dtype)


@pytest.mark.parametrize("n,nb,dtype,variant", [LU_CASES[3], LU_CASES[4]])
def test_lu_solve_applies_the_inverse(rng, n, nb, dtype, variant):
    a = general(rng, n, dtype, 100.0)
    b = random_matrix(rng, n, dtype, 2)
    f, _ = lu.lu(jnp.asarray(a), block_size=nb, update="f64", panel="float64", variant=variant)
    x = np.asarray(lu.solve(f, jnp.asarray(b)))
    assert np.linalg.norm(a @ x - b) / np.linalg.norm(b) < 100 * n * eps(dtype) * 100


@pytest.mark.parametrize("n,nb,dtype,variant", [LU_CASES[0], LU_CASES[2], LU_CASES[3], LU_CASES[4]])
def test_lu_adjoint_solve_applies_the_adjoint_inverse(rng, n, nb, dtype, variant):
    a = general(rng, n, dtype, 100.0)
    b = random_matrix(rng, n, dtype, 2)
    f, _ = lu.lu(jnp.asarray(a), block_size=nb, update="f64", panel="float64", variant=variant)
    x = np.asarray(lu.solve(f, jnp.asarray(b), adjoint=True))
    assert np.linalg.norm(a.conj().T @ x - b) / np.linalg.norm(b) < 100 * n * eps(dtype) * 100


@pytest.mark.parametrize("panel_solve", ["trsm", "inverse"])
def test_lu_error_is_the_update_precisions(rng, panel_solve):
    n = 96
    a = general(rng, n, np.float64, 10.0)
    f, info = lu.lu(jnp.asarray(a), block_size=40, panel_solve=panel_solve)
    lower, upper, perm = lu_parts(f)
    err = np.linalg.norm(a[perm] - lower @ upper) / np.linalg.norm(a)
    assert int(info) == 0
    assert 2**-14 < err < 2**-5


@pytest.mark.parametrize("where", [0, 100, 199])
def test_lu_info_is_the_first_zero_pivot(rng, where):
    a = random_matrix(rng, N, np.float64)
    a[:, where] = 0.0
    (getrf,) = lapack.get_lapack_funcs(("getrf",), (a,))
    expected = getrf(a)[2]
    _, info = lu.lu(jnp.asarray(a), block_size=NB)
    assert int(info) == expected == where + 1


# --------------------------------------------------------------------------
# Solves at float64 accuracy
# --------------------------------------------------------------------------


def check_fp64_accurate(a, b, x, record, reference):
    """The answer is as accurate as the float64 solver's (within 10x in
    backward error), as measured here and as the record reports it (the two
    differ by the rounding of the residual, which is all that is left)."""
    ours, theirs = backward_error(a, x, b), backward_error(a, reference, b)
    reported = np.asarray(record.backward_error).reshape(-1)
    bound = 10 * np.maximum(theirs, eps(np.float64) / len(a))
    assert np.all(ours <= bound) and np.all(reported <= bound)
    assert int(record.info) == 0


def right_hand_sides(rng, dtype):
    """float64 cases take K = 3 columns, complex128 ones a vector (K = 1)."""
    return random_matrix(rng, N, dtype, K) if dtype == np.float64 else random_matrix(rng, N, dtype, 1)[:, 0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_spd_solve_is_fp64_accurate(rng, dtype):
    for condition in CONDITIONS:
        a = spd(rng, N, dtype, condition)
        b = right_hand_sides(rng, dtype)
        x, record = solvers.spd_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB)
        assert x.shape == b.shape and record.backward_error.shape == b.shape[1:]
        check_fp64_accurate(a, b, x, record, fp64_spd(a, b))
        if condition == 10.0:  # BF16 updates refine well-conditioned systems without help
            assert not np.any(record.fallback) and np.all(record.iterations >= 2)


@pytest.mark.parametrize("magnitude", [1e-30, 1.0, 1e30])
def test_fp16_updates_refine_matrices_of_any_magnitude_to_float64_accuracy(rng, magnitude):
    """A is scaled by a power of two to a unit diagonal before it is rounded,
    so FP16's range fits any magnitude (unscaled, 1e30 overflows and 1e-30
    underflows float16), and its 3 more bits than BF16 take no more steps."""
    a = spd(rng, N, np.float64, 100.0) * magnitude
    b = rng.standard_normal((N, K)) * magnitude
    x, record = solvers.spd_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB, update="fp16",
                                  panel_solve="inverse")
    check_fp64_accurate(a, b, x, record, fp64_spd(a, b))
    assert not np.any(record.fallback) and int(record.factor_info) == 0
    _, bf16 = solvers.spd_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB, update="bf16",
                                panel_solve="inverse")
    assert np.all(record.iterations <= bf16.iterations)


def test_fp16_inverse_panel_solve_survives_a_diagonal_block_inverse_beyond_float16(rng):
    """A tiny pivot (1e-6) in the first diagonal block puts 1e6, beyond
    float16's 65504, into a row of its inverse; the row is scaled into range
    before the GEMM that forms the block column below, so that column keeps
    its entry (0.5) instead of overflowing, and the solve converges."""
    a = np.eye(N)
    a[10, 10] = 1e-12
    a[NB + 5, 10] = a[10, NB + 5] = 5e-7  # L[NB + 5, 10] = 5e-7 / 1e-6
    f, info = cholesky.cholesky(jnp.asarray(a), block_size=NB, update="fp16", panel_solve="inverse")
    assert int(info) == 0
    assert np.abs(np.asarray(f.inverses[0])).max() > 65504  # the case the scaling is for
    assert all(np.isfinite(np.asarray(p)).all() for p in f.below)
    assert abs(float(f.below[0][5, 10]) - 0.5) < 0.05  # float16 holds 5e-7 as a subnormal
    b = rng.standard_normal((N, K))
    x, record = solvers.spd_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB, update="fp16",
                                  panel_solve="inverse")
    check_fp64_accurate(a, b, x, record, fp64_spd(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_general_solve_is_fp64_accurate(rng, dtype):
    for condition in CONDITIONS:
        a = general(rng, N, dtype, condition)
        b = right_hand_sides(rng, dtype)
        x, record = solvers.general_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB)
        assert x.shape == b.shape and record.iterations.shape == b.shape[1:]
        check_fp64_accurate(a, b, x, record, fp64_general(a, b))
        if condition == 10.0:
            assert not np.any(record.fallback)


@pytest.mark.parametrize("kind", ["spd", "general"])
def test_ill_conditioned_systems_converge_or_fall_back(rng, kind):
    """cond 1e8 with BF16 updates: GMRES-IR or the fallback, never a worse answer."""
    a = spd(rng, N, np.float64, 1e8) if kind == "spd" else general(rng, N, np.float64, 1e8)
    b = rng.standard_normal((N, K))
    solve = solvers.spd_solve if kind == "spd" else solvers.general_solve
    x, record = solve(jnp.asarray(a), jnp.asarray(b), block_size=NB)
    check_fp64_accurate(a, b, x, record, (fp64_spd if kind == "spd" else fp64_general)(a, b))
    assert np.all(np.asarray(record.fallback) | np.asarray(record.gmres))


def test_indefinite_matrix_reports_lapacks_info(rng):
    a = spd(rng, N, np.float64, 10.0)
    a[150, 150] = -3.0
    b = rng.standard_normal((N, K))
    x, record = solvers.spd_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB)
    assert int(record.factor_info) == 151 and int(record.info) == 151
    assert np.all(record.fallback) and np.all(np.isnan(np.asarray(x)))


def test_singular_matrix_reports_the_zero_pivot(rng):
    a = random_matrix(rng, N, np.float64)
    a[:, 30] = 0.0
    x, record = solvers.general_solve(jnp.asarray(a), jnp.asarray(rng.standard_normal((N, K))), block_size=NB)
    assert int(record.info) == 31 and np.all(np.isnan(np.asarray(x)))


def test_no_iterations_means_the_fallback_answers(rng):
    """(The SPD path's forced fallback runs sharded, below.)"""
    a = general(rng, N, np.float64, 10.0)
    b = rng.standard_normal((N, K))
    x, record = solvers.general_solve(jnp.asarray(a), jnp.asarray(b), block_size=NB, max_iterations=0)
    assert np.all(record.fallback) and np.all(np.asarray(record.iterations) == 0)
    check_fp64_accurate(a, b, x, record, fp64_general(a, b))


def test_without_the_fallback_unconverged_columns_are_marked(rng):
    a = spd(rng, 64, np.float64, 10.0)
    b = rng.standard_normal((64, 2))

    def solve(a, b):
        return solvers.spd_solve(a, b, block_size=24, max_iterations=1, fallback=False)

    x, record = solve(jnp.asarray(a), jnp.asarray(b))
    assert np.all(record.fallback) and np.all(np.asarray(record.iterations) == 1)
    assert int(record.info) == 0 and np.all(np.isfinite(np.asarray(x)))
    np.testing.assert_allclose(record.backward_error, backward_error(a, x, b), rtol=0.5)
    assert np.all(np.asarray(record.backward_error) > 1e-6)  # one BF16 solve: far from float64
    traced_x, traced = jax.jit(solve)(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(traced_x, x, rtol=1e-5)  # the same program, perhaps fused otherwise
    np.testing.assert_allclose(traced.backward_error, record.backward_error, rtol=1e-3)


def test_gmres_ir_refines_a_system_classic_refinement_finds_hard(rng):
    """cond 1e4 with TF32 updates (u * cond ~ 5)."""
    a = spd(rng, N, np.float64, 1e4)
    b = rng.standard_normal((N, K))
    x, record = solvers.spd_solve(
        jnp.asarray(a), jnp.asarray(b), block_size=NB, update="tf32", method="gmres"
    )
    check_fp64_accurate(a, b, x, record, fp64_spd(a, b))
    assert np.all(record.gmres) and not np.any(record.fallback)


def few_outliers(rng, n: int):
    """A (SPD, cond 10) and a preconditioner M^{-1} = (A + E)^{-1} whose
    A M^{-1} has three eigenvalues far from 1 (E acts on three eigenvectors):
    classic refinement diverges, GMRES needs a few steps."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = np.geomspace(1.0, 10.0, n)
    a = (q * w) @ q.T
    m = (q * np.concatenate([w[:3] * [0.1, 0.2, 8.0], w[3:]])) @ q.T
    return a, np.linalg.inv(m)


@pytest.mark.parametrize("method", ["ir", "gmres", "auto"])
def test_gmres_ir_converges_where_classic_refinement_diverges(rng, method):
    a, inverse = few_outliers(rng, 64)
    b = rng.standard_normal((64, 2))
    anorm, floor = refine.norms(jnp.asarray(a))
    x, iterations, gmres, converged, berr = refine.refine(
        lambda x: jnp.asarray(a) @ x, lambda r: jnp.asarray(inverse) @ r, jnp.asarray(b), anorm, floor,
        refine.options(method), start_ok=jnp.asarray(True),
    )
    if method == "ir":
        assert not np.any(converged) and not np.any(gmres)
    else:
        assert np.all(converged) and np.all(gmres)
        reference = backward_error(a, np.linalg.solve(a, b), b)
        assert np.all(backward_error(a, x, b) <= 10 * np.maximum(reference, 1e-18))


def test_refine_stops_at_the_floor(rng):
    """With an exact preconditioner, one solve reaches the float64 floor and
    the next step (which gains nothing) ends the refinement."""
    a = spd(rng, 64, np.float64, 10.0)
    b = rng.standard_normal((64, 2))
    anorm, floor = refine.norms(jnp.asarray(a))
    inverse = jnp.asarray(np.linalg.inv(a))
    x, iterations, gmres, converged, berr = refine.refine(
        lambda x: jnp.asarray(a) @ x, lambda r: inverse @ r, jnp.asarray(b), anorm, floor,
        refine.options("auto"), start_ok=jnp.asarray(True),
    )
    assert np.all(converged) and not np.any(gmres)
    assert np.all((np.asarray(iterations) >= 1) & (np.asarray(iterations) <= 4))
    assert np.all(np.asarray(berr) <= 4 * np.asarray(refine.normwise_floor(anorm, floor)))


@pytest.mark.parametrize("contraction", [1e-3, 5e-3])
def test_refine_stops_where_x_stops_changing(rng, monkeypatch, contraction):
    """Classic refinement whose error shrinks by `contraction` a step: once
    its last two corrections forecast that the next would change x by less
    than eps of its norm, a column stops, before the step that shows berr
    no longer decreasing (where the solve reaching the floor did not
    already show it; a second where berr, at its floor, halved by chance),
    with x as accurate as after those steps."""
    a = spd(rng, 64, np.float64, 10.0)
    b = rng.standard_normal((64, 8))
    want = np.linalg.solve(a, b)
    anorm, floor = refine.norms(jnp.asarray(a))
    damped = jnp.asarray((1 - contraction) * np.linalg.inv(a))

    def run():
        return refine.refine(
            lambda x: jnp.asarray(a) @ x, lambda r: damped @ r, jnp.asarray(b), anorm, floor,
            refine.options("ir"), start_ok=jnp.asarray(True),
        )

    def forward_error(x):
        return np.abs(np.asarray(x) - want).max(axis=0) / np.abs(want).max(axis=0)

    x, iterations, _, converged, _ = run()
    monkeypatch.setattr(refine, "last_step_left_x_exact", lambda change, *_: jnp.zeros(change.shape, bool))
    x_after, iterations_after, _, converged_after, _ = run()
    assert np.all(converged) and np.all(converged_after)
    saved = np.asarray(iterations_after) - np.asarray(iterations)
    assert np.all(saved >= 0) and saved.sum() >= 2, saved
    eps = np.finfo(np.float64).eps
    assert np.all(forward_error(x) <= np.maximum(4 * forward_error(x_after), 8 * eps))


def test_a_forecast_of_an_exact_x_needs_two_corrections_shrinking():
    exact = refine.last_step_left_x_exact
    eps = np.finfo(np.float64).eps
    change = jnp.asarray([1e-14, 1e-14, 1e-14, 1e-14, 1e-12])
    previous = jnp.asarray([1e-11, np.inf, 0.0, 1e-14, 1e-11])
    # a fast rate; no earlier correction; none; no decrease; fast but not yet below eps
    np.testing.assert_array_equal(np.asarray(exact(change, previous, eps)),
                                  [True, False, False, False, False])


@pytest.mark.parametrize("contraction,budget,reaches", [(0.3, 40, True), (0.3, 20, False), (0.8, 30, False)])
def test_refine_gives_up_at_once_when_its_rate_cannot_reach_the_bound(rng, contraction, budget, reaches):
    """Classic refinement whose error shrinks by `contraction` each step
    (precondition = (1 - contraction) A^{-1}) needs about
    log(bound) / log(contraction) solves: 0.3 reaches the bound in about 30,
    so with 20 left it stops after its first step, as does 0.8 (about 150)."""
    a = spd(rng, 64, np.float64, 10.0)
    b = rng.standard_normal((64, 2))
    anorm, floor = refine.norms(jnp.asarray(a))
    damped = jnp.asarray((1 - contraction) * np.linalg.inv(a))
    x, iterations, gmres, converged, berr = refine.refine(
        lambda x: jnp.asarray(a) @ x, lambda r: damped @ r, jnp.asarray(b), anorm, floor,
        refine.options("ir", max_iterations=budget), start_ok=jnp.asarray(True),
    )
    iterations = np.asarray(iterations)
    if reaches:
        assert np.all(converged) and np.all((iterations > 20) & (iterations < budget))
        assert np.all(np.asarray(berr)
                      <= refine.tolerance(64) * float(refine.normwise_floor(anorm, floor)))
    else:
        assert not np.any(converged) and np.all(iterations <= 2)


def test_auto_hands_a_classic_rate_short_of_the_budget_to_gmres(rng):
    """Classic refinement whose error shrinks by 0.45 a step (so it never
    counts as slow) would need about 45 solves: method "ir" gives up within three,
    "auto" hands the column to GMRES-IR, which converges (here in one step,
    the preconditioned matrix being 0.55 I) within the budget of 30."""
    a = spd(rng, 64, np.float64, 10.0)
    b = rng.standard_normal((64, 2))
    anorm, floor = refine.norms(jnp.asarray(a))
    damped = jnp.asarray(0.55 * np.linalg.inv(a))

    def run(method):
        return refine.refine(
            lambda x: jnp.asarray(a) @ x, lambda r: damped @ r, jnp.asarray(b), anorm, floor,
            refine.options(method), start_ok=jnp.asarray(True),
        )

    _, iterations, _, converged, _ = run("ir")  # the forecast after the second is borderline
    assert not np.any(converged) and np.all(np.asarray(iterations) <= 3)
    x, iterations, gmres, converged, berr = run("auto")
    assert np.all(converged) and np.all(gmres) and np.all(np.asarray(iterations) <= 6), iterations
    assert np.all(np.asarray(berr) <= refine.tolerance(64) * float(refine.normwise_floor(anorm, floor)))
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-12)


def test_gmres_within_the_tolerance_takes_one_step_a_cycle(rng, monkeypatch):
    """GMRES-IR with a preconditioner that classic refinement is slow with
    (M A = S, eigenvalues spread over [0.3, 1.9]) and cycles that reduce the
    residual by 1e-5, so that a cycle lands at the floor with a change in x
    too large for the forecast to stop the column: one step then shows
    whether berr still falls. Whole cycles there (the rule patched out) spend
    more solves for an x no more accurate."""
    a = spd(rng, 64, np.float64, 10.0)
    q, _ = np.linalg.qr(rng.standard_normal((64, 64)))
    s = (q * np.linspace(0.3, 1.9, 64)) @ q.T
    b = rng.standard_normal((64, 16))
    want = np.linalg.solve(a, b)
    anorm, floor = refine.norms(jnp.asarray(a))
    preconditioner = jnp.asarray(s @ np.linalg.inv(a))

    def run():
        return refine.refine(
            lambda x: jnp.asarray(a) @ x, lambda r: preconditioner @ r, jnp.asarray(b), anorm,
            floor, refine.options("auto", max_iterations=60, inner_tolerance=1e-5),
            start_ok=jnp.asarray(True),
        )

    def forward_error(x):
        return np.abs(np.asarray(x) - want).max(axis=0) / np.abs(want).max(axis=0)

    x, iterations, gmres, converged, _ = run()
    monkeypatch.setattr(refine, "_STEPS_WITHIN_TOLERANCE", refine.Options().restart)
    x_whole, iterations_whole, _, converged_whole, _ = run()
    assert np.all(converged) and np.all(converged_whole) and np.all(gmres)
    saved = np.asarray(iterations_whole) - np.asarray(iterations)
    assert np.all(saved >= 0) and saved.sum() >= 2, (iterations, iterations_whole)
    eps = np.finfo(np.float64).eps
    assert np.all(forward_error(x) <= np.maximum(4 * forward_error(x_whole), 8 * eps))


# --------------------------------------------------------------------------
# Row-sharded inputs (4 forced CPU devices)
# --------------------------------------------------------------------------


def sharded(x, axis_type):
    m = mesh(4) if axis_type == AxisType.Explicit else jax.make_mesh(
        (4,), ("x",), axis_types=(axis_type,), devices=devices(4))
    return jax.device_put(jnp.asarray(x), NamedSharding(m, P("x", None))), m


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("on_mesh", [False, True])
def test_transposed_product_is_a_transpose_not_an_adjoint(rng, dtype, on_mesh):
    a = rng.standard_normal((N, N)) + (1j * rng.standard_normal((N, N)) if dtype == np.complex128 else 0)
    x = rng.standard_normal((N, 2)) + (1j * rng.standard_normal((N, 2)) if dtype == np.complex128 else 0)
    if on_mesh:
        a_in, _ = sharded(a, AxisType.Explicit)
        rows = placement.resolve(a_in)
        assert rows.sharded
        got = placement.call(rows, rows.transposed_product, P(), a_in, jnp.asarray(x))
    else:
        got = placement.Rows().transposed_product(jnp.asarray(a), jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), a.T @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis_type,kind", [(AxisType.Explicit, "spd"), (AxisType.Explicit, "general"),
                                            (AxisType.Auto, "spd")])
def test_sharded_factors_match_and_stay_sharded(rng, axis_type, kind):
    if kind == "spd":
        a = spd(rng, N, np.float64, 10.0)
        factor, dense, blocks = cholesky.cholesky, cholesky.dense, lambda f: f.below
    else:
        a = general(rng, N, np.float64, 10.0)
        factor, dense, blocks = lu.lu, lu.dense, lambda f: f.columns
    a_rows, m = sharded(a, axis_type)
    one, info_one = factor(jnp.asarray(a), block_size=NB)
    rows, info_rows = factor(a_rows, block_size=NB, mesh=m)
    assert int(info_one) == int(info_rows) == 0
    assert all(p.sharding.spec == P("x", None) for p in blocks(rows))
    if kind == "general":
        np.testing.assert_array_equal(rows.permutation, one.permutation)
    np.testing.assert_allclose(dense(rows), dense(one), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind,max_iterations", [("spd", 0), ("general", 30)])
def test_sharded_solves_are_fp64_accurate(rng, kind, max_iterations):
    """Refined (general) and forced to the sharded float64 fallback (SPD)."""
    a = spd(rng, N, np.float64, 1e4) if kind == "spd" else general(rng, N, np.float64, 10.0)
    b = rng.standard_normal((N, K))
    a_rows, _ = sharded(a, AxisType.Explicit)
    solve = solvers.spd_solve if kind == "spd" else solvers.general_solve
    x, record = solve(a_rows, jnp.asarray(b), block_size=NB, max_iterations=max_iterations)
    assert np.all(np.asarray(record.fallback) == (max_iterations == 0))
    check_fp64_accurate(a, b, x, record, (fp64_spd if kind == "spd" else fp64_general)(a, b))


@pytest.mark.parametrize("max_iterations", [30, 0])
def test_sharded_adjoint_solves_are_fp64_accurate(rng, max_iterations):
    """A^H x = b from A's row-sharded factor: refined, and by the sharded
    float64 fallback's adjoint sweeps."""
    a = general(rng, N, np.complex128, 10.0)
    b = random_matrix(rng, N, np.complex128, K)
    a_rows, m = sharded(a, AxisType.Explicit)
    rows = placement.resolve(a_rows, m, "x")
    cfg = blocks.config(a.dtype, block_size=NB, update="bf16x3", panel="float32", variant="right",
                        panel_solve="trsm", variants=lu.VARIANTS)
    f, info, norms = solvers.factorise("general", a_rows, cfg, rows)
    x, record = solvers.solve_factored("general", a_rows, f, info, norms, jnp.asarray(b), cfg,
                                       refine.options(max_iterations=max_iterations), True, rows,
                                       adjoint=True)
    assert np.all(np.asarray(record.fallback) == (max_iterations == 0))
    check_fp64_accurate(a.conj().T, b, x, record, fp64_general(a.conj().T, b))


@pytest.mark.parametrize("axis_type,dtype", [(AxisType.Explicit, np.complex128),
                                              (AxisType.Auto, np.float64)])
def test_sharded_gram_route_refines_as_on_one_device(rng, axis_type, dtype):
    """A^H A's Cholesky on row-sharded A (A^H's columns sharded, G's and the
    factor's block columns row-sharded): the solves of A and A^H take the
    iterations they take on one device, to float64 accuracy."""
    a = general(rng, N, dtype, 10.0)
    b = random_matrix(rng, N, dtype, K)
    a_rows, m = sharded(a, axis_type)
    rows = placement.resolve(a_rows, m, "x")
    cfg = blocks.config(a.dtype, block_size=NB, update="bf16x3", panel="float32", variant="gram",
                        panel_solve="inverse", variants=solvers.GENERAL_VARIANTS)
    f, info, norms = solvers.factorise("general", a_rows, cfg, rows)
    assert int(info) == 0 and isinstance(f, normal.GramFactor)
    assert f.adjoint.sharding.spec == P(None, "x")
    assert all(p.sharding.spec == P("x", None) for p in f.cholesky.below)
    one = solvers.factorise("general", jnp.asarray(a), cfg, placement.Rows())
    for adjoint, op in ((False, a), (True, a.conj().T)):
        x, record = solvers.solve_factored("general", a_rows, f, info, norms, jnp.asarray(b), cfg,
                                           refine.options(), True, rows, adjoint=adjoint)
        _, alone = solvers.solve_factored("general", jnp.asarray(a), *one, jnp.asarray(b), cfg,
                                          refine.options(), True, placement.Rows(), adjoint=adjoint)
        assert not np.asarray(record.fallback).any()
        assert np.abs(np.asarray(record.iterations) - np.asarray(alone.iterations)).max() <= 1
        check_fp64_accurate(op, b, x, record, fp64_general(op, b))


def test_sharded_gram_route_beyond_its_reach_falls_back_sharded(rng):
    """cond 1e6: G's Cholesky fails on the sharded rows as on one device,
    and the sharded float64 LU answers."""
    a = general(rng, N, np.float64, 1e6)
    b = rng.standard_normal((N, 1))
    a_rows, _ = sharded(a, AxisType.Explicit)
    x, record = solvers.general_solve(a_rows, jnp.asarray(b), block_size=NB, update="bf16x3",
                                      variant="gram", panel_solve="inverse")
    assert int(record.factor_info) > 0 and np.asarray(record.fallback).all()
    check_fp64_accurate(a, b, x, record, fp64_general(a, b))


def collective_sizes(hlo: str) -> list[int]:
    """Element counts of every collective's result in compiled HLO text."""
    sizes = []
    ops = "all-gather|all-reduce|collective-permute|all-to-all"
    pattern = r"= \(?(\w+)\[([\d,]*)\][^=]*?\b(" + ops + r")(-start)?\("
    for match in re.finditer(pattern, hlo):
        dims = [int(d) for d in match.group(2).split(",") if d]
        sizes.append(int(np.prod(dims)) if dims else 1)
    return sizes


def test_sharded_programs_never_gather_the_matrix(rng):
    """The programs of the sharded cases above (the same arguments: their
    compiled forms come from the cache) move no more than a panel at once."""
    a_rows, m = sharded(np.eye(N), AxisType.Explicit)
    b = jnp.zeros((N, K))
    rows = placement.resolve(a_rows)
    scale = jnp.ones(())
    programs = {}
    for kind, module, variant in (("spd", cholesky, "left"), ("general", lu, "right")):
        cfg = blocks.config(a_rows.dtype, block_size=NB, update="bf16", panel="float32", variant=variant,
                            panel_solve="trsm", variants=module.VARIANTS)
        factor = cholesky._cholesky if kind == "spd" else lu._lu
        programs[kind] = factor.lower(a_rows, scale, cfg=cfg, rows=rows)
        opts = refine.options(max_iterations=0 if kind == "spd" else 30)
        programs[kind + " solve"] = solvers._solve.lower(
            a_rows, b, kind=kind, cfg=cfg, opts=opts, fallback=True, rows=rows
        )
    f, info = lu._lu(a_rows, scale, cfg=cfg, rows=rows)
    norms = (jnp.ones(()), jnp.ones(()))
    programs["general adjoint solve"] = solvers._solve_factored.lower(
        a_rows, f, info, norms, b, kind="general", cfg=cfg, opts=refine.options(max_iterations=0),
        fallback=True, rows=rows, adjoint=True
    )
    gram = blocks.config(a_rows.dtype, block_size=NB, update="bf16x3", panel="float32", variant="gram",
                         panel_solve="inverse", variants=solvers.GENERAL_VARIANTS)
    programs["gram"] = normal.factor.lower(a_rows, cfg=gram, rows=rows)
    programs["gram solve"] = solvers._solve.lower(a_rows, b, kind="general", cfg=gram,
                                                  opts=refine.options(), fallback=True, rows=rows)
    g, g_info = normal.factor(a_rows, cfg=gram, rows=rows)
    programs["gram adjoint solve"] = solvers._solve_factored.lower(
        a_rows, g, g_info, norms, b, kind="general", cfg=gram, opts=refine.options(max_iterations=0),
        fallback=True, rows=rows, adjoint=True
    )
    for name, lowered in programs.items():
        sizes = collective_sizes(lowered.compile().as_text())
        assert sizes, f"{name}: no collectives found: is the program sharded at all?"
        assert max(sizes) < N * N // 2, f"{name} moves {max(sizes)} elements at once (N^2 = {N * N})"


# --------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"block_size": 0}, "block_size must be a positive int"),
        ({"panel": "float16"}, "panel='float16' is not a panel precision"),
        ({"variant": "up"}, "variant='up' is not known here"),
        ({"panel_solve": "qr"}, "panel_solve='qr'"),
        ({"method": "newton"}, "method='newton' is not a refinement method"),
        ({"max_iterations": -1}, "max_iterations must be an int >= 0"),
        ({"restart": 0}, "restart must be an int >= 1"),
        ({"inner_tolerance": 2.0}, r"inner_tolerance must lie in \(0, 1\)"),
    ],
)
def test_bad_options_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        solvers.spd_solve(jnp.eye(8), jnp.ones(8), **kwargs)


def test_bad_operands_name_the_fix():
    with pytest.raises(ValueError, match=r"a must be a square \(N, N\) matrix"):
        solvers.general_solve(jnp.ones((4, 3)), jnp.ones(4))
    with pytest.raises(ValueError, match=r"b must have shape \(4,\) or \(4, K\)"):
        solvers.general_solve(jnp.eye(4), jnp.ones(5))
    with pytest.raises(TypeError, match="a has dtype float32 \\(cast it first\\)"):
        solvers.spd_solve(jnp.eye(4, dtype=jnp.float32), jnp.ones(4))
    with pytest.raises(TypeError, match="fallback must be True or False"):
        solvers.spd_solve(jnp.eye(4), jnp.ones(4), fallback="yes")
    with pytest.raises(ValueError, match="pass axis= naming"):
        solvers.spd_solve(jnp.eye(4), jnp.ones(4), mesh=jax.make_mesh((1, 1), ("a", "b"), devices=devices(1)))


def test_fallback_backward_error_of_a_tiny_b_is_not_flushed_to_zero(rng):
    """The float64 fallback's answer is measured as refinement measures it,
    scaled: b near 1e-300 leaves subnormal residuals, which XLA's CPU code
    flushes to zero (a reported backward error of exactly 0)."""
    a = random_matrix(rng, 16, np.float64) + 5 * np.eye(16)
    b = random_matrix(rng, 16, np.float64, 2) * 1e-300
    x, record = solvers.general_solve(jnp.asarray(a), jnp.asarray(b), max_iterations=0)
    assert np.asarray(record.fallback).all()
    berr = np.asarray(record.backward_error)
    assert (berr > 0).all() and (berr < 1e-15).all(), berr
