// Delta-Matching's key property (docs/design.md §"The two deltas"; Tang et al., arXiv 2609.37852): with the
// matched delta D_i = Σ_j P_ij dP_ij, every row of dS sums to zero up to FP32 rounding; with the stale delta
// D_i = dO_i·O_i, the FP8 rounding of P, V, dO and O leaves ε_i = Σ_j P_ij dP_ij − D_i, which becomes a bias
// of dQ along the attention-weighted mean key.
//
// Measured here (B1 H4 G2 T256 D64 causal, FP8 E4M3 Q/K/V/P, E5M2 dO/dS, seed 1), whole | flash,
// residual r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) (attention.h):
//   matched row residual max:   normal 1.1e-7 | 1.0e-7, heavy 2.2e-7 | 2.3e-7, sink 3.8e-7 | 3.8e-7
//   stale row residual mean:    normal 9.2e-3, heavy 1.2e-2, sink 5.4e-2
//   stale row residual max:     normal 0.24, heavy 0.22 | 0.19, sink 0.98
//   dQ error along the mean key (relative to |dQ|): matched 0.04–0.08, stale 0.09–0.28.
// (Numbers from `octet attention-check`, docs/delta-matching.md; the asserts below leave margin.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attention_test_util.h"

using namespace octet;

namespace {

struct DmCase {
  AttnInputDist dist;
  AttnForm form;
};

class DeltaMatching : public ::testing::TestWithParam<DmCase> {};

TEST_P(DeltaMatching, MatchedClosesTheRowResidualStaleDoesNot) {
  const auto [dist, form] = GetParam();
  const auto s = test::make_shape(1, 4, 2, 256, 256, 64, true);
  const auto in = make_attention_inputs(s, dist, 1);
  const auto ref = run_attention_oracle(s, in);
  const auto matched =
      test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in);
  const auto stale =
      test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Stale), in);
  const auto& m = matched.stats;
  const auto& st = stale.stats;
  EXPECT_LE(m.row_residual_max, 1e-5);
  EXPECT_GE(st.row_residual_max, 100 * m.row_residual_max);
  EXPECT_GE(st.row_residual_mean, 100 * m.row_residual_mean);
  EXPECT_GT(st.row_residual_mean, 1e-3);  // the stale residual is not rounding noise

  // The stale ε_i biases dQ along Σ_j P_ij K_j (keys have a non-zero mean in every dist).
  const auto em = test::errors_of(s, in, ref, matched), es = test::errors_of(s, in, ref, stale);
  EXPECT_LT(em.dq_bias_mean_key, es.dq_bias_mean_key);
  EXPECT_LT(em.dq_rel_err, es.dq_rel_err);
  // The forward does not depend on the delta.
  EXPECT_EQ(matched.o, stale.o);
}

INSTANTIATE_TEST_SUITE_P(Fp8, DeltaMatching,
                         ::testing::Values(DmCase{AttnInputDist::Normal, AttnForm::Whole},
                                           DmCase{AttnInputDist::Heavy, AttnForm::Whole},
                                           DmCase{AttnInputDist::Sink, AttnForm::Whole},
                                           DmCase{AttnInputDist::Normal, AttnForm::Flash},
                                           DmCase{AttnInputDist::Heavy, AttnForm::Flash},
                                           DmCase{AttnInputDist::Sink, AttnForm::Flash}),
                         [](const auto& info) {
                           return to_string(info.param.dist) + "_" + to_string(info.param.form);
                         });

// In FP64 the matched delta is exact to FP64 rounding, and the stale one only suffers from O
// being stored in FP32: both residuals are far below any FP8 effect.
TEST(DeltaMatching, Fp64ResidualsAreRoundingOnly) {
  const auto s = test::make_shape(1, 2, 1, 64, 64, 32, true);
  const auto in = make_attention_inputs(s, AttnInputDist::Normal, 2);
  const auto m =
      test::run_attention(s, test::make_config(AttnPrecision::FP64, AttnForm::Whole, DeltaMode::Matched), in);
  const auto st =
      test::run_attention(s, test::make_config(AttnPrecision::FP64, AttnForm::Whole, DeltaMode::Stale), in);
  EXPECT_LE(m.stats.row_residual_max, 1e-13);
  EXPECT_LE(st.stats.row_residual_mean, 1e-5);
}

// The residual's denominator Σ_j P_ij (|dP_ij| + |D_i|) keeps it meaningful in rows whose exact dS
// is 0. Causal row 0 sees one key: P_00 = 1 and dS_00 = dP_00 − D_0, exactly 0 with the matched D
// and ε_0 with the stale one. The former normalization Σ_j |dS_ij| = |ε_0| made that row's ratio
// |ε_0| / |ε_0| = 1 for any ε_0 ≠ 0 however small (and 0/0 for matched): the max over rows sat at
// 1.0 in every arm. Now row 0 reports matched ≈ 0 and stale = |ε_0| / (|dP_00| + |D_0|), the
// relative error of the stale delta, recomputed here in FP64 from the saved operands.
TEST(DeltaMatching, ResidualIsMeaningfulInARowThatSeesOneKey) {
  const auto s = test::make_shape(1, 4, 2, 64, 64, 32, true);
  for (auto dist : {AttnInputDist::Normal, AttnInputDist::Sink}) {
    const auto in = make_attention_inputs(s, dist, 12);
    const auto do_hat = test::independent_do_hat_e5m2(in.d_o);
    for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
      const std::string what = to_string(dist) + " " + to_string(form);
      const auto m =
          test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in, true);
      const auto st =
          test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Stale), in, true);
      EXPECT_LE(m.stats.row_residual_max, 1e-5) << what;
      double stale_row0_mean = 0;
      for (int64_t h = 0; h < 4; ++h) {
        const size_t row0 = size_t(h * 64);                      // (b 0, h, i 0)
        const int64_t qo = h * 64 * 32, ko = (h / 2) * 64 * 32;  // query row 0, key 0 of its KV head
        double dp = 0, d = 0;
        for (int64_t c = 0; c < 32; ++c) {
          dp += do_hat[size_t(qo + c)] * st.saved.v_hat[size_t(ko + c)];
          d += double(in.d_o[size_t(qo + c)]) * st.saved.o[size_t(qo + c)];
        }
        const double eps = dp - d;
        ASSERT_NE(eps, 0.0) << what;  // so the former ratio |ε| / |ε| was exactly 1 here
        const double want = std::fabs(eps) / (std::fabs(dp) + std::fabs(d));
        EXPECT_NEAR(st.stats.row_residual[row0], want, 1e-3 * want + 1e-6) << what << " head " << h;
        EXPECT_LT(st.stats.row_residual[row0], 0.5) << what << " head " << h;
        EXPECT_LE(m.stats.row_residual[row0], 1e-6) << what << " head " << h;
        stale_row0_mean += st.stats.row_residual[row0] / 4;
      }
      // The stale delta's error in the one-key rows is visible against matched's rounding.
      EXPECT_GE(stale_row0_mean, 1e-3) << what;
      EXPECT_GE(st.stats.row_residual_max, 100 * m.stats.row_residual_max) << what;
    }
  }
}

// With V constant along the keys, dP_ij = dÔ_i·V̂ does not depend on j, so the exact dS is 0 and
// dQ = dK = 0 (a common shift of a row's logits changes nothing). Matched reproduces that to
// rounding; stale takes D from the unrounded dO and the stored O and leaves dQ ≠ 0.
TEST(DeltaMatching, ConstantValuesGiveZeroDqOnlyWhenMatched) {
  const auto s = test::make_shape(1, 2, 2, 96, 96, 32, false);
  auto in = make_attention_inputs(s, AttnInputDist::Normal, 4);
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t j = 0; j < 96; ++j)
      for (int64_t c = 0; c < 32; ++c) in.v[(g * 96 + j) * 32 + c] = 0.25f * float(c % 5);
  for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
    const auto m =
        test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in);
    const auto st = test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Stale), in);
    auto max_abs = [](const std::vector<float>& x) {
      float m = 0;
      for (float e : x) m = std::max(m, std::fabs(e));
      return m;
    };
    // Unit-variance inputs: an O(1) error of D gives |dQ| ~ 0.1–1; rounding gives ~1e-6.
    EXPECT_GE(max_abs(st.dq), 1e-2f) << to_string(form);
    EXPECT_LE(max_abs(m.dq), 1e-3f * max_abs(st.dq)) << to_string(form);
  }
}

}  // namespace
