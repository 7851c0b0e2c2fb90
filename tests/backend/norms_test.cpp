// RMSNorm and LayerNorm of the CPU backend: backward against central finite differences of the
// forward (dx, dweight, dbias), and identities of the definitions (a constant row normalizes to
// sign·w; LayerNorm rows come out with mean 0 and variance 1/(1 + eps/var)), and the forwards'
// amax output against the stored output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/fp8.h"

using namespace octet;
using octet::test::expect_grad_near;
using octet::test::numeric_grad;
using octet::test::project;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr int64_t kRows = 3, kDim = 24;
constexpr float kEps = 1e-5f;

// [rows, kDim] view of a row-major host matrix.
Tensor mat(const std::vector<float>& v) { return view(v, {int64_t(v.size()) / kDim, kDim}); }

class Norms : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> x = randn(kRows * kDim, 1), w = randn(kDim, 2), b = randn(kDim, 3),
                     r = randn(kRows * kDim, 4);

  double rms_loss(const std::vector<float>& xx, const std::vector<float>* ww) {
    std::vector<float> y(xx.size()), rstd(kRows);
    be->rmsnorm_forward(mat(xx), ww ? view(*ww) : Tensor(), mat(y), view(rstd), kEps);
    return project(y, r);
  }
  double ln_loss(const std::vector<float>& xx, const std::vector<float>& ww, const std::vector<float>& bb) {
    std::vector<float> y(xx.size()), mean(kRows), rstd(kRows);
    be->layernorm_forward(mat(xx), view(ww), view(bb), mat(y), view(mean), view(rstd), kEps);
    return project(y, r);
  }
};

TEST_F(Norms, RmsNormBackwardMatchesFiniteDifferences) {
  std::vector<float> y(x.size()), rstd(kRows), dx(x.size());
  std::vector<float> dw(kDim, 0.5f);  // accumulated: starts non-zero on purpose
  be->rmsnorm_forward(mat(x), view(w), mat(y), view(rstd), kEps);
  be->rmsnorm_backward(mat(x), view(w), view(rstd), mat(r), mat(dx), view(dw), false);
  auto ndx = numeric_grad([&](const std::vector<float>& xx) { return rms_loss(xx, &w); }, x, 1e-2);
  expect_grad_near(dx, ndx, 2e-3, 1e-5, "rmsnorm dx");
  auto ndw = numeric_grad([&](const std::vector<float>& ww) { return rms_loss(x, &ww); }, w, 1e-2);
  for (auto& v : dw) v -= 0.5f;
  expect_grad_near(dw, ndw, 2e-3, 1e-5, "rmsnorm dweight");
}

TEST_F(Norms, RmsNormWithoutWeightIsWeightOne) {
  std::vector<float> y(x.size()), y1(x.size()), rstd(kRows), dx(x.size()), dx1(x.size());
  std::vector<float> ones(kDim, 1.0f);
  be->rmsnorm_forward(mat(x), Tensor(), mat(y), view(rstd), kEps);
  be->rmsnorm_backward(mat(x), Tensor(), view(rstd), mat(r), mat(dx), Tensor(), false);
  be->rmsnorm_forward(mat(x), view(ones), mat(y1), view(rstd), kEps);
  be->rmsnorm_backward(mat(x), view(ones), view(rstd), mat(r), mat(dx1), Tensor(), false);
  EXPECT_EQ(y, y1);
  EXPECT_EQ(dx, dx1);
  auto ndx = numeric_grad([&](const std::vector<float>& xx) { return rms_loss(xx, nullptr); }, x, 1e-2);
  expect_grad_near(dx, ndx, 2e-3, 1e-5, "rmsnorm dx, no weight");
}

TEST_F(Norms, RmsNormOfConstantRowIsSignTimesWeight) {
  // mean(x²) = c², so y = c / sqrt(c² + eps) · w = sign(c)·w·(1 − O(eps/c²)).
  const float cs[kRows] = {-3.0f, 0.25f, 7.5f};
  std::vector<float> xc(kRows * kDim), y(xc.size()), rstd(kRows);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t d = 0; d < kDim; ++d) xc[i * kDim + d] = cs[i];
  be->rmsnorm_forward(mat(xc), view(w), mat(y), view(rstd), kEps);
  for (int64_t i = 0; i < kRows; ++i) {
    const double bound = kEps / (2.0 * cs[i] * cs[i]) + 1e-6;  // relative
    EXPECT_NEAR(rstd[i], 1.0 / std::sqrt(double(cs[i]) * cs[i] + kEps), 1e-6 / std::fabs(cs[i]));
    for (int64_t d = 0; d < kDim; ++d)
      EXPECT_NEAR(y[i * kDim + d], std::copysign(1.0, cs[i]) * w[d], bound * std::fabs(w[d]))
          << "row " << i << " col " << d;
  }
}

TEST_F(Norms, LayerNormBackwardMatchesFiniteDifferences) {
  std::vector<float> y(x.size()), mean(kRows), rstd(kRows), dx(x.size()), dw(kDim, 0.0f), db(kDim, 0.0f);
  be->layernorm_forward(mat(x), view(w), view(b), mat(y), view(mean), view(rstd), kEps);
  be->layernorm_backward(mat(x), view(w), view(mean), view(rstd), mat(r), mat(dx), view(dw), view(db), false);
  expect_grad_near(dx, numeric_grad([&](const auto& xx) { return ln_loss(xx, w, b); }, x, 1e-2), 2e-3, 1e-5,
                   "layernorm dx");
  expect_grad_near(dw, numeric_grad([&](const auto& ww) { return ln_loss(x, ww, b); }, w, 1e-2), 2e-3, 1e-5,
                   "layernorm dweight");
  expect_grad_near(db, numeric_grad([&](const auto& bb) { return ln_loss(x, w, bb); }, b, 1e-2), 2e-3, 1e-5,
                   "layernorm dbias");
}

TEST_F(Norms, LayerNormRowsHaveZeroMeanAndUnitVariance) {
  std::vector<float> ones(kDim, 1.0f), zeros(kDim, 0.0f), y(x.size()), mean(kRows), rstd(kRows);
  std::vector<float> xs = x;
  for (auto& v : xs) v = 3.0f + 2.0f * v;  // an offset and a scale the norm must remove
  be->layernorm_forward(mat(xs), view(ones), view(zeros), mat(y), view(mean), view(rstd), kEps);
  for (int64_t i = 0; i < kRows; ++i) {
    double s = 0, s2 = 0, xm = 0, xv = 0;
    for (int64_t d = 0; d < kDim; ++d) xm += xs[i * kDim + d];
    xm /= kDim;
    for (int64_t d = 0; d < kDim; ++d) {
      const double v = xs[i * kDim + d] - xm;
      xv += v * v;
      s += y[i * kDim + d];
      s2 += double(y[i * kDim + d]) * y[i * kDim + d];
    }
    xv /= kDim;
    EXPECT_NEAR(mean[i], xm, 1e-5);
    EXPECT_NEAR(s / kDim, 0.0, 1e-6);
    EXPECT_NEAR(s2 / kDim, xv / (xv + kEps), 1e-5);
  }
}

TEST_F(Norms, ZeroRowStaysFinite) {
  std::vector<float> z(kDim, 0.0f), y(kDim, 1.0f), rstd(1), dx(kDim);
  be->rmsnorm_forward(mat(z), view(w), mat(y), view(rstd), kEps);
  be->rmsnorm_backward(mat(z), view(w), view(rstd), mat(r).slice(0, 1), mat(dx), Tensor(), false);
  for (int64_t d = 0; d < kDim; ++d) {
    EXPECT_EQ(y[d], 0.0f);
    EXPECT_TRUE(std::isfinite(dx[d]));
  }
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(double(kEps)), 1e-2);
}

// accumulate = true is dx += (the gradient as dx stores it): bitwise the overwrite followed by
// axpy(1, ·, dx), for F32 and BF16 dx (the BF16 case rounds the gradient before the add).
TEST_F(Norms, BackwardAccumulateIsOverwriteThenAxpy) {
  std::vector<float> y(x.size()), mean(kRows), rstd(kRows), g(x.size());
  be->layernorm_forward(mat(x), view(w), view(b), mat(y), view(mean), view(rstd), kEps);
  for (const DType dt : {DType::F32, DType::BF16}) {
    for (const bool layer : {false, true}) {
      SCOPED_TRACE(std::string(dt == DType::BF16 ? "bf16" : "f32") + (layer ? " layernorm" : " rmsnorm"));
      auto act = [&](uint32_t seed) {
        std::vector<uint16_t> h(x.size());
        std::vector<float> f = randn(x.size(), seed);
        for (size_t i = 0; i < f.size(); ++i) h[i] = bf16_from_float(f[i]);
        return std::pair{f, h};
      };
      auto [f_acc, h_acc] = act(7);
      auto [f_two, h_two] = act(7);
      auto [f_g, h_g] = act(8);
      auto t = [&](std::vector<float>& f, std::vector<uint16_t>& h) {
        return dt == DType::F32 ? mat(f) : Tensor(h.data(), DType::BF16, Shape{kRows, kDim});
      };
      auto run = [&](const Tensor& dx, bool accumulate) {
        if (layer)
          be->layernorm_backward(mat(x), view(w), view(mean), view(rstd), mat(r), dx, Tensor(), Tensor(),
                                 accumulate);
        else
          be->rmsnorm_backward(mat(x), view(w), view(rstd), mat(r), dx, Tensor(), accumulate);
      };
      run(t(f_acc, h_acc), true);
      run(t(f_g, h_g), false);
      be->axpy(1.0f, t(f_g, h_g), t(f_two, h_two));
      if (dt == DType::F32) {
        EXPECT_EQ(f_acc, f_two);
        EXPECT_NE(f_acc, act(7).first);  // something was added
      } else {
        EXPECT_EQ(h_acc, h_two);
        EXPECT_NE(h_acc, act(7).second);
      }
    }
  }
  EXPECT_THROW(be->rmsnorm_backward(mat(x), view(w), view(rstd), mat(r), mat(x), Tensor(), true), Error);
}

}  // namespace

// The producer's amax output (backend.h): amax = max(amax, |y| max) over y as stored, in float
// bits — for F32 and BF16 outputs (BF16: the rounded values), starting from zero or from a larger
// value (kept); an amax that is not I32 [1] is refused before anything is written.
TEST_F(Norms, ForwardAmaxOutputIsTheMaxOfTheStoredOutput) {
  for (const DType dt : {DType::F32, DType::BF16}) {
    std::vector<float> y(x.size()), mean(kRows), rstd(kRows);
    std::vector<uint16_t> yb(x.size());
    const Tensor yt = dt == DType::F32 ? mat(y) : Tensor(yb.data(), DType::BF16, {kRows, kDim});
    auto stored_amax = [&] {
      uint32_t m = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float v = dt == DType::F32 ? y[i] : bf16_to_float(yb[i]);
        m = std::max(m, detail::f32_bits(std::fabs(v)));
      }
      return m;
    };
    for (const int32_t start : {0, int32_t(detail::f32_bits(1e30f))}) {
      int32_t a = start;
      be->layernorm_forward(mat(x), view(w), view(b), yt, view(mean), view(rstd), kEps,
                            Tensor(&a, DType::I32, {1}));
      EXPECT_EQ(uint32_t(a), std::max(uint32_t(start), stored_amax())) << to_string(dt);
      a = start;
      be->rmsnorm_forward(mat(x), view(w), yt, view(rstd), kEps, Tensor(&a, DType::I32, {1}));
      EXPECT_EQ(uint32_t(a), std::max(uint32_t(start), stored_amax())) << to_string(dt);
      EXPECT_GT(stored_amax(), 0u);
    }
  }
  std::vector<float> y(x.size()), rstd(kRows), f(1, 0.0f);
  int32_t two[2] = {0, 0};
  EXPECT_THROW(be->rmsnorm_forward(mat(x), view(w), mat(y), view(rstd), kEps, view(f)), Error);
  EXPECT_THROW(be->rmsnorm_forward(mat(x), view(w), mat(y), view(rstd), kEps, Tensor(two, DType::I32, {2})),
               Error);
}
