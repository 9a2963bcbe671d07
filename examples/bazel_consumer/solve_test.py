"""jaxmg through @jaxmg_repo//jaxmg, on 4 host CPU devices."""

import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jaxmg  # noqa: E402
from jaxmg._src import library  # noqa: E402

jax.config.update("jax_enable_x64", True)
N = 44  # rows split evenly over the 4 devices, but no multiple of the tile


@pytest.fixture(scope="module")
def mesh():
    assert jax.device_count() == 4
    return jax.make_mesh((4,), ("x",))


def rows(x, mesh):
    return jax.device_put(x, NamedSharding(mesh, P("x", None)))


def tolerance(dtype):
    return 1e3 * N * np.finfo(dtype).eps


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("assume_a", ["pos", "gen"])
def test_solve(mesh, dtype, assume_a):
    rng = np.random.default_rng(0)
    m = rng.standard_normal((N, N)).astype(dtype)
    a = m @ m.conj().T + N * np.eye(N, dtype=dtype) if assume_a == "pos" else m + N * np.eye(N, dtype=dtype)
    b = rng.standard_normal((N, 3)).astype(dtype)
    x = np.asarray(jaxmg.solve(rows(a, mesh), b, assume_a=assume_a))
    assert np.linalg.norm(a @ x - b) / (np.linalg.norm(a) * np.linalg.norm(x)) < tolerance(dtype)


def test_eigh(mesh):
    rng = np.random.default_rng(1)
    m = rng.standard_normal((N, N))
    a = (m + m.T) / 2
    w, v = jaxmg.eigh(rows(a, mesh))
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), atol=tolerance(np.float64))


def test_library_is_this_builds():
    loaded = library.library()._name
    assert loaded.startswith(os.environ["TEST_SRCDIR"] + "/")  # found in the runfiles
    # ...and built by this workspace, not a jaxmg checkout's own bazel-bin.
    assert "/execroot/bazel_consumer/" in os.path.realpath(loaded)


if __name__ == "__main__":
    report = os.environ.get("XML_OUTPUT_FILE")
    junit = [f"--junitxml={report}"] if report else []
    sys.exit(pytest.main(["-p", "no:cacheprovider", "-q", *junit, __file__]))
