// The persistent wgmma forward's work order (cuda/attention/flash/flash_persistent.h) on the host:
// over every grid and item count tried, each work item is visited exactly once, each CTA's items
// rise (so its first −1 ends its walk), and the snake hands CTA 0 the longest item of even rounds
// and the shortest of odd ones.
#include "cuda/attention/flash/flash_persistent.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace octet::cuda::flash {
namespace {

TEST(PersistentItems, EveryItemOnceAndRising) {
  for (unsigned grid : {1u, 2u, 3u, 7u, 64u, 132u, 200u})
    for (int64_t n :
         {int64_t(1), int64_t(2), int64_t(131), int64_t(132), int64_t(133), int64_t(1000), int64_t(2048)}) {
      std::vector<int> seen(size_t(n), 0);
      for (unsigned cta = 0; cta < grid; ++cta) {
        int64_t last = -1;
        for (int it = 0;; ++it) {
          const int64_t w = persistent_item(it, cta, grid, n);
          if (w < 0) {
            // nothing after the first −1 either
            ASSERT_LT(persistent_item(it + 1, cta, grid, n), 0) << grid << " " << n << " " << cta;
            break;
          }
          ASSERT_GT(w, last) << "grid " << grid << " items " << n << " cta " << cta;
          last = w;
          ++seen[size_t(w)];
        }
      }
      for (int64_t w = 0; w < n; ++w)
        ASSERT_EQ(seen[size_t(w)], 1) << "grid " << grid << " items " << n << " item " << w;
    }
}

TEST(PersistentItems, SnakeOrder) {
  EXPECT_EQ(persistent_item(0, 0, 4, 100), 0);
  EXPECT_EQ(persistent_item(1, 0, 4, 100), 7);  // odd round: reversed
  EXPECT_EQ(persistent_item(1, 3, 4, 100), 4);
  EXPECT_EQ(persistent_item(2, 1, 4, 100), 9);
  EXPECT_EQ(persistent_item(1, 0, 4, 7), -1);  // item 7 does not exist
}

}  // namespace
}  // namespace octet::cuda::flash
