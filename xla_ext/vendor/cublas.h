// Typed cuBLAS calls for jaxmg's element types: each routine family is one
// template, and each dtype one line naming its entry points.
#ifndef JAXMG_XLA_EXT_VENDOR_CUBLAS_H_
#define JAXMG_XLA_EXT_VENDOR_CUBLAS_H_

#include <complex>

#include "xla_ext/common/scalar.h"
#include "xla_ext/common/status.h"
#include "xla_ext/vendor/cuda.h"
#include "xla_ext/vendor/cuda_types.h"

namespace jaxmg::cublas {

template <typename T>
struct Entry;
// X: the letter of T's routines; XR: that of its absolute-sum routine.
#define JAXMG_CUBLAS_ENTRY(T, X, XR)                                  \
  template <>                                                         \
  struct Entry<T> {                                                   \
    static constexpr auto kGeam = &cuda::Api::cublas##X##geam;        \
    static constexpr auto kGemm = &cuda::Api::cublas##X##gemm_v2;     \
    static constexpr auto kTrsm = &cuda::Api::cublas##X##trsm_v2;     \
    static constexpr auto kSwap = &cuda::Api::cublas##X##swap_v2;     \
    static constexpr auto kAsum = &cuda::Api::cublas##XR##asum_v2;    \
  };
JAXMG_CUBLAS_ENTRY(float, S, S)
JAXMG_CUBLAS_ENTRY(double, D, D)
JAXMG_CUBLAS_ENTRY(std::complex<float>, C, Sc)
JAXMG_CUBLAS_ENTRY(std::complex<double>, Z, Dz)
#undef JAXMG_CUBLAS_ENTRY

template <typename T>
using Raw = typename cuda::TypeOf<T>::Blas;
template <typename T>
const Raw<T>* R(const T* p) { return reinterpret_cast<const Raw<T>*>(p); }
template <typename T>
Raw<T>* R(T* p) { return reinterpret_cast<Raw<T>*>(p); }

// C = alpha op_a(A) + beta op_b(B) (m x n).
template <typename T>
Status Geam(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n,
            T alpha, const T* a, int lda, T beta, const T* b, int ldb, T* c, int ldc) {
  JAXMG_CUBLAS((cuda::api().*Entry<T>::kGeam)(h, op_a, op_b, m, n, R(&alpha), R(a), lda,
                                              R(&beta), R(b), ldb, R(c), ldc));
  return Status::Ok();
}

// C = alpha op_a(A) op_b(B) + beta C (m x n, inner k).
template <typename T>
Status Gemm(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n,
            int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  JAXMG_CUBLAS((cuda::api().*Entry<T>::kGemm)(h, op_a, op_b, m, n, k, R(&alpha), R(a), lda, R(b),
                                              ldb, R(&beta), R(c), ldc));
  return Status::Ok();
}

// B = op(A)^-1 B from the left, A triangular (m x m), B m x n.
template <typename T>
Status Trsm(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t op, cublasDiagType_t diag,
            int m, int n, const T* a, int lda, T* b, int ldb) {
  const T one(1);
  JAXMG_CUBLAS((cuda::api().*Entry<T>::kTrsm)(h, CUBLAS_SIDE_LEFT, uplo, op, diag, m, n, R(&one),
                                              R(a), lda, R(b), ldb));
  return Status::Ok();
}

// Swaps the n-element strided vectors x and y.
template <typename T>
Status Swap(cublasHandle_t h, int n, T* x, int incx, T* y, int incy) {
  JAXMG_CUBLAS((cuda::api().*Entry<T>::kSwap)(h, n, R(x), incx, R(y), incy));
  return Status::Ok();
}

// The sum of |re| + |im| over n elements (NaN or Inf if one of them is).
template <typename T>
Status Asum(cublasHandle_t h, int n, const T* x, Real<T>* result) {
  JAXMG_CUBLAS((cuda::api().*Entry<T>::kAsum)(h, n, R(x), 1, result));
  return Status::Ok();
}

}  // namespace jaxmg::cublas

#endif  // JAXMG_XLA_EXT_VENDOR_CUBLAS_H_
