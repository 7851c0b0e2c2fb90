// The one matched-delta rule (octet/delta_rule.h), used by the CPU reference and the CUDA kernels:
//  - a row that sees one key (P = 1) gets dS = 0 exactly;
//  - the FP64 sums make D independent of the order and grouping of the keys (the GPU reduces per
//    thread, then per warp and block) to within one FP32 ulp, and equal to an FP64 reference;
//  - the zero row sum holds for the P actually used, even when that P sums to 1 only to FP32
//    rounding, and in the rows that broke the former pivot rule on the GPU (NoPE layer 0:
//    hundreds of exactly tied max logits whose dP is 0, the rest of the P mass tiny);
//  - in attention, rows with a dominant key keep the matched row residual <= 1e-6 in both forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "attention_test_util.h"
#include "octet/delta_rule.h"

using namespace octet;

namespace {

// r = |Σ_j dS_ij| / Σ_j P_ij (|dP_ij| + |D_i|), dS rounded to FP32 as the kernels store it.
double row_residual(const std::vector<float>& P, const std::vector<float>& dP, RowDelta<float> d) {
  double sum = 0, mag = 0;
  for (size_t j = 0; j < P.size(); ++j) {
    sum += double(d.ds(P[j], dP[j]));
    mag += double(P[j]) * (std::fabs(double(dP[j])) + std::fabs(double(d.value)));
  }
  return mag > 0 ? std::fabs(sum) / mag : 0.0;
}

RowDelta<float> matched(const std::vector<float>& P, const std::vector<float>& dP) {
  MatchedSums s;
  for (size_t j = 0; j < P.size(); ++j) s.add(P[j], dP[j]);
  return s.delta<float>();
}

TEST(DeltaRule, OneKeyRowGivesExactlyZeroDs) {
  for (float dp : {-3.25f, 1e-7f, 1234.5f, 0.0f, -1e-30f}) {
    const RowDelta<float> d = matched({1.0f}, {dp});
    EXPECT_EQ(d.value, dp);
    EXPECT_EQ(d.ds(1.0f, dp), 0.0f) << "dP " << dp;
  }
  EXPECT_EQ(MatchedSums{}.delta<float>().value, 0.0f);  // a row without keys
  EXPECT_EQ(RowDelta<float>::stale(2.5f).ds(0.5f, 4.5f), 1.0f);
}

TEST(DeltaRule, AnyGroupingGivesTheSameDelta) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (bool dominant : {false, true}) {
    const int n = 1000, star = 613;
    std::vector<float> P(n), dP(n);
    double total = 0;
    for (int j = 0; j < n; ++j) total += P[j] = std::exp(u(rng));
    if (dominant) {
      P[star] = float(total * 9);  // P_star = 0.9 after normalization
      total += P[star];
    }
    for (int j = 0; j < n; ++j) {
      P[j] = float(P[j] / total);
      dP[j] = u(rng);
    }
    double pdp = 0, psum = 0;  // FP64 reference, in key order
    for (int j = 0; j < n; ++j) pdp += double(P[j]) * dP[j], psum += P[j];
    const float ref = float(pdp / psum);
    // 256 "threads" with strided keys, a butterfly over 32 lanes, then 8 "warps"; and reversed.
    std::vector<MatchedSums> lanes(256);
    for (int j = 0; j < n; ++j) lanes[j % 256].add(P[j], dP[j]);
    for (int off = 16; off > 0; off /= 2) {
      std::vector<MatchedSums> next(lanes);
      for (int t = 0; t < 256; ++t) next[t] += lanes[t ^ off];
      lanes = next;
    }
    MatchedSums tree, reversed;
    for (int w = 0; w < 8; ++w) tree += lanes[w * 32];
    for (int j = n - 1; j >= 0; --j) reversed.add(P[j], dP[j]);
    for (const MatchedSums* s : {&tree, &reversed}) {
      const float v = s->delta<float>().value;
      EXPECT_LE(std::fabs(v - ref), std::fabs(std::nextafter(ref, 2 * ref + 1) - ref)) << dominant;
    }
  }
}

// P from exp(S − m)/l in FP32 sums to 1 only to ~1e-7; the division by Σ P keeps Σ dS at 0.
TEST(DeltaRule, ZeroRowSumWhenPDoesNotSumToOne) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + trial * 83;
    std::vector<float> S(n), P(n), dP(n);
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < n; ++j) m = std::max(m, S[j] = g(rng));
    for (int j = 0; j < n; ++j) l += std::exp(S[j] - m);
    for (int j = 0; j < n; ++j) {
      P[j] = std::exp(S[j] - m) / l;
      dP[j] = 1e-3f * g(rng) + 0.5f;  // a common offset: Σ dS cancels terms ~500x larger
    }
    EXPECT_LE(row_residual(P, dP, matched(P, dP)), 1e-6) << "n " << n;
  }
}

// The row shape that broke the former rule (pivot dÔ·O) on the GPU, NoPE layer 0 at lr 3e-3:
// 216 keys tied at the max logit (one repeated token) whose V̂ quantized to 0, so dP = 0 there;
// the rest of the P mass is ~e^-60 with dP ~1e-7; D ~1e-30.
TEST(DeltaRule, TiedMaxKeysWithZeroDpKeepTheResidual) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), gap(40.0f, 100.0f);
  for (int tied : {9, 73, 216}) {
    const int n = 800;
    std::vector<float> S(n), P(n), dP(n);
    for (int j = 0; j < n; ++j) {
      const bool top = j % (n / tied) == 0 && j / (n / tied) < tied;
      S[j] = top ? 98.04f : 98.04f - gap(rng);
      dP[j] = top ? 0.0f : 1e-6f * u(rng);
    }
    float l = 0.0f;
    for (int j = 0; j < n; ++j) l += std::exp(S[j] - 98.04f);
    for (int j = 0; j < n; ++j) P[j] = std::exp(S[j] - 98.04f) / l;
    const RowDelta<float> d = matched(P, dP);
    EXPECT_LE(row_residual(P, dP, d), 1e-6) << tied;
    // The former rule's failure: a pivot far from D (here 1e-10, as dÔ·O was) leaves the rounding
    // of (dP − pivot) at |pivot|'s scale, orders of magnitude above the row's gradient.
    const float pivot = 1e-10f;
    float offset = 0.0f;
    for (int j = 0; j < n; ++j) offset += P[j] * (dP[j] - pivot);
    double sum = 0, mag = 0;
    for (int j = 0; j < n; ++j) {
      sum += double(P[j] * ((dP[j] - pivot) - offset));
      mag += double(P[j]) * (std::fabs(double(dP[j])) + std::fabs(double(pivot + offset)));
    }
    EXPECT_GT(std::fabs(sum) / mag, 1e-4) << "the test row no longer exercises the failure";
  }
}

// Key 0 lengthened along the sink direction: logit ~12.8 above the rest, P_0 > 1/2 in every row.
TEST(DeltaRule, DominantKeyRowsKeepTheMatchedResidual) {
  for (bool causal : {false, true}) {
    const auto s = test::make_shape(1, 4, 2, 64, 64, 32, causal);
    auto in = make_attention_inputs(s, AttnInputDist::Sink, 4);
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t c = 0; c < 32; ++c) in.k[size_t(g * 64 * 32 + c)] *= 1.6f;
    for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
      const auto r =
          test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in, true);
      EXPECT_LE(r.stats.row_residual_max, 1e-6) << to_string(form) << (causal ? " causal" : "");
      if (causal) {  // row 0 of each head sees one key: dS = 0 exactly, so the residual is 0
        for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(r.stats.row_residual[size_t(h * 64)], 0.0);
      }
    }
  }
}

// The GPU test's twin (tests/cuda/attention/attention_rows_test.cpp): every 4th key is one repeated token —
// the same K row, tied exactly at the max logit — whose V row is 0, so dP = 0 on the tied keys.
TEST(DeltaRule, TiedMaxKeysWithZeroValueKeepTheMatchedResidual) {
  const auto s = test::make_shape(2, 4, 2, 256, 256, 64, true);
  const auto in = test::tied_max_key_inputs(s, 9);
  for (auto form : {AttnForm::Whole, AttnForm::Flash}) {
    const auto r =
        test::run_attention(s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in, true);
    size_t worst = 0;
    for (size_t i = 0; i < r.stats.row_residual.size(); ++i)
      if (r.stats.row_residual[i] > r.stats.row_residual[worst]) worst = i;
    EXPECT_LE(r.stats.row_residual_max, 1e-6) << to_string(form) << " worst row " << worst;
  }
}

}  // namespace
