#include "xla_ext/layout/exchange.h"

#include <algorithm>
#include <cstring>

namespace jaxmg::layout {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// Element strides of a step down a column and across a row of a local matrix.
struct Strides {
  int64_t down;
  int64_t across;
};

Strides StridesOf(const BlockCyclic2d& layout, int32_t rank) {
  const int64_t ld = layout.LeadingDim(rank);
  return layout.order == StorageOrder::kColumnMajor ? Strides{1, ld} : Strides{ld, 1};
}

void CopyStrided(const char* from, int64_t from_stride, char* to, int64_t to_stride,
                 int64_t count, size_t element_bytes) {
  if (from_stride == 1 && to_stride == 1) {
    std::memcpy(to, from, count * element_bytes);
    return;
  }
  for (int64_t k = 0; k < count; ++k) {
    std::memcpy(to + k * to_stride * element_bytes, from + k * from_stride * element_bytes,
                element_bytes);
  }
}

// A pair's stream: where each piece starts, in elements.
class PieceStream {
 public:
  explicit PieceStream(const std::vector<Piece>& pieces) : pieces_(&pieces) {
    starts_.reserve(pieces.size() + 1);
    starts_.push_back(0);
    for (const Piece& p : pieces) starts_.push_back(starts_.back() + p.rows * p.cols);
  }

  int64_t elements() const { return starts_.back(); }

  // Calls visit(piece, col, row, count, at) for each run of `count` elements
  // down column `col` of `piece` from row `row`, `at` being the run's first
  // element in the stream, together covering elements [begin, end).
  template <typename Visit>
  void ForEachRun(int64_t begin, int64_t end, Visit&& visit) const {
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    for (int64_t at = begin; at < end;) {
      while (starts_[i + 1] <= at) ++i;
      const Piece& p = (*pieces_)[i];
      const int64_t within = at - starts_[i];
      const int64_t row = within % p.rows;
      const int64_t count = std::min(p.rows - row, end - at);
      visit(p, within / p.rows, row, count, at);
      at += count;
    }
  }

 private:
  const std::vector<Piece>* pieces_;
  std::vector<int64_t> starts_;
};

// The steps against the plan, before anything moves: a rank that failed
// midway would leave its peers waiting.
Status CheckSteps(const RedistributionPlan& plan, const ExchangeSchedule& schedule,
                  int32_t rank) {
  const int32_t n_ranks = plan.ranks();
  const int64_t elem = static_cast<int64_t>(schedule.element_bytes);
  std::vector<int64_t> to_total(n_ranks), from_total(n_ranks);
  for (int32_t peer = 0; peer < n_ranks; ++peer) {
    to_total[peer] = StreamElements(plan.Between(rank, peer)) * elem;
    from_total[peer] = StreamElements(plan.Between(peer, rank)) * elem;
  }
  const auto fits = [&](int32_t peer, int64_t begin, int64_t end, int64_t scratch,
                        const std::vector<int64_t>& totals) {
    return peer >= 0 && peer < n_ranks && peer != rank && begin >= 0 && end - begin <= scratch &&
           begin % elem == 0 && end % elem == 0 && end <= totals[peer];
  };
  if (schedule.local != plan.Between(rank, rank)) {
    return Errorf("execute rank: rank ", rank, "'s schedule has other local copies than the "
                  "plan; rebuild the schedule with PlanExchange from this plan");
  }
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const ExchangeStep& step = schedule.steps[i];
    if (step.send_bytes() < 0 || step.recv_bytes() < 0 ||
        (step.send_bytes() > 0 && !fits(step.send_peer, step.send_begin, step.send_end,
                                         schedule.send_scratch_bytes, to_total)) ||
        (step.recv_bytes() > 0 && !fits(step.recv_peer, step.recv_begin, step.recv_end,
                                         schedule.recv_scratch_bytes, from_total))) {
      return Errorf("execute rank: step ", i, " of rank ", rank,
                    "'s schedule falls outside its streams or scratch; rebuild the schedule "
                    "with PlanExchange from this plan");
    }
  }
  return Status::Ok();
}

}  // namespace

int64_t StreamElements(const std::vector<Piece>& pieces) {
  int64_t count = 0;
  for (const Piece& p : pieces) count += p.rows * p.cols;
  return count;
}

Status PlanExchange(const RedistributionPlan& plan, int32_t rank, size_t element_bytes,
                    int64_t scratch_bytes, ExchangeSchedule* schedule) {
  const int32_t n_ranks = plan.ranks();
  if (plan.pieces.size() != static_cast<size_t>(n_ranks) * n_ranks) {
    return Errorf("exchange: plan has ", plan.pieces.size(), " piece lists for ", n_ranks,
                  " ranks; build it with PlanRedistribution");
  }
  if (rank < 0 || rank >= n_ranks) {
    return Errorf("exchange: rank ", rank, " is outside the plan's ", n_ranks, " ranks");
  }
  if (element_bytes == 0) return Errorf("exchange: element_bytes must be positive");
  if (scratch_bytes < static_cast<int64_t>(element_bytes)) {
    return Errorf("exchange: scratch budget of ", scratch_bytes, " bytes is below one ",
                  element_bytes, "-byte element; give each rank at least ", element_bytes,
                  " bytes of send and of receive scratch");
  }
  const int64_t elem = static_cast<int64_t>(element_bytes);
  ExchangeSchedule out;
  out.rank = rank;
  out.ranks = n_ranks;
  out.element_bytes = element_bytes;
  out.chunk_bytes = scratch_bytes / elem * elem;
  out.local = plan.Between(rank, rank);
  out.send_chunks.assign(n_ranks, 0);
  out.recv_chunks.assign(n_ranks, 0);
  for (int32_t k = 1; k < n_ranks; ++k) {
    const int32_t to = (rank + k) % n_ranks;
    const int32_t from = (rank - k + n_ranks) % n_ranks;
    const int64_t send_total = StreamElements(plan.Between(rank, to)) * elem;
    const int64_t recv_total = StreamElements(plan.Between(from, rank)) * elem;
    out.send_chunks[to] = CeilDiv(send_total, out.chunk_bytes);
    out.recv_chunks[from] = CeilDiv(recv_total, out.chunk_bytes);
    const int64_t steps = std::max(out.send_chunks[to], out.recv_chunks[from]);
    for (int64_t j = 0; j < steps; ++j) {
      ExchangeStep step;
      step.shift = k;
      if (j < out.send_chunks[to]) {
        step.send_peer = to;
        step.send_begin = j * out.chunk_bytes;
        step.send_end = step.send_begin + std::min(out.chunk_bytes, send_total - step.send_begin);
      }
      if (j < out.recv_chunks[from]) {
        step.recv_peer = from;
        step.recv_begin = j * out.chunk_bytes;
        step.recv_end = step.recv_begin + std::min(out.chunk_bytes, recv_total - step.recv_begin);
      }
      out.send_scratch_bytes = std::max(out.send_scratch_bytes, step.send_bytes());
      out.recv_scratch_bytes = std::max(out.recv_scratch_bytes, step.recv_bytes());
      out.steps.push_back(step);
    }
  }
  *schedule = std::move(out);
  return Status::Ok();
}

Status ExecuteRank(const RedistributionPlan& plan, const ExchangeSchedule& schedule,
                   int32_t rank, const char* src_local, char* dst_local, size_t element_bytes,
                   char* send_scratch, char* recv_scratch, Transport& transport) {
  const int32_t n_ranks = plan.ranks();
  if (schedule.ranks != n_ranks || plan.pieces.size() != static_cast<size_t>(n_ranks) * n_ranks) {
    return Errorf("execute rank: schedule is for ", schedule.ranks, " ranks, plan has ",
                  n_ranks, "; build the schedule with PlanExchange from this plan");
  }
  if (rank < 0 || rank >= n_ranks) {
    return Errorf("execute rank: rank ", rank, " is outside the plan's ", n_ranks, " ranks");
  }
  if (rank != schedule.rank) {
    return Errorf("execute rank: called as rank ", rank, " with rank ", schedule.rank,
                  "'s schedule; pass each rank its own schedule");
  }
  if (element_bytes != schedule.element_bytes) {
    return Errorf("execute rank: element_bytes=", element_bytes,
                  " but the schedule was built for ", schedule.element_bytes,
                  "; build it with the element size the buffers hold");
  }
  if (src_local == nullptr && plan.src.LocalElements(rank) > 0) {
    return Errorf("execute rank: rank ", rank, " has a null source buffer for ",
                  plan.src.LocalElements(rank), " elements");
  }
  if (dst_local == nullptr && plan.dst.LocalElements(rank) > 0) {
    return Errorf("execute rank: rank ", rank, " has a null destination buffer for ",
                  plan.dst.LocalElements(rank), " elements");
  }
  if ((send_scratch == nullptr && schedule.send_scratch_bytes > 0) ||
      (recv_scratch == nullptr && schedule.recv_scratch_bytes > 0)) {
    return Errorf("execute rank: rank ", rank, " needs ", schedule.send_scratch_bytes,
                  " bytes of send and ", schedule.recv_scratch_bytes,
                  " of receive scratch, got a null pointer");
  }
  JAXMG_RETURN_IF_ERROR(CheckSteps(plan, schedule, rank));
  const Strides src = StridesOf(plan.src, rank);
  const Strides dst = StridesOf(plan.dst, rank);
  const int64_t elem = static_cast<int64_t>(element_bytes);

  for (const Piece& p : schedule.local) {
    const char* from = src_local + plan.src.Offset(rank, p.src_row, p.src_col) * elem;
    char* to = dst_local + plan.dst.Offset(rank, p.dst_row, p.dst_col) * elem;
    // Runs along columns unless both sides are row-major.
    if (src.down == 1 || dst.down == 1) {
      for (int64_t c = 0; c < p.cols; ++c) {
        CopyStrided(from + c * src.across * elem, src.down, to + c * dst.across * elem, dst.down,
                    p.rows, element_bytes);
      }
    } else {
      for (int64_t r = 0; r < p.rows; ++r) {
        CopyStrided(from + r * src.down * elem, src.across, to + r * dst.down * elem, dst.across,
                    p.cols, element_bytes);
      }
    }
  }

  // The streams of the current shift, rebuilt when a step moves to another peer.
  static const std::vector<Piece> kNone;
  int32_t send_peer = -1, recv_peer = -1;
  PieceStream send_stream(kNone), recv_stream(kNone);
  for (const ExchangeStep& step : schedule.steps) {
    if (step.send_bytes() > 0 && step.send_peer != send_peer) {
      send_peer = step.send_peer;
      send_stream = PieceStream(plan.Between(rank, send_peer));
    }
    if (step.recv_bytes() > 0 && step.recv_peer != recv_peer) {
      recv_peer = step.recv_peer;
      recv_stream = PieceStream(plan.Between(recv_peer, rank));
    }
    const int64_t send_first = step.send_begin / elem;
    if (step.send_bytes() > 0) {
      send_stream.ForEachRun(
          send_first, step.send_end / elem,
          [&](const Piece& p, int64_t col, int64_t row, int64_t count, int64_t at) {
            CopyStrided(src_local + plan.src.Offset(rank, p.src_row + row, p.src_col + col) * elem,
                        src.down, send_scratch + (at - send_first) * elem, 1, count,
                        element_bytes);
          });
    }
    JAXMG_RETURN_IF_ERROR(transport.Exchange(
        step.send_bytes() > 0 ? step.send_peer : -1, send_scratch, step.send_bytes(),
        step.recv_bytes() > 0 ? step.recv_peer : -1, recv_scratch, step.recv_bytes()));
    const int64_t recv_first = step.recv_begin / elem;
    if (step.recv_bytes() > 0) {
      recv_stream.ForEachRun(
          recv_first, step.recv_end / elem,
          [&](const Piece& p, int64_t col, int64_t row, int64_t count, int64_t at) {
            CopyStrided(recv_scratch + (at - recv_first) * elem, 1,
                        dst_local + plan.dst.Offset(rank, p.dst_row + row, p.dst_col + col) * elem,
                        dst.down, count, element_bytes);
          });
    }
  }
  return Status::Ok();
}

}  // namespace jaxmg::layout
