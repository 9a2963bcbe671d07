#include "xla_ext/engines/dn/engine.h"

#include <complex>
#include <map>
#include <mutex>

#include "xla_ext/vendor/cuda.h"

namespace jaxmg::dn {
namespace {

using engines::LowPrecision;
using engines::Refiner;

// One cuSOLVER handle per GPU, made on first use and kept: creating one
// costs milliseconds. A call holds the GPU's lock while it uses it.
struct Handle {
  std::mutex mu;
  cusolverDnHandle_t handle = nullptr;
};

Status HandleOf(int device, Handle** out) {
  static std::mutex mu;
  static auto* handles = new std::map<int, Handle*>();
  std::lock_guard<std::mutex> lock(mu);
  Handle*& h = (*handles)[device];
  if (h == nullptr) {
    auto* fresh = new Handle();
    JAXMG_CUSOLVER(cuda::api().cusolverDnCreate(&fresh->handle));
    h = fresh;
  }
  *out = h;
  return Status::Ok();
}

template <typename T>
constexpr bool kComplex = false;
template <typename R>
constexpr bool kComplex<std::complex<R>> = true;

template <typename T>
constexpr cusolverPrecType_t MainPrecision() {
  if constexpr (std::is_same_v<T, double>) return CUSOLVER_R_64F;
  if constexpr (std::is_same_v<T, float>) return CUSOLVER_R_32F;
  if constexpr (std::is_same_v<T, std::complex<double>>) return CUSOLVER_C_64F;
  return CUSOLVER_C_32F;
}

template <typename T>
Status LowestPrecision(LowPrecision p, cusolverPrecType_t* out) {
  const bool c = kComplex<T>;
  switch (p) {
    case LowPrecision::kFp16: *out = c ? CUSOLVER_C_16F : CUSOLVER_R_16F; return Status::Ok();
    case LowPrecision::kBf16: *out = c ? CUSOLVER_C_16BF : CUSOLVER_R_16BF; return Status::Ok();
    case LowPrecision::kTf32: *out = c ? CUSOLVER_C_TF32 : CUSOLVER_R_TF32; return Status::Ok();
    case LowPrecision::kFp32: *out = c ? CUSOLVER_C_32F : CUSOLVER_R_32F; return Status::Ok();
  }
  return Errorf("jaxmg: irsgesv: unknown lowest precision ", static_cast<int64_t>(p));
}

Status RefinementSolver(const engines::Call& call, cusolverIRSRefinement_t* out) {
  const bool gmres = call.refinement.refiner != Refiner::kClassical;
  if (gmres && call.k != 1) {
    return Errorf("jaxmg: irsgesv: cuSOLVER's GMRES refinement takes one right-hand side, got ",
                  call.k, "; use the classical refinement for several");
  }
  switch (call.refinement.refiner) {
    case Refiner::kClassical: *out = CUSOLVER_IRS_REFINE_CLASSICAL; return Status::Ok();
    case Refiner::kGmres: *out = CUSOLVER_IRS_REFINE_GMRES; return Status::Ok();
    case Refiner::kClassicalGmres: *out = CUSOLVER_IRS_REFINE_CLASSICAL_GMRES; return Status::Ok();
  }
  return Errorf("jaxmg: irsgesv: unknown refinement solver ",
                static_cast<int64_t>(call.refinement.refiner));
}

// The IRS parameters of a call, destroyed with it.
class Params {
 public:
  ~Params() {
    if (params_ != nullptr) cuda::api().cusolverDnIRSParamsDestroy(params_);
  }

  template <typename T>
  Status Make(const engines::Call& call) {
    const cuda::Api& api = cuda::api();
    cusolverPrecType_t lowest = MainPrecision<T>();
    cusolverIRSRefinement_t refine = CUSOLVER_IRS_REFINE_CLASSICAL;
    JAXMG_RETURN_IF_ERROR(LowestPrecision<T>(call.refinement.lowest, &lowest));
    JAXMG_RETURN_IF_ERROR(RefinementSolver(call, &refine));
    if (call.refinement.max_iterations < 1) {
      return Errorf("jaxmg: irsgesv: max_iterations=", call.refinement.max_iterations,
                    " must be at least 1");
    }
    JAXMG_CUSOLVER(api.cusolverDnIRSParamsCreate(&params_));
    JAXMG_CUSOLVER(api.cusolverDnIRSParamsSetSolverPrecisions(params_, MainPrecision<T>(), lowest));
    JAXMG_CUSOLVER(api.cusolverDnIRSParamsSetRefinementSolver(params_, refine));
    JAXMG_CUSOLVER(api.cusolverDnIRSParamsSetMaxIters(params_, call.refinement.max_iterations));
    JAXMG_CUSOLVER(api.cusolverDnIRSParamsEnableFallback(params_));
    return Status::Ok();
  }

  cusolverDnIRSParams_t get() const { return params_; }

 private:
  cusolverDnIRSParams_t params_ = nullptr;
};

class Infos {
 public:
  ~Infos() {
    if (infos_ != nullptr) cuda::api().cusolverDnIRSInfosDestroy(infos_);
  }
  Status Make() {
    JAXMG_CUSOLVER(cuda::api().cusolverDnIRSInfosCreate(&infos_));
    return Status::Ok();
  }
  cusolverDnIRSInfos_t get() const { return infos_; }

 private:
  cusolverDnIRSInfos_t infos_ = nullptr;
};

Status CheckInt(int64_t v, const char* what) {
  if (v < 1 || v > 2147483647) return Errorf("jaxmg: irsgesv: ", what, "=", v, " is out of range");
  return Status::Ok();
}

}  // namespace

template <typename T>
Status DnEngine<T>::WorkspaceBytes(const Call& call, int, void*, size_t* bytes) {
  JAXMG_RETURN_IF_ERROR(CheckInt(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(CheckInt(call.k, "K"));
  cuda::DeviceGuard guard;
  JAXMG_CUDA(cuda::api().cudaSetDevice(device_));
  Handle* h = nullptr;
  JAXMG_RETURN_IF_ERROR(HandleOf(device_, &h));
  Params params;
  JAXMG_RETURN_IF_ERROR(params.Make<T>(call));
  std::lock_guard<std::mutex> lock(h->mu);
  JAXMG_CUSOLVER(cuda::api().cusolverDnIRSXgesv_bufferSize(
      h->handle, params.get(), static_cast<int>(call.n), static_cast<int>(call.k), bytes));
  return Status::Ok();
}

template <typename T>
Status DnEngine<T>::IrsGesv(const Call& call, const Parts& parts) {
  if (parts.size() != 1) return Errorf("jaxmg: irsgesv runs on one GPU, got ", parts.size());
  const engines::Part<T>& part = parts[0];
  const cuda::Api& api = cuda::api();
  cuda::DeviceGuard guard;
  JAXMG_CUDA(api.cudaSetDevice(device_));
  Handle* h = nullptr;
  JAXMG_RETURN_IF_ERROR(HandleOf(device_, &h));
  Params params;
  Infos infos;
  JAXMG_RETURN_IF_ERROR(params.Make<T>(call));
  JAXMG_RETURN_IF_ERROR(infos.Make());
  const int n = static_cast<int>(call.n);
  const int k = static_cast<int>(call.k);
  int iterations = 0;
  {
    std::lock_guard<std::mutex> lock(h->mu);
    JAXMG_CUSOLVER(api.cusolverDnSetStream(h->handle, stream_));
    // Returns once done: it reads the iteration count back to the host.
    JAXMG_CUSOLVER(api.cusolverDnIRSXgesv(
        h->handle, params.get(), infos.get(), n, k, part.a(), n, const_cast<T*>(part.b()), n,
        part.x(), n, part.work(), part.bytes(engines::kWork), &iterations, part.info()));
  }
  JAXMG_CUDA(api.cudaMemcpyAsync(part.iterations(), &iterations, sizeof(iterations),
                                 cudaMemcpyHostToDevice, stream_));
  JAXMG_CUDA(api.cudaStreamSynchronize(stream_));  // before `iterations` goes
  return Status::Ok();
}

template class DnEngine<double>;
template class DnEngine<std::complex<double>>;

}  // namespace jaxmg::dn
