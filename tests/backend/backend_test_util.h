// backend_test_util.h — shared helpers of the CPU backend tests: seeded random inputs and a
// central-finite-difference gradient checker.
//
// The CPU backend computes on host memory, so tests pass views (octet/tensor.h) of std::vector
// data directly: view(v) is F32 [n], view(v, shape) F32 of that shape, ids(v) I32 [n], and an
// Acc is an F64 accumulator (sum_squares, cross_entropy, the attention row residual).
// Gradient checks follow the usual recipe (e.g. ggml's test-backend-ops gradient mode): project
// the op's output on a fixed random vector r to get a scalar L(x) = Σ r·y (summed in double),
// perturb one input at a time by ±h, and compare (L(x+) − L(x−)) / (x+ − x−) with the analytic
// gradient. The denominator uses the perturbed FP32 values actually taken, so the step is exact.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "octet/tensor.h"

namespace octet::test {

/// F32 view of a host vector, [n] or the given shape (numel must match).
inline Tensor view(const std::vector<float>& v) {
  return Tensor(const_cast<float*>(v.data()), DType::F32, {int64_t(v.size())});
}
inline Tensor view(const std::vector<float>& v, Shape s) { return view(v).reshape(s); }
/// I32 [n] view of host token ids / targets.
inline Tensor ids(const std::vector<int32_t>& v) {
  return Tensor(const_cast<int32_t*>(v.data()), DType::I32, {int64_t(v.size())});
}
/// An F64 accumulator of n (1 or 2) values, zero-initialized.
struct Acc {
  double v[2] = {0.0, 0.0};
  Tensor t(int64_t n = 1) { return Tensor(v, DType::F64, {n}); }
};

/// n samples of N(0, sigma²) from a fixed seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// n samples of U(lo, hi) from a fixed seed.
inline std::vector<float> randu(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Σ r_i y_i in double: the scalar a gradient check differentiates.
inline double project(const std::vector<float>& y, const std::vector<float>& r) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += double(r[i]) * y[i];
  return s;
}

/// Central finite differences of the scalar f at x, one component at a time, step h.
inline std::vector<double> numeric_grad(const std::function<double(const std::vector<float>&)>& f,
                                        std::vector<float> x, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    const float xp = float(x0 + h), xm = float(x0 - h);
    x[i] = xp;
    const double fp = f(x);
    x[i] = xm;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (double(xp) - double(xm));
  }
  return g;
}

/// Expects |analytic − numeric| <= rtol·max|numeric| + atol elementwise; reports the worst index.
inline void expect_grad_near(const std::vector<float>& analytic, const std::vector<double>& numeric,
                             double rtol, double atol, const std::string& what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double scale = 0.0;
  for (double v : numeric) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.0) << what << ": the numeric gradient is identically zero (a vacuous test)";
  const double tol = rtol * scale + atol;
  size_t worst = 0;
  double worst_err = -1.0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double err = std::fabs(double(analytic[i]) - numeric[i]);
    if (err > worst_err) worst_err = err, worst = i;
  }
  EXPECT_LE(worst_err, tol) << what << ": worst at index " << worst << ", analytic " << analytic[worst]
                            << " vs finite difference " << numeric[worst];
}

}  // namespace octet::test
