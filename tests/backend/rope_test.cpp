// RoPE of the CPU backend (Su et al., arXiv 2104.09864, rotate-half pairing): the rotation angle
// of every pair against the definition, inverse ∘ forward = identity, norm preservation, the
// relative-position property of dot products, and the backward (inverse=true) against finite
// differences of the forward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::expect_grad_near;
using octet::test::numeric_grad;
using octet::test::project;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr int64_t B = 2, H = 3, T = 7, D = 16;
constexpr float kTheta = 10000.0f;

double norm2(const float* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(v[i]) * v[i];
  return s;
}

TEST(Rope, RotatesEachPairByPositionTimesFrequency) {
  auto be = make_cpu_backend();
  const int64_t half = D / 2;
  // x[t] = e_i for pair i = t % half: after rotation the pair (i, i + D/2) holds (cos a, sin a)
  // with a = t · theta^(−2i/D); every other component stays 0.
  std::vector<float> x(T * D, 0.0f);
  for (int64_t t = 0; t < T; ++t) x[t * D + t % half] = 1.0f;
  be->rope(view(x, {1, 1, T, D}), kTheta, false, AttnLayout::HeadsMajor);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t i = t % half;
    const double a = double(t) / std::pow(double(kTheta), 2.0 * i / D);
    for (int64_t d = 0; d < D; ++d) {
      const double want = d == i ? std::cos(a) : d == i + half ? std::sin(a) : 0.0;
      EXPECT_NEAR(x[t * D + d], want, 1e-6) << "t=" << t << " d=" << d;
    }
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  auto be = make_cpu_backend();
  auto x = randn(B * H * 1 * D, 5), y = x;
  be->rope(view(y, {B, H, 1, D}), kTheta, false, AttnLayout::HeadsMajor);
  EXPECT_EQ(x, y);
}

TEST(Rope, InverseUndoesForwardAndNormsArePreserved) {
  auto be = make_cpu_backend();
  auto x = randn(B * H * T * D, 6), y = x;
  be->rope(view(y, {B, H, T, D}), kTheta, false, AttnLayout::HeadsMajor);
  double moved = 0;
  for (int64_t row = 0; row < B * H * T; ++row) {
    const double n0 = norm2(&x[row * D], D), n1 = norm2(&y[row * D], D);
    EXPECT_NEAR(n1, n0, 1e-5 * n0) << "row " << row;
  }
  for (size_t i = 0; i < x.size(); ++i) moved = std::max(moved, double(std::fabs(y[i] - x[i])));
  EXPECT_GT(moved, 0.1);  // it did rotate
  be->rope(view(y, {B, H, T, D}), kTheta, true, AttnLayout::HeadsMajor);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5) << i;
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  // The same q at every position and the same k at every position: after RoPE,
  // <q_t, k_s> is a function of t − s alone.
  auto be = make_cpu_backend();
  auto q0 = randn(D, 7), k0 = randn(D, 8);
  std::vector<float> q(T * D), k(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) q[t * D + d] = q0[d], k[t * D + d] = k0[d];
  be->rope(view(q, {1, 1, T, D}), 100.0f, false, AttnLayout::HeadsMajor);
  be->rope(view(k, {1, 1, T, D}), 100.0f, false, AttnLayout::HeadsMajor);
  auto dot = [&](int64_t t, int64_t s) {
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += double(q[t * D + d]) * k[s * D + d];
    return acc;
  };
  for (int64_t t = 0; t + 1 < T; ++t)
    for (int64_t s = 0; s + 1 < T; ++s) EXPECT_NEAR(dot(t + 1, s + 1), dot(t, s), 1e-5);
}

TEST(Rope, BackwardIsInverseRotationAndMatchesFiniteDifferences) {
  auto be = make_cpu_backend();
  auto x = randn(B * H * T * D, 9), r = randn(B * H * T * D, 10);
  auto loss = [&](const std::vector<float>& xx) {
    std::vector<float> y = xx;
    be->rope(view(y, {B, H, T, D}), kTheta, false, AttnLayout::HeadsMajor);
    return project(y, r);
  };
  std::vector<float> dx = r;
  be->rope(view(dx, {B, H, T, D}), kTheta, true, AttnLayout::HeadsMajor);
  expect_grad_near(dx, numeric_grad(loss, x, 1e-2), 1e-4, 1e-5, "rope backward");
}

TEST(Rope, RejectsOddHeadDim) {
  auto be = make_cpu_backend();
  std::vector<float> x(3);
  EXPECT_THROW(be->rope(view(x, {1, 1, 1, 3}), kTheta, false, AttnLayout::HeadsMajor), Error);
}

}  // namespace
