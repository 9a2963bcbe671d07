// Long-lived cuSOLVERMg state for one ordered list of devices: the handle,
// the 1 x n device grid, matrix descriptors, one stream per participant lane
// and a cuBLAS handle on the first device. Created once, cached for the
// process; a call holds `mu` while it uses the handle.
#ifndef JAXMG_XLA_EXT_ENGINES_MG_CONTEXT_H_
#define JAXMG_XLA_EXT_ENGINES_MG_CONTEXT_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "xla_ext/common/status.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::mg {

class Context {
 public:
  // The cached context of `devices` (CUDA ordinals in participant order;
  // repeats allowed). cuda::Load must have succeeded.
  static Status Get(const std::vector<int>& devices, Context** out);

  const std::vector<int>& devices() const { return devices_; }
  cusolverMgHandle_t handle() const { return handle_; }
  cudaStream_t stream(int lane) const { return streams_[lane]; }
  cublasHandle_t blas() const { return blas_; }
  // A cuBLAS handle on participant `lane`'s device and stream, made on first
  // use (for work that must run where a lane's buffers live). Hold `mu`.
  Status LaneBlas(int lane, cublasHandle_t* out);

  // Descriptor of an n_rows x n_cols matrix in column tiles of `tile`
  // (one row tile), cached.
  Status Descriptor(int64_t n_rows, int64_t n_cols, int64_t tile, cudaDataType type,
                    cudaLibMgMatrixDesc_t* out);

  // Waits for every lane's stream.
  Status SynchronizeLanes() const;

  // Waits for all work on every device of the list. cuSOLVERMg returns
  // before its kernels on the other GPUs have finished, so its results are
  // only safe to move after this.
  Status SynchronizeDevices() const;

  std::mutex mu;

 private:
  explicit Context(std::vector<int> devices) : devices_(std::move(devices)) {}
  Status Init();

  std::vector<int> devices_;
  cusolverMgHandle_t handle_ = nullptr;
  cudaLibMgGrid_t grid_ = nullptr;
  std::vector<cudaStream_t> streams_;
  cublasHandle_t blas_ = nullptr;
  std::vector<cublasHandle_t> lane_blas_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, cudaLibMgMatrixDesc_t> descriptors_;
};

using DeviceGuard = cuda::DeviceGuard;

}  // namespace jaxmg::mg

#endif  // JAXMG_XLA_EXT_ENGINES_MG_CONTEXT_H_
