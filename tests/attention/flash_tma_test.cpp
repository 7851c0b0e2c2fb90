// Walks the TMA boxes of cuda/attention/flash/flash_tma.h element by element, as the PTX ISA
// (§9.7.9.25, cp.async.bulk.tensor) says a tiled copy lands a box: shared-memory order is the
// box's dimensions innermost first, element (c + e) of the tensor at byte Σ (c_i + e_i)·stride_i,
// zero where a coordinate passes its dimension. The Hopper flash kernels' operand layouts follow.
#include "cuda/attention/flash/flash_tma.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace octet::cuda::flash {
namespace {

// The box at coordinates c: for every shared-memory byte, the tensor byte it holds (−1: zero).
std::vector<int64_t> walk(const TmaTiles& t, const std::vector<int64_t>& c) {
  std::vector<int64_t> out;
  std::vector<int64_t> e(size_t(t.rank), 0);
  for (;;) {
    int64_t off = 0;
    bool in = true;
    for (int i = 0; i < t.rank; ++i) {
      const int64_t g = c[size_t(i)] + e[size_t(i)];
      in = in && g < int64_t(t.dims[i]);
      off += g * (i == 0 ? 1 : int64_t(t.strides[i - 1]));
    }
    out.push_back(in ? off : -1);
    int i = 0;
    while (i < t.rank && ++e[size_t(i)] == int64_t(t.box[i])) e[size_t(i++)] = 0;
    if (i == t.rank) return out;
  }
}

// flash_mma_sm89.cuh's s_key: the query (key) of n-tile nt, column n in the accumulator order.
int s_key(int nt, int n) { return 32 * (nt / 4) + 16 * ((nt / 2) % 2) + 4 * (n / 2) + 2 * (nt % 2) + n % 2; }

TEST(FlashTma, PermutedRowsLandInTheAccumulatorsColumnOrder) {
  for (const int d : {64, 128}) {
    const int64_t total = 2 * 128 + 48;  // rows of all batches; the last box runs past the end
    const TmaTiles t = permuted_row_tiles(d, total, 128);
    ASSERT_EQ(t.rank, 5);
    for (const int64_t first : {int64_t(0), int64_t(128), int64_t(256)}) {
      const std::vector<int64_t> box = walk(t, {0, 0, 0, 0, first / 16});
      ASSERT_EQ(box.size(), size_t(128 * d));
      for (int r = 0; r < 128; ++r) {
        const int64_t row = first + s_key(r / 8, r % 8);
        for (int b = 0; b < d; ++b)
          ASSERT_EQ(box[size_t(r * d + b)], row < total ? row * d + b : -1) << "d " << d << " row " << r;
      }
    }
  }
}

TEST(FlashTma, RowTilesStayInOneBatchAndZeroPastItsRows) {
  const int64_t d = 64, rows = 200, batches = 3;
  const TmaTiles t = row_tiles(d, rows, batches, 128);
  const std::vector<int64_t> box = walk(t, {0, 128, 1});
  ASSERT_EQ(box.size(), size_t(128 * d));
  for (int r = 0; r < 128; ++r)
    for (int b = 0; b < d; ++b) {
      const int64_t row = 128 + r;
      ASSERT_EQ(box[size_t(r * d + b)], row < rows ? (1 * rows + row) * d + b : -1) << r;
    }
}

TEST(FlashTma, ColumnTilesLandTransposedAndZeroPastTheColumns) {
  const int64_t cols = 208, d = 128, batches = 2;
  const TmaTiles t = column_tiles(cols, d, batches, 128);
  const std::vector<int64_t> box = walk(t, {128, 0, 1});
  ASSERT_EQ(box.size(), size_t(d * 128));
  for (int r = 0; r < d; ++r)
    for (int c = 0; c < 128; ++c) {
      const int64_t col = 128 + c;
      ASSERT_EQ(box[size_t(r * 128 + c)], col < cols ? (1 * d + r) * cols + col : -1) << r << " " << c;
    }
}

// The group transposes (Q̂ᵀ, (dO/l)~ᵀ): a box of 64 queries of head r = 1 of KV head 1 lands as
// [d][64], element (row = 1·d + dd, r, i) at (row·rep + r)·T_p + i; queries past T_p are zero.
TEST(FlashTma, GroupTransposeBoxesHoldOneHeadsQueriesOfOneKvHead) {
  const int64_t T_p = 208, rep = 3, d = 64, kv_heads = 2;
  const TmaTiles t = group_transpose_tiles(T_p, rep, kv_heads * d, d, 64);
  const std::vector<int64_t> box = walk(t, {192, 1, d});
  ASSERT_EQ(box.size(), size_t(d * 64));
  for (int dd = 0; dd < d; ++dd)
    for (int c = 0; c < 64; ++c) {
      const int64_t i = 192 + c;
      ASSERT_EQ(box[size_t(dd * 64 + c)], i < T_p ? ((d + dd) * rep + 1) * T_p + i : -1) << dd << " " << c;
    }
}

}  // namespace
}  // namespace octet::cuda::flash
