"""One process per GPU on the GPU machine. The test process itself never
starts JAX: the launched ranks need the GPU's memory."""

import shutil
import subprocess

import pytest


def _gpus() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([line for line in out.stdout.splitlines() if line.startswith("GPU ")])


GPUS = _gpus()


def pytest_collection_modifyitems(config, items):
    if GPUS == 0:
        skip = pytest.mark.skip(reason="needs a GPU (run by tools/gpu_check on the GPU machine)")
        for item in items:
            item.add_marker(skip)


def pytest_report_header(config):
    """Which jaxmg runs: a checkout's (PYTHONPATH) or an installed wheel."""
    import importlib.util

    return f"jaxmg from {importlib.util.find_spec('jaxmg').origin}"
