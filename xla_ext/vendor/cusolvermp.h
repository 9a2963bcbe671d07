// NCCL and cuSOLVERMp, loaded at run time like the other CUDA libraries but
// on their own: libcusolverMp needs the driver (libcuda.so.1) and NCCL, so a
// machine that lacks them still runs the cuSOLVERMg and CPU engines.
#ifndef JAXMG_XLA_EXT_VENDOR_CUSOLVERMP_H_
#define JAXMG_XLA_EXT_VENDOR_CUSOLVERMP_H_

// cuda.h first: nccl.h brings in cuda_runtime.h, whose C++ overloads of
// cudaMalloc would make cuda.h's typed table ambiguous.
#include "xla_ext/vendor/cuda.h"

#include <cusolverMp.h>
#include <nccl.h>

#include <string>

#include "xla_ext/common/status.h"

namespace jaxmg::cusolvermp {

#define JAXMG_NCCL_FUNCTIONS(X)                                                       \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclGroupStart)         \
  X(ncclGroupEnd) X(ncclCommAbort) X(ncclGetErrorString) X(ncclBroadcast)            \
  X(ncclCommGetAsyncError)

#define JAXMG_CUSOLVERMP_FUNCTIONS(X)                                                  \
  X(cusolverMpCreate) X(cusolverMpSetStream) X(cusolverMpGetVersion)                   \
  X(cusolverMpCreateDeviceGrid) X(cusolverMpCreateMatrixDesc)                          \
  X(cusolverMpDestroyMatrixDesc) X(cusolverMpPotrf_bufferSize) X(cusolverMpPotrf)      \
  X(cusolverMpPotrs_bufferSize) X(cusolverMpPotrs) X(cusolverMpGetrf_bufferSize)       \
  X(cusolverMpGetrf) X(cusolverMpGetrs_bufferSize) X(cusolverMpGetrs)                  \
  X(cusolverMpSyevd_bufferSize) X(cusolverMpSyevd) X(cusolverMpGeqrf_bufferSize)       \
  X(cusolverMpGeqrf) X(cusolverMpOrgqr_bufferSize) X(cusolverMpOrgqr)

#define JAXMG_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
struct Api {
  JAXMG_NCCL_FUNCTIONS(JAXMG_DECLARE_POINTER)
  JAXMG_CUSOLVERMP_FUNCTIONS(JAXMG_DECLARE_POINTER)
};
#undef JAXMG_DECLARE_POINTER

// Loads NCCL and cuSOLVERMp once from `search_path` (':'-separated, then the
// system path); cuda::Load must have succeeded. Later calls return the first
// outcome.
Status Load(const std::string& search_path);
bool Loaded();
const Api& api();

Status NcclError(ncclResult_t code, const char* expr, const char* file, int line);

}  // namespace jaxmg::cusolvermp

#define JAXMG_NCCL(expr)                                                                \
  do {                                                                                  \
    ncclResult_t jaxmg_code_ = (expr);                                                  \
    if (jaxmg_code_ != ncclSuccess)                                                     \
      return ::jaxmg::cusolvermp::NcclError(jaxmg_code_, #expr, __FILE__, __LINE__);    \
  } while (0)

#endif  // JAXMG_XLA_EXT_VENDOR_CUSOLVERMP_H_
