"""The Hermitian matrix that one triangle of an N x N array holds, used
where it lies, without the mirrored copy (another N x N array, whose pass
costs about three products on a GPU): its product with a vector, its
norms, and its lower block columns for the Cholesky factorisation.

The product runs over block rows of the stored triangle, two reductions
each (the block row itself, and its conjugate transpose for the rows below
the diagonal), so A is read once per product, as a GEMV of the full matrix
reads it. The reductions read their slices of `a` where they lie; a dot
would copy them first.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxmg._src.mixed import blocks as blk, refine as rf

BLOCK_ROWS = 2048  # the product's block rows: the diagonal blocks are read twice
# Measured on an H200 at N=32768: the reductions took 2.7 ms beside the
# mirrored matrix's GEMV's 2.3 ms for one vector, but 7.7 ms beside 2.4 for
# four; the mirror itself takes 6.8 ms. So one vector goes by the triangle,
# more by one mirrored copy.
MAX_COLUMNS = 1


def mirrored(a, upper: bool, rows=None):
    """The whole Hermitian matrix (a copy; `rows`: a placement.Rows to keep
    it row-sharded)."""
    keep = (lambda x: x) if rows is None else rows.rows

    i = lax.broadcasted_iota(jnp.int32, a.shape, 0)
    j = lax.broadcasted_iota(jnp.int32, a.shape, 1)

    def by_select(a):  # one fused pass on a GPU
        stored = _real_diagonal(a, i, j)
        return keep(jnp.where((i <= j) if upper else (i >= j), stored, jnp.conj(keep(a.T))))

    def by_sum(a):  # XLA's CPU compiler takes minutes over that select at N=512, crashes at 1024
        kept, strict = (jnp.triu(a), jnp.triu(a, 1)) if upper else (jnp.tril(a), jnp.tril(a, -1))
        return keep(_real_diagonal(kept, i, j) + jnp.conj(keep(strict.T)))

    return lax.platform_dependent(a, cpu=by_sum, default=by_select)


def product(a, x, upper: bool):
    """A x for the Hermitian A of a's `upper` (or lower) triangle; x: (N, K),
    K at most MAX_COLUMNS (the reductions read a once per column of x)."""
    y = jnp.zeros_like(x)
    for o, part, on, strict, along_rows, across_rows in _blocks(a, upper):
        along = jnp.sum(jnp.where(on, part, 0)[:, :, None] * x[o : o + part.shape[1]][None], axis=1)
        across = jnp.sum(jnp.conj(jnp.where(strict, part, 0))[:, :, None]
                         * x[o : o + part.shape[0]][:, None], axis=0)
        y = y.at[o : o + along_rows].add(along.astype(y.dtype))
        y = y.at[o : o + across_rows].add(across.astype(y.dtype))
    return y


def norms(a, upper: bool):
    """refine.norms of the Hermitian A: its rows' absolute and squared sums
    in one reduction per block, over the stored triangle."""
    n = a.shape[0]
    real = jnp.finfo(a.dtype).dtype
    sums = [jnp.zeros((n,), real), jnp.zeros((n,), real)]
    zero = jnp.zeros((), real)

    def add(x, y):
        return x[0] + y[0], x[1] + y[1]

    for o, part, on, strict, along_rows, across_rows in _blocks(a, upper):
        size = jnp.abs(part)
        for mask, axis, count in ((on, 1, along_rows), (strict, 0, across_rows)):
            kept = jnp.where(mask, size, zero)
            total, squares = lax.reduce((kept, kept * kept), (zero, zero), add, (axis,))
            sums[0] = sums[0].at[o : o + count].add(total)
            sums[1] = sums[1].at[o : o + count].add(squares)
    return rf.norms_of(sums[0], jnp.sqrt(sums[1]), a.dtype)


def lower_column(a, o: int, w: int, upper: bool):
    """Rows o.. of block column o..o+w-1 of A's lower triangle (the diagonal
    block's strict upper part is not A's)."""
    return jnp.conj(a[o : o + w, o:]).T if upper else a[o:, o : o + w]


def _real_diagonal(x, i, j):
    """x with the imaginary part of its (i == j) diagonal dropped: a
    Hermitian matrix's diagonal is real, and the Cholesky factorisations
    (LAPACK's, cuSOLVER's) read only its real part."""
    if not jnp.iscomplexobj(x):
        return x
    return jnp.where(i == j, x.real.astype(x.dtype), x)


def _blocks(a, upper: bool):
    """Per block of BLOCK_ROWS: upper: the block row from the diagonal on,
    whose entries are A's rows there and, conjugated, A's columns; lower: the
    block column the other way round. Yields (o, the part, the mask of A's
    entries "along" it and of the strict ones "across" it, how many rows of
    A from o each updates)."""
    n = a.shape[0]
    for o, w in blk.partition(n, BLOCK_ROWS):
        part = a[o : o + w, o:] if upper else a[o:, o : o + w]
        i = lax.broadcasted_iota(jnp.int32, part.shape, 0)
        j = lax.broadcasted_iota(jnp.int32, part.shape, 1)
        on, strict = (j >= i, j > i) if upper else (i >= j, i > j)
        yield (o, _real_diagonal(part, i, j), on, strict) + ((w, n - o) if upper else (n - o, w))
