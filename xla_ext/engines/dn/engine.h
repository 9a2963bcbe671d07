// cuSOLVER's one-GPU engine: the iterative-refinement solver (IRS), which
// factors A at a lower precision on tensor cores, refines X against A at A's
// own precision, and factors and solves at A's precision where refinement
// does not converge. One part; its buffers: kA the N x N matrix column-major
// (overwritten: cuSOLVER factors it in place when it falls back), kB and kX
// the N x K right-hand sides and solutions column-major, kInfo one int32 (0,
// or i where U(i, i) of the full-precision LU is exactly zero), kIterations
// one int32 (cuSOLVER's count: > 0 converged, < 0 fell back).
#ifndef JAXMG_XLA_EXT_ENGINES_DN_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_DN_ENGINE_H_

#include <cuda_runtime_api.h>

#include "xla_ext/engines/engine.h"

namespace jaxmg::dn {

template <typename T>
class DnEngine final : public engines::Engine<T> {
 public:
  using Call = engines::Call;
  using Parts = engines::Parts<T>;

  DnEngine(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

  Status WorkspaceBytes(const Call& call, int index, void* a, size_t* bytes) override;
  Status IrsGesv(const Call& call, const Parts& parts) override;

 private:
  const char* name() const override { return "cuSOLVER"; }

  int device_;
  cudaStream_t stream_;
};

}  // namespace jaxmg::dn

#endif  // JAXMG_XLA_EXT_ENGINES_DN_ENGINE_H_
