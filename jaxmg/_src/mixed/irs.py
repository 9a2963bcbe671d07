"""cuSOLVER's iterative-refinement solver (cusolverDnIRSXgesv, the "dn"
engine of xla_ext/engines/dn) as a route for general mixed solves on one
GPU: an LU at a lower precision on tensor cores, refined against A in
float64 (classic refinement or GMRES), and a float64 LU where refinement
does not converge. Where the program runs elsewhere (CPU devices), the
caller's own route runs.

No public solve takes this route: the one through A^H A (normal.py) took
0.29x of JAX's float64 solve at N=32768 where this one took 0.57x, and both
fall back from about cond 1e3. It is the vendor's answer that the probes
measure jaxmg's against (tools/irs_probe.py, tools/normal_probe.py).

cuSOLVER reads column-major arrays: a row-major M^T is M column-major, so
A x = b passes A^T (a copy, which cuSOLVER may overwrite when it falls back)
and A^T x = b passes a copy of A itself. The copy is scaled by a power of
two that brings A's largest entry near 1 (exact in float64), so that FP16's
range (6e-8 to 65504) holds the factorisation of any float64 matrix whose
entries span less than it.

Measured on one H200 (tools/irs_probe.py, docs/benchmarks.md): on U S V^T
matrices of condition 10, FP16 and TF32 converge in 11 to 18 iterations and
BF16 not at all (pivot growth), so FP16 is the default. Classic refinement
stops at cuSOLVER's sqrt(N) eps, about float64 LU's backward error there;
"classical_gmres" (classic refinement whose corrections GMRES solves,
preconditioned by the FP16 LU) ended at 3e-17, 500x below it, for 8% more
time. From condition 1e3 none converges in 30 iterations and cuSOLVER
solves in float64 (no refinement after: 1.0 to 1.2x JAX's backward error).
Several right-hand sides refine classically (its GMRES takes one) and took
longer than JAX's float64 solve. cuSOLVER's iteration counts, and
max_iterations, include GMRES's inner iterations.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching, lax

from jaxmg._src import failures, library
from jaxmg._src.mixed import blocks as blk, placement, refine as rf
from jaxmg._src.mixed.solvers import Refinement

LOWEST = ("fp16", "bf16", "tf32", "fp32")  # the order of engines::LowPrecision
REFINERS = ("classical", "gmres", "classical_gmres")  # engines::Refiner
_FACTOR_FAILED = -3  # cuSOLVER's iteration count when the low-precision LU failed


@dataclasses.dataclass(frozen=True)
class Settings:
    """lowest: the precision cuSOLVER factors in. refiner: its refinement
    ("classical", "gmres", "classical_gmres"; GMRES takes one right-hand
    side, so several refine classically). max_iterations: before it solves
    in float64."""

    lowest: str = "fp16"
    refiner: str = "classical_gmres"
    max_iterations: int = 30

    def __post_init__(self):
        if self.lowest not in LOWEST:
            raise ValueError(f"lowest={self.lowest!r}: use one of {LOWEST}")
        if self.refiner not in REFINERS:
            raise ValueError(f"refiner={self.refiner!r}: use one of {REFINERS}")
        if isinstance(self.max_iterations, bool) or not isinstance(self.max_iterations, int) \
                or not 6 <= self.max_iterations < 2**31:
            raise ValueError(
                f"max_iterations must be an int from 6 (cuSOLVER's counts -1 to -5 are its own "
                f"codes) to 2**31 - 1, got {self.max_iterations!r}")


@functools.cache
def available() -> bool:
    """Whether this process has a CUDA GPU and jaxmg's library with the CUDA
    libraries loaded (which registers the target)."""
    try:
        if not jax.devices("gpu"):
            return False
        library.cuda_library()
    except (RuntimeError, OSError):
        return False
    return True


def solve(a, b, settings: Settings, otherwise):
    """(x, Refinement) for a x = b (b: (N, K)): by cuSOLVER's IRS where the
    program runs on a CUDA GPU, else otherwise(a, b, False). Differentiable
    in a and b (the tangents and cotangents are solves with the same matrix).

    otherwise(a, b, transpose) -> (x, Refinement) solves a x = b (a^T x = b
    with transpose) by the caller's own route; it also takes over where
    cuSOLVER stopped above that route's accuracy (checked)."""
    return lax.platform_dependent(
        a, b, cuda=functools.partial(_differentiable, settings=settings, otherwise=otherwise),
        default=lambda a, b: otherwise(a, b, False),
    )


def _differentiable(a, b, *, settings: Settings, otherwise):
    fixed = lax.stop_gradient(a)

    def matvec(x):
        return placement.dot(a, x)

    # Under vmap, one system at a time: the guard's lax.cond would otherwise
    # become a select that runs the blocked LU for every system too.
    direct = custom_batching.sequential_vmap(
        lambda a, rhs: checked(a, rhs, settings, otherwise))
    transposed = custom_batching.sequential_vmap(
        lambda a, rhs: checked(a, rhs, settings, otherwise, transpose=True))
    return lax.custom_linear_solve(matvec, b, lambda _, rhs: direct(fixed, rhs),
                                   lambda _, rhs: transposed(fixed, rhs), has_aux=True)


def checked(a, b, settings: Settings, otherwise, transpose: bool = False):
    """refined, and otherwise(a, b, transpose) where cuSOLVER converged to a
    backward error above refine.tolerance (the bound the blocked route's
    refinement meets). cuSOLVER stops at sqrt(N) eps, which on a
    well-conditioned, diagonally dominant matrix can be tens of times above
    float64 LU's backward error (N=4096, complex: 3.0e-15 against LAPACK's
    8.0e-17, bound 5.6e-16); on the benchmark's U S V^T matrices it went on
    below the bound (2.8e-17 at N=32768). Where cuSOLVER fell back, its
    float64 LU's answer stands: JAX's float64 solver's accuracy, without the
    blocked route's cost again. Where cuSOLVER gave no finite answer (a
    singular matrix: on the H200 it reported info 0 with a non-finite x), the
    caller's route reports LAPACK's pivot."""
    n = b.shape[0]
    norms = rf.norms(a, adjoint=transpose)
    x, record, count = _refined(a, b, settings, transpose, norms)
    # cuSOLVER's own float64 solve (count < 0) stands; any other answer must meet the bound.
    above = (count >= 0) & (record.info == 0) & (record.backward_error
                                                    > rf.tolerance(n) * rf.normwise_floor(*norms))
    short = above | (record.info != 0)

    def again(_):
        x2, r2 = otherwise(a, b, transpose)
        return x2, r2._replace(iterations=r2.iterations + record.iterations)

    return lax.cond(jnp.any(short), again, lambda _: (x, record), None)


def refined(a, b, settings: Settings, transpose: bool = False, norms=None):
    """M x = b with M = a (or a^T with transpose) by cuSOLVER's IRS on the
    GPU the program runs on: (x, Refinement), x NaN where info > 0 (U had
    an exact zero pivot, or x came out not finite: N + 1). norms: M's
    refine.norms, where the caller has them."""
    x, record, _ = _refined(a, b, settings, transpose, norms)
    return x, record


def _refined(a, b, settings: Settings, transpose: bool, norms):
    """refined, and cuSOLVER's iteration count."""
    n, k = b.shape
    refiner = settings.refiner if k == 1 else "classical"
    anorm, _ = rf.norms(a, adjoint=transpose) if norms is None else norms
    scale = blk.power_of_two_near_inverse(jnp.max(jnp.abs(a)))
    x_t, info, count = _gesv((a if transpose else a.T) * scale, b.T, settings, refiner)
    x = x_t.T * scale  # (s M) y = b: x = s y
    info = jnp.where((info == 0) & ~jnp.all(jnp.isfinite(x)), n + 1, info).astype(jnp.int32)
    x = failures.nan_where_failed(x, info)
    one = placement.Rows()
    product = one.transposed_product(a, x) if transpose else one.row_product(a, x)
    berr = rf.backward_error(b - product, x, b, anorm)
    capped = count == -settings.max_iterations
    iterations = jnp.where(count > 0, count, jnp.where(capped, settings.max_iterations, 0))
    columns = lambda v: jnp.broadcast_to(v, (k,))  # noqa: E731  (one count for all columns)
    record = Refinement(
        iterations=columns(iterations).astype(jnp.int32),
        gmres=columns((refiner != "classical") & (iterations > 0)),
        fallback=columns(count < 0),
        backward_error=berr,
        factor_info=jnp.where(count == _FACTOR_FAILED, 1, 0).astype(jnp.int32),
        info=info,
    )
    return x, record, count


def _gesv(m_t, b_t, settings: Settings, refiner: str):
    """cuSOLVER's IRS on the column-major M (row-major m_t) and B (b_t):
    (X^T, info, cuSOLVER's iteration count)."""
    dtype = m_t.dtype
    out = (
        jax.ShapeDtypeStruct(m_t.shape, dtype),
        jax.ShapeDtypeStruct(b_t.shape, dtype),
        jax.ShapeDtypeStruct((), jnp.int32),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    call = jax.ffi.ffi_call(library.target_name("dn", "irsgesv", dtype), out,
                            input_output_aliases={0: 0}, vmap_method="sequential")
    _, x_t, info, count = call(
        m_t, b_t,
        lowest=np.int64(LOWEST.index(settings.lowest)),
        refiner=np.int64(REFINERS.index(refiner)),
        max_iterations=np.int64(settings.max_iterations),
    )
    return x_t, info, count
