// Buffers across processes on GPUs (one process per GPU): the leader works in
// the followers' memory through CUDA IPC. XLA's buffers cannot be exported
// (its pool is not made of plain cudaMalloc allocations; cudaIpcGetMemHandle
// refuses it), so each participant keeps one staging allocation of its own:
// it copies its inputs there (device to device), sends the allocation's IPC
// handle and each buffer's offset, and copies the outputs back once the
// leader is done. The leader maps each follower's staging once, and again
// only when it grows.
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_IPC_TRANSPORT_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_IPC_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xla_ext/rendezvous/buffers.h"
#include "xla_ext/rendezvous/processes.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::rendezvous {

class IpcTransport : public processes::Transport {
 public:
  // `mine` are device buffers on GPU `ordinal`; copies run on `stream`.
  IpcTransport(Buffers* mine, int ordinal, cudaStream_t stream)
      : mine_(mine), ordinal_(ordinal), stream_(stream) {}

  Status Export(std::string* request) override;
  Status Import(int index, const std::string& request, void** payload) override;
  Status Reply(int, std::string*) override { return Status::Ok(); }
  // Copies the outputs from the staging back into `mine`.
  Status Apply(const std::string&) override;
  // A request is a handle and an offset and size per buffer; replies are empty.
  uint64_t MaxRequestBytes(int) override;
  uint64_t MaxReplyBytes() override { return 0; }

  // The leader's own buffers in its staging: a leader whose mesh has other
  // GPUs works from there too (XLA lets only a process's own devices reach
  // its pool), and Apply() then returns its outputs.
  Status StageSelf(Buffers* staged);

 private:
  Status Stage();

  Buffers* mine_;
  int ordinal_;
  cudaStream_t stream_;
  std::vector<uint64_t> offsets_;
  void* staging_ = nullptr;
  cudaIpcMemHandle_t handle_{};
  std::map<int, Buffers> imported_;
};

}  // namespace jaxmg::rendezvous

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_IPC_TRANSPORT_H_
