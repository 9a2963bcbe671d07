"""Factors as pytrees whose static part (the layout) compares as traced.

A factor of a concrete matrix holds its concrete mesh, one of the same
matrix traced holds the mesh's abstract form (or none, on one device); the
two meet where lax.cond branches and loop carries mix a factor of a closed-
over array with one of a traced array, and JAX requires their pytree
structures equal. So the static parts compare by their traced form, and
also by their concrete meshes where both have one: a jit trace made for a
factor on some devices is not reused for one on others (it names their
mesh; across processes the engines need the devices)."""

from __future__ import annotations

import functools

import jax
from jax.sharding import Mesh


class _Static:
    """The meta fields' values (the layout first) and their traced form,
    which hashing reads and equality too, with the concrete meshes where
    both sides have one."""

    __slots__ = ("values", "traced")

    def __init__(self, values: tuple):
        self.values = values
        self.traced = (values[0].traced_form(),) + values[1:]

    def __eq__(self, other):
        if not isinstance(other, _Static) or self.traced != other.traced:
            return False
        mine, theirs = self.values[0].placement.mesh, other.values[0].placement.mesh
        return not (isinstance(mine, Mesh) and isinstance(theirs, Mesh)) or mine == theirs

    def __hash__(self):
        return hash(self.traced)

    def __repr__(self):
        return repr(self.values)


@functools.lru_cache(maxsize=1024)
def _static(values: tuple) -> _Static:
    """One _Static per value: flattening a factor (every jit call it enters)
    then costs a lookup."""
    return _Static(values)


def register(data_fields: tuple[str, ...], meta_fields: tuple[str, ...]):
    """Class decorator, as jax.tree_util.register_dataclass; meta_fields[0]
    is the layout."""

    def decorate(cls):
        keys = tuple(jax.tree_util.GetAttrKey(name) for name in data_fields)

        def flatten_with_keys(f):
            children = tuple((key, getattr(f, key.name)) for key in keys)
            return children, _static(tuple(getattr(f, name) for name in meta_fields))

        def flatten(f):
            return [getattr(f, name) for name in data_fields], _static(
                tuple(getattr(f, name) for name in meta_fields))

        def unflatten(static: _Static, children):
            values = dict(zip(meta_fields, static.values))
            return cls(**dict(zip(data_fields, children)), **values)

        jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
        return cls

    return decorate
