"""Times the mixed-precision solvers (jaxmg/_src/mixed) against JAX's own
float64 solvers on one GPU, for choosing their defaults.

For each N (largest first, where the targets are) and each matrix kind
(SPD: Cholesky; general: LU) it times JAX native float64
(cho_factor + cho_solve, lu_factor + lu_solve) and the mixed variants
(update precision x block size x update order x panel solve), each as the
whole solve (factor + refinement + fallback) and its factorisation alone,
with the refinement's iterations, the backward error of every timed result
and XLA's buffer sizes in copies of A. A variant that fails to compile or
run is recorded with its error. A time budget skips what is left.

    PYTHONPATH=. python tools/mixed_precision_probe.py [--budget 280] [--sizes 32768,16384,8192]

Prints a progress line per measurement and a table sorted by time; writes
every figure to $OUT/mixed_probe.json (OUT defaults to /tmp).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

jax.config.update("jax_enable_x64", True)

from jaxmg._src.mixed import cholesky, lu, precision, refine, solvers  # noqa: E402

START = time.monotonic()

# (update, block size, variant, panel_solve, panel), in the order they are
# worth measuring. The programs are unrolled over the N / nb blocks and LU's
# has O((N / nb)^2) operations, so the many-block ones (compile times of a
# minute or more) come last.
SPD_VARIANTS = [
    ("bf16", 2048, "left", "trsm", "float32"),
    ("bf16", 4096, "left", "trsm", "float32"),
    ("bf16", 2048, "left", "inverse", "float32"),
    ("bf16", 4096, "left", "inverse", "float32"),
    ("tf32", 2048, "left", "trsm", "float32"),
    ("bf16", 4096, "right_full", "trsm", "float32"),  # the first sketch's form
    ("bf16", 2048, "right", "trsm", "float32"),
    ("bf16x3", 2048, "left", "trsm", "float32"),
    ("tf32x3", 2048, "left", "trsm", "float32"),
    ("f64", 2048, "left", "trsm", "float64"),  # the blocked float64 factorisation
    ("bf16", 2048, "left", "trsm", "float64"),
    ("bf16", 1024, "left", "trsm", "float32"),
]
LU_VARIANTS = [
    ("bf16", 4096, "right", "trsm", "float32"),
    ("bf16", 2048, "right", "trsm", "float32"),
    ("bf16", 4096, "right", "inverse", "float32"),
    ("bf16", 4096, "right_full", "trsm", "float32"),
    ("tf32", 4096, "right", "trsm", "float32"),
    ("bf16x3", 4096, "right", "trsm", "float32"),
    ("bf16", 2048, "right", "inverse", "float32"),
    ("bf16", 1024, "right", "trsm", "float32"),
]
SMALLER_SIZES_TAKE = 4  # the fastest variants at the first size, tried at the others
FACTOR_TAKE = 5  # variants whose factorisation is also timed alone (first size only)


def variant_list(text: str) -> list:
    """"bf16:2048:left:inverse:float32,..." -> [("bf16", 2048, "left", "inverse", "float32"), ...]"""
    out = []
    for item in text.split(","):
        fields = item.split(":")
        if len(fields) != 5:
            raise argparse.ArgumentTypeError(
                f"{item!r}: a variant is update:block_size:variant:panel_solve:panel")
        out.append((fields[0], int(fields[1]), fields[2], fields[3], fields[4]))
    return out


def log(message: str) -> None:
    print(f"[{time.monotonic() - START:6.1f}s] {message}", flush=True)


def left(budget: float) -> float:
    return budget - (time.monotonic() - START)


@functools.partial(jax.jit, static_argnums=1)
def spd_matrix(key, n: int):
    """(W + W^T) / sqrt(2N) + 3 I: eigenvalues in about [1, 5]."""
    w = jax.random.normal(key, (n, n), jnp.float64)
    return (w + w.T) / jnp.sqrt(2.0 * n) + 3.0 * jnp.eye(n, dtype=jnp.float64)


@functools.partial(jax.jit, static_argnums=1)
def general_matrix(key, n: int):
    """W / sqrt(N) + 3 I: eigenvalues in a disc of radius 1 around 3."""
    w = jax.random.normal(key, (n, n), jnp.float64)
    return w / jnp.sqrt(1.0 * n) + 3.0 * jnp.eye(n, dtype=jnp.float64)


def backward_error(a, x, b) -> float:
    anorm, _ = refine.norms(a)
    r = b - jnp.matmul(a, x, precision=jax.lax.Precision.HIGHEST)
    return float(jnp.max(refine.backward_error(r, x, b, anorm)))


def memory_copies(compiled, n: int) -> dict:
    """XLA's buffer sizes for one call, in copies of the float64 matrix."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend reports
        return {}
    if m is None:
        return {}
    copy = 8.0 * n * n
    out = {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
    }
    out["temp_copies"] = out["temp_bytes"] / copy
    out["total_copies"] = (out["argument_bytes"] + out["output_bytes"] + out["temp_bytes"]) / copy
    return out


def timed(fn, args_list, repeats: int):
    """Compiles fn, runs it once to warm up, then `repeats` times rotating
    over args_list. Returns (compile_s, times, last result, last args, compiled)."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args_list[0]).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args_list[0]))
    times, out, args = [], None, None
    for i in range(repeats):
        args = args_list[i % len(args_list)]
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, times, out, args, compiled


def native(kind: str, a, bs, repeats: int) -> dict:
    if kind == "spd":
        fn = lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b)  # noqa: E731
        factor = lambda a: jsl.cho_factor(a, lower=True)[0]  # noqa: E731
    else:
        fn = lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b)  # noqa: E731
        factor = lambda a: jsl.lu_factor(a)[0]  # noqa: E731
    compile_s, times, x, (_, b), compiled = timed(fn, [(a, b) for b in bs], repeats)
    _, ftimes, _, _, _ = timed(factor, [(a,)], repeats)
    rec = {
        "impl": "native",
        "time_s": statistics.median(times),
        "times": times,
        "factor_s": statistics.median(ftimes),
        "compile_s": compile_s,
        "berr": backward_error(a, x, b),
    }
    rec.update(memory_copies(compiled, a.shape[0]))
    return rec


def mixed(kind: str, a, bs, variant, repeats: int, with_factor: bool, memory_without_fallback=False) -> dict:
    update, nb, order, panel_solve, panel = variant
    opts = dict(block_size=nb, update=update, variant=order, panel_solve=panel_solve, panel=panel)
    solve = solvers.spd_solve if kind == "spd" else solvers.general_solve
    factor = cholesky.cholesky if kind == "spd" else lu.lu
    rec = {"impl": "mixed", "update": update, "block_size": nb, "variant": order,
           "panel_solve": panel_solve, "panel": panel}
    run = lambda a, b: solve(a, b, **opts)  # noqa: E731
    compile_s, times, out, (_, b), compiled = timed(run, [(a, b) for b in bs], repeats)
    x, record = out
    rec.update({
        "time_s": statistics.median(times),
        "times": times,
        "compile_s": compile_s,
        "berr": backward_error(a, x, b),
        "berr_reported": float(jnp.max(record.backward_error)),
        "iterations": int(jnp.max(record.iterations)),
        "gmres": bool(jnp.any(record.gmres)),
        "fallback": bool(jnp.any(record.fallback)),
        "factor_info": int(record.factor_info),
        "info": int(record.info),
    })
    rec.update(memory_copies(compiled, a.shape[0]))
    if memory_without_fallback:  # what XLA reserves for the float64 fallback
        lean = jax.jit(lambda a, b: solve(a, b, fallback=False, **opts)).lower(a, b).compile()
        rec["temp_copies_without_fallback"] = memory_copies(lean, a.shape[0]).get("temp_copies")
    if with_factor:
        _, ftimes, (f, info), _, fcompiled = timed(lambda a: factor(a, **opts), [(a,)], repeats)
        rec["factor_s"] = statistics.median(ftimes)
        rec["factor_info_alone"] = int(info)
        rec["factor_temp_copies"] = memory_copies(fcompiled, a.shape[0]).get("temp_copies")
        low_solve = cholesky.solve if kind == "spd" else lu.solve
        _, stimes, _, _, _ = timed(low_solve, [(f, b) for b in bs], repeats)
        rec["low_precision_solve_s"] = statistics.median(stimes)
    return rec


def components(n: int, repeats: int) -> dict:
    """The parts a mixed solve is made of, timed alone at order n: the panel
    factorisations and triangular solves per block size, the float64
    residual and norms (one pass over A each)."""
    key = jax.random.PRNGKey(3)
    out = {}

    def put(name, fn, *args):
        try:
            _, times, _, _, _ = timed(fn, [args], repeats)
            out[name] = statistics.median(times)
        except Exception as e:  # noqa: BLE001
            out[name] = f"error: {type(e).__name__}"
        log(f"component {name}: {out[name]}")

    a = spd_matrix(key, n)
    x = jax.random.normal(key, (n, 1), jnp.float64)
    put("matvec_f64", lambda a, x: jnp.matmul(a, x, precision=jax.lax.Precision.HIGHEST), a, x)
    put("norms_f64", refine.norms, a)
    for nb in (nb for nb in (1024, 2048, 4096) if nb < n):
        d = a[:nb, :nb].astype(jnp.float32)
        c = a[nb:, :nb].astype(jnp.float32)
        l11 = jnp.linalg.cholesky(d)
        put(f"potrf_f32_{nb}", lambda d: jax.lax.linalg.cholesky(d, symmetrize_input=False), d)
        put(f"getrf_f32_{n}x{nb}", lambda c: jax.lax.linalg.lu(c)[0], a[:, :nb].astype(jnp.float32))
        put(f"trsm_f32_{n - nb}x{nb}", lambda l, c: jax.lax.linalg.triangular_solve(
            l, c, left_side=False, lower=True, transpose_a=True), l11, c)
        put(f"inverse_f32_{nb}", lambda l: jax.lax.linalg.triangular_solve(
            l, jnp.eye(nb, dtype=l.dtype), left_side=True, lower=True), l11)
    del a
    return out


def fastest(runs, n: int, kind: str, count: int):
    """The `count` fastest variants measured at order n that needed no fallback."""
    done = [r for r in runs if r.get("n") == n and r.get("kind") == kind and r.get("impl") == "mixed"
            and "time_s" in r and not r["fallback"]]
    done.sort(key=lambda r: r["time_s"])
    return [(r["update"], r["block_size"], r["variant"], r["panel_solve"], r["panel"]) for r in done[:count]]


def peak_bytes(device):
    """The device's peak bytes in use so far (never reset: a running maximum)."""
    try:
        return (device.memory_stats() or {}).get("peak_bytes_in_use")
    except Exception:  # noqa: BLE001 - CPUs report nothing
        return None


def gemm_rates(n: int, updates) -> dict:
    """TFLOP/s of one n x n x n GEMM per update precision (float32 operands)."""
    key = jax.random.PRNGKey(7)
    x = jax.random.normal(key, (n, n), jnp.float32)
    rates = {}
    for u in updates:
        try:
            _, times, _, _, _ = timed(lambda x: precision.matmul(x, x, u, adjoint_y=False), [(x,)], 3)
            rates[u] = 2.0 * n**3 / statistics.median(times) / 1e12
        except Exception as e:  # noqa: BLE001
            rates[u] = f"error: {type(e).__name__}"
        log(f"GEMM {n}^3 {u}: {rates[u]}")
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=280.0, help="seconds before skipping the rest")
    parser.add_argument("--sizes", default="32768,16384,8192")
    parser.add_argument("--kinds", default="spd,general")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gemm-size", type=int, default=8192, help="order of the GEMM rate check (0: skip)")
    parser.add_argument("--spd-variants", type=variant_list, default=SPD_VARIANTS,
                        help="the Cholesky variants to time, e.g. bf16:2048:left:inverse:float32,... "
                             "(update:block size:variant:panel solve:panel; default: the list above)")
    parser.add_argument("--lu-variants", type=variant_list, default=LU_VARIANTS,
                        help="the LU variants, in the same form")
    args = parser.parse_args()
    out_dir = os.environ.get("OUT", "/tmp")
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    device = jax.devices()[0]
    log(f"jax {jax.__version__} on {device.device_kind} ({jax.default_backend()}), budget {args.budget:.0f}s")

    available = {u: precision.available(u) for u in precision.UPDATES}
    log(f"update precisions that compile here: {[u for u, ok in available.items() if ok]}")
    result = {"jax": jax.__version__, "device": device.device_kind, "available": available, "runs": []}
    if args.gemm_size:
        lowered = [u for u, ok in available.items() if ok and u != "f64"]
        result["gemm_tflops"] = gemm_rates(args.gemm_size, lowered)

    if left(args.budget) > 60:
        result["components"] = components(sizes[0], args.repeats)

    for i, n in enumerate(sizes):
        for kind in kinds:
            if left(args.budget) < 20:
                log(f"budget spent: skipping N={n} {kind}")
                result["runs"].append({"n": n, "kind": kind, "skipped": "budget"})
                continue
            key = jax.random.PRNGKey(n)
            a = (spd_matrix if kind == "spd" else general_matrix)(key, n)
            bs = [jax.random.normal(jax.random.PRNGKey(n + j + 1), (n, 1), jnp.float64) for j in range(2)]
            jax.block_until_ready((a, bs))
            try:
                base = native(kind, a, bs, args.repeats)
            except Exception as e:  # noqa: BLE001
                base = {"impl": "native", "error": f"{type(e).__name__}: {e}"[:500]}
                traceback.print_exc(limit=3)
            base.update(n=n, kind=kind)
            result["runs"].append(base)
            log(f"N={n} {kind} native: {base.get('time_s', float('nan')):.4f}s "
                f"(factor {base.get('factor_s', float('nan')):.4f}s) berr {base.get('berr', float('nan')):.1e} "
                f"temp {base.get('temp_copies', float('nan')):.2f} copies")
            variants = args.spd_variants if kind == "spd" else args.lu_variants
            if i > 0:
                best = fastest(result["runs"], sizes[0], kind, SMALLER_SIZES_TAKE)
                variants = best or variants[:SMALLER_SIZES_TAKE]
            for rank, v in enumerate(variants):
                if not available.get(v[0], False):
                    continue
                if left(args.budget) < 15:
                    log(f"budget spent: skipping N={n} {kind} {v}")
                    result["runs"].append({"n": n, "kind": kind, "variant": list(v), "skipped": "budget"})
                    continue
                try:
                    with_factor = i == 0 and rank < FACTOR_TAKE and left(args.budget) > 40
                    lean = i == 0 and rank == 0
                    rec = mixed(kind, a, bs, v, args.repeats, with_factor, memory_without_fallback=lean)
                except Exception as e:  # noqa: BLE001
                    rec = {"impl": "mixed", "variant": list(v), "error": f"{type(e).__name__}: {e}"[:800]}
                    traceback.print_exc(limit=3)
                peak = peak_bytes(device)
                rec.update(n=n, kind=kind, peak_bytes_so_far=peak,
                           peak_copies_so_far=peak / (8.0 * n * n) if peak else None)
                if "time_s" in rec and "time_s" in base:
                    rec["ratio"] = rec["time_s"] / base["time_s"]
                result["runs"].append(rec)
                if "error" in rec:
                    log(f"N={n} {kind} {v}: {rec['error'][:200]}")
                else:
                    log(f"N={n} {kind} {v}: {rec['time_s']:.4f}s ({rec.get('ratio', float('nan')):.2f}x native) "
                        f"factor {rec.get('factor_s', float('nan')):.4f}s it {rec['iterations']} "
                        f"gmres {rec['gmres']} fallback {rec['fallback']} berr {rec['berr']:.1e} "
                        f"(native {base.get('berr', float('nan')):.1e}) temp {rec.get('temp_copies', float('nan')):.2f} "
                        f"copies, compile {rec['compile_s']:.1f}s"
                        + (f", temp without fallback {rec['temp_copies_without_fallback']:.2f} copies"
                           if rec.get("temp_copies_without_fallback") is not None else ""))
            del a, bs
    result["peak_bytes_in_use"] = peak_bytes(device)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "mixed_probe.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print_table(result["runs"])
    log(f"wrote {path}")
    return 0


def print_table(runs) -> None:
    rows = [r for r in runs if "time_s" in r]
    rows.sort(key=lambda r: (r["kind"], -r["n"], r["time_s"]))
    print(f"{'kind':8} {'N':>6} {'impl':6} {'update':7} {'nb':>5} {'variant':10} {'psolve':7} {'panel':7} "
          f"{'time_s':>8} {'ratio':>6} {'fact_s':>8} {'it':>3} {'fb':>3} {'berr':>8} {'temp':>5}")
    for r in rows:
        print(f"{r['kind']:8} {r['n']:6d} {r['impl']:6} {r.get('update', 'f64'):7} {r.get('block_size', 0):5d} "
              f"{r.get('variant', '-'):10} {r.get('panel_solve', '-'):7} {r.get('panel', '-'):7} "
              f"{r['time_s']:8.4f} {r.get('ratio', 1.0):6.2f} {r.get('factor_s', float('nan')):8.4f} "
              f"{r.get('iterations', 0):3d} {int(r.get('fallback', False)):3d} {r['berr']:8.1e} "
              f"{r.get('temp_copies', float('nan')):5.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
