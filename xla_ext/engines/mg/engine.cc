#include "xla_ext/engines/mg/engine.h"

#include <algorithm>
#include <complex>
#include <limits>

namespace jaxmg::mg {
namespace {

using layout::ColumnLayout;
using layout::Direction;
using layout::Slot;

template <typename T>
constexpr cudaDataType kType = CUDA_R_32F;
template <>
constexpr cudaDataType kType<double> = CUDA_R_64F;
template <>
constexpr cudaDataType kType<std::complex<float>> = CUDA_C_32F;
template <>
constexpr cudaDataType kType<std::complex<double>> = CUDA_C_64F;

Status CheckInt(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max()) {
    return Errorf("jaxmg: ", what, "=", v, " exceeds cuSOLVERMg's 32-bit index range");
  }
  return Status::Ok();
}

// Moves tiles with cudaMemcpyPeerAsync on one lane's stream, using that
// lane's spare tile. Cycles are dealt round-robin to lanes, so conversions
// run on every GPU's copy engines at once.
template <typename T>
class LaneMover : public layout::TileMover {
 public:
  LaneMover(const Context& ctx, const std::vector<Shard<T>>& a, int64_t tile_elements, int lane)
      : ctx_(ctx), a_(a), tile_(tile_elements), lane_(lane) {}

  Status Save(const Slot& from) override { return Copy(a_[lane_].spare, lane_, At(from), from.device); }
  Status Move(const Slot& from, const Slot& to) override {
    return Copy(At(to), to.device, At(from), from.device);
  }
  Status Restore(const Slot& to) override { return Copy(At(to), to.device, a_[lane_].spare, lane_); }

 private:
  T* At(const Slot& s) const { return a_[s.device].a + s.index * tile_; }
  Status Copy(T* dst, int dst_lane, const T* src, int src_lane) {
    JAXMG_CUDA(cuda::api().cudaMemcpyPeerAsync(dst, ctx_.devices()[dst_lane], src,
                                               ctx_.devices()[src_lane], tile_ * sizeof(T),
                                               ctx_.stream(lane_)));
    return Status::Ok();
  }

  const Context& ctx_;
  const std::vector<Shard<T>>& a_;
  int64_t tile_;
  int lane_;
};

template <typename T, typename Member>
std::vector<void*> Pointers(const std::vector<Shard<T>>& shards, Member member) {
  std::vector<void*> out;
  for (const auto& s : shards) out.push_back(static_cast<void*>(s.*member));
  return out;
}

template <typename T>
Status FillNaN(Context& ctx, int lane, T* data, int64_t elements) {
  // All-ones bits are a NaN in every floating-point format.
  JAXMG_CUDA(cuda::api().cudaSetDevice(ctx.devices()[lane]));
  JAXMG_CUDA(cuda::api().cudaMemsetAsync(data, 0xFF, elements * sizeof(T), ctx.stream(lane)));
  return Status::Ok();
}

// Marks a failed result: every participant's block becomes NaN.
template <typename T>
Status FillBlocksNaN(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a) {
  for (int d = 0; d < layout.n_devices; ++d) {
    JAXMG_RETURN_IF_ERROR(
        FillNaN(ctx, d, a[d].a, layout.n_cols * (layout.n_cols / layout.n_devices)));
  }
  return Status::Ok();
}

// out (cols x rows, column-major) = conj(in)^T for in (rows x cols, column-major).
template <typename T>
Status ConjTranspose(Context& ctx, const T* in, int64_t rows, int64_t cols, T* out) {
  const cuda::Api& api = cuda::api();
  const cublasOperation_t op = kIsComplex<T> ? CUBLAS_OP_C : CUBLAS_OP_T;
  const int m = static_cast<int>(cols), n = static_cast<int>(rows);
  const int lda = static_cast<int>(rows), ldc = static_cast<int>(cols);
  JAXMG_CUDA(api.cudaSetDevice(ctx.devices()[0]));
  if constexpr (std::is_same_v<T, float>) {
    const float one = 1, zero = 0;
    JAXMG_CUBLAS(api.cublasSgeam(ctx.blas(), op, CUBLAS_OP_N, m, n, &one, in, lda, &zero, out,
                                 ldc, out, ldc));
  } else if constexpr (std::is_same_v<T, double>) {
    const double one = 1, zero = 0;
    JAXMG_CUBLAS(api.cublasDgeam(ctx.blas(), op, CUBLAS_OP_N, m, n, &one, in, lda, &zero, out,
                                 ldc, out, ldc));
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    const cuComplex one{1, 0}, zero{0, 0};
    auto* o = reinterpret_cast<cuComplex*>(out);
    JAXMG_CUBLAS(api.cublasCgeam(ctx.blas(), op, CUBLAS_OP_N, m, n, &one,
                                 reinterpret_cast<const cuComplex*>(in), lda, &zero, o, ldc, o,
                                 ldc));
  } else {
    const cuDoubleComplex one{1, 0}, zero{0, 0};
    auto* o = reinterpret_cast<cuDoubleComplex*>(out);
    JAXMG_CUBLAS(api.cublasZgeam(ctx.blas(), op, CUBLAS_OP_N, m, n, &one,
                                 reinterpret_cast<const cuDoubleComplex*>(in), lda, &zero, o,
                                 ldc, o, ldc));
  }
  return Status::Ok();
}

template <typename T>
Status PeerCopy(Context& ctx, int lane, T* dst, int dst_lane, const T* src, int src_lane,
                int64_t elements) {
  JAXMG_CUDA(cuda::api().cudaMemcpyPeerAsync(dst, ctx.devices()[dst_lane], src,
                                             ctx.devices()[src_lane], elements * sizeof(T),
                                             ctx.stream(lane)));
  return Status::Ok();
}

// Cholesky factorisation. A matrix that is not positive definite comes back
// as h_info > 0, which cuSOLVERMg (12.0) also flags as INTERNAL_ERROR: that
// pair is a numerical outcome, not a failure of the call.
template <typename T>
Status Factor(Context& ctx, int n, std::vector<void*>& a, cudaLibMgMatrixDesc_t desc,
              std::vector<void*>& work, int64_t lwork, int* h_info) {
  *h_info = 0;
  cusolverStatus_t code =
      cuda::api().cusolverMgPotrf(ctx.handle(), CUBLAS_FILL_MODE_LOWER, n, a.data(), 1, 1, desc,
                                  kType<T>, work.data(), lwork, h_info);
  if (code == CUSOLVER_STATUS_INTERNAL_ERROR && *h_info > 0) code = CUSOLVER_STATUS_SUCCESS;
  if (code != CUSOLVER_STATUS_SUCCESS) {
    Status s = cuda::CusolverError(code, "cusolverMgPotrf", __FILE__, __LINE__);
    return Errorf(s.message(), " (h_info=", *h_info, ")");
  }
  return Status::Ok();
}

}  // namespace

template <typename T>
Status Convert(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a,
               Direction direction) {
  const std::vector<layout::Cycle> cycles = layout::PlanCycles(layout, direction);
  if (cycles.empty()) return Status::Ok();
  std::vector<LaneMover<T>> movers;
  for (int lane = 0; lane < layout.n_devices; ++lane) {
    movers.emplace_back(ctx, a, layout.n_cols * layout.tile, lane);
  }
  for (size_t c = 0; c < cycles.size(); ++c) {
    JAXMG_RETURN_IF_ERROR(layout::ExecuteCycle(cycles[c], movers[c % movers.size()]));
  }
  return ctx.SynchronizeLanes();
}

template <typename T>
Status WorkspaceElements(Context& ctx, Routine routine, const ColumnLayout& layout, int64_t nrhs,
                         void* any_buffer, int64_t* elements) {
  const cuda::Api& api = cuda::api();
  JAXMG_RETURN_IF_ERROR(CheckInt(layout.n_cols, "N"));
  const int n = static_cast<int>(layout.n_cols);
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  // The size queries read only the descriptors; any valid pointers do.
  std::vector<void*> dummy(layout.n_devices, any_buffer);
  int64_t lwork = 0, more = 0;
  switch (routine) {
    case Routine::kPotrs:
    case Routine::kPotri:
      JAXMG_CUSOLVER(api.cusolverMgPotrf_bufferSize(ctx.handle(), CUBLAS_FILL_MODE_LOWER, n,
                                                    dummy.data(), 1, 1, desc, kType<T>, &lwork));
      if (routine == Routine::kPotri) {
        JAXMG_CUSOLVER(api.cusolverMgPotri_bufferSize(ctx.handle(), CUBLAS_FILL_MODE_LOWER, n,
                                                      dummy.data(), 1, 1, desc, kType<T>, &more));
      } else if (nrhs > 0) {
        cudaLibMgMatrixDesc_t desc_b;
        JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, nrhs, layout.tile, kType<T>, &desc_b));
        JAXMG_CUSOLVER(api.cusolverMgPotrs_bufferSize(
            ctx.handle(), CUBLAS_FILL_MODE_LOWER, n, static_cast<int>(nrhs), dummy.data(), 1, 1,
            desc, dummy.data(), 1, 1, desc_b, kType<T>, &more));
      }
      break;
    case Routine::kSyevd:
    case Routine::kSyevdValues: {
      std::vector<Real<T>> w(n);
      const auto jobz = routine == Routine::kSyevd ? CUSOLVER_EIG_MODE_VECTOR
                                                   : CUSOLVER_EIG_MODE_NOVECTOR;
      JAXMG_CUSOLVER(api.cusolverMgSyevd_bufferSize(ctx.handle(), jobz, CUBLAS_FILL_MODE_LOWER, n,
                                                    dummy.data(), 1, 1, desc, w.data(),
                                                    kType<Real<T>>, kType<T>, &lwork));
      break;
    }
  }
  *elements = std::max<int64_t>({lwork, more, 1});
  return Status::Ok();
}

template <typename T>
Status Potrs(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a,
             const Rhs<T>& rhs, int32_t* info) {
  const cuda::Api& api = cuda::api();
  const int n = static_cast<int>(layout.n_cols);
  const int64_t k = rhs.k;
  const int64_t rows = rhs.sharded ? layout.n_cols / layout.n_devices : layout.n_cols;
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToBlockCyclic));

  // B's blocks -> one row-major N x k on participant 0 -> column-major conj(B).
  const T* b_rows = rhs.b[0];
  if (rhs.sharded) {
    for (int d = 0; d < layout.n_devices; ++d) {
      JAXMG_RETURN_IF_ERROR(
          PeerCopy(ctx, 0, rhs.stage + d * rows * k, 0, rhs.b[d], d, rows * k));
    }
    b_rows = rhs.stage;
  }
  if (k > 0) JAXMG_RETURN_IF_ERROR(ConjTranspose(ctx, b_rows, k, n, rhs.columns));
  JAXMG_RETURN_IF_ERROR(ctx.SynchronizeLanes());

  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(a, &Shard<T>::a);
  std::vector<void*> work = Pointers(a, &Shard<T>::work);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(
      WorkspaceElements<T>(ctx, Routine::kPotrs, layout, std::min(k, layout.tile), a[0].a, &lwork));
  int h_info = 0;
  JAXMG_RETURN_IF_ERROR(Factor<T>(ctx, n, a_ptrs, desc, work, lwork, &h_info));
  // Right-hand sides go in chunks of at most one tile, so each chunk lives
  // wholly on the first device of the grid.
  for (int64_t c0 = 0; h_info == 0 && c0 < k; c0 += layout.tile) {
    const int64_t kc = std::min(layout.tile, k - c0);
    cudaLibMgMatrixDesc_t desc_b;
    JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, kc, layout.tile, kType<T>, &desc_b));
    std::vector<void*> b_ptrs = Pointers(a, &Shard<T>::spare);
    b_ptrs[0] = rhs.columns + c0 * n;
    JAXMG_CUSOLVER(api.cusolverMgPotrs(ctx.handle(), CUBLAS_FILL_MODE_LOWER, n,
                                       static_cast<int>(kc), a_ptrs.data(), 1, 1, desc,
                                       b_ptrs.data(), 1, 1, desc_b, kType<T>, work.data(), lwork,
                                       &h_info));
  }
  *info = h_info;
  JAXMG_RETURN_IF_ERROR(ctx.SynchronizeDevices());

  if (h_info == 0 && k > 0) {
    JAXMG_RETURN_IF_ERROR(ConjTranspose(ctx, rhs.columns, n, k, rhs.stage));
    JAXMG_RETURN_IF_ERROR(ctx.SynchronizeLanes());
  }
  for (int d = 0; d < layout.n_devices; ++d) {
    if (h_info != 0) {
      JAXMG_RETURN_IF_ERROR(FillNaN(ctx, d, rhs.x[d], rows * k));
    } else {
      const T* src = rhs.stage + (rhs.sharded ? d * rows * k : 0);
      JAXMG_RETURN_IF_ERROR(PeerCopy(ctx, d, rhs.x[d], d, src, 0, rows * k));
    }
  }
  return ctx.SynchronizeLanes();
}

template <typename T>
Status Potri(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a,
             int32_t* info) {
  const cuda::Api& api = cuda::api();
  const int n = static_cast<int>(layout.n_cols);
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToBlockCyclic));
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(a, &Shard<T>::a);
  std::vector<void*> work = Pointers(a, &Shard<T>::work);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, Routine::kPotri, layout, 0, a[0].a, &lwork));
  int h_info = 0;
  JAXMG_RETURN_IF_ERROR(Factor<T>(ctx, n, a_ptrs, desc, work, lwork, &h_info));
  if (h_info == 0) {
    JAXMG_CUSOLVER(api.cusolverMgPotri(ctx.handle(), CUBLAS_FILL_MODE_LOWER, n, a_ptrs.data(), 1,
                                       1, desc, kType<T>, work.data(), lwork, &h_info));
  }
  *info = h_info;
  JAXMG_RETURN_IF_ERROR(ctx.SynchronizeDevices());
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToContiguous));
  if (h_info != 0) JAXMG_RETURN_IF_ERROR(FillBlocksNaN(ctx, layout, a));
  return ctx.SynchronizeLanes();
}

template <typename T>
Status Syevd(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a,
             bool vectors, Real<T>* w, int32_t* info) {
  const cuda::Api& api = cuda::api();
  const int n = static_cast<int>(layout.n_cols);
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToBlockCyclic));
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(a, &Shard<T>::a);
  std::vector<void*> work = Pointers(a, &Shard<T>::work);
  const Routine routine = vectors ? Routine::kSyevd : Routine::kSyevdValues;
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, routine, layout, 0, a[0].a, &lwork));
  int h_info = 0;
  JAXMG_CUSOLVER(api.cusolverMgSyevd(
      ctx.handle(), vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR,
      CUBLAS_FILL_MODE_LOWER, n, a_ptrs.data(), 1, 1, desc, w, kType<Real<T>>, kType<T>,
      work.data(), lwork, &h_info));
  *info = h_info;
  JAXMG_RETURN_IF_ERROR(ctx.SynchronizeDevices());
  if (vectors) {
    JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToContiguous));
    if (h_info != 0) JAXMG_RETURN_IF_ERROR(FillBlocksNaN(ctx, layout, a));
  }
  if (h_info != 0) std::fill(w, w + n, std::numeric_limits<Real<T>>::quiet_NaN());
  return ctx.SynchronizeLanes();
}

#define JAXMG_INSTANTIATE(T)                                                                 \
  template Status Convert<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,    \
                             Direction);                                                     \
  template Status WorkspaceElements<T>(Context&, Routine, const ColumnLayout&, int64_t, void*,\
                                       int64_t*);                                            \
  template Status Potrs<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           const Rhs<T>&, int32_t*);                                         \
  template Status Potri<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           int32_t*);                                                        \
  template Status Syevd<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&, bool, \
                           Real<T>*, int32_t*);
JAXMG_INSTANTIATE(float)
JAXMG_INSTANTIATE(double)
JAXMG_INSTANTIATE(std::complex<float>)
JAXMG_INSTANTIATE(std::complex<double>)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::mg
