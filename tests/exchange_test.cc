// Runs redistribution plans rank by rank, each rank in its own thread with
// bounded scratch, and compares every destination buffer byte for byte with
// ExecuteOnHost's. Also checks the schedules on their own (chunks within the
// budget, both sides of each pair agreeing on its chunks) and the failures.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/check.h"
#include "xla_ext/layout/block_cyclic_2d.h"
#include "xla_ext/layout/exchange.h"

using jaxmg::Status;
using jaxmg::layout::BlockCyclic2d;
using jaxmg::layout::ExchangeSchedule;
using jaxmg::layout::ExchangeStep;
using jaxmg::layout::GridOrder;
using jaxmg::layout::Piece;
using jaxmg::layout::ProcessGrid;
using jaxmg::layout::RedistributionPlan;
using jaxmg::layout::StorageOrder;
using jaxmg::layout::Transport;

namespace {

constexpr unsigned char kSentinel = 0xAB;  // fills bytes no element should reach
constexpr size_t kGuardBytes = 16;         // past the end of each scratch buffer
constexpr auto kTimeout = std::chrono::seconds(30);

// Ranks as threads of one process. A step posts its send, waits for its
// receive and returns only once its own send was taken, as an NCCL group
// completes: a schedule that would deadlock under NCCL times out here.
class ThreadExchange {
 public:
  explicit ThreadExchange(int ranks)
      : ranks_(ranks), slots_(ranks * ranks), messages_(ranks * ranks, 0) {}

  class Endpoint : public Transport {
   public:
    Endpoint(ThreadExchange* hub, int rank) : hub_(hub), rank_(rank) {}
    Status Exchange(int send_peer, const void* send, size_t send_bytes, int recv_peer,
                    void* recv, size_t recv_bytes) override {
      return hub_->Exchange(rank_, send_peer, send, send_bytes, recv_peer, recv, recv_bytes);
    }

   private:
    ThreadExchange* hub_;
    int rank_;
  };

  int64_t messages(int from, int to) const { return messages_[from * ranks_ + to]; }
  size_t largest() const { return largest_; }

 private:
  struct Slot {
    const void* data = nullptr;
    size_t bytes = 0;
    bool full = false;
  };

  Status Exchange(int me, int send_peer, const void* send, size_t send_bytes, int recv_peer,
                  void* recv, size_t recv_bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    if ((send_bytes > 0) != (send_peer >= 0) || (recv_bytes > 0) != (recv_peer >= 0)) {
      return jaxmg::Errorf("rank ", me, ": a side has a peer iff it has bytes");
    }
    if (send_bytes == 0 && recv_bytes == 0) return jaxmg::Errorf("rank ", me, ": empty step");
    if (send_peer >= ranks_ || send_peer == me || recv_peer >= ranks_ || recv_peer == me) {
      return jaxmg::Errorf("rank ", me, ": bad peers ", send_peer, ", ", recv_peer);
    }
    Slot* out = nullptr;
    if (send_bytes > 0) {
      out = &slots_[me * ranks_ + send_peer];
      if (out->full) return jaxmg::Errorf("rank ", me, ": a send is still outstanding");
      *out = Slot{send, send_bytes, true};
      cv_.notify_all();
    }
    if (recv_bytes > 0) {
      Slot& in = slots_[recv_peer * ranks_ + me];
      if (!cv_.wait_for(lock, kTimeout, [&] { return in.full; })) {
        if (out != nullptr) out->full = false;
        return jaxmg::Errorf("rank ", me, " waited for rank ", recv_peer, " in vain");
      }
      const bool match = in.bytes == recv_bytes;
      if (match) std::memcpy(recv, in.data, recv_bytes);
      in.full = false;
      ++messages_[recv_peer * ranks_ + me];
      largest_ = std::max(largest_, in.bytes);
      cv_.notify_all();
      if (!match) {
        return jaxmg::Errorf("rank ", me, " expected ", recv_bytes, " bytes from rank ",
                             recv_peer, ", got ", in.bytes);
      }
    }
    if (out != nullptr && !cv_.wait_for(lock, kTimeout, [&] { return !out->full; })) {
      out->full = false;
      return jaxmg::Errorf("rank ", me, ": rank ", send_peer, " never took its message");
    }
    return Status::Ok();
  }

  const int ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;        // [from * ranks + to]
  std::vector<int64_t> messages_;  // [from * ranks + to]
  size_t largest_ = 0;
};

// Fails the test if the executor reaches the transport.
class NoTransport : public Transport {
 public:
  Status Exchange(int, const void*, size_t, int, void*, size_t) override {
    ++calls;
    return jaxmg::Errorf("unexpected exchange");
  }
  int calls = 0;
};

bool Contains(const Status& status, const std::string& part) {
  return !status.ok() && status.message().find(part) != std::string::npos;
}

// Properties each schedule has alone, and the agreement of both sides of a pair.
void CheckSchedules(const RedistributionPlan& plan, const std::vector<ExchangeSchedule>& all,
                    size_t element_bytes, int64_t budget) {
  const int32_t ranks = plan.ranks();
  const int64_t elem = static_cast<int64_t>(element_bytes);
  // Byte ranges of each pair's chunks as the sender and the receiver see them.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> sent(ranks * ranks),
      received(ranks * ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    const ExchangeSchedule& s = all[r];
    CHECK(s.rank == r && s.ranks == ranks && s.element_bytes == element_bytes);
    CHECK(s.chunk_bytes == budget / elem * elem && s.chunk_bytes <= budget);
    CHECK(s.local == plan.Between(r, r));
    CHECK(s.send_chunks[r] == 0 && s.recv_chunks[r] == 0);
    std::vector<int64_t> per_shift(ranks, 0);
    int32_t shift = 1;
    int64_t largest_send = 0, largest_recv = 0;
    for (const ExchangeStep& step : s.steps) {
      CHECK(step.shift >= shift && step.shift < ranks);
      shift = step.shift;
      ++per_shift[shift];
      CHECK(step.send_bytes() > 0 || step.recv_bytes() > 0);
      CHECK(step.send_bytes() <= s.chunk_bytes && step.recv_bytes() <= s.chunk_bytes);
      if (step.send_bytes() > 0) {
        CHECK(step.send_peer == (r + shift) % ranks);
        sent[r * ranks + step.send_peer].push_back({step.send_begin, step.send_end});
      } else {
        CHECK(step.send_peer == -1 && step.send_bytes() == 0);
      }
      if (step.recv_bytes() > 0) {
        CHECK(step.recv_peer == (r - shift + ranks) % ranks);
        received[step.recv_peer * ranks + r].push_back({step.recv_begin, step.recv_end});
      } else {
        CHECK(step.recv_peer == -1 && step.recv_bytes() == 0);
      }
      largest_send = std::max(largest_send, step.send_bytes());
      largest_recv = std::max(largest_recv, step.recv_bytes());
    }
    CHECK(s.send_scratch_bytes == largest_send && s.recv_scratch_bytes == largest_recv);
    for (int32_t k = 1; k < ranks; ++k) {
      CHECK(per_shift[k] ==
            std::max(s.send_chunks[(r + k) % ranks], s.recv_chunks[(r - k + ranks) % ranks]));
    }
  }
  for (int32_t from = 0; from < ranks; ++from) {
    for (int32_t to = 0; to < ranks; ++to) {
      if (from == to) continue;
      const auto& chunks = sent[from * ranks + to];
      CHECK(static_cast<int64_t>(chunks.size()) == all[from].send_chunks[to]);
      CHECK(all[from].send_chunks[to] == all[to].recv_chunks[from]);
      CHECK(chunks == received[from * ranks + to]);
      // The chunks tile the stream in order.
      int64_t at = 0;
      for (const auto& [begin, end] : chunks) {
        CHECK(begin == at && end > begin && begin % elem == 0 && end % elem == 0);
        at = end;
      }
      CHECK(at == jaxmg::layout::StreamElements(plan.Between(from, to)) * elem);
    }
  }
}

using Buffers = std::vector<std::vector<char>>;

std::vector<char*> Pointers(Buffers& buffers) {
  std::vector<char*> out;
  for (auto& b : buffers) out.push_back(b.empty() ? nullptr : b.data());
  return out;
}

struct Stats {
  int plans = 0;
  int runs = 0;
  int64_t steps = 0;
};

// Runs `plan` on every budget, each rank in a thread, and compares with ExecuteOnHost.
void CheckPlan(const RedistributionPlan& plan, size_t element_bytes, std::mt19937_64& rng,
               Stats* stats) {
  const int32_t ranks = plan.ranks();
  const int64_t elem = static_cast<int64_t>(element_bytes);
  // Random elements whose first byte is never the sentinel, padding included.
  Buffers src(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    src[r].resize(plan.src.LocalElements(r) * element_bytes);
    for (size_t k = 0; k < src[r].size(); ++k) {
      src[r][k] = static_cast<char>(rng());
      if (k % element_bytes == 0 && static_cast<unsigned char>(src[r][k]) == kSentinel) {
        src[r][k] = 0;
      }
    }
  }
  const std::vector<char*> src_mut = Pointers(src);
  const std::vector<const char*> src_ptrs(src_mut.begin(), src_mut.end());
  Buffers expected(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    expected[r].assign(plan.dst.LocalElements(r) * element_bytes, static_cast<char>(kSentinel));
  }
  CHECK(jaxmg::layout::ExecuteOnHost(plan, src_ptrs, Pointers(expected), element_bytes).ok());

  int64_t largest_piece = elem;
  for (int32_t s = 0; s < ranks; ++s) {
    for (int32_t d = 0; d < ranks; ++d) {
      for (const Piece& p : plan.Between(s, d)) {
        if (s != d) largest_piece = std::max(largest_piece, p.rows * p.cols * elem);
      }
    }
  }
  // One element, three and a stray byte (rounded down), one whole piece, unbounded.
  const int64_t budgets[] = {elem, 3 * elem + 1, largest_piece,
                             std::numeric_limits<int64_t>::max()};
  for (int64_t budget : budgets) {
    std::vector<ExchangeSchedule> schedules(ranks);
    for (int32_t r = 0; r < ranks; ++r) {
      CHECK(jaxmg::layout::PlanExchange(plan, r, element_bytes, budget, &schedules[r]).ok());
      stats->steps += static_cast<int64_t>(schedules[r].steps.size());
    }
    CheckSchedules(plan, schedules, element_bytes, budget);

    Buffers dst(ranks), send(ranks), recv(ranks);
    for (int32_t r = 0; r < ranks; ++r) {
      dst[r].assign(expected[r].size(), static_cast<char>(kSentinel));
      send[r].assign(schedules[r].send_scratch_bytes + kGuardBytes, static_cast<char>(kSentinel));
      recv[r].assign(schedules[r].recv_scratch_bytes + kGuardBytes, static_cast<char>(kSentinel));
    }
    const std::vector<char*> dst_ptrs = Pointers(dst);
    ThreadExchange hub(ranks);
    std::vector<Status> statuses(ranks);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        ThreadExchange::Endpoint endpoint(&hub, r);
        statuses[r] = jaxmg::layout::ExecuteRank(plan, schedules[r], r, src_ptrs[r], dst_ptrs[r],
                                                 element_bytes, send[r].data(), recv[r].data(),
                                                 endpoint);
      });
    }
    for (auto& t : threads) t.join();
    for (int32_t r = 0; r < ranks; ++r) {
      if (!statuses[r].ok()) std::fprintf(stderr, "%s\n", statuses[r].message().c_str());
      CHECK(statuses[r].ok());
      CHECK(dst[r] == expected[r]);
      // The scratch stayed within what the schedule asked for.
      CHECK(std::all_of(send[r].end() - kGuardBytes, send[r].end(),
                        [](char b) { return static_cast<unsigned char>(b) == kSentinel; }));
      CHECK(std::all_of(recv[r].end() - kGuardBytes, recv[r].end(),
                        [](char b) { return static_cast<unsigned char>(b) == kSentinel; }));
      for (int32_t peer = 0; peer < ranks; ++peer) {
        CHECK(hub.messages(r, peer) == schedules[r].send_chunks[peer]);
      }
    }
    CHECK(static_cast<int64_t>(hub.largest()) <= budget);
    ++stats->runs;
  }
  // Padding below ld untouched: exactly m * n elements differ from the sentinel.
  int64_t written = 0;
  for (const auto& buffer : expected) {
    for (size_t k = 0; k < buffer.size(); k += element_bytes) {
      written += static_cast<unsigned char>(buffer[k]) != kSentinel;
    }
  }
  CHECK(written == plan.src.m * plan.src.n);
  ++stats->plans;
}

// The layout with its leading dimension `pad` past the widest rank's (tight if < 0).
BlockCyclic2d Padded(BlockCyclic2d layout, int64_t pad) {
  if (pad < 0) return layout;
  int64_t widest = 1;
  for (int32_t r = 0; r < layout.grid.size(); ++r) {
    widest = std::max(widest, layout.LeadingDim(r));
  }
  layout.ld = widest + pad;
  return layout;
}

void CheckBothWays(const BlockCyclic2d& a, const BlockCyclic2d& b, size_t element_bytes,
                   std::mt19937_64& rng, Stats* stats) {
  CHECK(a.Validate().ok() && b.Validate().ok());
  RedistributionPlan there, back;
  CHECK(jaxmg::layout::PlanRedistribution(a, b, &there).ok());
  CHECK(jaxmg::layout::PlanRedistribution(b, a, &back).ok());
  CheckPlan(there, element_bytes, rng, stats);
  CheckPlan(back, element_bytes, rng, stats);
}

// JAX blocks <-> block-cyclic on every grid, grid order, JAX storage order,
// block size and padding, for odd sizes.
void Sweep(Stats* stats) {
  std::mt19937_64 rng(20240612);
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {7, 5}, {33, 17}, {2, 13}};
  const ProcessGrid grids[] = {{1, 1}, {1, 3}, {2, 2}, {3, 2}, {2, 4}};
  const std::pair<int64_t, int64_t> blocks[] = {{1, 1}, {2, 3}, {4, 4}, {16, 5}};
  const size_t element_sizes[] = {8, 4, 16};
  int k = 0;
  for (const auto& [m, n] : sizes) {
    for (const ProcessGrid& shape : grids) {
      for (GridOrder go : {GridOrder::kRowMajor, GridOrder::kColumnMajor}) {
        const ProcessGrid grid{shape.rows, shape.cols, go};
        for (StorageOrder so : {StorageOrder::kColumnMajor, StorageOrder::kRowMajor}) {
          for (const auto& [mb, nb] : blocks) {
            for (int64_t pad : {-1, 3}) {
              CheckBothWays(Padded(jaxmg::layout::JaxBlockLayout(m, n, grid, so), pad),
                            Padded(jaxmg::layout::CyclicLayout(m, n, mb, nb, grid), pad),
                            element_sizes[k++ % 3], rng, stats);
            }
          }
        }
      }
    }
  }
}

// Regridding and reblocking: JAX on one grid to cyclic on another of the same
// size, and cyclic to cyclic, with row-major destinations too.
void RegridSweep(Stats* stats) {
  std::mt19937_64 rng(7);
  const std::pair<ProcessGrid, ProcessGrid> pairs[] = {
      {{1, 4}, {2, 2}}, {{2, 2}, {4, 1}}, {{3, 2}, {2, 3}}, {{1, 6}, {3, 2}}, {{2, 4}, {4, 2}},
      {{1, 8}, {2, 4}}};
  int k = 0;
  for (const auto& [from, to] : pairs) {
    for (GridOrder go : {GridOrder::kRowMajor, GridOrder::kColumnMajor}) {
      const ProcessGrid a{from.rows, from.cols, go};
      const ProcessGrid b{to.rows, to.cols,
                          go == GridOrder::kRowMajor ? GridOrder::kColumnMajor
                                                     : GridOrder::kRowMajor};
      for (const auto& [m, n] : {std::pair<int64_t, int64_t>{7, 5}, {33, 17}}) {
        CheckBothWays(
            jaxmg::layout::JaxBlockLayout(m, n, a, StorageOrder::kRowMajor),
            Padded(jaxmg::layout::CyclicLayout(m, n, 2 + k % 3, 3, b), k % 2 ? 2 : -1), 8, rng,
            stats);
        BlockCyclic2d row_major = jaxmg::layout::CyclicLayout(m, n, 3, 2, b);
        row_major.order = StorageOrder::kRowMajor;
        CheckBothWays(Padded(jaxmg::layout::CyclicLayout(m, n, 1 + k % 4, 5, a), 1),
                      row_major, 4, rng, stats);
        ++k;
      }
    }
  }
}

// JAX 4x4 on 1x2 -> cyclic 1x2 with single columns: each rank sends one 4x1
// piece, 32 bytes, cut by a 24-byte budget into 24 + 8.
void CheckHandExample() {
  RedistributionPlan plan;
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(4, 4, {1, 2}),
                                          jaxmg::layout::CyclicLayout(4, 4, 4, 1, {1, 2}), &plan)
            .ok());
  for (int32_t r = 0; r < 2; ++r) {
    ExchangeSchedule s;
    CHECK(jaxmg::layout::PlanExchange(plan, r, 8, 25, &s).ok());
    CHECK(s.chunk_bytes == 24 && s.steps.size() == 2 && s.local.size() == 1);
    CHECK(s.send_chunks[1 - r] == 2 && s.recv_chunks[1 - r] == 2);
    CHECK(s.send_scratch_bytes == 24 && s.recv_scratch_bytes == 24);
    const ExchangeStep& last = s.steps[1];
    CHECK(last.shift == 1 && last.send_peer == 1 - r && last.recv_peer == 1 - r);
    CHECK(last.send_begin == 24 && last.send_end == 32);
    CHECK(last.recv_begin == 24 && last.recv_end == 32);
  }
  // One rank: a local copy only (the blocks merge into one piece).
  RedistributionPlan one;
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(3, 3, {1, 1}),
                                          jaxmg::layout::CyclicLayout(3, 3, 2, 2, {1, 1}), &one)
            .ok());
  ExchangeSchedule s;
  CHECK(jaxmg::layout::PlanExchange(one, 0, 8, 8, &s).ok());
  CHECK(s.steps.empty() && s.local.size() == 1 && s.send_scratch_bytes == 0);
}

void CheckErrors() {
  const ProcessGrid g22{2, 2};
  RedistributionPlan plan;
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(7, 5, g22),
                                          jaxmg::layout::CyclicLayout(7, 5, 2, 2, g22), &plan)
            .ok());
  ExchangeSchedule s;
  CHECK(Contains(jaxmg::layout::PlanExchange(plan, 0, 8, 7, &s), "below one 8-byte element"));
  CHECK(Contains(jaxmg::layout::PlanExchange(plan, 0, 8, -1, &s), "below one 8-byte element"));
  CHECK(Contains(jaxmg::layout::PlanExchange(plan, 4, 8, 64, &s), "outside the plan's 4 ranks"));
  CHECK(Contains(jaxmg::layout::PlanExchange(plan, -1, 8, 64, &s), "outside the plan's 4 ranks"));
  CHECK(Contains(jaxmg::layout::PlanExchange(plan, 0, 0, 64, &s), "element_bytes"));
  CHECK(Contains(jaxmg::layout::PlanExchange(RedistributionPlan{}, 0, 8, 64, &s),
                 "build it with PlanRedistribution"));

  CHECK(jaxmg::layout::PlanExchange(plan, 1, 8, 16, &s).ok());
  CHECK(s.send_scratch_bytes > 0 && s.recv_scratch_bytes > 0);
  std::vector<char> src(plan.src.LocalElements(1) * 8), dst(plan.dst.LocalElements(1) * 8),
      send(16), recv(16);
  NoTransport none;
  auto run = [&](int32_t rank, const char* from, char* to, size_t element_bytes, char* out,
                 char* in, const ExchangeSchedule& schedule) {
    return jaxmg::layout::ExecuteRank(plan, schedule, rank, from, to, element_bytes, out, in,
                                      none);
  };
  CHECK(Contains(run(2, src.data(), dst.data(), 8, send.data(), recv.data(), s),
                 "called as rank 2 with rank 1's schedule"));
  CHECK(Contains(run(1, nullptr, dst.data(), 8, send.data(), recv.data(), s),
                 "rank 1 has a null source buffer"));
  CHECK(Contains(run(1, src.data(), nullptr, 8, send.data(), recv.data(), s),
                 "rank 1 has a null destination buffer"));
  CHECK(Contains(run(1, src.data(), dst.data(), 8, nullptr, recv.data(), s), "null pointer"));
  CHECK(Contains(run(1, src.data(), dst.data(), 8, send.data(), nullptr, s), "null pointer"));
  CHECK(Contains(run(1, src.data(), dst.data(), 4, send.data(), recv.data(), s),
                 "schedule was built for 8"));
  RedistributionPlan three;
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(7, 5, {1, 3}),
                                          jaxmg::layout::CyclicLayout(7, 5, 2, 2, {1, 3}), &three)
            .ok());
  ExchangeSchedule other;
  CHECK(jaxmg::layout::PlanExchange(three, 1, 8, 16, &other).ok());
  CHECK(Contains(run(1, src.data(), dst.data(), 8, send.data(), recv.data(), other),
                 "schedule is for 3 ranks, plan has 4"));
  ExchangeSchedule tampered = s;
  auto sending = std::find_if(tampered.steps.begin(), tampered.steps.end(),
                              [](const ExchangeStep& step) { return step.send_bytes() > 0; });
  CHECK(sending != tampered.steps.end());
  sending->send_end += 8;
  CHECK(Contains(run(1, src.data(), dst.data(), 8, send.data(), recv.data(), tampered),
                 "falls outside its streams or scratch"));
  ExchangeSchedule no_local = s;
  no_local.local.clear();
  CHECK(Contains(run(1, src.data(), dst.data(), 8, send.data(), recv.data(), no_local),
                 "other local copies than the plan"));
  CHECK(Contains(run(4, src.data(), dst.data(), 8, send.data(), recv.data(), s),
                 "rank 4 is outside the plan's 4 ranks"));
  CHECK(none.calls == 0);
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  CheckHandExample();
  CheckErrors();
  Stats stats;
  Sweep(&stats);
  RegridSweep(&stats);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("exchange_test: %d plans, %d threaded runs, %lld steps passed in %.1f s\n",
              stats.plans, stats.runs, static_cast<long long>(stats.steps), seconds);
  return 0;
}
