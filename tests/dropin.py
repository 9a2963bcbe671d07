"""What the drop-in suites (tests/test_dropin_*.py) share: the API under
test, the meshes, placements, test matrices, call modes and tolerances.

The suites hold jaxmg to jax.scipy.linalg / jax.numpy.linalg: the call forms
a JAX user writes, on meshes of 1, 2, 3, 4 and 8 devices with Auto and
Explicit axes. With JAXMG_DROPIN_REFERENCE=1 they run against
dropin_reference.py (JAX's own solvers behind jaxmg's names) instead; every
test passes there, so a failure against jaxmg is the library's."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import math
import os

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import dropin_reference
import helpers

REFERENCE = os.environ.get("JAXMG_DROPIN_REFERENCE", "") == "1"
api = dropin_reference if REFERENCE else importlib.import_module("jaxmg")

DTYPES = helpers.DTYPES
DEVICE_COUNTS = (1, 2, 3, 4, 8)
KINDS = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}
MODES = ("eager", "jit", "grad", "jvp", "vmap")
N = 24  # splits evenly over 1, 2, 3, 4 and 8 devices
K = 3  # right-hand sides
CONDITION = 10.0


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name


def is_complex(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.complexfloating)


def wide(dtype):
    """The 64-bit type of dtype's kind: references are computed in it."""
    return np.complex128 if is_complex(dtype) else np.float64


# ---- meshes and cases ------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def mesh(devices: int, kind: str = "auto"):
    """A 1-D mesh ("x",) over the first `devices` devices, axes Auto or Explicit."""
    available = jax.devices()
    if len(available) < devices:
        message = f"needs {devices} devices, {len(available)} present"
        if os.environ.get("JAXMG_TEST_ALLOW_FEWER_DEVICES"):
            pytest.skip(message)
        raise AssertionError(message)
    return jax.make_mesh((devices,), ("x",), axis_types=(KINDS[kind],), devices=available[:devices])


def is_explicit(mesh_) -> bool:
    return mesh_ is not None and any(t == AxisType.Explicit for t in mesh_.axis_types)


@dataclasses.dataclass(frozen=True)
class Case:
    devices: int
    kind: str
    dtype: type
    mode: str

    @property
    def mesh(self):
        return mesh(self.devices, self.kind)

    def __str__(self):
        return f"{self.devices}dev-{self.kind}-{dtype_id(self.dtype)}-{self.mode}"


def sweep(modes=MODES, dtypes=DTYPES, also=None, small=False):
    """Cases over the meshes: one per mesh (every device count, Auto and
    Explicit axes), or with `small` one per device count, the axis types
    alternating. The mode and dtype turn over so that each mode runs on both
    axis types (small: on one) at different device counts, and each dtype
    on several meshes. also=(name, values[, label]): a further argument,
    turning over independently of the dtype (label(value): its id); the
    params are then (case, value)."""
    if small:
        configs = [(i, i % 2, count) for i, count in enumerate(DEVICE_COUNTS)]
    else:
        configs = [(i, t, count) for t in range(2) for i, count in enumerate(DEVICE_COUNTS)]
    params = []
    for k, (i, t, count) in enumerate(configs):
        mode = modes[(i if small else i + 2 * t) % len(modes)]
        case = Case(count, list(KINDS)[t], dtypes[k % len(dtypes)], mode)
        if also is None:
            params.append(pytest.param(case, id=str(case)))
        else:
            name, values, *label = also
            # Independent of the dtype (k % len(dtypes)), and every value used.
            if math.gcd(len(values), len(dtypes)) == 1:
                value = values[k % len(values)]
            else:
                value = values[(k + k // len(dtypes)) % len(values)]
            value_id = label[0](value) if label else f"{name}={value}"
            params.append(pytest.param(case, value, id=f"{case}-{value_id}"))
    return params


# ---- placements ---------------------------------------------------------------------------

ROWS, REP, PLAIN, NUMPY = "rows", "rep", "plain", "numpy"


def place(x, how: str, mesh_=None, batched: int = 0):
    """x as a caller hands it over: "rows" sharded along its rows (a
    vector's only axis, else the second to last) over mesh_'s axis "x",
    "rep" whole on every device of mesh_, "plain" on the default device,
    "numpy" untouched. `batched` leading axes come from a vmap batch."""
    if how == NUMPY:
        return x
    if how == PLAIN:
        return jnp.asarray(x)
    spec = [None] * np.ndim(x)
    if how == ROWS:
        spec[np.ndim(x) - 1 if np.ndim(x) - batched == 1 else np.ndim(x) - 2] = "x"
    elif how != REP:
        raise ValueError(f"unknown placement {how!r}")
    return jax.device_put(x, NamedSharding(mesh_, P(*spec)))


def place_or_plain(x, how: str, mesh_):
    """place(x, how, mesh_), or on the default device when there is no mesh
    (the plain case of a test parametrized over meshes)."""
    return place(x, PLAIN if mesh_ is None else how, mesh_)


def like(x, ref):
    """x resharded as ref is, where ref's axes are Explicit (elementwise
    operands must agree there: a row-sharded matrix plus its column-sharded
    transpose would be sharded twice over one axis)."""
    sharding = getattr(jax.typeof(ref), "sharding", None)
    mesh_ = getattr(sharding, "mesh", None)
    if mesh_ is None or mesh_.empty or not is_explicit(mesh_):
        return x
    return jax.sharding.reshard(x, sharding)


def whole(x):
    """x replicated over its mesh where its axes are Explicit (the suites
    slice results and take their diagonals, which explicitly sharded
    dimensions refuse); unchanged elsewhere."""
    return dropin_reference.gathered(x)


def hermitian_part(a):
    """(a + a^H) / 2 on any placement: routines that read one triangle are
    differentiated through it, so every tangent is Hermitian."""
    a = jnp.asarray(a)
    return (a + like(jnp.conj(jnp.swapaxes(a, -1, -2)), a)) / 2


def jit_context(mesh_):
    """Under jit tracers carry no devices: jaxmg's documented way to name the
    mesh there is jax.set_mesh."""
    return jax.set_mesh(mesh_) if mesh_ is not None else contextlib.nullcontext()


def transform_context(mesh_):
    """Eager grad and jvp need no mesh context on Auto axes (what a JAX user
    writes). On Explicit axes JAX's own eager transformations need one
    (grad even of jnp.sum, jvp of jax.scipy.linalg.lu_factor: "Please enter
    your jit into a mesh context via jax.set_mesh"), so the suites give it
    there."""
    return jax.set_mesh(mesh_) if is_explicit(mesh_) else contextlib.nullcontext()


# ---- matrices -------------------------------------------------------------------------------


def random(rng, shape, dtype) -> np.ndarray:
    x = rng.standard_normal(shape)
    if is_complex(dtype):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def with_singular_values(rng, m, n, s, dtype) -> np.ndarray:
    """U diag(s) V^H, m x n, with random orthonormal U and V."""
    k = min(m, n)
    u = np.linalg.qr(random(rng, (m, k), wide(dtype)))[0]
    v = np.linalg.qr(random(rng, (n, k), wide(dtype)))[0]
    return ((u * np.asarray(s, np.float64)) @ v.conj().T).astype(dtype)


def general(rng, n, dtype, condition=CONDITION, m=None) -> np.ndarray:
    """Singular values spread geometrically over [1, condition]."""
    m = n if m is None else m
    k = min(m, n)
    return with_singular_values(
        rng, m, n, np.geomspace(1.0, condition, k) if k > 1 else [1.0], dtype
    )


def spd(rng, n, dtype, condition=CONDITION) -> np.ndarray:
    return helpers.spd(rng, n, dtype, condition)


def spaced(rng, n, dtype) -> np.ndarray:
    """Hermitian, eigenvalues evenly spaced over [-2, 3] (both signs, gaps
    wide enough for eigenvector derivatives)."""
    return helpers.with_eigenvalues(rng, np.linspace(-2.0, 3.0, n), dtype)


def not_spd(rng, n, dtype) -> np.ndarray:
    w = np.geomspace(1.0, CONDITION, n)
    w[n // 2] = -1.0
    return helpers.with_eigenvalues(rng, w, dtype)


def cho_solve_ref(a, b, lower=False):
    """The suites' reference for positive-definite solves: JAX's
    cho_solve(cho_factor(a)). jax.scipy.linalg.solve(assume_a="pos") is not
    one: its reverse-mode derivative for complex a is wrong (jax 0.10.2:
    custom_linear_solve(symmetric=True) transposes a Hermitian matrix as if
    it were symmetric; jax.test_util.check_grads fails on it)."""
    return jsl.cho_solve(jsl.cho_factor(a, lower=lower), b)


# ---- comparisons ------------------------------------------------------------------------------


def tol(dtype, n=N, condition=1.0) -> float:
    """A backward-stable result's error bound: 30 eps N condition."""
    return helpers.tolerance(dtype, n, condition)


def promote(tree):
    """NumPy leaves as float64/complex128 JAX arrays on the default device."""

    def up(x):
        x = np.asarray(x)
        return jnp.asarray(x.astype(wide(x.dtype))) if np.issubdtype(x.dtype, np.inexact) else x

    return jax.tree.map(up, tree)


def _expected_dtype(want, dtype):
    """want's kind (real or complex) at the case's precision."""
    single = np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64))
    if np.issubdtype(want, np.complexfloating):
        return np.dtype(np.complex64 if single else np.complex128)
    return np.dtype(np.float32 if single else np.float64)


def assert_close(got, want, dtype, n=N, condition=1.0, what="result", check_dtype=True):
    """Leaf by leaf: the same count, shapes and dtype (inexact leaves at the
    case's precision, unless not check_dtype); integers equal; inexact values within
    tol(dtype, n, condition) of want relative to max(1, max|want|);
    non-finite entries of want (NaN, +-inf) matched exactly."""
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves), (
        f"{what}: {len(got_leaves)} arrays, expected {len(want_leaves)}"
    )
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        label = f"{what}[{i}]"
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{label}: shape {g.shape}, expected {w.shape}"
        if not np.issubdtype(w.dtype, np.inexact):
            np.testing.assert_array_equal(g, w, err_msg=label)
            continue
        if check_dtype:
            assert g.dtype == _expected_dtype(w.dtype, dtype), f"{label}: dtype {g.dtype}"
        finite = np.isfinite(w)
        if not finite.all():
            np.testing.assert_array_equal(g[~finite], w[~finite], err_msg=f"{label}: non-finite")
        if not finite.any():
            continue
        g64, w64 = g[finite].astype(w.dtype), w[finite]
        scale = max(1.0, float(np.abs(w64).max()))
        err = float(np.abs(g64 - w64).max()) if g64.size else 0.0
        bound = tol(dtype, n, condition) * scale
        assert err <= bound, f"{label}: error {err:.3g} > {bound:.3g} (scale {scale:.3g})"


def _assert_alike(got, want, dtype, condition, what):
    """JAX's test helper's comparison (JaxTestCase.assertAllClose): an
    iterable that is no array is a sequence, compared by len() and element
    by element; arrays and scalars by value (assert_close)."""
    if hasattr(want, "__array__") or np.isscalar(want):
        assert hasattr(got, "__array__") or np.isscalar(got), f"{what}: {type(got).__name__}"
        assert_close(got, want, dtype, condition=condition, what=what)
        return
    assert not hasattr(got, "__array__"), f"{what}: an array, expected a sequence"
    assert len(got) == len(want), f"{what}: len {len(got)}, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_alike(g, w, dtype, condition, f"{what}[{i}]")


def assert_sequence_close(got, want, dtype, condition=CONDITION, what="result"):
    """got alike want (a tuple) as JAX's tests compare results, and indexed
    as it: every index (negative too), slices, IndexError past the end."""
    _assert_alike(got, want, dtype, condition, what)
    for i in range(-len(want), len(want)):
        _assert_alike(got[i], want[i], dtype, condition, f"{what}[{i}]")
    for part in (slice(None, 1), slice(None, None, -1)):
        _assert_alike(got[part], want[part], dtype, condition, f"{what}[{part}]")
    with pytest.raises(IndexError):
        got[len(want)]


# ---- one call in one mode ------------------------------------------------------------------


def _random_like(rng, x):
    x = np.asarray(x)
    return random(rng, x.shape, x.dtype)


def _weights(rng, shapes):
    """A fixed random weight per inexact output (shapes: jax.eval_shape's);
    None for integers."""

    def weight(leaf):
        inexact = np.issubdtype(leaf.dtype, np.inexact)
        return random(rng, leaf.shape, leaf.dtype) if inexact else None

    return [weight(leaf) for leaf in jax.tree.leaves(shapes)]


def _loss(f, weights):
    """sum Re(w * f(...)) over the inexact outputs: a real scalar to differentiate."""

    def loss(*args):
        total = 0.0
        for leaf, w in zip(jax.tree.leaves(f(*args)), weights):
            if w is not None:
                total = total + jnp.sum(jnp.real(leaf * w.astype(leaf.dtype)))
        return total

    return loss


def _inexact(tree):
    return [x for x in jax.tree.leaves(tree) if np.issubdtype(np.asarray(x).dtype, np.inexact)]


def check(mode, mesh_, dtype, fn, ref, make, how, rng, *, n=N, condition=CONDITION):
    """fn (the API under test) run in `mode` on the arrays make(rng, dtype)
    returns, placed as `how` (one entry per array, or one for all) says,
    against ref (the
    same computation by JAX on those values in 64 bits, plain arrays,
    compiled: one program instead of many eager ones):

    eager; jit (under jit_context); grad of a weighted sum of the outputs
    with respect to every input and jvp with random tangents placed like
    the primals (both eager, under transform_context); vmap over a batch of
    two.
    Values are compared at `condition`, derivatives at condition**2."""
    args = make(rng, dtype)
    how = (how,) * len(args) if isinstance(how, str) else how
    placed = [place(x, h, mesh_) for x, h in zip(args, how)]
    if mode in ("eager", "jit"):
        if mode == "jit":
            with jit_context(mesh_):
                got = jax.jit(fn)(*placed)
        else:
            got = fn(*placed)
        assert_close(got, jax.jit(ref)(*promote(args)), dtype, n, condition, what=mode)
    elif mode == "grad":
        weights = _weights(rng, jax.eval_shape(ref, *promote(args)))
        argnums = tuple(range(len(args)))
        with transform_context(mesh_):
            got = jax.grad(_loss(fn, weights), argnums)(*placed)
        want = jax.jit(jax.grad(_loss(ref, weights), argnums))(*promote(args))
        assert_close(got, want, dtype, n, condition**2, what="grad")
    elif mode == "jvp":
        tangents = tuple(_random_like(rng, x) for x in args)
        with transform_context(mesh_):
            got = jax.jvp(
                fn, tuple(placed), tuple(place(t, h, mesh_) for t, h in zip(tangents, how))
            )
        want = jax.jit(lambda p, t: jax.jvp(ref, p, t))(promote(tuple(args)), promote(tangents))
        assert_close(_inexact(got[0]), _inexact(want[0]), dtype, n, condition, what="jvp primal")
        assert_close(
            _inexact(got[1]), _inexact(want[1]), dtype, n, condition**2, what="jvp tangent"
        )
    elif mode == "vmap":
        batch = [args, make(rng, dtype)]
        stacked = [np.stack(xs) for xs in zip(*batch)]
        got = jax.vmap(fn)(*[place(x, h, mesh_, batched=1) for x, h in zip(stacked, how)])
        wants = [jax.jit(ref)(*promote(b)) for b in batch]
        want = jax.tree.map(lambda *ys: np.stack([np.asarray(y) for y in ys]), *wants)
        assert_close(got, want, dtype, n, condition, what="vmap")
    else:
        raise ValueError(f"unknown mode {mode!r}")


def check_case(case: Case, fn, ref, make, how, rng, **kw):
    check(case.mode, case.mesh, case.dtype, fn, ref, make, how, rng, **kw)
