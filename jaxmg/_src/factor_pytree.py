"""Factors as pytrees whose static part (the layout) is keyed as traced.

A factor of a concrete matrix holds its concrete mesh, one of the same
matrix traced holds the mesh's abstract form (or none, on one device); the
two meet where lax.cond branches and loop carries mix a factor of a closed-
over array with one of a traced array, and JAX requires their pytree
structures equal. So the static part compares by the layout's traced form,
and a factor rebuilt around traced arrays takes that form: no trace keeps
devices that its arrays' shardings do not say, and one trace serves factors
on any devices of the same mesh shape. Across processes the engines need
the mesh's devices under jit too: there the layout itself is the key.

A factor rebuilt around concrete arrays whose layout names a mesh by shape
only (one that came out of a jit, a lax.cond or a loop) takes the arrays'
own mesh again, so that it finds its devices after it leaves them
(jax.device_get, pickling)."""

from __future__ import annotations

import functools

import jax
from jax.sharding import AbstractMesh, NamedSharding

from jaxmg._src.engines import base
from jaxmg._src.placement import Placement, spans_processes, traced_form


class _Static:
    """The meta fields' values (the layout first) and the key that equality
    and hashing read: the values with the layout as a trace keeps it."""

    __slots__ = ("values", "key")

    def __init__(self, values: tuple):
        self.values = values
        self.key = (_as_traced(values[0]),) + values[1:]

    def __eq__(self, other):
        return isinstance(other, _Static) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return repr(self.values)


def _as_traced(layout: base.Layout) -> base.Layout:
    if spans_processes(layout.placement):
        return layout
    return base.layout(traced_form(layout.placement), layout.n, layout.tile, layout.engine)


@functools.lru_cache(maxsize=1024)
def _static(values: tuple) -> _Static:
    """One _Static per value: flattening a factor (every jit call it enters)
    then costs a lookup."""
    return _Static(values)


def _with_mesh_of(layout: base.Layout, main) -> base.Layout:
    """layout on the concrete mesh of `main` (the factor's leading array)
    where the layout names that mesh by shape only."""
    placement = layout.placement
    if not isinstance(placement.mesh, AbstractMesh) or placement.manual:
        return layout
    sharding = getattr(main, "sharding", None)
    if not isinstance(sharding, NamedSharding) or (
            sharding.mesh.abstract_mesh != placement.mesh):
        return layout
    return base.layout(Placement(sharding.mesh, placement.axis, placement.manual),
                       layout.n, layout.tile, layout.engine)


def register(data_fields: tuple[str, ...], meta_fields: tuple[str, ...]):
    """Class decorator, as jax.tree_util.register_dataclass; meta_fields[0]
    is the layout."""

    def decorate(cls):
        keys = tuple(jax.tree_util.GetAttrKey(name) for name in data_fields)

        def static(f):
            return _static(tuple(getattr(f, name) for name in meta_fields))

        def flatten_with_keys(f):
            return tuple((key, getattr(f, key.name)) for key in keys), static(f)

        def flatten(f):
            return [getattr(f, name) for name in data_fields], static(f)

        def unflatten(static: _Static, children):
            if any(isinstance(x, jax.core.Tracer) for x in children):
                values = static.key
            else:
                layout = static.values[0]
                if isinstance(children[0], jax.Array):
                    layout = _with_mesh_of(layout, children[0])
                values = (layout,) + static.values[1:]
            return cls(**dict(zip(data_fields, children)), **dict(zip(meta_fields, values)))

        jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
        return cls

    return decorate
