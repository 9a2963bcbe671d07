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


def pytest_report_header(config):
    """Which jaxmg runs: the checkout's, Bazel's runfiles or an installed wheel."""
    import jaxmg

    return f"jaxmg {jaxmg.__version__} from {os.path.dirname(jaxmg.__file__)}"
