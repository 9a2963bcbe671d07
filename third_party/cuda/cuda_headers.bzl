"""Repository rule exposing CUDA, cuBLAS and cuSOLVER headers (no libraries).

Environment variables read:
  JAXMG_CUDA_INCLUDE: a directory holding cuda_runtime_api.h, cusolverMg.h,
    cusolverMp.h, nccl.h,
    cublas_v2.h and their includes. Default: <workspace>/.deps/cuda/include,
    which `tools/setup` fills from the pinned wheels of headers.lock.

The handlers only compile against these headers; the libraries are loaded
at run time (xla_ext/vendor), so the build needs no GPU and no CUDA libraries.
"""

def _cuda_headers_impl(rctx):
    workspace = rctx.path(Label("@//:WORKSPACE")).dirname
    include = rctx.os.environ.get("JAXMG_CUDA_INCLUDE", "") or "{}/.deps/cuda/include".format(workspace)
    for header in ["cuda_runtime_api.h", "cusolverMg.h", "cublas_v2.h", "cusolverMp.h", "nccl.h"]:
        if not rctx.path("{}/{}".format(include, header)).exists:
            fail("jaxmg: {} not found in {}. Run `tools/setup` (it fetches the pinned CUDA ".format(header, include) +
                 "headers), or point JAXMG_CUDA_INCLUDE at a CUDA include directory that has it.")
    rctx.symlink(include, "include")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)
""")

cuda_headers = repository_rule(
    implementation = _cuda_headers_impl,
    environ = ["JAXMG_CUDA_INCLUDE"],
    local = True,
)
