// The typed attributes of jaxmg's targets, decoded by XLA from dictionaries
// that jaxmg/_src/collective.py and engines/mp.py build.
#ifndef JAXMG_XLA_EXT_FFI_ATTRIBUTES_H_
#define JAXMG_XLA_EXT_FFI_ATTRIBUTES_H_

#include <cstdint>
#include <string_view>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/engines/engine.h"

namespace jaxmg::ffi_layer {

// Which collective call a participant belongs to (leader engines).
struct CallSite {
  int64_t n_devices;   // participants
  int64_t tile;        // T_A
  int64_t call_id;     // one per call site of a traced program
  int64_t timeout_ms;  // how long a participant waits for the others
};

// Routine options; a routine reads the ones it has.
struct Options {
  bool b_sharded;          // B's rows are split over the participants
  engines::Trans trans;    // lusolve's op(A)
  bool vectors;            // syevd: also the eigenvectors
  bool to_block_cyclic;    // layout: the direction
};

// The communicator and grid of a per-rank (cuSOLVERMp) call.
struct Grid {
  std::string_view group;  // NCCL unique id, 256 hex digits
  int64_t n_ranks;
  ::xla::ffi::Span<const int64_t> local_ranks;    // the ranks this process hosts
  ::xla::ffi::Span<const int64_t> local_devices;  // their CUDA ordinals
  int64_t block;
  int64_t rows;  // of the process grid
  int64_t cols;
};

}  // namespace jaxmg::ffi_layer

XLA_FFI_REGISTER_ENUM_ATTR_DECODING(::jaxmg::engines::Trans);
XLA_FFI_REGISTER_ENUM_ATTR_DECODING(::jaxmg::engines::LowPrecision);
XLA_FFI_REGISTER_ENUM_ATTR_DECODING(::jaxmg::engines::Refiner);

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jaxmg::ffi_layer::CallSite,
                                      ::xla::ffi::StructMember<int64_t>("n_devices"),
                                      ::xla::ffi::StructMember<int64_t>("tile"),
                                      ::xla::ffi::StructMember<int64_t>("call_id"),
                                      ::xla::ffi::StructMember<int64_t>("timeout_ms"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jaxmg::ffi_layer::Options,
                                      ::xla::ffi::StructMember<bool>("b_sharded"),
                                      ::xla::ffi::StructMember<::jaxmg::engines::Trans>("trans"),
                                      ::xla::ffi::StructMember<bool>("vectors"),
                                      ::xla::ffi::StructMember<bool>("to_block_cyclic"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    ::jaxmg::ffi_layer::Grid, ::xla::ffi::StructMember<std::string_view>("group"),
    ::xla::ffi::StructMember<int64_t>("n_ranks"),
    ::xla::ffi::StructMember<::xla::ffi::Span<const int64_t>>("local_ranks"),
    ::xla::ffi::StructMember<::xla::ffi::Span<const int64_t>>("local_devices"),
    ::xla::ffi::StructMember<int64_t>("block"), ::xla::ffi::StructMember<int64_t>("rows"),
    ::xla::ffi::StructMember<int64_t>("cols"));

#endif  // JAXMG_XLA_EXT_FFI_ATTRIBUTES_H_
