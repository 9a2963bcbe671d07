"""jax.numpy.linalg's routines that are composed of a factorisation: pinv,
svdvals, matrix_rank, cond and the spectral and nuclear norms (norm,
matrix_norm) from the SVD; matrix_power, tensorinv and
tensorsolve from inv and solve. Each runs on jaxmg's distributed routines,
so a sharded matrix stays sharded (JAX's own refuse a matrix whose rows are
sharded on explicit mesh axes), and returns what JAX's namesake returns. The
errors are JAX's, message included: code written for JAX matches them."""

from __future__ import annotations

import functools
import math
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxmg._src import arguments, batching, linalg, polar, sharding
from jaxmg._src.placement import resolve_placement, sharding_of


def svdvals(x, /, *, mesh=None, spec=None, backend="auto"):
    """The singular values of x (..., M, N), descending, like
    ``jnp.linalg.svdvals``; see :func:`jaxmg.svd` for the options."""
    return polar.svd(x, compute_uv=False, mesh=mesh, spec=spec, backend=backend)


def pinv(a, rtol=None, hermitian=False, *, rcond=None, mesh=None, spec=None, backend="auto"):
    """The Moore-Penrose pseudo-inverse of a (..., M, N), (..., N, M), like
    ``jnp.linalg.pinv``: singular values at most ``rtol`` times the largest
    count as zero (default rtol: 10 max(M, N) eps; rcond is its older name).
    Differentiable (the pseudo-inverse's derivative, Golub and Pereyra).
    Rows sharded like a; the SVD is :func:`jaxmg.svd`'s (options as there)."""
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    hermitian = arguments.check_flag(hermitian, "hermitian")
    a = arguments.inexact(a, "a")
    if a.ndim < 2:
        raise ValueError(f"jaxmg: pinv takes a matrix (..., M, N), got shape {a.shape}")
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return jnp.empty(a.shape[:-2] + (n, m), a.dtype)
    if rtol is None:
        rtol = 10.0 * max(m, n) * jnp.finfo(a.dtype).eps
    rtol = jnp.asarray(rtol, jnp.finfo(a.dtype).dtype)
    options = (hermitian, mesh, spec, backend)
    return _pinv(a, rtol, options)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _pinv(a, rtol, options):
    hermitian, mesh, spec, backend = options
    u, s, vh = polar.svd(a, full_matrices=False, hermitian=hermitian, mesh=mesh, spec=spec,
                         backend=backend)
    cutoff = rtol[..., None] * s[..., :1]
    inverse = jnp.where(s > cutoff, 1 / jnp.where(s > cutoff, s, 1), 0).astype(u.dtype)
    mm = _product(_rows_placement(a, mesh, spec))
    return mm(_h(vh), _h(u) * inverse[..., :, None])


@_pinv.defjvp
def _pinv_jvp(options, primals, tangents):
    a, rtol = primals
    da = tangents[0]
    p = _pinv(a, rtol, options)
    where = _rows_placement(a, options[1], options[2])
    if options[0]:  # hermitian: the SVD reads a symmetrised, so must its derivative
        a, da = _symmetrised(a, where), _symmetrised(da, where)
    mm = _product(where)
    # d pinv = -p da p + p p^H da^H (I - a p) + (I - p a) da^H p^H p, the
    # products ordered so that no M x M or N x N identity is formed.
    m, n = a.shape[-2:]
    if m >= n:
        s, t = mm(mm(p, _h(p)), _h(da)), mm(mm(_h(da), _h(p)), p)
        dp = -mm(mm(p, da), p) + s - mm(mm(s, a), p) + t - mm(mm(p, a), t)
    else:
        s, t = mm(p, mm(_h(p), _h(da))), mm(_h(da), mm(_h(p), p))
        dp = -mm(p, mm(da, p)) + s - mm(s, mm(a, p)) + t - mm(p, mm(a, t))
    return p, dp


def _h(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _rows_placement(a, mesh, spec):
    """Where one matrix a lies on a mesh, rows sharded; None for a batch
    or an unplaced matrix (XLA places the products)."""
    if a.ndim != 2:
        return None
    where = resolve_placement(a, mesh, spec)
    return where if where.mesh is not None else None


def _product(where):
    """x @ y at full precision; on a mesh, its rows sharded over a's row
    axis (explicit sharding needs the result named)."""
    if where is None:
        return functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    return lambda x, y: sharding.matmul(x, y, where, P(where.axis, None))


def _symmetrised(x, where):
    """(x + x^H) / 2, x^H laid out as x (explicit sharding adds no row-sharded
    matrix to a column-sharded one)."""
    xh = _h(x) if where is None else sharding.constrain_result(_h(x), where, P(where.axis, None))
    return (x + xh) / 2


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None, mesh=None, spec=None,  # noqa: N803
                backend="auto"):
    """The number of singular values of M (..., M, N) above rtol, like
    ``jnp.linalg.matrix_rank`` (whose rtol is compared with the values as
    they are; default: the largest times max(M, N) eps; tol is its older
    name). A vector's rank is 1 unless it is all zero."""
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    hermitian = arguments.check_flag(hermitian, "hermitian")
    M = arguments.inexact(M, "M")  # noqa: N806
    if M.ndim < 2:
        return jnp.any(M != 0).astype(np.int32)
    s = polar.svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian, mesh=mesh,
                  spec=spec, backend=backend)
    if rtol is None:
        rtol = jnp.max(s, axis=-1) * max(M.shape[-2:]) * jnp.finfo(s.dtype).eps
    return jnp.sum(s > jnp.expand_dims(jnp.asarray(rtol), -1), axis=-1)


def cond(x, p=None, *, mesh=None, spec=None, backend="auto"):
    """The condition number of x (..., M, N) in norm p, like
    ``jnp.linalg.cond``: the ratio of the extreme singular values for p None,
    2 or -2, else ||x||_p ||x^-1||_p (x square; inf where x^-1 does not exist
    and x has no NaN)."""
    x = arguments.inexact(x, "x")
    if x.ndim < 2:
        raise ValueError("jnp.linalg.cond: input array must be at least 2D; "
                         f"got arr.shape={x.shape}")
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError("jnp.linalg.cond: input array must not be empty; "
                         f"got arr.shape={x.shape}")
    options = dict(mesh=mesh, spec=spec, backend=backend)
    if p in (None, 2, -2):
        s = svdvals(x, **options)
        if p != -2:
            return s[..., 0] / s[..., -1]
        r = s[..., -1] / s[..., 0]
    else:
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f"jnp.linalg.cond: for {p=}, array must be square; "
                             f"got arr.shape={x.shape}")
        axes = (-2, -1)
        size = norm(x, p, axes, **options)  # an unknown p is refused here, before the inverse
        r = size * norm(linalg.inv(x, **options), p, axes, **options)
    return jnp.where(jnp.isnan(r) & ~jnp.isnan(x).any(axis=(-2, -1)), jnp.inf, r)


def norm(x, ord=None, axis=None, keepdims=False, *, mesh=None, spec=None,  # noqa: A002
         backend="auto"):
    """Vector and matrix norms, like ``jnp.linalg.norm``; the matrix norms
    ord 2, -2 and "nuc" from :func:`svdvals` (JAX's would run its SVD on
    the whole matrix, and refuse rows sharded on explicit mesh axes)."""
    x = arguments.inexact(x, "x")
    axes = _matrix_axes(x.ndim, ord, axis)
    if axes is None or isinstance(ord, (np.ndarray, jax.Array)) or ord not in ("nuc", 2, -2):
        return jnp.linalg.norm(x, ord, axis, keepdims)
    s = svdvals(jnp.moveaxis(x, axes, (-2, -1)), mesh=mesh, spec=spec, backend=backend)
    if ord == 2:
        y = jnp.max(s, axis=-1, initial=0)
    elif ord == -2:
        y = jnp.min(s, axis=-1)
    else:
        y = jnp.sum(s, axis=-1)
    return jnp.expand_dims(y, axes) if keepdims else y


def matrix_norm(x, /, *, keepdims=False, ord="fro", mesh=None, spec=None,  # noqa: A002
                backend="auto"):
    """The norm of each matrix x[..., :, :], like ``jnp.linalg.matrix_norm``."""
    return norm(x, ord, (-2, -1), keepdims, mesh=mesh, spec=spec, backend=backend)


def _matrix_axes(ndim: int, ord, axis):  # noqa: A002
    """The two axes of a matrix norm, non-negative; None for a vector norm,
    the norm of all entries, or axes JAX's norm should refuse itself."""
    if axis is None:
        if ord is None:
            return None
        axis = tuple(range(ndim))
    if not isinstance(axis, tuple) or len(axis) != 2:
        return None
    try:
        axes = tuple(operator.index(a) for a in axis)
    except TypeError:
        return None
    if not all(-ndim <= a < ndim for a in axes):
        return None
    return tuple(a % ndim for a in axes)


def matrix_power(a, n, *, mesh=None, spec=None, backend="auto"):
    """a (..., M, M) to the integer power n, like ``jnp.linalg.matrix_power``
    (repeated squaring; a negative n inverts a first, by :func:`jaxmg.inv`)."""
    a = arguments.as_array(a, "a")
    if a.ndim < 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be at least "
                        "two-dimensional")
    if a.shape[-2] != a.shape[-1]:
        raise TypeError("Last 2 dimensions of the array must be square")
    try:
        n = operator.index(n)
    except TypeError as e:
        raise TypeError(f"exponent must be an integer, got {n}") from e
    if n == 0:
        return jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    if n < 0:
        a = linalg.inv(a, mesh=mesh, spec=spec, backend=backend)
    result, square, n = None, a, abs(n)
    while True:
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if not n:
            return result
        square = square @ square


def tensorinv(a, ind=2, *, mesh=None, spec=None, backend="auto"):
    """The inverse of a with respect to tensordot over its first `ind` axes,
    like ``jnp.linalg.tensorinv``: shape a.shape[ind:] + a.shape[:ind]."""
    a = arguments.as_array(a, "a")
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got {ind=}")
    rows, cols = a.shape[:ind], a.shape[ind:]
    if math.prod(rows) != math.prod(cols):
        raise ValueError("tensorinv is only possible when the product of the first `ind` "
                         "dimensions equals that of the remaining dimensions. "
                         f"got arr.shape={a.shape} with {ind=}.")
    square = _reshape(a, (math.prod(rows), math.prod(cols)))
    inverse = linalg.inv(square, mesh=mesh, spec=spec, backend=backend)
    return _reshape(inverse, cols + rows)


def tensorsolve(a, b, axes=None, *, mesh=None, spec=None, backend="auto"):
    """x with tensordot(a, x, x.ndim) == b, like ``jnp.linalg.tensorsolve``;
    `axes` of a are moved to its end first."""
    a, b = arguments.as_array(a, "a"), arguments.as_array(b, "b")
    if axes is not None:
        a = jnp.moveaxis(a, axes, len(axes) * (a.ndim - 1,))
    shape = a.shape[b.ndim:]
    if a.shape[: b.ndim] != b.shape:
        raise ValueError("After moving axes to end, leading shape of a must match shape of b."
                         f" got a.shape={a.shape}, b.shape={b.shape}")
    if b.size != math.prod(shape):
        raise ValueError("Input arrays must have prod(a.shape[:b.ndim]) == "
                         f"prod(a.shape[b.ndim:]); got a.shape={a.shape}, b.ndim={b.ndim}.")
    square = _reshape(a, (b.size, math.prod(shape)))
    x = linalg.solve(square, _reshape(b, (b.size,)), mesh=mesh, spec=spec, backend=backend)
    return _reshape(x, shape)


def _reshape(x, shape):
    """x.reshape(shape). On explicit mesh axes, which need the result's
    sharding named, its first dimension is sharded over the axes x was
    sharded over (where they divide it evenly; else it is replicated)."""
    named = sharding_of(x)
    spec = getattr(named, "spec", None)
    axes = [ax for entry in spec or () for ax in (entry if isinstance(entry, tuple) else (entry,))
            if ax is not None]
    if not axes or not isinstance(named, NamedSharding):
        return jnp.reshape(x, shape)
    types = dict(zip(named.mesh.axis_names, named.mesh.axis_types))
    if any(types[ax] != jax.sharding.AxisType.Explicit for ax in axes):
        return jnp.reshape(x, shape)
    devices = math.prod(named.mesh.shape[ax] for ax in axes)
    lead = axes[0] if len(axes) == 1 else tuple(axes)
    out = P(lead) if shape and shape[0] % devices == 0 else P()
    return jnp.reshape(x, shape, out_sharding=NamedSharding(named.mesh, out))
