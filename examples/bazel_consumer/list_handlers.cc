// Lists jaxmg's FFI handlers as a program that links them sees them (a JAX
// fork's extension library would register each with XLA under its name), and
// asks every handler for the XLA FFI API version it was built against.
#include <cstdio>

#include "xla/ffi/api/c_api.h"
#include "xla_ext/ffi/registry.h"

namespace {

// A call frame carrying only the metadata extension: the handler fills in its
// API version and traits and returns without reading arguments.
bool ApiVersion(XLA_FFI_Handler* handler, int* major, int* minor) {
  XLA_FFI_Metadata metadata = {};
  metadata.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  XLA_FFI_Metadata_Extension extension = {};
  extension.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  extension.extension_base.type = XLA_FFI_Extension_Metadata;
  extension.metadata = &metadata;
  XLA_FFI_CallFrame frame = {};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.extension_start = &extension.extension_base;
  if (handler(&frame) != nullptr) return false;
  *major = metadata.api_version.major_version;
  *minor = metadata.api_version.minor_version;
  return true;
}

}  // namespace

int main() {
  int failed = 0;
  for (const jaxmg::FfiTarget& target : jaxmg::FfiTargets()) {
    int major = -1, minor = -1;
    if (!ApiVersion(reinterpret_cast<XLA_FFI_Handler*>(target.handler), &major, &minor)) {
      std::printf("%s %s FAILED: no metadata\n", target.name, target.platform);
      ++failed;
      continue;
    }
    std::printf("%s %s api=%d.%d\n", target.name, target.platform, major, minor);
  }
  return failed == 0 && !jaxmg::FfiTargets().empty() ? 0 : 1;
}
