#include "xla_ext/engines/lapack/engine.h"

#include <algorithm>
#include <complex>
#include <cstring>
#include <limits>
#include <vector>

#include "xla_ext/common/dtypes.h"
#include "xla_ext/engines/block_cyclic_matrix.h"
#include "xla_ext/engines/lapack/lapack.h"
#include "xla_ext/layout/block_cyclic.h"
#include "xla_ext/layout/host_mover.h"

namespace jaxmg::lapack {
namespace {

using engines::Call;
using engines::Trans;
using layout::ColumnLayout;
using layout::Direction;
template <typename T>
using Parts = engines::Parts<T>;

Status CheckSize(int64_t n, const char* what) {
  if (n > std::numeric_limits<lapack_int>::max()) {
    return Errorf("jaxmg: ", what, "=", n, " exceeds LAPACK's 32-bit index range");
  }
  return Status::Ok();
}

ColumnLayout LayoutOf(const Call& call) { return ColumnLayout{call.n, call.tile, call.parts}; }

template <typename T>
Status Convert(const Call& call, const Parts<T>& parts, Direction direction) {
  const ColumnLayout layout = LayoutOf(call);
  std::vector<char*> blocks;
  for (const auto& p : parts) blocks.push_back(static_cast<char*>(p.raw(engines::kA)));
  layout::HostTileMover mover(blocks, layout.n_cols * layout.tile * sizeof(T));
  return layout::ExecuteCycles(layout::PlanCycles(layout, direction), mover);
}

template <typename T>
BlockCyclicMatrix<T> Matrix(const Call& call, const Parts<T>& parts) {
  BlockCyclicMatrix<T> m{LayoutOf(call), {}};
  for (const auto& p : parts) m.local.push_back(p.a());
  return m;
}

template <typename T>
std::vector<T> Gather(const BlockCyclicMatrix<T>& a) {
  std::vector<T> dense(static_cast<size_t>(a.n()) * a.n());
  for (int64_t t = 0; t < a.layout.tiles(); ++t) {
    std::memcpy(dense.data() + t * a.tile_elements(), a.Tile(t), a.tile_elements() * sizeof(T));
  }
  return dense;
}

template <typename T>
void Scatter(const std::vector<T>& dense, const BlockCyclicMatrix<T>& a) {
  for (int64_t t = 0; t < a.layout.tiles(); ++t) {
    std::memcpy(a.Tile(t), dense.data() + t * a.tile_elements(), a.tile_elements() * sizeof(T));
  }
}

// Fills the strict upper triangle from the lower one (Hermitian). Done here,
// not in XLA: a transpose across devices would add an XLA collective, and
// XLA:CPU programs with collectives can deadlock when several run at once.
template <typename T>
void MirrorLower(std::vector<T>& dense, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = j + 1; i < n; ++i) dense[i * n + j] = Conj(dense[j * n + i]);
  }
}

// B arrives row-sharded (rows_b = N / n per participant) or replicated
// (rows_b = N everywhere). Returns it column-major N x k, conjugated when
// `conj` (the engine sees M = A^T, so Hermitian solves run on conj(A)).
template <typename T>
std::vector<T> GatherRhs(const Call& call, const Parts<T>& parts, bool conj) {
  const int64_t n = call.n, k = call.k, rows_b = call.rows_b;
  std::vector<T> rhs(static_cast<size_t>(n) * k);
  const size_t sources = call.b_sharded ? parts.size() : 1;
  for (size_t d = 0; d < sources; ++d) {
    const T* b = parts[d].b();
    for (int64_t r = 0; r < rows_b; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const T v = b[r * k + c];
        rhs[(d * rows_b + r) + c * n] = conj ? Conj(v) : v;
      }
    }
  }
  return rhs;
}

// Writes X back in B's layout (NaN everywhere when `failed`).
template <typename T>
void ScatterRhs(const std::vector<T>& rhs, const Call& call, const Parts<T>& parts, bool conj,
                bool failed) {
  const int64_t n = call.n, k = call.k, rows_b = call.rows_b;
  for (size_t d = 0; d < parts.size(); ++d) {
    T* x = parts[d].x();
    const int64_t first_row = call.b_sharded ? d * rows_b : 0;
    for (int64_t r = 0; r < rows_b; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const T v = rhs[(first_row + r) + c * n];
        x[r * k + c] = failed ? QuietNaN<T>() : (conj ? Conj(v) : v);
      }
    }
  }
}

// A failed inverse or eigendecomposition: every participant's block is NaN.
template <typename T>
void FillBlocksNaN(const Call& call, const Parts<T>& parts) {
  const size_t elements = call.n * (call.n / call.parts);
  for (const auto& p : parts) std::fill(p.a(), p.a() + elements, QuietNaN<T>());
}

template <typename T>
void PublishInfo(const Parts<T>& parts, int32_t info) {
  for (const auto& p : parts) *p.info() = info;
}

// LU pivots live like A's columns: participant d holds those of its tiles,
// in its local order, so they stay with the factor between calls.
template <typename T>
void ScatterPivots(const Call& call, const std::vector<int32_t>& ipiv, const Parts<T>& parts) {
  const ColumnLayout layout = LayoutOf(call);
  for (int64_t t = 0; t < layout.tiles(); ++t) {
    const layout::Slot s = layout.BlockCyclic(t);
    std::copy_n(ipiv.data() + t * layout.tile, layout.tile,
                parts[s.device].pivots() + s.index * layout.tile);
  }
}

template <typename T>
std::vector<lapack_int> GatherPivots(const Call& call, const Parts<T>& parts) {
  const ColumnLayout layout = LayoutOf(call);
  std::vector<lapack_int> ipiv(layout.n_cols);
  for (int64_t t = 0; t < layout.tiles(); ++t) {
    const layout::Slot s = layout.BlockCyclic(t);
    std::copy_n(parts[s.device].pivots() + s.index * layout.tile, layout.tile,
                ipiv.data() + t * layout.tile);
  }
  return ipiv;
}

template <typename T>
Status Needs(const char* routine, T* fn) {
  return Require(routine, reinterpret_cast<const void*>(fn));
}

}  // namespace

template <typename T>
Status LapackEngine<T>::Potrs(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs("potrf", Api<T>::potrf));
  JAXMG_RETURN_IF_ERROR(Needs("potrs", Api<T>::potrs));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.k, "number of right-hand sides"));
  JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToBlockCyclic));
  const BlockCyclicMatrix<T> a = Matrix(call, parts);
  std::vector<T> dense = Gather(a);
  std::vector<T> rhs = GatherRhs(call, parts, /*conj=*/true);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(call.n), k = static_cast<lapack_int>(call.k);
  lapack_int status = 0;
  Api<T>::potrf(&uplo, &n, dense.data(), &n, &status);
  if (status == 0 && k > 0) Api<T>::potrs(&uplo, &n, &k, dense.data(), &n, rhs.data(), &n, &status);
  Scatter(dense, a);
  ScatterRhs(rhs, call, parts, /*conj=*/true, status != 0);
  PublishInfo(parts, status);
  return Status::Ok();
}

template <typename T>
Status LapackEngine<T>::Potrf(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs("potrf", Api<T>::potrf));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToBlockCyclic));
  const BlockCyclicMatrix<T> a = Matrix(call, parts);
  std::vector<T> dense = Gather(a);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(call.n);
  lapack_int status = 0;
  Api<T>::potrf(&uplo, &n, dense.data(), &n, &status);
  Scatter(dense, a);
  PublishInfo(parts, status);
  return Status::Ok();
}

template <typename T>
Status LapackEngine<T>::CholSolve(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs("potrs", Api<T>::potrs));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.k, "number of right-hand sides"));
  if (call.k == 0) return Status::Ok();
  std::vector<T> dense = Gather(Matrix(call, parts));
  std::vector<T> rhs = GatherRhs(call, parts, /*conj=*/true);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(call.n), k = static_cast<lapack_int>(call.k);
  lapack_int status = 0;
  Api<T>::potrs(&uplo, &n, &k, dense.data(), &n, rhs.data(), &n, &status);
  if (status != 0) return Errorf("jaxmg: potrs rejected argument ", -status);
  ScatterRhs(rhs, call, parts, /*conj=*/true, false);
  return Status::Ok();
}

template <typename T>
Status LapackEngine<T>::Getrf(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs("getrf", Api<T>::getrf));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToBlockCyclic));
  const BlockCyclicMatrix<T> a = Matrix(call, parts);
  std::vector<T> dense = Gather(a);
  std::vector<lapack_int> ipiv(call.n);
  lapack_int n = static_cast<lapack_int>(call.n);
  lapack_int status = 0;
  Api<T>::getrf(&n, &n, dense.data(), &n, ipiv.data(), &status);
  Scatter(dense, a);
  ScatterPivots(call, std::vector<int32_t>(ipiv.begin(), ipiv.end()), parts);
  PublishInfo(parts, status);
  return Status::Ok();
}

// The engine factors M = A^T, so A X = B is M^T X = B, A^T X = B is M X = B
// and A^H X = B is M conj(X) = conj(B).
template <typename T>
Status LapackEngine<T>::LuSolve(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs("getrs", Api<T>::getrs));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.k, "number of right-hand sides"));
  if (call.k == 0) return Status::Ok();
  const bool conj = call.trans == Trans::kAdjoint;
  std::vector<T> dense = Gather(Matrix(call, parts));
  std::vector<T> rhs = GatherRhs(call, parts, conj);
  std::vector<lapack_int> ipiv = GatherPivots(call, parts);
  char op = call.trans == Trans::kNone ? 'T' : 'N';
  lapack_int n = static_cast<lapack_int>(call.n), k = static_cast<lapack_int>(call.k);
  lapack_int status = 0;
  Api<T>::getrs(&op, &n, &k, dense.data(), &n, ipiv.data(), rhs.data(), &n, &status);
  if (status != 0) return Errorf("jaxmg: getrs rejected argument ", -status);
  ScatterRhs(rhs, call, parts, conj, false);
  return Status::Ok();
}

// inv(M) = inv(A)^T, so M's inverse read back row-major is A's inverse.
template <typename T>
Status LapackEngine<T>::Potri(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs("potrf", Api<T>::potrf));
  JAXMG_RETURN_IF_ERROR(Needs("potri", Api<T>::potri));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToBlockCyclic));
  const BlockCyclicMatrix<T> a = Matrix(call, parts);
  std::vector<T> dense = Gather(a);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(call.n);
  lapack_int status = 0;
  Api<T>::potrf(&uplo, &n, dense.data(), &n, &status);
  if (status == 0) Api<T>::potri(&uplo, &n, dense.data(), &n, &status);
  if (status == 0) MirrorLower(dense, call.n);
  Scatter(dense, a);
  JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToContiguous));
  if (status != 0) FillBlocksNaN(call, parts);
  PublishInfo(parts, status);
  return Status::Ok();
}

// The vectors of M = conj(A) are conj(V); read back row-major the blocks hold
// rows of V^H.
template <typename T>
Status LapackEngine<T>::Syevd(const Call& call, const Parts& parts) {
  JAXMG_RETURN_IF_ERROR(Needs(kIsComplex<T> ? "heevd" : "syevd", Api<T>::evd));
  JAXMG_RETURN_IF_ERROR(CheckSize(call.n, "N"));
  JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToBlockCyclic));
  const BlockCyclicMatrix<T> a = Matrix(call, parts);
  std::vector<T> dense = Gather(a);
  std::vector<Real<T>> w(call.n);
  // The vectors even when only the values are asked for: JAX's eigvalsh is its
  // eigh without the vectors, and LAPACK's values-only path rounds otherwise.
  char jobz = 'V';
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(call.n);
  lapack_int status = 0;
  lapack_int lwork = -1, liwork = -1, lrwork = -1;
  T work_size{};
  Real<T> rwork_size{};
  lapack_int iwork_size = 0;
  // Workspace query, then the real call.
  if constexpr (kIsComplex<T>) {
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w.data(), &work_size, &lwork, &rwork_size,
                &lrwork, &iwork_size, &liwork, &status);
  } else {
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w.data(), &work_size, &lwork, &iwork_size,
                &liwork, &status);
  }
  if (status != 0) return Errorf("jaxmg: syevd workspace query failed with info=", status);
  lwork = static_cast<lapack_int>(std::real(work_size));
  liwork = iwork_size;
  std::vector<T> work(std::max<lapack_int>(lwork, 1));
  std::vector<lapack_int> iwork(std::max<lapack_int>(liwork, 1));
  if constexpr (kIsComplex<T>) {
    lrwork = static_cast<lapack_int>(rwork_size);
    std::vector<Real<T>> rwork(std::max<lapack_int>(lrwork, 1));
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w.data(), work.data(), &lwork, rwork.data(),
                &lrwork, iwork.data(), &liwork, &status);
  } else {
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w.data(), work.data(), &lwork, iwork.data(),
                &liwork, &status);
  }
  if (call.vectors) {
    Scatter(dense, a);
    JAXMG_RETURN_IF_ERROR(Convert(call, parts, Direction::kToContiguous));
    if (status != 0) FillBlocksNaN(call, parts);
  }
  for (const auto& p : parts) {
    if (status == 0) {
      std::copy(w.begin(), w.end(), p.w());
    } else {
      std::fill(p.w(), p.w() + call.n, std::numeric_limits<Real<T>>::quiet_NaN());
    }
  }
  PublishInfo(parts, status);
  return Status::Ok();
}

template <typename T>
Status LapackEngine<T>::AllFinite(const Call& call, const Parts& parts, bool* finite) {
  const int64_t rows = call.n / call.parts;
  const bool upper = engines::ReadsUpperTriangle(call.routine);
  *finite = true;
  for (size_t i = 0; i < parts.size() && *finite; ++i) {
    *finite = engines::ReadEntriesFinite(parts[i].a(), 0, call.n * rows,
                                         static_cast<int64_t>(i) * rows, call.n, upper);
  }
  return Status::Ok();
}

template <typename T>
Status LapackEngine<T>::ReportNonFinite(const Call& call, const Parts& parts) {
  for (const auto& p : parts) {
    if (*p.info() == 0) *p.info() = static_cast<int32_t>(call.n + 1);
  }
  return Status::Ok();
}

template <typename T>
Status LapackEngine<T>::Relayout(const Call& call, const Parts& parts) {
  return Convert(call, parts,
                 call.to_block_cyclic ? Direction::kToBlockCyclic : Direction::kToContiguous);
}

#define JAXMG_INSTANTIATE(prefix, name, T, ...) template class LapackEngine<T>;
JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::lapack
