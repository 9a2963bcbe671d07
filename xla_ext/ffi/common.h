// Pieces every handler shares: the call's identity and shape checks, and the
// conversion of internal statuses to ffi::Error at the boundary.
#ifndef JAXMG_XLA_EXT_FFI_COMMON_H_
#define JAXMG_XLA_EXT_FFI_COMMON_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/common/status.h"
#include "xla_ext/layout/block_cyclic.h"
#include "xla_ext/rendezvous/processes.h"
#include "xla_ext/rendezvous/rendezvous.h"

namespace jaxmg::ffi_common {

namespace ffi = ::xla::ffi;

// Who this participant is and which collective call it belongs to.
struct CallSite {
  int64_t run_id;
  int64_t call_id;
  int32_t n_devices;
  int32_t index;
  int64_t tile;
  std::chrono::milliseconds timeout;
};

inline ffi::Error ToFfi(const Status& s) {
  return s.ok() ? ffi::Error::Success() : ffi::Error::Internal(s.message());
}

// a's local block is rows_local x N with rows_local * n_devices == N; the
// participant index must lie in the mesh. Returns the matrix layout.
inline Status CheckMatrixBlock(const char* name, ffi::Span<const int64_t> dims,
                               const CallSite& site, layout::ColumnLayout* out) {
  if (dims.size() != 2) return Errorf("jaxmg: ", name, " must be a rank-2 block");
  if (site.n_devices < 1) return Errorf("jaxmg: n_devices=", site.n_devices, " must be >= 1");
  if (site.index < 0 || site.index >= site.n_devices) {
    return Errorf("jaxmg: participant index ", site.index, " outside mesh of ", site.n_devices);
  }
  if (dims[0] * site.n_devices != dims[1]) {
    return Errorf("jaxmg: ", name, " block is ", dims[0], " x ", dims[1], " but a mesh of ",
                  site.n_devices, " devices needs ", dims[1] / site.n_devices, " x ", dims[1]);
  }
  *out = layout::ColumnLayout{dims[1], site.tile, site.n_devices};
  return out->Validate();
}

// Meets the call's other participants: the threads of this process, or other
// processes when Python registered the call as spanning processes (then
// `transport` carries the buffers; without one the call stays in-process).
// `prior`: this participant already failed.
inline Status MeetParticipants(const CallSite& site, void* mine, processes::Transport* transport,
                               const rendezvous::LeaderWork& work,
                               const Status& prior = Status::Ok()) {
  std::vector<int32_t> owners;
  if (processes::CallProcesses(site.call_id, &owners)) {
    if (transport == nullptr) {
      return Status::Error("jaxmg: this target runs within one process only");
    }
    if (static_cast<int32_t>(owners.size()) != site.n_devices) {
      return Errorf("jaxmg: call ", site.call_id, " was registered with ", owners.size(),
                    " processes for ", site.n_devices, " devices");
    }
    // A participant that failed still takes its turn, so every process's
    // runs of this call stay paired.
    return processes::Meet(site.call_id, owners, mine, site.timeout, *transport, work, prior);
  }
  if (!prior.ok()) return prior;
  return rendezvous::Meet({site.call_id, site.run_id}, site.n_devices, site.index, mine,
                          site.timeout, work);
}

// The attributes every target takes, in order.
template <typename Binding>
auto CallAttrs(Binding binding) {
  return std::move(binding)
      .template Attr<int64_t>("n_devices")
      .template Attr<int64_t>("tile")
      .template Attr<int64_t>("call_id")
      .template Attr<int64_t>("timeout_ms");
}

}  // namespace jaxmg::ffi_common

// Defines jaxmg_<s|d|c|z><routine>_<platform> for the four dtypes: the one
// naming rule of the targets (jaxmg/_src/library.py mirrors it).
#define JAXMG_DEFINE_TARGETS(routine, platform, Impl, Binding)                           \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_s##routine##_##platform, Impl<::xla::ffi::F32>,    \
                                Binding<::xla::ffi::F32>());                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_d##routine##_##platform, Impl<::xla::ffi::F64>,    \
                                Binding<::xla::ffi::F64>());                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_c##routine##_##platform, Impl<::xla::ffi::C64>,    \
                                Binding<::xla::ffi::C64>());                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_z##routine##_##platform, Impl<::xla::ffi::C128>,   \
                                Binding<::xla::ffi::C128>())

#endif  // JAXMG_XLA_EXT_FFI_COMMON_H_
