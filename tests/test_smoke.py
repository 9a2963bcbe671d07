import numpy as np
import jax.numpy as jnp

import helpers
import jaxmg


def test_potrs_two_devices_float64():
    rng = np.random.default_rng(0)
    a = helpers.spd(rng, 16, np.float64)
    b = helpers.random_matrix(rng, 16, np.float64, 2)
    m = helpers.mesh(2)
    x = jaxmg.potrs(helpers.put_rows(a, m), jnp.asarray(b))
    assert np.linalg.norm(a @ np.asarray(x) - b) / np.linalg.norm(b) < helpers.tolerance(np.float64, 16, 10)
