"""jaxmg: distributed dense linear algebra for JAX across several devices."""

from jaxmg._src.factors import CholeskyFactor, LUFactor
from jaxmg._src.linalg import (
    EighResult,
    LinAlgError,
    SlogdetResult,
    cho_factor,
    cho_logdet,
    cho_solve,
    eigh,
    eigvalsh,
    inv,
    lu_factor,
    lu_solve,
    slogdet,
    solve,
)
from jaxmg._src.least_squares import lstsq, qr
from jaxmg._src.polar import polar, svd
from jaxmg._src.potri import potri
from jaxmg._src.potrs import potrs
from jaxmg._src.syevd import syevd

__version__ = "0.2.0"
__all__ = [
    "CholeskyFactor",
    "EighResult",
    "LUFactor",
    "LinAlgError",
    "SlogdetResult",
    "cho_factor",
    "cho_logdet",
    "cho_solve",
    "eigh",
    "eigvalsh",
    "inv",
    "lu_factor",
    "lstsq",
    "lu_solve",
    "polar",
    "potri",
    "potrs",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "syevd",
]
