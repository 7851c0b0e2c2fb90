// The two execution forms against each other and against the oracle:
//  - in FP64 both forms are the oracle up to FP32 storage of the inputs/outputs;
//  - the backward of both forms is bit-identical on the same saved tensors (they share the tile
//    step and the accumulation order; only the loop nesting differs), so a GPU kernel checked
//    against the flash form is checked against the definition;
//  - the row residual each backward reports equals r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|)
//    recomputed here in FP64 from the saved operands and an independent quantization of dO.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "attention_test_util.h"

using namespace octet;

namespace {

TEST(Forms, Fp64FormsEqualTheOracle) {
  for (bool causal : {false, true}) {
    const auto s = test::make_shape(2, 4, 2, 50, 70, 24, causal);
    const auto in = make_attention_inputs(s, AttnInputDist::Sink, 8);
    const auto ref = run_attention_oracle(s, in);
    for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
      auto cfg = test::make_config(AttnPrecision::FP64, form, DeltaMode::Matched);
      cfg.block_q = 8, cfg.block_k = 16;  // many partial tiles
      const auto e = test::errors_of(s, in, ref, test::run_attention(s, cfg, in));
      EXPECT_LT(e.o_rel_err, 1e-6);
      EXPECT_LT(e.lse_max_abs_err, 1e-5);
      EXPECT_LT(e.dq_rel_err, 1e-6);
      EXPECT_LT(e.dk_rel_err, 1e-6);
      EXPECT_LT(e.dv_rel_err, 1e-6);
    }
  }
}

// With FP64 results (the double overloads) both forms are the oracle to FP64 rounding: nothing on
// the FP64 path is stored in FP32 (LSE, O, row max, dV's dO / l all stay double).
TEST(Forms, Fp64FormsEqualTheOracleTo1e12) {
  for (bool causal : {false, true}) {
    const auto s = test::make_shape(2, 4, 2, 50, 70, 24, causal);
    const auto in = make_attention_inputs(s, AttnInputDist::Sink, 8);
    const auto ref = run_attention_oracle(s, in);
    for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
      auto cfg = test::make_config(AttnPrecision::FP64, form, DeltaMode::Matched);
      cfg.block_q = 8, cfg.block_k = 16;
      std::vector<double> o(in.q.size()), lse(size_t(2 * 4 * 50)), dq(in.q.size()), dk(in.k.size()),
          dv(in.k.size());
      AttentionSaved saved;
      attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), &saved);
      attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), nullptr);
      const auto e = attention_errors(s, in, ref, o.data(), lse.data(), dq.data(), dk.data(), dv.data());
      const std::string what = to_string(form) + (causal ? " causal" : "");
      EXPECT_LT(e.o_rel_err, 1e-12) << what;
      EXPECT_LT(e.lse_max_abs_err, 1e-12) << what;
      EXPECT_LT(e.dq_rel_err, 1e-12) << what;
      EXPECT_LT(e.dk_rel_err, 1e-12) << what;
      EXPECT_LT(e.dv_rel_err, 1e-12) << what;
    }
  }
}

TEST(Forms, BackwardIsBitIdenticalAcrossForms) {
  const auto s = test::make_shape(1, 4, 2, 45, 61, 16, true);
  const auto in = make_attention_inputs(s, AttnInputDist::Heavy, 9);
  for (auto prec : {AttnPrecision::BF16, AttnPrecision::FP8})
    for (auto delta : {DeltaMode::Stale, DeltaMode::Matched}) {
      auto cfg = test::make_config(prec, AttnForm::Flash, delta);
      cfg.block_q = 16, cfg.block_k = 32;
      const auto flash = test::run_attention(s, cfg, in);
      AttentionSaved saved = flash.saved;
      saved.config.form = AttnForm::Whole;
      std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.k.size());
      AttentionStats st;
      attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), &st);
      EXPECT_EQ(0, std::memcmp(dq.data(), flash.dq.data(), dq.size() * 4));
      EXPECT_EQ(0, std::memcmp(dk.data(), flash.dk.data(), dk.size() * 4));
      EXPECT_EQ(0, std::memcmp(dv.data(), flash.dv.data(), dv.size() * 4));
      EXPECT_EQ(st.row_residual_max, flash.stats.row_residual_max);
    }
}

// The forward forms differ (P rounded after normalization vs per tile from exp(S − running
// max)) but by no more than FP8 rounding; with a single key block and BF16 both normalize by
// Σ P̃ of the same values up to one rescale.
TEST(Forms, FlashForwardIsCloseToWhole) {
  const auto s = test::make_shape(1, 2, 2, 200, 300, 32, true);
  const auto in = make_attention_inputs(s, AttnInputDist::Normal, 10);
  const auto ref = run_attention_oracle(s, in);
  for (auto prec : {AttnPrecision::BF16, AttnPrecision::FP8}) {
    const auto w = test::errors_of(
        s, in, ref, test::run_attention(s, test::make_config(prec, AttnForm::Whole, DeltaMode::Matched), in));
    const auto t = test::errors_of(
        s, in, ref, test::run_attention(s, test::make_config(prec, AttnForm::Flash, DeltaMode::Matched), in));
    EXPECT_LT(t.o_rel_err, 2 * w.o_rel_err + 1e-5);
    EXPECT_LT(t.lse_max_abs_err, 2 * w.lse_max_abs_err + 1e-5);
  }
}

// r_i = |Σ_j dS_ij| / Σ_j P_ij (|dP_ij| + |D_i|) with dS = P ∘ (dP − D), stale D = dO·O,
// recomputed in FP64 from the saved Q̂, K̂, V̂, O, LSE and dÔ quantized here from the OFP8
// definition; full and causal (whose first row sees one key).
TEST(Forms, ReportedResidualMatchesAnFp64Recomputation) {
  for (bool causal : {false, true}) {
    const auto s = test::make_shape(1, 2, 1, 40, 40, 16, causal);
    const auto in = make_attention_inputs(s, AttnInputDist::Normal, 11);
    const auto r = test::run_attention(
        s, test::make_config(AttnPrecision::FP8, AttnForm::Whole, DeltaMode::Stale), in, true);
    const auto do_hat = test::independent_do_hat_e5m2(in.d_o);
    const double tau = 1.0 / std::sqrt(16.0);
    const auto& sv = r.saved;
    ASSERT_EQ(r.stats.row_residual.size(), size_t(80));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 40; ++i) {
        const int64_t qo = (h * 40 + i) * 16;
        double d = 0, sum = 0, mag = 0;
        for (int64_t c = 0; c < 16; ++c) d += double(in.d_o[qo + c]) * sv.o[qo + c];
        for (int64_t j = 0; j < (causal ? i + 1 : 40); ++j) {
          double sd = 0, dp = 0;
          for (int64_t c = 0; c < 16; ++c) {
            sd += double(sv.q_hat[qo + c]) * sv.k_hat[j * 16 + c];
            dp += do_hat[qo + c] * sv.v_hat[j * 16 + c];
          }
          const double pr = std::exp(tau * sd - sv.lse[h * 40 + i]);
          sum += pr * (dp - d);
          mag += pr * (std::fabs(dp) + std::fabs(d));
        }
        const double want = std::fabs(sum) / mag;
        EXPECT_NEAR(r.stats.row_residual[size_t(h * 40 + i)], want, 1e-3 * want + 1e-6)
            << "row " << h << "," << i << (causal ? " causal" : "");
      }
  }
}

}  // namespace
