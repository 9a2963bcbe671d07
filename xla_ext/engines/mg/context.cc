#include "xla_ext/engines/mg/context.h"

#include <algorithm>
#include <memory>

namespace jaxmg::mg {

Status Context::Get(const std::vector<int>& devices, Context** out) {
  static std::mutex cache_mu;
  static auto* cache = new std::map<std::vector<int>, std::unique_ptr<Context>>();
  std::lock_guard<std::mutex> lock(cache_mu);
  auto it = cache->find(devices);
  if (it == cache->end()) {
    std::unique_ptr<Context> context(new Context(devices));
    JAXMG_RETURN_IF_ERROR(context->Init());
    it = cache->emplace(devices, std::move(context)).first;
  }
  *out = it->second.get();
  return Status::Ok();
}

Status Context::Init() {
  const cuda::Api& api = cuda::api();
  DeviceGuard guard;
  // Peer access between distinct devices, for the layout's peer copies and
  // for cuSOLVERMg itself.
  for (int a : devices_) {
    for (int b : devices_) {
      if (a == b) continue;
      int can = 0;
      JAXMG_CUDA(api.cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      JAXMG_CUDA(api.cudaSetDevice(a));
      cudaError_t e = api.cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        api.cudaGetLastError();  // clear the sticky "already enabled"
      } else {
        JAXMG_CUDA(e);
      }
    }
  }
  for (int device : devices_) {
    cudaStream_t stream = nullptr;
    JAXMG_CUDA(api.cudaSetDevice(device));
    JAXMG_CUDA(api.cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    streams_.push_back(stream);
  }
  JAXMG_CUDA(api.cudaSetDevice(devices_[0]));
  JAXMG_CUBLAS(api.cublasCreate_v2(&blas_));
  JAXMG_CUBLAS(api.cublasSetStream_v2(blas_, streams_[0]));

  std::vector<int> ids(devices_.begin(), devices_.end());
  std::vector<int32_t> ids32(devices_.begin(), devices_.end());
  JAXMG_CUSOLVER(api.cusolverMgCreate(&handle_));
  JAXMG_CUSOLVER(api.cusolverMgDeviceSelect(handle_, static_cast<int>(ids.size()), ids.data()));
  JAXMG_CUSOLVER(api.cusolverMgCreateDeviceGrid(&grid_, 1, static_cast<int32_t>(ids32.size()),
                                                ids32.data(), CUDALIBMG_GRID_MAPPING_COL_MAJOR));
  return Status::Ok();
}

Status Context::Descriptor(int64_t n_rows, int64_t n_cols, int64_t tile, cudaDataType type,
                           cudaLibMgMatrixDesc_t* out) {
  auto key = std::make_tuple(n_rows, n_cols, tile, static_cast<int>(type));
  auto it = descriptors_.find(key);
  if (it == descriptors_.end()) {
    cudaLibMgMatrixDesc_t desc = nullptr;
    JAXMG_CUSOLVER(
        cuda::api().cusolverMgCreateMatrixDesc(&desc, n_rows, n_cols, n_rows, tile, type, grid_));
    it = descriptors_.emplace(key, desc).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status Context::LaneBlas(int lane, cublasHandle_t* out) {
  if (lane == 0) {
    *out = blas_;
    return Status::Ok();
  }
  lane_blas_.resize(devices_.size(), nullptr);
  if (lane_blas_[lane] == nullptr) {
    DeviceGuard guard;
    JAXMG_CUDA(cuda::api().cudaSetDevice(devices_[lane]));
    JAXMG_CUBLAS(cuda::api().cublasCreate_v2(&lane_blas_[lane]));
    JAXMG_CUBLAS(cuda::api().cublasSetStream_v2(lane_blas_[lane], streams_[lane]));
  }
  *out = lane_blas_[lane];
  return Status::Ok();
}

Status Context::SynchronizeLanes() const {
  for (cudaStream_t s : streams_) JAXMG_CUDA(cuda::api().cudaStreamSynchronize(s));
  return Status::Ok();
}

Status Context::SynchronizeDevices() const {
  std::vector<int> done;
  for (int device : devices_) {
    if (std::find(done.begin(), done.end(), device) != done.end()) continue;
    JAXMG_CUDA(cuda::api().cudaSetDevice(device));
    JAXMG_CUDA(cuda::api().cudaDeviceSynchronize());
    done.push_back(device);
  }
  return Status::Ok();
}

}  // namespace jaxmg::mg
