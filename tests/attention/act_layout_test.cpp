// The address rule of the CUDA attention kernels (src/cuda/attention/act_layout.h), checked on the
// host: act_row_offset (and act_row_offset_bh, from b and h) places every (b, h, t) row of [B, heads, T, D]
// at the offset of [B, heads, T, D] (heads-major) or [B, T, heads, D] (tokens-major), rows never overlapping,
// and act_stat_row maps the row found at each memory position back to its (b·heads + h)·T + t.
#include "cuda/attention/act_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace octet::cuda {
namespace {

TEST(ActLayout, RowOffsetsAndTheirInverseInBothLayouts) {
  const int64_t B = 2, H = 3, T = 5, D = 4;
  for (bool tm : {false, true}) {
    std::vector<int> seen(size_t(B * H * T), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t bh = b * H + h, at = act_row_offset(tm, bh, t, H, T, D);
          const int64_t want = tm ? ((b * T + t) * H + h) * D : ((b * H + h) * T + t) * D;
          ASSERT_EQ(at, want) << "tokens_major " << tm << " b " << b << " h " << h << " t " << t;
          ASSERT_EQ(act_row_offset_bh(tm, b, h, t, H, T, D), want) << "tokens_major " << tm;
          ASSERT_EQ(act_stat_row(tm, at / D, H, T), bh * T + t) << "tokens_major " << tm;
          ++seen[size_t(at / D)];
        }
    for (int n : seen) EXPECT_EQ(n, 1) << "tokens_major " << tm << ": rows overlap or are missed";
  }
}

}  // namespace
}  // namespace octet::cuda
