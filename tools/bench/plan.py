"""Which measurements a run makes, in what order, grouped by worker."""

from __future__ import annotations

import argparse
import itertools

from .cases import (AUTO, MG, MG_JIT, MIXED, MP, NATIVE, NATIVE_INV, OVERHEAD_N, PEER, Task,
                    conds_of, routine_has)


def wanted(args: argparse.Namespace, impl: str) -> bool:
    return not args.impls or impl in args.impls


def mixed_wanted(args: argparse.Namespace) -> bool:
    """jaxmg (mixed) runs with --conds, or when --impls names it."""
    return bool(getattr(args, "conds", None)) or bool(args.impls and MIXED in args.impls)


def problems(args: argparse.Namespace):
    """(routine, dtype, n, cond) in the order they run and appear in the table."""
    for routine, dtype, n in itertools.product(args.routines, args.dtypes, args.sizes):
        for cond in conds_of(routine, getattr(args, "conds", None)):
            yield routine, dtype, n, cond


def plan_tasks(args: argparse.Namespace, units: list[tuple[int, str | None]],
               visible: int) -> list[tuple[str, int, str | None, list[Task]]]:
    """Tasks in the order they run, grouped by worker: (kind, devices, grid, tasks).
    units: (device count, None) per --devices count, or (R*C, "RxC") per --grids grid."""
    ids = itertools.count(1)
    plan = []
    native_unit = next((u for u in units if u[0] <= visible), None)
    for d, grid in units:
        ours: list[Task] = []
        peer: list[Task] = []
        for routine, dtype, n, cond in problems(args):
            impls = [AUTO, MG]
            if args.mp and routine_has(MP, routine):
                impls.append(MP)
            if mixed_wanted(args) and routine_has(MIXED, routine):
                impls.append(MIXED)
            if args.per_call_overhead and n == OVERHEAD_N:
                impls.append(MG_JIT)
            for impl in impls:
                if wanted(args, impl):
                    ours.append(Task(next(ids), routine, dtype, n, d, impl, grid, cond))
            if (d, grid) == native_unit:  # jax native is one-device: measured once
                for impl in (NATIVE, NATIVE_INV) if routine == "potri" else (NATIVE,):
                    if wanted(args, impl):
                        ours.append(Task(next(ids), routine, dtype, n, 1, impl, None, cond))
        if ours:
            plan.append(("ours", d, grid, ours))
        if args.peer_path and wanted(args, PEER):
            for routine, dtype, n, cond in problems(args):
                if routine_has(PEER, routine):
                    peer.append(Task(next(ids), routine, dtype, n, d, PEER, grid, cond))
            if peer:
                plan.append(("peer", d, grid, peer))
    return plan
