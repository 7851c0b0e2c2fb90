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
using octet::test::view;

namespace {

constexpr int64_t N = 4, V = 11;

// Summed loss of logit rows [first, first + n) of z (V columns) with targets y[first...]; the
// gradient goes to *dz if given (else to a scratch). The loss comes from an F64 accumulator.
double xent(Backend& be, const std::vector<float>& z, const std::vector<int32_t>& y, std::vector<float>* dz,
            float scale, int64_t first = 0, int64_t n = N) {
  std::vector<float> scratch(size_t(n * V));
  float* d = dz ? dz->data() + first * V : scratch.data();
  test::Acc acc;
  be.cross_entropy(view(z, {int64_t(z.size()) / V, V}).slice(first, n), test::ids(y).slice(first, n),
                   Tensor(d, DType::F32, {n, V}), scale, acc.t());
  return acc.v[0];
}

TEST(CrossEntropy, UniformLogitsGiveLogVocabPerToken) {
  auto be = make_cpu_backend();
  std::vector<float> z(N * V, 0.75f), dz(z.size());
  std::vector<int32_t> y = {0, 3, 10, 5};
  const float scale = 0.5f;
  const double loss = xent(*be, z, y, &dz, scale);
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
  xent(*be, z, y, &dz, 1.0f);
  auto loss = [&](const std::vector<float>& zz) { return xent(*be, zz, y, nullptr, 1.0f); };
  expect_grad_near(dz, numeric_grad(loss, z, 1e-2), 1e-4, 1e-6, "cross_entropy dlogits");
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dz[1 * V + j], 0.0f) << "ignored token gets no grad";
}

TEST(CrossEntropy, IgnoredTokensAddNoLoss) {
  auto be = make_cpu_backend();
  auto z = randn(N * V, 32);
  std::vector<int32_t> all = {1, 2, 3, 4}, some = {1, -1, 3, -100};
  std::vector<float> dz(z.size());
  const double l_all = xent(*be, z, all, &dz, 1.0f);
  const double l_some = xent(*be, z, some, &dz, 1.0f);
  const double l0 = xent(*be, z, all, nullptr, 1.0f, 0, 1);
  const double l2 = xent(*be, z, all, nullptr, 1.0f, 2, 1);
  EXPECT_NEAR(l_some, l0 + l2, 1e-12);
  EXPECT_GT(l_all, l_some);
}

TEST(CrossEntropy, DlogitsMayAliasLogits) {
  auto be = make_cpu_backend();
  auto z = randn(N * V, 33, 3.0f);
  std::vector<int32_t> y = {4, 1, -1, 9};
  std::vector<float> dz(z.size()), inplace = z;
  const double l1 = xent(*be, z, y, &dz, 0.25f);
  test::Acc acc;
  be->cross_entropy(view(inplace, {N, V}), test::ids(y), view(inplace, {N, V}), 0.25f, acc.t());
  const double l2 = acc.v[0];
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
  const double l = xent(*be, z, y, &dz, 1.0f);
  const double ls = xent(*be, zs, y, &dzs, 1.0f);
  EXPECT_TRUE(std::isfinite(ls));
  EXPECT_NEAR(ls, l, 1e-9 * l);
  for (size_t i = 0; i < dz.size(); ++i) EXPECT_NEAR(dzs[i], dz[i], 1e-7);
}

TEST(CrossEntropy, AccumulatesIntoTheLossSum) {
  // Two calls add their losses: the accumulator holds the first loss plus the second.
  auto be = make_cpu_backend();
  auto z = randn(N * V, 34);
  std::vector<int32_t> y = {1, 2, 3, 4};
  std::vector<float> dz(z.size());
  const double once = xent(*be, z, y, &dz, 1.0f);
  test::Acc acc;
  acc.v[0] = 1.5;
  be->cross_entropy(view(z, {N, V}), test::ids(y), view(dz, {N, V}), 1.0f, acc.t());
  EXPECT_EQ(acc.v[0], 1.5 + once);
}

TEST(CrossEntropy, RejectsTargetBeyondVocab) {
  auto be = make_cpu_backend();
  std::vector<float> z(V, 0.0f);
  std::vector<int32_t> y = {int32_t(V)};
  test::Acc acc;
  EXPECT_THROW(be->cross_entropy(view(z, {1, V}), test::ids(y), view(z, {1, V}), 1.0f, acc.t()), Error);
}

}  // namespace
