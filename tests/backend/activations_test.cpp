// GELU (tanh approximation) and SwiGLU of the CPU backend: backward against central finite
// differences, GELU against the exact erf form (the tanh form is within 5e-4 of it everywhere,
// Hendrycks & Gimpel 2016), and SwiGLU against silu(gate)·up from its definition; GELU's amax
// outputs against the stored outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/fp8.h"

using namespace octet;
using octet::test::expect_grad_near;
using octet::test::numeric_grad;
using octet::test::project;
using octet::test::randn;
using octet::test::randu;
using octet::test::view;

namespace {

TEST(Gelu, CloseToExactErfGelu) {
  auto be = make_cpu_backend();
  auto x = randu(2001, 11, -8.0f, 8.0f);
  x.push_back(0.0f);
  std::vector<float> y(x.size());
  be->gelu_forward(view(x), view(y));
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
    EXPECT_NEAR(y[i], exact, 5e-4) << "x=" << x[i];
  }
  EXPECT_EQ(y.back(), 0.0f);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  auto be = make_cpu_backend();
  auto x = randn(64, 12, 2.0f), r = randn(64, 13);
  std::vector<float> dx(x.size());
  be->gelu_backward(view(x), view(r), view(dx));
  auto loss = [&](const std::vector<float>& xx) {
    std::vector<float> y(xx.size());
    be->gelu_forward(view(xx), view(y));
    return project(y, r);
  };
  expect_grad_near(dx, numeric_grad(loss, x, 1e-2), 1e-3, 1e-5, "gelu dx");
}

TEST(Swiglu, ForwardIsSiluGateTimesUp) {
  auto be = make_cpu_backend();
  const int64_t rows = 3, f = 5;
  auto h = randn(rows * 2 * f, 14, 3.0f);
  std::vector<float> y(rows * f);
  be->swiglu_forward(view(h, {rows, 2 * f}), view(y, {rows, f}));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < f; ++i) {
      const double g = h[r * 2 * f + i], u = h[r * 2 * f + f + i];
      EXPECT_NEAR(y[r * f + i], g / (1.0 + std::exp(-g)) * u, 1e-6 * (1 + std::fabs(g * u)));
    }
}

TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  auto be = make_cpu_backend();
  const int64_t rows = 4, f = 9;
  auto h = randn(rows * 2 * f, 15, 2.0f), r = randn(rows * f, 16);
  std::vector<float> dh(h.size());
  be->swiglu_backward(view(h, {rows, 2 * f}), view(r, {rows, f}), view(dh, {rows, 2 * f}));
  auto loss = [&](const std::vector<float>& hh) {
    std::vector<float> y(rows * f);
    be->swiglu_forward(view(hh, {rows, 2 * f}), view(y, {rows, f}));
    return project(y, r);
  };
  expect_grad_near(dh, numeric_grad(loss, h, 1e-2), 1e-3, 1e-5, "swiglu dh");
}

TEST(Swiglu, ExtremeGatesStayFinite) {
  auto be = make_cpu_backend();
  std::vector<float> h = {-1000.0f, 1000.0f, 2.0f, 3.0f}, dy = {1.0f, 1.0f}, y(2), dh(4);
  be->swiglu_forward(view(h, {1, 4}), view(y, {1, 2}));
  be->swiglu_backward(view(h, {1, 4}), view(dy, {1, 2}), view(dh, {1, 4}));
  EXPECT_EQ(y[0], 0.0f);           // silu(−1000) = −0
  EXPECT_FLOAT_EQ(y[1], 3000.0f);  // silu(1000) · 3
  for (float v : dh) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace

// GELU's amax outputs (backend.h): forward of y, backward of dx, as stored; accumulated.
TEST(Gelu, AmaxOutputsAreTheMaxOfTheStoredOutputs) {
  auto be = make_cpu_backend();
  const int64_t n = 257;
  std::vector<float> x = randn(n, 7), dy = randn(n, 8), y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  auto amax_of = [](const std::vector<float>& v) {
    uint32_t m = 0;
    for (float f : v) m = std::max(m, detail::f32_bits(std::fabs(f)));
    return m;
  };
  int32_t a = 0;
  be->gelu_forward(view(x), view(y), Tensor(&a, DType::I32, {1}));
  EXPECT_EQ(uint32_t(a), amax_of(y));
  EXPECT_GT(a, 0);
  const int32_t fwd = a;
  be->gelu_backward(view(x), view(dy), view(dx), Tensor(&a, DType::I32, {1}));
  EXPECT_EQ(uint32_t(a), std::max(uint32_t(fwd), amax_of(dx))) << "accumulates from the forward's";
  a = 0;
  be->gelu_backward(view(x), view(dy), view(dx), Tensor(&a, DType::I32, {1}));
  EXPECT_EQ(uint32_t(a), amax_of(dx));
}
