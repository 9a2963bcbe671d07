// Platform "CUDA" for the cuSOLVERMp engine: each rank's handler runs the
// routine on its own block; NCCL carries the rest, so no rendezvous is needed
// and ranks may live in any process. Every block is read column-major: a
// rank's (N / grid cols, M / grid rows) row-major block is its local matrix of
// the M x N matrix, block-cyclic on the grid, which the Python side arranges
// (every rank holds the same number of whole blocks).
#include <memory>
#include <string>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/engines/mp/engine.h"
#include "xla_ext/ffi/device_matrix.h"
#include "xla_ext/ffi/handler.h"
#include "xla_ext/ffi/registry.h"
#include "xla_ext/vendor/cusolvermp.h"

namespace jaxmg::ffi_layer {
namespace {

class Mp {
 public:
  Mp(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator& scratch)
      : stream_(stream), ordinal_(ordinal), scratch_(scratch) {}

  template <typename T>
  Status MakeEngine(const Grid& g, std::unique_ptr<engines::Engine<T>>* out) {
    if (!cusolvermp::Loaded()) {
      return Status::Error("jaxmg: cuSOLVERMp is not loaded; jaxmg loads it when a call first "
                           "asks for backend='mp'");
    }
    mp::GroupSpec spec;
    spec.id = std::string(g.group);
    spec.n_ranks = static_cast<int32_t>(g.n_ranks);
    spec.local_ranks.assign(g.local_ranks.begin(), g.local_ranks.end());
    spec.local_devices.assign(g.local_devices.begin(), g.local_devices.end());
    mp::Rank* rank = nullptr;
    JAXMG_RETURN_IF_ERROR(mp::GetRank(spec, ordinal_, stream_, &rank));
    mp::Grid grid;
    JAXMG_RETURN_IF_ERROR(
        mp::GridOf(*rank, static_cast<int32_t>(g.rows), static_cast<int32_t>(g.cols), &grid));
    ffi::ScratchAllocator* scratch = &scratch_;
    mp::Allocator alloc = [scratch](size_t bytes, void** p) -> Status {
      return ScratchWorkspace(*scratch, bytes, "cuSOLVERMp workspace", p);
    };
    *out = std::make_unique<mp::MpEngine<T>>(*rank, grid, stream_, std::move(alloc));
    return Status::Ok();
  }

  Status Ready(const Operands& ops) { return CopyOperandIntoResult(ops, stream_); }

 private:
  cudaStream_t stream_;
  int32_t ordinal_;
  ffi::ScratchAllocator& scratch_;
};

}  // namespace

template <engines::Routine R, typename T>
XLA_FFI_Error* MpTarget(XLA_FFI_CallFrame* frame) {
  static auto* handler =
      ffi::Ffi::Bind()
          .Ctx<ffi::PlatformStream<cudaStream_t>>()
          .Ctx<ffi::DeviceOrdinal>()
          .Ctx<ffi::ScratchAllocator>()
          .RemainingArgs()
          .RemainingRets()
          .Attr<Grid>("grid")
          .To([](cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                 ffi::RemainingArgs args, ffi::RemainingRets rets, Grid grid) {
            Mp mp(stream, ordinal, scratch);
            return PerRank<Mp, R, FfiType<T>::kValue>(mp, args, rets, grid);
          })
          .release();
  return handler->Call(frame);
}

JAXMG_INSTANTIATE_TARGETS(MpTarget, JAXMG_MP_ROUTINES)

}  // namespace jaxmg::ffi_layer
