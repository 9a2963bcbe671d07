// The only code that names CUDA libraries. cudart, cuBLAS, cuSOLVER and cuSOLVERMg are
// loaded at run time (dlopen) from directories Python passes in (the NVIDIA
// pip wheels or a toolkit), so the library builds and loads without a GPU.
// Calls go through typed tables whose signatures come from the real headers.
#ifndef JAXMG_XLA_EXT_VENDOR_CUDA_H_
#define JAXMG_XLA_EXT_VENDOR_CUDA_H_

#define DISABLE_CUSOLVERMG_DEPRECATED
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <cusolverMg.h>

#include <string>

#include "xla_ext/common/status.h"

namespace jaxmg::cuda {

#define JAXMG_CUDART_FUNCTIONS(X)                                                      \
  X(cudaSetDevice) X(cudaGetDevice) X(cudaGetDeviceCount) X(cudaGetErrorString)        \
  X(cudaStreamCreateWithFlags) X(cudaStreamSynchronize) X(cudaStreamDestroy)           \
  X(cudaMemcpyPeerAsync) X(cudaMemcpyAsync) X(cudaMemcpy) X(cudaMemsetAsync)          \
  X(cudaDeviceCanAccessPeer) X(cudaDeviceEnablePeerAccess) X(cudaGetLastError)        \
  X(cudaMalloc) X(cudaFree) X(cudaDeviceSynchronize) X(cudaEventCreateWithFlags)      \
  X(cudaEventRecord) X(cudaStreamWaitEvent) X(cudaEventDestroy) X(cudaMemGetInfo)       \
  X(cudaIpcGetMemHandle) X(cudaIpcOpenMemHandle) X(cudaIpcCloseMemHandle)          \
  X(cudaMemcpy2DAsync)

#define JAXMG_CUBLAS_FUNCTIONS(X)                                                      \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSgeam)         \
  X(cublasDgeam) X(cublasCgeam) X(cublasZgeam) X(cublasSgemm_v2) X(cublasDgemm_v2)    \
  X(cublasCgemm_v2) X(cublasZgemm_v2) X(cublasStrsm_v2) X(cublasDtrsm_v2)             \
  X(cublasCtrsm_v2) X(cublasZtrsm_v2) X(cublasSswap_v2) X(cublasDswap_v2)             \
  X(cublasCswap_v2) X(cublasZswap_v2) X(cublasSasum_v2) X(cublasDasum_v2)        \
  X(cublasScasum_v2) X(cublasDzasum_v2)

// cuSOLVER's one-GPU API: the iterative-refinement solver (engines/dn).
#define JAXMG_CUSOLVERDN_FUNCTIONS(X)                                                  \
  X(cusolverDnCreate) X(cusolverDnDestroy) X(cusolverDnSetStream)                      \
  X(cusolverDnIRSParamsCreate) X(cusolverDnIRSParamsDestroy)                           \
  X(cusolverDnIRSParamsSetSolverPrecisions) X(cusolverDnIRSParamsSetRefinementSolver)  \
  X(cusolverDnIRSParamsSetMaxIters)                                                    \
  X(cusolverDnIRSParamsEnableFallback) X(cusolverDnIRSInfosCreate)                     \
  X(cusolverDnIRSInfosDestroy) X(cusolverDnIRSXgesv_bufferSize) X(cusolverDnIRSXgesv)

#define JAXMG_CUSOLVERMG_FUNCTIONS(X)                                                  \
  X(cusolverMgCreate) X(cusolverMgDestroy) X(cusolverMgDeviceSelect)                   \
  X(cusolverMgCreateDeviceGrid) X(cusolverMgDestroyGrid) X(cusolverMgCreateMatrixDesc) \
  X(cusolverMgDestroyMatrixDesc) X(cusolverMgPotrf_bufferSize) X(cusolverMgPotrf)      \
  X(cusolverMgPotrs_bufferSize) X(cusolverMgPotrs) X(cusolverMgPotri_bufferSize)      \
  X(cusolverMgPotri) X(cusolverMgSyevd_bufferSize) X(cusolverMgSyevd)                  \
  X(cusolverMgGetrf_bufferSize) X(cusolverMgGetrf) X(cusolverMgGetrs_bufferSize)      \
  X(cusolverMgGetrs)

#define JAXMG_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
struct Api {
  JAXMG_CUDART_FUNCTIONS(JAXMG_DECLARE_POINTER)
  JAXMG_CUBLAS_FUNCTIONS(JAXMG_DECLARE_POINTER)
  JAXMG_CUSOLVERDN_FUNCTIONS(JAXMG_DECLARE_POINTER)
  JAXMG_CUSOLVERMG_FUNCTIONS(JAXMG_DECLARE_POINTER)
};
#undef JAXMG_DECLARE_POINTER

// Loads the libraries once. `search_path` is a ':'-separated list of
// directories tried before the system's default search. Thread-safe; later
// calls return the first outcome.
Status Load(const std::string& search_path);

// The loaded table; Load must have succeeded.
const Api& api();
bool Loaded();

// Restores the calling thread's current CUDA device on scope exit: handlers
// run on XLA threads that expect their device unchanged.
class DeviceGuard {
 public:
  DeviceGuard();
  ~DeviceGuard();

 private:
  int saved_ = -1;
};

Status CudaError(cudaError_t code, const char* expr, const char* file, int line);
Status CusolverError(cusolverStatus_t code, const char* expr, const char* file, int line);
Status CublasError(cublasStatus_t code, const char* expr, const char* file, int line);

}  // namespace jaxmg::cuda

// Each turns a failed library call into a Status naming the call and place.
#define JAXMG_CUDA(expr)                                                         \
  do {                                                                           \
    cudaError_t jaxmg_code_ = (expr);                                            \
    if (jaxmg_code_ != cudaSuccess)                                              \
      return ::jaxmg::cuda::CudaError(jaxmg_code_, #expr, __FILE__, __LINE__);   \
  } while (0)
#define JAXMG_CUSOLVER(expr)                                                       \
  do {                                                                             \
    cusolverStatus_t jaxmg_code_ = (expr);                                         \
    if (jaxmg_code_ != CUSOLVER_STATUS_SUCCESS)                                    \
      return ::jaxmg::cuda::CusolverError(jaxmg_code_, #expr, __FILE__, __LINE__); \
  } while (0)
#define JAXMG_CUBLAS(expr)                                                       \
  do {                                                                           \
    cublasStatus_t jaxmg_code_ = (expr);                                         \
    if (jaxmg_code_ != CUBLAS_STATUS_SUCCESS)                                    \
      return ::jaxmg::cuda::CublasError(jaxmg_code_, #expr, __FILE__, __LINE__); \
  } while (0)

#endif  // JAXMG_XLA_EXT_VENDOR_CUDA_H_
