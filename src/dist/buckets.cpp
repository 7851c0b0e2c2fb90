// src/dist/buckets.cpp — the gradient buckets of ZeRO-1 (octet/dist.h BucketPlan): where the flat
// parameter vector is cut into buckets that are reduce-scattered while the backward runs, and which
// part of each bucket a rank owns. Every bucket is split evenly over the ranks (as one reduce-scatter
// leaves it), so a rank's shard is the union of its part of every bucket (docs/distributed.md
// §"Gradient buckets"; PyTorch DDP's bucket_cap_mb is the same knob, in MiB).
#include <cmath>
#include <cstdio>
#include <string>

#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

int64_t bucket_elems_from_mb(double bucket_mb) {
  // A floor of 1 KiB (256 FP32 gradients): smaller buckets only add collective calls (1e-9 MiB gave
  // buckets of 2 floats and 0.5 % of the tokens/s).
  char got[32];
  std::snprintf(got, sizeof got, "%g", bucket_mb);
  OCTET_CHECK(
      std::isfinite(bucket_mb) && (bucket_mb == 0 || (bucket_mb >= 1.0 / 1024 && bucket_mb <= 1 << 20)),
      std::string(
          "dist.bucket_mb must be 0 (one bucket after the backward) or in [1/1024, 1048576] MiB, got ") +
          got);
  if (bucket_mb == 0) return 0;
  return std::max<int64_t>(1, int64_t(std::llround(bucket_mb * double(1 << 20) / sizeof(float))));
}

BucketPlan plan_buckets(int64_t n, int world, int64_t bucket_elems) {
  OCTET_CHECK(n >= 0 && world >= 1 && bucket_elems >= 0,
              "plan_buckets: need n >= 0, world >= 1 and bucket_elems >= 0, got n " + std::to_string(n) +
                  ", world " + std::to_string(world) + ", bucket_elems " + std::to_string(bucket_elems));
  BucketPlan p;
  p.world = world;
  // E: a multiple of world (full buckets split without padding); 0 or >= n: one bucket
  int64_t e = (std::max<int64_t>(bucket_elems, 1) + world - 1) / world * world;
  if (bucket_elems == 0 || e >= n) e = std::max<int64_t>(n, 1);
  for (int64_t begin = 0; begin < n || (n == 0 && p.buckets.empty()); begin += e) {
    Bucket b;
    b.begin = begin;
    b.end = std::min(n, begin + e);
    b.chunk = (b.end - b.begin + world - 1) / world;
    b.state = p.state_size;
    p.state_size += b.chunk;
    p.buckets.push_back(b);
  }
  return p;
}

ShardLayout BucketPlan::shard(int rank) const {
  OCTET_CHECK(rank >= 0 && rank < world, "BucketPlan::shard: rank " + std::to_string(rank) + " outside [0, " +
                                             std::to_string(world) + ")");
  ShardLayout s;
  s.state_size = state_size;
  for (const Bucket& b : buckets) {
    const int64_t lo = std::min(b.end, b.begin + rank * b.chunk);
    const int64_t hi = std::min(b.end, lo + b.chunk);
    if (hi > lo) s.pieces.push_back(ShardPiece{lo, hi, b.state});
  }
  return s;
}

}  // namespace octet
