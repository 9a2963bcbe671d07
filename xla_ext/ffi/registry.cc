#include "xla_ext/ffi/registry.h"

#include "xla/ffi/api/c_api.h"

#define JAXMG_EACH_DTYPE(X, routine) X(s##routine) X(d##routine) X(c##routine) X(z##routine)
#define JAXMG_CPU_HANDLERS(X)                                                             \
  JAXMG_EACH_DTYPE(X, potrs_cpu) JAXMG_EACH_DTYPE(X, potri_cpu)                           \
  JAXMG_EACH_DTYPE(X, syevd_cpu) JAXMG_EACH_DTYPE(X, potrf_cpu)                           \
  JAXMG_EACH_DTYPE(X, cholsolve_cpu) JAXMG_EACH_DTYPE(X, getrf_cpu)                       \
  JAXMG_EACH_DTYPE(X, lusolve_cpu) X(layout_cpu)
#define JAXMG_CUDA_HANDLERS(X)                                                            \
  JAXMG_EACH_DTYPE(X, potrs_cuda) JAXMG_EACH_DTYPE(X, potri_cuda)                         \
  JAXMG_EACH_DTYPE(X, syevd_cuda) JAXMG_EACH_DTYPE(X, potrf_cuda)                         \
  JAXMG_EACH_DTYPE(X, cholsolve_cuda) JAXMG_EACH_DTYPE(X, getrf_cuda)                     \
  JAXMG_EACH_DTYPE(X, lusolve_cuda) JAXMG_EACH_DTYPE(X, mp_potrf_cuda)                    \
  JAXMG_EACH_DTYPE(X, mp_potrs_cuda) JAXMG_EACH_DTYPE(X, mp_getrf_cuda)                   \
  JAXMG_EACH_DTYPE(X, mp_getrs_cuda) JAXMG_EACH_DTYPE(X, mp_syevd_cuda)                   \
  JAXMG_EACH_DTYPE(X, mp_qr_cuda)

#define JAXMG_DECLARE(name) XLA_FFI_Error* jaxmg_##name(XLA_FFI_CallFrame* call_frame);
extern "C" {
JAXMG_CPU_HANDLERS(JAXMG_DECLARE)
JAXMG_CUDA_HANDLERS(JAXMG_DECLARE)
}

namespace jaxmg {

const std::vector<FfiTarget>& FfiTargets() {
#define JAXMG_CPU_ENTRY(name) {"jaxmg_" #name, "cpu", reinterpret_cast<void*>(&jaxmg_##name)},
#define JAXMG_CUDA_ENTRY(name) {"jaxmg_" #name, "CUDA", reinterpret_cast<void*>(&jaxmg_##name)},
  static const std::vector<FfiTarget> targets = {
      JAXMG_CPU_HANDLERS(JAXMG_CPU_ENTRY) JAXMG_CUDA_HANDLERS(JAXMG_CUDA_ENTRY)};
  return targets;
}

}  // namespace jaxmg
