// CPU engine: runs LAPACK on a gathered copy of the block-cyclic matrix and
// scatters the result back into the tiles. Memory: one extra N x N host
// buffer, which is fine for the CPU backend's purpose (development and CI).
#ifndef JAXMG_XLA_EXT_ENGINES_LAPACK_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_LAPACK_ENGINE_H_

#include <cstdint>

#include "xla_ext/common/scalar.h"
#include "xla_ext/common/status.h"
#include "xla_ext/engines/block_cyclic_matrix.h"

namespace jaxmg::lapack {

// Cholesky-factors A (lower) in place and solves A X = B; `b` is column-major
// N x nrhs and is overwritten with X. info: 0, or the order of the leading
// minor that is not positive definite.
template <typename T>
Status Potrs(const BlockCyclicMatrix<T>& a, T* b, int64_t nrhs, int32_t* info);

// Cholesky-factors A (lower) in place.
template <typename T>
Status Potrf(const BlockCyclicMatrix<T>& a, int32_t* info);

// Solves with a factor from Potrf; `b` (column-major N x nrhs) becomes X.
template <typename T>
Status CholSolve(const BlockCyclicMatrix<T>& factor, T* b, int64_t nrhs);

// LU-factors A = P L U in place; ipiv: N global pivots, LAPACK's 1-based rows.
template <typename T>
Status Getrf(const BlockCyclicMatrix<T>& a, int32_t* ipiv, int32_t* info);

// Solves op(A) X = B with a factor from Getrf; trans is 'N', 'T' or 'C'.
template <typename T>
Status Getrs(const BlockCyclicMatrix<T>& factor, const int32_t* ipiv, char trans, T* b,
             int64_t nrhs);

// Overwrites A with its full (both triangles) inverse.
template <typename T>
Status Potri(const BlockCyclicMatrix<T>& a, int32_t* info);

// Eigenvalues ascending into w; with `vectors`, A is overwritten with the
// eigenvectors as columns.
template <typename T>
Status Syevd(const BlockCyclicMatrix<T>& a, Real<T>* w, bool vectors, int32_t* info);

}  // namespace jaxmg::lapack

#endif  // JAXMG_XLA_EXT_ENGINES_LAPACK_ENGINE_H_
