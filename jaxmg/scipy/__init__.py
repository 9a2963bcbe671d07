"""jax.scipy's namespace for jaxmg: ``import jaxmg.scipy.linalg as jsl``."""

from jaxmg.scipy import linalg

__all__ = ["linalg"]
