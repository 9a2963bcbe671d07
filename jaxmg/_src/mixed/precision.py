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

The tensor cores add a product's terms into float32 with an error that
grows with their number K, faster than float32 rounding would: on an H100,
for 2048 x K times K x 2048 products of uniform [-1, 1) entries, the BF16x6
preset's relative error was 1.9e-6 at K=2048 and 1.8e-5 at K=16384, where
its emulation (float32 products of the same parts) erred 3.3e-7 and 6.3e-7
and SGEMM 1.3e-6 at 16384 (TF32x3: 4.9e-6 and 3.8e-5; BF16x3: 1.2e-5 and
2.5e-5; the same parts multiplied one by one on the tensor cores erred as
the preset: tools/spd_update_probe.py). `span` bounds K per tensor-core
product: the products over spans of that many terms are summed in float32.

FP16 has 3 more significand bits than BF16 but float16's range (largest
65504, subnormal below 6.1e-5): the callers keep its operands near 1 (the
Cholesky scales A by a power of two to a unit diagonal maximum, so every
entry of L is at most about 1, and scales the diagonal block's inverse).

XLA compiles each GEMM of a program as cuBLAS calls and as Triton kernels of
many tilings, and times them all on the program's first run. The mixed
solves' GEMMs come in many shapes (one per block column), and that tuning
was most of their first call, for kernels no faster than cuBLAS's: on one
H100 (tools/compile_probe.py, docs/benchmarks.md), the SPD solve at cond 10
compiled in 231 s at N=32768 and then took 87.8 ms, without Triton GEMMs in
35 s and 86.7 ms; the general one in 72 s and 229 ms, without them 12 s and
207 ms. So the mixed solves' programs (`jit`) compile without them.

They also compile without XLA's command buffers (CUDA graphs). XLA records
a program's graph on its second run: on one H100 an eager SPD solve at
N=16384 and cond 10 took 57 ms on its second call, 26 ms after that, and
with no command buffers 25 ms from the second call on (so the graph's
replay was also slower than plain launches).

Under a caller's own jax.jit the caller's options hold:
jax.jit(f, compiler_options=COMPILER_OPTIONS) passes these.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jax_core


@dataclasses.dataclass(frozen=True)
class Update:
    """One update precision: the XLA preset, and how a CPU emulates it
    (the significand bits of each part and which part products it sums)."""

    preset: str
    mantissa_bits: int | None  # None: float32 or float64 arithmetic itself
    parts: int
    products: tuple[tuple[int, int], ...]
    exponent_bits: int = 8  # 5: float16, emulated by rounding to float16 itself


COMPILER_OPTIONS = {"xla_gpu_enable_triton_gemm": False, "xla_gpu_enable_command_buffer": ""}


def jit(fun=None, **options):
    """jax.jit, compiling with COMPILER_OPTIONS where the call is a program
    of its own: JAX takes compiler options only for a jit that is not traced
    into another program, and a transformation (grad, vmap) may trace it
    into one, so under any of them the jit has none. As a decorator with or
    without jax.jit's options."""
    if fun is None:
        return functools.partial(jit, **options)
    own = jax.jit(fun, compiler_options=COMPILER_OPTIONS, **options)
    traced = jax.jit(fun, **options)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return (own if _evaluating() else traced)(*args, **kwargs)

    call.lower = own.lower
    return call


def _evaluating() -> bool:
    """Whether JAX runs each operation as it comes (nothing traces the caller)."""
    return type(jax_core.find_top_trace(())).__name__ == "EvalTrace"


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


def matmul(x, y, update: str, *, adjoint_y: bool, emulate: bool | None = None,
           span: int | None = None):
    """x @ y^H (adjoint_y) or x @ y, the products at precision `update`,
    accumulated and returned in x's dtype. emulate: None picks by platform
    (emulated on CPU, XLA's preset elsewhere). span: XLA's preset forms the
    product over spans of at most this many terms of the inner dimension,
    summed in x's dtype (None: one product; the emulation, exact per term,
    needs none)."""
    spec = UPDATES[update]
    if update != "f64" and jnp.finfo(x.dtype).bits == 64:  # a float64 panel, 32-bit updates
        narrow = jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32
        out = matmul(x.astype(narrow), y.astype(narrow), update, adjoint_y=adjoint_y, emulate=emulate,
                     span=span)
        return out.astype(x.dtype)
    if spec.mantissa_bits is None:
        return _exact(x, y, adjoint_y)
    if jnp.iscomplexobj(x):
        xr, yr = _real_embedding(x, y, adjoint_y)
        out = matmul(xr, yr, update, adjoint_y=adjoint_y, emulate=emulate, span=span)
        half = out.shape[1] // 2
        return lax.complex(out[:, :half], out[:, half:])
    preset = getattr(lax.DotAlgorithmPreset, spec.preset)
    native = lambda x, y: _spans(x, y, adjoint_y, preset, span)  # noqa: E731
    emulated = lambda x, y: _emulated(x, y, adjoint_y, spec)  # noqa: E731
    if emulate is None:
        return lax.platform_dependent(x, y, cpu=emulated, default=native)
    return (emulated if emulate else native)(x, y)


def _spans(x, y, adjoint_y: bool, precision, span: int | None):
    """x @ op(y) as the sum, in order, of the products over spans of at most
    `span` terms of the inner dimension (None: one product)."""
    k = x.shape[1]
    if span is None or k <= span:
        return _dot(x, y, adjoint_y, precision)
    total = None
    for o in range(0, k, span):
        ys = y[:, o : o + span] if adjoint_y else y[o : o + span]
        term = _dot(x[:, o : o + span], ys, adjoint_y, precision)
        total = term if total is None else total + term
    return total


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


def _emulated(x, y, adjoint_y: bool, spec: Update, term_precision=lax.Precision.HIGHEST):
    """The sum of the parts' products, each at term_precision (HIGHEST: exact
    in float32 for parts of at most 11 significant bits)."""
    xs = _parts(x, spec)
    ys = _parts(y, spec)
    total = None
    for i, j in spec.products:  # the smallest products first, as the presets sum them
        term = _dot(xs[i], ys[j], adjoint_y, term_precision)
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
