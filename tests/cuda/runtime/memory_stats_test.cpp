// The CUDA backend's memory counters (src/cuda/runtime/cuda_backend.h MemoryStats, memory_stats.cpp) and
// the peak memory of `octet bench train` rows (octet/bench.h peak_mem_gib, device_mem_gib):
//  - a 256 MiB allocation moves the pool's in-use bytes by 256 MiB and its high-water mark with
//    it; freeing it lowers the in-use bytes but not the mark; reset_memory_stats() restarts the mark
//    at the bytes in use and returns the freed memory to the device (cudaMemGetInfo sees it);
//  - a bench row's peak is at least the 16 bytes per parameter of FP32 weights, gradients and the
//    two AdamW moments, at most the device's used memory, and restarts per row: a tiny model
//    measured after GPT-2 medium reports far less than the medium one.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "cuda/runtime/cuda_backend.h"
#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/bench.h"

namespace octet {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(CudaMemoryStats, PoolCountersFollowAllocations) {
  OCTET_REQUIRE_GPU();
  auto be = make_cuda_backend();
  auto& cuda = dynamic_cast<cuda::CudaBackend&>(*be);
  cuda.reset_memory_stats();
  const cuda::MemoryStats s0 = cuda.memory_stats();
  EXPECT_EQ(s0.pool_used_peak, s0.pool_used) << "reset: the mark restarts at the bytes in use";
  EXPECT_GT(s0.device_total, 0u);
  {
    Buffer big = be->alloc(DType::F32, {int64_t(64 * kMiB)});  // 256 MiB
    const cuda::MemoryStats s1 = cuda.memory_stats();
    EXPECT_GE(s1.pool_used, s0.pool_used + 256 * kMiB);
    EXPECT_LE(s1.pool_used, s0.pool_used + 258 * kMiB) << "granularity of at most 2 MiB";
    EXPECT_GE(s1.pool_used_peak, s1.pool_used);
    EXPECT_GE(s1.pool_reserved, s1.pool_used);
    EXPECT_GE(s1.device_used, s1.pool_reserved) << "the device's use includes the pool's";
  }
  const cuda::MemoryStats s2 = cuda.memory_stats();  // freed, still held by the pool
  EXPECT_LT(s2.pool_used + 200 * kMiB, s2.pool_used_peak);
  EXPECT_GE(s2.pool_used_peak, s0.pool_used + 256 * kMiB);
  EXPECT_GE(s2.pool_reserved, s0.pool_used + 256 * kMiB);
  cuda.reset_memory_stats();
  const cuda::MemoryStats s3 = cuda.memory_stats();
  EXPECT_EQ(s3.pool_used_peak, s3.pool_used);
  EXPECT_LT(s3.pool_reserved + 200 * kMiB, s2.pool_reserved) << "trimmed to the device";
  EXPECT_LT(s3.device_used + 200 * kMiB, s2.device_used) << "cudaMemGetInfo sees the trim";
}

TEST(CudaMemoryStats, BenchRowsReportTheirOwnPeak) {
  OCTET_REQUIRE_GPU();
  TrainBenchOptions o;
  o.device = "cuda";
  o.models = {"350m", "tiny"};
  o.arms = {"bf16"};
  o.seq_len = 256;
  o.batch = 2;
  o.warmup = 1;
  o.steps = 1;
  std::vector<TrainBenchRow> rows;
  bench_train(o, [&](const TrainBenchRow& r) { rows.push_back(r); });
  ASSERT_EQ(rows.size(), 2u);
  constexpr double kGiB = double(1ull << 30);
  for (const TrainBenchRow& r : rows) {
    ASSERT_TRUE(r.peak_mem_gib.has_value() && r.device_mem_gib.has_value()) << r.model;
    const double state_gib = 16.0 * double(r.n_params) / kGiB;  // F32 params, grads, m, v
    EXPECT_GE(*r.peak_mem_gib, state_gib) << r.model;
    EXPECT_LE(*r.peak_mem_gib, *r.device_mem_gib) << r.model;
    std::printf("  %-6s params %lld: peak %.3f GiB (state %.3f), device %.3f GiB\n", r.model.c_str(),
                (long long)r.n_params, *r.peak_mem_gib, state_gib, *r.device_mem_gib);
  }
  EXPECT_GT(*rows[0].peak_mem_gib, 5.0) << "350M: 16 B/param alone is 5.3 GiB";
  EXPECT_LT(*rows[1].peak_mem_gib, 1.0) << "the tiny row's peak restarted after the 350M row";
}

}  // namespace
}  // namespace octet
