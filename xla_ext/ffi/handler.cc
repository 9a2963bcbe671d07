#include "xla_ext/ffi/handler.h"

#include <functional>
#include <numeric>
#include <optional>

#include "xla_ext/layout/block_cyclic.h"

namespace jaxmg::ffi_layer {
namespace {

using engines::kA;
using engines::kB;
using engines::kInfo;
using engines::kIterations;
using engines::kPivots;
using engines::kQ;
using engines::kR;
using engines::kW;
using engines::kX;

const char* RoleName(Role r) {
  static const char* const kNames[] = {"a", "b", "x", "piv", "w", "q", "r", "info", "iterations",
                                       "work"};
  return kNames[r];
}

// The element type a role's buffer must have in a routine of dtype DT.
ffi::DataType Expected(Role r, ffi::DataType dt) {
  switch (r) {
    case kPivots:
    case kInfo:
    case kIterations:
      return ffi::DataType::S32;
    case kW:
      return ffi::ToReal(dt);
    default:
      return dt;
  }
}

// The dtype as JAX names it, for messages a user reads.
std::string DTypeName(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::F64: return "float64";
    case ffi::DataType::C64: return "complex64";
    case ffi::DataType::C128: return "complex128";
    default: return "dtype " + std::to_string(static_cast<int>(dtype));
  }
}

}  // namespace

std::string Dims(ffi::Span<const int64_t> d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

Status ScratchWorkspace(ffi::ScratchAllocator& scratch, size_t bytes, const char* what,
                        void** out) {
  std::optional<void*> ptr = scratch.Allocate(bytes, 16);
  if (!ptr.has_value()) {
    return Errorf("jaxmg: XLA could not allocate ", bytes, " bytes of ", what,
                  " from its memory pool; raise XLA_PYTHON_CLIENT_MEM_FRACTION (or free other "
                  "arrays), or solve a smaller problem");
  }
  *out = *ptr;
  return Status::Ok();
}

int64_t Operands::count(Role r) const {
  return std::accumulate(dims[r].begin(), dims[r].end(), int64_t{1}, std::multiplies<>());
}

const Signature& LeaderSignature(Routine routine) {
  static const Signature kPotrs{{kA, kB}, {kA, kX, kInfo}};
  static const Signature kFactor{{kA}, {kA, kInfo}};  // potrf, potri
  static const Signature kSolve{{kA, kB}, {kX}};
  static const Signature kGetrf{{kA}, {kA, kPivots, kInfo}};
  static const Signature kLuSolve{{kA, kPivots, kB}, {kX}};
  static const Signature kSyevd{{kA}, {kA, kW, kInfo}};
  static const Signature kRelayout{{kA}, {kA}};
  static const Signature kNone{};
  switch (routine) {
    case Routine::kPotrs: return kPotrs;
    case Routine::kPotrf:
    case Routine::kPotri: return kFactor;
    case Routine::kCholSolve: return kSolve;
    case Routine::kGetrf: return kGetrf;
    case Routine::kLuSolve: return kLuSolve;
    case Routine::kSyevd: return kSyevd;
    case Routine::kRelayout: return kRelayout;
    case Routine::kQr:
    case Routine::kIrsGesv: return kNone;
  }
  return kNone;
}

const Signature& PerRankSignature(Routine routine) {
  static const Signature kFactor{{kA}, {kA, kInfo}};
  static const Signature kSolve{{kA, kB}, {kX}};
  static const Signature kGetrf{{kA}, {kA, kPivots, kInfo}};
  static const Signature kLuSolve{{kA, kPivots, kB}, {kX}};
  static const Signature kSyevd{{kA}, {kA, kQ, kW, kInfo}};
  static const Signature kQr{{kA}, {kA, kR, kInfo}};
  static const Signature kNone{};
  switch (routine) {
    case Routine::kPotrf: return kFactor;
    case Routine::kCholSolve: return kSolve;
    case Routine::kGetrf: return kGetrf;
    case Routine::kLuSolve: return kLuSolve;
    case Routine::kSyevd: return kSyevd;
    case Routine::kQr: return kQr;
    default: return kNone;
  }
}

template <ffi::DataType DT>
Status Decode(Routine routine, const Signature& sig, ffi::RemainingArgs args,
              ffi::RemainingRets rets, Operands* out) {
  const char* name = engines::RoutineName(routine);
  if (args.size() < sig.args.size() || rets.size() != sig.rets.size()) {
    return Errorf("jaxmg: ", name, " takes ", sig.args.size(), " operands and ",
                  sig.rets.size(), " results, got ", args.size(), " and ", rets.size());
  }
  auto check = [&](Role role, ffi::DataType type, ffi::Span<const int64_t> dims) -> Status {
    if (type != Expected(role, DT)) {
      return Errorf("jaxmg: ", name, "'s ", RoleName(role), " has element type ", type,
                    ", expected ", Expected(role, DT));
    }
    out->dims[role] = dims;
    return Status::Ok();
  };
  for (size_t i = 0; i < sig.args.size(); ++i) {
    const Role role = sig.args[i];
    ffi::ErrorOr<ffi::AnyBuffer> buffer = args.get<ffi::AnyBuffer>(i);
    if (!buffer) return Errorf("jaxmg: ", name, "'s ", RoleName(role), ": ", buffer.error().message());
    JAXMG_RETURN_IF_ERROR(check(role, buffer->element_type(), buffer->dimensions()));
    out->buffers[role] = {buffer->untyped_data(), buffer->size_bytes(), true, false};
    out->present[role] = true;
  }
  for (size_t i = 0; i < sig.rets.size(); ++i) {
    const Role role = sig.rets[i];
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> result = rets.get<ffi::AnyBuffer>(i);
    if (!result) return Errorf("jaxmg: ", name, "'s ", RoleName(role), ": ", result.error().message());
    ffi::AnyBuffer buffer = **result;
    if (out->present[role]) {
      // Overwritten in place: the result must be the operand's shape.
      if (buffer.size_bytes() != out->buffers[role].bytes) {
        return Errorf("jaxmg: ", name, "'s result ", RoleName(role), " ", Dims(buffer.dimensions()),
                      " differs from its operand ", Dims(out->dims[role]));
      }
      out->a_in = out->buffers[role].data;
      out->buffers[role].data = buffer.untyped_data();
      out->buffers[role].out = true;
      continue;
    }
    JAXMG_RETURN_IF_ERROR(check(role, buffer.element_type(), buffer.dimensions()));
    out->buffers[role] = {buffer.untyped_data(), buffer.size_bytes(), false, true};
    out->present[role] = true;
  }
  return Status::Ok();
}

#define JAXMG_INSTANTIATE(DT)                                                             \
  template Status Decode<DT>(Routine, const Signature&, ffi::RemainingArgs, ffi::RemainingRets, \
                             Operands*);
JAXMG_INSTANTIATE(ffi::DataType::F32)
JAXMG_INSTANTIATE(ffi::DataType::F64)
JAXMG_INSTANTIATE(ffi::DataType::C64)
JAXMG_INSTANTIATE(ffi::DataType::C128)
#undef JAXMG_INSTANTIATE

Status LeaderShape(Routine routine, const Operands& ops, const CallSite& site,
                   const Options& options, Call* call) {
  const ffi::Span<const int64_t> a = ops.dims[kA];
  if (a.size() != 2) return Errorf("jaxmg: a must be a rank-2 block, got ", Dims(a));
  if (site.n_devices < 1) return Errorf("jaxmg: n_devices=", site.n_devices, " must be >= 1");
  const int64_t n = a[1];
  if (a[0] * site.n_devices != n) {
    return Errorf("jaxmg: a's block is ", a[0], " x ", n, " but a mesh of ", site.n_devices,
                  " devices needs ", n / site.n_devices, " x ", n);
  }
  const layout::ColumnLayout layout{n, site.tile, static_cast<int32_t>(site.n_devices)};
  JAXMG_RETURN_IF_ERROR(layout.Validate());
  *call = Call{};
  call->routine = routine;
  call->m = call->n = n;
  call->tile = site.tile;
  call->parts = static_cast<int32_t>(site.n_devices);
  call->b_sharded = options.b_sharded;
  call->trans = options.trans;
  call->vectors = options.vectors;
  call->to_block_cyclic = options.to_block_cyclic;
  if (ops.has(kB)) {
    const ffi::Span<const int64_t> b = ops.dims[kB];
    const int64_t rows = options.b_sharded ? n / site.n_devices : n;
    if (b.size() != 2 || b[0] != rows) {
      return Errorf("jaxmg: b's block must be ", rows, " x K, got ", Dims(b));
    }
    if (ops.has(kX) && ops.count(kX) != ops.count(kB)) {
      return Errorf("jaxmg: x ", Dims(ops.dims[kX]), " must have b's shape ", Dims(b));
    }
    call->rows_b = b[0];
    call->k = b[1];
  }
  if (ops.has(kPivots) && ops.count(kPivots) * site.n_devices != n) {
    return Errorf("jaxmg: piv must hold N / n_devices = ", n / site.n_devices,
                  " pivots per device, got ", Dims(ops.dims[kPivots]));
  }
  if (ops.has(kW) && ops.count(kW) != n) {
    return Errorf("jaxmg: w must hold N = ", n, " eigenvalues, got ", Dims(ops.dims[kW]));
  }
  if (options.trans < engines::Trans::kNone || options.trans > engines::Trans::kAdjoint) {
    return Errorf("jaxmg: trans=", static_cast<int64_t>(options.trans), " must be 0, 1 or 2");
  }
  return Status::Ok();
}

Status PerRankShape(Routine routine, const Operands& ops, const Grid& grid, Call* call) {
  const ffi::Span<const int64_t> a = ops.dims[kA];
  const int64_t block = grid.block;
  if (a.size() != 2 || block < 1 || a[0] % block || a[1] % block) {
    return Errorf("jaxmg: a cuSOLVERMp rank's block must be whole ", block, " x ", block,
                  " blocks on its ", grid.rows, " x ", grid.cols, " grid, got ", Dims(a));
  }
  *call = Call{};
  call->routine = routine;
  call->m = a[1] * grid.rows;
  call->n = a[0] * grid.cols;
  call->tile = block;
  const bool square = routine != Routine::kQr;
  if (square && call->m != call->n) {
    return Errorf("jaxmg: ", engines::RoutineName(routine), " needs a square matrix, got ",
                  call->m, " x ", call->n);
  }
  if (routine == Routine::kQr) {
    const ffi::Span<const int64_t> r = ops.dims[kR];
    if (call->m < call->n || r.size() != 2 || r[0] != a[0] || r[1] * grid.rows != call->n) {
      return Status::Error("jaxmg: qr needs M >= N and r as the rank's block of an N x N matrix");
    }
  }
  if (ops.has(kPivots) && ops.count(kPivots) != a[0]) {
    return Errorf("jaxmg: piv must hold the rank's ", a[0], " local columns' pivots, got ",
                  Dims(ops.dims[kPivots]));
  }
  if (ops.has(kB)) {
    const ffi::Span<const int64_t> b = ops.dims[kB];
    if (b.size() != 2 || b[1] != a[1]) {
      return Errorf("jaxmg: right-hand sides must be (k, ", a[1], " local rows), got ", Dims(b));
    }
    call->k = b[0];
    call->rows_b = b[1];
  }
  if (ops.has(kW) && ops.count(kW) != call->n) {
    return Errorf("jaxmg: w must hold N = ", call->n, " eigenvalues, got ", Dims(ops.dims[kW]));
  }
  return Status::Ok();
}

std::string SignatureOf(Routine routine, ffi::DataType dtype, const Operands& ops,
                        const CallSite& site) {
  std::string s = std::string(engines::RoutineName(routine)) + " " + DTypeName(dtype) +
                  " tile " + std::to_string(site.tile);
  for (int r = 0; r < engines::kRoles; ++r) {
    if (ops.present[r]) s += std::string(" ") + RoleName(static_cast<Role>(r)) + Dims(ops.dims[r]);
  }
  return s;
}

Status MeetParticipants(const CallSite& site, int64_t run_id, int index, void* mine,
                        processes::Transport& transport, const rendezvous::LeaderWork& work,
                        const Status& prior, const std::string& signature) {
  const std::chrono::milliseconds timeout(site.timeout_ms);
  std::vector<int32_t> owners;
  if (processes::CallProcesses(site.call_id, &owners)) {
    if (static_cast<int64_t>(owners.size()) != site.n_devices) {
      return Errorf("jaxmg: call ", site.call_id, " was registered with ", owners.size(),
                    " processes for ", site.n_devices, " devices");
    }
    return processes::Meet(site.call_id, owners, mine, timeout, transport, work, prior,
                           signature);
  }
  if (!prior.ok()) return prior;
  return rendezvous::Meet({site.call_id, run_id}, static_cast<int>(site.n_devices), index, mine,
                          timeout, work);
}

}  // namespace jaxmg::ffi_layer
