"""What the machine has (devices, their memory, versions) and what fits in it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Any


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory_bytes(device) -> int:
    """Memory JAX may allocate on `device` (host memory for CPU devices)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # CPU devices and some plugins do not report memory
        stats = {}
    return int(stats.get("bytes_limit") or host_memory_bytes())


def gpu_total_bytes(count: int) -> list[int] | None:
    """Physical memory of the first `count` visible GPUs (nvidia-smi), or None."""
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=60).stdout
        mib = {int(i): int(m) for i, m in (line.split(",") for line in text.strip().splitlines())}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        order = [int(i) for i in visible.split(",")] if visible else sorted(mib)
        return [mib[i] * 2**20 for i in order[:count]] if len(order) >= count else None
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return None


def machine_info() -> dict[str, Any]:
    import jax
    import jaxlib

    devices = jax.devices()
    on_gpu = devices[0].platform == "gpu"
    return {
        "platform": devices[0].platform,
        "device_count": len(devices),
        "device_kinds": [d.device_kind for d in devices],
        # What JAX's allocator may use (its pool; host memory for CPU devices) ...
        "device_memory_bytes": [device_memory_bytes(d) for d in devices],
        # ... and the devices' physical memory (GPUs only, from nvidia-smi).
        "device_total_bytes": gpu_total_bytes(len(devices)) if on_gpu else None,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "python": sys.version.split()[0],
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
    }


def too_big(n: int, itemsize: int, total: int, on_cpu: bool) -> str | None:
    """Why a problem is not even tried on devices with `total` bytes, or None.

    On GPUs a call that runs out of memory raises and is recorded as OOM, so
    anything that leaves room for A itself is tried. Host memory is not so
    forgiving (the kernel's OOM killer, swapping): on CPU, 4 copies must fit."""
    copies, share = (4, 0.9) if on_cpu else (1, 0.97)
    need = copies * n * n * itemsize
    if need <= share * total:
        return None
    what = "4 copies of A need" if on_cpu else "A alone needs"
    return (f"not attempted: {what} {need / 2**30:.1f} GiB, more than {share:.0%} of the "
            f"{total / 2**30:.1f} GiB the device(s) have")


def one_device_too_small(n: int, itemsize: int, one: int, on_cpu: bool) -> str | None:
    """Why JAX's one-device solver is not tried on a device of `one` bytes, or None:
    A whole on one device and its result, at the least (on CPU: 4 copies in half
    the host memory, as a crash there is not a clean error)."""
    matrix = n * n * itemsize
    copies, share = (4, 0.5) if on_cpu else (2, 0.95)
    if copies * matrix <= share * one:
        return None
    return (f"not attempted: {copies} copies of A ({copies * matrix / 2**30:.1f} "
            f"GiB) exceed {share:.0%} of one device ({one / 2**30:.1f} GiB)")
