// attention_test.cpp — the CUDA attention (src/cuda/attention/) against the CPU reference's
// whole-row form and the FP64 oracle (octet/attention.h), FP8 with stale and matched delta, and BF16.
//
// Tolerance rule of the attention reference (FlashAttention-3's test rule, its hopper/test_flash_attn.py):
// for each of O, dQ, dK, dV the relative L2 error of the GPU against the FP64 oracle must be at most twice
// the CPU reference's error in the same precision, plus a floor of 1e-3. Also: the matched delta's row
// residual max |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) <= 1e-5 (causal cases included, whose first
// row sees one key); the stale delta's is larger (it carries ε_i);
// the LSE agrees with the oracle to 1e-3 (FP8 logits); and bad configurations raise octet::Error.
// Saved state: two forwards then two backwards equal one at a time bitwise (fp8 matched, F32 and
// BF16 activations), and the row residual accumulates on the device (max, sum of means).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/fp8.h"

namespace octet {
namespace {

struct Case {
  int64_t b, h, g, tq, tk, d;
  bool causal;
  AttnInputDist dist;
};

TEST(CudaAttention, MatchesReferenceToleranceRule) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {2, 4, 2, 37, 37, 64, true, AttnInputDist::Normal},
      {1, 2, 2, 128, 128, 32, false, AttnInputDist::Sink},
      {1, 4, 1, 70, 150, 16, true, AttnInputDist::Heavy},  // Tq < Tk: bottom-right causal
      {1, 2, 1, 257, 257, 128, true, AttnInputDist::Sink},
  };
  for (const Case& c : cases) {
    AttentionShape s;
    s.batch = c.b, s.n_heads = c.h, s.n_kv_heads = c.g, s.seq_q = c.tq, s.seq_k = c.tk, s.head_dim = c.d,
    s.causal = c.causal;
    const auto in = make_attention_inputs(s, c.dist, 7);
    const auto ref = run_attention_oracle(s, in);
    double stale_residual = -1, matched_residual = -1;
    for (AttnPrecision prec : {AttnPrecision::FP8, AttnPrecision::BF16})
      for (DeltaMode delta : {DeltaMode::Stale, DeltaMode::Matched}) {
        if (prec == AttnPrecision::BF16 && delta == DeltaMode::Stale) continue;
        AttentionConfig cfg;
        cfg.precision = prec;
        cfg.delta = delta;
        const std::string what = to_string(prec) + "/" + to_string(delta) + " " + std::to_string(c.tq) + "x" +
                                 std::to_string(c.tk) + " d" + std::to_string(c.d) + " " + to_string(c.dist);
        // CPU reference, same precision and config
        std::vector<float> o(in.q.size()), lse(size_t(c.b * c.h * c.tq)), dq(in.q.size()), dk(in.k.size()),
            dv(in.k.size());
        AttentionSaved saved;
        AttentionStats cst;
        attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), &saved);
        attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), &cst);
        const auto ce = attention_errors(s, in, ref, o.data(), lse.data(), dq.data(), dk.data(), dv.data());
        const GpuRun g = run_gpu(*gpu, s, cfg, in);
        const auto ge =
            attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
        std::printf(
            "[attention] %-40s gpu/cpu rel err O %.2e/%.2e dQ %.2e/%.2e dK %.2e/%.2e dV "
            "%.2e/%.2e residual %.1e/%.1e\n",
            what.c_str(), ge.o_rel_err, ce.o_rel_err, ge.dq_rel_err, ce.dq_rel_err, ge.dk_rel_err,
            ce.dk_rel_err, ge.dv_rel_err, ce.dv_rel_err, g.stats.row_residual_max, cst.row_residual_max);
        EXPECT_LE(ge.o_rel_err, 2 * ce.o_rel_err + 1e-3) << what;
        EXPECT_LE(ge.dq_rel_err, 2 * ce.dq_rel_err + 1e-3) << what;
        EXPECT_LE(ge.dk_rel_err, 2 * ce.dk_rel_err + 1e-3) << what;
        EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << what;
        EXPECT_LE(ge.lse_max_abs_err, 2 * ce.lse_max_abs_err + 1e-3) << what;
        if (delta == DeltaMode::Matched) {
          EXPECT_LE(g.stats.row_residual_max, 1e-5) << what;
          if (prec == AttnPrecision::FP8) matched_residual = g.stats.row_residual_max;
        } else {
          stale_residual = g.stats.row_residual_max;
          // Same definition as the CPU (attention.h): the stale residual is ε_i relative to the
          // terms it should cancel, so its row mean agrees up to the GEMMs' FP32 summation order
          // (a different denominator, e.g. Σ_j |dS_ij|, moves it by tens of percent).
          EXPECT_NEAR(g.stats.row_residual_mean, cst.row_residual_mean, 0.1 * cst.row_residual_mean) << what;
        }
        if (HasFailure()) return;
      }
    EXPECT_GT(stale_residual, 10 * matched_residual) << "stale delta must break the zero row sum";
  }
}

// forward(1), forward(2), backward(1), backward(2) == forward(1), backward(1), forward(2),
// backward(2), bitwise (fp8 matched; F32 and BF16 activations; two attention objects); the
// residual accumulator holds max(max_1, max_2) and mean_1 + mean_2 in both schedules.
TEST(CudaAttention, TwoForwardsThenTwoBackwardsEqualOneAtATime) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  AttentionShape s;
  s.batch = 2, s.n_heads = 4, s.n_kv_heads = 2, s.seq_q = s.seq_k = 45, s.head_dim = 32, s.causal = true;
  AttentionConfig cfg;
  cfg.precision = AttnPrecision::FP8;
  cfg.delta = DeltaMode::Matched;
  const auto in1 = make_attention_inputs(s, AttnInputDist::Normal, 3);
  const auto in2 = make_attention_inputs(s, AttnInputDist::Sink, 4);
  for (DType act : {DType::F32, DType::BF16}) {
    auto a = gpu->make_attention(s, cfg), b = gpu->make_attention(s, cfg);
    AttnIo a1(*gpu, s, act), a2(*gpu, s, act), b1(*gpu, s, act), b2(*gpu, s, act);
    a1.set(*gpu, in1), b1.set(*gpu, in1), a2.set(*gpu, in2), b2.set(*gpu, in2);
    {
      const SavedAttention s1 = a->forward(a1.q, a1.k, a1.v, a1.o, a1.lse);
      const SavedAttention s2 = a->forward(a2.q, a2.k, a2.v, a2.o, a2.lse);
      a->backward(s1, a1.d_o, a1.dq, a1.dk, a1.dv, a1.residual);
      a->backward(s2, a2.d_o, a2.dq, a2.dk, a2.dv, a1.residual);  // one accumulator for both
    }
    {
      const SavedAttention s1 = b->forward(b1.q, b1.k, b1.v, b1.o, b1.lse);
      b->backward(s1, b1.d_o, b1.dq, b1.dk, b1.dv, b1.residual);
      const SavedAttention s2 = b->forward(b2.q, b2.k, b2.v, b2.o, b2.lse);
      b->backward(s2, b2.d_o, b2.dq, b2.dk, b2.dv, b2.residual);  // separate accumulators
    }
    for (auto [x, y] : {std::pair{&a1, &b1}, {&a2, &b2}}) {
      for (auto [t, u] : {std::pair{&x->o, &y->o},
                          {&x->lse, &y->lse},
                          {&x->dq, &y->dq},
                          {&x->dk, &y->dk},
                          {&x->dv, &y->dv}}) {
        const auto va = gpu->download_f32(*t), vb = gpu->download_f32(*u);
        bool nonzero = false;
        for (size_t i = 0; i < va.size(); ++i) {
          nonzero |= va[i] != 0.0f;
          ASSERT_TRUE(test::same_float(va[i], vb[i])) << to_string(act) << " at " << i;
        }
        EXPECT_TRUE(nonzero) << to_string(act) << ": an output is all zero (vacuous)";
      }
    }
    double acc[2], r1[2], r2[2];
    gpu->download(acc, a1.residual);
    gpu->download(r1, b1.residual);
    gpu->download(r2, b2.residual);
    EXPECT_EQ(acc[0], std::max(r1[0], r2[0])) << to_string(act);
    EXPECT_NEAR(acc[1], r1[1] + r2[1], 1e-15 + 1e-12 * (r1[1] + r2[1])) << to_string(act);
    EXPECT_LE(acc[0], 1e-5) << "matched residual";
    // A state of another attention is rejected.
    const SavedAttention other = a->forward(a1.q, a1.k, a1.v, a1.o, a1.lse);
    EXPECT_THROW(b->backward(other, a1.d_o, a1.dq, a1.dk, a1.dv, Tensor()), Error);
  }
}

TEST(CudaAttention, RefusesWhatItDoesNotImplement) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  AttentionShape s;
  s.head_dim = 64;
  AttentionConfig c;
  c.precision = AttnPrecision::FP64;
  EXPECT_THROW(gpu->make_attention(s, c), Error);
  c.precision = AttnPrecision::FP8;
  c.qkv_scaling = QkvScaling::HeadBlock;
  EXPECT_THROW(gpu->make_attention(s, c), Error);
  c.qkv_scaling = QkvScaling::Tensor;
  s.head_dim = 24;
  EXPECT_THROW(gpu->make_attention(s, c), Error);
}

}  // namespace
}  // namespace octet
