// The cuSOLVERMp engine (per rank, over NCCL): every rank runs the routine on
// its own part; engines/mp/solvers.h says how a rank's local matrix is laid
// out. A part's buffers: kA the rank's local matrix (overwritten: the factor,
// or Q of a QR), kB/kX the rank's local rows of each right-hand side column,
// column by column (k x local rows), kPivots the pivots of its local columns,
// kQ its part of the eigenvectors, kR its part of a QR's N x N factor, kW all
// N eigenvalues, kInfo one int32 on the device. Workspace comes from XLA's
// allocator during the call (cuSOLVERMp sizes it from the live descriptors).
#ifndef JAXMG_XLA_EXT_ENGINES_MP_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_MP_ENGINE_H_

#include "xla_ext/engines/engine.h"
#include "xla_ext/engines/mp/solvers.h"

namespace jaxmg::mp {

template <typename T>
class MpEngine final : public engines::Engine<T> {
 public:
  using Call = engines::Call;
  using Parts = engines::Parts<T>;

  MpEngine(Rank& rank, Grid grid, cudaStream_t stream, Allocator alloc)
      : rank_(rank), grid_(grid), stream_(stream), alloc_(std::move(alloc)) {}

  Status Potrf(const Call& call, const Parts& parts) override;
  Status CholSolve(const Call& call, const Parts& parts) override;
  Status Getrf(const Call& call, const Parts& parts) override;
  Status LuSolve(const Call& call, const Parts& parts) override;
  Status Syevd(const Call& call, const Parts& parts) override;
  Status Qr(const Call& call, const Parts& parts) override;

 private:
  const char* name() const override { return "cuSOLVERMp"; }
  // X starts as a copy of B: the solves work in place.
  Status CopyRhs(const engines::Part<T>& part);

  Rank& rank_;
  Grid grid_;
  cudaStream_t stream_;
  Allocator alloc_;
};

}  // namespace jaxmg::mp

#endif  // JAXMG_XLA_EXT_ENGINES_MP_ENGINE_H_
