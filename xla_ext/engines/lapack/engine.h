// The LAPACK engine (CPU devices): the leader gathers the 1-D block-cyclic
// matrix into one host buffer, runs LAPACK on it and scatters the result back
// into the participants' tiles. Memory: one extra N x N host buffer, which is
// fine for the CPU backend's purpose (development and CI).
//
// Buffers, per participant (host memory): kA its row block of A (N/n x N
// row-major, i.e. N x N/n of A^T column-major: the engine works on M = A^T and
// conjugates where the routine needs A); kB/kX its rows of B and X (row-major,
// rows_b x k) or all of them when B is replicated; kPivots its tiles' pivots;
// kW all N eigenvalues; kInfo one int32.
#ifndef JAXMG_XLA_EXT_ENGINES_LAPACK_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_LAPACK_ENGINE_H_

#include "xla_ext/engines/engine.h"

namespace jaxmg::lapack {

template <typename T>
class LapackEngine final : public engines::Engine<T> {
 public:
  using Call = engines::Call;
  using Parts = engines::Parts<T>;

  Status Potrs(const Call& call, const Parts& parts) override;
  Status Potrf(const Call& call, const Parts& parts) override;
  Status CholSolve(const Call& call, const Parts& parts) override;
  Status Getrf(const Call& call, const Parts& parts) override;
  Status LuSolve(const Call& call, const Parts& parts) override;
  Status Potri(const Call& call, const Parts& parts) override;
  Status Syevd(const Call& call, const Parts& parts) override;
  Status Relayout(const Call& call, const Parts& parts) override;
  Status AllFinite(const Call& call, const Parts& parts, bool* finite) override;
  Status ReportNonFinite(const Call& call, const Parts& parts) override;

 private:
  const char* name() const override { return "LAPACK"; }
};

}  // namespace jaxmg::lapack

#endif  // JAXMG_XLA_EXT_ENGINES_LAPACK_ENGINE_H_
