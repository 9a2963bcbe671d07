// The GPU platforms' one step before an engine overwrites the matrix: its
// result buffer starts as the operand, which XLA aliases with it unless it
// chose to copy (then the operand is copied in on the call's stream).
#ifndef JAXMG_XLA_EXT_FFI_DEVICE_MATRIX_H_
#define JAXMG_XLA_EXT_FFI_DEVICE_MATRIX_H_

#include "xla_ext/ffi/handler.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::ffi_layer {

Status CopyOperandIntoResult(const Operands& ops, cudaStream_t stream);

}  // namespace jaxmg::ffi_layer

#endif  // JAXMG_XLA_EXT_FFI_DEVICE_MATRIX_H_
