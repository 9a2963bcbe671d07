// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104): the job channel proves
// that both ends hold the job's secret without sending it.
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_SHA256_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace jaxmg::sha256 {

using Digest = std::array<uint8_t, 32>;

// Incremental hashing: Update any number of times, then Finish once.
class Hasher {
 public:
  Hasher();
  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  Digest Finish();

 private:
  void Compress(const uint8_t* block);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> block_{};
  size_t used_ = 0;     // bytes waiting in block_
  uint64_t total_ = 0;  // message length in bytes
};

Digest Hash(std::string_view message);
Digest Hmac(std::string_view key, std::string_view message);

// Compares in time independent of where the digests differ.
bool Equal(const Digest& a, const Digest& b);

}  // namespace jaxmg::sha256

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_SHA256_H_
