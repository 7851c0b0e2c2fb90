// tests/attention/dq_projection_test.cpp — the dQ row-sum projection (AttentionConfig::
// dq_projection, docs/delta-matching.md §"The dQ row-sum projection") against the FP64 oracle on
// the case of keys that share a common component ~100x their spread (attention
// sinks, massive activations). Rounding dS to FP8 breaks its zero row sum, and dQ = τ dŜK̂
// multiplies that error by the common component; subtracting τ r̂_i k̄ removes it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "attention/attention_test_util.h"

namespace octet::test {
namespace {

double dq_error(const AttentionShape& s, const AttentionInputs& in, AttnForm form, DeltaMode delta,
                bool projection) {
  AttentionConfig c = make_config(AttnPrecision::FP8, form, delta);
  c.dq_projection = projection;
  return errors_of(s, in, run_attention_oracle(s, in), run_attention(s, c, in)).dq_rel_err;
}

TEST(DqProjection, RemovesTheCommonKeyComponentsError) {
  const AttentionShape s = make_shape(1, 2, 2, 192, 192, 64, false);
  const AttentionInputs plain = common_key_inputs(s, false, 11), common = common_key_inputs(s, true, 11);
  for (AttnForm form : {AttnForm::Whole, AttnForm::Flash}) {
    const double base = dq_error(s, plain, form, DeltaMode::Matched, false);
    const double off = dq_error(s, common, form, DeltaMode::Matched, false);
    const double on = dq_error(s, common, form, DeltaMode::Matched, true);
    const double stale_off = dq_error(s, common, form, DeltaMode::Stale, false);
    const double stale_on = dq_error(s, common, form, DeltaMode::Stale, true);
    std::printf(
        "form %s: dQ rel err no common component %.3g; common component: matched %.3g, "
        "matched + projection %.3g, stale %.3g, stale + projection %.3g\n",
        to_string(form).c_str(), base, off, on, stale_off, stale_on);
    EXPECT_GT(off, 10 * base) << "the case must show the common component's error";
    EXPECT_LE(on, 2 * base) << "projection: within 2x of the no-common-component error";
    EXPECT_LT(stale_on, stale_off);
  }
}

TEST(DqProjection, ChangesNothingInFp64AndNothingWithoutCommonComponent) {
  // In FP64 dS is not rounded and the matched delta makes Σ_j dS_ij ~ 1e-16: the projection is a
  // no-op to rounding. Without a common component it may move dQ only within FP8 error.
  const AttentionShape s = make_shape(1, 2, 1, 33, 70, 64, true);  // causal, Tq != Tk, GQA
  const AttentionInputs in = make_attention_inputs(s, AttnInputDist::Normal, 5);
  AttentionConfig c = make_config(AttnPrecision::FP64, AttnForm::Whole, DeltaMode::Matched);
  const RunResult a = run_attention(s, c, in);
  c.dq_projection = true;
  const RunResult b = run_attention(s, c, in);
  double diff = 0, norm = 0;
  for (size_t e = 0; e < a.dq.size(); ++e) {
    diff = std::fmax(diff, std::fabs(double(a.dq[e]) - double(b.dq[e])));
    norm = std::fmax(norm, std::fabs(double(a.dq[e])));
  }
  EXPECT_LE(diff, 1e-6 * norm);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

}  // namespace
}  // namespace octet::test
