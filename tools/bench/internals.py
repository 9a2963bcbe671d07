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
        from jaxmg._src import dispatch, distribution as dist

        placement = dist.resolve_placement(a, None, None)
        engine = dispatch.choose(DISPATCH_NAME.get(routine, routine), n, placement, backend)
        if engine == "mp":
            from jaxmg._src import mp

            return engine, mp.block_size(n, placement, tile)
        return engine, dist.choose_tile(n, placement.n_devices, tile) if engine == "jaxmg" else None
    except Exception:  # private API: only for the report
        return None, None


def default_tile(n: int, n_devices: int) -> int | None:
    """The tile jaxmg picks for a call without tile_size, or None if unknown."""
    try:
        from jaxmg._src import distribution as dist

        return dist.choose_tile(n, n_devices, None)
    except Exception:  # private API: only for the report
        return None


def potrs_program(a):
    """(engine, program, static keywords) of jaxmg.potrs(a, b) with backend="auto":
    the jitted program the eager call dispatches to, called as program(a, b, **keywords)
    (it returns (x, info)); program.lower(a, b, **keywords) gives its HLO."""
    from jaxmg._src import dispatch, distribution as dist, factors, linalg

    n = a.shape[0]
    placement = dist.resolve_placement(a, None, None)
    engine = dispatch.choose("potrs", n, placement, "auto")
    layout = factors.Layout(placement, n, dist.choose_tile(n, placement.n_devices, None), engine)
    return engine, linalg.solve_pos, {"layout": layout, "b_sharded": False, "with_info": False}
