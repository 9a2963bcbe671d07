// TileMover for buffers in host memory: plain memcpy, one spare tile.
#ifndef JAXMG_XLA_EXT_LAYOUT_HOST_MOVER_H_
#define JAXMG_XLA_EXT_LAYOUT_HOST_MOVER_H_

#include <cstddef>
#include <cstring>
#include <vector>

#include "xla_ext/layout/block_cyclic.h"

namespace jaxmg::layout {

class HostTileMover : public TileMover {
 public:
  // local[d]: device d's buffer; every tile is tile_bytes contiguous bytes.
  HostTileMover(std::vector<char*> local, size_t tile_bytes)
      : local_(std::move(local)), tile_bytes_(tile_bytes), spare_(tile_bytes) {}

  Status Save(const Slot& from) override {
    std::memcpy(spare_.data(), At(from), tile_bytes_);
    return Status::Ok();
  }
  Status Move(const Slot& from, const Slot& to) override {
    std::memcpy(At(to), At(from), tile_bytes_);
    return Status::Ok();
  }
  Status Restore(const Slot& to) override {
    std::memcpy(At(to), spare_.data(), tile_bytes_);
    return Status::Ok();
  }

 private:
  char* At(const Slot& s) const { return local_[s.device] + s.index * tile_bytes_; }
  std::vector<char*> local_;
  size_t tile_bytes_;
  std::vector<char> spare_;
};

}  // namespace jaxmg::layout

#endif  // JAXMG_XLA_EXT_LAYOUT_HOST_MOVER_H_
