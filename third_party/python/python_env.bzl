"""Repository rule exposing the project's Python interpreter and XLA FFI headers.

Environment variables read:
  JAXMG_PYTHON: the Python interpreter that has jax installed. Default: the
    project's virtual environment, <workspace>/.venv/bin/python, which
    `tools/setup` creates from requirements.lock.

The repository provides:
  :xla_ffi_headers  the XLA FFI C/C++ API headers of the installed jaxlib
                    (jax.ffi.include_dir()), so the handlers build against the
                    same FFI version the runtime uses.
  :python_toolchain a py_runtime pinned to that interpreter, so py_test runs
                    under it even with --incompatible_strict_action_env.
"""

_FIX = "Run `tools/setup` from the repository root, or point JAXMG_PYTHON at a Python with jax installed."

def _python_env_impl(rctx):
    workspace = rctx.path(Label("@//:WORKSPACE")).dirname
    python = rctx.os.environ.get("JAXMG_PYTHON", "") or "{}/.venv/bin/python".format(workspace)
    if not rctx.path(python).exists:
        fail("jaxmg: Python interpreter {} does not exist. {}".format(python, _FIX))
    probe = rctx.execute([python, "-c", "import jax.ffi; print(jax.ffi.include_dir())"])
    if probe.return_code != 0:
        fail("jaxmg: {} cannot import jax.ffi:\n{}\n{}".format(python, probe.stderr, _FIX))
    rctx.symlink(probe.stdout.strip(), "include")
    rctx.file("BUILD.bazel", """
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
""".format(python = python))

python_env = repository_rule(
    implementation = _python_env_impl,
    environ = ["JAXMG_PYTHON"],
    local = True,
)
