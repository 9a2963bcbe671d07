// The one list of jaxmg's FFI targets: every (engine, routine, dtype) the
// library defines, with its name and handler. The Python loader iterates it
// (jaxmg_targets in exports.cc); a project that links the handlers into a
// library of its own registers them from FfiTargets().
//
// Target names: jaxmg_<s|d|c|z><routine>_cpu (LAPACK), _cuda (cuSOLVERMg),
// jaxmg_<s|d|c|z>mp_<routine>_cuda (cuSOLVERMp), jaxmg_<d|z>dn_<routine>_cuda
// (cuSOLVER on one GPU).
#ifndef JAXMG_XLA_EXT_FFI_REGISTRY_H_
#define JAXMG_XLA_EXT_FFI_REGISTRY_H_

#include <complex>
#include <vector>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"
#include "xla_ext/common/dtypes.h"
#include "xla_ext/engines/engine.h"

namespace jaxmg {

struct FfiTarget {
  const char* name;
  const char* platform;  // XLA's platform name: "cpu" or "CUDA"
  void* handler;         // an XLA_FFI_Handler*
  const char* engine;    // "lapack", "mg", "mp" or "dn"
  const char* routine;   // engines::RoutineName
  const char* dtype;     // NumPy's name
};

const std::vector<FfiTarget>& FfiTargets();

namespace ffi_layer {

// The routines each engine offers: X(enumerator, name, ...).
#define JAXMG_LAPACK_ROUTINES(X, ...)                                                   \
  X(kPotrs, potrs, __VA_ARGS__) X(kPotrf, potrf, __VA_ARGS__)                           \
  X(kCholSolve, cholsolve, __VA_ARGS__) X(kGetrf, getrf, __VA_ARGS__)                   \
  X(kLuSolve, lusolve, __VA_ARGS__) X(kPotri, potri, __VA_ARGS__)                       \
  X(kSyevd, syevd, __VA_ARGS__) X(kRelayout, layout, __VA_ARGS__)
#define JAXMG_MG_ROUTINES(X, ...)                                                       \
  X(kPotrs, potrs, __VA_ARGS__) X(kPotrf, potrf, __VA_ARGS__)                           \
  X(kCholSolve, cholsolve, __VA_ARGS__) X(kGetrf, getrf, __VA_ARGS__)                   \
  X(kLuSolve, lusolve, __VA_ARGS__) X(kPotri, potri, __VA_ARGS__)                       \
  X(kSyevd, syevd, __VA_ARGS__)
#define JAXMG_MP_ROUTINES(X, ...)                                                       \
  X(kPotrf, potrf, __VA_ARGS__) X(kCholSolve, cholsolve, __VA_ARGS__)                   \
  X(kGetrf, getrf, __VA_ARGS__) X(kLuSolve, lusolve, __VA_ARGS__)                       \
  X(kSyevd, syevd, __VA_ARGS__) X(kQr, qr, __VA_ARGS__)
#define JAXMG_DN_ROUTINES(X, ...) X(kIrsGesv, irsgesv, __VA_ARGS__)

template <typename T>
struct FfiType;
#define JAXMG_FFI_TYPE(T, DT) \
  template <>                 \
  struct FfiType<T> {         \
    static constexpr ::xla::ffi::DataType kValue = ::xla::ffi::DataType::DT; \
  };
JAXMG_FFI_TYPE(float, F32)
JAXMG_FFI_TYPE(double, F64)
JAXMG_FFI_TYPE(std::complex<float>, C64)
JAXMG_FFI_TYPE(std::complex<double>, C128)
#undef JAXMG_FFI_TYPE

// The handlers; each platform's file defines its engine's.
template <engines::Routine R, typename T>
XLA_FFI_Error* LapackTarget(XLA_FFI_CallFrame* frame);
template <engines::Routine R, typename T>
XLA_FFI_Error* MgTarget(XLA_FFI_CallFrame* frame);
template <engines::Routine R, typename T>
XLA_FFI_Error* MpTarget(XLA_FFI_CallFrame* frame);
template <engines::Routine R, typename T>
XLA_FFI_Error* DnTarget(XLA_FFI_CallFrame* frame);  // float64 and complex128 only

// Instantiates Target<R, T> for every routine of ROUTINES and every dtype.
#define JAXMG_INSTANTIATE_ROUTINE(e, routine, Target, T) \
  template XLA_FFI_Error* Target<::jaxmg::engines::Routine::e, T>(XLA_FFI_CallFrame*);
#define JAXMG_INSTANTIATE_DTYPE(prefix, name, T, Target, ROUTINES) \
  ROUTINES(JAXMG_INSTANTIATE_ROUTINE, Target, T)
#define JAXMG_INSTANTIATE_TARGETS(Target, ROUTINES) \
  JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE_DTYPE, Target, ROUTINES)

}  // namespace ffi_layer
}  // namespace jaxmg

#endif  // JAXMG_XLA_EXT_FFI_REGISTRY_H_
