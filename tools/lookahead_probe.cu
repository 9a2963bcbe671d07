// The blocked LU behind tools/lookahead_probe.py (a measurement, not part of
// the library): P A = L U of a float32 column-major matrix in place, panels by
// cuSOLVER's getrf or by this file's tall-panel LU, the panel's row
// interchanges by laswp, U12 by cuBLAS's triangular solve, trailing updates by
// cuBLAS GEMMs at a chosen precision; with look-ahead, the updates run on a
// second, low-priority stream and the next panel is factored as soon as its
// own columns are updated.
//
// The tall-panel LU: partial pivoting, recursive (left half, interchanges,
// triangular solve, float32 GEMM, right half) down to leaves of 32 columns,
// each leaf one cooperative kernel that keeps every row in one thread's
// registers and meets the other blocks once per column (grid sync) to agree
// on the pivot; cuSOLVER's getrf instead spends several kernels per column.
#include <cooperative_groups.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(x)                                                               \
  do {                                                                         \
    const int code_ = static_cast<int>(x);                                     \
    if (code_ != 0) {                                                          \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #x, code_); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

namespace {

// kNone skips the trailing updates (a wrong factorisation, timed to show what
// the panels, interchanges and triangular solves alone cost).
enum Update { kFp32 = 0, kTf32 = 1, kTf32x3 = 2, kNone = 3 };

struct Split {  // x = hi + lo, hi = x rounded to TF32 (x times I in TF32 GEMM)
  float* hi = nullptr;
  float* lo = nullptr;
};

int SplitTf32(cublasHandle_t h, const float* x, int rows, int cols, int ld, const float* eye,
              int eye_ld, Split s, bool left_identity) {
  const float one = 1.f, zero = 0.f, minus = -1.f;
  if (left_identity) {
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, rows, &one, eye, CUDA_R_32F, eye_ld,
                       x, CUDA_R_32F, ld, &zero, s.hi, CUDA_R_32F, rows,
                       CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
  } else {
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, cols, &one, x, CUDA_R_32F, ld, eye,
                       CUDA_R_32F, eye_ld, &zero, s.hi, CUDA_R_32F, rows,
                       CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
  }
  CHECK(cublasSgeam(h, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, &one, x, ld, &minus, s.hi, rows, s.lo,
                    rows));
  return 0;
}

// C -= A B (m x n, inner k).
int Subtract(cublasHandle_t h, Update update, int m, int n, int k, const float* a, int lda,
             const float* b, int ldb, float* c, int ldc) {
  if (update == kNone) return 0;
  const float one = 1.f, minus = -1.f;
  const cublasComputeType_t type =
      update == kFp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &minus, a, CUDA_R_32F, lda, b,
                     CUDA_R_32F, ldb, &one, c, CUDA_R_32F, ldc, type, CUBLAS_GEMM_DEFAULT));
  return 0;
}

constexpr int kLeaf = 32;     // columns of a leaf
constexpr int kThreads = 256; // rows of a block, one a thread

// One column's best pivot candidate: larger |value| first, then the lower row.
__device__ inline void Better(float& v, int& r, int& b, float ov, int orow, int ob) {
  if (ov > v || (ov == v && orow < r)) {
    v = ov;
    r = orow;
    b = ob;
  }
}

__device__ inline void WarpBest(float& v, int& r, int& b) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(~0u, v, off);
    const int orow = __shfl_xor_sync(~0u, r, off);
    const int ob = __shfl_xor_sync(~0u, b, off);
    Better(v, r, b, ov, orow, ob);
  }
}

// GEPP of an m x kLeaf column-major panel (m <= gridDim.x * kThreads) in
// place. ipiv: 1-based interchanges; info: the first zero pivot (1-based).
// scratch: 2 x (grid x (2 + kLeaf)) floats and 2 x kLeaf, double-buffered by
// column parity so that a block can publish column k + 1's candidate while
// a slower one still reads column k's.
__global__ void __launch_bounds__(kThreads) LeafLu(float* a, int lda, int m, int* ipiv, int* info,
                                                   float* cand_val, int* cand_row,
                                                   float* cand_data, float* diag_data) {
  cg::grid_group grid = cg::this_grid();
  __shared__ float s_val[kThreads / 32];
  __shared__ int s_row[kThreads / 32];
  __shared__ float prow[kLeaf], drow[kLeaf];
  __shared__ int s_pivot, s_winner;
  const int blocks = gridDim.x;
  const int row = blockIdx.x * kThreads + threadIdx.x;
  const bool mine = row < m;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float x[kLeaf];
#pragma unroll
  for (int c = 0; c < kLeaf; ++c) x[c] = mine ? a[static_cast<size_t>(c) * lda + row] : 0.f;
#pragma unroll
  for (int k = 0; k < kLeaf; ++k) {
    const int par = k & 1;
    const bool active = mine && row >= k;
    float v = active ? fabsf(x[k]) : -1.f;
    int r = active ? row : INT_MAX, b = blockIdx.x;
    WarpBest(v, r, b);
    if (lane == 0) {
      s_val[warp] = v;
      s_row[warp] = r;
    }
    __syncthreads();
    if (warp == 0) {
      v = lane < kThreads / 32 ? s_val[lane] : -1.f;
      r = lane < kThreads / 32 ? s_row[lane] : INT_MAX;
      WarpBest(v, r, b);
      if (lane == 0) {
        cand_val[par * blocks + blockIdx.x] = v;
        cand_row[par * blocks + blockIdx.x] = r;
        s_pivot = r;
      }
    }
    __syncthreads();
    if (mine && row == s_pivot) {
#pragma unroll
      for (int c = 0; c < kLeaf; ++c)
        cand_data[(static_cast<size_t>(par) * blocks + blockIdx.x) * kLeaf + c] = x[c];
    }
    if (mine && row == k) {
#pragma unroll
      for (int c = 0; c < kLeaf; ++c) diag_data[par * kLeaf + c] = x[c];
    }
    grid.sync();
    if (warp == 0) {
      v = -1.f;
      r = INT_MAX;
      b = 0;
      for (int g = lane; g < blocks; g += 32)
        Better(v, r, b, __ldcg(cand_val + par * blocks + g), __ldcg(cand_row + par * blocks + g), g);
      WarpBest(v, r, b);
      if (lane == 0) {
        s_pivot = r;
        s_winner = b;
      }
    }
    __syncthreads();
    if (threadIdx.x < kLeaf) {
      prow[threadIdx.x] =
          __ldcg(cand_data + (static_cast<size_t>(par) * blocks + s_winner) * kLeaf + threadIdx.x);
      drow[threadIdx.x] = __ldcg(diag_data + par * kLeaf + threadIdx.x);
    }
    __syncthreads();
    const int p = s_pivot;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      ipiv[k] = p + 1;
      if (prow[k] == 0.f && *info == 0) *info = k + 1;
    }
    if (mine) {
      if (p != k && row == k) {
#pragma unroll
        for (int c = 0; c < kLeaf; ++c) x[c] = prow[c];
      } else if (p != k && row == p) {
#pragma unroll
        for (int c = 0; c < kLeaf; ++c) x[c] = drow[c];
      }
      if (row > k && prow[k] != 0.f) {
        const float l = x[k] / prow[k];
        x[k] = l;
#pragma unroll
        for (int c = k + 1; c < kLeaf; ++c) x[c] -= l * prow[c];
      }
    }
  }
  if (mine) {
#pragma unroll
    for (int c = 0; c < kLeaf; ++c) a[static_cast<size_t>(c) * lda + row] = x[c];
  }
}

__global__ void AddToPivots(int* ipiv, int count, int offset) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) ipiv[i] += offset;
}

__global__ void AddToInfo(const int* part, int offset, int* info) {
  if (*info == 0 && *part != 0) *info = *part + offset;
}

struct TallPanel {
  cusolverDnHandle_t solver;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream;
  int max_blocks = 0;  // co-resident LeafLu blocks
  float* cand_val = nullptr;
  int* cand_row = nullptr;
  float* cand_data = nullptr;
  float* diag_data = nullptr;
  int* leaf_info = nullptr;
};

// The panel's cuBLAS handle (on `stream`, with `solver`) and its scratch.
int MakeTallPanel(TallPanel* t, cusolverDnHandle_t solver, cudaStream_t stream) {
  t->solver = solver;
  t->stream = stream;
  CHECK(cublasCreate(&t->blas));
  CHECK(cublasSetStream(t->blas, stream));
  int device = 0, sms = 0, per_sm = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, LeafLu, kThreads, 0));
  t->max_blocks = sms * per_sm;
  const size_t b = t->max_blocks;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&t->cand_val), sizeof(float) * 2 * b));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&t->cand_row), sizeof(int) * 2 * b));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&t->cand_data), sizeof(float) * 2 * b * kLeaf));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&t->diag_data), sizeof(float) * 2 * kLeaf));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&t->leaf_info), sizeof(int)));
  return 0;
}

void FreeTallPanel(TallPanel* t) {
  for (void* p : {static_cast<void*>(t->cand_val), static_cast<void*>(t->cand_row),
                  static_cast<void*>(t->cand_data), static_cast<void*>(t->diag_data),
                  static_cast<void*>(t->leaf_info)})
    if (p != nullptr) cudaFree(p);
  if (t->blas != nullptr) cublasDestroy(t->blas);
}

// GEPP of the m x w column-major panel at a (m >= w, w a multiple of kLeaf,
// m at most max_blocks * kThreads); ipiv 1-based, relative to the panel's
// first row, as getrf's; *info (device, zero before) gets the first zero
// pivot, col0 + its column (1-based).
int FactorTallPanel(TallPanel& t, float* a, int lda, int m, int w, int* ipiv, int* info,
                    int col0 = 0) {
  if (w == kLeaf) {
    int blocks = (m + kThreads - 1) / kThreads;
    if (blocks > t.max_blocks) return 2;
    CHECK(cudaMemsetAsync(t.leaf_info, 0, sizeof(int), t.stream));
    void* args[] = {&a, &lda, &m, &ipiv, &t.leaf_info, &t.cand_val, &t.cand_row, &t.cand_data,
                    &t.diag_data};
    CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(LeafLu), dim3(blocks),
                                      dim3(kThreads), args, 0, t.stream));
    AddToInfo<<<1, 1, 0, t.stream>>>(t.leaf_info, col0, info);
    return 0;
  }
  const int w1 = (w / 2 + kLeaf - 1) / kLeaf * kLeaf, w2 = w - w1;
  const float one = 1.f, minus = -1.f;
  if (int rc = FactorTallPanel(t, a, lda, m, w1, ipiv, info, col0)) return rc;
  float* a12 = a + static_cast<size_t>(w1) * lda;
  CHECK(cusolverDnSlaswp(t.solver, w2, a12, lda, 1, w1, ipiv, 1));
  CHECK(cublasStrsm(t.blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                    CUBLAS_DIAG_UNIT, w1, w2, &one, a, lda, a12, lda));
  CHECK(cublasGemmEx(t.blas, CUBLAS_OP_N, CUBLAS_OP_N, m - w1, w2, w1, &minus, a + w1, CUDA_R_32F,
                     lda, a12, CUDA_R_32F, lda, &one, a12 + w1, CUDA_R_32F, lda,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (int rc = FactorTallPanel(t, a12 + w1, lda, m - w1, w2, ipiv + w1, info, col0 + w1)) {
    return rc;
  }
  CHECK(cusolverDnSlaswp(t.solver, w1, a + w1, lda, 1, w2, ipiv + w1, 1));
  AddToPivots<<<(w2 + 255) / 256, 256, 0, t.stream>>>(ipiv + w1, w2, w1);
  return 0;
}

}  // namespace

// Returns 0 and the factorisation's GPU time in *ms; ipiv: cuSOLVER's
// 1-based interchanges, each panel's relative to its own first row.
// panel_kind: 0 cuSOLVER's getrf, 1 the tall-panel LU (nb a multiple of 32).
// sm_target > 0: cuBLAS sizes the updates for that many SMs
// (cublasSetSmCountTarget), leaving the others to the panel beside them.
// panel_sms > 0: the GPU's SMs split in two green contexts, panel_sms (or
// the next count the split allows) for the panels, the rest for the updates.
extern "C" int lu_lookahead(float* a, int n, int nb, int update_kind, int lookahead,
                            int panel_kind, int sm_target, int panel_sms, int* ipiv, int* info,
                            float* ms) {
  const Update update = static_cast<Update>(update_kind);
  int low = 0, high = 0;
  cudaStream_t panel_stream, update_stream;
  CHECK(cudaDeviceGetStreamPriorityRange(&low, &high));
  CUgreenCtx green[2] = {nullptr, nullptr};
  if (panel_sms > 0 && lookahead) {
    CUdevice device;
    CUdevResource all, parts[2], rest;
    unsigned int groups = 1;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&device, 0));
    CHECK(cuDeviceGetDevResource(device, &all, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(cuDevSmResourceSplitByCount(parts, &groups, &all, &rest, 0, panel_sms));
    parts[1] = rest;
    std::fprintf(stderr, "green contexts: %u SMs for panels, %u for updates\n",
                 parts[0].sm.smCount, parts[1].sm.smCount);
    for (int i = 0; i < 2; ++i) {
      CUdevResourceDesc desc;
      CHECK(cuDevResourceGenerateDesc(&desc, &parts[i], 1));
      CHECK(cuGreenCtxCreate(&green[i], desc, device, CU_GREEN_CTX_DEFAULT_STREAM));
    }
    CUstream s0, s1;
    CHECK(cuGreenCtxStreamCreate(&s0, green[0], CU_STREAM_NON_BLOCKING, high));
    CHECK(cuGreenCtxStreamCreate(&s1, green[1], CU_STREAM_NON_BLOCKING, low));
    panel_stream = s0;
    update_stream = s1;
  } else {
    CHECK(cudaStreamCreateWithPriority(&panel_stream, cudaStreamNonBlocking, high));
    CHECK(cudaStreamCreateWithPriority(&update_stream, cudaStreamNonBlocking, low));
  }
  if (!lookahead) update_stream = panel_stream;
  cusolverDnHandle_t solver;
  cublasHandle_t blas;
  CHECK(cusolverDnCreate(&solver));
  CHECK(cublasCreate(&blas));
  CHECK(cusolverDnSetStream(solver, panel_stream));
  CHECK(cublasSetStream(blas, update_stream));
  if (sm_target > 0) CHECK(cublasSetSmCountTarget(blas, sm_target));
  TallPanel tall;
  if (panel_kind == 1) {
    if (nb % kLeaf != 0) return 3;
    if (MakeTallPanel(&tall, solver, panel_stream)) return 1;
  }
  int lwork = 0;
  CHECK(cusolverDnSgetrf_bufferSize(solver, n, nb, a, n, &lwork));
  const int panels = (n + nb - 1) / nb;
  float *work = nullptr, *eye = nullptr;
  int* dinfo = nullptr;
  Split l21, u12;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&work), sizeof(float) * std::max(lwork, 1)));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&dinfo), sizeof(int) * panels));
  CHECK(cudaMemset(dinfo, 0, sizeof(int) * panels));
  if (update == kTf32x3) {
    const size_t block = sizeof(float) * static_cast<size_t>(n) * nb;
    for (float** p : {&l21.hi, &l21.lo, &u12.hi, &u12.lo})
      CHECK(cudaMalloc(reinterpret_cast<void**>(p), block));
    std::vector<float> host(static_cast<size_t>(nb) * nb, 0.f);
    for (int i = 0; i < nb; ++i) host[static_cast<size_t>(i) * nb + i] = 1.f;
    CHECK(cudaMalloc(reinterpret_cast<void**>(&eye), sizeof(float) * host.size()));
    CHECK(cudaMemcpy(eye, host.data(), sizeof(float) * host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<cudaEvent_t> factored(panels), ready(panels + 1);
  for (auto* events : {&factored, &ready})
    for (auto& e : *events) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t start, stop, joined;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  CHECK(cudaDeviceSynchronize());

  auto at = [&](int i, int j) { return a + static_cast<size_t>(j) * n + i; };
  const float one = 1.f;
  CHECK(cudaEventRecord(start, panel_stream));
  CHECK(cudaStreamWaitEvent(update_stream, start, 0));
  for (int k = 0; k < panels; ++k) {
    const int o = k * nb, w = std::min(nb, n - o), right = n - o - w, below = n - o - w;
    if (k > 0) CHECK(cudaStreamWaitEvent(panel_stream, ready[k], 0));
    CHECK(cusolverDnSetStream(solver, panel_stream));
    if (panel_kind == 1) {
      if (int rc = FactorTallPanel(tall, at(o, o), n, n - o, w, ipiv + o, dinfo + k)) return rc;
    } else {
      CHECK(cusolverDnSgetrf(solver, n - o, w, at(o, o), n, work, ipiv + o, dinfo + k));
    }
    CHECK(cudaEventRecord(factored[k], panel_stream));
    if (right == 0) break;
    CHECK(cudaStreamWaitEvent(update_stream, factored[k], 0));
    CHECK(cusolverDnSetStream(solver, update_stream));
    if (update == kTf32x3 && SplitTf32(blas, at(o + w, o), below, w, n, eye, nb, l21, false))
      return 1;
    // The next panel's columns first (interchanges, U12, update), so that it
    // is factored while the rest of the trailing matrix is updated.
    const int next = std::min(nb, right);
    const int pieces[2][2] = {{0, next}, {next, right - next}};
    for (const auto& piece : pieces) {
      const int c0 = piece[0], cols = piece[1];
      if (cols == 0) continue;
      float* u = at(o, o + w + c0);
      CHECK(cusolverDnSlaswp(solver, cols, u, n, 1, w, ipiv + o, 1));
      CHECK(cublasStrsm(blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                        CUBLAS_DIAG_UNIT, w, cols, &one, at(o, o), n, u, n));
      float* c = at(o + w, o + w + c0);
      if (update == kTf32x3) {
        const size_t shift = static_cast<size_t>(c0) * w;
        const Split part{u12.hi + shift, u12.lo + shift};
        if (SplitTf32(blas, u, w, cols, n, eye, nb, part, true)) return 1;
        const float* terms[3][2] = {{l21.hi, part.hi}, {l21.hi, part.lo}, {l21.lo, part.hi}};
        for (const auto& t : terms)
          if (Subtract(blas, kTf32, below, cols, w, t[0], below, t[1], w, c, n)) return 1;
      } else if (Subtract(blas, update, below, cols, w, at(o + w, o), n, u, n, c, n)) {
        return 1;
      }
      if (c0 == 0) CHECK(cudaEventRecord(ready[k + 1], update_stream));
    }
  }
  CHECK(cudaEventRecord(joined, update_stream));
  CHECK(cudaStreamWaitEvent(panel_stream, joined, 0));
  CHECK(cusolverDnSetStream(solver, panel_stream));
  for (int k = 1; k < panels; ++k) {  // the interchanges on the columns left of each panel
    const int o = k * nb, w = std::min(nb, n - o);
    CHECK(cusolverDnSlaswp(solver, o, at(o, 0), n, 1, w, ipiv + o, 1));
  }
  CHECK(cudaEventRecord(stop, panel_stream));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventElapsedTime(ms, start, stop));
  std::vector<int> host_info(panels);
  CHECK(cudaMemcpy(host_info.data(), dinfo, sizeof(int) * panels, cudaMemcpyDeviceToHost));
  *info = 0;
  for (int k = 0; k < panels && *info == 0; ++k)
    if (host_info[k] != 0) *info = k * nb + host_info[k];
  for (void* p : {static_cast<void*>(work), static_cast<void*>(dinfo), static_cast<void*>(eye),
                  static_cast<void*>(l21.hi), static_cast<void*>(l21.lo),
                  static_cast<void*>(u12.hi), static_cast<void*>(u12.lo)})
    if (p != nullptr) cudaFree(p);
  for (auto* events : {&factored, &ready})
    for (auto& e : *events) cudaEventDestroy(e);
  for (cudaEvent_t e : {start, stop, joined}) cudaEventDestroy(e);
  if (panel_kind == 1) {
    FreeTallPanel(&tall);
  }
  cusolverDnDestroy(solver);
  cublasDestroy(blas);
  if (lookahead) cudaStreamDestroy(update_stream);
  cudaStreamDestroy(panel_stream);
  for (CUgreenCtx g : green)
    if (g != nullptr) cuGreenCtxDestroy(g);
  return 0;
}

// The panel alone: GEPP of the m x w column-major panel `a` in place by
// cuSOLVER's getrf (panel_kind 0) or the tall-panel LU (1); the median of
// `repeats` runs on copies of it in *ms (the last run's result stays in a).
extern "C" int panel_only(float* a, int m, int w, int panel_kind, int repeats, int* ipiv,
                          int* info, float* ms) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cusolverDnHandle_t solver;
  CHECK(cusolverDnCreate(&solver));
  CHECK(cusolverDnSetStream(solver, stream));
  TallPanel tall;
  if (MakeTallPanel(&tall, solver, stream)) return 1;
  int lwork = 0;
  CHECK(cusolverDnSgetrf_bufferSize(solver, m, w, a, m, &lwork));
  float *work = nullptr, *copy = nullptr;
  int* dinfo = nullptr;
  const size_t bytes = sizeof(float) * static_cast<size_t>(m) * w;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&work), sizeof(float) * std::max(lwork, 1)));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&copy), bytes));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&dinfo), sizeof(int)));
  CHECK(cudaMemcpy(copy, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    CHECK(cudaMemcpyAsync(a, copy, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaMemsetAsync(dinfo, 0, sizeof(int), stream));
    CHECK(cudaEventRecord(start, stream));
    if (panel_kind == 1) {
      if (int rc = FactorTallPanel(tall, a, m, m, w, ipiv, dinfo)) return rc;
    } else {
      CHECK(cusolverDnSgetrf(solver, m, w, a, m, work, ipiv, dinfo));
    }
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  *ms = times[times.size() / 2];
  CHECK(cudaMemcpy(info, dinfo, sizeof(int), cudaMemcpyDeviceToHost));
  FreeTallPanel(&tall);
  for (void* p : {static_cast<void*>(work), static_cast<void*>(copy), static_cast<void*>(dinfo)})
    cudaFree(p);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cusolverDnDestroy(solver);
  cudaStreamDestroy(stream);
  return 0;
}
