"""Pieces shared by the blocked factorisations: the block partition, the
working precision of the panels, option checks and the reporting of the
first failing block."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from jaxmg._src.mixed import precision

PANELS = ("float32", "float64")


@dataclasses.dataclass(frozen=True)
class Config:
    """How a matrix is factored (static: part of the jit key).

    block_size: the panel width nb. update: the precision of the trailing
    GEMMs (a key of precision.UPDATES). panel: the precision the panels are
    factored and the factor stored in. variant: the order of the updates
    (the routine's docstring lists its own). panel_solve: "trsm" computes the
    off-diagonal block by a triangular solve at the panel's precision,
    "inverse" as a GEMM at the update precision with the inverse of the
    diagonal block. span: the most terms one update GEMM sums on the tensor
    cores (precision.matmul; None: all of them).
    """

    block_size: int
    update: str
    panel: str
    variant: str
    panel_solve: str
    span: int | None = None


def config(dtype, *, block_size, update, panel, variant, panel_solve, variants,
           bounded: bool = True, span: int | None = None) -> Config:
    """bounded: the factor's entries stay near 1 once A is scaled (Cholesky:
    |L_ij| <= sqrt(max_i A_ii)); LU's U grows with its pivots, so it takes no
    narrow-range update (float16)."""
    _check_positive_int("block_size", block_size)
    if panel not in PANELS:
        raise ValueError(f"panel={panel!r} is not a panel precision; use one of {PANELS}")
    if variant not in variants:
        raise ValueError(f"variant={variant!r} is not known here; use one of {variants}")
    if span is not None:
        _check_positive_int("span", span, " or None")
    if panel_solve not in ("trsm", "inverse"):
        raise ValueError(f'panel_solve={panel_solve!r}: use "trsm" or "inverse"')
    precision.check_update(update, work_dtype(dtype, panel))
    if not bounded and precision.UPDATES[update].exponent_bits < 8:
        raise ValueError(
            f"update={update!r} has float16's range, which the LU's U (growing with its pivots) "
            "can exceed; use bf16, bf16x3 or tf32 for LU"
        )
    return Config(block_size, update, panel, variant, panel_solve, span)


def _check_positive_int(name: str, value, alternatives: str = ""):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int{alternatives}, got {value!r}")


def update_product(x, y, cfg: Config, *, adjoint_y: bool):
    """x @ y^H (adjoint_y) or x @ y at cfg's update precision and span."""
    return precision.matmul(x, y, cfg.update, adjoint_y=adjoint_y, span=cfg.span)


def check_matrix(a, name: str = "a"):
    shape = getattr(a, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{name} must be a square (N, N) matrix, got shape {shape}")
    dtype = jnp.dtype(a.dtype)
    if dtype not in (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128):
        raise TypeError(
            f"{name} has dtype {dtype.name}; the mixed-precision solvers take float64 or "
            "complex128 (float32/complex64 also factor): cast it first"
        )


def check_refinable(a, name: str = "a", fix: str = "cast it first"):
    """The refined solves take float64 / complex128 matrices: the one
    message, for the public calls and the solvers alike."""
    dtype = jnp.dtype(a.dtype)
    if not jnp.issubdtype(dtype, jnp.inexact) or jnp.finfo(dtype).bits != 64:
        raise TypeError(
            f"jaxmg: precision='mixed' refines to float64 accuracy and takes float64 or "
            f"complex128 matrices; {name} has dtype {dtype.name} ({fix})"
        )


def work_dtype(dtype, panel: str):
    complex_ = jnp.issubdtype(dtype, jnp.complexfloating)
    if panel == "float64":
        return jnp.dtype(jnp.complex128 if complex_ else jnp.float64)
    return jnp.dtype(jnp.complex64 if complex_ else jnp.float32)


def partition(n: int, block_size: int) -> list[tuple[int, int]]:
    """(offset, width) of each block: widths block_size, the last the rest."""
    return [(o, min(block_size, n - o)) for o in range(0, n, block_size)]


def offsets(widths) -> list[tuple[int, int]]:
    out, o = [], 0
    for w in widths:
        out.append((o, w))
        o += w
    return out


def times_scale(y, scale):
    """y times a factor's power-of-two scale, in the wider of their dtypes:
    the scale of a matrix near float64's range limits lies outside
    float32's (2^127 for ||A|| near 1e-38)."""
    return y.astype(jnp.result_type(y.dtype, scale.dtype)) * scale


def power_of_two_near_inverse(v):
    """2^(1 - e) for v = m 2^e, 1/2 <= m < 1: v times it lies in [1, 2)
    (1 where v is 0 or not finite). ldexp is exact; exp2 rounds."""
    finite = jnp.isfinite(v) & (v > 0)
    _, e = jnp.frexp(jnp.where(finite, v, 1))
    return jnp.where(finite, jnp.ldexp(jnp.ones_like(v), 1 - e), 1)


def rows_in_range(m):
    """m with each row times the power of two that brings its largest entry
    into [1, 2), and those powers: the rows of a diagonal block's inverse
    can exceed float16's range (one tiny pivot), while the products they
    give the block column stay near 1. Row by row, so that one large row
    does not push the others below float16's normal range."""
    s = power_of_two_near_inverse(jnp.max(jnp.abs(m), axis=1))
    return m * s[:, None].astype(m.dtype), s


# The diagonal blocks' inverses are on the factorisations' critical path.
# cuBLAS's triangular solve substitutes its rows one after another (on an
# H200, about 85 us per 256 rows whatever the width), so one 2048-row solve
# against I took 0.93 ms of the Cholesky's 2.3 ms per panel. By doubling,
# the leaves are solved side by side as one batch and joined pairwise by
# GEMMs: with leaves of 64 rows the mixed SPD solve took 21.5 ms against
# 26.7 at N=16384 (75.4 against 86.2 at 32768); 128 and 256 rows, 22.9 and
# 23.5 (docs/benchmarks.md).
INVERSE_LEAF = 64


def inverse_lower(l, *, unit_diagonal: bool = False, leaf: int | None = None):
    """The inverse of l's lower triangle (unit_diagonal: of its strict lower
    triangle plus I). Blocks of `leaf` rows on the diagonal are inverted as
    one batch of triangular solves, then joined two by two: the inverse of
    [[L1, 0], [C, L2]] is [[X1, 0], [-X2 C X1, X2]] (LAPACK's trtri joins
    its blocks the same way, in another order). On an H200 its float32
    inverses were as accurate as the triangular solve's (docs/benchmarks.md)."""
    leaf = INVERSE_LEAF if leaf is None else leaf
    n = l.shape[0]
    if n <= leaf:
        return _solve_identity(l, unit_diagonal)
    count = 1 << (-(-n // leaf) - 1).bit_length()  # leaves, a power of two
    p = count * leaf
    if p > n:  # [[L, 0], [0, I]]: its inverse holds L's
        l = jnp.zeros((p, p), l.dtype).at[:n, :n].set(l).at[n:, n:].set(jnp.eye(p - n, dtype=l.dtype))
    x = _solve_identity(jnp.stack([l[o : o + leaf, o : o + leaf] for o in range(0, p, leaf)]),
                        unit_diagonal)
    s = leaf
    hi = lax.Precision.HIGHEST
    while s < p:
        c = jnp.stack([l[o + s : o + 2 * s, o : o + s] for o in range(0, p, 2 * s)])
        x1, x2 = x[0::2], x[1::2]
        joined = -jnp.matmul(x2, jnp.matmul(c, x1, precision=hi), precision=hi)
        top = jnp.concatenate([x1, jnp.zeros_like(x1)], axis=2)
        x = jnp.concatenate([top, jnp.concatenate([joined, x2], axis=2)], axis=1)
        s *= 2
    return x[0, :n, :n]


def inverse_upper(u, *, leaf: int | None = None):
    """The inverse of u's upper triangle: that of its transpose, transposed."""
    return inverse_lower(u.T, leaf=leaf).T


def _solve_identity(l, unit_diagonal: bool):
    def solve(l):
        eye = jnp.broadcast_to(jnp.eye(l.shape[-1], dtype=l.dtype), l.shape)
        return lax.linalg.triangular_solve(l, eye, left_side=True, lower=True,
                                           unit_diagonal=unit_diagonal)

    if l.ndim == 2:
        return solve(l)
    # On CPUs one leaf at a time: jaxlib 0.10's batched LAPACK kernels hand their
    # batch to the thread pool they run on and wait for it, so as many of them at
    # once as the pool has threads (a factorisation's independent inverses, two on a
    # two-core machine) deadlock the program.
    return lax.platform_dependent(l, cpu=lambda l: jnp.stack([solve(x) for x in l]), default=solve)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass
class FirstFailure:
    """The first block whose diagonal factorisation failed: its offset + 1
    (0: none yet) and the block itself, padded to nb x nb with the identity,
    for a LAPACK-style order at the end."""

    offset_plus_one: jax.Array
    block: jax.Array

    def tree_flatten(self):
        return (self.offset_plus_one, self.block), None

    @classmethod
    def tree_unflatten(cls, _, children):
        return cls(*children)

    @classmethod
    def none(cls, nb: int, dtype):
        return cls(jnp.zeros((), jnp.int32), jnp.eye(nb, dtype=dtype))

    def record(self, failed, offset: int, block):
        nb, w = self.block.shape[0], block.shape[0]
        padded = block if w == nb else jnp.eye(nb, dtype=block.dtype).at[:w, :w].set(block)
        first = failed & (self.offset_plus_one == 0)
        return FirstFailure(
            jnp.where(first, offset + 1, self.offset_plus_one), jnp.where(first, padded, self.block)
        )

    def info(self, local_order):
        """0, or the global order of the first failure; local_order(block)
        runs only when a block failed."""
        failed = self.offset_plus_one > 0
        local = lax.cond(failed, local_order, lambda b: jnp.zeros((), jnp.int32), self.block)
        return jnp.where(failed, self.offset_plus_one - 1 + local, 0).astype(jnp.int32)
