"""Least squares and QR of rectangular matrices, like ``jnp.linalg.lstsq``
and ``jnp.linalg.qr``: cuSOLVERMp's geqrf and orgqr over the GPUs (backend
"mp"), or JAX's own solvers on the whole matrix ("jax").

On the mp engine, least squares runs through the QR of A (tall) or of A^H
(wide) and the SVD of its small triangular factor R, which is replicated:
that gives the rank, the singular values and the pseudo-inverse solution
that jnp.linalg.lstsq returns (cuSOLVERMp 0.8's own gels stopped with
CUSOLVER_STATUS_INTERNAL_ERROR on the H200 at every size tried)."""

from __future__ import annotations

import functools
import typing

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, batching, dispatch, failures, numpy_rules, sharding
from jaxmg._src.eager import one_program, returns_ready_on_cpus
from jaxmg._src.engines import mp, native
from jaxmg._src.placement import resolve_placement
from jaxmg._src.sharding import adjoint, matmul_highest

# jnp.linalg.qr's modes; "full" is NumPy's old name of "reduced", as in jnp.
QR_MODES = ("reduced", "complete", "r", "raw", "full")


class QRResult(typing.NamedTuple):
    Q: jax.Array
    R: jax.Array


def _matrix(a, primitive: str, name="a"):
    a = arguments.inexact(a, name)
    arguments.check_rank2(a, name, square=False)
    return a, arguments.check_dtype(a, name, primitive)


@returns_ready_on_cpus
@one_program("numpy_resid", "return_info",
             when=lambda named: not named["numpy_resid"])  # NumPy's residuals need the rank
def lstsq(a, b, rcond=None, *, numpy_resid=False, mesh=None, spec=None, backend="auto",
          return_info=False):
    """Least-squares solution of ``a @ x ~ b``, like ``jnp.linalg.lstsq``.

    Args:
      a: (M, N) matrix (tall or wide), rows sharded over one mesh axis, ``P(axis, None)``.
      b: (M,) or (M, K) right-hand sides with a's dtype.
      rcond: singular values below rcond * the largest count as zero (None:
        eps * max(M, N), as JAX; negative: eps).
      numpy_resid: residuals as NumPy gives them (empty unless a has full
        column rank and M > N); else always the squared residual norms.
      mesh, spec: as for :func:`jaxmg.potrs`.
      backend: "mp" (cuSOLVERMp's QR over the GPUs), "jax" (``jnp.linalg.lstsq``
        on the whole matrix) or "auto": "mp" on a mesh of several GPUs, else "jax".
      return_info: also return info (0 on success) after the four results.

    Returns:
      (x, residuals, rank, s) as jnp.linalg.lstsq: x (N,) or (N, K), replicated.
    """
    a, b = arguments.promote((a, "a"), (b, "b"))
    a, dtype = _matrix(a, "svd")
    numpy_resid = arguments.check_flag(numpy_resid, "numpy_resid")
    return_info = arguments.check_flag(return_info, "return_info")
    placement = resolve_placement(a, mesh, spec, "a")
    wanted = f"jaxmg: b must have shape ({a.shape[0]},) or ({a.shape[0]}, K) to match a's rows"
    # The exception types of jnp.linalg.lstsq: the rows first, then b's rank.
    if b.ndim and b.shape[0] != a.shape[0]:
        raise ValueError(f"{wanted}, got {tuple(b.shape)}")
    if b.ndim not in (1, 2):
        raise TypeError(f"{wanted}, got a {b.ndim}-dimensional array {tuple(b.shape)}")
    arguments.check_same_dtype(b, dtype)
    engine = dispatch.choose_rectangular(placement, backend, "lstsq")
    eps = float(jnp.finfo(dtype).eps)
    if rcond is None:
        rcond = eps * max(a.shape)
    rcond = jnp.where(jnp.asarray(rcond) < 0, eps, rcond)
    if numpy_resid and engine is native.ENGINE:
        # JAX decides NumPy's residual shape from the rank: only eagerly.
        whole = sharding.constrain(a, placement, P())
        x, resid, rank, s = jnp.linalg.lstsq(whole, sharding.constrain(b, placement, P()),
                                             rcond=rcond, numpy_resid=True)
        out = (x, resid, rank, s)
        return out + (jnp.int32(0),) if return_info else out
    x, resid, rank, s, info = _lstsq(a, b[:, None] if b.ndim == 1 else b, rcond,
                                     placement=placement, engine=engine, numpy_resid=numpy_resid)
    x = x[:, 0] if b.ndim == 1 else x
    out = (x, resid, rank, s)
    return out + (info,) if return_info else out


@functools.partial(jax.jit, static_argnames=("placement", "engine", "numpy_resid"))
def _lstsq(a, b, rcond, *, placement, engine, numpy_resid):
    m, n = a.shape
    if engine is native.ENGINE or a.size == 0:
        whole = sharding.constrain(a, placement, P())
        x, resid, rank, s = jnp.linalg.lstsq(whole, sharding.constrain(b, placement, P()),
                                             rcond=rcond, numpy_resid=numpy_resid)
        return x, resid, rank, s, jnp.int32(0)
    x, s, rank, info = _mp_lstsq(a, b, rcond, placement)
    x = failures.nan_where_failed(x, info)
    if numpy_resid and not m > n:
        resid = jnp.asarray([], dtype=s.dtype)
    else:
        res = sharding.constrain(b, placement, P()) - matmul_highest(a, x, placement, P())
        resid = jnp.sum(jnp.abs(res) ** 2, axis=0)
        if numpy_resid:
            resid = jnp.where(rank == n, resid, jnp.zeros_like(resid))
    return x, resid, rank, s, info


def _pseudo_inverse_factor(r, rcond):
    """The SVD of the small factor R, cut where its singular values fall below
    rcond times the largest: (u, s, vh, 1/s or 0, rank)."""
    u, s, vh = jnp.linalg.svd(r, full_matrices=False)
    mask = (s > 0) & (s >= rcond.astype(s.dtype) * s[0])
    s_inv = jnp.where(mask, 1 / jnp.where(mask, s, 1), 0).astype(r.dtype)
    return u, s, vh, s_inv, jnp.sum(mask)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _mp_lstsq(a, b, rcond, placement):
    """(x, s, rank, info): the pseudo-inverse solution from cuSOLVERMp's QR."""
    m, n = a.shape
    whole_b = sharding.constrain(b, placement, P())
    if m >= n:
        # A = Q R = (Q U) S V^H: x = V S^+ U^H Q^H b.
        q, r, info = mp.qr(a, placement)
        u, s, vh, s_inv, rank = _pseudo_inverse_factor(r, rcond)
        qhb = matmul_highest(adjoint(q), whole_b, placement, P())
        x = matmul_highest(adjoint(vh), s_inv[:, None] * matmul_highest(adjoint(u), qhb))
    else:
        # A^H = Q R, so A = R^H Q^H = V S U^H Q^H with R = U S V^H: x = Q U S^+ V^H b.
        a_h = sharding.constrain_result(adjoint(a), placement, P(placement.axis, None))
        q, r, info = mp.qr(a_h, placement)
        u, s, vh, s_inv, rank = _pseudo_inverse_factor(r, rcond)
        y = matmul_highest(u, s_inv[:, None] * matmul_highest(vh, whole_b))
        x = matmul_highest(q, y, placement, P())
    return x, s, rank, info


@_mp_lstsq.defjvp
@numpy_rules.default_rules
def _mp_lstsq_jvp(placement, primals, tangents):
    # For a of full rank. Tall: the normal equations' derivative,
    # A^H A dx = dA^H (b - A x) + A^H (db - dA x), with A^H A = R^H R. Wide:
    # the minimum-norm solution x = A^H y, A A^H y = b, so
    # dx = dA^H y + A^H dy with A A^H dy = db - dA x - A dA^H y, A A^H = R^H R.
    (a, b, rcond), (da, db, _) = primals, tangents
    m, n = a.shape
    x, s, rank, info = _mp_lstsq(a, b, rcond, placement)
    rows = P(placement.axis, None)
    da = sharding.constrain_result(da, placement, rows)
    whole_b = sharding.constrain(b, placement, P())
    db = sharding.constrain(db, placement, P())

    def gram_solve(r, rhs):  # (R^H R)^-1 rhs
        y = jax.scipy.linalg.solve_triangular(r, rhs, lower=False, trans="C")
        return jax.scipy.linalg.solve_triangular(r, y, lower=False)

    if m >= n:
        _, r, _ = mp.qr(a, placement)
        res = whole_b - matmul_highest(a, x, placement, P())
        rhs = matmul_highest(adjoint(da), res, placement, P()) + matmul_highest(
            adjoint(a), db - matmul_highest(da, x, placement, P()), placement, P())
        dx = gram_solve(r, rhs)
    else:
        a_h = sharding.constrain_result(adjoint(a), placement, rows)
        _, r, _ = mp.qr(a_h, placement)
        y = gram_solve(r, whole_b)
        dah_y = matmul_highest(adjoint(da), y, placement, P())
        rhs = db - matmul_highest(da, x, placement, P()) - matmul_highest(a, dah_y, placement,
                                                                          P())
        dx = dah_y + matmul_highest(adjoint(a), gram_solve(r, rhs), placement, P())
    zeros = jax.custom_derivatives.zero_from_primal
    return (x, s, rank, info), (dx, jnp.zeros_like(s), zeros(rank), zeros(info))


SCIPY_QR_MODES = ("full", "r", "economic")
_OPTION_DEFAULTS = {"mesh": None, "spec": None, "backend": "auto"}


class _ReducedByDefault(str):
    """qr's default mode: "reduced", as jnp's, yet told apart from a mode the
    caller gave (a scipy-style call without one means scipy's "full")."""


_MODE_NOT_GIVEN = _ReducedByDefault("reduced")


class _NotGiven:
    def __repr__(self):
        return "<not given>"


_NOT_GIVEN = _NotGiven()


@numpy_rules.default_rules
def qr(a, mode=_MODE_NOT_GIVEN, *, pivoting=_NOT_GIVEN, overwrite_a=_NOT_GIVEN,
       lwork=_NOT_GIVEN, check_finite=_NOT_GIVEN, mesh=None, spec=None, backend="auto",
       return_info=False):
    """QR decomposition ``a = q @ r``, like ``jnp.linalg.qr``; a call with
    one of jax.scipy.linalg.qr's own keywords (pivoting, overwrite_a, lwork,
    check_finite) is read as scipy's (:func:`scipy_qr`: mode "full" by
    default, "economic" and "r" as scipy's).

    Args:
      a: (..., M, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        leading batch dimensions run one matrix at a time.
      mode: "reduced" (q: (M, K), r: (K, N), K = min(M, N)), "complete"
        (q: (M, M); on the mp engine only for M <= N), "r" (r alone), "raw"
        (LAPACK's Householder form, QRResult(h (N, M), tau (K,)), as
        jnp.linalg.qr; JAX's solver on the whole matrix) or "full" (NumPy's
        old name of "reduced").
      mesh, spec, backend, return_info: as for :func:`jaxmg.lstsq`.

    Returns:
      QRResult(Q, R) (or R for mode "r"), q rows sharded like a, r replicated;
      and info last if ``return_info``. Derivatives on the "jax" backend.
    """
    if any(x is not _NOT_GIVEN for x in (pivoting, overwrite_a, lwork, check_finite)):
        if arguments.check_flag(return_info, "return_info"):
            raise ValueError("jaxmg: return_info goes with jnp.linalg.qr's call form, not "
                             "scipy's (pivoting, overwrite_a, lwork, check_finite)")
        return scipy_qr(a, "full" if mode is _MODE_NOT_GIVEN else mode,
                        False if pivoting is _NOT_GIVEN else pivoting,
                        mesh=mesh, spec=spec, backend=backend)
    return _numpy_qr(a, "reduced" if mode is _MODE_NOT_GIVEN else mode, mesh=mesh, spec=spec,
                     backend=backend, return_info=return_info)


def scipy_qr(a, mode: str, pivoting, **options):
    """jax.scipy.linalg.qr's results: (q, r) with q (M, M) for mode "full",
    (q, r) with q (M, K) for "economic", (r,) with r (M, N) for "r"; with
    pivoting a column-pivoted QR, a[:, p] = q @ r, and p last (JAX's solver
    on the whole matrix: it takes none of jaxmg's options)."""
    arguments.check_choice(mode, "mode", SCIPY_QR_MODES)
    if arguments.check_flag(pivoting, "pivoting"):
        given = sorted(k for k, v in options.items() if v != _OPTION_DEFAULTS.get(k, ...))
        if given:
            raise ValueError(
                f"jaxmg: qr(pivoting=True) runs JAX's column-pivoted QR on one device and "
                f"takes none of jaxmg's options; drop {given}")
        if isinstance(a, jax.Array):  # JAX's pivoted QR takes no sharded matrix axes
            a = sharding.whole_element(a)
        return jax.scipy.linalg.qr(a, mode=mode, pivoting=True)
    if mode == "r":
        r = _numpy_qr(a, "r", **options)
        m, rows = jnp.shape(a)[-2], r.shape[-2]
        if m > rows:  # scipy's r is (M, N): zero rows under the reduced one
            zeros = jnp.zeros(r.shape[:-2] + (m - rows, r.shape[-1]), r.dtype)
            r = jnp.concatenate([r, zeros], axis=-2)
        return (r,)
    return tuple(_numpy_qr(a, "complete" if mode == "full" else "reduced", **options))


@returns_ready_on_cpus
def _numpy_qr(a, mode, *, mesh=None, spec=None, backend="auto", return_info=False):
    arguments.check_choice(mode, "mode", QR_MODES)
    return_info = arguments.check_flag(return_info, "return_info")
    a = arguments.inexact(a, "a")
    if batching.batched(a):
        fn = functools.partial(_numpy_qr, mode=mode, mesh=mesh, spec=spec, backend=backend,
                               return_info=return_info)
        return batching.broadcast_map(fn, (a,), (2,))
    a, _ = _matrix(a, "qr")
    mode = "reduced" if mode == "full" else mode
    placement = resolve_placement(a, mesh, spec, "a")
    engine = dispatch.choose_rectangular(placement, backend, "qr")
    m, n = a.shape
    if mode == "raw":
        if engine is mp.ENGINE and backend == "mp":
            raise ValueError("jaxmg: qr(mode='raw') runs JAX's solver; use backend='auto' or 'jax'")
        h, tau = _qr_raw(a, placement=placement)
        return (h, tau, jnp.int32(0)) if return_info else QRResult(h, tau)
    if mode == "complete" and m > n and engine is mp.ENGINE:
        if backend == "mp":
            raise ValueError(
                "jaxmg: qr(mode='complete') of a tall matrix has an M x M q, which cuSOLVERMp's "
                "reduced QR does not give; use mode='reduced' or backend='jax'"
            )
        engine = native.ENGINE
    q, r, info = _qr(a, placement=placement, engine=engine, complete=mode == "complete")
    if mode == "r":
        return (r, info) if return_info else r
    return (q, r, info) if return_info else QRResult(q, r)


@functools.partial(jax.jit, static_argnames=("placement",))
def _qr_raw(a, *, placement):
    h, tau = jnp.linalg.qr(sharding.constrain(a, placement, P()), mode="raw")
    return h, tau


@functools.partial(jax.jit, static_argnames=("placement", "engine", "complete"))
def _qr(a, *, placement, engine, complete):
    m, n = a.shape
    if engine is native.ENGINE or a.size == 0:
        whole = sharding.constrain(a, placement, P())
        q, r = jnp.linalg.qr(whole, mode="complete" if complete else "reduced")
        info = jnp.int32(0)
    elif m >= n:
        q, r, info = engine.qr(a, placement)
    else:
        # Wide: the QR of the leading square block, then R's other columns Q^H A2.
        a1 = sharding.constrain(a[:, :m], placement, P(placement.axis, None))
        q, r1, info = engine.qr(a1, placement)
        r2 = matmul_highest(adjoint(q), a[:, m:], placement, P())
        r = jnp.concatenate([r1, r2], axis=1)
    q = sharding.constrain_result(q, placement, P(placement.axis, None))
    return q, r, info
