"""Measures whether a blocked LU whose trailing updates run on tensor cores,
with the next panel factored beside them (look-ahead on a second stream), can
reach the mixed-precision LU target on one GPU: the factorisation's GPU time
and the backward error after each step of classic float64 refinement, against
JAX native float64 (lu_factor + lu_solve), on the benchmark's U S V^T
matrices. The LU is tools/lookahead_probe.cu (panels by cuSOLVER's getrf or
by the file's tall-panel LU, laswp, cuBLAS trsm and GEMMs: FP32, TF32, or
TF32x3 from operands split exactly as x = tf32(x) + rest), built here by nvcc.
With look-ahead the GEMMs may be sized for fewer SMs, or the SMs split between
the panels and the updates by green contexts; updates "none" times the rest
alone. It also times one refinement step.

    PYTHONPATH=. python tools/lookahead_probe.py [--sizes 32768]
        [--variants 2048:tf32:1:tall 2048:tf32x3:1:getrf:116 1024:tf32:1:getrf:g24 ...]
        [--steps 6] [--panels 32768x2048 16384x32 ...]

--panels first times the panels alone (M x W, float32, the median of 5 runs)
by both panel factorisations, with the largest difference between the two
results and whether their pivots agree.

Needs a CUDA GPU and the toolkit (CUDA_HOME, default /usr/local/cuda).
Prints a line per variant and a table, and writes $OUT/lookahead_probe.json
(OUT defaults to /tmp).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

jax.config.update("jax_enable_x64", True)

from tools.bench import matrices  # noqa: E402

UPDATES = ("fp32", "tf32", "tf32x3", "none")  # the enums of lookahead_probe.cu
PANELS = ("getrf", "tall")
DEFAULT_VARIANTS = ("32768:fp32:0", "2048:fp32:0", "2048:fp32:1", "2048:tf32:0", "2048:tf32:1",
                    "1024:tf32:1", "512:tf32:1", "4096:tf32:1", "2048:tf32x3:0",
                    "2048:tf32x3:1", "1024:tf32x3:1")


def variant(text: str) -> tuple[int, str, bool, str, str]:
    """--variants' NB:UPDATE:LOOKAHEAD[:PANEL[:SMS]] (panel width, UPDATES, 0 or
    1, PANELS (getrf when left out), SMS: N for the SMs cuBLAS sizes the updates
    for, gN for N SMs of the panels' own (green contexts); 0, the default: all
    for both)."""
    parts = text.split(":")
    nb, update, ahead, panel, sms = parts + ["getrf", "0"][len(parts) - 3:] \
        if 3 <= len(parts) <= 5 else ("",) * 5
    if not nb.isdigit() or int(nb) < 1 or update not in UPDATES \
            or ahead not in ("0", "1") or panel not in PANELS or not sms.lstrip("g").isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NB:UPDATE:LOOKAHEAD[:PANEL[:SMS]] with UPDATE in {UPDATES}, "
            f"LOOKAHEAD 0 or 1, PANEL in {PANELS} and SMS a count or g and a count")
    return int(nb), update, ahead == "1", panel, sms


def panel_shape(text: str) -> tuple[int, int]:
    """--panels' MxW (rows, columns; W a multiple of 32, M >= W)."""
    m, _, w = text.partition("x")
    if not (m.isdigit() and w.isdigit()) or int(w) % 32 or int(m) < int(w):
        raise argparse.ArgumentTypeError(f"{text!r} is not MxW with W a multiple of 32, M >= W")
    return int(m), int(w)


def load_library():
    here = os.path.dirname(os.path.abspath(__file__))
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    out = os.path.join(tempfile.gettempdir(), "lookahead_probe.so")
    subprocess.run([f"{cuda}/bin/nvcc", "-O2", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
                    "-arch=native", os.path.join(here, "lookahead_probe.cu"), f"-L{cuda}/lib64",
                    "-lcusolver", "-lcublas", "-lcudart", "-lcuda", "-o", out], check=True)
    jax.devices()  # JAX's CUDA libraries first: the probe's sonames resolve to them
    lib = ctypes.CDLL(out)
    lib.lu_lookahead.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float)]
    lib.panel_only.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                               ctypes.POINTER(ctypes.c_float)]
    return lib


@jax.jit
def _solve(lu, pivots, r):
    return jsl.lu_solve((lu, pivots), r.astype(jnp.float32)).astype(jnp.float64)


def factor(lib, a, nb: int, update: str, lookahead: bool, panel: str = "getrf", sms: str = "0"):
    """(lu, pivots, info, ms): the probe's LU of float32 `a`, as jax.scipy's."""
    n = a.shape[0]
    # A^T row-major is A column-major; the probe overwrites this fresh buffer.
    work = jax.block_until_ready(jnp.asarray(a.T, jnp.float32) + 0)
    ipiv = jax.block_until_ready(jnp.zeros((n,), jnp.int32) + 0)
    info, ms = ctypes.c_int(0), ctypes.c_float(0)
    rc = lib.lu_lookahead(work.unsafe_buffer_pointer(), n, nb, UPDATES.index(update),
                          int(lookahead), PANELS.index(panel), 0 if sms[0] == "g" else int(sms),
                          int(sms[1:]) if sms[0] == "g" else 0, ipiv.unsafe_buffer_pointer(),
                          ctypes.byref(info), ctypes.byref(ms))
    if rc != 0:
        raise RuntimeError(f"lu_lookahead failed (rc {rc}); its message is on stderr")
    pivots = ((jnp.arange(n) // nb) * nb + ipiv - 1).astype(jnp.int32)
    return work.T, pivots, info.value, ms.value


def panel(lib, p, kind: str):
    """(lu, ipiv, info, ms) of the M x W float32 panel p by PANELS' kind."""
    m, w = p.shape
    work = jax.block_until_ready(jnp.asarray(p.T, jnp.float32) + 0)  # column-major
    ipiv = jax.block_until_ready(jnp.zeros((w,), jnp.int32) + 0)
    info, ms = ctypes.c_int(0), ctypes.c_float(0)
    rc = lib.panel_only(work.unsafe_buffer_pointer(), m, w, PANELS.index(kind), 5,
                        ipiv.unsafe_buffer_pointer(), ctypes.byref(info), ctypes.byref(ms))
    if rc != 0:
        raise RuntimeError(f"panel_only failed (rc {rc}); its message is on stderr")
    return work.T, ipiv, info.value, ms.value


def panels(lib, shapes) -> list[dict]:
    records = []
    for m, w in shapes:
        p = jax.random.normal(jax.random.key(m + w), (m, w), jnp.float32)
        (lu0, piv0, info0, ms0), (lu1, piv1, info1, ms1) = (panel(lib, p, k) for k in PANELS)
        scale = float(jnp.max(jnp.abs(lu0)))
        r = {"m": m, "w": w, "getrf_ms": ms0, "tall_ms": ms1, "info": [info0, info1],
             "pivots_agree": bool(jnp.all(piv0 == piv1)),
             "max_difference": float(jnp.max(jnp.abs(lu0 - lu1))) / scale}
        print(json.dumps(r), flush=True)
        records.append(r)
    print(f"\n{'M':>6} {'W':>5} | {'getrf ms':>8} | {'tall ms':>8} | us/column getrf, tall | pivots")
    for r in records:
        print(f"{r['m']:>6} {r['w']:>5} | {r['getrf_ms']:8.2f} | {r['tall_ms']:8.2f} | "
              f"{1e3 * r['getrf_ms'] / r['w']:6.2f}, {1e3 * r['tall_ms'] / r['w']:6.2f} | "
              f"{'agree' if r['pivots_agree'] else 'DIFFER'} (max diff {r['max_difference']:.1e})")
    return records


@jax.jit
def _step(a, b, x, lu, pivots):
    return x + _solve(lu, pivots, b - a @ x)


def step_ms(a, b, lu, pivots) -> float:
    """One classic refinement step's time (residual in float64, float32 solve), median of 5."""
    x = jax.block_until_ready(_step(a, b, jnp.zeros_like(b), lu, pivots))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        x = jax.block_until_ready(_step(a, b, x, lu, pivots))
        times.append(1e3 * (time.perf_counter() - t))
    return sorted(times)[2]


def refinement(a, b, lu, pivots, steps: int) -> list[float]:
    """Normwise backward errors of x after 0, 1, ... classic refinement steps."""
    anorm = jnp.max(jnp.sum(jnp.abs(a), axis=1))
    x, errors = _solve(lu, pivots, b), []
    for _ in range(steps):
        r = b - a @ x
        scale = anorm * jnp.max(jnp.abs(x)) + jnp.max(jnp.abs(b))
        errors.append(float(jnp.max(jnp.abs(r)) / scale))
        if not errors[-1] > 1e-17:
            break
        x = x + _solve(lu, pivots, r)
    return errors


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[32768])
    p.add_argument("--cond", type=float, default=10)
    p.add_argument("--variants", type=variant, nargs="*",
                   metavar="NB:UPDATE:LOOKAHEAD[:PANEL[:SMS]]",
                   default=[variant(v) for v in DEFAULT_VARIANTS])
    p.add_argument("--panels", type=panel_shape, nargs="*", default=[], metavar="MxW")
    p.add_argument("--steps", type=int, default=6, help="refinement steps to record")
    args = p.parse_args()
    lib = load_library()
    out_path = os.path.join(os.environ.get("OUT", "/tmp"), "lookahead_probe.json")
    records = [{"panels": panels(lib, args.panels)}] if args.panels else []
    with open(out_path, "w") as f:
        json.dump(records, f, indent=1)
    native = jax.jit(lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b))
    for n in args.sizes:
        a = jax.block_until_ready(matrices.conditioned(n, "float64", "general", args.cond, seed=1))
        b = jax.random.normal(jax.random.key(2), (n,), jnp.float64)
        jax.block_until_ready(native(a, b))
        t = time.perf_counter()
        jax.block_until_ready(native(a, b))
        ms = 1e3 * (time.perf_counter() - t)
        records.append({"n": n, "variant": "jax native float64 solve", "ms": ms})
        lu, pivots, _, _ = factor(lib, a, min(2048, n), "tf32", True)  # warm-up
        records.append({"n": n, "variant": "one refinement step", "ms": step_ms(a, b, lu, pivots)})
        del lu, pivots
        for nb, update, ahead, kind, sms in args.variants:
            nb = min(nb, n)
            lu, pivots, info, ms = factor(lib, a, nb, update, ahead, kind, sms)
            name = f"nb {nb} {update} look-ahead {int(ahead)} {kind}" + (f" sms {sms}" if sms != "0" else "")
            records.append({"n": n, "variant": name,
                            "ms": ms, "info": info,
                            "backward_errors": [] if update == "none" else
                            refinement(a, b, lu, pivots, args.steps)})
            del lu, pivots
        for r in records[-len(args.variants) - 2:]:
            print(json.dumps(r), flush=True)
        with open(out_path, "w") as f:
            json.dump(records, f, indent=1)
        del a
    print(f"\n{'N':>6} | {'variant':<34} | {'ms':>7} | backward error after 0, 1, 2, ... steps")
    for r in records[1 if args.panels else 0:]:
        errors = " ".join(f"{e:.1e}" for e in r.get("backward_errors", []))
        print(f"{r['n']:>6} | {r['variant']:<34} | {r['ms']:7.1f} | {errors}")


if __name__ == "__main__":
    main()
