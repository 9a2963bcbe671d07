"""How calls are timed: perf_counter around the call and jax.block_until_ready,
after a warm-up (compiling) call; timed calls rotate between the input pairs and
stop at a count or a time budget; --paired alternates two implementations on the
same input (AB, BA, ...); --single-call-over predicts a call's time from the
previous N (scaled by N^3) and makes a long one once, cold. Medians throughout.
Also the interleaved rounds of tools/mg_overhead.py and tools/small_n_overhead.py."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

from .cases import Task, series_key
from .checks import tolerance
from .errors import short_error


def timed(fn: Callable[..., Any], *args) -> tuple[Any, float]:
    """fn(*args) and its seconds, up to jax.block_until_ready of the result."""
    import jax

    start = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - start


def new_measurement() -> dict[str, list]:
    return {"times": [], "copies": [], "residuals": [], "extras": []}


def _timed_call(impl, k: int, measured: dict[str, list]) -> float:
    """One timed call of `impl` on input k, its residual checked; its seconds."""
    args, copy_s = impl.prepare(k)
    out, seconds = timed(impl.call, *args)
    measured["times"].append(seconds)
    del args
    try:
        measured["residuals"].append(impl.residual(k, out))
    except Exception as exc:  # the timing stands; the result is unchecked
        measured["residuals"].append(float("nan"))
        impl.note = f"residual check failed: {short_error(exc)}"
    if impl.extras is not None:
        try:
            measured["extras"].append(impl.extras(k, out))
        except Exception as exc:
            measured["extras"].append({"backward_error": float("nan")})
            impl.note = f"backward error check failed: {short_error(exc)}"
    del out
    if copy_s is not None:
        measured["copies"].append(copy_s)
    return seconds


def _warm_up(impl) -> None:
    import jax

    args, _ = impl.prepare(0)
    jax.block_until_ready(impl.call(*args))


def time_impl(impl, n_inputs: int, repeats: int, budget_s: float,
              warmup: bool = True) -> dict[str, Any]:
    """Warm-up call, then timed calls (rotating inputs) until `repeats` or `budget_s`.
    Without the warm-up (--largest) the first timed call includes compilation."""
    if warmup:
        _warm_up(impl)
    measured = new_measurement()
    for i in range(repeats):
        _timed_call(impl, (i + int(warmup)) % n_inputs, measured)  # the first timed call sees a new matrix
        if sum(measured["times"]) > budget_s:
            break
    return measured


def time_paired(impls: list, n_inputs: int, repeats: int, budget_s: float,
                warmup: bool = True) -> tuple[list[dict[str, Any]], list[float]]:
    """--paired: two implementations (warmed up unless `warmup` is False) called in
    alternation on the same input (AB, BA, AB, ...), so that drift in the machine's
    speed hits both alike; each gets up to `repeats` calls and `budget_s` seconds.
    Also returns the ratio of the first's time to the second's in each pair."""
    for impl in impls if warmup else ():
        _warm_up(impl)
    measured = [new_measurement() for _ in impls]
    ratios = []
    for i in range(repeats):
        k = (i + int(warmup)) % n_inputs
        seconds = [0.0, 0.0]
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            seconds[j] = _timed_call(impls[j], k, measured[j])
        ratios.append(seconds[0] / seconds[1])
        if sum(sum(m["times"]) for m in measured) > 2 * budget_s:
            break
    return measured, ratios


def _worst(values: list[float]) -> float | None:
    """The largest, None if there is none or one is NaN (unchecked)."""
    if not values or any(v is None or math.isnan(v) for v in values):
        return None
    return max(values)


def _flat(values: list) -> list:
    return [x for v in values for x in (v if isinstance(v, list) else [v])]


def fold_extras(extras: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's figures from the calls' extras: the worst backward error (the
    benchmark's own and the library's), the most refinement iterations, whether
    any call fell back, the solver's info where not 0."""
    if not extras:
        return {}
    record: dict[str, Any] = {"backward_error": _worst([e.get("backward_error") for e in extras])}
    reported = [e["reported_backward_error"] for e in extras if "reported_backward_error" in e]
    if reported:
        record["reported_backward_error"] = _worst(_flat(reported))
    iterations = _flat([e["iterations"] for e in extras if "iterations" in e])
    if iterations:
        record["iterations"] = max(iterations)
        record["iterations_per_call"] = [e.get("iterations") for e in extras]
    fallback = _flat([e["fallback"] for e in extras if "fallback" in e])
    if fallback:
        record["fallback"] = any(bool(f) for f in fallback)
    infos = [i for i in _flat([e["solver_info"] for e in extras if "solver_info" in e]) if i]
    if infos:
        record["solver_info"] = infos[0]
    return record


def summarise(task: Task, measured: dict[str, Any], impl, n_inputs: int, dtype) -> dict[str, Any]:
    ms = [1e3 * t for t in measured["times"]]
    copy_ms = [1e3 * t for t in measured["copies"]]
    residuals = measured["residuals"]
    worst = float("nan") if any(math.isnan(r) for r in residuals) else max(residuals)
    tol = tolerance(task.n, dtype)
    record = {
        "status": "ok" if worst <= tol else "failed",
        "median_ms": statistics.median(ms),
        "min_ms": min(ms),
        "times_ms": ms,
        "residual": None if math.isnan(worst) else worst,
        "tolerance": tol,
        "repeats_done": len(ms),
        "n_inputs": n_inputs,
        "engine": impl.engine,
        "tile": impl.tile,
        "note": impl.note,
        **fold_extras(measured.get("extras", [])),
    }
    if copy_ms:
        record["copy_ms"] = copy_ms
        record["median_with_copy_ms"] = statistics.median(t + c for t, c in zip(ms, copy_ms))
    return record


class CallPlanner:
    """How many calls a measurement gets: with --single-call-over S, a call
    predicted from this implementation's previous N (time x (N / N_prev)^3) to
    take more than S seconds is made once, without a warm-up, its compilation
    included. Knows the medians measured so far (earlier sittings' included)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        # series_key -> {N: median seconds}
        self.times: dict[tuple, dict[int, float]] = {}
        for *key, n, seconds in settings.get("known_times", []):
            if len(key) == 5:  # written before --conds: no cond in the key
                key.append(None)
            self.times.setdefault(tuple(key), {})[n] = seconds

    def calls_for(self, task: Task) -> tuple[int, bool, float | None]:
        """(timed calls, warm-up?, predicted seconds)."""
        repeats, warmup = self.settings["repeats"], self.settings.get("warmup", True)
        limit = self.settings.get("single_call_s")
        known = self.times.get(series_key(task), {})
        below = [n for n in known if n < task.n]
        if not (limit and warmup and below):
            return repeats, warmup, None
        n_prev = max(below)
        predicted = known[n_prev] * (task.n / n_prev) ** 3
        return (1, False, predicted) if predicted > limit else (repeats, warmup, predicted)

    def remember(self, task: Task, record: dict[str, Any]) -> dict[str, Any]:
        if record.get("median_ms") is not None and record.get("status") in ("ok", "failed"):
            self.times.setdefault(series_key(task), {})[task.n] = record["median_ms"] / 1e3
        return record


def interleaved(calls: dict[str, Callable[[], Any]], rounds: int, per_turn: int = 1,
                prepare: Callable[[str], None] | None = None
                ) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """The seconds of every call of each of `calls`, and each one's last result:
    they take turns, `per_turn` calls in a row each, for `rounds` rounds, so that
    drift in the machine's speed hits all alike. prepare(name), untimed, comes
    before each call."""
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    last: dict[str, Any] = {}
    for _ in range(rounds):
        for name, fn in calls.items():
            for _ in range(per_turn):
                if prepare is not None:
                    prepare(name)
                last[name], took = timed(fn)
                seconds[name].append(took)
    return seconds, last


def spread(seconds: list[float]) -> dict[str, float]:
    """Median, minimum and 90th percentile (the ceil(0.9 n)-th smallest) of some seconds."""
    ordered = sorted(seconds)
    return {"median": statistics.median(ordered), "min": ordered[0],
            "p90": ordered[max(0, -(-9 * len(ordered) // 10) - 1)]}
