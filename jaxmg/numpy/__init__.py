"""jax.numpy's namespace for jaxmg: ``import jaxmg.numpy as jnp_mg``, then
``jnp_mg.linalg.solve(a, b)``."""

from jaxmg.numpy import linalg

__all__ = ["linalg"]
