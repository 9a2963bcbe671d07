// The cuSOLVERMg engine (the GPUs of one machine): the leader drives
// cuSOLVERMg over every participant's device buffers, with the layout of the
// LAPACK engine (engines/lapack/engine.h says how a part's buffers hold A, B,
// X, pivots and eigenvalues; here they are device memory). Each participant
// brings a workspace: cuSOLVERMg's, one spare tile for the in-place layout
// conversion and, on participant 0, room to stage B and X (2 N K elements).
#ifndef JAXMG_XLA_EXT_ENGINES_MG_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_MG_ENGINE_H_

#include <cstdint>

#include "xla_ext/engines/engine.h"
#include "xla_ext/engines/mg/context.h"

namespace jaxmg::mg {

template <typename T>
class MgEngine final : public engines::Engine<T> {
 public:
  using Call = engines::Call;
  using Parts = engines::Parts<T>;

  // `ipc_tiles`: the participants are processes whose buffers the leader
  // reaches through CUDA IPC.
  MgEngine(Context& ctx, bool ipc_tiles) : ctx_(ctx), ipc_tiles_(ipc_tiles) {}

  Status WorkspaceBytes(const Call& call, int index, void* a, size_t* bytes) override;
  Status Potrs(const Call& call, const Parts& parts) override;
  Status Potrf(const Call& call, const Parts& parts) override;
  Status CholSolve(const Call& call, const Parts& parts) override;
  Status Getrf(const Call& call, const Parts& parts) override;
  Status LuSolve(const Call& call, const Parts& parts) override;
  Status Potri(const Call& call, const Parts& parts) override;
  Status Syevd(const Call& call, const Parts& parts) override;
  Status AllFinite(const Call& call, const Parts& parts, bool* finite) override;
  Status ReportNonFinite(const Call& call, const Parts& parts) override;

 private:
  const char* name() const override { return "cuSOLVERMg"; }
  // cuSOLVERMg's own workspace, in elements per device.
  Status SolverElements(const Call& call, void* a, int64_t* elements);

  Context& ctx_;
  bool ipc_tiles_;
};

}  // namespace jaxmg::mg

#endif  // JAXMG_XLA_EXT_ENGINES_MG_ENGINE_H_
