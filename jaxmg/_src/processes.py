"""Calls whose devices live in different processes (one process per device:
``jax.distributed``, ``python -m jaxmg.launch``, Slurm, mpirun).

The library's participants then meet over a job-private channel instead of
inside one process. This module opens that channel once per process (a
random "name:secret" token that the first rank to get there publishes
through jax.distributed's key-value store, so two jobs on one node never
meet), registers each call site's processes at trace time, and finds the
CUDA ordinals of devices that belong to other processes.

A process whose cross-process jaxmg call failed, or whose peer died, leaves
at exit without jax.distributed's shutdown barrier: that barrier waits for
every process (up to 5 minutes, or until JAX's heartbeat timeout of 100 s
declares a dead one) although a failed job will never gather there. When
process 0 leaves, JAX ends every other process at once; a process that
never calls jaxmg again is ended by `python -m jaxmg.launch`, or, outside
it, by JAX once `heartbeat_timeout_seconds` (an argument of
jax.distributed.initialize) passes.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import itertools
import json
import os
import secrets
import socket
import sys
import warnings

import jax
import numpy as np

from jaxmg._src import config, library

_TOKEN_KEY = "jaxmg/channel_token"
_PROCESS_KEY = "jaxmg/process/{}"


def _client():
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError(
            "jaxmg: the mesh spans processes but jax.distributed is not initialised in this "
            "process; call jax.distributed.initialize() (or jaxmg.launch.initialize()) first"
        )
    return client


@functools.cache
def open_channel() -> str:
    """Opens this process's end of the job channel (once); returns the job's name."""
    client = _client()
    me = jax.process_index()
    # Whichever rank comes first proposes the token; the others' proposals are refused.
    try:
        client.key_value_set(_TOKEN_KEY, f"{secrets.token_hex(8)}:{secrets.token_hex(16)}",
                             allow_overwrite=False)
    except Exception:  # already set by another rank
        pass
    token = client.blocking_key_value_get(_TOKEN_KEY, config.timeout_ms())
    mine = {
        "host": socket.gethostname(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ordinals": {str(d.id): d.local_hardware_id for d in jax.local_devices()},
    }
    client.key_value_set(_PROCESS_KEY.format(me), json.dumps(mine), allow_overwrite=True)
    platform = jax.local_devices()[0].platform
    caution = shared_autotuning_caution(platform, os.environ.get("XLA_FLAGS", ""))
    if caution:
        warnings.warn(caution, RuntimeWarning, stacklevel=3)
    lib = library.library()
    error = ctypes.create_string_buffer(4096)
    _leave_failed_jobs_at_once()
    if lib.jaxmg_processes_open(token.encode(), me, error, len(error)):
        raise RuntimeError(error.value.decode())
    return token.split(":")[0]


def shared_autotuning_caution(platform: str, xla_flags: str) -> str | None:
    """The warning for a GPU job whose processes share XLA's autotuning (the
    default, unless jaxmg.launch.initialize() started the process), or None."""
    # Imported here: `python -m jaxmg.launch` imports jaxmg first, and runpy
    # warns where that import has already loaded the module it runs.
    from jaxmg import launch

    if platform != "gpu" or launch.sets_shared_autotuning(xla_flags):
        return None
    return ("jaxmg: XLA:GPU shares autotuning between this job's processes and waits for "
            "every share, so processes that compile different programs (say, one rank "
            "bringing another dtype, which jaxmg would refuse by name) wait in the compiler "
            f"for ever. Set XLA_FLAGS={launch.SHARED_AUTOTUNING}=false before JAX starts "
            "(jaxmg.launch.initialize() does)")


_uncaught_failure: str | None = None  # an uncaught jaxmg error, in its own words


def _is_jaxmg_error(error: BaseException | None) -> bool:
    while error is not None:
        if "jaxmg:" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


@functools.cache
def _leave_failed_jobs_at_once() -> None:
    """Makes this process skip jax.distributed's shutdown barrier at exit
    when the job has failed (see the module's docstring)."""
    previous = sys.excepthook

    def note_uncaught(kind, value, traceback):
        global _uncaught_failure
        if _is_jaxmg_error(value):
            _uncaught_failure = str(value).splitlines()[0][:300]
        previous(kind, value, traceback)

    sys.excepthook = note_uncaught
    # Registered after jax's own exit handler, so it runs before it.
    atexit.register(_skip_shutdown_barrier_if_failed)


def _failure_at_exit() -> str | None:
    if _uncaught_failure is not None:
        return f"an uncaught error: {_uncaught_failure}"
    counts = stats()
    if counts.get("failed", 0) > 0:
        return f"{counts['failed']} jaxmg call(s) across processes failed here"
    if counts.get("lost", 0) > 0:
        return f"{counts['lost']} process(es) of the job were killed or crashed"
    return None


def _skip_shutdown_barrier_if_failed() -> None:
    why = _failure_at_exit()
    if why is None:
        return
    from jax._src import distributed

    state = distributed.global_state
    held = [state.preemption_sync_manager, state.client, state.service]
    if not any(held):
        return
    # Dropping the last reference would run the client's destructor, which
    # waits at the same barrier: the objects are kept alive until the process
    # ends instead.
    for obj in held:
        if obj is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    state.preemption_sync_manager = state.client = state.service = None
    sys.stderr.write(f"jaxmg: process {jax.process_index()} leaves without waiting for the "
                     f"others at exit (jax.distributed's shutdown barrier) after {why}\n")
    sys.stderr.flush()


def check_one_device_per_process(devices) -> list[int]:
    """The process of each device along the call's axis; refuses a process
    holding several of them (jaxmg meets one device per process across
    processes)."""
    owners = [d.process_index for d in devices]
    if len(set(owners)) != len(owners):
        counts = {p: owners.count(p) for p in sorted(set(owners))}
        raise NotImplementedError(
            f"jaxmg: the mesh spans processes {sorted(set(owners))} with several devices in one "
            f"process ({counts} devices per process). Across processes jaxmg takes one device "
            "per process (launch one process per GPU, e.g. `python -m jaxmg.launch -n N "
            "--one-gpu-per-process`); within one process it takes all of them"
        )
    return owners


def host_count(devices) -> int:
    """How many machines the processes of `devices` run on (1 without asking
    anyone when they are all this process's)."""
    owners = sorted({d.process_index for d in devices})
    if owners == [jax.process_index()]:
        return 1
    open_channel()
    return len({_process_info(p)["host"] for p in owners})


def register_call(call_id: int, owners: list[int], platform: str) -> None:
    """Tells the library that participant i of `call_id` runs in process
    owners[i], after checking the processes can meet: one machine (the
    channel and CUDA IPC do not cross nodes) and, on GPUs, the same view of
    the GPUs (ordinals must mean the same device in every process)."""
    open_channel()
    peers = {p: _process_info(p) for p in sorted(set(owners))}
    hosts = sorted({info["host"] for info in peers.values()})
    if len(hosts) > 1:
        raise NotImplementedError(
            f"jaxmg: the mesh spans machines {hosts}. cuSOLVERMg meets the processes of one "
            "machine (its channel and CUDA IPC stay on the node); across nodes use "
            "backend='mp' (cuSOLVERMp over NCCL), which backend='auto' picks for whole "
            "sharded arrays (not inside shard_map)"
        )
    if platform == "cuda" and len({info["visible"] for info in peers.values()}) > 1:
        views = {p: info["visible"] for p, info in peers.items()}
        raise ValueError(
            f"jaxmg: the processes see different GPUs (CUDA_VISIBLE_DEVICES per process: "
            f"{views}), so GPU numbers differ between them. Give every process the same "
            "CUDA_VISIBLE_DEVICES and pick each one's GPU with jax.distributed's "
            "local_device_ids (`python -m jaxmg.launch --one-gpu-per-process` does)"
        )
    array = (ctypes.c_int32 * len(owners))(*owners)
    library.library().jaxmg_register_call(call_id, len(owners), array)


@functools.cache
def _process_info(process: int) -> dict:
    timeout = config.timeout_ms()
    try:
        raw = _client().blocking_key_value_get(_PROCESS_KEY.format(process), timeout)
    except Exception as e:
        raise RuntimeError(
            f"jaxmg: process {process} did not join jaxmg's job channel within "
            f"{timeout / 1000:g} s. Every process of the mesh must make the same jaxmg calls; "
            "raise JAXMG_TIMEOUT_S if one is merely slow"
        ) from e
    return json.loads(raw)


def ordinal(device) -> int:
    """The CUDA ordinal of a device, in its own process (other processes'
    devices report none, so their processes published them)."""
    if device.process_index == jax.process_index():
        return int(device.local_hardware_id)
    open_channel()
    return int(_process_info(device.process_index)["ordinals"][str(device.id)])


_CALL_IDS = itertools.count(1 << 40)


def next_call_id() -> int:
    """Ids of calls across processes come from their own counter, so traces
    that only one process makes (single-process meshes, lowering for
    inspection) do not shift the ids the processes must agree on."""
    return next(_CALL_IDS)


_STATS = ("connections", "pending", "calls", "failed", "lost")


def stats() -> dict[str, int]:
    """Open channel sockets, requests waiting for a meeting, registered calls,
    and, where the library reports them, meetings that failed here and peers
    whose channel closed without a goodbye (killed, crashed)."""
    out = np.full(len(_STATS), -1, dtype=np.int64)
    library.library().jaxmg_processes_stats(out.ctypes.data)
    return {name: int(v) for name, v in zip(_STATS, out) if v >= 0}
