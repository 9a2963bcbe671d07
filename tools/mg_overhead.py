"""jaxmg's forced cuSOLVERMg potrs on one GPU beside cuSOLVERMg called directly:
jaxmg's per-call overhead over the raw library (target: under 1 ms at N=1024).

    CUDA_VISIBLE_DEVICES=0 python3 tools/mg_overhead.py --raw-log raw.log

The raw figure is the `raw_cusolvermg potrs ... median_ms=` line that
tools/raw_mg/raw_mg_bench printed into --raw-log (potrf + potrs + device
synchronisation, A restored untimed before each call); `tools/gpu_check raw`
runs both. Here each call is timed up to block_until_ready, the modes
interleaved call by call:

    eager    jaxmg.potrs(a, b, backend="jaxmg")
    jit      the same inside the caller's jax.jit (mesh and spec passed)
    donate   eager with donate=True on a fresh upload of A made untimed, so
             that like the raw call it factors in place (one FFI call)

Exits 1 if a result's residual |A x - b| / |b| exceeds 1e-8 (float64).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tools.bench import internals, timing  # noqa: E402

TARGET_MS = 1.0  # eager and jit calls: at most this much over the raw library


def raw_median(path):
    try:
        text = open(path).read()
    except OSError as e:
        print(f"no raw figure: {e}")
        return None
    m = re.search(r"^raw_cusolvermg potrs .*median_ms=([0-9.]+)", text, re.M)
    if m is None:
        print(f"no raw figure: no 'raw_cusolvermg potrs' line in {path}")
        return None
    return float(m.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--raw-log", help="raw_mg_bench's output")
    args = parser.parse_args()

    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    import jaxmg

    n = args.n
    device = jax.devices()[0]
    mesh = jax.make_mesh((1,), ("x",), devices=[device])
    # As raw_mg_bench builds it: symmetric, uniform in [-1, 1], plus N I.
    rng = np.random.default_rng(42)
    m = rng.uniform(-1, 1, (n, n))
    a_host = ((m + m.T) / 2 + n * np.eye(n)).astype(args.dtype)
    b_host = rng.uniform(-1, 1, (n, 1)).astype(args.dtype)
    a = jax.device_put(a_host, NamedSharding(mesh, P("x", None)))
    b = jax.device_put(b_host, NamedSharding(mesh, P()))
    in_jit = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh, spec=P("x", None), backend="jaxmg"))

    fresh = {}

    def donated():
        return jaxmg.potrs(fresh.pop("a"), b, backend="jaxmg", donate=True)

    def prepare(name):
        if name == "donate":
            fresh["a"] = jax.block_until_ready(jax.device_put(a_host, a.sharding))

    modes = {
        "eager": lambda: jaxmg.potrs(a, b, backend="jaxmg"),
        "jit": lambda: in_jit(a, b),
        "donate": donated,
    }
    failed = {}
    for name, fn in modes.items():
        try:
            for _ in range(args.warmup):
                prepare(name)
                jax.block_until_ready(fn())
        except Exception as e:  # one mode's failure should not hide the others
            failed[name] = f"{type(e).__name__}: {e}"
    print(f"warm-up: {args.warmup} calls per mode (the first compiles)")
    live = {k: fn for k, fn in modes.items() if k not in failed}
    seconds, results = timing.interleaved(live, rounds=args.calls, prepare=prepare)

    raw = raw_median(args.raw_log) if args.raw_log else None
    limit = 1e-8 if args.dtype == "float64" else 1e-4
    a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
    status = 0
    tag = f"jaxmg potrs backend=jaxmg N={n} devices=0 tile={internals.default_tile(n, 1)} dtype={args.dtype}"
    for name in modes:
        if name in failed:
            print(f"{tag} mode={name} FAILED {failed[name]}")
            status = 1
            continue
        ms = {k: 1e3 * v for k, v in timing.spread(seconds[name]).items()}
        x = np.asarray(results[name], dtype=np.float64)
        resid = np.linalg.norm(a64 @ x - b64) / np.linalg.norm(b64)
        ok = bool(resid <= limit)
        status |= not ok
        over = f" over_raw_ms={ms['median'] - raw:+.4f}" if raw is not None else ""
        print(f"{tag} mode={name} median_ms={ms['median']:.4f} min_ms={ms['min']:.4f} p90_ms={ms['p90']:.4f}"
              f" residual={resid:.2e}{'' if ok else ' FAILED'}{over}", flush=True)
    if raw is not None:
        over = [1e3 * timing.spread(seconds[k])["median"] - raw for k in ("eager", "jit") if k in live]
        if over:
            verdict = "met" if max(over) < TARGET_MS else "missed"
            print(f"raw cuSOLVERMg median_ms={raw:.4f}; target (eager and jit under {TARGET_MS:g} ms over raw): "
                  f"{verdict}, worst {max(over):+.4f} ms")
    return status


if __name__ == "__main__":
    sys.exit(main())
