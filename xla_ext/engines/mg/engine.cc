#include "xla_ext/engines/mg/engine.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "xla_ext/common/dtypes.h"
#include "xla_ext/common/scalar.h"
#include "xla_ext/engines/mg/solvers.h"
#include "xla_ext/layout/block_cyclic.h"
#include "xla_ext/vendor/cublas.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::mg {
namespace {

using engines::Call;
using engines::Routine;
using engines::Trans;

layout::ColumnLayout LayoutOf(const Call& call) {
  return layout::ColumnLayout{call.n, call.tile, call.parts};
}

bool HasRhs(Routine r) {
  return r == Routine::kPotrs || r == Routine::kCholSolve || r == Routine::kLuSolve;
}

mg::Routine SolverRoutine(const Call& call) {
  switch (call.routine) {
    case Routine::kPotrs: return mg::Routine::kPotrs;
    case Routine::kPotrf: return mg::Routine::kPotrf;
    case Routine::kCholSolve: return mg::Routine::kCholSolve;
    case Routine::kGetrf: return mg::Routine::kGetrf;
    case Routine::kLuSolve: return mg::Routine::kGetrs;
    case Routine::kPotri: return mg::Routine::kPotri;
    default: return call.vectors ? mg::Routine::kSyevd : mg::Routine::kSyevdValues;
  }
}

// cuSOLVERMg's workspace rounded so that the spare tile after it stays
// 256-byte aligned.
int64_t Rounded(int64_t elements) { return (elements + 63) / 64 * 64; }

Status PublishInfo(const std::vector<int32_t*>& targets, int32_t info) {
  for (int32_t* target : targets) {
    JAXMG_CUDA(cuda::api().cudaMemcpy(target, &info, sizeof(info), cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

template <typename T>
std::vector<int32_t*> Infos(const engines::Parts<T>& parts) {
  std::vector<int32_t*> infos;
  for (const auto& p : parts) infos.push_back(p.info());
  return infos;
}

template <typename T>
std::vector<int32_t*> Pivots(const engines::Parts<T>& parts) {
  std::vector<int32_t*> pivots;
  for (const auto& p : parts) pivots.push_back(p.pivots());
  return pivots;
}

}  // namespace

template <typename T>
Status MgEngine<T>::SolverElements(const Call& call, void* a, int64_t* elements) {
  const int64_t nrhs = HasRhs(call.routine) ? std::min(call.k, call.tile) : 0;
  return WorkspaceElements<T>(ctx_, SolverRoutine(call), LayoutOf(call), nrhs, a, elements);
}

template <typename T>
Status MgEngine<T>::WorkspaceBytes(const Call& call, int index, void* a, size_t* bytes) {
  int64_t lwork = 0;
  {
    std::lock_guard<std::mutex> lock(ctx_.mu);
    DeviceGuard guard;
    JAXMG_RETURN_IF_ERROR(SolverElements(call, a, &lwork));
  }
  const int64_t stage = index == 0 && HasRhs(call.routine) ? 2 * call.n * call.k : 0;
  *bytes = (Rounded(lwork) + call.n * call.tile + stage) * sizeof(T);
  return Status::Ok();
}

namespace {

// Each part's workspace holds cuSOLVERMg's, then the spare tile, then (part
// 0) the staging of B and X.
template <typename T>
struct Carved {
  std::vector<Shard<T>> shards;
  T* stage = nullptr;
};

template <typename T>
Carved<T> Carve(const Call& call, const engines::Parts<T>& parts, int64_t lwork) {
  Carved<T> c;
  for (const auto& p : parts) {
    T* work = static_cast<T*>(p.work());
    c.shards.push_back(Shard<T>{p.a(), work, work + Rounded(lwork)});
  }
  c.stage = c.shards[0].spare + call.n * call.tile;
  return c;
}

template <typename T>
Rhs<T> RhsOf(const Call& call, const engines::Parts<T>& parts, T* stage) {
  Rhs<T> rhs;
  rhs.sharded = call.b_sharded;
  rhs.k = call.k;
  for (const auto& p : parts) {
    rhs.b.push_back(p.b());
    rhs.x.push_back(p.x());
  }
  rhs.stage = stage;
  rhs.columns = stage + call.n * call.k;
  return rhs;
}

}  // namespace

template <typename T>
Status MgEngine<T>::Potrs(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  const Carved<T> c = Carve(call, parts, lwork);
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(
      mg::Potrs<T>(ctx_, LayoutOf(call), c.shards, RhsOf(call, parts, c.stage), &info));
  return PublishInfo(Infos(parts), info);
}

template <typename T>
Status MgEngine<T>::Potrf(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(mg::Potrf<T>(ctx_, LayoutOf(call), Carve(call, parts, lwork).shards, &info));
  return PublishInfo(Infos(parts), info);
}

template <typename T>
Status MgEngine<T>::CholSolve(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  const Carved<T> c = Carve(call, parts, lwork);
  return mg::CholSolve<T>(ctx_, LayoutOf(call), c.shards, RhsOf(call, parts, c.stage));
}

template <typename T>
Status MgEngine<T>::Getrf(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(mg::Getrf<T>(ctx_, LayoutOf(call), Carve(call, parts, lwork).shards,
                                     Pivots(parts), &info));
  return PublishInfo(Infos(parts), info);
}

// The engine holds M = A^T: A X = B is M^T X = B, A^T X = B is M X = B, and
// A^H X = B is M conj(X) = conj(B).
template <typename T>
Status MgEngine<T>::LuSolve(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  const Carved<T> c = Carve(call, parts, lwork);
  const cublasOperation_t op = call.trans == Trans::kNone ? CUBLAS_OP_T : CUBLAS_OP_N;
  return mg::Getrs<T>(ctx_, LayoutOf(call), c.shards, Pivots(parts), op,
                      call.trans == Trans::kAdjoint, ipc_tiles_, RhsOf(call, parts, c.stage));
}

template <typename T>
Status MgEngine<T>::Potri(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(mg::Potri<T>(ctx_, LayoutOf(call), Carve(call, parts, lwork).shards, &info));
  return PublishInfo(Infos(parts), info);
}

template <typename T>
Status MgEngine<T>::Syevd(const Call& call, const Parts& parts) {
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(SolverElements(call, parts[0].a(), &lwork));
  std::vector<Real<T>> w(call.n);
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(mg::Syevd<T>(ctx_, LayoutOf(call), Carve(call, parts, lwork).shards,
                                     call.vectors, w.data(), &info));
  for (const auto& p : parts) {
    JAXMG_CUDA(cuda::api().cudaMemcpy(p.w(), w.data(), w.size() * sizeof(Real<T>),
                                      cudaMemcpyHostToDevice));
  }
  return PublishInfo(Infos(parts), info);
}

// A finite sum of absolute values proves every element finite; a sum that
// is not (a NaN or Inf, or finite values beyond the largest float) is
// settled element by element on the host. Each part is summed on its own
// device: peer or IPC memory of another GPU is not readable from device 0.
template <typename T>
Status MgEngine<T>::AllFinite(const Call& call, const Parts& parts, bool* finite) {
  constexpr int64_t kChunk = int64_t{1} << 26;
  const int64_t rows = call.n / call.parts;
  const int64_t elements = call.n * rows;
  const bool upper = engines::ReadsUpperTriangle(call.routine);
  DeviceGuard guard;
  std::vector<T> host;
  *finite = true;
  for (size_t i = 0; i < parts.size() && *finite; ++i) {
    const auto& p = parts[i];
    cublasHandle_t blas = nullptr;
    JAXMG_RETURN_IF_ERROR(ctx_.LaneBlas(static_cast<int>(i), &blas));
    JAXMG_CUDA(cuda::api().cudaSetDevice(ctx_.devices()[i]));
    for (int64_t first = 0; first < elements && *finite; first += kChunk) {
      const int64_t count = std::min(kChunk, elements - first);
      Real<T> sum = 0;
      JAXMG_RETURN_IF_ERROR(cublas::Asum<T>(blas, static_cast<int>(count), p.a() + first, &sum));
      if (std::isfinite(sum)) continue;
      host.resize(count);
      JAXMG_CUDA(cuda::api().cudaMemcpy(host.data(), p.a() + first, count * sizeof(T),
                                        cudaMemcpyDeviceToHost));
      // A sum that is not finite may come from the triangle the routine leaves alone.
      *finite = engines::ReadEntriesFinite(host.data(), first, count,
                                           static_cast<int64_t>(i) * rows, call.n, upper);
    }
  }
  return Status::Ok();
}

template <typename T>
Status MgEngine<T>::ReportNonFinite(const Call& call, const Parts& parts) {
  int32_t info = 0;
  DeviceGuard guard;
  JAXMG_CUDA(cuda::api().cudaMemcpy(&info, parts[0].info(), sizeof(info), cudaMemcpyDeviceToHost));
  return info == 0 ? PublishInfo(Infos(parts), static_cast<int32_t>(call.n + 1)) : Status::Ok();
}

#define JAXMG_INSTANTIATE(prefix, name, T, ...) template class MgEngine<T>;
JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::mg
