"""Builds jaxmg's wheel: the Python package plus libjaxmg_ffi.so inside it.

    build_wheel.py --pyproject pyproject.toml --readme README.md --library libjaxmg_ffi.so \
        --out DIR jaxmg/__init__.py=PATH jaxmg/_src/linalg.py=PATH ...

Name, dependencies and extras come from pyproject.toml's [project] table, the
version from the package's `__version__`, and the platform tag from the
library itself: `py3-none-manylinux_2_<m>_<arch>`, where glibc 2.<m> has every
symbol version the library needs (its libstdc++ ones included). The library holds no Python ABI and
links no CUDA library, so one wheel serves every CPython the metadata allows.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import pathlib
import re
import struct
import sys
import tomllib
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the same bytes for the same inputs
_SHT_GNU_VERNEED = 0x6FFFFFFE
_MACHINES = {62: "x86_64", 183: "aarch64"}


class WheelError(Exception):
    pass


def elf_requirements(data: bytes) -> tuple[str, dict[str, set[str]]]:
    """The architecture of an ELF64 little-endian shared object and, per needed
    library, the symbol versions it asks for (its .gnu.version_r section)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise WheelError("the library is not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine not in _MACHINES:
        raise WheelError(f"the library's ELF machine {machine} has no wheel platform tag here")
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    needs: dict[str, set[str]] = {}
    for _, kind, _, _, offset, _, link, count, _, _ in sections:
        if kind != _SHT_GNU_VERNEED:
            continue
        strtab = sections[link][4]

        def string(at: int) -> str:
            return data[strtab + at:data.index(b"\0", strtab + at)].decode()

        entry = offset
        for _ in range(count):
            _, n_aux, file, aux, next_entry = struct.unpack_from("<HHIII", data, entry)
            versions = needs.setdefault(string(file), set())
            at = entry + aux
            for _ in range(n_aux):
                _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, at)
                versions.add(string(name))
                at += next_aux
            entry += next_entry
    return _MACHINES[machine], needs


# The oldest glibc whose mainstream distributions ship a system libstdc++ with
# this GLIBCXX_3.4.<n> (n: gcc): 28 (gcc 10) Debian 11, 29 (gcc 11) AlmaLinux 9,
# 30 (gcc 12) Ubuntu 22.04.
_GLIBC_FOR_GLIBCXX = {28: 31, 29: 34, 30: 35}


def platform_tag(data: bytes) -> str:
    """manylinux_2_<m>_<arch>: 2.<m> is the newest glibc the library needs,
    raised to what its libstdc++ symbol versions need."""
    arch, needs = elf_requirements(data)
    versions = {v for vs in needs.values() for v in vs}
    glibc = [int(m.group(1)) for v in versions if (m := re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)?", v))]
    glibcxx = [int(m.group(1)) for v in versions if (m := re.fullmatch(r"GLIBCXX_3\.4\.(\d+)", v))]
    minor = max(glibc, default=17)
    if glibcxx and max(glibcxx) > min(_GLIBC_FOR_GLIBCXX):
        newest = max(glibcxx)
        if newest not in _GLIBC_FOR_GLIBCXX:
            raise WheelError(f"the library needs GLIBCXX_3.4.{newest}: add the oldest glibc that "
                             "ships it to _GLIBC_FOR_GLIBCXX in tools/build_wheel.py")
        minor = max(minor, _GLIBC_FOR_GLIBCXX[newest])
    return f"manylinux_2_{minor}_{arch}"


def package_version(init: str) -> str:
    found = re.search(r'^__version__\s*=\s*"([^"]+)"', init, re.M)
    if not found:
        raise WheelError('the package\'s __init__.py has no __version__ = "..." line')
    return found.group(1)


def metadata(project: dict, version: str, readme: str) -> str:
    """The METADATA file (core metadata 2.1) of pyproject.toml's [project] table."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {version}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    if "license" in project:
        lines.append(f"License: {project['license']['text']}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines += [f"Requires-Dist: {r}" for r in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(pyproject: pathlib.Path, readme: pathlib.Path, library: pathlib.Path,
          sources: dict[str, pathlib.Path], out: pathlib.Path) -> pathlib.Path:
    """Writes the wheel into `out` and returns its path; `sources` maps each
    name in the wheel (jaxmg/...) to its file."""
    project = tomllib.loads(pyproject.read_text())["project"]
    package = project["name"].replace("-", "_")
    members: dict[str, tuple[bytes, int]] = {}  # name in the wheel -> (bytes, mode)
    for name, source in sources.items():
        if not name.startswith("jaxmg/"):
            raise WheelError(f"{name} is not part of the jaxmg package")
        members[name] = (source.read_bytes(), 0o644)
    if "jaxmg/__init__.py" not in members:
        raise WheelError("the sources lack jaxmg/__init__.py")
    so = library.read_bytes()
    members[f"jaxmg/{library.name}"] = (so, 0o755)
    version = package_version(members["jaxmg/__init__.py"][0].decode())
    tag = f"py3-none-{platform_tag(so)}"
    info = f"{package}-{version}.dist-info"
    members[f"{info}/METADATA"] = (metadata(project, version, readme.read_text()).encode(), 0o644)
    members[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: jaxmg tools/build_wheel.py\nRoot-Is-Purelib: false\n"
        f"Tag: {tag}\n".encode(), 0o644)
    members[f"{info}/top_level.txt"] = (b"jaxmg\n", 0o644)
    record = [_record_line(name, data) for name, (data, _) in members.items()] + [f"{info}/RECORD,,"]
    members[f"{info}/RECORD"] = (("\n".join(record) + "\n").encode(), 0o644)

    wheel = out / f"{package}-{version}-{tag}.whl"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (data, mode) in members.items():
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    return wheel


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=pathlib.Path, required=True)
    parser.add_argument("--readme", type=pathlib.Path, required=True)
    parser.add_argument("--library", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True, help="directory for the .whl")
    parser.add_argument("sources", nargs="+", metavar="NAME=PATH",
                        help="each file of the package: its name in the wheel and its path")
    args = parser.parse_args(argv)
    sources = dict((name, pathlib.Path(path)) for name, _, path in
                   (s.partition("=") for s in args.sources))
    try:
        wheel = build(args.pyproject, args.readme, args.library, sources, args.out)
    except WheelError as e:
        print(f"build_wheel: {e}", file=sys.stderr)
        return 1
    print(wheel.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
