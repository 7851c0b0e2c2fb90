// Rows whose dO quantizes to zero (docs/delta-matching.md, "The saved softmax statistics": the
// search for rows with a row residual of exactly 1). A dO row 1e-20 times the others underflows
// E5M2's per-tensor scale: dÔ_i = 0, so dP_i = 0. The matched delta is then D_i = Σ_j P_ij dP_ij = 0
// and the row has dS = 0 and nothing to cancel: r_i = 0. The stale delta keeps D_i = dO_i·O_i ≠ 0
// from the unquantized dO, so dS_i = −P D_i has no cancellation at all: r_i = |D_i| Σ P / (|D_i| Σ P)
// = 1 up to rounding (and the denominator floor n·2^-126, ~1e-15 of it here) — the stale delta's
// error, not a numerical accident.
#include <gtest/gtest.h>

#include <cmath>

#include "attention_test_util.h"

using namespace octet;

namespace {

TEST(ZeroDoRows, MatchedReportsZeroStaleReportsOne) {
  const auto s = test::make_shape(1, 1, 1, 8, 64, 32, false);
  auto in = make_attention_inputs(s, AttnInputDist::Normal, 9);
  const int64_t row = 3;
  for (int64_t c = 0; c < s.head_dim; ++c) in.d_o[size_t(row * s.head_dim + c)] *= 1e-20f;
  for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
    const auto m =
        test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in, true);
    const auto st =
        test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Stale), in, true);
    EXPECT_EQ(m.stats.row_residual[row], 0.0) << to_string(form);
    EXPECT_LE(m.stats.row_residual_max, 1e-6) << to_string(form);
    EXPECT_NEAR(st.stats.row_residual[row], 1.0, 1e-6) << to_string(form);
  }
}

}  // namespace
