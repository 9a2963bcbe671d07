// Every FFI handler of jaxmg, for a program or library that links them
// (//xla_ext:handlers) and registers them with XLA itself.
#ifndef JAXMG_XLA_EXT_FFI_REGISTRY_H_
#define JAXMG_XLA_EXT_FFI_REGISTRY_H_

#include <vector>

namespace jaxmg {

struct FfiTarget {
  const char* name;      // the custom-call target name, jaxmg_<s|d|c|z><routine>_<platform>
  const char* platform;  // "cpu" or "CUDA", as XLA names them
  void* handler;         // an XLA_FFI_Handler*
};

const std::vector<FfiTarget>& FfiTargets();

}  // namespace jaxmg

#endif  // JAXMG_XLA_EXT_FFI_REGISTRY_H_
