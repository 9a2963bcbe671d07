// Platform "CUDA" for the cuSOLVERMg engine: one process with an XLA thread
// per GPU, or one process per GPU. A participant finds its place from its
// own GPU in the call's device list (`device_ids`, the mesh's CUDA ordinals
// in axis order), takes its workspace from XLA's allocator on its GPU, waits
// for its stream and meets the others; the leader then drives cuSOLVERMg
// over every participant's buffers. A call traced without its mesh's devices
// (under jit on an abstract mesh, no concrete mesh in context) comes with an
// empty list: in one process the participants then read their positions on the
// axis (the last operand) and exchange their GPUs' numbers first.
#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/engines/mg/context.h"
#include "xla_ext/engines/mg/engine.h"
#include "xla_ext/ffi/device_matrix.h"
#include "xla_ext/ffi/handler.h"
#include "xla_ext/ffi/registry.h"
#include "xla_ext/rendezvous/ipc_transport.h"
#include "xla_ext/rendezvous/rendezvous.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::ffi_layer {
namespace {

class Cuda {
 public:
  Cuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator& scratch,
       ffi::Span<const int64_t> device_ids, const void* position)
      : stream_(stream), ordinal_(ordinal), scratch_(scratch),
        devices_(device_ids.begin(), device_ids.end()), position_(position) {}

  Status Join(const CallSite& site, int* index) {
    if (!cuda::Loaded()) {
      return Status::Error("jaxmg: the CUDA libraries are not loaded; jaxmg loads them when it "
                           "registers its CUDA targets (import jaxmg and call it normally)");
    }
    ipc_ = processes::CallProcesses(site.call_id, &owners_);
    if (devices_.empty() && !ipc_) JAXMG_RETURN_IF_ERROR(ExchangeDevices(site));
    if (static_cast<int64_t>(devices_.size()) != site.n_devices) {
      return Errorf("jaxmg: device_ids names ", devices_.size(), " GPUs for ", site.n_devices,
                    " participants");
    }
    *index = -1;
    if (ipc_) {
      // One process per GPU: a process's place is its rank's (the same GPU may
      // serve several processes).
      auto it = std::find(owners_.begin(), owners_.end(), processes::ProcessIndex());
      if (it != owners_.end() && devices_.size() == owners_.size()) *index = it - owners_.begin();
    } else {
      for (size_t i = 0; i < devices_.size(); ++i) {
        if (devices_[i] == ordinal_) *index = static_cast<int>(i);
      }
    }
    if (*index < 0 || devices_[*index] != ordinal_) {
      return Errorf("jaxmg: GPU ", ordinal_, " runs a jaxmg call but is not in its device list");
    }
    index_ = *index;
    return mg::Context::Get(devices_, &ctx_);
  }

  template <typename T>
  std::unique_ptr<engines::Engine<T>> MakeEngine() {
    return std::make_unique<mg::MgEngine<T>>(*ctx_, ipc_);
  }

  Status Workspace(size_t bytes, void** out) {
    // XLA's FFI allocator accepts alignments up to 16; its blocks are in fact
    // aligned far more.
    return ScratchWorkspace(scratch_, std::max<size_t>(bytes, 256), "workspace", out);
  }

  // The leader reads every participant's buffers once all have arrived, so
  // each waits for its stream first.
  Status Ready(const Operands& ops) {
    const Status copied = CopyOperandIntoResult(ops, stream_);
    if (!copied.ok()) return copied;
    JAXMG_CUDA(cuda::api().cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  // Across processes the buffers travel through CUDA IPC. A leader whose mesh
  // has GPUs besides its own works from its staging copy too: XLA gives a
  // process's other GPUs no access to its pool, and here it owns one GPU.
  Status Meet(const CallSite& site, int index, rendezvous::Buffers* mine, const Status& prior,
              const std::string& signature, const rendezvous::LeaderWork& work) {
    rendezvous::IpcTransport transport(mine, ordinal_, stream_);
    const bool staged = ipc_ && index == 0 && ctx_ != nullptr &&
                        std::any_of(devices_.begin(), devices_.end(),
                                    [&](int d) { return d != ordinal_; });
    if (!staged) {
      return MeetParticipants(site, run_id_, index, mine, transport, work, prior, signature);
    }
    return MeetParticipants(
        site, run_id_, index, mine, transport,
        [&](const std::vector<void*>& all) -> Status {
          rendezvous::Buffers own;
          JAXMG_RETURN_IF_ERROR(transport.StageSelf(&own));
          std::vector<void*> with_own = all;
          with_own[0] = &own;
          JAXMG_RETURN_IF_ERROR(work(with_own));
          return transport.Apply({});
        },
        prior, signature);
  }

  // One call at a time per device set. Eigenvalues and info are written with
  // cudaMemcpy from host memory, which may return before they land: the
  // others read them once every device is synchronised.
  template <typename Work>
  Status Lead(Work&& work) {
    std::lock_guard<std::mutex> lock(ctx_->mu);
    mg::DeviceGuard guard;
    JAXMG_RETURN_IF_ERROR(work());
    return ctx_->SynchronizeDevices();
  }

  void set_run_id(int64_t run_id) { run_id_ = run_id; }

 private:
  // The device list of a call traced without it. Its own meeting (the call's
  // key, negated) precedes the call's: the workspace query needs the list.
  Status ExchangeDevices(const CallSite& site) {
    int32_t position = -1;
    JAXMG_CUDA(cuda::api().cudaMemcpyAsync(&position, position_, sizeof(position),
                                           cudaMemcpyDeviceToHost, stream_));
    JAXMG_CUDA(cuda::api().cudaStreamSynchronize(stream_));
    std::vector<int64_t> all;
    JAXMG_RETURN_IF_ERROR(rendezvous::Gather({-site.call_id, run_id_},
                                             static_cast<int>(site.n_devices), position,
                                             ordinal_, std::chrono::milliseconds(site.timeout_ms),
                                             &all));
    devices_.assign(all.begin(), all.end());
    std::vector<int> sorted = devices_;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return Status::Error("jaxmg: two participants of one call run on the same GPU");
    }
    return Status::Ok();
  }

  cudaStream_t stream_;
  int32_t ordinal_;
  ffi::ScratchAllocator& scratch_;
  std::vector<int> devices_;
  const void* position_;
  std::vector<int32_t> owners_;
  bool ipc_ = false;
  int index_ = -1;
  int64_t run_id_ = 0;
  mg::Context* ctx_ = nullptr;
};

}  // namespace

template <engines::Routine R, typename T>
XLA_FFI_Error* MgTarget(XLA_FFI_CallFrame* frame) {
  static auto* handler =
      ffi::Ffi::Bind()
          .Ctx<ffi::PlatformStream<cudaStream_t>>()
          .Ctx<ffi::DeviceOrdinal>()
          .Ctx<ffi::ScratchAllocator>()
          .Ctx<ffi::RunId>()
          .RemainingArgs()
          .RemainingRets()
          .Attr<CallSite>("site")
          .Attr<Options>("options")
          .Attr<ffi::Span<const int64_t>>("device_ids")
          .To([](cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                 ffi::RunId run, ffi::RemainingArgs args, ffi::RemainingRets rets, CallSite site,
                 Options options, ffi::Span<const int64_t> device_ids) {
            ffi::ErrorOr<ffi::AnyBuffer> position = args.get<ffi::AnyBuffer>(args.size() - 1);
            if (!position) return ffi::Error::InvalidArgument("jaxmg: no position operand");
            Cuda cuda(stream, ordinal, scratch, device_ids, position->untyped_data());
            cuda.set_run_id(run.run_id);
            return Collective<Cuda, R, FfiType<T>::kValue>(cuda, args, rets, site, options);
          })
          .release();
  return handler->Call(frame);
}

JAXMG_INSTANTIATE_TARGETS(MgTarget, JAXMG_MG_ROUTINES)

}  // namespace jaxmg::ffi_layer
