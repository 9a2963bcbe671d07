"""How a failed factorisation is reported: NaN results (the default), a
LinAlgError, or a checkify error."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading

import jax
import jax.numpy as jnp
from jax.experimental import checkify

ON_FAILURE = ("nan", "raise", "checkify")
NOT_SPD = "jaxmg: the matrix is not positive definite (or has NaN/Inf entries: info = N + 1)"
SINGULAR = "jaxmg: the matrix is singular (or has NaN/Inf entries: info = N + 1)"
NO_CONVERGENCE = "jaxmg: the eigensolver did not converge (or the matrix has NaN/Inf entries)"


class LinAlgError(ArithmeticError):
    """A factorisation failed (matrix not positive definite, or singular)."""


def _not_a_linalg_error(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], LinAlgError))


# on_failure="raise" under jit raises from a callback on every device, and JAX
# logs each such exception with its traceback before handing it on; the one
# error the caller receives says it all.
logging.getLogger("jax._src.debugging").addFilter(_not_a_linalg_error)


def with_finite_check(a, info, n: int, upper: bool = False):
    """info, or N + 1 where a has a NaN or Inf entry that the factorisation
    let through (LAPACK can return info 0 and a non-finite factor). upper:
    the factorisation reads only a's upper triangle, so only it counts."""
    read = jnp.triu(a) if upper else a
    return jnp.where((info == 0) & ~jnp.all(jnp.isfinite(read)), jnp.int32(n + 1), info)


def nan_where(failed, x):
    """x, NaN where `failed` holds (broadcast against x as by jnp.where)."""
    # A factor, and 0 / 0 rather than any select against a NaN constant: vmap
    # over arrays on explicit mesh axes (jax 0.12) refuses a select whose
    # constant case has no mesh, and under jit the batched select's result
    # names a mesh axis the program cannot find.
    keep = 1 - jnp.asarray(failed).astype(x.dtype)
    return x * (keep / keep)


def nan_where_failed(x, info):
    return nan_where(info != 0, x)


def check_on_failure(on_failure):
    if on_failure not in ON_FAILURE:
        raise ValueError(f"jaxmg: on_failure must be one of {ON_FAILURE}, got {on_failure!r}")


def _raise_if_failed(info, element, message):
    if int(info) != 0:
        where = "" if element is None else f", batch element {tuple(map(int, element))}"
        raise LinAlgError(f"{message} (info={int(info)}{where})")


_deferred = threading.local()


def report(info, on_failure: str, message: str, element=None):
    """Acts on a factorisation's info: "nan" leaves the NaN results alone,
    "raise" raises LinAlgError (at once for concrete values; from inside a
    compiled program otherwise), "checkify" records a checkify error.
    element: the batch index info belongs to, named in the error."""
    check_on_failure(on_failure)
    if on_failure == "nan":
        return
    pending = getattr(_deferred, "stack", None)
    if pending and isinstance(info, jax.core.Tracer):
        pending[-1].append((info, on_failure, message))
        return
    if on_failure == "checkify":
        if element is None:
            checkify.check(info == 0, message + " (info={info})", info=info)
        else:
            checkify.check(info == 0, message + " (info={info}, batch element {element})",
                           info=info, element=element)
        return
    if isinstance(info, jax.core.Tracer):
        jax.debug.callback(functools.partial(_raise_if_failed, message=message), info, element,
                           partitioned=True)
    else:
        _raise_if_failed(info, element, message)


@contextlib.contextmanager
def deferred_reports():
    """Collects the (info, on_failure, message) of each report made inside,
    for the batch's caller to act on once its vmap is done: under vmap JAX
    runs a callback per batch element by slicing its arguments, and batches
    checkify's errors with a sort, both of which a batch sharded along its
    batch axis on Explicit mesh axes refuses."""
    stack = _deferred.__dict__.setdefault("stack", [])
    stack.append([])
    try:
        yield stack[-1]
    finally:
        stack.pop()


def report_batch(info, on_failure: str, message: str):
    """report over a batch of infos: the first failure is reported, naming its
    batch element."""
    strides = [math.prod(info.shape[k + 1:]) for k in range(info.ndim)]
    flat = sum(i * stride for i, stride in zip(jnp.indices(info.shape, sparse=True), strides))
    first = jnp.min(jnp.where(info != 0, flat, info.size))
    first_info = jnp.max(jnp.where(flat == first, info, 0))
    element = jnp.stack(jnp.unravel_index(jnp.minimum(first, info.size - 1), info.shape))
    report(first_info, on_failure, message, element)


def reporting(program, on_failure: str, message: str):
    """A plan: the compiled program, then the on_failure action on its info (last output)."""

    def plan(*args):
        *out, info = program(*args)
        report(info, on_failure, message)
        return out[0] if len(out) == 1 else tuple(out)

    return plan
