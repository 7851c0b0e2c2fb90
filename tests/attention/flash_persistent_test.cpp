// The flash kernels' work order (cuda/attention/flash/flash_persistent.h) on the host: over every
// grid and item count tried, the persistent walk visits each work item exactly once, each CTA's
// items rise (so its first −1 ends its walk), and the snake hands CTA 0 the longest item of even
// rounds and the shortest of odd ones; grouped_item maps the items onto (head, block) one to one,
// keeps each group's heads together and each head's blocks in order, and with one group is
// the block-major order; the backward's automatic group follows its rule.
#include "cuda/attention/flash/flash_persistent.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
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

TEST(GroupedItems, OneToOneGroupsTogetherBlocksInOrder) {
  for (int64_t heads : {1, 3, 16, 64})
    for (int64_t blocks : {1, 2, 8, 33})
      for (int64_t group : {-1, 0, 1, 2, 3, 4, 16, 64, 100}) {
        std::vector<int> seen(size_t(heads * blocks), 0);
        std::vector<int64_t> next_block(size_t(heads), 0);
        const int64_t g = group <= 0 || group > heads ? heads : group;
        int64_t last_group = 0;
        for (int64_t w = 0; w < heads * blocks; ++w) {
          const GridItem it = grouped_item(w, heads, blocks, group);
          ASSERT_TRUE(it.head >= 0 && it.head < heads && it.block >= 0 && it.block < blocks)
              << heads << " " << blocks << " " << group << " " << w;
          ++seen[size_t(it.head * blocks + it.block)];
          // each head's blocks come in order 0, 1, 2, ... (block 0 first: the most work when causal)
          ASSERT_EQ(it.block, next_block[size_t(it.head)]++) << heads << " " << blocks << " " << group;
          // the groups come one after the other, never returning to an earlier one
          ASSERT_GE(it.head / g, last_group) << heads << " " << blocks << " " << group << " " << w;
          last_group = it.head / g;
          if (g == heads) {  // one group: the block-major order (head fastest)
            ASSERT_EQ(it.head, w % heads);
            ASSERT_EQ(it.block, w / heads);
          }
        }
        for (int64_t i = 0; i < heads * blocks; ++i) ASSERT_EQ(seen[size_t(i)], 1) << heads << " " << blocks;
      }
}

TEST(GroupedItems, HeadsOfAGroupAlternate) {
  // 5 heads in groups of 2 (the last group one head), 3 blocks each
  const int64_t want[][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}, {2, 0}, {3, 0},
                             {2, 1}, {3, 1}, {2, 2}, {3, 2}, {4, 0}, {4, 1}, {4, 2}};
  for (int64_t w = 0; w < 15; ++w) {
    const GridItem it = grouped_item(w, 5, 3, 2);
    EXPECT_EQ(it.head, want[w][0]) << w;
    EXPECT_EQ(it.block, want[w][1]) << w;
  }
}

// The backward's automatic group: n = the fewest heads whose blocks fill the resident CTAs, the
// largest power of two not above n, or one group (0) when that is every head.
TEST(GroupedItems, AutoKeyHeadGroupIsAPowerOfTwoNearTheFill) {
  for (int64_t heads : {1, 8, 64, 96})
    for (int64_t blocks : {1, 8, 32, 64, 200})
      for (int64_t ctas : {1, 78, 132}) {
        const int64_t g = auto_key_head_group(heads, blocks, ctas);
        const int64_t n = (ctas + blocks - 1) / blocks;
        ::testing::Message at;
        at << heads << " heads " << blocks << " blocks " << ctas << " CTAs";
        ASSERT_GE(g, 0) << at;
        ASSERT_LT(g, heads == 1 ? 1 : heads) << at;  // a whole-grid group is written 0
        if (g > 0) {
          EXPECT_EQ(g & (g - 1), 0) << at << ": not a power of two";
          EXPECT_LE(g, n) << at << ": more heads than fill the CTAs";
          EXPECT_GT(2 * g, n) << at << ": a larger power of two would still not overfill them";
        } else {
          int64_t p2 = 1;
          while (2 * p2 <= n) p2 *= 2;
          EXPECT_GE(p2, heads) << at << ": one group although fewer heads fill the CTAs";
        }
      }
  EXPECT_EQ(auto_key_head_group(64, 32, 132), 4);  // B4 H16 S4096: 5 heads fill 132, so 4
  EXPECT_EQ(auto_key_head_group(96, 8, 132), 16);  // B8 H12 S1024: 17, so 16
  EXPECT_EQ(auto_key_head_group(8, 64, 132), 2);   // B1 G8 S8192: 3, so 2
  EXPECT_EQ(auto_key_head_group(8, 16, 132), 0);   // 9, so 8: every KV head
}

}  // namespace
}  // namespace octet::cuda::flash
