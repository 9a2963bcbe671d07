"""JAXMg's jaxmg.utils: random_psd, which code and tests written for that
package build their matrices with, and its warning class."""

import jax
import jax.numpy as jnp

from jaxmg._src.peer_calls import JaxMgWarning

__all__ = ["JaxMgWarning", "random_psd"]


def random_psd(n, dtype, seed):
    """An n x n Hermitian positive-definite matrix of `dtype`: W W^H / n for W
    of standard normal entries (from jax.random.key(seed)), plus 1e-5 I."""
    w = jax.random.normal(jax.random.key(seed), (n, n), dtype)
    return w @ jnp.conj(w).T / n + 1e-5 * jnp.eye(n, dtype=dtype)
