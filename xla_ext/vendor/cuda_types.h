// CUDA's tags for jaxmg's element types: one line per dtype.
#ifndef JAXMG_XLA_EXT_VENDOR_CUDA_TYPES_H_
#define JAXMG_XLA_EXT_VENDOR_CUDA_TYPES_H_

#include <complex>

#include "xla_ext/vendor/cuda.h"

namespace jaxmg::cuda {

template <typename T>
struct TypeOf;
#define JAXMG_CUDA_TYPE(T, tag, Raw)                 \
  template <>                                        \
  struct TypeOf<T> {                                 \
    static constexpr cudaDataType kTag = tag;        \
    using Blas = Raw; /* cuBLAS's name for T */      \
  };
JAXMG_CUDA_TYPE(float, CUDA_R_32F, float)
JAXMG_CUDA_TYPE(double, CUDA_R_64F, double)
JAXMG_CUDA_TYPE(std::complex<float>, CUDA_C_32F, cuComplex)
JAXMG_CUDA_TYPE(std::complex<double>, CUDA_C_64F, cuDoubleComplex)
#undef JAXMG_CUDA_TYPE

template <typename T>
constexpr cudaDataType kType = TypeOf<T>::kTag;

}  // namespace jaxmg::cuda

#endif  // JAXMG_XLA_EXT_VENDOR_CUDA_TYPES_H_
