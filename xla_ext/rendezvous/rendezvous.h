// In-process meeting of the n participants (one thread per device) of one
// jaxmg call. Each participant brings a payload (its buffers); the leader,
// participant 0, runs the collective work over all payloads while the others
// wait. Keyed by (call_id, run_id): call_id is unique per call site in a
// traced program, run_id is XLA's id of one execution, so two calls or two
// concurrent executions never mix. A call site that runs several times in
// one execution (inside a loop) meets once per iteration, in order.
#ifndef JAXMG_XLA_EXT_RENDEZVOUS_RENDEZVOUS_H_
#define JAXMG_XLA_EXT_RENDEZVOUS_RENDEZVOUS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "xla_ext/common/status.h"

namespace jaxmg::rendezvous {

struct CallKey {
  int64_t call_id;
  int64_t run_id;
  bool operator<(const CallKey& o) const {
    return call_id != o.call_id ? call_id < o.call_id : run_id < o.run_id;
  }
};

using LeaderWork = std::function<Status(const std::vector<void*>& payloads)>;

// Blocks until all n participants of `key` have arrived (or `arrival_timeout`
// passes, which fails every participant with a message naming the missing
// ones), then until the leader's work is done. Returns the leader's status to
// every participant.
Status Meet(const CallKey& key, int n, int index, void* payload,
            std::chrono::milliseconds arrival_timeout, const LeaderWork& leader_work);

// Every participant's `value`, in participant order, into each one's `all`:
// a meeting of its own whose leader copies the values out.
Status Gather(const CallKey& key, int n, int index, int64_t value,
              std::chrono::milliseconds arrival_timeout, std::vector<int64_t>* all);

// Runs the leader's work, turning an escaping exception into an error (no
// exception crosses into XLA). Shared with the cross-process meeting.
Status RunLeaderWork(const LeaderWork& work, const std::vector<void*>& payloads);

// Meetings currently registered (live or waiting for stragglers of a failed
// call). Zero between successful calls; exported for leak tests.
int64_t LiveMeetings();

}  // namespace jaxmg::rendezvous

#endif  // JAXMG_XLA_EXT_RENDEZVOUS_RENDEZVOUS_H_
