"""Blocked LU factorisation with partial pivoting, P A = L U, whose trailing
updates are GEMMs at a chosen, lower precision: each nb-wide panel is
factored by JAX's own LU (cuSOLVER getrf on a GPU) at the panel precision,
its row interchanges applied to the other block columns (2 nb rows each),
U12 by a unit-lower triangular solve, and A22 -= L21 U12 at the update
precision. The factor is kept as its block columns (all N rows).

Variants: "right" (one GEMM per later block column, each updated in place)
and "right_full" (the whole trailing matrix as one GEMM, then split).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from jaxmg._src.mixed import precision
from jaxmg._src.mixed import blocks as blk, placement

VARIANTS = ("right", "right_full")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("columns", "lower_inverses", "upper_inverses", "pivots", "permutation", "scale"),
    meta_fields=("rows",),
)
@dataclasses.dataclass(frozen=True)
class LUFactor:
    """P (scale * A) = L U by block columns of the packed factor (unit L
    below the diagonal, U on and above it), each with all N rows.

    lower_inverses[j], upper_inverses[j]: the inverses of the diagonal
    blocks of L and U. pivots: LAPACK's row interchanges (0-based, as
    jax.scipy.linalg.lu_factor's). permutation: row i of P A is row
    permutation[i] of A.
    """

    columns: tuple
    lower_inverses: tuple
    upper_inverses: tuple
    pivots: jax.Array
    permutation: jax.Array
    scale: jax.Array
    rows: placement.Rows

    @property
    def n(self) -> int:
        return self.columns[0].shape[0]

    @property
    def dtype(self):
        return self.columns[0].dtype


def lu(
    a,
    *,
    block_size: int = 2048,
    update: str = "bf16",
    panel: str = "float32",
    variant: str = "right",
    panel_solve: str = "trsm",
    span: int | None = None,
    scale=None,
    mesh=None,
    axis: str | None = None,
):
    """The LU factorisation with partial pivoting of `a` (N x N), trailing
    updates at precision `update`.

    Returns (LUFactor, info): info 0, or k > 0 when U(k, k) (1-based) is
    zero or not finite, the first such (the factor is then not usable).
    Never raises inside jit. `scale` (default 1) multiplies `a` first.
    `span` as for the Cholesky (blocks.Config). With `a` row-sharded the
    block columns stay row-sharded; each panel is factored whole on every
    device.
    """
    blk.check_matrix(a)
    cfg = blk.config(
        a.dtype, block_size=block_size, update=update, panel=panel, variant=variant,
        panel_solve=panel_solve, variants=VARIANTS, bounded=False, span=span,
    )
    rows = placement.resolve(a, mesh, axis)
    scale = jnp.ones((), jnp.finfo(a.dtype).dtype) if scale is None else scale
    return _lu(a, scale, cfg=cfg, rows=rows)


@precision.jit(static_argnames=("cfg", "rows"))
def _lu(a, scale, *, cfg: blk.Config, rows: placement.Rows):
    parts = blk.partition(a.shape[0], cfg.block_size)
    row = P(rows.axis, None)
    whole = tuple(P() for _ in parts)
    out_specs = (LUFactor(tuple(row for _ in parts), whole, whole, P(), P(), P(), rows), P())
    return placement.call(rows, functools.partial(_factor, cfg=cfg, rows=rows), out_specs, a, scale)


def _factor(a, scale, *, cfg: blk.Config, rows: placement.Rows):
    n = a.shape[0]
    work = blk.work_dtype(a.dtype, cfg.panel)
    parts = blk.partition(n, cfg.block_size)
    cols = [rows.rows((a[:, o : o + w] * scale.astype(a.dtype)).astype(work)) for o, w in parts]
    r = rows.row_index(0, n)
    lower_inverses, upper_inverses, pivots = [], [], []
    info = jnp.zeros((), jnp.int32)
    for j, (o, w) in enumerate(parts):
        lu_p, piv_p, perm_p = lax.linalg.lu(rows.whole(cols[j][o:]))
        pivots.append(o + piv_p)
        diag = jnp.diagonal(lu_p[:w])
        bad = (diag == 0) | ~jnp.isfinite(diag)
        info = jnp.where((info == 0) & jnp.any(bad), o + 1 + jnp.argmax(bad), info).astype(jnp.int32)
        l11 = lu_p[:w]
        linv = blk.inverse_lower(l11, unit_diagonal=True)
        lower_inverses.append(linv)
        upper_inverses.append(blk.inverse_upper(l11))  # reads U, the upper triangle
        cols[j] = _set_rows(cols[j], lu_p, o, rows, r)

        for k in range(len(parts)):
            if k != j:
                cols[k] = _interchange(cols[k], o, piv_p, perm_p, rows)

        rest = list(enumerate(parts[j + 1 :], start=j + 1))
        if not rest:
            break
        widths = [wc for _, (_, wc) in rest]
        top = jnp.concatenate([rows.whole(cols[k][o : o + w]) for k, _ in rest], axis=1)
        if cfg.panel_solve == "trsm":
            u = lax.linalg.triangular_solve(l11, top, left_side=True, lower=True, unit_diagonal=True)
        else:
            u = blk.update_product(linv, top, cfg, adjoint_y=False)
        u12 = dict(zip((k for k, _ in rest), jnp.split(u, np.cumsum(widths)[:-1], axis=1)))
        for k, _ in rest:
            cols[k] = _set_rows(cols[k], u12[k], o, rows, r)
        if rows.sharded:
            l21 = rows.rows(jnp.where(r >= o + w, jnp.pad(lu_p, ((o, 0), (0, 0))), 0))
        else:
            l21 = lu_p[w:]
        if cfg.variant == "right":
            for k, _ in rest:
                g = blk.update_product(l21, u12[k], cfg, adjoint_y=False)
                cols[k] = _subtract_below(cols[k], g, o + w, rows)
        else:
            g = blk.update_product(l21, u, cfg, adjoint_y=False)
            for k, (oc, wc) in rest:
                cols[k] = _subtract_below(cols[k], g[:, oc - o - w : oc - o - w + wc], o + w, rows)
    pivots = jnp.concatenate(pivots).astype(jnp.int32)
    permutation = lax.linalg.lu_pivots_to_permutation(pivots, n)
    f = LUFactor(tuple(cols), tuple(lower_inverses), tuple(upper_inverses), pivots, permutation, scale, rows)
    return f, info


def _interchange(col, o: int, piv, perm, rows: placement.Rows):
    """col with the panel's row interchanges applied to its rows o..

    Unsharded, rows o.. are gathered whole in their new order: scattering
    only the 2 nb touched rows, whose indices may repeat, is a scatter XLA
    cannot prove unique and runs serially; on one H200 the N=32768 factor
    took 456 ms with it and 377 ms with the gather.
    Row-sharded, only the touched rows move, so no shard gathers all."""
    if not rows.sharded:
        return lax.dynamic_update_slice_in_dim(col, col[o:].at[perm].get(mode="promise_in_bounds"), o, 0)
    touched = o + jnp.concatenate([jnp.arange(piv.shape[0], dtype=piv.dtype), piv])
    source = o + perm[touched - o]
    return rows.rows(col.at[touched].set(col[source]))


def _set_rows(col, values, o: int, rows: placement.Rows, r):
    """col with rows o.. o+len(values)-1 replaced by values."""
    if not rows.sharded:
        return col.at[o : o + values.shape[0]].set(values)
    padded = rows.rows(jnp.pad(values, ((o, col.shape[0] - o - values.shape[0]), (0, 0))))
    return rows.rows(jnp.where((r >= o) & (r < o + values.shape[0]), padded, col))


def _subtract_below(col, g, o: int, rows: placement.Rows):
    """col minus g on its rows o.. (g: those rows; sharded: all rows, zero above o)."""
    if not rows.sharded:
        return col.at[o:].add(-g)
    return rows.rows(col - g)


def solve(f: LUFactor, b, *, adjoint: bool = False):
    """A^{-1} b (adjoint: A^{-H} b) at the factor's precision, by block
    triangular sweeps (GEMVs with the block columns and the inverses of the
    diagonal blocks). b: (N, K); returns the factor's dtype."""
    return _solve(f, b, adjoint=adjoint)


@precision.jit(static_argnames=("adjoint",))
def _solve(f: LUFactor, b, *, adjoint: bool):
    return placement.call(f.rows, functools.partial(_sweeps, adjoint=adjoint), P(), f, b)


def _sweeps(f: LUFactor, b, *, adjoint: bool = False):
    if adjoint:
        return _adjoint_sweeps(f, b)
    rows = f.rows
    parts = blk.offsets(c.shape[1] for c in f.columns)
    n = b.shape[0]
    r = rows.row_index(0, n)
    y = rows.whole(b.astype(f.dtype)[f.permutation])
    for (o, w), c, linv in zip(parts, f.columns, f.lower_inverses):  # L y = P b
        yj = placement.dot(linv, y[o : o + w])
        y = y.at[o : o + w].set(yj)
        if o + w == n:
            continue
        if rows.sharded:
            y = rows.whole(y - jnp.where(r >= o + w, rows.row_product(c, yj), 0))
        else:
            y = y.at[o + w :].add(-placement.dot(c[o + w :], yj))
    for (o, w), c, uinv in reversed(list(zip(parts, f.columns, f.upper_inverses))):  # U x = y
        xj = placement.dot(uinv, y[o : o + w])
        y = y.at[o : o + w].set(xj)
        if o == 0:
            continue
        if rows.sharded:
            y = rows.whole(y - jnp.where(r < o, rows.row_product(c, xj), 0))
        else:
            y = y.at[:o].add(-placement.dot(c[:o], xj))
    return blk.times_scale(y, f.scale)


def _adjoint_sweeps(f: LUFactor, b):
    """(scale A)^H = U^H L^H P: U^H z = b forward (U's blocks above the
    diagonal are the block columns' top rows), L^H w = z backward, then
    P^T w; the same factor as the direct sweeps, no other."""
    rows = f.rows
    parts = blk.offsets(c.shape[1] for c in f.columns)
    n = b.shape[0]
    r = rows.row_index(0, n)
    y = rows.whole(b.astype(f.dtype))
    for (o, w), c, uinv in zip(parts, f.columns, f.upper_inverses):  # U^H z = b
        t = y[o : o + w]
        if o > 0:
            above = jnp.where(r < o, y, 0) if rows.sharded else y[:o]
            t = t - rows.row_product(c if rows.sharded else c[:o], above, adjoint_x=True)
        y = rows.whole(y.at[o : o + w].set(placement.dot(uinv, t, adjoint_x=True)))
    for (o, w), c, linv in reversed(list(zip(parts, f.columns, f.lower_inverses))):  # L^H w = z
        t = y[o : o + w]
        if o + w < n:
            below = jnp.where(r >= o + w, y, 0) if rows.sharded else y[o + w :]
            t = t - rows.row_product(c if rows.sharded else c[o + w :], below, adjoint_x=True)
        y = rows.whole(y.at[o : o + w].set(placement.dot(linv, t, adjoint_x=True)))
    x = jnp.zeros_like(y).at[f.permutation].set(y)
    return blk.times_scale(rows.whole(x), f.scale)


def dense(f: LUFactor):
    """The packed N x N LU factor (a copy, replicated), as
    jax.scipy.linalg.lu_factor's."""
    return _dense(f)


@precision.jit
def _dense(f: LUFactor):
    packed = lambda f: f.rows.whole(jnp.concatenate(f.columns, axis=1))  # noqa: E731
    return placement.call(f.rows, packed, P(), f)
