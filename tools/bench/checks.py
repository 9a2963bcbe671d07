"""Whether a timed result is right: residuals of every routine's output, and the
normwise backward error of a solve in float64.

The checks read A in row chunks of at most CHECK_CHUNK_BYTES, one device at a
time: a product with all of a large A in one XLA op can run out of memory by
itself (the GPU autotuner copies an operand that size), after the solver it
checks has worked. Only small per-chunk results travel to the host.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterator

FULL_CHECK_MAX_N = 2048  # above this, residuals are sampled on a few rows/columns
SAMPLES = 64
CHECK_CHUNK_BYTES = 256 * 2**20


def tolerance(n: int, dtype) -> float:
    """What a residual may reach: 100 sqrt(N) eps of the dtype."""
    import numpy as np

    return 100.0 * math.sqrt(n) * float(np.finfo(np.dtype(dtype)).eps)


def _samples(n: int) -> Any:
    import numpy as np

    if n <= FULL_CHECK_MAX_N:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, SAMPLES).astype(np.int64))


def check(routine: str, pair: tuple, out) -> float:
    """The residual of `out`, routine's result for the input pair (A, b)."""
    a, b = pair
    if routine in ("potrs", "lu"):
        return check_solve(a, b, out)
    if routine == "potri":
        return check_potri(a, out)
    w, v = out
    return check_syevd(a, w, v)


def _bounds(shard, shape) -> list[tuple[int, int]]:
    return [(sl.start or 0, dim if sl.stop is None else sl.stop) for sl, dim in zip(shard.index, shape)]


def _unique_shards(arr) -> list:
    """One addressable shard per distinct block (replicas are skipped)."""
    seen: dict[tuple, Any] = {}
    for shard in arr.addressable_shards:
        seen.setdefault(tuple(_bounds(shard, arr.shape)), shard)
    return list(seen.values())


def host_select(arr, rows=None, cols=None):
    """arr[rows][:, cols] of a 2-D array, as NumPy, read shard by shard: only the
    selected entries leave the devices, and nothing is gathered across them."""
    import jax.numpy as jnp
    import numpy as np

    rows = np.arange(arr.shape[0]) if rows is None else np.asarray(rows)
    cols = np.arange(arr.shape[1]) if cols is None else np.asarray(cols)
    out = np.empty((len(rows), len(cols)), dtype=arr.dtype)
    for shard in _unique_shards(arr):
        (r0, r1), (c0, c1) = _bounds(shard, arr.shape)
        ri = np.nonzero((rows >= r0) & (rows < r1))[0]
        ci = np.nonzero((cols >= c0) & (cols < c1))[0]
        if not len(ri) or not len(ci):
            continue
        block = shard.data
        if len(ri) < r1 - r0:
            block = block[jnp.asarray(rows[ri] - r0)]
        if len(ci) < c1 - c0:
            block = block[:, jnp.asarray(cols[ci] - c0)]
        out[np.ix_(ri, ci)] = np.asarray(block)
    return out


def _row_chunks(a) -> Iterator[tuple[int, tuple[int, int], Any, Any]]:
    """(first row, (first column, end column), device, chunk): each entry of A once,
    in single-device chunks of whole rows of its block."""
    import jax

    for shard in _unique_shards(a):
        (r0, r1), (c0, c1) = _bounds(shard, a.shape)
        rows_per_chunk = max(1, CHECK_CHUNK_BYTES // ((c1 - c0) * a.dtype.itemsize))
        rows = r1 - r0
        for start in range(0, rows, rows_per_chunk):
            size = min(rows_per_chunk, rows - start)
            chunk = shard.data if size == rows else jax.lax.dynamic_slice_in_dim(shard.data, start, size)
            yield r0 + start, (c0, c1), shard.device, chunk


@functools.cache
def _chunk_terms():
    import jax
    import jax.numpy as jnp

    def terms(chunk, v, target):
        r = jnp.matmul(chunk, v, precision=jax.lax.Precision.HIGHEST) - target
        return jnp.sum(jnp.abs(r) ** 2, axis=0), jnp.sum(jnp.abs(chunk) ** 2)

    return jax.jit(terms)


@functools.cache
def _chunk_product():
    import jax
    import jax.numpy as jnp

    def product(chunk, v):
        return jnp.matmul(chunk, v, precision=jax.lax.Precision.HIGHEST), jnp.sum(jnp.abs(chunk) ** 2)

    return jax.jit(product)


def product_residual(a, v, target) -> tuple[Any, float]:
    """For A (N, N) on the devices, V (N, k) and target(r0, r1) -> (r1 - r0, k) on the
    host: (per column, sum over rows of |A V - target|^2; ||A||_F^2)."""
    import jax
    import numpy as np

    on_device: dict[Any, Any] = {}
    columns, a_squared = np.zeros(v.shape[1]), 0.0
    if any(_bounds(s, a.shape)[1] != (0, a.shape[1]) for s in _unique_shards(a)):
        # A in blocks (--grids): each block's A[rows, cols] V[cols], summed on the host.
        product = _chunk_product()
        av = np.zeros((a.shape[0], v.shape[1]), dtype=np.result_type(a.dtype, np.float64))
        for r0, (c0, c1), device, chunk in _row_chunks(a):
            if (device, c0) not in on_device:
                on_device[device, c0] = jax.device_put(v[c0:c1].astype(a.dtype), device)
            part, a_sq = product(chunk, on_device[device, c0])
            av[r0:r0 + chunk.shape[0]] += np.asarray(part)
            a_squared += float(a_sq)
        columns = np.sum(np.abs(av - np.asarray(target(0, a.shape[0]))) ** 2, axis=0)
        return columns, a_squared
    terms = _chunk_terms()
    for r0, _, device, chunk in _row_chunks(a):
        if device not in on_device:
            on_device[device] = jax.device_put(v.astype(a.dtype), device)
        want = np.asarray(target(r0, r0 + chunk.shape[0]), dtype=a.dtype)
        col, a_sq = terms(chunk, on_device[device], jax.device_put(want, device))
        columns += np.asarray(col, dtype=np.float64)
        a_squared += float(a_sq)
    return columns, a_squared


def check_solve(a, b, x) -> float:
    """||A x - b|| / (||A||_F ||x||)."""
    import numpy as np

    n = a.shape[0]
    x, b = np.asarray(x).reshape(n, -1), np.asarray(b).reshape(n, -1)
    columns, a_squared = product_residual(a, x, lambda r0, r1: b[r0:r1])
    return float(math.sqrt(columns.sum()) / (math.sqrt(a_squared) * np.linalg.norm(x)))


def check_potri(a, inv) -> float:
    """||(X A - I)[rows]||_F / sqrt(rows), as ||A X[rows]^H - I[:, rows]||_F (A is Hermitian)."""
    import numpy as np

    rows = _samples(a.shape[0])
    v = host_select(inv, rows=rows).conj().T
    columns, _ = product_residual(a, v, lambda r0, r1: np.arange(r0, r1)[:, None] == rows[None, :])
    return float(math.sqrt(columns.sum()) / math.sqrt(len(rows)))


def check_syevd(a, w, v, vectors_in_columns: bool = True) -> float:
    """max_j ||A v_j - w_j v_j|| / max|w| over the sampled eigenpairs j."""
    import numpy as np

    cols = _samples(a.shape[0])
    vs = host_select(v, cols=cols) if vectors_in_columns else host_select(v, rows=cols).conj().T
    w = np.asarray(w)
    ws = w[cols]
    columns, _ = product_residual(a, vs, lambda r0, r1: vs[r0:r1] * ws[None, :])
    return float(math.sqrt(columns.max()) / np.max(np.abs(w)))


@functools.cache
def _chunk_product_wide():
    import jax
    import jax.numpy as jnp

    def product(chunk, v):
        wide = chunk.astype(jnp.promote_types(chunk.dtype, jnp.float64))
        return jnp.matmul(wide, v, precision=jax.lax.Precision.HIGHEST), jnp.sum(jnp.abs(wide), axis=1)

    return jax.jit(product)


def backward_error(a, b, x) -> float:
    """The normwise backward error ||b - A x|| / (||A|| ||x|| + ||b||) in infinity
    norms (LAPACK's for iterative refinement), every product in float64 (complex128
    for complex A) whatever A's dtype; the worst over b's columns. Needs
    jax_enable_x64."""
    import jax
    import numpy as np

    if not jax.config.jax_enable_x64:
        raise ValueError("the backward error is computed in float64: turn on jax_enable_x64")
    n = a.shape[0]
    wide = np.result_type(a.dtype, np.float64)
    x = np.asarray(x).reshape(n, -1).astype(wide)
    b = np.asarray(b).reshape(n, -1).astype(wide)
    product = _chunk_product_wide()
    av = np.zeros(x.shape, dtype=wide)
    row_sums = np.zeros(n)
    on_device: dict[Any, Any] = {}
    for r0, (c0, c1), device, chunk in _row_chunks(a):
        if (device, c0) not in on_device:
            on_device[device, c0] = jax.device_put(x[c0:c1], device)
        part, sums = product(chunk, on_device[device, c0])
        av[r0:r0 + chunk.shape[0]] += np.asarray(part)
        row_sums[r0:r0 + chunk.shape[0]] += np.asarray(sums)
    a_norm = row_sums.max()
    residual = np.abs(b - av).max(axis=0)
    scale = a_norm * np.abs(x).max(axis=0) + np.abs(b).max(axis=0)
    errors = residual / scale
    return float(np.nan if np.isnan(errors).any() else errors.max())
