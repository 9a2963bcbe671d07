"""The only place the tools read jaxmg's private names (jaxmg._src): which engine
and tile a call runs with, for the report, and the compiled program of a
potrs, for tools/small_n_overhead.py. A restructured jaxmg._src changes this
file only."""

from __future__ import annotations

from .cases import DISPATCH_NAME


def engine_of(routine: str, n: int, a, tile: int | None, backend: str) -> tuple[str | None, int | None]:
    """Which engine jaxmg runs for this call, and its tile width (for "mp":
    cuSOLVERMp's block, which `tile` only bounds); (None, None) if unknown."""
    try:
        from jaxmg._src import dispatch, placement as placement_mod

        placement = placement_mod.resolve_placement(a, None, None)
        # With the itemsize, as the library's own call passes it: auto's choice
        # depends on whether JAX's solver fits beside A.
        layout = dispatch.layout(DISPATCH_NAME.get(routine, routine), n, placement, tile, backend,
                                 a.dtype.itemsize)
        name = layout.engine.name
        return name, (layout.tile if name in ("jaxmg", "mp") else None)
    except Exception:  # private API: only for the report
        return None, None


def default_tile(n: int, n_devices: int) -> int | None:
    """The tile jaxmg picks for a call without tile_size, or None if unknown."""
    try:
        from jaxmg._src.engines import mg

        return mg.choose_tile(n, n_devices, None)
    except Exception:  # private API: only for the report
        return None


def potrs_program(a):
    """(engine, program, static keywords) of jaxmg.potrs(a, b) with backend="auto":
    the jitted program the eager call dispatches to, called as program(a, b, **keywords)
    (it returns (x, info)); program.lower(a, b, **keywords) gives its HLO."""
    from jaxmg._src import cholesky, dispatch, placement as placement_mod

    n = a.shape[0]
    placement = placement_mod.resolve_placement(a, None, None)
    layout = dispatch.layout("potrs", n, placement, None, "auto")
    return layout.engine.name, cholesky.solve_pos, {"layout": layout, "b_sharded": False,
                                                    "with_info": False}
