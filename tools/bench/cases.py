"""What the benchmark measures: routines, dtypes, implementations and the one
measurement (Task) that names a routine, a problem and an implementation."""

from __future__ import annotations

import dataclasses
from typing import Any

ROUTINES = ("potrs", "lu", "potri", "syevd")
DTYPES = ("float32", "float64", "complex64", "complex128")
ITEMSIZE = {"float32": 4, "float64": 8, "complex64": 8, "complex128": 16}
DEFAULT_SIZES = (1024, 4096, 8192, 16384, 32768)
DISPATCH_NAME = {"lu": "getrf"}  # jaxmg's name for a routine in its engine choice

AUTO, MG, MG_JIT, MP = "jaxmg (auto)", "jaxmg (mg)", "jaxmg (mg, jit)", "jaxmg (mp)"
MIXED = "jaxmg (mixed)"
NATIVE, NATIVE_INV, PEER = "jax native", "jax native inv", "JAXMg 0.0.8"
OURS_IMPLS = (AUTO, MG, MG_JIT, MP, MIXED, NATIVE, NATIVE_INV)
TABLE_IMPLS = (AUTO, MG, MP, MIXED, NATIVE, NATIVE_INV, PEER)
ONE_DEVICE_IMPLS = (NATIVE, NATIVE_INV)  # JAX's solvers: measured once, on the first device
BACKEND = {AUTO: "auto", MG: "jaxmg", MG_JIT: "jaxmg", MP: "mp", MIXED: "auto"}  # jaxmg's backend=
IMPL_NAMES = {"auto": AUTO, "mg": MG, "mg-jit": MG_JIT, "mp": MP, "mixed": MIXED, "native": NATIVE,
              "native-inv": NATIVE_INV, "peer": PEER}

PEER_ROUTINES = ("potrs", "potri", "syevd")  # JAXMg 0.0.8 has no LU
MP_ROUTINES = ("potrs", "lu", "syevd")  # backend="mp" (cuSOLVERMp) has no potri
# The solves: the only routines with a prescribed condition number (--conds) and
# a mixed-precision row; assume_a for jaxmg.solve.
ASSUME_A = {"potrs": "pos", "lu": "gen"}
CONDITIONED_ROUTINES = MIXED_ROUTINES = tuple(ASSUME_A)

OVERHEAD_N = 1024  # --per-call-overhead's size
ROTATE_MAX_N = 16384  # above this, one input matrix is reused across repeats


@dataclasses.dataclass(frozen=True)
class Task:
    """One measurement: an implementation of a routine on one problem."""

    id: int
    routine: str
    dtype: str
    n: int
    devices: int  # devices the implementation uses (1 for jax native)
    impl: str
    grid: str | None = None  # "RxC" with --grids: A in blocks P("r", "c") over an R x C mesh
    cond: float | None = None  # with --conds: A's prescribed 2-norm condition number


def routine_has(impl: str, routine: str) -> bool:
    """Whether `impl` has this routine at all (the table says n/a where not)."""
    if impl == PEER:
        return routine in PEER_ROUTINES
    if impl == MP:
        return routine in MP_ROUTINES
    if impl == MIXED:
        return routine in MIXED_ROUTINES
    if impl == NATIVE_INV:
        return routine == "potri"
    return True


def conds_of(routine: str, conds: list[float] | None) -> list[float | None]:
    """The condition numbers a routine is measured at: None = the default matrices."""
    return list(conds) if conds and routine in CONDITIONED_ROUTINES else [None]


def grid_shape(grid: str) -> tuple[int, int]:
    r, c = grid.lower().split("x")
    return int(r), int(c)


def unit_name(d: int, grid: str | None) -> str:
    return grid or f"{d}dev"


def record_key(r: dict[str, Any]) -> tuple:
    """What identifies a measurement across sittings (a task or a record)."""
    return r["routine"], r["dtype"], r["n"], r["devices"], r["impl"], r.get("grid"), r.get("cond")


def series_key(task: Task) -> tuple:
    """One implementation's measurements across N (what --single-call-over predicts from)."""
    return task.routine, task.dtype, task.impl, task.devices, task.grid, task.cond


def task_record(task: Task) -> dict[str, Any]:
    """A task as the start of its record: grid and cond only where set."""
    record = dataclasses.asdict(task)
    for key in ("grid", "cond"):
        if record[key] is None:
            del record[key]
    return record


def format_cond(cond: float) -> str:
    """10 -> "10", 10000 -> "1e4", 1e8 -> "1e8"; others as %g."""
    mantissa, exponent = f"{cond:e}".split("e")
    if float(mantissa) == 1 and int(exponent) >= 3:
        return f"1e{int(exponent)}"
    return f"{cond:g}"
