// linear_test.cpp — the CUDA Linear (src/cuda/linear.cpp) against the CPU Linear
// (src/cpu/backend/linear.cpp) for every precision and FP8 recipe: forward Y, backward dX and the
// accumulated dW, over several steps (tensor-delayed state must evolve identically). Both quantize
// bitwise equally (quantize_test.cpp), so the outputs differ only by GEMM accumulation order and
// Hopper's FP8 accumulator: bound |gpu − cpu| <= 2^-9·max|cpu| per output (FP8; the per-element
// bound is checked in gemm_test.cpp), 1e-5·max|cpu| for BF16/FP32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "octet/backend.h"

namespace octet {
namespace {

void expect_close(const std::vector<float>& g, const std::vector<float>& c, double rtol,
                  const std::string& what) {
  double peak = 0.0;
  for (float v : c) peak = std::max(peak, double(std::fabs(v)));
  ASSERT_GT(peak, 0.0) << what;
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_NEAR(g[i], c[i], rtol * peak) << what << " at " << i;
}

struct Case {
  LinearPrecision precision;
  Recipe recipe;
  FormatPolicy formats;
  int64_t m, in, out;
};

TEST(CudaLinear, MatchesCpuLinearOverSteps) {
  OCTET_REQUIRE_GPU();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 64, 96, 80},
      {LinearPrecision::FP32, Recipe::TensorCurrent, FormatPolicy::E4M3, 33, 17, 9},
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 128, 256, 192},
      {LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::FP8, Recipe::Row, FormatPolicy::E4M3, 96, 160, 64},
      {LinearPrecision::FP8, Recipe::Block, FormatPolicy::E4M3, 256, 256, 384},
      {LinearPrecision::FP8, Recipe::Block, FormatPolicy::Hybrid, 130, 200, 72},
      {LinearPrecision::FP8, Recipe::MX, FormatPolicy::E4M3, 64, 96, 32},
      {LinearPrecision::FP8, Recipe::Unit, FormatPolicy::Hybrid, 48, 64, 32},
  };
  for (const auto& c : cases) {
    LinearSpec spec;
    spec.in_features = c.in;
    spec.out_features = c.out;
    spec.precision = c.precision;
    spec.quant.recipe = c.recipe;
    spec.quant.formats = c.formats;
    spec.quant.amax_history_len = 4;
    spec.quant.unit_scale = 8.0f;
    const std::string what = std::to_string(int(c.precision)) + " " + to_string(c.recipe) + " " +
                             to_string(c.formats);
    auto lc = cpu->make_linear(spec);
    auto lg = gpu->make_linear(spec);
    const size_t nx = size_t(c.m * c.in), nw = size_t(c.out * c.in), ny = size_t(c.m * c.out);
    float *xc = cpu->alloc(nx), *wc = cpu->alloc(nw), *yc = cpu->alloc(ny), *dyc = cpu->alloc(ny),
          *dxc = cpu->alloc(nx), *dwc = cpu->alloc(nw);
    float *xg = gpu->alloc(nx), *wg = gpu->alloc(nw), *yg = gpu->alloc(ny), *dyg = gpu->alloc(ny),
          *dxg = gpu->alloc(nx), *dwg = gpu->alloc(nw);
    const double tol = c.precision == LinearPrecision::FP8 ? std::ldexp(1.0, -9) : 1e-5;
    for (int step = 0; step < 3; ++step) {
      const auto x = test::gaussian(nx, 30u + uint32_t(step), float(1 + step));
      const auto w = test::gaussian(nw, 40u + uint32_t(step), 0.05f);
      const auto dy = test::gaussian(ny, 50u + uint32_t(step), 1e-3f * float(step + 1));
      cpu->upload(xc, x.data(), nx);
      gpu->upload(xg, x.data(), nx);
      cpu->upload(wc, w.data(), nw);
      gpu->upload(wg, w.data(), nw);
      cpu->upload(dyc, dy.data(), ny);
      gpu->upload(dyg, dy.data(), ny);
      lc->forward(xc, wc, yc, c.m);
      lg->forward(xg, wg, yg, c.m);
      lc->backward(xc, wc, dyc, dxc, dwc, c.m);
      lg->backward(xg, wg, dyg, dxg, dwg, c.m);
      std::vector<float> a(ny), b(ny), ax(nx), bx(nx), aw(nw), bw(nw);
      gpu->download(a.data(), yg, ny);
      cpu->download(b.data(), yc, ny);
      expect_close(a, b, tol, what + " y step " + std::to_string(step));
      gpu->download(ax.data(), dxg, nx);
      cpu->download(bx.data(), dxc, nx);
      expect_close(ax, bx, tol, what + " dx step " + std::to_string(step));
      gpu->download(aw.data(), dwg, nw);
      cpu->download(bw.data(), dwc, nw);
      expect_close(aw, bw, tol, what + " dw (accumulated) step " + std::to_string(step));
      if (c.precision == LinearPrecision::FP8) {
        const QuantStats sg = lg->stats_x(), sc = lc->stats_x();
        EXPECT_TRUE(test::same_float(sg.amax, sc.amax)) << what;
        EXPECT_FLOAT_EQ(sg.scale_min, sc.scale_min) << what;
        EXPECT_FLOAT_EQ(sg.scale_max, sc.scale_max) << what;
        EXPECT_DOUBLE_EQ(sg.underflow_frac, sc.underflow_frac) << what;
        EXPECT_DOUBLE_EQ(lg->stats_dy().saturated_frac, lc->stats_dy().saturated_frac) << what;
        EXPECT_FLOAT_EQ(lg->stats_w().scale_max, lc->stats_w().scale_max) << what;
      }
      if (HasFailure()) return;
    }
    for (float* p : {xc, wc, yc, dyc, dxc, dwc}) cpu->release(p);
    for (float* p : {xg, wg, yg, dyg, dxg, dwg}) gpu->release(p);
  }
}

}  // namespace
}  // namespace octet
