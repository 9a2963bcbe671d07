// Platform "cpu": every device's thread enters with its row block and its
// position on the mesh axis (the last operand); the participants meet and the
// leader runs the LAPACK engine. Across processes the buffers travel as copies.
#include <cstring>
#include <memory>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/engines/lapack/engine.h"
#include "xla_ext/ffi/handler.h"
#include "xla_ext/ffi/registry.h"
#include "xla_ext/rendezvous/host_copy_transport.h"

namespace jaxmg::ffi_layer {
namespace {

class Cpu {
 public:
  Cpu(ffi::RunId run, ffi::RemainingArgs args) : run_(run), args_(args) {}

  Status Join(const CallSite&, int* index) {
    // The position is the operand after the routine's own.
    ffi::ErrorOr<ffi::Buffer<ffi::S32>> position =
        args_.get<ffi::Buffer<ffi::S32>>(args_.size() - 1);
    if (!position || position->element_count() != 1) {
      return Status::Error("jaxmg: the last operand must be this device's int32 position");
    }
    *index = position->typed_data()[0];
    return Status::Ok();
  }

  template <typename T>
  std::unique_ptr<engines::Engine<T>> MakeEngine() {
    return std::make_unique<lapack::LapackEngine<T>>();
  }

  Status Workspace(size_t, void**) { return Status::Error("jaxmg: LAPACK takes no workspace"); }

  Status Ready(const Operands& ops) {
    const rendezvous::Buffer& a = ops.buffers[engines::kA];
    if (ops.a_in != nullptr && ops.a_in != a.data) std::memcpy(a.data, ops.a_in, a.bytes);
    return Status::Ok();
  }

  Status Meet(const CallSite& site, int index, rendezvous::Buffers* mine, const Status& prior,
              const std::string& signature, const rendezvous::LeaderWork& work) {
    if (index < 0 || index >= site.n_devices) {
      return Errorf("jaxmg: participant index ", index, " outside mesh of ", site.n_devices);
    }
    rendezvous::HostCopyTransport transport(mine);
    return MeetParticipants(site, run_.run_id, index, mine, transport, work, prior, signature);
  }

  template <typename Work>
  Status Lead(Work&& work) {
    return work();
  }

 private:
  ffi::RunId run_;
  ffi::RemainingArgs args_;
};

}  // namespace

template <engines::Routine R, typename T>
XLA_FFI_Error* LapackTarget(XLA_FFI_CallFrame* frame) {
  static auto* handler =
      ffi::Ffi::Bind()
          .Ctx<ffi::RunId>()
          .RemainingArgs()
          .RemainingRets()
          .Attr<CallSite>("site")
          .Attr<Options>("options")
          .To([](ffi::RunId run, ffi::RemainingArgs args, ffi::RemainingRets rets, CallSite site,
                 Options options) {
            Cpu cpu(run, args);
            return Collective<Cpu, R, FfiType<T>::kValue>(cpu, args, rets, site, options);
          })
          .release();
  return handler->Call(frame);
}

JAXMG_INSTANTIATE_TARGETS(LapackTarget, JAXMG_LAPACK_ROUTINES)

}  // namespace jaxmg::ffi_layer
