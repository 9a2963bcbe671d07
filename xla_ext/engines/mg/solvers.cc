#include "xla_ext/engines/mg/solvers.h"

#include "xla_ext/common/dtypes.h"
#include "xla_ext/vendor/cublas.h"
#include "xla_ext/vendor/cuda_types.h"

#include <algorithm>
#include <complex>
#include <limits>

namespace jaxmg::mg {
namespace {

using layout::ColumnLayout;
using layout::Direction;
using layout::Slot;

using cuda::kType;

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

// out (cols x rows, column-major) = in^T, or conj(in)^T when `conj`, for in
// (rows x cols, column-major).
template <typename T>
Status Transpose(Context& ctx, const T* in, int64_t rows, int64_t cols, bool conj, T* out) {
  const cublasOperation_t op = kIsComplex<T> && conj ? CUBLAS_OP_C : CUBLAS_OP_T;
  const int m = static_cast<int>(cols), n = static_cast<int>(rows);
  const int lda = static_cast<int>(rows), ldc = static_cast<int>(cols);
  JAXMG_CUDA(cuda::api().cudaSetDevice(ctx.devices()[0]));
  return cublas::Geam<T>(ctx.blas(), op, CUBLAS_OP_N, m, n, T(1), in, lda, T(0), out, ldc, out,
                         ldc);
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

// The factor's pivots in global order on the host (participant d holds
// those of its tiles' columns, in local order).
Status HostPivots(Context& ctx, const ColumnLayout& layout, const std::vector<int32_t*>& piv,
                  std::vector<int32_t>* out) {
  const int64_t local = layout.n_cols / layout.n_devices;
  std::vector<std::vector<int32_t>> per_device(layout.n_devices, std::vector<int32_t>(local));
  for (int d = 0; d < layout.n_devices; ++d) {
    JAXMG_CUDA(cuda::api().cudaSetDevice(ctx.devices()[d]));
    JAXMG_CUDA(cuda::api().cudaMemcpy(per_device[d].data(), piv[d], local * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost));
  }
  out->resize(layout.n_cols);
  for (int64_t t = 0; t < layout.tiles(); ++t) {
    const Slot s = layout.BlockCyclic(t);
    std::copy_n(per_device[s.device].data() + s.index * layout.tile, layout.tile,
                out->data() + t * layout.tile);
  }
  return Status::Ok();
}

// Solves M^T X = B with M = P L U factored in place by cusolverMgGetrf, whose
// Getrs takes CUBLAS_OP_N only: U^T Y = B by forward substitution over the
// column tiles, L^T Z = Y backwards, then X = P Z. x (n x kc, column-major,
// on the grid's first device) holds B and receives X; each step is one GEMM
// and one TRSM on that device, reading each tile where it lives (peer
// access). With `ipc_tiles`, a tile on another GPU is first copied into the
// first participant's spare tile: kernels cannot read memory that another
// process shared through CUDA IPC on a GPU other than their own.
template <typename T>
Status TransposedLuSolve(Context& ctx, const ColumnLayout& layout,
                         const std::vector<Shard<T>>& factor, const std::vector<int32_t>& ipiv,
                         bool ipc_tiles, T* x, int64_t kc) {
  const int n = static_cast<int>(layout.n_cols);
  const int t = static_cast<int>(layout.tile);
  const int k = static_cast<int>(kc);
  const int64_t tiles = layout.tiles();
  const T* tile = nullptr;
  auto fetch = [&](int64_t j) -> Status {
    const Slot s = layout.BlockCyclic(j);
    tile = factor[s.device].a + s.index * layout.n_cols * layout.tile;
    if (!ipc_tiles || ctx.devices()[s.device] == ctx.devices()[0]) return Status::Ok();
    JAXMG_RETURN_IF_ERROR(PeerCopy(ctx, 0, factor[0].spare, 0, tile, s.device, int64_t{n} * t));
    tile = factor[0].spare;
    return Status::Ok();
  };
  JAXMG_CUDA(cuda::api().cudaSetDevice(ctx.devices()[0]));
  cublasHandle_t h = ctx.blas();
  for (int64_t j = 0; j < tiles; ++j) {
    const int row = static_cast<int>(j * t);
    T* xj = x + row;
    JAXMG_RETURN_IF_ERROR(fetch(j));
    if (j > 0) JAXMG_RETURN_IF_ERROR(cublas::Gemm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, t, k, row, T(-1), tile, n, x, n, T(1), xj, n));
    JAXMG_RETURN_IF_ERROR(cublas::Trsm<T>(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T,
                                        CUBLAS_DIAG_NON_UNIT, t, k, tile + row, n, xj, n));
  }
  for (int64_t j = tiles - 1; j >= 0; --j) {
    const int row = static_cast<int>(j * t);
    const int below = row + t;
    T* xj = x + row;
    JAXMG_RETURN_IF_ERROR(fetch(j));
    if (below < n) {
      JAXMG_RETURN_IF_ERROR(cublas::Gemm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, t, k, n - below, T(-1),
                                                  tile + below, n, x + below, n, T(1), xj, n));
    }
    JAXMG_RETURN_IF_ERROR(cublas::Trsm<T>(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_UNIT,
                                        t, k, tile + row, n, xj, n));
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    const int64_t p = ipiv[i] - 1;
    if (p != i) JAXMG_RETURN_IF_ERROR(cublas::Swap<T>(h, k, x + i, n, x + p, n));
  }
  return Status::Ok();
}

// LU factorisation; an exact zero pivot is a numerical outcome (h_info > 0).
template <typename T>
Status LuFactor(Context& ctx, int n, std::vector<void*>& a, cudaLibMgMatrixDesc_t desc,
                std::vector<int*>& piv, std::vector<void*>& work, int64_t lwork, int* h_info) {
  *h_info = 0;
  cusolverStatus_t code = cuda::api().cusolverMgGetrf(ctx.handle(), n, n, a.data(), 1, 1, desc,
                                                      piv.data(), kType<T>, work.data(), lwork,
                                                      h_info);
  if (code == CUSOLVER_STATUS_INTERNAL_ERROR && *h_info > 0) code = CUSOLVER_STATUS_SUCCESS;
  if (code != CUSOLVER_STATUS_SUCCESS) {
    Status s = cuda::CusolverError(code, "cusolverMgGetrf", __FILE__, __LINE__);
    return Errorf(s.message(), " (h_info=", *h_info, ")");
  }
  return Status::Ok();
}

std::vector<int*> PivotPointers(const std::vector<int32_t*>& piv) {
  return std::vector<int*>(piv.begin(), piv.end());
}

// Right-hand sides around a solve: B's row-major blocks are gathered on
// participant 0 and transposed (conjugated when `conj`) to column-major; each
// chunk of at most one tile of columns, which then lives wholly on the grid's
// first device, goes to `solve_chunk(columns, kc)`; X returns to B's layout,
// NaN when `failed()` says so after the solves.
template <typename T, typename SolveChunk>
Status SolveStaged(Context& ctx, const ColumnLayout& layout, const Rhs<T>& rhs, bool conj,
                   SolveChunk&& solve_chunk, bool failed) {
  const int64_t n = layout.n_cols;
  const int64_t k = rhs.k;
  const int64_t rows = rhs.sharded ? n / layout.n_devices : n;
  const T* b_rows = rhs.b[0];
  if (rhs.sharded) {
    for (int d = 0; d < layout.n_devices; ++d) {
      JAXMG_RETURN_IF_ERROR(
          PeerCopy(ctx, 0, rhs.stage + d * rows * k, 0, rhs.b[d], d, rows * k));
    }
    b_rows = rhs.stage;
  }
  if (k > 0) JAXMG_RETURN_IF_ERROR(Transpose(ctx, b_rows, k, n, conj, rhs.columns));
  JAXMG_RETURN_IF_ERROR(ctx.SynchronizeLanes());
  for (int64_t c0 = 0; !failed && c0 < k; c0 += layout.tile) {
    JAXMG_RETURN_IF_ERROR(solve_chunk(rhs.columns + c0 * n, std::min(layout.tile, k - c0)));
  }
  JAXMG_RETURN_IF_ERROR(ctx.SynchronizeDevices());
  if (!failed && k > 0) {
    JAXMG_RETURN_IF_ERROR(Transpose(ctx, rhs.columns, n, k, conj, rhs.stage));
    JAXMG_RETURN_IF_ERROR(ctx.SynchronizeLanes());
  }
  for (int d = 0; d < layout.n_devices; ++d) {
    if (failed) {
      JAXMG_RETURN_IF_ERROR(FillNaN(ctx, d, rhs.x[d], rows * k));
    } else {
      const T* src = rhs.stage + (rhs.sharded ? d * rows * k : 0);
      JAXMG_RETURN_IF_ERROR(PeerCopy(ctx, d, rhs.x[d], d, src, 0, rows * k));
    }
  }
  return ctx.SynchronizeLanes();
}

// cuSOLVERMg wants a pointer per device for B; only the first is read when
// B's columns fit one tile, the others point at valid scratch.
template <typename T>
std::vector<void*> ChunkPointers(const std::vector<Shard<T>>& a, T* columns) {
  std::vector<void*> ptrs = Pointers(a, &Shard<T>::spare);
  ptrs[0] = columns;
  return ptrs;
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
    case Routine::kPotrf:
      JAXMG_CUSOLVER(api.cusolverMgPotrf_bufferSize(ctx.handle(), CUBLAS_FILL_MODE_LOWER, n,
                                                    dummy.data(), 1, 1, desc, kType<T>, &lwork));
      break;
    case Routine::kCholSolve:
      if (nrhs > 0) {
        cudaLibMgMatrixDesc_t desc_b;
        JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, nrhs, layout.tile, kType<T>, &desc_b));
        JAXMG_CUSOLVER(api.cusolverMgPotrs_bufferSize(
            ctx.handle(), CUBLAS_FILL_MODE_LOWER, n, static_cast<int>(nrhs), dummy.data(), 1, 1,
            desc, dummy.data(), 1, 1, desc_b, kType<T>, &lwork));
      }
      break;
    case Routine::kGetrf: {
      std::vector<int*> piv(layout.n_devices, static_cast<int*>(any_buffer));
      JAXMG_CUSOLVER(api.cusolverMgGetrf_bufferSize(ctx.handle(), n, n, dummy.data(), 1, 1, desc,
                                                    piv.data(), kType<T>, &lwork));
      break;
    }
    case Routine::kGetrs:
      if (nrhs > 0) {
        std::vector<int*> piv(layout.n_devices, static_cast<int*>(any_buffer));
        cudaLibMgMatrixDesc_t desc_b;
        JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, nrhs, layout.tile, kType<T>, &desc_b));
        JAXMG_CUSOLVER(api.cusolverMgGetrs_bufferSize(
            ctx.handle(), CUBLAS_OP_N, n, static_cast<int>(nrhs), dummy.data(), 1, 1, desc,
            piv.data(), dummy.data(), 1, 1, desc_b, kType<T>, &lwork));
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
  const int n = static_cast<int>(layout.n_cols);
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToBlockCyclic));
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(a, &Shard<T>::a);
  std::vector<void*> work = Pointers(a, &Shard<T>::work);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, Routine::kPotrs, layout,
                                             std::min(rhs.k, layout.tile), a[0].a, &lwork));
  int h_info = 0;
  JAXMG_RETURN_IF_ERROR(Factor<T>(ctx, n, a_ptrs, desc, work, lwork, &h_info));
  *info = h_info;
  const bool failed = h_info != 0;
  return SolveStaged(
      ctx, layout, rhs, /*conj=*/true,
      [&](T* columns, int64_t kc) -> Status {
        cudaLibMgMatrixDesc_t desc_b;
        JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, kc, layout.tile, kType<T>, &desc_b));
        std::vector<void*> b_ptrs = ChunkPointers(a, columns);
        int chunk_info = 0;
        JAXMG_CUSOLVER(cuda::api().cusolverMgPotrs(
            ctx.handle(), CUBLAS_FILL_MODE_LOWER, n, static_cast<int>(kc), a_ptrs.data(), 1, 1,
            desc, b_ptrs.data(), 1, 1, desc_b, kType<T>, work.data(), lwork, &chunk_info));
        if (chunk_info < 0) return Errorf("jaxmg: cusolverMgPotrs rejected argument ", -chunk_info);
        return Status::Ok();
      },
      failed);
}

template <typename T>
Status Potrf(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a,
             int32_t* info) {
  const int n = static_cast<int>(layout.n_cols);
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToBlockCyclic));
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(a, &Shard<T>::a);
  std::vector<void*> work = Pointers(a, &Shard<T>::work);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, Routine::kPotrf, layout, 0, a[0].a, &lwork));
  int h_info = 0;
  JAXMG_RETURN_IF_ERROR(Factor<T>(ctx, n, a_ptrs, desc, work, lwork, &h_info));
  *info = h_info;
  return ctx.SynchronizeDevices();
}

template <typename T>
Status CholSolve(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& factor,
                 const Rhs<T>& rhs) {
  const int n = static_cast<int>(layout.n_cols);
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(factor, &Shard<T>::a);
  std::vector<void*> work = Pointers(factor, &Shard<T>::work);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, Routine::kCholSolve, layout,
                                             std::min(rhs.k, layout.tile), factor[0].a, &lwork));
  const bool failed = false;
  return SolveStaged(
      ctx, layout, rhs, /*conj=*/true,
      [&](T* columns, int64_t kc) -> Status {
        cudaLibMgMatrixDesc_t desc_b;
        JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, kc, layout.tile, kType<T>, &desc_b));
        std::vector<void*> b_ptrs = ChunkPointers(factor, columns);
        int h_info = 0;
        JAXMG_CUSOLVER(cuda::api().cusolverMgPotrs(
            ctx.handle(), CUBLAS_FILL_MODE_LOWER, n, static_cast<int>(kc), a_ptrs.data(), 1, 1,
            desc, b_ptrs.data(), 1, 1, desc_b, kType<T>, work.data(), lwork, &h_info));
        if (h_info < 0) return Errorf("jaxmg: cusolverMgPotrs rejected argument ", -h_info);
        return Status::Ok();
      },
      failed);
}

template <typename T>
Status Getrf(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& a,
             const std::vector<int32_t*>& piv, int32_t* info) {
  const int n = static_cast<int>(layout.n_cols);
  JAXMG_RETURN_IF_ERROR(Convert(ctx, layout, a, Direction::kToBlockCyclic));
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(a, &Shard<T>::a);
  std::vector<void*> work = Pointers(a, &Shard<T>::work);
  std::vector<int*> piv_ptrs = PivotPointers(piv);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, Routine::kGetrf, layout, 0, a[0].a, &lwork));
  int h_info = 0;
  JAXMG_RETURN_IF_ERROR(LuFactor<T>(ctx, n, a_ptrs, desc, piv_ptrs, work, lwork, &h_info));
  *info = h_info;
  return ctx.SynchronizeDevices();
}

template <typename T>
Status Getrs(Context& ctx, const ColumnLayout& layout, const std::vector<Shard<T>>& factor,
             const std::vector<int32_t*>& piv, cublasOperation_t op, bool conj, bool ipc_tiles,
             const Rhs<T>& rhs) {
  const int n = static_cast<int>(layout.n_cols);
  cudaLibMgMatrixDesc_t desc;
  JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, n, layout.tile, kType<T>, &desc));
  std::vector<void*> a_ptrs = Pointers(factor, &Shard<T>::a);
  std::vector<void*> work = Pointers(factor, &Shard<T>::work);
  std::vector<int*> piv_ptrs = PivotPointers(piv);
  int64_t lwork = 0;
  JAXMG_RETURN_IF_ERROR(WorkspaceElements<T>(ctx, Routine::kGetrs, layout,
                                             std::min(rhs.k, layout.tile), factor[0].a, &lwork));
  const bool failed = false;
  std::vector<int32_t> host_pivots;
  if (op != CUBLAS_OP_N) JAXMG_RETURN_IF_ERROR(HostPivots(ctx, layout, piv, &host_pivots));
  return SolveStaged(
      ctx, layout, rhs, conj,
      [&](T* columns, int64_t kc) -> Status {
        if (op != CUBLAS_OP_N) {
          return TransposedLuSolve(ctx, layout, factor, host_pivots, ipc_tiles, columns, kc);
        }
        cudaLibMgMatrixDesc_t desc_b;
        JAXMG_RETURN_IF_ERROR(ctx.Descriptor(n, kc, layout.tile, kType<T>, &desc_b));
        std::vector<void*> b_ptrs = ChunkPointers(factor, columns);
        int h_info = 0;
        JAXMG_CUSOLVER(cuda::api().cusolverMgGetrs(
            ctx.handle(), op, n, static_cast<int>(kc), a_ptrs.data(), 1, 1, desc,
            piv_ptrs.data(), b_ptrs.data(), 1, 1, desc_b, kType<T>, work.data(), lwork,
            &h_info));
        if (h_info < 0) return Errorf("jaxmg: cusolverMgGetrs rejected argument ", -h_info);
        return Status::Ok();
      },
      failed);
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

#define JAXMG_INSTANTIATE(prefix, name, T, ...)                                                                 \
  template Status Convert<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,    \
                             Direction);                                                     \
  template Status WorkspaceElements<T>(Context&, Routine, const ColumnLayout&, int64_t, void*,\
                                       int64_t*);                                            \
  template Status Potrs<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           const Rhs<T>&, int32_t*);                                         \
  template Status Potri<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           int32_t*);                                                        \
  template Status Potrf<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           int32_t*);                                                        \
  template Status CholSolve<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,  \
                               const Rhs<T>&);                                               \
  template Status Getrf<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           const std::vector<int32_t*>&, int32_t*);                          \
  template Status Getrs<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&,      \
                           const std::vector<int32_t*>&, cublasOperation_t, bool, bool,      \
                           const Rhs<T>&);                                                   \
  template Status Syevd<T>(Context&, const ColumnLayout&, const std::vector<Shard<T>>&, bool, \
                           Real<T>*, int32_t*);
JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::mg
