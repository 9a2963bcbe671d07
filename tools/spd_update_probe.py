"""Times the mixed SPD solve's factor at several update precisions on
ill-conditioned matrices: what jaxmg.solve(..., assume_a="pos",
precision="mixed") runs (FP16 trailing updates, factored again with BF16x3
ones only where FP16's factorisation fails), the same solve factored with
each of --updates from the start, and JAX native float64 Cholesky, on the
benchmark's matrices of prescribed condition number, one right-hand side.
It answers whether a second, more accurate factorisation where FP16's
refinement does not converge would beat the float64 fallback.

    PYTHONPATH=. python tools/spd_update_probe.py [--sizes 16384 32768]
        [--conds 1e4 1e5 1e6 1e7] [--updates bf16x3 bf16x6 tf32x3] [--repeats 3]
        [--budget 420]

Prints a line per measurement (median ms of --repeats calls after one
compiling call, refinement iterations, fallback, backward error) and writes
them to $OUT/spd_update_probe.json (OUT defaults to /tmp).
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

import jaxmg  # noqa: E402
from jaxmg._src.mixed import api, refine, solvers  # noqa: E402
from tools.bench import matrices, timing  # noqa: E402

START = time.monotonic()


def timed_ms(fn, args, repeats):
    """fn(*args), the median ms of `repeats` calls after the first, and the first's seconds."""
    out, first = timing.timed(fn, *args)
    seconds = [timing.timed(fn, *args)[1] for _ in range(repeats)]
    return out, 1e3 * statistics.median(seconds), first


@jax.jit
def native(a, b):
    return jsl.cho_solve(jsl.cho_factor(a), b), None


@jax.jit
def public(a, b):
    return jaxmg.solve(a, b, assume_a="pos", precision="mixed", return_info=True)


def factored_with(update: str):
    return jax.jit(lambda a, b: solvers.spd_solve(a, b, **dict(api.SPD, update=update)))


@jax.jit
def backward_error(a, x, b):
    anorm = jnp.max(jnp.sum(jnp.abs(a), axis=1))
    return refine.backward_error((b - a @ x)[:, None], x[:, None], b[:, None], anorm)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768])
    parser.add_argument("--conds", type=float, nargs="+", default=[1e4, 1e5, 1e6, 1e7])
    parser.add_argument("--updates", nargs="+", default=["bf16x3"],
                        help="update precisions to factor with from the start (precision.UPDATES)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=420, help="seconds before skipping the rest")
    args = parser.parse_args()
    impls = {"jax native": native, "mixed (fp16, the default)": public}
    impls.update({f"mixed, {u} updates": factored_with(u) for u in args.updates})
    rows = []
    for n in args.sizes:
        for cond in args.conds:
            a = jax.jit(lambda seed: matrices.conditioned(n, "float64", "spd", cond, seed))(n)
            b = jax.random.normal(jax.random.key(1), (n,), jnp.float64)
            for name, fn in impls.items():
                if time.monotonic() - START > args.budget:
                    print(f"budget spent: N={n} cond={cond:g} {name} skipped", flush=True)
                    continue
                (x, info), ms, first = timed_ms(fn, (a, b), args.repeats)
                row = dict(n=n, cond=cond, impl=name, ms=ms, first_s=first,
                           backward_error=float(backward_error(a, x, b)))
                if info is not None:
                    row.update(iterations=int(info.iterations), fallback=bool(info.fallback),
                               factor_info=int(info.factor_info))
                rows.append(row)
                print(json.dumps(row), flush=True)
            del a
    out = os.path.join(os.environ.get("OUT", "/tmp"), "spd_update_probe.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
