// The two handler templates every target is an instance of. Each decodes
// the routine's operands by role, checks their shapes, takes one workspace
// from XLA, and runs the engine:
//   Collective: leader engines. The participants meet (threads of a process,
//     or processes over the job channel); the leader runs the engine over
//     every participant's buffers.
//   PerRank: per-rank engines. Every rank runs the engine over its own
//     buffers; the library talks to the other ranks.
// A platform (cpu.cc, cuda.cc, mp.cc) supplies the binding and a few hooks:
// how a participant finds its place and its engine, how buffers travel
// between processes, and how input reaches an aliased output.
#ifndef JAXMG_XLA_EXT_FFI_HANDLER_H_
#define JAXMG_XLA_EXT_FFI_HANDLER_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/common/status.h"
#include "xla_ext/engines/engine.h"
#include "xla_ext/ffi/attributes.h"
#include "xla_ext/rendezvous/buffers.h"
#include "xla_ext/rendezvous/processes.h"
#include "xla_ext/rendezvous/rendezvous.h"

namespace jaxmg::ffi_layer {

namespace ffi = ::xla::ffi;
using engines::Call;
using engines::Role;
using engines::Routine;

inline ffi::Error ToFfi(const Status& s) {
  return s.ok() ? ffi::Error::Success() : ffi::Error::Internal(s.message());
}

// Which roles a routine's operands and results have, in order.
struct Signature {
  std::vector<Role> args;
  std::vector<Role> rets;
};
const Signature& LeaderSignature(Routine routine);   // + the participant index, last
const Signature& PerRankSignature(Routine routine);  // right-hand sides transposed

// One participant's operands, decoded. A role that is both an operand and a
// result (the matrix, overwritten) lives in the result's buffer; `a_in` is
// the operand's, which XLA aliases with it unless it chose to copy.
struct Operands {
  rendezvous::Buffers buffers = rendezvous::Buffers(engines::kRoles);
  std::array<ffi::Span<const int64_t>, engines::kRoles> dims{};
  std::array<bool, engines::kRoles> present{};
  const void* a_in = nullptr;

  bool has(Role r) const { return present[r]; }
  int64_t count(Role r) const;  // elements
};

// A buffer's dimensions for messages: "(2, 3)", "(4,)".
std::string Dims(ffi::Span<const int64_t> d);

// `bytes` of workspace from XLA's allocator on the call's device (16-byte
// aligned, the most it accepts); `what` names the workspace in the error.
Status ScratchWorkspace(ffi::ScratchAllocator& scratch, size_t bytes, const char* what,
                        void** out);

// Decodes the routine's buffers (args beyond the signature are the
// platform's and left alone); every dtype is checked, naming the operand.
template <ffi::DataType DT>
Status Decode(Routine routine, const Signature& sig, ffi::RemainingArgs args,
              ffi::RemainingRets rets, Operands* out);

// The call's shape from a leader engine's operands: a participant's block of
// the 1-D layout is N/n x N; B is N/n x K (sharded) or N x K.
Status LeaderShape(Routine routine, const Operands& ops, const CallSite& site,
                   const Options& options, Call* call);

// The same for a per-rank engine: a rank's block is (local columns, local
// rows) of an M x N matrix 2-D block-cyclic in square blocks on the grid.
Status PerRankShape(Routine routine, const Operands& ops, const Grid& grid, Call* call);

// What a participant brings, for the participants of a call across
// processes to compare: the routine, the element type, every buffer's role
// and dimensions, and the tile.
std::string SignatureOf(Routine routine, ffi::DataType dtype, const Operands& ops,
                        const CallSite& site);

template <typename T>
engines::Parts<T> PartsOf(const std::vector<void*>& all) {
  engines::Parts<T> parts;
  for (void* p : all) parts.push_back({static_cast<rendezvous::Buffers*>(p)});
  return parts;
}

// Platform hooks of Collective (see cpu.cc and cuda.cc):
//   Status Join(const CallSite&, int* index)  this participant's place, and
//       the state it needs; a failure here means no meeting to take part in.
//   std::unique_ptr<engines::Engine<T>> MakeEngine<T>()
//   Status Workspace(size_t bytes, void** out)  from XLA's allocator
//   Status Ready(const Operands&)  input copied into an aliased output; done
//   Status Meet(site, index, Buffers*, prior, signature, work)  meets, runs `work`
//   Status Lead(work)  the leader's side of running the engine
template <class Platform, Routine R, ffi::DataType DT>
ffi::Error Collective(Platform& platform, ffi::RemainingArgs args, ffi::RemainingRets rets,
                      const CallSite& site, const Options& options) {
  using T = ffi::NativeType<DT>;
  Operands ops;
  Call call;
  Status s = Decode<DT>(R, LeaderSignature(R), args, rets, &ops);
  if (s.ok()) s = LeaderShape(R, ops, site, options, &call);
  int index = -1;
  if (s.ok()) s = platform.Join(site, &index);
  if (!s.ok()) return ToFfi(s);  // no meeting to take part in
  auto engine = platform.template MakeEngine<T>();
  size_t bytes = 0;
  s = engine->WorkspaceBytes(call, index, ops.buffers[engines::kA].data, &bytes);
  if (s.ok() && bytes > 0) {
    ops.buffers[engines::kWork] = {nullptr, bytes, false, false};
    s = platform.Workspace(bytes, &ops.buffers[engines::kWork].data);
  }
  if (s.ok()) s = platform.Ready(ops);
  // A participant that failed on its way still takes its turn (`s` is its
  // prior failure), so every process's runs of this call stay paired.
  return ToFfi(platform.Meet(site, index, &ops.buffers, s, SignatureOf(R, DT, ops, site),
                             [&](const std::vector<void*>& all) -> Status {
                               return platform.Lead([&]() -> Status {
                                 return engines::Run<T>(*engine, call, PartsOf<T>(all));
                               });
                             }));
}

// Platform hooks of PerRank (see mp.cc):
//   Status MakeEngine<T>(const Grid&, std::unique_ptr<engines::Engine<T>>*)
//   Status Ready(const Operands&)
template <class Platform, Routine R, ffi::DataType DT>
ffi::Error PerRank(Platform& platform, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   const Grid& grid) {
  using T = ffi::NativeType<DT>;
  Operands ops;
  Call call;
  std::unique_ptr<engines::Engine<T>> engine;
  Status s = Decode<DT>(R, PerRankSignature(R), args, rets, &ops);
  if (s.ok()) s = PerRankShape(R, ops, grid, &call);
  if (s.ok()) s = platform.template MakeEngine<T>(grid, &engine);
  if (s.ok()) s = platform.Ready(ops);
  if (!s.ok()) return ToFfi(s);
  return ToFfi(engines::Run<T>(*engine, call, {engines::Part<T>{&ops.buffers}}));
}

// Meets the call's other participants: the threads of this process, or other
// processes when Python registered the call as spanning processes (then
// `transport` carries the buffers).
Status MeetParticipants(const CallSite& site, int64_t run_id, int index, void* mine,
                        processes::Transport& transport, const rendezvous::LeaderWork& work,
                        const Status& prior, const std::string& signature);

}  // namespace jaxmg::ffi_layer

#endif  // JAXMG_XLA_EXT_FFI_HANDLER_H_
