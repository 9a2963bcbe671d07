"""Where jaxmg finds libjaxmg_ffi.so: JAXMG_LIBRARY alone when set, else beside
the package, else the Bazel runfiles; never a checkout's bazel-bin."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import jaxmg
from jaxmg._src import library


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "JAXMG_LIBRARY"}
    full.update(env, PYTHONPATH=str(pathlib.Path(jaxmg.__file__).absolute().parents[1]))
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          timeout=120)


def test_candidates_never_name_bazel_bin(monkeypatch):
    monkeypatch.delenv("JAXMG_LIBRARY", raising=False)
    candidates = library._candidates()
    assert candidates[0] == pathlib.Path(jaxmg.__file__).absolute().parent / "libjaxmg_ffi.so"
    assert not any("bazel-bin" in str(p) for p in candidates)


@pytest.mark.skipif("TEST_SRCDIR" not in os.environ, reason="runs under bazel test")
def test_loads_the_library_of_the_runfiles():
    if os.environ.get("JAXMG_LIBRARY"):
        pytest.skip("JAXMG_LIBRARY is set")
    loaded = library.library()._name
    assert loaded.startswith(os.environ["TEST_SRCDIR"] + "/")
    assert loaded.endswith("/xla_ext/libjaxmg_ffi.so")


def test_jaxmg_library_is_the_only_candidate_when_set(tmp_path):
    missing = tmp_path / "nowhere" / "libjaxmg_ffi.so"
    out = _run("from jaxmg._src import library; library.library()", JAXMG_LIBRARY=str(missing))
    assert out.returncode != 0
    message = out.stderr.splitlines()
    tried = [line.strip() for line in message if line.startswith("  /")]
    assert tried == [str(missing)]
    assert "cannot find libjaxmg_ffi.so" in out.stderr and "set JAXMG_LIBRARY" in out.stderr


def test_jaxmg_library_wins_over_the_runfiles(tmp_path):
    # A copy elsewhere, named by JAXMG_LIBRARY, is the one loaded.
    copy = tmp_path / "libjaxmg_ffi.so"
    copy.write_bytes(pathlib.Path(library.library()._name).read_bytes())
    out = _run("from jaxmg._src import library; print(library.library()._name)",
               JAXMG_LIBRARY=str(copy), JAX_PLATFORMS="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(copy)
