// cuSOLVERMp engine: every rank runs the routine on its own local matrix, and
// the ranks talk over NCCL. Matrices are M x N column-major on a 1 x P grid
// of square blocks of `block` columns (ScaLAPACK's layout, all rows local):
// with block = N / P that is exactly the column block a rank already holds,
// so JAX's layout needs no conversion. Right-hand sides live on rank 0 (one
// block column) and are broadcast to every rank afterwards.
//
// All work is enqueued on the caller's stream; info values are written on
// the device. Device workspace comes from the caller (`Allocator`).
#ifndef JAXMG_XLA_EXT_ENGINES_MP_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_MP_ENGINE_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "xla_ext/common/scalar.h"
#include "xla_ext/common/status.h"
#include "xla_ext/vendor/cusolvermp.h"

namespace jaxmg::mp {

// The ranks of one communicator that this process hosts.
struct GroupSpec {
  std::string id;  // NCCL unique id, 256 hex digits (made once per mesh in Python)
  int32_t n_ranks = 0;
  std::vector<int32_t> local_ranks;    // ranks hosted by this process
  std::vector<int32_t> local_devices;  // their CUDA ordinals
};

// One rank's long-lived state.
struct Rank {
  int32_t rank = 0;
  int32_t n_ranks = 0;
  int32_t device = 0;
  ncclComm_t comm = nullptr;
  cusolverMpHandle_t handle = nullptr;  // one per GPU per process, shared by groups
  cusolverMpGrid_t grid = nullptr;      // 1 x n_ranks
  std::vector<char> host_work;
  std::once_flag ready;
  Status ready_status;
};

// The rank hosted on `device` in `spec`'s group, initialised on first use
// (communicators of all local ranks together; handle and grid by the rank's
// own thread, since grid creation is collective).
Status GetRank(const GroupSpec& spec, int32_t device, cudaStream_t stream, Rank** out);

// cuSOLVERMp's version (major * 1000 + minor * 100 + patch) through a handle
// on `device` (the handle is kept for later calls).
Status Version(int32_t device, cudaStream_t stream, int* version);

using Allocator = std::function<Status(size_t bytes, void** out)>;

// Cholesky (lower) of the N x N matrix in place.
template <typename T>
Status Potrf(Rank& r, cudaStream_t stream, int64_t n, int64_t block, T* a, int32_t* info,
             const Allocator& alloc);

// Solves with a factor from Potrf for the N x k right-hand sides in xt
// (column-major, leading dimension N, the same on every rank); xt holds X
// on every rank afterwards.
template <typename T>
Status Potrs(Rank& r, cudaStream_t stream, int64_t n, int64_t block, const T* factor, T* xt,
             int64_t k, const Allocator& alloc);

// LU with partial pivoting in place; piv receives the N pivots (as
// cuSOLVERMp numbers them) on every rank.
template <typename T>
Status Getrf(Rank& r, cudaStream_t stream, int64_t n, int64_t block, T* a, int32_t* piv,
             int32_t* info, const Allocator& alloc);

template <typename T>
Status Getrs(Rank& r, cudaStream_t stream, int64_t n, int64_t block, const T* lu,
             const int32_t* piv, T* xt, int64_t k, const Allocator& alloc);

// Eigenvalues (ascending, into w on every rank) and eigenvectors (q, laid
// out like a) of the lower triangle of a; a is destroyed.
template <typename T>
Status Syevd(Rank& r, cudaStream_t stream, int64_t n, int64_t block, T* a, T* q, Real<T>* w,
             int32_t* info, const Allocator& alloc);

// Reduced QR of the M x N matrix a (M >= N): a becomes Q (M x N) and r_out
// the first N rows of the factored matrix (R in its upper triangle), laid out
// with leading dimension N.
template <typename T>
Status Qr(Rank& r, cudaStream_t stream, int64_t m, int64_t n, int64_t block, T* a, T* r_out,
          int32_t* info, const Allocator& alloc);

}  // namespace jaxmg::mp

#endif  // JAXMG_XLA_EXT_ENGINES_MP_ENGINE_H_
