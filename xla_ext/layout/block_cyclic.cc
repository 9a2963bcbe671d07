#include "xla_ext/layout/block_cyclic.h"

namespace jaxmg::layout {

Status ColumnLayout::Validate() const {
  if (n_devices < 1) return Errorf("layout: n_devices=", n_devices, " must be >= 1");
  if (tile < 1) return Errorf("layout: tile=", tile, " must be >= 1");
  if (n_cols < 1 || n_cols % (tile * n_devices) != 0) {
    return Errorf("layout: N=", n_cols, " must be a positive multiple of tile*n_devices=",
                  tile * n_devices);
  }
  return Status::Ok();
}

Slot ColumnLayout::Contiguous(int64_t t) const {
  return Slot{static_cast<int32_t>(t / tiles_per_device()), t % tiles_per_device()};
}

Slot ColumnLayout::BlockCyclic(int64_t t) const {
  return Slot{static_cast<int32_t>(t % n_devices), t / n_devices};
}

std::vector<Cycle> PlanCycles(const ColumnLayout& layout, Direction direction) {
  const int64_t n_tiles = layout.tiles();
  const int64_t per_device = layout.tiles_per_device();
  auto position = [per_device](const Slot& s) { return s.device * per_device + s.index; };
  auto slot_at = [per_device](int64_t p) {
    return Slot{static_cast<int32_t>(p / per_device), p % per_device};
  };
  // destination[p]: the position the tile now at position p must move to.
  std::vector<int64_t> destination(n_tiles);
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t contiguous = position(layout.Contiguous(t));
    const int64_t cyclic = position(layout.BlockCyclic(t));
    if (direction == Direction::kToBlockCyclic) {
      destination[contiguous] = cyclic;
    } else {
      destination[cyclic] = contiguous;
    }
  }
  std::vector<Cycle> cycles;
  std::vector<bool> visited(n_tiles, false);
  for (int64_t start = 0; start < n_tiles; ++start) {
    if (visited[start] || destination[start] == start) continue;
    Cycle cycle;
    for (int64_t p = start; !visited[p]; p = destination[p]) {
      visited[p] = true;
      cycle.push_back(slot_at(p));
    }
    cycles.push_back(std::move(cycle));
  }
  return cycles;
}

Status ExecuteCycle(const Cycle& cycle, TileMover& mover) {
  if (cycle.size() < 2) return Status::Ok();
  JAXMG_RETURN_IF_ERROR(mover.Save(cycle.back()));
  for (size_t i = cycle.size() - 1; i > 0; --i) {
    JAXMG_RETURN_IF_ERROR(mover.Move(cycle[i - 1], cycle[i]));
  }
  return mover.Restore(cycle.front());
}

Status ExecuteCycles(const std::vector<Cycle>& cycles, TileMover& mover) {
  for (const Cycle& cycle : cycles) JAXMG_RETURN_IF_ERROR(ExecuteCycle(cycle, mover));
  return Status::Ok();
}

}  // namespace jaxmg::layout
