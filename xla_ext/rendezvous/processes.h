// Meeting of the participants of one jaxmg call when they live in different
// processes (one process per device: jax.distributed, Slurm, mpirun). Every
// process listens on a job-private Unix socket (abstract namespace, named by
// a random job token, so nothing is left on disk and two jobs never meet);
// each follower sends the leader (participant 0) a request describing its
// buffers, the leader runs the collective work over them all and answers
// each follower. A Transport says how buffers cross: CUDA IPC handles on
// GPUs (the leader writes into the followers' memory), copies on CPUs.
//
// Only processes of the same user that prove they hold the job's secret take
// part (channel_wire.h has the handshake); until a peer has, nothing of the
// job is sent to it and nothing it sends changes anything. Every length read
// from a peer is bounded before it is used.
//
// A call runs here when Python registered its participants' processes
// (RegisterCall) at trace time; otherwise the in-process rendezvous serves it.
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_PROCESSES_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_PROCESSES_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "xla_ext/common/status.h"
#include "xla_ext/rendezvous/rendezvous.h"

namespace jaxmg::processes {

// No request or reply is ever larger than this.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;

class Transport {
 public:
  virtual ~Transport() = default;
  // Follower: what the leader needs to reach this participant's buffers.
  virtual Status Export(std::string* request) = 0;
  // Leader: a payload standing for follower `index`, built from its request;
  // it stays valid until Reply(index) has run.
  virtual Status Import(int index, const std::string& request, void** payload) = 0;
  // Leader, after the work succeeded: what follower `index` must apply.
  virtual Status Reply(int index, std::string* reply) = 0;
  // Follower: applies the leader's reply to its own buffers.
  virtual Status Apply(const std::string& reply) = 0;
  // Leader: the most bytes follower `index`'s request may take, and
  // follower: the most bytes the leader's reply may take. A peer announcing
  // more fails the meeting before its bytes are read; a transport that knows
  // its sizes (they follow from the call's shapes) says so here.
  virtual uint64_t MaxRequestBytes(int /*index*/) { return kMaxPayloadBytes; }
  virtual uint64_t MaxReplyBytes() { return kMaxPayloadBytes; }
};

// Starts listening as `process_index` of the job `token` = "name:secret": the
// name names the sockets, the secret (never part of a name, never sent)
// admits peers, and only processes of the same user may connect. Idempotent
// for the same pair; a new token closes the old channel first. Fails at once,
// naming the holder (pid and user), when another process holds the name.
Status Open(const std::string& token, int process_index);
int ProcessIndex();  // -1 before Open

// Participant i of call `call_id` runs in process processes[i]; one
// participant per process.
void RegisterCall(int64_t call_id, std::vector<int32_t> processes);
// The registered processes of a call; false if it runs in one process.
bool CallProcesses(int64_t call_id, std::vector<int32_t>* processes);

// Blocks until every participant of this run of `call_id` has arrived (or
// `arrival_timeout` passes, or a peer's connection drops: each fails every
// participant with a message naming who is missing), then until the leader's
// work is done. A call site met repeatedly (loops) meets once per run, in
// order, as in rendezvous::Meet. A participant that failed before the
// meeting passes its error as `prior`: it still takes its turn (so the runs
// of every process stay paired) and fails the meeting for everyone.
//
// `signature` describes what this participant brings (opaque bytes of at
// most 4096: the routine, dtype and shapes). The leader compares every
// follower's with its own before any work and on a difference fails every
// participant with a message naming the participant and both signatures
// (printable bytes as they are, others as \xNN). Empty everywhere: not
// compared.
//
// A peer that dies fails the meeting for everyone: at once before the work,
// and as the work ends when it died during it (the leader's own result is
// then discarded too, so no participant succeeds where another failed).
Status Meet(int64_t call_id, const std::vector<int32_t>& processes, void* mine,
            std::chrono::milliseconds arrival_timeout, Transport& transport,
            const rendezvous::LeaderWork& work, const Status& prior = Status::Ok(),
            const std::string& signature = std::string());

struct Stats {
  int64_t connections;  // open sockets: incoming and outgoing
  int64_t pending;      // requests waiting for their meeting
  int64_t calls;        // registered cross-process call sites
  int64_t failed;       // meetings that failed in this process
  int64_t lost;         // peers whose channel closed without a goodbye (killed, crashed)
};
Stats GetStats();

}  // namespace jaxmg::processes

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_PROCESSES_H_
