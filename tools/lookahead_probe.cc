// The blocked LU behind tools/lookahead_probe.py (a measurement, not part of
// the library): P A = L U of a float32 column-major matrix in place, panels by
// cuSOLVER's getrf, the panel's row interchanges by laswp, U12 by cuBLAS's
// triangular solve, trailing updates by cuBLAS GEMMs at a chosen precision;
// with look-ahead, the updates run on a second, low-priority stream and the
// next panel is factored as soon as its own columns are updated.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                               \
  do {                                                                         \
    const int code_ = static_cast<int>(x);                                     \
    if (code_ != 0) {                                                          \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #x, code_); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

namespace {

enum Update { kFp32 = 0, kTf32 = 1, kTf32x3 = 2 };

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
  const float one = 1.f, minus = -1.f;
  const cublasComputeType_t type =
      update == kFp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &minus, a, CUDA_R_32F, lda, b,
                     CUDA_R_32F, ldb, &one, c, CUDA_R_32F, ldc, type, CUBLAS_GEMM_DEFAULT));
  return 0;
}

}  // namespace

// Returns 0 and the factorisation's GPU time in *ms; ipiv: cuSOLVER's
// 1-based interchanges, each panel's relative to its own first row.
extern "C" int lu_lookahead(float* a, int n, int nb, int update_kind, int lookahead, int* ipiv,
                            int* info, float* ms) {
  const Update update = static_cast<Update>(update_kind);
  int low = 0, high = 0;
  cudaStream_t panel_stream, update_stream;
  CHECK(cudaDeviceGetStreamPriorityRange(&low, &high));
  CHECK(cudaStreamCreateWithPriority(&panel_stream, cudaStreamNonBlocking, high));
  CHECK(cudaStreamCreateWithPriority(&update_stream, cudaStreamNonBlocking, low));
  if (!lookahead) update_stream = panel_stream;
  cusolverDnHandle_t solver;
  cublasHandle_t blas;
  CHECK(cusolverDnCreate(&solver));
  CHECK(cublasCreate(&blas));
  CHECK(cusolverDnSetStream(solver, panel_stream));
  CHECK(cublasSetStream(blas, update_stream));
  int lwork = 0;
  CHECK(cusolverDnSgetrf_bufferSize(solver, n, nb, a, n, &lwork));
  const int panels = (n + nb - 1) / nb;
  float *work = nullptr, *eye = nullptr;
  int* dinfo = nullptr;
  Split l21, u12;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&work), sizeof(float) * std::max(lwork, 1)));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&dinfo), sizeof(int) * panels));
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
    CHECK(cusolverDnSgetrf(solver, n - o, w, at(o, o), n, work, ipiv + o, dinfo + k));
    CHECK(cudaEventRecord(factored[k], panel_stream));
    if (right == 0) break;
    CHECK(cudaStreamWaitEvent(update_stream, factored[k], 0));
    CHECK(cusolverDnSetStream(solver, update_stream));
    CHECK(cusolverDnSlaswp(solver, right, at(o, o + w), n, 1, w, ipiv + o, 1));
    CHECK(cublasStrsm(blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                      CUBLAS_DIAG_UNIT, w, right, &one, at(o, o), n, at(o, o + w), n));
    const int next = std::min(nb, right);
    const int pieces[2][2] = {{0, next}, {next, right - next}};  // the next panel first
    if (update == kTf32x3) {
      if (SplitTf32(blas, at(o + w, o), below, w, n, eye, nb, l21, false)) return 1;
      if (SplitTf32(blas, at(o, o + w), w, right, n, eye, nb, u12, true)) return 1;
    }
    for (const auto& piece : pieces) {
      const int c0 = piece[0], cols = piece[1];
      if (cols == 0) continue;
      float* c = at(o + w, o + w + c0);
      if (update == kTf32x3) {
        const size_t shift = static_cast<size_t>(c0) * w;
        const float* terms[3][2] = {{l21.hi, u12.hi + shift}, {l21.hi, u12.lo + shift},
                                    {l21.lo, u12.hi + shift}};
        for (const auto& t : terms)
          if (Subtract(blas, kTf32, below, cols, w, t[0], below, t[1], w, c, n)) return 1;
      } else if (Subtract(blas, update, below, cols, w, at(o + w, o), n, at(o, o + w + c0), n, c,
                          n)) {
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
  cusolverDnDestroy(solver);
  cublasDestroy(blas);
  if (lookahead) cudaStreamDestroy(update_stream);
  cudaStreamDestroy(panel_stream);
  return 0;
}
