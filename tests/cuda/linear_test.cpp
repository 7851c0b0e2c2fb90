// linear_test.cpp — the CUDA Linear (src/cuda/linear.cpp) against the CPU Linear
// (src/cpu/backend/linear.cpp) for every precision and FP8 recipe: forward Y, backward dX and the
// accumulated dW, over several steps (tensor-delayed state must evolve identically). Both quantize
// bitwise equally (quantize_test.cpp), so the outputs differ only by GEMM accumulation order and
// Hopper's FP8 accumulator: bound |gpu − cpu| <= 2^-9·max|cpu| per output (FP8; the per-element
// bound is checked in gemm_test.cpp), 1e-5·max|cpu| for BF16/FP32. And the checkpoint state
// (quant_state): equal to the CPU's, and a second CudaLinear restored from it continues bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

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

// Checkpoint state (backend.h quant_state): after the same steps the GPU linear's tensor-delayed
// state equals the CPU linear's bitwise (same amaxes, the device ring buffer unrolled most recent
// last, same scales), and a second CudaLinear loaded with it continues bitwise like the first (a
// fresh one does not); a malformed state is rejected and leaves the state unchanged.
TEST(CudaLinear, QuantStateRoundTripContinuesBitwise) {
  OCTET_REQUIRE_GPU();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  constexpr int64_t m = 64, in = 128, out = 96;
  LinearSpec spec;
  spec.in_features = in;
  spec.out_features = out;
  spec.precision = LinearPrecision::FP8;
  spec.quant.recipe = Recipe::TensorDelayed;
  spec.quant.formats = FormatPolicy::Hybrid;
  spec.quant.amax_history_len = 3;  // 5 steps: the device ring buffer wraps
  auto lc = cpu->make_linear(spec);
  auto la = gpu->make_linear(spec);
  auto lb = gpu->make_linear(spec);
  auto lf = gpu->make_linear(spec);
  const size_t nx = size_t(m * in), nw = size_t(out * in), ny = size_t(m * out);
  std::vector<float> hx(nx), hw(nw), hy(ny);
  float *xc = cpu->alloc(nx), *wc = cpu->alloc(nw), *yc = cpu->alloc(ny), *dyc = cpu->alloc(ny),
        *dxc = cpu->alloc(nx), *dwc = cpu->alloc(nw);
  float *xg = gpu->alloc(nx), *wg = gpu->alloc(nw), *yg = gpu->alloc(ny), *dyg = gpu->alloc(ny),
        *dxg = gpu->alloc(nx), *dwg = gpu->alloc(nw);
  auto set_inputs = [&](int step) {
    const auto x = test::gaussian(nx, 60u + uint32_t(step), float(1 + step % 3));
    const auto w = test::gaussian(nw, 70u + uint32_t(step), 0.05f);
    const auto dy = test::gaussian(ny, 80u + uint32_t(step), 1e-3f * float(1 + step % 4));
    cpu->upload(xc, x.data(), nx);
    cpu->upload(wc, w.data(), nw);
    cpu->upload(dyc, dy.data(), ny);
    gpu->upload(xg, x.data(), nx);
    gpu->upload(wg, w.data(), nw);
    gpu->upload(dyg, dy.data(), ny);
  };
  // One forward + backward of `lin` on the current inputs; returns y, dx, dw concatenated.
  auto run_gpu = [&](Linear& lin) {
    gpu->fill(dwg, 0.0f, nw);
    lin.forward(xg, wg, yg, m);
    lin.backward(xg, wg, dyg, dxg, dwg, m);
    std::vector<float> r(ny + nx + nw);
    gpu->download(r.data(), yg, ny);
    gpu->download(r.data() + ny, dxg, nx);
    gpu->download(r.data() + ny + nx, dwg, nw);
    return r;
  };
  for (int step = 0; step < 5; ++step) {
    set_inputs(step);
    lc->forward(xc, wc, yc, m);
    lc->backward(xc, wc, dyc, dxc, dwc, m);
    run_gpu(*la);
  }
  const std::vector<float> saved = la->quant_state();
  ASSERT_EQ(saved.size(), 3u * (3 + 3));
  EXPECT_EQ(saved, lc->quant_state()) << "GPU and CPU delayed state after the same steps";

  lb->load_quant_state(saved);
  EXPECT_EQ(lb->quant_state(), saved);
  for (int step = 5; step < 7; ++step) {
    set_inputs(step);
    const auto a = run_gpu(*la), b = run_gpu(*lb), f = run_gpu(*lf);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_TRUE(test::same_float(a[i], b[i])) << "step " << step << " at " << i;
    if (step == 5) {
      EXPECT_NE(std::vector<float>(a.begin(), a.begin() + int64_t(ny)),
                std::vector<float>(f.begin(), f.begin() + int64_t(ny)))
          << "a fresh history scales differently";
    }
  }
  EXPECT_EQ(la->quant_state(), lb->quant_state());

  const std::vector<float> before = lb->quant_state();
  std::vector<float> bad = before;
  bad.push_back(0.0f);
  EXPECT_THROW(lb->load_quant_state(bad), Error);
  bad = before;
  bad[0] = 4.0f;  // X history longer than amax_history_len
  EXPECT_THROW(lb->load_quant_state(bad), Error);
  EXPECT_EQ(lb->quant_state(), before);
  for (float* p : {xc, wc, yc, dyc, dxc, dwc}) cpu->release(p);
  for (float* p : {xg, wg, yg, dyg, dxg, dwg}) gpu->release(p);
}

}  // namespace
}  // namespace octet
