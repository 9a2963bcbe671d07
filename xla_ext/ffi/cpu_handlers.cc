// XLA FFI handlers for platform "cpu". Every device's thread enters the
// handler with its row block; the participants meet, and the leader converts
// the blocks to block-cyclic in place, runs the LAPACK engine and writes every
// participant's outputs.
#include <complex>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/common/scalar.h"
#include "xla_ext/engines/block_cyclic_matrix.h"
#include "xla_ext/engines/lapack/engine.h"
#include "xla_ext/ffi/common.h"
#include "xla_ext/layout/block_cyclic.h"
#include "xla_ext/layout/host_mover.h"
#include "xla_ext/rendezvous/rendezvous.h"

namespace jaxmg {
namespace {

namespace ffi = ::xla::ffi;
using ffi_common::CallAttrs;
using ffi_common::CallSite;
using ffi_common::CheckMatrixBlock;
using ffi_common::ToFfi;
using layout::ColumnLayout;
using layout::Direction;

CallSite MakeSite(ffi::RunId run, ffi::Buffer<ffi::S32> index, int64_t n_devices, int64_t tile,
                  int64_t call_id, int64_t timeout_ms) {
  return CallSite{run.run_id,
                  call_id,
                  static_cast<int32_t>(n_devices),
                  index.typed_data()[0],
                  tile,
                  std::chrono::milliseconds(timeout_ms)};
}

// The participant's working copy of A: XLA aliases it with the input, so the
// copy below only happens if XLA chose not to.
template <typename In, typename Out>
void* WorkBuffer(const In& in, Out& out) {
  if (out->untyped_data() != in.untyped_data()) {
    std::memcpy(out->untyped_data(), in.untyped_data(), in.size_bytes());
  }
  return out->untyped_data();
}

Status Convert(const ColumnLayout& layout, const std::vector<char*>& blocks, size_t elem_bytes,
               Direction direction) {
  layout::HostTileMover mover(blocks, layout.n_cols * layout.tile * elem_bytes);
  return layout::ExecuteCycles(layout::PlanCycles(layout, direction), mover);
}

template <typename T>
void FillNaN(T* data, size_t count) {
  std::fill(data, data + count, QuietNaN<T>());
}

template <typename P>
std::vector<char*> Blocks(const std::vector<void*>& payloads) {
  std::vector<char*> blocks;
  for (void* p : payloads) blocks.push_back(static_cast<char*>(static_cast<P*>(p)->a));
  return blocks;
}

template <typename T, typename P>
BlockCyclicMatrix<T> Matrix(const ColumnLayout& layout, const std::vector<void*>& payloads) {
  BlockCyclicMatrix<T> m{layout, {}};
  for (void* p : payloads) m.local.push_back(static_cast<T*>(static_cast<P*>(p)->a));
  return m;
}

//===--------------------------------------------------------------------===//
// layout: convert row blocks to block-cyclic tiles or back (tests, tools)
//===--------------------------------------------------------------------===//

struct LayoutShard {
  void* a;
};

ffi::Error LayoutImpl(ffi::RunId run, ffi::AnyBuffer a, ffi::Buffer<ffi::S32> index,
                      ffi::Result<ffi::AnyBuffer> a_out, int64_t n_devices, int64_t tile,
                      int64_t call_id, int64_t timeout_ms, bool to_block_cyclic) {
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (!s.ok()) return ToFfi(s);
  LayoutShard shard{WorkBuffer(a, a_out)};
  const size_t elem_bytes = ffi::ByteWidth(a.element_type());
  const Direction direction =
      to_block_cyclic ? Direction::kToBlockCyclic : Direction::kToContiguous;
  return ToFfi(rendezvous::Meet(
      {site.call_id, site.run_id}, site.n_devices, site.index, &shard, site.timeout,
      [&](const std::vector<void*>& all) {
        return Convert(layout, Blocks<LayoutShard>(all), elem_bytes, direction);
      }));
}

//===--------------------------------------------------------------------===//
// potrs: Cholesky factor + solve. A's blocks keep the factor, block-cyclic.
//===--------------------------------------------------------------------===//

template <typename T>
struct PotrsShard {
  void* a;
  const T* b;
  T* x;
  int32_t* info;
};

// B arrives row-sharded (rows_b = N / n per participant) or replicated
// (rows_b = N everywhere); X leaves in the same layout. The engine works on
// column-major M = A^T = conj(A), so it solves M conj(X) = conj(B).
template <typename T>
Status PotrsLeader(const ColumnLayout& layout, int64_t rows_b, int64_t k, bool b_sharded,
                   const std::vector<void*>& all) {
  using P = PotrsShard<T>;
  const int64_t n = layout.n_cols;
  JAXMG_RETURN_IF_ERROR(Convert(layout, Blocks<P>(all), sizeof(T), Direction::kToBlockCyclic));
  std::vector<T> rhs(static_cast<size_t>(n) * k);
  const int n_sources = b_sharded ? static_cast<int>(all.size()) : 1;
  for (int d = 0; d < n_sources; ++d) {
    const T* b = static_cast<P*>(all[d])->b;
    for (int64_t r = 0; r < rows_b; ++r) {
      for (int64_t c = 0; c < k; ++c) rhs[(d * rows_b + r) + c * n] = Conj(b[r * k + c]);
    }
  }
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(lapack::Potrs(Matrix<T, P>(layout, all), rhs.data(), k, &info));
  for (size_t d = 0; d < all.size(); ++d) {
    P& p = *static_cast<P*>(all[d]);
    const int64_t first_row = b_sharded ? d * rows_b : 0;
    for (int64_t r = 0; r < rows_b; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        p.x[r * k + c] = info == 0 ? Conj(rhs[(first_row + r) + c * n]) : QuietNaN<T>();
      }
    }
    *p.info = info;
  }
  return Status::Ok();
}

template <ffi::DataType DT>
ffi::Error PotrsImpl(ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<DT> b,
                     ffi::Buffer<ffi::S32> index, ffi::Result<ffi::Buffer<DT>> a_out,
                     ffi::Result<ffi::Buffer<DT>> x, ffi::Result<ffi::Buffer<ffi::S32>> info,
                     int64_t n_devices, int64_t tile, int64_t call_id, int64_t timeout_ms,
                     bool b_sharded) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (!s.ok()) return ToFfi(s);
  auto b_dims = b.dimensions();
  const int64_t expected_rows = b_sharded ? layout.n_cols / site.n_devices : layout.n_cols;
  if (b_dims.size() != 2 || b_dims[0] != expected_rows) {
    return ffi::Error::InvalidArgument("jaxmg: b's block must have " +
                                       std::to_string(expected_rows) + " rows");
  }
  PotrsShard<T> shard{WorkBuffer(a, a_out), b.typed_data(), x->typed_data(),
                      info->typed_data()};
  return ToFfi(rendezvous::Meet({site.call_id, site.run_id}, site.n_devices, site.index, &shard,
                                site.timeout, [&](const std::vector<void*>& all) {
                                  return PotrsLeader<T>(layout, b_dims[0], b_dims[1], b_sharded,
                                                        all);
                                }));
}

//===--------------------------------------------------------------------===//
// potri: inverse of an SPD/HPD matrix, returned in A's row-block layout.
//===--------------------------------------------------------------------===//

template <typename T>
struct PotriShard {
  void* a;
  int32_t* info;
};

// inv(M) = inv(A)^T, so M's inverse read back row-major is A's inverse.
template <typename T>
Status PotriLeader(const ColumnLayout& layout, const std::vector<void*>& all) {
  using P = PotriShard<T>;
  const std::vector<char*> blocks = Blocks<P>(all);
  JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToBlockCyclic));
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(lapack::Potri(Matrix<T, P>(layout, all), &info));
  JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToContiguous));
  const size_t block_elements = layout.n_cols * (layout.n_cols / layout.n_devices);
  for (void* v : all) {
    P& p = *static_cast<P*>(v);
    if (info != 0) FillNaN(static_cast<T*>(p.a), block_elements);
    *p.info = info;
  }
  return Status::Ok();
}

template <ffi::DataType DT>
ffi::Error PotriImpl(ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<ffi::S32> index,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> info,
                     int64_t n_devices, int64_t tile, int64_t call_id, int64_t timeout_ms) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (!s.ok()) return ToFfi(s);
  PotriShard<T> shard{WorkBuffer(a, a_out), info->typed_data()};
  return ToFfi(rendezvous::Meet(
      {site.call_id, site.run_id}, site.n_devices, site.index, &shard, site.timeout,
      [&](const std::vector<void*>& all) { return PotriLeader<T>(layout, all); }));
}

//===--------------------------------------------------------------------===//
// syevd: eigenvalues (ascending) and optionally eigenvectors. The vectors of
// M = conj(A) are conj(V); read back row-major the blocks hold rows of V^H.
//===--------------------------------------------------------------------===//

template <typename T>
struct SyevdShard {
  void* a;
  Real<T>* w;
  int32_t* info;
};

template <typename T>
Status SyevdLeader(const ColumnLayout& layout, bool vectors, const std::vector<void*>& all) {
  using P = SyevdShard<T>;
  const std::vector<char*> blocks = Blocks<P>(all);
  JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToBlockCyclic));
  const int64_t n = layout.n_cols;
  std::vector<Real<T>> w(n);
  int32_t info = 0;
  JAXMG_RETURN_IF_ERROR(lapack::Syevd(Matrix<T, P>(layout, all), w.data(), vectors, &info));
  if (vectors) {
    JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToContiguous));
  }
  for (void* v : all) {
    P& p = *static_cast<P*>(v);
    if (info == 0) {
      std::copy(w.begin(), w.end(), p.w);
    } else {
      FillNaN(p.w, n);
      if (vectors) FillNaN(static_cast<T*>(p.a), n * (n / layout.n_devices));
    }
    *p.info = info;
  }
  return Status::Ok();
}

template <ffi::DataType DT>
ffi::Error SyevdImpl(ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<ffi::S32> index,
                     ffi::Result<ffi::Buffer<DT>> a_out,
                     ffi::Result<ffi::Buffer<ffi::ToReal(DT)>> w,
                     ffi::Result<ffi::Buffer<ffi::S32>> info, int64_t n_devices, int64_t tile,
                     int64_t call_id, int64_t timeout_ms, bool vectors) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (!s.ok()) return ToFfi(s);
  if (static_cast<int64_t>(w->element_count()) != layout.n_cols) {
    return ffi::Error::InvalidArgument("jaxmg: w must hold N eigenvalues");
  }
  SyevdShard<T> shard{WorkBuffer(a, a_out), w->typed_data(), info->typed_data()};
  return ToFfi(rendezvous::Meet(
      {site.call_id, site.run_id}, site.n_devices, site.index, &shard, site.timeout,
      [&](const std::vector<void*>& all) { return SyevdLeader<T>(layout, vectors, all); }));
}

//===--------------------------------------------------------------------===//
// Bindings
//===--------------------------------------------------------------------===//

// Args: a (row block, aliased to result 0), index (this device's position
// on the mesh axis). Results: a (converted in place).
auto LayoutBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .Arg<ffi::AnyBuffer>()
                       .Arg<ffi::Buffer<ffi::S32>>()
                       .Ret<ffi::AnyBuffer>())
      .Attr<bool>("to_block_cyclic");
}

// Args: a, b (N/n x K block or N x K replicated), index.
// Results: a (Cholesky factor, block-cyclic), x (b's layout), info (1,).
template <ffi::DataType DT>
auto PotrsBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<DT>>()
                       .template Ret<ffi::Buffer<DT>>()
                       .template Ret<ffi::Buffer<ffi::S32>>())
      .template Attr<bool>("b_sharded");
}

// Args: a, index. Results: a (the inverse, row blocks), info (1,).
template <ffi::DataType DT>
auto PotriBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<DT>>()
                       .template Ret<ffi::Buffer<ffi::S32>>());
}

// Args: a, index. Results: a (rows of V^H), w (N,), info (1,).
template <ffi::DataType DT>
auto SyevdBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<DT>>()
                       .template Ret<ffi::Buffer<ffi::ToReal(DT)>>()
                       .template Ret<ffi::Buffer<ffi::S32>>())
      .template Attr<bool>("vectors");
}

}  // namespace
}  // namespace jaxmg

JAXMG_DEFINE_TARGETS(potrs, cpu, jaxmg::PotrsImpl, jaxmg::PotrsBinding);
JAXMG_DEFINE_TARGETS(potri, cpu, jaxmg::PotriImpl, jaxmg::PotriBinding);
JAXMG_DEFINE_TARGETS(syevd, cpu, jaxmg::SyevdImpl, jaxmg::SyevdBinding);
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_layout_cpu, jaxmg::LayoutImpl, jaxmg::LayoutBinding());
