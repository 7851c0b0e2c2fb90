// flash_backward_sm90_test.cpp — the wgmma (Hopper) flavor of the flash FP8 attention backward
// (src/cuda/attention/flash/flash_bwd_sm90.cu; chosen by OCTET_FLASH_BACKWARD=wgmma or
// BackwardParams::bwd_kernel) against the CPU flash twin, the FP64 oracle and the mma.sync flavor.
// Skipped without an sm_90 device. Every test runs at head_dim 64 and 128 (parameter D; the
// head_dim 128 kernels compute Sᵀ and dPᵀ on 64-query halves and park half 0's dS until the
// 128 x 128 scale tile's amax is known: docs/attention.md §"Backward").
//
// Tolerances: as flash_backward_test.cpp's (against the twin: dQ, dK within kGradTolTwinWgmma = 3e-2
// (flash_backward_codes.h: S and dP on the FP8 accumulator), dV dv_tol_vs_twin; the FA3
// rule against the FP64 oracle: error <= 2 x the twin's + 1e-3; matched residual <= 1e-6 in every
// row; stale residual > 10x matched). The wgmma flavor's S, dP and the products are summed by the
// FP8 wgmma accumulator (~13-14 bits within one k32 step chain of a tile, DeepSeek-V3 §3.3.2) where
// the mma.sync flavor's instruction sums in its own order, so the two flavors agree to the same
// 1e-2 (a dŜ or P̃ code flips where a value sits on a rounding boundary), not bitwise. Identities:
// dO = 0 ⇒ dQ = dK = dV = 0 exactly; rows without keys ⇒ dQ = 0, all finite. The matched pre-pass
// forms S, P and dP with the main kernel's instruction shape (operand roles swapped), exponential
// and statistics, so with the same bits (the residual is the test of that).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention/attention_test_util.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/attention/flash/flash_kernels.h"  // the residual finish alone
#include "cuda/cuda_test_util.h"
#include "cuda/attention/flash/flash_backward_codes.h"
#include "octet/attention.h"
#include "octet/quant.h"
#include "octet/backend.h"

namespace octet {
namespace {

namespace fl = cuda::flash;
using test::fused_config;
using test::rel_l2;

constexpr double kGradTol = 1e-2;

/// OCTET_FLASH_BACKWARD = v for the scope.
struct BackwardEnv : test::ScopedEnv {
  explicit BackwardEnv(const char* v) : test::ScopedEnv("OCTET_FLASH_BACKWARD", v) {}
};

struct Case {
  int64_t h, g, tq, tk;
  bool causal;
};

/// The head_dim every test runs at: 64 and 128.
class FlashBackwardWgmma : public ::testing::TestWithParam<int64_t> {};

// Through the CUDA attention (form 'flash', 128 x 128 tiles) with the wgmma flavor forced.
TEST_P(FlashBackwardWgmma, MatchesCpuFlashTwinAndOracle) {
  OCTET_REQUIRE_SM90();
  BackwardEnv env("wgmma");
  const int64_t D = GetParam();
  {  // the selection: wgmma for what it supports, mma.sync for the rest
    fl::BackwardParams p;
    p.D = D, p.block_q = p.block_k = 128, p.Tk = 1000;
    ASSERT_EQ(fl::select_backward_kernel(p), fl::BackwardKernel::Wgmma);
    p.block_q = 64;  // 64 x 128: mma.sync
    EXPECT_EQ(fl::select_backward_kernel(p), fl::BackwardKernel::MmaSync);
    p.block_k = 64;  // 64 x 64: the warp-specialized wgmma kernel
    EXPECT_EQ(fl::select_backward_kernel(p), fl::BackwardKernel::Wgmma);
    p.block_k = 128;
    p.block_q = 128, p.deterministic = true;
    EXPECT_EQ(fl::select_backward_kernel(p), fl::BackwardKernel::MmaSync);
  }
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {2, 2, 1, 1, false},      {2, 1, 17, 17, true},      {2, 2, 127, 127, true},  {2, 2, 129, 129, false},
      {2, 1, 1000, 1000, true}, {2, 2, 1000, 1000, false}, {4, 2, 64, 256, true},   {4, 4, 64, 256, false},
      {8, 2, 150, 150, true},   {8, 1, 150, 150, false},   {8, 2, 129, 300, false}, {8, 1, 200, 90, true},
      {8, 2, 300, 129, false},
  };
  for (const Case& c : cases) {
    const AttentionShape s = test::make_shape(1, c.h, c.g, c.tq, c.tk, D, c.causal);
    const auto in = make_attention_inputs(s, AttnInputDist::Normal, 23);
    const auto ref = run_attention_oracle(s, in);
    double residual[2] = {-1, -1};  // stale, matched
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const AttentionConfig cfg = fused_config(delta);
      const std::string what = "D" + std::to_string(D) + " H" + std::to_string(c.h) + "/G" +
                               std::to_string(c.g) + " " + std::to_string(c.tq) + "x" + std::to_string(c.tk) +
                               (c.causal ? " causal " : " ") + to_string(delta);
      const test::RunResult cpu = test::run_attention(s, cfg, in);
      const GpuRun g = run_gpu(*gpu, s, cfg, in);
      const double eq = rel_l2(g.dq, cpu.dq), ek = rel_l2(g.dk, cpu.dk), ev = rel_l2(g.dv, cpu.dv);
      const auto ce = test::errors_of(s, in, ref, cpu);
      const auto ge =
          attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
      std::printf(
          "[wgmma bwd] %-32s vs twin: dQ %.1e dK %.1e dV %.1e | vs FP64 gpu/cpu: dQ "
          "%.2e/%.2e dK %.2e/%.2e dV %.2e/%.2e | residual %.1e/%.1e\n",
          what.c_str(), eq, ek, ev, ge.dq_rel_err, ce.dq_rel_err, ge.dk_rel_err, ce.dk_rel_err, ge.dv_rel_err,
          ce.dv_rel_err, g.stats.row_residual_max, cpu.stats.row_residual_max);
      EXPECT_LE(eq, test::kGradTolTwinWgmma) << what;  // flash_backward_codes.h: the FP8 accumulator
      EXPECT_LE(ek, test::kGradTolTwinWgmma) << what;
      EXPECT_LE(ev, test::dv_tol_vs_twin()) << what;
      EXPECT_LE(ge.dq_rel_err, 2 * ce.dq_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dk_rel_err, 2 * ce.dk_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << what;
      EXPECT_TRUE(test::all_finite(g.dq) && test::all_finite(g.dk) && test::all_finite(g.dv)) << what;
      if (delta == DeltaMode::Matched) {
        EXPECT_LE(g.stats.row_residual_max, 1e-6) << what;
      }
      residual[delta == DeltaMode::Matched] = g.stats.row_residual_max;
    }
    EXPECT_GT(residual[0], 10 * residual[1]) << "stale must break the zero row sum";
  }
}

// dO = 0 and all-zero inputs ⇒ every gradient exactly 0; Tq > Tk causal ⇒ the first Tq − Tk rows
// see no key: dQ = 0 there, all finite.
TEST_P(FlashBackwardWgmma, ZerosAndRowsWithoutKeys) {
  OCTET_REQUIRE_SM90();
  BackwardEnv env("wgmma");
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(1, 4, 2, 300, 70, GetParam(), true);
  for (int mode = 0; mode < 3; ++mode) {  // 0: dO = 0, 1: all zero, 2: random
    auto in = make_attention_inputs(s, AttnInputDist::Normal, 9);
    if (mode <= 1) std::fill(in.d_o.begin(), in.d_o.end(), 0.0f);
    if (mode == 1)
      for (auto* x : {&in.q, &in.k, &in.v}) std::fill(x->begin(), x->end(), 0.0f);
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const GpuRun g = run_gpu(*gpu, s, fused_config(delta), in);
      const std::string what = "mode " + std::to_string(mode) + " " + to_string(delta);
      for (const auto* x : {&g.dq, &g.dk, &g.dv}) {
        ASSERT_TRUE(test::all_finite(*x)) << what;
        if (mode <= 1) {
          for (float v : *x) ASSERT_EQ(v, 0.0f) << what;
        }
      }
      double norm = 0;
      for (float v : g.dk) norm += double(v) * v;
      if (mode == 2) {
        EXPECT_GT(norm, 0.0) << what << ": dK must not be trivially zero";
      }
      for (int64_t h = 0; h < s.n_heads; ++h)
        for (int64_t i = 0; i < s.seq_q - s.seq_k; ++i)  // rows without a key
          for (int64_t c = 0; c < s.head_dim; ++c)
            ASSERT_EQ(g.dq[size_t((h * s.seq_q + i) * s.head_dim + c)], 0.0f) << what << " row " << i;
    }
  }
}

// Large logits (S ~ 60-110): the matched residual of the actual dS stays <= 1e-6. The shift a of
// Q and K gives S ≈ τ·D·a² = √D·a²: a = 3.2·(64/D)^(1/4) keeps S ~ 80 at both head_dims.
TEST_P(FlashBackwardWgmma, LargeLogitsMatchedResidual) {
  OCTET_REQUIRE_SM90();
  BackwardEnv env("wgmma");
  auto gpu = make_cuda_backend();
  const int64_t D = GetParam();
  const AttentionShape s = test::make_shape(1, 2, 1, 1024, 1024, D, true);
  const auto in = test::large_logit_inputs(s, 3.2f * std::pow(64.0f / float(D), 0.25f), 21);
  const GpuRun g = run_gpu(*gpu, s, fused_config(DeltaMode::Matched), in);
  float lse_max = 0;
  for (float x : g.lse) lse_max = std::max(lse_max, std::fabs(x));
  std::printf("[wgmma bwd] D%lld large logits (max |LSE| %.1f): matched residual max %.2e\n",
              static_cast<long long>(D), lse_max, g.stats.row_residual_max);
  EXPECT_GT(lse_max, 50.0f) << "the inputs must give large logits";
  EXPECT_LE(g.stats.row_residual_max, 1e-6);
}

// 64 x 64 dS scale tiles are the consumers' own: with E4M3 dS and keys 64..127 seeing logits 14
// below those of keys 0..63 (their dS ~1e-6 of the others', ~20 binades: below E4M3's subnormals
// under one shared scale), the 64 x 64 kernel's dK of those keys matches the CPU twin's at 64 x 64
// (each key block its own scale, as each consumer), while the 128 x 128 kernel's — one scale for
// both halves — does not. Random inputs cannot tell the two apart: there every tile's amax lies in
// the same binade.
TEST_P(FlashBackwardWgmma, EachConsumerScalesItsOwnTile) {
  OCTET_REQUIRE_SM90();
  auto gpu = make_cuda_backend();
  const int64_t D = GetParam(), T = 128, H = 2;
  const AttentionShape s = test::make_shape(1, H, H, T, T, D, false);
  AttentionInputs in = make_attention_inputs(s, AttnInputDist::Normal, 31);
  const float shift = std::sqrt(14.0f / s.tau());  // τ·q0·k0 = −14 for keys 64..127
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      in.q[size_t((h * T + i) * D)] = shift;
      in.k[size_t((h * T + i) * D)] = i >= 64 ? -shift : 0.0f;
    }
  AttentionConfig c64 = fused_config(DeltaMode::Matched, 64, 64), c128 = fused_config(DeltaMode::Matched);
  c64.ds_format = c128.ds_format = Format::E4M3;
  const test::RunResult twin = test::run_attention(s, c64, in);
  const GpuRun g64 = run_gpu(*gpu, s, c64, in), g128 = run_gpu(*gpu, s, c128, in);
  auto err = [&](const std::vector<float>& dk, int64_t j0) {  // rel. L2 over keys j0..j0 + 63
    double num = 0, den = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = j0; j < j0 + 64; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const size_t k = size_t((h * T + j) * D + d);
          num += (double(dk[k]) - twin.dk[k]) * (double(dk[k]) - twin.dk[k]);
          den += double(twin.dk[k]) * twin.dk[k];
        }
    return den > 0 ? std::sqrt(num / den) : -1.0;
  };
  const double small64 = err(g64.dk, 64), small128 = err(g128.dk, 64), large64 = err(g64.dk, 0);
  std::printf(
      "[wgmma bwd] D%lld keys 64..127 (dS ~1e-6 of keys 0..63): dK vs the 64 x 64 twin: 64 x 64 "
      "kernel %.1e, 128 x 128 kernel %.1e (keys 0..63: %.1e)\n",
      static_cast<long long>(D), small64, small128, large64);
  EXPECT_GE(small64, 0.0) << "the small keys' dK must not be 0 in the twin";
  EXPECT_LE(small64, test::kGradTolTwinWgmma);
  EXPECT_LE(large64, test::kGradTolTwinWgmma);
  EXPECT_GT(small128, 10 * small64) << "one scale for both key halves would not be told apart";
}

// The kernels directly on random codes, every (do_format, ds_format) pair (the four instantiations)
// and with and without residual sums: wgmma vs mma.sync flavor to kGradTol; the wgmma matched
// residual (its pre-pass + main kernel) <= 1e-6 in every row; two wgmma runs give dK, dV with
// identical bits (fixed order) and dQ to FP32 atomic order.
TEST_P(FlashBackwardWgmma, MatchesMmaSyncFlavorOnCodes) {
  OCTET_REQUIRE_SM90();
  const int64_t D = GetParam();
  const test::BackwardDims dims[] = {
      {2, 4, 2, 200, 200, D, 128, 128, true}, {1, 4, 1, 130, 300, D, 128, 128, false},
      {1, 2, 2, 257, 257, D, 128, 128, true}, {2, 4, 2, 200, 200, D, 64, 64, true},
      {1, 4, 1, 130, 300, D, 64, 64, false},  {1, 3, 3, 300, 130, D, 64, 64, true}};
  for (const test::BackwardDims& c : dims)
    for (Format dof : {Format::E5M2, Format::E4M3})
      for (Format dsf : {Format::E5M2, Format::E4M3}) {
        test::BackwardCodes bc(c, dof, 5);
        fl::BackwardParams& p = bc.p;
        p.ds_format = dsf;
        const int64_t rows = c.B * c.H * c.Tq;
        const std::string what = "D" + std::to_string(c.D) + " B" + std::to_string(c.B) + " H" +
                                 std::to_string(c.H) + "/G" + std::to_string(c.G) + " " +
                                 std::to_string(c.Tq) + "x" + std::to_string(c.Tk) +
                                 (c.causal ? " causal" : "") + " tile " + std::to_string(c.bq) + " dO " +
                                 to_string(dof) + " dS " + to_string(dsf);
        std::vector<float> out[3][3];  // mma_sync, wgmma, wgmma again x (dq, dk, dv)
        double res_max[2] = {0, 0};
        for (int r = 0; r < 3; ++r) {
          p.bwd_kernel = r == 0 ? fl::BackwardKernel::MmaSync : fl::BackwardKernel::Wgmma;
          p.res_sums = r < 2 ? bc.res_sums.p : nullptr;  // the third run: no residual sums
          fl::run_delta(p, nullptr);
          fl::run_backward_main(p, nullptr);
          out[r][0] = bc.dq.get(), out[r][1] = bc.dk.get(), out[r][2] = bc.dv.get();
          if (r < 2) {
            fl::bwd_residual_finish_launch(bc.res_sums.p, rows, bc.residual.p, nullptr);
            for (double x : bc.residual.get()) res_max[r] = std::max(res_max[r], x);
          }
        }
        const double eq = rel_l2(out[1][0], out[0][0]), ek = rel_l2(out[1][1], out[0][1]),
                     ev = rel_l2(out[1][2], out[0][2]), eq2 = rel_l2(out[2][0], out[1][0]);
        std::printf(
            "[wgmma bwd] %-44s vs mma_sync: dQ %.1e dK %.1e dV %.1e | residual "
            "wgmma %.1e mma_sync %.1e | rerun dQ %.1e\n",
            what.c_str(), eq, ek, ev, res_max[1], res_max[0], eq2);
        EXPECT_LE(eq, kGradTol) << what;
        EXPECT_LE(ek, kGradTol) << what;
        EXPECT_LE(ev, test::dv_tol_vs_twin()) << what;
        EXPECT_LE(res_max[1], 1e-6) << what;
        EXPECT_LE(eq2, 1e-5) << what;
        EXPECT_EQ(out[2][1], out[1][1]) << what << ": dK differs between two wgmma runs";
        EXPECT_EQ(out[2][2], out[1][2]) << what << ": dV differs between two wgmma runs";
        for (int t = 0; t < 3; ++t)
          for (float x : out[1][t]) ASSERT_TRUE(std::isfinite(x)) << what;
        double norm = 0;
        for (float x : out[1][0]) norm += double(x) * x;
        EXPECT_GT(norm, 0.0) << what << ": dQ must not be trivially zero";
        if (HasFailure()) return;
      }
}

// The wgmma kernel's dQ paths and product orders (BackwardParams::dq_tma: dQ staged in the spent
// operand stage and added by TMA bulk reduces, the default; sdp_overlap: Sᵀ and dPᵀ issued
// together, head_dim 64 only, the default there) against the first form (dQ by atomics, one
// product after the other): dK, dV and the residual sums the same bits
// (the variants change neither their products nor their order of addition; both poisoned before
// each run), dQ within FP32 atomic order (rel. L2 <= 1e-5, every element within 1e-5 of the
// largest), the pad rows Tq..Tq_p exactly 0, everything finite. Tq_p not a multiple of 128 (the
// last query block's box clips at the head's end), several heads, GQA, Tq != Tk, causal or not, a
// long walk (64 tile steps a CTA: the stage ring's reuse many times over), both dO formats, with
// and without residual sums; each variant run twice. An explicit dq_tma / sdp_overlap overrides
// the environment; -1 reads it. With 64 x 64 tiles (the warp-specialized kernel, dQ always by TMA:
// dq_tma is not read) the same runs compare the two product orders.
TEST_P(FlashBackwardWgmma, DqPathsAndProductOrdersAgree) {
  OCTET_REQUIRE_SM90();
  const int64_t D = GetParam();
  struct Run {
    test::BackwardDims c;
    Format dof;
  };
  const Run runs[] = {{{2, 8, 2, 300, 300, D, 128, 128, true}, Format::E5M2},
                      {{3, 4, 4, 257, 520, D, 128, 128, true}, Format::E4M3},
                      {{2, 6, 3, 400, 256, D, 128, 128, false}, Format::E5M2},
                      {{1, 8, 2, 2048, 2048, D, 128, 128, false}, Format::E5M2},
                      {{2, 8, 2, 300, 300, D, 64, 64, true}, Format::E5M2},
                      {{1, 8, 2, 2048, 2048, D, 64, 64, false}, Format::E4M3}};
  struct Variant {
    int dq_tma, sdp_overlap;
  };
  const Variant variants[] = {{1, 0}, {0, 1}, {1, 1}};
  for (const Run& run : runs)
    for (bool residual : {false, true}) {
      const test::BackwardDims& c = run.c;
      test::BackwardCodes bc(c, run.dof, 17);
      fl::BackwardParams& p = bc.p;
      p.bwd_kernel = fl::BackwardKernel::Wgmma;
      p.res_sums = residual ? bc.res_sums.p : nullptr;
      const std::string what = "D" + std::to_string(c.D) + " B" + std::to_string(c.B) + " H" +
                               std::to_string(c.H) + "/G" + std::to_string(c.G) + " " + std::to_string(c.Tq) +
                               "x" + std::to_string(c.Tk) + (c.causal ? " causal" : "") + " tile " +
                               std::to_string(c.bq) + " dO " + to_string(run.dof) +
                               (residual ? " residual sums" : "");
      fl::run_delta(p, nullptr);
      auto once = [&](const Variant& v, std::vector<float>(&out)[3], std::vector<double>& res) {
        p.dq_tma = v.dq_tma, p.sdp_overlap = v.sdp_overlap;
        for (test::Dev<float>* d : {&bc.dq, &bc.dk, &bc.dv})
          OCTET_CUDA_CHECK(cudaMemset(d->p, 0xFF, d->n * sizeof(float)));  // NaN (dQ is zeroed first)
        fl::run_backward_main(p, nullptr);
        out[0] = bc.dq.get(), out[1] = bc.dk.get(), out[2] = bc.dv.get();
        if (residual) res = bc.res_sums.get();
      };
      std::vector<float> base[3];
      std::vector<double> base_res;
      once({0, 0}, base, base_res);
      double peak = 0, norm = 0;
      for (float x : base[0]) peak = std::max(peak, double(std::fabs(x))), norm += double(x) * x;
      ASSERT_GT(norm, 0.0) << what << ": dQ must not be trivially zero";
      for (const Variant& v : variants)
        for (int again = 0; again < 2; ++again) {
          const std::string at = what + " dq_tma " + std::to_string(v.dq_tma) + " sdp_overlap " +
                                 std::to_string(v.sdp_overlap) + (again ? " (again)" : "");
          std::vector<float> out[3];
          std::vector<double> res;
          once(v, out, res);
          const double e = rel_l2(out[0], base[0]);
          if (!again)  // 64 x 64: dq_tma is not read, so the "atomics" base is a TMA run too
            std::printf("[wgmma bwd] %-58s dQ vs the %s run: rel. L2 %.1e\n", at.c_str(),
                        c.bq == 64 ? "first" : "atomics", e);
          EXPECT_LE(e, 1e-5) << at;
          EXPECT_EQ(out[1], base[1]) << at << ": dK moved";
          EXPECT_EQ(out[2], base[2]) << at << ": dV moved";
          if (residual) {
            ASSERT_EQ(res.size(), base_res.size());
            for (size_t i = 0; i < res.size(); ++i)
              ASSERT_NEAR(res[i], base_res[i], 1e-9 * (1.0 + std::fabs(base_res[i])))
                  << at << " residual sum " << i;
          }
          for (int64_t bh = 0; bh < c.B * c.H; ++bh)
            for (int64_t i = 0; i < bc.Tq_p; ++i)
              for (int64_t d = 0; d < c.D; ++d) {
                const size_t k = size_t((bh * bc.Tq_p + i) * c.D + d);
                const float x = out[0][k];
                ASSERT_TRUE(std::isfinite(x)) << at << ": dQ[" << bh << "][" << i << "][" << d << "]";
                if (i >= c.Tq)
                  ASSERT_EQ(x, 0.0f) << at << ": pad row " << i << " of head " << bh;
                else
                  ASSERT_LE(std::fabs(double(x) - base[0][k]), 1e-5 * peak)
                      << at << ": dQ[" << bh << "][" << i << "][" << d << "]";
              }
          if (HasFailure()) return;
        }
    }
}

// The wgmma matched pre-pass (flash_bwd_delta_sm90.cu: S and dP with queries as rows, the main
// kernel's bits in the other orientation): the main kernel's actual dS has a row residual <= 1e-6
// in every row — what the matched delta promises and what catches a wrong key, mask or product
// in the pre-pass (a rounding of P or dP alone would move it by ~1e-8, below that bound: the bits
// themselves are wgmma_roles_gpu_test.cu's); every row written (NaN before each run), rows that
// see no key included (causal with Tq > Tk: D = 0, row_factor 0); two runs give the same D bits;
// row_factor the mma.sync pre-pass's bits and the dO glue's rule (1/l of the forward's l, 0
// without keys) and D within 1e-2 of the
// largest |D| of it (the flavors' P and dP differ by ~1e-4 relative: D by <= 1.1e-3 of it measured
// on an H200; a coarse check beside the residual's). GQA, Tq != Tk, lengths that are not
// multiples of 128, both dO formats.
TEST_P(FlashBackwardWgmma, MatchedPrePassZeroesEveryRowSum) {
  OCTET_REQUIRE_SM90();
  const int64_t D = GetParam();
  struct Run {
    test::BackwardDims c;
    Format dof;
  };
  const Run runs[] = {{{2, 8, 2, 300, 300, D, 128, 128, true}, Format::E5M2},
                      {{3, 4, 4, 257, 520, D, 128, 128, true}, Format::E4M3},
                      {{2, 6, 3, 400, 256, D, 128, 128, false}, Format::E5M2},
                      {{1, 4, 1, 1024, 1024, D, 128, 128, false}, Format::E4M3},
                      {{2, 4, 2, 300, 130, D, 128, 128, true}, Format::E5M2}};  // 170 keyless rows
  for (const Run& run : runs) {
    const test::BackwardDims& c = run.c;
    test::BackwardCodes bc(c, run.dof, 7);
    fl::BackwardParams& p = bc.p;
    p.res_sums = bc.res_sums.p;
    const int64_t rows = c.B * c.H * c.Tq;
    const std::string at = "D" + std::to_string(c.D) + " H" + std::to_string(c.H) + "/G" +
                           std::to_string(c.G) + " " + std::to_string(c.Tq) + "x" + std::to_string(c.Tk) +
                           (c.causal ? " causal" : "") + " dO " + to_string(run.dof);
    std::vector<float> delta[3], rf[3];
    double res = 0;                // the wgmma run's largest row residual
    for (int r = 0; r < 3; ++r) {  // mma.sync, wgmma, wgmma again
      p.bwd_kernel = r == 0 ? fl::BackwardKernel::MmaSync : fl::BackwardKernel::Wgmma;
      // NaN bits first: a row the pre-pass does not write stays NaN
      OCTET_CUDA_CHECK(cudaMemset(bc.delta.p, 0xFF, size_t(rows) * sizeof(float)));
      OCTET_CUDA_CHECK(cudaMemset(bc.rf.p, 0xFF, size_t(rows) * sizeof(float)));
      fl::run_delta(p, nullptr);
      delta[r] = bc.delta.get(), rf[r] = bc.rf.get();
      if (r != 1) continue;
      fl::run_backward_main(p, nullptr);
      fl::bwd_residual_finish_launch(bc.res_sums.p, rows, bc.residual.p, nullptr);
      for (double x : bc.residual.get()) res = std::max(res, x);
      EXPECT_LE(res, 1e-6) << at;
    }
    EXPECT_EQ(rf[1], rf[0]) << at << ": row_factor";
    // the dO glue's rule from the forward's l (row_factor.h): the glue writes it before this pass
    const std::vector<float> l = bc.l.get();
    std::vector<float> rule(l.size());
    for (size_t i = 0; i < l.size(); ++i) rule[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    EXPECT_EQ(rf[1], rule) << at << ": row_factor is not 1/l of the forward's l (0 without keys)";
    EXPECT_EQ(delta[2], delta[1]) << at << ": D differs between two runs";
    double dmax = 0, diff = 0;
    for (float x : delta[0]) dmax = std::max(dmax, std::fabs(double(x)));
    for (int64_t i = 0; i < rows; ++i) diff = std::max(diff, std::fabs(double(delta[1][i]) - delta[0][i]));
    std::printf("[wgmma delta] %-36s residual %.1e | D vs mma.sync %.1e of max |D| %.2e\n", at.c_str(), res,
                diff / std::max(dmax, 1e-30), dmax);
    EXPECT_GT(dmax, 0.0) << at << ": D must not be trivially zero";
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_TRUE(std::isfinite(delta[1][i]) && std::isfinite(rf[1][i]))
          << at << " row " << i << " not written";
      ASSERT_LE(std::fabs(double(delta[1][i]) - delta[0][i]), 1e-2 * dmax + 1e-7) << at << " row " << i;
    }
  }
}

// OCTET_FLASH_BWD_DQ_TMA and OCTET_FLASH_BWD_SDP_OVERLAP: 0, 1 or unset (unset: 1, the timed
// defaults); anything else an octet::Error naming the variable, raised only when a call
// reads it (dq_tma / sdp_overlap -1), not when the call sets the value itself.
TEST(FlashBackwardWgmmaEnv, VariantSwitches) {
  OCTET_REQUIRE_SM90();
  struct Switch {
    const char* name;
    bool (*read)();
    int fl::BackwardParams::*field;
  };
  const Switch switches[] = {
      {"OCTET_FLASH_BWD_DQ_TMA", fl::backward_dq_tma, &fl::BackwardParams::dq_tma},
      {"OCTET_FLASH_BWD_SDP_OVERLAP", fl::backward_sdp_overlap, &fl::BackwardParams::sdp_overlap}};
  for (const Switch& sw : switches) {
    {
      test::ScopedEnv env(sw.name, "0");
      EXPECT_FALSE(sw.read()) << sw.name;
    }
    {
      test::ScopedEnv env(sw.name, "1");
      EXPECT_TRUE(sw.read()) << sw.name;
    }
    {
      test::ScopedEnv env(sw.name, nullptr);
      EXPECT_TRUE(sw.read()) << sw.name << ": the default";
    }
    test::ScopedEnv env(sw.name, "yes");
    test::BackwardCodes bc({1, 2, 2, 130, 130, 64, 128, 128, true}, Format::E5M2, 3);
    fl::BackwardParams& p = bc.p;
    p.bwd_kernel = fl::BackwardKernel::Wgmma;
    fl::run_delta(p, nullptr);
    for (int v : {0, 1}) {
      p.*sw.field = v;
      EXPECT_NO_THROW(fl::run_backward_main(p, nullptr))
          << sw.name << ": an explicit " << v << " reads no environment";
    }
    p.*sw.field = -1;
    try {
      fl::run_backward_main(p, nullptr);
      ADD_FAILURE() << sw.name << "=yes accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(sw.name), std::string::npos) << e.what();
    }
    OCTET_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDim, FlashBackwardWgmma, ::testing::Values(int64_t(64), int64_t(128)),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "D" + std::to_string(info.param);
                         });

TEST(FlashBackwardWgmmaEnv, RefusesUnknownEnvironmentValue) {
  OCTET_REQUIRE_GPU();
  BackwardEnv env("tensor_cores");
  fl::BackwardParams p;
  p.D = 64;
  try {
    (void)fl::select_backward_kernel(p);
    ADD_FAILURE() << "an unknown OCTET_FLASH_BACKWARD was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mma_sync or wgmma"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace octet
