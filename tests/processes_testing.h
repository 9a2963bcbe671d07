// Helpers of the job channel's C++ tests: forked children with a verdict and
// a deadline, unique tokens, a copying Transport that sums int64 arrays and
// rejects values of any other meeting, and this process's thread, fd and
// memory counts.
//
// The parent never calls Open (it starts threads, and fork() must happen
// while the parent has only one); each child opens its own channel.
#ifndef JAXMG_TESTS_PROCESSES_TESTING_H_
#define JAXMG_TESTS_PROCESSES_TESTING_H_

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "tests/check.h"
#include "xla_ext/rendezvous/processes.h"

using jaxmg::Status;
namespace processes = jaxmg::processes;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// CHECK, but prints the failed status's message.
#define CHECK_OK(expr)                                                                  \
  do {                                                                                  \
    const Status s_ = (expr);                                                           \
    if (!s_.ok()) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,         \
                   s_.message().c_str());                                               \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

namespace testing {

constexpr int kValues = 5;
constexpr int64_t kCallA = 11;
constexpr int64_t kCallB = 12;

// Distinct for every (tag, participant, iteration, element), so a request
// routed to the wrong meeting, participant or job shows up as a wrong value.
inline int64_t Value(int64_t tag, int rank, int64_t iteration, int k) {
  return tag * 1000000000 + rank * 1000000 + iteration * 10 + k;
}

inline int64_t Total(int64_t tag, int n, int64_t iteration, int k) {
  int64_t sum = 0;
  for (int r = 0; r < n; ++r) sum += Value(tag, r, iteration, k);
  return sum;
}

inline std::vector<int64_t> Values(int64_t tag, int rank, int64_t iteration, int count) {
  std::vector<int64_t> v(count);
  for (int k = 0; k < count; ++k) v[k] = Value(tag, rank, iteration, k);
  return v;
}

inline std::string Encode(const std::vector<int64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

inline Status Decode(const std::string& bytes, int count, std::vector<int64_t>* v) {
  if (bytes.size() != count * sizeof(int64_t)) {
    return jaxmg::Errorf("test transport: ", bytes.size(), " bytes instead of ",
                         count * sizeof(int64_t));
  }
  v->resize(count);
  std::memcpy(v->data(), bytes.data(), bytes.size());
  return Status::Ok();
}

// Copies: a follower's request is its values, the leader keeps a copy per
// follower as its payload and replies with the copy after the work. With
// `exact_caps` it tells the channel the sizes it needs (as a real transport
// that knows its shapes does); without, the channel's defaults apply.
class CopyTransport : public processes::Transport {
 public:
  CopyTransport(std::vector<int64_t>* mine, int64_t tag, int64_t iteration, bool exact_caps = true)
      : mine_(mine), tag_(tag), iteration_(iteration), exact_caps_(exact_caps),
        count_(static_cast<int>(mine->size())) {}

  Status Export(std::string* request) override {
    *request = Encode(*mine_);
    return Status::Ok();
  }
  Status Import(int index, const std::string& request, void** payload) override {
    std::vector<int64_t>& v = imported_[index];
    JAXMG_RETURN_IF_ERROR(Decode(request, count_, &v));
    if (v != Values(tag_, index, iteration_, count_)) {
      return jaxmg::Errorf("test transport: participant ", index, " brought values of another "
                           "meeting (", v[0], ")");
    }
    *payload = &v;
    return Status::Ok();
  }
  Status Reply(int index, std::string* reply) override {
    *reply = Encode(imported_.at(index));
    return Status::Ok();
  }
  Status Apply(const std::string& reply) override { return Decode(reply, count_, mine_); }
  uint64_t MaxRequestBytes(int index) override {
    return exact_caps_ ? count_ * sizeof(int64_t) : Transport::MaxRequestBytes(index);
  }
  uint64_t MaxReplyBytes() override {
    return exact_caps_ ? count_ * sizeof(int64_t) : Transport::MaxReplyBytes();
  }

 private:
  std::vector<int64_t>* mine_;
  int64_t tag_, iteration_;
  bool exact_caps_;
  int count_;
  std::map<int, std::vector<int64_t>> imported_;
};

inline Status SumWork(const std::vector<void*>& payloads) {
  const size_t count = static_cast<std::vector<int64_t>*>(payloads[0])->size();
  std::vector<int64_t> sum(count, 0);
  for (void* p : payloads) {
    const auto& v = *static_cast<std::vector<int64_t>*>(p);
    for (size_t k = 0; k < count; ++k) sum[k] += v[k];
  }
  for (void* p : payloads) *static_cast<std::vector<int64_t>*>(p) = sum;
  return Status::Ok();
}

// One meeting of participant `rank` of `n` (processes 0..n-1); checks it got
// the total. A failed `prior` is passed on to Meet (the participant failed
// beforehand); `work` replaces the sum (it must still sum).
inline Status MeetOnce(int64_t call_id, int n, int rank, int64_t tag, int64_t iteration,
                       std::chrono::milliseconds timeout, const Status& prior = Status::Ok(),
                       const std::string& signature = std::string(), int count = kValues,
                       bool exact_caps = true,
                       const jaxmg::rendezvous::LeaderWork& work = SumWork) {
  std::vector<int32_t> procs(n);
  for (int i = 0; i < n; ++i) procs[i] = i;
  std::vector<int64_t> mine = Values(tag, rank, iteration, count);
  CopyTransport transport(&mine, tag, iteration, exact_caps);
  JAXMG_RETURN_IF_ERROR(
      processes::Meet(call_id, procs, &mine, timeout, transport, work, prior, signature));
  for (int k = 0; k < count; ++k) {
    if (mine[k] != Total(tag, n, iteration, k)) {
      return jaxmg::Errorf("participant ", rank, " got ", mine[k], " instead of ",
                           Total(tag, n, iteration, k), " at ", k);
    }
  }
  return Status::Ok();
}

inline void RegisterAll(int n, std::initializer_list<int64_t> calls) {
  std::vector<int32_t> procs(n);
  for (int i = 0; i < n; ++i) procs[i] = i;
  for (int64_t c : calls) processes::RegisterCall(c, procs);
}

inline int OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  CHECK(d != nullptr);
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// A field of /proc/self/status ("Threads", "VmRSS" in kB).
inline int64_t StatusField(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0) return std::atoll(line.c_str() + prefix.size());
  }
  return -1;
}

inline bool Contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

inline double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Unique per test run and scenario, so concurrent runs never share a socket.
inline std::string NewToken(const char* scenario) {
  static int counter = 0;
  const auto ns = std::chrono::system_clock::now().time_since_epoch().count();
  return std::string(scenario) + "-" + std::to_string(getpid()) + "-" + std::to_string(ns) + "-" +
         std::to_string(counter++);
}

// Memory shared by the parent and every child forked after it: counters and
// flags the children pass each other.
template <typename T>
T* Shared() {
  void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  return new (p) T();
}

// Runs each body in a forked child; the child's exit status is its verdict.
// Fails the test on a non-zero status or a child still running at the deadline.
inline void RunChildren(const char* scenario, const std::vector<std::function<void()>>& bodies,
                        std::chrono::seconds deadline = 60s) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (const auto& body : bodies) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      body();
      std::fflush(nullptr);
      _exit(0);
    }
    pids.push_back(pid);
  }
  const auto start = Clock::now();
  const auto end = start + deadline;
  std::vector<bool> done(pids.size(), false);
  bool failed = false;
  for (size_t left = pids.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      CHECK(r >= 0);
      if (r == 0) continue;
      done[i] = true;
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "%s: child %zu failed (status 0x%x)\n", scenario, i, status);
        failed = true;
      }
    }
    if (left > 0 && Clock::now() > end) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        std::fprintf(stderr, "%s: child %zu hung; killing it\n", scenario, i);
        kill(pids[i], SIGKILL);
        waitpid(pids[i], nullptr, 0);
      }
      failed = true;
      break;
    }
    if (left > 0) std::this_thread::sleep_for(2ms);
  }
  std::printf("%s: %.2f s\n", scenario, Seconds(start));
  CHECK(!failed);
}

}  // namespace testing

#endif  // JAXMG_TESTS_PROCESSES_TESTING_H_
