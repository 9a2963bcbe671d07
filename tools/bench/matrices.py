"""Test matrices built where they live: under jax.jit with sharded out_shardings
each device computes only its own rows (or block), with no host copy and no
communication, so orders like 65536 and 131072 can be asked for.

Two families:
- `hashed`: every entry a hash of (row, column, seed). W has entries of variance
  1/N, so its spectrum (symmetric/Hermitian W) or its singular values (general W)
  lie in about [-2, 2] ([0, 2]); W + 3 I has a condition number of at most about 5.
- `conditioned`: a prescribed 2-norm condition number, for the mixed-precision
  rows. A = G G^T with G = S diag(sqrt(s)) (SPD), or A = S diag(+-s) S[p, :]
  (general), where S is the orthonormal DST-I matrix (dense, symmetric,
  S S = I, every entry known in closed form) and s runs geometrically from 1 down
  to 1/cond in a random order. The singular values of A are s, so ||A||_2 = 1 and
  cond_2(A) = cond before rounding. Each device needs all of S's N x N beside its
  share of A.
"""

from __future__ import annotations

import math

SHIFT = 3.0  # A = W + SHIFT I: W's spectrum (or singular values) lies in [-2, 2] ([0, 2])
KINDS = ("spd", "wigner", "general")


def _mix32(x):
    """The lowbias32 integer finaliser: a bijection on uint32 that scrambles all bits."""
    import jax.numpy as jnp

    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _uniform(lo, hi, salt, real_dtype):
    """Pseudo-random numbers in [-1, 1), one per (lo, hi) index pair (uint32 arrays)."""
    import jax.numpy as jnp

    h = _mix32(_mix32(lo * jnp.uint32(0x9E3779B1) + salt)
               ^ _mix32(hi * jnp.uint32(0x85EBCA77) + (salt ^ jnp.uint32(0x5BD1E995))))
    return (h >> 8).astype(real_dtype) * (2.0 ** -23) - 1


def hashed(n: int, dtype: str, kind: str, seed):
    """An N x N test matrix whose every entry is a hash of (its row, its column, seed).

    kind: "spd" W + 3 I with W symmetric/Hermitian; "wigner" W itself (for syevd);
    "general" W + 3 I with W's entries independent (not symmetric; for LU).
    """
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype)
    real = jnp.finfo(dtype).dtype
    is_complex = jnp.issubdtype(dtype, jnp.complexfloating)
    i = jax.lax.broadcasted_iota(jnp.uint32, (n, n), 0)
    j = jax.lax.broadcasted_iota(jnp.uint32, (n, n), 1)
    lo, hi = (i, j) if kind == "general" else (jnp.minimum(i, j), jnp.maximum(i, j))
    salt = _mix32(jnp.asarray(seed).astype(jnp.uint32))
    # Uniform on [-1, 1) has variance 1/3; complex entries split it between parts.
    scale = math.sqrt(3.0 / (2 * n if is_complex else n))
    a = _uniform(lo, hi, salt, real) * scale
    if is_complex:
        imag = _uniform(lo, hi, salt ^ jnp.uint32(0xC2B2AE35), real) * scale
        if kind != "general":  # Hermitian: conjugate below the diagonal, real on it
            imag = jnp.where(i > j, -imag, jnp.where(i == j, 0, imag))
        a = jax.lax.complex(a, imag)
    if kind != "wigner":
        a = jnp.where(i == j, a + SHIFT, a)
    return a.astype(dtype)


def singular_values(n: int, cond: float):
    """1 = s_0 > s_1 > ... > s_{N-1} = 1/cond, geometrically spaced (float64)."""
    import jax.numpy as jnp

    if n == 1:
        return jnp.ones((1,), jnp.float64)
    return jnp.asarray(cond, jnp.float64) ** (-jnp.arange(n, dtype=jnp.float64) / (n - 1))


def _dst(rows, cols, n: int):
    """The orthonormal DST-I matrix's entries S[rows, cols] (int64 index arrays):
    sqrt(2 / (N + 1)) sin(pi (i + 1)(j + 1) / (N + 1)), the product reduced modulo
    2 (N + 1) first, so the sine's argument stays below 2 pi and keeps its accuracy."""
    import jax.numpy as jnp

    period = 2 * (n + 1)
    k = ((rows + 1) * (cols + 1)) % period
    return math.sqrt(2.0 / (n + 1)) * jnp.sin(jnp.pi * k.astype(jnp.float64) / (n + 1))


def conditioned(n: int, dtype: str, kind: str, cond: float, seed):
    """An N x N matrix with 2-norm condition number `cond` (see the module's text).

    kind "spd": symmetric/Hermitian positive definite, eigenvalues s (for potrs);
    "general": not symmetric, singular values s (for LU). Built in float64 and
    rounded to `dtype` once, so in float32 a cond near 1/eps is only approximate.
    Needs jax_enable_x64 (the indices are int64, the product float64).
    """
    import jax
    import jax.numpy as jnp

    if kind not in ("spd", "general"):
        raise ValueError(f"conditioned matrices are 'spd' or 'general', not {kind!r}")
    if not cond >= 1:
        raise ValueError(f"a condition number is at least 1, got {cond!r}")
    if not jax.config.jax_enable_x64:
        raise ValueError("conditioned matrices need jax_enable_x64 (float64 and int64 indices)")
    key = jax.random.key(jnp.asarray(seed, jnp.uint32))
    order_key, sign_key, row_key = jax.random.split(key, 3)
    s = jax.random.permutation(order_key, singular_values(n, cond))
    i = jax.lax.broadcasted_iota(jnp.int64, (n, n), 0)
    j = jax.lax.broadcasted_iota(jnp.int64, (n, n), 1)
    s_matrix = _dst(i, j, n)
    if kind == "spd":
        # G G^T with G = S diag(sqrt(s)): G's row i against G's row j, the same
        # products for (i, j) and (j, i).
        root = jnp.sqrt(s)
        left, right = s_matrix * root[None, :], s_matrix * root[:, None]  # S = S^T
    else:
        signs = jnp.where(jax.random.bernoulli(sign_key, 0.5, (n,)), 1.0, -1.0)
        rows = jax.random.permutation(row_key, n)
        left = s_matrix * (signs * s)[None, :]
        right = _dst(rows[i], j, n)  # S with its rows permuted: another orthogonal matrix
    a = jnp.matmul(left, right, precision=jax.lax.Precision.HIGHEST)
    return a.astype(dtype)
