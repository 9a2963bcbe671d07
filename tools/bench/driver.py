"""The benchmark's main program: probes the machine, plans the measurements,
runs the workers, and prints and writes the results (see docs/benchmarks.md)."""

from __future__ import annotations

import datetime
import math
import pathlib
import sys
import tempfile
import time
from typing import Any

from . import report
from .cases import OVERHEAD_N, grid_shape, task_record, unit_name
from .largest import find_largest
from .options import parse_args, settings_of
from .plan import plan_tasks
from .resume import cut_by_budget, resume
from .runner import probe_machine, run_worker, worker_env


def device_units(args, visible: int) -> tuple[list[tuple[int, str | None]], str]:
    """(device count, grid) per --devices count or --grids grid, and how to say so."""
    if args.grids:
        units = [(math.prod(grid_shape(g)), g) for g in args.grids]
        where = f"grids {' '.join(args.grids)}"
        if any(d > visible for d, _ in units):
            where += f" ({', '.join(g for d, g in units if d > visible)} skipped: too few devices)"
        return units, where
    device_counts = sorted(set(args.devices or [visible]))
    if any(d > visible or d < 1 for d in device_counts):
        print(f"note: only {visible} device(s) visible; dropping --devices "
              f"{[d for d in device_counts if d > visible or d < 1]}", flush=True)
        device_counts = [d for d in device_counts if 1 <= d <= visible] or [visible]
    return [(d, None) for d in device_counts], f"devices {device_counts}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = datetime.datetime.now()
    if args.per_call_overhead and OVERHEAD_N not in args.sizes:
        args.sizes = sorted(args.sizes + [OVERHEAD_N])
        print(f"--per-call-overhead: added N={OVERHEAD_N} to the sizes", flush=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="jaxmg-bench-"))
    info = probe_machine(scratch / "probe.log", args.mem_fraction)
    out = args.out or pathlib.Path(tempfile.gettempdir()) / "jaxmg-bench" / f"{started:%Y-%m-%d}-{info['platform']}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    (scratch / "probe.log").replace(out / "logs" / "probe.log")
    scratch.rmdir()

    visible = info["device_count"]
    units, where = device_units(args, visible)
    runnable = [u for u in units if u[0] <= visible]
    print(f"{visible} x {info['device_kinds'][0]} ({info['platform']}), jax {info['jax_version']}; "
          f"{where}; output {out}", flush=True)

    settings = settings_of(args)
    plan = plan_tasks(args, units, visible)
    tasks = {t.id: t for *_, group in plan for t in group}
    records: list[dict[str, Any]] = []
    sittings: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    if args.resume:
        sittings, records, extra, plan = resume(out, plan, tasks, settings)
    total, done = len(tasks) - len(records), 0
    libraries: dict[str, Any] = {}
    deadline = time.monotonic() + args.wall_budget if args.wall_budget else None
    for kind, d, grid, group in plan:
        env = worker_env(kind, d, info, args.mem_fraction)
        if d > visible:
            events = ({"event": "result", "id": t.id, "status": "skipped", "attempted": False,
                       "error": f"not attempted: grid {grid} needs {d} devices, {visible} visible"}
                      for t in group)
        elif deadline is not None and time.monotonic() >= deadline:
            events = ({"event": "result", "id": t.id, "status": "error",
                       "error": "--wall-budget ran out: not run"} for t in group)
        else:
            events = run_worker(kind, group, settings, env, out / "logs" / f"{kind}-{unit_name(d, grid)}.log",
                                args.task_timeout, deadline=deadline)
        for event in events:
            if event["event"] == "library":
                libraries[kind] = {"file": event["file"], "version": event["version"]}
            if event["event"] != "result":
                continue
            done += 1
            task = tasks[event["id"]]
            record = {**task_record(task), **{k: v for k, v in event.items() if k != "event"}}
            if args.resume:
                record["sitting"] = len(sittings)
            records.append(record)
            print(report.progress_line(done, total, task, record), flush=True)

    records += extra
    records.sort(key=lambda r: r["id"])
    table, errors = report.build_table(records, units, args)
    notes = report.table_notes(records, args, errors)
    print("\n" + table + "\n")
    for note in notes:
        print(note)
    accuracy = report.accuracy_table(records, units, args)
    if accuracy:
        print("\n" + accuracy + "\n")
        for note in report.accuracy_notes():
            print(note)
    if args.per_call_overhead:
        print("\n" + "\n".join(report.overhead_lines(records, units, args)))
    largest: list[dict[str, Any]] = []
    if args.largest and not runnable:
        print("\n--largest: no grid fits the visible devices: no search", flush=True)
    elif args.largest:
        print(f"\n--largest: searching for up to {args.largest_budget:.0f} s", flush=True)
        largest = find_largest(args, info, runnable, records, settings, out)
        print("\n" + "\n".join(report.largest_lines(largest, args, info["platform"] == "cpu")))

    elapsed = round((datetime.datetime.now() - started).total_seconds(), 1)
    command = [sys.executable] + sys.argv
    if args.resume:
        sittings.append({"date": started.isoformat(timespec="seconds"), "command": command,
                         "git": report.git_commit(), "device_kinds": info.get("device_kinds"), "elapsed_s": elapsed,
                         "measured": sum(1 for r in records
                                         if r.get("sitting") == len(sittings) and not cut_by_budget(r))})
    results = {
        "date": (sittings[0]["date"] if sittings else started.isoformat(timespec="seconds")),
        "command": command,
        "machine": info,
        "git": report.git_commit(),
        "libraries": libraries,
        "settings": {**{k: v for k, v in settings.items() if k != "known_times"}, "routines": args.routines,
                     "sizes": args.sizes, "dtypes": args.dtypes, "devices": [d for d, _ in units],
                     **({"grids": args.grids} if args.grids else {}),
                     **({"conds": args.conds} if args.conds else {}),
                     "tolerance": "100 * sqrt(N) * eps"},
        "results": records,
        "largest": largest or None,
        "table": table.splitlines(),
        "notes": notes,
        **({"accuracy_table": accuracy.splitlines()} if accuracy else {}),
        "elapsed_s": elapsed if not sittings else round(sum(x["elapsed_s"] for x in sittings), 1),
        **({"sittings": sittings} if sittings else {}),
    }
    report.write_json(out / "benchmark.json", results)
    print(f"\nresults written to {out / 'benchmark.json'}")
    print(report.plot(records, args, out / "benchmark.png"))
