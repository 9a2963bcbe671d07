"""The driver's side of the worker processes: starts one per implementation
family and device count, one after another (so each has the devices' memory
to itself), reads its events, and when one crashes or stalls charges the
measurement in flight and starts another for the rest. Every wait has a
deadline (--task-timeout, --wall-budget)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

from . import REPO_ROOT
from .cases import Task
from .errors import is_oom
from .worker import EVENT_PREFIX


def worker_env(kind: str, n_devices: int, info: dict[str, Any],
               mem_fraction: float | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if mem_fraction is not None:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(mem_fraction)
    if kind == "peer" and info["platform"] == "gpu":
        # JAXMg uses every local device: show it only the first n_devices.
        visible = env.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(info["device_count"])]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:n_devices])
    return env


def worker_command(kind: str, tasks_file: str) -> tuple[list[str], dict[str, str]]:
    """The command line of a worker, and what its environment needs beside the caller's:
    the repository on PYTHONPATH, so that `-m tools.bench.worker` is found."""
    path = os.pathsep.join([str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return [sys.executable, "-m", "tools.bench.worker", kind, tasks_file], {"PYTHONPATH": path}


def _pump(stream, lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_worker(kind: str, tasks: list[Task], settings: dict[str, Any], env: dict[str, str],
               log_path: pathlib.Path, timeout_s: float,
               deadline: float | None = None) -> Iterator[dict[str, Any]]:
    """Runs a worker over `tasks`, yielding its events. If it crashes or stalls,
    the task in flight (or the problem whose inputs it was building) is reported
    as an error (as OOM when its log says so) and a new worker takes the rest.
    Past `deadline` (time.monotonic()) the worker is killed and nothing restarts."""
    remaining = list(tasks)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    while remaining:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"settings": settings, "tasks": [dataclasses.asdict(t) for t in remaining]}, f)
            tasks_file = f.name
        command, extra_env = worker_command(kind, tasks_file)
        done: set[int] = set()
        in_flight: int | None = None
        loaded = False  # the worker imported its library
        failure = None
        with open(log_path, "a") as log:
            log.write(f"\n$ {shlex.join(command)}\n")
            log.flush()
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                    env={**env, **extra_env}, start_new_session=True)
            try:
                lines: queue.Queue[str | None] = queue.Queue()
                threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
                while True:
                    wait = timeout_s
                    if deadline is not None:
                        wait = min(wait, max(0.0, deadline - time.monotonic()))
                    try:
                        line = lines.get(timeout=wait)
                    except queue.Empty:
                        if wait < timeout_s:
                            failure = "time budget ran out: worker killed"
                        else:
                            failure = f"no progress for {timeout_s:.0f} s: worker killed"
                        break
                    if line is None:
                        break
                    if not line.startswith(EVENT_PREFIX):
                        log.write(line)
                        continue
                    event = json.loads(line[len(EVENT_PREFIX):])
                    if event["event"] == "library":
                        loaded = True
                    elif event["event"] == "start":
                        in_flight = event["id"]
                    elif event["event"] == "result":
                        done.add(event["id"])
                        in_flight = None
                    yield event
            finally:
                if proc.poll() is None:  # stalled, or the driver was interrupted
                    os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
                os.unlink(tasks_file)
        remaining = [t for t in remaining if t.id not in done]
        if not remaining:
            return
        failure = failure or describe_exit(rc, log_path)
        if in_flight is not None:
            lost = [in_flight]
        elif loaded:  # died building the next problem's inputs
            key = lambda t: (t.routine, t.dtype, t.n, t.cond)  # noqa: E731
            lost = [t.id for t in remaining if key(t) == key(remaining[0])]
        else:  # died on start-up: another worker would too
            lost = [t.id for t in remaining]
        status = "oom" if is_oom(failure) else "error"
        for task_id in lost:
            yield {"event": "result", "id": task_id, "status": status, "error": failure}
        remaining = [t for t in remaining if t.id not in lost]
        if deadline is not None and time.monotonic() >= deadline:
            for task in remaining:
                yield {"event": "result", "id": task.id, "status": "error",
                       "error": "time budget ran out: not run"}
            return


def log_tail(path: pathlib.Path) -> str:
    """The most telling line a dead worker left in its log."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    own = text.rsplit("\n$ ", 1)[-1].splitlines()[1:]  # this worker's part only
    lines = [l.strip() for l in own if l.strip().strip("*")]
    fatal = [l for l in lines if l.startswith("Fatal Python error") or "Error" in l.split(":")[0]]
    return ((fatal or lines or ["(nothing in the log)"])[-1])[:240]


def describe_exit(rc: int, log_path: pathlib.Path) -> str:
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with status {rc}"
    return f"worker {how}: {log_tail(log_path)}"


def probe_machine(log_path: pathlib.Path, mem_fraction: float | None = None) -> dict[str, Any]:
    """Device list and versions, from a short-lived worker (the driver never starts JAX)."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    if mem_fraction is not None:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(mem_fraction)
    info, error = None, "it printed nothing"
    for event in run_worker("info", [Task(0, "", "", 0, 0, "")], {}, env, log_path, 600):
        if event["event"] == "info":
            info = {k: v for k, v in event.items() if k != "event"}
        elif event.get("status") == "error":
            error = event["error"]
    if info is None:
        raise SystemExit(f"benchmark: cannot start JAX: {error} (see {log_path})")
    return info
