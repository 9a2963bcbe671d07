#include "xla_ext/ffi/device_matrix.h"

namespace jaxmg::ffi_layer {

Status CopyOperandIntoResult(const Operands& ops, cudaStream_t stream) {
  const rendezvous::Buffer& a = ops.buffers[engines::kA];
  if (ops.a_in == nullptr || ops.a_in == a.data) return Status::Ok();
  JAXMG_CUDA(cuda::api().cudaMemcpyAsync(a.data, ops.a_in, a.bytes, cudaMemcpyDeviceToDevice,
                                         stream));
  return Status::Ok();
}

}  // namespace jaxmg::ffi_layer
