"""Polar decomposition and SVD. Backend "mp": QDWH, the dynamically weighted
Halley iteration (Nakatsukasa, Bai and Gygi 2010), whose steps are QR
decompositions of [sqrt(c) X; I] by cuSOLVERMp, then for the SVD an
eigendecomposition of the Hermitian polar factor, A = U_p H = (U_p V) S V^H
(Nakatsukasa and Higham 2013). Backend "jax": jnp.linalg.svd of the whole
matrix."""

from __future__ import annotations

import functools
import math
import typing

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import (
    arguments,
    batching,
    dispatch,
    eigh,
    failures,
    numpy_rules,
    peer_calls,
    sharding,
)
from jaxmg._src.eager import returns_ready_on_cpus
from jaxmg._src.engines import base, mp, native
from jaxmg._src.placement import inside_shard_map, resolve_placement
from jaxmg._src.sharding import adjoint as _ct, matmul_highest as _mm

SIDES = ("right", "left")
POLAR_METHODS = ("qdwh", "svd")


def _lower_bound(eps: float) -> float:
    """l0, the lower bound QDWH assumes for sigma_min(A) / ||A||_F: the
    smallest (down to eps^2) that costs no more iterations than l0 = eps."""
    count = len(_weights(eps, eps))
    l0 = eps
    while l0 / 10 > eps * eps and len(_weights(l0 / 10, eps)) == count:
        l0 /= 10
    return l0


@functools.lru_cache(maxsize=16)
def _weights(l0: float, eps: float) -> tuple[tuple[float, float, float], ...]:
    """The steps' (b/c, (a - b/c)/sqrt(c), sqrt(c)), worked out in float64
    ahead of time: l_k, the bound on sigma_min(X_k), depends on l0 alone.
    They run until l_k is within 10 eps of 1, i.e. X_k has converged."""
    steps, l = [], l0
    while 1 - l > 10 * eps:
        l2 = l * l
        g = (4 * (1 - l2) / (l2 * l2)) ** (1 / 3)
        a = math.sqrt(1 + g) + 0.5 * math.sqrt(8 - 4 * g + 8 * (2 - l2) / (l2 * math.sqrt(1 + g)))
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        steps.append((b / c, (a - b / c) / math.sqrt(c), math.sqrt(c)))
        l = min(1.0, l * (a + b * l2) / (1 + c * l2))
    return tuple(steps)


def _qdwh(x, qr_fn, *, lower_bound=None, placement=None):
    """The unitary polar factor U of a tall x (M >= N), x = U H.

    qr_fn(y) -> (q, r, info): reduced QR of the stacked matrix [sqrt(c) X; I],
    whose rows are sharded over `placement` (None: arrays as they are).
    Returns (U, info): info is the first nonzero info of the QRs, 0 if none.
    """
    m, n = x.shape
    real = jnp.finfo(x.dtype).dtype
    eps = float(jnp.finfo(x.dtype).eps)
    steps = jnp.asarray(_weights(lower_bound or _lower_bound(eps), eps), dtype=real)
    # Both blocks of the stacked matrix padded with zero rows to a multiple of
    # the devices: explicit sharding slices only evenly split rows, and zero
    # rows of [sqrt(c) X; I] are zero rows of Q, so they stay zero in X.
    k = placement.n_devices if placement is not None else 1
    m_pad, n_pad = -(-m // k) * k, -(-n // k) * k

    spec = None if placement is None else P(placement.axis, None)

    def rows(y):
        return y if placement is None else sharding.constrain(y, placement, spec)

    # ||x||_F >= ||x||_2, computed without overflowing for huge entries.
    big = jnp.max(jnp.abs(x))
    big = jnp.where(big > 0, big, 1)
    alpha = big * jnp.linalg.norm(x / big)
    x = rows(jnp.pad(x / jnp.where(alpha > 0, alpha, 1).astype(x.dtype), ((0, m_pad - m), (0, 0))))
    r, c = jnp.arange(m_pad + n_pad)[:, None], jnp.arange(n)[None, :]
    eye = r - m_pad == c

    def step(i, carry):
        x, info = carry
        keep, mix, root = (steps[i, j].astype(x.dtype) for j in range(3))
        # An elementwise select, not a concatenation: it keeps x's sharding.
        y = jnp.where(eye, jnp.asarray(1, x.dtype), jnp.pad(root * x, ((0, n_pad), (0, 0))))
        q, _, qr_info = qr_fn(rows(y))
        q2 = q[m_pad:]
        if placement is not None:
            q2 = sharding.constrain(q2, placement, P())
        x = rows(keep * x + mix * _mm(q[:m_pad], _ct(q2[:n]), placement, spec))
        return x, jnp.where(info != 0, info, jnp.asarray(qr_info, jnp.int32))

    x, info = jax.lax.fori_loop(0, steps.shape[0], step, (x, jnp.int32(0)))
    return (x[:m] if placement is None else sharding.unpad(x, placement, m, (0,))), info


def _hermitian(h):
    return (h + _ct(h)) / 2


class QDWHShapeError(ValueError, NotImplementedError):
    """QDWH of a matrix on the side it cannot take: the NotImplementedError of
    jax.scipy.linalg.polar and jaxmg's ValueError of a bad argument."""


def _check_side(a, side: str, method: str):
    if side not in SIDES:
        raise ValueError(f"jaxmg: polar takes side in {SIDES}, got {side!r}")
    if method == "svd":  # the SVD factors every shape on either side
        return
    m, n = a.shape
    if side == "right" and m < n:
        raise QDWHShapeError(
            f"jaxmg: polar with side='right' needs a with at least as many rows as columns "
            f"(M >= N), got {m} x {n}; for a wide matrix use side='left' (a = p @ u) "
            f"or method='svd'"
        )
    if side == "left" and m > n:
        raise QDWHShapeError(
            f"jaxmg: polar with side='left' needs a with at most as many rows as columns "
            f"(M <= N), got {m} x {n}; for a tall matrix use side='right' (a = u @ p) "
            f"or method='svd'"
        )


@returns_ready_on_cpus
def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None, mesh=None,
          spec=None, backend="auto", return_info=False):
    """Polar decomposition ``a = u @ p`` (side "right") or ``a = p @ u`` (side "left").

    Args:
      a: (..., M, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``;
        with method "qdwh", M >= N for side "right" and M <= N for side
        "left" (as JAX's); method "svd" takes any shape on either side.
        Leading batch dimensions run one matrix at a time.
      side: "right": p is (N, N), ``(a^H a)^(1/2)``; "left": p is (M, M), ``(a a^H)^(1/2)``.
      method: "qdwh" or "svd", as jax.scipy.linalg.polar. "svd" always runs
        ``jnp.linalg.svd`` on the whole matrix; "qdwh" is QDWH on the mp
        engine and the SVD on the "jax" one.
      eps, max_iterations: jax.scipy.linalg.polar's QDWH options. Given
        where JAX's solver runs (the "jax" engine, outside shard_map), that
        call is JAX's own QDWH on the whole matrix with them, as
        jax.scipy.linalg.polar (which reports no failure: info is 0, and u
        after max_iterations steps need not be orthonormal yet); the mp
        engine's QDWH runs the steps its precomputed weights need to
        converge to the dtype's eps, and takes neither.
      mesh, spec: as for :func:`jaxmg.potrs`.
      backend: "mp" (QDWH iterations of cuSOLVERMp QRs over the GPUs), "jax"
        (``jnp.linalg.svd`` on the whole matrix) or "auto": "mp" on a mesh of
        several GPUs, else "jax".
      return_info: also return info (0 on success).

    Returns:
      u: (M, N) with orthonormal columns (side "right") or rows (side "left");
      p: Hermitian positive semidefinite; both rows sharded like a; and info
      if ``return_info``. On failure u and p are NaN.
      With backend "mp" the columns of u belonging to exactly zero singular
      values of a come out zero (QDWH keeps them), not orthonormal.
    """
    if method not in POLAR_METHODS:
        raise ValueError(f"jaxmg: polar takes method in {POLAR_METHODS}, got {method!r}")
    return_info = arguments.check_flag(return_info, "return_info")
    _check_qdwh_options(eps, max_iterations)
    a = arguments.as_array(a, "a")
    if not jnp.issubdtype(a.dtype, jnp.inexact):  # JAX's polar refuses integers too
        raise ValueError(f"jaxmg: polar takes a floating or complex matrix, got {a.dtype}; "
                         "cast it first (a.astype(float))")
    if batching.batched(a):
        fn = functools.partial(polar, side=side, method=method, eps=eps,
                               max_iterations=max_iterations, mesh=mesh, spec=spec,
                               backend=backend, return_info=return_info)
        return batching.broadcast_map(fn, (a,), (2,))
    arguments.check_rank2(a, "a", square=False)
    arguments.check_dtype(a, "a", "polar")
    _check_side(a, side, method)
    placement = resolve_placement(a, mesh, spec, "a")
    engine = dispatch.choose_rectangular(placement, backend, "polar")
    if method == "svd":
        engine = native.ENGINE
    # (Inside shard_map JAX's QDWH loop does not trace: the options go unused there.)
    if (engine is native.ENGINE and method == "qdwh" and (eps, max_iterations) != (None, None)
            and not inside_shard_map()):
        u, p = _jax_qdwh_polar(a, placement=placement, side=side, eps=eps,
                               max_iterations=max_iterations)
        return (u, p, jnp.int32(0)) if return_info else (u, p)
    u, p, info = _polar(a, placement=placement, engine=engine, side=side)
    return (u, p, info) if return_info else (u, p)


def _check_qdwh_options(eps, max_iterations) -> None:
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating))
                            or not 0 < eps < 1):
        raise ValueError(f"jaxmg: polar's eps must be a number in (0, 1) or None, got {eps!r}")
    if max_iterations is not None and (isinstance(max_iterations, bool)
                                       or not isinstance(max_iterations, (int, np.integer))
                                       or max_iterations < 1):
        raise ValueError("jaxmg: polar's max_iterations must be a positive int or None, got "
                         f"{max_iterations!r}")


@functools.partial(jax.jit, static_argnames=("placement", "side", "eps", "max_iterations"))
def _jax_qdwh_polar(a, *, placement, side, eps, max_iterations):
    """JAX's QDWH with its options on the whole matrix (a^H for side "left"),
    as jax.scipy.linalg.polar runs it; inside a shard_map that gives every
    device all of a where there is a mesh (JAX's QDWH trips over explicit
    mesh axes). JAX 0.10's polar drops max_iterations (and its eps fails
    there): here both count, as from 0.12."""

    def whole(x):
        x = x if side == "right" else _ct(x)
        u, h, _, _ = jax.lax.linalg.qdwh(x, is_hermitian=False, eps=eps,
                                         max_iterations=max_iterations)
        return (u, h) if side == "right" else (_ct(u), _ct(h))

    if placement.mesh is None:
        return whole(a)
    replicated = sharding.constrain(a, placement, P())
    u, p = jax.shard_map(whole, mesh=placement.mesh, in_specs=P(), out_specs=(P(), P()),
                         check_vma=False)(replicated)
    rows = P(placement.axis, None)
    return (sharding.constrain_result(u, placement, rows),
            sharding.constrain_result(p, placement, rows))


@functools.partial(jax.jit, static_argnames=("placement", "engine", "side"))
def _polar(a, *, placement, engine, side):
    rows = P(placement.axis, None)
    if engine is native.ENGINE:
        w, s, vh = jnp.linalg.svd(sharding.constrain(a, placement, P()), full_matrices=False)
        u = _mm(w, vh)
        outer = _ct(vh) if side == "right" else w
        p = _hermitian(_mm(outer * s.astype(a.dtype)[None, :], _ct(outer)))
        info = jnp.int32(0)
    else:
        x = a if side == "right" else sharding.constrain_result(_ct(a), placement, rows)
        u, p, info = _mp_polar(x, placement)
        if side == "left":
            u = _ct(u)
    u = sharding.constrain_result(failures.nan_where_failed(u, info), placement, rows)
    p = sharding.constrain_result(failures.nan_where_failed(p, info), placement, rows)
    return u, p, info


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _mp_polar(x, placement):
    """(U, H, info) of a tall, row-sharded x = U H by QDWH on cuSOLVERMp."""
    u, info = _qdwh(x, lambda y: mp.qr(y, placement), placement=placement)
    h = _hermitian(_mm(_ct(u), x, placement, P()))
    return u, h, info


@_mp_polar.defjvp
@numpy_rules.default_rules
def _mp_polar_jvp(placement, primals, tangents):
    # From dX = dU H + U dH with U^H dU = W anti-Hermitian: W H + H W =
    # U^H dX - dX^H U, solved where H = V diag(s) V^H is diagonal; then
    # dH = U^H dX - W H and dU = U W + (dX - U U^H dX) H^-1 (zero for square X).
    (x,), (dx,) = primals, tangents
    u, h, info = _mp_polar(x, placement)
    s, v, _ = _mp_eigh(h, placement)
    rows = P(placement.axis, None)
    dx = sharding.constrain_result(dx, placement, rows)
    udx = _mm(_ct(u), dx, placement, P())
    vh = _ct(v)
    rhs = _mm(_mm(vh, udx - _ct(udx)), v)
    w = _mm(_mm(v, rhs / (s[:, None] + s[None, :]).astype(x.dtype)), vh)
    dh = _hermitian(udx - _mm(w, h))
    h_inv = _mm(v / s.astype(x.dtype)[None, :], vh)
    du = _mm(u, w, placement, rows) + _mm(dx - _mm(u, udx, placement, rows), h_inv, placement, rows)
    return (u, h, info), (du, dh, jax.custom_derivatives.zero_from_primal(info))


def _mp_eigh(h, placement):
    """(w, v, info) of the Hermitian h on cuSOLVERMp, v replicated."""
    n = h.shape[0]
    layout = base.layout(placement, n, mp.ENGINE.tile("syevd", n, placement, None), mp.ENGINE)
    w, v, info = eigh.run(h, layout=layout, vectors=True)
    return w, sharding.constrain(v, placement, P()), info


class SVDResult(typing.NamedTuple):
    U: jax.Array
    S: jax.Array
    Vh: jax.Array


@returns_ready_on_cpus
def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None, *,
        overwrite_a=False, check_finite=True, lapack_driver="gesdd", mesh=None, spec=None,
        backend="auto", return_info=False):
    """Singular value decomposition ``a = u @ diag(s) @ vh``, like ``jnp.linalg.svd``.

    Args:
      a: (M, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``.
      full_matrices: u (M, M) and vh (N, N) (the default, as JAX), or the
        reduced u (M, K), vh (K, N), K = min(M, N). The mp engine computes the
        reduced SVD; auto runs JAX's on the whole matrix for full matrices of
        a matrix that is not square.
      compute_uv: also compute u and vh.
      hermitian: a is Hermitian: the SVD from its eigendecomposition (|w|, in
        descending order), distributed by jaxmg.eigh.
      subset_by_index: not supported (jnp.linalg.svd has it only on TPU):
        anything but None raises, as jnp does on CPU and GPU.
      overwrite_a, check_finite, lapack_driver: jax.scipy.linalg.svd's, accepted
        and ignored (lapack_driver "gesdd" or "gesvd", as scipy's).
      mesh, spec, backend, return_info: as for :func:`jaxmg.polar`; backend
        "mp" is the polar decomposition a = U_p H followed by cuSOLVERMp's
        eigendecomposition of H (for a wide matrix, of a^H).

    Returns:
      SVDResult(U, S, Vh): u rows sharded like a; s in descending order,
      replicated; vh rows sharded; only s unless ``compute_uv``; and info last
      if ``return_info``. On failure the results are NaN. With backend "mp"
      the columns of u belonging to exactly zero singular values come out
      zero, as in :func:`jaxmg.polar`.
    """
    del overwrite_a, check_finite
    arguments.check_choice(lapack_driver, "lapack_driver", ("gesdd", "gesvd"))
    full_matrices = arguments.check_flag(full_matrices, "full_matrices")
    compute_uv = arguments.check_flag(compute_uv, "compute_uv")
    hermitian = arguments.check_flag(hermitian, "hermitian")
    return_info = arguments.check_flag(return_info, "return_info")
    if subset_by_index is not None:
        if full_matrices:
            raise ValueError("jaxmg: svd takes full_matrices and subset_by_index not both")
        raise NotImplementedError(
            "jaxmg: svd has no subset_by_index (jnp.linalg.svd has it on TPU only); take "
            "s[start:end] of the full result"
        )
    a = arguments.inexact(a, "a")
    if batching.batched(a):
        fn = functools.partial(svd, full_matrices=full_matrices, compute_uv=compute_uv,
                               hermitian=hermitian, mesh=mesh, spec=spec, backend=backend,
                               return_info=return_info)
        return batching.broadcast_map(fn, (a,), (2,))
    arguments.check_rank2(a, "a", square=False)
    arguments.check_dtype(a, "a", "svd")
    placement = resolve_placement(a, mesh, spec, "a")
    engine = dispatch.choose_rectangular(placement, backend, "svd")
    m, n = a.shape
    full = full_matrices and compute_uv and m != n
    if hermitian and m == n:
        out = _hermitian_svd(a, placement=placement, compute_uv=compute_uv)
    else:
        if full and engine is mp.ENGINE:
            if backend == "mp":
                raise ValueError(
                    "jaxmg: backend='mp' computes the reduced SVD; pass full_matrices=False "
                    "(u is M x K, vh is K x N, K = min(M, N)) or use backend='jax'"
                )
            engine = native.ENGINE
        out = _svd(a, placement=placement, engine=engine, compute_uv=compute_uv, full=full)
    if not compute_uv:
        out = out[1:2] + out[3:]
        out = out if return_info else out[:-1]
        return out[0] if len(out) == 1 else out
    return (*out[:3], out[3]) if return_info else SVDResult(*out[:3])


@numpy_rules.default_rules
def gesvd(a, T_A=None, mesh=None, matrix_specs=None, *, in_specs=None, compute_u=True,  # noqa: N803
          compute_vh=True, full_matrices=False, return_status=False, pad=True, donate=False,
          backend="auto"):
    """The SVD in JAXMg's call form, ``gesvd(a, T_A, mesh, matrix_specs)``.

    Args:
      a: (M, N) matrix, rows sharded over one mesh axis, ``P(axis, None)``.
      T_A: JAXMg's tile size, checked and otherwise unused (jaxmg's SVD picks
        its own blocks); pad, donate: accepted, no effect (a is kept).
      mesh, matrix_specs (or in_specs): the mesh and a's PartitionSpec, read
        from ``a.sharding`` when not given.
      compute_u, compute_vh: return u, vh; full_matrices: u (M, M) and vh
        (N, N) rather than (M, K), (K, N), K = min(M, N) (the default here,
        as JAXMg's, unlike :func:`svd`'s).
      return_status: also return jaxmg's info (0 on success), last.
      backend: as for :func:`svd`.

    Returns:
      ``(u, s, vh)``, ``(u, s)``, ``(s, vh)`` or ``s`` as asked, s in
      descending order; then info if ``return_status``.
    """
    spec = peer_calls.spec_of_a("gesvd", matrix_specs, in_specs)
    peer_calls.check_tile("gesvd", T_A)
    a = arguments.as_array(a, "a")
    if a.ndim != 2:
        raise ValueError(f"jaxmg.gesvd expects a rank-2 matrix A, got shape {a.shape}")
    arguments.check_dtype(a, "a", "svd")  # as potrs, syevd: no promotion
    compute_u = arguments.check_flag(compute_u, "compute_u")
    compute_vh = arguments.check_flag(compute_vh, "compute_vh")
    for value, name in ((pad, "pad"), (donate, "donate"), (return_status, "return_status")):
        arguments.check_flag(value, name)
    out = svd(a, full_matrices=full_matrices, compute_uv=compute_u or compute_vh, mesh=mesh,
              spec=spec, backend=backend, return_info=True)
    u, s, vh, info = out if compute_u or compute_vh else (None, *out[:1], None, out[1])
    result = tuple(x for x, wanted in ((u, compute_u), (s, True), (vh, compute_vh)) if wanted)
    result += (info,) if return_status else ()
    return result[0] if len(result) == 1 else result


@functools.partial(jax.jit, static_argnames=("placement", "compute_uv"))
def _hermitian_svd(a, *, placement, compute_uv):
    # a = V diag(w) V^H = (V sign(w)) diag(|w|) V^H, sorted by |w| descending.
    # A mesh of None: a traced a with no sharding, which eigh places itself.
    where = {} if placement.mesh is None else {"mesh": placement.mesh,
                                               "spec": P(placement.axis, None)}
    w, v = eigh.eigh(a, **where)
    order = jnp.argsort(-jnp.abs(w))
    s = jnp.abs(w)[order]
    if not compute_uv:
        return None, s, None, jnp.int32(0)
    v = sharding.constrain(v, placement, P())[:, order]
    u = v * jnp.where(w[order] < 0, -1, 1).astype(v.dtype)[None, :]
    rows = P(placement.axis, None)
    return (sharding.constrain_result(u, placement, rows), s,
            sharding.constrain_result(_ct(v), placement, rows), jnp.int32(0))


def _values_of_whole(whole):
    """s of a matrix on one device, working on the small side: the QR's R of
    a tall (or wide) matrix has its singular values in min(M, N)^2 memory."""
    m, n = whole.shape
    if m > n:
        whole = jnp.linalg.qr(whole, mode="r")
    elif n > m:
        whole = jnp.linalg.qr(_ct(whole), mode="r")
    return jnp.linalg.svd(whole, compute_uv=False)


@functools.partial(jax.jit, static_argnames=("placement", "engine", "compute_uv", "full"))
def _svd(a, *, placement, engine, compute_uv, full):
    rows = P(placement.axis, None)
    if engine is native.ENGINE or a.size == 0:
        whole = sharding.constrain(a, placement, P())
        if compute_uv:
            u, s, vh = jnp.linalg.svd(whole, full_matrices=full)
        else:
            u, s, vh = None, _values_of_whole(whole), None
        info = jnp.int32(0)
    else:
        wide = a.shape[0] < a.shape[1]
        x = sharding.constrain_result(_ct(a), placement, rows) if wide else a
        u, s, vh, info = _mp_svd(x, placement, compute_uv)
        if wide and compute_uv:
            u, vh = _ct(vh), _ct(u)
    s = sharding.constrain(failures.nan_where_failed(s, info), placement, P())
    if compute_uv:
        u = sharding.constrain_result(failures.nan_where_failed(u, info), placement, rows)
        vh = sharding.constrain_result(failures.nan_where_failed(vh, info), placement, rows)
    return u, s, vh, info


def _mp_svd(x, placement, compute_uv):
    u, s, v, info = _mp_svd_tall(x, placement)
    if not compute_uv:
        return None, s, None, info
    return u, s, _ct(v), info


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _mp_svd_tall(x, placement):
    """(U, s, V, info) of a tall, row-sharded x = U diag(s) V^H, s descending
    (cuSOLVERMp 0.8's syevd computes the vectors whether asked or not)."""
    u_p, h, info = jax.lax.stop_gradient(_mp_polar(x, placement))
    w, v, eig_info = _mp_eigh(h, placement)
    info = jnp.where(info != 0, info, eig_info)
    # H is semidefinite up to rounding: an eigenvalue below zero is |w| with
    # its column of u negated. Sorting by |w| makes s descending.
    order = jnp.argsort(-jnp.abs(w))
    s = jnp.abs(w)[order]
    v = v[:, order]
    sign = jnp.where(w[order] < 0, -1, 1).astype(x.dtype)
    u = _mm(u_p, v, placement, P(placement.axis, None)) * sign[None, :]
    return u, s, v, info


@_mp_svd_tall.defjvp
@numpy_rules.default_rules
def _mp_svd_tall_jvp(placement, primals, tangents):
    # With dP = U^H dX V: ds = Re diag(dP); U^H dU and V^H dV off the
    # diagonal from dP S + S dP^H and S dP + dP^H S over s_j^2 - s_i^2; on it,
    # i Im(dP_ii) / s_i for U and 0 for V (the phase the gauge leaves free);
    # dU also gets (dX V - U dP) S^-1, the part outside U's columns.
    (x,), (dx,) = primals, tangents
    u, s, v, info = _mp_svd_tall(x, placement)
    rows = P(placement.axis, None)
    dx = sharding.constrain_result(dx, placement, rows)
    dxv = _mm(dx, v, placement, rows)
    dp = _mm(_ct(u), dxv, placement, P())
    ds = jnp.real(jnp.diagonal(dp))
    k = s.shape[0]
    gap = s[None, :] ** 2 - s[:, None] ** 2
    f = jnp.where(jnp.eye(k, dtype=bool), 0, 1 / jnp.where(gap == 0, 1, gap)).astype(x.dtype)
    sc = s.astype(x.dtype)
    omega_u = f * (dp * sc[None, :] + sc[:, None] * _ct(dp))
    if jnp.iscomplexobj(x):
        phase = jnp.imag(jnp.diagonal(dp)) / s
        omega_u = omega_u + jnp.diag(jax.lax.complex(jnp.zeros_like(phase), phase)).astype(x.dtype)
    omega_v = f * (sc[:, None] * dp + _ct(dp) * sc[None, :])
    du = _mm(u, omega_u, placement, rows) + (dxv - _mm(u, dp, placement, rows)) / sc[None, :]
    dv = _mm(v, omega_v)
    return (u, s, v, info), (du, ds, dv, jax.custom_derivatives.zero_from_primal(info))
