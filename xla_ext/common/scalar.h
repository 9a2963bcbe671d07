// Element types handled by every routine, and the few per-type helpers the
// layers share.
#ifndef JAXMG_XLA_EXT_COMMON_SCALAR_H_
#define JAXMG_XLA_EXT_COMMON_SCALAR_H_

#include <cmath>
#include <complex>
#include <limits>
#include <type_traits>

namespace jaxmg {

template <typename T>
struct RealOf {
  using type = T;
};
template <typename T>
struct RealOf<std::complex<T>> {
  using type = T;
};
template <typename T>
using Real = typename RealOf<T>::type;

template <typename T>
constexpr bool kIsComplex = !std::is_same_v<T, Real<T>>;

template <typename T>
T Conj(T x) {
  if constexpr (kIsComplex<T>) {
    return std::conj(x);
  } else {
    return x;
  }
}

// Neither part NaN nor infinite.
template <typename T>
bool IsFinite(const T& x) {
  if constexpr (kIsComplex<T>) {
    return std::isfinite(x.real()) && std::isfinite(x.imag());
  } else {
    return std::isfinite(x);
  }
}

template <typename T>
T QuietNaN() {
  const Real<T> nan = std::numeric_limits<Real<T>>::quiet_NaN();
  if constexpr (kIsComplex<T>) {
    return T(nan, nan);
  } else {
    return nan;
  }
}

}  // namespace jaxmg

#endif  // JAXMG_XLA_EXT_COMMON_SCALAR_H_
