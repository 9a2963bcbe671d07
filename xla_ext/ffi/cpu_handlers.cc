// XLA FFI handlers for platform "cpu". Every device's thread enters the
// handler with its row block; the participants meet, and the leader converts
// the blocks to block-cyclic in place, runs the LAPACK engine and writes every
// participant's outputs.
#include <algorithm>
#include <array>
#include <complex>
#include <cstring>
#include <map>
#include <string>
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
  return ToFfi(ffi_common::MeetParticipants(
      site, &shard, nullptr, [&](const std::vector<void*>& all) {
        return Convert(layout, Blocks<LayoutShard>(all), elem_bytes, direction);
      }));
}

//===--------------------------------------------------------------------===//
// potrs: Cholesky factor + solve. A's blocks keep the factor, block-cyclic.
//===--------------------------------------------------------------------===//

// One participant's buffers; a routine uses the ones it needs. The byte
// counts let the cross-process transport copy them.
template <typename T>
struct Shard {
  void* a = nullptr;           // matrix block (or the factor, read-only)
  const T* b = nullptr;        // right-hand sides
  T* x = nullptr;              // solution, b's layout
  const int32_t* piv = nullptr;  // LU pivots in (solver layout)
  int32_t* piv_out = nullptr;  // LU pivots out
  Real<T>* w = nullptr;        // eigenvalues
  int32_t* info = nullptr;
  uint64_t a_bytes = 0, b_bytes = 0, x_bytes = 0, piv_bytes = 0, piv_out_bytes = 0, w_bytes = 0;
  bool a_written = false;      // a comes back (false for a factor that is only read)
};

// Across processes on CPUs the leader works on copies: a follower sends its
// inputs, the leader answers with the outputs, which the follower writes back.
template <typename T>
class HostCopyTransport : public processes::Transport {
 public:
  explicit HostCopyTransport(Shard<T>* mine) : mine_(mine) {}

  Status Export(std::string* request) override {
    const Shard<T>& m = *mine_;
    const Sizes sizes = SizesOf(m);
    request->append(reinterpret_cast<const char*>(sizes.data()), sizeof(sizes));
    request->append(static_cast<const char*>(m.a), m.a_bytes);
    request->append(reinterpret_cast<const char*>(m.b), m.b_bytes);
    request->append(reinterpret_cast<const char*>(m.piv), m.piv_bytes);
    return Status::Ok();
  }

  Status Import(int index, const std::string& request, void** payload) override {
    Sizes sizes;
    if (request.size() < sizeof(sizes)) return Status::Error("jaxmg: short request");
    std::memcpy(sizes.data(), request.data(), sizeof(sizes));
    if (request.size() != sizeof(sizes) + sizes[0] + sizes[1] + sizes[3]) {
      return Status::Error("jaxmg: a follower's request does not match its sizes");
    }
    // Every byte count and whether a comes back; info's presence may differ.
    const Sizes expected = SizesOf(*mine_);
    if (!std::equal(expected.begin(), expected.end() - 1, sizes.begin())) {
      return Errorf("jaxmg: participant ", index,
                    " brought buffers of another shape to this call: its processes run "
                    "different programs or calls out of order");
    }
    Copy& c = copies_[index];
    const char* in = request.data() + sizeof(sizes);
    c.a.assign(in, in + sizes[0]);
    c.b.assign(in + sizes[0], in + sizes[0] + sizes[1]);
    c.piv.assign(in + sizes[0] + sizes[1], in + sizes[0] + sizes[1] + sizes[3]);
    c.x.assign(sizes[2], 0);
    c.piv_out.assign(sizes[4], 0);
    c.w.assign(sizes[5], 0);
    Shard<T>& s = c.shard;
    s.a = sizes[0] ? c.a.data() : nullptr;
    s.b = sizes[1] ? reinterpret_cast<const T*>(c.b.data()) : nullptr;
    s.x = sizes[2] ? reinterpret_cast<T*>(c.x.data()) : nullptr;
    s.piv = sizes[3] ? reinterpret_cast<const int32_t*>(c.piv.data()) : nullptr;
    s.piv_out = sizes[4] ? reinterpret_cast<int32_t*>(c.piv_out.data()) : nullptr;
    s.w = sizes[5] ? reinterpret_cast<Real<T>*>(c.w.data()) : nullptr;
    s.info = sizes[7] ? &c.info : nullptr;
    s.a_bytes = sizes[0];
    s.a_written = sizes[6] != 0;
    *payload = &s;
    return Status::Ok();
  }

  Status Reply(int index, std::string* reply) override {
    Copy& c = copies_[index];
    if (c.shard.a_written) reply->append(c.a.data(), c.a.size());
    reply->append(c.x.data(), c.x.size());
    reply->append(c.piv_out.data(), c.piv_out.size());
    reply->append(c.w.data(), c.w.size());
    if (c.shard.info) reply->append(reinterpret_cast<const char*>(&c.info), sizeof(c.info));
    copies_.erase(index);
    return Status::Ok();
  }

  Status Apply(const std::string& reply) override {
    Shard<T>& m = *mine_;
    const uint64_t expected = (m.a_written ? m.a_bytes : 0) + m.x_bytes + m.piv_out_bytes +
                              m.w_bytes + (m.info ? sizeof(int32_t) : 0);
    if (reply.size() != expected) return Status::Error("jaxmg: the leader's answer is malformed");
    const char* in = reply.data();
    auto take = [&in](void* out, uint64_t bytes) {
      if (bytes) std::memcpy(out, in, bytes);
      in += bytes;
    };
    if (m.a_written) take(m.a, m.a_bytes);
    take(m.x, m.x_bytes);
    take(m.piv_out, m.piv_out_bytes);
    take(m.w, m.w_bytes);
    if (m.info) take(m.info, sizeof(int32_t));
    return Status::Ok();
  }

 private:
  // a, b, x, piv, piv_out, w bytes; a written back; info present.
  using Sizes = std::array<uint64_t, 8>;
  static Sizes SizesOf(const Shard<T>& m) {
    return {m.a_bytes, m.b_bytes, m.x_bytes, m.piv_bytes, m.piv_out_bytes,
            m.w_bytes, m.a_written ? 1u : 0u, m.info ? 1u : 0u};
  }

  struct Copy {
    std::vector<char> a, b, x, piv, piv_out, w;
    int32_t info = 0;
    Shard<T> shard;
  };
  Shard<T>* mine_;
  std::map<int, Copy> copies_;
};

// B arrives row-sharded (rows_b = N / n per participant) or replicated
// (rows_b = N everywhere). Returns it column-major N x k, conjugated when
// `conj` (the engines see M = A^T, so Hermitian solves run on conj(A)).
template <typename T>
std::vector<T> GatherRhs(const std::vector<void*>& all, int64_t n, int64_t rows_b, int64_t k,
                         bool b_sharded, bool conj) {
  std::vector<T> rhs(static_cast<size_t>(n) * k);
  const int n_sources = b_sharded ? static_cast<int>(all.size()) : 1;
  for (int d = 0; d < n_sources; ++d) {
    const T* b = static_cast<Shard<T>*>(all[d])->b;
    for (int64_t r = 0; r < rows_b; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const T v = b[r * k + c];
        rhs[(d * rows_b + r) + c * n] = conj ? Conj(v) : v;
      }
    }
  }
  return rhs;
}

// Writes X back in B's layout (NaN everywhere when `failed`).
template <typename T>
void ScatterRhs(const std::vector<T>& rhs, const std::vector<void*>& all, int64_t n,
                int64_t rows_b, int64_t k, bool b_sharded, bool conj, bool failed) {
  for (size_t d = 0; d < all.size(); ++d) {
    T* x = static_cast<Shard<T>*>(all[d])->x;
    const int64_t first_row = b_sharded ? d * rows_b : 0;
    for (int64_t r = 0; r < rows_b; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const T v = rhs[(first_row + r) + c * n];
        x[r * k + c] = failed ? QuietNaN<T>() : (conj ? Conj(v) : v);
      }
    }
  }
}

// A failed inverse or eigendecomposition: every participant's block is NaN.
template <typename T>
void FillBlocksNaN(const ColumnLayout& layout, const std::vector<void*>& all) {
  const size_t block_elements = layout.n_cols * (layout.n_cols / layout.n_devices);
  for (void* v : all) FillNaN(static_cast<T*>(static_cast<Shard<T>*>(v)->a), block_elements);
}

template <typename T>
void PublishInfo(const std::vector<void*>& all, int32_t info) {
  for (void* v : all) *static_cast<Shard<T>*>(v)->info = info;
}

// LU pivots live like A's columns: participant d holds those of its tiles,
// in its local order, so they stay with the factor between calls.
template <typename T>
void ScatterPivots(const ColumnLayout& layout, const std::vector<int32_t>& ipiv,
                   const std::vector<void*>& all) {
  for (int64_t t = 0; t < layout.tiles(); ++t) {
    const layout::Slot s = layout.BlockCyclic(t);
    int32_t* out = static_cast<Shard<T>*>(all[s.device])->piv_out + s.index * layout.tile;
    std::copy_n(ipiv.data() + t * layout.tile, layout.tile, out);
  }
}

template <typename T>
std::vector<int32_t> GatherPivots(const ColumnLayout& layout, const std::vector<void*>& all) {
  std::vector<int32_t> ipiv(layout.n_cols);
  for (int64_t t = 0; t < layout.tiles(); ++t) {
    const layout::Slot s = layout.BlockCyclic(t);
    const int32_t* in = static_cast<Shard<T>*>(all[s.device])->piv + s.index * layout.tile;
    std::copy_n(in, layout.tile, ipiv.data() + t * layout.tile);
  }
  return ipiv;
}

Status CheckRhs(ffi::Span<const int64_t> b_dims, const ColumnLayout& layout, int32_t n_devices,
                bool b_sharded) {
  const int64_t expected_rows = b_sharded ? layout.n_cols / n_devices : layout.n_cols;
  if (b_dims.size() != 2 || b_dims[0] != expected_rows) {
    return Errorf("jaxmg: b's block must have ", expected_rows, " rows");
  }
  return Status::Ok();
}

// Runs `leader` over every participant's Shard once all have arrived.
template <typename T, typename Leader>
ffi::Error Collective(const CallSite& site, Shard<T>& mine, Leader&& leader) {
  HostCopyTransport<T> transport(&mine);
  return ToFfi(ffi_common::MeetParticipants(site, &mine, &transport, std::forward<Leader>(leader)));
}

//===--------------------------------------------------------------------===//
// potrs: Cholesky factor + solve. A's blocks keep the factor, block-cyclic.
//===--------------------------------------------------------------------===//

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
  if (s.ok()) s = CheckRhs(b.dimensions(), layout, site.n_devices, b_sharded);
  if (!s.ok()) return ToFfi(s);
  const int64_t rows_b = b.dimensions()[0], k = b.dimensions()[1];
  Shard<T> mine;
  mine.a = WorkBuffer(a, a_out);
  mine.a_bytes = a.size_bytes();
  mine.a_written = true;
  mine.b = b.typed_data();
  mine.b_bytes = b.size_bytes();
  mine.x = x->typed_data();
  mine.x_bytes = x->size_bytes();
  mine.info = info->typed_data();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    const int64_t n = layout.n_cols;
    JAXMG_RETURN_IF_ERROR(Convert(layout, Blocks<Shard<T>>(all), sizeof(T),
                                  Direction::kToBlockCyclic));
    std::vector<T> rhs = GatherRhs<T>(all, n, rows_b, k, b_sharded, true);
    int32_t status = 0;
    JAXMG_RETURN_IF_ERROR(lapack::Potrs(Matrix<T, Shard<T>>(layout, all), rhs.data(), k, &status));
    ScatterRhs(rhs, all, n, rows_b, k, b_sharded, true, status != 0);
    PublishInfo<T>(all, status);
    return Status::Ok();
  });
}

//===--------------------------------------------------------------------===//
// potrf / cholsolve: the factor alone (kept block-cyclic in A's buffers), and
// solves against it; a factor is reused across any number of solves.
//===--------------------------------------------------------------------===//

template <ffi::DataType DT>
ffi::Error PotrfImpl(ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<ffi::S32> index,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> info,
                     int64_t n_devices, int64_t tile, int64_t call_id, int64_t timeout_ms) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (!s.ok()) return ToFfi(s);
  Shard<T> mine;
  mine.a = WorkBuffer(a, a_out);
  mine.a_bytes = a.size_bytes();
  mine.a_written = true;
  mine.info = info->typed_data();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    JAXMG_RETURN_IF_ERROR(Convert(layout, Blocks<Shard<T>>(all), sizeof(T),
                                  Direction::kToBlockCyclic));
    int32_t status = 0;
    JAXMG_RETURN_IF_ERROR(lapack::Potrf(Matrix<T, Shard<T>>(layout, all), &status));
    PublishInfo<T>(all, status);
    return Status::Ok();
  });
}

template <ffi::DataType DT>
ffi::Error CholSolveImpl(ffi::RunId run, ffi::Buffer<DT> factor, ffi::Buffer<DT> b,
                         ffi::Buffer<ffi::S32> index, ffi::Result<ffi::Buffer<DT>> x,
                         int64_t n_devices, int64_t tile, int64_t call_id, int64_t timeout_ms,
                         bool b_sharded) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("factor", factor.dimensions(), site, &layout);
  if (s.ok()) s = CheckRhs(b.dimensions(), layout, site.n_devices, b_sharded);
  if (!s.ok()) return ToFfi(s);
  const int64_t rows_b = b.dimensions()[0], k = b.dimensions()[1];
  Shard<T> mine;
  mine.a = factor.untyped_data();
  mine.a_bytes = factor.size_bytes();
  mine.b = b.typed_data();
  mine.b_bytes = b.size_bytes();
  mine.x = x->typed_data();
  mine.x_bytes = x->size_bytes();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    const int64_t n = layout.n_cols;
    std::vector<T> rhs = GatherRhs<T>(all, n, rows_b, k, b_sharded, true);
    JAXMG_RETURN_IF_ERROR(lapack::CholSolve(Matrix<T, Shard<T>>(layout, all), rhs.data(), k));
    ScatterRhs(rhs, all, n, rows_b, k, b_sharded, true, false);
    return Status::Ok();
  });
}

//===--------------------------------------------------------------------===//
// getrf / lusolve: LU with partial pivoting. The engine factors M = A^T (A's
// row blocks read column-major), so A X = B is M^T X = B, A^T X = B is
// M X = B and A^H X = B is M conj(X) = conj(B).
//===--------------------------------------------------------------------===//

template <ffi::DataType DT>
ffi::Error GetrfImpl(ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<ffi::S32> index,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> piv,
                     ffi::Result<ffi::Buffer<ffi::S32>> info, int64_t n_devices, int64_t tile,
                     int64_t call_id, int64_t timeout_ms) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (s.ok() && static_cast<int64_t>(piv->element_count()) * site.n_devices != layout.n_cols) {
    s = Status::Error("jaxmg: piv must hold N / n_devices pivots per device");
  }
  if (!s.ok()) return ToFfi(s);
  Shard<T> mine;
  mine.a = WorkBuffer(a, a_out);
  mine.a_bytes = a.size_bytes();
  mine.a_written = true;
  mine.piv_out = piv->typed_data();
  mine.piv_out_bytes = piv->size_bytes();
  mine.info = info->typed_data();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    JAXMG_RETURN_IF_ERROR(Convert(layout, Blocks<Shard<T>>(all), sizeof(T),
                                  Direction::kToBlockCyclic));
    std::vector<int32_t> ipiv(layout.n_cols);
    int32_t status = 0;
    JAXMG_RETURN_IF_ERROR(lapack::Getrf(Matrix<T, Shard<T>>(layout, all), ipiv.data(), &status));
    ScatterPivots<T>(layout, ipiv, all);
    PublishInfo<T>(all, status);
    return Status::Ok();
  });
}

template <ffi::DataType DT>
ffi::Error LuSolveImpl(ffi::RunId run, ffi::Buffer<DT> factor, ffi::Buffer<ffi::S32> piv,
                       ffi::Buffer<DT> b, ffi::Buffer<ffi::S32> index,
                       ffi::Result<ffi::Buffer<DT>> x, int64_t n_devices, int64_t tile,
                       int64_t call_id, int64_t timeout_ms, bool b_sharded, int64_t trans) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("factor", factor.dimensions(), site, &layout);
  if (s.ok()) s = CheckRhs(b.dimensions(), layout, site.n_devices, b_sharded);
  if (s.ok() && (trans < 0 || trans > 2)) s = Errorf("jaxmg: trans=", trans, " must be 0, 1 or 2");
  if (!s.ok()) return ToFfi(s);
  const int64_t rows_b = b.dimensions()[0], k = b.dimensions()[1];
  Shard<T> mine;
  mine.a = factor.untyped_data();
  mine.a_bytes = factor.size_bytes();
  mine.piv = piv.typed_data();
  mine.piv_bytes = piv.size_bytes();
  mine.b = b.typed_data();
  mine.b_bytes = b.size_bytes();
  mine.x = x->typed_data();
  mine.x_bytes = x->size_bytes();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    const int64_t n = layout.n_cols;
    const bool conj = trans == 2;
    std::vector<T> rhs = GatherRhs<T>(all, n, rows_b, k, b_sharded, conj);
    std::vector<int32_t> ipiv = GatherPivots<T>(layout, all);
    JAXMG_RETURN_IF_ERROR(lapack::Getrs(Matrix<T, Shard<T>>(layout, all), ipiv.data(),
                                        trans == 0 ? 'T' : 'N', rhs.data(), k));
    ScatterRhs(rhs, all, n, rows_b, k, b_sharded, conj, false);
    return Status::Ok();
  });
}

//===--------------------------------------------------------------------===//
// potri: inverse of an SPD/HPD matrix, returned in A's row-block layout.
//===--------------------------------------------------------------------===//

// inv(M) = inv(A)^T, so M's inverse read back row-major is A's inverse.
template <ffi::DataType DT>
ffi::Error PotriImpl(ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<ffi::S32> index,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> info,
                     int64_t n_devices, int64_t tile, int64_t call_id, int64_t timeout_ms) {
  using T = ffi::NativeType<DT>;
  const CallSite site = MakeSite(run, index, n_devices, tile, call_id, timeout_ms);
  ColumnLayout layout;
  Status s = CheckMatrixBlock("a", a.dimensions(), site, &layout);
  if (!s.ok()) return ToFfi(s);
  Shard<T> mine;
  mine.a = WorkBuffer(a, a_out);
  mine.a_bytes = a.size_bytes();
  mine.a_written = true;
  mine.info = info->typed_data();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    const std::vector<char*> blocks = Blocks<Shard<T>>(all);
    JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToBlockCyclic));
    int32_t status = 0;
    JAXMG_RETURN_IF_ERROR(lapack::Potri(Matrix<T, Shard<T>>(layout, all), &status));
    JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToContiguous));
    if (status != 0) FillBlocksNaN<T>(layout, all);
    PublishInfo<T>(all, status);
    return Status::Ok();
  });
}

//===--------------------------------------------------------------------===//
// syevd: eigenvalues (ascending) and optionally eigenvectors. The vectors of
// M = conj(A) are conj(V); read back row-major the blocks hold rows of V^H.
//===--------------------------------------------------------------------===//

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
  Shard<T> mine;
  mine.a = WorkBuffer(a, a_out);
  mine.a_bytes = a.size_bytes();
  mine.a_written = true;
  mine.w = w->typed_data();
  mine.w_bytes = w->size_bytes();
  mine.info = info->typed_data();
  return Collective(site, mine, [&](const std::vector<void*>& all) -> Status {
    const std::vector<char*> blocks = Blocks<Shard<T>>(all);
    JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToBlockCyclic));
    const int64_t n = layout.n_cols;
    std::vector<Real<T>> values(n);
    int32_t status = 0;
    JAXMG_RETURN_IF_ERROR(
        lapack::Syevd(Matrix<T, Shard<T>>(layout, all), values.data(), vectors, &status));
    if (vectors) {
      JAXMG_RETURN_IF_ERROR(Convert(layout, blocks, sizeof(T), Direction::kToContiguous));
      if (status != 0) FillBlocksNaN<T>(layout, all);
    }
    for (void* v : all) {
      Real<T>* out = static_cast<Shard<T>*>(v)->w;
      if (status == 0) {
        std::copy(values.begin(), values.end(), out);
      } else {
        FillNaN(out, n);
      }
    }
    PublishInfo<T>(all, status);
    return Status::Ok();
  });
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

// Args: factor (block-cyclic, read), b, index. Results: x.
template <ffi::DataType DT>
auto CholSolveBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<DT>>())
      .template Attr<bool>("b_sharded");
}

// Args: a, index. Results: a (LU factor, block-cyclic), piv (N/n,), info (1,).
template <ffi::DataType DT>
auto GetrfBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<DT>>()
                       .template Ret<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<ffi::S32>>());
}

// Args: factor, piv, b, index. Results: x. trans: 0 (A), 1 (A^T), 2 (A^H).
template <ffi::DataType DT>
auto LuSolveBinding() {
  return CallAttrs(ffi::Ffi::Bind()
                       .Ctx<ffi::RunId>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Arg<ffi::Buffer<DT>>()
                       .template Arg<ffi::Buffer<ffi::S32>>()
                       .template Ret<ffi::Buffer<DT>>())
      .template Attr<bool>("b_sharded")
      .template Attr<int64_t>("trans");
}

// Args: a, index. Results: a (the inverse, row blocks; potrf: the factor), info (1,).
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
JAXMG_DEFINE_TARGETS(potrf, cpu, jaxmg::PotrfImpl, jaxmg::PotriBinding);
JAXMG_DEFINE_TARGETS(cholsolve, cpu, jaxmg::CholSolveImpl, jaxmg::CholSolveBinding);
JAXMG_DEFINE_TARGETS(getrf, cpu, jaxmg::GetrfImpl, jaxmg::GetrfBinding);
JAXMG_DEFINE_TARGETS(lusolve, cpu, jaxmg::LuSolveImpl, jaxmg::LuSolveBinding);
JAXMG_DEFINE_TARGETS(syevd, cpu, jaxmg::SyevdImpl, jaxmg::SyevdBinding);
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxmg_layout_cpu, jaxmg::LayoutImpl, jaxmg::LayoutBinding());
