"""The GEMMs of the trailing updates, at a named precision.

On GPUs each name is one of XLA's dot algorithms (tensor cores for the BF16,
FP16 and TF32 ones). XLA:CPU accepts some of those presets but computes them
in float32, so on CPUs the rounding is emulated: operands are split into
BF16 or TF32 parts (`lax.reduce_precision`), or rounded to float16 itself
(whose subnormals reduce_precision would flush), and the parts multiplied in
float32, which is exact for parts of at most 11 significant bits, with
float32 accumulation: the same numerics, so the solvers' convergence can be
tested on a CPU. Complex operands go through one real GEMM of twice the
width ([Xr Xi] times a 2 x 2 real block matrix), since the presets are real.

FP16 has 3 more significand bits than BF16 but float16's range (largest
65504, subnormal below 6.1e-5): the callers keep its operands near 1 (the
Cholesky scales A by a power of two to a unit diagonal maximum, so every
entry of L is at most about 1, and scales the diagonal block's inverse).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Update:
    """One update precision: the XLA preset, and how a CPU emulates it
    (the significand bits of each part and which part products it sums)."""

    preset: str
    mantissa_bits: int | None  # None: float32 or float64 arithmetic itself
    parts: int
    products: tuple[tuple[int, int], ...]
    exponent_bits: int = 8  # 5: float16, emulated by rounding to float16 itself


_X1 = ((0, 0),)
_X3 = ((1, 0), (0, 1), (0, 0))
_X6 = ((2, 0), (1, 1), (0, 2), (1, 0), (0, 1), (0, 0))

UPDATES = {
    "bf16": Update("BF16_BF16_F32", 7, 1, _X1),
    "bf16x3": Update("BF16_BF16_F32_X3", 7, 2, _X3),
    "bf16x6": Update("BF16_BF16_F32_X6", 7, 3, _X6),
    "fp16": Update("F16_F16_F32", 10, 1, _X1, exponent_bits=5),
    "tf32": Update("TF32_TF32_F32", 10, 1, _X1),
    "tf32x3": Update("TF32_TF32_F32_X3", 10, 2, _X3),
    "f32": Update("F32_F32_F32", None, 1, _X1),
    "f64": Update("F64_F64_F64", None, 1, _X1),
}


def check_update(update: str, work_dtype) -> str:
    if update not in UPDATES:
        raise ValueError(f"update={update!r} is not a known precision; use one of {sorted(UPDATES)}")
    if update == "f64" and jnp.finfo(work_dtype).bits < 64:
        raise ValueError('update="f64" needs panel="float64" (the updates cannot be wider than the panel)')
    return update


def matmul(x, y, update: str, *, adjoint_y: bool, emulate: bool | None = None):
    """x @ y^H (adjoint_y) or x @ y, the products at precision `update`,
    accumulated and returned in x's dtype. emulate: None picks by platform
    (emulated on CPU, XLA's preset elsewhere)."""
    spec = UPDATES[update]
    if update != "f64" and jnp.finfo(x.dtype).bits == 64:  # a float64 panel, 32-bit updates
        narrow = jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32
        out = matmul(x.astype(narrow), y.astype(narrow), update, adjoint_y=adjoint_y, emulate=emulate)
        return out.astype(x.dtype)
    if spec.mantissa_bits is None:
        return _exact(x, y, adjoint_y)
    if jnp.iscomplexobj(x):
        xr, yr = _real_embedding(x, y, adjoint_y)
        out = matmul(xr, yr, update, adjoint_y=adjoint_y, emulate=emulate)
        half = out.shape[1] // 2
        return lax.complex(out[:, :half], out[:, half:])
    native = lambda x, y: _dot(x, y, adjoint_y, getattr(lax.DotAlgorithmPreset, spec.preset))  # noqa: E731
    emulated = lambda x, y: _emulated(x, y, adjoint_y, spec)  # noqa: E731
    if emulate is None:
        return lax.platform_dependent(x, y, cpu=emulated, default=native)
    return (emulated if emulate else native)(x, y)


def _exact(x, y, adjoint_y: bool):
    if adjoint_y:
        y = jnp.conj(y) if jnp.iscomplexobj(y) else y
    return _dot(x, y, adjoint_y, lax.Precision.HIGHEST)


def _dot(x, y, adjoint_y: bool, precision):
    dims = (((1,), (1,)), ((), ())) if adjoint_y else (((1,), (0,)), ((), ()))
    return lax.dot_general(x, y, dims, precision=precision, preferred_element_type=x.dtype)


def _real_embedding(x, y, adjoint_y: bool):
    """Real matrices whose product holds [Re(x op(y)), Im(x op(y))] side by side."""
    xr = jnp.concatenate([x.real, x.imag], axis=1)
    if adjoint_y:  # x conj(y)^T: the rows of y carry the output columns
        yr, yi = y.real, -y.imag
        top = jnp.concatenate([yr, -yi], axis=1)
        return xr, jnp.concatenate([top, jnp.concatenate([yi, yr], axis=1)], axis=0)
    yr, yi = y.real, y.imag
    top = jnp.concatenate([yr, yi], axis=1)
    return xr, jnp.concatenate([top, jnp.concatenate([-yi, yr], axis=1)], axis=0)


def _parts(x, spec: Update):
    parts, rest = [], x
    for _ in range(spec.parts):
        if spec.exponent_bits == 5:
            part = rest.astype(jnp.float16).astype(rest.dtype)
        else:
            part = lax.reduce_precision(rest, exponent_bits=spec.exponent_bits,
                                        mantissa_bits=spec.mantissa_bits)
        parts.append(part)
        rest = rest - part
    return parts


def _emulated(x, y, adjoint_y: bool, spec: Update):
    xs = _parts(x, spec)
    ys = _parts(y, spec)
    total = None
    for i, j in spec.products:  # the smallest products first, as the presets sum them
        term = _dot(xs[i], ys[j], adjoint_y, lax.Precision.HIGHEST)
        total = term if total is None else total + term
    return total


def available(update: str, device=None) -> bool:
    """Whether `device` (default: the first) compiles and runs this precision:
    a small GEMM, for probing a platform's presets."""
    device = device or jax.devices()[0]
    x = jax.device_put(jnp.ones((64, 64), jnp.float32), device)
    try:
        jax.block_until_ready(jax.jit(lambda x: matmul(x, x, update, adjoint_y=False))(x))
    except Exception:  # noqa: BLE001 - any compile or run failure means "not here"
        return False
    return True
