// Planning of the 1-D block-cyclic column layout and its in-place conversion.
//
// An N x N column-major matrix is split into tiles of T_A whole columns, so a
// tile is one contiguous run of N * T_A elements. Over n devices, each holding
// N / n columns (tiles_per_device slots):
//   contiguous:   tile t lives on device t / tiles_per_device, slot t % tiles_per_device
//   block-cyclic: tile t lives on device t % n,                slot t / n
// Converting between the two is a permutation of tile slots; it runs in place
// as disjoint cycles with one spare tile per cycle in flight.
#ifndef JAXMG_XLA_EXT_LAYOUT_BLOCK_CYCLIC_H_
#define JAXMG_XLA_EXT_LAYOUT_BLOCK_CYCLIC_H_

#include <cstdint>
#include <vector>

#include "xla_ext/common/status.h"

namespace jaxmg::layout {

struct Slot {
  int32_t device;
  int64_t index;
  bool operator==(const Slot& o) const { return device == o.device && index == o.index; }
};

struct ColumnLayout {
  int64_t n_cols = 0;  // global columns (the padded N)
  int64_t tile = 0;    // T_A
  int32_t n_devices = 0;

  Status Validate() const;
  int64_t tiles() const { return n_cols / tile; }
  int64_t tiles_per_device() const { return tiles() / n_devices; }
  Slot Contiguous(int64_t t) const;
  Slot BlockCyclic(int64_t t) const;
};

enum class Direction { kToBlockCyclic, kToContiguous };

// The tile in cycle[i] moves to cycle[i + 1]; the last one moves to cycle[0].
using Cycle = std::vector<Slot>;

// Disjoint cycles (fixed points left out) that perform the conversion.
std::vector<Cycle> PlanCycles(const ColumnLayout& layout, Direction direction);

// The executor side: moves whole tiles between slots. `Save` keeps one tile
// aside; `Restore` writes it back. Implementations decide how bytes travel
// (host memcpy, peer copies on streams, ...).
class TileMover {
 public:
  virtual ~TileMover() = default;
  virtual Status Save(const Slot& from) = 0;
  virtual Status Move(const Slot& from, const Slot& to) = 0;
  virtual Status Restore(const Slot& to) = 0;
};

Status ExecuteCycle(const Cycle& cycle, TileMover& mover);
Status ExecuteCycles(const std::vector<Cycle>& cycles, TileMover& mover);

}  // namespace jaxmg::layout

#endif  // JAXMG_XLA_EXT_LAYOUT_BLOCK_CYCLIC_H_
