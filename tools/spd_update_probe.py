"""Times the mixed SPD solve's factor at several update precisions and panel
solves on ill-conditioned matrices: what jaxmg.solve(..., assume_a="pos",
precision="mixed") runs, the same solve factored with each of --factors from
the start, and JAX native float64 Cholesky, on the benchmark's matrices of
prescribed condition number, one right-hand side. It answers whether a
more accurate factorisation, where the default's cannot factor A or does
not refine, would beat the float64 fallback.

A factor is UPDATE (a key of precision.UPDATES; the default's panel solve)
or UPDATE:PANEL_SOLVE ("inverse": the block column below the diagonal as a
GEMM with the diagonal block's inverse at the update precision; "trsm": a
triangular solve at float32), either followed by @SPAN: each update GEMM
summed on the tensor cores over at most SPAN terms (blocks.Config.span).
Up to --diagnose N, each factor is also judged on its own: its backward
error ||sA - L L^H||_F / ||sA||_F, and the rate of classic refinement
||(I - M A) z|| / ||z|| (M: its float32 solve) after a few power steps from
random z (refinement converges when it is below 1; a rate near 1 leaves the
work to GMRES), and so is JAX's own float32 Cholesky with its float32
triangular solves, the reference for what float32 allows.

    PYTHONPATH=. python tools/spd_update_probe.py [--sizes 16384 32768]
        [--conds 1e4 1e5 1e6 1e7] [--factors bf16x3 bf16x6:trsm@2048] [--repeats 3]
        [--diagnose 16384] [--budget 420]

First, each update precision's GEMM on its own: the relative error
||C - C64||_F / ||C64||_F of an update-shaped product (2048 rows, K = 2048 and
16384 of uniform [-1, 1) entries) by XLA's preset as one product, by the CPU's
emulation (float32 products of the operands' parts) and, for the X3 / X6
presets, by the emulation's parts multiplied with the one-pass preset (tensor
cores) and by the preset over spans of SPAN = 2048 terms summed in float32
(precision.matmul's span), on the same device: a preset less accurate than
its emulation rounds below what the precision promises. Then each one's time
for a 16384 x 16384 by 2048 x 16384 product, by the same routes.

With --stops K [K...], the default is timed (compiled anew) with a stop
before every K-th block column of its first, left-looking factorisation
(cholesky.STOP_EVERY; 0: none), for choosing K: each stop costs a test on
the host where nothing fails and saves the rest of a failed factorisation.
Run it without XLA's Triton GEMMs (XLA_FLAGS=--xla_gpu_enable_triton_gemm=false),
or each compilation tunes them for minutes. Each of these rows also gives
the program's temporary memory (XLA's memory analysis).

Prints a line per measurement (median ms of --repeats calls after one
compiling call, refinement iterations, fallback, backward error; for the
default, where its first factorisation failed: first_factor_info) and writes
them to $OUT/spd_update_probe.json (OUT defaults to /tmp).
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
from jax import lax

jax.config.update("jax_enable_x64", True)

import jaxmg  # noqa: E402
from jaxmg._src.mixed import api, cholesky, precision, refine, solvers  # noqa: E402
from tools.bench import matrices, timing  # noqa: E402

START = time.monotonic()
POWER_STEPS = 4
JAX_FLOAT32 = "jax float32 Cholesky"
SPAN = 2048


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


def factor_options(name: str) -> dict:
    name, _, span = name.partition("@")
    update, _, panel_solve = name.partition(":")
    return dict(api.SPD, update=update, panel_solve=panel_solve or api.SPD["panel_solve"],
                span=int(span) if span else None)


def with_stops(every: int):
    """public compiled with cholesky.STOP_EVERY = every, once per shape."""
    compiled = {}

    def call(a, b):
        if a.shape not in compiled:
            chosen, cholesky.STOP_EVERY = cholesky.STOP_EVERY, every
            jax.clear_caches()  # the inner jits' traces hold STOP_EVERY
            try:
                compiled[a.shape] = jax.jit(public.__wrapped__).lower(a, b).compile()
            finally:
                cholesky.STOP_EVERY = chosen
                jax.clear_caches()
        return compiled[a.shape](a, b)

    call.temp_bytes = lambda shape: compiled[shape].memory_analysis().temp_size_in_bytes
    return call


def factored_with(name: str):
    return jax.jit(lambda a, b: solvers.spd_solve(a, b, **factor_options(name)))


@jax.jit
def backward_error(a, x, b):
    anorm = jnp.max(jnp.sum(jnp.abs(a), axis=1))
    return refine.backward_error((b - a @ x)[:, None], x[:, None], b[:, None], anorm)[0]


@jax.jit
def _dense_error(a, scale, l):
    """||scale A - L L^H||_F / ||scale A||_F, in A's precision."""
    l = l.astype(a.dtype)
    d = a * scale - jnp.matmul(l, jnp.conj(l).T, precision=lax.Precision.HIGHEST)
    return jnp.linalg.norm(d) / jnp.linalg.norm(a * scale)


@jax.jit
def _factor_error(a, scale, f):
    return _dense_error(a, scale, cholesky.dense(f))


@jax.jit
def _jax_float32_factor(a, scale):
    return lax.linalg.cholesky((a * scale).astype(jnp.float32), symmetrize_input=False)


def _jax_float32_solve(l, r):
    """(L L^T)^{-1} r by JAX's float32 triangular solves."""
    y = lax.linalg.triangular_solve(l, r.astype(l.dtype), left_side=True, lower=True)
    return lax.linalg.triangular_solve(l, y, left_side=True, lower=True, transpose_a=True)


@functools.partial(jax.jit, static_argnums=0)
def _power_step(solve, a, f, scale, z):
    """(I - M A) z / ||.|| per column and its norm over ||z||, M = scale * solve(f, .)."""
    az = jnp.matmul(a, z, precision=lax.Precision.HIGHEST)
    e = z - scale.astype(z.dtype) * solve(f, az).astype(z.dtype)
    ratio = jnp.linalg.norm(e, axis=0) / jnp.linalg.norm(z, axis=0)
    return e / jnp.linalg.norm(e, axis=0), jnp.max(ratio)


def _rate(solve, a, f, scale) -> float:
    z = jax.random.normal(jax.random.key(3), (a.shape[0], 4), a.dtype)
    for _ in range(POWER_STEPS):
        z, rate = _power_step(solve, a, f, scale, z)
    return float(rate)


def _parts_by_one_pass(x, y, spec):
    """x @ y^H as the emulation forms it (its parts' products, the smallest
    first), each product by the one-pass preset the X3 / X6 one is built on."""
    one_pass = getattr(lax.DotAlgorithmPreset, spec.preset.rsplit("_X", 1)[0])
    return precision._emulated(x, y, True, spec, term_precision=one_pass)


def _routes(update: str) -> dict:
    """The ways an update GEMM x @ y^H is formed here, by name: XLA's preset
    as one product, the CPU's emulation and, for X3 / X6, the emulation's
    parts by the one-pass preset and the preset over spans of SPAN terms."""
    spec = precision.UPDATES[update]
    preset = getattr(lax.DotAlgorithmPreset, spec.preset)
    routes = dict(
        preset=lambda x, y: precision._dot(x, y, True, preset),
        emulated=lambda x, y: precision.matmul(x, y, update, adjoint_y=True, emulate=True))
    if spec.parts > 1:
        routes["parts_by_one_pass"] = functools.partial(_parts_by_one_pass, spec=spec)
        routes["spans"] = lambda x, y: precision.matmul(x, y, update, adjoint_y=True, emulate=False,
                                                        span=SPAN)
    return routes


def _measured(row: dict, routes: dict, suffix: str, measure) -> dict:
    for name, product in routes.items():
        try:
            row[name + suffix] = measure(jax.jit(product))
        except Exception as e:  # noqa: BLE001 - a preset this platform lacks is a finding too
            row[name + suffix] = f"{type(e).__name__}: {str(e)[:160]}"
    return row


def gemm_errors(update: str, k: int) -> dict:
    """Each route's relative error for a 2048 x k times k x 2048 product
    (adjoint_y, as the Cholesky's updates)."""
    kx, ky = jax.random.split(jax.random.key(5))
    x = jax.random.uniform(kx, (2048, k), jnp.float32, -1, 1)
    y = jax.random.uniform(ky, (2048, k), jnp.float32, -1, 1)
    exact = jnp.matmul(x.astype(jnp.float64), y.astype(jnp.float64).T, precision=lax.Precision.HIGHEST)

    def error(product):
        c = product(x, y).astype(jnp.float64)
        return float(jnp.linalg.norm(c - exact) / jnp.linalg.norm(exact))

    return _measured(dict(update=update, k=k), _routes(update), "_error", error)


def gemm_times(update: str, repeats: int) -> dict:
    """Median ms of a 16384 x 16384 times 16384 x 2048 product (a late
    left-looking update's shape) by each route but the emulation."""
    x = jax.random.uniform(jax.random.key(6), (16384, 16384), jnp.float32, -1, 1)
    y = x[:2048]
    routes = _routes(update)
    del routes["emulated"]
    return _measured(dict(update=update, shape="16384x16384 @ (2048x16384)^T"), routes, "_ms",
                     lambda product: timed_ms(product, (x, y), repeats)[1])


def first_factor_info(a) -> int:
    """Where the default's first factorisation (api.SPD) failed: the order
    of its first non-positive pivot, or 0."""
    scale = solvers._scale("spd", a, None)
    return int(cholesky.cholesky(a, scale=scale, **factor_options(api.SPD["update"]))[1])


def diagnose(a, name: str) -> dict:
    """The factor's backward error and classic refinement's rate (see the
    module's text). name JAX_FLOAT32: JAX's own float32 Cholesky and
    triangular solves (cuSOLVER and cuBLAS on a GPU), the reference."""
    scale = solvers._scale("spd", a, None)
    if name == JAX_FLOAT32:
        l = _jax_float32_factor(a, scale)
        if not bool(jnp.all(jnp.isfinite(jnp.diagonal(l)))):
            return dict(factor_info=-1)
        return dict(factor_info=0, factor_error=float(_dense_error(a, scale, l)),
                    rate=_rate(_jax_float32_solve, a, l, scale))
    f, info = cholesky.cholesky(a, scale=scale, **factor_options(name))
    if int(info):
        return dict(factor_info=int(info))
    return dict(factor_info=0, factor_error=float(_factor_error(a, scale, f)),
                rate=_rate(cholesky.solve, a, f, jnp.ones((), a.dtype)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768])
    parser.add_argument("--conds", type=float, nargs="+", default=[1e4, 1e5, 1e6, 1e7])
    parser.add_argument("--factors", nargs="+",
                        help="UPDATE or UPDATE:PANEL_SOLVE to factor with from the start "
                             "(default: bf16x3, none with --stops)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--diagnose", type=int, default=0,
                        help="up to this N, also each factor's backward error and refinement rate")
    parser.add_argument("--stops", type=int, nargs="+", default=[],
                        help="time the default with a stop every K block columns (0: none) "
                             "instead of the factors")
    parser.add_argument("--budget", type=float, default=420, help="seconds before skipping the rest")
    args = parser.parse_args()
    if args.stops and args.factors:
        parser.error("--stops times the default alone: leave --factors out")
    args.factors = args.factors or ([] if args.stops else ["bf16x3"])
    for name in args.factors:
        solvers.spd_solve(jnp.eye(4), jnp.ones(4), **factor_options(name))  # bad names fail here
    if any(k < 0 for k in args.stops):
        parser.error(f"--stops takes counts of block columns >= 0, got {args.stops}")
    impls = {"jax native": native, "mixed (the default)": public}
    if args.stops:
        del impls["mixed (the default)"]
        impls.update({f"mixed (the default), stops every {k}": with_stops(k) for k in args.stops})
    impls.update({f"mixed, {name}": factored_with(name) for name in args.factors})
    rows = []

    def record(row):
        rows.append(row)
        print(json.dumps(row), flush=True)

    updates = dict.fromkeys([api.SPD["update"]]
                            + [name.partition("@")[0].partition(":")[0] for name in args.factors])
    if not args.stops:
        for update in updates:
            for k in (2048, 16384):
                record(gemm_errors(update, k))
            record(gemm_times(update, args.repeats))

    for n in args.sizes:
        for cond in args.conds:
            a = jax.jit(lambda seed: matrices.conditioned(n, "float64", "spd", cond, seed))(n)
            b = jax.random.normal(jax.random.key(1), (n,), jnp.float64)
            failed_at = None  # the matrix's, found once for every impl that reports it
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
                if fn is public or hasattr(fn, "temp_bytes"):
                    failed_at = first_factor_info(a) if failed_at is None else failed_at
                    row["first_factor_info"] = failed_at
                if hasattr(fn, "temp_bytes"):
                    row["temp_bytes"] = fn.temp_bytes(a.shape)
                factor = name.removeprefix("mixed, ")
                if n <= args.diagnose and factor in args.factors:
                    row["diagnosis"] = diagnose(a, factor)
                record(row)
            if n <= args.diagnose and time.monotonic() - START <= args.budget:
                record(dict(n=n, cond=cond, impl=JAX_FLOAT32, diagnosis=diagnose(a, JAX_FLOAT32)))
            del a
    out = os.path.join(os.environ.get("OUT", "/tmp"), "spd_update_probe.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
