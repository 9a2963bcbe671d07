#include "xla_ext/layout/block_cyclic_2d.h"

#include <algorithm>
#include <cstring>

namespace jaxmg::layout {

int64_t NumRoc(int64_t n, int64_t nb, int64_t iproc, int64_t isrcproc, int64_t nprocs) {
  const int64_t distance = (nprocs + iproc - isrcproc) % nprocs;
  const int64_t whole_blocks = n / nb;
  int64_t count = (whole_blocks / nprocs) * nb;
  const int64_t extra_blocks = whole_blocks % nprocs;
  if (distance < extra_blocks) {
    count += nb;
  } else if (distance == extra_blocks) {
    count += n % nb;  // the trailing partial block
  }
  return count;
}

Status ProcessGrid::Validate() const {
  if (rows < 1 || cols < 1) return Errorf("grid: ", rows, "x", cols, " must be at least 1x1");
  return Status::Ok();
}

int32_t ProcessGrid::Rank(int32_t p, int32_t q) const {
  return order == GridOrder::kRowMajor ? p * cols + q : q * rows + p;
}

int32_t ProcessGrid::Row(int32_t rank) const {
  return order == GridOrder::kRowMajor ? rank / cols : rank % rows;
}

int32_t ProcessGrid::Col(int32_t rank) const {
  return order == GridOrder::kRowMajor ? rank % cols : rank / rows;
}

Status BlockCyclic2d::Validate() const {
  JAXMG_RETURN_IF_ERROR(grid.Validate());
  if (m < 1 || n < 1) return Errorf("layout: matrix ", m, "x", n, " must be at least 1x1");
  if (mb < 1 || nb < 1) return Errorf("layout: block ", mb, "x", nb, " must be at least 1x1");
  if (ld < 0) return Errorf("layout: ld=", ld, " must be >= 0");
  if (ld > 0) {
    for (int32_t r = 0; r < grid.size(); ++r) {
      const int64_t leading = order == StorageOrder::kColumnMajor ? LocalRows(r) : LocalCols(r);
      if (ld < std::max<int64_t>(1, leading)) {
        return Errorf("layout: ld=", ld, " is below rank ", r, "'s leading extent ", leading);
      }
    }
  }
  return Status::Ok();
}

int64_t BlockCyclic2d::LocalRows(int32_t rank) const {
  return NumRoc(m, mb, grid.Row(rank), 0, grid.rows);
}

int64_t BlockCyclic2d::LocalCols(int32_t rank) const {
  return NumRoc(n, nb, grid.Col(rank), 0, grid.cols);
}

int64_t BlockCyclic2d::LeadingDim(int32_t rank) const {
  if (ld > 0) return ld;
  return std::max<int64_t>(1, order == StorageOrder::kColumnMajor ? LocalRows(rank)
                                                                  : LocalCols(rank));
}

int64_t BlockCyclic2d::LocalElements(int32_t rank) const {
  return LeadingDim(rank) *
         (order == StorageOrder::kColumnMajor ? LocalCols(rank) : LocalRows(rank));
}

int64_t BlockCyclic2d::Offset(int32_t rank, int64_t row, int64_t col) const {
  return order == StorageOrder::kColumnMajor ? col * LeadingDim(rank) + row
                                             : row * LeadingDim(rank) + col;
}

LocalIndex BlockCyclic2d::Locate(int64_t i, int64_t j) const {
  const int64_t block_row = i / mb;
  const int64_t block_col = j / nb;
  const int32_t p = static_cast<int32_t>(block_row % grid.rows);
  const int32_t q = static_cast<int32_t>(block_col % grid.cols);
  return LocalIndex{grid.Rank(p, q), (block_row / grid.rows) * mb + i % mb,
                    (block_col / grid.cols) * nb + j % nb};
}

BlockCyclic2d CyclicLayout(int64_t m, int64_t n, int64_t mb, int64_t nb, ProcessGrid grid,
                           int64_t ld) {
  return BlockCyclic2d{m, n, mb, nb, grid, StorageOrder::kColumnMajor, ld};
}

BlockCyclic2d JaxBlockLayout(int64_t m, int64_t n, ProcessGrid grid, StorageOrder order,
                             int64_t ld) {
  // Guarded so an invalid grid reaches Validate instead of dividing by zero.
  const int64_t mb = grid.rows > 0 ? (m + grid.rows - 1) / grid.rows : 0;
  const int64_t nb = grid.cols > 0 ? (n + grid.cols - 1) / grid.cols : 0;
  return BlockCyclic2d{m, n, mb, nb, grid, order, ld};
}

int64_t RedistributionPlan::PieceCount() const {
  int64_t count = 0;
  for (const auto& list : pieces) count += static_cast<int64_t>(list.size());
  return count;
}

RedistributionPlan RedistributionPlan::Inverse() const {
  RedistributionPlan inverse{dst, src, std::vector<std::vector<Piece>>(pieces.size())};
  const int32_t n_ranks = ranks();
  for (int32_t s = 0; s < n_ranks; ++s) {
    for (int32_t d = 0; d < n_ranks; ++d) {
      auto& out = inverse.pieces[static_cast<size_t>(d) * n_ranks + s];
      for (const Piece& p : Between(s, d)) {
        out.push_back(Piece{p.dst_row, p.dst_col, p.src_row, p.src_col, p.rows, p.cols});
      }
    }
  }
  return inverse;
}

namespace {

// A run along one axis: local offsets on both sides and its length.
struct Segment {
  int64_t src;
  int64_t dst;
  int64_t length;
};

// Cuts one axis at both layouts' block boundaries. Result indexed by
// [src_proc * dst_procs + dst_proc], each list in increasing global order.
std::vector<std::vector<Segment>> AxisSegments(int64_t extent, int64_t src_block,
                                               int32_t src_procs, int64_t dst_block,
                                               int32_t dst_procs) {
  std::vector<std::vector<Segment>> segments(static_cast<size_t>(src_procs) * dst_procs);
  for (int64_t i = 0; i < extent;) {
    const int64_t src_index = i / src_block;
    const int64_t dst_index = i / dst_block;
    const int64_t end =
        std::min({(src_index + 1) * src_block, (dst_index + 1) * dst_block, extent});
    const Segment next{(src_index / src_procs) * src_block + i % src_block,
                       (dst_index / dst_procs) * dst_block + i % dst_block, end - i};
    auto& list = segments[static_cast<size_t>(src_index % src_procs) * dst_procs +
                          dst_index % dst_procs];
    // Contiguous on both sides: one longer run copies the same elements.
    if (!list.empty() && list.back().src + list.back().length == next.src &&
        list.back().dst + list.back().length == next.dst) {
      list.back().length += next.length;
    } else {
      list.push_back(next);
    }
    i = end;
  }
  return segments;
}

}  // namespace

Status PlanRedistribution(const BlockCyclic2d& src, const BlockCyclic2d& dst,
                          RedistributionPlan* plan) {
  JAXMG_RETURN_IF_ERROR(src.Validate());
  JAXMG_RETURN_IF_ERROR(dst.Validate());
  if (src.m != dst.m || src.n != dst.n) {
    return Errorf("plan: source is ", src.m, "x", src.n, ", destination ", dst.m, "x", dst.n);
  }
  if (src.grid.size() != dst.grid.size()) {
    return Errorf("plan: source has ", src.grid.size(), " ranks, destination ",
                  dst.grid.size());
  }
  // A rectangle's rows and columns are independent, so each pair's pieces are
  // the product of its row runs and its column runs.
  const auto row_runs = AxisSegments(src.m, src.mb, src.grid.rows, dst.mb, dst.grid.rows);
  const auto col_runs = AxisSegments(src.n, src.nb, src.grid.cols, dst.nb, dst.grid.cols);
  const int32_t n_ranks = src.grid.size();
  plan->src = src;
  plan->dst = dst;
  plan->pieces.assign(static_cast<size_t>(n_ranks) * n_ranks, {});
  for (int32_t s = 0; s < n_ranks; ++s) {
    for (int32_t d = 0; d < n_ranks; ++d) {
      const auto& rows = row_runs[static_cast<size_t>(src.grid.Row(s)) * dst.grid.rows +
                                  dst.grid.Row(d)];
      const auto& cols = col_runs[static_cast<size_t>(src.grid.Col(s)) * dst.grid.cols +
                                  dst.grid.Col(d)];
      auto& out = plan->pieces[static_cast<size_t>(s) * n_ranks + d];
      out.reserve(rows.size() * cols.size());
      for (const Segment& c : cols) {
        for (const Segment& r : rows) {
          out.push_back(Piece{r.src, c.src, r.dst, c.dst, r.length, c.length});
        }
      }
    }
  }
  return Status::Ok();
}

Status ExecuteOnHost(const RedistributionPlan& plan, const std::vector<const char*>& src,
                     const std::vector<char*>& dst, size_t element_bytes) {
  const int32_t n_ranks = plan.ranks();
  if (src.size() != static_cast<size_t>(n_ranks) || dst.size() != static_cast<size_t>(n_ranks)) {
    return Errorf("execute: plan has ", n_ranks, " ranks, got ", src.size(), " source and ",
                  dst.size(), " destination buffers");
  }
  if (element_bytes == 0) return Errorf("execute: element_bytes must be positive");
  for (int32_t r = 0; r < n_ranks; ++r) {
    if ((src[r] == nullptr && plan.src.LocalElements(r) > 0) ||
        (dst[r] == nullptr && plan.dst.LocalElements(r) > 0)) {
      return Errorf("execute: rank ", r, " has a null buffer");
    }
  }
  const bool src_cm = plan.src.order == StorageOrder::kColumnMajor;
  const bool dst_cm = plan.dst.order == StorageOrder::kColumnMajor;
  for (int32_t s = 0; s < n_ranks; ++s) {
    for (int32_t d = 0; d < n_ranks; ++d) {
      // Element strides of a step down a row and across a column.
      const int64_t src_ld = plan.src.LeadingDim(s);
      const int64_t dst_ld = plan.dst.LeadingDim(d);
      const int64_t src_down = src_cm ? 1 : src_ld, src_across = src_cm ? src_ld : 1;
      const int64_t dst_down = dst_cm ? 1 : dst_ld, dst_across = dst_cm ? dst_ld : 1;
      for (const Piece& p : plan.Between(s, d)) {
        const char* from = src[s] + plan.src.Offset(s, p.src_row, p.src_col) * element_bytes;
        char* to = dst[d] + plan.dst.Offset(d, p.dst_row, p.dst_col) * element_bytes;
        if (src_cm == dst_cm) {
          // Same order: copy whole runs along the contiguous axis.
          const int64_t runs = src_cm ? p.cols : p.rows;
          const size_t run_bytes = (src_cm ? p.rows : p.cols) * element_bytes;
          for (int64_t k = 0; k < runs; ++k) {
            std::memcpy(to + k * dst_ld * element_bytes, from + k * src_ld * element_bytes,
                        run_bytes);
          }
          continue;
        }
        // Orders differ: a transpose, element by element.
        for (int64_t c = 0; c < p.cols; ++c) {
          for (int64_t r = 0; r < p.rows; ++r) {
            std::memcpy(to + (r * dst_down + c * dst_across) * element_bytes,
                        from + (r * src_down + c * src_across) * element_bytes, element_bytes);
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace jaxmg::layout
