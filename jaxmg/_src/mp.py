"""The cuSOLVERMp engine (backend="mp"): every rank runs the routine on its
own block and the ranks talk over NCCL, so ranks may live in one process
(a thread per GPU) or in one process per GPU, on one node or several.

The matrix is handed over in JAX's own layout: a rank's row block of a
matrix, read column-major, is a block of columns of its transpose, which is
ScaLAPACK's layout on a 1 x P grid with one block of N/P columns per rank.
So routines of symmetric matrices take A as it is (its transpose is conj(A)),
and routines of general matrices take A^T, which XLA transposes beforehand.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxmg._src import collective, distribution as dist, library

ROUTINES = ("mp_potrf", "mp_potrs", "mp_getrf", "mp_getrs", "mp_syevd", "mp_qr")
# cuSOLVERMp < 0.9.0: syevd may fail for block sizes that are not powers of
# two; < 0.9.1: wrong eigenvectors on some large problems (release notes).
SYEVD_ANY_BLOCK_VERSION = 900
SYEVD_VECTORS_VERSION = 901
ONE_RANK_BLOCK = 1024


@functools.cache
def load() -> ctypes.CDLL:
    """Loads NCCL and cuSOLVERMp into the library and registers the mp targets."""
    lib = library.cuda_library()
    lib.jaxmg_cusolvermp_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.jaxmg_nccl_unique_id.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.jaxmg_cusolvermp_version.argtypes = [
        ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t,
    ]
    error = ctypes.create_string_buffer(4096)
    if lib.jaxmg_cusolvermp_init(":".join(library.cuda_search_path()).encode(), error, len(error)):
        raise RuntimeError(error.value.decode())
    for routine in ROUTINES:
        for dtype in library.DTYPE_PREFIX:
            name = library.target_name(routine, dtype, "cuda")
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)), platform="CUDA")
    return lib


@functools.cache
def version() -> int:
    """cuSOLVERMp's version as major * 1000 + minor * 100 + patch (0.8.0 -> 800)."""
    lib = load()
    out = ctypes.c_int(0)
    error = ctypes.create_string_buffer(4096)
    device = jax.local_devices(backend="gpu")[0]
    if lib.jaxmg_cusolvermp_version(int(device.local_hardware_id), ctypes.byref(out), error,
                                    len(error)):
        raise RuntimeError(error.value.decode())
    return out.value


def check(placement: dist.Placement, routine: str, instead: str = "'jaxmg'") -> None:
    """Refuses what the mp engine cannot run, saying what to do instead."""
    if collective.platform_of(placement) != "cuda":
        raise ValueError(
            f"jaxmg: backend='mp' ({routine}) runs cuSOLVERMp on CUDA GPUs; on this platform use "
            f"backend={instead} or 'auto'"
        )
    if placement.manual:
        raise ValueError(
            f"jaxmg: backend='mp' ({routine}) takes whole sharded arrays, not shard_map blocks; "
            f"call it outside shard_map or use backend={instead}"
        )
    devices = collective._axis_devices(placement, "with backend='mp'")
    here = [int(d.local_hardware_id) for d in devices if d.process_index == jax.process_index()]
    if len(set(here)) != len(here):
        raise ValueError(
            f"jaxmg: backend='mp' needs a distinct GPU per rank (NCCL refuses two ranks on one "
            f"GPU); this process's ranks use GPUs {here}. Use backend={instead} to share a GPU"
        )


def block_size(n_pad: int, n_ranks: int, limit: int | None = None) -> int:
    """cuSOLVERMp's block: a rank's N/P columns, or on one rank (where any
    block describes the same matrix) the largest power of two up to `limit`."""
    if n_ranks > 1:
        return n_pad // n_ranks
    return 1 << int(math.log2(max(1, min(n_pad, limit or ONE_RANK_BLOCK))))


def check_syevd(n_pad: int, n_ranks: int, vectors: bool) -> None:
    v = version()
    block = block_size(n_pad, n_ranks)
    if v < SYEVD_ANY_BLOCK_VERSION and block & (block - 1):
        good = n_ranks * (1 << int(math.log2(block)))
        raise ValueError(
            f"jaxmg: cuSOLVERMp {_dotted(v)} can fail in syevd for a block size that is not a "
            f"power of two, and backend='mp' uses N/P = {block} here. Use N a multiple of "
            f"{n_ranks} whose N/{n_ranks} is a power of two (e.g. {good}), backend='jaxmg', or "
            "cuSOLVERMp >= 0.9.0"
        )
    if vectors and v < SYEVD_VECTORS_VERSION:
        warnings.warn(
            f"jaxmg: cuSOLVERMp {_dotted(v)} is known to return wrong eigenvectors for some "
            "large problems (fixed in 0.9.1); check V (e.g. the residual of A V - V diag(w))",
            RuntimeWarning,
            stacklevel=4,
        )


def _dotted(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


_GROUP_KEY = "jaxmg/nccl_id/{}"


@functools.lru_cache(maxsize=256)
def _group(device_ids: tuple[int, ...]) -> dict:
    """The NCCL communicator group of these devices (in rank order): an id
    made once by rank 0's process and shared through jax.distributed's
    key-value store, and the ranks this process hosts."""
    by_id = {d.id: d for d in jax.devices()}
    devices = [by_id[i] for i in device_ids]
    me = jax.process_index()
    local = [(r, d) for r, d in enumerate(devices) if d.process_index == me]
    lib = load()
    if devices[0].process_index == me:
        hex_id = ctypes.create_string_buffer(257)
        error = ctypes.create_string_buffer(4096)
        if lib.jaxmg_nccl_unique_id(hex_id, error, len(error)):
            raise RuntimeError(error.value.decode())
        group = hex_id.value.decode()
    if len({d.process_index for d in devices}) > 1:
        from jaxmg._src import processes

        key = _GROUP_KEY.format(hashlib.sha1(repr(device_ids).encode()).hexdigest())
        client = processes._client()
        if devices[0].process_index == me:
            client.key_value_set(key, group, allow_overwrite=True)
        else:
            group = client.blocking_key_value_get(key, dist.timeout_ms())
    return dict(
        group=group,
        n_ranks=np.int64(len(devices)),
        local_ranks=np.array([r for r, _ in local], dtype=np.int64),
        local_devices=np.array([int(d.local_hardware_id) for _, d in local], dtype=np.int64),
    )


def call(routine: str, placement: dist.Placement, operands, results, *, block: int,
         aliases=None):
    """Calls jaxmg_<x>mp_<routine>_cuda on this rank's blocks (inside shard_map)."""
    load()
    devices = collective._axis_devices(placement, "with backend='mp'")
    attrs = _group(tuple(d.id for d in devices))
    target = library.target_name("mp_" + routine, operands[0].dtype, "cuda")
    fn = jax.ffi.ffi_call(target, results, input_output_aliases=aliases,
                          vmap_method="sequential")
    return fn(*operands, block=np.int64(block), **attrs)


def _shard_map(body, placement, in_specs, out_specs):
    return jax.shard_map(body, mesh=placement.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def _info():
    return collective.info_shape()


# --------------------------------------------------------------------------
# The routines on padded, row-sharded arrays (called under jit)
# --------------------------------------------------------------------------


def potrf(a_pad, placement, block):
    """Cholesky factor of conj(A) (= A^T as the ranks read it), in place."""
    spec = P(placement.axis, None)

    def body(blk):
        results = (jax.ShapeDtypeStruct(blk.shape, blk.dtype), _info())
        return call("potrf", placement, (blk,), results, block=block, aliases={0: 0})

    factor, info = _shard_map(body, placement, (spec,), (spec, P()))(a_pad)
    return factor, info[0]


def potrs(factor, b_pad, placement, block):
    """X with A X = B from potrf's factor of conj(A): conj(A) conj(X) = conj(B)."""
    bt = jnp.conj(b_pad).T if jnp.iscomplexobj(b_pad) else b_pad.T

    def body(blk, bt_):
        results = (jax.ShapeDtypeStruct(bt_.shape, bt_.dtype),)
        (xt,) = call("potrs", placement, (blk, bt_), results, block=block)
        return xt

    xt = _shard_map(body, placement, (P(placement.axis, None), P()), P())(
        factor, dist.constrain(bt, placement, P()))
    return jnp.conj(xt).T if jnp.iscomplexobj(xt) else xt.T


def getrf(a_pad, placement, block):
    """LU of A: the ranks get A^T's row blocks, i.e. A's column blocks."""
    spec = P(placement.axis, None)
    at = dist.constrain(a_pad.T, placement, spec)

    def body(blk):
        results = (
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct((blk.shape[1],), jnp.int32),
            _info(),
        )
        return call("getrf", placement, (blk,), results, block=block, aliases={0: 0})

    lu, piv, info = _shard_map(body, placement, (spec,), (spec, P(), P()))(at)
    return lu, piv, info[0]


def getrs(lu, piv, b_pad, placement, block):
    def body(blk, piv_, bt_):
        results = (jax.ShapeDtypeStruct(bt_.shape, bt_.dtype),)
        (xt,) = call("getrs", placement, (blk, piv_, bt_), results, block=block)
        return xt

    spec = P(placement.axis, None)
    xt = _shard_map(body, placement, (spec, P(), P()), P())(
        lu, piv, dist.constrain(b_pad.T, placement, P()))
    return xt.T


def syevd(a_pad, placement, block):
    """(V^H row-sharded, w, info): the ranks hold conj(A), whose eigenvectors
    conj(V) come back column-major, i.e. as V^H's rows."""
    spec = P(placement.axis, None)

    def body(blk):
        real = jnp.finfo(blk.dtype).dtype
        results = (
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct((blk.shape[1],), real),
            _info(),
        )
        _, q, w, info = call("syevd", placement, (blk,), results, block=block, aliases={0: 0})
        return q, w, info

    vh, w, info = _shard_map(body, placement, (spec,), (spec, P(), P()))(a_pad)
    return vh, w, info[0]


def pad_rectangular(a, n_ranks):
    """[[A, 0], [0, I], [0, 0]]: N + p columns, a multiple of the ranks, and
    rows to whole blocks on every rank. The identity block and the zero rows
    leave QR and least squares of A unchanged in the leading block. Returns
    the padded matrix and cuSOLVERMp's block size."""
    m, n = a.shape
    p = -n % n_ranks
    block = block_size(n + p, n_ranks)
    whole = block * n_ranks
    rows = -(-(m + p) // whole) * whole
    if (rows, p) == (m, 0):
        return a, block
    a = jnp.pad(a, ((0, rows - m), (0, p)))
    # An elementwise select, not a scatter: it keeps a's sharding as it is.
    r, c = jnp.arange(rows)[:, None], jnp.arange(n + p)[None, :]
    eye = (r >= m) & (r < m + p) & (r - m == c - n)
    return jnp.where(eye, jnp.asarray(1, a.dtype), a), block


def gels(a, b, placement):
    """Least-squares solution of A X ~ B for M >= N (A rows sharded), as
    R^-1 Q^H B from qr(). cuSOLVERMp 0.8's own gels stopped with
    CUSOLVER_STATUS_INTERNAL_ERROR on the H200 at every size tried."""
    q, r, info = qr(a, placement)
    qhb = dist.constrain(jnp.conj(q).T @ dist.constrain(b, placement, P()), placement, P())
    x = jax.scipy.linalg.solve_triangular(r, qhb, lower=False)
    return x, info


def qr(a, placement):
    """Reduced QR (Q: M x N, R: N x N) for M >= N; A rows sharded."""
    m, n = a.shape
    a_pad, block = pad_rectangular(a, placement.n_devices)
    np_ = a_pad.shape[1]
    spec = P(placement.axis, None)
    at = dist.constrain(a_pad.T, placement, spec)

    def body(blk):
        results = (
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct((blk.shape[0], np_), blk.dtype),
            _info(),
        )
        return call("qr", placement, (blk,), results, block=block, aliases={0: 0})

    qt, rt, info = _shard_map(body, placement, (spec,), (spec, spec, P()))(at)
    q = dist.constrain(qt.T, placement, P(placement.axis, None))
    q = dist.unpad(dist.unpad(q, placement, m, (0,)), placement, n, (1,))
    r = jnp.triu(dist.unpad(dist.constrain(rt.T, placement, P()), placement, n, (0, 1)))
    return q, r, info[0]
