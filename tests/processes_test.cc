// The cross-process meeting: forked processes meet over their job channel,
// sum int64 arrays through a copying Transport, leak nothing over many
// generations, name a missing participant, notice a dead peer quickly, and
// two jobs with different tokens never mix. A meeting abandoned by a follower
// fails for all; a participant's prior failure fails its meeting for all at
// once and keeps the runs paired; staggered arrivals never let one
// participant succeed where another failed; a process without the job's
// secret cannot take part.
//
// The parent never calls Open (it starts threads, and fork() must happen
// while the parent has only one); each child opens its own channel.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
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

namespace {

constexpr int kValues = 5;
constexpr int64_t kCallA = 11;
constexpr int64_t kCallB = 12;

// Distinct for every (tag, participant, iteration, element), so a request
// routed to the wrong meeting, participant or job shows up as a wrong value.
int64_t Value(int64_t tag, int rank, int64_t iteration, int k) {
  return tag * 1000000000 + rank * 1000000 + iteration * 10 + k;
}

int64_t Total(int64_t tag, int n, int64_t iteration, int k) {
  int64_t sum = 0;
  for (int r = 0; r < n; ++r) sum += Value(tag, r, iteration, k);
  return sum;
}

std::vector<int64_t> Values(int64_t tag, int rank, int64_t iteration) {
  std::vector<int64_t> v(kValues);
  for (int k = 0; k < kValues; ++k) v[k] = Value(tag, rank, iteration, k);
  return v;
}

std::string Encode(const std::vector<int64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

Status Decode(const std::string& bytes, std::vector<int64_t>* v) {
  if (bytes.size() != kValues * sizeof(int64_t)) {
    return jaxmg::Errorf("test transport: ", bytes.size(), " bytes instead of ",
                         kValues * sizeof(int64_t));
  }
  v->resize(kValues);
  std::memcpy(v->data(), bytes.data(), bytes.size());
  return Status::Ok();
}

// Copies: a follower's request is its values, the leader keeps a copy per
// follower as its payload and replies with the copy after the work.
class CopyTransport : public processes::Transport {
 public:
  CopyTransport(std::vector<int64_t>* mine, int64_t tag, int64_t iteration)
      : mine_(mine), tag_(tag), iteration_(iteration) {}

  Status Export(std::string* request) override {
    *request = Encode(*mine_);
    return Status::Ok();
  }
  Status Import(int index, const std::string& request, void** payload) override {
    std::vector<int64_t>& v = imported_[index];
    JAXMG_RETURN_IF_ERROR(Decode(request, &v));
    if (v != Values(tag_, index, iteration_)) {
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
  Status Apply(const std::string& reply) override { return Decode(reply, mine_); }

 private:
  std::vector<int64_t>* mine_;
  int64_t tag_, iteration_;
  std::map<int, std::vector<int64_t>> imported_;
};

Status SumWork(const std::vector<void*>& payloads) {
  std::vector<int64_t> sum(kValues, 0);
  for (void* p : payloads) {
    const auto& v = *static_cast<std::vector<int64_t>*>(p);
    for (int k = 0; k < kValues; ++k) sum[k] += v[k];
  }
  for (void* p : payloads) *static_cast<std::vector<int64_t>*>(p) = sum;
  return Status::Ok();
}

// One meeting of participant `rank` of `n`; checks it got the total. A
// failed `prior` is passed on to Meet (the participant failed beforehand).
Status MeetOnce(int64_t call_id, int n, int rank, int64_t tag, int64_t iteration,
                std::chrono::milliseconds timeout, const Status& prior = Status::Ok()) {
  std::vector<int32_t> procs(n);
  for (int i = 0; i < n; ++i) procs[i] = i;
  std::vector<int64_t> mine = Values(tag, rank, iteration);
  CopyTransport transport(&mine, tag, iteration);
  JAXMG_RETURN_IF_ERROR(
      processes::Meet(call_id, procs, &mine, timeout, transport, SumWork, prior));
  for (int k = 0; k < kValues; ++k) {
    if (mine[k] != Total(tag, n, iteration, k)) {
      return jaxmg::Errorf("participant ", rank, " got ", mine[k], " instead of ",
                           Total(tag, n, iteration, k));
    }
  }
  return Status::Ok();
}

void RegisterAll(int n, std::initializer_list<int64_t> calls) {
  std::vector<int32_t> procs(n);
  for (int i = 0; i < n; ++i) procs[i] = i;
  for (int64_t c : calls) processes::RegisterCall(c, procs);
}

int OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  CHECK(d != nullptr);
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

bool Contains(const Status& s, const char* part) {
  return s.message().find(part) != std::string::npos;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Unique per test run and scenario, so concurrent runs never share a socket.
std::string NewToken(const char* scenario) {
  static int counter = 0;
  const auto ns = std::chrono::system_clock::now().time_since_epoch().count();
  return std::string(scenario) + "-" + std::to_string(getpid()) + "-" + std::to_string(ns) + "-" +
         std::to_string(counter++);
}

// Runs each body in a forked child; the child's exit status is its verdict.
// Fails the test on a non-zero status or a child still running at the deadline.
void RunChildren(const char* scenario, const std::vector<std::function<void()>>& bodies,
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

// 1. Three processes, two interleaved call sites met 10,000 times each: every
// meeting sums correctly, and no file descriptor or request piles up.
void CheckManyGenerations() {
  constexpr int kN = 3;
  constexpr int kIterations = 10000;
  const std::string token = NewToken("generations");
  std::vector<std::function<void()>> bodies;
  for (int rank = 0; rank < kN; ++rank) {
    bodies.push_back([=] {
      CHECK_OK(processes::Open(token, rank));
      CHECK(processes::ProcessIndex() == rank);
      RegisterAll(kN, {kCallA, kCallB});
      int fds_after_first = -1;
      for (int it = 0; it < kIterations; ++it) {
        CHECK_OK(MeetOnce(kCallA, kN, rank, 1, it, 10s));
        if (it == 0) fds_after_first = OpenFds();
        CHECK_OK(MeetOnce(kCallB, kN, rank, 2, it, 10s));
      }
      const int fds_at_end = OpenFds();
      if (fds_at_end != fds_after_first) {
        std::fprintf(stderr, "process %d: %d fds after the first meeting, %d at the end\n", rank,
                     fds_after_first, fds_at_end);
      }
      CHECK(fds_at_end == fds_after_first);
      CHECK(processes::GetStats().pending == 0);
      CHECK(processes::GetStats().calls == 2);
    });
  }
  RunChildren("generations", bodies);
}

// 2. The follower is up but never meets: the leader gives up after its
// timeout and names participant 1.
void CheckMissingParticipant() {
  const std::string token = NewToken("missing");
  RunChildren("missing", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, 0, 1, 0, 300ms);
        const double elapsed = Seconds(start);
        std::fprintf(stderr, "missing: leader after %.3f s: %s\n", elapsed, s.message().c_str());
        CHECK(!s.ok());
        CHECK(Contains(s, "participants [1 (process 1)]"));
        CHECK(Contains(s, "did not reach"));
        CHECK(elapsed >= 0.3 && elapsed < 3.0);
        CHECK(processes::GetStats().pending == 0);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        std::this_thread::sleep_for(1s);
      },
  });
}

// 3. A peer that dies between meetings is noticed through its closed socket,
// long before the 30 s arrival timeout.
void CheckDeadFollower() {
  const std::string token = NewToken("deadfollower");
  RunChildren("dead follower", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        CHECK_OK(MeetOnce(kCallA, 2, 0, 1, 0, 10s));
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, 0, 1, 1, 30s);
        const double elapsed = Seconds(start);
        std::fprintf(stderr, "dead follower: leader after %.3f s: %s\n", elapsed,
                     s.message().c_str());
        CHECK(!s.ok());
        CHECK(Contains(s, "disconnected") || Contains(s, "closed"));
        CHECK(elapsed < 5.0);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        CHECK_OK(MeetOnce(kCallA, 2, 1, 1, 0, 10s));
        _exit(0);
      },
  });
}

void CheckDeadLeader() {
  const std::string token = NewToken("deadleader");
  RunChildren("dead leader", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        CHECK_OK(MeetOnce(kCallA, 2, 0, 1, 0, 10s));
        _exit(0);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        CHECK_OK(MeetOnce(kCallA, 2, 1, 1, 0, 10s));
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, 1, 1, 1, 30s);
        const double elapsed = Seconds(start);
        std::fprintf(stderr, "dead leader: follower after %.3f s: %s\n", elapsed,
                     s.message().c_str());
        CHECK(!s.ok());
        CHECK(Contains(s, "closed its channel"));
        CHECK(elapsed < 5.0);
      },
  });
}

// 4. Two jobs with the same call ids and ranks run side by side; the
// transport rejects any request carrying the other job's values.
void CheckJobsIsolated() {
  constexpr int kIterations = 500;
  std::vector<std::function<void()>> bodies;
  for (int64_t job : {1, 2}) {
    const std::string token = NewToken("isolation");
    for (int rank = 0; rank < 2; ++rank) {
      bodies.push_back([=] {
        CHECK_OK(processes::Open(token, rank));
        RegisterAll(2, {kCallA});
        for (int it = 0; it < kIterations; ++it) CHECK_OK(MeetOnce(kCallA, 2, rank, job, it, 10s));
        CHECK(processes::GetStats().pending == 0);
      });
    }
  }
  RunChildren("isolation", bodies);
}

// 4b. Two calls in flight at once on one follower (XLA:CPU may run
// independent calls concurrently), met by the leader in the other order:
// each answer reaches its own waiter, so neither waits for the other.
void CheckConcurrentCalls() {
  const std::string token = NewToken("concurrent");
  RunChildren("concurrent calls", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA, kCallB});
        for (int it = 0; it < 50; ++it) {
          CHECK_OK(MeetOnce(kCallB, 2, 0, 2, it, 10s));
          CHECK_OK(MeetOnce(kCallA, 2, 0, 1, it, 10s));
        }
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA, kCallB});
        for (int it = 0; it < 50; ++it) {
          Status a, b;
          std::thread first([&] { a = MeetOnce(kCallA, 2, 1, 1, it, 10s); });
          std::this_thread::sleep_for(1ms);  // A's request goes out first
          std::thread second([&] { b = MeetOnce(kCallB, 2, 1, 2, it, 10s); });
          first.join();
          second.join();
          CHECK_OK(a);
          CHECK_OK(b);
        }
      },
  }, 30s);
}

// 5. A follower that gave up (its arrival timeout passed) or died after
// sending its request: a leader arriving later must fail that meeting too,
// or participants of one meeting would disagree (and on GPUs the leader would
// write into buffers the follower no longer owns).
void LateLeader(const std::string& token) {
  CHECK_OK(processes::Open(token, 0));
  RegisterAll(2, {kCallA});
  std::this_thread::sleep_for(800ms);
  const auto start = Clock::now();
  const Status s = MeetOnce(kCallA, 2, 0, 1, 0, 30s);
  const double elapsed = Seconds(start);
  CHECK(!s.ok());
  CHECK(elapsed < 5.0);
}

void CheckAbandonedRequest() {
  const std::string gave_up = NewToken("gaveup");
  const std::string died = NewToken("died");
  RunChildren("abandoned request", {
      [=] { LateLeader(gave_up); },
      [=] {
        CHECK_OK(processes::Open(gave_up, 1));
        RegisterAll(2, {kCallA});
        const Status s = MeetOnce(kCallA, 2, 1, 1, 0, 300ms);
        CHECK(!s.ok() && Contains(s, "waited 300 ms"));
        std::this_thread::sleep_for(1s);  // alive while the leader meets
      },
      [=] { LateLeader(died); },
      [=] {
        CHECK_OK(processes::Open(died, 1));
        RegisterAll(2, {kCallA});
        // Dies while blocked in Meet, its request already sent.
        std::thread([] {
          std::this_thread::sleep_for(200ms);
          _exit(0);
        }).detach();
        MeetOnce(kCallA, 2, 1, 1, 0, 30s);
        _exit(1);  // Meet cannot return before the leader arrives
      },
  });
}

// 6, 7. A participant that failed before the meeting passes its error as
// `prior`: follower (failing = 1) or leader (failing = 0). The other one
// (arrival timeout 30 s) fails at once with that message, whether the failure
// came first (run 0) or while it waited (run 1); a failed leader waits for
// nobody. The failed runs still count on both sides, so run 2 of the same
// call meets normally.
void CheckPriorFailure(int failing) {
  const std::string token = NewToken(failing ? "followerprior" : "leaderprior");
  const std::string message = "boom from " + std::to_string(failing);
  const char* scenario = failing ? "follower prior failure" : "leader prior failure";
  auto participant = [=](int rank) {
    return std::function<void()>([=] {
      const bool fails = rank == failing;
      CHECK_OK(processes::Open(token, rank));
      RegisterAll(2, {kCallA});
      if (!fails) std::this_thread::sleep_for(300ms);  // run 0: the failure is already there
      for (int64_t run : {0, 1}) {
        if (fails && run == 1) std::this_thread::sleep_for(600ms);  // the other waits already
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, rank, 1, run, 30s,
                                  fails ? Status::Error(message) : Status::Ok());
        const double elapsed = Seconds(start);
        std::fprintf(stderr, "%s: rank %d run %ld after %.3f s: %s\n", scenario, rank,
                     static_cast<long>(run), elapsed, s.message().c_str());
        CHECK(!s.ok());
        CHECK(Contains(s, message.c_str()));
        CHECK(elapsed < (fails && rank == 0 ? 1.0 : 5.0));
      }
      CHECK_OK(MeetOnce(kCallA, 2, rank, 1, 2, 10s));
      if (rank == 0) CHECK(processes::GetStats().pending == 0);
    });
  };
  RunChildren(scenario, {participant(0), participant(1)}, 20s);
}

// 8. Staggered arrivals, arrival timeout 1.5 s for all: follower 1 comes at
// t = 0 and gives up at 1.5 s, after the leader came (1.1 s) but before
// follower 2 (2.6 s). Follower 1's request is withdrawn, so the meeting fails
// for everyone: no participant may succeed where another failed. Follower 1
// fails at its own timeout, the leader at the withdrawal (before its own
// timeout), follower 2 at once; all within 3 s of their own arrival. The
// next run of the call meets normally.
void CheckStaggeredArrivals() {
  const std::string token = NewToken("staggered");
  const auto t0 = Clock::now() + 300ms;  // CLOCK_MONOTONIC: the same in every child
  auto participant = [=](int rank, std::chrono::milliseconds arrival) {
    return std::function<void()>([=] {
      CHECK_OK(processes::Open(token, rank));
      RegisterAll(3, {kCallA});
      std::this_thread::sleep_until(t0 + arrival);
      const auto start = Clock::now();
      const Status s = MeetOnce(kCallA, 3, rank, 1, 0, 1500ms);
      const double elapsed = Seconds(start);
      std::fprintf(stderr, "staggered: participant %d (arrived at %.3f s) after %.3f s: %s\n", rank,
                   std::chrono::duration<double>(start - t0).count(), elapsed,
                   s.message().c_str());
      CHECK(!s.ok());
      if (rank == 1) {
        // It fails when its own timeout passes, not when the leader's does.
        CHECK(Contains(s, "waited 1500 ms"));
        CHECK(elapsed >= 1.45 && elapsed < 2.5);
      } else if (rank == 0) {
        // Follower 1's withdrawal (0.4 s after it came) fails the meeting.
        CHECK(elapsed < 1.3);
      } else {
        CHECK(elapsed < 3.0);
      }
      CHECK_OK(MeetOnce(kCallA, 3, rank, 1, 1, 10s));
      CHECK(processes::GetStats().pending == 0);
    });
  };
  RunChildren("staggered arrivals", {participant(0, 1100ms), participant(1, 0ms),
                                     participant(2, 2600ms)}, 20s);
}

// 9. A process that has the job's name but not its secret ("name:wrong", or a
// bare "name", whose secret is the name) cannot take part: the leader's proof
// does not check out for it, so its Meet fails at once naming the leader as
// unproven (it sends nothing), and the leader, whose real follower never
// came, times out naming participant 1 (not as disconnected: the impostor
// never counted as it).
// Each impostor is a process of its own holding rank 1's socket name in
// turn; the real follower comes once they left it, and a fresh call meets
// normally.
void Impostor(const std::string& wrong, const std::string& name) {
  Status opened;
  const auto until = Clock::now() + 5s;
  do {  // until the previous holder has left rank 1's socket name
    opened = processes::Open(wrong, 1);
    if (!opened.ok()) std::this_thread::sleep_for(20ms);
  } while (!opened.ok() && Clock::now() < until);
  CHECK_OK(opened);
  RegisterAll(2, {kCallA});
  const auto start = Clock::now();
  const Status s = MeetOnce(kCallA, 2, 1, 1, 0, 3s);
  const double elapsed = Seconds(start);
  std::fprintf(stderr, "wrong secret: impostor %s after %.3f s: %s\n",
               wrong == name ? "with the bare name" : wrong.c_str() + name.size(), elapsed,
               s.message().c_str());
  CHECK(!s.ok());
  CHECK(Contains(s, "could not prove that it holds this job's secret"));
  CHECK(Contains(s, "Nothing was sent to it"));
  CHECK(elapsed < 2.0);
}

void CheckWrongSecret() {
  const std::string name = NewToken("secret");
  const std::string token = name + ":right";
  RunChildren("wrong secret", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA, kCallB});
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, 0, 1, 0, 1s);
        const double elapsed = Seconds(start);
        std::fprintf(stderr, "wrong secret: leader after %.3f s: %s\n", elapsed,
                     s.message().c_str());
        CHECK(!s.ok());
        CHECK(Contains(s, "participants [1 (process 1)]"));
        CHECK(Contains(s, "did not reach"));
        CHECK(elapsed >= 1.0 && elapsed < 4.0);
        CHECK_OK(MeetOnce(kCallB, 2, 0, 2, 0, 10s));
        CHECK(processes::GetStats().pending == 0);
        CHECK(processes::GetStats().connections == 1);  // the impostors' are gone
      },
      [=] { Impostor(name + ":wrong", name); },
      [=] {
        std::this_thread::sleep_for(300ms);  // after the first impostor
        Impostor(name, name);
      },
      [=] {
        std::this_thread::sleep_for(1300ms);  // after the leader's call A timed out
        Status opened;
        const auto until = Clock::now() + 5s;
        do {  // until the impostors have left rank 1's socket name
          opened = processes::Open(token, 1);
          if (!opened.ok()) std::this_thread::sleep_for(20ms);
        } while (!opened.ok() && Clock::now() < until);
        CHECK_OK(opened);
        RegisterAll(2, {kCallA, kCallB});
        CHECK_OK(MeetOnce(kCallB, 2, 1, 2, 0, 10s));
        std::this_thread::sleep_for(300ms);  // connected while the leader counts
      },
  }, 20s);
}

// 10. Reopening a channel under the same name with another secret: Open must
// wait for the old acceptor to leave accept() before it binds the name again
// (the sleep makes sure the acceptor sits in accept()).

void CheckReopenSameName() {
  const std::string name = NewToken("reopen");
  RunChildren("re-open same name", {
      [=] {
        for (int i = 0; i < 20; ++i) {
          std::this_thread::sleep_for(10ms);  // the Accept thread blocks in accept()
          CHECK_OK(processes::Open(name + (i % 2 == 0 ? ":a" : ":b"), 0));
        }
      },
  }, 10s);
}

}  // namespace

int main() {
  CheckManyGenerations();
  CheckMissingParticipant();
  CheckDeadFollower();
  CheckDeadLeader();
  CheckJobsIsolated();
  CheckConcurrentCalls();
  CheckAbandonedRequest();
  CheckPriorFailure(1);
  CheckPriorFailure(0);
  CheckStaggeredArrivals();
  CheckWrongSecret();
  CheckReopenSameName();
  std::printf("processes_test: passed\n");
  return 0;
}
