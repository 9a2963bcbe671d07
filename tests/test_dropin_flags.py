"""Flags given as JAX takes them: the integers 1 and 0 (Python's or NumPy's)
for lower, unit_diagonal, permute_l, upper, symmetrize_input, and True for
trans=1, give what the matching bool (or int) gives JAX; values that are
neither a flag nor 0/1 (2, 1.5, "yes") are refused with an error naming
the argument."""

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import dropin
from dropin import K, N, REP, ROWS, api

FLAG_VALUES = (1, 0, np.int32(1), np.int64(0))


def spd(rng):
    return dropin.spd(rng, N, np.float64)


def triangular(rng):
    return np.tril(dropin.general(rng, N, np.float64)) + 4 * np.eye(N)


def rhs(rng):
    return dropin.random(rng, (N, K), np.float64)


# name: (make the arrays, jaxmg's call with the flag as given, JAX's call
# with it as a bool)
CALLS = {
    "cholesky-lower": (
        lambda rng: (spd(rng),),
        lambda v, a: api.cholesky(a, lower=v),
        lambda v, a: jsl.cholesky(a, lower=bool(v)),
    ),
    "cho_factor-lower": (
        lambda rng: (spd(rng),),
        lambda v, a: tuple(api.cho_factor(a, lower=v))[0],
        lambda v, a: jsl.cho_factor(a, lower=bool(v))[0],
    ),
    "cho_solve-lower": (
        lambda rng: (spd(rng), rhs(rng)),
        lambda v, a, b: api.cho_solve((jsl.cholesky(dropin.whole(a), lower=bool(v)), v), b),
        lambda v, a, b: jsl.cho_solve(jsl.cho_factor(a, lower=bool(v)), b),
    ),
    "solve-lower": (
        lambda rng: (spd(rng), rhs(rng)),
        lambda v, a, b: api.solve(a, b, lower=v, assume_a="pos"),
        lambda v, a, b: jsl.solve(a, b, lower=bool(v), assume_a="pos"),
    ),
    "solve_triangular-lower-unit_diagonal": (
        lambda rng: (triangular(rng), rhs(rng)),
        lambda v, a, b: api.solve_triangular(a, b, lower=v, unit_diagonal=v),
        lambda v, a, b: jsl.solve_triangular(a, b, lower=bool(v), unit_diagonal=bool(v)),
    ),
    "lu-permute_l": (
        lambda rng: (dropin.general(rng, N, np.float64),),
        lambda v, a: api.lu(a, permute_l=v),
        lambda v, a: jsl.lu(a, permute_l=bool(v)),
    ),
}


@pytest.mark.parametrize("value", FLAG_VALUES, ids=repr)
@pytest.mark.parametrize("devices", [0, 2])
@pytest.mark.parametrize("name", list(CALLS))
def test_integer_flags_as_jax(rng, name, devices, value):
    make, call, ref = CALLS[name]
    args = make(rng)
    mesh = dropin.mesh(devices) if devices else None
    placed = [dropin.place_or_plain(x, how, mesh) for x, how in zip(args, (ROWS, REP))]
    got = call(value, *placed)
    dropin.assert_close(got, ref(value, *dropin.promote(args)), np.float64,
                        condition=dropin.CONDITION)


def test_cho_factor_gives_the_flag(rng):
    c, lower = api.cho_factor(jnp.asarray(spd(rng)), lower=1)
    assert lower == 1 and bool(lower)


@pytest.mark.parametrize("trans", [True, np.True_], ids=repr)
@pytest.mark.parametrize("devices", [0, 2])
def test_trans_as_jax(rng, devices, trans):
    """trans=True is trans=1 to JAX's lu_solve and solve_triangular."""
    a, t, b = dropin.general(rng, N, np.float64), triangular(rng), rhs(rng)
    mesh = dropin.mesh(devices) if devices else None
    how = (dropin.PLAIN, dropin.PLAIN) if mesh is None else (ROWS, REP)
    a_dev, t_dev = (dropin.place(x, how[0], mesh) for x in (a, t))
    b_dev = dropin.place(b, how[1], mesh)
    code = int(trans)
    got = api.lu_solve(api.lu_factor(a_dev), b_dev, trans=trans)
    want = jsl.lu_solve(jsl.lu_factor(jnp.asarray(a)), jnp.asarray(b), trans=code)
    dropin.assert_close(got, want, np.float64, condition=dropin.CONDITION)
    got = api.solve_triangular(t_dev, b_dev, trans=trans, lower=True)
    want = jsl.solve_triangular(jnp.asarray(t), jnp.asarray(b), trans=code, lower=True)
    dropin.assert_close(got, want, np.float64, condition=dropin.CONDITION)


@pytest.mark.parametrize("value", [2, -1, 1.5, "yes"], ids=repr)
def test_other_values_are_refused_naming_the_argument(rng, value):
    a, t, b = jnp.asarray(spd(rng)), jnp.asarray(triangular(rng)), jnp.asarray(rhs(rng))
    refused = (TypeError, ValueError)
    with pytest.raises(refused, match=r"\blower\b"):
        api.cholesky(a, lower=value)
    with pytest.raises(refused, match=r"\blower\b"):
        api.cho_factor(a, lower=value)
    with pytest.raises(refused, match=r"\blower\b"):
        api.cho_solve((a, value), b)
    with pytest.raises(refused, match=r"\blower\b"):
        api.solve(a, b, lower=value, assume_a="pos")
    with pytest.raises(refused, match=r"\bunit_diagonal\b"):
        api.solve_triangular(t, b, unit_diagonal=value)
    with pytest.raises(refused, match=r"\bpermute_l\b"):
        api.lu(a, permute_l=value)
    if value != 2:
        with pytest.raises(ValueError, match=r"\btrans\b"):
            api.lu_solve(api.lu_factor(a), b, trans=value)
        with pytest.raises(ValueError, match=r"\btrans\b"):
            api.solve_triangular(t, b, trans=value)


# ---- jnp.linalg.cholesky's keywords, against JAX directly ----

import jaxmg  # noqa: E402


@pytest.mark.parametrize("value", FLAG_VALUES, ids=repr)
def test_jnp_cholesky_keywords_take_integers(rng, value):
    a = dropin.place(spd(rng), ROWS, dropin.mesh(2))
    got = jaxmg.cholesky(a, upper=value, symmetrize_input=value)
    want = jnp.linalg.cholesky(jnp.asarray(np.asarray(a)), upper=bool(value),
                               symmetrize_input=bool(value))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    with pytest.raises((TypeError, ValueError), match=r"\bupper\b"):
        jaxmg.cholesky(a, upper=2)
