// The CPU backend's threads (src/cpu/parallel.h): one process uses this machine's cores by default
// (OCTET_NUM_THREADS overrides it), parallel_for runs every item exactly once and passes an error on,
// and the attention forward and backward, whose heads run on those threads, give the same bits with
// one thread as with several (GQA: the query heads of one KV head add to its dK, dV in order).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "attention_test_util.h"
#include "cpu/parallel.h"

namespace octet {
namespace {

// Restores the thread count a test changed.
struct ThreadCount {
  int saved = cpu::cpu_threads();
  explicit ThreadCount(int n) { cpu::set_cpu_threads(n); }
  ~ThreadCount() { cpu::set_cpu_threads(saved); }
};

TEST(CpuThreads, DefaultIsTheMachinesCores) {
  if (std::getenv("OCTET_NUM_THREADS") || std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    GTEST_SKIP() << "the count is set by the environment";
  EXPECT_EQ(cpu::cpu_threads(), int(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(CpuThreads, ParallelForRunsEachItemOnceNestsSeriallyAndRethrows) {
  ThreadCount four(4);
  std::vector<std::atomic<int>> hits(1000);
  cpu::parallel_for(1000, [&](int64_t i) {
    hits[size_t(i)]++;
    cpu::parallel_for(3, [&](int64_t) {});  // nested: serial, no deadlock
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  cpu::parallel_for(0, [](int64_t) { FAIL() << "no items"; });
  EXPECT_THROW(cpu::parallel_for(100,
                                 [](int64_t i) {
                                   if (i == 37) throw std::runtime_error("item 37");
                                 }),
               std::runtime_error);
}

TEST(CpuThreads, AttentionIsBitwiseTheSameOnOneAndSeveralThreads) {
  for (const DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale})
    for (const AttnPrecision prec : {AttnPrecision::FP8, AttnPrecision::BF16}) {
      const AttentionShape s = test::make_shape(3, 4, 2, 40, 40, 16, true);  // GQA: 2 query heads per KV head
      const AttentionConfig c = test::make_config(prec, AttnForm::Whole, delta);
      const AttentionInputs in = make_attention_inputs(s, AttnInputDist::Normal, 7);
      test::RunResult one, many;
      {
        ThreadCount t(1);
        one = test::run_attention(s, c, in);
      }
      {
        ThreadCount t(3);
        many = test::run_attention(s, c, in);
      }
      EXPECT_EQ(one.o, many.o);
      EXPECT_EQ(one.lse, many.lse);
      EXPECT_EQ(one.dq, many.dq);
      EXPECT_EQ(one.dk, many.dk);
      EXPECT_EQ(one.dv, many.dv);
    }
}

}  // namespace
}  // namespace octet
