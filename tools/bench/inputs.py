"""The inputs of one problem on the devices: A's sharding, how many input pairs
to rotate between, and the pairs themselves (rebuilt when a call donated A)."""

from __future__ import annotations

import time

from . import matrices
from .cases import ROTATE_MAX_N, grid_shape
from .machine import device_memory_bytes, too_big


class Devices:
    """The worker's devices: meshes over the first few, and their memory."""

    def __init__(self) -> None:
        import jax

        self.devices = jax.devices()
        self.on_cpu = self.devices[0].platform == "cpu"

    def sharding(self, n_devices: int, grid: str | None = None):
        """A's sharding: rows P("x", None) over a 1-D mesh of the first n_devices, or
        blocks P("r", "c") over an R x C mesh of the first R*C devices."""
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        if grid:
            r, c = grid_shape(grid)
            mesh = jax.make_mesh((r, c), ("r", "c"), devices=self.devices[:r * c])
            return NamedSharding(mesh, P("r", "c"))
        return NamedSharding(Mesh(np.array(self.devices[:n_devices]), ("x",)), P("x", None))

    def memory(self, n_devices: int) -> tuple[int, int]:
        """(one device's memory, the memory of n_devices together)."""
        one = device_memory_bytes(self.devices[0])
        return one, one if self.on_cpu else one * n_devices

    def input_count(self, n: int, dtype: str, n_devices: int) -> tuple[int, str | None]:
        """How many input matrices to rotate between, or why not even one is tried."""
        import numpy as np

        matrix = n * n * np.dtype(dtype).itemsize
        _, total = self.memory(n_devices)
        # Two inputs plus about three working matrices (the call's copy, its
        # result, the residual check) in 90% of the memory: rotate.
        if n <= ROTATE_MAX_N and (2 + 3) * matrix <= 0.9 * total:
            return 2, None
        reason = too_big(n, np.dtype(dtype).itemsize, total, self.on_cpu)
        return (0, reason) if reason else (1, None)


def matrix_kind(routine: str) -> str:
    return {"syevd": "wigner", "lu": "general"}.get(routine, "spd")


class Inputs:
    """`count` (A, b) pairs built where they live: A with `sharding`, b (N, 1)
    standard normal and replicated. A is the hashed matrix of its routine's kind,
    or with `cond` a matrix of that 2-norm condition number."""

    def __init__(self, routine: str, n: int, dtype: str, sharding, count: int,
                 cond: float | None = None) -> None:
        import jax
        from jax.sharding import NamedSharding, PartitionSpec as P

        self.sharding = sharding
        self.n = n
        kind = matrix_kind(routine)
        if cond is None:
            build = lambda seed: matrices.hashed(n, dtype, kind, seed)  # noqa: E731
        else:
            build = lambda seed: matrices.conditioned(n, dtype, kind, cond, seed)  # noqa: E731
        self._make_a = jax.jit(build, out_shardings=sharding)
        make_b = jax.jit(lambda key: jax.random.normal(key, (n, 1), dtype),
                         out_shardings=NamedSharding(sharding.mesh, P()))
        self.pairs: list[tuple] = []
        for i in range(count):
            a = self.rebuild(i)
            self.pairs.append((a, jax.block_until_ready(make_b(jax.random.key(self._seed(i))))))

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, k: int) -> tuple:
        return self.pairs[k]

    def _seed(self, k: int) -> int:
        return 1000 * self.n + k

    def rebuild(self, k: int):
        """A of pair k, made again from its seed (deterministic)."""
        import jax

        return jax.block_until_ready(self._make_a(self._seed(k) % 2**31))

    def live(self, k: int) -> tuple[tuple, float]:
        """Input pair k with A alive (rebuilt if a call donated it), and the rebuild's seconds."""
        a, b = self.pairs[k]
        if not a.is_deleted():
            return (a, b), 0.0
        start = time.perf_counter()
        a = self.rebuild(k)
        self.pairs[k] = (a, b)
        return (a, b), time.perf_counter() - start
