"""jaxmg's external repositories, for jaxmg's own WORKSPACE and for any WORKSPACE using jaxmg:

    local_repository(name = "jaxmg_repo", path = "/path/to/jaxmg")  # or an http_archive
    load("@jaxmg_repo//:workspace.bzl", "jaxmg_dependencies")
    jaxmg_dependencies()

Then depend on @jaxmg_repo//jaxmg (py_library, the FFI library in its data),
@jaxmg_repo//xla_ext:libjaxmg_ffi.so, or @jaxmg_repo//xla_ext:handlers.
"""

load("//third_party:linked_repository.bzl", "linked_repository")
load("//third_party/cuda:cuda_headers.bzl", "cuda_headers")
load("//third_party/python:python_env.bzl", "python_env")

def _declare(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def jaxmg_dependencies(python = "", cuda_include = "", python_toolchain = True, offline_bazel = True):
    """Declares jaxmg_python and jaxmg_cuda_headers (and Bazel's offline stand-ins).

    Args:
      python: the Python interpreter (with jax) that builds and tests use; default:
        JAXMG_PYTHON, else the jaxmg checkout's .venv, else python3 on PATH.
      cuda_include: the directory of CUDA, cuSOLVER, NCCL headers; default:
        JAXMG_CUDA_INCLUDE, else the jaxmg checkout's .deps/cuda/include.
      python_toolchain: register that interpreter as the Python toolchain (turn it
        off when your WORKSPACE registers its own, with jax installed).
      offline_bazel: declare local stand-ins for rules_cc, rules_java, platforms and
        remote_coverage_tools, which Bazel 4.2.3 would otherwise download; each only
        where the WORKSPACE has not declared it already.
    """
    if Label("//:workspace.bzl").workspace_name == "jaxmg":
        fail("jaxmg: name this repository jaxmg_repo (or anything but jaxmg): a " +
             "repository named jaxmg shadows the jaxmg Python package in runfiles.")
    if offline_bazel:
        _declare(linked_repository, "rules_cc", marker = Label("//third_party/rules_cc:WORKSPACE"))
        _declare(
            linked_repository,
            "remote_coverage_tools",
            marker = Label("//third_party/remote_coverage_tools:WORKSPACE"),
        )
        debian = "Install Debian's bazel-rules-java and bazel-platforms (tools/setup does), " + \
                 "or call jaxmg_dependencies(offline_bazel = False) where Bazel can download."
        _declare(linked_repository, "rules_java", path = "/usr/share/bazel/rules/java", fix = debian)
        _declare(linked_repository, "platforms", path = "/usr/share/bazel/tools/platforms", fix = debian)
    python_env(name = "jaxmg_python", python = python)
    cuda_headers(name = "jaxmg_cuda_headers", include = cuda_include)
    if python_toolchain:
        native.register_toolchains("@jaxmg_python//:python_toolchain")
