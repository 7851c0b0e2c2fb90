// The gradient buckets' plan (octet/dist.h BucketPlan, docs/distributed.md §"Gradient buckets"): buckets tile
// the parameters in order; every bucket but the top one splits over the ranks without padding; the
// ranks' shards cover every parameter exactly once, each at its own state slot; no bucket size means
// one bucket, whose shards are the contiguous ranges [r·S, (r+1)·S) of ZeRO-1 without buckets.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "octet/dist.h"
#include "octet/error.h"

using namespace octet;

namespace {

TEST(Buckets, TileTheParametersAndShardsCoverEachOnce) {
  for (int world : {1, 2, 3, 8})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(1001), int64_t(6225)})
      for (int64_t elems : {int64_t(0), int64_t(1), int64_t(5), int64_t(262), int64_t(1) << 30}) {
        const BucketPlan p = plan_buckets(n, world, elems);
        const std::string at =
            "world " + std::to_string(world) + " n " + std::to_string(n) + " elems " + std::to_string(elems);
        int64_t next = 0, state = 0;
        for (size_t k = 0; k < p.buckets.size(); ++k) {
          const Bucket& b = p.buckets[k];
          EXPECT_EQ(b.begin, next) << at;
          EXPECT_GT(b.end, b.begin) << at;
          EXPECT_EQ(b.chunk, (b.end - b.begin + world - 1) / world) << at;
          EXPECT_EQ(b.state, state) << at;
          if (k + 1 < p.buckets.size()) {
            EXPECT_FALSE(b.padded(world)) << at << " bucket " << k;  // only the top one may pad
            EXPECT_GE(b.end - b.begin, elems) << at;
            EXPECT_LT(b.end - b.begin, elems + world) << at;  // elems rounded up to world's multiple
          }
          next = b.end;
          state += b.chunk;
        }
        EXPECT_EQ(next, n) << at;
        EXPECT_EQ(p.state_size, state) << at;
        if (elems == 0 || elems >= n) {
          EXPECT_EQ(p.buckets.size(), 1u) << at;
        }
        std::vector<int> owners(size_t(n), 0);
        std::vector<int> slot_used(size_t(p.state_size), 0);
        for (int r = 0; r < world; ++r) {
          const ShardLayout s = p.shard(r);
          EXPECT_EQ(s.state_size, p.state_size);
          for (const ShardPiece& piece : s.pieces) {
            for (int64_t i = piece.begin; i < piece.end; ++i) owners[size_t(i)] += 1;
            for (int64_t i = 0; i < piece.size(); ++i) slot_used[size_t(piece.state + i)] += 1;
          }
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(owners[size_t(i)], 1) << at << " parameter " << i;
        for (int c : slot_used) ASSERT_LE(c, world) << at;  // a slot per rank at most
      }
}

TEST(Buckets, NoBucketSizeIsTheContiguousZero1Layout) {
  for (int world : {2, 3})
    for (int64_t n : {int64_t(7), int64_t(1001)}) {
      const BucketPlan p = plan_buckets(n, world, 0);
      const int64_t S = (n + world - 1) / world;
      for (int r = 0; r < world; ++r) {
        const ShardLayout s = p.shard(r);
        const int64_t lo = std::min(n, r * S), hi = std::min(n, (r + 1) * S);
        ASSERT_EQ(s.pieces.size(), hi > lo ? 1u : 0u);
        if (hi > lo) {
          EXPECT_EQ(s.pieces[0].begin, lo);
          EXPECT_EQ(s.pieces[0].end, hi);
          EXPECT_EQ(s.pieces[0].state, 0);
        }
      }
    }
}

TEST(Buckets, MiBAndTheirErrors) {
  EXPECT_EQ(bucket_elems_from_mb(0), 0);
  EXPECT_EQ(bucket_elems_from_mb(25), 25 * (1 << 20) / 4);
  EXPECT_EQ(bucket_elems_from_mb(1.0 / 1024), 256);  // the floor: 1 KiB of FP32 gradients
  for (double bad : {-1.0, double(NAN), double(INFINITY), 2e6, 1e-9, 0.5 / 1024}) {
    try {
      bucket_elems_from_mb(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dist.bucket_mb"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(plan_buckets(-1, 2, 0), Error);
  EXPECT_THROW(plan_buckets(10, 0, 0), Error);
  EXPECT_THROW(plan_buckets(10, 2, 4).shard(2), Error);
}

}  // namespace
