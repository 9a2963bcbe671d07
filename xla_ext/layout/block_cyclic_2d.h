// Planning of 2-D block-cyclic layouts (ScaLAPACK / cuSOLVERMp style) and of
// the redistribution from JAX's block layout into them. Pure functions of the
// sizes: nothing here touches device memory.
//
// An M x N matrix on a P_r x P_c process grid, blocks of MB x NB, first
// process (0, 0): global element (i, j) is in global block (I, J) =
// (i / MB, j / NB), which lives on process (I mod P_r, J mod P_c) at local
// block (I div P_r, J div P_c). Each process keeps its local matrix
// (NumRoc(M, MB, p, 0, P_r) x NumRoc(N, NB, q, 0, P_c)) with a leading
// dimension.
//
// JAX's layout for a mesh P("r", "c") gives process (p, q) the contiguous
// rows [p * ceil(M / P_r), ...) and columns [q * ceil(N / P_c), ...). That is
// the block-cyclic layout with MB = ceil(M / P_r), NB = ceil(N / P_c): every
// process owns one block or none. So both sides are one type, and a plan
// between any two such layouts (regridding, reblocking) comes for free.
#ifndef JAXMG_XLA_EXT_LAYOUT_BLOCK_CYCLIC_2D_H_
#define JAXMG_XLA_EXT_LAYOUT_BLOCK_CYCLIC_2D_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "xla_ext/common/status.h"

namespace jaxmg::layout {

// ScaLAPACK's numroc: how many of the n indices, dealt in blocks of nb
// starting at process isrcproc, process iproc of nprocs owns.
int64_t NumRoc(int64_t n, int64_t nb, int64_t iproc, int64_t isrcproc, int64_t nprocs);

// How ranks are numbered on the grid; cuSOLVERMp accepts both
// (CUSOLVERMP_GRID_MAPPING_ROW_MAJOR / _COL_MAJOR).
enum class GridOrder { kRowMajor, kColumnMajor };

struct ProcessGrid {
  int32_t rows = 1;  // P_r
  int32_t cols = 1;  // P_c
  GridOrder order = GridOrder::kRowMajor;

  Status Validate() const;
  int32_t size() const { return rows * cols; }
  // Row-major: rank = p * P_c + q. Column-major: rank = q * P_r + p.
  int32_t Rank(int32_t p, int32_t q) const;
  int32_t Row(int32_t rank) const;
  int32_t Col(int32_t rank) const;
};

// How a process stores its local matrix. cuSOLVERMp wants column-major. JAX
// hands row-major blocks: pieces of a plan are in logical (row, col)
// coordinates, so with a row-major source the executor transposes inside each
// piece and the engine still sees A itself, column-major (not A^T).
enum class StorageOrder { kColumnMajor, kRowMajor };

// Where one global element is stored.
struct LocalIndex {
  int32_t rank;
  int64_t row;
  int64_t col;
  bool operator==(const LocalIndex& o) const {
    return rank == o.rank && row == o.row && col == o.col;
  }
};

struct BlockCyclic2d {
  int64_t m = 0;   // global rows
  int64_t n = 0;   // global columns
  int64_t mb = 0;  // block rows
  int64_t nb = 0;  // block columns
  ProcessGrid grid;
  StorageOrder order = StorageOrder::kColumnMajor;
  // Leading dimension of every local matrix; 0 means tight for each rank
  // (max(1, local rows), or local columns when row-major), as ScaLAPACK asks.
  int64_t ld = 0;

  Status Validate() const;
  int64_t LocalRows(int32_t rank) const;
  int64_t LocalCols(int32_t rank) const;
  int64_t LeadingDim(int32_t rank) const;
  // Elements a rank's buffer must hold: ld times the trailing extent.
  int64_t LocalElements(int32_t rank) const;
  // Offset in elements of local (row, col) in a rank's buffer.
  int64_t Offset(int32_t rank, int64_t row, int64_t col) const;
  LocalIndex Locate(int64_t i, int64_t j) const;
};

// The ScaLAPACK-style layout cuSOLVERMp takes.
BlockCyclic2d CyclicLayout(int64_t m, int64_t n, int64_t mb, int64_t nb, ProcessGrid grid,
                           int64_t ld = 0);
// JAX's contiguous blocks for a mesh P("r", "c").
BlockCyclic2d JaxBlockLayout(int64_t m, int64_t n, ProcessGrid grid,
                             StorageOrder order = StorageOrder::kColumnMajor, int64_t ld = 0);

// A rectangle copied from a source local matrix to a destination one.
struct Piece {
  int64_t src_row;
  int64_t src_col;
  int64_t dst_row;
  int64_t dst_col;
  int64_t rows;
  int64_t cols;
  bool operator==(const Piece& o) const {
    return src_row == o.src_row && src_col == o.src_col && dst_row == o.dst_row &&
           dst_col == o.dst_col && rows == o.rows && cols == o.cols;
  }
};

struct RedistributionPlan {
  BlockCyclic2d src;
  BlockCyclic2d dst;
  // pieces[src_rank * ranks() + dst_rank]; pieces are disjoint on both sides.
  std::vector<std::vector<Piece>> pieces;

  int32_t ranks() const { return src.grid.size(); }
  const std::vector<Piece>& Between(int32_t src_rank, int32_t dst_rank) const {
    return pieces[static_cast<size_t>(src_rank) * ranks() + dst_rank];
  }
  int64_t PieceCount() const;
  // The same transfers with source and destination swapped.
  RedistributionPlan Inverse() const;
};

// Plans the move from `src` to `dst` (same global shape, same number of
// ranks; grids, blocks and storage may differ). Pieces are merged along each
// axis wherever they are contiguous on both sides, so there are at most
// (row chunks) x (column chunks) of them, where an axis of extent M cut by
// both layouts' block boundaries has at most ceil(M/MB_src) + ceil(M/MB_dst) - 1
// chunks; for JAX -> cyclic that is (ceil(M/MB) + P_r - 1) (ceil(N/NB) + P_c - 1).
Status PlanRedistribution(const BlockCyclic2d& src, const BlockCyclic2d& dst,
                          RedistributionPlan* plan);

// Applies a plan between per-rank host buffers (src[r], dst[r]: rank r's local
// matrix as the plan's layouts describe it; they must not overlap). Only the
// elements of the local matrices are written; padding below ld is left alone.
Status ExecuteOnHost(const RedistributionPlan& plan, const std::vector<const char*>& src,
                     const std::vector<char*>& dst, size_t element_bytes);

}  // namespace jaxmg::layout

#endif  // JAXMG_XLA_EXT_LAYOUT_BLOCK_CYCLIC_2D_H_
