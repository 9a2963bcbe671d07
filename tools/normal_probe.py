"""Times the general mixed solve's route through the Gram matrix
(jaxmg/_src/mixed/normal.py: FP16 G = A^H A, its Cholesky on the SPD path,
refinement against A; what jaxmg.solve(..., precision="mixed") runs on one
GPU from api.GRAM_FROM) beside cuSOLVER's iterative-refinement LU (irs.py,
the route before it) and JAX native float64 LU, on the benchmark's U S V^T
matrices of prescribed condition number, one right-hand side.

    PYTHONPATH=. python tools/normal_probe.py [--sizes 32768 16384 8192] [--conds 10 100]
        [--budget 500]

Prints a line per measurement (median ms of --repeats calls after one
compiling call, iterations, fallback, backward error) and writes them to
$OUT/normal_probe.json (OUT defaults to /tmp).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

jax.config.update("jax_enable_x64", True)

from jaxmg._src.mixed import api, irs, solvers  # noqa: E402
from tools.bench import matrices  # noqa: E402

START = time.monotonic()


def timed(fn, args, repeats):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        seconds.append(time.perf_counter() - t)
    return out, 1e3 * statistics.median(seconds), first


@jax.jit
def native(a, b):
    return jsl.lu_solve(jsl.lu_factor(a), b)


def gram(a, b, **options):
    return solvers.general_solve(a, b, **dict(api.GRAM, **options))


def blocked(a, b):
    return solvers.general_solve(a, b, **api.blocked_lu(a.shape[0]))


@jax.jit
def irs_route(a, b):
    """cuSOLVER's IRS, the blocked LU where it stops above the bound (irs.checked)."""
    return irs.solve(a, b, irs.Settings(), lambda a, b, transpose: blocked(a.T if transpose else a, b))


def backward_error(a, b, x):
    r = b - a @ x
    return float(jnp.max(jnp.abs(r)) / (jnp.max(jnp.sum(jnp.abs(a), 1)) * jnp.max(jnp.abs(x))
                                        + jnp.max(jnp.abs(b))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32768, 16384, 8192])
    p.add_argument("--conds", type=float, nargs="+", default=[10, 100])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=float, default=500)
    p.add_argument("--gram", nargs="+", default=["gram"],
                   help="VARIANT[:UPDATE]: normal.VARIANTS, the Cholesky's update precision")
    p.add_argument("--skip-irs", action="store_true")
    p.add_argument("--blocked", action="store_true", help="also the blocked BF16x3 LU")
    args = p.parse_args()
    rows = []
    for n in args.sizes:
        for cond in args.conds:
            a = jax.block_until_ready(matrices.conditioned(n, "float64", "general", cond, seed=1))
            b = jax.random.normal(jax.random.key(2), (n, 1), jnp.float64)
            runs = [("native", native)]
            for v in args.gram:
                variant, _, update = v.partition(":")
                runs.append((f"{variant} {update or api.GRAM['update']}",
                             functools.partial(gram, variant=variant, **({"update": update} if update else {}))))
            if not args.skip_irs and irs.available():  # available() loads its FFI targets
                runs.append(("irs", irs_route))
            if args.blocked:
                runs.append(("blocked lu", blocked))
            for name, fn in runs:
                if time.monotonic() - START > args.budget:
                    print(f"budget spent: {name} N={n} cond={cond:g} skipped", flush=True)
                    continue
                try:
                    out, ms, first = timed(fn, (a, b), args.repeats)
                except Exception as e:  # noqa: BLE001 - record and go on
                    print(f"N={n} cond={cond:g} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                row = dict(n=n, cond=cond, impl=name, ms=ms, first_s=first)
                if name == "native":
                    row["berr"] = backward_error(a, b, out)
                else:
                    x, info = out
                    row.update(berr=backward_error(a, b, x), iterations=int(info.iterations[0]),
                               fallback=bool(info.fallback[0]), factor_info=int(info.factor_info))
                rows.append(row)
                print(json.dumps(row), flush=True)
            del a
    out = os.path.join(os.environ.get("OUT", "/tmp"), "normal_probe.json")
    with open(out, "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
