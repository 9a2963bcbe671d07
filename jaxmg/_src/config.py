"""Settings every layer reads: the element types the solvers take, the default
tile, and the rendezvous timeout from the environment."""

from __future__ import annotations

import math
import os

import jax.numpy as jnp
import numpy as np

SUPPORTED_DTYPES = (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)
SUPPORTED = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)
DEFAULT_TILE = 1024

TIMEOUT_VARIABLE = "JAXMG_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0
# A deadline must be at least a millisecond (the library counts in ms) and
# fit comfortably in a 64-bit count of them.
_TIMEOUT_RANGE_S = (1e-3, 1e9)


def timeout_ms() -> int:
    """How long a participant waits for the others to arrive at a call."""
    raw = os.environ.get(TIMEOUT_VARIABLE, "")
    if not raw:
        return int(DEFAULT_TIMEOUT_S * 1000)
    fix = f"unset it or set e.g. {TIMEOUT_VARIABLE}=60 (the default is {DEFAULT_TIMEOUT_S:g})"
    try:
        seconds = float(raw)
        if math.isnan(seconds):
            raise ValueError
    except ValueError:
        raise ValueError(
            f"jaxmg: {TIMEOUT_VARIABLE}={raw!r} is not a number of seconds; {fix}"
        ) from None
    low, high = _TIMEOUT_RANGE_S
    if not seconds > 0:
        raise ValueError(f"jaxmg: {TIMEOUT_VARIABLE}={raw!r} must be positive; {fix}")
    if not (math.isfinite(seconds) and low <= seconds <= high):
        raise ValueError(
            f"jaxmg: {TIMEOUT_VARIABLE}={raw!r} must be between {low:g} and {high:g} seconds; "
            f"{fix}"
        )
    return max(1, round(seconds * 1000))
