// flash_backward_test.cpp — the flash FP8 attention backward (src/cuda/attention/flash/flash.h,
// run by the CUDA attention for form 'flash' after the flash forward) against its CPU twin, the flash
// form's backward with the same config (src/cpu/attention_flash.cpp), and the FP64 oracle.
//
// Tolerances. The kernels compute the twin's formulas on the same tiles (block_q x block_k) with
// other FP32 summation orders (S, dP and the dV/dK/dQ products inside the tensor core; the
// forward's m, l from lane partials): a dŜ or P̃ code then differs by one rounding step only where
// a value lies within FP32 rounding of a rounding boundary (a dŜ flip in E5M2 moves one term by up
// to 1/4 of itself, rare), so the gradients agree with the twin to 1e-2 relative L2 (dV after the
// wgmma forward: flash_backward_codes.h dv_tol_vs_twin; dQ, dK: grad_tol_vs_twin) (the
// bound of flash_forward_test.cpp's unfused backward after the flash forward; set from this
// estimate, not yet measured on a GPU). Every result obeys FlashAttention-3's rule against the FP64
// oracle (FlashAttention-3's test rule): error <= 2 x the CPU twin's error + 1e-3.
// Delta-Matching: the matched row residual of the kernel's actual dS is <= 1e-6 in every row (the
// pre-pass forms P and dP with the main kernel's bits — the mma.sync flavor by its very device
// functions, the wgmma one by the same instructions with the operand roles swapped — so D_i is
// computed from the very P and dP dS uses), also with large logits; the stale residual is > 10x the matched
// one. Identities: dO = 0 gives dQ = dK = dV = 0 exactly; all-zero inputs too; a row that sees no key
// (causal, Tq > Tk) gets dQ = 0, everything finite. Deterministic mode (the Q-block-major dQ
// kernel) gives identical bits on two runs and the atomic dQ to 1e-5; dK, dV (fixed order in both
// modes) are bitwise equal across runs and modes. Unsupported block sizes raise octet::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention/attention_test_util.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/attention/flash/flash_backward_codes.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/attention/flash/flash_persistent.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"

namespace octet {
namespace {

using test::fused_config;
using test::rel_l2;

struct Case {
  int64_t h, g, tq, tk, d;
  bool causal;
  int64_t block_q, block_k;
};

TEST(FlashBackward, MatchesCpuFlashTwinAndOracle) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {2, 2, 1, 1, 64, false, 128, 128},       {2, 1, 17, 17, 128, true, 64, 64},
      {2, 2, 127, 127, 64, true, 64, 128},     {2, 2, 129, 129, 128, false, 128, 64},
      {2, 1, 1000, 1000, 128, true, 128, 128}, {2, 2, 1000, 1000, 64, false, 64, 64},
      {4, 2, 64, 256, 128, true, 128, 128},    {4, 4, 64, 256, 64, true, 64, 64},
      {8, 2, 150, 150, 64, true, 128, 128},    {8, 1, 150, 150, 128, false, 64, 128},
      {8, 2, 129, 300, 128, false, 128, 64},   {8, 1, 200, 90, 64, true, 64, 64},
  };
  for (const Case& c : cases) {
    const AttentionShape s = test::make_shape(1, c.h, c.g, c.tq, c.tk, c.d, c.causal);
    const auto in = make_attention_inputs(s, AttnInputDist::Normal, 23);
    const auto ref = run_attention_oracle(s, in);
    double residual[2] = {-1, -1};  // stale, matched
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const AttentionConfig cfg = fused_config(delta, c.block_q, c.block_k);
      const std::string what =
          "H" + std::to_string(c.h) + "/G" + std::to_string(c.g) + " " + std::to_string(c.tq) + "x" +
          std::to_string(c.tk) + " d" + std::to_string(c.d) + (c.causal ? " causal" : "") + " tile " +
          std::to_string(c.block_q) + "x" + std::to_string(c.block_k) + " " + to_string(delta);
      const test::RunResult cpu = test::run_attention(s, cfg, in);
      const GpuRun g = run_gpu(*gpu, s, cfg, in);
      const double eq = rel_l2(g.dq, cpu.dq), ek = rel_l2(g.dk, cpu.dk), ev = rel_l2(g.dv, cpu.dv);
      const auto ce = test::errors_of(s, in, ref, cpu);
      const auto ge =
          attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
      std::printf(
          "[flash bwd] %-48s vs twin: dQ %.1e dK %.1e dV %.1e | vs FP64 gpu/cpu: dQ "
          "%.2e/%.2e dK %.2e/%.2e dV %.2e/%.2e | residual %.1e/%.1e\n",
          what.c_str(), eq, ek, ev, ge.dq_rel_err, ce.dq_rel_err, ge.dk_rel_err, ce.dk_rel_err, ge.dv_rel_err,
          ce.dv_rel_err, g.stats.row_residual_max, cpu.stats.row_residual_max);
      const double tol = test::grad_tol_vs_twin(c.d, c.block_q, c.block_k);  // by flavor
      if (!test::stale_reads_wgmma_o(delta)) {  // else the FP64-oracle rule below is the check
        EXPECT_LE(eq, tol) << what;
        EXPECT_LE(ek, tol) << what;
      }
      EXPECT_LE(ev, test::dv_tol_vs_twin()) << what;
      EXPECT_LE(ge.dq_rel_err, 2 * ce.dq_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dk_rel_err, 2 * ce.dk_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << what;
      EXPECT_TRUE(test::all_finite(g.dq) && test::all_finite(g.dk) && test::all_finite(g.dv)) << what;
      if (delta == DeltaMode::Matched) {
        EXPECT_LE(g.stats.row_residual_max, 1e-6) << what;
      }
      residual[delta == DeltaMode::Matched] = g.stats.row_residual_max;
      if (HasFailure()) return;
    }
    EXPECT_GT(residual[0], 10 * residual[1]) << "stale must break the zero row sum";
  }
}

// dO = 0: dP = 0, D = 0, dS = 0, dV = P̃ᵀ·0: every gradient exactly 0. All inputs 0 too (P uniform,
// dS = 0). Tq > Tk causal: the first Tq − Tk rows see no key: dQ = 0 there, all finite.
TEST(FlashBackward, ZerosAndRowsWithoutKeys) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(1, 4, 2, 150, 70, 128, true);
  for (int mode = 0; mode < 3; ++mode) {  // 0: dO = 0, 1: all zero, 2: random
    auto in = make_attention_inputs(s, AttnInputDist::Normal, 9);
    if (mode <= 1) std::fill(in.d_o.begin(), in.d_o.end(), 0.0f);
    if (mode == 1)
      for (auto* x : {&in.q, &in.k, &in.v}) std::fill(x->begin(), x->end(), 0.0f);
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const GpuRun g = run_gpu(*gpu, s, fused_config(delta, 64, 64), in);
      const std::string what = "mode " + std::to_string(mode) + " " + to_string(delta);
      for (const auto* x : {&g.dq, &g.dk, &g.dv}) {
        ASSERT_TRUE(test::all_finite(*x)) << what;
        if (mode <= 1) {
          for (float v : *x) ASSERT_EQ(v, 0.0f) << what;
        }
      }
      for (int64_t h = 0; h < s.n_heads; ++h)
        for (int64_t i = 0; i < s.seq_q - s.seq_k; ++i)  // rows without a key
          for (int64_t c = 0; c < s.head_dim; ++c)
            ASSERT_EQ(g.dq[size_t((h * s.seq_q + i) * s.head_dim + c)], 0.0f) << what << " row " << i;
    }
  }
}

// Large logits (S ~ 60-110): the matched residual of the actual dS stays <= 1e-6 (D from the same
// P and dP, divided by their own Σ P).
TEST(FlashBackward, LargeLogitsMatchedResidual) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(1, 2, 1, 1024, 1024, 64, true);
  const auto in = test::large_logit_inputs(s, 3.2f, 21);
  const GpuRun g = run_gpu(*gpu, s, fused_config(DeltaMode::Matched), in);
  float lse_max = 0;
  for (float x : g.lse) lse_max = std::max(lse_max, std::fabs(x));
  std::printf("[flash bwd] large logits (max |LSE| %.1f): matched residual max %.2e\n", lse_max,
              g.stats.row_residual_max);
  EXPECT_GT(lse_max, 50.0f) << "the inputs must give large logits";
  EXPECT_LE(g.stats.row_residual_max, 1e-6);
}

// The kernels directly on random codes (scales 1): deterministic mode twice gives identical bits;
// the atomic dQ agrees with it to FP32 summation order; dK, dV are the same bits in both modes.
TEST(FlashBackward, DeterministicModeIsBitwiseRepeatable) {
  OCTET_REQUIRE_GPU();
  for (const test::BackwardDims& c : {test::BackwardDims{2, 4, 2, 200, 200, 64, 64, 64, true},
                                      test::BackwardDims{1, 4, 1, 130, 300, 128, 128, 128, false},
                                      test::BackwardDims{1, 2, 2, 257, 257, 128, 64, 128, true}}) {
    test::BackwardCodes bc(c, Format::E5M2, 5);
    cuda::flash::BackwardParams& p = bc.p;
    p.bwd_kernel = cuda::flash::BackwardKernel::MmaSync;  // the mma.sync kernels' deterministic mode
    auto &dq = bc.dq, &dk = bc.dk, &dv = bc.dv;
    cuda::flash::run_delta(p, nullptr);
    std::vector<float> runs[3][3];  // deterministic, deterministic, atomic x (dq, dk, dv)
    for (int r = 0; r < 3; ++r) {
      p.deterministic = r < 2;
      cuda::flash::run_backward_main(p, nullptr);
      runs[r][0] = dq.get(), runs[r][1] = dk.get(), runs[r][2] = dv.get();
    }
    const std::string what = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + "/G" +
                             std::to_string(c.G) + " " + std::to_string(c.Tq) + "x" + std::to_string(c.Tk) +
                             " d" + std::to_string(c.D);
    for (int t = 0; t < 3; ++t) {
      for (float x : runs[0][t]) ASSERT_TRUE(std::isfinite(x)) << what;
      ASSERT_EQ(std::memcmp(runs[0][t].data(), runs[1][t].data(), runs[0][t].size() * 4), 0)
          << what << " output " << t << " differs between two deterministic runs";
      if (t > 0) {
        ASSERT_EQ(std::memcmp(runs[0][t].data(), runs[2][t].data(), runs[0][t].size() * 4), 0)
            << what << " dK/dV differ between the modes";
      }
    }
    const double e = rel_l2(runs[2][0], runs[0][0]);
    std::printf("[flash bwd] %s: atomic vs deterministic dQ rel L2 %.1e\n", what.c_str(), e);
    EXPECT_LE(e, 1e-5) << what;
    double norm = 0;
    for (float x : runs[0][0]) norm += double(x) * x;
    EXPECT_GT(norm, 0.0) << what << ": dQ must not be trivially zero";
  }
}

// The work order (ForwardParams::head_group and BackwardParams::key_head_group: heads taken N at a
// time, 0 all in one group) moves no bit: for each flavor, the delta pre-pass's D and 1/l and the
// main kernel's dK, dV are the same bits under groups 1, 3, 5 and 64 as under 0, and dQ too in
// deterministic mode (with atomics within FP32 summation order); every output is poisoned (NaN
// bytes) before each run, so a work item that no CTA takes shows. GQA, causal, Tq != Tk, both
// head_dims, partial last groups (8 heads in groups of 3 and 5);
// OCTET_FLASH_HEAD_GROUP and OCTET_FLASH_BWD_HEAD_GROUP choose the defaults, and a value that is not
// a whole number is an octet::Error.
TEST(FlashBackward, HeadGroupMovesNoBit) {
  OCTET_REQUIRE_GPU();
  using cuda::flash::BackwardKernel;
  for (const test::BackwardDims& c : {test::BackwardDims{2, 8, 2, 300, 300, 64, 128, 128, true},
                                      test::BackwardDims{3, 4, 4, 257, 520, 128, 128, 128, true},
                                      test::BackwardDims{2, 6, 3, 400, 256, 128, 128, 128, false}})
    for (BackwardKernel kernel : {BackwardKernel::MmaSync, BackwardKernel::Wgmma}) {
      if (kernel == BackwardKernel::Wgmma && !test::device_is_sm90()) continue;
      test::BackwardCodes bc(c, Format::E5M2, 11);
      cuda::flash::BackwardParams& p = bc.p;
      p.bwd_kernel = kernel;
      p.deterministic = kernel == BackwardKernel::MmaSync;
      const std::string what = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + "/G" +
                               std::to_string(c.G) + " " + std::to_string(c.Tq) + "x" + std::to_string(c.Tk) +
                               " d" + std::to_string(c.D) + " " + cuda::flash::backward_kernel_name(kernel);
      std::vector<float> base[5];  // delta, dq, dk, dv, 1/l under group 0
      const char* names[5] = {"delta", "dQ", "dK", "dV", "1/l"};
      for (int group : {0, 1, 3, 5, 64}) {
        p.head_group = p.key_head_group = group;
        for (test::Dev<float>* d : {&bc.delta, &bc.dq, &bc.dk, &bc.dv, &bc.rf})
          OCTET_CUDA_CHECK(cudaMemset(d->p, 0xFF, d->n * sizeof(float)));  // NaN
        cuda::flash::run_delta(p, nullptr);
        cuda::flash::run_backward_main(p, nullptr);
        std::vector<float> got[5] = {bc.delta.get(), bc.dq.get(), bc.dk.get(), bc.dv.get(), bc.rf.get()};
        const std::string at = what + " head_group " + std::to_string(group);
        for (float x : got[0]) ASSERT_TRUE(std::isfinite(x)) << at << ": a delta not written";
        if (group == 0) {
          for (int t = 0; t < 5; ++t) base[t] = got[t];
          continue;
        }
        for (int t : {0, 2, 3, 4})
          ASSERT_EQ(std::memcmp(got[t].data(), base[t].data(), got[t].size() * 4), 0)
              << at << ": " << names[t] << " moved";
        if (p.deterministic)
          ASSERT_EQ(std::memcmp(got[1].data(), base[1].data(), got[1].size() * 4), 0) << at << ": dQ moved";
        else
          EXPECT_LE(rel_l2(got[1], base[1]), 1e-5) << at;
      }
    }
  {
    test::ScopedEnv env("OCTET_FLASH_HEAD_GROUP", "4");
    EXPECT_EQ(cuda::flash::flash_head_group(), 4);
    EXPECT_EQ(cuda::flash::resolved_head_group(-1), 4);
    EXPECT_EQ(cuda::flash::resolved_head_group(2), 2);
  }
  for (const char* bad : {"-1", "two", "4x", "1234567"}) {
    test::ScopedEnv env("OCTET_FLASH_HEAD_GROUP", bad);
    try {
      (void)cuda::flash::flash_head_group();
      ADD_FAILURE() << "OCTET_FLASH_HEAD_GROUP=" << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("whole number"), std::string::npos) << e.what();
    }
  }
  test::ScopedEnv env("OCTET_FLASH_HEAD_GROUP", nullptr);
  EXPECT_EQ(cuda::flash::flash_head_group(), cuda::flash::kDefaultHeadGroup);
  {
    test::ScopedEnv bwd("OCTET_FLASH_BWD_HEAD_GROUP", "7");
    EXPECT_EQ(cuda::flash::backward_key_head_group(64, 32, BackwardKernel::Wgmma), 7);
  }
  {
    test::ScopedEnv bwd("OCTET_FLASH_BWD_HEAD_GROUP", nullptr);
    int dev = 0, sms = 0;
    OCTET_CUDA_CHECK(cudaGetDevice(&dev));
    OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    EXPECT_EQ(cuda::flash::backward_key_head_group(64, 32, BackwardKernel::Wgmma),
              cuda::flash::auto_key_head_group(64, 32, sms));
    EXPECT_EQ(cuda::flash::backward_key_head_group(64, 32, BackwardKernel::MmaSync), 0)
        << "the mma.sync flavor keeps one group until it is timed";
  }
  for (const char* bad : {"-2", "x", "1000000"}) {
    test::ScopedEnv bwd("OCTET_FLASH_BWD_HEAD_GROUP", bad);
    try {
      (void)cuda::flash::backward_key_head_group(64, 32, BackwardKernel::Wgmma);
      ADD_FAILURE() << "OCTET_FLASH_BWD_HEAD_GROUP=" << bad << " accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("OCTET_FLASH_BWD_HEAD_GROUP"), std::string::npos) << m;
      std::string quoted = "'";
      quoted.append(bad).push_back('\'');
      EXPECT_NE(m.find(quoted), std::string::npos) << m;
    }
  }
}

TEST(FlashBackward, RefusesUnsupportedTiles) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (int64_t bq : {32, 96, 256}) {
    try {
      gpu->make_attention(test::make_shape(1, 2, 2, 16, 16, 64, false),
                          fused_config(DeltaMode::Matched, bq, 128));
      ADD_FAILURE() << "block_q " << bq << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("64 or 128"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace octet
