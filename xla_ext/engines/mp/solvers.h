// cuSOLVERMp's routines: every rank runs the routine on its own local matrix, and
// the ranks talk over NCCL. Matrices are M x N, 2-D block-cyclic in square
// blocks of `block` on a grid of rows x cols ranks numbered column-major
// (ScaLAPACK's layout; the Python side moves JAX's blocks into it). Each
// local matrix is column-major with its local row count as leading
// dimension. Right-hand sides are N x 1 columns, which live on the grid's
// first column of ranks; the others' copies are left as they were.
//
// All work is enqueued on the caller's stream; info values are written on
// the device. Device workspace comes from the caller (`Allocator`).
#ifndef JAXMG_XLA_EXT_ENGINES_MP_SOLVERS_H_
#define JAXMG_XLA_EXT_ENGINES_MP_SOLVERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
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
  std::map<std::pair<int32_t, int32_t>, cusolverMpGrid_t> grids;  // by (rows, cols)
  std::mutex grids_mu;
  std::vector<char> host_work;
  std::once_flag ready;
  Status ready_status;
};

// A rank's place on a grid of rows x cols ranks (rank = col * rows + row).
struct Grid {
  int32_t rows = 1;
  int32_t cols = 1;
  int32_t row = 0;
  int32_t col = 0;
  cusolverMpGrid_t handle = nullptr;
};

// The rank hosted on `device` in `spec`'s group, initialised on first use
// (communicators of all local ranks together; handle and grid by the rank's
// own thread, since grid creation is collective).
Status GetRank(const GroupSpec& spec, int32_t device, cudaStream_t stream, Rank** out);

// The rank's grid of rows x cols (rows * cols = the group's ranks), made on
// first use: creation is collective, so every rank asks for it in the same call.
Status GridOf(Rank& r, int32_t rows, int32_t cols, Grid* out);

// cuSOLVERMp's version (major * 1000 + minor * 100 + patch) through a handle
// on `device` (the handle is kept for later calls).
Status Version(int32_t device, cudaStream_t stream, int* version);

using Allocator = std::function<Status(size_t bytes, void** out)>;

// Cholesky (lower) of the N x N matrix in place.
template <typename T>
Status Potrf(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, T* a,
             int32_t* info, const Allocator& alloc);

// Solves with a factor from Potrf for the N x k right-hand sides in xt
// (the rank's local rows of each column, column by column); the grid's first
// column of ranks holds X afterwards.
template <typename T>
Status Potrs(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block,
             const T* factor, T* xt, int64_t k, const Allocator& alloc);

// LU with partial pivoting in place; piv receives the pivots of the rank's
// local columns (global row numbers, as cuSOLVERMp numbers them), which
// Getrs takes back in the same layout.
template <typename T>
Status Getrf(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, T* a,
             int32_t* piv, int32_t* info, const Allocator& alloc);

template <typename T>
Status Getrs(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, const T* lu,
             const int32_t* piv, T* xt, int64_t k, const Allocator& alloc);

// Eigenvalues (ascending, into w on every rank) and eigenvectors (q, laid
// out like a) of the lower triangle of a; a is destroyed.
template <typename T>
Status Syevd(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, T* a, T* q,
             Real<T>* w, int32_t* info, const Allocator& alloc);

// Reduced QR of the M x N matrix a (M >= N): a becomes Q (M x N) and r_out
// the rank's local part of the factored matrix's first N rows (R in its upper
// triangle), an N x N matrix on the same grid.
template <typename T>
Status Qr(Rank& r, const Grid& g, cudaStream_t stream, int64_t m, int64_t n, int64_t block, T* a,
          T* r_out, int32_t* info, const Allocator& alloc);

}  // namespace jaxmg::mp

#endif  // JAXMG_XLA_EXT_ENGINES_MP_SOLVERS_H_
