// The job channel's wire format: processes.cc speaks it, and tests use it to
// play hostile peers.
//
// Every connection goes from a follower to a leader (the participant 0 of a
// call). Before anything else moves, both ends check the other's uid
// (SO_PEERCRED equals their own) and then prove to each other that they hold
// the job's secret, without sending it, in four messages of fixed size:
//   follower -> leader   Hello      the follower's rank, the leader's, a fresh nonce
//   leader   -> follower Challenge  the leader's nonce and its proof
//   follower -> leader   Answer     the follower's proof
//   leader   -> follower Welcome    the follower may speak
// A proof is HMAC-SHA-256(secret, role, job name, both ranks, both nonces):
// valid for this connection only, and a leader's never passes for a
// follower's. The follower checks the leader's proof before it proves itself,
// so a process squatting on the leader's name learns only the ranks and a
// nonce. Each handshake message must arrive within kHandshakeTimeout.
//
// Then frames: a Header and `size` bytes of body.
//   kArrive   F->L  ok: Arrival, signature, and the request when it is at most
//                   kInlineRequest bytes; not ok: why the follower failed
//   kStarted  L->F  the meeting started: send the request if it was not inline
//   kRequest  F->L  the request: exactly the bytes announced in Arrival
//   kDone     L->F  ok: the reply; not ok: why the meeting failed
//   kCancel   F->L  the follower gave up waiting for the start
//   kBye      both  this process exits normally (no goodbye: it crashed or was killed)
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_CHANNEL_WIRE_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_CHANNEL_WIRE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "xla_ext/rendezvous/sha256.h"

namespace jaxmg::processes::wire {

constexpr uint32_t kMagic = 0x6a786d67;  // "jxmg"
constexpr uint32_t kVersion = 2;

using Nonce = std::array<uint8_t, 32>;

struct Hello {
  uint32_t magic, version;
  int32_t follower, leader;
  Nonce nonce;
};
struct Challenge {
  uint32_t magic, version;
  int32_t leader, follower;
  Nonce nonce;
  sha256::Digest proof;
};
struct Answer {
  uint32_t magic, version;
  sha256::Digest proof;
};
struct Welcome {
  uint32_t magic, version;
};
static_assert(sizeof(Hello) == 48 && sizeof(Challenge) == 80 && sizeof(Answer) == 40 &&
              sizeof(Welcome) == 8, "the handshake messages have no padding");

enum class Role { kLeader, kFollower };

inline sha256::Digest Proof(const std::string& secret, Role role, const std::string& job,
                            int32_t leader, int32_t follower, const Nonce& follower_nonce,
                            const Nonce& leader_nonce) {
  std::string m = role == Role::kLeader ? "jaxmg channel leader" : "jaxmg channel follower";
  m.push_back('\0');
  m += job;
  m.push_back('\0');
  for (int32_t rank : {leader, follower}) {
    for (int i = 0; i < 4; ++i) m.push_back(static_cast<char>(static_cast<uint32_t>(rank) >> (8 * i)));
  }
  m.append(reinterpret_cast<const char*>(follower_nonce.data()), follower_nonce.size());
  m.append(reinterpret_cast<const char*>(leader_nonce.data()), leader_nonce.size());
  return sha256::Hmac(secret, m);
}

enum Kind : uint32_t {
  kArrive = 1,
  kStarted = 2,
  kRequest = 3,
  kDone = 4,
  kCancel = 5,
  kBye = 6,
};

struct Header {
  uint32_t magic;
  uint32_t kind;
  int64_t call_id;
  int64_t generation;
  int32_t index;  // the participant
  int32_t ok;
  uint64_t size;  // bytes of body that follow
};

struct Arrival {
  uint64_t request_bytes;
  uint32_t signature_bytes;
  uint32_t reserved;
};

// Limits before authentication: a connection that has not finished the
// handshake in time is closed; beyond kMaxUnauthenticated at once, the
// oldest of those that have not even said hello is closed.
constexpr auto kHandshakeTimeout = std::chrono::seconds(2);
constexpr int kMaxUnauthenticated = 16;
// Limits after it.
constexpr int kMaxPeers = 1024;                 // authenticated connections into one process
constexpr uint64_t kMaxSignature = 4096;        // bytes
constexpr uint64_t kInlineRequest = 64 << 10;   // requests up to this travel with the arrival
constexpr uint64_t kMaxMessage = 64 << 10;      // an error message
constexpr int kMaxArrivalsPerPeer = 256;        // arrivals waiting for their meeting

}  // namespace jaxmg::processes::wire

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_CHANNEL_WIRE_H_
