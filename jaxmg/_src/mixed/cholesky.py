"""Blocked Cholesky factorisation A = L L^H (lower triangle read) with the
trailing updates as GEMMs at a chosen, lower precision: the panels are
factored by JAX's own Cholesky and triangular solve (cuSOLVER/cuBLAS on a
GPU) at the panel precision, and the factor is kept as its block columns,
which the triangular sweeps of the solve read without copies.

Variants (the same factor up to rounding):
- "left": left-looking. Block column j is updated once, by one GEMM of
  (N - o_j) x nb x o_j against the factor to its left: only the blocks on
  and below the diagonal are computed (SYRK's flops, N^3/3 in all), and the
  big operand is read, never written.
- "right": right-looking, one GEMM per later block column (also SYRK's
  flops, but nb-deep GEMMs and a read-modify-write of the trailing matrix
  per step).
- "right_full": right-looking with the whole trailing square as one GEMM
  (twice the flops; the form of a first sketch, kept for comparison).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from jaxmg._src.mixed import precision
from jaxmg._src.mixed import blocks as blk, hermitian, placement

VARIANTS = ("left", "right", "right_full")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("diagonals", "inverses", "below", "scale"),
    meta_fields=("rows",),
)
@dataclasses.dataclass(frozen=True)
class CholeskyFactor:
    """L of scale * A = L L^H by blocks of nb columns.

    diagonals[j]: the diagonal block L_jj; inverses[j]: its inverse.
    below[j]: the rows of block column j under the diagonal block, rows
    o_j + nb..N-1 (one device) or all N rows, zero elsewhere (rows sharded),
    so that the triangular sweeps read them without slicing. scale: the
    power of two A was multiplied by before it was rounded.
    """

    diagonals: tuple
    inverses: tuple
    below: tuple
    scale: jax.Array
    rows: placement.Rows

    @property
    def n(self) -> int:
        return sum(d.shape[0] for d in self.diagonals)

    @property
    def dtype(self):
        return self.diagonals[0].dtype


def cholesky(
    a,
    *,
    block_size: int = 2048,
    update: str = "bf16",
    panel: str = "float32",
    variant: str = "left",
    panel_solve: str = "trsm",
    span: int | None = None,
    scale=None,
    mesh=None,
    axis: str | None = None,
):
    """The lower Cholesky factor of `a` (N x N, Hermitian positive definite,
    its lower triangle read), trailing updates at precision `update`.

    Returns (CholeskyFactor, info): info 0, or the order k of the first
    leading minor the low-precision factorisation found not positive
    definite (the factor is then not finite). Never raises inside jit.
    `scale` (a scalar, default 1) multiplies `a` first. `span`: the most
    terms one update GEMM sums on the tensor cores (blocks.Config). With
    `a` row-sharded (P(axis, None) on `mesh`, or inferred from its
    sharding) the block columns stay row-sharded.
    """
    blk.check_matrix(a)
    cfg = blk.config(
        a.dtype, block_size=block_size, update=update, panel=panel, variant=variant,
        panel_solve=panel_solve, variants=VARIANTS, span=span,
    )
    rows = placement.resolve(a, mesh, axis)
    scale = jnp.ones((), jnp.finfo(a.dtype).dtype) if scale is None else scale
    return _cholesky(a, scale, cfg=cfg, rows=rows)


@precision.jit(static_argnames=("cfg", "rows", "upper"))
def _cholesky(a, scale, *, cfg: blk.Config, rows: placement.Rows, upper: bool = False):
    out_specs = (factor_specs(a.shape[0], cfg.block_size, rows), P())
    body = functools.partial(_factor, cfg=cfg, rows=rows, upper=upper)
    return placement.call(rows, body, out_specs, a, scale)


def factor_specs(n: int, block_size: int, rows: placement.Rows) -> CholeskyFactor:
    """Where a factored CholeskyFactor's parts live (placement.call's
    out_specs): the diagonal blocks and their inverses on every device,
    the block columns below them row-sharded."""
    parts = blk.partition(n, block_size)
    whole = tuple(P() for _ in parts)
    return CholeskyFactor(whole, whole, tuple(P(rows.axis, None) for _ in parts), P(), rows)


def _factor(a, scale, *, cfg: blk.Config, rows: placement.Rows, upper: bool = False):
    """upper (one device): a holds A in its upper triangle, read as the
    lower block columns' conjugate transposes."""
    work = blk.work_dtype(a.dtype, cfg.panel)
    parts = blk.partition(a.shape[0], cfg.block_size)

    def column(o, w):  # sharded: all rows (placement.Rows.start)
        c = a[:, o : o + w] if rows.sharded else hermitian.lower_column(a, o, w, upper)
        return rows.rows((c * scale.astype(a.dtype)).astype(work))

    failure = blk.FirstFailure.none(parts[0][1], work)
    if cfg.variant == "left":
        stops = stop_points(len(parts))

        def columns_from(first, done, failure):
            """Factors block columns first, first + 1, ..., the rows below the
            diagonal of those to their left being `done`. Returns the new
            columns' diagonal blocks, their inverses, their rows below and the
            failure so far; from a stop on, if a block has already failed,
            the remaining columns are NaN, not factored."""
            new = ([], [], [])
            for k in range(first, len(parts)):
                o, w = parts[k]
                if k > first and k in stops:
                    skip = functools.partial(_not_factored, parts[k:], a.shape[0], work, rows)
                    rest = lax.cond(_all(failure.offset_plus_one > 0), skip,
                                    functools.partial(columns_from, k), done + new[2], failure)
                    return (*(mine + theirs for mine, theirs in zip(new, rest[:3])), rest[3])
                c = column(o, w)
                if done or new[2]:
                    s = rows.start(o)
                    left = [p[s - rows.start(op + wp) :] for p, (op, wp) in zip(done + new[2], parts)]
                    x = rows.rows(jnp.concatenate(left, axis=1))
                    y = rows.whole(x[o - s : o - s + w])
                    c = c - blk.update_product(x, y, cfg, adjoint_y=True)
                l11, inv, l21, failure = _panel(c, o, w, cfg, rows, failure)
                for pieces, piece in zip(new, (l11, inv, l21)):
                    pieces.append(piece)
            return (*new, failure)

        diagonals, inverses, below, failure = columns_from(0, [], failure)
    else:
        diagonals, inverses, below = [], [], []

        def factor_panel(c, o, w, failure):
            l11, inv, l21, failure = _panel(c, o, w, cfg, rows, failure)
            diagonals.append(l11)
            inverses.append(inv)
            below.append(l21)
            return l21, failure

        columns = [column(o, w) for o, w in parts]
        for j, (o, w) in enumerate(parts):
            p, failure = factor_panel(columns[j], o, w, failure)
            columns[j] = None
            rest = parts[j + 1 :]
            s = rows.start(o + w)  # p's first row
            if cfg.variant == "right":
                for k, (oc, wc) in enumerate(rest, start=j + 1):
                    x = p[rows.start(oc) - s :]
                    y = rows.whole(p[oc - s : oc - s + wc])
                    columns[k] = columns[k] - blk.update_product(x, y, cfg, adjoint_y=True)
            elif rest:
                g = rows.rows(blk.update_product(p, rows.whole(p[o + w - s :]), cfg, adjoint_y=True))
                for k, (oc, wc) in enumerate(rest, start=j + 1):
                    columns[k] = columns[k] - g[rows.start(oc) - s :, oc - o - w : oc - o - w + wc]
    info = failure.info(_first_nonpositive_pivot)
    factor = CholeskyFactor(tuple(diagonals), tuple(inverses), tuple(below), scale, rows)
    return factor, info


# A stop before every STOP_EVERY-th block column (0: none): where a diagonal
# block has failed, the left-looking factorisation factors no more columns,
# whose work would be lost (a failed factorisation is not used). Every
# left-looking factorisation has them: the mixed SPD solve's, that of
# G = A^H A for general solves, the float64 one of the sharded fallback.
# Each stop is one test on the host (XLA's conditional reads its predicate
# there). On one H100 (docs/benchmarks.md) a stop before every column cost
# the SPD solve 0.3 and 0.7 ms at N=16384 and 32768 where nothing failed,
# and saved 4 to 30 ms where FP16 failed (cond 1e6, 1e8).
STOP_EVERY = 1


def stop_points(count: int) -> frozenset:
    """The block columns (of `count`) before which the factorisation stops
    if one has failed."""
    return frozenset(range(STOP_EVERY, count, STOP_EVERY)) if STOP_EVERY else frozenset()


@jax.custom_batching.custom_vmap
def _all(failed):
    """failed; under vmap, whether the factorisation failed for every matrix
    of the batch: one predicate, so that a stop stays a conditional (a
    batched one would become a select, computing both branches and copying
    every later column through each stop's select)."""
    return failed


@_all.def_vmap
def _all_vmap(axis_size, in_batched, failed):
    del axis_size
    return (jnp.all(failed) if in_batched[0] else failed), False


def _not_factored(parts, n: int, dtype, rows: placement.Rows, done, failure):
    """What columns_from returns for block columns it does not factor: NaN
    (with rows sharded, in the rows above the diagonal block too; the
    factor of a failed factorisation is never solved with)."""
    nan = jnp.array(jnp.nan, dtype)
    diagonals = [jnp.full((w, w), nan) for _, w in parts]
    below = [rows.rows(jnp.full((n - rows.start(o + w), w), nan)) for o, w in parts]
    return diagonals, list(diagonals), below, failure


def _panel(c, o: int, w: int, cfg: blk.Config, rows: placement.Rows, failure):
    """Factors the updated block column c (stored from row rows.start(o)):
    its diagonal block (rows o..o+w-1) by Cholesky, the rows below by a
    triangular solve (or the diagonal block's inverse). Returns (L_jj, its
    inverse, the rows below as stored, failure)."""
    s = rows.start(o)
    l11 = lax.linalg.cholesky(rows.whole(c[o - s : o - s + w]), symmetrize_input=False)
    failure = failure.record(did_not_factor(l11), o, rows.whole(c[o - s : o - s + w]))
    inv = blk.inverse_lower(l11)
    rest = c if rows.sharded else c[w:]
    if cfg.panel_solve == "trsm":
        l21 = rows.map_rows(_right_solve_adjoint, rest, l11)
    else:
        scaled, powers = blk.rows_in_range(inv)  # L21 = C21 inv^H = (C21 (S inv)^H) S^-1
        l21 = blk.update_product(rest, scaled, cfg, adjoint_y=True)
        l21 = l21 * (1 / powers)[None, :].astype(rest.dtype)
    if rows.sharded:
        l21 = jnp.where(rows.row_index(0, c.shape[0]) >= o + w, l21, jnp.zeros((), l21.dtype))
    return l11, inv, rows.rows(l21), failure


def did_not_factor(l11):
    """Whether JAX's Cholesky factor l11 is a failure (JAX's are NaN then)."""
    return ~jnp.all(jnp.isfinite(jnp.diagonal(l11).real))


def _right_solve_adjoint(c, l11):
    """c L11^{-H}."""
    return lax.linalg.triangular_solve(
        l11, c, left_side=False, lower=True, transpose_a=True, conjugate_a=True
    )


SEARCH_BLOCK = 128


def _first_nonpositive_pivot(d):
    """LAPACK's potrf info for one block (lower triangle read): 1 + the index
    of the first pivot that is not positive. Runs only for a block whose
    factorisation failed. A blocked elimination finds the first sub-block of
    SEARCH_BLOCK whose Cholesky fails, and an unblocked one the pivot within
    it. Unblocked over a whole block of 2048, each pivot was a pass over the
    block: about 32 us on an H100, up to 65 ms a failure, paid by every
    mixed solve whose factorisation fails (docs/benchmarks.md)."""
    w = d.shape[0]
    if w <= SEARCH_BLOCK:
        return _first_nonpositive_pivot_unblocked(d)
    failure = blk.FirstFailure.none(SEARCH_BLOCK, d.dtype)
    for o, s in blk.partition(w, SEARCH_BLOCK):
        d11 = d[o : o + s, o : o + s]
        l11 = lax.linalg.cholesky(d11, symmetrize_input=False)
        failure = failure.record(did_not_factor(l11), o, d11)
        if o + s < w:
            l21 = _right_solve_adjoint(d[o + s :, o : o + s], l11)
            update = jnp.matmul(l21, jnp.conj(l21).T, precision=lax.Precision.HIGHEST)
            d = d.at[o + s :, o + s :].add(-update)  # the upper triangle, never read, too
    return failure.info(_first_nonpositive_pivot_unblocked)


def _first_nonpositive_pivot_unblocked(d):
    """_first_nonpositive_pivot by an unblocked elimination that stops at it."""
    w = d.shape[0]
    m = jnp.tril(d)
    m = m + jnp.conj(jnp.tril(m, -1)).T
    idx = jnp.arange(w)

    def keep_going(state):
        k, _, bad = state
        return (k < w) & (bad == 0)

    def step(state):
        k, m, _ = state
        pivot = m[k, k].real
        ok = pivot > 0
        col = jnp.where(idx > k, m[:, k], 0) / jnp.sqrt(jnp.where(ok, pivot, 1)).astype(m.dtype)
        m = m - col[:, None] * jnp.conj(col)[None, :]
        return k + 1, m, jnp.where(ok, 0, k + 1).astype(jnp.int32)

    _, _, bad = lax.while_loop(keep_going, step, (jnp.zeros((), jnp.int32), m, jnp.zeros((), jnp.int32)))
    return bad


def solve(f: CholeskyFactor, b):
    """(scale A)^{-1} b * scale = A^{-1} b at the factor's precision, by
    block triangular sweeps (GEMVs with the block columns and the inverses
    of the diagonal blocks). b: (N, K); returns the factor's dtype (the
    scale's, where wider: blocks.times_scale)."""
    return _solve(f, b)


@precision.jit
def _solve(f: CholeskyFactor, b):
    return placement.call(f.rows, _sweeps, P(), f, b)


def _sweeps(f: CholeskyFactor, b):
    rows = f.rows
    blocks = list(zip(blk.offsets(d.shape[0] for d in f.diagonals), f.inverses, f.below))
    n = b.shape[0]
    y = rows.whole(b.astype(f.dtype))
    for (o, w), inv, l21 in blocks:  # L y = b
        yj = placement.dot(inv, y[o : o + w])
        y = y.at[o : o + w].set(yj)
        if o + w < n:
            if rows.sharded:
                y = rows.whole(y - rows.row_product(l21, yj))
            else:
                y = y.at[o + w :].add(-placement.dot(l21, yj))
    for (o, w), inv, l21 in reversed(blocks):  # L^H x = y
        t = y[o : o + w]
        if o + w < n:
            rest = y if rows.sharded else y[o + w :]
            t = t - rows.row_product(l21, rest, adjoint_x=True)
        y = rows.whole(y.at[o : o + w].set(placement.dot(inv, t, adjoint_x=True)))
    return blk.times_scale(y, f.scale)


def dense(f: CholeskyFactor):
    """L as one N x N lower-triangular matrix (a copy, replicated)."""
    return _dense(f)


@precision.jit
def _dense(f: CholeskyFactor):
    return placement.call(f.rows, _assemble, P(), f)


def _assemble(f: CholeskyFactor):
    rows = f.rows
    cols = []
    for (o, w), l11, l21 in zip(blk.offsets(d.shape[0] for d in f.diagonals), f.diagonals, f.below):
        top = jnp.zeros((o, w), l11.dtype)
        rest = l21[o + w :] if rows.sharded else l21
        cols.append(jnp.concatenate([top, l11, rows.whole(rest)], axis=0))
    return rows.whole(jnp.concatenate(cols, axis=1))
