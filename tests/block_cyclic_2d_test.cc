// Planning of 2-D block-cyclic redistributions, checked against definitions
// the test computes on its own (JAX's contiguous blocks, ScaLAPACK's
// block-cyclic rule): every element is moved exactly once and to the right
// place, pieces stay inside the local matrices and are merged as far as they
// can be, and the inverse plan restores the source buffers byte for byte.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <unordered_map>
#include <vector>

#include "tests/check.h"
#include "xla_ext/layout/block_cyclic_2d.h"

using jaxmg::layout::BlockCyclic2d;
using jaxmg::layout::GridOrder;
using jaxmg::layout::LocalIndex;
using jaxmg::layout::Piece;
using jaxmg::layout::ProcessGrid;
using jaxmg::layout::RedistributionPlan;
using jaxmg::layout::StorageOrder;

namespace {

constexpr unsigned char kSentinel = 0xAB;  // fills bytes no element should reach

void CheckNumRoc() {
  for (int64_t nprocs = 1; nprocs <= 8; ++nprocs) {
    for (int64_t nb = 1; nb <= 9; ++nb) {
      for (int64_t n = 0; n <= 70; ++n) {
        for (int64_t src = 0; src < nprocs; ++src) {
          int64_t total = 0;
          for (int64_t p = 0; p < nprocs; ++p) {
            int64_t owned = 0;
            for (int64_t i = 0; i < n; ++i) owned += ((i / nb + src) % nprocs == p);
            CHECK(jaxmg::layout::NumRoc(n, nb, p, src, nprocs) == owned);
            total += owned;
          }
          CHECK(total == n);
        }
      }
    }
  }
}

void CheckGrid() {
  ProcessGrid row{2, 3, GridOrder::kRowMajor};
  ProcessGrid col{2, 3, GridOrder::kColumnMajor};
  CHECK(row.Rank(1, 0) == 3 && col.Rank(1, 0) == 1);
  CHECK(row.Rank(0, 2) == 2 && col.Rank(0, 2) == 4);
  for (const ProcessGrid& g : {row, col}) {
    std::vector<bool> seen(g.size(), false);
    for (int32_t p = 0; p < g.rows; ++p) {
      for (int32_t q = 0; q < g.cols; ++q) {
        const int32_t r = g.Rank(p, q);
        CHECK(r >= 0 && r < g.size() && !seen[r]);
        seen[r] = true;
        CHECK(g.Row(r) == p && g.Col(r) == q);
      }
    }
  }
}

void CheckValidation() {
  const ProcessGrid g22{2, 2};
  CHECK(!(ProcessGrid{0, 2}).Validate().ok());
  CHECK(!jaxmg::layout::CyclicLayout(0, 4, 2, 2, g22).Validate().ok());
  CHECK(!jaxmg::layout::CyclicLayout(4, 4, 0, 2, g22).Validate().ok());
  CHECK(!jaxmg::layout::JaxBlockLayout(4, 4, ProcessGrid{2, 0}).Validate().ok());
  // 5 rows, blocks of 2 on 2 process rows: process row 0 has 3 local rows.
  CHECK(!jaxmg::layout::CyclicLayout(5, 4, 2, 2, g22, 2).Validate().ok());
  CHECK(jaxmg::layout::CyclicLayout(5, 4, 2, 2, g22, 3).Validate().ok());
  // Row-major: ld bounds the local columns (4 columns on one process column).
  CHECK(!jaxmg::layout::JaxBlockLayout(8, 4, ProcessGrid{2, 1}, StorageOrder::kRowMajor, 3)
             .Validate()
             .ok());
  RedistributionPlan plan;
  CHECK(!jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(5, 4, g22),
                                           jaxmg::layout::CyclicLayout(5, 5, 2, 2, g22), &plan)
             .ok());
  CHECK(!jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(5, 4, g22),
                                           jaxmg::layout::CyclicLayout(5, 4, 2, 2, {1, 2}),
                                           &plan)
             .ok());
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(5, 4, g22),
                                          jaxmg::layout::CyclicLayout(5, 4, 2, 2, g22), &plan)
            .ok());
  std::vector<int64_t> a(64), b(64);
  std::vector<const char*> src(4, reinterpret_cast<const char*>(a.data()));
  std::vector<char*> dst(4, reinterpret_cast<char*>(b.data()));
  CHECK(!jaxmg::layout::ExecuteOnHost(plan, {src.begin(), src.begin() + 3}, dst, 8).ok());
  CHECK(!jaxmg::layout::ExecuteOnHost(plan, src, dst, 0).ok());
  dst[2] = nullptr;
  CHECK(!jaxmg::layout::ExecuteOnHost(plan, src, dst, 8).ok());
}

void CheckHandExamples() {
  // JAX blocks take ceil(M / P_r) rows each; the last ones shrink or vanish.
  const ProcessGrid g41{4, 1};
  const BlockCyclic2d ten = jaxmg::layout::JaxBlockLayout(10, 3, g41);
  const BlockCyclic2d nine = jaxmg::layout::JaxBlockLayout(9, 3, g41);
  const int64_t ten_rows[] = {3, 3, 3, 1}, nine_rows[] = {3, 3, 3, 0};
  for (int32_t r = 0; r < 4; ++r) {
    CHECK(ten.LocalRows(r) == ten_rows[r] && nine.LocalRows(r) == nine_rows[r]);
    CHECK(ten.LocalCols(r) == 3);
  }
  CHECK(nine.LeadingDim(3) == 1 && nine.LocalElements(3) == 3);
  CHECK((ten.Locate(7, 2) == LocalIndex{2, 1, 2}));

  // 5 x 4, blocks 2 x 2 on a 2 x 2 grid: (3, 2) is block (1, 1) -> process
  // (1, 1), local (1, 0); (4, 3) is block (2, 1) -> process (0, 1), local (2, 1).
  const BlockCyclic2d c = jaxmg::layout::CyclicLayout(5, 4, 2, 2, ProcessGrid{2, 2});
  CHECK((c.Locate(3, 2) == LocalIndex{3, 1, 0}));
  CHECK((c.Locate(4, 3) == LocalIndex{1, 2, 1}));
  const BlockCyclic2d cc =
      jaxmg::layout::CyclicLayout(5, 4, 2, 2, ProcessGrid{2, 2, GridOrder::kColumnMajor});
  CHECK((cc.Locate(4, 3) == LocalIndex{2, 2, 1}));
  CHECK(c.LocalRows(0) == 3 && c.LocalRows(3) == 2 && c.Offset(1, 2, 1) == 5);

  RedistributionPlan plan;
  // One process: the whole matrix is one piece.
  const ProcessGrid g11{1, 1};
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(100, 70, g11),
                                          jaxmg::layout::CyclicLayout(100, 70, 16, 3, g11),
                                          &plan)
            .ok());
  CHECK(plan.PieceCount() == 1);
  const Piece& whole = plan.Between(0, 0)[0];
  CHECK(whole.src_row == 0 && whole.dst_col == 0 && whole.rows == 100 && whole.cols == 70);

  // 100 x 100, blocks of 64 on 3 x 3: JAX rows [0,34) [34,68) [68,100) meet
  // the block boundary at 64, so each axis has 4 runs and the plan 16 pieces.
  const ProcessGrid g33{3, 3};
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(100, 100, g33),
                                          jaxmg::layout::CyclicLayout(100, 100, 64, 64, g33),
                                          &plan)
            .ok());
  CHECK(plan.PieceCount() == 16);
  // Process (1, 1) sends rows [64, 68) x cols [64, 68) to (1, 1) as local
  // (0, 0), from its local (30, 30).
  const auto& center = plan.Between(4, 4);
  CHECK(center.size() == 1);
  CHECK(center[0].src_row == 30 && center[0].src_col == 30 && center[0].dst_row == 0 &&
        center[0].dst_col == 0 && center[0].rows == 4 && center[0].cols == 4);
  CHECK(plan.Between(8, 0).empty());  // (2, 2) holds no block-(0, 0) element

  // 1 x 4 grid: one process row, so the 7 row blocks of 16 are contiguous on
  // both sides and merge into one run; 64 columns in JAX slabs of 16 with
  // blocks of 4 give one column run per pair -> 16 pieces of 100 x 4, not 112.
  const ProcessGrid g14{1, 4};
  CHECK(jaxmg::layout::PlanRedistribution(jaxmg::layout::JaxBlockLayout(100, 64, g14),
                                          jaxmg::layout::CyclicLayout(100, 64, 16, 4, g14),
                                          &plan)
            .ok());
  CHECK(plan.PieceCount() == 16);
  for (int32_t s = 0; s < 4; ++s) {
    for (int32_t d = 0; d < 4; ++d) {
      CHECK(plan.Between(s, d).size() == 1);
      const Piece& p = plan.Between(s, d)[0];
      CHECK(p.rows == 100 && p.cols == 4 && p.src_col == 4 * d && p.dst_col == 4 * s);
    }
  }
}

// One side of a redistribution, as the test understands it.
struct Side {
  bool jax = false;  // JAX's contiguous blocks; otherwise block-cyclic mb x nb
  int64_t mb = 0, nb = 0;
  ProcessGrid grid;
  StorageOrder order = StorageOrder::kColumnMajor;
  int64_t ld_pad = -1;  // < 0: tight per rank; else max leading extent + pad
};

// The test's own model of a side: where each global row / column goes, and
// the reverse map, built straight from the definitions.
struct Model {
  int64_t m, n;
  ProcessGrid grid;
  StorageOrder order;
  std::vector<int32_t> row_proc, col_proc;    // [i], [j]
  std::vector<int64_t> row_local, col_local;  // [i], [j]
  std::vector<std::vector<int64_t>> row_global, col_global;  // [p][local], [q][local]
  std::vector<int64_t> ld;                                   // [rank]
  BlockCyclic2d layout;

  int32_t Rank(int32_t p, int32_t q) const {
    return grid.order == GridOrder::kRowMajor ? p * grid.cols + q : q * grid.rows + p;
  }
  int64_t Rows(int32_t rank) const { return row_global[RowOf(rank)].size(); }
  int64_t Cols(int32_t rank) const { return col_global[ColOf(rank)].size(); }
  int32_t RowOf(int32_t rank) const {
    return grid.order == GridOrder::kRowMajor ? rank / grid.cols : rank % grid.rows;
  }
  int32_t ColOf(int32_t rank) const {
    return grid.order == GridOrder::kRowMajor ? rank % grid.cols : rank / grid.rows;
  }
  int64_t Offset(int32_t rank, int64_t r, int64_t c) const {
    return order == StorageOrder::kColumnMajor ? c * ld[rank] + r : r * ld[rank] + c;
  }
  size_t Elements(int32_t rank) const {
    return ld[rank] * (order == StorageOrder::kColumnMajor ? Cols(rank) : Rows(rank));
  }
};

void MapAxis(int64_t extent, bool jax, int64_t block, int32_t procs, std::vector<int32_t>* proc,
             std::vector<int64_t>* local, std::vector<std::vector<int64_t>>* global) {
  proc->resize(extent);
  local->resize(extent);
  global->assign(procs, {});
  const int64_t slab = (extent + procs - 1) / procs;
  for (int64_t i = 0; i < extent; ++i) {
    if (jax) {
      (*proc)[i] = static_cast<int32_t>(i / slab);
      (*local)[i] = i - (*proc)[i] * slab;
    } else {
      (*proc)[i] = static_cast<int32_t>((i / block) % procs);
      (*local)[i] = (i / block / procs) * block + i % block;
    }
    CHECK(static_cast<int64_t>((*global)[(*proc)[i]].size()) == (*local)[i]);
    (*global)[(*proc)[i]].push_back(i);
  }
}

Model BuildModel(int64_t m, int64_t n, const Side& side) {
  Model model;
  model.m = m;
  model.n = n;
  model.grid = side.grid;
  model.order = side.order;
  MapAxis(m, side.jax, side.mb, side.grid.rows, &model.row_proc, &model.row_local,
          &model.row_global);
  MapAxis(n, side.jax, side.nb, side.grid.cols, &model.col_proc, &model.col_local,
          &model.col_global);
  const int32_t ranks = side.grid.size();
  int64_t widest = 1;
  for (int32_t r = 0; r < ranks; ++r) {
    const int64_t leading =
        side.order == StorageOrder::kColumnMajor ? model.Rows(r) : model.Cols(r);
    widest = std::max(widest, leading);
    model.ld.push_back(std::max<int64_t>(1, leading));
  }
  int64_t ld = 0;
  if (side.ld_pad >= 0) {
    ld = widest + side.ld_pad;
    model.ld.assign(ranks, ld);
  }
  model.layout = side.jax ? jaxmg::layout::JaxBlockLayout(m, n, side.grid, side.order, ld)
                          : BlockCyclic2d{m, n, side.mb, side.nb, side.grid, side.order, ld};
  CHECK(model.layout.Validate().ok());
  for (int32_t r = 0; r < ranks; ++r) {
    CHECK(model.layout.LocalRows(r) == model.Rows(r));
    CHECK(model.layout.LocalCols(r) == model.Cols(r));
    CHECK(model.layout.LeadingDim(r) == model.ld[r]);
    CHECK(model.layout.LocalElements(r) == static_cast<int64_t>(model.Elements(r)));
  }
  return model;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Runs along one axis when both sides cut it at their block boundaries.
int64_t AxisChunkBound(int64_t extent, const BlockCyclic2d& a, const BlockCyclic2d& b,
                       bool rows) {
  return rows ? CeilDiv(extent, a.mb) + CeilDiv(extent, b.mb) - 1
              : CeilDiv(extent, a.nb) + CeilDiv(extent, b.nb) - 1;
}

// No two pieces of one pair could have been a single rectangle.
void CheckMaximal(const std::vector<Piece>& pieces) {
  std::unordered_map<int64_t, const Piece*> by_src;
  auto key = [](int64_t r, int64_t c) { return r * (int64_t{1} << 24) + c; };
  for (const Piece& p : pieces) CHECK(by_src.emplace(key(p.src_row, p.src_col), &p).second);
  for (const Piece& p : pieces) {
    auto below = by_src.find(key(p.src_row + p.rows, p.src_col));
    if (below != by_src.end()) {
      const Piece& q = *below->second;
      CHECK(!(q.cols == p.cols && q.dst_row == p.dst_row + p.rows && q.dst_col == p.dst_col));
    }
    auto right = by_src.find(key(p.src_row, p.src_col + p.cols));
    if (right != by_src.end()) {
      const Piece& q = *right->second;
      CHECK(!(q.rows == p.rows && q.dst_col == p.dst_col + p.cols && q.dst_row == p.dst_row));
    }
  }
}

template <typename T>
T Encode(int64_t g) {
  T value;
  std::memset(&value, 0, sizeof(T));
  const uint64_t code = static_cast<uint64_t>(g) * 2654435761u + 1;  // never the sentinel
  std::memcpy(&value, &code, std::min(sizeof(T), sizeof(code)));
  return value;
}

using Buffers = std::vector<std::vector<char>>;

Buffers Allocate(const Model& model, size_t element_bytes) {
  Buffers buffers;
  for (int32_t r = 0; r < model.grid.size(); ++r) {
    buffers.emplace_back(model.Elements(r) * element_bytes, static_cast<char>(kSentinel));
  }
  return buffers;
}

template <typename T>
bool Holds(const Buffers& buffers, const Model& model, int64_t i, int64_t j) {
  const int32_t rank = model.Rank(model.row_proc[i], model.col_proc[j]);
  const T expected = Encode<T>(i * model.n + j);
  const char* at = buffers[rank].data() +
                   model.Offset(rank, model.row_local[i], model.col_local[j]) * sizeof(T);
  return std::memcmp(at, &expected, sizeof(T)) == 0;
}

template <typename T>
void CheckCase(int64_t m, int64_t n, const Side& src_side, const Side& dst_side) {
  const Model src = BuildModel(m, n, src_side);
  const Model dst = BuildModel(m, n, dst_side);
  RedistributionPlan plan;
  CHECK(jaxmg::layout::PlanRedistribution(src.layout, dst.layout, &plan).ok());
  const int32_t ranks = src.grid.size();
  CHECK(static_cast<int64_t>(plan.pieces.size()) == int64_t{ranks} * ranks);

  // The library's own lookup agrees with the definition.
  for (int64_t i = 0; i < m; i += 1 + m / 17) {
    for (int64_t j = 0; j < n; j += 1 + n / 13) {
      const LocalIndex at = dst.layout.Locate(i, j);
      CHECK(at.rank == dst.Rank(dst.row_proc[i], dst.col_proc[j]));
      CHECK(at.row == dst.row_local[i] && at.col == dst.col_local[j]);
    }
  }

  // Coverage: pieces stay inside both local matrices, each source element
  // lands on the destination slot of the same global element, exactly once.
  std::vector<uint8_t> covered(m * n, 0);
  for (int32_t s = 0; s < ranks; ++s) {
    for (int32_t d = 0; d < ranks; ++d) {
      const auto& pieces = plan.Between(s, d);
      for (const Piece& p : pieces) {
        CHECK(p.rows >= 1 && p.cols >= 1);
        CHECK(p.src_row >= 0 && p.src_row + p.rows <= src.Rows(s));
        CHECK(p.src_col >= 0 && p.src_col + p.cols <= src.Cols(s));
        CHECK(p.dst_row >= 0 && p.dst_row + p.rows <= dst.Rows(d));
        CHECK(p.dst_col >= 0 && p.dst_col + p.cols <= dst.Cols(d));
        const auto& src_rows = src.row_global[src.RowOf(s)];
        const auto& src_cols = src.col_global[src.ColOf(s)];
        const auto& dst_rows = dst.row_global[dst.RowOf(d)];
        const auto& dst_cols = dst.col_global[dst.ColOf(d)];
        for (int64_t c = 0; c < p.cols; ++c) {
          const int64_t j = src_cols[p.src_col + c];
          CHECK(dst_cols[p.dst_col + c] == j);
          for (int64_t r = 0; r < p.rows; ++r) {
            const int64_t i = src_rows[p.src_row + r];
            CHECK(dst_rows[p.dst_row + r] == i);
            CHECK(++covered[i * n + j] == 1);
          }
        }
      }
      CheckMaximal(pieces);
    }
  }
  for (uint8_t c : covered) CHECK(c == 1);

  // Piece count: the pieces of a pair are its row runs times its column
  // runs, and each axis is cut into at most AxisChunkBound runs, merging
  // only lowering that. For JAX -> cyclic the bound is
  // (ceil(M/MB) + P_r - 1) (ceil(N/NB) + P_c - 1), since a JAX side has at
  // most P_r blocks per axis.
  const int64_t bound = AxisChunkBound(m, src.layout, dst.layout, true) *
                        AxisChunkBound(n, src.layout, dst.layout, false);
  CHECK(plan.PieceCount() <= bound);
  if (src_side.jax && !dst_side.jax) {
    CHECK(plan.PieceCount() <= (CeilDiv(m, dst.layout.mb) + src.grid.rows - 1) *
                                   (CeilDiv(n, dst.layout.nb) + src.grid.cols - 1));
  }

  // Execution on encoded buffers.
  Buffers from = Allocate(src, sizeof(T));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int32_t rank = src.Rank(src.row_proc[i], src.col_proc[j]);
      const T value = Encode<T>(i * n + j);
      std::memcpy(
          from[rank].data() + src.Offset(rank, src.row_local[i], src.col_local[j]) * sizeof(T),
          &value, sizeof(T));
    }
  }
  Buffers to = Allocate(dst, sizeof(T));
  std::vector<const char*> from_ptrs;
  std::vector<char*> to_ptrs;
  for (int32_t r = 0; r < ranks; ++r) {
    from_ptrs.push_back(from[r].empty() ? nullptr : from[r].data());
    to_ptrs.push_back(to[r].empty() ? nullptr : to[r].data());
  }
  CHECK(jaxmg::layout::ExecuteOnHost(plan, from_ptrs, to_ptrs, sizeof(T)).ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) CHECK(Holds<T>(to, dst, i, j));
  }
  // Padding below ld stays untouched: exactly m * n elements were written.
  int64_t written = 0;
  for (const auto& buffer : to) {
    for (size_t k = 0; k < buffer.size(); k += sizeof(T)) {
      written += std::any_of(buffer.begin() + k, buffer.begin() + k + sizeof(T),
                             [](char b) { return static_cast<unsigned char>(b) != kSentinel; });
    }
  }
  CHECK(written == m * n);

  // The inverse plan brings back the source buffers exactly.
  const RedistributionPlan inverse = plan.Inverse();
  CHECK(inverse.PieceCount() == plan.PieceCount());
  Buffers back = Allocate(src, sizeof(T));
  std::vector<const char*> to_const(to_ptrs.begin(), to_ptrs.end());
  std::vector<char*> back_ptrs;
  for (auto& b : back) back_ptrs.push_back(b.empty() ? nullptr : b.data());
  CHECK(jaxmg::layout::ExecuteOnHost(inverse, to_const, back_ptrs, sizeof(T)).ok());
  CHECK(back == from);
}

const ProcessGrid kGrids[] = {{1, 1}, {1, 4}, {4, 1}, {2, 3}, {3, 2}, {8, 1}, {2, 4}, {4, 2}};
const int64_t kBlocks[] = {1, 3, 16, 64};

struct Stats {
  int cases = 0;
  int64_t elements = 0;
};

// Every listed grid, block size, grid order and source storage on edge sizes:
// single elements, sizes under one block, exact and off-by-one multiples.
void EdgeSweep(Stats* stats) {
  const int64_t sizes[] = {1, 2, 13, 64, 65};
  for (const ProcessGrid& shape : kGrids) {
    for (int64_t mb : kBlocks) {
      for (int64_t nb : kBlocks) {
        for (GridOrder go : {GridOrder::kRowMajor, GridOrder::kColumnMajor}) {
          for (StorageOrder so : {StorageOrder::kColumnMajor, StorageOrder::kRowMajor}) {
            const ProcessGrid grid{shape.rows, shape.cols, go};
            Side jax{true, 0, 0, grid, so, -1};
            Side cyclic{false, mb, nb, grid, StorageOrder::kColumnMajor, -1};
            for (int64_t m : sizes) {
              for (int64_t n : sizes) {
                CheckCase<uint64_t>(m, n, jax, cyclic);
                ++stats->cases;
                stats->elements += m * n;
              }
            }
          }
        }
      }
    }
  }
}

// Random shapes up to 300 (primes among them), padded leading dimensions,
// both grid orders on each side, regridding (e.g. JAX 1 x 8 -> cyclic 2 x 4),
// cyclic -> cyclic reblocking and several element sizes.
void RandomSweep(Stats* stats) {
  std::mt19937_64 rng(20240611);
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t primes[] = {1, 2, 3, 5, 7, 61, 127, 211, 251, 293};
  const int kCases = 500;
  for (int k = 0; k < kCases; ++k) {
    const int64_t m = pick(0, 3) == 0 ? primes[pick(0, 9)] : pick(1, 300);
    const int64_t n = pick(0, 3) == 0 ? primes[pick(0, 9)] : pick(1, 300);
    const ProcessGrid src_shape = kGrids[pick(0, 7)];
    ProcessGrid dst_shape = src_shape;
    if (pick(0, 3) == 0) {
      // Another grid with the same number of ranks.
      const int32_t size = src_shape.size();
      std::vector<ProcessGrid> same;
      for (int32_t r = 1; r <= size; ++r) {
        if (size % r == 0) same.push_back({r, size / r});
      }
      dst_shape = same[pick(0, static_cast<int64_t>(same.size()) - 1)];
    }
    auto random_block = [&]() { return pick(0, 1) ? kBlocks[pick(0, 3)] : pick(1, 80); };
    auto random_order = [&]() { return pick(0, 1) ? GridOrder::kRowMajor : GridOrder::kColumnMajor; };
    auto random_storage = [&]() {
      return pick(0, 1) ? StorageOrder::kRowMajor : StorageOrder::kColumnMajor;
    };
    Side src{pick(0, 4) != 0, random_block(), random_block(),
             {src_shape.rows, src_shape.cols, random_order()}, random_storage(),
             pick(0, 1) ? -1 : pick(0, 5)};
    Side dst{false, random_block(), random_block(),
             {dst_shape.rows, dst_shape.cols, random_order()},
             pick(0, 4) ? StorageOrder::kColumnMajor : StorageOrder::kRowMajor,
             pick(0, 1) ? -1 : pick(0, 5)};
    // Element sizes of float, double / complex64 and complex128.
    switch (pick(0, 3)) {
      case 0:
        CheckCase<uint32_t>(m, n, src, dst);
        break;
      case 1:
        CheckCase<std::array<uint64_t, 2>>(m, n, src, dst);
        break;
      default:
        CheckCase<uint64_t>(m, n, src, dst);
    }
    ++stats->cases;
    stats->elements += m * n;
  }
}

}  // namespace

int main() {
  CheckNumRoc();
  CheckGrid();
  CheckValidation();
  CheckHandExamples();
  Stats stats;
  EdgeSweep(&stats);
  RandomSweep(&stats);
  std::printf("block_cyclic_2d_test: %d layouts, %lld elements passed\n", stats.cases,
              static_cast<long long>(stats.elements));
  return 0;
}
