// The element types every routine handles: the one list of the C++ side.
// Each layer that needs a tag of its own for a type maps it in one line
// (vendor/cuda_types.h, ffi/registry.h).
#ifndef JAXMG_XLA_EXT_COMMON_DTYPES_H_
#define JAXMG_XLA_EXT_COMMON_DTYPES_H_

#include <complex>

// X(prefix, name, C++ type, ...): the prefix is the LAPACK letter that names
// targets, the name is NumPy's; extra arguments are passed on to X.
#define JAXMG_FOR_EACH_DTYPE(X, ...)                   \
  X(s, float32, float, __VA_ARGS__)                    \
  X(d, float64, double, __VA_ARGS__)                   \
  X(c, complex64, std::complex<float>, __VA_ARGS__)    \
  X(z, complex128, std::complex<double>, __VA_ARGS__)

// The 64-bit ones: the routines that refine to float64 accuracy take only these.
#define JAXMG_FOR_EACH_FLOAT64_DTYPE(X, ...)           \
  X(d, float64, double, __VA_ARGS__)                   \
  X(z, complex128, std::complex<double>, __VA_ARGS__)

#endif  // JAXMG_XLA_EXT_COMMON_DTYPES_H_
