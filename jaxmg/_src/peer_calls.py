"""JAXMg's call forms of potrs, potri, syevd and lu_solve, read as jaxmg's.

Code written for that package calls ``potrs(a, b, T_A, mesh, in_specs,
return_status=False, pad=True)``, ``potri(a, T_A, ...)`` and ``syevd(a, T_A,
mesh, in_specs, return_eigenvectors=True, ...)`` (0.0.8); its 1.x releases
name a's spec ``matrix_specs``, let potrs ``return_logdet``, take ``donate``
and solve general systems by ``lu_solve(a, b, T_A, mesh, matrix_specs)``, a
matrix where jax.scipy's lu_solve takes a factor. The same calls run here,
each name mapped to jaxmg's option. jaxmg lays out any N itself; ``pad``
matters only where T_A does not divide each device's rows, where potrs and
potri pad each row block as JAXMg does (padded_blocks.py). The status of
potrs and potri is JAXMg's too: 0, or 7 where the matrix is not positive
definite (jaxmg's own return_info gives LAPACK's info).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, config
from jaxmg._src.engines import mg
from jaxmg._src.placement import inside_shard_map

# The parameters after the arrays, in JAXMg 0.0.8's positional order.
_PARAMETERS = {
    "potrs": ("T_A", "mesh", "in_specs", "return_status", "pad"),
    "potri": ("T_A", "mesh", "in_specs", "return_status", "pad"),
    "syevd": ("T_A", "mesh", "in_specs", "return_eigenvectors", "return_status", "pad"),
    "lu_solve": ("T_A", "mesh", "in_specs", "return_status", "pad", "donate"),
}
# What JAXMg's Cholesky routines report for a matrix that is not positive
# definite: the cusolverStatus_t of cusolverMgPotrf, CUSOLVER_STATUS_INTERNAL_ERROR.
CUSOLVER_INTERNAL_ERROR = 7

_OURS = {"T_A": "tile_size", "in_specs": "spec", "return_status": "return_info",
         "return_eigenvectors": "compute_vectors", "mesh": "mesh", "donate": "donate"}


class JaxMgWarning(UserWarning):
    """JAXMg's warning class (jaxmg.utils.JaxMgWarning there and here)."""


class ShapeRefused(ValueError, AssertionError):
    """a or b of a rank or shape JAXMg refuses: the ValueError its 1.x releases
    raise, and the AssertionError of 0.0.8's asserts, which code written for
    either may catch."""


class VectorMatrixRefused(ShapeRefused, IndexError):
    """A vector a given to potrs: also the IndexError 0.0.8's potrs raises
    there, reading a.shape[1] before its rank check."""


class SpecifiedTwice(TypeError, ValueError):
    """matrix_specs and in_specs both given: a TypeError as Python's own for an
    argument given twice, and the ValueError JAXMg raises for it."""

    def __init__(self, routine: str):
        super().__init__(f"jaxmg.{routine}: Specify only one of matrix_specs and in_specs "
                         "(they name the same option)")


def accepts_peer_calls(arrays: int, with_logdet=None, cholesky_status=False, padded=None):
    """Lets the wrapped routine (whose first `arrays` parameters are arrays and
    the rest keyword-only) be called as JAXMg's namesake. with_logdet: the
    routine's form that also returns log det a (potrs's return_logdet);
    cholesky_status: its status is JAXMg's (cusolver_status), not LAPACK's info;
    padded: the routine through JAXMg's padded row blocks (padded_blocks.py),
    which gives None where pad=True asks for no padding."""

    def wrap(routine):
        names = _PARAMETERS[routine.__name__]
        theirs_only = frozenset(names) - {"mesh"} | {"matrix_specs", "return_logdet"}

        @functools.wraps(routine)
        def call(*args, **kwargs):
            if len(args) > arrays or not theirs_only.isdisjoint(kwargs):
                check_arrays(routine.__name__, *args[:arrays])
                pad = _given(names, arrays, args, kwargs, "pad", True)
                args, kwargs, logdet = _as_ours(routine.__name__, names, arrays, args, kwargs)
                if logdet and with_logdet is None:
                    raise TypeError(f"jaxmg.{routine.__name__} has no return_logdet")
                out = None
                if padded is not None and pad and not logdet:
                    fallback = functools.partial(routine, **kwargs)
                    out = padded(*args, routine=routine, fallback=fallback, **kwargs)
                if out is None:
                    out = (with_logdet if logdet else routine)(*args, **kwargs)
                if cholesky_status and kwargs.get("return_info"):
                    return (*out[:-1], cusolver_status(out[-1]))
                return out
            return routine(*args, **kwargs)

        return call

    return wrap


def accepts_matrix_form(solve_matrix):
    """Lets jax.scipy's lu_solve(lu_and_piv, b, ...) also be called as JAXMg's
    lu_solve(a, b, T_A, mesh, matrix_specs, *, in_specs, return_status, pad,
    donate): a matrix (an array, not a factor) first solves a x = b by
    solve_matrix(a, b, tile_size=, mesh=, spec=, return_info=, donate=)."""

    def wrap(routine):
        @functools.wraps(routine)
        def call(*args, **kwargs):
            first = args[0] if args else kwargs.get("a")
            if not isinstance(first, (jax.Array, np.ndarray)):
                return routine(*args, **kwargs)
            if not args:
                args = (kwargs.pop("a"),)
            if len(args) < 2 and "b" in kwargs:
                args = (*args, kwargs.pop("b"))
            if len(args) < 3 and "T_A" not in kwargs:
                raise TypeError(
                    f"jaxmg.{routine.__name__} takes the factor from lu_factor, as "
                    f"jax.scipy.linalg.{routine.__name__} does, or a matrix with its tile size, as "
                    f"JAXMg's {routine.__name__}(a, b, T_A); got a matrix and no T_A")
            names = _PARAMETERS[routine.__name__]
            args, kwargs, _ = _as_ours(routine.__name__, names, 2, args, kwargs)
            unknown = set(kwargs) - {"tile_size", "mesh", "spec", "return_info", "donate"}
            if unknown:
                raise TypeError(
                    f"jaxmg.{routine.__name__}(a, b, T_A, ...) got unexpected argument(s) "
                    f"{sorted(unknown)}; it takes {', '.join(names)} and matrix_specs")
            return solve_matrix(*args, **kwargs)

        return call

    return wrap


def cusolver_status(info):
    """JAXMg's status for LAPACK's info of a Cholesky factorisation (an int32
    array of info's shape); a mixed solve's RefinementInfo stays as it is."""
    if not isinstance(info, (jax.Array, np.ndarray)):
        return info
    return jnp.where(info == 0, 0, CUSOLVER_INTERNAL_ERROR).astype(jnp.int32)


def check_arrays(routine: str, a, b=None):
    """a (and b) as JAXMg's routines take them, refused in that package's
    words: no promotion, as jaxmg's LAPACK-named routines."""
    a = arguments.as_array(a, "a")
    b = None if b is None else arguments.as_array(b, "b")
    what = f"jaxmg.{routine} (JAXMg's call form)"
    if a.ndim != 2:
        refused = VectorMatrixRefused if routine == "potrs" and a.ndim == 1 else ShapeRefused
        raise refused(f"{what} expects a rank-2 matrix A (a must be a 2D array), got shape "
                      f"{a.shape}")
    if b is not None and b.ndim not in (1, 2):
        raise ShapeRefused(f"{what} expects a rank-1 or rank-2 RHS B (b must be a 1D or 2D "
                           f"array), got shape {b.shape}")
    if b is not None and a.dtype != b.dtype:
        raise TypeError(f"{what} requires matching A/B dtypes, got {a.dtype} and {b.dtype}; "
                        "cast b with b.astype(a.dtype)")
    if a.dtype not in config.SUPPORTED:
        raise TypeError(f"{what} supports float32, float64, complex64 and complex128, got "
                        f"{a.dtype}; cast the arrays first")
    local = inside_shard_map()  # a: this device's own rows
    if a.shape[0] != a.shape[1] and not local:
        raise ShapeRefused(f"{what} expects A to be square, got shape {a.shape}")
    rows = (a.shape[0], a.shape[1]) if local else (a.shape[0],)  # b: its rows or all of them
    if b is not None and b.shape[0] not in rows:
        raise ShapeRefused(f"{what}: A and B must have matching leading dimensions (A and b "
                           f"must have the same number of columns (A's) as rows (b's)), got "
                           f"{a.shape} and {b.shape}")
    return a, b


def spec_of_a(routine: str, matrix_specs, in_specs):
    """a's PartitionSpec from JAXMg's matrix_specs or its older name in_specs."""
    if matrix_specs is not None and in_specs is not None:
        raise SpecifiedTwice(routine)
    return _spec_of_a(routine, in_specs if matrix_specs is None else matrix_specs)


def check_tile(routine: str, T_A):  # noqa: N803 (JAXMg's name)
    """T_A as JAXMg takes it, refused in its words when it is no tile size."""
    refusal = f"jaxmg.{routine}: T_A must be positive (an int, the tile size)"
    return arguments.check_tile(T_A, refusal)


def _given(names, arrays: int, args, kwargs, name: str, default):
    """The value of JAXMg's parameter `name`, positional or by name."""
    at = arrays + names.index(name)
    return args[at] if len(args) > at else kwargs.get(name, default)


def _as_ours(routine: str, names, arrays: int, args, kwargs):
    """(args, kwargs) as jaxmg names them, and whether log det a is asked for."""
    if len(args) > arrays + len(names):
        raise TypeError(
            f"jaxmg.{routine} takes at most {arrays + len(names)} positional arguments "
            f"(the arrays, then {', '.join(names)}), got {len(args)}")
    given = dict(zip(names, args[arrays:]))
    kwargs = dict(kwargs)
    if "matrix_specs" in kwargs:  # the later name of in_specs
        if "in_specs" in kwargs or "in_specs" in given:
            raise SpecifiedTwice(routine)
        kwargs["in_specs"] = kwargs.pop("matrix_specs")
    logdet = arguments.check_flag(kwargs.pop("return_logdet", False), "return_logdet")
    for name in names:
        if name in kwargs:
            if name in given:
                raise TypeError(f"jaxmg.{routine} got multiple values for argument {name!r}")
            given[name] = kwargs.pop(name)
    if "pad" in given:
        arguments.check_flag(given.pop("pad"), "pad")
    if "T_A" in given:
        given["T_A"] = check_tile(routine, given["T_A"])
        widest = mg.GPU_SYEVD_MAX_TILE  # JAXMg 0.0.8 lowers a wider T_A, with a warning
        if routine == "syevd" and given["T_A"] > widest:
            warnings.warn(f"T_A has a maximum value of {widest} for SyevdMg, received "
                          f"T_A={given['T_A']}, T_A is lowered to {widest}",
                          JaxMgWarning, stacklevel=arguments.user_stacklevel())
            given["T_A"] = widest
    if "in_specs" in given:
        given["in_specs"] = _spec_of_a(routine, given["in_specs"])
    for name, value in given.items():
        ours = _OURS[name]
        if ours in kwargs:
            raise TypeError(
                f"jaxmg.{routine}: {name} and {ours} name the same option; pass only one")
        kwargs[ours] = value
    return args[:arrays], kwargs, logdet


def _spec_of_a(routine: str, in_specs):
    """in_specs as JAXMg takes it: a's PartitionSpec, alone or first in a list
    or tuple (potrs: then b's, which b's own layout supersedes)."""
    if in_specs is None:
        return None
    if isinstance(in_specs, P):
        return _check_spec_of_a(routine, in_specs)
    most = 2 if routine == "potrs" else 1
    if most == 2:
        sequence, held = "a list/tuple of one or two", "a's spec, e.g. P('x', None), then b's"
    else:
        sequence, held = "a 1-element list/tuple", "a's spec, e.g. P('x', None)"
    if not isinstance(in_specs, (list, tuple)):
        contents = "" if most == 2 else " containing one"
        raise TypeError(f"jaxmg.{routine}: in_specs must be a PartitionSpec or {sequence}"
                        f"{contents} ({held}); got {in_specs!r}")
    if not 1 <= len(in_specs) <= most or not all(isinstance(p, P) for p in in_specs):
        raise ValueError(f"jaxmg.{routine}: in_specs must be a single PartitionSpec or "
                         f"{sequence} ({held}); got {in_specs!r}")
    if len(in_specs) == 2 and any(entry is not None for entry in in_specs[1]):
        raise ValueError(f"jaxmg.{routine}: b must be replicated along all shards with "
                         f"PartitionSpec P(None, None) in in_specs (b's own layout is "
                         f"read off b itself); got {in_specs[1]!r}")
    return _check_spec_of_a(routine, in_specs[0])


# JAXMg's routines that lay a out by rows only (its 1.x routines also take
# column- and 2-D-sharded specs).
_ROWS_ONLY = frozenset({"potri", "cyclic_1d"})


def _check_spec_of_a(routine: str, spec):
    """a's spec as every JAXMg release refuses it: sharded along neither axis,
    or (potri, cyclic_1d) along any but the rows."""
    entries = tuple(spec) + (None,) * (2 - len(spec))
    rows_only = routine in _ROWS_ONLY
    if len(entries) > 2 or all(e is None for e in entries) or (rows_only and (
            entries[0] is None or entries[1] is not None)):
        took = "" if rows_only else ", or as JAXMg 1.x also takes, P(None, str) or P(str, str)"
        raise ValueError(f"jaxmg.{routine} (JAXMg's call form): A must be sharded along the "
                         f"rows with PartitionSpec P(str, None){took}; got {spec!r}")
    return spec
