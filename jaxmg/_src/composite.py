"""Routines composed of jaxmg's distributed ones: jnp.linalg's pinv, svdvals,
matrix_rank, cond and the spectral and nuclear norms (norm, matrix_norm) from
the SVD, matrix_power, tensorinv and tensorsolve from inv and solve, and
jax.scipy.linalg's expm from products and one solve (expm_frechet, its
derivative). A sharded matrix stays sharded (JAX's own refuse one whose rows
are sharded on explicit mesh axes); each returns what JAX's namesake returns,
and raises JAX's errors, message included: code written for JAX matches them."""

from __future__ import annotations

import functools
import math
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxmg._src import (
    arguments,
    batching,
    dispatch,
    failures,
    linalg,
    numpy_rules,
    polar,
    sharding,
    triangular,
)
from jaxmg._src.eager import one_program, returns_ready_on_cpus
from jaxmg._src.placement import axis_names, batched_value, explicit_spec
from jaxmg._src.sharding import adjoint as _h, matmul_highest as _mm


@numpy_rules.default_rules
def svdvals(x, /, *, mesh=None, spec=None, backend="auto"):
    """The singular values of x (..., M, N), descending, like
    ``jnp.linalg.svdvals``; see :func:`jaxmg.svd` for the options."""
    return polar.svd(x, compute_uv=False, mesh=mesh, spec=spec, backend=backend)


@returns_ready_on_cpus
@one_program("hermitian")
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
    dispatch.check_rectangular_backend(backend, "pinv")
    a = arguments.inexact(a, "a")
    if a.ndim < 2:
        raise arguments.ShapeError(f"jaxmg: pinv takes a matrix (..., M, N), got shape {a.shape}")
    m, n = a.shape[-2:]
    if a.size == 0:  # JAX's ops on empty sharded arrays fail on meshes
        return jnp.zeros(a.shape[:-2] + (n, m), a.dtype)
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
    rtol = jnp.expand_dims(rtol[..., None], tuple(range(s.ndim - rtol.ndim - 1)))
    cutoff = rtol * s[..., :1]  # rtol of the batch's shape, or one for all, as JAX's
    inverse = jnp.where(s > cutoff, 1 / jnp.where(s > cutoff, s, 1), 0).astype(u.dtype)
    mm = sharding.row_products(sharding.rows_placement(a, mesh, spec))
    return mm(_h(vh), _h(u) * inverse[..., :, None])


@_pinv.defjvp
@numpy_rules.default_rules
def _pinv_jvp(options, primals, tangents):
    a, rtol = primals
    da = tangents[0]
    p = _pinv(a, rtol, options)
    where = sharding.rows_placement(a, options[1], options[2])
    if where is None:  # whole where it lies, as the SVD took it (Explicit rows gathered)
        a, da = sharding.whole_element(a), sharding.whole_element(da)
    if options[0]:  # hermitian: the SVD reads a symmetrised, so must its derivative
        a, da = sharding.hermitian_part(a, where), sharding.hermitian_part(da, where)
    mm = sharding.row_products(where)
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


@returns_ready_on_cpus
@one_program("hermitian")
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
    dispatch.check_rectangular_backend(backend, "matrix_rank")
    M = arguments.inexact(M, "M")  # noqa: N806
    if M.ndim < 2:
        return jnp.any(M != 0).astype(np.int32)
    s = polar.svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian, mesh=mesh,
                  spec=spec, backend=backend)
    if rtol is None:
        rtol = jnp.max(s, axis=-1) * max(M.shape[-2:]) * jnp.finfo(s.dtype).eps
    return jnp.sum(s > jnp.expand_dims(jnp.asarray(rtol), -1), axis=-1)


@returns_ready_on_cpus
@one_program("p")
def cond(x, p=None, *, mesh=None, spec=None, backend="auto"):
    """The condition number of x (..., M, N) in norm p, like
    ``jnp.linalg.cond``: the ratio of the extreme singular values for p None,
    2 or -2, else ||x||_p ||x^-1||_p (x square); inf where x is singular and
    has no NaN, as NumPy (and JAX from 0.11.2; before, NaN for p None or 2)."""
    x = arguments.inexact(x, "x")
    if x.ndim < 2:
        raise ValueError("jnp.linalg.cond: input array must be at least 2D; "
                         f"got arr.shape={x.shape}")
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError("jnp.linalg.cond: input array must not be empty; "
                         f"got arr.shape={x.shape}")
    if x.size == 0:  # an empty batch (JAX's ops on empty sharded arrays fail on meshes)
        return jnp.zeros(x.shape[:-2], jnp.finfo(x.dtype).dtype)
    options = dict(mesh=mesh, spec=spec, backend=backend)
    if p in (None, 2, -2):
        s = svdvals(x, **options)
        r = s[..., -1] / s[..., 0] if p == -2 else s[..., 0] / s[..., -1]
    else:
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f"jnp.linalg.cond: for {p=}, array must be square; "
                             f"got arr.shape={x.shape}")
        axes = (-2, -1)
        size = norm(x, p, axes, **options)  # an unknown p is refused here, before the inverse
        r = size * norm(linalg.inv(x, **options), p, axes, **options)  # NaN where x is singular
    return jnp.where(jnp.isnan(r) & ~jnp.isnan(x).any(axis=(-2, -1)), jnp.inf, r)


@returns_ready_on_cpus
@one_program("ord", "axis", "keepdims")
def norm(x, ord=None, axis=None, keepdims=False, *, mesh=None, spec=None,  # noqa: A002
         backend="auto"):
    """Vector and matrix norms, like ``jnp.linalg.norm``; the matrix norms
    ord 2, -2 and "nuc" from :func:`svdvals` (JAX's would run its SVD on
    the whole matrix, and refuse rows sharded on explicit mesh axes)."""
    x = arguments.inexact(x, "x")
    axes = _matrix_axes(x.ndim, ord, axis)
    if axes is None or isinstance(ord, (np.ndarray, jax.Array)) or ord not in ("nuc", 2, -2):
        y = jnp.linalg.norm(x, ord, axis, keepdims)
        if isinstance(ord, (int, float, np.number)) and ord != 0:
            # XLA's max and min across devices (CPU devices, jax 0.10 to
            # 0.12) skip NaN: a row-sharded NaN matrix had inf-norm 0 (and
            # a column-sharded one a finite 1-norm). Every norm but the
            # count of non-zeros is NaN where x has a NaN.
            every = tuple(range(x.ndim)) if axis is None else axis
            y = jnp.where(jnp.isnan(x).any(axis=every, keepdims=keepdims), jnp.nan, y)
        return y
    s = svdvals(jnp.moveaxis(x, axes, (-2, -1)), mesh=mesh, spec=spec, backend=backend)
    if ord == 2:
        y = jnp.max(s, axis=-1, initial=0)
    elif ord == -2:
        y = jnp.min(s, axis=-1)
    else:
        y = jnp.sum(s, axis=-1)
    return jnp.expand_dims(y, axes) if keepdims else y


@numpy_rules.default_rules
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


@returns_ready_on_cpus
@one_program("n")
def matrix_power(a, n, *, mesh=None, spec=None, backend="auto"):
    """a (..., M, M) to the integer power n, like ``jnp.linalg.matrix_power``
    (repeated squaring; a negative n inverts a first, by :func:`jaxmg.inv`)."""
    a = jnp.asarray(arguments.as_array(a, "a"))
    if a.ndim < 2:
        raise arguments.ShapeError(f"{a.ndim}-dimensional array given. Array must be at "
                                   "least two-dimensional")
    if a.shape[-2] != a.shape[-1]:
        raise arguments.ShapeError("Last 2 dimensions of the array must be square")
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


@numpy_rules.default_rules
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


@numpy_rules.default_rules
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
    typed = explicit_spec(x)
    axes = [ax for entry in typed[1] for ax in axis_names(entry)] if typed else []
    if not axes:
        return jnp.reshape(x, shape)
    mesh = typed[0]
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    if any(types[ax] != jax.sharding.AxisType.Explicit for ax in axes):
        return jnp.reshape(x, shape)
    devices = math.prod(mesh.shape[ax] for ax in axes)
    lead = axes[0] if len(axes) == 1 else tuple(axes)
    out = P(lead) if shape and shape[0] % devices == 0 else P()
    return jnp.reshape(x, shape, out_sharding=NamedSharding(mesh, out))


# Pade approximants r_m = p_m(A) / p_m(-A) of exp, by degree m: the
# coefficients of p_m (Higham 2005), and the largest ||A||_1 each is accurate
# for, to float64's and float32's precision; above the last, A is scaled down
# by 2^s and the result squared s times.
_PADE = {
    3: (120.0, 60.0, 12.0, 1.0),
    5: (30240.0, 15120.0, 3360.0, 420.0, 30.0, 1.0),
    7: (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0),
    9: (17643225600.0, 8821612800.0, 2075673600.0, 302702400.0, 30270240.0, 2162160.0,
        110880.0, 3960.0, 90.0, 1.0),
    13: (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
         129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
         40840800.0, 960960.0, 16380.0, 182.0, 1.0),
}
_THETA = {
    64: ((3, 1.495585217958292e-2), (5, 2.539398330063230e-1), (7, 9.504178996162932e-1),
         (9, 2.097847961257068), (13, 5.371920351148152)),
    32: ((3, 4.258730016922831e-1), (5, 1.880152677804762), (7, 3.925724783138660)),
}


@returns_ready_on_cpus
@one_program("upper_triangular", "max_squarings")
def expm(A, *, upper_triangular=False, max_squarings=16, mesh=None, spec=None,  # noqa: N803
         backend="auto"):
    """The matrix exponential of A (..., N, N), like ``jax.scipy.linalg.expm``:
    a Pade approximant with scaling and squaring, its denominator solved by
    :func:`jaxmg.solve` (:func:`jaxmg.solve_triangular` with
    upper_triangular), the products at full precision and sharded like A.
    NaN where more than max_squarings squarings would be needed."""
    A = arguments.inexact(A, "A")  # noqa: N806
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise arguments.ShapeError(
            f"Expected A to be a (batched) square matrix, got A.shape={A.shape}.")
    upper_triangular = arguments.check_flag(upper_triangular, "upper_triangular")
    max_squarings = operator.index(max_squarings)
    if A.shape[-1] == 0:
        return jnp.asarray(A)
    A = _products_ready(A)  # noqa: N806
    if A.ndim > 2:
        fn = functools.partial(expm, upper_triangular=upper_triangular,
                               max_squarings=max_squarings, mesh=mesh, spec=spec, backend=backend)
        return batching.broadcast_map(fn, (A,), (2,))
    numerator, denominator, squarings = _pade_of_scaled(A)
    options = dict(mesh=mesh, spec=spec, backend=backend)
    if upper_triangular:
        r = triangular.solve_triangular(denominator, numerator, **options)
    else:
        r = linalg.solve(denominator, numerator, **options)
    return _squared(r, squarings, max_squarings=max_squarings)


@returns_ready_on_cpus
@one_program("method", "compute_expm")
def expm_frechet(A, E, *, method=None, compute_expm=True, mesh=None, spec=None,  # noqa: N803
                 backend="auto"):
    """The Frechet derivative of expm at A in the direction E (and expm(A)
    first, with compute_expm), like ``jax.scipy.linalg.expm_frechet``: the
    derivative of :func:`expm` along E. method: ignored, as by JAX."""
    del method
    A, E = arguments.inexact(A, "A", lists=True), arguments.inexact(E, "E", lists=True)  # noqa: N806
    if A.ndim < 2 or A.shape[-2] != A.shape[-1]:
        raise ValueError(f"expected A to be a (batched) square matrix, got A.shape={A.shape}")
    if E.ndim < 2 or E.shape[-2] != E.shape[-1]:
        raise ValueError(f"expected E to be a (batched) square matrix, got E.shape={E.shape}")
    if A.shape != E.shape:
        raise ValueError("expected A and E to be the same shape, got "
                         f"A.shape={A.shape} E.shape={E.shape}")
    of_a = functools.partial(expm, mesh=mesh, spec=spec, backend=backend)
    value, derivative = jax.jvp(of_a, (A,), (E,))
    return (value, derivative) if compute_expm else derivative


def _products_ready(a):
    """a laid out for the Pade products on explicit mesh axes: one matrix's
    columns moved into its rows (a 2-D block layout's products contract a
    sharded axis against another), and a batch's matrices whole where they
    lie (the degree's branch, chosen per matrix, selects between results
    whose sharding the choice must share), under jax.vmap too."""
    typed = explicit_spec(a)
    if typed is None:
        return a
    mesh, spec = typed
    *batch, rows, cols = spec
    if a.ndim > 2 or batched_value(a) is not a:
        whole = P(*batch, None, None)
        return a if (rows, cols) == (None, None) else jax.sharding.reshard(
            a, NamedSharding(mesh, whole))
    if cols is None:
        return a
    return jax.sharding.reshard(a, NamedSharding(mesh, P(axis_names(rows) + axis_names(cols),
                                                       None)))


# The steps before and after the solve compiled once each: traced anew on
# every eager call, their branches would compile on every call.
@jax.jit
def _pade_of_scaled(a):
    """p_m(a / 2^s), p_m(-a / 2^s) and s: m the lowest degree accurate at
    ||a||_1 (s = 0), or beyond the highest degree's reach that degree, with s
    the fewest halvings that bring ||a||_1 within it."""
    degrees = _THETA[64 if jnp.finfo(a.dtype).bits == 64 else 32]
    norm1 = jnp.max(jnp.sum(jnp.abs(a), axis=0))
    squarings = jnp.maximum(0, jnp.floor(jnp.log2(norm1 / degrees[-1][1])))
    scaled = a / (2 ** squarings).astype(a.dtype)
    which = jnp.digitize(norm1, jnp.asarray([t for _, t in degrees[:-1]], norm1.dtype))
    odd, even = lax.switch(which, [functools.partial(_pade, m=m) for m, _ in degrees], scaled)
    return even + odd, even - odd, squarings


@functools.partial(jax.jit, static_argnames=("max_squarings",))
def _squared(r, squarings, *, max_squarings: int):
    """r squared `squarings` times; NaN if that is more than max_squarings."""

    def square(i, r):
        return lax.cond(i < squarings, lambda r: _mm(r, r), lambda r: r, r)

    r = lax.fori_loop(0, max_squarings, square, r)
    return failures.nan_where(squarings > max_squarings, r)


def _pade(a, m: int):
    """(odd, even) parts of p_m(a): p_m(a) = even + odd, p_m(-a) = even - odd."""
    b = _PADE[m]
    eye = jnp.eye(a.shape[0], dtype=a.dtype)
    a2 = _mm(a, a)
    if m == 13:  # Higham's grouping: 6 products, not 12
        a4 = _mm(a2, a2)
        a6 = _mm(a4, a2)
        odd = _mm(a, _mm(a6, b[13] * a6 + b[11] * a4 + b[9] * a2)
                  + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
        even = (_mm(a6, b[12] * a6 + b[10] * a4 + b[8] * a2)
                + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye)
        return odd, even
    powers = [eye, a2]  # a^0, a^2, a^4, ...
    while len(powers) <= m // 2:
        powers.append(_mm(powers[-1], a2))
    odd = _mm(a, sum(b[2 * k + 1] * p for k, p in enumerate(powers)))
    even = sum(b[2 * k] * p for k, p in enumerate(powers))
    return odd, even
