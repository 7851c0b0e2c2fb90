// "P without underflow" (docs/delta-matching.md): the FP8 P̃ is rounded from the row-max-relative
// exp(S − m) <= 1 and the row factor 1/l_i lives in O (forward) and in dV's dO operand (backward).
// Rounding the normalized exp(S − L) instead loses long rows: a flat row over 2^18 keys has
// P = 2^-18, below E4M3's smallest subnormal 2^-9 after the static ×256, so O and dV were 0.
//  - Q = 0 (flat rows) and V = 1: O = 1 exactly at every length up to 2^19 keys, in both forms;
//    dV = Σ_i dO_i / Tk matches the FP64 oracle instead of being 0.
//  - Normal inputs: the O and dV errors at 2^17 keys stay within 1.5x of their values at 4096.
// The longest cases use one head, few queries and a small head dim to stay fast under ASan.
#include <gtest/gtest.h>

#include <algorithm>

#include "attention_test_util.h"

using namespace octet;

namespace {

TEST(LongRows, FlatRowsKeepTheirProbability) {
  for (int64_t tk : {int64_t(4096), int64_t(1) << 19})  // 2^19: ~10 s under ASan, the slowest
    for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
      const auto s = test::make_shape(1, 1, 1, 2, tk, 16, false);
      auto in = make_attention_inputs(s, AttnInputDist::Normal, 3);
      std::fill(in.q.begin(), in.q.end(), 0.0f);
      std::fill(in.v.begin(), in.v.end(), 1.0f);
      const std::string what = "Tk " + std::to_string(tk) + " " + to_string(form);
      const auto r =
          test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in);
      for (float x : r.o) ASSERT_EQ(x, 1.0f) << what;
      const auto ref = run_attention_oracle(s, in);
      const auto e = test::errors_of(s, in, ref, r);
      // dV's operand dO_i / l_i is E5M2 (relative step 2^-2): the sum over 2 rows keeps ~0.1.
      EXPECT_LT(e.dv_rel_err, 0.15) << what;
      EXPECT_LE(r.stats.row_residual_max, 1e-6) << what;
    }
}

TEST(LongRows, ErrorsDoNotGrowWithTheRowLength) {
  const int64_t tq = 8, d = 32;
  for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
    AttentionErrors e[2];
    int k = 0;
    for (int64_t tk : {int64_t(4096), int64_t(1) << 17}) {
      const auto s = test::make_shape(1, 1, 1, tq, tk, d, false);
      const auto in = make_attention_inputs(s, AttnInputDist::Normal, 11);
      const auto r =
          test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in);
      e[k++] = test::errors_of(s, in, run_attention_oracle(s, in), r);
      EXPECT_LE(r.stats.row_residual_max, 1e-6) << to_string(form) << " Tk " << tk;
    }
    EXPECT_LE(e[1].o_rel_err, 1.5 * e[0].o_rel_err) << to_string(form);
    EXPECT_LE(e[1].dv_rel_err, 1.5 * e[0].dv_rel_err) << to_string(form);
  }
}

}  // namespace
