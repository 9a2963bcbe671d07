"""Times the general mixed solve's two routes on one GPU, for choosing the
default: cuSOLVER's iterative-refinement solver (jaxmg/_src/mixed/irs.py) at
each lowest precision and refinement solver, and jaxmg's blocked BF16x3 LU,
beside JAX native float64 (lu_factor + lu_solve), on the benchmark's U S V^T
matrices of prescribed condition number (tools/bench/matrices.py).

    PYTHONPATH=. python tools/irs_probe.py [--sizes 32768 16384] [--conds 10 1e4 1e6]
        [--budget 400] [--irs fp16:classical_gmres]

Prints a line per measurement (median ms of --repeats calls after one
compiling call, iterations, fallback, backward error) and writes them all to
$OUT/irs_probe_k<rhs>.json (OUT defaults to /tmp). A time budget skips what is left.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

jax.config.update("jax_enable_x64", True)

from jaxmg._src.mixed import api, irs, refine, solvers  # noqa: E402
from tools.bench import matrices  # noqa: E402

START = time.monotonic()


def setting(text: str) -> tuple[str, str]:
    """--irs's LOWEST:REFINER, checked against irs.LOWEST and irs.REFINERS."""
    low, _, ref = text.partition(":")
    if low not in irs.LOWEST or ref not in irs.REFINERS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not LOWEST:REFINER with LOWEST in {irs.LOWEST} and REFINER in {irs.REFINERS}")
    return low, ref


def variants(full: bool, chosen=None):
    if chosen:
        for low, ref in chosen:
            yield f"irs {low} {ref}", irs.Settings(lowest=low, refiner=ref)
        return
    lowest = ("fp16", "tf32", "bf16") if full else ("fp16",)
    refiners = ("classical", "gmres", "classical_gmres") if full else ("classical", "gmres")
    for low in lowest:
        for ref in refiners:
            yield f"irs {low} {ref}", irs.Settings(lowest=low, refiner=ref)


def timed(fn, args, repeats):
    out = jax.block_until_ready(fn(*args))
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds), out


def berr(a, b, x):
    anorm, _ = refine.norms(a)
    return float(jnp.max(refine.backward_error(b - a @ x, x, b, anorm)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32768, 16384])
    p.add_argument("--conds", type=float, nargs="+", default=[10, 1e4, 1e6])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rhs", type=int, default=1, help="right-hand sides (GMRES takes one)")
    p.add_argument("--budget", type=float, default=400)
    p.add_argument("--no-blocked", action="store_true", help="leave out the blocked LU")
    p.add_argument("--irs", nargs="+", type=setting, metavar="LOWEST:REFINER",
                   help="only these IRS settings (e.g. fp16:classical_gmres), at every cond; "
                        "default: all of them at the first cond, FP16 classic and GMRES at the rest")
    args = p.parse_args()
    if not irs.available():
        raise SystemExit("irs_probe: cuSOLVER's IRS needs a CUDA GPU and jaxmg's library")
    out_path = os.path.join(os.environ.get("OUT", "/tmp"), f"irs_probe_k{args.rhs}.json")
    records = []

    native = jax.jit(lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b))
    for n in args.sizes:
        for ci, cond in enumerate(args.conds):
            a = jax.block_until_ready(matrices.conditioned(n, "float64", "general", cond, seed=1))
            b = jax.random.normal(jax.random.key(2), (n, args.rhs), jnp.float64)
            routes = [("jax native float64", native)]
            if not args.no_blocked and ci == 0:
                routes.append(("blocked bf16x3 LU", jax.jit(lambda a, b: solvers.general_solve(
                    a, b, **api.blocked_lu(n)))))
            for name, s in variants(full=ci == 0, chosen=args.irs):
                routes.append((name, jax.jit(lambda a, b, s=s: irs.refined(a, b, s))))
            for name, fn in routes:
                if time.monotonic() - START > args.budget:
                    print(f"budget spent: skipped {name} at N={n} cond={cond:g}", flush=True)
                    continue
                rec = {"n": n, "cond": cond, "rhs": args.rhs, "route": name}
                try:
                    sec, result = timed(fn, (a, b), args.repeats)
                    x, info = result if isinstance(result, tuple) else (result, None)
                    rec.update(ms=sec * 1e3, backward_error=berr(a, b, x))
                    if info is not None:
                        rec.update(iterations=int(jnp.max(info.iterations)),
                                   fallback=bool(jnp.any(info.fallback)),
                                   info=int(info.info))
                except Exception as exc:  # recorded, and the probe goes on
                    rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                records.append(rec)
                print(json.dumps(rec), flush=True)
                with open(out_path, "w") as f:
                    json.dump(records, f, indent=1)
            del a


if __name__ == "__main__":
    main()
