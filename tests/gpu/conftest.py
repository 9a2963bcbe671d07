"""GPU suite set-up: float64 references need x64 (the tests' choice)."""

import jax
import pytest

jax.config.update("jax_enable_x64", True)


def pytest_collection_modifyitems(config, items):
    if not jax.devices()[0].platform == "gpu":
        skip = pytest.mark.skip(reason="needs a GPU (run by tools/gpu_check on the GPU machine)")
        for item in items:
            item.add_marker(skip)


def pytest_report_header(config):
    """Which jaxmg runs: a checkout's (PYTHONPATH) or an installed wheel."""
    import importlib.util

    return f"jaxmg from {importlib.util.find_spec('jaxmg').origin}"


@pytest.fixture(scope="module")
def cusolvermp():
    """Skips a module whose calls run backend="mp" where cuSOLVERMp does not load
    (its wheel is not installed: tools/gpu_check installs it from .whl/)."""
    from jaxmg._src.engines import mp

    try:
        mp.load()
    except (RuntimeError, OSError) as error:
        pytest.skip(f"needs cuSOLVERMp: {str(error).splitlines()[0][:300]}")
