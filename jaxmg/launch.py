"""Starts N local processes of one JAX program, wired together with
``jax.distributed``.

    python -m jaxmg.launch -n 4 train.py --lr 0.1

Each process gets a private coordinator address on localhost and its rank
through the environment; the program calls :func:`initialize` (or
``jax.distributed.initialize`` with the same values) before touching devices.
Output is forwarded line by line with a ``[rank i]`` prefix. When one rank
fails, the others are stopped and the launcher exits with that rank's status,
so a crashed peer never leaves the rest waiting.

On GPUs, ``--one-gpu-per-process`` gives process i the GPU i alone (through
``local_device_ids``); ``--gpus 0,0,1,1`` names each rank's GPU, so several
processes may share one (each then gets an equal part of its memory, unless
XLA_PYTHON_CLIENT_MEM_FRACTION is set). Several nodes are launched by their own tools (Slurm's
``srun``, ``mpirun``): ``jax.distributed.initialize()`` reads those
environments itself, and :func:`initialize` defers to it there.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

COORDINATOR = "JAXMG_COORDINATOR"
NUM_PROCESSES = "JAXMG_NUM_PROCESSES"
PROCESS_ID = "JAXMG_PROCESS_ID"
LOCAL_DEVICE = "JAXMG_LOCAL_DEVICE_IDS"


def initialize() -> bool:
    """Joins the job started by ``python -m jaxmg.launch``. Returns False (and
    does nothing) when this process was not started by it."""
    if COORDINATOR not in os.environ:
        return False
    import jax

    devices = os.environ.get(LOCAL_DEVICE)
    # Cross-process collectives between host devices go through gloo.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ[COORDINATOR],
        num_processes=int(os.environ[NUM_PROCESSES]),
        process_id=int(os.environ[PROCESS_ID]),
        local_device_ids=[int(d) for d in devices.split(",")] if devices else None,
    )
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forward(stream, rank: int, sink, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        with lock:
            sink.write(f"[rank {rank}] {line}")
            sink.flush()
    stream.close()


def _stop(procs, grace: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run(n: int, command: list[str], *, one_gpu_per_process: bool = False,
        gpus: list[int] | None = None, timeout: float | None = None, grace: float = 5.0) -> int:
    """Runs `command` as n ranks; returns 0, or the status of the first rank
    that failed (124 if the job ran past `timeout` seconds). `gpus[i]` is rank
    i's GPU."""
    if n < 1:
        raise ValueError(f"jaxmg.launch: -n must be at least 1, got {n}")
    if one_gpu_per_process and gpus is None:
        gpus = list(range(n))
    if gpus is not None and len(gpus) != n:
        raise ValueError(f"jaxmg.launch: --gpus names {len(gpus)} GPUs for {n} processes")
    sharing = {g: gpus.count(g) for g in gpus} if gpus is not None else {}
    address = f"127.0.0.1:{_free_port()}"
    lock = threading.Lock()
    procs, pumps = [], []
    for rank in range(n):
        env = dict(os.environ, **{COORDINATOR: address, NUM_PROCESSES: str(n), PROCESS_ID: str(rank)})
        if gpus is not None:
            env[LOCAL_DEVICE] = str(gpus[rank])
            if sharing[gpus[rank]] > 1 and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ:
                env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / sharing[gpus[rank]]:.3f}"
        p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, bufsize=1)
        procs.append(p)
        for stream, sink in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
            t = threading.Thread(target=_forward, args=(stream, rank, sink, lock), daemon=True)
            t.start()
            pumps.append(t)
    start = time.monotonic()
    status = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, status = failed[0]
                with lock:
                    sys.stderr.write(f"jaxmg.launch: rank {rank} exited with status {status}; "
                                     "stopping the other ranks\n")
                break
            if all(c == 0 for c in codes):
                break
            if timeout is not None and time.monotonic() - start > timeout:
                with lock:
                    sys.stderr.write(f"jaxmg.launch: the job ran past {timeout:g} s; stopping it\n")
                status = 124
                break
            time.sleep(0.05)
    finally:
        _stop(procs, grace)
        for t in pumps:
            t.join(timeout=1.0)
    return status


def _gpu_list(text: str) -> list[int]:
    try:
        gpus = [int(g) for g in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus takes comma-separated GPU numbers, got {text!r}")
    if any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"--gpus takes GPU numbers >= 0, got {text!r}")
    return gpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jaxmg.launch",
        description="Run a JAX program as N local processes joined by jax.distributed "
                    "(the program calls jaxmg.launch.initialize()).",
    )
    parser.add_argument("-n", "--nprocs", type=int, required=True, help="number of processes")
    parser.add_argument("--one-gpu-per-process", action="store_true",
                        help="process i sees only GPU i (local_device_ids=[i])")
    parser.add_argument("--gpus", type=_gpu_list, metavar="LIST",
                        help="rank i uses GPU LIST[i], e.g. 0,1,2,3, or 0,0 to share GPU 0")
    parser.add_argument("--timeout", type=float, help="stop the job after this many seconds")
    parser.add_argument("program", help="a Python script, or -m module")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    args = parser.parse_args(argv)
    if args.program == "-m":
        if not args.args:
            parser.error("-m needs a module name")
        command = [sys.executable, "-m", *args.args]
    else:
        command = [sys.executable, args.program, *args.args]
    try:
        return run(args.nprocs, command, one_gpu_per_process=args.one_gpu_per_process,
                   gpus=args.gpus, timeout=args.timeout)
    except ValueError as e:
        parser.error(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
