"""What every engine offers, and the Layout that carries a chosen engine
through a call: factor, solve, invert and eigendecompose an N x N matrix
whose rows are sharded over a placement.

Every routine takes and returns global (sharded) arrays under jit; a factor
is kept in the engine's own storage (`Layout` says which), which only that
engine reads. Failures are data: info is 0 or the routine's LAPACK-style
code, and results of a failed factorisation are NaN."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jax.sharding import PartitionSpec as P

from jaxmg._src import config, failures
from jaxmg._src.placement import Placement


def block_tile(rows: int, requested: int | None) -> int:
    """The tile of local blocks inside shard_map, where jaxmg does not pad rows:
    the largest divisor of the local rows up to the default, or the tile
    asked for (capped at the rows, as outside it is capped at N / devices),
    which must divide them: another tile would give other roundings than the
    same call outside shard_map."""
    if requested is None:
        return largest_divisor(rows, config.DEFAULT_TILE)
    requested = min(requested, rows)
    if rows % requested:
        divisors = [t for t in range(1, rows + 1) if rows % t == 0]
        raise ValueError(
            f"jaxmg: inside shard_map tile_size must divide this device's {rows} rows; "
            f"{requested} does not. Use one of {divisors}, leave tile_size out, or (potrs, "
            "potri) call potrs_shardmap_ctx / potri_shardmap_ctx with pad=True, which pad "
            "each device's block to a multiple of the tile"
        )
    return requested


def largest_divisor(rows: int, up_to: int) -> int:
    """The largest tile up to `up_to` that divides `rows` (>= 1)."""
    return next(t for t in range(min(rows, up_to), 0, -1) if rows % t == 0)


class Engine:
    """The function set; an engine overrides what it offers."""

    name = "engine"

    def tile(self, routine: str, n: int, placement: Placement, requested: int | None) -> int:
        """The layout's tile (or block) for `routine` on an order-n matrix."""
        return 0

    def finite_info(self, a, info, layout, upper: bool = False):
        """info, or N + 1 where a (the matrix the routine read) has a NaN or
        Inf entry that the routine let through; upper: the routine read only
        a's upper triangle (the Cholesky ones), so only it is checked."""
        return failures.with_finite_check(a, info, layout.n, upper)

    # Cholesky
    def cholesky(self, a, layout):  # -> (factor, info)
        raise self.missing("cholesky")

    def cho_solve(self, factor, info, b, layout, b_sharded: bool):  # -> x, NaN on failure
        raise self.missing("cho_solve")

    def potrs(self, a, b, layout, b_sharded: bool):  # -> (x, info, factor)
        factor, info = self.cholesky(a, layout)
        return self.cho_solve(factor, info, b, layout, b_sharded), info, factor

    def cholesky_logdet(self, factor, info, layout):
        raise self.missing("cholesky_logdet")

    def cholesky_upper(self, factor, info, layout):  # -> U with A = U^H U, (N, N) rows sharded
        raise self.missing("cholesky_upper")

    def potri(self, a, layout):  # -> (full inverse, rows sharded; info)
        raise self.missing("potri")

    # LU with partial pivoting
    def lu(self, a, layout):  # -> (lu, piv, info)
        raise self.missing("lu")

    def lu_solve(self, lu, piv, info, b, layout, b_sharded: bool, trans: int):
        raise self.missing("lu_solve")

    def lu_matrices(self, lu, piv, layout):  # -> jax.scipy's (lu, piv): P A = L U, 0-based
        raise self.missing("lu_matrices")

    def lu_slogdet(self, lu, piv, info, layout):  # -> (sign, logabsdet)
        raise self.missing("lu_slogdet")

    # Symmetric / Hermitian eigendecomposition
    def syevd(self, a, layout, vectors: bool):  # -> (w, v or None, info)
        raise self.missing("syevd")

    # Inside the caller's shard_map: a is this device's (N/n, N) row block.
    def potrs_blocks(self, a, b, placement, tile):  # -> (x, info)
        raise self.missing("potrs inside shard_map")

    def potri_blocks(self, a, placement, tile):  # -> (inverse rows, info)
        raise self.missing("potri inside shard_map")

    def syevd_blocks(self, a, placement, tile, vectors: bool):  # -> (w, vh rows or None, info)
        raise self.missing("syevd inside shard_map")

    # Tall matrices (M >= N)
    def qr(self, a, placement):  # -> (q, r, info)
        raise self.missing("qr")

    def missing(self, routine: str) -> NotImplementedError:
        return NotImplementedError(f"jaxmg: the {self.name} engine has no {routine}")

    def __repr__(self):
        return f"<jaxmg engine {self.name}>"

    def __reduce__(self):
        return (engine_named, (self.name,))


# Each engine's one instance by name: a pickled layout loads with the same
# object, which jit's cache and the dispatch compare by identity.
_ENGINES: dict[str, "Engine"] = {}


def registered(engine: "Engine") -> "Engine":
    _ENGINES[engine.name] = engine
    return engine


def engine_named(name: str) -> "Engine":
    return _ENGINES[name]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a factor lives and how: static, so it is part of a jit key."""

    placement: Placement
    n: int  # the order of the user's matrix
    tile: int  # the engine's tile or block (0 where it has none)
    engine: Engine

    @property
    def row_spec(self):
        return P(self.placement.axis, None)

    def __reduce__(self):
        return (layout, (self.placement, self.n, self.tile, self.engine))


@functools.lru_cache(maxsize=1024)
def layout(placement: Placement, n: int, tile: int, engine: Engine) -> Layout:
    """One Layout object per value: jit's cache compares the same object at
    once, where a new one costs an eager call several microseconds."""
    return Layout(placement, n, tile, engine)


def slogdet_from(diag, swaps, dtype):
    """(sign, log|det|) from U's diagonal and the number of row swaps. The
    sign comes from sums only (a product reduction of complex values across
    GPUs comes out wrong in XLA): parity of swaps and negative entries, and
    the sum of phases."""
    magnitude = jnp.abs(diag)
    logabsdet = jnp.sum(jnp.log(magnitude))
    zero = jnp.any(magnitude == 0)
    if jnp.iscomplexobj(diag):
        phase = jnp.sum(jnp.angle(diag)) + jnp.pi * swaps.astype(magnitude.dtype)
        sign = jax.lax.complex(jnp.cos(phase), jnp.sin(phase)).astype(dtype)
    else:
        flips = swaps + jnp.sum(diag < 0)
        sign = jnp.where(flips % 2 == 0, 1, -1).astype(dtype)
    return jnp.where(zero, jnp.zeros_like(sign), sign), logabsdet


def eigenvalue_bound(a):
    """Above every |eigenvalue| of the Hermitian matrix of a's upper
    triangle (the one the engines read): its largest row sum plus its
    largest column sum bounds that matrix's inf-norm. The padding
    eigenvalues of syevd, so they sort last; the other triangle may hold
    anything, as for LAPACK."""
    upper = jnp.abs(jnp.triu(a))
    return jnp.max(jnp.sum(upper, axis=1)) + jnp.max(jnp.sum(upper, axis=0)) + 1
