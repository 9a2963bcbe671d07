#include "xla_ext/rendezvous/rendezvous.h"

#include <algorithm>
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

// One key's meetings. A call site inside a loop (lax.scan, fori_loop, vmap)
// meets once per iteration under the same key: a participant's k-th arrival
// joins the key's k-th meeting, so a fast participant that runs ahead never
// enters a meeting its slower peers have not left.
struct Series {
  explicit Series(int n) : arrivals(n, 0) {}
  std::vector<int64_t> arrivals;  // per participant
  std::map<int64_t, std::shared_ptr<Meeting>> meetings;  // by generation
};

std::mutex registry_mu;
std::map<CallKey, Series>& Registry() {
  static auto* registry = new std::map<CallKey, Series>();
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
      << "same jaxmg call; raise JAXMG_TIMEOUT_S if a device is merely slow. On CPU devices of "
      << "one process a device is also kept away when jitted programs holding jaxmg calls are "
      << "dispatched in a loop without waiting: wait for their results, or set PJRT_NPROC to at "
      << "least twice the number of devices before JAX starts.";
  return out.str();
}

// The meeting is forgotten once every participant has arrived and left; an
// aborted meeting stays until its stragglers arrive, so they fail at once
// instead of waiting out their own timeout.
void Leave(const CallKey& key, int64_t generation, Meeting& m) {
  m.n_left += 1;
  if (m.n_left != m.n) return;
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(key);
  if (it == Registry().end()) return;
  Series& series = it->second;
  series.meetings.erase(generation);
  const auto& a = series.arrivals;
  const bool level = std::all_of(a.begin(), a.end(), [&](int64_t g) { return g == a[0]; });
  if (series.meetings.empty() && level) Registry().erase(it);
}

}  // namespace

Status Meet(const CallKey& key, int n, int index, void* payload,
            std::chrono::milliseconds arrival_timeout, const LeaderWork& leader_work) {
  if (n < 1 || index < 0 || index >= n) {
    return Errorf("jaxmg: participant index ", index, " is outside a mesh of ", n, " devices");
  }
  std::shared_ptr<Meeting> meeting;
  int64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    Series& series = Registry().try_emplace(key, n).first->second;
    if (static_cast<int>(series.arrivals.size()) != n) {
      return Errorf("jaxmg: participants of call ", key.call_id,
                    " disagree on the mesh size (", series.arrivals.size(), " vs ", n, ")");
    }
    generation = series.arrivals[index]++;
    auto& slot = series.meetings[generation];
    if (!slot) slot = std::make_shared<Meeting>(n);
    meeting = slot;
  }
  Meeting& m = *meeting;
  std::unique_lock<std::mutex> lock(m.mu);
  m.arrived[index] = true;
  m.payloads[index] = payload;
  m.n_arrived += 1;
  m.cv.notify_all();

  if (m.aborted) {
    Status result = m.result;
    Leave(key, generation, m);
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
    Leave(key, generation, m);
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
  Leave(key, generation, m);
  return result;
}

Status Gather(const CallKey& key, int n, int index, int64_t value,
              std::chrono::milliseconds arrival_timeout, std::vector<int64_t>* all) {
  struct Slot {
    int64_t value;
    std::vector<int64_t>* all;
  } mine{value, all};
  return Meet(key, n, index, &mine, arrival_timeout, [](const std::vector<void*>& slots) {
    std::vector<int64_t> values;
    for (void* p : slots) values.push_back(static_cast<Slot*>(p)->value);
    for (void* p : slots) *static_cast<Slot*>(p)->all = values;
    return Status::Ok();
  });
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

int64_t LiveMeetings() {
  std::lock_guard<std::mutex> lock(registry_mu);
  return static_cast<int64_t>(Registry().size());
}

}  // namespace jaxmg::rendezvous
