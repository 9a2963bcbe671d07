"""tools/benchmark.py's driver: resuming a run over several sittings, paired and
single-call records in its progress lines and table, --impls. The records are
made up here: no workers run."""

import importlib.util
import json
import pathlib
import sys

import pytest

_PATH = pathlib.Path(__file__).parent.parent / "tools" / "benchmark.py"
_spec = importlib.util.spec_from_file_location("jaxmg_benchmark_tool", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up
_spec.loader.exec_module(bench)

SETTINGS = {"tile": 1024, "mp": False, "mp_tile": None, "repeats": 3, "budget_s": 4.0,
            "peer_path": None, "mem_fraction": None, "donate": False, "paired": True,
            "single_call_s": 20.0}


def record(task_id, routine="potrs", n=1024, impl=bench.AUTO, status="ok", **extra):
    r = {"id": task_id, "routine": routine, "dtype": "float64", "n": n,
         "devices": 1 if impl in (bench.NATIVE, bench.NATIVE_INV) else 2, "impl": impl,
         "status": status}
    if status in ("ok", "failed"):
        r.update(median_ms=10.0, min_ms=9.0, times_ms=[10.0], residual=1e-16, tolerance=1e-12)
    return {**r, **extra}


def write_run(path, results, settings=SETTINGS):
    path.write_text(json.dumps({"date": "2026-11-30T00:00:00", "command": ["benchmark.py"],
                                "git": {"commit": "abc"}, "elapsed_s": 5.0,
                                "settings": settings, "results": results}))


def test_resume_keeps_finished_measurements_and_remakes_those_cut(tmp_path):
    path = tmp_path / "benchmark.json"
    write_run(path, [
        record(1),
        record(2, n=4096, status="oom", error="not attempted: A alone needs 9 GiB"),
        record(3, n=8192, status="error", error="--wall-budget ran out: not run"),
        record(4, n=16384, status="error", error="time budget ran out: worker killed"),
        record(5, routine="lu", status="error", error="ValueError: refused"),
    ])
    sittings, finished = bench.previous_run(path, SETTINGS)
    assert len(sittings) == 1 and sittings[0]["git"] == {"commit": "abc"}
    assert sorted(key[2] for key in finished) == [1024, 1024, 4096]  # the two cut ones are made again


def test_resume_refuses_a_run_measured_otherwise(tmp_path):
    path = tmp_path / "benchmark.json"
    write_run(path, [record(1)])
    with pytest.raises(SystemExit, match="tile=1024 there, 256 now"):
        bench.previous_run(path, {**SETTINGS, "tile": 256})
    with pytest.raises(SystemExit, match="JAXMg 0.0.8"):
        bench.previous_run(path, {**SETTINGS, "peer_path": "/opt/jaxmg-0.0.8"})
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="cannot read"):
        bench.previous_run(path, SETTINGS)


def test_resume_accepts_a_run_from_before_the_new_options(tmp_path):
    path = tmp_path / "benchmark.json"
    old = {k: v for k, v in SETTINGS.items() if k not in ("paired", "single_call_s")}
    write_run(path, [record(1)], settings=old)
    _, finished = bench.previous_run(path, {**SETTINGS, "paired": False, "single_call_s": None})
    assert len(finished) == 1


def test_a_missing_run_starts_afresh(tmp_path):
    assert bench.previous_run(tmp_path / "benchmark.json", SETTINGS) == ([], {})


def test_a_kept_measurement_takes_this_sittings_id():
    task = bench.Task(7, "potrs", "float64", 1024, 2, bench.AUTO)
    kept = bench.kept_record(task, record(3, sitting=1))
    assert kept["id"] == 7 and kept["sitting"] == 1 and "grid" not in kept
    assert bench.kept_record(task, record(3))["sitting"] == 0


def test_progress_line_of_a_single_paired_call_without_a_prediction():
    task = bench.Task(1, "syevd", "float64", 32768, 1, bench.AUTO)
    line = bench.progress_line(1, 2, task, record(1, "syevd", 32768, single_call=True, predicted_s=None,
                                                  paired_ratio=1.01, pair_ratios=[1.01]))
    assert "one call, compiling included]" in line and "ratio 1.010 over 1" in line
    line = bench.progress_line(1, 2, task, record(1, "syevd", 32768, single_call=True, predicted_s=25.5))
    assert "predicted 25.5 s" in line


def test_table_marks_single_calls_and_paired_ratios():
    args = bench.parse_args(["--devices", "1", "--routines", "syevd", "--sizes", "16384", "32768",
                             "--dtypes", "float64", "--impls", "auto", "native", "--paired"])
    records = [
        record(1, "syevd", 16384, paired_ratio=1.002, pair_ratios=[1.0, 1.002, 1.01]),
        record(2, "syevd", 16384, bench.NATIVE),
        record(3, "syevd", 32768, single_call=True, paired_ratio=0.997, pair_ratios=[0.997]),
        record(4, "syevd", 32768, bench.NATIVE, single_call=True),
    ]
    for r in records:
        r["devices"] = 1
    table, errors = bench.build_table(records, [(1, None)], args)
    rows = table.splitlines()[2:]
    assert rows[0].split()[-1] == "1.002" and rows[1].split()[-1] == "0.997~"
    assert "10.0~" in rows[1] and "jaxmg (mg)" not in table and not errors
    notes = bench.table_notes(records, args, errors)  # no --single-call-over in this sitting
    assert any("'~' = one call without a warm-up" in n for n in notes)
    assert any("median of the pairs' ratios" in n for n in notes)


def test_impls_choose_the_tasks():
    args = bench.parse_args(["--devices", "1", "--sizes", "64", "--dtypes", "float32",
                             "--routines", "potri", "--impls", "auto", "native-inv"])
    plan = bench.plan_tasks(args, [(1, None)], visible=1)
    assert [t.impl for *_, group in plan for t in group] == [bench.AUTO, bench.NATIVE_INV]
    mp = bench.parse_args(["--impls", "mp"])
    assert mp.mp and mp.impls == [bench.MP]
    with pytest.raises(SystemExit):
        bench.parse_args(["--impls", "peer"])  # needs --peer-path
    with pytest.raises(SystemExit):
        bench.parse_args(["--resume"])  # needs --out


def test_single_call_prediction_from_the_previous_size():
    settings = {**SETTINGS, "repeats": 5, "single_call_s": 10.0,
                "known_times": [["syevd", "float64", bench.AUTO, 2, None, 1024, 2.0]]}
    b = bench.Bench(settings, lib=None)
    task = lambda n: bench.Task(1, "syevd", "float64", n, 2, bench.AUTO)  # noqa: E731
    assert b.calls_for(task(1024)) == (5, True, None)  # nothing smaller known
    assert b.calls_for(task(2048)) == (1, False, 16.0)  # 2 s x 2^3 > 10 s: once, cold
    b.remember(task(2048), record(1, "syevd", 2048, median_ms=1000.0))
    assert b.calls_for(task(2560)) == (5, True, pytest.approx(1.953125))  # from 2048 now
    b.remember(task(4096), record(1, "syevd", 4096, status="error", median_ms=None))
    assert b.calls_for(task(8192))[2] == pytest.approx(64.0)  # from 2048: the error is not remembered
