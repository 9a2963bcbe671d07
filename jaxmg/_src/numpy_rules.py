"""jaxmg's internals are written for JAX's default NumPy rules (rank
promotion "allow", dtype promotion "standard"): a per-column scale of shape
(K,) broadcasts against (N, K), an int32 index meets an int64 one. A caller's
stricter jax_numpy_rank_promotion / jax_numpy_dtype_promotion (JAX's own
tests run under "raise" and "strict") governs the caller's arrays, checked on
entry as JAX's functions check them, not the arithmetic inside."""

from __future__ import annotations

import contextlib
import functools
import threading

import jax

_callers = threading.local()


def callers_rank_promotion() -> str:
    """The caller's jax_numpy_rank_promotion, read inside jaxmg."""
    modes = getattr(_callers, "modes", None)
    return modes[0] if modes else jax.config.jax_numpy_rank_promotion


def callers_dtype_promotion():
    """The caller's dtype promotion rules, for promoting the caller's arrays."""
    modes = getattr(_callers, "modes", None)
    return jax.numpy_dtype_promotion(modes[1] if modes else jax.config.jax_numpy_dtype_promotion)


@contextlib.contextmanager
def _default_rules():
    outermost = getattr(_callers, "modes", None) is None
    if outermost:
        _callers.modes = (jax.config.jax_numpy_rank_promotion,
                          jax.config.jax_numpy_dtype_promotion)
    try:
        with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
            yield
    finally:
        if outermost:
            _callers.modes = None


def default_rules(fn):
    """fn run under JAX's default NumPy rules, the caller's kept for its checks:
    for the public routines, and for derivative rules, which JAX traces later,
    under whatever rules its caller then has."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if (jax.config.jax_numpy_rank_promotion == "allow"
                and jax.config.jax_numpy_dtype_promotion == "standard"):
            return fn(*args, **kwargs)  # the defaults already (nested calls too): no contexts
        with _default_rules():
            return fn(*args, **kwargs)

    return run
