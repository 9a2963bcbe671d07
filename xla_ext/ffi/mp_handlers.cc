// XLA FFI handlers for the cuSOLVERMp engine (platform "CUDA"): each rank's
// handler runs the routine on its own block; NCCL carries the rest, so no
// rendezvous is needed and ranks may live in any process. Every block is
// read column-major: a rank's (N / grid_cols, M / grid_rows) row-major block
// is its local matrix of the M x N matrix, block-cyclic on the grid, which
// the Python side arranges (every rank holds the same number of whole blocks).
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/engines/mp/engine.h"
#include "xla_ext/ffi/common.h"
#include "xla_ext/vendor/cusolvermp.h"

namespace jaxmg {
namespace {

namespace ffi = ::xla::ffi;
using ffi_common::ToFfi;

struct Group {
  std::string_view id;
  int64_t n_ranks;
  ffi::Span<const int64_t> local_ranks;
  ffi::Span<const int64_t> local_devices;
};

Status RankOf(const Group& g, int32_t ordinal, cudaStream_t stream, mp::Rank** out) {
  if (!cusolvermp::Loaded()) {
    return Status::Error("jaxmg: cuSOLVERMp is not loaded; jaxmg loads it when a call first "
                         "asks for backend='mp'");
  }
  mp::GroupSpec spec;
  spec.id = std::string(g.id);
  spec.n_ranks = static_cast<int32_t>(g.n_ranks);
  spec.local_ranks.assign(g.local_ranks.begin(), g.local_ranks.end());
  spec.local_devices.assign(g.local_devices.begin(), g.local_devices.end());
  return mp::GetRank(spec, ordinal, stream, out);
}

mp::Allocator ScratchOf(ffi::ScratchAllocator& scratch) {
  return [&scratch](size_t bytes, void** out) -> Status {
    std::optional<void*> ptr = scratch.Allocate(bytes, 16);
    if (!ptr.has_value()) {
      return Errorf("jaxmg: XLA could not allocate ", bytes,
                    " bytes of cuSOLVERMp workspace; lower XLA_PYTHON_CLIENT_MEM_FRACTION's claim "
                    "or the problem size");
    }
    *out = *ptr;
    return Status::Ok();
  };
}

// The result starts as a copy of the operand unless XLA aliased them.
Status CopyIn(cudaStream_t stream, const void* in, void* out, size_t bytes) {
  if (in == out) return Status::Ok();
  JAXMG_CUDA(cuda::api().cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream));
  return Status::Ok();
}

// The global M x N of a rank's (local columns, local rows) block, every
// rank's local matrix holding whole blocks.
Status Shape(ffi::Span<const int64_t> dims, const mp::Grid& g, int64_t block, int64_t* m,
             int64_t* n) {
  if (dims.size() != 2 || block < 1 || dims[0] % block || dims[1] % block) {
    return Errorf("jaxmg: a cuSOLVERMp rank's block must be whole ", block, " x ", block,
                  " blocks on its ", g.rows, " x ", g.cols, " grid, got ",
                  dims.size() == 2 ? dims[0] : -1, " x ", dims.size() == 2 ? dims[1] : -1);
  }
  *m = dims[1] * g.rows;
  *n = dims[0] * g.cols;
  return Status::Ok();
}

// The communicator's attributes, last in every handler (MpAttrs binds them).
#define JAXMG_MP_ATTRS                                                                \
  std::string_view group_id, int64_t n_ranks, ffi::Span<const int64_t> local_ranks,  \
      ffi::Span<const int64_t> local_devices, int64_t block, int64_t grid_rows,      \
      int64_t grid_cols

#define JAXMG_MP_PROLOGUE(a)                                                         \
  const Group group{group_id, n_ranks, local_ranks, local_devices};                  \
  mp::Rank* rank = nullptr;                                                          \
  mp::Grid grid;                                                                     \
  int64_t m = 0, n = 0;                                                              \
  JAXMG_FFI_RETURN(RankOf(group, ordinal, stream, &rank));                           \
  JAXMG_FFI_RETURN(mp::GridOf(*rank, static_cast<int32_t>(grid_rows),                \
                              static_cast<int32_t>(grid_cols), &grid));              \
  JAXMG_FFI_RETURN(Shape((a).dimensions(), grid, block, &m, &n));                    \
  const mp::Allocator alloc = ScratchOf(scratch)

#define JAXMG_FFI_RETURN(expr)                   \
  do {                                           \
    Status jaxmg_s_ = (expr);                    \
    if (!jaxmg_s_.ok()) return ToFfi(jaxmg_s_);  \
  } while (0)

template <ffi::DataType DT>
ffi::Error MpPotrf(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                   ffi::Buffer<DT> a, ffi::Result<ffi::Buffer<DT>> factor,
                   ffi::Result<ffi::Buffer<ffi::S32>> info, JAXMG_MP_ATTRS) {
  using T = ffi::NativeType<DT>;
  JAXMG_MP_PROLOGUE(a);
  if (m != n) return ffi::Error::InvalidArgument("jaxmg: potrf needs a square matrix");
  JAXMG_FFI_RETURN(CopyIn(stream, a.untyped_data(), factor->untyped_data(), a.size_bytes()));
  return ToFfi(mp::Potrf<T>(*rank, grid, stream, n, block, factor->typed_data(), info->typed_data(),
                            alloc));
}

template <ffi::DataType DT>
ffi::Error MpPotrs(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                   ffi::Buffer<DT> factor, ffi::Buffer<DT> bt, ffi::Result<ffi::Buffer<DT>> xt,
                   JAXMG_MP_ATTRS) {
  using T = ffi::NativeType<DT>;
  JAXMG_MP_PROLOGUE(factor);
  if (m != n || bt.dimensions().size() != 2 || bt.dimensions()[1] != factor.dimensions()[1]) {
    return ffi::Error::InvalidArgument(
        "jaxmg: right-hand sides must be (k, local rows), transposed, for a square factor");
  }
  JAXMG_FFI_RETURN(CopyIn(stream, bt.untyped_data(), xt->untyped_data(), bt.size_bytes()));
  return ToFfi(mp::Potrs<T>(*rank, grid, stream, n, block, factor.typed_data(), xt->typed_data(),
                            bt.dimensions()[0], alloc));
}

template <ffi::DataType DT>
ffi::Error MpGetrf(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                   ffi::Buffer<DT> a, ffi::Result<ffi::Buffer<DT>> lu,
                   ffi::Result<ffi::Buffer<ffi::S32>> piv, ffi::Result<ffi::Buffer<ffi::S32>> info,
                   JAXMG_MP_ATTRS) {
  using T = ffi::NativeType<DT>;
  JAXMG_MP_PROLOGUE(a);
  if (m != n || static_cast<int64_t>(piv->element_count()) != a.dimensions()[0]) {
    return ffi::Error::InvalidArgument(
        "jaxmg: getrf needs a square matrix and piv of its local columns");
  }
  JAXMG_FFI_RETURN(CopyIn(stream, a.untyped_data(), lu->untyped_data(), a.size_bytes()));
  return ToFfi(mp::Getrf<T>(*rank, grid, stream, n, block, lu->typed_data(), piv->typed_data(),
                            info->typed_data(), alloc));
}

template <ffi::DataType DT>
ffi::Error MpGetrs(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                   ffi::Buffer<DT> lu, ffi::Buffer<ffi::S32> piv, ffi::Buffer<DT> bt,
                   ffi::Result<ffi::Buffer<DT>> xt, JAXMG_MP_ATTRS) {
  using T = ffi::NativeType<DT>;
  JAXMG_MP_PROLOGUE(lu);
  if (m != n || static_cast<int64_t>(piv.element_count()) != lu.dimensions()[0] ||
      bt.dimensions().size() != 2 || bt.dimensions()[1] != lu.dimensions()[1]) {
    return ffi::Error::InvalidArgument(
        "jaxmg: piv must hold the local columns' pivots and b be (k, local rows)");
  }
  JAXMG_FFI_RETURN(CopyIn(stream, bt.untyped_data(), xt->untyped_data(), bt.size_bytes()));
  return ToFfi(mp::Getrs<T>(*rank, grid, stream, n, block, lu.typed_data(), piv.typed_data(),
                            xt->typed_data(), bt.dimensions()[0], alloc));
}

template <ffi::DataType DT>
ffi::Error MpSyevd(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                   ffi::Buffer<DT> a, ffi::Result<ffi::Buffer<DT>> a_out,
                   ffi::Result<ffi::Buffer<DT>> q, ffi::Result<ffi::Buffer<ffi::ToReal(DT)>> w,
                   ffi::Result<ffi::Buffer<ffi::S32>> info, JAXMG_MP_ATTRS) {
  using T = ffi::NativeType<DT>;
  JAXMG_MP_PROLOGUE(a);
  if (m != n || static_cast<int64_t>(w->element_count()) != n) {
    return ffi::Error::InvalidArgument("jaxmg: syevd needs a square matrix and N eigenvalues");
  }
  JAXMG_FFI_RETURN(CopyIn(stream, a.untyped_data(), a_out->untyped_data(), a.size_bytes()));
  return ToFfi(mp::Syevd<T>(*rank, grid, stream, n, block, a_out->typed_data(), q->typed_data(),
                            w->typed_data(), info->typed_data(), alloc));
}

template <ffi::DataType DT>
ffi::Error MpQr(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                ffi::Buffer<DT> a, ffi::Result<ffi::Buffer<DT>> q, ffi::Result<ffi::Buffer<DT>> r,
                ffi::Result<ffi::Buffer<ffi::S32>> info, JAXMG_MP_ATTRS) {
  using T = ffi::NativeType<DT>;
  JAXMG_MP_PROLOGUE(a);
  if (m < n || r->dimensions().size() != 2 || r->dimensions()[0] != a.dimensions()[0] ||
      r->dimensions()[1] * grid.rows != n) {
    return ffi::Error::InvalidArgument(
        "jaxmg: qr needs M >= N and r as the rank's block of an N x N matrix");
  }
  JAXMG_FFI_RETURN(CopyIn(stream, a.untyped_data(), q->untyped_data(), a.size_bytes()));
  return ToFfi(mp::Qr<T>(*rank, grid, stream, m, n, block, q->typed_data(), r->typed_data(),
                         info->typed_data(), alloc));
}

auto MpPrefix() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Ctx<ffi::DeviceOrdinal>()
      .Ctx<ffi::ScratchAllocator>();
}

template <typename Binding>
auto MpAttrs(Binding binding) {
  return std::move(binding)
      .template Attr<std::string_view>("group")
      .template Attr<int64_t>("n_ranks")
      .template Attr<ffi::Span<const int64_t>>("local_ranks")
      .template Attr<ffi::Span<const int64_t>>("local_devices")
      .template Attr<int64_t>("block")
      .template Attr<int64_t>("grid_rows")
      .template Attr<int64_t>("grid_cols");
}

template <ffi::DataType DT>
auto MpPotrfBinding() {
  return MpAttrs(MpPrefix()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<ffi::S32>>());
}

template <ffi::DataType DT>
auto MpSolveBinding() {  // potrs with a factor
  return MpAttrs(MpPrefix()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>());
}

template <ffi::DataType DT>
auto MpGetrfBinding() {
  return MpAttrs(MpPrefix()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<ffi::S32>>()
                     .template Ret<ffi::Buffer<ffi::S32>>());
}

template <ffi::DataType DT>
auto MpGetrsBinding() {
  return MpAttrs(MpPrefix()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Arg<ffi::Buffer<ffi::S32>>()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>());
}

template <ffi::DataType DT>
auto MpSyevdBinding() {
  return MpAttrs(MpPrefix()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<ffi::ToReal(DT)>>()
                     .template Ret<ffi::Buffer<ffi::S32>>());
}

template <ffi::DataType DT>
auto MpQrBinding() {
  return MpAttrs(MpPrefix()
                     .template Arg<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<DT>>()
                     .template Ret<ffi::Buffer<ffi::S32>>());
}

#undef JAXMG_MP_PROLOGUE
#undef JAXMG_MP_ATTRS
#undef JAXMG_FFI_RETURN

}  // namespace
}  // namespace jaxmg

JAXMG_DEFINE_TARGETS(mp_potrf, cuda, jaxmg::MpPotrf, jaxmg::MpPotrfBinding);
JAXMG_DEFINE_TARGETS(mp_potrs, cuda, jaxmg::MpPotrs, jaxmg::MpSolveBinding);
JAXMG_DEFINE_TARGETS(mp_getrf, cuda, jaxmg::MpGetrf, jaxmg::MpGetrfBinding);
JAXMG_DEFINE_TARGETS(mp_getrs, cuda, jaxmg::MpGetrs, jaxmg::MpGetrsBinding);
JAXMG_DEFINE_TARGETS(mp_syevd, cuda, jaxmg::MpSyevd, jaxmg::MpSyevdBinding);
JAXMG_DEFINE_TARGETS(mp_qr, cuda, jaxmg::MpQr, jaxmg::MpQrBinding);
