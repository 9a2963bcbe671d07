#include "xla_ext/rendezvous/rendezvous.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

namespace jaxmg::rendezvous {
namespace {

struct Meeting {
  explicit Meeting(int n) : n(n), payloads(n, nullptr), arrived(n, false) {}
  const int n;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<void*> payloads;
  std::vector<bool> arrived;
  int n_arrived = 0;
  int n_left = 0;
  bool done = false;
  bool aborted = false;
  Status result;
};

std::mutex registry_mu;
std::map<CallKey, std::shared_ptr<Meeting>>& Registry() {
  static auto* registry = new std::map<CallKey, std::shared_ptr<Meeting>>();
  return *registry;
}

std::string MissingMessage(const Meeting& m, const CallKey& key,
                           std::chrono::milliseconds timeout) {
  std::ostringstream out;
  out << "jaxmg: participants [";
  const char* sep = "";
  for (int i = 0; i < m.n; ++i) {
    if (!m.arrived[i]) {
      out << sep << i;
      sep = ", ";
    }
  }
  out << "] of " << m.n << " did not reach call " << key.call_id << " (run " << key.run_id
      << ") within " << timeout.count() << " ms. Every device of the mesh must execute the "
      << "same jaxmg call; raise JAXMG_TIMEOUT_S if a device is merely slow.";
  return out.str();
}

// The meeting is forgotten once every participant has arrived and left; an
// aborted meeting stays until its stragglers arrive, so they fail at once
// instead of waiting out their own timeout.
void Leave(const CallKey& key, Meeting& m) {
  m.n_left += 1;
  if (m.n_left == m.n) {
    std::lock_guard<std::mutex> lock(registry_mu);
    Registry().erase(key);
  }
}

Status RunLeaderWork(const LeaderWork& work, const std::vector<void*>& payloads) {
  try {
    return work(payloads);
  } catch (const std::exception& e) {
    return Errorf("jaxmg: internal error in collective work: ", e.what());
  } catch (...) {
    return Status::Error("jaxmg: unknown internal error in collective work");
  }
}

}  // namespace

Status Meet(const CallKey& key, int n, int index, void* payload,
            std::chrono::milliseconds arrival_timeout, const LeaderWork& leader_work) {
  if (n < 1 || index < 0 || index >= n) {
    return Errorf("jaxmg: participant index ", index, " is outside a mesh of ", n, " devices");
  }
  std::shared_ptr<Meeting> meeting;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    auto& slot = Registry()[key];
    if (!slot) slot = std::make_shared<Meeting>(n);
    meeting = slot;
  }
  Meeting& m = *meeting;
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.n != n) {
    return Errorf("jaxmg: participants of call ", key.call_id, " disagree on the mesh size (",
                  m.n, " vs ", n, ")");
  }
  if (m.arrived[index]) {
    return Errorf("jaxmg: participant ", index, " arrived twice at call ", key.call_id,
                  "; each device of the mesh must appear once");
  }
  m.arrived[index] = true;
  m.payloads[index] = payload;
  m.n_arrived += 1;
  m.cv.notify_all();

  if (m.aborted) {
    Status result = m.result;
    Leave(key, m);
    return result;
  }
  const bool all_here = m.cv.wait_for(lock, arrival_timeout,
                                      [&m] { return m.n_arrived == m.n || m.aborted; });
  if (!all_here) {
    m.aborted = true;
    m.result = Status::Error(MissingMessage(m, key, arrival_timeout));
    m.cv.notify_all();
  }
  if (m.aborted) {
    Status result = m.result;
    Leave(key, m);
    return result;
  }

  if (index == 0) {
    lock.unlock();
    Status result = RunLeaderWork(leader_work, m.payloads);
    lock.lock();
    m.result = result;
    m.done = true;
    m.cv.notify_all();
  } else {
    m.cv.wait(lock, [&m] { return m.done; });
  }
  Status result = m.result;
  Leave(key, m);
  return result;
}

int64_t LiveMeetings() {
  std::lock_guard<std::mutex> lock(registry_mu);
  return static_cast<int64_t>(Registry().size());
}

}  // namespace jaxmg::rendezvous
