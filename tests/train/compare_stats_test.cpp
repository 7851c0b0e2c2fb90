// tests/train/compare_stats_test.cpp — the statistics of `octet compare --seeds N`
// (src/train/compare_stats.cpp): Welch's t-test against closed forms of Student's t, and the
// grouping of runs into per-arm mean ± std with the test against bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {
namespace {

TEST(WelchTest, TwoByTwoEqualVariancesHasTwoDegreesOfFreedomAndTheClosedFormP) {
  // n = 2 each with equal variances: Welch–Satterthwaite gives dof = 2 exactly, and Student's t
  // with 2 dof has the CDF 1/2 + t / (2 sqrt(2 + t²)), so the two-sided p = 1 − |t| / sqrt(2 + t²).
  const std::vector<double> a{1.0, 3.0}, b{4.0, 6.0};  // means 2 and 5, s² = 2 each
  const WelchTest w = welch_test(a, b);
  const double t = (2.0 - 5.0) / std::sqrt(2.0 / 2 + 2.0 / 2);
  EXPECT_NEAR(w.t, t, 1e-12);
  EXPECT_NEAR(w.dof, 2.0, 1e-12);
  EXPECT_NEAR(w.p, 1.0 - std::fabs(t) / std::sqrt(2.0 + t * t), 1e-12);
  EXPECT_FALSE(w.outside_noise);  // p = 0.225
}

TEST(WelchTest, LargeSamplesApproachTheNormalTest) {
  // Many values: t's distribution tends to N(0, 1), p -> erfc(|t| / sqrt 2).
  std::vector<double> a, b;
  for (int i = 0; i < 4000; ++i) {
    a.push_back(std::sin(0.37 * i));
    b.push_back(0.05 + std::cos(0.91 * i));
  }
  const WelchTest w = welch_test(a, b);
  EXPECT_GT(w.dof, 7000);
  EXPECT_NEAR(w.p, std::erfc(std::fabs(w.t) / std::sqrt(2.0)), 2e-4);
}

TEST(WelchTest, SymmetricDegenerateAndInvalid) {
  const std::vector<double> a{4.9, 5.0, 5.1}, b{4.2, 4.25, 4.3, 4.2};
  const WelchTest ab = welch_test(a, b), ba = welch_test(b, a);
  EXPECT_DOUBLE_EQ(ab.t, -ba.t);
  EXPECT_DOUBLE_EQ(ab.p, ba.p);
  EXPECT_TRUE(ab.outside_noise);
  EXPECT_EQ(welch_test({1, 1}, {1, 1}).p, 1.0);  // no spread, equal means
  EXPECT_EQ(welch_test({1, 1}, {2, 2}).p, 0.0);  // no spread, different means
  EXPECT_TRUE(std::isinf(welch_test({1, 1}, {2, 2}).t));
  EXPECT_THROW(welch_test({1}, {1, 2}), Error);  // one value: no variance
  EXPECT_THROW(welch_test({1, NAN}, {1, 2}), Error);
  EXPECT_THROW(welch_test({1, 2}, {1, 2}, 1.5), Error);
}

CompareRow run(const std::string& arm, uint64_t seed, double val) {
  CompareRow r;
  r.arm = arm, r.seed = seed, r.val_loss = val, r.tokens_per_s = 100.0 * double(seed);
  return r;
}

TEST(CompareArmStats, GroupsBySeedAndTestsAgainstBf16) {
  const std::vector<CompareRow> runs{
      run("bf16", 1, 4.20), run("fp8-stale", 1, 4.90), run("fp8-matched", 1, 4.24),
      run("bf16", 2, 4.25), run("fp8-stale", 2, 4.95), run("fp8-matched", 2, 4.30),
      run("bf16", 3, 4.22), run("fp8-stale", 3, 5.00), run("fp8-matched", 3, NAN)};
  const std::vector<CompareArmStats> s = compare_arm_stats(runs);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].arm, "bf16");
  EXPECT_EQ(s[1].seeds, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_NEAR(s[0].val_mean, (4.20 + 4.25 + 4.22) / 3, 1e-12);
  EXPECT_NEAR(s[1].val_std, 0.05, 1e-12);  // 4.90, 4.95, 5.00
  EXPECT_NEAR(s[1].gap_pct, 100 * (4.95 - s[0].val_mean) / s[0].val_mean, 1e-9);
  EXPECT_NEAR(s[0].tokens_per_s, 200.0, 1e-9);
  EXPECT_FALSE(s[0].tested);  // the baseline itself
  ASSERT_TRUE(s[1].tested);
  EXPECT_TRUE(s[1].vs_bf16.outside_noise);
  // fp8-matched: the stopped run (NaN) is left out of the mean and the test (2 finite values).
  ASSERT_TRUE(s[2].tested);
  EXPECT_NEAR(s[2].val_mean, 4.27, 1e-12);
  EXPECT_DOUBLE_EQ(s[2].vs_bf16.t, welch_test({4.24, 4.30}, {4.20, 4.25, 4.22}).t);
  EXPECT_NE(format_compare_seeds_table(s).find("outside noise"), std::string::npos);
}

// The row residual over the seeds: the max of the measured ones; a run that did not measure it
// (NaN: cuDNN's SDPA, layer diagnostics off) makes the arm's NaN ("n/a" in the table), never the
// other runs' max and never 0.
TEST(CompareArmStats, RowResidualNotMeasuredStaysNotMeasured) {
  std::vector<CompareRow> runs{run("bf16", 1, 4.2), run("bf16", 2, 4.3), run("fp8-matched", 1, 4.2),
                               run("fp8-matched", 2, 4.3)};
  runs[0].row_residual_max = runs[0].row_residual_mean = NAN;  // bf16 on CUDA: cuDNN
  runs[1].row_residual_max = runs[1].row_residual_mean = NAN;
  runs[2].row_residual_max = 3e-8, runs[2].row_residual_mean = 1e-8;
  runs[3].row_residual_max = 5e-8, runs[3].row_residual_mean = 2e-8;
  for (CompareRow& r : runs) r.matched_delta = r.arm == "fp8-matched";
  const std::vector<CompareArmStats> s = compare_arm_stats(runs);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(std::isnan(s[0].row_residual_max) && std::isnan(s[0].row_residual_mean));
  EXPECT_DOUBLE_EQ(s[1].row_residual_max, 5e-8);
  EXPECT_DOUBLE_EQ(s[1].row_residual_mean, 2e-8);
  const std::string table = format_compare_seeds_table(s);
  EXPECT_EQ(table.find("nan"), std::string::npos) << table;
  EXPECT_NE(table.find("5.000e-08"), std::string::npos) << table;
  runs[3].row_residual_max = NAN;  // one matched seed not measured: the arm's max is not known
  EXPECT_TRUE(std::isnan(compare_arm_stats(runs)[1].row_residual_max));
}

}  // namespace
}  // namespace octet
