"""Where a call runs: the mesh and the row axis (or axes) a matrix is sharded
over, read from the arguments, the array's sharding or the context, and the
devices and platform that follow from them."""

from __future__ import annotations

import dataclasses
import functools
import math
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxmg._src import arguments, processes

@dataclasses.dataclass(frozen=True)
class Placement:
    """The devices one call runs on: `mesh`, with rows sharded over `axis`
    (one mesh axis, or a tuple of them: rows over their product, the first
    one major, as in P(("r", "c"), None)). A mesh of None is one device that
    XLA chooses: an array traced under jit with no sharding or mesh known,
    which only JAX's own solvers take (as jax.scipy.linalg would)."""

    mesh: Mesh | None
    axis: str | tuple[str, ...]
    manual: bool  # True inside the caller's shard_map: arrays are local blocks

    @property
    def axes(self) -> tuple[str, ...]:
        return self.axis if isinstance(self.axis, tuple) else (self.axis,)

    @property
    def n_devices(self) -> int:
        if self.mesh is None:
            return 1
        return math.prod(self.mesh.shape[ax] for ax in self.axes)

    @property
    def placed(self) -> bool:
        return self.mesh is not None

    def __reduce__(self):
        """Pickles a concrete mesh by its devices' ids (devices themselves do
        not pickle): a factor loaded in a process with those devices solves."""
        mesh = self.mesh
        if not isinstance(mesh, Mesh):
            return (Placement, (mesh, self.axis, self.manual))
        ids = np.vectorize(lambda d: d.id, otypes=[int])(mesh.devices)
        platform = mesh.devices.flat[0].platform
        return (_placement_from, ((platform, ids, mesh.axis_names, mesh.axis_types),
                                  self.axis, self.manual))


def off_devices(x, placement: Placement) -> bool:
    """Whether a factor's array left the devices it was made on: a host
    array (jax.device_get), or a device array elsewhere (one unpickled)."""
    if x is None or isinstance(x, jax.core.Tracer) or not isinstance(placement.mesh, Mesh):
        return False
    if not isinstance(x, jax.Array):
        return True
    return x.sharding.device_set != set(placement.mesh.devices.flat)


def back_on_devices(x, placement: Placement, row_dim: int | None):
    """A factor's array where its solves run: one that left its devices
    (off_devices) is put back, its rows (axis `row_dim`; None: replicated)
    sharded over the mesh as when it was made."""
    if not off_devices(x, placement):
        return x
    spec = [None] * np.ndim(x)
    if row_dim is not None and placement.n_devices > 1:
        spec[row_dim] = placement.axis
    return jax.device_put(x, NamedSharding(placement.mesh, P(*spec)))


def factor_on_devices(f, placement: Placement, main: str, rows: tuple[str, ...]):
    """A factor (a dataclass) whose arrays left its devices with them put
    back (back_on_devices): the fields `rows` with their rows sharded as the
    field `main`'s, `info` replicated; f itself where `main` never left."""
    leading = getattr(f, main)
    if not off_devices(leading, placement):
        return f
    row_dim = leading.ndim - 2
    moved = {field: back_on_devices(getattr(f, field), placement, row_dim) for field in rows}
    return dataclasses.replace(f, info=back_on_devices(f.info, placement, None), **moved)


def _devices_by_id(platform: str, ids):
    """The devices a pickled mesh named, in this process."""
    known = {d.id: d for d in jax.devices(platform)}
    missing = sorted(set(int(i) for i in np.ravel(ids)) - set(known))
    if missing:
        raise ValueError(
            f"jaxmg: this factor was made on {platform} devices {sorted(np.ravel(ids).tolist())}, "
            f"and this process has no device {missing[0]}; solve it where it was made, or "
            "factor the matrix again here")
    return np.vectorize(known.__getitem__, otypes=[object])(np.asarray(ids))


def _placement_from(mesh, axis, manual):
    platform, ids, axis_names, axis_types = mesh
    return Placement(Mesh(_devices_by_id(platform, ids), axis_names, axis_types=axis_types),
                     axis, manual)


UNPLACED = Placement(None, "rows", manual=False)
# An element of a batch sharded over devices along its batch axis (under
# vmap, or jaxmg's own batch dimensions): each matrix lies whole on its
# devices, so JAX's solver runs there, as jax.numpy.linalg's would.
BATCH_ELEMENT = Placement(None, "batch", manual=False)


def traced_form(placement: Placement) -> Placement:
    """The placement the same matrix has where it is traced (under jit, in
    lax.cond branches and loop bodies): its mesh abstract, the devices left
    to the arrays' shardings; UNPLACED for the one device an unsharded
    concrete matrix lies on."""
    mesh = placement.mesh
    if not isinstance(mesh, Mesh):
        return placement
    if mesh.size == 1 and mesh.axis_names == ("rows",) and placement.axis == "rows":
        return UNPLACED
    return dataclasses.replace(placement, mesh=mesh.abstract_mesh)


def check_square(a, placement: Placement, name: str = "a") -> int:
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
        raise arguments.ShapeError(f"jaxmg: {name} must be square, got shape {tuple(a.shape)} "
                                   f"(it must have shape [..., n, n]){arguments.shard_map_hint()}")
    # A symbolic order (jax.export) reaches here only on one device
    # (resolve_placement), where JAX's solver runs and takes it.
    return cols if arguments.is_symbolic(cols) else int(cols)


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
        return None  # columns only: the rows will be spread over the mesh
    if isinstance(rows, tuple):
        rows = rows[0] if len(rows) == 1 else (tuple(rows) or None)
    return rows


def _typed_sharding(x):
    """The sharding of x's type where it names a mesh; None otherwise."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    return None if mesh is None or mesh.empty else sharding


def _explicit(sharding) -> bool:
    return jax.sharding.AxisType.Explicit in sharding.mesh.axis_types


def sharding_of(x):
    """x's sharding where it is known: a concrete array's, or a tracer's
    explicit sharding type (whose mesh is then abstract: the spec is known,
    the devices are not). A tracer on axes of type Auto says nothing."""
    if isinstance(x, jax.core.Tracer):
        sharding = _typed_sharding(x)
        return sharding if sharding is not None and _explicit(sharding) else None
    return getattr(x, "sharding", None)


def explicit_spec(x):
    """(mesh, spec with one entry per dimension) where x's type is sharded on
    explicit mesh axes (the concrete mesh of a concrete array); None otherwise."""
    sharding = _typed_sharding(x)
    if sharding is None or not _explicit(sharding):
        return None
    concrete = getattr(x, "sharding", None) if not isinstance(x, jax.core.Tracer) else None
    mesh = getattr(concrete, "mesh", sharding.mesh)
    return mesh, tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))


def axis_names(entry) -> tuple:
    """The mesh axes of one spec entry (None, a name, or a tuple of names)."""
    return () if entry is None else entry if isinstance(entry, tuple) else (entry,)


@functools.lru_cache(maxsize=64)
def _single_device_mesh(device) -> Mesh:
    return Mesh(np.array([device]), ("rows",))


def _peel(x):
    """The vmap levels of eager transformation tracers over x, outermost
    first, as (batch dim, batched value), and the array under them: concrete,
    or a tracer of jit; None under a batch dim that is not an int."""
    levels = []
    for _ in range(64):
        if not isinstance(x, jax.core.Tracer):
            break
        if hasattr(x, "batch_dim") and hasattr(x, "val"):
            if not isinstance(x.batch_dim, int):
                return levels, None
            levels.append((x.batch_dim, x.val))
            x = x.val
        elif getattr(x, "primal", None) is not None:
            x = x.primal
        else:
            break  # jit's tracer
    return levels, x


def _concrete_named(x):
    """x's NamedSharding, for a concrete array that has one."""
    sharding = getattr(x, "sharding", None) if concrete(x) else None
    return sharding if isinstance(sharding, NamedSharding) else None


def _batch_entries(x, levels):
    """x's spec entries, one per dimension, then the entries of the batch axes
    that `levels` took out, innermost level first."""
    spec = _concrete_named(x).spec
    entries = list(tuple(spec) + (None,) * (x.ndim - len(spec)))
    taken = []
    for d, _ in reversed(levels):  # the innermost array carries every batch axis
        taken.append(entries.pop(d))
    return entries, taken


def _underlying_sharding(x):
    """The mesh and spec of the concrete array under eager transformation
    tracers (grad, jvp, vmap outside jit), with vmap's batch axes taken out of
    the spec; (None, None) under jit, where there is no such array."""
    levels, x = _peel(x)
    sharding = getattr(x, "sharding", None) if concrete(x) else None
    if sharding is None:
        return None, None
    if not isinstance(sharding, NamedSharding):
        if len(sharding.device_set) == 1:
            return _single_device_mesh(next(iter(sharding.device_set))), P()
        return None, None
    return sharding.mesh, P(*_batch_entries(x, levels)[0])


def batched_value(x):
    """The array vmap batches x from (eager or under jit), whose type holds
    the batch's layout too; x itself where no vmap traces it."""
    levels, base = _peel(x)
    return base if levels and base is not None else x


def whole_on_its_devices(x) -> bool:
    """Whether x lies whole where it is solved, one of many matrices: a
    device's own inside shard_map (or pmap), solved there as jax.scipy
    solves it, or an element of a batch under vmap whose batch axis is
    sharded over devices. The element's own type no longer says: the batched
    array's does (its type under explicit sharding, or the concrete array
    under eager transformations, whose spec still holds every batch axis)."""
    context = _context_mesh()
    if context is not None and context.manual_axes:
        return True
    levels, base = _peel(x)
    for d, value in levels:
        spec = getattr(sharding_of(value), "spec", None)
        if spec is not None and d < len(spec) and spec[d] is not None:
            return True
    if not levels or _concrete_named(base) is None:
        return False
    return any(entry is not None for entry in _batch_entries(base, levels)[1])


def _context_mesh():
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def inside_shard_map() -> bool:
    """Whether the call is traced inside the caller's shard_map (or pmap):
    the context's mesh has manual axes."""
    return bool(jax.sharding.get_abstract_mesh().manual_axes)


def context_concrete_mesh():
    """The concrete Mesh set with `jax.set_mesh`, also while tracing under
    jit (where jax.sharding.get_mesh refuses); None if there is none."""
    try:
        from jax._src.mesh import get_concrete_mesh

        mesh = get_concrete_mesh()
    except (ImportError, ValueError):
        return None
    return None if mesh is None or mesh.empty else mesh


def resolve_placement(a, mesh: Mesh | None, spec, name: str = "a", *,
                      row_blocks: bool = False, others=()) -> Placement:
    """Reads the mesh and row axis from the arguments, a's sharding or the
    context. Inside the caller's shard_map (or pmap) a is a device's block of
    rows where `row_blocks` (potrs, potri, syevd), else the device's own
    matrix, solved where it lies as jax.scipy solves it there. `others`: the
    operands solved with a (b), which make the call one of a batch's too
    where vmap maps them over a sharded axis (the mesh axes are the batch's)."""
    if spec is not None:
        _check_spec(spec, name)
    abstract = _context_mesh()
    if mesh is None and abstract is not None:
        _check_on_context_mesh(a, name)
    if row_blocks and abstract is not None and abstract.manual_axes:
        return _manual_placement(abstract, mesh, spec, name)
    if whole_on_its_devices(a) or any(map(whole_on_its_devices, others)):
        return BATCH_ELEMENT
    if abstract is None and (mesh is None or isinstance(mesh, Mesh)) and concrete(a):
        # Eager calls: the answer depends on the sharding alone, and working
        # it out again would be most of a small call's Python time.
        return _unless_vmap_holds_its_axes(
            _concrete_placement(a.sharding, a.committed, mesh, spec, name))
    placement = _unless_vmap_holds_its_axes(
        _placement(a, sharding_of(a), abstract, mesh, spec, name))
    _check_one_axis_type(placement)
    symbolic = [d for d in a.shape[-2:] if arguments.is_symbolic(d)]
    if placement.placed and symbolic:
        raise ValueError(
            f"jaxmg: {name} has the symbolic dimension {symbolic[0]} (jax.export), but it is "
            "spread over devices, whose engines need its matrices' concrete shape; export with a "
            "concrete matrix shape (a symbolic batch dimension works), or with the matrix on one "
            "device")
    return placement


def _unless_vmap_holds_its_axes(placement: Placement) -> Placement:
    """BATCH_ELEMENT where an enclosing jax.vmap maps a batch sharded over
    Explicit mesh axes that the rows would be spread over (a matrix closed
    over, with no batch of its own: inv(a) @ b for each b): no shard_map
    may use those axes there, so JAX's solver takes the whole matrix where
    it lies, as jax.numpy.linalg's would."""
    held = _axes_held_by_vmap()
    if held and placement.mesh is not None and not placement.manual and held & set(
            placement.axes):
        return BATCH_ELEMENT
    return placement


def _axes_held_by_vmap() -> frozenset:
    if _axis_env is None:
        return frozenset()
    return getattr(_axis_env(), "explicit_mesh_axis_names", frozenset())


try:  # JAX's record of the axes the enclosing transformations hold (jax 0.10 to 0.12)
    from jax._src.core import get_axis_env as _axis_env
except ImportError:
    _axis_env = None


def _check_on_context_mesh(a, name: str) -> None:
    """A matrix committed to devices other than those of the mesh that
    jax.set_mesh put in context is refused by name, as JAX refuses it (it
    failed inside jaxmg); uncommitted ones move onto the mesh."""
    if not concrete(a) or a.is_deleted() or not a.committed:
        return
    context = context_concrete_mesh()
    if context is None or a.sharding.device_set == set(context.devices.flat):
        return
    ids = lambda devices: sorted(d.id for d in devices)  # noqa: E731
    raise ValueError(
        f"jaxmg: {name} lives on devices {ids(a.sharding.device_set)}, but the mesh of "
        f"jax.set_mesh has devices {ids(context.devices.flat)}: put {name} on that mesh "
        f"(jax.device_put({name}, NamedSharding(mesh, P(axis, None)))), or call outside "
        "`with jax.set_mesh(mesh):`")


def _check_one_axis_type(placement: Placement) -> None:
    """The rows' mesh axes all Explicit or all Auto: JAX lays a matrix out
    over both kinds at once by neither reshard nor with_sharding_constraint."""
    if placement.mesh is None or placement.manual:
        return
    types = dict(zip(placement.mesh.axis_names, placement.mesh.axis_types))
    kinds = {types[ax] for ax in placement.axes if ax in types}
    if len(kinds) > 1:
        named = ", ".join(f"{ax!r} {types[ax].name}" for ax in placement.axes)
        raise ValueError(
            f"jaxmg: the matrix's rows would be spread over mesh axes of two types ({named}); "
            "put it on a mesh of the same devices whose axes have one type "
            "(jax.make_mesh(shape, names, axis_types=(AxisType.Explicit,) * len(names)))")


def rows_over_all(mesh):
    """The row entry of a spec spreading the rows over every device of mesh:
    its one axis of several devices, else all such axes, else its first."""
    used = tuple(ax for ax, size in mesh.shape.items() if size > 1)
    return used[0] if len(used) == 1 else (used or mesh.axis_names[0])


def _check_spec(spec, name: str) -> None:
    """spec= as NamedSharding would take it for the matrix: a PartitionSpec
    of at most its two dimensions, each mesh axis named once."""
    if not isinstance(spec, P):
        raise TypeError(f"jaxmg: spec must be a jax.sharding.PartitionSpec, got {spec!r}")
    if len(spec) > 2:
        raise ValueError(
            f"jaxmg: spec {spec} has {len(spec)} entries, but it describes one matrix {name} "
            f"(rows, columns), e.g. P('x', None); a batch's leading axes take no entries"
        )
    named = [ax for entry in spec for ax in axis_names(entry)]
    repeated = sorted({ax for ax in named if named.count(ax) > 1})
    if repeated:
        raise ValueError(f"jaxmg: spec {spec} names mesh axis {repeated[0]!r} more than once; "
                         "each axis shards at most one dimension")


def eager_key(arrays, *options):
    """A hashable key for an eager call's plan (what the checks and dispatch
    decided), or None where the plan may not be reused: a traced array, a
    mesh set in context, or a vmap holding mesh axes (the placement differs
    there: _unless_vmap_holds_its_axes)."""
    if not all(concrete(x) for x in arrays) or _context_mesh() is not None or (
            _axes_held_by_vmap()):
        return None
    for x, name in zip(arrays, ("a", "b")):
        check_alive(x, name)
    key = tuple((x.sharding, x.shape, x.dtype) for x in arrays) + options
    try:
        hash(key)
    except TypeError:  # an option of a type the checks will refuse
        return None
    return key


def check_alive(x, name: str) -> None:
    """Refuses an array that an earlier call with donate=True deleted (XLA
    would read freed memory)."""
    if concrete(x) and x.is_deleted():
        raise ValueError(
            f"jaxmg: {name} was deleted: an earlier call with donate=True took its buffer. "
            f"Pass a fresh array, or call without donate=True to keep {name}"
        )


def check_devices_agree(routine: str, named) -> None:
    """Refuses operands committed to different devices, as JAX refuses them
    in one computation, naming them and the fix: inside the routine they
    would meet under other names, or one of them on the other's mesh.
    named: (argument name, value) pairs; values may be pytrees, tracers of
    eager transformations (their arrays are read) or anything else."""
    first = None
    for name, value in named:
        for leaf in jax.tree_util.tree_leaves(value):
            x = _peel(leaf)[1] if isinstance(leaf, jax.core.Tracer) else leaf
            if not concrete(x) or x.is_deleted() or not x.committed:
                continue
            if first is None:
                first, first_name, whole = x, name, value is leaf
            elif x.sharding.device_set != first.sharding.device_set:
                ids = lambda a: sorted(d.id for d in a.sharding.device_set)  # noqa: E731
                if not whole:
                    there = (f"jax.device_put({name}, NamedSharding(mesh, P())) on the mesh "
                             f"of {first_name}'s arrays")
                elif isinstance(first.sharding, NamedSharding):  # replicated: any rank fits
                    there = (f"jax.device_put({name}, "
                             f"NamedSharding({first_name}.sharding.mesh, P()))")
                else:
                    there = f"jax.device_put({name}, {first_name}.sharding)"
                raise ValueError(
                    f"jaxmg: {routine}'s {first_name} lives on devices {ids(first)} and "
                    f"{name} on devices {ids(x)}: JAX computes with committed arrays "
                    f"only on the same devices. Put {name} where {first_name} is ({there}), "
                    "or pass it uncommitted (a NumPy array)"
                )


def unplaced(x) -> bool:
    """An array no device holds yet: a NumPy array, or an uncommitted
    array on one device (jnp.asarray's), which jit moves where it is needed."""
    if isinstance(x, np.ndarray):
        return x.ndim > 0
    return (concrete(x) and x.ndim > 0 and not x.is_deleted() and not x.committed
            and len(x.sharding.device_set) == 1)


def beside(x, other):
    """x on the devices of `other`, a concrete array committed to them, when
    x is unplaced (as jit moves such an operand): in other's layout where
    that splits x evenly, else replicated on other's mesh; x itself
    otherwise."""
    if not (concrete(other) and other.committed and unplaced(x)):
        return x
    where = other.sharding
    if isinstance(where, NamedSharding):
        spec = where.spec if np.ndim(x) == other.ndim and _splits(np.shape(x), where) else P()
        return jax.device_put(x, NamedSharding(where.mesh, spec))
    if len(where.device_set) == 1:
        return jax.device_put(x, next(iter(where.device_set)))
    return x


def _splits(shape, where: NamedSharding) -> bool:
    for size, entry in zip(shape, where.spec):
        parts = math.prod(where.mesh.shape[ax] for ax in axis_names(entry))
        if size % parts:
            return False
    return True


def concrete(x) -> bool:
    """A jax.Array with values (not traced)."""
    return isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)


@functools.lru_cache(maxsize=256)
def _concrete_placement(sharding, committed: bool, mesh, spec, name: str) -> Placement:
    placement = _placement(None, sharding, None, mesh, spec, name, committed)
    _check_one_axis_type(placement)
    return placement


def _placement(a, sharding, abstract, mesh, spec, name: str, committed=False) -> Placement:
    """`a`: the traced array, None for a concrete one (then only its sharding
    counts, and whether it is committed to its devices: XLA moves one that
    is not)."""
    given_mesh = mesh
    concrete = sharding is not None and isinstance(getattr(sharding, "mesh", None), Mesh)
    if mesh is None and concrete:
        mesh = sharding.mesh
    if spec is None and isinstance(sharding, NamedSharding) and (
            getattr(mesh, "shape", sharding.mesh.shape) == sharding.mesh.shape):
        # a's spec names a's mesh: on another mesh= (the same devices in other
        # axes) it says nothing, and a moves onto mesh= as a replicated input.
        spec = sharding.spec
    if mesh is None and not isinstance(a, jax.core.Tracer) and sharding is not None and len(
        sharding.device_set
    ) == 1:
        mesh = _single_device_mesh(next(iter(sharding.device_set)))
    if mesh is None and isinstance(abstract, jax.sharding.AbstractMesh):
        mesh = context_concrete_mesh()
    if mesh is None and isinstance(a, jax.core.Tracer):
        under_mesh, under_spec = _underlying_sharding(a)
        if under_mesh is not None:
            mesh = under_mesh
            spec = under_spec if spec is None else spec
    if mesh is None and sharding is None and not isinstance(a, jax.core.Tracer):
        # A NumPy array or Python list: JAX would put it on the default device.
        mesh = _single_device_mesh(_default_device())
    if mesh is None and isinstance(getattr(sharding, "mesh", None), jax.sharding.AbstractMesh):
        # Traced on explicit axes with no mesh in context (as jit takes JAX's
        # own functions): the type names the mesh, not its devices.
        mesh = sharding.mesh
    if mesh is None and isinstance(a, jax.core.Tracer):
        mesh = _auto_axes_mesh(a)
    if mesh is None:
        if spec is None and isinstance(a, jax.core.Tracer):
            return UNPLACED
        raise ValueError(
            f"jaxmg: cannot tell which devices {name} lives on. Pass mesh= and spec= "
            "(e.g. mesh=jax.make_mesh((n,), ('x',)), spec=P('x', None)), call under "
            "`with jax.set_mesh(mesh):`, or pass a jax.Array with a NamedSharding"
        )
    if not isinstance(mesh, (Mesh, jax.sharding.AbstractMesh)):
        raise TypeError(f"jaxmg: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if sharding is not None and committed and not isinstance(a, jax.core.Tracer):
        _check_same_devices(sharding, mesh, name)
    rows = _rows_axis(spec if spec is not None else P(), name)
    if rows is None:
        # Replicated, or sharded along the columns only (as JAX's own ops can
        # leave an intermediate): the rows are spread over every device of
        # the mesh, which costs a reshard at most.
        rows = rows_over_all(mesh)
    axes = rows if isinstance(rows, tuple) else (rows,)
    missing = [ax for ax in axes if ax not in mesh.axis_names]
    if missing and given_mesh is None and mesh.size == 1 and not isinstance(a, jax.core.Tracer):
        raise ValueError(
            f"jaxmg: spec names axis {missing[0]!r}, but {name} lies on one device and no mesh "
            f"was given; pass mesh= with spec= (e.g. mesh=jax.make_mesh((n,), "
            f"({missing[0]!r},))), or call under `with jax.set_mesh(mesh):`")
    if missing:
        raise ValueError(f"jaxmg: spec names axis {missing[0]!r}, not in the mesh axes {mesh.axis_names}")
    _check_one_process(mesh)
    others = tuple(ax for ax, size in mesh.shape.items() if ax not in axes and size > 1)
    if others:
        # Rows over some of the axes (P('x', None) on an (x, y) mesh): each
        # device's block is split further along the others, a local slice.
        rows = axes + others
    return Placement(mesh, rows, manual=False)


def _auto_axes_mesh(a):
    """The mesh of a matrix traced on mesh axes of type Auto (jit's input
    put on such a mesh): its type names the mesh, not the layout, and the
    rows are spread over it as under jax.set_mesh. None under vmap, where
    each matrix of the batch stays with JAX's solver, solved where the
    partitioner puts it."""
    if _peel(a)[0]:
        return None
    sharding = _typed_sharding(a)
    if sharding is None or any(t != jax.sharding.AxisType.Auto for t in sharding.mesh.axis_types):
        return None
    return sharding.mesh


def _check_same_devices(sharding, mesh: Mesh, name: str) -> None:
    here = set(sharding.device_set)
    wanted = set(mesh.devices.flat)
    if here != wanted:
        ids = lambda devices: sorted(d.id for d in devices)  # noqa: E731
        raise ValueError(
            f"jaxmg: {name} lives on devices {ids(here)} but mesh= has devices {ids(wanted)}; "
            f"place {name} on the mesh first (jax.device_put({name}, NamedSharding(mesh, "
            "P(axis, None)))) or leave mesh= out to use its own sharding"
        )


def _default_device():
    device = jax.config.jax_default_device
    if isinstance(device, jax.Device):
        return device
    return jax.devices(device)[0] if isinstance(device, str) else jax.devices()[0]


def spans_processes(placement: Placement) -> bool:
    """Whether the placement's devices belong to several processes. An
    abstract mesh (under jit) does not say: in a job of several processes
    it is taken to span them, the side on which nothing goes wrong."""
    mesh = placement.mesh
    if isinstance(mesh, Mesh):
        return len({d.process_index for d in mesh.devices.flat}) > 1
    return jax.process_count() > 1 and placement.n_devices > 1


def _check_one_process(mesh: Mesh) -> None:
    """Within one process jaxmg takes any of its devices; across processes,
    one device per process."""
    if not isinstance(mesh, Mesh):
        return  # an abstract mesh: its devices are this process's, as jit traces them
    devices = list(mesh.devices.flat)
    if len({d.process_index for d in devices}) > 1:
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


_PLATFORMS = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda"}


def concrete_mesh(placement: Placement):
    """The concrete Mesh of the call: given, or (inside shard_map, where only
    an AbstractMesh is visible) the one set with `jax.set_mesh`, else the one
    the enclosing shard_map was given."""
    if placement.mesh is None:
        return None
    if isinstance(placement.mesh, Mesh):
        return placement.mesh
    return context_concrete_mesh() or _enclosing_shard_map_mesh(placement.mesh)


def _enclosing_shard_map_mesh(abstract):
    """The Mesh passed to the jax.shard_map being traced, whose AbstractMesh
    is `abstract`: under jit JAX keeps it only as its staging code's local
    `mesh` (it reaches the lowering, not the context). JAXMg's routines for
    the inside of shard_map take no mesh, and the GPUs' numbers come from it.
    None where no such frame holds a mesh of abstract's axes and sizes."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "jax._src.shard_map":
            mesh = frame.f_locals.get("mesh")
            if (isinstance(mesh, Mesh) and mesh.axis_names == abstract.axis_names
                    and tuple(mesh.axis_sizes) == tuple(abstract.axis_sizes)):
                return mesh
        frame = frame.f_back
    return None


def platform_of(placement: Placement) -> str:
    mesh = concrete_mesh(placement)
    if mesh is not None:
        platform = mesh.devices.flat[0].platform
    elif placement.mesh is None:
        platform = jax.default_backend()
    else:
        device = getattr(placement.mesh, "abstract_device", None)
        platform = device.platform if device is not None else jax.default_backend()
    if platform not in _PLATFORMS:
        raise NotImplementedError(f"jaxmg: no backend for platform {platform!r} (cpu and cuda exist)")
    return _PLATFORMS[platform]


def axis_devices(placement: Placement, why: str):
    """The devices along the call's axis, in axis order."""
    mesh = concrete_mesh(placement)
    if mesh is None:
        raise ValueError(
            f"jaxmg: {why}, jaxmg needs the mesh's devices, which a call traced on an abstract "
            "mesh (under jit or shard_map) does not name: pass mesh= (the concrete "
            "jax.sharding.Mesh) or call under `with jax.set_mesh(mesh):`"
        )
    # The row axes first, in order (the first one major), as P((r, c), None) deals rows.
    axes = [mesh.axis_names.index(ax) for ax in placement.axes]
    return list(np.moveaxis(mesh.devices, axes, list(range(len(axes)))).reshape(-1))
