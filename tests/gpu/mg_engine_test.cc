// The cuSOLVERMg engine driven directly, without XLA: n participants whose
// buffers may all sit on one GPU (device list "0,0,0,0"), as cuSOLVERMg
// accepts repeated devices. Checks tile placement after the in-place
// conversion, then potrs / potri / syevd / LU results against host arithmetic.
//
// Usage: mg_engine_test <cuda library dirs, ':'-separated> [device list]
// Runs only where a GPU is (tools/gpu_check); tagged manual in Bazel.
#include <cmath>
#include <complex>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/check.h"
#include "xla_ext/engines/mg/solvers.h"
#include "xla_ext/vendor/cuda.h"

using jaxmg::Real;
using jaxmg::Status;
using jaxmg::layout::ColumnLayout;
using jaxmg::layout::Direction;

namespace {

#define OK(expr)                                                          \
  do {                                                                    \
    Status s_ = (expr);                                                   \
    if (!s_.ok()) {                                                       \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.message().c_str()); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

const jaxmg::cuda::Api& Cuda() { return jaxmg::cuda::api(); }

template <typename T>
T Random(std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  if constexpr (jaxmg::kIsComplex<T>) {
    return T(normal(rng), normal(rng));
  } else {
    return T(normal(rng));
  }
}

// Column-major SPD matrix A = M M^H / n + I, exactly Hermitian.
template <typename T>
std::vector<T> Spd(int64_t n, std::mt19937_64& rng) {
  std::vector<T> m(n * n), a(n * n);
  for (auto& v : m) v = Random<T>(rng);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = j; i < n; ++i) {
      T sum{};
      for (int64_t k = 0; k < n; ++k) sum += m[i + k * n] * jaxmg::Conj(m[j + k * n]);
      sum /= static_cast<Real<T>>(n);
      if (i == j) sum = T(std::real(sum) + 1);
      a[i + j * n] = sum;
      a[j + i * n] = jaxmg::Conj(sum);
    }
  }
  return a;
}

template <typename T>
double Eps() {
  return std::numeric_limits<Real<T>>::epsilon();
}

// Participants' blocks: participant d holds columns [d*N/n, (d+1)*N/n).
template <typename T>
struct Participants {
  std::vector<jaxmg::mg::Shard<T>> shards;
  std::vector<void*> allocations;

  Participants(const std::vector<int>& devices, const ColumnLayout& l, int64_t lwork) {
    const int64_t block = l.n_cols * (l.n_cols / l.n_devices);
    for (int d = 0; d < l.n_devices; ++d) {
      CHECK(Cuda().cudaSetDevice(devices[d]) == cudaSuccess);
      void* p = nullptr;
      const int64_t elements = block + lwork + l.n_cols * l.tile;
      CHECK(Cuda().cudaMalloc(&p, elements * sizeof(T)) == cudaSuccess);
      allocations.push_back(p);
      T* base = static_cast<T*>(p);
      shards.push_back({base, base + block, base + block + lwork});
    }
  }
  ~Participants() {
    for (void* p : allocations) Cuda().cudaFree(p);
  }
  void Upload(const std::vector<T>& a, const ColumnLayout& l) {
    const int64_t block = l.n_cols * (l.n_cols / l.n_devices);
    for (int d = 0; d < l.n_devices; ++d) {
      CHECK(Cuda().cudaMemcpy(shards[d].a, a.data() + d * block, block * sizeof(T),
                              cudaMemcpyHostToDevice) == cudaSuccess);
    }
  }
  std::vector<T> Download(const ColumnLayout& l) {
    const int64_t block = l.n_cols * (l.n_cols / l.n_devices);
    std::vector<T> out(l.n_cols * l.n_cols);
    for (int d = 0; d < l.n_devices; ++d) {
      CHECK(Cuda().cudaMemcpy(out.data() + d * block, shards[d].a, block * sizeof(T),
                              cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    return out;
  }
};

template <typename T>
void CheckLayout(jaxmg::mg::Context& ctx, const std::vector<int>& devices, const ColumnLayout& l,
                 const std::vector<T>& a) {
  Participants<T> p(devices, l, 0);
  p.Upload(a, l);
  OK(jaxmg::mg::Convert<T>(ctx, l, p.shards, Direction::kToBlockCyclic));
  std::vector<T> got = p.Download(l);
  const int64_t per_device = l.n_cols / l.n_devices;
  for (int64_t t = 0; t < l.tiles(); ++t) {
    auto slot = l.BlockCyclic(t);
    const T* placed = got.data() + slot.device * l.n_cols * per_device + slot.index * l.tile * l.n_cols;
    const T* expected = a.data() + t * l.tile * l.n_cols;
    for (int64_t e = 0; e < l.tile * l.n_cols; ++e) CHECK(placed[e] == expected[e]);
  }
  OK(jaxmg::mg::Convert<T>(ctx, l, p.shards, Direction::kToContiguous));
  CHECK(p.Download(l) == a);
}

template <typename T>
void CheckPotrs(jaxmg::mg::Context& ctx, const std::vector<int>& devices, const ColumnLayout& l,
                const std::vector<T>& a, std::mt19937_64& rng) {
  const int64_t n = l.n_cols, k = 3, rows = n / l.n_devices;
  int64_t lwork = 0;
  Participants<T> probe(devices, l, 0);
  OK(jaxmg::mg::WorkspaceElements<T>(ctx, jaxmg::mg::Routine::kPotrs, l, k, probe.shards[0].a,
                                     &lwork));
  Participants<T> p(devices, l, lwork);
  p.Upload(a, l);
  // The uploaded column-major data is M; the row-major matrix JAX would
  // hold is A = M^T. B and X are row-major n x k, row-sharded.
  std::vector<T> b(n * k);
  for (auto& v : b) v = Random<T>(rng);
  jaxmg::mg::Rhs<T> rhs;
  rhs.sharded = true;
  rhs.k = k;
  std::vector<void*> device_b;
  for (int d = 0; d < l.n_devices; ++d) {
    void *bd = nullptr, *xd = nullptr;
    CHECK(Cuda().cudaSetDevice(devices[d]) == cudaSuccess);
    CHECK(Cuda().cudaMalloc(&bd, rows * k * sizeof(T)) == cudaSuccess);
    CHECK(Cuda().cudaMalloc(&xd, rows * k * sizeof(T)) == cudaSuccess);
    CHECK(Cuda().cudaMemcpy(bd, b.data() + d * rows * k, rows * k * sizeof(T),
                            cudaMemcpyHostToDevice) == cudaSuccess);
    rhs.b.push_back(static_cast<T*>(bd));
    rhs.x.push_back(static_cast<T*>(xd));
    device_b.push_back(bd);
    device_b.push_back(xd);
  }
  void* stage = nullptr;
  CHECK(Cuda().cudaSetDevice(devices[0]) == cudaSuccess);
  CHECK(Cuda().cudaMalloc(&stage, 2 * n * k * sizeof(T)) == cudaSuccess);
  rhs.stage = static_cast<T*>(stage);
  rhs.columns = rhs.stage + n * k;
  int32_t info = -1;
  OK(jaxmg::mg::Potrs<T>(ctx, l, p.shards, rhs, &info));
  CHECK(info == 0);
  std::vector<T> x(n * k);
  for (int d = 0; d < l.n_devices; ++d) {
    CHECK(Cuda().cudaMemcpy(x.data() + d * rows * k, rhs.x[d], rows * k * sizeof(T),
                            cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  double err = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      T ax{};
      for (int64_t j = 0; j < n; ++j) ax += a[j + i * n] * x[j * k + c];  // A[i,j] = M[j,i]
      err = std::max(err, double(std::abs(ax - b[i * k + c])));
      scale = std::max(scale, double(std::abs(b[i * k + c])));
    }
  }
  std::printf("  potrs  residual %.2e (eps %.1e)\n", err / scale, Eps<T>());
  CHECK(err / scale < 1e3 * n * Eps<T>());
  for (void* v : device_b) Cuda().cudaFree(v);
  Cuda().cudaFree(stage);
}

// LU of a general matrix, then op(M) X = B for op = N (cusolverMgGetrs) and
// T (jaxmg's own tile solves), B replicated on every participant.
template <typename T>
void CheckLu(jaxmg::mg::Context& ctx, const std::vector<int>& devices, const ColumnLayout& l,
             std::mt19937_64& rng) {
  const int64_t n = l.n_cols, k = 2;
  std::vector<T> m(n * n);
  for (auto& v : m) v = Random<T>(rng) / static_cast<Real<T>>(std::sqrt(double(n)));
  for (int64_t i = 0; i < n; ++i) m[i + i * n] += T(3);
  int64_t lw_getrf = 0, lw_getrs = 0;
  Participants<T> probe(devices, l, 0);
  OK(jaxmg::mg::WorkspaceElements<T>(ctx, jaxmg::mg::Routine::kGetrf, l, 0, probe.shards[0].a,
                                     &lw_getrf));
  OK(jaxmg::mg::WorkspaceElements<T>(ctx, jaxmg::mg::Routine::kGetrs, l, k, probe.shards[0].a,
                                     &lw_getrs));
  Participants<T> p(devices, l, std::max(lw_getrf, lw_getrs));
  p.Upload(m, l);
  std::vector<int32_t*> piv;
  for (int d = 0; d < l.n_devices; ++d) {
    void* q = nullptr;
    CHECK(Cuda().cudaSetDevice(devices[d]) == cudaSuccess);
    CHECK(Cuda().cudaMalloc(&q, (n / l.n_devices) * sizeof(int32_t)) == cudaSuccess);
    piv.push_back(static_cast<int32_t*>(q));
  }
  int32_t info = -1;
  OK(jaxmg::mg::Getrf<T>(ctx, l, p.shards, piv, &info));
  CHECK(info == 0);
  std::vector<T> b(n * k);
  for (auto& v : b) v = Random<T>(rng);
  void *bd = nullptr, *stage = nullptr;
  std::vector<void*> xs;
  CHECK(Cuda().cudaSetDevice(devices[0]) == cudaSuccess);
  CHECK(Cuda().cudaMalloc(&bd, n * k * sizeof(T)) == cudaSuccess);
  CHECK(Cuda().cudaMalloc(&stage, 2 * n * k * sizeof(T)) == cudaSuccess);
  CHECK(Cuda().cudaMemcpy(bd, b.data(), n * k * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  jaxmg::mg::Rhs<T> rhs;
  rhs.sharded = false;
  rhs.k = k;
  for (int d = 0; d < l.n_devices; ++d) {
    void* xd = nullptr;
    CHECK(Cuda().cudaSetDevice(devices[d]) == cudaSuccess);
    CHECK(Cuda().cudaMalloc(&xd, n * k * sizeof(T)) == cudaSuccess);
    rhs.b.push_back(static_cast<T*>(bd));
    rhs.x.push_back(static_cast<T*>(xd));
    xs.push_back(xd);
  }
  rhs.stage = static_cast<T*>(stage);
  rhs.columns = rhs.stage + n * k;
  for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    OK(jaxmg::mg::Getrs<T>(ctx, l, p.shards, piv, op, false, false, rhs));
    for (int d = 0; d < l.n_devices; ++d) {
      std::vector<T> x(n * k);  // row-major n x k, as every participant receives it
      CHECK(Cuda().cudaMemcpy(x.data(), rhs.x[d], n * k * sizeof(T), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
      double err = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < k; ++c) {
          T mx{};
          for (int64_t j = 0; j < n; ++j) {
            const T mij = op == CUBLAS_OP_N ? m[i + j * n] : m[j + i * n];
            mx += mij * x[j * k + c];
          }
          err = std::max(err, double(std::abs(mx - b[i * k + c])));
          scale = std::max(scale, double(std::abs(b[i * k + c])));
        }
      }
      if (d == 0) {
        std::printf("  getrs  op %s residual %.2e\n", op == CUBLAS_OP_N ? "N" : "T", err / scale);
      }
      CHECK(err / scale < 1e3 * n * Eps<T>());
    }
  }
  for (void* v : xs) Cuda().cudaFree(v);
  for (int32_t* q : piv) Cuda().cudaFree(q);
  Cuda().cudaFree(bd);
  Cuda().cudaFree(stage);
}

template <typename T>
void CheckPotriSyevd(jaxmg::mg::Context& ctx, const std::vector<int>& devices,
                     const ColumnLayout& l, const std::vector<T>& a) {
  const int64_t n = l.n_cols;
  int64_t lw_potri = 0, lw_syevd = 0;
  Participants<T> probe(devices, l, 0);
  OK(jaxmg::mg::WorkspaceElements<T>(ctx, jaxmg::mg::Routine::kPotri, l, 0, probe.shards[0].a,
                                     &lw_potri));
  OK(jaxmg::mg::WorkspaceElements<T>(ctx, jaxmg::mg::Routine::kSyevd, l, 0, probe.shards[0].a,
                                     &lw_syevd));
  Participants<T> p(devices, l, std::max(lw_potri, lw_syevd));
  p.Upload(a, l);
  int32_t info = -1;
  OK(jaxmg::mg::Potri<T>(ctx, l, p.shards, &info));
  CHECK(info == 0);
  std::vector<T> inv = p.Download(l);  // lower triangle valid (column-major)
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < j; ++i) inv[i + j * n] = jaxmg::Conj(inv[j + i * n]);
  }
  double err = 0;
  for (int64_t i = 0; i < n; i += 7) {
    for (int64_t j = 0; j < n; ++j) {
      T s{};
      for (int64_t q = 0; q < n; ++q) s += inv[i + q * n] * a[q + j * n];
      err = std::max(err, double(std::abs(s - T(i == j ? 1 : 0))));
    }
  }
  std::printf("  potri  |inv A - I| %.2e\n", err);
  CHECK(err < 1e3 * n * Eps<T>());

  p.Upload(a, l);
  std::vector<Real<T>> w(n);
  OK(jaxmg::mg::Syevd<T>(ctx, l, p.shards, true, w.data(), &info));
  CHECK(info == 0);
  std::vector<T> v = p.Download(l);
  double resid = 0, norm = 0;
  for (int64_t c = 0; c < n; c += 5) {
    for (int64_t i = 0; i < n; ++i) {
      T av{};
      for (int64_t q = 0; q < n; ++q) av += a[i + q * n] * v[q + c * n];
      resid = std::max(resid, double(std::abs(av - w[c] * v[i + c * n])));
    }
  }
  for (int64_t i = 0; i < n; ++i) norm = std::max(norm, double(std::abs(w[i])));
  for (int64_t i = 1; i < n; ++i) CHECK(w[i - 1] <= w[i]);
  std::printf("  syevd  |A v - w v| / |w| %.2e\n", resid / norm);
  CHECK(resid / norm < 1e3 * n * Eps<T>());
}

// A negative diagonal entry at index k: info must be k + 1, the inverse NaN.
template <typename T>
void CheckNotPositiveDefinite(jaxmg::mg::Context& ctx, const std::vector<int>& devices,
                              const ColumnLayout& l, std::vector<T> a) {
  const int64_t k = l.n_cols / 2 + 1;
  a[k + k * l.n_cols] = T(-1000);
  int64_t lwork = 0;
  Participants<T> probe(devices, l, 0);
  OK(jaxmg::mg::WorkspaceElements<T>(ctx, jaxmg::mg::Routine::kPotri, l, 0, probe.shards[0].a,
                                     &lwork));
  Participants<T> p(devices, l, lwork);
  p.Upload(a, l);
  int32_t info = -1;
  OK(jaxmg::mg::Potri<T>(ctx, l, p.shards, &info));
  std::printf("  not positive definite at %ld: info %d\n", long(k), info);
  CHECK(info == k + 1);
  for (const T& v : p.Download(l)) CHECK(std::isnan(std::real(v)));
}

template <typename T>
void Run(const char* name, const std::vector<int>& devices, int64_t n, int64_t tile) {
  std::printf("%s N=%ld tile=%ld devices=%zu\n", name, long(n), long(tile), devices.size());
  jaxmg::mg::Context* ctx = nullptr;
  OK(jaxmg::mg::Context::Get(devices, &ctx));
  ColumnLayout l{n, tile, static_cast<int32_t>(devices.size())};
  OK(l.Validate());
  std::mt19937_64 rng(42);
  std::vector<T> a = Spd<T>(n, rng);
  CheckLayout<T>(*ctx, devices, l, a);
  CheckPotrs<T>(*ctx, devices, l, a, rng);
  CheckPotriSyevd<T>(*ctx, devices, l, a);
  CheckLu<T>(*ctx, devices, l, rng);
  // Last: the next Run reuses this context, so it also checks that a failed
  // factorisation leaves the context usable.
  CheckNotPositiveDefinite<T>(*ctx, devices, l, a);
}

}  // namespace

int main(int argc, char** argv) {
  OK(jaxmg::cuda::Load(argc > 1 ? argv[1] : ""));
  std::vector<int> devices = {0, 0, 0, 0};
  if (argc > 2) {
    devices.clear();
    std::stringstream in(argv[2]);
    std::string id;
    while (std::getline(in, id, ',')) devices.push_back(std::stoi(id));
  }
  Run<double>("float64", devices, 512, 32);
  Run<float>("float32", devices, 256, 16);
  Run<std::complex<double>>("complex128", devices, 256, 16);
  Run<std::complex<float>>("complex64", devices, 128, 8);
  Run<double>("float64 one participant", {devices[0]}, 256, 64);
  std::printf("mg_engine_test: passed\n");
  return 0;
}
