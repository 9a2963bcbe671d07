"""The benchmark's command line, and the settings it hands to the workers."""

from __future__ import annotations

import argparse
import pathlib
import re
from typing import Any

from .cases import DEFAULT_SIZES, DTYPES, IMPL_NAMES, MP, OVERHEAD_N, PEER, ROUTINES
from .largest import LARGEST_STEP

DESCRIPTION = "Times jaxmg's potrs, LU solve, potri and syevd against JAX's own solvers and JAXMg 0.0.8."
EPILOG = """\
examples, from the repository root after `bazel build //xla_ext:libjaxmg_ffi.so`:
  python3 tools/benchmark.py --sizes 4096 16384 --dtypes float64 --devices 1 2
  python3 tools/benchmark.py --routines potrs lu --sizes 65536 131072 --dtypes float64 --mem-fraction 0.95
  python3 tools/benchmark.py --routines potrs --largest --largest-budget 300
  python3 tools/benchmark.py --peer-path /opt/jaxmg-0.0.8
  python3 tools/benchmark.py --mp --routines potrs lu syevd --mp-tile 256
  python3 tools/benchmark.py --routines potrs syevd lu --grids 8x1 4x2 2x4 --mp --sizes 32768 65536
  python3 tools/benchmark.py --routines potrs lu --dtypes float64 --conds 10 1e4 1e6 1e8
  # CPU smoke test on two forced host devices:
  XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \\
      python3 tools/benchmark.py --sizes 256 512 --dtypes float32 --repeats 2 --out /tmp/bench
docs/benchmarks.md describes the method, the outputs and the results."""


def grid_arg(text: str) -> str:
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip().lower())
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a grid RxC such as 4x2")
    return f"{int(match[1])}x{int(match[2])}"


def cond_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a condition number (a number >= 1, such as 1e6)")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/benchmark.py", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routines", nargs="+", choices=ROUTINES, default=list(ROUTINES),
                        metavar="R", help="potrs, lu, potri and/or syevd (default: all four)")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES), metavar="N",
                        help="matrix orders (default: %(default)s)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["float32", "float64"],
                        metavar="T", help=f"{', '.join(DTYPES)} (default: float32 float64)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--devices", nargs="+", type=int, metavar="D",
                       help="device counts to run jaxmg on (default: all visible devices)")
    where.add_argument("--grids", nargs="+", type=grid_arg, metavar="RxC",
                       help="instead of device counts: R x C meshes of the first R*C devices, "
                            "A in blocks P(\"r\", \"c\") (e.g. 8x1 4x2 2x4)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls after the warm-up (default 5)")
    parser.add_argument("--tile", type=int, default=1024,
                        help="block-cyclic tile T_A for jaxmg and JAXMg (default 1024)")
    parser.add_argument("--mp", action="store_true",
                        help="also time jaxmg (mp): backend=\"mp\", cuSOLVERMp (potrs, lu, syevd; "
                             "CUDA GPUs only)")
    parser.add_argument("--mp-tile", type=int, metavar="N",
                        help="tile_size for jaxmg (mp), an upper bound on cuSOLVERMp's block "
                             "(default: none passed, the library picks its block)")
    parser.add_argument("--conds", nargs="+", type=cond_arg, metavar="C",
                        help="potrs and lu on matrices of these 2-norm condition numbers (e.g. 10 1e4 "
                             "1e6 1e8) instead of the default ones, with their float64 backward error, "
                             "and jaxmg (mixed): jaxmg.solve(..., precision=\"mixed\")")
    parser.add_argument("--peer-path", type=pathlib.Path, metavar="DIR",
                        help="where `pip install --no-deps --target DIR jaxmg==0.0.8` put JAXMg")
    parser.add_argument("--impls", nargs="+", choices=list(IMPL_NAMES), metavar="I",
                        help="time only these: " + ", ".join(IMPL_NAMES) + " (default: all that "
                             "apply; mp implies --mp, peer needs --peer-path, mixed runs by "
                             "default only with --conds)")
    parser.add_argument("--paired", action="store_true",
                        help="time jaxmg (auto) and jax native in alternation on the same inputs "
                             "(AB, BA, ...); auto/native is then the median of the pairs' ratios")
    parser.add_argument("--single-call-over", type=float, metavar="S",
                        help="make a call predicted (from the previous N, scaled by N^3) to take "
                             "over S seconds once, without a warm-up: its time includes compiling")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out: keep its measurements, make only those "
                             "missing or cut by --wall-budget, write one table of all")
    parser.add_argument("--per-call-overhead", action="store_true",
                        help=f"also time jaxmg (mg) called inside jax.jit at N={OVERHEAD_N}")
    parser.add_argument("--budget", type=float, default=60.0, metavar="S",
                        help="stop a measurement's timed calls after S seconds (default 60)")
    parser.add_argument("--task-timeout", type=float, default=1800.0, metavar="S",
                        help="kill a worker silent for S seconds (default 1800)")
    parser.add_argument("--wall-budget", type=float, metavar="S",
                        help="stop the table after S seconds in all: the measurements not yet "
                             "made are recorded as not run, and the table and JSON still written")
    parser.add_argument("--largest", action="store_true",
                        help="after the table, search the largest N potrs runs at on the most "
                             "devices (per dtype; doubling, then bisecting in steps of "
                             f"{LARGEST_STEP})")
    parser.add_argument("--largest-budget", type=float, default=300.0, metavar="S",
                        help="wall-clock seconds for the whole --largest search (default 300)")
    parser.add_argument("--donate", action="store_true",
                        help="jaxmg gets donate=True and JAXMg's inputs are rebuilt rather than "
                             "copied: one copy of A in memory, for N beyond half the devices")
    parser.add_argument("--mem-fraction", type=float, metavar="F",
                        help="set XLA_PYTHON_CLIENT_MEM_FRACTION=F for the workers (default: "
                             "leave the environment's, JAX's default 0.75 if unset)")
    parser.add_argument("--out", type=pathlib.Path,
                        help="output folder (default /tmp/jaxmg-bench/<date>-<platform>)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.tile < 1 or any(n < 1 for n in args.sizes):
        parser.error("--repeats, --tile and --sizes must be positive")
    if args.mp_tile is not None and args.mp_tile < 1:
        parser.error("--mp-tile must be positive")
    if args.mem_fraction is not None and not 0 < args.mem_fraction <= 1:
        parser.error("--mem-fraction must be in (0, 1]")
    args.routines = [r for r in ROUTINES if r in args.routines]  # fixed order, no repeats
    args.sizes = sorted(set(args.sizes))
    args.dtypes = [t for t in DTYPES if t in args.dtypes]
    if args.grids:
        args.grids = list(dict.fromkeys(args.grids))  # the order given, no repeats
    if args.conds:
        args.conds = sorted(set(args.conds))
    if args.impls:
        args.impls = [IMPL_NAMES[i] for i in dict.fromkeys(args.impls)]
        args.mp = args.mp or MP in args.impls
        if PEER in args.impls and not args.peer_path:
            parser.error("--impls peer needs --peer-path")
    if args.resume and not args.out:
        parser.error("--resume needs --out, the folder of the run to continue")
    return args


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """What the workers need to know, and what a resumed run must share."""
    return {"tile": args.tile, "mp": args.mp, "mp_tile": args.mp_tile,
            "repeats": args.repeats, "budget_s": args.budget,
            "peer_path": str(args.peer_path.resolve()) if args.peer_path else None,
            "mem_fraction": args.mem_fraction, "donate": args.donate, "paired": args.paired,
            "single_call_s": args.single_call_over}
