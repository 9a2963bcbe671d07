"""solve_triangular(a, b, trans=, lower=, unit_diagonal=) as
jax.scipy.linalg's, on row-sharded a: every trans spelling (0/1/2 and
"N"/"T"/"C"), both triangles, a unit diagonal; only the selected triangle
(and, with unit_diagonal, not the diagonal) is read, in values and in
derivatives (JAX's derivative with respect to a lives on that triangle);
against JAX in every mode on every mesh; errors naming the argument."""

import jax.scipy.linalg as jsl
import numpy as np
import pytest

import dropin
from dropin import K, N, REP, ROWS, api


def triangular(rng, n, dtype, lower, unit_diagonal):
    """A well-conditioned triangular factor (a Cholesky factor of an SPD
    matrix of condition 100, columns scaled to a unit diagonal if asked),
    junk in the triangle that must not be read (and on the diagonal if unit)."""
    t = np.linalg.cholesky(dropin.spd(rng, n, dropin.wide(dtype), 100.0))
    if unit_diagonal:
        t = t / np.diagonal(t)[None, :]
    t = t if lower else t.conj().T
    junk = dropin.random(rng, (n, n), dtype) * 10
    read = (
        np.tril(np.ones((n, n), bool), -int(unit_diagonal))
        if lower
        else np.triu(np.ones((n, n), bool), int(unit_diagonal))
    )
    return np.where(read, t, junk).astype(dtype)


# (trans, lower, unit_diagonal, b's shape, b's placement), turned over with the cases.
FORMS = (
    (0, True, False, (N, K), REP),
    ("T", False, False, (N,), ROWS),
    (2, True, True, (N, K), ROWS),
    ("N", False, True, (N,), REP),
    (1, True, False, (N,), REP),
    ("C", False, False, (N, K), REP),
)


def form_id(form):
    trans, lower, unit, shape, how = form
    return (
        f"trans{trans}-{'lower' if lower else 'upper'}{'-unit' if unit else ''}-b{len(shape)}d{how}"
    )


@pytest.mark.parametrize("case, form", dropin.sweep(also=("form", FORMS, form_id)))
def test_solve_triangular(rng, case, form):
    trans, lower, unit, shape, b_how = form
    kw = dict(trans=trans, lower=lower, unit_diagonal=unit)

    def make(rng, dtype):
        return triangular(rng, N, dtype, lower, unit), dropin.random(rng, shape, dtype)

    dropin.check_case(
        case,
        lambda a, b: api.solve_triangular(a, b, **kw),
        lambda a, b: jsl.solve_triangular(a, b, **kw),
        make,
        (ROWS, b_how),
        rng,
    )


@pytest.mark.parametrize("devices, kind", [(3, "auto"), (8, "explicit"), (0, "plain")])
def test_defaults_are_jax_defaults(rng, devices, kind):
    """solve_triangular(a, b): trans=0, upper triangle, diagonal read."""
    dtype = np.complex128
    a, b = triangular(rng, N, dtype, False, False), dropin.random(rng, (N, K), dtype)
    if kind == "plain":
        a_dev, b_dev = dropin.place(a, dropin.PLAIN), dropin.place(b, dropin.PLAIN)
    else:
        mesh = dropin.mesh(devices, kind)
        a_dev, b_dev = dropin.place(a, ROWS, mesh), dropin.place(b, REP, mesh)
    x = api.solve_triangular(a_dev, b_dev)
    dropin.assert_close(x, np.linalg.solve(np.triu(a), b), dtype, condition=10.0)


def test_errors_name_the_argument(rng):
    mesh, dtype = dropin.mesh(2), np.float64
    a = dropin.place(triangular(rng, N, dtype, True, False), ROWS, mesh)
    b = dropin.place(np.ones((N, 1), dtype), REP, mesh)
    with pytest.raises(ValueError, match=r"\btrans\b"):
        api.solve_triangular(a, b, trans="X", lower=True)
    with pytest.raises(ValueError, match=r"\ba\b"):
        api.solve_triangular(dropin.place(np.ones((N, N // 2), dtype), ROWS, mesh), b)
    with pytest.raises(ValueError, match=r"\bb\b"):
        api.solve_triangular(a, dropin.place(np.ones((N + 1, 1), dtype), REP, mesh), lower=True)
