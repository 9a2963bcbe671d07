"""Eager calls over several CPU devices of this process return their results
ready.

XLA:CPU runs every device's part of a program on one pool of
max(cores, devices) threads, and each device's launch of a program runs
there too, blocking while that device has 32 computations in flight. A jaxmg
call needs the parts of all its devices running at once (they meet in the
rendezvous), so calls dispatched without waiting fill the queues until
blocked launches hold the threads the call's last devices need, and the call
stalls until its timeout (XLA's own psum aborts the process the same way).
Waiting for each eager call keeps at most one such call in flight per Python
thread. A jitted program holding jaxmg calls is dispatched by JAX alone; the
README's known limits say what it needs."""

from __future__ import annotations

import functools

import jax


def returns_ready_on_cpus(routine):
    """Wraps a public routine: when its results are arrays (not tracers) on
    several CPU devices of this process, it returns once they are computed,
    raising the runtime's error of a failed call there."""

    @functools.wraps(routine)
    def call(*args, **kwargs):
        out = routine(*args, **kwargs)
        if any(_on_cpus_of_this_process(leaf) for leaf in jax.tree_util.tree_leaves(out)):
            jax.block_until_ready(out)
        return out

    return call


def _on_cpus_of_this_process(x) -> bool:
    return (
        isinstance(x, jax.Array)
        and not isinstance(x, jax.core.Tracer)
        and _spans_cpus_of_this_process(x.sharding)
    )


@functools.lru_cache(maxsize=256)
def _spans_cpus_of_this_process(sharding) -> bool:
    here = [d for d in sharding.device_set if d.process_index == jax.process_index()]
    return len(here) > 1 and all(d.platform == "cpu" for d in here)
