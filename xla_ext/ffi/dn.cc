// Platform "CUDA" for cuSOLVER's one-GPU engine: the call runs on the GPU
// whose stream XLA hands it, over its own buffers; no meeting. Buffers are
// read column-major: the Python side passes A^T and B^T (jaxmg/_src/mixed/irs.py).
#include <memory>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/engines/dn/engine.h"
#include "xla_ext/ffi/device_matrix.h"
#include "xla_ext/ffi/handler.h"
#include "xla_ext/ffi/registry.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::ffi_layer {
namespace {

using engines::kA;
using engines::kB;
using engines::kInfo;
using engines::kIterations;
using engines::kX;

const Signature& OneDeviceSignature(Routine routine) {
  static const Signature kIrsGesv{{kA, kB}, {kA, kX, kInfo, kIterations}};
  static const Signature kNone{};
  return routine == Routine::kIrsGesv ? kIrsGesv : kNone;
}

Status Shape(Routine routine, const Operands& ops, const engines::Refinement& refinement,
             Call* call) {
  const ffi::Span<const int64_t> a = ops.dims[kA];
  const ffi::Span<const int64_t> b = ops.dims[kB];
  if (a.size() != 2 || a[0] != a[1]) {
    return Errorf("jaxmg: irsgesv needs a square (N, N) a, got ", Dims(a));
  }
  if (b.size() != 2 || b[1] != a[0]) {
    return Errorf("jaxmg: irsgesv takes b transposed, (K, ", a[0], "), got ", Dims(b));
  }
  if (ops.count(kX) != ops.count(kB)) {
    return Errorf("jaxmg: irsgesv: x ", Dims(ops.dims[kX]), " must have b's shape ", Dims(b));
  }
  *call = Call{};
  call->routine = routine;
  call->m = call->n = a[0];
  call->k = b[0];
  call->rows_b = a[0];
  call->refinement = refinement;
  return Status::Ok();
}

template <Routine R, ffi::DataType DT>
ffi::Error OneDevice(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator& scratch,
                     ffi::RemainingArgs args, ffi::RemainingRets rets,
                     const engines::Refinement& refinement) {
  using T = ffi::NativeType<DT>;
  if (!cuda::Loaded()) {
    return ToFfi(Status::Error("jaxmg: the CUDA libraries are not loaded; jaxmg loads them when "
                               "it registers its CUDA targets (import jaxmg and call it normally)"));
  }
  Operands ops;
  Call call;
  Status s = Decode<DT>(R, OneDeviceSignature(R), args, rets, &ops);
  if (s.ok()) s = Shape(R, ops, refinement, &call);
  if (!s.ok()) return ToFfi(s);
  dn::DnEngine<T> engine(ordinal, stream);
  size_t bytes = 0;
  s = engine.WorkspaceBytes(call, 0, ops.buffers[kA].data, &bytes);
  if (s.ok() && bytes > 0) {
    ops.buffers[engines::kWork] = {nullptr, bytes, false, false};
    s = ScratchWorkspace(scratch, bytes, "cuSOLVER workspace", &ops.buffers[engines::kWork].data);
  }
  if (!s.ok()) return ToFfi(s);
  s = CopyOperandIntoResult(ops, stream);
  if (!s.ok()) return ToFfi(s);
  return ToFfi(engines::Run<T>(engine, call, {engines::Part<T>{&ops.buffers}}));
}

}  // namespace

template <engines::Routine R, typename T>
XLA_FFI_Error* DnTarget(XLA_FFI_CallFrame* frame) {
  static auto* handler =
      ffi::Ffi::Bind()
          .Ctx<ffi::PlatformStream<cudaStream_t>>()
          .Ctx<ffi::DeviceOrdinal>()
          .Ctx<ffi::ScratchAllocator>()
          .RemainingArgs()
          .RemainingRets()
          .Attr<engines::LowPrecision>("lowest")
          .Attr<engines::Refiner>("refiner")
          .Attr<int64_t>("max_iterations")
          .To([](cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                 ffi::RemainingArgs args, ffi::RemainingRets rets, engines::LowPrecision lowest,
                 engines::Refiner refiner, int64_t max_iterations) {
            engines::Refinement refinement{lowest, refiner, static_cast<int32_t>(max_iterations)};
            return OneDevice<R, FfiType<T>::kValue>(stream, ordinal, scratch, args, rets,
                                                    refinement);
          })
          .release();
  return handler->Call(frame);
}

#define JAXMG_INSTANTIATE_DN(e, routine, Target, T) \
  template XLA_FFI_Error* Target<::jaxmg::engines::Routine::e, T>(XLA_FFI_CallFrame*);
JAXMG_DN_ROUTINES(JAXMG_INSTANTIATE_DN, DnTarget, double)
JAXMG_DN_ROUTINES(JAXMG_INSTANTIATE_DN, DnTarget, std::complex<double>)
#undef JAXMG_INSTANTIATE_DN

}  // namespace jaxmg::ffi_layer
