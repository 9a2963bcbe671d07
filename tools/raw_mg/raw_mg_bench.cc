// cuSOLVERMg called directly, with no jaxmg engine code and no XLA: the
// baseline for jaxmg's per-call overhead. One call is
// cusolverMgPotrf + cusolverMgPotrs (one right-hand side) on an N x N SPD
// matrix, timed wall-clock up to cudaDeviceSynchronize on every device, as
// jaxmg's forced cuSOLVERMg potrs is timed up to block_until_ready. Handle,
// grid, descriptors, buffers and workspace are set up once; before each call
// A and b are restored from pristine device copies (timed separately); after
// it, |A x - b| / |b| is checked on the host (untimed).
//
// Usage: raw_mg_bench <cuda library dirs, ':'-separated> [N=1024] [devices=0]
//                     [tile=1024] [repeats=50] [float64|float32]
// Runs only where a GPU is (tools/gpu_check raw).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "xla_ext/vendor/cuda.h"

namespace {

[[noreturn]] void Fail(const jaxmg::Status& s) {
  std::fprintf(stderr, "raw_mg_bench: %s\n", s.message().c_str());
  std::exit(1);
}

#define CUDA_OK(expr)                                                                 \
  do {                                                                                \
    cudaError_t c_ = (expr);                                                          \
    if (c_ != cudaSuccess) Fail(jaxmg::cuda::CudaError(c_, #expr, __FILE__, __LINE__)); \
  } while (0)

#define MG_OK(expr)                                                                   \
  do {                                                                                \
    cusolverStatus_t c_ = (expr);                                                     \
    if (c_ != CUSOLVER_STATUS_SUCCESS)                                                \
      Fail(jaxmg::cuda::CusolverError(c_, #expr, __FILE__, __LINE__));                \
  } while (0)

const jaxmg::cuda::Api& Cuda() { return jaxmg::cuda::api(); }

constexpr int kWarmup = 5;

template <typename T>
constexpr cudaDataType kType = CUDA_R_64F;
template <>
constexpr cudaDataType kType<float> = CUDA_R_32F;

struct Options {
  std::string dirs;
  int64_t n = 1024;
  std::string device_list = "0";
  std::vector<int> devices;
  int64_t tile = 1024;
  int repeats = 50;
  bool f32 = false;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "raw_mg_bench: %s\nusage: raw_mg_bench <cuda library dirs, ':'-separated> "
               "[N=1024] [devices=0] [tile=1024] [repeats=50] [float64|float32]\n",
               why);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  if (argc < 2 || argc > 7) Usage("expected 1 to 6 arguments");
  o.dirs = argv[1];
  try {
    if (argc > 2) o.n = std::stoll(argv[2]);
    if (argc > 3) o.device_list = argv[3];
    if (argc > 4) o.tile = std::stoll(argv[4]);
    if (argc > 5) o.repeats = std::stoi(argv[5]);
    std::stringstream in(o.device_list);
    std::string id;
    while (std::getline(in, id, ',')) o.devices.push_back(std::stoi(id));
  } catch (const std::exception&) {
    Usage("N, tile, repeats and the device ids must be integers");
  }
  if (argc > 6) {
    const std::string dtype = argv[6];
    if (dtype != "float64" && dtype != "float32") Usage("dtype must be float64 or float32");
    o.f32 = dtype == "float32";
  }
  if (o.n < 1 || o.n > INT_MAX) Usage("N must be in [1, 2^31)");
  if (o.tile < 1 || o.repeats < 1 || o.devices.empty()) {
    Usage("tile and repeats must be positive, the device list non-empty");
  }
  return o;
}

// Column-major symmetric A = (M + M^T) / 2 + N I with M uniform in [-1, 1]:
// strictly diagonally dominant, hence SPD and well conditioned.
std::vector<double> Spd(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> a(n * n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = j; i < n; ++i) {
      const double v = i == j ? uniform(rng) + double(n) : 0.5 * (uniform(rng) + uniform(rng));
      a[i + j * n] = v;
      a[j + i * n] = v;
    }
  }
  return a;
}

// Waits for every distinct device of the list: cuSOLVERMg returns before its
// kernels on the other GPUs have finished.
void SynchronizeDevices(const std::vector<int>& devices) {
  std::vector<int> done;
  for (int device : devices) {
    if (std::find(done.begin(), done.end(), device) != done.end()) continue;
    CUDA_OK(Cuda().cudaSetDevice(device));
    CUDA_OK(Cuda().cudaDeviceSynchronize());
    done.push_back(device);
  }
}

struct Summary {
  double median, min, p90;
};

Summary Summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const size_t k = ms.size();
  const double median = k % 2 ? ms[k / 2] : 0.5 * (ms[k / 2 - 1] + ms[k / 2]);
  const size_t p90 = static_cast<size_t>(std::ceil(0.9 * k)) - 1;  // nearest rank
  return {median, ms[0], ms[p90]};
}

template <typename T>
int Run(const Options& o) {
  const std::vector<int>& devices = o.devices;
  const int nd = static_cast<int>(devices.size());
  const int n = static_cast<int>(o.n);
  const int64_t tiles = (o.n + o.tile - 1) / o.tile;
  int count = 0;
  cudaError_t e = Cuda().cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::fprintf(stderr,
                 "raw_mg_bench: no usable CUDA device (cudaGetDeviceCount: %s); it needs a GPU "
                 "and its driver\n",
                 e != cudaSuccess ? Cuda().cudaGetErrorString(e) : "0 devices");
    return 1;
  }
  for (int d : devices) {
    if (d < 0 || d >= count) {
      std::fprintf(stderr, "raw_mg_bench: device %d not among the %d visible\n", d, count);
      return 1;
    }
  }
  for (int a : devices) {
    for (int b : devices) {
      int can = 0;
      if (a == b) continue;
      CUDA_OK(Cuda().cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      CUDA_OK(Cuda().cudaSetDevice(a));
      e = Cuda().cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        Cuda().cudaGetLastError();  // clear the sticky "already enabled"
      } else {
        CUDA_OK(e);
      }
    }
  }

  // 1-D block-cyclic columns: tile t (columns [t*tile, (t+1)*tile)) is the
  // (t / nd)-th local tile of participant t % nd, whose local array is
  // N x local_cols, column-major, lda = N.
  std::vector<int64_t> local_cols(nd, 0);
  for (int64_t t = 0; t < tiles; ++t) local_cols[t % nd] += std::min(o.tile, o.n - t * o.tile);

  std::vector<int> ids(devices.begin(), devices.end());
  std::vector<int32_t> ids32(devices.begin(), devices.end());
  cusolverMgHandle_t handle = nullptr;
  cudaLibMgGrid_t grid = nullptr;
  cudaLibMgMatrixDesc_t desc_a = nullptr, desc_b = nullptr;
  MG_OK(Cuda().cusolverMgCreate(&handle));
  MG_OK(Cuda().cusolverMgDeviceSelect(handle, nd, ids.data()));
  MG_OK(Cuda().cusolverMgCreateDeviceGrid(&grid, 1, nd, ids32.data(),
                                          CUDALIBMG_GRID_MAPPING_COL_MAJOR));
  MG_OK(Cuda().cusolverMgCreateMatrixDesc(&desc_a, o.n, o.n, o.n, o.tile, kType<T>, grid));
  // B (N x 1) has one column tile, so it lives wholly on the first
  // participant; the others get a valid N-element buffer that is not read.
  MG_OK(Cuda().cusolverMgCreateMatrixDesc(&desc_b, o.n, 1, o.n, o.tile, kType<T>, grid));

  std::mt19937_64 rng(42);
  const std::vector<double> a64 = Spd(o.n, rng);
  std::vector<T> a_host(a64.begin(), a64.end()), b_host(o.n);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (auto& v : b_host) v = T(uniform(rng));

  std::vector<void*> a(nd), pristine(nd), b(nd), allocations;
  auto alloc = [&](int d, int64_t elements) {
    void* p = nullptr;
    CUDA_OK(Cuda().cudaSetDevice(devices[d]));
    CUDA_OK(Cuda().cudaMalloc(&p, std::max<int64_t>(elements, 1) * sizeof(T)));
    allocations.push_back(p);
    return p;
  };
  for (int d = 0; d < nd; ++d) {
    a[d] = alloc(d, o.n * local_cols[d]);
    pristine[d] = alloc(d, o.n * local_cols[d]);
    b[d] = alloc(d, o.n);
  }
  void* b_pristine = alloc(0, o.n);
  for (int64_t t = 0; t < tiles; ++t) {
    const int d = static_cast<int>(t % nd);
    const int64_t width = std::min(o.tile, o.n - t * o.tile);
    T* dst = static_cast<T*>(pristine[d]) + (t / nd) * o.tile * o.n;
    CUDA_OK(Cuda().cudaSetDevice(devices[d]));
    CUDA_OK(Cuda().cudaMemcpy(dst, a_host.data() + t * o.tile * o.n, width * o.n * sizeof(T),
                              cudaMemcpyHostToDevice));
  }
  CUDA_OK(Cuda().cudaSetDevice(devices[0]));
  CUDA_OK(Cuda().cudaMemcpy(b_pristine, b_host.data(), o.n * sizeof(T), cudaMemcpyHostToDevice));

  int64_t lw_potrf = 0, lw_potrs = 0;
  MG_OK(Cuda().cusolverMgPotrf_bufferSize(handle, CUBLAS_FILL_MODE_LOWER, n, a.data(), 1, 1,
                                          desc_a, kType<T>, &lw_potrf));
  MG_OK(Cuda().cusolverMgPotrs_bufferSize(handle, CUBLAS_FILL_MODE_LOWER, n, 1, a.data(), 1, 1,
                                          desc_a, b.data(), 1, 1, desc_b, kType<T>, &lw_potrs));
  // One workspace for both, as jaxmg's engine passes it (lwork in elements).
  const int64_t lwork = std::max<int64_t>({lw_potrf, lw_potrs, 1});
  std::vector<void*> work(nd);
  for (int d = 0; d < nd; ++d) work[d] = alloc(d, lwork);

  auto restore = [&] {
    for (int d = 0; d < nd; ++d) {
      CUDA_OK(Cuda().cudaSetDevice(devices[d]));
      CUDA_OK(Cuda().cudaMemcpy(a[d], pristine[d], o.n * local_cols[d] * sizeof(T),
                                cudaMemcpyDeviceToDevice));
    }
    CUDA_OK(Cuda().cudaSetDevice(devices[0]));
    CUDA_OK(Cuda().cudaMemcpy(b[0], b_pristine, o.n * sizeof(T), cudaMemcpyDeviceToDevice));
    SynchronizeDevices(devices);
  };
  auto call = [&] {
    int info = 0;
    CUDA_OK(Cuda().cudaSetDevice(devices[0]));
    MG_OK(Cuda().cusolverMgPotrf(handle, CUBLAS_FILL_MODE_LOWER, n, a.data(), 1, 1, desc_a,
                                 kType<T>, work.data(), lwork, &info));
    if (info != 0) Fail(jaxmg::Errorf("cusolverMgPotrf info=", info));
    MG_OK(Cuda().cusolverMgPotrs(handle, CUBLAS_FILL_MODE_LOWER, n, 1, a.data(), 1, 1, desc_a,
                                 b.data(), 1, 1, desc_b, kType<T>, work.data(), lwork, &info));
    if (info != 0) Fail(jaxmg::Errorf("cusolverMgPotrs info=", info));
    SynchronizeDevices(devices);
  };
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };

  // |A x - b| / |b| for the x a call left in b, with A and b as uploaded
  // (rounded to T), in double. A is exactly symmetric: row i is column i.
  std::vector<T> x(o.n);
  auto residual = [&] {
    CUDA_OK(Cuda().cudaSetDevice(devices[0]));
    CUDA_OK(Cuda().cudaMemcpy(x.data(), b[0], o.n * sizeof(T), cudaMemcpyDeviceToHost));
    double r2 = 0, b2 = 0;
    for (int64_t i = 0; i < o.n; ++i) {
      double ax = 0;
      for (int64_t j = 0; j < o.n; ++j) ax += double(a_host[j + i * o.n]) * double(x[j]);
      r2 += (ax - double(b_host[i])) * (ax - double(b_host[i]));
      b2 += double(b_host[i]) * double(b_host[i]);
    }
    return std::sqrt(r2 / b2);
  };
  // Every call is checked (untimed): potrs is issued without waiting for
  // potrf, so a missing ordering inside cuSOLVERMg would show here.
  double worst = 0;
  auto check = [&] {
    const double r = residual();
    worst = std::isnan(r) || r > worst ? r : worst;
  };

  for (int i = 0; i < kWarmup; ++i) {
    restore();
    call();
    check();
  }
  std::printf("raw_cusolvermg warm-up: %d calls\n", kWarmup);
  std::vector<double> call_ms, restore_ms;
  for (int i = 0; i < o.repeats; ++i) {
    Clock::time_point t0 = Clock::now();
    restore();
    restore_ms.push_back(ms_since(t0));
    t0 = Clock::now();
    call();
    call_ms.push_back(ms_since(t0));
    check();
  }
  const char* dtype = o.f32 ? "float32" : "float64";
  const Summary s = Summarise(call_ms), r = Summarise(restore_ms);
  std::printf(
      "raw_cusolvermg potrs N=%ld devices=%s tile=%ld dtype=%s median_ms=%.4f min_ms=%.4f "
      "p90_ms=%.4f\n",
      long(o.n), o.device_list.c_str(), long(o.tile), dtype, s.median, s.min, s.p90);
  std::printf("raw_cusolvermg restore of A and b (not in the call time) median_ms=%.4f\n",
              r.median);
  const double limit = o.f32 ? 1e-4 : 1e-8;
  const bool ok = worst <= limit;  // false for NaN too
  std::printf("raw_cusolvermg residual=%.3e (worst |A x - b| / |b| of %d calls, limit %.0e) %s\n",
              worst, kWarmup + o.repeats, limit, ok ? "ok" : "FAILED");

  for (void* p : allocations) Cuda().cudaFree(p);
  Cuda().cusolverMgDestroyMatrixDesc(desc_a);
  Cuda().cusolverMgDestroyMatrixDesc(desc_b);
  Cuda().cusolverMgDestroyGrid(grid);
  Cuda().cusolverMgDestroy(handle);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  jaxmg::Status loaded = jaxmg::cuda::Load(o.dirs);
  if (!loaded.ok()) Fail(loaded);
  return o.f32 ? Run<float>(o) : Run<double>(o);
}
