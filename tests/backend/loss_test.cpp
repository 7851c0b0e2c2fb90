// Softmax cross-entropy of the CPU backend: uniform logits give log(vocab) per token, dlogits
// against central finite differences of the loss, ignored targets (< 0), aliasing of dlogits and
// logits, invariance to a large common logit shift (stability), and the target range check.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::expect_grad_near;
using octet::test::numeric_grad;
using octet::test::randn;

namespace {

constexpr int64_t N = 4, V = 11;

TEST(CrossEntropy, UniformLogitsGiveLogVocabPerToken) {
  auto be = make_cpu_backend();
  std::vector<float> z(N * V, 0.75f), dz(z.size());
  std::vector<int32_t> y = {0, 3, 10, 5};
  const float scale = 0.5f;
  const double loss = be->cross_entropy(z.data(), y.data(), dz.data(), N, V, scale);
  EXPECT_NEAR(loss, N * std::log(double(V)), 1e-12);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < V; ++j)
      EXPECT_NEAR(dz[i * V + j], scale * (1.0 / V - (j == y[i] ? 1.0 : 0.0)), 1e-7);
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  auto be = make_cpu_backend();
  auto z = randn(N * V, 31, 2.0f);
  std::vector<int32_t> y = {2, -1, 7, 0};  // one ignored token
  std::vector<float> dz(z.size());
  be->cross_entropy(z.data(), y.data(), dz.data(), N, V, 1.0f);
  auto loss = [&](const std::vector<float>& zz) {
    return be->cross_entropy(zz.data(), y.data(), nullptr, N, V, 1.0f);
  };
  expect_grad_near(dz, numeric_grad(loss, z, 1e-2), 1e-4, 1e-6, "cross_entropy dlogits");
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dz[1 * V + j], 0.0f) << "ignored token gets no grad";
}

TEST(CrossEntropy, IgnoredTokensAddNoLoss) {
  auto be = make_cpu_backend();
  auto z = randn(N * V, 32);
  std::vector<int32_t> all = {1, 2, 3, 4}, some = {1, -1, 3, -100};
  std::vector<float> dz(z.size());
  const double l_all = be->cross_entropy(z.data(), all.data(), dz.data(), N, V, 1.0f);
  const double l_some = be->cross_entropy(z.data(), some.data(), dz.data(), N, V, 1.0f);
  const double l0 = be->cross_entropy(z.data(), all.data(), nullptr, 1, V, 1.0f);
  const double l2 = be->cross_entropy(z.data() + 2 * V, all.data() + 2, nullptr, 1, V, 1.0f);
  EXPECT_NEAR(l_some, l0 + l2, 1e-12);
  EXPECT_GT(l_all, l_some);
}

TEST(CrossEntropy, DlogitsMayAliasLogits) {
  auto be = make_cpu_backend();
  auto z = randn(N * V, 33, 3.0f);
  std::vector<int32_t> y = {4, 1, -1, 9};
  std::vector<float> dz(z.size()), inplace = z;
  const double l1 = be->cross_entropy(z.data(), y.data(), dz.data(), N, V, 0.25f);
  const double l2 = be->cross_entropy(inplace.data(), y.data(), inplace.data(), N, V, 0.25f);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(dz, inplace);
}

TEST(CrossEntropy, StableUnderLargeCommonShift) {
  // Logits k/2 and 10000 + k/2 (both exact in FP32) have the same softmax: the same loss and
  // gradient, and nothing overflows.
  auto be = make_cpu_backend();
  std::vector<float> z(N * V), zs(N * V), dz(z.size()), dzs(z.size());
  for (int64_t i = 0; i < N * V; ++i) {
    z[i] = float((i * 7) % 13) * 0.5f;
    zs[i] = 10000.0f + z[i];
  }
  std::vector<int32_t> y = {0, 5, 9, 2};
  const double l = be->cross_entropy(z.data(), y.data(), dz.data(), N, V, 1.0f);
  const double ls = be->cross_entropy(zs.data(), y.data(), dzs.data(), N, V, 1.0f);
  EXPECT_TRUE(std::isfinite(ls));
  EXPECT_NEAR(ls, l, 1e-9 * l);
  for (size_t i = 0; i < dz.size(); ++i) EXPECT_NEAR(dzs[i], dz[i], 1e-7);
}

TEST(CrossEntropy, RejectsTargetBeyondVocab) {
  auto be = make_cpu_backend();
  std::vector<float> z(V, 0.0f);
  std::vector<int32_t> y = {int32_t(V)};
  EXPECT_THROW(be->cross_entropy(z.data(), y.data(), z.data(), 1, V, 1.0f), Error);
}

}  // namespace
