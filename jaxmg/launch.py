"""Starts N local processes of one JAX program, wired together with
``jax.distributed``.

    python -m jaxmg.launch -n 4 train.py --lr 0.1

Each process gets a private coordinator address on localhost and its rank
through the environment; the program calls :func:`initialize` (or
``jax.distributed.initialize`` with the same values) before touching devices.
Output is forwarded line by line with a ``[rank i]`` prefix. When one rank
fails, the others are stopped and the launcher exits with that rank's status
(128 + the signal for a rank killed by one), so a crashed peer never leaves
the rest waiting. The ranks die with the launcher, even when it is killed
with SIGKILL: the kernel signals each rank when its parent dies, and
:func:`initialize` watches the launcher from ranks started through a wrapper.

On GPUs, ``--one-gpu-per-process`` gives process i the GPU i alone (through
``local_device_ids``); ``--gpus 0,0,1,1`` names each rank's GPU, so several
processes may share one (each then gets an equal part of its memory, unless
XLA_PYTHON_CLIENT_MEM_FRACTION is set). Several nodes are launched by their own tools (Slurm's
``srun``, ``mpirun``): ``jax.distributed.initialize()`` reads those
environments itself, and :func:`initialize` defers to it there.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
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
LAUNCHER_PID = "JAXMG_LAUNCHER_PID"

_PR_SET_PDEATHSIG = 1


def initialize() -> bool:
    """Joins the job started by ``python -m jaxmg.launch``. Returns False (and
    does nothing) when this process was not started by it."""
    if COORDINATOR not in os.environ:
        return False
    if LAUNCHER_PID in os.environ:
        _die_with_launcher(int(os.environ[LAUNCHER_PID]))
    import jax

    _tune_alone()
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


SHARED_AUTOTUNING = "--xla_gpu_shard_autotuning"


def sets_shared_autotuning(xla_flags: str) -> bool:
    """Whether XLA_FLAGS decides the shared autotuning itself (ours or the user's)."""
    return SHARED_AUTOTUNING in xla_flags


def _tune_alone() -> None:
    """Has XLA:GPU autotune each process's programs in that process. By default
    the processes of a job split the autotuning and wait for each other's
    share, which assumes they all compile the same program: a rank that
    brings another dtype or shape (a mistake jaxmg's channel names within its
    timeout) would leave them all waiting in the compiler, for ever. A setting
    of the user's own in XLA_FLAGS is kept; XLA reads the flags when its
    backend starts, which jax.distributed.initialize must precede anyway."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not sets_shared_autotuning(flags):
        os.environ["XLA_FLAGS"] = f"{flags} {SHARED_AUTOTUNING}=false".strip()


def _launcher_gone(pid: int) -> None:
    try:
        sys.stderr.write(f"jaxmg.launch: the launcher (process {pid}) is gone; rank "
                         f"{os.environ.get(PROCESS_ID)} stops\n")
        sys.stderr.flush()
    except OSError:  # its output went to the launcher
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _die_with_launcher(pid: int) -> None:
    """Ends this rank when the launcher ends: the launcher's direct children
    get SIGKILL from the kernel already; this also covers a rank started
    through a wrapper (a shell, a profiler)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        _launcher_gone(pid)
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3): poll for it
        handle = None

    def watch():
        if handle is not None:
            select.select([handle], [], [])
        else:
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:  # alive, under another user
                    pass
                time.sleep(0.5)
        _launcher_gone(pid)

    threading.Thread(target=watch, name="jaxmg-launcher-watch", daemon=True).start()


def _die_with_parent(parent: int, prctl) -> None:
    """Runs in each rank between fork and exec."""
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the launcher died before the line above
        os._exit(1)


def _describe(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    return f"exited with status {status}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forward(stream, rank: int, sink, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        # A rank killed mid-line leaves its last line open: ended here, so that
        # what follows (the launcher's own message) starts a line of its own.
        end = "" if line.endswith("\n") else "\n"
        with lock:
            sink.write(f"[rank {rank}] {line}{end}")
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
        gpus: list[int] | None = None, timeout: float | None = None, grace: float = 2.0) -> int:
    """Runs `command` as n ranks; returns 0, or the status of the first rank
    that failed (124 if the job ran past `timeout` seconds; minus the signal
    for a rank killed by one). `gpus[i]` is rank i's GPU. The ranks left when
    one fails get SIGTERM, and SIGKILL `grace` seconds later (JAX's preemption
    service takes SIGTERM as a notice, not as an order to stop)."""
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
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    me = os.getpid()
    # SIGTERM (a scheduler, `timeout`) stops the ranks on the way out too.
    previous_term = None
    if threading.current_thread() is threading.main_thread():
        previous_term = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        # Every rank is started before any thread: the set-up between fork and
        # exec must not run while other threads hold locks.
        for rank in range(n):
            env = dict(os.environ, **{COORDINATOR: address, NUM_PROCESSES: str(n),
                                      PROCESS_ID: str(rank), LAUNCHER_PID: str(me)})
            if gpus is not None:
                env[LOCAL_DEVICE] = str(gpus[rank])
                if sharing[gpus[rank]] > 1 and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ:
                    env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / sharing[gpus[rank]]:.3f}"
            procs.append(subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                bufsize=1, preexec_fn=lambda: _die_with_parent(me, prctl)))
        for rank, p in enumerate(procs):
            for stream, sink in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
                t = threading.Thread(target=_forward, args=(stream, rank, sink, lock),
                                     daemon=True)
                t.start()
                pumps.append(t)
        return _supervise(procs, lock, timeout)
    finally:
        _stop(procs, grace)
        for t in pumps:
            t.join(timeout=1.0)
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)


def _supervise(procs, lock: threading.Lock, timeout: float | None) -> int:
    start = time.monotonic()
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            rank, status = failed[0]
            with lock:
                sys.stderr.write(f"jaxmg.launch: rank {rank} {_describe(status)}; "
                                 "stopping the other ranks\n")
            return status
        if all(c == 0 for c in codes):
            return 0
        if timeout is not None and time.monotonic() - start > timeout:
            with lock:
                sys.stderr.write(f"jaxmg.launch: the job ran past {timeout:g} s; stopping it\n")
            return 124
        time.sleep(0.05)


def _gpu_list(text: str) -> list[int]:
    try:
        gpus = [int(g) for g in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus takes comma-separated GPU numbers, got {text!r}")
    if any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"--gpus takes GPU numbers >= 0, got {text!r}")
    return gpus


_TAKES_VALUE = ("-n", "--nprocs", "--gpus", "--timeout")


def _split_module(argv: list[str]):
    """(the launcher's arguments, MODULE, its arguments) where -m MODULE
    comes among the launcher's options, as with python itself (everything
    after MODULE is the module's, options included); (argv, None, [])
    otherwise."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "-m" and i + 1 < len(argv):
            return argv[:i], argv[i + 1], argv[i + 2:]
        if token == "--" or not token.startswith("-"):
            break
        i += 2 if token in _TAKES_VALUE else 1
    return argv, None, []


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout takes seconds, got {text!r}")
    if not seconds > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"--timeout takes a positive number of seconds, "
                                         f"got {text!r}")
    return seconds


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
    parser.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                        help="stop the job after this many seconds")
    parser.add_argument("-m", dest="module", metavar="MODULE",
                        help="run a module (as python -m MODULE ...) instead of a script")
    parser.add_argument("program", nargs="?", help="a Python script (unless -m is given)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    argv = sys.argv[1:] if argv is None else list(argv)
    own, module, module_args = _split_module(argv)
    args = parser.parse_args(own)
    if module is not None:
        command = [sys.executable, "-m", module, *module_args]
    elif args.program == "-m":  # after "--": -- -m module
        if not args.args:
            parser.error("-m needs a module name")
        command = [sys.executable, "-m", *args.args]
    elif args.program is None:
        parser.error("give the program: a Python script, or -m MODULE")
    else:
        command = [sys.executable, args.program, *args.args]
    try:
        status = run(args.nprocs, command, one_gpu_per_process=args.one_gpu_per_process,
                     gpus=args.gpus, timeout=args.timeout)
        return 128 - status if status < 0 else status
    except ValueError as e:
        parser.error(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
