// `octet bench comm` on CPU ranks (octet/bench.h bench_comm; the CI smoke test of the GPU
// benchmark): as one process and by ctest under `mpirun -np 2` — one row per op and size, sizes
// doubling and divisible over the ranks, the bus bandwidth nccl-tests' factor times the algorithm
// bandwidth, the same time on every rank (the slowest's); and the CLI with --nproc 2 end to end.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "job.h"
#include "shell_run.h"
#include "octet/bench.h"
#include "octet/error.h"

using namespace octet;
using test::comm;
using test::cpu;

namespace {

TEST(BenchComm, RowsFollowNcclTestsDefinitions) {
  const int n = comm().size();
  CommBenchOptions o;
  o.min_bytes = 64 << 10;
  o.max_bytes = 256 << 10;
  o.warmup = 1;
  o.reps = 2;
  std::vector<CommBenchRow> rows;
  bench_comm(comm(), cpu(), o, [&](const CommBenchRow& r) { rows.push_back(r); });
  ASSERT_EQ(rows.size(), 9u);  // 3 ops x 64, 128, 256 KiB
  for (size_t i = 0; i < rows.size(); ++i) {
    const CommBenchRow& r = rows[i];
    EXPECT_EQ(r.op, o.ops[i / 3]);
    EXPECT_EQ(r.ranks, n);
    EXPECT_EQ(r.bytes, (int64_t(64 << 10) << (i % 3)) / (4 * n) * (4 * n)) << i;
    EXPECT_GT(r.ms, 0) << i;
    EXPECT_NEAR(r.algbw_gbs, double(r.bytes) / (r.ms * 1e6), 1e-9 * r.algbw_gbs);
    const double factor = r.op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
    EXPECT_NEAR(r.busbw_gbs, r.algbw_gbs * factor, 1e-9 * r.algbw_gbs);
    double lo = r.ms, hi = r.ms;  // every rank reports the slowest rank's time
    comm().all_reduce(Tensor(&hi, DType::F64, {1}), ReduceOp::Max);
    lo = -lo;
    comm().all_reduce(Tensor(&lo, DType::F64, {1}), ReduceOp::Max);
    EXPECT_EQ(-lo, hi) << i;
  }
  o.ops = {"broadcast"};
  EXPECT_THROW(bench_comm(comm(), cpu(), o, [](const CommBenchRow&) {}), Error);
}

TEST(BenchComm, CliWithTwoRanksPrintsJsonLinesOnce) {
  if (comm().size() > 1 || std::getenv("OCTET_TEST_FAILURE_CHILD")) GTEST_SKIP() << "one process";
  const test::ShellRun r =
      test::run_shell("timeout 300 " + std::string(OCTET_BINARY_DIR) +
                      "/octet bench comm --device cpu --nproc 2 --min-mb 0.25 --max-mb 0.5 --reps 1 --json");
  const std::string& out = r.out;
  ASSERT_EQ(r.status, 0) << out;
  size_t lines = 0;
  for (size_t pos = 0; (pos = out.find("\"bench\":\"comm\"", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, 6u) << "3 ops x 2 sizes, printed by rank 0 only:\n" << out;
  for (const char* field :
       {"\"transport\":\"mpi\"", "\"ranks\":2", "\"busbw_gbs\":", "\"date\":", "\"gpu\":"})
    EXPECT_NE(out.find(field), std::string::npos) << field << "\n" << out;
}

}  // namespace
