"""A CPU model of the cuSOLVERMp calls' contract, for testing the mp
engine's Python side without GPUs: each rank's handler gets its local
matrices in the 2-D block-cyclic layout (read column-major, on a C x R grid
numbered column-major) and must leave in its outputs what the library
leaves there. The model gathers the global matrices, runs JAX's solver and
hands every rank its own part back; right-hand sides are read from, and
written to, the grid's first column of ranks only, and LU pivots are kept
per local column, as cuSOLVERMp 0.8 does (seen on the H200: its ipiv is
not ScaLAPACK's per-row array). Ranks the library leaves alone get values
here that must never be read."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from jaxmg._src import cyclic


def _index(placement):
    r, c = cyclic.grid(placement)
    i = jax.lax.axis_index(placement.axes[0]).astype(jnp.int32)
    j = jax.lax.axis_index(placement.axes[1:]).astype(jnp.int32) if c > 1 else jnp.int32(0)
    return r, c, i, j


def _gather(blk, placement, t, rows, cols):
    """The global matrix (as JAX sees it, M) from every rank's cyclic block."""
    r, c, _, _ = _index(placement)
    blocks = jax.lax.all_gather(blk, placement.axes, tiled=False)
    lr, lc = blk.shape
    m = blocks.reshape(r, c, lr, lc).transpose(0, 2, 1, 3).reshape(r * lr, c * lc)
    ro, co = cyclic.row_order(rows, t, r), cyclic.row_order(cols, t, c)
    return m[np.argsort(ro)][:, np.argsort(co)]


def _scatter(m, placement, t, shape):
    """This rank's cyclic block of the global M."""
    r, c, i, j = _index(placement)
    ro, co = cyclic.row_order(m.shape[0], t, r), cyclic.row_order(m.shape[1], t, c)
    return jax.lax.dynamic_slice(m[ro][:, co], (i * shape[0], j * shape[1]), shape)


def _rhs(bt, placement, t, n):
    """B (n x k) from the first grid column's ranks (mesh row 0)."""
    r, c, _, _ = _index(placement)
    every = jax.lax.all_gather(bt, placement.axes, tiled=False)  # (r * c, k, n / c)
    first = every.reshape(r, c, *bt.shape)[0]  # mesh row 0: grid column 0
    b_cyc = first.transpose(1, 0, 2).reshape(bt.shape[0], n)
    return b_cyc[:, np.argsort(cyclic.row_order(n, t, c))].T


def _rhs_out(x, bt, placement, t):
    r, c, i, j = _index(placement)
    n = x.shape[0]
    mine = x.T[:, cyclic.row_order(n, t, c)].reshape(bt.shape[0], c, -1)
    mine = jnp.take(mine, j, axis=1)
    return jnp.where(i == 0, mine, bt)


def fake_call(routine, placement, operands, results, *, block, aliases=None):
    t = block
    r, c, i, j = _index(placement)
    blk = operands[0]
    n_s = blk.shape[0] * r  # S = M^T: its columns are M's rows
    m_s = blk.shape[1] * c
    s = _gather(blk, placement, t, n_s, m_s).T  # the matrix cuSOLVERMp sees
    zero = jnp.zeros((1,), jnp.int32)
    if routine == "potrf":
        low = jnp.linalg.cholesky(s)
        bad = jnp.isnan(jnp.diagonal(low))
        info = jnp.where(bad.any(), jnp.argmax(bad) + 1, 0).astype(jnp.int32)[None]
        out = jnp.tril(low) + jnp.triu(s, 1)
        return _scatter(out.T, placement, t, blk.shape), info
    if routine == "potrs":
        bt = operands[1]
        b = _rhs(bt, placement, t, n_s)
        x = jsl.cho_solve((jnp.tril(s), True), b)
        return (_rhs_out(x, bt, placement, t),)
    if routine == "getrf":
        # A pivot per local column: rank (i, j) holds those of S's column
        # tiles on its grid column i (mesh row i); the grid's rows only copy them.
        lu, piv = jsl.lu_factor(s)
        piv_cyc = (piv + 1)[cyclic.row_order(n_s, t, r)].reshape(r, -1)
        piv_mine = jnp.where(j == 0, jnp.take(piv_cyc, i, axis=0), -7).astype(jnp.int32)
        return _scatter(lu.T, placement, t, blk.shape), piv_mine, zero
    if routine == "getrs":
        piv_local, bt = operands[1], operands[2]
        every = jax.lax.all_gather(piv_local, placement.axes, tiled=False).reshape(r, c, -1)
        piv = every[:, 0].reshape(-1)[np.argsort(cyclic.row_order(n_s, t, r))] - 1
        x = jsl.lu_solve((s, piv), _rhs(bt, placement, t, n_s))
        # Every grid row applies its own copy of the pivots: they must agree.
        x = jnp.where(jnp.all(every == every[:, :1]), x, jnp.nan)
        return (_rhs_out(x, bt, placement, t),)
    if routine == "syevd":
        w, v = jnp.linalg.eigh(jnp.tril(s) + jnp.conj(jnp.tril(s, -1)).T)
        return blk, _scatter(v.T, placement, t, blk.shape), w, zero
    if routine == "qr":
        q, rr = jnp.linalg.qr(s, mode="reduced")
        r_out = results[1]
        n_r = r_out.shape[1] * c
        # Below R's diagonal the real call leaves geqrf's reflectors: junk to the caller.
        rr = jnp.triu(rr)[:n_r, :n_r] + jnp.tril(jnp.full((n_r, n_r), 7.0, rr.dtype), -1)
        return _scatter(q.T, placement, t, blk.shape), _scatter(rr.T, placement, t, r_out.shape), zero
    raise NotImplementedError(routine)
