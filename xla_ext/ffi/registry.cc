#include "xla_ext/ffi/registry.h"

namespace jaxmg {
namespace {

using engines::Routine;

#define JAXMG_ENTRY(e, routine, prefix, name, T, Target, engine, platform, infix, suffix)    \
  FfiTarget{"jaxmg_" #prefix infix #routine suffix, platform,                                 \
            reinterpret_cast<void*>(&ffi_layer::Target<Routine::e, T>), engine, #routine, #name},
#define JAXMG_ENTRIES(prefix, name, T, ROUTINES, ...) ROUTINES(JAXMG_ENTRY, prefix, name, T, __VA_ARGS__)

}  // namespace

const std::vector<FfiTarget>& FfiTargets() {
  static const std::vector<FfiTarget>* targets = new std::vector<FfiTarget>{
      JAXMG_FOR_EACH_DTYPE(JAXMG_ENTRIES, JAXMG_LAPACK_ROUTINES, LapackTarget, "lapack", "cpu", "", "_cpu")
      JAXMG_FOR_EACH_DTYPE(JAXMG_ENTRIES, JAXMG_MG_ROUTINES, MgTarget, "mg", "CUDA", "", "_cuda")
      JAXMG_FOR_EACH_DTYPE(JAXMG_ENTRIES, JAXMG_MP_ROUTINES, MpTarget, "mp", "CUDA", "mp_", "_cuda")
      JAXMG_FOR_EACH_FLOAT64_DTYPE(JAXMG_ENTRIES, JAXMG_DN_ROUTINES, DnTarget, "dn", "CUDA", "dn_",
                                   "_cuda")
  };
  return *targets;
}

}  // namespace jaxmg
