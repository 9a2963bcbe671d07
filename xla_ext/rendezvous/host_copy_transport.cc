#include "xla_ext/rendezvous/host_copy_transport.h"

#include <cstdint>
#include <cstring>

namespace jaxmg::rendezvous {
namespace {

// Per buffer: its byte count and whether it is read and written.
struct Header {
  uint64_t bytes;
  uint8_t in;
  uint8_t out;
};

void AppendHeaders(const Buffers& buffers, std::string* out) {
  const uint64_t count = buffers.size();
  out->append(reinterpret_cast<const char*>(&count), sizeof(count));
  for (const Buffer& b : buffers) {
    const Header h{b.bytes, b.in, b.out};
    out->append(reinterpret_cast<const char*>(&h), sizeof(h));
  }
}

}  // namespace

uint64_t HostCopyTransport::MaxRequestBytes(int) {
  uint64_t bytes = sizeof(uint64_t) + mine_->size() * sizeof(Header);
  for (const Buffer& b : *mine_) bytes += b.in ? b.bytes : 0;
  return bytes;
}

uint64_t HostCopyTransport::MaxReplyBytes() {
  uint64_t bytes = 0;
  for (const Buffer& b : *mine_) bytes += b.out ? b.bytes : 0;
  return bytes;
}

Status HostCopyTransport::Export(std::string* request) {
  AppendHeaders(*mine_, request);
  for (const Buffer& b : *mine_) {
    if (b.in && b.bytes) request->append(static_cast<const char*>(b.data), b.bytes);
  }
  return Status::Ok();
}

Status HostCopyTransport::Import(int index, const std::string& request, void** payload) {
  uint64_t count = 0;
  if (request.size() < sizeof(count)) return Status::Error("jaxmg: a follower's request is short");
  std::memcpy(&count, request.data(), sizeof(count));
  if (count != mine_->size() || request.size() < sizeof(count) + count * sizeof(Header)) {
    return Errorf("jaxmg: participant ", index,
                  " brought another set of buffers to this call: its processes run different "
                  "programs or calls out of order");
  }
  std::vector<Header> headers(count);
  std::memcpy(headers.data(), request.data() + sizeof(count), count * sizeof(Header));
  uint64_t expected = sizeof(count) + count * sizeof(Header);
  for (size_t i = 0; i < count; ++i) {
    const Buffer& own = (*mine_)[i];
    if (headers[i].bytes != own.bytes || headers[i].in != own.in || headers[i].out != own.out) {
      return Errorf("jaxmg: participant ", index,
                    " brought buffers of another shape to this call: its processes run "
                    "different programs or calls out of order");
    }
    if (own.in) expected += own.bytes;
  }
  if (request.size() != expected) {
    return Errorf("jaxmg: participant ", index, "'s request does not match its buffers");
  }
  Copy& c = copies_[index];
  c.data.assign(count, {});
  c.buffers = *mine_;
  const char* in = request.data() + sizeof(count) + count * sizeof(Header);
  for (size_t i = 0; i < count; ++i) {
    Buffer& b = c.buffers[i];
    if (b.bytes == 0) {
      b.data = nullptr;
      continue;
    }
    if (b.in) {
      c.data[i].assign(in, in + b.bytes);
      in += b.bytes;
    } else {
      c.data[i].assign(b.bytes, 0);
    }
    b.data = c.data[i].data();
  }
  *payload = &c.buffers;
  return Status::Ok();
}

Status HostCopyTransport::Reply(int index, std::string* reply) {
  Copy& c = copies_[index];
  for (const Buffer& b : c.buffers) {
    if (b.out && b.bytes) reply->append(static_cast<const char*>(b.data), b.bytes);
  }
  copies_.erase(index);
  return Status::Ok();
}

Status HostCopyTransport::Apply(const std::string& reply) {
  uint64_t expected = 0;
  for (const Buffer& b : *mine_) expected += b.out ? b.bytes : 0;
  if (reply.size() != expected) return Status::Error("jaxmg: the leader's answer is malformed");
  const char* in = reply.data();
  for (const Buffer& b : *mine_) {
    if (!b.out || !b.bytes) continue;
    std::memcpy(b.data, in, b.bytes);
    in += b.bytes;
  }
  return Status::Ok();
}

}  // namespace jaxmg::rendezvous
