"""Refinement of a low-precision solution to float64 accuracy.

The residual is computed in the matrix's own precision (float64/complex128)
against the original matrix, the correction with the low-precision factor:
classic iterative refinement while it converges fast, then GMRES-IR
(right-preconditioned restarted FGMRES in float64, the low-precision solve
as the preconditioner; the flexible form keeps the preconditioned vectors,
so a preconditioner that rounds does no harm).

Progress, per column of B, is the normwise backward error (Rigal-Gaches)
in the infinity norm, as LAPACK's refinement measures it:
    berr = ||b - A x||_inf / (||A||_inf ||x||_inf + ||b||_inf).
Where to stop is judged row by row: a float64 residual's entry i is
computed no more accurately than its rounding, about
eps (||a_i||_2 ||x||_inf + |b_i|) (a_i: row i of A; `row_floor` below is
eps ||a_i||_2), so the measure is the residual in units of that rounding,
    rounding = max_i |r_i| / (row_floor_i ||x||_inf + eps |b_i|),
1 at the floor. A floor taken over the whole matrix instead (its largest
row's over ||A||_inf) is that of the largest row: where one row dominates
(a penalty entry on the diagonal), it let a column stop with every other
row's residual thousands of times above its rounding, and x thousands of
times less accurate than float64's. A column is refined until berr stops
decreasing (a step that gains less than 10%, or less than half once within
the tolerance), and accepted if it stopped there within a rounding of
sqrt(N), the role sqrt(N) * eps plays in LAPACK's dsposv. (Stopping
earlier, at a few roundings, saves a step on well-scaled matrices but not
safely: where A's columns differ in scale by orders of magnitude, the row
bound overstates the residual's rounding, and such a stop leaves x hundreds
of times less accurate than float64 LU's.) The step
that shows berr has stopped decreasing is saved where x itself shows it:
a column within the tolerance stops when, at the rate of its last two
corrections, the next would change x by less than eps of its norm (on a
well-conditioned SPD matrix, 5 solves instead of 6). A step
that gains less than half above that bound means slow convergence:
classic refinement hands the column to GMRES-IR, as it does a column whose
classic rate would not reach the bound within the budget (GMRES-IR
converges faster). Once every column being refined is within the bound, a
GMRES cycle takes one step: that shows whether berr still falls, where a
whole cycle at the floor would be lost. A column that stops above the
bound, or is still improving when the budget of low-precision solves runs
out (unless already at the floor, a rounding of 1), fails and goes to the
caller's float64 fallback; so does, at once, a column whose last GMRES-IR step
forecasts (at that step's rate) more solves to the bound than the budget has
left, or whose classic step does under method "ir". The
budget, 30 solves: on one H200 the float64 fallback costs about as much as
22 GMRES-IR solves at N=16384 and 41 at N=32768, so solves spent beyond it
on a column that may still fail rarely pay (with 50, the SPD solve at cond
1e6 converged at N=16384 in 121 ms against 141, but fell back at N=32768
after 722 ms against 625).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxmg._src import failures

METHODS = ("ir", "gmres", "auto")
_FLOOR_GAIN = 0.9  # a step keeping berr above 0.9x the last is at the floor
_FAST_GAIN = 0.5  # classic refinement going slower than this hands over to GMRES
# Within the tolerance a GMRES cycle tests whether berr still falls: one step (a
# minimal-residual one) tells it, where a whole cycle at the floor would be lost.
_STEPS_WITHIN_TOLERANCE = 1


@dataclasses.dataclass(frozen=True)
class Options:
    """method: "ir" (classic refinement only), "gmres" (GMRES-IR only) or
    "auto" (classic while it halves berr each step, then GMRES-IR for the
    columns that slow down). max_iterations: the budget of low-precision
    solves per column, the first included (0: straight to the fallback).
    restart: the Krylov dimension of a GMRES cycle. inner_tolerance: a cycle
    stops when it has reduced the correction's residual by this factor."""

    method: str = "auto"
    max_iterations: int = 30
    restart: int = 20
    inner_tolerance: float = 1e-4


def options(method="auto", max_iterations=30, restart=20, inner_tolerance=1e-4) -> Options:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not a refinement method; use one of {METHODS}")
    for name, value, low in (("max_iterations", max_iterations, 0), ("restart", restart, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not 0 < inner_tolerance < 1:
        raise ValueError(f"inner_tolerance must lie in (0, 1), got {inner_tolerance!r}")
    return Options(method, max_iterations, restart, float(inner_tolerance))


def norms(a, *, adjoint: bool = False):
    """(||A||_inf, row_floor: eps ||a_i||_2 per row i, the rows' share of
    the residual's rounding): one pass over A. adjoint: A^H's, from A's
    columns."""
    axis = 0 if adjoint else 1
    row_abs = jnp.sum(jnp.abs(a), axis=axis)
    row_two = jnp.sqrt(jnp.sum(jnp.abs(a) ** 2, axis=axis))
    return norms_of(row_abs, row_two, a.dtype)


def norms_of(row_abs, row_two, dtype):
    """norms from the rows' 1-norms and 2-norms."""
    return jnp.max(row_abs), jnp.finfo(dtype).eps * row_two


def tolerance(n: int):
    """The largest rounding (see above) accepted at order n."""
    return math.sqrt(max(n, 1))


def normwise_floor(anorm, row_floor):
    """The backward error of a residual at its largest row's rounding: a
    bound for solvers that report berr alone (an overestimate where one row
    dominates)."""
    return jnp.max(row_floor) / jnp.where(anorm > 0, anorm, 1)


def rounding(r, x, b, row_floor):
    """Per column: max_i |r_i| / (row_floor_i ||x||_inf + eps |b_i|), the
    residual in units of its float64 rounding; 0 for r = 0, inf where r or
    x is not finite."""
    eps = jnp.finfo(b.dtype).eps
    size = jnp.max(jnp.abs(x), axis=0)
    unit = row_floor[:, None] * size[None, :] + eps * jnp.abs(b)
    num = jnp.abs(r)
    ratio = jnp.where(unit > 0, num / jnp.where(unit > 0, unit, 1), jnp.where(num > 0, jnp.inf, 0))
    worst = jnp.max(ratio, axis=0)
    finite = jnp.all(jnp.isfinite(r), axis=0) & jnp.isfinite(size)
    return jnp.where(finite, worst, jnp.inf)


def backward_error(r, x, b, anorm):
    """Per column: ||r||_inf / (||A||_inf ||x||_inf + ||b||_inf), 0 for b = 0,
    inf where x or r is not finite (a NaN must never pass for converged)."""
    num = jnp.max(jnp.abs(r), axis=0)
    den = anorm * jnp.max(jnp.abs(x), axis=0) + jnp.max(jnp.abs(b), axis=0)
    berr = jnp.where(den > 0, num / jnp.where(den > 0, den, 1), jnp.where(num > 0, jnp.inf, 0))
    return jnp.where(jnp.isfinite(num) & jnp.isfinite(den), berr, jnp.inf)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _State:
    x: jax.Array  # (N, K) the best x so far
    r: jax.Array  # its residual
    berr: jax.Array  # (K,) its backward error
    rounding: jax.Array  # (K,) its residual in units of the residual's rounding
    change: jax.Array  # (K,) its last correction's norm relative to its own
    active: jax.Array  # (K,) still being refined in this phase
    handover: jax.Array  # (K,) left classic refinement for GMRES-IR
    settled: jax.Array  # (K,) stopped at the floor, within the tolerance
    iterations: jax.Array  # (K,) low-precision solves spent on the column
    spent: jax.Array  # () the most any column spent


def refine(matvec, precondition, b, anorm, row_floor, opts: Options, *, start_ok):
    """Solves A x = b (b: (N, K)) to the float64 floor. matvec(X) = A X and
    precondition(R) ~ A^{-1} R, both at b's precision. start_ok: False skips
    everything (a failed factorisation): every column then fails. A column
    of b that is not finite fails too, and its x is NaN.

    Returns (x, iterations, gmres, converged, berr) per column: the
    low-precision solves spent, whether GMRES-IR ran, whether it converged,
    and the backward error of x.

    Each column is refined scaled by the power of two (exact) that brings
    its largest entry into [1, 2), and x scaled back: for b of entries near
    1e-300 the residuals would be subnormal, which XLA's CPU code flushes to
    zero, and refinement would stop at once at a backward error of 0 with x
    at the low precision's accuracy. The backward error is unchanged by it.
    """
    scale = column_scale(b)
    x, *rest = _refine(matvec, precondition, b * scale.astype(b.dtype), anorm, row_floor, opts,
                       start_ok=start_ok)
    return (x / scale.astype(x.dtype), *rest)


def column_scale(b):
    """Per column, 2^(1 - e) for max_i |b_ij| = m 2^e, 1/2 <= m < 1; 1 where
    the column is 0 or not finite. A row (1, K), as b's columns broadcast."""
    big = jnp.max(jnp.abs(b), axis=0, keepdims=True)
    ok = jnp.isfinite(big) & (big > 0)
    _, e = jnp.frexp(jnp.where(ok, big, 1))
    return jnp.where(ok, jnp.ldexp(jnp.ones_like(big), 1 - e), 1)


def _refine(matvec, precondition, b, anorm, row_floor, opts: Options, *, start_ok):
    n, k = b.shape
    tol = tolerance(n)
    eps = jnp.finfo(b.dtype).eps
    budget = opts.max_iterations
    zero = jnp.zeros((k,), bool)
    # A column of b holding a NaN or inf has no finite solution: it is not
    # refined (no step could be judged better than x = 0) and comes back NaN,
    # not as the x = 0 it starts from, as a float64 solve propagates it.
    finite = jnp.all(jnp.isfinite(b), axis=0)
    s = _State(
        x=jnp.zeros_like(b),
        r=b,
        berr=jnp.where(finite, jnp.where(jnp.any(b != 0, axis=0), 1.0, 0.0), jnp.inf
                       ).astype(anorm.dtype),
        rounding=jnp.where(finite, jnp.where(jnp.any(b != 0, axis=0), jnp.inf, 0.0), jnp.inf
                           ).astype(anorm.dtype),
        change=jnp.full((k,), jnp.inf, anorm.dtype),
        active=start_ok & finite & jnp.any(b != 0, axis=0),
        handover=zero,
        settled=zero,
        iterations=jnp.zeros((k,), jnp.int32),
        spent=jnp.zeros((), jnp.int32),
    )
    gmres = opts.method == "gmres"

    def judge(s: _State, x_try, used, phase: str) -> _State:
        r_try = b - matvec(x_try)
        berr_try = backward_error(r_try, x_try, b, anorm)
        take = s.active & (berr_try < s.berr)
        gain = berr_try / jnp.where(s.berr > 0, s.berr, 1)
        berr = jnp.where(take, berr_try, s.berr)
        within = jnp.where(take, rounding(r_try, x_try, b, row_floor), s.rounding)
        reached = within <= tol
        change_try = relative_change(x_try, s.x)
        change = jnp.where(take, change_try, s.change)
        # Within the tolerance only a step that halves berr is worth another:
        # the rest is the floor's noise (LAPACK's xGERFS stops the same way).
        at_floor = ~(gain < _FLOOR_GAIN) | (berr == 0) | (reached & ~(gain <= _FAST_GAIN))
        at_floor = at_floor | (take & reached & (gain <= _FAST_GAIN)
                               & last_step_left_x_exact(change_try, s.change, eps))
        go_on = ~at_floor
        iterations = s.iterations + jnp.where(s.active, used, 0).astype(jnp.int32)
        # At the last step's rate the column would not reach the tolerance within the budget.
        short = _out_of_reach(within, gain, used, tol, budget - iterations)
        handover = s.handover
        if phase == "ir" and opts.method == "auto":
            # A classic rate that falls short is no forecast for GMRES-IR, which converges faster.
            slow = (~(gain <= _FAST_GAIN) | short) & ~reached
            handover = handover | (s.active & (slow | (at_floor & ~reached)))
            go_on = go_on & ~slow
        go_on = go_on & ~short
        return _State(
            x=jnp.where(take, x_try, s.x),
            r=jnp.where(take, r_try, s.r),
            berr=berr,
            rounding=within,
            change=change,
            active=s.active & go_on,
            handover=handover,
            settled=s.settled | (s.active & at_floor & reached),
            iterations=iterations,
            spent=s.spent + used,
        )

    def running(s: _State):
        return jnp.any(s.active) & (s.spent < budget)

    if not gmres:
        one = jnp.ones((), jnp.int32)
        s = lax.while_loop(running, lambda s: judge(s, s.x + precondition(s.r), one, "ir"), s)
    if opts.method != "ir":
        if opts.method == "auto":
            s = dataclasses.replace(s, active=s.handover | (s.active & ~(s.rounding <= tol)))
        ran = s.active & (s.spent < budget)

        def cycle(s: _State):
            near = jnp.all(~s.active | (s.rounding <= tol))
            limit = jnp.minimum(jnp.where(near, _STEPS_WITHIN_TOLERANCE, opts.restart),
                                budget - s.spent)
            d, used = _fgmres(matvec, precondition, s.r, s.active, limit, opts)
            return judge(s, s.x + d, used, "gmres")

        s = lax.while_loop(running, cycle, s)
    else:
        ran = zero
    converged = start_ok & (s.settled | (s.rounding <= 1))
    return failures.nan_where(~finite, s.x), s.iterations, ran, converged, s.berr


def relative_change(x_new, x_old):
    """Per column: ||x_new - x_old||_inf / ||x_new||_inf (inf where x_new is
    0 and x_old is not)."""
    step = jnp.max(jnp.abs(x_new - x_old), axis=0)
    size = jnp.max(jnp.abs(x_new), axis=0)
    return jnp.where(size > 0, step / jnp.where(size > 0, size, 1), jnp.where(step > 0, jnp.inf, 0))


def last_step_left_x_exact(change, previous, eps):
    """Per column: at the rate of the last two corrections, the next would
    change x by at most eps relative to its norm, x's own rounding: another
    step could not make x more accurate. (This judges x itself, not the
    backward error against an estimate of its floor, so it holds where A's
    columns differ in scale and that estimate is too high.)"""
    rate = change / jnp.where(previous > 0, previous, 1)
    return (previous > 0) & jnp.isfinite(previous) & (rate < 1) & (rate * change <= eps)


def _out_of_reach(within, gain, used, tol, left):
    """Per column: at the rate of the last step (berr fell by `gain` in
    `used` solves), bringing the rounding `within` to the tolerance takes
    more solves than the `left` in the budget. Such a column would fail at
    the budget's end; stopping it now brings its float64 fallback sooner. A wrong forecast costs time, not
    accuracy: the column is then solved in float64."""
    improving = (gain > 0) & (gain < 1) & (within > tol) & jnp.isfinite(within)
    safe_gain = jnp.where(improving, gain, 0.5)
    safe_ratio = jnp.where(improving, tol / within, 0.5)  # improving: within > tol > 0
    needed = used * jnp.log(safe_ratio) / jnp.log(safe_gain)
    return improving & (needed > left)


def _fgmres(matvec, precondition, r, active, limit, opts: Options):
    """One cycle of right-preconditioned flexible GMRES on A d = r for every
    column at once (at most `limit` <= restart steps). Returns d and the
    steps taken."""
    n, k = r.shape
    m = opts.restart
    dtype = r.dtype
    real = jnp.finfo(dtype).dtype
    hi = lax.Precision.HIGHEST
    beta = jnp.sqrt(jnp.sum(jnp.abs(r) ** 2, axis=0))
    basis = jnp.zeros((m + 1, n, k), dtype).at[0].set(r / jnp.where(beta > 0, beta, 1).astype(dtype))
    state = dict(
        j=jnp.zeros((), jnp.int32),
        basis=basis,
        z=jnp.zeros((m, n, k), dtype),  # the preconditioned basis
        h=jnp.zeros((k, m, m), dtype),  # R of the rotated Hessenberg matrix, by columns
        g=jnp.zeros((k, m + 1), dtype).at[:, 0].set(beta.astype(dtype)),
        cos=jnp.zeros((k, m), real),
        sin=jnp.zeros((k, m), dtype),
        running=active & (beta > 0),
        steps=jnp.zeros((k,), jnp.int32),
    )

    def keep_going(st):
        return (st["j"] < limit) & jnp.any(st["running"])

    def step(st):
        j = st["j"]
        z = precondition(st["basis"][j])
        w = matvec(z)
        col = jnp.zeros((m + 1, k), dtype)
        for _ in range(2):  # classical Gram-Schmidt, twice
            c = jnp.einsum("ink,nk->ik", jnp.conj(st["basis"]), w, precision=hi)
            w = w - jnp.einsum("ink,ik->nk", st["basis"], c, precision=hi)
            col = col + c
        h_next = jnp.sqrt(jnp.sum(jnp.abs(w) ** 2, axis=0))
        basis = st["basis"].at[j + 1].set(w / jnp.where(h_next > 0, h_next, 1).astype(dtype))
        col = col[:m].T  # (k, m), entries 0..j

        def rotate(i, col):  # the earlier rotations, in order
            c_, s_ = st["cos"][:, i], st["sin"][:, i]
            a_, b_ = col[:, i], col[:, i + 1]
            col = col.at[:, i].set(c_ * a_ + s_ * b_)
            return col.at[:, i + 1].set(-jnp.conj(s_) * a_ + c_ * b_)

        col = lax.fori_loop(0, j, rotate, col)
        c_, s_, rho = _givens(col[:, j], h_next)
        gj = st["g"][:, j]
        g = st["g"].at[:, j].set(c_ * gj).at[:, j + 1].set(-jnp.conj(s_) * gj)
        running = st["running"]
        return dict(
            j=j + 1,
            basis=basis,
            z=st["z"].at[j].set(z),
            h=st["h"].at[:, :, j].set(col.at[:, j].set(rho)),
            g=g,
            cos=st["cos"].at[:, j].set(c_),
            sin=st["sin"].at[:, j].set(s_),
            running=running & (jnp.abs(g[:, j + 1]) > opts.inner_tolerance * beta),
            steps=jnp.where(running, j + 1, st["steps"]),
        )

    st = lax.while_loop(keep_going, step, state)
    y = _back_substitution(st["h"], st["g"][:, :m], st["steps"])
    return jnp.einsum("jnk,kj->nk", st["z"], y, precision=hi), st["j"]


def _back_substitution(h, g, steps):
    """y with h[:s, :s] y[:s] = g[:s] per column (s = its steps), 0 beyond."""
    m = h.shape[-1]

    def row(t, y):
        i = m - 1 - t
        value = (g[:, i] - jnp.sum(h[:, i, :] * y, axis=1)) / jnp.where(h[:, i, i] != 0, h[:, i, i], 1)
        return y.at[:, i].set(jnp.where((i < steps) & jnp.isfinite(value), value, 0))

    return lax.fori_loop(0, m, row, jnp.zeros_like(g))


def _givens(a, b):
    """c (real), s, rho with [c s; -conj(s) c] [a; b] = [rho; 0], b >= 0 real."""
    absa = jnp.abs(a)
    rho_abs = jnp.hypot(absa, b)
    safe = jnp.where(rho_abs > 0, rho_abs, 1)
    phase = jnp.where(absa > 0, a / jnp.where(absa > 0, absa, 1).astype(a.dtype), 1)
    c = jnp.where(rho_abs > 0, absa / safe, 1)
    s = jnp.where(rho_abs > 0, phase * (b / safe).astype(a.dtype), 0)
    return c, s, phase * rho_abs.astype(a.dtype)
