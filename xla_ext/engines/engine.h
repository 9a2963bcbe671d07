// The one interface every engine implements (LAPACK on host memory,
// cuSOLVERMg over the GPUs of one machine, cuSOLVERMp per rank, cuSOLVER's
// one-GPU API): the routines of one call over the participants' buffers of a
// distributed matrix (one participant for the one-GPU engine).
//
// An engine instance serves one call. Leader engines (LAPACK, cuSOLVERMg) run
// on one participant over every participant's buffers; per-rank engines
// (cuSOLVERMp) run on every rank over its own buffers and talk over NCCL, so
// they see one part. How a part's buffers lay out the matrix is the engine's
// contract (its header says it); the FFI layer only decodes, checks and meets.
#ifndef JAXMG_XLA_EXT_ENGINES_ENGINE_H_
#define JAXMG_XLA_EXT_ENGINES_ENGINE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xla_ext/common/scalar.h"
#include "xla_ext/common/status.h"
#include "xla_ext/rendezvous/buffers.h"

namespace jaxmg::engines {

// X(enumerator, target name): every routine a target can run.
#define JAXMG_FOR_EACH_ROUTINE(X) \
  X(kPotrs, potrs)                \
  X(kPotrf, potrf)                \
  X(kCholSolve, cholsolve)        \
  X(kGetrf, getrf)                \
  X(kLuSolve, lusolve)            \
  X(kPotri, potri)                \
  X(kSyevd, syevd)                \
  X(kQr, qr)                      \
  X(kIrsGesv, irsgesv)            \
  X(kRelayout, layout)

enum class Routine {
#define JAXMG_ROUTINE_ENUM(e, name) e,
  JAXMG_FOR_EACH_ROUTINE(JAXMG_ROUTINE_ENUM)
#undef JAXMG_ROUTINE_ENUM
};

const char* RoutineName(Routine routine);

// op(A) for solves with an LU factor, numbered as jax.scipy's lu_solve does.
enum class Trans : int64_t { kNone = 0, kTranspose = 1, kAdjoint = 2 };

// The roles of a participant's buffers, in the order of its Buffers.
enum Role : int {
  kA,       // the matrix block, overwritten (or a factor, only read)
  kB,       // right-hand sides
  kX,       // solutions
  kPivots,  // LU pivots (written by getrf, read by lusolve)
  kW,       // eigenvalues
  kQ,       // eigenvectors beside a (per-rank syevd)
  kR,       // the triangular factor of a QR
  kInfo,    // one int32: 0, or the routine's failure code
  kIterations,  // one int32: the refinement's iterations (irsgesv), < 0 where it fell back
  kWork,    // this participant's workspace
  kRoles,
};

// How kIrsGesv refines: the precision it factors in, its refinement solver,
// and how many iterations it may take before it solves in full precision.
enum class LowPrecision : int64_t { kFp16 = 0, kBf16 = 1, kTf32 = 2, kFp32 = 3 };
enum class Refiner : int64_t { kClassical = 0, kGmres = 1, kClassicalGmres = 2 };
struct Refinement {
  LowPrecision lowest = LowPrecision::kBf16;
  Refiner refiner = Refiner::kClassical;
  int32_t max_iterations = 30;
};

// A call's shape and options: the same for every participant.
struct Call {
  Routine routine = Routine::kPotrs;
  int64_t m = 0;      // rows of the global matrix
  int64_t n = 0;      // columns (the order, for square routines)
  int64_t tile = 0;   // column tile (1-D layouts) or square block (2-D)
  int32_t parts = 1;  // participants whose buffers the engine is given
  int64_t rows_b = 0;  // rows of a participant's block of B
  int64_t k = 0;       // columns of B
  bool b_sharded = false;
  Trans trans = Trans::kNone;
  bool vectors = true;
  bool to_block_cyclic = true;  // kRelayout's direction
  Refinement refinement{};      // kIrsGesv's
};

// A typed view of one participant's buffers.
template <typename T>
struct Part {
  rendezvous::Buffers* buffers = nullptr;

  void* raw(Role r) const { return (*buffers)[r].data; }
  uint64_t bytes(Role r) const { return (*buffers)[r].bytes; }
  T* a() const { return static_cast<T*>(raw(kA)); }
  const T* b() const { return static_cast<const T*>(raw(kB)); }
  T* x() const { return static_cast<T*>(raw(kX)); }
  int32_t* pivots() const { return static_cast<int32_t*>(raw(kPivots)); }
  Real<T>* w() const { return static_cast<Real<T>*>(raw(kW)); }
  T* q() const { return static_cast<T*>(raw(kQ)); }
  T* r() const { return static_cast<T*>(raw(kR)); }
  int32_t* info() const { return static_cast<int32_t*>(raw(kInfo)); }
  int32_t* iterations() const { return static_cast<int32_t*>(raw(kIterations)); }
  void* work() const { return raw(kWork); }
};

template <typename T>
using Parts = std::vector<Part<T>>;

template <typename T>
class Engine {
 public:
  virtual ~Engine() = default;

  // Workspace participant `index` brings (from XLA's allocator), in bytes.
  // `a` is that participant's matrix block (size queries want a valid pointer).
  virtual Status WorkspaceBytes(const Call& call, int index, void* a, size_t* bytes);

  virtual Status Potrs(const Call& call, const Parts<T>& parts);      // factor, then solve
  virtual Status Potrf(const Call& call, const Parts<T>& parts);      // Cholesky factor
  virtual Status CholSolve(const Call& call, const Parts<T>& parts);  // solve with it
  virtual Status Getrf(const Call& call, const Parts<T>& parts);      // LU factor, pivots
  virtual Status LuSolve(const Call& call, const Parts<T>& parts);    // op(A) X = B with it
  virtual Status Potri(const Call& call, const Parts<T>& parts);      // SPD inverse
  virtual Status Syevd(const Call& call, const Parts<T>& parts);      // eigenvalues, vectors
  virtual Status Qr(const Call& call, const Parts<T>& parts);         // reduced QR
  // A X = B at T's precision from a lower-precision LU, refined (and solved
  // at T's precision where refinement does not converge).
  virtual Status IrsGesv(const Call& call, const Parts<T>& parts);
  virtual Status Relayout(const Call& call, const Parts<T>& parts);   // the layout alone

  // Whether every part's block of A is free of NaN and Inf, asked before a
  // routine that reads A overwrites it. An engine that does not look leaves
  // *finite true (the Python layer then checks).
  virtual Status AllFinite(const Call& call, const Parts<T>& parts, bool* finite);
  // Sets every part's info to N + 1 where the routine left 0 (A had a NaN
  // or Inf entry that the routine let through).
  virtual Status ReportNonFinite(const Call& call, const Parts<T>& parts);

 protected:
  // What an engine returns for a routine it does not offer.
  virtual const char* name() const = 0;
  Status Unsupported(Routine routine) const;
};

// Whether a routine reads only the upper triangle of the row-major matrix
// its parts hold (Cholesky and the eigensolver: they read the lower
// triangle of the column-major M = A^T). A NaN in the other triangle is
// then not A's, as for LAPACK's potrf and syevd and JAX's cho_factor.
bool ReadsUpperTriangle(Routine routine);

// Whether the entries a routine reads among `count` consecutive elements of
// a part's row-major block are finite: `data` is element `first` of the
// block, whose rows are the matrix's from `row0`, `n` columns each; `upper`:
// only those on or above the diagonal.
template <typename T>
bool ReadEntriesFinite(const T* data, int64_t first, int64_t count, int64_t row0, int64_t n,
                       bool upper) {
  if (!upper) return std::all_of(data, data + count, IsFinite<T>);
  for (int64_t i = 0; i < count;) {
    const int64_t row = row0 + (first + i) / n, col = (first + i) % n;
    const int64_t run = std::min(count - i, n - col);  // to the end of this row
    const int64_t below = std::clamp<int64_t>(row - col, 0, run);
    if (!std::all_of(data + i + below, data + i + run, IsFinite<T>)) return false;
    i += run;
  }
  return true;
}

// Runs call.routine: the one dispatch from a routine to its method. A
// routine that reads A reports N + 1 in info where what it reads of A is
// not finite.
template <typename T>
Status Run(Engine<T>& engine, const Call& call, const Parts<T>& parts);

}  // namespace jaxmg::engines

#endif  // JAXMG_XLA_EXT_ENGINES_ENGINE_H_
