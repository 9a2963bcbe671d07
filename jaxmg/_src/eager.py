"""The public routines' entry: host inputs beside an explicit mesh are put
on it, and eager calls over several CPU devices of this process return their
results ready.

An explicit mesh (jax.make_mesh's default axis types) types every array it
holds by its sharding, and the types of a call's operands must agree: a NumPy
or one-device input beside `mesh=` or `jax.set_mesh` would meet the mesh's
arrays inside the routine untyped. It is put on the mesh, replicated, first,
as an array of that mesh would be; jaxmg lays its rows out from there.

XLA:CPU runs every device's part of a program on one pool of
max(cores, devices) threads, and each device's launch of a program runs
there too, blocking while that device has 32 computations in flight. A jaxmg
call needs the parts of all its devices running at once (they meet in the
rendezvous), so calls dispatched without waiting fill the queues until
blocked launches hold the threads the call's last devices need, and the call
stalls until its timeout (XLA's own psum aborts the process the same way).
Waiting for each eager call keeps at most one such call in flight per Python
thread. A jitted program holding jaxmg calls is dispatched by JAX alone: it
needs a pool of two threads per device, which jaxmg asks for (PJRT_NPROC)
when it is imported before JAX starts its CPU devices."""

from __future__ import annotations

import functools
import inspect
import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from jaxmg._src import numpy_rules, placement


def returns_ready_on_cpus(routine):
    """Wraps a public routine: host inputs are put on an explicit mesh given
    as `mesh=` or by jax.set_mesh (see above); when its results are arrays
    (not tracers) on several CPU devices of this process, it returns once
    they are computed, raising the runtime's error of a failed call there."""

    signature = inspect.signature(routine)
    first = next(iter(signature.parameters))

    @functools.wraps(routine)
    @numpy_rules.default_rules
    def call(*args, **kwargs):
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        layout = _names_a_layout(args, kwargs)
        traced = any(isinstance(x, jax.core.Tracer) for x in leaves)
        committed, deleted = [], False
        for x in leaves:
            if placement.concrete(x):
                if x.is_deleted():
                    deleted = True
                elif x.committed:
                    committed.append(x)
        if deleted:
            _name_the_deleted(signature, args, kwargs)
        if committed and not layout and placement.context_concrete_mesh() is None:
            # An unplaced matrix (NumPy, jnp.asarray's) goes where a committed
            # operand lies, as jit moves it: a NumPy a beside a sharded b
            # solves on b's devices. (Under jax.set_mesh the mesh decides.)
            args, kwargs = _matrix_beside(first, args, kwargs, committed[0])
        if traced or len({frozenset(x.sharding.device_set) for x in committed}) > 1:
            _check_devices_agree(routine.__name__, signature, args, kwargs)
        if isinstance(kwargs.get("mesh"), Mesh) and not traced:
            args, kwargs = _onto_given_mesh(first, args, kwargs, kwargs["mesh"])
        mesh = _explicit_mesh(kwargs.get("mesh"))
        if mesh is not None and _eager_transform_of_host_inputs(mesh, args, kwargs):
            kwargs["mesh"] = _with_auto_axes(mesh)
            mesh = None
        if mesh is not None:
            onto = functools.partial(_onto, mesh=mesh)
            args = tuple(onto(x) for x in args)
            kwargs = {k: v if k == "mesh" else onto(v) for k, v in kwargs.items()}
        out = routine(*args, **kwargs)
        if not layout:
            out = _replicated_where_operands_are(out, args, kwargs)
        if not (layout or committed or traced):
            out = _uncommitted_results(out)
        if any(_on_cpus_of_this_process(leaf) for leaf in jax.tree_util.tree_leaves(out)):
            jax.block_until_ready(out)
        return out

    return call


def _matrix_beside(first, args, kwargs, other):
    """The matrix (the routine's first parameter, positional or named; or a
    factor tuple such as jax.scipy's (lu, piv)) put beside `other` where it
    is unplaced."""
    if args:
        return (_beside(args[0], other),) + args[1:], kwargs
    if first in kwargs:
        return args, {**kwargs, first: _beside(kwargs[first], other)}
    return args, kwargs


def _beside(x, other):
    if type(x) is tuple and all(placement.unplaced(e) or not isinstance(e, (jax.Array, np.ndarray))
                                for e in x):
        return tuple(placement.beside(e, other) for e in x)
    return placement.beside(x, other)


def _onto_given_mesh(first, args, kwargs, mesh: Mesh):
    """Arrays that lie on mesh='s devices as another mesh of them (other axes,
    another order) moved onto mesh=, whose programs would otherwise meet
    operands of two meshes: the matrix (the first parameter) laid out by
    spec=, other arrays as onto_mesh moves them."""
    spec = kwargs.get("spec")

    def move(x, matrix: bool):
        if type(x) is tuple:
            return tuple(move(e, matrix) for e in x)
        return onto_mesh(x, mesh, spec if matrix and isinstance(spec, P) else None)

    args = tuple(move(x, i == 0) for i, x in enumerate(args))
    kwargs = {k: v if k in ("mesh", "spec") else move(v, k == first) for k, v in kwargs.items()}
    return args, kwargs


def onto_mesh(x, mesh, spec=None):
    """x moved onto `mesh` where it is a concrete matrix or vector on the same
    devices as another mesh of them (a jitted program takes operands of one
    mesh): laid out by `spec`, else with its rows over the whole mesh where
    they were sharded, else replicated. Anything else as it is."""
    if not (isinstance(mesh, Mesh) and placement.concrete(x)
            and isinstance(x.sharding, NamedSharding) and x.ndim in (1, 2)
            and x.sharding.mesh != mesh and set(x.sharding.device_set) == set(mesh.devices.flat)):
        return x
    if spec is None and x.sharding.spec and x.sharding.spec[0] is not None:
        spec = P(placement.rows_over_all(mesh), *([None] * (x.ndim - 1)))
    return jax.device_put(x, NamedSharding(mesh, P() if spec is None else spec))


def _bound(signature, args, kwargs) -> dict:
    """The call's arguments by name. Where they do not bind (JAXMg's
    positional forms, such as potrs(a, b, T_A, mesh, in_specs), which the
    routine takes itself), the leading ones by the names of its positional
    parameters and the rest by position, so that they are still checked."""
    try:
        return signature.bind(*args, **kwargs).arguments
    except TypeError:
        names = [p.name for p in signature.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        named = {names[i] if i < len(names) else f"argument {i + 1}": x
                 for i, x in enumerate(args)}
        return {**named, **kwargs}


def _name_the_deleted(signature, args, kwargs):
    """Refuses an argument that a call with donate=True deleted, by name,
    before anything reads it (JAX's own error names no argument)."""
    for name, value in _bound(signature, args, kwargs).items():
        for leaf in jax.tree_util.tree_leaves(value):
            placement.check_alive(leaf, name)


def _check_devices_agree(name, signature, args, kwargs):
    placement.check_devices_agree(name, [(k, v) for k, v in _bound(signature, args, kwargs).items()
                                         if k not in ("mesh", "spec")])


def _uncommitted_results(out):
    """out's arrays uncommitted, for a call on operands none of which is
    committed (NumPy inputs, jnp.asarray's) that names no layout, outside a
    mesh context: JAX's results of such inputs are uncommitted, so code
    after the call may combine them with arrays on other devices, and jit
    moves them there. jaxmg's one-device programs commit their results;
    factors (cho_factor's, lu_factor's) keep the devices their solves read."""
    leaves = _result_arrays(out)
    if (leaves is None or not all(placement.concrete(x) for x in leaves)
            or placement.context_concrete_mesh()):
        return out
    return _rebuilt(out, tuple(_uncommitted(x) for x in leaves))


def _uncommitted(x):
    if not x.committed or len(x.sharding.device_set) != 1:
        return x
    # No public way to drop a commitment without a copy. JAX's own results
    # lie on the device itself, not on a one-device mesh, whose name jit
    # would then find beside other meshes.
    from jax._src import array
    aval = jax.core.ShapedArray(x.shape, x.dtype, weak_type=x.aval.weak_type)
    return array.ArrayImpl(aval, _on_device(next(iter(x.sharding.device_set))), x._arrays,
                           committed=False, _skip_checks=True)


@functools.lru_cache(maxsize=64)
def _on_device(device):
    return jax.sharding.SingleDeviceSharding(device)


def _names_a_layout(args, kwargs) -> bool:
    """mesh= or spec= given, or a Mesh or PartitionSpec among the positional
    arguments (JAXMg's call forms pass them so)."""
    given = [kwargs.get("mesh"), kwargs.get("spec"), *args]
    return any(isinstance(x, (Mesh, P)) for x in given)


def _replicated_where_operands_are(out, args, kwargs):
    """out, each array replicated where every operand is replicated on
    explicit mesh axes (the caller checks the call names no mesh or spec):
    JAX types such results replicated, and code written for JAX relies on
    it after the call (indexing, slicing, dynamic slices), where jaxmg's
    distributed results would come typed sharded. A call that names its
    mesh or spec asks for jaxmg's layout and keeps it; factors
    (cho_factor's, lu_factor's) keep the layout their solves read."""
    leaves = _result_arrays(out)
    if leaves is None or not _replicated_operands(args, kwargs):
        return out
    return _rebuilt(out, tuple(_replicated(x) for x in leaves))


def _result_arrays(out):
    """The arrays of a result that is an array, or a tuple or NamedTuple of
    arrays (not a factor object); None for any other result."""
    if isinstance(out, jax.Array):
        return (out,)
    if type(out) is tuple or _named_tuple(out):
        return tuple(out) if all(isinstance(x, jax.Array) for x in out) else None
    return None


def _rebuilt(out, leaves):
    """A result of out's form holding `leaves` instead."""
    if isinstance(out, jax.Array):
        return leaves[0]
    return type(out)(*leaves) if _named_tuple(out) else leaves


def _named_tuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _replicated_operands(args, kwargs) -> bool:
    """Every array operand typed replicated on explicit axes (at least one;
    under vmap, the whole batch replicated), outside shard_map."""
    operands = (args, {k: v for k, v in kwargs.items() if k not in ("mesh", "spec")})
    arrays = [x for x in jax.tree_util.tree_leaves(operands)
              if isinstance(x, jax.Array) and x.ndim > 0]
    if not arrays or placement.inside_shard_map():
        return False
    for x in arrays:
        typed = placement.explicit_spec(placement.batched_value(x))
        if typed is None or any(e is not None for e in typed[1]):
            return False
    return True


def _replicated(x):
    typed = placement.explicit_spec(x)
    if typed is None or all(e is None for e in typed[1]):
        return x
    return jax.sharding.reshard(x, NamedSharding(typed[0], P()))


def one_program(*static_argnames, when=None):
    """Wraps a routine made of several programs (jaxmg's solvers and the
    steps around them): called eagerly on a concrete matrix (its first
    argument), it runs as one jitted program, as JAX's linalg functions do,
    so that a new shape compiles one program, not one per step, and a call
    dispatches once. The matrix's placement is read first, with an eager
    call's checks, and handed to the program as mesh= and spec=: traced on
    Auto axes, the matrix would say nothing of where it lies. A NumPy
    matrix is put on the default device first, as jnp would. Traced
    arguments, batches and calls that `when` (of the bound arguments)
    refuses run step by step. static_argnames: the routine's options other
    than mesh, spec and backend. It runs inside returns_ready_on_cpus's call
    (the public routine's entry), which refused deleted arguments."""

    statics = tuple(static_argnames) + ("mesh", "spec", "backend")

    def wrap(routine):
        signature = inspect.signature(routine)

        def typed_like_jax(*args, **kwargs):
            return _replicated_where_operands_are(routine(*args, **kwargs), args, kwargs)

        program = jax.jit(routine, static_argnames=statics)
        typed_program = jax.jit(functools.wraps(routine)(typed_like_jax),
                                static_argnames=statics)

        @functools.wraps(routine)
        def call(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:  # named as Python names a plain function's wrong call
                raise TypeError(f"jaxmg.{routine.__name__}() {e}") from None
            bound.apply_defaults()
            named = bound.arguments
            first = next(iter(named))
            if isinstance(named[first], np.ndarray) and named[first].dtype.kind in "iufc":
                named[first] = jnp.asarray(named[first])  # on the default device, as jnp's
            a = named[first]
            if not _whole(a, named, statics) or (when is not None and not when(named)):
                return routine(*args, **kwargs)
            asked = _names_a_layout(args, kwargs)
            where = placement.resolve_placement(a, named["mesh"], named["spec"])
            if where.mesh is None or where.manual:
                return routine(*args, **kwargs)
            if named["spec"] is None and placement.explicit_spec(a) is None:
                named["spec"] = P(where.axis, None)  # read as a's own spec is, inside
            named["mesh"] = where.mesh
            return (program if asked else typed_program)(*bound.args, **bound.kwargs)

        return call

    return wrap


def _whole(a, named, statics) -> bool:
    """An eager call on a concrete 2-D jax.Array (its caller refused a
    deleted one) whose other arguments are arrays, numbers or None and whose
    options are hashable."""
    if not (placement.concrete(a) and a.ndim == 2):
        return False
    try:
        hash(tuple(named[k] for k in statics if k in named))
    except TypeError:  # an option of a type the routine's checks refuse
        return False
    dynamic = [v for k, v in named.items() if k not in statics]
    return all(
        isinstance(x, (np.ndarray, np.generic, int, float, complex))
        or placement.concrete(x)
        for x in jax.tree_util.tree_leaves(dynamic[1:])
    )


def _on_cpus_of_this_process(x) -> bool:
    return placement.concrete(x) and _spans_cpus_of_this_process(x.sharding)


@functools.lru_cache(maxsize=256)
def _spans_cpus_of_this_process(sharding) -> bool:
    here = [d for d in sharding.device_set if d.process_index == jax.process_index()]
    return len(here) > 1 and all(d.platform == "cpu" for d in here)


def _explicit_mesh(mesh):
    """The mesh of the call (mesh=, else jax.set_mesh's) where one of its
    axes is explicit."""
    if not isinstance(mesh, Mesh):
        mesh = placement.context_concrete_mesh()
    if mesh is None or AxisType.Explicit not in mesh.axis_types:
        return None
    return mesh


def _eager_transform_of_host_inputs(mesh, args, kwargs) -> bool:
    """An eager grad, jvp or vmap (no jit, no jax.set_mesh) of host inputs
    with an explicit mesh=: JAX's grad seeds the cotangent of a result typed
    by an explicit mesh on one device outside a mesh context, and fails. Such
    a call runs on the mesh's devices with Auto axes; its results carry no
    type, as JAX's results of host inputs carry none."""
    if placement.context_concrete_mesh() is not None:
        return False
    leaves = [x for x in jax.tree_util.tree_leaves((args, kwargs)) if x is not mesh]
    tracers = [x for x in leaves if isinstance(x, jax.core.Tracer)]
    arrays = [x for x in leaves if getattr(x, "ndim", 0) > 0]
    return bool(tracers) and all(_over_values(x) for x in tracers) and all(map(_loose, arrays))


def _over_values(x) -> bool:
    """A tracer of an eager transformation (over values), not of a jit."""
    while isinstance(x, jax.core.Tracer):
        inner = getattr(x, "primal", getattr(x, "val", None))
        if inner is None:
            return False
        x = inner
    # under jit the innermost is no value (jit's tracer keeps a variable in .val)
    return placement.concrete(x) or isinstance(x, (np.ndarray, np.generic, int, float, complex))


def _with_auto_axes(mesh: Mesh) -> Mesh:
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def _onto(x, mesh: Mesh):
    """x replicated on mesh where it is a host array, an uncommitted
    one-device array or a traced one whose type names no mesh (jit's or
    grad's of a NumPy input); a factor's (c, lower) pair element-wise;
    anything else as it is."""
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_onto(e, mesh) for e in x)
    if not _loose(x):
        return x
    if isinstance(x, jax.core.Tracer):
        # device_put's transpose would send an eager grad's cotangent back to
        # the input's one device, committed (then jacrev's next step refuses
        # it beside the mesh's arrays); reshard's keeps it on the mesh, as
        # JAX's functions leave it.
        return jax.sharding.reshard(x, NamedSharding(mesh, P()))
    return jax.device_put(x, NamedSharding(mesh, P()))


def _loose(x) -> bool:
    """A host array, an uncommitted one-device array or a traced one whose
    type names no mesh: an input no mesh holds yet."""
    if isinstance(x, jax.core.Tracer):
        typed = getattr(jax.typeof(x), "sharding", None)
        return typed is not None and typed.mesh.empty and x.ndim > 0
    if isinstance(x, jax.Array):
        return not x.committed and len(x.sharding.device_set) == 1
    return isinstance(x, np.ndarray) and x.ndim > 0


POOL_VARIABLE = "PJRT_NPROC"


def widen_cpu_pool() -> None:
    """Sets PJRT_NPROC to two threads per CPU device (at least the cores)
    where JAX has not started its devices yet and nobody set it; several
    devices forced by XLA_FLAGS or jax_num_cpu_devices only."""
    if POOL_VARIABLE in os.environ:
        if not os.environ[POOL_VARIABLE].strip().isdigit() or int(os.environ[POOL_VARIABLE]) < 1:
            warnings.warn(f"jaxmg: {POOL_VARIABLE}={os.environ[POOL_VARIABLE]!r} is not a positive "
                          "number of threads, so XLA keeps its default CPU pool, in which jitted "
                          "jaxmg programs called in a loop without waiting can stall; set it to at "
                          "least twice the CPU devices", stacklevel=3)
        return
    if _backends_started():
        return
    devices = jax.config.jax_num_cpu_devices
    if devices < 1:
        forced = re.search(r"--xla_force_host_platform_device_count=(\d+)",
                           os.environ.get("XLA_FLAGS", ""))
        devices = int(forced.group(1)) if forced else 1
    if devices > 1:
        os.environ[POOL_VARIABLE] = str(max(len(os.sched_getaffinity(0)), 2 * devices))


def _backends_started() -> bool:
    from jax._src import xla_bridge

    return bool(getattr(xla_bridge, "_backends", None))
