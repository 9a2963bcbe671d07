// XLA FFI handlers for platform "CUDA": one process with an XLA thread per
// GPU, or one process per GPU. Each participant sizes and takes its workspace
// from XLA's scratch allocator on its own GPU, waits for its stream, and
// meets the others; the leader then drives cuSOLVERMg over every
// participant's buffers.
#include <algorithm>
#include <complex>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "xla_ext/common/scalar.h"
#include "xla_ext/engines/mg/context.h"
#include "xla_ext/engines/mg/engine.h"
#include "xla_ext/ffi/common.h"
#include "xla_ext/layout/block_cyclic.h"
#include "xla_ext/rendezvous/processes.h"
#include "xla_ext/rendezvous/rendezvous.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg {
namespace {

namespace ffi = ::xla::ffi;
using ffi_common::CallAttrs;
using ffi_common::CallSite;
using ffi_common::CheckMatrixBlock;
using ffi_common::ToFfi;
using layout::ColumnLayout;
using mg::Context;
using mg::Routine;

// What every participant works out before the meeting.
struct Prologue {
  CallSite site;
  ColumnLayout layout;
  Context* ctx = nullptr;
};

Status Begin(ffi::RunId run, int32_t ordinal, ffi::Span<const int64_t> device_ids,
             ffi::Span<const int64_t> a_dims, int64_t tile, int64_t call_id, int64_t timeout_ms,
             Prologue* p) {
  if (!cuda::Loaded()) {
    return Status::Error("jaxmg: the CUDA libraries are not loaded; jaxmg loads them when it "
                         "registers its CUDA targets (import jaxmg and call it normally)");
  }
  std::vector<int> devices(device_ids.begin(), device_ids.end());
  int index = -1;
  std::vector<int32_t> owners;
  if (processes::CallProcesses(call_id, &owners)) {
    // One process per GPU: a process's place is its rank's (the same GPU may
    // serve several processes).
    auto it = std::find(owners.begin(), owners.end(), processes::ProcessIndex());
    if (it != owners.end() && devices.size() == owners.size()) index = it - owners.begin();
  } else {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] == ordinal) index = static_cast<int>(i);
    }
  }
  if (index < 0 || devices[index] != ordinal) {
    return Errorf("jaxmg: GPU ", ordinal, " runs a jaxmg call but is not in its device list");
  }
  p->site = CallSite{run.run_id, call_id, static_cast<int32_t>(devices.size()), index, tile,
                     std::chrono::milliseconds(timeout_ms)};
  JAXMG_RETURN_IF_ERROR(CheckMatrixBlock("a", a_dims, p->site, &p->layout));
  return Context::Get(devices, &p->ctx);
}

Status Allocate(ffi::ScratchAllocator& scratch, size_t bytes, void** out) {
  // XLA's FFI allocator accepts alignments up to 16; its blocks are in fact
  // aligned far more.
  std::optional<void*> ptr = scratch.Allocate(std::max<size_t>(bytes, 256), 16);
  if (!ptr.has_value()) {
    return Errorf("jaxmg: XLA could not allocate ", bytes,
                  " bytes of workspace; lower XLA_PYTHON_CLIENT_MEM_FRACTION's claim or the "
                  "problem size");
  }
  *out = *ptr;
  return Status::Ok();
}

// The participant's workspace and spare tile from XLA's allocator; `extra`
// more elements go to the returned pointer `extra_out` (participant 0's
// right-hand-side staging).
template <typename T>
Status Workspace(const Prologue& p, Routine routine, int64_t nrhs, T* a,
                 ffi::ScratchAllocator& scratch, mg::Shard<T>* shard, int64_t extra = 0,
                 T** extra_out = nullptr) {
  int64_t lwork = 0;
  {
    std::lock_guard<std::mutex> lock(p.ctx->mu);
    mg::DeviceGuard guard;
    JAXMG_RETURN_IF_ERROR(
        mg::WorkspaceElements<T>(*p.ctx, routine, p.layout, nrhs, a, &lwork));
  }
  lwork = (lwork + 63) / 64 * 64;  // keeps the spare tile 256-byte aligned
  const int64_t tile = p.layout.n_cols * p.layout.tile;
  void* block = nullptr;
  JAXMG_RETURN_IF_ERROR(Allocate(scratch, (lwork + tile + extra) * sizeof(T), &block));
  shard->a = a;
  shard->work = static_cast<T*>(block);
  shard->spare = shard->work + lwork;
  if (extra_out) *extra_out = shard->spare + tile;
  return Status::Ok();
}

// XLA aliases the output with the input; copy only if it did not, then wait
// for the stream so the leader sees finished inputs.
template <typename T>
Status Ready(cudaStream_t stream, const void* in, T* out, size_t bytes) {
  const cuda::Api& api = cuda::api();
  if (in != out) {
    JAXMG_CUDA(api.cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  JAXMG_CUDA(api.cudaStreamSynchronize(stream));
  return Status::Ok();
}

Status PublishInfo(const std::vector<int32_t*>& targets, int32_t info) {
  for (int32_t* target : targets) {
    JAXMG_CUDA(cuda::api().cudaMemcpy(target, &info, sizeof(info), cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

template <typename P, typename T>
std::vector<mg::Shard<T>> Shards(const std::vector<void*>& all) {
  std::vector<mg::Shard<T>> shards;
  for (void* v : all) shards.push_back(static_cast<P*>(v)->shard);
  return shards;
}

template <typename P>
std::vector<int32_t*> Infos(const std::vector<void*>& all) {
  std::vector<int32_t*> infos;
  for (void* v : all) infos.push_back(static_cast<P*>(v)->info);
  return infos;
}

// Runs the leader's work holding the context: one call at a time per device set.
template <typename Fn>
Status Lead(Context& ctx, Fn&& work) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  mg::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(work());
  // info and eigenvalues are written with cudaMemcpy from host memory, which
  // may return before they land; the others read them once this returns.
  return ctx.SynchronizeDevices();
}

// Across processes (one per GPU) the leader works in the followers' memory
// through CUDA IPC. XLA's buffers cannot be exported (its pool is not made of
// plain cudaMalloc allocations), so each follower keeps one staging
// allocation of its own: it copies its inputs there (device to device),
// sends the allocation's IPC handle and each buffer's offset, and copies the
// outputs back once the leader is done. The leader maps each follower's
// staging once and again only when it grows. When the mesh has GPUs besides
// its own, the leader stages its own buffers too: XLA gives a process's other
// GPUs no access to its pool, and here the process owns one GPU.

// One pointer of a payload: its size and which way its contents travel
// (neither: workspace).
struct Slot {
  uint64_t bytes = 0;
  bool in = false;
  bool out = false;
};

// Slots of a Shard: the matrix block, the workspace and the spare tile.
template <typename T>
std::vector<Slot> ShardSlots(const mg::Shard<T>& s, const ColumnLayout& layout, bool written) {
  const uint64_t block = layout.n_cols * (layout.n_cols / layout.n_devices) * sizeof(T);
  return {Slot{block, true, written}, Slot{(s.spare - s.work) * sizeof(T), false, false},
          Slot{layout.n_cols * layout.tile * sizeof(T), false, false}};
}

struct Staging {
  void* base = nullptr;
  uint64_t bytes = 0;
  cudaIpcMemHandle_t handle{};
};

// This process's staging on `ordinal`, at least `bytes` long.
Status StagingOf(int ordinal, uint64_t bytes, Staging* out) {
  static std::mutex mu;
  static auto* stagings = new std::map<int, Staging>();
  std::lock_guard<std::mutex> lock(mu);
  Staging& st = (*stagings)[ordinal];
  if (st.bytes < bytes) {
    const cuda::Api& api = cuda::api();
    mg::DeviceGuard guard;
    JAXMG_CUDA(api.cudaSetDevice(ordinal));
    if (st.base) JAXMG_CUDA(api.cudaFree(st.base));
    st = Staging{};
    const uint64_t size = std::max<uint64_t>(bytes + bytes / 4, 1 << 20);
    const cudaError_t e = api.cudaMalloc(&st.base, size);
    if (e != cudaSuccess) {
      return Errorf("jaxmg: could not allocate ", size, " bytes of staging on GPU ", ordinal,
                    " for a call across processes (", api.cudaGetErrorString(e),
                    "); leave room beside XLA's pool, e.g. XLA_PYTHON_CLIENT_MEM_FRACTION=0.6");
    }
    st.bytes = size;
    JAXMG_CUDA(api.cudaIpcGetMemHandle(&st.handle, st.base));
  }
  *out = st;
  return Status::Ok();
}

struct IpcRequest {
  cudaIpcMemHandle_t handle;
  int32_t process;
  int32_t ordinal;
};

// The leader's mapping of a follower's staging; a new handle from the same
// follower (its staging grew) replaces the old mapping.
Status MapStaging(const IpcRequest& r, char** out) {
  static std::mutex mu;
  static auto* mapped = new std::map<std::pair<int, int>, std::pair<std::string, void*>>();
  const std::string key(reinterpret_cast<const char*>(&r.handle), sizeof(r.handle));
  std::lock_guard<std::mutex> lock(mu);
  auto& entry = (*mapped)[{r.process, r.ordinal}];
  if (entry.first != key) {
    const cuda::Api& api = cuda::api();
    mg::DeviceGuard guard;
    JAXMG_CUDA(api.cudaSetDevice(r.ordinal));
    if (entry.second) JAXMG_CUDA(api.cudaIpcCloseMemHandle(entry.second));
    entry = {};
    void* base = nullptr;
    JAXMG_CUDA(api.cudaIpcOpenMemHandle(&base, r.handle, cudaIpcMemLazyEnablePeerAccess));
    entry = {key, base};
  }
  *out = static_cast<char*>(entry.second);
  return Status::Ok();
}

template <typename P>
class IpcTransport : public processes::Transport {
  static_assert(std::is_trivially_copyable_v<P> && sizeof(P) % sizeof(void*) == 0,
                "a CUDA payload holds device pointers only");
  static constexpr size_t kPointers = sizeof(P) / sizeof(void*);
  static constexpr uint64_t kNone = ~uint64_t{0};

 public:
  // slots[i] describes the payload's i-th pointer.
  IpcTransport(P* mine, int ordinal, cudaStream_t stream, std::vector<Slot> slots)
      : mine_(mine), ordinal_(ordinal), stream_(stream), slots_(std::move(slots)) {}

  Status Export(std::string* request) override {
    JAXMG_RETURN_IF_ERROR(Stage());
    const IpcRequest r{staging_.handle, processes::ProcessIndex(), ordinal_};
    uint64_t sizes[kPointers];
    for (size_t i = 0; i < kPointers; ++i) sizes[i] = slots_[i].bytes;
    request->assign(reinterpret_cast<const char*>(&r), sizeof(r));
    request->append(reinterpret_cast<const char*>(offsets_), sizeof(offsets_));
    request->append(reinterpret_cast<const char*>(sizes), sizeof(sizes));
    return Status::Ok();
  }

  Status Import(int index, const std::string& request, void** payload) override {
    IpcRequest r;
    uint64_t offsets[kPointers], sizes[kPointers];
    if (request.size() != sizeof(r) + sizeof(offsets) + sizeof(sizes)) {
      return Status::Error("jaxmg: a follower's request does not match this call's payload");
    }
    std::memcpy(&r, request.data(), sizeof(r));
    std::memcpy(offsets, request.data() + sizeof(r), sizeof(offsets));
    std::memcpy(sizes, request.data() + sizeof(r) + sizeof(offsets), sizeof(sizes));
    // Workspace sizes may differ by device; the buffers must not.
    for (size_t i = 0; i < kPointers; ++i) {
      if ((slots_[i].in || slots_[i].out) && sizes[i] != 0 && slots_[i].bytes != 0 &&
          sizes[i] != slots_[i].bytes) {
        return Errorf("jaxmg: participant ", index, " (process ", r.process,
                      ") brought buffers of another shape to this call: its processes run "
                      "different programs or calls out of order");
      }
    }
    char* base = nullptr;
    JAXMG_RETURN_IF_ERROR(MapStaging(r, &base));
    void* pointers[kPointers];
    for (size_t i = 0; i < kPointers; ++i) {
      pointers[i] = offsets[i] == kNone ? nullptr : base + offsets[i];
    }
    P& p = imported_[index];
    std::memcpy(&p, pointers, sizeof(P));
    *payload = &p;
    return Status::Ok();
  }

  Status Reply(int, std::string*) override { return Status::Ok(); }

  // Leader of a mesh over several GPUs: XLA lets only its own devices reach
  // its pool, and this process's XLA has just one, so the leader too works
  // from its staging; Apply() then returns the outputs.
  Status StageSelf(P* staged) {
    JAXMG_RETURN_IF_ERROR(Stage());
    void* pointers[kPointers];
    for (size_t i = 0; i < kPointers; ++i) {
      pointers[i] = offsets_[i] == kNone ? nullptr : static_cast<char*>(staging_.base) + offsets_[i];
    }
    std::memcpy(staged, pointers, sizeof(P));
    return Status::Ok();
  }

  Status Apply(const std::string&) override {
    void* pointers[kPointers];
    std::memcpy(pointers, mine_, sizeof(P));
    const cuda::Api& api = cuda::api();
    for (size_t i = 0; i < kPointers; ++i) {
      if (offsets_[i] == kNone || !slots_[i].out) continue;
      JAXMG_CUDA(api.cudaMemcpyAsync(pointers[i],
                                     static_cast<char*>(staging_.base) + offsets_[i],
                                     slots_[i].bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    JAXMG_CUDA(api.cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

 private:
  // Lays the payload's buffers out in this process's staging and copies the
  // inputs there.
  Status Stage() {
    if (slots_.size() != kPointers) return Status::Error("jaxmg: payload slots mismatch");
    void* pointers[kPointers];
    std::memcpy(pointers, mine_, sizeof(P));
    uint64_t total = 0;
    for (size_t i = 0; i < kPointers; ++i) {
      offsets_[i] = kNone;
      if (pointers[i] == nullptr || slots_[i].bytes == 0) continue;
      offsets_[i] = total;
      total += (slots_[i].bytes + 255) / 256 * 256;
    }
    JAXMG_RETURN_IF_ERROR(StagingOf(ordinal_, total, &staging_));
    const cuda::Api& api = cuda::api();
    for (size_t i = 0; i < kPointers; ++i) {
      if (offsets_[i] == kNone || !slots_[i].in) continue;
      JAXMG_CUDA(api.cudaMemcpyAsync(static_cast<char*>(staging_.base) + offsets_[i],
                                     pointers[i], slots_[i].bytes, cudaMemcpyDeviceToDevice,
                                     stream_));
    }
    JAXMG_CUDA(api.cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  P* mine_;
  int ordinal_;
  cudaStream_t stream_;
  std::vector<Slot> slots_;
  uint64_t offsets_[kPointers];
  Staging staging_;
  std::map<int, P> imported_;
};

// Meets the call's other participants: threads of this process (SPMD) or
// other processes through CUDA IPC (one process per GPU; `slots` describe
// the payload's pointers for the staging copies). A participant that failed
// on its way (`prior`) fails the meeting for everyone across processes.
template <typename P>
Status MeetAll(const Prologue& p, int ordinal, cudaStream_t stream, std::vector<Slot> slots,
               P* mine, const Status& prior, const rendezvous::LeaderWork& work) {
  IpcTransport<P> transport(mine, ordinal, stream, std::move(slots));
  std::vector<int32_t> owners;
  const bool staged = p.ctx && p.site.index == 0 &&
      processes::CallProcesses(p.site.call_id, &owners) &&
      std::any_of(p.ctx->devices().begin(), p.ctx->devices().end(),
                  [&](int d) { return d != ordinal; });
  if (!staged) return ffi_common::MeetParticipants(p.site, mine, &transport, work, prior);
  return ffi_common::MeetParticipants(
      p.site, mine, &transport,
      [&](const std::vector<void*>& all) -> Status {
        P own;
        JAXMG_RETURN_IF_ERROR(transport.StageSelf(&own));
        std::vector<void*> with_own = all;
        with_own[0] = &own;
        JAXMG_RETURN_IF_ERROR(work(with_own));
        return transport.Apply({});
      },
      prior);
}

// Appends to a Shard's slots.
std::vector<Slot> operator+(std::vector<Slot> a, const std::vector<Slot>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

//===--------------------------------------------------------------------===//
// potrs
//===--------------------------------------------------------------------===//

template <typename T>
struct PotrsShard {
  mg::Shard<T> shard;
  const T* b;
  T* x;
  T* stage;  // participant 0 only: 2 * N * k elements
  int32_t* info;
};

template <ffi::DataType DT>
ffi::Error PotrsCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                     ffi::RunId run, ffi::Buffer<DT> a, ffi::Buffer<DT> b, ffi::AnyBuffer,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<DT>> x,
                     ffi::Result<ffi::Buffer<ffi::S32>> info, int64_t, int64_t tile,
                     int64_t call_id, int64_t timeout_ms, bool b_sharded,
                     ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  Prologue p;
  Status s = Begin(run, ordinal, device_ids, a.dimensions(), tile, call_id, timeout_ms, &p);
  if (!s.ok()) return ToFfi(s);
  auto b_dims = b.dimensions();
  const int64_t n = p.layout.n_cols;
  const int64_t rows = b_sharded ? n / p.site.n_devices : n;
  if (b_dims.size() != 2 || b_dims[0] != rows) {
    return ffi::Error::InvalidArgument("jaxmg: b's block must have " + std::to_string(rows) +
                                       " rows");
  }
  const int64_t k = b_dims[1];
  PotrsShard<T> mine{{}, b.typed_data(), x->typed_data(), nullptr, info->typed_data()};
  const bool leader = p.site.index == 0;
  s = Workspace<T>(p, Routine::kPotrs, std::min(k, p.layout.tile), a_out->typed_data(), scratch,
                   &mine.shard, leader ? 2 * n * k : 0, leader ? &mine.stage : nullptr);
  if (s.ok()) s = Ready(stream, a.untyped_data(), a_out->typed_data(), a.size_bytes());
  if (!s.ok() && p.ctx == nullptr) return ToFfi(s);  // no meeting to take part in
  const std::vector<Slot> slots = ShardSlots(mine.shard, p.layout, true) +
      std::vector<Slot>{{b.size_bytes(), true, false}, {x->size_bytes(), false, true},
                        {leader ? 2 * n * k * sizeof(T) : 0, false, false},
                        {sizeof(int32_t), false, true}};
  return ToFfi(MeetAll(
      p, ordinal, stream, slots, &mine, s,
      [&](const std::vector<void*>& all) {
        return Lead(*p.ctx, [&]() -> Status {
          mg::Rhs<T> rhs;
          rhs.sharded = b_sharded;
          rhs.k = k;
          for (void* v : all) {
            rhs.b.push_back(static_cast<PotrsShard<T>*>(v)->b);
            rhs.x.push_back(static_cast<PotrsShard<T>*>(v)->x);
          }
          rhs.stage = static_cast<PotrsShard<T>*>(all[0])->stage;
          rhs.columns = rhs.stage + n * k;
          int32_t status = 0;
          JAXMG_RETURN_IF_ERROR(mg::Potrs<T>(*p.ctx, p.layout,
                                             Shards<PotrsShard<T>, T>(all), rhs, &status));
          return PublishInfo(Infos<PotrsShard<T>>(all), status);
        });
      }));
}

//===--------------------------------------------------------------------===//
// potrf / cholsolve / getrf / lusolve: factor once, solve many times. The
// factor stays block-cyclic in the matrix's buffers between calls.
//===--------------------------------------------------------------------===//

template <typename T>
struct FactorShard {
  mg::Shard<T> shard;
  int32_t* piv;  // getrf, lusolve
  int32_t* info;
};

template <ffi::DataType DT>
ffi::Error PotrfCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                     ffi::RunId run, ffi::Buffer<DT> a, ffi::AnyBuffer,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> info,
                     int64_t, int64_t tile, int64_t call_id, int64_t timeout_ms,
                     ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  Prologue p;
  Status s = Begin(run, ordinal, device_ids, a.dimensions(), tile, call_id, timeout_ms, &p);
  FactorShard<T> mine{{}, nullptr, info->typed_data()};
  if (s.ok()) s = Workspace<T>(p, Routine::kPotrf, 0, a_out->typed_data(), scratch, &mine.shard);
  if (s.ok()) s = Ready(stream, a.untyped_data(), a_out->typed_data(), a.size_bytes());
  if (!s.ok() && p.ctx == nullptr) return ToFfi(s);  // no meeting to take part in
  const std::vector<Slot> slots =
      ShardSlots(mine.shard, p.layout, true) + std::vector<Slot>{{}, {sizeof(int32_t), false, true}};
  return ToFfi(MeetAll(
      p, ordinal, stream, slots, &mine, s,
      [&](const std::vector<void*>& all) {
        return Lead(*p.ctx, [&]() -> Status {
          int32_t status = 0;
          JAXMG_RETURN_IF_ERROR(
              mg::Potrf<T>(*p.ctx, p.layout, Shards<FactorShard<T>, T>(all), &status));
          return PublishInfo(Infos<FactorShard<T>>(all), status);
        });
      }));
}

template <ffi::DataType DT>
ffi::Error GetrfCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                     ffi::RunId run, ffi::Buffer<DT> a, ffi::AnyBuffer,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> piv,
                     ffi::Result<ffi::Buffer<ffi::S32>> info, int64_t, int64_t tile,
                     int64_t call_id, int64_t timeout_ms, ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  Prologue p;
  Status s = Begin(run, ordinal, device_ids, a.dimensions(), tile, call_id, timeout_ms, &p);
  if (s.ok() && static_cast<int64_t>(piv->element_count()) * p.site.n_devices != p.layout.n_cols) {
    s = Status::Error("jaxmg: piv must hold N / n_devices pivots per device");
  }
  FactorShard<T> mine{{}, piv->typed_data(), info->typed_data()};
  if (s.ok()) s = Workspace<T>(p, Routine::kGetrf, 0, a_out->typed_data(), scratch, &mine.shard);
  if (s.ok()) s = Ready(stream, a.untyped_data(), a_out->typed_data(), a.size_bytes());
  if (!s.ok() && p.ctx == nullptr) return ToFfi(s);  // no meeting to take part in
  const std::vector<Slot> slots =
      ShardSlots(mine.shard, p.layout, true) +
      std::vector<Slot>{{piv->size_bytes(), false, true}, {sizeof(int32_t), false, true}};
  return ToFfi(MeetAll(
      p, ordinal, stream, slots, &mine, s,
      [&](const std::vector<void*>& all) {
        return Lead(*p.ctx, [&]() -> Status {
          std::vector<int32_t*> pivots;
          for (void* v : all) pivots.push_back(static_cast<FactorShard<T>*>(v)->piv);
          int32_t status = 0;
          JAXMG_RETURN_IF_ERROR(mg::Getrf<T>(*p.ctx, p.layout, Shards<FactorShard<T>, T>(all),
                                             pivots, &status));
          return PublishInfo(Infos<FactorShard<T>>(all), status);
        });
      }));
}

// Shared by cholsolve and lusolve: the factor is read in place, B is staged
// on participant 0. `solve` runs the engine for the meeting's participants.
template <typename T, typename Solve>
ffi::Error SolveWithFactor(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator& scratch,
                           ffi::RunId run, const void* factor, ffi::Span<const int64_t> f_dims,
                           const int32_t* piv, ffi::Span<const int64_t> b_dims, const T* b, T* x,
                           int64_t tile, int64_t call_id, int64_t timeout_ms, bool b_sharded,
                           ffi::Span<const int64_t> device_ids, Routine routine, Solve&& solve) {
  Prologue p;
  Status s = Begin(run, ordinal, device_ids, f_dims, tile, call_id, timeout_ms, &p);
  if (!s.ok()) return ToFfi(s);
  const int64_t n = p.layout.n_cols;
  const int64_t rows = b_sharded ? n / p.site.n_devices : n;
  if (b_dims.size() != 2 || b_dims[0] != rows) {
    return ffi::Error::InvalidArgument("jaxmg: b's block must have " + std::to_string(rows) +
                                       " rows");
  }
  const int64_t k = b_dims[1];
  PotrsShard<T> mine{{}, b, x, nullptr, nullptr};
  const bool leader = p.site.index == 0;
  T* a = static_cast<T*>(const_cast<void*>(factor));
  s = Workspace<T>(p, routine, std::min(k, p.layout.tile), a, scratch, &mine.shard,
                   leader ? 2 * n * k : 0, leader ? &mine.stage : nullptr);
  if (s.ok()) s = Ready<T>(stream, nullptr, nullptr, 0);
  if (!s.ok() && p.ctx == nullptr) return ToFfi(s);  // no meeting to take part in
  struct Mine {
    PotrsShard<T> rhs;
    const int32_t* piv;
  } me{mine, piv};
  const uint64_t rhs_bytes = rows * k * sizeof(T);
  const uint64_t piv_bytes = piv ? n / p.site.n_devices * sizeof(int32_t) : 0;
  const std::vector<Slot> slots =
      ShardSlots(mine.shard, p.layout, false) +
      std::vector<Slot>{{rhs_bytes, true, false}, {rhs_bytes, false, true},
                        {leader ? 2 * n * k * sizeof(T) : 0, false, false}, {},
                        {piv_bytes, true, false}};
  return ToFfi(MeetAll(
      p, ordinal, stream, slots, &me, s,
      [&](const std::vector<void*>& all) {
        return Lead(*p.ctx, [&]() -> Status {
          mg::Rhs<T> rhs;
          rhs.sharded = b_sharded;
          rhs.k = k;
          std::vector<mg::Shard<T>> shards;
          std::vector<int32_t*> pivots;
          for (void* v : all) {
            const Mine& m = *static_cast<Mine*>(v);
            rhs.b.push_back(m.rhs.b);
            rhs.x.push_back(m.rhs.x);
            shards.push_back(m.rhs.shard);
            pivots.push_back(const_cast<int32_t*>(m.piv));
          }
          rhs.stage = static_cast<Mine*>(all[0])->rhs.stage;
          rhs.columns = rhs.stage + n * k;
          return solve(*p.ctx, p.layout, shards, pivots, rhs);
        });
      }));
}

template <ffi::DataType DT>
ffi::Error CholSolveCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                         ffi::RunId run, ffi::Buffer<DT> factor, ffi::Buffer<DT> b,
                         ffi::AnyBuffer, ffi::Result<ffi::Buffer<DT>> x, int64_t, int64_t tile,
                         int64_t call_id, int64_t timeout_ms, bool b_sharded,
                         ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  return SolveWithFactor<T>(
      stream, ordinal, scratch, run, factor.untyped_data(), factor.dimensions(), nullptr,
      b.dimensions(), b.typed_data(), x->typed_data(), tile, call_id, timeout_ms, b_sharded,
      device_ids, Routine::kCholSolve,
      [](Context& ctx, const ColumnLayout& layout, const std::vector<mg::Shard<T>>& shards,
         const std::vector<int32_t*>&, const mg::Rhs<T>& rhs) {
        return mg::CholSolve<T>(ctx, layout, shards, rhs);
      });
}

// The engine holds M = A^T: A X = B is M^T X = B, A^T X = B is M X = B, and
// A^H X = B is M conj(X) = conj(B).
template <ffi::DataType DT>
ffi::Error LuSolveCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                       ffi::RunId run, ffi::Buffer<DT> factor, ffi::Buffer<ffi::S32> piv,
                       ffi::Buffer<DT> b, ffi::AnyBuffer, ffi::Result<ffi::Buffer<DT>> x,
                       int64_t, int64_t tile, int64_t call_id, int64_t timeout_ms,
                       bool b_sharded, int64_t trans, ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  if (trans < 0 || trans > 2) {
    return ffi::Error::InvalidArgument("jaxmg: trans must be 0, 1 or 2");
  }
  if (static_cast<int64_t>(piv.element_count()) != factor.dimensions()[0]) {
    return ffi::Error::InvalidArgument("jaxmg: piv must hold N / n_devices pivots per device");
  }
  const cublasOperation_t op = trans == 0 ? CUBLAS_OP_T : CUBLAS_OP_N;
  const bool conj = trans == 2;
  std::vector<int32_t> owners;
  const bool ipc_tiles = processes::CallProcesses(call_id, &owners);
  return SolveWithFactor<T>(
      stream, ordinal, scratch, run, factor.untyped_data(), factor.dimensions(), piv.typed_data(),
      b.dimensions(), b.typed_data(), x->typed_data(), tile, call_id, timeout_ms, b_sharded,
      device_ids, Routine::kGetrs,
      [op, conj, ipc_tiles](Context& ctx, const ColumnLayout& layout,
                            const std::vector<mg::Shard<T>>& shards,
                            const std::vector<int32_t*>& pivots, const mg::Rhs<T>& rhs) {
        return mg::Getrs<T>(ctx, layout, shards, pivots, op, conj, ipc_tiles, rhs);
      });
}

//===--------------------------------------------------------------------===//
// potri
//===--------------------------------------------------------------------===//

template <typename T>
struct MatrixShard {
  mg::Shard<T> shard;
  Real<T>* w;  // syevd only
  int32_t* info;
};

template <ffi::DataType DT>
ffi::Error PotriCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                     ffi::RunId run, ffi::Buffer<DT> a, ffi::AnyBuffer,
                     ffi::Result<ffi::Buffer<DT>> a_out, ffi::Result<ffi::Buffer<ffi::S32>> info,
                     int64_t, int64_t tile, int64_t call_id, int64_t timeout_ms,
                     ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  Prologue p;
  Status s = Begin(run, ordinal, device_ids, a.dimensions(), tile, call_id, timeout_ms, &p);
  MatrixShard<T> mine{{}, nullptr, info->typed_data()};
  if (s.ok()) s = Workspace<T>(p, Routine::kPotri, 0, a_out->typed_data(), scratch, &mine.shard);
  if (s.ok()) s = Ready(stream, a.untyped_data(), a_out->typed_data(), a.size_bytes());
  if (!s.ok() && p.ctx == nullptr) return ToFfi(s);  // no meeting to take part in
  const std::vector<Slot> slots =
      ShardSlots(mine.shard, p.layout, true) + std::vector<Slot>{{}, {sizeof(int32_t), false, true}};
  return ToFfi(MeetAll(
      p, ordinal, stream, slots, &mine, s,
      [&](const std::vector<void*>& all) {
        return Lead(*p.ctx, [&]() -> Status {
          int32_t status = 0;
          JAXMG_RETURN_IF_ERROR(
              mg::Potri<T>(*p.ctx, p.layout, Shards<MatrixShard<T>, T>(all), &status));
          return PublishInfo(Infos<MatrixShard<T>>(all), status);
        });
      }));
}

//===--------------------------------------------------------------------===//
// syevd
//===--------------------------------------------------------------------===//

template <ffi::DataType DT>
ffi::Error SyevdCuda(cudaStream_t stream, int32_t ordinal, ffi::ScratchAllocator scratch,
                     ffi::RunId run, ffi::Buffer<DT> a, ffi::AnyBuffer,
                     ffi::Result<ffi::Buffer<DT>> a_out,
                     ffi::Result<ffi::Buffer<ffi::ToReal(DT)>> w,
                     ffi::Result<ffi::Buffer<ffi::S32>> info, int64_t, int64_t tile,
                     int64_t call_id, int64_t timeout_ms, bool vectors,
                     ffi::Span<const int64_t> device_ids) {
  using T = ffi::NativeType<DT>;
  Prologue p;
  Status s = Begin(run, ordinal, device_ids, a.dimensions(), tile, call_id, timeout_ms, &p);
  MatrixShard<T> mine{{}, w->typed_data(), info->typed_data()};
  const Routine routine = vectors ? Routine::kSyevd : Routine::kSyevdValues;
  if (s.ok()) s = Workspace<T>(p, routine, 0, a_out->typed_data(), scratch, &mine.shard);
  if (s.ok()) s = Ready(stream, a.untyped_data(), a_out->typed_data(), a.size_bytes());
  if (!s.ok() && p.ctx == nullptr) return ToFfi(s);  // no meeting to take part in
  const std::vector<Slot> slots =
      ShardSlots(mine.shard, p.layout, true) +
      std::vector<Slot>{{w->size_bytes(), false, true}, {sizeof(int32_t), false, true}};
  return ToFfi(MeetAll(
      p, ordinal, stream, slots, &mine, s,
      [&](const std::vector<void*>& all) {
        return Lead(*p.ctx, [&]() -> Status {
          std::vector<Real<T>> values(p.layout.n_cols);
          int32_t status = 0;
          JAXMG_RETURN_IF_ERROR(mg::Syevd<T>(*p.ctx, p.layout, Shards<MatrixShard<T>, T>(all),
                                             vectors, values.data(), &status));
          for (void* v : all) {
            JAXMG_CUDA(cuda::api().cudaMemcpy(static_cast<MatrixShard<T>*>(v)->w, values.data(),
                                              values.size() * sizeof(Real<T>),
                                              cudaMemcpyHostToDevice));
          }
          return PublishInfo(Infos<MatrixShard<T>>(all), status);
        });
      }));
}

//===--------------------------------------------------------------------===//
// Bindings: the same operands, results and attributes as the CPU targets,
// plus `device_ids` (the mesh's CUDA ordinals in axis order). The index
// operand is ignored: a GPU finds its place from its own ordinal.
//===--------------------------------------------------------------------===//

auto CudaPrefix() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Ctx<ffi::DeviceOrdinal>()
      .Ctx<ffi::ScratchAllocator>()
      .Ctx<ffi::RunId>();
}

template <ffi::DataType DT>
auto PotrsCudaBinding() {
  return CallAttrs(CudaPrefix()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::AnyBuffer>()
                           .template Ret<ffi::Buffer<DT>>()
                           .template Ret<ffi::Buffer<DT>>()
                           .template Ret<ffi::Buffer<ffi::S32>>())
      .template Attr<bool>("b_sharded")
      .template Attr<ffi::Span<const int64_t>>("device_ids");
}

template <ffi::DataType DT>
auto PotriCudaBinding() {
  return CallAttrs(CudaPrefix()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::AnyBuffer>()
                           .template Ret<ffi::Buffer<DT>>()
                           .template Ret<ffi::Buffer<ffi::S32>>())
      .template Attr<ffi::Span<const int64_t>>("device_ids");
}

template <ffi::DataType DT>
auto CholSolveCudaBinding() {
  return CallAttrs(CudaPrefix()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::AnyBuffer>()
                           .template Ret<ffi::Buffer<DT>>())
      .template Attr<bool>("b_sharded")
      .template Attr<ffi::Span<const int64_t>>("device_ids");
}

template <ffi::DataType DT>
auto GetrfCudaBinding() {
  return CallAttrs(CudaPrefix()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::AnyBuffer>()
                           .template Ret<ffi::Buffer<DT>>()
                           .template Ret<ffi::Buffer<ffi::S32>>()
                           .template Ret<ffi::Buffer<ffi::S32>>())
      .template Attr<ffi::Span<const int64_t>>("device_ids");
}

template <ffi::DataType DT>
auto LuSolveCudaBinding() {
  return CallAttrs(CudaPrefix()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::Buffer<ffi::S32>>()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::AnyBuffer>()
                           .template Ret<ffi::Buffer<DT>>())
      .template Attr<bool>("b_sharded")
      .template Attr<int64_t>("trans")
      .template Attr<ffi::Span<const int64_t>>("device_ids");
}

template <ffi::DataType DT>
auto SyevdCudaBinding() {
  return CallAttrs(CudaPrefix()
                           .template Arg<ffi::Buffer<DT>>()
                           .template Arg<ffi::AnyBuffer>()
                           .template Ret<ffi::Buffer<DT>>()
                           .template Ret<ffi::Buffer<ffi::ToReal(DT)>>()
                           .template Ret<ffi::Buffer<ffi::S32>>())
      .template Attr<bool>("vectors")
      .template Attr<ffi::Span<const int64_t>>("device_ids");
}

}  // namespace
}  // namespace jaxmg

JAXMG_DEFINE_TARGETS(potrs, cuda, jaxmg::PotrsCuda, jaxmg::PotrsCudaBinding);
JAXMG_DEFINE_TARGETS(potri, cuda, jaxmg::PotriCuda, jaxmg::PotriCudaBinding);
JAXMG_DEFINE_TARGETS(potrf, cuda, jaxmg::PotrfCuda, jaxmg::PotriCudaBinding);
JAXMG_DEFINE_TARGETS(cholsolve, cuda, jaxmg::CholSolveCuda, jaxmg::CholSolveCudaBinding);
JAXMG_DEFINE_TARGETS(getrf, cuda, jaxmg::GetrfCuda, jaxmg::GetrfCudaBinding);
JAXMG_DEFINE_TARGETS(lusolve, cuda, jaxmg::LuSolveCuda, jaxmg::LuSolveCudaBinding);
JAXMG_DEFINE_TARGETS(syevd, cuda, jaxmg::SyevdCuda, jaxmg::SyevdCudaBinding);
