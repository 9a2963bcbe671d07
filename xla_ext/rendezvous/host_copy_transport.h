// Buffers across processes on CPUs: a follower sends copies of its inputs;
// the leader works on the copies and answers with the outputs, which the
// follower writes back into its own buffers.
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_HOST_COPY_TRANSPORT_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_HOST_COPY_TRANSPORT_H_

#include <map>
#include <string>
#include <vector>

#include "xla_ext/rendezvous/buffers.h"
#include "xla_ext/rendezvous/processes.h"

namespace jaxmg::rendezvous {

class HostCopyTransport : public processes::Transport {
 public:
  // The payload each participant meets with is a Buffers*: `mine` here, and
  // for every follower the leader's copy of its buffers.
  explicit HostCopyTransport(Buffers* mine) : mine_(mine) {}

  Status Export(std::string* request) override;
  Status Import(int index, const std::string& request, void** payload) override;
  Status Reply(int index, std::string* reply) override;
  Status Apply(const std::string& reply) override;
  // A follower's request holds the same buffers as this participant's.
  uint64_t MaxRequestBytes(int index) override;
  uint64_t MaxReplyBytes() override;

 private:
  struct Copy {
    std::vector<std::vector<char>> data;
    Buffers buffers;
  };
  Buffers* mine_;
  std::map<int, Copy> copies_;
};

}  // namespace jaxmg::rendezvous

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_HOST_COPY_TRANSPORT_H_
