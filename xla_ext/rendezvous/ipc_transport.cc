#include "xla_ext/rendezvous/ipc_transport.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

namespace jaxmg::rendezvous {
namespace {

constexpr uint64_t kNone = ~uint64_t{0};

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
    cuda::DeviceGuard guard;
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
    cuda::DeviceGuard guard;
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

}  // namespace

Status IpcTransport::Stage() {
  offsets_.assign(mine_->size(), kNone);
  uint64_t total = 0;
  for (size_t i = 0; i < mine_->size(); ++i) {
    const Buffer& b = (*mine_)[i];
    if (b.data == nullptr || b.bytes == 0) continue;
    offsets_[i] = total;
    total += (b.bytes + 255) / 256 * 256;
  }
  Staging st;
  JAXMG_RETURN_IF_ERROR(StagingOf(ordinal_, total, &st));
  staging_ = st.base;
  handle_ = st.handle;
  const cuda::Api& api = cuda::api();
  for (size_t i = 0; i < mine_->size(); ++i) {
    const Buffer& b = (*mine_)[i];
    if (offsets_[i] == kNone || !b.in) continue;
    JAXMG_CUDA(api.cudaMemcpyAsync(static_cast<char*>(staging_) + offsets_[i], b.data, b.bytes,
                                   cudaMemcpyDeviceToDevice, stream_));
  }
  JAXMG_CUDA(api.cudaStreamSynchronize(stream_));
  return Status::Ok();
}

uint64_t IpcTransport::MaxRequestBytes(int) {
  return sizeof(IpcRequest) + sizeof(uint64_t) + 2 * mine_->size() * sizeof(uint64_t);
}

Status IpcTransport::Export(std::string* request) {
  JAXMG_RETURN_IF_ERROR(Stage());
  const IpcRequest r{handle_, processes::ProcessIndex(), ordinal_};
  const uint64_t count = mine_->size();
  request->assign(reinterpret_cast<const char*>(&r), sizeof(r));
  request->append(reinterpret_cast<const char*>(&count), sizeof(count));
  request->append(reinterpret_cast<const char*>(offsets_.data()), count * sizeof(uint64_t));
  for (const Buffer& b : *mine_) {
    request->append(reinterpret_cast<const char*>(&b.bytes), sizeof(b.bytes));
  }
  return Status::Ok();
}

Status IpcTransport::Import(int index, const std::string& request, void** payload) {
  IpcRequest r;
  uint64_t count = 0;
  if (request.size() < sizeof(r) + sizeof(count)) {
    return Status::Error("jaxmg: a follower's request is short");
  }
  std::memcpy(&r, request.data(), sizeof(r));
  std::memcpy(&count, request.data() + sizeof(r), sizeof(count));
  if (count != mine_->size() ||
      request.size() != sizeof(r) + sizeof(count) + 2 * count * sizeof(uint64_t)) {
    return Errorf("jaxmg: participant ", index, " (process ", r.process,
                  ") brought another set of buffers to this call");
  }
  std::vector<uint64_t> offsets(count), sizes(count);
  const char* in = request.data() + sizeof(r) + sizeof(count);
  std::memcpy(offsets.data(), in, count * sizeof(uint64_t));
  std::memcpy(sizes.data(), in + count * sizeof(uint64_t), count * sizeof(uint64_t));
  // Workspaces may differ by participant; the data-carrying buffers must not.
  for (size_t i = 0; i < count; ++i) {
    const Buffer& own = (*mine_)[i];
    if (own.carries_data() && sizes[i] != own.bytes) {
      return Errorf("jaxmg: participant ", index, " (process ", r.process,
                    ") brought buffers of another shape to this call: its processes run "
                    "different programs or calls out of order");
    }
  }
  char* base = nullptr;
  JAXMG_RETURN_IF_ERROR(MapStaging(r, &base));
  Buffers& theirs = imported_[index];
  theirs = *mine_;
  for (size_t i = 0; i < count; ++i) {
    theirs[i].data = offsets[i] == kNone ? nullptr : base + offsets[i];
    theirs[i].bytes = sizes[i];
  }
  *payload = &theirs;
  return Status::Ok();
}

Status IpcTransport::StageSelf(Buffers* staged) {
  JAXMG_RETURN_IF_ERROR(Stage());
  *staged = *mine_;
  for (size_t i = 0; i < staged->size(); ++i) {
    (*staged)[i].data =
        offsets_[i] == kNone ? nullptr : static_cast<char*>(staging_) + offsets_[i];
  }
  return Status::Ok();
}

Status IpcTransport::Apply(const std::string&) {
  const cuda::Api& api = cuda::api();
  for (size_t i = 0; i < mine_->size(); ++i) {
    const Buffer& b = (*mine_)[i];
    if (offsets_.empty() || offsets_[i] == kNone || !b.out) continue;
    JAXMG_CUDA(api.cudaMemcpyAsync(b.data, static_cast<char*>(staging_) + offsets_[i], b.bytes,
                                   cudaMemcpyDeviceToDevice, stream_));
  }
  JAXMG_CUDA(api.cudaStreamSynchronize(stream_));
  return Status::Ok();
}

}  // namespace jaxmg::rendezvous
