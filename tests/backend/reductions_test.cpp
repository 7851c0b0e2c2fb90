// Reductions of the CPU backend: sum of squares and central moments on small exact cases, and the
// kurtosis of large seeded samples against the population values (Gaussian 3, uniform 1.8) within
// a stated sampling bound.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"

using namespace octet;
using octet::test::randn;
using octet::test::randu;
using octet::test::view;

namespace {

TEST(Reductions, SumSquaresIsExactOnSmallIntegers) {
  auto be = make_cpu_backend();
  std::vector<float> x = {1, -2, 3, -4, 0.5f};
  test::Acc acc;
  be->sum_squares(view(x), acc.t());
  EXPECT_EQ(acc.v[0], 30.25);
  be->sum_squares(view(x).slice(0, 0), acc.t());  // an empty tensor adds 0
  EXPECT_EQ(acc.v[0], 30.25);
  be->sum_squares(view(x).slice(1, 1), acc.t());  // accumulates: + (−2)²
  EXPECT_EQ(acc.v[0], 34.25);
}

TEST(Reductions, MomentsOfASmallSetFromTheDefinition) {
  // {1, 2, 3, 4}: mean 2.5; deviations ±0.5, ±1.5: variance (2·0.25 + 2·2.25)/4 = 1.25;
  // m4 = (2·0.0625 + 2·5.0625)/4 = 2.5625; kurtosis = 2.5625 / 1.25² = 1.64.
  auto be = make_cpu_backend();
  std::vector<float> x = {4, 1, 3, 2};
  auto m = be->moments(view(x));
  EXPECT_DOUBLE_EQ(m.mean, 2.5);
  EXPECT_DOUBLE_EQ(m.variance, 1.25);
  EXPECT_DOUBLE_EQ(m.kurtosis, 1.64);
}

TEST(Reductions, ConstantTensorHasZeroVarianceAndKurtosisZero) {
  auto be = make_cpu_backend();
  std::vector<float> x(100, -3.5f);
  auto m = be->moments(view(x));
  EXPECT_EQ(m.mean, -3.5);
  EXPECT_EQ(m.variance, 0.0);
  EXPECT_EQ(m.kurtosis, 0.0);
}

TEST(Reductions, KurtosisOfLargeSamplesMatchesTheDistribution) {
  // Sample kurtosis has standard error ≈ sqrt(24/n) for a Gaussian (≈ 0.011 at n = 2e5) and less
  // for a uniform; we allow 6 standard errors. Mean and variance within 6 of their standard errors.
  auto be = make_cpu_backend();
  const size_t n = 200000;
  const double se_k = std::sqrt(24.0 / n);
  auto g = randn(n, 41, 2.0f);
  for (auto& v : g) v += 1.0f;  // N(1, 4)
  auto mg = be->moments(view(g));
  EXPECT_NEAR(mg.mean, 1.0, 6 * 2.0 / std::sqrt(double(n)));
  EXPECT_NEAR(mg.variance, 4.0, 6 * 4.0 * std::sqrt(2.0 / n));
  EXPECT_NEAR(mg.kurtosis, 3.0, 6 * se_k);
  auto u = randu(n, 42, -1.0f, 1.0f);
  auto mu = be->moments(view(u));
  EXPECT_NEAR(mu.variance, 1.0 / 3.0, 6 * std::sqrt(4.0 / 45.0 / n));
  EXPECT_NEAR(mu.kurtosis, 1.8, 6 * se_k);
}

TEST(Reductions, HeavyTailRaisesKurtosis) {
  // A Gaussian with 0.1% of entries replaced by 50σ outliers: the FOG warning signal.
  auto be = make_cpu_backend();
  auto x = randn(100000, 43);
  for (size_t i = 0; i < x.size(); i += 1000) x[i] = 50.0f;
  EXPECT_GT(be->moments(view(x)).kurtosis, 100.0);
}

}  // namespace
