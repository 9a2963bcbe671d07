"""precision="mixed" for the public solves (solve, potrs, cho_factor /
cho_solve, lu_factor / lu_solve): the measured defaults, the factor that
cho_solve and lu_solve refine against the original matrix, and derivatives.

Derivatives go through jax.lax.custom_linear_solve: the refined solve is a
loop that JAX cannot differentiate, but x = A^-1 b is differentiated
implicitly (the tangent is another solve with the same matrix), so grad,
jvp, vmap and jit behave as for the float64 solvers.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxmg._src import arguments, failures, numpy_rules, sharding
from jaxmg._src.placement import explicit_spec, resolve_placement
from jaxmg._src.mixed import precision
from jaxmg._src.mixed import blocks as blk, cholesky as chol, hermitian, lu as lum, normal, placement
from jaxmg._src.mixed import refine as rf, solvers

PRECISIONS = ("highest", "mixed")

# Cholesky: the fastest variant measured on one H200 (tools/mixed_precision_probe.py,
# docs/benchmarks.md): FP16 trailing updates (A scaled to a largest diagonal
# entry in [1, 2), so that L's entries fit float16's range), float32 panels of
# 2048 columns, left-looking, the off-diagonal blocks as GEMMs with the
# inverse of the diagonal block (its rows scaled into float16's range). FP16's
# 3 more bits than BF16 save a refinement step at cond 10 (N=32768: 82.5 ms
# against 90.5) and factor cond 1e4 at once, where BF16 failed. Where FP16
# cannot factor the matrix (from about cond 1e5) the solve goes to float64
# at once. A second factorisation before it, with BF16x6 updates in spans of
# 2048 (about float32's accuracy, on tensor cores), does not pay: it costs
# about what JAX's float64 Cholesky does (0.9x at N=32768, 1.2x at 16384),
# so it could save little and, where it did not refine, cost twice. On one
# H100, one run (tools/spd_update_probe.py --no-retry at 3b40b0f,
# docs/benchmarks.md), against going to float64 at once: at
# N=32768 it saved 67 and 40 ms at cond 1e5 and 1e6 (291 and 304 ms against
# JAX's 286 and 296), and cost 38 and 322 ms more at cond 1e7 and 1e8 (656
# ms, 2.2x JAX's); at N=16384 it saved 3 ms at cond 1e5 and cost 8 to 72 ms
# more from cond 1e6 (131 ms at 1e8, 3.0x). Without it a jitted solve
# compiles one factorisation, in half the time (21 s against 42 at N=32768).
# LU: BF16's pivot growth left refinement at 22-30 steps even at cond 10,
# and so did TF32's on U S V^T matrices at N=16384 and 32768 (it converged
# in 4 on W / sqrt(N) + 3 I), so BF16x3 from the start; right-looking, U12
# as a GEMM with the inverse of L11 (525 ms against 565 with the triangular
# solve at N=32768, 143 against 151 at 16384), panels of 4096 columns, 2048
# up to N=16384 (131 ms there): its program grows with (N / nb)^2 blocks,
# and so does its compile time.
SPD = dict(block_size=2048, update="fp16", panel="float32", variant="left", panel_solve="inverse")
GENERAL = dict(block_size=4096, update="bf16x3", panel="float32", variant="right",
               panel_solve="inverse")
GENERAL_UP_TO_16384 = dict(GENERAL, block_size=2048)
REFINEMENT = rf.options()
# General matrices from N = GRAM_FROM: no LU, but the Cholesky
# of G = A^H A (normal.py: G by FP16 products, factored with BF16x3 updates)
# preconditions the refinement. On one H200, U S V^T matrices, one run
# (tools/normal_probe.py, docs/benchmarks.md), N=32768 against JAX's 709 ms:
# 206 ms at cond 10, 247 at cond 100, and from cond 1e3 G's Cholesky fails and
# float64 LU answers (921 ms). The Cholesky with FP16 updates took 152 ms at
# cond 10 but stalled at cond 100 and fell back (990 ms), so BF16x3 (its
# errors, not G's FP16 products, bound the reach: G by BF16x3 products cost
# 144 ms more at cond 10 in an earlier run). At N=8192 with FP16 updates, 10.1
# ms against JAX's 40.8 and the blocked LU's 35.6. Rows sharded over several
# GPUs (not measured: no such machine lent since): the same route, whose parts
# are the SPD path's sharded Cholesky and products reduced over the devices,
# where the blocked LU would search each column's pivot across them.
GRAM = dict(SPD, update="bf16x3", variant="gram")
GRAM_FROM = 8192

RefinementInfo = solvers.Refinement


def check_precision(precision) -> bool:
    """Whether `precision` asks for the mixed-precision solvers."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(
            f"jaxmg: precision must be one of {PRECISIONS}, got {precision!r}: \"highest\" "
            "factors in a's own precision, \"mixed\" factors float64 / complex128 matrices on "
            "tensor cores and refines to float64 accuracy"
        )
    return precision == "mixed"


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("a", "factor", "factor_info", "norms"),
    meta_fields=("kind", "cfg", "rows", "on_failure", "triangle", "order"),
)
@dataclasses.dataclass(frozen=True)
class MixedFactor:
    """What cho_factor / lu_factor(precision="mixed") return: the
    low-precision factor and the matrix the solves refine against.

    info: the low-precision factorisation's (0, or where it failed; the
    solves then fall back to float64). order: A's N; with rows sharded over
    devices that do not divide it, a holds A padded to a multiple of them
    (_padded).
    """

    a: jax.Array
    factor: object
    factor_info: jax.Array
    norms: tuple  # (||A||_inf, the rows' share of the residual's rounding): refine.norms, once
    kind: str
    cfg: blk.Config
    rows: placement.Rows
    on_failure: str = "nan"  # what its solves do where the float64 fallback fails too
    triangle: str | None = None  # a holds A in this triangle only ("spd", one device); None: all of A
    order: int | None = None  # A's N (a may be padded beyond it); None: a's own

    @property
    def info(self):
        return self.factor_info

    def on_devices(self) -> "MixedFactor":
        """This factor, refused with the fix where its arrays left the
        devices its rows are sharded over (jax.device_get, pickling): its
        mesh is abstract, so it cannot name the devices to put them back on."""
        size = self.rows.mesh.size if self.rows.sharded else None
        moved = lambda x: not isinstance(x, jax.Array) or (  # noqa: E731
            not isinstance(x, jax.core.Tracer) and len(x.sharding.device_set) != size)
        if self.rows.sharded and any(moved(x) for x in jax.tree.leaves(self)):
            raise ValueError(
                "jaxmg: this precision='mixed' factor's arrays are no longer on the devices its "
                "rows are sharded over (jax.device_get or pickling); keep it on its devices, or "
                "factor the matrix again")
        return self

    @property
    def n(self) -> int:
        """A's order."""
        return self.a.shape[-1] if self.order is None else self.order

    @property
    def dtype(self):
        """A's dtype (float64 or complex128), which solves promote b to."""
        return self.a.dtype

    @numpy_rules.default_rules
    def __iter__(self):
        """Refused: jax.scipy's (c, lower) or (lu, piv) would be float64
        factors, which a mixed factor does not hold."""
        call, maker = _CALLS[self.kind]
        pair = "(c, lower)" if self.kind == "spd" else "(lu, piv)"
        raise TypeError(
            f"jaxmg: {maker}(precision='mixed') returns a MixedFactor (a low-precision factor and "
            f"a), which does not unpack as jax.scipy's {pair}: pass it whole to jaxmg.{call}, or "
            f"use {maker}(precision='highest') for a factor that unpacks"
        )


def _rows(a, mesh, spec) -> placement.Rows:
    """Where the mixed solve keeps A's rows: the mesh axis that spec shards
    (rows or columns: XLA moves columns into rows), the one axis of a mesh
    given without spec, else what a's own sharding says. mesh= and spec=
    are checked as precision="highest" checks them."""
    if mesh is not None or spec is not None:
        resolve_placement(a, mesh, spec, "a")
    named = [s for s in (tuple(spec) if spec is not None else ()) if s is not None]
    if len(named) > 1 or any(isinstance(s, tuple) for s in named):
        raise ValueError(
            f"jaxmg: precision='mixed' takes rows sharded over one mesh axis, P(axis, None); "
            f"spec={spec} shards over several: reshard a first"
        )
    axis = named[0] if named else None
    if mesh is not None and axis is None:
        if len(mesh.axis_names) != 1:
            raise ValueError(
                f"jaxmg: mesh has axes {mesh.axis_names}: pass spec=P(axis, None) naming the "
                "one that a's rows are sharded over"
            )
        axis = mesh.axis_names[0]
    return placement.resolve(a, mesh, axis)


def check_options(*, tile_size=None, backend="auto", donate=False):
    """The float64 solvers' options that have no meaning here, refused by name."""
    if tile_size is not None:
        raise ValueError(
            "jaxmg: tile_size does not apply to precision='mixed' (its panels are "
            f"{SPD['block_size']} columns wide); leave it out"
        )
    if backend != "auto":
        raise ValueError(
            f"jaxmg: precision='mixed' runs jaxmg's mixed-precision solver in JAX; backend="
            f"{backend!r} names a float64 engine: leave backend out, or use precision='highest'"
        )
    if donate:
        raise ValueError(
            "jaxmg: precision='mixed' keeps a to refine against, so it cannot give a's buffer "
            "away: leave donate out, or use precision='highest'"
        )


def check_batch(*operands):
    """Refuses a batch sharded along a batch axis on explicit mesh axes
    (operands: (array, name, number of batch axes)): its matrices would be
    factored where they lie, whose updates explicit sharding cannot place."""
    for x, name, batch_axes in operands:
        typed = explicit_spec(x)
        sharded = [] if typed is None else [e for e in typed[1][:batch_axes] if e is not None]
        if sharded:
            raise ValueError(
                f"jaxmg: precision='mixed' does not take a batch sharded along its batch axes on "
                f"explicit mesh axes ({name} is sharded {P(*typed[1])}): reshard {name} with its "
                "batch axes unsharded (a's rows may stay sharded, P(None, axis, None)), use mesh "
                "axes of type Auto, or precision='highest', which solves each matrix where it lies"
            )


def factor(kind: str, a, *, triangle: str | None = None, mesh=None, spec=None,
           on_failure: str = "nan") -> MixedFactor:
    """The low-precision factorisation of a ("spd": Cholesky of the
    Hermitian matrix whose `triangle` ("upper" or "lower") a holds;
    "general": LU)."""
    a, rows, n = _matrix(a, mesh, spec, triangle if kind == "spd" else None)
    if n == 0:  # nothing to factor (the norms would reduce over no entries)
        stored = "lower" if triangle == "lower" else "upper"
        real = jnp.finfo(a.dtype).dtype
        norms = (jnp.zeros((), real), jnp.zeros((0,), real))
        return MixedFactor(a, None, jnp.zeros((), jnp.int32), norms, kind, _config(kind, a, rows),
                           rows, on_failure, stored if kind == "spd" else None, n)
    return _factored(kind, a, triangle, rows, on_failure, n)


def _matrix(a, mesh, spec, triangle: str | None = None):
    """a checked, padded (_padded) and placed, where its rows live, and its N.
    triangle: the one a Hermitian a is read from ("upper", "lower"); None: all."""
    a = arguments.as_array(a, "a")
    arguments.check_rank2(a, "a")  # the messages of precision="highest"
    if a.shape[0] != a.shape[1]:
        raise arguments.ShapeError(f"jaxmg: a must be square, got shape {tuple(a.shape)}")
    blk.check_refinable(a, fix="use precision='highest', or cast it first")
    blk.check_matrix(a)
    n = a.shape[0]
    if arguments.is_symbolic(n):
        raise ValueError(f"jaxmg: precision='mixed' needs a concrete matrix order, got the symbolic "
                         f"{n} (jax.export); export with a concrete order (a symbolic batch "
                         "dimension works), or use precision='highest'")
    rows = _rows(a, mesh, spec) if n else placement.Rows()  # nothing to shard
    if rows.sharded and n % rows.mesh.shape[rows.axis]:
        a = _padded(a, -n % rows.mesh.shape[rows.axis], triangle)
    return _placed(a, rows, mesh, P(rows.axis, None)), rows, n


@precision.jit(static_argnums=(1, 2))
def _padded(a, extra: int, triangle: str | None = None):
    """A as the leading block of diag(A, d I), of an order that the devices
    divide (sharded rows must divide evenly): the same solution in the
    leading rows, 0 in the rest (no pivot or update mixes the blocks).
    d, a power of two at most max |a_ij| (1 for A = 0), leaves ||A||_inf,
    the rows' rounding (refine.norms) and the Cholesky's scaling as they are;
    it is taken from the triangle read (the other may hold anything)."""
    read = {"upper": jnp.triu, "lower": jnp.tril}.get(triangle, lambda m: m)
    largest = jax.lax.stop_gradient(jnp.max(jnp.abs(read(a))))
    d = 1 / blk.power_of_two_near_inverse(largest)  # 2^(e-1) <= largest < 2^e; 1 for 0
    n = a.shape[0]
    out = jnp.pad(a, ((0, extra), (0, extra)))
    return out.at[jnp.arange(n, n + extra), jnp.arange(n, n + extra)].set(d.astype(a.dtype))


def _factored(kind: str, a, triangle, rows: placement.Rows, on_failure: str = "nan",
              order: int | None = None, cfg: blk.Config | None = None):
    """The MixedFactor of a; cfg: the factorisation's, _config's by default."""
    stored = None
    if kind == "spd" and rows.sharded:
        a = _read(a, triangle != "lower", rows)
    elif kind == "spd":  # used where it lies: no mirrored copy of A (hermitian.py)
        stored = "lower" if triangle == "lower" else "upper"
    cfg = _config(kind, a, rows) if cfg is None else cfg
    f, info, norms = solvers.factorise(kind, a, cfg, rows, triangle=stored)
    return MixedFactor(a, f, info, norms, kind, cfg, rows, on_failure, stored, order)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _read(a, upper: bool, rows: placement.Rows):
    """The Hermitian matrix a's `upper` (or lower) triangle holds, for rows
    sharded over devices; its derivative is a's own, as for the float64
    solvers (which differentiate the matrix as given, not the triangle they
    read). On one device the solves read the triangle where it lies and
    differentiate a directly, to the same effect."""
    return _hermitian(a, upper=upper, rows=rows)


@_read.defjvp
@numpy_rules.default_rules
def _read_jvp(upper, rows, primals, tangents):
    # the tangent placed as the primal is (a padded a's tangent is not yet)
    return _read(primals[0], upper, rows), _row_placed(tangents[0], rows=rows)


@precision.jit(static_argnames=("rows",))
def _row_placed(t, *, rows: placement.Rows):
    return placement.call(rows, lambda t: t, P(rows.axis, None), t)


@precision.jit(static_argnames=("upper", "rows"))
def _hermitian(a, *, upper: bool, rows: placement.Rows):
    """The refinement's residuals read all of A: the other triangle is
    mirrored from the one the solve reads."""
    mirrored = functools.partial(hermitian.mirrored, upper=upper, rows=rows)
    return placement.call(rows, mirrored, P(rows.axis, None), a)


def _placed(x, rows: placement.Rows, mesh, spec):
    """An array on the (concrete) mesh the solve runs over: a NumPy or
    one-device array is moved there; a traced one is resharded (under vmap
    a NumPy a is traced, and the solve's programs would have no devices).
    Unsharded rows (one device) are whole in x's type too: a one-device
    mesh's explicit axis would otherwise meet unsharded operands."""
    if not rows.sharded:
        return sharding.whole_element(x)
    if not isinstance(mesh, jax.sharding.Mesh):
        return x
    want = jax.sharding.NamedSharding(mesh, spec)
    if arguments.is_traced(x):
        if all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types):
            return jax.lax.with_sharding_constraint(x, want)  # reshard takes explicit axes only
        return jax.sharding.reshard(x, want)
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(want, x.ndim):
        return x
    return jax.device_put(x, want)


def _mesh_of(x):
    sharding = None if arguments.is_traced(x) else getattr(x, "sharding", None)
    return sharding.mesh if isinstance(sharding, jax.sharding.NamedSharding) else None


def _config(kind, a, rows: placement.Rows):
    if kind == "spd":
        return blk.config(a.dtype, variants=chol.VARIANTS, **SPD)
    if a.shape[0] >= GRAM_FROM:
        return blk.config(a.dtype, variants=normal.VARIANTS, **GRAM)
    return blk.config(a.dtype, variants=lum.VARIANTS, bounded=False, **blocked_lu(a.shape[0]))


def blocked_lu(n: int) -> dict:
    """The blocked LU's options at order n (below GRAM_FROM, and in the probes)."""
    return GENERAL_UP_TO_16384 if n <= 16384 else GENERAL


def solve(kind: str, a, b, *, triangle: str | None = None, mesh=None, spec=None,
          on_failure: str = "nan"):
    """x with a x = b at float64 accuracy (sharded as b), and its RefinementInfo:
    factored and solved in one program, eager or traced alike."""
    a, rows, n = _matrix(a, mesh, spec, triangle if kind == "spd" else None)
    b, b2 = _rhs(b, a, n, rows)
    if n == 0:
        return _result(b, *_empty(b2), kind, on_failure)
    x, record = _factor_and_solve(a, b2, kind=kind, triangle=triangle, rows=rows,
                                  cfg=_config(kind, a, rows))
    return _result(b, x, record, kind, on_failure)


@precision.jit(static_argnames=("kind", "triangle", "rows", "cfg", "trans"))
def _factor_and_solve(a, b, *, kind, triangle, rows, cfg: blk.Config, trans: int = 0):
    """op(A) x = b (trans as for _solve), factored with cfg (a static
    argument: a program compiled for one configuration is never reused for
    another) and refined, in one program."""
    return _solve(_factored(kind, a, triangle, rows, cfg=cfg), b, trans=trans)


_CALLS = {"spd": ("cho_solve", "cho_factor"), "general": ("lu_solve", "lu_factor")}


def solve_with(f: MixedFactor, b, trans: int = 0, *, kind: str):
    """op(A) x = b (trans 0: A, 1: A^T, 2: A^H, checked by the caller) with a
    MixedFactor, refined against A; differentiable with respect to A and b.
    kind: the factor the calling solve takes ("spd": cho_solve, "general":
    lu_solve); the other kind is refused, naming the solve it belongs to.
    Where the float64 fallback fails too, acts on it as f.on_failure says."""
    if f.kind != kind:
        (call, maker), (other_call, other_maker) = _CALLS[kind], _CALLS[f.kind]
        raise TypeError(f"jaxmg.{call} takes {maker}'s factor; this one is {other_maker}'s "
                        f"(solve with jaxmg.{other_call})")
    n = f.a.shape[0] if f.order is None else f.order
    b, b2 = _rhs(b, f.a, n, f.rows, other="the factor")
    x, record = _empty(b2) if n == 0 else _solve(f, b2, trans=trans)
    return _result(b, x, record, f.kind, f.on_failure)


def _rhs(b, a, n: int, rows: placement.Rows, other: str = "a"):
    """b checked against a (of order n), and as the (N, K) matrix the solves
    take (zero rows below n where a is padded), placed and whole: x, which
    the refinement returns replicated, must have b's type."""
    b = arguments.as_array(b, "b")
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"jaxmg: b must have shape ({n},) or ({n}, K) to match a, got {b.shape}")
    arguments.check_same_dtype(b, a.dtype, other=other)
    k = b.shape[1] if b.ndim == 2 else 1  # explicit: reshape(0, -1) has no answer
    b2 = b.reshape(n, k)
    if a.shape[0] > n:
        b2 = jnp.pad(b2, ((0, a.shape[0] - n), (0, 0)))
    return b, sharding.whole_element(_placed(b2, rows, _mesh_of(a), P()))


def _empty(b):
    """The solve of a 0 x 0 system: x = b (0 rows), nothing refined, as
    jax.scipy.linalg.solve returns an empty x."""
    k = b.shape[1]
    record = RefinementInfo(jnp.zeros((k,), jnp.int32), jnp.zeros((k,), bool),
                            jnp.zeros((k,), bool), jnp.zeros((k,), jnp.finfo(b.dtype).dtype),
                            jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    return jnp.zeros_like(b), record


def _result(b, x, record, kind: str, on_failure: str):
    """x (padded to a's order) and record shaped as b, and on_failure acted on."""
    x, record, info = _shaped(x, record, n=b.shape[0], vector=b.ndim == 1)
    failures.report(info, on_failure, failures.NOT_SPD if kind == "spd" else failures.SINGULAR)
    return _like(x, b), record


@precision.jit(static_argnames=("n", "vector"))
def _shaped(x, record, *, n: int, vector: bool):
    """x's first n rows, x and the record as for a vector b (vector), and the
    largest info: in one program, not an eager operation each (an eager solve
    of N=16 on a CPU took 0.47 ms a call with seven of them, 0.26 with this)."""
    x = x[:n]
    if vector:
        x = x[:, 0]
        record = RefinementInfo(*(r[0] if r.ndim else r for r in record))
    return x, record, jnp.max(record.info)


def _like(x, b):
    """x sharded as b where b's sharding is known: a concrete array's, or
    the type of one traced on explicit mesh axes (on Auto axes under jit
    XLA places x)."""
    if arguments.is_traced(b):
        typed = getattr(jax.typeof(b), "sharding", None)
        if typed is None or all(entry is None for entry in typed.spec):
            return x
        return jax.sharding.reshard(x, typed)
    want = getattr(b, "sharding", None)
    if not isinstance(want, jax.sharding.NamedSharding) or arguments.is_traced(x):
        return x
    return x if x.sharding.is_equivalent_to(want, x.ndim) else jax.device_put(x, want)


@precision.jit(static_argnames=("trans",))
def _solve(f: MixedFactor, b, *, trans: int):
    conj = jnp.iscomplexobj(f.a)
    adjoint = trans == 2 or (trans == 1 and not conj)

    def matvec(x):
        return _product(f.a, f.rows, x)

    def direct(_, rhs):  # A x = rhs
        return _refined(f, rhs)

    def transposed(_, rhs):  # A^T x = rhs: A^H conj(x) = conj(rhs), A^H = A for Hermitian A
        x, record = _refined(f, jnp.conj(rhs), adjoint=True)
        return jnp.conj(x), record

    if trans == 0:
        return jax.lax.custom_linear_solve(matvec, b, direct, transposed, has_aux=True)
    # op(A) x = b as the transposed system of op(A)^T (A^T's solves are the direct ones' transposes).
    rhs = jnp.conj(b) if adjoint and conj else b
    x, record = jax.lax.custom_linear_solve(
        lambda v: _transposed_product(f.a, f.rows, v), rhs, transposed, direct, has_aux=True
    )
    return (jnp.conj(x) if adjoint and conj else x), record


def _refined(f: MixedFactor, b, adjoint: bool = False):
    """A x = b, or A^H x = b (adjoint) with the same factor, refined against A."""
    factor = jax.lax.stop_gradient(f.factor)
    return solvers.solve_factored(f.kind, jax.lax.stop_gradient(f.a), factor, f.factor_info,
                                  jax.lax.stop_gradient(f.norms), b, f.cfg, REFINEMENT, True, f.rows,
                                  adjoint=adjoint, triangle=f.triangle)


def _product(a, rows: placement.Rows, x):
    return placement.call(rows, rows.row_product, P(), a, x)


def _transposed_product(a, rows: placement.Rows, x):
    return placement.call(rows, rows.transposed_product, P(), a, x)
