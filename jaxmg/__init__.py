"""jaxmg: distributed dense linear algebra for JAX across several devices."""

from jaxmg._src.potri import potri
from jaxmg._src.potrs import potrs
from jaxmg._src.syevd import syevd

__version__ = "0.1.0"
__all__ = ["potrs", "potri", "syevd"]
