"""The benchmark (tools/bench): its driver (resuming a run over several sittings,
paired and single-call records in its progress lines and table, --impls, --conds)
on records made up here, with no workers; and on the devices, in this process,
the matrices of a prescribed condition number, the float64 backward error and
the solves measured on them (jaxmg (mixed) skips while jaxmg.solve has no
precision="mixed")."""

import inspect
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxmg
from tools.bench import cases, checks, impls, matrices, options, plan, report, resume, timing
from tools.bench.errors import Unsupported, error_result
from tools.bench.inputs import Inputs
from tools.bench.worker import Worker

AUTO, MG, MIXED, MP, NATIVE, NATIVE_INV = (cases.AUTO, cases.MG, cases.MIXED, cases.MP, cases.NATIVE,
                                           cases.NATIVE_INV)

SETTINGS = {"tile": 1024, "mp": False, "mp_tile": None, "repeats": 3, "budget_s": 4.0,
            "peer_path": None, "mem_fraction": None, "donate": False, "paired": True,
            "single_call_s": 20.0}


def record(task_id, routine="potrs", n=1024, impl=AUTO, status="ok", **extra):
    r = {"id": task_id, "routine": routine, "dtype": "float64", "n": n,
         "devices": 1 if impl in (NATIVE, NATIVE_INV) else 2, "impl": impl,
         "status": status}
    if status in ("ok", "failed"):
        r.update(median_ms=10.0, min_ms=9.0, times_ms=[10.0], residual=1e-16, tolerance=1e-12)
    return {**r, **extra}


def write_run(path, results, settings=SETTINGS):
    path.write_text(json.dumps({"date": "2026-11-30T00:00:00", "command": ["benchmark.py"],
                                "git": {"commit": "abc"}, "elapsed_s": 5.0,
                                "settings": settings, "results": results}))


def two_devices():
    if len(jax.devices()) < 2:
        pytest.skip("needs 2 devices (XLA_FLAGS=--xla_force_host_platform_device_count=2)")
    return jax.devices()[:2]


# -- the driver, on made-up records -------------------------------------------


def test_resume_keeps_finished_measurements_and_remakes_those_cut(tmp_path):
    path = tmp_path / "benchmark.json"
    write_run(path, [
        record(1),
        record(2, n=4096, status="oom", error="not attempted: A alone needs 9 GiB"),
        record(3, n=8192, status="error", error="--wall-budget ran out: not run"),
        record(4, n=16384, status="error", error="time budget ran out: worker killed"),
        record(5, routine="lu", status="error", error="ValueError: refused"),
    ])
    sittings, finished = resume.previous_run(path, SETTINGS)
    assert len(sittings) == 1 and sittings[0]["git"] == {"commit": "abc"}
    assert sorted(key[2] for key in finished) == [1024, 1024, 4096]  # the two cut ones are made again


def test_resume_refuses_a_run_measured_otherwise(tmp_path):
    path = tmp_path / "benchmark.json"
    write_run(path, [record(1)])
    with pytest.raises(SystemExit, match="tile=1024 there, 256 now"):
        resume.previous_run(path, {**SETTINGS, "tile": 256})
    with pytest.raises(SystemExit, match="JAXMg 0.0.8"):
        resume.previous_run(path, {**SETTINGS, "peer_path": "/opt/jaxmg-0.0.8"})
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="cannot read"):
        resume.previous_run(path, SETTINGS)


def test_resume_accepts_a_run_from_before_the_new_options(tmp_path):
    path = tmp_path / "benchmark.json"
    old = {k: v for k, v in SETTINGS.items() if k not in ("paired", "single_call_s")}
    write_run(path, [record(1)], settings=old)
    _, finished = resume.previous_run(path, {**SETTINGS, "paired": False, "single_call_s": None})
    assert len(finished) == 1


def test_a_missing_run_starts_afresh(tmp_path):
    assert resume.previous_run(tmp_path / "benchmark.json", SETTINGS) == ([], {})


def test_a_kept_measurement_takes_this_sittings_id():
    task = cases.Task(7, "potrs", "float64", 1024, 2, AUTO)
    kept = resume.kept_record(task, record(3, sitting=1))
    assert kept["id"] == 7 and kept["sitting"] == 1 and "grid" not in kept
    assert resume.kept_record(task, record(3))["sitting"] == 0
    assert "cond" not in kept


def test_resume_tells_conditioned_measurements_apart(tmp_path):
    path = tmp_path / "benchmark.json"
    write_run(path, [record(1, cond=1e4), record(2, cond=1e8, status="error",
                                                 error="--wall-budget ran out: not run")])
    args = options.parse_args(["--devices", "2", "--routines", "potrs", "--sizes", "1024",
                               "--dtypes", "float64", "--impls", "auto", "--conds", "1e4", "1e8",
                               "--resume", "--out", str(tmp_path)])
    steps = plan.plan_tasks(args, [(2, None)], visible=2)
    tasks = {t.id: t for *_, group in steps for t in group}
    settings = {**SETTINGS}
    sittings, kept, extra, left = resume.resume(tmp_path, steps, tasks, settings)
    assert [r["cond"] for r in kept] == [1e4] and not extra
    assert [t.cond for *_, group in left for t in group] == [1e8]  # the one cut is made again
    assert settings["known_times"] == [["potrs", "float64", AUTO, 2, None, 1e4, 1024, 0.01]]


def test_progress_line_of_a_single_paired_call_without_a_prediction():
    task = cases.Task(1, "syevd", "float64", 32768, 1, AUTO)
    line = report.progress_line(1, 2, task, record(1, "syevd", 32768, single_call=True, predicted_s=None,
                                                   paired_ratio=1.01, pair_ratios=[1.01]))
    assert "one call, compiling included]" in line and "ratio 1.010 over 1" in line
    line = report.progress_line(1, 2, task, record(1, "syevd", 32768, single_call=True, predicted_s=25.5))
    assert "predicted 25.5 s" in line


def test_table_marks_single_calls_and_paired_ratios():
    args = options.parse_args(["--devices", "1", "--routines", "syevd", "--sizes", "16384", "32768",
                               "--dtypes", "float64", "--impls", "auto", "native", "--paired"])
    records = [
        record(1, "syevd", 16384, paired_ratio=1.002, pair_ratios=[1.0, 1.002, 1.01]),
        record(2, "syevd", 16384, NATIVE),
        record(3, "syevd", 32768, single_call=True, paired_ratio=0.997, pair_ratios=[0.997]),
        record(4, "syevd", 32768, NATIVE, single_call=True),
    ]
    for r in records:
        r["devices"] = 1
    table, errors = report.build_table(records, [(1, None)], args)
    rows = table.splitlines()[2:]
    assert rows[0].split()[-1] == "1.002" and rows[1].split()[-1] == "0.997~"
    assert "10.0~" in rows[1] and "jaxmg (mg)" not in table and not errors
    notes = report.table_notes(records, args, errors)  # no --single-call-over in this sitting
    assert any("'~' = one call without a warm-up" in n for n in notes)
    assert any("median of the pairs' ratios" in n for n in notes)
    assert report.accuracy_table(records, [(1, None)], args) is None  # no --conds, no mixed


def test_impls_choose_the_tasks():
    args = options.parse_args(["--devices", "1", "--sizes", "64", "--dtypes", "float32",
                               "--routines", "potri", "--impls", "auto", "native-inv"])
    steps = plan.plan_tasks(args, [(1, None)], visible=1)
    assert [t.impl for *_, group in steps for t in group] == [AUTO, NATIVE_INV]
    mp = options.parse_args(["--impls", "mp"])
    assert mp.mp and mp.impls == [MP]
    with pytest.raises(SystemExit):
        options.parse_args(["--impls", "peer"])  # needs --peer-path
    with pytest.raises(SystemExit):
        options.parse_args(["--resume"])  # needs --out


def test_conds_give_the_solves_one_row_per_condition_number_and_a_mixed_column():
    args = options.parse_args(["--devices", "2", "--sizes", "64", "--dtypes", "float64",
                               "--routines", "potrs", "lu", "potri", "--conds", "1e8", "10", "10"])
    assert args.conds == [10.0, 1e8]
    steps = plan.plan_tasks(args, [(2, None)], visible=2)
    tasks = [t for *_, group in steps for t in group]
    assert {(t.routine, t.cond) for t in tasks} == {("potrs", 10.0), ("potrs", 1e8), ("lu", 10.0),
                                                    ("lu", 1e8), ("potri", None)}
    assert {t.impl for t in tasks if t.routine == "potrs"} == {AUTO, MG, MIXED, NATIVE}
    assert MIXED not in {t.impl for t in tasks if t.routine == "potri"}
    plain = options.parse_args(["--devices", "2", "--sizes", "64", "--routines", "potrs"])
    assert MIXED not in {t.impl for *_, g in plan.plan_tasks(plain, [(2, None)], 2) for t in g}
    named = options.parse_args(["--devices", "2", "--sizes", "64", "--routines", "potrs", "--impls", "mixed"])
    assert [t.impl for *_, g in plan.plan_tasks(named, [(2, None)], 2) for t in g] == [MIXED, MIXED]
    for bad in ("0.5", "abc", "inf"):
        with pytest.raises(SystemExit):
            options.parse_args(["--conds", bad])


def test_accuracy_table_shows_backward_errors_iterations_and_fallbacks():
    args = options.parse_args(["--devices", "2", "--sizes", "1024", "--dtypes", "float64",
                               "--routines", "potrs", "lu", "--conds", "1e4", "--impls", "auto", "mixed",
                               "native"])
    records = [
        record(1, cond=1e4, backward_error=2.5e-17),
        record(2, impl=MIXED, cond=1e4, backward_error=3.1e-17, iterations=3, fallback=False),
        record(3, impl=NATIVE, cond=1e4, backward_error=4.0e-17),
        record(4, "lu", impl=MIXED, cond=1e4, status="skipped", attempted=False,
               error="jaxmg.solve does not take precision=\"mixed\", return_info=True: TypeError: x"),
        record(5, "lu", impl=NATIVE, cond=1e4, backward_error=None),
    ]
    text = report.accuracy_table(records, [(2, None)], args)
    rows = [line.split() for line in text.splitlines()[2:]]
    assert rows[0][:4] == ["potrs", "float64", "1024", "1e4"]
    assert rows[0][5:] == ["2.5e-17", "3.1e-17", "4.0e-17", "3", "no"]
    assert rows[1][5:] == ["-", "skip", "NaN", "-", "-"]
    table, _ = report.build_table(records, [(2, None)], args)
    assert table.splitlines()[0].split()[:6] == ["routine", "dtype", "N", "cond", "dev", "jaxmg"]
    notes = report.table_notes(records, args, [])
    assert any(n.startswith("skip in jaxmg (mixed): jaxmg.solve does not take") for n in notes)
    line = report.progress_line(1, 1, cases.Task(2, "potrs", "float64", 1024, 2, MIXED, cond=1e4), records[1])
    assert "cond=1e4" in line and "[backward error 3.1e-17]" in line and "[iterations 3, fallback no]" in line


def test_single_call_prediction_from_the_previous_size():
    settings = {**SETTINGS, "repeats": 5, "single_call_s": 10.0,
                "known_times": [["syevd", "float64", AUTO, 2, None, 1024, 2.0]]}
    b = timing.CallPlanner(settings)
    task = lambda n: cases.Task(1, "syevd", "float64", n, 2, AUTO)  # noqa: E731
    assert b.calls_for(task(1024)) == (5, True, None)  # nothing smaller known
    assert b.calls_for(task(2048)) == (1, False, 16.0)  # 2 s x 2^3 > 10 s: once, cold
    b.remember(task(2048), record(1, "syevd", 2048, median_ms=1000.0))
    assert b.calls_for(task(2560)) == (5, True, pytest.approx(1.953125))  # from 2048 now
    b.remember(task(4096), record(1, "syevd", 4096, status="error", median_ms=None))
    assert b.calls_for(task(8192))[2] == pytest.approx(64.0)  # from 2048: the error is not remembered


def test_extras_fold_into_the_worst_error_the_most_iterations_and_any_fallback():
    folded = timing.fold_extras([
        {"backward_error": 1e-17, "iterations": 2, "fallback": False, "solver_info": 0,
         "reported_backward_error": 2e-17},
        {"backward_error": 3e-17, "iterations": 5, "fallback": True, "solver_info": 0,
         "reported_backward_error": 1e-17},
    ])
    assert folded == {"backward_error": 3e-17, "reported_backward_error": 2e-17, "iterations": 5,
                      "iterations_per_call": [2, 5], "fallback": True}
    assert timing.fold_extras([{"backward_error": 1e-17}, {"backward_error": float("nan")}]) == {
        "backward_error": None}
    assert timing.fold_extras([]) == {}


def test_an_unsupported_call_is_recorded_as_skipped_with_its_reason():
    result = error_result(Unsupported("jaxmg.solve does not take precision=\"mixed\""))
    assert result == {"status": "skipped", "attempted": False,
                      "error": "jaxmg.solve does not take precision=\"mixed\""}
    assert error_result(RuntimeError("RESOURCE_EXHAUSTED: 8 GiB"))["status"] == "oom"


# -- on the devices -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["spd", "general"])
@pytest.mark.parametrize("cond", [10.0, 1e4, 1e6, 1e8])
def test_conditioned_matrices_have_the_prescribed_condition_number(kind, cond):
    n = 96
    a = np.asarray(jax.jit(lambda s: matrices.conditioned(n, "float64", kind, cond, s))(5))
    s = np.linalg.svd(a, compute_uv=False)
    want = np.asarray(matrices.singular_values(n, cond))
    np.testing.assert_allclose(s, want, rtol=1e-6)  # singular values 1 .. 1/cond, geometric
    assert np.linalg.cond(a, 2) == pytest.approx(cond, rel=1e-6)
    if kind == "spd":
        assert np.array_equal(a, a.T)
        assert np.linalg.eigvalsh(a).min() > 0
    else:
        assert np.abs(a - a.T).max() > 1e-3  # not symmetric
        assert (np.linalg.eigvals(a).real < 0).any()  # and not positive definite
    off_diagonal = np.abs(a - np.diag(np.diag(a)))
    assert (np.abs(a) > 1e-6).mean() > 0.99  # dense ...
    assert off_diagonal.sum(axis=1).mean() > np.abs(np.diag(a)).mean()  # ... and far from diagonal
    other = np.asarray(jax.jit(lambda s: matrices.conditioned(n, "float64", kind, cond, s))(6))
    assert not np.allclose(a, other)  # the seed matters


def test_conditioned_matrices_built_where_they_live():
    devices = two_devices()
    n = 64
    whole = np.asarray(jax.jit(lambda: matrices.conditioned(n, "float64", "general", 1e6, 3))())
    for mesh, spec in ((Mesh(np.array(devices), ("x",)), P("x", None)),
                       (Mesh(np.array(devices).reshape(1, 2), ("r", "c")), P("r", "c"))):
        sharding = NamedSharding(mesh, spec)
        a = jax.jit(lambda: matrices.conditioned(n, "float64", "general", 1e6, 3), out_shardings=sharding)()
        assert a.sharding == sharding
        np.testing.assert_allclose(np.asarray(a), whole, rtol=0, atol=1e-15)
    f32 = np.asarray(jax.jit(lambda: matrices.conditioned(n, "float32", "spd", 1e4, 3))())
    assert f32.dtype == np.float32 and np.linalg.cond(f32.astype(np.float64)) == pytest.approx(1e4, rel=1e-3)


def test_conditioned_matrices_refuse_bad_arguments():
    with pytest.raises(ValueError, match="at least 1"):
        matrices.conditioned(8, "float64", "spd", 0.5, 0)
    with pytest.raises(ValueError, match="'spd' or 'general'"):
        matrices.conditioned(8, "float64", "wigner", 10.0, 0)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            matrices.conditioned(8, "float32", "spd", 10.0, 0)
        with pytest.raises(ValueError, match="jax_enable_x64"):
            checks.backward_error(jnp.eye(2, dtype=jnp.float32), np.ones((2, 1)), np.ones((2, 1)))
    finally:
        jax.config.update("jax_enable_x64", True)


def reference_backward_error(a, b, x):
    a, b, x = (np.asarray(v, np.float64) for v in (a, b, x))
    r = np.abs(b - a @ x).max(axis=0)
    return (r / (np.abs(a).sum(axis=1).max() * np.abs(x).max(axis=0) + np.abs(b).max(axis=0))).max()


def test_backward_error_against_numpy_on_sharded_matrices():
    devices = two_devices()
    rng = np.random.default_rng(0)
    n = 48
    a_host = rng.standard_normal((n, n))
    b = rng.standard_normal((n, 2))
    x = np.linalg.solve(a_host, b) + 1e-6 * rng.standard_normal((n, 2))
    want = reference_backward_error(a_host, b, x)
    assert want > 1e-9  # the perturbation shows
    for mesh, spec in ((Mesh(np.array(devices), ("x",)), P("x", None)),
                       (Mesh(np.array(devices).reshape(1, 2), ("r", "c")), P("r", "c")),
                       (Mesh(np.array(devices).reshape(2, 1), ("r", "c")), P("r", "c"))):
        a = jax.device_put(a_host, NamedSharding(mesh, spec))
        assert checks.backward_error(a, b, x) == pytest.approx(want, rel=1e-12)
    nan = x.copy()
    nan[3, 1] = np.nan
    assert np.isnan(checks.backward_error(jnp.asarray(a_host), b, nan))


def test_backward_error_is_computed_in_float64_for_a_float32_matrix():
    rng = np.random.default_rng(1)
    n = 64
    a32 = rng.standard_normal((n, n)).astype(np.float32)
    b32 = rng.standard_normal((n, 1)).astype(np.float32)
    x = np.linalg.solve(a32.astype(np.float64), b32.astype(np.float64))  # to float64 accuracy
    got = checks.backward_error(jnp.asarray(a32), b32, x)
    assert got == pytest.approx(reference_backward_error(a32, b32, x), rel=1e-10)
    assert got < 1e-14  # a float32 product would leave ~1e-7


def test_a_backward_stable_solve_has_a_small_backward_error_at_any_condition_number():
    n = 64
    a = jax.jit(lambda: matrices.conditioned(n, "float64", "general", 1e8, 9))()
    b = np.random.default_rng(2).standard_normal((n, 1))
    x = np.linalg.solve(np.asarray(a), b)
    assert np.abs(x).max() > 1e4 * np.abs(b).max()  # the forward error may be large ...
    assert checks.backward_error(a, b, x) < 10 * np.finfo(np.float64).eps  # ... the backward error not
    nudged = x + 1e-6 * np.abs(x).max() * np.random.default_rng(3).standard_normal(x.shape)
    assert checks.backward_error(a, b, nudged) > 1e-9


def measured(task, routine_inputs):
    settings = {**SETTINGS, "repeats": 2, "paired": False, "single_call_s": None}
    return Worker(settings, jaxmg).run_task(task, routine_inputs, len(routine_inputs))


@pytest.mark.parametrize("routine", ["potrs", "lu"])
def test_solves_at_a_prescribed_condition_number_record_their_backward_error(routine):
    devices = two_devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("x",)), P("x", None))
    inputs = Inputs(routine, 64, "float64", sharding, 2, cond=1e6)
    eps = np.finfo(np.float64).eps
    for impl in (AUTO, NATIVE):
        result = measured(cases.Task(1, routine, "float64", 64, 1 if impl == NATIVE else 2, impl, cond=1e6),
                          inputs)
        assert result["status"] == "ok" and result["repeats_done"] == 2
        assert 0 < result["backward_error"] < 100 * eps
        assert "iterations" not in result  # an FP64 solver does not refine
    plain = Inputs(routine, 64, "float64", sharding, 1)
    assert "backward_error" not in measured(cases.Task(1, routine, "float64", 64, 2, AUTO), plain)


def test_mixed_skips_while_jaxmg_solve_has_no_precision_option():
    devices = two_devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("x",)), P("x", None))
    inputs = Inputs("potrs", 64, "float64", sharding, 2, cond=1e4)
    task = cases.Task(1, "potrs", "float64", 64, 2, MIXED, cond=1e4)
    result = measured(task, inputs)
    if "precision" not in inspect.signature(jaxmg.solve).parameters:
        assert result["status"] == "skipped" and result["attempted"] is False
        assert result["error"].startswith("jaxmg.solve does not take precision=\"mixed\", return_info=True: "
                                          "TypeError")
        assert "median_ms" not in result  # nothing timed, nothing made up
    else:  # the mixed-precision solve exists: its figures are recorded
        assert result["status"] == "ok"
        assert result["backward_error"] < 100 * np.finfo(np.float64).eps
        assert isinstance(result["iterations"], int) and isinstance(result["fallback"], bool)


def test_mixed_lets_other_errors_through():
    class Library:
        @staticmethod
        def solve(a, b, **kw):
            raise ValueError("jaxmg: b must have as many rows as a")

    devices = two_devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("x",)), P("x", None))
    inputs = Inputs("potrs", 16, "float64", sharding, 1)
    impl = impls.mixed(cases.Task(1, "potrs", "float64", 16, 2, MIXED), inputs, SETTINGS, Library)
    with pytest.raises(ValueError, match="as many rows"):
        impl.call(*inputs[0])
    Library.solve = staticmethod(lambda a, b, **kw: (_ for _ in ()).throw(
        TypeError("solve() got an unexpected keyword argument 'return_info'")))
    with pytest.raises(Unsupported, match="return_info"):
        impl.call(*inputs[0])
