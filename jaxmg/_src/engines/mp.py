"""The cuSOLVERMp engine (backend="mp"): every rank runs the routine on its
own block and the ranks talk over NCCL, so ranks may live in one process
(a thread per GPU) or in one process per GPU, on one node or several.

A matrix goes in 2-D block-cyclic (cyclic.py moves JAX's row blocks there
with all-to-alls, and back): on an R x C placement the ranks' row-major
blocks are, read column-major, the local matrices of its transpose on a
C x R grid. So routines of symmetric matrices take A as it is (its
transpose is conj(A)), and routines of general matrices take A^T.
Right-hand sides follow the grid's rows (the mesh's columns); cuSOLVERMp
keeps LU pivots with the grid's columns (the mesh's rows).
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

from jaxmg._src import config, cyclic, failures, library, processes, sharding
from jaxmg._src.engines import base
from jaxmg._src.placement import Placement, axis_devices, platform_of

# cuSOLVERMp < 0.9.0: syevd may fail for block sizes that are not powers of
# two (jaxmg's blocks always are); < 0.9.1: wrong eigenvectors on some large
# problems (release notes).
SYEVD_VECTORS_VERSION = 901
# Block sizes: on one rank any block describes the same matrix; across ranks
# smaller blocks balance the work, larger ones run faster kernels.
ONE_RANK_BLOCK = 1024
MANY_RANKS_BLOCK = 512


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
    library.register("mp")
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


def check(placement: Placement, routine: str, instead: str = "'jaxmg'") -> None:
    """Refuses what the mp engine cannot run, saying what to do instead."""
    if platform_of(placement) != "cuda":
        raise ValueError(
            f"jaxmg: backend='mp' ({routine}) runs cuSOLVERMp on CUDA GPUs; on this platform use "
            f"backend={instead} or 'auto'"
        )
    if placement.manual and routine not in ("potrs", "syevd"):
        raise ValueError(
            f"jaxmg: backend='mp' inside shard_map runs potrs and syevd on the blocks; call "
            f"{routine} outside shard_map or use backend={instead}"
        )
    devices = axis_devices(placement, "with backend='mp'")
    here = [int(d.local_hardware_id) for d in devices if d.process_index == jax.process_index()]
    if len(set(here)) != len(here):
        raise ValueError(
            f"jaxmg: backend='mp' needs a distinct GPU per rank (NCCL refuses two ranks on one "
            f"GPU); this process's ranks use GPUs {here}. Use backend={instead} to share a GPU"
        )


def block_size(n: int, placement: Placement, limit: int | None = None) -> int:
    """cuSOLVERMp's block (a power of two) for an order-n matrix on this placement."""
    default = ONE_RANK_BLOCK if placement.n_devices == 1 else MANY_RANKS_BLOCK
    return cyclic.choose_block(n, placement, limit or default)


def dividing_block(n: int, placement: Placement, limit: int | None = None) -> int:
    """Inside shard_map, where blocks cannot be padded: the largest power of
    two up to the default (or `limit`) that splits every rank's share of n."""
    r, c = cyclic.grid(placement)
    per_rank = n // (r * c)
    t = 1 << int(math.log2(limit or (ONE_RANK_BLOCK if r * c == 1 else MANY_RANKS_BLOCK)))
    while t > 1 and per_rank % t:
        t //= 2
    return t


def check_syevd(vectors: bool) -> None:
    v = version()
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
        key = _GROUP_KEY.format(hashlib.sha1(repr(device_ids).encode()).hexdigest())
        client = processes._client()
        if devices[0].process_index == me:
            client.key_value_set(key, group, allow_overwrite=True)
        else:
            group = client.blocking_key_value_get(key, config.timeout_ms())
    return dict(
        group=group,
        n_ranks=np.int64(len(devices)),
        local_ranks=_dense([r for r, _ in local]),
        local_devices=_dense([int(d.local_hardware_id) for _, d in local]),
    )


def _dense(values):
    """An int64 array attribute inside the grid dictionary. JAX makes a
    top-level array attribute hashable itself but not one inside a
    dictionary, and jaxpr parameters must hash (JAX 0.11): its own hashable
    wrapper, which lowers to the same dense array."""
    array = np.array(values, dtype=np.int64)
    try:
        from jax._src.hashable_array import HashableArray
    except ImportError:  # older JAX: a plain array passes there
        return array
    return HashableArray(array)


# jaxmg's names for cuSOLVERMp's solves: the library's potrs and getrs take a factor.
_ROUTINE = {"potrs": "cholsolve", "getrs": "lusolve"}


def call(routine: str, placement: Placement, operands, results, *, block: int,
         aliases=None):
    """Calls jaxmg_<x>mp_<routine>_cuda on this rank's blocks (inside shard_map)."""
    load()
    devices = axis_devices(placement, "with backend='mp'")
    r, c = cyclic.grid(placement)
    # A rank's row-major block is, read column-major, its local matrix of the
    # transpose on a c x r grid.
    grid = dict(_group(tuple(d.id for d in devices)), block=np.int64(block), rows=np.int64(c),
                cols=np.int64(r))
    target = library.target_name("mp", _ROUTINE.get(routine, routine), operands[0].dtype)
    fn = jax.ffi.ffi_call(target, results, input_output_aliases=aliases,
                          vmap_method="sequential")
    return fn(*operands, grid=grid)


def _shard_map(body, placement, in_specs, out_specs):
    if placement.manual:  # inside the caller's shard_map: the arrays are the blocks
        return body
    return jax.shard_map(body, mesh=placement.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def _info():
    return jax.ShapeDtypeStruct((1,), jnp.int32)


def _specs(placement):
    """(the cyclic blocks' spec, the spec of vectors along the grid's rows)."""
    spec = cyclic.cyclic_spec(placement)
    return spec, P(spec[1])


def _from_first(x, axes):
    """x as the ranks at index 0 of `axes` hold it, on every rank."""
    if not axes:
        return x
    first = jax.lax.axis_index(axes) == 0
    return jax.lax.psum(jnp.where(first, x, jnp.zeros_like(x)), axes)


def _from_first_column(x, placement):
    """x as the grid's first column of ranks (mesh row 0) holds it."""
    return _from_first(x, placement.axes[:1] if cyclic.grid(placement)[0] > 1 else ())


def _from_first_row(x, placement):
    """x as the grid's first row of ranks (mesh column 0) holds it."""
    return _from_first(x, placement.axes[1:] if cyclic.grid(placement)[1] > 1 else ())


def _worst(info, placement):
    """The ranks' info as one: an illegal argument (< 0) first, else the largest."""
    low = jax.lax.pmin(info, placement.axes)
    return jnp.where(low < 0, low, jax.lax.pmax(info, placement.axes))


def _order(n_pad, placement, block, mesh_dim):
    """Where the ranks' pieces of a length-n vector sit, concatenated along
    the mesh's rows (mesh_dim 0) or columns (1), and the way back."""
    order = cyclic.row_order(n_pad, block, cyclic.grid(placement)[mesh_dim])
    return order, np.argsort(order)


# --------------------------------------------------------------------------
# The routines on padded, row-sharded arrays (called under jit); matrices
# come back in the cyclic layout, which only these functions read.
# --------------------------------------------------------------------------


def potrf(a_pad, placement, block):
    """Cholesky factor of conj(A) (= A^T as the ranks read it), cyclic."""
    spec, _ = _specs(placement)

    def body(blk):
        results = (jax.ShapeDtypeStruct(blk.shape, blk.dtype), _info())
        factor, info = call("potrf", placement, (blk,), results, block=block, aliases={0: 0})
        return factor, _worst(info, placement)

    factor, info = _shard_map(body, placement, (spec,), (spec, P()))(
        cyclic.to_cyclic(a_pad, placement, block))
    return factor, info[0]


def _solve_columns(routine, operands, specs, b_pad, placement, block):
    """X^T from the ranks' solves with B^T's columns in grid-row order."""
    _, vec = _specs(placement)
    order, back = _order(b_pad.shape[0], placement, block, 1)
    bt = _grid_rows_part(b_pad.T[:, order], placement)

    def body(*args):
        results = (jax.ShapeDtypeStruct(args[-1].shape, args[-1].dtype),)
        (xt,) = call(routine, placement, args, results, block=block)
        return _from_first_column(xt, placement)

    in_specs = tuple(specs) + (P(None, vec[0]),)
    xt = _shard_map(body, placement, in_specs, P(None, vec[0]))(*operands, bt)
    return _whole(xt, placement)[:, back]


def _grid_rows_part(xt, placement):
    """xt's columns split over the mesh's columns: the rank's part inside
    shard_map, else xt constrained that way."""
    cols = placement.axes[1:]
    if not placement.manual:
        return sharding.constrain(xt, placement, P(None, _specs(placement)[1][0]))
    if not cols:
        return xt
    size = xt.shape[1] // cyclic.grid(placement)[1]
    return jax.lax.dynamic_slice_in_dim(xt, jax.lax.axis_index(cols) * size, size, 1)


def _whole(xt, placement):
    """The inverse of _grid_rows_part: xt whole on every rank."""
    cols = placement.axes[1:]
    if not placement.manual:
        return sharding.constrain(xt, placement, P())
    return jax.lax.all_gather(xt, cols, axis=1, tiled=True) if cols else xt


def potrs(factor, b_pad, placement, block):
    """X with A X = B from potrf's factor of conj(A): conj(A) conj(X) = conj(B)."""
    b = jnp.conj(b_pad) if jnp.iscomplexobj(b_pad) else b_pad
    xt = _solve_columns("potrs", (factor,), _specs(placement)[:1], b, placement, block)
    return jnp.conj(xt).T if jnp.iscomplexobj(xt) else xt.T


def getrf(a_pad, placement, block):
    """LU of A (the ranks get A^T's blocks, i.e. A's): cyclic lu, global pivots."""
    spec, _ = _specs(placement)
    at = sharding.constrain(a_pad.T, placement, P(placement.axis, None))

    def body(blk):
        results = (
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct((blk.shape[0],), jnp.int32),
            _info(),
        )
        lu, piv, info = call("getrf", placement, (blk,), results, block=block, aliases={0: 0})
        return lu, _from_first_row(piv, placement), _worst(info, placement)

    lu, piv, info = _shard_map(body, placement, (spec,), (spec, P(spec[0]), P()))(
        cyclic.to_cyclic(at, placement, block))
    _, back = _order(a_pad.shape[0], placement, block, 0)
    return lu, sharding.constrain(piv, placement, P())[back], info[0]


def getrs(lu, piv, b_pad, placement, block):
    order, _ = _order(b_pad.shape[0], placement, block, 0)
    spec, _ = _specs(placement)
    piv = sharding.constrain(piv[order], placement, P(spec[0]))  # never inside shard_map
    xt = _solve_columns("getrs", (lu, piv), (spec, P(spec[0])), b_pad, placement, block)
    return xt.T


def syevd(a_pad, placement, block):
    """(V^H rows sharded, w, info): the ranks hold conj(A), whose eigenvectors
    conj(V) come back column-major, i.e. as V^H's rows."""
    spec, _ = _specs(placement)

    def body(blk):
        real = jnp.finfo(blk.dtype).dtype
        results = (
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct((blk.shape[1] * cyclic.grid(placement)[1],), real),
            _info(),
        )
        _, q, w, info = call("syevd", placement, (blk,), results, block=block, aliases={0: 0})
        return q, w, _worst(info, placement)

    q, w, info = _shard_map(body, placement, (spec,), (spec, P(), P()))(
        cyclic.to_cyclic(a_pad, placement, block))
    return cyclic.from_cyclic(q, placement, block), w, info[0]


def pad_rectangular(a, placement, block):
    """[[A, 0], [0, I], [0, 0]]: both sides whole blocks on every rank. The
    identity block and the zero rows leave QR and least squares of A
    unchanged in the leading block."""
    m, n = a.shape
    n_pad = cyclic.padded(n, block, placement)
    p = n_pad - n
    rows = cyclic.padded(m + p, block, placement)
    if (rows, p) == (m, 0):
        return a
    a = jnp.pad(a, ((0, rows - m), (0, p)))
    # An elementwise select, not a scatter: it keeps a's sharding as it is.
    r, c = jnp.arange(rows)[:, None], jnp.arange(n + p)[None, :]
    eye = (r >= m) & (r < m + p) & (r - m == c - n)
    return jnp.where(eye, jnp.asarray(1, a.dtype), a)


def qr(a, placement, limit=None):
    """Reduced QR (Q: M x N, R: N x N) for M >= N; A rows sharded."""
    m, n = a.shape
    block = block_size(n, placement, limit)
    a_pad = pad_rectangular(a, placement, block)
    rows_spec = P(placement.axis, None)
    spec, _ = _specs(placement)
    at = cyclic.to_cyclic(sharding.constrain(a_pad.T, placement, rows_spec), placement, block)
    n_pad = a_pad.shape[1]
    n_grid_rows = cyclic.grid(placement)[1]

    def body(blk):
        results = (
            jax.ShapeDtypeStruct(blk.shape, blk.dtype),
            jax.ShapeDtypeStruct((blk.shape[0], n_pad // n_grid_rows), blk.dtype),
            _info(),
        )
        q, r, info = call("qr", placement, (blk,), results, block=block, aliases={0: 0})
        return q, r, _worst(info, placement)

    qt, rt, info = _shard_map(body, placement, (spec,), (spec, spec, P()))(at)
    q = sharding.constrain(cyclic.from_cyclic(qt, placement, block).T, placement, rows_spec)
    q = sharding.unpad(sharding.unpad(q, placement, m, (0,)), placement, n, (1,))
    rt = sharding.constrain(cyclic.from_cyclic(rt, placement, block), placement, P())
    r = jnp.triu(rt.T[:n, :n])
    return q, r, info[0]


def diagonal(x, placement, block):
    """A cyclic matrix's diagonal, in an order of the ranks', with each entry's
    global index (which the reductions of log-determinants need, not the order)."""
    spec, _ = _specs(placement)
    r, c = cyclic.grid(placement)
    axis = placement.axes[0]

    def body(blk):
        local = jnp.arange(blk.shape[0], dtype=jnp.int32)
        g = ((local // block) * r + jax.lax.axis_index(axis)) * block + local % block
        tile = g // block
        col = (tile // c) * block + g % block
        d = blk[local, jnp.minimum(col, blk.shape[1] - 1)]
        if c == 1:
            return d, g
        mine = tile % c == jax.lax.axis_index(placement.axes[1:])
        return jax.lax.psum(jnp.where(mine, d, jnp.zeros_like(d)), placement.axes[1:]), g

    return _shard_map(body, placement, (spec,), (P(axis), P(axis)))(x)


# --------------------------------------------------------------------------
# The engine: JAX's global arrays in, padded to whole blocks on the grid
# --------------------------------------------------------------------------


def _padded(a, layout, diagonal):
    n_pad = cyclic.padded(layout.n, layout.tile, layout.placement)
    return sharding.constrain(sharding.pad_matrix(a, n_pad, diagonal), layout.placement,
                              layout.row_spec)


def _b_spec(placement, b_sharded):
    return P(placement.axis, None) if b_sharded else P()


class Mp(base.Engine):
    name = "mp"

    def tile(self, routine, n, placement, requested):
        return block_size(n, placement, requested)

    def cholesky(self, a, layout):
        return potrf(_padded(a, layout, 1), layout.placement, layout.tile)

    def cho_solve(self, factor, info, b, layout, b_sharded):
        b_pad = sharding.pad_rows(b, factor.shape[0])
        x = potrs(factor, b_pad, layout.placement, layout.tile)[: layout.n]
        return sharding.constrain_result(failures.nan_where_failed(x, info), layout.placement,
                                         _b_spec(layout.placement, b_sharded))

    def cholesky_logdet(self, factor, info, layout):
        diag, g = diagonal(factor, layout.placement, layout.tile)
        diag = jnp.where(g < layout.n, diag, 1)
        logdet = 2 * jnp.sum(jnp.log(jnp.real(diag)))
        return failures.nan_where_failed(logdet, info)

    def cholesky_upper(self, factor, info, layout):
        # The ranks factor A^T = conj(A) = L L^H; read row-major L is U.
        u = cyclic.from_cyclic(factor, layout.placement, layout.tile)
        u = sharding.unpad(u, layout.placement, layout.n, (0, 1))
        return jnp.triu(failures.nan_where_failed(u, info))  # as JAX: NaN in the triangle only

    def lu(self, a, layout):
        return getrf(_padded(a, layout, 1), layout.placement, layout.tile)

    def lu_matrices(self, lu, piv, layout):
        # The ranks factor A (they read A^T's blocks column-major): the factor
        # read row-major is (L U)^T.
        lu_t = cyclic.from_cyclic(lu, layout.placement, layout.tile)
        lu_ = sharding.constrain(jnp.transpose(lu_t), layout.placement, layout.row_spec)
        base = piv[-1] - (piv.shape[0] - 1)  # the last row pivots with itself
        return sharding.unpad(lu_, layout.placement, layout.n, (0, 1)), (piv - base)[: layout.n]

    def lu_solve(self, lu, piv, info, b, layout, b_sharded, trans):
        if trans != 0:
            raise ValueError(
                "jaxmg: backend='mp' solves with A only (cuSOLVERMp's getrs has no transpose); "
                "jaxmg.lu_solve(trans=1 or 2) factors op(A) again from the matrix the factor "
                "keeps, which a donated factor no longer has: keep the factor (do not donate it) "
                "or, on one machine, use backend='jaxmg'"
            )
        b_pad = sharding.pad_rows(b, lu.shape[0])
        x = getrs(lu, piv, b_pad, layout.placement, layout.tile)[: layout.n]
        return sharding.constrain_result(failures.nan_where_failed(x, info), layout.placement,
                                         _b_spec(layout.placement, b_sharded))

    def lu_slogdet(self, lu, piv, info, layout):
        diag, g = diagonal(lu, layout.placement, layout.tile)
        diag = jnp.where(g < layout.n, diag, 1)
        # Every rank's pivots cover all rows; the last row pivots with itself,
        # which gives the numbering's base.
        rows = jnp.arange(piv.shape[0], dtype=piv.dtype)
        swaps = jnp.sum(piv != rows + (piv[-1] - rows[-1]))
        return base.slogdet_from(diag, swaps, lu.dtype)

    def syevd(self, a, layout, vectors):
        placement, n = layout.placement, layout.n
        n_pad = cyclic.padded(n, layout.tile, placement)
        check_syevd(vectors)
        # Padding eigenvalues sort last: the leading n pairs are a's own.
        pad_value = base.eigenvalue_bound(a) if n_pad > n else 1
        a = sharding.constrain(sharding.pad_matrix(a, n_pad, pad_value), placement,
                               layout.row_spec)
        vh, w, info = syevd(a, placement, layout.tile)
        v = sharding.unpad(jnp.conj(vh).T, placement, n, (0, 1)) if vectors else None
        return w[:n], v, info

    def potrs_blocks(self, a, b, placement, tile):
        """a is this device's (N/n, N) block, b its rows of B or all of it; no
        padding is possible there, so the block divides every rank's share."""
        rows, n = a.shape
        placement = Placement(placement.mesh, placement.axis, manual=True)
        b_sharded = b.shape[0] == rows and rows != n
        whole_b = jax.lax.all_gather(b, placement.axes, tiled=True) if b_sharded else b
        t = dividing_block(n, placement, tile)
        factor, info = potrf(a, placement, t)
        x = failures.nan_where_failed(potrs(factor, whole_b, placement, t), info)
        if b_sharded:
            x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(placement.axes) * rows, rows, 0)
        return x, info

    def syevd_blocks(self, a, placement, tile, vectors):
        check_syevd(vectors)
        placement = Placement(placement.mesh, placement.axis, manual=True)
        vh, w, info = syevd(a, placement, dividing_block(a.shape[1], placement, tile))
        return w, (vh if vectors else None), info

    def qr(self, a, placement):
        return qr(a, placement)


ENGINE = base.registered(Mp())
