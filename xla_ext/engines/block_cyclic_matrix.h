// The matrix every engine works on: N x N, column-major, 1-D block-cyclic
// over the participating devices (see layout/block_cyclic.h). `local[d]` is
// device d's buffer: N rows by tiles_per_device * T_A columns.
#ifndef JAXMG_XLA_EXT_ENGINES_BLOCK_CYCLIC_MATRIX_H_
#define JAXMG_XLA_EXT_ENGINES_BLOCK_CYCLIC_MATRIX_H_

#include <cstdint>
#include <vector>

#include "xla_ext/layout/block_cyclic.h"

namespace jaxmg {

template <typename T>
struct BlockCyclicMatrix {
  layout::ColumnLayout layout;
  std::vector<T*> local;

  int64_t n() const { return layout.n_cols; }
  int64_t tile_elements() const { return layout.n_cols * layout.tile; }
  T* Tile(int64_t t) const {
    const layout::Slot s = layout.BlockCyclic(t);
    return local[s.device] + s.index * tile_elements();
  }
};

}  // namespace jaxmg

#endif  // JAXMG_XLA_EXT_ENGINES_BLOCK_CYCLIC_MATRIX_H_
