"""jaxmg: distributed dense linear algebra for JAX across several devices."""

import importlib as _importlib

from jaxmg._src import eager as _eager
from jaxmg._src.cholesky import (
    CholeskyFactor,
    cho_factor,
    cho_logdet,
    cho_solve,
    cholesky,
    potri,
    potrs,
)
from jaxmg._src.composite import (
    cond,
    expm,
    expm_frechet,
    matrix_norm,
    matrix_power,
    matrix_rank,
    norm,
    pinv,
    svdvals,
    tensorinv,
    tensorsolve,
)
from jaxmg._src.eigh import EighResult, eigh, eigvalsh, syevd
from jaxmg._src.failures import LinAlgError
from jaxmg._src.library import export_setup
from jaxmg._src.mixed.api import MixedFactor, RefinementInfo
from jaxmg._src.least_squares import lstsq, qr
from jaxmg._src.linalg import SlogdetResult, det, inv, slogdet, solve
from jaxmg._src.triangular import solve_triangular
from jaxmg._src.lu import LUFactor, lu, lu_factor, lu_solve
from jaxmg._src.polar import gesvd, polar, svd
from jaxmg._src.row_cyclic import cyclic_1d, plot_block_to_cyclic, verify_cyclic
from jaxmg._src.shardmap_ctx import (
    gesvd_shardmap_ctx,
    lu_solve_shardmap_ctx,
    potri_shardmap_ctx,
    potri_symmetrize,
    potrs_shardmap_ctx,
    syevd_shardmap_ctx,
)

__version__ = "0.2.0"
__all__ = [
    "CholeskyFactor",
    "EighResult",
    "LinAlgError",
    "LUFactor",
    "MixedFactor",
    "RefinementInfo",
    "SlogdetResult",
    "cho_factor",
    "cho_logdet",
    "cho_solve",
    "cholesky",
    "cond",
    "cyclic_1d",
    "det",
    "eigh",
    "eigvalsh",
    "expm",
    "expm_frechet",
    "export_setup",
    "gesvd",
    "gesvd_shardmap_ctx",
    "inv",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_solve",
    "lu_solve_shardmap_ctx",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "norm",
    "pinv",
    "plot_block_to_cyclic",
    "polar",
    "potri",
    "potri_shardmap_ctx",
    "potri_symmetrize",
    "potrs",
    "potrs_shardmap_ctx",
    "qr",
    "slogdet",
    "solve",
    "solve_triangular",
    "svd",
    "svdvals",
    "syevd",
    "syevd_shardmap_ctx",
    "tensorinv",
    "tensorsolve",
    "verify_cyclic",
]

# XLA:CPU's pool, two threads per device, before JAX starts (see eager.py).
_eager.widen_cpu_pool()

# The drop-in namespaces, as `import jax` gives jax.numpy and jax.scipy.
for _namespace in ("numpy", "scipy"):
    _importlib.import_module(f"jaxmg.{_namespace}")
del _namespace
