"""Repository rule exposing the Python interpreter jaxmg runs under and its XLA FFI headers.

The interpreter is, first found:
  1. the environment variable JAXMG_PYTHON (one switch for a whole build);
  2. the `python` attribute (jaxmg_dependencies(python = ...));
  3. <jaxmg checkout>/.venv/bin/python, which `tools/setup` creates from the lock of
     the CPython it finds;
  4. `python3` on PATH.
It must have jax installed (and pytest, for jaxmg's tests).

The repository provides:
  :xla_ffi_headers   the XLA FFI C/C++ API headers of that interpreter's jaxlib
                     (jax.ffi.include_dir()), so the handlers build against the
                     FFI version the runtime uses.
  :python_toolchain  a py_runtime pinned to that interpreter, so py_test runs
                     under it even with --incompatible_strict_action_env.
  :environment       the interpreter binary and the metadata file of every
                     installed distribution: in a test's runfiles, it makes
                     the environment part of the test's cache key (installing,
                     removing or upgrading a package re-runs the test).
"""

_FIX = ("Run `tools/setup` in the jaxmg checkout, set JAXMG_PYTHON, or pass " +
        "jaxmg_dependencies(python = ...) a Python that has jax installed.")

_PROBE = """
import json, os, site, sys
import jax.ffi
dirs = list(site.getsitepackages())
if site.ENABLE_USER_SITE:
    dirs.append(site.getusersitepackages())
print(json.dumps({
    "include": jax.ffi.include_dir(),
    "executable": os.path.realpath(sys.executable),
    "version": "%d.%d.%d" % sys.version_info[:3],
    "site": [d for i, d in enumerate(dirs) if os.path.isdir(d) and d not in dirs[:i]],
}))
"""

def _interpreter(rctx):
    """Returns (interpreter path, how it was chosen)."""
    if rctx.os.environ.get("JAXMG_PYTHON", ""):
        return rctx.os.environ["JAXMG_PYTHON"], "JAXMG_PYTHON"
    if rctx.attr.python:
        return rctx.attr.python, "the python attribute"
    checkout = rctx.path(Label("//:WORKSPACE")).dirname
    venv = rctx.path("{}/.venv/bin/python".format(checkout))
    if venv.exists:
        # Re-run this rule when tools/setup remakes the venv (perhaps for
        # another CPython) under the same path.
        rctx.path(Label("//:.venv/pyvenv.cfg"))
        return str(venv), "jaxmg's .venv"
    on_path = rctx.which("python3")
    if on_path:
        return str(on_path), "python3 on PATH"
    fail("jaxmg: no Python interpreter found. " + _FIX)

def _python_env_impl(rctx):
    python, origin = _interpreter(rctx)
    if not rctx.path(python).exists:
        fail("jaxmg: Python interpreter {} ({}) does not exist. {}".format(python, origin, _FIX))
    probe = rctx.execute([python, "-c", _PROBE])
    if probe.return_code != 0:
        fail("jaxmg: {} ({}) cannot import jax.ffi:\n{}\n{}".format(python, origin, probe.stderr, _FIX))
    found = json.decode(probe.stdout.strip().splitlines()[-1])
    rctx.symlink(found["include"], "include")
    rctx.symlink(found["executable"], "interpreter/" + rctx.path(found["executable"]).basename)
    for i, site in enumerate(found["site"]):
        rctx.symlink(site, "site/{}".format(i))
    rctx.file("BUILD.bazel", """# Python {version} at {python} ({origin}).
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "xla_ffi_headers",
    hdrs = glob(["include/xla/ffi/api/*.h"]),
    includes = ["include"],
)

py_runtime(
    name = "python3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
    stub_shebang = "#!{python}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":python3_runtime",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

filegroup(
    name = "environment",
    srcs = glob(["interpreter/*"]) + glob([
        "site/*/*.dist-info/METADATA",
        "site/*/*.egg-info/PKG-INFO",
        "site/*/*.egg-info",
    ]),
)
""".format(python = python, origin = origin, version = found["version"]))

python_env = repository_rule(
    implementation = _python_env_impl,
    attrs = {
        "python": attr.string(doc = "Path of the Python interpreter; JAXMG_PYTHON overrides it."),
    },
    environ = ["JAXMG_PYTHON", "PATH"],
    local = True,
)
