"""The main job: a real distributed solve on the devices present.

    python -m jaxmg.demo [-n N] [--dtype D] [--tile T] [--processes K]

Generates an SPD, a Hermitian and a general matrix row-sharded over every
device (8 forced host CPU devices when there is no GPU), runs the Cholesky
solve, SPD inverse, eigendecomposition, LU solve and log-determinant, and a
Gaussian-process style gradient through the sharded factor, and prints the
layout, residuals and times. With --processes K the same job runs as K
processes of one device each (one GPU each where there are GPUs), launched
with `python -m jaxmg.launch`. Exits non-zero if a check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _gpu_present() -> bool:
    return any(os.path.exists(f"/dev/nvidia{i}") for i in range(16))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m jaxmg.demo",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="matrix order N (default 1000)")
    parser.add_argument("--devices", type=int, default=8, help="host CPU devices without a GPU")
    parser.add_argument("--tile", type=int, default=32, help="block-cyclic tile T_A (default 32)")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64", "complex64", "complex128"])
    parser.add_argument("--processes", type=int, default=0,
                        help="run as this many processes of one device each")
    args = parser.parse_args()
    launched = "JAXMG_COORDINATOR" in os.environ
    if args.processes and not launched:
        import jaxmg.launch

        os.environ["JAXMG_DEMO_DEVICES"] = "1"
        sys.exit(jaxmg.launch.run(args.processes, [sys.executable, "-m", "jaxmg.demo", *sys.argv[1:]],
                                  one_gpu_per_process=_gpu_present()))
    devices_here = int(os.environ.get("JAXMG_DEMO_DEVICES", args.devices))
    if not _gpu_present():
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices_here}"
        )
    import jax
    import jaxmg.launch

    if not _gpu_present() and not os.environ.get("JAX_PLATFORMS"):
        jax.config.update("jax_platforms", "cpu")  # jax read JAX_PLATFORMS when jaxmg imported it
    jaxmg.launch.initialize()

    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    if args.dtype in ("float64", "complex128"):
        jax.config.update("jax_enable_x64", True)  # the demo's choice, not the library's
    import jaxmg
    from jax.experimental import multihost_utils
    from jaxmg._src.engines import mg

    # Every process checks its results; the first one prints them.
    say = print if jax.process_index() == 0 else (lambda *args, **kwargs: None)

    def host(x):  # the whole array, in every process
        if jax.process_count() == 1:
            return np.asarray(x)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    devices = jax.devices()
    mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
    n, dtype = args.n, np.dtype(args.dtype)
    n_dev = len(devices)
    tile = mg.choose_tile(n, n_dev, args.tile)
    n_pad = mg.padded_size(n, n_dev, tile)
    say(f"jaxmg {jaxmg.__version__} from {os.path.dirname(jaxmg.__file__)}, jax {jax.__version__}")
    say(f"{n_dev} x {devices[0].platform} devices "
          f"({devices[0].device_kind}) in {jax.process_count()} process(es); "
          f"N={n} {dtype.name}, tile T_A={tile}, padded N={n_pad}")

    rng = np.random.default_rng(0)
    m = rng.standard_normal((n, n))
    if dtype.kind == "c":
        m = m + 1j * rng.standard_normal((n, n))
    spd = (m @ m.conj().T / n + np.eye(n)).astype(dtype)
    herm = ((m + m.conj().T) / 2).astype(dtype)
    b = rng.standard_normal((n, 4)).astype(dtype)
    gen = (m / np.sqrt(n) + 3 * np.eye(n)).astype(dtype)

    rows = P("x", None) if n % n_dev == 0 else P()
    kw = {} if n % n_dev == 0 else {"mesh": mesh, "spec": P("x", None)}
    def put(x, spec):  # every process builds its own shards
        return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda i: x[i])

    a, h, g = put(spd, rows), put(herm, rows), put(gen, rows)
    b_dev = put(b, P())

    say("\nblock-cyclic layout: which device holds each tile of T_A columns")
    n_tiles = n_pad // tile
    shown = min(n_tiles, 24)
    say("  tile   " + " ".join(f"{t:>3}" for t in range(shown)) + (" ..." if shown < n_tiles else ""))
    say("  device " + " ".join(f"{t % n_dev:>3}" for t in range(shown)))
    say(f"  (device d holds tiles d, d+{n_dev}, d+{2 * n_dev}, ...; a holds rows "
          f"{n_pad // n_dev} per device before conversion)")

    def timed(fn):
        out = jax.block_until_ready(fn())  # compile + first run
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        return out, time.perf_counter() - start

    eps = np.finfo(dtype).eps
    (x, info), t_potrs = timed(lambda: jaxmg.potrs(a, b_dev, return_info=True, tile_size=args.tile, **kw))
    x = host(x)
    r_potrs = np.linalg.norm(spd @ x - b) / (np.linalg.norm(spd) * np.linalg.norm(x))
    inv, t_potri = timed(lambda: jaxmg.potri(a, tile_size=args.tile, **kw))
    r_potri = np.linalg.norm(host(inv) @ spd - np.eye(n)) / np.sqrt(n)
    (w, v), t_syevd = timed(lambda: jaxmg.syevd(h, tile_size=args.tile, **kw))
    w, v = host(w), host(v)
    r_syevd = np.linalg.norm(herm @ v - v * w) / np.linalg.norm(herm)
    r_orth = np.linalg.norm(v.conj().T @ v - np.eye(n)) / np.sqrt(n)

    lu = jaxmg.lu_factor(g, tile_size=args.tile, **kw)
    x_lu, t_lu = timed(lambda: jaxmg.lu_solve(jaxmg.lu_factor(g, tile_size=args.tile, **kw), b_dev))
    x_lu = host(x_lu)
    r_lu = np.linalg.norm(gen @ x_lu - b) / (np.linalg.norm(gen) * np.linalg.norm(x_lu))
    (sign, logabs), t_det = timed(lambda: jaxmg.slogdet(g, tile_size=args.tile, **kw))
    sign_ref, logabs_ref = np.linalg.slogdet(gen)
    r_det = abs(float(host(logabs)) - logabs_ref) / abs(logabs_ref) + abs(complex(host(sign)) - sign_ref)

    # A Gaussian-process negative log-likelihood, differentiated through the factor.
    y = put(b[:, 0], P())

    def nll(a):
        f = jaxmg.cho_factor(a, tile_size=args.tile, **kw)
        return 0.5 * jnp.real(jnp.vdot(y, jaxmg.cho_solve(f, y))) + 0.5 * jaxmg.cho_logdet(f)

    with jax.set_mesh(mesh):
        grad = jax.jit(jax.grad(nll))
        gr, t_grad = timed(lambda: grad(a))
    y_local = jnp.asarray(b[:, 0])

    def nll_reference(a):  # the same loss with JAX's own functions on one device
        f = jsl.cho_factor(a)
        return (0.5 * jnp.real(jnp.vdot(y_local, jsl.cho_solve(f, y_local)))
                + 0.5 * jnp.linalg.slogdet(a)[1])

    expected = np.asarray(jax.grad(nll_reference)(jnp.asarray(spd)))
    r_grad = np.linalg.norm(host(gr) - expected) / np.linalg.norm(expected)

    failed = 0
    say(f"\n{'routine':<8} {'time (s)':>10} {'residual':>12} {'residual/eps':>13}  check")
    for name, t, r in [
        ("potrs", t_potrs, r_potrs),
        ("potri", t_potri, r_potri),
        ("syevd", t_syevd, max(r_syevd, r_orth)),
        ("lu", t_lu, r_lu),
        ("slogdet", t_det, r_det),
        ("grad", t_grad, r_grad),
    ]:
        ok = r < 1e3 * eps * n
        failed += not ok
        say(f"{name:<8} {t:>10.4f} {r:>12.2e} {r / eps:>13.1f}  {'ok' if ok else 'FAILED'}")
    v_dev = jaxmg.syevd(h, tile_size=args.tile, **kw)[1]
    say(f"\npotrs info={int(host(info))}; input a: {a.sharding.spec}; eigenvectors: "
          f"{v_dev.sharding.spec}; gradient: {gr.sharding.spec}; LU factor info={int(host(lu.info))}")
    if failed:
        print(f"process {jax.process_index()}: {failed} check(s) FAILED")
        sys.exit(1)


if __name__ == "__main__":
    main()
