// AdamW of the CPU backend (Loshchilov & Hutter, arXiv 1711.05101, as octet/backend.h states it):
// the first step moves every parameter by lr·(sign(g) + wd·p) up to eps/|g|; with a constant
// gradient the bias correction keeps every later step at lr·sign(g); the moment states follow
// their recurrences; step < 1 is rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr float kLr = 1e-2f, kB1 = 0.9f, kB2 = 0.95f, kEps = 1e-8f;

// A gradient with |g| >= 0.05 everywhere, so that eps/|g| is negligible.
std::vector<float> away_from_zero(std::vector<float> g) {
  for (auto& v : g) v = std::copysign(0.05f + std::fabs(v), v);
  return g;
}

TEST(AdamW, FirstStepMovesByLrTimesSignPlusDecay) {
  auto be = make_cpu_backend();
  const size_t n = 257;
  auto p0 = randn(n, 51), g = away_from_zero(randn(n, 52));
  std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
  const float wd = 0.1f;
  be->adamw(view(p), view(g), view(m), view(v), kLr, kB1, kB2, kEps, wd, 1);
  for (size_t i = 0; i < n; ++i) {
    const double want = p0[i] - kLr * (std::copysign(1.0, g[i]) + wd * p0[i]);
    EXPECT_NEAR(p[i], want, 1e-6 * (1 + std::fabs(p0[i]))) << i;
    EXPECT_NEAR(m[i], (1 - kB1) * g[i], 1e-7 * std::fabs(g[i]));
    EXPECT_NEAR(v[i], (1 - kB2) * double(g[i]) * g[i], 1e-7 * g[i] * g[i]);
  }
}

TEST(AdamW, BiasCorrectionKeepsConstantGradientStepsAtLr) {
  // With g constant, m_t = (1−β1^t) g and v_t = (1−β2^t) g², so m̂ = g, v̂ = g² at every step.
  auto be = make_cpu_backend();
  const size_t n = 64;
  auto g = away_from_zero(randn(n, 53));
  std::vector<float> p(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  for (int64_t step = 1; step <= 20; ++step) {
    std::vector<float> before = p;
    be->adamw(view(p), view(g), view(m), view(v), kLr, kB1, kB2, kEps, 0.0f, step);
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(before[i] - p[i], kLr * std::copysign(1.0, g[i]), 2e-6)
          << "step " << step << " index " << i;
  }
}

TEST(AdamW, MomentStatesFollowTheirRecurrences) {
  auto be = make_cpu_backend();
  const size_t n = 16;
  auto g1 = randn(n, 54), g2 = randn(n, 55);
  std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f);
  be->adamw(view(p), view(g1), view(m), view(v), kLr, kB1, kB2, kEps, 0.0f, 1);
  be->adamw(view(p), view(g2), view(m), view(v), kLr, kB1, kB2, kEps, 0.0f, 2);
  for (size_t i = 0; i < n; ++i) {
    const double m2 = kB1 * (1 - kB1) * double(g1[i]) + (1 - kB1) * double(g2[i]);
    const double v2 = kB2 * (1 - kB2) * double(g1[i]) * g1[i] + (1 - kB2) * double(g2[i]) * g2[i];
    EXPECT_NEAR(m[i], m2, 1e-6);
    EXPECT_NEAR(v[i], v2, 1e-6);
  }
}

TEST(AdamW, RejectsStepZero) {
  auto be = make_cpu_backend();
  std::vector<float> p{1}, g{1}, m{0}, v{0};
  EXPECT_THROW(be->adamw(view(p), view(g), view(m), view(v), kLr, kB1, kB2, kEps, 0.0f, 0), Error);
}

}  // namespace
