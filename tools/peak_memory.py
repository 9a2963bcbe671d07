"""Peak GPU memory of one float64 solve beside A, in copies of A: the
general mixed solve (jaxmg.solve(a, b, precision="mixed"), through A^H A
from N=8192 on one GPU) or JAX's lu_factor + lu_solve. One solve per process,
since XLA's peak cannot be reset: A is generated element-wise (no
temporaries), so what the peak adds to A is the solve's.

    PYTHONPATH=. python tools/peak_memory.py {mixed,native} [--n 32768]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

jax.config.update("jax_enable_x64", True)

import jaxmg  # noqa: E402
from tools.bench import matrices  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("route", choices=("mixed", "native"))
    p.add_argument("--n", type=int, default=32768)
    args = p.parse_args()
    n = args.n
    a = jax.block_until_ready(jax.jit(matrices.hashed, static_argnums=(0, 1, 2))(n, "float64", "general", 5))
    b = jnp.ones((n,), jnp.float64)
    stats = jax.devices()[0].memory_stats
    if stats() is None or "peak_bytes_in_use" not in stats():
        raise SystemExit("peak_memory: this device reports no memory statistics (a GPU does)")
    before = stats()["peak_bytes_in_use"]
    if args.route == "native":
        x = jax.jit(lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b))(a, b)
    else:
        x = jaxmg.solve(a, b, precision="mixed")
    jax.block_until_ready(x)
    peak = stats()["peak_bytes_in_use"]
    print(f"{args.route} N={n}: peak A + {(peak - a.nbytes) / a.nbytes:.2f} copies of A "
          f"(before the solve: A + {(before - a.nbytes) / a.nbytes:.2f})")


if __name__ == "__main__":
    main()
