"""The wheel (tools/build_wheel.py via //tests:wheel, the library of this build):
its contents and metadata, the builder's refusals, and the package working
once pip has installed it outside the source tree."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import pathlib
import re
import subprocess
import sys
import tomllib
import zipfile

import pytest

import jaxmg

# The repository root: the runfiles' or the checkout's (not resolved, so
# runfiles stay runfiles).
_ROOT = pathlib.Path(__file__).absolute().parent.parent
sys.path.insert(0, str(_ROOT / "tools"))
import build_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(not (_ROOT / "tests" / "wheel").is_dir(),
                                reason="needs //tests:wheel (bazel test //tests:test_wheel)")


@pytest.fixture(scope="module")
def wheel() -> pathlib.Path:
    (found,) = (_ROOT / "tests" / "wheel").glob("*.whl")
    return found


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((_ROOT / "pyproject.toml").read_text())["project"]


def _info(z: zipfile.ZipFile) -> str:
    (info,) = {name.split("/")[0] for name in z.namelist() if ".dist-info/" in name}
    return info


def test_carries_every_module_and_the_library(wheel):
    package = pathlib.Path(jaxmg.__file__).parent
    modules = {f"jaxmg/{p.relative_to(package)}" for p in package.rglob("*.py")}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert modules <= names
        assert "jaxmg/libjaxmg_ffi.so" in names
        assert z.getinfo("jaxmg/libjaxmg_ffi.so").external_attr >> 16 & 0o111
        library = z.read("jaxmg/libjaxmg_ffi.so")
    assert library[:4] == b"\x7fELF"


def test_record_hashes_every_file(wheel):
    with zipfile.ZipFile(wheel) as z:
        info = _info(z)
        rows = list(csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())))
        recorded = {row[0]: row for row in rows}
        assert set(recorded) == set(z.namelist())
        for name, digest, size in rows:
            if name == f"{info}/RECORD":
                assert digest == size == ""
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data)), name


def test_metadata_follows_pyproject(wheel, project):
    with zipfile.ZipFile(wheel) as z:
        info = _info(z)
        metadata = z.read(f"{info}/METADATA").decode().split("\n\n", 1)[0].splitlines()
        tag = re.search(r"^Tag: (.+)$", z.read(f"{info}/WHEEL").decode(), re.M).group(1)
    fields = [line.split(": ", 1) for line in metadata]
    assert ["Name", project["name"]] in fields
    assert ["Version", jaxmg.__version__] in fields
    assert ["Requires-Python", project["requires-python"]] in fields
    requires = [value for key, value in fields if key == "Requires-Dist"]
    assert all(r in requires for r in project["dependencies"])
    for extra, wanted in project["optional-dependencies"].items():
        assert ["Provides-Extra", extra] in fields
        assert all(f'{r}; extra == "{extra}"' in requires for r in wanted)
    assert wheel.name == f"{project['name'].replace('-', '_')}-{jaxmg.__version__}-{tag}.whl"
    assert tag.startswith("py3-none-manylinux_2_")


def test_platform_tag_covers_every_glibc_version_the_library_needs(wheel):
    with zipfile.ZipFile(wheel) as z:
        library = z.read("jaxmg/libjaxmg_ffi.so")
    arch, needs = build_wheel.elf_requirements(library)
    assert "libc.so.6" in needs and not any("cuda" in lib or "cusolver" in lib for lib in needs)
    minors = [int(v.split(".")[1]) for v in needs["libc.so.6"] if v.startswith("GLIBC_2.")]
    tag = build_wheel.platform_tag(library)
    assert tag.endswith(f"_{arch}") and int(tag.split("_")[2]) >= max(minors)


def test_installed_wheel_solves_outside_the_tree(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--target", str(target), str(wheel)], check=True)
    script = """
import jax, numpy as np, jaxmg
import jaxmg.numpy, jaxmg.scipy.linalg
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxmg._src import library
assert jaxmg.scipy.linalg.qr(np.eye(3))[0].shape == (3, 3) and jaxmg.numpy.linalg.det(np.eye(2)) == 1
mesh = jax.make_mesh((2,), ("x",))
a = np.eye(6, dtype=np.float32) * 2 + 0.1
x = jaxmg.solve(jax.device_put(a, NamedSharding(mesh, P("x", None))), np.ones((6, 1), np.float32), assume_a="pos")
print(jaxmg.__file__)
print(library.library()._name)
print(float(np.abs(a @ np.asarray(x) - 1).max()))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAXMG_LIBRARY")}
    env.update(PYTHONPATH=str(target), JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    package, loaded, residual = out.stdout.split()
    assert package == str(target / "jaxmg" / "__init__.py")
    assert loaded == str(target / "jaxmg" / "libjaxmg_ffi.so")
    assert float(residual) < 1e-5


# ---- The builder's refusals, by message ------------------------------------


def test_refuses_a_file_that_is_not_elf():
    with pytest.raises(build_wheel.WheelError, match="not a 64-bit little-endian ELF"):
        build_wheel.platform_tag(b"#!/bin/sh\n")


def test_refuses_a_libstdcxx_newer_than_it_knows(monkeypatch):
    monkeypatch.setattr(build_wheel, "elf_requirements",
                        lambda data: ("x86_64", {"libstdc++.so.6": {"GLIBCXX_3.4.99"}}))
    with pytest.raises(build_wheel.WheelError, match="GLIBCXX_3.4.99: add the oldest glibc"):
        build_wheel.platform_tag(b"")


def test_refuses_a_package_without_version():
    with pytest.raises(build_wheel.WheelError, match="no __version__"):
        build_wheel.package_version('"""jaxmg."""\nVERSION = "1"\n')


def test_refuses_files_outside_the_package(tmp_path):
    stray = tmp_path / "conftest.py"
    stray.write_text("")
    with pytest.raises(build_wheel.WheelError, match="tests/conftest.py is not part of the jaxmg package"):
        build_wheel.build(_ROOT / "pyproject.toml", _ROOT / "README.md", stray,
                          {"tests/conftest.py": stray}, tmp_path / "out")
    assert not (tmp_path / "out").exists()
