// The in-process rendezvous: all participants see the leader's result, keys
// never mix, a missing participant yields an error naming it, and nothing
// stays registered after successful calls.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/check.h"
#include "xla_ext/rendezvous/rendezvous.h"

using jaxmg::Status;
using jaxmg::rendezvous::CallKey;
using jaxmg::rendezvous::Gather;
using jaxmg::rendezvous::LiveMeetings;
using jaxmg::rendezvous::Meet;
using namespace std::chrono_literals;

namespace {

// n threads meet; the leader sums the payloads and writes the sum back.
void CheckSum(int n, int64_t call_id, int64_t run_id) {
  std::vector<int64_t> values(n), results(n, -1);
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    values[i] = i + 1;
    threads.emplace_back([&, i] {
      statuses[i] = Meet({call_id, run_id}, n, i, &values[i], 10s,
                         [&](const std::vector<void*>& all) {
                           int64_t sum = 0;
                           for (void* p : all) sum += *static_cast<int64_t*>(p);
                           for (int j = 0; j < n; ++j) results[j] = sum;
                           return Status::Ok();
                         });
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    CHECK(statuses[i].ok());
    CHECK(results[i] == int64_t(n) * (n + 1) / 2);
  }
}

void CheckTimeoutNamesMissing() {
  int64_t payload = 0;
  std::vector<Status> statuses(2);
  std::thread a([&] { statuses[0] = Meet({77, 1}, 4, 0, &payload, 200ms, [](auto&) { return Status::Ok(); }); });
  std::thread b([&] { statuses[1] = Meet({77, 1}, 4, 2, &payload, 200ms, [](auto&) { return Status::Ok(); }); });
  a.join();
  b.join();
  for (const Status& s : statuses) {
    CHECK(!s.ok());
    CHECK(s.message().find("participants [1, 3] of 4") != std::string::npos);
    CHECK(s.message().find("PJRT_NPROC") != std::string::npos);
  }
  // The stragglers fail at once and the meeting is then forgotten.
  auto start = std::chrono::steady_clock::now();
  Status late1 = Meet({77, 1}, 4, 1, &payload, 10s, [](auto&) { return Status::Ok(); });
  Status late3 = Meet({77, 1}, 4, 3, &payload, 10s, [](auto&) { return Status::Ok(); });
  CHECK(!late1.ok() && !late3.ok());
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(LiveMeetings() == 0);
}

void CheckLeaderErrorReachesAll() {
  std::vector<Status> statuses(3);
  std::vector<std::thread> threads;
  int64_t payload = 0;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      statuses[i] = Meet({5, 5}, 3, i, &payload, 10s,
                         [](auto&) { return Status::Error("engine failed"); });
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : statuses) CHECK(!s.ok() && s.message() == "engine failed");
}

// n threads run `round(i, r)` for r < rounds, some running ahead of the
// others; every round must succeed and nothing stays registered after.
void CheckRounds(int n, int rounds, const std::function<bool(int, int)>& round) {
  std::vector<int64_t> wrong(n, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < rounds; ++r) {
        if ((r + i) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (!round(i, r)) wrong[i] += 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) CHECK(wrong[i] == 0);
  CHECK(LiveMeetings() == 0);
}

// One call site inside a loop: each participant meets `iterations` times
// under one key; every meeting sees the payloads of its own iteration.
void CheckLoopedCallSite(int n, int iterations) {
  CheckRounds(n, iterations, [n](int i, int it) {
    int64_t mine = it;
    return Meet({123, 456}, n, i, &mine, 10s, [&](const std::vector<void*>& all) {
             int seen = 0;
             for (void* p : all) seen += *static_cast<int64_t*>(p) == it ? 1 : 0;
             return seen == n ? Status::Ok() : Status::Error("payloads of two iterations mixed");
           }).ok();
  });
}

// Each participant learns every participant's value, in participant order,
// whatever order they arrive in; looped, each round sees its own values.
void CheckGather(int n, int rounds) {
  CheckRounds(n, rounds, [n](int i, int r) {
    std::vector<int64_t> all;
    bool right = Gather({-42, 7}, n, i, 1000 * r + 10 * i, 10s, &all).ok() &&
                 static_cast<int>(all.size()) == n;
    for (int j = 0; right && j < n; ++j) right = all[j] == 1000 * r + 10 * j;
    return right;
  });
}

void CheckBadArguments() {
  int64_t payload = 0;
  CHECK(!Meet({1, 1}, 2, 2, &payload, 10ms, [](auto&) { return Status::Ok(); }).ok());
  CHECK(!Meet({1, 1}, 0, 0, &payload, 10ms, [](auto&) { return Status::Ok(); }).ok());
}

}  // namespace

int main() {
  for (int n : {1, 2, 3, 8, 32}) CheckSum(n, 1, n);
  // Two calls with the same id but different runs, interleaved, never mix.
  std::thread first([] { for (int r = 0; r < 200; ++r) CheckSum(4, 9, 2 * r); });
  std::thread second([] { for (int r = 0; r < 200; ++r) CheckSum(4, 9, 2 * r + 1); });
  first.join();
  second.join();
  CHECK(LiveMeetings() == 0);
  CheckLoopedCallSite(2, 500);
  CheckLoopedCallSite(8, 200);
  CheckGather(1, 3);
  CheckGather(8, 100);
  CheckTimeoutNamesMissing();
  CheckLeaderErrorReachesAll();
  CheckBadArguments();
  CHECK(LiveMeetings() == 0);
  std::printf("rendezvous_test: passed\n");
  return 0;
}
