"""Times the diagonal blocks' triangular inverse (jaxmg/_src/mixed/blocks.py)
by its leaf size on one GPU, for choosing blocks.INVERSE_LEAF: the inverse of
one float32 block alone (against cuBLAS's triangular solve, leaf = the block
size), then the whole mixed SPD solve (jaxmg.solve(..., assume_a="pos",
precision="mixed")) on the benchmark's matrices at each leaf, beside JAX
native float64 (cho_factor + cho_solve).

    PYTHONPATH=. python tools/inverse_probe.py [--blocks 1024 2048 4096]
        [--leaves 32 64 128 256] [--sizes 16384 32768] [--cond 10]

Prints a line per measurement (median ms of --repeats calls after two
warm-up calls) and writes them all to $OUT/inverse_probe.json (OUT defaults
to /tmp).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxmg  # noqa: E402
from jaxmg._src.mixed import blocks  # noqa: E402
from tools.bench import matrices  # noqa: E402
from tools.bench.timing import timed  # noqa: E402


def median_ms(fn, args, repeats):
    for _ in range(2):
        timed(fn, *args)
    return 1e3 * statistics.median(timed(fn, *args)[1] for _ in range(repeats))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, nargs="*", default=[1024, 2048, 4096])
    p.add_argument("--leaves", type=int, nargs="+", default=[32, 64, 128, 256])
    p.add_argument("--sizes", type=int, nargs="*", default=[16384, 32768])
    p.add_argument("--cond", type=float, default=10.0)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    out_path = os.path.join(os.environ.get("OUT", "/tmp"), "inverse_probe.json")
    records = []

    def record(**rec):
        records.append(rec)
        print(json.dumps(rec), flush=True)
        with open(out_path, "w") as f:
            json.dump(records, f, indent=1)

    rng = np.random.default_rng(0)
    for w in args.blocks:
        exact = np.tril(rng.standard_normal((w, w)) / np.sqrt(w)) + 2 * np.eye(w)
        want = np.linalg.inv(exact)
        l = jnp.asarray(exact, jnp.float32)
        for leaf in [w] + [x for x in args.leaves if x < w]:  # leaf = w: one triangular solve
            fn = jax.jit(lambda l, leaf=leaf: blocks.inverse_lower(l, leaf=leaf))
            got = np.asarray(fn(l), np.float64)
            record(block=w, leaf=leaf, ms=median_ms(fn, (l,), args.repeats),
                   relative_error=float(np.abs(got - want).max() / np.abs(want).max()))

    chosen = blocks.INVERSE_LEAF
    for n in args.sizes:
        a = jax.block_until_ready(matrices.conditioned(n, "float64", "spd", args.cond, 0))
        b = jax.random.normal(jax.random.key(1), (n,), jnp.float64)
        native = jax.jit(lambda a, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), b))
        record(n=n, cond=args.cond, route="jax native float64", ms=median_ms(native, (a, b), args.repeats))
        for leaf in [n] + list(args.leaves):
            blocks.INVERSE_LEAF = leaf
            jax.clear_caches()
            fn = jax.jit(lambda a, b: jaxmg.solve(a, b, assume_a="pos", precision="mixed",
                                                  return_info=True))
            (_, info), first = timed(fn, a, b)
            record(n=n, cond=args.cond, route="mixed", leaf=leaf if leaf < n else "triangular solve",
                   ms=median_ms(fn, (a, b), args.repeats), first_call_s=first,
                   iterations=int(info.iterations), fallback=bool(info.fallback),
                   backward_error=float(info.backward_error))
        del a
    blocks.INVERSE_LEAF = chosen


if __name__ == "__main__":
    main()
