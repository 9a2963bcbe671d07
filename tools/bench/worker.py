"""A worker process: measures its tasks one problem at a time and reports each
as a JSON line on stdout ("@@bench {...}"). The driver starts it as

    python3 -m tools.bench.worker ours|peer|info TASKS.json

"ours" imports jaxmg from the repository, "peer" JAXMg 0.0.8 from the settings'
peer_path (both packages are named jaxmg, hence a process each), "info" only
describes the machine.
"""

from __future__ import annotations

import faulthandler
import gc
import itertools
import json
import pathlib
import statistics
import sys
from typing import Any

from . import REPO_ROOT, impls
from .cases import AUTO, MIXED, NATIVE, ONE_DEVICE_IMPLS, Task
from .errors import error_result, short_error
from .inputs import Devices, Inputs
from .machine import machine_info, one_device_too_small
from .timing import CallPlanner, summarise, time_impl, time_paired

EVENT_PREFIX = "@@bench "


def emit(**event: Any) -> None:
    print(EVENT_PREFIX + json.dumps(event), flush=True)


def load_library(kind: str, settings: dict[str, Any]):
    """Our jaxmg from the repository, or JAXMg 0.0.8 from the settings' peer_path."""
    import importlib

    if kind == "ours":
        if str(REPO_ROOT) not in [str(pathlib.Path(p).resolve()) for p in sys.path if p]:
            sys.path.append(str(REPO_ROOT))
        return importlib.import_module("jaxmg")
    peer_path = pathlib.Path(settings["peer_path"]).resolve()
    if not (peer_path / "jaxmg" / "__init__.py").is_file():
        raise ImportError(f"no jaxmg package under --peer-path {peer_path}")
    sys.path.insert(0, str(peer_path))
    module = importlib.import_module("jaxmg")
    if peer_path not in pathlib.Path(module.__file__).resolve().parents:
        raise ImportError(f"`import jaxmg` found {module.__file__}, not the peer under {peer_path}")
    return module


def needs_x64(tasks: list[Task]) -> bool:
    """float64 and complex128 turn on jax_enable_x64 (the benchmark's choice, not the
    library's); so do the conditioned matrices and the backward error, built in float64."""
    return any(t.dtype in ("float64", "complex128") or t.cond is not None or t.impl == MIXED
               for t in tasks)


class Worker:
    """One worker's state: its devices, its library, what it has timed so far."""

    def __init__(self, settings: dict[str, Any], lib) -> None:
        self.settings = settings
        self.lib = lib
        self.devices = Devices()
        self.planner = CallPlanner(settings)

    def run_group(self, tasks: list[Task]) -> None:
        """Measures every task of one problem on shared inputs."""
        first = tasks[0]
        n_devices = max(t.devices for t in tasks)
        sharding = self.devices.sharding(n_devices, next((t.grid for t in tasks if t.grid), None))
        n_inputs, skip = self.devices.input_count(first.n, first.dtype, n_devices)
        if self.settings["repeats"] == 1 and not self.settings.get("warmup", True):
            n_inputs = min(n_inputs, 1)  # one call in all (--largest): one input is enough
        if skip:
            for task in tasks:
                emit(event="result", id=task.id, status="oom", error=skip, attempted=False)
            return
        try:
            inputs = Inputs(first.routine, first.n, first.dtype, sharding, n_inputs, first.cond)
        except Exception as exc:
            result = error_result(exc, "inputs: ")
            for task in tasks:
                emit(event="result", id=task.id, **result)
            del exc
            gc.collect()
            return
        pair = paired_tasks(tasks) if self.settings.get("paired") else None
        for task in tasks:
            if pair and task is pair[1]:
                continue  # measured with pair[0]
            if pair and task is pair[0]:
                # A crash during the pair is charged to its first task; the second is made again.
                emit(event="start", id=pair[0].id)
                results = self.run_pair(pair, inputs, n_inputs)
                emit(event="result", id=pair[0].id, **results[0])
                emit(event="start", id=pair[1].id)
                emit(event="result", id=pair[1].id, **results[1])
                gc.collect()
                continue
            emit(event="start", id=task.id)
            emit(event="result", id=task.id, **self.run_task(task, inputs, n_inputs))
            gc.collect()
        del inputs
        gc.collect()

    def native_skip(self, task: Task) -> dict[str, Any] | None:
        """The result of a jax native task whose copies of A cannot fit one device, else None."""
        import numpy as np

        if task.impl not in ONE_DEVICE_IMPLS:
            return None
        one, _ = self.devices.memory(1)
        reason = one_device_too_small(task.n, np.dtype(task.dtype).itemsize, one, self.devices.on_cpu)
        return {"status": "oom", "attempted": False, "error": reason} if reason else None

    def run_task(self, task: Task, inputs: Inputs, n_inputs: int) -> dict[str, Any]:
        skip = self.native_skip(task)
        if skip:
            return skip
        repeats, warmup, predicted = self.planner.calls_for(task)
        try:
            impl = impls.build(task, inputs, self.devices, self.settings, self.lib)
            measured = time_impl(impl, n_inputs, repeats, self.settings["budget_s"], warmup)
            record = summarise(task, measured, impl, n_inputs, task.dtype)
        except Exception as exc:
            return error_result(exc)
        if not warmup and self.settings.get("warmup", True):
            record.update(single_call=True, predicted_s=predicted)
        return self.planner.remember(task, record)

    def run_pair(self, pair: tuple[Task, Task], inputs: Inputs, n_inputs: int) -> list[dict[str, Any]]:
        """Both tasks of a --paired problem, timed in alternation. If either cannot
        run (memory, an error), each is measured on its own instead."""
        plans = [self.planner.calls_for(t) for t in pair]
        warmup = all(w for _, w, _ in plans)  # one of them predicted long: one pair, cold
        try:
            if self.native_skip(pair[1]):
                raise RuntimeError("jax native does not fit one device")
            built = [impls.build(t, inputs, self.devices, self.settings, self.lib) for t in pair]
            measured, ratios = time_paired(built, n_inputs, self.settings["repeats"] if warmup else 1,
                                           self.settings["budget_s"], warmup)
        except Exception:
            gc.collect()
            return [self.run_task(t, inputs, n_inputs) for t in pair]
        results = [summarise(t, m, impl, n_inputs, t.dtype) for t, m, impl in zip(pair, measured, built)]
        results[0].update(paired_ratio=statistics.median(ratios), pair_ratios=ratios)
        for result, (_, _, predicted) in zip(results, plans):
            if not warmup:
                result.update(single_call=True, predicted_s=predicted)
        return [self.planner.remember(t, r) for t, r in zip(pair, results)]


def paired_tasks(tasks: list[Task]) -> tuple[Task, Task] | None:
    """--paired: the (jaxmg (auto), jax native) tasks of one problem, if both are there."""
    auto = next((t for t in tasks if t.impl == AUTO), None)
    native = next((t for t in tasks if t.impl == NATIVE), None)
    return (auto, native) if auto and native else None


def main(kind: str, tasks_file: str) -> None:
    faulthandler.enable()  # a crash in native code leaves a Python stack in the log
    spec = json.loads(pathlib.Path(tasks_file).read_text())
    if kind == "info":
        emit(event="info", **machine_info())
        emit(event="result", id=0, status="ok")
        return
    settings = spec["settings"]
    tasks = [Task(**t) for t in spec["tasks"]]
    import jax

    if needs_x64(tasks):
        jax.config.update("jax_enable_x64", True)
    try:
        lib = load_library(kind, settings)
    except Exception as exc:
        for task in tasks:
            emit(event="result", id=task.id, status="error", error=f"import failed: {short_error(exc)}")
        return
    emit(event="library", kind=kind, file=getattr(lib, "__file__", None),
         version=getattr(lib, "__version__", None))
    worker = Worker(settings, lib)
    problem = lambda t: (t.routine, t.dtype, t.n, t.cond)  # noqa: E731
    for _, group in itertools.groupby(tasks, key=problem):
        worker.run_group(list(group))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("ours", "peer", "info"):
        sys.exit("usage: python3 -m tools.bench.worker ours|peer|info TASKS.json")
    main(sys.argv[1], sys.argv[2])
