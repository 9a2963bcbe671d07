"""How a jaxmg call maps onto devices: argument checks, the mesh and row axis
the matrix is sharded over, tile size and padding."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

SUPPORTED_DTYPES = (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)
DEFAULT_TILE = 1024
_DEFAULT_TIMEOUT_S = 300.0
_CALL_IDS = itertools.count(1)


def next_call_id() -> int:
    """A fresh id for one call site in a traced program (rendezvous key)."""
    return next(_CALL_IDS)


def timeout_ms() -> int:
    """How long a device waits for the others to arrive at a call."""
    raw = os.environ.get("JAXMG_TIMEOUT_S", "")
    try:
        seconds = float(raw) if raw else _DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"JAXMG_TIMEOUT_S={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise ValueError(f"JAXMG_TIMEOUT_S={raw!r} must be positive")
    return int(seconds * 1000)


@dataclasses.dataclass(frozen=True)
class Placement:
    """The devices one call runs on: `mesh`, with rows sharded over `axis`
    (one mesh axis, or a tuple of them: rows over their product, the first
    one major, as in P(("r", "c"), None))."""

    mesh: Mesh
    axis: str | tuple[str, ...]
    manual: bool  # True inside the caller's shard_map: arrays are local blocks

    @property
    def axes(self) -> tuple[str, ...]:
        return self.axis if isinstance(self.axis, tuple) else (self.axis,)

    @property
    def n_devices(self) -> int:
        return math.prod(self.mesh.shape[ax] for ax in self.axes)


def check_rank2(a, name: str = "a") -> None:
    shape = getattr(a, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(
            f"jaxmg: {name} must be a 2-D (N, N) matrix, got shape {shape}; "
            "use jax.vmap for batches"
        )


def check_square(a, placement: "Placement", name: str = "a") -> int:
    """The global order N; inside shard_map `a` is a device's (N/n, N) block."""
    rows, cols = a.shape
    if placement.manual:
        n_devices = jax.lax.axis_size(placement.axis)
        if rows * n_devices != cols:
            raise ValueError(
                f"jaxmg: inside shard_map {name} must be this device's (N/{n_devices}, N) row "
                f"block, got shape {tuple(a.shape)}"
            )
    elif rows != cols:
        raise ValueError(f"jaxmg: {name} must be square, got shape {tuple(a.shape)}")
    return int(cols)


def check_dtype(a, name: str = "a") -> np.dtype:
    dtype = jnp.dtype(a.dtype)
    if dtype in (jnp.float16, jnp.bfloat16):
        raise TypeError(
            f"jaxmg: {name} has dtype {dtype.name}, which the solvers do not support; "
            f"cast it first, e.g. {name}.astype(jnp.float32)"
        )
    if dtype not in _SUPPORTED:
        raise TypeError(
            f"jaxmg: {name} has dtype {dtype.name}; supported are float32, float64, "
            "complex64 and complex128 (float64/complex128 need jax_enable_x64)"
        )
    return dtype


_SUPPORTED = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)


def check_tile(tile_size) -> int | None:
    if tile_size is None:
        return None
    if isinstance(tile_size, bool) or not isinstance(tile_size, (int, np.integer)):
        raise TypeError(f"jaxmg: tile_size must be a positive int, got {tile_size!r}")
    if tile_size < 1:
        raise ValueError(f"jaxmg: tile_size must be a positive int, got {tile_size}")
    return int(tile_size)


def _rows_axis(spec, name: str):
    """The mesh axis (or tuple of axes) sharding the rows, None if none."""
    entries = tuple(spec) + (None, None)
    rows, cols = entries[0], entries[1]
    if cols is not None:
        as_tuple = lambda e: e if isinstance(e, tuple) else (e,)  # noqa: E731
        if rows is not None and not set(as_tuple(rows)) & set(as_tuple(cols)):
            # A 2-D block layout P("r", "c"): the rows over every axis, the first
            # major, as the engines take it (the mp engine's grid is then r x c).
            return as_tuple(rows) + as_tuple(cols)
        raise ValueError(
            f"jaxmg: {name} is sharded along its columns only ({P(*spec)}); jaxmg needs rows "
            f"sharded, e.g. P('x', None), or P(('r', 'c'), None) or P('r', 'c') on a 2-D mesh"
        )
    if isinstance(rows, tuple):
        rows = rows[0] if len(rows) == 1 else (tuple(rows) or None)
    return rows


def sharding_of(x):
    """x's sharding where it is known: a concrete array's, or a tracer's
    explicit sharding type (whose mesh is then abstract: the spec is known,
    the devices are not)."""
    if isinstance(x, jax.core.Tracer):
        sharding = getattr(jax.typeof(x), "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        return None if mesh is None or mesh.empty else sharding
    return getattr(x, "sharding", None)


@functools.lru_cache(maxsize=64)
def _single_device_mesh(device) -> Mesh:
    return Mesh(np.array([device]), ("rows",))


def _underlying_array(x):
    """The concrete array under eager transformation tracers (grad, jvp,
    vmap outside jit), or None under jit, where there is none."""
    for _ in range(64):
        if not isinstance(x, jax.core.Tracer):
            return x if isinstance(x, jax.Array) else None
        x = getattr(x, "primal", getattr(x, "val", None))
    return None


def _context_mesh():
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def context_concrete_mesh():
    """The concrete Mesh set with `jax.set_mesh`, also while tracing under
    jit (where jax.sharding.get_mesh refuses); None if there is none."""
    try:
        from jax._src.mesh import get_concrete_mesh

        mesh = get_concrete_mesh()
    except (ImportError, ValueError):
        return None
    return None if mesh is None or mesh.empty else mesh


def resolve_placement(a, mesh: Mesh | None, spec, name: str = "a") -> Placement:
    """Reads the mesh and row axis from the arguments, a's sharding or the context."""
    if spec is not None and not isinstance(spec, P):
        raise TypeError(f"jaxmg: spec must be a jax.sharding.PartitionSpec, got {spec!r}")
    abstract = _context_mesh()
    if abstract is not None and abstract.manual_axes:
        return _manual_placement(abstract, mesh, spec, name)
    if abstract is None and (mesh is None or isinstance(mesh, Mesh)) and _concrete(a):
        # Eager calls: the answer depends on the sharding alone, and working
        # it out again would be most of a small call's Python time.
        return _concrete_placement(a.sharding, mesh, spec, name)
    return _placement(a, sharding_of(a), abstract, mesh, spec, name)


def eager_key(arrays, *options):
    """A hashable key for an eager call's plan (what the checks and dispatch
    decided), or None where the plan may not be reused: a traced array, or a
    mesh set in context."""
    if not all(_concrete(x) for x in arrays) or _context_mesh() is not None:
        return None
    key = tuple((x.sharding, x.shape, x.dtype) for x in arrays) + options
    try:
        hash(key)
    except TypeError:  # an option of a type the checks will refuse
        return None
    return key


def _concrete(x) -> bool:
    """A jax.Array with values (not traced)."""
    return isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)


@functools.lru_cache(maxsize=256)
def _concrete_placement(sharding, mesh, spec, name: str) -> Placement:
    return _placement(None, sharding, None, mesh, spec, name)


def _placement(a, sharding, abstract, mesh, spec, name: str) -> Placement:
    """`a`: the traced array, None for a concrete one (then only its sharding counts)."""
    concrete = sharding is not None and isinstance(getattr(sharding, "mesh", None), Mesh)
    if mesh is None and concrete:
        mesh = sharding.mesh
    if spec is None and isinstance(sharding, NamedSharding):
        spec = sharding.spec
    if mesh is None and not isinstance(a, jax.core.Tracer) and sharding is not None and len(
        sharding.device_set
    ) == 1:
        mesh = _single_device_mesh(next(iter(sharding.device_set)))
    if mesh is None and isinstance(abstract, jax.sharding.AbstractMesh):
        mesh = context_concrete_mesh()
    if mesh is None and isinstance(a, jax.core.Tracer):
        under = _underlying_array(a)
        under_sharding = getattr(under, "sharding", None)
        if isinstance(under_sharding, NamedSharding):
            mesh = under_sharding.mesh
            if spec is None and under.ndim == a.ndim:
                spec = under_sharding.spec
    if mesh is None:
        raise ValueError(
            f"jaxmg: cannot tell which devices {name} lives on. Pass mesh= and spec= "
            "(e.g. mesh=jax.make_mesh((n,), ('x',)), spec=P('x', None)), call under "
            "`with jax.set_mesh(mesh):`, or pass a jax.Array with a NamedSharding"
        )
    if not isinstance(mesh, Mesh):
        raise TypeError(f"jaxmg: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    rows = _rows_axis(spec if spec is not None else P(), name)
    if rows is None:
        if mesh.size != 1:
            used = tuple(ax for ax, size in mesh.shape.items() if size > 1)
            axis = repr(used[0]) if len(used) == 1 else repr(used)
            raise ValueError(
                f"jaxmg: {name} is not row-sharded over the {mesh.size}-device mesh; place it "
                f"with jax.device_put({name}, NamedSharding(mesh, P({axis}, None))) "
                "or pass spec=P(axis, None)"
            )
        rows = mesh.axis_names[0]
    axes = rows if isinstance(rows, tuple) else (rows,)
    missing = [ax for ax in axes if ax not in mesh.axis_names]
    if missing:
        raise ValueError(f"jaxmg: spec names axis {missing[0]!r}, not in the mesh axes {mesh.axis_names}")
    _check_one_process(mesh)
    others = {ax: size for ax, size in mesh.shape.items() if ax not in axes and size > 1}
    if others:
        raise ValueError(
            f"jaxmg: the mesh has axes {dict(mesh.shape)} but {name}'s rows are sharded over "
            f"{axes} only; jaxmg spreads the rows over every device it uses (other axes "
            f"{others} must have size 1). Shard the rows over all axes, e.g. "
            f"P({tuple(mesh.axis_names)}, None), or build the mesh over the devices to use"
        )
    return Placement(mesh, rows, manual=False)


def _check_one_process(mesh: Mesh) -> None:
    """Within one process jaxmg takes any of its devices; across processes,
    one device per process."""
    devices = list(mesh.devices.flat)
    if len({d.process_index for d in devices}) > 1:
        from jaxmg._src import processes

        processes.check_one_device_per_process(devices)


def _manual_placement(abstract, mesh, spec, name: str) -> Placement:
    manual = list(abstract.manual_axes)
    rows = _rows_axis(spec, name) if spec is not None else None
    if rows is None:
        if len(manual) != 1:
            raise ValueError(
                f"jaxmg: inside shard_map over axes {manual}, pass spec=P(axis, None) to say "
                f"which axis shards {name}'s rows"
            )
        rows = manual[0]
    axes = rows if isinstance(rows, tuple) else (rows,)
    others = {ax: jax.lax.axis_size(ax) for ax in manual if ax not in axes}
    others = {ax: size for ax, size in others.items() if size > 1}
    if others:
        raise ValueError(
            f"jaxmg: inside shard_map over {manual}, {name}'s rows are sharded over {axes} only; "
            f"jaxmg spreads the rows over every device it uses (axes {others} must have size 1). "
            f"Pass spec=P({tuple(manual)}, None) with the rows over all of them"
        )
    if any(ax not in manual for ax in axes):
        raise ValueError(
            f"jaxmg: inside shard_map, {name}'s row axis {rows!r} must be among the manual "
            f"axes {manual}"
        )
    return Placement(mesh if mesh is not None else abstract, rows, manual=True)


def choose_tile(n: int, n_devices: int, requested: int | None) -> int:
    """The tile width T_A: as requested, but never wider than a device's share."""
    tile = requested if requested is not None else DEFAULT_TILE
    return max(1, min(tile, math.ceil(n / n_devices)))


def padded_size(n: int, n_devices: int, tile: int) -> int:
    step = n_devices * tile
    return math.ceil(n / step) * step


def largest_divisor_at_most(n: int, limit: int) -> int:
    """Tile for local blocks inside shard_map, where rows cannot be re-padded."""
    for t in range(min(n, limit), 0, -1):
        if n % t == 0:
            return t
    return 1


def pad_matrix(a, n_pad: int, diagonal):
    """Embeds a in an n_pad x n_pad matrix, `diagonal` on the extra diagonal."""
    n = a.shape[0]
    if n_pad == n:
        return a
    a = jnp.pad(a, ((0, n_pad - n), (0, n_pad - n)))
    # An elementwise select, not a scatter: it keeps a's sharding as it is.
    rows = jnp.arange(n_pad)[:, None]
    cols = jnp.arange(n_pad)[None, :]
    return jnp.where((rows == cols) & (rows >= n), jnp.asarray(diagonal, a.dtype), a)


def pad_rows(b, n_pad: int):
    n = b.shape[0]
    return b if n_pad == n else jnp.pad(b, ((0, n_pad - n), (0, 0)))


def is_explicit(placement: Placement) -> bool:
    types = dict(zip(placement.mesh.axis_names, placement.mesh.axis_types))
    return all(types[ax] == jax.sharding.AxisType.Explicit for ax in placement.axes)


def unpad(x, placement: Placement, n: int, dims: tuple[int, ...]):
    """x restricted to its first n entries along `dims`. Explicit sharding
    cannot split n unevenly over the devices: such a result is replicated."""
    if all(x.shape[d] == n for d in dims):
        return x
    if is_explicit(placement) and n % placement.n_devices:
        x = constrain(x, placement, P())
    index = tuple(slice(0, n) if d in dims else slice(None) for d in range(x.ndim))
    return x[index]


def _even(shape, placement: Placement, spec):
    """spec, or P() where explicit sharding would split a dimension unevenly
    (it allows no uneven shards)."""
    if is_explicit(placement):
        entries = tuple(spec) + (None,) * (len(shape) - len(spec))
        if any(e is not None and shape[d] % placement.n_devices for d, e in enumerate(entries)):
            return P()
    return spec


def constrain_result(x, placement: Placement, spec):
    """constrain() for a result: a dimension the devices cannot split evenly
    stays whole under explicit sharding."""
    return constrain(x, placement, _even(x.shape, placement, spec))


def matmul(x, y, placement: Placement, spec, precision=None):
    """x @ y with its result sharded as `spec` (explicit sharding needs the
    output named where both contracted dimensions are sharded); a dimension
    the devices cannot split evenly stays whole."""
    mm = functools.partial(jnp.matmul, precision=precision)
    if is_explicit(placement):
        spec = _even((x.shape[0], y.shape[-1]), placement, spec)
        return mm(x, y, out_sharding=NamedSharding(placement.mesh, spec))
    return constrain(mm(x, y), placement, spec)


def constrain(x, placement: Placement, spec):
    if placement.manual:
        return x
    sharding = NamedSharding(placement.mesh, spec)
    if is_explicit(placement):
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)
