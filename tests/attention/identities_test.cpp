// Identities every precision and both forms must satisfy exactly or to rounding, whatever the
// FP8 error elsewhere: softmax weights sum to one (V = 1 gives O = 1 in every row that sees a
// key, up to 8192 keys), zero in gives zero out, and rows that see no key (causal, Tq > Tk) give
// O = 0, LSE = −inf, dQ = 0 and no NaN anywhere.
#include <gtest/gtest.h>

#include <cmath>

#include "attention_test_util.h"

using namespace octet;

namespace {

struct IdCase {
  AttnPrecision precision;
  AttnForm form;
};

class Identities : public ::testing::TestWithParam<IdCase> {};

TEST_P(Identities, AllOnesValuesGiveOnesOutput) {
  const auto [prec, form] = GetParam();
  // Causal, Tq < Tk: bottom-right alignment lets every row see keys, up to 8192 of them.
  for (int64_t tk : {int64_t(1), int64_t(129), int64_t(8192)}) {
    const auto s = test::make_shape(1, 2, 1, 3, tk, 16, true);
    auto in = make_attention_inputs(s, AttnInputDist::Heavy, 5);
    std::fill(in.v.begin(), in.v.end(), 1.0f);
    const auto r = test::run_attention(s, test::make_config(prec, form, DeltaMode::Matched), in);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 3; ++i) {
        const bool sees_key = i + tk - 3 >= 0;  // bottom-right: row i sees keys j <= i + Tk − Tq
        for (int64_t c = 0; c < 16; ++c)
          ASSERT_NEAR(r.o[(h * 3 + i) * 16 + c], sees_key ? 1.0f : 0.0f, 1e-6f) << "Tk " << tk;
      }
    EXPECT_TRUE(test::all_finite(r.dq) && test::all_finite(r.dk) && test::all_finite(r.dv));
  }
}

TEST_P(Identities, ZeroInputsGiveZeroOutputsAndGradients) {
  const auto [prec, form] = GetParam();
  const auto s = test::make_shape(1, 4, 2, 40, 40, 32, true);
  AttentionInputs in;
  in.q.assign(size_t(4 * 40 * 32), 0.0f);
  in.d_o = in.q;
  in.k.assign(size_t(2 * 40 * 32), 0.0f);
  in.v = in.k;
  for (auto delta : {DeltaMode::Stale, DeltaMode::Matched}) {
    const auto r = test::run_attention(s, test::make_config(prec, form, delta), in);
    for (auto* t : {&r.o, &r.dq, &r.dk, &r.dv})
      for (float x : *t) ASSERT_EQ(x, 0.0f);
    // S = 0: uniform attention over the i + 1 visible keys, LSE = log(i + 1).
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 40; ++i) EXPECT_NEAR(r.lse[h * 40 + i], std::log(double(i + 1)), 1e-6);
    EXPECT_EQ(r.stats.row_residual_max, 0.0);
  }
}

TEST_P(Identities, RowsThatSeeNoKeyAreZeroAndNotNan) {
  const auto [prec, form] = GetParam();
  const auto s = test::make_shape(1, 2, 1, 5, 3, 8, true);  // query i sees keys j <= i − 2
  const auto in = make_attention_inputs(s, AttnInputDist::Normal, 6);
  const auto ref = run_attention_oracle(s, in);
  for (auto delta : {DeltaMode::Stale, DeltaMode::Matched}) {
    const auto r = test::run_attention(s, test::make_config(prec, form, delta), in);
    for (auto* t : {&r.o, &r.dq, &r.dk, &r.dv}) EXPECT_TRUE(test::all_finite(*t));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        const float lse = r.lse[h * 5 + i];
        if (i < 2) {
          EXPECT_TRUE(std::isinf(lse) && lse < 0) << "row " << i;
          for (int64_t c = 0; c < 8; ++c) {
            EXPECT_EQ(r.o[(h * 5 + i) * 8 + c], 0.0f);
            EXPECT_EQ(r.dq[(h * 5 + i) * 8 + c], 0.0f);
          }
        } else {
          EXPECT_TRUE(std::isfinite(lse)) << "row " << i;
        }
      }
    // The rows that see keys still agree with the oracle (loosely: FP8 rounds).
    const auto e = test::errors_of(s, in, ref, r);
    EXPECT_LT(e.o_rel_err, prec == AttnPrecision::FP8 ? 0.15 : 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(AllPrecisionsAndForms, Identities,
                         ::testing::Values(IdCase{AttnPrecision::FP64, AttnForm::Whole},
                                           IdCase{AttnPrecision::FP64, AttnForm::Flash},
                                           IdCase{AttnPrecision::BF16, AttnForm::Whole},
                                           IdCase{AttnPrecision::BF16, AttnForm::Flash},
                                           IdCase{AttnPrecision::FP8, AttnForm::Whole},
                                           IdCase{AttnPrecision::FP8, AttnForm::Flash}),
                         [](const auto& info) {
                           return test::name_of(info.param.precision, info.param.form);
                         });

}  // namespace
