"""Where jaxmg's time goes at small N on one device, against JAX's own solver.

    python3 tools/small_n_overhead.py [--sizes 1024 4096] [--out DIR]

Variants of one potrs (cho_factor + cho_solve), each timed back to back with
block_until_ready after every call, in interleaved rounds so clock drift hits
all alike; median microseconds per call:

    jax            jax.jit(cho_solve(cho_factor(a), b)) on single-device arrays
    jax, mesh      the same jit on replicated arrays of a one-device mesh
    jaxmg program  jaxmg's compiled program called directly (no Python wrapper)
    jaxmg          jaxmg.potrs(a, b): the public eager call
    jaxmg in jit   jaxmg.potrs inside the caller's jax.jit

Writes <out>/small_n_overhead.json, and <out>/hlo.txt: the optimised HLO of
JAX's program and of jaxmg's at the first size and dtype, to compare.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tools.bench import internals, timing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--out", default="/tmp/jaxmg-small-n")
    args = parser.parse_args()

    import jax
    import jax.scipy.linalg as jsl
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    import jaxmg

    device = jax.devices()[0]
    mesh = jax.make_mesh((1,), ("x",), devices=[device])
    native = jax.jit(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b))
    in_jit = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=P("x", None)))
    records, hlo = [], []
    print(f"{'dtype':8} {'N':>6} {'variant':14} {'us/call':>9} {'vs jax':>7}", flush=True)
    for dtype in args.dtypes:
        for n in args.sizes:
            rng = np.random.default_rng(n)
            m = rng.standard_normal((n, n))
            a_host = (m @ m.T / n + 3 * np.eye(n)).astype(dtype)
            b_host = rng.standard_normal((n, 1)).astype(dtype)
            a1, b1 = jax.device_put(a_host, device), jax.device_put(b_host, device)
            am = jax.device_put(a_host, NamedSharding(mesh, P("x", None)))
            ar = jax.device_put(a_host, NamedSharding(mesh, P()))
            bm = jax.device_put(b_host, NamedSharding(mesh, P()))
            engine, program, static = internals.potrs_program(am)
            variants = {
                "jax": lambda a1=a1, b1=b1: native(a1, b1),
                "jax, mesh": lambda ar=ar, bm=bm: native(ar, bm),
                "jaxmg program": lambda am=am, bm=bm, static=static: program(am, bm, **static)[0],
                "jaxmg": lambda am=am, bm=bm: jaxmg.potrs(am, bm),
                "jaxmg in jit": lambda am=am, bm=bm: in_jit(am, bm),
            }
            if not hlo:
                hlo.append(f"==== jax, {dtype}, N={n}\n" + native.lower(a1, b1).compile().as_text())
                hlo.append(f"==== jaxmg program, {dtype}, N={n}\n"
                           + program.lower(am, bm, **static).compile().as_text())
            for fn in variants.values():
                jax.block_until_ready(fn())
            times, _ = timing.interleaved(variants, rounds=args.rounds, per_turn=args.calls)
            base = statistics.median(times["jax"])
            for name, ts in times.items():
                med = statistics.median(ts)
                print(f"{dtype:8} {n:6d} {name:14} {med * 1e6:9.1f} {med / base:7.3f}", flush=True)
                records.append({"dtype": dtype, "n": n, "variant": name, "engine": engine,
                                "median_us": med * 1e6, "min_us": min(ts) * 1e6, "ratio": med / base})
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(device.device_kind), "jax": jax.__version__, "rounds": args.rounds, "calls": args.calls}
    (out / "hlo.txt").write_text("\n".join(hlo))
    (out / "small_n_overhead.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
