// What a participant brings to a meeting: its buffers in a fixed order that
// the caller defines (the transports move them without knowing what they are).
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_BUFFERS_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_BUFFERS_H_

#include <cstdint>
#include <vector>

namespace jaxmg::rendezvous {

struct Buffer {
  void* data = nullptr;
  uint64_t bytes = 0;
  bool in = false;   // the leader reads it
  bool out = false;  // the leader writes it
  // Neither in nor out: scratch of this participant that the leader works in.
  bool carries_data() const { return in || out; }
};

using Buffers = std::vector<Buffer>;

}  // namespace jaxmg::rendezvous

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_BUFFERS_H_
