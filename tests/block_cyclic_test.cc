// Planning of the block-cyclic conversion, checked on every small shape: the
// cycles must be disjoint, move each tile to its block-cyclic slot, and the
// reverse plan must restore the original placement.
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "tests/check.h"
#include "xla_ext/layout/block_cyclic.h"
#include "xla_ext/layout/host_mover.h"

using jaxmg::layout::ColumnLayout;
using jaxmg::layout::Direction;
using jaxmg::layout::Slot;

namespace {

void CheckMapping() {
  // N=12, tile 2, 3 devices: 6 tiles, 2 per device.
  ColumnLayout l{12, 2, 3};
  CHECK(l.Validate().ok());
  CHECK(l.tiles() == 6 && l.tiles_per_device() == 2);
  CHECK((l.Contiguous(3) == Slot{1, 1}));
  CHECK((l.BlockCyclic(3) == Slot{0, 1}));
  CHECK((l.BlockCyclic(5) == Slot{2, 1}));
  CHECK(!ColumnLayout({10, 2, 3}).Validate().ok());
  CHECK(!ColumnLayout({12, 0, 3}).Validate().ok());
  CHECK(!ColumnLayout({12, 2, 0}).Validate().ok());
}

// Simulates the conversion on tile labels and checks the final placement.
void CheckConversion(int64_t n_devices, int64_t per_device, int64_t tile) {
  ColumnLayout l{n_devices * per_device * tile, tile, static_cast<int32_t>(n_devices)};
  CHECK(l.Validate().ok());
  // Each tile is `tile` int64 "columns" holding the tile's id, one element a column.
  std::vector<std::vector<int64_t>> local(n_devices, std::vector<int64_t>(per_device * tile));
  for (int64_t t = 0; t < l.tiles(); ++t) {
    Slot s = l.Contiguous(t);
    for (int64_t c = 0; c < tile; ++c) local[s.device][s.index * tile + c] = t * 1000 + c;
  }
  std::vector<char*> blocks;
  for (auto& v : local) blocks.push_back(reinterpret_cast<char*>(v.data()));
  jaxmg::layout::HostTileMover mover(blocks, tile * sizeof(int64_t));

  auto cycles = jaxmg::layout::PlanCycles(l, Direction::kToBlockCyclic);
  std::set<std::pair<int32_t, int64_t>> seen;
  for (const auto& cycle : cycles) {
    CHECK(cycle.size() >= 2);
    for (const Slot& s : cycle) CHECK(seen.insert({s.device, s.index}).second);
  }
  CHECK(jaxmg::layout::ExecuteCycles(cycles, mover).ok());
  for (int64_t t = 0; t < l.tiles(); ++t) {
    Slot s = l.BlockCyclic(t);
    for (int64_t c = 0; c < tile; ++c) CHECK(local[s.device][s.index * tile + c] == t * 1000 + c);
  }
  CHECK(jaxmg::layout::ExecuteCycles(jaxmg::layout::PlanCycles(l, Direction::kToContiguous), mover)
            .ok());
  for (int64_t t = 0; t < l.tiles(); ++t) {
    Slot s = l.Contiguous(t);
    CHECK(local[s.device][s.index * tile] == t * 1000);
  }
}

}  // namespace

int main() {
  CheckMapping();
  // One device or one tile per device: nothing moves.
  CHECK(jaxmg::layout::PlanCycles({8, 2, 1}, Direction::kToBlockCyclic).empty());
  CHECK(jaxmg::layout::PlanCycles({8, 2, 4}, Direction::kToBlockCyclic).empty());
  int cases = 0;
  for (int64_t n = 1; n <= 9; ++n) {
    for (int64_t per = 1; per <= 9; ++per) {
      for (int64_t tile : {1, 3}) {
        CheckConversion(n, per, tile);
        ++cases;
      }
    }
  }
  CheckConversion(32, 17, 2);
  std::printf("block_cyclic_test: %d shapes passed\n", cases + 1);
  return 0;
}
