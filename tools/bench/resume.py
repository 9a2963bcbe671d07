"""--resume: one run spread over several sittings (a device lent for a few
minutes at a time). The measurements already in <out>/benchmark.json are kept,
those cut by a time budget are made again with the rest, and each record says
which sitting made it. A run made with settings that change what is measured
is refused rather than mixed."""

from __future__ import annotations

import itertools
import pathlib
import sys
from typing import Any

from .cases import Task, record_key, task_record
from .errors import short_error

RESUME_SETTINGS = ("tile", "mp", "mp_tile", "mem_fraction", "donate", "paired", "peer_path")


def cut_by_budget(record: dict[str, Any]) -> bool:
    """Not made, or cut, because a time budget ran out: --resume makes it again."""
    return record.get("status") == "error" and "budget ran out" in str(record.get("error"))


def previous_run(path: pathlib.Path, settings: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[tuple, dict]]:
    """The earlier sittings of the run in `path` and its finished measurements
    by record_key (those cut by a time budget are made again). Exits if the run's
    settings differ from this one's where they change what is measured."""
    import json

    if not path.is_file():
        print(f"--resume: no {path} yet: starting the run", flush=True)
        return [], {}
    try:
        report = json.loads(path.read_text())
        old = report["settings"]
        results = report["results"]
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"--resume: cannot read {path} ({short_error(exc)}); give a new --out")
    # Unset, False and None alike: a JSON from before an option existed did not use it.
    differ = [f"{k}={old.get(k)!r} there, {settings.get(k)!r} now" for k in RESUME_SETTINGS
              if k != "peer_path" and (old.get(k) or None) != (settings.get(k) or None)]
    if bool(old.get("peer_path")) != bool(settings.get("peer_path")):
        differ.append("JAXMg 0.0.8 (--peer-path) in one sitting only")
    if differ:
        sys.exit(f"--resume: {path} was measured with other settings ({'; '.join(differ)}); "
                 "rerun with those, or give a new --out")
    sittings = report.get("sittings") or [{k: report.get(k) for k in ("date", "command", "git", "elapsed_s")}]
    finished = {record_key(r): r for r in results if not cut_by_budget(r)}
    return sittings, finished


def kept_record(task: Task, earlier: dict[str, Any]) -> dict[str, Any]:
    """An earlier sitting's measurement under this sitting's task id."""
    record = {**earlier, **task_record(task)}
    record.setdefault("sitting", 0)
    return record


def known_times(records: list[dict[str, Any]]) -> list[list]:
    """The medians that --single-call-over predicts from, as the workers read them:
    [routine, dtype, impl, devices, grid, cond, n, seconds]."""
    return [[r["routine"], r["dtype"], r["impl"], r["devices"], r.get("grid"), r.get("cond"),
             r["n"], r["median_ms"] / 1e3]
            for r in records if r.get("status") in ("ok", "failed") and r.get("median_ms")]


def resume(out: pathlib.Path, plan: list, tasks: dict[int, Task], settings: dict[str, Any]):
    """(sittings, kept records, records of the run this sitting does not plan, the
    plan left to run), and settings["known_times"] filled from the kept records."""
    path = out / "benchmark.json"
    sittings, earlier = previous_run(path, settings)
    records = []
    for task in tasks.values():
        key = record_key(task_record(task))
        if key in earlier:
            records.append(kept_record(task, earlier[key]))
    kept = {r["id"] for r in records}
    planned = {record_key(task_record(t)) for t in tasks.values()}
    ids = itertools.count(max(tasks, default=0) + 1)
    # Measurements of the run that this sitting does not plan stay in its JSON.
    extra = [{**r, "id": next(ids)} for key, r in earlier.items() if key not in planned]
    plan = [(kind, d, grid, [t for t in group if t.id not in kept]) for kind, d, grid, group in plan]
    plan = [step for step in plan if step[3]]
    settings["known_times"] = known_times(records)
    print(f"--resume: {len(kept)} of {len(tasks)} measurements kept from {len(sittings)} earlier "
          f"sitting(s) in {path}", flush=True)
    return sittings, records, extra, plan
