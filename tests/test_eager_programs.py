"""Routines made of several programs (jaxmg's solvers and the steps around
them: pinv, matrix_rank, cond, the spectral and nuclear norms, matrix_power,
expm, expm_frechet, inv, slogdet, lstsq, eigh with b) compile one program
when called eagerly on a new shape, as JAX's own functions do, and none when
called again on new values; their answers are JAX's (SciPy's for eigh with
b), on one device and with rows sharded over Auto or Explicit mesh axes.
Each compiled program costs compile time and keeps memory mappings of its
own, of which a process has a limited number."""

import itertools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
import scipy.linalg
from jax.sharding import NamedSharding, PartitionSpec as P

import dropin
import helpers
import jaxmg
import jaxmg.numpy.linalg as mnp
import jaxmg.scipy.linalg as msl

DEVICES = 4
_orders = itertools.count(28, DEVICES)  # a shape no other case compiled


def _general(rng, n):
    return rng.standard_normal((n, n)) / np.sqrt(n) + 2 * np.eye(n)


def _spd(rng, n):
    g = rng.standard_normal((n, n)) / np.sqrt(n)
    return g @ g.T + np.eye(n)


def _rhs(rng, n):
    return rng.standard_normal((n, 2))


# name: (jaxmg's call, JAX's, the makers of its arguments)
CALLS = {
    "pinv": (mnp.pinv, jnp.linalg.pinv, (_general,)),
    "matrix_rank": (mnp.matrix_rank, jnp.linalg.matrix_rank, (_general,)),
    "cond": (mnp.cond, jnp.linalg.cond, (_general,)),
    "cond_1": (lambda a: mnp.cond(a, 1), lambda a: jnp.linalg.cond(a, 1), (_general,)),
    "norm_2": (lambda a: mnp.norm(a, 2), lambda a: jnp.linalg.norm(a, 2), (_general,)),
    "matrix_norm_nuc": (lambda a: mnp.matrix_norm(a, ord="nuc"),
                        lambda a: jnp.linalg.matrix_norm(a, ord="nuc"), (_general,)),
    "matrix_power_-2": (lambda a: mnp.matrix_power(a, -2),
                        lambda a: jnp.linalg.matrix_power(a, -2), (_general,)),
    "expm": (msl.expm, jsl.expm, (_general,)),
    "expm_frechet": (lambda a, e: msl.expm_frechet(a, e), lambda a, e: jsl.expm_frechet(a, e),
                     (_general, _general)),
    "inv": (mnp.inv, jnp.linalg.inv, (_general,)),
    "inv_pos": (lambda a: jaxmg.inv(a, assume_a="pos"), jnp.linalg.inv, (_spd,)),
    "slogdet": (mnp.slogdet, jnp.linalg.slogdet, (_general,)),
    "slogdet_pos": (lambda a: jaxmg.slogdet(a, assume_a="pos"), jnp.linalg.slogdet, (_spd,)),
    "lstsq": (mnp.lstsq, jnp.linalg.lstsq, (_general, _rhs)),
    "eigh_b": (lambda a, b: msl.eigh(a, b), lambda a, b: scipy.linalg.eigh(a, b),
               (lambda rng, n: _spd(rng, n) - 2 * np.eye(n), _spd)),
}


def _place(x, kind):
    if kind == "one device" or x.ndim < 2:
        return jnp.asarray(x)
    mesh = dropin.mesh(DEVICES, kind)
    return jax.device_put(x, NamedSharding(mesh, P("x", None)))


def _compiles(call, *args):
    with helpers.compiled_programs() as compiled:
        out = jax.block_until_ready(call(*args))
    return out, len(compiled)


def _assert_matches(name, got, want):
    if name == "eigh_b":  # eigenvectors up to sign: compare the values, then b-orthonormality
        got, want = got[0], want[0]
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(w).max()))


@pytest.mark.parametrize("kind", ["one device", "auto", "explicit"])
@pytest.mark.parametrize("name", list(CALLS))
def test_an_eager_call_compiles_one_program(rng, name, kind):
    ours, theirs, makers = CALLS[name]
    n = next(_orders)
    values = [make(rng, n) for make in makers]
    placed = [_place(v, kind) for v in values]
    got, compiled = _compiles(ours, *placed)
    assert compiled == 1, f"{name}: {compiled} programs compiled"
    _assert_matches(name, got, theirs(*values))
    again = [_place(make(rng, n), kind) for make in makers]
    _, compiled = _compiles(ours, *again)
    assert compiled == 0, f"{name}: a call on new values compiled {compiled} programs"


def test_eigh_b_vectors_and_sharding(rng):
    """The one program keeps eigh's layout: eigenvectors by columns over the
    mesh axis; and they are b-orthonormal eigenvectors."""
    n = 24
    mesh = dropin.mesh(DEVICES, "explicit")
    a, b = _spd(rng, n) - 2 * np.eye(n), _spd(rng, n)
    w, v = msl.eigh(*(_place(x, "explicit") for x in (a, b)))
    assert v.sharding.spec[1] == "x" and v.sharding.mesh == mesh, v.sharding
    v = np.asarray(v)
    np.testing.assert_allclose(v.T @ b @ v, np.eye(n), atol=1e-10)
    np.testing.assert_allclose(a @ v, b @ v * np.asarray(w), atol=1e-10)


def test_step_by_step_where_a_program_cannot_serve(rng):
    """on_failure="raise" reads the info eagerly, and NumPy's residuals need
    the rank: those calls keep their eager steps and still do what they say."""
    singular = _place(np.ones((8, 8)), "auto")
    with pytest.raises(jaxmg.LinAlgError):
        jaxmg.inv(singular, on_failure="raise")
    a, b = _general(rng, 12), _rhs(rng, 12)
    x, resid, rank, s = jaxmg.lstsq(_place(a, "auto"), b, numpy_resid=True)
    assert int(rank) == 12 and resid.shape == (0,)  # square, full rank: NumPy gives none
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), atol=1e-10)


def test_a_deleted_operand_is_named(rng):
    """An operand an earlier donate=True call took is refused by its own
    name, whichever argument it is."""
    a, b = _general(rng, 8), _spd(rng, 8)
    spent = jnp.asarray(b)
    spent.delete()
    with pytest.raises(ValueError, match="jaxmg: b was deleted"):
        msl.eigh(jnp.asarray(a + a.T), spent)
    spent = jnp.asarray(b[:, :2])
    spent.delete()
    with pytest.raises(ValueError, match="jaxmg: b was deleted"):
        mnp.lstsq(jnp.asarray(a), spent)
