"""The first call of a jitted mixed-precision solve under XLA's GEMM
autotuning settings: how long it compiles, and what each setting costs the
solves after it. Each (setting, routine, N) compiles in a process of its own,
since XLA keeps its autotuning results for the life of a process.

A setting is a set of XLA compiler options passed to the compile of
jax.jit(solve).lower(a, b) (what jax.jit(..., compiler_options=...) passes):
"default" (none), "autotune-0" (no autotuning: XLA's heuristics pick each
GEMM's kernel), "cublas" (no Triton GEMMs: cuBLAS's algorithms alone are
tuned); or "eager": the solve called without a jit of the caller's, so
that jaxmg's own programs compile with their own options
(jaxmg._src.mixed.precision.COMPILER_OPTIONS); its compile column is its
whole first call. A case is ROUTINE:COND: "spd" (solve(assume_a="pos",
precision="mixed")) or "general" (solve(precision="mixed")) on the
benchmark's matrix of that condition number, one right-hand side, float64.

    PYTHONPATH=. python tools/compile_probe.py [--sizes 32768] [--cases spd:10 general:10]
        [--settings default autotune-0 cublas] [--repeats 5]

Prints a line per process (lowering s, compile s, first run ms, median ms of
--repeats calls after it, solves, fallback, backward error; JAX's float64
solve's median alongside) and writes them to $OUT/compile_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETTINGS = {
    "default": {},
    "autotune-0": {"xla_gpu_autotune_level": 0},
    "cublas": {"xla_gpu_enable_triton_gemm": False},
}


def worker(routine: str, n: int, setting: str, cond: float, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    jax.config.update("jax_enable_x64", True)
    import jaxmg
    from tools.bench import checks, matrices, timing

    kind = "spd" if routine == "spd" else "general"
    a = jax.jit(lambda seed: matrices.conditioned(n, "float64", kind, cond, seed))(0)
    b = jnp.ones((n,), a.dtype)
    assume_a = "pos" if routine == "spd" else "gen"

    def mixed(a, b):
        return jaxmg.solve(a, b, assume_a=assume_a, precision="mixed", return_info=True)

    def native(a, b):
        if routine == "spd":
            return jsl.cho_solve(jsl.cho_factor(a), b)
        return jsl.lu_solve(jsl.lu_factor(a), b)

    def timed(fn):
        return timing.timed(fn, a, b)[1]

    if setting == "eager":
        lowered_s, compiled = 0.0, mixed
        compile_s = timed(compiled)
    else:
        start = time.perf_counter()
        lowered = jax.jit(mixed).lower(a, b)
        lowered_s = time.perf_counter() - start
        compiled = lowered.compile(compiler_options=SETTINGS[setting] or None)
        compile_s = time.perf_counter() - start - lowered_s
    first_ms = 1e3 * timed(compiled)
    ms = 1e3 * statistics.median(timed(compiled) for _ in range(repeats))
    x, info = compiled(a, b)
    berr = checks.backward_error(a, b, x)
    row = dict(routine=routine, n=n, cond=cond, setting=setting, lower_s=lowered_s,
               compile_s=compile_s, first_ms=first_ms, ms=ms, iterations=int(info.iterations),
               fallback=bool(info.fallback), backward_error=float(berr))
    if setting == "default":
        fn = jax.jit(native)
        timed(fn)
        row["native_ms"] = 1e3 * statistics.median(timed(fn) for _ in range(repeats))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32768])
    parser.add_argument("--cases", nargs="+", default=["spd:10", "general:10"])
    parser.add_argument("--settings", nargs="+", choices=(*SETTINGS, "eager"), default=list(SETTINGS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", nargs=4, metavar=("ROUTINE", "COND", "N", "SETTING"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        routine, cond, n, setting = args.worker
        print("ROW " + json.dumps(worker(routine, int(n), setting, float(cond), args.repeats)), flush=True)
        return
    rows = []
    path = os.path.join(os.environ.get("OUT", "/tmp"), "compile_probe.json")
    print(f"{'routine':8} {'cond':>5} {'N':>6} {'setting':11} {'lower s':>8} {'compile s':>9} {'first ms':>9} "
          f"{'ms':>8} {'JAX ms':>8} {'solves':>6} {'fb':>3} {'berr':>8}", flush=True)
    for n in args.sizes:
        for case in args.cases:
            routine, _, cond = case.partition(":")
            if routine not in ("spd", "general") or not cond:
                parser.error(f"a case is spd:COND or general:COND, got {case!r}")
            for setting in args.settings:
                cmd = [sys.executable, __file__, "--worker", routine, cond, str(n), setting,
                       "--repeats", str(args.repeats)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
                if not found:
                    print(f"{routine:8} {cond:>5} {n:>6} {setting:11} failed (rc {done.returncode}):\n"
                          + "\n".join(done.stderr.strip().splitlines()[-8:]), flush=True)
                    continue
                r = json.loads(found[0])
                rows.append(r)
                native = f"{r['native_ms']:8.1f}" if "native_ms" in r else f"{'':8}"
                print(f"{routine:8} {cond:>5} {n:>6} {setting:11} {r['lower_s']:8.1f} {r['compile_s']:9.1f} "
                      f"{r['first_ms']:9.1f} {r['ms']:8.1f} {native} {r['iterations']:6d} "
                      f"{'y' if r['fallback'] else 'n':>3} {r['backward_error']:8.1e}", flush=True)
                with open(path, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
