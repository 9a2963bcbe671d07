"""Repository rule exposing CUDA, cuBLAS, cuSOLVER, cuSOLVERMp and NCCL headers (no libraries).

The include directory is, first found:
  1. the environment variable JAXMG_CUDA_INCLUDE;
  2. the `include` attribute (jaxmg_dependencies(cuda_include = ...));
  3. <jaxmg checkout>/.deps/cuda/include, which `tools/setup` fills from the
     pinned wheels of third_party/cuda/headers.lock.
It must hold cuda_runtime_api.h, cublas_v2.h, cusolverMg.h, cusolverMp.h,
nccl.h and what they include.

The handlers only compile against these headers; the libraries are loaded
at run time (xla_ext/vendor), so the build needs no GPU and no CUDA libraries.
"""

_HEADERS = ["cuda_runtime_api.h", "cublas_v2.h", "cusolverMg.h", "cusolverMp.h", "nccl.h"]

def _cuda_headers_impl(rctx):
    include = rctx.os.environ.get("JAXMG_CUDA_INCLUDE", "") or rctx.attr.include
    if not include:
        checkout = rctx.path(Label("//:WORKSPACE")).dirname
        include = "{}/.deps/cuda/include".format(checkout)
    for header in _HEADERS:
        if not rctx.path("{}/{}".format(include, header)).exists:
            fail(("jaxmg: {} not found in {}. Run `tools/setup` in the jaxmg checkout (it fetches " +
                  "the pinned CUDA headers), or point JAXMG_CUDA_INCLUDE (or jaxmg_dependencies(" +
                  "cuda_include = ...)) at a CUDA include directory that has it.").format(header, include))
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
    attrs = {
        "include": attr.string(doc = "CUDA include directory; JAXMG_CUDA_INCLUDE overrides it."),
    },
    environ = ["JAXMG_CUDA_INCLUDE"],
    local = True,
)
