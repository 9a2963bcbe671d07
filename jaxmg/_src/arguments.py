"""Checks of the arguments every routine takes, each naming the argument and
the fix."""

from __future__ import annotations

import operator
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxmg._src import config, numpy_rules


class ShapeError(ValueError, TypeError):
    """A matrix of the wrong rank or shape: the TypeError of JAX's linalg
    primitives (cholesky, eigh, qr, svd, lu) and the ValueError of
    jnp.linalg's own checks (inv, det)."""


def check_rank2(a, name: str = "a", square: bool = True) -> None:
    shape = getattr(a, "shape", None)
    if shape is None or len(shape) != 2:
        hint = "; use jax.vmap for batches" if shape is not None and len(shape) > 2 else ""
        form = "(N, N)" if square else "(M, N)"
        raise ShapeError(f"jaxmg: {name} must be a 2-D {form} matrix, got shape {shape}{hint}")


def check_square_matrices(a, routine: str, name: str = "a") -> None:
    """a of shape (..., N, N): one square matrix or a batch of them."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(
            f"jaxmg.{routine}: {name} must be a square matrix or a batch of them: it must have "
            f"shape [..., n, n], got {tuple(a.shape)}{shard_map_hint()}"
        )


def is_symbolic(dim) -> bool:
    """Whether an array dimension is a jax.export symbolic one."""
    return not isinstance(dim, (int, np.integer))


def shard_map_hint() -> str:
    """What a refusal of a non-square matrix adds inside shard_map, where a
    device's block of rows is the likely cause."""
    if not jax.sharding.get_abstract_mesh().manual_axes:
        return ""
    return ("; inside shard_map the jax.scipy-style routines take each device's own square "
            "matrix, as jax.scipy does: for a matrix whose rows are spread over the devices, "
            "call jaxmg.potrs, potri or syevd on the row blocks")


class UnsupportedDtypeError(TypeError, NotImplementedError):
    """A half-precision input: the TypeError of JAX's solvers (jax 0.11 on),
    and the NotImplementedError some raised before."""


HALF = (jnp.float16, jnp.bfloat16)  # which jaxmg's solvers do not take


def check_dtype(a, name: str = "a", primitive: str = "the solver") -> np.dtype:
    """a's dtype, if the solvers take it. primitive: the JAX primitive whose
    refusal of half precision the message repeats ("cholesky does not accept
    dtype float16"), so code matching JAX's message matches jaxmg's."""
    dtype = jnp.dtype(a.dtype)
    if dtype in HALF:
        raise UnsupportedDtypeError(
            f"jaxmg: {primitive} does not accept dtype {dtype.name} (Unsupported dtype "
            f"{dtype.name}): {name} has dtype {dtype.name}, which the solvers do not support; "
            f"cast it first, e.g. {name}.astype(jnp.float32)"
        )
    if dtype not in config.SUPPORTED:
        raise TypeError(
            f"jaxmg: {name} has dtype {dtype.name}; supported are float32, float64, "
            "complex64 and complex128 (float64/complex128 need jax_enable_x64)"
        )
    return dtype


def check_same_dtype(b, dtype, name: str = "b", other: str = "a") -> None:
    if jnp.dtype(b.dtype) != jnp.dtype(dtype):
        cast = f"{other}.dtype" if other.isidentifier() else f"jnp.{jnp.dtype(dtype).name}"
        raise TypeError(
            f"jaxmg: {name} has dtype {jnp.dtype(b.dtype).name} but {other} has "
            f"{jnp.dtype(dtype).name}; cast with {name}.astype({cast})"
        )


def check_tile(tile_size, refusal: str = "jaxmg: tile_size must be a positive int") -> int | None:
    """tile_size as an int (None stays None); refused with `refusal`, then
    the value."""
    if tile_size is None:
        return None
    if isinstance(tile_size, bool) or not isinstance(tile_size, (int, np.integer)):
        raise TypeError(f"{refusal}, got {tile_size!r}")
    if tile_size < 1:
        raise ValueError(f"{refusal}, got {tile_size}")
    return int(tile_size)


def integer_or_none(value) -> int | None:
    """value as a Python int where it is one (bools, NumPy and concrete 0-d
    integer arrays included), else None (floats, strings, tracers)."""
    if isinstance(value, str):
        return None
    try:
        if np.ndim(value) == 0 and jnp.dtype(getattr(value, "dtype", int)) == np.bool_:
            return int(value)  # NumPy's and JAX's bools have no __index__
        return operator.index(value)
    except TypeError:
        return None


class TracedOptionError(TypeError, ValueError):
    """An option traced by jit, where a Python value must decide the program:
    jaxmg's TypeError of a flag that is not a bool, and the ValueError JAX
    raises for a traced static argument."""


def check_donate(donate, a, *others) -> bool:
    """donate=, checked against what it gives away: a's buffer, which another
    argument must not be (XLA would read a buffer it already gave the result),
    and a's derivative, which a differentiated a would silently lose."""
    donate = check_flag(donate, "donate")
    if not donate:
        return False
    if any(x is a for x in others):
        raise ValueError(
            "jaxmg: donate=True gives a's buffer to the result, but b is a itself; pass a "
            "copy as b (jnp.copy(a)) or leave donate out"
        )
    if differentiated(a):
        raise ValueError(
            "jaxmg: donate=True gives up a, so nothing is left to differentiate with respect "
            "to it; leave donate out where a is differentiated (jax.grad, jvp, vjp)"
        )
    return True


def differentiated(x) -> bool:
    """Whether x is traced for a derivative, under any vmap levels."""
    from jax._src.interpreters import ad, batching

    # jax.grad traces with LinearizeTracer (jax 0.10 on), jvp with JVPTracer.
    derivative_tracers = (ad.JVPTracer, getattr(ad, "LinearizeTracer", ad.JVPTracer))
    while isinstance(x, jax.core.Tracer):
        if isinstance(x, derivative_tracers):
            return True
        if not isinstance(x, batching.BatchTracer):
            return False
        x = x.val
    return False


def check_flag(value, name: str) -> bool:
    """A boolean option: True or False, or 0 or 1 as JAX takes them (other
    numbers, floats and strings are refused)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if is_traced(value):
        raise TracedOptionError(
            f"jaxmg: {name} must be a Python True or False, got a traced value ({value}); "
            f"pass it as a static argument, e.g. jax.jit(f, static_argnames=({name!r},))"
        )
    number = integer_or_none(value)
    if number in (0, 1):
        return bool(number)
    error = ValueError if number is not None else TypeError
    raise error(f"jaxmg: {name} must be True or False (or 1 or 0), got {value!r}")


def check_choice(value, name: str, choices) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"jaxmg: {name} must be one of {tuple(choices)}, got {value!r}")


def as_array(x, name: str, *, lists: bool = False):
    """x as an array (NumPy inputs and Python scalars become jax.Arrays).
    Lists and tuples are refused, as jax.numpy.linalg refuses them, unless
    `lists` (the jax.scipy.linalg functions that take them)."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    if isinstance(x, (list, tuple)) and not lists:
        raise TypeError(
            f"jaxmg: {name} must be an array, got a {type(x).__name__} (as in jax.numpy.linalg); "
            f"convert it first, e.g. jnp.asarray({name})"
        )
    try:
        return jnp.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"jaxmg: {name} must be an array, got {type(x).__name__}") from e


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _inexact_dtype(dtype) -> np.dtype:
    """The floating dtype JAX's linear algebra computes an integer or bool
    input in: float64 for 64-bit integers when jax_enable_x64 is on,
    float32 otherwise; inexact dtypes stay as they are."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return dtype
    wide = dtype.itemsize == 8 and jax.config.jax_enable_x64
    return jnp.dtype(jnp.float64 if wide else jnp.float32)


def inexact(x, name: str, *, lists: bool = False):
    """as_array(x), with integer and bool entries cast to a floating dtype
    as JAX's linear algebra does (jnp.linalg.inv of int32 is float32)."""
    x = as_array(x, name, lists=lists)
    dtype = _inexact_dtype(x.dtype)
    return x if dtype == x.dtype else x.astype(dtype)


def promote(*named, lists: bool = False):
    """The (array, name) pairs as arrays of one common floating dtype, as
    jax.scipy.linalg.solve promotes its a and b (float32 with float64:
    float64; integers with float32: float32)."""
    arrays = [as_array(x, name, lists=lists) for x, name in named]
    # The arrays, not their dtypes: float64 NumPy inputs without x64 then
    # become float32 silently, as in JAX.
    with numpy_rules.callers_dtype_promotion():
        dtype = _inexact_dtype(jnp.result_type(*arrays))
    return varying_alike(*(x if x.dtype == dtype else x.astype(dtype) for x in arrays))


def varying_alike(*arrays):
    """The arrays, each typed as varying over every manual mesh axis one of
    them varies over: inside a shard_map, a b the same on every device (in_specs
    P(), or closed over) beside each device's own matrix, which JAX's solves
    (custom_linear_solve, their derivatives) take only typed alike."""
    vma = [_varying_axes(x) for x in arrays]
    every = frozenset().union(*vma)
    return tuple(x if v == every else jax.lax.pcast(x, tuple(sorted(every - v)), to="varying")
                 for x, v in zip(arrays, vma))


def _varying_axes(x) -> frozenset:
    """The manual mesh axes x's type varies over (jax 0.10 to 0.12 keep them
    in its manual axis type; earlier releases as vma)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "mat", None)
    return frozenset(getattr(mat, "varying", None) or getattr(aval, "vma", ()) or ())


def solve_dtype(b, dtype) -> np.dtype:
    """The dtype jax.scipy solves b against a factor of `dtype` in: both
    promoted together."""
    with numpy_rules.callers_dtype_promotion():
        return _inexact_dtype(jnp.result_type(b.dtype, dtype))


def user_stacklevel() -> int:
    """The stacklevel of the first caller outside jaxmg, seen from the function
    that warns (batching's vector_rhs and rank checks, JAXMg's syevd T_A):
    the public routines reach it through wrappers of different depths."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("jaxmg."):
        frame, level = frame.f_back, level + 1
    return level
