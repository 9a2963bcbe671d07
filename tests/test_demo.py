"""python -m jaxmg.demo, the README's main job: every routine's check passes
(its residuals against NumPy, and the Gaussian-process gradient through the
factor against the same loss written with JAX's own functions), in a real
and a complex dtype."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import jaxmg

PATHS = os.pathsep.join(
    [str(pathlib.Path(jaxmg.__file__).parents[1]), str(pathlib.Path(__file__).parent)]
)
ROUTINES = ("potrs", "potri", "syevd", "lu", "slogdet", "grad")


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_every_check_of_the_demo_passes(dtype):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=PATHS, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-m", "jaxmg.demo", "-n", "200", "--devices", "4", "--tile", "8",
         "--dtype", dtype],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = [line.split() for line in result.stdout.splitlines()]
    # The table's rows: routine, time, residual, residual/eps, check.
    rows = {fields[0]: fields for fields in table if len(fields) == 5 and fields[0] in ROUTINES}
    assert set(rows) == set(ROUTINES), result.stdout
    for name, fields in rows.items():
        assert fields[-1] == "ok", (name, fields)
    assert "FAILED" not in result.stdout
