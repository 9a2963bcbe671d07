// cuSOLVERMg's routines over a matrix whose column blocks live on several
// GPUs. The caller (the engine, or a test) provides each participant's
// buffers; a routine converts the layout in place with peer copies, calls
// cuSOLVERMg and converts back where an output is a matrix. Every routine
// returns with all its work finished on the GPUs.
#ifndef JAXMG_XLA_EXT_ENGINES_MG_SOLVERS_H_
#define JAXMG_XLA_EXT_ENGINES_MG_SOLVERS_H_

#include <cstdint>
#include <vector>

#include "xla_ext/common/scalar.h"
#include "xla_ext/common/status.h"
#include "xla_ext/engines/mg/context.h"
#include "xla_ext/layout/block_cyclic.h"

namespace jaxmg::mg {

// One participant's device buffers.
template <typename T>
struct Shard {
  T* a = nullptr;      // N x N/n column-major: the participant's column block
  T* work = nullptr;   // workspace, WorkspaceElements(...) elements
  T* spare = nullptr;  // one tile, N * T_A elements (layout conversion)
};

// Right-hand sides of potrs: each participant's row-major block of B (rows x
// k), or one replicated N x k array; X is written in the same layout.
template <typename T>
struct Rhs {
  bool sharded = false;
  int64_t k = 0;
  std::vector<const T*> b;  // per participant (replicated: all the same data)
  std::vector<T*> x;        // per participant
  T* stage = nullptr;       // N * k elements on participant 0's device
  T* columns = nullptr;     // N * k elements on participant 0's device
};

enum class Routine { kPotrs, kPotri, kSyevd, kSyevdValues, kPotrf, kCholSolve, kGetrf, kGetrs };

// Workspace (elements of T per device) that `routine` needs for this layout;
// nrhs is the largest number of right-hand sides solved at once (potrs);
// any_buffer is any device buffer (the queries want valid pointers).
template <typename T>
Status WorkspaceElements(Context& ctx, Routine routine, const layout::ColumnLayout& layout,
                         int64_t nrhs, void* any_buffer, int64_t* elements);

// Cholesky factor (lower, kept in A, block-cyclic) and solve. info: 0, or
// the order of the first non-positive-definite leading minor (X is NaN).
template <typename T>
Status Potrs(Context& ctx, const layout::ColumnLayout& layout, const std::vector<Shard<T>>& a,
             const Rhs<T>& rhs, int32_t* info);

// Cholesky factor alone, kept block-cyclic in A's blocks.
template <typename T>
Status Potrf(Context& ctx, const layout::ColumnLayout& layout, const std::vector<Shard<T>>& a,
             int32_t* info);

// Solves with a factor from Potrf (a[d].a holds it; it is only read).
template <typename T>
Status CholSolve(Context& ctx, const layout::ColumnLayout& layout,
                 const std::vector<Shard<T>>& factor, const Rhs<T>& rhs);

// LU with partial pivoting in place; piv[d] receives participant d's N/n
// pivots (its tiles' columns, local order), info > 0 for an exact zero pivot.
template <typename T>
Status Getrf(Context& ctx, const layout::ColumnLayout& layout, const std::vector<Shard<T>>& a,
             const std::vector<int32_t*>& piv, int32_t* info);

// Solves op(M) X = B (conj: conj(M) X = B) with M's factor from Getrf; op is
// CUBLAS_OP_N (cusolverMgGetrs) or CUBLAS_OP_T (jaxmg's own triangular solves
// over the tiles: cusolverMgGetrs accepts only CUBLAS_OP_N). `ipc_tiles`:
// the tiles live in other processes' memory (CUDA IPC), which the first
// GPU's kernels cannot read; the CUBLAS_OP_T path then copies each one over.
template <typename T>
Status Getrs(Context& ctx, const layout::ColumnLayout& layout,
             const std::vector<Shard<T>>& factor, const std::vector<int32_t*>& piv,
             cublasOperation_t op, bool conj, bool ipc_tiles, const Rhs<T>& rhs);

// Lower triangle of the inverse, converted back to column blocks (NaN on failure).
template <typename T>
Status Potri(Context& ctx, const layout::ColumnLayout& layout, const std::vector<Shard<T>>& a,
             int32_t* info);

// Eigenvalues ascending into host `w`; with vectors, A's column blocks hold
// the eigenvectors afterwards.
template <typename T>
Status Syevd(Context& ctx, const layout::ColumnLayout& layout, const std::vector<Shard<T>>& a,
             bool vectors, Real<T>* w, int32_t* info);

// In-place layout conversion over the participants' blocks (exposed for tests).
template <typename T>
Status Convert(Context& ctx, const layout::ColumnLayout& layout, const std::vector<Shard<T>>& a,
               layout::Direction direction);

}  // namespace jaxmg::mg

#endif  // JAXMG_XLA_EXT_ENGINES_MG_SOLVERS_H_
