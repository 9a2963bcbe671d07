// LAPACK entry points for the CPU engine. The library does not link a LAPACK:
// Python hands over the function pointers that SciPy exports (the same LAPACK
// jaxlib itself uses), so the shared object loads on any machine.
#ifndef JAXMG_XLA_EXT_ENGINES_LAPACK_LAPACK_H_
#define JAXMG_XLA_EXT_ENGINES_LAPACK_LAPACK_H_

#include <complex>

#include "xla_ext/common/scalar.h"
#include "xla_ext/common/status.h"

namespace jaxmg::lapack {

using lapack_int = int;

template <typename T>
struct Api {
  using Potrf = void(char* uplo, lapack_int* n, T* a, lapack_int* lda, lapack_int* info);
  using Potrs = void(char* uplo, lapack_int* n, lapack_int* nrhs, T* a, lapack_int* lda, T* b,
                     lapack_int* ldb, lapack_int* info);
  using Potri = void(char* uplo, lapack_int* n, T* a, lapack_int* lda, lapack_int* info);
  using Getrf = void(lapack_int* m, lapack_int* n, T* a, lapack_int* lda, lapack_int* ipiv,
                     lapack_int* info);
  using Getrs = void(char* trans, lapack_int* n, lapack_int* nrhs, T* a, lapack_int* lda,
                     lapack_int* ipiv, T* b, lapack_int* ldb, lapack_int* info);
  // ?syevd for real T, ?heevd for complex T (which adds rwork/lrwork).
  using RealEvd = void(char* jobz, char* uplo, lapack_int* n, T* a, lapack_int* lda, T* w,
                       T* work, lapack_int* lwork, lapack_int* iwork, lapack_int* liwork,
                       lapack_int* info);
  using ComplexEvd = void(char* jobz, char* uplo, lapack_int* n, T* a, lapack_int* lda,
                          Real<T>* w, T* work, lapack_int* lwork, Real<T>* rwork,
                          lapack_int* lrwork, lapack_int* iwork, lapack_int* liwork,
                          lapack_int* info);
  using Evd = std::conditional_t<kIsComplex<T>, ComplexEvd, RealEvd>;

  static inline Potrf* potrf = nullptr;
  static inline Potrs* potrs = nullptr;
  static inline Potri* potri = nullptr;
  static inline Getrf* getrf = nullptr;
  static inline Getrs* getrs = nullptr;
  static inline Evd* evd = nullptr;
};

// Registers one routine by its LAPACK name ("dpotrf", "zheevd", ...).
// Returns false for a name this library does not use.
bool Register(const char* name, void* fn);

// Fails with a message naming the routine when Python has not registered it.
inline Status Require(const char* routine, const void* fn) {
  if (fn == nullptr) {
    return Errorf("jaxmg: LAPACK routine ", routine,
                  " is not registered; import jaxmg (it registers SciPy's LAPACK) before running"
                  " a compiled jaxmg program");
  }
  return Status::Ok();
}

}  // namespace jaxmg::lapack

#endif  // JAXMG_XLA_EXT_ENGINES_LAPACK_LAPACK_H_
