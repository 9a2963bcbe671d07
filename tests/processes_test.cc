// The cross-process meeting: forked processes meet over their job channel,
// sum int64 arrays through a copying Transport, leak nothing over many
// generations, name a missing participant, notice a dead peer quickly, and
// two jobs with different tokens never mix. A meeting abandoned by a follower
// fails for all; a participant's prior failure fails its meeting for all at
// once and keeps the runs paired; staggered arrivals never let one
// participant succeed where another failed; a process without the job's
// secret cannot take part. Participants bringing different signatures fail
// before any work; requests too large to travel with the arrival come once
// the meeting started, within the transport's caps; a participant killed
// during the work fails the meeting for all; a clean exit and a kill read
// differently.
#include <chrono>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/processes_testing.h"

using namespace testing;

namespace {

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
// timeout), follower 2 at once; all within 3 s of their own arrival, and all
// name participant 2 as the one that had not come. The next run of the call
// meets normally.
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
      CHECK(Contains(s, "participants [2 (process 2)] of 3 did not reach call 11 in time: "
                        "participant 1 (process 1) gave up waiting"));
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
  CHECK(Contains(s, "It got only a greeting (no secret, no data)"));
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


// 11. Participant 2 brings another signature (another dtype, same byte
// count): every participant fails at once with a message naming participant
// 2 and both signatures, before any work runs; non-printable bytes show as
// \xNN. The next run, with equal signatures, meets normally; the failed one
// counts in every process's stats.
void CheckSignatureMismatch() {
  const std::string token = NewToken("signature");
  auto participant = [=](int rank) {
    return std::function<void()>([=] {
      CHECK_OK(processes::Open(token, rank));
      RegisterAll(3, {kCallA});
      const std::string mine = rank == 2 ? std::string("cpotrs 8x8\x01", 11) : "dpotrs 8x8";
      bool worked = false;
      auto work = [&](const std::vector<void*>& payloads) {
        worked = true;
        return SumWork(payloads);
      };
      const auto start = Clock::now();
      const Status s = MeetOnce(kCallA, 3, rank, 1, 0, 10s, Status::Ok(), mine, kValues, true,
                                work);
      const double elapsed = Seconds(start);
      std::fprintf(stderr, "signature: rank %d after %.3f s: %s\n", rank, elapsed,
                   s.message().c_str());
      CHECK(!s.ok());
      CHECK(!worked);
      CHECK(Contains(s, "participant 2 (process 2) brought another call to call 11"));
      CHECK(Contains(s, "its signature is \"cpotrs 8x8\\x01\""));
      CHECK(Contains(s, "the leader's (participant 0, process 0) is \"dpotrs 8x8\""));
      CHECK(elapsed < 3.0);
      CHECK(processes::GetStats().failed == 1);
      CHECK_OK(MeetOnce(kCallA, 3, rank, 1, 1, 10s, Status::Ok(), "dpotrs 8x8"));
      CHECK(processes::GetStats().failed == 1);
      if (rank == 0) CHECK(processes::GetStats().pending == 0);
    });
  };
  RunChildren("signature mismatch", {participant(0), participant(1), participant(2)}, 20s);
}

// 12. Requests larger than what travels with the arrival (200,000 values,
// 1.6 MB) go once the meeting started, with the transport's exact caps and
// with the channel's defaults; sums stay right over many runs, and nothing
// stays pending.
void CheckLargeRequests() {
  const std::string token = NewToken("large");
  constexpr int kCount = 200000;
  auto participant = [=](int rank) {
    return std::function<void()>([=] {
      CHECK_OK(processes::Open(token, rank));
      RegisterAll(3, {kCallA, kCallB});
      for (int it = 0; it < 20; ++it) {
        CHECK_OK(MeetOnce(kCallA, 3, rank, 1, it, 10s, Status::Ok(), "", kCount, true));
        CHECK_OK(MeetOnce(kCallB, 3, rank, 2, it, 10s, Status::Ok(), "", kCount, false));
      }
      CHECK(processes::GetStats().pending == 0);
      CHECK(processes::GetStats().failed == 0);
    });
  };
  RunChildren("large requests", {participant(0), participant(1), participant(2)}, 60s);
}

// 13. A follower announcing more bytes than the leader's transport can take
// fails the meeting for both, before the bytes move; the next run meets.
void CheckRequestOverCap() {
  const std::string token = NewToken("overcap");
  RunChildren("request over the cap", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        const Status s = MeetOnce(kCallA, 2, 0, 1, 0, 10s, Status::Ok(), "", 100000);
        std::fprintf(stderr, "over cap: leader: %s\n", s.message().c_str());
        CHECK(Contains(s, "participant 1 (process 1) announced a request of 1600000 bytes for "
                          "call 11, more than the 800000 it can need"));
        CHECK_OK(MeetOnce(kCallA, 2, 0, 1, 1, 10s));
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        const Status s = MeetOnce(kCallA, 2, 1, 1, 0, 10s, Status::Ok(), "", 200000);
        CHECK(Contains(s, "announced a request of 1600000 bytes"));
        CHECK_OK(MeetOnce(kCallA, 2, 1, 1, 1, 10s));
      },
  }, 20s);
}

// 14. kill -9 of a participant while the leader works (the work takes 1 s;
// the kill comes 300 ms into it): with a follower killed, the leader and the
// other follower fail, naming it, as soon as the work ends; with the leader
// killed, both followers fail at once. Nobody keeps a result.
void CheckKilledDuringWork(int victim) {
  const std::string token = NewToken(victim == 0 ? "killleader" : "killfollower");
  const char* scenario = victim == 0 ? "leader killed during the work"
                                     : "follower killed during the work";
  auto* work_started = Shared<std::atomic<bool>>();
  auto* checked = Shared<std::atomic<int>>();
  auto participant = [=](int rank) {
    return std::function<void()>([=] {
      CHECK_OK(processes::Open(token, rank));
      RegisterAll(3, {kCallA});
      CHECK_OK(MeetOnce(kCallA, 3, rank, 1, 0, 10s));
      if (rank == victim) {
        std::thread([=] {
          while (!work_started->load()) std::this_thread::sleep_for(1ms);
          std::this_thread::sleep_for(300ms);
          kill(getpid(), SIGKILL);
        }).detach();
      }
      auto slow = [&](const std::vector<void*>& payloads) {
        work_started->store(true);
        std::this_thread::sleep_for(1s);
        return SumWork(payloads);
      };
      const auto start = Clock::now();
      const Status s = MeetOnce(kCallA, 3, rank, 1, 1, 30s, Status::Ok(), "", kValues, true, slow);
      const double elapsed = Seconds(start);
      std::fprintf(stderr, "%s: rank %d after %.3f s: %s\n", scenario, rank, elapsed,
                   s.message().c_str());
      CHECK(rank != victim);  // the victim never gets here
      CHECK(!s.ok());
      if (victim == 0) {
        CHECK(Contains(s, "process 0 (the leader of call 11) closed its channel: it was killed"));
        CHECK(elapsed < 1.0);
      } else {
        CHECK(Contains(s, "participant 2 (process 2) left call 11 during the work: it was killed "
                          "or crashed"));
        CHECK(elapsed < 2.0);
      }
      CHECK(processes::GetStats().lost == (rank == 0 || victim == 0 ? 1 : 0));
      // Stay until both survivors checked: an exit would count as one more loss.
      checked->fetch_add(1);
      while (checked->load() < 2) std::this_thread::sleep_for(1ms);
    });
  };
  // The victim's status is SIGKILL's: run it apart from the verdicts.
  std::vector<std::function<void()>> bodies;
  for (int rank = 0; rank < 3; ++rank) {
    if (rank == victim) {
      bodies.push_back([=] {
        const pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
          participant(rank)();
          _exit(1);
        }
        int status = 0;
        waitpid(child, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
      });
    } else {
      bodies.push_back(participant(rank));
    }
  }
  RunChildren(scenario, bodies, 20s);
}

// 15. A follower that leaves with exit() says goodbye: the leader's next
// meeting fails at once saying it exited, and counts no lost peer.
void CheckGoodbye() {
  const std::string token = NewToken("goodbye");
  RunChildren("goodbye", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        CHECK_OK(MeetOnce(kCallA, 2, 0, 1, 0, 10s));
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, 0, 1, 1, 30s);
        std::fprintf(stderr, "goodbye: leader: %s\n", s.message().c_str());
        CHECK(Contains(s, "participants [1 (process 1, disconnected)]"));
        CHECK(Contains(s, "process 1 closed its channel: it exited"));
        CHECK(Seconds(start) < 5.0);
        CHECK(processes::GetStats().lost == 0);
        CHECK(processes::GetStats().failed == 1);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        CHECK_OK(MeetOnce(kCallA, 2, 1, 1, 0, 10s));
        std::fflush(nullptr);
        std::exit(0);  // runs the channel's goodbye
      },
  });
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
  CheckSignatureMismatch();
  CheckLargeRequests();
  CheckRequestOverCap();
  CheckKilledDuringWork(2);
  CheckKilledDuringWork(0);
  CheckGoodbye();
  std::printf("processes_test: passed\n");
  return 0;
}
