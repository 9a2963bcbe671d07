"""How each implementation is called on a problem's inputs and how its result
is checked: jaxmg (auto, mg, mg in jit, mp, mixed), JAX's own solvers, and
JAXMg 0.0.8."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

from . import checks, internals
from .cases import ASSUME_A, BACKEND, MG_JIT, MIXED, MP, NATIVE, NATIVE_INV, PEER, Task
from .errors import Unsupported
from .inputs import Devices, Inputs


@dataclasses.dataclass
class Impl:
    """How to run one implementation: fresh arguments for input k, the call, its
    check, and (for the solves at a prescribed condition number) the figures
    recorded beside the residual: backward error, refinement iterations, fallback."""

    prepare: Callable[[int], tuple[tuple, float | None]]
    call: Callable[..., Any]
    residual: Callable[[int, Any], float]
    extras: Callable[[int, Any], dict[str, Any]] | None = None
    engine: str | None = None
    tile: int | None = None
    note: str | None = None


def build(task: Task, inputs: Inputs, devices: Devices, settings: dict[str, Any], lib) -> Impl:
    if task.impl in (NATIVE, NATIVE_INV):
        return native(task, inputs, devices)
    if task.impl == PEER:
        return peer(task, inputs, settings, lib)
    if task.impl == MIXED:
        return mixed(task, inputs, settings, lib)
    return ours(task, inputs, settings, lib)


def _solution_extras(pair_of: Callable[[int], tuple], solution: Callable[[Any], Any]):
    """extras: the backward error of the solve's x, in float64."""
    def extras(k: int, out) -> dict[str, Any]:
        a, b = pair_of(k)
        return {"backward_error": checks.backward_error(a, b, solution(out))}

    return extras


def ours(task: Task, inputs: Inputs, settings: dict[str, Any], jaxmg) -> Impl:
    import jax

    backend = BACKEND[task.impl]
    # backend="mp": tile_size only bounds cuSOLVERMp's block; None = the library's default.
    tile = settings.get("mp_tile") if task.impl == MP else settings["tile"]
    kw: dict[str, Any] = {"backend": backend}
    if tile is not None:
        kw["tile_size"] = tile
    donate = bool(settings.get("donate")) and task.impl != MG_JIT
    if donate:
        kw["donate"] = True
    if task.impl == MG_JIT:
        kw.update(mesh=inputs.sharding.mesh, spec=inputs.sharding.spec)
    if task.routine == "potrs":
        fn = lambda a, b: jaxmg.potrs(a, b, **kw)  # noqa: E731
    elif task.routine == "lu":
        fn = lambda a, b: jaxmg.lu_solve(jaxmg.lu_factor(a, **kw), b)  # noqa: E731
    elif task.routine == "potri":
        fn = lambda a, b: jaxmg.potri(a, **kw)  # noqa: E731
    else:
        fn = lambda a, b: jaxmg.syevd(a, **kw)  # noqa: E731
    if task.impl == MG_JIT:
        fn = jax.jit(fn)
    engine, effective_tile = internals.engine_of(task.routine, task.n, inputs[0][0], tile, backend)
    pair_of = (lambda k: inputs.live(k)[0]) if donate else (lambda k: inputs[k])
    return Impl(
        prepare=(lambda k: inputs.live(k)) if donate else (lambda k: (inputs[k], None)),
        call=fn,
        residual=lambda k, out: checks.check(task.routine, pair_of(k), out),
        extras=_solution_extras(pair_of, lambda out: out) if task.cond is not None else None,
        engine=engine,
        tile=effective_tile,
        note="donate=True: A is rebuilt between calls (not timed)" if donate else None,
    )


# The fields of jaxmg.solve's info (return_info=True) and their names in a record.
REPORTED = {"iterations": "iterations", "fallback": "fallback", "info": "solver_info",
            "backward_error": "reported_backward_error"}


def mixed(task: Task, inputs: Inputs, settings: dict[str, Any], jaxmg) -> Impl:
    """jaxmg.solve(a, b, assume_a=..., precision="mixed", return_info=True): a
    lower-precision factorisation refined to FP64 accuracy. Skipped, with the
    library's own message, where jaxmg.solve does not take these options."""
    kw: dict[str, Any] = {"assume_a": ASSUME_A[task.routine], "precision": "mixed",
                          "return_info": True}  # its panel width is its own: no tile_size

    def call(a, b):
        try:
            return jaxmg.solve(a, b, **kw)
        except (TypeError, ValueError) as exc:
            text = str(exc)
            if "precision" in text or "return_info" in text:
                raise Unsupported("jaxmg.solve does not take precision=\"mixed\", return_info=True: "
                                  f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:240]) from None
            raise

    def extras(k: int, out) -> dict[str, Any]:
        import numpy as np

        x, info = out
        a, b = inputs[k]
        found = {"backward_error": checks.backward_error(a, b, x)}
        for field, name in REPORTED.items():
            value = getattr(info, field, None)
            if value is not None:
                value = np.asarray(value)
                found[name] = value.item() if value.size == 1 else value.tolist()
        return found

    engine, tile = internals.engine_of(task.routine, task.n, inputs[0][0], settings["tile"], "auto")
    return Impl(
        prepare=lambda k: (inputs[k], None),
        call=call,
        residual=lambda k, out: checks.check(task.routine, inputs[k], out[0]),
        extras=extras,
        engine=engine,
        tile=tile,
    )


def native(task: Task, inputs: Inputs, devices: Devices) -> Impl:
    """JAX's own solver on the first device, jitted, on copies of the inputs there."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    device = devices.devices[0]
    one, _ = devices.memory(1)
    matrix = task.n * task.n * np.dtype(task.dtype).itemsize
    # One device holds the copies: rotate only where they leave room to work.
    count = len(inputs) if (len(inputs) + 3) * matrix <= 0.9 * one else 1
    target = device
    if jax.sharding.AxisType.Explicit in inputs[0][0].sharding.mesh.axis_types:
        # A's type keeps an explicit mesh's sharding through device_put(x, device).
        target = NamedSharding(Mesh(np.array([device]), ("x",)), P())
    local = [tuple(jax.device_put(x, target) for x in inputs[k]) for k in range(count)]
    if task.routine == "potrs":
        fn = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b))
    elif task.routine == "lu":
        fn = jax.jit(lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b))
    elif task.routine == "potri" and task.impl == NATIVE:
        fn = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), jnp.eye(a.shape[0], dtype=a.dtype)))
    elif task.routine == "potri":
        fn = jax.jit(lambda a, b: jnp.linalg.inv(a))
    else:
        fn = jax.jit(lambda a, b: jnp.linalg.eigh(a))
    pair_of = lambda k: local[k % count]  # noqa: E731
    return Impl(
        prepare=lambda k: (pair_of(k), None),
        call=fn,
        residual=lambda k, out: checks.check(task.routine, pair_of(k), out),
        extras=_solution_extras(pair_of, lambda out: out) if task.cond is not None else None,
    )


def peer(task: Task, inputs: Inputs, settings: dict[str, Any], jaxmg_peer) -> Impl:
    """JAXMg 0.0.8: positional (a, [b,] T_A, mesh, spec); it donates its inputs."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    t_a = max(1, min(settings["tile"], task.n // task.devices))
    copy = jax.jit(lambda a, b: (jnp.copy(a), jnp.copy(b)))
    # Some JAXMg versions take potrs's specs as (spec_a, spec_b): tried second.
    mesh = inputs.sharding.mesh
    spec_choices = [inputs.sharding.spec, (inputs.sharding.spec, P(None, None))]
    state = {"spec": None}

    def call_with(spec, a, b):
        if task.routine == "potrs":
            return jaxmg_peer.potrs(a, b, t_a, mesh, spec)
        if task.routine == "potri":
            return jaxmg_peer.potri(a, t_a, mesh, spec)
        return jaxmg_peer.syevd(a, t_a, mesh, spec)

    def call(a, b):
        if state["spec"] is not None:
            return call_with(state["spec"], a, b)
        try:
            out = call_with(spec_choices[0], a, b)
            state["spec"] = spec_choices[0]
        except (AssertionError, AttributeError, TypeError, ValueError) as first:
            if task.routine != "potrs":
                raise
            try:
                out = call_with(spec_choices[1], a, b)
            except Exception:
                raise first from None
            state["spec"] = spec_choices[1]
        return out

    def prepare(k):
        if settings.get("donate"):  # no room for a copy: rebuild A instead
            (a, b), seconds = inputs.live(k)
            return (a, jax.block_until_ready(jnp.copy(b))), seconds
        start = time.perf_counter()
        fresh = jax.block_until_ready(copy(*inputs[k]))
        return fresh, time.perf_counter() - start

    def normalise(out):
        if task.routine == "syevd":
            return out[0], out[1]
        return out[0] if isinstance(out, (tuple, list)) else out

    pair_of = lambda k: inputs.live(k)[0]  # noqa: E731
    impl = Impl(
        prepare=prepare,
        call=lambda a, b: normalise(call(a, b)),
        residual=lambda k, out: peer_residual(task, pair_of(k), out, impl),
        extras=_solution_extras(pair_of, lambda out: out) if task.cond is not None else None,
        tile=t_a,
        note="time excludes the fresh input copy each call needs (copy_ms)",
    )
    return impl


def peer_residual(task: Task, pair: tuple, out, impl: Impl) -> float:
    """As `checks.check`, but a peer whose V holds eigenvectors as rows is accepted too."""
    value = checks.check(task.routine, pair, out)
    if task.routine == "syevd" and not value < checks.tolerance(task.n, pair[0].dtype):
        as_rows = checks.check_syevd(pair[0], out[0], out[1], vectors_in_columns=False)
        if as_rows < value or math.isnan(value):
            remark = "eigenvectors returned as rows of V"
            if remark not in (impl.note or ""):
                impl.note = f"{impl.note}; {remark}" if impl.note else remark
            return as_rows
    return value
