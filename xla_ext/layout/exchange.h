// A redistribution plan run by every rank on its own, each rank seeing only
// its own local matrices and talking to the others through a Transport (NCCL
// grouped send/recv on GPUs, threads in the tests), with bounded scratch.
//
// The stream from rank s to rank d is the elements of plan.Between(s, d), in
// piece order, each piece column by column in logical (row, col) coordinates.
// It is cut into chunks of the scratch budget rounded down to whole elements,
// so a chunk may end inside a piece, inside a column.
//
// Rounds pair ranks by shift: in shift k (1..P-1) rank r sends to (r + k) mod P
// and receives from (r - k) mod P. A shift takes as many steps on rank r as the
// longer of its two streams has chunks; the pair (s, d) meets only in shift
// (d - s) mod P and both sides count its chunks from the same plan, so every
// send has its receive at the same (shift, step) and no cycle of waits forms.
#ifndef JAXMG_XLA_EXT_LAYOUT_EXCHANGE_H_
#define JAXMG_XLA_EXT_LAYOUT_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "xla_ext/common/status.h"
#include "xla_ext/layout/block_cyclic_2d.h"

namespace jaxmg::layout {

// One grouped send/recv of a rank. A side with no bytes has peer -1.
struct ExchangeStep {
  int32_t shift = 0;
  int32_t send_peer = -1;
  int64_t send_begin = 0;  // byte range [send_begin, send_end) of the stream to send_peer
  int64_t send_end = 0;
  int32_t recv_peer = -1;
  int64_t recv_begin = 0;  // byte range [recv_begin, recv_end) of the stream from recv_peer
  int64_t recv_end = 0;

  int64_t send_bytes() const { return send_end - send_begin; }
  int64_t recv_bytes() const { return recv_end - recv_begin; }
};

struct ExchangeSchedule {
  int32_t rank = 0;
  int32_t ranks = 0;
  size_t element_bytes = 0;
  int64_t chunk_bytes = 0;  // the budget rounded down to whole elements
  // Shift by shift, each stream in order; empty streams take no step.
  std::vector<ExchangeStep> steps;
  // plan.Between(rank, rank): copied directly, no message.
  std::vector<Piece> local;
  // Chunks this rank sends to / receives from each rank ([peer]; 0 for itself).
  std::vector<int64_t> send_chunks;
  std::vector<int64_t> recv_chunks;
  // The largest chunk each way: what the scratch buffers must hold (<= chunk_bytes).
  int64_t send_scratch_bytes = 0;
  int64_t recv_scratch_bytes = 0;
};

// Elements in the stream of `pieces`.
int64_t StreamElements(const std::vector<Piece>& pieces);

// Schedules rank `rank`'s part of `plan` with at most `scratch_bytes` of send
// scratch and as much of receive scratch (at least one element each).
Status PlanExchange(const RedistributionPlan& plan, int32_t rank, size_t element_bytes,
                    int64_t scratch_bytes, ExchangeSchedule* schedule);

class Transport {
 public:
  virtual ~Transport() = default;
  // Sends send_bytes from `send` to send_peer and receives recv_bytes from
  // recv_peer into `recv`, both posted together (ncclGroupStart/End); an empty
  // side has 0 bytes and peer -1. When it returns, `send` may be rewritten and
  // `recv` holds the data (on a stream-ordered transport: for work enqueued
  // after it).
  virtual Status Exchange(int send_peer, const void* send, size_t send_bytes, int recv_peer,
                          void* recv, size_t recv_bytes) = 0;
};

// Runs rank `rank`'s part of `plan`: src_local and dst_local are its local
// matrices as plan.src and plan.dst describe them, send_scratch and
// recv_scratch hold the schedule's send_scratch_bytes and recv_scratch_bytes.
// Every rank must call it with its own schedule of the same plan and budget.
// Only elements of dst_local's matrix are written; padding below ld is left
// alone. A transport error leaves the exchange half done on other ranks too:
// the caller must abort the communicator.
Status ExecuteRank(const RedistributionPlan& plan, const ExchangeSchedule& schedule,
                   int32_t rank, const char* src_local, char* dst_local, size_t element_bytes,
                   char* send_scratch, char* recv_scratch, Transport& transport);

}  // namespace jaxmg::layout

#endif  // JAXMG_XLA_EXT_LAYOUT_EXCHANGE_H_
