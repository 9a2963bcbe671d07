#include "xla_ext/engines/lapack/engine.h"

#include <algorithm>
#include <complex>
#include <cstring>
#include <limits>
#include <vector>

#include "xla_ext/engines/lapack/lapack.h"

namespace jaxmg::lapack {
namespace {

Status CheckSize(int64_t n, const char* what) {
  if (n > std::numeric_limits<lapack_int>::max()) {
    return Errorf("jaxmg: ", what, "=", n, " exceeds LAPACK's 32-bit index range");
  }
  return Status::Ok();
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

}  // namespace

template <typename T>
Status Potrs(const BlockCyclicMatrix<T>& a, T* b, int64_t nrhs, int32_t* info) {
  JAXMG_RETURN_IF_ERROR(Require("potrf", reinterpret_cast<void*>(Api<T>::potrf)));
  JAXMG_RETURN_IF_ERROR(Require("potrs", reinterpret_cast<void*>(Api<T>::potrs)));
  JAXMG_RETURN_IF_ERROR(CheckSize(a.n(), "N"));
  JAXMG_RETURN_IF_ERROR(CheckSize(nrhs, "number of right-hand sides"));
  std::vector<T> dense = Gather(a);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(a.n());
  lapack_int k = static_cast<lapack_int>(nrhs);
  lapack_int status = 0;
  Api<T>::potrf(&uplo, &n, dense.data(), &n, &status);
  if (status == 0 && k > 0) Api<T>::potrs(&uplo, &n, &k, dense.data(), &n, b, &n, &status);
  Scatter(dense, a);
  *info = status;
  return Status::Ok();
}

template <typename T>
Status Potrf(const BlockCyclicMatrix<T>& a, int32_t* info) {
  JAXMG_RETURN_IF_ERROR(Require("potrf", reinterpret_cast<void*>(Api<T>::potrf)));
  JAXMG_RETURN_IF_ERROR(CheckSize(a.n(), "N"));
  std::vector<T> dense = Gather(a);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(a.n());
  lapack_int status = 0;
  Api<T>::potrf(&uplo, &n, dense.data(), &n, &status);
  Scatter(dense, a);
  *info = status;
  return Status::Ok();
}

template <typename T>
Status CholSolve(const BlockCyclicMatrix<T>& factor, T* b, int64_t nrhs) {
  JAXMG_RETURN_IF_ERROR(Require("potrs", reinterpret_cast<void*>(Api<T>::potrs)));
  JAXMG_RETURN_IF_ERROR(CheckSize(factor.n(), "N"));
  JAXMG_RETURN_IF_ERROR(CheckSize(nrhs, "number of right-hand sides"));
  if (nrhs == 0) return Status::Ok();
  std::vector<T> dense = Gather(factor);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(factor.n());
  lapack_int k = static_cast<lapack_int>(nrhs);
  lapack_int status = 0;
  Api<T>::potrs(&uplo, &n, &k, dense.data(), &n, b, &n, &status);
  if (status != 0) return Errorf("jaxmg: potrs rejected argument ", -status);
  return Status::Ok();
}

template <typename T>
Status Getrf(const BlockCyclicMatrix<T>& a, int32_t* ipiv, int32_t* info) {
  JAXMG_RETURN_IF_ERROR(Require("getrf", reinterpret_cast<void*>(Api<T>::getrf)));
  JAXMG_RETURN_IF_ERROR(CheckSize(a.n(), "N"));
  std::vector<T> dense = Gather(a);
  lapack_int n = static_cast<lapack_int>(a.n());
  lapack_int status = 0;
  Api<T>::getrf(&n, &n, dense.data(), &n, ipiv, &status);
  Scatter(dense, a);
  *info = status;
  return Status::Ok();
}

template <typename T>
Status Getrs(const BlockCyclicMatrix<T>& factor, const int32_t* ipiv, char trans, T* b,
             int64_t nrhs) {
  JAXMG_RETURN_IF_ERROR(Require("getrs", reinterpret_cast<void*>(Api<T>::getrs)));
  JAXMG_RETURN_IF_ERROR(CheckSize(factor.n(), "N"));
  JAXMG_RETURN_IF_ERROR(CheckSize(nrhs, "number of right-hand sides"));
  if (nrhs == 0) return Status::Ok();
  std::vector<T> dense = Gather(factor);
  std::vector<lapack_int> pivots(ipiv, ipiv + factor.n());
  lapack_int n = static_cast<lapack_int>(factor.n());
  lapack_int k = static_cast<lapack_int>(nrhs);
  lapack_int status = 0;
  Api<T>::getrs(&trans, &n, &k, dense.data(), &n, pivots.data(), b, &n, &status);
  if (status != 0) return Errorf("jaxmg: getrs rejected argument ", -status);
  return Status::Ok();
}

template <typename T>
Status Potri(const BlockCyclicMatrix<T>& a, int32_t* info) {
  JAXMG_RETURN_IF_ERROR(Require("potrf", reinterpret_cast<void*>(Api<T>::potrf)));
  JAXMG_RETURN_IF_ERROR(Require("potri", reinterpret_cast<void*>(Api<T>::potri)));
  JAXMG_RETURN_IF_ERROR(CheckSize(a.n(), "N"));
  std::vector<T> dense = Gather(a);
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(a.n());
  lapack_int status = 0;
  Api<T>::potrf(&uplo, &n, dense.data(), &n, &status);
  if (status == 0) Api<T>::potri(&uplo, &n, dense.data(), &n, &status);
  if (status == 0) MirrorLower(dense, a.n());
  Scatter(dense, a);
  *info = status;
  return Status::Ok();
}

template <typename T>
Status Syevd(const BlockCyclicMatrix<T>& a, Real<T>* w, bool vectors, int32_t* info) {
  JAXMG_RETURN_IF_ERROR(Require(kIsComplex<T> ? "heevd" : "syevd",
                                reinterpret_cast<void*>(Api<T>::evd)));
  JAXMG_RETURN_IF_ERROR(CheckSize(a.n(), "N"));
  std::vector<T> dense = Gather(a);
  char jobz = vectors ? 'V' : 'N';
  char uplo = 'L';
  lapack_int n = static_cast<lapack_int>(a.n());
  lapack_int status = 0;
  lapack_int lwork = -1, liwork = -1, lrwork = -1;
  T work_size{};
  Real<T> rwork_size{};
  lapack_int iwork_size = 0;
  // Workspace query, then the real call.
  if constexpr (kIsComplex<T>) {
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w, &work_size, &lwork, &rwork_size, &lrwork,
                &iwork_size, &liwork, &status);
  } else {
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w, &work_size, &lwork, &iwork_size, &liwork,
                &status);
  }
  if (status != 0) return Errorf("jaxmg: syevd workspace query failed with info=", status);
  lwork = static_cast<lapack_int>(std::real(work_size));
  liwork = iwork_size;
  std::vector<T> work(std::max<lapack_int>(lwork, 1));
  std::vector<lapack_int> iwork(std::max<lapack_int>(liwork, 1));
  if constexpr (kIsComplex<T>) {
    lrwork = static_cast<lapack_int>(rwork_size);
    std::vector<Real<T>> rwork(std::max<lapack_int>(lrwork, 1));
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w, work.data(), &lwork, rwork.data(),
                &lrwork, iwork.data(), &liwork, &status);
  } else {
    Api<T>::evd(&jobz, &uplo, &n, dense.data(), &n, w, work.data(), &lwork, iwork.data(),
                &liwork, &status);
  }
  if (vectors) Scatter(dense, a);
  *info = status;
  return Status::Ok();
}

#define JAXMG_INSTANTIATE(T)                                                       \
  template Status Potrs<T>(const BlockCyclicMatrix<T>&, T*, int64_t, int32_t*);    \
  template Status Potri<T>(const BlockCyclicMatrix<T>&, int32_t*);                 \
  template Status Potrf<T>(const BlockCyclicMatrix<T>&, int32_t*);                 \
  template Status CholSolve<T>(const BlockCyclicMatrix<T>&, T*, int64_t);          \
  template Status Getrf<T>(const BlockCyclicMatrix<T>&, int32_t*, int32_t*);       \
  template Status Getrs<T>(const BlockCyclicMatrix<T>&, const int32_t*, char, T*,  \
                           int64_t);                                               \
  template Status Syevd<T>(const BlockCyclicMatrix<T>&, Real<T>*, bool, int32_t*);
JAXMG_INSTANTIATE(float)
JAXMG_INSTANTIATE(double)
JAXMG_INSTANTIATE(std::complex<float>)
JAXMG_INSTANTIATE(std::complex<double>)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::lapack
