"""--largest: per dtype, the largest N at which jaxmg (mg) potrs runs on the most
devices, searched by doubling and then bisecting, one cold call per trial."""

from __future__ import annotations

import argparse
import itertools
import pathlib
import time
from typing import Any

from .cases import ITEMSIZE, MG, Task, record_key, unit_name
from .machine import too_big
from .runner import run_worker, worker_env

LARGEST_STEP = 8192  # the search bisects N in steps of this


def find_largest(args: argparse.Namespace, info: dict[str, Any], units: list[tuple[int, str | None]],
                 records: list[dict[str, Any]], settings: dict[str, Any],
                 out: pathlib.Path) -> list[dict[str, Any]]:
    """--largest: per dtype, the largest N at which jaxmg (mg) potrs runs on the most devices.

    From the largest --sizes value, N doubles until a call fails (out of memory, or any
    other error), then the gap is bisected in steps of LARGEST_STEP; a size the table
    measured (it ran, or ran out of memory) is taken from there. Each other trial is one
    call (no warm-up, so its time includes compiling) in a fresh worker; trials whose A
    alone cannot fit are not run. The dtypes share --largest-budget seconds; a trial
    still running when its share is spent is killed, and the search reports what it
    found so far. With --grids: on the first grid of the most devices. It reports the
    fraction of memory the largest A takes: N^2 * itemsize over the devices' total
    memory (nvidia-smi; host memory on CPU) and over JAX's pool."""
    d = max(u[0] for u in units)
    grid = next(g for u, g in units if u == d)
    on_cpu = info["platform"] == "cpu"
    pool = info["device_memory_bytes"][0] if on_cpu else sum(info["device_memory_bytes"][:d])
    totals = info.get("device_total_bytes")
    physical = pool if on_cpu else (sum(totals[:d]) if totals else None)
    by_key = {record_key(r): r for r in records}
    ids = itertools.count(max([r["id"] for r in records], default=0) + 1)
    env = worker_env("ours", d, info, args.mem_fraction)
    trial_settings = {**settings, "repeats": 1, "warmup": False}
    end = time.monotonic() + args.largest_budget
    found = []
    for index, dtype in enumerate(args.dtypes):
        share_end = time.monotonic() + max(0.0, end - time.monotonic()) / (len(args.dtypes) - index)
        itemsize = ITEMSIZE[dtype]
        trials: list[dict[str, Any]] = []

        def trial(n: int) -> str:
            """Runs potrs at n: "ok", "fail" (OOM or another error) or "budget"."""
            entry: dict[str, Any] = {"n": n, "matrix_bytes": n * n * itemsize}
            reason = too_big(n, itemsize, pool, on_cpu)  # as the worker would decide
            known = by_key.get(("potrs", dtype, n, d, MG, grid, None))
            if known and (known["status"] == "ok" or (known["status"] == "oom"
                                                      and known.get("attempted", True))):
                entry.update(from_table=True, **{k: known[k] for k in (
                    "status", "median_ms", "residual", "error") if known.get(k) is not None})
                trials.append(entry)
                return "ok" if known["status"] == "ok" else "fail"
            if reason:
                entry.update(status="oom", attempted=False, error=reason)
            elif time.monotonic() >= share_end:
                return "budget"
            else:
                task = Task(next(ids), "potrs", dtype, n, d, MG, grid)
                result: dict[str, Any] = {"status": "error", "error": "no result"}
                started = time.monotonic()
                for event in run_worker("ours", [task], trial_settings, env,
                                        out / "logs" / f"largest-{unit_name(d, grid)}.log", args.task_timeout,
                                        deadline=share_end):
                    if event["event"] == "result":
                        result = event
                entry["wall_s"] = round(time.monotonic() - started, 1)
                entry["status"] = result["status"]
                for key in ("median_ms", "residual", "error", "note", "engine", "tile", "attempted"):
                    if result.get(key) is not None:
                        entry[key] = result[key]
                if "time budget ran out" in str(result.get("error")):
                    entry["status"] = "budget"
            trials.append(entry)
            line = f"--largest {dtype} N={n} devices={d}" + (f" grid={grid}: " if grid else ": ")
            if entry["status"] == "ok":
                line += f"ran, first call {entry['median_ms'] / 1e3:.1f} s (incl. compile)"
            else:
                line += f"{entry['status']}: {entry.get('error') or entry.get('note')}"
            print(line, flush=True)
            return {"ok": "ok", "budget": "budget"}.get(entry["status"], "fail")

        lo, hi, stopped = 0, None, None
        first = max(args.sizes)
        outcome = trial(first)  # from the table when it was measured there
        if outcome == "ok":
            lo = first
        elif outcome == "fail":
            hi = first
        else:
            stopped = "budget"
        while stopped is None and hi is None:
            outcome = trial(2 * lo)
            if outcome == "ok":
                lo *= 2
            elif outcome == "fail":
                hi = 2 * lo
            else:
                stopped = "budget"
        while stopped is None and hi - lo > LARGEST_STEP:
            mid = (lo + hi) // 2 // LARGEST_STEP * LARGEST_STEP
            mid = mid if mid > lo else lo + LARGEST_STEP
            if mid >= hi:
                break
            outcome = trial(mid)
            if outcome == "ok":
                lo = mid
            elif outcome == "fail":
                hi = mid
            else:
                stopped = "budget"
        best = next((t for t in trials if t["n"] == lo and t["status"] == "ok"), None)
        bound = next((t for t in trials if t["n"] == hi), None) if hi is not None else None
        matrix = lo * lo * itemsize
        found.append({
            "dtype": dtype, "devices": d, **({"grid": grid} if grid else {}), "impl": MG,
            "largest_n": lo or None,
            "matrix_bytes": matrix,
            "fraction_of_total_memory": matrix / physical if physical else None,
            "fraction_of_jax_pool": matrix / pool,
            "total_memory_bytes": physical, "jax_pool_bytes": pool,
            "time_ms": best.get("median_ms") if best else None,
            "time_from_table": bool(best and best.get("from_table")),
            "smallest_failing_n": hi,
            "failure": (bound or {}).get("error") or (bound or {}).get("note"),
            "failure_status": (bound or {}).get("status"),
            "complete": stopped is None, "trials": trials,
        })
    return found
