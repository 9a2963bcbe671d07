"""What a run prints and writes: a progress line per measurement, the table of
median times with its notes, the accuracy table of the solves at prescribed
condition numbers, the per-call overhead and largest-N lines, benchmark.json and
the plot benchmark.png."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import pathlib
import statistics
import subprocess
from typing import Any

from . import REPO_ROOT
from .cases import (AUTO, CONDITIONED_ROUTINES, MG, MG_JIT, MIXED, MP, NATIVE, NATIVE_INV, OVERHEAD_N,
                    ONE_DEVICE_IMPLS, PEER, TABLE_IMPLS, Task, format_cond, record_key, routine_has)
from .largest import LARGEST_STEP
from .plan import mixed_wanted, problems, wanted


def format_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def progress_line(index: int, total: int, task: Task, record: dict[str, Any]) -> str:
    grid = f" grid={task.grid}" if task.grid else ""
    cond = f" cond={format_cond(task.cond)}" if task.cond is not None else ""
    head = (f"[{index}/{total}] {task.routine} {task.dtype} N={task.n}{cond} devices={task.devices}"
            f"{grid} {task.impl}:")
    status = record["status"]
    if status in ("error", "skipped", "oom"):
        return f"{head} {'OOM' if status == 'oom' else status}: {record.get('error')}"
    resid = record.get("residual")
    text = f"{head} {format_ms(record['median_ms'])} ms (min {format_ms(record['min_ms'])}, "
    text += f"resid {resid:.1e})" if resid is not None else "resid NaN)"
    if record.get("engine"):
        width = "block" if record["engine"] == "mp" else "tile"
        text += f" [engine {record['engine']}" + (f", {width} {record['tile']}]" if record.get("tile") else "]")
    if "copy_ms" in record:
        text += f" [+ input copy {format_ms(statistics.median(record['copy_ms']))} ms]"
    if record.get("single_call"):
        predicted = record.get("predicted_s")
        text += " [one call, compiling included" + (f": predicted {predicted:.3g} s]" if predicted else "]")
    if record.get("paired_ratio") is not None:
        text += f" [paired with jax native: ratio {record['paired_ratio']:.3f} over {len(record['pair_ratios'])}]"
    if "backward_error" in record:
        berr = record["backward_error"]
        text += f" [backward error {berr:.1e}]" if berr is not None else " [backward error NaN]"
    if "iterations" in record or "fallback" in record:
        text += (f" [iterations {record.get('iterations', '?')}, "
                 f"fallback {'yes' if record.get('fallback') else 'no'}]")
    if status == "failed":
        text += f" FAILED (tolerance {record['tolerance']:.1e})"
    if record.get("note") and "check failed" in record["note"]:
        text += f" [{record['note']}]"
    return text


def _lay_out(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first two left-aligned, the rest right."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    align = lambda cells: "  ".join(c.rjust(w) if i >= 2 else c.ljust(w)  # noqa: E731
                                    for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([align(header), "  ".join("-" * w for w in widths)] + [align(r) for r in rows])


def table_impls(args: argparse.Namespace) -> list[str]:
    return [i for i in TABLE_IMPLS
            if (i != NATIVE_INV or "potri" in args.routines) and (i != PEER or args.peer_path)
            and (i != MP or args.mp) and (i != MIXED or mixed_wanted(args)) and wanted(args, i)]


def _rows(args: argparse.Namespace, units: list[tuple[int, str | None]], routines=None):
    """(routine, dtype, n, cond, d, grid) of every row, in the table's order."""
    for (routine, dtype, n, cond), (d, grid) in itertools.product(problems(args), units):
        if routines is None or routine in routines:
            yield routine, dtype, n, cond, d, grid


def _found(by_key: dict, impls: list[str], routine, dtype, n, cond, d, grid) -> dict[str, Any]:
    found = {}
    for impl in impls:
        if impl in ONE_DEVICE_IMPLS:
            found[impl] = by_key.get((routine, dtype, n, 1, impl, None, cond))
        else:
            found[impl] = by_key.get((routine, dtype, n, d, impl, grid, cond))
    return found


def _head(args: argparse.Namespace, routine, dtype, n, cond, d, grid) -> list[str]:
    return ([routine, dtype, str(n)] + ([format_cond(cond) if cond is not None else "-"] if args.conds else [])
            + [str(d)] + ([grid] if args.grids else []))


def _head_names(args: argparse.Namespace) -> list[str]:
    return ["routine", "dtype", "N"] + (["cond"] if args.conds else []) + ["dev"] + (["grid"] if args.grids else [])


def build_table(records: list[dict[str, Any]], units: list[tuple[int, str | None]],
                args: argparse.Namespace) -> tuple[str, list[str]]:
    """The summary table and its footnotes (errors are numbered E1, E2, ...)."""
    by_key = {record_key(r): r for r in records}
    impls = table_impls(args)
    header = _head_names(args) + impls + ["auto engine", "auto/native"]
    rows, errors = [], []

    def cell(record: dict[str, Any] | None) -> str:
        if record is None:
            return "-"
        if record["status"] == "skipped":
            return "skip"
        if record["status"] == "oom":
            return "OOM"
        if record["status"] == "error":
            errors.append(record["error"])
            return f"E{len(errors)}"
        return (format_ms(record["median_ms"]) + ("~" if record.get("single_call") else "")
                + ("!" if record["status"] == "failed" else ""))

    for row in _rows(args, units):
        routine = row[0]
        found = _found(by_key, impls, *row)
        if routine != "potri":
            found.pop(NATIVE_INV, None)
        cells = {i: cell(found.get(i)) for i in impls}
        for impl in (PEER, MP, MIXED):
            if impl in cells and not routine_has(impl, routine):
                cells[impl] = "n/a"
        auto, native = found.get(AUTO), found.get(NATIVE)
        ratio = "-"
        if auto and auto.get("paired_ratio") is not None:
            ratio = f"{auto['paired_ratio']:.3f}" + ("~" if auto.get("single_call") else "")
        elif auto and native and auto.get("median_ms") and native.get("median_ms"):
            ratio = f"{auto['median_ms'] / native['median_ms']:.2f}"
        engine = (auto or {}).get("engine") or "-"
        rows.append(_head(args, *row) + [cells[i] for i in impls] + [engine, ratio])
    return _lay_out(header, rows), errors


def accuracy_table(records: list[dict[str, Any]], units: list[tuple[int, str | None]],
                   args: argparse.Namespace) -> str | None:
    """The solves' float64 backward errors per implementation, and jaxmg (mixed)'s
    refinement iterations and fallbacks; None when no record has a backward error."""
    if not any("backward_error" in r for r in records) and not mixed_wanted(args):
        return None
    by_key = {record_key(r): r for r in records}
    impls = [i for i in table_impls(args) if i != NATIVE_INV]
    header = _head_names(args) + impls + ["mixed iterations", "mixed fallback"]

    def cell(record: dict[str, Any] | None) -> str:
        if record is None:
            return "-"
        if record["status"] in ("skipped", "oom", "error"):
            return {"skipped": "skip", "oom": "OOM", "error": "error"}[record["status"]]
        berr = record.get("backward_error")
        return "-" if "backward_error" not in record else ("NaN" if berr is None else f"{berr:.1e}")

    rows = []
    for row in _rows(args, units, CONDITIONED_ROUTINES):
        found = _found(by_key, impls, *row)
        cells = [cell(found[i]) if routine_has(i, row[0]) else "n/a" for i in impls]
        mixed = found.get(MIXED) or {}
        iterations = str(mixed["iterations"]) if mixed.get("iterations") is not None else "-"
        fallback = ("yes" if mixed["fallback"] else "no") if mixed.get("fallback") is not None else "-"
        rows.append(_head(args, *row) + cells + [iterations, fallback])
    return _lay_out(header, rows) if rows else None


def table_notes(records: list[dict[str, Any]], args: argparse.Namespace, errors: list[str]) -> list[str]:
    notes = [
        "Median ms over the timed calls (min and every call in benchmark.json). '!' = FAILED: "
        "residual above 100 sqrt(N) eps or NaN. 'OOM' = ran out of memory, or was not "
        "attempted because A could not fit (the reason is in benchmark.json).",
        (f"jaxmg (auto) and (mg) get tile_size={args.tile} (capped at N/devices; LU on GPUs at 256) "
         + ("and donate=True: A is rebuilt between calls, untimed, as for JAXMg."
            if args.donate else "and do not donate a, so their time includes the copy of a the "
            "solver works in.")),
        "jax native runs on one device whatever the dev column says; its potri is "
        "cho_factor + cho_solve(A, I), jax native inv is jnp.linalg.inv. "
        "auto/native < 1: jaxmg (auto) is faster."
        + (" --paired: auto and native were called in alternation on the same input, and "
           "auto/native (3 decimals) is the median of the pairs' ratios." if args.paired else ""),
    ]
    if any(r.get("single_call") for r in records):
        notes.append("'~' = one call without a warm-up (--single-call-over: predicted from the previous N "
                     "to take longer), so its time includes compiling; a paired ratio marked '~' compares "
                     "two such calls.")
    if args.mp:
        notes.append(
            "jaxmg (mp) = backend=\"mp\" (cuSOLVERMp, CUDA GPUs only) with "
            + (f"tile_size={args.mp_tile}, an upper bound on its block"
               if args.mp_tile is not None else "no tile_size (the library's default block)")
            + (", donate=True" if args.donate else "")
            + "; its effective block is the record's \"tile\" in benchmark.json. "
            "It has no potri (n/a).")
    if args.conds:
        notes.append("cond = A's prescribed 2-norm condition number (potrs: SPD, lu: general; singular "
                     "values from 1 to 1/cond); the other routines run on their usual matrices (cond -).")
    if mixed_wanted(args):
        notes.append("jaxmg (mixed) = jaxmg.solve(a, b, assume_a=\"pos\" (potrs) or \"gen\" (lu), "
                     "precision=\"mixed\", return_info=True): a lower-precision factorisation refined "
                     "to FP64 accuracy. It has no potri or syevd (n/a).")
        reasons = sorted({r["error"] for r in records if r["impl"] == MIXED and r["status"] == "skipped"})
        if reasons:
            notes.append("skip in jaxmg (mixed): " + "; ".join(reasons))
    if args.grids:
        notes.append(
            "grid RxC: A in blocks P(\"r\", \"c\") over jax.make_mesh((R, C), (\"r\", \"c\")) of "
            "the first R*C devices (b replicated); jaxmg (mp) runs on an R x C process grid."
            + (" skip = the grid needs more devices than are visible."
               if any(r["status"] == "skipped" and r["impl"] != MIXED for r in records) else ""))
    if "lu" in args.routines:
        notes.append("lu = lu_factor + lu_solve of a non-symmetric A (jax native: "
                     "jax.scipy.linalg.lu_factor + lu_solve)"
                     + ("; JAXMg 0.0.8 has no LU (n/a)." if args.peer_path else "."))
    peer = [r for r in records if r["impl"] == PEER and "copy_ms" in r]
    if args.peer_path:
        copy = statistics.median(c for r in peer for c in r["copy_ms"]) if peer else None
        notes.append(
            "JAXMg 0.0.8 donates (deletes) its inputs: each call gets a fresh copy of a and b made "
            "before the timer starts, so its time excludes that copy"
            + (f" (copies: median {format_ms(copy)} ms over all sizes; per-size copy_ms and "
               "median_with_copy_ms in benchmark.json)." if copy is not None else "."))
    notes += [f"E{i}: {e}" for i, e in enumerate(errors, 1)]
    return notes


def accuracy_notes() -> list[str]:
    return ["Backward error = ||b - A x|| / (||A|| ||x|| + ||b||) in infinity norms, computed in "
            "float64; the worst over the timed calls. mixed iterations: the most refinement "
            "iterations of a call; mixed fallback: whether any call fell back to the FP64 "
            "factorisation (both as jaxmg.solve's info reports them)."]


def overhead_lines(records: list[dict[str, Any]], units: list[tuple[int, str | None]],
                   args: argparse.Namespace) -> list[str]:
    by_key = {record_key(r): r for r in records}
    lines = [f"Per-call overhead at N={OVERHEAD_N}: jaxmg (mg) called eagerly vs inside jax.jit "
             "(median ms)"]
    for routine, dtype, (d, grid) in itertools.product(args.routines, args.dtypes, units):
        eager = by_key.get((routine, dtype, OVERHEAD_N, d, MG, grid, None), {}).get("median_ms")
        jitted = by_key.get((routine, dtype, OVERHEAD_N, d, MG_JIT, grid, None), {}).get("median_ms")
        where = f"grid={grid}" if grid else f"dev={d}"
        if eager is None or jitted is None:
            lines.append(f"  {routine} {dtype} {where}: not measured")
            continue
        lines.append(f"  {routine} {dtype} {where}: eager {format_ms(eager)}, jit {format_ms(jitted)}, "
                     f"difference {1e3 * (eager - jitted):+.0f} us")
    return lines


def largest_lines(found: list[dict[str, Any]], args: argparse.Namespace, on_cpu: bool) -> list[str]:
    if not found:
        return []
    memory = "host memory" if on_cpu else "total GPU memory"
    grid = f" (grid {found[0]['grid']})" if found[0].get("grid") else ""
    lines = [f"Largest N for potrs, jaxmg (mg) on {found[0]['devices']} device(s){grid} (one call per "
             f"trial, steps of {LARGEST_STEP}, budget {args.largest_budget:.0f} s):"]
    for f in found:
        head = f"  {f['dtype']}: "
        if not f["largest_n"]:
            text = head + "no N ran"
            if f["smallest_failing_n"]:
                text += f" (N={f['smallest_failing_n']}: {f['failure_status']}: {f['failure']})"
            if not f["complete"]:
                text += "; search cut short by the time budget"
            lines.append(text)
            continue
        text = head + f"N={f['largest_n']} ran"
        if f["time_ms"] is not None:
            text += f" ({f['time_ms'] / 1e3:.1f} s, " + (
                "median in the table)" if f["time_from_table"] else "one call incl. compiling)")
        text += f"; A = {f['matrix_bytes'] / 2**30:.1f} GiB = "
        if f["fraction_of_total_memory"] is not None:
            text += (f"{f['fraction_of_total_memory']:.1%} of the {memory} "
                     f"({f['total_memory_bytes'] / 2**30:.1f} GiB)")
            if not on_cpu:
                text += f", {f['fraction_of_jax_pool']:.1%} of JAX's pool"
        else:
            text += f"{f['fraction_of_jax_pool']:.1%} of JAX's pool ({f['jax_pool_bytes'] / 2**30:.1f} GiB)"
        if f["smallest_failing_n"]:
            text += f"; N={f['smallest_failing_n']}: {f['failure_status']}"
            if f["failure"]:
                text += f" ({f['failure']})"
        if not f["complete"]:
            text += "; search cut short by the time budget"
        lines.append(text)
    return lines


def plot(records: list[dict[str, Any]], args: argparse.Namespace, path: pathlib.Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "matplotlib is not installed: no plot written"
    multi = len({(r["devices"], r.get("grid")) for r in records if r["impl"] not in ONE_DEVICE_IMPLS}) > 1
    fig, axes = plt.subplots(1, len(args.routines), figsize=(6 * len(args.routines), 4.8), squeeze=False)
    styles = ["-", "--", ":", "-."]
    markers = "osD^v<>p*h"
    # One colour and marker per implementation and device count (or grid), the same in every panel;
    # the line style tells the condition numbers apart where there are several (then hollow
    # markers tell a second dtype), else the dtypes.
    labels = sorted({(r["impl"], r["devices"], r.get("grid") or "") for r in records if r["impl"] != MG_JIT})
    conds = sorted({r.get("cond") or 0.0 for r in records})
    for ax, routine in zip(axes[0], args.routines):
        series: dict[tuple, list[tuple[int, float]]] = {}
        for r in records:
            if r["routine"] == routine and r["impl"] != MG_JIT and r.get("median_ms") is not None:
                key = (r["impl"], r["dtype"], r["devices"], r.get("grid") or "", r.get("cond") or 0.0)
                series.setdefault(key, []).append((r["n"], r["median_ms"]))
        for (impl, dtype, d, grid, cond), points in sorted(series.items()):
            points.sort()
            index = labels.index((impl, d, grid))
            where = f" {grid}" if grid else f" {d} dev" if multi and impl not in ONE_DEVICE_IMPLS else ""
            label = impl + where + f" {dtype}" + (f" cond {format_cond(cond)}" if cond else "")
            kind = args.dtypes.index(dtype)
            style = styles[(conds.index(cond) if len(conds) > 1 else kind) % len(styles)]
            hollow = len(conds) > 1 and kind > 0
            ax.plot([p[0] for p in points], [p[1] for p in points], color=f"C{index % 10}",
                    linestyle=style, marker=markers[index % len(markers)], label=label,
                    markerfacecolor="none" if hollow else f"C{index % 10}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted(args.sizes), [str(n) for n in sorted(args.sizes)])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(routine)
        ax.set_xlabel("N")
        ax.set_ylabel("median time (ms)")
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"


def git_commit() -> dict[str, Any]:
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def write_json(path: pathlib.Path, report: dict[str, Any]) -> None:
    """benchmark.json; NaN (an unchecked figure) is written as null."""
    def clean(value):
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    path.write_text(json.dumps(clean(report), indent=1) + "\n")
