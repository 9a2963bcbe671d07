"""Where the big operands of the mixed-precision solvers live.

On one device the algorithms slice the trailing rows they work on; with the
rows sharded over a mesh axis they keep every block column full height
(rows above the active part masked), because slicing a sharded dimension at
an offset that is not a shard boundary moves the whole slice between the
devices. Only panel-sized pieces (a diagonal block, the nb rows of a block
column) are ever gathered.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@dataclasses.dataclass(frozen=True)
class Rows:
    """One device (mesh None), or the rows sharded over `axis` of `mesh`."""

    mesh: object = None  # jax.sharding.Mesh or AbstractMesh
    axis: str | None = None

    @property
    def sharded(self) -> bool:
        return self.mesh is not None

    def start(self, offset: int) -> int:
        """The first row stored by a block column whose active rows start at
        `offset`: the offset itself on one device, 0 when sharded."""
        return 0 if self.sharded else offset

    def rows(self, x):
        """x with its first dimension sharded (a no-op on one device)."""
        return self._constrain(x, P(self.axis, *([None] * (x.ndim - 1))))

    def columns(self, x):
        """x (a matrix) with its columns sharded (a no-op on one device)."""
        return self._constrain(x, P(None, self.axis))

    def whole(self, x):
        """x replicated on every device (a no-op on one device)."""
        return self._constrain(x, P())

    def _constrain(self, x, spec):
        if not self.sharded:
            return x
        return jax.lax.with_sharding_constraint(x, spec)

    def row_product(self, x, y, *, adjoint_x: bool = False):
        """x @ y (x^H @ y) for a big row-sharded x and a small replicated y,
        replicated: the product is formed where x's rows live (or reduced
        over them), never by gathering x."""
        if not self.sharded:
            return dot(x, y, adjoint_x=adjoint_x)
        out = dot(self.rows(x), y, adjoint_x=adjoint_x)
        return self.whole(out if adjoint_x else self.rows(out))

    def transposed_product(self, x, y):
        """x^T @ y as row_product forms it: conj(x^H conj(y)) (no transposed
        copy of x)."""
        if not jnp.iscomplexobj(x):
            return self.row_product(x, y, adjoint_x=True)
        return jnp.conj(self.row_product(x, jnp.conj(y), adjoint_x=True))

    def map_rows(self, fn, x, *others):
        """fn(x, *others) computed on each device's rows of x (`others`
        replicated): for the operations XLA would otherwise compute on a
        gathered x (a triangular solve). Rows that do not divide evenly over
        the devices are left to XLA."""
        if not self.sharded or x.shape[0] % self.mesh.shape[self.axis]:
            return fn(x, *others)
        spec = P(self.axis, *([None] * (x.ndim - 1)))
        specs = (spec,) + tuple(P() for _ in others)
        mesh = jax.sharding.get_abstract_mesh()  # the context: automatic axes inside call()
        return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=spec)(x, *others)

    def row_index(self, first: int, count: int):
        """The global row numbers of `count` stored rows starting at `first`,
        as a column (count, 1), for masks."""
        return self.rows(first + jax.lax.broadcasted_iota(jnp.int32, (count, 1), 0))


def dot(x, y, *, adjoint_x: bool = False):
    """x @ y (x^H @ y) at the full precision of the operands: the GEMVs of
    the triangular sweeps."""
    if adjoint_x:
        x = jnp.conj(x) if jnp.iscomplexobj(x) else x
        dims = (((0,), (0,)), ((), ()))
    else:
        dims = (((1,), (0,)), ((), ()))
    return lax.dot_general(x, y, dims, precision=lax.Precision.HIGHEST)


def resolve(a, mesh=None, axis: str | None = None) -> Rows:
    """The placement of `a`: the given mesh (its one axis unless `axis`
    names one), else the mesh `a` is row-sharded over (its type under
    explicit sharding, or a concrete array's sharding), else one device.
    A mesh axis of one device is one device."""
    if mesh is None:
        sharding = _sharding_of(a)
        if sharding is None:
            return Rows()
        spec = tuple(sharding.spec) + (None,)
        if spec[0] is None:
            return Rows()
        if isinstance(spec[0], tuple) or (len(spec) > 2 and spec[1] is not None):
            raise ValueError(
                f"a is sharded as {sharding.spec}; the mixed-precision solvers take rows "
                'sharded over one mesh axis, P("x", None): reshard it first'
            )
        mesh, axis = sharding.mesh, spec[0]
    if axis is None:
        if len(mesh.axis_names) != 1:
            raise ValueError(
                f"mesh has axes {mesh.axis_names}; pass axis= naming the one the rows are sharded over"
            )
        axis = mesh.axis_names[0]
    if axis not in mesh.axis_names:
        raise ValueError(f"axis={axis!r} is not an axis of the mesh {mesh.axis_names}")
    if mesh.shape[axis] == 1:
        return Rows()
    abstract = getattr(mesh, "abstract_mesh", mesh)
    return Rows(abstract, axis)


def _sharding_of(a):
    try:
        sharding = jax.typeof(a).sharding
    except TypeError:
        sharding = None
    if isinstance(sharding, NamedSharding) and not sharding.mesh.empty:
        return sharding
    sharding = getattr(a, "sharding", None)  # a concrete array under auto sharding
    if isinstance(sharding, NamedSharding) and math.prod(sharding.mesh.shape.values()) > 1:
        return sharding
    return None


def call(rows: Rows, fn, out_specs, *args):
    """fn(*args) traced with `rows`' mesh in context, so that constraints
    may name bare PartitionSpecs. An explicitly sharded axis is made
    automatic inside (the algorithms place their blocks with
    with_sharding_constraint) and the results get `out_specs` (a pytree of
    PartitionSpecs matching fn's results)."""
    if not rows.sharded:
        return fn(*args)
    mesh = rows.mesh
    with jax.sharding.use_abstract_mesh(mesh):
        if dict(zip(mesh.axis_names, mesh.axis_types))[rows.axis] == AxisType.Explicit:
            return jax.sharding.auto_axes(fn, axes=rows.axis, out_sharding=out_specs)(*args)
        return fn(*args)
