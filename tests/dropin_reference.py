"""JAX's own solvers behind the names and signatures the drop-in suites
(test_dropin_*.py) expect of jaxmg: run with JAXMG_DROPIN_REFERENCE=1, the
suites call these instead of jaxmg, so a test that fails here is wrong, not
the library.

Signatures follow jax.scipy.linalg where JAX has the function there (det,
cholesky, cho_factor, cho_solve, solve_triangular, lu, lu_factor, lu_solve,
solve, inv, eigh), jax.numpy.linalg otherwise (slogdet, eigvalsh, lstsq, qr,
svd); jaxmg's own options come after, keyword-only, and change nothing here.
Arguments are checked here with messages naming the argument, which is what
the suites ask of jaxmg (JAX's own messages do not always name it)."""

from __future__ import annotations

import math
import typing

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


class EighResult(typing.NamedTuple):
    eigenvalues: jax.Array
    eigenvectors: jax.Array


def gathered(x):
    """x as one array JAX's solvers take: NumPy input converted; an array
    sharded over explicit axes gathered (JAX refuses those), in place on its
    mesh. The suites also use it for their own arithmetic on results."""
    x = jnp.asarray(x)
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty:
        return x
    explicit = {
        ax for ax, kind in zip(mesh.axis_names, mesh.axis_types) if kind == AxisType.Explicit
    }
    used = set()
    for entry in sharding.spec:
        used.update(entry if isinstance(entry, tuple) else (entry,))
    if used & explicit:
        return jax.sharding.reshard(x, NamedSharding(mesh, P()))
    return x


def _explicit_axis(x, dim):
    """(mesh, entry) when x's dimension dim is sharded over Explicit axes, else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or np.ndim(x) == 0:
        return None
    entry = (tuple(sharding.spec) + (None,) * np.ndim(x))[dim % np.ndim(x)]
    axes = entry if isinstance(entry, tuple) else (entry,)
    kinds = dict(zip(mesh.axis_names, mesh.axis_types))
    if entry is None or any(kinds[ax] != AxisType.Explicit for ax in axes):
        return None
    return mesh, entry


def _laid_out(x, where, dim):
    """x with dimension dim sharded as `where` (from _explicit_axis) says,
    where the devices split it evenly: the layouts jaxmg documents for its
    results (rows like a, x like b, eigenvectors by columns), so the suites'
    own arithmetic on results meets them here too."""
    if where is None:
        return x
    mesh, entry = where
    axes = entry if isinstance(entry, tuple) else (entry,)
    if x.shape[dim] % math.prod(mesh.shape[ax] for ax in axes):
        return x
    spec = [None] * x.ndim
    spec[dim % x.ndim] = entry
    return jax.sharding.reshard(x, NamedSharding(mesh, P(*spec)))


def _rows_of(x):
    """Where x's rows (a vector's only axis) are sharded over Explicit axes."""
    return _explicit_axis(x, -1 if np.ndim(x) == 1 else -2)


def _like_rows(x, where):
    return _laid_out(x, where, -1 if x.ndim == 1 else -2)


def _manual_axis(spec):
    """Inside shard_map: the axis sharding a's rows (None outside)."""
    manual = tuple(jax.sharding.get_abstract_mesh().manual_axes)
    if not manual:
        return None
    if spec is not None and spec[0] is not None:
        return spec[0]
    return manual[0]


def _square(a, name="a"):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name} must be a square matrix (..., N, N), got shape {a.shape}")


def _rhs(a, b, name="b"):
    n = a.shape[-1]
    if b.ndim < 1 or (b.shape[0] if b.ndim == 1 else b.shape[-2]) != n:
        raise ValueError(f"{name} must have {n} rows to match a, got shape {b.shape}")


def _flag(value, name):
    """True or False, or 1 or 0 (Python's or NumPy's), as JAX takes them."""
    integer = isinstance(value, (int, np.integer)) and value in (0, 1)
    if not (isinstance(value, (bool, np.bool_)) or integer):
        raise TypeError(f"{name} must be True or False (or 1 or 0), got {value!r}")


def _uplo(value, name, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def _options(mesh=None, spec=None, backend="auto", tile_size=None, on_failure="nan"):
    """jaxmg's own options: accepted and checked like jaxmg checks them, unused."""
    if backend not in ("auto", "jaxmg", "jax", "mp"):
        raise ValueError(f"backend must be 'auto', 'jaxmg', 'jax' or 'mp', got {backend!r}")
    if tile_size is not None and (not isinstance(tile_size, int) or tile_size < 1):
        raise ValueError(f"tile_size must be a positive int, got {tile_size!r}")
    if on_failure not in ("nan", "raise", "checkify"):
        raise ValueError(f"on_failure must be 'nan', 'raise' or 'checkify', got {on_failure!r}")
    return spec


# ---- jax.scipy.linalg names ----------------------------------------------------------


def det(a, *, mesh=None, spec=None, backend="auto", tile_size=None):
    _options(mesh, spec, backend, tile_size)
    a = gathered(a)
    _square(a)
    return jsl.det(a)


def cholesky(
    a, lower=False, *, mesh=None, spec=None, backend="auto", tile_size=None, on_failure="nan"
):
    _options(mesh, spec, backend, tile_size, on_failure)
    rows, a = _rows_of(a), gathered(a)
    _square(a)
    _flag(lower, "lower")
    return _like_rows(jsl.cholesky(a, lower=lower), rows)


def cho_factor(
    a, lower=False, *, mesh=None, spec=None, backend="auto", tile_size=None, on_failure="nan"
):
    _options(mesh, spec, backend, tile_size, on_failure)
    rows, a = _rows_of(a), gathered(a)
    _square(a)
    _flag(lower, "lower")
    c, lower = jsl.cho_factor(a, lower=lower)
    return _like_rows(c, rows), lower


def cho_solve(c_and_lower, b):
    c, lower = c_and_lower
    _flag(lower, "lower")
    b_rows, c, b = _rows_of(b), gathered(c), gathered(b)
    _rhs(c, b)
    return _like_rows(jsl.cho_solve((c, lower), b), b_rows)


def cho_logdet(c_and_lower):
    c, _ = c_and_lower
    diagonal = jnp.diagonal(gathered(c), axis1=-2, axis2=-1)
    return 2 * jnp.sum(jnp.log(jnp.real(diagonal)), axis=-1)


_TRANS = (0, 1, 2, "N", "T", "C")


def solve_triangular(
    a,
    b,
    trans=0,
    lower=False,
    unit_diagonal=False,
    *,
    mesh=None,
    spec=None,
    backend="auto",
    tile_size=None,
):
    _options(mesh, spec, backend, tile_size)
    b_rows, a, b = _rows_of(b), gathered(a), gathered(b)
    _square(a)
    _rhs(a, b)
    _uplo(trans, "trans", _TRANS)
    _flag(lower, "lower")
    _flag(unit_diagonal, "unit_diagonal")
    x = jsl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)
    return _like_rows(x, b_rows)


def lu(a, permute_l=False, *, mesh=None, spec=None, backend="auto", tile_size=None):
    _options(mesh, spec, backend, tile_size)
    rows, a = _rows_of(a), gathered(a)
    _square(a)
    _flag(permute_l, "permute_l")
    return tuple(_like_rows(x, rows) for x in jsl.lu(a, permute_l=permute_l))


def lu_factor(a, *, mesh=None, spec=None, backend="auto", tile_size=None, on_failure="nan"):
    _options(mesh, spec, backend, tile_size, on_failure)
    rows, a = _rows_of(a), gathered(a)
    _square(a)
    lu_, piv = jsl.lu_factor(a)
    return _like_rows(lu_, rows), piv


def lu_solve(lu_and_piv, b, trans=0):
    lu_, piv = lu_and_piv
    b_rows, lu_, b = _rows_of(b), gathered(lu_), gathered(b)
    _rhs(lu_, b)
    _uplo(trans, "trans", (0, 1, 2))
    return _like_rows(jsl.lu_solve((lu_, gathered(piv)), b, trans=trans), b_rows)


def solve(
    a,
    b,
    lower=False,
    *,
    assume_a="gen",
    mesh=None,
    spec=None,
    backend="auto",
    tile_size=None,
    on_failure="nan",
):
    _options(mesh, spec, backend, tile_size, on_failure)
    b_rows, a, b = _rows_of(b), gathered(a), gathered(b)
    _square(a)
    _uplo(assume_a, "assume_a", ("gen", "sym", "her", "pos"))
    _flag(lower, "lower")
    if assume_a != "pos":
        return _like_rows(jnp.linalg.solve(a, b), b_rows)
    # jax.scipy's Cholesky path neither broadcasts batch dimensions nor takes
    # a stack of vectors without a warning; the suites ask jaxmg to solve as
    # jnp.linalg.solve does.
    vector = b.ndim == 1
    b = b[:, None] if vector else b
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    x = _pos_solve(a, jnp.broadcast_to(b, batch + b.shape[-2:]), lower)
    return _like_rows(x[..., 0] if vector else x, b_rows)


def _pos_solve(a, b, lower):
    """Cholesky solve differentiated as a solve with a as it stands (as
    jnp.linalg.solve is). Not jax.scipy.linalg.solve(assume_a="pos"): its
    reverse-mode derivative is wrong for complex a (see dropin.cho_solve_ref)."""
    factor = jsl.cho_factor(jax.lax.stop_gradient(a), lower=lower)
    return jax.lax.custom_linear_solve(
        lambda x: a @ x,
        b,
        lambda _, x: jsl.cho_solve(factor, x),
        lambda _, x: jnp.conj(jsl.cho_solve(factor, jnp.conj(x))),
    )


def inv(
    a, *, assume_a="gen", mesh=None, spec=None, backend="auto", tile_size=None, on_failure="nan"
):
    _options(mesh, spec, backend, tile_size, on_failure)
    rows, a = _rows_of(a), gathered(a)
    _square(a)
    _uplo(assume_a, "assume_a", ("gen", "sym", "her", "pos"))
    return _like_rows(jnp.linalg.inv(a), rows)


def eigh(
    a,
    UPLO=None,  # noqa: N803
    symmetrize_input=True,
    *,
    lower=True,
    eigvals_only=False,
    b=None,
    overwrite_a=False,
    overwrite_b=False,
    turbo=True,
    eigvals=None,
    type=1,  # noqa: A002
    check_finite=True,
    mesh=None,
    spec=None,
    backend="auto",
    tile_size=None,
    on_failure="nan",
):
    """jnp.linalg.eigh's UPLO/symmetrize_input and jax.scipy's lower/eigvals_only
    (UPLO, when given, names the triangle; else lower does); jax.scipy's
    other keywords checked by jax.scipy.linalg.eigh itself."""
    _options(mesh, spec, backend, tile_size, on_failure)
    if b is not None:  # JAX's generalized eigh (jax 0.12; before, its NotImplementedError)
        rows, result = _rows_of(a), jsl.eigh(gathered(a), gathered(b), lower=lower,
                                             eigvals_only=eigvals_only, eigvals=eigvals, type=type)
        return result if eigvals_only else EighResult(result[0], _laid_out(result[1], rows, -1))
    if eigvals is not None or type != 1:
        jsl.eigh(gathered(a), eigvals=eigvals, type=type)  # raises JAX's error
    rows, a = _rows_of(a), gathered(a)
    _square(a)
    _uplo(UPLO, "UPLO", (None, "L", "U"))
    _flag(symmetrize_input, "symmetrize_input")
    _flag(lower, "lower")
    uplo = UPLO if UPLO is not None else ("L" if lower else "U")
    w, v = jnp.linalg.eigh(a, UPLO=uplo, symmetrize_input=symmetrize_input)
    return w if eigvals_only else EighResult(w, _laid_out(v, rows, -1))


# ---- jax.numpy.linalg names ------------------------------------------------------------


def slogdet(a, *, assume_a="gen", mesh=None, spec=None, backend="auto", tile_size=None):
    _options(mesh, spec, backend, tile_size)
    a = gathered(a)
    _square(a)
    _uplo(assume_a, "assume_a", ("gen", "sym", "her", "pos"))
    return jnp.linalg.slogdet(a)


def eigvalsh(
    a,
    UPLO="L",  # noqa: N803
    *,
    symmetrize_input=True,
    mesh=None,
    spec=None,
    backend="auto",
    tile_size=None,
    on_failure="nan",
):
    _options(mesh, spec, backend, tile_size, on_failure)
    a = gathered(a)
    _square(a)
    _uplo(UPLO, "UPLO", (None, "L", "U"))
    _flag(symmetrize_input, "symmetrize_input")
    return jnp.linalg.eigvalsh(a, UPLO=UPLO, symmetrize_input=symmetrize_input)


def lstsq(a, b, rcond=None, *, numpy_resid=False, mesh=None, spec=None, backend="auto"):
    _options(mesh, spec, backend)
    a, b = gathered(a), gathered(b)
    if a.ndim != 2:
        raise ValueError(f"a must be a 2-D (M, N) matrix, got shape {a.shape}")
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"b must have {a.shape[0]} rows to match a, got shape {b.shape}")
    return jnp.linalg.lstsq(a, b, rcond=rcond, numpy_resid=numpy_resid)


def qr(a, mode="reduced", *, mesh=None, spec=None, backend="auto"):
    _options(mesh, spec, backend)
    _uplo(mode, "mode", ("reduced", "complete", "r"))
    rows = _rows_of(a)
    out = jnp.linalg.qr(gathered(a), mode=mode)
    return out if mode == "r" else (_like_rows(out[0], rows), out[1])


def svd(
    a, full_matrices=True, compute_uv=True, hermitian=False, *, overwrite_a=False,
    check_finite=True, lapack_driver="gesdd", mesh=None, spec=None, backend="auto"
):
    _options(mesh, spec, backend)
    if lapack_driver not in ("gesdd", "gesvd"):  # scipy's drivers; JAX ignores the name
        raise ValueError(f"lapack_driver must be 'gesdd' or 'gesvd', got {lapack_driver!r}")
    rows, a = _rows_of(a), gathered(a)
    if a.ndim < 2:
        raise ValueError(f"a must be a matrix (..., M, N), got shape {a.shape}")
    if compute_uv:
        u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices, hermitian=hermitian)
        return _like_rows(u, rows), s, _like_rows(vh, rows)
    if hermitian:
        return jnp.linalg.svd(a, compute_uv=False, hermitian=True)
    # Values only: R of a QR first, so nothing of a's full size but one copy
    # of it (JAX's own values-only SVD allocates M x M work on CPU).
    m, n = a.shape[-2:]
    tall = a if m >= n else jnp.conj(jnp.swapaxes(a, -1, -2))
    return jnp.linalg.svd(jnp.linalg.qr(tall, mode="r"), compute_uv=False)


# ---- jaxmg's LAPACK names --------------------------------------------------------------


def potrs(a, b, *, mesh=None, spec=None, backend="auto", tile_size=None):
    """Reads a's upper triangle; inside shard_map a is this device's row block
    and b its rows or all of B."""
    _options(mesh, spec, backend, tile_size)
    axis = _manual_axis(spec)
    if axis is None:
        return _like_rows(_pos_solve(gathered(a), gathered(b), lower=False), _rows_of(b))
    rows = a.shape[0]
    whole = jax.lax.all_gather(a, axis, tiled=True)
    b_rows = b.shape[0] == rows and rows != whole.shape[0]
    b_whole = jax.lax.all_gather(b, axis, tiled=True) if b_rows else b
    x = jsl.cho_solve(jsl.cho_factor(whole, lower=False), b_whole)
    return _my_rows(x, axis, rows) if b_rows else x


def potri(a, *, mesh=None, spec=None, backend="auto", tile_size=None):
    _options(mesh, spec, backend, tile_size)
    axis = _manual_axis(spec)
    rows = None if axis is not None else _rows_of(a)
    whole = gathered(a) if axis is None else jax.lax.all_gather(a, axis, tiled=True)
    inverse = jsl.cho_solve(
        jsl.cho_factor(whole, lower=False), jnp.eye(whole.shape[0], dtype=a.dtype)
    )
    return _like_rows(inverse, rows) if axis is None else _my_rows(inverse, axis, a.shape[0])


def syevd(a, *, compute_vectors=True, mesh=None, spec=None, backend="auto", tile_size=None):
    _options(mesh, spec, backend, tile_size)
    rows = _rows_of(a)
    w, v = jnp.linalg.eigh(gathered(a), UPLO="U", symmetrize_input=False)
    return (w, _laid_out(v, rows, -1)) if compute_vectors else w


def _my_rows(x, axis, rows):
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(axis) * rows, rows, 0)
