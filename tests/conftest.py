"""Shared pytest set-up: tests use float64 references, so x64 is on here (the
library itself never changes it; test_config.py checks that in a process of
its own)."""

import os
import zlib

import jax
import numpy as np
import pytest

if not getattr(jax.config, "_jaxmg_tests_keep_x64_off", False):
    jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name (parameters included), so every
    case has its own reproducible data."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.fixture(autouse=True, scope="module")
def _compiled_programs_freed_after_each_file():
    """Each compiled CPU program keeps memory mappings until JAX's caches let
    it go; the mixed-precision files together compile enough programs to pass
    Linux's default limit of 65530 mappings (vm.max_map_count), and XLA then
    crashes in the compiler. Freed file by file, a run of the whole folder
    stays under it."""
    yield
    jax.clear_caches()


def pytest_report_header(config):
    """Which jaxmg runs: the checkout's, Bazel's runfiles or an installed wheel."""
    import jaxmg

    return f"jaxmg {jaxmg.__version__} from {os.path.dirname(jaxmg.__file__)}"
